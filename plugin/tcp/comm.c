/* TCP comms: creation around an established connection, teardown, the
 * list of open ones, which finalize closes, and the list of those holding
 * a deferred clear-to-send, which any isend flushes. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "railnet/param.h"
#include "tcp.h"

/* Comms not yet closed, so that finalize or unload can close them (and
 * then stop the engine's threads) before the code they run is unmapped. */
static struct rn_shared_list rn_tcp_live = RN_SHARED_LIST_INIT(rn_tcp_live);

/* Comms holding a deferred clear-to-send, each at most once, so a flush
 * visits only those (O(deferred), not O(open comms)).  A comm leaves it
 * when flushed or freed; rn_tcp_any_deferred lets isend skip the lock. */
static struct rn_shared_list rn_tcp_deferred = RN_SHARED_LIST_INIT(rn_tcp_deferred);
static atomic_int rn_tcp_any_deferred;

/* Send comms of a latency-critical traffic class (RAILNET_TRAFFIC_CLASS_URGENT
 * and up) open in this process, and when one was last called: while one
 * was called within RN_TCP_URGENT_RECENT_MS, the others yield
 * (rn_tcp_drive_streams).  One that is open but idle costs nothing. */
static atomic_int rn_tcp_urgent;
static _Atomic int64_t rn_tcp_urgent_ms;
#define RN_TCP_URGENT_RECENT_MS 100 /* params.def's text for RAILNET_TRAFFIC_CLASS_URGENT says 100 ms */

/* Send the clear-to-sends that receives deferred.  Called every
 * RN_TCP_CTS_POLLS incomplete tests of a thread, without the caller's comm
 * lock (a deferred one also leaves with progress on its own comm: a batch,
 * the sender's CREDIT or WANT, or enough tests of that receive); the comms
 * are only try-locked, so no thread waits, and one busy now stays on the
 * list for the next flush. */
void rn_tcp_comm_flush_deferred(void) {
  if (!atomic_load(&rn_tcp_any_deferred)) return;
  pthread_mutex_lock(&rn_tcp_deferred.lock);
  atomic_store(&rn_tcp_any_deferred, 0);
  struct rn_list *node = rn_tcp_deferred.head.next, *next;
  for (; node != &rn_tcp_deferred.head; node = next) {
    next = node->next;
    struct rn_tcp_comm *c = RN_LIST_ENTRY(node, struct rn_tcp_comm, deferred);
    if (pthread_mutex_trylock(&c->lock) != 0) continue;
    rn_list_del(node);
    if (atomic_exchange(&c->cts_deferred, 0)) {
      /* Not a batch: this process's sends may wait for them (one thread
       * posting a receive and then a send that needs its clear-to-send,
       * testing only the send). */
      c->lazy_polls = RN_TCP_CTS_POLLS;
      rn_tcp_ctl_flush(c); /* errors surface through this comm's own calls */
    }
    pthread_mutex_unlock(&c->lock);
  }
  if (!rn_list_empty(&rn_tcp_deferred.head)) atomic_store(&rn_tcp_any_deferred, 1);
  pthread_mutex_unlock(&rn_tcp_deferred.lock);
}

/* Comms with requests outstanding (p2p.c), each at most once; a comm
 * leaves when a sweep finds it with none, or when freed (which waits out a
 * sweep visiting it). */
static struct rn_shared_list rn_tcp_waiting = RN_SHARED_LIST_INIT(rn_tcp_waiting);
static _Atomic int64_t rn_tcp_next_wait_sweep_ms;

void rn_tcp_comm_waiting(struct rn_tcp_comm *c) {
  if (c->on_waiting) return;
  c->on_waiting = 1;
  rn_shared_list_add_tail(&rn_tcp_waiting, &c->waiting);
}

void rn_tcp_comm_sweep_waiting(void) {
  if (!rn_clock_turn(&rn_tcp_next_wait_sweep_ms, rn_clock_ms(), RN_TCP_WAIT_SWEEP_MS)) return;
  pthread_mutex_lock(&rn_tcp_waiting.lock);
  struct rn_list *node = rn_tcp_waiting.head.next, *nx;
  for (; node != &rn_tcp_waiting.head; node = nx) {
    nx = node->next;
    struct rn_tcp_comm *c = RN_LIST_ENTRY(node, struct rn_tcp_comm, waiting);
    if (pthread_mutex_trylock(&c->lock) != 0) continue; /* its own caller is in it */
    if (c->nactive == 0) {
      rn_list_del(node);
      c->on_waiting = 0;
    } else if (c->touched) {
      c->touched = 0; /* its caller tests it: nothing to do here */
    } else if (atomic_load(&c->error) == 0) {
      (void)rn_tcp_progress(c); /* an error surfaces through the comm's own calls */
    }
    pthread_mutex_unlock(&c->lock);
  }
  pthread_mutex_unlock(&rn_tcp_waiting.lock);
}

/* Comms whose data streams were opened (open.c), so the idle sweep visits
 * only those; the sweep drops those whose streams closed since.  A comm
 * leaves it when freed, which waits out a sweep visiting it. */
static struct rn_shared_list rn_tcp_streamy = RN_SHARED_LIST_INIT(rn_tcp_streamy);
static _Atomic int64_t rn_tcp_next_sweep_ms;

void rn_tcp_comm_streamy(struct rn_tcp_comm *c) {
  /* c->lock held, as wherever c joins or leaves the list, so a comm
   * already on it is left as it is without the list's lock: the idle sweep
   * holds that lock while it progresses c, whose streams may be admitted
   * then. */
  if (c->on_streamy) return;
  c->on_streamy = 1;
  pthread_mutex_lock(&rn_tcp_streamy.lock);
  rn_list_add_tail(&rn_tcp_streamy.head, &c->streamy);
  pthread_mutex_unlock(&rn_tcp_streamy.lock);
}

/* Data streams idle for RAILNET_SOCKET_IDLE_MS close at the next call of
 * their own comm, or of any comm of the process: at most every quarter of
 * that (and 100 ms; 2.5 s when they never close), one call visits the
 * comms with streams, each only try-locked, so no thread waits and a busy
 * comm waits for the next sweep.  The same call tends what connection
 * reuse keeps (pool.c), so kept sockets close on time and a connection
 * that reached a kept listener is reset, in a process that makes calls
 * but opens no comm.  Called without the caller's comm lock. */
void rn_tcp_comm_sweep_idle(void) {
  const int64_t idle = rn_params()->socket_idle_ms, now = rn_clock_ms();
  const int64_t every = idle == 0 ? 2500 : idle / 4 > 100 ? idle / 4 : 100;
  if (!rn_clock_turn(&rn_tcp_next_sweep_ms, now, every)) return;
  rn_tcp_pool_sweep();
  if (idle == 0) return;
  pthread_mutex_lock(&rn_tcp_streamy.lock);
  struct rn_list *node = rn_tcp_streamy.head.next, *nx;
  for (; node != &rn_tcp_streamy.head; node = nx) {
    nx = node->next;
    struct rn_tcp_comm *c = RN_LIST_ENTRY(node, struct rn_tcp_comm, streamy);
    if (pthread_mutex_trylock(&c->lock) != 0) continue;
    if (!rn_tcp_lazy_sweep(c, now)) { /* no stream any more */
      rn_list_del(node);
      c->on_streamy = 0;
    }
    pthread_mutex_unlock(&c->lock);
  }
  pthread_mutex_unlock(&rn_tcp_streamy.lock);
}

/* A comm is some 350 kB of tables (requests, control output, control
 * input), of which an idle one touches its first page.  It gets
 * zero-filled pages of its own, so the rest never becomes resident:
 * malloc would give it recycled heap memory once its dynamic mmap
 * threshold has grown past a freed comm's size (after the first close),
 * and calloc would then clear, and so make resident, all of it.  Under
 * AddressSanitizer it comes from the heap, where overruns are caught.
 *
 * A freed comm's mapping is kept for the next (up to RN_TCP_COMM_CACHE):
 * its fields (up to RN_TCP_COMM_HOT) and the first pages of the tables a
 * comm writes first (rn_tcp_comm_clear) cleared, the rest handed back to the kernel
 * (MADV_DONTNEED: zero-filled again when next touched), so it is what a
 * new mapping would be, without the page faults of what every comm
 * writes, which cost a new comm more than all its system calls on some
 * hosts (a churning workload opens a comm per request). */
#if defined(__SANITIZE_ADDRESS__)
#define RN_TCP_COMM_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RN_TCP_COMM_HEAP 1
#endif
#endif

#ifdef RN_TCP_COMM_HEAP
static struct rn_tcp_comm *rn_tcp_comm_map(void) { return calloc(1, sizeof(struct rn_tcp_comm)); }

static void rn_tcp_comm_unmap(struct rn_tcp_comm *c) { free(c); }

static void rn_tcp_comm_cache_drain(void) {}
#else
static size_t rn_tcp_comm_map_size(void) {
  long page = sysconf(_SC_PAGESIZE);
  size_t pg = page > 0 ? (size_t)page : 4096;
  return (sizeof(struct rn_tcp_comm) + pg - 1) / pg * pg;
}

#define RN_TCP_COMM_CACHE 8
#define RN_TCP_COMM_HOT offsetof(struct rn_tcp_comm, in_space)

static pthread_mutex_t rn_tcp_comm_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t rn_tcp_comm_cache_once = PTHREAD_ONCE_INIT;
static struct rn_tcp_comm *rn_tcp_comm_cache[RN_TCP_COMM_CACHE];
static int rn_tcp_comm_cached;

/* fork(): held across it, so a child never finds the lock taken by a
 * thread it does not have.  The child keeps the (copied) mappings. */
static void rn_tcp_comm_cache_prepare(void) { pthread_mutex_lock(&rn_tcp_comm_cache_lock); }
static void rn_tcp_comm_cache_release(void) { pthread_mutex_unlock(&rn_tcp_comm_cache_lock); }
static void rn_tcp_comm_cache_register(void) {
  if (pthread_atfork(rn_tcp_comm_cache_prepare, rn_tcp_comm_cache_release,
                     rn_tcp_comm_cache_release) != 0)
    RN_WARN("pthread_atfork failed: a child forked while a comm is freed may not open comms");
}

static struct rn_tcp_comm *rn_tcp_comm_map(void) {
  struct rn_tcp_comm *c = NULL;
  pthread_once(&rn_tcp_comm_cache_once, rn_tcp_comm_cache_register);
  pthread_mutex_lock(&rn_tcp_comm_cache_lock);
  if (rn_tcp_comm_cached > 0) c = rn_tcp_comm_cache[--rn_tcp_comm_cached];
  pthread_mutex_unlock(&rn_tcp_comm_cache_lock);
  if (c != NULL) return c;
  void *p = mmap(NULL, rn_tcp_comm_map_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* Clear what a recycled mapping keeps and hand the rest back: 0, or -1
 * (then it is unmapped).  Kept: the fields' pages, and the first page of
 * each table a comm writes at its first messages: the requests and the
 * control output (every comm), the sender's copy of the posted groups
 * and its unmatched eager messages (a send comm; one page while the
 * start of both does).  At most 5 pages while the fields fit in one; writing a page the kernel took back costs a
 * fault, several system calls' worth. */
static int rn_tcp_comm_clear(char *base, size_t size, size_t pg) {
  const size_t first[] = {
      offsetof(struct rn_tcp_comm, reqs),
      offsetof(struct rn_tcp_comm, out),
      offsetof(struct rn_tcp_comm, eager),
      offsetof(struct rn_tcp_comm, group),
  };
  size_t from = (RN_TCP_COMM_HOT + pg - 1) / pg * pg;
  if (from > size) return -1;
  memset(base, 0, from);
  for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++) {
    size_t start = first[i] / pg * pg, end = start + pg;
    if (start < from) start = from; /* on a page kept already */
    if (end <= start) continue;
    if (end > size || (start > from && madvise(base + from, start - from, MADV_DONTNEED) != 0))
      return -1;
    memset(base + start, 0, end - start);
    from = end;
  }
  return from == size || madvise(base + from, size - from, MADV_DONTNEED) == 0 ? 0 : -1;
}

static void rn_tcp_comm_unmap(struct rn_tcp_comm *c) {
  const size_t size = rn_tcp_comm_map_size();
  long page = sysconf(_SC_PAGESIZE);
  const size_t pg = page > 0 ? (size_t)page : 4096;
  pthread_mutex_lock(&rn_tcp_comm_cache_lock);
  int keep = rn_tcp_comm_cached < RN_TCP_COMM_CACHE;
  pthread_mutex_unlock(&rn_tcp_comm_cache_lock);
  if (keep && rn_tcp_comm_clear((char *)c, size, pg) == 0) {
    pthread_mutex_lock(&rn_tcp_comm_cache_lock);
    keep = rn_tcp_comm_cached < RN_TCP_COMM_CACHE;
    if (keep) rn_tcp_comm_cache[rn_tcp_comm_cached++] = c;
    pthread_mutex_unlock(&rn_tcp_comm_cache_lock);
    if (keep) return;
  }
  munmap(c, size);
}

static void rn_tcp_comm_cache_drain(void) {
  pthread_mutex_lock(&rn_tcp_comm_cache_lock);
  while (rn_tcp_comm_cached > 0)
    munmap(rn_tcp_comm_cache[--rn_tcp_comm_cached], rn_tcp_comm_map_size());
  pthread_mutex_unlock(&rn_tcp_comm_cache_lock);
}
#endif

void rn_tcp_comm_free(struct rn_tcp_comm *c) {
  if (c->urgent) atomic_fetch_sub(&rn_tcp_urgent, 1);
  rn_shared_list_del(&rn_tcp_deferred, &c->deferred); /* waits out a flush visiting it */
  rn_shared_list_del(&rn_tcp_live, &c->open);
  /* Both wait out a sweep visiting it; under c->lock, as every change of
   * its streamy node (rn_tcp_comm_streamy), so a sweep that progressed it
   * just before cannot put it back on a list. */
  pthread_mutex_lock(&c->lock);
  rn_shared_list_del(&rn_tcp_streamy, &c->streamy);
  rn_shared_list_del(&rn_tcp_waiting, &c->waiting);
  pthread_mutex_unlock(&c->lock);
  /* Its close line, also for a comm whose messages all went inline (no rails). */
  if (c->id != 0) rn_tcp_rails_close(c);
  atomic_store(&c->stop, 1);
  /* No engine thread touches the comm after this, whatever it had queued. */
  rn_tcp_engine_detach(c);
  /* Quiescent: its control connection may serve the next comm with this
   * peer. */
  rn_tcp_pool_put(c);
  rn_tcp_lazy_free(c);
  rn_tcp_move_free(c);
  rn_tcp_comm_detach(c);
  /* A sender's last messages may still be on their way while the
   * receiver sends clear-to-sends: see rn_sock_close_gently.  Streamed
   * bytes were acknowledged before their sends completed. */
  rn_sock_close_gently(c->ctrl_fd, !c->is_recv && atomic_load(&c->error) == ncclSuccess &&
                                           !atomic_load(&c->peer_closed)
                                       ? RN_TCP_CLOSE_WAIT_MS
                                       : 0);
  /* The requests ever allocated are a prefix of the pool (p2p.c takes
   * the lowest free one), ended by the first whose generation is still
   * 0; writing past it would only fault in zero pages (28 of them). */
  for (int i = 0; i < RN_TCP_NREQS && atomic_load(&c->reqs[i].gen) != 0; i++)
    rn_req_base_end(&c->reqs[i].base);
  pthread_mutex_destroy(&c->rx_lock);
  pthread_mutex_destroy(&c->lock);
  free(c->cover);
  free(c->inflight);
  free(c->backlog);
  for (int i = 0; c->unexpected != NULL && i < RN_TCP_EAGER_WINDOW; i++)
    free(c->unexpected[i].data);
  free(c->unexpected);
  rn_tcp_tagcount_free(&c->posted_tags);
  rn_tcp_tagcount_free(&c->sent_tags);
  rn_tcp_comm_unmap(c);
}

/* A new connection's addresses, from the kernel (a failed call leaves a
 * zero address: family 0). */
void rn_tcp_addrs_read(int ctrl_fd, const int *data_fd, int nstreams, struct rn_tcp_addrs *a) {
  memset(a, 0, sizeof(*a));
  socklen_t len = sizeof(a->ctrl_local);
  if (ctrl_fd >= 0 && getsockname(ctrl_fd, &a->ctrl_local.sa, &len) != 0)
    memset(&a->ctrl_local, 0, sizeof(a->ctrl_local));
  len = sizeof(a->ctrl_peer);
  if (ctrl_fd >= 0 && getpeername(ctrl_fd, &a->ctrl_peer.sa, &len) != 0)
    memset(&a->ctrl_peer, 0, sizeof(a->ctrl_peer));
  for (int i = 0; i < nstreams; i++) {
    len = sizeof(a->local[i]);
    if (getsockname(data_fd[i], &a->local[i].sa, &len) != 0)
      memset(&a->local[i], 0, sizeof(a->local[i]));
    len = sizeof(a->peer[i]);
    if (getpeername(data_fd[i], &a->peer[i].sa, &len) != 0)
      memset(&a->peer[i], 0, sizeof(a->peer[i]));
  }
}

/* Build a comm around an established connection: its control connection,
 * and its data streams when the connection has them (else they open with
 * the first streamed message, open.c). */
ncclResult_t rn_tcp_comm_create(const struct rn_rdv_conn *conn, int is_recv,
                                const struct rn_tcp_addrs *kept, const union rn_sockaddr *rails,
                                struct rn_tcp_comm **out) {
  const struct rn_params *p = rn_params();
  /* The stream count came from the connecting peer's hello. */
  if (conn->nstreams < 0 || conn->nstreams > RN_TCP_MAX_STREAMS) {
    RN_WARN("peer announced %d data streams, expected 0..%d", conn->nstreams, RN_TCP_MAX_STREAMS);
    rn_rdv_conn_close(conn);
    return ncclRemoteError;
  }
  struct rn_tcp_comm *c = rn_tcp_comm_map();
  if (c == NULL) {
    RN_WARN("out of memory creating a comm");
    rn_rdv_conn_close(conn);
    return ncclSystemError;
  }
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->rx_lock, NULL);
  c->is_recv = is_recv;
  c->tc = -1;
  /* Clear-to-sends of large receives leave at once until a message of
   * the sender shows it does without them (no CREDIT); from then on they
   * may wait.  Small receives' wait from the start: a sender that needs
   * theirs says so (CREDIT, WANT) with its first message. */
  c->peer_low = 1;
  c->peer_first = 1;
  c->ctrl_fd = conn->ctrl_fd;
  struct rn_tcp_addrs fresh;
  const struct rn_tcp_addrs *a = kept;
  if (a == NULL) {
    rn_tcp_addrs_read(c->ctrl_fd, conn->data_fd, conn->nstreams, &fresh);
    a = &fresh;
  }
  c->ctrl_local = a->ctrl_local;
  c->ctrl_peer = a->ctrl_peer;
  if (c->ctrl_peer.sa.sa_family != 0)
    rn_sockaddr_str(&c->ctrl_peer, c->peer, sizeof(c->peer));
  else
    snprintf(c->peer, sizeof(c->peer), "(unknown peer)");
  c->inline_max = (size_t)p->socket_inline;
  c->eager_max = c->inline_max < RN_TCP_EAGER_WIRE_MAX ? c->inline_max : RN_TCP_EAGER_WIRE_MAX;
  c->chunk = (size_t)p->socket_chunk;
  c->in = c->in_space;
  c->discard = c->discard_space;
  c->move.ctrl_rail = -1;
  c->standby = -1;
  rn_tcp_rails_start(c);
  /* A peer that vanishes without closing must not leave this comm
   * waiting forever: every socket gets keepalive and a user timeout.  A
   * kept connection's socket has them, and its tuning, already. */
  if (kept == NULL) {
    rn_sock_tune(c->ctrl_fd, 0);
    if (rn_sock_set_liveness(c->ctrl_fd, (int)p->socket_timeout_ms) != 0) {
      RN_WARN("cannot set keepalive/TCP_USER_TIMEOUT on a connection to %s: %s", c->peer,
              strerror(errno));
      for (int i = 0; i < conn->nstreams; i++)
        if (conn->data_fd[i] >= 0) close(conn->data_fd[i]);
      atomic_store(&c->error, ncclSystemError); /* never kept */
      rn_tcp_comm_free(c);
      return ncclSystemError;
    }
  }
  ncclResult_t res = ncclSuccess;
  if (conn->nstreams > 0 && (res = rn_tcp_comm_attach(c, conn, kept, rails)) != ncclSuccess) {
    atomic_store(&c->error, res); /* never kept */
    rn_tcp_comm_free(c);
    return res;
  }
  rn_shared_list_add(&rn_tcp_live, &c->open);
  *out = c;
  return ncclSuccess;
}

ncclResult_t rn_tcp_comm_attach(struct rn_tcp_comm *c, const struct rn_rdv_conn *conn,
                                const struct rn_tcp_addrs *kept, const union rn_sockaddr *rails) {
  const struct rn_params *p = rn_params();
  if (conn->nstreams < 1 || conn->nstreams > RN_TCP_MAX_STREAMS) {
    RN_WARN("internal: data streams for a comm with %s from a connection of %d", c->peer,
            conn->nstreams);
    return ncclInternalError;
  }
  for (int i = 0; i < conn->nstreams; i++) {
    if (conn->data_fd[i] >= 0 || (rails != NULL && conn->nrails >= 2)) continue;
    for (int k = 0; k < conn->nstreams; k++)
      if (conn->data_fd[k] >= 0) close(conn->data_fd[k]);
    RN_WARN("a connection with %s lacks data stream %d, and no rail of it may be missing",
            c->peer, i);
    return ncclRemoteError;
  }
  /* Streams are sized to the count; what only streaming needs (send
   * queues, the receiver's chunk maps) comes with the first streamed
   * message (streams.c). */
  struct rn_tcp_stream *streams = calloc((size_t)conn->nstreams, sizeof(*streams));
  if (streams == NULL) {
    for (int i = 0; i < conn->nstreams; i++)
      if (conn->data_fd[i] >= 0) close(conn->data_fd[i]);
    RN_WARN("out of memory for the data streams of a comm with %s", c->peer);
    return ncclSystemError;
  }
  struct rn_tcp_addrs fresh;
  const struct rn_tcp_addrs *a = kept;
  if (a == NULL) {
    rn_tcp_addrs_read(-1, conn->data_fd, conn->nstreams, &fresh);
    a = &fresh;
  }
  for (int i = 0; i < conn->nstreams; i++) {
    struct rn_tcp_stream *s = &streams[i];
    s->local = a->local[i];
    s->peer = a->peer[i];
    s->fd = conn->data_fd[i];
    s->comm = c;
    s->eng_thread = s->eng_slot = -1;
    pthread_mutex_init(&s->queue_lock, NULL);
    if (s->fd < 0) { /* its rail was left out at connect: dead until re-admitted */
      s->local = rn_sockaddr_no_port(rails[i % conn->nrails]);
      atomic_store(&s->dead, 1);
    }
  }
  /* From here on the comm owns the sockets (rn_tcp_comm_detach). */
  c->stream = streams;
  c->nstreams = conn->nstreams;
  int live = 0;
  for (int i = 0; i < c->nstreams && kept == NULL; i++) {
    if (c->stream[i].fd < 0) continue;
    rn_sock_tune(c->stream[i].fd, 0);
    if (live == 0) live = rn_sock_set_liveness(c->stream[i].fd, (int)p->socket_timeout_ms);
  }
  if (live != 0) {
    RN_WARN("cannot set keepalive/TCP_USER_TIMEOUT on a data stream to %s: %s", c->peer,
            strerror(errno));
    rn_tcp_comm_detach(c);
    return ncclSystemError;
  }
  if (rn_tcp_rails_init(c) != 0) {
    RN_WARN("out of memory for the rails of a comm with %s", c->peer);
    rn_tcp_comm_detach(c);
    return ncclSystemError;
  }
  if (rn_tcp_engine_attach(c) != ncclSuccess) { /* WARNed */
    rn_tcp_comm_detach(c);
    return ncclSystemError;
  }
  rn_tcp_move_init(c);
  rn_tcp_comm_streamy(c);
  c->lazy.state = RN_TCP_STREAMS_UP;
  c->lazy.since_ms = c->lazy.used_ms = rn_clock_ms();
  if (c->lazy.opened++ > 0 || conn->ctrl_fd < 0)
    RN_INFO(NCCL_NET, "%s comm with %s (dev %d): %d data streams open over %d rail(s)",
            c->is_recv ? "receive" : "send", c->peer, c->base.vdev, c->nstreams, c->nrails);
  return ncclSuccess;
}

void rn_tcp_comm_detach(struct rn_tcp_comm *c) {
  /* No engine thread touches the streams after this. */
  rn_tcp_engine_detach(c);
  rn_tcp_rails_free(c);
  for (int i = 0; i < c->nstreams; i++) {
    rn_sock_close_gently(c->stream[i].fd, 0);
    pthread_mutex_destroy(&c->stream[i].queue_lock);
    free(c->stream[i].queue);
    free(c->stream[i].bounce);
    free(c->stream[i].scratch);
  }
  free(c->stream);
  c->stream = NULL;
  c->nstreams = 0;
  c->nthreads = 0;
  free(c->rail);
  c->rail = NULL;
  c->nrails = 0;
  c->standby = -1;
  c->on_standby = 0;
}

int rn_tcp_comm_free_all(void) {
  int n = 0;
  for (struct rn_list *first; (first = rn_shared_list_first(&rn_tcp_live)) != NULL; n++)
    rn_tcp_comm_free(RN_LIST_ENTRY(first, struct rn_tcp_comm, open));
  rn_tcp_comm_cache_drain();
  return n;
}

/* One socket: its family decides between IP_TOS and IPV6_TCLASS. */
static int rn_tcp_sock_set_class(int fd, const union rn_sockaddr *local, int tc, int prio,
                                 const char **what) {
  union rn_sockaddr a = *local;
  socklen_t len = sizeof(a);
  if (a.sa.sa_family == 0 && getsockname(fd, &a.sa, &len) != 0) {
    *what = "getsockname";
    return -1;
  }
  int v6 = a.sa.sa_family == AF_INET6;
  *what = v6 ? "IPV6_TCLASS" : "IP_TOS";
  if (setsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_TCLASS : IP_TOS, &tc, sizeof(tc)))
    return -1;
  *what = "SO_PRIORITY";
  return setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &prio, sizeof(prio));
}

void rn_tcp_urgent_called(void) {
  /* Stored only when the millisecond changed: latency-critical comms
   * called from several threads would otherwise pass this cache line
   * between their cores on every call. */
  const int64_t now = rn_clock_ms();
  if (atomic_load_explicit(&rn_tcp_urgent_ms, memory_order_relaxed) != now)
    atomic_store_explicit(&rn_tcp_urgent_ms, now, memory_order_relaxed);
}

int rn_tcp_yields(const struct rn_tcp_comm *c) {
  return !c->urgent && atomic_load_explicit(&rn_tcp_urgent, memory_order_relaxed) > 0 &&
         rn_clock_ms() - atomic_load_explicit(&rn_tcp_urgent_ms, memory_order_relaxed) <
             RN_TCP_URGENT_RECENT_MS;
}

static int rn_tcp_class_priority(int tc) {
  int prio = (int)rn_params()->socket_priority;
  return prio < 0 ? tc >> 5 : prio;
}

void rn_tcp_stream_set_class(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  if (c->tc < 0) return;
  const char *what = "";
  int prio = rn_tcp_class_priority(c->tc);
  if (rn_tcp_sock_set_class(s->fd, &s->local, c->tc, prio, &what) != 0)
    RN_WARN("send comm to %s: cannot set %s for traffic class %d (SO_PRIORITY %d) on a data "
            "stream that joined again: %s; it carries the default class",
            c->peer, what, c->tc, prio, strerror(errno));
}

ncclResult_t rn_tcp_comm_set_class(struct rn_tcp_comm *c, int tc, int streams_only) {
  int prio = rn_tcp_class_priority(tc);
  c->tc = tc; /* what its sockets carry, should they be kept for reuse (pool.c) */
  const char *what = "";
  for (int i = streams_only ? 0 : -1; i < c->nstreams; i++) {
    int fd = i < 0 ? c->ctrl_fd : c->stream[i].fd;
    if (fd < 0) continue; /* a stream of a rail left out: set when it joins */
    if (rn_tcp_sock_set_class(fd, i < 0 ? &c->ctrl_local : &c->stream[i].local, tc, prio, &what) !=
        0) {
      RN_WARN("send comm to %s: cannot set %s for traffic class %d (SO_PRIORITY %d) on %s: %s",
              c->peer, what, tc, prio, i < 0 ? "the control connection" : "a data stream",
              strerror(errno));
      return errno == EPERM || errno == EACCES ? ncclInvalidUsage : ncclSystemError;
    }
  }
  if (streams_only) return ncclSuccess;
  const int urgent = (int)rn_params()->traffic_class_urgent;
  if (!c->urgent && urgent >= 0 && tc >= urgent) {
    c->urgent = 1;
    atomic_fetch_add(&rn_tcp_urgent, 1);
  }
  char note[256] = "";
  if (c->urgent)
    snprintf(note, sizeof(note),
             "; latency-critical (RAILNET_TRAFFIC_CLASS_URGENT): for %d ms after each of its "
             "calls, this process's other comms move at most one chunk per call and yield the "
             "CPU after an incomplete test",
             RN_TCP_URGENT_RECENT_MS);
  RN_INFO(NCCL_NET, "send comm to %s: traffic class %d (DSCP %d), SO_PRIORITY %d on %d sockets%s",
          c->peer, tc, tc >> 2, prio, c->nstreams + 1, note);
  return ncclSuccess;
}

void rn_tcp_comm_defer_cts(struct rn_tcp_comm *c) {
  atomic_store(&c->cts_deferred, 1);
  pthread_mutex_lock(&rn_tcp_deferred.lock);
  if (c->deferred.next == NULL) rn_list_add_tail(&rn_tcp_deferred.head, &c->deferred);
  atomic_store(&rn_tcp_any_deferred, 1);
  pthread_mutex_unlock(&rn_tcp_deferred.lock);
}
