/* Defaults a transport's optional operations point at (transport.h), so
 * the core never tests for NULL; and the telemetry file both transports
 * append to. */
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/param.h"
#include "railnet/transport.h"

static pthread_mutex_t rn_stats_lock = PTHREAD_MUTEX_INITIALIZER;

void rn_stats_append(const char *line, size_t len) {
  const char *path = rn_params()->stats;
  if (path[0] == '\0' || len == 0) return;
  pthread_mutex_lock(&rn_stats_lock);
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ssize_t wr = write(fd, line, len);
    (void)wr;
    close(fd);
  }
  pthread_mutex_unlock(&rn_stats_lock);
}

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
