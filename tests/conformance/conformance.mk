# Conformance harness: drives $(PLUGIN_SO) as NCCL does (v8..v11 tables).
CONFORMANCE := $(BUILD)/tests/conformance-test
CONFORMANCE_OBJS := $(BUILD)/tests/conformance/conformance.o \
  $(patsubst %.c,$(BUILD)/%.o,tests/common/tap.c tests/common/netapi.c tests/common/pair.c tests/common/stream.c)

$(CONFORMANCE): $(CONFORMANCE_OBJS) | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread

TEST_PROGS += $(CONFORMANCE)

# A transport that offers no device fails the suite, never skips it.
TEST_SCRIPTS += tests/conformance/no-device.sh
