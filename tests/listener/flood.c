/* A listener no one can block: a hostile process holds thousands of
 * connections against a TCP listen comm (silent, garbage, a partial hello,
 * a wrong nonce, half-open connections that know the nonce, a hello with
 * no data streams), first all queued in the kernel backlog ahead of the
 * real connect, then reconnecting continuously while it runs.  The real
 * connect and accept must still complete, within a bound that only turns a
 * hang into a failure (the measured times are TAP notes), move verified
 * data, and the listener must hold no more sockets than its stated bound.
 * A last case runs accept out of file descriptors.
 *
 *   listener-test [--api v8|v9|v10|v11|v12] [--only SUBSTR] [--n N] [--seed N]
 *
 * The whole program runs in a network namespace of its own when it can
 * create one (root), with loopback only: the flood touches no one else's
 * ports, and the kernel backlog can be raised to hold every connection. */
#include "../common/rn_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "railnet/rendezvous.h"
#include "railnet/transport.h"

#define HOSTILE_DEFAULT 10000
#define CONNECT_BOUND_S 5.0    /* the real connect, once the hostile sockets are held */
#define SETUP_BOUND_S 120.0    /* for the hostile process to open its connections */
#define LISTENER_MAX_FDS 256   /* the bound plugin/rendezvous.c states */
#define EMFILE_TIMEOUT_MS 2000 /* RAILNET_CONNECT_TIMEOUT_MS of the EMFILE case */

static double tscale(void) { return rn_timeout_scale(); }

enum flavour {
  F_IDLE = 0,     /* connect, send nothing */
  F_GARBAGE,      /* 64 random bytes */
  F_PARTIAL,      /* the first 20 bytes of a valid hello, right nonce, then nothing */
  F_WRONG_NONCE,  /* a whole hello with another nonce */
  F_HALF_CTRL,    /* right nonce: a control connection announcing 4 streams, none follow */
  F_HALF_STREAMS, /* right nonce: control + 3 of 4 streams */
  F_MANY_STREAMS, /* right nonce: a control connection announcing 33 streams (at most 32) */
  F_COUNT
};
static const char *const flavour_name[F_COUNT] = {"idle",
                                                  "garbage",
                                                  "partial hello",
                                                  "wrong nonce",
                                                  "half-open (control only)",
                                                  "half-open (a stream missing)",
                                                  "hello with 33 streams"};

struct flood_case {
  enum flavour f;
  int continuous; /* reconnecting while the real connect runs */
  int n;          /* hostile sockets */
};

/* What the hostile process reports once its connections are up. */
struct attack_report {
  int opened;  /* connections that completed */
  int reset;   /* reached the listener, which reset them before this side saw them up */
  int failed;  /* refused, or any other error while connecting */
  int pending; /* still connecting when it stopped waiting (a full backlog) */
  double secs;
};

static int netns_private; /* 1 when this program runs in its own namespace */

/* ---- helpers ------------------------------------------------------------- */

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the directory's own descriptor */
}

/* The kernel's count of connections this namespace's listening sockets
 * dropped because their accept queue was full (TcpExt ListenOverflows):
 * the connector then waits for a retransmission, a second or more. */
static long listen_overflows(void) {
  FILE *f = fopen("/proc/net/netstat", "r");
  if (f == NULL) return -1;
  char names[4096], values[4096];
  long v = -1;
  while (fgets(names, sizeof names, f) != NULL && fgets(values, sizeof values, f) != NULL) {
    if (strncmp(names, "TcpExt:", 7) != 0) continue;
    char *sn, *sv;
    char *n = strtok_r(names, " \n", &sn), *x = strtok_r(values, " \n", &sv);
    for (; n != NULL && x != NULL; n = strtok_r(NULL, " \n", &sn), x = strtok_r(NULL, " \n", &sv))
      if (strcmp(n, "ListenOverflows") == 0) v = atol(x);
    break;
  }
  fclose(f);
  return v;
}

/* The listening addresses a TCP handle carries. */
static int handle_addrs(const void *handle, union rn_sockaddr *addrs, uint64_t *nonce) {
  struct rn_handle h;
  memcpy(&h, handle, sizeof h);
  if (h.magic != RN_HANDLE_MAGIC) return 0;
  const struct rn_wire_addr *w = (const struct rn_wire_addr *)h.payload;
  int n = 0;
  int max = (int)(RN_HANDLE_PAYLOAD / sizeof(struct rn_wire_addr));
  for (int i = 0; i < h.nrails && i < max; i++) {
    union rn_sockaddr *a = &addrs[n];
    memset(a, 0, sizeof *a);
    if (w[i].family == 4) {
      a->in.sin_family = AF_INET;
      a->in.sin_port = w[i].port;
      memcpy(&a->in.sin_addr, w[i].addr, 4);
    } else if (w[i].family == 6) {
      a->in6.sin6_family = AF_INET6;
      a->in6.sin6_port = w[i].port;
      memcpy(&a->in6.sin6_addr, w[i].addr, 16);
    } else {
      continue;
    }
    n++;
  }
  *nonce = h.nonce;
  return n;
}

/* ---- the hostile process ----------------------------------------------- */

struct hostile {
  int fd;
  int connected;
};

struct attacker {
  const struct flood_case *c;
  union rn_sockaddr addr[RN_MAX_RAILS];
  int naddr;
  uint64_t nonce;
  uint64_t rng;
  uint64_t conn_id; /* the half-open group being opened */
  long opened_total;
  struct hostile *s;
  int head, count; /* a ring of open sockets, oldest at head */
};

static void hostile_close(int fd) {
  struct linger lg = {.l_onoff = 1, .l_linger = 0}; /* a reset: no TIME_WAIT left behind */
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(fd);
}

/* The bytes the k-th hostile connection sends once connected. */
static size_t hostile_payload(struct attacker *a, long k, unsigned char *buf) {
  struct rn_hello h;
  memset(&h, 0, sizeof h);
  h.magic = RN_HELLO_MAGIC;
  h.version = RN_WIRE_VERSION;
  h.role = RN_ROLE_CTRL;
  h.nonce = a->nonce;
  h.conn_id = rng_next(&a->rng);
  h.nstreams = 4;
  switch (a->c->f) {
    case F_IDLE:
      return 0;
    case F_GARBAGE:
      for (int i = 0; i < 64; i++) buf[i] = (unsigned char)rng_next(&a->rng);
      buf[0] = 0xff; /* never the magic's first byte */
      return 64;
    case F_PARTIAL:
      memcpy(buf, &h, 20);
      return 20;
    case F_WRONG_NONCE:
      h.nonce ^= 0x5a5a5a5a5a5a5a5aull;
      break;
    case F_HALF_CTRL:
      break;
    case F_HALF_STREAMS:
      /* groups of four: control, then streams 0..2 of 4 */
      if (k % 4 == 0) a->conn_id = rng_next(&a->rng);
      h.conn_id = a->conn_id;
      if (k % 4 != 0) {
        h.role = RN_ROLE_DATA;
        h.index = (uint8_t)(k % 4 - 1);
      }
      break;
    case F_MANY_STREAMS:
      h.nstreams = RN_RDV_MAX_STREAMS + 1;
      break;
    case F_COUNT:
      break;
  }
  memcpy(buf, &h, sizeof h);
  return sizeof h;
}

static int hostile_open(struct attacker *a, struct hostile *s) {
  const union rn_sockaddr *to = &a->addr[a->opened_total % a->naddr];
  s->fd = socket(to->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  s->connected = 0;
  if (s->fd < 0) return -1;
  socklen_t len = to->sa.sa_family == AF_INET6 ? sizeof to->in6 : sizeof to->in;
  if (connect(s->fd, &to->sa, len) != 0 && errno != EINPROGRESS) {
    close(s->fd);
    s->fd = -1;
    return -1;
  }
  return 0;
}

/* Connected: send the flavour's bytes (best effort, never blocking). */
static void hostile_greet(struct attacker *a, struct hostile *s) {
  unsigned char buf[64];
  size_t len = hostile_payload(a, a->opened_total, buf);
  a->opened_total++;
  s->connected = 1;
  if (len > 0) {
    ssize_t w = send(s->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
  }
}

/* Wait (up to ms) for connects in progress among the newest `span` sockets;
 * returns how many completed or failed. */
static int hostile_progress(struct attacker *a, int span, int ms, struct attack_report *rep) {
  struct pollfd pfd[256];
  int idx[256], n = 0;
  for (int k = a->count - 1; k >= 0 && n < 256 && span-- > 0; k--) {
    int i = (a->head + k) % a->c->n;
    if (a->s[i].fd >= 0 && !a->s[i].connected) {
      pfd[n] = (struct pollfd){.fd = a->s[i].fd, .events = POLLOUT};
      idx[n++] = i;
    }
  }
  if (n == 0) return 0;
  if (poll(pfd, (nfds_t)n, ms) <= 0) return 0;
  int done = 0;
  for (int j = 0; j < n; j++) {
    if (pfd[j].revents == 0) continue;
    struct hostile *s = &a->s[idx[j]];
    int err = 0;
    socklen_t el = sizeof err;
    getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) {
      close(s->fd);
      s->fd = -1;
      if (err == ECONNRESET)
        rep->reset++;
      else
        rep->failed++;
    } else {
      hostile_greet(a, s);
    }
    done++;
  }
  return done;
}

static int stop_requested(int ctl) {
  struct pollfd p = {.fd = ctl, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

/* Open c->n connections, report, then hold them (or keep replacing the
 * oldest ones) until the receiver closes ctl. */
static void attacker_run(struct attacker *a, int ctl) {
  const struct flood_case *c = a->c;
  struct attack_report rep = {0};
  double t0 = now_s();
  double last_progress = t0;
  while (a->count < c->n) {
    int batch = 0;
    while (a->count < c->n && batch < 64) {
      struct hostile *s = &a->s[(a->head + a->count) % c->n];
      if (hostile_open(a, s) != 0) break;
      a->count++;
      batch++;
    }
    int done = hostile_progress(a, 512, 10, &rep);
    if (done > 0 || batch > 0) last_progress = now_s();
    /* A full backlog stops the handshakes: report what is queued.  While
     * the listener accepts all along, a stall is only a busy host (a
     * dropped SYN is sent again after 1 s, then 3 s): wait past those. */
    double stall_s = c->continuous ? 7.0 : 2.0;
    if (now_s() - last_progress > stall_s || now_s() - t0 > SETUP_BOUND_S / 2) break;
    if (batch == 0 && done == 0 && a->count < c->n) sleep_us(1000);
  }
  while (hostile_progress(a, c->n, 0, &rep) > 0) {
  }
  for (int k = 0; k < a->count; k++) {
    const struct hostile *s = &a->s[(a->head + k) % c->n];
    rep.opened += s->fd >= 0 && s->connected;
    rep.pending += s->fd >= 0 && !s->connected;
  }
  rep.secs = now_s() - t0;
  if (write(ctl, &rep, sizeof rep) != (ssize_t)sizeof rep) return;
  while (!stop_requested(ctl)) {
    if (!c->continuous) {
      /* held: finish connects still in progress, nothing else */
      if (hostile_progress(a, c->n, 20, &rep) == 0) sleep_us(5000);
      continue;
    }
    /* continuous: replace the 32 oldest with new ones */
    for (int k = 0; k < 32 && a->count > 0; k++) {
      struct hostile *s = &a->s[a->head];
      if (s->fd >= 0) hostile_close(s->fd);
      s->fd = -1;
      a->head = (a->head + 1) % c->n;
      a->count--;
    }
    for (int k = 0; k < 32 && a->count < c->n; k++) {
      struct hostile *s = &a->s[(a->head + a->count) % c->n];
      if (hostile_open(a, s) != 0) break;
      a->count++;
    }
    hostile_progress(a, 64, 1, &rep);
  }
}

static void attacker_main(const struct flood_case *c, const union rn_sockaddr *addrs, int naddr,
                          uint64_t nonce, uint64_t seed, int ctl) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  /* keep only the control socket: the listening sockets stay the
   * receiver's alone */
  if (dup2(ctl, 3) < 0) _exit(2);
  close_range(4, ~0U, 0);
  struct attacker a;
  memset(&a, 0, sizeof a);
  a.c = c;
  memcpy(a.addr, addrs, sizeof(*addrs) * (size_t)naddr);
  a.naddr = naddr;
  a.nonce = nonce;
  a.rng = seed;
  a.s = calloc((size_t)c->n, sizeof *a.s);
  if (a.s == NULL) _exit(2);
  for (int i = 0; i < c->n; i++) a.s[i].fd = -1;
  attacker_run(&a, 3);
  _exit(0);
}

/* ---- the receiver (listener) and the real sender -------------------------- */

/* Track the most descriptors this process holds, every few milliseconds
 * (reading /proc on every call would slow the listener down). */
static void fds_sample(int *max_fds) {
  static double next;
  if (now_s() < next) return;
  next = now_s() + 0.005;
  int n = count_fds();
  if (n > *max_fds) *max_fds = n;
}

/* accept() while only hostile sockets are there: never an error, never a
 * comm.  Tracks the most descriptors this process held. */
static int accept_nothing(struct rn_peer *p, void *lc, int *max_fds) {
  void *rc = NULL;
  ncclResult_t r = rn_net_accept(&p->net, lc, &rc);
  if (r != ncclSuccess)
    return peer_fail(p, "accept failed while only hostile sockets were there: %s",
                     rn_result_str(r));
  if (rc != NULL) return peer_fail(p, "accept admitted a hostile connection");
  fds_sample(max_fds);
  return 0;
}

static int flood_r(struct rn_peer *p) {
  const struct flood_case *c = p->arg;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  void *lc = NULL, *rcm = NULL;
  int rc = -1;
  ncclResult_t r = rn_net_listen(&p->net, p->dev, handle, &lc);
  if (r != ncclSuccess) return peer_fail(p, "listen: %s", rn_result_str(r));
  union rn_sockaddr addrs[RN_MAX_RAILS];
  uint64_t nonce = 0;
  int naddr = handle_addrs(handle, addrs, &nonce);
  if (naddr == 0) return peer_fail(p, "the handle carries no TCP address");
  int ctl[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0)
    return peer_fail(p, "socketpair: %s", strerror(errno));
  pid_t pid = fork();
  if (pid == 0) {
    close(ctl[0]);
    attacker_main(c, addrs, naddr, nonce, p->seed ^ 0xa77ac4, ctl[1]);
  }
  close(ctl[1]);
  if (pid < 0) {
    close(ctl[0]);
    return peer_fail(p, "fork: %s", strerror(errno));
  }
  /* At rest: counted once this side's end of the report channel is open,
   * so only the listener's sockets count against its bound. */
  int base_fds = count_fds(), max_fds = base_fds;
  /* Held: the hostile connections queue up in the kernel backlog while
   * nobody accepts.  Continuous: accept runs all along, as NCCL's proxy
   * thread would. */
  struct attack_report rep;
  double end = now_s() + SETUP_BOUND_S * tscale();
  for (;;) {
    struct pollfd pf = {.fd = ctl[0], .events = POLLIN};
    if (poll(&pf, 1, c->continuous ? 0 : 5) > 0) {
      if (read(ctl[0], &rep, sizeof rep) != (ssize_t)sizeof rep) {
        peer_fail(p, "the hostile process died before its report");
        goto out;
      }
      break;
    }
    if (c->continuous && accept_nothing(p, lc, &max_fds) != 0) goto out;
    if (now_s() > end) {
      peer_fail(p, "the hostile process did not open its connections within %.0f s",
                SETUP_BOUND_S * tscale());
      goto out;
    }
  }
  note(
      "  %d hostile connections up in %.1f s (%d reset by the listener first, %d refused, %d "
      "still connecting)",
      rep.opened, rep.secs, rep.reset, rep.failed, rep.pending);
  /* A connection the listener reset before this side saw it up reached the
   * listener all the same: it counts as attack traffic. */
  if (netns_private && rep.opened + rep.reset < c->n / 2) {
    peer_fail(p, "only %d of %d hostile connections reached the listener", rep.opened + rep.reset,
              c->n);
    goto out;
  }
  if (peer_write(p, handle, sizeof handle) != 0) {
    peer_fail(p, "pipe");
    goto out;
  }
  long overflows0 = listen_overflows();
  double t0 = now_s();
  double bound = CONNECT_BOUND_S * tscale();
  while (rcm == NULL) {
    r = rn_net_accept(&p->net, lc, &rcm);
    if (r != ncclSuccess) {
      peer_fail(p, "accept of the real peer failed: %s", rn_result_str(r));
      goto out;
    }
    if (rcm == NULL) fds_sample(&max_fds);
    if (rcm == NULL && now_s() - t0 > bound) {
      peer_fail(p, "real peer not accepted within %.0f s", bound);
      goto out;
    }
  }
  double accept_ms = (now_s() - t0) * 1e3;
  double connect_ms = -1;
  if (peer_read(p, &connect_ms, sizeof connect_ms, 10 * tscale()) != 0) {
    peer_fail(p, "no connect time from the sender");
    goto out;
  }
  rc = rn_stream_check(p, rcm, 0);
  if (peer_sync(p, 10 * tscale()) != 0 && rc == 0) rc = peer_fail(p, "sender gone");
  char load[64];
  rn_loadavg(load, sizeof load);
  long overflows = listen_overflows() - overflows0;
  note(
      "  real connect %.1f ms, accept %.1f ms; listener held at most %d socket(s) beyond its "
      "%d at rest; accept queue overflowed %ld time(s) meanwhile; load %s",
      connect_ms, accept_ms, max_fds - base_fds, base_fds, overflows0 < 0 ? -1 : overflows, load);
  if (rc == 0 && max_fds - base_fds > LISTENER_MAX_FDS)
    rc = peer_fail(p, "the listener held %d sockets, more than its bound of %d", max_fds - base_fds,
                   LISTENER_MAX_FDS);
out:
  close(ctl[0]); /* the hostile process stops */
  int st = 0;
  double wend = now_s() + 10 * tscale();
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (now_s() > wend) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      break;
    }
    sleep_us(2000);
  }
  if (rcm != NULL) rn_net_close_recv(&p->net, rcm);
  rn_net_close_listen(&p->net, lc);
  return rc;
}

static int flood_s(struct rn_peer *p) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (peer_read(p, handle, sizeof handle, SETUP_BOUND_S * tscale() + 30) != 0)
    return peer_fail(p, "no handle"), RN_EXIT_SKIP;
  void *sc = NULL;
  double t0 = now_s();
  double bound = CONNECT_BOUND_S * tscale();
  while (sc == NULL) {
    ncclResult_t r = rn_net_connect(&p->net, p->dev, handle, &sc);
    if (r != ncclSuccess) return peer_fail(p, "connect: %s", rn_result_str(r));
    if (sc == NULL && now_s() - t0 > bound)
      return peer_fail(p, "connect not done within %.0f s (%d WARN(s), the last: %s)", bound,
                       rn_log_warns(), rn_log_warns() > 0 ? rn_log_last_warn() : "none");
  }
  double ms = (now_s() - t0) * 1e3;
  if (peer_write(p, &ms, sizeof ms) != 0) return peer_fail(p, "pipe");
  int rc = rn_stream_check(p, sc, 1);
  if (peer_sync(p, 10 * tscale()) != 0 && rc == 0) rc = peer_fail(p, "receiver gone");
  rn_net_close_send(&p->net, sc);
  return rc;
}

/* ---- accept out of file descriptors ------------------------------------- */

struct fd_hog {
  int fd[4096];
  int n;
  struct rlimit saved;
};

/* Lower the soft limit just above what is open and take every descriptor
 * left: accept() now fails with EMFILE. */
static int fd_hog_start(struct fd_hog *h) {
  if (getrlimit(RLIMIT_NOFILE, &h->saved) != 0) return -1;
  int high = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int v = atoi(e->d_name);
    if (v > high) high = v;
  }
  closedir(d);
  struct rlimit low = {.rlim_cur = (rlim_t)high + 16, .rlim_max = h->saved.rlim_max};
  if (setrlimit(RLIMIT_NOFILE, &low) != 0) return -1;
  h->n = 0;
  while (h->n < (int)(sizeof h->fd / sizeof h->fd[0])) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == EMFILE ? 0 : -1;
    h->fd[h->n++] = fd;
  }
  return -1;
}

static void fd_hog_stop(struct fd_hog *h) {
  for (int i = 0; i < h->n; i++) close(h->fd[i]);
  h->n = 0;
  setrlimit(RLIMIT_NOFILE, &h->saved);
}

/* One message each way between two comms of this process, verified. */
static int loopback_message(struct rn_peer *p, void *sc, void *rcm, uint64_t key) {
  enum { LEN = 65536 };
  static unsigned char sbuf[LEN], rbuf[LEN];
  pattern_fill(sbuf, LEN, key);
  memset(rbuf, 0, LEN);
  void *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL;
  int rc = -1;
  if (rn_net_regmr(&p->net, sc, sbuf, LEN, NCCL_PTR_HOST, &smh) != ncclSuccess ||
      rn_net_regmr(&p->net, rcm, rbuf, LEN, NCCL_PTR_HOST, &rmh) != ncclSuccess) {
    peer_fail(p, "regMr failed");
    goto out;
  }
  void *data[1] = {rbuf};
  size_t size[1] = {LEN};
  int tag[1] = {1};
  void *mh[1] = {rmh};
  double end = now_s() + 10 * tscale();
  while (rreq == NULL || sreq == NULL) {
    if (rreq == NULL && rn_net_irecv(&p->net, rcm, 1, data, size, tag, mh, &rreq) != ncclSuccess) {
      peer_fail(p, "irecv failed");
      goto out;
    }
    if (sreq == NULL && rn_net_isend(&p->net, sc, sbuf, LEN, 1, smh, &sreq) != ncclSuccess) {
      peer_fail(p, "isend failed");
      goto out;
    }
    if (now_s() > end) {
      peer_fail(p, "isend/irecv not posted within 10 s");
      goto out;
    }
  }
  int sdone = 0, rdone = 0, got = 0;
  while (!sdone || !rdone) {
    if (!sdone && rn_net_test(&p->net, sreq, &sdone, NULL) != ncclSuccess) {
      peer_fail(p, "test(send) failed");
      goto out;
    }
    if (!rdone && rn_net_test(&p->net, rreq, &rdone, &got) != ncclSuccess) {
      peer_fail(p, "test(recv) failed");
      goto out;
    }
    if (now_s() > end) {
      peer_fail(p, "message not through within 10 s");
      goto out;
    }
  }
  if (got != LEN || pattern_check(rbuf, LEN, key) != (size_t)-1) {
    peer_fail(p, "received %d bytes, pattern %s", got, got == LEN ? "corrupt" : "short");
    goto out;
  }
  rc = 0;
out:
  if (smh) rn_net_deregmr(&p->net, sc, smh);
  if (rmh) rn_net_deregmr(&p->net, rcm, rmh);
  return rc;
}

/* Poll connect and accept on this thread until both comms are up. */
static int loopback_finish(struct rn_peer *p, void *handle, void *lc, void **sc, void **rcm,
                           double bound) {
  double end = now_s() + bound;
  while (*sc == NULL || *rcm == NULL) {
    ncclResult_t r;
    if (*sc == NULL && (r = rn_net_connect(&p->net, p->dev, handle, sc)) != ncclSuccess)
      return peer_fail(p, "connect: %s", rn_result_str(r));
    if (*rcm == NULL && (r = rn_net_accept(&p->net, lc, rcm)) != ncclSuccess)
      return peer_fail(p, "accept: %s", rn_result_str(r));
    if (now_s() > end) return peer_fail(p, "connect/accept not up within %.0f s", bound);
  }
  return 0;
}

static int emfile_fn(struct rn_peer *p) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  void *lc = NULL, *sc = NULL, *rcm = NULL;
  static struct fd_hog hog;
  int rc = -1;
  if (rn_net_listen(&p->net, p->dev, handle, &lc) != ncclSuccess)
    return peer_fail(p, "listen failed");
  /* 1. A connect queued while accept has no descriptor completes once
   *    descriptors return, with one WARN and no error. */
  if (rn_net_connect(&p->net, p->dev, handle, &sc) != ncclSuccess)
    return peer_fail(p, "connect failed");
  if (fd_hog_start(&hog) != 0) return peer_fail(p, "cannot use up the descriptors");
  int w0 = rn_log_warns();
  double end = now_s() + 0.3 * tscale();
  while (now_s() < end) {
    ncclResult_t r = rn_net_accept(&p->net, lc, &rcm);
    if (r != ncclSuccess || rcm != NULL) {
      fd_hog_stop(&hog);
      return peer_fail(p, "accept without descriptors: %s, comm %p (want success, none)",
                       rn_result_str(r), rcm);
    }
    if (sc == NULL && rn_net_connect(&p->net, p->dev, handle, &sc) != ncclSuccess) {
      fd_hog_stop(&hog);
      return peer_fail(p, "connect failed while the listener had no descriptors");
    }
    sleep_us(1000);
  }
  fd_hog_stop(&hog);
  int warns = rn_log_warns() - w0;
  if (warns != 1 || !rn_log_has_warn("accept failed", strerror(EMFILE)))
    return peer_fail(p, "%d WARN(s) while out of descriptors (want one naming EMFILE); last: %s",
                     warns, rn_log_last_warn());
  if (loopback_finish(p, handle, lc, &sc, &rcm, CONNECT_BOUND_S * tscale()) != 0) goto out;
  if (rn_log_warns() != w0 + 1) {
    peer_fail(p, "a WARN after descriptors returned: %s", rn_log_last_warn());
    goto out;
  }
  if (loopback_message(p, sc, rcm, 0xe3f11e) != 0) goto out;
  rn_net_close_send(&p->net, sc);
  rn_net_close_recv(&p->net, rcm);
  sc = rcm = NULL;
  /* 2. Out of descriptors for longer than the bound: accept errors, with a
   *    WARN, instead of retrying for ever. */
  if (fd_hog_start(&hog) != 0) return peer_fail(p, "cannot use up the descriptors");
  w0 = rn_log_warns();
  double t0 = now_s();
  ncclResult_t r = ncclSuccess;
  end = t0 + (3 * EMFILE_TIMEOUT_MS / 1e3 + 5) * tscale();
  while ((r = rn_net_accept(&p->net, lc, &rcm)) == ncclSuccess && rcm == NULL && now_s() < end)
    sleep_us(1000);
  double err_ms = (now_s() - t0) * 1e3;
  fd_hog_stop(&hog);
  if (r != ncclSystemError || rcm != NULL) {
    peer_fail(p, "accept out of descriptors for %.0f ms: %s, comm %p (want ncclSystemError)",
              err_ms, rn_result_str(r), rcm);
    goto out;
  }
  if (rn_log_warns() - w0 != 2 || !rn_log_has_warn("accept has failed", strerror(EMFILE))) {
    peer_fail(p, "%d WARN(s) (want one at the start, one with the error); last: %s",
              rn_log_warns() - w0, rn_log_last_warn());
    goto out;
  }
  /* 3. The listen comm is still usable once descriptors are back. */
  if (loopback_finish(p, handle, lc, &sc, &rcm, CONNECT_BOUND_S * tscale()) != 0) goto out;
  if (loopback_message(p, sc, rcm, 0xe3f11f) != 0) goto out;
  note("  accept errored after %.0f ms out of descriptors (bound %d ms); recovered both times",
       err_ms, EMFILE_TIMEOUT_MS);
  rc = 0;
out:
  if (sc) rn_net_close_send(&p->net, sc);
  if (rcm) rn_net_close_recv(&p->net, rcm);
  rn_net_close_listen(&p->net, lc);
  return rc;
}

/* ---- main ---------------------------------------------------------------- */

/* A network namespace of this program's own, loopback up, with a kernel
 * backlog that holds every hostile connection. */
static void netns_enter(int n) {
  if (unshare(CLONE_NEWNET) != 0) return;
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0) goto out;
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) goto out;
  netns_private = 1;
  char v[32];
  snprintf(v, sizeof v, "%d\n", n + 1024);
  const char *knobs[] = {"/proc/sys/net/core/somaxconn", "/proc/sys/net/ipv4/tcp_max_syn_backlog"};
  for (int i = 0; i < 2; i++) {
    int fd = open(knobs[i], O_WRONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t w = write(fd, v, strlen(v));
    (void)w;
    close(fd);
  }
out:
  if (s >= 0) close(s);
}

static int somaxconn(void) {
  FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
  int v = -1;
  if (f != NULL) {
    if (fscanf(f, "%d", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
}

int main(int argc, char **argv) {
  int version = 11;
  const char *only = NULL;
  int n = HOSTILE_DEFAULT;
  uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--api") && i + 1 < argc)
      version = rn_parse_version(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--n") && i + 1 < argc)
      n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 0);
    else
      version = 0;
  }
  if (version == 0 || n < 16) {
    fprintf(stderr, "usage: listener-test [--api v8|v9|v10|v11|v12] [--only SUBSTR] [--n N>=16]\n");
    return 2;
  }
  setenv("RAILNET_TRANSPORT", "socket", 1);
  rn_default_env();
  /* The hostile process needs a descriptor per connection. */
  struct rlimit rl;
  char lowered[128] = "";
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)n + 256 > rl.rlim_cur) {
      int want = n;
      n = (int)rl.rlim_cur - 256;
      snprintf(lowered, sizeof lowered, " (N lowered from %d: RLIMIT_NOFILE hard limit %llu)", want,
               (unsigned long long)rl.rlim_cur);
    }
  }
  if (n < 16) {
    tap_skip_all("RLIMIT_NOFILE hard limit too low for a flood");
    return RN_EXIT_SKIP;
  }
  netns_enter(n);
  struct flood_case cases[2 * F_COUNT];
  int ncases = 0;
  for (int cont = 0; cont < 2; cont++)
    for (int f = 0; f < F_COUNT; f++) cases[ncases++] = (struct flood_case){f, cont, n};
  char names[2 * F_COUNT][320];
  int plan = 0;
  for (int i = 0; i < ncases; i++) {
    snprintf(names[i], sizeof names[i], "%d %s connections %s: a real connect still completes%s", n,
             flavour_name[cases[i].f],
             cases[i].continuous ? "reconnecting all along" : "queued ahead of it", lowered);
    plan += !only || strstr(names[i], only);
  }
  const char *emfile_name =
      "accept out of file descriptors: one WARN, an error after the bound, then recovery";
  plan += !only || strstr(emfile_name, only);
  tap_plan(plan);
  note("plugin %s through ncclNetPlugin_v%d, seed %llu; %s, somaxconn %d", rn_plugin_path(),
       version, (unsigned long long)seed,
       netns_private ? "in a network namespace of its own" : "in the host's network namespace",
       somaxconn());
  for (int i = 0; i < ncases; i++) {
    if (only && !strstr(names[i], only)) continue;
    struct rn_pair_opts o = {.version = version,
                             .timeout_s = (int)((SETUP_BOUND_S + 60) * tscale()),
                             .init = 1,
                             .seed = seed + (uint64_t)i,
                             .arg = &cases[i]};
    char why[1024];
    int rc = rn_run_pair(flood_r, flood_s, &o, why, sizeof why);
    if (!tap_result(rc == 0, "%s", names[i])) diag("  %s", why);
  }
  if (!only || strstr(emfile_name, only)) {
    char v[32];
    snprintf(v, sizeof v, "%d", EMFILE_TIMEOUT_MS);
    setenv("RAILNET_CONNECT_TIMEOUT_MS", v, 1);
    struct rn_pair_opts o = {
        .version = version, .timeout_s = (int)(60 * tscale()), .init = 1, .seed = seed};
    char why[1024];
    int rc = rn_run_single(emfile_fn, &o, why, sizeof why);
    unsetenv("RAILNET_CONNECT_TIMEOUT_MS");
    if (!tap_result(rc == 0, "%s", emfile_name)) diag("  %s", why);
  }
  return tap_failed() ? 1 : 0;
}
