/* The rendezvous' admission rules (plugin/rendezvous.c), called directly
 * over loopback: which hellos a listener admits, which it closes, and that
 * the sockets of one connection are never merged with another peer's.
 * A refusal is observed as the listener closing the socket (the peer reads
 * EOF or a reset); waits are bounded only to turn a hang into a failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "../common/rn_test.h"
#include "railnet/rendezvous.h"
#include "railnet/transport.h"

#define BOUND_S 5.0

static union rn_sockaddr loopback(const char *ip, int port) {
  union rn_sockaddr a;
  memset(&a, 0, sizeof a);
  a.in.sin_family = AF_INET;
  a.in.sin_port = htons((uint16_t)port);
  inet_pton(AF_INET, ip, &a.in.sin_addr);
  return a;
}

struct listener {
  int lfd[2];
  int nlfds;
  union rn_sockaddr addr[2];
  uint64_t nonce;
  struct rn_rdv *rdv;
};

static int listener_open(struct listener *l, int nlfds, int ctrl_only) {
  static const char *const ip[2] = {"127.0.0.1", "127.0.0.2"};
  memset(l, 0, sizeof *l);
  l->nonce = rn_rdv_random64();
  for (int i = 0; i < nlfds; i++) {
    union rn_sockaddr a = loopback(ip[i], 0);
    if (rn_sock_listen(&a, &l->lfd[i], &l->addr[i]) != ncclSuccess) return -1;
    l->nlfds++;
  }
  ncclResult_t r = ctrl_only ? rn_rdv_create_ctrl_only(l->lfd, nlfds, l->nonce, &l->rdv)
                             : rn_rdv_create(l->lfd, nlfds, l->nonce, &l->rdv);
  return r == ncclSuccess ? 0 : -1;
}

static void listener_close(struct listener *l) {
  rn_rdv_destroy(l->rdv);
  for (int i = 0; i < l->nlfds; i++) close(l->lfd[i]);
}

/* Poll the listener (and a dial, if any) until the listener hands out a
 * connection or `until` says stop; returns 1 with *conn, 0 when stopped,
 * -1 on error or past the bound. */
static int pump(struct listener *l, struct rn_rdv_dial *d, struct rn_rdv_conn *dialed,
                int *dial_done, struct rn_rdv_conn *conn, int (*until)(void *), void *arg) {
  double end = now_s() + BOUND_S;
  while (now_s() < end) {
    int ready = 0;
    if (d != NULL && !*dial_done && rn_rdv_dial_poll(d, dialed, dial_done) != ncclSuccess)
      return -1;
    if (rn_rdv_poll(l->rdv, conn, &ready) != ncclSuccess) return -1;
    if (ready) return 1;
    if (until != NULL && until(arg)) return 0;
    sleep_us(200);
  }
  return -1;
}

/* 1 once the listener has closed fd: EOF or a reset. */
static int closed_by_peer(void *arg) {
  int fd = *(int *)arg;
  char b;
  ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* A raw TCP connection from `from` that sends h. */
static int raw_hello(const union rn_sockaddr *to, const char *from, const struct rn_hello *h) {
  union rn_sockaddr src = loopback(from, 0);
  int fd = -1, ok = 0;
  if (rn_sock_connect_start(to, &src, &fd) != ncclSuccess) return -1;
  double end = now_s() + BOUND_S;
  int err, rc = 0;
  while (rc == 0 && now_s() < end) rc = rn_sock_connect_status(fd, &err);
  ok = rc == 1;
  size_t off = 0;
  while (ok && off < sizeof *h && now_s() < end)
    if (rn_sock_send_some(fd, h, sizeof *h, &off) != ncclSuccess) break;
  if (off != sizeof *h) {
    close(fd);
    return -1;
  }
  return fd;
}

static struct rn_hello hello(const struct listener *l, int role, int index, uint64_t conn_id,
                             uint32_t nstreams, uint32_t nlocals) {
  struct rn_hello h;
  memset(&h, 0, sizeof h);
  h.magic = RN_HELLO_MAGIC;
  h.version = RN_WIRE_VERSION;
  h.role = (uint8_t)role;
  h.index = (uint8_t)index;
  h.nonce = l->nonce;
  h.conn_id = conn_id;
  h.nstreams = nstreams;
  h.nlocals = nlocals;
  return h;
}

static uint32_t peer_ip(int fd) {
  union rn_sockaddr a;
  socklen_t len = sizeof a;
  if (getpeername(fd, &a.sa, &len) != 0) return 0;
  return ntohl(a.in.sin_addr.s_addr);
}

/* A dial of nstreams data streams to the listener's nlfds addresses (from
 * nlocals of 127.0.0.1 and 127.0.0.3, if any), without the rails in
 * absent: 1 with the connection the listener handed out in *conn. */
static int dial_admitted(struct listener *l, int nstreams, int nlocals, uint32_t absent,
                         struct rn_rdv_conn *conn) {
  struct rn_rdv_dial *d = NULL;
  struct rn_rdv_conn dialed;
  int done = 0, ok = 0;
  union rn_sockaddr locals[2] = {loopback("127.0.0.1", 0), loopback("127.0.0.3", 0)};
  if (rn_rdv_dial_create_without(l->addr, l->nlfds, nlocals ? locals : NULL, nlocals, l->nonce,
                                 nstreams, absent, &d) == ncclSuccess)
    ok = pump(l, d, &dialed, &done, conn, NULL, NULL) == 1;
  if (done) rn_rdv_conn_close(&dialed);
  rn_rdv_dial_destroy(d);
  return ok;
}

/* A dial of nstreams data streams (from locals, if any) is admitted whole. */
static int admits_dial(int ctrl_only, int nlfds, int nstreams, int nlocals) {
  struct listener l;
  struct rn_rdv_conn conn;
  int ok = 0;
  if (listener_open(&l, nlfds, ctrl_only) != 0) return 0;
  if (dial_admitted(&l, nstreams, nlocals, 0, &conn)) {
    ok = conn.nstreams == nstreams && conn.ctrl_fd >= 0;
    for (int i = 0; i < nstreams; i++) ok &= conn.data_fd[i] >= 0;
    rn_rdv_conn_close(&conn);
  }
  listener_close(&l);
  return ok;
}

/* Rails left out (struct rn_hello's absent): a dial of 4 streams over 2
 * rails without the rails in `absent` is admitted with the others' streams,
 * the left-out ones -1, and its control connection from the first rail
 * left. */
static int admits_left_out(uint32_t absent) {
  struct listener l;
  struct rn_rdv_conn conn;
  int ok = 0;
  if (listener_open(&l, 2, 0) != 0) return 0;
  if (dial_admitted(&l, 4, 2, absent, &conn)) {
    int first = (absent & 1) ? 1 : 0;
    ok = conn.nstreams == 4 && conn.nrails == 2 && conn.ctrl_fd >= 0 &&
         peer_ip(conn.ctrl_fd) == (first ? 0x7f000003u : 0x7f000001u);
    for (int i = 0; i < 4; i++) {
      int out = (absent >> (i % 2)) & 1;
      ok &= out ? conn.data_fd[i] < 0 : conn.data_fd[i] >= 0;
      if (!out) ok &= peer_ip(conn.data_fd[i]) == (i % 2 ? 0x7f000003u : 0x7f000001u);
    }
    rn_rdv_conn_close(&conn);
  }
  listener_close(&l);
  return ok;
}

/* A dial cannot leave out every rail, nor rails of a dial without a
 * source of its own per rail. */
static int dial_refuses_bad_absent(void) {
  union rn_sockaddr to[2] = {loopback("127.0.0.1", 9), loopback("127.0.0.2", 9)};
  union rn_sockaddr locals[2] = {loopback("127.0.0.1", 0), loopback("127.0.0.3", 0)};
  struct rn_rdv_dial *d = NULL;
  int ok = rn_rdv_dial_create_without(to, 2, locals, 2, 1, 4, 3, &d) == ncclInternalError;
  ok &= rn_rdv_dial_create_without(to, 2, NULL, 0, 1, 4, 1, &d) == ncclInternalError;
  ok &= rn_rdv_dial_create_without(to, 1, locals, 1, 1, 4, 1, &d) == ncclInternalError;
  ok &= d == NULL;
  rn_rdv_dial_destroy(d);
  return ok;
}

/* A lone hello h is closed by the listener (of nlfds listening sockets),
 * never handed out. */
static int refuses_n(int nlfds, int ctrl_only, struct rn_hello (*make)(const struct listener *)) {
  struct listener l;
  struct rn_rdv_conn conn;
  if (listener_open(&l, nlfds, ctrl_only) != 0) return 0;
  struct rn_hello h = make(&l);
  int fd = raw_hello(&l.addr[0], "127.0.0.1", &h);
  int ok = fd >= 0 && pump(&l, NULL, NULL, NULL, &conn, closed_by_peer, &fd) == 0;
  if (fd >= 0) close(fd);
  listener_close(&l);
  return ok;
}

static int refuses(int ctrl_only, struct rn_hello (*make)(const struct listener *)) {
  return refuses_n(1, ctrl_only, make);
}

/* Rails left out that the listener cannot serve, or a stream of one:
 * hellos of 4 streams with nlocals sources and rails `absent` left out. */
static struct rn_hello hello_absent(const struct listener *l, int role, int index,
                                    uint32_t nlocals, uint16_t absent) {
  struct rn_hello h = hello(l, role, index, 7, 4, nlocals);
  h.absent = absent;
  return h;
}
static struct rn_hello h_absent_all(const struct listener *l) {
  return hello_absent(l, RN_ROLE_CTRL, 0, 2, 3);
}
static struct rn_hello h_absent_beyond(const struct listener *l) {
  return hello_absent(l, RN_ROLE_CTRL, 0, 2, 4);
}
static struct rn_hello h_absent_one_source(const struct listener *l) {
  return hello_absent(l, RN_ROLE_CTRL, 0, 1, 1);
}
static struct rn_hello h_absent_more_sources(const struct listener *l) {
  return hello_absent(l, RN_ROLE_CTRL, 0, 3, 1);
}
static struct rn_hello h_absent_stream(const struct listener *l) {
  return hello_absent(l, RN_ROLE_DATA, 2, 2, 1);
}

static struct rn_hello h_zero_streams(const struct listener *l) {
  return hello(l, RN_ROLE_CTRL, 0, 7, 0, 0);
}
static struct rn_hello h_too_many(const struct listener *l) {
  return hello(l, RN_ROLE_CTRL, 0, 7, RN_RDV_MAX_STREAMS + 1, 0);
}
static struct rn_hello h_one_stream(const struct listener *l) {
  return hello(l, RN_ROLE_CTRL, 0, 7, 1, 0);
}
static struct rn_hello h_bad_index(const struct listener *l) {
  return hello(l, RN_ROLE_DATA, 4, 7, 4, 0);
}
static struct rn_hello h_bad_role(const struct listener *l) { return hello(l, 3, 0, 7, 4, 0); }
static struct rn_hello h_bad_nlocals(const struct listener *l) {
  return hello(l, RN_ROLE_CTRL, 0, 7, 4, RN_RDV_MAX_STREAMS + 1);
}
static struct rn_hello h_old_version(const struct listener *l) {
  struct rn_hello h = hello(l, RN_ROLE_CTRL, 0, 7, 4, 0);
  h.version = RN_WIRE_VERSION - 1;
  return h;
}
static struct rn_hello h_wrong_nonce(const struct listener *l) {
  struct rn_hello h = hello(l, RN_ROLE_CTRL, 0, 7, 4, 0);
  h.nonce ^= 1;
  return h;
}

/* A control stream from 127.0.0.1 and, for the same connection id, a data
 * stream from 127.0.0.9 (the impostor), each with nlocals bound sources;
 * returns the data hello, for the real stream to repeat.  A stream that
 * could not be opened is -1. */
static struct rn_hello ctrl_and_impostor(const struct listener *l, uint32_t nlocals, int *ctrl,
                                         int *fake) {
  uint64_t id = rn_rdv_random64();
  struct rn_hello hc = hello(l, RN_ROLE_CTRL, 0, id, 1, nlocals);
  struct rn_hello hd = hello(l, RN_ROLE_DATA, 0, id, 1, nlocals);
  *ctrl = raw_hello(&l->addr[0], "127.0.0.1", &hc);
  *fake = raw_hello(&l->addr[0], "127.0.0.9", &hd);
  return hd;
}

/* The same connection id from another source address: the impostor's
 * stream is closed, and the connection completes with the real one. */
static int impostor_not_merged(void) {
  struct listener l;
  struct rn_rdv_conn conn;
  int ok = 0, ctrl = -1, fake = -1, real = -1;
  if (listener_open(&l, 1, 0) != 0) return 0;
  struct rn_hello hd = ctrl_and_impostor(&l, 1, &ctrl, &fake);
  if (ctrl < 0 || fake < 0) goto out;
  if (pump(&l, NULL, NULL, NULL, &conn, closed_by_peer, &fake) != 0) goto out;
  real = raw_hello(&l.addr[0], "127.0.0.1", &hd);
  if (real < 0 || pump(&l, NULL, NULL, NULL, &conn, NULL, NULL) != 1) goto out;
  ok = conn.nstreams == 1 && peer_ip(conn.data_fd[0]) == 0x7f000001;
  rn_rdv_conn_close(&conn);
out:
  if (ctrl >= 0) close(ctrl);
  if (fake >= 0) close(fake);
  if (real >= 0) close(real);
  listener_close(&l);
  return ok;
}

/* Without bound sources (nlocals 0), the data stream must come from the
 * address its control connection came from, on the same listening socket. */
static int unbound_other_address_not_merged(void) {
  struct listener l;
  struct rn_rdv_conn conn;
  int ok = 0, ctrl = -1, fake = -1;
  if (listener_open(&l, 1, 0) != 0) return 0;
  (void)ctrl_and_impostor(&l, 0, &ctrl, &fake);
  ok = ctrl >= 0 && fake >= 0 && pump(&l, NULL, NULL, NULL, &conn, closed_by_peer, &fake) == 0;
  if (ctrl >= 0) close(ctrl);
  if (fake >= 0) close(fake);
  listener_close(&l);
  return ok;
}

/* A TCP connection to `to` that sends nothing (yet). */
static int raw_silent(const union rn_sockaddr *to) {
  union rn_sockaddr src = loopback("127.0.0.1", 0);
  int fd = -1, ok = 0;
  if (rn_sock_connect_start(to, &src, &fd) != ncclSuccess) return -1;
  double end = now_s() + BOUND_S;
  int err, rc = 0;
  while (rc == 0 && now_s() < end) rc = rn_sock_connect_status(fd, &err);
  ok = rc == 1;
  if (!ok) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Poll the listener n times; 0 unless it errs or hands out a connection. */
static int poll_n(struct listener *l, int n) {
  for (int i = 0; i < n; i++) {
    struct rn_rdv_conn conn;
    int ready = 0;
    if (rn_rdv_poll(l->rdv, &conn, &ready) != ncclSuccess) return -1;
    if (ready) {
      rn_rdv_conn_close(&conn);
      return -1;
    }
    sleep_us(500);
  }
  return 0;
}

#define TABLE 128 /* the anonymous sockets a listener holds (plugin/rendezvous.c) */

/* A full table of sockets without a hello: a newcomer whose hello comes
 * late is still admitted while fewer than TABLE newer ones came after it
 * (it is not closed at the next poll), and once TABLE newer ones came, the
 * oldest are the ones closed, the newest kept. */
static int late_hello_keeps_its_place(void) {
  struct listener l;
  int silent[2 * TABLE], late = -1, ok = 0;
  for (int i = 0; i < 2 * TABLE; i++) silent[i] = -1;
  if (listener_open(&l, 1, 1) != 0) return 0;
  for (int i = 0; i < TABLE; i++)
    if ((silent[i] = raw_silent(&l.addr[0])) < 0 || poll_n(&l, 1) != 0) goto out;
  late = raw_silent(&l.addr[0]);
  if (late < 0 || poll_n(&l, 1) != 0) goto out;
  for (int i = TABLE; i < TABLE + TABLE / 2; i++)
    if ((silent[i] = raw_silent(&l.addr[0])) < 0 || poll_n(&l, 2) != 0) goto out;
  if (closed_by_peer(&late)) {
    diag("the late socket was closed with %d newer ones behind it", TABLE / 2);
    goto out;
  }
  struct rn_hello h = hello(&l, RN_ROLE_CTRL, 0, 42, 0, 0);
  size_t off = 0;
  while (off < sizeof h)
    if (rn_sock_send_some(late, &h, sizeof h, &off) != ncclSuccess) goto out;
  struct rn_rdv_conn conn;
  if (pump(&l, NULL, NULL, NULL, &conn, NULL, NULL) != 1) {
    diag("the late hello was not admitted");
    goto out;
  }
  ok = conn.nstreams == 0 && conn.ctrl_fd >= 0;
  rn_rdv_conn_close(&conn);
  for (int i = TABLE + TABLE / 2; i < 2 * TABLE; i++)
    if ((silent[i] = raw_silent(&l.addr[0])) < 0 || poll_n(&l, 1) != 0) ok = 0;
  if (poll_n(&l, 4) != 0) ok = 0;
  /* held now: the newest TABLE (those after the late one's place) */
  int old_closed = 0, new_open = 0;
  for (int i = 0; i < TABLE; i++) old_closed += closed_by_peer(&silent[i]);
  for (int i = TABLE; i < 2 * TABLE; i++) new_open += !closed_by_peer(&silent[i]);
  if (old_closed != TABLE || new_open != TABLE) {
    diag("of the %d oldest silent sockets %d closed; of the %d newest %d still open", TABLE,
         old_closed, TABLE, new_open);
    ok = 0;
  }
out:
  for (int i = 0; i < 2 * TABLE; i++)
    if (silent[i] >= 0) close(silent[i]);
  if (late >= 0) close(late);
  listener_close(&l);
  return ok;
}

/* The connector's side while it waits for the accept: a data stream the
 * listener dropped (closed with a reset, as it closes one whose hello came
 * past RAILNET_HELLO_TIMEOUT_MS) is seen, and nothing before that.  The
 * listener here is a plain listening socket that takes the connections
 * and reads nothing. */
static int dropped_stream_seen(void) {
  union rn_sockaddr a = loopback("127.0.0.1", 0), bound;
  int lfd = -1, acc[4] = {-1, -1, -1, -1}, nacc = 0, done = 0, ok = 0;
  struct rn_rdv_dial *d = NULL;
  struct rn_rdv_conn dialed;
  if (rn_sock_listen(&a, &lfd, &bound) != ncclSuccess ||
      rn_rdv_dial_create(&bound, 1, 42, 2, &d) != ncclSuccess)
    goto out;
  double end = now_s() + BOUND_S;
  while ((!done || nacc < 3) && now_s() < end) {
    if (!done && rn_rdv_dial_poll(d, &dialed, &done) != ncclSuccess) goto out;
    int fd = nacc < 3 ? accept(lfd, NULL, NULL) : -1;
    if (fd >= 0) acc[nacc++] = fd;
    sleep_us(200);
  }
  if (!done || nacc < 3) goto out;
  int before = rn_rdv_conn_dropped(&dialed);
  /* the last connection accepted is a data stream or the control one:
   * drop the first that is not the dial's control connection */
  int victim = -1;
  for (int i = 0; i < nacc && victim < 0; i++) {
    union rn_sockaddr pa, la;
    socklen_t pl = sizeof pa, ll = sizeof la;
    if (getpeername(acc[i], &pa.sa, &pl) != 0) continue;
    if (getsockname(dialed.ctrl_fd, &la.sa, &ll) != 0) continue;
    if (pa.in.sin_port != la.in.sin_port) victim = i;
  }
  if (victim < 0) goto close_dialed;
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(acc[victim], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(acc[victim]);
  acc[victim] = -1;
  int after = 0;
  while (!after && now_s() < end) {
    after = rn_rdv_conn_dropped(&dialed);
    if (!after) sleep_us(200);
  }
  ok = before == 0 && after == 1;
  if (!ok) diag("dropped before the reset: %d, after: %d", before, after);
close_dialed:
  rn_rdv_conn_close(&dialed);
out:
  for (int i = 0; i < 4; i++)
    if (acc[i] >= 0) close(acc[i]);
  if (lfd >= 0) close(lfd);
  rn_rdv_dial_destroy(d);
  return ok;
}

int main(void) {
  setenv("RAILNET_SOCKET_IFNAME", "lo", 0);
  /* silence past the hello timeout is not what these tests are about */
  setenv("RAILNET_HELLO_TIMEOUT_MS", "60000", 1);
  tap_plan(24);
  tap_result(admits_dial(0, 1, 4, 0), "a dial of 4 streams is admitted whole");
  tap_result(admits_dial(1, 1, 0, 0), "a control-only listener admits a dial of 0 streams");
  tap_result(admits_dial(0, 2, 5, 2),
             "2 listening rails, streams bound to 2 local addresses: admitted whole");
  tap_result(admits_dial(0, 2, 3, 0), "2 listening rails, sources left to routing: admitted whole");
  tap_result(refuses(0, h_zero_streams), "a hello announcing 0 data streams is refused");
  tap_result(refuses(0, h_too_many), "a hello announcing 33 data streams is refused");
  tap_result(refuses(1, h_one_stream), "a control-only listener refuses a hello with streams");
  tap_result(refuses(0, h_bad_index), "a data stream index past the count is refused");
  tap_result(refuses(0, h_bad_role), "an unknown role is refused");
  tap_result(refuses(0, h_bad_nlocals), "a source count past the maximum is refused");
  tap_result(refuses(0, h_old_version), "a hello of another wire version is refused");
  tap_result(refuses(0, h_wrong_nonce), "a hello with another nonce is refused");
  tap_result(impostor_not_merged(),
             "a stream of the same connection id from another address is not merged");
  tap_result(unbound_other_address_not_merged(),
             "unbound sources: a stream from another address than its control is not merged");
  tap_result(admits_dial(0, 1, 32, 0), "a dial of 32 streams is admitted whole");
  tap_result(late_hello_keeps_its_place(),
             "a full table: a late hello keeps its place behind newer silent sockets, the oldest "
             "leave first");
  tap_result(admits_left_out(2),
             "rail 1 left out: admitted with rail 0's streams, rail 1's missing (-1)");
  tap_result(admits_left_out(1),
             "rail 0 left out: admitted, the control connection from rail 1, rail 0's streams "
             "missing");
  tap_result(dial_refuses_bad_absent(),
             "a dial leaving out every rail, or rails without a source each, is an internal error");
  tap_result(refuses_n(2, 0, h_absent_all), "a hello leaving out every rail is refused");
  tap_result(refuses_n(2, 0, h_absent_beyond) && refuses_n(2, 0, h_absent_one_source),
             "a hello leaving out a rail past its sources, or of a single source, is refused");
  tap_result(refuses_n(2, 0, h_absent_more_sources),
             "a hello leaving out rails of more sources than the listener's sockets is refused");
  tap_result(refuses_n(2, 0, h_absent_stream), "a data stream of a rail left out is refused");
  tap_result(dropped_stream_seen(),
             "a connector waiting for the accept sees a data stream the listener dropped "
             "(reset), and none before");
  return tap_failed() ? 1 : 0;
}
