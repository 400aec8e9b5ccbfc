# plugin
PLUGIN_SO := $(BUILD)/libnccl-net-railnet.so
