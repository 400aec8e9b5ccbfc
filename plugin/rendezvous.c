/* The rendezvous every railnet connection starts with: the connector dials
 * a control connection plus data streams and sends each a hello; the
 * listener admits only hellos carrying the handle's nonce and groups the
 * streams of one connection.  Nothing here ever blocks.
 *
 * The listening side faces anyone who can reach its ports, so it admits in
 * two steps and holds every resource within a fixed bound:
 *
 * - Anonymous first.  An accepted socket is anonymous until its whole hello
 *   (magic, version, nonce, connection id, stream counts) has arrived and
 *   checks out.  The hello is read right after accept(): a connector sends
 *   it as soon as its connect completes, so it is usually there already.
 *   Bytes are checked as they arrive; a wrong magic, version or nonce closes
 *   the socket at once.
 * - Anonymous sockets wait in a table of RN_RDV_MAX_ANON, in the order
 *   they came, each with a deadline of RAILNET_HELLO_TIMEOUT_MS from its
 *   accept (never more than RAILNET_CONNECT_TIMEOUT_MS), and are closed
 *   there.  When the table is full, the oldest one gets a last read and
 *   makes room for the newcomer unless its hello has arrived.  Under a
 *   flood of R connections a second every socket thus has
 *   min(hello timeout, RN_RDV_MAX_ANON / R) for its hello, the most a
 *   fixed table can give each of them; a real connector's hello follows
 *   its handshake by microseconds (by seconds where TCP resends it on a
 *   lossy path: the default timeout leaves it four tries), and a dropped
 *   one dials again (a connector waiting for its accept watches its data
 *   streams too: rn_rdv_conn_dropped).  A flood
 *   of silent or garbage connections costs each of them an accept, a recv
 *   and a close.
 * - Authenticated sockets join the group of their connection id.  At most
 *   RN_RDV_MAX_GROUPS groups holding RN_RDV_MAX_GROUP_FDS sockets together;
 *   when full, an authenticated newcomer evicts the oldest incomplete group
 *   (a real connection completes within microseconds of its first socket,
 *   so only a stalled one is ever the oldest).  A complete group waits for
 *   poll to return it, one per call, and is never evicted; an incomplete
 *   one is dropped RAILNET_CONNECT_TIMEOUT_MS after it started.  A group is
 *   complete with its control connection and the data streams of every
 *   rail not left out.
 * - Refused hellos: a data stream count outside the listener's range (1..32
 *   for TCP, 0 for the verbs bootstrap), a bad role or index, rails left
 *   out (struct rn_hello's absent) that this listener cannot tell apart,
 *   or all of them, a data stream of such a rail, counts that
 *   differ from their group's, a slot already taken, or a source address
 *   other than the one the group saw from the same source (struct rn_hello
 *   says which socket leaves from which address): a duplicate connection
 *   id from another peer is never merged.
 * - The kernel backlog may hold thousands of connections ahead of a real
 *   one.  Each poll accepts up to RN_RDV_ACCEPT_BUDGET of them, taking the
 *   listening sockets in turn, so the backlog drains in a few calls while
 *   each call stays short.
 * - Strays are closed with a reset (SO_LINGER 0): they leave no TIME_WAIT
 *   behind on the listening host.
 * - Bounds per listener: RN_RDV_MAX_ANON + RN_RDV_MAX_GROUP_FDS = 256 sockets (the listening sockets are the
 *   caller's), and one allocation of sizeof(struct rn_rdv), about 60 KB.
 * - Out of descriptors: when accept() fails with EMFILE, ENFILE, ENOBUFS
 *   or ENOMEM, one WARN opens the episode and accepting pauses; what is
 *   already accepted still progresses.  The episode ends, with an INFO, at
 *   the first accept() that gets past the descriptor allocation (a
 *   connection, or EAGAIN).  Once it has lasted RAILNET_CONNECT_TIMEOUT_MS
 *   (by then the connector has given up too), poll returns
 *   ncclSystemError with a WARN and a new episode may start: the listener
 *   stays usable.  No spare descriptor is kept to accept-and-close queued
 *   connections: NCCL polls accept, so a refused accept costs one syscall
 *   per call rather than a busy loop on readiness, and a queued connector
 *   completes as soon as descriptors return instead of being reset.
 * - Logging: the first stray of each RN_RDV_LOG_WINDOW_MS window is one
 *   INFO line with its address and reason, the others are counted and
 *   summed up in one INFO line per window (and at destroy); never a WARN.
 *   A legitimate connection logs nothing here. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "railnet/param.h"
#include "railnet/rendezvous.h"
#include "railnet/transport.h"

#define RN_HELLO_VERSION RN_WIRE_VERSION
#define RN_RDV_MAX_ANON 128      /* sockets within their hello deadline */
#define RN_RDV_MAX_GROUPS 64     /* authenticated connections being assembled */
#define RN_RDV_MAX_GROUP_FDS 128 /* the sockets those hold together */
#define RN_RDV_ACCEPT_BUDGET 256 /* accept() calls per poll */
#define RN_RDV_LOG_WINDOW_MS 10000
/* A source slot per local address of the connector (at most one per data
 * stream), or per listening socket when the connector bound none. */
#define RN_RDV_MAX_SOURCES RN_RDV_MAX_STREAMS
static_assert(RN_RDV_MAX_LFDS <= RN_RDV_MAX_SOURCES, "a source slot per listening socket");
static_assert(RN_RDV_MAX_GROUP_FDS >= 1 + RN_RDV_MAX_STREAMS, "room for one whole connection");
static_assert(sizeof(struct rn_hello) == 32, "the hello's wire size");

/* Nonces and connection ids come from the kernel's generator, read 32 at
 * a time: every listen and every dial takes one, and a getrandom call per
 * value was one system call of a kept connection's dozen.  A forked child
 * drops what is left (pthread_atfork), so it never repeats its parent's. */
#define RN_RANDOM_BATCH 32
static pthread_mutex_t rn_random_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t rn_random_once = PTHREAD_ONCE_INIT;
static uint64_t rn_random_buf[RN_RANDOM_BATCH];
static int rn_random_left;

static void rn_random_prepare(void) { pthread_mutex_lock(&rn_random_lock); }
static void rn_random_parent(void) { pthread_mutex_unlock(&rn_random_lock); }
static void rn_random_child(void) {
  rn_random_left = 0;
  pthread_mutex_unlock(&rn_random_lock);
}
static void rn_random_register(void) {
  if (pthread_atfork(rn_random_prepare, rn_random_parent, rn_random_child) != 0)
    RN_WARN("pthread_atfork failed: nonces are drawn one at a time");
}

/* buf filled from getrandom, else /dev/urandom: 0, or -1 with errno. */
static int rn_random_fill(void *buf, size_t len) {
  if (getrandom(buf, len, 0) == (ssize_t)len) return 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t off = 0;
  while (off < len) {
    ssize_t k = read(fd, (char *)buf + off, len - off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    off += (size_t)k;
  }
  int err = errno;
  close(fd);
  errno = off == len ? 0 : err != 0 ? err : EIO;
  return off == len ? 0 : -1;
}

uint64_t rn_rdv_random64(void) {
  pthread_once(&rn_random_once, rn_random_register);
  uint64_t v = 0;
  pthread_mutex_lock(&rn_random_lock);
  if (rn_random_left == 0 && rn_random_fill(rn_random_buf, sizeof(rn_random_buf)) == 0)
    rn_random_left = RN_RANDOM_BATCH;
  int got = rn_random_left > 0;
  if (got) {
    v = rn_random_buf[--rn_random_left];
    rn_random_buf[rn_random_left] = 0; /* used once */
  }
  pthread_mutex_unlock(&rn_random_lock);
  if (!got) {
    /* Neither source answered (a sandbox without getrandom or /dev):
     * connections still work, with nonces anyone who can guess the clock
     * can match, and the log says so once. */
    static atomic_int said;
    if (!atomic_exchange(&said, 1))
      RN_WARN("no random source (getrandom and /dev/urandom failed: %s): connection nonces are "
              "predictable, so a host that reaches this process's ports could join its "
              "connections",
              strerror(errno));
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 16);
  }
  return v;
}

/* ---- rendezvous (listening side) ---- */

/* Why a connection was closed without being handed out. */
enum rn_rdv_stray {
  RN_STRAY_SILENT = 0,   /* no whole hello by its deadline */
  RN_STRAY_SHED,         /* the oldest without a hello when a newcomer needed room */
  RN_STRAY_CLOSED,       /* closed by the peer before its hello */
  RN_STRAY_NOT_RAILNET,  /* wrong magic or version */
  RN_STRAY_WRONG_NONCE,  /* a peer holding another handle */
  RN_STRAY_MALFORMED,    /* role, index or stream counts out of range */
  RN_STRAY_INCONSISTENT, /* disagrees with its connection's other sockets */
  RN_STRAY_NO_ROOM,      /* authenticated, but every group was complete */
  RN_STRAY_EVICTED,      /* incomplete connection evicted for a newer one */
  RN_STRAY_TIMED_OUT,    /* incomplete connection past the connect timeout */
  RN_STRAY_NREASONS
};
static const char *const rn_rdv_stray_name[RN_STRAY_NREASONS] = {
    "silent past the hello timeout",
    "no hello yet when newer connections needed its place",
    "closed before identifying itself",
    "not a railnet hello",
    "wrong nonce (a peer holding another handle)",
    "malformed hello",
    "hello inconsistent with its connection",
    "no room: every connection in progress was complete",
    "incomplete connection evicted for a newer one",
    "streams missing past the connect timeout",
};

/* An accepted socket whose hello is still arriving. */
struct rn_rdv_socket {
  int fd;
  int lfd_index; /* the listening socket that accepted it */
  int readable;  /* the last poll() saw bytes or an error waiting */
  int64_t deadline;
  size_t off;
  union rn_sockaddr peer;
  struct rn_hello hello;
};

/* The peer address a connection's sockets came from, per source slot. */
struct rn_rdv_source {
  uint8_t set;
  uint8_t family;
  uint8_t addr[16];
};

/* An authenticated connection being assembled. */
struct rn_rdv_group {
  uint64_t conn_id;
  uint64_t seq; /* creation order: the oldest incomplete is evicted first */
  int64_t deadline;
  uint32_t nlocals;
  uint32_t absent; /* rails left out (struct rn_hello) */
  int have_ctrl;
  int ndata;
  int want; /* data streams it comes with: those of the rails not left out */
  int nfds;
  struct rn_rdv_conn conn;
  struct rn_rdv_source src[RN_RDV_MAX_SOURCES];
};

/* Stray counts since the last INFO line about them. */
struct rn_rdv_stray_log {
  int64_t window_start; /* 0: no window open */
  uint64_t count[RN_STRAY_NREASONS];
  uint64_t total;
};

/* Out of descriptors (or socket memory) in accept(). */
struct rn_rdv_starved {
  int64_t since; /* 0: not starved */
  uint64_t attempts;
  int err;
};

struct rn_rdv {
  int lfd[RN_RDV_MAX_LFDS];
  int nlfds;
  int next_lfd; /* the listening socket accepted from first next time */
  uint64_t nonce;
  int min_streams, max_streams;
  int64_t hello_ms, connect_ms;
  char addr[64];        /* the first listening address, for messages (rn_rdv_name) */
  int anon_head, nanon; /* a ring, oldest at anon_head */
  struct rn_rdv_socket anon[RN_RDV_MAX_ANON];
  int ngroups;
  int group_fds;
  uint64_t next_seq;
  struct rn_rdv_group group[RN_RDV_MAX_GROUPS];
  struct rn_rdv_stray_log strays;
  struct rn_rdv_starved starved;
};

/* The first listening address, for messages: read at the first one. */
static const char *rn_rdv_name(struct rn_rdv *r) {
  if (r->addr[0] != '\0') return r->addr;
  union rn_sockaddr a;
  socklen_t len = sizeof(a);
  if (getsockname(r->lfd[0], &a.sa, &len) == 0)
    rn_sockaddr_str(&a, r->addr, sizeof(r->addr));
  else
    snprintf(r->addr, sizeof(r->addr), "listening socket %d", r->lfd[0]);
  return r->addr;
}

void rn_rdv_conn_close(const struct rn_rdv_conn *c) {
  if (c->ctrl_fd >= 0) close(c->ctrl_fd);
  for (int i = 0; i < RN_RDV_MAX_STREAMS; i++)
    if (c->data_fd[i] >= 0) close(c->data_fd[i]);
}

int rn_rdv_conn_dropped(const struct rn_rdv_conn *c) {
  struct pollfd p[RN_RDV_MAX_STREAMS];
  int n = 0;
  for (int i = 0; i < RN_RDV_MAX_STREAMS; i++)
    if (c->data_fd[i] >= 0) p[n++] = (struct pollfd){.fd = c->data_fd[i], .events = POLLIN};
  if (n == 0 || poll(p, (nfds_t)n, 0) <= 0) return 0;
  /* The listener writes nothing on a data stream: anything to read is its
   * end (a close or a reset). */
  for (int i = 0; i < n; i++)
    if (p[i].revents != 0) return 1;
  return 0;
}

/* Close with a reset: a stray leaves no TIME_WAIT behind on this host. */
static void rn_rdv_close_reset(int fd) {
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(fd);
}

static void rn_rdv_stray_summary(struct rn_rdv *r, int64_t now) {
  struct rn_rdv_stray_log *s = &r->strays;
  if (s->total > 0) {
    char line[512];
    size_t n = 0;
    for (int i = 0; i < RN_STRAY_NREASONS && n < sizeof(line); i++)
      if (s->count[i] > 0)
        n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%llu %s", n ? ", " : "",
                              (unsigned long long)s->count[i], rn_rdv_stray_name[i]);
    RN_INFO(NCCL_INIT | NCCL_NET, "%s: closed %llu more stray connection(s) in %lld ms: %s",
            rn_rdv_name(r), (unsigned long long)s->total, (long long)(now - s->window_start), line);
  }
  memset(s, 0, sizeof(*s));
}

/* Count a stray; the first of each window gets its own line. */
static void rn_rdv_stray_note(struct rn_rdv *r, enum rn_rdv_stray why,
                              const union rn_sockaddr *peer, uint64_t conn_id, int64_t now) {
  struct rn_rdv_stray_log *s = &r->strays;
  if (s->window_start != 0 && now - s->window_start >= RN_RDV_LOG_WINDOW_MS)
    rn_rdv_stray_summary(r, now);
  if (s->window_start != 0) {
    s->count[why]++;
    s->total++;
    return;
  }
  s->window_start = now;
  char str[64] = "?";
  if (peer != NULL) rn_sockaddr_str(peer, str, sizeof(str));
  if (peer != NULL)
    RN_INFO(NCCL_INIT | NCCL_NET,
            "%s: closed stray connection from %s: %s (more are counted, summed up every %d s)",
            rn_rdv_name(r), str, rn_rdv_stray_name[why], RN_RDV_LOG_WINDOW_MS / 1000);
  else
    RN_INFO(NCCL_INIT | NCCL_NET,
            "%s: dropped connection %016llx: %s (more are counted, summed up every %d s)",
            rn_rdv_name(r), (unsigned long long)conn_id, rn_rdv_stray_name[why],
            RN_RDV_LOG_WINDOW_MS / 1000);
}

static void rn_rdv_socket_drop(struct rn_rdv *r, const struct rn_rdv_socket *s,
                               enum rn_rdv_stray why, int64_t now) {
  rn_rdv_close_reset(s->fd);
  rn_rdv_stray_note(r, why, &s->peer, 0, now);
}

static void rn_rdv_group_drop(struct rn_rdv *r, int i, enum rn_rdv_stray why, int64_t now) {
  struct rn_rdv_group *g = &r->group[i];
  if (g->conn.ctrl_fd >= 0) rn_rdv_close_reset(g->conn.ctrl_fd);
  for (int k = 0; k < RN_RDV_MAX_STREAMS; k++)
    if (g->conn.data_fd[k] >= 0) rn_rdv_close_reset(g->conn.data_fd[k]);
  rn_rdv_stray_note(r, why, NULL, g->conn_id, now);
  r->group_fds -= g->nfds;
  *g = r->group[--r->ngroups];
}

ncclResult_t rn_rdv_create_range(const int *lfds, int nlfds, uint64_t nonce, int min_streams,
                                 int max_streams, struct rn_rdv **out) {
  if (nlfds < 1 || nlfds > RN_RDV_MAX_LFDS || min_streams < 0 || max_streams < min_streams ||
      max_streams > RN_RDV_MAX_STREAMS)
    return ncclInternalError;
  struct rn_rdv *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    RN_WARN("out of memory allocating the rendezvous");
    return ncclSystemError;
  }
  memcpy(r->lfd, lfds, sizeof(int) * (size_t)nlfds);
  r->nlfds = nlfds;
  r->nonce = nonce;
  r->min_streams = min_streams;
  r->max_streams = max_streams;
  r->connect_ms = rn_params()->connect_timeout_ms;
  r->hello_ms = rn_params()->hello_timeout_ms;
  if (r->hello_ms > r->connect_ms) r->hello_ms = r->connect_ms;
  *out = r;
  return ncclSuccess;
}

ncclResult_t rn_rdv_create(const int *lfds, int nlfds, uint64_t nonce, struct rn_rdv **out) {
  return rn_rdv_create_range(lfds, nlfds, nonce, 1, RN_RDV_MAX_STREAMS, out);
}

ncclResult_t rn_rdv_create_ctrl_only(const int *lfds, int nlfds, uint64_t nonce,
                                     struct rn_rdv **out) {
  return rn_rdv_create_range(lfds, nlfds, nonce, 0, 0, out);
}

/* Data stream i of a connection whose hello is h belongs to a rail left
 * out (h checked). */
static int rn_rdv_left_out(const struct rn_hello *h, uint32_t i) {
  return h->absent != 0 && ((h->absent >> (i % h->nlocals)) & 1u);
}

/* Rails left out of a connection must be named in a way the listener can
 * serve: of at least two bound sources, each with a listening socket of
 * its own (the k-th source dials the k-th), and not all of them. */
static int rn_rdv_absent_ok(const struct rn_rdv *r, const struct rn_hello *h) {
  if (h->absent == 0) return 1;
  return h->nlocals >= 2 && h->nlocals <= (uint32_t)r->nlfds && (h->absent >> h->nlocals) == 0 &&
         h->absent != (1u << h->nlocals) - 1 && h->nstreams >= h->nlocals;
}

/* Which of the connector's addresses this socket left from (see struct
 * rn_hello). */
static int rn_rdv_source_slot(const struct rn_rdv_socket *s) {
  const struct rn_hello *h = &s->hello;
  if (h->nlocals == 0) return s->lfd_index;
  /* the control connection leaves from the first rail not left out */
  if (h->role == RN_ROLE_CTRL) return h->absent ? __builtin_ctz(~(uint32_t)h->absent) : 0;
  return (int)(h->index % h->nlocals);
}

static struct rn_rdv_source rn_rdv_source_of(const struct rn_rdv_socket *s) {
  struct rn_rdv_source seen = {.set = 1, .family = (uint8_t)s->peer.sa.sa_family};
  if (s->peer.sa.sa_family == AF_INET6)
    memcpy(seen.addr, &s->peer.in6.sin6_addr, 16);
  else
    memcpy(seen.addr, &s->peer.in.sin_addr, 4);
  return seen;
}

/* 1 when the socket comes from the address its group saw from the same
 * source, or the group has seen none from there yet. */
static int rn_rdv_source_matches(const struct rn_rdv_group *g, const struct rn_rdv_socket *s) {
  const struct rn_rdv_source *src = &g->src[rn_rdv_source_slot(s)];
  struct rn_rdv_source seen = rn_rdv_source_of(s);
  return !src->set || memcmp(src, &seen, sizeof(seen)) == 0;
}

/* Evict the oldest incomplete group other than keep; 0 when one went. */
static int rn_rdv_group_evict(struct rn_rdv *r, const struct rn_rdv_group *keep, int64_t now) {
  int oldest = -1;
  for (int i = 0; i < r->ngroups; i++) {
    const struct rn_rdv_group *g = &r->group[i];
    if (g == keep || (g->have_ctrl && g->ndata == g->want)) continue;
    if (oldest < 0 || g->seq < r->group[oldest].seq) oldest = i;
  }
  if (oldest < 0) return -1;
  rn_rdv_group_drop(r, oldest, RN_STRAY_EVICTED, now);
  return 0;
}

static struct rn_rdv_group *rn_rdv_group_new(struct rn_rdv *r, const struct rn_hello *h,
                                             int64_t now) {
  if ((r->ngroups == RN_RDV_MAX_GROUPS || r->group_fds == RN_RDV_MAX_GROUP_FDS) &&
      rn_rdv_group_evict(r, NULL, now) != 0)
    return NULL;
  struct rn_rdv_group *g = &r->group[r->ngroups++];
  memset(g, 0, sizeof(*g));
  g->conn_id = h->conn_id;
  g->seq = r->next_seq++;
  g->deadline = now + r->connect_ms;
  g->nlocals = h->nlocals;
  g->absent = h->absent;
  g->conn.nrails = (int)h->nlocals;
  g->conn.ctrl_fd = -1;
  g->conn.nstreams = (int)h->nstreams;
  g->want = 0;
  for (uint32_t i = 0; i < h->nstreams; i++) g->want += !rn_rdv_left_out(h, i);
  for (int i = 0; i < RN_RDV_MAX_STREAMS; i++) g->conn.data_fd[i] = -1;
  return g;
}

/* Put a socket whose whole hello has arrived into its connection: 0, or
 * -1 with *why when it is a stray. */
static int rn_rdv_join(struct rn_rdv *r, const struct rn_rdv_socket *s, int64_t now,
                       enum rn_rdv_stray *why) {
  const struct rn_hello *h = &s->hello;
  *why = RN_STRAY_MALFORMED;
  if (h->magic != RN_HELLO_MAGIC || h->version != RN_HELLO_VERSION) {
    *why = RN_STRAY_NOT_RAILNET;
    return -1;
  }
  if (h->nonce != r->nonce) {
    *why = RN_STRAY_WRONG_NONCE;
    return -1;
  }
  if ((h->role != RN_ROLE_CTRL && h->role != RN_ROLE_DATA) ||
      h->nstreams < (uint32_t)r->min_streams || h->nstreams > (uint32_t)r->max_streams ||
      (h->role == RN_ROLE_DATA && h->index >= h->nstreams) || h->nlocals > RN_RDV_MAX_SOURCES ||
      !rn_rdv_absent_ok(r, h) || (h->role == RN_ROLE_DATA && rn_rdv_left_out(h, h->index)))
    return -1;
  struct rn_rdv_group *g = NULL;
  for (int i = 0; i < r->ngroups && g == NULL; i++)
    if (r->group[i].conn_id == h->conn_id) g = &r->group[i];
  if (g != NULL) {
    *why = RN_STRAY_INCONSISTENT;
    if ((int)h->nstreams != g->conn.nstreams || h->nlocals != g->nlocals ||
        h->absent != g->absent || (h->role == RN_ROLE_CTRL && g->have_ctrl) ||
        (h->role == RN_ROLE_DATA && g->conn.data_fd[h->index] >= 0) || !rn_rdv_source_matches(g, s))
      return -1;
    *why = RN_STRAY_NO_ROOM;
    if (r->group_fds == RN_RDV_MAX_GROUP_FDS) {
      if (rn_rdv_group_evict(r, g, now) != 0) return -1;
      /* the eviction moved the last group into the evicted one's place */
      for (int i = 0; i < r->ngroups; i++)
        if (r->group[i].conn_id == h->conn_id) g = &r->group[i];
    }
  } else {
    *why = RN_STRAY_NO_ROOM;
    g = rn_rdv_group_new(r, h, now);
    if (g == NULL) return -1;
  }
  g->src[rn_rdv_source_slot(s)] = rn_rdv_source_of(s);
  if (h->role == RN_ROLE_CTRL) {
    g->conn.ctrl_fd = s->fd;
    g->have_ctrl = 1;
  } else {
    g->conn.data_fd[h->index] = s->fd;
    g->ndata++;
  }
  g->nfds++;
  r->group_fds++;
  return 0;
}

static void rn_rdv_admit(struct rn_rdv *r, const struct rn_rdv_socket *s, int64_t now) {
  enum rn_rdv_stray why;
  if (rn_rdv_join(r, s, now, &why) != 0) rn_rdv_socket_drop(r, s, why, now);
}

/* Read what has arrived of a socket's hello: 1 when it is whole, 0 while
 * waiting, -1 with *why when the socket is a stray already. */
static int rn_rdv_read(const struct rn_rdv *r, struct rn_rdv_socket *s, enum rn_rdv_stray *why) {
  if (rn_sock_recv_some(s->fd, &s->hello, sizeof(s->hello), &s->off) != ncclSuccess) {
    *why = RN_STRAY_CLOSED;
    return -1;
  }
  /* The prefix that has arrived is enough to reject early. */
  const struct rn_hello *h = &s->hello;
  *why = RN_STRAY_NOT_RAILNET;
  if (s->off >= offsetof(struct rn_hello, version) && h->magic != RN_HELLO_MAGIC) return -1;
  if (s->off >= offsetof(struct rn_hello, role) && h->version != RN_HELLO_VERSION) return -1;
  *why = RN_STRAY_WRONG_NONCE;
  if (s->off >= offsetof(struct rn_hello, conn_id) && h->nonce != r->nonce) return -1;
  return s->off == sizeof(s->hello);
}

/* The i-th oldest anonymous socket. */
static struct rn_rdv_socket *rn_rdv_anon_at(struct rn_rdv *r, int i) {
  return &r->anon[(r->anon_head + i) % RN_RDV_MAX_ANON];
}

/* A socket fresh from accept(): its hello is read at once.  Without it,
 * the socket waits in the anonymous table, where a full table's oldest
 * socket gets a last read and, still without its hello, leaves. */
static void rn_rdv_take(struct rn_rdv *r, struct rn_rdv_socket *s, int64_t now) {
  enum rn_rdv_stray why;
  int got = rn_rdv_read(r, s, &why);
  if (got < 0) {
    rn_rdv_socket_drop(r, s, why, now);
    return;
  }
  if (got > 0) {
    rn_rdv_admit(r, s, now);
    return;
  }
  if (r->nanon == RN_RDV_MAX_ANON) {
    struct rn_rdv_socket oldest = *rn_rdv_anon_at(r, 0);
    r->anon_head = (r->anon_head + 1) % RN_RDV_MAX_ANON;
    r->nanon--;
    got = rn_rdv_read(r, &oldest, &why);
    if (got > 0)
      rn_rdv_admit(r, &oldest, now);
    else
      rn_rdv_socket_drop(r, &oldest,
                         got < 0                 ? why
                         : now > oldest.deadline ? RN_STRAY_SILENT
                                                 : RN_STRAY_SHED,
                         now);
  }
  *rn_rdv_anon_at(r, r->nanon++) = *s;
}

static void rn_rdv_starved_end(struct rn_rdv *r, int64_t now) {
  if (r->starved.since == 0) return;
  RN_INFO(NCCL_NET, "%s: accept works again after %lld ms without descriptors (%llu attempts)",
          rn_rdv_name(r), (long long)(now - r->starved.since),
          (unsigned long long)r->starved.attempts);
  memset(&r->starved, 0, sizeof(r->starved));
}

/* accept() failed for lack of descriptors or memory: WARN once per
 * episode, an error once it has lasted the connect timeout. */
static ncclResult_t rn_rdv_starved_note(struct rn_rdv *r, int err, int64_t now) {
  struct rn_rdv_starved *st = &r->starved;
  if (st->since == 0) {
    st->since = now;
    st->err = err;
    RN_WARN(
        "%s: accept failed: %s; holding %d socket(s) of pending connections, new ones wait in "
        "the backlog; giving up after %lld ms",
        rn_rdv_name(r), strerror(err), r->nanon + r->group_fds, (long long)r->connect_ms);
  }
  st->attempts++;
  if (now - st->since < r->connect_ms) return ncclSuccess;
  RN_WARN(
      "%s: accept has failed with %s for %lld ms (%llu attempts): out of file descriptors "
      "or socket memory (raise the limit with ulimit -n)",
      rn_rdv_name(r), strerror(st->err), (long long)(now - st->since),
      (unsigned long long)st->attempts);
  memset(st, 0, sizeof(*st));
  return ncclSystemError;
}

/* Drain up to RN_RDV_ACCEPT_BUDGET connections from the listening sockets. */
static ncclResult_t rn_rdv_accept_some(struct rn_rdv *r, int64_t now) {
  int budget = RN_RDV_ACCEPT_BUDGET;
  int first = r->next_lfd;
  r->next_lfd = (r->next_lfd + 1) % r->nlfds;
  for (int k = 0; k < r->nlfds && budget > 0; k++) {
    int l = (first + k) % r->nlfds;
    while (budget > 0) {
      struct rn_rdv_socket s;
      memset(&s, 0, sizeof(s));
      socklen_t len = sizeof(s.peer);
      s.fd = accept4(r->lfd[l], &s.peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (s.fd < 0) {
        int err = errno;
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) {
          rn_rdv_starved_end(r, now);
          break;
        }
        budget--;
        if (err == ECONNABORTED || err == EPROTO) continue;
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
          return rn_rdv_starved_note(r, err, now);
        RN_WARN("%s: accept on listening socket %d failed: %s", rn_rdv_name(r), l, strerror(err));
        return ncclSystemError;
      }
      budget--;
      rn_rdv_starved_end(r, now);
      s.lfd_index = l;
      s.deadline = now + r->hello_ms;
      rn_rdv_take(r, &s, now);
    }
  }
  return ncclSuccess;
}

/* Mark the waiting sockets that have bytes (or an error) to read: one
 * poll() rather than a recv() each. */
static void rn_rdv_mark_readable(struct rn_rdv *r) {
  struct pollfd pfd[RN_RDV_MAX_ANON];
  int n = r->nanon;
  for (int i = 0; i < n; i++)
    pfd[i] = (struct pollfd){.fd = rn_rdv_anon_at(r, i)->fd, .events = POLLIN};
  int rc = n > 0 ? poll(pfd, (nfds_t)n, 0) : 0;
  for (int i = 0; i < n; i++) rn_rdv_anon_at(r, i)->readable = rc < 0 || pfd[i].revents != 0;
}

ncclResult_t rn_rdv_poll(struct rn_rdv *r, struct rn_rdv_conn *conn, int *ready) {
  int64_t now = rn_clock_ms();
  *ready = 0;
  rn_rdv_mark_readable(r);
  ncclResult_t res = rn_rdv_accept_some(r, now);
  /* Oldest first, keeping the order: sockets that came in this call were
   * read as they came. */
  int kept = 0;
  for (int i = 0; i < r->nanon; i++) {
    struct rn_rdv_socket s = *rn_rdv_anon_at(r, i);
    enum rn_rdv_stray why;
    int got = s.readable ? rn_rdv_read(r, &s, &why) : 0;
    s.readable = 0;
    if (got == 0 && now <= s.deadline) {
      *rn_rdv_anon_at(r, kept++) = s;
      continue;
    }
    if (got > 0)
      rn_rdv_admit(r, &s, now);
    else
      rn_rdv_socket_drop(r, &s, got < 0 ? why : RN_STRAY_SILENT, now);
  }
  r->nanon = kept;
  for (int i = 0; i < r->ngroups;) {
    struct rn_rdv_group *g = &r->group[i];
    if (g->have_ctrl && g->ndata == g->want) {
      if (res == ncclSuccess && !*ready) {
        *conn = g->conn;
        *ready = 1;
        r->group_fds -= g->nfds;
        *g = r->group[--r->ngroups];
        continue;
      }
    } else if (now > g->deadline) {
      rn_rdv_group_drop(r, i, RN_STRAY_TIMED_OUT, now);
      continue;
    }
    i++;
  }
  if (r->strays.window_start != 0 && now - r->strays.window_start >= RN_RDV_LOG_WINDOW_MS)
    rn_rdv_stray_summary(r, now);
  return res;
}

void rn_rdv_destroy(struct rn_rdv *r) {
  if (r == NULL) return;
  for (int i = 0; i < r->nanon; i++) close(rn_rdv_anon_at(r, i)->fd);
  for (int i = 0; i < r->ngroups; i++) rn_rdv_conn_close(&r->group[i].conn);
  rn_rdv_stray_summary(r, rn_clock_ms());
  free(r);
}

/* ---- dial (connecting side) ---- */

enum rn_dial_state { RN_DIAL_CONNECTING = 0, RN_DIAL_HELLO = 1, RN_DIAL_DONE = 2 };

struct rn_rdv_dial {
  int nfds; /* 1 + nstreams */
  int fd[1 + RN_RDV_MAX_STREAMS];
  enum rn_dial_state state[1 + RN_RDV_MAX_STREAMS];
  size_t off[1 + RN_RDV_MAX_STREAMS];
  struct rn_hello hello[1 + RN_RDV_MAX_STREAMS];
  union rn_sockaddr to[1 + RN_RDV_MAX_STREAMS]; /* for messages */
  int rail[1 + RN_RDV_MAX_STREAMS];             /* the index of the address it dials */
  int start_err[1 + RN_RDV_MAX_STREAMS]; /* connect() failed at once (fd -1), said at poll */
  int dropped; /* the listener reset a connected socket */
  int quiet;   /* a failed connect is the caller's to report */
  int failed_rail, failed_err;
};

int rn_rdv_dial_dropped(const struct rn_rdv_dial *d) { return d != NULL && d->dropped; }

void rn_rdv_dial_set_quiet(struct rn_rdv_dial *d) { d->quiet = 1; }

int rn_rdv_dial_failed(const struct rn_rdv_dial *d, int *err) {
  *err = d->failed_err;
  return d->failed_rail;
}

uint32_t rn_rdv_dial_pending(const struct rn_rdv_dial *d, uint32_t *up) {
  uint32_t pending = 0, seen = 0;
  for (int i = 0; i < d->nfds; i++) {
    if (d->fd[i] < 0) continue; /* left out */
    seen |= 1u << d->rail[i];
    if (d->state[i] == RN_DIAL_CONNECTING) pending |= 1u << d->rail[i];
  }
  *up = seen & ~pending;
  return pending;
}

ncclResult_t rn_rdv_dial_create(const union rn_sockaddr *addrs, int naddrs, uint64_t nonce,
                                int nstreams, struct rn_rdv_dial **out) {
  return rn_rdv_dial_create_from(addrs, naddrs, NULL, 0, nonce, nstreams, out);
}

ncclResult_t rn_rdv_dial_create_from(const union rn_sockaddr *addrs, int naddrs,
                                     const union rn_sockaddr *locals, int nlocals, uint64_t nonce,
                                     int nstreams, struct rn_rdv_dial **out) {
  return rn_rdv_dial_create_without(addrs, naddrs, locals, nlocals, nonce, nstreams, 0, out);
}

ncclResult_t rn_rdv_dial_create_without(const union rn_sockaddr *addrs, int naddrs,
                                        const union rn_sockaddr *locals, int nlocals,
                                        uint64_t nonce, int nstreams, uint32_t absent,
                                        struct rn_rdv_dial **out) {
  ncclResult_t res = ncclSuccess;
  if (naddrs < 1 || nstreams < 0 || nstreams > RN_RDV_MAX_STREAMS || nlocals < 0)
    return ncclInternalError;
  if (absent != 0 && (naddrs != nlocals || nlocals < 2 || nlocals > 16 /* the hello's bits */ ||
                      (absent >> nlocals) != 0 || absent == (1u << nlocals) - 1 ||
                      nstreams < nlocals))
    return ncclInternalError;
  struct rn_rdv_dial *d = calloc(1, sizeof(*d));
  if (d == NULL) {
    RN_WARN("out of memory allocating a connection");
    return ncclSystemError;
  }
  uint64_t conn_id = rn_rdv_random64();
  for (int i = 0; i <= nstreams; i++) d->fd[i] = -1;
  d->nfds = 1 + nstreams;
  /* The listener checks each socket's source address against the others'
   * from the same local address; that needs every socket bound (a local
   * of another family leaves the socket unbound). */
  uint32_t bound =
      nlocals > 0 ? (uint32_t)(nlocals < RN_RDV_MAX_SOURCES ? nlocals : RN_RDV_MAX_SOURCES) : 0;
  for (int i = 0; i < d->nfds && bound > 0; i++) {
    int rail = i == 0 ? 0 : i - 1;
    if (locals[rail % nlocals].sa.sa_family != addrs[rail % naddrs].sa.sa_family) bound = 0;
  }
  if (absent != 0 && bound != (uint32_t)nlocals) {
    rn_rdv_dial_destroy(d);
    return ncclInternalError;
  }
  d->failed_rail = -1;
  for (int i = 0; i < d->nfds; i++) {
    struct rn_hello *h = &d->hello[i];
    h->magic = RN_HELLO_MAGIC;
    h->version = RN_HELLO_VERSION;
    h->role = i == 0 ? RN_ROLE_CTRL : RN_ROLE_DATA;
    h->index = (uint8_t)(i == 0 ? 0 : i - 1);
    h->nonce = nonce;
    h->conn_id = conn_id;
    h->nstreams = (uint32_t)nstreams;
    h->nlocals = (uint16_t)bound;
    h->absent = (uint16_t)absent;
    /* The control connection goes to the lead rail, the first not left
     * out; stream k to rail k mod n. */
    int rail = i == 0 ? (absent ? __builtin_ctz(~absent) : 0) : (i - 1) % naddrs;
    d->rail[i] = rail;
    d->to[i] = addrs[rail];
    if (i > 0 && ((absent >> rail) & 1u)) {
      d->state[i] = RN_DIAL_DONE; /* not dialed: fd -1 */
      continue;
    }
    const union rn_sockaddr *l = nlocals > 0 ? &locals[(i == 0 ? rail : i - 1) % nlocals] : NULL;
    res = rn_sock_connect_start_quiet(&addrs[rail], l, &d->fd[i], &d->start_err[i]);
    if (res == ncclRemoteError) { /* no route, say: the poll reports it, as any failed connect */
      d->fd[i] = -1;
      res = ncclSuccess;
    }
    if (res != ncclSuccess) goto out_free;
  }
  *out = d;
  return ncclSuccess;
out_free:
  rn_rdv_dial_destroy(d);
  return res;
}

ncclResult_t rn_rdv_dial_poll(struct rn_rdv_dial *d, struct rn_rdv_conn *conn, int *ready) {
  int done = 0;
  *ready = 0;
  for (int i = 0; i < d->nfds; i++) {
    if (d->state[i] == RN_DIAL_CONNECTING) {
      int err = d->start_err[i];
      int rc = err != 0 ? -1 : rn_sock_connect_status(d->fd[i], &err);
      if (rc == -1 && err == ECONNRESET) {
        d->dropped = 1; /* the listener reset it: not warned yet */
        return ncclRemoteError;
      }
      if (rc < 0) {
        d->failed_rail = d->rail[i];
        d->failed_err = err;
        if (d->quiet) return ncclRemoteError;
        char a[64];
        if (rc == -2)
          RN_WARN("connect to %s reached itself: nothing listens there any more",
                  rn_sockaddr_str(&d->to[i], a, sizeof(a)));
        else
          RN_WARN("connect to %s failed: %s%s", rn_sockaddr_str(&d->to[i], a, sizeof(a)),
                  strerror(err), rn_sock_connect_hint(err));
        return ncclRemoteError;
      }
      if (rc == 1) d->state[i] = RN_DIAL_HELLO;
    }
    if (d->state[i] == RN_DIAL_HELLO) {
      ncclResult_t res = rn_sock_send_some(d->fd[i], &d->hello[i], sizeof(d->hello[i]), &d->off[i]);
      if (res == ncclRemoteError) {
        d->dropped = 1;
        return res;
      }
      if (res != ncclSuccess) {
        char a[64];
        RN_WARN("sending the hello of a connection to %s: %s",
                rn_sockaddr_str(&d->to[i], a, sizeof(a)), strerror(errno));
        return res;
      }
      if (d->off[i] == sizeof(d->hello[i])) d->state[i] = RN_DIAL_DONE;
    }
    done += d->state[i] == RN_DIAL_DONE;
  }
  if (done < d->nfds) return ncclSuccess;
  memset(conn, 0, sizeof(*conn));
  conn->ctrl_fd = d->fd[0];
  conn->nstreams = d->nfds - 1;
  conn->nrails = (int)d->hello[0].nlocals;
  for (int i = 0; i < RN_RDV_MAX_STREAMS; i++)
    conn->data_fd[i] = i < d->nfds - 1 ? d->fd[i + 1] : -1;
  for (int i = 0; i < d->nfds; i++) d->fd[i] = -1; /* ownership moves to the caller */
  *ready = 1;
  return ncclSuccess;
}

void rn_rdv_dial_destroy(struct rn_rdv_dial *d) {
  if (d == NULL) return;
  for (int i = 0; i < d->nfds; i++)
    if (d->fd[i] >= 0) close(d->fd[i]);
  free(d);
}
