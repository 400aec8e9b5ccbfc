/* A sender that needs a clear-to-send the receiver holds back for a batch
 * asks for it (WANT, PROTOCOL.md), and gets it from the receiver's next
 * progress, however few.  Two processes.  The sender first sends small
 * messages eagerly (so the receiver batches its clear-to-sends, as it
 * does while the sender does well without them); the receiver posts one
 * more receive of 1 MiB, and the sender's 1 MiB send (too large to go
 * eagerly) cannot leave.  The receiver then calls test() three times and
 * stops: without the sender's WANT those three calls would keep the
 * clear-to-send back, and the send would never leave.  Every byte checked;
 * the pipe between the processes orders the steps, so no timing decides. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/rn_test.h"

#define NSMALL 20
#define SMALL 4096
#define BIG (1 << 20)

static int side(struct rn_peer *p) {
  void *comm = NULL, *mh = NULL;
  char *buf = malloc(BIG);
  int rc = -1;
  if (buf == NULL) return peer_fail(p, "out of memory");
  if (peer_connect(p, 1, &comm, NULL, 30) != 0) goto out;
  if (peer_check(p, rn_net_regmr(&p->net, comm, buf, BIG, NCCL_PTR_HOST, &mh), "regMr")) goto out;
  const int send = p->role == RN_SENDER;
  /* 1. Small messages, each its own tag (1..NSMALL), posted receives of
   * 1 MiB as NCCL posts whole step buffers. */
  for (int k = 0; k < NSMALL; k++) {
    void *req = NULL;
    int tag = k + 1, size = 0;
    size_t sz = send ? SMALL : BIG;
    double end = rn_deadline(20);
    if (send) pattern_fill(buf, SMALL, pattern_key(p->seed, (uint64_t)k, SMALL));
    while (req == NULL && now_s() < end) {
      ncclResult_t r = send ? rn_net_isend(&p->net, comm, buf, SMALL, tag, mh, &req)
                            : rn_net_irecv(&p->net, comm, 1, (void **)&buf, &sz, &tag, &mh, &req);
      if (peer_check(p, r, send ? "isend" : "irecv")) goto out;
    }
    if (req == NULL) {
      peer_fail(p, "message %d not posted", k);
      goto out;
    }
    if (peer_check(p, peer_wait(p, req, &size, 20), "test")) goto out;
    if (!send &&
        (size != SMALL ||
         pattern_check(buf, SMALL, pattern_key(p->seed, (uint64_t)k, SMALL)) != (size_t)-1)) {
      peer_fail(p, "small message %d: %d bytes or wrong bytes", k, size);
      goto out;
    }
  }
  char step = 0;
  void *req = NULL;
  int tag = 100, size = 0;
  if (!send) {
    /* 2. One more receive, its clear-to-send held back for a batch. */
    size_t sz = BIG;
    memset(buf, 0, BIG);
    double end = rn_deadline(20);
    while (req == NULL && now_s() < end)
      if (peer_check(p, rn_net_irecv(&p->net, comm, 1, (void **)&buf, &sz, &tag, &mh, &req),
                     "irecv"))
        goto out;
    if (req == NULL || peer_write(p, "p", 1) != 0 || peer_read(p, &step, 1, 30) != 0) goto out;
    /* 4. The sender has asked: three calls, then wait for its word. */
    for (int k = 0; k < 3; k++) {
      int done = 0;
      if (peer_check(p, rn_net_test(&p->net, req, &done, &size), "test")) goto out;
    }
    if (peer_write(p, "t", 1) != 0 || peer_read(p, &step, 1, 30) != 0) goto out;
    if (step != 's') {
      peer_fail(p, "the sender's 1 MiB send never left");
      goto out;
    }
    if (peer_check(p, peer_wait(p, req, &size, 20), "test")) goto out;
    if (size != BIG || pattern_check(buf, BIG, pattern_key(p->seed, 999, BIG)) != (size_t)-1) {
      peer_fail(p, "the 1 MiB message: %d bytes or wrong bytes", size);
      goto out;
    }
  } else {
    /* 3. The 1 MiB send cannot leave yet; asking is its first attempt's job. */
    pattern_fill(buf, BIG, pattern_key(p->seed, 999, BIG));
    if (peer_read(p, &step, 1, 30) != 0) goto out;
    for (int k = 0; k < 20 && req == NULL; k++)
      if (peer_check(p, rn_net_isend(&p->net, comm, buf, BIG, tag, mh, &req), "isend")) goto out;
    if (req != NULL) {
      peer_fail(p,
                "the 1 MiB send left before the receiver progressed (its clear-to-send was "
                "not held back: nothing tested here)");
      goto out;
    }
    if (peer_write(p, "b", 1) != 0 || peer_read(p, &step, 1, 30) != 0) goto out;
    /* 5. Its clear-to-send is on its way now. */
    double end = rn_deadline(20);
    while (req == NULL && now_s() < end)
      if (peer_check(p, rn_net_isend(&p->net, comm, buf, BIG, tag, mh, &req), "isend")) goto out;
    if (peer_write(p, req != NULL ? "s" : "n", 1) != 0) goto out;
    if (req == NULL) {
      peer_fail(p, "the 1 MiB send never left");
      goto out;
    }
    if (peer_check(p, peer_wait(p, req, &size, 20), "test")) goto out;
  }
  rc = peer_sync(p, 30);
out:
  if (mh != NULL) rn_net_deregmr(&p->net, comm, mh);
  if (comm != NULL) peer_close(p, 1, &comm, NULL);
  free(buf);
  return rc;
}

int main(void) {
  return rn_tap_socket_pair(
      side, 5,
      "after small eager messages, a 1 MiB send whose clear-to-send the receiver holds back for "
      "a batch asks for it, gets it from three test() calls, and lands intact");
}
