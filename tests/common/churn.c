/* A random workload for one comm pair, driven the way NCCL's channels
 * drive a shared comm (tests/tcp/test_churn, tests/multirail/chaos):
 *
 *   - the receiver posts groups of 1..maxn buffers with distinct random
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
 * checked; no call may fail.  Both sides derive the same plan from the
 * seed, so they may run in two processes. */
#include "churn.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 8    /* receive groups posted ahead */
#define INFLIGHT 32 /* sends in flight */
#define NTAG 12
#define GUARD 64
#define GUARD_BYTE 0xA5

struct group {
  int n;
  int tag[CHURN_MAXN];
  size_t size[CHURN_MAXN], cap[CHURN_MAXN];
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
static void plan(uint64_t seed, int pair, int g, int maxn, struct group *p) {
  uint64_t s = seed ^ ((uint64_t)pair << 40) ^ ((uint64_t)g * 0x9e3779b97f4a7c15ull);
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

static uint64_t key(uint64_t seed, int pair, int g, int tag, size_t size) {
  return pattern_key(seed + (uint64_t)pair, (uint64_t)g * 64 + (uint64_t)tag, size);
}


static void *fail_side(struct churn_side *x, const char *fmt, ...) RN_ATTR_PRINTF(2, 3);
static void *fail_side(struct churn_side *x, const char *fmt, ...) {
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

void *churn_sender(void *arg) {
  struct churn_side *x = arg;
  struct rn_net *n = x->net;
  int next[NTAG] = {0}; /* per tag: the first group that may still hold one to send */
  struct sent out[INFLIGHT];
  int nout = 0;
  long total = 0, posted = 0, done = 0;
  uint64_t rs = x->seed * 77 + (uint64_t)x->pair;
  for (int g = 0; g < x->groups; g++) {
    struct group p;
    plan(x->seed, x->pair, g, x->maxn, &p);
    total += p.n;
  }
  double end = rn_deadline(x->bound_s);
  while (done < total) {
    if (now_s() > end) return fail_side(x, "sends: %ld of %ld done after the bound", done, total);
    if (nout < INFLIGHT && posted < total) {
      int t = (int)(rng_next(&rs) % NTAG), idx = -1, g;
      struct group p;
      for (g = next[t]; g < x->groups; g++) {
        plan(x->seed, x->pair, g, x->maxn, &p);
        for (int i = 0; i < p.n; i++)
          if (p.tag[i] == t) idx = i;
        if (idx >= 0) break;
      }
      next[t] = g; /* groups without the tag are passed once; x->groups: none left */
      if (idx >= 0) {
        size_t sz = p.size[idx];
        void *buf = malloc(sz ? sz : 1), *mh = NULL, *req = NULL;
        if (buf == NULL) return fail_side(x, "out of memory");
        pattern_fill(buf, sz, key(x->seed, x->pair, g, t, sz));
        ncclResult_t r = rn_net_regmr(n, x->comm, buf, sz ? sz : 1, NCCL_PTR_HOST, &mh);
        if (r == ncclSuccess) r = rn_net_isend(n, x->comm, buf, sz, t, mh, &req);
        if (r != ncclSuccess)
          return fail_side(x, "isend (group %d, tag %d, %zu B): %s (%s)", g, t, sz,
                           rn_result_str(r), rn_log_last_warn());
        if (req != NULL) {
          out[nout++] = (struct sent){req, buf, mh};
          posted++;
          next[t] = g + 1;
        } else {
          (void)rn_net_deregmr(n, x->comm, mh);
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
        (void)rn_net_deregmr(n, x->comm, out[k].mh);
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
  unsigned char *buf[CHURN_MAXN];
  void *mh[CHURN_MAXN];
};

/* The group's buffers: each message, its size, nothing written past it. */
static void *check_group(struct churn_side *x, struct posted *q, const int *sizes) {
  for (int i = 0; i < q->p.n; i++) {
    size_t sz = q->p.size[i];
    if (sizes[i] != (int)sz)
      return fail_side(x, "group %d buffer %d (tag %d): size %d reported, %zu sent", q->g, i,
                       q->p.tag[i], sizes[i], sz);
    size_t off = pattern_check(q->buf[i], sz, key(x->seed, x->pair, q->g, q->p.tag[i], sz));
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

static void release(struct churn_side *x, struct posted *q) {
  for (int i = 0; i < q->p.n; i++) {
    if (q->mh[i] != NULL) (void)rn_net_deregmr(x->net, x->comm, q->mh[i]);
    free(q->buf[i]);
  }
}

void *churn_receiver(void *arg) {
  struct churn_side *x = arg;
  struct rn_net *n = x->net;
  struct posted out[WINDOW];
  int nout = 0, g = 0, done = 0;
  uint64_t rs = x->seed * 991 + (uint64_t)x->pair;
  double end = rn_deadline(x->bound_s);
  while (done < x->groups) {
    if (now_s() > end)
      return fail_side(x, "receives: %d of %d groups done after the bound", done, x->groups);
    if (nout < WINDOW && g < x->groups) {
      struct posted *q = &out[nout];
      memset(q, 0, sizeof(*q));
      plan(x->seed, x->pair, g, x->maxn, &q->p);
      q->g = g;
      void *d[CHURN_MAXN];
      size_t s[CHURN_MAXN];
      int t[CHURN_MAXN];
      for (int i = 0; i < q->p.n; i++) {
        q->buf[i] = malloc(q->p.cap[i] + GUARD);
        if (q->buf[i] == NULL) return fail_side(x, "out of memory");
        memset(q->buf[i], GUARD_BYTE, q->p.cap[i] + GUARD);
        ncclResult_t r =
            rn_net_regmr(n, x->comm, q->buf[i], q->p.cap[i] + GUARD, NCCL_PTR_HOST, &q->mh[i]);
        if (r != ncclSuccess) return fail_side(x, "regMr: %s", rn_result_str(r));
        d[i] = q->buf[i];
        s[i] = q->p.cap[i];
        t[i] = q->p.tag[i];
      }
      ncclResult_t r = rn_net_irecv(n, x->comm, q->p.n, d, s, t, q->mh, &q->req);
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
      int k = (int)(rng_next(&rs) % (uint64_t)nout), fin = 0, sizes[CHURN_MAXN];
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
