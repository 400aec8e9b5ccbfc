# The listening side: the rendezvous' admission rules called directly, and
# a TCP listen comm under attack (thousands of hostile connections held
# while a real peer connects; accept() out of file descriptors), run in a
# network namespace of its own when the test can create one.
RDV_TEST := $(BUILD)/tests/listener/test_rendezvous
$(RDV_TEST): $(BUILD)/tests/listener/test_rendezvous.o $(BUILD)/tests/common/tap.o $(PLUGIN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread

LISTENER := $(BUILD)/tests/listener-test
$(eval $(call rn_harness_prog,$(LISTENER),$(BUILD)/tests/listener/flood.o))

TEST_PROGS += $(RDV_TEST) $(LISTENER)
