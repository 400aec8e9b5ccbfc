/* The plan of a verbs group (which QPs carry its parts, how its buffers
 * are cut: stripe.h) and the per-rail delivery-rate estimates it is made
 * from.
 *
 * A rail's estimate is the data bytes its QPs completed per unit of time
 * it had bytes in flight: a chain's signaled completion says its bytes
 * were delivered and acknowledged, and time the rail sat idle does not
 * count, so a rail that was given little is not taken for a slow one.  A
 * sample is taken once RN_IB_RATE_SAMPLE_NS of busy time has passed since
 * the last, and smoothed (EWMA).  Before the first, a rail is assumed to
 * carry its port's link speed.  A rail measured while it was given little
 * reads low (its busy time holds a round trip per part): one that runs
 * dry while another still has bytes in flight is raised by a quarter.
 *
 * A group is cut so that its rails would finish together, given the
 * estimates and the bytes each has in flight (its backlog corrects what
 * the estimate gets wrong); a small one goes whole to the rail that would
 * deliver it first.
 *
 * Only the send side of a comm of several rails (a standby included)
 * keeps estimates: a one-rail comm reads no clock.  The comm's own thread
 * is the only one to touch them. */
#include "railnet/clock.h"
#include "ib.h"

#define RN_IB_RATE_SAMPLE_NS 20000000 /* busy time between samples (20 ms) */
#define RN_IB_RATE_ALPHA 0.5          /* weight of a new sample */
#define RN_IB_RATE_DEFAULT 1.25e9     /* bytes/s of a port that reports no speed */

static int rn_ib_rate_kept(const struct rn_ib_comm *c) { return c->is_send && c->nrails > 1; }

/* A rail's rate before its first sample, and the most it is ever raised
 * to: its port's link speed. */
static double rn_ib_rate_prior(const struct rn_ib_rail *rl) {
  return rl->port->nic->speed_mbps > 0 ? rl->port->nic->speed_mbps * 125000.0 : RN_IB_RATE_DEFAULT;
}

void rn_ib_plan(struct rn_ib_comm *c, uint64_t seq, size_t total, int nused, struct rn_ib_plan *p) {
  int n = c->nlive, pick[RN_MAX_RAILS * RN_IB_MAX_QPS], seen[RN_MAX_RAILS] = {0};
  double rate[RN_MAX_RAILS];
  uint64_t load[RN_MAX_RAILS];
  p->nused = nused;
  if (n == 1) { /* one rail: its QPs in turn, cut alike */
    struct rn_ib_rail *rl = &c->rail[c->in_use[0]];
    for (int j = 0; j < nused; j++) {
      p->qi[j] = rn_ib_qp_index(c, c->in_use[0], (rl->next_qp + j) % c->nqps);
      p->w[j] = 1;
    }
    return;
  }
  for (int i = 0; i < n; i++) {
    struct rn_ib_rail *rl = &c->rail[c->in_use[i]];
    if (rl->rate <= 0) rl->rate = rn_ib_rate_prior(rl);
    rate[i] = rl->rate;
    load[i] = rl->load;
  }
  rn_ib_stripe_pick(n, rate, load, total, nused, c->nqps, (int)(seq % (uint64_t)n), pick);
  rn_ib_stripe_weights(n, rate, load, total, nused, pick, p->w);
  for (int j = 0; j < nused; j++) {
    int r = c->in_use[pick[j]];
    p->qi[j] = rn_ib_qp_index(c, r, (c->rail[r].next_qp + seen[pick[j]]++) % c->nqps);
  }
}

void rn_ib_plan_posted(struct rn_ib_comm *c, const struct rn_ib_plan *p) {
  for (int j = 0; j < p->nused; j++) {
    int r;
    (void)rn_ib_qp(c, p->qi[j], &r);
    c->rail[r].next_qp = (c->rail[r].next_qp + 1) % c->nqps;
  }
}

void rn_ib_rate_posted(struct rn_ib_comm *c, int qi, uint64_t len) {
  if (!rn_ib_rate_kept(c)) return;
  int r;
  struct rn_ib_qp *q = rn_ib_qp(c, qi, &r);
  struct rn_ib_rail *rl = &c->rail[r];
  if (q->chains_posted - q->chains_done >= RN_IB_SLOTS) return; /* rn_ib_rate_room said no */
  uint32_t n = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
  q->chain[q->chains_posted++ % RN_IB_SLOTS] = n;
  if (n == 0) return;
  if (rl->load == 0) rl->busy_from = rn_clock_ns();
  rl->load += n;
}

void rn_ib_rate_done(struct rn_ib_comm *c, int qi) {
  if (!rn_ib_rate_kept(c)) return;
  int r;
  struct rn_ib_qp *q = rn_ib_qp(c, qi, &r);
  struct rn_ib_rail *rl = &c->rail[r];
  if (q->chains_done == q->chains_posted) return;
  uint32_t n = q->chain[q->chains_done++ % RN_IB_SLOTS];
  if (n == 0 || rl->load < n) return;
  int64_t now = rn_clock_ns();
  int64_t busy = rl->busy_ns + (rl->busy_from ? now - rl->busy_from : 0);
  rl->load -= n;
  rl->done += n;
  int64_t dt = busy - rl->busy_mark;
  if (dt >= RN_IB_RATE_SAMPLE_NS) {
    double sample = (double)(rl->done - rl->done_mark) * 1e9 / (double)dt;
    rl->rate += RN_IB_RATE_ALPHA * (sample - rl->rate);
    rl->done_mark = rl->done;
    rl->busy_mark = busy;
  }
  if (rl->load > 0) return;
  rl->busy_ns = busy;
  rl->busy_from = 0;
  /* Ran dry while another rail still has bytes in flight: it was given
   * too little (a rail given little is measured low: its busy time holds
   * a round trip per part), so its estimate grows by a quarter, up to its
   * port's speed.  One given too much stays busy and is measured. */
  for (int i = 0; i < c->nlive; i++) {
    if (c->in_use[i] == r || c->rail[c->in_use[i]].load == 0) continue;
    double up = rl->rate * 1.25, cap = rn_ib_rate_prior(rl);
    if (up > cap) up = cap > rl->rate ? cap : rl->rate;
    rl->rate = up;
    break;
  }
}

int rn_ib_rate_room(struct rn_ib_comm *c, int qi) {
  if (!rn_ib_rate_kept(c)) return 1;
  int r;
  const struct rn_ib_qp *q = rn_ib_qp(c, qi, &r);
  return q->chains_posted - q->chains_done < RN_IB_SLOTS;
}

void rn_ib_rate_reset(struct rn_ib_comm *c) {
  for (int r = 0; r < c->nrails; r++) {
    struct rn_ib_rail *rl = &c->rail[r];
    if (rl->busy_from) rl->busy_ns += rn_clock_ns() - rl->busy_from;
    rl->load = 0;
    rl->busy_from = 0;
    rl->done_mark = rl->done;
    rl->busy_mark = rl->busy_ns;
    for (int k = 0; k < c->nqps; k++) rl->qp[k].chains_posted = rl->qp[k].chains_done = 0;
  }
}
