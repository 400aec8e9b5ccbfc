/* The proxy model: drives a transport through isend/irecv/test the way
 * NCCL's proxy progress thread does for p2p over the network
 * (src/transport/net.cc sendProxyProgress / recvProxyProgress and
 * src/proxy.cc progressOps, restated):
 *
 *   sender, per sub of the active op on a channel, one action per pass:
 *     isend the next step if fewer than `depth` are outstanding (a NULL
 *     request is retried on a later pass), otherwise test() the oldest;
 *   receiver, per group of subs sharing a comm: post one irecv (n = subs,
 *     one buffer of a full slot each, tags = the peers' ranks) if every sub
 *     has room; if anything was posted this pass, return; otherwise test()
 *     the oldest request of each group, check the sizes it reports;
 *   an op on a channel finishes when all its steps are done on this side;
 *     only then does the channel's next op start ("nextPeer");
 *   a pass over all channels without progress yields the CPU.
 *
 * Ops are released by gates (kv_model.c): the receiver opens gate g when
 * every op with a lower gate has completed and tells the sender over the
 * side channel; the sender starts an op only once its gate is open. */
#include "kv.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define KV_GUARD 64
#define KV_GUARD_BYTE 0xA5
#define KV_OPTIONAL_COMPLETION ((void *)0x1) /* NCCL_NET_OPTIONAL_RECV_COMPLETION */

/* A connection as one sub sees it.  Owner: its chain. */
struct kv_conn {
  void *comm; /* possibly shared with other chains (PXN) */
  void *mh;   /* the chain's pool registered on comm */
  int tag;    /* NCCL: the sender's rank on both sides */
  int pair;   /* sender * receivers + receiver */
};

/* One peer's steps of the active op on a channel (NCCL: ncclProxySubArgs) */
struct kv_sub {
  int posted; /* sender: transmitted; receiver: posted */
  int done;
  int filled; /* sender: the pattern of step `posted` is in its slot */
  void *req[KV_NCCL_STEPS];
};

/* A channel of a local rank (NCCL: one proxyAppend list): its ops run one
 * after the other.  Owner: the thread that polls it. */
struct kv_chain {
  int lrank, part;
  int nsubs, depth;
  int gsize[KV_MAX_SUBS]; /* receiver: size of the group starting at sub i */
  struct kv_conn conn[KV_MAX_SUBS];
  struct kv_sub subs[KV_MAX_SUBS];
  unsigned char *pool; /* NCCL's shared slots for this rank and channel */
  size_t slot_bytes, pool_bytes;
  long op; /* current op (per pair); == nops when finished */
  int started;
};

struct kv_engine;

struct kv_thread {
  struct kv_engine *e;
  int idx;
  struct kv_chain *chains;
  int nchains, left;
  struct kv_side_stats st;
  double t_begin, t_end;
  int rc;
  char why[256];
  pthread_t tid;
};

struct kv_engine {
  const struct kv_case *c;
  const struct kv_nccl *m;
  struct kv_net *net;
  const struct kv_run_opts *o;
  int side, is_send;
  int S, R, npart;
  long nops, ngates;
  int shared;
  int ncomms;
  void **comms;
  struct kv_chain *chains;
  int nchains;
  struct kv_thread th[KV_MAX_THREADS];
  int nth;
  /* gates */
  _Atomic long released;
  _Atomic long *gate_pending; /* receiver: args outstanding per gate [1..G] */
  double *gate_open;          /* receiver: when gate g opened */
  _Atomic long *req_pending;  /* receiver: args outstanding per request */
  double *req_end;
  pthread_mutex_t mu;
  unsigned char gbuf[8]; /* sender: partial gate value */
  int glen;
  _Atomic int failed;
  double deadline;
};

/* ---- gates -------------------------------------------------------------- */
static long request_gate(const struct kv_case *c, long r) {
  long b = r / c->concurrency;
  return kv_op_gate(c, b * (long)c->concurrency * c->nops);
}

/* receiver: open every gate whose lower gates are complete; tell the sender */
static int gates_advance(struct kv_engine *e) {
  int rc = 0;
  pthread_mutex_lock(&e->mu);
  long rel = atomic_load(&e->released), was = rel;
  while (rel <= e->ngates && atomic_load(&e->gate_pending[rel]) == 0) {
    rel++;
    if (rel <= e->ngates) e->gate_open[rel] = now_s();
  }
  if (rel != was) {
    atomic_store(&e->released, rel);
    int64_t v = rel;
    if (kv_side_write(e->side, &v, sizeof v) != 0) rc = -1;
  }
  pthread_mutex_unlock(&e->mu);
  return rc;
}

/* sender: read every gate value the receiver has sent so far; wait up to
 * `wait_s` for one.  -1 when the side channel is gone. */
static int gates_poll(struct kv_engine *e, double wait_s) {
  double end = now_s() + wait_s;
  for (;;) {
    ssize_t n = recv(e->side, e->gbuf + e->glen, sizeof e->gbuf - (size_t)e->glen, MSG_DONTWAIT);
    if (n > 0) {
      e->glen += (int)n;
      if (e->glen == (int)sizeof e->gbuf) {
        int64_t v;
        memcpy(&v, e->gbuf, sizeof v);
        e->glen = 0;
        if (v > atomic_load(&e->released)) atomic_store(&e->released, v);
      }
      continue;
    }
    if (n == 0) return -1;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    if (now_s() >= end) return 0;
    sleep_us(20);
  }
}

/* ---- one op on one channel ------------------------------------------------ */
static int th_fail(struct kv_thread *t, const char *fmt, ...) RN_ATTR_PRINTF(2, 3);
static int th_fail(struct kv_thread *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->why, sizeof t->why, fmt, ap);
  va_end(ap);
  t->rc = -1;
  atomic_store(&t->e->failed, 1);
  return -1;
}

static unsigned char *slot_of(const struct kv_chain *ch, int step, int s) {
  int slot = (step % ch->depth) * ch->nsubs + s;
  return ch->pool + (size_t)slot * ch->slot_bytes;
}

static inline double ns_since(double t0) { return (now_s() - t0) * 1e9; }

static int send_progress(struct kv_thread *t, struct kv_chain *ch, int *progress) {
  struct kv_engine *e = t->e;
  const struct kv_part *p = &e->c->parts[ch->part];
  struct kv_net *n = e->net;
  int all_done = 1;
  for (int s = 0; s < ch->nsubs; s++) {
    struct kv_sub *sub = &ch->subs[s];
    struct kv_conn *cn = &ch->conn[s];
    if (sub->done == p->nsteps) continue;
    all_done = 0;
    if (sub->posted < p->nsteps && sub->posted < sub->done + ch->depth) {
      size_t bytes = kv_step_bytes(p, sub->posted);
      unsigned char *buf = slot_of(ch, sub->posted, s);
      if (e->o->verify && !sub->filled) {
        pattern_fill(buf, bytes,
                     kv_msg_key(e->o->seed, cn->pair, ch->op, p->channel, sub->posted, bytes));
        sub->filled = 1;
      }
      void *req = NULL;
      double t0 = now_s();
      ncclResult_t r = n->ops->isend(n, cn->comm, buf, bytes, cn->tag, cn->mh, &req);
      t->st.calls.ns_isend += ns_since(t0);
      t->st.calls.isend++;
      if (r != ncclSuccess)
        return th_fail(t, "isend(op %ld, channel %d, step %d, %zu B, tag %d): %s", ch->op,
                       p->channel, sub->posted, bytes, cn->tag, rn_result_str(r));
      if (req != NULL) {
        sub->req[sub->posted % KV_NCCL_STEPS] = req;
        sub->posted++;
        sub->filled = 0;
        t->st.msgs++;
        t->st.wire_bytes += bytes;
        if (sub->posted - sub->done > t->st.max_inflight)
          t->st.max_inflight = sub->posted - sub->done;
        *progress = 1;
        continue;
      }
      t->st.calls.isend_null++;
    }
    if (sub->done < sub->posted) {
      int done = 0, size = -1;
      double t0 = now_s();
      ncclResult_t r = n->ops->test(n, sub->req[sub->done % KV_NCCL_STEPS], &done, &size);
      double ns = ns_since(t0);
      t->st.calls.test++;
      if (r != ncclSuccess)
        return th_fail(t, "test(send op %ld, channel %d, step %d): %s", ch->op, p->channel,
                       sub->done, rn_result_str(r));
      if (done) {
        t->st.calls.test_done++;
        t->st.calls.ns_test_done += ns;
        sub->req[sub->done % KV_NCCL_STEPS] = NULL;
        sub->done++;
        *progress = 1;
      } else {
        t->st.calls.ns_test_pending += ns;
      }
    }
  }
  return all_done;
}

static void guard_set(unsigned char *buf, size_t bytes, size_t post) {
  size_t g = bytes + KV_GUARD < post ? bytes + KV_GUARD : post;
  memset(buf + bytes, KV_GUARD_BYTE, g - bytes);
  memset(buf + post, KV_GUARD_BYTE, KV_GUARD);
}

static int guard_check(const unsigned char *buf, size_t bytes, size_t post, size_t *bad) {
  size_t g = bytes + KV_GUARD < post ? bytes + KV_GUARD : post;
  for (size_t i = bytes; i < g; i++)
    if (buf[i] != KV_GUARD_BYTE) return *bad = i, -1;
  for (size_t i = post; i < post + KV_GUARD; i++)
    if (buf[i] != KV_GUARD_BYTE) return *bad = i, -1;
  return 0;
}

static int recv_progress(struct kv_thread *t, struct kv_chain *ch, int *progress) {
  struct kv_engine *e = t->e;
  const struct kv_part *p = &e->c->parts[ch->part];
  struct kv_net *n = e->net;
  int posted_any = 0;
  /* post: one grouped irecv per group */
  for (int g = 0; g < ch->nsubs; g += ch->gsize[g]) {
    void *ptrs[KV_MAX_SUBS], *mhs[KV_MAX_SUBS];
    size_t sizes[KV_MAX_SUBS];
    int tags[KV_MAX_SUBS], cnt = 0;
    for (int s = g; s < g + ch->gsize[g]; s++) {
      struct kv_sub *sub = &ch->subs[s];
      if (sub->posted >= p->nsteps) continue;
      if (sub->posted >= sub->done + ch->depth) {
        cnt = 0;
        break;
      }
      unsigned char *buf = slot_of(ch, sub->posted, s);
      if (e->o->verify) guard_set(buf, kv_step_bytes(p, sub->posted), p->post);
      ptrs[cnt] = buf;
      sizes[cnt] = p->post;
      tags[cnt] = ch->conn[s].tag;
      mhs[cnt] = ch->conn[s].mh;
      cnt++;
    }
    if (cnt == 0) continue;
    if (cnt != ch->gsize[g])
      return th_fail(t, "op %ld channel %d: subs of one group out of step", ch->op, p->channel);
    /* NCCL lets the plugin skip the completion of a lone LL receive (v9+) */
    void *req = (p->ll && cnt == 1 && e->o->version >= 9) ? KV_OPTIONAL_COMPLETION : NULL;
    double t0 = now_s();
    ncclResult_t r = n->ops->irecv(n, ch->conn[g].comm, cnt, ptrs, sizes, tags, mhs, &req);
    t->st.calls.ns_irecv += ns_since(t0);
    t->st.calls.irecv++;
    if (r != ncclSuccess)
      return th_fail(t, "irecv(op %ld, channel %d, step %d, n=%d, %zu B): %s", ch->op, p->channel,
                     ch->subs[g].posted, cnt, p->post, rn_result_str(r));
    if (req == KV_OPTIONAL_COMPLETION)
      return th_fail(t,
                     "irecv(op %ld, channel %d): returned NCCL's optional-completion marker as "
                     "the request",
                     ch->op, p->channel);
    if (req == NULL) {
      t->st.calls.irecv_null++;
      continue;
    }
    if (cnt > 1) t->st.grouped_irecvs++;
    struct kv_sub *lead = &ch->subs[g];
    lead->req[lead->posted % KV_NCCL_STEPS] = req;
    for (int s = g; s < g + ch->gsize[g]; s++) ch->subs[s].posted++;
    if (lead->posted - lead->done > t->st.max_inflight)
      t->st.max_inflight = lead->posted - lead->done;
    posted_any = 1;
  }
  if (posted_any) {
    *progress = 1;
    return 0;
  }
  /* test the oldest request of each group */
  int all_done = 1;
  for (int g = 0; g < ch->nsubs; g += ch->gsize[g]) {
    struct kv_sub *lead = &ch->subs[g];
    if (lead->done < p->nsteps) all_done = 0;
    if (lead->done >= lead->posted) continue;
    int done = 0, got[KV_MAX_SUBS];
    for (int i = 0; i < KV_MAX_SUBS; i++) got[i] = -1;
    double t0 = now_s();
    ncclResult_t r = n->ops->test(n, lead->req[lead->done % KV_NCCL_STEPS], &done, got);
    double ns = ns_since(t0);
    t->st.calls.test++;
    if (r != ncclSuccess)
      return th_fail(t, "test(recv op %ld, channel %d, step %d): %s", ch->op, p->channel,
                     lead->done, rn_result_str(r));
    if (!done) {
      t->st.calls.ns_test_pending += ns;
      continue;
    }
    t->st.calls.test_done++;
    t->st.calls.ns_test_done += ns;
    int step = lead->done;
    size_t bytes = kv_step_bytes(p, step);
    for (int s = g; s < g + ch->gsize[g]; s++) {
      struct kv_conn *cn = &ch->conn[s];
      if (got[s - g] < 0 || (size_t)got[s - g] != bytes)
        return th_fail(t,
                       "op %ld channel %d step %d from rank %d: test() reported %d bytes, %zu "
                       "were sent",
                       ch->op, p->channel, step, cn->tag, got[s - g], bytes);
      if (e->o->verify) {
        unsigned char *buf = slot_of(ch, step, s);
        size_t bad = pattern_check(
            buf, bytes, kv_msg_key(e->o->seed, cn->pair, ch->op, p->channel, step, bytes));
        if (bad != (size_t)-1)
          return th_fail(t,
                         "op %ld channel %d step %d from rank %d (%zu B): byte %zu differs "
                         "(0x%02x)",
                         ch->op, p->channel, step, cn->tag, bytes, bad, buf[bad]);
        if (guard_check(buf, bytes, p->post, &bad) != 0)
          return th_fail(t,
                         "op %ld channel %d step %d: a %zu B message wrote byte %zu of a %zu B "
                         "buffer",
                         ch->op, p->channel, step, bytes, bad, p->post);
        t->st.verified += bytes;
      }
      t->st.msgs++;
      t->st.wire_bytes += bytes;
      ch->subs[s].req[step % KV_NCCL_STEPS] = NULL;
      ch->subs[s].done++;
    }
    *progress = 1;
    if (lead->done < p->nsteps) all_done = 0;
  }
  return all_done;
}

/* receiver: an op finished on one channel of one rank */
static int recv_op_done(struct kv_thread *t, long op) {
  struct kv_engine *e = t->e;
  long r = kv_op_request(e->c, op), g = kv_op_gate(e->c, op);
  if (atomic_fetch_sub(&e->req_pending[r], 1) == 1) e->req_end[r] = now_s();
  if (atomic_fetch_sub(&e->gate_pending[g], 1) == 1 && gates_advance(e) != 0)
    return th_fail(t, "side channel: cannot release gate after op %ld", op);
  return 0;
}

static void chain_describe(const struct kv_engine *e, const struct kv_chain *ch, char *buf,
                           size_t len) {
  int off = snprintf(buf, len, "rank %d channel %d op %ld/%ld%s:", ch->lrank,
                     e->c->parts[ch->part].channel, ch->op, e->nops, ch->started ? "" : " (gated)");
  for (int s = 0; s < ch->nsubs && off > 0 && (size_t)off < len; s++)
    off += snprintf(buf + off, len - (size_t)off, " [%d/%d of %d]", ch->subs[s].done,
                    ch->subs[s].posted, e->c->parts[ch->part].nsteps);
}

static void *thread_main(void *arg) {
  struct kv_thread *t = arg;
  struct kv_engine *e = t->e;
  double cpu0 = kv_thread_cpu_s();
  t->t_begin = 0;
  for (long pass = 1; t->left > 0; pass++) {
    int progress = 0, gated = 0;
    if (atomic_load(&e->failed)) return NULL;
    long released = atomic_load(&e->released);
    for (int i = 0; i < t->nchains; i++) {
      struct kv_chain *ch = &t->chains[i];
      if (ch->op >= e->nops) continue;
      if (!ch->started) {
        if (kv_op_gate(e->c, ch->op) > released) {
          gated = 1;
          continue;
        }
        ch->started = 1;
        if (t->t_begin == 0) t->t_begin = now_s();
      }
      int fin = e->is_send ? send_progress(t, ch, &progress) : recv_progress(t, ch, &progress);
      if (fin < 0) return NULL;
      if (fin == 0) continue;
      /* the op is done on this channel: the next one starts on a later pass */
      if (!e->is_send && recv_op_done(t, ch->op) != 0) return NULL;
      ch->op++;
      ch->started = 0;
      memset(ch->subs, 0, sizeof ch->subs);
      progress = 1;
      if (ch->op == e->nops) {
        t->left--;
        t->t_end = now_s();
      }
    }
    if (t->idx == 0 && e->o->hook != NULL) {
      int hp = 0;
      if (e->o->hook(e->o->hook_arg, &hp) != 0) {
        th_fail(t, "small-message stream failed");
        return NULL;
      }
      progress |= hp;
    }
    if (gated && e->is_send && gates_poll(e, 0) != 0) {
      th_fail(t, "side channel closed: the receiver is gone");
      return NULL;
    }
    t->st.passes++;
    if (!progress) {
      t->st.idle_passes++;
      if (e->o->yield) sched_yield();
    }
    if ((pass & 1023) == 0 && now_s() > e->deadline) {
      char d[512] = "";
      for (int i = 0; i < t->nchains; i++)
        if (t->chains[i].op < e->nops) {
          chain_describe(e, &t->chains[i], d, sizeof d);
          break;
        }
      th_fail(t, "%s side not done after %.0f s: %s", e->is_send ? "send" : "receive",
              e->o->timeout_s, d);
      return NULL;
    }
  }
  t->st.proxy_cpu_s = kv_thread_cpu_s() - cpu0;
  return NULL;
}

/* ---- setup -------------------------------------------------------------- */
static int comm_index(const struct kv_engine *e, int s, int r, int part) {
  return e->shared ? part : (s * e->R + r) * e->npart + part;
}

static int build_chains(struct kv_engine *e, char *why, size_t whylen) {
  int locals = e->is_send ? e->S : e->R, peers = e->is_send ? e->R : e->S;
  e->nchains = locals * e->npart;
  e->chains = calloc((size_t)e->nchains, sizeof *e->chains);
  if (e->chains == NULL) return snprintf(why, whylen, "out of memory"), -1;
  for (int l = 0; l < locals; l++)
    for (int pi = 0; pi < e->npart; pi++) {
      struct kv_chain *ch = &e->chains[l * e->npart + pi];
      const struct kv_part *p = &e->c->parts[pi];
      ch->lrank = l;
      ch->part = pi;
      ch->nsubs = peers;
      ch->depth = kv_depth(e->m, peers);
      for (int j = 0; j < peers; j++) {
        int s = e->is_send ? l : j, r = e->is_send ? j : l;
        ch->conn[j].comm = e->comms[comm_index(e, s, r, pi)];
        ch->conn[j].tag = s;
        ch->conn[j].pair = s * e->R + r;
      }
      /* receiver groups: subs sharing a comm, up to maxRecvs */
      for (int j = 0; j < peers;) {
        int k = 1;
        while (j + k < peers && k < e->net->max_recvs && ch->conn[j + k].comm == ch->conn[j].comm)
          k++;
        if (e->is_send) k = 1;
        ch->gsize[j] = k;
        j += k;
      }
      size_t need = p->post > p->step ? p->post : p->step;
      ch->slot_bytes = ((need + 63) & ~(size_t)63) + KV_GUARD;
      ch->pool_bytes = ch->slot_bytes * (size_t)(ch->depth * ch->nsubs);
      if (posix_memalign((void **)&ch->pool, 4096, ch->pool_bytes) != 0)
        return snprintf(why, whylen, "cannot allocate %zu bytes", ch->pool_bytes), -1;
      memset(ch->pool, 0, ch->pool_bytes);
      /* one registration per distinct comm of this pool */
      for (int j = 0; j < peers; j++) {
        int seen = -1;
        for (int k = 0; k < j; k++)
          if (ch->conn[k].comm == ch->conn[j].comm) seen = k;
        if (seen >= 0) {
          ch->conn[j].mh = ch->conn[seen].mh;
          continue;
        }
        ncclResult_t r =
            e->net->ops->regmr(e->net, ch->conn[j].comm, ch->pool, ch->pool_bytes, &ch->conn[j].mh);
        if (r != ncclSuccess)
          return snprintf(why, whylen, "regMr(%zu B): %s", ch->pool_bytes, rn_result_str(r)), -1;
      }
    }
  return 0;
}

static void free_chains(struct kv_engine *e) {
  if (e->chains == NULL) return;
  for (int i = 0; i < e->nchains; i++) {
    struct kv_chain *ch = &e->chains[i];
    for (int j = 0; j < ch->nsubs; j++) {
      int seen = 0;
      for (int k = 0; k < j; k++) seen |= ch->conn[k].comm == ch->conn[j].comm;
      if (!seen && ch->conn[j].mh != NULL)
        e->net->ops->deregmr(e->net, ch->conn[j].comm, ch->conn[j].mh);
    }
    free(ch->pool);
  }
  free(e->chains);
  e->chains = NULL;
}

static int setup_gates(struct kv_engine *e, char *why, size_t whylen) {
  e->ngates = kv_case_gates(e->c);
  atomic_store(&e->released, 0);
  if (e->is_send) return 0;
  long nreq = kv_case_requests(e->c);
  e->gate_pending = calloc((size_t)e->ngates + 2, sizeof *e->gate_pending);
  e->gate_open = calloc((size_t)e->ngates + 2, sizeof *e->gate_open);
  e->req_pending = calloc((size_t)nreq, sizeof *e->req_pending);
  e->req_end = calloc((size_t)nreq, sizeof *e->req_end);
  if (!e->gate_pending || !e->gate_open || !e->req_pending || !e->req_end)
    return snprintf(why, whylen, "out of memory"), -1;
  long per_op = (long)e->R * e->npart; /* receiver args per op */
  for (long o = 0; o < e->nops; o++) {
    atomic_fetch_add(&e->gate_pending[kv_op_gate(e->c, o)], per_op);
    atomic_fetch_add(&e->req_pending[kv_op_request(e->c, o)], per_op);
  }
  return 0;
}

static void free_gates(struct kv_engine *e) {
  free(e->gate_pending);
  free(e->gate_open);
  free(e->req_pending);
  free(e->req_end);
}

static void merge_stats(struct kv_engine *e, struct kv_side_stats *st) {
  memset(st, 0, sizeof *st);
  double b = 0, end = 0;
  for (int i = 0; i < e->nth; i++) {
    struct kv_side_stats *x = &e->th[i].st;
    st->proxy_cpu_s += x->proxy_cpu_s;
    st->msgs += x->msgs;
    st->wire_bytes += x->wire_bytes;
    st->verified += x->verified;
    st->passes += x->passes;
    st->idle_passes += x->idle_passes;
    st->grouped_irecvs += x->grouped_irecvs;
    if (x->max_inflight > st->max_inflight) st->max_inflight = x->max_inflight;
    kv_calls_add(&st->calls, &x->calls);
    if (e->th[i].t_begin > 0 && (b == 0 || e->th[i].t_begin < b)) b = e->th[i].t_begin;
    if (e->th[i].t_end > end) end = e->th[i].t_end;
  }
  st->wall_s = end > b ? end - b : 0;
}

int kv_run_case(int side, int is_send, const struct kv_case *c, const struct kv_nccl *m,
                struct kv_net *net, const struct kv_run_opts *o, struct kv_result *res) {
  struct kv_engine e;
  memset(&e, 0, sizeof e);
  e.c = c;
  e.m = m;
  e.net = net;
  e.o = o;
  e.side = side;
  e.is_send = is_send;
  e.S = c->senders;
  e.R = c->receivers;
  e.npart = c->nparts;
  e.nops = kv_case_ops(c);
  pthread_mutex_init(&e.mu, NULL);
  char why[256] = "";
  int rc = -1;
  if (res != NULL) {
    memset(res, 0, sizeof *res);
  }
  /* PXN: the sender ranks reach the NIC through one proxy, and with
   * maxRecvs > 1 NCCL shares one comm per channel among them (tag = rank).
   * maxRecvs is the receiver's: both sides learn it from the case. */
  {
    int32_t mine = net->max_recvs, theirs = 0;
    if (kv_side_write(side, &mine, sizeof mine) != 0 ||
        kv_side_read(side, &theirs, sizeof theirs, 60) != 0) {
      snprintf(why, sizeof why, "side channel lost before the case");
      goto out;
    }
    int recv_max = is_send ? theirs : mine;
    e.shared = e.S > 1 && e.R == 1 && m->shared_comms && recv_max > 1;
  }
  e.ncomms = e.shared ? e.npart : e.S * e.R * e.npart;
  e.comms = calloc((size_t)e.ncomms, sizeof(void *));
  if (e.comms == NULL) goto out;
  if (kv_connect_comms(side, net, !is_send, e.ncomms, e.comms, 60, why, sizeof why) != 0) goto out;
  /* the groups use the receiver's maxRecvs; on the sender nothing groups */
  if (build_chains(&e, why, sizeof why) != 0 || setup_gates(&e, why, sizeof why) != 0) goto out;
  /* threads: one proxy for the sender (PXN), one per receiving rank */
  e.nth = is_send ? 1 : e.R;
  int per = e.nchains / e.nth;
  for (int i = 0; i < e.nth; i++) {
    e.th[i].e = &e;
    e.th[i].idx = i;
    e.th[i].chains = e.chains + i * per;
    e.th[i].nchains = per;
    e.th[i].left = per;
    for (int k = 0; k < per; k++) e.th[i].chains[k].op = 0;
  }
  if (kv_side_sync(side, 60) != 0) {
    snprintf(why, sizeof why, "side channel: barrier before the run failed");
    goto out;
  }
  double pcpu0 = kv_proc_cpu_s();
  e.deadline = now_s() + o->timeout_s;
  /* the receiver opens gate 1 (no op has a lower gate) and tells the sender */
  if (!is_send && gates_advance(&e) != 0) {
    snprintf(why, sizeof why, "side channel: cannot open the first gate");
    goto out;
  }
  if (o->bulk_state) atomic_store(o->bulk_state, 1);
  for (int i = 0; i < e.nth; i++)
    if (pthread_create(&e.th[i].tid, NULL, thread_main, &e.th[i]) != 0) {
      snprintf(why, sizeof why, "pthread_create failed");
      atomic_store(&e.failed, 1);
      for (int k = 0; k < i; k++) pthread_join(e.th[k].tid, NULL);
      goto out;
    }
  for (int i = 0; i < e.nth; i++) pthread_join(e.th[i].tid, NULL);
  if (o->bulk_state) atomic_store(o->bulk_state, 2);
  for (int i = 0; i < e.nth; i++)
    if (e.th[i].rc != 0) {
      snprintf(why, sizeof why, "%s", e.th[i].why);
      goto out;
    }
  struct kv_side_stats mine;
  merge_stats(&e, &mine);
  mine.proc_cpu_s = kv_proc_cpu_s() - pcpu0;
  if (o->bulk_t0) *o->bulk_t0 = e.th[0].t_begin;
  if (o->bulk_t1) *o->bulk_t1 = e.th[0].t_end;
  if (is_send) {
    /* every gate value the receiver sent comes before its statistics */
    double end = now_s() + 60;
    while (atomic_load(&e.released) < e.ngates + 1) {
      if (gates_poll(&e, 0.05) != 0 || now_s() > end) {
        snprintf(why, sizeof why, "side channel: the receiver never released the last gate");
        goto out;
      }
    }
    if (kv_side_write(side, &mine, sizeof mine) != 0) {
      snprintf(why, sizeof why, "side channel: statistics not sent");
      goto out;
    }
  } else {
    struct kv_side_stats theirs;
    if (kv_side_read(side, &theirs, sizeof theirs, 60) != 0) {
      snprintf(why, sizeof why, "side channel: no statistics from the sender");
      goto out;
    }
    long nreq = kv_case_requests(c);
    res->nreq = nreq;
    res->req_s = malloc(sizeof(double) * (size_t)nreq);
    if (res->req_s == NULL) goto out;
    double first = e.gate_open[1], last = 0, sum = 0;
    for (long r = 0; r < nreq; r++) {
      res->req_s[r] = e.req_end[r] - e.gate_open[request_gate(c, r)];
      sum += res->req_s[r];
      if (e.req_end[r] > last) last = e.req_end[r];
    }
    qsort(res->req_s, (size_t)nreq, sizeof(double), kv_cmp_double);
    res->p50_s = kv_percentile(res->req_s, nreq, 0.50);
    res->p99_s = kv_percentile(res->req_s, nreq, 0.99);
    res->mean_s = sum / (double)nreq;
    mine.wall_s = last - first;
    res->data_bytes =
        (uint64_t)kv_case_ops(c) * c->op_bytes * (uint64_t)(c->senders * c->receivers);
    double w = mine.wall_s > 0 ? mine.wall_s : 1e-9;
    res->gbps = (double)res->data_bytes / w / 1e9;
    res->msgs_per_s = (double)mine.msgs / w;
    long units = c->shape == KV_PIPELINED ? c->blocks : c->nops;
    res->ops_per_s = (double)nreq * (double)units * (double)(c->senders * c->receivers) / w;
    res->snd = theirs;
    res->rcv = mine;
    res->ok = 1;
  }
  if (kv_side_sync(side, 60) != 0) {
    snprintf(why, sizeof why, "side channel: barrier after the run failed");
    goto out;
  }
  rc = 0;
out:
  free_chains(&e);
  if (e.comms != NULL) {
    if (kv_close_comms(net, is_send, e.ncomms, e.comms) != 0 && rc == 0) {
      snprintf(why, sizeof why, "%s close: failed", net->ops->name);
      rc = -1;
    }
    free(e.comms);
  }
  free_gates(&e);
  pthread_mutex_destroy(&e.mu);
  if (rc != 0 && res != NULL) {
    res->ok = 0;
    snprintf(res->why, sizeof res->why, "%s", why);
  }
  if (rc != 0 && res == NULL) diag("kvbench: %s side: %s", is_send ? "send" : "receive", why);
  return rc;
}
