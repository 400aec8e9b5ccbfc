# topo tests (owned by topo/).  TAP programs under $(BUILD)/tests/, run by
# prove from the repository root.
TOPO_TEST_NAMES := topo_fixture_plans topo_shared_topologies topo_api topo_errors
TOPO_TESTS := $(addprefix $(BUILD)/tests/,$(TOPO_TEST_NAMES))
TOPO_TEST_RUNNER := $(BUILD)/tests/topo/expect_runner.o
EXTRA_CFLAGS_tests_topo_ := -Itopo

TEST_PROGS += $(TOPO_TESTS)
TEST_SCRIPTS += tests/topo/cli_exit_codes.sh tests/topo/plan_quality.sh

$(TOPO_TESTS): $(BUILD)/tests/%: $(BUILD)/tests/topo/%.o $(TOPO_TEST_RUNNER) $(TOPO_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -pthread -o $@ $< $(TOPO_TEST_RUNNER) $(TOPO_LIB) $(TOPO_LIBS)

# The plan-quality table: built by `make`, run by tests/topo/plan_quality.sh.
TOPO_QUALITY := $(BUILD)/tests/topo_plan_quality
BENCH_PROGS += $(TOPO_QUALITY)
$(TOPO_QUALITY): $(BUILD)/tests/%: $(BUILD)/tests/topo/%.o $(TOPO_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(TOPO_LIB) $(TOPO_LIBS)
