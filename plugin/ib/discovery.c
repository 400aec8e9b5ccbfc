/* Verbs discovery: devices (opened with their PD and MR cache), ACTIVE
 * ports, link layer, speed, PCI path, netdev, RoCE GID choice.  The table
 * is built once per init (the core calls init once under its lock and
 * refcounts it), read-only after, and closed at finalize. */
#include <arpa/inet.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/param.h"
#include "railnet/sysfs.h"
#include "ib.h"

static struct rn_nic rn_ib_nics[RN_MAX_NICS];
static struct rn_ib_port rn_ib_ports[RN_MAX_NICS];
static struct rn_ib_device rn_ib_devices[RN_MAX_NICS];
static int rn_ib_nports, rn_ib_ndevices;

struct rn_ib_port *rn_ib_port_of(const struct rn_nic *nic) {
  if (nic->table_index >= 0 && nic->table_index < rn_ib_nports &&
      &rn_ib_nics[nic->table_index] == nic)
    return &rn_ib_ports[nic->table_index];
  if (nic >= rn_ib_nics && nic < rn_ib_nics + rn_ib_nports) return &rn_ib_ports[nic - rn_ib_nics];
  for (int i = 0; i < rn_ib_nports; i++)
    if (strcmp(rn_ib_nics[i].name, nic->name) == 0) return &rn_ib_ports[i];
  return NULL;
}

/* Read one sysfs attribute through the plugin's sysfs root; 0 on success. */
static int rn_ib_sysfs_read(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int rn_ib_sysfs_read(char *buf, size_t len, const char *fmt, ...) {
  char path[PATH_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(path, sizeof(path), fmt, ap);
  va_end(ap);
  return rn_sysfs_read(path, buf, len);
}

struct rn_ib_code {
  uint8_t code;
  int value;
};

static int rn_ib_decode(const struct rn_ib_code *table, size_t n, uint8_t code, int unknown) {
  for (size_t i = 0; i < n; i++)
    if (table[i].code == code) return table[i].value;
  return unknown;
}

/* Mbps of a port from ibv_port_attr.active_speed (per lane) and
 * active_width (lanes). */
static int rn_ib_speed_mbps(uint8_t speed, uint8_t width) {
  static const struct rn_ib_code lane_mbps[] = {{1, 2500},   /* SDR */
                                                {2, 5000},   /* DDR */
                                                {4, 10000},  /* QDR */
                                                {8, 10000},  /* FDR10 */
                                                {16, 14000}, /* FDR */
                                                {32, 25000}, /* EDR */
                                                {64, 50000}, /* HDR */
                                                {128, 100000} /* NDR */};
  static const struct rn_ib_code lanes[] = {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
  /* Unknown codes: a QDR-like lane, one lane. */
  return rn_ib_decode(lane_mbps, sizeof(lane_mbps) / sizeof(lane_mbps[0]), speed, 10000) *
         rn_ib_decode(lanes, sizeof(lanes) / sizeof(lanes[0]), width, 1);
}

static int rn_ib_mtu_bytes(enum ibv_mtu m) { return 128 << ((int)m); }

static int rn_ib_gid_is_v4(const union ibv_gid *g) {
  static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g->raw, pfx, sizeof(pfx)) == 0;
}
static int rn_ib_gid_is_zero(const union ibv_gid *g) {
  static const uint8_t z[16];
  return memcmp(g->raw, z, 16) == 0;
}
static int rn_ib_gid_is_linklocal(const union ibv_gid *g) {
  return g->raw[0] == 0xfe && (g->raw[1] & 0xc0) == 0x80;
}

/* GID entry i: 0 and its RoCE version (2, 1, or 0 when IB/unknown) when it exists. */
static int rn_ib_gid_entry(struct rn_ib_device *device, int port_num, int i, union ibv_gid *gid,
                           int *v2) {
  struct ibv_gid_entry e;
  int rc = rn_ibv_query_gid_ex(device->context, (uint32_t)port_num, (uint32_t)i, &e);
  if (rc == 0) {
    *gid = e.gid;
    *v2 = e.gid_type == IBV_GID_TYPE_ROCE_V2;
    return rn_ib_gid_is_zero(gid) ? -1 : 0;
  }
  if (rc != EOPNOTSUPP) return -1; /* ENODATA: empty slot */
  char type[32];
  if (rn_ib_sysfs_read(type, sizeof(type), "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d",
                       device->name, port_num, i))
    return -1;
  if (rn_ibv_query_gid(device->context, (uint8_t)port_num, i, gid) != ncclSuccess) return -1;
  *v2 = strcmp(type, "RoCE v2") == 0;
  return rn_ib_gid_is_zero(gid) ? -1 : 0;
}

/* The RoCE GID: RAILNET_IB_GID_INDEX when set, else the RoCE v2 GID of the
 * configured address family (IPv4-mapped, or a global IPv6 one before a
 * link-local one), else any RoCE v2 GID, else index 0. */
static ncclResult_t rn_ib_pick_gid(struct rn_ib_device *device, int port_num, int tbl_len,
                                   struct rn_ib_port *port, char *why, size_t whylen) {
  const struct rn_params *p = rn_params();
  /* A number as NCCL reads NCCL_IB_GID_INDEX (base 0: "3", "0x3"); -1 is
   * its "choose automatically". */
  char *end;
  long idx = p->ib_gid_index[0] ? strtol(p->ib_gid_index, &end, 0) : -1;
  const char *var = p->ib_gid_index_from;
  if (p->ib_gid_index[0] && (*end || idx < -1 || idx >= tbl_len)) {
    RN_WARN("%s:%d: %s=%s is not an index below %d (nor -1, automatic)", device->name, port_num,
            var, p->ib_gid_index, tbl_len);
    return ncclInvalidUsage;
  }
  if (idx >= 0) {
    port->gid_index = (int)idx;
    RN_CHECK(rn_ibv_query_gid(device->context, (uint8_t)port_num, (int)idx, &port->gid));
    snprintf(why, whylen, "%s", var);
    return ncclSuccess;
  }
  int want6 = strcmp(p->ib_addr_family, "AF_INET6") == 0;
  int best = -1, best_rank = 0;
  union ibv_gid best_gid;
  memset(&best_gid, 0, sizeof(best_gid));
  for (int i = 0; i < tbl_len && i < 1024; i++) {
    union ibv_gid g;
    int v2 = 0;
    if (rn_ib_gid_entry(device, port_num, i, &g, &v2)) continue;
    int rank = 1; /* anything */
    if (v2) {
      rank = 2;
      if (!want6 && rn_ib_gid_is_v4(&g)) rank = 5;
      if (want6 && !rn_ib_gid_is_v4(&g)) rank = rn_ib_gid_is_linklocal(&g) ? 3 : 4;
    }
    if (rank > best_rank) {
      best = i;
      best_rank = rank;
      best_gid = g;
    }
  }
  if (best < 0) {
    port->gid_index = 0;
    RN_CHECK(rn_ibv_query_gid(device->context, (uint8_t)port_num, 0, &port->gid));
    snprintf(why, whylen, "no usable GID found, index 0");
    return ncclSuccess;
  }
  port->gid_index = best;
  port->gid = best_gid;
  snprintf(why, whylen, "%s",
           best_rank >= 3   ? (want6 ? "RoCE v2, AF_INET6" : "RoCE v2, AF_INET")
           : best_rank == 2 ? "RoCE v2, other family"
                            : "not RoCE v2");
  return ncclSuccess;
}

static void rn_ib_netdev(struct rn_ib_device *device, struct rn_ib_port *port, char *out,
                         size_t len) {
  char buf[64];
  out[0] = '\0';
  if (port->link == IBV_LINK_LAYER_ETHERNET &&
      rn_ib_sysfs_read(buf, sizeof(buf), "/sys/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d",
                       device->name, port->num, port->gid_index) == 0 &&
      buf[0]) {
    rn_ib_strcpy(out, len, buf);
    return;
  }
  /* Listed under RAILNET_FSROOT, as every sysfs read (rn_sysfs_read). */
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/sys/class/infiniband/%s/device/net", rn_params()->fsroot,
           device->name);
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    rn_ib_strcpy(out, len, de->d_name);
    break;
  }
  closedir(d);
}

static void rn_ib_pci(const char *name, struct rn_nic *nic) {
  char path[PATH_MAX], real[PATH_MAX];
  snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device", name);
  nic->pci_path[0] = nic->busid[0] = '\0';
  if (rn_sysfs_realpath(path, real, sizeof(real))) return; /* rxe/siw: no device */
  if (rn_sysfs_pci_parent(real, nic->pci_path, sizeof(nic->pci_path), nic->busid,
                          sizeof(nic->busid)))
    nic->pci_path[0] = nic->busid[0] = '\0';
}

/* The largest inline payload a QP of this device accepts, up to
 * RN_IB_INLINE_PROBE: providers reject a QP asking for more than they
 * support, and report what they granted. */
static void rn_ib_probe_inline(struct rn_ib_device *device) {
  struct ibv_cq *cq;
  device->max_inline = 0;
  if (rn_ibv_create_cq(device->context, 1, &cq) != ncclSuccess) {
    RN_INFO(NCCL_INIT | NCCL_NET, "%s: sends nothing inline (no CQ to probe with, see the WARN)",
            device->name);
    return;
  }
  for (uint32_t want = RN_IB_INLINE_PROBE; want >= 16; want /= 2) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = want;
    struct ibv_qp *qp;
    if (rn_ibv_create_qp_probe(device->pd, &ia, &qp) != 0) continue;
    device->max_inline = ia.cap.max_inline_data;
    (void)rn_ibv_destroy_qp(qp);
    break;
  }
  (void)rn_ibv_destroy_cq(cq);
  RN_INFO(NCCL_INIT | NCCL_NET, "%s: sends up to %u bytes inline", device->name,
          device->max_inline);
}

static void rn_ib_device_close(struct rn_ib_device *device) {
  if (device->mr_cache) rn_mr_cache_destroy(device->mr_cache);
  if (device->pd) (void)rn_ibv_dealloc_pd(device->pd);
  if (device->context) (void)rn_ibv_close_device(device->context);
  memset(device, 0, sizeof(*device));
}

/* Open one device and add its ACTIVE ports. */
static ncclResult_t rn_ib_add_device(struct ibv_device *verbs_device, int *nactive_seen) {
  ncclResult_t res = ncclSuccess;
  struct rn_ib_device *device = &rn_ib_devices[rn_ib_ndevices];
  memset(device, 0, sizeof(*device));
  snprintf(device->name, sizeof(device->name), "%s", rn_ibv_get_device_name(verbs_device));
  RN_CHECK_GOTO(rn_ibv_open_device(verbs_device, &device->context), res, out_close);
  RN_CHECK_GOTO(rn_ibv_query_device(device->context, &device->attr), res, out_close);
  int first = rn_ib_nports;
  for (int port_num = 1; port_num <= device->attr.phys_port_cnt && rn_ib_nports < RN_MAX_NICS;
       port_num++) {
    struct ibv_port_attr pa;
    if (rn_ibv_query_port(device->context, (uint8_t)port_num, &pa) != ncclSuccess) continue;
    if (pa.state != IBV_PORT_ACTIVE) {
      RN_INFO(NCCL_INIT | NCCL_NET, "%s:%d is not ACTIVE (state %d), skipped", device->name,
              port_num, (int)pa.state);
      continue;
    }
    if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND && pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
      RN_INFO(NCCL_INIT | NCCL_NET, "%s:%d link layer %d unsupported, skipped", device->name,
              port_num, (int)pa.link_layer);
      continue;
    }
    (*nactive_seen)++;
    struct rn_ib_port *port = &rn_ib_ports[rn_ib_nports];
    struct rn_nic *nic = &rn_ib_nics[rn_ib_nports];
    memset(port, 0, sizeof(*port));
    memset(nic, 0, sizeof(*nic));
    port->device = device;
    port->nic = nic;
    port->num = port_num;
    port->link = pa.link_layer;
    port->mtu = pa.active_mtu;
    port->lid = pa.lid;
    char gidwhy[64] = "IB: LID routed";
    if (port->link == IBV_LINK_LAYER_ETHERNET) {
      RN_CHECK_GOTO(rn_ib_pick_gid(device, port_num, pa.gid_tbl_len, port, gidwhy, sizeof(gidwhy)),
                    res, out_unwind);
    } else {
      port->gid_index = 0;
      (void)rn_ibv_query_gid(device->context, (uint8_t)port_num, 0, &port->gid);
    }
    if (device->attr.phys_port_cnt > 1)
      snprintf(nic->name, sizeof(nic->name), "%s:%d", device->name, port_num);
    else
      snprintf(nic->name, sizeof(nic->name), "%s", device->name);
    rn_ib_netdev(device, port, nic->netdev, sizeof(nic->netdev));
    rn_ib_pci(device->name, nic);
    nic->guid = device->attr.node_guid;
    nic->port = port_num;
    nic->speed_mbps = rn_ib_speed_mbps(pa.active_speed, pa.active_width);
    nic->link = port->link == IBV_LINK_LAYER_INFINIBAND ? RN_LINK_IB : RN_LINK_ETH;
    nic->max_comms = device->attr.max_qp;
    nic->force_flush = 0;
    /* Repeated registrations are cheap only through the cache. */
    nic->reg_is_global = rn_params()->mr_cache != 0;
    nic->table_index = rn_ib_nports;
    char gidstr[INET6_ADDRSTRLEN] = "";
    inet_ntop(AF_INET6, port->gid.raw, gidstr, sizeof(gidstr));
    RN_INFO(NCCL_INIT | NCCL_NET,
            "%s port %d %s, %d Mbps, MTU %d, GID %d %s (%s), netdev %s, PCI %s", nic->name,
            port_num, nic->link == RN_LINK_IB ? "InfiniBand" : "RoCE", nic->speed_mbps,
            rn_ib_mtu_bytes(port->mtu), port->gid_index, gidstr, gidwhy,
            nic->netdev[0] ? nic->netdev : "(none)", nic->pci_path[0] ? nic->pci_path : "(none)");
    rn_ib_nports++;
  }
  if (rn_ib_nports == first) goto out_close; /* no usable port: not kept */
  RN_CHECK_GOTO(rn_ibv_alloc_pd(device->context, &device->pd), res, out_unwind);
  RN_CHECK_GOTO(rn_mr_cache_create((size_t)sysconf(_SC_PAGESIZE), (int)rn_params()->mr_cache,
                                   rn_ib_mr_reg_cb, rn_ib_mr_dereg_cb, device, &device->mr_cache),
                res, out_unwind);
  rn_ib_probe_inline(device);
  char why[256];
  int ptr = NCCL_PTR_HOST | rn_ib_probe_ptr_support(device, why, sizeof(why));
  for (int i = first; i < rn_ib_nports; i++) rn_ib_nics[i].ptr_support = ptr;
  RN_INFO(NCCL_INIT | NCCL_NET, "%s GPU memory: %s%s%s", device->name,
          (ptr & NCCL_PTR_CUDA) ? "CUDA (peermem) " : "", (ptr & NCCL_PTR_DMABUF) ? "DMABUF " : "",
          why);
  rn_ib_ndevices++;
  return ncclSuccess;
out_unwind:
  rn_ib_nports = first;
out_close:
  rn_ib_device_close(device);
  return res;
}

ncclResult_t rn_ib_init(const struct rn_nic **nics, int *n, char *why, size_t whylen) {
  *nics = rn_ib_nics;
  *n = 0;
  rn_ib_nports = rn_ib_ndevices = 0;
  if (rn_ibv_load(why, whylen) != ncclSuccess) return ncclSuccess;
  struct ibv_device **list;
  int ndev = 0;
  errno = 0;
  if (rn_ibv_get_device_list(&list, &ndev) != ncclSuccess) {
    const int err = errno ? errno : ENODEV;
    if (err == ENOSYS || err == ENODEV || err == ENOENT)
      snprintf(why, whylen, "no RDMA devices on this host: %s", strerror(err));
    else
      snprintf(why, whylen, "the list of RDMA devices could not be read: %s", strerror(err));
    return ncclSuccess;
  }
  int nactive = 0, nskipped = 0;
  for (int i = 0; i < ndev && rn_ib_ndevices < RN_MAX_NICS && rn_ib_nports < RN_MAX_NICS; i++) {
    if (rn_ib_add_device(list[i], &nactive) != ncclSuccess) {
      RN_INFO(NCCL_INIT | NCCL_NET, "device %s skipped", rn_ibv_get_device_name(list[i]));
      nskipped++;
    }
  }
  rn_ibv_free_device_list(list);
  /* A device skipped on an error (its WARN says which) may well have had
   * an ACTIVE port: the reason names both kinds. */
  if (rn_ib_nports == 0 && nskipped == ndev)
    snprintf(why, whylen, "%d verbs device(s), each skipped on an error", ndev);
  else if (rn_ib_nports == 0 && nskipped > 0)
    snprintf(why, whylen, "%d verbs device(s): %d skipped on an error, no ACTIVE port on the rest",
             ndev, nskipped);
  else if (rn_ib_nports == 0)
    snprintf(why, whylen, "%d verbs device(s), no ACTIVE port", ndev);
  else
    RN_INFO(NCCL_INIT | NCCL_NET, "%d NIC(s) on %d device(s)", rn_ib_nports, rn_ib_ndevices);
  *n = rn_ib_nports;
  return ncclSuccess;
}

void rn_ib_devices_close(void) {
  for (int i = 0; i < rn_ib_ndevices; i++) rn_ib_device_close(&rn_ib_devices[i]);
  rn_ib_ndevices = rn_ib_nports = 0;
}
