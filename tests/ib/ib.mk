# Verbs transport tests.  test_mr_cache runs anywhere (no hardware);
# softroce.sh runs the conformance suite over real verbs inside a Soft-RoCE
# VM and skips where no VM can be built.
include plugin/ib.mk

IB_MR_TEST := $(BUILD)/tests/ib/test_mr_cache
$(IB_MR_TEST): $(BUILD)/tests/ib/test_mr_cache.o $(BUILD)/plugin/mr_cache.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread

TEST_PROGS += $(IB_MR_TEST)
