/* A caller that stops calling is not a stalled peer.  A streamed send on
 * a comm whose sends are acknowledged (RAILNET_RAIL_ACK=1) waits for the
 * receiver's ACK, and a sender owed one with every byte delivered fails
 * within RAILNET_RAIL_TIMEOUT_MS (1 s here).  Two processes, helper
 * threads off, so nothing reads while a caller is away; the pipe orders
 * the steps, so no timing decides:
 *   1. a first message crosses (data streams open from connect on);
 *   2. the receiver posts a receive and stops calling;
 *   3. the sender sends, and tests a few times 150 ms apart (its
 *      samples see the ACK owed, every byte out, the clock running);
 *   4. the receiver completes (the ACK leaves) and says so;
 *   5. the sender sleeps 2.5 s with the ACK unread in its socket, then
 *      tests: the send must complete, not fail as a receiver that
 *      stopped acknowledging would make it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define SIZE (32 << 10) /* streamed (RAILNET_SOCKET_INLINE=256), fits the socket buffers */

static int side(struct rn_peer *p) {
  void *comm = NULL, *mh = NULL, *req = NULL;
  char *buf = malloc(SIZE);
  int rc = -1, size = 0, done = 0;
  char step = 0;
  if (buf == NULL) return peer_fail(p, "out of memory");
  if (peer_connect(p, 1, &comm, NULL, 30) != 0) goto out;
  if (peer_check(p, rn_net_regmr(&p->net, comm, buf, SIZE, NCCL_PTR_HOST, &mh), "regMr")) goto out;
  const int send = p->role == RN_SENDER;
  for (int k = 0; k < 2; k++) {
    if (send) pattern_fill(buf, SIZE, pattern_key(p->seed, (uint64_t)k, SIZE));
    if (!send) {
      if (peer_post(p, comm, mh, buf, SIZE, k + 1, &req) != 0) goto out;
      if (k == 1 && (peer_write(p, "p", 1) != 0 || peer_read(p, &step, 1, 30) != 0)) goto out;
      if (peer_check(p, peer_wait(p, req, &size, 20), "test")) goto out;
      if (size != SIZE ||
          pattern_check(buf, SIZE, pattern_key(p->seed, (uint64_t)k, SIZE)) != (size_t)-1) {
        peer_fail(p, "message %d: %d bytes or wrong bytes", k, size);
        goto out;
      }
      if (k == 1 && peer_write(p, "r", 1) != 0) goto out;
      continue;
    }
    if (k == 0) {
      if (peer_post(p, comm, mh, buf, SIZE, k + 1, &req) != 0 ||
          peer_check(p, peer_wait(p, req, &size, 20), "test"))
        goto out;
      continue;
    }
    if (peer_read(p, &step, 1, 30) != 0 || peer_post(p, comm, mh, buf, SIZE, k + 1, &req) != 0)
      goto out;
    for (int i = 0; i < 4 && !done; i++) {
      usleep(150 * 1000);
      if (peer_check(p, rn_net_test(&p->net, req, &done, &size), "test")) goto out;
    }
    if (done) {
      peer_fail(p, "the send completed before the receiver tested its receive");
      goto out;
    }
    if (peer_write(p, "g", 1) != 0 || peer_read(p, &step, 1, 30) != 0) goto out;
    usleep(2500 * 1000);
    if (peer_check(p, peer_wait(p, req, &size, 20),
                   "test after 2.5 s away with the ACK unread (RAILNET_RAIL_TIMEOUT_MS=1000)"))
      goto out;
    if (size != SIZE) {
      peer_fail(p, "the send reported %d bytes", size);
      goto out;
    }
  }
  rc = peer_sync(p, 30);
out:
  if (mh != NULL) rn_net_deregmr(&p->net, comm, mh);
  if (comm != NULL) peer_close(p, 1, &comm, NULL);
  free(buf);
  return rc;
}

int main(void) {
  setenv("RAILNET_RAIL_ACK", "1", 1);
  setenv("RAILNET_RAIL_TIMEOUT_MS", "1000", 1);
  setenv("RAILNET_SOCKET_INLINE", "256", 1);
  setenv("RAILNET_SOCKET_LAZY", "0", 1); /* data streams from connect on */
  return rn_tap_socket_pair(
      side, 7,
      "a sender away for 2.5 s with its ACK unread in the socket completes its send on return, "
      "though RAILNET_RAIL_TIMEOUT_MS is 1 s");
}
