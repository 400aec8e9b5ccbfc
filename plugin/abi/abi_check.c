/* Compile-time pins of the ABI facts: if any of these fail, our
 * declarations no longer match what NCCL reads. */
#include <stddef.h>
#include "adapters.h"
#include "railnet/devices.h"
#include "railnet/topo.h"
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
/* v12: vProps grows to 8 devices (36 bytes), which moves maxP2pBytes to
 * 104; railId and planeId are two int16_t after maxMultiRequestSize, in
 * what was v11's tail padding rounded up to 8. */
_Static_assert(sizeof(ncclNetVDeviceProps_v12_t) == 36, "v12 vProps: ndevs + 8 devs");
_Static_assert(offsetof(ncclNetProperties_v12_t, vProps) == 64, "v12 vProps offset (as v11)");
_Static_assert(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 88 + 16,
               "v12 maxP2pBytes after the 4 added devs");
_Static_assert(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize) == 120,
               "v12 maxMultiRequestSize offset");
_Static_assert(offsetof(ncclNetProperties_v12_t, railId) == 124, "v12 railId right after it");
_Static_assert(offsetof(ncclNetProperties_v12_t, planeId) == 126, "v12 planeId after railId");
_Static_assert(sizeof(ncclNetProperties_v12_t) == 128, "v12 properties size");
_Static_assert(sizeof(ncclNet_v12_t) == sizeof(ncclNet_v11_t), "v12 table has v11's 22 members");
_Static_assert(offsetof(ncclNet_v12_t, makeVDevice) == offsetof(ncclNet_v11_t, makeVDevice) &&
                   offsetof(ncclNet_v12_t, setNetAttr) == offsetof(ncclNet_v11_t, setNetAttr),
               "v12 members in v11's order");
#endif
_Static_assert(NCCL_NET_MAX_DEVS_PER_NIC == 4 && NCCL_NET_MAX_DEVS_PER_NIC_V12 == 8,
               "makeVDevice bounds: 4 devices in v9-v11, 8 in v12");
_Static_assert(NCCL_NET_MAX_DEVS_PER_NIC_V12 == RN_MAX_VDEV_PARTS,
               "the core's descriptor holds the widest version's");
_Static_assert(NCCL_NET_ID_UNDEF == -1, "the id NCCL ignores");
_Static_assert(RN_PLAN_PLANE_VIRTUAL <= INT16_MAX && RN_PLAN_PLANE_BITS == 14,
               "a fused device's plane mask fits planeId, with NCCL's virtual bit (1 << 14)");
_Static_assert(sizeof(struct rn_handle) == NCCL_NET_HANDLE_MAXSIZE,
               "the handle travels in NCCL's 128-byte buffer");
_Static_assert(NCCL_PTR_HOST == 1 && NCCL_PTR_CUDA == 2 && NCCL_PTR_DMABUF == 4, "ptr bits");
_Static_assert(ncclRemoteError == 6 && ncclInvalidUsage == 5, "result codes");
