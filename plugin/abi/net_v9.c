/* ncclNet_v9 adapter: size_t sizes, vProps, makeVDevice.  Translation only. */
#include "adapters.h"
#include "railnet/check.h"
#include "railnet/core.h"

ncclResult_t rn_props_v9(int dev, ncclNetProperties_v9_t *props) {
  struct rn_props p;
  RN_CHECK_ARG(props != NULL, "getProperties: NULL properties pointer");
  RN_CHECK(rn_core_get_properties(dev, &p));
  RN_PROPS_COPY_V9(props, &p);
  return ncclSuccess;
}

ncclResult_t rn_net_isend_v9(void *scomm, void *data, size_t size, int tag, void *mh, void **req) {
  return rn_core_isend(scomm, data, size, tag, mh, req);
}

ncclResult_t rn_net_irecv_v9(void *rcomm, int n, void **data, size_t *sizes, int *tags, void **mhs,
                             void **req) {
  return rn_core_irecv(rcomm, n, data, sizes, tags, mhs, req);
}

ncclResult_t rn_net_make_vdevice(int *d, ncclNetVDeviceProps_t *props) {
  return rn_core_make_vdevice(d, props);
}

static ncclResult_t rn_v9_init(ncclDebugLogger_t logger) { return rn_core_init(logger); }

static ncclResult_t rn_v9_connect(int dev, void *handle, void **scomm,
                                  ncclNetDeviceHandle_t **dev_comm) {
  return rn_core_connect(NULL, dev, handle, scomm, dev_comm);
}

RN_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = "railnet",
    .init = rn_v9_init,
    .devices = rn_net_devices,
    .getProperties = rn_props_v9,
    .listen = rn_net_listen,
    .connect = rn_v9_connect,
    .accept = rn_core_accept,
    .regMr = rn_core_reg_mr,
    .regMrDmaBuf = rn_core_reg_mr_dmabuf,
    .deregMr = rn_core_dereg_mr,
    .isend = rn_net_isend_v9,
    .irecv = rn_net_irecv_v9,
    .iflush = rn_net_iflush,
    .test = rn_core_test,
    .closeSend = rn_core_close_send,
    .closeRecv = rn_core_close_recv,
    .closeListen = rn_core_close_listen,
    .getDeviceMr = rn_core_get_device_mr,
    .irecvConsumed = rn_core_irecv_consumed,
    .makeVDevice = rn_net_make_vdevice,
};
