/* Private to the version adapters (plugin/abi/): the properties copies and
 * the entry points several versions share. */
#ifndef RN_ADAPTERS_H
#define RN_ADAPTERS_H

#include "nccl/net_v8.h"
#include "nccl/net_v9.h"
#include "nccl/net_v10.h"
#include "nccl/net_v11.h"
#include "nccl/net_v12.h"
#include "railnet/core.h"

#define RN_EXPORT __attribute__((visibility("default")))

/* Copy the core's properties into a version's struct.  The layouts differ
 * between versions; the field names do not, so one macro per addition.
 * vProps is narrowed with a range check (rn_net_vprops_out), not here. */
#define RN_PROPS_COPY_V8(d, p)                 \
  do {                                         \
    (d)->name = (p)->name;                     \
    (d)->pciPath = (p)->pci_path;              \
    (d)->guid = (p)->guid;                     \
    (d)->ptrSupport = (p)->ptr_support;        \
    (d)->regIsGlobal = (p)->reg_is_global;     \
    (d)->speed = (p)->speed;                   \
    (d)->port = (p)->port;                     \
    (d)->latency = (p)->latency;               \
    (d)->maxComms = (p)->max_comms;            \
    (d)->maxRecvs = (p)->max_recvs;            \
    (d)->netDeviceType = NCCL_NET_DEVICE_HOST; \
    (d)->netDeviceVersion = 0;                 \
  } while (0)
#define RN_PROPS_COPY_V9(d, p)               \
  do {                                       \
    RN_PROPS_COPY_V8(d, p);                  \
    (d)->forceFlush = (p)->force_flush;      \
    (d)->maxP2pBytes = (p)->max_p2p_bytes;   \
    (d)->maxCollBytes = (p)->max_coll_bytes; \
  } while (0)

/* The entry points several versions share unchanged (net_shared.c), named
 * for the oldest version whose signature they have. */
ncclResult_t rn_net_init_v8(ncclDebugLogger_t logger);
ncclResult_t rn_net_listen_v8(int dev, void *handle, void **lcomm);
ncclResult_t rn_net_connect_v8(int dev, void *handle, void **scomm,
                               ncclNetDeviceHandle_t **dev_comm);
ncclResult_t rn_net_get_properties_v9(int dev, ncclNetProperties_v9_t *props);
ncclResult_t rn_net_make_vdevice_v9(int *d, ncclNetVDeviceProps_t *props);
/* vProps between the core's form and a version's (max: that version's
 * bound).  Out: more devices than the version holds is ncclInternalError
 * (never truncated); in: ncclInvalidArgument, before devs is read. */
ncclResult_t rn_net_vprops_out(int dev, const struct rn_vprops *in, int max, int *ndevs, int *devs);
ncclResult_t rn_net_vprops_in(int ndevs, const int *devs, int max, struct rn_vprops *out);
ncclResult_t rn_net_isend_v10(void *scomm, void *data, size_t size, int tag, void *mh,
                              void *phandle, void **req);
ncclResult_t rn_net_irecv_v10(void *rcomm, int n, void **data, size_t *sizes, int *tags, void **mhs,
                              void **phandles, void **req);
/* v12 keeps v11's types for these (net_v12.h). */
ncclResult_t rn_net_init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                             ncclDebugLogger_t logger, ncclProfilerCallback_t prof);
ncclResult_t rn_net_listen_v11(void *ctx, int dev, void *handle, void **lcomm);
ncclResult_t rn_net_connect_v11(void *ctx, int dev, void *handle, void **scomm,
                                ncclNetDeviceHandle_t **dev_comm);
ncclResult_t rn_net_set_net_attr_v11(void *ctx, ncclNetAttr_v11_t *attr);

#endif
