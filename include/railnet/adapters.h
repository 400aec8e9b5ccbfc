/* Helpers shared by the version adapters (plugin/net_v*.c): conversions
 * between the ABI's narrower types and the core's, range-checked. */
#ifndef RN_ADAPTERS_H
#define RN_ADAPTERS_H

#include "nccl/net_v8.h"
#include "nccl/net_v9.h"
#include "nccl/net_v10.h"
#include "nccl/net_v11.h"

#define RN_EXPORT __attribute__((visibility("default")))

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

#endif
