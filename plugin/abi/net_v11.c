/* ncclNet_v11 adapter: per-communicator init/finalize with a context,
 * listen/connect take it, setNetAttr.  Translation only. */
#include "adapters.h"
#include "railnet/check.h"
#include "railnet/core.h"

static ncclResult_t rn_v11_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                                ncclDebugLogger_t logger, ncclProfilerCallback_t prof) {
  (void)prof;
  (void)config; /* traffic class: no transport maps it yet */
  return rn_core_init_ctx(logger, comm_id, ctx);
}

static ncclResult_t rn_v11_get_properties(int dev, ncclNetProperties_v11_t *props) {
  struct rn_props p;
  RN_CHECK_ARG(props != NULL, "getProperties: NULL properties pointer");
  RN_CHECK(rn_core_get_properties(dev, &p));
  RN_PROPS_COPY_V9(props, &p);
  props->maxMultiRequestSize = p.max_multi_request_size;
  return ncclSuccess;
}

static ncclResult_t rn_v11_listen(void *ctx, int dev, void *handle, void **lcomm) {
  return rn_core_listen(ctx, dev, handle, lcomm);
}

static ncclResult_t rn_v11_connect(void *ctx, int dev, void *handle, void **scomm,
                                   ncclNetDeviceHandle_t **dev_comm) {
  return rn_core_connect(ctx, dev, handle, scomm, dev_comm);
}

static ncclResult_t rn_v11_set_net_attr(void *ctx, ncclNetAttr_v11_t *attr) {
  (void)ctx;
  (void)attr; /* hints only; railnet's stream count is fixed per comm */
  return ncclSuccess;
}

RN_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = "railnet",
    .init = rn_v11_init,
    .devices = rn_core_devices,
    .getProperties = rn_v11_get_properties,
    .listen = rn_v11_listen,
    .connect = rn_v11_connect,
    .accept = rn_core_accept,
    .regMr = rn_core_reg_mr,
    .regMrDmaBuf = rn_core_reg_mr_dmabuf,
    .deregMr = rn_core_dereg_mr,
    .isend = rn_net_isend_v10,
    .irecv = rn_net_irecv_v10,
    .iflush = rn_core_iflush,
    .test = rn_core_test,
    .closeSend = rn_core_close_send,
    .closeRecv = rn_core_close_recv,
    .closeListen = rn_core_close_listen,
    .getDeviceMr = rn_core_get_device_mr,
    .irecvConsumed = rn_core_irecv_consumed,
    .makeVDevice = rn_net_make_vdevice_v9,
    .finalize = rn_core_finalize,
    .setNetAttr = rn_v11_set_net_attr,
};
