/* A random workload for one comm pair (tests/common/churn.c). */
#ifndef RN_TEST_CHURN_H
#define RN_TEST_CHURN_H

#include <stdint.h>
#include "rn_test.h"

#define CHURN_MAXN 8 /* buffers per receive group, at most */

/* One side of one pair; run churn_sender or churn_receiver on it (a
 * thread's start routine).  failed and why say how it ended. */
struct churn_side {
  struct rn_net *net;
  void *comm;     /* the send comm (sender) or the receive comm (receiver) */
  uint64_t seed;  /* the same on both sides */
  int pair;       /* the same on both sides; pairs differ in their plans */
  int maxn;       /* 1..CHURN_MAXN, at most the device's maxRecvs */
  int groups;     /* receive groups to move */
  double bound_s; /* nominal (scaled by rn_deadline) */
  int failed;
  char why[256];
};

void *churn_sender(void *arg);
void *churn_receiver(void *arg);

#endif
