/* Rail pairing between two hosts (include/railnet/pairing.h): the rule,
 * the kernel's routes as its input, and its words.  The TCP transport
 * pairs the addresses it dials, the verbs transport the NICs it connects
 * QPs on. */
#include <stdio.h>
#include <string.h>
#include "railnet/pairing.h"

void rn_pairing_plan(const uint32_t *from, int npeer, int nlocal, struct rn_pairing *p) {
  int of_local[RN_MAX_RAILS]; /* the peer rail each local rail pairs with, or -1 */
  uint32_t taken = 0, routed = 0;
  const int m = npeer < nlocal ? npeer : nlocal;
  memset(p, 0, sizeof(*p));
  for (int i = 0; i < nlocal; i++) of_local[i] = -1;
  for (int j = 0; j < npeer; j++) {
    for (int i = 0; i < nlocal; i++) {
      if (of_local[i] >= 0 || !((from[j] >> i) & 1u)) continue;
      of_local[i] = j;
      taken |= 1u << j;
      routed |= 1u << i;
      break;
    }
  }
  int paired = __builtin_popcount(routed);
  if (npeer == nlocal && paired < npeer) {
    for (int i = 0; i < nlocal; i++) of_local[i] = i;
    routed = 0;
    paired = npeer;
  }
  for (int i = 0, j = 0; i < nlocal && paired < m; i++) {
    if (of_local[i] >= 0) continue;
    while ((taken >> j) & 1u) j++;
    of_local[i] = j;
    taken |= 1u << j;
    paired++;
  }
  p->identity = npeer == nlocal;
  for (int i = 0; i < nlocal; i++) {
    if (of_local[i] < 0) continue;
    if ((routed >> i) & 1u) p->routed |= 1u << p->n;
    p->local[p->n] = i;
    p->peer[p->n++] = of_local[i];
    if (of_local[i] != i) p->identity = 0;
  }
}

void rn_pairing_routes(const union rn_sockaddr *peer, int npeer, const union rn_sockaddr *local,
                       int nlocal, uint32_t *from) {
  for (int j = 0; j < npeer; j++) {
    union rn_sockaddr src;
    from[j] = 0;
    if (rn_sock_route_source(&peer[j], &src) != 0) continue;
    for (int i = 0; i < nlocal; i++)
      if (rn_sockaddr_same_host(&local[i], &src)) from[j] |= 1u << i;
  }
}

void rn_pairing_describe(const struct rn_pairing *p, const char *const *local_label, int nlocal,
                         const char *const *peer_label, int npeer, char *buf, size_t len) {
  char pairs[512] = "", left[256] = "";
  size_t pl = 0, ll = 0;
  uint32_t local_paired = 0, peer_paired = 0;
  for (int k = 0; k < p->n; k++) {
    local_paired |= 1u << p->local[k];
    peer_paired |= 1u << p->peer[k];
    if (pl < sizeof(pairs))
      pl += (size_t)snprintf(pairs + pl, sizeof(pairs) - pl, "%s%s to %s%s", pl ? ", " : "",
                             local_label[p->local[k]], peer_label[p->peer[k]],
                             (p->routed >> k) & 1u ? " by route" : " in order");
  }
  for (int i = 0; i < nlocal; i++)
    if (!((local_paired >> i) & 1u) && ll < sizeof(left))
      ll += (size_t)snprintf(left + ll, sizeof(left) - ll, "%s%s", ll ? ", " : "", local_label[i]);
  for (int j = 0; j < npeer; j++)
    if (!((peer_paired >> j) & 1u) && ll < sizeof(left))
      ll += (size_t)snprintf(left + ll, sizeof(left) - ll, "%sthe peer's %s", ll ? ", " : "",
                             peer_label[j]);
  snprintf(buf, len, "%s%s%s", pairs, left[0] ? "; without " : "", left);
}
