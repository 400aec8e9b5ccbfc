/* Which of two hosts' rails pair up in a comm, one rule for every
 * transport.  A rail's NIC may reach only its counterpart (a
 * rail-optimized fabric, one subnet per rail; a host that checks the
 * source of what it receives, rp_filter), so a peer rail that one of ours
 * reaches directly (the kernel routes the peer's address from our rail's
 * address, or both sit in one subnet) pairs with it:
 *  - as many rails on both sides: rail k with the peer's rail k, unless
 *    the routes pair every peer rail with a rail of its own (two hosts
 *    that list their NICs in another order);
 *  - a different number (one host started with a NIC down, say):
 *    min(npeer, nlocal) pairs, those the routes give, the rest in order.
 * Standby NICs stay outside: each transport adds them after the pairs. */
#ifndef RN_PAIRING_H
#define RN_PAIRING_H

#include <stddef.h>
#include <stdint.h>
#include "railnet/sock.h"
#include "railnet/transport.h"

/* The pairs, in the local rails' order. */
struct rn_pairing {
  int n;                   /* pairs: min(npeer, nlocal) */
  int local[RN_MAX_RAILS]; /* pair k: a local rail ... */
  int peer[RN_MAX_RAILS];  /* ... and the peer's rail it pairs with */
  uint32_t routed;         /* bit k: pair k was given by a route (else taken in order) */
  int identity;            /* as many rails, and pair k is rail k with the peer's rail k */
};

/* The pairs of nlocal local rails with npeer peer rails, where bit i of
 * from[j] says that the peer's rail j is reached from local rail i; a
 * peer rail goes to the first free rail its bits name. */
void rn_pairing_plan(const uint32_t *from, int npeer, int nlocal, struct rn_pairing *p);

/* from[] by the kernel's routes: bit i of from[j] when the source the
 * kernel picks for the peer's address j is local address i (no packet is
 * sent).  A peer address with no route, or routed from elsewhere, gets 0. */
void rn_pairing_routes(const union rn_sockaddr *peer, int npeer, const union rn_sockaddr *local,
                       int nlocal, uint32_t *from);

/* The pairing in words, for the one INFO a comm says when it is not the
 * identity: "A to B by route, C to D in order; without E, the peer's F",
 * from the rails' labels (the local ones, then the peer's). */
void rn_pairing_describe(const struct rn_pairing *p, const char *const *local_label, int nlocal,
                         const char *const *peer_label, int npeer, char *buf, size_t len);

#endif
