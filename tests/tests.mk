# Test programs.  Each area appends to TEST_PROGS (compiled TAP programs)
# and TEST_SCRIPTS (executable shell scripts that print TAP) in its own
# tests/<area>/*.mk, and may name programs for memcheck in VALGRIND_PROGS.
# `make test` runs them all under prove, which ends with the pass/fail
# count.  A test that cannot run here prints "1..0 # SKIP <why>".
TEST_PROGS :=
TEST_SCRIPTS :=
BENCH_PROGS :=
VALGRIND_PROGS :=

include $(sort $(wildcard tests/*/*.mk))

all: $(BENCH_PROGS)

.PHONY: check valgrind
test: all $(TEST_PROGS)
	RN_BUILD=$(BUILD) prove -f $(TEST_PROGS) $(TEST_SCRIPTS)

# memcheck over the plugin-level suites: any error or definite/indirect
# leak in any process makes that process exit 99, which fails its test.
VALGRIND := valgrind -q --error-exitcode=99 --leak-check=full \
  --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
  --suppressions=tests/valgrind.supp
valgrind: all $(VALGRIND_PROGS)
	RN_BUILD=$(BUILD) RN_TIMEOUT_SCALE=10 RN_VALGRIND=1 prove -f --exec '$(VALGRIND)' $(VALGRIND_PROGS)

# Everything CI runs: the suite, the suite under ASan+UBSan, memcheck.
check:
	$(MAKE) test
	$(MAKE) SAN=1 test
	$(MAKE) valgrind
