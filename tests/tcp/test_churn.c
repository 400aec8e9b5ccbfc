/* Many comms at once, each side on a thread of its own, driven at random
 * the way NCCL's channels drive a shared comm, while the data streams
 * close and open again between messages (RAILNET_SOCKET_IDLE_MS=1).  Per
 * pair, one process, loopback, the workload of tests/common/churn.c
 * (random groups, tags, sizes and test order; every byte, size and guard
 * checked); no call may fail and no WARN may appear.  Each configuration
 * runs in a child of its own under a bound, so a deadlock is a failure,
 * not a hang.  Past failures this caught: the idle sweep admitting a
 * receiver's streams while it held the list's lock (every thread of the
 * process deadlocked), and a sender closing its streams idle before the
 * receiver had admitted them (the receiver failed the comm).
 *
 *   test_churn [--seed N] [--groups N] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/churn.h"
#include "../common/rn_test.h"

#define PAIRS 3

static int g_groups = 1500;
static uint64_t g_seed = 1;

/* One configuration, in a child: PAIRS pairs, a thread per side. */
static int churn(struct rn_peer *pr) {
  struct rn_net *n = &pr->net;
  struct churn_side snd[PAIRS], rcv[PAIRS];
  void *lc[PAIRS];
  int maxn = pr->props.max_recvs < CHURN_MAXN ? pr->props.max_recvs : CHURN_MAXN;
  for (int i = 0; i < PAIRS; i++) {
    void *sc, *rc;
    ncclResult_t r = rn_net_self_connect(n, 0, &lc[i], &sc, &rc);
    if (r != ncclSuccess) return peer_fail(pr, "pair %d: connect: %s", i, rn_result_str(r));
    snd[i] = (struct churn_side){.net = n, .comm = sc, .seed = g_seed, .pair = i,
                                 .maxn = maxn, .groups = g_groups, .bound_s = 60};
    rcv[i] = snd[i];
    rcv[i].comm = rc;
  }
  pthread_t ts[PAIRS], tr[PAIRS];
  for (int i = 0; i < PAIRS; i++) {
    if (pthread_create(&tr[i], NULL, churn_receiver, &rcv[i]) != 0 ||
        pthread_create(&ts[i], NULL, churn_sender, &snd[i]) != 0)
      return peer_fail(pr, "pthread_create");
  }
  int bad = -1;
  for (int i = 0; i < PAIRS; i++) {
    pthread_join(ts[i], NULL);
    pthread_join(tr[i], NULL);
    if (bad < 0 && (snd[i].failed || rcv[i].failed)) bad = i;
  }
  if (bad >= 0)
    return peer_fail(pr, "pair %d: %s%s%s", bad, rcv[bad].failed ? rcv[bad].why : "",
                     rcv[bad].failed && snd[bad].failed ? "; " : "",
                     snd[bad].failed ? snd[bad].why : "");
  for (int i = 0; i < PAIRS; i++) {
    if (rn_net_close_send(n, snd[i].comm) != ncclSuccess ||
        rn_net_close_recv(n, rcv[i].comm) != ncclSuccess ||
        rn_net_close_listen(n, lc[i]) != ncclSuccess)
      return peer_fail(pr, "pair %d: close failed", i);
  }
  if (rn_log_warns() != 0) return peer_fail(pr, "a WARN: %s", rn_log_last_warn());
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
      g_seed = strtoull(argv[++i], NULL, 0);
    } else if (!strcmp(argv[i], "--groups") && i + 1 < argc) {
      g_groups = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: test_churn [--seed N] [--groups N]\n");
      return 2;
    }
  }
  static const struct {
    const char *env, *what;
  } cfg[] = {
      {"RAILNET_SOCKET_NTHREADS=0", "defaults, no helper threads"},
      {"RAILNET_SOCKET_IDLE_MS=1,RAILNET_SOCKET_NTHREADS=0",
       "streams closing idle after 1 ms and opening again, no helper threads"},
      {"RAILNET_SOCKET_IDLE_MS=1,RAILNET_SOCKET_NTHREADS=2", "the same, 2 helper threads"},
      {"RAILNET_SOCKET_IDLE_MS=1,RAILNET_SOCKET_NTHREADS=0,RAILNET_SOCKET_CHUNK=8192,"
       "RAILNET_SOCKET_INLINE=2048",
       "the same, no helpers, 8 KiB chunks, 2 KiB inline limit"},
  };
  const int ncfg = (int)(sizeof cfg / sizeof cfg[0]);
  rn_default_env();
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_NSTREAMS", "3", 1);
  tap_plan(ncfg);
  note("seed %llu (rerun: --seed %llu), %d groups per pair", (unsigned long long)g_seed,
       (unsigned long long)g_seed, g_groups);
  for (int c = 0; c < ncfg; c++) {
    struct rn_pair_opts o = {.version = 11, .timeout_s = 90, .init = 1, .env = cfg[c].env};
    char why[512];
    double t0 = now_s();
    int rc = rn_run_single(churn, &o, why, sizeof why);
    if (!tap_result(rc == 0,
                    "%s: %d pairs, a thread per side, %d groups each of 1..8 receives with "
                    "random tags and sizes 0 B .. 16 MiB, sends of later groups tried early, "
                    "random test order: every byte, size and guard verified, no WARN",
                    cfg[c].what, PAIRS, g_groups))
      diag("  %s", why);
    else
      note("  %.1f s", now_s() - t0);
  }
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
