/* railnet-kvbench: KV-cache transfer benchmark (prefill -> decode) through
 * the ncclNet API, driven the way NCCL's proxy drives a net plugin for
 * point-to-point traffic.  Owner: tests/bench/kv_*.c; nothing here is
 * linked into the plugin.
 *
 * The model (see kv_model.c for the rules and where NCCL takes them):
 *   - an op is one ncclSend/ncclRecv between two ranks; NCCL splits it
 *     into parts over the peer's p2p channels and each part into steps of
 *     at most the chunk size (NCCL_P2P_NET_CHUNKSIZE); small ops use the LL
 *     protocol (twice the bytes on the wire, one step);
 *   - each channel of each peer has its own comm (shared between the local
 *     ranks of a PXN group when maxRecvs > 1, with the rank as tag);
 *   - per (local rank, channel) ops run one after the other: the next op's
 *     first isend/irecv is posted only when the previous op has completed
 *     on that side (NCCL's proxy keeps later ops as "nextPeer");
 *   - within an op at most min(NCCL_STEPS, 16 / nsubs) steps are in flight
 *     per channel; receives of the subs of one op that share a comm are
 *     posted as one grouped irecv (n = subs, distinct tags);
 *   - one proxy thread per process polls test() round-robin, retries a NULL
 *     request on a later pass and yields when a pass makes no progress. */
#ifndef RN_KV_H
#define RN_KV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/rn_test.h"

#define KV_KIB ((size_t)1024)
#define KV_MIB (KV_KIB * 1024)
#define KV_GIB (KV_MIB * 1024)

/* NCCL constants the model follows (src/include/device.h, net.cc, init.cc) */
#define KV_NCCL_STEPS 8
#define KV_SHARED_STEPS 16              /* shared p2p buffer slots per channel */
#define KV_LL_STEP_BYTES (64 * KV_KIB)  /* DEFAULT_LL_BUFFSIZE / NCCL_STEPS */
#define KV_LL_STEP_DATA (16 * KV_KIB)   /* LL data per step: 64 KiB halved (< 8 steps), half data */
#define KV_LL_THRESHOLD ((size_t)16384) /* NCCL_P2P_LL_THRESHOLD per channel */
#define KV_MAX_SUBS 8                   /* peers of one op on one channel */
#define KV_MAX_CHANNELS 16
#define KV_MAX_RANKS 8
#define KV_MAX_THREADS 8
#define KV_HANDLE_BYTES NCCL_NET_HANDLE_MAXSIZE

/* ---- what NCCL would do with an op (kv_model.c) ------------------------ */
struct kv_nccl {
  size_t chunk;     /* NCCL_P2P_NET_CHUNKSIZE (default 128 KiB) */
  int channels;     /* p2p channels per net peer (default 2) */
  int steps;        /* NCCL_STEPS (8) */
  int ll;           /* 1: small ops use LL as NCCL chooses; 0: Simple only */
  int shared_comms; /* NCCL_NET_SHARED_COMMS (1) */
};

/* One op's part on one channel: nsteps steps of `step` wire bytes, the
 * last one `last` bytes; the receiver posts `post` bytes per step. */
struct kv_part {
  int channel;
  int nsteps;
  size_t data; /* data bytes of this part */
  size_t step; /* wire bytes of every step but the last */
  size_t last; /* wire bytes of the last step */
  size_t post; /* receive buffer NCCL posts per step */
  int ll;
};

/* NCCL's split of an op of `bytes` (enqueue.cc addP2pToPlan, inter-node). */
int kv_op_parts(const struct kv_nccl *m, size_t bytes, struct kv_part *parts);
/* An op whose steps are given: `nsteps` messages of `msg` bytes each,
 * spread over the channels round-robin (the "pipelined" W2 shape). */
int kv_stream_parts(const struct kv_nccl *m, size_t msg, long nmsgs, struct kv_part *parts);
static inline size_t kv_step_bytes(const struct kv_part *p, int step) {
  return step == p->nsteps - 1 ? p->last : p->step;
}
/* min(NCCL_STEPS, NCCL_SHARED_STEPS / nsubs), at least 1 */
int kv_depth(const struct kv_nccl *m, int nsubs);

/* ---- one benchmark case (a table row) ---------------------------------- */
enum kv_shape { KV_GROUPED = 0, KV_UNGROUPED = 1, KV_PIPELINED = 2 };

struct kv_case {
  char label[96];
  int workload;           /* 1..4 */
  int senders, receivers; /* ranks: 1/1, 4/1 (PXN into one NIC), 1/4 */
  enum kv_shape shape;
  int nops;        /* ops per request per rank pair (layers, blocks) */
  size_t op_bytes; /* data bytes of one op per rank pair */
  int concurrency; /* requests issued together (one batch) */
  int nbatches;
  /* derived (kv_case_finish) */
  int nparts;
  struct kv_part parts[KV_MAX_CHANNELS];
  long msgs_per_op; /* plugin messages per op per pair */
  size_t wire_per_op;
  /* W1 descriptors for the report */
  const char *model;
  long tokens;
  size_t block; /* W2 block size */
  long blocks;  /* W2 blocks per request */
};

void kv_case_finish(struct kv_case *c, const struct kv_nccl *m);
long kv_case_requests(const struct kv_case *c);
long kv_case_ops(const struct kv_case *c); /* per pair */
/* Op o of a pair: which request, which gate (see kv_proxy.c) */
long kv_op_request(const struct kv_case *c, long o);
long kv_op_gate(const struct kv_case *c, long o);
long kv_case_gates(const struct kv_case *c);
/* Verification key of a step: every message of a run has its own. */
uint64_t kv_msg_key(uint64_t seed, int pair, long op, int channel, int step, size_t bytes);

/* ---- transports the proxy model drives (kv_net.c, kv_tcp.c) ------------ */
struct kv_net;
struct kv_net_ops {
  const char *name;
  ncclResult_t (*listen)(struct kv_net *n, void *handle, void **lcomm);
  ncclResult_t (*connect)(struct kv_net *n, void *handle, void **scomm);
  ncclResult_t (*accept)(struct kv_net *n, void *lcomm, void **rcomm);
  ncclResult_t (*regmr)(struct kv_net *n, void *comm, void *data, size_t size, void **mh);
  ncclResult_t (*deregmr)(struct kv_net *n, void *comm, void *mh);
  ncclResult_t (*isend)(struct kv_net *n, void *scomm, void *data, size_t size, int tag, void *mh,
                        void **req);
  ncclResult_t (*irecv)(struct kv_net *n, void *rcomm, int cnt, void **data, const size_t *sizes,
                        const int *tags, void **mhs, void **req);
  ncclResult_t (*test)(struct kv_net *n, void *req, int *done, int *sizes);
  ncclResult_t (*close_send)(struct kv_net *n, void *c);
  ncclResult_t (*close_recv)(struct kv_net *n, void *c);
  ncclResult_t (*close_listen)(struct kv_net *n, void *c);
};

/* One communicator's view of a transport: the plugin (own v11 context) or
 * the plain-TCP anchor. */
struct kv_net {
  const struct kv_net_ops *ops;
  struct rn_net rn; /* plugin: its own init (v11: one context per communicator) */
  int owns_init;
  int dev;
  int max_recvs;
  int traffic_class;  /* -1: undefined */
  char bind_addr[64]; /* TCP anchor: address to listen on */
  int tcp_streams;    /* TCP anchor: sockets per comm */
};

extern const struct kv_net_ops kv_railnet_ops;
extern const struct kv_net_ops kv_tcp_ops;
/* Open a communicator view: railnet (loads the plugin, init, devices,
 * properties of dev) or plain TCP.  0 ok, -1 with a reason. */
int kv_net_open_railnet(struct kv_net *n, struct rn_net *loaded, int version, int dev, int tc,
                        char *why, size_t whylen);
int kv_net_open_tcp(struct kv_net *n, const char *bind_addr, int streams);
void kv_net_release(struct kv_net *n);
int kv_tcp_selftest(char *why, size_t whylen);

/* ---- side channel between the two processes (kv_side.c) --------------- */
int kv_side_write(int fd, const void *buf, size_t len);
int kv_side_read(int fd, void *buf, size_t len, double timeout_s);
int kv_side_sync(int fd, double timeout_s);
/* Establish n comms: the listening side writes the handles, the other
 * reads them; both poll until every comm is up.  0 ok, -1 with why. */
int kv_connect_comms(int side, struct kv_net *n, int we_listen, int count, void **comms,
                     double timeout_s, char *why, size_t whylen);
int kv_close_comms(struct kv_net *n, int is_send, int count, void **comms);

/* ---- statistics -------------------------------------------------------- */
struct kv_calls {
  uint64_t isend, isend_null, irecv, irecv_null, test, test_done;
  double ns_isend, ns_irecv, ns_test_done, ns_test_pending; /* wall ns inside the calls */
};

struct kv_side_stats {
  double wall_s;       /* first gate open to last completion, this side */
  double proxy_cpu_s;  /* CPU time of this side's proxy threads */
  double proc_cpu_s;   /* CPU time of the whole process (helper threads too) */
  uint64_t msgs;       /* isends (sender) or receive buffers completed (receiver) */
  uint64_t wire_bytes; /* bytes on the plugin API */
  uint64_t verified;   /* bytes checked against the pattern */
  uint64_t passes, idle_passes, grouped_irecvs;
  int max_inflight;
  struct kv_calls calls;
};

void kv_calls_add(struct kv_calls *a, const struct kv_calls *b);

/* Result of one case through one transport, assembled on the receiver. */
struct kv_result {
  int ok;
  char why[256];
  long nreq;
  double *req_s; /* per-request transfer time, sorted */
  double p50_s, p99_s, mean_s;
  double gbps;       /* data bytes / receiver wall time */
  double msgs_per_s; /* plugin messages per second */
  double ops_per_s;  /* ops (layers, blocks) per second */
  uint64_t data_bytes;
  struct kv_side_stats snd, rcv;
};

void kv_result_free(struct kv_result *r);
/* Fold the result of another round of the same case into dst (dst takes
 * src's allocations); -1 out of memory. */
int kv_result_merge(struct kv_result *dst, struct kv_result *src);

/* ---- proxy engine (kv_proxy.c) ---------------------------------------- */
struct kv_run_opts {
  int verify;
  uint64_t seed;
  double timeout_s;
  int version; /* API version (0x1 optional receive completion from v9) */
  int yield;   /* sched_yield on a pass without progress (NCCL does) */
  /* W4: called once per pass by the first proxy thread (a stream sharing
   * the proxy); sets *progress; nonzero fails the run */
  int (*hook)(void *arg, int *progress);
  void *hook_arg;
  _Atomic int *bulk_state;   /* 1 while the case runs, 2 once it is done */
  double *bulk_t0, *bulk_t1; /* first start, last completion of proxy thread 0 */
};

/* Run one case on this side: connect the comms, register, barrier, run the
 * proxy threads, exchange statistics.  The receiver fills *res. */
int kv_run_case(int side, int is_send, const struct kv_case *c, const struct kv_nccl *m,
                struct kv_net *net, const struct kv_run_opts *o, struct kv_result *res);

/* ---- W4: a latency-critical small-message stream (kv_ping.c) ---------- */
struct kv_ping_opts {
  size_t size;     /* data bytes of a ping (and its reply) */
  long count;      /* pings when alone; with bulk: until the bulk ends */
  int with_bulk;   /* 1: a bulk case runs at the same time */
  int same_thread; /* 1: the bulk proxy thread also drives the pings */
};

struct kv_ping_result {
  long n;         /* round trips counted */
  long n_outside; /* round trips not entirely while bulk flowed (dropped) */
  double p50_us, p99_us, max_us, mean_us;
  struct kv_result bulk; /* the bulk case, when with_bulk */
};

int kv_run_ping(int side, int is_send, const struct kv_case *bulk, const struct kv_nccl *m,
                struct kv_net *net, struct kv_net *small_net, const struct kv_run_opts *o,
                const struct kv_ping_opts *po, struct kv_ping_result *res);

/* ---- helpers ------------------------------------------------------------ */
double kv_thread_cpu_s(void);
double kv_proc_cpu_s(void);
int kv_cmp_double(const void *a, const void *b);
double kv_percentile(const double *sorted, long n, double q);
const char *kv_human(size_t bytes, char *buf, size_t len);

#endif
