# Scale tests: many comms in one process pair (tests/scale/).
SCALE_MANY_CONNECTS := $(BUILD)/tests/scale/many-connects
$(SCALE_MANY_CONNECTS): $(BUILD)/tests/scale/many_connects.o $(RN_TEST_COMMON_OBJS) | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread
TEST_PROGS += $(SCALE_MANY_CONNECTS)
