# Conformance harness: drives $(PLUGIN_SO) as NCCL does (v8..v11 tables).
CONFORMANCE := $(BUILD)/tests/conformance-test
$(eval $(call rn_harness_prog,$(CONFORMANCE),$(BUILD)/tests/conformance/conformance.o))

TEST_PROGS += $(CONFORMANCE)

# `make valgrind`: the conformance and fault suites under memcheck.  The
# harness forks without exec, so memcheck follows every child; an error or
# a definite/indirect leak in any process makes it exit 99, which fails
# that case.  Time bounds are scaled by RN_TIMEOUT_SCALE.
RN_MEMCHECK := valgrind -q --error-exitcode=99 --leak-check=full \
  --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
  $(if $(wildcard tests/valgrind.supp),--suppressions=tests/valgrind.supp)
RN_MEMCHECK_PROGS := $(CONFORMANCE) $(BUILD)/tests/fault-test
.PHONY: valgrind
valgrind: $(RN_MEMCHECK_PROGS) $(PLUGIN_SO)
	RN_BUILD=$(BUILD) RN_TIMEOUT_SCALE=10 RN_VALGRIND=1 HWLOC_COMPONENTS=-x86 prove -f --exec '$(RN_MEMCHECK)' $(RN_MEMCHECK_PROGS)
# (also named for a tests.mk that runs VALGRIND_PROGS itself)
VALGRIND_PROGS += $(RN_MEMCHECK_PROGS)
