# Conformance harness: drives $(PLUGIN_SO) as NCCL does (v8..v11 tables).
CONFORMANCE := $(BUILD)/tests/conformance-test
$(eval $(call rn_harness_prog,$(CONFORMANCE),$(BUILD)/tests/conformance/conformance.o))

TEST_PROGS += $(CONFORMANCE)

# A transport that offers no device fails the suite, never skips it.
TEST_SCRIPTS += tests/conformance/no-device.sh
