# The listening side: the rendezvous' admission rules called directly.
RDV_TEST := $(BUILD)/tests/listener/test_rendezvous
$(RDV_TEST): $(BUILD)/tests/listener/test_rendezvous.o $(BUILD)/tests/common/tap.o $(PLUGIN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_COMMON) -o $@ $^ -lpthread

TEST_PROGS += $(RDV_TEST)
