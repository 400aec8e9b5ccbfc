/* Non-blocking socket helpers shared by every transport's connection setup:
 * addresses, listen/connect, partial send/recv, and the rendezvous that
 * admits only peers presenting the handle's nonce.  Never blocks, never
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

/* Listening socket bound to addr (port 0 = any), non-blocking; *bound gets
 * the real address. */
ncclResult_t rn_sock_listen(const union rn_sockaddr *addr, int *fd, union rn_sockaddr *bound);
/* Start a non-blocking connect, from `local` (port 0) when it is non-NULL
 * and of the same family, so the bytes leave through that interface; *fd
 * valid on success. */
ncclResult_t rn_sock_connect_start(const union rn_sockaddr *addr, const union rn_sockaddr *local,
                                   int *fd);
/* *ready=1 once connected; error when the connect failed. */
ncclResult_t rn_sock_connect_poll(int fd, int *ready);
/* Move bytes without blocking, advancing *off.  A closed or reset peer is
 * ncclRemoteError. */
ncclResult_t rn_sock_send_some(int fd, const void *buf, size_t len, size_t *off);
ncclResult_t rn_sock_recv_some(int fd, void *buf, size_t len, size_t *off);
/* TCP_NODELAY, close-on-exec, non-blocking; buffers when bufsize > 0. */
void rn_sock_tune(int fd, int bufsize);

/* The first bytes on every railnet connection. */
#define RN_HELLO_MAGIC 0x726e686fu /* "rnho" */
enum rn_hello_role { RN_ROLE_CTRL = 1, RN_ROLE_DATA = 2 };
struct rn_hello {
  uint32_t magic;
  uint16_t version;
  uint8_t role;  /* enum rn_hello_role */
  uint8_t index; /* data stream index */
  uint64_t nonce;
  uint64_t conn_id;  /* random per connect, groups the streams */
  uint32_t nstreams; /* data streams that follow the control one */
  uint32_t reserved;
};

/* Rendezvous on the listening side: accepts connections on up to
 * RN_RDV_MAX_LFDS listening sockets, reads hellos, drops strays (wrong
 * magic or nonce, silence past the timeout), and groups streams by conn_id.
 * Owner: the listen comm. */
#define RN_RDV_MAX_LFDS 8
#define RN_RDV_MAX_STREAMS 32
struct rn_rdv_conn {
  int ctrl_fd;
  int nstreams;
  int data_fd[RN_RDV_MAX_STREAMS];
};
/* Close every socket of a connection (unused slots hold -1). */
void rn_sock_conn_close(const struct rn_rdv_conn *c);

struct rn_rdv;
ncclResult_t rn_rdv_create(const int *lfds, int nlfds, uint64_t nonce, struct rn_rdv **out);
/* Returns one complete connection in *conn (and *ready=1) when available. */
ncclResult_t rn_rdv_poll(struct rn_rdv *r, struct rn_rdv_conn *conn, int *ready);
void rn_rdv_destroy(struct rn_rdv *r); /* closes pending fds, not the listening ones */

/* Connector side: open ctrl + nstreams connections to addrs (stream i goes
 * to addrs[i % naddrs]) and send each its hello.  Non-blocking. */
struct rn_dial;
ncclResult_t rn_dial_create(const union rn_sockaddr *addrs, int naddrs, uint64_t nonce,
                            int nstreams, struct rn_dial **out);
/* The same, with stream i leaving from locals[i % nlocals] (the sender's
 * own rails), so traffic stays on the rails of the chosen device. */
ncclResult_t rn_dial_create_from(const union rn_sockaddr *addrs, int naddrs,
                                 const union rn_sockaddr *locals, int nlocals, uint64_t nonce,
                                 int nstreams, struct rn_dial **out);
ncclResult_t rn_dial_poll(struct rn_dial *d, struct rn_rdv_conn *conn, int *ready);
void rn_dial_destroy(struct rn_dial *d); /* closes fds not yet handed out */

uint64_t rn_random64(void);

#endif
