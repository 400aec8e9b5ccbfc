/* The rails of a TCP comm: which data streams leave from (send) or arrive
 * at (receive) each local address, their counters and delivery-rate
 * estimates, the choice of a stream for each chunk (weighted by those
 * estimates), and the telemetry (RAILNET_STATS lines, the INFO line at
 * close).
 *
 * The estimate of a send rail is the rate at which TCP saw its bytes
 * acknowledged (tcpi_bytes_acked of its sockets), sampled every
 * RN_TCP_SAMPLE_MS and smoothed (EWMA), taken only while the rail was
 * busy at both ends of the interval (bytes waiting in its sockets or its
 * queues): an idle rail's acknowledgements say how much it was given, not
 * what it can carry.  A rail that ran dry while another was still busy,
 * and was given no chunk in the interval while another was, was given too
 * little: its estimate grows by a quarter per interval until it is busy
 * too.  A rail that got chunks and still ran dry is waiting for a slower
 * one (the messages in flight are held up there), not underestimated.  Chunks go where they would be delivered first: to the rail
 * whose bytes in flight plus the chunk, divided by its rate, are least;
 * so a message is split in proportion to the rates, and a message of one
 * chunk goes whole to the least loaded rail. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "railnet/param.h"
#include "tcp.h"

#define RN_TCP_BUSY_BYTES 65536 /* unacknowledged bytes that keep a rail busy for a while */
#define RN_TCP_RATE_ALPHA 0.5   /* weight of a new sample */
#define RN_TCP_RATE_INIT 1.25e9 /* bytes/s a rail is assumed to carry before it is measured */
#define RN_TCP_RATE_FLOOR 1e5   /* no estimate goes below this (bytes/s) */

static _Atomic uint64_t rn_tcp_comm_ids;

static void rn_tcp_rail_sockets(const struct rn_tcp_comm *c, const struct rn_tcp_rail *r,
                                uint64_t *acked, uint64_t *outq);

void rn_tcp_rails_start(struct rn_tcp_comm *c) {
  int64_t now = rn_clock_ms();
  c->id = atomic_fetch_add(&rn_tcp_comm_ids, 1) + 1;
  c->created_ms = c->sample_ms = c->stats_ms = c->landed_ms = c->lazy.ctl_ms = now;
}

int rn_tcp_rails_init(struct rn_tcp_comm *c) {
  int64_t now = rn_clock_ms();
  c->nrails = 0;
  c->standby = -1;
  /* One rail per distinct local address of the streams (beyond
   * RN_MAX_RAILS, the last takes the rest).  The table is sized to them:
   * most comms have one, and it stays off the comm's own pages. */
  union rn_sockaddr seen[RN_MAX_RAILS];
  int n = 0;
  for (int i = 0; i < c->nstreams; i++) {
    int r = 0;
    while (r < n && !rn_sockaddr_same_host(&seen[r], &c->stream[i].local)) r++;
    if (r == n && n < RN_MAX_RAILS) seen[n++] = c->stream[i].local;
    c->stream[i].rail = r < n ? r : RN_MAX_RAILS - 1;
  }
  c->rail = calloc((size_t)(n > 0 ? n : 1), sizeof(*c->rail));
  if (c->rail == NULL) return -1;
  c->nrails = n;
  for (int r = 0; r < n; r++) {
    struct rn_tcp_rail *rail = &c->rail[r];
    rail->local = seen[r];
    rn_tcp_if_name_of(&seen[r], rail->name, sizeof(rail->name));
    rail->rate = RN_TCP_RATE_INIT;
    rail->progress_ms = now;
    rail->rejoin_fd = -1;
  }
  for (int i = 0; i < c->nstreams; i++) {
    struct rn_tcp_rail *rail = &c->rail[c->stream[i].rail];
    rail->stream[rail->nstreams++] = i;
    rail->streams |= 1u << i;
  }
  int64_t ack = rn_params()->rail_ack;
  c->ack = !c->is_recv && (ack < 0 ? c->nrails > 1 : ack == 1);
  if (c->lazy.standby_set) rn_tcp_rails_set_standby(c, &c->lazy.standby_addr);
  return 0;
}

void rn_tcp_rails_baseline(struct rn_tcp_comm *c) {
  /* A kept connection's sockets carried earlier comms' bytes (pool.c),
   * and every stream its hello: this comm's rates count from its first
   * streamed message, before which its streams carried nothing. */
  for (int r = 0; r < c->nrails && !c->is_recv; r++) {
    uint64_t outq;
    rn_tcp_rail_sockets(c, &c->rail[r], &c->rail[r].acked_prev, &outq);
  }
}

void rn_tcp_rails_set_standby(struct rn_tcp_comm *c, const union rn_sockaddr *addr) {
  for (int i = 0; i < c->nrails && c->nrails > 1; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    if (!rn_sockaddr_same_host(&r->local, addr)) continue;
    r->standby = 1;
    c->standby = i;
    RN_INFO(NCCL_NET,
            "%s comm with %s (dev %d): standby NIC %s (%d stream(s)) carries data only while "
            "every rail of the device is down",
            c->is_recv ? "receive" : "send", c->peer, c->base.vdev, r->name, r->nstreams);
    return;
  }
}

/* Send: rails other than the standby that are up. */
static int rn_tcp_rails_primary_up(const struct rn_tcp_comm *c) {
  int n = 0;
  for (int i = 0; i < c->nrails; i++)
    n += !c->rail[i].standby && atomic_load(&c->rail[i].state) == RN_TCP_RAIL_UP;
  return n;
}

int rn_tcp_rail_usable(const struct rn_tcp_comm *c, int i) {
  const struct rn_tcp_rail *r = &c->rail[i];
  if (atomic_load(&r->state) != RN_TCP_RAIL_UP) return 0;
  return !r->standby || rn_tcp_rails_primary_up(c) == 0;
}

/* Send: a usable rail other than ri. */
static int rn_tcp_rails_other_usable(const struct rn_tcp_comm *c, int ri) {
  for (int i = 0; i < c->nrails; i++)
    if (i != ri && rn_tcp_rail_usable(c, i)) return 1;
  return 0;
}

int rn_tcp_fd_tx(int fd, uint64_t *acked, uint64_t *outq) {
  int rc = 0;
  if (acked != NULL) {
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    rc = getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 ? 0 : -1;
    *acked = rc == 0 ? ti.tcpi_bytes_acked : 0;
  }
  if (outq != NULL) {
    int q = 0;
    *outq = ioctl(fd, SIOCOUTQ, &q) == 0 && q > 0 ? (uint64_t)q : 0;
  }
  return rc;
}

/* How long a peer's host has to answer a window probe: the answer can
 * wait for the receiver's rate limit on answers out of its window
 * (tcp_invalid_ratelimit, 500 ms). */
#define RN_TCP_PROBE_GRACE_MS 3000

/* The peer's host is there (it acknowledged every byte and answers the
 * window probes) and its process reads nothing: stopped, in a debugger,
 * starved.  NCCL's own transports wait for such a peer, and so does
 * this one.  A dead path leaves bytes unacknowledged, or a probe
 * unanswered past the grace, and the bounds apply (a path that dies
 * while the window is closed shows at the next probe, which the
 * kernel's backoff may put up to TCP_RTO_MAX, 120 s, after the last).
 * So: fd's queued bytes wait on the peer's receive window alone (bytes
 * queued, *queued says whether any are when not NULL; none
 * unacknowledged; the last window probe answered). */
static int rn_tcp_fd_window_held(int fd, int *queued) {
  struct tcp_info ti;
  socklen_t len = sizeof(ti);
  int q = 0;
  memset(&ti, 0, sizeof(ti));
  int some = ioctl(fd, SIOCOUTQ, &q) == 0 && q > 0;
  if (queued != NULL) *queued = some;
  return some && getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_unacked == 0 &&
         (ti.tcpi_probes == 0 || ti.tcpi_last_ack_recv < RN_TCP_PROBE_GRACE_MS);
}

/* Send: every stream of the rail with bytes queued is window-held. */
static int rn_tcp_rail_window_held(const struct rn_tcp_comm *c, const struct rn_tcp_rail *r) {
  int held = 0;
  for (int k = 0; k < r->nstreams; k++) {
    const struct rn_tcp_stream *s = &c->stream[r->stream[k]];
    int queued;
    if (atomic_load(&s->dead)) continue;
    if (!rn_tcp_fd_window_held(s->fd, &queued)) {
      if (queued) return 0;
      continue;
    }
    held = 1;
  }
  return held;
}

/* Bytes TCP acknowledged on the rail's sockets, and bytes still in them. */
static void rn_tcp_rail_sockets(const struct rn_tcp_comm *c, const struct rn_tcp_rail *r,
                                uint64_t *acked, uint64_t *outq) {
  *acked = 0;
  *outq = 0;
  for (int k = 0; k < r->nstreams; k++) {
    uint64_t a, q;
    rn_tcp_fd_tx(c->stream[r->stream[k]].fd, &a, &q);
    *acked += a;
    *outq += q;
  }
}

uint64_t rn_tcp_rail_outq(const struct rn_tcp_comm *c, const struct rn_tcp_rail *r) {
  uint64_t outq = 0;
  for (int k = 0; k < r->nstreams; k++) {
    uint64_t q;
    rn_tcp_fd_tx(c->stream[r->stream[k]].fd, NULL, &q);
    outq += q;
  }
  return outq;
}

static int rn_tcp_rail_busy(const struct rn_tcp_rail *r) {
  return r->outq >= RN_TCP_BUSY_BYTES || atomic_load(&r->pending) > 0;
}

/* Any byte queued or unacknowledged: busy or not (too little to measure a
 * rate by), a rail with bytes in flight that TCP sees none of arrive has
 * stopped (the tail of a message left in a socket when its path died). */
static int rn_tcp_rail_inflight(const struct rn_tcp_rail *r) {
  return r->outq > 0 || atomic_load(&r->pending) > 0;
}

/* What a rule that takes a rail out knows of rail i, the one it weighs the
 * stalled rail against: bytes moved on it, or it had none to move (an idle
 * rail may be dead too; nothing has shown it), or it is a standby kept back. */
static void rn_tcp_rail_standing(const struct rn_tcp_comm *c, int i, char *buf, size_t len) {
  const struct rn_tcp_rail *r = &c->rail[i];
  const char *how = !rn_tcp_rail_usable(c, i)    ? "is up"
                    : rn_tcp_rail_inflight(r) ? "progressed"
                                              : "delivered all it was given";
  snprintf(buf, len, "%s %s %s", r->standby ? "the standby" : "rail", r->name, how);
}

/* The control connection can move to another rail (move.c): its bytes are
 * kept, and the comm has another rail (or a standby) to move to. */
int rn_tcp_ctl_movable(const struct rn_tcp_comm *c) {
  return c->move.enabled && (c->nrails > 1 || c->standby >= 0);
}

/* The bound on waiting for the control connection (its bytes in flight,
 * or ACKs it is to bring) is RAILNET_RAIL_TIMEOUT_MS; where it can move,
 * the move goes first.  Noticing its path died takes up to twice
 * RAILNET_RAIL_STALL_MS (a sender with nothing in flight sends a WANT
 * after one, and takes the rail out when that is not acknowledged within
 * another), and the move is itself bounded by RAILNET_RAIL_TIMEOUT_MS;
 * the bound counts from there.  (Twice the bound alone left the move no
 * time where the stall is as long as the bound, as at the lowest bound
 * with the default stall, and none where it is longer.) */
static int64_t rn_tcp_ctl_bound(const struct rn_tcp_comm *c, int64_t limit) {
  return rn_tcp_ctl_movable(c) ? 2 * (int64_t)rn_params()->rail_stall_ms + 2 * limit : limit;
}

/* Receive: nothing but this side's own bytes (clear-to-sends, ACKs) waits
 * on a control connection that can move, and a data stream on another
 * rail is still open.  Only the sender moves the connection, and a sender
 * with nothing to send is not called (NCCL's proxy calls a comm only for
 * its own operations), so it cannot see the path die until it next
 * writes; its bytes then go unacknowledged and it moves the connection
 * (rn_tcp_rails_sample), and this side's kept bytes follow.  Meanwhile the
 * open stream is the sender's host answering: TCP keepalive ends it
 * (RAILNET_SOCKET_TIMEOUT_MS) when that host goes, and a process that
 * ended closes it, so the control connection's bound applies again. */
int rn_tcp_ctl_sender_moves(const struct rn_tcp_comm *c) {
  if (!c->is_recv || !rn_tcp_ctl_movable(c) || c->rx_left > 0 || c->in_len > 0) return 0;
  if (c->nrails == 0 && atomic_load(&c->stream_work) != 0) return 0;
  for (int i = 0; i < c->nstreams; i++)
    if (c->stream[i].rail != c->move.ctrl_rail && !atomic_load(&c->stream[i].dead)) return 1;
  return 0;
}

/* The control connection carries messages of any size while the data
 * streams open (open.c), and between messages it alone has bytes in
 * flight: the bound on a rail that stopped delivering holds for it too.
 * Either side: bytes written on it and none acknowledged since (a
 * message, a clear-to-send), or a message half read (a peer that hung in
 * the middle of one); receive: also a streamed one announced before the
 * streams opened, and no byte since. */
static void rn_tcp_ctl_sample(struct rn_tcp_comm *c, int64_t now, int away, int64_t limit) {
  struct rn_tcp_lazy *z = &c->lazy;
  uint64_t acked = 0, outq = 0;
  int busy = rn_tcp_fd_tx(c->ctrl_fd, &acked, &outq) == 0 && outq > 0;
  busy |= c->rx_left > 0 || c->in_len > 0;
  if (c->is_recv)
    busy |= c->nrails == 0 && atomic_load(&c->stream_work) != 0;
  else
    busy |= c->out_head != c->out_tail && c->out_lazy == 0;
  const uint64_t mark = acked + c->move.rx; /* moves when either direction does */
  z->ctl_unacked = outq > 0;
  if (!busy || mark != z->ctl_mark || away) {
    z->ctl_mark = mark;
    z->ctl_ms = now;
  } else if (now - z->ctl_ms >= limit && !rn_tcp_ctl_sender_moves(c) &&
             !(outq > 0 && rn_tcp_fd_window_held(c->ctrl_fd, NULL))) {
    rn_tcp_fail(c, ncclRemoteError,
                "control connection: nothing acknowledged or arrived for %lld ms with a message "
                "in flight (RAILNET_RAIL_TIMEOUT_MS)",
                (long long)(now - z->ctl_ms));
  }
}

/* Send: every byte of the streamed sends awaiting their ACKs reached the
 * receiver's host (nothing queued or unacknowledged on any rail up). */
static int rn_tcp_acks_quiet(const struct rn_tcp_comm *c) {
  int quiet = c->acks_in != c->acks_asked && c->out_head == c->out_tail;
  for (int i = 0; i < c->nrails && quiet; i++)
    quiet = atomic_load(&c->rail[i].state) != RN_TCP_RAIL_UP || !rn_tcp_rail_inflight(&c->rail[i]);
  return quiet;
}

/* Send, on a comm whose control connection can move: waiting on the
 * receiver (ACKs owed with every byte delivered, or a send for a
 * clear-to-send it asked for), nothing of this side's queued or
 * unacknowledged on the control connection, and nothing arriving on it for
 * RAILNET_RAIL_STALL_MS.  What it waits for may be stuck on a path that
 * died after this side's last write there, where no rule can see it:
 * nothing of ours is in flight.  A WANT (the receiver takes one at any
 * time; it only makes the receiver's clear-to-sends leave at once) puts 20
 * bytes in flight: acknowledged, the path is alive and the receiver slow;
 * not, and the control-rail rule in rn_tcp_rails_sample takes the rail
 * out, which moves the connection, and the receiver writes its kept bytes
 * again on the new one.  Once per RAILNET_RAIL_STALL_MS of silence; never
 * to a peer that closed or said BYE (nothing more is written to it, and a
 * connection kept for reuse must carry nothing out of turn). */
static void rn_tcp_ctl_probe(struct rn_tcp_comm *c, int64_t now, int away) {
  struct rn_tcp_lazy *z = &c->lazy;
  const int waiting = rn_tcp_ctl_movable(c) && c->move.state == RN_TCP_CTL_UP &&
                      (rn_tcp_acks_quiet(c) || c->want_sent) && c->out_head == c->out_tail &&
                      !z->ctl_unacked && !c->peer_bye && !atomic_load(&c->peer_closed);
  if (!waiting || c->move.rx != z->probe_rx || away) {
    z->probe_rx = c->move.rx;
    z->probe_ms = now;
    return;
  }
  if (now - z->probe_ms < rn_params()->rail_stall_ms || !rn_tcp_ctl_room(c)) return;
  struct rn_tcp_want w = {.msg = c->msg_out};
  rn_tcp_wire_seal(&w, RN_TCP_MSG_WANT, 0, 0);
  rn_tcp_ctl_queue(c, &w, sizeof(w), NULL, 0, NULL);
  c->msg_out++;
  z->probe_ms = now;
}

/* Send: a streamed send awaiting its ACK once its header (or its
 * claiming chunks) left and no rail has bytes queued or unacknowledged by
 * the receiver's host waits on the receiver's plugin alone.  No ACK for
 * the bound then fails the comm: a receiver that stopped acknowledging, or
 * a header or chunk that lost its ACK flag on the way, must not hold the
 * send for ever.  (Bytes still in
 * flight are the rail checks' and TCP_USER_TIMEOUT's.)  The wait counts
 * from the last ACK read or the last send that asked for one. */
static void rn_tcp_ack_sample(struct rn_tcp_comm *c, int64_t now, int away, int64_t limit) {
  const uint64_t mark = c->acks_in + c->acks_asked;
  if (!rn_tcp_acks_quiet(c) || mark != c->acks_mark || away) {
    c->acks_mark = mark;
    c->owed_ms = now;
  } else if (now - c->owed_ms >= limit) {
    rn_tcp_fail(c, ncclRemoteError,
                "the receiver acknowledged none of %llu streamed sends for %lld ms although "
                "every byte reached its host (RAILNET_RAIL_TIMEOUT_MS)",
                (unsigned long long)(c->acks_asked - c->acks_in), (long long)(now - c->owed_ms));
  }
}

/* Send: no rail progressed for the bound, and the receiver's windows
 * alone hold every rail's bytes in flight: said once per such wait,
 * which does not fail the comm. */
static void rn_tcp_held_sample(struct rn_tcp_comm *c, int held, int64_t limit) {
  if (!held) {
    c->idle_said = 0;
    return;
  }
  if (c->idle_said) return;
  RN_INFO(NCCL_NET,
          "send comm with %s: the receiver's host acknowledged every byte and has read nothing "
          "for %lld ms (its window is closed): its process is stopped or busy; waiting for it, "
          "as NCCL's own transports do",
          c->peer, (long long)limit);
  c->idle_said = 1;
}

/* How long one rail may hold the comm up alone before its chunks go again
 * over the others (rn_tcp_rescue_sample): a quarter of
 * RAILNET_RAIL_STALL_MS (250 ms by default), and at least two sampling
 * intervals (RN_TCP_SAMPLE_MS), so that two samples saw it.  Long against
 * the few milliseconds by which proportional striping lets the rails of a
 * message finish apart (a rail cut to a tenth of its rate still finishes
 * its share with the others), short against the stalls of TCP's
 * retransmission timeouts on a lossy rail (200 ms at least, doubling). */
static int64_t rn_tcp_rescue_bound(void) {
  const int64_t quarter = rn_params()->rail_stall_ms / 4;
  return quarter > 2 * RN_TCP_SAMPLE_MS ? quarter : 2 * RN_TCP_SAMPLE_MS;
}

/* Send, on a comm whose sends are acknowledged: one usable rail has bytes
 * in flight (queued, or in its sockets unacknowledged), every other usable
 * rail has delivered all it was given (none in flight), and a send awaits
 * its ACK: the comm waits on that rail alone.  A lossy rail does this in
 * each of TCP's retransmission timeouts (it still trickles bytes, so the
 * stall rule does not take it out, and should not: slow is not failed).
 * Held so for rn_tcp_rescue_bound, the rail's chunks not yet acknowledged
 * go again over the others (rn_tcp_rail_rescue, at the next failover),
 * as MPTCP re-sends a subflow's data that blocks the window. */
static void rn_tcp_rescue_sample(struct rn_tcp_comm *c, int64_t now, int away) {
  int stuck = -1, others = 0;
  if (!c->ack || c->nrails < 2 || c->nbacklog > 0 || away || c->acks_in == c->acks_asked ||
      c->stream[0].queue == NULL) {
    c->held_ms = 0;
    return;
  }
  for (int i = 0; i < c->nrails; i++) {
    const struct rn_tcp_rail *r = &c->rail[i];
    if (!rn_tcp_rail_usable(c, i)) continue;
    if (r->failing || r->rescue_due || (rn_tcp_rail_inflight(r) && stuck >= 0)) {
      c->held_ms = 0;
      return;
    }
    if (rn_tcp_rail_inflight(r))
      stuck = i;
    else
      others++;
  }
  if (stuck < 0 || others == 0) {
    c->held_ms = 0;
    return;
  }
  if (c->held_ms == 0 || c->held_rail != stuck) {
    c->held_ms = now;
    c->held_rail = stuck;
    return;
  }
  if (now - c->held_ms < rn_tcp_rescue_bound()) return;
  c->rail[stuck].rescue_due = 1;
  c->held_ms = 0;
}

/* Samples further apart than this: the caller stopped calling for a
 * while, so (without helper threads) nothing was read or written
 * meanwhile, and what arrived is still unread when the sample runs
 * (before rn_tcp_progress reads).  Every stall clock starts again rather
 * than count the caller's absence as the peer's or the path's. */
#define RN_TCP_AWAY_MS 1000

/* Refresh every rail's estimate (send side: from TCP's acknowledgements
 * while busy; receive side: from the bytes that landed), and apply the
 * bounds and the failover rules. */
static void rn_tcp_rails_sample(struct rn_tcp_comm *c, int64_t now) {
  const int64_t gap = now - c->sample_ms;
  double dt = (double)gap / 1000.0;
  c->sample_ms = now;
  if (dt <= 0) return;
  const int away = gap > RN_TCP_AWAY_MS;
  const int64_t limit = rn_params()->rail_timeout_ms;
  /* Also once its streams are up: a link cut between messages leaves
   * bytes in flight on the control connection alone (a clear-to-send, a
   * WANT), and nothing on the streams for their bound to see.  Where the
   * connection can move, the move goes first and this catches a peer that
   * hung mid-message. */
  const int movable = rn_tcp_ctl_movable(c);
  rn_tcp_ctl_sample(c, now, away, rn_tcp_ctl_bound(c, limit));
  if (c->nrails == 0) return;
  if (c->is_recv) {
    int live = 0, lost = 0;
    for (int i = 0; i < c->nrails; i++) {
      struct rn_tcp_rail *r = &c->rail[i];
      uint64_t b = atomic_load(&r->bytes), d = b - r->bytes_prev;
      uint64_t rd = atomic_load(&r->read), m = rd - r->read_prev;
      r->bytes_prev = b;
      r->read_prev = rd;
      /* Bytes read count, not only chunks landed: a slow rail may take
       * longer than the bound to bring one whole chunk. */
      if (m > 0) r->progress_ms = c->landed_ms = now;
      r->rate += RN_TCP_RATE_ALPHA * ((double)d / dt - r->rate);
    }
    for (int i = 0; i < c->nstreams; i++) {
      live += !atomic_load(&c->stream[i].dead);
      /* lost is written before dead is set (streams.c) */
      lost += atomic_load(&c->stream[i].dead) && c->stream[i].lost;
    }
    if (atomic_load(&c->stream_work) == 0 || away) c->landed_ms = now;
    /* Where the sender has other rails, a rail that stopped holds the
     * bytes still due until the sender takes it out (after
     * RAILNET_RAIL_STALL_MS) and sends them again: that failover goes
     * first, so the bound counts from its end. */
    const int64_t bound = movable ? limit + rn_params()->rail_stall_ms : limit;
    if (live == 0 && lost > 0 && atomic_load(&c->stream_work) != 0)
      rn_tcp_fail(c, ncclRemoteError, "every rail is gone (%d of %d streams lost)", lost,
                  c->nstreams);
    /* A sender whose process stopped mid-message fails this too: its
     * host still answers TCP, but so does the host of a sender whose
     * message was lost on the way (a corrupting peer), and only an answer
     * from the sender's process could tell the two apart. */
    else if (now - c->landed_ms >= bound)
      rn_tcp_fail(c, ncclRemoteError,
                  "no rail delivered a byte for %lld ms while streamed messages were announced "
                  "(RAILNET_RAIL_TIMEOUT_MS)",
                  (long long)(now - c->landed_ms));
    return;
  }
  int was_busy[RN_MAX_RAILS], busy[RN_MAX_RAILS], any_busy = 0, given_any = 0;
  uint64_t delta[RN_MAX_RAILS];
  int64_t given[RN_MAX_RAILS];
  double top = 0;
  for (int i = 0; i < c->nrails; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    uint64_t acked, outq;
    /* Bytes chunks gave it in the interval: queued now or written since. */
    uint64_t b = atomic_load(&r->bytes), p = atomic_load(&r->pending);
    given[i] = (int64_t)(b - r->bytes_prev) + (int64_t)(p - r->pending_prev);
    r->bytes_prev = b;
    r->pending_prev = p;
    given_any |= given[i] > 0;
    was_busy[i] = rn_tcp_rail_busy(r);
    /* Before the first streamed message (rn_tcp_rails_baseline) the
     * streams carried nothing of this comm's. */
    if (c->stream[0].queue != NULL)
      rn_tcp_rail_sockets(c, r, &acked, &outq);
    else
      acked = r->acked_prev, outq = 0;
    delta[i] = acked > r->acked_prev ? acked - r->acked_prev : 0;
    r->acked_prev = acked;
    r->outq = outq;
    busy[i] = was_busy[i] && rn_tcp_rail_busy(r) && atomic_load(&r->state) == RN_TCP_RAIL_UP;
    if (delta[i] > 0 || !rn_tcp_rail_inflight(r) || away) r->progress_ms = now;
    any_busy |= busy[i];
  }
  rn_tcp_ack_sample(c, now, away, rn_tcp_ctl_bound(c, limit));
  rn_tcp_ctl_probe(c, now, away);
  for (int i = 0; i < c->nrails; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    if (busy[i]) r->rate += RN_TCP_RATE_ALPHA * ((double)delta[i] / dt - r->rate);
    if (r->rate < RN_TCP_RATE_FLOOR) r->rate = RN_TCP_RATE_FLOOR;
    if (busy[i] && r->rate > top) top = r->rate;
  }
  /* A busy rail without progress while another rail progresses is taken
   * out (rn_tcp_rails_failover); none progressing at all fails the comm. */
  const int64_t stall = rn_params()->rail_stall_ms;
  int healthy = -1, waiting = 0, fresh = 0;
  for (int i = 0; i < c->nrails; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    if (atomic_load(&r->state) != RN_TCP_RAIL_UP) continue;
    if (now - r->progress_ms < stall) healthy = i;
    waiting |= rn_tcp_rail_inflight(r);
    fresh |= now - r->progress_ms < limit;
  }
  for (int i = 0; i < c->nrails; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    if (atomic_load(&r->state) != RN_TCP_RAIL_UP || r->failing || !rn_tcp_rail_inflight(r) ||
        now - r->progress_ms < stall || healthy < 0)
      continue;
    char other[96];
    rn_tcp_rail_standing(c, healthy, other, sizeof(other));
    r->failing = 1;
    snprintf(r->cause, sizeof(r->cause), "no progress for %lld ms with %llu bytes in flight while %s",
             (long long)(now - r->progress_ms),
             (unsigned long long)(r->outq + atomic_load(&r->pending)), other);
  }
  /* The control connection's rail, with control bytes unacknowledged and
   * nothing moving either way for as long while another rail is up, is
   * taken out too (which moves the connection): its data streams may be
   * idle, so the rule above cannot see it (a black hole between
   * messages), and the connection would otherwise wait for the bound. */
  const int cr = c->move.ctrl_rail;
  if (movable && c->move.state == RN_TCP_CTL_UP && cr >= 0 && cr < c->nrails &&
      c->lazy.ctl_unacked && now - c->lazy.ctl_ms >= stall &&
      atomic_load(&c->rail[cr].state) == RN_TCP_RAIL_UP && !c->rail[cr].failing) {
    int other = -1;
    for (int i = 0; i < c->nrails && other < 0; i++)
      if (i != cr && rn_tcp_rail_usable(c, i) && now - c->rail[i].progress_ms < stall) other = i;
    if (other >= 0) {
      struct rn_tcp_rail *r = &c->rail[cr];
      char standing[96];
      rn_tcp_rail_standing(c, other, standing, sizeof(standing));
      r->failing = 1;
      snprintf(r->cause, sizeof(r->cause),
               "the control connection on it: nothing acknowledged or arrived for %lld ms with "
               "bytes in flight while %s",
               (long long)(now - c->lazy.ctl_ms), standing);
    }
  }
  /* None progressing because the receiver's windows alone hold every
   * rail's bytes: a live receiver whose process reads nothing, waited
   * for.  (The rules that take a rail out are unchanged: they weigh it
   * against a rail that progresses.) */
  int held = waiting && !fresh;
  for (int i = 0; i < c->nrails && held; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    if (atomic_load(&r->state) == RN_TCP_RAIL_UP && rn_tcp_rail_inflight(r))
      held = rn_tcp_rail_window_held(c, r);
  }
  rn_tcp_held_sample(c, held, limit);
  if (waiting && !fresh && !held)
    rn_tcp_fail(c, ncclRemoteError,
                "no rail progressed for %lld ms with bytes in flight (RAILNET_RAIL_TIMEOUT_MS)",
                (long long)limit);
  /* A rail that ran dry while another is still busy, and got no chunk
   * while another did, was given too little.  One that got chunks and
   * still ran dry is not the limit (the messages in flight are: a slower
   * rail holds them up), so its estimate stays. */
  for (int i = 0; i < c->nrails && any_busy && given_any; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    if (busy[i] || rn_tcp_rail_busy(r) || given[i] > 0 || !rn_tcp_rail_usable(c, i)) continue;
    if (r->rescued_ms != 0 && now - r->rescued_ms < stall) continue; /* it held the comm up */
    r->rate *= 1.25;
    if (r->rate > RN_TCP_RATE_INIT) r->rate = RN_TCP_RATE_INIT;
    if (r->rate < top / 8) r->rate = top / 8;
  }
  rn_tcp_rescue_sample(c, now, away);
}

int rn_tcp_rails_pick(struct rn_tcp_comm *c, size_t len, const uint64_t *load, const int *used,
                      int avoid) {
  int best = -1;
  double best_t = 0;
  for (int i = 0; i < c->nrails; i++) {
    const struct rn_tcp_rail *r = &c->rail[i];
    if (i == avoid || !rn_tcp_rail_usable(c, i)) continue;
    int s = -1;
    for (int k = 0; k < r->nstreams; k++) {
      int j = r->stream[k];
      if (atomic_load(&c->stream[j].dead) || used[j] + 1 >= RN_TCP_STREAM_QUEUE) continue;
      if (s < 0 || used[j] < used[s]) s = j;
    }
    if (s < 0) continue;
    double t = ((double)load[i] + (double)len) / r->rate;
    if (best < 0 || t < best_t) {
      best = s;
      best_t = t;
    }
  }
  return best;
}

static const char *rn_tcp_rail_state_name(const struct rn_tcp_rail *r) {
  return atomic_load(&r->state) == RN_TCP_RAIL_UP ? "up" : "failed";
}

/* One JSON line: the comm and each rail's counters. */
static void rn_tcp_rails_write(struct rn_tcp_comm *c, const char *event, int64_t now) {
  const char *path = rn_params()->stats;
  if (path[0] == '\0') return;
  char line[4096];
  uint64_t total = 0;
  for (int i = 0; i < c->nrails; i++) total += atomic_load(&c->rail[i].bytes);
  int n = snprintf(line, sizeof(line),
                   "{\"event\":\"%s\",\"pid\":%d,\"comm\":%" PRIu64
                   ",\"side\":\"%s\",\"peer\":\"%s\",\"ms\":%" PRId64 ",\"bytes\":%" PRIu64
                   ",\"inline_bytes\":%" PRIu64 ",\"rescues\":%" PRIu64
                   ",\"rescued_chunks\":%" PRIu64 ",\"rails\":[",
                   event, (int)getpid(), c->id, c->is_recv ? "recv" : "send", c->peer,
                   now - c->created_ms, total, c->lazy.inline_bytes, c->rescues,
                   c->rescued_chunks);
  for (int i = 0; i < c->nrails && n < (int)sizeof(line) - 300; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    uint64_t b = atomic_load(&r->bytes);
    n +=
        snprintf(line + n, sizeof(line) - (size_t)n,
                 "%s{\"rail\":%d,\"name\":\"%s\",\"state\":\"%s\",\"streams\":%d,\"bytes\":%" PRIu64
                 ",\"chunks\":%" PRIu64 ",\"replays\":%" PRIu64 ",\"failures\":%" PRIu64
                 ",\"rate_mbps\":%.1f,\"share\":%.4f,\"role\":\"%s\"}",
                 i ? "," : "", i, r->name, rn_tcp_rail_state_name(r), r->nstreams, b,
                 (uint64_t)atomic_load(&r->chunks), (uint64_t)atomic_load(&r->replays),
                 (uint64_t)atomic_load(&r->failures), r->rate * 8 / 1e6,
                 total ? (double)b / (double)total : 0.0, r->standby ? "standby" : "rail");
  }
  n += snprintf(line + n, sizeof(line) - (size_t)n, "]}\n");
  if (n >= (int)sizeof(line)) n = (int)sizeof(line) - 1;
  rn_stats_append(line, (size_t)n);
}

void rn_tcp_rails_tick(struct rn_tcp_comm *c) {
  int64_t now = rn_clock_ms();
  if (now - c->sample_ms >= RN_TCP_SAMPLE_MS) {
    rn_tcp_rails_sample(c, now);
    /* A sender's idle streams close at this pace too (errors fail the
     * comm, which the caller's next check reports). */
    if (!c->is_recv && c->lazy.state == RN_TCP_STREAMS_UP) (void)rn_tcp_lazy_idle(c, now);
  }
  if (rn_params()->stats[0] != '\0' && now - c->stats_ms >= rn_params()->stats_ms) {
    c->stats_ms = now;
    rn_tcp_rails_write(c, "interval", now);
  }
}

void rn_tcp_rails_close(struct rn_tcp_comm *c) {
  int64_t now = rn_clock_ms();
  rn_tcp_rails_write(c, "close", now);
  if (c->nrails < 2) return;
  char line[1024];
  int n = 0;
  uint64_t total = 0;
  for (int i = 0; i < c->nrails; i++) total += atomic_load(&c->rail[i].bytes);
  for (int i = 0; i < c->nrails && n < (int)sizeof(line) - 200; i++) {
    const struct rn_tcp_rail *r = &c->rail[i];
    uint64_t b = atomic_load(&r->bytes);
    n +=
        snprintf(line + n, sizeof(line) - (size_t)n,
                 "%s%s%s %.1f%% (%" PRIu64 " bytes, %" PRIu64 " chunks, %" PRIu64
                 " replayed, %" PRIu64 " failures, %s, %.0f Mbit/s)",
                 i ? ", " : "", r->standby ? "standby " : "", r->name,
                 total ? 100.0 * (double)b / (double)total : 0.0, b,
                 (uint64_t)atomic_load(&r->chunks), (uint64_t)atomic_load(&r->replays),
                 (uint64_t)atomic_load(&r->failures), rn_tcp_rail_state_name(r), r->rate * 8 / 1e6);
  }
  RN_INFO(NCCL_NET, "%s comm with %s closed after %.1f s, split over %d rails: %s; %" PRIu64
          " rescue(s), %" PRIu64 " chunk(s) sent again or moved",
          c->is_recv ? "receive" : "send", c->peer, (double)(now - c->created_ms) / 1000.0,
          c->nrails, line, c->rescues, c->rescued_chunks);
}

void rn_tcp_rails_stream_ended(struct rn_tcp_comm *c, struct rn_tcp_stream *s) {
  struct rn_tcp_rail *r = &c->rail[s->rail];
  if (!s->lost) return;
  for (int k = 0; k < r->nstreams; k++)
    if (!atomic_load(&c->stream[r->stream[k]].dead)) return;
  int up = RN_TCP_RAIL_UP;
  if (!atomic_compare_exchange_strong(&r->state, &up, RN_TCP_RAIL_FAILED)) return;
  atomic_fetch_add(&r->failures, 1);
  RN_INFO(NCCL_NET, "receive comm from %s (dev %d): rail %s lost its streams (%s)", c->peer,
          c->base.vdev, r->name, s->cause);
}

void rn_tcp_rails_load(struct rn_tcp_comm *c, int *used, uint64_t *load) {
  for (int i = 0; i < c->nstreams; i++) {
    struct rn_tcp_stream *s = &c->stream[i];
    pthread_mutex_lock(&s->queue_lock);
    rn_tcp_stream_retire(s);
    used[i] = (s->queue_tail - s->keep_head + RN_TCP_STREAM_QUEUE) % RN_TCP_STREAM_QUEUE;
    pthread_mutex_unlock(&s->queue_lock);
  }
  for (int i = 0; i < c->nrails; i++) {
    load[i] = atomic_load(&c->rail[i].pending);
    /* the kernel's send queues matter only when there is a choice of rail */
    if (c->nrails > 1) load[i] += rn_tcp_rail_outq(c, &c->rail[i]);
  }
}

/* Queue chunks of failed rails on the others, as far as they have room. */
static void rn_tcp_backlog_drain(struct rn_tcp_comm *c) {
  if (c->nbacklog == 0) return;
  int used[RN_TCP_MAX_STREAMS];
  uint64_t load[RN_MAX_RAILS];
  uint32_t touched = 0;
  int kept = 0;
  rn_tcp_rails_load(c, used, load);
  for (int i = 0; i < c->nbacklog; i++) {
    struct rn_tcp_queued_chunk q = c->backlog[i];
    if (rn_tcp_chunk_stale(&q)) { /* a copy landed meanwhile */
      atomic_fetch_sub(&c->stream_work, 1);
      continue;
    }
    /* A rescue's chunk avoids the rail it came from while another is
     * usable (a copy there would only queue behind the first). */
    int avoid = q.from_rail - 1;
    if (avoid >= 0 && !rn_tcp_rails_other_usable(c, avoid)) avoid = -1;
    int sidx = rn_tcp_rails_pick(c, q.hdr.p.plen, load, used, avoid);
    if (sidx < 0) {
      c->backlog[kept++] = q;
      continue;
    }
    struct rn_tcp_stream *s = &c->stream[sidx];
    used[sidx]++;
    load[s->rail] += q.hdr.p.plen;
    atomic_fetch_add(&c->rail[s->rail].pending, q.hdr.p.plen);
    pthread_mutex_lock(&s->queue_lock);
    s->queue[s->queue_tail] = q;
    s->queue_tail = (s->queue_tail + 1) % RN_TCP_STREAM_QUEUE;
    pthread_mutex_unlock(&s->queue_lock);
    touched |= 1u << sidx;
  }
  c->nbacklog = kept;
  for (int i = 0; i < c->nstreams && c->nthreads > 0; i++)
    if (touched & (1u << i)) rn_tcp_wake(c, i);
}

static void rn_tcp_rail_mark_failed(struct rn_tcp_rail *r, const char *cause) {
  atomic_store(&r->state, RN_TCP_RAIL_FAILED);
  atomic_fetch_add(&r->failures, 1);
  if (cause != r->cause) snprintf(r->cause, sizeof(r->cause), "%s", cause);
}

/* Send: rail r was just taken out.  Taken out less than
 * RAILNET_RAIL_HOLD_MS after its re-admission, it is flapping: each such
 * take-out in a row holds it out twice as long as the last, from 2 x
 * RAILNET_RAIL_STALL_MS up to RAILNET_RAIL_HOLD_MS, so a link that keeps
 * coming and going stalls the comm's striped messages (for up to
 * RAILNET_RAIL_STALL_MS at each take-out) ever more rarely.  A rail up
 * that long starts afresh.  The hold ends early when no other rail
 * carries the comm (rn_tcp_rail_held). */
static void rn_tcp_rail_hold(struct rn_tcp_comm *c, struct rn_tcp_rail *r) {
  const int64_t now = rn_clock_ms(), max = rn_params()->rail_hold_ms;
  const int64_t up = now - r->up_ms;
  if (r->up_ms == 0 || max == 0 || up >= max) {
    r->flaps = 0;
    r->hold_until_ms = 0;
    return;
  }
  r->flaps++;
  int64_t hold = 2 * rn_params()->rail_stall_ms;
  for (int k = 1; k < r->flaps && hold < max; k++) hold *= 2;
  if (hold > max) hold = max;
  r->hold_until_ms = now + hold;
  RN_INFO(NCCL_NET,
          "send comm to %s (dev %d): rail %s failed %.1f s after its re-admission (%d time(s) in "
          "a row within RAILNET_RAIL_HOLD_MS, %lld ms): flapping, so it is held out for %lld ms "
          "while another rail carries the comm",
          c->peer, c->base.vdev, r->name, (double)up / 1000.0, r->flaps, (long long)max,
          (long long)hold);
}

/* Take rail ri out of the send comm: its connections are reset (nothing
 * it still held reaches the receiver later), and every chunk it had not
 * yet written, or wrote for a send not yet acknowledged, waits in the
 * backlog for the other rails; a written one goes again as a re-send
 * (attempt + 1), which the receiver drops if its first copy landed. */
static ncclResult_t rn_tcp_rail_take_out(struct rn_tcp_comm *c, int ri, const char *cause) {
  struct rn_tcp_rail *r = &c->rail[ri];
  if (!c->ack)
    return rn_tcp_fail(c, ncclRemoteError,
                       "rail %s failed (%s); sends are not acknowledged on this comm "
                       "(RAILNET_RAIL_ACK), so what it carried cannot be sent again",
                       r->name, cause);
  if (c->backlog == NULL) {
    c->backlog = malloc((size_t)c->nstreams * RN_TCP_STREAM_QUEUE * sizeof(*c->backlog));
    if (c->backlog == NULL)
      return rn_tcp_fail(c, ncclSystemError, "out of memory taking rail %s out", r->name);
  }
  rn_tcp_rail_mark_failed(r, cause);
  int moved = 0, again = 0;
  for (int k = 0; k < r->nstreams; k++) {
    struct rn_tcp_stream *s = &c->stream[r->stream[k]];
    c->down_pending |= 1u << r->stream[k];
    atomic_store(&s->dead, 1);
    struct sockaddr unspec = {.sa_family = AF_UNSPEC};
    if (connect(s->fd, &unspec, sizeof(unspec)) != 0) shutdown(s->fd, SHUT_RDWR);
    pthread_mutex_lock(&s->queue_lock);
    for (int i = s->keep_head; i != s->queue_tail; i = (i + 1) % RN_TCP_STREAM_QUEUE) {
      struct rn_tcp_queued_chunk q = s->queue[i];
      int unwritten = (s->queue_tail - i + RN_TCP_STREAM_QUEUE) % RN_TCP_STREAM_QUEUE <=
                      (s->queue_tail - s->queue_head + RN_TCP_STREAM_QUEUE) % RN_TCP_STREAM_QUEUE;
      /* The head chunk may be in the middle of its write on a helper
       * thread (or just written): it goes again as a re-send, which the
       * receiver accepts whether or not its first copy landed. */
      int started = !unwritten || i == s->queue_head;
      if (unwritten) atomic_fetch_sub(&r->pending, q.hdr.p.plen);
      /* Stale, or a rescued head chunk that finishes from the stream's
       * own copy (rn_tcp_stream_bounce): its copy from the send's memory
       * left already, and this one's memory is the stream's. */
      if (rn_tcp_chunk_stale(&q) || q.rescued == 2) {
        if (unwritten) atomic_fetch_sub(&c->stream_work, 1);
        continue;
      }
      if (!unwritten) atomic_fetch_add(&c->stream_work, 1);
      q.from_rail = 0; /* anywhere up: this rail is gone */
      q.rescued = 0;
      if (started) {
        /* A chunk a rescue sent again already may reach the bound: its
         * copies are alike, the receiver takes any attempt above 0. */
        if (q.hdr.attempt < RN_TCP_MAX_ATTEMPT) q.hdr.attempt++;
        rn_tcp_wire_seal(&q.hdr, RN_TCP_MSG_CHUNK, q.hdr.p.flags, q.hdr.p.plen);
        again++;
      }
      c->backlog[c->nbacklog++] = q;
      moved++;
    }
    s->keep_head = s->queue_head = s->queue_tail;
    if (!s->writing) s->off = 0; /* else the writer's, reset as it leaves */
    /* A thread still writing the head chunk lets go of its send itself
     * once out of sendmsg (it finds the stream dead). */
    if (!s->writing) rn_tcp_stream_unhold(s);
    pthread_mutex_unlock(&s->queue_lock);
  }
  int left = 0;
  for (int i = 0; i < c->nrails; i++) left += atomic_load(&c->rail[i].state) == RN_TCP_RAIL_UP;
  /* The control connection runs on it: it moves to a rail still up. */
  if (left > 0 && ri == c->move.ctrl_rail) rn_tcp_move_lost(c, "its rail was taken out", 1);
  if (left == 0)
    return rn_tcp_fail(c, ncclRemoteError, "every rail is gone%s; the last, %s, failed: %s",
                       c->standby >= 0 ? ", the standby too" : "", r->name, r->cause);
  if (!r->standby && rn_tcp_rails_primary_up(c) == 0 && c->standby >= 0 && !c->on_standby) {
    c->on_standby = 1;
    RN_WARN(
        "send comm to %s (dev %d): rail %s taken out: %s; every rail of the device is down, so "
        "its standby NIC %s takes over: %d chunk(s) queued or unacknowledged (%d to send "
        "again) go over it",
        c->peer, c->base.vdev, r->name, r->cause, c->rail[c->standby].name, moved, again);
  } else {
    RN_WARN(
        "send comm to %s (dev %d): rail %s taken out: %s; %d chunk(s) queued or unacknowledged "
        "(%d to send again) go over the %d other rail(s)",
        c->peer, c->base.vdev, r->name, r->cause, moved, again,
        c->on_standby || r->standby ? left : rn_tcp_rails_primary_up(c));
  }
  rn_tcp_rail_hold(c, r);
  return ncclSuccess;
}

/* How much a rescue lowers the stuck rail's estimate: the picker gives it
 * a quarter of the share it had, and it earns the rest back by delivering
 * (its estimate is not raised for idling for RAILNET_RAIL_STALL_MS). */
#define RN_TCP_RESCUE_PENALTY 4.0

/* Send, c->lock held, on a comm whose sends are acknowledged: rail ri
 * alone held the comm up (rn_tcp_rescue_sample).  Without taking it out
 * (it stays up, no DOWN, no WARN), its chunks not yet acknowledged go
 * again over the other rails: those it wrote (kept: still in its sockets
 * or on the way) and the one it is writing, as copies with attempt + 1
 * (the receiver lands whichever copy is first and drops the other,
 * PROTOCOL.md CHUNK); those it has not started, moved.  Each is sent again
 * once at most (`rescued`), never past RN_TCP_MAX_ATTEMPT.  A send whose
 * chunk is being written on ri still completes only once that write ends
 * (its bytes are the caller's buffer: `copying`).  Its estimate is
 * lowered, so the picker gives it less. */
static void rn_tcp_rail_rescue(struct rn_tcp_comm *c, int ri) {
  struct rn_tcp_rail *r = &c->rail[ri];
  r->rescue_due = 0;
  /* Chunks of a rail taken out go first; the backlog then has room for
   * every entry of this rail's queues. */
  if (c->nbacklog > 0 || !rn_tcp_rails_other_usable(c, ri)) return;
  if (c->backlog == NULL &&
      (c->backlog = malloc((size_t)c->nstreams * RN_TCP_STREAM_QUEUE * sizeof(*c->backlog))) ==
          NULL)
    return; /* nothing changes: the rail delivers in time, or is taken out */
  int copied = 0, moved = 0, writing = 0;
  for (int k = 0; k < r->nstreams; k++) {
    struct rn_tcp_stream *s = &c->stream[r->stream[k]];
    if (atomic_load(&s->dead)) continue;
    pthread_mutex_lock(&s->queue_lock);
    rn_tcp_stream_retire(s);
    /* The head chunk is being written (a thread in sendmsg, or part of it
     * in the socket): it stays, and finishes on this rail. */
    const int started = s->queue_head != s->queue_tail && (s->writing || s->off > 0);
    const int first_unstarted = started ? (s->queue_head + 1) % RN_TCP_STREAM_QUEUE : s->queue_head;
    for (int i = s->keep_head; i != first_unstarted; i = (i + 1) % RN_TCP_STREAM_QUEUE) {
      struct rn_tcp_queued_chunk *q = &s->queue[i];
      if (!q->keep || q->rescued || rn_tcp_chunk_stale(q) || q->hdr.attempt >= RN_TCP_MAX_ATTEMPT)
        continue;
      q->rescued = 1;
      struct rn_tcp_queued_chunk copy = *q;
      copy.hdr.attempt++;
      rn_tcp_wire_seal(&copy.hdr, RN_TCP_MSG_CHUNK, copy.hdr.p.flags, copy.hdr.p.plen);
      copy.from_rail = ri + 1;
      copy.rescued = 0;
      c->backlog[c->nbacklog++] = copy;
      atomic_fetch_add(&c->stream_work, 1);
      copied++;
      if (i == s->queue_head) {
        writing++;
        /* A thread in sendmsg on it does this as it leaves the chunk. */
        if (s->writing)
          s->bounce_due = 1;
        else
          rn_tcp_stream_bounce(s, q);
      }
    }
    for (int i = first_unstarted; i != s->queue_tail; i = (i + 1) % RN_TCP_STREAM_QUEUE) {
      struct rn_tcp_queued_chunk q = s->queue[i];
      atomic_fetch_sub(&r->pending, q.hdr.p.plen);
      if (rn_tcp_chunk_stale(&q)) {
        atomic_fetch_sub(&c->stream_work, 1);
        continue;
      }
      q.from_rail = ri + 1;
      c->backlog[c->nbacklog++] = q;
      moved++;
    }
    s->queue_tail = first_unstarted;
    /* A head chunk not started may be counted in its send's `copying`
     * (a write that found the socket full): it left the queue. */
    if (!started) rn_tcp_stream_unhold(s);
    pthread_mutex_unlock(&s->queue_lock);
  }
  if (copied + moved == 0) return;
  const int64_t now = rn_clock_ms();
  r->rate /= RN_TCP_RESCUE_PENALTY;
  if (r->rate < RN_TCP_RATE_FLOOR) r->rate = RN_TCP_RATE_FLOOR;
  r->rescued_ms = now;
  c->rescues++;
  c->rescued_chunks += (uint64_t)(copied + moved);
  if (c->rescues == 1)
    RN_INFO(NCCL_NET,
            "send comm to %s (dev %d): rail %s alone held the comm up for %lld ms (every other "
            "rail delivered all it was given): %d chunk(s) it wrote or is writing (%d) sent "
            "again and %d not started moved over the other rail(s); it stays in, its estimate "
            "lowered to %.0f Mbit/s (later ones counted in RAILNET_STATS \"rescues\")",
            c->peer, c->base.vdev, r->name, (long long)rn_tcp_rescue_bound(), copied, writing,
            moved, r->rate * 8 / 1e6);
}

static void rn_tcp_rails_probe(struct rn_tcp_comm *c);

/* Send: rail ri came back while the standby carried the data: new chunks
 * go to the rails again (the standby finishes what it holds), and the
 * control connection, if it runs on the standby, moves back to a rail. */
static void rn_tcp_rails_give_back(struct rn_tcp_comm *c, int ri) {
  struct rn_tcp_rail *sb = &c->rail[c->standby];
  c->on_standby = 0;
  RN_INFO(NCCL_NET,
          "send comm to %s (dev %d): standby NIC %s given back: rail %s is up again (the standby "
          "carried %" PRIu64 " bytes so far)",
          c->peer, c->base.vdev, sb->name, c->rail[ri].name, (uint64_t)atomic_load(&sb->bytes));
  if (c->move.ctrl_rail == c->standby && c->move.state == RN_TCP_CTL_UP)
    rn_tcp_move_lost(c, "the standby NIC it ran on was given back", 1);
}

ncclResult_t rn_tcp_rails_failover(struct rn_tcp_comm *c) {
  for (int i = 0; i < c->nrails; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    if (atomic_load(&r->state) != RN_TCP_RAIL_UP) continue;
    char why[sizeof(r->cause)] = "";
    if (r->failing) snprintf(why, sizeof(why), "%s", r->cause);
    for (int k = 0; k < r->nstreams && why[0] == '\0'; k++) {
      struct rn_tcp_stream *s = &c->stream[r->stream[k]];
      if (atomic_load(&s->dead) && s->lost)
        snprintf(why, sizeof(why), "data stream %d: %.80s", r->stream[k], s->cause);
    }
    if (why[0] != '\0') RN_CHECK(rn_tcp_rail_take_out(c, i, why));
  }
  for (int i = 0; i < c->nrails; i++)
    if (c->rail[i].rescue_due) {
      if (atomic_load(&c->rail[i].state) == RN_TCP_RAIL_UP)
        rn_tcp_rail_rescue(c, i);
      else
        c->rail[i].rescue_due = 0;
    }
  /* The receiver stops reading them before it can complete what their
   * chunks were filling (sent again meanwhile). */
  if (c->down_pending != 0 && rn_tcp_ctl_room(c)) {
    struct rn_tcp_down d = {.msg = c->msg_out, .streams = c->down_pending};
    rn_tcp_wire_seal(&d, RN_TCP_MSG_DOWN, 0, 0);
    rn_tcp_ctl_queue(c, &d, sizeof(d), NULL, 0, NULL);
    c->msg_out++;
    c->down_pending = 0;
  }
  rn_tcp_backlog_drain(c);
  rn_tcp_rails_probe(c);
  return ncclSuccess;
}

/* ---------------------------------------------------------- re-admission
 *
 * A rail the sender took out can come back.  The receiver, told by DOWN,
 * listens on the rail's own address with a fresh nonce, through the same
 * rendezvous and admission rules as any listener (plugin/rendezvous.c),
 * and offers that address (OFFER).  The sender probes it while the rail's
 * link is up (no connect is tried while it is down), with a backoff, and
 * dials one connection of as many data streams as the rail had; once the
 * dial completes it uses them again at once (chunks wait in the sockets
 * until the receiver admits the connection and takes them in). */

#define RN_TCP_PROBE_FIRST_MS 250
#define RN_TCP_PROBE_MAX_MS 4000
#define RN_TCP_DIAL_MS 2000 /* a dial not done by then is abandoned */

static int rn_tcp_rail_of_streams(const struct rn_tcp_comm *c, uint32_t streams) {
  for (int i = 0; i < c->nrails; i++)
    if (c->rail[i].streams == streams) return i;
  return -1;
}

/* A stream's new connection: the old one closed, the state as new. */
static void rn_tcp_stream_reset(struct rn_tcp_stream *s, int fd) {
  int old = s->fd;
  rn_tcp_engine_swap_fd(s, fd);
  if (old >= 0) close(old);
  rn_sock_tune(fd, 0);
  rn_sock_set_liveness(fd, (int)rn_params()->socket_timeout_ms);
  rn_tcp_stream_set_class(s->comm, s);
  pthread_mutex_lock(&s->queue_lock);
  s->keep_head = s->queue_head = s->queue_tail;
  s->off = 0;
  s->writing = 0; /* no thread drives it now (rn_tcp_engine_swap_fd) */
  s->bounce_due = 0;
  rn_tcp_stream_unhold(s);
  pthread_mutex_unlock(&s->queue_lock);
  s->rx_req = NULL;
  s->rx_discard = 0;
  s->lost = 0;
  s->cause[0] = '\0';
  atomic_store(&s->retire, 0);
  atomic_store(&s->dead, 0);
}

/* Receive: queue the OFFER of rail r's listener, once the control
 * connection's output has room (else again at the next progress). */
static void rn_tcp_rail_offer_send(struct rn_tcp_comm *c, struct rn_tcp_rail *r) {
  if (!rn_tcp_ctl_room(c)) return;
  struct rn_tcp_offer o = {.nonce = r->offer_nonce, .msg = c->msg_out, .streams = r->streams};
  rn_sockaddr_to_wire(&r->offer_addr, &o.addr);
  rn_tcp_wire_seal(&o, RN_TCP_MSG_OFFER, 0, 0);
  rn_tcp_ctl_queue(c, &o, sizeof(o), NULL, 0, NULL);
  c->msg_out++;
  r->offered = 1;
}

/* Receive: the sender took the rail's streams out; offer it a listener of
 * the rail's own.  A fresh one each time: a listener still offered from
 * an earlier take-out may hold a connection the sender dialed, used and
 * has just abandoned (it took the rail out again before this side
 * admitted it), and the sender dials only the latest offer. */
void rn_tcp_rails_offer(struct rn_tcp_comm *c, uint32_t streams) {
  for (int i = 0; i < c->nrails; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    if ((r->streams & streams) == 0) continue;
    if (r->rejoin_rdv != NULL) {
      RN_INFO(NCCL_NET,
              "receive comm from %s (dev %d): rail %s taken out again before its reconnection "
              "was admitted: a fresh listener replaces the one offered",
              c->peer, c->base.vdev, r->name);
      rn_rdv_destroy(r->rejoin_rdv);
      r->rejoin_rdv = NULL;
      close(r->rejoin_fd);
      r->rejoin_fd = -1;
    }
    union rn_sockaddr a = rn_sockaddr_no_port(r->local), bound;
    uint64_t nonce = rn_rdv_random64();
    if (rn_sock_listen(&a, &r->rejoin_fd, &bound) != ncclSuccess) {
      r->rejoin_fd = -1;
      continue; /* the rail stays out */
    }
    if (rn_rdv_create(&r->rejoin_fd, 1, nonce, &r->rejoin_rdv) != ncclSuccess) {
      close(r->rejoin_fd);
      r->rejoin_fd = -1;
      continue;
    }
    r->offer_addr = bound;
    r->offer_nonce = nonce;
    r->offered = 0;
    rn_tcp_rail_offer_send(c, r);
  }
}

void rn_tcp_rails_readmit(struct rn_tcp_comm *c) {
  for (int i = 0; i < c->nrails; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    if (r->rejoin_rdv == NULL) continue;
    if (!r->offered) rn_tcp_rail_offer_send(c, r); /* there was no room for it */
    int dead = 1;
    for (int k = 0; k < r->nstreams; k++) dead &= atomic_load(&c->stream[r->stream[k]].dead);
    if (!dead) continue; /* a helper thread has not ended them yet */
    struct rn_rdv_conn conn;
    int ready = 0;
    if (rn_rdv_poll(r->rejoin_rdv, &conn, &ready) != ncclSuccess || !ready) continue;
    if (conn.nstreams != r->nstreams) {
      RN_INFO(NCCL_NET,
              "receive comm from %s: a reconnection of rail %s with %d streams, not %d: "
              "refused",
              c->peer, r->name, conn.nstreams, r->nstreams);
      rn_rdv_conn_close(&conn);
      continue;
    }
    close(conn.ctrl_fd);
    for (int k = 0; k < r->nstreams; k++)
      rn_tcp_stream_reset(&c->stream[r->stream[k]], conn.data_fd[k]);
    rn_rdv_destroy(r->rejoin_rdv);
    r->rejoin_rdv = NULL;
    close(r->rejoin_fd);
    r->rejoin_fd = -1;
    atomic_store(&r->state, RN_TCP_RAIL_UP);
    /* Helper threads poll the new sockets from their next pass on. */
    rn_tcp_wake_all(c);
    RN_INFO(NCCL_NET, "receive comm from %s (dev %d): rail %s re-admitted", c->peer, c->base.vdev,
            r->name);
  }
}

/* Rails the connect left out (the sender could not reach them: their
 * streams have no socket) start as taken out: the receiver offers each a
 * listener at once, as after DOWN, and the sender dials it once offered.
 * A rail with some streams and not others is a malformed connection. */
ncclResult_t rn_tcp_rails_left_out(struct rn_tcp_comm *c, const char *why) {
  const char *side = c->is_recv ? "receive comm from" : "send comm to";
  uint32_t offer = 0;
  for (int i = 0; i < c->nrails; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    int missing = 0;
    for (int k = 0; k < r->nstreams; k++) missing += c->stream[r->stream[k]].fd < 0;
    if (missing == 0) continue;
    if (missing != r->nstreams) {
      RN_WARN("%s %s (dev %d): rail %s came with %d of its %d data streams", side, c->peer,
              c->base.vdev, r->name, r->nstreams - missing, r->nstreams);
      return ncclRemoteError;
    }
    rn_tcp_rail_mark_failed(r, why);
    offer |= r->streams;
    if (c->is_recv)
      RN_INFO(NCCL_NET,
              "receive comm from %s (dev %d): rail %s left out (%s): offered to the sender again "
              "at once",
              c->peer, c->base.vdev, r->name, why);
  }
  if (offer != 0 && c->is_recv) rn_tcp_rails_offer(c, offer);
  return ncclSuccess;
}

ncclResult_t rn_tcp_rails_on_offer(struct rn_tcp_comm *c, const struct rn_tcp_offer *o) {
  static const char what[] = "reconnection offer";
  if (o->p.flags != 0 || o->p.plen != 0)
    return RN_TCP_VIOLATION(c, what, "flags/plen", "%u/%u, expected 0", o->p.flags, o->p.plen);
  if (o->msg != c->msg_in)
    return RN_TCP_VIOLATION(c, what, "msg", "%u, expected %u", o->msg, c->msg_in);
  int ri = rn_tcp_rail_of_streams(c, o->streams);
  if (ri < 0 || atomic_load(&c->rail[ri].state) != RN_TCP_RAIL_FAILED)
    return RN_TCP_VIOLATION(c, what, "streams", "0x%x: not the streams of a rail taken out",
                            o->streams);
  union rn_sockaddr a;
  if (rn_sockaddr_from_wire(&o->addr, &a) != 0)
    return RN_TCP_VIOLATION(c, what, "addr", "family %u: not an address", o->addr.family);
  c->msg_in++;
  struct rn_tcp_rail *r = &c->rail[ri];
  r->offered = 1;
  r->offer_addr = a;
  r->offer_nonce = o->nonce;
  r->backoff_ms = RN_TCP_PROBE_FIRST_MS;
  r->next_probe_ms = rn_clock_ms();
  return ncclSuccess;
}

/* Send: another rail than ri carries the comm (up, and its bytes moved
 * within RAILNET_RAIL_STALL_MS, or it has none in flight). */
static int rn_tcp_rails_carried(const struct rn_tcp_comm *c, int ri, int64_t now) {
  for (int i = 0; i < c->nrails; i++)
    if (i != ri && rn_tcp_rail_usable(c, i) &&
        now - c->rail[i].progress_ms < rn_params()->rail_stall_ms)
      return 1;
  return 0;
}

/* Send: a flapping rail's hold (rn_tcp_rail_hold) lasts only while
 * another rail carries the comm: with none, the rail is its best hope. */
static int rn_tcp_rail_held(struct rn_tcp_comm *c, int ri, int64_t now) {
  struct rn_tcp_rail *r = &c->rail[ri];
  if (now >= r->hold_until_ms) return 0;
  if (rn_tcp_rails_carried(c, ri, now)) return 1;
  RN_INFO(NCCL_NET,
          "send comm to %s (dev %d): rail %s dialed %lld ms before its hold ends: no other rail "
          "carries the comm",
          c->peer, c->base.vdev, r->name, (long long)(r->hold_until_ms - now));
  r->hold_until_ms = 0;
  return 0;
}

/* Sender: probe the rails taken out that the receiver offered back. */
static void rn_tcp_rails_probe(struct rn_tcp_comm *c) {
  int64_t now = rn_clock_ms();
  for (int i = 0; i < c->nrails; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    if (!r->offered || atomic_load(&r->state) != RN_TCP_RAIL_FAILED) continue;
    if (r->dial == NULL) {
      if (now < r->next_probe_ms || rn_tcp_rail_held(c, i, now)) continue;
      r->next_probe_ms = now + r->backoff_ms;
      if (r->backoff_ms < RN_TCP_PROBE_MAX_MS) r->backoff_ms *= 2;
      if (!rn_tcp_if_running(&r->local)) continue; /* its link is still down */
      union rn_sockaddr local = rn_sockaddr_no_port(r->local);
      if (rn_rdv_dial_create_from(&r->offer_addr, 1, &local, 1, r->offer_nonce, r->nstreams,
                                  &r->dial) != ncclSuccess) {
        r->dial = NULL;
        continue;
      }
      rn_rdv_dial_set_quiet(r->dial); /* the rail is down already, and said so */
      r->dial_ms = now;
    }
    struct rn_rdv_conn conn;
    int ready = 0;
    ncclResult_t res = rn_rdv_dial_poll(r->dial, &conn, &ready);
    if (res != ncclSuccess || (!ready && now - r->dial_ms > RN_TCP_DIAL_MS)) {
      rn_rdv_dial_destroy(r->dial);
      r->dial = NULL;
      continue;
    }
    if (!ready) continue;
    rn_rdv_dial_destroy(r->dial);
    r->dial = NULL;
    close(conn.ctrl_fd);
    for (int k = 0; k < r->nstreams; k++)
      rn_tcp_stream_reset(&c->stream[r->stream[k]], conn.data_fd[k]);
    double low = 0;
    for (int j = 0; j < c->nrails; j++)
      if (j != i && atomic_load(&c->rail[j].state) == RN_TCP_RAIL_UP &&
          (low == 0 || c->rail[j].rate < low))
        low = c->rail[j].rate;
    r->rate = low > 0 ? low : RN_TCP_RATE_INIT;
    r->acked_prev = 0;
    r->pending_prev = 0;
    r->outq = 0;
    atomic_store(&r->pending, 0);
    r->failing = 0;
    r->busy_prev = 0;
    r->progress_ms = now;
    r->offered = 0;
    r->up_ms = now;
    atomic_store(&r->state, RN_TCP_RAIL_UP);
    rn_tcp_wake_all(c);
    RN_INFO(NCCL_NET, "send comm to %s (dev %d): rail %s re-admitted (down since: %s)", c->peer,
            c->base.vdev, r->name, r->cause);
    if (c->on_standby && !r->standby) rn_tcp_rails_give_back(c, i);
  }
}

void rn_tcp_rails_free(struct rn_tcp_comm *c) {
  for (int i = 0; i < c->nrails; i++) {
    struct rn_tcp_rail *r = &c->rail[i];
    if (r->rejoin_rdv != NULL) rn_rdv_destroy(r->rejoin_rdv);
    if (r->rejoin_fd >= 0) close(r->rejoin_fd);
    if (r->dial != NULL) rn_rdv_dial_destroy(r->dial);
    r->rejoin_rdv = NULL;
    r->rejoin_fd = -1;
    r->dial = NULL;
  }
}
