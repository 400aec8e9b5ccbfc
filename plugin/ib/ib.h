/* Private to the verbs transport (plugin/ib/).
 *
 * Data path, receiver-driven like NCCL's net_ib: irecv RDMA-writes a FIFO
 * slot (address, per-rail rkeys, size, tag of each buffer; group size;
 * sequence) into the sender's control block; isend matches the slot of its
 * sequence by tag, RDMA-writes the data (split across the connection's QPs
 * and rails), and ends each QP's chain with a WRITE_WITH_IMM whose
 * immediate names the slot, the number of QPs used and, for a one-buffer
 * group, the size; larger groups first write their sizes into the
 * receiver's control block.  The receiver keeps RECVs posted on every QP
 * and counts immediates per slot.
 *
 * Per message: the FIFO write is one mostly unsignaled WR (inline when it
 * fits), and while at least half of the receives in flight are announced
 * the next ones wait to go out together, consecutive slots as one write;
 * a small send is one inline WRITE_WITH_IMM (a zero-byte one carries only
 * the immediate); each QP's WRs of a group go in one chained post.  Every
 * field a peer writes (FIFO slots, sizes, immediates, the out-of-band
 * connection info) is checked against our own state before use. */
#ifndef RN_IB_PRIV_H
#define RN_IB_PRIV_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include "ibvwrap.h"
#include "stripe.h"
#include "railnet/list.h"
#include "railnet/mr_cache.h"
#include "railnet/rendezvous.h"
#include "railnet/transport.h"

#define RN_IB_MAX_QPS 16        /* per rail: params.def's IB_QPS upper bound */
#define RN_IB_SLOTS 32          /* receive groups in flight per comm (NCCL needs >= 32 requests) */
#define RN_IB_MAX_RECVS 8       /* buffers per grouped receive */
#define RN_IB_RECV_DEPTH 64     /* standing RECVs per QP: >= RN_IB_SLOTS immediates in flight */
#define RN_IB_RECV_BATCH 16     /* consumed RECVs are re-posted this many at a time */
#define RN_IB_SEND_DEPTH 512    /* per QP: <= 10 WRs per group x RN_IB_SLOTS, plus FIFO writes */
#define RN_IB_UNSIGNALED_MAX 15 /* at most this many unsignaled WRs between signaled ones */
#define RN_IB_CQ_DEPTH 4096
#define RN_IB_SPLIT_MIN 65536    /* bytes per QP before a message is split over one more QP */
#define RN_IB_CQ_BATCH 32        /* completions taken per ibv_poll_cq */
#define RN_IB_FIFO_BATCH 8       /* FIFO elements held back at most before they are sent */
#define RN_IB_ALIVE_CHECK_MS 100 /* how often a waiting comm looks at the peer's control socket */
#define RN_IB_ALIVE_CHECK_CALLS 128 /* ... counted in idle calls between clock reads */
#define RN_IB_HELD_SWEEP_CALLS 1024 /* a thread's idle calls between looks at held FIFO elements */
#define RN_IB_HELD_SWEEP_MS 10      /* ... and at most this often in a process */
#define RN_IB_INLINE_PROBE 512       /* largest inline size asked of a device (a full FIFO group) */

static_assert((RN_IB_SLOTS & (RN_IB_SLOTS - 1)) == 0 && RN_IB_SLOTS <= 32,
              "the slot index is 5 bits of the immediate");
static_assert(RN_IB_MAX_RECVS == RN_MAX_RECVS, "grouped receives: the core's maxRecvs");
static_assert(RN_MAX_RAILS * RN_IB_MAX_QPS <= 128, "QPs used is 7 bits of the immediate");
static_assert(RN_MAX_RAILS <= RN_IB_STRIPE_RAILS, "stripe.c sizes its tables for every rail");
static_assert(RN_IB_RECV_DEPTH - (RN_IB_RECV_BATCH - 1) > RN_IB_SLOTS,
              "RECVs left on a QP before a re-post cover every immediate in flight");
static_assert(RN_IB_UNSIGNALED_MAX + 1 + (RN_IB_MAX_RECVS + 2) * RN_IB_SLOTS <= RN_IB_SEND_DEPTH,
              "a full window of groups and an unsignaled run fit the send queue");

/* Immediate data of the WRITE_WITH_IMM closing a group on each QP. */
#define RN_IB_IMM_SLOT(imm) ((imm)&31u)
#define RN_IB_IMM_NUSED(imm) ((((imm) >> 5) & 127u) + 1)
#define RN_IB_IMM_SIZED (1u << 12) /* bits 13..30 carry the size of a 1-buffer group */
#define RN_IB_IMM_SIZE(imm) (((imm) >> 13) & 0x3ffffu)
#define RN_IB_IMM_SIZE_MAX 0x3ffffu
#define RN_IB_IMM_ERROR (1u << 31) /* the sender refused the group: sizes tell why */

/* Work request ids: kind, the comm's QP index, a request index and the
 * QP's post count after this WR (a signaled completion frees every WR up
 * to it). */
enum rn_ib_wr_kind { RN_IB_WR_SEND = 1, RN_IB_WR_FIFO = 2, RN_IB_WR_RECV = 3, RN_IB_WR_FLUSH = 4 };
#define RN_IB_WRID(kind, qi, idx, count)                                                          \
  (((uint64_t)(kind) << 60) | ((uint64_t)((qi)&0xff) << 52) | ((uint64_t)((idx)&0xfffff) << 32) | \
   (uint32_t)(count))
#define RN_IB_WRID_KIND(id) ((int)((id) >> 60))
#define RN_IB_WRID_QP(id) ((int)(((id) >> 52) & 0xff))
#define RN_IB_WRID_IDX(id) ((uint32_t)(((id) >> 32) & 0xfffff))
#define RN_IB_WRID_COUNT(id) ((uint32_t)(id))

/* One FIFO element, written by the receiver into the sender's control
 * block.  64 bytes so a slot never straddles a cache line oddly. */
struct rn_ib_fifo_elem {
  uint64_t addr;
  uint64_t size;
  uint32_t rkey[RN_MAX_RAILS];
  int32_t tag;
  uint16_t n; /* buffers in the group */
  uint16_t reserved;
  uint64_t idx; /* sequence + 1: written last, checked by the sender */
};
static_assert(sizeof(struct rn_ib_fifo_elem) == 64, "FIFO element layout is on the wire");

/* Memory of one comm the NIC touches.  Only the part the peer writes is
 * registered for remote access (the sender's fifo, the receiver's sizes);
 * the rest is local: the receiver's outgoing FIFO elements, the sender's
 * outgoing sizes, and the landing bytes of flush READs. */
struct rn_ib_ctl {
  struct rn_ib_fifo_elem fifo[RN_IB_SLOTS][RN_IB_MAX_RECVS];
  uint64_t sizes[RN_IB_SLOTS][RN_IB_MAX_RECVS];
  uint64_t flush[8];
};

/* The out-of-band exchange (connect.c): what each side tells the other
 * once over the bootstrap socket, and what the handle carries. */
#define RN_IB_INFO_MAGIC 0x726e6962u /* "rnib" */
/* 2: only part of the control block is remote, new immediates; 3: the
 * failover messages below follow on the same socket; 5: the listener's
 * answer says which of the connector's rails each of its rails pairs with
 * (peer_rail) */
#define RN_IB_INFO_VERSION 5

/* Every field is checked on arrival (rn_ib_info_check, rn_ib_comm_connect). */
struct rn_ib_rail_info {
  uint8_t gid[16];
  uint32_t rkey; /* the remotely writable part of the control block */
  uint16_t lid;
  uint8_t link; /* IBV_LINK_LAYER_* */
  uint8_t mtu;  /* enum ibv_mtu */
};
struct rn_ib_conn_info {
  uint32_t magic;
  uint16_t version;
  uint8_t nrails; /* a standby included */
  uint8_t nqps;
  uint8_t standby; /* 1: the last rail is the device's standby NIC */
  uint8_t reserved[7];
  uint64_t ctl_addr; /* the remotely writable part: the sender's fifo, the receiver's sizes */
  char dev[32];      /* first rail's name, for messages */
  /* The listener's answer: rail k here pairs with the connector's rail
   * peer_rail[k] (pairing.c); the connector connects its rails in that
   * order.  Unused (zero) in the connector's offer. */
  uint8_t peer_rail[RN_MAX_RAILS];
  struct rn_ib_rail_info rail[RN_MAX_RAILS];
  uint32_t qpn[RN_MAX_RAILS][RN_IB_MAX_QPS];
};

/* Failover (failover.c): messages on the bootstrap socket once a comm is
 * up.  Either side that sees a rail fail (an error completion of a data
 * QP) stops using it; the receiver tells the sender (FAIL).  The sender
 * moves every QP of the comm to the error state, makes new ones on the
 * rails left and sends REBUILD; the receiver stops its QPs, takes the
 * completions already there, makes and connects new QPs and answers
 * REBUILT with the groups it has whole; the sender connects, sends READY,
 * and posts again every group the receiver lacks.  Groups land whole or
 * are written again in full: the bytes are the same, and a receive
 * completes once, on the immediates of its last writing. */
#define RN_IB_FO_MAGIC 0x726e666fu /* "rnfo" */
enum rn_ib_fo_type {
  RN_IB_FO_FAIL = 1,    /* receiver -> sender: rails that failed here */
  RN_IB_FO_REBUILD = 2, /* sender -> receiver: the rails left, new QPs */
  RN_IB_FO_REBUILT = 3, /* receiver -> sender: its new QPs, what it has */
  RN_IB_FO_READY = 4    /* sender -> receiver: connected, FIFO writes may come */
};
struct rn_ib_fo_msg {
  uint32_t magic;
  uint8_t type;
  uint8_t reserved[3];
  uint32_t epoch; /* REBUILD: the new one, REBUILT/READY: echoed, FAIL: the receiver's */
  uint32_t rails; /* FAIL: the rails failed; REBUILD: the rails in use from now on */
  /* REBUILD: the sender's next sequence; bit i of done: sequence
   * seq - RN_IB_SLOTS + i completed at the sender, having sent sizes[its
   * slot].  REBUILT: every receive below seq is whole; bit i of done:
   * so is seq + i. */
  uint64_t seq;
  uint32_t done;
  uint32_t reserved2;
  uint32_t qpn[RN_MAX_RAILS][RN_IB_MAX_QPS]; /* the new QPs of the rails in use */
  uint64_t sizes[RN_IB_SLOTS][RN_IB_MAX_RECVS];
};

/* What the handle payload carries: the listener's bootstrap address. */
struct rn_ib_payload {
  struct rn_wire_addr addr;
};
static_assert(sizeof(struct rn_ib_payload) <= RN_HANDLE_PAYLOAD, "handle payload is 108 bytes");

/* An opened device (shared by its ports).  Owner: discovery.c's table. */
struct rn_ib_device {
  char name[64];
  struct ibv_context *context;
  struct ibv_pd *pd;
  struct rn_mr_cache *mr_cache;
  struct ibv_device_attr attr;
  uint32_t max_inline; /* largest IBV_SEND_INLINE payload a QP got (probed at init) */
};

/* One reported NIC (device, ACTIVE port).  Owner: discovery.c's table;
 * immutable after init. */
struct rn_ib_port {
  struct rn_ib_device *device;
  const struct rn_nic *nic; /* the same NIC as the core sees it */
  int num;                  /* the device's port number (1-based) */
  int link;                 /* IBV_LINK_LAYER_* */
  enum ibv_mtu mtu;
  uint16_t lid;
  int gid_index;
  union ibv_gid gid;
};

/* Bounded copy that always terminates (truncation is fine for names). */
static inline void rn_ib_strcpy(char *dst, size_t len, const char *src) {
  size_t n = strlen(src);
  if (n >= len) n = len - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* A registration: one cache entry per rail of the comm it was made on.
 * Owner: the caller of reg_mr, until dereg_mr. */
struct rn_ib_mh {
  struct rn_list live; /* in reg.c's list of registrations, freed at fini */
  int type;            /* NCCL_PTR_* */
  int nrails;
  struct rn_ib_device *device[RN_MAX_RAILS];
  struct rn_mr_entry *ent[RN_MAX_RAILS];
};
static inline struct ibv_mr *rn_ib_mh_mr(const struct rn_ib_mh *mh, int rail) {
  return (struct ibv_mr *)mh->ent[rail]->handle;
}

/* One RC QP of a connection and its queue accounting (owner: the rail). */
struct rn_ib_qp {
  struct ibv_qp *qp;
  uint32_t posted;     /* send WRs ever posted (wraps) */
  uint32_t completed;  /* ... of which a polled signaled completion covered */
  uint32_t unsignaled; /* posted since the last signaled WR */
  uint32_t recvs_due;  /* RECVs consumed, not yet re-posted */
  uint64_t last_imm;   /* receiver: sequence + 1 of the last group closed here */
  /* sender of a multi-rail comm (rates.c): the data bytes of each group's
   * WR chain here, in post order, until its completion (RC: in order) */
  uint32_t chain[RN_IB_SLOTS];
  uint32_t chains_posted, chains_done;
};

/* One rail of a connection: everything on one NIC, so a rail can be taken
 * out (or rebuilt) without touching the others. */
struct rn_ib_rail {
  struct rn_ib_port *port;
  struct ibv_cq *cq;
  struct rn_ib_qp qp[RN_IB_MAX_QPS];
  struct ibv_qp *flush_qp;  /* receiver, GDR-capable rails only */
  struct ibv_mr *local_mr;  /* the control block, local access only */
  struct ibv_mr *remote_mr; /* the part the peer writes (sender: fifo; receiver: sizes) */
  uint32_t rem_rkey;        /* the peer's remotely writable part on this rail */
  /* telemetry (stats.c) */
  uint64_t bytes;    /* sender: data bytes posted here, sent again included */
  uint64_t chunks;   /* sender: WR chains posted; receiver: immediates counted */
  uint64_t replays;  /* sender: chains posted again after a rebuild */
  uint64_t failures; /* times the rail failed */
  /* delivery-rate estimate (rates.c), sender of a multi-rail comm */
  double rate;       /* bytes/s while it had bytes in flight */
  uint64_t load;     /* data bytes posted, their completion not seen yet */
  uint64_t done;     /* data bytes completed */
  int64_t busy_ns;   /* time with bytes in flight, up to busy_from */
  int64_t busy_from; /* rn_clock_ns() when load last became non-zero; 0: idle */
  uint64_t done_mark; /* done and busy time at the last sample */
  int64_t busy_mark;
  int next_qp; /* the QP the rail's next part goes to */
};

/* Comms and listen comms handed to the core, so finalize (or unload) can
 * close what the caller left open. */
struct rn_ib_live {
  struct rn_list link;
  int is_listen;
};

/* One request, of any kind.  Preallocated in the comm; kind 0 = free. */
enum rn_ib_req_kind { RN_IB_REQ_SEND = 1, RN_IB_REQ_RECV = 2, RN_IB_REQ_FLUSH = 3 };
struct rn_ib_comm;
struct rn_ib_req {
  struct rn_req_base base;
  int kind;
  struct rn_ib_comm *comm;
  int slot;
  int n;
  uint64_t seq; /* recv: the group's sequence */
  /* recv: immediates arrived and due; flush: READs completed and posted;
   * send: got is set when its group completed, expected counts the
   * group's signaled completions on its first request */
  int got, expected;
  int64_t imm_size; /* recv: -1 unless the immediate carried the size */
  int error;        /* recv: the sender flagged the group */
  size_t size[RN_IB_MAX_RECVS];
  union {
    int tag[RN_IB_MAX_RECVS];    /* recv: the posted tags */
    int member[RN_IB_MAX_RECVS]; /* send, first of a group: its requests' send_reqs indices */
  };
};

/* A matched send group (sender side), one per slot: a private copy of the
 * FIFO elements, taken once they were all written and checked, so a peer
 * rewriting the slot later cannot change what we act on. */
struct rn_ib_send_group {
  int n; /* buffers in the group, 0 until the slot is taken */
  int matched;
  struct rn_ib_fifo_elem fifo[RN_IB_MAX_RECVS];
  struct rn_ib_req *req[RN_IB_MAX_RECVS];
  void *data[RN_IB_MAX_RECVS];
  struct rn_ib_mh *mh[RN_IB_MAX_RECVS];
  size_t size[RN_IB_MAX_RECVS];
};

/* A connection (either side).  Owner: the core, between connect/accept and
 * close_*; everything inside is freed by close in reverse order. */
struct rn_ib_comm {
  struct rn_comm_base base;
  struct rn_ib_live live;
  int nlocal;          /* local rails with resources */
  int nrails;          /* rails connected (min of both sides) */
  int nqps;            /* QPs per rail */
  int mtu_bytes;       /* smallest path MTU over the connected rails */
  uint32_t max_inline; /* smallest inline capacity over the connected rails' QPs */
  uint32_t sq_depth;   /* send WRs each QP holds */
  struct rn_ib_rail rail[RN_MAX_RAILS];
  /* The rails in use: in_use[0..nlive-1], in rail order; pos[r] is rail r's
   * place there or -1.  QP numbers (rn_ib_qp) count over them only. */
  int nlive;
  int in_use[RN_MAX_RAILS];
  int8_t pos[RN_MAX_RAILS];
  int is_send;
  int standby; /* the rail that is the device's standby NIC (in use only while
                * every other rail failed), -1 for none */
  int tc; /* the traffic class the QPs were connected with, -1 for none */
  struct rn_ib_rail_info rem_rail[RN_MAX_RAILS]; /* the peer's rails, kept for a rebuild */
  /* failover (failover.c) */
  uint32_t dead;      /* rails in use that failed: a rebuild is due */
  uint32_t left;      /* rails not in use (failed earlier) */
  int64_t probe_ms;   /* sender: when to look at the left rails' ports again */
  int probe_wait_ms;  /* ... and the wait after that */
  uint32_t reported;  /* receiver: rails already named in a FAIL */
  uint32_t epoch;     /* rebuilds so far */
  int recovering;     /* sender: REBUILD sent; receiver: REBUILT sent, READY not here */
  int draining;       /* receiver: taking the stopped QPs' completions */
  int64_t recover_ms; /* rn_clock_ms() when the rebuild started */
  uint32_t replayed, delivered; /* groups of the last rebuild: posted again, found whole */
  int replaying;                /* sender: posting a rebuild's groups again */
  uint64_t id;                  /* telemetry: the comm's number in this process */
  int64_t created_ms, stats_ms; /* telemetry: when it connected, last RAILNET_STATS line */
  struct rn_ib_fo_msg fo_in, fo_out;
  size_t fo_in_off, fo_out_off, fo_out_len;
  struct rn_ib_ctl *ctl;
  uint64_t rem_ctl; /* the peer's remotely writable part (its fifo or its sizes) */
  int ctrl_fd;      /* bootstrap socket, kept to notice a dead peer */
  char peer[64];
  ncclResult_t error; /* sticky: set by the first failure */
  uint64_t seq;       /* next group */
  /* receiver: FIFO elements of sequences [fifo_posted, seq) are written
   * locally but not yet sent; fifo_live receives were announced and are
   * not complete (see rn_ib_fifo_flush).  After a rebuild the sender may
   * lack those of [fifo_again, fifo_posted) (written on QPs that failed),
   * so the next flush writes them again; any it already has stay valid
   * (the same elements), so an immediate may name them. */
  uint64_t fifo_posted;
  uint64_t fifo_again;
  int fifo_live;
  /* Held FIFO elements also leave through other comms' idle calls
   * (p2p.c, rn_ib_sweep_held): the comm is on rn_ib_held while it may
   * hold some, and busy is set by each API call and by a sweep visiting
   * it, so the two never run at once. */
  struct rn_list held;
  atomic_int busy;
  int64_t next_alive_ms; /* rn_clock_ms() of the next liveness check */
  int alive_calls;       /* calls until the clock is read again */
  /* sender */
  struct rn_ib_send_group group[RN_IB_SLOTS];
  /* posted groups by slot, kept until the next group of the slot: what a
   * rebuild posts again */
  struct rn_ib_send_group sent[RN_IB_SLOTS];
  uint64_t sent_seq[RN_IB_SLOTS];
  int sent_lead[RN_IB_SLOTS];   /* its first request's index in send_reqs */
  uint8_t sent_done[RN_IB_SLOTS]; /* every QP's completion came (or the receiver had it whole) */
  struct rn_ib_req send_reqs[RN_IB_SLOTS * RN_IB_MAX_RECVS];
  /* receiver */
  struct rn_ib_req recv_reqs[RN_IB_SLOTS];  /* recv request of sequence s sits at s % SLOTS */
  struct rn_ib_req flush_reqs[RN_IB_SLOTS]; /* flushes */
};

static inline int rn_ib_qp_count(const struct rn_ib_comm *c) { return c->nlive * c->nqps; }
/* QP number q of the connection: the rails in use interleave, so using
 * the first m QPs spreads over rails first. */
static inline struct rn_ib_qp *rn_ib_qp(struct rn_ib_comm *c, int q, int *rail) {
  *rail = c->in_use[q % c->nlive];
  return &c->rail[*rail].qp[q / c->nlive];
}
/* The comm's QP number of rail r's QP k (r in use). */
static inline int rn_ib_qp_index(const struct rn_ib_comm *c, int r, int k) {
  return k * c->nlive + c->pos[r];
}
/* The first rail in use: the name messages give the comm. */
static inline const char *rn_ib_comm_nic(const struct rn_ib_comm *c) {
  return c->rail[c->nlive > 0 ? c->in_use[0] : 0].port->nic->name;
}

/* Calls between the files go one way: transport.c (the table, finalize)
 * -> p2p.c (data path) -> failover.c (rebuilds) -> connect.c (QPs,
 * out-of-band exchange) -> pairing.c (which rails pair) ->
 * discovery.c (devices) -> gdr.c (probes), reg.c (the MR cache callbacks).
 * reg.c (registration) and stats.c (telemetry, called from p2p.c,
 * failover.c and connect.c) call none of them. */

/* pairing.c: which of the connector's rails each of the listener's pairs
 * with (include/railnet/pairing.h's rule): RoCE rails by the kernel's
 * routes to the peer's GIDs that are IP addresses, InfiniBand rails by GID
 * subnet prefix where the prefixes tell each host's rails apart, the rest
 * in order.  local_name[i] names local rail i; *how gets the pairing in
 * words (for the INFO a comm says when it is not the identity). */
struct rn_pairing;
void rn_ib_pairing(const struct rn_ib_rail_info *local, const char *const *local_name, int nlocal,
                   const struct rn_ib_rail_info *peer, int npeer, struct rn_pairing *p, char *how,
                   size_t howlen);
/* The GID, link layer, LID and MTU of a port as its rail's info says them. */
void rn_ib_port_info(const struct rn_ib_port *port, struct rn_ib_rail_info *ri);
/* discovery.c */
ncclResult_t rn_ib_init(const struct rn_nic **nics, int *n, char *why, size_t whylen);
/* At fini, after every comm and registration is gone. */
void rn_ib_devices_close(void);
struct rn_ib_port *rn_ib_port_of(const struct rn_nic *nic);
/* gdr.c: probes, run once per device at init. */
int rn_ib_probe_ptr_support(struct rn_ib_device *device, char *why, size_t whylen);
/* connect.c */
/* Receive comms that may hold FIFO elements back (p2p.c adds and sweeps;
 * freeing a comm takes it off, waiting out a sweep visiting it). */
extern struct rn_shared_list rn_ib_held;
ncclResult_t rn_ib_listen(const struct rn_rails *r, struct rn_handle *h, void **lcomm);
ncclResult_t rn_ib_connect(const struct rn_rails *r, const struct rn_handle *h, int tc,
                           void **state, void **scomm);
void rn_ib_connect_abort(void *state);
ncclResult_t rn_ib_accept(void *lcomm, void **rcomm);
ncclResult_t rn_ib_close_send(void *scomm);
ncclResult_t rn_ib_close_recv(void *rcomm);
ncclResult_t rn_ib_close_listen(void *lcomm);
int rn_ib_close_all(void); /* at fini: frees what is still open, returns how many */
/* count more standing RECVs on the comm's QP qi. */
ncclResult_t rn_ib_post_recvs(struct rn_ib_comm *c, int qi, int count);
/* Use every connected rail but the standby (at connect). */
void rn_ib_live_all(struct rn_ib_comm *c);
/* One rail's QPs, for a rebuild: stop (data QPs to the error state, so
 * nothing more lands), free (flush QP, data QPs, CQ), open again (CQ, data
 * QPs in INIT, a receiver's flush QP) and connect the data QPs to the
 * peer's qpn[]. */
void rn_ib_rail_stop(struct rn_ib_comm *c, int r);
void rn_ib_rail_free(struct rn_ib_comm *c, int r);
ncclResult_t rn_ib_rail_open(struct rn_ib_comm *c, int r);
ncclResult_t rn_ib_rail_connect(struct rn_ib_comm *c, int r, const uint32_t *qpn);
/* stats.c: RAILNET_STATS lines (every RAILNET_STATS_MS from the comm's
 * calls, and at close) and, for a comm of several rails, one INFO line at
 * close with each rail's share. */
void rn_ib_stats_start(struct rn_ib_comm *c);
void rn_ib_stats_tick(struct rn_ib_comm *c);
void rn_ib_stats_close(struct rn_ib_comm *c);
/* rates.c: where a group's parts go and how its buffers are cut. */
struct rn_ib_plan {
  int nused;                                /* QPs the group uses */
  int qi[RN_MAX_RAILS * RN_IB_MAX_QPS];     /* ... their comm QP indices, in part order */
  uint32_t w[RN_MAX_RAILS * RN_IB_MAX_QPS]; /* ... and weights */
};
void rn_ib_plan(struct rn_ib_comm *c, uint64_t seq, size_t total, int nused, struct rn_ib_plan *p);
/* The plan was posted: each rail's next parts go to its next QPs. */
void rn_ib_plan_posted(struct rn_ib_comm *c, const struct rn_ib_plan *p);
/* Sender of a multi-rail comm: a chain of len data bytes was posted on QP
 * qi / its signaled completion came. */
void rn_ib_rate_posted(struct rn_ib_comm *c, int qi, uint64_t len);
void rn_ib_rate_done(struct rn_ib_comm *c, int qi);
/* QP room for one more chain's record (always, on a one-rail comm). */
int rn_ib_rate_room(struct rn_ib_comm *c, int qi);
/* A rebuild: nothing is in flight any more; the estimates stay. */
void rn_ib_rate_reset(struct rn_ib_comm *c);
/* failover.c */
/* A data QP's completion failed with status on rail r: 1 when the comm
 * goes on over its other rails (the rail is marked, one WARN said), 0
 * when the failure is the comm's. */
int rn_ib_fo_rail_failed(struct rn_ib_comm *c, int r, const struct ibv_wc *wc);
/* Sender: leave the failed rails (new QPs on the others, REBUILD queued). */
ncclResult_t rn_ib_fo_begin(struct rn_ib_comm *c);
/* Receiver: name newly failed rails to the sender (FAIL queued). */
void rn_ib_fo_report(struct rn_ib_comm *c);
/* Move queued bytes out and read what came; *got once c->fo_in holds a
 * whole, checked message; *eof when the peer closed. */
ncclResult_t rn_ib_fo_io(struct rn_ib_comm *c, int *got, int *eof);
/* Receiver, on REBUILD: stop every QP (then the caller takes the
 * completions already queued, with c->draining set), then answer. */
void rn_ib_fo_stop(struct rn_ib_comm *c);
ncclResult_t rn_ib_fo_answer(struct rn_ib_comm *c);
/* Sender, on REBUILT: connect, queue READY; the caller posts again. */
ncclResult_t rn_ib_fo_finish(struct rn_ib_comm *c);
/* Sender: take back a left rail whose port is active again (a rebuild);
 * looks at the ports at most as often as rn_ib_fo_leave set. */
ncclResult_t rn_ib_fo_probe(struct rn_ib_comm *c);
/* Sender, after REBUILT: whether sequence s was whole at the receiver. */
int rn_ib_fo_delivered(const struct rn_ib_comm *c, uint64_t s);
/* A rebuild that does not end within RAILNET_RAIL_TIMEOUT_MS fails the comm. */
ncclResult_t rn_ib_fo_check_time(struct rn_ib_comm *c);
/* reg.c */
ncclResult_t rn_ib_reg_mr(void *comm, void *data, size_t size, int type, void **mh);
ncclResult_t rn_ib_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mh);
ncclResult_t rn_ib_dereg_mr(void *comm, void *mh);
/* At fini: frees registrations the caller never deregistered (the caches,
 * destroyed after, deregister their MRs); returns how many. */
int rn_ib_mh_free_all(void);
/* The mr cache callbacks for a device. */
ncclResult_t rn_ib_mr_reg_cb(void *owner, uintptr_t addr, size_t len, const void *arg,
                             void **handle);
void rn_ib_mr_dereg_cb(void *owner, void *handle);
/* p2p.c */
ncclResult_t rn_ib_isend(void *scomm, void *data, size_t size, int tag, void *mh, void **req);
ncclResult_t rn_ib_irecv(void *rcomm, int n, void **data, const size_t *sizes, const int *tags,
                         void **mhs, void **req);
ncclResult_t rn_ib_iflush(void *rcomm, int n, void **data, const int *sizes, void **mhs,
                          void **req);
ncclResult_t rn_ib_test(void *req, int *done, size_t *sizes, int *nsizes);

#endif
