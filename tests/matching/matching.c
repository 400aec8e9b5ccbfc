/* The grouped-receive matching rule through the ncclNet API, as NCCL's
 * proxy drives a comm whose channels (tags) progress independently: a
 * send fills the first posted buffer with its tag that no earlier send
 * filled (the k-th send of tag t, the k-th buffer of tag t), isend says
 * "retry later" (*request = NULL) until that buffer's group is at the
 * head, and never fails for it.  Transport-neutral: it runs over whatever
 * RAILNET_TRANSPORT picks (TCP on loopback here, verbs on Soft-RoCE).
 * Every isend/irecv/test return code is checked; every byte and every
 * reported size is verified.
 *
 *   matching-test [--api v8|v9|v10|v11|v12] [--seed N] [--only SUBSTR]
 *                 [--rounds N] [--orders N|all]
 *
 * Cases, each with small (eager-sized) and large (streamed) messages:
 *   - recv(n=1, tag 8) then recv(n=8, tags 0-7), the sender posting tags
 *     0-8 in every order of a smaller group (recv(n=1, tag 4) then
 *     recv(n=4, tags 0-3): all 120), and for the full shape tag 8 at each
 *     of its 9 places with the others shuffled (--orders per place, or all
 *     9! orders with --orders all);
 *   - 8 channels, one tag each, on one shared comm, progressed in random
 *     order for --rounds rounds (default 10^4): receives grouped (one
 *     irecv of 8 per round) and ungrouped (one irecv per channel and
 *     message, posted in random channel order), small, large and mixed. */
#include "../common/rn_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KB ((size_t)1024)
#define NCHAN 8
#define WIN 4 /* requests in flight per channel */

enum size_class { SMALL = 0, LARGE = 1, MIXED = 2 };
static const char *const class_name[] = {"small", "large", "mixed"};

static int g_rounds = 10000;
static long g_orders = 40; /* per place of the lone tag; -1 = every order */

static double tscale(void) { return rn_timeout_scale(); }

/* Message size of (round, tag): small ones fit any eager path, large ones
 * are eager up to 4 KiB and streamed above (main sets the TCP inline limit
 * to 4 KiB unless the environment does), mixed picks per message.
 * Zero-byte messages are part of small. */
static size_t msg_size(enum size_class k, uint64_t seed, long round, int tag) {
  uint64_t s = seed ^ ((uint64_t)round * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)tag << 48);
  uint64_t r = rng_next(&s);
  if (k == MIXED) k = (r >> 40) & 1 ? LARGE : SMALL;
  if (k == SMALL) return (size_t)(r % 257); /* 0 .. 256 */
  return 2 * KB + (size_t)(r % (14 * KB));  /* 2 .. 16 KiB */
}
#define MAX_MSG (16 * KB)

static uint64_t msg_key(uint64_t seed, long round, int tag, size_t size) {
  return pattern_key(seed, (uint64_t)round * 64 + (uint64_t)tag, size);
}

struct arena {
  unsigned char *mem;
  size_t bytes;
  void *mh;
};

static int arena_open(struct rn_peer *p, void *comm, struct arena *a, size_t bytes) {
  a->bytes = bytes;
  a->mh = NULL;
  if (posix_memalign((void **)&a->mem, 4096, bytes) != 0) return peer_fail(p, "oom");
  memset(a->mem, 0, bytes);
  ncclResult_t r = rn_net_regmr(&p->net, comm, a->mem, bytes, NCCL_PTR_HOST, &a->mh);
  if (r != ncclSuccess) return peer_fail(p, "regMr(%zu B): %s", bytes, rn_result_str(r));
  return 0;
}

static int arena_close(struct rn_peer *p, void *comm, struct arena *a) {
  int rc = 0;
  if (a->mh != NULL) {
    ncclResult_t r = rn_net_deregmr(&p->net, comm, a->mh);
    if (r != ncclSuccess) rc = peer_fail(p, "deregMr: %s", rn_result_str(r));
  }
  free(a->mem);
  a->mem = NULL;
  return rc;
}

/* Check one received buffer: the size test() reported and every byte. */
static int verify(struct rn_peer *p, const unsigned char *buf, int got, long round, int tag,
                  size_t want, uint64_t seed) {
  if (got < 0 || (size_t)got != want)
    return peer_fail(p, "round %ld tag %d: test() reported %d bytes, sent %zu", round, tag, got,
                     want);
  size_t bad = pattern_check(buf, want, msg_key(seed, round, tag, want));
  if (bad != (size_t)-1)
    return peer_fail(p,
                     "round %ld tag %d (%zu B): byte %zu wrong (a message landed in the wrong "
                     "buffer?)",
                     round, tag, want, bad);
  return 0;
}

/* Post until the plugin accepts; NULL means retry later, bounded. */
static int post_recv(struct rn_peer *p, void *comm, int n, void **data, size_t *sizes, int *tags,
                     void **mhs, void **req) {
  double end = now_s() + 10 * tscale();
  *req = NULL;
  while (*req == NULL) {
    ncclResult_t r = rn_net_irecv(&p->net, comm, n, data, sizes, tags, mhs, req);
    if (r != ncclSuccess) return peer_fail(p, "irecv(n=%d): %s", n, rn_result_str(r));
    if (*req == NULL && now_s() > end) return peer_fail(p, "irecv(n=%d) NULL for 10 s", n);
  }
  return 0;
}

/* One test() of a request; *done set, sizes filled when done. */
static int test_once(struct rn_peer *p, void *req, int *done, int *sizes, const char *what) {
  ncclResult_t r = rn_net_test(&p->net, req, done, sizes);
  if (r != ncclSuccess) return peer_fail(p, "test(%s): %s", what, rn_result_str(r));
  return 0;
}

/* ---- case 1: recv(n=1, tag K) then recv(n=K, tags 0..K-1) --------------- */
struct order_cfg {
  enum size_class cls;
  int k; /* the big group's size; the lone tag is k */
};

/* Orders to run: for k=4 every permutation of 0..4; for k=8 tag 8 at each
 * place with the others shuffled (g_orders per place), or all 9! orders. */
static long order_count(int k) {
  if (k == 4 || g_orders < 0) {
    long f = 1;
    for (int i = 2; i <= k + 1; i++) f *= i;
    return f;
  }
  return (long)(k + 1) * g_orders;
}

/* The idx-th order of tags 0..k: lexicographic when every order runs,
 * else the lone tag k at place idx % (k+1) among a shuffle. */
static void order_of(int k, long idx, uint64_t seed, int *perm) {
  int n = k + 1;
  if (k == 4 || g_orders < 0) {
    int pool[16];
    for (int i = 0; i < n; i++) pool[i] = i;
    long f = 1;
    for (int i = 2; i < n; i++) f *= i;
    for (int i = 0; i < n; i++) {
      long q = idx / f;
      idx %= f;
      perm[i] = pool[q];
      for (int j = (int)q; j < n - 1 - i; j++) pool[j] = pool[j + 1];
      if (i < n - 1) f /= (n - 1 - i);
    }
    return;
  }
  uint64_t s = seed ^ (uint64_t)idx * 0x2545f4914f6cdd1dull;
  int rest[16];
  for (int i = 0; i < k; i++) rest[i] = i;
  for (int i = k - 1; i > 0; i--) {
    int j = (int)(rng_next(&s) % (uint64_t)(i + 1));
    int t = rest[i];
    rest[i] = rest[j];
    rest[j] = t;
  }
  int place = (int)(idx % n);
  for (int i = 0, r = 0; i < n; i++) perm[i] = i == place ? k : rest[r++];
}

static int orders_recv(struct rn_peer *p) {
  const struct order_cfg *cfg = p->arg;
  int k = cfg->k;
  long norders = order_count(k);
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, &lc, 30 * tscale()) != 0) return -1;
  struct arena a;
  /* two rounds in flight: 2 x (k+1) buffers */
  if (arena_open(p, comm, &a, 2 * (size_t)(k + 1) * MAX_MSG) != 0) return -1;
  int rc = 0;
  void *lone[2] = {NULL, NULL}, *group[2] = {NULL, NULL};
  long posted = 0, done_rounds = 0;
  double end = now_s() + 120 * tscale();
  while (rc == 0 && done_rounds < norders) {
    while (rc == 0 && posted < norders && posted - done_rounds < 2) {
      int slot = (int)(posted % 2);
      unsigned char *base = a.mem + (size_t)slot * (size_t)(k + 1) * MAX_MSG;
      void *d1 = base + (size_t)k * MAX_MSG;
      size_t s1 = MAX_MSG;
      int t1 = k;
      rc = post_recv(p, comm, 1, &d1, &s1, &t1, &a.mh, &lone[slot]);
      void *dk[8], *mhs[8];
      size_t sk[8];
      int tk[8];
      for (int j = 0; j < k && rc == 0; j++)
        dk[j] = base + (size_t)j * MAX_MSG, sk[j] = MAX_MSG, tk[j] = j, mhs[j] = a.mh;
      if (rc == 0) rc = post_recv(p, comm, k, dk, sk, tk, mhs, &group[slot]);
      posted++;
    }
    int slot = (int)(done_rounds % 2);
    unsigned char *base = a.mem + (size_t)slot * (size_t)(k + 1) * MAX_MSG;
    int done = 0, sizes[8];
    if (rc == 0 && lone[slot] != NULL && test_once(p, lone[slot], &done, sizes, "lone") != 0)
      rc = -1;
    if (rc == 0 && done) {
      lone[slot] = NULL;
      rc = verify(p, base + (size_t)k * MAX_MSG, sizes[0], done_rounds, k,
                  msg_size(cfg->cls, p->seed, done_rounds, k), p->seed);
    }
    done = 0;
    if (rc == 0 && group[slot] != NULL && test_once(p, group[slot], &done, sizes, "group") != 0)
      rc = -1;
    if (rc == 0 && done) {
      group[slot] = NULL;
      for (int j = 0; j < k && rc == 0; j++)
        rc = verify(p, base + (size_t)j * MAX_MSG, sizes[j], done_rounds, j,
                    msg_size(cfg->cls, p->seed, done_rounds, j), p->seed);
    }
    if (rc == 0 && lone[slot] == NULL && group[slot] == NULL) done_rounds++;
    if (rc == 0 && now_s() > end)
      rc = peer_fail(p, "receiver: %ld of %ld rounds after %.0f s", done_rounds, norders,
                     120 * tscale());
  }
  if (rc == 0) note("receiver: %ld orders of %d sends verified", norders, k + 1);
  int crc = arena_close(p, comm, &a);
  if (peer_sync(p, 30 * tscale()) != 0 && rc == 0) rc = peer_fail(p, "peer gone");
  if (peer_close(p, 1, &comm, &lc) != 0 && rc == 0) rc = -1;
  return rc ? rc : crc;
}

static int orders_send(struct rn_peer *p) {
  const struct order_cfg *cfg = p->arg;
  int k = cfg->k, n = k + 1;
  long norders = order_count(k);
  void *comm = NULL;
  if (peer_connect(p, 1, &comm, NULL, 30 * tscale()) != 0) return -1;
  struct arena a;
  /* two rounds of buffers: a round's sends may still be in flight */
  if (arena_open(p, comm, &a, 2 * (size_t)n * MAX_MSG) != 0) return -1;
  int rc = 0;
  void *inflight[2][9];
  memset(inflight, 0, sizeof(inflight));
  long nulls = 0;
  double end = now_s() + 120 * tscale();
  for (long round = 0; round < norders && rc == 0; round++) {
    int slot = (int)(round % 2);
    /* the previous use of this slot's buffers must be complete */
    for (int t = 0; t < n && rc == 0; t++) {
      if (inflight[slot][t] == NULL) continue;
      ncclResult_t r = peer_wait(p, inflight[slot][t], NULL, 30 * tscale());
      if (r != ncclSuccess) rc = p->why[0] ? -1 : peer_fail(p, "test(send): %s", rn_result_str(r));
      inflight[slot][t] = NULL;
    }
    int perm[9], pending[9], npending = n;
    order_of(k, round, p->seed, perm);
    for (int i = 0; i < n; i++) pending[i] = perm[i];
    unsigned char *base = a.mem + (size_t)slot * (size_t)n * MAX_MSG;
    for (int t = 0; t < n; t++) {
      size_t sz = msg_size(cfg->cls, p->seed, round, t);
      pattern_fill(base + (size_t)t * MAX_MSG, sz, msg_key(p->seed, round, t, sz));
    }
    /* Try the sends in this round's order; one told to retry keeps its
     * place and is tried again after the others, as NCCL's proxy does. */
    while (npending > 0 && rc == 0) {
      int kept = 0;
      for (int i = 0; i < npending && rc == 0; i++) {
        int t = pending[i];
        size_t sz = msg_size(cfg->cls, p->seed, round, t);
        void *req = NULL;
        ncclResult_t r = rn_net_isend(&p->net, comm, base + (size_t)t * MAX_MSG, sz, t, a.mh, &req);
        if (r != ncclSuccess) {
          rc = peer_fail(p, "round %ld: isend(tag %d, %zu B): %s", round, t, sz, rn_result_str(r));
        } else if (req == NULL) {
          pending[kept++] = t;
          nulls++;
        } else {
          inflight[slot][t] = req;
        }
      }
      npending = kept;
      /* progress the sends already accepted, as the proxy would */
      for (int s = 0; s < 2 && rc == 0 && npending > 0; s++)
        for (int t = 0; t < n && rc == 0; t++) {
          int done = 0;
          if (inflight[s][t] == NULL) continue;
          if (test_once(p, inflight[s][t], &done, NULL, "send") != 0) rc = -1;
          if (done) inflight[s][t] = NULL;
        }
      if (rc == 0 && npending > 0 && now_s() > end)
        rc = peer_fail(p, "round %ld: %d sends still told to retry after %.0f s", round, npending,
                       120 * tscale());
    }
  }
  for (int s = 0; s < 2 && rc == 0; s++)
    for (int t = 0; t < n && rc == 0; t++)
      if (inflight[s][t] != NULL) {
        ncclResult_t r = peer_wait(p, inflight[s][t], NULL, 30 * tscale());
        if (r != ncclSuccess)
          rc = p->why[0] ? -1 : peer_fail(p, "test(send): %s", rn_result_str(r));
      }
  if (rc == 0) note("sender: %ld orders, isend said retry %ld times", norders, nulls);
  int crc = arena_close(p, comm, &a);
  if (peer_sync(p, 30 * tscale()) != 0 && rc == 0) rc = peer_fail(p, "peer gone");
  if (peer_close(p, 1, &comm, NULL) != 0 && rc == 0) rc = -1;
  return rc ? rc : crc;
}

/* ---- case 2: 8 channels on one comm ----------------------------------- */
/* Both ends of the comm live in one process and one thread drives them,
 * as NCCL's proxy thread drives many comms: each step moves one random
 * channel of the sender and one random request of the receiver, so the
 * two sides interleave in every way without a scheduler in between. */
struct chan_cfg {
  enum size_class cls;
  int grouped;
};

struct slot {
  void *req;
  long round; /* -1 when free */
};

struct chan_rx {
  struct rn_peer *p;
  const struct chan_cfg *cfg;
  void *comm;
  struct arena a;
  uint64_t rng;
  struct slot s[NCHAN][WIN]; /* grouped: row 0 holds the groups */
  long next[NCHAN], done;    /* grouped: next[0] rounds posted; done: buffers verified */
};

struct chan_tx {
  struct rn_peer *p;
  const struct chan_cfg *cfg;
  void *comm;
  struct arena a;
  uint64_t rng;
  struct slot s[NCHAN][WIN];
  int filled[NCHAN][WIN];
  long next[NCHAN], done, nulls;
};

static unsigned char *chan_buf(struct arena *a, int c, int i) {
  return a->mem + ((size_t)c * WIN + (size_t)i) * MAX_MSG;
}

/* Receiver: post into a free slot or test a posted one, chosen at random. */
static int chan_rx_step(struct chan_rx *x) {
  struct rn_peer *p = x->p;
  const long rounds = g_rounds;
  if (x->cfg->grouped) {
    /* one irecv(n=8) per round, up to WIN rounds posted */
    int i = (int)(rng_next(&x->rng) % WIN);
    struct slot *s = &x->s[0][i];
    if (s->round == -1) {
      if (x->next[0] >= rounds) return 0;
      void *d[NCHAN], *mhs[NCHAN];
      size_t sz[NCHAN];
      int tags[NCHAN];
      for (int c = 0; c < NCHAN; c++)
        d[c] = chan_buf(&x->a, c, i), sz[c] = MAX_MSG, tags[c] = c, mhs[c] = x->a.mh;
      ncclResult_t r = rn_net_irecv(&p->net, x->comm, NCHAN, d, sz, tags, mhs, &s->req);
      if (r != ncclSuccess)
        return peer_fail(p, "irecv(n=8) round %ld: %s", x->next[0], rn_result_str(r));
      if (s->req != NULL) s->round = x->next[0]++;
      return 0;
    }
    int done = 0, got[NCHAN];
    if (test_once(p, s->req, &done, got, "irecv(n=8)") != 0) return -1;
    if (!done) return 0;
    for (int c = 0; c < NCHAN; c++)
      if (verify(p, chan_buf(&x->a, c, i), got[c], s->round, c,
                 msg_size(x->cfg->cls, p->seed, s->round, c), p->seed) != 0)
        return -1;
    s->round = -1;
    x->done += NCHAN;
    return 0;
  }
  /* each channel posts its own irecv(n=1) per message, channels picked at
   * random, so receives of different tags interleave in any order */
  int c = (int)(rng_next(&x->rng) % NCHAN);
  int i = (int)(rng_next(&x->rng) % WIN);
  struct slot *s = &x->s[c][i];
  if (s->round == -1) {
    if (x->next[c] >= rounds) return 0;
    void *d = chan_buf(&x->a, c, i);
    size_t sz = MAX_MSG;
    int tag = c;
    ncclResult_t r = rn_net_irecv(&p->net, x->comm, 1, &d, &sz, &tag, &x->a.mh, &s->req);
    if (r != ncclSuccess)
      return peer_fail(p, "irecv(tag %d) round %ld: %s", c, x->next[c], rn_result_str(r));
    if (s->req != NULL) s->round = x->next[c]++;
    return 0;
  }
  int done = 0, got = -1;
  if (test_once(p, s->req, &done, &got, "irecv(n=1)") != 0) return -1;
  if (!done) return 0;
  if (verify(p, chan_buf(&x->a, c, i), got, s->round, c,
             msg_size(x->cfg->cls, p->seed, s->round, c), p->seed) != 0)
    return -1;
  s->round = -1;
  x->done++;
  return 0;
}

/* Sender: a random channel sends its next round (round r uses slot
 * r % WIN, so a channel's sends go in order) and tests a random one of
 * its requests. */
static int chan_tx_step(struct chan_tx *x) {
  struct rn_peer *p = x->p;
  const long rounds = g_rounds;
  int c = (int)(rng_next(&x->rng) % NCHAN);
  int i = (int)(x->next[c] % WIN);
  struct slot *s = &x->s[c][i];
  if (x->next[c] < rounds && s->round == -1) {
    unsigned char *buf = chan_buf(&x->a, c, i);
    size_t sz = msg_size(x->cfg->cls, p->seed, x->next[c], c);
    if (!x->filled[c][i])
      pattern_fill(buf, sz, msg_key(p->seed, x->next[c], c, sz)), x->filled[c][i] = 1;
    ncclResult_t r = rn_net_isend(&p->net, x->comm, buf, sz, c, x->a.mh, &s->req);
    if (r != ncclSuccess)
      return peer_fail(p, "isend(tag %d, round %ld, %zu B): %s", c, x->next[c], sz,
                       rn_result_str(r));
    if (s->req == NULL)
      x->nulls++;
    else
      s->round = x->next[c]++;
  }
  s = &x->s[c][rng_next(&x->rng) % WIN];
  if (s->round == -1) return 0;
  int done = 0;
  if (test_once(p, s->req, &done, NULL, "isend") != 0) return -1;
  if (done) s->round = -1, x->filled[c][s - x->s[c]] = 0, x->done++;
  return 0;
}

static int chan_case(struct rn_peer *p) {
  const struct chan_cfg *cfg = p->arg;
  const long total = (long)g_rounds * NCHAN;
  void *lc = NULL, *sc = NULL, *rcomm = NULL;
  if (peer_loopback(p, &lc, &sc, &rcomm, 30 * tscale()) != 0) return -1;
  static struct chan_rx rx;
  static struct chan_tx tx;
  memset(&rx, 0, sizeof rx);
  memset(&tx, 0, sizeof tx);
  rx = (struct chan_rx){.p = p, .cfg = cfg, .comm = rcomm, .rng = p->seed ^ 0xabcdef};
  tx = (struct chan_tx){.p = p, .cfg = cfg, .comm = sc, .rng = p->seed ^ 0x123457};
  for (int c = 0; c < NCHAN; c++)
    for (int i = 0; i < WIN; i++) rx.s[c][i].round = tx.s[c][i].round = -1;
  int rc = arena_open(p, rcomm, &rx.a, (size_t)NCHAN * WIN * MAX_MSG);
  if (rc == 0) rc = arena_open(p, sc, &tx.a, (size_t)NCHAN * WIN * MAX_MSG);
  double t0 = now_s(), end = t0 + 300 * tscale();
  while (rc == 0 && (rx.done < total || tx.done < total)) {
    if (rx.done < total) rc = chan_rx_step(&rx);
    if (rc == 0 && tx.done < total) rc = chan_tx_step(&tx);
    if (rc == 0 && now_s() > end)
      rc = peer_fail(p, "after %.0f s: receiver verified %ld of %ld messages, sender %ld",
                     300 * tscale(), rx.done, total, tx.done);
  }
  if (rc == 0)
    note("%ld messages verified in %.2f s; isend said retry %ld times", total, now_s() - t0,
         tx.nulls);
  if (rx.a.mem != NULL && arena_close(p, rcomm, &rx.a) != 0 && rc == 0) rc = -1;
  if (tx.a.mem != NULL && arena_close(p, sc, &tx.a) != 0 && rc == 0) rc = -1;
  ncclResult_t r;
  if ((r = rn_net_close_send(&p->net, sc)) != ncclSuccess && rc == 0)
    rc = peer_fail(p, "closeSend: %s", rn_result_str(r));
  if ((r = rn_net_close_recv(&p->net, rcomm)) != ncclSuccess && rc == 0)
    rc = peer_fail(p, "closeRecv: %s", rn_result_str(r));
  if ((r = rn_net_close_listen(&p->net, lc)) != ncclSuccess && rc == 0)
    rc = peer_fail(p, "closeListen: %s", rn_result_str(r));
  return rc;
}

/* ---- driver ----------------------------------------------------------- */
struct mcase {
  char name[160];
  rn_peer_fn recv, send;
  void *cfg;
  int timeout_s;
};

int main(int argc, char **argv) {
  int version = 8;
  const char *only = NULL;
  uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--api") && i + 1 < argc)
      version = rn_parse_version(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      g_rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--orders") && i + 1 < argc) {
      i++;
      g_orders = !strcmp(argv[i], "all") ? -1 : atol(argv[i]);
    } else {
      fprintf(stderr,
              "usage: matching-test [--api vN] [--seed N] [--only SUBSTR] [--rounds N] "
              "[--orders N|all]\n");
      return 2;
    }
  }
  if (version == 0 || g_rounds < 1) return 2;
  rn_default_env();
  setenv("RAILNET_SOCKET_INLINE", "4096", 0); /* large: both eager and streamed (msg_size) */

  static struct order_cfg oc[2][2];
  static struct chan_cfg cc[2][3];
  struct mcase cases[16];
  int ncases = 0;
  for (int k = 0; k < 2; k++)
    for (int cls = 0; cls < 2; cls++) {
      oc[k][cls] = (struct order_cfg){.cls = (enum size_class)cls, .k = k ? 8 : 4};
      struct mcase *m = &cases[ncases++];
      int kk = oc[k][cls].k;
      if (kk == 4 || g_orders < 0)
        snprintf(m->name, sizeof m->name,
                 "recv(n=1, tag %d) then recv(n=%d, tags 0-%d): every one of the %ld send orders, "
                 "%s",
                 kk, kk, kk - 1, order_count(kk), class_name[cls]);
      else
        snprintf(m->name, sizeof m->name,
                 "recv(n=1, tag %d) then recv(n=%d, tags 0-%d): tag %d at each of %d places, %ld "
                 "orders, %s",
                 kk, kk, kk - 1, kk, kk + 1, order_count(kk), class_name[cls]);
      m->recv = orders_recv;
      m->send = orders_send;
      m->cfg = &oc[k][cls];
      m->timeout_s = 150;
    }
  for (int g = 0; g < 2; g++)
    for (int cls = 0; cls < 3; cls++) {
      cc[g][cls] = (struct chan_cfg){.cls = (enum size_class)cls, .grouped = !g};
      struct mcase *m = &cases[ncases++];
      snprintf(m->name, sizeof m->name,
               "8 channels on one comm in random order, %d rounds, %s receives, %s messages",
               g_rounds, g ? "ungrouped" : "grouped", class_name[cls]);
      m->recv = chan_case;
      m->send = NULL;
      m->cfg = &cc[g][cls];
      m->timeout_s = 320;
    }
  int plan = 0;
  for (int c = 0; c < ncases; c++) plan += only == NULL || strstr(cases[c].name, only) != NULL;
  tap_plan(plan);
  note("plugin %s, seed %llu (rerun: --seed %llu), transport %s, v%d", rn_plugin_path(),
       (unsigned long long)seed, (unsigned long long)seed,
       getenv("RAILNET_TRANSPORT") ? getenv("RAILNET_TRANSPORT") : "auto", version);
  for (int c = 0; c < ncases; c++) {
    if (only != NULL && strstr(cases[c].name, only) == NULL) continue;
    struct rn_pair_opts o = {.version = version,
                             .timeout_s = (int)(cases[c].timeout_s * tscale()),
                             .init = 1,
                             .seed = seed + (uint64_t)c * 1000003u,
                             .arg = cases[c].cfg};
    char why[1024];
    double t0 = now_s();
    int rc = cases[c].send != NULL ? rn_run_pair(cases[c].recv, cases[c].send, &o, why, sizeof why)
                                   : rn_run_single(cases[c].recv, &o, why, sizeof why);
    if (!tap_result(rc == 0, "%s", cases[c].name))
      diag("  %s (seed %llu)", why, (unsigned long long)o.seed);
    else
      note("  %.2f s", now_s() - t0);
  }
  return tap_failed() ? 1 : 0;
}
