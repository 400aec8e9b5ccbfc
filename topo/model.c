/* The machine model: the one interface loaders fill, and the queries the
 * planner and the public API read.  Immutable after rn_topo_finalize, so
 * readers need no lock. */
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

static const char *const rn_path_names[] = {"LOC", "PIX", "PXB", "PHB", "NODE", "SYS"};

const char *rn_path_name(enum rn_path p) {
  if ((int)p < 0 || (int)p > RN_PATH_SYS) return "?";
  return rn_path_names[p];
}

int rn_path_parse(const char *s, enum rn_path *out) {
  if (!s) return -1;
  for (int i = 0; i <= RN_PATH_SYS; i++) {
    if (strcasecmp(s, rn_path_names[i]) == 0) {
      *out = (enum rn_path)i;
      return 0;
    }
  }
  return -1;
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
  n->cpu = -1;
  n->numa = -1;
  if (busid) snprintf(n->busid, sizeof(n->busid), "%s", busid);
  if (ids) n->ids = *ids;
  return t->nnodes++;
}

int rn_topo_add_cpu(struct rn_topo *t, int numa) {
  int i = rn_topo_add_node(t, RN_TOPO_ROOT, RN_NODE_CPU, NULL, NULL);
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
  g->pub.gdr = gdr;
  snprintf(g->pub.busid, sizeof(g->pub.busid), "%s", t->nodes[node].busid);
  return t->ngpus++;
}

int rn_topo_add_nic(struct rn_topo *t, int node, const struct rn_topo_nic *nic) {
  if (rn_grow((void **)&t->nics, &t->capnics, t->nnics, sizeof(*t->nics))) return -1;
  struct rn_nic_rec *r = &t->nics[t->nnics];
  r->pub = *nic;
  r->node = node;
  if (t->nodes[node].kind == RN_NODE_DEV)
    snprintf(r->pub.busid, sizeof(r->pub.busid), "%s", t->nodes[node].busid);
  else
    r->pub.busid[0] = '\0';
  return t->nnics++;
}

int rn_topo_add_note(struct rn_topo *t, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (rn_grow((void **)&t->notes, &t->capnotes, t->nnotes, sizeof(*t->notes))) return -1;
  t->notes[t->nnotes] = strdup(buf);
  if (!t->notes[t->nnotes]) return -1;
  return t->nnotes++;
}

/* Broadcom PEX switches present themselves as two nested switches; NCCL
 * merges the inner one into the outer so GPU<->NIC under one physical
 * switch stays PIX.  Gen4 (c010) shows the same ids at both levels; Gen5
 * (c030) marks the inner level with a 1xxx subsystem device. */
static int rn_is_bcm_sub_switch(const struct rn_node *parent, const struct rn_node *child) {
  if (parent->kind != RN_NODE_SWITCH || child->kind != RN_NODE_SWITCH) return 0;
  if (!parent->ids.has_ids || !child->ids.has_ids) return 0;
  if (parent->ids.vendor != 0x1000 || child->ids.vendor != 0x1000) return 0;
  if (parent->ids.device != child->ids.device) return 0;
  if (child->ids.device == 0xc010) return 1;
  if (child->ids.device == 0xc030)
    return (child->ids.subdevice & 0xf000) == 0x1000 && (parent->ids.subdevice & 0xf000) == 0x0000;
  return 0;
}

static int rn_gpu_cmp(const void *a, const void *b) {
  const struct rn_gpu_rec *x = a, *y = b;
  int c = strcmp(x->pub.busid, y->pub.busid);
  return c ? c : x->node - y->node;
}

static int rn_nic_cmp(const void *a, const void *b) {
  const struct rn_nic_rec *x = a, *y = b;
  /* NICs without a PCI function sort after all others. */
  int xe = x->pub.busid[0] == '\0', ye = y->pub.busid[0] == '\0';
  if (xe != ye) return xe - ye;
  int c = strcmp(x->pub.busid, y->pub.busid);
  if (c) return c;
  if (x->pub.port != y->pub.port) return x->pub.port - y->pub.port;
  return strcmp(x->pub.name, y->pub.name);
}

int rn_topo_finalize(struct rn_topo *t, char *err, size_t errlen) {
  int merged = 0;
  /* A switch something sits on directly (merged files can do that) is
   * never folded: the device must keep a node. */
  unsigned char *holds = calloc((size_t)t->nnodes + 1, 1);
  if (!holds) {
    rn_topo_errf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < t->ngpus; i++) holds[t->gpus[i].node] = 1;
  for (int i = 0; i < t->nnics; i++) holds[t->nics[i].node] = 1;
  /* Parents are always created before their children, so one forward pass
   * sees every parent already settled. */
  for (int i = 1; i < t->nnodes; i++) {
    struct rn_node *n = &t->nodes[i];
    if (n->parent < 0 || n->parent >= i) {
      free(holds);
      rn_topo_errf(err, errlen, "internal: node %d has parent %d", i, n->parent);
      return -1;
    }
    while (t->nodes[n->parent].depth < 0)
      n->parent = t->nodes[n->parent].parent; /* parent was folded away */
    struct rn_node *p = &t->nodes[n->parent];
    if (!holds[i] && rn_is_bcm_sub_switch(p, n)) {
      n->depth = -1; /* folded: children re-parent to p */
      merged++;
      continue;
    }
    n->depth = p->depth + 1;
    if (n->cpu < 0) n->cpu = p->cpu;
    if (n->numa < 0) n->numa = p->numa;
  }
  free(holds);
  for (int i = 0; i < t->ngpus; i++) {
    struct rn_node *n = &t->nodes[t->gpus[i].node];
    t->gpus[i].pub.cpu = n->cpu;
    t->gpus[i].pub.numa = n->numa;
  }
  for (int i = 0; i < t->nnics; i++) {
    struct rn_node *n = &t->nodes[t->nics[i].node];
    t->nics[i].pub.cpu = n->cpu;
    t->nics[i].pub.numa = n->numa;
  }
  if (merged)
    rn_topo_add_note(t, "merged %d Broadcom sub-switch level(s) into their parents", merged);
  if (t->ngpus > 1) qsort(t->gpus, (size_t)t->ngpus, sizeof(*t->gpus), rn_gpu_cmp);
  if (t->nnics > 1) qsort(t->nics, (size_t)t->nnics, sizeof(*t->nics), rn_nic_cmp);
  return 0;
}

const char *rn_topo_source(const struct rn_topo *t) { return t->source; }
int rn_topo_ngpus(const struct rn_topo *t) { return t->ngpus; }
int rn_topo_nnics(const struct rn_topo *t) { return t->nnics; }
int rn_topo_ncpus(const struct rn_topo *t) { return t->ncpus; }
int rn_topo_nnotes(const struct rn_topo *t) { return t->nnotes; }

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
  char norm[16] = "";
  if (busid && rn_topo_busid_norm(busid, norm, sizeof(norm)) != 0) norm[0] = '\0';
  for (int i = 0; i < t->nnics; i++) {
    const struct rn_topo_nic *n = &t->nics[i].pub;
    if (name && name[0] &&
        (strcmp(n->name, name) == 0 || (n->netdev[0] && strcmp(n->netdev, name) == 0)))
      return i;
    if (norm[0] && strcmp(n->busid, norm) == 0) return i;
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

enum rn_path rn_topo_node_path(const struct rn_topo *t, int a, int b, int *hops, int *lca) {
  const struct rn_node *N = t->nodes;
  int x = a, y = b, h = 0, nsw = 0, hba = 0, hbb = 0;
  if (hops) *hops = 0;
  if (lca) *lca = 0;
  while (x != y) {
    if (N[x].depth >= N[y].depth)
      x = N[x].parent;
    else
      y = N[y].parent;
    h++;
    if (x < 0 || y < 0) return RN_PATH_SYS; /* cannot happen after finalize */
  }
  /* The switches a path crosses are those strictly above each endpoint up
   * to and including the LCA: at most one is PIX (NCCL's rule). */
  for (int v = N[a].parent; v >= 0 && v != x; v = N[v].parent) {
    nsw += N[v].kind == RN_NODE_SWITCH;
    hba |= N[v].kind == RN_NODE_HOSTBRIDGE;
  }
  for (int v = N[b].parent; v >= 0 && v != x; v = N[v].parent) {
    nsw += N[v].kind == RN_NODE_SWITCH;
    hbb |= N[v].kind == RN_NODE_HOSTBRIDGE;
  }
  if (hops) *hops = h;
  if (lca) *lca = x;
  switch (N[x].kind) {
    case RN_NODE_DEV:
      return RN_PATH_LOC;
    case RN_NODE_SWITCH:
      return nsw + 1 <= 1 ? RN_PATH_PIX : RN_PATH_PXB;
    case RN_NODE_HOSTBRIDGE:
      return RN_PATH_PHB;
    case RN_NODE_CPU:
      /* Two different host bridges of one CPU: hwloc/nvidia-smi call it NODE.
     * NCCL XML has no host bridges, so there the CPU is the host bridge. */
      return (hba && hbb) ? RN_PATH_NODE : RN_PATH_PHB;
    case RN_NODE_ROOT:
    default:
      return RN_PATH_SYS;
  }
}

void rn_topo_node_describe(const struct rn_topo *t, int node, char *buf, size_t len) {
  const struct rn_node *n = &t->nodes[node];
  switch (n->kind) {
    case RN_NODE_SWITCH:
      snprintf(buf, len, "switch %s", n->busid[0] ? n->busid : "?");
      break;
    case RN_NODE_HOSTBRIDGE:
      snprintf(buf, len, "host bridge %s on CPU %d", n->busid[0] ? n->busid : "?", n->cpu);
      break;
    case RN_NODE_CPU:
      snprintf(buf, len, "CPU %d", n->cpu);
      break;
    case RN_NODE_DEV:
      snprintf(buf, len, "device %s", n->busid);
      break;
    case RN_NODE_ROOT:
    default:
      snprintf(buf, len, "the inter-CPU link");
      break;
  }
}

enum rn_path rn_topo_path(const struct rn_topo *t, int g, int n, char *via, size_t vialen) {
  int lca = 0;
  if (g < 0 || g >= t->ngpus || n < 0 || n >= t->nnics) {
    if (via && vialen) via[0] = '\0';
    return RN_PATH_SYS;
  }
  enum rn_path p = rn_topo_node_path(t, t->gpus[g].node, t->nics[n].node, NULL, &lca);
  if (via && vialen) {
    if (p == RN_PATH_SYS && t->gpus[g].pub.cpu >= 0 && t->nics[n].pub.cpu >= 0)
      snprintf(via, vialen, "CPU %d -> CPU %d", t->gpus[g].pub.cpu, t->nics[n].pub.cpu);
    else
      rn_topo_node_describe(t, lca, via, vialen);
  }
  return p;
}
