/* libFuzzer target for the TCP transport's wire (plugin/tcp/PROTOCOL.md)
 * and the rendezvous hello (plugin/rendezvous.c): the plugin's own code,
 * linked in (tests/fuzz/fuzz_wire.sh builds it), faces a peer whose bytes
 * come from the input.  The first byte picks the peer:
 *
 *   0  hostile connector: the plugin listens on loopback; up to 4 raw
 *      sockets dial its listener and write hellos (a valid template the
 *      input overwrites field by field, or raw bytes) and more; accept()
 *      is called a bounded number of times; then a real connect from the
 *      plugin must still be accepted (the listener is not wedged).
 *   1  hostile sender: a raw connector passes the rendezvous (control
 *      connection alone, or with 1..3 data streams), the receive comm
 *      posts 1..3 grouped receives whose sizes and tags the input gives,
 *      and the input's records go onto the control connection and the
 *      data streams, test() polled between them.
 *   2  hostile receiver: the plugin connects to a raw listener posing as
 *      the receiver (a real handle with its address swapped), posts 1..4
 *      sends, and the input's records go onto its control connection;
 *      data streams it dials (STREAMS, OFFER) reach the raw listener too.
 *
 * A record is one header sealed by the harness (its type's hlen and a
 * CRC-32C put in, unless the record says to keep the input's), so the
 * fuzzer reaches the checks behind the checksum, or raw bytes; each may
 * end in polls, and the peer may close its sockets at the end.  Checked
 * beyond the sanitizers: a receive reported done has sizes within what
 * was posted and wrote nothing past its buffers (guard bytes); once the
 * peer closed every socket, each request ends (done or an error) within
 * a bounded number of polls; no call blocks (libFuzzer's -timeout). */
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
#define FW_MAX_FDS 16

static int fw_verbose;
static int fw_dev = -1;

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
 * stopped reading).  poll_fn drives the plugin between tries. */
static void fw_write(int fd, const void *buf, size_t len, void (*poll_fn)(void *), void *arg) {
  const uint8_t *p = buf;
  for (int tries = 0; len > 0 && tries < 16;) {
    ssize_t k = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      len -= (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return;
    tries++;
    if (poll_fn) poll_fn(arg);
  }
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

/* Read exactly len bytes within ms. */
static int fw_read_all(int fd, void *buf, size_t len, int ms) {
  size_t got = 0;
  while (got < len) {
    if (fw_wait(fd, POLLIN, ms) <= 0) return -1;
    ssize_t k = recv(fd, (char *)buf + got, len - got, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) return -1;
    if (k > 0) got += (size_t)k;
  }
  return 0;
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

/* ---- records --------------------------------------------------------- */
/* One record: a flags byte, then
 *   op 0/3: a type byte, the header's bytes after its type (hlen - 1 of
 *           them, the CRC's included), a 16-bit payload length, the payload;
 *           op 0 puts in the type's hlen and the CRC, op 3 keeps the CRC read;
 *   op 1:   a length byte and that many raw bytes;
 *   op 2:   nothing (polls only; with bit 5, in mode 1, the next receive
 *           group is posted first).
 * flags: bits 0-1 the connection (0 control, k the data stream k-1),
 * bits 2-3 op, bit 4 poll after, bit 5 keep the input's hlen, bit 6 plen =
 * the payload's length, bit 7 (mode 2) STREAMS/OFFER addresses of port 0
 * become the raw listener's. */
struct fw_target {
  int fds[1 + RN_RDV_MAX_STREAMS];
  int nfds;
  const struct rn_wire_addr *self; /* mode 2: the raw listener */
  void (*poll_fn)(void *);
  void (*post_fn)(void *); /* mode 1: post the next receive group */
  void *arg;
};

static void fw_fix_addr(struct rn_wire_addr *a, const struct rn_wire_addr *self) {
  if (self != NULL && a->family != 0 && a->port == 0) *a = *self;
}

static void fw_record(struct fw_in *in, struct fw_target *t) {
  static uint8_t buf[128 + 65536];
  uint8_t fl = fw_u8(in);
  int fd = t->fds[(fl & 3) % t->nfds];
  int op = fl >> 2 & 3;
  size_t len = 0;
  if (op == 2) {
    /* polls only */
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
  if (len > 0 && fd >= 0) fw_write(fd, buf, len, t->poll_fn, t->arg);
  if (op == 2 && (fl & 0x20) && t->post_fn != NULL) t->post_fn(t->arg);
  if (fl & 0x10 || op == 2) t->poll_fn(t->arg);
}

/* ---- mode 1: a hostile sender ------------------------------------------ */
#define FW_GROUPS 3
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
  int ctrl;            /* the raw side of the control connection */
  struct fw_target *t;
  int lazy_streams; /* answer the receiver's STREAMS by dialing this many streams (0: never) */
  uint8_t out[4096];  /* what the receiver wrote, framed by the prefix */
  size_t out_len, out_skip;
};

/* Read what the receiver wrote on the control connection; a STREAMS
 * message in it is answered as a real sender would: one connection of
 * lazy_streams data streams (and a control connection the receiver
 * closes) to its first address, with its nonce. */
static void fw_recv_read(struct fw_recv *r) {
  for (;;) {
    if (r->ctrl < 0) return;
    ssize_t k = recv(r->ctrl, r->out + r->out_len, sizeof r->out - r->out_len, MSG_DONTWAIT);
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
      if (p.hlen < sizeof p) { /* cannot be: the plugin frames its own messages */
        fw_fail("the receiver wrote a malformed control message");
      }
      if (p.type == RN_TCP_MSG_STREAMS && p.hlen == sizeof(struct rn_tcp_streams)) {
        if (r->out_len < p.hlen) break;
        struct rn_tcp_streams m;
        memcpy(&m, r->out, sizeof m);
        if (r->lazy_streams > 0 && r->t->nfds + 1 + r->lazy_streams <= FW_MAX_FDS) {
          struct rn_handle h = {.nonce = m.nonce};
          uint64_t conn_id = 0x5354524dull << 32 | (uint32_t)r->t->nfds;
          for (int i = 0; i <= r->lazy_streams; i++) {
            int fd = fw_dial(&m.addr[0]);
            if (fd < 0) break;
            struct rn_hello hello = fw_hello(&h, i == 0 ? RN_ROLE_CTRL : RN_ROLE_DATA,
                                             (uint8_t)(i == 0 ? 0 : i - 1), conn_id,
                                             (uint32_t)r->lazy_streams);
            fw_write(fd, &hello, sizeof hello, NULL, NULL);
            if (i == 0)
              close(fd); /* the receiver closes it too */
            else
              r->t->fds[r->t->nfds++] = fd;
          }
        }
      }
      r->out_skip = (size_t)p.hlen + p.plen;
      if (r->out_skip == 0) break;
    }
    if (r->out_len == sizeof r->out) r->out_len = 0; /* cannot be: no header is this long */
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
  fw_recv_read(r);
  for (int i = 1; i < r->t->nfds; i++) fw_drain(r->t->fds[i]);
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
 * FW_END_POLLS calls, else the input found a hang (what says whose). */
static void fw_after_close(int (*pending)(const void *), void (*poll_fn)(void *), void *arg,
                           const char *what) {
  for (int k = 0; k < FW_END_POLLS && pending(arg); k++) {
    poll_fn(arg);
    if (k > 20) usleep(200);
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
   * receiver answers an OPEN with STREAMS */
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lcomm = NULL;
  if (rn_core_listen(NULL, fw_dev, handle, &lcomm) != ncclSuccess) fw_fail("listen failed");
  struct rn_handle h;
  memcpy(&h, handle, sizeof h);
  const struct rn_wire_addr *w = (const struct rn_wire_addr *)h.payload;
  struct fw_target t = {.nfds = 1 + nstreams};
  for (int i = 0; i < FW_MAX_FDS; i++) t.fds[i] = -1;
  uint64_t conn_id = 0x1234567800000000ull | (uint64_t)in->n;
  for (int i = 0; i < 1 + nstreams; i++) {
    t.fds[i] = fw_dial(&w[0]);
    if (t.fds[i] < 0) fw_fail("cannot dial the listener");
    struct rn_hello hello = fw_hello(&h, i == 0 ? RN_ROLE_CTRL : RN_ROLE_DATA,
                                     (uint8_t)(i == 0 ? 0 : i - 1), conn_id, (uint32_t)nstreams);
    fw_write(t.fds[i], &hello, sizeof hello, NULL, NULL);
  }
  struct fw_recv r;
  memset(&r, 0, sizeof r);
  r.ctrl = t.fds[0];
  r.t = &t;
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
  for (int g = 0; g < pre; g++) fw_recv_post(&r);
  for (int k = 0; k < 256 && fw_more(in); k++) fw_record(in, &t);
  while (r.posted < r.ngroups && !r.failed) fw_recv_post(&r);
  for (int k = 0; k < FW_POLLS && fw_recv_pending(&r); k++) fw_recv_poll(&r);
  if (close_end) {
    fw_close_all(t.fds, t.nfds, 0);
    r.ctrl = -1;
    fw_after_close(fw_recv_pending, fw_recv_poll, &r,
                   "a receive neither ended nor failed after the peer closed");
  }
  if (fw_verbose)
    for (int g = 0; g < r.ngroups; g++)
      fprintf(stderr, "fuzz_wire: receive %d: %s\n", g,
              r.req[g] == NULL ? "not posted" : r.done[g] == 1 ? "done" : r.done[g] ? "failed" : "pending");
  fw_close_all(t.fds, t.nfds, 1);
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
  if (rn_core_listen(NULL, fw_dev, handle, &lcomm) != ncclSuccess) fw_fail("listen failed");
  struct rn_handle h;
  memcpy(&h, handle, sizeof h);
  const struct rn_wire_addr *w = (const struct rn_wire_addr *)h.payload;
  int fds[FW_MAX_FDS];
  int nfds = 1 + fw_u8(in) % 6;
  for (int i = 0; i < FW_MAX_FDS; i++) fds[i] = -1;
  for (int i = 0; i < nfds; i++) {
    uint8_t opt = fw_u8(in);
    fds[i] = fw_dial(&w[0]);
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
    if (rn_core_connect(NULL, RN_TRAFFIC_CLASS_UNDEF, fw_dev, handle, &scomm, NULL) != ncclSuccess)
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
  rn_core_close_listen(lcomm);
}

/* ---- mode 2: a hostile receiver ---------------------------------------- */
#define FW_SENDS 4
struct fw_send {
  void *scomm;
  int lfd;
  struct fw_target *t;
  int n, posted, failed;
  size_t moved; /* bytes the sender wrote */
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

static void fw_send_poll(void *arg) {
  struct fw_send *s = arg;
  /* Streams the sender dials: accepted and read, never answered. */
  for (;;) {
    int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    if (s->t->nfds < FW_MAX_FDS)
      s->t->fds[s->t->nfds++] = fd;
    else
      close(fd);
  }
  for (int i = 0; i < s->t->nfds; i++) s->moved += fw_drain(s->t->fds[i]);
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

static void fw_receiver(struct fw_in *in) {
  uint8_t cfg = fw_u8(in);
  int close_end = cfg & 1;
  int shift = cfg >> 1 & 7;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lcomm = NULL;
  if (rn_core_listen(NULL, fw_dev, handle, &lcomm) != ncclSuccess) fw_fail("listen failed");
  rn_core_close_listen(lcomm);
  struct rn_handle h;
  memcpy(&h, handle, sizeof h);
  struct rn_wire_addr *w = (struct rn_wire_addr *)h.payload;
  /* The raw receiver listens where the handle says. */
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 64) != 0 ||
      getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0)
    fw_fail("raw listener");
  fw_nonblock(lfd);
  union rn_sockaddr self_sa;
  memset(&self_sa, 0, sizeof self_sa);
  memcpy(&self_sa.in, &sa, sizeof sa);
  struct rn_wire_addr self;
  rn_sockaddr_to_wire(&self_sa, &self);
  memset(h.payload, 0, sizeof(struct rn_wire_addr) * 5);
  w[0] = self;
  h.nrails = 1;
  h.check = fw_handle_check(&h);
  memcpy(handle, &h, sizeof h);

  struct fw_target t = {.nfds = 0, .self = &self};
  for (int i = 0; i < FW_MAX_FDS; i++) t.fds[i] = -1;
  struct fw_send s;
  memset(&s, 0, sizeof s);
  s.lfd = lfd;
  s.t = &t;
  int ctrl = -1;
  for (int k = 0; k < 4000 && s.scomm == NULL; k++) {
    if (rn_core_connect(NULL, RN_TRAFFIC_CLASS_UNDEF, fw_dev, handle, &s.scomm, NULL) !=
        ncclSuccess)
      fw_fail("connect to the raw receiver failed");
    if (ctrl < 0) {
      ctrl = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
      if (ctrl >= 0) {
        struct rn_hello hello;
        fw_nonblock(ctrl);
        if (fw_read_all(ctrl, &hello, sizeof hello, 1000) != 0)
          fw_fail("no hello from the plugin's connect");
        uint8_t a5 = 0xA5;
        fw_write(ctrl, &a5, 1, NULL, NULL);
        t.fds[t.nfds++] = ctrl;
      }
    }
    if (s.scomm == NULL) usleep(50);
  }
  if (s.scomm == NULL) fw_fail("connect to the raw receiver never completed");
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
  t.arg = &s;
  for (int k = 0; k < 256 && fw_more(in); k++) fw_record(in, &t);
  /* A send over the data streams takes many calls (its chunks go out
   * between pauses of the rails' pacing): go on while its bytes move. */
  int polls = FW_POLLS;
  for (int i = 0; i < s.n; i++)
    if (s.sizes[i] > (4u << 20)) polls = 80 * FW_POLLS;
  for (int k = 0; k < polls && fw_send_pending(&s); k++) fw_send_poll(&s);
  if (close_end) {
    fw_close_all(t.fds, t.nfds, 0);
    close(lfd);
    s.lfd = -1;
    fw_after_close(fw_send_pending, fw_send_poll, &s,
                   "a send neither ended nor failed after the peer closed");
  }
  if (fw_verbose)
    for (int i = 0; i < s.n; i++)
      fprintf(stderr, "fuzz_wire: send %d: %s\n", i,
              s.req[i] == NULL ? "not posted" : s.done[i] == 1 ? "done" : s.done[i] ? "failed" : "pending");
  fw_close_all(t.fds, t.nfds, 1);
  for (int i = 0; i < s.n; i++) rn_core_dereg_mr(s.scomm, s.mhs[i]);
  rn_core_close_send(s.scomm);
  for (int i = 0; i < s.n; i++) free(s.bufs[i]);
  if (s.lfd >= 0) close(s.lfd);
}

/* ---- entry points -------------------------------------------------------- */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  signal(SIGPIPE, SIG_IGN);
  fw_verbose = getenv("FUZZ_WIRE_VERBOSE") != NULL;
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", "lo", 1);
  setenv("RAILNET_SOCKET_FAMILY", "AF_INET", 1);
  setenv("RAILNET_SOCKET_NSTREAMS", "2", 1);
  setenv("RAILNET_SOCKET_NTHREADS", "0", 1); /* every byte moves in test(): deterministic */
  setenv("RAILNET_SOCKET_POOL", "0", 1);     /* nothing kept across inputs */
  setenv("RAILNET_SOCKET_CHUNK", "4096", 1);
  setenv("RAILNET_SOCKET_INLINE", "256", 1);
  setenv("RAILNET_CONNECT_TIMEOUT_MS", "200", 1);
  setenv("RAILNET_HELLO_TIMEOUT_MS", "50", 1);
  setenv("RAILNET_RAIL_TIMEOUT_MS", "1000", 1);
  setenv("RAILNET_RAIL_ACK", "1", 1);
  if (rn_core_init(fw_logger) != ncclSuccess) fw_fail("init failed");
  int ndev = 0;
  if (rn_core_devices(&ndev) != ncclSuccess || ndev < 1) fw_fail("no loopback device");
  fw_dev = 0;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  struct fw_in in = {data, size, 1};
  switch (data[0] % 3) {
    case 0: fw_connector(&in); break;
    case 1: fw_sender(&in); break;
    default: fw_receiver(&in); break;
  }
  return 0;
}
