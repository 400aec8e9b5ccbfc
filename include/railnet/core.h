/* The one core behind every exported ABI version.  Adapters
 * (plugin/abi/net_v8.c ... net_v12.c) only translate types and call these; all defaults and checks
 * live here.  Thread-safe: NCCL calls in from init, proxy service and proxy
 * progress threads of several communicators at once. */
#ifndef RN_CORE_H
#define RN_CORE_H

#include <stddef.h>
#include <stdint.h>
#include "nccl/net_common.h"
#include "railnet/devices.h"
#include "railnet/transport.h"

/* Properties in their newest form; adapters copy fields down. */
struct rn_props {
  char *name;
  char *pci_path;
  uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int force_flush;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  struct rn_vprops vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
  int max_multi_request_size;
  int rail_id, plane_id; /* v12; -1 undefined */
};

/* No traffic class (NCCL_NET_TRAFFIC_CLASS_UNDEF, which the adapters pass). */
#define RN_TRAFFIC_CLASS_UNDEF (-1)

/* Legacy (v8-v10) init: once per process, no finalize. */
ncclResult_t rn_core_init(ncclDebugLogger_t logger);
/* v11 and v12: one context per communicator, each holding a reference.
 * traffic_class: the communicator's (RN_TRAFFIC_CLASS_UNDEF for none),
 * used by its connects. */
ncclResult_t rn_core_init_ctx(ncclDebugLogger_t logger, uint64_t comm_id, int traffic_class,
                              void **ctx);
ncclResult_t rn_core_finalize(void *ctx);
ncclResult_t rn_core_devices(int *ndev);
ncclResult_t rn_core_get_properties(int dev, struct rn_props *props);
/* Fuses 1 .. RN_MAX_VDEV_PARTS devices; an adapter whose ABI holds fewer
 * refuses more before it copies them. */
ncclResult_t rn_core_make_vdevice(int *d, const struct rn_vprops *props);
ncclResult_t rn_core_listen(void *ctx, int dev, void *handle, void **lcomm);
/* traffic_class: what a v10 connect passes (RN_TRAFFIC_CLASS_UNDEF for
 * none); with a context, the context's. */
ncclResult_t rn_core_connect(void *ctx, int traffic_class, int dev, void *handle, void **scomm,
                             ncclNetDeviceHandle_t **dev_comm);
ncclResult_t rn_core_accept(void *lcomm, void **rcomm, ncclNetDeviceHandle_t **dev_comm);
ncclResult_t rn_core_reg_mr(void *comm, void *data, size_t size, int type, void **mh);
ncclResult_t rn_core_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                                   int fd, void **mh);
ncclResult_t rn_core_dereg_mr(void *comm, void *mh);
ncclResult_t rn_core_isend(void *scomm, void *data, size_t size, int tag, void *mh, void **req);
ncclResult_t rn_core_irecv(void *rcomm, int n, void **data, const size_t *sizes, const int *tags,
                           void **mhs, void **req);
ncclResult_t rn_core_iflush(void *rcomm, int n, void **data, int *sizes, void **mhs, void **req);
ncclResult_t rn_core_test(void *req, int *done, int *sizes);
ncclResult_t rn_core_close_send(void *scomm);
ncclResult_t rn_core_close_recv(void *rcomm);
ncclResult_t rn_core_close_listen(void *lcomm);
ncclResult_t rn_core_get_device_mr(void *comm, void *mh, void **dptr);
ncclResult_t rn_core_irecv_consumed(void *rcomm, int n, void *req);

#endif
