/* Connection reuse: the sockets of a comm that closed with nothing in
 * flight are kept, and the next comm between the same two processes over
 * the same addresses takes them instead of dialing (PROTOCOL.md, Reuse).
 *
 * A side that closes its comm quiescent sends BYE (its message count, and
 * how many of the peer's messages it read) and keeps the connection.  Once
 * a side holds both BYEs, the connection is reusable when the receiver had
 * read every message the sender sent; both sides decide alike from the
 * same two BYEs.  A connector takes a reusable connection to the handle's
 * process (the token the listener put in the handle) over the same
 * addresses and traffic class, sends a REUSE hello with the new handle's
 * nonce and awaits the accept byte, as after a dial.  The accepting
 * process reads that hello in whichever of its listeners accepts next,
 * and the listener of that nonce takes the connection.  Anything else on a
 * kept connection (EOF, an error, bytes out of turn, a header that fails
 * its checks) closes it, and so its peer's copy.
 *
 * One lock; entries are few (RAILNET_SOCKET_POOL) and touched only at
 * connect, accept and close, never on the data path.  A forked child
 * closes its copies of the kept sockets at once (pthread_atfork): a copy
 * left open would keep a connection the parent closes alive for its peer,
 * which could then ask an unread socket for reuse.  The child draws a
 * token of its own. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include "railnet/clock.h"
#include "railnet/param.h"
#include "tcp.h"

#define RN_TCP_POOL_IN 256 /* the largest header a kept connection reads (CTS: 128) */

enum rn_tcp_pool_state {
  RN_TCP_POOL_WAIT_BYE = 0, /* the peer's BYE not read yet */
  RN_TCP_POOL_READY,        /* both BYEs, and they agree: reusable */
  RN_TCP_POOL_CLAIMED,      /* accepting side: a REUSE hello read, awaiting its listener */
};

struct rn_tcp_pooled {
  struct rn_tcp_pooled *next;
  int recv; /* the accepting side, whose comm received */
  int state;
  int tc;                       /* connecting side: the traffic class on its sockets, -1 none */
  uint32_t token;               /* connecting side: the peer process */
  int64_t since_ms;             /* kept since; CLAIMED: claimed since */
  uint32_t my_msg, my_received; /* this side's BYE */
  uint64_t nonce;               /* CLAIMED: the comm it is for */
  struct rn_rdv_conn conn;
  char name[64];                           /* the peer, for messages */
  union rn_sockaddr ctrl_local, ctrl_peer; /* the connection's, for matching and the next comm */
  uint8_t in[RN_TCP_POOL_IN];              /* a header or hello being read */
  size_t in_len;
};

static pthread_mutex_t rn_tcp_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t rn_tcp_pool_once = PTHREAD_ONCE_INIT;
static struct {
  uint32_t token;             /* this process's, 0 until drawn */
  int epfd;                   /* every entry's control socket, for readability; -1 none */
  int n;                      /* entries */
  int closed;                 /* between fini and the next init: nothing is kept */
  struct rn_tcp_pooled *head; /* newest first */
} rn_tcp_pool = {.epfd = -1};

/* Close a kept connection as a comm's close does (rn_sock_close_gently):
 * a sender's comm is kept the moment its last sends completed, which may
 * leave them in the socket yet, and a close over the peer's unread BYE or
 * clear-to-sends would reset the connection and lose them. */
static void rn_tcp_pool_close_fds(struct rn_tcp_pooled *e) {
  rn_sock_close_gently(e->conn.ctrl_fd, RN_TCP_CLOSE_WAIT_MS);
  e->conn.ctrl_fd = -1;
  rn_rdv_conn_close(&e->conn);
}

/* Kept listening sockets, oldest first (under the pool's lock). */
static struct {
  int n;
  struct {
    int fd;
    union rn_sockaddr bound;
    int comms; /* its port has served */
    int64_t since_ms;
  } e[RN_TCP_POOL_LISTENERS];
} rn_tcp_lis;

/* Lock held: take the kept listener at index i off the list. */
static void rn_tcp_lis_remove(int i) {
  memmove(&rn_tcp_lis.e[i], &rn_tcp_lis.e[i + 1],
          sizeof(rn_tcp_lis.e[0]) * (size_t)(rn_tcp_lis.n - i - 1));
  rn_tcp_lis.n--;
}

/* Lock held: close the kept listener at index i. */
static void rn_tcp_lis_drop(int i) {
  close(rn_tcp_lis.e[i].fd);
  rn_tcp_lis_remove(i);
}

/* Lock held: close the kept listeners past RAILNET_SOCKET_POOL_IDLE_MS. */
static void rn_tcp_lis_expire(int64_t now) {
  while (rn_tcp_lis.n > 0 && now - rn_tcp_lis.e[0].since_ms > rn_params()->socket_pool_idle_ms)
    rn_tcp_lis_drop(0);
}

/* fork(): the lock is held across it, so the child finds the list whole.
 * The child closes its copies of the kept sockets (the parent's live on)
 * and of the epoll set, which it shares with the parent and so must not
 * change, and starts afresh with a token of its own. */
static void rn_tcp_pool_prepare(void) { pthread_mutex_lock(&rn_tcp_pool_lock); }

static void rn_tcp_pool_parent(void) { pthread_mutex_unlock(&rn_tcp_pool_lock); }

static void rn_tcp_pool_child(void) {
  for (struct rn_tcp_pooled *e = rn_tcp_pool.head, *next; e != NULL; e = next) {
    next = e->next;
    /* Its descriptors only: a shutdown, or reading what arrives, would
     * act on the socket the parent keeps. */
    rn_rdv_conn_close(&e->conn);
    free(e);
  }
  if (rn_tcp_pool.epfd >= 0) close(rn_tcp_pool.epfd);
  for (int i = 0; i < rn_tcp_lis.n; i++) close(rn_tcp_lis.e[i].fd);
  rn_tcp_lis.n = 0;
  rn_tcp_pool.head = NULL;
  rn_tcp_pool.n = 0;
  rn_tcp_pool.epfd = -1;
  rn_tcp_pool.token = 0;
  pthread_mutex_unlock(&rn_tcp_pool_lock);
}

static void rn_tcp_pool_register(void) {
  /* glibc drops a library's handlers when it is unloaded (dlclose). */
  if (pthread_atfork(rn_tcp_pool_prepare, rn_tcp_pool_parent, rn_tcp_pool_child) != 0)
    RN_WARN("connection reuse: pthread_atfork failed; a forked child keeps copies of kept sockets");
}

/* Lock held: take e off the list and out of the epoll set (its sockets
 * stay open). */
static void rn_tcp_pool_unlink(struct rn_tcp_pooled *e) {
  for (struct rn_tcp_pooled **pp = &rn_tcp_pool.head; *pp != NULL; pp = &(*pp)->next) {
    if (*pp != e) continue;
    *pp = e->next;
    rn_tcp_pool.n--;
    break;
  }
  if (rn_tcp_pool.epfd >= 0) epoll_ctl(rn_tcp_pool.epfd, EPOLL_CTL_DEL, e->conn.ctrl_fd, NULL);
}

/* Lock held: close a kept connection, saying why (its peer sees EOF and
 * drops its own copy). */
static void rn_tcp_pool_drop(struct rn_tcp_pooled *e, const char *why) {
  RN_INFO(NCCL_NET, "kept connection %s %s closed: %s", e->recv ? "from" : "to", e->name, why);
  rn_tcp_pool_unlink(e);
  rn_tcp_pool_close_fds(e);
  free(e);
}

/* The draw happens outside the pool's lock: the random generator's fork
 * handler takes its own lock before the pool's (handlers registered later
 * run first), so taking it under the pool's could deadlock against a
 * fork in another thread. */
uint32_t rn_tcp_pool_token(void) {
  if (rn_params()->socket_pool == 0) return 0;
  for (;;) {
    pthread_mutex_lock(&rn_tcp_pool_lock);
    uint32_t t = rn_tcp_pool.token;
    pthread_mutex_unlock(&rn_tcp_pool_lock);
    if (t != 0) return t;
    uint32_t draw = (uint32_t)rn_rdv_random64();
    pthread_mutex_lock(&rn_tcp_pool_lock);
    if (rn_tcp_pool.token == 0) rn_tcp_pool.token = draw;
    pthread_mutex_unlock(&rn_tcp_pool_lock);
  }
}

/* Read what the socket has, up to what e->in holds (a kept connection
 * carries a few headers at most, and nothing past its BYE or a reuse
 * hello is ever allowed, so reading ahead takes nothing that belongs to
 * another).  1 bytes were added; 0 none are there now, or (*drained)
 * the last read came back short, so the socket had no more and epoll
 * will say when it does; -1 at EOF, an error, or a full buffer (why set). */
static int rn_tcp_pool_fill(struct rn_tcp_pooled *e, int *drained, const char **why) {
  if (*drained) return 0;
  for (;;) {
    size_t room = sizeof(e->in) - e->in_len;
    if (room == 0) {
      *why = "a header is longer than any it may carry";
      return -1;
    }
    ssize_t k = recv(e->conn.ctrl_fd, e->in + e->in_len, room, MSG_DONTWAIT);
    if (k > 0) {
      e->in_len += (size_t)k;
      *drained = (size_t)k < room;
      return 1;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    *why = k == 0 ? "the peer closed it" : "a socket error";
    return -1;
  }
}

/* Drop the first n bytes of e->in. */
static void rn_tcp_pool_consume(struct rn_tcp_pooled *e, size_t n) {
  memmove(e->in, e->in + n, e->in_len - n);
  e->in_len -= n;
}

/* The peer's BYE: reusable when the receiver read every message the
 * sender sent (both sides compute this from the same two BYEs). */
static int rn_tcp_pool_on_bye(struct rn_tcp_pooled *e, uint32_t peer_msg, uint32_t peer_received,
                              const char **why) {
  int agree = e->recv ? peer_msg == e->my_received : peer_received == e->my_msg;
  if (!agree) {
    *why = "messages were left unread when the comms closed";
    return -1;
  }
  e->state = RN_TCP_POOL_READY;
  e->since_ms = rn_clock_ms();
  return 0;
}

/* Lock held: read what arrived on a kept connection.  0 keep it, -1 close
 * it (why set). */
static int rn_tcp_pool_step(struct rn_tcp_pooled *e, const char **why) {
  int drained = 0;
  for (;;) {
    if (e->state == RN_TCP_POOL_CLAIMED || (e->state == RN_TCP_POOL_READY && !e->recv)) {
      /* Nothing may arrive now: the peer awaits the accept byte, or (a
       * connector's ready entry) has nothing to say until it is reused. */
      if (e->in_len != 0) {
        *why = "bytes arrived out of turn";
        return -1;
      }
      char b;
      if (drained) return 0;
      ssize_t k = recv(e->conn.ctrl_fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
      *why = k == 0 ? "the peer closed it" : k > 0 ? "bytes arrived out of turn" : "a socket error";
      return -1;
    }
    if (e->state == RN_TCP_POOL_READY) { /* accepting side: a REUSE hello */
      if (e->in_len < sizeof(struct rn_hello)) {
        int r = rn_tcp_pool_fill(e, &drained, why);
        if (r <= 0) return r;
        continue;
      }
      struct rn_hello h;
      memcpy(&h, e->in, sizeof(h));
      rn_tcp_pool_consume(e, sizeof(h));
      if (h.magic != RN_HELLO_MAGIC || h.version != RN_WIRE_VERSION || h.role != RN_ROLE_REUSE ||
          h.index != 0 || h.nstreams != (uint32_t)e->conn.nstreams || h.nlocals != 0) {
        *why = "its reuse hello is malformed";
        return -1;
      }
      e->state = RN_TCP_POOL_CLAIMED;
      e->nonce = h.nonce;
      e->since_ms = rn_clock_ms();
      continue;
    }
    /* WAIT_BYE: the peer's last messages, then its BYE. */
    if (e->in_len < sizeof(struct rn_tcp_prefix)) {
      int r = rn_tcp_pool_fill(e, &drained, why);
      if (r <= 0) return r;
      continue;
    }
    struct rn_tcp_prefix p;
    memcpy(&p, e->in, sizeof(p));
    size_t hlen = rn_tcp_wire_hlen(p.type);
    /* Before its BYE a receiver may still send what answers the sends
     * (clear-to-sends, acknowledgements, offers, where the streams
     * open); a sender nothing. */
    int allowed = p.type == RN_TCP_MSG_BYE ||
                  (!e->recv && (p.type == RN_TCP_MSG_CTS || p.type == RN_TCP_MSG_ACK ||
                                p.type == RN_TCP_MSG_OFFER || p.type == RN_TCP_MSG_STREAMS));
    if (!allowed || p.hlen != hlen || hlen > sizeof(e->in) || p.plen != 0) {
      *why = "a message arrived after the comm closed";
      return -1;
    }
    if (e->in_len < hlen) {
      int r = rn_tcp_pool_fill(e, &drained, why);
      if (r <= 0) return r;
      continue;
    }
    if (!rn_tcp_wire_crc_ok(e->in, hlen)) {
      *why = "a header failed its checksum";
      return -1;
    }
    struct rn_tcp_bye b;
    if (p.type == RN_TCP_MSG_BYE) memcpy(&b, e->in, sizeof(b));
    rn_tcp_pool_consume(e, hlen);
    if (p.type != RN_TCP_MSG_BYE) continue;
    if (!rn_tcp_bye_shape_ok(&b)) {
      *why = "its BYE sets a flag or a reserved field";
      return -1;
    }
    if (rn_tcp_pool_on_bye(e, b.msg, b.received, why) != 0) return -1;
  }
}

/* Lock held: read every kept connection with something to read, and close
 * those past their time: a connector's after RAILNET_SOCKET_POOL_IDLE_MS,
 * an acceptor's after twice that (so a connector rarely reuses one its
 * peer just closed), a claimed one not accepted within the connect
 * timeout. */
static void rn_tcp_pool_service(void) {
  if (rn_tcp_pool.epfd < 0) return;
  struct epoll_event ev[32];
  int n;
  do {
    n = epoll_wait(rn_tcp_pool.epfd, ev, 32, 0);
    for (int i = 0; i < n; i++) {
      struct rn_tcp_pooled *e = ev[i].data.ptr;
      const char *why = NULL;
      if (rn_tcp_pool_step(e, &why) != 0) rn_tcp_pool_drop(e, why);
    }
  } while (n == 32);
  const struct rn_params *p = rn_params();
  const int64_t now = rn_clock_ms();
  for (struct rn_tcp_pooled *e = rn_tcp_pool.head, *next; e != NULL; e = next) {
    next = e->next;
    int64_t age = now - e->since_ms;
    if (e->state == RN_TCP_POOL_CLAIMED ? age > p->connect_timeout_ms
                                        : age > p->socket_pool_idle_ms * (e->recv ? 2 : 1))
      rn_tcp_pool_drop(e, e->state == RN_TCP_POOL_CLAIMED ? "no listener took it"
                                                          : "idle for RAILNET_SOCKET_POOL_IDLE_MS");
  }
}

/* Why the comm cannot be kept, or NULL when nothing is in flight either
 * way and it never failed over. */
static const char *rn_tcp_pool_busy(struct rn_tcp_comm *c) {
  if (atomic_load(&c->error) != ncclSuccess) return "the comm failed";
  if ((atomic_load(&c->peer_closed) && !c->peer_bye) || c->ctl_wlost)
    return "the peer closed its sockets";
  if (c->move.epoch != 0 || c->move.state != RN_TCP_CTL_UP) return "its control connection moved";
  for (int i = 0; i < c->nrails; i++)
    if (atomic_load(&c->rail[i].failures) != 0 || atomic_load(&c->rail[i].state) != RN_TCP_RAIL_UP)
      return "a rail failed";
  if (c->nbacklog != 0 || c->down_pending != 0) return "chunks wait for a rail";
  for (int i = 0; i < RN_TCP_NREQS && atomic_load(&c->reqs[i].gen) != 0; i++)
    if (c->reqs[i].state == RN_TCP_REQ_ACTIVE) return "requests are still active";
  if (c->rx_left != 0 || c->rx_unexpected != NULL) return "a message is half read";
  if (c->nheld != 0) return "eager messages were never received";
  if (c->in_len > RN_TCP_POOL_IN || (c->peer_bye && c->in_len != 0))
    return "control input is unread";
  if (c->is_recv && atomic_load(&c->stream_work) != 0) return "streamed messages are arriving";
  /* Only the control connection is kept: the data streams close (the
   * next comm opens its own when it needs them), so what they still hold
   * matters only if it is half of a chunk, and streams still opening
   * not at all (a kept sender drops the late STREAMS). */
  for (int i = 0; i < c->nstreams; i++) {
    struct rn_tcp_stream *s = &c->stream[i];
    if (s->lost || atomic_load(&s->retire)) return "a data stream failed";
    if (s->off != 0 || s->rx_req != NULL || s->rx_discard) return "a chunk is half moved";
    if (!c->is_recv && s->queue_head != s->queue_tail) return "chunks are still queued";
  }
  return NULL;
}

/* Lock held: keep e, evicting the oldest entry when full. */
static void rn_tcp_pool_add(struct rn_tcp_pooled *e) {
  if (rn_tcp_pool.epfd < 0) rn_tcp_pool.epfd = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = e};
  if (rn_tcp_pool.epfd < 0 || epoll_ctl(rn_tcp_pool.epfd, EPOLL_CTL_ADD, e->conn.ctrl_fd, &ev)) {
    RN_INFO(NCCL_NET, "kept connection to %s closed: epoll: %s", e->name, strerror(errno));
    rn_tcp_pool_close_fds(e);
    free(e);
    return;
  }
  while (rn_tcp_pool.n >= rn_params()->socket_pool && rn_tcp_pool.head != NULL) {
    struct rn_tcp_pooled *old = rn_tcp_pool.head;
    while (old->next != NULL) old = old->next;
    rn_tcp_pool_drop(old, "the pool is full (RAILNET_SOCKET_POOL)");
  }
  e->next = rn_tcp_pool.head;
  rn_tcp_pool.head = e;
  rn_tcp_pool.n++;
}

int rn_tcp_pool_put(struct rn_tcp_comm *c) {
  if (rn_params()->socket_pool == 0 || (!c->is_recv && c->pool_token == 0)) return 0;
  const char *side = c->is_recv ? "receive" : "send";
  const char *busy = rn_tcp_pool_busy(c);
  if (busy == NULL && atomic_load(&c->peer_closed)) busy = "the peer closed its sockets";
  struct rn_tcp_pooled *e = busy == NULL ? calloc(1, sizeof(*e)) : NULL;
  if (busy == NULL && e == NULL) busy = "out of memory";
  /* BYE leaves behind whatever waits in the output queue (a batch of
   * small receives' clear-to-sends, acknowledgements), in one write with
   * it, and the connection is kept only once all of it went out: a peer
   * that read part of it then sees EOF, as from any comm that closed
   * mid-message.  Nothing else is queued, so the socket has room for it
   * but under memory pressure. */
  struct rn_tcp_bye b = {.msg = c->msg_out, .received = c->msg_in};
  rn_tcp_wire_seal(&b, RN_TCP_MSG_BYE, 0, 0);
  if (busy == NULL && !rn_tcp_ctl_queue(c, &b, sizeof(b), NULL, 0, NULL))
    busy = "control output is full";
  if (busy == NULL) {
    c->lazy_polls = RN_TCP_CTS_POLLS;
    if (rn_tcp_ctl_flush(c) != ncclSuccess)
      busy = "the comm failed";
    else if (c->out_head != c->out_tail)
      busy = "the control connection takes no more bytes";
  }
  if (busy != NULL) {
    RN_INFO(NCCL_NET, "%s comm with %s: connection not kept for reuse: %s", side, c->peer, busy);
    free(e);
    return 0;
  }
  e->recv = c->is_recv;
  e->tc = c->tc;
  e->token = c->pool_token;
  e->since_ms = rn_clock_ms();
  e->my_msg = b.msg;
  e->my_received = b.received;
  snprintf(e->name, sizeof(e->name), "%s", c->peer);
  e->conn.ctrl_fd = c->ctrl_fd;
  e->conn.nstreams = 0;
  for (int i = 0; i < RN_RDV_MAX_STREAMS; i++) e->conn.data_fd[i] = -1;
  /* As connected: a comm whose control connection moved is never kept
   * (rn_tcp_pool_busy). */
  e->ctrl_local = c->ctrl_local;
  e->ctrl_peer = c->ctrl_peer;
  c->ctrl_fd = -1;
  /* Bytes of a message the comm had begun to read (a sender's late
   * clear-to-send) continue here. */
  memcpy(e->in, c->in, c->in_len);
  e->in_len = c->in_len;
  const char *why = NULL;
  if (c->peer_bye && rn_tcp_pool_on_bye(e, c->bye_msg, c->bye_received, &why) != 0) {
    RN_INFO(NCCL_NET, "%s comm with %s: connection not kept for reuse: %s", side, c->peer, why);
    rn_tcp_pool_close_fds(e);
    free(e);
    return 1; /* its sockets are closed: nothing left for the caller */
  }
  pthread_mutex_lock(&rn_tcp_pool_lock);
  if (rn_tcp_pool.closed) {
    pthread_mutex_unlock(&rn_tcp_pool_lock);
    rn_tcp_pool_close_fds(e);
    free(e);
    return 1;
  }
  RN_INFO(NCCL_NET, "%s comm with %s: control connection kept for reuse", side, c->peer);
  rn_tcp_pool_add(e);
  /* What already arrived (this and other entries' BYEs) is read now, at a
   * close, rather than at the next connect or accept, which waits on it. */
  rn_tcp_pool_service();
  pthread_mutex_unlock(&rn_tcp_pool_lock);
  return 1;
}

/* A connector's entry serves a dial whose control connection goes to
 * addrs[0] from locals[0] (rn_rdv_dial_create_from). */
static int rn_tcp_pool_matches(const struct rn_tcp_pooled *e, const union rn_sockaddr *addrs,
                               int naddrs, const union rn_sockaddr *locals, int nlocals) {
  return naddrs >= 1 && rn_sockaddr_same_host(&e->ctrl_peer, &addrs[0]) &&
         (nlocals < 1 || rn_sockaddr_same_host(&e->ctrl_local, &locals[0]));
}

/* What the next comm learns of its connection's addresses (a kept
 * connection has no data streams). */
static void rn_tcp_pool_addrs(const struct rn_tcp_pooled *e, struct rn_tcp_addrs *addr) {
  memset(addr, 0, sizeof(*addr));
  addr->ctrl_local = e->ctrl_local;
  addr->ctrl_peer = e->ctrl_peer;
}

/* The reuse hellos' connection ids: the accepting side has no use for
 * them (the connection is whole), so a count does, without a system call. */
static _Atomic uint64_t rn_tcp_pool_hellos;

int rn_tcp_pool_take_dial(uint32_t token, const union rn_sockaddr *addrs, int naddrs,
                          const union rn_sockaddr *locals, int nlocals, int tc, uint64_t nonce,
                          struct rn_rdv_conn *conn, struct rn_tcp_addrs *addr) {
  if (token == 0 || rn_params()->socket_pool == 0) return 0;
  struct rn_tcp_pooled *e;
  pthread_mutex_lock(&rn_tcp_pool_lock);
  rn_tcp_pool_service();
  for (e = rn_tcp_pool.head; e != NULL; e = e->next)
    if (!e->recv && e->state == RN_TCP_POOL_READY && e->token == token && e->tc == tc &&
        rn_tcp_pool_matches(e, addrs, naddrs, locals, nlocals))
      break;
  if (e != NULL) rn_tcp_pool_unlink(e);
  pthread_mutex_unlock(&rn_tcp_pool_lock);
  if (e == NULL) return 0;
  struct rn_hello h = {.magic = RN_HELLO_MAGIC,
                       .version = RN_WIRE_VERSION,
                       .role = RN_ROLE_REUSE,
                       .nonce = nonce,
                       .conn_id = atomic_fetch_add(&rn_tcp_pool_hellos, 1)}; /* unused */
  if (send(e->conn.ctrl_fd, &h, sizeof(h), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(h)) {
    RN_INFO(NCCL_NET, "kept connection to %s closed: its reuse hello did not go out: %s", e->name,
            strerror(errno));
    rn_tcp_pool_close_fds(e);
    free(e);
    return 0;
  }
  *conn = e->conn;
  rn_tcp_pool_addrs(e, addr);
  free(e);
  return 1;
}

int rn_tcp_pool_take_accept(uint64_t nonce, const union rn_sockaddr *lis, int nlis,
                            struct rn_rdv_conn *conn, struct rn_tcp_addrs *addr) {
  if (rn_params()->socket_pool == 0) return 0;
  struct rn_tcp_pooled *e;
  pthread_mutex_lock(&rn_tcp_pool_lock);
  rn_tcp_pool_service();
  for (e = rn_tcp_pool.head; e != NULL; e = e->next)
    if (e->recv && e->state == RN_TCP_POOL_CLAIMED && e->nonce == nonce) break;
  if (e != NULL) {
    /* The nonce is this listener's: its socket must be on its addresses. */
    int ok = 0;
    for (int j = 0; j < nlis; j++) ok |= rn_sockaddr_same_host(&e->ctrl_local, &lis[j]);
    if (!ok) {
      RN_WARN("%s asked to reuse a connection on addresses this listener does not serve; closed",
              e->name);
      rn_tcp_pool_drop(e, "it is on other addresses than its listener's");
      e = NULL;
    } else {
      rn_tcp_pool_unlink(e);
    }
  }
  pthread_mutex_unlock(&rn_tcp_pool_lock);
  if (e == NULL) return 0;
  *conn = e->conn;
  rn_tcp_pool_addrs(e, addr);
  free(e);
  return 1;
}

/* Connections a closed listener's backlog is reset of per call: as many
 * as a rendezvous poll accepts (plugin/rendezvous.c), so a peer that keeps
 * connecting cannot hold the caller (and the pool's lock) for as long as
 * it goes on. */
#define RN_TCP_LIS_RESET_BUDGET 256

/* Reset the connections waiting in a closed listener's backlog, as
 * close(2) of the listener would: 0 once it is empty, -1 when fd is not a
 * sound listener or more than RN_TCP_LIS_RESET_BUDGET were waiting (a
 * flood: the listener is better closed, which resets the rest). */
static int rn_tcp_lis_reset_backlog(int fd, const union rn_sockaddr *bound) {
  for (int n = 0; n < RN_TCP_LIS_RESET_BUDGET;) {
    int s = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
    if (s >= 0) {
      struct linger l = {.l_onoff = 1, .l_linger = 0};
      setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      close(s);
      n++;
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
  }
  char a[64];
  RN_INFO(NCCL_NET,
          "closed listen comm's socket on %s not kept: more than %d connections reached it "
          "since it closed",
          rn_sockaddr_str(bound, a, sizeof(a)), RN_TCP_LIS_RESET_BUDGET);
  return -1;
}

void rn_tcp_pool_sweep(void) {
  if (pthread_mutex_trylock(&rn_tcp_pool_lock) != 0) return;
  rn_tcp_lis_expire(rn_clock_ms());
  for (int i = rn_tcp_lis.n - 1; i >= 0; i--)
    if (rn_tcp_lis_reset_backlog(rn_tcp_lis.e[i].fd, &rn_tcp_lis.e[i].bound) != 0)
      rn_tcp_lis_drop(i);
  rn_tcp_pool_service();
  pthread_mutex_unlock(&rn_tcp_pool_lock);
}

int rn_tcp_pool_put_listener(int fd, const union rn_sockaddr *bound, int comms) {
  if (rn_params()->socket_pool == 0 || comms >= RN_TCP_POOL_PORT_COMMS) return 0;
  /* Connections that reached the closed listener and were never taken. */
  if (rn_tcp_lis_reset_backlog(fd, bound) != 0) return 0; /* closed by the caller */
  pthread_mutex_lock(&rn_tcp_pool_lock);
  int kept = !rn_tcp_pool.closed;
  if (kept) {
    const int64_t now = rn_clock_ms();
    rn_tcp_lis_expire(now);
    const int most = rn_params()->socket_pool < RN_TCP_POOL_LISTENERS ? rn_params()->socket_pool
                                                                      : RN_TCP_POOL_LISTENERS;
    while (rn_tcp_lis.n >= most) rn_tcp_lis_drop(0);
    rn_tcp_lis.e[rn_tcp_lis.n].fd = fd;
    rn_tcp_lis.e[rn_tcp_lis.n].bound = *bound;
    rn_tcp_lis.e[rn_tcp_lis.n].comms = comms;
    rn_tcp_lis.e[rn_tcp_lis.n].since_ms = now;
    rn_tcp_lis.n++;
  }
  pthread_mutex_unlock(&rn_tcp_pool_lock);
  return kept;
}

int rn_tcp_pool_take_listener(const union rn_sockaddr *addr, int *fd, union rn_sockaddr *bound,
                              int *comms) {
  if (rn_params()->socket_pool == 0) return 0;
  const int port = rn_sockaddr_port(addr);
  int got = 0;
  pthread_mutex_lock(&rn_tcp_pool_lock);
  rn_tcp_lis_expire(rn_clock_ms());
  for (int i = rn_tcp_lis.n - 1; i >= 0 && !got; i--) {
    if (!rn_sockaddr_same_host(&rn_tcp_lis.e[i].bound, addr)) continue;
    if (port != 0 && rn_sockaddr_port(&rn_tcp_lis.e[i].bound) != port) continue;
    *fd = rn_tcp_lis.e[i].fd;
    *bound = rn_tcp_lis.e[i].bound;
    *comms = rn_tcp_lis.e[i].comms;
    rn_tcp_lis_remove(i);
    got = 1;
  }
  pthread_mutex_unlock(&rn_tcp_pool_lock);
  return got;
}

ncclResult_t rn_tcp_pool_listen(const union rn_sockaddr *addr, int *fd, union rn_sockaddr *bound,
                                int *comms) {
  if (rn_tcp_pool_take_listener(addr, fd, bound, comms)) {
    ++*comms;
    return ncclSuccess;
  }
  *comms = 1;
  return rn_sock_listen(addr, fd, bound);
}

void rn_tcp_pool_fini(void) {
  pthread_mutex_lock(&rn_tcp_pool_lock);
  rn_tcp_pool.closed = 1;
  while (rn_tcp_lis.n > 0) rn_tcp_lis_drop(0);
  /* All at once: one wait for what their sockets still hold (one by one
   * without memory for the list). */
  int *fds = malloc(((size_t)rn_tcp_pool.n + 1) * sizeof(*fds)), n = 0;
  for (struct rn_tcp_pooled *e; (e = rn_tcp_pool.head) != NULL;) {
    if (fds == NULL) {
      rn_tcp_pool_drop(e, "finalize");
      continue;
    }
    RN_INFO(NCCL_NET, "kept connection %s %s closed: finalize", e->recv ? "from" : "to", e->name);
    rn_tcp_pool_unlink(e);
    fds[n++] = e->conn.ctrl_fd; /* closed below, with the others */
    e->conn.ctrl_fd = -1;
    rn_rdv_conn_close(&e->conn);
    free(e);
  }
  if (fds != NULL) rn_sock_close_gently_n(fds, n, RN_TCP_CLOSE_WAIT_MS);
  free(fds);
  if (rn_tcp_pool.epfd >= 0) close(rn_tcp_pool.epfd);
  rn_tcp_pool.epfd = -1;
  pthread_mutex_unlock(&rn_tcp_pool_lock);
}

void rn_tcp_pool_start(void) {
  pthread_once(&rn_tcp_pool_once, rn_tcp_pool_register);
  pthread_mutex_lock(&rn_tcp_pool_lock);
  rn_tcp_pool.closed = 0;
  pthread_mutex_unlock(&rn_tcp_pool_lock);
}
