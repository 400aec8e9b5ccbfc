/* NCCL topology XML (NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE) into the model.
 * Reads the element tree from topo/xml.c; never sees raw XML.  Several
 * files merge by bus id, the way NCCL lays a topology file over what it
 * discovers.  As in NCCL's ncclTopoGetSystemFromXml: each <cpu> is one
 * NUMA node of the host its host_hash names; every <pci> that is a bridge
 * (or a ConnectX-8 data-direct function, or of unknown class with PCI
 * children) is one PCI switch level; <c2c> ties a GPU to its CPU and
 * <nvlink> to NVSwitches or other GPUs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "xml.h"

struct rn_nx {
  struct rn_topo *t;
  const char *path;
  char *err;
  size_t errlen;
  unsigned char *pending; /* per node: 1 = classless leaf, NIC if nothing claims it */
  int cappending;
  int *attached; /* per node: GPUs/NICs placed on it */
};

/* Data-direct function of a ConnectX-8: NCCL's kvDictPciClass makes it a
 * PCI node (a switch level) unless it holds a <nic>. */
#define RN_CLASS_DATA_DIRECT 0x080100u
#define RN_CLASS_NVSWITCH 0x068000u

static int rn_nx_track(struct rn_nx *x) {
  /* Keep the per-node side arrays as long as the node array. */
  if (x->cappending >= x->t->capnodes) return 0;
  int cap = x->t->capnodes;
  unsigned char *p = realloc(x->pending, (size_t)cap);
  if (!p) return -1;
  x->pending = p;
  int *a = realloc(x->attached, (size_t)cap * sizeof(int));
  if (!a) return -1;
  x->attached = a;
  for (int i = x->cappending; i < cap; i++) {
    x->pending[i] = 0;
    x->attached[i] = 0;
  }
  x->cappending = cap;
  return 0;
}

static int rn_nx_oom(struct rn_nx *x) {
  rn_topo_errf(x->err, x->errlen, "%s: out of memory", x->path);
  return -1;
}

static int rn_nx_new_node(struct rn_nx *x, int parent, enum rn_node_kind kind, const char *busid,
                          const struct rn_pci_ids *ids) {
  int n = rn_topo_add_node(x->t, parent, kind, busid, ids);
  if (n < 0 || rn_nx_track(x)) return rn_nx_oom(x);
  return n;
}

/* Bus ids are unique per host only: fused multi-host dumps (GB300 trays)
 * repeat them, told apart by the CPU's host_hash. */
static int rn_nx_find_busid(const struct rn_topo *t, const char *busid, int host) {
  for (int i = 1; i < t->nnodes; i++) {
    const struct rn_node *n = &t->nodes[i];
    if ((n->kind == RN_NODE_SWITCH || n->kind == RN_NODE_DEV) && n->host == host &&
        strcmp(n->busid, busid) == 0)
      return i;
  }
  return -1;
}

static unsigned long rn_nx_hex(const char *s, unsigned long dflt) {
  if (!s || !*s) return dflt;
  char *end;
  unsigned long v = strtoul(s, &end, 16);
  return *end == '\0' ? v : dflt;
}

static long rn_nx_long(const char *s, long dflt) {
  if (!s || !*s) return dflt;
  char *end;
  long v = strtol(s, &end, 0);
  return (*end == '\0' || *end == '.') ? v : dflt;
}

/* A file without gdr= leaves it to the plugin's probe (NCCL fills the
 * attribute from ptrSupport when it merges a topology file): capable. */
static int rn_nx_gdr(const char *s) { return s ? rn_nx_long(s, 1) != 0 : 1; }

/* NCCL's inter-CPU bandwidth (ncclTopoGetInterCpuBw), GB/s. */
static double rn_nx_cpu_bw(const struct rn_topo_xml_node *c) {
  const char *arch = rn_topo_xml_attr(c, "arch"), *vendor = rn_topo_xml_attr(c, "vendor");
  long fam = rn_nx_long(rn_topo_xml_attr(c, "familyid"), 0);
  long model = rn_nx_long(rn_topo_xml_attr(c, "modelid"), 0);
  if (!arch) return RN_BW_LOC;
  if (strcmp(arch, "ppc64") == 0) return 32.0;
  if (strcmp(arch, "arm64") == 0) return 6.0;
  if (strcmp(arch, "x86_64") != 0 || !vendor) return RN_BW_LOC;
  if (strcmp(vendor, "GenuineIntel") == 0) {
    if (fam == 6 && model >= 0xcf) return 40.0;
    if (fam == 6 && model >= 0x8f) return 22.0;
    if (fam == 6 && model >= 0x55) return 10.0;
    return 6.0;
  }
  if (strcmp(vendor, "AuthenticAMD") == 0) return 16.0;
  return RN_BW_LOC;
}

/* The verbs port of a <net>: NCCL writes port as the verbs port plus the
 * number of devices before it on the same PCI device (ncclIbGetRealPort),
 * so the second function of a dual-function NIC says port="2" for its
 * verbs port 1.  Distinct names under one <nic> are distinct functions. */
static int rn_nx_verbs_port(const struct rn_topo_xml_node *nicx, const struct rn_topo_xml_node *net,
                            long xml_port) {
  const char *name = rn_topo_xml_attr(net, "name");
  int functions_before = 0;
  for (const struct rn_topo_xml_node *c = nicx->child; c && c != net; c = c->next) {
    if (strcmp(c->name, "net") != 0) continue;
    const char *cn = rn_topo_xml_attr(c, "name");
    if (!name || !cn || strcmp(cn, name) == 0) continue;
    /* Count each earlier distinct name once. */
    int seen = 0;
    for (const struct rn_topo_xml_node *d = nicx->child; d != c; d = d->next) {
      const char *dn = strcmp(d->name, "net") == 0 ? rn_topo_xml_attr(d, "name") : NULL;
      if (dn && strcmp(dn, cn) == 0) seen = 1;
    }
    functions_before += !seen;
  }
  long p = xml_port - functions_before;
  return p >= 1 ? (int)p : (int)(xml_port >= 1 ? xml_port : 1);
}

static int rn_nx_add_net(struct rn_nx *x, int node, const struct rn_topo_xml_node *nicx,
                         const struct rn_topo_xml_node *net, uint32_t cls) {
  struct rn_topo_nic nic;
  memset(&nic, 0, sizeof(nic));
  const char *name = net ? rn_topo_xml_attr(net, "name") : NULL;
  if (name && *name)
    snprintf(nic.name, sizeof(nic.name), "%s", name);
  else if (x->t->nodes[node].busid[0])
    snprintf(nic.name, sizeof(nic.name), "%s", x->t->nodes[node].busid);
  else
    snprintf(nic.name, sizeof(nic.name), "nic%d", x->t->nnics);
  snprintf(nic.device, sizeof(nic.device), "%s", nic.name);
  int rail = -1, plane = -1;
  if (net) {
    long speed = rn_nx_long(rn_topo_xml_attr(net, "speed"), 0);
    nic.speed_mbps = (speed > 0 && speed < 100000000) ? (int)speed : 0;
    long port = rn_nx_long(rn_topo_xml_attr(net, "port"), 1);
    if (port < 1 || port > 255) port = 1;
    nic.port = rn_nx_verbs_port(nicx, net, port);
    nic.guid = (uint64_t)rn_nx_hex(rn_topo_xml_attr(net, "guid"), 0);
    nic.gdr = rn_nx_gdr(rn_topo_xml_attr(net, "gdr"));
    long r = rn_nx_long(rn_topo_xml_attr(net, "rail"), -1),
         p = rn_nx_long(rn_topo_xml_attr(net, "plane"), -1);
    rail = (r >= 0 && r < 32768) ? (int)r : -1;
    plane = (p >= 0 && p < 32768) ? (int)p : -1;
  } else {
    nic.port = 1;
    nic.gdr = 1;
  }
  /* 0x0207 is InfiniBand, 0x0200 Ethernet; otherwise unknown. */
  nic.link = (cls >> 8) == 0x0207   ? RN_TOPO_LINK_IB
             : (cls >> 8) == 0x0200 ? RN_TOPO_LINK_ETH
                                    : RN_TOPO_LINK_UNKNOWN;
  /* NCCL XML lists the network devices NCCL drives: treat them as RDMA. */
  nic.rdma = 1;
  int i = rn_topo_add_nic(x->t, node, &nic);
  if (i < 0) return rn_nx_oom(x);
  x->t->nics[i].user_rail = rail;
  x->t->nics[i].user_plane = plane;
  x->attached[node]++;
  return 0;
}

static int rn_nx_add_nic_elem(struct rn_nx *x, int node, const struct rn_topo_xml_node *nicx,
                              uint32_t cls) {
  int nnet = 0;
  for (const struct rn_topo_xml_node *c = nicx->child; c; c = c->next) {
    if (strcmp(c->name, "net") != 0) continue;
    /* net="0": a GIN/RMA-only device, not one NCCL's net transport uses. */
    if (rn_nx_long(rn_topo_xml_attr(c, "net"), 1) == 0) continue;
    if (rn_nx_add_net(x, node, nicx, c, cls)) return -1;
    nnet++;
  }
  return nnet ? 0 : rn_nx_add_net(x, node, nicx, NULL, cls);
}

static int rn_nx_gpu(struct rn_nx *x, int node, const struct rn_topo_xml_node *gpu) {
  int g = rn_topo_add_gpu(x->t, node, gpu ? rn_nx_gdr(rn_topo_xml_attr(gpu, "gdr")) : 1);
  if (g < 0) return rn_nx_oom(x);
  x->attached[node]++;
  if (!gpu) return 0;
  struct rn_gpu_rec *r = &x->t->gpus[g];
  long sm = rn_nx_long(rn_topo_xml_attr(gpu, "sm"), 0);
  r->pub.sm = (sm > 0 && sm < 10000) ? (int)sm : 0;
  for (const struct rn_topo_xml_node *c = gpu->child; c; c = c->next) {
    if (strcmp(c->name, "c2c") == 0) {
      /* ncclTopoAddC2c: bandwidth = bw x count / 1000 GB/s. */
      long bw = rn_nx_long(rn_topo_xml_attr(c, "bw"), 0);
      long count = rn_nx_long(rn_topo_xml_attr(c, "count"), 0);
      if (bw > 0 && count > 0 && bw < 100000000 && count < 1000) {
        r->pub.c2c = 1;
        r->c2c_bw = (double)bw * (double)count / 1000.0;
      }
    } else if (strcmp(c->name, "nvlink") == 0) {
      uint32_t tclass = (uint32_t)rn_nx_hex(rn_topo_xml_attr(c, "tclass"), 0);
      const char *target = rn_topo_xml_attr(c, "target");
      if (tclass == RN_CLASS_NVSWITCH)
        r->nvswitch = 1;
      else if ((tclass >> 16) == 0x03 && target && rn_topo_add_nvlink(x->t, node, target, -1) < 0)
        return rn_nx_oom(x);
    }
  }
  return 0;
}

static int rn_nx_pci(struct rn_nx *x, const struct rn_topo_xml_node *e, int parent);

static int rn_nx_children(struct rn_nx *x, const struct rn_topo_xml_node *e, int node) {
  for (const struct rn_topo_xml_node *c = e->child; c; c = c->next) {
    if (strcmp(c->name, "pci") == 0) {
      if (rn_nx_pci(x, c, node)) return -1;
    } else if (strcmp(c->name, "nic") == 0 && x->t->nodes[node].kind == RN_NODE_CPU) {
      /* A NIC with no PCI function (e.g. Azure NCv4's eth0). */
      if (rn_nx_add_nic_elem(x, node, c, 0)) return -1;
    }
  }
  return 0;
}

static int rn_nx_pci(struct rn_nx *x, const struct rn_topo_xml_node *e, int parent) {
  char busid[16];
  const char *b = rn_topo_xml_attr(e, "busid");
  if (!b) {
    rn_topo_errf(x->err, x->errlen, "%s:%d: <pci> without busid", x->path, e->line);
    return -1;
  }
  if (rn_topo_busid_norm(b, busid, sizeof(busid))) {
    rn_topo_errf(x->err, x->errlen, "%s:%d: malformed busid \"%.40s\" (expected dddd:bb:dd.f)",
                 x->path, e->line, b);
    return -1;
  }
  struct rn_pci_ids ids;
  memset(&ids, 0, sizeof(ids));
  ids.class_code = (uint32_t)rn_nx_hex(rn_topo_xml_attr(e, "class"), 0) & 0xffffffu;
  if (rn_topo_xml_attr(e, "vendor") && rn_topo_xml_attr(e, "device")) {
    ids.has_ids = 1;
    ids.vendor = (uint16_t)rn_nx_hex(rn_topo_xml_attr(e, "vendor"), 0);
    ids.device = (uint16_t)rn_nx_hex(rn_topo_xml_attr(e, "device"), 0);
    ids.subvendor = (uint16_t)rn_nx_hex(rn_topo_xml_attr(e, "subsystem_vendor"), 0);
    ids.subdevice = (uint16_t)rn_nx_hex(rn_topo_xml_attr(e, "subsystem_device"), 0);
  }
  const struct rn_topo_xml_node *gpu = NULL, *nic = NULL;
  int npci = 0;
  for (const struct rn_topo_xml_node *c = e->child; c; c = c->next) {
    if (strcmp(c->name, "gpu") == 0 && !gpu)
      gpu = c;
    else if (strcmp(c->name, "nic") == 0 && !nic)
      nic = c;
    else if (strcmp(c->name, "pci") == 0)
      npci++;
  }
  uint32_t base = ids.class_code >> 16;
  int is_gpu = gpu || (!nic && !npci && base == 0x03 && (!ids.has_ids || ids.vendor == 0x10de));
  int is_nic = !is_gpu && (nic || (!npci && base == 0x02));
  int is_switch =
      !is_gpu && !is_nic &&
      (npci || (ids.class_code >> 8) == 0x0604 || ids.class_code == RN_CLASS_DATA_DIRECT);

  /* Merging: a bus id seen before on this host is the same device (NCCL's rule). */
  int host = x->t->nodes[parent].host;
  int node = rn_nx_find_busid(x->t, busid, host);
  if (node >= 0) {
    if (ids.class_code || is_gpu || is_nic || npci) x->pending[node] = 0;
    if (is_switch && x->t->nodes[node].kind == RN_NODE_DEV && !x->attached[node])
      x->t->nodes[node].kind = RN_NODE_SWITCH;
    if (!x->t->nodes[node].ids.has_ids && ids.has_ids) x->t->nodes[node].ids = ids;
  } else {
    node = rn_nx_new_node(x, parent, is_switch ? RN_NODE_SWITCH : RN_NODE_DEV, busid, &ids);
    if (node < 0) return -1;
    if (!ids.class_code && !is_gpu && !is_nic && !npci) x->pending[node] = 1;
  }
  /* NCCL takes a width of 0 (sysfs did not say) for 16 lanes; a link
   * without the attributes (NCCL refuses such a file) stays unknown. */
  const char *wattr = rn_topo_xml_attr(e, "link_width");
  long width = rn_nx_long(wattr, 0);
  if (wattr && width == 0) width = 16;
  double bw =
      rn_topo_pcie_bw(rn_topo_xml_attr(e, "link_speed"), width > 0 && width <= 32 ? (int)width : 0);
  if (bw > 0) x->t->nodes[node].up_bw = bw;
  if (is_gpu && !x->attached[node]) {
    if (rn_nx_gpu(x, node, gpu)) return -1;
  } else if (is_nic && !x->attached[node]) {
    if (nic ? rn_nx_add_nic_elem(x, node, nic, ids.class_code)
            : rn_nx_add_net(x, node, NULL, NULL, ids.class_code))
      return -1;
  }
  return rn_nx_children(x, e, node);
}

static int rn_nx_system(struct rn_nx *x, const struct rn_topo_xml_node *root) {
  if (strcmp(root->name, "system") != 0) {
    rn_topo_errf(x->err, x->errlen,
                 "%s:%d: not an NCCL topology: root element <%.40s>, expected <system>", x->path,
                 root->line, root->name);
    return -1;
  }
  for (const struct rn_topo_xml_node *c = root->child; c; c = c->next) {
    if (strcmp(c->name, "cpu") != 0) continue;
    const char *ns = rn_topo_xml_attr(c, "numaid");
    long numa = rn_nx_long(ns, -1);
    if (numa < -1 || numa > 1 << 20) numa = -1;
    const char *hh = rn_topo_xml_attr(c, "host_hash");
    int host = rn_topo_host(x->t, hh ? hh : "");
    if (host < 0 || rn_nx_track(x)) return rn_nx_oom(x);
    int cpu = -1;
    /* The same numaid on the same host (in a later file) is the same CPU node. */
    for (int i = 1; i < x->t->nnodes && ns; i++)
      if (x->t->nodes[i].kind == RN_NODE_CPU && x->t->nodes[i].numa == numa &&
          x->t->nodes[i].host == host)
        cpu = i;
    if (cpu < 0) {
      cpu = rn_topo_add_cpu(x->t, rn_topo_host_node(x->t, host), (int)numa);
      if (cpu < 0 || rn_nx_track(x)) return rn_nx_oom(x);
      x->t->nodes[cpu].cpu_bw = rn_nx_cpu_bw(c);
    }
    if (rn_nx_children(x, c, cpu)) return -1;
  }
  return 0;
}

/* Interprets each parsed document in turn (files or one buffer), then
 * resolves the classless leaves and finalises. */
static int rn_nx_run(const char *const *paths, const char *buf, size_t len, int ndocs,
                     struct rn_topo **out, char *err, size_t errlen) {
  struct rn_nx x;
  memset(&x, 0, sizeof(x));
  x.err = err;
  x.errlen = errlen;
  *out = NULL;
  x.t = rn_topo_alloc("nccl-xml");
  if (!x.t) {
    rn_topo_errf(err, errlen, "out of memory");
    return -1;
  }
  if (rn_nx_track(&x)) goto out_oom;
  for (int f = 0; f < ndocs; f++) {
    struct rn_topo_xml_node *root;
    x.path = paths ? paths[f] : "<buffer>";
    int prc = paths ? rn_topo_xml_parse_file(paths[f], &root, err, errlen)
                    : rn_topo_xml_parse_buf(buf, len, x.path, &root, err, errlen);
    if (prc) goto out_fail;
    int rc = rn_nx_system(&x, root);
    rn_topo_xml_free(root);
    if (rc) goto out_fail;
  }
  /* A <pci> with no class and no children is most likely a NIC: topology
   * files such as AWS p5's list only the NICs (GPUs come from discovery). */
  int assumed = 0;
  for (int i = 1; i < x.t->nnodes; i++) {
    if (!x.pending[i] || x.attached[i] || x.t->nodes[i].kind != RN_NODE_DEV) continue;
    int haschild = 0;
    for (int j = i + 1; j < x.t->nnodes && !haschild; j++) haschild = x.t->nodes[j].parent == i;
    if (haschild) continue;
    if (rn_nx_add_net(&x, i, NULL, NULL, 0)) goto out_fail;
    assumed++;
  }
  if (assumed)
    rn_topo_add_note(x.t, "%d PCI endpoint(s) without class or children assumed to be NICs",
                     assumed);
  if (x.t->nhosts > 1)
    rn_topo_add_note(x.t, "%d hosts in one file (host_hash differs): each is planned on its own",
                     x.t->nhosts);
  if (rn_topo_finalize(x.t, err, errlen)) goto out_fail;
  free(x.pending);
  free(x.attached);
  *out = x.t;
  return 0;
out_oom:
  rn_topo_errf(err, errlen, "out of memory");
out_fail:
  free(x.pending);
  free(x.attached);
  rn_topo_free(x.t);
  return -1;
}

int rn_topo_load_ncclxml(const char *const *paths, int npaths, struct rn_topo **out, char *err,
                         size_t errlen) {
  return rn_nx_run(paths, NULL, 0, npaths, out, err, errlen);
}

int rn_topo_load_ncclxml_buf(const char *buf, size_t len, struct rn_topo **out, char *err,
                             size_t errlen) {
  return rn_nx_run(NULL, buf, len, 1, out, err, errlen);
}
