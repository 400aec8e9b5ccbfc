/* A version-neutral view of the plugin ABI (v8..v12), loaded the way NCCL
 * loads it, and the capturing logger handed to init.  v12's table has
 * v11's members with v11's types but for getProperties and makeVDevice,
 * so every other call goes through the v11 view for both. */
#include "rn_test.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

/* ---- logger ------------------------------------------------------------ */
#define LOG_KEEP 64
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int log_nwarn;
static char log_warn[LOG_KEEP][1024];
static int log_head; /* next slot */
static int log_kept; /* since reset */
#define LOG_WATCH 8
static char log_needle[LOG_WATCH][128];
static int log_seen[LOG_WATCH], log_nwatch;

void rn_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
               const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  static int verbose = -1;
  if (verbose < 0) verbose = (int)rn_env_long("RN_CONF_VERBOSE", 0);
  if (log_nwatch > 0) {
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < log_nwatch; i++) log_seen[i] += strstr(msg, log_needle[i]) != NULL;
    pthread_mutex_unlock(&log_mu);
  }
  if (level == NCCL_LOG_WARN) {
    pthread_mutex_lock(&log_mu);
    log_nwarn++;
    snprintf(log_warn[log_head], sizeof log_warn[0], "%s", msg);
    log_head = (log_head + 1) % LOG_KEEP;
    if (log_kept < LOG_KEEP) log_kept++;
    pthread_mutex_unlock(&log_mu);
  }
  if (verbose > 0 ||
      (verbose == 0 && level == NCCL_LOG_WARN && rn_env_long("RN_CONF_SHOW_WARN", 0))) {
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    const char *lv = level == NCCL_LOG_WARN    ? "WARN"
                     : level == NCCL_LOG_INFO  ? "INFO"
                     : level == NCCL_LOG_TRACE ? "TRACE"
                     : level == NCCL_LOG_ABORT ? "ABORT"
                                               : "VERSION";
    if (level == NCCL_LOG_TRACE && verbose < 2) return;
    char line_buf[1400];
    int n = snprintf(
        line_buf, sizeof line_buf, "%s:%d:%d [0] NCCL %s %s%s%s%s\n", host, (int)getpid(),
        (int)gettid(), lv, msg, (level == NCCL_LOG_WARN && file) ? " (" : "",
        (level == NCCL_LOG_WARN && file) ? file : "", (level == NCCL_LOG_WARN && file) ? ")" : "");
    (void)flags;
    (void)line;
    if (n > 0) {
      ssize_t w = write(2, line_buf, (size_t)n < sizeof line_buf ? (size_t)n : sizeof line_buf - 1);
      (void)w;
    }
  }
}

int rn_log_warns(void) {
  pthread_mutex_lock(&log_mu);
  int n = log_nwarn;
  pthread_mutex_unlock(&log_mu);
  return n;
}

int rn_log_has_warn(const char *needle1, const char *needle2) {
  int found = 0;
  pthread_mutex_lock(&log_mu);
  for (int i = 0; i < log_kept && !found; i++) {
    const char *m = log_warn[(log_head - 1 - i + LOG_KEEP) % LOG_KEEP];
    if ((needle1 == NULL || strstr(m, needle1)) && (needle2 == NULL || strstr(m, needle2)))
      found = 1;
  }
  pthread_mutex_unlock(&log_mu);
  return found;
}

int rn_log_first_warn(const char *needle, char *buf, size_t len) {
  int found = 0;
  pthread_mutex_lock(&log_mu);
  for (int i = log_kept - 1; i >= 0 && !found; i--) {
    const char *m = log_warn[(log_head - 1 - i + LOG_KEEP) % LOG_KEEP];
    if (needle == NULL || strstr(m, needle)) {
      snprintf(buf, len, "%s", m);
      found = 1;
    }
  }
  pthread_mutex_unlock(&log_mu);
  return found;
}

const char *rn_log_last_warn(void) {
  static __thread char copy[512];
  pthread_mutex_lock(&log_mu);
  if (log_kept == 0)
    copy[0] = '\0';
  else
    snprintf(copy, sizeof copy, "%s", log_warn[(log_head - 1 + LOG_KEEP) % LOG_KEEP]);
  pthread_mutex_unlock(&log_mu);
  return copy;
}

int rn_log_watch(const char *needle) {
  pthread_mutex_lock(&log_mu);
  int i = 0;
  while (i < log_nwatch && strcmp(log_needle[i], needle) != 0) i++;
  if (i == log_nwatch && i < LOG_WATCH)
    snprintf(log_needle[log_nwatch++], sizeof log_needle[0], "%s", needle);
  if (i < LOG_WATCH) log_seen[i] = 0;
  pthread_mutex_unlock(&log_mu);
  return i < LOG_WATCH ? i : -1;
}

int rn_log_seen(int watch) {
  pthread_mutex_lock(&log_mu);
  int n = watch >= 0 && watch < log_nwatch ? log_seen[watch] : -1;
  pthread_mutex_unlock(&log_mu);
  return n;
}

void rn_log_reset(void) {
  pthread_mutex_lock(&log_mu);
  log_kept = 0;
  pthread_mutex_unlock(&log_mu);
}

/* ---- loading ---------------------------------------------------------- */
const ncclNet_v8_t *rn_load_v8(int tap) {
  const char *so = rn_plugin_path();
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  const ncclNet_v8_t *n = h ? dlsym(h, "ncclNetPlugin_v8") : NULL;
  if (n == NULL)
    printf("not ok %d - load %s: %s\n", tap, so, h ? "no ncclNetPlugin_v8" : dlerror());
  return n;
}

int rn_tap_call_failed(int tap, const char *what, int r) {
  printf("not ok %d - %s (%d)\n", tap, what, r);
  return 1;
}

int rn_parse_version(const char *s) {
  if (s == NULL) return 0;
  if (*s == 'v' || *s == 'V') s++;
  int v = atoi(s);
  return (v >= 8 && v <= 12) ? v : 0;
}

int rn_net_open(struct rn_net *n, int version, char *err, size_t errlen) {
  memset(n, 0, sizeof *n);
  n->version = version;
  const char *path = rn_plugin_path();
  n->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (n->dl == NULL) {
    snprintf(err, errlen, "dlopen(%s): %s", path, dlerror());
    return -1;
  }
  char sym[32];
  snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", version);
  void *t = dlsym(n->dl, sym);
  if (t == NULL) {
    snprintf(err, errlen, "dlsym(%s) in %s: not exported", sym, path);
    dlclose(n->dl);
    n->dl = NULL;
    return -1;
  }
  n->t.v8 = t;
  n->name = n->t.v8->name; /* name is the first member in every version */
  return 0;
}

void rn_net_close(struct rn_net *n) {
  if (n->dl) dlclose(n->dl);
  n->dl = NULL;
}

static ncclResult_t rn_profiler_stub(void **eHandle, int type, void *pHandle, int64_t pluginId,
                                     void *extData) {
  (void)type;
  (void)pHandle;
  (void)pluginId;
  (void)extData;
  if (eHandle) *eHandle = NULL;
  return ncclSuccess;
}

ncclResult_t rn_net_init(struct rn_net *n) {
  ncclResult_t r;
  static uint64_t comm_id = 0x1234;
  switch (n->version) {
    case 8:
      r = n->t.v8->init(rn_logger);
      break;
    case 9:
      r = n->t.v9->init(rn_logger);
      break;
    case 10:
      r = n->t.v10->init(rn_logger, rn_profiler_stub);
      break;
    default: {
      ncclNetCommConfig_v11_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
      n->ctx = NULL;
      r = n->t.v11->init(&n->ctx, __atomic_add_fetch(&comm_id, 1, __ATOMIC_RELAXED), &cfg,
                         rn_logger, rn_profiler_stub);
    }
  }
  if (r == ncclSuccess) n->inited = 1;
  return r;
}

/* As rn_net_init, with a traffic class in v11's per-communicator config
 * (v12's too; older versions take it at connect: rn_net_connect_tc). */
ncclResult_t rn_net_init_tc(struct rn_net *n, int traffic_class) {
  if (n->version < 11) return rn_net_init(n);
  static uint64_t tc_comm_id = 0x5678;
  ncclNetCommConfig_v11_t cfg = {traffic_class};
  n->ctx = NULL;
  ncclResult_t r = n->t.v11->init(&n->ctx, __atomic_add_fetch(&tc_comm_id, 1, __ATOMIC_RELAXED),
                                  &cfg, rn_logger, rn_profiler_stub);
  if (r == ncclSuccess) n->inited = 1;
  return r;
}

ncclResult_t rn_net_finalize(struct rn_net *n) {
  if (n->version < 11) return ncclSuccess;
  ncclResult_t r = n->t.v11->finalize(n->ctx);
  n->ctx = NULL;
  n->inited = 0;
  return r;
}

ncclResult_t rn_net_devices(struct rn_net *n, int *ndev) {
  return n->t.v8->devices(ndev); /* same slot and type in every version */
}

/* A version's properties into the harness's view.  Field names agree
 * between versions, so one macro per addition. */
#define RN_TEST_PROPS_V8(p, q)                                                  \
  do {                                                                          \
    (p)->name = (q).name, (p)->pci_path = (q).pciPath, (p)->guid = (q).guid;    \
    (p)->ptr_support = (q).ptrSupport, (p)->reg_is_global = (q).regIsGlobal;    \
    (p)->speed = (q).speed, (p)->port = (q).port, (p)->latency = (q).latency;   \
    (p)->max_comms = (q).maxComms, (p)->max_recvs = (q).maxRecvs;               \
    (p)->dev_type = (q).netDeviceType, (p)->dev_version = (q).netDeviceVersion; \
  } while (0)
#define RN_TEST_PROPS_V9(p, q)                                                    \
  do {                                                                            \
    RN_TEST_PROPS_V8(p, q);                                                       \
    (p)->force_flush = (q).forceFlush;                                            \
    (p)->vndevs = (q).vProps.ndevs, (p)->vdev0 = (q).vProps.devs[0];              \
    (p)->max_p2p_bytes = (q).maxP2pBytes, (p)->max_coll_bytes = (q).maxCollBytes; \
  } while (0)

ncclResult_t rn_net_props(struct rn_net *n, int dev, struct rn_props *p) {
  ncclResult_t r;
  memset(p, 0, sizeof *p);
  p->vndevs = 1;
  p->vdev0 = dev;
  p->rail_id = p->plane_id = NCCL_NET_ID_UNDEF; /* what NCCL assumes before v12 */
  if (n->version == 8) {
    ncclNetProperties_v8_t q;
    memset(&q, 0, sizeof q);
    r = n->t.v8->getProperties(dev, &q);
    RN_TEST_PROPS_V8(p, q);
    return r;
  }
  if (n->version == 9 || n->version == 10) {
    ncclNetProperties_v9_t q;
    memset(&q, 0, sizeof q);
    r = n->version == 9 ? n->t.v9->getProperties(dev, &q) : n->t.v10->getProperties(dev, &q);
    RN_TEST_PROPS_V9(p, q);
    return r;
  }
  if (n->version == 11) {
    ncclNetProperties_v11_t q;
    memset(&q, 0, sizeof q);
    r = n->t.v11->getProperties(dev, &q);
    RN_TEST_PROPS_V9(p, q);
    p->max_multi_request_size = q.maxMultiRequestSize;
    return r;
  }
  ncclNetProperties_v12_t q;
  memset(&q, 0, sizeof q);
  r = n->t.v12->getProperties(dev, &q);
  RN_TEST_PROPS_V9(p, q);
  p->max_multi_request_size = q.maxMultiRequestSize;
  p->rail_id = q.railId, p->plane_id = q.planeId;
  return r;
}

ncclResult_t rn_net_listen(struct rn_net *n, int dev, void *handle, void **lcomm) {
  if (n->version >= 11) return n->t.v11->listen(n->ctx, dev, handle, lcomm);
  return n->t.v8->listen(dev, handle, lcomm); /* same slot v8..v10 */
}

ncclResult_t rn_net_connect(struct rn_net *n, int dev, void *handle, void **scomm) {
  ncclNetDeviceHandle_t *dh = NULL;
  switch (n->version) {
    case 8:
      return n->t.v8->connect(dev, handle, scomm, &dh);
    case 9:
      return n->t.v9->connect(dev, handle, scomm, &dh);
    case 10: {
      ncclNetCommConfig_v10_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
      return n->t.v10->connect(dev, &cfg, handle, scomm, &dh);
    }
    default:
      return n->t.v11->connect(n->ctx, dev, handle, scomm, &dh);
  }
}

/* As rn_net_connect, with a traffic class in v10's comm config (v11 takes
 * it at init, v8/v9 have none). */
ncclResult_t rn_net_connect_tc(struct rn_net *n, int dev, void *handle, void **scomm,
                               int traffic_class) {
  if (n->version != 10) return rn_net_connect(n, dev, handle, scomm);
  ncclNetDeviceHandle_t *dh = NULL;
  ncclNetCommConfig_v10_t cfg = {traffic_class};
  return n->t.v10->connect(dev, &cfg, handle, scomm, &dh);
}

ncclResult_t rn_net_accept(struct rn_net *n, void *lcomm, void **rcomm) {
  ncclNetDeviceHandle_t *dh = NULL;
  return n->t.v8->accept(lcomm, rcomm, &dh); /* same slot and type */
}

/* regMr..deregMr: same slots and types in every version.  The structs
 * diverge only after deregMr (isend), and only in isend/irecv types. */
ncclResult_t rn_net_regmr(struct rn_net *n, void *comm, void *data, size_t size, int type,
                          void **mh) {
  return n->t.v8->regMr(comm, data, size, type, mh);
}

ncclResult_t rn_net_deregmr(struct rn_net *n, void *comm, void *mh) {
  return n->t.v8->deregMr(comm, mh);
}

ncclResult_t rn_net_isend(struct rn_net *n, void *scomm, void *data, size_t size, int tag, void *mh,
                          void **req) {
  switch (n->version) {
    case 8:
      if (size > INT_MAX) return ncclInvalidArgument; /* the harness's own limit */
      return n->t.v8->isend(scomm, data, (int)size, tag, mh, req);
    case 9:
      return n->t.v9->isend(scomm, data, size, tag, mh, req);
    case 10:
      return n->t.v10->isend(scomm, data, size, tag, mh, NULL, req);
    default:
      return n->t.v11->isend(scomm, data, size, tag, mh, NULL, req);
  }
}

#define RN_MAX_IRECV 64
ncclResult_t rn_net_irecv(struct rn_net *n, void *rcomm, int cnt, void **data, const size_t *sizes,
                          const int *tags, void **mhs, void **req) {
  int isz[RN_MAX_IRECV];
  size_t ssz[RN_MAX_IRECV];
  int tg[RN_MAX_IRECV];
  int m = cnt < 0 ? 0 : (cnt > RN_MAX_IRECV ? RN_MAX_IRECV : cnt);
  for (int i = 0; i < m; i++) {
    if (sizes[i] > INT_MAX && n->version == 8) return ncclInvalidArgument;
    isz[i] = (int)sizes[i];
    ssz[i] = sizes[i];
    tg[i] = tags[i];
  }
  void *ph[RN_MAX_IRECV] = {0};
  switch (n->version) {
    case 8:
      return n->t.v8->irecv(rcomm, cnt, data, isz, tg, mhs, req);
    case 9:
      return n->t.v9->irecv(rcomm, cnt, data, ssz, tg, mhs, req);
    case 10:
      return n->t.v10->irecv(rcomm, cnt, data, ssz, tg, mhs, ph, req);
    default:
      return n->t.v11->irecv(rcomm, cnt, data, ssz, tg, mhs, ph, req);
  }
}

ncclResult_t rn_net_test(struct rn_net *n, void *req, int *done, int *sizes) {
  return n->t.v8->test(req, done, sizes); /* same slot and type in every version */
}

/* The optional entry points.  Same slots and types in v8..v12 except
 * setNetAttr (v11 and v12 only). */
ncclResult_t rn_net_regmr_dmabuf(struct rn_net *n, void *comm, void *data, size_t size, int type,
                                 uint64_t offset, int fd, void **mh) {
  switch (n->version) {
    case 8:
      return n->t.v8->regMrDmaBuf(comm, data, size, type, offset, fd, mh);
    case 9:
      return n->t.v9->regMrDmaBuf(comm, data, size, type, offset, fd, mh);
    case 10:
      return n->t.v10->regMrDmaBuf(comm, data, size, type, offset, fd, mh);
    default:
      return n->t.v11->regMrDmaBuf(comm, data, size, type, offset, fd, mh);
  }
}

ncclResult_t rn_net_iflush(struct rn_net *n, void *rcomm, int cnt, void **data, int *sizes,
                           void **mhs, void **req) {
  switch (n->version) {
    case 8:
      return n->t.v8->iflush(rcomm, cnt, data, sizes, mhs, req);
    case 9:
      return n->t.v9->iflush(rcomm, cnt, data, sizes, mhs, req);
    case 10:
      return n->t.v10->iflush(rcomm, cnt, data, sizes, mhs, req);
    default:
      return n->t.v11->iflush(rcomm, cnt, data, sizes, mhs, req);
  }
}

/* A NULL slot is allowed by the ABI for the next two; the caller checks
 * rn_net_has_*() first. */
int rn_net_has_get_device_mr(struct rn_net *n) {
  switch (n->version) {
    case 8:
      return n->t.v8->getDeviceMr != NULL;
    case 9:
      return n->t.v9->getDeviceMr != NULL;
    case 10:
      return n->t.v10->getDeviceMr != NULL;
    default:
      return n->t.v11->getDeviceMr != NULL;
  }
}

ncclResult_t rn_net_get_device_mr(struct rn_net *n, void *comm, void *mh, void **dptr) {
  switch (n->version) {
    case 8:
      return n->t.v8->getDeviceMr(comm, mh, dptr);
    case 9:
      return n->t.v9->getDeviceMr(comm, mh, dptr);
    case 10:
      return n->t.v10->getDeviceMr(comm, mh, dptr);
    default:
      return n->t.v11->getDeviceMr(comm, mh, dptr);
  }
}

int rn_net_has_irecv_consumed(struct rn_net *n) {
  switch (n->version) {
    case 8:
      return n->t.v8->irecvConsumed != NULL;
    case 9:
      return n->t.v9->irecvConsumed != NULL;
    case 10:
      return n->t.v10->irecvConsumed != NULL;
    default:
      return n->t.v11->irecvConsumed != NULL;
  }
}

ncclResult_t rn_net_irecv_consumed(struct rn_net *n, void *rcomm, int cnt, void *req) {
  switch (n->version) {
    case 8:
      return n->t.v8->irecvConsumed(rcomm, cnt, req);
    case 9:
      return n->t.v9->irecvConsumed(rcomm, cnt, req);
    case 10:
      return n->t.v10->irecvConsumed(rcomm, cnt, req);
    default:
      return n->t.v11->irecvConsumed(rcomm, cnt, req);
  }
}

ncclResult_t rn_net_set_net_attr(struct rn_net *n, void *attr) {
  if (n->version < 11) return ncclInvalidUsage; /* no such slot before v11 */
  return n->t.v11->setNetAttr(n->ctx, attr);
}

ncclResult_t rn_net_close_send(struct rn_net *n, void *c) {
  return n->t.v8->closeSend(c); /* same slot and type in every version */
}

ncclResult_t rn_net_close_recv(struct rn_net *n, void *c) {
  return n->t.v8->closeRecv(c); /* same slot and type in every version */
}

ncclResult_t rn_net_close_listen(struct rn_net *n, void *c) {
  return n->t.v8->closeListen(c); /* same slot and type in every version */
}

const char *rn_result_str(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult(?)";
  }
}

/* ---- one transfer within this process ------------------------------------ */
int rn_net_pair_transfer(struct rn_net *n, void *sc, void *rc, size_t len, int tag) {
  void *smh = NULL, *rmh = NULL;
  double end = rn_deadline(20);
  int rcode = 0;
  unsigned char *src = malloc(len ? len : 1), *dst = calloc(1, len ? len : 1);
  if (sc == NULL || rc == NULL || src == NULL || dst == NULL) rcode = -1;
  if (rcode == 0) {
    pattern_fill(src, len, 12);
    if (rn_net_regmr(n, sc, src, len, NCCL_PTR_HOST, &smh) != ncclSuccess ||
        rn_net_regmr(n, rc, dst, len, NCCL_PTR_HOST, &rmh) != ncclSuccess)
      rcode = -1;
  }
  void *rreq = NULL, *sreq = NULL, *d = dst;
  size_t sz = len;
  int rdone = 0, sdone = 0, got = -1;
  while (rcode == 0 && rreq == NULL && now_s() < end)
    if (rn_net_irecv(n, rc, 1, &d, &sz, &tag, &rmh, &rreq) != ncclSuccess) rcode = -1;
  while (rcode == 0 && !(rdone && sdone) && now_s() < end) {
    if (sreq == NULL && rn_net_isend(n, sc, src, len, tag, smh, &sreq) != ncclSuccess) rcode = -1;
    if (sreq != NULL && !sdone && rn_net_test(n, sreq, &sdone, NULL) != ncclSuccess) rcode = -1;
    if (rreq != NULL && !rdone && rn_net_test(n, rreq, &rdone, &got) != ncclSuccess) rcode = -1;
  }
  if (!(rdone && sdone) || (size_t)got != len || pattern_check(dst, len, 12) != (size_t)-1)
    rcode = -1;
  if (smh != NULL && rn_net_deregmr(n, sc, smh) != ncclSuccess) rcode = -1;
  if (rmh != NULL && rn_net_deregmr(n, rc, rmh) != ncclSuccess) rcode = -1;
  free(src);
  free(dst);
  return rcode;
}

ncclResult_t rn_net_self_connect(struct rn_net *n, int dev, void **lc, void **sc, void **rc) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  *lc = *sc = *rc = NULL;
  ncclResult_t r = rn_net_listen(n, dev, handle, lc);
  double end = rn_deadline(20);
  while (r == ncclSuccess && (*sc == NULL || *rc == NULL) && now_s() < end) {
    if (*sc == NULL) r = rn_net_connect(n, dev, handle, sc);
    if (r == ncclSuccess && *rc == NULL) r = rn_net_accept(n, *lc, rc);
  }
  return r == ncclSuccess && (*sc == NULL || *rc == NULL) ? ncclInternalError : r;
}

int rn_net_self_transfer(struct rn_net *n, int dev, size_t len) {
  void *lc = NULL, *sc = NULL, *rc = NULL;
  int rcode = rn_net_self_connect(n, dev, &lc, &sc, &rc) == ncclSuccess ? 0 : -1;
  if (rcode == 0 && rn_net_pair_transfer(n, sc, rc, len, 3) != 0) rcode = -1;
  if (sc != NULL && rn_net_close_send(n, sc) != ncclSuccess) rcode = -1;
  if (rc != NULL && rn_net_close_recv(n, rc) != ncclSuccess) rcode = -1;
  if (lc != NULL && rn_net_close_listen(n, lc) != ncclSuccess) rcode = -1;
  return rcode;
}

int rn_open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (d == NULL) return -1;
  while (readdir(d) != NULL) n++;
  closedir(d);
  return n - 3; /* ".", ".." and the directory's own descriptor */
}

int rn_handle_port(const void *handle) {
  uint16_t port;
  memcpy(&port, (const char *)handle + 16 + 2, sizeof(port));
  return ntohs(port);
}

int rn_two_ifs_env(char *spec, size_t len) {
  char ifs[128] = "";
  FILE *f = popen("ls /sys/class/net | grep -v '^lo$' | head -1", "r");
  if (f != NULL) {
    if (fgets(ifs, sizeof(ifs), f) == NULL) ifs[0] = '\0';
    pclose(f);
  }
  ifs[strcspn(ifs, "\n")] = '\0';
  if (ifs[0] == '\0') {
    printf("1..0 # SKIP needs a second network interface besides lo\n");
    return -1;
  }
  snprintf(spec, len, "=lo,%s", ifs);
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", spec, 1);
  setenv("RAILNET_NICS", spec + 1, 1);
  return 0;
}

void *rn_dlopen_plugin(void) {
  void *h = dlopen(rn_plugin_path(), RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) printf("1..1\nnot ok 1 - dlopen %s: %s\n", rn_plugin_path(), dlerror());
  return h;
}
