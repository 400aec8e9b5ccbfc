# The exported ncclNet_v8 ... v12 tables: linked into the .so only, never
# into $(PLUGIN_LIB), so unit tests call the core directly.
PLUGIN_ABI_SRCS += plugin/abi/net_v8.c plugin/abi/net_v9.c plugin/abi/net_v10.c \
  plugin/abi/net_v11.c plugin/abi/net_v12.c plugin/abi/net_shared.c plugin/abi/abi_check.c
EXTRA_CFLAGS_plugin_abi_ := $(PLUGIN_CFLAGS)
