# Shared helpers of the plugin-level test programs (tests/common/).
# tests/*/*.mk are included in sorted order: the areas after common/ use
# what is set here; tests/bench/ (included before it) lists the helpers by
# path.
RN_TEST_COMMON_OBJS := $(patsubst %.c,$(BUILD)/%.o,tests/common/tap.c tests/common/netapi.c \
  tests/common/pair.c tests/common/stream.c tests/common/churn.c)

# $(call rn_harness_prog,PROGRAM,MAIN_OBJECT): a TAP program that loads the
# plugin .so as NCCL does, linked from its own object and the helpers.
define rn_harness_prog
$(1): $(2) $(RN_TEST_COMMON_OBJS) | $(PLUGIN_SO)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS_COMMON) -o $$@ $$^ -ldl -lpthread
endef

# A test script whose program was not built fails, never skips.
TEST_SCRIPTS += tests/common/not-built.sh
