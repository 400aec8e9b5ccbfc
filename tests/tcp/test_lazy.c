/* A TCP comm's data streams open at its first message above the inline
 * limit and close after RAILNET_SOCKET_IDLE_MS without one
 * (plugin/tcp/open.c).  Both ends in this process on loopback, so the
 * process's own descriptors are the comm's sockets: a pair holds one
 * control socket per side until a large message needs streams, then 2 N
 * more; an idle pair gives them back and opens them again for the next
 * large message, also when only other comms of the process are called
 * (sockets counted: the progress engine's own descriptors
 * are not).  Every transfer is verified, with helper threads off and
 * on (the streams join and leave the progress engine mid-comm), and with
 * RAILNET_SOCKET_LAZY=0 the streams are there from connect.  The idle
 * wait only bounds the test: it polls until the sockets are gone. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define NSTREAMS 3
#define BIG (16u << 20)  /* above RN_TCP_OPEN_INLINE: waits for the streams */
#define FIRST (1u << 20) /* at most RN_TCP_OPEN_INLINE: inline while they open */
#define IDLE_MS 300 /* x rn_timeout_scale(): a slow run (memcheck) must not go idle mid-test */
static int idle_ms;

struct pair {
  void *lc, *sc, *rc;
};

/* Sockets this process holds (the progress engine's epoll and eventfd
 * descriptors are not sockets). */
static int open_sockets(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (d == NULL) return -1;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    char path[300], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t k = readlink(path, target, sizeof target - 1);
    if (k <= 0) continue;
    target[k] = '\0';
    n += strncmp(target, "socket:", 7) == 0;
  }
  closedir(d);
  return n;
}

static ncclResult_t open_pair(struct rn_net *n, struct pair *p) {
  ncclResult_t r = rn_net_self_connect(n, 0, &p->lc, &p->sc, &p->rc);
  /* NCCL closes a listen comm once it accepted. */
  if (p->lc != NULL && rn_net_close_listen(n, p->lc) != ncclSuccess) r = ncclInternalError;
  p->lc = NULL;
  return r;
}

static int close_pair(struct rn_net *n, struct pair *p) {
  int ok = 1;
  if (p->sc != NULL) ok &= rn_net_close_send(n, p->sc) == ncclSuccess;
  if (p->rc != NULL) ok &= rn_net_close_recv(n, p->rc) == ncclSuccess;
  return ok;
}

static int restart(struct rn_net *n, const char *lazy, const char *threads) {
  setenv("RAILNET_SOCKET_LAZY", lazy, 1);
  setenv("RAILNET_SOCKET_NTHREADS", threads, 1);
  return rn_net_finalize(n) == ncclSuccess && rn_net_init(n) == ncclSuccess;
}

/* One round with helper threads `threads`. */
static void lazy_round(struct rn_net *n, const char *threads) {
  char mode[32];
  snprintf(mode, sizeof mode, "helpers %s", threads);
  struct pair p;
  int up = restart(n, "1", threads);
  int base = open_sockets();
  int ok = up && open_pair(n, &p) == ncclSuccess;
  int fresh = open_sockets() - base;
  tap_result(ok && fresh == 2, "%s: a fresh pair holds one socket per side (%d)", mode, fresh);

  int opened = rn_log_watch("data streams open over");
  int good = 0;
  for (int k = 0; ok && k < 100; k++)
    good += rn_net_pair_transfer(n, p.sc, p.rc, 1 + (size_t)k * 650, k) == 0;
  int small = open_sockets() - base;
  tap_result(good == 100 && small == 2 && rn_log_seen(opened) == 0,
             "%s: 100 messages of 1 B .. 64 KiB, verified (%d): no data stream opens (%d sockets)",
             mode, good, small);

  int first = ok && rn_net_pair_transfer(n, p.sc, p.rc, FIRST, 200) == 0;
  int big = ok && rn_net_pair_transfer(n, p.sc, p.rc, BIG, 201) == 0;
  int open_fds = open_sockets() - base;
  tap_result(first && big && open_fds == 2 + 2 * NSTREAMS && rn_log_seen(opened) == 2,
             "%s: 1 MiB (inline while the streams open) and 16 MiB arrive verified; then %d "
             "sockets, the %d data streams on each side open (%d INFO)",
             mode, open_fds, NSTREAMS, rn_log_seen(opened));

  /* Idle: a small message now and then keeps both sides calling. */
  int closed = rn_log_watch("data streams closed");
  usleep((useconds_t)idle_ms * 1000);
  int idle_fds = -1, n_small = 0;
  double end = rn_deadline(20);
  while (ok && now_s() < end) {
    ok = rn_net_pair_transfer(n, p.sc, p.rc, 100, 300 + n_small++) == 0;
    idle_fds = open_sockets() - base;
    if (idle_fds == 2 && rn_log_seen(closed) == 2) break;
    usleep(10000);
  }
  tap_result(ok && idle_fds == 2 && rn_log_seen(closed) == 2,
             "%s: idle for RAILNET_SOCKET_IDLE_MS, both sides close their streams (%d INFO) "
             "back to %d sockets, small messages verified meanwhile (%d)",
             mode, rn_log_seen(closed), idle_fds, n_small);

  big = ok && rn_net_pair_transfer(n, p.sc, p.rc, BIG, 400) == 0 &&
        rn_net_pair_transfer(n, p.sc, p.rc, BIG, 401) == 0;
  open_fds = open_sockets() - base;
  tap_result(big && open_fds == 2 + 2 * NSTREAMS && rn_log_seen(opened) == 4,
             "%s: the next 16 MiB messages open them again and arrive verified (%d sockets)", mode,
             open_fds);

  /* Quiet: no call on this pair at all; another pair's calls sweep it. */
  struct pair q;
  int other = open_pair(n, &q) == ncclSuccess;
  int quiet = -1, k = 0;
  closed = rn_log_watch("data streams closed");
  end = rn_deadline(20);
  while (other && now_s() < end) {
    other = rn_net_pair_transfer(n, q.sc, q.rc, 100, 500 + k++) == 0;
    quiet = open_sockets() - base;
    if (quiet == 4 && rn_log_seen(closed) == 2) break;
  }
  tap_result(other && quiet == 4 && rn_log_seen(closed) == 2,
             "%s: a pair with no call of its own closes its idle streams too, swept by another "
             "pair's calls (%d sockets for both pairs, %d INFO, %d messages)",
             mode, quiet, rn_log_seen(closed), k);
  other = close_pair(n, &q);
  tap_result(close_pair(n, &p) && other && open_sockets() == base,
             "%s: the pairs close every socket", mode);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  rn_default_env();
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_NSTREAMS", "3", 1);
  setenv("RAILNET_SOCKET_POOL", "0", 1); /* a closed pair gives back every socket */
  char idle[16];
  idle_ms = (int)(IDLE_MS * rn_timeout_scale());
  snprintf(idle, sizeof idle, "%d", idle_ms);
  setenv("RAILNET_SOCKET_IDLE_MS", idle, 1);
  tap_plan(16);
  char err[256];
  struct rn_net n = {0};
  if (rn_net_open(&n, 12, err, sizeof err) != 0 || rn_net_init(&n) != ncclSuccess) {
    tap_result(0, "load the plugin: %s", err);
    return 1;
  }
  lazy_round(&n, "0");
  lazy_round(&n, "2");

  /* RAILNET_SOCKET_LAZY=0: the streams come with the connection. */
  struct pair p;
  int up = restart(&n, "0", "0");
  int base = open_sockets();
  int ok = up && open_pair(&n, &p) == ncclSuccess;
  int fds = open_sockets() - base;
  ok = ok && rn_net_pair_transfer(&n, p.sc, p.rc, BIG, 7) == 0;
  tap_result(ok && fds == 2 + 2 * NSTREAMS,
             "RAILNET_SOCKET_LAZY=0: a fresh pair holds its %d data streams (%d sockets), and "
             "16 MiB arrive verified",
             NSTREAMS, fds);
  tap_result(close_pair(&n, &p) && rn_log_warns() == 0, "no WARN in all of the above (%d)",
             rn_log_warns());
  rn_net_finalize(&n);
  rn_net_close(&n);
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
