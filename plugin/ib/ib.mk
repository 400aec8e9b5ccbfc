# Verbs transport sources.  plugin/plugin.mk adds $(PLUGIN_IB_SRCS) to the
# plugin .so.  With rdma-core headers (HAVE_VERBS=1) the real transport is
# built; libibverbs itself is dlopened at run time, never linked (-ldl only).
# Without headers, a stub transport reports zero NICs.
ifndef RN_IB_MK_INCLUDED
RN_IB_MK_INCLUDED := 1

ifeq ($(HAVE_VERBS),1)
PLUGIN_IB_SRCS := plugin/ib/transport.c plugin/ib/discovery.c plugin/ib/connect.c plugin/ib/p2p.c \
                  plugin/ib/gdr.c plugin/ib/ibvwrap.c plugin/ib/mr_cache.c
EXTRA_CFLAGS_plugin_ib_ += $(VERBS_CFLAGS)
else
PLUGIN_IB_SRCS := plugin/ib/stub.c plugin/ib/mr_cache.c
endif

endif
