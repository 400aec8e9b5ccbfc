# Multi-rail tests on the railbed testbed (scripts/railbed/railbed.sh):
# multirail-xfer moves verified data over one comm, the receiver and the
# sender each in a network namespace of its own, while the testbed changes
# rates or cuts rails; built by `make` (scripts/railbed/bench.sh runs it).
# tests/multirail/two-rails.sh is the bounded TAP test `make test` runs.
MULTIRAIL_XFER := $(BUILD)/tests/multirail-xfer
$(eval $(call rn_harness_prog,$(MULTIRAIL_XFER),$(BUILD)/tests/multirail/xfer.o))

BENCH_PROGS += $(MULTIRAIL_XFER)
TEST_SCRIPTS += tests/multirail/two-rails.sh tests/multirail/standby.sh tests/multirail/waiting.sh \
  tests/multirail/leftout.sh tests/multirail/flap.sh tests/multirail/pairing.sh \
  tests/multirail/lossy.sh

# Several comm pairs with random grouped traffic while the rails fail one
# at a time (tests/multirail/chaos.c; tests/multirail/chaos.sh runs it).
MULTIRAIL_CHAOS := $(BUILD)/tests/multirail-chaos
$(eval $(call rn_harness_prog,$(MULTIRAIL_CHAOS),$(BUILD)/tests/multirail/chaos.o))
BENCH_PROGS += $(MULTIRAIL_CHAOS)
TEST_SCRIPTS += tests/multirail/chaos.sh
