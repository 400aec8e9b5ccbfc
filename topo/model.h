/* Private to topo/: the machine model every loader fills through one
 * interface (rn_topo_add_*), and the path queries the planner uses.
 * Owner: topo/model.c.  The model is a tree: root -> CPU nodes -> host
 * bridges -> PCIe switches -> PCI devices; GPUs and NICs point at a node.
 * Each SWITCH node is one PCIe switch as NCCL sees it (upstream port;
 * downstream ports are not nodes). */
#ifndef RN_TOPO_MODEL_H
#define RN_TOPO_MODEL_H

#include <stdarg.h>
#include "railnet/topo.h"

enum rn_node_kind {
  RN_NODE_ROOT = 0,
  RN_NODE_CPU,
  RN_NODE_HOSTBRIDGE,
  RN_NODE_SWITCH,
  RN_NODE_DEV,
};

struct rn_pci_ids {
  uint32_t class_code; /* 24-bit class, 0 unknown */
  uint16_t vendor, device, subvendor, subdevice;
  int has_ids; /* vendor/device known */
};

struct rn_node {
  enum rn_node_kind kind;
  int parent; /* effective parent (after switch flattening); -1 root */
  int depth;
  int cpu;  /* CPU node index (model numbering), -1 unknown */
  int numa; /* -1 unknown, inherited from the parent when unset */
  char busid[16];
  struct rn_pci_ids ids;
};

struct rn_gpu_rec {
  struct rn_topo_gpu pub;
  int node;
};

struct rn_nic_rec {
  struct rn_topo_nic pub;
  int node; /* PCI device node, or the CPU node for a NIC without PCI */
};

struct rn_topo {
  char source[16];
  struct rn_node *nodes;
  int nnodes, capnodes;
  struct rn_gpu_rec *gpus;
  int ngpus, capgpus;
  struct rn_nic_rec *nics;
  int nnics, capnics;
  int ncpus;
  char **notes;
  int nnotes, capnotes;
};

#define RN_TOPO_ROOT 0

/* Builder.  Each returns the new index, or -1 when out of memory. */
struct rn_topo *rn_topo_alloc(const char *source);
int rn_topo_add_cpu(struct rn_topo *t, int numa);
int rn_topo_add_node(struct rn_topo *t, int parent, enum rn_node_kind kind, const char *busid,
                     const struct rn_pci_ids *ids);
int rn_topo_add_gpu(struct rn_topo *t, int node, int gdr);
int rn_topo_add_nic(struct rn_topo *t, int node, const struct rn_topo_nic *nic);
int rn_topo_add_note(struct rn_topo *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Flattens Broadcom two-level switches, computes depths and inherited
 * CPU/NUMA, sorts GPUs and NICs by bus id so nothing depends on the order
 * a source listed them in.  0 ok, -1 with err. */
int rn_topo_finalize(struct rn_topo *t, char *err, size_t errlen);

/* Node index of the CPU node a node belongs to, -1 if none. */
int rn_topo_node_cpu(const struct rn_topo *t, int node);
/* 1 when anc is node or one of its ancestors. */
int rn_topo_node_under(const struct rn_topo *t, int node, int anc);
/* Path between two nodes; hops = tree edges between them, lca = their
 * lowest common ancestor (either may be NULL). */
enum rn_path rn_topo_node_path(const struct rn_topo *t, int a, int b, int *hops, int *lca);
/* Describes node (e.g. "switch 0000:17:00.0", "CPU 0") into buf. */
void rn_topo_node_describe(const struct rn_topo *t, int node, char *buf, size_t len);

/* Format loaders (one file each). */
int rn_topo_load_ncclxml(const char *const *paths, int npaths, struct rn_topo **out, char *err,
                         size_t errlen);
/* The same from memory (the fuzz target's entry). */
int rn_topo_load_ncclxml_buf(const char *buf, size_t len, struct rn_topo **out, char *err,
                             size_t errlen);
int rn_topo_load_hwloc_xml(const char *path, struct rn_topo **out, char *err, size_t errlen);
int rn_topo_load_smi(const char *path, struct rn_topo **out, char *err, size_t errlen);

void rn_topo_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
