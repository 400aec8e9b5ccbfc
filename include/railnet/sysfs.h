/* sysfs/proc reads relative to a root (RAILNET_FSROOT, default "/"), so
 * tests can replay a captured machine.  Implemented in topo/sysfs.c, the
 * one sysfs reader, which the topology loaders use too. */
#ifndef RN_SYSFS_H
#define RN_SYSFS_H

#include <stddef.h>

/* Read the first line of root/path into buf (newline stripped); 0 ok. */
int rn_sysfs_read(const char *path, char *buf, size_t len);
/* Resolve root/path; the result is given without the root prefix. */
int rn_sysfs_realpath(const char *path, char *buf, size_t len);
/* 1 when a GPUDirect RDMA kernel module (nvidia-peermem, or the older
 * nv_peer_mem) is loaded under the root, with *path naming where it shows
 * ("/sys/module/nvidia_peermem"); 0 otherwise.  The topology loaders'
 * GDR probe reads the same places. */
int rn_sysfs_peermem(const char **path);
/* Walk up a resolved sysfs device path to the nearest PCI function
 * directory (…/DDDD:BB:DD.F); writes it and its bus id; 0 ok, -1 none. */
int rn_sysfs_pci_parent(const char *devpath, char *pci_path, size_t len, char *busid,
                        size_t busidlen);

#endif
