/* Which rails of two hosts' verbs devices pair up in a comm: the rule of
 * include/railnet/pairing.h, shared with the TCP transport, over what
 * tells a verbs rail's reach.  A RoCE v2 rail's GID is an IP address (an
 * IPv4-mapped one, or a global IPv6 one): the kernel's route to the
 * peer's address says which of our rails' addresses it leaves from, as
 * for TCP, and a rail-optimized fabric (one subnet per rail) gives each
 * peer rail its own.  An InfiniBand rail has no IP address; its GID's
 * subnet prefix names its fabric, which tells the rails apart only when
 * each rail of either host has its own (the factory default fe80:: on
 * every port says nothing): then a peer rail pairs with ours of the same
 * prefix.
 * Anything else pairs in order. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include "railnet/pairing.h"
#include "ib.h"

void rn_ib_port_info(const struct rn_ib_port *port, struct rn_ib_rail_info *ri) {
  memset(ri, 0, sizeof(*ri));
  memcpy(ri->gid, port->gid.raw, 16);
  ri->lid = port->lid;
  ri->link = (uint8_t)port->link;
  ri->mtu = (uint8_t)port->mtu;
}

/* A RoCE rail's IP address (its GID), port 0: 0, or -1 for none (an
 * InfiniBand rail, a link-local GID, which needs a scope to route). */
static int rn_ib_rail_addr(const struct rn_ib_rail_info *ri, union rn_sockaddr *sa) {
  static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  memset(sa, 0, sizeof(*sa));
  if (ri->link != IBV_LINK_LAYER_ETHERNET) return -1;
  if (memcmp(ri->gid, v4, sizeof(v4)) == 0) {
    sa->in.sin_family = AF_INET;
    memcpy(&sa->in.sin_addr, ri->gid + 12, 4);
    return 0;
  }
  if ((ri->gid[0] == 0xfe && (ri->gid[1] & 0xc0) == 0x80) || ri->gid[0] == 0) return -1;
  sa->in6.sin6_family = AF_INET6;
  memcpy(&sa->in6.sin6_addr, ri->gid, 16);
  return 0;
}

/* Whether each of a host's InfiniBand rails has a subnet prefix of its
 * own (and it has one at least). */
static int rn_ib_prefixes_apart(const struct rn_ib_rail_info *rail, int n) {
  int ib = 0;
  for (int i = 0; i < n; i++) {
    if (rail[i].link != IBV_LINK_LAYER_INFINIBAND) continue;
    ib++;
    for (int j = 0; j < i; j++)
      if (rail[j].link == IBV_LINK_LAYER_INFINIBAND && memcmp(rail[i].gid, rail[j].gid, 8) == 0)
        return 0;
  }
  return ib > 0;
}

/* A rail in words: its address, or its subnet prefix. */
static void rn_ib_rail_where(const struct rn_ib_rail_info *ri, char *buf, size_t len) {
  union rn_sockaddr sa;
  if (rn_ib_rail_addr(ri, &sa) == 0) {
    rn_sockaddr_str(&sa, buf, len);
    return;
  }
  const uint8_t *g = ri->gid;
  if (ri->link == IBV_LINK_LAYER_INFINIBAND)
    snprintf(buf, len, "subnet %02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1], g[2], g[3], g[4],
             g[5], g[6], g[7]);
  else
    snprintf(buf, len, "GID without an IP address");
}

void rn_ib_pairing(const struct rn_ib_rail_info *local, const char *const *local_name, int nlocal,
                   const struct rn_ib_rail_info *peer, int npeer, struct rn_pairing *p, char *how,
                   size_t howlen) {
  union rn_sockaddr here[RN_MAX_RAILS], there[RN_MAX_RAILS];
  uint32_t from[RN_MAX_RAILS];
  memset(here, 0, sizeof(here));
  memset(there, 0, sizeof(there));
  /* rails without an address stay unspecified: no route leaves from or
   * goes to them */
  for (int i = 0; i < nlocal; i++) (void)rn_ib_rail_addr(&local[i], &here[i]);
  for (int j = 0; j < npeer; j++) (void)rn_ib_rail_addr(&peer[j], &there[j]);
  rn_pairing_routes(there, npeer, here, nlocal, from);
  if (rn_ib_prefixes_apart(local, nlocal) && rn_ib_prefixes_apart(peer, npeer))
    for (int j = 0; j < npeer; j++) {
      if (peer[j].link != IBV_LINK_LAYER_INFINIBAND) continue;
      for (int i = 0; i < nlocal; i++)
        if (local[i].link == IBV_LINK_LAYER_INFINIBAND && memcmp(local[i].gid, peer[j].gid, 8) == 0)
          from[j] |= 1u << i;
    }
  rn_pairing_plan(from, npeer, nlocal, p);
  char ll[RN_MAX_RAILS][112], pl[RN_MAX_RAILS][96], where[64];
  const char *lp[RN_MAX_RAILS], *pp[RN_MAX_RAILS];
  for (int i = 0; i < nlocal; i++) {
    rn_ib_rail_where(&local[i], where, sizeof(where));
    snprintf(ll[i], sizeof(ll[i]), "%s (%s)", local_name[i], where);
    lp[i] = ll[i];
  }
  for (int j = 0; j < npeer; j++) {
    rn_ib_rail_where(&peer[j], where, sizeof(where));
    snprintf(pl[j], sizeof(pl[j]), "rail %d (%s)", j, where);
    pp[j] = pl[j];
  }
  rn_pairing_describe(p, lp, nlocal, pp, npeer, how, howlen);
}
