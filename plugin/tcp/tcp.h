/* Private to the TCP transport: interface table and wire formats. */
#ifndef RN_TCP_H
#define RN_TCP_H

#include <stdint.h>
#include "railnet/rendezvous.h"
#include "railnet/transport.h"

/* One usable interface; rails come back from the core as rn_nic pointers
 * whose tidx indexes this table. */
struct rn_tcp_if {
  struct rn_nic nic;
  union rn_sockaddr addr;
};

/* Discover interfaces per RAILNET_SOCKET_IFNAME / NCCL_SOCKET_IFNAME. */
int rn_tcp_if_discover(struct rn_tcp_if *ifs, int max);
/* NCCL's interface-list syntax: "eth,ib" prefixes, "^lo" excludes,
 * "=eth0" exact.  Returns 1 when name is selected. */
int rn_tcp_if_match(const char *spec, const char *name);

#endif
