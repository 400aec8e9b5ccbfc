/* Weighted striping of a verbs group: which rails its parts go to and
 * where each buffer is cut.  Pure functions (no verbs, no clock), so the
 * unit tests run them on any host; stripe.c also keeps the per-rail
 * delivery-rate estimates they are fed with. */
#ifndef RN_IB_STRIPE_H
#define RN_IB_STRIPE_H

#include <stddef.h>
#include <stdint.h>

#define RN_IB_STRIPE_ALIGN 128 /* inner cuts of a buffer fall on multiples of this */
#define RN_IB_STRIPE_FLOOR 16  /* no rail weighs less than 1/16 of the fastest */
#define RN_IB_STRIPE_RAILS 16  /* rails n at most (>= RN_MAX_RAILS) */

/* Cut size bytes into n parts weighted w[0..n-1] (any scale, at least one
 * non-zero): off[0] = 0 <= off[1] <= ... <= off[n] = size, each inner cut
 * a multiple of RN_IB_STRIPE_ALIGN (or size) within one such unit of the
 * exact share; part j is [off[j], off[j+1]). */
void rn_ib_stripe_bounds(size_t size, const uint32_t *w, int n, size_t *off);

/* The rails (positions 0..n-1) of a group's nused parts, each part
 * total / nused bytes: every part goes to the rail where it would be
 * delivered first, (load + parts given to it so far + the part) / rate,
 * with at most cap parts per rail (one per QP); ties go to the first rail
 * from first on.  rate[p] > 0 (bytes/s, floored as in the weights below),
 * load[p] bytes in flight. */
void rn_ib_stripe_pick(int n, const double *rate, const uint64_t *load, size_t total, int nused,
                       int cap, int first, int *pick);

/* The weight of each part, so that every chosen rail would finish at
 * once: rail p is given t * rate[p] - load[p] bytes of total (none when
 * its backlog alone takes longer), shared among its parts.  Each rate is
 * floored at the fastest chosen rail's over RN_IB_STRIPE_FLOOR, so a rail
 * measured slow keeps getting bytes to be measured with.  With nothing in
 * flight the weights are the rates. */
void rn_ib_stripe_weights(int n, const double *rate, const uint64_t *load, size_t total, int nused,
                          const int *pick, uint32_t *w);

#endif
