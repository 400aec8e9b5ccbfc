/* A TCP comm whose two sides have a different number of rails: each side
 * picks its own device, as NCCL does, so a host with one NIC meets a host
 * with two.  Here: loopback and a second interface as two devices, fused
 * into one of two rails with makeVDevice, and loopback alone.
 *
 * The receiver of several rails offers the sender a listener per rail
 * for its control connection at connect (plugin/tcp/move.c); a sender of
 * one rail never moves it, and closes its idle data streams
 * (RAILNET_SOCKET_IDLE_MS).  A pair that NCCL connects and then leaves
 * alone (a peer it has nothing for yet) has not read those offers when
 * another comm's call closes its streams; its first call after that must
 * read them as stale, not as a protocol violation.  The receiver, not
 * called either, must read the sender's close in those sweeps and let its
 * ends of the streams go, not hold their sockets until NCCL calls it
 * again (it keeps its streams only for a sender of several rails).  The same idle pair
 * the other way round (the sender's comm goes over the one rail both
 * devices have, rn_tcp_plan_streams), and every message after the idle
 * time, verified. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define IDLE_MS 300 /* x rn_timeout_scale() */
#define BIG (16u << 20)

static int dev_named(struct rn_net *n, int ndev, const char *name) {
  for (int d = 0; d < ndev; d++) {
    struct rn_props p;
    if (rn_net_props(n, d, &p) == ncclSuccess && strcmp(p.name, name) == 0) return d;
  }
  return -1;
}

/* Listen on rdev, connect from sdev. */
static ncclResult_t connect_pair(struct rn_net *n, int sdev, int rdev, void **sc, void **rc) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL;
  *sc = *rc = NULL;
  ncclResult_t r = rn_net_listen(n, rdev, handle, &lc);
  double end = rn_deadline(20);
  while (r == ncclSuccess && (*sc == NULL || *rc == NULL) && now_s() < end) {
    if (*sc == NULL) r = rn_net_connect(n, sdev, handle, sc);
    if (r == ncclSuccess && *rc == NULL) r = rn_net_accept(n, lc, rc);
  }
  if (lc != NULL && rn_net_close_listen(n, lc) != ncclSuccess) r = ncclInternalError;
  return r == ncclSuccess && (*sc == NULL || *rc == NULL) ? ncclInternalError : r;
}

/* One pair from sdev to rdev: connected, left alone while another pair's
 * calls go on past the idle time (and until the pair's own streams were
 * closed, where want_closed), then used. */
static void idle_round(struct rn_net *n, int sdev, int rdev, int lo, const char *what,
                       int want_closed) {
  void *sc, *rc, *qs, *qr, *ql;
  int w = rn_log_warns();
  int up = connect_pair(n, sdev, rdev, &sc, &rc) == ncclSuccess;
  tap_result(up, "%s: connected", what);
  if (!up) return;
  int other = rn_net_self_connect(n, lo, &ql, &qs, &qr) == ncclSuccess;
  if (ql != NULL) rn_net_close_listen(n, ql);
  int closed = rn_log_watch("data streams closed: idle for"); /* the sender's INFO */
  int let_go = rn_log_watch("data streams closed: the sender closed them idle"); /* receiver's */
  double quiet_until = now_s() + 3.0 * IDLE_MS * rn_timeout_scale() / 1000.0;
  double end = rn_deadline(20);
  int k = 0;
  /* Only the other pair is called; its calls sweep the idle one: the
   * sender closes its streams, and the receiver, whatever its rails, reads
   * that and lets its ends go instead of holding their sockets until NCCL
   * calls it again. */
  while (other && now_s() < end) {
    other = rn_net_pair_transfer(n, qs, qr, 100, k++) == 0;
    if (now_s() >= quiet_until &&
        (!want_closed || (rn_log_seen(closed) > 0 && rn_log_seen(let_go) > 0)))
      break;
    usleep(5000);
  }
  tap_result(other && (!want_closed || rn_log_seen(closed) > 0),
             "%s: left alone for 3 x RAILNET_SOCKET_IDLE_MS while another pair moved %d messages%s",
             what, k, want_closed ? "; the sender closed its idle streams" : "");
  if (want_closed)
    tap_result(rn_log_seen(let_go) > 0,
               "%s: the receiver, not called, let its ends of them go too (%d INFO)", what,
               rn_log_seen(let_go));
  int good = 0;
  for (int i = 0; i < 4; i++)
    good += rn_net_pair_transfer(n, sc, rc, i % 2 ? 100 : BIG, 10 + i) == 0;
  tap_result(good == 4 && rn_log_warns() == w,
             "%s: then 16 MiB, 100 B, 16 MiB, 100 B verified (%d of 4), no WARN (%d)", what, good,
             rn_log_warns() - w);
  int ok = rn_net_close_send(n, sc) == ncclSuccess && rn_net_close_recv(n, rc) == ncclSuccess;
  ok &= rn_net_close_send(n, qs) == ncclSuccess && rn_net_close_recv(n, qr) == ncclSuccess;
  tap_result(ok, "%s: closed", what);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  setenv("RN_CONF_SHOW_WARN", "1", 0); /* every WARN shown, as NCCL would */
  /* Two TCP interfaces: loopback and the first other one up. */
  char spec[160], idle[16];
  if (rn_two_ifs_env(spec, sizeof(spec)) != 0) return 0; /* skipped */
  snprintf(idle, sizeof idle, "%d", (int)(IDLE_MS * rn_timeout_scale()));
  setenv("RAILNET_SOCKET_IDLE_MS", idle, 1);
  setenv("RAILNET_SOCKET_POOL", "0", 1);
  tap_plan(11);
  char err[256];
  struct rn_net n = {0};
  int nd = 0, vd = -1;
  if (rn_net_open(&n, 11, err, sizeof err) != 0 || rn_net_init(&n) != ncclSuccess ||
      rn_net_devices(&n, &nd) != ncclSuccess) {
    tap_result(0, "load the plugin: %s", err);
    return 1;
  }
  int lo = dev_named(&n, nd, "lo");
  ncclNetVDeviceProps_t vp = {.ndevs = 2, .devs = {0, 1}};
  int made = nd == 2 && lo >= 0 && n.t.v11->makeVDevice(&vd, &vp) == ncclSuccess;
  tap_result(made, "devices %s, fused into device %d of two rails", spec + 1, vd);
  if (!made) return 1;
  idle_round(&n, lo, vd, lo, "one-rail sender, two-rail receiver", 1);
  idle_round(&n, vd, lo, lo, "two-rail sender, one-rail receiver", 0);
  tap_result(rn_log_warns() == 0, "no WARN in all of the above (%d)", rn_log_warns());
  rn_net_finalize(&n);
  rn_net_close(&n);
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
