# Plugin-level benchmark (built by `make`, run by `make bench`, never by
# `make test`): railnet vs iperf3 / plain TCP on this host.
RN_BENCH := $(BUILD)/tests/railnet-bench
RN_BENCH_OBJS := $(BUILD)/tests/bench/bench.o \
  $(patsubst %.c,$(BUILD)/%.o,tests/common/tap.c tests/common/netapi.c tests/common/pair.c tests/common/stream.c)

$(RN_BENCH): $(RN_BENCH_OBJS) | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread

BENCH_PROGS += $(RN_BENCH)

# `make bench` (the top-level Makefile declares the target phony).
bench: $(RN_BENCH) $(PLUGIN_SO)
	RN_BUILD=$(BUILD) tests/bench/run-bench.sh $(BENCH_ARGS)

# Planner speed (tests/bench/topo_bench.c): built by `make`, run by hand.
TOPO_BENCH := $(BUILD)/tests/topo_bench
BENCH_PROGS += $(TOPO_BENCH)
$(TOPO_BENCH): $(BUILD)/tests/bench/topo_bench.o $(TOPO_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(TOPO_LIB) $(TOPO_LIBS)
