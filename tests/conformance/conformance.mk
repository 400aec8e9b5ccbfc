# Conformance harness: drives $(PLUGIN_SO) as NCCL does (v8..v11 tables).
CONFORMANCE := $(BUILD)/tests/conformance-test
CONFORMANCE_OBJS := $(BUILD)/tests/conformance/conformance.o \
  $(patsubst %.c,$(BUILD)/%.o,tests/common/tap.c tests/common/netapi.c tests/common/pair.c tests/common/stream.c)

$(CONFORMANCE): $(CONFORMANCE_OBJS) | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl -lpthread

TEST_PROGS += $(CONFORMANCE)

# `make valgrind`: the conformance suite (v8 and v11) under memcheck.  The
# harness forks without exec, so valgrind follows both children; any
# memcheck error makes that child exit 99, which fails its case.
VALGRIND ?= valgrind
valgrind: $(CONFORMANCE) $(PLUGIN_SO)
	RN_BUILD=$(BUILD) RN_CONF_TIMEOUT_SCALE=20 $(VALGRIND) -q --error-exitcode=99 --leak-check=full \
	  --errors-for-leak-kinds=definite --show-leak-kinds=definite --child-silent-after-fork=no \
	  $(CONFORMANCE) --api v8,v11
