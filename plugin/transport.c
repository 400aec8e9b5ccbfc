/* Defaults a transport's optional operations point at (transport.h), so
 * the core never tests for NULL; and the telemetry file both transports
 * append to. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/param.h"
#include "railnet/transport.h"

/* RAILNET_STATS's file: %h (host name), %p (process id) and %% expand as
 * in NCCL_DEBUG_FILE, so the ranks of a job can write one file each; a
 * relative name is taken from the working directory.  Resolved again when
 * the value or the process changes (a context after finalize reads the
 * environment again; a forked child is a process of its own). */
static pthread_mutex_t rn_stats_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  char raw[sizeof(((struct rn_params *)0)->stats)];
  pid_t pid;
  char path[2 * PATH_MAX + 1]; /* the working directory, /, the name */
  int said; /* the INFO naming the file, or the WARN that it cannot be written */
} rn_stats;

static void rn_stats_resolve(const char *raw) {
  char name[PATH_MAX] = "";
  size_t n = 0;
  for (const char *s = raw; *s != '\0' && n + 1 < sizeof(name); s++) {
    char sub[HOST_NAME_MAX + 1] = "";
    if (s[0] == '%' && s[1] == 'h') {
      if (gethostname(sub, sizeof(sub)) != 0) snprintf(sub, sizeof(sub), "unknown-host");
      sub[sizeof(sub) - 1] = '\0';
    } else if (s[0] == '%' && s[1] == 'p') {
      snprintf(sub, sizeof(sub), "%d", (int)getpid());
    } else if (s[0] == '%' && s[1] == '%') {
      sub[0] = '%';
    } else {
      name[n++] = *s;
      continue;
    }
    s++;
    n += (size_t)snprintf(name + n, sizeof(name) - n, "%s", sub);
    if (n >= sizeof(name)) n = sizeof(name) - 1;
  }
  name[n] = '\0';
  char cwd[PATH_MAX];
  if (name[0] != '/' && getcwd(cwd, sizeof(cwd)) != NULL)
    snprintf(rn_stats.path, sizeof(rn_stats.path), "%s/%s", cwd, name);
  else
    snprintf(rn_stats.path, sizeof(rn_stats.path), "%s", name);
  snprintf(rn_stats.raw, sizeof(rn_stats.raw), "%s", raw);
  rn_stats.pid = getpid();
  rn_stats.said = 0;
}

void rn_stats_append(const char *line, size_t len) {
  const char *raw = rn_params()->stats;
  if (raw[0] == '\0' || len == 0) return;
  pthread_mutex_lock(&rn_stats_lock);
  if (rn_stats.pid != getpid() || strcmp(rn_stats.raw, raw) != 0) rn_stats_resolve(raw);
  int fd = open(rn_stats.path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    /* Telemetry only: the comms go on without it, and the file is tried
     * again at the next line (a directory made later is used). */
    if (!rn_stats.said)
      RN_WARN("RAILNET_STATS=%s: cannot append to %s (%s); no telemetry until it can", raw,
              rn_stats.path, strerror(errno));
    rn_stats.said = 1;
  } else {
    if (rn_stats.said != 2)
      RN_INFO(NCCL_NET | NCCL_ENV, "RAILNET_STATS=%s: appending each comm's counters to %s", raw,
              rn_stats.path);
    rn_stats.said = 2;
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
