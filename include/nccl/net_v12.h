/* ncclNet_v12 (NCCL 2.30.3): every device reports the rail and the plane
 * it is cabled to, and a virtual device may fuse up to 8 devices.  The
 * function table has v11's members, in v11's order, with v11's signatures;
 * only the properties and the makeVDevice descriptor are new types.  NCCL
 * binds to v12 first when a plugin exports it. */
#ifndef RN_NCCL_NET_V12_H
#define RN_NCCL_NET_V12_H

#include "nccl/net_common.h"
#include "nccl/net_v11.h"

/* Devices one v12 makeVDevice may fuse (v9 to v11: 4). */
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8

/* railId / planeId value NCCL ignores: "not known". */
#define NCCL_NET_ID_UNDEF -1

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

typedef ncclNetCommConfig_v11_t ncclNetCommConfig_v12_t;
typedef ncclNetCommAttr_v11_t ncclNetCommAttr_v12_t;
typedef ncclNetAttr_v11_t ncclNetAttr_v12_t;

/* v11's properties with the wider vProps and, after maxMultiRequestSize,
 * two 16-bit ids:
 *  - railId: devices with one railId on different hosts reach each other
 *    through the same rail of the fabric; with NCCL_CROSS_NIC=0 NCCL's
 *    graph search pairs a ring's entry and exit NICs by it (in place of
 *    the ASIC/port test), and NCCL_NET_MERGE_POLICY=RAIL fuses only
 *    devices of one rail;
 *  - planeId: devices of different planes never talk to each other; NCCL
 *    forbids such pairs outright.
 * Either may be NCCL_NET_ID_UNDEF, which switches that rule off. */
typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} ncclNetProperties_v12_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v12_t *config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
                          ncclNetDeviceHandle_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                        void *phandle, void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **phandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v12_t *props);
  ncclResult_t (*finalize)(void *ctx);
  ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v12_t *netAttr);
} ncclNet_v12_t;

#endif
