/* railnet's machine model and rail planner: the public contract of topo/.
 * The plugin and the railnet-topo CLI use only this header.  The model is
 * immutable once loaded; the planner is a pure function from (model,
 * options) to plan.  Nothing here logs through NCCL: errors are returned in
 * caller-provided buffers, and decisions carry their reason strings (the
 * caller logs them; rn_plan_log gives both callers the same lines). */
#ifndef RN_TOPO_H
#define RN_TOPO_H

#include <stddef.h>
#include <stdint.h>

/* Path types with NCCL's names and numbers (NCCL src/include/graph.h), so
 * a level compares the way NCCL compares it.  GPU-NIC paths are PIX, PXB,
 * P2C, PXN, PHB, SYS or DIS; LOC/NVL/NVB/C2C name other pairs. */
enum rn_path {
  RN_PATH_LOC = 0,
  RN_PATH_NVL = 1, /* NVLink */
  RN_PATH_NVB = 2, /* NVLink through another GPU */
  RN_PATH_C2C = 3, /* GPU to its CPU over NVLink-C2C */
  RN_PATH_PIX = 4, /* at most one PCIe switch between them */
  RN_PATH_PXB = 5, /* several switches, no CPU */
  RN_PATH_P2C = 6, /* GPU over C2C to its CPU, then PCIe to a NIC of that CPU */
  RN_PATH_PXN = 7, /* through an NVLink-connected GPU close to the NIC */
  RN_PATH_PHB = 8, /* through the CPU (NUMA node) both hang off */
  RN_PATH_SYS = 9, /* across NUMA nodes of one host */
  RN_PATH_NET = 10,
  RN_PATH_DIS = 11, /* different hosts in one file: not connected */
};
const char *rn_path_name(enum rn_path p); /* "PIX", ... */
/* A path name as NCCL writes it, any case.  0 ok, -1 unknown. */
int rn_path_parse(const char *s, enum rn_path *out);
/* A GDR level as NCCL_NET_GDR_LEVEL takes it: a path name (LOC ... SYS)
 * or NCCL's old numbers (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS).
 * nccl_exact = 1 parses as NCCL does (names case-sensitive, a leading
 * digit decides, anything else is ignored: returns 1 = "unset");
 * nccl_exact = 0 is railnet's strict form (any case, whole string a name
 * or a number, else -1).  0 ok, 1 ignored, -1 malformed. */
int rn_gdr_level_parse(const char *s, int nccl_exact, enum rn_path *out);

struct rn_topo; /* opaque model */

/* Loaders.  Return 0 on success; on failure -1 with a message in err naming
 * the file, the line when known, and the problem.  No input crashes the
 * process: hwloc XML is checked and normalised before libhwloc sees it. */
int rn_topo_load_live(struct rn_topo **out, char *err, size_t errlen);
/* Detects the format: hwloc XML (v1 or v2/v3), NCCL topology XML, or
 * `nvidia-smi topo -m` text (tab- or space-separated). */
int rn_topo_load_file(const char *path, struct rn_topo **out, char *err, size_t errlen);
void rn_topo_free(struct rn_topo *t);
const char *rn_topo_source(const struct rn_topo *t); /* "live", "hwloc-xml", "nccl-xml", ... */

enum rn_topo_link { RN_TOPO_LINK_UNKNOWN = 0, RN_TOPO_LINK_IB = 1, RN_TOPO_LINK_ETH = 2 };

struct rn_topo_gpu {
  char busid[16]; /* lowercase dddd:bb:dd.f; "" when the source has none */
  int numa;       /* NUMA node NCCL attaches it to (NCCL's CPU node), -1 unknown */
  int cpu;        /* CPU node index in the model (one per NUMA node and host) */
  int gdr;        /* 1 when the source allows GPUDirect (file attr or probe) */
  int host;       /* host index (files that join hosts), 0 otherwise */
  int c2c;        /* 1: attached to its CPU by NVLink-C2C (Grace) */
  int sm;         /* compute capability x10, 0 unknown */
  char uuid[48];  /* "GPU-..." when the source has it, else "" */
};
struct rn_topo_nic {
  char name[64];   /* device, or device:port when the device has several ports */
  char netdev[32]; /* "" when unknown */
  char busid[16];  /* "" for a NIC with no PCI function */
  uint64_t guid;
  int port; /* verbs port (NCCL_IB_HCA's :port), 1 when unknown */
  int speed_mbps;
  int link; /* enum rn_topo_link */
  int numa;
  int cpu;
  int gdr;
  int rdma;        /* 1 when driven through verbs (an RDMA device), 0 netdev only */
  int port_state;  /* IB port state number (4 = ACTIVE), 0 unknown */
  char device[64]; /* RDMA device (or netdev) name without the port */
  int host;
  int asic; /* index shared by the ports and functions of one NIC (one PCI device) */
};
int rn_topo_ngpus(const struct rn_topo *t);
int rn_topo_nnics(const struct rn_topo *t);
const struct rn_topo_gpu *rn_topo_gpu(const struct rn_topo *t, int i);
const struct rn_topo_nic *rn_topo_nic(const struct rn_topo *t, int i);
/* Index of the NIC matching name (display name, device:port, device, or
 * netdev) or busid; -1 if none.  With several hosts, the first match. */
int rn_topo_find_nic(const struct rn_topo *t, const char *name, const char *busid);
/* Path type between GPU g and NIC n as NCCL computes it with its defaults
 * (PCI tree, C2C -> P2C, NVLink -> PXN, and through the GPU's CPU when a
 * pair closer than PHB has no GPUDirect RDMA), with what it goes through
 * written into via (may be NULL): "switch 0000:17:00.0", "CPU (NUMA 0)",
 * "NVLink to GPU 0000:1b:00.0".
 * A plan holds the same under its own options (rn_plan_path). */
enum rn_path rn_topo_path(const struct rn_topo *t, int g, int n, char *via, size_t vialen);
/* The same without PXN or the detour: the PCIe/C2C distance the planner
 * ranks NICs by. */
enum rn_path rn_topo_pci_path(const struct rn_topo *t, int g, int n);
/* GPU g reaches NIC n through NVLink peer *peer (model GPU index), PXN:
 * 1 when NCCL would do so with PXN enabled and pxn_c2c as NCCL_PXN_C2C,
 * GPUDirect RDMA at NCCL's default level and NCCL_NET_GDR_C2C on. */
int rn_topo_pxn_peer(const struct rn_topo *t, int g, int n, int pxn_c2c, int *peer);
/* The same at GDR level gdr_level with gdr_c2c as NCCL_NET_GDR_C2C: NCCL
 * 2.28 keeps a relay only when g and the NIC get GPUDirect RDMA through it
 * (their gdr flags, the relay's distance; not the relay's own flag). */
int rn_topo_pxn_peer_at(const struct rn_topo *t, int g, int n, int pxn_c2c, enum rn_path gdr_level,
                        int gdr_c2c, int *peer);
/* Bandwidth of that path in GB/s as NCCL models it (NIC speed, PCIe links,
 * C2C, inter-CPU), 0 when nothing is known. */
double rn_topo_path_bw(const struct rn_topo *t, int g, int n);

/* Number of CPU nodes (NUMA nodes, or NCCL <cpu> elements), over all hosts. */
int rn_topo_ncpus(const struct rn_topo *t);
/* Hosts: 1 unless a file joins several (NCCL XML host_hash). */
int rn_topo_nhosts(const struct rn_topo *t);
const char *rn_topo_host_name(const struct rn_topo *t, int h); /* host_hash or "" */
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
 * (RDMA name, netdev name, verbs port) passes spec; NULL/"" passes all; a
 * malformed spec passes nothing. */
int rn_topo_filter_match(const char *spec, const char *name, const char *netdev, int port);
/* 0 when spec is a well-formed filter, else -1 with err saying why. */
int rn_topo_filter_check(const char *spec, char *err, size_t errlen);

/* ---- settings: the planner's knobs as railnet and NCCL read them ----
 * One reader for the plugin and the CLI.  Names, defaults and fallbacks
 * come from include/railnet/params.def (the one table); the NCCL variables
 * that decide what NCCL itself does with GDR and PXN are read here too,
 * because the plan predicts NCCL's decisions.  Nothing is logged: echoes
 * and warnings come back as text for the caller's logger. */
#define RN_SETTINGS_MAX_MSGS 12
struct rn_topo_settings {
  char nics[256];      /* NIC filter (RAILNET_NICS, else NCCL_IB_HCA) */
  char nics_from[32];  /* the variable it came from, "" when unset */
  char topo_file[256]; /* RAILNET_TOPO_FILE, else NCCL_TOPO_FILE */
  char topo_file_from[32];
  enum rn_path gdr_level;  /* RAILNET_GDR_LEVEL, else NCCL_NET_GDR_LEVEL, else PXB */
  char gdr_level_from[32]; /* variable, or "NCCL default" */
  int gdr_c2c;             /* NCCL_NET_GDR_C2C (default 1) */
  int pxn;                 /* 1 unless NCCL_PXN_DISABLE=1 */
  int pxn_c2c;             /* NCCL_PXN_C2C (default 1) */
  int standby;             /* RAILNET_STANDBY (default 1) */
  int nwarn, ninfo;
  char warn[RN_SETTINGS_MAX_MSGS][200]; /* bad values, with what was used instead */
  char info[RN_SETTINGS_MAX_MSGS][200]; /* "X set by environment to Y" */
  /* Bit i set: warn[i] / info[i] is a check or echo the plugin's own
   * parameter table (plugin/param.c) makes too, so the plugin, which has
   * logged those already, skips it; the CLI prints them all. */
  unsigned warn_in_table, info_in_table;
};
/* Reads the environment (getenv) into s.  Never fails: a bad value is a
 * warning and the default is used, as the plugin does. */
void rn_topo_settings_read(struct rn_topo_settings *s);
/* CUDA_VISIBLE_DEVICES with CUDA's semantics against a model: empty = no
 * GPU, indices (bus order) or GPU-/MIG- UUID prefixes, an invalid entry
 * ends the list.  Writes a GPU subset for rn_plan_opts.gpu_subset ("" =
 * none visible, "*" = all) and a note when something was ignored.
 * Returns 0, or 1 when the variable is unset (all GPUs). */
int rn_topo_cuda_visible(const struct rn_topo *t, const char *cvd, char *subset, size_t len,
                         char *note, size_t notelen);

#define RN_PLAN_MAX_RAILS 8
struct rn_plan_opts {
  enum rn_path gdr_level; /* GDR when path <= this (default RN_PATH_PXB) */
  const char *nic_filter; /* NCCL_IB_HCA syntax; NULL/"" = all */
  const char *gpu_subset; /* "0,2,5" (indices) or bus ids; NULL = all, "" = none */
  /* When non-NULL, only these model NIC indices are candidates (the NICs a
   * transport can actually drive). */
  const int *candidates;
  int ncandidates;
  /* Added with NCCL-exact paths.  rn_plan_opts_default sets them. */
  const char *nic_filter_from; /* "RAILNET_NICS", "NCCL_IB_HCA", "--nics" for reasons */
  int gdr_c2c;                 /* NCCL_NET_GDR_C2C: a P2C pair counts as C2C (default 1) */
  int standby;                 /* give each virtual device a standby NIC (default 1) */
  int host;                    /* plan only this host; -1 = every host, separately */
  int pxn;                     /* NCCL's PXN on (NCCL_PXN_DISABLE unset, default 1) */
  int pxn_c2c;                 /* NCCL_PXN_C2C (default 1) */
};
void rn_plan_opts_default(struct rn_plan_opts *o);
/* The options the settings say (filter, GDR level, C2C, standby). */
void rn_plan_opts_from_settings(struct rn_plan_opts *o, const struct rn_topo_settings *s);

struct rn_plan_rail {
  int nic; /* model NIC index */
  /* As NCCL computes it: PXN through a relay GPU; a pair closer than PHB
   * without GPUDirect RDMA goes through the GPU's CPU (PHB, SYS; P2C with
   * NVLink-C2C). */
  enum rn_path path;
  enum rn_path pci_path; /* the PCIe/C2C distance the rails are ranked by */
  int gdr;               /* NCCL will use GPUDirect RDMA for this GPU-NIC pair */
  char reason[256];  /* "GPU 0000:1b:00.0 -> mlx5_0: PIX via switch ..., GDR yes (PIX <= PXB)" */
  char gdr_why[128]; /* "PIX <= PXB", "NIC has gdr=0", "P2C counts as C2C (NCCL_NET_GDR_C2C=1)" */
};

struct rn_plan_gpu {
  int gpu; /* model GPU index */
  int nrails;
  struct rn_plan_rail rails[RN_PLAN_MAX_RAILS]; /* best first */
  int vdev;                                     /* index into vdevs, -1 without rails */
};
struct rn_plan_vdev {
  char name[256]; /* member names joined with '+' */
  int nnics;
  int nics[RN_PLAN_MAX_RAILS]; /* model NIC indices, lead first */
  int speed_mbps;              /* sum of members */
  /* Deprecated: AND of the per-pair decisions of every GPU using it.  A
   * device table must not mask ptrSupport with it: NCCL decides GDR per
   * GPU-NIC pair itself; see the rails' gdr and nic_gdr. */
  int gdr;
  int gdr_any; /* NCCL uses GPUDirect for at least one GPU using it (pairs with its lead NIC) */
  int nic_gdr; /* every member NIC allows GPUDirect (model flag) */
  int host;
  int rail_id;  /* NCCL railId (v12): the rail this device's NICs are cabled to, -1 undefined */
  int plane_id; /* NCCL planeId (v12), -1 undefined */
  int standby;  /* model NIC index of the standby, -1 none */
  char standby_why[200];
  int nusers;    /* GPUs whose rail set this is */
  char why[256]; /* the reason of the first GPU using it, or why it exists */
};
struct rn_plan {
  int ngpus;
  struct rn_plan_gpu *gpus;
  int nvdevs;
  struct rn_plan_vdev *vdevs;
  int nunused;
  int *unused;       /* model NIC indices no GPU uses */
  char **unused_why; /* parallel to unused: "storage NIC: farther than ..." */
  int nnotes;
  char **notes; /* plan-level remarks: "no GPUs", "no NICs", ... */
  /* Per model NIC: its rail and plane ids (-1 when it is no rail). */
  int *nic_rail, *nic_plane;
  enum rn_path gdr_level; /* the level the decisions used */
  unsigned char *paths;   /* model GPUs x model NICs: NCCL's path under these options */
  int npath_nics;
};
/* The rail and plane ids of a device that fuses n NICs whose own ids are
 * rail[i] and plane[i] (-1 undefined), set as NCCL's IB transport sets
 * them for its fused devices: the members' rail when they all share it,
 * else -1; one NIC keeps its plane; several get a virtual plane mask,
 * RN_PLAN_PLANE_VIRTUAL plus one bit per member plane (-1 when a member's
 * plane is undefined or RN_PLAN_PLANE_BITS or more).  The planner's
 * devices get their ids from it, and so do devices fused later
 * (makeVDevice), so one rule names every device. */
#define RN_PLAN_PLANE_BITS 14
#define RN_PLAN_PLANE_VIRTUAL (1 << RN_PLAN_PLANE_BITS)
void rn_plan_fused_ids(const int *rail, const int *plane, int n, int *rail_id, int *plane_id);
/* NCCL's path type of model GPU g to model NIC n under the plan's options. */
enum rn_path rn_plan_path(const struct rn_plan *p, int g, int n);
/* 0 ok; -1 with err on bad options (malformed filter or subset). */
int rn_plan_build(const struct rn_topo *t, const struct rn_plan_opts *o, struct rn_plan **out,
                  char *err, size_t errlen);
void rn_plan_free(struct rn_plan *p);

/* The plan as INFO lines, the same for the plugin's log and the CLI's
 * RAILNET_DEBUG output: one call of emit per line (no trailing newline). */
void rn_plan_log(const struct rn_topo *t, const struct rn_plan *p,
                 void (*emit)(void *ctx, const char *line), void *ctx);

#endif
