/* Weighted striping of a verbs group (plugin/ib/stripe.c), no hardware:
 * where the cuts of a buffer fall for given weights, which rails a
 * group's parts go to for given rates and loads, and the weights that
 * come of the rates (the floor included). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "../../plugin/ib/stripe.h"
#include "../common/rn_test.h"

#define A RN_IB_STRIPE_ALIGN

/* The cuts of size over w[0..n-1] keep every promise of stripe.h; and
 * each part is within one alignment unit of its exact share. */
static int bounds_ok(size_t size, const uint32_t *w, int n, char *why, size_t len) {
  size_t off[65];
  double sum = 0;
  for (int j = 0; j < n; j++) sum += w[j];
  rn_ib_stripe_bounds(size, w, n, off);
  if (off[0] != 0 || off[n] != size)
    return snprintf(why, len, "ends %zu, %zu for size %zu", off[0], off[n], size), 0;
  double cum = 0;
  for (int j = 1; j <= n; j++) {
    cum += w[j - 1];
    if (off[j] < off[j - 1]) return snprintf(why, len, "cut %d at %zu before %zu", j, off[j], off[j - 1]), 0;
    if (j < n && off[j] % A && off[j] != size)
      return snprintf(why, len, "cut %d at %zu: not a multiple of %d", j, off[j], A), 0;
    double exact = (double)size * cum / sum;
    if ((double)off[j] > exact + A || (double)off[j] + A < exact)
      return snprintf(why, len, "cut %d at %zu, exact %.0f", j, off[j], exact), 0;
  }
  return 1;
}

static void test_bounds(void) {
  char why[160] = "";
  uint32_t eq[4] = {1, 1, 1, 1};
  size_t off[5];
  rn_ib_stripe_bounds(1 << 20, eq, 4, off);
  tap_result(off[1] == 262144 && off[2] == 524288 && off[3] == 786432 && off[4] == 1 << 20,
             "1 MiB over 4 equal parts: 256 KiB each (cuts %zu %zu %zu)", off[1], off[2], off[3]);
  uint32_t w41[2] = {4, 1};
  rn_ib_stripe_bounds(1000000, w41, 2, off);
  tap_result(off[1] % A == 0 && off[1] >= 800000 - A && off[1] <= 800000 + A,
             "1,000,000 bytes at 4:1: the cut at %zu (exact 800,000, a multiple of %d)", off[1], A);
  rn_ib_stripe_bounds(100, eq, 3, off);
  tap_result(off[0] == 0 && off[3] == 100 && off[1] <= off[2] && (off[1] == 0 || off[1] == 100),
             "100 bytes over 3 parts: whole in one part (cuts %zu %zu)", off[1], off[2]);
  rn_ib_stripe_bounds(0, w41, 2, off);
  tap_result(off[0] == 0 && off[1] == 0 && off[2] == 0, "0 bytes: every part empty");
  uint32_t one[3] = {0, 5, 0};
  rn_ib_stripe_bounds(65536, one, 3, off);
  tap_result(off[1] == 0 && off[2] == 65536, "weights 0,5,0: the whole buffer in the middle part");
  /* property check over random sizes and weights */
  srand(7);
  int bad = 0;
  for (int t = 0; t < 20000 && !bad; t++) {
    int n = 1 + rand() % 64;
    uint32_t w[64];
    for (int j = 0; j < n; j++) w[j] = (uint32_t)(rand() % 65536);
    w[rand() % n] |= 1;
    size_t size = t % 3 == 0 ? (size_t)(rand() % 4096) : (size_t)rand() % ((size_t)1 << 31);
    bad = !bounds_ok(size, w, n, why, sizeof why);
  }
  tap_result(!bad, "20,000 random cuts: ordered, aligned, each within %d bytes of its share%s%s", A,
             bad ? ": " : "", why);
}

static void test_pick(void) {
  double eq[2] = {1e9, 1e9}, r41[2] = {4e9, 1e9};
  uint64_t idle[2] = {0, 0}, busy0[2] = {1 << 20, 0};
  int pick[8];
  rn_ib_stripe_pick(2, eq, idle, 4096, 1, 1, 0, pick);
  int a = pick[0];
  rn_ib_stripe_pick(2, eq, idle, 4096, 1, 1, 1, pick);
  tap_result(a == 0 && pick[0] == 1, "a small message over idle equal rails: the first from 'first' (%d, %d)",
             a, pick[0]);
  rn_ib_stripe_pick(2, eq, busy0, 4096, 1, 1, 0, pick);
  tap_result(pick[0] == 1, "a small message goes to the rail with less in flight (%d)", pick[0]);
  uint64_t both[2] = {1 << 20, 1 << 20}, more0[2] = {8 << 20, 1 << 20};
  rn_ib_stripe_pick(2, r41, both, 4096, 1, 1, 1, pick);
  a = pick[0];
  rn_ib_stripe_pick(2, r41, more0, 4096, 1, 1, 0, pick);
  int b = pick[0];
  rn_ib_stripe_pick(2, r41, busy0, 4096, 1, 1, 0, pick);
  tap_result(a == 0 && b == 1 && pick[0] == 1,
             "at 4:1, 1 MiB in flight on each: the fast rail (%d); 8 MiB against 1: the slow one (%d); "
             "1 MiB against none: the slow one (%d)",
             a, b, pick[0]);
  rn_ib_stripe_pick(2, r41, idle, 8 << 20, 4, 2, 0, pick);
  int n0 = (pick[0] == 0) + (pick[1] == 0) + (pick[2] == 0) + (pick[3] == 0);
  tap_result(n0 == 2, "a group over every QP (2 rails x 2): 2 parts per rail whatever the rates (%d on rail 0)",
             n0);
  double r100[2] = {100e9, 1e9};
  rn_ib_stripe_pick(2, r100, idle, 3 << 16, 3, 2, 1, pick);
  n0 = (pick[0] == 0) + (pick[1] == 0) + (pick[2] == 0);
  tap_result(n0 == 2, "3 parts at 100:1 with 2 QPs per rail: the fast rail's 2 QPs, then the slow one (%d)", n0);
}

static void test_weights(void) {
  double r41[2] = {4e9, 1e9}, r100[2] = {100e9, 1e9};
  int pick[4] = {0, 1, 0, 1};
  uint64_t zero[2] = {0, 0};
  uint32_t w[4];
  size_t off[5];
  rn_ib_stripe_weights(2, r41, zero, 1 << 20, 4, pick, w);
  rn_ib_stripe_bounds(1 << 20, w, 4, off);
  size_t fast = (off[1] - off[0]) + (off[3] - off[2]);
  double share = (double)fast / (1 << 20);
  tap_result(share > 0.79 && share < 0.81, "1 MiB at 4:1 over 2 QPs each: the fast rail carries %.3f", share);
  rn_ib_stripe_weights(2, r100, zero, 1 << 20, 4, pick, w);
  rn_ib_stripe_bounds(1 << 20, w, 4, off);
  size_t slow = (off[2] - off[1]) + (off[4] - off[3]);
  double want = 1.0 / (RN_IB_STRIPE_FLOOR + 1);
  share = (double)slow / (1 << 20);
  tap_result(share > want - 0.005 && share < want + 0.005,
             "at 100:1 the slow rail keeps the floor, 1/%d of the fast one: %.4f (want %.4f)",
             RN_IB_STRIPE_FLOOR, share, want);
  /* 1 MiB at 4:1 with 2 MiB in flight on the fast rail and none on the
   * slow: all finish together at (1 + 2) MiB / 5 units, so the fast rail
   * gets 4 * 0.6 - 2 = 0.4 MiB, the slow 0.6 MiB. */
  uint64_t fast_busy[2] = {2 << 20, 0}, slow_busy[2] = {0, 2 << 20};
  rn_ib_stripe_weights(2, r41, fast_busy, 1 << 20, 4, pick, w);
  rn_ib_stripe_bounds(1 << 20, w, 4, off);
  slow = (off[2] - off[1]) + (off[4] - off[3]);
  share = (double)slow / (1 << 20);
  tap_result(share > 0.59 && share < 0.61,
             "4:1 with 2 MiB in flight on the fast rail: the slow one gets %.3f of the next MiB (0.6)",
             share);
  rn_ib_stripe_weights(2, r41, slow_busy, 1 << 20, 4, pick, w);
  rn_ib_stripe_bounds(1 << 20, w, 4, off);
  slow = (off[2] - off[1]) + (off[4] - off[3]);
  tap_result(slow == 0, "4:1 with 2 MiB in flight on the slow rail: it gets none of the next MiB (%zu bytes)",
             slow);
  int uneven[3] = {0, 0, 1};
  double eq[2] = {1e9, 1e9};
  rn_ib_stripe_weights(2, eq, zero, 3 << 16, 3, uneven, w);
  tap_result(w[0] == w[1] && w[2] == 2 * w[0],
             "equal rails, 2 parts on one and 1 on the other: each rail's parts share its weight (%u %u %u)",
             w[0], w[1], w[2]);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  tap_plan(16);
  test_bounds();
  test_pick();
  test_weights();
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
