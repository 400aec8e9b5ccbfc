/* The control connection of a multi-rail TCP comm over another rail.
 *
 * The control connection starts on the first rail.  So that losing that
 * rail does not end the comm, each side of a multi-rail comm keeps the
 * control bytes it wrote until TCP saw them acknowledged (tcpi_bytes_acked
 * of the connection), and the receiver listens on each of its rails for a
 * new control connection, with a fresh nonce per listener, behind the same
 * rendezvous and admission rules as every listener (plugin/rendezvous.c),
 * and offers those listeners to the sender (OFFER with the CONTROL flag).
 *
 * When the sender takes out the rail its control connection runs on, or
 * that connection fails, it dials one of those listeners from a rail still
 * up.  On the new connection each side first writes a RESUME naming the
 * stream offset of the first control byte it still keeps, then those bytes
 * again, then whatever follows.  The reader goes on reading the old
 * connection until the peer's RESUME arrives on the new one (the peer
 * writes nothing more on the old one by then), drains it, closes it, and
 * drops from the new one the bytes it already read: the control byte
 * stream continues exactly where it stopped, so no message is lost or seen
 * twice and no parsing state changes.  Bytes TCP acknowledged are in the
 * peer's socket and are read in that drain; bytes it did not are kept. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "railnet/param.h"
#include "tcp.h"

#define RN_TCP_MOVE_DIAL_MS 2000 /* a dial not done by then is dropped and tried again */
#define RN_TCP_MOVE_RETRY_MS 250 /* between dials */
#define RN_TCP_MOVE_POLL_MS 50   /* receiver: its listeners are polled this often */
#define RN_TCP_MOVE_TRIM 262144  /* kept bytes above which every write trims */

/* Bytes written on fd so far: acknowledged plus still queued. */
static uint64_t rn_tcp_fd_written(int fd) {
  uint64_t acked, outq;
  rn_tcp_fd_tx(fd, &acked, &outq);
  return acked + outq;
}

/* Forget kept bytes TCP saw acknowledged on the current connection. */
static void rn_tcp_move_trim(struct rn_tcp_comm *c) {
  struct rn_tcp_move *m = &c->move;
  if (m->tx == m->log_base || m->state == RN_TCP_CTL_SWITCH) return;
  uint64_t acked;
  if (rn_tcp_fd_tx(c->ctrl_fd, &acked, NULL) != 0) return;
  if (acked <= m->fd_pre) return;
  uint64_t upto = m->fd_base + (acked - m->fd_pre);
  if (upto > m->replay) upto = m->replay; /* never past what went out on it */
  if (upto <= m->log_base) return;
  size_t drop = (size_t)(upto - m->log_base);
  memmove(m->log, m->log + drop, (size_t)(m->tx - upto));
  m->log_base = upto;
}

static int rn_tcp_move_keep(struct rn_tcp_move *m, size_t more) {
  size_t have = (size_t)(m->tx - m->log_base);
  if (have + more <= m->log_cap) return 0;
  size_t cap = m->log_cap ? m->log_cap : 65536;
  while (cap < have + more) cap *= 2;
  char *p = realloc(m->log, cap);
  if (p == NULL) return -1;
  m->log = p;
  m->log_cap = cap;
  return 0;
}

/* The receiver's listener for the control connection on rail r, offered
 * to the sender. */
static void rn_tcp_move_listen(struct rn_tcp_comm *c, int r) {
  struct rn_tcp_move *m = &c->move;
  union rn_sockaddr a = rn_sockaddr_no_port(c->rail[r].local), bound;
  uint64_t nonce = rn_rdv_random64();
  int fd = -1;
  if (!rn_tcp_ctl_room(c) || rn_sock_listen(&a, &fd, &bound) != ncclSuccess) return;
  if (rn_rdv_create_ctrl_only(&fd, 1, nonce, &m->rdv[r]) != ncclSuccess) {
    m->rdv[r] = NULL;
    close(fd);
    return;
  }
  m->lfd[r] = fd;
  struct rn_tcp_offer o = {.nonce = nonce, .msg = c->msg_out, .streams = c->rail[r].streams};
  rn_sockaddr_to_wire(&bound, &o.addr);
  rn_tcp_wire_seal(&o, RN_TCP_MSG_OFFER, RN_TCP_OFFER_CONTROL, 0);
  rn_tcp_ctl_queue(c, &o, sizeof(o), NULL, 0, NULL);
  c->msg_out++;
}

static void rn_tcp_move_unlisten(struct rn_tcp_comm *c, int r) {
  struct rn_tcp_move *m = &c->move;
  if (m->rdv[r] == NULL) return;
  rn_rdv_destroy(m->rdv[r]);
  close(m->lfd[r]);
  m->rdv[r] = NULL;
}

void rn_tcp_move_init(struct rn_tcp_comm *c) {
  struct rn_tcp_move *m = &c->move;
  m->ctrl_rail = -1;
  if (c->ctrl_local.sa.sa_family != 0)
    for (int i = 0; i < c->nrails; i++)
      if (rn_sockaddr_same_host(&c->ctrl_local, &c->rail[i].local)) m->ctrl_rail = i;
  if (c->is_recv) {
    /* Multi-rail: rails of its own, or streams from several of the
     * sender's addresses. */
    union rn_sockaddr first;
    memset(&first, 0, sizeof(first));
    m->peer_multi = 0;
    for (int i = 0; i < c->nstreams && !m->peer_multi; i++) {
      union rn_sockaddr p = rn_sockaddr_no_port(c->stream[i].peer);
      if (p.sa.sa_family == 0) continue;
      if (first.sa.sa_family == 0)
        first = p;
      else
        m->peer_multi = memcmp(&first, &p, sizeof(p)) != 0;
    }
    m->enabled = c->nrails > 1 || m->peer_multi;
  } else {
    m->enabled = c->ack && c->nrails > 1;
  }
  if (!m->enabled) return;
  /* Bytes are kept from here on (the comm may be older: its streams open
   * at its first large message). */
  m->fd_pre = rn_tcp_fd_written(c->ctrl_fd);
  m->fd_base = m->log_base = m->replay = m->tx;
  if (c->is_recv)
    for (int r = 0; r < c->nrails; r++) rn_tcp_move_listen(c, r);
  RN_INFO(NCCL_NET,
          "%s comm with %s (dev %d): the control connection can move to another rail "
          "(%d listener(s) offered)",
          c->is_recv ? "receive" : "send", c->peer, c->base.vdev, c->is_recv ? c->nrails : 0);
}

void rn_tcp_move_stop(struct rn_tcp_comm *c) {
  struct rn_tcp_move *m = &c->move;
  for (int r = 0; r < RN_MAX_RAILS; r++) rn_tcp_move_unlisten(c, r);
  if (m->dial != NULL) rn_rdv_dial_destroy(m->dial);
  m->dial = NULL;
  m->nways = 0;
  m->ctrl_rail = -1;
  if (m->state != RN_TCP_CTL_UP) return; /* a move in progress ends as it would */
  m->enabled = 0;
  m->log_base = m->replay = m->tx;
}

void rn_tcp_move_free(struct rn_tcp_comm *c) {
  struct rn_tcp_move *m = &c->move;
  for (int r = 0; r < RN_MAX_RAILS; r++) rn_tcp_move_unlisten(c, r);
  if (m->dial != NULL) rn_rdv_dial_destroy(m->dial);
  m->dial = NULL;
  if (m->state == RN_TCP_CTL_SWITCH && m->old_fd >= 0) close(m->old_fd);
  m->state = RN_TCP_CTL_UP;
  free(m->log);
  m->log = NULL;
}

int rn_tcp_move_lost(struct rn_tcp_comm *c, const char *cause, int quiet) {
  struct rn_tcp_move *m = &c->move;
  if (!m->enabled || m->state == RN_TCP_CTL_SWITCH) return 0;
  if (m->state == RN_TCP_CTL_LOST) return 1;
  int way = 0;
  if (c->is_recv) {
    for (int r = 0; r < c->nrails; r++) way |= m->rdv[r] != NULL;
  } else {
    for (int i = 0; i < c->nrails; i++) way |= atomic_load(&c->rail[i].state) == RN_TCP_RAIL_UP;
    way &= m->nways > 0;
  }
  if (!way) return 0;
  m->state = RN_TCP_CTL_LOST;
  m->old_done = 0;
  m->lost_ms = m->next_dial_ms = rn_clock_ms();
  snprintf(m->cause, sizeof(m->cause), "%s", cause);
  if (quiet)
    RN_INFO(NCCL_NET, "%s comm with %s (dev %d): control connection lost (%s); %s",
            c->is_recv ? "receive" : "send", c->peer, c->base.vdev, cause,
            c->is_recv ? "waiting for the sender to move it" : "moving it to another rail");
  else
    RN_WARN("%s comm with %s (dev %d): control connection lost (%s); %s",
            c->is_recv ? "receive" : "send", c->peer, c->base.vdev, cause,
            c->is_recv ? "waiting for the sender to move it" : "moving it to another rail");
  return 1;
}

/* A new control connection: write RESUME, then what is kept, on it. */
static ncclResult_t rn_tcp_move_switch(struct rn_tcp_comm *c, int fd) {
  struct rn_tcp_move *m = &c->move;
  rn_tcp_move_trim(c);
  rn_sock_tune(fd, 0);
  if (rn_sock_set_liveness(fd, (int)rn_params()->socket_timeout_ms) != 0) {
    close(fd);
    return rn_tcp_fail(c, ncclSystemError, "cannot set keepalive on a new control connection: %s",
                       strerror(errno));
  }
  if (m->state == RN_TCP_CTL_UP) m->old_done = 0;
  m->old_fd = c->ctrl_fd;
  c->ctrl_fd = fd;
  m->epoch++;
  struct rn_tcp_resume r = {.from = m->log_base, .received = m->rx, .epoch = m->epoch};
  rn_tcp_wire_seal(&r, RN_TCP_MSG_RESUME, 0, 0);
  m->fd_pre = rn_tcp_fd_written(fd) + sizeof(r);
  m->fd_base = m->log_base;
  m->replay = m->log_base;
  m->resume_got = 0;
  m->state = RN_TCP_CTL_SWITCH;
  ssize_t k = send(fd, &r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k != (ssize_t)sizeof(r))
    return rn_tcp_fail(c, ncclRemoteError, "new control connection: writing its resume failed: %s",
                       k < 0 ? strerror(errno) : "short write");
  RN_INFO(NCCL_NET,
          "%s comm with %s (dev %d): control connection %u established over rail %s; "
          "%llu control bytes to write again",
          c->is_recv ? "receive" : "send", c->peer, c->base.vdev, m->epoch,
          m->ctrl_rail >= 0 ? c->rail[m->ctrl_rail].name : "?",
          (unsigned long long)(m->tx - m->log_base));
  return ncclSuccess;
}

int rn_tcp_move_before_write(struct rn_tcp_comm *c, ncclResult_t *res) {
  struct rn_tcp_move *m = &c->move;
  *res = ncclSuccess;
  if (m->state == RN_TCP_CTL_LOST) return -1;
  while (m->replay < m->tx) {
    ssize_t k = send(c->ctrl_fd, m->log + (m->replay - m->log_base), (size_t)(m->tx - m->replay),
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      m->replay += (uint64_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return -1;
    *res = rn_tcp_fail(c, ncclRemoteError, "control connection %u lost while writing: %s", m->epoch,
                       k < 0 ? strerror(errno) : "closed");
    return -1;
  }
  return 0;
}

void rn_tcp_move_wrote(struct rn_tcp_comm *c, const struct iovec *iov, int niov, size_t k) {
  struct rn_tcp_move *m = &c->move;
  if (rn_tcp_move_keep(m, k) != 0) {
    /* Without its bytes the connection cannot move any more. */
    RN_WARN(
        "%s comm with %s: out of memory keeping control bytes; the control connection can no "
        "longer move",
        c->is_recv ? "receive" : "send", c->peer);
    m->enabled = 0;
    return;
  }
  char *dst = m->log + (m->tx - m->log_base);
  for (int i = 0; i < niov && k > 0; i++) {
    size_t n = iov[i].iov_len < k ? iov[i].iov_len : k;
    memcpy(dst, iov[i].iov_base, n);
    dst += n;
    k -= n;
  }
  m->tx = m->log_base + (uint64_t)(dst - m->log);
  m->replay = m->tx;
  if (m->tx - m->log_base > RN_TCP_MOVE_TRIM) rn_tcp_move_trim(c);
}

/* One buffer goes through recv(): most polls find nothing, and recvmsg()
 * would first copy in its header and iovec each time. */
static ssize_t rn_tcp_recv_nbv(int fd, const struct iovec *iov, int niov) {
  for (;;) {
    struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)niov};
    ssize_t k = niov == 1 ? recv(fd, iov[0].iov_base, iov[0].iov_len, MSG_DONTWAIT)
                          : recvmsg(fd, &mh, MSG_DONTWAIT);
    if (k > 0) return k;
    if (k == 0) return -1;
    if (errno == EINTR) continue;
    return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -2;
  }
}

static ssize_t rn_tcp_recv_nb(int fd, void *buf, size_t len) {
  const struct iovec iov = {buf, len};
  return rn_tcp_recv_nbv(fd, &iov, 1);
}

/* The peer's RESUME arrived whole: check it. */
static ncclResult_t rn_tcp_move_resume_check(struct rn_tcp_comm *c) {
  struct rn_tcp_move *m = &c->move;
  const struct rn_tcp_resume *r = &m->in_resume;
  static const char what[] = "resume";
  if (r->p.type != RN_TCP_MSG_RESUME || r->p.hlen != sizeof(*r))
    return RN_TCP_VIOLATION(c, what, "type/hlen", "%u/%u, expected %u/%zu", r->p.type, r->p.hlen,
                            RN_TCP_MSG_RESUME, sizeof(*r));
  if (!rn_tcp_wire_crc_ok(r, sizeof(*r))) return RN_TCP_VIOLATION(c, what, "crc", "%s", "mismatch");
  if (r->p.flags != 0 || r->p.plen != 0 || r->epoch != m->epoch || r->received > m->tx)
    return RN_TCP_VIOLATION(
        c, what, "flags/plen/epoch/received", "%u/%u/%u/%llu, expected 0/0/%u/<= %llu", r->p.flags,
        r->p.plen, r->epoch, (unsigned long long)r->received, m->epoch, (unsigned long long)m->tx);
  return ncclSuccess;
}

/* The new connection ended before the peer's RESUME: back to the old one
 * (the peer does the same), and to where this side was before. */
static void rn_tcp_move_revert(struct rn_tcp_comm *c, const char *why) {
  struct rn_tcp_move *m = &c->move;
  RN_INFO(NCCL_NET, "%s comm with %s (dev %d): control connection %u ended before it resumed (%s)",
          c->is_recv ? "receive" : "send", c->peer, c->base.vdev, m->epoch, why);
  close(c->ctrl_fd);
  c->ctrl_fd = m->old_fd;
  m->old_fd = -1;
  m->epoch--;
  m->state = RN_TCP_CTL_LOST;
  if (m->lost_ms == 0) m->lost_ms = rn_clock_ms();
  m->next_dial_ms = rn_clock_ms() + RN_TCP_MOVE_RETRY_MS;
  m->replay = m->tx;
}

ssize_t rn_tcp_move_read(struct rn_tcp_comm *c, const struct iovec *iov, int niov) {
  struct rn_tcp_move *m = &c->move;
  if (!m->enabled) {
    ssize_t k = rn_tcp_recv_nbv(c->ctrl_fd, iov, niov);
    if (k > 0) m->rx += (uint64_t)k; /* counted all the same (rn_tcp_move_init) */
    return k;
  }
  for (;;) {
    ssize_t k;
    if (m->state == RN_TCP_CTL_LOST) {
      /* The lost connection gives what it still holds. */
      if (m->old_done) return 0;
      k = rn_tcp_recv_nbv(c->ctrl_fd, iov, niov);
      if (k > 0) {
        m->rx += (uint64_t)k;
        return k;
      }
      if (k < 0) m->old_done = 1;
      return 0;
    }
    if (m->state == RN_TCP_CTL_SWITCH) {
      const int resumed = m->resume_got == sizeof(m->in_resume);
      if (!m->old_done) {
        k = rn_tcp_recv_nbv(m->old_fd, iov, niov);
        if (k > 0) {
          m->rx += (uint64_t)k;
          return k;
        }
        /* Drained after the peer's RESUME: nothing it wrote there is
         * still owed on it. */
        if (k < 0 || resumed) m->old_done = 1;
      }
      if (!resumed) {
        k = rn_tcp_recv_nb(c->ctrl_fd, (char *)&m->in_resume + m->resume_got,
                           sizeof(m->in_resume) - m->resume_got);
        if (k == 0) return 0;
        if (k < 0) {
          rn_tcp_move_revert(c, k == -1 ? "closed" : strerror(errno));
          continue;
        }
        m->resume_got += (size_t)k;
        if (m->resume_got < sizeof(m->in_resume)) return 0;
        if (rn_tcp_move_resume_check(c) != ncclSuccess) return -3;
        continue; /* drain the old one */
      }
      if (!m->old_done) return 0;
      close(m->old_fd);
      m->old_fd = -1;
      if (m->in_resume.from > m->rx) {
        rn_tcp_fail(c, ncclRemoteError,
                    "control connection %u resumes at byte %llu but only %llu arrived: control "
                    "bytes were lost",
                    m->epoch, (unsigned long long)m->in_resume.from, (unsigned long long)m->rx);
        return -3;
      }
      m->skip = m->rx - m->in_resume.from;
      m->state = RN_TCP_CTL_UP;
      m->lost_ms = 0;
      RN_INFO(NCCL_NET,
              "%s comm with %s (dev %d): control connection %u resumed over rail %s (%llu bytes "
              "read before were sent again and dropped)",
              c->is_recv ? "receive" : "send", c->peer, c->base.vdev, m->epoch,
              m->ctrl_rail >= 0 ? c->rail[m->ctrl_rail].name : "?", (unsigned long long)m->skip);
      continue;
    }
    while (m->skip > 0) {
      char tmp[4096];
      k = rn_tcp_recv_nb(c->ctrl_fd, tmp, m->skip < sizeof(tmp) ? (size_t)m->skip : sizeof(tmp));
      if (k <= 0) return k;
      m->skip -= (uint64_t)k;
    }
    k = rn_tcp_recv_nbv(c->ctrl_fd, iov, niov);
    if (k > 0) m->rx += (uint64_t)k;
    return k;
  }
}

/* Sender: dial a listener the receiver offered, from a rail still up. */
static ncclResult_t rn_tcp_move_dial(struct rn_tcp_comm *c, int64_t now) {
  struct rn_tcp_move *m = &c->move;
  if (m->dial == NULL) {
    if (now < m->next_dial_ms) return ncclSuccess;
    m->next_dial_ms = now + RN_TCP_MOVE_RETRY_MS;
    for (int t = 0; t < m->nways && m->dial == NULL; t++) {
      int w = (m->dial_way + 1 + t) % m->nways;
      int rail = -1;
      for (int j = 0; j < c->nstreams; j++) {
        if (!(m->way[w].streams & (1u << j))) continue;
        int sr = c->stream[j].rail;
        const struct rn_tcp_rail *r = &c->rail[sr];
        /* the standby only while no other rail is up */
        if (!rn_tcp_rail_usable(c, sr) || r->failing || !rn_tcp_if_running(&r->local)) continue;
        if (rail < 0 || rail == m->ctrl_rail) rail = sr;
      }
      if (rail < 0) continue;
      union rn_sockaddr local = rn_sockaddr_no_port(c->rail[rail].local);
      if (rn_rdv_dial_create_from(&m->way[w].addr, 1, &local, 1, m->way[w].nonce, 0, &m->dial) !=
          ncclSuccess) {
        m->dial = NULL;
        continue;
      }
      m->dial_way = w;
      m->dial_rail = rail;
      m->dial_ms = now;
    }
    if (m->dial == NULL) return ncclSuccess;
  }
  struct rn_rdv_conn conn;
  int ready = 0;
  ncclResult_t res = rn_rdv_dial_poll(m->dial, &conn, &ready);
  /* A dial not done in a quarter of the move's own bound, whose SYN or
   * its answer is lost (another rail that died with nothing in flight,
   * so no rule took it out yet), gives way to the next: at least four
   * tries fit in the bound, also at its lowest. */
  const int64_t quarter = rn_params()->rail_timeout_ms / 4;
  const int64_t bound = quarter < RN_TCP_MOVE_DIAL_MS ? quarter : RN_TCP_MOVE_DIAL_MS;
  if (res != ncclSuccess || (!ready && now - m->dial_ms > bound)) {
    char a[64];
    RN_INFO(NCCL_NET,
            "send comm with %s (dev %d): control connection: the dial over rail %s to %s %s "
            "within %lld ms; trying the next rail",
            c->peer, c->base.vdev, c->rail[m->dial_rail].name,
            rn_sockaddr_str(&m->way[m->dial_way].addr, a, sizeof(a)),
            res != ncclSuccess ? "failed" : "did not connect", (long long)bound);
    rn_rdv_dial_destroy(m->dial);
    m->dial = NULL;
    return ncclSuccess;
  }
  if (!ready) return ncclSuccess;
  rn_rdv_dial_destroy(m->dial);
  m->dial = NULL;
  m->ctrl_rail = m->dial_rail;
  return rn_tcp_move_switch(c, conn.ctrl_fd);
}

ncclResult_t rn_tcp_move_progress(struct rn_tcp_comm *c) {
  struct rn_tcp_move *m = &c->move;
  if (!m->enabled) return ncclSuccess;
  int64_t now = rn_clock_ms();
  const int64_t limit = rn_params()->rail_timeout_ms;
  if (m->state == RN_TCP_CTL_LOST && now - m->lost_ms >= limit && !rn_tcp_ctl_sender_moves(c))
    return rn_tcp_fail(c, ncclRemoteError,
                       "control connection lost (%s) and not re-established over another rail "
                       "within %lld ms (RAILNET_RAIL_TIMEOUT_MS)",
                       m->cause, (long long)limit);
  if (!c->is_recv) {
    if (m->state == RN_TCP_CTL_LOST) RN_CHECK(rn_tcp_move_dial(c, now));
    if (m->state == RN_TCP_CTL_UP && now - m->poll_ms >= RN_TCP_SAMPLE_MS) {
      m->poll_ms = now;
      rn_tcp_move_trim(c);
    }
    return ncclSuccess;
  }
  if (m->state == RN_TCP_CTL_SWITCH ||
      (m->state == RN_TCP_CTL_UP && now - m->poll_ms < RN_TCP_MOVE_POLL_MS))
    return ncclSuccess;
  m->poll_ms = now;
  if (m->state == RN_TCP_CTL_UP) rn_tcp_move_trim(c);
  for (int r = 0; r < c->nrails; r++) {
    if (m->rdv[r] == NULL) continue;
    struct rn_rdv_conn conn;
    int ready = 0;
    if (rn_rdv_poll(m->rdv[r], &conn, &ready) != ncclSuccess || !ready) continue;
    int fd = conn.ctrl_fd;
    m->ctrl_rail = r;
    RN_CHECK(rn_tcp_move_switch(c, fd));
    /* A fresh listener (and nonce) for the next move; its offer goes on
     * the new connection. */
    rn_tcp_move_unlisten(c, r);
    rn_tcp_move_listen(c, r);
    break;
  }
  return ncclSuccess;
}

ncclResult_t rn_tcp_move_on_offer(struct rn_tcp_comm *c, const struct rn_tcp_offer *o) {
  static const char what[] = "control connection offer";
  struct rn_tcp_move *m = &c->move;
  const uint32_t all = rn_tcp_streams_all(c);
  if (o->p.flags != RN_TCP_OFFER_CONTROL || o->p.plen != 0)
    return RN_TCP_VIOLATION(c, what, "flags/plen", "%u/%u, expected %u/0", o->p.flags, o->p.plen,
                            RN_TCP_OFFER_CONTROL);
  if (o->msg != c->msg_in)
    return RN_TCP_VIOLATION(c, what, "msg", "%u, expected %u", o->msg, c->msg_in);
  /* Offered for streams this side has closed since, idle (a one-rail
   * sender of a receiver with several: it never moves the connection, and
   * may close them before reading what the receiver sent at connect). */
  if (c->nstreams == 0) {
    c->msg_in++;
    return ncclSuccess;
  }
  if (o->streams == 0 || (o->streams & ~all) != 0)
    return RN_TCP_VIOLATION(c, what, "streams", "0x%x, expected a nonzero subset of 0x%x",
                            o->streams, all);
  union rn_sockaddr a;
  if (rn_sockaddr_from_wire(&o->addr, &a) != 0)
    return RN_TCP_VIOLATION(c, what, "addr", "family %u: not an address", o->addr.family);
  int w = 0;
  while (w < m->nways && m->way[w].streams != o->streams) w++;
  if (w == RN_MAX_RAILS)
    return RN_TCP_VIOLATION(c, what, "streams", "0x%x: more than %d rails offered", o->streams,
                            RN_MAX_RAILS);
  c->msg_in++;
  m->way[w] = (struct rn_tcp_ctl_way){.streams = o->streams, .addr = a, .nonce = o->nonce};
  if (w == m->nways) m->nways++;
  return ncclSuccess;
}
