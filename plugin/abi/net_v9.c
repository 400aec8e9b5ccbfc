/* ncclNet_v9 adapter: size_t sizes, vProps, makeVDevice.  Translation only. */
#include "adapters.h"
#include "railnet/core.h"

static ncclResult_t rn_v9_isend(void *scomm, void *data, size_t size, int tag, void *mh,
                                void **req) {
  return rn_core_isend(scomm, data, size, tag, mh, req);
}

static ncclResult_t rn_v9_irecv(void *rcomm, int n, void **data, size_t *sizes, int *tags,
                                void **mhs, void **req) {
  return rn_core_irecv(rcomm, n, data, sizes, tags, mhs, req);
}

RN_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = "railnet",
    .init = rn_net_init_v8,
    .devices = rn_core_devices,
    .getProperties = rn_net_get_properties_v9,
    .listen = rn_net_listen_v8,
    .connect = rn_net_connect_v8,
    .accept = rn_core_accept,
    .regMr = rn_core_reg_mr,
    .regMrDmaBuf = rn_core_reg_mr_dmabuf,
    .deregMr = rn_core_dereg_mr,
    .isend = rn_v9_isend,
    .irecv = rn_v9_irecv,
    .iflush = rn_core_iflush,
    .test = rn_core_test,
    .closeSend = rn_core_close_send,
    .closeRecv = rn_core_close_recv,
    .closeListen = rn_core_close_listen,
    .getDeviceMr = rn_core_get_device_mr,
    .irecvConsumed = rn_core_irecv_consumed,
    .makeVDevice = rn_net_make_vdevice_v9,
};
