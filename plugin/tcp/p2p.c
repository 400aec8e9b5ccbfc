/* The TCP data path: the comm's request pool and isend/irecv/test. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include "railnet/check.h"
#include "tcp.h"

static struct rn_tcp_req *rn_tcp_req_alloc(struct rn_tcp_comm *c, int is_recv) {
  for (int i = 0; i < RN_TCP_NREQS; i++) {
    struct rn_tcp_req *r = &c->reqs[i];
    if (r->state != RN_TCP_REQ_FREE) continue;
    memset(r, 0, sizeof(*r));
    rn_req_base_start(&r->base, &c->base);
    r->comm = c;
    r->state = RN_TCP_REQ_ACTIVE;
    r->is_recv = is_recv;
    return r;
  }
  return NULL;
}

static void rn_tcp_req_free(struct rn_tcp_req *r) {
  rn_req_base_end(&r->base);
  r->state = RN_TCP_REQ_FREE;
}

/* Enter isend/irecv: refuse a comm that already failed, else take its
 * lock. */
static ncclResult_t rn_tcp_comm_lock(struct rn_tcp_comm *c, const char *what) {
  int e = atomic_load(&c->error);
  if (e != ncclSuccess) {
    RN_WARN("%s on a comm that already failed (error %d)", what, e);
    return (ncclResult_t)e;
  }
  pthread_mutex_lock(&c->lock);
  return ncclSuccess;
}

/* A small message whose clear-to-send has not arrived goes at once; the
 * receiver matches it by tag (or holds it until its receive is posted). */
static ncclResult_t rn_tcp_isend_eager(struct rn_tcp_comm *c, void *data, size_t size, int tag,
                                       void **req) {
  if (rn_tcp_eager_unmatched(c) == RN_TCP_EAGER_WINDOW - 1 || !rn_tcp_ctl_room(c))
    return ncclSuccess;
  struct rn_tcp_req *r = rn_tcp_req_alloc(c, 0);
  if (r == NULL) return ncclSuccess;
  r->size = size;
  struct rn_tcp_data d = {.type = RN_TCP_DATA,
                          .size = size,
                          .flags = RN_TCP_F_EAGER,
                          .inline_len = (uint32_t)size,
                          .tag = tag};
  rn_tcp_ctl_queue(c, &d, sizeof(d), data, size, r);
  c->eager_tag[c->eager_tail] = tag;
  c->eager_tail = (c->eager_tail + 1) % RN_TCP_EAGER_WINDOW;
  *req = r;
  return ncclSuccess;
}

ncclResult_t rn_tcp_isend(void *scomm, void *data, size_t size, int tag, void *mh, void **req) {
  (void)mh;
  struct rn_tcp_comm *c = scomm;
  ncclResult_t res = ncclSuccess;
  RN_CHECK(rn_tcp_comm_lock(c, "isend"));
  int slot = (int)(c->send_seq % RN_TCP_RING);
  /* A small send goes eagerly without first reading the control
   * connection (one system call less on the round trip); clear-to-sends
   * are collected in batches, at the latest when half the eager window is
   * used. */
  if (size <= c->eager_max && rn_tcp_eager_unmatched(c) < RN_TCP_EAGER_WINDOW / 2 &&
      !atomic_load(&c->peer_closed) && (!c->cts_valid[slot] || c->eager_head != c->eager_tail)) {
    RN_CHECK_GOTO(rn_tcp_isend_eager(c, data, size, tag, req), res, out_unlock);
    RN_CHECK_GOTO(rn_tcp_ctl_flush(c), res, out_unlock);
    goto out_unlock;
  }
  /* Look for the clear-to-send only when it has not arrived yet. */
  if (!c->cts_valid[slot] || c->eager_head != c->eager_tail) {
    RN_CHECK_GOTO(rn_tcp_progress(c), res, out_unlock);
    rn_tcp_match_eager(c);
    slot = (int)(c->send_seq % RN_TCP_RING);
  }
  if (!c->cts_valid[slot] || c->eager_head != c->eager_tail) {
    if (atomic_load(&c->peer_closed)) {
      RN_WARN("isend: the receiver closed the connection");
      res = ncclRemoteError;
    } else if (size <= c->eager_max) {
      RN_CHECK_GOTO(rn_tcp_isend_eager(c, data, size, tag, req), res, out_unlock);
      RN_CHECK_GOTO(rn_tcp_ctl_flush(c), res, out_unlock);
    }
    goto out_unlock; /* else no receive posted yet: *req stays NULL, NCCL retries */
  }
  struct rn_tcp_cts *m = &c->cts[slot];
  int mismatch, idx = rn_tcp_match_buffer((int)m->n, m->tags, c->cts_claimed[slot], tag, &mismatch);
  if (mismatch) {
    RN_WARN("isend with tag %d matches no buffer of the posted receive (seq %llu)", tag,
            (unsigned long long)m->seq);
    res = ncclInvalidUsage;
    goto out_unlock;
  }
  struct rn_tcp_req *r = rn_tcp_req_alloc(c, 0);
  if (r == NULL) goto out_unlock;
  r->size = size;
  int too_big = size > m->sizes[idx];
  int inline_send = too_big || size <= c->inline_max;
  struct rn_tcp_data d = {.type = RN_TCP_DATA,
                          .idx = (uint32_t)idx,
                          .seq = m->seq,
                          .size = size,
                          .flags = too_big       ? RN_TCP_F_TOO_BIG
                                   : inline_send ? 0
                                                 : RN_TCP_F_STREAMED,
                          .inline_len = (inline_send && !too_big) ? (uint32_t)size : 0,
                          .tag = tag};
  /* The header always goes on the control connection: it carries inline
   * payloads, and announces streamed ones so the receiver knows to poll. */
  if (!rn_tcp_ctl_room(c) ||
      (!inline_send && !rn_tcp_enqueue(c, r, data, size, m->seq, (uint32_t)idx))) {
    rn_tcp_req_free(r); /* queues full: retry later */
    goto out_unlock;
  }
  rn_tcp_ctl_queue(c, &d, sizeof(d), data, d.inline_len, r);
  if (too_big) {
    RN_WARN("send of %zu bytes exceeds the posted receive of %llu bytes (tag %d)", size,
            (unsigned long long)m->sizes[idx], tag);
    r->error = ncclInvalidUsage;
  }
  rn_tcp_cts_claim(c, slot, idx);
  RN_CHECK_GOTO(rn_tcp_ctl_flush(c), res, out_unlock);
  *req = r;
out_unlock:
  pthread_mutex_unlock(&c->lock);
  rn_tcp_comm_flush_deferred();
  return res;
}

ncclResult_t rn_tcp_irecv(void *rcomm, int n, void **data, const size_t *sizes, const int *tags,
                          void **mhs, void **req) {
  (void)mhs;
  struct rn_tcp_comm *c = rcomm;
  ncclResult_t res = ncclSuccess;
  RN_CHECK(rn_tcp_comm_lock(c, "irecv"));
  int slot = (int)(c->recv_seq % RN_TCP_RING);
  if (atomic_load(&c->ring[slot]) != NULL) goto out_unlock; /* too many in flight: retry */
  struct rn_tcp_req *r = rn_tcp_req_alloc(c, 1);
  if (r == NULL) goto out_unlock;
  struct rn_tcp_cts m = {.type = RN_TCP_CTS, .n = (uint32_t)n, .seq = c->recv_seq};
  r->seq = c->recv_seq;
  r->n = n;
  for (int i = 0; i < n; i++) {
    r->buf[i] = data[i];
    r->posted[i] = sizes[i];
    r->tag[i] = tags[i];
    m.sizes[i] = sizes[i];
    m.tags[i] = tags[i];
  }
  atomic_store(&r->pending, n);
  if (!rn_tcp_ctl_queue(c, &m, sizeof(m), NULL, 0, NULL)) {
    rn_tcp_req_free(r);
    goto out_unlock;
  }
  atomic_store_explicit(&c->ring[slot], r, memory_order_release);
  c->recv_seq++;
  rn_tcp_drain_unexpected(c);
  /* A receive of small buffers only needs its clear-to-send for the
   * sender's credit (small sends go eagerly), so it may wait for this
   * process's next isend, or the test() of this receive: in a
   * request/response exchange it then
   * leaves after the response instead of delaying it.  A larger receive
   * sends it now, since a large send waits for it. */
  int small = 1;
  for (int i = 0; i < n; i++) small &= sizes[i] <= c->eager_max;
  if (small) {
    rn_tcp_comm_defer_cts(c);
  } else {
    RN_CHECK_GOTO(rn_tcp_ctl_flush(c), res, out_unlock);
  }
  *req = r;
out_unlock:
  pthread_mutex_unlock(&c->lock);
  return res;
}

/* Nothing more can arrive for an incomplete request: the peer closed the
 * control connection and, on the receive side, every data stream too. */
static int rn_tcp_peer_gone(struct rn_tcp_comm *c) {
  if (!atomic_load(&c->peer_closed)) return 0;
  if (!c->is_recv) return 1;
  for (int i = 0; i < c->nstreams; i++)
    if (!atomic_load(&c->stream[i].dead)) return 0;
  return 1;
}

static int rn_tcp_req_complete(struct rn_tcp_req *r) {
  /* A receive is done when every buffer's bytes landed and every message
   * of the group has been matched on the control connection (with helper
   * threads a streamed message's chunks can beat its header). */
  if (r->is_recv)
    return atomic_load_explicit(&r->pending, memory_order_acquire) == 0 &&
           r->comm->match_seq > r->seq;
  return atomic_load_explicit(&r->unsent, memory_order_acquire) == 0 && !r->ctl_pending;
}

ncclResult_t rn_tcp_test(void *request, int *done, size_t *sizes, int *nsizes) {
  struct rn_tcp_req *r = request;
  struct rn_tcp_comm *c = r->comm;
  ncclResult_t res = ncclSuccess;
  *done = 0;
  pthread_mutex_lock(&c->lock);
  if (r->state != RN_TCP_REQ_ACTIVE) {
    RN_WARN("test on a request that is not active");
    res = ncclInvalidArgument;
    goto out_unlock;
  }
  /* Progress only when needed: a send that left in isend is done without
   * another system call. */
  int complete = rn_tcp_req_complete(r);
  if (!complete) {
    res = rn_tcp_progress(c);
    complete = rn_tcp_req_complete(r);
  }
  if (!complete) {
    int e = atomic_load(&c->error);
    if (e == ncclSuccess && res == ncclSuccess && rn_tcp_peer_gone(c)) e = ncclRemoteError;
    if (e == ncclSuccess) e = res;
    if (e != ncclSuccess) {
      RN_WARN("%s of %s did not complete: connection to the peer failed (error %d)",
              r->is_recv ? "receive" : "send", r->is_recv ? "a group" : "a message", e);
      res = (ncclResult_t)e;
    }
    pthread_mutex_unlock(&c->lock);
    /* NCCL polls test() in a tight loop; on small hosts the helper threads
     * need that core to move the data. */
    if (res == ncclSuccess && c->nthreads > 0) sched_yield();
    return res;
  }
  res = r->error;
  if (r->is_recv)
    for (int i = 0; i < r->n; i++) sizes[i] = r->got[i];
  else
    sizes[0] = r->size;
  *nsizes = r->is_recv ? r->n : 1;
  if (r->is_recv) atomic_store(&c->ring[r->seq % RN_TCP_RING], NULL);
  rn_tcp_req_free(r);
  *done = 1;
out_unlock:
  pthread_mutex_unlock(&c->lock);
  return res;
}
