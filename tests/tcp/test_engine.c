/* The TCP progress engine (plugin/tcp/engine.c) with helper threads on
 * (RAILNET_SOCKET_NTHREADS=2, two data streams per comm), in one process
 * over loopback:
 *   1. many comms add no threads beyond the engine's, and all move
 *      verified data;
 *   2. comms opened, used and closed from several threads while other
 *      threads keep transferring over long-lived comms;
 *   3. comms closed with chunks still queued in the engine (the send comm
 *      first, or the receive comm first): every close succeeds, and
 *      ASan/valgrind see no use after free;
 *   4. a fork while the engine runs: the child opens a comm and moves
 *      verified data with a pool of its own, and so does the parent after.
 * Time bounds only turn hangs into failures (scaled by rn_timeout_scale). */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define NPAIRS 32
#define NTHREADS 2 /* RAILNET_SOCKET_NTHREADS */

static struct rn_net net;

struct pair {
  void *lc, *sc, *rc;
};

static int count_threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static int pair_open(struct pair *p) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(p, 0, sizeof(*p));
  ncclResult_t r = rn_net_listen(&net, 0, handle, &p->lc);
  if (r != ncclSuccess) {
    diag("listen: %s", rn_result_str(r));
    return -1;
  }
  double end = rn_deadline(30);
  while ((p->sc == NULL || p->rc == NULL) && now_s() < end) {
    if (p->sc == NULL && (r = rn_net_connect(&net, 0, handle, &p->sc)) != ncclSuccess) break;
    if (p->rc == NULL && (r = rn_net_accept(&net, p->lc, &p->rc)) != ncclSuccess) break;
  }
  if (r != ncclSuccess || p->sc == NULL || p->rc == NULL) {
    diag("connect/accept: %s%s", rn_result_str(r), r == ncclSuccess ? " (timed out)" : "");
    return -1;
  }
  return 0;
}

static int pair_close(struct pair *p) {
  int rc = 0;
  ncclResult_t r;
  if (p->sc != NULL && (r = rn_net_close_send(&net, p->sc)) != ncclSuccess)
    diag("close_send: %s", rn_result_str(r)), rc = -1;
  if (p->rc != NULL && (r = rn_net_close_recv(&net, p->rc)) != ncclSuccess)
    diag("close_recv: %s", rn_result_str(r)), rc = -1;
  if (p->lc != NULL && (r = rn_net_close_listen(&net, p->lc)) != ncclSuccess)
    diag("close_listen: %s", rn_result_str(r)), rc = -1;
  memset(p, 0, sizeof(*p));
  return rc;
}

/* Move one verified message of len bytes over the pair. */
static int pair_xfer(struct pair *p, size_t len, uint64_t key) {
  unsigned char *src = malloc(len), *dst = calloc(1, len);
  void *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL, *d = dst;
  int rc = -1, tag = 1, sdone = 0, rdone = 0, got = -1;
  size_t sz = len;
  ncclResult_t r = ncclSuccess;
  double end = rn_deadline(60);
  if (src == NULL || dst == NULL) goto out;
  pattern_fill(src, len, key);
  if ((r = rn_net_regmr(&net, p->sc, src, len, NCCL_PTR_HOST, &smh)) != ncclSuccess ||
      (r = rn_net_regmr(&net, p->rc, dst, len, NCCL_PTR_HOST, &rmh)) != ncclSuccess)
    goto out;
  while (rreq == NULL && now_s() < end)
    if ((r = rn_net_irecv(&net, p->rc, 1, &d, &sz, &tag, &rmh, &rreq)) != ncclSuccess) goto out;
  while (!(sdone && rdone) && now_s() < end) {
    if (sreq == NULL && (r = rn_net_isend(&net, p->sc, src, len, tag, smh, &sreq)) != ncclSuccess)
      goto out;
    if (sreq != NULL && !sdone && (r = rn_net_test(&net, sreq, &sdone, NULL)) != ncclSuccess)
      goto out;
    if (rreq != NULL && !rdone && (r = rn_net_test(&net, rreq, &rdone, &got)) != ncclSuccess)
      goto out;
  }
  if (!(sdone && rdone)) {
    diag("a %zu-byte transfer not done within %.0f s", len, rn_bound_s(60));
  } else if ((size_t)got != len || pattern_check(dst, len, key) != (size_t)-1) {
    diag("a %zu-byte transfer landed %d bytes or wrong ones", len, got);
  } else {
    rc = 0;
  }
out:
  if (r != ncclSuccess) diag("transfer of %zu bytes: %s", len, rn_result_str(r));
  if (smh != NULL && rn_net_deregmr(&net, p->sc, smh) != ncclSuccess) rc = -1;
  if (rmh != NULL && rn_net_deregmr(&net, p->rc, rmh) != ncclSuccess) rc = -1;
  free(src);
  free(dst);
  return r == ncclSuccess ? rc : -1;
}

/* 1. Many comms, threads bounded by the engine. */
static void many_comms(void) {
  static struct pair p[NPAIRS];
  int before = count_threads(), ok = before > 0, opened = 0;
  for (int i = 0; i < NPAIRS && ok; i++, opened++) ok = pair_open(&p[i]) == 0;
  for (int i = 0; i < opened && ok; i++) ok = pair_xfer(&p[i], 300000 + (size_t)i, 100 + i) == 0;
  int after = count_threads();
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int bound = cpus > 0 && cpus < NTHREADS ? (int)cpus : NTHREADS;
  for (int i = 0; i < opened; i++)
    if (pair_close(&p[i]) != 0) ok = 0;
  tap_result(ok && after - before <= bound,
             "%d comms (%d pairs) in one process move verified data and add %d thread(s) "
             "(at most the engine's %d)",
             2 * NPAIRS, NPAIRS, after - before, bound);
}

/* 2. Churn while others transfer. */
struct worker {
  int churn; /* 1: open, use, close; 0: transfer over one pair */
  int iters, id, failed;
};

static void *worker_main(void *arg) {
  struct worker *w = arg;
  struct pair p;
  if (!w->churn && pair_open(&p) != 0) {
    w->failed = 1;
    return NULL;
  }
  for (int i = 0; i < w->iters && !w->failed; i++) {
    if (w->churn) {
      if (pair_open(&p) != 0) w->failed = 1;
      if (!w->failed && pair_xfer(&p, 200000 + (size_t)i * 997, 1000 * w->id + i) != 0)
        w->failed = 1;
      if (pair_close(&p) != 0) w->failed = 1;
    } else if (pair_xfer(&p, 1 << 20, 1000 * w->id + i) != 0) {
      w->failed = 1;
    }
  }
  if (!w->churn && pair_close(&p) != 0) w->failed = 1;
  return NULL;
}

static void churn(void) {
  struct worker w[4] = {{.churn = 1, .iters = 12, .id = 1},
                        {.churn = 1, .iters = 12, .id = 2},
                        {.churn = 0, .iters = 24, .id = 3},
                        {.churn = 0, .iters = 24, .id = 4}};
  pthread_t tid[4];
  int started = 0, ok = 1;
  for (; started < 4; started++)
    if (pthread_create(&tid[started], NULL, worker_main, &w[started]) != 0) break;
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  for (int i = 0; i < started; i++) ok &= !w[i].failed;
  tap_result(started == 4 && ok,
             "2 threads open, use and close 12 comm pairs each while 2 threads transfer 24 "
             "verified MiB each over their own comms");
}

/* 3. Close with work queued in the engine. */
static int close_busy(int recv_first) {
  const size_t len = 32 << 20;
  struct pair p;
  if (pair_open(&p) != 0) return -1;
  unsigned char *src = calloc(1, len), *dst = malloc(len);
  void *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL, *d = dst;
  int tag = 2, done = 0, rc = -1;
  size_t sz = len;
  ncclResult_t r = ncclSuccess;
  double end = rn_deadline(30);
  if (src == NULL || dst == NULL) goto out;
  if ((r = rn_net_regmr(&net, p.sc, src, len, NCCL_PTR_HOST, &smh)) != ncclSuccess ||
      (r = rn_net_regmr(&net, p.rc, dst, len, NCCL_PTR_HOST, &rmh)) != ncclSuccess)
    goto out;
  while (rreq == NULL && now_s() < end)
    if ((r = rn_net_irecv(&net, p.rc, 1, &d, &sz, &tag, &rmh, &rreq)) != ncclSuccess) goto out;
  while (sreq == NULL && now_s() < end)
    if ((r = rn_net_isend(&net, p.sc, src, len, tag, smh, &sreq)) != ncclSuccess) goto out;
  if (sreq == NULL) goto out;
  /* A few tests: chunks are queued and the engine is moving them. */
  for (int i = 0; i < 3 && r == ncclSuccess; i++) r = rn_net_test(&net, sreq, &done, NULL);
  if (r != ncclSuccess) goto out;
  rc = 0;
out:
  if (r != ncclSuccess) diag("close-busy set-up: %s", rn_result_str(r));
  /* Requests in flight die with their comm (NCCL closes only idle comms,
   * but nothing may crash or be used after free when one is not). */
  if (recv_first) {
    if ((r = rn_net_close_recv(&net, p.rc)) != ncclSuccess)
      diag("close_recv, busy: %s", rn_result_str(r)), rc = -1;
    p.rc = NULL;
  }
  if ((r = rn_net_close_send(&net, p.sc)) != ncclSuccess)
    diag("close_send, busy: %s", rn_result_str(r)), rc = -1;
  p.sc = NULL;
  if (pair_close(&p) != 0) rc = -1;
  free(src);
  free(dst);
  return rc;
}

/* 4. Fork while the engine runs. */
static void fork_child(void) {
  struct pair p;
  int rc = pair_open(&p);
  if (rc == 0) rc = pair_xfer(&p, 3 << 20, 77);
  if (pair_close(&p) != 0) rc = -1;
  fflush(stdout);
  _exit(rc == 0 ? 0 : 1);
}

static void forked(void) {
  struct pair p;
  int ok = pair_open(&p) == 0 && pair_xfer(&p, 1 << 20, 55) == 0;
  fflush(stdout);
  pid_t pid = ok ? fork() : -1;
  if (pid == 0) fork_child();
  int status = -1, child_ok = 0;
  if (pid > 0) {
    double end = rn_deadline(120);
    pid_t w = 0;
    while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now_s() < end) sleep_us(10000);
    if (w == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      diag("the forked child did not finish within %.0f s", rn_bound_s(120));
    }
    child_ok = w == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  ok = ok && pair_xfer(&p, 2 << 20, 56) == 0;
  if (pair_close(&p) != 0) ok = 0;
  tap_result(pid > 0 && ok && child_ok,
             "a child forked while the engine runs opens a comm and moves verified data, and so "
             "does the parent after (child status 0x%x)",
             status);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", "lo", 1);
  setenv("RAILNET_SOCKET_NTHREADS", "2", 1);
  setenv("RAILNET_SOCKET_NSTREAMS", "2", 1);
  char err[256];
  if (rn_net_open(&net, 11, err, sizeof err) != 0) {
    printf("1..0 # SKIP cannot load the plugin: %s\n", err);
    return 0;
  }
  printf("1..5\n");
  ncclResult_t r = rn_net_init(&net);
  int ndev = 0;
  if (r != ncclSuccess || rn_net_devices(&net, &ndev) != ncclSuccess || ndev < 1) {
    tap_result(0, "init over loopback: %s, %d device(s)", rn_result_str(r), ndev);
    return 1;
  }
  many_comms();
  churn();
  tap_result(close_busy(0) == 0,
             "a send comm closed with 32 MiB queued in the engine, then its receive comm: every "
             "close succeeds");
  tap_result(close_busy(1) == 0,
             "a receive comm closed while the engine reads 32 MiB into it, then its send comm: "
             "every close succeeds");
  forked();
  if ((r = rn_net_finalize(&net)) != ncclSuccess) tap_result(0, "finalize: %s", rn_result_str(r));
  rn_net_close(&net);
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
