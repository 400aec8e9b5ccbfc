/* The TCP control connection: the output queue (clear-to-sends, data
 * headers with inline payloads), reading and checking what arrives
 * against this side's own state (PROTOCOL.md), and the matching rule of
 * tcp.h on both sides. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "tcp.h"

static uint32_t rn_tcp_taghash(int32_t tag, uint32_t cap) {
  return ((uint32_t)tag * 2654435761u) >> 16 & (cap - 1);
}

uint32_t rn_tcp_tagcount_get(const struct rn_tcp_tagcount *m, int32_t tag) {
  if (m->cap == 0) return 0;
  for (uint32_t i = rn_tcp_taghash(tag, m->cap); m->slot[i].used; i = (i + 1) & (m->cap - 1))
    if (m->slot[i].tag == tag) return m->slot[i].count;
  return 0;
}

uint32_t *rn_tcp_tagcount(struct rn_tcp_tagcount *m, int32_t tag) {
  if (m->cap > 0)
    for (uint32_t i = rn_tcp_taghash(tag, m->cap); m->slot[i].used; i = (i + 1) & (m->cap - 1))
      if (m->slot[i].tag == tag) return &m->slot[i].count;
  if (2 * (m->n + 1) > m->cap) { /* at most half full */
    uint32_t cap = m->cap ? 2 * m->cap : 8;
    struct rn_tcp_tagslot *t = calloc(cap, sizeof(*t));
    if (t == NULL) return NULL;
    for (uint32_t k = 0; k < m->cap; k++) {
      if (!m->slot[k].used) continue;
      uint32_t i = rn_tcp_taghash(m->slot[k].tag, cap);
      while (t[i].used) i = (i + 1) & (cap - 1);
      t[i] = m->slot[k];
    }
    free(m->slot);
    m->slot = t;
    m->cap = cap;
  }
  uint32_t i = rn_tcp_taghash(tag, m->cap);
  while (m->slot[i].used) i = (i + 1) & (m->cap - 1);
  m->slot[i] = (struct rn_tcp_tagslot){.tag = tag, .count = 0, .used = 1};
  m->n++;
  return &m->slot[i].count;
}

void rn_tcp_tagcount_free(struct rn_tcp_tagcount *m) {
  free(m->slot);
  *m = (struct rn_tcp_tagcount){0};
}

/* Write queued control messages, as many per sendmsg as fit in one iovec
 * array, so a clear-to-send and the data behind it leave in one segment. */
ncclResult_t rn_tcp_ctl_flush(struct rn_tcp_comm *c) {
  enum { RN_TCP_FLUSH_IOV = 64 };
  ncclResult_t moved = ncclSuccess;
  /* Only small receives' clear-to-sends, and not yet a batch of them:
   * they wait (the sender's small sends go eagerly meanwhile), so a
   * stream of small messages pays one sendmsg per batch, not per receive.
   * They leave at once while the sender says its eager credit runs low,
   * and, should it be left waiting anyway, once a receive was tested
   * incomplete often enough. */
  const int queued = (c->out_tail - c->out_head + RN_TCP_OUT_QUEUE) % RN_TCP_OUT_QUEUE;
  if (c->out_lazy > 0 && c->out_lazy == queued && c->out_lazy < RN_TCP_CTS_BATCH &&
      (!c->peer_low || c->peer_first) && c->lazy_polls < RN_TCP_CTS_POLLS &&
      c->out[c->out_head].off == 0)
    return ncclSuccess;
  if (c->move.enabled && rn_tcp_move_before_write(c, &moved) < 0) return moved;
  /* Nobody reads what would go to a peer that has closed: retire it. */
  if (atomic_load(&c->peer_closed) || c->ctl_wlost) {
    for (; c->out_head != c->out_tail; c->out_head = (c->out_head + 1) % RN_TCP_OUT_QUEUE)
      if (c->out[c->out_head].req != NULL) c->out[c->out_head].req->ctl_pending = 0;
    c->out_lazy = c->lazy_polls = 0;
  }
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
    /* A receiver cannot yet tell a lost rail from a sender that closed
     * (below): the sender's move, or the failure at the bound, says. */
    if (k <= 0 && rn_tcp_move_lost(c, k < 0 ? strerror(errno) : "closed", c->is_recv))
      return ncclSuccess;
    if (k <= 0 && c->is_recv) {
      /* A sender whose sends all completed (eager ones complete once
       * written) may close, and exit, before this side has read them, and
       * then resets what this side writes.  What it wrote is still here
       * to read, and nothing written now would matter to it: drop the
       * output, and read on to the connection's end, where the receives
       * it did not satisfy fail (as after its BYE). */
      RN_INFO(NCCL_NET,
              "receive comm with %s: the sender took no more control bytes (%s): it has "
              "closed; reading what it sent before",
              c->peer, k < 0 ? strerror(errno) : "closed");
      c->ctl_wlost = 1;
      return rn_tcp_ctl_flush(c); /* retires the output */
    }
    if (k <= 0)
      return rn_tcp_fail(c, ncclRemoteError, "control connection lost while sending: %s",
                         k < 0 ? strerror(errno) : "closed");
    if (c->move.enabled) {
      rn_tcp_move_wrote(c, iov, niov, (size_t)k);
    } else { /* counted all the same: keeping may start later (move.c) */
      c->move.tx += (uint64_t)k;
      c->move.log_base = c->move.replay = c->move.tx;
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
      if (e->lazy && --c->out_lazy == 0) c->lazy_polls = 0;
      c->out_head = (c->out_head + 1) % RN_TCP_OUT_QUEUE;
    }
  }
  return ncclSuccess;
}

int rn_tcp_ctl_room(const struct rn_tcp_comm *c) {
  return (c->out_tail + 1) % RN_TCP_OUT_QUEUE != c->out_head;
}

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
  e->lazy = 0;
  if (req != NULL) req->ctl_pending = 1;
  c->out_tail = next;
  return 1;
}

void rn_tcp_ctl_queue_lazy(struct rn_tcp_comm *c, const struct rn_tcp_cts *m) {
  if (!rn_tcp_ctl_queue(c, m, sizeof(*m), NULL, 0, NULL)) return;
  c->out[(c->out_tail + RN_TCP_OUT_QUEUE - 1) % RN_TCP_OUT_QUEUE].lazy = 1;
  c->out_lazy++;
}

/* ------------------------------------------------------- sender side */

ncclResult_t rn_tcp_send_numbers(struct rn_tcp_comm *c, int32_t tag, uint32_t *nth,
                                 uint32_t *claim) {
  uint32_t *k = rn_tcp_tagcount(&c->sent_tags, tag);
  if (k == NULL)
    return rn_tcp_fail(c, ncclSystemError, "out of memory for the send counts of a comm to %s",
                       c->peer);
  *nth = *k;
  *claim = c->claim_out;
  return ncclSuccess;
}

void rn_tcp_sent(struct rn_tcp_comm *c, int32_t tag) {
  (*rn_tcp_tagcount(&c->sent_tags, tag))++; /* there since rn_tcp_send_numbers */
  c->claim_out++;
}

static int rn_tcp_eager_pending(const struct rn_tcp_comm *c, int32_t tag) {
  for (int k = 0; k < c->neager; k++)
    if (c->eager[k].tag == tag) return 1;
  return 0;
}

/* The first buffer with `tag` no send has claimed, in posting order,
 * among the groups whose CTS arrived. */
static int rn_tcp_known_target(const struct rn_tcp_comm *c, int32_t tag, uint64_t *seq, int *idx) {
  for (uint64_t g = c->send_head; g < c->cts_next; g++) {
    const struct rn_tcp_group *m = &c->group[g % RN_TCP_RING];
    for (uint32_t i = 0; i < m->n; i++) {
      if ((m->claimed & (1u << i)) || m->tags[i] != tag) continue;
      *seq = g;
      *idx = (int)i;
      return 1;
    }
  }
  return 0;
}

int rn_tcp_send_target(const struct rn_tcp_comm *c, int32_t tag, uint64_t *seq, int *idx) {
  return !rn_tcp_eager_pending(c, tag) && rn_tcp_known_target(c, tag, seq, idx);
}

void rn_tcp_send_claim(struct rn_tcp_comm *c, uint64_t seq, int idx) {
  c->group[seq % RN_TCP_RING].claimed |= 1u << idx;
  while (c->send_head < c->cts_next) {
    const struct rn_tcp_group *m = &c->group[c->send_head % RN_TCP_RING];
    if (m->claimed != (1u << m->n) - 1) break;
    c->send_head++;
  }
}

ncclResult_t rn_tcp_match_eager(struct rn_tcp_comm *c) {
  /* Claims only take buffers away; only a CTS brings new ones.  Without
   * one since the last pass, only the messages sent since are tried. */
  int kept = c->cts_tried == c->cts_next ? c->eager_tried : 0;
  for (int k = kept; k < c->neager; k++) {
    struct rn_tcp_eager e = c->eager[k];
    uint64_t seq;
    int idx;
    /* An earlier unmatched one of the same tag found no buffer: neither
     * can this one (per-tag order). */
    int blocked = 0;
    for (int j = 0; j < kept; j++) blocked |= c->eager[j].tag == e.tag;
    if (blocked || !rn_tcp_known_target(c, e.tag, &seq, &idx)) {
      c->eager[kept++] = e;
      continue;
    }
    rn_tcp_send_claim(c, seq, idx);
    c->eager_bytes -= e.size;
    uint64_t posted = c->group[seq % RN_TCP_RING].sizes[idx];
    if (e.size > posted) /* its send completed when written: the comm fails */
      rn_tcp_fail(c, ncclInvalidUsage,
                  "an eager send of %llu bytes (tag %d) exceeds the posted receive of %llu bytes "
                  "(group %llu buffer %d); the receiver failed that receive",
                  (unsigned long long)e.size, e.tag, (unsigned long long)posted,
                  (unsigned long long)seq, idx);
  }
  c->neager = c->eager_tried = kept;
  c->cts_tried = c->cts_next;
  return (ncclResult_t)atomic_load(&c->error);
}

/* A clear-to-send: every field against what this sender expects next. */
static ncclResult_t rn_tcp_on_cts(struct rn_tcp_comm *c, const struct rn_tcp_cts *m) {
  static const char what[] = "clear-to-send";
  if (m->p.flags != 0) return RN_TCP_VIOLATION(c, what, "flags", "%u, expected 0", m->p.flags);
  if (m->p.plen != 0) return RN_TCP_VIOLATION(c, what, "plen", "%u, expected 0", m->p.plen);
  if (m->reserved != 0) return RN_TCP_VIOLATION(c, what, "reserved", "%u, expected 0", m->reserved);
  if (m->msg != c->msg_in)
    return RN_TCP_VIOLATION(c, what, "msg", "%u, expected %u", m->msg, c->msg_in);
  if (m->seq != c->cts_next)
    return RN_TCP_VIOLATION(c, what, "seq", "%llu, expected %llu", (unsigned long long)m->seq,
                            (unsigned long long)c->cts_next);
  if (m->n < 1 || m->n > RN_MAX_RECVS)
    return RN_TCP_VIOLATION(c, what, "n", "%u, expected 1..%d", m->n, RN_MAX_RECVS);
  for (uint32_t i = 0; i < RN_MAX_RECVS; i++) {
    if (i < m->n && m->sizes[i] > INT_MAX)
      return RN_TCP_VIOLATION(c, what, "sizes", "[%u] = %llu, expected <= %d (n = %u)", i,
                              (unsigned long long)m->sizes[i], INT_MAX, m->n);
    if (i >= m->n && (m->sizes[i] != RN_TCP_NO_BUFFER || m->tags[i] != 0))
      return RN_TCP_VIOLATION(c, what, "sizes/tags", "[%u] = %llu/%d past n = %u, expected %llu/0",
                              i, (unsigned long long)m->sizes[i], m->tags[i], m->n,
                              (unsigned long long)RN_TCP_NO_BUFFER);
  }
  if (m->seq - c->send_head >= RN_TCP_RING)
    return RN_TCP_VIOLATION(c, what, "seq", "%llu, beyond the window of %d groups from %llu",
                            (unsigned long long)m->seq, RN_TCP_RING,
                            (unsigned long long)c->send_head);
  struct rn_tcp_group *g = &c->group[m->seq % RN_TCP_RING];
  /* The receiver acknowledges a group's streamed buffers before it can
   * complete it, so before the clear-to-send that reuses its slot. */
  for (int i = 0; i < RN_MAX_RECVS; i++)
    if (g->sreq[i] != NULL)
      return RN_TCP_VIOLATION(c, what, "seq",
                              "%llu reuses the slot of group %llu, whose buffer %d was not "
                              "acknowledged",
                              (unsigned long long)m->seq, (unsigned long long)g->seq, i);
  g->seq = m->seq;
  g->n = m->n;
  g->claimed = 0;
  memcpy(g->sizes, m->sizes, sizeof(g->sizes));
  memcpy(g->tags, m->tags, sizeof(g->tags));
  c->cts_next++;
  c->msg_in++;
  c->want_sent = 0;
  /* Eager sends waiting for this group claim their buffers now, before the
   * next CTS is read, so the window check above holds. */
  return rn_tcp_match_eager(c);
}

/* An acknowledgement: the streamed send it names completes. */
static ncclResult_t rn_tcp_on_ack(struct rn_tcp_comm *c, const struct rn_tcp_ack *a) {
  static const char what[] = "acknowledgement";
  if (a->p.flags != 0 || a->p.plen != 0 || a->reserved != 0)
    return RN_TCP_VIOLATION(c, what, "flags/plen/reserved", "%u/%u/%u, expected 0", a->p.flags,
                            a->p.plen, a->reserved);
  if (a->msg != c->msg_in)
    return RN_TCP_VIOLATION(c, what, "msg", "%u, expected %u", a->msg, c->msg_in);
  const struct rn_tcp_group *g = &c->group[a->seq % RN_TCP_RING];
  if (a->seq >= c->cts_next || c->cts_next - a->seq > RN_TCP_RING || g->seq != a->seq)
    return RN_TCP_VIOLATION(c, what, "seq", "%llu, expected a group below %llu still in the window",
                            (unsigned long long)a->seq, (unsigned long long)c->cts_next);
  if (a->idx >= g->n || g->sreq[a->idx] == NULL)
    return RN_TCP_VIOLATION(c, what, "idx",
                            "%u of group %llu: no streamed send to it awaits an acknowledgement",
                            a->idx, (unsigned long long)a->seq);
  atomic_store(&g->sreq[a->idx]->acked, 1);
  c->group[a->seq % RN_TCP_RING].sreq[a->idx] = NULL;
  c->msg_in++;
  c->acks_in++;
  return ncclSuccess;
}

/* ----------------------------------------------------- receiver side */

ncclResult_t rn_tcp_queue_acks(struct rn_tcp_comm *c) {
  if (!atomic_exchange(&c->ack_due, 0)) return ncclSuccess;
  for (uint64_t g = c->recv_seq > RN_TCP_RING ? c->recv_seq - RN_TCP_RING : 0; g < c->recv_seq;
       g++) {
    struct rn_tcp_req *r = c->ring[g % RN_TCP_RING];
    if (r == NULL || r->seq != g) continue;
    uint32_t due = 0;
    pthread_mutex_lock(&c->rx_lock);
    for (int i = 0; i < r->n; i++)
      if ((r->ack_wanted & ~r->acks_queued & (1u << i)) && (r->filled & r->claimed & (1u << i)))
        due |= 1u << i;
    pthread_mutex_unlock(&c->rx_lock);
    for (int i = 0; i < r->n; i++) {
      if (!(due & (1u << i))) continue;
      if (!rn_tcp_ctl_room(c)) {
        atomic_store(&c->ack_due, 1); /* the rest at the next call */
        return ncclSuccess;
      }
      struct rn_tcp_ack a = {.seq = g, .msg = c->msg_out, .idx = (uint32_t)i};
      rn_tcp_wire_seal(&a, RN_TCP_MSG_ACK, 0, 0);
      rn_tcp_ctl_queue(c, &a, sizeof(a), NULL, 0, NULL);
      c->msg_out++;
      r->acks_queued |= 1u << i;
    }
  }
  return ncclSuccess;
}

/* The posted buffer of `tag` whose rank among that tag's buffers is nth,
 * if no message has claimed it yet (rx_lock held). */
static struct rn_tcp_req *rn_tcp_recv_find(struct rn_tcp_comm *c, int32_t tag, uint32_t nth,
                                           int *idx) {
  for (uint64_t g = c->match_head; g < c->recv_seq; g++) {
    struct rn_tcp_req *r = c->ring[g % RN_TCP_RING];
    if (r == NULL || r->seq != g) continue; /* completed and retired */
    for (int i = 0; i < r->n; i++) {
      if ((r->claimed & (1u << i)) || r->tag[i] != tag || r->ord[i] != nth) continue;
      *idx = i;
      return r;
    }
  }
  return NULL;
}

/* Whether the buffer of `tag` ranked nth is posted yet: ranks count up
 * from 0 per tag, modulo 2^32. */
static int rn_tcp_rank_posted(const struct rn_tcp_comm *c, int32_t tag, uint32_t nth) {
  return (int32_t)(nth - rn_tcp_tagcount_get(&c->posted_tags, tag)) < 0;
}

/* An eager message of `size` bytes, ranked nth among `tag`'s sends, claims
 * the posted buffer of that rank: *r and *idx, or a violation when another
 * message filled it or it cannot take an inline message (rx_lock held). */
static ncclResult_t rn_tcp_eager_claim(struct rn_tcp_comm *c, int32_t tag, uint32_t nth,
                                       uint64_t size, const char *what, struct rn_tcp_req **r,
                                       int *idx) {
  *r = rn_tcp_recv_find(c, tag, nth, idx);
  if (*r == NULL)
    return RN_TCP_VIOLATION(c, what, "nth", "%u of tag %d: another message filled that buffer",
                            nth, tag);
  ncclResult_t res = rn_tcp_buf_shape(c, *r, *idx, RN_TCP_BUF_INLINE, size, 0, what);
  if (res == ncclSuccess) rn_tcp_recv_claim(c, *r, *idx);
  return res;
}

/* Buffer idx of r holds its whole message (rx_lock held). */
static void rn_tcp_recv_filled(struct rn_tcp_req *r, int idx) { r->filled |= 1u << idx; }

/* An eager message of `size` bytes for buffer idx: 1 when it fits, else
 * that receive fails (not the comm: the connection is sound). */
static int rn_tcp_eager_fits(struct rn_tcp_req *r, int idx, uint64_t size) {
  if (size <= r->posted[idx]) return 1;
  /* The sender learns of it (its comm fails) only from this receive's
   * clear-to-send: it leaves with the next flush, lazy or not. */
  r->comm->lazy_polls = RN_TCP_CTS_POLLS;
  RN_WARN("peer %s sent %llu bytes but the posted receive (tag %d) holds only %zu bytes",
          r->comm->peer, (unsigned long long)size, r->tag[idx], r->posted[idx]);
  r->error = ncclInvalidUsage;
  return 0;
}

ncclResult_t rn_tcp_drain_held(struct rn_tcp_comm *c) {
  int kept = 0;
  for (int k = 0; k < c->nheld; k++) {
    struct rn_tcp_unexpected *e = &c->unexpected[c->held[k]];
    int idx = 0;
    if (!e->ready || !rn_tcp_rank_posted(c, e->tag, e->nth)) {
      c->held[kept++] = c->held[k];
      continue;
    }
    pthread_mutex_lock(&c->rx_lock);
    struct rn_tcp_req *r = NULL;
    ncclResult_t res = rn_tcp_eager_claim(c, e->tag, e->nth, e->size, "eager data", &r, &idx);
    if (res == ncclSuccess) {
      if (rn_tcp_eager_fits(r, idx, e->size) && e->size) memcpy(r->buf[idx], e->data, e->size);
      rn_tcp_recv_filled(r, idx);
    }
    pthread_mutex_unlock(&c->rx_lock);
    if (res != ncclSuccess) return res;
    /* Its sender may need this group's clear-to-send to complete it. */
    if (e->credit) c->lazy_polls = RN_TCP_CTS_POLLS;
    c->held_bytes -= e->size;
    /* Slots keep their buffers for the next message (no allocation per
     * message) while all of them together stay within the bound of what
     * may be held at once. */
    if (c->held_cap > RN_TCP_EAGER_BYTES) {
      c->held_cap -= e->cap;
      free(e->data);
      e->data = NULL;
      e->cap = 0;
    }
  }
  c->nheld = kept;
  return ncclSuccess;
}

/* Hold an eager message no posted buffer matches yet: its payload is read
 * into a free slot of the held queue. */
static ncclResult_t rn_tcp_hold(struct rn_tcp_comm *c, const struct rn_tcp_data *d) {
  if (c->unexpected == NULL &&
      (c->unexpected = calloc(RN_TCP_EAGER_WINDOW, sizeof(*c->unexpected))) == NULL)
    return rn_tcp_fail(c, ncclSystemError, "out of memory for held eager messages");
  if (c->nheld >= RN_TCP_EAGER_WINDOW - 1)
    return RN_TCP_VIOLATION(c, "eager data", "tag", "%d: a %dth unmatched eager message", d->tag,
                            RN_TCP_EAGER_WINDOW);
  if (c->held_bytes + d->size > RN_TCP_EAGER_BYTES)
    return RN_TCP_VIOLATION(c, "eager data", "size",
                            "%llu with %llu bytes of unmatched eager messages held, expected at "
                            "most %d in all",
                            (unsigned long long)d->size, (unsigned long long)c->held_bytes,
                            RN_TCP_EAGER_BYTES);
  /* A free slot: one no held entry uses. */
  uint64_t used = 0;
  for (int k = 0; k < c->nheld; k++) used |= 1ull << c->held[k];
  int slot = 0;
  while (used & (1ull << slot)) slot++;
  struct rn_tcp_unexpected *e = &c->unexpected[slot];
  if (e->cap < d->size) {
    free(e->data);
    c->held_cap -= e->cap;
    e->cap = 0;
    if ((e->data = malloc(d->size)) == NULL)
      return rn_tcp_fail(c, ncclSystemError, "out of memory for a held eager message of %llu bytes",
                         (unsigned long long)d->size);
    e->cap = d->size;
    c->held_cap += e->cap;
  }
  c->held_bytes += d->size;
  e->tag = d->tag;
  e->nth = d->nth;
  e->size = d->size;
  e->credit = (d->p.flags & RN_TCP_DATA_CREDIT) != 0;
  e->ready = 0;
  c->held[c->nheld++] = slot;
  c->rx_unexpected = e;
  c->rx_dst = e->data;
  c->rx_left = d->size;
  return ncclSuccess;
}

/* A data header: every field against this receiver's own state (posted
 * groups, the matching rule, shapes chunks may already have fixed).  On
 * success the payload destination is set (rx_*). */
static ncclResult_t rn_tcp_on_data(struct rn_tcp_comm *c, const struct rn_tcp_data *d) {
  static const char what[] = "data header";
  const uint8_t g = d->p.flags & ~RN_TCP_DATA_CREDIT;
  const uint8_t f = g & ~(g == (RN_TCP_DATA_STREAMED | RN_TCP_DATA_ACK) ? RN_TCP_DATA_ACK : 0);
  if ((f & ~RN_TCP_DATA_FLAGS) != 0 || (f & (f - 1)) != 0)
    return RN_TCP_VIOLATION(c, what, "flags",
                            "0x%x, expected at most one of 0x%x (ACK 0x%x only with STREAMED), "
                            "CREDIT 0x%x with any",
                            d->p.flags, RN_TCP_DATA_FLAGS, RN_TCP_DATA_ACK, RN_TCP_DATA_CREDIT);
  /* Whether clear-to-sends may wait: what the sender's last message says.
   * CREDIT also sends those queued now, whatever comes after it. */
  c->peer_low = (d->p.flags & RN_TCP_DATA_CREDIT) != 0;
  c->peer_first = 0;
  if (c->peer_low) c->lazy_polls = RN_TCP_CTS_POLLS;
  if (d->reserved != 0) return RN_TCP_VIOLATION(c, what, "reserved", "%u, expected 0", d->reserved);
  if (d->msg != c->msg_in)
    return RN_TCP_VIOLATION(c, what, "msg", "%u, expected %u", d->msg, c->msg_in);
  if (f == RN_TCP_DATA_EAGER) {
    if (d->seq != 0 || d->idx != 0 || d->grid != 0)
      return RN_TCP_VIOLATION(c, what, "seq/idx/grid", "%llu/%u/%u, expected 0 with EAGER",
                              (unsigned long long)d->seq, d->idx, d->grid);
    if (d->size > RN_TCP_EAGER_WIRE_MAX || d->p.plen != d->size)
      return RN_TCP_VIOLATION(c, what, "size/plen", "%llu/%u, expected equal and <= %d",
                              (unsigned long long)d->size, d->p.plen, RN_TCP_EAGER_WIRE_MAX);
    c->msg_in++;
    /* Matched by its rank among its tag's sends: the buffer of that rank,
     * held until it is posted. */
    int idx = 0;
    const int posted = rn_tcp_rank_posted(c, d->tag, d->nth);
    pthread_mutex_lock(&c->rx_lock);
    ncclResult_t res = rn_tcp_claim_seen(c, d->claim, what);
    struct rn_tcp_req *r = NULL;
    if (res == ncclSuccess && posted)
      res = rn_tcp_eager_claim(c, d->tag, d->nth, d->size, what, &r, &idx);
    pthread_mutex_unlock(&c->rx_lock);
    RN_CHECK(res);
    if (r == NULL) return rn_tcp_hold(c, d);
    c->rx_req = r;
    c->rx_idx = (uint32_t)idx;
    c->rx_dst = rn_tcp_eager_fits(r, idx, d->size) ? (char *)r->buf[idx] : c->discard;
    c->rx_left = d->size;
    return ncclSuccess;
  }
  /* Matched at the sender: it names a posted buffer of its tag, free, of
   * the rank the rule gives its send (its nth send fills the nth buffer). */
  const uint32_t idx = d->idx;
  ncclResult_t res = ncclSuccess;
  c->msg_in++;
  pthread_mutex_lock(&c->rx_lock);
  struct rn_tcp_req *r = c->ring[d->seq % RN_TCP_RING];
  if (r == NULL || r->seq != d->seq || d->seq >= c->recv_seq)
    res = RN_TCP_VIOLATION(c, what, "seq", "%llu: no such group is posted",
                           (unsigned long long)d->seq);
  else if (idx >= (uint32_t)r->n)
    res = RN_TCP_VIOLATION(c, what, "idx", "%u, expected < %d", idx, r->n);
  else if (r->tag[idx] != d->tag || r->ord[idx] != d->nth || (r->claimed & (1u << idx)))
    res = RN_TCP_VIOLATION(c, what, "tag/nth",
                           "%d/%u for group %llu buffer %u, expected %d/%u%s", d->tag, d->nth,
                           (unsigned long long)d->seq, idx, r->tag[idx], r->ord[idx],
                           (r->claimed & (1u << idx)) ? " and a free buffer (it was filled)" : "");
  else
    res = rn_tcp_claim_seen(c, d->claim, what);
  if (res != ncclSuccess) {
    pthread_mutex_unlock(&c->rx_lock);
    return res;
  }
  r->claimno[idx] = d->claim; /* chunks with CLAIM for it must name this message */
  const uint64_t posted = r->posted[idx];
  if (f == RN_TCP_DATA_STREAMED) {
    if (d->p.plen != 0) {
      res = RN_TCP_VIOLATION(c, what, "plen", "%u, expected 0 with STREAMED", d->p.plen);
    } else if (rn_tcp_lazy_streamless(c)) {
      res = RN_TCP_VIOLATION(c, what, "flags", "STREAMED, but no OPEN asked for data streams%s",
                             c->lazy.state == RN_TCP_STREAMS_NONE ? "" : " since they closed idle");
    } else if (d->size < 1 || d->size > posted) {
      res = RN_TCP_VIOLATION(c, what, "size", "%llu, expected 1..%llu (posted) with STREAMED",
                             (unsigned long long)d->size, (unsigned long long)posted);
    } else if ((res = rn_tcp_buf_shape(c, r, idx, RN_TCP_BUF_STREAMED, d->size, d->grid, what)) ==
               ncclSuccess) {
      rn_tcp_recv_claim(c, r, idx);
      if (d->p.flags & RN_TCP_DATA_ACK) r->ack_wanted |= 1u << idx;
      /* The chunks complete it; they may have done so already. */
      if (!(r->filled & (1u << idx)))
        atomic_fetch_add(&c->stream_work, 1);
      else
        atomic_store(&c->ack_due, 1);
    }
  } else if (f == RN_TCP_DATA_TOO_BIG) {
    if (d->p.plen != 0 || d->grid != 0 || d->size <= posted) {
      res = RN_TCP_VIOLATION(
          c, what, "size/plen/grid", "%llu/%u/%u with TOO_BIG, expected > %llu (posted)/0/0",
          (unsigned long long)d->size, d->p.plen, d->grid, (unsigned long long)posted);
    } else if ((res = rn_tcp_buf_shape(c, r, idx, RN_TCP_BUF_INLINE, d->size, 0, what)) ==
               ncclSuccess) {
      RN_WARN("peer %s sent %llu bytes but the posted receive (tag %d) holds only %llu bytes",
              c->peer, (unsigned long long)d->size, d->tag, (unsigned long long)posted);
      r->error = ncclInvalidUsage;
      rn_tcp_recv_claim(c, r, idx);
      rn_tcp_recv_filled(r, idx);
    }
  } else {
    if (d->grid != 0 || d->p.plen != d->size || d->size > posted) {
      res = RN_TCP_VIOLATION(c, what, "size/plen/grid", "%llu/%u/%u, expected equal, <= %llu/0",
                             (unsigned long long)d->size, d->p.plen, d->grid,
                             (unsigned long long)posted);
    } else if ((res = rn_tcp_buf_shape(c, r, idx, RN_TCP_BUF_INLINE, d->size, 0, what)) ==
               ncclSuccess) {
      rn_tcp_recv_claim(c, r, idx);
      c->rx_req = r;
      c->rx_idx = (uint32_t)idx;
      c->rx_dst = r->buf[idx];
      c->rx_left = d->size;
      if (d->size > c->inline_max) c->lazy.inline_bytes += d->size; /* while streams opened */
    }
  }
  pthread_mutex_unlock(&c->rx_lock);
  return res;
}

/* The sender took data streams out: stop reading them (their driver, this
 * thread or a helper, ends each; tcp.h's locking note). */
static ncclResult_t rn_tcp_on_down(struct rn_tcp_comm *c, const struct rn_tcp_down *d) {
  static const char what[] = "streams-down";
  const uint32_t all = rn_tcp_streams_all(c);
  if ((d->p.flags != 0 && d->p.flags != RN_TCP_DOWN_IDLE) || d->p.plen != 0 || d->reserved != 0)
    return RN_TCP_VIOLATION(c, what, "flags/plen/reserved", "%u/%u/%u, expected %s/0/0", d->p.flags,
                            d->p.plen, d->reserved, "0 or 1 (IDLE)");
  if (d->msg != c->msg_in)
    return RN_TCP_VIOLATION(c, what, "msg", "%u, expected %u", d->msg, c->msg_in);
  /* The sender's streams are its own once dialled: it may take them out
   * before this side's next call admits them (open.c). */
  if (c->lazy.state == RN_TCP_STREAMS_ASKED) return rn_tcp_lazy_on_early_down(c, d);
  if (d->p.flags == RN_TCP_DOWN_IDLE) return rn_tcp_lazy_on_idle(c, d);
  if (c->lazy.state != RN_TCP_STREAMS_UP)
    return RN_TCP_VIOLATION(c, what, "state", "no data stream is open");
  if (d->streams == 0 || (d->streams & ~all) != 0)
    return RN_TCP_VIOLATION(c, what, "streams", "0x%x, expected a nonzero subset of 0x%x",
                            d->streams, all);
  c->msg_in++;
  rn_tcp_streams_taken_out(c, d->streams);
  return ncclSuccess;
}

void rn_tcp_streams_taken_out(struct rn_tcp_comm *c, uint32_t mask) {
  for (int i = 0; i < c->nstreams; i++)
    if (mask & (1u << i)) atomic_store(&c->stream[i].retire, 1);
  RN_INFO(NCCL_NET, "receive comm from %s (dev %d): the sender took data streams 0x%x out", c->peer,
          c->base.vdev, mask);
  rn_tcp_rails_offer(c, mask);
  if (c->nthreads == 0) {
    rn_tcp_drive_streams(c);
  } else {
    rn_tcp_wake_all(c);
  }
}

/* The inline payload in progress has all landed. */
static ncclResult_t rn_tcp_rx_done(struct rn_tcp_comm *c) {
  if (c->rx_unexpected != NULL) {
    c->rx_unexpected->ready = 1;
    c->rx_unexpected = NULL;
    return rn_tcp_drain_held(c);
  }
  if (c->rx_req != NULL) {
    pthread_mutex_lock(&c->rx_lock);
    rn_tcp_recv_filled(c->rx_req, (int)c->rx_idx);
    pthread_mutex_unlock(&c->rx_lock);
    c->rx_req = NULL;
  }
  return ncclSuccess;
}

/* --------------------------------------------------------- input */

/* The connection ended: an orderly close between messages is the peer's
 * close (requests still incomplete fail in test()); anything else fails
 * the comm. */
static ncclResult_t rn_tcp_ctl_ended(struct rn_tcp_comm *c, ssize_t k, int mid_message) {
  if (k == -3) return (ncclResult_t)atomic_load(&c->error);
  if (k == -2) {
    int err = errno;
    if (rn_tcp_move_lost(c, strerror(err), 0)) return ncclSuccess;
    errno = err;
  }
  /* A reset between messages is the peer's close too: a peer that closed
   * over bytes it had not read (clear-to-sends of messages it sent
   * eagerly) resets, and every byte it sent before is still read first.
   * Requests left incomplete fail in test(), as after an orderly close. */
  if (k == -2 && !mid_message && errno == ECONNRESET) {
    RN_INFO(NCCL_NET,
            "%s comm with %s: the peer reset the control connection between messages, "
            "taken as its close",
            c->is_recv ? "receive" : "send", c->peer);
    atomic_store(&c->peer_closed, 1);
    return ncclSuccess;
  }
  if (k == -2)
    return rn_tcp_fail(c,
                       errno == ECONNRESET || errno == ETIMEDOUT || errno == EHOSTUNREACH ||
                               errno == ENETUNREACH || errno == EPIPE
                           ? ncclRemoteError
                           : ncclSystemError,
                       "control connection: %s", strerror(errno));
  if (mid_message)
    return rn_tcp_fail(c, ncclRemoteError, "control connection closed in the middle of a message");
  atomic_store(&c->peer_closed, 1);
  return ncclSuccess;
}

/* Handle every complete message in c->in from *pos on; stops at a partial
 * header or once a payload needs reading straight into its destination. */
static ncclResult_t rn_tcp_parse(struct rn_tcp_comm *c, size_t *pos) {
  while (c->rx_left == 0 && c->in_len - *pos >= sizeof(struct rn_tcp_prefix)) {
    struct rn_tcp_prefix p;
    memcpy(&p, c->in + *pos, sizeof(p));
    if (p.type != RN_TCP_MSG_BYE &&
        (c->is_recv ? p.type != RN_TCP_MSG_DATA && p.type != RN_TCP_MSG_DOWN &&
                          p.type != RN_TCP_MSG_WANT && p.type != RN_TCP_MSG_OPEN
                    : p.type != RN_TCP_MSG_CTS && p.type != RN_TCP_MSG_ACK &&
                          p.type != RN_TCP_MSG_OFFER && p.type != RN_TCP_MSG_STREAMS))
      return RN_TCP_VIOLATION(c, "control message", "type", "%u, expected %s", p.type,
                              c->is_recv ? "2 (DATA), 5 (DOWN), 8 (BYE), 9 (WANT) or 10 (OPEN)"
                                         : "1 (CTS), 4 (ACK), 6 (OFFER), 8 (BYE) or 11 (STREAMS)");
    size_t hlen = rn_tcp_wire_hlen(p.type);
    if (p.hlen != hlen)
      return RN_TCP_VIOLATION(c, "control message", "hlen", "%u, expected %zu", p.hlen, hlen);
    if (c->in_len - *pos < hlen) break;
    if (!rn_tcp_wire_crc_ok(c->in + *pos, hlen))
      return RN_TCP_VIOLATION(c, "control message", "crc", "mismatch (type %u, message %u)", p.type,
                              c->msg_in);
    if (p.type == RN_TCP_MSG_BYE) {
      /* The peer closed its comm quiescent: nothing follows (pool.c). */
      struct rn_tcp_bye b;
      memcpy(&b, c->in + *pos, sizeof(b));
      *pos += sizeof(b);
      if (!rn_tcp_bye_shape_ok(&b))
        return RN_TCP_VIOLATION(c, "BYE", "flags/plen/reserved", "%u/%u/%u, expected 0", b.p.flags,
                                b.p.plen, b.reserved);
      if (b.msg != c->msg_in)
        return RN_TCP_VIOLATION(c, "BYE", "msg", "%u, expected %u", b.msg, c->msg_in);
      c->peer_bye = 1;
      c->bye_ms = rn_clock_ms();
      c->bye_msg = b.msg;
      c->bye_received = b.received;
      atomic_store(&c->peer_closed, 1);
      return ncclSuccess;
    }
    if (!c->is_recv && p.type == RN_TCP_MSG_STREAMS) {
      struct rn_tcp_streams m;
      memcpy(&m, c->in + *pos, sizeof(m));
      *pos += sizeof(m);
      RN_CHECK(rn_tcp_lazy_on_streams(c, &m));
      continue;
    }
    if (!c->is_recv && p.type == RN_TCP_MSG_OFFER) {
      struct rn_tcp_offer o;
      memcpy(&o, c->in + *pos, sizeof(o));
      *pos += sizeof(o);
      if (o.p.flags == RN_TCP_OFFER_CONTROL)
        RN_CHECK(rn_tcp_move_on_offer(c, &o));
      else
        RN_CHECK(rn_tcp_rails_on_offer(c, &o));
      continue;
    }
    if (!c->is_recv && p.type == RN_TCP_MSG_ACK) {
      struct rn_tcp_ack a;
      memcpy(&a, c->in + *pos, sizeof(a));
      *pos += sizeof(a);
      RN_CHECK(rn_tcp_on_ack(c, &a));
      continue;
    }
    if (!c->is_recv) {
      struct rn_tcp_cts m;
      memcpy(&m, c->in + *pos, sizeof(m));
      *pos += sizeof(m);
      RN_CHECK(rn_tcp_on_cts(c, &m));
      continue;
    }
    if (p.type == RN_TCP_MSG_WANT) {
      struct rn_tcp_want w;
      memcpy(&w, c->in + *pos, sizeof(w));
      *pos += sizeof(w);
      if (w.p.flags != 0 || w.p.plen != 0 || w.reserved != 0)
        return RN_TCP_VIOLATION(c, "WANT", "flags/plen/reserved", "%u/%u/%u, expected 0", w.p.flags,
                                w.p.plen, w.reserved);
      if (w.msg != c->msg_in)
        return RN_TCP_VIOLATION(c, "WANT", "msg", "%u, expected %u", w.msg, c->msg_in);
      c->msg_in++;
      c->peer_low = 1; /* the clear-to-sends queued leave at the end of this progress */
      c->peer_first = 0;
      c->lazy_polls = RN_TCP_CTS_POLLS;
      continue;
    }
    if (p.type == RN_TCP_MSG_OPEN) {
      struct rn_tcp_open m;
      memcpy(&m, c->in + *pos, sizeof(m));
      *pos += sizeof(m);
      RN_CHECK(rn_tcp_lazy_on_open(c, &m));
      continue;
    }
    if (p.type == RN_TCP_MSG_DOWN) {
      struct rn_tcp_down m;
      memcpy(&m, c->in + *pos, sizeof(m));
      *pos += sizeof(m);
      RN_CHECK(rn_tcp_on_down(c, &m));
      continue;
    }
    struct rn_tcp_data d;
    memcpy(&d, c->in + *pos, sizeof(d));
    *pos += sizeof(d);
    RN_CHECK(rn_tcp_on_data(c, &d));
    size_t avail = c->in_len - *pos, take = avail < c->rx_left ? avail : c->rx_left;
    if (take) {
      memcpy(c->rx_dst, c->in + *pos, take);
      c->rx_dst += take; /* never NULL + 0: a message of no payload has no destination */
    }
    *pos += take;
    c->rx_left -= take;
    if (c->rx_left == 0) RN_CHECK(rn_tcp_rx_done(c));
  }
  return ncclSuccess;
}

/* Move whatever the control connection (and, without helper threads, the
 * data streams) can move now.  Never blocks. */
ncclResult_t rn_tcp_progress(struct rn_tcp_comm *c) {
  rn_tcp_shut(c); /* a helper thread's failure */
  RN_CHECK(rn_tcp_failed(c, "progress"));
  /* First: streams dialled here are the comm's before any message that
   * names them (an OFFER of the receiver's) is read. */
  if (c->lazy.state != RN_TCP_STREAMS_NONE || c->lazy.reopen) RN_CHECK(rn_tcp_lazy_progress(c));
  rn_tcp_rails_tick(c);
  if (!c->is_recv) RN_CHECK(rn_tcp_rails_failover(c));
  RN_CHECK(rn_tcp_move_progress(c));
  RN_CHECK(rn_tcp_ctl_flush(c));
  /* Once the peer is gone, or closed them, drive the streams too so
   * their EOF is seen; likewise while a receiver waits for its sender to
   * move a lost control connection: that wait lasts while a stream on
   * another rail is open (rn_tcp_ctl_sender_moves), and a stream's end
   * shows only to whoever reads it (else read only while a buffer of a
   * byte or more waits for a chunk); and while a stream is to drop a copy
   * of a chunk that landed over another (its group waits for that). */
  if (c->nthreads == 0 && (atomic_load(&c->stream_work) != 0 || atomic_load(&c->peer_closed) ||
                           c->lazy.state == RN_TCP_STREAMS_CLOSING ||
                           (c->is_recv && c->move.state == RN_TCP_CTL_LOST) ||
                           atomic_load(&c->rx_drops) != 0))
    rn_tcp_drive_streams(c);
  while (!atomic_load(&c->peer_closed)) {
    /* One system call (move.c, from whichever connection carries the
     * control bytes now) reads the rest of a payload straight into its
     * buffer and whatever follows it into c->in. */
    struct iovec iov[2];
    int niov = 0;
    size_t want = 0, direct = c->rx_left;
    if (direct > 0) iov[niov++] = (struct iovec){c->rx_dst, direct};
    if (c->in_len < RN_TCP_IN_BUF)
      iov[niov++] = (struct iovec){c->in + c->in_len, RN_TCP_IN_BUF - c->in_len};
    for (int i = 0; i < niov; i++) want += iov[i].iov_len;
    if (want == 0) break; /* c->in full of one partial message: cannot be (rn_tcp_parse) */
    ssize_t k = rn_tcp_move_read(c, iov, niov);
    if (k > 0) {
      size_t d = (size_t)k < direct ? (size_t)k : direct;
      if (d > 0) c->rx_dst += d;
      c->rx_left -= d;
      c->in_len += (size_t)k - d;
      if (d > 0 && c->rx_left == 0) RN_CHECK(rn_tcp_rx_done(c));
    }
    size_t pos = 0;
    RN_CHECK(rn_tcp_parse(c, &pos));
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
    if (k < 0) RN_CHECK(rn_tcp_ctl_ended(c, k, c->in_len > 0 || c->rx_left > 0));
    /* Nothing, or a short read that emptied the socket: asking again now
     * would only return EAGAIN, one system call more per message (the
     * next call reads what arrives meanwhile, a payload's rest included). */
    if (k <= 0 || (size_t)k < want) break;
  }
  rn_tcp_shut(c);
  RN_CHECK(rn_tcp_failed(c, "progress"));
  if (c->is_recv) {
    /* With the data streams open a chunk may claim any buffer not yet
     * claimed: they are read while one waits, as while announced
     * messages arrive. */
    if (c->nthreads == 0 && (atomic_load(&c->stream_work) != 0 ||
                             (c->nstreams > 0 && atomic_load(&c->unclaimed) > 0)))
      rn_tcp_drive_streams(c);
    RN_CHECK(rn_tcp_queue_acks(c));
    rn_tcp_rails_readmit(c);
    /* Streams asked for while parsing: listen now; closed: let them go. */
    if (c->lazy.state >= RN_TCP_STREAMS_CLOSING || c->lazy.reopen)
      RN_CHECK(rn_tcp_lazy_progress(c));
  }
  /* Replies queued while parsing leave now, not at the next call. */
  return c->out_head != c->out_tail ? rn_tcp_ctl_flush(c) : ncclSuccess;
}
