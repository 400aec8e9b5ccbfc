# TCP transport variants of the conformance suite and the corruption
# harness, and the link-down test in two network namespaces.
TEST_SCRIPTS += tests/tcp/ipv6.sh tests/tcp/helpers.sh tests/tcp/small-flood.sh tests/tcp/small-chunks.sh \
  tests/tcp/corrupt-helpers.sh tests/tcp/linkdown.sh
TCP_EAGER_TEST := $(BUILD)/tests/tcp/test_eager_oversize
$(eval $(call rn_harness_prog,$(TCP_EAGER_TEST),$(BUILD)/tests/tcp/test_eager_oversize.o))
TEST_PROGS += $(TCP_EAGER_TEST)
# Small receives' batched clear-to-sends reach a sender out of eager credit.
TCP_CTS_BATCH_TEST := $(BUILD)/tests/tcp/test_cts_batch
$(eval $(call rn_harness_prog,$(TCP_CTS_BATCH_TEST),$(BUILD)/tests/tcp/test_cts_batch.o))
TEST_PROGS += $(TCP_CTS_BATCH_TEST)
# An eager send above 8 KiB completes once matched; too big, in its own test().
TCP_EAGER_LARGE_TEST := $(BUILD)/tests/tcp/test_eager_large
$(eval $(call rn_harness_prog,$(TCP_EAGER_LARGE_TEST),$(BUILD)/tests/tcp/test_eager_large.o))
TEST_PROGS += $(TCP_EAGER_LARGE_TEST)
# Messages of one tag reaching the receiver out of send order (a streamed
# one's claiming chunks behind a later header) fill the buffers of their rank.
TCP_CLAIM_ORDER_TEST := $(BUILD)/tests/tcp/test_claim_order
$(eval $(call rn_harness_prog,$(TCP_CLAIM_ORDER_TEST),$(BUILD)/tests/tcp/test_claim_order.o))
TEST_PROGS += $(TCP_CLAIM_ORDER_TEST)

# A sender away past RAILNET_RAIL_TIMEOUT_MS with its ACK unread is no stall.
TCP_AWAY_TEST := $(BUILD)/tests/tcp/test_away
$(eval $(call rn_harness_prog,$(TCP_AWAY_TEST),$(BUILD)/tests/tcp/test_away.o))
TEST_PROGS += $(TCP_AWAY_TEST)

# A peer whose process stops (its host answers) is waited for, not failed.
TCP_FROZEN_TEST := $(BUILD)/tests/tcp/test_frozen
$(eval $(call rn_harness_prog,$(TCP_FROZEN_TEST),$(BUILD)/tests/tcp/test_frozen.o))
TEST_PROGS += $(TCP_FROZEN_TEST)
TCP_FROZEN_OPEN_TEST := $(BUILD)/tests/tcp/test_frozen_open
$(eval $(call rn_harness_prog,$(TCP_FROZEN_OPEN_TEST),$(BUILD)/tests/tcp/test_frozen_open.o))
TEST_PROGS += $(TCP_FROZEN_OPEN_TEST)

# The corruption harness: an in-process proxy rewrites live TCP headers
# (tests/tcp/test_corrupt.c); it links the transport's wire helpers.
TCP_CORRUPT_TEST := $(BUILD)/tests/tcp/test_corrupt
$(eval $(call rn_harness_prog,$(TCP_CORRUPT_TEST),$(BUILD)/tests/tcp/test_corrupt.o $(BUILD)/plugin/tcp/wire.o))
TEST_PROGS += $(TCP_CORRUPT_TEST)

# Run by linkdown.sh inside two network namespaces.
TCP_LINKDOWN_TEST := $(BUILD)/tests/tcp/test_linkdown
$(eval $(call rn_harness_prog,$(TCP_LINKDOWN_TEST),$(BUILD)/tests/tcp/test_linkdown.o))
test: $(TCP_LINKDOWN_TEST)

# Many comms on threads, random grouped receives and sizes, streams closing
# and opening between messages; each configuration in a bounded child.
TCP_CHURN_TEST := $(BUILD)/tests/tcp/test_churn
$(eval $(call rn_harness_prog,$(TCP_CHURN_TEST),$(BUILD)/tests/tcp/test_churn.o))
TEST_PROGS += $(TCP_CHURN_TEST)

# The progress engine with helper threads on: many comms, churn from
# several threads, closes with work queued, a fork (tests/tcp/test_engine.c).
TCP_ENGINE_TEST := $(BUILD)/tests/tcp/test_engine
$(eval $(call rn_harness_prog,$(TCP_ENGINE_TEST),$(BUILD)/tests/tcp/test_engine.o))
TEST_PROGS += $(TCP_ENGINE_TEST)
# Traffic classes on the sockets of a send comm (getsockopt), v10 and v11.
TCP_TC_TEST := $(BUILD)/tests/tcp/test_traffic_class
$(eval $(call rn_harness_prog,$(TCP_TC_TEST),$(BUILD)/tests/tcp/test_traffic_class.o))
TEST_PROGS += $(TCP_TC_TEST)
# A sender that closes right after its last send loses nothing.
TCP_CLOSE_TEST := $(BUILD)/tests/tcp/test_close
$(eval $(call rn_harness_prog,$(TCP_CLOSE_TEST),$(BUILD)/tests/tcp/test_close.o))
TEST_PROGS += $(TCP_CLOSE_TEST)
# Connection reuse across comms: kept after a quiescent close, reused by
# the next pair, never after anything was left in flight; fork, bounds.
TCP_POOL_TEST := $(BUILD)/tests/tcp/test_pool
$(eval $(call rn_harness_prog,$(TCP_POOL_TEST),$(BUILD)/tests/tcp/test_pool.o))
TEST_PROGS += $(TCP_POOL_TEST)
# A send that needs a clear-to-send held back for a batch asks for it (WANT).
TCP_WANT_TEST := $(BUILD)/tests/tcp/test_want
$(eval $(call rn_harness_prog,$(TCP_WANT_TEST),$(BUILD)/tests/tcp/test_want.o))
TEST_PROGS += $(TCP_WANT_TEST)
# Each side posts a receive, then a send it waits on alone: the clear-to-sends
# each holds back for a batch still reach the other.
TCP_MUTUAL_TEST := $(BUILD)/tests/tcp/test_mutual_wait
$(eval $(call rn_harness_prog,$(TCP_MUTUAL_TEST),$(BUILD)/tests/tcp/test_mutual_wait.o))
TEST_PROGS += $(TCP_MUTUAL_TEST)
# Each side tests only its receive while its own send has yet to move.
TCP_WAIT_OTHER_TEST := $(BUILD)/tests/tcp/test_wait_other
$(eval $(call rn_harness_prog,$(TCP_WAIT_OTHER_TEST),$(BUILD)/tests/tcp/test_wait_other.o))
TEST_PROGS += $(TCP_WAIT_OTHER_TEST)

# Data streams opened at the first large message and closed when idle,
# with helper threads off and on (tests/tcp/test_lazy.c).
TCP_LAZY_TEST := $(BUILD)/tests/tcp/test_lazy
$(eval $(call rn_harness_prog,$(TCP_LAZY_TEST),$(BUILD)/tests/tcp/test_lazy.o))
TEST_PROGS += $(TCP_LAZY_TEST)

# Sides with different rail counts, connected and left alone past the idle
# time (tests/tcp/test_rail_mismatch.c).
TCP_RAIL_MISMATCH_TEST := $(BUILD)/tests/tcp/test_rail_mismatch
$(eval $(call rn_harness_prog,$(TCP_RAIL_MISMATCH_TEST),$(BUILD)/tests/tcp/test_rail_mismatch.o))
TEST_PROGS += $(TCP_RAIL_MISMATCH_TEST)

# Which rails a connection goes over when the two devices have a different
# number of them: the planning alone, no connection (tests/tcp/test_pairing.c).
TCP_PAIRING_TEST := $(BUILD)/tests/tcp/test_pairing
$(TCP_PAIRING_TEST): $(BUILD)/tests/tcp/test_pairing.o $(BUILD)/tests/common/tap.o $(PLUGIN_LIB) $(TOPO_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread

TEST_PROGS += $(TCP_PAIRING_TEST)
