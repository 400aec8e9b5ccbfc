/* The TCP data path: the comm's request pool and isend/irecv/test, with
 * the matching rule of tcp.h. */
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "railnet/param.h"
#include "tcp.h"

/* The lowest free request: those ever used stay a prefix of the pool,
 * which rn_tcp_comm_free relies on. */
static struct rn_tcp_req *rn_tcp_req_alloc(struct rn_tcp_comm *c, int is_recv) {
  for (int i = 0; i < RN_TCP_NREQS; i++) {
    struct rn_tcp_req *r = &c->reqs[i];
    if (r->state != RN_TCP_REQ_FREE) continue;
    /* The new generation first: a stream thread that then reads the
     * cleared acked reads this generation after it (rn_tcp_chunk_stale),
     * so a chunk of the old send queued there is stale either way. */
    atomic_store(&r->gen, atomic_load(&r->gen) + 1);
    atomic_store(&r->acked, 0);
    atomic_store(&r->unsent, 0);
    memset(r, 0, offsetof(struct rn_tcp_req, gen));
    rn_req_base_start(&r->base, &c->base);
    r->comm = c;
    r->state = RN_TCP_REQ_ACTIVE;
    r->is_recv = is_recv;
    /* The sweep takes a comm off its list only under c->lock, as here. */
    if (c->nactive++ == 0) rn_tcp_comm_waiting(c);
    return r;
  }
  return NULL;
}

static void rn_tcp_req_free(struct rn_tcp_req *r) {
  rn_req_base_end(&r->base);
  r->state = RN_TCP_REQ_FREE;
  r->comm->nactive--;
}

/* Enter test: refuse a comm that already failed, else take its lock. */
static ncclResult_t rn_tcp_comm_lock(struct rn_tcp_comm *c, const char *what) {
  if (atomic_load(&c->shut_due)) { /* a helper thread's failure: the sockets, now */
    pthread_mutex_lock(&c->lock);
    rn_tcp_shut(c);
    pthread_mutex_unlock(&c->lock);
  }
  RN_CHECK(rn_tcp_failed(c, what));
  pthread_mutex_lock(&c->lock);
  c->touched = 1;
  return ncclSuccess;
}

/* Leave isend/irecv (c->lock held): on a failed comm, a request whose
 * test() returns the comm's error (rn_req_doomed says when); with no
 * request free, the error itself. */
static ncclResult_t rn_tcp_post_end(struct rn_tcp_comm *c, int failed_before, ncclResult_t res,
                                    int is_recv, const char *call, void **req) {
  if (!rn_req_doomed(atomic_load(&c->error) != ncclSuccess, failed_before, res)) return res;
  if (*req == NULL) {
    struct rn_tcp_req *r = rn_tcp_req_alloc(c, is_recv);
    if (r == NULL) return rn_tcp_failed(c, call);
    *req = r;
  }
  return ncclSuccess;
}

/* Calls of this thread that found nothing to do: an incomplete test, an
 * isend or irecv that must be retried.  A thread that keeps making them
 * may be waiting for its peer, and that peer for a clear-to-send one of
 * this process's receives deferred (each side posted a receive, then a
 * send it now retries or tests alone): every RN_TCP_CTS_POLLS of them
 * sends the deferred ones.  Per thread, so no proxy thread slows another. */
static _Thread_local unsigned rn_tcp_idle_calls;

static void rn_tcp_idle_call(void) {
  if (++rn_tcp_idle_calls % RN_TCP_CTS_POLLS == 0) {
    rn_tcp_comm_flush_deferred();
    rn_tcp_comm_sweep_waiting();
  }
}

/* Every 64 calls of a thread, whatever they found, look for data streams
 * gone idle on any comm (comm.c: at most a few times a second in all). */
static _Thread_local unsigned rn_tcp_calls;

static void rn_tcp_any_call(void) {
  if (++rn_tcp_calls % 64 == 0) rn_tcp_comm_sweep_idle();
}

/* A send matched to buffer idx of group seq, which is the head group:
 * inline on the control connection, or announced there and streamed. */
static ncclResult_t rn_tcp_isend_matched(struct rn_tcp_comm *c, void *data, size_t size, int tag,
                                         uint64_t seq, int idx, void **req) {
  const struct rn_tcp_group *m = &c->group[seq % RN_TCP_RING];
  int too_big = size > m->sizes[idx];
  int inline_send = too_big || size <= c->inline_max;
  /* No data stream yet: they open now (open.c).  Meanwhile a message of
   * at most RN_TCP_OPEN_INLINE goes inline, now, needing of the receiver
   * no more than a streamed one did (it fits the sockets' buffers); a
   * larger one is announced at once and its chunks follow once the
   * streams are there.  Either way the send has its request at once.  On
   * a device of several rails only the first goes inline: the control
   * connection is one rail, and a window of them sent there would keep
   * the others idle until it drained (on four rails of 150 Mbit/s, the
   * first 0.5 s); the rest wait the streams' round trip and are striped. */
  int later = !inline_send && c->lazy.state != RN_TCP_STREAMS_UP;
  if (later) RN_CHECK(rn_tcp_lazy_want(c, size));
  const int striped = c->lazy.u.tx.nlocals > 1; /* its rails, the standby not counted */
  if (later && size <= RN_TCP_OPEN_INLINE && !(striped && c->lazy.u.tx.open_inline > 0)) {
    later = 0;
    inline_send = 1;
    c->lazy.inline_bytes += size;
    c->lazy.u.tx.open_inline++;
  }
  uint32_t nth, claim;
  RN_CHECK(rn_tcp_send_numbers(c, tag, &nth, &claim));
  struct rn_tcp_req *r = rn_tcp_req_alloc(c, 0);
  if (r == NULL) return ncclSuccess;
  r->size = size;
  uint32_t grid = inline_send ? 0 : rn_tcp_chunk_grid(c, size);
  struct rn_tcp_data d = {.seq = seq,
                          .size = size,
                          .msg = c->msg_out,
                          .tag = tag,
                          .idx = (uint32_t)idx,
                          .grid = grid,
                          .nth = nth,
                          .claim = claim};
  uint32_t plen = (inline_send && !too_big) ? (uint32_t)size : 0;
  r->awaits_ack = !inline_send && c->ack; /* complete once the receiver acknowledges it */
  /* A message too large to go eagerly: the next like it needs its
   * clear-to-send as soon as its receive is posted. */
  const int credit = size > c->eager_max ? RN_TCP_DATA_CREDIT : 0;
  rn_tcp_wire_seal(&d, RN_TCP_MSG_DATA,
                   (too_big         ? RN_TCP_DATA_TOO_BIG
                    : inline_send   ? 0
                    : r->awaits_ack ? RN_TCP_DATA_STREAMED | RN_TCP_DATA_ACK
                                    : RN_TCP_DATA_STREAMED) |
                       credit,
                   plen);
  /* With the data streams open a streamed message needs no header on the
   * control connection: its chunks claim the buffer (CLAIM), so each
   * costs the sender one write and the receiver one read, on one stream.
   * Otherwise the header goes on the control connection: it carries
   * inline payloads, and announces chunks that follow once the streams
   * are open. */
  const int claims = !inline_send && !later;
  struct rn_tcp_chunk ch = {.tag = tag, .nth = nth, .claim = claim};
  ch.p.flags = RN_TCP_CHUNK_CLAIM | (r->awaits_ack ? RN_TCP_CHUNK_ACK : 0);
  if ((!claims && !rn_tcp_ctl_room(c)) ||
      (claims && !rn_tcp_enqueue(c, r, data, size, grid, seq, (uint32_t)idx, &ch))) {
    rn_tcp_req_free(r); /* queues full: retry later */
    return ncclSuccess;
  }
  if (!claims) {
    rn_tcp_ctl_queue(c, &d, sizeof(d), data, plen, r);
    c->msg_out++;
  }
  rn_tcp_sent(c, tag);
  if (later) rn_tcp_lazy_defer(c, r, data, grid, seq, (uint32_t)idx);
  if (!inline_send) c->lazy.used_ms = rn_clock_ms();
  if (r->awaits_ack) {
    c->group[seq % RN_TCP_RING].sreq[idx] = r;
    c->acks_asked++;
  }
  if (too_big) {
    RN_WARN("send of %zu bytes to %s exceeds the posted receive of %llu bytes (tag %d)", size,
            c->peer, (unsigned long long)m->sizes[idx], tag);
    r->error = ncclInvalidUsage;
  }
  rn_tcp_send_claim(c, seq, idx);
  *req = r;
  return rn_tcp_ctl_flush(c);
}

/* Half the eager credit is used once this send goes: from then on each
 * send reads the clear-to-sends that came before it goes eagerly, and
 * asks the receiver (CREDIT) not to hold them back. */
static int rn_tcp_eager_low(const struct rn_tcp_comm *c, size_t size) {
  return c->neager + 1 >= RN_TCP_EAGER_WINDOW / 2 ||
         c->eager_bytes + size >= RN_TCP_EAGER_BYTES / 2;
}

/* A small send that leaves before its match is known at the sender (or
 * known but not in the head group): only its tag travels; both sides
 * match it by the rule. */
static ncclResult_t rn_tcp_isend_eager(struct rn_tcp_comm *c, void *data, size_t size, int tag,
                                       void **req) {
  if (!rn_tcp_ctl_room(c)) return ncclSuccess;
  uint32_t nth, claim;
  RN_CHECK(rn_tcp_send_numbers(c, tag, &nth, &claim));
  struct rn_tcp_req *r = rn_tcp_req_alloc(c, 0);
  if (r == NULL) return ncclSuccess;
  r->size = size;
  /* The receiver may batch clear-to-sends: ask for them now once half the
   * credit is used. */
  const int low = rn_tcp_eager_low(c, size);
  struct rn_tcp_data d = {.size = size, .msg = c->msg_out, .tag = tag, .nth = nth, .claim = claim};
  rn_tcp_wire_seal(&d, RN_TCP_MSG_DATA, RN_TCP_DATA_EAGER | (low ? RN_TCP_DATA_CREDIT : 0),
                   (uint32_t)size);
  rn_tcp_ctl_queue(c, &d, sizeof(d), data, size, r);
  c->msg_out++;
  rn_tcp_sent(c, tag);
  c->eager[c->neager++] = (struct rn_tcp_eager){.tag = tag, .size = size};
  c->eager_bytes += size;
  *req = r;
  RN_CHECK(rn_tcp_match_eager(c)); /* claims its buffer now if its CTS is here */
  return rn_tcp_ctl_flush(c);
}

/* One attempt at a send with what this side knows now.  *want_cts when
 * reading the control connection could let it go. */
static ncclResult_t rn_tcp_isend_try(struct rn_tcp_comm *c, void *data, size_t size, int tag,
                                     int progressed, void **req, int *want_cts) {
  uint64_t seq = 0;
  int idx = 0;
  int known = rn_tcp_send_target(c, tag, &seq, &idx);
  *want_cts = 0;
  if (known && seq == c->send_head) return rn_tcp_isend_matched(c, data, size, tag, seq, idx, req);
  /* A small send goes eagerly without first reading the control
   * connection (one system call less on the round trip); clear-to-sends
   * are collected in batches, at the latest when half the eager credit is
   * used.  One too big for a buffer already known waits for the head,
   * where it fails both sides at once. */
  int eager_ok = size <= c->eager_max && c->neager < RN_TCP_EAGER_WINDOW - 1 &&
                 c->eager_bytes + size <= RN_TCP_EAGER_BYTES &&
                 !(known && size > c->group[seq % RN_TCP_RING].sizes[idx]);
  if (eager_ok && (progressed || known || !rn_tcp_eager_low(c, size)))
    return rn_tcp_isend_eager(c, data, size, tag, req);
  *want_cts = !progressed;
  return ncclSuccess; /* *req stays NULL: NCCL retries */
}

ncclResult_t rn_tcp_isend(void *scomm, void *data, size_t size, int tag, void *mh, void **req) {
  (void)mh;
  struct rn_tcp_comm *c = scomm;
  ncclResult_t res = ncclSuccess;
  if (c->urgent) rn_tcp_urgent_called();
  *req = NULL;
  pthread_mutex_lock(&c->lock);
  c->touched = 1;
  int failed_before = atomic_load(&c->error) != ncclSuccess;
  if (failed_before) goto out_unlock;
  if (atomic_load(&c->peer_closed)) {
    /* No group can be posted any more: this send can never match. */
    res = rn_tcp_fail(c, ncclRemoteError,
                      "isend (tag %d, %zu bytes): the receiver closed the connection", tag, size);
    goto out_unlock;
  }
  int want_cts = 0;
  RN_CHECK_GOTO(rn_tcp_isend_try(c, data, size, tag, 0, req, &want_cts), res, out_unlock);
  if (want_cts) {
    RN_CHECK_GOTO(rn_tcp_progress(c), res, out_unlock);
    RN_CHECK_GOTO(rn_tcp_isend_try(c, data, size, tag, 1, req, &want_cts), res, out_unlock);
    /* Still waiting for a clear-to-send, which the receiver may hold back
     * for a batch: ask for it, once until one comes. */
    if (*req == NULL && !c->want_sent && rn_tcp_ctl_room(c)) {
      struct rn_tcp_want w = {.msg = c->msg_out};
      rn_tcp_wire_seal(&w, RN_TCP_MSG_WANT, 0, 0);
      rn_tcp_ctl_queue(c, &w, sizeof(w), NULL, 0, NULL);
      c->msg_out++;
      c->want_sent = 1;
      RN_CHECK_GOTO(rn_tcp_ctl_flush(c), res, out_unlock);
    }
  }
out_unlock:
  res = rn_tcp_post_end(c, failed_before, res, 0, "isend", req);
  pthread_mutex_unlock(&c->lock);
  if (res == ncclSuccess && *req == NULL) rn_tcp_idle_call();
  rn_tcp_any_call();
  return res;
}

ncclResult_t rn_tcp_irecv(void *rcomm, int n, void **data, const size_t *sizes, const int *tags,
                          void **mhs, void **req) {
  (void)mhs;
  struct rn_tcp_comm *c = rcomm;
  ncclResult_t res = ncclSuccess;
  *req = NULL;
  pthread_mutex_lock(&c->lock);
  c->touched = 1;
  int failed_before = atomic_load(&c->error) != ncclSuccess;
  if (failed_before) goto out_unlock;
  int slot = (int)(c->recv_seq % RN_TCP_RING);
  if (c->ring[slot] != NULL) goto out_unlock; /* too many in flight: retry */
  if (!rn_tcp_ctl_room(c)) goto out_unlock;
  /* Each buffer's rank among its tag's (the matching rule's k): the tag
   * counts are grown before anything else changes. */
  for (int i = 0; i < n; i++) {
    if (rn_tcp_tagcount(&c->posted_tags, tags[i]) == NULL) {
      res = rn_tcp_fail(c, ncclSystemError, "out of memory for the receive counts of a comm from %s",
                        c->peer);
      goto out_unlock;
    }
  }
  struct rn_tcp_req *r = rn_tcp_req_alloc(c, 1);
  if (r == NULL) goto out_unlock;
  struct rn_tcp_cts m = {.seq = c->recv_seq, .msg = c->msg_out, .n = (uint32_t)n};
  r->seq = c->recv_seq;
  r->n = n;
  for (int i = n; i < RN_MAX_RECVS; i++) m.sizes[i] = RN_TCP_NO_BUFFER;
  for (int i = 0; i < n; i++) {
    r->buf[i] = data[i];
    r->posted[i] = sizes[i];
    r->tag[i] = tags[i];
    r->ord[i] = (*rn_tcp_tagcount(&c->posted_tags, tags[i]))++;
    if (sizes[i] > 0) atomic_fetch_add(&c->unclaimed, 1);
    m.sizes[i] = sizes[i];
    m.tags[i] = tags[i];
  }
  /* A clear-to-send is needed at once only by a send that cannot go
   * eagerly; while the sender's messages arrive eagerly with credit to
   * spare (or the buffers are small enough for every message to), it may
   * wait for a batch (rn_tcp_ctl_flush), and in a request/response
   * exchange neither delays the response nor costs a sendmsg of its own.
   * A sender that needs one says so (CREDIT, WANT), and from then on they
   * leave at once; a thread whose calls keep finding nothing to do sends
   * them too (rn_tcp_idle_call). */
  if (atomic_exchange(&c->chunk_credit, 0)) { /* as a DATA header with CREDIT would */
    c->peer_low = 1;
    c->peer_first = 0;
  }
  int small = 1;
  for (int i = 0; i < n; i++) small &= sizes[i] <= c->eager_max;
  small |= !c->peer_low;
  rn_tcp_wire_seal(&m, RN_TCP_MSG_CTS, 0, 0);
  if (small)
    rn_tcp_ctl_queue_lazy(c, &m);
  else
    rn_tcp_ctl_queue(c, &m, sizeof(m), NULL, 0, NULL);
  c->msg_out++;
  pthread_mutex_lock(&c->rx_lock); /* a helper's chunk may claim in it at once */
  c->ring[slot] = r;
  c->recv_seq++;
  pthread_mutex_unlock(&c->rx_lock);
  /* Held eager messages of this group's tags land before its CTS leaves. */
  RN_CHECK_GOTO(rn_tcp_drain_held(c), res, out_unlock);
  if (small && c->lazy_polls < RN_TCP_CTS_POLLS) {
    rn_tcp_comm_defer_cts(c);
  } else {
    RN_CHECK_GOTO(rn_tcp_ctl_flush(c), res, out_unlock);
  }
  *req = r;
out_unlock:
  res = rn_tcp_post_end(c, failed_before, res, 1, "irecv", req);
  pthread_mutex_unlock(&c->lock);
  if (res == ncclSuccess && *req == NULL) rn_tcp_idle_call();
  rn_tcp_any_call();
  return res;
}

/* Nothing more can arrive for an incomplete request: the peer closed the
 * control connection and, on the receive side, every data stream too, or
 * sent its BYE (after which no message starts) and no chunk claimed the
 * rest of r's buffers within the bound below. */
static int rn_tcp_peer_gone(struct rn_tcp_comm *c, struct rn_tcp_req *r) {
  if (!atomic_load(&c->peer_closed)) return 0;
  if (!c->is_recv) return 1;
  int alive = 0;
  for (int i = 0; i < c->nstreams; i++) alive |= !atomic_load(&c->stream[i].dead);
  if (!alive) return 1;
  /* After a BYE no message starts, but a chunk claiming a buffer may
   * still be on a data stream, which the peer closes with its comm: a
   * buffer still unclaimed once they ended, or after the rail timeout,
   * never fills. */
  if (c->peer_bye) {
    pthread_mutex_lock(&c->rx_lock);
    int unclaimed = r->claimed != (1u << r->n) - 1;
    pthread_mutex_unlock(&c->rx_lock);
    if (unclaimed && rn_clock_ms() - c->bye_ms >= rn_params()->rail_timeout_ms) return 1;
  }
  return 0;
}

static int rn_tcp_req_complete(struct rn_tcp_req *r) {
  /* A streamed send completes when the receiver says every byte landed:
   * until then a failed rail's chunks can still be sent again. */
  if (!r->is_recv)
    return !r->ctl_pending &&
           (r->awaits_ack ? atomic_load(&r->acked) && atomic_load(&r->copying) == 0
                          : atomic_load_explicit(&r->unsent, memory_order_acquire) == 0);
  /* Every buffer matched (its header seen) and all its bytes landed: with
   * helper threads a streamed message's chunks can beat its header.  No
   * stream is still writing a copy of a chunk into it, and the ACK of each
   * streamed buffer is queued (ahead of any clear-to-send that reuses the
   * group's slot). */
  struct rn_tcp_comm *c = r->comm;
  uint32_t full = (1u << r->n) - 1;
  pthread_mutex_lock(&c->rx_lock);
  int done = r->claimed == full && r->filled == full && r->writers == 0;
  const uint32_t streamed = r->ack_wanted;
  pthread_mutex_unlock(&c->rx_lock);
  if (done && (r->acks_queued & streamed) != streamed) {
    atomic_store(&c->ack_due, 1);
    rn_tcp_queue_acks(c);
    done = (r->acks_queued & streamed) == streamed;
  }
  return done;
}

ncclResult_t rn_tcp_test(void *request, int *done, size_t *sizes, int *nsizes) {
  struct rn_tcp_req *r = request;
  struct rn_tcp_comm *c = r->comm;
  ncclResult_t res = ncclSuccess;
  *done = 0;
  if (c->urgent) rn_tcp_urgent_called();
  RN_CHECK(rn_tcp_comm_lock(c, "test"));
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
    complete = res == ncclSuccess && rn_tcp_req_complete(r);
  }
  if (!complete) {
    /* Small receives' clear-to-sends waiting for a batch leave after this
     * many tests of an incomplete receive (rn_tcp_ctl_flush). */
    if (r->is_recv && c->out_lazy > 0) c->lazy_polls++;
    if (res == ncclSuccess && rn_tcp_peer_gone(c, r))
      res =
          rn_tcp_fail(c, ncclRemoteError, "the peer closed the connection with this %s incomplete",
                      r->is_recv ? "receive" : "send");
    const int helped = c->nthreads > 0; /* read under the lock a sweep writes it under */
    pthread_mutex_unlock(&c->lock);
    /* NCCL polls test() in a tight loop; on small hosts the helper threads
     * need that core to move the data, and a latency-critical comm's
     * thread (rn_tcp_yields) needs it to answer. */
    if (res == ncclSuccess && (helped || rn_tcp_yields(c))) sched_yield();
    if (res == ncclSuccess) rn_tcp_idle_call();
    rn_tcp_any_call();
    return res;
  }
  res = r->error;
  if (r->is_recv) {
    for (int i = 0; i < r->n; i++) sizes[i] = r->error == ncclSuccess ? r->size_of[i] : 0;
    pthread_mutex_lock(&c->rx_lock);
    c->ring[r->seq % RN_TCP_RING] = NULL;
    pthread_mutex_unlock(&c->rx_lock);
    /* Its ACKs leave now: the sender's send completes only with them.  A
     * failure here fails the comm; later calls report it. */
    (void)rn_tcp_ctl_flush(c);
  } else {
    sizes[0] = r->size;
  }
  *nsizes = r->is_recv ? r->n : 1;
  rn_tcp_req_free(r);
  *done = 1;
out_unlock:
  pthread_mutex_unlock(&c->lock);
  rn_tcp_any_call();
  return res;
}
