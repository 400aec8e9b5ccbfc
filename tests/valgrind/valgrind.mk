# `make valgrind`: part of the suite under memcheck (tests/valgrind/memcheck.sh).
# Under memcheck every program runs 20-50 times slower, so this covers the
# plugin's own code paths once each rather than the whole suite:
#   conformance (v8 to v12 over TCP), fault, the optional entry points
#   and knobs through the ABI, the core unit tests, the eager-oversize
#   regression, the MR cache, the verbs striping arithmetic, and the conformance suite again with helper
#   threads moving the TCP streams (tests/tcp/helpers.sh, through v11),
#   the progress engine's churn, close-while-busy and fork test, connection
#   reuse (kept connections, bytes out of turn, fork, bounds), data streams
#   opened on demand and closed idle (helpers off and on), messages of one
#   tag read out of send order (claiming chunks, eager ones held by rank),
#   and the v12 rail/plane ids and 8-device fusion (tests/core/v12-ids.sh).
# Not under memcheck: the IPv6, tiny-chunk and small-message-flood variants
# (the same code as above with other parameters), the topo tests (pure
# parsing and planning, checked under ASan+UBSan), the fuzzer (clang, its
# own sanitizers), the Soft-RoCE VM suite (verbs under emulation; ASan+UBSan
# runs it) and the packaging test.  Time bounds are scaled x10
# (RN_TIMEOUT_SCALE, tests/common/test-env.sh).
VALGRIND_PROGS += $(BUILD)/tests/conformance-test $(BUILD)/tests/fault-test \
  $(BUILD)/tests/core/test_vdev $(BUILD)/tests/core/test_make_vdevice \
  $(BUILD)/tests/tcp/test_eager_oversize $(BUILD)/tests/ib/test_mr_cache $(BUILD)/tests/ib/test_stripe \
  $(BUILD)/tests/params/test_params $(BUILD)/tests/tcp/test_engine $(BUILD)/tests/tcp/test_pool \
  $(BUILD)/tests/tcp/test_lazy $(BUILD)/tests/tcp/test_claim_order
VALGRIND_SCRIPTS += tests/tcp/helpers.sh tests/core/v12-ids.sh

.PHONY: valgrind
valgrind: all $(VALGRIND_PROGS)
	RN_BUILD=$(BUILD) RN_VALGRIND=1 HWLOC_COMPONENTS=-x86 tests/common/with-test-env.sh \
	  prove -f --exec tests/valgrind/memcheck.sh $(VALGRIND_PROGS) $(VALGRIND_SCRIPTS)
