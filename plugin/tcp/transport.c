/* The TCP transport's table and lifecycle: init/fini, listen, connect
 * (non-blocking, in stages), accept, close, and its stateless
 * registrations.  See tcp.h for the protocol and the other files. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "railnet/param.h"
#include "tcp.h"

#define RN_TCP_MAX_IFS RN_MAX_NICS

static struct rn_tcp_if rn_tcp_ifs[RN_TCP_MAX_IFS];
static int rn_tcp_nifs;

struct rn_tcp_listen {
  struct rn_comm_base base;
  struct rn_list open; /* in rn_tcp_live_listens */
  int nfds;
  int fd[RN_MAX_RAILS];
  struct rn_rdv *rdv;
  int has_standby;                      /* fd[nfds - 1] listens on the device's standby NIC */
  union rn_sockaddr addr[RN_MAX_RAILS]; /* where fd[i] listens */
  int comms[RN_MAX_RAILS];              /* fd[i]'s port has served, this one's included */
  uint64_t nonce;                       /* the handle's: a kept connection asked for it is ours */
};

/* The byte the accepting side sends once it has taken the connection, so
 * connect returns a comm only to a peer that is really there (a listening
 * socket completes handshakes even for a process about to die). */
#define RN_TCP_ACCEPT_ACK 0xa5

/* Where a connect stands; NCCL calls again until it is done. */
enum rn_tcp_connect_stage {
  RN_TCP_CONNECT_DIAL = 0,  /* sockets connecting, hellos going out */
  RN_TCP_CONNECT_AWAIT_ACK, /* all up and hellos sent: conn is ours until the ack */
  RN_TCP_CONNECT_DONE,      /* the comm owns the sockets, also if creating it failed */
};

struct rn_tcp_connecting {
  enum rn_tcp_connect_stage stage;
  struct rn_rdv_dial *dial;
  struct rn_rdv_conn conn;
  int64_t start_ms;
  char peer[64];
  /* What a new dial needs: the listener may drop a connection whose hello
   * came late (a loaded host, a flooded listener); then we dial again,
   * after retry_at_ms, until the connect timeout. */
  struct rn_tcp_plan plan; /* with RAILNET_SOCKET_LAZY, of the control connection alone */
  union rn_sockaddr dev[RN_MAX_RAILS]; /* this device's rails, its standby last */
  int ndev, dev_standby, attempts, expect;
  uint64_t nonce;
  int64_t retry_at_ms;      /* 0: not waiting */
  int tc;                   /* the comm's traffic class, -1 for none */
  uint32_t token;           /* the listening process's (pool.c), 0 none */
  int pooled;               /* conn is a kept connection, asked for reuse: if it fails, dial */
  struct rn_tcp_addrs kept; /* pooled: its addresses */
  uint32_t absent;          /* rails (plan indexes) left out (rn_tcp_plan_leave_out) */
  int64_t dial_ms;          /* when the current dial started */
};

/* The listener reset this attempt after its sockets connected: dial again
 * after a short backoff while the connect timeout allows.  0 when it
 * will, -1 (with a WARN) when it gives up. */
static int rn_tcp_connect_redial(struct rn_tcp_connecting *k) {
  int64_t now = rn_clock_ms();
  if (k->stage == RN_TCP_CONNECT_AWAIT_ACK) rn_rdv_conn_close(&k->conn);
  rn_rdv_dial_destroy(k->dial);
  k->dial = NULL;
  k->stage = RN_TCP_CONNECT_DIAL;
  if (now - k->start_ms > rn_params()->connect_timeout_ms) {
    RN_WARN("%s dropped the connection during the handshake %d time(s); giving up after %lld ms "
            "(its listen comm may be closed or the handle stale, or the listener flooded)",
            k->peer, k->attempts, (long long)(now - k->start_ms));
    return -1;
  }
  int64_t backoff = 10LL << (k->attempts < 6 ? k->attempts : 6); /* 10 ms .. 640 ms */
  k->retry_at_ms = now + backoff;
  /* The last try goes out at the timeout, not a backoff past it. */
  const int64_t last = k->start_ms + rn_params()->connect_timeout_ms;
  if (k->retry_at_ms > last) k->retry_at_ms = last;
  if (k->attempts++ == 0)
    RN_INFO(NCCL_NET,
            "%s dropped the connection during the handshake (a busy listener, or a hello "
            "late on a lossy path); dialing again until the connect timeout",
            k->peer);
  return 0;
}

struct rn_tcp_mr {
  uint32_t magic;
  int type;
};
#define RN_TCP_MR_MAGIC 0x726e6d72u

/* ---------------------------------------------------------------- init */

static ncclResult_t rn_tcp_init(const struct rn_nic **nics, int *n, char *why, size_t whylen) {
  static struct rn_nic list[RN_TCP_MAX_IFS];
  rn_tcp_pool_start();
  rn_tcp_nifs = rn_tcp_if_discover(rn_tcp_ifs, RN_TCP_MAX_IFS, why, whylen);
  for (int i = 0; i < rn_tcp_nifs; i++) {
    char a[64];
    list[i] = rn_tcp_ifs[i].nic;
    list[i].table_index = i;
    RN_INFO(NCCL_INIT | NCCL_NET, "%s %s: %s; speed %s%d Mbps, pci %s", list[i].name,
            rn_sockaddr_str(&rn_tcp_ifs[i].addr, a, sizeof(a)), why,
            list[i].speed_unknown ? "unknown, reporting " : "", list[i].speed_mbps,
            list[i].pci_path[0] ? list[i].pci_path : "(virtual)");
  }
  if (rn_tcp_nifs == 0) RN_INFO(NCCL_INIT | NCCL_NET, "no TCP interface: %s", why);
  *nics = list;
  *n = rn_tcp_nifs;
  return ncclSuccess;
}

/* Listen comms not yet closed, so that finalize can close them. */
static struct rn_shared_list rn_tcp_live_listens = RN_SHARED_LIST_INIT(rn_tcp_live_listens);

static ncclResult_t rn_tcp_close_listen(void *lcomm);

static void rn_tcp_fini(void) {
  int n = 0;
  for (struct rn_list *first; (first = rn_shared_list_first(&rn_tcp_live_listens)) != NULL; n++)
    rn_tcp_close_listen(RN_LIST_ENTRY(first, struct rn_tcp_listen, open));
  rn_tcp_pool_fini(); /* and comms closed from now on are not kept */
  n += rn_tcp_comm_free_all();
  rn_tcp_engine_stop();
  if (n > 0) RN_INFO(NCCL_INIT | NCCL_NET, "closed %d comm(s) left open at finalize", n);
  rn_tcp_nifs = 0;
}

/* ------------------------------------------------- connection set-up */

static ncclResult_t rn_tcp_listen(const struct rn_rails *r, struct rn_handle *h, void **lcomm) {
  ncclResult_t res = ncclSuccess;
  struct rn_tcp_listen *l = calloc(1, sizeof(*l));
  if (l == NULL) {
    RN_WARN("out of memory in listen");
    return ncclSystemError;
  }
  int n = r->n < RN_TCP_MAX_ADDRS ? r->n : RN_TCP_MAX_ADDRS;
  if (n < r->n) {
    /* Said once per device (by its first NIC). */
    static _Atomic uint64_t said;
    const uint64_t bit = 1ull << (r->nic[0]->table_index % 64);
    if (!(atomic_fetch_or(&said, bit) & bit))
      RN_INFO(NCCL_NET,
              "listen on %s: the device has %d rails and a handle holds %d addresses, so comms "
              "with it use its first %d rails (%s and after carry nothing)",
              r->nic[0]->name, r->n, RN_TCP_MAX_ADDRS, n, r->nic[n]->name);
  }
  struct rn_wire_addr *w = (struct rn_wire_addr *)h->payload;
  for (int i = 0; i < n; i++) {
    union rn_sockaddr a = rn_sockaddr_no_port(rn_tcp_ifs[r->nic[i]->table_index].addr), bound;
    RN_CHECK_GOTO(rn_tcp_pool_listen(&a, &l->fd[i], &bound, &l->comms[l->nfds]), res, out_close);
    l->addr[l->nfds++] = bound;
    rn_sockaddr_to_wire(&bound, &w[i]);
  }
  h->nrails = (uint8_t)n;
  /* The standby's address follows the rails' (the handle is zeroed: an
   * entry of family 0 is none), under the same nonce and admission. */
  if (r->standby != NULL && n == r->n && n < RN_TCP_MAX_ADDRS && n < RN_RDV_MAX_LFDS) {
    union rn_sockaddr bound, a = rn_sockaddr_no_port(rn_tcp_ifs[r->standby->table_index].addr);
    if (rn_tcp_pool_listen(&a, &l->fd[n], &bound, &l->comms[l->nfds]) == ncclSuccess) {
      l->addr[l->nfds++] = bound;
      l->has_standby = 1;
      rn_sockaddr_to_wire(&bound, &w[n]);
    } else {
      RN_INFO(NCCL_NET, "listen: no listener on standby NIC %s: comms of this device go without it",
              r->standby->name);
    }
  }
  /* Connections of 0 data streams too: they open later (open.c). */
  RN_CHECK_GOTO(rn_rdv_create_range(l->fd, l->nfds, h->nonce, 0, RN_TCP_MAX_STREAMS, &l->rdv), res,
                out_close);
  l->nonce = h->nonce;
  /* After the addresses: this process's token, so a connector can tell
   * which of its kept connections lead here. */
  uint32_t token = rn_tcp_pool_token();
  memcpy(h->payload + RN_TCP_TOKEN_OFF, &token, sizeof(token));
  rn_shared_list_add(&rn_tcp_live_listens, &l->open);
  *lcomm = l;
  return ncclSuccess;
out_close:
  for (int i = 0; i < l->nfds; i++) close(l->fd[i]);
  free(l);
  return res;
}

static void rn_tcp_connect_abort(void *state) {
  struct rn_tcp_connecting *k = state;
  if (k == NULL) return;
  if (k->stage == RN_TCP_CONNECT_AWAIT_ACK) rn_rdv_conn_close(&k->conn);
  rn_rdv_dial_destroy(k->dial);
  free(k);
}

static ncclResult_t rn_tcp_connect(const struct rn_rails *r, const struct rn_handle *h, int tc,
                                   void **state, void **scomm) {
  struct rn_tcp_connecting *k = *state;
  ncclResult_t res = ncclSuccess;
  if (k == NULL) {
    union rn_sockaddr addrs[RN_MAX_RAILS];
    const struct rn_wire_addr *w = (const struct rn_wire_addr *)h->payload;
    int n = h->nrails < RN_TCP_MAX_ADDRS ? h->nrails : RN_TCP_MAX_ADDRS;
    for (int i = 0; i < n; i++) {
      if (rn_sockaddr_from_wire(&w[i], &addrs[i]) != 0) {
        RN_WARN("connect: handle carries an invalid address (rail %d)", i);
        return ncclInvalidArgument;
      }
    }
    /* The peer's standby, after its rails. */
    int peer_standby = n < RN_TCP_MAX_ADDRS && w[n].family != 0;
    if (peer_standby && rn_sockaddr_from_wire(&w[n], &addrs[n]) != 0) {
      RN_WARN("connect: handle carries an invalid standby address (family %u)", w[n].family);
      return ncclInvalidArgument;
    }
    k = calloc(1, sizeof(*k));
    if (k == NULL) {
      RN_WARN("out of memory in connect");
      return ncclSystemError;
    }
    k->start_ms = rn_clock_ms();
    k->tc = tc;
    rn_sockaddr_str(&addrs[0], k->peer, sizeof(k->peer));
    /* Leave from this device's own rails, in step with the peer's. */
    for (int i = 0; i < r->n; i++) k->dev[i] = rn_tcp_ifs[r->nic[i]->table_index].addr;
    k->ndev = r->n;
    if (r->standby != NULL && r->n < RN_MAX_RAILS) {
      k->dev[r->n] = rn_tcp_ifs[r->standby->table_index].addr;
      k->dev_standby = 1;
    }
    k->nonce = h->nonce;
    memcpy(&k->token, h->payload + RN_TCP_TOKEN_OFF, sizeof(k->token));
    /* RAILNET_SOCKET_LAZY holds for a comm of one rail only.  One over
     * several opens its streams at connect: its rails, and with them a
     * way for the control connection to move off a rail that fails, are
     * there from its first message (a comm moving only small messages
     * would otherwise live on one rail's control connection, and die
     * with it). */
    const int lazy = rn_params()->socket_lazy && n == 1 && k->ndev == 1;
    /* The streams as they will be: when lazy, for the chunk grid of
     * messages announced before they open (open.c). */
    rn_tcp_plan_streams(addrs, n, peer_standby, k->dev, k->ndev, k->dev_standby,
                        lazy ? NULL : k->peer, &k->plan);
    /* From here on the peer is named by the address its control
     * connection goes to (another, where the rails were paired). */
    rn_sockaddr_str(&k->plan.addrs[0], k->peer, sizeof(k->peer));
    k->expect = k->plan.nstreams;
    if (lazy) {
      /* The control connection alone, to the first rail: the streams
       * open with the first message that needs them (open.c). */
      const int standby_ok = k->plan.standby_ok;
      memset(&k->plan, 0, sizeof(k->plan));
      k->plan.standby_ok = standby_ok; /* for the streams' opening */
      memcpy(k->plan.addrs, addrs, sizeof(addrs[0]) * (size_t)n);
      k->plan.naddrs = n;
      memcpy(k->plan.locals, k->dev, sizeof(k->dev[0]) * (size_t)k->ndev);
      k->plan.nlocals = k->ndev;
    }
  }
  if (k->dial == NULL && k->stage == RN_TCP_CONNECT_DIAL && k->attempts == 0 && !k->pooled &&
      rn_tcp_pool_take_dial(k->token, k->plan.addrs, k->plan.naddrs, k->plan.locals,
                            k->plan.nlocals, k->tc, k->nonce, &k->conn, &k->kept)) {
    k->pooled = 1;
    k->stage = RN_TCP_CONNECT_AWAIT_ACK;
    *state = k; /* the accept byte cannot be there yet: read at the next call */
    return ncclSuccess;
  }
  if (k->dial == NULL && k->stage == RN_TCP_CONNECT_DIAL) {
    if (k->retry_at_ms != 0 && rn_clock_ms() < k->retry_at_ms) {
      *state = k;
      return ncclSuccess;
    }
    k->retry_at_ms = 0;
    RN_CHECK_GOTO(rn_tcp_plan_dial(&k->plan, k->absent, k->nonce, &k->dial), res, out_free);
    k->dial_ms = rn_clock_ms();
  }
  int ready = 0;
  if (k->stage == RN_TCP_CONNECT_DIAL) {
    int dialed = 0;
    res = rn_rdv_dial_poll(k->dial, &k->conn, &dialed);
    int left = rn_tcp_plan_leave_out(k->peer, &k->plan, &k->absent, &k->dial, k->dial_ms, res,
                                     dialed);
    if (left > 0) {
      *state = k;
      return ncclSuccess;
    }
    if (left < 0) goto out_free;
    if (res != ncclSuccess) {
      if (!rn_rdv_dial_dropped(k->dial)) goto out_free; /* refused or failed: warned */
      if (rn_tcp_connect_redial(k) != 0) goto out_free;
      *state = k;
      return ncclSuccess;
    }
    if (dialed) k->stage = RN_TCP_CONNECT_AWAIT_ACK;
  }
  if (k->stage == RN_TCP_CONNECT_AWAIT_ACK) {
    uint8_t ack = 0;
    size_t got = 0;
    res = rn_sock_recv_some(k->conn.ctrl_fd, &ack, 1, &got);
    /* A data stream the listener dropped (its hello late: retransmitted
     * on a lossy path) leaves the connection incomplete for good: the
     * listener would only drop the rest at the connect timeout. */
    if (res == ncclSuccess && got == 0 && rn_rdv_conn_dropped(&k->conn)) res = ncclRemoteError;
    if (res == ncclSuccess && got == 1 && ack != RN_TCP_ACCEPT_ACK) {
      RN_WARN("%s answered the connection with 0x%02x instead of its accept", k->peer, ack);
      res = ncclRemoteError;
      goto out_free;
    }
    if (res != ncclSuccess && k->pooled == 1) {
      /* The peer closed the kept connection meanwhile: dial as usual. */
      RN_INFO(NCCL_NET, "connect to %s: the kept connection was closed by the peer; dialing",
              k->peer);
      rn_rdv_conn_close(&k->conn);
      k->pooled = 2;
      k->stage = RN_TCP_CONNECT_DIAL;
      *state = k;
      return ncclSuccess;
    }
    if (res != ncclSuccess) {
      /* Closed before accepting: a busy listener dropped us, or it died
       * (then the next dial is refused, with a WARN). */
      if (rn_tcp_connect_redial(k) != 0) {
        res = ncclRemoteError;
        goto out_free;
      }
      *state = k;
      return ncclSuccess;
    }
    ready = got == 1;
  }
  if (!ready) {
    if (rn_clock_ms() - k->start_ms > rn_params()->connect_timeout_ms) {
      RN_WARN("connect to %s timed out after %lld ms%s", k->peer,
              (long long)(rn_clock_ms() - k->start_ms),
              k->stage == RN_TCP_CONNECT_AWAIT_ACK
                  ? ": the peer took the connection but never accepted it (its listen comm may "
                    "be closed or the handle stale)"
                  : "");
      res = ncclRemoteError;
      goto out_free;
    }
    *state = k;
    return ncclSuccess;
  }
  struct rn_tcp_comm *c;
  k->stage = RN_TCP_CONNECT_DONE;
  RN_CHECK_GOTO(
      rn_tcp_comm_create(&k->conn, 0, k->pooled == 1 ? &k->kept : NULL, k->plan.locals, &c), res,
      out_free);
  c->pool_token = k->token;
  /* Streams opened again later go over the same rails: those paired with
   * the peer's (rn_tcp_plan_streams), the device's standby last. */
  const int nrails = k->plan.nlocals - k->plan.standby;
  rn_tcp_plan_keep(&k->plan, k->dev_standby ? &k->dev[k->ndev] : NULL, c->lazy.u.tx.locals,
                   &c->lazy.u.tx.nlocals, &c->lazy.u.tx.local_standby);
  c->lazy.expect = k->expect;
  /* Before its streams open, as they will be (rn_tcp_rails_init): a
   * message announced meanwhile asks for its ACK on a comm of several
   * rails, so its chunks can go again over another. */
  if (c->nstreams == 0) {
    const int64_t ack = rn_params()->rail_ack;
    c->ack = ack < 0 ? nrails > 1 : ack == 1;
  }
  if (k->plan.standby) {
    c->lazy.standby_set = 1;
    c->lazy.standby_addr = k->plan.locals[k->plan.nlocals - 1];
    rn_tcp_rails_set_standby(c, &c->lazy.standby_addr);
  }
  if (k->absent != 0 && (res = rn_tcp_rails_left_out(c, "unreachable at connect")) != ncclSuccess) {
    atomic_store(&c->error, res);
    rn_tcp_comm_free(c);
    goto out_free;
  }
  RN_INFO(NCCL_NET,
          "connected to %s with %d streams (%s), %d helper threads, dead peer after %lld ms%s",
          k->peer, c->nstreams > 0 ? c->nstreams : c->lazy.expect,
          k->pooled == 1 ? "a kept connection" : "dialed", c->nthreads,
          (long long)rn_params()->socket_timeout_ms,
          c->nstreams > 0 ? ""
                          : "; the streams open at its first message above "
                            "RAILNET_SOCKET_INLINE");
  if (k->tc >= 0 && (res = rn_tcp_comm_set_class(c, k->tc, 0)) != ncclSuccess) {
    atomic_store(&c->error, res); /* its sockets' class is unknown: never kept */
    rn_tcp_comm_free(c);
    rn_tcp_connect_abort(k);
    *state = NULL;
    return res;
  }
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
  /* A kept connection claimed for this listener's nonce first: it needs
   * no accept(2), and the dial the rendezvous would find instead is one
   * this nonce's connector made only when it had no kept connection. */
  struct rn_tcp_addrs kept;
  int pooled = rn_tcp_pool_take_accept(l->nonce, l->addr, l->nfds, &conn, &kept);
  ready = pooled;
  if (!ready) RN_CHECK(rn_rdv_poll(l->rdv, &conn, &ready));
  if (!ready) return ncclSuccess;
  uint8_t ack = RN_TCP_ACCEPT_ACK;
  size_t sent = 0;
  if (rn_sock_send_some(conn.ctrl_fd, &ack, 1, &sent) != ncclSuccess || sent != 1) {
    /* The connector is gone already: drop it and keep listening. */
    RN_INFO(NCCL_NET, "a connecting peer vanished before its accept completed");
    rn_rdv_conn_close(&conn);
    return ncclSuccess;
  }
  struct rn_tcp_comm *c;
  RN_CHECK(rn_tcp_comm_create(&conn, 1, pooled ? &kept : NULL, l->addr, &c));
  memcpy(c->lazy.u.rx.lis, l->addr, sizeof(l->addr[0]) * (size_t)l->nfds);
  c->lazy.u.rx.nlis = l->nfds;
  c->lazy.u.rx.lis_standby = l->has_standby;
  if (l->has_standby) {
    c->lazy.standby_set = 1;
    c->lazy.standby_addr = l->addr[l->nfds - 1];
    rn_tcp_rails_set_standby(c, &c->lazy.standby_addr);
  }
  ncclResult_t res = rn_tcp_rails_left_out(c, "the sender could not reach it at connect");
  if (res != ncclSuccess) {
    atomic_store(&c->error, res);
    rn_tcp_comm_free(c);
    return res;
  }
  RN_INFO(NCCL_NET,
          "accepted a connection from %s with %d streams (%s), %d helper threads, dead peer "
          "after %lld ms%s",
          c->peer, c->nstreams, pooled ? "a kept connection" : "dialed", c->nthreads,
          (long long)rn_params()->socket_timeout_ms,
          c->nstreams > 0 ? "" : "; the sender opens them when it needs them");
  /* What the comm queued (its offers of a way for the control connection)
   * leaves now: NCCL may call it next only once the path is gone, and a
   * sender without the offers cannot move the connection.  An error
   * surfaces through the comm's own calls. */
  pthread_mutex_lock(&c->lock);
  (void)rn_tcp_ctl_flush(c);
  pthread_mutex_unlock(&c->lock);
  *rcomm = c;
  return ncclSuccess;
}

static ncclResult_t rn_tcp_close_listen(void *lcomm) {
  struct rn_tcp_listen *l = lcomm;
  rn_shared_list_del(&rn_tcp_live_listens, &l->open);
  rn_rdv_destroy(l->rdv);
  for (int i = 0; i < l->nfds; i++)
    if (!rn_tcp_pool_put_listener(l->fd[i], &l->addr[i], l->comms[i])) close(l->fd[i]);
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
    RN_WARN("regMr of memory type %d: TCP reaches host memory only", type);
    return ncclInternalError;
  }
  *mh = (void *)&rn_tcp_mr_host;
  return ncclSuccess;
}

static ncclResult_t rn_tcp_dereg_mr(void *comm, void *mh) {
  (void)comm;
  if (mh != &rn_tcp_mr_host) {
    RN_WARN("deregMr of %p, which is not a railnet registration", mh);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
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
