/* Per-rail telemetry of a verbs comm: RAILNET_STATS lines (the same shape
 * as the socket transport's: the comm, then each rail's counters) every
 * RAILNET_STATS_MS while the comm is called and at close, and for a comm
 * of several rails one INFO line at close with each rail's share.  A
 * sender's rate_mbps is its delivery-rate estimate (rates.c; 0 on a
 * receiver, and before a rail's first group).  The
 * counters live in the rails (ib.h); only the comm's own thread touches
 * them. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>
#include "railnet/check.h"
#include "railnet/clock.h"
#include "railnet/param.h"
#include "ib.h"

static _Atomic uint64_t rn_ib_comm_ids;

void rn_ib_stats_start(struct rn_ib_comm *c) {
  c->id = atomic_fetch_add(&rn_ib_comm_ids, 1) + 1;
  c->created_ms = c->stats_ms = rn_clock_ms();
}

/* up: in use; idle: a standby not in use; failed: left after a failure. */
static const char *rn_ib_rail_state(const struct rn_ib_comm *c, int r) {
  if (c->pos[r] >= 0) return c->dead & (1u << r) ? "failed" : "up";
  return r == c->standby && !(c->left & (1u << r)) ? "idle" : "failed";
}

static uint64_t rn_ib_stats_total(const struct rn_ib_comm *c) {
  uint64_t total = 0;
  for (int r = 0; r < c->nrails; r++) total += c->is_send ? c->rail[r].bytes : c->rail[r].chunks;
  return total;
}

static void rn_ib_stats_write(struct rn_ib_comm *c, const char *event, int64_t now) {
  if (rn_params()->stats[0] == '\0') return;
  char line[4096];
  uint64_t total = rn_ib_stats_total(c);
  int n = snprintf(line, sizeof(line),
                   "{\"event\":\"%s\",\"pid\":%d,\"comm\":%" PRIu64
                   ",\"transport\":\"ib\",\"side\":\"%s\",\"peer\":\"%s\",\"ms\":%" PRId64
                   ",\"rebuilds\":%u,\"rails\":[",
                   event, (int)getpid(), c->id, c->is_send ? "send" : "recv", c->peer,
                   now - c->created_ms, c->epoch);
  for (int r = 0; r < c->nrails && n < (int)sizeof(line) - 300; r++) {
    const struct rn_ib_rail *rl = &c->rail[r];
    uint64_t mine = c->is_send ? rl->bytes : rl->chunks;
    n += snprintf(line + n, sizeof(line) - (size_t)n,
                  "%s{\"rail\":%d,\"name\":\"%s\",\"state\":\"%s\",\"qps\":%d,\"bytes\":%" PRIu64
                  ",\"chunks\":%" PRIu64 ",\"replays\":%" PRIu64 ",\"failures\":%" PRIu64
                  ",\"share\":%.4f,\"rate_mbps\":%.1f,\"role\":\"%s\"}",
                  r ? "," : "", r, rl->port->nic->name, rn_ib_rail_state(c, r), c->nqps,
                  rl->bytes, rl->chunks, rl->replays, rl->failures,
                  total ? (double)mine / (double)total : 0.0, rl->rate * 8 / 1e6,
                  r == c->standby ? "standby" : "rail");
  }
  n += snprintf(line + n, sizeof(line) - (size_t)n, "]}\n");
  if (n >= (int)sizeof(line)) n = (int)sizeof(line) - 1;
  rn_stats_append(line, (size_t)n);
}

void rn_ib_stats_tick(struct rn_ib_comm *c) {
  if (rn_params()->stats[0] == '\0') return;
  int64_t now = rn_clock_ms();
  if (now - c->stats_ms < rn_params()->stats_ms) return;
  c->stats_ms = now;
  rn_ib_stats_write(c, "interval", now);
}

void rn_ib_stats_close(struct rn_ib_comm *c) {
  int64_t now = rn_clock_ms();
  rn_ib_stats_write(c, "close", now);
  if (c->nrails < 2) return;
  char line[1024];
  int n = 0;
  uint64_t total = rn_ib_stats_total(c);
  for (int r = 0; r < c->nrails && n < (int)sizeof(line) - 200; r++) {
    const struct rn_ib_rail *rl = &c->rail[r];
    uint64_t mine = c->is_send ? rl->bytes : rl->chunks;
    const char *name = rl->port->nic->name, *role = r == c->standby ? "standby " : "";
    double share = total ? 100.0 * (double)mine / (double)total : 0.0;
    if (c->is_send)
      n += snprintf(line + n, sizeof(line) - (size_t)n,
                    "%s%s%s %.1f%% (%" PRIu64 " bytes, %" PRIu64 " chunks, %" PRIu64
                    " sent again, %" PRIu64 " failures, %.0f Mbit/s estimated, %s)",
                    r ? ", " : "", role, name, share, rl->bytes, rl->chunks, rl->replays,
                    rl->failures, rl->rate * 8 / 1e6, rn_ib_rail_state(c, r));
    else
      n += snprintf(line + n, sizeof(line) - (size_t)n,
                    "%s%s%s %.1f%% (%" PRIu64 " immediates, %" PRIu64 " failures, %s)",
                    r ? ", " : "", role, name, share, rl->chunks, rl->failures,
                    rn_ib_rail_state(c, r));
  }
  RN_INFO(NCCL_NET, "%s comm with %s closed after %.1f s and %u rebuild(s), %s over %d rails: %s",
          c->is_send ? "send" : "receive", c->peer, (double)(now - c->created_ms) / 1000.0,
          c->epoch, c->is_send ? "bytes" : "immediates", c->nrails, line);
}
