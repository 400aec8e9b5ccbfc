# The TCP transport (registry index 0).
PLUGIN_LIB_SRCS += plugin/tcp/transport.c plugin/tcp/comm.c plugin/tcp/control.c \
  plugin/tcp/streams.c plugin/tcp/p2p.c plugin/tcp/iface.c plugin/tcp/fail.c plugin/tcp/wire.c \
  plugin/tcp/rails.c plugin/tcp/engine.c plugin/tcp/move.c plugin/tcp/pool.c plugin/tcp/open.c
EXTRA_CFLAGS_plugin_tcp_ := $(PLUGIN_CFLAGS) -DRN_LOG_TRANSPORT='"tcp"'
