/* The entry points several ncclNet versions share unchanged, so that no
 * version's file depends on another's.  Translation only, like the
 * adapters that use them. */
#include "adapters.h"
#include "railnet/check.h"
#include "railnet/core.h"

ncclResult_t rn_net_init_v8(ncclDebugLogger_t logger) { return rn_core_init(logger); }

ncclResult_t rn_net_listen_v8(int dev, void *handle, void **lcomm) {
  return rn_core_listen(NULL, dev, handle, lcomm);
}

ncclResult_t rn_net_connect_v8(int dev, void *handle, void **scomm,
                               ncclNetDeviceHandle_t **dev_comm) {
  return rn_core_connect(NULL, RN_TRAFFIC_CLASS_UNDEF, dev, handle, scomm, dev_comm);
}

ncclResult_t rn_net_init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                             ncclDebugLogger_t logger, ncclProfilerCallback_t prof) {
  (void)prof;
  return rn_core_init_ctx(logger, comm_id,
                          config != NULL ? config->trafficClass : RN_TRAFFIC_CLASS_UNDEF, ctx);
}

ncclResult_t rn_net_listen_v11(void *ctx, int dev, void *handle, void **lcomm) {
  return rn_core_listen(ctx, dev, handle, lcomm);
}

ncclResult_t rn_net_connect_v11(void *ctx, int dev, void *handle, void **scomm,
                                ncclNetDeviceHandle_t **dev_comm) {
  return rn_core_connect(ctx, RN_TRAFFIC_CLASS_UNDEF, dev, handle, scomm, dev_comm);
}

ncclResult_t rn_net_set_net_attr_v11(void *ctx, ncclNetAttr_v11_t *attr) {
  (void)ctx;
  (void)attr; /* hints only; railnet's stream count is fixed per comm */
  return ncclSuccess;
}

ncclResult_t rn_net_get_properties_v9(int dev, ncclNetProperties_v9_t *props) {
  struct rn_props p;
  RN_CHECK_ARG(props != NULL, "getProperties: NULL properties pointer");
  RN_CHECK(rn_core_get_properties(dev, &p));
  RN_PROPS_COPY_V9(props, &p);
  return rn_net_vprops_out(dev, &p.vprops, NCCL_NET_MAX_DEVS_PER_NIC, &props->vProps.ndevs,
                           props->vProps.devs);
}

ncclResult_t rn_net_make_vdevice_v9(int *d, ncclNetVDeviceProps_t *props) {
  struct rn_vprops vp;
  RN_CHECK_ARG(props != NULL, "makeVDevice: NULL properties");
  RN_CHECK(rn_net_vprops_in(props->ndevs, props->devs, NCCL_NET_MAX_DEVS_PER_NIC, &vp));
  return rn_core_make_vdevice(d, &vp);
}

ncclResult_t rn_net_vprops_out(int dev, const struct rn_vprops *in, int max, int *ndevs,
                               int *devs) {
  if (in->ndevs > max) {
    RN_WARN("getProperties: dev %d fuses %d devices, this ncclNet version holds %d", dev, in->ndevs,
            max);
    return ncclInternalError;
  }
  *ndevs = in->ndevs;
  for (int i = 0; i < in->ndevs; i++) devs[i] = in->devs[i];
  return ncclSuccess;
}

ncclResult_t rn_net_vprops_in(int ndevs, const int *devs, int max, struct rn_vprops *out) {
  RN_CHECK_ARG(ndevs <= max, "makeVDevice: %d devices requested, this ncclNet version holds %d",
               ndevs, max);
  out->ndevs = ndevs; /* below 1: the core refuses it */
  for (int i = 0; i < ndevs; i++) out->devs[i] = devs[i];
  return ncclSuccess;
}

ncclResult_t rn_net_isend_v10(void *scomm, void *data, size_t size, int tag, void *mh,
                              void *phandle, void **req) {
  (void)phandle;
  return rn_core_isend(scomm, data, size, tag, mh, req);
}

ncclResult_t rn_net_irecv_v10(void *rcomm, int n, void **data, size_t *sizes, int *tags, void **mhs,
                              void **phandles, void **req) {
  (void)phandles;
  return rn_core_irecv(rcomm, n, data, sizes, tags, mhs, req);
}
