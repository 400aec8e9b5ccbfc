/* Private to the TCP transport (plugin/tcp/): the comm and its requests,
 * streams and helper threads, and the calls between the transport's files.
 * The wire format is wire.h; PROTOCOL.md specifies it.
 *
 * One control connection plus N data streams per comm, the streams opened
 * with the first message that needs them and closed when idle (open.c).
 * Receiver-driven,
 * like the verbs path: irecv sends a clear-to-send (CTS) with the posted
 * sizes and tags on the control connection; isend matches it by tag.
 * Messages up to RAILNET_SOCKET_INLINE bytes travel inline behind a header
 * on the control connection, moved by the calling (NCCL proxy) thread with
 * no hand-off, so small-message latency is one TCP round trip.  Larger
 * messages are cut into chunks on a grid the header announces, spread over
 * the data streams, each chunk carrying its own header, and are moved by
 * the process's progress engine (engine.c: a pool of helper threads
 * shared by every comm), or the caller on small hosts, straight between
 * the user buffers and the sockets.
 *
 * THE MATCHING RULE (NCCL's, as net_ib implements it).  Receives are
 * groups: irecv(n, tags) posts group g (0, 1, 2, ... in posting order) of
 * n buffers.  NCCL progresses each tag (channel) of a comm on its own, so
 * sends of one tag arrive in order but tags interleave freely.  A send
 * with tag t fills the first buffer with tag t, in posting order (group,
 * then buffer index), that no earlier send has filled: the k-th send with
 * tag t fills the k-th posted buffer with tag t.  The sender computes it
 * from the CTSs; every message that fills a buffer also carries its k
 * (nth: PROTOCOL.md, Ranks and claim numbers), and the receiver, which
 * ranks its own buffers the same way, checks or applies it, so messages
 * may reach it in any order (a streamed one's chunks on the data streams
 * can pass headers on the control connection).
 *   - isend returns a request only when its buffer is in the head group
 *     (the oldest group with a buffer not yet filled, as the sender knows
 *     the groups from their CTSs), and *request = NULL ("retry later")
 *     until then.  A send whose tag is in no posted group also gets NULL:
 *     a later group may bring it.  When no group can ever come (the comm
 *     failed or the receiver closed it), isend hands out a request that
 *     fails in test() (rn_tcp_post_end).
 *   - Eager sends are the one exception, and change no outcome: a message
 *     of at most min(RAILNET_SOCKET_INLINE, 64 KiB) bytes may leave before
 *     its CTS has been read (saving the sender a read on the round trip),
 *     and completes once written, as NCCL's socket transport's sends do.
 *     It names no buffer; the receiver fills the buffer of its tag and
 *     rank on arrival, or holds it until that buffer is posted, and the
 *     sender applies the rule once the CTSs arrive, so both fill the same
 *     buffer.  At most RN_TCP_EAGER_WINDOW - 1 eager
 *     messages, and RN_TCP_EAGER_BYTES of payload, are unmatched at the
 *     sender, which bounds what the receiver holds.  A send of a tag with
 *     an unmatched eager message waits (NULL) for the CTS that matches it,
 *     so per-tag order holds for every size.
 *   - A send larger than its buffer fails that receive (ncclInvalidUsage,
 *     a WARN naming both sizes) whatever its size, and the sender too: a
 *     large send in its own test() when it matches, an eager one (done
 *     once written) by failing the sender's comm when the sender matches
 *     it, so the sender's next call reports it.
 *   - Groups complete independently once every buffer is filled.
 *
 * Locking: c->lock guards the control state (request pool, control queues
 * and input, the sender's CTS table, the receiver's matching).  On the
 * receiving side c->rx_lock guards what the data streams touch: the ring
 * of posted groups and each buffer's shape, coverage and fill state, so a
 * helper thread can validate and claim a chunk against a group that the
 * caller cannot retire at the same moment.  Order: lock, then rx_lock.
 *
 * Files, calls going one way (p2p -> comm -> control -> streams, and p2p
 * to each of them): transport.c the table and lifecycle (init/fini,
 * listen, connect, accept, close, registration), comm.c comms (create,
 * free, the list of open ones), control.c the control connection
 * (output queue, parsing and checking, matching), open.c the data
 * streams opened and closed, streams.c the data streams' traffic,
 * engine.c the helper threads that drive them, p2p.c requests and isend/irecv/test,
 * fail.c failing a comm, wire.c header checksums, iface.c interface
 * discovery. */
#ifndef RN_TCP_H
#define RN_TCP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include "railnet/list.h"
#include "railnet/log.h"
#include "railnet/rendezvous.h"
#include "railnet/transport.h"
#include "wire.h"

#define RN_TCP_MAX_IFS RN_MAX_NICS
#define RN_TCP_MAX_ADDRS ((int)(RN_HANDLE_PAYLOAD / sizeof(struct rn_wire_addr)))
#define RN_TCP_NREQS 256        /* NCCL_NET_MAX_REQUESTS x maxRecvs */
#define RN_TCP_STREAM_QUEUE 512 /* chunks queued per stream */
/* The smallest grid a message is cut on (RAILNET_SOCKET_CHUNK smaller
 * lowers it): NCCL's proxy moves 128 KiB steps, which go whole on one
 * stream; with 8 in flight they still spread over every stream.  Cut in
 * two they cost a stream write, a read and a chunk header more each, and
 * W1 on loopback took 13% longer (README, kvbench). */
#define RN_TCP_MIN_CHUNK 131072
#define RN_TCP_MAX_GRID (1u << 31) /* messages are at most INT_MAX bytes */
#define RN_TCP_MAX_STREAMS RN_RDV_MAX_STREAMS
#define RN_TCP_IN_BUF 65536  /* control input buffer */
#define RN_TCP_OUT_QUEUE 512 /* control messages queued for output */
#define RN_TCP_SCRATCH 65536 /* receive: bytes of a dropped chunk copy read at once */
#define RN_TCP_SAMPLE_MS 100 /* per-rail rate estimates are refreshed this often */
/* A closing send comm waits at most this long for its control bytes to be
 * acknowledged (rn_sock_close_gently), less when nothing moves. */
#define RN_TCP_CLOSE_WAIT_MS 2000
/* Clear-to-sends wait in the output queue while the sender does well
 * without them (its last eager message came without CREDIT, and no WANT
 * since) until this many are queued, anything else is queued behind them,
 * or a receive of the comm was tested incomplete RN_TCP_CTS_POLLS times
 * since the oldest of them was queued (PROTOCOL.md, CTS).  The sender
 * says CREDIT once half of its eager window or bytes is unmatched,
 * and sends WANT when a send cannot leave without a clear-to-send. */
#define RN_TCP_CTS_BATCH 8
/* While a comm's data streams open (open.c), messages up to this size go
 * inline on the control connection instead of waiting for them. */
#define RN_TCP_OPEN_INLINE (4u << 20)
#define RN_TCP_CTS_POLLS 1024

struct rn_tcp_comm;

enum rn_tcp_req_state { RN_TCP_REQ_FREE = 0, RN_TCP_REQ_ACTIVE };

/* How a receive buffer's message travels, once the first header says. */
enum rn_tcp_buf_mode { RN_TCP_BUF_UNKNOWN = 0, RN_TCP_BUF_INLINE, RN_TCP_BUF_STREAMED };

/* How many sends (sender) or posted buffers (receiver) each tag has had,
 * the matching rule's k (control.c).  Open addressing; NCCL uses a few
 * tags per comm (its peers' ranks).  Only local calls add tags. */
struct rn_tcp_tagslot {
  int32_t tag;
  uint32_t count;
  int used;
};
struct rn_tcp_tagcount {
  struct rn_tcp_tagslot *slot;
  uint32_t cap, n;
};
/* A filling message's claim number is within this many of the oldest one
 * not yet seen: every message numbered after that one fills a buffer of
 * the RN_TCP_RING groups the ring holds while that one's group is posted
 * (at most RN_TCP_RING x RN_MAX_RECVS = 512) or is a held eager message
 * (fewer than RN_TCP_EAGER_WINDOW). */
#define RN_TCP_CLAIM_WINDOW 1024

/* Owner: the comm's pool.  A receive's buffer state is under the comm's
 * rx_lock (see tcp.h's locking note); `unsent` is shared with the send
 * streams. */
struct rn_tcp_req {
  struct rn_req_base base;
  struct rn_tcp_comm *comm;
  enum rn_tcp_req_state state;
  int is_recv;
  ncclResult_t error;
  /* send */
  size_t size;
  int ctl_pending;       /* control message (and inline payload) not yet written */
  int awaits_ack;        /* streamed with ACK: it completes with the receiver's ACK */
  /* recv: group `seq` */
  uint64_t seq;
  int n;
  void *buf[RN_MAX_RECVS];
  size_t posted[RN_MAX_RECVS];
  int32_t tag[RN_MAX_RECVS];
  uint32_t ord[RN_MAX_RECVS];     /* its rank among the comm's posted buffers of its tag */
  uint32_t claimno[RN_MAX_RECVS]; /* the claim number of the message that filled it */
  uint32_t claimed; /* buffers a message was matched to (its header seen) */
  uint32_t filled;  /* buffers whose bytes have all landed */
  enum rn_tcp_buf_mode mode[RN_MAX_RECVS];
  uint64_t size_of[RN_MAX_RECVS]; /* the message's size, once a header says */
  uint32_t grid[RN_MAX_RECVS];    /* STREAMED: its chunk grid */
  uint64_t arrived[RN_MAX_RECVS]; /* STREAMED: bytes landed */
  uint32_t ack_wanted;            /* STREAMED buffers whose sender asked for an ACK */
  uint32_t acks_queued;           /* ... and whose ACK is queued */
  int writers;                    /* streams reading a chunk into it right now */
  uint32_t resent;                /* STREAMED buffers a re-sent chunk (attempt > 0) came for */
  /* send: announced before the data streams were open, its chunks queued
   * once they are (open.c), in announcement order */
  struct rn_tcp_req *later_next;
  const char *later_data;
  uint32_t later_grid, later_idx;
  uint64_t later_seq;
  /* The fields stream threads read without the comm's lock, after the
   * ones cleared when the request is handed out again (a plain clear of
   * them would race with those reads; rn_tcp_req_alloc stores them). */
  _Atomic uint32_t gen;  /* bumped at every allocation: queued chunks of an older send are stale */
  _Atomic size_t unsent; /* send: bytes the data streams still have to write */
  atomic_int acked;      /* send: the ACK arrived: no chunk of it is needed any more */
  /* send: streams writing a copy of one of its chunks right now (a re-sent
   * copy may still be written after the ACK of its first): it completes
   * only at 0, so its memory is never read once it is the caller's again.
   * Not cleared when the request is handed out again: a thread may count
   * it for a moment after it was, and find it stale. */
  atomic_int copying;
};

/* A chunk queued on a send stream. */
struct rn_tcp_queued_chunk {
  struct rn_tcp_req *req;
  uint32_t gen; /* req's generation when queued */
  int keep;     /* kept once written until its send is acknowledged */
  /* A rescue's (rn_tcp_rail_rescue): 1 + the rail it was taken from, which
   * its copy avoids while another rail is usable; 0 any rail.  On the
   * stuck rail's entries, `rescued` says a copy of it left already (1),
   * and that it finishes from the stream's bounce buffer (2). */
  int from_rail;
  int rescued;
  struct rn_tcp_chunk hdr;
  const char *data;
};

/* One rail of a comm: the data streams that leave from (send) or arrive
 * at (receive) one local address.  Counters are written by whichever
 * thread moves the rail's bytes and read by the caller for telemetry;
 * the estimate and its sampling state are the caller's (under c->lock). */
enum rn_tcp_rail_state { RN_TCP_RAIL_UP = 0, RN_TCP_RAIL_FAILED };
struct rn_tcp_rail {
  char name[32]; /* the local interface, or its address */
  union rn_sockaddr local;
  int nstreams;
  int stream[RN_TCP_MAX_STREAMS];
  atomic_int state;          /* enum rn_tcp_rail_state */
  _Atomic uint64_t bytes;    /* payload bytes written (send) or landed (receive) */
  _Atomic uint64_t chunks;   /* chunks written or landed */
  _Atomic uint64_t replays;  /* chunks this rail carried again after another rail failed */
  _Atomic uint64_t failures; /* times this rail was taken out */
  _Atomic uint64_t pending;  /* send: bytes queued on its streams, not yet written */
  _Atomic uint64_t read;     /* receive: bytes read off its streams, headers and dropped copies too */
  /* caller only */
  double rate;           /* estimated delivery rate, bytes/s (EWMA) */
  double ceiling;        /* the link's nominal rate, bytes/s */
  uint64_t acked_prev;   /* send: TCP bytes acknowledged at the last sample */
  uint64_t bytes_prev;   /* bytes at the last sample */
  uint64_t pending_prev; /* send: pending at the last sample */
  uint64_t read_prev;    /* receive: read at the last sample */
  uint64_t outq;         /* send: bytes in its sockets not yet acknowledged */
  int64_t progress_ms;   /* when its bytes last moved */
  char cause[256];       /* why it failed */
  int failing;           /* caller: found stalled, to be taken out */
  uint32_t streams;      /* its streams, bit i: stream i */
  /* Re-admission (caller only).  Receive: a listener of its own offered
   * to the sender.  Send: the offer, and the dial that probes it. */
  int rejoin_fd;
  struct rn_rdv *rejoin_rdv;
  int offered; /* send: an offer came; receive: the offer is queued (0: it waits for room) */
  union rn_sockaddr offer_addr;
  uint64_t offer_nonce;
  struct rn_rdv_dial *dial;
  int64_t dial_ms, next_probe_ms, backoff_ms;
  /* Send: a flapping rail is held out (rn_tcp_rail_hold). */
  int64_t up_ms;         /* when it was last re-admitted (0: never) */
  int64_t hold_until_ms; /* not dialed again before then */
  int flaps;             /* take-outs in a row, each within RAILNET_RAIL_HOLD_MS of its re-admission */
  int busy_prev; /* caller: busy at the last sample */
  /* Send, caller: it alone held the comm up and its chunks went again
   * over the others (rn_tcp_rail_rescue): due at the next failover, and
   * when it last happened (its estimate is not raised for a while). */
  int rescue_due;
  int64_t rescued_ms;
  int standby;   /* the device's standby NIC: carries data only while every other rail is down */
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
  int lazy; /* a small receive's clear-to-send: may wait for a batch (rn_tcp_ctl_flush) */
};

/* One data stream.  Owner: its engine thread (fd, progress), or the caller
 * when helpers are off; the queue is shared with the caller thread under
 * queue_lock. */
struct rn_tcp_stream {
  int fd;
  union rn_sockaddr local, peer; /* of its first socket, as connected (struct rn_tcp_addrs) */
  int rail;                      /* index into the comm's rails */
  atomic_int dead;               /* EOF or error seen: no more I/O */
  pthread_mutex_t queue_lock;
  /* Ring of RN_TCP_STREAM_QUEUE: keep_head .. queue_head - 1 are written
   * but their sends not yet acknowledged (sent again if the rail fails),
   * queue_head .. queue_tail - 1 wait to be written. */
  int keep_head, queue_head, queue_tail;
  struct rn_tcp_queued_chunk *queue; /* allocated at the comm's first chunk (streams.c) */
  /* progress of the chunk at the head (send) or being read (recv) */
  size_t off;
  /* send, under queue_lock: the send whose memory the head chunk (a kept
   * one, being written) reads, counted in its `copying`; and whether a
   * thread is writing it right now (then that thread lets go of it) */
  struct rn_tcp_req *hold;
  int writing;
  /* send, under queue_lock: where a rescued head chunk's payload was
   * copied (rn_tcp_rail_rescue), so that the rest of its write no longer
   * reads its send's memory; freed with the comm */
  char *bounce;
  size_t bounce_cap;
  int bounce_due; /* a rescue found a thread writing the head chunk: it bounces it as it leaves */
  struct rn_tcp_chunk rx_hdr;
  struct rn_tcp_req *rx_req;
  char *rx_dst;
  int rx_discard;    /* a copy of a chunk that already landed: read and dropped */
  /* Receive, under the comm's rx_lock: the chunk this stream writes into
   * its buffer (rx_busy), and rx_drop once another copy of it landed
   * (then its driver reads the rest into scratch: rn_tcp_stream_drop). */
  /* receive: where this stream reads copies of chunks that already
   * landed (its own: streams on helper threads drop copies at once) */
  char *scratch;
  int rx_busy;
  uint64_t rx_busy_seq;
  uint32_t rx_busy_pos;
  atomic_int rx_drop;
  int lost;          /* ended by an error or in the middle of a chunk (not a close) */
  atomic_int retire; /* receive: the sender took it out (DOWN): its driver ends it */
  char cause[96];    /* why it ended */
  /* the progress engine's (engine.c), under its thread's lock */
  struct rn_tcp_comm *comm;
  int eng_thread; /* -1: the caller drives it */
  int eng_epoch;  /* the pool it was registered with (a fork starts another) */
  int eng_slot;   /* its slot in that thread's epoll registrations, or -1 */
  int on_ready;
  struct rn_tcp_stream *ready_next;
};

/* An eager message the sender has not matched to a buffer yet. */
struct rn_tcp_eager {
  int32_t tag;
  uint64_t size;
};

/* An eager message that arrived before a buffer with its tag was posted. */
struct rn_tcp_unexpected {
  int32_t tag;
  uint32_t nth; /* the send of its tag it is: it fills the buffer of that rank */
  int ready;  /* payload complete */
  int credit; /* it came with CREDIT: its group's clear-to-send may not wait */
  uint64_t size;
  char *data; /* cap bytes, kept for the slot's next message */
  size_t cap;
};

/* The sender's copy of one posted group, from its CTS. */
struct rn_tcp_group {
  uint32_t n;
  uint32_t claimed; /* buffers a send has been matched to */
  uint64_t sizes[RN_MAX_RECVS];
  int32_t tags[RN_MAX_RECVS];
  uint64_t seq;                          /* the group this slot holds */
  struct rn_tcp_req *sreq[RN_MAX_RECVS]; /* streamed sends awaiting their ACK */
};

/* The control connection's way to another rail (move.c).  Caller only,
 * under c->lock.  On a multi-rail comm each side keeps the control bytes
 * it wrote until TCP saw them acknowledged, so that when the control
 * connection is lost the sender can dial a new one over a surviving rail
 * (to a listener the receiver offered for it) and both sides continue the
 * control byte stream where the other stopped reading. */
enum rn_tcp_move_state {
  RN_TCP_CTL_UP = 0, /* control bytes go over ctrl_fd */
  RN_TCP_CTL_LOST,   /* no connection to write on: sender dialing, receiver awaiting it */
  RN_TCP_CTL_SWITCH, /* a new one in ctrl_fd; the old (old_fd) read until the peer's RESUME */
};
struct rn_tcp_ctl_way { /* sender: a listener the receiver offered for the control connection */
  uint32_t streams;     /* the receiver's rail it listens on, as its data streams */
  union rn_sockaddr addr;
  uint64_t nonce;
};
struct rn_tcp_move {
  int enabled; /* this comm's control connection can move: its bytes are kept */
  int peer_multi; /* receiver: its streams come from several sender addresses (rails) */
  int state;   /* enum rn_tcp_move_state */
  uint64_t tx; /* control bytes written since the comm began */
  uint64_t rx; /* control bytes read (delivered to the parser) */
  char *log;   /* bytes [log_base, tx) */
  size_t log_cap;
  uint64_t log_base;
  uint64_t replay;          /* the next kept byte to write again on a new connection */
  uint64_t fd_base, fd_pre; /* ctrl_fd: stream offset of its first kept byte; bytes before it */
  uint64_t skip;            /* bytes the peer writes again that this side already read */
  int old_fd;               /* SWITCH: the lost connection, still read */
  int old_done;             /* it ended or was drained */
  struct rn_tcp_resume in_resume;
  size_t resume_got;
  uint32_t epoch;  /* moves so far */
  int64_t lost_ms; /* when the connection was lost */
  char cause[160]; /* why */
  int ctrl_rail;   /* the rail (index) the control connection runs on, -1 unknown */
  int64_t poll_ms; /* receiver: its listeners were last polled */
  /* receiver: one listener per rail for the control connection */
  int lfd[RN_MAX_RAILS];
  struct rn_rdv *rdv[RN_MAX_RAILS];
  /* sender: the listeners offered, and the dial in progress */
  int nways;
  struct rn_tcp_ctl_way way[RN_MAX_RAILS];
  struct rn_rdv_dial *dial;
  int dial_way, dial_rail;
  int64_t dial_ms, next_dial_ms;
};

/* The data streams' lifecycle (open.c).  Caller only, under c->lock.  A
 * comm starts with its control connection alone (RAILNET_SOCKET_LAZY);
 * its first message too large to go inline opens the streams: the sender
 * asks (OPEN), the receiver listens on its rails with a fresh nonce and
 * says where (STREAMS), the sender dials them as at connect.  After
 * RAILNET_SOCKET_IDLE_MS without a streamed message the sender closes
 * them (DOWN with IDLE) and the receiver reads each to its end. */
/* How a connection's data streams go (rn_tcp_plan_streams): stream i
 * from locals[i % nlocals] to addrs[i % naddrs]; with a standby, the last
 * of each are the two standbys, a rail of their own. */
struct rn_tcp_plan {
  union rn_sockaddr addrs[RN_MAX_RAILS], locals[RN_MAX_RAILS];
  int naddrs, nlocals, nstreams, standby;
  int standby_ok; /* the two devices had as many rails: standbys may pair (now or when reopened) */
};

enum rn_tcp_lazy_state {
  RN_TCP_STREAMS_NONE = 0, /* no data stream: small messages only so far */
  RN_TCP_STREAMS_ASKED,    /* send: OPEN sent, awaiting STREAMS; recv: listening */
  RN_TCP_STREAMS_DIALING,  /* send: dialing the receiver's listeners */
  RN_TCP_STREAMS_UP,       /* open */
  RN_TCP_STREAMS_CLOSING,  /* recv: closed idle by the sender, read to their end */
};
struct rn_tcp_lazy {
  int state;             /* enum rn_tcp_lazy_state */
  int64_t since_ms;      /* the state began */
  int open_said;         /* send: the INFO on an OPEN its receiver's host took and its process did not answer */
  int64_t used_ms;       /* send: a streamed message was last queued */
  int reopen;            /* recv: an OPEN came while CLOSING: answered once drained */
  uint32_t early_idle;   /* recv: the streams an idle DOWN named before they were admitted */
  uint32_t early_out;    /* recv: ... the streams another DOWN took out: applied once admitted */
  unsigned opened;       /* times the streams were opened */
  int expect;            /* send: the streams it will have, for chunk grids before they open */
  uint64_t inline_bytes; /* messages above SOCKET_INLINE that went inline while they opened */
  uint64_t ctl_mark;     /* one rail: control bytes acknowledged plus read */
  int64_t ctl_ms;        /* ... when that last moved, or nothing was in flight */
  int ctl_unacked;       /* control bytes written and not yet acknowledged, at the last sample */
  uint64_t probe_rx;     /* send: control bytes read when probe_ms was last set */
  int64_t probe_ms;      /* send: since when it waits on the receiver, nothing arriving (WANT probes) */
  struct rn_tcp_req *later, *later_tail; /* send: sends whose chunks wait for the streams */
  int standby_set;                       /* the device's standby NIC, whose rail is the standby */
  union rn_sockaddr standby_addr;
  union {
    struct {                                  /* send */
      union rn_sockaddr locals[RN_MAX_RAILS]; /* the device's rails, its standby last */
      int nlocals, local_standby; /* nlocals: its rails; the standby, if any, at [nlocals] */
      struct rn_tcp_plan plan; /* from STREAMS */
      uint64_t nonce;
      struct rn_rdv_dial *dial;
      int64_t retry_ms, dial_ms;
      uint32_t absent; /* rails left out (rn_tcp_plan_leave_out) */
      int open_inline; /* messages sent inline since the streams were asked for */
    } tx;
    struct {                               /* recv */
      union rn_sockaddr lis[RN_MAX_RAILS]; /* where the listen comm listened, its standby last */
      int nlis, lis_standby;
      int lfd[RN_MAX_RAILS], nlfd;            /* listening for the streams */
      union rn_sockaddr lbound[RN_MAX_RAILS]; /* ... on these addresses */
      int lcomms[RN_MAX_RAILS];               /* ... whose ports have served (pool.c) */
      struct rn_rdv *rdv;
    } rx;
  } u;
};

/* A send or receive comm.  Owner: NCCL between connect/accept and close. */
/* Where a comm's sockets are: read once when its connection is made and
 * carried with it when it is kept for reuse (pool.c), so neither the
 * comm nor the pool asks the kernel again. */
struct rn_tcp_addrs {
  union rn_sockaddr ctrl_local, ctrl_peer;
  union rn_sockaddr local[RN_TCP_MAX_STREAMS], peer[RN_TCP_MAX_STREAMS];
};

struct rn_tcp_comm {
  struct rn_comm_base base;
  struct rn_list open;     /* in comm.c's list of open comms, under its lock */
  struct rn_list deferred; /* in comm.c's list of comms holding a deferred clear-to-send */
  struct rn_list streamy;  /* in comm.c's list of comms whose data streams opened */
  struct rn_list waiting;  /* in comm.c's list of comms with requests outstanding */
  /* On those two lists (c->lock): a node's own links change as its
   * neighbours come and go, under the list's lock alone, so they cannot
   * tell a thread holding only c->lock whether it is on the list. */
  int on_streamy, on_waiting;
  int nactive;             /* requests outstanding (c->lock) */
  int touched;             /* called since the last sweep of waiting comms (c->lock) */
  pthread_mutex_t lock;
  int is_recv;
  int ctrl_fd;
  int nstreams, nthreads;
  char peer[64];                           /* for messages */
  struct rn_tcp_stream *stream;            /* [nstreams] */
  union rn_sockaddr ctrl_local, ctrl_peer; /* as connected (struct rn_tcp_addrs) */
  int nrails;
  int standby;        /* the standby's rail (index), -1 none */
  int on_standby;     /* send: every other rail is down, the standby carries the data */
  uint64_t id;        /* names the comm in the telemetry */
  int64_t created_ms; /* telemetry: when it was created */
  int64_t sample_ms;  /* the rails' estimates were last refreshed */
  int64_t stats_ms;   /* the telemetry line was last written */
  atomic_int stop;
  _Atomic int error;      /* first error (ncclResult_t): every later test returns it */
  _Atomic int shut_due;   /* its sockets to shut down, by a thread holding lock (fail.c) */
  atomic_int peer_closed; /* orderly EOF (or the peer's BYE) seen on the control connection */
  /* Receive comm, c->lock: writing the control connection failed (the
   * sender closed): nothing more is written, reading goes on to its end. */
  int ctl_wlost;
  /* Connection reuse (pool.c).  peer_bye: the peer's BYE was read, its
   * fields in bye_msg / bye_received.  pool_token: send comm: the
   * receiving process's token from the handle (0: none, never pooled);
   * tc: the traffic class set on its sockets (-1 none). */
  int peer_bye;
  uint32_t bye_msg, bye_received;
  uint32_t pool_token;
  int tc;
  int urgent;     /* a latency-critical send comm, counted in comm.c */
  int drive_next; /* the stream rn_tcp_drive_streams starts at when it yields */
  /* Without helper threads the caller polls the data streams only while
   * they have work: chunks queued (send), or streamed messages announced
   * or claimed and not yet filled, and messages known to be missing by
   * their claim numbers (recv). */
  atomic_int stream_work;
  /* recv: posted buffers (of at least one byte) no message has claimed;
   * with the data streams open a chunk may claim any of them, so the
   * caller polls the streams while there are some */
  atomic_int unclaimed;
  atomic_int chunk_credit; /* recv: a chunk claimed a buffer (its message did not go eagerly) */
  size_t inline_max, chunk;
  size_t eager_max;         /* largest eager send: min(inline_max, RN_TCP_EAGER_WIRE_MAX) */
  uint32_t msg_out, msg_in; /* control message numbers, each direction */
  /* control input: headers are parsed from `in`; a payload is read
   * straight into its destination (rx_*) */
  char *in;
  size_t in_len;
  char *rx_dst;
  size_t rx_left;
  struct rn_tcp_req *rx_req; /* inline payload for buffer rx_idx of this group */
  uint32_t rx_idx;
  struct rn_tcp_unexpected *rx_unexpected; /* payload being read into the held queue */
  atomic_int cts_deferred; /* a clear-to-send waits in out (rn_tcp_comm_flush_deferred) */
  /* recv side: groups recv_seq - RN_TCP_RING .. recv_seq - 1 may be in the
   * ring; match_head is the oldest with a buffer no message has claimed */
  pthread_mutex_t rx_lock;
  uint64_t recv_seq, match_head;
  /* Groups below this got a re-sent chunk (under rx_lock): a first copy
   * that trails its re-sent one may still come for them after they
   * completed (rn_tcp_chunk_begin). */
  uint64_t resent_hi;
  /* Streams told to drop the copy they are writing (rx_drop set), under
   * rx_lock; read without it by the caller, which then drives them. */
  atomic_int rx_drops;
  /* Filling messages seen, by claim number (under rx_lock): every one
   * below claim_low, and claim_ahead of those from there up to
   * claim_hi - 1 (bit n % RN_TCP_CLAIM_WINDOW of claim_seen).  The
   * numbers in between that are not seen are messages known to be on
   * their way: they count in stream_work. */
  uint64_t claim_low, claim_hi;
  uint32_t claim_ahead;
  uint64_t claim_seen[RN_TCP_CLAIM_WINDOW / 64];
  struct rn_tcp_tagcount posted_tags; /* recv: buffers posted per tag (the caller's) */
  struct rn_tcp_tagcount sent_tags;   /* send: sends per tag */
  uint32_t claim_out;                 /* send: filling messages sent */
  int64_t bye_ms;                     /* recv: when the peer's BYE arrived */
  /* What comm creation writes ends here, within the first page; an idle
   * comm's pages of the fields after it are never touched (the comm is
   * mapped zero-filled, see comm.c). */
  struct rn_tcp_lazy lazy; /* the data streams opened and closed (open.c) */
  struct rn_tcp_move move; /* the control connection's way to another rail */
  /* [nrails], at most RN_MAX_RAILS, from the heap (rails.c); a standby's
   * among them (a handle has room for one only beside at most 4 rails) */
  struct rn_tcp_rail *rail;
  struct rn_tcp_req *ring[RN_TCP_RING];
  /* [RN_TCP_RING]: chunks landed; with inflight, allocated at
   * the first streamed message (streams.c) */
  uint64_t (*cover)[RN_MAX_RECVS][RN_TCP_CHUNK_WORDS];
  struct rn_tcp_unexpected *unexpected; /* RN_TCP_EAGER_WINDOW entries, allocated on first use */
  int held[RN_TCP_EAGER_WINDOW];        /* indices into unexpected, in arrival order */
  int nheld;
  uint64_t held_bytes; /* their payload bytes: at most RN_TCP_EAGER_BYTES */
  uint64_t held_cap;   /* bytes of the slots' buffers */
  char *discard;       /* payload of an eager message too big for its buffer */
  uint64_t (*inflight)[RN_MAX_RECVS][RN_TCP_CHUNK_WORDS]; /* [RN_TCP_RING]: chunks being read */
  atomic_int ack_due; /* a streamed buffer filled: ACKs to queue */
  int64_t landed_ms;  /* receive: when bytes last landed or none were awaited */
  int idle_said;      /* send: the INFO on a live receiver whose process reads nothing was given */
  /* send: chunks of failed rails waiting for room on the others */
  struct rn_tcp_queued_chunk *backlog;
  int nbacklog;
  int ack;               /* send: streamed sends ask for an ACK (RAILNET_RAIL_ACK) */
  uint64_t acks_asked;   /* send: streamed sends that asked for an ACK */
  uint64_t acks_in;      /* send: ACKs read */
  uint64_t acks_mark;    /* send: acks_in + acks_asked when owed_ms was last set */
  int64_t owed_ms;       /* send: since when an ACK is owed with nothing in flight */
  uint32_t down_pending; /* send: streams taken out, DOWN not yet queued */
  /* send: one rail alone has held the comm up since held_ms (0: none
   * does), held_rail; rescues so far (RAILNET_STATS), the chunks they
   * sent again or moved */
  int64_t held_ms;
  int held_rail;
  uint64_t rescues, rescued_chunks;
  /* send side: CTSs of groups send_head .. cts_next - 1, by seq % RN_TCP_RING;
   * send_head is the oldest with a buffer no send has claimed */
  uint64_t send_head, cts_next;
  int neager;
  /* eager[0 .. eager_tried - 1] found no buffer among the groups up to
   * cts_tried: until a CTS adds a group, they still find none */
  int eager_tried;
  uint64_t cts_tried;
  uint64_t eager_bytes; /* their payload bytes: at most RN_TCP_EAGER_BYTES */
  /* control output: messages in order, payloads referenced, not copied */
  int out_head, out_tail;
  int out_lazy;   /* lazy entries in out (every one of them when out holds nothing else) */
  int lazy_polls; /* tests of an incomplete receive since the oldest lazy entry was queued */
  int peer_low;   /* receive: clear-to-sends go now (CREDIT or WANT seen; at first) */
  int peer_first; /* receive: no DATA or WANT read yet (peer_low is the start's) */
  int want_sent;  /* send: a WANT went out and no clear-to-send came since */
  /* The tables last: a comm touches the entries it uses, an idle one none
   * of their pages.  The control input first, whose start shares the
   * fields' page (RN_TCP_COMM_HOT): small messages land there; then the
   * requests and the control output, whose first pages a recycled mapping
   * keeps (comm.c). */
  _Alignas(64) char in_space[RN_TCP_IN_BUF]; /* `in` points here */
  struct rn_tcp_req reqs[RN_TCP_NREQS];
  struct rn_tcp_ctl_out out[RN_TCP_OUT_QUEUE];
  /* A send comm's first eager message and clear-to-send write the start
   * of these two: next to each other, that is one page. */
  struct rn_tcp_eager eager[RN_TCP_EAGER_WINDOW]; /* unmatched, in send order */
  struct rn_tcp_group group[RN_TCP_RING];
  char discard_space[RN_TCP_EAGER_WIRE_MAX]; /* `discard` points here */
};

/* Every data stream of c as a DOWN's streams field names them (bit i:
 * stream i). */
static inline uint32_t rn_tcp_streams_all(const struct rn_tcp_comm *c) {
  return c->nstreams >= 32 ? UINT32_MAX : (1u << c->nstreams) - 1;
}

/* iface.c */
/* One usable interface; rails come back from the core as rn_nic pointers
 * whose table_index indexes this table. */
struct rn_tcp_if {
  struct rn_nic nic;
  union rn_sockaddr addr;
};

/* Discover interfaces per RAILNET_SOCKET_IFNAME / NCCL_SOCKET_IFNAME; why
 * says which rule chose them (or that none matched). */
int rn_tcp_if_discover(struct rn_tcp_if *ifs, int max, char *why, size_t whylen);
/* NCCL's interface-list syntax: "eth,ib" prefixes, "^lo" excludes,
 * "=eth0" exact.  Returns 1 when name is selected. */
int rn_tcp_if_match(const char *spec, const char *name);

/* open.c: the data streams opened and closed (struct rn_tcp_lazy) */
/* The streams of a connection to a peer listening on its n rails (peer[n]
 * its standby when peer_standby) from a device of ndev rails (dev[ndev]
 * its standby when dev_standby): when n != ndev, over min(n, ndev) pairs
 * of a rail of each side (by the kernel's routes, else in order; one INFO
 * naming `name`, unless NULL); RAILNET_SOCKET_NSTREAMS, rounded up to a
 * multiple of the rails; the standbys as one more rail when both sides
 * have one and as many rails (else one INFO naming `name`, unless
 * NULL). */
void rn_tcp_plan_streams(const union rn_sockaddr *peer, int n, int peer_standby,
                         const union rn_sockaddr *dev, int ndev, int dev_standby, const char *name,
                         struct rn_tcp_plan *out);
void rn_tcp_plan_keep(const struct rn_tcp_plan *plan, const union rn_sockaddr *standby,
                      union rn_sockaddr *locals, int *nlocals, int *local_standby);
void rn_tcp_plan_drop_standby(struct rn_tcp_plan *p);
/* Dialing a plan (connect, and the streams' opening on a kept
 * connection): without the rails in *absent (bits: plan indexes), whose
 * failures, when the plan may go without them, are the caller's to say
 * (rn_rdv_dial_set_quiet). */
ncclResult_t rn_tcp_plan_dial(const struct rn_tcp_plan *p, uint32_t absent, uint64_t nonce,
                              struct rn_rdv_dial **d);
/* After rn_rdv_dial_poll(*d) returned res (ready: the connection is
 * there), started at dial_ms: a rail whose connect failed, or that is
 * still connecting 2 x RAILNET_RAIL_STALL_MS in while another rail's
 * sockets all connected, is left out (one WARN naming it; the standby
 * goes with an INFO, the plan without it).  1: *d is gone, dial again
 * (*absent grew); 0: nothing left out, res stands; -1: a connect failed
 * and no rail but a standby would be left (WARNed; *d is the caller's). */
int rn_tcp_plan_leave_out(const char *peer, struct rn_tcp_plan *p, uint32_t *absent,
                          struct rn_rdv_dial **d, int64_t dial_ms, ncclResult_t res, int ready);
/* Send, caller: a message of size bytes needs the streams: OPEN, once. */
ncclResult_t rn_tcp_lazy_want(struct rn_tcp_comm *c, size_t size);
/* Send, caller: streamed send r was announced before the streams are
 * open; its chunks are queued once they are. */
void rn_tcp_lazy_defer(struct rn_tcp_comm *c, struct rn_tcp_req *r, const char *data, uint32_t grid,
                       uint64_t seq, uint32_t idx);
/* The messages (control.c parses them). */
ncclResult_t rn_tcp_lazy_on_open(struct rn_tcp_comm *c, const struct rn_tcp_open *m);
ncclResult_t rn_tcp_lazy_on_streams(struct rn_tcp_comm *c, const struct rn_tcp_streams *m);
ncclResult_t rn_tcp_lazy_on_idle(struct rn_tcp_comm *c, const struct rn_tcp_down *d);
/* Receive: no STREAMED message may come now (no OPEN since the streams
 * were none or closed idle). */
int rn_tcp_lazy_streamless(const struct rn_tcp_comm *c);
/* Receive: a DOWN (its header and sequence checked) read while the
 * streams it names are still being admitted: counted, and kept until they
 * are. */
ncclResult_t rn_tcp_lazy_on_early_down(struct rn_tcp_comm *c, const struct rn_tcp_down *d);
/* Receive, c->lock held: the sender took out the data streams in mask
 * (all open; a failed rail's): read each to its end, then let it go. */
void rn_tcp_streams_taken_out(struct rn_tcp_comm *c, uint32_t mask);
/* Send, caller, every RN_TCP_SAMPLE_MS (rn_tcp_rails_tick) or from the
 * sweep: close the streams once idle for RAILNET_SOCKET_IDLE_MS. */
ncclResult_t rn_tcp_lazy_idle(struct rn_tcp_comm *c, int64_t now);
/* Caller, every progress: dial, admit, queue what waited for the streams,
 * let closed ones go. */
ncclResult_t rn_tcp_lazy_progress(struct rn_tcp_comm *c);
/* The idle sweep, c->lock held: what the comm's own next call would do
 * for its streams (a sender's idle close; a receiver's progress, which
 * reads an idle close and lets the streams go).  0 once the comm has no
 * data stream. */
int rn_tcp_lazy_sweep(struct rn_tcp_comm *c, int64_t now);
/* At free: a listener or dial still open. */
void rn_tcp_lazy_free(struct rn_tcp_comm *c);

/* rails.c */
/* At creation: the comm's id and clocks. */
void rn_tcp_rails_start(struct rn_tcp_comm *c);
/* The data streams attached: group them into rails by their local
 * address, name them, seed each estimate with the link speed, and mark
 * the standby's (c->lazy.standby_addr).  -1: out of memory. */
int rn_tcp_rails_init(struct rn_tcp_comm *c);
/* Send: TCP's acknowledged-byte counts the rates are measured from, read
 * at the first streamed message (c->lock held). */
void rn_tcp_rails_baseline(struct rn_tcp_comm *c);
/* The rail that leaves from (send) or arrives at (receive) the device's
 * standby NIC at addr is the standby: it carries data only while every
 * other rail is down.  One INFO. */
void rn_tcp_rails_set_standby(struct rn_tcp_comm *c, const union rn_sockaddr *addr);
/* Send: rail i may be given chunks now (up; a standby only while no
 * other rail is up). */
int rn_tcp_rail_usable(const struct rn_tcp_comm *c, int i);
int rn_tcp_ctl_movable(const struct rn_tcp_comm *c);
int rn_tcp_ctl_sender_moves(const struct rn_tcp_comm *c);
/* Caller, c->lock held: refresh the estimates every RN_TCP_SAMPLE_MS and
 * write the telemetry line every RAILNET_STATS_MS. */
void rn_tcp_rails_tick(struct rn_tcp_comm *c);
/* At close: the last telemetry line, and one INFO line with the split. */
void rn_tcp_rails_close(struct rn_tcp_comm *c);
/* The stream for a chunk of len bytes: on the live rail that would
 * deliver it first at its estimated rate, given load[] bytes in flight per
 * rail, the stream of that rail with the fewest used[] queue entries; -1
 * when no stream has room.  Never rail `avoid` (-1: none). */
int rn_tcp_rails_pick(struct rn_tcp_comm *c, size_t len, const uint64_t *load, const int *used,
                      int avoid);
/* What rn_tcp_rails_pick needs: the used[] entries of each stream queue
 * (entries kept for a re-send included) and the load[] bytes in flight per
 * rail (the kernel's unacknowledged bytes too, when there are several). */
void rn_tcp_rails_load(struct rn_tcp_comm *c, int *used, uint64_t *load);
/* Bytes in the rail's sockets that TCP has not had acknowledged. */
uint64_t rn_tcp_rail_outq(const struct rn_tcp_comm *c, const struct rn_tcp_rail *r);
/* What TCP says of fd's sending side: *acked, the bytes the peer
 * acknowledged (TCP_INFO), and *outq, the bytes still queued (SIOCOUTQ);
 * either may be NULL to skip its system call.  -1 when TCP_INFO failed
 * (*acked is then 0). */
int rn_tcp_fd_tx(int fd, uint64_t *acked, uint64_t *outq);

/* Sender, caller, c->lock held: take out rails whose streams failed or
 * stalled (their unacknowledged chunks go again over the others) and
 * queue what waits for room; fails the comm once no rail is left. */
ncclResult_t rn_tcp_rails_failover(struct rn_tcp_comm *c);
/* Receiver, any thread: stream s ended (lost: by an error or mid-chunk). */
void rn_tcp_rails_stream_ended(struct rn_tcp_comm *c, struct rn_tcp_stream *s);

/* Receiver, caller: the sender took these streams out; offer it a way
 * back for their rails. */
void rn_tcp_rails_offer(struct rn_tcp_comm *c, uint32_t streams);
/* Sender, caller: the receiver offers a way back for these streams. */
ncclResult_t rn_tcp_rails_on_offer(struct rn_tcp_comm *c, const struct rn_tcp_offer *o);
/* Rails a connect left out start taken out (rails.c); a malformed
 * connection (a rail with some of its streams) is ncclRemoteError. */
ncclResult_t rn_tcp_rails_left_out(struct rn_tcp_comm *c, const char *why);
/* Receiver, caller: admit a rail that connected again. */
void rn_tcp_rails_readmit(struct rn_tcp_comm *c);
/* At free: listeners and dials still open. */
void rn_tcp_rails_free(struct rn_tcp_comm *c);

/* iface.c (continued) */
/* 1 when an up interface holds addr and has its carrier. */
int rn_tcp_if_running(const union rn_sockaddr *addr);
/* The name of the up interface that holds addr, else addr as text. */
void rn_tcp_if_name_of(const union rn_sockaddr *addr, char *name, size_t len);

/* pool.c: connections of closed comms kept for the next comm between the
 * same two processes (PROTOCOL.md, Reuse).  Bounded by
 * RAILNET_SOCKET_POOL entries and RAILNET_SOCKET_POOL_IDLE_MS; every call
 * is thread-safe and never blocks. */
/* Where the listener's token sits in the handle's payload, after the
 * addresses (a handle from a build without one carries 0 there). */
#define RN_TCP_TOKEN_OFF (RN_TCP_MAX_ADDRS * sizeof(struct rn_wire_addr))
/* This process's token: random, nonzero, new in a forked child; 0 when
 * pooling is off. */
uint32_t rn_tcp_pool_token(void);
/* At free, the comm detached from the engine: when the comm is quiescent
 * (nothing in flight either way, never failed over), send BYE and keep its
 * control connection (c->ctrl_fd becomes -1; the caller closes the data
 * streams); else 0 and the caller closes them all.  One INFO either way
 * for a comm that could pool. */
int rn_tcp_pool_put(struct rn_tcp_comm *c);
/* Connect: a kept connection to the process of `token` whose control
 * connection went from locals[0] to addrs[0], with traffic class tc, whose
 * peer closed quiescent too.  1 with *conn filled (no data stream), its
 * reuse hello for `nonce` sent; the caller then awaits the accept byte
 * and, if the connection fails first, closes it and dials. */
int rn_tcp_pool_take_dial(uint32_t token, const union rn_sockaddr *addrs, int naddrs,
                          const union rn_sockaddr *locals, int nlocals, int tc, uint64_t nonce,
                          struct rn_rdv_conn *conn, struct rn_tcp_addrs *addr);
/* Accept: a kept connection whose peer asked for it with `nonce` and whose
 * sockets arrive at the listener's addresses (lis, nlis).  1 with *conn
 * and *addr. */
int rn_tcp_pool_take_accept(uint64_t nonce, const union rn_sockaddr *lis, int nlis,
                            struct rn_rdv_conn *conn, struct rn_tcp_addrs *addr);
/* Listening sockets of closed listen comms (and of data streams' opening)
 * are kept too, up to RN_TCP_POOL_LISTENERS (at most RAILNET_SOCKET_POOL)
 * for RAILNET_SOCKET_POOL_IDLE_MS, so the next listen on that address
 * needs no socket, bind or listen.  put: 1 when kept (its backlog emptied:
 * what waited there was for a closed listener and is reset, as close(2)
 * would), else the caller closes it.  take: 1 with *fd listening on
 * addr's address (on addr's port, or any when it is 0), *bound its
 * address and *comms how many comms its port has served.
 *
 * A port serves RN_TCP_POOL_PORT_COMMS comms at most (put refuses a
 * socket that has served as many): a listen comm that takes a kept socket
 * listens on the port of the comms before it, and so do their data
 * streams, so comms set up one after another, as NCCL sets them up, would
 * otherwise all come to one port, and a sender with many comms, whose
 * ephemeral ports each serve one connection per destination (and a
 * closed one for a minute more, in TIME_WAIT), would run out of ports
 * toward it: with 4 data streams, at some 5,000 comms of the default
 * range. */
#define RN_TCP_POOL_LISTENERS 4
#define RN_TCP_POOL_PORT_COMMS 8
int rn_tcp_pool_put_listener(int fd, const union rn_sockaddr *bound, int comms);
int rn_tcp_pool_take_listener(const union rn_sockaddr *addr, int *fd, union rn_sockaddr *bound,
                              int *comms);
/* A listening socket on addr's address (any port) for one more comm: a
 * kept one, else a new one (a WARN when that fails); *comms counts this
 * comm too. */
ncclResult_t rn_tcp_pool_listen(const union rn_sockaddr *addr, int *fd, union rn_sockaddr *bound,
                                int *comms);
/* Now and then (comm.c's sweep): read and expire the kept connections,
 * expire the kept listeners and reset what reached them; skipped when
 * another thread holds the pool. */
void rn_tcp_pool_sweep(void);
/* At fini: close every kept connection and listener; none is kept until
 * the next init. */
void rn_tcp_pool_fini(void);
void rn_tcp_pool_start(void);

/* comm.c */
void rn_tcp_addrs_read(int ctrl_fd, const int *data_fd, int nstreams, struct rn_tcp_addrs *a);
/* Build a comm around an established connection, with its data streams
 * when it has them (conn->nstreams > 0), else they open later (open.c).
 * kept: the addresses of one a closed comm left (pool.c), whose sockets
 * are tuned already; NULL for a new connection. */
ncclResult_t rn_tcp_comm_create(const struct rn_rdv_conn *conn, int is_recv,
                                const struct rn_tcp_addrs *kept, const union rn_sockaddr *rails,
                                struct rn_tcp_comm **out);
/* The comm's data streams, conn's (its control fd unused): tuned, grouped
 * into rails, given to the progress engine; then the streams are UP.  On
 * failure (WARNed) the comm has none again and the sockets are closed.
 * rails: this side's address of each of conn->nrails rails, for the
 * streams of rails the connect left out (data_fd -1): they start dead,
 * on a rail of their own address (rn_tcp_rails_left_out); NULL when no
 * stream may be missing. */
ncclResult_t rn_tcp_comm_attach(struct rn_tcp_comm *c, const struct rn_rdv_conn *conn,
                                const struct rn_tcp_addrs *kept, const union rn_sockaddr *rails);
/* The comm's data streams go: out of the engine, closed (after their
 * last bytes), their rails freed. */
void rn_tcp_comm_detach(struct rn_tcp_comm *c);
void rn_tcp_comm_free(struct rn_tcp_comm *c);
/* Give every socket of the comm traffic class tc (0..255): the IP TOS
 * byte (IPV6_TCLASS on IPv6) and SO_PRIORITY (RAILNET_SOCKET_PRIORITY, or
 * tc >> 5); one INFO.  streams_only: the data streams just opened, no
 * INFO.  A socket that refuses WARNs and fails. */
ncclResult_t rn_tcp_comm_set_class(struct rn_tcp_comm *c, int tc, int streams_only);
/* A stream that joined again (a rail re-admitted) gets the send comm's
 * traffic class, if it has one (a WARN when the socket refuses it). */
void rn_tcp_stream_set_class(struct rn_tcp_comm *c, struct rn_tcp_stream *s);
/* A latency-critical send comm (RAILNET_TRAFFIC_CLASS_URGENT) of this
 * process was called lately and c is not one; such a comm's calls say so. */
int rn_tcp_yields(const struct rn_tcp_comm *c);
void rn_tcp_urgent_called(void);
/* At fini: frees every comm still open, and the mappings kept for new
 * ones; returns how many comms. */
int rn_tcp_comm_free_all(void);
/* Its data streams opened: the idle sweep visits it. */
void rn_tcp_comm_streamy(struct rn_tcp_comm *c);
/* Any call, without its comm's lock: now and then, close idle streams of
 * every comm (rn_tcp_lazy_sweep). */
void rn_tcp_comm_sweep_idle(void);
/* A receive deferred its clear-to-send: a thread's many incomplete tests send it. */
void rn_tcp_comm_defer_cts(struct rn_tcp_comm *c);
void rn_tcp_comm_flush_deferred(void);
/* A comm not on the list got its first outstanding request (c->lock held,
 * under which alone a comm enters or leaves it): the sweep below may move it. */
void rn_tcp_comm_waiting(struct rn_tcp_comm *c);
/* Move the comms with requests outstanding that no call reached since the
 * last sweep (at most every RN_TCP_WAIT_SWEEP_MS, from threads whose calls
 * keep finding nothing to do): a caller that waits on one request while
 * another comm's send or receive must move first (each side tests only
 * its receive, its own send still unwritten) is served. */
void rn_tcp_comm_sweep_waiting(void);
#define RN_TCP_WAIT_SWEEP_MS 10
/* fail.c */
/* Fail the comm: the first error sticks and every later test returns it
 * (a later isend or irecv hands out a request that fails there).  WARNs the reason (the first failure of a comm only)
 * and shuts its sockets down, so the peer fails too instead of waiting
 * (on a helper thread: at the caller's next call, rn_tcp_shut).
 * Returns res.  Safe from any thread. */
ncclResult_t rn_tcp_fail(struct rn_tcp_comm *c, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A peer broke the protocol: fail with ncclRemoteError, naming the
 * message, the field, its value and what was expected. */
#define RN_TCP_VIOLATION(c, what, field, fmt, ...)                                          \
  rn_tcp_fail((c), ncclRemoteError, "protocol violation from %s in %s: %s " fmt, (c)->peer, \
              (what), (field), ##__VA_ARGS__)
/* The error a failed comm returns, with a WARN naming the call. */
ncclResult_t rn_tcp_failed(struct rn_tcp_comm *c, const char *call);
/* c->lock held: shut the sockets down where a failure left that due (a
 * helper thread's: rn_tcp_on_helper, set by the helper threads). */
void rn_tcp_shut(struct rn_tcp_comm *c);
extern _Thread_local int rn_tcp_on_helper;

/* control.c */
ncclResult_t rn_tcp_ctl_flush(struct rn_tcp_comm *c);
int rn_tcp_ctl_room(const struct rn_tcp_comm *c);
/* Queue a sealed control header and its payload; 0 when the queue is full. */
int rn_tcp_ctl_queue(struct rn_tcp_comm *c, const void *hdr, size_t hl, const void *payload,
                     size_t pl, struct rn_tcp_req *req);
/* Queue the clear-to-send of a receive of small buffers only: it may wait
 * for a batch (RN_TCP_CTS_BATCH) before rn_tcp_ctl_flush writes it. */
void rn_tcp_ctl_queue_lazy(struct rn_tcp_comm *c, const struct rn_tcp_cts *m);
ncclResult_t rn_tcp_progress(struct rn_tcp_comm *c);
/* Sender: the buffer a send with `tag` fills, among the groups whose CTS
 * arrived (*seq, *idx); 0 when none is known yet or an eager message of
 * that tag is still unmatched. */
int rn_tcp_send_target(const struct rn_tcp_comm *c, int32_t tag, uint64_t *seq, int *idx);
void rn_tcp_send_claim(struct rn_tcp_comm *c, uint64_t seq, int idx);
/* Sender: match unmatched eager messages to the groups known now. */
ncclResult_t rn_tcp_match_eager(struct rn_tcp_comm *c);
/* Receiver: a group was posted: deliver held eager messages it matches. */
ncclResult_t rn_tcp_drain_held(struct rn_tcp_comm *c);
/* The counter of `tag` in m, added at 0 when new; NULL when out of memory. */
uint32_t *rn_tcp_tagcount(struct rn_tcp_tagcount *m, int32_t tag);
/* The counter of `tag` in m, 0 when it has none (adds nothing). */
uint32_t rn_tcp_tagcount_get(const struct rn_tcp_tagcount *m, int32_t tag);
void rn_tcp_tagcount_free(struct rn_tcp_tagcount *m);
/* Sender: the next filling message of `tag` is its *nth send and the
 * comm's *claim-th filling message; rn_tcp_sent counts it once it went.
 * ncclSystemError when the table cannot grow. */
ncclResult_t rn_tcp_send_numbers(struct rn_tcp_comm *c, int32_t tag, uint32_t *nth,
                                 uint32_t *claim);
void rn_tcp_sent(struct rn_tcp_comm *c, int32_t tag);

/* move.c: the control connection over another rail */
/* At creation, after the rails are known: keep control bytes on a
 * multi-rail comm; the receiver listens for a new control connection on
 * each of its rails and offers them (OFFER, CONTROL). */
void rn_tcp_move_init(struct rn_tcp_comm *c);
void rn_tcp_move_free(struct rn_tcp_comm *c);
/* The data streams close (open.c): no rail to move to any more; the
 * listeners and a dial go, and no more bytes are kept. */
void rn_tcp_move_stop(struct rn_tcp_comm *c);
/* Control output: write what the new connection owes the peer first;
 * -1 when nothing may be written now (no connection), 0 to go on. */
int rn_tcp_move_before_write(struct rn_tcp_comm *c, ncclResult_t *res);
/* k control bytes from iov went out: keep them. */
void rn_tcp_move_wrote(struct rn_tcp_comm *c, const struct iovec *iov, int niov, size_t k);
/* Control input: read into iov (filled in order, one system call): > 0
 * bytes read, 0 nothing now, -1 the peer's orderly close, -2 an error
 * (errno set), -3 the comm failed. */
ssize_t rn_tcp_move_read(struct rn_tcp_comm *c, const struct iovec *iov, int niov);
/* The control connection failed (cause; quiet: INFO, the caller WARNed):
 * 1 when it can move (the comm goes on), 0 when the comm has to fail. */
int rn_tcp_move_lost(struct rn_tcp_comm *c, const char *cause, int quiet);
/* Caller, every progress: dial, accept, time limits, trimming. */
ncclResult_t rn_tcp_move_progress(struct rn_tcp_comm *c);
/* Sender: an OFFER with the CONTROL flag. */
ncclResult_t rn_tcp_move_on_offer(struct rn_tcp_comm *c, const struct rn_tcp_offer *o);

/* streams.c */
void rn_tcp_drive_streams(struct rn_tcp_comm *c);
/* Progress one stream after poll() or epoll said what it can do (re: poll
 * flags), or blindly (re = 0: a send stream writes what is queued),
 * moving at most about `budget` bytes (SIZE_MAX: as much as the socket
 * takes; the calling thread passes less, see rn_tcp_drive_streams).
 * Returns the bytes it moved. */
size_t rn_tcp_stream_step(struct rn_tcp_comm *c, struct rn_tcp_stream *s, short re,
                          size_t budget);
/* The chunk grid for a streamed message of `size` bytes. */
uint32_t rn_tcp_chunk_grid(const struct rn_tcp_comm *c, size_t size);
/* Queue a streamed message's chunks; with claim (its p.flags, tag, nth and
 * claim; NULL: none) every chunk claims the buffer (RN_TCP_CHUNK_CLAIM).
 * 0 when the queues are full. */
int rn_tcp_enqueue(struct rn_tcp_comm *c, struct rn_tcp_req *r, const char *data, size_t size,
                   uint32_t grid, uint64_t seq, uint32_t idx, const struct rn_tcp_chunk *claim);
/* Receiver, rx_lock held: a message claimed buffer idx of r. */
void rn_tcp_recv_claim(struct rn_tcp_comm *c, struct rn_tcp_req *r, int idx);
/* Receiver, rx_lock held: a filling message numbered `claim` arrived
 * (what: the message, for the WARN); a number seen before, or beyond the
 * window, breaks the protocol. */
ncclResult_t rn_tcp_claim_seen(struct rn_tcp_comm *c, uint32_t claim, const char *what);
/* Receiver, rx_lock held: fix buffer idx's message shape, or check it
 * against the one fixed before; ncclSuccess or the comm's failure. */
ncclResult_t rn_tcp_buf_shape(struct rn_tcp_comm *c, struct rn_tcp_req *r, int idx,
                              enum rn_tcp_buf_mode mode, uint64_t size, uint32_t grid,
                              const char *what);

/* A queued chunk whose send was acknowledged, or freed: never needed again. */
int rn_tcp_chunk_stale(const struct rn_tcp_queued_chunk *q);
/* queue_lock held: forget written chunks no re-send can need. */
void rn_tcp_stream_retire(struct rn_tcp_stream *s);
/* queue_lock held: the stream lets go of the send its head chunk reads
 * (only where no thread is writing it: s->writing == 0). */
void rn_tcp_stream_unhold(struct rn_tcp_stream *s);
/* queue_lock held, no thread writing: head chunk q, part written, whose
 * copy a rescue sent over another rail, finishes its write from a copy of
 * its payload in the stream's bounce buffer, and the stream lets go of
 * its send, which then completes with its ACK (the copy landed) instead
 * of waiting until the held-up rail takes the rest of this chunk
 * (seconds on a lossy rail; on a dead one, until it is taken out).  The
 * bytes are the same: the send is not complete before.  1 when done (0:
 * no memory, or nothing to do; the send waits for the write). */
int rn_tcp_stream_bounce(struct rn_tcp_stream *s, struct rn_tcp_queued_chunk *q);

/* engine.c: the process's pool of helper threads. */
/* Threads the pool runs: RAILNET_SOCKET_NTHREADS (auto: 0 below 8 CPUs,
 * else 4), at most the CPU count; 0: callers move their own bytes. */
int rn_tcp_engine_size(void);
/* Hand the comm's streams to the pool (started on first use); sets
 * c->nthreads to the threads serving it (0 with helpers off). */
ncclResult_t rn_tcp_engine_attach(struct rn_tcp_comm *c);
/* Take the comm's streams out of the pool; returns once no thread can
 * touch them again.  Safe on a comm never attached. */
void rn_tcp_engine_detach(struct rn_tcp_comm *c);
/* A stream's socket is replaced (a rail re-admitted): the old one is
 * unregistered (the caller closes it), fd registered. */
void rn_tcp_engine_swap_fd(struct rn_tcp_stream *s, int fd);
/* At fini, once no comm is open: stop and join the threads. */
void rn_tcp_engine_stop(void);
/* Work for a stream (queued chunks, a retirement, a new socket): its
 * engine thread steps it soon.  No-op with helpers off. */
void rn_tcp_wake(struct rn_tcp_comm *c, int stream);
void rn_tcp_wake_all(struct rn_tcp_comm *c);

/* control.c (continued) */
/* Receiver: queue an ACK for every streamed buffer that filled. */
ncclResult_t rn_tcp_queue_acks(struct rn_tcp_comm *c);

/* p2p.c */
ncclResult_t rn_tcp_isend(void *scomm, void *data, size_t size, int tag, void *mh, void **req);
ncclResult_t rn_tcp_irecv(void *rcomm, int n, void **data, const size_t *sizes, const int *tags,
                          void **mhs, void **req);
ncclResult_t rn_tcp_test(void *request, int *done, size_t *sizes, int *nsizes);

#endif
