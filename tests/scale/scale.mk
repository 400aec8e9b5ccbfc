# Scale tests: many comms in one process pair (tests/scale/).
SCALE_MANY_CONNECTS := $(BUILD)/tests/scale/many-connects
$(SCALE_MANY_CONNECTS): $(BUILD)/tests/scale/many_connects.o $(RN_TEST_COMMON_OBJS) | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread
TEST_PROGS += $(SCALE_MANY_CONNECTS)
# Comms when ephemeral ports are scarce: the program runs inside the
# namespace tests/scale/port-range.sh builds.
SCALE_PORT_RANGE := $(BUILD)/tests/scale/port-range
$(eval $(call rn_harness_prog,$(SCALE_PORT_RANGE),$(BUILD)/tests/scale/port_range.o))
test: $(SCALE_PORT_RANGE)
TEST_SCRIPTS += tests/scale/port-range.sh
