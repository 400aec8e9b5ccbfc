# The RAILNET_* knobs and their NCCL_* fallbacks through the v11 ABI
# (range WARNs, echoes, which variable wins, and their effect).
PARAMS_TEST := $(BUILD)/tests/params/test_params
$(PARAMS_TEST): $(BUILD)/tests/params/test_params.o | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread
TEST_PROGS += $(PARAMS_TEST)
