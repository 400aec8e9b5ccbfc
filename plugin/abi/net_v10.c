/* ncclNet_v10 adapter: profiler callback (unused: railnet emits no profiler
 * events yet), connect config, phandles.  Translation only. */
#include "adapters.h"
#include "railnet/core.h"

static ncclResult_t rn_v10_init(ncclDebugLogger_t logger, ncclProfilerCallback_t prof) {
  (void)prof;
  return rn_core_init(logger);
}

static ncclResult_t rn_v10_connect(int dev, ncclNetCommConfig_v10_t *config, void *handle,
                                   void **scomm, ncclNetDeviceHandle_t **dev_comm) {
  return rn_core_connect(NULL, config != NULL ? config->trafficClass : RN_TRAFFIC_CLASS_UNDEF, dev,
                         handle, scomm, dev_comm);
}

RN_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = "railnet",
    .init = rn_v10_init,
    .devices = rn_core_devices,
    .getProperties = rn_net_get_properties_v9,
    .listen = rn_net_listen_v8,
    .connect = rn_v10_connect,
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
};
