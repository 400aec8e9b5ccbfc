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
  ncclNetVDeviceProps_t vprops;
  char why[320]; /* the planner's reason, for the init log */
};

/* Group a transport's NICs into devices as the rail planner says (one
 * device per NIC without a plan).  Zero NICs is zero devices. */
ncclResult_t rn_devices_build(const struct rn_nic *nics, int nnics, struct rn_vdev *vdevs,
                              int *nvdevs);
/* makeVDevice: append the merge of the devices props names; *d is its
 * index. */
ncclResult_t rn_devices_merge(struct rn_vdev *vdevs, int *nvdevs,
                              const ncclNetVDeviceProps_t *props, int *d);
/* One INFO line per device, at init. */
void rn_devices_log(const struct rn_vdev *vdevs, int nvdevs, const char *transport);

#endif
