/* Compile-time pins of the ABI facts: if any of these fail, our
 * declarations no longer match what NCCL reads. */
#include <stddef.h>
#include "adapters.h"
#include "railnet/transport.h"

#if defined(__LP64__)
_Static_assert(sizeof(ncclNetProperties_v8_t) == 64, "v8 properties are 64 bytes on LP64");
_Static_assert(sizeof(ncclNet_v8_t) == 152, "v8 table is 152 bytes (19 members) on LP64");
_Static_assert(offsetof(ncclNetProperties_v8_t, latency) == 40, "v8 latency offset");
_Static_assert(offsetof(ncclNetProperties_v8_t, netDeviceVersion) == 56, "v8 last field");
_Static_assert(offsetof(ncclNetProperties_v9_t, forceFlush) == 32,
               "v9 forceFlush after regIsGlobal");
_Static_assert(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88, "v9 maxP2pBytes offset");
_Static_assert(sizeof(ncclNetProperties_v9_t) == 104, "v9 properties size");
_Static_assert(sizeof(ncclNetProperties_v11_t) == 112, "v11 properties size");
_Static_assert(sizeof(ncclNet_v9_t) == 160, "v9 table adds makeVDevice");
_Static_assert(sizeof(ncclNet_v10_t) == 160, "v10 table has v9's members");
_Static_assert(sizeof(ncclNet_v11_t) == 176, "v11 table adds finalize and setNetAttr");
_Static_assert(offsetof(ncclNet_v11_t, finalize) == 160, "v11 finalize offset");
#endif
_Static_assert(sizeof(struct rn_handle) == NCCL_NET_HANDLE_MAXSIZE,
               "the handle travels in NCCL's 128-byte buffer");
_Static_assert(NCCL_PTR_HOST == 1 && NCCL_PTR_CUDA == 2 && NCCL_PTR_DMABUF == 4, "ptr bits");
_Static_assert(ncclRemoteError == 6 && ncclInvalidUsage == 5, "result codes");
