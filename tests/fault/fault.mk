# Fault tests: dead peers, closes with requests outstanding, size
# mismatches, bad arguments, garbage handles, stray connections.
FAULT := $(BUILD)/tests/fault-test
FAULT_OBJS := $(BUILD)/tests/fault/fault.o \
  $(patsubst %.c,$(BUILD)/%.o,tests/common/tap.c tests/common/netapi.c tests/common/pair.c tests/common/stream.c)

$(FAULT): $(FAULT_OBJS) | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread

TEST_PROGS += $(FAULT)
