/* Non-blocking socket primitives shared by every transport's connection
 * setup: addresses, listen/connect, partial send/recv.  Nothing here ever
 * blocks. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <unistd.h>
#include <linux/sockios.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "railnet/sock.h"

void rn_sockaddr_to_wire(const union rn_sockaddr *sa, struct rn_wire_addr *w) {
  memset(w, 0, sizeof(*w));
  if (sa->sa.sa_family == AF_INET6) {
    w->family = 6;
    w->port = sa->in6.sin6_port;
    memcpy(w->addr, &sa->in6.sin6_addr, 16);
  } else {
    w->family = 4;
    w->port = sa->in.sin_port;
    memcpy(w->addr, &sa->in.sin_addr, 4);
  }
}

int rn_sockaddr_from_wire(const struct rn_wire_addr *w, union rn_sockaddr *sa) {
  memset(sa, 0, sizeof(*sa));
  if (w->port == 0) return -1;
  if (w->family == 4) {
    sa->in.sin_family = AF_INET;
    sa->in.sin_port = w->port;
    memcpy(&sa->in.sin_addr, w->addr, 4);
    return 0;
  }
  if (w->family == 6) {
    sa->in6.sin6_family = AF_INET6;
    sa->in6.sin6_port = w->port;
    memcpy(&sa->in6.sin6_addr, w->addr, 16);
    return 0;
  }
  return -1;
}

const char *rn_sockaddr_str(const union rn_sockaddr *sa, char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  /* port 0: an interface's address, not an endpoint */
  if (sa->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &sa->in6.sin6_addr, host, sizeof(host));
    if (sa->in6.sin6_port == 0)
      snprintf(buf, len, "%s", host);
    else
      snprintf(buf, len, "[%s]:%u", host, ntohs(sa->in6.sin6_port));
  } else {
    inet_ntop(AF_INET, &sa->in.sin_addr, host, sizeof(host));
    if (sa->in.sin_port == 0)
      snprintf(buf, len, "%s", host);
    else
      snprintf(buf, len, "%s:%u", host, ntohs(sa->in.sin_port));
  }
  return buf;
}

union rn_sockaddr rn_sockaddr_no_port(union rn_sockaddr a) {
  if (a.sa.sa_family == AF_INET6)
    a.in6.sin6_port = 0;
  else if (a.sa.sa_family == AF_INET)
    a.in.sin_port = 0;
  return a;
}

int rn_sockaddr_port(const union rn_sockaddr *a) {
  if (a->sa.sa_family == AF_INET6) return ntohs(a->in6.sin6_port);
  return a->sa.sa_family == AF_INET ? ntohs(a->in.sin_port) : 0;
}

int rn_sockaddr_same_host(const union rn_sockaddr *a, const union rn_sockaddr *b) {
  if (a->sa.sa_family != b->sa.sa_family) return 0;
  if (a->sa.sa_family == AF_INET) return a->in.sin_addr.s_addr == b->in.sin_addr.s_addr;
  return memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr, sizeof(a->in6.sin6_addr)) == 0;
}

static socklen_t rn_sockaddr_len(const union rn_sockaddr *sa) {
  return sa->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

int rn_sock_route_source(const union rn_sockaddr *to, union rn_sockaddr *src) {
  if (to->sa.sa_family != AF_INET && to->sa.sa_family != AF_INET6) return -1;
  int fd = socket(to->sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  union rn_sockaddr dst = *to;
  if (rn_sockaddr_port(&dst) == 0) { /* connect() wants a port; any will do */
    if (dst.sa.sa_family == AF_INET6)
      dst.in6.sin6_port = htons(9);
    else
      dst.in.sin_port = htons(9);
  }
  socklen_t len = sizeof(*src);
  memset(src, 0, sizeof(*src));
  int rc = connect(fd, &dst.sa, rn_sockaddr_len(&dst)) == 0 && getsockname(fd, &src->sa, &len) == 0
               ? 0
               : -1;
  close(fd);
  if (rc == 0) *src = rn_sockaddr_no_port(*src);
  return rc;
}

void rn_sock_tune(int fd, int bufsize) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (bufsize > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof(bufsize));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof(bufsize));
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl != -1) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

int rn_sock_set_liveness(int fd, int timeout_ms) {
  if (timeout_ms <= 0) return 0;
  int one = 1;
  int idle = (timeout_ms / 2 + 999) / 1000; /* seconds of silence before probing */
  int intvl = timeout_ms / 6000 > 1 ? timeout_ms / 6000 : 1;
  int cnt = (timeout_ms - idle * 1000) / (intvl * 1000) + 1; /* the user timeout ends it first */
  unsigned int user = (unsigned int)timeout_ms;
  if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof(user)) != 0)
    return -1;
  return 0;
}

/* A non-blocking, close-on-exec TCP socket of addr's family; what says
 * what it is for, in the WARN. */
static ncclResult_t rn_sock_open(const union rn_sockaddr *addr, const char *what, int *fd) {
  char str[64];
  *fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (*fd >= 0) return ncclSuccess;
  RN_WARN("socket() %s %s failed: %s", what, rn_sockaddr_str(addr, str, sizeof(str)),
          strerror(errno));
  return ncclSystemError;
}

/* Ports for listeners.  bind() to port 0 makes the kernel scan the
 * ephemeral range for a port no socket holds, and ports held by connected
 * and TIME_WAIT sockets count: with some 8,000 of them (4,096 comms, or
 * the TIME_WAIT of a few thousand closed ones) one listener's bind took
 * 0.8-7 ms instead of 15 us.  So a listener first tries a few ports of
 * the range itself, each one hash lookup: those bind(0) would choose from
 * (net.ipv4.ip_local_port_range less ip_local_reserved_ports, read once),
 * in a scattered order from a random start.  When they are all taken (a
 * range nearly used up), the kernel's scan decides. */
#define RN_PORT_TRIES 16

static struct {
  pthread_once_t once;
  int lo, n; /* the range; n = 0: let the kernel choose */
  uint8_t reserved[65536 / 8];
  _Atomic uint64_t next;
} rn_ports = {.once = PTHREAD_ONCE_INIT};

static void rn_ports_reserve(const char *list) {
  for (const char *p = list; *p != '\0';) {
    char *end;
    long a = strtol(p, &end, 10), b = a;
    if (end == p) break;
    if (*end == '-') b = strtol(end + 1, &end, 10);
    for (long x = a < 0 ? 0 : a; x <= b && x < 65536; x++)
      rn_ports.reserved[x / 8] |= (uint8_t)(1u << (x % 8));
    p = *end == ',' ? end + 1 : end;
    if (*end != ',') break;
  }
}

static void rn_ports_read(void) {
  int lo = 0, hi = 0;
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (f == NULL) return;
  int ok = fscanf(f, "%d %d", &lo, &hi) == 2 && lo >= 1 && hi <= 65535 && lo <= hi;
  fclose(f);
  if (!ok) return;
  char list[4096] = "";
  f = fopen("/proc/sys/net/ipv4/ip_local_reserved_ports", "r");
  if (f != NULL) {
    if (fgets(list, sizeof(list), f) == NULL) list[0] = '\0';
    fclose(f);
  }
  rn_ports_reserve(list);
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
    seed = (uint64_t)rn_clock_ms() * 0x9e3779b97f4a7c15ull;
  atomic_store(&rn_ports.next, seed);
  rn_ports.lo = lo;
  rn_ports.n = hi - lo + 1;
}

/* A port of the range to try, or 0 (scattered: splitmix64 of a count). */
static int rn_ports_pick(void) {
  pthread_once(&rn_ports.once, rn_ports_read);
  if (rn_ports.n == 0) return 0;
  uint64_t z = atomic_fetch_add(&rn_ports.next, 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  int port = rn_ports.lo + (int)(z % (uint64_t)rn_ports.n);
  return rn_ports.reserved[port / 8] & (1u << (port % 8)) ? 0 : port;
}

/* A listening socket on addr (its port, or port when nonzero), and the
 * address it is bound to: 0, or -1 with errno. */
static int rn_sock_listen_on(const union rn_sockaddr *addr, int port, int *fd,
                             union rn_sockaddr *bound) {
  union rn_sockaddr a = *addr;
  if (port != 0 && a.sa.sa_family == AF_INET6) a.in6.sin6_port = htons((uint16_t)port);
  if (port != 0 && a.sa.sa_family == AF_INET) a.in.sin_port = htons((uint16_t)port);
  int s = socket(a.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  int one = 1;
  socklen_t len = sizeof(*bound);
  if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(s, &a.sa, rn_sockaddr_len(&a)) != 0 || listen(s, 16384) != 0 ||
      getsockname(s, &bound->sa, &len) != 0) {
    int err = errno;
    close(s);
    errno = err;
    return -1;
  }
  *fd = s;
  return 0;
}

int rn_sock_listen_quiet(const union rn_sockaddr *addr, int *fd, union rn_sockaddr *bound) {
  const int any =
      addr->sa.sa_family == AF_INET6 ? addr->in6.sin6_port == 0 : addr->in.sin_port == 0;
  for (int k = 0; any && k < RN_PORT_TRIES; k++) {
    int port = rn_ports_pick();
    if (port == 0) continue;
    if (rn_sock_listen_on(addr, port, fd, bound) == 0) return 0;
    if (errno != EADDRINUSE) return -1;
  }
  return rn_sock_listen_on(addr, 0, fd, bound);
}

ncclResult_t rn_sock_listen(const union rn_sockaddr *addr, int *fd, union rn_sockaddr *bound) {
  char str[64];
  if (rn_sock_listen_quiet(addr, fd, bound) == 0) return ncclSuccess;
  RN_WARN("socket/bind/listen on %s failed: %s", rn_sockaddr_str(addr, str, sizeof(str)),
          strerror(errno));
  return ncclSystemError;
}

const char *rn_sock_connect_hint(int err) {
  /* EADDRNOTAVAIL: mostly every local port of the range taken toward this
   * destination (open connections, and closed ones in TIME_WAIT), else the
   * local address gone. */
  return err == EADDRNOTAVAIL
             ? " (no local port of net.ipv4.ip_local_port_range left toward it, counting "
               "connections in TIME_WAIT, or the local address is gone)"
             : "";
}

ncclResult_t rn_sock_connect_start(const union rn_sockaddr *addr, const union rn_sockaddr *local,
                                   int *fd) {
  int err;
  ncclResult_t res = rn_sock_connect_start_quiet(addr, local, fd, &err);
  if (res == ncclRemoteError) {
    char str[64];
    RN_WARN("connect to %s failed: %s%s", rn_sockaddr_str(addr, str, sizeof(str)), strerror(err),
            rn_sock_connect_hint(err));
  }
  return res;
}

ncclResult_t rn_sock_connect_start_quiet(const union rn_sockaddr *addr,
                                         const union rn_sockaddr *local, int *fd, int *err) {
  char str[64];
  *err = 0;
  int s;
  ncclResult_t res = rn_sock_open(addr, "to connect to", &s);
  if (res != ncclSuccess) return res;
  rn_sock_tune(s, 0);
  if (local != NULL && local->sa.sa_family == addr->sa.sa_family) {
    union rn_sockaddr l = rn_sockaddr_no_port(*local);
    /* Bind the address only; connect() picks the port.  A bind to port 0
     * reserves an ephemeral port for this socket alone, and the kernel's
     * search for a free one grows with the sockets already bound: with
     * some 9,000 of them (3,000 comms) a bind + connect took 1.2 ms
     * instead of 15 us.  connect() may share a port between different
     * destinations, and finds one through the connection hash. */
    int one = 1;
    if (setsockopt(s, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one)) != 0) {
      static atomic_int said;
      if (!atomic_exchange(&said, 1))
        RN_INFO(NCCL_NET,
                "IP_BIND_ADDRESS_NO_PORT unavailable (%s): each connecting socket reserves an "
                "ephemeral port of its own",
                strerror(errno));
    }
    if (bind(s, &l.sa, rn_sockaddr_len(&l)) != 0) {
      RN_WARN("bind to local rail %s failed: %s", rn_sockaddr_str(&l, str, sizeof(str)),
              strerror(errno));
      close(s);
      return ncclSystemError;
    }
  }
  if (connect(s, &addr->sa, rn_sockaddr_len(addr)) != 0 && errno != EINPROGRESS && errno != EINTR) {
    *err = errno;
    close(s);
    return ncclRemoteError;
  }
  *fd = s;
  return ncclSuccess;
}

int rn_sock_connect_status(int fd, int *err) {
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  *err = 0;
  int rc = poll(&p, 1, 0);
  if (rc == 0) return 0;
  if (rc < 0) {
    if (errno == EINTR) return 0;
    *err = errno;
    return -1;
  }
  socklen_t len = sizeof(*err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &len) != 0) *err = errno;
  if (*err != 0) return -1;
  /* A connect to a dead listener's port can pick that same port as its own
   * ephemeral port and "succeed" by connecting to itself (TCP simultaneous
   * open).  That is a refused connection. */
  union rn_sockaddr me, peer;
  socklen_t ml = sizeof(me), pl = sizeof(peer);
  if (getsockname(fd, &me.sa, &ml) == 0 && getpeername(fd, &peer.sa, &pl) == 0 && ml == pl &&
      memcmp(&me, &peer, ml) == 0) {
    *err = ECONNREFUSED;
    return -2;
  }
  return 1;
}

ncclResult_t rn_sock_send_some(int fd, const void *buf, size_t len, size_t *off) {
  while (*off < len) {
    ssize_t n = send(fd, (const char *)buf + *off, len - *off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      *off += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n < 0 && errno == EINTR) continue;
    return (errno == EPIPE || errno == ECONNRESET) ? ncclRemoteError : ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t rn_sock_recv_some(int fd, void *buf, size_t len, size_t *off) {
  while (*off < len) {
    ssize_t n = recv(fd, (char *)buf + *off, len - *off, MSG_DONTWAIT);
    if (n > 0) {
      *off += (size_t)n;
      continue;
    }
    if (n == 0) return ncclRemoteError; /* orderly shutdown by the peer */
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
    if (errno == EINTR) continue;
    return errno == ECONNRESET ? ncclRemoteError : ncclSystemError;
  }
  return ncclSuccess;
}

/* Read and drop what is readable now: 1 at the peer's FIN or an error. */
static int rn_sock_drain(int fd) {
  char sink[4096];
  for (int i = 0; i < 256; i++) { /* a peer still streaming cannot keep us */
    ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  }
  return 0;
}

void rn_sock_close_gently_n(const int *fds, int n, int wait_ms) {
  enum { RN_SOCK_GENTLE_MAX = 64 };
  int ended[RN_SOCK_GENTLE_MAX], last[RN_SOCK_GENTLE_MAX];
  if (n > RN_SOCK_GENTLE_MAX) { /* in batches, each with its own wait */
    rn_sock_close_gently_n(fds + RN_SOCK_GENTLE_MAX, n - RN_SOCK_GENTLE_MAX, wait_ms);
    n = RN_SOCK_GENTLE_MAX;
  }
  for (int i = 0; i < n; i++) {
    last[i] = -1;
    ended[i] = fds[i] < 0 || rn_sock_drain(fds[i]);
    if (fds[i] >= 0) shutdown(fds[i], SHUT_WR);
  }
  const int64_t start = rn_clock_ms();
  int64_t last_move = start, stall_ms = wait_ms / 5 > 0 ? wait_ms / 5 : 1;
  while (wait_ms > 0) {
    const int64_t now = rn_clock_ms();
    struct pollfd p[RN_SOCK_GENTLE_MAX];
    int np = 0;
    for (int i = 0; i < n; i++) {
      int outq = 0;
      /* Past the shutdown the FIN counts as one byte: at 1, every byte of
       * data is acknowledged, and the FIN's own acknowledgement is not
       * waited for (a peer in its ping-pong mode delays it some 40 ms, a
       * wait per kept connection closed). */
      if (ended[i] || ioctl(fds[i], SIOCOUTQ, &outq) != 0 || outq <= 1) continue;
      if (outq != last[i]) last_move = now;
      last[i] = outq;
      /* On a lossy path nothing is acknowledged until TCP's retransmission
       * timer fires (200 ms, doubling): the wait for progress lasts two of
       * them, within wait_ms. */
      struct tcp_info ti;
      socklen_t tl = sizeof(ti);
      if (getsockopt(fds[i], IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 &&
          2 * (int64_t)ti.tcpi_rto / 1000 > stall_ms)
        stall_ms = 2 * (int64_t)ti.tcpi_rto / 1000;
      p[np++] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    }
    /* While bytes are still acknowledged, up to 5 x wait_ms: a lossy or
     * slow path drains a sender's queue at its own pace, and what a reset
     * would throw away is the peer's data. */
    if (np == 0 || now - start >= 5 * (int64_t)wait_ms || now - last_move >= stall_ms) break;
    if (poll(p, (nfds_t)np, 5) > 0)
      for (int k = 0; k < np; k++)
        for (int i = 0; i < n && (p[k].revents & (POLLIN | POLLHUP | POLLERR)); i++)
          if (fds[i] == p[k].fd) ended[i] = rn_sock_drain(fds[i]);
  }
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
}

void rn_sock_close_gently(int fd, int wait_ms) { rn_sock_close_gently_n(&fd, 1, wait_ms); }

int rn_sock_each_ifaddr(rn_sock_ifaddr_fn visit, void *arg) {
  struct ifaddrs *all = NULL;
  if (getifaddrs(&all) != 0) return -1;
  int stop = 0;
  for (int pass = 0; pass < 2 && !stop; pass++) {
    int family = pass == 0 ? AF_INET : AF_INET6;
    for (const struct ifaddrs *a = all; a != NULL && !stop; a = a->ifa_next) {
      if (a->ifa_addr == NULL || a->ifa_addr->sa_family != family) continue;
      if (!(a->ifa_flags & IFF_UP)) continue;
      union rn_sockaddr sa;
      memset(&sa, 0, sizeof(sa));
      memcpy(&sa, a->ifa_addr,
             family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
      if (family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&sa.in6.sin6_addr)) continue;
      stop = visit(arg, a->ifa_name, a->ifa_flags, &sa);
    }
  }
  freeifaddrs(all);
  return 0;
}
