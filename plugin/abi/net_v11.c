/* ncclNet_v11 adapter: per-communicator init/finalize with a context,
 * listen/connect take it, setNetAttr.  Translation only. */
#include "adapters.h"
#include "railnet/check.h"
#include "railnet/core.h"

static ncclResult_t rn_v11_get_properties(int dev, ncclNetProperties_v11_t *props) {
  struct rn_props p;
  RN_CHECK_ARG(props != NULL, "getProperties: NULL properties pointer");
  RN_CHECK(rn_core_get_properties(dev, &p));
  RN_PROPS_COPY_V9(props, &p);
  props->maxMultiRequestSize = p.max_multi_request_size;
  return rn_net_vprops_out(dev, &p.vprops, NCCL_NET_MAX_DEVS_PER_NIC, &props->vProps.ndevs,
                           props->vProps.devs);
}

RN_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = "railnet",
    .init = rn_net_init_v11,
    .devices = rn_core_devices,
    .getProperties = rn_v11_get_properties,
    .listen = rn_net_listen_v11,
    .connect = rn_net_connect_v11,
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
    .setNetAttr = rn_net_set_net_attr_v11,
};
