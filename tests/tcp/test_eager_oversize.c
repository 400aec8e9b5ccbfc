/* An eager (small) send larger than its posted receive: the receiver's
 * test() fails with a WARN naming both sizes, and the sender learns of it
 * (NACK) and fails within a bounded number of later calls once the
 * receiver has refused.  Counting calls, not time, decides the result; the
 * alarm (x RN_TIMEOUT_SCALE) only turns a hang into a failure. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define LATER_CALLS 200 /* isend+test rounds the sender gets after the refusal */

static int warned;
static void logger(ncclDebugLogLevel l, unsigned long f, const char *file, int line,
                   const char *fmt, ...) {
  (void)f, (void)file, (void)line;
  if (l != NCCL_LOG_WARN) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (strstr(msg, "100 bytes") != NULL && strstr(msg, "8 bytes") != NULL) warned = 1;
  printf("# [%d] WARN %s\n", (int)getpid(), msg);
  fflush(stdout);
}

/* Print why a setup call failed and leave: setup is not what this tests. */
static int setup_failed(int n, const char *what, ncclResult_t r) {
  printf("not ok %d - setup: %s returned %d\n", n, what, (int)r);
  return 1;
}

#define SETUP(n, call)                                        \
  do {                                                        \
    ncclResult_t r_ = (call);                                 \
    if (r_ != ncclSuccess) return setup_failed(n, #call, r_); \
  } while (0)

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* TAP survives an exit without flushing */
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", "lo", 1);
  /* p: handle, receiver -> sender; q: "eager send out" and "done", sender
   * -> receiver; z: "refused", receiver -> sender */
  int p[2], q[2], z[2];
  if (pipe(p) != 0 || pipe(q) != 0 || pipe(z) != 0) return 1;
  printf("1..2\n");
  fflush(stdout);
  pid_t pid = fork();
  alarm((unsigned)rn_bound_s(30)); /* nothing here may hang */
  int me = pid == 0 ? 1 : 2;
  const ncclNet_v8_t *n = rn_load_v8(me);
  if (n == NULL) return 1;
  SETUP(me, n->init(logger));
  static char buf[256];
  if (pid == 0) { /* receiver */
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *rc = NULL, *mh = NULL, *rq = NULL, *d = buf;
    SETUP(1, n->listen(0, handle, &lc));
    if (write(p[1], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 1;
    while (rc == NULL) SETUP(1, n->accept(lc, &rc, NULL));
    SETUP(1, n->regMr(rc, buf, sizeof(buf), NCCL_PTR_HOST, &mh));
    char go;
    if (read(q[0], &go, 1) != 1) return 1; /* the sender's eager send is out */
    int sz = 8, tag = 1, done = 0, got = -1;
    while (rq == NULL) SETUP(1, n->irecv(rc, 1, &d, &sz, &tag, &mh, &rq));
    ncclResult_t r = ncclSuccess;
    while (!done && r == ncclSuccess) r = n->test(rq, &done, &got);
    int ok = r != ncclSuccess && warned;
    printf("%sok 1 - receiver: test() fails (%d) with a WARN naming 100 and 8 bytes\n",
           ok ? "" : "not ", r);
    fflush(stdout);
    if (write(z[1], ok ? "r" : "x", 1) != 1) return 1; /* the sender may count now */
    if (read(q[0], &go, 1) != 1) {
    } /* wait for the sender to finish */
    return ok ? 0 : 1;
  }
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (read(p[0], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 1;
  void *sc = NULL, *mh = NULL, *rq = NULL;
  while (sc == NULL) SETUP(2, n->connect(0, handle, &sc, NULL));
  SETUP(2, n->regMr(sc, buf, sizeof(buf), NCCL_PTR_HOST, &mh));
  /* eager: no receive is posted yet */
  while (rq == NULL) SETUP(2, n->isend(sc, buf, 100, 1, mh, &rq));
  int done = 0;
  while (!done) SETUP(2, n->test(rq, &done, NULL));
  if (write(q[1], "g", 1) != 1) return 1;
  char refused = 0;
  if (read(z[0], &refused, 1) != 1 || refused != 'r') {
    printf("not ok 2 - sender: the receiver did not refuse the oversized send\n");
    if (write(q[1], "d", 1) != 1) {
    }
    waitpid(pid, NULL, 0);
    return 1;
  }
  /* The receiver has refused (its reply is on the wire): within the eager
   * window the sender must read it and fail.  A short pause per call lets
   * the reply cross loopback; the count is what the test bounds. */
  ncclResult_t r = ncclSuccess;
  int calls = 0;
  for (; calls < LATER_CALLS && r == ncclSuccess; calls++) {
    usleep(1000);
    rq = NULL;
    r = n->isend(sc, buf, 8, 1, mh, &rq);
    while (r == ncclSuccess && rq != NULL) {
      done = 0;
      r = n->test(rq, &done, NULL);
      if (done) break;
    }
  }
  int ok = r != ncclSuccess;
  if (write(q[1], "d", 1) != 1) {
  }
  int st = 0;
  waitpid(pid, &st, 0);
  printf("%sok 2 - sender: a later call fails (%d) within %d calls of the refusal (after %d)\n",
         ok ? "" : "not ", r, LATER_CALLS, calls);
  return (ok && WIFEXITED(st) && WEXITSTATUS(st) == 0) ? 0 : 1;
}
