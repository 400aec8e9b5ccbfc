/* Verbs data path: isend/irecv/iflush/test and the peer's liveness.
 * Completions are polled from the comm's CQs inside test() (and
 * isend/irecv when they need room); there is no progress thread.  See ib.h
 * for the protocol. */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "ib.h"

/* --- completions -------------------------------------------------------- */

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

static void rn_ib_wc_error(struct rn_ib_comm *c, int rail, const struct ibv_wc *wc) {
  /* After the first failure the QP flushes everything else: one WARN. */
  if (c->error != ncclSuccess && wc->status == IBV_WC_WR_FLUSH_ERR) return;
  const char *what[] = {"?", "send", "FIFO write", "receive", "flush read"};
  unsigned kind = (unsigned)(wc->wr_id >> 32);
  RN_WARN("%s QP %u: %s completion failed: %s (status %d, vendor error 0x%x), peer %s",
          c->rail[rail].port->nic->name, wc->qp_num, kind < 5 ? what[kind] : "?",
          rn_ibv_wc_status_str(wc->status), (int)wc->status, wc->vendor_err, c->peer);
  rn_ib_fail(c, rn_ib_wc_result(wc->status));
}

static void rn_ib_on_wc(struct rn_ib_comm *c, int rail, const struct ibv_wc *wc) {
  if (wc->status != IBV_WC_SUCCESS) {
    rn_ib_wc_error(c, rail, wc);
    return;
  }
  uint32_t idx = (uint32_t)wc->wr_id;
  switch ((int)(wc->wr_id >> 32)) {
    case RN_IB_WR_SEND: {
      struct rn_ib_req *lead = &c->send_reqs[idx];
      if (--lead->expected == 0)
        for (int i = 0; i < lead->n; i++) c->send_reqs[lead->member[i]].got = 1;
      break;
    }
    case RN_IB_WR_RECV: {
      uint32_t imm = ntohl(wc->imm_data);
      struct rn_ib_req *r = &c->recv_reqs[RN_IB_IMM_SLOT(imm)];
      if (r->kind != RN_IB_REQ_RECV) {
        RN_WARN("%s QP %u: data for slot %u with no receive posted (peer %s)",
                c->rail[rail].port->nic->name, wc->qp_num, RN_IB_IMM_SLOT(imm), c->peer);
        rn_ib_fail(c, ncclInternalError);
        break;
      }
      r->expected = (int)RN_IB_IMM_NUSED(imm);
      r->got++;
      if (imm & RN_IB_IMM_INLINE) r->inline_size = (int)RN_IB_IMM_SIZE(imm);
      if (imm & RN_IB_IMM_ERROR) r->error = 1;
      if (rn_ib_post_recvs(c, (int)(idx >> 8), (int)(idx & 0xff), 1) != ncclSuccess)
        rn_ib_fail(c, ncclSystemError);
      break;
    }
    case RN_IB_WR_FLUSH:
      c->flush_reqs[idx].got++;
      break;
    default: /* FIFO writes and error notices: nothing waits on them */
      break;
  }
}

static ncclResult_t rn_ib_progress(struct rn_ib_comm *c) {
  struct ibv_wc wc[16];
  for (int r = 0; r < c->nrails; r++) {
    int got;
    do {
      RN_CHECK(rn_ibv_poll_cq(c->rail[r].cq, 16, wc, &got));
      for (int i = 0; i < got; i++) rn_ib_on_wc(c, r, &wc[i]);
    } while (got == 16);
  }
  return c->error;
}

/* --- liveness ----------------------------------------------------------- */

static ncclResult_t rn_ib_peer_alive(struct rn_ib_comm *c) {
  int64_t now = rn_clock_ms();
  if (now < c->next_alive_ms) return ncclSuccess;
  c->next_alive_ms = now + RN_IB_ALIVE_CHECK_MS;
  if (c->ctrl_fd < 0) return ncclSuccess;
  char b;
  ssize_t n = recv(c->ctrl_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
    return ncclSuccess;
  return ncclRemoteError; /* EOF or reset: the caller re-polls, then WARNs */
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

/* Post one matched group: data chunks over nused QPs, the sizes (unless
 * the immediate carries them) and a WRITE_WITH_IMM per QP.  err: refuse
 * the group, telling the receiver through the immediate and the sizes. */
static ncclResult_t rn_ib_post_group(struct rn_ib_comm *c, int slot, struct rn_ib_send_group *g,
                                     volatile struct rn_ib_fifo_elem *f, struct rn_ib_req *lead,
                                     int err) {
  int nq = rn_ib_qp_count(c);
  size_t total = 0;
  for (int i = 0; i < g->n; i++) total += g->size[i];
  int nused = 1;
  if (!err) {
    size_t want = (total + RN_IB_SPLIT_MIN - 1) / RN_IB_SPLIT_MIN;
    nused = want < 1 ? 1 : want > (size_t)nq ? nq : (int)want;
  }
  int start = (int)(c->seq % (uint64_t)nq);
  int inl = !err && g->n == 1 && g->size[0] <= RN_IB_IMM_INLINE_MAX;
  uint32_t imm = (uint32_t)slot | ((uint32_t)(nused - 1) << 5);
  if (inl) imm |= RN_IB_IMM_INLINE | ((uint32_t)g->size[0] << 13);
  if (err) imm |= RN_IB_IMM_ERROR;
  if (!inl)
    for (int i = 0; i < g->n; i++) c->ctl->sizes[slot][i] = g->size[i];
  uint64_t rem_sizes =
      c->rem_ctl + offsetof(struct rn_ib_ctl, sizes) + (uint64_t)slot * sizeof(c->ctl->sizes[0]);
  for (int j = 0; j < nused; j++) {
    int rail;
    struct ibv_qp *qp = rn_ib_qp(c, (start + j) % nq, &rail);
    struct rn_ib_rail *rl = &c->rail[rail];
    struct ibv_send_wr wr[RN_IB_MAX_RECVS + 2];
    struct ibv_sge sge[RN_IB_MAX_RECVS + 2];
    int nwr = 0;
    memset(wr, 0, sizeof(wr));
    for (int i = 0; i < g->n && !err; i++) {
      size_t chunk = (g->size[i] + (size_t)nused - 1) / (size_t)nused;
      chunk = (chunk + 127) & ~(size_t)127;
      size_t off = chunk * (size_t)j;
      if (off >= g->size[i]) continue;
      size_t len = g->size[i] - off < chunk ? g->size[i] - off : chunk;
      sge[nwr] = (struct ibv_sge){.addr = (uintptr_t)g->data[i] + off,
                                  .length = (uint32_t)len,
                                  .lkey = rn_ib_mh_mr(g->mh[i], rail)->lkey};
      wr[nwr].opcode = IBV_WR_RDMA_WRITE;
      wr[nwr].sg_list = &sge[nwr];
      wr[nwr].num_sge = 1;
      wr[nwr].wr.rdma.remote_addr = f[i].addr + off;
      wr[nwr].wr.rdma.rkey = f[i].rkey[rail];
      nwr++;
    }
    /* The last data chunk on this QP carries the immediate (one packet
     * fewer; a small message is a single WRITE_WITH_IMM).  The sizes
     * write goes before it: RC keeps one QP's writes in order. */
    struct ibv_send_wr last;
    struct ibv_sge last_sge;
    /* Only a single-packet chunk: Soft-RoCE (6.1) mishandles go-back-N
     * retransmits inside multi-packet WRITE_WITH_IMM (remote invalid
     * request), so longer tails keep a separate zero-byte immediate. */
    int have_last = nwr > 0 && sge[nwr - 1].length <= (uint32_t)c->mtu_bytes;
    if (have_last) {
      nwr--;
      last = wr[nwr];
      last_sge = sge[nwr];
      memset(&wr[nwr], 0, sizeof(wr[nwr]));
    }
    if (j == 0 && !inl) {
      sge[nwr] = (struct ibv_sge){.addr = (uintptr_t)c->ctl->sizes[slot],
                                  .length = (uint32_t)(sizeof(uint64_t) * (size_t)g->n),
                                  .lkey = rl->ctl_mr->lkey};
      wr[nwr].opcode = IBV_WR_RDMA_WRITE;
      wr[nwr].sg_list = &sge[nwr];
      wr[nwr].num_sge = 1;
      wr[nwr].wr.rdma.remote_addr = rem_sizes;
      wr[nwr].wr.rdma.rkey = rl->rem_rkey;
      nwr++;
    }
    if (have_last) {
      sge[nwr] = last_sge;
      wr[nwr] = last;
      wr[nwr].sg_list = &sge[nwr];
    } else {
      /* No data on this QP: a zero-byte write carries the immediate. */
      wr[nwr].num_sge = 0;
      wr[nwr].wr.rdma.remote_addr = rem_sizes;
      wr[nwr].wr.rdma.rkey = rl->rem_rkey;
    }
    wr[nwr].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr[nwr].imm_data = htonl(imm);
    wr[nwr].send_flags = IBV_SEND_SIGNALED;
    wr[nwr].wr_id = err ? RN_IB_WRID(RN_IB_WR_FIFO, 0)
                        : RN_IB_WRID(RN_IB_WR_SEND, (uint32_t)(lead - c->send_reqs));
    nwr++;
    for (int w = 0; w + 1 < nwr; w++) wr[w].next = &wr[w + 1];
    RN_CHECK(rn_ibv_post_send(qp, wr));
  }
  if (lead) lead->expected = nused;
  return ncclSuccess;
}

static ncclResult_t rn_ib_dead_peer(struct rn_ib_comm *c, const char *what) {
  RN_WARN("%s QP %u: peer %s closed the connection while a %s was pending",
          c->rail[0].port->nic->name, c->rail[0].qp[0]->qp_num, c->peer, what);
  rn_ib_fail(c, ncclRemoteError);
  return c->error;
}

ncclResult_t rn_ib_isend(void *scomm, void *data, size_t size, int tag, void *mhp, void **req) {
  struct rn_ib_comm *c = scomm;
  *req = NULL;
  if (c->error) return c->error;
  int slot = (int)(c->seq % RN_IB_SLOTS);
  struct rn_ib_send_group *g = &c->group[slot];
  volatile struct rn_ib_fifo_elem *f = c->ctl->fifo[slot];
  uint64_t want = c->seq + 1;
  if (f[0].idx != want) {
    /* No receive posted yet: keep completions moving, notice a dead peer. */
    RN_CHECK(rn_ib_progress(c));
    if (rn_ib_peer_alive(c) != ncclSuccess) return rn_ib_dead_peer(c, "send");
    return ncclSuccess;
  }
  int n = f[0].n;
  if (n < 1 || n > RN_IB_MAX_RECVS) {
    RN_WARN("%s: FIFO slot %d announces %d buffers (peer %s)", c->rail[0].port->nic->name, slot, n,
            c->peer);
    rn_ib_fail(c, ncclRemoteError);
    return c->error;
  }
  for (int i = 1; i < n; i++)
    if (f[i].idx != want) return ncclSuccess; /* slot still landing */
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  if (g->matched == 0) g->n = n;
  int i;
  for (i = 0; i < n; i++)
    if (!g->req[i] && f[i].tag == tag) break;
  if (i == n) return ncclSuccess; /* tag belongs to a later group: retry */
  struct rn_ib_mh *mh = mhp;
  if (size > 0 && (!mh || mh->nrails < c->nrails)) {
    RN_WARN("send of %zu bytes (tag %d) without a registration for this comm", size, tag);
    return ncclInvalidArgument;
  }
  struct rn_ib_req *r = rn_ib_send_req_get(c);
  if (!r) return ncclSuccess; /* cannot happen: the pool holds a full FIFO's worth */
  r->slot = slot;
  r->size[0] = size;
  g->req[i] = r;
  g->data[i] = data;
  g->mh[i] = mh;
  g->size[i] = size;
  g->matched++;
  if (size > f[i].size) {
    RN_WARN("send of %zu bytes (tag %d) to %s exceeds the posted receive buffer of %llu bytes",
            size, tag, c->peer, (unsigned long long)f[i].size);
    /* Tell the receiver too: refused group, sizes say why. */
    for (int k = 0; k < n; k++)
      if (!g->req[k]) g->size[k] = 0;
    (void)rn_ib_post_group(c, slot, g, f, NULL, 1);
    rn_ib_fail(c, ncclInvalidUsage);
    rn_ib_req_end(r);
    return ncclInvalidUsage;
  }
  if (g->matched == n) {
    struct rn_ib_req *lead = g->req[0];
    lead->n = n;
    for (int k = 0; k < n; k++) lead->member[k] = (int)(g->req[k] - c->send_reqs);
    ncclResult_t res = rn_ib_post_group(c, slot, g, f, lead, 0);
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

ncclResult_t rn_ib_irecv(void *rcomm, int n, void **data, const size_t *sizes, const int *tags,
                         void **mhs, void **req) {
  struct rn_ib_comm *c = rcomm;
  *req = NULL;
  if (c->error) return c->error;
  int slot = (int)(c->seq % RN_IB_SLOTS);
  struct rn_ib_req *r = &c->recv_reqs[slot];
  if (r->kind) return ncclSuccess; /* RN_IB_SLOTS receives in flight: retry later */
  struct rn_ib_fifo_elem *e = c->ctl->fifo[slot];
  for (int i = 0; i < n; i++) {
    struct rn_ib_mh *mh = mhs ? mhs[i] : NULL;
    if (sizes[i] > 0 && (!mh || mh->nrails < c->nrails)) {
      RN_WARN("receive of %zu bytes (tag %d) without a registration for this comm", sizes[i],
              tags[i]);
      return ncclInvalidArgument;
    }
    memset(&e[i], 0, sizeof(e[i]));
    e[i].addr = (uintptr_t)data[i];
    e[i].size = sizes[i];
    for (int k = 0; k < c->nrails && sizes[i] > 0; k++) e[i].rkey[k] = rn_ib_mh_mr(mh, k)->rkey;
    e[i].tag = tags[i];
    e[i].n = (uint16_t)n;
    e[i].idx = c->seq + 1;
  }
  int rail;
  struct ibv_qp *qp = rn_ib_qp(c, (int)(c->seq % (uint64_t)rn_ib_qp_count(c)), &rail);
  struct ibv_sge sge = {.addr = (uintptr_t)e,
                        .length = (uint32_t)(sizeof(*e) * (size_t)n),
                        .lkey = c->rail[rail].ctl_mr->lkey};
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = RN_IB_WRID(RN_IB_WR_FIFO, slot);
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr =
      c->rem_ctl + offsetof(struct rn_ib_ctl, fifo) + (uint64_t)slot * sizeof(c->ctl->fifo[0]);
  wr.wr.rdma.rkey = c->rail[rail].rem_rkey;
  ncclResult_t res = rn_ibv_post_send(qp, &wr);
  if (res != ncclSuccess) {
    rn_ib_fail(c, res);
    return res;
  }
  rn_ib_req_start(r, c, RN_IB_REQ_RECV);
  r->slot = slot;
  r->n = n;
  r->inline_size = -1;
  for (int i = 0; i < n; i++) {
    r->size[i] = sizes[i];
    r->tag[i] = tags[i];
  }
  c->seq++;
  *req = r;
  return ncclSuccess;
}

ncclResult_t rn_ib_iflush(void *rcomm, int n, void **data, const int *sizes, void **mhs,
                          void **req) {
  struct rn_ib_comm *c = rcomm;
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
  for (int k = 0; k < c->nrails; k++) {
    struct rn_ib_rail *rl = &c->rail[k];
    if (!rl->flush_qp) continue;
    /* A 1-byte READ of the received buffer: it completes only after the
     * NIC's earlier writes to GPU memory have landed. */
    struct ibv_sge sge = {
        .addr = (uintptr_t)&c->ctl->flush[0], .length = 1, .lkey = rl->ctl_mr->lkey};
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = RN_IB_WRID(RN_IB_WR_FLUSH, (uint32_t)(r - c->flush_reqs));
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

static ncclResult_t rn_ib_recv_sizes(struct rn_ib_comm *c, struct rn_ib_req *r, size_t *sizes) {
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < r->n; i++) {
    size_t got = r->inline_size >= 0 ? (size_t)r->inline_size
                                     : (size_t)((volatile uint64_t *)c->ctl->sizes[r->slot])[i];
    if (got > r->size[i] || (r->error && got > r->size[i])) {
      RN_WARN("%s: peer %s sent %zu bytes for a %zu-byte receive buffer (tag %d)",
              c->rail[0].port->nic->name, c->peer, got, r->size[i], r->tag[i]);
      res = ncclInvalidUsage;
    }
    if (sizes) sizes[i] = got;
  }
  if (r->error && res == ncclSuccess) {
    RN_WARN("%s: peer %s refused a receive of %d buffer(s) (a send exceeded its buffer)",
            c->rail[0].port->nic->name, c->peer, r->n);
    res = ncclInvalidUsage;
  }
  return res;
}

ncclResult_t rn_ib_test(void *req, int *done, size_t *sizes, int *nsizes) {
  struct rn_ib_req *r = req;
  struct rn_ib_comm *c = r->comm;
  *done = 0;
  ncclResult_t res = rn_ib_progress(c);
  if (res == ncclSuccess && !rn_ib_req_done(r) && rn_ib_peer_alive(c) != ncclSuccess) {
    /* The peer's socket closed: anything it sent before is already in our
     * CQ (its completion preceded the close), so look once more. */
    res = rn_ib_progress(c);
    if (res == ncclSuccess && !rn_ib_req_done(r))
      res = rn_ib_dead_peer(c, r->kind == RN_IB_REQ_SEND ? "send" : "receive");
  }
  if (res != ncclSuccess) return res;
  if (!rn_ib_req_done(r)) return ncclSuccess;
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
