/* Verbs connection setup and teardown.  The out-of-band exchange runs over
 * one nonce-checked TCP connection (rendezvous.h's dial and rendezvous, no
 * data streams) as non-blocking state machines: listen/connect/accept never
 * block and return success with a NULL comm until ready.
 *
 *   connector (send side)              listener (recv side)
 *   dial, create QPs (INIT)   --info-->  pair rails (pairing.c), create
 *   on every rail (+standby)             QPs (INIT), post RECVs, RTR/RTS
 *                                        against the sender's paired QPs
 *   order its rails as the    <--info--  (peer_rail: the sender's rail
 *   answer pairs them, RTR/RTS           each of its rails pairs with)
 *   send "ready"              --ready->  comm returned
 *
 * accept waits for "ready" so the receiver never writes a FIFO slot into a
 * QP that is not yet RTR.  The TCP connection stays open afterwards: its
 * EOF is how a waiting side notices a dead peer that owes it data. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stddef.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "railnet/pairing.h"
#include "railnet/param.h"
#include "ib.h"

enum rn_ib_accept_stage {
  RN_IB_ACC_RDV = 0,
  RN_IB_ACC_RECV_INFO,
  RN_IB_ACC_SEND_INFO,
  RN_IB_ACC_RECV_READY
};

struct rn_ib_listen_comm {
  struct rn_comm_base base;
  struct rn_ib_live live;
  struct rn_rails rails;
  int lfd;
  struct rn_rdv *rdv;
  char addr[64];
  /* the connection being accepted */
  enum rn_ib_accept_stage stage;
  int fd;
  size_t off;
  struct rn_ib_conn_info rinfo, linfo;
  struct rn_ib_comm *comm;
  uint8_t ready;
  int64_t since_ms; /* when its rendezvous completed */
};

enum rn_ib_connect_stage {
  RN_IB_CON_DIAL = 0,
  RN_IB_CON_SEND_INFO,
  RN_IB_CON_RECV_INFO,
  RN_IB_CON_SEND_READY
};
struct rn_ib_connect_state {
  enum rn_ib_connect_stage stage;
  int tc; /* the comm's traffic class, -1 for none */
  struct rn_rdv_dial *dial;
  int fd;
  size_t off;
  struct rn_ib_conn_info linfo, rinfo;
  struct rn_ib_comm *comm;
  char peer[64];
  int64_t start_ms; /* the first call */
};

/* --- open comms -------------------------------------------------------- */

static struct rn_shared_list rn_ib_live = RN_SHARED_LIST_INIT(rn_ib_live);

static void rn_ib_live_add(struct rn_ib_live *l, int is_listen) {
  l->is_listen = is_listen;
  rn_shared_list_add_tail(&rn_ib_live, &l->link);
}

static void rn_ib_live_del(struct rn_ib_live *l) { rn_shared_list_del(&rn_ib_live, &l->link); }

struct rn_shared_list rn_ib_held = RN_SHARED_LIST_INIT(rn_ib_held);

/* --- addresses ---------------------------------------------------------- */

struct rn_ib_addr_pick {
  const struct rn_rails *rails;
  int rank; /* of the best address so far; lower is better */
  union rn_sockaddr addr;
};

/* Rank an address: on rail k's netdev 2k (IPv4) or 2k+1 (IPv6); on any
 * other interface but loopback after every rail; the first of a rank
 * wins. */
static int rn_ib_addr_visit(void *arg, const char *ifname, unsigned flags,
                            const union rn_sockaddr *addr) {
  struct rn_ib_addr_pick *p = arg;
  int v6 = addr->sa.sa_family == AF_INET6, rank = -1;
  for (int k = 0; k < p->rails->n && rank < 0; k++) {
    const char *nd = p->rails->nic[k]->netdev;
    if (nd[0] && strcmp(ifname, nd) == 0) rank = 2 * k + v6;
  }
  if (rank < 0 && !(flags & IFF_LOOPBACK)) rank = 2 * RN_MAX_RAILS + v6;
  if (rank >= 0 && rank < p->rank) {
    p->rank = rank;
    p->addr = *addr;
  }
  return 0;
}

/* The bootstrap address peers dial: the first rail's netdev (IPv4, then
 * IPv6), else any other up interface, else loopback. */
static ncclResult_t rn_ib_listen_addr(const struct rn_rails *r, union rn_sockaddr *sa) {
  struct rn_ib_addr_pick p = {.rails = r, .rank = 2 * RN_MAX_RAILS + 2};
  if (rn_sock_each_ifaddr(rn_ib_addr_visit, &p) == 0 && p.rank < 2 * RN_MAX_RAILS + 2) {
    *sa = p.addr;
    return ncclSuccess;
  }
  memset(sa, 0, sizeof(*sa));
  sa->in.sin_family = AF_INET;
  sa->in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return ncclSuccess;
}

/* --- QPs ---------------------------------------------------------------- */

/* What a QP lets the peer do: data QPs only accept RDMA writes (the
 * peer's FIFO writes, data and sizes); only the loopback flush QP reads. */
enum rn_ib_qp_role { RN_IB_QP_DATA = 0, RN_IB_QP_FLUSH = 1 };

static ncclResult_t rn_ib_qp_create(struct rn_ib_rail *rl, enum rn_ib_qp_role role,
                                    uint32_t max_inline, struct ibv_qp **qp,
                                    struct ibv_qp_cap *cap) {
  struct rn_ib_device *device = rl->port->device;
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof(ia));
  ia.send_cq = rl->cq;
  ia.recv_cq = rl->cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr =
      RN_IB_SEND_DEPTH < device->attr.max_qp_wr ? RN_IB_SEND_DEPTH : device->attr.max_qp_wr;
  ia.cap.max_recv_wr = RN_IB_RECV_DEPTH;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = max_inline;
  RN_CHECK(rn_ibv_create_qp(device->pd, &ia, qp));
  if (cap) *cap = ia.cap; /* what the provider granted */
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = (uint8_t)rl->port->num;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
                      (role == RN_IB_QP_FLUSH ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE);
  ncclResult_t res = rn_ibv_modify_qp(
      *qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (res != ncclSuccess) {
    (void)rn_ibv_destroy_qp(*qp);
    *qp = NULL;
  }
  return res;
}

/* The service level of a comm with traffic class tc (>= 0). */
static uint8_t rn_ib_sl(int tc) {
  int sl = (int)rn_params()->ib_sl;
  return (uint8_t)(sl >= 0 ? sl : tc >> 5);
}

/* tc: the comm's traffic class, -1 for none (the port's defaults). */
static ncclResult_t rn_ib_qp_connect(struct ibv_qp *qp, enum rn_ib_qp_role role,
                                     const struct rn_ib_port *port,
                                     const struct rn_ib_rail_info *rem, uint32_t rqpn, int tc) {
  const struct rn_params *p = rn_params();
  /* Data QPs never issue or answer READs or atomics. */
  uint8_t rd_atomic = role == RN_IB_QP_FLUSH ? 1 : 0;
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = port->mtu < (enum ibv_mtu)rem->mtu ? port->mtu : (enum ibv_mtu)rem->mtu;
  a.dest_qp_num = rqpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = rd_atomic;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = (uint8_t)port->num;
  if (port->link == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, rem->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)port->gid_index;
    a.ah_attr.grh.hop_limit = 255;
    if (tc >= 0) a.ah_attr.grh.traffic_class = (uint8_t)tc;
  } else {
    a.ah_attr.dlid = rem->lid;
  }
  if (tc >= 0) a.ah_attr.sl = rn_ib_sl(tc);
  RN_CHECK(rn_ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = (uint8_t)p->ib_timeout;
  a.retry_cnt = (uint8_t)p->ib_retry_cnt;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = rd_atomic;
  RN_CHECK(rn_ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
  return ncclSuccess;
}

static void rn_ib_rail_info_fill(const struct rn_ib_rail *rl, struct rn_ib_rail_info *ri) {
  rn_ib_port_info(rl->port, ri);
  ri->rkey = rl->remote_mr ? rl->remote_mr->rkey : 0;
}

ncclResult_t rn_ib_post_recvs(struct rn_ib_comm *c, int qi, int count) {
  struct ibv_recv_wr wr[RN_IB_RECV_DEPTH];
  if (count > RN_IB_RECV_DEPTH) count = RN_IB_RECV_DEPTH;
  memset(wr, 0, sizeof(wr[0]) * (size_t)count);
  for (int i = 0; i < count; i++) {
    wr[i].wr_id = RN_IB_WRID(RN_IB_WR_RECV, qi, 0, 0);
    wr[i].next = i + 1 < count ? &wr[i + 1] : NULL;
  }
  int rail;
  return rn_ibv_post_recv(rn_ib_qp(c, qi, &rail)->qp, wr);
}

/* --- comms -------------------------------------------------------------- */

void rn_ib_live_all(struct rn_ib_comm *c) {
  c->nlive = 0;
  for (int r = 0; r < RN_MAX_RAILS; r++) {
    c->pos[r] = -1;
    if (r >= c->nrails || r == c->standby) continue;
    c->pos[r] = (int8_t)c->nlive;
    c->in_use[c->nlive++] = r;
  }
}

void rn_ib_rail_stop(struct rn_ib_comm *c, int r) {
  struct rn_ib_rail *rl = &c->rail[r];
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_ERR;
  for (int k = 0; k < c->nqps; k++)
    if (rl->qp[k].qp) (void)rn_ibv_modify_qp(rl->qp[k].qp, &a, IBV_QP_STATE);
}

void rn_ib_rail_free(struct rn_ib_comm *c, int r) {
  struct rn_ib_rail *rl = &c->rail[r];
  if (rl->flush_qp) (void)rn_ibv_destroy_qp(rl->flush_qp);
  rl->flush_qp = NULL;
  for (int k = c->nqps - 1; k >= 0; k--) {
    if (rl->qp[k].qp) (void)rn_ibv_destroy_qp(rl->qp[k].qp);
    memset(&rl->qp[k], 0, sizeof(rl->qp[k]));
  }
  if (rl->cq) (void)rn_ibv_destroy_cq(rl->cq);
  rl->cq = NULL;
}

static void rn_ib_comm_free(struct rn_ib_comm *c) {
  if (!c) return;
  rn_ib_live_del(&c->live);
  rn_shared_list_del(&rn_ib_held, &c->held); /* waits out a sweep visiting it */
  for (int r = c->nlocal - 1; r >= 0; r--) {
    struct rn_ib_rail *rl = &c->rail[r];
    rn_ib_rail_free(c, r);
    if (rl->remote_mr) (void)rn_ibv_dereg_mr(rl->remote_mr);
    if (rl->local_mr) (void)rn_ibv_dereg_mr(rl->local_mr);
  }
  free(c->ctl);
  if (c->ctrl_fd >= 0) close(c->ctrl_fd);
  for (size_t i = 0; i < sizeof(c->send_reqs) / sizeof(c->send_reqs[0]); i++)
    rn_req_base_end(&c->send_reqs[i].base);
  for (int i = 0; i < RN_IB_SLOTS; i++) {
    rn_req_base_end(&c->recv_reqs[i].base);
    rn_req_base_end(&c->flush_reqs[i].base);
  }
  free(c);
}

/* A receiver's loopback QP for GDR flush READs, on a rail whose NIC can
 * see GPU memory. */
static ncclResult_t rn_ib_flush_open(struct rn_ib_rail *rl) {
  if (!(rl->port->nic->ptr_support & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF))) return ncclSuccess;
  RN_CHECK(rn_ib_qp_create(rl, RN_IB_QP_FLUSH, 0, &rl->flush_qp, NULL));
  struct rn_ib_rail_info self;
  rn_ib_rail_info_fill(rl, &self);
  return rn_ib_qp_connect(rl->flush_qp, RN_IB_QP_FLUSH, rl->port, &self, rl->flush_qp->qp_num, -1);
}

ncclResult_t rn_ib_rail_open(struct rn_ib_comm *c, int r) {
  struct rn_ib_rail *rl = &c->rail[r];
  struct rn_ib_device *device = rl->port->device;
  int cqe = RN_IB_CQ_DEPTH < device->attr.max_cqe ? RN_IB_CQ_DEPTH : device->attr.max_cqe;
  RN_CHECK(rn_ibv_create_cq(device->context, cqe, &rl->cq));
  uint32_t inl = c->max_inline < device->max_inline ? c->max_inline : device->max_inline;
  for (int k = 0; k < c->nqps; k++) {
    struct ibv_qp_cap cap;
    RN_CHECK(rn_ib_qp_create(rl, RN_IB_QP_DATA, inl, &rl->qp[k].qp, &cap));
    if (cap.max_inline_data < c->max_inline) c->max_inline = cap.max_inline_data;
    if (cap.max_send_wr < c->sq_depth) c->sq_depth = cap.max_send_wr;
  }
  return c->is_send ? ncclSuccess : rn_ib_flush_open(rl);
}

/* The part of the control block the peer writes: a sender's FIFO, a
 * receiver's sizes. */
static void *rn_ib_ctl_remote(struct rn_ib_ctl *ctl, int is_send, size_t *len) {
  *len = is_send ? sizeof(ctl->fifo) : sizeof(ctl->sizes);
  return is_send ? (void *)ctl->fifo : (void *)ctl->sizes;
}

/* Allocate a comm with CQs, QPs (INIT) and the registered control block on
 * the first nrails rails, and on the device's standby NIC as one more when
 * standby is set. */
static ncclResult_t rn_ib_comm_create(const struct rn_rails *rails, int nrails, int standby,
                                      int nqps, int is_send, struct rn_ib_comm **out) {
  ncclResult_t res = ncclSuccess;
  struct rn_ib_comm *c = calloc(1, sizeof(*c));
  if (!c) {
    RN_WARN("out of memory for a comm");
    return ncclSystemError;
  }
  c->ctrl_fd = -1;
  c->is_send = is_send;
  c->tc = -1;
  c->nqps = nqps;
  c->standby = standby ? nrails : -1;
  nrails += standby != 0;
  c->nrails = nrails;
  c->sq_depth = RN_IB_SEND_DEPTH;
  c->alive_calls = 1;
  int64_t want_inline = rn_params()->ib_inline;
  c->max_inline = want_inline < 0 ? UINT32_MAX : (uint32_t)want_inline;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (posix_memalign((void **)&c->ctl, page, sizeof(*c->ctl))) {
    RN_WARN("out of memory for a control block");
    res = ncclSystemError;
    goto out_free;
  }
  memset(c->ctl, 0, sizeof(*c->ctl));
  size_t rlen;
  void *remote = rn_ib_ctl_remote(c->ctl, is_send, &rlen);
  for (int r = 0; r < nrails; r++) {
    struct rn_ib_rail *rl = &c->rail[r];
    const struct rn_nic *nic = r == c->standby ? rails->standby : rails->nic[r];
    rl->port = rn_ib_port_of(nic);
    if (!rl->port) {
      RN_WARN("rail %d (%s) is not a verbs NIC", r, nic->name);
      res = ncclInternalError;
      goto out_free;
    }
    c->nlocal = r + 1;
    struct rn_ib_device *device = rl->port->device;
    RN_CHECK_GOTO(
        rn_ibv_reg_mr(device->pd, c->ctl, sizeof(*c->ctl), IBV_ACCESS_LOCAL_WRITE, &rl->local_mr),
        res, out_free);
    RN_CHECK_GOTO(rn_ibv_reg_mr(device->pd, remote, rlen,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &rl->remote_mr),
                  res, out_free);
    RN_CHECK_GOTO(rn_ib_rail_open(c, r), res, out_free);
  }
  if (c->max_inline == UINT32_MAX) c->max_inline = 0;
  rn_ib_live_all(c);
  *out = c;
  return ncclSuccess;
out_free:
  rn_ib_comm_free(c);
  return res;
}

static void rn_ib_info_fill(const struct rn_ib_comm *c, int is_send, struct rn_ib_conn_info *info) {
  memset(info, 0, sizeof(*info));
  info->magic = RN_IB_INFO_MAGIC;
  info->version = RN_IB_INFO_VERSION;
  info->nrails = (uint8_t)c->nrails;
  info->nqps = (uint8_t)c->nqps;
  info->standby = c->standby >= 0;
  size_t rlen;
  info->ctl_addr = (uint64_t)(uintptr_t)rn_ib_ctl_remote(c->ctl, is_send, &rlen);
  rn_ib_strcpy(info->dev, sizeof(info->dev), c->rail[0].port->nic->name);
  for (int r = 0; r < c->nrails; r++) {
    rn_ib_rail_info_fill(&c->rail[r], &info->rail[r]);
    for (int k = 0; k < c->nqps; k++) info->qpn[r][k] = c->rail[r].qp[k].qp->qp_num;
  }
}

/* The peer's connection info, field by field, before any of it is used
 * (the rails' link layers are checked against ours in rn_ib_comm_connect).
 * peer_is_send: what the peer must be.  Names in messages are bounded. */
static ncclResult_t rn_ib_info_check(struct rn_ib_conn_info *i, int peer_is_send,
                                     const char *peer) {
  i->dev[sizeof(i->dev) - 1] = '\0';
  /* It goes into log lines and RAILNET_STATS' JSON: a name's characters
   * only (a quote or a newline would forge fields). */
  for (char *d = i->dev; *d != '\0'; d++)
    if (!isalnum((unsigned char)*d) && strchr("_.:@+-", *d) == NULL) *d = '?';
  if (i->magic != RN_IB_INFO_MAGIC || i->version != RN_IB_INFO_VERSION || i->nrails < 1 ||
      i->nrails > RN_MAX_RAILS || i->nqps < 1 || i->nqps > RN_IB_MAX_QPS || i->standby > 1 ||
      (i->standby && i->nrails < 2)) {
    RN_WARN(
        "bad connection info from %s (magic %08x version %u, %u rails, %u QPs, standby %u; "
        "expected %08x version %u, 1..%d rails, 1..%d QPs, a standby only beside a rail)",
        peer, i->magic, i->version, i->nrails, i->nqps, i->standby, RN_IB_INFO_MAGIC,
        RN_IB_INFO_VERSION, RN_MAX_RAILS, RN_IB_MAX_QPS);
    return ncclRemoteError;
  }
  size_t need =
      peer_is_send ? sizeof(((struct rn_ib_ctl *)0)->fifo) : sizeof(((struct rn_ib_ctl *)0)->sizes);
  if (i->ctl_addr == 0 || i->ctl_addr > UINT64_MAX - need) {
    RN_WARN("bad connection info from %s: control block address 0x%llx", peer,
            (unsigned long long)i->ctl_addr);
    return ncclRemoteError;
  }
  for (int r = 0; r < i->nrails; r++) {
    const struct rn_ib_rail_info *ri = &i->rail[r];
    static const uint8_t zero[16];
    int bad_link = ri->link != IBV_LINK_LAYER_INFINIBAND && ri->link != IBV_LINK_LAYER_ETHERNET;
    int bad_mtu = ri->mtu < IBV_MTU_256 || ri->mtu > IBV_MTU_4096;
    int bad_addr = ri->link == IBV_LINK_LAYER_ETHERNET ? memcmp(ri->gid, zero, 16) == 0
                                                       : ri->lid == 0 || ri->lid >= 0xc000;
    if (bad_link || bad_mtu || bad_addr) {
      RN_WARN(
          "bad connection info from %s, rail %d: link layer %u, MTU enum %u, LID 0x%x, GID "
          "%s",
          peer, r, ri->link, ri->mtu, ri->lid, memcmp(ri->gid, zero, 16) == 0 ? "zero" : "set");
      return ncclRemoteError;
    }
    for (int k = 0; k < i->nqps; k++) {
      uint32_t qpn = i->qpn[r][k];
      if (qpn < 2 || qpn > 0xffffff) {
        RN_WARN("bad connection info from %s: rail %d QP %d number 0x%x", peer, r, k, qpn);
        return ncclRemoteError;
      }
    }
  }
  return ncclSuccess;
}

ncclResult_t rn_ib_rail_connect(struct rn_ib_comm *c, int r, const uint32_t *qpn) {
  for (int k = 0; k < c->nqps; k++)
    RN_CHECK(rn_ib_qp_connect(c->rail[r].qp[k].qp, RN_IB_QP_DATA, c->rail[r].port, &c->rem_rail[r],
                              qpn[k], c->tc));
  return ncclSuccess;
}

/* Move every QP of the first c->nrails rails to RTS against the peer's. */
static ncclResult_t rn_ib_comm_connect(struct rn_ib_comm *c, const struct rn_ib_conn_info *rem,
                                       int tc) {
  c->tc = tc;
  rn_ib_live_all(c);
  c->mtu_bytes = 1 << 30;
  for (int r = 0; r < c->nrails; r++) {
    const struct rn_ib_port *port = c->rail[r].port;
    enum ibv_mtu m =
        port->mtu < (enum ibv_mtu)rem->rail[r].mtu ? port->mtu : (enum ibv_mtu)rem->rail[r].mtu;
    if ((128 << (int)m) < c->mtu_bytes) c->mtu_bytes = 128 << (int)m;
    if (rem->rail[r].link != port->link) {
      RN_WARN("rail %d: %s is %s but the peer's NIC is %s", r, port->nic->name,
              port->link == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
              rem->rail[r].link == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand");
      return ncclInvalidUsage;
    }
    c->rail[r].rem_rkey = rem->rail[r].rkey;
    c->rem_rail[r] = rem->rail[r];
    RN_CHECK(rn_ib_rail_connect(c, r, rem->qpn[r]));
  }
  c->rem_ctl = rem->ctl_addr;
  return ncclSuccess;
}

/* --- listen / accept ---------------------------------------------------- */

ncclResult_t rn_ib_listen(const struct rn_rails *r, struct rn_handle *h, void **lcomm) {
  ncclResult_t res = ncclSuccess;
  struct rn_ib_listen_comm *l = calloc(1, sizeof(*l));
  if (!l) {
    RN_WARN("out of memory for a listen comm");
    return ncclSystemError;
  }
  l->rails = *r;
  l->fd = -1;
  l->lfd = -1;
  union rn_sockaddr sa, bound;
  RN_CHECK_GOTO(rn_ib_listen_addr(r, &sa), res, out_free);
  RN_CHECK_GOTO(rn_sock_listen(&sa, &l->lfd, &bound), res, out_free);
  RN_CHECK_GOTO(rn_rdv_create_ctrl_only(&l->lfd, 1, h->nonce, &l->rdv), res, out_close);
  struct rn_ib_payload pl;
  memset(&pl, 0, sizeof(pl));
  rn_sockaddr_to_wire(&bound, &pl.addr);
  memcpy(h->payload, &pl, sizeof(pl));
  rn_sockaddr_str(&bound, l->addr, sizeof(l->addr));
  RN_INFO(NCCL_NET, "listening on %s for %s (%d rail(s))", l->addr, r->nic[0]->name, r->n);
  rn_ib_live_add(&l->live, 1);
  *lcomm = l;
  return ncclSuccess;
out_close:
  close(l->lfd);
out_free:
  free(l);
  return res;
}

/* Send (or receive) the rest of an out-of-band message over fd; *done once
 * all of it went through, with off reset for the next one. */
static ncclResult_t rn_ib_oob_send(int fd, const void *buf, size_t len, size_t *off, int *done) {
  ncclResult_t res = rn_sock_send_some(fd, buf, len, off);
  if (res != ncclSuccess) {
    /* the socket layer leaves the WARN to its caller */
    RN_WARN("connection set-up: sending to the peer failed: %s",
            res == ncclRemoteError ? "the peer closed or reset the connection" : strerror(errno));
    return res;
  }
  *done = *off == len;
  if (*done) *off = 0;
  return ncclSuccess;
}

static ncclResult_t rn_ib_oob_recv(int fd, void *buf, size_t len, size_t *off, int *done) {
  ncclResult_t res = rn_sock_recv_some(fd, buf, len, off);
  if (res != ncclSuccess) {
    RN_WARN("connection set-up: receiving from the peer failed: %s",
            res == ncclRemoteError ? "the peer closed or reset the connection" : strerror(errno));
    return res;
  }
  *done = *off == len;
  if (*done) *off = 0;
  return ncclSuccess;
}

/* The exchange is over: the comm keeps the socket to notice a dead peer,
 * and joins the open comms finalize closes. */
static void rn_ib_comm_ready(struct rn_ib_comm *c, int *fd, const char *how) {
  c->ctrl_fd = *fd;
  *fd = -1;
  /* A peer whose host or path died sends no EOF: keepalive probes and the
   * user timeout end the socket within RAILNET_SOCKET_TIMEOUT_MS, and a
   * waiting side then fails instead of waiting for ever. */
  if (rn_sock_set_liveness(c->ctrl_fd, (int)rn_params()->socket_timeout_ms) != 0)
    RN_INFO(NCCL_NET, "%s %s: no keepalive on the control socket (%s): a dead host is noticed "
            "only by the QPs", how, c->peer, strerror(errno));
  RN_INFO(NCCL_NET, "%s %s: %d rail(s) x %d QP(s), first QP %u, inline up to %u bytes%s%s%s", how,
          c->peer, c->nlive, c->nqps, c->rail[0].qp[0].qp->qp_num, c->max_inline,
          c->standby >= 0 ? "; standby NIC " : "",
          c->standby >= 0 ? c->rail[c->standby].port->nic->name : "",
          c->standby >= 0 ? " (used only while every rail has failed)" : "");
  rn_ib_stats_start(c);
  rn_ib_live_add(&c->live, 0);
}

/* Which of the connecting peer's peer_rails rails (the standby aside)
 * each of ours pairs with (pairing.c); *paired gets our rails in the
 * pairs' order, our standby kept. */
static ncclResult_t rn_ib_accept_pair(const struct rn_ib_listen_comm *l, int peer_rails,
                                      struct rn_pairing *pairing, struct rn_rails *paired,
                                      char *how, size_t howlen) {
  struct rn_ib_rail_info here[RN_MAX_RAILS];
  const char *name[RN_MAX_RAILS];
  for (int i = 0; i < l->rails.n; i++) {
    const struct rn_ib_port *port = rn_ib_port_of(l->rails.nic[i]);
    if (!port) {
      RN_WARN("rail %d (%s) is not a verbs NIC", i, l->rails.nic[i]->name);
      return ncclInternalError;
    }
    rn_ib_port_info(port, &here[i]);
    name[i] = l->rails.nic[i]->name;
  }
  rn_ib_pairing(here, name, l->rails.n, l->rinfo.rail, peer_rails, pairing, how, howlen);
  *paired = l->rails;
  paired->n = pairing->n;
  for (int k = 0; k < pairing->n; k++) paired->nic[k] = l->rails.nic[pairing->local[k]];
  return ncclSuccess;
}

static ncclResult_t rn_ib_accept_step(struct rn_ib_listen_comm *l, void **rcomm) {
  int done;
  for (;;) {
    switch (l->stage) {
      case RN_IB_ACC_RDV: {
        struct rn_rdv_conn conn;
        int ready = 0;
        RN_CHECK(rn_rdv_poll(l->rdv, &conn, &ready));
        if (!ready) return ncclSuccess;
        l->fd = conn.ctrl_fd;
        l->off = 0;
        l->since_ms = rn_clock_ms();
        l->stage = RN_IB_ACC_RECV_INFO;
        break;
      }
      case RN_IB_ACC_RECV_INFO: {
        RN_CHECK(rn_ib_oob_recv(l->fd, &l->rinfo, sizeof(l->rinfo), &l->off, &done));
        if (!done) return ncclSuccess;
        RN_CHECK(rn_ib_info_check(&l->rinfo, 1, "a connecting peer"));
        int peer_rails = l->rinfo.nrails - l->rinfo.standby;
        struct rn_pairing pairing;
        struct rn_rails paired;
        char how[1024];
        RN_CHECK(rn_ib_accept_pair(l, peer_rails, &pairing, &paired, how, sizeof(how)));
        /* A standby when both sides have one beside as many rails. */
        int standby = l->rinfo.standby && l->rails.standby && peer_rails == l->rails.n;
        RN_CHECK(rn_ib_comm_create(&paired, pairing.n, standby, l->rinfo.nqps, 0, &l->comm));
        struct rn_ib_comm *c = l->comm;
        snprintf(c->peer, sizeof(c->peer), "%s", l->rinfo.dev);
        if (!pairing.identity)
          RN_INFO(NCCL_NET,
                  "recv comm from %s: the peer offers %d rail(s), this device has %d: the comm "
                  "goes over %d pair(s), %s",
                  c->peer, peer_rails, l->rails.n, pairing.n, how);
        /* RECVs before RTR: an immediate must never find an empty queue. */
        for (int p = 0; p < c->nlive; p++)
          for (int k = 0; k < c->nqps; k++)
            RN_CHECK(rn_ib_post_recvs(c, rn_ib_qp_index(c, c->in_use[p], k), RN_IB_RECV_DEPTH));
        /* The peer's rails in the pairs' order, its standby after them. */
        struct rn_ib_conn_info rem = l->rinfo;
        int peer_of[RN_MAX_RAILS];
        for (int k = 0; k < pairing.n; k++) peer_of[k] = pairing.peer[k];
        if (standby) peer_of[pairing.n] = peer_rails;
        rem.nrails = (uint8_t)c->nrails;
        for (int k = 0; k < c->nrails; k++) {
          rem.rail[k] = l->rinfo.rail[peer_of[k]];
          memcpy(rem.qpn[k], l->rinfo.qpn[peer_of[k]], sizeof(rem.qpn[k]));
        }
        RN_CHECK(rn_ib_comm_connect(c, &rem, -1));
        rn_ib_info_fill(c, 0, &l->linfo);
        for (int k = 0; k < c->nrails; k++) l->linfo.peer_rail[k] = (uint8_t)peer_of[k];
        l->stage = RN_IB_ACC_SEND_INFO;
        break;
      }
      case RN_IB_ACC_SEND_INFO:
        RN_CHECK(rn_ib_oob_send(l->fd, &l->linfo, sizeof(l->linfo), &l->off, &done));
        if (!done) return ncclSuccess;
        l->stage = RN_IB_ACC_RECV_READY;
        break;
      case RN_IB_ACC_RECV_READY:
        RN_CHECK(rn_ib_oob_recv(l->fd, &l->ready, 1, &l->off, &done));
        if (!done) return ncclSuccess;
        rn_ib_comm_ready(l->comm, &l->fd, "accepted");
        *rcomm = l->comm;
        l->comm = NULL;
        l->stage = RN_IB_ACC_RDV;
        return ncclSuccess;
    }
  }
}

ncclResult_t rn_ib_accept(void *lcomm, void **rcomm) {
  struct rn_ib_listen_comm *l = lcomm;
  *rcomm = NULL;
  ncclResult_t res = rn_ib_accept_step(l, rcomm);
  /* A peer that passed the rendezvous (it has the handle) and then stops
   * in the exchange holds this listener, whose later connections wait
   * behind it: bounded as a connect is. */
  const int64_t bound = rn_params()->connect_timeout_ms;
  if (res == ncclSuccess && l->stage != RN_IB_ACC_RDV && rn_clock_ms() - l->since_ms > bound) {
    RN_WARN("accept on %s: the connecting peer did not finish the verbs handshake within %lld ms "
            "(RAILNET_CONNECT_TIMEOUT_MS); its connection is dropped",
            l->addr, (long long)bound);
    res = ncclRemoteError;
  }
  if (res != ncclSuccess) {
    /* Drop the half-accepted connection; the listener stays usable. */
    rn_ib_comm_free(l->comm);
    l->comm = NULL;
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
    l->stage = RN_IB_ACC_RDV;
  }
  return res;
}

ncclResult_t rn_ib_close_listen(void *lcomm) {
  struct rn_ib_listen_comm *l = lcomm;
  if (!l) return ncclSuccess;
  rn_ib_live_del(&l->live);
  rn_ib_comm_free(l->comm);
  if (l->fd >= 0) close(l->fd);
  if (l->rdv) rn_rdv_destroy(l->rdv);
  if (l->lfd >= 0) close(l->lfd);
  free(l);
  return ncclSuccess;
}

/* --- connect ------------------------------------------------------------ */

static void rn_ib_connect_free(struct rn_ib_connect_state *s) {
  if (!s) return;
  rn_ib_comm_free(s->comm);
  if (s->fd >= 0) close(s->fd);
  if (s->dial) rn_rdv_dial_destroy(s->dial);
  free(s);
}

void rn_ib_connect_abort(void *state) { rn_ib_connect_free(state); }

/* The listener's answer names, for each of its rails, the rail of ours it
 * pairs with (peer_rail, checked here: in range, each rail once, a
 * standby with our standby): our rails move to those places, the rest
 * after them.  Nothing points into c->rail[] yet (the CQs carry no
 * context, the QPs are in INIT with nothing posted, registrations and
 * telemetry come after connect), so the structs move as they are. */
static ncclResult_t rn_ib_connect_pair(struct rn_ib_comm *c, const struct rn_ib_conn_info *rem,
                                       const char *peer) {
  const int rails = c->nlocal - (c->standby >= 0); /* ours, the standby aside */
  const int n = rem->nrails - rem->standby;
  uint32_t seen = 0;
  for (int k = 0; k < rem->nrails; k++) {
    int r = rem->peer_rail[k];
    int want_standby = rem->standby && k == n;
    int bad = want_standby ? r != c->standby : r >= rails || ((seen >> r) & 1u);
    if (bad) {
      RN_WARN("%s answered that its rail %d pairs with our rail %d (%s); we offered %d rail(s)%s",
              peer, k, r, want_standby ? "not our standby" : "out of range or named twice", rails,
              c->standby >= 0 ? " and a standby" : "");
      return ncclRemoteError;
    }
    seen |= 1u << r;
  }
  struct rn_ib_rail moved[RN_MAX_RAILS];
  int m = 0;
  for (int k = 0; k < rem->nrails; k++) moved[m++] = c->rail[rem->peer_rail[k]];
  for (int r = 0; r < c->nlocal; r++)
    if (!((seen >> r) & 1u)) {
      if (r == c->standby) c->standby = m; /* dropped by the caller when unused */
      moved[m++] = c->rail[r];
    }
  memcpy(c->rail, moved, sizeof(moved[0]) * (size_t)m);
  return ncclSuccess;
}

static ncclResult_t rn_ib_connect_step(struct rn_ib_connect_state *s, const struct rn_rails *r,
                                       void **scomm) {
  int done;
  for (;;) {
    switch (s->stage) {
      case RN_IB_CON_DIAL: {
        struct rn_rdv_conn conn;
        int ready = 0;
        ncclResult_t res = rn_rdv_dial_poll(s->dial, &conn, &ready);
        if (res != ncclSuccess) {
          if (rn_rdv_dial_dropped(s->dial))
            RN_WARN("connect to %s: the listener closed the bootstrap connection during the "
                  "handshake",
                  s->peer);
          return res;
        }
        if (!ready) return ncclSuccess;
        s->fd = conn.ctrl_fd;
        int standby = r->standby != NULL && r->n < RN_MAX_RAILS;
        RN_CHECK(rn_ib_comm_create(r, r->n, standby, (int)rn_params()->ib_qps, 1, &s->comm));
        rn_ib_info_fill(s->comm, 1, &s->linfo);
        s->off = 0;
        s->stage = RN_IB_CON_SEND_INFO;
        break;
      }
      case RN_IB_CON_SEND_INFO:
        RN_CHECK(rn_ib_oob_send(s->fd, &s->linfo, sizeof(s->linfo), &s->off, &done));
        if (!done) return ncclSuccess;
        s->stage = RN_IB_CON_RECV_INFO;
        break;
      case RN_IB_CON_RECV_INFO: {
        RN_CHECK(rn_ib_oob_recv(s->fd, &s->rinfo, sizeof(s->rinfo), &s->off, &done));
        if (!done) return ncclSuccess;
        RN_CHECK(rn_ib_info_check(&s->rinfo, 0, s->peer));
        struct rn_ib_comm *c = s->comm;
        /* The answer keeps our standby (then all our rails) or drops it. */
        int rails = c->nlocal - (c->standby >= 0);
        int bad = s->rinfo.standby ? c->standby < 0 || s->rinfo.nrails != c->nlocal
                                   : s->rinfo.nrails > rails;
        if (bad || s->rinfo.nqps != c->nqps) {
          RN_WARN("%s answered %u rail(s) x %u QP(s)%s; offered %d x %d%s", s->peer,
                  s->rinfo.nrails, s->rinfo.nqps, s->rinfo.standby ? " with a standby" : "",
                  rails, c->nqps, c->standby >= 0 ? " and a standby" : "");
          return ncclRemoteError;
        }
        RN_CHECK(rn_ib_connect_pair(c, &s->rinfo, s->peer));
        if (!s->rinfo.standby) c->standby = -1;
        c->nrails = s->rinfo.nrails;
        rn_ib_strcpy(c->peer, 32, s->rinfo.dev);
        size_t pl = strlen(c->peer);
        c->peer[pl++] = '@';
        rn_ib_strcpy(c->peer + pl, sizeof(c->peer) - pl, s->peer);
        RN_CHECK(rn_ib_comm_connect(c, &s->rinfo, s->tc));
        if (s->tc >= 0)
          RN_INFO(NCCL_NET, "send comm to %s: traffic class %d (DSCP %d), service level %u",
                  c->peer, s->tc, s->tc >> 2, rn_ib_sl(s->tc));
        s->stage = RN_IB_CON_SEND_READY;
        break;
      }
      case RN_IB_CON_SEND_READY: {
        static const uint8_t ready = 1;
        RN_CHECK(rn_ib_oob_send(s->fd, &ready, 1, &s->off, &done));
        if (!done) return ncclSuccess;
        rn_ib_comm_ready(s->comm, &s->fd, "connected to");
        *scomm = s->comm;
        s->comm = NULL;
        return ncclSuccess;
      }
    }
  }
}

ncclResult_t rn_ib_connect(const struct rn_rails *r, const struct rn_handle *h, int tc,
                           void **state, void **scomm) {
  ncclResult_t res = ncclSuccess;
  struct rn_ib_connect_state *s = *state;
  *scomm = NULL;
  if (!s) {
    struct rn_ib_payload pl;
    union rn_sockaddr sa;
    memcpy(&pl, h->payload, sizeof(pl));
    if (rn_sockaddr_from_wire(&pl.addr, &sa)) {
      RN_WARN("connect: the handle carries no valid address");
      return ncclInvalidArgument;
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
      RN_WARN("out of memory for a connect");
      return ncclSystemError;
    }
    s->fd = -1;
    s->tc = tc;
    s->start_ms = rn_clock_ms();
    rn_sockaddr_str(&sa, s->peer, sizeof(s->peer));
    RN_CHECK_GOTO(rn_rdv_dial_create(&sa, 1, h->nonce, 0, &s->dial), res, out_free);
    *state = s;
  }
  RN_CHECK_GOTO(rn_ib_connect_step(s, r, scomm), res, out_free);
  if (*scomm) {
    rn_ib_connect_free(s);
    *state = NULL;
    return ncclSuccess;
  }
  const int64_t bound = rn_params()->connect_timeout_ms;
  if (rn_clock_ms() - s->start_ms > bound) {
    RN_WARN("connect to %s: the verbs handshake did not finish within %lld ms "
            "(RAILNET_CONNECT_TIMEOUT_MS)",
            s->peer, (long long)bound);
    res = ncclRemoteError;
    goto out_free;
  }
  return ncclSuccess;
out_free:
  rn_ib_connect_free(s);
  *state = NULL;
  return res;
}

ncclResult_t rn_ib_close_send(void *scomm) {
  if (scomm) rn_ib_stats_close(scomm);
  rn_ib_comm_free(scomm);
  return ncclSuccess;
}

ncclResult_t rn_ib_close_recv(void *rcomm) {
  if (rcomm) rn_ib_stats_close(rcomm);
  rn_ib_comm_free(rcomm);
  return ncclSuccess;
}

int rn_ib_close_all(void) {
  int n = 0;
  for (struct rn_list *first; (first = rn_shared_list_first(&rn_ib_live)) != NULL; n++) {
    struct rn_ib_live *l = RN_LIST_ENTRY(first, struct rn_ib_live, link);
    if (l->is_listen)
      (void)rn_ib_close_listen(RN_LIST_ENTRY(l, struct rn_ib_listen_comm, live));
    else
      rn_ib_comm_free(RN_LIST_ENTRY(l, struct rn_ib_comm, live));
  }
  return n;
}
