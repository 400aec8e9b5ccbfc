/* Weighted striping of a verbs group (stripe.h): pure functions. */
#include "stripe.h"

/* A rail's rate as the split sees it: at least 1/RN_IB_STRIPE_FLOOR of the
 * fastest, so a slow rail keeps getting bytes and keeps being measured. */
static double rn_ib_stripe_floored(double rate, double top) {
  const double least = top / RN_IB_STRIPE_FLOOR;
  return rate < least ? least : rate;
}

void rn_ib_stripe_bounds(size_t size, const uint32_t *w, int n, size_t *off) {
  double sum = 0, cum = 0;
  for (int j = 0; j < n; j++) sum += w[j];
  off[0] = 0;
  for (int j = 1; j < n; j++) {
    cum += w[j - 1];
    size_t at = sum > 0 ? (size_t)((double)size * (cum / sum) + RN_IB_STRIPE_ALIGN / 2) : 0;
    at &= ~(size_t)(RN_IB_STRIPE_ALIGN - 1);
    if (at > size) at = size;
    if (at < off[j - 1]) at = off[j - 1];
    off[j] = at;
  }
  off[n] = size;
}

void rn_ib_stripe_pick(int n, const double *rate, const uint64_t *load, size_t total, int nused,
                       int cap, int first, int *pick) {
  double given[RN_IB_STRIPE_RAILS] = {0};
  int parts[RN_IB_STRIPE_RAILS] = {0};
  if (n > RN_IB_STRIPE_RAILS) n = RN_IB_STRIPE_RAILS;
  double part = nused > 0 ? (double)total / nused : 0, top = 0;
  for (int p = 0; p < n; p++)
    if (rate[p] > top) top = rate[p];
  for (int j = 0; j < nused; j++) {
    int best = -1;
    double best_t = 0;
    for (int i = 0; i < n; i++) {
      int p = (first + i) % n;
      if (parts[p] >= cap) continue;
      double t = ((double)load[p] + given[p] + part) / rn_ib_stripe_floored(rate[p], top);
      if (best < 0 || t < best_t) best = p, best_t = t;
    }
    if (best < 0) best = first % n; /* nused > n * cap: the caller's error */
    given[best] += part;
    parts[best]++;
    pick[j] = best;
  }
}

void rn_ib_stripe_weights(int n, const double *rate, const uint64_t *load, size_t total, int nused,
                          const int *pick, uint32_t *w) {
  int parts[RN_IB_STRIPE_RAILS] = {0}, in[RN_IB_STRIPE_RAILS] = {0};
  double top = 0, r[RN_IB_STRIPE_RAILS], x[RN_IB_STRIPE_RAILS] = {0};
  if (n > RN_IB_STRIPE_RAILS) n = RN_IB_STRIPE_RAILS;
  for (int j = 0; j < nused; j++) {
    parts[pick[j]]++;
    if (rate[pick[j]] > top) top = rate[pick[j]];
  }
  /* Fill the chosen rails up to one finish time t: rail p gets
   * t * r[p] - load[p] bytes, none where its backlog alone reaches past
   * t (the rail is then left out and t found again). */
  for (int p = 0; p < n; p++) {
    r[p] = rn_ib_stripe_floored(rate[p], top);
    in[p] = parts[p] > 0 && r[p] > 0;
  }
  for (int again = 1; again;) {
    double sum_r = 0, sum_l = 0;
    for (int p = 0; p < n; p++)
      if (in[p]) sum_r += r[p], sum_l += (double)load[p];
    if (sum_r <= 0) break;
    double t = ((double)total + sum_l) / sum_r;
    again = 0;
    for (int p = 0; p < n; p++) {
      if (!in[p]) continue;
      x[p] = t * r[p] - (double)load[p];
      if (x[p] <= 0) x[p] = 0, in[p] = 0, again = 1;
    }
  }
  for (int j = 0; j < nused; j++) {
    double q = total > 0 ? 1048576.0 * x[pick[j]] / (double)total / parts[pick[j]] : 1;
    w[j] = total == 0 ? 1 : (uint32_t)(q + 0.5);
  }
  /* Every weight zero (rounding): the parts share alike. */
  uint64_t sum = 0;
  for (int j = 0; j < nused; j++) sum += w[j];
  for (int j = 0; j < nused && sum == 0; j++) w[j] = 1;
}
