# The grouped-receive matching rule through the ncclNet API (transport-
# neutral: TCP on loopback here, verbs in the Soft-RoCE VM).
MATCHING := $(BUILD)/tests/matching-test
$(eval $(call rn_harness_prog,$(MATCHING),$(BUILD)/tests/matching/matching.o))

TEST_PROGS += $(MATCHING)
