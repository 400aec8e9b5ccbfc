/* libFuzzer target for the TCP transport's wire (plugin/tcp/PROTOCOL.md)
 * and the rendezvous hello (plugin/rendezvous.c): the plugin's own code,
 * linked in (tests/fuzz/fuzz_wire_short.sh builds it), faces a peer whose
 * bytes come from the input.  The first byte picks the peer (its value
 * mod 3) and the device (mod 6: 0..2 loopback, one rail; 3..5 loopback and
 * a second interface fused with makeVDevice, two rails, where
 * FUZZ_WIRE_RAILS names them: tests/fuzz/wire_netns.sh runs the target in
 * a network namespace of its own with a veth at 198.18.0.1; without it
 * those inputs run on one rail):
 *
 *   0  hostile connector: the plugin listens; up to 6 raw sockets dial its
 *      listening addresses and write hellos (a valid template the input
 *      overwrites field by field, or raw bytes) and more, optionally after
 *      a flood of 66+ admitted connections that never complete (the
 *      rendezvous holds 64 and evicts the oldest); accept() is called a
 *      bounded number of times; then a real connect from the plugin must
 *      still be accepted (the listener is not wedged).
 *   1  hostile sender: a raw connector passes the rendezvous (control
 *      connection alone, or with 1..3 data streams; on two rails 2..4
 *      streams over both, one rail possibly left out at connect), the
 *      receive comm posts 1..3 grouped receives whose sizes and tags the
 *      input gives, and the input's records go onto the control connection
 *      and the data streams, test() polled between them.  The raw sender
 *      reads what the receiver writes: it answers STREAMS, and keeps the
 *      OFFERs (of a rail, of a way for the control connection) for the
 *      records that dial a rail back or move the control connection there
 *      (RESUME both ways, the bytes already read dropped).
 *   2  hostile receiver: the plugin connects to raw listeners posing as
 *      the receiver (a real handle with its addresses swapped, one per
 *      rail), posts 1..4 sends, and the input's records go onto its control
 *      connection; the connections it dials (data streams, STREAMS and
 *      OFFER answers, a moved control connection, which gets a RESUME)
 *      reach the raw listeners too.
 *
 * A record is one header sealed by the harness (its type's hlen and a
 * CRC-32C put in, unless the record says to keep the input's), so the
 * fuzzer reaches the checks behind the checksum, or raw bytes, or an
 * action: a message a real peer would send, made from the raw side's state
 * (message counts, ranks, claim numbers, the next sends for a CTS, the raw
 * listeners' addresses for OFFER and STREAMS, byte counts for RESUME) and
 * then mutated; a socket closed (in order or reset) or left unread; a
 * pause of up to 315 ms, 2 s in all (the rails' stall and timeout rules run
 * on the clock); a move of the control connection; a rail dialled back; or the
 * next action repeated up to 96 times (the 64-group CTS window, the eager
 * limits).  Records may end in polls, and the peer may close its sockets
 * at the end.  Checked beyond the sanitizers: a receive reported done has
 * sizes within what was posted and wrote nothing past its buffers (guard
 * bytes); once the peer closed every socket, each request ends (done or
 * an error) within a bounded number of polls (on two rails, within the
 * time the plugin may wait for a move); no call blocks (libFuzzer's
 * -timeout). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "railnet/core.h"
#include "railnet/rendezvous.h"
#include "railnet/transport.h"
#include "../../plugin/tcp/wire.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FW_GUARD 64     /* guard bytes after every receive buffer */
#define FW_POLLS 64     /* test() calls after the input, per request */
#define FW_END_POLLS 400 /* after the peer closed: every request must end by then */
#define FW_STALL_MS 100    /* RAILNET_RAIL_STALL_MS (its least) */
#define FW_TIMEOUT_MS 1000 /* RAILNET_RAIL_TIMEOUT_MS (its least) */
#define FW_END_MS_MULTI (2 * FW_STALL_MS + 2 * FW_TIMEOUT_MS + 1000)
#define FW_MAX_FDS 40
#define FW_FLOOD_MIN 66 /* mode 0: more incomplete connections than the rendezvous holds (64) */
#define FW_RECORDS 1024 /* records read from one input */
#define FW_PAUSE_MS 2000 /* pauses in one input, in all */

static int fw_verbose;
static int fw_dev = -1;  /* loopback: one rail */
static int fw_vdev = -1; /* loopback and a second interface fused: two rails (FUZZ_WIRE_RAILS) */
static int fw_multi;     /* this input runs on fw_vdev */
static int fw_pause_left; /* ms of pauses (fw_action_common) this input may still take */

static void fw_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                      const char *fmt, ...) {
  (void)flags;
  if (!fw_verbose && level != NCCL_LOG_ABORT) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[%d] %s:%d ", (int)level, file ? file : "?", line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void fw_fail(const char *what) {
  fprintf(stderr, "fuzz_wire: %s (errno: %s)\n", what, strerror(errno));
  abort();
}

/* ---- the input --------------------------------------------------------- */
struct fw_in {
  const uint8_t *d;
  size_t n, pos;
};
static uint8_t fw_u8(struct fw_in *in) { return in->pos < in->n ? in->d[in->pos++] : 0; }
static uint16_t fw_u16(struct fw_in *in) { return (uint16_t)(fw_u8(in) | fw_u8(in) << 8); }
static size_t fw_bytes(struct fw_in *in, void *dst, size_t len) {
  size_t k = in->n - in->pos < len ? in->n - in->pos : len;
  memcpy(dst, in->d + in->pos, k);
  memset((uint8_t *)dst + k, 0, len - k);
  in->pos += k;
  return k;
}
static int fw_more(const struct fw_in *in) { return in->pos < in->n; }

/* ---- sockets ------------------------------------------------------------ */
static void fw_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* poll() one fd until ready or ms passed, whatever signals come
 * (libFuzzer's -timeout ticks with SIGALRM). */
static int fw_wait(int fd, short events, int ms) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    struct pollfd p = {.fd = fd, .events = events};
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int left = ms - (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
    if (left < 0) return 0;
    int k = poll(&p, 1, left);
    if (k >= 0) return k;
    if (errno != EINTR) return -1;
  }
}

static int fw_dial(const struct rn_wire_addr *w) {
  union rn_sockaddr a;
  if (rn_sockaddr_from_wire(w, &a) != 0) return -1;
  socklen_t len = a.sa.sa_family == AF_INET ? sizeof(a.in) : sizeof(a.in6);
  int fd = -1;
  /* Out of local ports (EADDRNOTAVAIL) is this host's state, not the
   * plugin's: wait a little for some to come back. */
  for (int tries = 0; fd < 0 && tries < 200; tries++) {
    if ((fd = socket(a.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
      return -1;
    int err = connect(fd, &a.sa, len) == 0 ? 0 : errno;
    if (err == EINPROGRESS || err == EINTR) {
      socklen_t el = sizeof err;
      if (fw_wait(fd, POLLOUT, 2000) <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
        err = ETIMEDOUT;
    }
    if (err == 0) break;
    close(fd);
    fd = -1;
    if (err != EADDRNOTAVAIL) return -1;
    usleep(5000);
  }
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fw_nonblock(fd);
  return fd;
}

/* Write what fits now; the rest is dropped after a few tries (a peer that
 * stopped reading).  poll_fn drives the plugin between tries.  Returns the
 * bytes written. */
static size_t fw_write(int fd, const void *buf, size_t len, void (*poll_fn)(void *), void *arg) {
  const uint8_t *p = buf;
  size_t done = 0;
  for (int tries = 0; fd >= 0 && len > 0 && tries < 16;) {
    ssize_t k = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      len -= (size_t)k;
      done += (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
    tries++;
    if (poll_fn) poll_fn(arg);
  }
  return done;
}

/* Read and drop whatever the plugin wrote to fd. */
static size_t fw_drain(int fd) {
  static char buf[65536];
  size_t n = 0;
  ssize_t k;
  while (fd >= 0 && (k = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) n += (size_t)k;
  return n;
}

/* Wait up to ms for one byte on a blocking-free fd. */
static int fw_read_byte(int fd, int ms, uint8_t *b) {
  if (fw_wait(fd, POLLIN, ms) <= 0) return -1;
  return recv(fd, b, 1, MSG_DONTWAIT) == 1 ? 0 : -1;
}

/* Close the raw sockets: in order (the peer reads an end of file), or
 * with a reset, which leaves no TIME_WAIT behind: at thousands of
 * connections a second those would use up the loopback's ports. */
static void fw_close_all(int *fds, int n, int reset) {
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) {
      if (reset) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fds[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      }
      close(fds[i]);
      fds[i] = -1;
    }
}

static uint32_t fw_handle_check(const struct rn_handle *h) {
  const uint8_t *b = (const uint8_t *)h;
  uint32_t x = 2166136261u;
  for (size_t i = 0; i < offsetof(struct rn_handle, check); i++) x = (x ^ b[i]) * 16777619u;
  return x;
}

static struct rn_hello fw_hello(const struct rn_handle *h, uint8_t role, uint8_t index,
                                uint64_t conn_id, uint32_t nstreams) {
  struct rn_hello o;
  memset(&o, 0, sizeof o);
  o.magic = RN_HELLO_MAGIC;
  o.version = RN_WIRE_VERSION;
  o.role = role;
  o.index = index;
  o.nonce = h->nonce;
  o.conn_id = conn_id;
  o.nstreams = nstreams;
  return o;
}

/* ---- the control connection ------------------------------------------- */
/* The raw peer's side of the control connection, across moves
 * (PROTOCOL.md, Moving the control connection): the bytes it wrote and
 * read since the comm began (the accept byte excluded), and, after a move,
 * the old connection, read until the plugin's RESUME came on the new one,
 * whose bytes already read are then dropped. */
struct fw_ctl {
  int old_fd;
  uint64_t tx, rx;
  uint32_t msgs;       /* headers written (the templates' msg) */
  uint32_t epoch;      /* moves so far */
  size_t resume_got;   /* of the plugin's RESUME on the new connection */
  struct rn_tcp_resume resume;
  uint64_t skip;
  int lost;            /* a move went wrong: what is read is no longer framed */
  uint8_t mut[8];      /* (offset, xor) pairs for the next RESUME written */
  int nmut;
  int withhold;        /* the next move writes no RESUME (the input may, or not) */
  int replay;          /* the next RESUME's from is this many bytes back, which follow it */
  uint8_t last[256];   /* the last bytes written (ring, by stream offset) */
};

/* ---- records --------------------------------------------------------- */
/* One record: a flags byte, then
 *   op 0/3: a type byte, the header's bytes after its type (hlen - 1 of
 *           them, the CRC's included), a 16-bit payload length, the payload;
 *           op 0 puts in the type's hlen and the CRC, op 3 keeps the CRC read;
 *   op 1:   a length byte and that many raw bytes;
 *   op 2:   nothing (polls only; with bit 5, in mode 1, the next receive
 *           group is posted first); with bit 7, an action byte and its
 *           arguments (fw_action): a message a real peer would send made
 *           from the peer's state (counters, addresses, nonces) and then
 *           mutated, a socket closed or left unread, a pause, a move of
 *           the control connection, a rail dialled back.
 * flags: bits 0-1 the connection (0 control, k the data stream k-1),
 * bits 2-3 op, bit 4 poll after, bit 5 keep the input's hlen, bit 6 plen =
 * the payload's length, bit 7 (mode 2) STREAMS/OFFER addresses of port 0
 * become the raw listener's. */
struct fw_target {
  int fds[FW_MAX_FDS];
  int nfds;
  uint64_t quiet;                  /* bit i: fds[i] is left unread (a black hole) */
  int closed;                      /* the socket the input closed last (-1: none) */
  const struct rn_wire_addr *self; /* mode 2: the raw listener */
  struct fw_ctl ctl;
  void (*poll_fn)(void *);
  void (*post_fn)(void *); /* mode 1: post the next receive group */
  void (*action_fn)(void *, struct fw_in *, uint8_t); /* op 2 with bit 7 */
  void *arg;
};

static void fw_fix_addr(struct rn_wire_addr *a, const struct rn_wire_addr *self) {
  if (self != NULL && a->family != 0 && a->port == 0) *a = *self;
}

/* Write on the control connection, counted. */
static void fw_ctl_write(struct fw_target *t, const void *buf, size_t len, int header) {
  size_t k = fw_write(t->fds[0], buf, len, t->poll_fn, t->arg);
  for (size_t i = 0; i < k; i++)
    t->ctl.last[(t->ctl.tx + i) % sizeof t->ctl.last] = ((const uint8_t *)buf)[i];
  t->ctl.tx += k;
  if (header && k == len) t->ctl.msgs++;
}

/* Read what the plugin wrote on the control connection (see fw_ctl):
 * > 0 bytes, 0 nothing now, -1 closed. */
static ssize_t fw_ctl_recv(struct fw_target *t, void *buf, size_t len) {
  struct fw_ctl *c = &t->ctl;
  for (;;) {
    ssize_t k;
    if (c->old_fd >= 0) {
      k = recv(c->old_fd, buf, len, MSG_DONTWAIT);
      if (k > 0) {
        c->rx += (uint64_t)k;
        return k;
      }
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
          c->resume_got == sizeof c->resume) {
        close(c->old_fd);
        c->old_fd = -1;
      }
    }
    int fd = t->fds[0];
    if (fd < 0) return -1;
    if (c->resume_got < sizeof c->resume) {
      k = recv(fd, (char *)&c->resume + c->resume_got, sizeof c->resume - c->resume_got,
               MSG_DONTWAIT);
      if (k == 0) return -1;
      if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
      c->resume_got += (size_t)k;
      if (c->resume_got < sizeof c->resume) return 0;
      if (c->resume.p.type != RN_TCP_MSG_RESUME || c->resume.from > c->rx)
        c->lost = 1; /* the plugin refused the move, or this side broke it */
      else
        c->skip = c->rx - c->resume.from;
      continue;
    }
    while (c->skip > 0) {
      char tmp[4096];
      k = recv(fd, tmp, c->skip < sizeof tmp ? (size_t)c->skip : sizeof tmp, MSG_DONTWAIT);
      if (k == 0) return -1;
      if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
      c->skip -= (uint64_t)k;
    }
    k = recv(fd, buf, len, MSG_DONTWAIT);
    if (k > 0) {
      c->rx += (uint64_t)k;
      return k;
    }
    if (k == 0) return -1;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  }
}

/* The control connection is now fd: write RESUME (mutated as the input
 * asked) and read the plugin's there. */
static void fw_ctl_switch(struct fw_target *t, int fd, int keep_old) {
  struct fw_ctl *c = &t->ctl;
  if (c->old_fd >= 0) close(c->old_fd);
  c->old_fd = keep_old ? t->fds[0] : -1;
  if (!keep_old) fw_close_all(&t->fds[0], 1, 1); /* a reset, as a rail that died */
  t->fds[0] = fd;
  t->quiet &= ~1ull;
  c->epoch++;
  c->resume_got = 0;
  c->skip = 0;
  if (c->withhold) {
    c->withhold = 0;
    return;
  }
  /* A real peer writes again the bytes TCP did not see acknowledged; here
   * the input says how many, and the plugin drops those it read. */
  uint64_t back = (uint64_t)c->replay < c->tx ? (uint64_t)c->replay : c->tx;
  c->replay = 0;
  struct rn_tcp_resume r = {.from = c->tx - back, .received = c->rx, .epoch = c->epoch};
  rn_tcp_wire_seal(&r, RN_TCP_MSG_RESUME, 0, 0);
  for (int i = 0; i + 1 < c->nmut; i += 2) ((uint8_t *)&r)[c->mut[i] % sizeof r] ^= c->mut[i + 1];
  if (c->nmut > 0 && !(c->mut[0] & 0x80)) {
    uint32_t crc = rn_tcp_wire_crc(&r, sizeof r - 4);
    memcpy((uint8_t *)&r + sizeof r - 4, &crc, 4);
  }
  c->nmut = 0;
  fw_write(fd, &r, sizeof r, NULL, NULL); /* not counted: RESUME is outside the byte stream */
  uint8_t again[sizeof c->last];
  for (uint64_t i = 0; i < back; i++) again[i] = c->last[(r.from + i) % sizeof c->last];
  fw_write(fd, again, (size_t)back, NULL, NULL);
  if (fw_verbose)
    fprintf(stderr, "fuzz_wire: control connection %u: RESUME from %llu received %llu\n", c->epoch,
            (unsigned long long)r.from, (unsigned long long)r.received);
}

/* A header made by the harness: mutated by the input ((offset, xor)
 * pairs), then sealed unless the input keeps its CRC. */
static void fw_mutate_seal(struct fw_in *in, uint8_t *hdr, size_t hl) {
  uint8_t m = fw_u8(in);
  for (int i = 0; i < (m & 3); i++) {
    uint8_t off = fw_u8(in);
    hdr[off % hl] ^= fw_u8(in);
  }
  if (!(m & 0x80)) {
    uint32_t crc = rn_tcp_wire_crc(hdr, hl - 4);
    memcpy(hdr + hl - 4, &crc, 4);
  }
}

static void fw_record(struct fw_in *in, struct fw_target *t) {
  static uint8_t buf[128 + 65536];
  uint8_t fl = fw_u8(in);
  int conn = (fl & 3) % t->nfds;
  int fd = t->fds[conn];
  int op = fl >> 2 & 3;
  size_t len = 0;
  if (op == 2) {
    if ((fl & 0x80) && t->action_fn != NULL) t->action_fn(t->arg, in, fw_u8(in));
  } else if (op == 1) {
    len = fw_bytes(in, buf, fw_u8(in));
  } else {
    uint8_t type = fw_u8(in);
    size_t hl = rn_tcp_wire_hlen(type);
    if (hl == 0) hl = 8 + (type & 63);
    buf[0] = type;
    fw_bytes(in, buf + 1, hl - 1);
    uint16_t plen16 = fw_u16(in);
    size_t pl = plen16 % 8192 + (plen16 >= 0xF000 ? 65536 - 8192 : 0);
    if (pl > 65536) pl = 65536;
    struct rn_tcp_prefix p;
    memcpy(&p, buf, sizeof p);
    if (!(fl & 0x20)) p.hlen = (uint16_t)hl;
    if (fl & 0x40) p.plen = (uint32_t)pl;
    memcpy(buf, &p, sizeof p);
    if ((fl & 0x80) && t->self != NULL) {
      if (type == RN_TCP_MSG_STREAMS && hl == sizeof(struct rn_tcp_streams)) {
        struct rn_tcp_streams *s = (struct rn_tcp_streams *)buf;
        for (int i = 0; i < RN_TCP_STREAMS_ADDRS; i++) fw_fix_addr(&s->addr[i], t->self);
      } else if (type == RN_TCP_MSG_OFFER && hl == sizeof(struct rn_tcp_offer)) {
        fw_fix_addr(&((struct rn_tcp_offer *)buf)->addr, t->self);
      }
    }
    if (op == 0) {
      uint32_t crc = rn_tcp_wire_crc(buf, hl - 4);
      memcpy(buf + hl - 4, &crc, 4);
    }
    size_t got = fw_bytes(in, buf + hl, pl);
    for (size_t i = got; i < pl; i++) buf[hl + i] = (uint8_t)(i * 131 + 7);
    len = hl + pl;
  }
  if (len > 0 && conn == 0)
    fw_ctl_write(t, buf, len, op != 1);
  else if (len > 0 && fd >= 0)
    fw_write(fd, buf, len, t->poll_fn, t->arg);
  if (op == 2 && (fl & 0x20) && t->post_fn != NULL) t->post_fn(t->arg);
  if (fl & 0x10 || op == 2) t->poll_fn(t->arg);
}

/* Actions shared by both modes (fw_action_*): a pause while the plugin
 * is polled (its stall and timeout rules run on the clock), a socket
 * closed (in order, or reset) or left unread, mutations for the next
 * RESUME. */
static int fw_action_common(struct fw_target *t, struct fw_in *in, uint8_t what) {
  switch (what & 7) {
    case 1: { /* close a socket */
      uint8_t a = fw_u8(in);
      int i = (a & 63) % t->nfds;
      if (t->fds[i] < 0) return 1;
      if (i == 0 && t->ctl.old_fd >= 0) {
        close(t->ctl.old_fd);
        t->ctl.old_fd = -1;
      }
      fw_close_all(&t->fds[i], 1, a >> 7);
      t->closed = i;
      return 1;
    }
    case 2: /* leave a socket unread (or read it again) */
      t->quiet ^= 1ull << (fw_u8(in) % t->nfds);
      return 1;
    case 3: { /* a pause of up to 315 ms, polling (FW_PAUSE_MS in all) */
      struct timespec t0, t1;
      int ms = (fw_u8(in) % 64) * 5;
      if (ms > fw_pause_left) ms = fw_pause_left;
      fw_pause_left -= ms;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      do {
        t->poll_fn(t->arg);
        usleep(1000);
        clock_gettime(CLOCK_MONOTONIC, &t1);
      } while ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < ms);
      return 1;
    }
    case 7: { /* mutations for the next RESUME this side writes, or none; bytes written again */
      uint8_t b = fw_u8(in), n = b % 4;
      t->ctl.withhold = b >> 7;
      t->ctl.replay = (b >> 2 & 31) * 8; /* at most 248: within the kept 256 */
      t->ctl.nmut = 0;
      for (int i = 0; i < n; i++) {
        t->ctl.mut[t->ctl.nmut++] = fw_u8(in);
        t->ctl.mut[t->ctl.nmut++] = fw_u8(in);
      }
      return 1;
    }
  }
  return 0;
}

/* ---- mode 1: a hostile sender ------------------------------------------ */
#define FW_GROUPS 3
struct fw_way { /* an OFFER the receiver sent */
  uint32_t streams;
  uint64_t nonce;
  struct rn_wire_addr addr;
};
struct fw_recv {
  void *rcomm;
  int ngroups;
  int n[FW_GROUPS];
  size_t sizes[FW_GROUPS][RN_MAX_RECVS];
  int tags[FW_GROUPS][RN_MAX_RECVS];
  uint8_t *bufs[FW_GROUPS][RN_MAX_RECVS];
  void *mhs[FW_GROUPS][RN_MAX_RECVS];
  void *req[FW_GROUPS];
  int done[FW_GROUPS]; /* 1 done, -1 failed */
  int posted, failed;
  struct fw_target *t;
  int lazy_streams; /* answer the receiver's STREAMS by dialing this many streams (0: never) */
  int nstreams, nrails; /* the raw sender's: stream i on rail i mod nrails */
  uint8_t out[4096];  /* what the receiver wrote, framed by the prefix */
  size_t out_len, out_skip;
  uint32_t msgs_in;   /* the receiver's control messages read */
  struct fw_way ways[RN_MAX_RAILS]; /* OFFER with CONTROL, by streams */
  int nways;
  struct fw_way rejoin; /* the latest OFFER of a rail (streams 0: none) */
  uint32_t nth[256], claims; /* the templates' ranks and claim numbers */
};

/* Dial one connection of a control connection and nstreams data streams
 * to addr with nonce (the control one alone with nstreams 0); the data
 * streams' sockets go to fds[0..nstreams-1], the control one is returned
 * (-1 when a dial failed). */
static int fw_dial_conn(const struct rn_wire_addr *addr, uint64_t nonce, int nstreams, int *fds) {
  struct rn_handle h = {.nonce = nonce};
  uint64_t conn_id = (uint64_t)rand() << 32 | (uint32_t)rand();
  int ctrl = -1;
  for (int i = 0; i <= nstreams; i++) {
    int fd = fw_dial(addr);
    if (fd < 0) break;
    struct rn_hello hello = fw_hello(&h, i == 0 ? RN_ROLE_CTRL : RN_ROLE_DATA,
                                     (uint8_t)(i == 0 ? 0 : i - 1), conn_id, (uint32_t)nstreams);
    fw_write(fd, &hello, sizeof hello, NULL, NULL);
    if (i == 0)
      ctrl = fd;
    else
      fds[i - 1] = fd;
  }
  return ctrl;
}

/* Read what the receiver wrote on the control connection; a STREAMS
 * message in it is answered as a real sender would: one connection of
 * lazy_streams data streams (and a control connection the receiver
 * closes) to its first address, with its nonce.  OFFERs are kept for the
 * actions that move the control connection or dial a rail back. */
static void fw_recv_read(struct fw_recv *r) {
  for (;;) {
    ssize_t k = fw_ctl_recv(r->t, r->out + r->out_len, sizeof r->out - r->out_len);
    if (k <= 0) return;
    r->out_len += (size_t)k;
    for (;;) {
      if (r->out_skip > 0) {
        size_t d = r->out_skip < r->out_len ? r->out_skip : r->out_len;
        memmove(r->out, r->out + d, r->out_len - d);
        r->out_len -= d;
        r->out_skip -= d;
      }
      struct rn_tcp_prefix p;
      if (r->out_len < sizeof p) break;
      memcpy(&p, r->out, sizeof p);
      if (p.hlen < sizeof p) {
        /* Cannot be: the plugin frames its own messages, unless a move
         * this side broke lost its place in them. */
        if (!r->t->ctl.lost && r->t->ctl.epoch == 0)
          fw_fail("the receiver wrote a malformed control message");
        r->out_len = 0;
        r->t->ctl.lost = 1;
        break;
      }
      if (p.hlen > r->out_len) break; /* the header whole first */
      r->msgs_in++;
      if (p.type == RN_TCP_MSG_OFFER && p.hlen == sizeof(struct rn_tcp_offer)) {
        struct rn_tcp_offer o;
        memcpy(&o, r->out, sizeof o);
        struct fw_way w = {.streams = o.streams, .nonce = o.nonce, .addr = o.addr};
        if (o.p.flags & RN_TCP_OFFER_CONTROL) {
          int i = 0;
          while (i < r->nways && r->ways[i].streams != o.streams) i++;
          if (i < RN_MAX_RAILS) {
            r->ways[i] = w;
            if (i == r->nways) r->nways++;
          }
        } else {
          r->rejoin = w;
        }
      }
      if (p.type == RN_TCP_MSG_STREAMS && p.hlen == sizeof(struct rn_tcp_streams)) {
        struct rn_tcp_streams m;
        memcpy(&m, r->out, sizeof m);
        if (r->lazy_streams > 0 && r->t->nfds + r->lazy_streams <= FW_MAX_FDS) {
          int ctrl = fw_dial_conn(&m.addr[0], m.nonce, r->lazy_streams, &r->t->fds[r->t->nfds]);
          if (ctrl >= 0) close(ctrl); /* the receiver closes it too */
          for (int i = 0; i < r->lazy_streams; i++)
            if (r->t->fds[r->t->nfds] >= 0) r->t->nfds++;
        }
      }
      r->out_skip = (size_t)p.hlen + p.plen;
    }
    if (r->out_len == sizeof r->out) r->out_len = 0; /* cannot be: no header is this long */
  }
}

/* The streams of rail k of the raw sender (all of them for k < 0). */
static uint32_t fw_rail_streams(int nstreams, int nrails, int k) {
  uint32_t m = 0;
  for (int i = 0; i < nstreams; i++)
    if (k < 0 || i % (nrails > 0 ? nrails : 1) == k) m |= 1u << i;
  return m;
}

/* Mode 1's actions (see fw_record): 0 a message made from the sender's
 * state (DOWN, WANT, BYE, OPEN, an EAGER or STREAMED DATA, a CHUNK, first
 * or re-sent, a RESUME where a move withheld it), 4 move
 * the control connection to an offered listener, 5 dial the offered rail
 * back, 6 the next action repeated. */
static void fw_recv_action(void *arg, struct fw_in *in, uint8_t what) {
  struct fw_recv *r = arg;
  struct fw_target *t = r->t;
  if (fw_action_common(t, in, what)) return;
  static uint8_t buf[128 + 65536];
  switch (what & 7) {
    case 0: {
      uint8_t a = fw_u8(in);
      size_t hl = 0, pl = 0;
      memset(buf, 0, 128);
      switch ((what >> 3) % 8) {
        case 7: { /* STREAMED (with ACK unless a&0x80) for buffer i of group a */
          struct rn_tcp_data *d = (struct rn_tcp_data *)buf;
          int g = (a & 7) % FW_GROUPS, i = fw_u8(in) % RN_MAX_RECVS;
          d->seq = (uint64_t)g;
          d->size = r->sizes[g][i] ? r->sizes[g][i] : 1;
          d->msg = t->ctl.msgs;
          d->tag = r->tags[g][i];
          d->idx = (uint32_t)i;
          d->grid = 4096;
          d->nth = r->nth[(uint8_t)d->tag]++;
          d->claim = r->claims++;
          rn_tcp_wire_seal(d, RN_TCP_MSG_DATA,
                           RN_TCP_DATA_STREAMED | (a & 0x80 ? 0 : RN_TCP_DATA_ACK), 0);
          hl = sizeof *d;
          break;
        }
        case 6: { /* RESUME, epoch this side's (+1 with a&1), where a move withheld it */
          struct rn_tcp_resume *m = (struct rn_tcp_resume *)buf;
          m->from = t->ctl.tx;
          m->received = t->ctl.rx;
          m->epoch = t->ctl.epoch + (a & 1);
          rn_tcp_wire_seal(m, RN_TCP_MSG_RESUME, 0, 0);
          fw_mutate_seal(in, buf, sizeof *m);
          fw_write(t->fds[0], buf, sizeof *m, t->poll_fn, t->arg);
          return;
        }
        case 0: { /* DOWN of one rail, or IDLE of all */
          struct rn_tcp_down *d = (struct rn_tcp_down *)buf;
          d->msg = t->ctl.msgs;
          d->streams = fw_rail_streams(r->nstreams, r->nrails, a & 2 ? -1 : a & 1);
          rn_tcp_wire_seal(d, RN_TCP_MSG_DOWN, a & 4 ? RN_TCP_DOWN_IDLE : 0, 0);
          hl = sizeof *d;
          break;
        }
        case 1: {
          struct rn_tcp_want *w = (struct rn_tcp_want *)buf;
          w->msg = t->ctl.msgs;
          rn_tcp_wire_seal(w, RN_TCP_MSG_WANT, 0, 0);
          hl = sizeof *w;
          break;
        }
        case 2: {
          struct rn_tcp_bye *b = (struct rn_tcp_bye *)buf;
          b->msg = t->ctl.msgs;
          b->received = r->msgs_in;
          rn_tcp_wire_seal(b, RN_TCP_MSG_BYE, 0, 0);
          hl = sizeof *b;
          break;
        }
        case 3: {
          struct rn_tcp_open *o = (struct rn_tcp_open *)buf;
          o->msg = t->ctl.msgs;
          rn_tcp_wire_seal(o, RN_TCP_MSG_OPEN, 0, 0);
          hl = sizeof *o;
          break;
        }
        case 4: { /* EAGER, payload of the input's length (its bytes made up) */
          struct rn_tcp_data *d = (struct rn_tcp_data *)buf;
          uint16_t sz = fw_u16(in);
          pl = sz == 0xFFFF ? 65536 : sz;
          d->size = pl;
          d->msg = t->ctl.msgs;
          d->tag = (int8_t)fw_u8(in);
          d->nth = r->nth[(uint8_t)d->tag]++;
          d->claim = r->claims++;
          rn_tcp_wire_seal(d, RN_TCP_MSG_DATA, RN_TCP_DATA_EAGER | (a & 1 ? RN_TCP_DATA_CREDIT : 0),
                           (uint32_t)pl);
          hl = sizeof *d;
          break;
        }
        case 5: { /* a chunk of group a, sent again (attempt > 0), on stream k */
          struct rn_tcp_chunk *c = (struct rn_tcp_chunk *)buf;
          int g = (a & 7) % FW_GROUPS, i = fw_u8(in) % RN_MAX_RECVS;
          size_t total = r->sizes[g][i] ? r->sizes[g][i] : 1;
          c->seq = (uint64_t)g;
          c->total = total;
          c->idx = (uint32_t)i;
          c->grid = 4096;
          c->index = fw_u8(in) % (uint32_t)((total + 4095) / 4096);
          c->offset = (uint64_t)c->index * 4096;
          c->attempt = a >> 3; /* 0: a first copy */
          pl = total - c->offset < 4096 ? total - c->offset : 4096;
          rn_tcp_wire_seal(c, RN_TCP_MSG_CHUNK, 0, (uint32_t)pl);
          hl = sizeof *c;
          fw_mutate_seal(in, buf, hl);
          for (size_t b = 0; b < pl; b++) buf[hl + b] = (uint8_t)(b * 7);
          int s = 1 + fw_u8(in) % (t->nfds > 1 ? t->nfds - 1 : 1);
          if (s < t->nfds && t->fds[s] >= 0) fw_write(t->fds[s], buf, hl + pl, t->poll_fn, t->arg);
          return;
        }
      }
      fw_mutate_seal(in, buf, hl);
      for (size_t b = 0; b < pl; b++) buf[hl + b] = (uint8_t)(b * 13 + 1);
      fw_ctl_write(t, buf, hl + pl, 1);
      return;
    }
    case 4: { /* move the control connection */
      uint8_t a = fw_u8(in);
      if (r->nways == 0) return;
      const struct fw_way *w = &r->ways[a % r->nways];
      int unused[1];
      int fd = fw_dial_conn(&w->addr, w->nonce, 0, unused);
      if (fd >= 0) fw_ctl_switch(t, fd, !(a & 0x80));
      return;
    }
    case 5: { /* dial the offered rail back */
      uint32_t s = r->rejoin.streams & fw_rail_streams(r->nstreams, r->nrails, -1);
      int m = __builtin_popcount(s), fds[RN_RDV_MAX_STREAMS];
      (void)fw_u8(in);
      if (m == 0) return;
      for (int i = 0; i < m; i++) fds[i] = -1;
      int ctrl = fw_dial_conn(&r->rejoin.addr, r->rejoin.nonce, m, fds);
      if (ctrl >= 0) close(ctrl); /* the receiver closes it too */
      for (int i = 0, k = 0; i < r->nstreams; i++) {
        if (!(s & (1u << i))) continue;
        if (1 + i < t->nfds) {
          fw_close_all(&t->fds[1 + i], 1, 1);
          t->fds[1 + i] = fds[k];
          t->quiet &= ~(1ull << (1 + i));
        } else if (fds[k] >= 0) {
          close(fds[k]);
        }
        k++;
      }
      r->rejoin.streams = 0;
      return;
    }
    case 6: { /* the next action, again and again */
      int n = 1 + fw_u8(in) % 96;
      size_t at = in->pos;
      uint8_t next = fw_u8(in);
      if ((next & 7) == 6) next ^= 6; /* no nested repeat */
      for (int i = 0; i < n; i++) {
        in->pos = at + 1;
        fw_recv_action(arg, in, next);
      }
      return;
    }
  }
}

static void fw_check_guard(const struct fw_recv *r, int g) {
  for (int i = 0; i < r->n[g]; i++)
    for (int k = 0; k < FW_GUARD; k++)
      if (r->bufs[g][i][r->sizes[g][i] + k] != 0xEE)
        fw_fail("a receive wrote past its buffer");
}

static void fw_recv_poll(void *arg) {
  struct fw_recv *r = arg;
  if (!(r->t->quiet & 1)) fw_recv_read(r);
  for (int i = 1; i < r->t->nfds; i++)
    if (!(r->t->quiet >> i & 1)) fw_drain(r->t->fds[i]);
  for (int g = 0; g < r->ngroups; g++) {
    if (r->req[g] == NULL || r->done[g]) continue;
    int done = 0, sizes[RN_MAX_RECVS];
    for (int i = 0; i < RN_MAX_RECVS; i++) sizes[i] = -7;
    ncclResult_t res = rn_core_test(r->req[g], &done, sizes);
    if (res != ncclSuccess) {
      r->done[g] = -1;
      continue;
    }
    if (!done) continue;
    r->done[g] = 1;
    for (int i = 0; i < r->n[g]; i++)
      if (sizes[i] < 0 || (size_t)sizes[i] > r->sizes[g][i])
        fw_fail("a receive reported a size outside what was posted");
    fw_check_guard(r, g);
  }
}

/* Post the next group (irecv may ask to be called again). */
static void fw_recv_post(void *arg) {
  struct fw_recv *r = arg;
  if (r->failed || r->posted >= r->ngroups) return;
  int g = r->posted;
  void *ptrs[RN_MAX_RECVS];
  for (int i = 0; i < r->n[g]; i++) ptrs[i] = r->bufs[g][i];
  for (int k = 0; k < 100 && r->req[g] == NULL; k++) {
    if (rn_core_irecv(r->rcomm, r->n[g], ptrs, r->sizes[g], r->tags[g], r->mhs[g], &r->req[g]) !=
        ncclSuccess) {
      r->failed = 1; /* the comm failed already: a clean error */
      return;
    }
    if (r->req[g] == NULL) fw_recv_poll(r);
  }
  r->posted++;
}

/* Once the raw peer closed every socket: each request ends or fails within
 * FW_END_POLLS calls, else the input found a hang (what says whose).  On
 * two rails the plugin may first wait for the control connection to move
 * (PROTOCOL.md, Rails and failover: twice RAILNET_RAIL_STALL_MS plus twice
 * RAILNET_RAIL_TIMEOUT_MS), so the bound there is that, and some more. */
static void fw_after_close(int (*pending)(const void *), void (*poll_fn)(void *), void *arg,
                           const char *what) {
  for (int k = 0; k < FW_END_POLLS && pending(arg); k++) {
    poll_fn(arg);
    if (k > 20) usleep(200);
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (fw_multi && pending(arg)) {
    poll_fn(arg);
    usleep(1000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 > FW_END_MS_MULTI)
      break;
  }
  if (pending(arg)) fw_fail(what);
}

static int fw_recv_pending(const void *arg) {
  const struct fw_recv *r = arg;
  int n = 0;
  for (int g = 0; g < r->ngroups; g++) n += r->req[g] != NULL && r->done[g] == 0;
  return n;
}

static void fw_sender(struct fw_in *in) {
  uint8_t cfg = fw_u8(in);
  int nstreams = cfg & 3;
  int close_end = cfg >> 2 & 1;
  int shift = cfg >> 3 & 7; /* sizes: 16 bits << shift (up to 8 MiB) */
  /* bits 6-7, with no streams at connect: how many to dial when the
   * receiver answers an OPEN with STREAMS.  On two rails: 2..4 streams
   * over both (stream i on rail i mod 2), bit 6 leaves rail 1 out. */
  uint16_t absent = 0;
  if (fw_multi) {
    nstreams = 2 + (cfg & 3) % 3;
    absent = cfg >> 6 & 1 ? 2 : 0;
  }
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lcomm = NULL;
  int dev = fw_multi ? fw_vdev : fw_dev;
  if (rn_core_listen(NULL, dev, handle, &lcomm) != ncclSuccess) fw_fail("listen failed");
  struct rn_handle h;
  memcpy(&h, handle, sizeof h);
  const struct rn_wire_addr *w = (const struct rn_wire_addr *)h.payload;
  int nrails = fw_multi ? 2 : 1;
  if (h.nrails < nrails) fw_fail("the listener has fewer rails than its device");
  struct fw_target t = {.nfds = 1 + nstreams, .closed = -1, .ctl = {.old_fd = -1, .resume_got = sizeof(struct rn_tcp_resume)}};
  for (int i = 0; i < FW_MAX_FDS; i++) t.fds[i] = -1;
  uint64_t conn_id = 0x1234567800000000ull | (uint64_t)in->n;
  for (int i = 0; i < 1 + nstreams; i++) {
    int rail = i == 0 ? 0 : (i - 1) % nrails;
    if (i > 0 && (absent >> rail & 1)) continue; /* a rail left out: never dialled */
    t.fds[i] = fw_dial(&w[rail]);
    if (t.fds[i] < 0) fw_fail("cannot dial the listener");
    struct rn_hello hello = fw_hello(&h, i == 0 ? RN_ROLE_CTRL : RN_ROLE_DATA,
                                     (uint8_t)(i == 0 ? 0 : i - 1), conn_id, (uint32_t)nstreams);
    if (fw_multi) {
      hello.nlocals = (uint16_t)nrails;
      hello.absent = absent;
    }
    fw_write(t.fds[i], &hello, sizeof hello, NULL, NULL);
  }
  struct fw_recv r;
  memset(&r, 0, sizeof r);
  r.t = &t;
  r.nstreams = nstreams;
  r.nrails = nrails;
  r.lazy_streams = nstreams == 0 ? (cfg >> 6 & 3) : 0;
  for (int k = 0; k < 1000 && r.rcomm == NULL; k++) {
    if (rn_core_accept(lcomm, &r.rcomm, NULL) != ncclSuccess) fw_fail("accept failed");
    if (r.rcomm == NULL) usleep(100);
  }
  if (r.rcomm == NULL) fw_fail("accept never completed");
  uint8_t b = 0;
  if (fw_read_byte(t.fds[0], 1000, &b) != 0 || b != 0xA5) fw_fail("no accept byte");
  /* groups: bits 0-1 how many (1..3), bits 2-3 how many are posted
   * before the records (the others when a record asks, or at the end) */
  uint8_t gb = fw_u8(in);
  r.ngroups = 1 + (gb & 3) % FW_GROUPS;
  int pre = (gb >> 2 & 3) > r.ngroups ? r.ngroups : gb >> 2 & 3;
  for (int g = 0; g < r.ngroups; g++) {
    r.n[g] = 1 + fw_u8(in) % RN_MAX_RECVS;
    for (int i = 0; i < r.n[g]; i++) {
      size_t sz = (size_t)fw_u16(in) << shift;
      if (sz > (8u << 20)) sz = 8u << 20;
      r.sizes[g][i] = sz;
      r.tags[g][i] = (int8_t)fw_u8(in);
      r.bufs[g][i] = malloc(sz + FW_GUARD);
      memset(r.bufs[g][i], 0xEE, sz + FW_GUARD);
      if (rn_core_reg_mr(r.rcomm, r.bufs[g][i], sz, NCCL_PTR_HOST, &r.mhs[g][i]) != ncclSuccess)
        fw_fail("regMr failed");
    }
  }
  t.poll_fn = fw_recv_poll;
  t.arg = &r;
  t.post_fn = fw_recv_post;
  t.action_fn = fw_recv_action;
  for (int g = 0; g < pre; g++) fw_recv_post(&r);
  for (int k = 0; k < FW_RECORDS && fw_more(in); k++) fw_record(in, &t);
  while (r.posted < r.ngroups && !r.failed) fw_recv_post(&r);
  for (int k = 0; k < FW_POLLS && fw_recv_pending(&r); k++) fw_recv_poll(&r);
  if (close_end) {
    fw_close_all(t.fds, t.nfds, 0);
    fw_close_all(&t.ctl.old_fd, 1, 0);
    fw_after_close(fw_recv_pending, fw_recv_poll, &r,
                   "a receive neither ended nor failed after the peer closed");
  }
  if (fw_verbose)
    for (int g = 0; g < r.ngroups; g++)
      fprintf(stderr, "fuzz_wire: receive %d: %s\n", g,
              r.req[g] == NULL ? "not posted" : r.done[g] == 1 ? "done" : r.done[g] ? "failed" : "pending");
  fw_close_all(t.fds, t.nfds, 1);
  fw_close_all(&t.ctl.old_fd, 1, 1);
  for (int g = 0; g < r.ngroups; g++)
    for (int i = 0; i < r.n[g]; i++) rn_core_dereg_mr(r.rcomm, r.mhs[g][i]);
  (void)rn_core_close_recv(r.rcomm); /* an error at close is a clean end too */
  for (int g = 0; g < r.ngroups; g++) {
    if (r.done[g] == 1) fw_check_guard(&r, g);
    for (int i = 0; i < r.n[g]; i++) free(r.bufs[g][i]);
  }
  rn_core_close_listen(lcomm);
}

/* ---- mode 0: a hostile connector --------------------------------------- */
static void fw_connector(struct fw_in *in) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lcomm = NULL;
  int dev = fw_multi ? fw_vdev : fw_dev;
  if (rn_core_listen(NULL, dev, handle, &lcomm) != ncclSuccess) fw_fail("listen failed");
  struct rn_handle h;
  memcpy(&h, handle, sizeof h);
  const struct rn_wire_addr *w = (const struct rn_wire_addr *)h.payload;
  int nrails = h.nrails > 0 ? h.nrails : 1;
  int fds[FW_MAX_FDS];
  uint8_t first = fw_u8(in);
  int nfds = 1 + first % 6;
  for (int i = 0; i < FW_MAX_FDS; i++) fds[i] = -1;
  /* Bit 7: first, FW_FLOOD_MIN or more connections that pass admission
   * (this listener's nonce) and never complete (a control connection
   * whose data stream never comes): the rendezvous holds at most 64 such
   * groups and evicts the oldest for each newcomer. */
  int flood[FW_FLOOD_MIN + 32], nflood = first & 0x80 ? FW_FLOOD_MIN + (first >> 3 & 15) : 0;
  for (int i = 0; i < nflood; i++) {
    flood[i] = fw_dial(&w[i % nrails]);
    if (flood[i] < 0) fw_fail("cannot dial the listener");
    struct rn_hello o = fw_hello(&h, RN_ROLE_CTRL, 0, 0xF100D00000000000ull | (uint64_t)i, 1);
    fw_write(flood[i], &o, sizeof o, NULL, NULL);
    if (i % 8 == 7) {
      void *rc = NULL;
      if (rn_core_accept(lcomm, &rc, NULL) == ncclSuccess && rc != NULL) rn_core_close_recv(rc);
    }
  }
  for (int i = 0; i < nfds; i++) {
    uint8_t opt = fw_u8(in);
    fds[i] = fw_dial(&w[(opt >> 3) % nrails]);
    if (fds[i] < 0) fw_fail("cannot dial the listener");
    uint8_t buf[256];
    size_t len = 0;
    if (opt & 1) {
      struct rn_hello o = fw_hello(&h, 1 + fw_u8(in) % 4, fw_u8(in), 1 + fw_u8(in) % 3, fw_u8(in));
      uint8_t mut = fw_u8(in);
      if (mut & 1) o.nlocals = fw_u16(in);
      if (mut & 2) o.absent = fw_u16(in);
      if (mut & 4) o.nstreams = (uint32_t)fw_u16(in) << 16 | fw_u16(in);
      if (mut & 8) o.version = fw_u16(in);
      if (mut & 16) o.nonce ^= 1;
      if (mut & 32) o.magic ^= fw_u8(in);
      memcpy(buf, &o, sizeof o);
      len = sizeof o;
      if (mut & 64) len = fw_u8(in) % sizeof o; /* a partial hello */
    }
    len += fw_bytes(in, buf + len, fw_u8(in) % 64);
    fw_write(fds[i], buf, len, NULL, NULL);
    if (opt & 2) shutdown(fds[i], SHUT_WR);
    if (opt & 4) {
      close(fds[i]);
      fds[i] = -1;
    }
  }
  for (int k = 0; k < 4 + fw_u8(in) % 16; k++) {
    void *rcomm = NULL;
    if (rn_core_accept(lcomm, &rcomm, NULL) != ncclSuccess) continue; /* a clean error */
    if (rcomm != NULL) rn_core_close_recv(rcomm);
    for (int i = 0; i < nfds; i++) fw_drain(fds[i]);
  }
  /* The listener still serves a real connector. */
  void *scomm = NULL, *rcomm = NULL;
  for (int k = 0; k < 20000 && scomm == NULL; k++) {
    if (rn_core_connect(NULL, RN_TRAFFIC_CLASS_UNDEF, dev, handle, &scomm, NULL) != ncclSuccess)
      fw_fail("a real connect failed after hostile connectors");
    void *rc = NULL;
    if (rn_core_accept(lcomm, &rc, NULL) != ncclSuccess)
      fw_fail("accept failed for a real connector after hostile connectors");
    if (rc != NULL) {
      if (rcomm != NULL) rn_core_close_recv(rcomm);
      rcomm = rc;
    }
    if (scomm == NULL) usleep(50);
  }
  if (scomm == NULL) fw_fail("a real connect was never accepted after hostile connectors");
  for (int k = 0; k < 2000 && rcomm == NULL; k++) {
    if (rn_core_accept(lcomm, &rcomm, NULL) != ncclSuccess) fw_fail("accept failed");
    if (rcomm == NULL) usleep(50);
  }
  if (rcomm == NULL) fw_fail("the real connection's receive comm never came");
  rn_core_close_send(scomm);
  rn_core_close_recv(rcomm);
  fw_close_all(fds, nfds, 1);
  fw_close_all(flood, nflood, 1);
  rn_core_close_listen(lcomm);
}

/* ---- mode 2: a hostile receiver ---------------------------------------- */
#define FW_SENDS 4
#define FW_PENDING 8
struct fw_send {
  void *scomm;
  int lfd[2], nlfd;              /* the raw listeners: one per rail of the handle */
  struct rn_wire_addr self[2];
  struct fw_target *t;
  int pending[FW_PENDING], npending; /* accepted, their hello not read yet */
  int stream_of[FW_MAX_FDS];     /* the data stream index of fds[i] (its hello's), -1 for none */
  int nstreams, nrails;          /* the plugin's, from its control connection's hello */
  int connected;                 /* its first control connection came (and got the accept byte) */
  int n, posted, failed;
  size_t moved; /* bytes the sender wrote */
  uint64_t cts_seq;
  int cursor; /* the next send a CTS template names */
  void *req[FW_SENDS];
  int done[FW_SENDS];
  size_t sizes[FW_SENDS];
  int tags[FW_SENDS];
  uint8_t *bufs[FW_SENDS];
  void *mhs[FW_SENDS];
};

/* Sends go in order, each once isend takes it (it may wait for a
 * clear-to-send). */
static void fw_send_post(struct fw_send *s) {
  while (!s->failed && s->posted < s->n) {
    int i = s->posted;
    if (rn_core_isend(s->scomm, s->bufs[i], s->sizes[i], s->tags[i], s->mhs[i], &s->req[i]) !=
        ncclSuccess) {
      s->failed = 1; /* the comm failed: a clean error */
      return;
    }
    if (s->req[i] == NULL) return;
    s->posted++;
  }
}

/* Connections the plugin dials (at connect, for STREAMS and OFFER, to
 * move its control connection) are accepted and sorted by their hello:
 * the first control connection gets the accept byte; a lone control
 * connection later is a move (RESUME both ways, fw_ctl_switch); the rest
 * are read and dropped, never answered. */
static void fw_send_accept(struct fw_send *s) {
  struct fw_target *t = s->t;
  for (int l = 0; l < s->nlfd; l++)
    for (;;) {
      int fd = accept4(s->lfd[l], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      if (s->npending < FW_PENDING)
        s->pending[s->npending++] = fd;
      else
        close(fd);
    }
  for (int i = 0; i < s->npending; i++) {
    struct rn_hello hello;
    int fd = s->pending[i];
    ssize_t k = recv(fd, &hello, sizeof hello, MSG_PEEK | MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (k > 0 && k < (ssize_t)sizeof hello) continue;
    s->pending[i--] = s->pending[--s->npending];
    if (k <= 0 || recv(fd, &hello, sizeof hello, MSG_DONTWAIT) != (ssize_t)sizeof hello) {
      close(fd);
      continue;
    }
    if (hello.role == RN_ROLE_CTRL && !s->connected) {
      s->connected = 1;
      uint8_t a5 = 0xA5;
      fw_write(fd, &a5, 1, NULL, NULL);
      t->fds[0] = fd;
      s->nstreams = hello.nstreams <= RN_RDV_MAX_STREAMS ? (int)hello.nstreams : 0;
      s->nrails = hello.nlocals > 0 ? hello.nlocals : 1;
    } else if (hello.role == RN_ROLE_CTRL && hello.nstreams == 0) {
      fw_ctl_switch(t, fd, 1);
    } else if (t->nfds < FW_MAX_FDS) {
      s->stream_of[t->nfds] = hello.role == RN_ROLE_DATA ? hello.index : -1;
      t->fds[t->nfds++] = fd;
    } else {
      close(fd);
    }
  }
}

static void fw_send_poll(void *arg) {
  struct fw_send *s = arg;
  struct fw_target *t = s->t;
  fw_send_accept(s);
  if (!(t->quiet & 1)) {
    static char buf[65536];
    ssize_t k;
    while ((k = fw_ctl_recv(t, buf, sizeof buf)) > 0) s->moved += (size_t)k;
  }
  for (int i = 1; i < t->nfds; i++)
    if (!(t->quiet >> i & 1)) s->moved += fw_drain(t->fds[i]);
  fw_send_post(s);
  for (int i = 0; i < s->n; i++) {
    if (s->req[i] == NULL || s->done[i]) continue;
    int done = 0, size = -7;
    ncclResult_t res = rn_core_test(s->req[i], &done, &size);
    if (res != ncclSuccess)
      s->done[i] = -1;
    else if (done)
      s->done[i] = 1;
  }
}

static int fw_send_pending(const void *arg) {
  const struct fw_send *s = arg;
  int n = 0;
  for (int i = 0; i < s->n; i++) n += s->req[i] != NULL && s->done[i] == 0;
  return n;
}

/* Mode 2's actions (see fw_record): 0 a message made from the
 * receiver's state (CTS naming the next sends, ACK, OFFER of a rail or of
 * a way for the control connection, STREAMS, BYE, a RESUME out of turn),
 * 6 the next action repeated. */
static void fw_send_action(void *arg, struct fw_in *in, uint8_t what) {
  struct fw_send *s = arg;
  struct fw_target *t = s->t;
  if (fw_action_common(t, in, what)) return;
  static uint8_t buf[128];
  if ((what & 7) == 6) {
    int n = 1 + fw_u8(in) % 96;
    size_t at = in->pos;
    uint8_t next = fw_u8(in);
    if ((next & 7) == 6) next ^= 6; /* no nested repeat */
    for (int i = 0; i < n; i++) {
      in->pos = at + 1;
      fw_send_action(arg, in, next);
    }
    return;
  }
  if ((what & 7) != 0) return;
  uint8_t a = fw_u8(in);
  size_t hl = 0;
  int header = 1;
  memset(buf, 0, sizeof buf);
  switch ((what >> 3) % 6) {
    case 0: { /* CTS: the next sends in order, then buffers no send has */
      struct rn_tcp_cts *c = (struct rn_tcp_cts *)buf;
      c->seq = s->cts_seq++;
      c->msg = t->ctl.msgs;
      c->n = 1 + (a & 7);
      for (uint32_t i = 0; i < RN_MAX_RECVS; i++) {
        c->sizes[i] = RN_TCP_NO_BUFFER;
        if (i >= c->n) continue;
        if (s->cursor < s->n) {
          c->sizes[i] = s->sizes[s->cursor] << (a >> 3 & 1); /* bit 3: room to spare */
          c->tags[i] = s->tags[s->cursor++];
        } else {
          c->sizes[i] = 4096;
          c->tags[i] = 0x5555;
        }
      }
      rn_tcp_wire_seal(c, RN_TCP_MSG_CTS, 0, 0);
      hl = sizeof *c;
      break;
    }
    case 1: { /* ACK of buffer idx of a recent group */
      struct rn_tcp_ack *k = (struct rn_tcp_ack *)buf;
      uint64_t back = 1 + (a >> 3 & 7);
      k->seq = s->cts_seq >= back ? s->cts_seq - back : 0;
      k->idx = a & 7;
      k->msg = t->ctl.msgs;
      rn_tcp_wire_seal(k, RN_TCP_MSG_ACK, 0, 0);
      hl = sizeof *k;
      break;
    }
    case 2: { /* OFFER: rail a&1 back (a&8: the rail of the stream closed last), or (a&2)
               * a way for the control connection there */
      struct rn_tcp_offer *o = (struct rn_tcp_offer *)buf;
      int rail = (a & 1) % s->nlfd;
      if ((a & 8) && t->closed > 0 && s->stream_of[t->closed] >= 0)
        rail = s->stream_of[t->closed] % (s->nrails > 0 ? s->nrails : 1) % s->nlfd;
      o->nonce = (uint64_t)rand() << 32 | (uint32_t)rand();
      o->msg = t->ctl.msgs;
      o->streams = fw_rail_streams(s->nstreams, s->nrails, a & 4 ? -1 : rail);
      o->addr = s->self[rail];
      rn_tcp_wire_seal(o, RN_TCP_MSG_OFFER, a & 2 ? RN_TCP_OFFER_CONTROL : 0, 0);
      hl = sizeof *o;
      break;
    }
    case 3: {
      struct rn_tcp_streams *m = (struct rn_tcp_streams *)buf;
      m->nonce = (uint64_t)rand() << 32 | (uint32_t)rand();
      m->msg = t->ctl.msgs;
      m->nrails = (uint32_t)(a & 1 ? 1 : s->nlfd);
      for (uint32_t i = 0; i < m->nrails; i++) m->addr[i] = s->self[i];
      rn_tcp_wire_seal(m, RN_TCP_MSG_STREAMS, 0, 0);
      hl = sizeof *m;
      break;
    }
    case 4: {
      struct rn_tcp_bye *b = (struct rn_tcp_bye *)buf;
      b->msg = t->ctl.msgs;
      rn_tcp_wire_seal(b, RN_TCP_MSG_BYE, 0, 0);
      hl = sizeof *b;
      break;
    }
    default: {
      struct rn_tcp_resume *r = (struct rn_tcp_resume *)buf;
      r->from = t->ctl.tx;
      r->received = t->ctl.rx;
      r->epoch = t->ctl.epoch + (a & 1);
      rn_tcp_wire_seal(r, RN_TCP_MSG_RESUME, 0, 0);
      hl = sizeof *r;
      header = 0;
      break;
    }
  }
  fw_mutate_seal(in, buf, hl);
  fw_ctl_write(t, buf, hl, header);
}

static void fw_receiver(struct fw_in *in) {
  uint8_t cfg = fw_u8(in);
  int close_end = cfg & 1;
  int shift = cfg >> 1 & 7;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lcomm = NULL;
  int dev = fw_multi ? fw_vdev : fw_dev;
  if (rn_core_listen(NULL, dev, handle, &lcomm) != ncclSuccess) fw_fail("listen failed");
  rn_core_close_listen(lcomm);
  struct rn_handle h;
  memcpy(&h, handle, sizeof h);
  struct rn_wire_addr *w = (struct rn_wire_addr *)h.payload;
  struct fw_send s;
  memset(&s, 0, sizeof s);
  s.nlfd = fw_multi ? 2 : 1;
  if (h.nrails < s.nlfd) fw_fail("the listener has fewer rails than its device");
  /* The raw receiver listens where the handle says, on each rail's address. */
  for (int l = 0; l < s.nlfd; l++) {
    union rn_sockaddr sa;
    if (rn_sockaddr_from_wire(&w[l], &sa) != 0) fw_fail("the handle's address");
    sa.in.sin_port = 0;
    socklen_t sl = sizeof sa.in;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, &sa.sa, sizeof sa.in) != 0 || listen(lfd, 64) != 0 ||
        getsockname(lfd, &sa.sa, &sl) != 0)
      fw_fail("raw listener");
    fw_nonblock(lfd);
    s.lfd[l] = lfd;
    rn_sockaddr_to_wire(&sa, &s.self[l]);
  }
  memset(h.payload, 0, sizeof(struct rn_wire_addr) * 5);
  for (int l = 0; l < s.nlfd; l++) w[l] = s.self[l];
  h.nrails = (uint8_t)s.nlfd;
  h.check = fw_handle_check(&h);
  memcpy(handle, &h, sizeof h);

  for (int i = 0; i < FW_MAX_FDS; i++) s.stream_of[i] = -1;
  struct fw_target t = {.nfds = 1, .self = &s.self[0], .closed = -1,
                        .ctl = {.old_fd = -1, .resume_got = sizeof(struct rn_tcp_resume)}};
  for (int i = 0; i < FW_MAX_FDS; i++) t.fds[i] = -1;
  s.t = &t;
  for (int k = 0; k < 4000 && s.scomm == NULL; k++) {
    if (rn_core_connect(NULL, RN_TRAFFIC_CLASS_UNDEF, dev, handle, &s.scomm, NULL) != ncclSuccess)
      fw_fail("connect to the raw receiver failed");
    fw_send_accept(&s);
    if (s.scomm == NULL) usleep(50);
  }
  if (s.scomm == NULL) fw_fail("connect to the raw receiver never completed");
  if (!s.connected) fw_fail("connected without a control connection");
  s.n = 1 + fw_u8(in) % FW_SENDS;
  for (int i = 0; i < s.n; i++) {
    size_t sz = (size_t)fw_u16(in) << shift;
    if (sz > (8u << 20)) sz = 8u << 20; /* above 4 MiB: data streams (OPEN, STREAMS) */
    s.tags[i] = (int8_t)fw_u8(in);
    s.sizes[i] = sz;
    s.bufs[i] = malloc(sz + 1);
    memset(s.bufs[i], 0x5A, sz + 1);
    if (rn_core_reg_mr(s.scomm, s.bufs[i], sz, NCCL_PTR_HOST, &s.mhs[i]) != ncclSuccess)
      fw_fail("regMr failed");
  }
  fw_send_poll(&s);
  t.poll_fn = fw_send_poll;
  t.action_fn = fw_send_action;
  t.arg = &s;
  for (int k = 0; k < FW_RECORDS && fw_more(in); k++) fw_record(in, &t);
  /* A send over the data streams takes many calls (its chunks go out
   * between pauses of the rails' pacing): go on while its bytes move. */
  int polls = FW_POLLS;
  for (int i = 0; i < s.n; i++)
    if (s.sizes[i] > (4u << 20)) polls = 80 * FW_POLLS;
  for (int k = 0; k < polls && fw_send_pending(&s); k++) fw_send_poll(&s);
  if (close_end) {
    fw_close_all(t.fds, t.nfds, 0);
    fw_close_all(&t.ctl.old_fd, 1, 0);
    fw_close_all(s.pending, s.npending, 0);
    s.npending = 0;
    for (int l = 0; l < s.nlfd; l++) close(s.lfd[l]);
    s.nlfd = 0;
    fw_after_close(fw_send_pending, fw_send_poll, &s,
                   "a send neither ended nor failed after the peer closed");
  }
  if (fw_verbose)
    for (int i = 0; i < s.n; i++)
      fprintf(stderr, "fuzz_wire: send %d: %s\n", i,
              s.req[i] == NULL ? "not posted" : s.done[i] == 1 ? "done" : s.done[i] ? "failed" : "pending");
  fw_close_all(t.fds, t.nfds, 1);
  fw_close_all(&t.ctl.old_fd, 1, 1);
  fw_close_all(s.pending, s.npending, 1);
  for (int i = 0; i < s.n; i++) rn_core_dereg_mr(s.scomm, s.mhs[i]);
  rn_core_close_send(s.scomm);
  for (int i = 0; i < s.n; i++) free(s.bufs[i]);
  for (int l = 0; l < s.nlfd; l++) close(s.lfd[l]);
}

/* ---- entry points -------------------------------------------------------- */
static int fw_dev_named(int ndev, const char *name) {
  for (int d = 0; d < ndev; d++) {
    struct rn_props p;
    if (rn_core_get_properties(d, &p) == ncclSuccess && strcmp(p.name, name) == 0) return d;
  }
  return -1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  signal(SIGPIPE, SIG_IGN);
  fw_verbose = getenv("FUZZ_WIRE_VERBOSE") != NULL;
  /* FUZZ_WIRE_RAILS=lo,IF (tests/fuzz/wire_netns.sh, in a network
   * namespace of its own): a second interface, fused with loopback into a
   * device of two rails for the inputs that ask for one. */
  const char *rails = getenv("FUZZ_WIRE_RAILS");
  char spec[128];
  snprintf(spec, sizeof spec, "=%s", rails != NULL && rails[0] ? rails : "lo");
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", spec, 1);
  if (rails != NULL && rails[0]) setenv("RAILNET_NICS", rails, 1);
  setenv("RAILNET_SOCKET_FAMILY", "AF_INET", 1);
  setenv("RAILNET_SOCKET_NSTREAMS", "2", 1);
  setenv("RAILNET_SOCKET_NTHREADS", "0", 1); /* every byte moves in test(): deterministic */
  setenv("RAILNET_SOCKET_POOL", "0", 1);     /* nothing kept across inputs */
  setenv("RAILNET_SOCKET_CHUNK", "4096", 1);
  setenv("RAILNET_SOCKET_INLINE", "256", 1);
  setenv("RAILNET_CONNECT_TIMEOUT_MS", "200", 1);
  setenv("RAILNET_HELLO_TIMEOUT_MS", "50", 1);
  char ms[16];
  snprintf(ms, sizeof ms, "%d", FW_TIMEOUT_MS);
  setenv("RAILNET_RAIL_TIMEOUT_MS", ms, 1);
  snprintf(ms, sizeof ms, "%d", FW_STALL_MS);
  setenv("RAILNET_RAIL_STALL_MS", ms, 1);
  setenv("RAILNET_RAIL_HOLD_MS", "0", 1); /* a rail dialled back is used at once */
  setenv("RAILNET_RAIL_ACK", "1", 1);
  if (rn_core_init(fw_logger) != ncclSuccess) fw_fail("init failed");
  int ndev = 0;
  if (rn_core_devices(&ndev) != ncclSuccess || ndev < 1) fw_fail("no loopback device");
  fw_dev = fw_dev_named(ndev, "lo");
  if (fw_dev < 0) fw_fail("no loopback device");
  if (rails != NULL && rails[0]) {
    struct rn_vprops vp = {.ndevs = 2, .devs = {0, 1}};
    if (ndev != 2 || rn_core_make_vdevice(&fw_vdev, &vp) != ncclSuccess)
      fw_fail("FUZZ_WIRE_RAILS: two devices fused into one of two rails");
    fw_dev = fw_dev_named(ndev, "lo"); /* the table was built again */
    fprintf(stderr, "fuzz_wire: device %d of two rails (%s), device %d of one (lo)\n", fw_vdev,
            rails, fw_dev);
  }
  return 0;
}

/* The first byte picks the peer (its value mod 3) and, on a host with
 * FUZZ_WIRE_RAILS, the device: one rail for 0..2, two for 3..5 (mod 6;
 * elsewhere those run on one rail). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  struct fw_in in = {data, size, 1};
  fw_multi = fw_vdev >= 0 && data[0] % 6 >= 3;
  fw_pause_left = FW_PAUSE_MS;
  switch (data[0] % 3) {
    case 0: fw_connector(&in); break;
    case 1: fw_sender(&in); break;
    default: fw_receiver(&in); break;
  }
  return 0;
}
