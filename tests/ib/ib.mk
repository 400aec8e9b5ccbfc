# Verbs transport tests.  test_mr_cache runs anywhere (no hardware);
# softroce.sh runs the conformance suite over real verbs inside a Soft-RoCE
# VM (with tests/bench/ib_bench as its verifier) and skips where no VM can
# be built.
IB_MR_TEST := $(BUILD)/tests/ib/test_mr_cache
$(IB_MR_TEST): $(BUILD)/tests/ib/test_mr_cache.o $(PLUGIN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread

TEST_PROGS += $(IB_MR_TEST)

TEST_SCRIPTS += tests/ib/softroce.sh

# The rogue peer (tests/ib/rogue.c): the plugin on one side, a peer that
# writes corrupt FIFO slots, immediates, sizes and connection info on the
# other.  It reads the comm layout from plugin/ib/ib.h and dials with the
# plugin's own rendezvous, so it needs verbs headers; run inside the
# Soft-RoCE VM by softroce.sh.
ifeq ($(HAVE_VERBS),1)
IB_ROGUE := $(BUILD)/tests/rogue-test
EXTRA_CFLAGS_tests_ib_ := $(VERBS_CFLAGS)
$(IB_ROGUE): $(BUILD)/tests/ib/rogue.o $(RN_TEST_COMMON_OBJS) $(PLUGIN_LIB) | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread
VM_PROGS += $(IB_ROGUE)
endif
