/* A TCP comm's data streams: planned, opened when the first message too
 * large to go inline needs them, and closed again after
 * RAILNET_SOCKET_IDLE_MS without one (PROTOCOL.md, Opening and closing
 * the data streams).
 *
 * A comm starts with its control connection alone, so one that moves only
 * small messages (request/response, the KV cache's metadata, a comm kept
 * open for later) holds one socket per side and no helper thread works for
 * it.  The sender asks with OPEN; the receiver listens on each of its
 * rails (the addresses its listen comm had) with a fresh nonce, through
 * the same rendezvous and admission rules as any listener, and answers
 * with STREAMS; the sender dials one connection of N data streams there,
 * exactly as connect would have (rn_tcp_plan_streams), and the streams
 * join the comm on each side once dialled and admitted.  Closing is the
 * sender's: with nothing in flight it sends DOWN with IDLE and closes its
 * streams after their last bytes; the receiver reads each to its end and
 * lets them go.  A comm of several rails keeps them.  Everything here runs on the caller's thread under
 * c->lock. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "railnet/pairing.h"
#include "railnet/param.h"
#include "tcp.h"

_Static_assert(RN_TCP_STREAMS_ADDRS >= RN_TCP_MAX_ADDRS, "STREAMS holds a handle's addresses");

/* Which of the peer's n listening addresses each of the device's ndev
 * rails dials: the rule of include/railnet/pairing.h over the kernel's
 * routes.  The pairs go in the device's order into peer_out/dev_out;
 * returns their number.  Anything but rail k with address k is said in
 * one INFO naming `name`, unless NULL. */
static int rn_tcp_plan_pair(const union rn_sockaddr *peer, int n, const union rn_sockaddr *dev,
                            int ndev, const char *name, union rn_sockaddr *peer_out,
                            union rn_sockaddr *dev_out) {
  uint32_t from[RN_MAX_RAILS];
  struct rn_pairing pairing;
  rn_pairing_routes(peer, n, dev, ndev, from);
  rn_pairing_plan(from, n, ndev, &pairing);
  for (int k = 0; k < pairing.n; k++) {
    peer_out[k] = peer[pairing.peer[k]];
    dev_out[k] = dev[pairing.local[k]];
  }
  if (name == NULL || pairing.identity) return pairing.n;
  char dev_label[RN_MAX_RAILS][112], peer_label[RN_MAX_RAILS][64], how[1024];
  const char *dl[RN_MAX_RAILS], *pl[RN_MAX_RAILS];
  for (int i = 0; i < ndev; i++) {
    char ifname[32], a[64];
    rn_tcp_if_name_of(&dev[i], ifname, sizeof(ifname));
    snprintf(dev_label[i], sizeof(dev_label[i]), "%s (%s)", ifname,
             rn_sockaddr_str(&dev[i], a, sizeof(a)));
    dl[i] = dev_label[i];
  }
  for (int j = 0; j < n; j++) pl[j] = rn_sockaddr_str(&peer[j], peer_label[j], sizeof(peer_label[j]));
  rn_pairing_describe(&pairing, dl, ndev, pl, n, how, sizeof(how));
  RN_INFO(NCCL_NET,
          "streams to %s: the peer listens on %d rail(s), this device has %d: the comm goes "
          "over %d pair(s), %s",
          name, n, ndev, pairing.n, how);
  return pairing.n;
}

void rn_tcp_plan_streams(const union rn_sockaddr *peer, int n, int peer_standby,
                         const union rn_sockaddr *dev, int ndev, int dev_standby, const char *name,
                         struct rn_tcp_plan *out) {
  memset(out, 0, sizeof(*out));
  union rn_sockaddr peer_paired[RN_MAX_RAILS], dev_paired[RN_MAX_RAILS];
  const int rails_here = ndev, rails_there = n; /* before pairing */
  const int as_many = n == ndev;
  out->standby_ok = as_many;
  if (ndev >= 1 && n >= 1 && (n != ndev || n >= 2)) {
    const int m = rn_tcp_plan_pair(peer, n, dev, ndev, name, peer_paired, dev_paired);
    if (peer_standby) peer_paired[m] = peer[n];
    if (dev_standby) dev_paired[m] = dev[ndev];
    peer = peer_paired;
    dev = dev_paired;
    n = ndev = m;
  }
  memcpy(out->addrs, peer, sizeof(*peer) * (size_t)(n + (peer_standby ? 1 : 0)));
  out->naddrs = n;
  /* Leave from this device's own rails, in step with the peer's. */
  memcpy(out->locals, dev, sizeof(*dev) * (size_t)ndev);
  out->nlocals = ndev;
  /* Every rail gets the same number of streams, at least one. */
  int nstreams = (int)rn_params()->socket_nstreams;
  if (ndev > 1) nstreams = (nstreams + ndev - 1) / ndev * ndev;
  if (nstreams > RN_TCP_MAX_STREAMS) nstreams = RN_TCP_MAX_STREAMS / ndev * ndev;
  out->nstreams = nstreams;
  /* Both standbys, as one more rail of as many streams as each rail
   * (stream i goes from locals[i % n] to addrs[i % n]): only when both
   * sides have one and as many rails, so the streams pair up alike. */
  if (peer_standby && dev_standby && as_many && n < RN_MAX_RAILS) {
    int per = nstreams / n;
    if (per * (n + 1) > RN_TCP_MAX_STREAMS) per = RN_TCP_MAX_STREAMS / (n + 1);
    out->locals[n] = dev[n];
    out->naddrs = out->nlocals = n + 1;
    out->nstreams = per * (n + 1);
    out->standby = 1;
  } else if ((peer_standby || dev_standby) && name != NULL) {
    RN_INFO(NCCL_NET,
            "streams to %s: no standby for this comm (this device's: %s; the peer's: %s; rails "
            "here %d, there %d)",
            name, dev_standby ? "yes" : "none", peer_standby ? "yes" : "none", rails_here,
            rails_there);
  }
}

/* What streams opened again later leave from (rn_tcp_lazy_on_streams):
 * the rails plan paired with the peer's, the device's standby (NULL: none)
 * last.  Paired, the rails are as many as the peer's, so the standby is
 * kept only where the devices had as many rails when plan was made. */
void rn_tcp_plan_keep(const struct rn_tcp_plan *plan, const union rn_sockaddr *standby,
                      union rn_sockaddr *locals, int *nlocals, int *local_standby) {
  const int nrails = plan->nlocals - plan->standby;
  memcpy(locals, plan->locals, sizeof(plan->locals[0]) * (size_t)nrails);
  *nlocals = nrails;
  *local_standby = standby != NULL && plan->standby_ok;
  if (*local_standby) locals[nrails] = *standby;
}

/* The standby dropped from a plan whose dial failed with it. */
void rn_tcp_plan_drop_standby(struct rn_tcp_plan *p) {
  p->naddrs--;
  p->nlocals--;
  p->nstreams = p->nstreams / (p->nlocals + 1) * p->nlocals;
  p->standby = 0;
}

/* A connection of several rails may go without some (struct rn_hello's
 * absent): they, unlike the listener, may be down right now.  Only when
 * each rail has an address of its own at both ends, of one family. */
static int rn_tcp_plan_may_leave_out(const struct rn_tcp_plan *p) {
  if (p->nstreams == 0 || p->naddrs != p->nlocals || p->nlocals < 2) return 0;
  for (int i = 0; i < p->nlocals; i++) {
    if (p->locals[i].sa.sa_family != p->addrs[i].sa.sa_family) return 0;
    for (int j = 0; j < i; j++)
      if (rn_sockaddr_same_host(&p->locals[i], &p->locals[j]) ||
          rn_sockaddr_same_host(&p->addrs[i], &p->addrs[j]))
        return 0;
  }
  return 1;
}

ncclResult_t rn_tcp_plan_dial(const struct rn_tcp_plan *p, uint32_t absent, uint64_t nonce,
                              struct rn_rdv_dial **d) {
  ncclResult_t res = rn_rdv_dial_create_without(p->addrs, p->naddrs, p->locals, p->nlocals, nonce,
                                                p->nstreams, absent, d);
  if (res == ncclSuccess && rn_tcp_plan_may_leave_out(p)) rn_rdv_dial_set_quiet(*d);
  return res;
}

/* Drop the dial to go again without the rails in `out` (why), each said
 * in one WARN; 0, or -1 when no rail other than the standby would be
 * left. */
static int rn_tcp_plan_drop_rails(const char *peer, struct rn_tcp_plan *p, uint32_t *absent,
                                  struct rn_rdv_dial **d, uint32_t out, const char *why) {
  const int sb = p->standby ? p->nlocals - 1 : -1;
  const int nrails = sb >= 0 ? sb : p->nlocals;
  const uint32_t rails = (1u << nrails) - 1;
  if (((*absent | out) & rails) == rails) return -1;
  rn_rdv_dial_destroy(*d);
  *d = NULL;
  if (sb >= 0 && (out & (1u << sb))) {
    /* Perhaps the standby is what failed (its link down): the comm goes
     * on without one rather than not at all. */
    RN_INFO(NCCL_NET, "connection to %s: dialing with the standby failed (%s); dialing without it",
            peer, why);
    rn_tcp_plan_drop_standby(p);
  }
  out &= rails;
  for (int i = 0; i < nrails; i++) {
    if (!(out & (1u << i))) continue;
    char name[32], from[64], to[64];
    rn_tcp_if_name_of(&p->locals[i], name, sizeof(name));
    RN_WARN("connection to %s: rail %s (%s to %s) %s; connecting over the other rail(s), and it "
            "rejoins the comm once it answers",
            peer, name, rn_sockaddr_str(&p->locals[i], from, sizeof(from)),
            rn_sockaddr_str(&p->addrs[i], to, sizeof(to)), why);
  }
  *absent |= out;
  return 0;
}

int rn_tcp_plan_leave_out(const char *peer, struct rn_tcp_plan *p, uint32_t *absent,
                          struct rn_rdv_dial **d, int64_t dial_ms, ncclResult_t res, int ready) {
  if (ready) return 0;
  if (!rn_tcp_plan_may_leave_out(p)) {
    if (res == ncclSuccess || !p->standby || rn_rdv_dial_dropped(*d)) return 0;
    /* The dial said what failed; perhaps the standby (as above). */
    RN_INFO(NCCL_NET, "connection to %s: dialing with the standby failed; dialing without it",
            peer);
    rn_rdv_dial_destroy(*d);
    *d = NULL;
    rn_tcp_plan_drop_standby(p);
    return 1;
  }
  int err = 0, failed = rn_rdv_dial_failed(*d, &err);
  if (res != ncclSuccess && failed >= 0) {
    /* A rail's connect failed (the dial said nothing yet): go on without
     * it if another is left. */
    if (rn_tcp_plan_drop_rails(peer, p, absent, d, 1u << failed, strerror(err)) == 0) return 1;
    char to[64];
    RN_WARN("connect to %s failed: %s (no other rail of the device left to connect over)",
            rn_sockaddr_str(&p->addrs[failed], to, sizeof(to)), strerror(err));
    return -1;
  }
  if (res != ncclSuccess) return 0;
  /* Rails still connecting twice RAILNET_RAIL_STALL_MS after the dial
   * began, while another's sockets all connected, are as good as down (no
   * answer, a black hole): go on without them.  Twice: a lost SYN goes
   * again after a second. */
  uint32_t up, pending = rn_rdv_dial_pending(*d, &up);
  const int64_t bound = 2 * rn_params()->rail_stall_ms;
  if (pending == 0 || up == 0 || rn_clock_ms() - dial_ms < bound) return 0;
  char why[96];
  snprintf(why, sizeof(why), "did not connect within %lld ms (2 x RAILNET_RAIL_STALL_MS)",
           (long long)bound);
  return rn_tcp_plan_drop_rails(peer, p, absent, d, pending, why) == 0;
}

/* ------------------------------------------------------------- opening */

ncclResult_t rn_tcp_lazy_want(struct rn_tcp_comm *c, size_t size) {
  struct rn_tcp_lazy *z = &c->lazy;
  if (z->state != RN_TCP_STREAMS_NONE || !rn_tcp_ctl_room(c)) return ncclSuccess;
  struct rn_tcp_open m = {.msg = c->msg_out};
  rn_tcp_wire_seal(&m, RN_TCP_MSG_OPEN, 0, 0);
  rn_tcp_ctl_queue(c, &m, sizeof(m), NULL, 0, NULL);
  c->msg_out++;
  z->state = RN_TCP_STREAMS_ASKED;
  z->since_ms = rn_clock_ms();
  z->u.tx.open_inline = 0;
  RN_INFO(NCCL_NET,
          "send comm to %s (dev %d): opening its data streams for a message of %zu bytes "
          "(above RAILNET_SOCKET_INLINE, %zu)",
          c->peer, c->base.vdev, size, c->inline_max);
  return rn_tcp_ctl_flush(c);
}

void rn_tcp_lazy_defer(struct rn_tcp_comm *c, struct rn_tcp_req *r, const char *data, uint32_t grid,
                       uint64_t seq, uint32_t idx) {
  struct rn_tcp_lazy *z = &c->lazy;
  r->later_data = data;
  r->later_grid = grid;
  r->later_seq = seq;
  r->later_idx = idx;
  r->later_next = NULL;
  atomic_store(&r->unsent, r->size); /* incomplete until its chunks are written */
  if (z->later_tail != NULL)
    z->later_tail->later_next = r;
  else
    z->later = r;
  z->later_tail = r;
}

/* Send: queue the chunks of sends announced before the streams opened,
 * in order, as far as the queues take them. */
static void rn_tcp_lazy_launch(struct rn_tcp_comm *c) {
  struct rn_tcp_lazy *z = &c->lazy;
  while (z->later != NULL) {
    struct rn_tcp_req *r = z->later;
    if (!rn_tcp_enqueue(c, r, r->later_data, r->size, r->later_grid, r->later_seq, r->later_idx,
                        NULL))
      return; /* full: again at the next progress */
    z->later = r->later_next;
    if (z->later == NULL) z->later_tail = NULL;
  }
}

/* Receiver: listen where the listen comm listened, and say where.  NCCL
 * closes a listen comm once it accepted, and its port then serves the
 * streams too (its accepted sockets hold it anyway), so opening them takes
 * no port more than connect did: the listen comm's socket when the pool
 * kept it (pool.c), else a new one on that port.  With the listen comm
 * still open, another kept listener on the address, else a fresh port.
 * Each comm's streams thus go to its listen comm's port, which serves at
 * most RN_TCP_POOL_PORT_COMMS comms (tcp.h): were they all to go to the
 * few kept listeners, every comm's connections would come from the
 * sender's one address to one port, and the sender's ephemeral ports,
 * each usable once per destination (and for a minute after its close, in
 * TIME_WAIT), would run out at the range's size.  The rendezvous admits
 * only this comm's fresh nonce, with the bounds and rules of every
 * listener. */
static ncclResult_t rn_tcp_lazy_listen(struct rn_tcp_comm *c) {
  struct rn_tcp_lazy *z = &c->lazy;
  if (!rn_tcp_ctl_room(c)) {
    z->reopen = 1; /* answered at a later progress */
    return ncclSuccess;
  }
  z->reopen = 0;
  struct rn_tcp_streams m = {.nonce = rn_rdv_random64(),
                             .msg = c->msg_out,
                             .nrails = (uint32_t)(z->u.rx.nlis - z->u.rx.lis_standby)};
  for (int i = 0; i < z->u.rx.nlis; i++) {
    union rn_sockaddr bound;
    char s[64];
    union rn_sockaddr a = rn_sockaddr_no_port(z->u.rx.lis[i]);
    int *comms = &z->u.rx.lcomms[i];
    /* Its own port's kept socket comes with a count that has this comm
     * already; a new socket there does not know the count, and is not
     * kept. */
    if (!rn_tcp_pool_take_listener(&z->u.rx.lis[i], &z->u.rx.lfd[i], &bound, comms)) {
      if (rn_sock_listen_quiet(&z->u.rx.lis[i], &z->u.rx.lfd[i], &bound) == 0) {
        *comms = RN_TCP_POOL_PORT_COMMS;
      } else if (rn_tcp_pool_listen(&a, &z->u.rx.lfd[i], &bound, comms) != ncclSuccess) {
        for (int k = 0; k < i; k++) close(z->u.rx.lfd[k]);
        return rn_tcp_fail(c, ncclSystemError, "cannot listen on %s for its data streams",
                           rn_sockaddr_str(&a, s, sizeof(s)));
      }
    }
    z->u.rx.lbound[i] = bound;
    rn_sockaddr_to_wire(&bound, &m.addr[i]);
  }
  z->u.rx.nlfd = z->u.rx.nlis;
  if (rn_rdv_create_range(z->u.rx.lfd, z->u.rx.nlfd, m.nonce, 1, RN_TCP_MAX_STREAMS,
                          &z->u.rx.rdv) != ncclSuccess) {
    z->u.rx.rdv = NULL;
    for (int k = 0; k < z->u.rx.nlfd; k++) close(z->u.rx.lfd[k]);
    z->u.rx.nlfd = 0;
    return rn_tcp_fail(c, ncclSystemError, "cannot start the rendezvous of its data streams");
  }
  rn_tcp_wire_seal(&m, RN_TCP_MSG_STREAMS, 0, 0);
  rn_tcp_ctl_queue(c, &m, sizeof(m), NULL, 0, NULL);
  c->msg_out++;
  z->state = RN_TCP_STREAMS_ASKED;
  z->since_ms = rn_clock_ms();
  return ncclSuccess;
}

static void rn_tcp_lazy_unlisten(struct rn_tcp_comm *c) {
  struct rn_tcp_lazy *z = &c->lazy;
  if (z->u.rx.rdv != NULL) rn_rdv_destroy(z->u.rx.rdv);
  z->u.rx.rdv = NULL;
  for (int k = 0; k < z->u.rx.nlfd; k++)
    if (!rn_tcp_pool_put_listener(z->u.rx.lfd[k], &z->u.rx.lbound[k], z->u.rx.lcomms[k]))
      close(z->u.rx.lfd[k]);
  z->u.rx.nlfd = 0;
}

static void rn_tcp_lazy_closing(struct rn_tcp_comm *c);

static ncclResult_t rn_tcp_lazy_idle_streams(struct rn_tcp_comm *c, uint32_t streams);

/* Receiver, the streams just admitted: what the sender did with them
 * before that (rn_tcp_lazy_on_early_down), checked as it would have been
 * had it come after. */
static ncclResult_t rn_tcp_lazy_apply_early(struct rn_tcp_comm *c) {
  struct rn_tcp_lazy *z = &c->lazy;
  const uint32_t out = z->early_out, idle = z->early_idle;
  z->early_out = z->early_idle = 0;
  if (out & ~rn_tcp_streams_all(c))
    return RN_TCP_VIOLATION(c, "streams-down", "streams",
                            "0x%x, read before its %d streams were admitted", out, c->nstreams);
  if (out != 0) rn_tcp_streams_taken_out(c, out);
  if (idle != 0) {
    RN_CHECK(rn_tcp_lazy_idle_streams(c, idle));
    rn_tcp_lazy_closing(c);
  }
  return ncclSuccess;
}

/* Receiver: take the streams in once dialled. */
static ncclResult_t rn_tcp_lazy_admit(struct rn_tcp_comm *c) {
  struct rn_rdv_conn conn;
  int ready = 0;
  ncclResult_t res = rn_rdv_poll(c->lazy.u.rx.rdv, &conn, &ready);
  if (res != ncclSuccess) return rn_tcp_fail(c, res, "admitting its data streams failed");
  if (!ready) return ncclSuccess;
  rn_tcp_lazy_unlisten(c);
  close(conn.ctrl_fd);
  conn.ctrl_fd = -1;
  if (rn_tcp_comm_attach(c, &conn, NULL, c->lazy.u.rx.lbound) != ncclSuccess)
    return rn_tcp_fail(c, ncclSystemError, "its data streams could not be set up");
  if (rn_tcp_rails_left_out(c, "the sender could not reach it when the streams opened") !=
      ncclSuccess)
    return rn_tcp_fail(c, ncclRemoteError, "its data streams came without whole rails");
  return rn_tcp_lazy_apply_early(c);
}

ncclResult_t rn_tcp_lazy_on_early_down(struct rn_tcp_comm *c, const struct rn_tcp_down *d) {
  static const char what[] = "streams-down";
  struct rn_tcp_lazy *z = &c->lazy;
  if (z->early_idle != 0)
    return RN_TCP_VIOLATION(c, what, "state", "its data streams were closed idle already");
  if (d->streams == 0)
    return RN_TCP_VIOLATION(c, what, "streams", "0, expected a nonzero set");
  c->msg_in++;
  /* Checked against the streams' count once they are admitted. */
  if (d->p.flags == RN_TCP_DOWN_IDLE)
    z->early_idle = d->streams;
  else
    z->early_out |= d->streams;
  return ncclSuccess;
}

/* Receiver: no STREAMED message may come now: the sender has no data
 * stream and sent no OPEN since (none, or it closed them idle). */
int rn_tcp_lazy_streamless(const struct rn_tcp_comm *c) {
  const struct rn_tcp_lazy *z = &c->lazy;
  if (z->reopen) return 0;
  return z->state == RN_TCP_STREAMS_NONE || z->state == RN_TCP_STREAMS_CLOSING ||
         (z->state == RN_TCP_STREAMS_ASKED && z->early_idle != 0);
}

ncclResult_t rn_tcp_lazy_on_open(struct rn_tcp_comm *c, const struct rn_tcp_open *m) {
  static const char what[] = "OPEN";
  struct rn_tcp_lazy *z = &c->lazy;
  if (m->p.flags != 0 || m->p.plen != 0 || m->reserved != 0)
    return RN_TCP_VIOLATION(c, what, "flags/plen/reserved", "%u/%u/%u, expected 0", m->p.flags,
                            m->p.plen, m->reserved);
  if (m->msg != c->msg_in)
    return RN_TCP_VIOLATION(c, what, "msg", "%u, expected %u", m->msg, c->msg_in);
  const int closing = z->state == RN_TCP_STREAMS_CLOSING ||
                      (z->state == RN_TCP_STREAMS_ASKED && z->early_idle != 0);
  if (z->state != RN_TCP_STREAMS_NONE && !closing)
    return RN_TCP_VIOLATION(c, what, "state", "data streams already %s",
                            z->state == RN_TCP_STREAMS_UP ? "open" : "being opened");
  c->msg_in++;
  if (closing) {
    z->reopen = 1; /* once the closing streams are read to their end */
    return ncclSuccess;
  }
  return rn_tcp_lazy_listen(c);
}

ncclResult_t rn_tcp_lazy_on_streams(struct rn_tcp_comm *c, const struct rn_tcp_streams *m) {
  static const char what[] = "STREAMS";
  struct rn_tcp_lazy *z = &c->lazy;
  if (m->p.flags != 0 || m->p.plen != 0)
    return RN_TCP_VIOLATION(c, what, "flags/plen", "%u/%u, expected 0", m->p.flags, m->p.plen);
  if (m->msg != c->msg_in)
    return RN_TCP_VIOLATION(c, what, "msg", "%u, expected %u", m->msg, c->msg_in);
  if (z->state != RN_TCP_STREAMS_ASKED)
    return RN_TCP_VIOLATION(c, what, "state", "no OPEN of this comm awaits it");
  if (m->nrails < 1 || m->nrails > RN_TCP_STREAMS_ADDRS)
    return RN_TCP_VIOLATION(c, what, "nrails", "%u, expected 1..%d", m->nrails,
                            RN_TCP_STREAMS_ADDRS);
  union rn_sockaddr peer[RN_TCP_STREAMS_ADDRS];
  const int n = (int)m->nrails;
  const int standby = n < RN_TCP_STREAMS_ADDRS && m->addr[n].family != 0;
  for (int i = 0; i < RN_TCP_STREAMS_ADDRS; i++) {
    if (i < n + standby) {
      if (rn_sockaddr_from_wire(&m->addr[i], &peer[i]) != 0)
        return RN_TCP_VIOLATION(c, what, "addr", "entry %d (family %u): not an address", i,
                                m->addr[i].family);
    } else if (m->addr[i].family != 0) {
      return RN_TCP_VIOLATION(c, what, "addr", "entry %d (family %u) past the %d listener(s)", i,
                              m->addr[i].family, n + standby);
    }
  }
  c->msg_in++;
  /* Its INFO lines said once per comm: at the first opening */
  rn_tcp_plan_streams(peer, n, standby, z->u.tx.locals, z->u.tx.nlocals, z->u.tx.local_standby,
                      z->opened == 0 ? c->peer : NULL, &z->u.tx.plan);
  z->u.tx.nonce = m->nonce;
  z->u.tx.absent = 0;
  z->state = RN_TCP_STREAMS_DIALING;
  z->since_ms = rn_clock_ms();
  return ncclSuccess;
}

/* Sender: dial the receiver's listeners; once dialled, the streams are
 * the comm's (their bytes wait in the sockets until the receiver admits
 * them). */
static ncclResult_t rn_tcp_lazy_dial(struct rn_tcp_comm *c, int64_t now) {
  struct rn_tcp_lazy *z = &c->lazy;
  struct rn_tcp_plan *p = &z->u.tx.plan;
  if (z->u.tx.dial == NULL) {
    if (now < z->u.tx.retry_ms) return ncclSuccess;
    ncclResult_t res = rn_tcp_plan_dial(p, z->u.tx.absent, z->u.tx.nonce, &z->u.tx.dial);
    if (res != ncclSuccess) {
      z->u.tx.dial = NULL;
      return rn_tcp_fail(c, res, "cannot dial its data streams");
    }
    z->u.tx.dial_ms = now;
  }
  struct rn_rdv_conn conn;
  int ready = 0;
  ncclResult_t res = rn_rdv_dial_poll(z->u.tx.dial, &conn, &ready);
  int left = rn_tcp_plan_leave_out(c->peer, p, &z->u.tx.absent, &z->u.tx.dial, z->u.tx.dial_ms,
                                   res, ready);
  if (left > 0) return ncclSuccess; /* dialed again at the next progress */
  if (res != ncclSuccess) {
    int dropped = left == 0 && rn_rdv_dial_dropped(z->u.tx.dial);
    rn_rdv_dial_destroy(z->u.tx.dial);
    z->u.tx.dial = NULL;
    if (dropped && now - z->since_ms <= rn_params()->connect_timeout_ms) {
      z->u.tx.retry_ms = now + 10; /* a busy listener dropped it: again */
      return ncclSuccess;
    }
    return rn_tcp_fail(c, ncclRemoteError, "its data streams could not be dialled (%s)",
                       dropped ? "the receiver dropped them" : "see above");
  }
  if (!ready) {
    if (now - z->since_ms > rn_params()->connect_timeout_ms)
      return rn_tcp_fail(c, ncclRemoteError, "dialing its data streams timed out after %lld ms",
                         (long long)rn_params()->connect_timeout_ms);
    return ncclSuccess;
  }
  rn_rdv_dial_destroy(z->u.tx.dial);
  z->u.tx.dial = NULL;
  close(conn.ctrl_fd); /* the rendezvous' own: the comm's control connection stays */
  conn.ctrl_fd = -1;
  z->standby_set = p->standby;
  if (p->standby) z->standby_addr = p->locals[p->nlocals - 1];
  RN_CHECK(rn_tcp_comm_attach(c, &conn, NULL, p->locals) == ncclSuccess
               ? ncclSuccess
               : rn_tcp_fail(c, ncclSystemError, "its data streams could not be set up"));
  if (z->u.tx.absent != 0 && rn_tcp_rails_left_out(c, "unreachable when its streams opened") !=
                                 ncclSuccess)
    return rn_tcp_fail(c, ncclRemoteError, "its data streams came without whole rails");
  if (c->tc >= 0) RN_CHECK(rn_tcp_comm_set_class(c, c->tc, 1));
  rn_tcp_lazy_launch(c);
  return ncclSuccess;
}

/* ------------------------------------------------------------- closing */

/* Sender: nothing of the streams in flight, nothing waiting for them. */
static int rn_tcp_lazy_quiet(struct rn_tcp_comm *c) {
  if (atomic_load(&c->stream_work) != 0 || c->nbacklog != 0 || c->down_pending != 0) return 0;
  if (c->move.state != RN_TCP_CTL_UP || c->move.dial != NULL) return 0;
  for (int i = 0; i < c->nrails; i++)
    if (atomic_load(&c->rail[i].state) != RN_TCP_RAIL_UP || c->rail[i].dial != NULL) return 0;
  for (int i = 0; i < RN_TCP_NREQS && atomic_load(&c->reqs[i].gen) != 0; i++) {
    const struct rn_tcp_req *r = &c->reqs[i];
    if (r->state == RN_TCP_REQ_ACTIVE && !r->is_recv &&
        ((r->awaits_ack && !atomic_load(&r->acked)) || atomic_load(&r->unsent) != 0))
      return 0;
  }
  return 1;
}

static void rn_tcp_lazy_closed(struct rn_tcp_comm *c, const char *why) {
  struct rn_tcp_lazy *z = &c->lazy;
  int n = c->nstreams;
  rn_tcp_move_stop(c);
  rn_tcp_comm_detach(c);
  z->state = RN_TCP_STREAMS_NONE;
  z->since_ms = rn_clock_ms();
  RN_INFO(NCCL_NET, "%s comm with %s (dev %d): its %d data streams closed: %s",
          c->is_recv ? "receive" : "send", c->peer, c->base.vdev, n, why);
}

/* A sender of several rails keeps its streams: they carry its failover,
 * and opening them again after a rail died meanwhile would fail.  A
 * receiver's streams are kept when its sender keeps them: they come from
 * several of the sender's addresses.  A sender of one rail closes them idle
 * whatever rails the receiver has, and the sweep must then read that for a
 * receiver NCCL no longer calls, or it holds their sockets. */
static int rn_tcp_lazy_keeps(const struct rn_tcp_comm *c) {
  return c->is_recv ? c->move.peer_multi : c->nrails > 1;
}

ncclResult_t rn_tcp_lazy_idle(struct rn_tcp_comm *c, int64_t now) {
  struct rn_tcp_lazy *z = &c->lazy;
  const int64_t idle = rn_params()->socket_idle_ms;
  if (idle == 0 || rn_tcp_lazy_keeps(c) || now - z->used_ms < idle || !rn_tcp_ctl_room(c) ||
      !rn_tcp_lazy_quiet(c))
    return ncclSuccess;
  const uint32_t all = rn_tcp_streams_all(c);
  struct rn_tcp_down d = {.msg = c->msg_out, .streams = all};
  rn_tcp_wire_seal(&d, RN_TCP_MSG_DOWN, RN_TCP_DOWN_IDLE, 0);
  rn_tcp_ctl_queue(c, &d, sizeof(d), NULL, 0, NULL);
  c->msg_out++;
  char why[96];
  snprintf(why, sizeof(why), "idle for %lld ms (RAILNET_SOCKET_IDLE_MS)",
           (long long)(now - z->used_ms));
  rn_tcp_lazy_closed(c, why);
  return rn_tcp_ctl_flush(c);
}

/* An idle DOWN closes every stream. */
static ncclResult_t rn_tcp_lazy_idle_streams(struct rn_tcp_comm *c, uint32_t streams) {
  const uint32_t all = rn_tcp_streams_all(c);
  if (streams != all)
    return RN_TCP_VIOLATION(c, "streams-down (idle)", "streams", "0x%x, expected all of them, 0x%x",
                            streams, all);
  return ncclSuccess;
}

ncclResult_t rn_tcp_lazy_on_idle(struct rn_tcp_comm *c, const struct rn_tcp_down *d) {
  if (c->lazy.state != RN_TCP_STREAMS_UP)
    return RN_TCP_VIOLATION(c, "streams-down (idle)", "state", "no data stream is open");
  RN_CHECK(rn_tcp_lazy_idle_streams(c, d->streams));
  c->msg_in++;
  rn_tcp_lazy_closing(c);
  return ncclSuccess;
}

/* Receiver: the sender closed the streams idle.  Each is read to its end:
 * what the sender wrote before closing lands. */
static void rn_tcp_lazy_closing(struct rn_tcp_comm *c) {
  c->lazy.state = RN_TCP_STREAMS_CLOSING;
  c->lazy.since_ms = rn_clock_ms();
  rn_tcp_move_stop(c);
  if (c->nthreads > 0) rn_tcp_wake_all(c);
}

/* Receiver: the closing streams all ended. */
static ncclResult_t rn_tcp_lazy_drained(struct rn_tcp_comm *c) {
  for (int i = 0; i < c->nstreams; i++)
    if (!atomic_load(&c->stream[i].dead)) return ncclSuccess;
  rn_tcp_lazy_closed(c, "the sender closed them idle");
  return c->lazy.reopen ? rn_tcp_lazy_listen(c) : ncclSuccess;
}

/* ------------------------------------------------------------ progress */

/* Sender, OPEN sent and no answer after `waited` ms.  Past
 * RAILNET_CONNECT_TIMEOUT_MS, an OPEN still in the control connection's
 * socket (not acknowledged by the receiver's host) fails the comm; one
 * the receiver's host took waits for its process, which is stopped or
 * busy, as NCCL's own transports would (the control connection's
 * keepalive ends the wait if that host goes). */
static ncclResult_t rn_tcp_lazy_asked(struct rn_tcp_comm *c, int64_t waited) {
  struct rn_tcp_lazy *z = &c->lazy;
  const int64_t limit = rn_params()->connect_timeout_ms;
  uint64_t outq = 1;
  if (waited <= limit) return ncclSuccess;
  if (rn_tcp_fd_tx(c->ctrl_fd, NULL, &outq) != 0 || outq > 0)
    return rn_tcp_fail(c, ncclRemoteError,
                       "the receiver did not answer its OPEN within %lld ms, and its host has "
                       "not acknowledged it (%llu bytes unacknowledged)",
                       (long long)limit, (unsigned long long)outq);
  if (!z->open_said)
    RN_INFO(NCCL_NET,
            "send comm with %s: the receiver's host took its OPEN %lld ms ago and its process has "
            "not answered (stopped or busy); waiting for it, as NCCL's own transports do",
            c->peer, (long long)waited);
  z->open_said = 1;
  return ncclSuccess;
}

ncclResult_t rn_tcp_lazy_progress(struct rn_tcp_comm *c) {
  struct rn_tcp_lazy *z = &c->lazy;
  switch (z->state) {
    case RN_TCP_STREAMS_NONE:
      return c->is_recv && z->reopen ? rn_tcp_lazy_listen(c) : ncclSuccess;
    case RN_TCP_STREAMS_ASKED:
      if (c->is_recv) return rn_tcp_lazy_admit(c);
      return rn_tcp_lazy_asked(c, rn_clock_ms() - z->since_ms);
    case RN_TCP_STREAMS_DIALING:
      return rn_tcp_lazy_dial(c, rn_clock_ms());
    case RN_TCP_STREAMS_UP:
      if (c->is_recv) return ncclSuccess;
      if (z->later != NULL) rn_tcp_lazy_launch(c);
      return ncclSuccess; /* idle: rn_tcp_rails_tick */
    case RN_TCP_STREAMS_CLOSING:
      return rn_tcp_lazy_drained(c);
  }
  return ncclSuccess;
}

int rn_tcp_lazy_sweep(struct rn_tcp_comm *c, int64_t now) {
  struct rn_tcp_lazy *z = &c->lazy;
  if (z->state == RN_TCP_STREAMS_UP && rn_tcp_lazy_keeps(c)) return 0; /* never idle */
  if (atomic_load(&c->error) == ncclSuccess) {
    /* Errors surface through the comm's own calls. */
    if (!c->is_recv && z->state == RN_TCP_STREAMS_UP)
      (void)rn_tcp_lazy_idle(c, now);
    else if (c->is_recv && z->state != RN_TCP_STREAMS_NONE)
      (void)rn_tcp_progress(c);
  }
  return z->state != RN_TCP_STREAMS_NONE;
}

void rn_tcp_lazy_free(struct rn_tcp_comm *c) {
  if (c->is_recv) {
    rn_tcp_lazy_unlisten(c);
  } else if (c->lazy.u.tx.dial != NULL) {
    rn_rdv_dial_destroy(c->lazy.u.tx.dial);
    c->lazy.u.tx.dial = NULL;
  }
}
