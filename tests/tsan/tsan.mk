# `make tsan`: the suite's threaded part under ThreadSanitizer, built into
# build-tsan/ (TSAN=1).  NCCL calls in from several proxy threads, and the
# TCP transport's progress engine moves bytes on helper threads of its
# own; these programs run several threads through the plugin at once:
#   the conformance suite (threads calling init and the data path
#   together), again with helper threads moving the TCP streams
#   (helpers.sh), the progress engine's churn, close-while-busy and fork
#   test (test_engine), connection reuse and data streams opened on demand
#   with helper threads on (test_pool, test_lazy), the MR cache from
#   several threads (test_mr_cache), the planner from several threads
#   (topo_api).
# Not here: test_churn (its 16 MiB messages, copied under the sanitizer,
# outlast its bounds; test_engine drives the same engine) and the tests
# with one thread per process.  Any report fails its program (exit 66);
# time bounds are scaled x10 (RN_TIMEOUT_SCALE, tests/common/test-env.sh).
TSAN_PROGS += $(BUILD)/tests/conformance-test $(BUILD)/tests/tcp/test_engine \
  $(BUILD)/tests/tcp/test_pool $(BUILD)/tests/tcp/test_lazy $(BUILD)/tests/ib/test_mr_cache \
  $(BUILD)/tests/topo_api
TSAN_SCRIPTS += tests/tcp/helpers.sh

.PHONY: tsan
ifeq ($(TSAN),1)
tsan: all $(TSAN_PROGS)
	RN_BUILD=$(BUILD) tests/common/with-test-env.sh prove -f $(TSAN_PROGS) $(TSAN_SCRIPTS)
else
tsan:
	$(MAKE) TSAN=1 tsan
endif
