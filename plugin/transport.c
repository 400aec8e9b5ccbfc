/* Defaults a transport's optional operations point at (transport.h), so
 * the core never tests for NULL. */
#include "railnet/check.h"
#include "railnet/transport.h"

ncclResult_t rn_transport_unsupported_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                                    uint64_t offset, int fd, void **mh) {
  (void)comm;
  (void)data;
  (void)size;
  (void)type;
  (void)offset;
  (void)fd;
  *mh = NULL;
  RN_WARN("regMrDmaBuf: this transport does not support DMA-BUF registration");
  return ncclInvalidUsage;
}

ncclResult_t rn_transport_noop_iflush(void *rcomm, int n, void **data, const int *sizes, void **mhs,
                                      void **req) {
  (void)rcomm;
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhs;
  *req = NULL; /* nothing to wait for: data landed through the CPU */
  return ncclSuccess;
}
