/* railnet's machine model and rail planner: the public contract of topo/.
 * The plugin and the railnet-topo CLI use only this header.  The model is
 * immutable once loaded; the planner is a pure function from (model,
 * options) to plan.  Nothing here logs through NCCL: errors are returned in
 * caller-provided buffers, and decisions carry their reason strings. */
#ifndef RN_TOPO_H
#define RN_TOPO_H

#include <stddef.h>
#include <stdint.h>

/* Path types, ordered by distance (NCCL's order). */
enum rn_path {
  RN_PATH_LOC = 0,
  RN_PATH_PIX = 1,  /* at most one PCIe switch between them */
  RN_PATH_PXB = 2,  /* several switches, no host bridge */
  RN_PATH_PHB = 3,  /* through a host bridge on the same CPU */
  RN_PATH_NODE = 4, /* across host bridges within one NUMA node / socket */
  RN_PATH_SYS = 5,  /* across CPUs */
};
const char *rn_path_name(enum rn_path p);            /* "PIX", ... */
int rn_path_parse(const char *s, enum rn_path *out); /* 0 ok, -1 unknown */

struct rn_topo; /* opaque model */

/* Loaders.  Return 0 on success; on failure -1 with a message in err naming
 * the file, the line when known, and the problem. */
int rn_topo_load_live(struct rn_topo **out, char *err, size_t errlen);
/* Detects the format: hwloc XML (v1 or v2/v3), NCCL topology XML, or
 * `nvidia-smi topo -m` text. */
int rn_topo_load_file(const char *path, struct rn_topo **out, char *err, size_t errlen);
void rn_topo_free(struct rn_topo *t);
const char *rn_topo_source(const struct rn_topo *t); /* "live", "hwloc-xml", "nccl-xml", ... */

struct rn_topo_gpu {
  char busid[16]; /* lowercase dddd:bb:dd.f */
  int numa;       /* -1 unknown */
  int cpu;        /* package / root-complex index, -1 unknown */
  int gdr;        /* 1 when the source allows GPUDirect (file attr or probe) */
};
struct rn_topo_nic {
  char name[64];   /* RDMA device name when there is one, else netdev */
  char netdev[32]; /* "" when unknown */
  char busid[16];  /* "" for a NIC with no PCI function */
  uint64_t guid;
  int port;
  int speed_mbps;
  int link; /* 0 unknown, 1 IB, 2 Ethernet */
  int numa;
  int cpu;
  int gdr;
  int rdma;       /* 1 when driven through verbs (an RDMA device), 0 netdev only */
  int port_state; /* IB port state number (4 = ACTIVE), 0 unknown */
};
int rn_topo_ngpus(const struct rn_topo *t);
int rn_topo_nnics(const struct rn_topo *t);
const struct rn_topo_gpu *rn_topo_gpu(const struct rn_topo *t, int i);
const struct rn_topo_nic *rn_topo_nic(const struct rn_topo *t, int i);
/* Index of the NIC matching name (RDMA or netdev name) or busid; -1 if none. */
int rn_topo_find_nic(const struct rn_topo *t, const char *name, const char *busid);
/* Path type between GPU g and NIC n, with the switch/bridge it goes
 * through written into via (may be NULL). */
enum rn_path rn_topo_path(const struct rn_topo *t, int g, int n, char *via, size_t vialen);

/* Extensions. */
/* Number of CPU nodes (packages, or NCCL <cpu> elements). */
int rn_topo_ncpus(const struct rn_topo *t);
/* Remarks the loader made about the source (assumptions, skipped parts). */
int rn_topo_nnotes(const struct rn_topo *t);
const char *rn_topo_note(const struct rn_topo *t, int i);
/* Normalises "bb:dd.f" or "dddd:bb:dd.f" (any case) to lowercase
 * "dddd:bb:dd.f".  0 ok, -1 malformed. */
int rn_topo_busid_norm(const char *in, char *out, size_t outlen);
/* Loads and merges several NCCL topology XML files by bus id, as NCCL
 * merges NCCL_TOPO_FILE with what it discovers: a later file adds devices
 * under switches named by an earlier one. */
int rn_topo_load_files(const char *const *paths, int npaths, struct rn_topo **out, char *err,
                       size_t errlen);
/* NCCL_IB_HCA-syntax filter test for NICs outside a model: 1 when the NIC
 * (RDMA name, netdev name, port) passes spec; NULL/"" passes all; a
 * malformed spec passes nothing. */
int rn_topo_filter_match(const char *spec, const char *name, const char *netdev, int port);

#define RN_PLAN_MAX_RAILS 8
struct rn_plan_opts {
  enum rn_path gdr_level; /* GDR when path <= this (default RN_PATH_PXB) */
  const char *nic_filter; /* NCCL_IB_HCA syntax; NULL/"" = all */
  const char *gpu_subset; /* "0,2,5" (indices) or bus ids; NULL/"" = all */
  /* When non-NULL, only these model NIC indices are candidates (the NICs a
   * transport can actually drive). */
  const int *candidates;
  int ncandidates;
};
void rn_plan_opts_default(struct rn_plan_opts *o);

struct rn_plan_rail {
  int nic; /* model NIC index */
  enum rn_path path;
  int gdr;
  char reason[256]; /* "GPU 0000:1b:00.0 -> mlx5_0: PIX via switch ..., GDR yes (PIX <= PXB)" */
};
struct rn_plan_gpu {
  int gpu; /* model GPU index */
  int nrails;
  struct rn_plan_rail rails[RN_PLAN_MAX_RAILS]; /* best first */
};
struct rn_plan_vdev {
  char name[256]; /* member names joined with '+' */
  int nnics;
  int nics[RN_PLAN_MAX_RAILS]; /* model NIC indices, lead first */
  int speed_mbps;              /* sum of members */
  int gdr;                     /* GDR eligible for every GPU using it */
};
struct rn_plan {
  int ngpus;
  struct rn_plan_gpu *gpus;
  int nvdevs;
  struct rn_plan_vdev *vdevs;
  int nunused;
  int *unused; /* model NIC indices no GPU uses */
  int nnotes;
  char **notes; /* plan-level remarks: "no GPUs", "no NICs", ... */
};
/* 0 ok; -1 with err on bad options (malformed filter or subset). */
int rn_plan_build(const struct rn_topo *t, const struct rn_plan_opts *o, struct rn_plan **out,
                  char *err, size_t errlen);
void rn_plan_free(struct rn_plan *p);

#endif
