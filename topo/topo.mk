# topo library and CLI (owned by topo/).  The library is static and -fPIC so
# the plugin .so links it together with $(TOPO_LIBS).
TOPO_SRCS := topo/model.c topo/load.c topo/xml.c topo/ncclxml.c topo/hwloc.c topo/hwloc_check.c \
             topo/sysfs.c topo/smi.c topo/filter.c topo/settings.c topo/plan.c
TOPO_OBJS := $(TOPO_SRCS:%.c=$(BUILD)/%.o)
TOPO_LIB := $(BUILD)/librailnet-topo.a
TOPO_LIBS := $(HWLOC_LIBS) $(EXPAT_LIBS)
TOPO_CLI := $(BUILD)/railnet-topo
EXTRA_CFLAGS_topo_ := $(HWLOC_CFLAGS) $(EXPAT_CFLAGS)

all: $(TOPO_LIB) $(TOPO_CLI)

$(TOPO_LIB): $(TOPO_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

$(TOPO_CLI): $(BUILD)/topo/cli.o $(TOPO_LIB)
	$(CC) $(LDFLAGS_COMMON) -o $@ $< $(TOPO_LIB) $(TOPO_LIBS)
