# The plugin: adapters (plugin/abi/) -> core -> transports (plugin/<name>/),
# linked with the topo library.  Every object but the adapters goes into one
# internal static library, $(PLUGIN_LIB), which the .so and the unit tests
# link alike.  Each folder's .mk appends its sources: a new transport adds
# plugin/<name>/<name>.mk and one line in plugin/registry.c.
PLUGIN_SO := $(BUILD)/libnccl-net-railnet.so
PLUGIN_LIB := $(BUILD)/librailnet-plugin.a
PLUGIN_CFLAGS := -fvisibility=hidden
PLUGIN_LIB_SRCS := plugin/core.c plugin/devices.c plugin/registry.c plugin/transport.c plugin/param.c \
  plugin/log.c plugin/sock.c plugin/rendezvous.c plugin/pairing.c
PLUGIN_ABI_SRCS :=
EXTRA_CFLAGS_plugin_ := $(PLUGIN_CFLAGS)
include $(sort $(wildcard plugin/*/*.mk))

PLUGIN_LIB_OBJS := $(PLUGIN_LIB_SRCS:%.c=$(BUILD)/%.o)
PLUGIN_ABI_OBJS := $(PLUGIN_ABI_SRCS:%.c=$(BUILD)/%.o)

all: $(PLUGIN_SO) $(BUILD)/libnccl-net.so

$(PLUGIN_LIB): $(PLUGIN_LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

$(PLUGIN_SO): $(PLUGIN_ABI_OBJS) $(PLUGIN_LIB) $(TOPO_LIB)
	$(CC) -shared -o $@ $(PLUGIN_ABI_OBJS) $(PLUGIN_LIB) $(TOPO_LIB) $(TOPO_LIBS) $(LDFLAGS_COMMON) \
	  -Wl,--exclude-libs,ALL -Wl,-z,defs -ldl -lpthread
	@if nm -D --defined-only $@ | awk '$$2 ~ /[TDRB]/ {print $$3}' | grep -v '^ncclNetPlugin_v\(8\|9\|10\|11\|12\)$$' | grep -v '^_' | grep -q .; then \
	  echo "error: $@ exports symbols beyond ncclNetPlugin_v8..v12"; \
	  nm -D --defined-only $@ | grep -v ncclNetPlugin; rm -f $@; exit 1; fi

$(BUILD)/libnccl-net.so: $(PLUGIN_SO)
	ln -sf libnccl-net-railnet.so $@
