/* The data streams open at a comm's first large message (OPEN, then the
 * receiver's answer).  A receiver whose process stops before it answers
 * (stopped, in a debugger, starved) still has a host that acknowledged
 * the OPEN: the sender waits for it past RAILNET_CONNECT_TIMEOUT_MS (at
 * its lowest, 100 ms here), saying so once in an INFO, instead of failing
 * the comm.  Two processes, helper threads off (a receiver that calls
 * nothing answers nothing); the pipe orders the steps, so no timing
 * decides:
 *   1. the receiver posts a receive of 64 MiB and calls nothing more;
 *   2. the sender sends 64 MiB (above RAILNET_SOCKET_INLINE: the streams
 *      open) and tests until its INFO says it waits for the receiver;
 *   3. the receiver calls again: the message lands, every byte verified,
 *      no WARN on either side.
 * (The previous build failed the send: "the receiver did not answer its
 * OPEN within 100 ms".) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define SIZE (64 << 20) /* more than the control connection's sockets hold */

static int side(struct rn_peer *p) {
  void *comm = NULL, *mh = NULL, *req = NULL;
  char *buf = malloc(SIZE);
  int rc = -1, size = 0;
  char c;
  const int said = rn_log_watch("took its OPEN");
  if (buf == NULL) return peer_fail(p, "out of memory");
  if (peer_connect(p, 1, &comm, NULL, 30) != 0) goto out;
  if (peer_check(p, rn_net_regmr(&p->net, comm, buf, SIZE, NCCL_PTR_HOST, &mh), "regMr")) goto out;
  if (p->role == RN_RECEIVER) {
    memset(buf, 0, SIZE);
    if (peer_post(p, comm, mh, buf, SIZE, 1, &req) != 0 || peer_write(p, "p", 1) != 0) goto out;
    if (peer_read(p, &c, 1, 60) != 0) {
      peer_fail(p, "the sender failed or never said it waits");
      goto out;
    }
    if (peer_check(p, peer_wait(p, req, &size, 30), "test after the stop")) goto out;
    if (size != SIZE || pattern_check(buf, SIZE, pattern_key(p->seed, 0, SIZE)) != (size_t)-1) {
      peer_fail(p, "%d bytes, or wrong bytes", size);
      goto out;
    }
  } else {
    pattern_fill(buf, SIZE, pattern_key(p->seed, 0, SIZE));
    if (peer_read(p, &c, 1, 30) != 0 || peer_post(p, comm, mh, buf, SIZE, 1, &req) != 0) goto out;
    double end = rn_deadline(60);
    int done = 0;
    while (rn_log_seen(said) == 0 && !done && now_s() < end) {
      if (peer_check(p, rn_net_test(&p->net, req, &done, &size),
                     "test while the receiver called nothing"))
        goto out;
      usleep(1000);
    }
    if (rn_log_seen(said) != 1) {
      peer_fail(p, "%s, and %d INFO lines said it waits for the receiver",
                done ? "the send completed though the receiver called nothing" : "no end",
                rn_log_seen(said));
      goto out;
    }
    if (peer_write(p, "w", 1) != 0) goto out;
    if (peer_check(p, peer_wait(p, req, &size, 30), "test after the stop")) goto out;
  }
  req = NULL;
  if (rn_log_warns() != 0) {
    peer_fail(p, "a WARN: %s", rn_log_last_warn());
    goto out;
  }
  rc = peer_sync(p, 30);
out:
  if (mh != NULL) rn_net_deregmr(&p->net, comm, mh);
  if (comm != NULL) peer_close(p, 1, &comm, NULL);
  free(buf);
  return rc;
}

int main(void) {
  setenv("RAILNET_CONNECT_TIMEOUT_MS", "100", 1);
  return rn_tap_socket_pair(
      side, 13,
      "a receiver that calls nothing after its OPEN arrived, past RAILNET_CONNECT_TIMEOUT_MS "
      "(100 ms): the sender waits (one INFO) instead of failing, 64 MiB verified, no WARN");
}
