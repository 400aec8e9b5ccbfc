/* The rendezvous that starts every railnet connection (plugin/rendezvous.c):
 * hellos, the listening side that admits only peers presenting the
 * handle's nonce, and the connecting side that dials them.  Never blocks.
 * The admission policy and its bounds are described at the top of
 * plugin/rendezvous.c. */
#ifndef RN_RENDEZVOUS_H
#define RN_RENDEZVOUS_H

#include <stdint.h>
#include "nccl/net_common.h"
#include "railnet/sock.h"

/* The first bytes on every railnet connection. */
#define RN_HELLO_MAGIC 0x726e686fu /* "rnho" */
/* RN_ROLE_REUSE: on a pooled control connection only (plugin/tcp/pool.c),
 * never to a listener: the connection serves the comm of this nonce. */
enum rn_hello_role { RN_ROLE_CTRL = 1, RN_ROLE_DATA = 2, RN_ROLE_REUSE = 3 };
struct rn_hello {
  uint32_t magic;
  uint16_t version; /* RN_WIRE_VERSION */
  uint8_t role;     /* enum rn_hello_role */
  uint8_t index;    /* data stream index */
  uint64_t nonce;
  uint64_t conn_id;  /* random per connect, groups the streams */
  uint32_t nstreams; /* data streams that follow the control one */
  /* Source addresses the connector bound its sockets to: the control
   * connection leaves from the first, data stream i from the (i mod
   * nlocals)-th.  0: not bound, each leaves from whatever address routes to
   * the listening address it dials. */
  uint16_t nlocals;
  /* Rails left out, one bit per source address: bit k stands for data
   * streams i with i mod nlocals == k, which leave from the k-th address
   * for the listener's k-th listening socket.  The connector could not
   * reach them; they are not dialed, and the control connection leaves
   * from the first rail not left out.  Nonzero only with 2 <= nlocals <=
   * the listener's listening sockets (and 16), and never every rail. */
  uint16_t absent;
};

/* Rendezvous on the listening side: accepts connections on up to
 * RN_RDV_MAX_LFDS listening sockets, reads hellos, drops strays, and groups
 * streams by conn_id, within fixed bounds whatever its peers do.
 * Owner: the listen comm. */
#define RN_RDV_MAX_LFDS 8
#define RN_RDV_MAX_STREAMS 32
struct rn_rdv_conn {
  int ctrl_fd;
  int nstreams;
  int data_fd[RN_RDV_MAX_STREAMS]; /* -1 for a stream of a rail left out (struct rn_hello) */
  int nrails; /* the connector's bound sources: data stream i is on rail i mod nrails */
};
/* Close every socket of a connection (unused slots hold -1). */
void rn_rdv_conn_close(const struct rn_rdv_conn *c);
/* Connector, waiting for the listener's accept: 1 when the listener
 * dropped one of the connection's data streams (it closes one whose hello
 * came too late, RAILNET_HELLO_TIMEOUT_MS, as a retransmitted one may on
 * a lossy path), so the group can never complete: dial again. */
int rn_rdv_conn_dropped(const struct rn_rdv_conn *c);

struct rn_rdv;
/* A listener for connections of 1..RN_RDV_MAX_STREAMS data streams (the
 * TCP transport: the connector picks the count). */
ncclResult_t rn_rdv_create(const int *lfds, int nlfds, uint64_t nonce, struct rn_rdv **out);
/* A listener for lone control connections, 0 data streams (the verbs
 * bootstrap). */
ncclResult_t rn_rdv_create_ctrl_only(const int *lfds, int nlfds, uint64_t nonce,
                                     struct rn_rdv **out);
/* Connections of min_streams..max_streams data streams (the TCP
 * transport's listen comm: 0, the data streams come later, or more). */
ncclResult_t rn_rdv_create_range(const int *lfds, int nlfds, uint64_t nonce, int min_streams,
                                 int max_streams, struct rn_rdv **out);
/* Returns one complete connection in *conn (and *ready=1) when available.
 * An error only when the listening sockets fail, or accept() has found no
 * free file descriptor for RAILNET_CONNECT_TIMEOUT_MS; the rendezvous
 * stays usable after either. */
ncclResult_t rn_rdv_poll(struct rn_rdv *r, struct rn_rdv_conn *conn, int *ready);
void rn_rdv_destroy(struct rn_rdv *r); /* closes pending fds, not the listening ones */

/* Connector side: open ctrl + nstreams connections to addrs (stream i goes
 * to addrs[i % naddrs]) and send each its hello.  Non-blocking. */
struct rn_rdv_dial;
ncclResult_t rn_rdv_dial_create(const union rn_sockaddr *addrs, int naddrs, uint64_t nonce,
                                int nstreams, struct rn_rdv_dial **out);
/* The same, with stream i leaving from locals[i % nlocals] (the sender's
 * own rails), so traffic stays on the rails of the chosen device. */
ncclResult_t rn_rdv_dial_create_from(const union rn_sockaddr *addrs, int naddrs,
                                     const union rn_sockaddr *locals, int nlocals, uint64_t nonce,
                                     int nstreams, struct rn_rdv_dial **out);
/* The same, leaving out the rails in `absent` (struct rn_hello): needs
 * 2 <= naddrs == nlocals <= 16, addresses of one family, and a rail left. */
ncclResult_t rn_rdv_dial_create_without(const union rn_sockaddr *addrs, int naddrs,
                                        const union rn_sockaddr *locals, int nlocals,
                                        uint64_t nonce, int nstreams, uint32_t absent,
                                        struct rn_rdv_dial **out);
/* A failed connect WARNs and fails.  A socket the listener reset after it
 * connected (a busy listener may drop a connection whose hello is late)
 * fails with ncclRemoteError and no WARN, and rn_rdv_dial_dropped() says
 * so: the caller may dial again. */
ncclResult_t rn_rdv_dial_poll(struct rn_rdv_dial *d, struct rn_rdv_conn *conn, int *ready);
int rn_rdv_dial_dropped(const struct rn_rdv_dial *d);
/* With quiet set, a failed connect fails without a WARN, and
 * rn_rdv_dial_failed() names it: its rail (the index of the address it
 * dialed), with *err its errno; -1 when no connect failed.  The caller
 * says what it does about it. */
void rn_rdv_dial_set_quiet(struct rn_rdv_dial *d);
int rn_rdv_dial_failed(const struct rn_rdv_dial *d, int *err);
/* Rails (bit k: the k-th address) with a socket still connecting, and in
 * *up those whose sockets all connected. */
uint32_t rn_rdv_dial_pending(const struct rn_rdv_dial *d, uint32_t *up);
void rn_rdv_dial_destroy(struct rn_rdv_dial *d); /* closes fds not yet handed out */

uint64_t rn_rdv_random64(void);

#endif
