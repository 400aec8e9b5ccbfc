/* A rogue peer for the verbs transport: one side of each connection is
 * the plugin as NCCL loads it (the victim); the other connects through the
 * plugin too, then reaches into its own comm (plugin/ib/ib.h's layout, the
 * same build) and writes what no correct peer writes, with raw verbs:
 * immediates for the wrong slot, QP or group, sizes that exceed the posted
 * buffers, FIFO slots for the wrong sequence, group sizes out of range,
 * sizes and addresses that overflow, addresses never registered; or it
 * dials the victim's listener itself and sends corrupt connection info,
 * or listens for the victim's connect itself and answers it so.
 *
 * The victim must fail the comm with a WARN naming the field, return the
 * error from the call in progress and from every later call, and never
 * report wrong data as success, crash, or hang.  Runs inside the Soft-RoCE
 * VM (tests/ib/softroce.sh), also under ASan+UBSan.
 *
 *   rogue-test [--only SUBSTR] [--list] */
#include "../common/rn_test.h"
#include "../../plugin/ib/ib.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RN_IB_TRANSPORT 1 /* registry index of the verbs transport */
#define BUF 4096

enum side { VICTIM_RECV = 0, VICTIM_SEND = 1, VICTIM_ACCEPT = 2, VICTIM_CONNECT = 3 };

enum attack_kind {
  /* the victim receives; the rogue sends immediates and sizes */
  A_IMM_NO_RECV,
  A_IMM_NUSED,
  A_IMM_EXTRA,
  A_IMM_TWICE,
  A_IMM_SIZED_GROUP,
  A_IMM_SIZE_BIG,
  A_SIZES_BIG,
  A_IMM_SIZES_DISAGREE,
  A_IMM_REFUSED,
  A_SEND_NO_IMM,
  /* ... or failover messages on the bootstrap socket */
  A_FO_MAGIC,
  A_FO_SIDE,
  A_FO_EPOCH,
  A_FO_RAILS,
  A_FO_SEQ,
  A_FO_QPN,
  /* the victim sends; the rogue writes its FIFO */
  A_FIFO_SEQ,
  A_FIFO_N0,
  A_FIFO_N9,
  A_FIFO_N_DISAGREE,
  A_FIFO_SIZE_INT,
  A_FIFO_ADDR_WRAP,
  A_FIFO_ADDR_ZERO,
  A_FIFO_UNREGISTERED,
  /* ... or failover messages */
  A_FO_REBUILT_UNASKED,
  A_FO_FAIL_RAILS,
  /* the victim accepts; the rogue sends connection info */
  A_OOB_VERSION,
  A_OOB_RAILS,
  A_OOB_QPS,
  A_OOB_CTL_ADDR,
  A_OOB_MTU,
  A_OOB_LINK,
  A_OOB_GID,
  A_OOB_QPN,
  A_OOB_NAME,
  /* ... or passes the rendezvous and then stops */
  A_OOB_SILENT,
  A_OOB_HALF,
  /* the victim connects; the rogue listens and answers with connection info */
  A_CON_SILENT,
  A_CON_HALF,
  A_CON_VERSION,
  A_CON_RAILS,
  A_CON_QPS,
  A_CON_PAIR,
};

struct attack {
  const char *name;
  enum attack_kind kind;
  enum side victim;
  int nbuf; /* the victim's receive group */
  int nqps; /* QPs per rail (the sender's RAILNET_IB_QPS) */
  const char *needle;
};

static const struct attack attacks[] = {
    {"immediate names a slot with no receive posted", A_IMM_NO_RECV, VICTIM_RECV, 1, 1,
     "no receive is posted"},
    {"immediate announces more QPs than the connection has", A_IMM_NUSED, VICTIM_RECV, 1, 1,
     "QPs used, the connection has"},
    {"one immediate more than the group's QPs", A_IMM_EXTRA, VICTIM_RECV, 1, 2,
     "more than its 1 QPs"},
    {"two immediates of one sequence on one QP", A_IMM_TWICE, VICTIM_RECV, 1, 2, "after one for"},
    {"size in the immediate of a grouped receive", A_IMM_SIZED_GROUP, VICTIM_RECV, 2, 1,
     "carries a size for a 2-buffer"},
    {"size in the immediate above the posted buffer", A_IMM_SIZE_BIG, VICTIM_RECV, 1, 1,
     "bytes for a 4096-byte receive"},
    {"sizes block above the posted buffer", A_SIZES_BIG, VICTIM_RECV, 1, 1,
     "bytes for a 4096-byte receive"},
    {"immediates of one group disagree on the size", A_IMM_SIZES_DISAGREE, VICTIM_RECV, 1, 2,
     "an earlier one of sequence"},
    {"refused group (error bit) with an oversized size", A_IMM_REFUSED, VICTIM_RECV, 1, 1,
     "bytes for a 4096-byte receive"},
    {"a SEND consumes a RECV instead of a WRITE_WITH_IMM", A_SEND_NO_IMM, VICTIM_RECV, 1, 1,
     "without an immediate"},
    {"failover message with a bad magic", A_FO_MAGIC, VICTIM_RECV, 1, 1,
     "control message magic 0x00000000"},
    {"failover message of the receiver's own kind (REBUILT)", A_FO_SIDE, VICTIM_RECV, 1, 1,
     "type 3 on a receive comm"},
    {"REBUILD skipping a rebuild", A_FO_EPOCH, VICTIM_RECV, 1, 1, "REBUILD for rebuild 7"},
    {"REBUILD naming a rail the comm lacks", A_FO_RAILS, VICTIM_RECV, 1, 1, "with rails 0x2"},
    {"REBUILD past what was announced", A_FO_SEQ, VICTIM_RECV, 1, 1, "REBUILD sequence 1000"},
    {"REBUILD with QP number 1", A_FO_QPN, VICTIM_RECV, 1, 1, "REBUILD rail 0 QP 0 number 0x1"},
    {"FIFO slot carries a later sequence", A_FIFO_SEQ, VICTIM_SEND, 1, 1, "sequence field"},
    {"FIFO slot announces a group of 0 buffers", A_FIFO_N0, VICTIM_SEND, 1, 1,
     "group of 0 buffers"},
    {"FIFO slot announces a group of 9 buffers", A_FIFO_N9, VICTIM_SEND, 1, 1,
     "group of 9 buffers"},
    {"FIFO elements disagree on the group size", A_FIFO_N_DISAGREE, VICTIM_SEND, 1, 1,
     "element 0 said"},
    {"FIFO buffer size above INT_MAX", A_FIFO_SIZE_INT, VICTIM_SEND, 1, 1, "buffer of 8589934592"},
    {"FIFO buffer wraps the address space", A_FIFO_ADDR_WRAP, VICTIM_SEND, 1, 1, "buffer of 4096"},
    {"FIFO buffer at address 0", A_FIFO_ADDR_ZERO, VICTIM_SEND, 1, 1, "at 0x0"},
    {"FIFO buffer the peer never registered", A_FIFO_UNREGISTERED, VICTIM_SEND, 1, 1,
     "completion failed"},
    {"REBUILT with no rebuild under way", A_FO_REBUILT_UNASKED, VICTIM_SEND, 1, 1,
     "none under way"},
    {"FAIL naming a rail the comm lacks", A_FO_FAIL_RAILS, VICTIM_SEND, 1, 1,
     "FAIL names rails 0x20"},
    {"connection info of another version", A_OOB_VERSION, VICTIM_ACCEPT, 1, 1,
     "bad connection info"},
    {"connection info with 9 rails", A_OOB_RAILS, VICTIM_ACCEPT, 1, 1, "bad connection info"},
    {"connection info with 0 QPs", A_OOB_QPS, VICTIM_ACCEPT, 1, 1, "bad connection info"},
    {"connection info with control block address 0", A_OOB_CTL_ADDR, VICTIM_ACCEPT, 1, 1,
     "control block address"},
    {"connection info with MTU enum 7", A_OOB_MTU, VICTIM_ACCEPT, 1, 1, "MTU enum 7"},
    {"connection info with link layer 9", A_OOB_LINK, VICTIM_ACCEPT, 1, 1, "link layer 9"},
    {"connection info with a zero GID", A_OOB_GID, VICTIM_ACCEPT, 1, 1, "GID zero"},
    {"connection info with QP number 0x1000000", A_OOB_QPN, VICTIM_ACCEPT, 1, 1,
     "QP 0 number 0x1000000"},
    {"connection info with an unterminated device name", A_OOB_NAME, VICTIM_ACCEPT, 1, 1,
     "QP 0 number 0x1"},
    /* the victim's RAILNET_CONNECT_TIMEOUT_MS is 2000 for these two */
    {"no connection info after the rendezvous", A_OOB_SILENT, VICTIM_ACCEPT, 1, 1,
     "did not finish the verbs handshake within 2000 ms"},
    {"half the connection info, then nothing", A_OOB_HALF, VICTIM_ACCEPT, 1, 1,
     "did not finish the verbs handshake within 2000 ms"},
    /* the victim's RAILNET_CONNECT_TIMEOUT_MS is 2000 for these two */
    {"no answer from the listener after the rendezvous", A_CON_SILENT, VICTIM_CONNECT, 1, 1,
     "the verbs handshake did not finish within 2000 ms"},
    {"half the listener's answer, then nothing", A_CON_HALF, VICTIM_CONNECT, 1, 1,
     "the verbs handshake did not finish within 2000 ms"},
    {"the listener answers connection info of another version", A_CON_VERSION, VICTIM_CONNECT, 1,
     1, "bad connection info"},
    {"the listener answers more rails than offered", A_CON_RAILS, VICTIM_CONNECT, 1, 1,
     "answered 2 rail(s) x 1 QP(s); offered 1 x 1"},
    {"the listener answers another QP count", A_CON_QPS, VICTIM_CONNECT, 1, 1,
     "answered 1 rail(s) x 2 QP(s); offered 1 x 1"},
    {"the listener pairs its rail with a rail not offered", A_CON_PAIR, VICTIM_CONNECT, 1, 1,
     "answered that its rail 0 pairs with our rail 5 (out of range or named twice)"},
};
#define NATTACKS (int)(sizeof attacks / sizeof attacks[0])

static double tscale(void) { return rn_timeout_scale(); }

/* ---- the rogue's tools ------------------------------------------------- */

static struct rn_ib_comm *ib_comm(struct rn_peer *p, void *comm) {
  struct rn_ib_comm *c = comm;
  if (!c || c->base.magic != RN_COMM_MAGIC || c->base.transport != RN_IB_TRANSPORT) {
    peer_fail(p, "not a verbs comm (RAILNET_TRANSPORT=ib and an rxe device needed)");
    return NULL;
  }
  return c;
}

static int raw_post(struct rn_peer *p, struct ibv_qp *qp, struct ibv_send_wr *wr) {
  struct ibv_send_wr *bad = NULL;
  int rc = ibv_post_send(qp, wr, &bad); /* inline in verbs.h: the context's op */
  if (rc) return peer_fail(p, "raw ibv_post_send: %s", strerror(rc));
  return 0;
}

/* A zero-byte WRITE_WITH_IMM on the comm's QP qi. */
static int rogue_imm(struct rn_peer *p, struct rn_ib_comm *c, int qi, uint32_t imm) {
  int rail;
  struct rn_ib_qp *q = rn_ib_qp(c, qi, &rail);
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof wr);
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = c->rem_ctl;
  wr.wr.rdma.rkey = c->rail[rail].rem_rkey;
  return raw_post(p, q->qp, &wr);
}

/* An inline RDMA WRITE of len bytes into the peer's remotely writable
 * part of its control block, at offset. */
static int rogue_write(struct rn_peer *p, struct rn_ib_comm *c, uint64_t offset, const void *src,
                       uint32_t len) {
  struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = 0};
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof wr);
  if (len > c->max_inline) return peer_fail(p, "%u bytes do not fit inline", len);
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_INLINE;
  wr.wr.rdma.remote_addr = c->rem_ctl + offset;
  wr.wr.rdma.rkey = c->rail[0].rem_rkey;
  return raw_post(p, c->rail[0].qp[0].qp, &wr);
}

/* A failover message on the comm's bootstrap socket; qpn: the one QP's
 * number it names (0: none). */
static int rogue_ctl(struct rn_peer *p, struct rn_ib_comm *c, uint32_t magic, int type,
                     uint32_t epoch, uint32_t rails, uint64_t seq, uint32_t qpn) {
  static struct rn_ib_fo_msg m;
  memset(&m, 0, sizeof m);
  m.magic = magic;
  m.type = (uint8_t)type;
  m.epoch = epoch;
  m.rails = rails;
  m.seq = seq;
  m.qpn[0][0] = qpn;
  size_t off = 0;
  double end = now_s() + 10 * tscale();
  while (off < sizeof m) {
    ssize_t n = send(c->ctrl_fd, (char *)&m + off, sizeof m - off, MSG_NOSIGNAL);
    if (n > 0) off += (size_t)n;
    else if (n < 0 && errno != EAGAIN && errno != EINTR) return peer_fail(p, "send: %s", strerror(errno));
    if (now_s() > end) return peer_fail(p, "the victim's socket took no more");
  }
  return 0;
}

static uint32_t imm_of(int slot, int nused, int sized, uint32_t size) {
  uint32_t imm = (uint32_t)slot | ((uint32_t)(nused - 1) << 5);
  if (sized) imm |= RN_IB_IMM_SIZED | (size << 13);
  return imm;
}

/* ---- victim: receiver, rogue: sender ------------------------------------ */

static int rogue_sender(struct rn_peer *p) {
  const struct attack *a = p->arg;
  void *comm = NULL;
  if (peer_connect(p, 1, &comm, NULL, 30 * tscale())) return -1;
  struct rn_ib_comm *c = ib_comm(p, comm);
  int rc = c ? 0 : -1;
  if (rc == 0 && peer_sync(p, 30 * tscale())) rc = peer_fail(p, "victim gone");
  /* the victim's receive of sequence 0 has landed in our FIFO */
  double end = now_s() + 20 * tscale();
  while (rc == 0 && ((volatile struct rn_ib_fifo_elem *)c->ctl->fifo[0])->idx != 1)
    if (now_s() > end) rc = peer_fail(p, "the victim's FIFO slot never arrived");
  uint64_t big = (uint64_t)1 << 40;
  if (rc == 0) switch (a->kind) {
      case A_IMM_NO_RECV:
        rc = rogue_imm(p, c, 0, imm_of(5, 1, 1, 0));
        break;
      case A_IMM_NUSED:
        rc = rogue_imm(p, c, 0, imm_of(0, 127, 1, 0));
        break;
      case A_IMM_EXTRA: /* a group of one QP closed on QP 0, then on QP 1 (both
                           * reach the victim before its first test()) */
        rc = rogue_imm(p, c, 0, imm_of(0, 1, 1, 0));
        if (rc == 0) rc = rogue_imm(p, c, 1, imm_of(0, 1, 1, 0));
        break;
      case A_IMM_TWICE:
        rc = rogue_imm(p, c, 0, imm_of(0, 2, 1, 0));
        if (rc == 0) rc = rogue_imm(p, c, 0, imm_of(0, 2, 1, 0));
        break;
      case A_IMM_SIZED_GROUP:
        rc = rogue_imm(p, c, 0, imm_of(0, 1, 1, 8));
        break;
      case A_IMM_SIZE_BIG:
        rc = rogue_imm(p, c, 0, imm_of(0, 1, 1, RN_IB_IMM_SIZE_MAX));
        break;
      case A_SIZES_BIG:
        rc = rogue_write(p, c, 0, &big, sizeof big);
        if (rc == 0) rc = rogue_imm(p, c, 0, imm_of(0, 1, 0, 0));
        break;
      case A_IMM_SIZES_DISAGREE:
        rc = rogue_imm(p, c, 0, imm_of(0, 2, 1, 100));
        if (rc == 0) rc = rogue_imm(p, c, 1, imm_of(0, 2, 1, 200));
        break;
      case A_IMM_REFUSED: {
        uint64_t sz = 2 * BUF;
        rc = rogue_write(p, c, 0, &sz, sizeof sz);
        if (rc == 0) rc = rogue_imm(p, c, 0, imm_of(0, 1, 0, 0) | RN_IB_IMM_ERROR);
        break;
      }
      case A_SEND_NO_IMM: {
        struct ibv_send_wr wr;
        memset(&wr, 0, sizeof wr);
        wr.opcode = IBV_WR_SEND;
        rc = raw_post(p, c->rail[0].qp[0].qp, &wr);
        break;
      }
      case A_FO_MAGIC:
        rc = rogue_ctl(p, c, 0, RN_IB_FO_REBUILD, 1, 1, 0, 1000);
        break;
      case A_FO_SIDE:
        rc = rogue_ctl(p, c, RN_IB_FO_MAGIC, RN_IB_FO_REBUILT, 1, 0, 0, 1000);
        break;
      case A_FO_EPOCH:
        rc = rogue_ctl(p, c, RN_IB_FO_MAGIC, RN_IB_FO_REBUILD, 7, 1, 0, 1000);
        break;
      case A_FO_RAILS:
        rc = rogue_ctl(p, c, RN_IB_FO_MAGIC, RN_IB_FO_REBUILD, 1, 2, 0, 1000);
        break;
      case A_FO_SEQ:
        rc = rogue_ctl(p, c, RN_IB_FO_MAGIC, RN_IB_FO_REBUILD, 1, 1, 1000, 1000);
        break;
      case A_FO_QPN:
        rc = rogue_ctl(p, c, RN_IB_FO_MAGIC, RN_IB_FO_REBUILD, 1, 1, 0, 1);
        break;
      default:
        rc = peer_fail(p, "not a sender attack");
    }
  if (peer_sync(p, 60 * tscale()) && rc == 0) rc = peer_fail(p, "victim gone");
  if (peer_close(p, 1, &comm, NULL) && rc == 0) rc = -1;
  return rc;
}

/* Poll test() until it fails (as it must), bounded. */
static int expect_test_error(struct rn_peer *p, void *req, const char *needle) {
  double end = now_s() + 20 * tscale();
  for (long spins = 0;; spins++) {
    int done = 0, sz[8] = {0};
    ncclResult_t r = rn_net_test(&p->net, req, &done, sz);
    if (r != ncclSuccess) {
      if (!rn_log_has_warn(needle, NULL))
        return peer_fail(p, "test() failed (%s) but no WARN says \"%s\" (last: %s)",
                         rn_result_str(r), needle, rn_log_last_warn());
      return 0;
    }
    if (done)
      return peer_fail(p, "test() reported success (%d bytes) for a corrupt transfer", sz[0]);
    if (spins % 256 == 0 && now_s() > end)
      return peer_fail(p, "test() neither failed nor finished in 20 s");
  }
}

/* A post (isend/irecv) on a comm that failed: r and req are what it
 * returned.  It must return the error, or hand out a request whose test()
 * does; never ask for a retry, never succeed. */
static int expect_post_after_failure(struct rn_peer *p, ncclResult_t r, void *req,
                                     const char *call) {
  if (r != ncclSuccess) return 0;
  if (req == NULL) return peer_fail(p, "%s after the failure asked for a retry", call);
  int done = 0, sz[8] = {0};
  r = rn_net_test(&p->net, req, &done, sz);
  if (r == ncclSuccess)
    return peer_fail(p, "%s after the failure gave a request whose test() succeeded (done %d)", call,
                     done);
  return 0;
}

static int victim_receiver(struct rn_peer *p) {
  const struct attack *a = p->arg;
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, &lc, 30 * tscale())) return -1;
  unsigned char *buf = NULL;
  void *mh = NULL, *req = NULL;
  int rc = 0;
  if (posix_memalign((void **)&buf, 4096, 8 * BUF)) return peer_fail(p, "out of memory");
  if (rn_net_regmr(&p->net, comm, buf, 8 * BUF, NCCL_PTR_HOST, &mh) != ncclSuccess)
    rc = peer_fail(p, "regMr");
  void *d[8], *m[8];
  size_t s[8];
  int t[8];
  for (int i = 0; i < a->nbuf; i++) d[i] = buf + (size_t)i * BUF, s[i] = BUF, t[i] = i, m[i] = mh;
  rn_log_reset();
  ncclResult_t r = ncclSuccess;
  while (rc == 0 && !req && (r = rn_net_irecv(&p->net, comm, a->nbuf, d, s, t, m, &req)) == 0) {
  }
  if (rc == 0 && r != ncclSuccess) rc = peer_fail(p, "irecv: %s", rn_result_str(r));
  if (peer_sync(p, 30 * tscale()) && rc == 0) rc = peer_fail(p, "rogue gone");
  if (rc == 0 && a->kind == A_IMM_EXTRA) {
    /* The group was whole at its first immediate, so its receive may
     * complete; the extra one must fail the comm, seen against this
     * receive ("more than its 1 QPs") or, once the slot is free, against
     * no receive at all: a next receive's test() fails either way. */
    double end = now_s() + 20 * tscale();
    int done = 0, sz[8] = {0};
    while (rc == 0 && !done && (r = rn_net_test(&p->net, req, &done, sz)) == ncclSuccess)
      if (now_s() > end) rc = peer_fail(p, "test() neither failed nor finished in 20 s");
    void *probe = NULL;
    while (rc == 0 && r == ncclSuccess && !probe &&
           (r = rn_net_irecv(&p->net, comm, a->nbuf, d, s, t, m, &probe)) == ncclSuccess)
      if (now_s() > end) rc = peer_fail(p, "irecv neither failed nor posted in 20 s");
    for (int done2 = 0; rc == 0 && r == ncclSuccess && probe;) {
      r = rn_net_test(&p->net, probe, &done2, sz);
      if (r == ncclSuccess && done2) rc = peer_fail(p, "a receive after the extra immediate completed");
      if (now_s() > end) rc = peer_fail(p, "test() neither failed nor finished in 20 s");
    }
    if (rc == 0 && r == ncclSuccess) rc = peer_fail(p, "the extra immediate failed nothing");
    if (rc == 0 && !rn_log_has_warn(a->needle, NULL) && !rn_log_has_warn("where no receive is posted", NULL))
      rc = peer_fail(p, "no WARN says \"%s\" or \"where no receive is posted\" (last: %s)", a->needle,
                     rn_log_last_warn());
  } else if (rc == 0) {
    rc = expect_test_error(p, req, a->needle);
  }
  if (rc == 0) {
    void *again = NULL;
    r = rn_net_irecv(&p->net, comm, a->nbuf, d, s, t, m, &again);
    rc = expect_post_after_failure(p, r, again, "irecv");
  }
  if (peer_sync(p, 60 * tscale()) && rc == 0) rc = peer_fail(p, "rogue gone");
  rn_net_deregmr(&p->net, comm, mh);
  if (peer_close(p, 1, &comm, &lc) && rc == 0) rc = -1;
  free(buf);
  return rc;
}

/* ---- victim: sender, rogue: receiver ------------------------------------ */

static int rogue_receiver(struct rn_peer *p) {
  const struct attack *a = p->arg;
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, &lc, 30 * tscale())) return -1;
  struct rn_ib_comm *c = ib_comm(p, comm);
  int rc = c ? 0 : -1;
  struct rn_ib_fifo_elem e[2];
  memset(e, 0, sizeof e);
  int n = 1;
  e[0].addr = 0x10000000;
  e[0].size = BUF;
  e[0].rkey[0] = 0x1234;
  e[0].tag = 1;
  e[0].n = 1;
  e[0].idx = 1;
  switch (a->kind) {
    case A_FIFO_SEQ:
      e[0].idx = 6;
      break;
    case A_FIFO_N0:
      e[0].n = 0;
      break;
    case A_FIFO_N9:
      e[0].n = 9;
      break;
    case A_FIFO_N_DISAGREE:
      n = 2;
      e[1] = e[0];
      e[0].n = 2;
      e[1].n = 3;
      e[1].tag = 2;
      break;
    case A_FIFO_SIZE_INT:
      e[0].size = (uint64_t)1 << 33;
      break;
    case A_FIFO_ADDR_WRAP:
      e[0].addr = UINT64_MAX - 100;
      break;
    case A_FIFO_ADDR_ZERO:
      e[0].addr = 0;
      break;
    case A_FIFO_UNREGISTERED:
    case A_FO_REBUILT_UNASKED:
    case A_FO_FAIL_RAILS:
      break;
    default:
      rc = peer_fail(p, "not a receiver attack");
  }
  if (peer_sync(p, 30 * tscale()) && rc == 0) rc = peer_fail(p, "victim gone");
  if (rc == 0 && a->kind == A_FO_REBUILT_UNASKED)
    rc = rogue_ctl(p, c, RN_IB_FO_MAGIC, RN_IB_FO_REBUILT, 0, 0, 0, 1000);
  else if (rc == 0 && a->kind == A_FO_FAIL_RAILS)
    rc = rogue_ctl(p, c, RN_IB_FO_MAGIC, RN_IB_FO_FAIL, 0, 0x20, 0, 0);
  else if (rc == 0)
    rc = rogue_write(p, c, 0, e, (uint32_t)(sizeof e[0] * (size_t)n));
  if (peer_sync(p, 60 * tscale()) && rc == 0) rc = peer_fail(p, "victim gone");
  if (peer_close(p, 1, &comm, &lc) && rc == 0) rc = -1;
  return rc;
}

static int victim_sender(struct rn_peer *p) {
  const struct attack *a = p->arg;
  void *comm = NULL;
  if (peer_connect(p, 1, &comm, NULL, 30 * tscale())) return -1;
  unsigned char *buf = NULL;
  void *mh = NULL, *req = NULL;
  int rc = 0;
  if (posix_memalign((void **)&buf, 4096, BUF)) return peer_fail(p, "out of memory");
  memset(buf, 0x5a, BUF);
  if (rn_net_regmr(&p->net, comm, buf, BUF, NCCL_PTR_HOST, &mh) != ncclSuccess)
    rc = peer_fail(p, "regMr");
  rn_log_reset();
  if (peer_sync(p, 30 * tscale()) && rc == 0) rc = peer_fail(p, "rogue gone");
  /* isend until it fails or posts; a request is only right when the slot
   * itself was well-formed and only the NIC can tell (an unregistered
   * buffer), or when the comm had failed already (its WARN is out, and
   * the request's test() reports the error) */
  double end = now_s() + 20 * tscale();
  ncclResult_t r = ncclSuccess;
  for (long spins = 0; rc == 0 && !req; spins++) {
    r = rn_net_isend(&p->net, comm, buf, 1024, 1, mh, &req);
    if (r != ncclSuccess) break;
    if (spins % 256 == 0 && now_s() > end) rc = peer_fail(p, "isend neither failed nor posted");
  }
  if (rc == 0 && req) {
    if (a->kind != A_FIFO_UNREGISTERED && !rn_log_has_warn(a->needle, NULL))
      rc = peer_fail(p, "isend accepted a corrupt FIFO slot (no WARN says \"%s\" yet; last: %s)",
                     a->needle, rn_log_last_warn());
    else
      rc = expect_test_error(p, req, a->needle);
  } else if (rc == 0 && !rn_log_has_warn(a->needle, NULL)) {
    rc = peer_fail(p, "isend failed (%s) but no WARN says \"%s\" (last: %s)", rn_result_str(r),
                   a->needle, rn_log_last_warn());
  }
  if (rc == 0) {
    void *again = NULL;
    r = rn_net_isend(&p->net, comm, buf, 1024, 1, mh, &again);
    rc = expect_post_after_failure(p, r, again, "isend");
  }
  if (peer_sync(p, 60 * tscale()) && rc == 0) rc = peer_fail(p, "rogue gone");
  rn_net_deregmr(&p->net, comm, mh);
  if (peer_close(p, 1, &comm, NULL) && rc == 0) rc = -1;
  free(buf);
  return rc;
}

/* ---- victim: listener, rogue: dials with corrupt connection info -------- */

/* The first len bytes of info on fd (non-blocking). */
static int rogue_write_info(struct rn_peer *p, int fd, const struct rn_ib_conn_info *info,
                            size_t len) {
  for (size_t off = 0; off < len;) {
    ssize_t w = write(fd, (const char *)info + off, len - off);
    if (w > 0)
      off += (size_t)w;
    else if (w < 0 && errno != EAGAIN && errno != EINTR)
      return peer_fail(p, "write: %s", strerror(errno));
    else
      sleep_us(1000);
  }
  return 0;
}

static int rogue_dialer(struct rn_peer *p) {
  const struct attack *a = p->arg;
  struct rn_handle h;
  if (peer_read(p, &h, sizeof h, 30 * tscale())) return peer_fail(p, "no handle");
  struct rn_ib_payload pl;
  union rn_sockaddr sa;
  memcpy(&pl, h.payload, sizeof pl);
  if (rn_sockaddr_from_wire(&pl.addr, &sa)) return peer_fail(p, "handle without an address");
  struct rn_rdv_dial *dial = NULL;
  if (rn_rdv_dial_create(&sa, 1, h.nonce, 0, &dial) != ncclSuccess) return peer_fail(p, "dial");
  struct rn_rdv_conn conn;
  int ready = 0, rc = 0;
  double end = now_s() + 20 * tscale();
  while (!ready && rc == 0) {
    if (rn_rdv_dial_poll(dial, &conn, &ready) != ncclSuccess) rc = peer_fail(p, "dial poll");
    if (!ready && now_s() > end) rc = peer_fail(p, "no connection to the victim");
  }
  struct rn_ib_conn_info info;
  memset(&info, 0, sizeof info);
  info.magic = RN_IB_INFO_MAGIC;
  info.version = RN_IB_INFO_VERSION;
  info.nrails = 1;
  info.nqps = 1;
  info.ctl_addr = 0x10000;
  snprintf(info.dev, sizeof info.dev, "rogue");
  info.rail[0].gid[15] = 1;
  info.rail[0].rkey = 1;
  info.rail[0].link = IBV_LINK_LAYER_ETHERNET;
  info.rail[0].mtu = IBV_MTU_1024;
  info.qpn[0][0] = 0x100;
  switch (a->kind) {
    case A_OOB_VERSION:
      info.version = RN_IB_INFO_VERSION + 1;
      break;
    case A_OOB_RAILS:
      info.nrails = RN_MAX_RAILS + 1;
      break;
    case A_OOB_QPS:
      info.nqps = 0;
      break;
    case A_OOB_CTL_ADDR:
      info.ctl_addr = 0;
      break;
    case A_OOB_MTU:
      info.rail[0].mtu = 7;
      break;
    case A_OOB_LINK:
      info.rail[0].link = 9;
      break;
    case A_OOB_GID:
      info.rail[0].gid[15] = 0;
      break;
    case A_OOB_QPN:
      info.qpn[0][0] = 0x1000000;
      break;
    case A_OOB_NAME:
      memset(info.dev, 'A', sizeof info.dev);
      info.qpn[0][0] = 1;
      break;
    case A_OOB_SILENT:
    case A_OOB_HALF:
      break;
    default:
      rc = peer_fail(p, "not a connection-info attack");
  }
  const size_t len = a->kind == A_OOB_SILENT ? 0 : a->kind == A_OOB_HALF ? sizeof info / 2
                                                                          : sizeof info;
  if (rc == 0) rc = rogue_write_info(p, conn.ctrl_fd, &info, len);
  if (peer_sync(p, 60 * tscale()) && rc == 0) rc = peer_fail(p, "victim gone");
  if (ready) rn_rdv_conn_close(&conn);
  rn_rdv_dial_destroy(dial);
  return rc;
}

static int victim_listener(struct rn_peer *p) {
  const struct attack *a = p->arg;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL, *comm = NULL;
  memset(handle, 0, sizeof handle);
  ncclResult_t r = rn_net_listen(&p->net, p->dev, handle, &lc);
  if (r != ncclSuccess) return peer_fail(p, "listen: %s", rn_result_str(r));
  rn_log_reset();
  if (peer_write(p, handle, sizeof handle)) return peer_fail(p, "handle pipe");
  int rc = 0;
  double end = now_s() + 20 * tscale();
  for (long spins = 0;; spins++) {
    r = rn_net_accept(&p->net, lc, &comm);
    if (r != ncclSuccess) break;
    if (comm) {
      rc = peer_fail(p, "accept returned a comm for corrupt connection info");
      break;
    }
    if (spins % 64 == 0 && now_s() > end) {
      rc = peer_fail(p, "accept neither failed nor finished in 20 s");
      break;
    }
    sleep_us(100);
  }
  if (rc == 0 && !rn_log_has_warn(a->needle, NULL))
    rc = peer_fail(p, "accept failed (%s) but no WARN says \"%s\" (last: %s)", rn_result_str(r),
                   a->needle, rn_log_last_warn());
  if (peer_sync(p, 60 * tscale()) && rc == 0) rc = peer_fail(p, "rogue gone");
  if (comm) rn_net_close_recv(&p->net, comm);
  rn_net_close_listen(&p->net, lc);
  return rc;
}

/* ---- victim: connector, rogue: listens and answers ---------------------- */

/* The rogue takes a real handle from its own listen comm, closes that, and
 * listens on the handle's port itself behind the rendezvous (the nonce
 * admits the victim): the victim's connect reaches it as it would a real
 * listener, and the rogue answers the connection info the victim sends
 * with nothing, half an answer, or a well-formed answer (the victim's own
 * info, which names real GIDs and MTUs) with one field wrong. */
static int rogue_listener(struct rn_peer *p) {
  const struct attack *a = p->arg;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL;
  memset(handle, 0, sizeof handle);
  ncclResult_t r = rn_net_listen(&p->net, p->dev, handle, &lc);
  if (r != ncclSuccess) return peer_fail(p, "listen: %s", rn_result_str(r));
  struct rn_handle h;
  memcpy(&h, handle, sizeof h);
  struct rn_ib_payload pl;
  union rn_sockaddr sa, bound;
  memcpy(&pl, h.payload, sizeof pl);
  if (rn_sockaddr_from_wire(&pl.addr, &sa)) return peer_fail(p, "handle without an address");
  rn_net_close_listen(&p->net, lc);
  int lfd = -1, rc = 0;
  struct rn_rdv *rdv = NULL;
  if (rn_sock_listen(&sa, &lfd, &bound) != ncclSuccess)
    return peer_fail(p, "listening on the handle's port");
  if (rn_rdv_create_ctrl_only(&lfd, 1, h.nonce, &rdv) != ncclSuccess) {
    close(lfd);
    return peer_fail(p, "rendezvous");
  }
  if (peer_write(p, handle, sizeof handle)) rc = peer_fail(p, "handle pipe");
  struct rn_rdv_conn conn;
  int ready = 0;
  double end = now_s() + 20 * tscale();
  while (rc == 0 && !ready) {
    if (rn_rdv_poll(rdv, &conn, &ready) != ncclSuccess) rc = peer_fail(p, "rendezvous poll");
    if (!ready && now_s() > end) rc = peer_fail(p, "the victim never connected");
    if (!ready) sleep_us(100);
  }
  struct rn_ib_conn_info info;
  for (size_t off = 0; rc == 0 && off < sizeof info;) {
    ssize_t k = read(conn.ctrl_fd, (char *)&info + off, sizeof info - off);
    if (k > 0)
      off += (size_t)k;
    else if (k == 0 || (errno != EAGAIN && errno != EINTR))
      rc = peer_fail(p, "reading the victim's connection info");
    else if (now_s() > end)
      rc = peer_fail(p, "no connection info from the victim");
    else
      sleep_us(1000);
  }
  if (rc == 0 && info.nrails != 1) rc = peer_fail(p, "the victim offered %u rails", info.nrails);
  switch (a->kind) {
    case A_CON_SILENT:
    case A_CON_HALF:
      break;
    case A_CON_VERSION:
      info.version = RN_IB_INFO_VERSION + 1;
      break;
    case A_CON_RAILS:
      info.nrails = 2;
      info.rail[1] = info.rail[0];
      memcpy(info.qpn[1], info.qpn[0], sizeof info.qpn[0]);
      break;
    case A_CON_QPS:
      info.nqps = 2;
      info.qpn[0][1] = info.qpn[0][0];
      break;
    case A_CON_PAIR:
      info.peer_rail[0] = 5;
      break;
    default:
      rc = peer_fail(p, "not a listener attack");
  }
  const size_t len = a->kind == A_CON_SILENT ? 0 : a->kind == A_CON_HALF ? sizeof info / 2
                                                                          : sizeof info;
  if (rc == 0) rc = rogue_write_info(p, conn.ctrl_fd, &info, len);
  if (peer_sync(p, 60 * tscale()) && rc == 0) rc = peer_fail(p, "victim gone");
  if (ready) rn_rdv_conn_close(&conn);
  rn_rdv_destroy(rdv);
  close(lfd);
  return rc;
}

static int victim_connector(struct rn_peer *p) {
  const struct attack *a = p->arg;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (peer_read(p, handle, sizeof handle, 30 * tscale())) return peer_fail(p, "no handle");
  rn_log_reset();
  void *comm = NULL;
  ncclResult_t r = ncclSuccess;
  int rc = 0;
  double t0 = now_s(), end = t0 + 20 * tscale();
  for (long spins = 0;; spins++) {
    r = rn_net_connect(&p->net, p->dev, handle, &comm);
    if (r != ncclSuccess) break;
    if (comm) {
      rc = peer_fail(p, "connect returned a comm for a corrupt answer");
      break;
    }
    if (spins % 64 == 0 && now_s() > end) {
      rc = peer_fail(p, "connect neither failed nor finished in 20 s");
      break;
    }
    sleep_us(100);
  }
  if (rc == 0 && !rn_log_has_warn(a->needle, NULL))
    rc = peer_fail(p, "connect failed (%s) but no WARN says \"%s\" (last: %s)", rn_result_str(r),
                   a->needle, rn_log_last_warn());
  if (peer_sync(p, 60 * tscale()) && rc == 0) rc = peer_fail(p, "rogue gone");
  if (comm) rn_net_close_send(&p->net, comm);
  return rc;
}

/* ---- the runner ----------------------------------------------------------- */

int main(int argc, char **argv) {
  const char *only = NULL;
  int list = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--list"))
      list = 1;
    else {
      fprintf(stderr, "usage: rogue-test [--only SUBSTR] [--list]\n");
      return 2;
    }
  }
  if (list) {
    for (int i = 0; i < NATTACKS; i++) printf("%s\n", attacks[i].name);
    return 0;
  }
  rn_default_env();
  const char *renv = getenv("RN_CONF_RECV_ENV"), *senv = getenv("RN_CONF_SEND_ENV");
  char recv_env[1024], send_env[1024];
  snprintf(recv_env, sizeof recv_env, "%s", renv ? renv : "");
  snprintf(send_env, sizeof send_env, "%s", senv ? senv : "");
  int n = 0;
  for (int i = 0; i < NATTACKS; i++) n += !only || strstr(attacks[i].name, only);
  tap_plan(n);
  for (int i = 0; i < NATTACKS; i++) {
    const struct attack *a = &attacks[i];
    if (only && !strstr(a->name, only)) continue;
    char env[1200];
    /* the sender decides the QPs per rail: both sides get the setting */
    snprintf(env, sizeof env, "%s%sRAILNET_IB_QPS=%d%s", send_env, send_env[0] ? "," : "", a->nqps,
             a->kind == A_CON_SILENT || a->kind == A_CON_HALF ? ",RAILNET_CONNECT_TIMEOUT_MS=2000"
                                                              : "");
    setenv("RN_CONF_SEND_ENV", env, 1);
    snprintf(env, sizeof env, "%s%sRAILNET_IB_QPS=%d%s", recv_env, recv_env[0] ? "," : "", a->nqps,
             a->kind == A_OOB_SILENT || a->kind == A_OOB_HALF ? ",RAILNET_CONNECT_TIMEOUT_MS=2000"
                                                              : "");
    setenv("RN_CONF_RECV_ENV", env, 1);
    struct rn_pair_opts o;
    memset(&o, 0, sizeof o);
    o.version = 11;
    o.timeout_s = (int)(90 * tscale());
    o.init = 1;
    o.seed = 1;
    o.arg = (void *)a;
    rn_peer_fn recv_fn = a->victim == VICTIM_RECV     ? victim_receiver
                         : a->victim == VICTIM_SEND   ? rogue_receiver
                         : a->victim == VICTIM_ACCEPT ? victim_listener
                                                      : rogue_listener;
    rn_peer_fn send_fn = a->victim == VICTIM_RECV     ? rogue_sender
                         : a->victim == VICTIM_SEND   ? victim_sender
                         : a->victim == VICTIM_ACCEPT ? rogue_dialer
                                                      : victim_connector;
    char why[512] = "";
    double t0 = now_s();
    int rc = rn_run_pair(recv_fn, send_fn, &o, why, sizeof why);
    static const char *const who[] = {"receiver", "sender", "listener", "connector"};
    tap_result(rc == 0, "victim %s: %s (%.1f s)%s%s", who[a->victim], a->name, now_s() - t0,
               rc ? ": " : "", rc ? why : "");
  }
  return tap_failed() ? 1 : 0;
}
