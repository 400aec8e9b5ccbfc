# The plugin: adapters -> core -> transports, linked with the topo library.
PLUGIN_SO := $(BUILD)/libnccl-net-railnet.so
include plugin/ib/ib.mk
PLUGIN_SRCS := plugin/abi/net_v8.c plugin/abi/net_v9.c plugin/abi/net_v10.c plugin/abi/net_v11.c \
  plugin/abi/abi_check.c plugin/core.c plugin/devices.c plugin/log.c plugin/param.c  \
  plugin/sock.c plugin/registry.c plugin/tcp/iface.c plugin/tcp/transport.c $(PLUGIN_IB_SRCS)
PLUGIN_OBJS := $(PLUGIN_SRCS:%.c=$(BUILD)/%.o)
EXTRA_CFLAGS_plugin_ += -fvisibility=hidden
EXTRA_CFLAGS_plugin_abi_ += -fvisibility=hidden
EXTRA_CFLAGS_plugin_tcp_ += -fvisibility=hidden
EXTRA_CFLAGS_plugin_ib_ += -fvisibility=hidden

all: $(PLUGIN_SO) $(BUILD)/libnccl-net.so

$(PLUGIN_SO): $(PLUGIN_OBJS) $(TOPO_LIB)
	$(CC) -shared -o $@ $(PLUGIN_OBJS) $(TOPO_LIB) $(TOPO_LIBS) $(LDFLAGS_COMMON) \
	  -Wl,--exclude-libs,ALL -Wl,-z,defs -ldl -lpthread
	@if nm -D --defined-only $@ | awk '$$2 ~ /[TDRB]/ {print $$3}' | grep -v '^ncclNetPlugin_v\(8\|9\|10\|11\)$$' | grep -v '^_' | grep -q .; then \
	  echo "error: $@ exports symbols beyond ncclNetPlugin_v8..v11"; \
	  nm -D --defined-only $@ | grep -v ncclNetPlugin; rm -f $@; exit 1; fi

$(BUILD)/libnccl-net.so: $(PLUGIN_SO)
	ln -sf libnccl-net-railnet.so $@
