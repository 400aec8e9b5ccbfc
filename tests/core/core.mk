# Core unit tests (TAP through tests/common/tap.c): test_vdev calls the
# device table directly through the plugin's internal library;
# test_make_vdevice and test_vdev_reinit load the .so as NCCL does.
CORE_TEST_VDEV := $(BUILD)/tests/core/test_vdev
$(CORE_TEST_VDEV): $(BUILD)/tests/core/test_vdev.o $(BUILD)/tests/common/tap.o $(PLUGIN_LIB) $(TOPO_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ $(TOPO_LIBS) -ldl -lpthread
TEST_PROGS += $(CORE_TEST_VDEV)
CORE_TEST_MKVDEV := $(BUILD)/tests/core/test_make_vdevice
$(eval $(call rn_harness_prog,$(CORE_TEST_MKVDEV),$(BUILD)/tests/core/test_make_vdevice.o))
TEST_PROGS += $(CORE_TEST_MKVDEV)
CORE_TEST_REINIT := $(BUILD)/tests/core/test_vdev_reinit
$(eval $(call rn_harness_prog,$(CORE_TEST_REINIT),$(BUILD)/tests/core/test_vdev_reinit.o))
TEST_PROGS += $(CORE_TEST_REINIT)
# ncclNet v12 ids and the 8-device makeVDevice bound, end to end: the
# program runs inside the namespace tests/core/v12-ids.sh builds.
CORE_TEST_V12 := $(BUILD)/tests/core/test_v12_ids
$(eval $(call rn_harness_prog,$(CORE_TEST_V12),$(BUILD)/tests/core/test_v12_ids.o))
test: $(CORE_TEST_V12)
TEST_SCRIPTS += tests/core/v12-ids.sh
