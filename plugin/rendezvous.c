/* The rendezvous every railnet connection starts with: the connector dials
 * a control connection plus data streams and sends each a hello; the
 * listener admits only hellos carrying the handle's nonce and groups the
 * streams of one connection.  Nothing here ever blocks. */
#include <errno.h>
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
#define RN_RDV_MAX_PENDING 256
#define RN_RDV_MAX_GROUPS 64

uint64_t rn_rdv_random64(void) {
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
};

void rn_rdv_conn_close(const struct rn_rdv_conn *c) {
  if (c->ctrl_fd >= 0) close(c->ctrl_fd);
  for (int i = 0; i < RN_RDV_MAX_STREAMS; i++)
    if (c->data_fd[i] >= 0) close(c->data_fd[i]);
}

static void rn_rdv_group_drop(struct rn_rdv *r, int i, const char *why) {
  RN_INFO(NCCL_NET, "dropping incomplete connection %016llx: %s",
          (unsigned long long)r->group[i].conn_id, why);
  rn_rdv_conn_close(&r->group[i].conn);
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
  int64_t now = rn_clock_ms();
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
  for (int i = 0; i < r->ngroups; i++) rn_rdv_conn_close(&r->group[i].conn);
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
};

ncclResult_t rn_rdv_dial_create(const union rn_sockaddr *addrs, int naddrs, uint64_t nonce,
                                int nstreams, struct rn_rdv_dial **out) {
  return rn_rdv_dial_create_from(addrs, naddrs, NULL, 0, nonce, nstreams, out);
}

ncclResult_t rn_rdv_dial_create_from(const union rn_sockaddr *addrs, int naddrs,
                                     const union rn_sockaddr *locals, int nlocals, uint64_t nonce,
                                     int nstreams, struct rn_rdv_dial **out) {
  ncclResult_t res = ncclSuccess;
  if (naddrs < 1 || nstreams < 0 || nstreams > RN_RDV_MAX_STREAMS) return ncclInternalError;
  struct rn_rdv_dial *d = calloc(1, sizeof(*d));
  if (d == NULL) {
    RN_WARN("out of memory allocating a connection");
    return ncclSystemError;
  }
  uint64_t conn_id = rn_rdv_random64();
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
  rn_rdv_dial_destroy(d);
  return res;
}

ncclResult_t rn_rdv_dial_poll(struct rn_rdv_dial *d, struct rn_rdv_conn *conn, int *ready) {
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

void rn_rdv_dial_destroy(struct rn_rdv_dial *d) {
  if (d == NULL) return;
  for (int i = 0; i < d->nfds; i++)
    if (d->fd[i] >= 0) close(d->fd[i]);
  free(d);
}
