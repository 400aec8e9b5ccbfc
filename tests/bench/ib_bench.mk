# Verbs checks and numbers through the plugin ABI (built by `make`, run
# inside the Soft-RoCE VM by scripts/softroce/ib-suite.sh, never by `make
# test` directly; on a host without RDMA it has no device).
IB_BENCH := $(BUILD)/tests/bench/ib_bench
$(IB_BENCH): $(BUILD)/tests/bench/ib_bench.o \
  $(patsubst %.c,$(BUILD)/%.o,tests/common/tap.c tests/common/netapi.c tests/common/pair.c tests/common/stream.c) | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread

BENCH_PROGS += $(IB_BENCH)
