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
  return rn_core_connect(NULL, dev, handle, scomm, dev_comm);
}

ncclResult_t rn_net_get_properties_v9(int dev, ncclNetProperties_v9_t *props) {
  struct rn_props p;
  RN_CHECK_ARG(props != NULL, "getProperties: NULL properties pointer");
  RN_CHECK(rn_core_get_properties(dev, &p));
  RN_PROPS_COPY_V9(props, &p);
  return ncclSuccess;
}

ncclResult_t rn_net_make_vdevice_v9(int *d, ncclNetVDeviceProps_t *props) {
  return rn_core_make_vdevice(d, props);
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
