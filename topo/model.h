/* Private to topo/: the machine model every loader fills through one
 * interface (rn_topo_add_*), and the path queries the planner uses.
 * Owner: topo/model.c.
 *
 * The model is NCCL's topology graph laid out as a tree:
 *   root -> host -> [package] -> CPU (one NUMA node) -> PCI switches -> devices
 * Each SWITCH node is one PCI node as NCCL sees it (for sysfs sources the
 * bridge two levels above a device; downstream ports are not nodes).
 * Packages only group NUMA nodes of one socket for the planner's
 * tie-breaks: for NCCL any two NUMA nodes are SYS apart.  Besides the tree
 * a GPU may have an NVLink-C2C link to its CPU and NVLinks to other GPUs
 * (directly or through NVSwitches). */
#ifndef RN_TOPO_MODEL_H
#define RN_TOPO_MODEL_H

#include <stdarg.h>
#include "railnet/topo.h"

enum rn_node_kind {
  RN_NODE_ROOT = 0,
  RN_NODE_HOST,
  RN_NODE_PACKAGE,
  RN_NODE_CPU,
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
  int depth;  /* -1 once folded into its parent */
  int host;   /* host index */
  int cpu;    /* CPU node index (model numbering), -1 unknown */
  int numa;   /* -1 unknown, inherited from the CPU node */
  char busid[16];
  struct rn_pci_ids ids;
  double up_bw;  /* GB/s of the link to the parent, 0 unknown */
  double cpu_bw; /* CPU nodes: bandwidth of a SYS hop to another CPU (NCCL's table) */
};

struct rn_gpu_rec {
  struct rn_topo_gpu pub;
  int node;
  int order;     /* insertion order (sources without bus ids keep it) */
  double c2c_bw; /* GB/s when pub.c2c */
  int nvswitch;  /* NVLinks to an NVSwitch */
};

struct rn_nic_rec {
  struct rn_topo_nic pub;
  int node; /* PCI device node, or the CPU node for a NIC without PCI */
  int order;
  int user_rail, user_plane; /* from a file's rail=/plane= attributes, -1 */
};

/* An NVLink between a GPU (node) and another GPU named by bus id, or by
 * node when target_node >= 0 (sources without bus ids). */
struct rn_nvl_edge {
  int gpu_node;
  int target_node;
  char target[16];
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
  char (*hosts)[24];
  int nhosts, caphosts;
  struct rn_nvl_edge *nvl_edges;
  int nnvl_edges, capnvl_edges;
  /* Computed by rn_topo_finalize. */
  unsigned char *nvl;   /* ngpus x ngpus: NVLink-connected (NVL) */
  unsigned char *pci;   /* ngpus x nnics: rn_topo_pci_path */
  unsigned char *ncclp; /* ngpus x nnics: NCCL's path with its defaults */
  int *lca;             /* ngpus x nnics: node where the PCI path meets */
  float *bw;            /* ngpus x nnics: GB/s */
  int *nic_local;       /* per NIC: its local GPU (widest, then shortest path), -1 */
};

#define RN_TOPO_ROOT 0
/* NCCL's figures (src/graph/topo.h), GB/s. */
#define RN_BW_LOC 5000.0
#define RN_BW_PCI_GEN3_X16 12.0

/* Builder.  Each returns the new index, or -1 when out of memory. */
struct rn_topo *rn_topo_alloc(const char *source);
/* Host named name ("" for a single-host source): its index, found or added. */
int rn_topo_host(struct rn_topo *t, const char *name);
/* The host's node. */
int rn_topo_host_node(const struct rn_topo *t, int host);
/* A package (socket) under a host: a node the planner groups NUMA nodes by. */
int rn_topo_add_package(struct rn_topo *t, int host);
/* A CPU node (NUMA node) under parent (a host or package node). */
int rn_topo_add_cpu(struct rn_topo *t, int parent, int numa);
int rn_topo_add_node(struct rn_topo *t, int parent, enum rn_node_kind kind, const char *busid,
                     const struct rn_pci_ids *ids);
int rn_topo_add_gpu(struct rn_topo *t, int node, int gdr);
int rn_topo_add_nic(struct rn_topo *t, int node, const struct rn_topo_nic *nic);
/* An NVLink from the GPU on gpu_node to the GPU with bus id target, or
 * (target NULL) to the GPU on target_node. */
int rn_topo_add_nvlink(struct rn_topo *t, int gpu_node, const char *target, int target_node);
int rn_topo_add_note(struct rn_topo *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Flattens Broadcom two-level switches as NCCL does, computes depths and
 * inherited host/CPU/NUMA, sorts GPUs and NICs by bus id so nothing
 * depends on the order a source listed them in, names NIC ports, and
 * computes every GPU-NIC path.  0 ok, -1 with err. */
int rn_topo_finalize(struct rn_topo *t, char *err, size_t errlen);

/* Node index of the CPU node a node belongs to, -1 if none. */
int rn_topo_node_cpu(const struct rn_topo *t, int node);
/* 1 when anc is node or one of its ancestors. */
int rn_topo_node_under(const struct rn_topo *t, int node, int anc);
/* NCCL's path type between two nodes of the tree (LOC, PIX, PXB, PHB, SYS,
 * DIS); lca = where they meet, bw = the narrowest link (GB/s, 0 unknown).
 * Either out pointer may be NULL. */
enum rn_path rn_topo_node_path(const struct rn_topo *t, int a, int b, int *lca, double *bw);
/* Describes node (e.g. "switch 0000:17:00.0", "CPU 0 (NUMA 0)") into buf. */
void rn_topo_node_describe(const struct rn_topo *t, int node, char *buf, size_t len);
/* 1 when GPUs g and h are NVLink-connected (directly or by NVSwitch). */
int rn_topo_nvlinked(const struct rn_topo *t, int g, int h);
/* Path type between two NICs (the standby search without GPUs). */
enum rn_path rn_topo_nic_path(const struct rn_topo *t, int a, int b);

/* What decides NCCL's path for a GPU-NIC pair: its PXN and GDR settings. */
struct rn_route_opts {
  int pxn;                /* PXN on (NCCL_PXN_DISABLE unset) */
  int pxn_c2c;            /* NCCL_PXN_C2C */
  enum rn_path gdr_level; /* NCCL_NET_GDR_LEVEL */
  int gdr_c2c;            /* NCCL_NET_GDR_C2C */
};
/* NCCL's defaults: PXN on, PXN_C2C 1, level PXB, GDR_C2C 1. */
void rn_route_opts_default(struct rn_route_opts *o);
/* NCCL's path for GPU g and NIC n (ncclTopoComputePaths, v2.28): the PCI
 * path, PXN through an NVLink peer close to the NIC, and a pair closer
 * than PHB without GPUDirect RDMA (ncclTopoCheckGdr) diverted through
 * g's CPU. */
struct rn_route {
  enum rn_path path; /* NCCL's label */
  enum rn_path pci;  /* the PCIe/C2C distance (rn_topo_pci_path), for ranking */
  int peer;          /* PXN relay (model GPU index) when path is PXN, else -1 */
  int gdr;           /* NCCL uses GPUDirect RDMA for the pair */
  int diverted;      /* through g's CPU for want of GPUDirect RDMA */
  char gdr_why[128]; /* the rule that decided gdr: "PIX <= PXB", "the NIC has gdr=0" */
};
void rn_topo_route(const struct rn_topo *t, int g, int n, const struct rn_route_opts *o,
                   struct rn_route *r);
/* NCCL's path from GPU g through its local CPU to NIC n: PHB when the NIC
 * is below that CPU (P2C for a GPU with NVLink-C2C), SYS across CPUs. */
enum rn_path rn_topo_cpu_path(const struct rn_topo *t, int g, int n);
/* What path p of GPU g to NIC n goes through, for reasons: "switch
 * 0000:17:00.0", "CPU (NUMA 0)", "NVLink to GPU 0000:1b:00.0" (peer for
 * PXN), "NUMA 0 -> NUMA 1". */
void rn_topo_via(const struct rn_topo *t, int g, int n, enum rn_path p, int peer, char *via,
                 size_t len);

/* Format loaders (one file each). */
int rn_topo_load_ncclxml(const char *const *paths, int npaths, struct rn_topo **out, char *err,
                         size_t errlen);
/* The same from memory (the fuzz target's entry). */
int rn_topo_load_ncclxml_buf(const char *buf, size_t len, struct rn_topo **out, char *err,
                             size_t errlen);
int rn_topo_load_hwloc_xml(const char *path, struct rn_topo **out, char *err, size_t errlen);
/* hwloc XML from memory, name for messages (the fuzz target's entry). */
int rn_topo_load_hwloc_xml_buf(const char *buf, size_t len, const char *name, struct rn_topo **out,
                               char *err, size_t errlen);
int rn_topo_load_smi(const char *path, struct rn_topo **out, char *err, size_t errlen);
/* nvidia-smi text from memory (the fuzz target's entry). */
int rn_topo_load_smi_buf(const char *buf, size_t len, const char *name, struct rn_topo **out,
                         char *err, size_t errlen);

void rn_topo_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* PCIe link bandwidth as NCCL computes it: lanes x per-lane rate ("32.0
 * GT/s PCIe" -> 240 x 100 Mb/s) / 80, GB/s; 0 when unknown. */
double rn_topo_pcie_bw(const char *speed, int width);
/* GPU g as log lines name it: its bus id, or for sources without bus ids
 * (nvidia-smi) its model index ("GPU3"); returns buf. */
const char *rn_topo_gpu_label(const struct rn_topo *t, int g, char *buf, size_t len);

#endif
