/* Which rails a TCP connection goes over when the two sides' devices have
 * a different number of them (rn_tcp_plan_streams, plugin/tcp/open.c): a
 * host that started with a NIC down meets one with all of them.  The
 * comm's rails are min(n, ndev) pairs; a peer address the kernel routes
 * from one of the device's rails pairs with it, the rest in order, the
 * pairs in the device's order.  No connection is made: the route lookups
 * send nothing.  Addresses: 127.0.0.1 is the source the kernel gives any
 * 127/8 destination, and a host's own address the source for itself;
 * 198.51.100.0/24 and 203.0.113.0/24 (documentation ranges) are no
 * address of this host, so no route leaves from them. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include "../../plugin/tcp/tcp.h"
#include "../common/rn_test.h"

static union rn_sockaddr v4(const char *s) {
  union rn_sockaddr a;
  memset(&a, 0, sizeof(a));
  a.in.sin_family = AF_INET;
  a.in.sin_port = htons(4000);
  inet_pton(AF_INET, s, &a.in.sin_addr);
  return a;
}

static int same(const union rn_sockaddr *a, const char *s) {
  union rn_sockaddr b = v4(s);
  return rn_sockaddr_same_host(a, &b);
}

/* The plan's pairs as "local>peer local>peer ...", its standby marked. */
static const char *pairs(const struct rn_tcp_plan *p, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < p->nlocals && o < len; i++) {
    char l[64], a[64];
    o += (size_t)snprintf(buf + o, len - o, "%s%s>%s", i ? " " : "",
                          inet_ntop(AF_INET, &p->locals[i].in.sin_addr, l, sizeof(l)),
                          i < p->naddrs ? inet_ntop(AF_INET, &p->addrs[i].in.sin_addr, a, sizeof(a))
                                        : "?");
  }
  return buf;
}

/* Plan the streams from dev[ndev] (+ standby) to peer[n] (+ standby) and
 * compare with want[] ("local>peer" per rail, the standby last). */
static void check(const char *what, const char *const *dev, int ndev, int dev_standby,
                  const char *const *peer, int n, int peer_standby, const char *const *want,
                  int nwant, int want_standby) {
  union rn_sockaddr d[RN_MAX_RAILS], p[RN_MAX_RAILS];
  for (int i = 0; i < ndev + dev_standby; i++) d[i] = v4(dev[i]);
  for (int i = 0; i < n + peer_standby; i++) p[i] = v4(peer[i]);
  struct rn_tcp_plan plan;
  rn_tcp_plan_streams(p, n, peer_standby, d, ndev, dev_standby, "the test's peer", &plan);
  int ok = plan.nlocals == nwant && plan.naddrs == nwant && plan.standby == want_standby &&
           plan.nstreams >= nwant && plan.nstreams % nwant == 0;
  for (int i = 0; i < nwant && ok; i++) {
    char l[32], a[32];
    if (sscanf(want[i], "%31[^>]>%31s", l, a) != 2) ok = 0;
    ok = ok && same(&plan.locals[i], l) && same(&plan.addrs[i], a);
  }
  char got[512];
  tap_result(ok, "%s: %s (%d rail(s)%s, %d streams)", what, pairs(&plan, got, sizeof(got)),
             plan.nlocals, plan.standby ? ", the standbys last" : "", plan.nstreams);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  tap_plan(11);
  {
    const char *dev[] = {"198.51.100.7", "127.0.0.1"}, *peer[] = {"127.0.0.9"};
    const char *want[] = {"127.0.0.1>127.0.0.9"};
    check("device of 2, peer of 1 routed from the device's second rail", dev, 2, 0, peer, 1, 0,
          want, 1, 0);
  }
  {
    const char *dev[] = {"198.51.100.7", "198.51.100.8"}, *peer[] = {"203.0.113.1"};
    const char *want[] = {"198.51.100.7>203.0.113.1"};
    check("device of 2, peer of 1 routed from neither: in order", dev, 2, 0, peer, 1, 0, want, 1,
          0);
  }
  {
    const char *dev[] = {"127.0.0.1"}, *peer[] = {"203.0.113.1", "127.0.0.9"};
    const char *want[] = {"127.0.0.1>127.0.0.9"};
    check("device of 1, peer of 2, its second routed from the device's rail", dev, 1, 0, peer, 2,
          0, want, 1, 0);
  }
  {
    const char *dev[] = {"198.51.100.7"}, *peer[] = {"203.0.113.1", "127.0.0.9"};
    const char *want[] = {"198.51.100.7>203.0.113.1"};
    check("device of 1, peer of 2, routed from elsewhere: in order", dev, 1, 0, peer, 2, 0, want,
          1, 0);
  }
  {
    const char *dev[] = {"198.51.100.7", "127.0.0.1", "198.51.100.8"};
    const char *peer[] = {"203.0.113.1", "127.0.0.9"};
    const char *want[] = {"198.51.100.7>203.0.113.1", "127.0.0.1>127.0.0.9"};
    check("device of 3, peer of 2: one pair by route, one in order, in the device's order", dev,
          3, 0, peer, 2, 0, want, 2, 0);
  }
  {
    const char *dev[] = {"127.0.0.1", "198.51.100.8", "198.51.100.9"};
    const char *peer[] = {"127.0.0.9", "203.0.113.5"};
    const char *want[] = {"127.0.0.1>127.0.0.9"};
    check("device of 2 and a standby, peer of 1 and a standby: one pair, no standby (only "
          "between devices alike)",
          dev, 2, 1, peer, 1, 1, want, 1, 0);
  }
  {
    /* Streams reopened later (after RAILNET_SOCKET_IDLE_MS) leave from
     * what connect kept (rn_tcp_plan_keep): the paired rail, as many as
     * the peer's, so the standby must not come back with them. */
    union rn_sockaddr d[3] = {v4("127.0.0.1"), v4("198.51.100.8"), v4("198.51.100.9")};
    union rn_sockaddr p[2] = {v4("127.0.0.9"), v4("203.0.113.5")};
    union rn_sockaddr locals[RN_MAX_RAILS];
    int nlocals = 0, local_standby = -1;
    struct rn_tcp_plan plan, again;
    rn_tcp_plan_streams(p, 1, 1, d, 2, 1, NULL, &plan);
    rn_tcp_plan_keep(&plan, &d[2], locals, &nlocals, &local_standby);
    rn_tcp_plan_streams(p, 1, 1, locals, nlocals, local_standby, NULL, &again);
    tap_result(plan.standby == 0 && again.standby == 0 && again.nlocals == 1 && !local_standby &&
                   again.nstreams == plan.nstreams,
               "device of 2 and a standby, peer of 1 and a standby: reopened streams go as at "
               "connect, one pair and no standby (at connect %d, reopened %d, %d stream(s) "
               "against %d)",
               plan.standby, again.standby, again.nstreams, plan.nstreams);
    /* ... and between devices alike the standby comes back with them */
    union rn_sockaddr q[3] = {v4("127.0.0.9"), v4("203.0.113.1"), v4("203.0.113.5")};
    rn_tcp_plan_streams(q, 2, 1, d, 2, 1, NULL, &plan);
    rn_tcp_plan_keep(&plan, &d[2], locals, &nlocals, &local_standby);
    rn_tcp_plan_streams(q, 2, 1, locals, nlocals, local_standby, NULL, &again);
    tap_result(plan.standby == 1 && again.standby == 1 && again.nlocals == 3,
               "as many rails and a standby each: reopened streams keep the standby (at connect "
               "%d, reopened %d)",
               plan.standby, again.standby);
  }
  {
    const char *dev[] = {"198.51.100.7", "127.0.0.1", "198.51.100.9"};
    const char *peer[] = {"127.0.0.9", "203.0.113.1", "203.0.113.5"};
    const char *want[] = {"198.51.100.7>127.0.0.9", "127.0.0.1>203.0.113.1",
                          "198.51.100.9>203.0.113.5"};
    check("as many rails and a standby each: rail k to rail k, the standbys last", dev, 2, 1, peer,
          2, 1, want, 3, 1);
  }
  {
    const char *dev[] = {"198.51.100.7", "127.0.0.1"}, *peer[] = {"127.0.0.9", "203.0.113.1"};
    const char *want[] = {"198.51.100.7>127.0.0.9", "127.0.0.1>203.0.113.1"};
    check("as many rails, one address routed from a rail, one from none: rail k to rail k", dev,
          2, 0, peer, 2, 0, want, 2, 0);
  }
  char own[64];
  if (rn_other_ipv4(own, sizeof(own))) {
    /* The peer lists its two rails the other way round: each address is
     * routed from a rail of its own, so each pairs with that rail. */
    const char *dev[] = {own, "127.0.0.1"}, *peer[] = {"127.0.0.9", own};
    char w0[160], w1[160];
    snprintf(w0, sizeof(w0), "%s>%s", own, own);
    snprintf(w1, sizeof(w1), "127.0.0.1>127.0.0.9");
    const char *want[] = {w0, w1};
    check("as many rails, each address routed from another rail of its own: paired by route",
          dev, 2, 0, peer, 2, 0, want, 2, 0);
  } else {
    tap_skip("this host has no IPv4 address outside 127/8 to stand for a second rail");
  }
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
