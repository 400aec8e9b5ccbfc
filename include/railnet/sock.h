/* Non-blocking socket primitives shared by every transport's connection
 * setup: addresses, listen/connect, partial send/recv.  Never blocks, never
 * logs errors it returns except as WARN alongside the result. */
#ifndef RN_SOCK_H
#define RN_SOCK_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include "nccl/net_common.h"

union rn_sockaddr {
  struct sockaddr sa;
  struct sockaddr_in in;
  struct sockaddr_in6 in6;
};

/* 20-byte form carried inside handles. */
struct rn_wire_addr {
  uint8_t family; /* 4 or 6 */
  uint8_t reserved;
  uint16_t port; /* network order */
  uint8_t addr[16];
};

void rn_sockaddr_to_wire(const union rn_sockaddr *sa, struct rn_wire_addr *w);
int rn_sockaddr_from_wire(const struct rn_wire_addr *w, union rn_sockaddr *sa); /* 0 ok, -1 bad */
const char *rn_sockaddr_str(const union rn_sockaddr *sa, char *buf, size_t len);
/* 1 when a and b are the same host address (ports aside). */
int rn_sockaddr_same_host(const union rn_sockaddr *a, const union rn_sockaddr *b);
/* The port, in host order (0 for neither family). */
int rn_sockaddr_port(const union rn_sockaddr *a);
/* a with port 0: the address alone, to bind to or compare. */
union rn_sockaddr rn_sockaddr_no_port(union rn_sockaddr a);
/* The source address the kernel's routing gives a socket that sends to
 * `to` (a connected UDP socket: nothing is sent): 0, or -1 (no route). */
int rn_sock_route_source(const union rn_sockaddr *to, union rn_sockaddr *src);

/* Listening socket bound to addr (port 0 = any), non-blocking; *bound gets
 * the real address. */
ncclResult_t rn_sock_listen(const union rn_sockaddr *addr, int *fd, union rn_sockaddr *bound);
/* The same without a WARN: -1 with errno (a port in use, say). */
int rn_sock_listen_quiet(const union rn_sockaddr *addr, int *fd, union rn_sockaddr *bound);
/* Start a non-blocking connect, from `local` (port 0) when it is non-NULL
 * and of the same family, so the bytes leave through that interface; *fd
 * valid on success. */
ncclResult_t rn_sock_connect_start(const union rn_sockaddr *addr, const union rn_sockaddr *local,
                                   int *fd);
/* The same, without a WARN when connect() itself fails at once (no route,
 * say): ncclRemoteError with its errno in *err, for the caller to say.
 * Other failures (no socket, bind) WARN as always. */
ncclResult_t rn_sock_connect_start_quiet(const union rn_sockaddr *addr,
                                         const union rn_sockaddr *local, int *fd, int *err);
/* What to add to a failed connect's message for err ("" or a hint). */
const char *rn_sock_connect_hint(int err);
/* A connect's outcome, without a word: 1 connected, 0 not yet, -1 failed
 * with *err (ECONNRESET: it reached the listener, which reset it), -2
 * connected to itself (nothing listens there; *err ECONNREFUSED). */
int rn_sock_connect_status(int fd, int *err);
/* Move bytes without blocking, advancing *off.  A closed or reset peer is
 * ncclRemoteError. */
ncclResult_t rn_sock_send_some(int fd, const void *buf, size_t len, size_t *off);
ncclResult_t rn_sock_recv_some(int fd, void *buf, size_t len, size_t *off);
/* Close a connected socket without a reset: read and drop what the peer
 * sent that nobody will read (closing over unread bytes makes the kernel
 * send RST, which throws away this side's bytes not yet delivered), then
 * send FIN behind the queued bytes.  With wait_ms > 0 it then waits, still
 * reading, until the peer has acknowledged every byte: what a reset would
 * throw away is this side's bytes not yet acknowledged (what the peer's
 * kernel holds stays readable there), and the peer may still send (it does
 * not know yet that this side is done), which a closed socket answers
 * with a reset.  The FIN's own acknowledgement is not waited for.  The
 * wait lasts while bytes are acknowledged, up to 5 x wait_ms (a lossy or
 * slow path drains the queue at its own pace); it ends early when no byte
 * is acknowledged for a fifth of wait_ms, or for two of TCP's
 * retransmission timeouts where that is longer (a lossy path), as a peer
 * that stopped reading or is gone shows, or at the peer's own FIN. */
void rn_sock_close_gently(int fd, int wait_ms);
/* The same for n sockets at once, in one wait (negative fds skipped). */
void rn_sock_close_gently_n(const int *fds, int n, int wait_ms);
/* TCP_NODELAY, close-on-exec, non-blocking; buffers when bufsize > 0. */
void rn_sock_tune(int fd, int bufsize);
/* Make a peer that vanishes without closing (pulled cable, powered-off
 * host) an error within about timeout_ms: keepalive probes from half of
 * it on, and TCP_USER_TIMEOUT, which ends the connection with ETIMEDOUT
 * once data or probes stay unacknowledged that long.  0 changes nothing.
 * 0, or -1 with errno when the kernel refused an option. */
int rn_sock_set_liveness(int fd, int timeout_ms);

/* Call visit for each address of an up interface that a peer can reach:
 * every IPv4 address first, then every IPv6 one but the link-local ones
 * (they need a scope id the peer cannot use), each family in getifaddrs
 * order.  flags are the interface's IFF_* flags; visit returns nonzero to
 * stop.  0, or -1 when the interfaces cannot be read. */
typedef int (*rn_sock_ifaddr_fn)(void *arg, const char *ifname, unsigned flags,
                                 const union rn_sockaddr *addr);
int rn_sock_each_ifaddr(rn_sock_ifaddr_fn visit, void *arg);

#endif
