/* Helpers shared by the version adapters (plugin/net_v*.c): conversions
 * between the ABI's narrower types and the core's, range-checked. */
#ifndef RN_ADAPTERS_H
#define RN_ADAPTERS_H

#include "nccl/net_v8.h"
#include "nccl/net_v9.h"
#include "nccl/net_v10.h"
#include "nccl/net_v11.h"

#define RN_EXPORT __attribute__((visibility("default")))

/* Copy the core's properties into a version's struct.  The layouts differ
 * between versions; the field names do not, so one macro per addition. */
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
    (d)->vProps = (p)->vprops;               \
    (d)->maxP2pBytes = (p)->max_p2p_bytes;   \
    (d)->maxCollBytes = (p)->max_coll_bytes; \
  } while (0)

/* v8 passes int sizes: reject negatives, widen the rest. */
ncclResult_t rn_sizes_from_int(int n, const int *in, size_t *out);
ncclResult_t rn_props_v9(int dev, ncclNetProperties_v9_t *props);

/* The entry points shared unchanged by several versions. */
ncclResult_t rn_net_devices(int *ndev);
ncclResult_t rn_net_listen(int dev, void *handle, void **lcomm);
ncclResult_t rn_net_isend_v9(void *scomm, void *data, size_t size, int tag, void *mh, void **req);
ncclResult_t rn_net_irecv_v9(void *rcomm, int n, void **data, size_t *sizes, int *tags, void **mhs,
                             void **req);
ncclResult_t rn_net_iflush(void *rcomm, int n, void **data, int *sizes, void **mhs, void **req);
ncclResult_t rn_net_make_vdevice(int *d, ncclNetVDeviceProps_t *props);
ncclResult_t rn_net_isend_v10(void *scomm, void *data, size_t size, int tag, void *mh,
                              void *phandle, void **req);
ncclResult_t rn_net_irecv_v10(void *rcomm, int n, void **data, size_t *sizes, int *tags, void **mhs,
                              void **phandles, void **req);

#endif
