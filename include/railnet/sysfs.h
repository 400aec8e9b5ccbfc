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
/* Walk up a resolved sysfs device path to the nearest PCI function
 * directory (…/DDDD:BB:DD.F); writes it and its bus id; 0 ok, -1 none. */
int rn_sysfs_pci_parent(const char *devpath, char *pci_path, size_t len, char *busid,
                        size_t busidlen);

#endif
