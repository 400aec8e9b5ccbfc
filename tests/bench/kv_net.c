/* The transports the proxy model drives: railnet through the ncclNet ABI
 * (any of v8..v12, loaded as NCCL loads it), the side channel between the
 * two processes, comm setup over it, and small helpers. */
#include "kv.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- railnet: thin wrappers over the version-neutral plugin view ------ */
static ncclResult_t rn_listen(struct kv_net *n, void *handle, void **lc) {
  return rn_net_listen(&n->rn, n->dev, handle, lc);
}
static ncclResult_t rn_connect(struct kv_net *n, void *handle, void **sc) {
  return rn_net_connect_tc(&n->rn, n->dev, handle, sc, n->traffic_class);
}
static ncclResult_t rn_accept(struct kv_net *n, void *lc, void **rc) {
  return rn_net_accept(&n->rn, lc, rc);
}
static ncclResult_t rn_regmr(struct kv_net *n, void *comm, void *data, size_t size, void **mh) {
  return rn_net_regmr(&n->rn, comm, data, size, NCCL_PTR_HOST, mh);
}
static ncclResult_t rn_deregmr(struct kv_net *n, void *comm, void *mh) {
  return rn_net_deregmr(&n->rn, comm, mh);
}
static ncclResult_t rn_isend(struct kv_net *n, void *sc, void *data, size_t size, int tag, void *mh,
                             void **req) {
  return rn_net_isend(&n->rn, sc, data, size, tag, mh, req);
}
static ncclResult_t rn_irecv(struct kv_net *n, void *rc, int cnt, void **data, const size_t *sizes,
                             const int *tags, void **mhs, void **req) {
  return rn_net_irecv(&n->rn, rc, cnt, data, sizes, tags, mhs, req);
}
static ncclResult_t rn_test(struct kv_net *n, void *req, int *done, int *sizes) {
  return rn_net_test(&n->rn, req, done, sizes);
}
static ncclResult_t rn_close_send(struct kv_net *n, void *c) {
  return rn_net_close_send(&n->rn, c);
}
static ncclResult_t rn_close_recv(struct kv_net *n, void *c) {
  return rn_net_close_recv(&n->rn, c);
}
static ncclResult_t rn_close_listen(struct kv_net *n, void *c) {
  return rn_net_close_listen(&n->rn, c);
}

const struct kv_net_ops kv_railnet_ops = {
    .name = "railnet",
    .listen = rn_listen,
    .connect = rn_connect,
    .accept = rn_accept,
    .regmr = rn_regmr,
    .deregmr = rn_deregmr,
    .isend = rn_isend,
    .irecv = rn_irecv,
    .test = rn_test,
    .close_send = rn_close_send,
    .close_recv = rn_close_recv,
    .close_listen = rn_close_listen,
};

/* `loaded` is the process's dlopen of the plugin (rn_net_open done).  v11+
 * gets a context of its own per communicator view, as NCCL gives one per
 * communicator; v8..v10 are initialized once per process. */
int kv_net_open_railnet(struct kv_net *n, struct rn_net *loaded, int version, int dev, int tc,
                        char *why, size_t whylen) {
  memset(n, 0, sizeof *n);
  n->ops = &kv_railnet_ops;
  n->dev = dev;
  n->traffic_class = tc;
  ncclResult_t r;
  if (version >= 11) {
    n->rn = *loaded;
    r = rn_net_init_tc(&n->rn, tc);
    if (r != ncclSuccess) {
      snprintf(why, whylen, "init (v%d): %s", version, rn_result_str(r));
      return -1;
    }
    n->owns_init = 1;
  } else {
    if (!loaded->inited && (r = rn_net_init(loaded)) != ncclSuccess) {
      snprintf(why, whylen, "init (v%d): %s", version, rn_result_str(r));
      return -1;
    }
    n->rn = *loaded;
  }
  int ndev = 0;
  r = rn_net_devices(&n->rn, &ndev);
  if (r != ncclSuccess || ndev <= dev) {
    snprintf(why, whylen, "devices: %s, %d device(s), want device %d", rn_result_str(r), ndev, dev);
    kv_net_release(n);
    return -1;
  }
  struct rn_props p;
  r = rn_net_props(&n->rn, dev, &p);
  if (r != ncclSuccess) {
    snprintf(why, whylen, "getProperties(%d): %s", dev, rn_result_str(r));
    kv_net_release(n);
    return -1;
  }
  n->max_recvs = p.max_recvs < 1 ? 1 : p.max_recvs;
  return 0;
}

void kv_net_release(struct kv_net *n) {
  if (n->owns_init) rn_net_finalize(&n->rn);
  n->owns_init = 0;
}

/* ---- side channel -------------------------------------------------------- */
int kv_side_write(int fd, const void *buf, size_t len) { return rn_write_all(fd, buf, len); }

/* timeout_s is not scaled: the callers' bounds are already generous. */
int kv_side_read(int fd, void *buf, size_t len, double timeout_s) {
  return rn_read_all(fd, buf, len, now_s() + timeout_s);
}

int kv_side_sync(int fd, double timeout_s) {
  char c = 's';
  if (kv_side_write(fd, &c, 1) != 0) return -1;
  if (kv_side_read(fd, &c, 1, timeout_s) != 0) return -1;
  return c == 's' ? 0 : -1;
}

int kv_connect_comms(int side, struct kv_net *n, int we_listen, int count, void **comms,
                     double timeout_s, char *why, size_t whylen) {
  char(*handles)[KV_HANDLE_BYTES] = calloc((size_t)count, KV_HANDLE_BYTES);
  void **lc = calloc((size_t)count, sizeof(void *));
  int rc = -1;
  ncclResult_t r;
  if (handles == NULL || lc == NULL) {
    snprintf(why, whylen, "out of memory");
    goto out;
  }
  for (int i = 0; i < count; i++) comms[i] = NULL;
  if (we_listen) {
    for (int i = 0; i < count; i++) {
      r = n->ops->listen(n, handles[i], &lc[i]);
      if (r != ncclSuccess || lc[i] == NULL) {
        snprintf(why, whylen, "%s listen #%d: %s", n->ops->name, i, rn_result_str(r));
        goto out;
      }
    }
    if (kv_side_write(side, handles, (size_t)count * KV_HANDLE_BYTES) != 0) {
      snprintf(why, whylen, "side channel: handles not sent");
      goto out;
    }
  } else if (kv_side_read(side, handles, (size_t)count * KV_HANDLE_BYTES, timeout_s) != 0) {
    snprintf(why, whylen, "side channel: no handles within %.0f s", timeout_s);
    goto out;
  }
  double end = now_s() + timeout_s;
  for (long spins = 0;; spins++) {
    int up = 0;
    for (int i = 0; i < count; i++) {
      if (comms[i] == NULL) {
        r = we_listen ? n->ops->accept(n, lc[i], &comms[i])
                      : n->ops->connect(n, handles[i], &comms[i]);
        if (r != ncclSuccess) {
          snprintf(why, whylen, "%s %s #%d: %s", n->ops->name, we_listen ? "accept" : "connect", i,
                   rn_result_str(r));
          goto out;
        }
      }
      up += comms[i] != NULL;
    }
    if (up == count) break;
    if (now_s() > end) {
      snprintf(why, whylen, "%s: %d of %d comms up after %.0f s", n->ops->name, up, count,
               timeout_s);
      goto out;
    }
    if (spins % 64 == 63) sleep_us(50);
  }
  rc = 0;
out:
  if (lc != NULL)
    for (int i = 0; i < count; i++)
      if (lc[i] != NULL) {
        r = n->ops->close_listen(n, lc[i]);
        if (r != ncclSuccess && rc == 0) {
          snprintf(why, whylen, "%s closeListen: %s", n->ops->name, rn_result_str(r));
          rc = -1;
        }
      }
  free(handles);
  free(lc);
  return rc;
}

int kv_close_comms(struct kv_net *n, int is_send, int count, void **comms) {
  int rc = 0;
  for (int i = 0; i < count; i++) {
    if (comms[i] == NULL) continue;
    ncclResult_t r = is_send ? n->ops->close_send(n, comms[i]) : n->ops->close_recv(n, comms[i]);
    if (r != ncclSuccess) rc = -1;
    comms[i] = NULL;
  }
  return rc;
}

/* ---- helpers -------------------------------------------------------------- */
static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
double kv_thread_cpu_s(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }
double kv_proc_cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

int kv_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Nearest rank on a sorted array: q in [0, 1]. */
double kv_percentile(const double *sorted, long n, double q) {
  if (n <= 0) return 0;
  long i = (long)(q * (double)n + 0.999999) - 1;
  if (i < 0) i = 0;
  if (i >= n) i = n - 1;
  return sorted[i];
}

void kv_calls_add(struct kv_calls *a, const struct kv_calls *b) {
  a->isend += b->isend;
  a->isend_null += b->isend_null;
  a->irecv += b->irecv;
  a->irecv_null += b->irecv_null;
  a->test += b->test;
  a->test_done += b->test_done;
  a->ns_isend += b->ns_isend;
  a->ns_irecv += b->ns_irecv;
  a->ns_test_done += b->ns_test_done;
  a->ns_test_pending += b->ns_test_pending;
}

void kv_result_free(struct kv_result *r) {
  free(r->req_s);
  r->req_s = NULL;
}

static void side_add(struct kv_side_stats *a, const struct kv_side_stats *b) {
  a->wall_s += b->wall_s;
  a->proxy_cpu_s += b->proxy_cpu_s;
  a->proc_cpu_s += b->proc_cpu_s;
  a->msgs += b->msgs;
  a->wire_bytes += b->wire_bytes;
  a->verified += b->verified;
  a->passes += b->passes;
  a->idle_passes += b->idle_passes;
  a->grouped_irecvs += b->grouped_irecvs;
  if (b->max_inflight > a->max_inflight) a->max_inflight = b->max_inflight;
  kv_calls_add(&a->calls, &b->calls);
}

int kv_result_merge(struct kv_result *dst, struct kv_result *src) {
  if (!src->ok) return 0;
  if (!dst->ok) {
    *dst = *src;
    src->req_s = NULL;
    return 0;
  }
  double *x = realloc(dst->req_s, sizeof(double) * (size_t)(dst->nreq + src->nreq));
  if (x == NULL) return -1;
  memcpy(x + dst->nreq, src->req_s, sizeof(double) * (size_t)src->nreq);
  double units = dst->ops_per_s * dst->rcv.wall_s + src->ops_per_s * src->rcv.wall_s;
  dst->req_s = x;
  dst->nreq += src->nreq;
  dst->data_bytes += src->data_bytes;
  side_add(&dst->snd, &src->snd);
  side_add(&dst->rcv, &src->rcv);
  qsort(dst->req_s, (size_t)dst->nreq, sizeof(double), kv_cmp_double);
  double sum = 0;
  for (long i = 0; i < dst->nreq; i++) sum += dst->req_s[i];
  dst->mean_s = sum / (double)dst->nreq;
  dst->p50_s = kv_percentile(dst->req_s, dst->nreq, 0.50);
  dst->p99_s = kv_percentile(dst->req_s, dst->nreq, 0.99);
  double w = dst->rcv.wall_s > 0 ? dst->rcv.wall_s : 1e-9;
  dst->gbps = (double)dst->data_bytes / w / 1e9;
  dst->msgs_per_s = (double)dst->rcv.msgs / w;
  dst->ops_per_s = units / w;
  kv_result_free(src);
  return 0;
}
