# Fault tests: dead peers, closes with requests outstanding, size
# mismatches, bad arguments, garbage handles, stray connections.
FAULT := $(BUILD)/tests/fault-test
$(eval $(call rn_harness_prog,$(FAULT),$(BUILD)/tests/fault/fault.o))

TEST_PROGS += $(FAULT)
