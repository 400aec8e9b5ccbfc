/* The one clock railnet measures time with: CLOCK_MONOTONIC in
 * milliseconds, for connect timeouts, rendezvous deadlines and liveness
 * checks, and in nanoseconds for delivery rates. */
#ifndef RN_CLOCK_H
#define RN_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

static inline int64_t rn_clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t rn_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A periodic job many threads may run: one caller wins the turn that is
 * due (now in ms, *next_ms the earliest next turn) and moves *next_ms
 * `every` ms on; 0 for the others, and before it is due. */
static inline int rn_clock_turn(_Atomic int64_t *next_ms, int64_t now, int64_t every) {
  int64_t next = atomic_load_explicit(next_ms, memory_order_relaxed);
  return now >= next && atomic_compare_exchange_strong(next_ms, &next, now + every);
}

#endif
