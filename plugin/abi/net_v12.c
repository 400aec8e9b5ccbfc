/* ncclNet_v12 adapter: v11's entry points, with the rail and plane ids in
 * the properties and up to 8 devices per makeVDevice.  Translation only:
 * the ids come from the rail plan through the device table
 * (plugin/devices.c); here they are only narrowed to NCCL's int16_t. */
#include <stdint.h>
#include "adapters.h"
#include "railnet/check.h"
#include "railnet/core.h"

/* -1 (NCCL_NET_ID_UNDEF) or a non-negative id that fits NCCL's field. */
static ncclResult_t rn_v12_id(int dev, const char *what, int id, int16_t *out) {
  if (id < NCCL_NET_ID_UNDEF || id > INT16_MAX) {
    RN_WARN("getProperties: dev %d %s %d does not fit ncclNet v12's int16_t", dev, what, id);
    return ncclInternalError;
  }
  *out = (int16_t)id;
  return ncclSuccess;
}

static ncclResult_t rn_v12_get_properties(int dev, ncclNetProperties_v12_t *props) {
  struct rn_props p;
  RN_CHECK_ARG(props != NULL, "getProperties: NULL properties pointer");
  RN_CHECK(rn_core_get_properties(dev, &p));
  RN_PROPS_COPY_V9(props, &p);
  props->maxMultiRequestSize = p.max_multi_request_size;
  RN_CHECK(rn_v12_id(dev, "railId", p.rail_id, &props->railId));
  RN_CHECK(rn_v12_id(dev, "planeId", p.plane_id, &props->planeId));
  return rn_net_vprops_out(dev, &p.vprops, NCCL_NET_MAX_DEVS_PER_NIC_V12, &props->vProps.ndevs,
                           props->vProps.devs);
}

static ncclResult_t rn_v12_make_vdevice(int *d, ncclNetVDeviceProps_v12_t *props) {
  struct rn_vprops vp;
  RN_CHECK_ARG(props != NULL, "makeVDevice: NULL properties");
  RN_CHECK(rn_net_vprops_in(props->ndevs, props->devs, NCCL_NET_MAX_DEVS_PER_NIC_V12, &vp));
  return rn_core_make_vdevice(d, &vp);
}

RN_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = "railnet",
    .init = rn_net_init_v11,
    .devices = rn_core_devices,
    .getProperties = rn_v12_get_properties,
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
    .makeVDevice = rn_v12_make_vdevice,
    .finalize = rn_core_finalize,
    .setNetAttr = rn_net_set_net_attr_v11,
};
