/* An eager (small) send larger than its posted receive: the receiver's
 * test() fails with a WARN naming both sizes, and the sender learns of it
 * (NACK) and fails within a bounded number of later calls. */
#include <dlfcn.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "nccl/net_v8.h"

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

int main(void) {
  const char *b = getenv("RN_BUILD");
  char so[512];
  snprintf(so, sizeof(so), "%s/libnccl-net-railnet.so", b ? b : "build");
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", "lo", 1);
  int p[2], q[2];
  if (pipe(p) != 0 || pipe(q) != 0) return 1;
  printf("1..2\n");
  fflush(stdout);
  pid_t pid = fork();
  alarm(30); /* nothing here may hang */
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  const ncclNet_v8_t *n = h ? dlsym(h, "ncclNetPlugin_v8") : NULL;
  if (n == NULL || n->init(logger) != ncclSuccess) {
    printf("not ok %d - load %s\n", pid == 0 ? 1 : 2, so);
    return 1;
  }
  static char buf[256];
  if (pid == 0) { /* receiver */
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc, *rc = NULL, *mh, *rq = NULL, *d = buf;
    n->listen(0, handle, &lc);
    if (write(p[1], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 1;
    while (rc == NULL) n->accept(lc, &rc, NULL);
    n->regMr(rc, buf, sizeof(buf), NCCL_PTR_HOST, &mh);
    char go;
    if (read(q[0], &go, 1) != 1) return 1; /* the sender's eager send is out */
    int sz = 8, tag = 1, done = 0, got = -1;
    while (rq == NULL) n->irecv(rc, 1, &d, &sz, &tag, &mh, &rq);
    ncclResult_t r = ncclSuccess;
    while (!done && r == ncclSuccess) r = n->test(rq, &done, &got);
    int ok = r != ncclSuccess && warned;
    printf("%sok 1 - receiver: test() fails (%d) with a WARN naming 100 and 8 bytes\n",
           ok ? "" : "not ", r);
    fflush(stdout);
    if (read(q[0], &go, 1) != 1) {
    } /* wait for the sender to finish */
    return ok ? 0 : 1;
  }
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (read(p[0], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 1;
  void *sc = NULL, *mh, *rq = NULL;
  while (sc == NULL) n->connect(0, handle, &sc, NULL);
  n->regMr(sc, buf, sizeof(buf), NCCL_PTR_HOST, &mh);
  while (rq == NULL) n->isend(sc, buf, 100, 1, mh, &rq); /* eager: no receive posted yet */
  int done = 0;
  while (!done) n->test(rq, &done, NULL);
  if (write(q[1], "g", 1) != 1) return 1;
  /* Keep sending small messages: within the eager window the sender must
   * read the receiver's refusal and fail. */
  ncclResult_t r = ncclSuccess;
  int calls = 0;
  for (; calls < 200 && r == ncclSuccess; calls++) {
    usleep(2000);
    rq = NULL;
    r = n->isend(sc, buf, 8, 1, mh, &rq);
    while (r == ncclSuccess && rq != NULL) {
      done = 0;
      r = n->test(rq, &done, NULL);
      if (done) break;
    }
  }
  int ok = r != ncclSuccess;
  if (write(q[1], "g", 1) != 1) {
  }
  int st = 0;
  waitpid(pid, &st, 0);
  printf("%sok 2 - sender: a later call fails (%d) after %d calls\n", ok ? "" : "not ", r, calls);
  return (ok && WIFEXITED(st) && WEXITSTATUS(st) == 0) ? 0 : 1;
}
