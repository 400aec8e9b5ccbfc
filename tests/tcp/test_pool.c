/* Connection reuse across comms (plugin/tcp/pool.c): a comm pair that
 * closed with nothing in flight leaves its connection to the next comm
 * between the same processes, which then starts without a handshake; a
 * pair that closed with anything in flight (a receive never satisfied, an
 * eager message never received) leaves nothing, and the next comm dials.
 * Every transfer is verified, whatever the path.  Both ends live in one
 * process on loopback; a forked child and re-executed copies of this
 * program (for settings read once per process) cover fork and the
 * RAILNET_SOCKET_POOL bounds.  The log's INFO lines say which path each
 * comm took. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define MAXLEN (1 << 20)

struct pair {
  void *lc, *sc, *rc, *smh, *rmh;
  int port; /* the listener's (rail 0) */
};

/* Sockets a kept connection holds per side: its control connection (a
 * comm's data streams close with it; the next comm opens its own). */
#define KEPT_SOCKS 1

static char *sbuf, *rbuf;
static int w_kept, w_reused, w_dialed, w_not_kept;

static void watch_all(void) {
  w_kept = rn_log_watch("connection kept for reuse");
  w_reused = rn_log_watch("(a kept connection)");
  w_dialed = rn_log_watch("(dialed)");
  w_not_kept = rn_log_watch("connection not kept for reuse");
}

/* Connect and accept on a listen comm already open (p->lc, handle). */
static ncclResult_t join(struct rn_net *n, struct pair *p, void *handle) {
  ncclResult_t r = ncclSuccess;
  double end = rn_deadline(20);
  while (r == ncclSuccess && (p->sc == NULL || p->rc == NULL) && now_s() < end) {
    if (p->sc == NULL) r = rn_net_connect(n, 0, handle, &p->sc);
    if (r == ncclSuccess && p->rc == NULL) r = rn_net_accept(n, p->lc, &p->rc);
  }
  if (r == ncclSuccess && (p->sc == NULL || p->rc == NULL)) r = ncclInternalError;
  if (r == ncclSuccess) r = rn_net_regmr(n, p->sc, sbuf, MAXLEN, NCCL_PTR_HOST, &p->smh);
  if (r == ncclSuccess) r = rn_net_regmr(n, p->rc, rbuf, MAXLEN, NCCL_PTR_HOST, &p->rmh);
  return r;
}

/* The sockets of connections dialed to listener port `port`: the accepting
 * side's (local port == port) or the connecting side's (peer port ==
 * port), in descriptor order. */
static int sockets_of(int port, int accepting, int *fds, int max) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (d == NULL) return 0;
  for (struct dirent *de; (de = readdir(d)) != NULL && n < max;) {
    int fd = atoi(de->d_name);
    struct sockaddr_in a, b;
    socklen_t la = sizeof(a), lb = sizeof(b);
    if (de->d_name[0] == '.' || fd == dirfd(d) ||
        getsockname(fd, (struct sockaddr *)&a, &la) != 0 ||
        getpeername(fd, (struct sockaddr *)&b, &lb) != 0 || a.sin_family != AF_INET)
      continue;
    if (ntohs(accepting ? a.sin_port : b.sin_port) == port) fds[n++] = fd;
  }
  closedir(d);
  for (int i = 1; i < n; i++) /* insertion sort */
    for (int j = i; j > 0 && fds[j - 1] > fds[j]; j--) {
      int t = fds[j];
      fds[j] = fds[j - 1];
      fds[j - 1] = t;
    }
  return n;
}

/* A plain TCP connection to 127.0.0.1:port (blocking): its descriptor,
 * or -1 with errno (ECONNREFUSED when nothing listens there). */
static int raw_connect(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof(a)) == 0) return s;
  int err = errno;
  if (s >= 0) close(s);
  errno = err;
  return -1;
}

/* The peer of s closed or reset it within 5 s: 1. */
static int raw_ended(int s) {
  struct pollfd pf = {.fd = s, .events = POLLIN};
  char b;
  return poll(&pf, 1, 5000) == 1 && recv(s, &b, 1, MSG_DONTWAIT) <= 0;
}

static ncclResult_t open_pair(struct rn_net *n, struct pair *p) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(p, 0, sizeof(*p));
  ncclResult_t r = rn_net_listen(n, 0, handle, &p->lc);
  p->port = rn_handle_port(handle);
  return r == ncclSuccess ? join(n, p, handle) : r;
}

/* Close in the given order (send first or receive first), then the
 * listener; every result checked. */
static int close_pair(struct rn_net *n, struct pair *p, int send_first) {
  ncclResult_t a = ncclSuccess, b = ncclSuccess, l = ncclSuccess;
  if (p->smh != NULL) rn_net_deregmr(n, p->sc, p->smh);
  if (p->rmh != NULL) rn_net_deregmr(n, p->rc, p->rmh);
  if (send_first && p->sc != NULL) a = rn_net_close_send(n, p->sc);
  if (p->rc != NULL) b = rn_net_close_recv(n, p->rc);
  if (!send_first && p->sc != NULL) a = rn_net_close_send(n, p->sc);
  if (p->lc != NULL) l = rn_net_close_listen(n, p->lc);
  memset(p, 0, sizeof(*p));
  return a == ncclSuccess && b == ncclSuccess && l == ncclSuccess;
}

/* One message of `size` bytes with `tag`, verified. */
static int xfer(struct rn_net *n, struct pair *p, size_t size, int tag, uint64_t key, char *why,
                size_t whylen) {
  void *rreq = NULL, *sreq = NULL, *d = rbuf;
  size_t sz = size;
  ncclResult_t r = ncclSuccess;
  pattern_fill(sbuf, size, key);
  memset(rbuf, 0, size);
  double end = rn_deadline(20);
  while (r == ncclSuccess && rreq == NULL && now_s() < end)
    r = rn_net_irecv(n, p->rc, 1, &d, &sz, &tag, &p->rmh, &rreq);
  while (r == ncclSuccess && sreq == NULL && now_s() < end)
    r = rn_net_isend(n, p->sc, sbuf, size, tag, p->smh, &sreq);
  int sdone = 0, rdone = 0, got = -1;
  while (r == ncclSuccess && (!sdone || !rdone) && now_s() < end) {
    if (!sdone) r = rn_net_test(n, sreq, &sdone, NULL);
    if (r == ncclSuccess && !rdone) r = rn_net_test(n, rreq, &rdone, &got);
  }
  if (r != ncclSuccess || !sdone || !rdone) {
    snprintf(why, whylen, "%zu B: %s", size,
             r != ncclSuccess ? rn_result_str(r) : "not done in time");
    return 0;
  }
  size_t bad = pattern_check(rbuf, size, key);
  if (got != (int)size || bad != (size_t)-1) {
    snprintf(why, whylen, "%zu B: received %d B, first bad byte at %zd", size, got, (ssize_t)bad);
    return 0;
  }
  return 1;
}

static const size_t sizes[] = {8, 65536, 300000, MAXLEN};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static int xfer_all(struct rn_net *n, struct pair *p, uint64_t seed, char *why, size_t whylen) {
  for (size_t i = 0; i < NSIZES; i++)
    if (!xfer(n, p, sizes[i], (int)i + 1, pattern_key(seed, i, sizes[i]), why, whylen)) return 0;
  return 1;
}

/* ---- re-executed copies: settings read once per process -------------- */

/* RAILNET_SOCKET_POOL=0: two pairs in a row, both dialed, nothing kept. */
static int child_nopool(struct rn_net *n) {
  char why[256] = "";
  struct pair p;
  for (int k = 0; k < 2; k++) {
    if (open_pair(n, &p) != ncclSuccess || !xfer_all(n, &p, 50 + (uint64_t)k, why, sizeof why))
      return fprintf(stderr, "pair %d: %s\n", k, why), 1;
    int port = p.port;
    if (!close_pair(n, &p, 1)) return 1;
    /* No listening socket is kept either: its port refuses. */
    int s = raw_connect(port);
    if (s >= 0 || errno != ECONNREFUSED)
      return fprintf(stderr, "port %d of a closed listen comm: %s\n", port,
                     s >= 0 ? "still accepts" : strerror(errno)),
             1;
  }
  if (rn_log_seen(w_kept) != 0 || rn_log_seen(w_reused) != 0 || rn_log_seen(w_dialed) != 4)
    return fprintf(stderr, "kept %d, reused %d, dialed %d\n", rn_log_seen(w_kept),
                   rn_log_seen(w_reused), rn_log_seen(w_dialed)),
           1;
  return rn_log_warns() == 0 ? 0 : 1;
}

/* RAILNET_SOCKET_POOL_IDLE_MS=100: a kept listener unused for longer is
 * closed at the next listen, which then takes a socket of its own. */
static int child_idle(struct rn_net *n) {
  char why[256] = "";
  struct pair p;
  if (open_pair(n, &p) != ncclSuccess || !xfer(n, &p, 8, 1, 7, why, sizeof why))
    return fprintf(stderr, "pair: %s\n", why), 1;
  int port = p.port;
  if (!close_pair(n, &p, 1)) return 1;
  usleep(300 * 1000);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL;
  if (rn_net_listen(n, 0, handle, &lc) != ncclSuccess) return fprintf(stderr, "listen\n"), 1;
  int s = raw_connect(port), err = errno;
  int again = rn_handle_port(handle) == port;
  if (s >= 0) close(s);
  if (rn_net_close_listen(n, lc) != ncclSuccess) return 1;
  if (again || s >= 0 || err != ECONNREFUSED)
    return fprintf(stderr, "port %d after 300 ms: %s\n", port,
                   again    ? "served the next listen"
                   : s >= 0 ? "still accepts"
                            : strerror(err)),
           1;
  return rn_log_warns() == 0 ? 0 : 1;
}

/* RAILNET_SOCKET_IDLE_MS=400 (a sweep every 100 ms): a connection that
 * reaches a kept listener is reset while the process goes on moving data
 * on another pair and opens no comm. */
/* Two pairs p and q; p moves a message and closes, which leaves its
 * listening socket kept on *port: 0, or 1 (said on stderr). */
static int kept_listener(struct rn_net *n, struct pair *p, struct pair *q, int *port) {
  char why[256] = "";
  if (open_pair(n, p) != ncclSuccess || open_pair(n, q) != ncclSuccess ||
      !xfer(n, p, 8, 1, 5, why, sizeof why))
    return fprintf(stderr, "pairs: %s\n", why), 1;
  *port = p->port;
  return close_pair(n, p, 1) ? 0 : 1;
}

static int child_sweep(struct rn_net *n) {
  char why[256] = "";
  struct pair p, q;
  int port;
  if (kept_listener(n, &p, &q, &port)) return 1;
  int s = raw_connect(port);
  if (s < 0) return fprintf(stderr, "the kept listener refused: %s\n", strerror(errno)), 1;
  int reset = 0, moved = 0;
  struct pollfd pf = {.fd = s, .events = POLLIN};
  double end = rn_deadline(5);
  while (!reset && now_s() < end) {
    if (!xfer(n, &q, 8, 1, 6, why, sizeof why)) break;
    moved++;
    char b;
    reset = poll(&pf, 1, 0) == 1 && recv(s, &b, 1, MSG_DONTWAIT) <= 0;
  }
  close(s);
  int ok = close_pair(n, &q, 1);
  if (!reset) return fprintf(stderr, "not reset after %d transfers (%s)\n", moved, why), 1;
  return ok && rn_log_warns() == 0 ? 0 : 1;
}

/* More connections reach a kept listening socket between two sweeps than
 * one sweep resets (a peer that keeps connecting): the sweep stops at its
 * budget and closes the socket, whose port then refuses, instead of
 * accepting for as long as they come while holding the pool. */
#define FLOOD 600 /* > the budget of 256; < the listen backlog and somaxconn */
static int child_flood(struct rn_net *n) {
  char why[256] = "";
  struct pair p, q;
  int port;
  if (kept_listener(n, &p, &q, &port)) return 1;
  int closed = rn_log_watch("not kept: more than 256 connections reached it");
  static int fl[FLOOD];
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int queued = 0;
  for (int i = 0; i < FLOOD; i++) {
    fl[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fl[i] >= 0 && connect(fl[i], (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS)
      return fprintf(stderr, "flood connect %d: %s\n", i, strerror(errno)), 1;
    queued += fl[i] >= 0;
  }
  int moved = 0;
  double end = rn_deadline(5);
  while (rn_log_seen(closed) == 0 && now_s() < end) {
    if (!xfer(n, &q, 8, 1, 6, why, sizeof why)) break;
    moved++;
  }
  for (int i = 0; i < FLOOD; i++)
    if (fl[i] >= 0) close(fl[i]);
  int s = raw_connect(port);
  const int refused = s < 0 && errno == ECONNREFUSED;
  if (s >= 0) close(s);
  int ok = close_pair(n, &q, 1);
  if (rn_log_seen(closed) != 1 || !refused)
    return fprintf(stderr, "%d connections queued, %d transfers: %d INFO, port %s (%s)\n", queued,
                   moved, rn_log_seen(closed), refused ? "refuses" : "still open", why),
           1;
  return ok && rn_log_warns() == 0 ? 0 : 1;
}

/* RAILNET_SOCKET_POOL=2: five pairs open at once, all closed quiescent:
 * two connections kept per side, and the descriptors with them. */
static int child_bound(struct rn_net *n) {
  char why[256] = "";
  struct pair p[5];
  int base = rn_open_fds();
  for (int k = 0; k < 5; k++)
    if (open_pair(n, &p[k]) != ncclSuccess || !xfer(n, &p[k], 8, 1, 9, why, sizeof why))
      return fprintf(stderr, "pair %d: %s\n", k, why), 1;
  for (int k = 0; k < 5; k++)
    if (!close_pair(n, &p[k], 1)) return 1;
  /* Each side of a kept connection holds its control socket alone (the
   * data streams close with the comm). */
  int per = KEPT_SOCKS;
  int held = rn_open_fds() - base;
  /* ... and up to RAILNET_SOCKET_POOL listening sockets of closed listen
   * comms, plus the pool's epoll descriptor. */
  if (held > 2 * per + 2 + 1) return fprintf(stderr, "%d descriptors held\n", held), 1;
  if (rn_log_seen(w_kept) != 10) return fprintf(stderr, "kept %d\n", rn_log_seen(w_kept)), 1;
  /* The next pair still reuses one of those left. */
  if (open_pair(n, &p[0]) != ncclSuccess || !xfer_all(n, &p[0], 60, why, sizeof why))
    return fprintf(stderr, "after: %s\n", why), 1;
  if (!close_pair(n, &p[0], 1)) return 1;
  return rn_log_seen(w_reused) == 2 && rn_log_warns() == 0 ? 0 : 1;
}

/* Comms set up one after another, as NCCL sets them up (listen, connect
 * and accept, close the listen comm), all kept open: each listen may take
 * the socket the one before closed, with its port, but a port serves at
 * most 8 comms, so a sender's connections to one destination port stay
 * bounded however many comms there are (it has one ephemeral port per
 * connection to each destination).  Messages of 4 KiB, below the inline
 * limit: no data streams, a control connection per comm.  A fresh
 * process: no connection kept by another test is reused. */
#define CHAIN 48
#define CHAIN_PORT_COMMS 8
static int child_chain(struct rn_net *n) {
  char why[256] = "";
  static struct pair p[CHAIN];
  for (int k = 0; k < CHAIN; k++) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    memset(&p[k], 0, sizeof(p[k]));
    if (rn_net_listen(n, 0, handle, &p[k].lc) != ncclSuccess)
      return fprintf(stderr, "listen %d\n", k), 1;
    p[k].port = rn_handle_port(handle);
    if (join(n, &p[k], handle) != ncclSuccess || rn_net_close_listen(n, p[k].lc) != ncclSuccess)
      return fprintf(stderr, "comm %d\n", k), 1;
    p[k].lc = NULL;
    if (!xfer(n, &p[k], 4096, 1, 300 + (uint64_t)k, why, sizeof why))
      return fprintf(stderr, "comm %d: %s\n", k, why), 1;
  }
  int most = 0, ports = 0, reused = 0;
  for (int k = 0; k < CHAIN; k++) {
    int first = 1;
    for (int j = 0; j < k && first; j++) first = p[j].port != p[k].port;
    if (!first) continue;
    int socks[CHAIN], nf = sockets_of(p[k].port, 0, socks, CHAIN);
    ports++;
    reused += nf > 1;
    if (nf > most) most = nf;
  }
  int ok = 1;
  for (int k = 0; k < CHAIN; k++) ok = close_pair(n, &p[k], 1) && ok;
  fprintf(stderr, "%d comms: %d ports, %d serving more than one comm, at most %d comms a port\n",
          CHAIN, ports, reused, most);
  /* The kept sockets did serve (else this checks nothing), within bound. */
  return ok && reused > 0 && most <= CHAIN_PORT_COMMS && rn_log_warns() == 0 ? 0 : 1;
}

/* Two processes, five rounds of two comms each: set up (handles through
 * the runner's pipe), a verified mix on each (100 B, 70 kB, 1 MiB, 0 B),
 * both sides closed, a barrier.  Every transfer must be verified; each
 * process must have reused a kept connection at least once (a round can
 * find its peer's BYE not yet arrived and dial instead, which is right). */
#define XROUNDS 5
static int cross_side(struct rn_peer *p) {
  int reused = rn_log_watch("(a kept connection)");
  for (int r = 0; r < XROUNDS; r++) {
    void *comms[2] = {NULL, NULL};
    if (peer_connect(p, 2, comms, NULL, 30) != 0) return -1;
    for (int i = 0; i < 2; i++)
      if (rn_stream_check(p, comms[i], p->role == RN_SENDER) != 0) return -1;
    if (peer_sync(p, 30) != 0 || peer_close(p, 2, comms, NULL) != 0 || peer_sync(p, 30) != 0)
      return -1;
  }
  if (rn_log_seen(reused) < 1) return peer_fail(p, "no comm reused a kept connection");
  if (rn_log_warns() != 0) return peer_fail(p, "a WARN: %s", rn_log_last_warn());
  return 0;
}

static int run_child(const char *self, const char *mode, const char *env) {
  pid_t pid = fork();
  if (pid == 0) {
    rn_apply_env_list(env);
    execl(self, self, mode, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  double end = rn_deadline(60);
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (now_s() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return 0;
    }
    sleep_us(10000);
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static int open_net(struct rn_net *n) {
  char err[256];
  if (rn_net_open(n, 12, err, sizeof(err)) != 0 || rn_net_init(n) != ncclSuccess) {
    fprintf(stderr, "load the plugin: %s\n", err);
    return -1;
  }
  watch_all();
  return 0;
}

int main(int argc, char **argv) {
  rn_default_env();
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", "lo", 1);
  sbuf = malloc(MAXLEN);
  rbuf = malloc(MAXLEN);
  struct rn_net n;
  if (argc == 2) { /* a re-executed copy */
    if (sbuf == NULL || rbuf == NULL || open_net(&n) != 0) return 1;
    int rc = strcmp(argv[1], "nopool") == 0  ? child_nopool(&n)
             : strcmp(argv[1], "idle") == 0  ? child_idle(&n)
             : strcmp(argv[1], "sweep") == 0 ? child_sweep(&n)
             : strcmp(argv[1], "chain") == 0 ? child_chain(&n)
             : strcmp(argv[1], "flood") == 0 ? child_flood(&n)
                                             : child_bound(&n);
    rn_net_finalize(&n);
    rn_net_close(&n);
    return rc;
  }
  tap_plan(19);
  if (sbuf == NULL || rbuf == NULL || open_net(&n) != 0) {
    for (int i = 0; i < 19; i++) tap_result(0, "load the plugin");
    return 1;
  }
  char why[256] = "";
  struct pair p;
  int ok;

  /* 1-2: a quiescent close keeps the connection; the next pair reuses it. */
  ok = open_pair(&n, &p) == ncclSuccess && xfer_all(&n, &p, 1, why, sizeof why);
  ok = close_pair(&n, &p, 1) && ok;
  tap_result(ok && rn_log_seen(w_dialed) == 2 && rn_log_seen(w_kept) == 2,
             "a dialed pair moves 8 B .. 1 MiB verified and, closed quiescent (send first), keeps "
             "its connection on both sides (%s; dialed %d, kept %d)",
             why, rn_log_seen(w_dialed), rn_log_seen(w_kept));
  int fds = rn_open_fds();
  ok = open_pair(&n, &p) == ncclSuccess && xfer_all(&n, &p, 2, why, sizeof why);
  int fds_open = rn_open_fds();
  /* New: at most its listening socket (none when the last pair's was
   * kept) and, as its first message above the inline limit opened them
   * (both sides are in this process), its data streams or, while they
   * open, the receiver's listener for them; no control connection. */
  const int streams = (int)rn_env_long("RAILNET_SOCKET_NSTREAMS", 4);
  tap_result(ok && rn_log_seen(w_reused) == 2 && rn_log_seen(w_dialed) == 2 && fds_open >= fds &&
                 fds_open <= fds + 2 + 2 * streams,
             "the next pair takes the kept connection on both sides, opens no socket but its "
             "listener and its %d data streams, and moves 8 B .. 1 MiB verified (%s; reused %d, "
             "descriptors %d then %d)",
             streams, why, rn_log_seen(w_reused), fds, fds_open);

  /* 3: closed receive side first, kept again, and reused again. */
  ok = close_pair(&n, &p, 0);
  int kept = rn_log_seen(w_kept);
  ok = ok && open_pair(&n, &p) == ncclSuccess && xfer_all(&n, &p, 3, why, sizeof why);
  tap_result(ok && kept == 4 && rn_log_seen(w_reused) == 4 && rn_log_seen(w_dialed) == 2,
             "closed receive side first, it is kept and reused the same way (%s; kept %d, "
             "reused %d)",
             why, kept, rn_log_seen(w_reused));
  close_pair(&n, &p, 1);

  /* 4: a receive never satisfied: nothing kept, the next pair dials. */
  rn_log_watch("(dialed)");
  w_not_kept = rn_log_watch("connection not kept for reuse");
  ok = open_pair(&n, &p) == ncclSuccess; /* reuses the kept one */
  {
    void *rreq = NULL, *d = rbuf;
    size_t sz = 64;
    int tag = 7;
    double end = rn_deadline(20);
    while (ok && rreq == NULL && now_s() < end)
      ok = rn_net_irecv(&n, p.rc, 1, &d, &sz, &tag, &p.rmh, &rreq) == ncclSuccess;
    ok = ok && rreq != NULL;
  }
  close_pair(&n, &p, 0);
  int not_kept = rn_log_seen(w_not_kept);
  ok = ok && open_pair(&n, &p) == ncclSuccess && xfer_all(&n, &p, 4, why, sizeof why);
  tap_result(ok && not_kept >= 1 && rn_log_seen(w_dialed) == 2,
             "a receive left posted at close: the connection is not kept, the next pair dials "
             "and moves its data verified (%s; not kept %d, dialed %d)",
             why, not_kept, rn_log_seen(w_dialed));
  close_pair(&n, &p, 1);

  /* 5: an eager message never received: nothing kept either. */
  rn_log_watch("(dialed)");
  rn_log_watch("connection not kept for reuse");
  ok = open_pair(&n, &p) == ncclSuccess;
  {
    /* Two eager messages of one tag; one receive takes the first, and
     * the second, read with it, stays held. */
    double end = rn_deadline(20);
    pattern_fill(sbuf, 100, 5);
    for (int k = 0; k < 2; k++) {
      void *sreq = NULL;
      int done = 0;
      while (ok && sreq == NULL && now_s() < end)
        ok = rn_net_isend(&n, p.sc, sbuf, 100, 3, p.smh, &sreq) == ncclSuccess;
      while (ok && sreq != NULL && !done && now_s() < end)
        ok = rn_net_test(&n, sreq, &done, NULL) == ncclSuccess;
      ok = ok && done;
    }
    void *rreq = NULL, *d = rbuf;
    size_t sz = 100;
    int tag = 3, done = 0, got = 0;
    while (ok && rreq == NULL && now_s() < end)
      ok = rn_net_irecv(&n, p.rc, 1, &d, &sz, &tag, &p.rmh, &rreq) == ncclSuccess;
    while (ok && !done && now_s() < end) ok = rn_net_test(&n, rreq, &done, &got) == ncclSuccess;
    ok = ok && done && pattern_check(rbuf, 100, 5) == (size_t)-1;
    /* Both sends were written before the receive was posted: the test()
     * that completed it read the second one too, which stays held. */
  }
  close_pair(&n, &p, 1);
  not_kept = rn_log_seen(w_not_kept);
  ok = ok && open_pair(&n, &p) == ncclSuccess && xfer_all(&n, &p, 5, why, sizeof why);
  tap_result(ok && not_kept >= 1 && rn_log_seen(w_dialed) == 2,
             "an eager message never received: not kept, the next pair dials and moves its data "
             "verified (%s; not kept %d, dialed %d)",
             why, not_kept, rn_log_seen(w_dialed));
  close_pair(&n, &p, 1);

  /* 6: two listeners open: the kept connection goes to the one whose
   * handle the connector used, never to the other. */
  rn_log_watch("(a kept connection)");
  {
    char h1[NCCL_NET_HANDLE_MAXSIZE], h2[NCCL_NET_HANDLE_MAXSIZE];
    struct pair q;
    memset(&p, 0, sizeof p);
    memset(&q, 0, sizeof q);
    ok = rn_net_listen(&n, 0, h1, &p.lc) == ncclSuccess &&
         rn_net_listen(&n, 0, h2, &q.lc) == ncclSuccess;
    double end = rn_deadline(20);
    void *other = NULL;
    while (ok && (q.sc == NULL || q.rc == NULL) && now_s() < end) {
      if (q.sc == NULL) ok = rn_net_connect(&n, 0, h2, &q.sc) == ncclSuccess;
      if (ok && other == NULL) ok = rn_net_accept(&n, p.lc, &other) == ncclSuccess;
      if (ok && q.rc == NULL) ok = rn_net_accept(&n, q.lc, &q.rc) == ncclSuccess;
    }
    ok = ok && other == NULL && q.sc != NULL && q.rc != NULL &&
         rn_net_regmr(&n, q.sc, sbuf, MAXLEN, NCCL_PTR_HOST, &q.smh) == ncclSuccess &&
         rn_net_regmr(&n, q.rc, rbuf, MAXLEN, NCCL_PTR_HOST, &q.rmh) == ncclSuccess &&
         xfer_all(&n, &q, 6, why, sizeof why);
    int reused = rn_log_seen(w_reused);
    /* The first listener still works, with a dialed pair. */
    ok = ok && join(&n, &p, h1) == ncclSuccess && xfer_all(&n, &p, 7, why, sizeof why);
    tap_result(ok && reused == 2,
               "with two listeners open, the kept connection goes to the listener whose handle "
               "was used, and the other accepts nothing until its own peer dials (%s; reused %d)",
               why, reused);
    close_pair(&n, &q, 1);
    close_pair(&n, &p, 1);
  }

  /* 7: a forked child neither uses nor disturbs its parent's kept
   * connections; the parent reuses one afterwards.  The first listen of
   * each after the fork draws a different nonce (the child draws its own
   * randomness, not its copy of the parent's). */
  {
    int nfd[2];
    if (pipe(nfd) != 0) nfd[0] = nfd[1] = -1;
    pid_t pid = fork();
    if (pid == 0) {
      struct pair c;
      char cwhy[256] = "", h[NCCL_NET_HANDLE_MAXSIZE] = {0};
      void *clc = NULL;
      if (rn_net_listen(&n, 0, h, &clc) != ncclSuccess || write(nfd[1], h + 8, 8) != 8 ||
          rn_net_close_listen(&n, clc) != ncclSuccess)
        _exit(1);
      rn_log_watch("(a kept connection)");
      int cok = open_pair(&n, &c) == ncclSuccess && xfer_all(&n, &c, 8, cwhy, sizeof cwhy) &&
                rn_log_seen(w_reused) == 0;
      cok = close_pair(&n, &c, 1) && cok;
      if (!cok) fprintf(stderr, "child: %s\n", cwhy);
      _exit(cok ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    char h[NCCL_NET_HANDLE_MAXSIZE] = {0}, child_nonce[8] = {0};
    void *plc = NULL;
    int nonces = read(nfd[0], child_nonce, 8) == 8 &&
                 rn_net_listen(&n, 0, h, &plc) == ncclSuccess && memcmp(h + 8, child_nonce, 8) != 0;
    if (plc != NULL && rn_net_close_listen(&n, plc) != ncclSuccess) nonces = 0;
    close(nfd[0]);
    close(nfd[1]);
    rn_log_watch("(a kept connection)");
    ok = open_pair(&n, &p) == ncclSuccess && xfer_all(&n, &p, 9, why, sizeof why);
    tap_result(WIFEXITED(st) && WEXITSTATUS(st) == 0 && ok && nonces && rn_log_seen(w_reused) == 2,
               "a forked child dials its own pairs (reusing nothing of its parent's) with nonces "
               "of its own, and the parent then reuses its kept connection with data verified "
               "(%s; nonces differ %d)",
               why, nonces);
    close_pair(&n, &p, 1);
  }

  /* 8: a forked child that goes on running holds no copy of a kept
   * socket: when the parent closes its side of a kept connection, the
   * peer side (here in the parent too) sees the EOF and closes its copy. */
  {
    int go[2], up[2];
    ok = pipe(go) == 0 && pipe(up) == 0;
    rn_net_finalize(&n);
    ok = ok && rn_net_init(&n) == ncclSuccess && open_pair(&n, &p) == ncclSuccess &&
         xfer(&n, &p, 4096, 1, 77, why, sizeof why);
    int port = p.port;
    ok = close_pair(&n, &p, 1) && ok;
    pid_t pid = ok ? fork() : -1;
    if (pid == 0) {
      /* fork() returned here: the atfork handlers have run. */
      char b = 'u';
      ssize_t k = write(up[1], &b, 1);
      k = k == 1 ? read(go[0], &b, 1) : -1; /* until the parent is done */
      _exit(k >= 0 ? 0 : 1);
    }
    char started = 0;
    ok = ok && rn_read_all(up[0], &started, 1, rn_deadline(20)) == 0;
    /* A byte on every accepting-side socket: the connecting side drops
     * its copy at the next connect, which must reach the accepting side as
     * an EOF. */
    int socks[64], nf = sockets_of(port, 1, socks, 64);
    for (int i = 0; i < nf; i++)
      ok = ok && send(socks[i], "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1;
    /* Its EOF, or the reset of a close over the unread byte. */
    int eof = rn_log_watch("closed: the peer closed it"),
        rst = rn_log_watch("closed: a socket error");
    for (int k = 0; ok && k < 2; k++) {
      ok = open_pair(&n, &p) == ncclSuccess &&
           xfer(&n, &p, 4096, 1, 78 + (uint64_t)k, why, sizeof why);
      ok = close_pair(&n, &p, 1) && ok;
    }
    int seen = rn_log_seen(eof) + rn_log_seen(rst);
    if (pid > 0) {
      ssize_t k = write(go[1], "x", 1);
      (void)k;
      waitpid(pid, NULL, 0);
    }
    close(go[0]);
    close(go[1]);
    close(up[0]);
    close(up[1]);
    tap_result(ok && nf == KEPT_SOCKS && seen >= 1,
               "while a forked child lives on, the parent's dropped side of a kept connection "
               "reaches the peer side as an EOF (the child closed its copies at fork) (%s; %d "
               "sockets, %d EOFs)",
               why, nf, seen);
  }

  /* 9: churn: 40 pairs in a row, each verified; one connection serves all. */
  {
    rn_log_watch("(dialed)");
    rn_log_watch("(a kept connection)");
    int fds0 = rn_open_fds(), good = 0;
    for (int k = 0; k < 40; k++) {
      int t = open_pair(&n, &p) == ncclSuccess &&
              xfer(&n, &p, 4096, 1, 100 + (uint64_t)k, why, sizeof why);
      good += close_pair(&n, &p, k % 2) && t;
    }
    tap_result(good == 40 && rn_log_seen(w_dialed) == 0 && rn_log_seen(w_reused) == 80 &&
                   rn_open_fds() == fds0,
               "40 pairs opened and closed in a row each move 4 KiB verified over the same kept "
               "connection (%d good, dialed %d, reused %d, descriptors %d then %d)",
               good, rn_log_seen(w_dialed), rn_log_seen(w_reused), fds0, rn_open_fds());
  }

  /* 9: a byte out of turn on either side of a kept connection, on its
   * control connection or on any data stream: the connection is closed on
   * both sides (at the next connect, accept or close), and the next pair
   * dials, or falls back to dialing when its reuse is refused, and moves
   * its data verified.  Starts from nothing kept (finalize closes all). */
  {
    rn_net_finalize(&n);
    int good = rn_net_init(&n) == ncclSuccess, kept_port = -1, rounds = 0;
    for (int r = 0; good && r <= 2 * KEPT_SOCKS; r++) {
      rn_log_watch("(dialed)");
      good = open_pair(&n, &p) == ncclSuccess &&
             xfer(&n, &p, 300000, 1, 200 + (uint64_t)r, why, sizeof why);
      int dialed = rn_log_seen(w_dialed);
      if (dialed == 2) kept_port = p.port;
      if (dialed != 2) {
        good = 0;
        snprintf(why, sizeof why, "round %d: %d comms dialed, expected 2", r, dialed);
      }
      good = close_pair(&n, &p, r % 2) && good;
      if (!good || r == 2 * KEPT_SOCKS) break;
      /* The first rounds poison the accepting side's socket r, the next
       * the connecting side's socket r - KEPT_SOCKS. */
      int socks[64], nf = sockets_of(kept_port, r < KEPT_SOCKS, socks, 64);
      int which = r % KEPT_SOCKS;
      if (nf != KEPT_SOCKS || send(socks[which], "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) {
        good = 0;
        snprintf(why, sizeof why, "round %d: %d kept sockets on port %d", r, nf, kept_port);
      }
      rounds++;
    }
    tap_result(good && rounds == 2 * KEPT_SOCKS,
               "a byte out of turn on the kept socket of either side of a kept connection: it is "
               "not reused, the next pair dials (or falls back to dialing) and moves 300,000 B "
               "verified (%d of %d rounds; %s)",
               rounds, 2 * KEPT_SOCKS, why);
  }

  {
    struct rn_pair_opts o = {.version = 12, .timeout_s = 120, .init = 1, .seed = 11};
    char pwhy[256] = "";
    int rc = rn_run_pair(cross_side, cross_side, &o, pwhy, sizeof pwhy);
    tap_result(rc == 0,
               "two processes, %d rounds of two comms each moving a verified mix: each process "
               "reuses its kept connections, with no WARN (%s)",
               XROUNDS, pwhy);
  }

  /* The listening socket of a closed listen comm serves the next listen
   * on its address; what reached it after its last accept is reset, as
   * close(2) would. */
  {
    int ok1 = open_pair(&n, &p) == ncclSuccess && xfer(&n, &p, 8, 1, 77, why, sizeof why);
    int port = p.port;
    int stale = raw_connect(port);
    ok1 = close_pair(&n, &p, 1) && ok1;
    int reset = stale >= 0 && raw_ended(stale);
    if (stale >= 0) close(stale);
    int fds0 = rn_open_fds();
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    memset(&p, 0, sizeof(p));
    int ok2 = rn_net_listen(&n, 0, handle, &p.lc) == ncclSuccess;
    int same = ok2 && rn_handle_port(handle) == port && rn_open_fds() == fds0;
    ok2 = ok2 && join(&n, &p, handle) == ncclSuccess && xfer_all(&n, &p, 78, why, sizeof why);
    ok2 = close_pair(&n, &p, 0) && ok2;
    tap_result(ok1 && reset && same && ok2,
               "a closed listen comm's socket serves the next listen on its address (same port, "
               "no new descriptor), a connection left in its backlog is reset at the close, and "
               "the next pair moves 8 B .. 1 MiB verified (%s; reset %d, same %d)",
               why, reset, same);
  }

  tap_result(rn_log_warns() == 0, "no WARN in all of the above (last: %s)",
             rn_log_last_warn() ? rn_log_last_warn() : "none");
  rn_net_finalize(&n);
  rn_net_close(&n);
  char self[4096];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  self[k > 0 ? k : 0] = '\0';
  tap_result(run_child(self, "nopool", "RAILNET_SOCKET_POOL=0"),
             "with RAILNET_SOCKET_POOL=0 two pairs in a row both dial, nothing is kept, no WARN");
  tap_result(run_child(self, "idle", "RAILNET_SOCKET_POOL_IDLE_MS=100"),
             "with RAILNET_SOCKET_POOL_IDLE_MS=100, a listening socket kept 300 ms is closed at "
             "the next listen (its port refuses), which takes another");
  tap_result(run_child(self, "sweep", "RAILNET_SOCKET_IDLE_MS=400"),
             "a connection that reaches a kept listening socket is reset while the process moves "
             "data on another pair and opens no comm (the sweep of calls, here every 100 ms)");
  tap_result(run_child(self, "flood", "RAILNET_SOCKET_IDLE_MS=400"),
             "%d connections reach a kept listening socket between two sweeps: the sweep resets "
             "its budget of them and closes the socket (its port refuses), with one INFO, no WARN",
             FLOOD);
  /* Helpers off: their descriptors would count with the kept ones. */
  tap_result(run_child(self, "bound", "RAILNET_SOCKET_POOL=2,RAILNET_SOCKET_NTHREADS=0"),
             "with RAILNET_SOCKET_POOL=2, five pairs closed at once keep two connections per side "
             "(and their descriptors), and the next pair reuses one");
  tap_result(run_child(self, "chain", "RAILNET_SOCKET_NTHREADS=0"),
             "%d comms set up one after another and kept open, each moving 4 KiB verified: "
             "listen comms take the sockets of those before them, and no port serves more than "
             "%d comms, no WARN",
             CHAIN, CHAIN_PORT_COMMS);
  free(sbuf);
  free(rbuf);
  return tap_failed() ? 1 : 0;
}
