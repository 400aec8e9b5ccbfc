/* ncclNet_v8 adapter: int sizes, no makeVDevice.  Translation only. */
#include "adapters.h"
#include "railnet/check.h"
#include "railnet/core.h"

/* v8 passes int sizes: reject negatives, widen the rest. */
static ncclResult_t rn_v8_sizes_from_int(int n, const int *in, size_t *out) {
  for (int i = 0; i < n; i++) {
    if (in[i] < 0) {
      RN_WARN("negative size %d", in[i]);
      return ncclInvalidArgument;
    }
    out[i] = (size_t)in[i];
  }
  return ncclSuccess;
}

static ncclResult_t rn_v8_get_properties(int dev, ncclNetProperties_v8_t *props) {
  struct rn_props p;
  RN_CHECK_ARG(props != NULL, "getProperties: NULL properties pointer");
  RN_CHECK(rn_core_get_properties(dev, &p));
  RN_PROPS_COPY_V8(props, &p);
  return ncclSuccess;
}

static ncclResult_t rn_v8_isend(void *scomm, void *data, int size, int tag, void *mh, void **req) {
  size_t sz;
  RN_CHECK(rn_v8_sizes_from_int(1, &size, &sz));
  return rn_core_isend(scomm, data, sz, tag, mh, req);
}

static ncclResult_t rn_v8_irecv(void *rcomm, int n, void **data, int *sizes, int *tags, void **mhs,
                                void **req) {
  size_t sz[RN_MAX_RECVS];
  RN_CHECK_ARG(sizes != NULL, "irecv: NULL sizes");
  if (n < 1 || n > RN_MAX_RECVS) {
    RN_WARN("irecv: %d buffers, must be 1..%d (maxRecvs)", n, RN_MAX_RECVS);
    return ncclInvalidArgument;
  }
  RN_CHECK(rn_v8_sizes_from_int(n, sizes, sz));
  return rn_core_irecv(rcomm, n, data, sz, tags, mhs, req);
}

RN_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "railnet",
    .init = rn_net_init_v8,
    .devices = rn_core_devices,
    .getProperties = rn_v8_get_properties,
    .listen = rn_net_listen_v8,
    .connect = rn_net_connect_v8,
    .accept = rn_core_accept,
    .regMr = rn_core_reg_mr,
    .regMrDmaBuf = rn_core_reg_mr_dmabuf,
    .deregMr = rn_core_dereg_mr,
    .isend = rn_v8_isend,
    .irecv = rn_v8_irecv,
    .iflush = rn_core_iflush,
    .test = rn_core_test,
    .closeSend = rn_core_close_send,
    .closeRecv = rn_core_close_recv,
    .closeListen = rn_core_close_listen,
    .getDeviceMr = rn_core_get_device_mr,
    .irecvConsumed = rn_core_irecv_consumed,
};
