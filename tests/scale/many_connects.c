/* More connections in progress at once than the plugin tracks (1,024):
 * the surplus waits its turn (connect returns success with no comm, as
 * NCCL expects of a connect in progress) instead of failing, nothing is
 * dialed while it waits, every comm comes up and carries verified data,
 * and no WARN is logged.  One data stream per comm keeps the descriptors
 * of 1,100 comms and their listeners within a common limit. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include "../common/rn_test.h"

#define NCOMMS 1100
#define FDS_NEEDED (NCOMMS * 4 + 64) /* listener + control + stream per comm, and slack */

static int raise_fd_limit(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return -1;
  if (r.rlim_cur < FDS_NEEDED && r.rlim_max >= FDS_NEEDED) {
    r.rlim_cur = FDS_NEEDED;
    if (setrlimit(RLIMIT_NOFILE, &r) != 0) return -1;
  }
  return r.rlim_cur >= FDS_NEEDED ? 0 : -1;
}

static int side(struct rn_peer *p) {
  if (raise_fd_limit() != 0) return peer_fail(p, "descriptor limit below %d", FDS_NEEDED);
  void **comms = calloc(NCOMMS, sizeof(void *)), **lcomms = calloc(NCOMMS, sizeof(void *));
  if (comms == NULL || lcomms == NULL) return peer_fail(p, "out of memory");
  int rc = peer_connect(p, NCOMMS, comms, lcomms, 120);
  int is_send = p->role == RN_SENDER;
  if (rc == 0) rc = rn_stream_check(p, comms[0], is_send);
  if (rc == 0) rc = rn_stream_check(p, comms[NCOMMS - 1], is_send);
  if (rc == 0 && peer_sync(p, 60) != 0) rc = peer_fail(p, "peer gone");
  if (rc == 0 && rn_log_warns() != 0) {
    char w[256] = "";
    rn_log_first_warn("", w, sizeof w);
    rc = peer_fail(p, "%d WARN(s), first: %s", rn_log_warns(), w);
  }
  if (peer_close(p, NCOMMS, comms, p->role == RN_RECEIVER ? lcomms : NULL) != 0 && rc == 0) rc = -1;
  free(comms);
  free(lcomms);
  return rc;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_max < FDS_NEEDED) {
    printf("1..0 # SKIP the descriptor limit (hard %llu) is below the %d this test needs\n",
           (unsigned long long)r.rlim_max, FDS_NEEDED);
    return 0;
  }
  printf("1..1\n");
  struct rn_pair_opts o = {.version = 11,
                           .timeout_s = 300,
                           .init = 1,
                           .seed = 7,
                           .env = "RAILNET_SOCKET_NSTREAMS=1,RAILNET_SOCKET_NTHREADS=0"};
  char why[512] = "";
  double t0 = now_s();
  int rc = rn_run_pair(side, side, &o, why, sizeof why);
  note("%d comms up and used in %.1f s", NCOMMS, now_s() - t0);
  tap_result(rc == 0,
             "%d connects at once (over the 1,024 in progress the plugin tracks) all "
             "complete, carry verified data, and log no WARN%s%s",
             NCOMMS, rc ? ": " : "", rc ? why : "");
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
