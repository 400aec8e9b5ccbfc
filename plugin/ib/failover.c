/* Verbs failover: a comm of several rails leaves a rail whose QP failed
 * and goes on over the others, without an error to the caller.  The
 * protocol is in ib.h (struct rn_ib_fo_msg); p2p.c decides when each step
 * runs, this file does the steps: QPs stopped and made again (connect.c),
 * the messages on the bootstrap socket, each checked before use.
 *
 * What makes a replay safe: a stopped QP (error state) places nothing
 * more, so once the receiver stopped its QPs no old write can land after a
 * new one.  A group either completed at the receiver (every immediate
 * counted, or the sender saw every write acknowledged and says so with
 * its sizes) or is written again in full over the new QPs, from a send
 * buffer the caller still owns (its request is not complete). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "railnet/param.h"
#include "ib.h"

/* Completion statuses that say the path failed, not the peer's or our
 * own use of verbs: a rail can be left for these. */
static int rn_ib_fo_link_status(enum ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_LOC_QP_OP_ERR: /* Soft-RoCE: its netdev is down */
    case IBV_WC_RESP_TIMEOUT_ERR:
    case IBV_WC_REM_ABORT_ERR:
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_FATAL_ERR:
    case IBV_WC_GENERAL_ERR:
      return 1;
    default:
      return 0;
  }
}

static uint32_t rn_ib_live_mask(const struct rn_ib_comm *c) {
  uint32_t m = 0;
  for (int p = 0; p < c->nlive; p++) m |= 1u << c->in_use[p];
  return m;
}

static int rn_ib_popcount(uint32_t m) { return __builtin_popcount(m); }

/* The standby's bit when it can take over: it exists and is not in use. */
static uint32_t rn_ib_standby_free(const struct rn_ib_comm *c) {
  return c->standby >= 0 && c->pos[c->standby] < 0 ? 1u << c->standby : 0;
}

/* Every connected rail, the standby included. */
static uint32_t rn_ib_connected_mask(const struct rn_ib_comm *c) { return (1u << c->nrails) - 1; }

/* The connected rails but the standby. */
static uint32_t rn_ib_rails_mask(const struct rn_ib_comm *c) {
  uint32_t m = rn_ib_connected_mask(c);
  return c->standby >= 0 ? m & ~(1u << c->standby) : m;
}

int rn_ib_fo_rail_failed(struct rn_ib_comm *c, int r, const struct ibv_wc *wc) {
  if (r < 0 || r >= c->nrails || c->pos[r] < 0) return 1; /* already left */
  if (c->dead & (1u << r)) return 1;                     /* already said */
  uint32_t left = rn_ib_live_mask(c) & ~c->dead & ~(1u << r);
  uint32_t sb = left ? 0 : rn_ib_standby_free(c);
  if (!rn_ib_fo_link_status(wc->status) || (left | sb) == 0 || c->error != ncclSuccess) return 0;
  if (!c->dead) c->recover_ms = rn_clock_ms();
  c->dead |= 1u << r;
  c->rail[r].failures++;
  char then[160];
  if (left)
    snprintf(then, sizeof(then), "going on over %d rail(s)", rn_ib_popcount(left));
  else
    snprintf(then, sizeof(then), "every rail is down, so the standby NIC %s takes over",
             c->rail[c->standby].port->nic->name);
  RN_WARN("%s: rail %d (%s) of the %s comm with %s failed: %s (status %d, vendor error 0x%x, QP "
          "%u); %s",
          c->rail[0].port->nic->name, r, c->rail[r].port->nic->name,
          c->is_send ? "send" : "receive", c->peer, rn_ibv_wc_status_str(wc->status),
          (int)wc->status, wc->vendor_err, wc->qp_num, then);
  return 1;
}

/* --- messages ------------------------------------------------------------ */

/* A message half sent goes out in full before the next is written over
 * it (2.7 kB on a connection that carries nothing else: only a peer that
 * stopped reading makes this wait, for at most a second).  Unsent, a FAIL
 * is dropped: the next message says more. */
static ncclResult_t rn_ib_fo_out_drain(struct rn_ib_comm *c) {
  if (c->fo_out_off == 0) {
    c->fo_out_len = 0;
    return ncclSuccess;
  }
  int64_t until = rn_clock_ms() + 1000;
  while (c->fo_out_off < c->fo_out_len) {
    struct pollfd pfd = {.fd = c->ctrl_fd, .events = POLLOUT};
    if (rn_clock_ms() > until || poll(&pfd, 1, 100) < 0) break;
    ssize_t n = send(c->ctrl_fd, (char *)&c->fo_out + c->fo_out_off,
                     c->fo_out_len - c->fo_out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) c->fo_out_off += (size_t)n;
    else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
  }
  if (c->fo_out_off < c->fo_out_len) {
    RN_WARN("%s: the control connection to %s took no more of a message", rn_ib_comm_nic(c),
            c->peer);
    return ncclRemoteError;
  }
  c->fo_out_len = c->fo_out_off = 0;
  return ncclSuccess;
}

/* Start a message in c->fo_out (after rn_ib_fo_out_drain). */
static void rn_ib_fo_start(struct rn_ib_comm *c) { memset(&c->fo_out, 0, sizeof(c->fo_out)); }

static void rn_ib_fo_queue(struct rn_ib_comm *c, enum rn_ib_fo_type type) {
  c->fo_out.magic = RN_IB_FO_MAGIC;
  c->fo_out.type = (uint8_t)type;
  c->fo_out_off = 0;
  c->fo_out_len = sizeof(c->fo_out);
}

void rn_ib_fo_report(struct rn_ib_comm *c) {
  uint32_t news = c->dead & ~c->reported;
  if (!news || c->fo_out_len) return; /* the next call names them */
  rn_ib_fo_start(c);
  c->fo_out.epoch = c->epoch;
  c->fo_out.rails = c->dead;
  c->reported |= c->dead;
  rn_ib_fo_queue(c, RN_IB_FO_FAIL);
}

/* The rails in use become keep; a sender looks again at the others'
 * ports after 1, 2, 4, ... 16 s (doubling at each rail failure). */
static void rn_ib_fo_leave(struct rn_ib_comm *c, uint32_t keep) {
  uint32_t all = rn_ib_rails_mask(c);
  if (all & ~keep & ~c->left) {
    c->probe_wait_ms = c->probe_wait_ms ? 2 * c->probe_wait_ms : 1000;
    if (c->probe_wait_ms > 16000) c->probe_wait_ms = 16000;
    c->probe_ms = rn_clock_ms() + c->probe_wait_ms;
  }
  c->left = all & ~keep;
  c->alive_calls = 1; /* the next call reads the clock (see rn_ib_ctrl) */
  c->nlive = 0;
  for (int r = 0; r < c->nrails; r++) {
    c->pos[r] = -1;
    if (!(keep & (1u << r))) continue;
    c->pos[r] = (int8_t)c->nlive;
    c->in_use[c->nlive++] = r;
  }
  c->dead = 0;
  c->reported = 0;
}

/* Every rail's QPs freed; new ones (INIT) on the rails in keep. */
static ncclResult_t rn_ib_fo_renew(struct rn_ib_comm *c, uint32_t keep) {
  /* A failed rail's QPs only stop: destroying a QP whose path died can
   * take seconds (Soft-RoCE: 2.3 s), so they wait for the comm's close. */
  for (int r = 0; r < c->nrails; r++) {
    rn_ib_rail_stop(c, r);
    if (keep & (1u << r)) rn_ib_rail_free(c, r);
  }
  rn_ib_rate_reset(c);
  rn_ib_fo_leave(c, keep);
  for (int p = 0; p < c->nlive; p++) RN_CHECK(rn_ib_rail_open(c, c->in_use[p]));
  return ncclSuccess;
}

static void rn_ib_fo_qpns(struct rn_ib_comm *c) {
  memset(c->fo_out.qpn, 0, sizeof(c->fo_out.qpn));
  for (int p = 0; p < c->nlive; p++)
    for (int k = 0; k < c->nqps; k++)
      c->fo_out.qpn[c->in_use[p]][k] = c->rail[c->in_use[p]].qp[k].qp->qp_num;
}

/* Sender: new QPs on the rails in keep, REBUILD queued. */
static ncclResult_t rn_ib_fo_rebuild(struct rn_ib_comm *c, uint32_t keep) {
  c->recover_ms = rn_clock_ms();
  c->epoch++;
  c->recovering = 1;
  RN_CHECK(rn_ib_fo_renew(c, keep));
  int64_t renew_ms = rn_clock_ms() - c->recover_ms;
  RN_CHECK(rn_ib_fo_out_drain(c));
  rn_ib_fo_start(c);
  c->fo_out.epoch = c->epoch;
  c->fo_out.rails = keep;
  c->fo_out.seq = c->seq;
  for (int i = 0; i < RN_IB_SLOTS; i++) {
    if (c->seq + i < RN_IB_SLOTS) continue;
    uint64_t s = c->seq + (uint64_t)i - RN_IB_SLOTS;
    int slot = (int)(s % RN_IB_SLOTS);
    if (c->sent_seq[slot] != s + 1 || !c->sent_done[slot]) continue;
    c->fo_out.done |= 1u << i;
    for (int k = 0; k < c->sent[slot].n; k++) c->fo_out.sizes[slot][k] = c->sent[slot].size[k];
  }
  rn_ib_fo_qpns(c);
  rn_ib_fo_queue(c, RN_IB_FO_REBUILD);
  RN_INFO(NCCL_NET,
          "%s: send comm with %s: new QPs on %d rail(s) in %lld ms (rebuild %u), waiting for the "
          "peer",
          c->rail[0].port->nic->name, c->peer, c->nlive, (long long)renew_ms, c->epoch);
  return ncclSuccess;
}

ncclResult_t rn_ib_fo_begin(struct rn_ib_comm *c) {
  uint32_t keep = rn_ib_live_mask(c) & ~c->dead;
  if (keep == 0) keep = rn_ib_standby_free(c);
  if (keep == 0) {
    RN_WARN("%s: every rail of the send comm with %s failed", c->rail[0].port->nic->name, c->peer);
    return ncclRemoteError;
  }
  return rn_ib_fo_rebuild(c, keep);
}

ncclResult_t rn_ib_fo_probe(struct rn_ib_comm *c) {
  if (!c->is_send || !c->left || c->recovering || c->dead) return ncclSuccess;
  int64_t now = rn_clock_ms();
  if (now < c->probe_ms) return ncclSuccess;
  uint32_t back = 0;
  for (int r = 0; r < c->nrails; r++) {
    if (!(c->left & (1u << r))) continue;
    const struct rn_ib_port *port = c->rail[r].port;
    struct ibv_port_attr pa;
    if (rn_ibv_query_port(port->device->context, (uint8_t)port->num, &pa) == ncclSuccess &&
        pa.state == IBV_PORT_ACTIVE)
      back |= 1u << r;
  }
  if (!back) {
    c->probe_ms = now + c->probe_wait_ms;
    return ncclSuccess;
  }
  for (int r = 0; r < c->nrails; r++)
    if (back & (1u << r))
      RN_INFO(NCCL_NET, "%s: rail %d (%s) of the send comm with %s is back (port active): taking it "
              "in again", c->rail[0].port->nic->name, r, c->rail[r].port->nic->name, c->peer);
  uint32_t keep = rn_ib_live_mask(c) | back;
  if (c->standby >= 0 && (keep & (1u << c->standby))) {
    keep &= ~(1u << c->standby);
    RN_INFO(NCCL_NET, "%s: the send comm with %s gives its standby NIC %s back",
            c->rail[0].port->nic->name, c->peer, c->rail[c->standby].port->nic->name);
  }
  return rn_ib_fo_rebuild(c, keep);
}

/* The whole message in c->fo_in, checked against what this side expects. */
static ncclResult_t rn_ib_fo_check(struct rn_ib_comm *c) {
  struct rn_ib_fo_msg *m = &c->fo_in;
  const char *nic = c->rail[0].port->nic->name;
  int want_send = m->type == RN_IB_FO_FAIL || m->type == RN_IB_FO_REBUILT;
  if (m->magic != RN_IB_FO_MAGIC || m->type < RN_IB_FO_FAIL || m->type > RN_IB_FO_READY ||
      want_send != c->is_send) {
    RN_WARN("%s: peer %s broke the protocol: control message magic 0x%08x type %u on a %s comm",
            nic, c->peer, m->magic, m->type, c->is_send ? "send" : "receive");
    return ncclRemoteError;
  }
  uint32_t all = rn_ib_connected_mask(c);
  switch (m->type) {
    case RN_IB_FO_FAIL:
      if ((m->rails & ~all) || m->epoch > c->epoch) {
        RN_WARN("%s: peer %s broke the protocol: FAIL names rails 0x%x in rebuild %u (%d rails, "
                "rebuild %u)",
                nic, c->peer, m->rails, m->epoch, c->nrails, c->epoch);
        return ncclRemoteError;
      }
      return ncclSuccess;
    case RN_IB_FO_REBUILD:
    case RN_IB_FO_REBUILT: {
      int rebuild = m->type == RN_IB_FO_REBUILD;
      uint32_t want_epoch = rebuild ? c->epoch + 1 : c->epoch;
      uint32_t rails = rebuild ? m->rails : rn_ib_live_mask(c);
      if (m->epoch != want_epoch || (!rebuild && !c->recovering) || rails == 0 ||
          (rails & ~all) || (!rebuild && m->rails != 0)) {
        RN_WARN("%s: peer %s broke the protocol: %s for rebuild %u with rails 0x%x (expected "
                "rebuild %u%s, rails within 0x%x)",
                nic, c->peer, rebuild ? "REBUILD" : "REBUILT", m->epoch, m->rails, want_epoch,
                !rebuild && !c->recovering ? ", none under way" : "", all);
        return ncclRemoteError;
      }
      for (int r = 0; r < c->nrails; r++)
        for (int k = 0; k < RN_IB_MAX_QPS; k++) {
          uint32_t q = m->qpn[r][k];
          int want = (rails & (1u << r)) && k < c->nqps;
          if (want ? q < 2 || q > 0xffffff : q != 0) {
            RN_WARN("%s: peer %s broke the protocol: %s rail %d QP %d number 0x%x", nic, c->peer,
                    rebuild ? "REBUILD" : "REBUILT", r, k, q);
            return ncclRemoteError;
          }
        }
      /* The sender cannot be past what was announced, nor behind the
       * oldest receive in flight; the receiver cannot have whole what was
       * never posted. */
      int bad = rebuild ? m->seq > c->fifo_posted || m->seq + RN_IB_SLOTS < c->seq
                        : m->seq > c->seq;
      if (bad) {
        RN_WARN("%s: peer %s broke the protocol: %s sequence %llu (ours %llu, announced %llu)", nic,
                c->peer, rebuild ? "REBUILD" : "REBUILT", (unsigned long long)m->seq,
                (unsigned long long)c->seq, (unsigned long long)c->fifo_posted);
        return ncclRemoteError;
      }
      return ncclSuccess;
    }
    case RN_IB_FO_READY:
      if (!c->recovering || m->epoch != c->epoch) {
        RN_WARN("%s: peer %s broke the protocol: READY for rebuild %u (ours %u%s)", nic, c->peer,
                m->epoch, c->epoch, c->recovering ? "" : ", none under way");
        return ncclRemoteError;
      }
      return ncclSuccess;
  }
  return ncclRemoteError;
}

ncclResult_t rn_ib_fo_io(struct rn_ib_comm *c, int *got, int *eof) {
  *got = 0;
  *eof = 0;
  if (c->ctrl_fd < 0) return ncclSuccess;
  while (c->fo_out_off < c->fo_out_len) {
    ssize_t n = send(c->ctrl_fd, (char *)&c->fo_out + c->fo_out_off,
                     c->fo_out_len - c->fo_out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
    if (n <= 0) {
      *eof = 1;
      return ncclSuccess;
    }
    c->fo_out_off += (size_t)n;
  }
  if (c->fo_out_off == c->fo_out_len) c->fo_out_len = c->fo_out_off = 0;
  while (c->fo_in_off < sizeof(c->fo_in)) {
    ssize_t n = recv(c->ctrl_fd, (char *)&c->fo_in + c->fo_in_off, sizeof(c->fo_in) - c->fo_in_off,
                     MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return ncclSuccess;
    if (n <= 0) {
      *eof = 1;
      return ncclSuccess;
    }
    c->fo_in_off += (size_t)n;
  }
  c->fo_in_off = 0;
  RN_CHECK(rn_ib_fo_check(c));
  *got = 1;
  return ncclSuccess;
}

void rn_ib_fo_stop(struct rn_ib_comm *c) {
  c->recover_ms = rn_clock_ms();
  for (int r = 0; r < c->nrails; r++) rn_ib_rail_stop(c, r);
}

/* Receiver: the receive of sequence s, if one is in flight and not whole. */
static struct rn_ib_req *rn_ib_fo_open_recv(struct rn_ib_comm *c, uint64_t s) {
  struct rn_ib_req *r = &c->recv_reqs[s % RN_IB_SLOTS];
  if (r->kind != RN_IB_REQ_RECV || r->seq != s) return NULL;
  if (r->expected > 0 && r->got == r->expected) return NULL;
  return r;
}

ncclResult_t rn_ib_fo_answer(struct rn_ib_comm *c) {
  const struct rn_ib_fo_msg *m = &c->fo_in;
  /* Receives the sender saw written in full take its sizes; the others
   * wait for their groups again. */
  uint32_t whole_here = 0;
  for (uint64_t s = c->seq > RN_IB_SLOTS ? c->seq - RN_IB_SLOTS : 0; s < c->seq; s++) {
    struct rn_ib_req *r = rn_ib_fo_open_recv(c, s);
    if (!r) continue;
    int i = (int)(s + RN_IB_SLOTS - m->seq);
    if (s < m->seq && i >= 0 && i < RN_IB_SLOTS && (m->done & (1u << i))) {
      for (int k = 0; k < r->n; k++) c->ctl->sizes[r->slot][k] = m->sizes[r->slot][k];
      r->imm_size = -1;
      r->error = 0;
      r->expected = r->got = 1;
      c->fifo_live--;
      whole_here++;
      continue;
    }
    r->got = r->expected = 0;
    r->imm_size = -1;
    r->error = 0;
  }
  /* FIFO elements the sender has not taken go out again on the new QPs
   * (it may have them already: they stay announced). */
  c->fifo_again = m->seq;
  c->epoch = m->epoch;
  c->recovering = 1;
  RN_CHECK(rn_ib_fo_renew(c, m->rails));
  for (int p = 0; p < c->nlive; p++) {
    int r = c->in_use[p];
    RN_CHECK(rn_ib_rail_connect(c, r, m->qpn[r]));
    for (int k = 0; k < c->nqps; k++)
      RN_CHECK(rn_ib_post_recvs(c, rn_ib_qp_index(c, r, k), RN_IB_RECV_DEPTH));
  }
  /* What is whole here now: the sender posts again only the rest. */
  RN_CHECK(rn_ib_fo_out_drain(c));
  rn_ib_fo_start(c);
  c->fo_out.epoch = c->epoch;
  uint64_t lo = c->seq;
  for (uint64_t s = c->seq > RN_IB_SLOTS ? c->seq - RN_IB_SLOTS : 0; s < c->seq && lo == c->seq;
       s++)
    if (rn_ib_fo_open_recv(c, s)) lo = s;
  c->fo_out.seq = lo;
  for (uint64_t s = lo; s < c->seq && s < lo + 32; s++)
    if (!rn_ib_fo_open_recv(c, s)) c->fo_out.done |= 1u << (s - lo);
  rn_ib_fo_qpns(c);
  rn_ib_fo_queue(c, RN_IB_FO_REBUILT);
  RN_INFO(NCCL_NET,
          "%s: receive comm with %s: rebuilt on %d rail(s) in %lld ms (rebuild %u); %u receive(s) "
          "whole by the sender's word, waiting for the rest",
          c->rail[0].port->nic->name, c->peer, c->nlive, (long long)(rn_clock_ms() - c->recover_ms),
          c->epoch, whole_here);
  return ncclSuccess;
}

ncclResult_t rn_ib_fo_finish(struct rn_ib_comm *c) {
  const struct rn_ib_fo_msg *m = &c->fo_in;
  for (int p = 0; p < c->nlive; p++) RN_CHECK(rn_ib_rail_connect(c, c->in_use[p], m->qpn[c->in_use[p]]));
  RN_CHECK(rn_ib_fo_out_drain(c));
  rn_ib_fo_start(c);
  c->fo_out.epoch = c->epoch;
  rn_ib_fo_queue(c, RN_IB_FO_READY);
  c->recovering = 0;
  return ncclSuccess;
}

int rn_ib_fo_delivered(const struct rn_ib_comm *c, uint64_t s) {
  const struct rn_ib_fo_msg *m = &c->fo_in;
  if (s < m->seq) return 1;
  return s - m->seq < 32 && (m->done & (1u << (s - m->seq)));
}

ncclResult_t rn_ib_fo_check_time(struct rn_ib_comm *c) {
  if (!c->recovering && !c->dead) return ncclSuccess;
  int64_t waited = rn_clock_ms() - c->recover_ms;
  if (waited <= rn_params()->rail_timeout_ms) return ncclSuccess;
  RN_WARN("%s: the %s comm with %s did not finish rebuild %u within %lld ms "
          "(RAILNET_RAIL_TIMEOUT_MS)",
          c->rail[0].port->nic->name, c->is_send ? "send" : "receive", c->peer, c->epoch,
          (long long)waited);
  return ncclRemoteError;
}
