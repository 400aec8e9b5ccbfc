# Verbs transport tests.  test_mr_cache runs anywhere (no hardware);
# softroce.sh runs the conformance suite over real verbs inside a Soft-RoCE
# VM (with tests/bench/ib_bench as its verifier) and skips where no VM can
# be built.
IB_MR_TEST := $(BUILD)/tests/ib/test_mr_cache
$(IB_MR_TEST): $(BUILD)/tests/ib/test_mr_cache.o $(PLUGIN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread

TEST_PROGS += $(IB_MR_TEST)

# The weighted striping of a group (plugin/ib/stripe.c): pure functions,
# no verbs headers needed.
IB_STRIPE_TEST := $(BUILD)/tests/ib/test_stripe
$(IB_STRIPE_TEST): $(BUILD)/tests/ib/test_stripe.o $(BUILD)/tests/common/tap.o $(PLUGIN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread

TEST_PROGS += $(IB_STRIPE_TEST)

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

# Verbs discovery and the GPU-memory probes on any host
# (tests/ib/test_discovery.c): the plugin loads stand-in libibverbs.so.1 and
# libcuda.so.1 builds from $(BUILD)/tests/ib/fake/<variant>/, chosen per
# case through LD_LIBRARY_PATH.  "-old" variants lack the optional entry
# points (ibv_reg_dmabuf_mr and _ibv_query_gid_ex; cuMemGetHandleForAddressRange).
ifeq ($(HAVE_VERBS),1)
IB_FAKE_DIR := $(BUILD)/tests/ib/fake
IB_FAKE_LIBS := $(IB_FAKE_DIR)/verbs/libibverbs.so.1 $(IB_FAKE_DIR)/verbs-old/libibverbs.so.1 \
  $(IB_FAKE_DIR)/cuda/libcuda.so.1 $(IB_FAKE_DIR)/cuda-old/libcuda.so.1
rn_fake_lib = @mkdir -p $(dir $@) && echo "  FAKE $@" && \
  $(CC) $(CFLAGS_COMMON) $(VERBS_CFLAGS) $(2) -shared -Wl,-soname,$(notdir $@) -o $@ $(1) -lpthread
$(IB_FAKE_DIR)/verbs/libibverbs.so.1: tests/ib/fake_verbs.c tests/ib/fake.h
	$(call rn_fake_lib,$<,)
$(IB_FAKE_DIR)/verbs-old/libibverbs.so.1: tests/ib/fake_verbs.c tests/ib/fake.h
	$(call rn_fake_lib,$<,-DFAKE_VERBS_OLD)
$(IB_FAKE_DIR)/cuda/libcuda.so.1: tests/ib/fake_cuda.c tests/ib/fake.h
	$(call rn_fake_lib,$<,)
$(IB_FAKE_DIR)/cuda-old/libcuda.so.1: tests/ib/fake_cuda.c tests/ib/fake.h
	$(call rn_fake_lib,$<,-DFAKE_CUDA_OLD)

IB_DISCOVERY_TEST := $(BUILD)/tests/ib/test_discovery
$(eval $(call rn_harness_prog,$(IB_DISCOVERY_TEST),$(BUILD)/tests/ib/test_discovery.o))
$(IB_DISCOVERY_TEST): | $(IB_FAKE_LIBS)
TEST_PROGS += $(IB_DISCOVERY_TEST)
endif

# Which rails of two verbs devices pair up (plugin/ib/pairing.c): RoCE by
# the kernel's routes, InfiniBand by subnet prefix, else in order; no
# verbs called, no packet sent.
ifeq ($(HAVE_VERBS),1)
IB_PAIRING_TEST := $(BUILD)/tests/ib/test_pairing
$(IB_PAIRING_TEST): $(BUILD)/tests/ib/test_pairing.o $(BUILD)/tests/common/tap.o $(PLUGIN_LIB) $(TOPO_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread
TEST_PROGS += $(IB_PAIRING_TEST)
endif
