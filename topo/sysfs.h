/* Private to topo/: every sysfs/proc read goes through here, under a root
 * (RAILNET_FSROOT, default "/"), so tests replay captured machines.
 * Owner: topo/sysfs.c. */
#ifndef RN_TOPO_SYSFS_H
#define RN_TOPO_SYSFS_H

#include <stddef.h>

struct rn_topo;

/* RAILNET_FSROOT or "/". */
const char *rn_topo_sysfs_root(void);
/* root/rel as one path in out: 0, or -1 when it does not fit. */
int rn_topo_sysfs_join(const char *root, const char *rel, char *out, size_t len);
/* First line of root/rel without its newline.  0 ok, -1 absent/unreadable. */
int rn_topo_sysfs_read(const char *root, const char *rel, char *buf, size_t len);
/* 1 when root/rel exists. */
int rn_topo_sysfs_exists(const char *root, const char *rel);
/* Port state, rate, link layer and GUID for RDMA NICs, speed for netdevs. */
void rn_topo_sysfs_enrich_nics(struct rn_topo *t, const char *root);
/* GPUDirect RDMA as far as sysfs tells: 1 with nvidia-peermem (or the old
 * nv_peer_mem) loaded.  why says what was found.  The plugin's verbs
 * transport asks the same question through rn_sysfs_peermem(). */
int rn_topo_sysfs_gdr_probe(const char *root, char *why, size_t len);

#endif
