# TCP transport variants of the conformance suite.
TEST_SCRIPTS += tests/tcp/ipv6.sh tests/tcp/helpers.sh tests/tcp/small-flood.sh tests/tcp/small-chunks.sh
TCP_EAGER_TEST := $(BUILD)/tests/tcp/test_eager_oversize
$(TCP_EAGER_TEST): $(BUILD)/tests/tcp/test_eager_oversize.o | $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -ldl
TEST_PROGS += $(TCP_EAGER_TEST)
