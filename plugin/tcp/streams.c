/* TCP data streams: chunk queues, the chunk sender and receiver, and
 * their stepping, by the progress engine's threads (engine.c) or the
 * calling thread on small hosts. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "railnet/check.h"
#include "tcp.h"

/* A chunk's place in its group: buffer idx, chunk index. */
static uint32_t rn_tcp_chunk_pos(const struct rn_tcp_chunk *h) {
  return h->idx * RN_TCP_MAX_CHUNKS + h->index;
}

static int rn_tcp_stream_queue_empty(struct rn_tcp_stream *s) {
  return s->queue_head == s->queue_tail;
}

/* acked before gen: a reused request stores its new generation before it
 * clears acked (rn_tcp_req_alloc), so a cleared acked comes with it. */
int rn_tcp_chunk_stale(const struct rn_tcp_queued_chunk *q) {
  if (!q->keep) return 0;
  const int acked = atomic_load(&q->req->acked);
  return acked || atomic_load(&q->req->gen) != q->gen;
}

void rn_tcp_stream_retire(struct rn_tcp_stream *s) {
  while (s->keep_head != s->queue_head &&
         (!s->queue[s->keep_head].keep || rn_tcp_chunk_stale(&s->queue[s->keep_head])))
    s->keep_head = (s->keep_head + 1) % RN_TCP_STREAM_QUEUE;
}

/* A send stream failed: the caller takes its rail out (rails.c). */
static int rn_tcp_stream_broke(struct rn_tcp_comm *c, struct rn_tcp_stream *s, const char *why) {
  if (!atomic_load(&s->dead)) {
    snprintf(s->cause, sizeof(s->cause), "%s", why);
    s->lost = 1;
    atomic_store(&s->dead, 1);
  }
  (void)c;
  return -1;
}

void rn_tcp_stream_unhold(struct rn_tcp_stream *s) {
  if (s->hold == NULL) return;
  atomic_fetch_sub(&s->hold->copying, 1);
  s->hold = NULL;
}

int rn_tcp_stream_bounce(struct rn_tcp_stream *s, struct rn_tcp_queued_chunk *q) {
  const size_t len = q->hdr.p.plen;
  s->bounce_due = 0;
  if (s->writing || s->hold == NULL || q->rescued == 2) return 0;
  if (s->bounce_cap < len) {
    char *b = realloc(s->bounce, len);
    if (b == NULL) return 0; /* its send waits for the write, as before */
    s->bounce = b;
    s->bounce_cap = len;
  }
  memcpy(s->bounce, q->data, len);
  q->data = s->bounce;
  q->rescued = 2; /* never sent again from here: its memory is the stream's */
  rn_tcp_stream_unhold(s);
  return 1;
}

/* queue_lock held: the writing thread leaves the head chunk, written
 * whole or not; it lets go of its send's memory when done with it, or
 * when the stream died meanwhile (whoever took its queue left that, and
 * the offset, to the writer).  A rescue that found it writing left the
 * chunk's bounce to it (rn_tcp_stream_bounce). */
static void rn_tcp_stream_leave(struct rn_tcp_stream *s, int done) {
  s->writing = 0;
  if (s->bounce_due) {
    if (!done && !atomic_load(&s->dead))
      rn_tcp_stream_bounce(s, &s->queue[s->queue_head]);
    s->bounce_due = 0;
  }
  if (!atomic_load(&s->dead)) {
    if (done) rn_tcp_stream_unhold(s);
    return;
  }
  /* Its queue was taken while this thread wrote: the chunk goes again
   * elsewhere, and the offset into it is this thread's to drop. */
  rn_tcp_stream_unhold(s);
  s->off = 0;
}

/* Write as much as the socket takes, until *moved (which counts what was
 * written) reaches about budget bytes; chunks whose send was acknowledged
 * meanwhile (a copy landed over another rail) are dropped unwritten.
 * While it writes a kept chunk, its send counts the stream in `copying`
 * and cannot complete: a re-sent copy may still be on its way when the
 * ACK of the first arrives, and its bytes are the caller's buffer.
 * Returns 1 when the stream has more to send, 0 when idle, -1 on error. */
static int rn_tcp_stream_send(struct rn_tcp_comm *c, struct rn_tcp_stream *s, size_t budget,
                              size_t *moved) {
  for (;;) {
    pthread_mutex_lock(&s->queue_lock);
    if (atomic_load(&s->dead)) {
      rn_tcp_stream_leave(s, 1);
      pthread_mutex_unlock(&s->queue_lock);
      return -1;
    }
    rn_tcp_stream_retire(s);
    while (s->off == 0 && !rn_tcp_stream_queue_empty(s)) {
      struct rn_tcp_queued_chunk *q = &s->queue[s->queue_head];
      /* Counted before it is found fresh, so a completion that tests
       * after the ACK sees the count (both sequentially consistent). */
      if (q->keep && s->hold == NULL) {
        atomic_fetch_add(&q->req->copying, 1);
        s->hold = q->req;
      }
      if (!rn_tcp_chunk_stale(q)) break;
      rn_tcp_stream_unhold(s);
      atomic_fetch_sub(&c->rail[s->rail].pending, q->hdr.p.plen);
      atomic_fetch_sub(&c->stream_work, 1);
      if (s->keep_head == s->queue_head) s->keep_head = (s->keep_head + 1) % RN_TCP_STREAM_QUEUE;
      s->queue_head = (s->queue_head + 1) % RN_TCP_STREAM_QUEUE;
    }
    if (rn_tcp_stream_queue_empty(s)) {
      pthread_mutex_unlock(&s->queue_lock);
      return 0;
    }
    struct rn_tcp_queued_chunk *w = &s->queue[s->queue_head];
    s->writing = 1;
    pthread_mutex_unlock(&s->queue_lock);
    size_t hl = sizeof(w->hdr), total = hl + w->hdr.p.plen;
    while (s->off < total) {
      struct iovec iov[2];
      int niov = 0;
      if (s->off < hl) {
        iov[niov++] = (struct iovec){(char *)&w->hdr + s->off, hl - s->off};
        if (w->hdr.p.plen) iov[niov++] = (struct iovec){(void *)w->data, w->hdr.p.plen};
      } else {
        iov[niov++] = (struct iovec){(void *)(w->data + (s->off - hl)), total - s->off};
      }
      struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
      ssize_t k = sendmsg(s->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      const int err = k < 0 ? errno : 0;
      if (k > 0) {
        s->off += (size_t)k;
        if ((*moved += (size_t)k) >= budget && s->off < total) {
          pthread_mutex_lock(&s->queue_lock);
          rn_tcp_stream_leave(s, 0);
          pthread_mutex_unlock(&s->queue_lock);
          return 1;
        }
        continue;
      }
      if (err == EINTR) continue;
      const int again = err == EAGAIN || err == EWOULDBLOCK;
      pthread_mutex_lock(&s->queue_lock);
      rn_tcp_stream_leave(s, !again);
      pthread_mutex_unlock(&s->queue_lock);
      if (again) return 1;
      if (atomic_load(&c->stop)) return -1;
      return rn_tcp_stream_broke(c, s, k < 0 ? strerror(err) : "closed");
    }
    struct rn_tcp_rail *rail = &c->rail[s->rail];
    pthread_mutex_lock(&s->queue_lock);
    rn_tcp_stream_leave(s, 1);
    if (atomic_load(&s->dead)) {
      /* Its rail was taken out meanwhile: the queue moved, and the caller
       * counted this chunk as not written (it goes again), so nothing is
       * counted here. */
      pthread_mutex_unlock(&s->queue_lock);
      return -1;
    }
    atomic_fetch_add_explicit(&rail->bytes, w->hdr.p.plen, memory_order_relaxed);
    atomic_fetch_add_explicit(&rail->chunks, 1, memory_order_relaxed);
    if (w->hdr.attempt > 0) atomic_fetch_add_explicit(&rail->replays, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&rail->pending, w->hdr.p.plen, memory_order_relaxed);
    if (!w->keep) atomic_fetch_sub(&w->req->unsent, (size_t)w->hdr.p.plen);
    atomic_fetch_sub(&c->stream_work, 1);
    s->off = 0;
    s->queue_head = (s->queue_head + 1) % RN_TCP_STREAM_QUEUE;
    pthread_mutex_unlock(&s->queue_lock);
    if (*moved >= budget) return 1;
  }
}

void rn_tcp_recv_claim(struct rn_tcp_comm *c, struct rn_tcp_req *r, int idx) {
  r->claimed |= 1u << idx;
  if (r->posted[idx] > 0) atomic_fetch_sub(&c->unclaimed, 1);
  while (c->match_head < c->recv_seq) {
    const struct rn_tcp_req *h = c->ring[c->match_head % RN_TCP_RING];
    if (h != NULL && h->seq == c->match_head && h->claimed != (1u << h->n) - 1) break;
    c->match_head++;
  }
}

ncclResult_t rn_tcp_claim_seen(struct rn_tcp_comm *c, uint32_t claim, const char *what) {
  const uint32_t off = claim - (uint32_t)c->claim_low;
  const uint64_t n = c->claim_low + off;
  uint64_t *word = &c->claim_seen[(n / 64) % (RN_TCP_CLAIM_WINDOW / 64)];
  if (off >= RN_TCP_CLAIM_WINDOW || (*word & (1ull << (n % 64))))
    return RN_TCP_VIOLATION(c, what, "claim",
                            "%u, expected one not seen before, from %u up to %u (message %llu "
                            "and on%s)",
                            claim, (uint32_t)c->claim_low,
                            (uint32_t)(c->claim_low + RN_TCP_CLAIM_WINDOW - 1),
                            (unsigned long long)c->claim_low,
                            off < RN_TCP_CLAIM_WINDOW ? ": this one came twice" : "");
  /* Messages known to be on their way: numbered below the highest seen,
   * not seen yet.  They count as streamed work (awaited, their stall
   * bounded) until they arrive. */
  const int64_t before = (int64_t)(c->claim_hi - c->claim_low) - c->claim_ahead;
  *word |= 1ull << (n % 64);
  c->claim_ahead++;
  if (n >= c->claim_hi) c->claim_hi = n + 1;
  for (;;) {
    uint64_t *w = &c->claim_seen[(c->claim_low / 64) % (RN_TCP_CLAIM_WINDOW / 64)];
    if (!(*w & (1ull << (c->claim_low % 64)))) break;
    *w &= ~(1ull << (c->claim_low % 64));
    c->claim_low++;
    c->claim_ahead--;
  }
  const int64_t after = (int64_t)(c->claim_hi - c->claim_low) - c->claim_ahead;
  if (after != before) atomic_fetch_add(&c->stream_work, (int)(after - before));
  return ncclSuccess;
}

ncclResult_t rn_tcp_buf_shape(struct rn_tcp_comm *c, struct rn_tcp_req *r, int idx,
                              enum rn_tcp_buf_mode mode, uint64_t size, uint32_t grid,
                              const char *what) {
  static const char *const names[] = {"unknown", "inline", "streamed"};
  if (mode == RN_TCP_BUF_STREAMED) {
    /* size >= 1 and size <= posted (<= INT_MAX) are the caller's checks. */
    if (grid < 1 || grid > RN_TCP_MAX_GRID || (size + grid - 1) / grid > RN_TCP_MAX_CHUNKS)
      return RN_TCP_VIOLATION(c, what, "grid", "%u for %llu bytes, expected 1..%u and <= %d chunks",
                              grid, (unsigned long long)size, RN_TCP_MAX_GRID, RN_TCP_MAX_CHUNKS);
  }
  if (r->mode[idx] == RN_TCP_BUF_UNKNOWN) {
    if (mode == RN_TCP_BUF_STREAMED && c->cover == NULL) {
      c->cover = calloc(RN_TCP_RING, sizeof(*c->cover));
      c->inflight = calloc(RN_TCP_RING, sizeof(*c->inflight));
      if (c->cover == NULL || c->inflight == NULL) {
        free(c->cover);
        free(c->inflight);
        c->cover = NULL;
        c->inflight = NULL;
        return rn_tcp_fail(c, ncclSystemError,
                           "out of memory for the chunk maps of a streamed message from %s",
                           c->peer);
      }
    }
    r->mode[idx] = mode;
    r->size_of[idx] = size;
    r->grid[idx] = grid;
    if (mode == RN_TCP_BUF_STREAMED) {
      size_t words = (size_t)((size + grid - 1) / grid + 63) / 64;
      memset(c->cover[r->seq % RN_TCP_RING][idx], 0, words * sizeof(uint64_t));
      memset(c->inflight[r->seq % RN_TCP_RING][idx], 0, words * sizeof(uint64_t));
    }
    return ncclSuccess;
  }
  if (r->mode[idx] != mode || r->size_of[idx] != size || r->grid[idx] != grid)
    return RN_TCP_VIOLATION(c, what, "size/grid",
                            "%s %llu/%u for group %llu buffer %d, expected %s %llu/%u as announced",
                            names[mode], (unsigned long long)size, grid, (unsigned long long)r->seq,
                            idx, names[r->mode[idx]], (unsigned long long)r->size_of[idx],
                            r->grid[idx]);
  return ncclSuccess;
}

/* The chunk on s is a copy that already landed: it is read into scratch
 * and dropped.  rx_lock held. */
static ncclResult_t rn_tcp_discard_to(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  if (s->scratch == NULL && (s->scratch = malloc(RN_TCP_SCRATCH)) == NULL)
    return rn_tcp_fail(c, ncclSystemError, "out of memory for a re-sent chunk from %s", c->peer);
  s->rx_discard = 1;
  return ncclSuccess;
}

/* A chunk with CLAIM for buffer idx of r (its shape checked): the first of
 * its message's chunks to arrive claims the buffer, as a DATA header
 * would; the others must name the same message.  rx_lock held. */
static ncclResult_t rn_tcp_chunk_claim(struct rn_tcp_comm *c, struct rn_tcp_req *r, int idx,
                                       const struct rn_tcp_chunk *h, const char *what) {
  const uint32_t bit = 1u << idx;
  if (r->tag[idx] != h->tag || r->ord[idx] != h->nth ||
      ((r->claimed & bit) && r->claimno[idx] != h->claim))
    return RN_TCP_VIOLATION(c, what, "tag/nth/claim",
                            "%d/%u/%u for group %llu buffer %d, expected %d/%u%s", h->tag, h->nth,
                            h->claim, (unsigned long long)r->seq, idx, r->tag[idx], r->ord[idx],
                            (r->claimed & bit) ? " and the claim of the message that filled it"
                                               : "");
  if (r->claimed & bit) return ncclSuccess;
  RN_CHECK(rn_tcp_claim_seen(c, h->claim, what));
  rn_tcp_recv_claim(c, r, idx);
  r->claimno[idx] = h->claim;
  if (h->p.flags & RN_TCP_CHUNK_ACK) r->ack_wanted |= bit;
  atomic_fetch_add(&c->stream_work, 1); /* this chunk is new: not filled yet */
  atomic_store(&c->chunk_credit, 1);
  return ncclSuccess;
}

/* A chunk header arrived: check every field against the posted group and
 * what earlier headers fixed, and claim its place on the grid, under
 * rx_lock so the caller cannot retire the group meanwhile.  Sets where
 * the payload goes. */
static ncclResult_t rn_tcp_chunk_begin(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  static const char what[] = "chunk header";
  const struct rn_tcp_chunk *h = &s->rx_hdr;
  if (h->p.type != RN_TCP_MSG_CHUNK)
    return RN_TCP_VIOLATION(c, what, "type", "%u, expected %u", h->p.type, RN_TCP_MSG_CHUNK);
  if (h->p.hlen != sizeof(*h))
    return RN_TCP_VIOLATION(c, what, "hlen", "%u, expected %zu", h->p.hlen, sizeof(*h));
  if (!rn_tcp_wire_crc_ok(h, sizeof(*h))) return RN_TCP_VIOLATION(c, what, "crc", "%s", "mismatch");
  const int claims = (h->p.flags & RN_TCP_CHUNK_CLAIM) != 0;
  if ((h->p.flags & ~RN_TCP_CHUNK_FLAGS) != 0 || (!claims && h->p.flags != 0))
    return RN_TCP_VIOLATION(c, what, "flags", "0x%x, expected 0, CLAIM 0x%x, or CLAIM with ACK 0x%x",
                            h->p.flags, RN_TCP_CHUNK_CLAIM, RN_TCP_CHUNK_ACK);
  if (!claims && (h->tag != 0 || h->nth != 0 || h->claim != 0))
    return RN_TCP_VIOLATION(c, what, "tag/nth/claim", "%d/%u/%u, expected 0 without CLAIM", h->tag,
                            h->nth, h->claim);
  if (h->attempt > RN_TCP_MAX_ATTEMPT)
    return RN_TCP_VIOLATION(c, what, "attempt", "%u, expected <= %d", h->attempt,
                            RN_TCP_MAX_ATTEMPT);
  ncclResult_t res = ncclSuccess;
  s->rx_discard = 0;
  pthread_mutex_lock(&c->rx_lock);
  struct rn_tcp_req *r = c->ring[h->seq % RN_TCP_RING];
  uint64_t nchunks = 0, expect_len = 0;
  if ((r == NULL || r->seq != h->seq) && h->seq < c->recv_seq &&
      (h->attempt > 0 || h->seq < c->resent_hi)) {
    /* A re-sent copy for a group that completed: its first copy landed.
     * Or a first copy for a group that got re-sent chunks: it trailed
     * them (it was already on its way, in a queue on the path, when the
     * sender took its rail out).  Only its own shape can be checked; it
     * is read and dropped. */
    uint64_t n = h->grid ? (h->total + h->grid - 1) / h->grid : 0;
    if (h->grid < 1 || h->grid > RN_TCP_MAX_GRID || h->total < 1 || h->total > INT_MAX ||
        n > RN_TCP_MAX_CHUNKS || h->index >= n || h->offset != (uint64_t)h->index * h->grid ||
        h->p.plen != (h->total - h->offset < h->grid ? h->total - h->offset : h->grid))
      res = RN_TCP_VIOLATION(c, what, "total/grid/index/offset/plen",
                             "%llu/%u/%u/%llu/%u: not a chunk of any message (a re-send for "
                             "completed group %llu)",
                             (unsigned long long)h->total, h->grid, h->index,
                             (unsigned long long)h->offset, h->p.plen, (unsigned long long)h->seq);
    else
      res = rn_tcp_discard_to(c, s);
  } else if (r == NULL || r->seq != h->seq) {
    res = RN_TCP_VIOLATION(c, what, "seq", "%llu: no such group is posted",
                           (unsigned long long)h->seq);
  } else if (h->idx >= (uint32_t)r->n) {
    res = RN_TCP_VIOLATION(c, what, "idx", "%u, expected < %d", h->idx, r->n);
  } else if (h->total < 1 || h->total > r->posted[h->idx]) {
    res = RN_TCP_VIOLATION(c, what, "total", "%llu, expected 1..%zu (posted)",
                           (unsigned long long)h->total, r->posted[h->idx]);
  } else if ((res = rn_tcp_buf_shape(c, r, (int)h->idx, RN_TCP_BUF_STREAMED, h->total, h->grid,
                                     what)) != ncclSuccess) {
  } else if (h->index >= (nchunks = (h->total + h->grid - 1) / h->grid)) {
    res = RN_TCP_VIOLATION(c, what, "index", "%u, expected < %llu", h->index,
                           (unsigned long long)nchunks);
  } else if (h->offset != (uint64_t)h->index * h->grid) {
    res = RN_TCP_VIOLATION(c, what, "offset", "%llu, expected %llu (index %u x grid %u)",
                           (unsigned long long)h->offset, (unsigned long long)h->index * h->grid,
                           h->index, h->grid);
  } else if (h->p.plen !=
             (expect_len = h->total - h->offset < h->grid ? h->total - h->offset : h->grid)) {
    res = RN_TCP_VIOLATION(c, what, "plen", "%u, expected %llu", h->p.plen,
                           (unsigned long long)expect_len);
  } else {
    /* A first copy must be new; a re-sent one (attempt > 0) may meet its
     * first copy still arriving over a failing rail (both write the same
     * bytes to the same place; the first to finish counts), or already
     * landed (it is dropped).  So may a first copy that trails a re-sent
     * chunk of its buffer: the sender took its rail out while it was
     * still on its way. */
    uint64_t *word = &c->cover[h->seq % RN_TCP_RING][h->idx][h->index / 64];
    uint64_t *busy = &c->inflight[h->seq % RN_TCP_RING][h->idx][h->index / 64];
    uint64_t bit = 1ull << (h->index % 64);
    if (h->attempt > 0) {
      r->resent |= 1u << h->idx;
      if (h->seq >= c->resent_hi) c->resent_hi = h->seq + 1;
    }
    if (((*word | *busy) & bit) && h->attempt == 0 && !(r->resent & (1u << h->idx))) {
      res = RN_TCP_VIOLATION(c, what, "index", "%u of group %llu buffer %u arrived twice", h->index,
                             (unsigned long long)h->seq, h->idx);
    } else if (*word & bit) {
      res = rn_tcp_discard_to(c, s);
    } else if (claims && (res = rn_tcp_chunk_claim(c, r, (int)h->idx, h, what)) != ncclSuccess) {
    } else {
      *busy |= bit;
      r->writers++;
      s->rx_busy = 1;
      s->rx_busy_seq = h->seq;
      s->rx_busy_pos = rn_tcp_chunk_pos(h);
      s->rx_req = r;
      s->rx_dst = (char *)r->buf[h->idx] + h->offset;
    }
  }
  pthread_mutex_unlock(&c->rx_lock);
  return res;
}

/* rx_lock held: the stream no longer writes a chunk into a buffer (it
 * ended, or the rest of the chunk is dropped). */
static void rn_tcp_stream_unbusy(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  s->rx_busy = 0;
  if (atomic_load(&s->rx_drop)) {
    atomic_store(&s->rx_drop, 0);
    atomic_fetch_sub(&c->rx_drops, 1);
  }
}

/* rx_lock held: a copy of chunk (seq, pos) landed from stream `self`;
 * every other stream still writing a copy of it into the buffer is told to
 * drop the rest (its driver reads it into scratch: rn_tcp_stream_drop),
 * so that the group does not wait for a copy that trickles in over a
 * slow or lossy rail (a rescue, rn_tcp_rail_rescue, left that rail up).
 * Returns those streams (bit i: stream i), to be woken. */
static uint32_t rn_tcp_chunk_dup_drop(struct rn_tcp_comm *c, const struct rn_tcp_stream *self,
                                      uint64_t seq, uint32_t pos) {
  uint32_t mask = 0;
  for (int i = 0; i < c->nstreams; i++) {
    struct rn_tcp_stream *o = &c->stream[i];
    if (o == self || !o->rx_busy || o->rx_busy_seq != seq || o->rx_busy_pos != pos ||
        atomic_load(&o->rx_drop))
      continue;
    atomic_store(&o->rx_drop, 1);
    atomic_fetch_add(&c->rx_drops, 1);
    mask |= 1u << i;
  }
  return mask;
}

/* Receive, the stream's driver: another copy of the chunk it writes
 * landed (rx_drop): it stops writing into the buffer, and reads the rest
 * of the chunk into scratch; the group no longer waits for it.  The bytes
 * it wrote so far are the same as the copy's. */
static void rn_tcp_stream_drop(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  if (!atomic_load(&s->rx_drop)) return;
  pthread_mutex_lock(&c->rx_lock);
  if (atomic_load(&s->rx_drop) && s->rx_busy && s->rx_req != NULL && !s->rx_discard &&
      (s->scratch != NULL || (s->scratch = malloc(RN_TCP_SCRATCH)) != NULL)) {
    s->rx_req->writers--;
    s->rx_discard = 1;
    rn_tcp_stream_unbusy(c, s);
  }
  pthread_mutex_unlock(&c->rx_lock);
}

/* A chunk's payload has all landed (or, discarded, was read). */
static void rn_tcp_chunk_end(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  struct rn_tcp_req *r = s->rx_req;
  const struct rn_tcp_chunk *h = &s->rx_hdr;
  const int idx = (int)h->idx;
  struct rn_tcp_rail *rail = &c->rail[s->rail];
  if (h->attempt > 0) atomic_fetch_add_explicit(&rail->replays, 1, memory_order_relaxed);
  s->off = 0;
  s->rx_req = NULL;
  if (s->rx_discard) {
    s->rx_discard = 0;
    return;
  }
  int counted = 0;
  uint32_t drop = 0;
  pthread_mutex_lock(&c->rx_lock);
  uint64_t *word = &c->cover[h->seq % RN_TCP_RING][idx][h->index / 64];
  uint64_t bit = 1ull << (h->index % 64);
  c->inflight[h->seq % RN_TCP_RING][idx][h->index / 64] &= ~bit;
  r->writers--;
  rn_tcp_stream_unbusy(c, s);
  if (!(*word & bit)) { /* the first copy to finish counts */
    *word |= bit;
    counted = 1;
    if (r->resent & (1u << idx)) drop = rn_tcp_chunk_dup_drop(c, s, h->seq, rn_tcp_chunk_pos(h));
    r->arrived[idx] += h->p.plen;
    if (r->arrived[idx] == r->size_of[idx]) {
      r->filled |= 1u << idx;
      if (r->claimed & (1u << idx)) atomic_fetch_sub(&c->stream_work, 1);
      atomic_store(&c->ack_due, 1);
    }
  }
  pthread_mutex_unlock(&c->rx_lock);
  if (counted) {
    atomic_fetch_add_explicit(&rail->bytes, h->p.plen, memory_order_relaxed);
    atomic_fetch_add_explicit(&rail->chunks, 1, memory_order_relaxed);
  }
  for (int i = 0; drop != 0 && i < c->nstreams && c->nthreads > 0; i++)
    if (drop & (1u << i)) rn_tcp_wake(c, i);
}

/* A receive stream ended: a chunk it was reading stops counting as being
 * written (a re-sent copy completes it). */
static void rn_tcp_stream_recv_end(struct rn_tcp_comm *c, struct rn_tcp_stream *s, int lost,
                                   const char *why) {
  const size_t hl = sizeof(s->rx_hdr);
  if (s->off >= hl && s->rx_req != NULL && !s->rx_discard) {
    pthread_mutex_lock(&c->rx_lock);
    c->inflight[s->rx_hdr.seq % RN_TCP_RING][s->rx_hdr.idx][s->rx_hdr.index / 64] &=
        ~(1ull << (s->rx_hdr.index % 64));
    s->rx_req->writers--;
    rn_tcp_stream_unbusy(c, s);
    pthread_mutex_unlock(&c->rx_lock);
  }
  s->rx_req = NULL;
  snprintf(s->cause, sizeof(s->cause), "%s", why);
  s->lost = lost;
  atomic_store(&s->dead, 1);
  rn_tcp_rails_stream_ended(c, s);
}

/* A chunk header has all arrived: check and claim it (rn_tcp_chunk_begin).
 * Returns -1, the stream ended, when the peer broke the protocol. */
static int rn_tcp_stream_header_in(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  if (rn_tcp_chunk_begin(c, s) == ncclSuccess) return 0;
  s->rx_req = NULL;
  atomic_store(&s->dead, 1);
  return -1;
}

/* Read chunks into their receive buffers.  The rest of a payload is read
 * with whatever the socket holds of the next chunk's header, into a
 * buffer of our own (where the next payload goes is known only once its
 * header is checked), so a stream of chunks costs one read per chunk, not
 * two; *moved counts what was read, up to about budget.  Returns 0 when
 * the socket is drained (or the budget is used), -1 on error or EOF. */
static int rn_tcp_stream_recv(struct rn_tcp_comm *c, struct rn_tcp_stream *s, size_t budget,
                              size_t *moved) {
  const size_t hl = sizeof(s->rx_hdr);
  struct rn_tcp_chunk next;
  while (*moved < budget) {
    struct iovec iov[2];
    size_t want;
    int niov = 1;
    if (s->off >= hl) rn_tcp_stream_drop(c, s);
    if (s->off < hl) {
      want = hl - s->off;
      iov[0] = (struct iovec){(char *)&s->rx_hdr + s->off, want};
    } else {
      want = s->rx_hdr.p.plen - (s->off - hl);
      if (s->rx_discard && want > RN_TCP_SCRATCH) {
        want = RN_TCP_SCRATCH;
      } else {
        iov[1] = (struct iovec){&next, hl};
        niov = 2;
      }
      iov[0] = (struct iovec){s->rx_discard ? s->scratch : s->rx_dst + (s->off - hl), want};
    }
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
    ssize_t k = recvmsg(s->fd, &m, MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (atomic_load(&c->stop)) return -1;
    if (k < 0) {
      rn_tcp_stream_recv_end(c, s, 1, strerror(errno));
      return -1;
    }
    if (k == 0) {
      /* EOF between chunks is the peer's close; inside one, the stream is
       * lost (the sender sends the chunk again over another rail). */
      rn_tcp_stream_recv_end(c, s, s->off != 0, "closed in the middle of a chunk");
      return -1;
    }
    *moved += (size_t)k;
    atomic_fetch_add_explicit(&c->rail[s->rail].read, (uint64_t)k, memory_order_relaxed);
    size_t ahead = (size_t)k > want ? (size_t)k - want : 0;
    s->off += (size_t)k - ahead;
    if (s->off == hl && rn_tcp_stream_header_in(c, s) != 0) return -1;
    if (s->off >= hl && s->off == hl + s->rx_hdr.p.plen) {
      rn_tcp_chunk_end(c, s); /* s->off = 0 */
      if (ahead > 0) {
        memcpy(&s->rx_hdr, &next, ahead);
        s->off = ahead;
        if (s->off == hl && rn_tcp_stream_header_in(c, s) != 0) return -1;
      }
    }
  }
  return 0;
}

size_t rn_tcp_stream_step(struct rn_tcp_comm *c, struct rn_tcp_stream *s, short re,
                          size_t budget) {
  int rc = 0;
  size_t moved = 0;
  if (s->dead) return 0;
  if (c->is_recv && atomic_load(&s->retire)) {
    /* The sender gave it up: a chunk it was reading is sent again
     * elsewhere, and nothing it still holds may land any more. */
    shutdown(s->fd, SHUT_RDWR);
    rn_tcp_stream_recv_end(c, s, 1, "taken out by the sender");
    return 0;
  }
  if (c->is_recv) {
    rn_tcp_stream_drop(c, s); /* another copy of its chunk landed */
    if (re & (POLLIN | POLLHUP | POLLERR)) rc = rn_tcp_stream_recv(c, s, budget, &moved);
  } else if ((re & POLLIN) && !(re & POLLOUT)) {
    /* The receiver never writes on data streams: readable means EOF.
     * (Edge-triggered, both may come at once: the write then sees it.) */
    char b;
    ssize_t k = recv(s->fd, &b, 1, MSG_DONTWAIT);
    if (k > 0) {
      RN_TCP_VIOLATION(c, "data stream", "direction", "%s", "the receiver wrote on it");
      atomic_store(&s->dead, 1);
    } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
      atomic_store(&c->peer_closed, 1);
      atomic_store(&s->dead, 1);
    }
  } else {
    /* Writable, or new work may have been queued since poll() was armed. */
    rc = rn_tcp_stream_send(c, s, budget, &moved);
  }
  /* A stream that ended was marked dead where it ended, and from then on
   * belongs to the caller, which may give it a new connection (rails.c):
   * nothing here touches it after that. */
  if (rc < 0 && atomic_load(&c->stop)) atomic_store(&s->dead, 1);
  return moved;
}

/* The caller moves at most this many bytes per stream per call, so a
 * proxy thread that also serves latency-critical comms (a communicator
 * split with shared resources) returns to them soon: their small messages
 * do not wait behind a socket buffer's worth of bulk chunks.  While a
 * latency-critical send comm of the process (a traffic class of
 * RAILNET_TRAFFIC_CLASS_URGENT or more) was called lately (rn_tcp_yields),
 * the others move that much over all their streams together (at least one
 * system call's worth, a chunk), each call starting at the stream after
 * the one the last call ended with; their throughput then gives way to
 * its latency. */
#define RN_TCP_DRIVE_BUDGET ((size_t)131072)

void rn_tcp_drive_streams(struct rn_tcp_comm *c) {
  const short re = c->is_recv ? POLLIN : POLLOUT;
  if (c->nstreams > 0 && rn_tcp_yields(c)) {
    size_t moved = 0;
    for (int k = 0; k < c->nstreams && moved < RN_TCP_DRIVE_BUDGET; k++) {
      int i = c->drive_next % c->nstreams;
      c->drive_next = (i + 1) % c->nstreams;
      moved += rn_tcp_stream_step(c, &c->stream[i], re, RN_TCP_DRIVE_BUDGET - moved);
    }
    return;
  }
  for (int i = 0; i < c->nstreams; i++)
    rn_tcp_stream_step(c, &c->stream[i], re, RN_TCP_DRIVE_BUDGET);
}

uint32_t rn_tcp_chunk_grid(const struct rn_tcp_comm *c, size_t size) {
  /* Before the streams open, as many as they will be (open.c). */
  const int n = c->nstreams > 0 ? c->nstreams : c->lazy.expect > 0 ? c->lazy.expect : 1;
  size_t chunk = (size + (size_t)n - 1) / (size_t)n;
  if (chunk < RN_TCP_MIN_CHUNK) chunk = RN_TCP_MIN_CHUNK;
  if (chunk > c->chunk) chunk = c->chunk;
  /* A huge message on few streams uses larger chunks, so that it always
   * fits in a quarter of each stream's queue and in the receiver's
   * coverage map. */
  size_t cap = (size_t)n * (RN_TCP_STREAM_QUEUE / 4);
  if (cap > RN_TCP_MAX_CHUNKS) cap = RN_TCP_MAX_CHUNKS;
  if ((size + chunk - 1) / chunk > cap) chunk = (size + cap - 1) / cap;
  return (uint32_t)chunk; /* size <= INT_MAX: at most RN_TCP_MAX_GRID */
}

/* The send queues, at the comm's first streamed message.  c->lock held;
 * each queue is published under its lock before any chunk goes in. */
static ncclResult_t rn_tcp_alloc_queues(struct rn_tcp_comm *c) {
  rn_tcp_rails_baseline(c);
  for (int i = 0; i < c->nstreams; i++) {
    struct rn_tcp_stream *s = &c->stream[i];
    if (s->queue != NULL) continue;
    struct rn_tcp_queued_chunk *q = malloc(RN_TCP_STREAM_QUEUE * sizeof(*q));
    if (q == NULL)
      return rn_tcp_fail(c, ncclSystemError, "out of memory for the send queues of a comm to %s",
                         c->peer);
    pthread_mutex_lock(&s->queue_lock);
    s->queue = q;
    pthread_mutex_unlock(&s->queue_lock);
  }
  return ncclSuccess;
}

/* Spread a message's chunks over the streams on its grid, each where
 * rn_tcp_rails_pick says it is delivered first.  Returns 0 when the queues
 * are full (nothing is queued then: a message goes whole or not at all). */
int rn_tcp_enqueue(struct rn_tcp_comm *c, struct rn_tcp_req *r, const char *data, size_t size,
                   uint32_t grid, uint64_t seq, uint32_t idx, const struct rn_tcp_chunk *claim) {
  size_t nchunks = (size + grid - 1) / grid;
  int used[RN_TCP_MAX_STREAMS];
  uint64_t load[RN_MAX_RAILS];
  uint8_t where[RN_TCP_MAX_CHUNKS];
  if (c->nbacklog > 0) return 0; /* chunks of a failed rail go first */
  if (c->stream[0].queue == NULL && rn_tcp_alloc_queues(c) != ncclSuccess) return 0;
  rn_tcp_rails_load(c, used, load);
  for (size_t k = 0; k < nchunks; k++) {
    size_t off = k * grid, len = size - off < grid ? size - off : grid;
    int sidx = rn_tcp_rails_pick(c, len, load, used, -1);
    if (sidx < 0) return 0;
    where[k] = (uint8_t)sidx;
    used[sidx]++;
    load[c->stream[sidx].rail] += len;
  }
  uint32_t touched = 0;
  atomic_store(&r->unsent, size);
  for (size_t k = 0; k < nchunks; k++) {
    int sidx = where[k];
    struct rn_tcp_stream *s = &c->stream[sidx];
    size_t off = k * grid, len = size - off < grid ? size - off : grid;
    struct rn_tcp_queued_chunk q = {.req = r,
                                    .gen = atomic_load(&r->gen),
                                    .keep = r->awaits_ack,
                                    .hdr = {.seq = seq,
                                            .total = size,
                                            .offset = off,
                                            .idx = idx,
                                            .index = (uint32_t)k,
                                            .grid = grid},
                                    .data = data + off};
    if (claim != NULL) {
      q.hdr.tag = claim->tag;
      q.hdr.nth = claim->nth;
      q.hdr.claim = claim->claim;
    }
    rn_tcp_wire_seal(&q.hdr, RN_TCP_MSG_CHUNK, claim ? claim->p.flags : 0, (uint32_t)len);
    atomic_fetch_add_explicit(&c->rail[s->rail].pending, len, memory_order_relaxed);
    pthread_mutex_lock(&s->queue_lock);
    s->queue[s->queue_tail] = q;
    s->queue_tail = (s->queue_tail + 1) % RN_TCP_STREAM_QUEUE;
    atomic_fetch_add(&c->stream_work, 1);
    pthread_mutex_unlock(&s->queue_lock);
    touched |= 1u << sidx;
  }
  if (c->nthreads > 0)
    for (int i = 0; i < c->nstreams; i++)
      if (touched & (1u << i)) rn_tcp_wake(c, i);
  return 1;
}
