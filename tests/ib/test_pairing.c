/* Which rails of two hosts' verbs devices pair up in a comm
 * (rn_ib_pairing, plugin/ib/pairing.c): the listener's side, from its
 * rails' GIDs and the connecting peer's.  RoCE rails by the kernel's
 * routes to the peer's GIDs that are IP addresses, InfiniBand rails by
 * subnet prefix where each host's prefixes tell its rails apart, the rest
 * in order; the rule itself is include/railnet/pairing.h's, shared with
 * TCP (tests/tcp/test_pairing.c).  No verbs are called and no packet is
 * sent.  Addresses as there: 127.0.0.1 is the source the kernel gives any
 * 127/8 destination, a host's own address the source for itself, and
 * 198.51.100.0/24 and 203.0.113.0/24 (documentation ranges) are no
 * address of this host. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include "../../plugin/ib/ib.h"
#include "railnet/pairing.h"
#include "../common/rn_test.h"

/* A rail from "v4:A.B.C.D" (RoCE, IPv4-mapped GID) or "ib:PREFIX" (an
 * InfiniBand GID with that subnet prefix, e.g. "fe80:0:0:1"). */
static struct rn_ib_rail_info rail(const char *s) {
  struct rn_ib_rail_info ri;
  memset(&ri, 0, sizeof(ri));
  ri.mtu = IBV_MTU_1024;
  if (strncmp(s, "v4:", 3) == 0) {
    ri.link = IBV_LINK_LAYER_ETHERNET;
    ri.gid[10] = ri.gid[11] = 0xff;
    inet_pton(AF_INET, s + 3, ri.gid + 12);
  } else {
    char full[80];
    snprintf(full, sizeof(full), "%s::1", s + 3);
    ri.link = IBV_LINK_LAYER_INFINIBAND;
    ri.lid = 1;
    inet_pton(AF_INET6, full, ri.gid);
  }
  return ri;
}

/* Pair local[nlocal] (named rxeL0, rxeL1, ...) with peer[npeer]; want is
 * "L>P L>P ..." (local rail > peer rail, in the pairs' order); words, when
 * set, must be the pairing's description. */
static void check(const char *what, const char *const *local, int nlocal, const char *const *peer,
                  int npeer, const char *want, int want_identity, const char *words) {
  struct rn_ib_rail_info l[RN_MAX_RAILS], p[RN_MAX_RAILS];
  const char *name[RN_MAX_RAILS];
  static const char *const names[] = {"rxeL0", "rxeL1", "rxeL2", "rxeL3"};
  for (int i = 0; i < nlocal; i++) {
    l[i] = rail(local[i]);
    name[i] = names[i];
  }
  for (int j = 0; j < npeer; j++) p[j] = rail(peer[j]);
  struct rn_pairing pairing;
  char how[1024], got[256];
  rn_ib_pairing(l, name, nlocal, p, npeer, &pairing, how, sizeof(how));
  size_t o = 0;
  got[0] = '\0';
  for (int k = 0; k < pairing.n && o < sizeof(got); k++)
    o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%d>%d", k ? " " : "", pairing.local[k],
                          pairing.peer[k]);
  int ok = strcmp(got, want) == 0 && pairing.identity == want_identity &&
           (words == NULL || strcmp(how, words) == 0);
  tap_result(ok, "%s: %s%s (%s)", what, got, pairing.identity ? ", the identity" : "", how);
  if (!ok)
    printf("#   wanted %s%s%s%s\n", want, want_identity ? ", the identity" : "",
           words ? "; words: " : "", words ? words : "");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  tap_plan(9);
  {
    const char *l[] = {"v4:198.51.100.7", "v4:127.0.0.1"}, *p[] = {"v4:127.0.0.9", "v4:203.0.113.1"};
    check("RoCE, as many rails, one peer address routed from a rail, one from none: rail k to "
          "rail k",
          l, 2, p, 2, "0>0 1>1", 1, NULL);
  }
  {
    const char *l[] = {"v4:127.0.0.1"}, *p[] = {"v4:203.0.113.1", "v4:127.0.0.9"};
    check("RoCE, this device of 1, the peer's 2: the peer's second, routed from this rail", l, 1,
          p, 2, "0>1", 0,
          "rxeL0 (127.0.0.1) to rail 1 (127.0.0.9) by route; without the peer's rail 0 "
          "(203.0.113.1)");
  }
  {
    const char *l[] = {"v4:198.51.100.7", "v4:127.0.0.1"}, *p[] = {"v4:127.0.0.9"};
    check("RoCE, this device of 2, the peer's 1 routed from the second rail", l, 2, p, 1, "1>0",
          0, "rxeL1 (127.0.0.1) to rail 0 (127.0.0.9) by route; without rxeL0 (198.51.100.7)");
  }
  {
    const char *l[] = {"v4:198.51.100.7"}, *p[] = {"v4:203.0.113.1", "v4:127.0.0.9"};
    check("RoCE, this device of 1, the peer's 2, routed from elsewhere: in order", l, 1, p, 2,
          "0>0", 0, "rxeL0 (198.51.100.7) to rail 0 (203.0.113.1) in order; without the peer's "
                    "rail 1 (127.0.0.9)");
  }
  char own[64], own_gid[80];
  if (rn_other_ipv4(own, sizeof(own))) {
    /* The peer lists its rails the other way round: each address is routed
     * from a rail of its own here, so each pairs with that rail. */
    snprintf(own_gid, sizeof(own_gid), "v4:%s", own);
    const char *l[] = {own_gid, "v4:127.0.0.1"}, *p[] = {"v4:127.0.0.9", own_gid};
    check("RoCE, as many rails, each peer address routed from another rail of its own: crossed "
          "by route",
          l, 2, p, 2, "0>1 1>0", 0, NULL);
  } else {
    tap_skip("this host has no IPv4 address outside 127/8 to stand for a second rail");
  }
  {
    const char *l[] = {"ib:fe80:0:0:a", "ib:fe80:0:0:b"}, *p[] = {"ib:fe80:0:0:b", "ib:fe80:0:0:a"};
    check("InfiniBand, a subnet per rail, the peer's in the other order: crossed by prefix", l, 2,
          p, 2, "0>1 1>0", 0,
          "rxeL0 (subnet fe80:0000:0000:000a) to rail 1 (subnet fe80:0000:0000:000a) by route, "
          "rxeL1 (subnet fe80:0000:0000:000b) to rail 0 (subnet fe80:0000:0000:000b) by route");
  }
  {
    const char *l[] = {"ib:fe80:0:0:a", "ib:fe80:0:0:b"}, *p[] = {"ib:fe80:0:0:b"};
    check("InfiniBand, this device of 2, the peer's 1 in the second's subnet", l, 2, p, 1, "1>0", 0,
          NULL);
  }
  {
    const char *l[] = {"ib:fe80:0:0:0", "ib:fe80:0:0:0"}, *p[] = {"ib:fe80:0:0:0"};
    check("InfiniBand, one prefix on every port (it tells nothing): in order", l, 2, p, 1, "0>0",
          0, "rxeL0 (subnet fe80:0000:0000:0000) to rail 0 (subnet fe80:0000:0000:0000) in order; "
             "without rxeL1 (subnet fe80:0000:0000:0000)");
  }
  {
    const char *l[] = {"ib:fe80:0:0:a"}, *p[] = {"ib:fe80:0:0:0", "ib:fe80:0:0:0"};
    check("InfiniBand, the peer's rails share a prefix: in order", l, 1, p, 2, "0>0", 0, NULL);
  }
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
