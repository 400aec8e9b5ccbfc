# The TCP transport (registry index 0).
PLUGIN_LIB_SRCS += plugin/tcp/transport.c plugin/tcp/iface.c
EXTRA_CFLAGS_plugin_tcp_ := $(PLUGIN_CFLAGS)
