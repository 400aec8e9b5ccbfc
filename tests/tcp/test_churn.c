/* Many comms at once, each side on a thread of its own, driven at random
 * the way NCCL's channels drive a shared comm, while the data streams
 * close and open again between messages (RAILNET_SOCKET_IDLE_MS=1).  Per
 * pair, one process, loopback:
 *
 *   - the receiver posts groups of 1..maxRecvs buffers with distinct random
 *     tags, up to WINDOW groups ahead, each buffer larger than its message
 *     by 0, 1, 4096 or a random number of bytes;
 *   - the sender posts each tag's messages in order, picking a random tag
 *     each time, so a send of a group behind the head is tried early
 *     (*request = NULL: retried later); up to 32 sends in flight;
 *   - sizes from 0 B to 16 MiB on both sides of every threshold (eager,
 *     inline, chunk, clear-to-send), a registration per message;
 *   - each side tests a random request of its own, not the oldest.
 *
 * Every byte, every reported size and the bytes past each message are
 * checked; no call may fail and no WARN may appear.  Each configuration
 * runs in a child of its own under a bound, so a deadlock is a failure,
 * not a hang.  Past failures this caught: the idle sweep admitting a
 * receiver's streams while it held the list's lock (every thread of the
 * process deadlocked), and a sender closing its streams idle before the
 * receiver had admitted them (the receiver failed the comm).
 *
 *   test_churn [--seed N] [--groups N] */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/rn_test.h"

#define PAIRS 3
#define WINDOW 8    /* receive groups posted ahead */
#define INFLIGHT 32 /* sends in flight */
#define MAXN 8
#define NTAG 12
#define GUARD 64
#define GUARD_BYTE 0xA5

static int g_groups = 1500;
static uint64_t g_seed = 1;

struct group {
  int n;
  int tag[MAXN];
  size_t size[MAXN], cap[MAXN];
};

static size_t pick_size(uint64_t *s) {
  uint64_t c = rng_next(s) % 100, x = rng_next(s);
  if (c < 5) return 0;
  if (c < 35) return 1 + x % 256;
  if (c < 55) return 4096 - 8 + x % 16;
  if (c < 70) return 65536 - 8 + x % 16; /* the eager/inline limit */
  if (c < 80) return 131072 - 8 + x % 16;
  if (c < 90) return 1 + x % (512u << 10);
  if (c < 97) return 1 + x % (4u << 20);
  return (4u << 20) + x % (12u << 20);
}

/* Group g of pair `pair`, the same on both sides. */
static void plan(int pair, int g, int maxn, struct group *p) {
  uint64_t s = g_seed ^ ((uint64_t)pair << 40) ^ ((uint64_t)g * 0x9e3779b97f4a7c15ull);
  p->n = 1 + (int)(rng_next(&s) % (uint64_t)maxn);
  if (rng_next(&s) % 3 == 0) p->n = 1;
  int used[NTAG] = {0};
  for (int i = 0; i < p->n; i++) {
    int t;
    do t = (int)(rng_next(&s) % NTAG);
    while (used[t]);
    used[t] = 1;
    p->tag[i] = t;
    p->size[i] = pick_size(&s);
    if (p->n > 2 && p->size[i] > (1u << 20)) p->size[i] = 1u << 20;
    uint64_t e = rng_next(&s) % 4;
    p->cap[i] = p->size[i] + (e == 0 ? 0 : e == 1 ? 1 : e == 2 ? 4096 : rng_next(&s) % 100000);
  }
}

static uint64_t key(int pair, int g, int tag, size_t size) {
  return pattern_key(g_seed + (uint64_t)pair, (uint64_t)g * 64 + (uint64_t)tag, size);
}

struct side {
  struct rn_net *net;
  int pair, maxn;
  void *sc, *rc;
  int failed;
  char why[256];
};

static void *fail_side(struct side *x, const char *fmt, ...) RN_ATTR_PRINTF(2, 3);
static void *fail_side(struct side *x, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->why, sizeof x->why, fmt, ap);
  va_end(ap);
  x->failed = 1;
  return NULL;
}

struct sent {
  void *req, *buf, *mh;
};

static void *sender(void *arg) {
  struct side *x = arg;
  struct rn_net *n = x->net;
  int next[NTAG] = {0}; /* per tag: the first group that may still hold one to send */
  struct sent out[INFLIGHT];
  int nout = 0;
  long total = 0, posted = 0, done = 0;
  uint64_t rs = g_seed * 77 + (uint64_t)x->pair;
  for (int g = 0; g < g_groups; g++) {
    struct group p;
    plan(x->pair, g, x->maxn, &p);
    total += p.n;
  }
  double end = rn_deadline(60);
  while (done < total) {
    if (now_s() > end) return fail_side(x, "sends: %ld of %ld done after the bound", done, total);
    if (nout < INFLIGHT && posted < total) {
      int t = (int)(rng_next(&rs) % NTAG), idx = -1, g;
      struct group p;
      for (g = next[t]; g < g_groups; g++) {
        plan(x->pair, g, x->maxn, &p);
        for (int i = 0; i < p.n; i++)
          if (p.tag[i] == t) idx = i;
        if (idx >= 0) break;
      }
      next[t] = g; /* groups without the tag are passed once; g_groups: none left */
      if (idx >= 0) {
        size_t sz = p.size[idx];
        void *buf = malloc(sz ? sz : 1), *mh = NULL, *req = NULL;
        if (buf == NULL) return fail_side(x, "out of memory");
        pattern_fill(buf, sz, key(x->pair, g, t, sz));
        ncclResult_t r = rn_net_regmr(n, x->sc, buf, sz ? sz : 1, NCCL_PTR_HOST, &mh);
        if (r == ncclSuccess) r = rn_net_isend(n, x->sc, buf, sz, t, mh, &req);
        if (r != ncclSuccess)
          return fail_side(x, "isend (group %d, tag %d, %zu B): %s (%s)", g, t, sz,
                           rn_result_str(r), rn_log_last_warn());
        if (req != NULL) {
          out[nout++] = (struct sent){req, buf, mh};
          posted++;
          next[t] = g + 1;
        } else {
          (void)rn_net_deregmr(n, x->sc, mh);
          free(buf);
        }
      }
    }
    if (nout > 0) {
      int k = (int)(rng_next(&rs) % (uint64_t)nout), fin = 0, size = -1;
      ncclResult_t r = rn_net_test(n, out[k].req, &fin, &size);
      if (r != ncclSuccess)
        return fail_side(x, "send test: %s (%s)", rn_result_str(r), rn_log_last_warn());
      if (fin) {
        (void)rn_net_deregmr(n, x->sc, out[k].mh);
        free(out[k].buf);
        out[k] = out[--nout];
        done++;
      }
    }
  }
  return NULL;
}

struct posted {
  void *req;
  int g;
  struct group p;
  unsigned char *buf[MAXN];
  void *mh[MAXN];
};

/* The group's buffers: each message, its size, nothing written past it. */
static void *check_group(struct side *x, struct posted *q, const int *sizes) {
  for (int i = 0; i < q->p.n; i++) {
    size_t sz = q->p.size[i];
    if (sizes[i] != (int)sz)
      return fail_side(x, "group %d buffer %d (tag %d): size %d reported, %zu sent", q->g, i,
                       q->p.tag[i], sizes[i], sz);
    size_t off = pattern_check(q->buf[i], sz, key(x->pair, q->g, q->p.tag[i], sz));
    if (off != (size_t)-1)
      return fail_side(x, "group %d buffer %d (tag %d, %zu B): byte %zu wrong", q->g, i,
                       q->p.tag[i], sz, off);
    for (size_t b = sz; b < q->p.cap[i] + GUARD; b++)
      if (q->buf[i][b] != GUARD_BYTE)
        return fail_side(x, "group %d buffer %d: byte %zu written past the message (%zu B of %zu)",
                         q->g, i, b, sz, q->p.cap[i]);
  }
  return NULL;
}

static void release(struct side *x, struct posted *q) {
  for (int i = 0; i < q->p.n; i++) {
    if (q->mh[i] != NULL) (void)rn_net_deregmr(x->net, x->rc, q->mh[i]);
    free(q->buf[i]);
  }
}

static void *receiver(void *arg) {
  struct side *x = arg;
  struct rn_net *n = x->net;
  struct posted out[WINDOW];
  int nout = 0, g = 0, done = 0;
  uint64_t rs = g_seed * 991 + (uint64_t)x->pair;
  double end = rn_deadline(60);
  while (done < g_groups) {
    if (now_s() > end)
      return fail_side(x, "receives: %d of %d groups done after the bound", done, g_groups);
    if (nout < WINDOW && g < g_groups) {
      struct posted *q = &out[nout];
      memset(q, 0, sizeof(*q));
      plan(x->pair, g, x->maxn, &q->p);
      q->g = g;
      void *d[MAXN];
      size_t s[MAXN];
      int t[MAXN];
      for (int i = 0; i < q->p.n; i++) {
        q->buf[i] = malloc(q->p.cap[i] + GUARD);
        if (q->buf[i] == NULL) return fail_side(x, "out of memory");
        memset(q->buf[i], GUARD_BYTE, q->p.cap[i] + GUARD);
        ncclResult_t r =
            rn_net_regmr(n, x->rc, q->buf[i], q->p.cap[i] + GUARD, NCCL_PTR_HOST, &q->mh[i]);
        if (r != ncclSuccess) return fail_side(x, "regMr: %s", rn_result_str(r));
        d[i] = q->buf[i];
        s[i] = q->p.cap[i];
        t[i] = q->p.tag[i];
      }
      ncclResult_t r = rn_net_irecv(n, x->rc, q->p.n, d, s, t, q->mh, &q->req);
      if (r != ncclSuccess)
        return fail_side(x, "irecv (group %d of %d buffers): %s (%s)", g, q->p.n,
                         rn_result_str(r), rn_log_last_warn());
      if (q->req != NULL) {
        nout++;
        g++;
      } else {
        release(x, q);
      }
    }
    if (nout > 0) {
      int k = (int)(rng_next(&rs) % (uint64_t)nout), fin = 0, sizes[MAXN];
      struct posted *q = &out[k];
      ncclResult_t r = rn_net_test(n, q->req, &fin, sizes);
      if (r != ncclSuccess)
        return fail_side(x, "receive test (group %d): %s (%s)", q->g, rn_result_str(r),
                         rn_log_last_warn());
      if (fin) {
        check_group(x, q, sizes);
        release(x, q);
        if (x->failed) return NULL;
        out[k] = out[--nout];
        done++;
      }
    }
  }
  return NULL;
}

/* One configuration, in a child: PAIRS pairs, a thread per side. */
static int churn(struct rn_peer *pr) {
  struct rn_net *n = &pr->net;
  struct side snd[PAIRS], rcv[PAIRS];
  void *lc[PAIRS];
  int maxn = pr->props.max_recvs < MAXN ? pr->props.max_recvs : MAXN;
  for (int i = 0; i < PAIRS; i++) {
    void *sc, *rc;
    ncclResult_t r = rn_net_self_connect(n, 0, &lc[i], &sc, &rc);
    if (r != ncclSuccess) return peer_fail(pr, "pair %d: connect: %s", i, rn_result_str(r));
    snd[i] = (struct side){.net = n, .pair = i, .maxn = maxn, .sc = sc, .rc = rc};
    rcv[i] = snd[i];
  }
  pthread_t ts[PAIRS], tr[PAIRS];
  for (int i = 0; i < PAIRS; i++) {
    if (pthread_create(&tr[i], NULL, receiver, &rcv[i]) != 0 ||
        pthread_create(&ts[i], NULL, sender, &snd[i]) != 0)
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
    if (rn_net_close_send(n, snd[i].sc) != ncclSuccess ||
        rn_net_close_recv(n, snd[i].rc) != ncclSuccess ||
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
