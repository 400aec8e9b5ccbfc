/* The device table (plugin/devices.c): the virtual devices railnet offers
 * NCCL, each an ordered set of physical rails, built from the rail
 * planner at init and extended by NCCL's makeVDevice.  The caller owns the
 * table and locks around every call (the core, under its lock). */
#ifndef RN_DEVICES_H
#define RN_DEVICES_H

#include <stdint.h>
#include "nccl/net_common.h"
#include "railnet/transport.h"

#define RN_MAX_VDEVS 64
/* Devices one makeVDevice may fuse: the widest ABI's bound (ncclNet v12's
 * 8); the adapters of older versions refuse more than theirs. */
#define RN_MAX_VDEV_PARTS 8

/* makeVDevice's descriptor and vProps in the widest form. */
struct rn_vprops {
  int ndevs;
  int devs[RN_MAX_VDEV_PARTS];
};

/* A virtual device.  Owner: the core's device table; immutable once
 * published. */
struct rn_vdev {
  char name[256];
  char pci_path[256];
  struct rn_rails rails;
  int speed;
  int ptr_support;
  int force_flush;
  int reg_is_global; /* every rail's */
  uint64_t guid;
  int port;
  int max_comms;
  struct rn_vprops vprops;
  /* ncclNet v12 ids, from the rail plan (-1 undefined): each rail's own,
   * parallel to rails.nic, and the device's, from rn_plan_fused_ids. */
  int nic_rail[RN_MAX_RAILS], nic_plane[RN_MAX_RAILS];
  int rail_id, plane_id;
  char why[320]; /* the planner's reason, for the init log */
};

/* Group a transport's NICs into devices as the rail planner says (one
 * device per NIC without a plan).  Zero NICs is zero devices. */
ncclResult_t rn_devices_build(const struct rn_nic *nics, int nnics, struct rn_vdev *vdevs,
                              int *nvdevs);
/* makeVDevice: append the merge of the devices props names; *d is its
 * index. */
ncclResult_t rn_devices_merge(struct rn_vdev *vdevs, int *nvdevs, const struct rn_vprops *props,
                              int *d);
/* One INFO line per device, at init. */
void rn_devices_log(const struct rn_vdev *vdevs, int nvdevs, const char *transport);

#endif
