/* Plugin-level checks and numbers over verbs, through ncclNetPlugin_v11
 * exactly as NCCL loads it (tests/common helpers):
 *
 *   ib_bench [verify] [bw] [lat]     (default: all three)
 *
 * verify: sizes 0 B..16 MiB one at a time, 32 small (0..60 B) and 32 of
 *     256 KiB in flight, every byte checked;
 * bw: RN_BENCH_SIZE (1 MiB) x RN_BENCH_ITERS, RN_BENCH_WINDOW (8) in flight:
 *     MiB/s (perftest's "MB/sec" unit) and messages/s; each side also
 *     reports its loop's calls per message and a request's median time
 *     from post to completion (where a message waits: for its FIFO slot
 *     on the sender, for the data on the receiver);
 * lat: 8-byte ping-pong, half the round trip (as ib_write_lat reports),
 *     with RN_BENCH_RECV_AHEAD receives posted ahead.
 * RN_IB_VDEV="0,1" fuses those devices with makeVDevice and runs on the
 * result (multi-rail).  RN_BENCH_IDLE=yield yields after an idle pass (as
 * NCCL's proxy does); RN_BENCH_CPU=N pins a side to CPU N.  Per-process
 * env: RN_CONF_RECV_ENV / RN_CONF_SEND_ENV.
 * Results also go to stdout as "# RESULT name value" for scripts. */
#include "../common/rn_test.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KB ((size_t)1024)
#define MB (KB * KB)
#define TMO 120.0

static int pick_dev(struct rn_peer *p) {
  /* RN_BENCH_CPU=N (per side, through RN_CONF_RECV_ENV / RN_CONF_SEND_ENV):
   * this side runs on CPU N only. */
  const char *cpu = getenv("RN_BENCH_CPU");
  if (cpu && *cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(cpu), &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
      return peer_fail(p, "RN_BENCH_CPU=%s: %s", cpu, strerror(errno));
  }
  const char *v = getenv("RN_IB_VDEV");
  p->dev = 0;
  if (!v || !*v) return 0;
  ncclNetVDeviceProps_t vp;
  memset(&vp, 0, sizeof(vp));
  for (const char *s = v; *s && vp.ndevs < NCCL_NET_MAX_DEVS_PER_NIC;) {
    vp.devs[vp.ndevs++] = atoi(s);
    s = strchr(s, ',');
    if (!s) break;
    s++;
  }
  int d = -1;
  ncclResult_t r = p->net.t.v11->makeVDevice(&d, &vp);
  if (r != ncclSuccess) return peer_fail(p, "makeVDevice(%s): %s", v, rn_result_str(r));
  p->dev = d;
  if (rn_net_props(&p->net, d, &p->props) != ncclSuccess)
    return peer_fail(p, "props of vdev %d", d);
  note("%s: vdev %d = %s (%d rails), %d Mbps", p->role == RN_RECEIVER ? "receiver" : "sender", d,
       p->props.name, p->props.vndevs, p->props.speed);
  return 0;
}

struct bufs {
  char *buf;
  void *mh;
  size_t len;
};
static int bufs_get(struct rn_peer *p, void *comm, size_t len, struct bufs *b) {
  b->len = len;
  b->buf = aligned_alloc(4096, len);
  if (!b->buf) return peer_fail(p, "out of memory");
  memset(b->buf, 0, len);
  if (rn_net_regmr(&p->net, comm, b->buf, len, NCCL_PTR_HOST, &b->mh) != ncclSuccess)
    return peer_fail(p, "regMr %zu bytes", len);
  return 0;
}
static void bufs_put(struct rn_peer *p, void *comm, struct bufs *b) {
  if (b->mh) rn_net_deregmr(&p->net, comm, b->mh);
  free(b->buf);
}

/* A side is done: release its buffers and close its comm. */
static void side_end(struct rn_peer *p, void *comm, struct bufs *b) {
  bufs_put(p, comm, b);
  if (p->role == RN_SENDER)
    rn_net_close_send(&p->net, comm);
  else
    rn_net_close_recv(&p->net, comm);
}

/* ---- verify ---------------------------------------------------------- */
static const size_t vsizes[] = {0,     1,      7,      4095,       4096,   65536,
                                65537, 262143, 1 * MB, 4 * MB + 3, 16 * MB};
#define NV (sizeof(vsizes) / sizeof(vsizes[0]))
#define INFL 32

static int verify_side(struct rn_peer *p) {
  if (pick_dev(p)) return 1;
  void *comm;
  if (peer_connect(p, 1, &comm, NULL, TMO)) return 1;
  int rc = 1;
  struct bufs b = {0};
  if (bufs_get(p, comm, 16 * MB + 4096, &b)) goto out;
  for (size_t i = 0; i < NV; i++) {
    size_t n = vsizes[i];
    void *req = NULL;
    int sz = -1;
    uint64_t key = pattern_key(p->seed, i, n);
    if (p->role == RN_SENDER) pattern_fill(b.buf, n, key);
    double end = now_s() + TMO;
    while (!req && now_s() < end) {
      ncclResult_t r;
      if (p->role == RN_SENDER) {
        r = rn_net_isend(&p->net, comm, b.buf, n, 1, b.mh, &req);
      } else {
        void *d[1] = {b.buf};
        size_t s[1] = {b.len};
        int t[1] = {1};
        void *m[1] = {b.mh};
        r = rn_net_irecv(&p->net, comm, 1, d, s, t, m, &req);
      }
      if (r != ncclSuccess) {
        peer_fail(p, "post %zu: %s", n, rn_result_str(r));
        goto out;
      }
    }
    if (peer_wait(p, req, &sz, TMO) != ncclSuccess) goto out;
    if (p->role == RN_RECEIVER) {
      if ((size_t)sz != n) {
        peer_fail(p, "size %zu reported as %d", n, sz);
        goto out;
      }
      size_t bad = pattern_check(b.buf, n, key);
      if (bad != (size_t)-1) {
        peer_fail(p, "%zu bytes: byte %zu differs", n, bad);
        goto out;
      }
    }
  }
  /* Small messages, 32 in flight, 4 rounds: sizes 0..60 bytes, so the
   * zero-byte immediate-only, inline and single-packet paths all run with
   * receives posted ahead (their FIFO slots sent in batches). */
  for (int round = 0; round < 4; round++) {
    void *sreqs[INFL] = {0};
    for (int i = 0; i < INFL; i++) {
      size_t sn = (size_t)(round * INFL + i) % 61;
      char *at = b.buf + (size_t)i * 4096;
      uint64_t key = pattern_key(p->seed, 2000 + (uint64_t)(round * INFL + i), sn);
      if (p->role == RN_SENDER) pattern_fill(at, sn, key);
      double end = now_s() + TMO;
      while (!sreqs[i] && now_s() < end) {
        ncclResult_t r;
        if (p->role == RN_SENDER) {
          r = rn_net_isend(&p->net, comm, at, sn, 5, b.mh, &sreqs[i]);
        } else {
          void *d[1] = {at};
          size_t s[1] = {4096};
          int t[1] = {5};
          void *mm[1] = {b.mh};
          r = rn_net_irecv(&p->net, comm, 1, d, s, t, mm, &sreqs[i]);
        }
        if (r != ncclSuccess) {
          peer_fail(p, "small post #%d: %s", i, rn_result_str(r));
          goto out;
        }
      }
      if (!sreqs[i]) {
        peer_fail(p, "small request %d never posted", i);
        goto out;
      }
    }
    for (int i = 0; i < INFL; i++) {
      size_t sn = (size_t)(round * INFL + i) % 61;
      int sz = -1;
      if (peer_wait(p, sreqs[i], &sz, TMO) != ncclSuccess) goto out;
      if (p->role != RN_RECEIVER) continue;
      if ((size_t)sz != sn) {
        peer_fail(p, "small message %d of %zu bytes reported as %d", i, sn, sz);
        goto out;
      }
      if (pattern_check(b.buf + (size_t)i * 4096, sn,
                        pattern_key(p->seed, 2000 + (uint64_t)(round * INFL + i), sn)) !=
          (size_t)-1) {
        peer_fail(p, "small message %d (%zu bytes) corrupt", i, sn);
        goto out;
      }
    }
  }
  /* 32 messages of 256 KiB in flight at once, then checked. */
  size_t m = 256 * KB;
  void *reqs[INFL] = {0};
  for (int i = 0; i < INFL; i++) {
    char *at = b.buf + (size_t)i * m * 2;
    if (p->role == RN_SENDER) pattern_fill(at, m, pattern_key(p->seed, 1000 + (uint64_t)i, m));
    double end = now_s() + TMO;
    while (!reqs[i] && now_s() < end) {
      ncclResult_t r;
      if (p->role == RN_SENDER) {
        r = rn_net_isend(&p->net, comm, at, m, 2, b.mh, &reqs[i]);
      } else {
        void *d[1] = {at};
        size_t s[1] = {m};
        int t[1] = {2};
        void *mm[1] = {b.mh};
        r = rn_net_irecv(&p->net, comm, 1, d, s, t, mm, &reqs[i]);
      }
      if (r != ncclSuccess) {
        peer_fail(p, "post #%d: %s", i, rn_result_str(r));
        goto out;
      }
    }
    if (!reqs[i]) {
      peer_fail(p, "request %d never posted", i);
      goto out;
    }
  }
  for (int i = INFL - 1; i >= 0; i--) {
    int sz = -1;
    if (peer_wait(p, reqs[i], &sz, TMO) != ncclSuccess) goto out;
    if (p->role == RN_RECEIVER &&
        pattern_check(b.buf + (size_t)i * m * 2, m, pattern_key(p->seed, 1000 + (uint64_t)i, m)) !=
            (size_t)-1) {
      peer_fail(p, "in-flight message %d corrupt", i);
      goto out;
    }
  }
  rc = 0;
out:
  side_end(p, comm, &b);
  return rc;
}

/* ---- clocks ---------------------------------------------------------- */
/* Loops read the clock only every CLOCK_EVERY iterations: in the Soft-RoCE
 * VM clock_gettime is a system call reading an emulated HPET, costlier
 * than a whole pass of the plugin's data path.  Per-round-trip stamps use
 * the TSC (as perftest does), scaled by the monotonic clock. */
#define CLOCK_EVERY 1024
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static uint64_t ticks(void) { return __rdtsc(); }
#else
static uint64_t ticks(void) { return (uint64_t)(now_s() * 1e9); }
#endif

/* A pass of the loop that moved nothing: by default the driver polls on,
 * as perftest does.  RN_BENCH_IDLE=yield yields the CPU then, as NCCL's
 * proxy thread does (proxy.cc: std::this_thread::yield() after a progress
 * pass with no request progressed and no new op).  Under emulation the
 * yield bought nothing (README, verbs section). */
static int idle_yield; /* set in main before any side runs */
static void idle_pass(void) {
  if (idle_yield) sched_yield();
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* ---- bandwidth and message rate --------------------------------------- */
/* RN_BENCH_SIZE-byte messages, RN_BENCH_WINDOW in flight, RN_BENCH_ITERS of
 * them after a warm-up; the sender reports MB/s and messages/s. */
static int bw_side(struct rn_peer *p) {
  size_t size = (size_t)rn_env_long("RN_BENCH_SIZE", (long)MB);
  int iters = (int)rn_env_long("RN_BENCH_ITERS", 200);
  int win = (int)rn_env_long("RN_BENCH_WINDOW", 8);
  if (win > 32) win = 32;
  if (win < 1) win = 1;
  if (iters < 1) iters = 1;
  if (pick_dev(p)) return 1;
  void *comm;
  if (peer_connect(p, 1, &comm, NULL, TMO)) return 1;
  int rc = 1;
  struct bufs b = {0};
  if (bufs_get(p, comm, size * (size_t)win + 1, &b)) goto out;
  void *reqs[32] = {0};
  /* per message of the measured run: TSC at post and at completion */
  uint64_t *t_post = calloc((size_t)iters, sizeof(uint64_t));
  double *lifetime = calloc((size_t)iters, sizeof(double));
  if (!t_post || !lifetime) {
    peer_fail(p, "out of memory");
    goto out_free;
  }
  for (int rep = 0; rep < 2; rep++) { /* rep 0 warms up */
    int n = rep == 0 ? win * 2 : iters, posted = 0, done = 0;
    if (peer_sync(p, TMO)) goto out_free;
    double t0 = now_s(), end = t0 + TMO * 4;
    uint64_t c0 = ticks();
    long spins = 0, tests = 0, post_tries = 0;
    while (done < n) {
      int moved = 0;
      if (++spins % CLOCK_EVERY == 0 && now_s() > end) {
        peer_fail(p, "bandwidth run timed out (%d/%d)", done, n);
        goto out_free;
      }
      while (posted < n && posted - done < win) {
        void *req = NULL;
        char *at = b.buf + (size_t)(posted % win) * size;
        ncclResult_t r;
        if (p->role == RN_SENDER) {
          r = rn_net_isend(&p->net, comm, at, size, 3, b.mh, &req);
        } else {
          void *d[1] = {at};
          size_t s[1] = {size};
          int t[1] = {3};
          void *mm[1] = {b.mh};
          r = rn_net_irecv(&p->net, comm, 1, d, s, t, mm, &req);
        }
        post_tries++;
        if (r != ncclSuccess) {
          peer_fail(p, "post: %s (last WARN: %s)", rn_result_str(r), rn_log_last_warn());
          goto out_free;
        }
        if (!req) break;
        if (rep == 1) t_post[posted] = ticks();
        reqs[posted % win] = req;
        posted++;
        moved = 1;
      }
      if (done < posted) {
        int fin = 0, sz[8];
        ncclResult_t r = rn_net_test(&p->net, reqs[done % win], &fin, sz);
        tests++;
        if (r != ncclSuccess) {
          peer_fail(p, "test: %s (last WARN: %s)", rn_result_str(r), rn_log_last_warn());
          goto out_free;
        }
        if (fin && rep == 1) lifetime[done] = (double)(ticks() - t_post[done]);
        if (fin) done++;
        moved |= fin;
      }
      if (!moved) idle_pass();
    }
    double dt = now_s() - t0;
    if (rep == 1) {
      double us_per_tick = dt * 1e6 / (double)(ticks() - c0);
      qsort(lifetime, (size_t)n, sizeof(double), cmp_double);
      const char *me = p->role == RN_SENDER ? "send" : "recv";
      /* The loop's own work per message: how often it called into the
       * plugin, and how long a request lived from post to completion. */
      note("RESULT plugin_%s_tests_per_msg %.1f (post calls %.1f per message)", me,
           (double)tests / n, (double)post_tries / n);
      note("RESULT plugin_%s_lifetime_us %.1f (median post to completion; 90%% %.1f)", me,
           lifetime[n / 2] * us_per_tick, lifetime[n * 9 / 10] * us_per_tick);
    }
    if (rep == 1 && p->role == RN_SENDER) {
      note("RESULT plugin_bw_MiBps %.2f (size %zu, %d iters, window %d, %.3f s)",
           (double)size * n / dt / 1048576.0, size, n, win, dt);
      note("RESULT plugin_msg_rate %.0f (messages/s)", n / dt);
    }
  }
  rc = 0;
out_free:
  free(t_post);
  free(lifetime);
out:
  side_end(p, comm, &b);
  return rc;
}

/* ---- latency --------------------------------------------------------- */
/* A wait's TMO bound, started lazily: *end is 0 until the first call, so a
 * post or test that succeeds within CLOCK_EVERY tries reads no clock
 * (ib_write_lat reads none per message either). */
static int past(double *end) {
  double t = now_s();
  if (*end == 0) *end = t + TMO;
  return t > *end;
}

static ncclResult_t post_one(struct rn_peer *p, int send, void *comm, struct bufs *b, size_t off,
                             size_t n, void **req) {
  *req = NULL;
  double end = 0; /* read on the first slow pass: a clock read costs a message here */
  for (long spins = 1; !*req; spins++) {
    ncclResult_t r;
    if (send) {
      r = rn_net_isend(&p->net, comm, b->buf + off, n, 4, b->mh, req);
    } else {
      void *d[1] = {b->buf + off};
      size_t s[1] = {n};
      int t[1] = {4};
      void *mm[1] = {b->mh};
      r = rn_net_irecv(&p->net, comm, 1, d, s, t, mm, req);
    }
    if (r != ncclSuccess) return r;
    if (*req) break;
    if (spins % CLOCK_EVERY == 0 && past(&end)) return ncclInternalError;
    idle_pass();
  }
  return ncclSuccess;
}

static ncclResult_t wait_one(struct rn_peer *p, void *req) {
  int done = 0, sz[8];
  double end = 0;
  for (long spins = 1; !done; spins++) {
    ncclResult_t r = rn_net_test(&p->net, req, &done, sz);
    if (r != ncclSuccess) return r;
    if (done) break;
    if (spins % CLOCK_EVERY == 0 && past(&end)) return ncclInternalError;
    idle_pass();
  }
  return ncclSuccess;
}

#define SQ_RING 16
#define RQ_AHEAD_MAX 16

/* Reap finished sends without blocking. */
static ncclResult_t reap_sends(struct rn_peer *p, void **ring, int *tail, int head) {
  while (*tail < head) {
    int fin = 0, sz[8];
    ncclResult_t r = rn_net_test(&p->net, ring[*tail % SQ_RING], &fin, sz);
    if (r != ncclSuccess) return r;
    if (!fin) break;
    (*tail)++;
  }
  return ncclSuccess;
}

/* RN_BENCH_LAT_SIZE-byte (8) ping-pong over two comms, half the round trip,
 * as ib_write_lat reports it.  As NCCL's proxy does, each side keeps
 * RN_BENCH_RECV_AHEAD (4) receives posted ahead, posting the next one after
 * its send, and reaps send completions off the critical path (ib_write_lat
 * never waits for its own ACKs either). */
static int lat_side(struct rn_peer *p) {
  int iters = (int)rn_env_long("RN_BENCH_LAT_ITERS", 2000);
  int ahead = (int)rn_env_long("RN_BENCH_RECV_AHEAD", 4);
  size_t n = (size_t)rn_env_long("RN_BENCH_LAT_SIZE", 8);
  if (ahead < 1) ahead = 1;
  if (ahead > RQ_AHEAD_MAX) ahead = RQ_AHEAD_MAX;
  if (n > 4096) n = 4096;
  if (pick_dev(p)) return 1;
  void *fwd, *rev;
  if (peer_connect(p, 1, &fwd, NULL, TMO)) return 1;
  /* The reverse direction: roles swapped for the second comm. */
  enum rn_role me = p->role;
  p->role = me == RN_SENDER ? RN_RECEIVER : RN_SENDER;
  int crc = peer_connect(p, 1, &rev, NULL, TMO);
  p->role = me;
  if (crc) return 1;
  void *sc = me == RN_SENDER ? fwd : rev, *rc_ = me == RN_SENDER ? rev : fwd;
  struct bufs bs = {0}, br = {0};
  int rc = 1;
  if (bufs_get(p, sc, 4096, &bs) || bufs_get(p, rc_, 4096 * RQ_AHEAD_MAX, &br)) goto out;
  double *rtt = calloc((size_t)iters, sizeof(double));
  if (!rtt) {
    peer_fail(p, "out of memory");
    goto out;
  }
  for (int rep = 0; rep < 2; rep++) {
    int k = rep == 0 ? 100 : iters;
    if (peer_sync(p, TMO)) goto out_free;
    void *rq[RQ_AHEAD_MAX] = {0}, *sring[SQ_RING] = {0};
    int shead = 0, stail = 0;
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < ahead && i < k && r == ncclSuccess; i++)
      r = post_one(p, 0, rc_, &br, (size_t)(i % ahead) * 4096, n, &rq[i % ahead]);
    if (r == ncclSuccess && me == RN_SENDER) r = post_one(p, 1, sc, &bs, 0, n, &sring[shead++]);
    double t0 = now_s();
    uint64_t c0 = ticks(), prev = c0;
    for (int i = 0; i < k && r == ncclSuccess; i++) {
      if ((r = wait_one(p, rq[i % ahead]))) break;
      if (me == RN_SENDER) {
        uint64_t t = ticks();
        rtt[i] = (double)(t - prev);
        prev = t;
      }
      if (shead - stail == SQ_RING && (r = wait_one(p, sring[stail++ % SQ_RING]))) break;
      /* the ping's next message or the pong's reply, then the receive */
      if ((me == RN_RECEIVER || i + 1 < k) &&
          (r = post_one(p, 1, sc, &bs, 0, n, &sring[shead++ % SQ_RING])))
        break;
      if (i + ahead < k &&
          (r = post_one(p, 0, rc_, &br, (size_t)(i % ahead) * 4096, n, &rq[i % ahead])))
        break;
      r = reap_sends(p, sring, &stail, shead);
    }
    while (r == ncclSuccess && stail < shead) r = wait_one(p, sring[stail++ % SQ_RING]);
    if (r != ncclSuccess) {
      peer_fail(p, "ping-pong: %s (last WARN: %s)", rn_result_str(r), rn_log_last_warn());
      goto out_free;
    }
    double dt = now_s() - t0;
    double us_per_tick = dt * 1e6 / (double)(ticks() - c0);
    if (rep == 1 && me == RN_SENDER) {
      qsort(rtt, (size_t)k, sizeof(double), cmp_double);
      note(
          "RESULT plugin_lat_typical_us %.2f (median; %zu bytes, %d round trips, half the round "
          "trip, %d receives ahead)",
          rtt[k / 2] / 2 * us_per_tick, n, k, ahead);
      note("RESULT plugin_lat_avg_us %.2f (min %.2f, max %.2f)", dt / k / 2 * 1e6,
           rtt[0] / 2 * us_per_tick, rtt[k - 1] / 2 * us_per_tick);
    }
  }
  rc = 0;
out_free:
  free(rtt);
out:
  bufs_put(p, sc, &bs);
  bufs_put(p, rc_, &br);
  rn_net_close_send(&p->net, sc);
  rn_net_close_recv(&p->net, rc_);
  return rc;
}

int main(int argc, char **argv) {
  int want[3] = {argc <= 1, argc <= 1, argc <= 1};
  static const char *names[3] = {"verify", "bw", "lat"};
  static const rn_peer_fn fns[3] = {verify_side, bw_side, lat_side};
  for (int i = 1; i < argc; i++)
    for (int k = 0; k < 3; k++)
      if (strcmp(argv[i], names[k]) == 0) want[k] = 1;
  rn_default_env();
  const char *idle = getenv("RN_BENCH_IDLE");
  idle_yield = idle && strcmp(idle, "yield") == 0;
  int n = want[0] + want[1] + want[2];
  tap_plan(n);
  const char *vdev = getenv("RN_IB_VDEV");
  for (int k = 0; k < 3; k++) {
    if (!want[k]) continue;
    struct rn_pair_opts o;
    memset(&o, 0, sizeof(o));
    o.version = 11;
    o.timeout_s = 600;
    o.init = 1;
    o.seed = 42;
    char why[512] = "";
    double t0 = now_s();
    int rc = rn_run_pair(fns[k], fns[k], &o, why, sizeof(why));
    tap_result(rc == 0, "%s over verbs%s%s (%.1f s)%s%s", names[k], vdev ? " on vdev " : "",
               vdev ? vdev : "", now_s() - t0, rc ? ": " : "", rc ? why : "");
  }
  return tap_failed() ? 1 : 0;
}
