# The verbs transport (registry index 1).  With rdma-core headers
# (HAVE_VERBS=1) the real transport is built; libibverbs itself is dlopened
# at run time, never linked (-ldl only).  Without headers, a stub transport
# reports zero NICs.  The MR cache and the striping functions need no
# headers: their unit tests run everywhere.
PLUGIN_LIB_SRCS += plugin/ib/mr_cache.c plugin/ib/stripe.c
ifeq ($(HAVE_VERBS),1)
PLUGIN_LIB_SRCS += plugin/ib/transport.c plugin/ib/discovery.c plugin/ib/connect.c \
  plugin/ib/pairing.c plugin/ib/reg.c plugin/ib/p2p.c plugin/ib/failover.c plugin/ib/stats.c plugin/ib/rates.c plugin/ib/gdr.c plugin/ib/ibvwrap.c
EXTRA_CFLAGS_plugin_ib_ := $(PLUGIN_CFLAGS) $(VERBS_CFLAGS) -DRN_LOG_TRANSPORT='"ib"'
else
PLUGIN_LIB_SRCS += plugin/ib/stub.c
EXTRA_CFLAGS_plugin_ib_ := $(PLUGIN_CFLAGS) -DRN_LOG_TRANSPORT='"ib"'
endif
