/* railnet-comms-bench: what one small operation costs as the number of
 * live comms grows.  Two processes hold N comms from A to B (plus one from
 * B to A for the reply) and ping-pong 8 bytes on the first pair; B posts a
 * small receive (its clear-to-send is deferred to the process's next
 * isend) and measures the CPU time of its reply isend, which is where any
 * per-process walk over comms would show.  N = 1 is the anchor of the same
 * run; the goal is at most 1.2 x at 4,096 comms.  Also prints descriptors
 * and threads per process at each N.  Each comm has one data stream
 * (RAILNET_SOCKET_NSTREAMS=1) so 4,096 comms and their listeners fit in a
 * common descriptor limit.  A benchmark: prints numbers, exits 0 unless a
 * transfer fails.
 *
 * Section 4 times a fresh comm to its first byte, dialed against one that
 * takes a connection a closed comm kept (plugin/tcp/pool.c).
 *
 *   railnet-comms-bench [--max N] [--iters K] [--api vX] [--baseline SO] [--section 1-4] */
#include <dirent.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "../common/rn_test.h"

struct result {
  double isend_us_p50, isend_us_p90;
  int fds, threads;
  double connect_us;  /* connect + accept of one more comm, all live (receiver, median) */
  double self_us;     /* the same within the receiving process, no handle exchange (median) */
  double self_cpu_us; /* ... its CPU time (median) */
  double all_us;      /* all comms set up at once: wall time per comm */
  int fds0, threads0; /* at the start, before any comm */
  int verified;       /* comms that moved verified data */
  double rtt_us_p50, gbps;
  double first_us;     /* listen to the first 8 bytes landed, in one process (median) */
  long rss0, rss_idle; /* resident bytes at the start and with every comm up and idle */
  int fds_idle;        /* descriptors with every comm up and idle */
};

enum mode { MODE_ISEND = 0, MODE_HELPERS, MODE_PERF, MODE_FIRST };

struct cfg {
  int ncomms, iters;
  enum mode mode;
  size_t first_size; /* MODE_FIRST: the first message's bytes (0: 8) */
};

static double thread_cpu_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  if (d == NULL) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Resident bytes, once freed heap memory (connection set-up's, say) is
 * handed back: what live objects hold. */
static long rss_bytes(void) {
  long pages = 0, res = 0;
  malloc_trim(0);
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL) return -1;
  if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = -1;
  fclose(f);
  return res < 0 ? -1 : res * sysconf(_SC_PAGESIZE);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void raise_fd_limit(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

/* Wait for one request; 0 on success. */
static int wait_req(struct rn_peer *p, void *req, const char *what) {
  double end = rn_deadline(30);
  for (int done = 0; !done;) {
    ncclResult_t r = rn_net_test(&p->net, req, &done, NULL);
    if (r != ncclSuccess) return peer_fail(p, "test(%s): %s", what, rn_result_str(r));
    if (!done && now_s() > end)
      return peer_fail(p, "%s not done within %.0f s", what, rn_bound_s(30));
  }
  return 0;
}

/* Post until the plugin takes it (NULL means retry). */
static int post_n(struct rn_peer *p, void *comm, int is_send, void *buf, size_t size, void *mh,
                  void **req) {
  double end = rn_deadline(30);
  int tag = 0;
  for (*req = NULL; *req == NULL;) {
    ncclResult_t r = is_send ? rn_net_isend(&p->net, comm, buf, size, tag, mh, req)
                             : rn_net_irecv(&p->net, comm, 1, &buf, &size, &tag, &mh, req);
    if (r != ncclSuccess)
      return peer_fail(p, "%s: %s", is_send ? "isend" : "irecv", rn_result_str(r));
    if (*req == NULL && now_s() > end)
      return peer_fail(p, "%s NULL for 30 s", is_send ? "isend" : "irecv");
  }
  return 0;
}

static int post(struct rn_peer *p, void *comm, int is_send, void *buf, void *mh, void **req) {
  return post_n(p, comm, is_send, buf, 8, mh, req);
}

/* Listen, connect and accept within this process, one thread driving
 * both ends: the plugin's own connect + accept cost, without the handle
 * exchange or the other process's scheduling.  Wall and CPU time, or -1. */
static int self_connect(struct rn_peer *p, double *wall_us, double *cpu_us) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  void *lc = NULL, *sc = NULL, *rc = NULL;
  int ret = -1;
  double w0 = now_s(), c0 = thread_cpu_us(), end = rn_deadline(60);
  if (rn_net_listen(&p->net, p->dev, handle, &lc) != ncclSuccess) return peer_fail(p, "listen");
  while (sc == NULL || rc == NULL) {
    if (sc == NULL && rn_net_connect(&p->net, p->dev, handle, &sc) != ncclSuccess) {
      peer_fail(p, "in-process connect");
      goto out;
    }
    if (rc == NULL && rn_net_accept(&p->net, lc, &rc) != ncclSuccess) {
      peer_fail(p, "in-process accept");
      goto out;
    }
    if (now_s() > end) {
      peer_fail(p, "in-process connect not up within %.0f s", rn_bound_s(60));
      goto out;
    }
  }
  *wall_us = (now_s() - w0) * 1e6;
  *cpu_us = thread_cpu_us() - c0;
  ret = 0;
out:
  if (sc != NULL && rn_net_close_send(&p->net, sc) != ncclSuccess) ret = peer_fail(p, "closeSend");
  if (rc != NULL && rn_net_close_recv(&p->net, rc) != ncclSuccess) ret = peer_fail(p, "closeRecv");
  if (rn_net_close_listen(&p->net, lc) != ncclSuccess) ret = peer_fail(p, "closeListen");
  return ret;
}

/* A fresh comm to its first byte, within this process, one thread driving
 * both ends: listen, connect, accept, then 8 bytes sent and received;
 * wall time to the receive's completion.  The pair then closes with
 * nothing in flight, so its connection may serve the next one. */
static int first_byte(struct rn_peer *p, size_t len, double *wall_us) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  static char small_s[8] = "railnet", small_r[8];
  static char *big_s, *big_r;
  if (len > 8 && big_s == NULL) {
    big_s = malloc(len);
    big_r = malloc(len);
    if (big_s == NULL || big_r == NULL) return peer_fail(p, "out of memory");
    memset(big_s, 0x5a, len);
  }
  char *sbuf = len > 8 ? big_s : small_s, *rbuf = len > 8 ? big_r : small_r;
  void *lc = NULL, *sc = NULL, *rc = NULL, *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL;
  int ret = -1, sdone = 0, rdone = 0, size = 0;
  double w0 = now_s(), end = rn_deadline(60);
  if (rn_net_listen(&p->net, p->dev, handle, &lc) != ncclSuccess) return peer_fail(p, "listen");
  while ((sc == NULL || rc == NULL) && now_s() < end) {
    if (sc == NULL && rn_net_connect(&p->net, p->dev, handle, &sc) != ncclSuccess) goto out;
    if (rc == NULL && rn_net_accept(&p->net, lc, &rc) != ncclSuccess) goto out;
  }
  if (sc == NULL || rc == NULL ||
      rn_net_regmr(&p->net, sc, sbuf, len, NCCL_PTR_HOST, &smh) != ncclSuccess ||
      rn_net_regmr(&p->net, rc, rbuf, len, NCCL_PTR_HOST, &rmh) != ncclSuccess)
    goto out;
  if (post_n(p, rc, 0, rbuf, len, rmh, &rreq) != 0 || post_n(p, sc, 1, sbuf, len, smh, &sreq) != 0)
    goto out;
  while ((!sdone || !rdone) && now_s() < end) {
    if (!rdone && rn_net_test(&p->net, rreq, &rdone, &size) != ncclSuccess) goto out;
    if (!sdone && rn_net_test(&p->net, sreq, &sdone, NULL) != ncclSuccess) goto out;
  }
  *wall_us = (now_s() - w0) * 1e6;
  ret = sdone && rdone && (size_t)size == len && memcmp(sbuf, rbuf, len) == 0 ? 0 : -1;
out:
  if (ret != 0) peer_fail(p, "first byte of an in-process comm");
  if (smh != NULL) rn_net_deregmr(&p->net, sc, smh);
  if (rmh != NULL) rn_net_deregmr(&p->net, rc, rmh);
  if (sc != NULL && rn_net_close_send(&p->net, sc) != ncclSuccess) ret = peer_fail(p, "closeSend");
  if (rc != NULL && rn_net_close_recv(&p->net, rc) != ncclSuccess) ret = peer_fail(p, "closeRecv");
  if (rn_net_close_listen(&p->net, lc) != ncclSuccess) ret = peer_fail(p, "closeListen");
  return ret;
}

/* The reverse comm, B to A: A listens, B connects. */
static int reverse_comm(struct rn_peer *p, void **lc, void **comm) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  *lc = *comm = NULL;
  if (p->role == RN_SENDER) {
    if (rn_net_listen(&p->net, p->dev, handle, lc) != ncclSuccess) return peer_fail(p, "listen");
    if (peer_write(p, handle, sizeof handle) != 0) return peer_fail(p, "pipe");
  } else if (peer_read(p, handle, sizeof handle, 60) != 0) {
    return peer_fail(p, "no reverse handle");
  }
  double end = rn_deadline(60);
  while (*comm == NULL) {
    ncclResult_t r = p->role == RN_SENDER ? rn_net_accept(&p->net, *lc, comm)
                                          : rn_net_connect(&p->net, p->dev, handle, comm);
    if (r != ncclSuccess) return peer_fail(p, "reverse connect/accept: %s", rn_result_str(r));
    if (*comm == NULL && now_s() > end) return peer_fail(p, "reverse comm not up");
  }
  return 0;
}

/* The receiver's result to the runner, then both sides wait for each
 * other before closing. */
static int report(struct rn_peer *p, struct result *res) {
  if (p->role == RN_RECEIVER) {
    res->fds = count_dir("/proc/self/fd");
    res->threads = count_dir("/proc/self/task");
    if (peer_to_parent(p, res, sizeof *res) != 0) return -1;
  }
  return peer_sync(p, 60) != 0 ? peer_fail(p, "peer gone") : 0;
}

static int side(struct rn_peer *p) {
  const struct cfg *c = p->arg;
  raise_fd_limit();
  void **comms = calloc((size_t)c->ncomms, sizeof(void *));
  void **lcomms = calloc((size_t)c->ncomms, sizeof(void *));
  double *t = calloc((size_t)c->iters, sizeof(double));
  if (comms == NULL || lcomms == NULL || t == NULL) return peer_fail(p, "out of memory");
  int rc = -1;
  void *rlc = NULL, *rev = NULL, *mh_fwd = NULL, *mh_rev = NULL;
  static char buf_fwd[64], buf_rev[64];
  struct result res = {.fds0 = count_dir("/proc/self/fd"),
                       .threads0 = count_dir("/proc/self/task"),
                       .rss0 = rss_bytes()};
  double t_conn = now_s();
  /* With helpers on, listen comms close once accepted, as NCCL does. */
  int keep_listen = c->mode != MODE_HELPERS;
  if (peer_connect(p, c->ncomms, comms, keep_listen ? lcomms : NULL, 600) != 0) goto out;
  res.all_us = (now_s() - t_conn) * 1e6 / c->ncomms;
  /* One more comm at a time with all of them live: connect + accept of
   * one (handle exchange included), the median of 9. */
  double one[9];
  for (int k = 0; k < 9; k++) {
    void *extra = NULL;
    double t1 = now_s();
    if (peer_connect(p, 1, &extra, NULL, 60) != 0) goto out;
    one[k] = (now_s() - t1) * 1e6;
    if (peer_close(p, 1, &extra, NULL) != 0) goto out;
  }
  qsort(one, 9, sizeof(double), cmp_double);
  res.connect_us = one[4];
  if (p->role == RN_RECEIVER) {
    double cpu[9];
    for (int k = 0; k < 9; k++)
      if (self_connect(p, &one[k], &cpu[k]) != 0) goto out;
    qsort(one, 9, sizeof(double), cmp_double);
    qsort(cpu, 9, sizeof(double), cmp_double);
    res.self_us = one[4];
    res.self_cpu_us = cpu[4];
  }
  res.rss_idle = rss_bytes();
  res.fds_idle = count_dir("/proc/self/fd");
  if (c->mode == MODE_FIRST) {
    if (p->role == RN_RECEIVER) {
      for (int k = 0; k < c->iters; k++)
        if (first_byte(p, c->first_size ? c->first_size : 8, &t[k]) != 0) goto out;
      qsort(t, (size_t)c->iters, sizeof(double), cmp_double);
      res.first_us = t[c->iters / 2];
    }
    rc = report(p, &res);
    goto out;
  }
  if (c->mode == MODE_HELPERS) {
    /* Every comm moves a verified streamed message (chunks on its data
     * stream, through the engine) and a small one, in turn. */
    static const size_t sizes[] = {70000, 100};
    for (int i = 0; i < c->ncomms; i++) {
      struct rn_stream st = {.p = p,
                             .comm = comms[i],
                             .is_send = p->role == RN_SENDER,
                             .nmsg = 2,
                             .sizes = sizes,
                             .window = 2,
                             .verify = 1,
                             .seed = p->seed + (uint64_t)i};
      if (rn_stream_run(&st, 60) != 0) goto out;
      res.verified++;
    }
    rc = report(p, &res);
    goto out;
  }
  if (reverse_comm(p, &rlc, &rev) != 0) goto out;
  if (rn_net_regmr(&p->net, comms[0], buf_fwd, sizeof buf_fwd, NCCL_PTR_HOST, &mh_fwd) !=
          ncclSuccess ||
      rn_net_regmr(&p->net, rev, buf_rev, sizeof buf_rev, NCCL_PTR_HOST, &mh_rev) != ncclSuccess) {
    peer_fail(p, "regMr");
    goto out;
  }
  /* A: isend on comms[0], irecv on rev.  B: irecv on comms[0], isend on rev. */
  int is_a = p->role == RN_SENDER;
  for (int i = 0; i < c->iters; i++) {
    void *rq = NULL, *sq = NULL;
    double w0 = now_s();
    if (is_a && c->mode == MODE_PERF) {
      if (post(p, rev, 0, buf_rev, mh_rev, &rq) || post(p, comms[0], 1, buf_fwd, mh_fwd, &sq) ||
          wait_req(p, sq, "isend") || wait_req(p, rq, "irecv"))
        goto out;
      t[i] = (now_s() - w0) * 1e6;
    } else if (is_a) {
      if (post(p, rev, 0, buf_rev, mh_rev, &rq) || post(p, comms[0], 1, buf_fwd, mh_fwd, &sq) ||
          wait_req(p, sq, "isend") || wait_req(p, rq, "irecv"))
        goto out;
    } else {
      if (post(p, comms[0], 0, buf_fwd, mh_fwd, &rq) || wait_req(p, rq, "irecv")) goto out;
      double t0 = thread_cpu_us();
      if (post(p, rev, 1, buf_rev, mh_rev, &sq)) goto out;
      t[i] = thread_cpu_us() - t0;
      if (wait_req(p, sq, "isend")) goto out;
    }
  }
  if (c->mode == MODE_PERF) {
    /* Throughput: 4 MiB messages over every comm at once, 2 in flight on
     * each, one thread driving them round-robin (as NCCL's proxy does). */
    static size_t big[48];
    for (int k = 0; k < 48; k++) big[k] = 4 << 20;
    struct rn_stream st[4];
    int nmsg = 48 / c->ncomms, ndone = 0, setup = 0, err = 0;
    double secs = 0;
    /* Pass 0 warms up, untimed: 2 messages per comm, which open the data
     * streams of a comm that opens them on demand (RAILNET_SOCKET_LAZY). */
    for (int pass = 0; pass < 2; pass++) {
      ndone = setup = err = 0;
      for (; setup < c->ncomms; setup++) {
        st[setup] = (struct rn_stream){.p = p,
                                       .comm = comms[setup],
                                       .is_send = p->role == RN_SENDER,
                                       .nmsg = pass ? nmsg : 2,
                                       .sizes = big,
                                       .window = 2,
                                       .single_buffer = 1,
                                       .seed = p->seed};
        if (rn_stream_setup(&st[setup]) != 0) break;
      }
      double b0 = now_s(), end = rn_deadline(120);
      int done[4] = {0};
      while (setup == c->ncomms && ndone < c->ncomms && !err && now_s() < end)
        for (int k = 0; k < c->ncomms; k++) {
          if (done[k]) continue;
          int r = rn_stream_step(&st[k]);
          if (r < 0) err = 1;
          if (r == 1) done[k] = 1, ndone++;
        }
      secs = now_s() - b0;
      for (int k = 0; k < setup; k++) rn_stream_teardown(&st[k]);
      if (setup < c->ncomms || err || ndone < c->ncomms) goto out;
    }
    if (is_a) {
      qsort(t, (size_t)c->iters, sizeof(double), cmp_double);
      struct result r = {.rtt_us_p50 = t[c->iters / 2],
                         .gbps = (double)nmsg * c->ncomms * big[0] / secs / 1e9};
      if (peer_to_parent(p, &r, sizeof r) != 0) goto out;
    }
  } else if (!is_a) {
    qsort(t, (size_t)c->iters, sizeof(double), cmp_double);
    res.isend_us_p50 = t[c->iters / 2];
    res.isend_us_p90 = t[c->iters * 9 / 10];
    res.fds = count_dir("/proc/self/fd");
    res.threads = count_dir("/proc/self/task");
    if (peer_to_parent(p, &res, sizeof res) != 0) goto out;
  }
  rc = 0;
  if (peer_sync(p, 60) != 0) rc = peer_fail(p, "peer gone");
out:
  if (mh_fwd) rn_net_deregmr(&p->net, comms[0], mh_fwd);
  if (mh_rev) rn_net_deregmr(&p->net, rev, mh_rev);
  if (rev) {
    if (p->role == RN_SENDER)
      rn_net_close_recv(&p->net, rev);
    else
      rn_net_close_send(&p->net, rev);
  }
  if (rlc) rn_net_close_listen(&p->net, rlc);
  if (peer_close(p, c->ncomms, comms, p->role == RN_RECEIVER && keep_listen ? lcomms : NULL) != 0 &&
      rc == 0)
    rc = -1;
  free(comms);
  free(lcomms);
  free(t);
  return rc;
}

/* One pair of processes with c; the receiver's (or, for MODE_PERF, the
 * sender's) result in *r.  0 or -1 with why. */
static int run_one(struct cfg *c, int version, const char *env, struct result *r, char *why,
                   size_t whylen) {
  int pfd = -1;
  struct rn_pair_opts o = {.version = version,
                           .timeout_s = 900,
                           .init = 1,
                           .seed = 1,
                           .arg = c,
                           .want_parent_pipe = 1,
                           .parent_fd = &pfd,
                           .env = env};
  int rc = rn_run_pair(side, side, &o, why, whylen);
  memset(r, 0, sizeof(*r));
  int got = pfd >= 0 && read(pfd, r, sizeof(*r)) == (ssize_t)sizeof(*r);
  if (pfd >= 0) close(pfd);
  if (rc == 0 && !got) snprintf(why, whylen, "no result");
  return rc == 0 && got ? 0 : -1;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int max = 4096, iters = 2000, version = 11;
  const char *baseline = NULL;
  int only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--max") && i + 1 < argc)
      max = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--api") && i + 1 < argc)
      version = rn_parse_version(argv[++i]);
    else if (!strcmp(argv[i], "--baseline") && i + 1 < argc)
      baseline = argv[++i];
    else if (!strcmp(argv[i], "--section") && i + 1 < argc)
      only = atoi(argv[++i]);
    else {
      fprintf(stderr,
              "usage: %s [--max N] [--iters K] [--api vX] [--baseline PLUGIN.so] [--section 1-4]\n",
              argv[0]);
      return 2;
    }
  }
  if (max < 1 || iters < 10 || version == 0 || (baseline && strchr(baseline, ',')) || only < 0 ||
      only > 4) {
    fprintf(stderr, "%s: --max >= 1, --iters >= 10, --api v8..v12, a baseline path without ','\n",
            argv[0]);
    return 2;
  }
  raise_fd_limit();
  char load[128];
  rn_loadavg(load, sizeof load);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  printf("# %ld CPUs, load average at the start: %s\n", cpus, load);
  static const int steps[] = {1, 64, 1024, 4096, 16384};
  double anchor = 0, conn1 = 0, self1 = 0, selfcpu1 = 0;
  char why[512];
  struct result r;
  if (only == 0 || only == 1) {
    printf(
        "# 1. 8-byte isend CPU time (the reply of a ping-pong whose receive deferred its\n"
        "# clear-to-send) against the number of live comms, helpers off; 1 comm is the anchor\n");
    printf("%8s %12s %12s %8s %10s %10s %12s %8s %12s %10s %8s %10s %8s\n", "comms", "isend p50 us",
           "isend p90 us", "x 1 comm", "fds/comm", "threads", "connect us", "x 1 comm",
           "all-at-once", "self us", "x 1 comm", "self cpu", "x 1 comm");
    int fds1 = 0;
    for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]) && steps[k] <= max; k++) {
      struct cfg c = {.ncomms = steps[k], .iters = iters, .mode = MODE_ISEND};
      if (run_one(&c, version,
                  "RAILNET_SOCKET_NTHREADS=0,RAILNET_SOCKET_NSTREAMS=1,RAILNET_SOCKET_POOL=0", &r,
                  why, sizeof why) != 0) {
        printf("%8d  failed: %s\n", steps[k], why);
        return 1;
      }
      if (k == 0)
        anchor = r.isend_us_p50, fds1 = r.fds, conn1 = r.connect_us, self1 = r.self_us,
        selfcpu1 = r.self_cpu_us;
      printf("%8d %12.2f %12.2f %8.2f %10.2f %10d %12.1f %8.2f %12.1f %10.1f %8.2f %10.1f %8.2f\n",
             steps[k], r.isend_us_p50, r.isend_us_p90, anchor > 0 ? r.isend_us_p50 / anchor : 0,
             (double)(r.fds - fds1) / (steps[k] > 1 ? steps[k] - 1 : 1), r.threads, r.connect_us,
             conn1 > 0 ? r.connect_us / conn1 : 0, r.all_us, r.self_us,
             self1 > 0 ? r.self_us / self1 : 0, r.self_cpu_us,
             selfcpu1 > 0 ? r.self_cpu_us / selfcpu1 : 0);
    }
    printf(
        "# goal: isend at 4,096 comms <= 1.2 x the 1-comm figure (same run); fds/comm counts the\n"
        "# receiver's descriptors beyond the 1-comm run (listen comms included); connect us:\n"
        "# connect + accept of one more comm with all of them live, handle exchange between\n"
        "# the processes included, median of 9 (goal: flat); all-at-once: the wall time per\n"
        "# comm of setting all of them up at once (the test harness polls each in turn);\n"
        "# self us, self cpu: listen + connect + accept of one more comm within the receiving\n"
        "# process, one thread driving both ends, all comms live: wall and CPU time, median of 9;\n"
        "# sections 1 and 2 keep no connection for reuse (RAILNET_SOCKET_POOL=0): every connect\n"
        "# dials\n");
  }
  if (only == 0 || only == 2) {
    printf(
        "# 2. helpers on (RAILNET_SOCKET_NTHREADS=4): every comm moves a verified 70,000-byte\n"
        "# message and a 100-byte one; listen comms closed once accepted, as NCCL does;\n"
        "# receiver's process.  'at connect': one data stream per comm, opened at connect\n"
        "# (RAILNET_SOCKET_LAZY=0), so every comm's stream is in the progress engine;\n"
        "# 'default': 4 streams per comm, opened with the first message above the inline\n"
        "# limit (which goes inline while they open); run first, as each run leaves its\n"
        "# closed connections in TIME_WAIT for a minute, which slows the next one's connects\n");
    printf("%8s %-10s %10s %14s %10s %10s %10s %12s %10s %14s\n", "comms", "streams", "verified",
           "added threads", "2 x cores", "idle fds", "fds/comm", "connect us", "self us",
           "idle kB/comm");
    int hsteps[] = {1, max < 4096 ? max : 4096};
    /* The default first: a run leaves its closed connections in TIME_WAIT
     * for a minute, which slows the next run's connects. */
    static const char *const henv[2] = {
        "RAILNET_SOCKET_NTHREADS=4,RAILNET_SOCKET_POOL=0",
        "RAILNET_SOCKET_NTHREADS=4,RAILNET_SOCKET_NSTREAMS=1,RAILNET_SOCKET_POOL=0,"
        "RAILNET_SOCKET_LAZY=0"};
    for (int m = 0; m < 2; m++)
      for (int k = 0; k < 2; k++) {
        if (k == 1 && hsteps[1] == 1) break;
        struct cfg c = {.ncomms = hsteps[k], .iters = iters, .mode = MODE_HELPERS};
        if (run_one(&c, version, henv[m], &r, why, sizeof why) != 0) {
          printf("%8d  failed: %s\n", hsteps[k], why);
          return 1;
        }
        printf("%8d %-10s %10d %14d %10ld %10.2f %10.2f %12.1f %10.1f %14.1f\n", hsteps[k],
               m ? "at connect" : "default", r.verified, r.threads - r.threads0, 2 * cpus,
               (double)(r.fds_idle - r.fds0) / hsteps[k], (double)(r.fds - r.fds0) / hsteps[k],
               r.connect_us, r.self_us, (double)(r.rss_idle - r.rss0) / 1024 / hsteps[k]);
      }
    printf(
        "# goal: added threads <= 2 x cores, fds/comm <= 3 (control, stream), idle fds <= 2;\n"
        "# idle fds and kB/comm: the receiver's descriptors and resident memory with every comm\n"
        "# up, before any transfer, beyond the start, per comm (memory after malloc_trim, user\n"
        "# space; kernel socket buffers not counted); fds/comm after the transfers\n");
  }
  if (only == 0 || only == 3) {
    printf(
        "# 3. 8-byte round trip (p50, wall) and 4 MiB throughput (48 messages, 2 in flight\n"
        "# per comm, one thread, after 2 untimed ones per comm) at 1 and 4 comms, default\n"
        "# streams and helpers%s\n",
        baseline ? "; each row also with the baseline plugin, alternated" : "");
    printf("%8s %-10s %12s %10s\n", "comms", "plugin", "8 B rtt us", "GB/s");
    for (int n = 1; n <= 4; n += 3)
      for (int b = 0; b < (baseline ? 2 : 1); b++) {
        char env[1200];
        snprintf(env, sizeof env, "%s%s", b ? "RN_PLUGIN=" : "", b ? baseline : "");
        struct cfg c = {.ncomms = n, .iters = iters, .mode = MODE_PERF};
        if (run_one(&c, version, env[0] ? env : NULL, &r, why, sizeof why) != 0) {
          printf("%8d %-10s failed: %s\n", n, b ? "baseline" : "this", why);
          return 1;
        }
        printf("%8d %-10s %12.2f %10.2f\n", n, b ? "baseline" : "this", r.rtt_us_p50, r.gbps);
      }
  }
  if (only == 0 || only == 4) {
    printf(
        "# 4. a fresh comm to its first byte (listen, connect, accept, 8 bytes landed; one\n"
        "# process, one thread driving both ends, the pair then closed quiescent), median of\n"
        "# %d, default streams and helpers; dialed (RAILNET_SOCKET_POOL=0) is the anchor\n",
        iters < 200 ? iters : 200);
    printf("%-26s %12s %10s\n", "connection", "first us", "x dialed");
    double dialed = 0, kept = 0;
    for (int pooled = 0; pooled < 2; pooled++) {
      struct cfg c = {.ncomms = 1, .iters = iters < 200 ? iters : 200, .mode = MODE_FIRST};
      if (run_one(&c, version, pooled ? NULL : "RAILNET_SOCKET_POOL=0", &r, why, sizeof why) != 0) {
        printf("%-26s failed: %s\n", pooled ? "kept (pool)" : "dialed", why);
        return 1;
      }
      if (!pooled) dialed = r.first_us;
      if (pooled) kept = r.first_us;
      printf("%-26s %12.1f %10.2f\n", pooled ? "kept from the last comm" : "dialed", r.first_us,
             dialed > 0 ? r.first_us / dialed : 0);
    }
    printf(
        "# goal: a kept connection's first byte <= 0.2 x a dialed one's (same run): %s (%.2fx)\n",
        dialed > 0 && kept <= 0.2 * dialed ? "MET" : "NOT MET", dialed > 0 ? kept / dialed : 0);
    printf(
        "# a fresh comm's first 16 MiB (dialed; median of %d): its data streams dialed at\n"
        "# connect (RAILNET_SOCKET_LAZY=0) is the anchor; on demand they open while it moves\n",
        iters < 20 ? iters : 20);
    double anchor16 = 0;
    for (int lazy = 0; lazy < 2; lazy++) {
      struct cfg c = {.ncomms = 1,
                      .iters = iters < 20 ? iters : 20,
                      .mode = MODE_FIRST,
                      .first_size = 16u << 20};
      if (run_one(&c, version,
                  lazy ? "RAILNET_SOCKET_POOL=0" : "RAILNET_SOCKET_POOL=0,RAILNET_SOCKET_LAZY=0",
                  &r, why, sizeof why) != 0) {
        printf("%-26s failed: %s\n", lazy ? "streams on demand" : "streams at connect", why);
        return 1;
      }
      if (!lazy) anchor16 = r.first_us;
      printf("%-26s %12.1f %10.2f\n", lazy ? "streams on demand" : "streams at connect", r.first_us,
             anchor16 > 0 ? r.first_us / anchor16 : 0);
    }
  }
  rn_loadavg(load, sizeof load);
  printf("# load average at the end: %s\n", load);
  return 0;
}
