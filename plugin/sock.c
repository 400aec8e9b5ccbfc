/* Non-blocking socket plumbing for connection setup, shared by every
 * transport: addresses, listen/connect, partial I/O, and the nonce-checked
 * rendezvous.  Nothing here ever blocks. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/param.h"
#include "railnet/sock.h"
#include "railnet/transport.h"

#define RN_HELLO_VERSION RN_WIRE_VERSION
#define RN_RDV_MAX_PENDING 256
#define RN_RDV_MAX_GROUPS 64

uint64_t rn_random64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
    /* getrandom cannot fail for 8 bytes once the pool is ready; keep a
     * non-constant fallback anyway. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 16);
  }
  return v;
}

static int64_t rn_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rn_sockaddr_to_wire(const union rn_sockaddr *sa, struct rn_wire_addr *w) {
  memset(w, 0, sizeof(*w));
  if (sa->sa.sa_family == AF_INET6) {
    w->family = 6;
    w->port = sa->in6.sin6_port;
    memcpy(w->addr, &sa->in6.sin6_addr, 16);
  } else {
    w->family = 4;
    w->port = sa->in.sin_port;
    memcpy(w->addr, &sa->in.sin_addr, 4);
  }
}

int rn_sockaddr_from_wire(const struct rn_wire_addr *w, union rn_sockaddr *sa) {
  memset(sa, 0, sizeof(*sa));
  if (w->port == 0) return -1;
  if (w->family == 4) {
    sa->in.sin_family = AF_INET;
    sa->in.sin_port = w->port;
    memcpy(&sa->in.sin_addr, w->addr, 4);
    return 0;
  }
  if (w->family == 6) {
    sa->in6.sin6_family = AF_INET6;
    sa->in6.sin6_port = w->port;
    memcpy(&sa->in6.sin6_addr, w->addr, 16);
    return 0;
  }
  return -1;
}

const char *rn_sockaddr_str(const union rn_sockaddr *sa, char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (sa->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &sa->in6.sin6_addr, host, sizeof(host));
    snprintf(buf, len, "[%s]:%u", host, ntohs(sa->in6.sin6_port));
  } else {
    inet_ntop(AF_INET, &sa->in.sin_addr, host, sizeof(host));
    snprintf(buf, len, "%s:%u", host, ntohs(sa->in.sin_port));
  }
  return buf;
}

static socklen_t rn_sockaddr_len(const union rn_sockaddr *sa) {
  return sa->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

void rn_sock_tune(int fd, int bufsize) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (bufsize > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof(bufsize));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof(bufsize));
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl != -1) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

ncclResult_t rn_sock_listen(const union rn_sockaddr *addr, int *fd, union rn_sockaddr *bound) {
  char str[64];
  int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) {
    RN_WARN("socket() for listen on %s failed: %s", rn_sockaddr_str(addr, str, sizeof(str)),
            strerror(errno));
    return ncclSystemError;
  }
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(s, &addr->sa, rn_sockaddr_len(addr)) != 0 || listen(s, 16384) != 0) {
    RN_WARN("bind/listen on %s failed: %s", rn_sockaddr_str(addr, str, sizeof(str)),
            strerror(errno));
    close(s);
    return ncclSystemError;
  }
  socklen_t len = sizeof(*bound);
  if (getsockname(s, &bound->sa, &len) != 0) {
    RN_WARN("getsockname failed: %s", strerror(errno));
    close(s);
    return ncclSystemError;
  }
  *fd = s;
  return ncclSuccess;
}

ncclResult_t rn_sock_connect_start(const union rn_sockaddr *addr, const union rn_sockaddr *local,
                                   int *fd) {
  char str[64];
  int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) {
    RN_WARN("socket() to connect to %s failed: %s", rn_sockaddr_str(addr, str, sizeof(str)),
            strerror(errno));
    return ncclSystemError;
  }
  rn_sock_tune(s, 0);
  if (local != NULL && local->sa.sa_family == addr->sa.sa_family) {
    union rn_sockaddr l = *local;
    if (l.sa.sa_family == AF_INET6)
      l.in6.sin6_port = 0;
    else
      l.in.sin_port = 0;
    if (bind(s, &l.sa, rn_sockaddr_len(&l)) != 0) {
      RN_WARN("bind to local rail %s failed: %s", rn_sockaddr_str(&l, str, sizeof(str)),
              strerror(errno));
      close(s);
      return ncclSystemError;
    }
  }
  if (connect(s, &addr->sa, rn_sockaddr_len(addr)) != 0 && errno != EINPROGRESS && errno != EINTR) {
    RN_WARN("connect to %s failed: %s", rn_sockaddr_str(addr, str, sizeof(str)), strerror(errno));
    close(s);
    return ncclRemoteError;
  }
  *fd = s;
  return ncclSuccess;
}

ncclResult_t rn_sock_connect_poll(int fd, int *ready) {
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  *ready = 0;
  int rc = poll(&p, 1, 0);
  if (rc == 0) return ncclSuccess;
  if (rc < 0) return errno == EINTR ? ncclSuccess : ncclSystemError;
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) {
    RN_WARN("connect failed: %s", strerror(err));
    return ncclRemoteError;
  }
  /* A connect to a dead listener's port can pick that same port as its own
   * ephemeral port and "succeed" by connecting to itself (TCP simultaneous
   * open).  That is a refused connection. */
  union rn_sockaddr me, peer;
  socklen_t ml = sizeof(me), pl = sizeof(peer);
  if (getsockname(fd, &me.sa, &ml) == 0 && getpeername(fd, &peer.sa, &pl) == 0 && ml == pl &&
      memcmp(&me, &peer, ml) == 0) {
    char str[64];
    RN_WARN("connect to %s reached itself: nothing listens there any more",
            rn_sockaddr_str(&peer, str, sizeof(str)));
    return ncclRemoteError;
  }
  *ready = 1;
  return ncclSuccess;
}

ncclResult_t rn_sock_send_some(int fd, const void *buf, size_t len, size_t *off) {
  while (*off < len) {
    ssize_t n = send(fd, (const char *)buf + *off, len - *off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *off += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n < 0 && errno == EINTR) continue;
    return (errno == EPIPE || errno == ECONNRESET) ? ncclRemoteError : ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t rn_sock_recv_some(int fd, void *buf, size_t len, size_t *off) {
  while (*off < len) {
    ssize_t n = recv(fd, (char *)buf + *off, len - *off, MSG_DONTWAIT);
    if (n > 0) {
      *off += (size_t)n;
      continue;
    }
    if (n == 0) return ncclRemoteError; /* orderly shutdown by the peer */
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
    if (errno == EINTR) continue;
    return errno == ECONNRESET ? ncclRemoteError : ncclSystemError;
  }
  return ncclSuccess;
}

/* ---- rendezvous (listening side) ---- */

struct rn_rdv_pending {
  int fd;
  size_t off;
  int64_t deadline;
  struct rn_hello hello;
};

struct rn_rdv_group {
  uint64_t conn_id;
  int64_t deadline;
  struct rn_rdv_conn conn;
  int have_ctrl;
  int ndata;
};

struct rn_rdv {
  int lfd[RN_RDV_MAX_LFDS];
  int nlfds;
  uint64_t nonce;
  int npending;
  struct rn_rdv_pending pending[RN_RDV_MAX_PENDING];
  int ngroups;
  struct rn_rdv_group group[RN_RDV_MAX_GROUPS];
  uint64_t dropped;
};

void rn_sock_conn_close(const struct rn_rdv_conn *c) {
  if (c->ctrl_fd >= 0) close(c->ctrl_fd);
  for (int i = 0; i < RN_RDV_MAX_STREAMS; i++)
    if (c->data_fd[i] >= 0) close(c->data_fd[i]);
}

static void rn_rdv_group_drop(struct rn_rdv *r, int i, const char *why) {
  RN_INFO(NCCL_NET, "dropping incomplete connection %016llx: %s",
          (unsigned long long)r->group[i].conn_id, why);
  rn_sock_conn_close(&r->group[i].conn);
  r->group[i] = r->group[--r->ngroups];
}

static void rn_rdv_pending_drop(struct rn_rdv *r, int i, const char *why) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  char str[64] = "?";
  if (getpeername(r->pending[i].fd, (struct sockaddr *)&ss, &len) == 0)
    rn_sockaddr_str((union rn_sockaddr *)&ss, str, sizeof(str));
  /* A stray connection is the peer's problem, not ours: log, never fail. */
  RN_INFO(NCCL_INIT | NCCL_NET, "closed stray connection from %s: %s", str, why);
  close(r->pending[i].fd);
  r->pending[i] = r->pending[--r->npending];
  r->dropped++;
}

ncclResult_t rn_rdv_create(const int *lfds, int nlfds, uint64_t nonce, struct rn_rdv **out) {
  if (nlfds < 1 || nlfds > RN_RDV_MAX_LFDS) return ncclInternalError;
  struct rn_rdv *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    RN_WARN("out of memory allocating the rendezvous");
    return ncclSystemError;
  }
  memcpy(r->lfd, lfds, sizeof(int) * (size_t)nlfds);
  r->nlfds = nlfds;
  r->nonce = nonce;
  *out = r;
  return ncclSuccess;
}

static struct rn_rdv_group *rn_rdv_group_get(struct rn_rdv *r, const struct rn_hello *h,
                                             int64_t now) {
  for (int i = 0; i < r->ngroups; i++)
    if (r->group[i].conn_id == h->conn_id) return &r->group[i];
  if (r->ngroups == RN_RDV_MAX_GROUPS) return NULL;
  struct rn_rdv_group *g = &r->group[r->ngroups++];
  memset(g, 0, sizeof(*g));
  g->conn_id = h->conn_id;
  g->deadline = now + rn_params()->connect_timeout_ms;
  g->conn.ctrl_fd = -1;
  g->conn.nstreams = (int)h->nstreams;
  for (int i = 0; i < RN_RDV_MAX_STREAMS; i++) g->conn.data_fd[i] = -1;
  return g;
}

/* Admit a complete hello; returns 0 when taken, -1 with a reason otherwise. */
static int rn_rdv_admit(struct rn_rdv *r, int fd, const struct rn_hello *h, int64_t now,
                        const char **why) {
  if (h->magic != RN_HELLO_MAGIC || h->version != RN_HELLO_VERSION) {
    *why = "not a railnet hello";
    return -1;
  }
  if (h->nonce != r->nonce) {
    *why = "wrong nonce (a peer holding another handle)";
    return -1;
  }
  if (h->nstreams > RN_RDV_MAX_STREAMS || (h->role != RN_ROLE_CTRL && h->role != RN_ROLE_DATA) ||
      (h->role == RN_ROLE_DATA && h->index >= h->nstreams)) {
    *why = "malformed hello";
    return -1;
  }
  struct rn_rdv_group *g = rn_rdv_group_get(r, h, now);
  if (g == NULL) {
    *why = "too many connections in progress";
    return -1;
  }
  if ((int)h->nstreams != g->conn.nstreams || (h->role == RN_ROLE_CTRL && g->have_ctrl) ||
      (h->role == RN_ROLE_DATA && g->conn.data_fd[h->index] >= 0)) {
    *why = "hello inconsistent with its connection";
    return -1;
  }
  if (h->role == RN_ROLE_CTRL) {
    g->conn.ctrl_fd = fd;
    g->have_ctrl = 1;
  } else {
    g->conn.data_fd[h->index] = fd;
    g->ndata++;
  }
  return 0;
}

ncclResult_t rn_rdv_poll(struct rn_rdv *r, struct rn_rdv_conn *conn, int *ready) {
  int64_t now = rn_now_ms();
  *ready = 0;
  for (int l = 0; l < r->nlfds; l++) {
    for (;;) {
      int fd = accept4(r->lfd[l], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        if (errno == ECONNABORTED || errno == EPROTO) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          RN_INFO(NCCL_NET, "accept: %s, retrying later", strerror(errno));
          break;
        }
        RN_WARN("accept on listening socket failed: %s", strerror(errno));
        return ncclSystemError;
      }
      if (r->npending == RN_RDV_MAX_PENDING) rn_rdv_pending_drop(r, 0, "too many pending");
      struct rn_rdv_pending *p = &r->pending[r->npending++];
      memset(p, 0, sizeof(*p));
      p->fd = fd;
      p->deadline = now + rn_params()->connect_timeout_ms;
    }
  }
  for (int i = 0; i < r->npending;) {
    struct rn_rdv_pending *p = &r->pending[i];
    ncclResult_t res = rn_sock_recv_some(p->fd, &p->hello, sizeof(p->hello), &p->off);
    if (res != ncclSuccess) {
      rn_rdv_pending_drop(r, i, "closed before identifying itself");
      continue;
    }
    if (p->off < sizeof(p->hello)) {
      /* A wrong magic in the first bytes is enough to reject early. */
      if (p->off >= sizeof(uint32_t) && p->hello.magic != RN_HELLO_MAGIC) {
        rn_rdv_pending_drop(r, i, "not a railnet hello");
        continue;
      }
      if (now > p->deadline) {
        rn_rdv_pending_drop(r, i, "silent past the connect timeout");
        continue;
      }
      i++;
      continue;
    }
    const char *why = NULL;
    int fd = p->fd;
    struct rn_hello h = p->hello;
    if (rn_rdv_admit(r, fd, &h, now, &why) != 0) {
      rn_rdv_pending_drop(r, i, why);
      continue;
    }
    r->pending[i] = r->pending[--r->npending];
  }
  for (int i = 0; i < r->ngroups;) {
    struct rn_rdv_group *g = &r->group[i];
    if (g->have_ctrl && g->ndata == g->conn.nstreams) {
      *conn = g->conn;
      *ready = 1;
      r->group[i] = r->group[--r->ngroups];
      return ncclSuccess;
    }
    if (now > g->deadline) {
      rn_rdv_group_drop(r, i, "streams missing past the connect timeout");
      continue;
    }
    i++;
  }
  return ncclSuccess;
}

void rn_rdv_destroy(struct rn_rdv *r) {
  if (r == NULL) return;
  for (int i = 0; i < r->npending; i++) close(r->pending[i].fd);
  for (int i = 0; i < r->ngroups; i++) rn_sock_conn_close(&r->group[i].conn);
  free(r);
}

/* ---- dial (connecting side) ---- */

enum rn_dial_state { RN_DIAL_CONNECTING = 0, RN_DIAL_HELLO = 1, RN_DIAL_DONE = 2 };

struct rn_dial {
  int nfds; /* 1 + nstreams */
  int fd[1 + RN_RDV_MAX_STREAMS];
  enum rn_dial_state state[1 + RN_RDV_MAX_STREAMS];
  size_t off[1 + RN_RDV_MAX_STREAMS];
  struct rn_hello hello[1 + RN_RDV_MAX_STREAMS];
};

ncclResult_t rn_dial_create(const union rn_sockaddr *addrs, int naddrs, uint64_t nonce,
                            int nstreams, struct rn_dial **out) {
  return rn_dial_create_from(addrs, naddrs, NULL, 0, nonce, nstreams, out);
}

ncclResult_t rn_dial_create_from(const union rn_sockaddr *addrs, int naddrs,
                                 const union rn_sockaddr *locals, int nlocals, uint64_t nonce,
                                 int nstreams, struct rn_dial **out) {
  ncclResult_t res = ncclSuccess;
  if (naddrs < 1 || nstreams < 0 || nstreams > RN_RDV_MAX_STREAMS) return ncclInternalError;
  struct rn_dial *d = calloc(1, sizeof(*d));
  if (d == NULL) {
    RN_WARN("out of memory allocating a connection");
    return ncclSystemError;
  }
  uint64_t conn_id = rn_random64();
  for (int i = 0; i <= nstreams; i++) d->fd[i] = -1;
  d->nfds = 1 + nstreams;
  for (int i = 0; i < d->nfds; i++) {
    struct rn_hello *h = &d->hello[i];
    h->magic = RN_HELLO_MAGIC;
    h->version = RN_HELLO_VERSION;
    h->role = i == 0 ? RN_ROLE_CTRL : RN_ROLE_DATA;
    h->index = (uint8_t)(i == 0 ? 0 : i - 1);
    h->nonce = nonce;
    h->conn_id = conn_id;
    h->nstreams = (uint32_t)nstreams;
    /* The control connection goes to the lead rail; stream k to rail k mod n. */
    int rail = i == 0 ? 0 : i - 1;
    const union rn_sockaddr *a = &addrs[rail % naddrs];
    const union rn_sockaddr *l = nlocals > 0 ? &locals[rail % nlocals] : NULL;
    RN_CHECK_GOTO(rn_sock_connect_start(a, l, &d->fd[i]), res, out_free);
  }
  *out = d;
  return ncclSuccess;
out_free:
  rn_dial_destroy(d);
  return res;
}

ncclResult_t rn_dial_poll(struct rn_dial *d, struct rn_rdv_conn *conn, int *ready) {
  int done = 0;
  *ready = 0;
  for (int i = 0; i < d->nfds; i++) {
    if (d->state[i] == RN_DIAL_CONNECTING) {
      int ok = 0;
      RN_CHECK(rn_sock_connect_poll(d->fd[i], &ok));
      if (ok) d->state[i] = RN_DIAL_HELLO;
    }
    if (d->state[i] == RN_DIAL_HELLO) {
      RN_CHECK(rn_sock_send_some(d->fd[i], &d->hello[i], sizeof(d->hello[i]), &d->off[i]));
      if (d->off[i] == sizeof(d->hello[i])) d->state[i] = RN_DIAL_DONE;
    }
    done += d->state[i] == RN_DIAL_DONE;
  }
  if (done < d->nfds) return ncclSuccess;
  memset(conn, 0, sizeof(*conn));
  conn->ctrl_fd = d->fd[0];
  conn->nstreams = d->nfds - 1;
  for (int i = 0; i < RN_RDV_MAX_STREAMS; i++)
    conn->data_fd[i] = i < d->nfds - 1 ? d->fd[i + 1] : -1;
  for (int i = 0; i < d->nfds; i++) d->fd[i] = -1; /* ownership moves to the caller */
  *ready = 1;
  return ncclSuccess;
}

void rn_dial_destroy(struct rn_dial *d) {
  if (d == NULL) return;
  for (int i = 0; i < d->nfds; i++)
    if (d->fd[i] >= 0) close(d->fd[i]);
  free(d);
}
