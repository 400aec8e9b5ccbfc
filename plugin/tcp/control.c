/* The TCP control connection: the output queue (clear-to-sends, data
 * headers with inline payloads, refusals), parsing what arrives, and
 * matching messages to posted buffers by NCCL's rule on both sides. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "railnet/check.h"
#include "tcp.h"

/* Write queued control messages, as many per sendmsg as fit in one iovec
 * array, so a clear-to-send and the data behind it leave in one segment. */
ncclResult_t rn_tcp_ctl_flush(struct rn_tcp_comm *c) {
  enum { RN_TCP_FLUSH_IOV = 64 };
  while (c->out_head != c->out_tail) {
    struct iovec iov[RN_TCP_FLUSH_IOV];
    int niov = 0;
    for (int i = c->out_head; i != c->out_tail && niov + 2 <= RN_TCP_FLUSH_IOV;
         i = (i + 1) % RN_TCP_OUT_QUEUE) {
      struct rn_tcp_ctl_out *e = &c->out[i];
      if (e->off < e->hlen) {
        iov[niov++] = (struct iovec){(char *)&e->hdr + e->off, e->hlen - e->off};
        if (e->plen) iov[niov++] = (struct iovec){(void *)e->payload, e->plen};
      } else {
        size_t done = e->off - e->hlen;
        iov[niov++] = (struct iovec){(void *)(e->payload + done), e->plen - done};
      }
    }
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
    ssize_t k = sendmsg(c->ctrl_fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      RN_WARN("control connection lost while sending: %s", k < 0 ? strerror(errno) : "closed");
      rn_tcp_set_error(c, ncclRemoteError);
      return ncclRemoteError;
    }
    /* Retire what went out. */
    size_t left = (size_t)k;
    while (left > 0) {
      struct rn_tcp_ctl_out *e = &c->out[c->out_head];
      size_t rest = e->hlen + e->plen - e->off;
      size_t sent = left < rest ? left : rest;
      e->off += sent;
      left -= sent;
      if (e->off < e->hlen + e->plen) break;
      if (e->req != NULL) e->req->ctl_pending = 0;
      c->out_head = (c->out_head + 1) % RN_TCP_OUT_QUEUE;
    }
  }
  return ncclSuccess;
}

int rn_tcp_ctl_room(const struct rn_tcp_comm *c) {
  return (c->out_tail + 1) % RN_TCP_OUT_QUEUE != c->out_head;
}

/* Queue a control message; 0 when the queue is full (retry later). */
int rn_tcp_ctl_queue(struct rn_tcp_comm *c, const void *hdr, size_t hl, const void *payload,
                     size_t pl, struct rn_tcp_req *req) {
  int next = (c->out_tail + 1) % RN_TCP_OUT_QUEUE;
  if (next == c->out_head) return 0;
  struct rn_tcp_ctl_out *e = &c->out[c->out_tail];
  memcpy(&e->hdr, hdr, hl);
  e->hlen = (uint32_t)hl;
  e->payload = payload;
  e->plen = pl;
  e->off = 0;
  e->req = req;
  if (req != NULL) req->ctl_pending = 1;
  c->out_tail = next;
  return 1;
}

/* NCCL's matching rule, applied alike by sender and receiver: the next
 * message of a group claims the first buffer not yet claimed whose tag is
 * its own.  *mismatch when none is (the first free buffer is claimed anyway, so
 * both sides keep counting alike). */
int rn_tcp_match_buffer(int n, const int32_t *tags, uint32_t claimed, int tag, int *mismatch) {
  int first = -1;
  for (int i = 0; i < n; i++) {
    if (claimed & (1u << i)) continue;
    if (tags[i] == tag) {
      *mismatch = 0;
      return i;
    }
    if (first < 0) first = i;
  }
  *mismatch = 1;
  return first;
}

/* Take buffer idx of the group being filled; advance when it is full. */
static void rn_tcp_claim_buffer(struct rn_tcp_comm *c, struct rn_tcp_req *r, int idx) {
  r->claimed |= 1u << idx;
  if (++c->match_cnt == r->n) {
    c->match_seq++;
    c->match_cnt = 0;
  }
}

static struct rn_tcp_req *rn_tcp_matching_group(struct rn_tcp_comm *c) {
  struct rn_tcp_req *r = atomic_load(&c->ring[c->match_seq % RN_TCP_RING]);
  return (r != NULL && r->seq == c->match_seq) ? r : NULL;
}

static void rn_tcp_nack(struct rn_tcp_comm *c, int tag, uint64_t size, uint64_t posted) {
  struct rn_tcp_nack m = {.type = RN_TCP_NACK, .tag = tag, .size = size, .posted = posted};
  if (!rn_tcp_ctl_queue(c, &m, sizeof(m), NULL, 0, NULL))
    RN_WARN("control queue full; the sender will not hear of the oversized message");
}

/* A message of `size` bytes for buffer idx: 0 when it fits, else both
 * sizes are logged and the request fails. */
static int rn_tcp_fits(struct rn_tcp_comm *c, struct rn_tcp_req *r, int idx, uint64_t size,
                       int eager) {
  if (size <= r->posted[idx]) return 1;
  RN_WARN("peer sent %llu bytes but the posted receive (tag %d) holds only %zu bytes",
          (unsigned long long)size, r->tag[idx], r->posted[idx]);
  r->error = ncclInvalidUsage;
  if (eager) rn_tcp_nack(c, r->tag[idx], size, r->posted[idx]);
  return 0;
}

/* Deliver queued eager messages whose receive is now posted, in order. */
void rn_tcp_drain_unexpected(struct rn_tcp_comm *c) {
  while (c->unexpected_head != c->unexpected_tail && c->unexpected[c->unexpected_head].ready) {
    struct rn_tcp_unexpected *e = &c->unexpected[c->unexpected_head];
    struct rn_tcp_req *r = rn_tcp_matching_group(c);
    if (r == NULL) return;
    int mismatch, idx = rn_tcp_match_buffer(r->n, r->tag, r->claimed, e->tag, &mismatch);
    if (mismatch) {
      RN_WARN("message with tag %d matches no buffer of the posted receive", e->tag);
      r->error = ncclInvalidUsage;
    }
    rn_tcp_claim_buffer(c, r, idx);
    if (rn_tcp_fits(c, r, idx, e->size, 1)) {
      memcpy(r->buf[idx], e->data, e->size);
      r->got[idx] = e->size;
    }
    atomic_fetch_sub(&r->pending, 1);
    c->unexpected_head = (c->unexpected_head + 1) % RN_TCP_EAGER_WINDOW;
  }
}

static ncclResult_t rn_tcp_protocol_error(struct rn_tcp_comm *c, const char *what,
                                          const struct rn_tcp_data *d) {
  RN_WARN("protocol error: %s (seq %llu buffer %u, %llu bytes, flags %u)", what,
          (unsigned long long)d->seq, d->idx, (unsigned long long)d->size, d->flags);
  rn_tcp_set_error(c, ncclRemoteError);
  return ncclRemoteError;
}

/* Receiver: a DATA header arrived; `avail` payload bytes are at `payload`,
 * the rest is read straight into its destination by rn_tcp_progress. */
static ncclResult_t rn_tcp_on_data(struct rn_tcp_comm *c, const struct rn_tcp_data *d,
                                   const char *payload, size_t avail) {
  struct rn_tcp_req *r = NULL;
  int idx = 0;
  char *dst;
  if (d->flags & RN_TCP_F_EAGER) {
    if (d->inline_len != d->size || d->size > RN_TCP_EAGER_MAX)
      return rn_tcp_protocol_error(c, "eager message with a bad length", d);
    /* Behind queued messages, or before its receive is posted: queue it. */
    if (c->unexpected_head != c->unexpected_tail || (r = rn_tcp_matching_group(c)) == NULL) {
      if (c->unexpected == NULL &&
          (c->unexpected = calloc(RN_TCP_EAGER_WINDOW, sizeof(*c->unexpected))) == NULL) {
        RN_WARN("out of memory for unexpected messages");
        rn_tcp_set_error(c, ncclSystemError);
        return ncclSystemError;
      }
      int next = (c->unexpected_tail + 1) % RN_TCP_EAGER_WINDOW;
      if (next == c->unexpected_head) return rn_tcp_protocol_error(c, "eager window exceeded", d);
      struct rn_tcp_unexpected *e = &c->unexpected[c->unexpected_tail];
      e->tag = d->tag;
      e->size = d->size;
      e->ready = 0;
      c->unexpected_tail = next;
      c->rx_unexpected = e;
      dst = e->data;
      goto out_payload;
    }
    int mismatch;
    idx = rn_tcp_match_buffer(r->n, r->tag, r->claimed, d->tag, &mismatch);
    if (mismatch) {
      RN_WARN("message with tag %d matches no buffer of the posted receive", d->tag);
      r->error = ncclInvalidUsage;
    }
  } else {
    r = rn_tcp_matching_group(c);
    if (r == NULL || d->seq != c->match_seq || d->idx >= (uint32_t)r->n ||
        (r->claimed & (1u << d->idx)) || d->inline_len > d->size)
      return rn_tcp_protocol_error(c, "data matches no posted receive", d);
    idx = (int)d->idx;
  }
  rn_tcp_claim_buffer(c, r, idx);
  if (d->flags & RN_TCP_F_STREAMED) {
    atomic_fetch_add(&c->stream_work, 1); /* the chunks complete it */
    return ncclSuccess;
  }
  dst = rn_tcp_fits(c, r, idx, d->size, (d->flags & RN_TCP_F_EAGER) != 0) ? (char *)r->buf[idx]
                                                                          : c->discard;
  c->rx_req = r;
  c->rx_idx = (uint32_t)idx;
  c->rx_size = d->size;
out_payload:;
  size_t copied = avail < d->inline_len ? avail : d->inline_len;
  if (copied) memcpy(dst, payload, copied);
  c->rx_dst = dst + copied;
  c->rx_left = d->inline_len - copied;
  return ncclSuccess;
}

/* Finish the inline payload in progress; 1 when done. */
static int rn_tcp_rx_done(struct rn_tcp_comm *c) {
  if (c->rx_left > 0) return 0;
  if (c->rx_unexpected != NULL) {
    c->rx_unexpected->ready = 1;
    c->rx_unexpected = NULL;
    rn_tcp_drain_unexpected(c);
    return 1;
  }
  if (c->rx_req == NULL) return 1;
  struct rn_tcp_req *r = c->rx_req;
  if (c->rx_size <= r->posted[c->rx_idx]) r->got[c->rx_idx] = c->rx_size;
  atomic_fetch_sub(&r->pending, 1);
  c->rx_req = NULL;
  return 1;
}

/* Move whatever the control connection (and, without helper threads, the
 * data streams) can move now.  Never blocks. */
ncclResult_t rn_tcp_progress(struct rn_tcp_comm *c) {
  RN_CHECK(rn_tcp_ctl_flush(c));
  /* Once the peer is gone, drive the streams too so their EOF is seen. */
  if (c->nthreads == 0 && (atomic_load(&c->stream_work) != 0 || atomic_load(&c->peer_closed)))
    rn_tcp_drive_streams(c);
  for (;;) {
    if (c->rx_left > 0) {
      size_t got = 0;
      ncclResult_t res = rn_sock_recv_some(c->ctrl_fd, c->rx_dst, c->rx_left, &got);
      c->rx_dst += got;
      c->rx_left -= got;
      if (res != ncclSuccess) {
        RN_WARN("control connection lost in the middle of a message");
        rn_tcp_set_error(c, ncclRemoteError);
        return ncclRemoteError;
      }
      if (c->rx_left > 0) return ncclSuccess;
    }
    rn_tcp_rx_done(c);
    size_t before = c->in_len;
    ncclResult_t res = rn_sock_recv_some(c->ctrl_fd, c->in, RN_TCP_IN_BUF, &c->in_len);
    if (res != ncclSuccess) atomic_store(&c->peer_closed, 1);
    size_t pos = 0;
    while (c->rx_req == NULL && c->rx_unexpected == NULL && c->in_len - pos >= sizeof(uint32_t)) {
      uint32_t type;
      memcpy(&type, c->in + pos, sizeof(type));
      if (type == RN_TCP_CTS && !c->is_recv) {
        struct rn_tcp_cts m;
        if (c->in_len - pos < sizeof(m)) break;
        memcpy(&m, c->in + pos, sizeof(m));
        pos += sizeof(m);
        int slot = (int)(m.seq % RN_TCP_RING);
        if (m.n < 1 || m.n > RN_MAX_RECVS || c->cts_valid[slot]) {
          RN_WARN("protocol error: bad clear-to-send (seq %llu, n %u)", (unsigned long long)m.seq,
                  m.n);
          rn_tcp_set_error(c, ncclRemoteError);
          return ncclRemoteError;
        }
        c->cts[slot] = m;
        c->cts_valid[slot] = true;
        c->cts_claimed[slot] = 0;
        /* Eager sends waiting for this group claim their buffers now, so the
         * slot is free again before the receiver can reuse it. */
        rn_tcp_match_eager(c);
      } else if (type == RN_TCP_NACK && !c->is_recv) {
        struct rn_tcp_nack m;
        if (c->in_len - pos < sizeof(m)) break;
        memcpy(&m, c->in + pos, sizeof(m));
        pos += sizeof(m);
        RN_WARN(
            "the receiver refused a send of %llu bytes (tag %d): its posted buffer "
            "holds %llu bytes",
            (unsigned long long)m.size, m.tag, (unsigned long long)m.posted);
        rn_tcp_set_error(c, ncclInvalidUsage);
      } else if (type == RN_TCP_DATA && c->is_recv) {
        struct rn_tcp_data d;
        if (c->in_len - pos < sizeof(d)) break;
        memcpy(&d, c->in + pos, sizeof(d));
        pos += sizeof(d);
        size_t avail = c->in_len - pos;
        RN_CHECK(rn_tcp_on_data(c, &d, c->in + pos, avail));
        pos += avail < d.inline_len ? avail : d.inline_len;
        rn_tcp_rx_done(c);
      } else {
        RN_WARN("protocol error: unexpected control message type %u", type);
        rn_tcp_set_error(c, ncclRemoteError);
        return ncclRemoteError;
      }
    }
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
    if (c->rx_left > 0) continue;
    if (c->in_len == before || res != ncclSuccess) break;
  }
  /* Replies queued while parsing (a refusal) leave now, not at the next
   * call, which may never come. */
  return c->out_head != c->out_tail ? rn_tcp_ctl_flush(c) : ncclSuccess;
}

/* Sender: buffer idx of the current clear-to-send is spoken for; the next
 * group starts once all of its buffers are. */
void rn_tcp_cts_claim(struct rn_tcp_comm *c, int slot, int idx) {
  c->cts_claimed[slot] |= 1u << idx;
  if (c->cts_claimed[slot] == (1u << c->cts[slot].n) - 1) {
    c->cts_valid[slot] = false;
    c->send_seq++;
  }
}

/* Sender: match eager messages to the clear-to-sends that have arrived
 * since, by the receiver's rule, so later sends match the same buffers. */
void rn_tcp_match_eager(struct rn_tcp_comm *c) {
  while (c->eager_head != c->eager_tail) {
    int slot = (int)(c->send_seq % RN_TCP_RING);
    if (!c->cts_valid[slot]) return;
    struct rn_tcp_cts *m = &c->cts[slot];
    int mismatch, idx = rn_tcp_match_buffer((int)m->n, m->tags, c->cts_claimed[slot],
                                            c->eager_tag[c->eager_head], &mismatch);
    c->eager_head = (c->eager_head + 1) % RN_TCP_EAGER_WINDOW;
    rn_tcp_cts_claim(c, slot, idx);
  }
}

int rn_tcp_eager_unmatched(const struct rn_tcp_comm *c) {
  return (c->eager_tail - c->eager_head + RN_TCP_EAGER_WINDOW) % RN_TCP_EAGER_WINDOW;
}
