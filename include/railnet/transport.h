/* The contract between the core and a transport.  Each transport is one
 * const table (plugin/tcp/transport.c, plugin/ib/transport.c), listed in
 * plugin/registry.c.  The core validates every ABI argument before
 * calling in; transports may assume non-NULL comms of their own kind.
 * Optional operations point at the rn_transport_unsupported_* and _noop_*
 * defaults (plugin/transport.c), never NULL. */
#ifndef RN_TRANSPORT_H
#define RN_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include "nccl/net_common.h"

#define RN_MAX_RAILS 8 /* physical NICs in one virtual device */
#define RN_MAX_NICS 64 /* physical NICs a transport may report */
#define RN_MAX_RECVS 8 /* buffers in one grouped receive (maxRecvs) */

enum rn_link { RN_LINK_UNKNOWN = 0, RN_LINK_IB = 1, RN_LINK_ETH = 2 };

/* One physical rail as discovered by a transport.  Owner: the transport's
 * discovery table, immutable after init. */
struct rn_nic {
  char name[64];      /* unique, stable: "mlx5_0", "eth0" */
  char netdev[32];    /* linked netdev, "" when unknown */
  char pci_path[256]; /* real /sys/devices/.../DDDD:BB:DD.F, "" if none */
  char busid[16];     /* "0000:18:00.0", "" if none */
  uint64_t guid;
  int port; /* IB port (1-based); 0 for TCP */
  int speed_mbps;
  int speed_unknown; /* speed_mbps is a stand-in: the link did not report one */
  int ptr_support;   /* NCCL_PTR_* bits the probe proved */
  int force_flush;
  /* NCCL's regIsGlobal: registrations are cheap, repeatable and not tied
   * to a comm.  The transport's discovery decides it (TCP: always; verbs:
   * only with the registration cache); the core only reports it. */
  int reg_is_global;
  enum rn_link link;
  int max_comms;
  int table_index; /* where the transport keeps this NIC in its own table */
};

/* The handle NCCL carries between ranks.  The core owns the header; the
 * transport fills payload with its listen addresses. */
#define RN_HANDLE_MAGIC 0x524e4831u /* "RNH1" */
/* The on-the-wire protocol of every transport.  Bump it with any change to
 * a hello, handle or control message, so mixed builds refuse each other at
 * connect instead of misreading each other's bytes. */
#define RN_WIRE_VERSION 12
#define RN_HANDLE_PAYLOAD 104
struct rn_handle {
  uint32_t magic;
  uint8_t transport; /* registry index (railnet/registry.h): wire format */
  uint8_t nrails;
  uint16_t wire;  /* RN_WIRE_VERSION of the build that listened */
  uint64_t nonce; /* random per listen; accept admits only this */
  uint8_t payload[RN_HANDLE_PAYLOAD];
  uint32_t check; /* FNV-1a of the bytes above: a corrupted handle is refused */
};

/* Common first member of every transport comm, reached by the core. */
enum rn_comm_kind { RN_COMM_LISTEN = 1, RN_COMM_SEND = 2, RN_COMM_RECV = 3 };
#define RN_COMM_MAGIC 0x726e636du /* "rncm" */
struct rn_comm_base {
  uint32_t magic;
  uint8_t kind; /* enum rn_comm_kind */
  uint8_t transport;
  uint16_t reserved;
  int vdev;
};

/* Common first member of every transport request. */
#define RN_REQ_MAGIC 0x726e7271u /* "rnrq" */
struct rn_req_base {
  uint32_t magic; /* RN_REQ_MAGIC while the request is handed out */
  uint8_t transport;
};

/* Hand a request out on comm: test() finds its transport through it. */
static inline void rn_req_base_start(struct rn_req_base *b, const struct rn_comm_base *comm) {
  b->magic = RN_REQ_MAGIC;
  b->transport = comm->transport;
}

/* Take it back: the core refuses it from now on. */
static inline void rn_req_base_end(struct rn_req_base *b) { b->magic = 0; }

/* Every transport's rule for an isend/irecv on a comm that has failed
 * (comm_failed), had failed before the call (failed_before), and whose
 * call returned res: whether the call hands out a request that fails in
 * test() instead of returning the error.  A broken peer surfaces in
 * test(), as in NCCL's own transports, so a caller that posts and closes
 * without testing (a teardown with requests in flight) sees no error;
 * only a call's own bad arguments or sizes fail the call itself. */
static inline int rn_req_doomed(int comm_failed, int failed_before, ncclResult_t res) {
  if (!comm_failed) return 0;
  return failed_before ||
         !(res == ncclSuccess || res == ncclInvalidUsage || res == ncclInvalidArgument);
}

/* A virtual device's rails, handed to listen/connect, and its standby:
 * the NIC outside the rails the planner chose to carry the device's
 * traffic only while every rail is down (NULL: none). */
struct rn_rails {
  int n;
  const struct rn_nic *nic[RN_MAX_RAILS];
  const struct rn_nic *standby;
};

struct rn_transport {
  const char *name; /* "socket", "ib" */
  /* Discover usable NICs.  Zero NICs is success; then why says why, in
   * a few words, for the one line the registry logs about it.  Called
   * once under the core lock; *nics stays valid until fini. */
  ncclResult_t (*init)(const struct rn_nic **nics, int *n, char *why, size_t whylen);
  void (*fini)(void);
  ncclResult_t (*listen)(const struct rn_rails *r, struct rn_handle *h, void **lcomm);
  /* Non-blocking.  *state is NULL on the first call for a handle; the
   * transport parks its progress there.  On completion it sets *scomm and
   * clears *state; on error it frees *state itself.  tc: the comm's
   * traffic class (0..255, the IP TOS byte), or -1 for none; the
   * transport applies it to what carries the comm's data and says so in
   * one INFO. */
  ncclResult_t (*connect)(const struct rn_rails *r, const struct rn_handle *h, int tc, void **state,
                          void **scomm);
  void (*connect_abort)(void *state);
  ncclResult_t (*accept)(void *lcomm, void **rcomm);
  ncclResult_t (*reg_mr)(void *comm, void *data, size_t size, int type, void **mh);
  ncclResult_t (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                int fd, void **mh);
  ncclResult_t (*dereg_mr)(void *comm, void *mh);
  ncclResult_t (*isend)(void *scomm, void *data, size_t size, int tag, void *mh, void **req);
  ncclResult_t (*irecv)(void *rcomm, int n, void **data, const size_t *sizes, const int *tags,
                        void **mhs, void **req);
  ncclResult_t (*iflush)(void *rcomm, int n, void **data, const int *sizes, void **mhs, void **req);
  /* When *done: sizes (capacity RN_MAX_RECVS) gets one entry per buffer
   * of the request and *nsizes how many (1 for a send).  NCCL's own sizes
   * array holds only that many, so the core copies exactly *nsizes. */
  ncclResult_t (*test)(void *req, int *done, size_t *sizes, int *nsizes);
  ncclResult_t (*close_send)(void *scomm);
  ncclResult_t (*close_recv)(void *rcomm);
  ncclResult_t (*close_listen)(void *lcomm);
};

/* Append one line to RAILNET_STATS's file (nothing when it is unset); the
 * lines of all comms and threads never interleave. */
void rn_stats_append(const char *line, size_t len);

/* Defaults for optional operations. */
ncclResult_t rn_transport_unsupported_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                                    uint64_t offset, int fd, void **mh);
ncclResult_t rn_transport_noop_iflush(void *rcomm, int n, void **data, const int *sizes, void **mhs,
                                      void **req);

#endif
