/* multirail-chaos: several comm pairs on one fused device of the railbed
 * testbed (scripts/railbed/railbed.sh), the receiver in one namespace
 * and the sender in the other, each pair on a thread per side with the
 * random workload of tests/common/churn.c (groups of 1..8 receives,
 * random tags, sizes 0 B .. 16 MiB, random test order), while the runner
 * damages the rails at random: one rail at a time, for 0.5 .. 3 s, its
 * link down at both ends or at one, every packet dropped (links up), 20%
 * of its packets dropped each way at random (a lossy link: TCP's
 * retransmission timeouts stall it for up to seconds at a time), or its
 * rate cut to 2 Mbit/s (a queue that still delivers, slowly); then
 * restored, and the next after 0.3 .. 1.5 s.  One rail always stays
 * whole, so every byte must arrive: each side verifies every byte, size
 * and guard, no call may fail, and neither side may WARN of a protocol
 * violation or a failed comm (taking a rail out and moving the control
 * connection are WARNed, and expected).  With --rounds N the pairs close
 * and connect again N - 1 times, the groups split between the rounds, so
 * comms connect, and open their streams on kept connections, while a rail
 * is damaged (a rail left out at connect is WARNed, and expected).  Past
 * failures this caught: a
 * receiver calling a comm dead while a slow rail still delivered (it
 * counted only whole chunks), and a first copy of a chunk that trailed
 * its re-sent copy taken for a duplicate.
 *
 *   multirail-chaos --railbed NAME --env K=V,... [--seed N] [--groups N]
 *                   [--pairs N] [--rails N] [--rate MBIT] [--timeout S] [--rounds N]
 *
 * Exit: 0 pass, 1 fail (the reason on stdout), 64 bad usage. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/churn.h"
#include "../common/rn_test.h"

#define CHAOS_MAX_PAIRS 8

static struct {
  const char *bed, *rb;
  uint64_t seed;
  int groups, pairs, rails, rate, rounds;
  double timeout;
} g = {.rb = "scripts/railbed/railbed.sh",
       .seed = 1,
       .groups = 400,
       .pairs = 4,
       .rails = 3,
       .rate = 1000,
       .rounds = 1,
       .timeout = 120};

/* One round: the pairs connect, move their share of the groups, close. */
static int round_run(struct rn_peer *p, int round, int violation, int failed, double end) {
  void *comms[CHAOS_MAX_PAIRS], *lcomms[CHAOS_MAX_PAIRS] = {NULL};
  if (peer_connect(p, g.pairs, comms, lcomms, 30) != 0) return 1;
  const int maxn = p->props.max_recvs < CHURN_MAXN ? p->props.max_recvs : CHURN_MAXN;
  struct churn_side x[CHAOS_MAX_PAIRS];
  pthread_t t[CHAOS_MAX_PAIRS];
  const int groups = g.groups / g.rounds + (round < g.groups % g.rounds);
  for (int i = 0; i < g.pairs; i++) {
    x[i] = (struct churn_side){.net = &p->net,
                               .comm = comms[i],
                               .seed = g.seed + 7919u * (uint64_t)round,
                               .pair = i,
                               .maxn = maxn,
                               .groups = groups,
                               .bound_s = end - now_s()};
    if (pthread_create(&t[i], NULL, p->role == RN_RECEIVER ? churn_receiver : churn_sender,
                       &x[i]) != 0)
      return peer_fail(p, "pthread_create");
  }
  int bad = -1;
  for (int i = 0; i < g.pairs; i++) {
    pthread_join(t[i], NULL);
    if (bad < 0 && x[i].failed) bad = i;
  }
  if (bad >= 0) return peer_fail(p, "round %d, pair %d: %s", round, bad, x[bad].why);
  char w[320];
  if (rn_log_seen(violation) != 0 && rn_log_first_warn("protocol violation", w, sizeof w))
    return peer_fail(p, "a protocol violation: %s", w);
  if (rn_log_seen(failed) != 0 && rn_log_first_warn("failed (error", w, sizeof w))
    return peer_fail(p, "a comm failed: %s", w);
  /* Both sides done before either closes: a close is not a failure. */
  if (peer_sync(p, 30) != 0) return peer_fail(p, "no sync from the peer");
  return peer_close(p, g.pairs, comms, lcomms);
}

static int side(struct rn_peer *p) {
  const int violation = rn_log_watch("protocol violation");
  const int failed = rn_log_watch("failed (error");
  const double end = now_s() + g.timeout - 15;
  for (int r = 0; r < g.rounds; r++)
    if (round_run(p, r, violation, failed, end) != 0) return 1;
  return 0;
}

/* ---- the damage, from the runner ---------------------------------------- */
static struct {
  uint64_t rng;
  double next, until;
  int rail; /* damaged now, or -1 */
  int slow; /* its rate was cut */
  int actions;
} d = {.rail = -1};

static void railbed(const char *fmt, ...) RN_ATTR_PRINTF(1, 2);
static void railbed(const char *fmt, ...) {
  char arg[128], cmd[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(arg, sizeof arg, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "%s --name %s %s >/dev/null 2>&1", g.rb, g.bed, arg);
  if (system(cmd) != 0) diag("railbed %s failed", arg);
  else note("%.1f s: %s", now_s(), arg);
}

static void repair(void) {
  if (d.rail < 0) return;
  railbed("restore %d", d.rail);
  if (d.slow) railbed("rate %d %d", d.rail, g.rate);
  d.rail = -1;
  d.slow = 0;
}

static void tick(void *arg) {
  (void)arg;
  const double t = now_s();
  if (d.next == 0) d.next = t + 1;
  if (d.rail >= 0 && t >= d.until) {
    repair();
    d.next = t + 0.3 + (double)(rng_next(&d.rng) % 1200) / 1000.0;
  }
  if (d.rail >= 0 || t < d.next) return;
  d.rail = (int)(rng_next(&d.rng) % (uint64_t)g.rails);
  switch (rng_next(&d.rng) % 5) {
  case 0: railbed("down %d", d.rail); break;
  case 1: railbed("down %d a", d.rail); break;
  case 2: railbed("blackhole %d", d.rail); break;
  case 3: railbed("loss %d 20", d.rail); break;
  default:
    railbed("rate %d 2", d.rail);
    d.slow = 1;
    break;
  }
  d.actions++;
  d.until = t + 0.5 + (double)(rng_next(&d.rng) % 2500) / 1000.0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *env = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) goto usage;
    if (!strcmp(a, "--railbed")) g.bed = v;
    else if (!strcmp(a, "--env")) env = v;
    else if (!strcmp(a, "--seed")) g.seed = strtoull(v, NULL, 0);
    else if (!strcmp(a, "--groups")) g.groups = atoi(v);
    else if (!strcmp(a, "--pairs")) g.pairs = atoi(v);
    else if (!strcmp(a, "--rails")) g.rails = atoi(v);
    else if (!strcmp(a, "--rate")) g.rate = atoi(v);
    else if (!strcmp(a, "--timeout")) g.timeout = atof(v);
    else if (!strcmp(a, "--rounds")) g.rounds = atoi(v);
    else if (!strcmp(a, "--railbed-script")) g.rb = v;
    else goto usage;
    i++;
  }
  if (g.bed == NULL || g.groups < 1 || g.pairs < 1 || g.pairs > CHAOS_MAX_PAIRS || g.rails < 2 ||
      g.rate < 1 || g.timeout < 30 || g.rounds < 1 || g.rounds > g.groups)
    goto usage;
  char ns[2][160];
  snprintf(ns[0], sizeof ns[0], "%s-b", g.bed);
  snprintf(ns[1], sizeof ns[1], "%s-a", g.bed);
  setenv("RN_CONF_RECV_NETNS", ns[0], 1);
  setenv("RN_CONF_SEND_NETNS", ns[1], 1);
  d.rng = g.seed * 0x9e3779b97f4a7c15ull + 7;
  struct rn_pair_opts o = {.version = 11,
                           .timeout_s = (int)g.timeout,
                           .init = 1,
                           .env = env,
                           .grace_s = 10,
                           .tick = tick};
  char why[512];
  const double t0 = now_s();
  int rc = rn_run_pair(side, side, &o, why, sizeof why);
  repair();
  if (rc == 0)
    printf("result ok: %d pairs x %d groups in %d round(s), seed %llu, %d rail faults, %.1f s\n",
           g.pairs, g.groups, g.rounds, (unsigned long long)g.seed, d.actions, now_s() - t0);
  else
    printf("result fail: %s (seed %llu, %d rail faults, %.1f s)\n", why,
           (unsigned long long)g.seed, d.actions, now_s() - t0);
  return rc == 0 ? 0 : 1;
usage:
  fprintf(stderr, "usage: multirail-chaos --railbed NAME [--env K=V,...] [--seed N] [--groups N] "
                  "[--pairs 1..8] [--rails N>=2] [--rate MBIT] [--timeout S>=30] "
                  "[--rounds 1..groups]\n");
  return 64;
}
