/* TCP data streams: chunk queues, the chunk sender and receiver, and the
 * per-comm helper threads that drive them (or the calling thread, on
 * small hosts). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "railnet/check.h"
#include "tcp.h"

static int rn_tcp_stream_queue_empty(struct rn_tcp_stream *s) {
  return s->queue_head == s->queue_tail;
}

/* Write as much of the head chunk as the socket takes.  Returns 1 when the
 * stream has more to send, 0 when idle, -1 on error. */
static int rn_tcp_stream_send(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  for (;;) {
    pthread_mutex_lock(&s->queue_lock);
    if (rn_tcp_stream_queue_empty(s)) {
      pthread_mutex_unlock(&s->queue_lock);
      return 0;
    }
    struct rn_tcp_queued_chunk *w = &s->queue[s->queue_head];
    pthread_mutex_unlock(&s->queue_lock);
    size_t hl = sizeof(w->hdr), total = hl + w->hdr.len;
    while (s->off < total) {
      struct iovec iov[2];
      int niov = 0;
      if (s->off < hl) {
        iov[niov++] = (struct iovec){(char *)&w->hdr + s->off, hl - s->off};
        if (w->hdr.len) iov[niov++] = (struct iovec){(void *)w->data, w->hdr.len};
      } else {
        iov[niov++] = (struct iovec){(void *)(w->data + (s->off - hl)), total - s->off};
      }
      struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
      ssize_t k = sendmsg(s->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        s->off += (size_t)k;
        continue;
      }
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
      if (k < 0 && errno == EINTR) continue;
      if (!atomic_load(&c->stop))
        RN_WARN("data stream send failed: %s", k < 0 ? strerror(errno) : "closed");
      rn_tcp_set_error(c, ncclRemoteError);
      return -1;
    }
    atomic_fetch_sub(&w->req->unsent, (size_t)w->hdr.len);
    atomic_fetch_sub(&c->stream_work, 1);
    s->off = 0;
    pthread_mutex_lock(&s->queue_lock);
    s->queue_head = (s->queue_head + 1) % RN_TCP_STREAM_QUEUE;
    pthread_mutex_unlock(&s->queue_lock);
  }
}

/* Read chunks into their receive buffers.  Returns 0 when the socket is
 * drained, -1 on error or EOF. */
static int rn_tcp_stream_recv(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  const size_t hl = sizeof(s->rx_hdr);
  for (;;) {
    if (s->off < hl) {
      ssize_t k = recv(s->fd, (char *)&s->rx_hdr + s->off, hl - s->off, MSG_DONTWAIT);
      if (k > 0) {
        s->off += (size_t)k;
        if (s->off < hl) continue;
        /* A full header: find the posted group. */
        struct rn_tcp_chunk *h = &s->rx_hdr;
        struct rn_tcp_req *r =
            atomic_load_explicit(&c->ring[h->seq % RN_TCP_RING], memory_order_acquire);
        if (r == NULL || r->seq != h->seq || h->idx >= (uint32_t)r->n ||
            h->total > r->posted[h->idx] || h->offset + h->len > h->total) {
          RN_WARN(
              "protocol error: chunk seq %llu idx %u off %llu len %u total %llu "
              "matches no posted receive",
              (unsigned long long)h->seq, h->idx, (unsigned long long)h->offset, h->len,
              (unsigned long long)h->total);
          rn_tcp_set_error(c, ncclRemoteError);
          return -1;
        }
        s->rx_req = r;
        s->rx_dst = (char *)r->buf[h->idx] + h->offset;
        continue;
      }
      if (k == 0) {
        /* EOF between chunks is the peer's close; inside one, a failure. */
        if (s->off != 0) {
          RN_WARN("peer closed a data stream in the middle of a chunk header");
          rn_tcp_set_error(c, ncclRemoteError);
        }
        return -1;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      if (errno == EINTR) continue;
      rn_tcp_set_error(c, ncclRemoteError);
      return -1;
    }
    size_t done = s->off - hl;
    size_t left = s->rx_hdr.len - done;
    if (left > 0) {
      ssize_t k = recv(s->fd, s->rx_dst + done, left, MSG_DONTWAIT);
      if (k > 0) {
        s->off += (size_t)k;
      } else if (k == 0) {
        RN_WARN("peer closed a data stream in the middle of a chunk");
        rn_tcp_set_error(c, ncclRemoteError);
        return -1;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return 0;
      } else if (errno != EINTR) {
        RN_WARN("data stream recv failed: %s", strerror(errno));
        rn_tcp_set_error(c, ncclRemoteError);
        return -1;
      }
      if (s->off - hl < s->rx_hdr.len) continue;
    }
    /* Chunk complete. */
    struct rn_tcp_req *r = s->rx_req;
    _Atomic size_t *arrived = &r->arrived[s->rx_hdr.idx];
    size_t now =
        atomic_fetch_add_explicit(arrived, s->rx_hdr.len, memory_order_acq_rel) + s->rx_hdr.len;
    if (now == s->rx_hdr.total) {
      r->got[s->rx_hdr.idx] = s->rx_hdr.total;
      atomic_fetch_sub(&c->stream_work, 1);
      atomic_fetch_sub_explicit(&r->pending, 1, memory_order_release);
    }
    s->off = 0;
    s->rx_req = NULL;
  }
}

/* Progress one stream after poll() said what it can do (or blindly, when
 * the caller drives the streams itself). */
static void rn_tcp_stream_step(struct rn_tcp_comm *c, struct rn_tcp_stream *s, short re) {
  int rc = 0;
  if (s->dead) return;
  if (c->is_recv) {
    if (re & (POLLIN | POLLHUP | POLLERR)) rc = rn_tcp_stream_recv(c, s);
  } else if (re & (POLLOUT | POLLERR | POLLHUP)) {
    rc = rn_tcp_stream_send(c, s);
  } else if (re & POLLIN) {
    /* The receiver never writes on data streams: readable means EOF. */
    char b;
    ssize_t k = recv(s->fd, &b, 1, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
      atomic_store(&c->peer_closed, 1);
      rc = -1;
    }
  } else {
    /* New work may have been queued since poll() was armed. */
    rc = rn_tcp_stream_send(c, s);
  }
  if (rc < 0) s->dead = 1;
}

void rn_tcp_drive_streams(struct rn_tcp_comm *c) {
  for (int i = 0; i < c->nstreams; i++)
    rn_tcp_stream_step(c, &c->stream[i], c->is_recv ? POLLIN : POLLOUT);
}

void *rn_tcp_thread_main(void *arg) {
  struct rn_tcp_thread *t = arg;
  struct rn_tcp_comm *c = t->comm;
  struct pollfd pfd[1 + RN_TCP_MAX_STREAMS];
  int ids[RN_TCP_MAX_STREAMS];
  int nmine = 0;
  for (int i = t->first; i < c->nstreams; i += t->step) ids[nmine++] = i;
  while (!atomic_load(&c->stop)) {
    int np = 0;
    pfd[np++] = (struct pollfd){.fd = t->wake_fd, .events = POLLIN};
    for (int k = 0; k < nmine; k++) {
      struct rn_tcp_stream *s = &c->stream[ids[k]];
      short ev = POLLIN; /* data on a receive stream, EOF on a send stream */
      if (!c->is_recv) {
        pthread_mutex_lock(&s->queue_lock);
        if (!rn_tcp_stream_queue_empty(s)) ev = POLLOUT;
        pthread_mutex_unlock(&s->queue_lock);
      }
      pfd[np++] = (struct pollfd){.fd = s->dead ? -1 : s->fd, .events = ev};
    }
    if (poll(pfd, (nfds_t)np, -1) < 0 && errno != EINTR) {
      RN_WARN("poll failed: %s", strerror(errno));
      rn_tcp_set_error(c, ncclSystemError);
      break;
    }
    if (pfd[0].revents & POLLIN) {
      uint64_t v;
      ssize_t rd = read(t->wake_fd, &v, sizeof(v));
      (void)rd;
    }
    for (int k = 0; k < nmine; k++) rn_tcp_stream_step(c, &c->stream[ids[k]], pfd[k + 1].revents);
  }
  return NULL;
}

static void rn_tcp_wake(struct rn_tcp_comm *c, int stream) {
  uint64_t one = 1;
  if (c->nthreads == 0) return;
  ssize_t wr = write(c->thread[stream % c->nthreads].wake_fd, &one, sizeof(one));
  (void)wr;
}

/* Spread a message over the streams.  Returns 0 when the queues are full. */
int rn_tcp_enqueue(struct rn_tcp_comm *c, struct rn_tcp_req *r, const char *data, size_t size,
                   uint64_t seq, uint32_t idx) {
  size_t chunk = (size + (size_t)c->nstreams - 1) / (size_t)c->nstreams;
  if (chunk < RN_TCP_MIN_CHUNK) chunk = RN_TCP_MIN_CHUNK;
  if (chunk > c->chunk) chunk = c->chunk;
  /* A huge message on few streams uses larger chunks, so that it always
   * fits in a quarter of each stream's queue. */
  size_t cap = (size_t)c->nstreams * (RN_TCP_STREAM_QUEUE / 4);
  if ((size + chunk - 1) / chunk > cap) chunk = (size + cap - 1) / cap;
  size_t nchunks = (size + chunk - 1) / chunk;
  /* Check room first so a message is queued whole or not at all. */
  size_t per = nchunks / (size_t)c->nstreams + 1;
  for (int i = 0; i < c->nstreams; i++) {
    struct rn_tcp_stream *s = &c->stream[i];
    pthread_mutex_lock(&s->queue_lock);
    int used = (s->queue_tail - s->queue_head + RN_TCP_STREAM_QUEUE) % RN_TCP_STREAM_QUEUE;
    pthread_mutex_unlock(&s->queue_lock);
    if ((size_t)used + per >= RN_TCP_STREAM_QUEUE) return 0;
  }
  atomic_store(&r->unsent, size);
  uint32_t touched = 0;
  for (size_t off = 0; off < size; off += chunk) {
    int sidx = (int)(c->next_stream++ % (unsigned)c->nstreams);
    struct rn_tcp_stream *s = &c->stream[sidx];
    size_t len = size - off < chunk ? size - off : chunk;
    pthread_mutex_lock(&s->queue_lock);
    s->queue[s->queue_tail] = (struct rn_tcp_queued_chunk){
        .req = r,
        .hdr = {.seq = seq, .idx = idx, .len = (uint32_t)len, .offset = off, .total = size},
        .data = data + off};
    s->queue_tail = (s->queue_tail + 1) % RN_TCP_STREAM_QUEUE;
    atomic_fetch_add(&c->stream_work, 1);
    pthread_mutex_unlock(&s->queue_lock);
    if (c->nthreads > 0) touched |= 1u << (sidx % c->nthreads);
  }
  for (int t = 0; t < c->nthreads; t++)
    if (touched & (1u << t)) rn_tcp_wake(c, t);
  return 1;
}
