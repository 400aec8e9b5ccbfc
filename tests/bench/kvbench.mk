# railnet-kvbench: KV-cache transfer benchmark through the ncclNet API
# (tests/bench/kv*.c), built by `make` into $(BUILD)/ like railnet-topo and
# installed by `make install`.  `make test` runs a seconds-long smoke run
# with every byte verified (tests/bench/kvbench-smoke.sh) and the
# non-GPU parts of scripts/gpu-check.sh (tests/bench/gpu-check.sh).
KVBENCH := $(BUILD)/railnet-kvbench
KVBENCH_SRCS := tests/bench/kvbench.c tests/bench/kv_model.c tests/bench/kv_proxy.c \
  tests/bench/kv_net.c tests/bench/kv_tcp.c tests/bench/kv_ping.c tests/bench/kv_report.c
KVBENCH_OBJS := $(KVBENCH_SRCS:%.c=$(BUILD)/%.o) \
  $(patsubst %.c,$(BUILD)/%.o,tests/common/tap.c tests/common/netapi.c)

$(KVBENCH): $(KVBENCH_OBJS) | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread

BENCH_PROGS += $(KVBENCH)
TEST_SCRIPTS += tests/bench/kvbench-smoke.sh tests/bench/gpu-check.sh


.PHONY: kvbench install-kvbench uninstall-kvbench
# `make kvbench [KVBENCH_ARGS=--quick]`
kvbench: $(KVBENCH) $(PLUGIN_SO)
	RN_BUILD=$(BUILD) $(KVBENCH) $(KVBENCH_ARGS)

install: install-kvbench
install-kvbench: $(KVBENCH)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(KVBENCH) $(DESTDIR)$(PREFIX)/bin/

# make uninstall removes what make install put (tests/deb/packaging.sh)
uninstall: uninstall-kvbench
uninstall-kvbench:
	rm -f $(DESTDIR)$(PREFIX)/bin/railnet-kvbench
