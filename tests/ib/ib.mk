# Verbs transport tests.  test_mr_cache runs anywhere (no hardware);
# softroce.sh runs the conformance suite over real verbs inside a Soft-RoCE
# VM and skips where no VM can be built.
IB_MR_TEST := $(BUILD)/tests/ib/test_mr_cache
$(IB_MR_TEST): $(BUILD)/tests/ib/test_mr_cache.o $(PLUGIN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread

TEST_PROGS += $(IB_MR_TEST)

# Verbs checks and numbers through the plugin ABI (run inside the VM by
# scripts/softroce/ib-suite.sh; on a host without RDMA it has no device).
IB_BENCH := $(BUILD)/tests/ib/ib_bench
$(IB_BENCH): $(BUILD)/tests/ib/ib_bench.o \
  $(patsubst %.c,$(BUILD)/%.o,tests/common/tap.c tests/common/netapi.c tests/common/pair.c tests/common/stream.c) | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread

BENCH_PROGS += $(IB_BENCH)

TEST_SCRIPTS += tests/ib/softroce.sh
