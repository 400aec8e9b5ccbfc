/* The machine model: the one interface loaders fill, and the queries the
 * planner and the public API read.  Immutable after rn_topo_finalize, so
 * readers need no lock.
 *
 * Paths follow NCCL (src/graph/paths.cc, v2.28): a path's type is the
 * worst of its links, where a link between a device and a PCI switch is
 * PIX, between two PCI switches PXB, touching a CPU PHB, between CPUs SYS.
 * A GPU with NVLink-C2C to its CPU reaches that CPU's NICs as P2C; a GPU
 * NVLink-connected to a GPU close to a NIC reaches it as PXN.  A pair
 * closer than PHB that gets no GPUDirect RDMA goes through the GPU's CPU
 * instead (PHB, SYS across CPUs); the PCI path still ranks the NICs. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

void rn_topo_errf(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  if (!err || errlen == 0) return;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* NCCL's topoPathTypeStr. */
static const char *const rn_path_names[] = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB",
                                            "P2C", "PXN", "PHB", "SYS", "NET", "DIS"};

const char *rn_path_name(enum rn_path p) {
  if ((int)p < 0 || (int)p > RN_PATH_DIS) return "?";
  return rn_path_names[p];
}

int rn_path_parse(const char *s, enum rn_path *out) {
  if (!s) return -1;
  for (int i = 0; i <= RN_PATH_DIS; i++) {
    if (strcasecmp(s, rn_path_names[i]) == 0) {
      *out = (enum rn_path)i;
      return 0;
    }
  }
  return -1;
}

int rn_gdr_level_parse(const char *s, int nccl_exact, enum rn_path *out) {
  /* NCCL's levels before path types had names: 0 LOC, 1 PIX, 2 PXB, 3 PHB,
   * 4 SYS, and anything larger is SYS (ncclGetLevel). */
  static const enum rn_path old[] = {RN_PATH_LOC, RN_PATH_PIX, RN_PATH_PXB, RN_PATH_PHB,
                                     RN_PATH_SYS};
  if (!s || !*s) return 1;
  /* ncclGetLevel accepts the names up to SYS only. */
  for (int i = 0; i <= RN_PATH_SYS; i++) {
    int eq = nccl_exact ? strcmp(s, rn_path_names[i]) == 0 : strcasecmp(s, rn_path_names[i]) == 0;
    if (eq) {
      *out = (enum rn_path)i;
      return 0;
    }
  }
  if (!isdigit((unsigned char)s[0])) return nccl_exact ? 1 : -1;
  char *end;
  long v = strtol(s, &end, 0);
  if (!nccl_exact && *end != '\0') return -1;
  if (v < 0) v = 0; /* cannot happen: s starts with a digit */
  *out = old[v > 4 ? 4 : v];
  return 0;
}

static int rn_hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* Reads up to maxd hex digits; returns digits read. */
static int rn_hexfield(const char **p, int maxd, unsigned long *v) {
  int n = 0;
  *v = 0;
  while (n < maxd && rn_hexval((unsigned char)**p) >= 0) {
    *v = *v * 16 + (unsigned long)rn_hexval((unsigned char)**p);
    (*p)++;
    n++;
  }
  return n;
}

int rn_topo_busid_norm(const char *in, char *out, size_t outlen) {
  unsigned long dom = 0, bus, dev, fn;
  const char *p = in, *colon2;
  if (!in || !out || outlen < 13) return -1;
  colon2 = strchr(in, ':');
  if (colon2 && strchr(colon2 + 1, ':')) {
    /* Domains are 16-bit in Linux; NCCL's virtual switches use ffff. */
    if (rn_hexfield(&p, 4, &dom) < 1 || *p++ != ':') return -1;
  }
  if (rn_hexfield(&p, 2, &bus) < 1 || *p++ != ':') return -1;
  if (rn_hexfield(&p, 2, &dev) < 1 || *p++ != '.') return -1;
  if (rn_hexfield(&p, 1, &fn) != 1 || *p != '\0') return -1;
  if (dev > 0x1f || fn > 7) return -1;
  snprintf(out, outlen, "%04lx:%02lx:%02lx.%lx", dom, bus, dev, fn);
  return 0;
}

double rn_topo_pcie_bw(const char *speed, int width) {
  /* NCCL's kvDictPciGen: per-lane rate in 100 Mb/s units. */
  static const struct {
    const char *s;
    int v;
  } gen[] = {{"2.5 GT/s", 15},        {"5 GT/s", 30},         {"8 GT/s", 60},
             {"16 GT/s", 120},        {"32 GT/s", 240},       {"2.5 GT/s PCIe", 15},
             {"5.0 GT/s PCIe", 30},   {"8.0 GT/s PCIe", 60},  {"16.0 GT/s PCIe", 120},
             {"32.0 GT/s PCIe", 240}, {"64.0 GT/s PCIe", 480}};
  if (!speed || width <= 0) return 0;
  /* As NCCL's kvConvertToInt: the first entry the value starts with, else
   * PCIe Gen3 ("", "32.0 GT/s" and other spellings the kernel never
   * wrote). */
  for (size_t i = 0; i < sizeof(gen) / sizeof(gen[0]); i++)
    if (strncmp(speed, gen[i].s, strlen(gen[i].s)) == 0) return width * gen[i].v / 80.0;
  return width * 60 / 80.0;
}

struct rn_topo *rn_topo_alloc(const char *source) {
  struct rn_topo *t = calloc(1, sizeof(*t));
  if (!t) return NULL;
  snprintf(t->source, sizeof(t->source), "%s", source);
  if (rn_topo_add_node(t, -1, RN_NODE_ROOT, NULL, NULL) != RN_TOPO_ROOT) {
    rn_topo_free(t);
    return NULL;
  }
  return t;
}

void rn_topo_free(struct rn_topo *t) {
  if (!t) return;
  for (int i = 0; i < t->nnotes; i++) free(t->notes[i]);
  free(t->notes);
  free(t->nics);
  free(t->gpus);
  free(t->nodes);
  free(t->hosts);
  free(t->nvl_edges);
  free(t->nvl);
  free(t->pci);
  free(t->ncclp);
  free(t->lca);
  free(t->bw);
  free(t->nic_local);
  free(t);
}

/* Grows *arr to hold one more element of size sz. */
static int rn_grow(void **arr, int *cap, int n, size_t sz) {
  if (n < *cap) return 0;
  int ncap = *cap ? *cap * 2 : 16;
  void *p = realloc(*arr, (size_t)ncap * sz);
  if (!p) return -1;
  *arr = p;
  *cap = ncap;
  return 0;
}

int rn_topo_add_node(struct rn_topo *t, int parent, enum rn_node_kind kind, const char *busid,
                     const struct rn_pci_ids *ids) {
  if (rn_grow((void **)&t->nodes, &t->capnodes, t->nnodes, sizeof(*t->nodes))) return -1;
  struct rn_node *n = &t->nodes[t->nnodes];
  memset(n, 0, sizeof(*n));
  n->kind = kind;
  n->parent = parent;
  n->host = parent >= 0 ? t->nodes[parent].host : 0;
  n->cpu = -1;
  n->numa = -1;
  if (busid) snprintf(n->busid, sizeof(n->busid), "%s", busid);
  if (ids) n->ids = *ids;
  return t->nnodes++;
}

int rn_topo_host(struct rn_topo *t, const char *name) {
  for (int h = 0; h < t->nhosts; h++)
    if (strcmp(t->hosts[h], name ? name : "") == 0) return h;
  if (rn_grow((void **)&t->hosts, &t->caphosts, t->nhosts, sizeof(*t->hosts))) return -1;
  int node = rn_topo_add_node(t, RN_TOPO_ROOT, RN_NODE_HOST, NULL, NULL);
  if (node < 0) return -1;
  t->nodes[node].host = t->nhosts;
  snprintf(t->hosts[t->nhosts], sizeof(t->hosts[0]), "%s", name ? name : "");
  return t->nhosts++;
}

int rn_topo_host_node(const struct rn_topo *t, int host) {
  for (int i = 1; i < t->nnodes; i++)
    if (t->nodes[i].kind == RN_NODE_HOST && t->nodes[i].host == host) return i;
  return -1;
}

int rn_topo_add_package(struct rn_topo *t, int host) {
  int hn = rn_topo_host_node(t, host);
  return hn < 0 ? -1 : rn_topo_add_node(t, hn, RN_NODE_PACKAGE, NULL, NULL);
}

int rn_topo_add_cpu(struct rn_topo *t, int parent, int numa) {
  int i = rn_topo_add_node(t, parent, RN_NODE_CPU, NULL, NULL);
  if (i < 0) return -1;
  t->nodes[i].cpu = t->ncpus++;
  t->nodes[i].numa = numa;
  return i;
}

int rn_topo_add_gpu(struct rn_topo *t, int node, int gdr) {
  if (rn_grow((void **)&t->gpus, &t->capgpus, t->ngpus, sizeof(*t->gpus))) return -1;
  struct rn_gpu_rec *g = &t->gpus[t->ngpus];
  memset(g, 0, sizeof(*g));
  g->node = node;
  g->order = t->ngpus;
  g->pub.gdr = gdr;
  snprintf(g->pub.busid, sizeof(g->pub.busid), "%s", t->nodes[node].busid);
  return t->ngpus++;
}

int rn_topo_add_nic(struct rn_topo *t, int node, const struct rn_topo_nic *nic) {
  if (rn_grow((void **)&t->nics, &t->capnics, t->nnics, sizeof(*t->nics))) return -1;
  struct rn_nic_rec *r = &t->nics[t->nnics];
  memset(r, 0, sizeof(*r));
  r->pub = *nic;
  r->node = node;
  r->order = t->nnics;
  r->user_rail = r->user_plane = -1;
  if (!r->pub.device[0]) snprintf(r->pub.device, sizeof(r->pub.device), "%s", r->pub.name);
  if (r->pub.port <= 0) r->pub.port = 1;
  if (t->nodes[node].kind == RN_NODE_DEV || t->nodes[node].kind == RN_NODE_SWITCH)
    snprintf(r->pub.busid, sizeof(r->pub.busid), "%s", t->nodes[node].busid);
  else
    r->pub.busid[0] = '\0';
  return t->nnics++;
}

int rn_topo_add_nvlink(struct rn_topo *t, int gpu_node, const char *target, int target_node) {
  if (rn_grow((void **)&t->nvl_edges, &t->capnvl_edges, t->nnvl_edges, sizeof(*t->nvl_edges)))
    return -1;
  struct rn_nvl_edge *e = &t->nvl_edges[t->nnvl_edges];
  e->gpu_node = gpu_node;
  e->target_node = target ? -1 : target_node;
  snprintf(e->target, sizeof(e->target), "%s", target ? target : "");
  return t->nnvl_edges++;
}

int rn_topo_add_note(struct rn_topo *t, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  for (int i = 0; i < t->nnotes; i++)
    if (strcmp(t->notes[i], buf) == 0) return i; /* said once is enough */
  if (rn_grow((void **)&t->notes, &t->capnotes, t->nnotes, sizeof(*t->notes))) return -1;
  t->notes[t->nnotes] = strdup(buf);
  if (!t->notes[t->nnotes]) return -1;
  return t->nnotes++;
}

/* NCCL's getBcmGen: Broadcom PEX switches that present one physical switch
 * as two levels.  Gen4 (c010, subsystem 1000:axxx) looks the same at both
 * levels; Gen5 (c030) marks the top with subsystem device 0xxx and the
 * inner level with 1xxx.  NVIDIA-subsystem bridges (10de:xxxx) never
 * match, so the bridge in front of an HGX A100 GPU stays a level. */
static int rn_bcm_gen(const struct rn_pci_ids *ids, int level) {
  if (!ids->has_ids || ids->vendor != 0x1000 || ids->subvendor != 0x1000) return 0;
  if (ids->device == 0xc010 && (ids->subdevice & 0xf000) == 0xa000) return 4;
  if (ids->device == 0xc030 && (ids->subdevice & 0xf000) == (unsigned)(level * 0x1000)) return 5;
  return 0;
}

static int rn_gpu_cmp(const void *a, const void *b) {
  const struct rn_gpu_rec *x = a, *y = b;
  if (x->pub.host != y->pub.host) return x->pub.host - y->pub.host;
  int c = strcmp(x->pub.busid, y->pub.busid);
  return c ? c : x->order - y->order;
}

/* Names with numbers in natural order: mlx5_9 before mlx5_10. */
static int rn_natcmp(const char *a, const char *b) {
  while (*a && *b) {
    if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
      char *ea, *eb;
      unsigned long x = strtoul(a, &ea, 10), y = strtoul(b, &eb, 10);
      if (x != y) return x < y ? -1 : 1;
      a = ea;
      b = eb;
      continue;
    }
    if (*a != *b) return (unsigned char)*a - (unsigned char)*b;
    a++, b++;
  }
  return (unsigned char)*a - (unsigned char)*b;
}

static int rn_nic_cmp(const void *a, const void *b) {
  const struct rn_nic_rec *x = a, *y = b;
  if (x->pub.host != y->pub.host) return x->pub.host - y->pub.host;
  /* NICs without a PCI function sort after all others. */
  int xe = x->pub.busid[0] == '\0', ye = y->pub.busid[0] == '\0';
  if (xe != ye) return xe - ye;
  int c = strcmp(x->pub.busid, y->pub.busid);
  if (c) return c;
  c = rn_natcmp(x->pub.device, y->pub.device);
  if (c) return c;
  if (x->pub.port != y->pub.port) return x->pub.port - y->pub.port;
  return x->order - y->order;
}

/* Folds Broadcom sub-switches into their top switch, one level deep, as
 * ncclTopoFlattenBcmSwitches does: a top absorbs the matching switches
 * that are its direct children, after which it is no longer a top; a
 * matching switch further down becomes a top of its own.  holds marks
 * nodes a device sits on directly (merged files), which keep their node.
 * Returns the number of levels folded. */
static int rn_topo_fold_bcm(struct rn_topo *t, const unsigned char *holds, const int *orig) {
  int merged = 0;
  for (int i = 1; i < t->nnodes; i++) {
    struct rn_node *n = &t->nodes[i];
    if (n->kind != RN_NODE_SWITCH || n->depth < 0) continue;
    int gen = rn_bcm_gen(&n->ids, 0);
    if (!gen) continue;
    for (int j = i + 1; j < t->nnodes; j++) {
      struct rn_node *c = &t->nodes[j];
      if (orig[j] != i || c->kind != RN_NODE_SWITCH || c->depth < 0 || holds[j]) continue;
      if (rn_bcm_gen(&c->ids, 1) != gen) continue;
      c->depth = -1;
      merged++;
    }
  }
  return merged;
}

static int rn_topo_nic_names(struct rn_topo *t) {
  for (int i = 0; i < t->nnics; i++) {
    struct rn_topo_nic *n = &t->nics[i].pub;
    int ports = 0;
    for (int j = 0; j < t->nnics; j++) {
      const struct rn_topo_nic *m = &t->nics[j].pub;
      ports += m->host == n->host && strcmp(m->device, n->device) == 0;
    }
    if (ports > 1)
      snprintf(n->name, sizeof(n->name), "%.50s:%d", n->device, n->port);
    else
      snprintf(n->name, sizeof(n->name), "%s", n->device);
    /* One NIC = one PCI device: functions differ only in the last digit
     * (NCCL's PORT merge level compares bus ids without it). */
    n->asic = i;
    for (int j = 0; j < i; j++) {
      const struct rn_topo_nic *m = &t->nics[j].pub;
      if (m->host != n->host) continue;
      int same = n->busid[0] ? strncmp(m->busid, n->busid, 11) == 0 && m->busid[0]
                             : !m->busid[0] && strcmp(m->device, n->device) == 0;
      if (same) {
        n->asic = m->asic;
        break;
      }
    }
  }
  return 0;
}

static int rn_topo_find_gpu_busid(const struct rn_topo *t, int host, const char *busid) {
  char norm[16];
  if (rn_topo_busid_norm(busid, norm, sizeof(norm))) return -1;
  for (int g = 0; g < t->ngpus; g++)
    if (t->gpus[g].pub.host == host && strcmp(t->gpus[g].pub.busid, norm) == 0) return g;
  return -1;
}

static int rn_topo_compute_paths(struct rn_topo *t) {
  size_t G = (size_t)t->ngpus, N = (size_t)t->nnics;
  t->nvl = calloc(G * G + 1, 1);
  t->pci = calloc(G * N + 1, 1);
  t->ncclp = calloc(G * N + 1, 1);
  t->lca = calloc(G * N + 1, sizeof(int));
  t->bw = calloc(G * N + 1, sizeof(float));
  t->nic_local = calloc(N + 1, sizeof(int));
  if (!t->nvl || !t->pci || !t->ncclp || !t->lca || !t->bw || !t->nic_local) return -1;
  /* NVLink: GPUs of one host both on NVSwitches, or linked directly. */
  for (size_t g = 0; g < G; g++)
    for (size_t h = 0; h < G; h++)
      t->nvl[g * G + h] = g != h && t->gpus[g].nvswitch && t->gpus[h].nvswitch &&
                          t->gpus[g].pub.host == t->gpus[h].pub.host;
  for (int e = 0; e < t->nnvl_edges; e++) {
    int g = -1;
    for (int i = 0; i < t->ngpus && g < 0; i++)
      if (t->gpus[i].node == t->nvl_edges[e].gpu_node) g = i;
    if (g < 0) continue;
    int h = -1;
    if (t->nvl_edges[e].target_node >= 0) {
      for (int i = 0; i < t->ngpus && h < 0; i++)
        if (t->gpus[i].node == t->nvl_edges[e].target_node) h = i;
    } else {
      h = rn_topo_find_gpu_busid(t, t->gpus[g].pub.host, t->nvl_edges[e].target);
    }
    if (h >= 0 && h != g) t->nvl[(size_t)g * G + (size_t)h] = t->nvl[(size_t)h * G + (size_t)g] = 1;
  }
  for (size_t g = 0; g < G; g++) {
    const struct rn_gpu_rec *gr = &t->gpus[g];
    int gcpu = rn_topo_node_cpu(t, gr->node);
    for (size_t n = 0; n < N; n++) {
      const struct rn_nic_rec *nr = &t->nics[n];
      int lca = 0;
      double bw = 0;
      enum rn_path p = rn_topo_node_path(t, gr->node, nr->node, &lca, &bw);
      /* NVLink-C2C to the CPU, then PCIe to a NIC of that CPU: P2C
       * (NCCL's mergePathType of C2C and PHB), when nothing better. */
      if (gr->pub.c2c && gcpu >= 0 && rn_topo_node_under(t, nr->node, gcpu) && p > RN_PATH_P2C) {
        double nb = 0;
        (void)rn_topo_node_path(t, gcpu, nr->node, NULL, &nb);
        p = RN_PATH_P2C;
        lca = gcpu;
        bw = gr->c2c_bw > 0 && (nb <= 0 || gr->c2c_bw < nb) ? gr->c2c_bw : nb;
      }
      double ns = nr->pub.speed_mbps > 0 ? nr->pub.speed_mbps / 8000.0 : 0;
      if (ns > 0 && (bw <= 0 || ns < bw)) bw = ns;
      t->pci[g * N + n] = (unsigned char)p;
      t->lca[g * N + n] = lca;
      t->bw[g * N + n] = (float)bw;
    }
  }
  /* The NIC's local GPU (ncclTopoGetLocalGpu): among the GPUs of its host
   * with the widest, then shortest, path to it, the first in bus order. */
  for (size_t n = 0; n < N; n++) {
    int best = -1;
    for (size_t h = 0; h < G; h++) {
      if (t->gpus[h].pub.host != t->nics[n].pub.host) continue;
      float bh = t->bw[h * N + n], bb = best < 0 ? 0 : t->bw[(size_t)best * N + n];
      unsigned char ph = t->pci[h * N + n], pb = best < 0 ? 0 : t->pci[(size_t)best * N + n];
      if (best < 0 || bh > bb || (bh == bb && ph < pb)) best = (int)h;
    }
    t->nic_local[n] = best;
  }
  struct rn_route_opts o;
  rn_route_opts_default(&o);
  for (size_t g = 0; g < G; g++)
    for (size_t n = 0; n < N; n++) {
      struct rn_route r;
      rn_topo_route(t, (int)g, (int)n, &o, &r);
      t->ncclp[g * N + n] = (unsigned char)r.path;
    }
  return 0;
}

int rn_topo_finalize(struct rn_topo *t, char *err, size_t errlen) {
  /* A switch a device sits on directly (merged files can do that) is
   * never folded: the device must keep a node. */
  unsigned char *holds = calloc((size_t)t->nnodes + 1, 1);
  int *orig = malloc(((size_t)t->nnodes + 1) * sizeof(int));
  if (!holds || !orig) {
    free(holds);
    free(orig);
    rn_topo_errf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < t->ngpus; i++) holds[t->gpus[i].node] = 1;
  for (int i = 0; i < t->nnics; i++) holds[t->nics[i].node] = 1;
  for (int i = 0; i < t->nnodes; i++) {
    orig[i] = t->nodes[i].parent;
    t->nodes[i].depth = 0;
    /* Parents are always created before their children, so one forward
     * pass sees every parent settled. */
    if (i > 0 && (t->nodes[i].parent < 0 || t->nodes[i].parent >= i)) {
      free(holds);
      free(orig);
      rn_topo_errf(err, errlen, "internal: node %d has parent %d", i, t->nodes[i].parent);
      return -1;
    }
  }
  int merged = rn_topo_fold_bcm(t, holds, orig);
  free(holds);
  free(orig);
  for (int i = 1; i < t->nnodes; i++) {
    struct rn_node *n = &t->nodes[i];
    while (t->nodes[n->parent].depth < 0)
      n->parent = t->nodes[n->parent].parent; /* parent was folded away */
    if (n->depth < 0) continue;
    struct rn_node *p = &t->nodes[n->parent];
    n->depth = p->depth + 1;
    if (n->kind != RN_NODE_HOST) n->host = p->host;
    if (n->cpu < 0) n->cpu = p->cpu;
    if (n->numa < 0 && n->kind != RN_NODE_CPU) n->numa = p->numa;
  }
  for (int i = 0; i < t->ngpus; i++) {
    struct rn_node *n = &t->nodes[t->gpus[i].node];
    t->gpus[i].pub.cpu = n->cpu;
    t->gpus[i].pub.numa = n->numa;
    t->gpus[i].pub.host = n->host;
  }
  for (int i = 0; i < t->nnics; i++) {
    struct rn_node *n = &t->nodes[t->nics[i].node];
    t->nics[i].pub.cpu = n->cpu;
    t->nics[i].pub.numa = n->numa;
    t->nics[i].pub.host = n->host;
  }
  if (merged)
    rn_topo_add_note(t, "merged %d Broadcom sub-switch level(s) into their parents", merged);
  if (t->ngpus > 1) qsort(t->gpus, (size_t)t->ngpus, sizeof(*t->gpus), rn_gpu_cmp);
  if (t->nnics > 1) qsort(t->nics, (size_t)t->nnics, sizeof(*t->nics), rn_nic_cmp);
  if (t->nhosts == 0 && rn_topo_host(t, "") < 0) goto out_oom;
  if (rn_topo_nic_names(t) || rn_topo_compute_paths(t)) goto out_oom;
  return 0;
out_oom:
  rn_topo_errf(err, errlen, "out of memory");
  return -1;
}

const char *rn_topo_source(const struct rn_topo *t) { return t->source; }
int rn_topo_ngpus(const struct rn_topo *t) { return t->ngpus; }
int rn_topo_nnics(const struct rn_topo *t) { return t->nnics; }
int rn_topo_ncpus(const struct rn_topo *t) { return t->ncpus; }
int rn_topo_nnotes(const struct rn_topo *t) { return t->nnotes; }
int rn_topo_nhosts(const struct rn_topo *t) { return t->nhosts; }

const char *rn_topo_host_name(const struct rn_topo *t, int h) {
  return (h >= 0 && h < t->nhosts) ? t->hosts[h] : "";
}

const char *rn_topo_note(const struct rn_topo *t, int i) {
  return (i >= 0 && i < t->nnotes) ? t->notes[i] : NULL;
}

const struct rn_topo_gpu *rn_topo_gpu(const struct rn_topo *t, int i) {
  return (i >= 0 && i < t->ngpus) ? &t->gpus[i].pub : NULL;
}

const struct rn_topo_nic *rn_topo_nic(const struct rn_topo *t, int i) {
  return (i >= 0 && i < t->nnics) ? &t->nics[i].pub : NULL;
}

int rn_topo_find_nic(const struct rn_topo *t, const char *name, const char *busid) {
  char norm[16] = "", dev[64] = "";
  int port = -1;
  if (busid && rn_topo_busid_norm(busid, norm, sizeof(norm)) != 0) norm[0] = '\0';
  if (name) {
    /* "mlx5_0:2" names port 2 of mlx5_0 (the plugin's multi-port names). */
    const char *colon = strrchr(name, ':');
    if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
      snprintf(dev, sizeof(dev), "%.*s", (int)(colon - name), name);
      port = atoi(colon + 1);
    }
  }
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < t->nnics; i++) {
      const struct rn_topo_nic *n = &t->nics[i].pub;
      if (pass == 0 && name && name[0] &&
          (strcmp(n->name, name) == 0 || (n->netdev[0] && strcmp(n->netdev, name) == 0) ||
           (port > 0 && strcmp(n->device, dev) == 0 && n->port == port)))
        return i;
      /* Second pass: a plain device name picks its first port; then the bus id. */
      if (pass == 1 && name && name[0] && strcmp(n->device, name) == 0) return i;
      if (pass == 1 && norm[0] && strcmp(n->busid, norm) == 0) return i;
    }
  }
  return -1;
}

int rn_topo_node_cpu(const struct rn_topo *t, int node) {
  for (int v = node; v >= 0; v = t->nodes[v].parent)
    if (t->nodes[v].kind == RN_NODE_CPU) return v;
  return -1;
}

int rn_topo_node_under(const struct rn_topo *t, int node, int anc) {
  for (int v = node; v >= 0; v = t->nodes[v].parent)
    if (v == anc) return 1;
  return 0;
}

static void rn_minbw(double *bw, double v) {
  if (v > 0 && (*bw <= 0 || v < *bw)) *bw = v;
}

enum rn_path rn_topo_node_path(const struct rn_topo *t, int a, int b, int *lca, double *bw) {
  const struct rn_node *N = t->nodes;
  int x = a, y = b, pxb = 0;
  double w = 0;
  while (x != y) {
    int *s = N[x].depth >= N[y].depth ? &x : &y;
    int up = N[*s].parent;
    if (up < 0) break; /* cannot happen after finalize */
    if (N[*s].kind == RN_NODE_SWITCH && N[up].kind == RN_NODE_SWITCH) pxb = 1;
    rn_minbw(&w, N[*s].up_bw);
    *s = up;
  }
  if (lca) *lca = x;
  enum rn_path p;
  switch (x == y ? N[x].kind : RN_NODE_ROOT) {
    case RN_NODE_DEV:
      p = RN_PATH_LOC;
      break;
    case RN_NODE_SWITCH:
      p = pxb ? RN_PATH_PXB : RN_PATH_PIX;
      break;
    case RN_NODE_CPU:
      p = RN_PATH_PHB;
      break;
    case RN_NODE_PACKAGE:
    case RN_NODE_HOST: {
      p = RN_PATH_SYS;
      int c = rn_topo_node_cpu(t, a);
      if (c >= 0) rn_minbw(&w, N[c].cpu_bw);
      break;
    }
    case RN_NODE_ROOT:
    default:
      p = RN_PATH_DIS;
      w = 0;
      break;
  }
  if (bw) *bw = w;
  return p;
}

void rn_topo_node_describe(const struct rn_topo *t, int node, char *buf, size_t len) {
  const struct rn_node *n = &t->nodes[node];
  switch (n->kind) {
    case RN_NODE_SWITCH:
      snprintf(buf, len, "switch %s", n->busid[0] ? n->busid : "?");
      break;
    case RN_NODE_CPU:
      if (n->numa >= 0)
        snprintf(buf, len, "CPU (NUMA %d)", n->numa);
      else
        snprintf(buf, len, "CPU %d", n->cpu);
      break;
    case RN_NODE_DEV:
      snprintf(buf, len, "device %s", n->busid);
      break;
    case RN_NODE_PACKAGE:
    case RN_NODE_HOST:
      snprintf(buf, len, "the inter-CPU link");
      break;
    case RN_NODE_ROOT:
    default:
      snprintf(buf, len, "no link (another host)");
      break;
  }
}

int rn_topo_nvlinked(const struct rn_topo *t, int g, int h) {
  if (g < 0 || h < 0 || g >= t->ngpus || h >= t->ngpus) return 0;
  return t->nvl[(size_t)g * (size_t)t->ngpus + (size_t)h];
}

enum rn_path rn_topo_nic_path(const struct rn_topo *t, int a, int b) {
  if (a < 0 || b < 0 || a >= t->nnics || b >= t->nnics) return RN_PATH_DIS;
  return rn_topo_node_path(t, t->nics[a].node, t->nics[b].node, NULL, NULL);
}

enum rn_path rn_topo_pci_path(const struct rn_topo *t, int g, int n) {
  if (g < 0 || g >= t->ngpus || n < 0 || n >= t->nnics) return RN_PATH_DIS;
  return (enum rn_path)t->pci[(size_t)g * (size_t)t->nnics + (size_t)n];
}

double rn_topo_path_bw(const struct rn_topo *t, int g, int n) {
  if (g < 0 || g >= t->ngpus || n < 0 || n >= t->nnics) return 0;
  return t->bw[(size_t)g * (size_t)t->nnics + (size_t)n];
}

/* The GPU NCCL would relay g's traffic to NIC n through (ncclTopoComputePaths,
 * before any GDR check), -1 when none.  When g is as close as the NIC's
 * local GPU, the NIC is local to g and PXN does not apply. */
static int rn_topo_relay(const struct rn_topo *t, int g, int n, int pxn_c2c) {
  int best = t->nic_local[n];
  if (best < 0) return -1;
  enum rn_path pg = rn_topo_pci_path(t, g, n), pp = rn_topo_pci_path(t, best, n);
  double bg = rn_topo_path_bw(t, g, n), bp = rn_topo_path_bw(t, best, n);
  if (bp == bg && pp == pg) return -1; /* g is local to the NIC too */
  /* The peer is PXB (or P2C with NCCL_PXN_C2C) from the NIC,
   * NVLink-connected to g, on g's host, and either wider to the NIC or g
   * would otherwise cross the CPU. */
  if (pp > (pxn_c2c ? RN_PATH_P2C : RN_PATH_PXB)) return -1;
  if (!rn_topo_nvlinked(t, g, best)) return -1;
  if (t->gpus[g].pub.host != t->gpus[best].pub.host) return -1;
  if (!(bp > bg || pg > RN_PATH_PXN)) return -1;
  return best;
}

/* ncclTopoCheckGdr (v2.28) for GPU g and NIC n whose path is d through
 * relay peer (-1 none): both gdr flags allow it; a PXN pair is judged by
 * the relay's distance; P2C counts as C2C with NCCL_NET_GDR_C2C; then
 * distance <= level.  why (may be NULL) gets the rule that decided. */
static int rn_topo_gdr_check(const struct rn_topo *t, int g, int n, int peer, enum rn_path d,
                             const struct rn_route_opts *o, char *why, size_t len) {
  char scratch[8], pxn[64] = "", pname[24];
  enum rn_path lvl = o->gdr_level;
  if (!why) why = scratch, len = sizeof(scratch);
  if (!t->nics[n].pub.gdr) {
    snprintf(why, len, "the NIC has gdr=0");
    return 0;
  }
  if (!t->gpus[g].pub.gdr) {
    snprintf(why, len, "the GPU has gdr=0");
    return 0;
  }
  if (peer >= 0) {
    d = rn_topo_pci_path(t, peer, n);
    snprintf(pxn, sizeof(pxn), "PXN: GPU %s is %s, ",
             rn_topo_gpu_label(t, peer, pname, sizeof(pname)), rn_path_name(d));
  }
  if (d == RN_PATH_P2C && o->gdr_c2c) {
    snprintf(why, len, "%sP2C counts as C2C with NCCL_NET_GDR_C2C=1, C2C %s %s", pxn,
             RN_PATH_C2C <= lvl ? "<=" : ">", rn_path_name(lvl));
    return RN_PATH_C2C <= lvl;
  }
  snprintf(why, len, "%s%s %s %s", pxn, rn_path_name(d), d <= lvl ? "<=" : ">", rn_path_name(lvl));
  return d <= lvl;
}

enum rn_path rn_topo_cpu_path(const struct rn_topo *t, int g, int n) {
  int cpu = rn_topo_node_cpu(t, t->gpus[g].node);
  if (cpu < 0) return rn_topo_pci_path(t, g, n); /* no CPU to go through */
  enum rn_path p = rn_topo_node_path(t, cpu, t->nics[n].node, NULL, NULL);
  if (p < RN_PATH_PHB) p = RN_PATH_PHB; /* the GPU's own hop to its CPU */
  /* NVLink-C2C to the CPU, then PCIe below it (NCCL's C2C + PHB). */
  if (p == RN_PATH_PHB && t->gpus[g].pub.c2c) p = RN_PATH_P2C;
  return p;
}

void rn_topo_route(const struct rn_topo *t, int g, int n, const struct rn_route_opts *o,
                   struct rn_route *r) {
  memset(r, 0, sizeof(*r));
  r->peer = -1;
  r->path = r->pci = rn_topo_pci_path(t, g, n);
  if (r->pci == RN_PATH_DIS) return;
  int best = o->pxn ? rn_topo_relay(t, g, n, o->pxn_c2c) : -1;
  /* NCCL 2.28 sets PXN without asking about the relay's GDR (2.30 asks
   * ncclTopoCheckGdr about the relay first and refuses a relay without
   * it).  Order still matters: NCCL walks the GPUs one by one for each
   * NIC and, on reaching the relay, diverts the relay's own pair through
   * its CPU when that pair has no GDR (a relay with gdr=0, or too far at
   * this level); GPUs after it (bus order here) then find no relay close
   * to the NIC. */
  if (best >= 0 && g > best &&
      !rn_topo_gdr_check(t, best, n, -1, rn_topo_pci_path(t, best, n), o, NULL, 0))
    best = -1;
  if (best >= 0) r->path = RN_PATH_PXN, r->peer = best;
  /* Then ncclTopoCheckGdr for g itself: the NIC's and g's flags, the
   * relay's distance for a PXN pair. */
  r->gdr = rn_topo_gdr_check(t, g, n, r->peer, r->path, o, r->gdr_why, sizeof(r->gdr_why));
  /* A pair closer than PHB without GPUDirect RDMA goes through g's CPU,
   * both ways (ncclTopoComputePaths in 2.28 and 2.30). */
  if (r->path < RN_PATH_PHB && !r->gdr) {
    r->path = rn_topo_cpu_path(t, g, n);
    r->peer = -1;
    r->diverted = 1;
  }
}

void rn_route_opts_default(struct rn_route_opts *o) {
  o->pxn = 1;
  o->pxn_c2c = 1;
  o->gdr_level = RN_PATH_PXB;
  o->gdr_c2c = 1;
}

int rn_topo_pxn_peer(const struct rn_topo *t, int g, int n, int pxn_c2c, int *peer) {
  return rn_topo_pxn_peer_at(t, g, n, pxn_c2c, RN_PATH_PXB, 1, peer);
}

int rn_topo_pxn_peer_at(const struct rn_topo *t, int g, int n, int pxn_c2c, enum rn_path gdr_level,
                        int gdr_c2c, int *peer) {
  struct rn_route_opts o = {
      .pxn = 1, .pxn_c2c = pxn_c2c, .gdr_level = gdr_level, .gdr_c2c = gdr_c2c};
  struct rn_route r;
  *peer = -1;
  if (g < 0 || g >= t->ngpus || n < 0 || n >= t->nnics) return 0;
  rn_topo_route(t, g, n, &o, &r);
  *peer = r.peer;
  return r.path == RN_PATH_PXN;
}

const char *rn_topo_gpu_label(const struct rn_topo *t, int g, char *buf, size_t len) {
  if (t->gpus[g].pub.busid[0])
    snprintf(buf, len, "%s", t->gpus[g].pub.busid);
  else
    snprintf(buf, len, "GPU%d", g);
  return buf;
}

void rn_topo_via(const struct rn_topo *t, int g, int n, enum rn_path p, int peer, char *via,
                 size_t len) {
  const struct rn_topo_gpu *gp = &t->gpus[g].pub;
  char name[24];
  if (p == RN_PATH_PXN && peer >= 0)
    snprintf(via, len, "NVLink to GPU %s", rn_topo_gpu_label(t, peer, name, sizeof(name)));
  else if (p == RN_PATH_P2C)
    snprintf(via, len, "C2C to CPU (NUMA %d)", gp->numa);
  else if (p == RN_PATH_SYS)
    snprintf(via, len, "NUMA %d -> NUMA %d", gp->numa, t->nics[n].pub.numa);
  else if (p == RN_PATH_PHB && rn_topo_node_cpu(t, t->gpus[g].node) >= 0)
    /* the GPU's CPU: where a PCI path meets, or the detour without GDR */
    rn_topo_node_describe(t, rn_topo_node_cpu(t, t->gpus[g].node), via, len);
  else
    rn_topo_node_describe(t, t->lca[(size_t)g * (size_t)t->nnics + (size_t)n], via, len);
}

enum rn_path rn_topo_path(const struct rn_topo *t, int g, int n, char *via, size_t vialen) {
  if (g < 0 || g >= t->ngpus || n < 0 || n >= t->nnics) {
    if (via && vialen) via[0] = '\0';
    return RN_PATH_DIS;
  }
  enum rn_path p = (enum rn_path)t->ncclp[(size_t)g * (size_t)t->nnics + (size_t)n];
  if (via && vialen) {
    struct rn_route_opts o;
    struct rn_route r;
    rn_route_opts_default(&o);
    rn_topo_route(t, g, n, &o, &r);
    rn_topo_via(t, g, n, r.path, r.peer, via, vialen);
  }
  return p;
}
