# Verbs transport tests.  test_mr_cache runs anywhere (no hardware);
# softroce.sh runs the conformance suite over real verbs inside a Soft-RoCE
# VM (with tests/bench/ib_bench as its verifier) and skips where no VM can
# be built.
IB_MR_TEST := $(BUILD)/tests/ib/test_mr_cache
$(IB_MR_TEST): $(BUILD)/tests/ib/test_mr_cache.o $(PLUGIN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread

TEST_PROGS += $(IB_MR_TEST)

TEST_SCRIPTS += tests/ib/softroce.sh
