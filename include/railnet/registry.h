/* The transport registry (plugin/registry.c): every transport railnet can
 * use, by index.  The index is wire format: it travels in every handle
 * (struct rn_handle.transport) and is stamped into every comm and request,
 * so builds agree on it only if the order never changes. */
#ifndef RN_REGISTRY_H
#define RN_REGISTRY_H

#include "nccl/net_common.h"
#include "railnet/transport.h"

/* How many transports are registered; indices are 0 .. count-1. */
int rn_registry_count(void);
/* The transport at index; NULL when there is none. */
const struct rn_transport *rn_registry_get(int index);
/* Initialise the transport RAILNET_TRANSPORT names (want): "auto" tries
 * the registered ones in order of preference and keeps the first with a
 * NIC, else the fallback (TCP) even with none; a name or alias takes that
 * transport only.  *index is -1 (and a WARN says why) when none is usable;
 * otherwise *nics, *nnics are what its init found. */
ncclResult_t rn_registry_select(const char *want, int *index, const struct rn_nic **nics,
                                int *nnics);

#endif
