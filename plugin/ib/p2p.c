/* Verbs data path: isend/irecv/iflush/test and the peer's liveness.
 * Completions are polled from the comm's CQs inside test() (and
 * isend/irecv when they need room); there is no progress thread and no
 * lock: NCCL drives one comm from one thread.  See ib.h for the protocol.
 *
 * What a peer writes into our memory (FIFO slots on the sender, sizes and
 * immediates on the receiver) is checked against our own state before it
 * is used; a violation fails the comm with a WARN naming the field, and
 * every later test() returns that error (a later isend/irecv hands out a
 * request that fails there: rn_ib_post_end). */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "ib.h"

/* --- failures ----------------------------------------------------------- */

static ncclResult_t rn_ib_wc_result(enum ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
    case IBV_WC_REM_ABORT_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
    case IBV_WC_REM_INV_RD_REQ_ERR:
      return ncclRemoteError;
    default:
      return ncclSystemError;
  }
}

static void rn_ib_fail(struct rn_ib_comm *c, ncclResult_t res) {
  if (c->error == ncclSuccess) c->error = res;
}

/* The peer wrote something no correct peer writes: fail the comm. */
#define RN_IB_PEER_FAIL(c, fmt, ...)                                                         \
  do {                                                                                       \
    RN_WARN("%s: peer %s broke the protocol: " fmt, (c)->rail[0].port->nic->name, (c)->peer, \
            ##__VA_ARGS__);                                                                  \
    rn_ib_fail((c), ncclRemoteError);                                                        \
  } while (0)

static void rn_ib_wc_error(struct rn_ib_comm *c, int rail, const struct ibv_wc *wc) {
  /* A receiver taking the completions of QPs it stopped: flushes. */
  if (c->draining) return;
  /* A rail failed and the comm has others: it goes on over them. */
  if (rn_ib_fo_rail_failed(c, rail, wc)) return;
  /* After the first failure the QP flushes everything else: one WARN. */
  if (c->error != ncclSuccess && wc->status == IBV_WC_WR_FLUSH_ERR) return;
  static const char *const what[] = {"?", "send", "FIFO write", "receive", "flush read"};
  int kind = RN_IB_WRID_KIND(wc->wr_id);
  RN_WARN("%s QP %u: %s completion failed: %s (status %d, vendor error 0x%x), peer %s",
          c->rail[rail].port->nic->name, wc->qp_num, kind > 0 && kind < 5 ? what[kind] : "?",
          rn_ibv_wc_status_str(wc->status), (int)wc->status, wc->vendor_err, c->peer);
  rn_ib_fail(c, rn_ib_wc_result(wc->status));
}

/* --- posting ------------------------------------------------------------ */

static int rn_ib_sq_room(const struct rn_ib_comm *c, const struct rn_ib_qp *q, int nwr) {
  return q->posted - q->completed + (uint32_t)nwr <= c->sq_depth;
}

/* Post a chain of nwr send WRs on the comm's QP qi in one call (one
 * doorbell).  Every WR's id names the QP and its post count, so a
 * signaled completion frees the queue up to it.  The last WR is signaled
 * when signal is set, when the unsignaled run would pass its bound, or
 * when the queue is half full; the others never are.  The caller checked
 * rn_ib_sq_room. */
static ncclResult_t rn_ib_post_chain(struct rn_ib_comm *c, int qi, struct ibv_send_wr *wr, int nwr,
                                     enum rn_ib_wr_kind kind, uint32_t idx, int signal) {
  int rail;
  struct rn_ib_qp *q = rn_ib_qp(c, qi, &rail);
  uint32_t used = q->posted - q->completed + (uint32_t)nwr;
  if (q->unsignaled + (uint32_t)nwr > RN_IB_UNSIGNALED_MAX || used > c->sq_depth / 2) signal = 1;
  for (int w = 0; w < nwr; w++) {
    wr[w].next = w + 1 < nwr ? &wr[w + 1] : NULL;
    wr[w].wr_id = RN_IB_WRID(kind, qi, idx, q->posted + (uint32_t)w + 1);
    wr[w].send_flags &= ~IBV_SEND_SIGNALED;
  }
  if (signal) wr[nwr - 1].send_flags |= IBV_SEND_SIGNALED;
  RN_CHECK(rn_ibv_post_send(q->qp, wr));
  q->posted += (uint32_t)nwr;
  q->unsignaled = signal ? 0 : q->unsignaled + (uint32_t)nwr;
  return ncclSuccess;
}

/* --- completions -------------------------------------------------------- */

/* An immediate closed a group on QP qi: check it against the receive it
 * names before counting it. */
static void rn_ib_on_imm(struct rn_ib_comm *c, int qi, const struct ibv_wc *wc) {
  if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM)) {
    RN_IB_PEER_FAIL(c, "QP %u: a receive completion of opcode %d without an immediate", wc->qp_num,
                    (int)wc->opcode);
    return;
  }
  uint32_t imm = ntohl(wc->imm_data);
  unsigned slot = RN_IB_IMM_SLOT(imm);
  struct rn_ib_req *r = &c->recv_reqs[slot];
  if (r->kind != RN_IB_REQ_RECV || r->seq >= c->fifo_posted) {
    RN_IB_PEER_FAIL(c, "immediate 0x%08x names slot %u, where no receive is %s", imm, slot,
                    r->kind == RN_IB_REQ_RECV ? "announced yet" : "posted");
    return;
  }
  int nq = rn_ib_qp_count(c), rail;
  int nused = (int)RN_IB_IMM_NUSED(imm);
  if (nused > nq) {
    RN_IB_PEER_FAIL(c, "immediate 0x%08x: %d QPs used, the connection has %d", imm, nused, nq);
    return;
  }
  /* The sender spreads a group over any nused of the QPs (the rails'
   * rates decide which), each closing it once: one more is a lie. */
  if (r->got >= nused) {
    RN_IB_PEER_FAIL(c, "immediate 0x%08x for sequence %llu on QP %d: more than its %d QPs", imm,
                    (unsigned long long)r->seq, qi, nused);
    return;
  }
  struct rn_ib_qp *q = rn_ib_qp(c, qi, &rail);
  if (q->last_imm >= r->seq + 1) {
    RN_IB_PEER_FAIL(c, "immediate 0x%08x for sequence %llu on QP %d after one for %llu", imm,
                    (unsigned long long)r->seq, qi, (unsigned long long)q->last_imm - 1);
    return;
  }
  q->last_imm = r->seq + 1;
  if (r->expected != 0 && r->expected != nused) {
    RN_IB_PEER_FAIL(c, "immediate 0x%08x: %d QPs used, an earlier one of sequence %llu said %d",
                    imm, nused, (unsigned long long)r->seq, r->expected);
    return;
  }
  int sized = (imm & RN_IB_IMM_SIZED) != 0;
  int64_t size = sized ? (int64_t)RN_IB_IMM_SIZE(imm) : -1;
  if (sized && r->n != 1) {
    RN_IB_PEER_FAIL(c, "immediate 0x%08x carries a size for a %d-buffer receive", imm, r->n);
    return;
  }
  if (r->got > 0 && size != r->imm_size) {
    RN_IB_PEER_FAIL(c, "immediate 0x%08x: size %lld, an earlier one of sequence %llu said %lld",
                    imm, (long long)size, (unsigned long long)r->seq, (long long)r->imm_size);
    return;
  }
  r->imm_size = size;
  r->expected = nused;
  r->got++;
  c->rail[rail].chunks++;
  if (r->got == r->expected) c->fifo_live--;
  if (imm & RN_IB_IMM_ERROR) r->error = 1;
}

static void rn_ib_on_wc(struct rn_ib_comm *c, int rail, const struct ibv_wc *wc) {
  if (wc->status != IBV_WC_SUCCESS) {
    rn_ib_wc_error(c, rail, wc);
    return;
  }
  int kind = RN_IB_WRID_KIND(wc->wr_id), qi = RN_IB_WRID_QP(wc->wr_id), r;
  uint32_t idx = RN_IB_WRID_IDX(wc->wr_id);
  switch (kind) {
    case RN_IB_WR_SEND: {
      rn_ib_qp(c, qi, &r)->completed = RN_IB_WRID_COUNT(wc->wr_id);
      rn_ib_rate_done(c, qi);
      if (!idx--) break; /* a refused group: nothing waits */
      struct rn_ib_req *lead = &c->send_reqs[idx];
      if (--lead->expected == 0) {
        for (int i = 0; i < lead->n; i++) c->send_reqs[lead->member[i]].got = 1;
        if (c->sent_seq[lead->slot] == lead->seq + 1) c->sent_done[lead->slot] = 1;
      }
      break;
    }
    case RN_IB_WR_FIFO:
      rn_ib_qp(c, qi, &r)->completed = RN_IB_WRID_COUNT(wc->wr_id);
      break;
    case RN_IB_WR_RECV:
      rn_ib_qp(c, qi, &r)->recvs_due++;
      rn_ib_on_imm(c, qi, wc);
      break;
    case RN_IB_WR_FLUSH:
      c->flush_reqs[idx].got++;
      break;
    default:
      break;
  }
}

/* Re-post consumed RECVs, a batch at a time. */
static ncclResult_t rn_ib_recvs_refill(struct rn_ib_comm *c, int rail) {
  struct rn_ib_rail *rl = &c->rail[rail];
  if (c->pos[rail] < 0 || (c->dead & (1u << rail)) || c->draining) return ncclSuccess;
  for (int k = 0; k < c->nqps; k++) {
    struct rn_ib_qp *q = &rl->qp[k];
    if (q->recvs_due < RN_IB_RECV_BATCH) continue;
    RN_CHECK(rn_ib_post_recvs(c, rn_ib_qp_index(c, rail, k), (int)q->recvs_due));
    q->recvs_due = 0;
  }
  return ncclSuccess;
}

static ncclResult_t rn_ib_progress(struct rn_ib_comm *c) {
  struct ibv_wc wc[RN_IB_CQ_BATCH];
  /* The rails in use (one that failed flushes until the rebuild); a rail
   * left keeps its stopped QPs, and their completions, until the close. */
  for (int r = 0; r < c->nrails; r++) {
    if (!c->rail[r].cq || c->pos[r] < 0) continue;
    int got, recvs = 0;
    do {
      RN_CHECK(rn_ibv_poll_cq(c->rail[r].cq, RN_IB_CQ_BATCH, wc, &got));
      for (int i = 0; i < got; i++) {
        rn_ib_on_wc(c, r, &wc[i]);
        recvs |= RN_IB_WRID_KIND(wc[i].wr_id) == RN_IB_WR_RECV;
      }
    } while (got == RN_IB_CQ_BATCH);
    if (recvs && rn_ib_recvs_refill(c, r) != ncclSuccess) rn_ib_fail(c, ncclSystemError);
  }
  /* A rail failed: the sender leaves it now, the receiver tells the sender. */
  if (c->dead && c->error == ncclSuccess && !c->draining) {
    if (!c->is_send)
      rn_ib_fo_report(c);
    else if (!c->recovering && rn_ib_fo_begin(c) != ncclSuccess)
      rn_ib_fail(c, ncclRemoteError);
  }
  return c->error;
}

/* --- the control socket -------------------------------------------------- */

static ncclResult_t rn_ib_fifo_flush(struct rn_ib_comm *c, int force);
static ncclResult_t rn_ib_post_group(struct rn_ib_comm *c, uint64_t seq, int slot,
                                     struct rn_ib_send_group *g, struct rn_ib_req *lead, int err,
                                     const struct rn_ib_plan *plan);

/* Sender, after REBUILT: the groups the receiver has whole complete; the
 * others are posted again in order over the new QPs (a full window fits
 * their send queues) unless another rail failed meanwhile. */
static ncclResult_t rn_ib_replay(struct rn_ib_comm *c) {
  uint64_t lo = c->seq > RN_IB_SLOTS ? c->seq - RN_IB_SLOTS : 0;
  uint64_t bytes = 0;
  c->replayed = c->delivered = 0;
  for (uint64_t s = lo; s < c->seq; s++) {
    int slot = (int)(s % RN_IB_SLOTS);
    if (c->sent_seq[slot] != s + 1 || c->sent_done[slot] || !rn_ib_fo_delivered(c, s)) continue;
    struct rn_ib_req *lead = &c->send_reqs[c->sent_lead[slot]];
    for (int i = 0; i < lead->n; i++) c->send_reqs[lead->member[i]].got = 1;
    lead->expected = 0;
    c->sent_done[slot] = 1;
    c->delivered++;
  }
  if (c->dead) return rn_ib_fo_begin(c);
  c->replaying = 1;
  for (uint64_t s = lo; s < c->seq; s++) {
    int slot = (int)(s % RN_IB_SLOTS);
    if (c->sent_seq[slot] != s + 1 || c->sent_done[slot]) continue;
    struct rn_ib_send_group *g = &c->sent[slot];
    ncclResult_t res = rn_ib_post_group(c, s, slot, g, &c->send_reqs[c->sent_lead[slot]], 0, NULL);
    if (res != ncclSuccess) {
      c->replaying = 0;
      return res;
    }
    for (int i = 0; i < g->n; i++) bytes += g->size[i];
    c->replayed++;
  }
  c->replaying = 0;
  RN_INFO(NCCL_NET,
          "%s: send comm with %s goes on over %d rail(s) after %lld ms (rebuild %u): %u group(s) "
          "(%llu bytes) sent again, %u found whole at the peer",
          rn_ib_comm_nic(c), c->peer, c->nlive, (long long)(rn_clock_ms() - c->recover_ms),
          c->epoch, c->replayed, (unsigned long long)bytes, c->delivered);
  return ncclSuccess;
}

/* One whole, checked message from the peer. */
static ncclResult_t rn_ib_ctrl_msg(struct rn_ib_comm *c) {
  const struct rn_ib_fo_msg *m = &c->fo_in;
  switch (m->type) {
    case RN_IB_FO_FAIL: {
      /* Seen on QPs a rebuild since replaced: the new ones tell anew. */
      if (m->epoch != c->epoch) return ncclSuccess;
      uint32_t news = 0;
      for (int p = 0; p < c->nlive; p++)
        if ((m->rails & (1u << c->in_use[p])) && !(c->dead & (1u << c->in_use[p])))
          news |= 1u << c->in_use[p];
      if (!news) return ncclSuccess; /* left already */
      RN_WARN("%s: the receiver %s saw rail(s) 0x%x fail; leaving them", rn_ib_comm_nic(c),
              c->peer, news);
      for (int r = 0; r < c->nrails; r++)
        if (news & (1u << r)) c->rail[r].failures++;
      c->dead |= news;
      if (c->recovering) return ncclSuccess; /* after this rebuild, another */
      return rn_ib_fo_begin(c);
    }
    case RN_IB_FO_REBUILD:
      rn_ib_fo_stop(c);
      c->draining = 1;
      (void)rn_ib_progress(c);
      c->draining = 0;
      RN_CHECK(c->error);
      /* Flushes in flight lose their QPs: the receives they follow
       * completed before they were posted, over QPs now destroyed. */
      for (int i = 0; i < RN_IB_SLOTS; i++)
        if (c->flush_reqs[i].kind == RN_IB_REQ_FLUSH)
          c->flush_reqs[i].got = c->flush_reqs[i].expected;
      return rn_ib_fo_answer(c);
    case RN_IB_FO_REBUILT:
      RN_CHECK(rn_ib_fo_finish(c));
      return rn_ib_replay(c);
    case RN_IB_FO_READY:
      c->recovering = 0;
      RN_INFO(NCCL_NET, "%s: receive comm with %s goes on over %d rail(s) after %lld ms (rebuild %u)",
              rn_ib_comm_nic(c), c->peer, c->nlive, (long long)(rn_clock_ms() - c->recover_ms),
              c->epoch);
      return rn_ib_fifo_flush(c, 1);
  }
  return ncclSuccess;
}

/* The bootstrap socket: the peer's failover messages and its EOF (*dead).
 * Read once per RN_IB_ALIVE_CHECK_MS (the clock once per
 * RN_IB_ALIVE_CHECK_CALLS calls, a clock read can be a system call), and
 * on every call while a failover is under way. */
static ncclResult_t rn_ib_ctrl(struct rn_ib_comm *c, int *dead) {
  *dead = 0;
  if (!(c->recovering || c->dead || c->fo_out_len || c->fo_in_off)) {
    if (--c->alive_calls > 0) return ncclSuccess;
    /* a comm that left a rail reads the clock more often: it probes */
    c->alive_calls = c->left ? RN_IB_ALIVE_CHECK_CALLS / 16 : RN_IB_ALIVE_CHECK_CALLS;
    int64_t now = rn_clock_ms();
    if (now < c->next_alive_ms) return ncclSuccess;
    c->next_alive_ms = now + RN_IB_ALIVE_CHECK_MS;
    rn_ib_stats_tick(c);
  }
  for (;;) {
    int got, eof;
    ncclResult_t res = rn_ib_fo_io(c, &got, &eof);
    if (res == ncclSuccess && got) res = rn_ib_ctrl_msg(c);
    if (res == ncclSuccess) res = rn_ib_fo_check_time(c);
    if (res != ncclSuccess) {
      rn_ib_fail(c, res);
      return c->error;
    }
    if (eof) {
      *dead = 1; /* the caller re-polls, then WARNs */
      return ncclSuccess;
    }
    if (!got) break;
  }
  if (c->left && rn_ib_fo_probe(c) != ncclSuccess) rn_ib_fail(c, ncclRemoteError);
  return c->error;
}

static ncclResult_t rn_ib_dead_peer(struct rn_ib_comm *c, const char *what) {
  RN_WARN("%s: peer %s closed the connection while a %s was pending", rn_ib_comm_nic(c), c->peer,
          what);
  rn_ib_fail(c, ncclRemoteError);
  return c->error;
}

/* Nothing to do for the caller yet: keep completions moving, take the
 * peer's messages and notice a dead peer. */
static ncclResult_t rn_ib_idle(struct rn_ib_comm *c, const char *what) {
  RN_CHECK(rn_ib_progress(c));
  int dead;
  RN_CHECK(rn_ib_ctrl(c, &dead));
  if (dead) return rn_ib_dead_peer(c, what);
  return ncclSuccess;
}

/* --- requests ----------------------------------------------------------- */

/* Claim a free request of c's pools as one of kind. */
static void rn_ib_req_start(struct rn_ib_req *r, struct rn_ib_comm *c, enum rn_ib_req_kind kind) {
  memset(r, 0, sizeof(*r));
  r->kind = kind;
  rn_req_base_start(&r->base, &c->base);
  r->comm = c;
}

/* Free it again. */
static void rn_ib_req_end(struct rn_ib_req *r) {
  r->kind = 0;
  rn_req_base_end(&r->base);
}

/* --- send --------------------------------------------------------------- */

static struct rn_ib_req *rn_ib_send_req_get(struct rn_ib_comm *c) {
  for (size_t i = 0; i < sizeof(c->send_reqs) / sizeof(c->send_reqs[0]); i++) {
    if (c->send_reqs[i].kind) continue;
    rn_ib_req_start(&c->send_reqs[i], c, RN_IB_REQ_SEND);
    return &c->send_reqs[i];
  }
  return NULL;
}

/* A FIFO sequence field before its receive is posted: 0, or the value of
 * an earlier use of the same slot. */
static int rn_ib_fifo_idx_old(uint64_t idx, uint64_t want) {
  return idx == 0 || (idx < want && (want - idx) % RN_IB_SLOTS == 0);
}

/* Take the FIFO slot of the current sequence once the receiver wrote all
 * of it: check every field, keep a private copy in g.  *ready stays 0
 * while the receive is not (fully) posted. */
static ncclResult_t rn_ib_fifo_take(struct rn_ib_comm *c, int slot, struct rn_ib_send_group *g,
                                    int *ready) {
  volatile struct rn_ib_fifo_elem *f = c->ctl->fifo[slot];
  uint64_t want = c->seq + 1;
  *ready = 0;
  uint64_t idx = f[0].idx;
  if (idx != want) {
    if (rn_ib_fifo_idx_old(idx, want)) return ncclSuccess;
    RN_IB_PEER_FAIL(c, "FIFO slot %d: sequence field %llu, expected %llu", slot,
                    (unsigned long long)idx, (unsigned long long)want);
    return c->error;
  }
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  int n = f[0].n;
  if (n < 1 || n > RN_IB_MAX_RECVS) {
    RN_IB_PEER_FAIL(c, "FIFO slot %d: group of %d buffers (1..%d)", slot, n, RN_IB_MAX_RECVS);
    return c->error;
  }
  for (int i = 1; i < n; i++) {
    idx = f[i].idx;
    if (idx == want) continue;
    if (rn_ib_fifo_idx_old(idx, want)) return ncclSuccess; /* still landing */
    RN_IB_PEER_FAIL(c, "FIFO slot %d element %d: sequence field %llu, expected %llu", slot, i,
                    (unsigned long long)idx, (unsigned long long)want);
    return c->error;
  }
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++) memcpy(&g->fifo[i], (const void *)&f[i], sizeof(g->fifo[i]));
  for (int i = 0; i < n; i++) {
    const struct rn_ib_fifo_elem *e = &g->fifo[i];
    if (e->n != n || e->idx != want) {
      RN_IB_PEER_FAIL(c,
                      "FIFO slot %d element %d: group of %u buffers, sequence %llu; element 0 "
                      "said %d, %llu",
                      slot, i, e->n, (unsigned long long)e->idx, n, (unsigned long long)want);
      return c->error;
    }
    if (e->size > INT_MAX || (e->size > 0 && (e->addr == 0 || e->addr > UINT64_MAX - e->size))) {
      RN_IB_PEER_FAIL(c, "FIFO slot %d element %d: buffer of %llu bytes at 0x%llx", slot, i,
                      (unsigned long long)e->size, (unsigned long long)e->addr);
      return c->error;
    }
  }
  g->n = n;
  *ready = 1;
  return ncclSuccess;
}

/* One data WR: len bytes at local into the receiver's buffer. */
static void rn_ib_wr_data(struct ibv_send_wr *wr, struct ibv_sge *sge, uint64_t local, uint32_t len,
                          uint32_t lkey, uint64_t remote, uint32_t rkey, uint32_t max_inline) {
  memset(wr, 0, sizeof(*wr));
  *sge = (struct ibv_sge){.addr = local, .length = len, .lkey = lkey};
  wr->opcode = IBV_WR_RDMA_WRITE;
  wr->sg_list = sge;
  wr->num_sge = len > 0;
  if (len > 0 && len <= max_inline) wr->send_flags = IBV_SEND_INLINE;
  wr->wr.rdma.remote_addr = remote;
  wr->wr.rdma.rkey = rkey;
}

/* WRs a group puts on one QP at most: data per buffer, sizes, immediate. */
#define RN_IB_GROUP_WRS (RN_IB_MAX_RECVS + 2)

/* QPs a group of total bytes spreads over. */
static int rn_ib_group_qps(const struct rn_ib_comm *c, size_t total) {
  int nq = rn_ib_qp_count(c);
  size_t want = (total + RN_IB_SPLIT_MIN - 1) / RN_IB_SPLIT_MIN;
  return want < 1 ? 1 : want > (size_t)nq ? nq : (int)want;
}

/* The next group's plan (*p, total bytes over nused QPs) and whether every
 * QP it uses has room: for its WRs, and for the record of its chain on a
 * multi-rail sender.  The caller posts with that plan before anything
 * else changes the comm. */
static int rn_ib_group_room(struct rn_ib_comm *c, size_t total, int nused, struct rn_ib_plan *p) {
  rn_ib_plan(c, c->seq, total, nused, p);
  int rail;
  for (int j = 0; j < p->nused; j++)
    if (!rn_ib_sq_room(c, rn_ib_qp(c, p->qi[j], &rail), RN_IB_GROUP_WRS) ||
        !rn_ib_rate_room(c, p->qi[j]))
      return 0;
  return 1;
}

/* Post one matched group: data parts over nused QPs (rates.c says which
 * and how each buffer is cut), the sizes (unless the immediate carries
 * them) and an immediate per QP, each QP's WRs in one chained post.  A
 * small message is a single inline WRITE_WITH_IMM, a zero-byte one a
 * WRITE_WITH_IMM without data.  err: refuse the group, telling the
 * receiver through the immediate and the sizes.  plan: the one
 * rn_ib_group_room made, or NULL to make it here. */
static ncclResult_t rn_ib_post_group(struct rn_ib_comm *c, uint64_t seq, int slot,
                                     struct rn_ib_send_group *g, struct rn_ib_req *lead, int err,
                                     const struct rn_ib_plan *plan) {
  size_t total = 0;
  for (int i = 0; i < g->n; i++) total += g->size[i];
  int nused = err ? 1 : rn_ib_group_qps(c, total);
  struct rn_ib_plan made;
  if (!plan) {
    rn_ib_plan(c, seq, err ? 0 : total, nused, &made);
    plan = &made;
  }
  size_t cut[RN_IB_MAX_RECVS][RN_MAX_RAILS * RN_IB_MAX_QPS + 1];
  for (int i = 0; i < g->n && !err; i++) rn_ib_stripe_bounds(g->size[i], plan->w, nused, cut[i]);
  int sized = !err && g->n == 1 && g->size[0] <= RN_IB_IMM_SIZE_MAX;
  uint32_t imm = (uint32_t)slot | ((uint32_t)(nused - 1) << 5);
  if (sized) imm |= RN_IB_IMM_SIZED | ((uint32_t)g->size[0] << 13);
  if (err) imm |= RN_IB_IMM_ERROR;
  if (!sized)
    for (int i = 0; i < g->n; i++) c->ctl->sizes[slot][i] = g->size[i];
  uint64_t rem_sizes = c->rem_ctl + (uint64_t)slot * sizeof(c->ctl->sizes[0]);
  uint32_t lead_idx = lead ? (uint32_t)(lead - c->send_reqs) + 1 : 0;
  for (int j = 0; j < nused; j++) {
    int qi = plan->qi[j], rail;
    rn_ib_qp(c, qi, &rail);
    struct rn_ib_rail *rl = &c->rail[rail];
    struct ibv_send_wr wr[RN_IB_GROUP_WRS];
    struct ibv_sge sge[RN_IB_GROUP_WRS];
    int nwr = 0;
    uint64_t mine = 0;
    rl->chunks++;
    rl->replays += c->replaying != 0;
    for (int i = 0; i < g->n && !err; i++) {
      size_t off = cut[i][j], len = cut[i][j + 1] - off;
      if (len == 0) continue;
      rn_ib_wr_data(&wr[nwr], &sge[nwr], (uintptr_t)g->data[i] + off, (uint32_t)len,
                    rn_ib_mh_mr(g->mh[i], rail)->lkey, g->fifo[i].addr + off, g->fifo[i].rkey[rail],
                    c->max_inline);
      mine += len;
      nwr++;
    }
    rl->bytes += mine;
    /* The last data chunk on this QP carries the immediate (one packet
     * fewer; a small message is a single WRITE_WITH_IMM).  The sizes
     * write goes before it: RC keeps one QP's writes in order.  Only a
     * single-packet chunk: Soft-RoCE (6.1) mishandles go-back-N
     * retransmits inside multi-packet WRITE_WITH_IMM (remote invalid
     * request), so longer tails keep a separate zero-byte immediate. */
    struct ibv_send_wr last;
    struct ibv_sge last_sge;
    int have_last = nwr > 0 && sge[nwr - 1].length <= (uint32_t)c->mtu_bytes;
    if (have_last) {
      nwr--;
      last = wr[nwr];
      last_sge = sge[nwr];
    }
    if (j == 0 && !sized) {
      rn_ib_wr_data(&wr[nwr], &sge[nwr], (uintptr_t)c->ctl->sizes[slot],
                    (uint32_t)(sizeof(uint64_t) * (size_t)g->n), rl->local_mr->lkey, rem_sizes,
                    rl->rem_rkey, c->max_inline);
      nwr++;
    }
    if (have_last) {
      sge[nwr] = last_sge;
      wr[nwr] = last;
      wr[nwr].sg_list = &sge[nwr];
    } else {
      /* No data on this QP: a zero-byte write carries the immediate. */
      rn_ib_wr_data(&wr[nwr], &sge[nwr], 0, 0, 0, rem_sizes, rl->rem_rkey, 0);
    }
    wr[nwr].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr[nwr].imm_data = htonl(imm);
    nwr++;
    RN_CHECK(rn_ib_post_chain(c, qi, wr, nwr, RN_IB_WR_SEND, lead_idx, 1));
    rn_ib_rate_posted(c, qi, mine);
  }
  rn_ib_plan_posted(c, plan);
  if (lead) lead->expected = nused;
  return ncclSuccess;
}

static ncclResult_t rn_ib_isend_in(struct rn_ib_comm *c, void *data, size_t size, int tag,
                                   void *mhp, void **req) {
  *req = NULL;
  if (c->error) return c->error;
  /* A failover under way: nothing is posted until it is done. */
  if (c->recovering || c->dead) return rn_ib_idle(c, "send");
  int slot = (int)(c->seq % RN_IB_SLOTS);
  struct rn_ib_send_group *g = &c->group[slot];
  /* The slot's group before (kept for a failover) completes first: a
   * rebuild posts again only the last RN_IB_SLOTS groups, so one older
   * whose completion a failed rail held back would never finish.  Its
   * writes were acknowledged by the receiver's NIC before the receiver
   * could give the slot back, so this waits only on a rail that failed. */
  if (g->n == 0 && c->nrails > 1 && c->sent_seq[slot] != 0 && !c->sent_done[slot])
    return rn_ib_idle(c, "send");
  if (g->n == 0) {
    int ready;
    RN_CHECK(rn_ib_fifo_take(c, slot, g, &ready));
    if (!ready) return rn_ib_idle(c, "send"); /* no receive posted yet */
  }
  /* Match the head group: a tag not free in it belongs to a later group
   * (NCCL progresses each tag of a shared comm on its own), so the caller
   * retries once this group is complete. */
  int i;
  for (i = 0; i < g->n; i++)
    if (!g->req[i] && g->fifo[i].tag == tag) break;
  if (i == g->n) return ncclSuccess;
  struct rn_ib_mh *mh = mhp;
  if (size > 0 && (!mh || mh->nrails < c->nrails)) {
    RN_WARN("send of %zu bytes (tag %d) without a registration for this comm", size, tag);
    return ncclInvalidArgument;
  }
  if (size > g->fifo[i].size) {
    RN_WARN("send of %zu bytes (tag %d) to %s exceeds the posted receive buffer of %llu bytes",
            size, tag, c->peer, (unsigned long long)g->fifo[i].size);
    /* Tell the receiver too: refused group, sizes say why. */
    for (int k = 0; k < g->n; k++)
      if (!g->req[k]) g->size[k] = 0;
    g->size[i] = size;
    struct rn_ib_plan plan;
    if (rn_ib_group_room(c, 0, 1, &plan)) (void)rn_ib_post_group(c, c->seq, slot, g, NULL, 1, &plan);
    rn_ib_fail(c, ncclInvalidUsage);
    return ncclInvalidUsage;
  }
  struct rn_ib_plan plan;
  plan.nused = 0; /* made below for the send that completes the group */
  if (g->matched + 1 == g->n) {
    /* This send completes the group: it is posted now, so every QP it
     * uses needs room; else the caller retries after completions. */
    size_t total = size;
    for (int k = 0; k < g->n; k++) total += g->req[k] ? g->size[k] : 0;
    int nused = rn_ib_group_qps(c, total);
    if (!rn_ib_group_room(c, total, nused, &plan)) {
      RN_CHECK(rn_ib_progress(c));
      if (c->recovering || !rn_ib_group_room(c, total, nused, &plan)) return ncclSuccess;
    }
  }
  struct rn_ib_req *r = rn_ib_send_req_get(c);
  if (!r) return ncclSuccess; /* every request handed out: the caller tests some first */
  r->slot = slot;
  r->size[0] = size;
  g->req[i] = r;
  g->data[i] = data;
  g->mh[i] = mh;
  g->size[i] = size;
  g->matched++;
  if (g->matched == g->n) {
    struct rn_ib_req *lead = g->req[0];
    lead->n = g->n;
    for (int k = 0; k < g->n; k++) lead->member[k] = (int)(g->req[k] - c->send_reqs);
    lead->seq = c->seq;
    ncclResult_t res = rn_ib_post_group(c, c->seq, slot, g, lead, 0, plan.nused ? &plan : NULL);
    /* Kept for a failover until the slot's next group; a comm of one
     * rail and no standby has none, so it keeps nothing. */
    if (c->nrails > 1) {
      memcpy(&c->sent[slot], g, sizeof(*g));
      c->sent_seq[slot] = c->seq + 1;
      c->sent_lead[slot] = (int)(lead - c->send_reqs);
      c->sent_done[slot] = 0;
    }
    memset(g, 0, sizeof(*g));
    c->seq++;
    if (res != ncclSuccess) {
      rn_ib_fail(c, res);
      return res;
    }
  }
  *req = r;
  return ncclSuccess;
}

/* --- receive ------------------------------------------------------------ */

/* A comm's API calls and a sweep visiting it (below) exclude each other:
 * NCCL drives a comm from one thread at a time, so the flag is only ever
 * contended by a sweep, which holds it for one flush. */
static void rn_ib_enter(struct rn_ib_comm *c) {
  while (atomic_exchange_explicit(&c->busy, 1, memory_order_acquire)) sched_yield();
}

static void rn_ib_leave(struct rn_ib_comm *c) {
  atomic_store_explicit(&c->busy, 0, memory_order_release);
}

/* The comm holds FIFO elements back: a sweep may send them.  It joins
 * the list once and stays until a sweep finds none held (only a sweep
 * that owns busy takes it off, so the check needs no lock). */
static void rn_ib_held_add(struct rn_ib_comm *c) {
  if (c->held.next == NULL) rn_shared_list_add_tail(&rn_ib_held, &c->held);
}

/* Send the FIFO elements written since the last flush: when force is set,
 * else once fewer than half of the receives in flight are announced (so
 * the sender always holds at least half of them), fewer than two (so the
 * slot after the sender's next one is there before that send completes:
 * with two or three receives in flight, waiting for half would hold each
 * new slot until the receive before it completed, and put its write just
 * ahead of whatever the caller sends next), or a batch is full.
 * Consecutive slots are one RDMA write, from the first slot's start to
 * the last one's used elements (512 bytes a slot, 64 an element: eight
 * one-buffer slots fit one 4 KiB MTU packet); the unused elements between
 * go along and the sender never reads them (it reads n elements of a
 * slot, each checked by its sequence).  The slots wrap once at most: two
 * writes, chained in one post on the QP of the first.
 * A full send queue leaves them for a later call; every call that waits
 * on the comm flushes (rn_ib_test), so a posted receive is never starved. */
static ncclResult_t rn_ib_fifo_flush(struct rn_ib_comm *c, int force) {
  int fresh = (int)(c->seq - c->fifo_posted);
  int pending = (int)(c->seq - c->fifo_again);
  /* During a failover they wait: the rebuild sends what the sender lacks. */
  if (pending == 0 || c->recovering || c->dead) return c->error;
  if (!force && c->fifo_again == c->fifo_posted && pending < RN_IB_FIFO_BATCH &&
      c->fifo_live >= pending && c->fifo_live >= 2) {
    rn_ib_held_add(c);
    return ncclSuccess;
  }
  int first = (int)(c->fifo_again % RN_IB_SLOTS);
  int run[2] = {pending, 0}; /* slots before and after the wrap */
  if (first + pending > RN_IB_SLOTS) {
    run[0] = RN_IB_SLOTS - first;
    run[1] = pending - run[0];
  }
  int nwr = run[1] ? 2 : 1;
  int qi = (int)(c->fifo_again % (uint64_t)rn_ib_qp_count(c)), rail;
  struct rn_ib_qp *q = rn_ib_qp(c, qi, &rail);
  if (!rn_ib_sq_room(c, q, nwr)) {
    RN_CHECK(rn_ib_progress(c));
    if (!rn_ib_sq_room(c, q, nwr)) {
      rn_ib_held_add(c);
      return ncclSuccess;
    }
  }
  struct rn_ib_rail *rl = &c->rail[rail];
  struct ibv_send_wr wr[2];
  struct ibv_sge sge[2];
  for (int k = 0, slot = first; k < nwr; slot = 0, k++) {
    int last = slot + run[k] - 1;
    size_t len = (size_t)(last - slot) * sizeof(c->ctl->fifo[0]) +
                 sizeof(struct rn_ib_fifo_elem) * c->ctl->fifo[last][0].n;
    rn_ib_wr_data(&wr[k], &sge[k], (uintptr_t)c->ctl->fifo[slot], (uint32_t)len,
                  rl->local_mr->lkey, c->rem_ctl + (uint64_t)slot * sizeof(c->ctl->fifo[0]),
                  rl->rem_rkey, c->max_inline);
  }
  ncclResult_t res = rn_ib_post_chain(c, qi, wr, nwr, RN_IB_WR_FIFO, 0, 0);
  if (res != ncclSuccess) {
    rn_ib_fail(c, res);
    return res;
  }
  c->fifo_posted = c->fifo_again = c->seq;
  c->fifo_live += fresh;
  return ncclSuccess;
}

/* Held FIFO elements wait for their comm's next call, which may never
 * come: a caller that posted receives and then sends, and tests only its
 * sends (the peer doing the same), waits for a FIFO slot the peer's
 * receive comm holds.  Every RN_IB_HELD_SWEEP_CALLS of a thread's calls
 * that find nothing to do, at most every RN_IB_HELD_SWEEP_MS per
 * process, the held elements of comms no call is in go out; a comm with
 * none leaves the list.  Errors surface through the comm's own calls. */
static void rn_ib_sweep_held(void) {
  static _Atomic int64_t next_ms;
  if (!rn_clock_turn(&next_ms, rn_clock_ms(), RN_IB_HELD_SWEEP_MS)) return;
  pthread_mutex_lock(&rn_ib_held.lock);
  struct rn_list *node = rn_ib_held.head.next, *nx;
  for (; node != &rn_ib_held.head; node = nx) {
    nx = node->next;
    struct rn_ib_comm *c = RN_LIST_ENTRY(node, struct rn_ib_comm, held);
    if (atomic_exchange_explicit(&c->busy, 1, memory_order_acquire)) continue; /* a call is in it */
    if (c->error != ncclSuccess || c->seq == c->fifo_again)
      rn_list_del(node);
    else
      (void)rn_ib_fifo_flush(c, 1); /* waits during a failover: the rebuild sends them */
    rn_ib_leave(c);
  }
  pthread_mutex_unlock(&rn_ib_held.lock);
}

static _Thread_local unsigned rn_ib_idle_calls;

static void rn_ib_idle_call(void) {
  if (++rn_ib_idle_calls % RN_IB_HELD_SWEEP_CALLS == 0) rn_ib_sweep_held();
}

static ncclResult_t rn_ib_irecv_in(struct rn_ib_comm *c, int n, void **data, const size_t *sizes,
                                   const int *tags, void **mhs, void **req) {
  *req = NULL;
  if (c->error) return c->error;
  int slot = (int)(c->seq % RN_IB_SLOTS);
  struct rn_ib_req *r = &c->recv_reqs[slot];
  if (r->kind) return ncclSuccess; /* RN_IB_SLOTS receives in flight: retry later */
  for (int i = 0; i < n; i++) {
    struct rn_ib_mh *mh = mhs ? mhs[i] : NULL;
    if (sizes[i] > 0 && (!mh || mh->nrails < c->nrails)) {
      RN_WARN("receive of %zu bytes (tag %d) without a registration for this comm", sizes[i],
              tags[i]);
      return ncclInvalidArgument;
    }
  }
  struct rn_ib_fifo_elem *e = c->ctl->fifo[slot];
  for (int i = 0; i < n; i++) {
    memset(&e[i], 0, sizeof(e[i]));
    e[i].addr = (uintptr_t)data[i];
    e[i].size = sizes[i];
    for (int k = 0; k < c->nrails && sizes[i] > 0; k++) e[i].rkey[k] = rn_ib_mh_mr(mhs[i], k)->rkey;
    e[i].tag = tags[i];
    e[i].n = (uint16_t)n;
    e[i].idx = c->seq + 1;
  }
  rn_ib_req_start(r, c, RN_IB_REQ_RECV);
  r->slot = slot;
  r->seq = c->seq;
  r->n = n;
  r->imm_size = -1;
  for (int i = 0; i < n; i++) {
    r->size[i] = sizes[i];
    r->tag[i] = tags[i];
  }
  c->seq++;
  ncclResult_t res = rn_ib_fifo_flush(c, 0);
  if (res != ncclSuccess) {
    rn_ib_req_end(r);
    return res;
  }
  *req = r;
  return ncclSuccess;
}

static ncclResult_t rn_ib_iflush_in(struct rn_ib_comm *c, int n, void **data, const int *sizes,
                                    void **mhs, void **req) {
  *req = NULL;
  if (c->error) return c->error;
  int last = -1;
  for (int i = 0; i < n; i++) {
    struct rn_ib_mh *mh = mhs ? mhs[i] : NULL;
    if (sizes[i] > 0 && mh && mh->type != NCCL_PTR_HOST) last = i;
  }
  if (last < 0) return ncclSuccess; /* host memory: nothing to wait for */
  struct rn_ib_req *r = NULL;
  for (int i = 0; i < RN_IB_SLOTS && !r; i++)
    if (!c->flush_reqs[i].kind) r = &c->flush_reqs[i];
  if (!r) {
    RN_WARN("more than %d flushes in flight", RN_IB_SLOTS);
    return ncclInternalError;
  }
  rn_ib_req_start(r, c, RN_IB_REQ_FLUSH);
  struct rn_ib_mh *mh = mhs[last];
  for (int p = 0; p < c->nlive; p++) {
    int k = c->in_use[p];
    struct rn_ib_rail *rl = &c->rail[k];
    if (!rl->flush_qp || (c->dead & (1u << k))) continue;
    /* A 1-byte READ of the received buffer: it completes only after the
     * NIC's earlier writes to GPU memory have landed. */
    struct ibv_sge sge = {
        .addr = (uintptr_t)&c->ctl->flush[0], .length = 1, .lkey = rl->local_mr->lkey};
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = RN_IB_WRID(RN_IB_WR_FLUSH, 0xff, (uint32_t)(r - c->flush_reqs), 0);
    wr.opcode = IBV_WR_RDMA_READ;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)data[last];
    wr.wr.rdma.rkey = rn_ib_mh_mr(mh, k)->rkey;
    ncclResult_t res = rn_ibv_post_send(rl->flush_qp, &wr);
    if (res != ncclSuccess) {
      rn_ib_req_end(r);
      rn_ib_fail(c, res);
      return res;
    }
    r->expected++;
  }
  if (r->expected == 0) { /* no GDR-capable rail: no flush QP */
    rn_ib_req_end(r);
    return ncclSuccess;
  }
  *req = r;
  return ncclSuccess;
}

/* --- test --------------------------------------------------------------- */

static int rn_ib_req_done(const struct rn_ib_req *r) {
  switch (r->kind) {
    case RN_IB_REQ_SEND:
      return r->got;
    case RN_IB_REQ_RECV:
      return r->expected > 0 && r->got == r->expected;
    case RN_IB_REQ_FLUSH:
      return r->got == r->expected;
    default:
      return 0;
  }
}

/* The sizes of a completed receive, each checked against its buffer: from
 * the immediate, or read once from the sizes block the peer wrote. */
static ncclResult_t rn_ib_recv_sizes(struct rn_ib_comm *c, struct rn_ib_req *r, size_t *sizes) {
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < r->n; i++) {
    uint64_t got =
        r->imm_size >= 0 ? (uint64_t)r->imm_size : ((volatile uint64_t *)c->ctl->sizes[r->slot])[i];
    if (got > r->size[i]) {
      RN_WARN("%s: peer %s sent %llu bytes for a %zu-byte receive buffer (tag %d)",
              c->rail[0].port->nic->name, c->peer, (unsigned long long)got, r->size[i], r->tag[i]);
      res = ncclInvalidUsage;
      got = 0;
    }
    if (sizes) sizes[i] = (size_t)got;
  }
  if (r->error && res == ncclSuccess) {
    RN_WARN("%s: peer %s refused a receive of %d buffer(s) (a send exceeded its buffer)",
            c->rail[0].port->nic->name, c->peer, r->n);
    res = ncclInvalidUsage;
  }
  return res;
}

static ncclResult_t rn_ib_test_in(struct rn_ib_req *r, int *done, size_t *sizes, int *nsizes) {
  struct rn_ib_comm *c = r->comm;
  *done = 0;
  ncclResult_t res = c->error;
  if (res != ncclSuccess) {
    RN_WARN("test on a comm to %s that already failed (error %d)", c->peer, (int)res);
    return res;
  }
  if (!rn_ib_req_done(r)) {
    /* Waiting on a receive: unannounced ones go out now if this is one
     * of them or too few are announced. */
    if (r->kind == RN_IB_REQ_RECV && c->seq != c->fifo_again)
      res = rn_ib_fifo_flush(c, r->seq >= c->fifo_again);
    if (res == ncclSuccess) res = rn_ib_progress(c);
    int dead = 0;
    if (res == ncclSuccess && !rn_ib_req_done(r)) res = rn_ib_ctrl(c, &dead);
    if (res == ncclSuccess && !rn_ib_req_done(r) && dead) {
      /* The peer's socket closed: anything it sent before is already in
       * our CQ (its completion preceded the close), so look once more. */
      res = rn_ib_progress(c);
      if (res == ncclSuccess && !rn_ib_req_done(r))
        res = rn_ib_dead_peer(c, r->kind == RN_IB_REQ_SEND ? "send" : "receive");
    }
  }
  if (res != ncclSuccess) return res;
  if (!rn_ib_req_done(r)) return ncclSuccess;
  /* A comm that left a rail looks at its port now and then even when it
   * never waits (its errors reach the next call). */
  if (c->left) {
    int dead;
    (void)rn_ib_ctrl(c, &dead);
  }
  if (r->kind == RN_IB_REQ_RECV) {
    res = rn_ib_recv_sizes(c, r, sizes);
    if (res != ncclSuccess) rn_ib_fail(c, res);
    if (nsizes) *nsizes = r->n;
  } else {
    if (sizes) sizes[0] = r->kind == RN_IB_REQ_SEND ? r->size[0] : 0;
    if (nsizes) *nsizes = 1;
  }
  rn_ib_req_end(r);
  *done = 1;
  return res;
}

/* --- the entry points ----------------------------------------------------- */

/* After isend/irecv: on a failed comm, a request whose test() returns the
 * comm's error (rn_req_doomed says when); with no request free, the error
 * itself.  The request is a send one whatever the call: test() looks no
 * further than the comm's error. */
static ncclResult_t rn_ib_post_end(struct rn_ib_comm *c, int failed_before, ncclResult_t res,
                                   const char *call, void **req) {
  if (!rn_req_doomed(c->error != ncclSuccess, failed_before, res)) return res;
  if (*req == NULL) {
    struct rn_ib_req *r = rn_ib_send_req_get(c);
    if (r == NULL) {
      RN_WARN("%s on a comm to %s that already failed (error %d)", call, c->peer, (int)c->error);
      return c->error;
    }
    *req = r;
  }
  return ncclSuccess;
}

ncclResult_t rn_ib_isend(void *scomm, void *data, size_t size, int tag, void *mhp, void **req) {
  struct rn_ib_comm *c = scomm;
  rn_ib_enter(c);
  int failed_before = c->error != ncclSuccess;
  ncclResult_t res = rn_ib_isend_in(c, data, size, tag, mhp, req);
  res = rn_ib_post_end(c, failed_before, res, "isend", req);
  rn_ib_leave(c);
  if (res == ncclSuccess && *req == NULL) rn_ib_idle_call();
  return res;
}

ncclResult_t rn_ib_irecv(void *rcomm, int n, void **data, const size_t *sizes, const int *tags,
                         void **mhs, void **req) {
  struct rn_ib_comm *c = rcomm;
  rn_ib_enter(c);
  int failed_before = c->error != ncclSuccess;
  ncclResult_t res = rn_ib_irecv_in(c, n, data, sizes, tags, mhs, req);
  res = rn_ib_post_end(c, failed_before, res, "irecv", req);
  rn_ib_leave(c);
  if (res == ncclSuccess && *req == NULL) rn_ib_idle_call();
  return res;
}

ncclResult_t rn_ib_iflush(void *rcomm, int n, void **data, const int *sizes, void **mhs,
                          void **req) {
  struct rn_ib_comm *c = rcomm;
  rn_ib_enter(c);
  ncclResult_t res = rn_ib_iflush_in(c, n, data, sizes, mhs, req);
  rn_ib_leave(c);
  return res;
}

ncclResult_t rn_ib_test(void *req, int *done, size_t *sizes, int *nsizes) {
  struct rn_ib_req *r = req;
  struct rn_ib_comm *c = r->comm;
  rn_ib_enter(c);
  ncclResult_t res = rn_ib_test_in(r, done, sizes, nsizes);
  rn_ib_leave(c);
  if (res == ncclSuccess && !*done) rn_ib_idle_call();
  return res;
}
