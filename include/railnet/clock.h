/* The one clock railnet measures time with: CLOCK_MONOTONIC in
 * milliseconds, for connect timeouts, rendezvous deadlines and liveness
 * checks, and in nanoseconds for delivery rates. */
#ifndef RN_CLOCK_H
#define RN_CLOCK_H

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

#endif
