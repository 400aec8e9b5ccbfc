/* A peer host that vanishes without closing its sockets (a pulled cable, a
 * powered-off node) must become an error on both sides within a bound,
 * never a hang.  Run by tests/tcp/linkdown.sh, which puts the receiver and
 * the sender in two network namespaces joined by a veth pair and passes:
 *   RN_CONF_RECV_ENV / RN_CONF_SEND_ENV  RN_NETNS=<ns>,RAILNET_SOCKET_IFNAME=<veth>
 *   RN_LINKDOWN_CMD                      the shell command that cuts the link
 *   RAILNET_SOCKET_TIMEOUT_MS            the bound under test (low)
 * Both sides move 1 MiB messages; once the receiver has 16 MiB, it runs
 * RN_LINKDOWN_CMD and both keep calling isend/irecv/test, which must fail
 * within RAILNET_SOCKET_TIMEOUT_MS plus the keepalive granularity (1 s)
 * and some slack, scaled by rn_timeout_scale(). */
#include "../common/rn_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MB ((size_t)1 << 20)
#define WIN 4

struct report {
  int role;
  double t_down; /* receiver: when the link went down */
  double t_err;  /* when this side's first error came back; 0 = none */
  int err;       /* that error */
  char why[160];
};

static double g_bound_s;

/* Move messages until a call fails or the bound passes; the receiver cuts
 * the link once 16 MiB have arrived. */
static int side(struct rn_peer *p) {
  struct report rep = {.role = p->role};
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, p->role == RN_RECEIVER ? &lc : NULL, 30 * rn_timeout_scale()) != 0)
    return -1;
  unsigned char *buf = malloc(WIN * MB);
  void *mh = NULL, *req[WIN] = {NULL};
  ncclResult_t r = rn_net_regmr(&p->net, comm, buf, WIN * MB, NCCL_PTR_HOST, &mh);
  if (r != ncclSuccess) return peer_fail(p, "regMr: %s", rn_result_str(r));
  size_t moved = 0;
  double end = now_s() + 60 * rn_timeout_scale();
  long spins = 0;
  while (r == ncclSuccess && now_s() < end &&
         (rep.t_down == 0 || now_s() < rep.t_down + g_bound_s + 5)) {
    for (int i = 0; i < WIN && r == ncclSuccess; i++) {
      if (req[i] == NULL) {
        void *d = buf + (size_t)i * MB;
        size_t sz = MB;
        int tag = 7;
        r = p->role == RN_RECEIVER ? rn_net_irecv(&p->net, comm, 1, &d, &sz, &tag, &mh, &req[i])
                                   : rn_net_isend(&p->net, comm, d, MB, tag, mh, &req[i]);
        continue;
      }
      int done = 0;
      r = rn_net_test(&p->net, req[i], &done, NULL);
      if (r == ncclSuccess && done) req[i] = NULL, moved += MB;
    }
    if (p->role == RN_RECEIVER && rep.t_down == 0 && moved >= 16 * MB) {
      const char *cmd = getenv("RN_LINKDOWN_CMD");
      note("receiver: %zu MiB moved, cutting the link: %s", moved / MB, cmd ? cmd : "(none)");
      if (cmd == NULL || system(cmd) != 0) return peer_fail(p, "RN_LINKDOWN_CMD failed");
      rep.t_down = now_s();
    }
    if (++spins % 256 == 0) sleep_us(100);
  }
  if (r != ncclSuccess) {
    rep.t_err = now_s();
    rep.err = (int)r;
    snprintf(rep.why, sizeof rep.why, "%s", rn_log_last_warn());
  }
  if (peer_to_parent(p, &rep, sizeof rep) != 0) return peer_fail(p, "report pipe");
  /* Closes never wait for the vanished peer. */
  double t0 = now_s();
  rn_net_deregmr(&p->net, comm, mh);
  r = p->role == RN_RECEIVER ? rn_net_close_recv(&p->net, comm) : rn_net_close_send(&p->net, comm);
  if (lc != NULL) rn_net_close_listen(&p->net, lc);
  free(buf);
  if (r != ncclSuccess) return peer_fail(p, "close after the failure: %s", rn_result_str(r));
  if (now_s() - t0 > 2 * rn_timeout_scale()) return peer_fail(p, "close took %.1f s", now_s() - t0);
  return 0;
}

int main(void) {
  long timeout_ms = rn_env_long("RAILNET_SOCKET_TIMEOUT_MS", 0);
  if (timeout_ms <= 0 || getenv("RN_LINKDOWN_CMD") == NULL) {
    printf("1..0 # SKIP run through tests/tcp/linkdown.sh (namespaces, RN_LINKDOWN_CMD)\n");
    return 0;
  }
  /* the user timeout, one keepalive interval (1 s at least), and slack */
  g_bound_s = ((double)timeout_ms / 1000.0 + 1.0 + 2.0) * rn_timeout_scale();
  tap_plan(2);
  int pfd = -1;
  struct rn_pair_opts o = {.version = 8,
                           .timeout_s = (int)(120 * rn_timeout_scale()),
                           .init = 1,
                           .seed = 1,
                           .want_parent_pipe = 1,
                           .parent_fd = &pfd};
  char why[1024];
  int rc = rn_run_pair(side, side, &o, why, sizeof why);
  struct report rep[2];
  int have[2] = {0, 0};
  struct report x;
  while (pfd >= 0 && read(pfd, &x, sizeof x) == (ssize_t)sizeof x)
    if (x.role == RN_RECEIVER || x.role == RN_SENDER) rep[x.role] = x, have[x.role] = 1;
  if (rc != 0) diag("pair: %s", why);
  double t_down = have[RN_RECEIVER] ? rep[RN_RECEIVER].t_down : 0;
  for (int s = 0; s < 2; s++) {
    const char *who = s == RN_RECEIVER ? "receiver" : "sender";
    int ok = have[s] && t_down > 0 && rep[s].t_err > 0 && rep[s].t_err - t_down <= g_bound_s;
    if (have[s] && rep[s].t_err > 0)
      note("%s: error %d %.2f s after the link went down: %s", who, rep[s].err,
           rep[s].t_err - t_down, rep[s].why);
    tap_result(ok && rc == 0,
               "%s: isend/irecv/test fail within %.1f s of the link going down "
               "(RAILNET_SOCKET_TIMEOUT_MS=%ld), and close returns at once",
               who, g_bound_s, timeout_ms);
  }
  return tap_failed() ? 1 : 0;
}
