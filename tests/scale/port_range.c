/* Connecting sockets do not each reserve an ephemeral port: with the
 * namespace's port range cut to 100 ports (tests/scale/port-range.sh),
 * 60 comms, whose 60 listeners take 60 ports for themselves, still come
 * up on the remaining 40, since their 120 connecting sockets share ports
 * between destinations; each carries verified data, and no WARN is
 * logged.  When every connecting socket reserved a port at bind, the
 * range ran out at the 20th connect.  One data stream per comm; the
 * listen comms close once they accepted, as NCCL closes them, and each
 * comm's data stream opens on its listener's port. */
#include <stdio.h>
#include <stdlib.h>
#include "../common/rn_test.h"

#define NCOMMS 60

static int side(struct rn_peer *p) {
  void **comms = calloc(NCOMMS, sizeof(void *)), **lcomms = calloc(NCOMMS, sizeof(void *));
  if (comms == NULL || lcomms == NULL) return peer_fail(p, "out of memory");
  int rc = peer_connect(p, NCOMMS, comms, lcomms, 60);
  int is_send = p->role == RN_SENDER;
  /* As NCCL does once a listen comm has accepted: its port stays with the
   * comm's sockets, and its data streams open on it (RAILNET_SOCKET_LAZY). */
  for (int i = 0; i < NCOMMS && rc == 0 && !is_send; i++)
    if (rn_net_close_listen(&p->net, lcomms[i]) != ncclSuccess)
      rc = peer_fail(p, "closeListen %d", i);
  for (int i = 0; i < NCOMMS && rc == 0; i++) rc = rn_stream_check(p, comms[i], is_send);
  if (rc == 0 && peer_sync(p, 60) != 0) rc = peer_fail(p, "peer gone");
  if (rc == 0 && rn_log_warns() != 0) {
    char w[256] = "";
    rn_log_first_warn("", w, sizeof w);
    rc = peer_fail(p, "%d WARN(s), first: %s", rn_log_warns(), w);
  }
  if (peer_close(p, NCOMMS, comms, NULL) != 0 && rc == 0) rc = -1;
  free(comms);
  free(lcomms);
  return rc;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("1..1\n");
  struct rn_pair_opts o = {.version = 11,
                           .timeout_s = 120,
                           .init = 1,
                           .seed = 11,
                           .env = "RAILNET_SOCKET_NSTREAMS=1,RAILNET_SOCKET_NTHREADS=0"};
  char why[512] = "";
  int rc = rn_run_pair(side, side, &o, why, sizeof why);
  tap_result(rc == 0,
             "%d comms on 60 listeners fit a 100-port range: connecting sockets "
             "share ports, every comm carries verified data, no WARN%s%s",
             NCOMMS, rc ? ": " : "", rc ? why : "");
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
