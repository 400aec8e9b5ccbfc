# topo library and CLI (owned by topo/)
TOPO_LIB := $(BUILD)/librailnet-topo.a
TOPO_CLI := $(BUILD)/railnet-topo
