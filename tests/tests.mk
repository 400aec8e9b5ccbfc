# Test programs.  Each area appends to TEST_PROGS (compiled TAP programs)
# and TEST_SCRIPTS (executable shell scripts that print TAP) in its own
# tests/<area>/*.mk.  `make valgrind` (tests/valgrind) runs part of the
# suite under memcheck.
# `make test` runs them all under prove, which ends with the pass/fail
# count, in the environment of tests/common/test-env.sh.  A test that
# cannot run here because a capability is missing prints
# "1..0 # SKIP <why>"; a failure is never a skip.
TEST_PROGS :=
TEST_SCRIPTS :=
BENCH_PROGS :=
# Built by `make`, run inside the Soft-RoCE VM by tests/ib/softroce.sh.
VM_PROGS :=

include $(sort $(wildcard tests/*/*.mk))

all: $(BENCH_PROGS) $(VM_PROGS)

.PHONY: check
test: all $(TEST_PROGS)
	RN_BUILD=$(BUILD) tests/common/with-test-env.sh prove -f $(TEST_PROGS) $(TEST_SCRIPTS)

# Everything CI runs: the suite, the suite under ASan+UBSan, memcheck,
# ThreadSanitizer.
check:
	$(MAKE) test
	$(MAKE) SAN=1 test
	$(MAKE) valgrind
	$(MAKE) tsan
