/* Private to the TCP transport (plugin/tcp/): wire formats, the comm and
 * its requests, streams and helper threads, and the calls between the
 * transport's files.
 *
 * One control connection plus N data streams per comm.  Receiver-driven,
 * like the verbs path: irecv sends a clear-to-send (CTS) with the posted
 * sizes and tags on the control connection; isend matches the CTS for its
 * sequence number by tag.  Messages up to RAILNET_SOCKET_INLINE bytes
 * travel inline behind a header on the control connection, moved by the
 * calling (NCCL proxy) thread with no hand-off, so small-message latency
 * is one TCP round trip.  Larger messages are cut into chunks spread over
 * the data streams, each chunk carrying its own header, and are moved by
 * per-comm helper threads straight between the user buffers and the
 * sockets.
 *
 * Locking: c->lock guards the control state (request pool, CTS/recv rings,
 * control buffers).  Helper threads touch only their streams, the stream
 * queues (under the queue lock) and atomics in requests and the comm.
 *
 * Files, calls going one way (p2p -> comm -> control -> streams, and p2p
 * to each of them): transport.c the table and lifecycle (init/fini, listen,
 * connect, accept, close, registration), comm.c comms (create, free, the
 * list of open ones), control.c the control connection (output queue,
 * parsing, matching), streams.c the data streams and their helper
 * threads, p2p.c requests and isend/irecv/test, iface.c interface
 * discovery. */
#ifndef RN_TCP_H
#define RN_TCP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "railnet/list.h"
#include "railnet/rendezvous.h"
#include "railnet/transport.h"

#define RN_TCP_MAX_IFS RN_MAX_NICS
#define RN_TCP_MAX_ADDRS ((int)(RN_HANDLE_PAYLOAD / sizeof(struct rn_wire_addr)))
#define RN_TCP_NREQS 256        /* NCCL_NET_MAX_REQUESTS x maxRecvs */
#define RN_TCP_RING 64          /* outstanding receive groups (>= 32) */
#define RN_TCP_STREAM_QUEUE 512 /* chunks queued per stream */
#define RN_TCP_MIN_CHUNK 65536
#define RN_TCP_MAX_STREAMS RN_RDV_MAX_STREAMS
#define RN_TCP_IN_BUF 65536  /* control input buffer */
#define RN_TCP_OUT_QUEUE 512 /* control messages queued for output */

/* Small messages sent before their clear-to-send arrived, unmatched at the
 * sender and possibly unexpected at the receiver, at most this many. */
#define RN_TCP_EAGER_WINDOW 64
#define RN_TCP_EAGER_MAX 1024

enum rn_tcp_msg { RN_TCP_CTS = 1, RN_TCP_DATA = 2, RN_TCP_NACK = 3 };
enum {
  RN_TCP_F_TOO_BIG = 1,  /* the send exceeds the posted buffer: fail both sides */
  RN_TCP_F_STREAMED = 2, /* the payload follows on the data streams */
  RN_TCP_F_EAGER = 4,    /* sent before its clear-to-send: seq/idx unknown, match by tag */
};

struct rn_tcp_cts {
  uint32_t type;
  uint32_t n;
  uint64_t seq;
  uint64_t sizes[RN_MAX_RECVS];
  int32_t tags[RN_MAX_RECVS];
};

/* Control-connection data header; `inline_len` payload bytes follow. */
struct rn_tcp_data {
  uint32_t type;
  uint32_t idx;
  uint64_t seq;
  uint64_t size;
  uint32_t flags;
  uint32_t inline_len;
  int32_t tag;
  uint32_t reserved;
};

/* Receiver to sender: an eager message did not fit its buffer. */
struct rn_tcp_nack {
  uint32_t type;
  int32_t tag;
  uint64_t size;
  uint64_t posted;
};

/* An eager message that arrived before its receive was posted. */
struct rn_tcp_unexpected {
  int32_t tag;
  int ready; /* payload complete */
  uint64_t size;
  char data[RN_TCP_EAGER_MAX];
};

/* Data-stream chunk header; `len` payload bytes follow. */
struct rn_tcp_chunk {
  uint64_t seq;
  uint32_t idx;
  uint32_t len;
  uint64_t offset;
  uint64_t total;
};

struct rn_tcp_comm;

enum rn_tcp_req_state { RN_TCP_REQ_FREE = 0, RN_TCP_REQ_ACTIVE };

/* Owner: the comm's pool.  Atomics are shared with the helper threads. */
struct rn_tcp_req {
  struct rn_req_base base;
  struct rn_tcp_comm *comm;
  enum rn_tcp_req_state state;
  int is_recv;
  ncclResult_t error;
  /* send */
  size_t size;
  _Atomic size_t unsent; /* bytes the data streams still have to write */
  int ctl_pending;       /* control message (and inline payload) not yet written */
  /* recv */
  uint64_t seq;
  int n;
  void *buf[RN_MAX_RECVS];
  size_t posted[RN_MAX_RECVS];
  int32_t tag[RN_MAX_RECVS];
  uint32_t claimed;                     /* buffers matched to a message */
  size_t got[RN_MAX_RECVS];             /* message size per buffer, once known */
  _Atomic size_t arrived[RN_MAX_RECVS]; /* bytes landed through streams */
  _Atomic int pending;                  /* buffers not yet complete */
};

/* A chunk queued on a send stream. */
struct rn_tcp_queued_chunk {
  struct rn_tcp_req *req;
  struct rn_tcp_chunk hdr;
  const char *data;
};

/* A queued control message.  The payload stays in the user's buffer until
 * written; the request completes then. */
struct rn_tcp_ctl_out {
  union {
    struct rn_tcp_cts cts;
    struct rn_tcp_data data;
  } hdr;
  uint32_t hlen;
  const char *payload;
  size_t plen;
  size_t off;
  struct rn_tcp_req *req;
};

/* One data stream.  Owner: its helper thread (fd, progress); the queue is
 * shared with the caller thread under queue_lock. */
struct rn_tcp_stream {
  int fd;
  atomic_int dead; /* EOF or error seen: no more I/O */
  pthread_mutex_t queue_lock;
  int queue_head, queue_tail; /* ring of RN_TCP_STREAM_QUEUE */
  struct rn_tcp_queued_chunk queue[RN_TCP_STREAM_QUEUE];
  /* progress of the chunk at the head (send) or being read (recv) */
  size_t off;
  struct rn_tcp_chunk rx_hdr;
  struct rn_tcp_req *rx_req;
  char *rx_dst;
};

struct rn_tcp_thread {
  struct rn_tcp_comm *comm;
  pthread_t tid;
  int wake_fd; /* eventfd: new work or stop */
  int first, step;
  int started;
};

/* A send or receive comm.  Owner: NCCL between connect/accept and close. */
struct rn_tcp_comm {
  struct rn_comm_base base;
  struct rn_list open; /* in comm.c's list of open comms, under its lock */
  pthread_mutex_t lock;
  int is_recv;
  int ctrl_fd;
  int nstreams, nthreads;
  struct rn_tcp_stream stream[RN_TCP_MAX_STREAMS];
  struct rn_tcp_thread thread[RN_TCP_MAX_STREAMS];
  atomic_int stop;
  _Atomic int error;      /* first asynchronous error (ncclResult_t) */
  atomic_int peer_closed; /* orderly EOF seen */
  /* Without helper threads the caller polls the data streams only while
   * they have work: chunks queued (send) or announced messages (recv). */
  atomic_int stream_work;
  size_t inline_max, chunk;
  unsigned next_stream; /* next stream for a chunk */
  /* control output: messages in order, payloads referenced, not copied */
  int out_head, out_tail;
  struct rn_tcp_ctl_out out[RN_TCP_OUT_QUEUE];
  /* control input: headers are parsed from `in`; a payload is read
   * straight into its receive buffer (rx_*) */
  char *in;
  size_t in_len;
  char *rx_dst;
  size_t rx_left;
  struct rn_tcp_req *rx_req;
  uint32_t rx_idx;
  uint64_t rx_size;
  struct rn_tcp_unexpected *rx_unexpected; /* payload being read into the unexpected queue */
  size_t eager_max;
  atomic_int cts_deferred; /* a clear-to-send waits in out (rn_tcp_comm_flush_deferred) */
  /* recv side: messages are matched to buffers in arrival order, filling
   * group match_seq; eager ones whose group is not posted wait in
   * unexpected */
  uint64_t match_seq;
  int match_cnt;
  struct rn_tcp_unexpected *unexpected; /* RN_TCP_EAGER_WINDOW entries, allocated on first use */
  int unexpected_head, unexpected_tail;
  char *discard; /* payload of a message too big for its buffer */
  /* send side: tags of eager messages not yet matched to a clear-to-send */
  int32_t eager_tag[RN_TCP_EAGER_WINDOW];
  int eager_head, eager_tail;
  /* send side: CTS ring indexed by seq % RN_TCP_RING */
  uint64_t send_seq;
  struct rn_tcp_cts cts[RN_TCP_RING];
  bool cts_valid[RN_TCP_RING];
  uint32_t cts_claimed[RN_TCP_RING]; /* bitmask of matched buffers */
  /* recv side: posted groups indexed by seq % RN_TCP_RING */
  uint64_t recv_seq;
  struct rn_tcp_req *_Atomic ring[RN_TCP_RING];
  struct rn_tcp_req reqs[RN_TCP_NREQS];
};

static inline void rn_tcp_set_error(struct rn_tcp_comm *c, ncclResult_t res) {
  int expected = ncclSuccess;
  atomic_compare_exchange_strong(&c->error, &expected, (int)res);
}

/* iface.c */
/* One usable interface; rails come back from the core as rn_nic pointers
 * whose table_index indexes this table. */
struct rn_tcp_if {
  struct rn_nic nic;
  union rn_sockaddr addr;
};

/* Discover interfaces per RAILNET_SOCKET_IFNAME / NCCL_SOCKET_IFNAME. */
int rn_tcp_if_discover(struct rn_tcp_if *ifs, int max);
/* NCCL's interface-list syntax: "eth,ib" prefixes, "^lo" excludes,
 * "=eth0" exact.  Returns 1 when name is selected. */
int rn_tcp_if_match(const char *spec, const char *name);

/* comm.c */
/* Build a comm around an established connection; starts the helpers. */
ncclResult_t rn_tcp_comm_create(const struct rn_rdv_conn *conn, int is_recv,
                                struct rn_tcp_comm **out);
void rn_tcp_comm_free(struct rn_tcp_comm *c);
/* At fini: frees every comm still open; returns how many. */
int rn_tcp_comm_free_all(void);
/* A receive deferred its clear-to-send: the next isend of any comm sends it. */
void rn_tcp_comm_defer_cts(struct rn_tcp_comm *c);
void rn_tcp_comm_flush_deferred(void);

/* control.c */
ncclResult_t rn_tcp_ctl_flush(struct rn_tcp_comm *c);
int rn_tcp_ctl_room(const struct rn_tcp_comm *c);
int rn_tcp_ctl_queue(struct rn_tcp_comm *c, const void *hdr, size_t hl, const void *payload,
                     size_t pl, struct rn_tcp_req *req);
int rn_tcp_match_buffer(int n, const int32_t *tags, uint32_t claimed, int tag, int *mismatch);
void rn_tcp_drain_unexpected(struct rn_tcp_comm *c);
ncclResult_t rn_tcp_progress(struct rn_tcp_comm *c);
void rn_tcp_cts_claim(struct rn_tcp_comm *c, int slot, int idx);
void rn_tcp_match_eager(struct rn_tcp_comm *c);
int rn_tcp_eager_unmatched(const struct rn_tcp_comm *c);

/* streams.c */
void rn_tcp_drive_streams(struct rn_tcp_comm *c);
void *rn_tcp_thread_main(void *arg);
int rn_tcp_enqueue(struct rn_tcp_comm *c, struct rn_tcp_req *r, const char *data, size_t size,
                   uint64_t seq, uint32_t idx);

/* p2p.c */
ncclResult_t rn_tcp_isend(void *scomm, void *data, size_t size, int tag, void *mh, void **req);
ncclResult_t rn_tcp_irecv(void *rcomm, int n, void **data, const size_t *sizes, const int *tags,
                          void **mhs, void **req);
ncclResult_t rn_tcp_test(void *request, int *done, size_t *sizes, int *nsizes);

#endif
