# Core unit tests (TAP through tests/common/tap.c): test_vdev calls the
# device table directly through the plugin's internal library;
# test_make_vdevice loads the .so as NCCL does.
CORE_TEST_VDEV := $(BUILD)/tests/core/test_vdev
$(CORE_TEST_VDEV): $(BUILD)/tests/core/test_vdev.o $(BUILD)/tests/common/tap.o $(PLUGIN_LIB) $(TOPO_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ $(TOPO_LIBS) -ldl -lpthread
TEST_PROGS += $(CORE_TEST_VDEV)
CORE_TEST_MKVDEV := $(BUILD)/tests/core/test_make_vdevice
$(CORE_TEST_MKVDEV): $(BUILD)/tests/core/test_make_vdevice.o $(BUILD)/tests/common/tap.o | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl
TEST_PROGS += $(CORE_TEST_MKVDEV)
