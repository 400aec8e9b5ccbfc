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
 *   railnet-comms-bench [--max N] [--iters K] [--api vX] */
#include <dirent.h>
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
};

struct cfg {
  int ncomms, iters;
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
static int post(struct rn_peer *p, void *comm, int is_send, void *buf, void *mh, void **req) {
  double end = rn_deadline(30);
  size_t size = 8;
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
  if (peer_connect(p, c->ncomms, comms, lcomms, 120) != 0) goto out;
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
    if (is_a) {
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
  if (!is_a) {
    qsort(t, (size_t)c->iters, sizeof(double), cmp_double);
    struct result r = {.isend_us_p50 = t[c->iters / 2],
                       .isend_us_p90 = t[c->iters * 9 / 10],
                       .fds = count_dir("/proc/self/fd"),
                       .threads = count_dir("/proc/self/task")};
    if (peer_to_parent(p, &r, sizeof r) != 0) goto out;
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
  if (peer_close(p, c->ncomms, comms, p->role == RN_RECEIVER ? lcomms : NULL) != 0 && rc == 0)
    rc = -1;
  free(comms);
  free(lcomms);
  free(t);
  return rc;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int max = 4096, iters = 2000, version = 11;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--max") && i + 1 < argc)
      max = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--api") && i + 1 < argc)
      version = rn_parse_version(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--max N] [--iters K] [--api vX]\n", argv[0]);
      return 2;
    }
  }
  if (max < 1 || iters < 10 || version == 0) {
    fprintf(stderr, "%s: --max >= 1, --iters >= 10, --api v8..v12\n", argv[0]);
    return 2;
  }
  raise_fd_limit();
  static const int steps[] = {1, 64, 1024, 4096, 16384};
  double anchor = 0;
  printf(
      "# 8-byte isend CPU time (the reply of a ping-pong whose receive deferred its\n"
      "# clear-to-send) against the number of live comms; 1 comm is the anchor\n");
  printf("%8s %12s %12s %8s %10s %10s\n", "comms", "isend p50 us", "isend p90 us", "x 1 comm",
         "fds/comm", "threads");
  int fds1 = 0;
  for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]) && steps[k] <= max; k++) {
    struct cfg c = {.ncomms = steps[k], .iters = iters};
    int pfd = -1;
    struct rn_pair_opts o = {.version = version,
                             .timeout_s = 600,
                             .init = 1,
                             .seed = 1,
                             .arg = &c,
                             .want_parent_pipe = 1,
                             .parent_fd = &pfd,
                             .env = "RAILNET_SOCKET_NTHREADS=0,RAILNET_SOCKET_NSTREAMS=1"};
    char why[512];
    int rc = rn_run_pair(side, side, &o, why, sizeof why);
    struct result r = {0};
    int got = pfd >= 0 && read(pfd, &r, sizeof r) == (ssize_t)sizeof r;
    if (pfd >= 0) close(pfd);
    if (rc != 0 || !got) {
      printf("%8d  failed: %s\n", steps[k], rc ? why : "no result");
      return 1;
    }
    if (k == 0) anchor = r.isend_us_p50, fds1 = r.fds;
    printf("%8d %12.2f %12.2f %8.2f %10.2f %10d\n", steps[k], r.isend_us_p50, r.isend_us_p90,
           anchor > 0 ? r.isend_us_p50 / anchor : 0,
           (double)(r.fds - fds1) / (steps[k] > 1 ? steps[k] - 1 : 1), r.threads);
  }
  printf(
      "# goal: at 4,096 comms <= 1.2 x the 1-comm figure (same run); fds/comm counts the\n"
      "# receiver's descriptors beyond the 1-comm run (listen comms included)\n");
  return 0;
}
