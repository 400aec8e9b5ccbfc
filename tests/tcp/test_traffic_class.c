/* Traffic classes on TCP comms: the class NCCL passes at connect (v11+
 * in init's config, v10 in connect's) or RAILNET_TRAFFIC_CLASS becomes the
 * IP TOS byte and SO_PRIORITY of every socket of the send comm, read back
 * here with getsockopt; default off; one INFO per comm; a class outside
 * 0..255 gets a WARN and ncclInvalidArgument where NCCL's class is used
 * (RAILNET_TRAFFIC_CLASS_NCCL=1), and is ignored where it is not.  A send comm of class
 * RAILNET_TRAFFIC_CLASS_URGENT or more says in that INFO that it is
 * latency-critical, and another comm moving data next to it (yielding:
 * one chunk per call over its streams) delivers every byte.  Listen,
 * connect and accept run in this process, so its own descriptors are the
 * comm's sockets. */
#include <dirent.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "../common/rn_test.h"

#define NSTREAMS 2

static int infos;  /* INFO lines naming a traffic class */
static int warned; /* WARNs naming a traffic class */
static int urgent; /* INFO lines naming a comm latency-critical */
static void logger(ncclDebugLogLevel l, unsigned long f, const char *file, int line,
                   const char *fmt, ...) {
  (void)f, (void)file, (void)line;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (strstr(msg, "traffic class") == NULL && strstr(msg, "TRAFFIC_CLASS") == NULL) return;
  if (l == NCCL_LOG_WARN) warned++;
  if (l == NCCL_LOG_INFO && strstr(msg, "traffic class") != NULL) infos++;
  if (l == NCCL_LOG_INFO && strstr(msg, "latency-critical") != NULL) urgent++;
  note("%s %s", l == NCCL_LOG_WARN ? "WARN" : "INFO", msg);
}

/* TCP sockets of this process whose TOS byte is tos and whose
 * SO_PRIORITY is prio. */
static int count_sockets(int tos, int prio) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    int fd = atoi(e->d_name), type = 0, v = -1, p = -1;
    socklen_t len = sizeof(type);
    if (e->d_name[0] == '.' || fd == dirfd(d)) continue;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    struct sockaddr_storage a;
    len = sizeof(a);
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0) continue;
    int v6 = a.ss_family == AF_INET6;
    len = sizeof(v);
    if (getsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_TCLASS : IP_TOS, &v, &len) != 0)
      continue;
    len = sizeof(p);
    if (getsockopt(fd, SOL_SOCKET, SO_PRIORITY, &p, &len) != 0) continue;
    n += v == tos && p == prio;
  }
  closedir(d);
  return n;
}

struct pair {
  void *lc, *sc, *rc;
};

/* Listen, connect (v10: with traffic class tc) and accept on dev 0. */
static ncclResult_t connect_pair(struct rn_net *n, int tc, struct pair *p) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(p, 0, sizeof(*p));
  ncclResult_t r = rn_net_listen(n, 0, handle, &p->lc);
  double end = rn_deadline(20);
  while (r == ncclSuccess && (p->sc == NULL || p->rc == NULL) && now_s() < end) {
    if (p->sc == NULL) r = rn_net_connect_tc(n, 0, handle, &p->sc, tc);
    if (r == ncclSuccess && p->rc == NULL) r = rn_net_accept(n, p->lc, &p->rc);
  }
  if (r == ncclSuccess && (p->sc == NULL || p->rc == NULL)) r = ncclInternalError;
  /* A message too large to go inline while they open opens the data
   * streams (RAILNET_SOCKET_LAZY), which must carry the class too. */
  if (r == ncclSuccess && rn_net_pair_transfer(n, p->sc, p->rc, 16 << 20, 5) != 0) {
    note("a 16 MiB transfer over the pair failed");
    r = ncclInternalError;
  }
  return r;
}

static int close_pair(struct rn_net *n, struct pair *p) {
  int ok = 1;
  if (p->sc != NULL) ok &= rn_net_close_send(n, p->sc) == ncclSuccess;
  if (p->rc != NULL) ok &= rn_net_close_recv(n, p->rc) == ncclSuccess;
  if (p->lc != NULL) ok &= rn_net_close_listen(n, p->lc) == ncclSuccess;
  return ok;
}

/* One v11 communicator with class tc: connect, count the sockets that
 * carry tos/prio, close.  Returns the count, -1 when a call failed. */
static int v11_case(struct rn_net *n, int tc, int tos, int prio) {
  static uint64_t id = 0x7c00;
  ncclNetCommConfig_v11_t cfg = {tc};
  n->ctx = NULL;
  ncclResult_t r = n->t.v11->init(&n->ctx, ++id, &cfg, logger, NULL);
  if (r != ncclSuccess) {
    note("init returned %d", (int)r);
    return -1;
  }
  struct pair p;
  r = connect_pair(n, tc, &p);
  int count = r == ncclSuccess ? count_sockets(tos, prio) : -1;
  if (r != ncclSuccess) note("connect returned %d", (int)r);
  if (!close_pair(n, &p)) count = -1;
  if (n->t.v11->finalize(n->ctx) != ncclSuccess) count = -1;
  n->ctx = NULL;
  return count;
}

/* Two v11 communicators side by side: one of class tc, one without a
 * class.  Eight rounds of an 8-byte message over the first, each followed
 * by 4 MiB over the second on 4 streams, every byte verified: while the
 * first is latency-critical and was just called, the second moves one
 * chunk per call.  1 when every call and every byte was right. */
static int urgent_case(struct rn_net *n, int tc) {
  static uint64_t id = 0x7e00;
  ncclNetCommConfig_v11_t cfg = {tc}, none = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  void *cu = NULL, *cb = NULL;
  struct pair u = {0}, b = {0};
  int ok = n->t.v11->init(&cu, ++id, &cfg, logger, NULL) == ncclSuccess &&
           n->t.v11->init(&cb, ++id, &none, logger, NULL) == ncclSuccess;
  n->ctx = cu;
  ok = ok && connect_pair(n, tc, &u) == ncclSuccess;
  n->ctx = cb;
  ok = ok && connect_pair(n, NCCL_NET_TRAFFIC_CLASS_UNDEF, &b) == ncclSuccess;
  for (int i = 0; i < 8 && ok; i++) {
    ok = rn_net_pair_transfer(n, u.sc, u.rc, 8, 100 + i) == 0 &&
         rn_net_pair_transfer(n, b.sc, b.rc, 4 << 20, 200 + i) == 0;
    if (!ok) note("round %d: a transfer failed", i);
  }
  ok &= close_pair(n, &u);
  ok &= close_pair(n, &b);
  if (cu != NULL) ok &= n->t.v11->finalize(cu) == ncclSuccess;
  if (cb != NULL) ok &= n->t.v11->finalize(cb) == ncclSuccess;
  n->ctx = NULL;
  return ok;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  rn_default_env();
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_NSTREAMS", "2", 1);
  unsetenv("RAILNET_TRAFFIC_CLASS");
  unsetenv("RAILNET_TRAFFIC_CLASS_NCCL");
  unsetenv("RAILNET_SOCKET_PRIORITY");
  tap_plan(13);
  char err[256];
  struct rn_net n11 = {0}, n10 = {0};
  if (rn_net_open(&n11, 11, err, sizeof err) != 0 || rn_net_open(&n10, 10, err, sizeof err) != 0) {
    tap_result(0, "load the plugin: %s", err);
    return 1;
  }
  const int tos = 0x88, prio = 0x88 >> 5; /* DSCP AF41 */

  /* Default off: NCCL's class is ignored. */
  infos = 0;
  int k = v11_case(&n11, tos, tos, prio);
  tap_result(k == 0 && infos == 0,
             "default: NCCL's class %d sets nothing (%d sockets with it, %d INFO)", tos, k, infos);
  /* ... also one outside 0..255, which NCCL passes on from a
   * communicator's config unchecked: no WARN, no error (a failed v11 init
   * would turn railnet off for the whole process). */
  {
    warned = 0;
    ncclNetCommConfig_v11_t odd = {1000};
    void *octx = NULL;
    ncclResult_t r0 = n11.t.v11->init(&octx, 0x7d01, &odd, logger, NULL);
    tap_result(r0 == ncclSuccess && warned == 0 && octx != NULL,
               "default: v11 init with class 1000 succeeds, the class ignored (%d, %d WARN)",
               (int)r0, warned);
    if (r0 == ncclSuccess) (void)n11.t.v11->finalize(octx);
  }

  setenv("RAILNET_TRAFFIC_CLASS_NCCL", "1", 1);
  infos = 0;
  k = v11_case(&n11, tos, tos, prio);
  tap_result(k == NSTREAMS + 1,
             "v11, RAILNET_TRAFFIC_CLASS_NCCL=1: the send comm's %d sockets "
             "have IP_TOS 0x%x and SO_PRIORITY %d (%d)",
             NSTREAMS + 1, tos, prio, k);
  tap_result(infos == 1, "one INFO names the comm's class (%d)", infos);

  setenv("RAILNET_SOCKET_PRIORITY", "2", 1);
  k = v11_case(&n11, tos, tos, 2);
  tap_result(k == NSTREAMS + 1, "RAILNET_SOCKET_PRIORITY=2 gives SO_PRIORITY 2 (%d sockets)", k);
  unsetenv("RAILNET_SOCKET_PRIORITY");

  /* RAILNET_TRAFFIC_CLASS for comms NCCL gives none. */
  setenv("RAILNET_TRAFFIC_CLASS", "32", 1);
  k = v11_case(&n11, NCCL_NET_TRAFFIC_CLASS_UNDEF, 32, 1);
  tap_result(k == NSTREAMS + 1, "RAILNET_TRAFFIC_CLASS=32 with no class from NCCL: %d sockets", k);

  /* A bad class from NCCL: WARN and ncclInvalidArgument, at init (v11). */
  warned = 0;
  ncclNetCommConfig_v11_t bad = {300};
  void *ctx = NULL;
  ncclResult_t r = n11.t.v11->init(&ctx, 0x7d00, &bad, logger, NULL);
  tap_result(r == ncclInvalidArgument && warned == 1 && ctx == NULL,
             "v11 init with class 300: ncclInvalidArgument (%d) and a WARN (%d)", (int)r, warned);
  if (r == ncclSuccess) (void)n11.t.v11->finalize(ctx);

  /* A bad RAILNET_TRAFFIC_CLASS: a WARN, and the default (off). */
  setenv("RAILNET_TRAFFIC_CLASS", "999", 1);
  setenv("RAILNET_TRAFFIC_CLASS_NCCL", "0", 1);
  warned = 0;
  k = v11_case(&n11, NCCL_NET_TRAFFIC_CLASS_UNDEF, 999 & 0xff, 999 >> 5);
  int k0 = count_sockets(0, 0);
  tap_result(warned >= 1 && k == 0 && k0 >= 0,
             "RAILNET_TRAFFIC_CLASS=999: a WARN (%d) and no class set (%d)", warned, k);
  unsetenv("RAILNET_TRAFFIC_CLASS");

  /* Latency-critical comms (RAILNET_TRAFFIC_CLASS_URGENT, 128 by default):
   * EF (184) is one; with the variable at -1 nothing is. */
  setenv("RAILNET_TRAFFIC_CLASS_NCCL", "1", 1);
  setenv("RAILNET_SOCKET_NSTREAMS", "4", 1);
  setenv("RAILNET_SOCKET_NTHREADS", "0", 1);
  urgent = warned = 0;
  int ok = urgent_case(&n11, 184);
  tap_result(ok && urgent == 1 && warned == 0,
             "class 184: its INFO says latency-critical (%d), and 8 x 4 MiB over a comm "
             "without a class next to it arrive verified",
             urgent);
  setenv("RAILNET_TRAFFIC_CLASS_URGENT", "-1", 1);
  urgent = 0;
  ok = urgent_case(&n11, 184);
  tap_result(ok && urgent == 0 && warned == 0,
             "RAILNET_TRAFFIC_CLASS_URGENT=-1: class 184 is not latency-critical (%d INFO), the "
             "same transfers verified",
             urgent);
  unsetenv("RAILNET_TRAFFIC_CLASS_URGENT");
  unsetenv("RAILNET_SOCKET_NTHREADS");
  setenv("RAILNET_SOCKET_NSTREAMS", "2", 1);

  /* v10: the class travels in connect's config. */
  setenv("RAILNET_TRAFFIC_CLASS_NCCL", "1", 1);
  r = n10.t.v10->init(logger, NULL);
  struct pair p;
  ncclResult_t rc = r == ncclSuccess ? connect_pair(&n10, 0x48, &p) : r;
  k = rc == ncclSuccess ? count_sockets(0x48, 0x48 >> 5) : -1;
  tap_result(rc == ncclSuccess && k == NSTREAMS + 1,
             "v10 connect with class 0x48: %d sockets carry it (init %d, connect %d)", k, (int)r,
             (int)rc);
  tap_result(close_pair(&n10, &p), "v10 comms close");
  warned = 0;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL, *sc = NULL;
  r = rn_net_listen(&n10, 0, handle, &lc);
  rc = r == ncclSuccess ? rn_net_connect_tc(&n10, 0, handle, &sc, -5) : r;
  tap_result(rc == ncclInvalidArgument && warned == 1 && sc == NULL,
             "v10 connect with class -5: ncclInvalidArgument (%d) and a WARN (%d)", (int)rc,
             warned);
  if (lc != NULL && rn_net_close_listen(&n10, lc) != ncclSuccess) diag("close_listen failed");

  return tap_failed() ? 1 : 0;
}
