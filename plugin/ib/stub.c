/* The verbs transport on hosts built without rdma-core headers: it reports
 * zero NICs, so the core falls back to TCP (or fails a forced
 * RAILNET_TRANSPORT=ib with its own error). */
#include <stdio.h>
#include "railnet/log.h"
#include "railnet/transport.h"

static ncclResult_t rn_ib_stub_init(const struct rn_nic **nics, int *n, char *why, size_t whylen) {
  snprintf(why, whylen, "built without verbs headers");
  *nics = NULL;
  *n = 0;
  return ncclSuccess;
}

static void rn_ib_stub_fini(void) {}

static ncclResult_t rn_ib_stub_listen(const struct rn_rails *r, struct rn_handle *h, void **lcomm) {
  (void)r, (void)h, (void)lcomm;
  RN_WARN("built without verbs headers");
  return ncclInternalError;
}

static ncclResult_t rn_ib_stub_connect(const struct rn_rails *r, const struct rn_handle *h, int tc,
                                       void **state, void **scomm) {
  (void)r, (void)h, (void)tc, (void)state, (void)scomm;
  RN_WARN("built without verbs headers");
  return ncclInternalError;
}

static void rn_ib_stub_connect_abort(void *state) { (void)state; }

static ncclResult_t rn_ib_stub_accept(void *lcomm, void **rcomm) {
  (void)lcomm, (void)rcomm;
  return ncclInternalError;
}

static ncclResult_t rn_ib_stub_reg_mr(void *comm, void *data, size_t size, int type, void **mh) {
  (void)comm, (void)data, (void)size, (void)type, (void)mh;
  return ncclInternalError;
}

static ncclResult_t rn_ib_stub_dereg_mr(void *comm, void *mh) {
  (void)comm, (void)mh;
  return ncclInternalError;
}

static ncclResult_t rn_ib_stub_isend(void *scomm, void *data, size_t size, int tag, void *mh,
                                     void **req) {
  (void)scomm, (void)data, (void)size, (void)tag, (void)mh, (void)req;
  return ncclInternalError;
}

static ncclResult_t rn_ib_stub_irecv(void *rcomm, int n, void **data, const size_t *sizes,
                                     const int *tags, void **mhs, void **req) {
  (void)rcomm, (void)n, (void)data, (void)sizes, (void)tags, (void)mhs, (void)req;
  return ncclInternalError;
}

static ncclResult_t rn_ib_stub_test(void *req, int *done, size_t *sizes, int *nsizes) {
  (void)req, (void)done, (void)sizes, (void)nsizes;
  return ncclInternalError;
}

static ncclResult_t rn_ib_stub_close(void *comm) {
  (void)comm;
  return ncclSuccess;
}

const struct rn_transport rn_transport_ib = {
    .name = "ib",
    .init = rn_ib_stub_init,
    .fini = rn_ib_stub_fini,
    .listen = rn_ib_stub_listen,
    .connect = rn_ib_stub_connect,
    .connect_abort = rn_ib_stub_connect_abort,
    .accept = rn_ib_stub_accept,
    .reg_mr = rn_ib_stub_reg_mr,
    .reg_mr_dmabuf = rn_transport_unsupported_reg_mr_dmabuf,
    .dereg_mr = rn_ib_stub_dereg_mr,
    .isend = rn_ib_stub_isend,
    .irecv = rn_ib_stub_irecv,
    .iflush = rn_transport_noop_iflush,
    .test = rn_ib_stub_test,
    .close_send = rn_ib_stub_close,
    .close_recv = rn_ib_stub_close,
    .close_listen = rn_ib_stub_close,
};
