/* The TCP transport: one control connection plus N data streams per comm.
 *
 * Receiver-driven, like the verbs path: irecv sends a clear-to-send (CTS)
 * with the posted sizes and tags on the control connection; isend matches
 * the CTS for its sequence number by tag.  Messages up to
 * RAILNET_SOCKET_INLINE bytes travel inline behind a header on the control
 * connection, moved by the calling (NCCL proxy) thread with no hand-off, so
 * small-message latency is one TCP round trip.  Larger messages are cut
 * into chunks spread over the data streams, each chunk carrying its own
 * header, and are moved by per-comm helper threads straight between the
 * user buffers and the sockets.
 *
 * Locking: c->lock guards the control state (request pool, CTS/recv rings,
 * control buffers).  Helper threads touch only their streams, the stream
 * queues (under the queue lock) and atomics in requests and the comm. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/param.h"
#include "tcp.h"

#define RN_TCP_MAX_IFS RN_MAX_NICS
#define RN_TCP_MAX_ADDRS ((int)(RN_HANDLE_PAYLOAD / sizeof(struct rn_wire_addr)))
#define RN_TCP_NREQS 256 /* NCCL_NET_MAX_REQUESTS x maxRecvs */
#define RN_TCP_RING 64   /* outstanding receive groups (>= 32) */
#define RN_TCP_QUEUE 512 /* chunks queued per stream */
#define RN_TCP_MIN_CHUNK 65536
#define RN_TCP_MAX_STREAMS RN_RDV_MAX_STREAMS
#define RN_TCP_CTL_BUF 65536 /* control input buffer */
#define RN_TCP_CTL_Q 512     /* control messages queued for output */

/* Small messages sent before their clear-to-send arrived, unmatched at the
 * sender and possibly unexpected at the receiver, at most this many. */
#define RN_TCP_EAGER_WINDOW 64
#define RN_TCP_EAGER_MAX 1024

enum rn_tcp_msg { RN_TCP_CTS = 1, RN_TCP_DATA = 2, RN_TCP_NACK = 3 };
enum {
  RN_TCP_F_TOO_BIG = 1,  /* the send exceeds the posted buffer: fail both sides */
  RN_TCP_F_STREAMED = 2, /* the payload follows on the data streams */
  RN_TCP_F_EAGER = 4,    /* sent before its clear-to-send: seq/idx unknown, match by tag */
};

struct rn_tcp_cts {
  uint32_t type;
  uint32_t n;
  uint64_t seq;
  uint64_t sizes[RN_MAX_RECVS];
  int32_t tags[RN_MAX_RECVS];
};

/* Control-connection data header; `inline_len` payload bytes follow. */
struct rn_tcp_data {
  uint32_t type;
  uint32_t idx;
  uint64_t seq;
  uint64_t size;
  uint32_t flags;
  uint32_t inline_len;
  int32_t tag;
  uint32_t reserved;
};

/* Receiver to sender: an eager message did not fit its buffer. */
struct rn_tcp_nack {
  uint32_t type;
  int32_t tag;
  uint64_t size;
  uint64_t posted;
};

/* An eager message that arrived before its receive was posted. */
struct rn_tcp_unexp {
  int32_t tag;
  int ready; /* payload complete */
  uint64_t size;
  char data[RN_TCP_EAGER_MAX];
};

/* Data-stream chunk header; `len` payload bytes follow. */
struct rn_tcp_chunk {
  uint64_t seq;
  uint32_t idx;
  uint32_t len;
  uint64_t offset;
  uint64_t total;
};

static struct rn_tcp_if rn_tcp_ifs[RN_TCP_MAX_IFS];
static int rn_tcp_nifs;

struct rn_tcp_comm;

enum rn_tcp_req_state { RN_TCP_REQ_FREE = 0, RN_TCP_REQ_ACTIVE };

/* Owner: the comm's pool.  Atomics are shared with the helper threads. */
struct rn_tcp_req {
  struct rn_req_base base;
  struct rn_tcp_comm *comm;
  enum rn_tcp_req_state state;
  int is_recv;
  ncclResult_t error;
  /* send */
  size_t size;
  _Atomic size_t unsent; /* bytes the data streams still have to write */
  int ctl_pending;       /* control message (and inline payload) not yet written */
  /* recv */
  uint64_t seq;
  int n;
  void *buf[RN_MAX_RECVS];
  size_t posted[RN_MAX_RECVS];
  int32_t tag[RN_MAX_RECVS];
  uint32_t taken;                       /* buffers matched to a message */
  size_t got[RN_MAX_RECVS];             /* message size per buffer, once known */
  _Atomic size_t arrived[RN_MAX_RECVS]; /* bytes landed through streams */
  _Atomic int pending;                  /* buffers not yet complete */
};

/* A chunk queued on a send stream. */
struct rn_tcp_work {
  struct rn_tcp_req *req;
  struct rn_tcp_chunk hdr;
  const char *data;
};

/* A queued control message.  The payload stays in the user's buffer until
 * written; the request completes then. */
struct rn_tcp_ctl_out {
  union {
    struct rn_tcp_cts cts;
    struct rn_tcp_data data;
  } hdr;
  uint32_t hlen;
  const char *payload;
  size_t plen;
  size_t off;
  struct rn_tcp_req *req;
};

/* One data stream.  Owner: its helper thread (fd, progress); the queue is
 * shared with the caller thread under qlock. */
struct rn_tcp_stream {
  int fd;
  atomic_int dead; /* EOF or error seen: no more I/O */
  pthread_mutex_t qlock;
  int qhead, qtail; /* ring of RN_TCP_QUEUE */
  struct rn_tcp_work q[RN_TCP_QUEUE];
  /* progress of the chunk at the head (send) or being read (recv) */
  size_t off;
  struct rn_tcp_chunk rhdr;
  struct rn_tcp_req *rreq;
  char *rdst;
};

struct rn_tcp_thread {
  struct rn_tcp_comm *comm;
  pthread_t tid;
  int efd; /* eventfd: new work or stop */
  int first, step;
  int started;
};

/* A send or receive comm.  Owner: NCCL between connect/accept and close. */
struct rn_tcp_comm {
  struct rn_comm_base base;
  struct rn_tcp_comm *prev, *next; /* rn_tcp_live, under rn_tcp_live_lock */
  pthread_mutex_t lock;
  int is_recv;
  int ctrl_fd;
  int nstreams, nthreads;
  struct rn_tcp_stream stream[RN_TCP_MAX_STREAMS];
  struct rn_tcp_thread thread[RN_TCP_MAX_STREAMS];
  atomic_int stop;
  _Atomic int error;      /* first asynchronous error (ncclResult_t) */
  atomic_int peer_closed; /* orderly EOF seen */
  /* Without helper threads the caller polls the data streams only while
   * they have work: chunks queued (send) or announced messages (recv). */
  atomic_int stream_work;
  size_t inline_max, chunk;
  unsigned rr; /* next stream for a chunk */
  /* control output: messages in order, payloads referenced, not copied */
  int oq_head, oq_tail;
  struct rn_tcp_ctl_out oq[RN_TCP_CTL_Q];
  /* control input: headers are parsed from `in`; a payload is read
   * straight into its receive buffer (rx_*) */
  char *in;
  size_t in_len;
  char *rx_dst;
  size_t rx_left;
  struct rn_tcp_req *rx_req;
  uint32_t rx_idx;
  uint64_t rx_size;
  struct rn_tcp_unexp *rx_unexp; /* payload being read into the unexpected queue */
  size_t eager_max;
  atomic_int lazy; /* a clear-to-send waits in oq (rn_tcp_flush_lazy) */
  /* recv side: messages are matched to buffers in arrival order, filling
   * group match_seq; eager ones whose group is not posted wait in uq */
  uint64_t match_seq;
  int match_cnt;
  struct rn_tcp_unexp *uq; /* RN_TCP_EAGER_WINDOW entries, allocated on first use */
  int uq_head, uq_tail;
  char *discard; /* payload of a message too big for its buffer */
  /* send side: tags of eager messages not yet matched to a clear-to-send */
  int32_t ua_tag[RN_TCP_EAGER_WINDOW];
  int ua_head, ua_tail;
  /* send side: CTS ring indexed by seq % RN_TCP_RING */
  uint64_t send_seq;
  struct rn_tcp_cts cts[RN_TCP_RING];
  bool cts_valid[RN_TCP_RING];
  uint32_t cts_used[RN_TCP_RING]; /* bitmask of matched buffers */
  /* recv side: posted groups indexed by seq % RN_TCP_RING */
  uint64_t recv_seq;
  struct rn_tcp_req *_Atomic ring[RN_TCP_RING];
  struct rn_tcp_req reqs[RN_TCP_NREQS];
};

struct rn_tcp_listen {
  struct rn_comm_base base;
  struct rn_tcp_listen *prev, *next; /* rn_tcp_live_listens, under rn_tcp_live_lock */
  int nfds;
  int fd[RN_MAX_RAILS];
  struct rn_rdv *rdv;
};

/* The byte the accepting side sends once it has taken the connection, so
 * connect returns a comm only to a peer that is really there (a listening
 * socket completes handshakes even for a process about to die). */
#define RN_TCP_ACCEPT_ACK 0xa5

struct rn_tcp_connecting {
  struct rn_dial *dial;
  int dialed; /* all sockets up and hellos sent: awaiting the ack */
  struct rn_rdv_conn conn;
  struct timespec start;
  char peer[64];
};

struct rn_tcp_mr {
  uint32_t magic;
  int type;
};
#define RN_TCP_MR_MAGIC 0x726e6d72u

static void rn_tcp_set_error(struct rn_tcp_comm *c, ncclResult_t res) {
  int expected = ncclSuccess;
  atomic_compare_exchange_strong(&c->error, &expected, (int)res);
}

/* ---------------------------------------------------------------- init */

static ncclResult_t rn_tcp_init(const struct rn_nic **nics, int *n) {
  static struct rn_nic list[RN_TCP_MAX_IFS];
  rn_tcp_nifs = rn_tcp_if_discover(rn_tcp_ifs, RN_TCP_MAX_IFS);
  for (int i = 0; i < rn_tcp_nifs; i++) {
    char a[64];
    list[i] = rn_tcp_ifs[i].nic;
    list[i].tidx = i;
    RN_INFO(NCCL_INIT | NCCL_NET, "socket: %s %s speed %d Mbps pci %s", list[i].name,
            rn_sockaddr_str(&rn_tcp_ifs[i].addr, a, sizeof(a)), list[i].speed_mbps,
            list[i].pci_path[0] ? list[i].pci_path : "(virtual)");
  }
  *nics = list;
  *n = rn_tcp_nifs;
  return ncclSuccess;
}

/* Comms not yet closed, so that finalize or unload can still stop their
 * threads before the code they run is unmapped. */
static pthread_mutex_t rn_tcp_live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rn_tcp_comm *rn_tcp_live;
static struct rn_tcp_listen *rn_tcp_live_listens;

static void rn_tcp_live_add(struct rn_tcp_comm *c) {
  pthread_mutex_lock(&rn_tcp_live_lock);
  c->prev = NULL;
  c->next = rn_tcp_live;
  if (rn_tcp_live != NULL) rn_tcp_live->prev = c;
  rn_tcp_live = c;
  pthread_mutex_unlock(&rn_tcp_live_lock);
}

static void rn_tcp_live_del(struct rn_tcp_comm *c) {
  pthread_mutex_lock(&rn_tcp_live_lock);
  if (c->prev != NULL)
    c->prev->next = c->next;
  else if (rn_tcp_live == c)
    rn_tcp_live = c->next;
  if (c->next != NULL) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  pthread_mutex_unlock(&rn_tcp_live_lock);
}

static ncclResult_t rn_tcp_flush_out(struct rn_tcp_comm *c);

/* Set when some comm holds a deferred clear-to-send. */
static atomic_int rn_tcp_nlazy;

/* Send the clear-to-sends that receives of small buffers deferred.  Called
 * at the end of every isend, without the caller's comm lock (a deferred
 * one also leaves with any progress on its own comm, e.g. the test() of
 * that receive); other comms are only try-locked, so no thread waits. */
static void rn_tcp_flush_lazy(void) {
  if (!atomic_load(&rn_tcp_nlazy)) return;
  int left = 0;
  pthread_mutex_lock(&rn_tcp_live_lock);
  atomic_store(&rn_tcp_nlazy, 0);
  for (struct rn_tcp_comm *c = rn_tcp_live; c != NULL; c = c->next) {
    if (!atomic_load(&c->lazy)) continue;
    if (pthread_mutex_trylock(&c->lock) != 0) {
      left = 1;
      continue;
    }
    atomic_store(&c->lazy, 0);
    rn_tcp_flush_out(c); /* errors surface through this comm's own calls */
    pthread_mutex_unlock(&c->lock);
  }
  if (left) atomic_store(&rn_tcp_nlazy, 1);
  pthread_mutex_unlock(&rn_tcp_live_lock);
}

static void rn_tcp_comm_free(struct rn_tcp_comm *c);
static ncclResult_t rn_tcp_close_listen(void *lcomm);

static void rn_tcp_fini(void) {
  int n = 0;
  for (;;) {
    pthread_mutex_lock(&rn_tcp_live_lock);
    struct rn_tcp_listen *l = rn_tcp_live_listens;
    pthread_mutex_unlock(&rn_tcp_live_lock);
    if (l == NULL) break;
    rn_tcp_close_listen(l);
    n++;
  }
  for (;;) {
    pthread_mutex_lock(&rn_tcp_live_lock);
    struct rn_tcp_comm *c = rn_tcp_live;
    pthread_mutex_unlock(&rn_tcp_live_lock);
    if (c == NULL) break;
    rn_tcp_comm_free(c);
    n++;
  }
  if (n > 0) RN_INFO(NCCL_INIT | NCCL_NET, "socket: closed %d comm(s) left open at finalize", n);
  rn_tcp_nifs = 0;
}

/* ------------------------------------------------------------ threads */

static int rn_tcp_queue_empty(struct rn_tcp_stream *s) { return s->qhead == s->qtail; }

/* Write as much of the head chunk as the socket takes.  Returns 1 when the
 * stream has more to send, 0 when idle, -1 on error. */
static int rn_tcp_stream_send(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  for (;;) {
    pthread_mutex_lock(&s->qlock);
    if (rn_tcp_queue_empty(s)) {
      pthread_mutex_unlock(&s->qlock);
      return 0;
    }
    struct rn_tcp_work *w = &s->q[s->qhead];
    pthread_mutex_unlock(&s->qlock);
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
        RN_WARN("socket: data stream send failed: %s", k < 0 ? strerror(errno) : "closed");
      rn_tcp_set_error(c, ncclRemoteError);
      return -1;
    }
    atomic_fetch_sub(&w->req->unsent, (size_t)w->hdr.len);
    atomic_fetch_sub(&c->stream_work, 1);
    s->off = 0;
    pthread_mutex_lock(&s->qlock);
    s->qhead = (s->qhead + 1) % RN_TCP_QUEUE;
    pthread_mutex_unlock(&s->qlock);
  }
}

/* Read chunks into their receive buffers.  Returns 0 when the socket is
 * drained, -1 on error or EOF. */
static int rn_tcp_stream_recv(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  const size_t hl = sizeof(s->rhdr);
  for (;;) {
    if (s->off < hl) {
      ssize_t k = recv(s->fd, (char *)&s->rhdr + s->off, hl - s->off, MSG_DONTWAIT);
      if (k > 0) {
        s->off += (size_t)k;
        if (s->off < hl) continue;
        /* A full header: find the posted group. */
        struct rn_tcp_chunk *h = &s->rhdr;
        struct rn_tcp_req *r =
            atomic_load_explicit(&c->ring[h->seq % RN_TCP_RING], memory_order_acquire);
        if (r == NULL || r->seq != h->seq || h->idx >= (uint32_t)r->n ||
            h->total > r->posted[h->idx] || h->offset + h->len > h->total) {
          RN_WARN(
              "socket: protocol error: chunk seq %llu idx %u off %llu len %u total %llu "
              "matches no posted receive",
              (unsigned long long)h->seq, h->idx, (unsigned long long)h->offset, h->len,
              (unsigned long long)h->total);
          rn_tcp_set_error(c, ncclRemoteError);
          return -1;
        }
        s->rreq = r;
        s->rdst = (char *)r->buf[h->idx] + h->offset;
        continue;
      }
      if (k == 0) {
        /* EOF between chunks is the peer's close; inside one, a failure. */
        if (s->off != 0) {
          RN_WARN("socket: peer closed a data stream in the middle of a chunk header");
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
    size_t left = s->rhdr.len - done;
    if (left > 0) {
      ssize_t k = recv(s->fd, s->rdst + done, left, MSG_DONTWAIT);
      if (k > 0) {
        s->off += (size_t)k;
      } else if (k == 0) {
        RN_WARN("socket: peer closed a data stream in the middle of a chunk");
        rn_tcp_set_error(c, ncclRemoteError);
        return -1;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return 0;
      } else if (errno != EINTR) {
        RN_WARN("socket: data stream recv failed: %s", strerror(errno));
        rn_tcp_set_error(c, ncclRemoteError);
        return -1;
      }
      if (s->off - hl < s->rhdr.len) continue;
    }
    /* Chunk complete. */
    struct rn_tcp_req *r = s->rreq;
    _Atomic size_t *arrived = &r->arrived[s->rhdr.idx];
    size_t now =
        atomic_fetch_add_explicit(arrived, s->rhdr.len, memory_order_acq_rel) + s->rhdr.len;
    if (now == s->rhdr.total) {
      r->got[s->rhdr.idx] = s->rhdr.total;
      atomic_fetch_sub(&c->stream_work, 1);
      atomic_fetch_sub_explicit(&r->pending, 1, memory_order_release);
    }
    s->off = 0;
    s->rreq = NULL;
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

static void rn_tcp_drive_streams(struct rn_tcp_comm *c) {
  for (int i = 0; i < c->nstreams; i++)
    rn_tcp_stream_step(c, &c->stream[i], c->is_recv ? POLLIN : POLLOUT);
}

static void *rn_tcp_thread_main(void *arg) {
  struct rn_tcp_thread *t = arg;
  struct rn_tcp_comm *c = t->comm;
  struct pollfd pfd[1 + RN_TCP_MAX_STREAMS];
  int ids[RN_TCP_MAX_STREAMS];
  int nmine = 0;
  for (int i = t->first; i < c->nstreams; i += t->step) ids[nmine++] = i;
  while (!atomic_load(&c->stop)) {
    int np = 0;
    pfd[np++] = (struct pollfd){.fd = t->efd, .events = POLLIN};
    for (int k = 0; k < nmine; k++) {
      struct rn_tcp_stream *s = &c->stream[ids[k]];
      short ev = POLLIN; /* data on a receive stream, EOF on a send stream */
      if (!c->is_recv) {
        pthread_mutex_lock(&s->qlock);
        if (!rn_tcp_queue_empty(s)) ev = POLLOUT;
        pthread_mutex_unlock(&s->qlock);
      }
      pfd[np++] = (struct pollfd){.fd = s->dead ? -1 : s->fd, .events = ev};
    }
    if (poll(pfd, (nfds_t)np, -1) < 0 && errno != EINTR) {
      RN_WARN("socket: poll failed: %s", strerror(errno));
      rn_tcp_set_error(c, ncclSystemError);
      break;
    }
    if (pfd[0].revents & POLLIN) {
      uint64_t v;
      ssize_t rd = read(t->efd, &v, sizeof(v));
      (void)rd;
    }
    for (int k = 0; k < nmine; k++) rn_tcp_stream_step(c, &c->stream[ids[k]], pfd[k + 1].revents);
  }
  return NULL;
}

static void rn_tcp_comm_free(struct rn_tcp_comm *c) {
  rn_tcp_live_del(c);
  atomic_store(&c->stop, 1);
  for (int i = 0; i < c->nthreads; i++) {
    if (!c->thread[i].started) continue;
    uint64_t one = 1;
    ssize_t wr = write(c->thread[i].efd, &one, sizeof(one));
    (void)wr;
  }
  for (int i = 0; i < c->nthreads; i++) {
    if (c->thread[i].started) pthread_join(c->thread[i].tid, NULL);
    if (c->thread[i].efd >= 0) close(c->thread[i].efd);
  }
  for (int i = 0; i < c->nstreams; i++) {
    if (c->stream[i].fd >= 0) close(c->stream[i].fd);
    pthread_mutex_destroy(&c->stream[i].qlock);
  }
  if (c->ctrl_fd >= 0) close(c->ctrl_fd);
  for (int i = 0; i < RN_TCP_NREQS; i++) c->reqs[i].base.magic = 0;
  pthread_mutex_destroy(&c->lock);
  free(c->in);
  free(c->uq);
  free(c->discard);
  free(c);
}

/* Helper threads per comm: RAILNET_SOCKET_NTHREADS, or by default none on
 * small hosts (a spinning NCCL proxy thread plus helpers oversubscribe a
 * 2-4 core machine; the caller then moves the bytes in test()), else up to
 * four. */
static int rn_tcp_nthreads(int nstreams) {
  int n = (int)rn_params()->socket_nthreads;
  if (n < 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    n = cpus < 8 ? 0 : 4;
  }
  return n < nstreams ? n : nstreams;
}

/* Build a comm around an established connection; starts the helpers. */
static ncclResult_t rn_tcp_comm_create(const struct rn_rdv_conn *conn, int is_recv,
                                       struct rn_tcp_comm **out) {
  const struct rn_params *p = rn_params();
  struct rn_tcp_comm *c = calloc(1, sizeof(*c));
  if (c == NULL) goto out_nomem;
  pthread_mutex_init(&c->lock, NULL);
  c->is_recv = is_recv;
  c->ctrl_fd = conn->ctrl_fd;
  c->nstreams = conn->nstreams;
  c->nthreads = rn_tcp_nthreads(c->nstreams);
  c->inline_max = (size_t)p->socket_inline;
  c->eager_max = c->inline_max < RN_TCP_EAGER_MAX ? c->inline_max : RN_TCP_EAGER_MAX;
  c->chunk = (size_t)p->socket_chunk;
  c->in = malloc(RN_TCP_CTL_BUF);
  c->discard = malloc(RN_TCP_EAGER_MAX);
  for (int i = 0; i < c->nstreams; i++) {
    c->stream[i].fd = conn->data_fd[i];
    pthread_mutex_init(&c->stream[i].qlock, NULL);
    rn_sock_tune(c->stream[i].fd, 0);
  }
  for (int i = 0; i < c->nthreads; i++) c->thread[i].efd = -1;
  rn_sock_tune(c->ctrl_fd, 0);
  if (c->in == NULL || c->discard == NULL) {
    RN_WARN("socket: out of memory creating a comm");
    rn_tcp_comm_free(c); /* owns and closes the sockets by now */
    return ncclSystemError;
  }
  for (int i = 0; i < c->nthreads; i++) {
    struct rn_tcp_thread *t = &c->thread[i];
    t->comm = c;
    t->first = i;
    t->step = c->nthreads;
    t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->efd < 0 || pthread_create(&t->tid, NULL, rn_tcp_thread_main, t) != 0) {
      RN_WARN("socket: cannot start helper thread %d: %s", i, strerror(errno));
      rn_tcp_comm_free(c);
      return ncclSystemError;
    }
    t->started = 1;
  }
  rn_tcp_live_add(c);
  *out = c;
  return ncclSuccess;
out_nomem:
  RN_WARN("socket: out of memory creating a comm");
  rn_sock_conn_close(conn);
  return ncclSystemError;
}

/* ------------------------------------------------- connection set-up */

static ncclResult_t rn_tcp_listen(const struct rn_rails *r, struct rn_handle *h, void **lcomm) {
  ncclResult_t res = ncclSuccess;
  struct rn_tcp_listen *l = calloc(1, sizeof(*l));
  if (l == NULL) {
    RN_WARN("socket: out of memory in listen");
    return ncclSystemError;
  }
  int n = r->n < RN_TCP_MAX_ADDRS ? r->n : RN_TCP_MAX_ADDRS;
  struct rn_wire_addr *w = (struct rn_wire_addr *)h->payload;
  for (int i = 0; i < n; i++) {
    union rn_sockaddr a = rn_tcp_ifs[r->nic[i]->tidx].addr, bound;
    if (a.sa.sa_family == AF_INET6)
      a.in6.sin6_port = 0;
    else
      a.in.sin_port = 0;
    RN_CHECK_GOTO(rn_sock_listen(&a, &l->fd[i], &bound), res, out_close);
    l->nfds++;
    rn_sockaddr_to_wire(&bound, &w[i]);
  }
  h->nrails = (uint8_t)n;
  RN_CHECK_GOTO(rn_rdv_create(l->fd, l->nfds, h->nonce, &l->rdv), res, out_close);
  pthread_mutex_lock(&rn_tcp_live_lock);
  l->next = rn_tcp_live_listens;
  if (l->next != NULL) l->next->prev = l;
  rn_tcp_live_listens = l;
  pthread_mutex_unlock(&rn_tcp_live_lock);
  *lcomm = l;
  return ncclSuccess;
out_close:
  for (int i = 0; i < l->nfds; i++) close(l->fd[i]);
  free(l);
  return res;
}

static double rn_tcp_elapsed(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void rn_tcp_connect_abort(void *state) {
  struct rn_tcp_connecting *k = state;
  if (k == NULL) return;
  if (k->dialed) rn_sock_conn_close(&k->conn);
  rn_dial_destroy(k->dial);
  free(k);
}

static ncclResult_t rn_tcp_connect(const struct rn_rails *r, const struct rn_handle *h,
                                   void **state, void **scomm) {
  struct rn_tcp_connecting *k = *state;
  ncclResult_t res = ncclSuccess;
  if (k == NULL) {
    union rn_sockaddr addrs[RN_MAX_RAILS];
    const struct rn_wire_addr *w = (const struct rn_wire_addr *)h->payload;
    int n = h->nrails < RN_TCP_MAX_ADDRS ? h->nrails : RN_TCP_MAX_ADDRS;
    for (int i = 0; i < n; i++) {
      if (rn_sockaddr_from_wire(&w[i], &addrs[i]) != 0) {
        RN_WARN("socket: connect: handle carries an invalid address (rail %d)", i);
        return ncclInvalidArgument;
      }
    }
    k = calloc(1, sizeof(*k));
    if (k == NULL) {
      RN_WARN("socket: out of memory in connect");
      return ncclSystemError;
    }
    clock_gettime(CLOCK_MONOTONIC, &k->start);
    rn_sockaddr_str(&addrs[0], k->peer, sizeof(k->peer));
    /* Leave from this device's own rails, in step with the peer's. */
    union rn_sockaddr locals[RN_MAX_RAILS];
    for (int i = 0; i < r->n; i++) locals[i] = rn_tcp_ifs[r->nic[i]->tidx].addr;
    RN_CHECK_GOTO(rn_dial_create_from(addrs, n, locals, r->n, h->nonce,
                                      (int)rn_params()->socket_nstreams, &k->dial),
                  res, out_free);
  }
  int ready = 0;
  if (!k->dialed) {
    RN_CHECK_GOTO(rn_dial_poll(k->dial, &k->conn, &k->dialed), res, out_free);
  }
  if (k->dialed) {
    uint8_t ack = 0;
    size_t got = 0;
    if (rn_sock_recv_some(k->conn.ctrl_fd, &ack, 1, &got) != ncclSuccess ||
        (got == 1 && ack != RN_TCP_ACCEPT_ACK)) {
      RN_WARN("socket: %s closed the connection before accepting it", k->peer);
      res = ncclRemoteError;
      goto out_free;
    }
    ready = got == 1;
  }
  if (!ready) {
    if (rn_tcp_elapsed(&k->start) * 1000 > (double)rn_params()->connect_timeout_ms) {
      RN_WARN("socket: connect to %s timed out after %lld ms", k->peer,
              (long long)rn_params()->connect_timeout_ms);
      res = ncclRemoteError;
      goto out_free;
    }
    *state = k;
    return ncclSuccess;
  }
  struct rn_tcp_comm *c;
  k->dialed = 0; /* the comm owns the sockets from here, also on failure */
  RN_CHECK_GOTO(rn_tcp_comm_create(&k->conn, 0, &c), res, out_free);
  RN_INFO(NCCL_NET, "socket: connected to %s with %d streams, %d helper threads", k->peer,
          c->nstreams, c->nthreads);
  rn_tcp_connect_abort(k);
  *state = NULL;
  *scomm = c;
  return ncclSuccess;
out_free:
  rn_tcp_connect_abort(k);
  *state = NULL;
  return res;
}

static ncclResult_t rn_tcp_accept(void *lcomm, void **rcomm) {
  struct rn_tcp_listen *l = lcomm;
  struct rn_rdv_conn conn;
  int ready = 0;
  RN_CHECK(rn_rdv_poll(l->rdv, &conn, &ready));
  if (!ready) return ncclSuccess;
  uint8_t ack = RN_TCP_ACCEPT_ACK;
  size_t sent = 0;
  if (rn_sock_send_some(conn.ctrl_fd, &ack, 1, &sent) != ncclSuccess || sent != 1) {
    /* The connector is gone already: drop it and keep listening. */
    RN_INFO(NCCL_NET, "socket: a connecting peer vanished before its accept completed");
    rn_sock_conn_close(&conn);
    return ncclSuccess;
  }
  struct rn_tcp_comm *c;
  RN_CHECK(rn_tcp_comm_create(&conn, 1, &c));
  RN_INFO(NCCL_NET, "socket: accepted a connection with %d streams, %d helper threads", c->nstreams,
          c->nthreads);
  *rcomm = c;
  return ncclSuccess;
}

static ncclResult_t rn_tcp_close_listen(void *lcomm) {
  struct rn_tcp_listen *l = lcomm;
  pthread_mutex_lock(&rn_tcp_live_lock);
  if (l->prev != NULL)
    l->prev->next = l->next;
  else if (rn_tcp_live_listens == l)
    rn_tcp_live_listens = l->next;
  if (l->next != NULL) l->next->prev = l->prev;
  pthread_mutex_unlock(&rn_tcp_live_lock);
  rn_rdv_destroy(l->rdv);
  for (int i = 0; i < l->nfds; i++) close(l->fd[i]);
  free(l);
  return ncclSuccess;
}

static ncclResult_t rn_tcp_close(void *comm) {
  rn_tcp_comm_free(comm);
  return ncclSuccess;
}

/* ------------------------------------------------------ registration */

/* TCP moves host memory through the CPU: a registration has no state, so
 * every one is the same token (nothing to leak when a comm is abandoned). */
static const struct rn_tcp_mr rn_tcp_mr_host = {.magic = RN_TCP_MR_MAGIC, .type = NCCL_PTR_HOST};

static ncclResult_t rn_tcp_reg_mr(void *comm, void *data, size_t size, int type, void **mh) {
  (void)comm;
  (void)data;
  (void)size;
  if (type != NCCL_PTR_HOST) {
    RN_WARN("socket: regMr of memory type %d: TCP reaches host memory only", type);
    return ncclInternalError;
  }
  *mh = (void *)&rn_tcp_mr_host;
  return ncclSuccess;
}

static ncclResult_t rn_tcp_dereg_mr(void *comm, void *mh) {
  (void)comm;
  if (mh != &rn_tcp_mr_host) {
    RN_WARN("socket: deregMr of %p, which is not a railnet registration", mh);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Write queued control messages, as many per sendmsg as fit in one iovec
 * array, so a clear-to-send and the data behind it leave in one segment. */
static ncclResult_t rn_tcp_flush_out(struct rn_tcp_comm *c) {
  enum { RN_TCP_FLUSH_IOV = 64 };
  while (c->oq_head != c->oq_tail) {
    struct iovec iov[RN_TCP_FLUSH_IOV];
    int niov = 0;
    for (int i = c->oq_head; i != c->oq_tail && niov + 2 <= RN_TCP_FLUSH_IOV;
         i = (i + 1) % RN_TCP_CTL_Q) {
      struct rn_tcp_ctl_out *e = &c->oq[i];
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
      RN_WARN("socket: control connection lost while sending: %s",
              k < 0 ? strerror(errno) : "closed");
      rn_tcp_set_error(c, ncclRemoteError);
      return ncclRemoteError;
    }
    /* Retire what went out. */
    size_t left = (size_t)k;
    while (left > 0) {
      struct rn_tcp_ctl_out *e = &c->oq[c->oq_head];
      size_t rest = e->hlen + e->plen - e->off;
      size_t take = left < rest ? left : rest;
      e->off += take;
      left -= take;
      if (e->off < e->hlen + e->plen) break;
      if (e->req != NULL) e->req->ctl_pending = 0;
      c->oq_head = (c->oq_head + 1) % RN_TCP_CTL_Q;
    }
  }
  return ncclSuccess;
}

static int rn_tcp_ctl_room(const struct rn_tcp_comm *c) {
  return (c->oq_tail + 1) % RN_TCP_CTL_Q != c->oq_head;
}

/* Queue a control message; 0 when the queue is full (retry later). */
static int rn_tcp_queue_ctl(struct rn_tcp_comm *c, const void *hdr, size_t hl, const void *payload,
                            size_t pl, struct rn_tcp_req *req) {
  int next = (c->oq_tail + 1) % RN_TCP_CTL_Q;
  if (next == c->oq_head) return 0;
  struct rn_tcp_ctl_out *e = &c->oq[c->oq_tail];
  memcpy(&e->hdr, hdr, hl);
  e->hlen = (uint32_t)hl;
  e->payload = payload;
  e->plen = pl;
  e->off = 0;
  e->req = req;
  if (req != NULL) req->ctl_pending = 1;
  c->oq_tail = next;
  return 1;
}

static struct rn_tcp_req *rn_tcp_req_alloc(struct rn_tcp_comm *c, int is_recv) {
  for (int i = 0; i < RN_TCP_NREQS; i++) {
    struct rn_tcp_req *r = &c->reqs[i];
    if (r->state != RN_TCP_REQ_FREE) continue;
    memset(r, 0, sizeof(*r));
    r->base.magic = RN_REQ_MAGIC;
    r->base.transport = c->base.transport;
    r->comm = c;
    r->state = RN_TCP_REQ_ACTIVE;
    r->is_recv = is_recv;
    return r;
  }
  return NULL;
}

static void rn_tcp_req_free(struct rn_tcp_req *r) {
  r->base.magic = 0;
  r->state = RN_TCP_REQ_FREE;
}

/* NCCL's matching rule, applied alike by sender and receiver: the next
 * message of a group takes the first buffer not yet taken whose tag is its
 * own.  *mismatch when none is (the first free buffer is taken anyway, so
 * both sides keep counting alike). */
static int rn_tcp_pick(int n, const int32_t *tags, uint32_t taken, int tag, int *mismatch) {
  int first = -1;
  for (int i = 0; i < n; i++) {
    if (taken & (1u << i)) continue;
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
static void rn_tcp_take(struct rn_tcp_comm *c, struct rn_tcp_req *r, int idx) {
  r->taken |= 1u << idx;
  if (++c->match_cnt == r->n) {
    c->match_seq++;
    c->match_cnt = 0;
  }
}

static struct rn_tcp_req *rn_tcp_filling(struct rn_tcp_comm *c) {
  struct rn_tcp_req *r = atomic_load(&c->ring[c->match_seq % RN_TCP_RING]);
  return (r != NULL && r->seq == c->match_seq) ? r : NULL;
}

static void rn_tcp_nack(struct rn_tcp_comm *c, int tag, uint64_t size, uint64_t posted) {
  struct rn_tcp_nack m = {.type = RN_TCP_NACK, .tag = tag, .size = size, .posted = posted};
  if (!rn_tcp_queue_ctl(c, &m, sizeof(m), NULL, 0, NULL))
    RN_WARN("socket: control queue full; the sender will not hear of the oversized message");
}

/* A message of `size` bytes for buffer idx: 0 when it fits, else both
 * sizes are logged and the request fails. */
static int rn_tcp_fits(struct rn_tcp_comm *c, struct rn_tcp_req *r, int idx, uint64_t size,
                       int eager) {
  if (size <= r->posted[idx]) return 1;
  RN_WARN("socket: peer sent %llu bytes but the posted receive (tag %d) holds only %zu bytes",
          (unsigned long long)size, r->tag[idx], r->posted[idx]);
  r->error = ncclInvalidUsage;
  if (eager) rn_tcp_nack(c, r->tag[idx], size, r->posted[idx]);
  return 0;
}

/* Deliver queued eager messages whose receive is now posted, in order. */
static void rn_tcp_drain_unexpected(struct rn_tcp_comm *c) {
  while (c->uq_head != c->uq_tail && c->uq[c->uq_head].ready) {
    struct rn_tcp_unexp *e = &c->uq[c->uq_head];
    struct rn_tcp_req *r = rn_tcp_filling(c);
    if (r == NULL) return;
    int mismatch, idx = rn_tcp_pick(r->n, r->tag, r->taken, e->tag, &mismatch);
    if (mismatch) {
      RN_WARN("socket: message with tag %d matches no buffer of the posted receive", e->tag);
      r->error = ncclInvalidUsage;
    }
    rn_tcp_take(c, r, idx);
    if (rn_tcp_fits(c, r, idx, e->size, 1)) {
      memcpy(r->buf[idx], e->data, e->size);
      r->got[idx] = e->size;
    }
    atomic_fetch_sub(&r->pending, 1);
    c->uq_head = (c->uq_head + 1) % RN_TCP_EAGER_WINDOW;
  }
}

static ncclResult_t rn_tcp_protocol_error(struct rn_tcp_comm *c, const char *what,
                                          const struct rn_tcp_data *d) {
  RN_WARN("socket: protocol error: %s (seq %llu buffer %u, %llu bytes, flags %u)", what,
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
    if (c->uq_head != c->uq_tail || (r = rn_tcp_filling(c)) == NULL) {
      if (c->uq == NULL && (c->uq = calloc(RN_TCP_EAGER_WINDOW, sizeof(*c->uq))) == NULL) {
        RN_WARN("socket: out of memory for unexpected messages");
        rn_tcp_set_error(c, ncclSystemError);
        return ncclSystemError;
      }
      int next = (c->uq_tail + 1) % RN_TCP_EAGER_WINDOW;
      if (next == c->uq_head) return rn_tcp_protocol_error(c, "eager window exceeded", d);
      struct rn_tcp_unexp *e = &c->uq[c->uq_tail];
      e->tag = d->tag;
      e->size = d->size;
      e->ready = 0;
      c->uq_tail = next;
      c->rx_unexp = e;
      dst = e->data;
      goto out_payload;
    }
    int mismatch;
    idx = rn_tcp_pick(r->n, r->tag, r->taken, d->tag, &mismatch);
    if (mismatch) {
      RN_WARN("socket: message with tag %d matches no buffer of the posted receive", d->tag);
      r->error = ncclInvalidUsage;
    }
  } else {
    r = rn_tcp_filling(c);
    if (r == NULL || d->seq != c->match_seq || d->idx >= (uint32_t)r->n ||
        (r->taken & (1u << d->idx)) || d->inline_len > d->size)
      return rn_tcp_protocol_error(c, "data matches no posted receive", d);
    idx = (int)d->idx;
  }
  rn_tcp_take(c, r, idx);
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
  size_t take = avail < d->inline_len ? avail : d->inline_len;
  if (take) memcpy(dst, payload, take);
  c->rx_dst = dst + take;
  c->rx_left = d->inline_len - take;
  return ncclSuccess;
}

/* Finish the inline payload in progress; 1 when done. */
static int rn_tcp_rx_done(struct rn_tcp_comm *c) {
  if (c->rx_left > 0) return 0;
  if (c->rx_unexp != NULL) {
    c->rx_unexp->ready = 1;
    c->rx_unexp = NULL;
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

static void rn_tcp_assign_eager(struct rn_tcp_comm *c);

/* Move whatever the control connection (and, without helper threads, the
 * data streams) can move now.  Never blocks. */
static ncclResult_t rn_tcp_progress(struct rn_tcp_comm *c) {
  RN_CHECK(rn_tcp_flush_out(c));
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
        RN_WARN("socket: control connection lost in the middle of a message");
        rn_tcp_set_error(c, ncclRemoteError);
        return ncclRemoteError;
      }
      if (c->rx_left > 0) return ncclSuccess;
    }
    rn_tcp_rx_done(c);
    size_t before = c->in_len;
    ncclResult_t res = rn_sock_recv_some(c->ctrl_fd, c->in, RN_TCP_CTL_BUF, &c->in_len);
    if (res != ncclSuccess) atomic_store(&c->peer_closed, 1);
    size_t pos = 0;
    while (c->rx_req == NULL && c->rx_unexp == NULL && c->in_len - pos >= sizeof(uint32_t)) {
      uint32_t type;
      memcpy(&type, c->in + pos, sizeof(type));
      if (type == RN_TCP_CTS && !c->is_recv) {
        struct rn_tcp_cts m;
        if (c->in_len - pos < sizeof(m)) break;
        memcpy(&m, c->in + pos, sizeof(m));
        pos += sizeof(m);
        int slot = (int)(m.seq % RN_TCP_RING);
        if (m.n < 1 || m.n > RN_MAX_RECVS || c->cts_valid[slot]) {
          RN_WARN("socket: protocol error: bad clear-to-send (seq %llu, n %u)",
                  (unsigned long long)m.seq, m.n);
          rn_tcp_set_error(c, ncclRemoteError);
          return ncclRemoteError;
        }
        c->cts[slot] = m;
        c->cts_valid[slot] = true;
        c->cts_used[slot] = 0;
        /* Eager sends waiting for this group take their buffers now, so the
         * slot is free again before the receiver can reuse it. */
        rn_tcp_assign_eager(c);
      } else if (type == RN_TCP_NACK && !c->is_recv) {
        struct rn_tcp_nack m;
        if (c->in_len - pos < sizeof(m)) break;
        memcpy(&m, c->in + pos, sizeof(m));
        pos += sizeof(m);
        RN_WARN(
            "socket: the receiver refused a send of %llu bytes (tag %d): its posted buffer "
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
        RN_WARN("socket: protocol error: unexpected control message type %u", type);
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
  return c->oq_head != c->oq_tail ? rn_tcp_flush_out(c) : ncclSuccess;
}

/* ------------------------------------------------------------ data path */

static void rn_tcp_wake(struct rn_tcp_comm *c, int stream) {
  uint64_t one = 1;
  if (c->nthreads == 0) return;
  ssize_t wr = write(c->thread[stream % c->nthreads].efd, &one, sizeof(one));
  (void)wr;
}

/* Spread a message over the streams.  Returns 0 when the queues are full. */
static int rn_tcp_enqueue(struct rn_tcp_comm *c, struct rn_tcp_req *r, const char *data,
                          size_t size, uint64_t seq, uint32_t idx) {
  size_t chunk = (size + (size_t)c->nstreams - 1) / (size_t)c->nstreams;
  if (chunk < RN_TCP_MIN_CHUNK) chunk = RN_TCP_MIN_CHUNK;
  if (chunk > c->chunk) chunk = c->chunk;
  /* A huge message on few streams uses larger chunks, so that it always
   * fits in a quarter of each stream's queue. */
  size_t cap = (size_t)c->nstreams * (RN_TCP_QUEUE / 4);
  if ((size + chunk - 1) / chunk > cap) chunk = (size + cap - 1) / cap;
  size_t nchunks = (size + chunk - 1) / chunk;
  /* Check room first so a message is queued whole or not at all. */
  size_t per = nchunks / (size_t)c->nstreams + 1;
  for (int i = 0; i < c->nstreams; i++) {
    struct rn_tcp_stream *s = &c->stream[i];
    pthread_mutex_lock(&s->qlock);
    int used = (s->qtail - s->qhead + RN_TCP_QUEUE) % RN_TCP_QUEUE;
    pthread_mutex_unlock(&s->qlock);
    if ((size_t)used + per >= RN_TCP_QUEUE) return 0;
  }
  atomic_store(&r->unsent, size);
  uint32_t touched = 0;
  for (size_t off = 0; off < size; off += chunk) {
    int sidx = (int)(c->rr++ % (unsigned)c->nstreams);
    struct rn_tcp_stream *s = &c->stream[sidx];
    size_t len = size - off < chunk ? size - off : chunk;
    pthread_mutex_lock(&s->qlock);
    s->q[s->qtail] = (struct rn_tcp_work){
        .req = r,
        .hdr = {.seq = seq, .idx = idx, .len = (uint32_t)len, .offset = off, .total = size},
        .data = data + off};
    s->qtail = (s->qtail + 1) % RN_TCP_QUEUE;
    atomic_fetch_add(&c->stream_work, 1);
    pthread_mutex_unlock(&s->qlock);
    if (c->nthreads > 0) touched |= 1u << (sidx % c->nthreads);
  }
  for (int t = 0; t < c->nthreads; t++)
    if (touched & (1u << t)) rn_tcp_wake(c, t);
  return 1;
}

static ncclResult_t rn_tcp_comm_error(struct rn_tcp_comm *c, const char *what) {
  int e = atomic_load(&c->error);
  if (e != ncclSuccess) {
    RN_WARN("socket: %s on a comm that already failed (error %d)", what, e);
    return (ncclResult_t)e;
  }
  return ncclSuccess;
}

/* Sender: buffer idx of the current clear-to-send is spoken for; the next
 * group starts once all of its buffers are. */
static void rn_tcp_cts_take(struct rn_tcp_comm *c, int slot, int idx) {
  c->cts_used[slot] |= 1u << idx;
  if (c->cts_used[slot] == (1u << c->cts[slot].n) - 1) {
    c->cts_valid[slot] = false;
    c->send_seq++;
  }
}

/* Sender: match eager messages to the clear-to-sends that have arrived
 * since, by the receiver's rule, so later sends pick the same buffers. */
static void rn_tcp_assign_eager(struct rn_tcp_comm *c) {
  while (c->ua_head != c->ua_tail) {
    int slot = (int)(c->send_seq % RN_TCP_RING);
    if (!c->cts_valid[slot]) return;
    struct rn_tcp_cts *m = &c->cts[slot];
    int mismatch,
        idx = rn_tcp_pick((int)m->n, m->tags, c->cts_used[slot], c->ua_tag[c->ua_head], &mismatch);
    c->ua_head = (c->ua_head + 1) % RN_TCP_EAGER_WINDOW;
    rn_tcp_cts_take(c, slot, idx);
  }
}

static int rn_tcp_unassigned(const struct rn_tcp_comm *c) {
  return (c->ua_tail - c->ua_head + RN_TCP_EAGER_WINDOW) % RN_TCP_EAGER_WINDOW;
}

/* A small message whose clear-to-send has not arrived goes at once; the
 * receiver matches it by tag (or holds it until its receive is posted). */
static ncclResult_t rn_tcp_isend_eager(struct rn_tcp_comm *c, void *data, size_t size, int tag,
                                       void **req) {
  if (rn_tcp_unassigned(c) == RN_TCP_EAGER_WINDOW - 1 || !rn_tcp_ctl_room(c)) return ncclSuccess;
  struct rn_tcp_req *r = rn_tcp_req_alloc(c, 0);
  if (r == NULL) return ncclSuccess;
  r->size = size;
  struct rn_tcp_data d = {.type = RN_TCP_DATA,
                          .size = size,
                          .flags = RN_TCP_F_EAGER,
                          .inline_len = (uint32_t)size,
                          .tag = tag};
  rn_tcp_queue_ctl(c, &d, sizeof(d), data, size, r);
  c->ua_tag[c->ua_tail] = tag;
  c->ua_tail = (c->ua_tail + 1) % RN_TCP_EAGER_WINDOW;
  *req = r;
  return ncclSuccess;
}

static ncclResult_t rn_tcp_isend(void *scomm, void *data, size_t size, int tag, void *mh,
                                 void **req) {
  (void)mh;
  struct rn_tcp_comm *c = scomm;
  ncclResult_t res = ncclSuccess;
  RN_CHECK(rn_tcp_comm_error(c, "isend"));
  pthread_mutex_lock(&c->lock);
  int slot = (int)(c->send_seq % RN_TCP_RING);
  /* A small send goes eagerly without first reading the control
   * connection (one system call less on the round trip); clear-to-sends
   * are collected in batches, at the latest when half the eager window is
   * used. */
  if (size <= c->eager_max && rn_tcp_unassigned(c) < RN_TCP_EAGER_WINDOW / 2 &&
      !atomic_load(&c->peer_closed) && (!c->cts_valid[slot] || c->ua_head != c->ua_tail)) {
    RN_CHECK_GOTO(rn_tcp_isend_eager(c, data, size, tag, req), res, out_unlock);
    RN_CHECK_GOTO(rn_tcp_flush_out(c), res, out_unlock);
    goto out_unlock;
  }
  /* Look for the clear-to-send only when it has not arrived yet. */
  if (!c->cts_valid[slot] || c->ua_head != c->ua_tail) {
    RN_CHECK_GOTO(rn_tcp_progress(c), res, out_unlock);
    rn_tcp_assign_eager(c);
    slot = (int)(c->send_seq % RN_TCP_RING);
  }
  if (!c->cts_valid[slot] || c->ua_head != c->ua_tail) {
    if (atomic_load(&c->peer_closed)) {
      RN_WARN("socket: isend: the receiver closed the connection");
      res = ncclRemoteError;
    } else if (size <= c->eager_max) {
      RN_CHECK_GOTO(rn_tcp_isend_eager(c, data, size, tag, req), res, out_unlock);
      RN_CHECK_GOTO(rn_tcp_flush_out(c), res, out_unlock);
    }
    goto out_unlock; /* else no receive posted yet: *req stays NULL, NCCL retries */
  }
  struct rn_tcp_cts *m = &c->cts[slot];
  int mismatch, idx = rn_tcp_pick((int)m->n, m->tags, c->cts_used[slot], tag, &mismatch);
  if (mismatch) {
    RN_WARN("socket: isend with tag %d matches no buffer of the posted receive (seq %llu)", tag,
            (unsigned long long)m->seq);
    res = ncclInvalidUsage;
    goto out_unlock;
  }
  struct rn_tcp_req *r = rn_tcp_req_alloc(c, 0);
  if (r == NULL) goto out_unlock;
  r->size = size;
  int too_big = size > m->sizes[idx];
  int inl = too_big || size <= c->inline_max;
  struct rn_tcp_data d = {.type = RN_TCP_DATA,
                          .idx = (uint32_t)idx,
                          .seq = m->seq,
                          .size = size,
                          .flags = too_big ? RN_TCP_F_TOO_BIG
                                   : inl   ? 0
                                           : RN_TCP_F_STREAMED,
                          .inline_len = (inl && !too_big) ? (uint32_t)size : 0,
                          .tag = tag};
  /* The header always goes on the control connection: it carries inline
   * payloads, and announces streamed ones so the receiver knows to poll. */
  if (!rn_tcp_ctl_room(c) || (!inl && !rn_tcp_enqueue(c, r, data, size, m->seq, (uint32_t)idx))) {
    rn_tcp_req_free(r); /* queues full: retry later */
    goto out_unlock;
  }
  rn_tcp_queue_ctl(c, &d, sizeof(d), data, d.inline_len, r);
  if (too_big) {
    RN_WARN("socket: send of %zu bytes exceeds the posted receive of %llu bytes (tag %d)", size,
            (unsigned long long)m->sizes[idx], tag);
    r->error = ncclInvalidUsage;
  }
  rn_tcp_cts_take(c, slot, idx);
  RN_CHECK_GOTO(rn_tcp_flush_out(c), res, out_unlock);
  *req = r;
out_unlock:
  pthread_mutex_unlock(&c->lock);
  rn_tcp_flush_lazy();
  return res;
}

static ncclResult_t rn_tcp_irecv(void *rcomm, int n, void **data, const size_t *sizes,
                                 const int *tags, void **mhs, void **req) {
  (void)mhs;
  struct rn_tcp_comm *c = rcomm;
  ncclResult_t res = ncclSuccess;
  RN_CHECK(rn_tcp_comm_error(c, "irecv"));
  pthread_mutex_lock(&c->lock);
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
  if (!rn_tcp_queue_ctl(c, &m, sizeof(m), NULL, 0, NULL)) {
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
    atomic_store(&c->lazy, 1);
    atomic_store(&rn_tcp_nlazy, 1);
  } else {
    RN_CHECK_GOTO(rn_tcp_flush_out(c), res, out_unlock);
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

static ncclResult_t rn_tcp_test(void *request, int *done, size_t *sizes, int *nsizes) {
  struct rn_tcp_req *r = request;
  struct rn_tcp_comm *c = r->comm;
  ncclResult_t res = ncclSuccess;
  *done = 0;
  pthread_mutex_lock(&c->lock);
  if (r->state != RN_TCP_REQ_ACTIVE) {
    RN_WARN("socket: test on a request that is not active");
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
      RN_WARN("socket: %s of %s did not complete: connection to the peer failed (error %d)",
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

const struct rn_transport rn_transport_tcp = {
    .name = "socket",
    .init = rn_tcp_init,
    .fini = rn_tcp_fini,
    .listen = rn_tcp_listen,
    .connect = rn_tcp_connect,
    .connect_abort = rn_tcp_connect_abort,
    .accept = rn_tcp_accept,
    .reg_mr = rn_tcp_reg_mr,
    .reg_mr_dmabuf = rn_transport_unsupported_reg_mr_dmabuf,
    .dereg_mr = rn_tcp_dereg_mr,
    .isend = rn_tcp_isend,
    .irecv = rn_tcp_irecv,
    .iflush = rn_transport_noop_iflush,
    .test = rn_tcp_test,
    .close_send = rn_tcp_close,
    .close_recv = rn_tcp_close,
    .close_listen = rn_tcp_close_listen,
};
