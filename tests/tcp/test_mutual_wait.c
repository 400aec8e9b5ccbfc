/* Two processes, each with a send comm to the other and a receive comm
 * from it, as two ranks of a ring of two have.  After small messages both
 * ways (so each receiver holds its clear-to-sends back for a batch, as it
 * does while the sender does well without them), each side posts a 1 MiB
 * receive and then a 1 MiB send, too large to go eagerly, and waits on
 * that send alone: retrying isend until it is posted, then testing only
 * it, and the receive only after.  Each send needs the clear-to-send of
 * the other side's receive, which nothing but that side's own calls can
 * send; a process whose calls keep finding nothing to do must send the
 * clear-to-sends it deferred, or both wait for ever.  Every byte checked;
 * helper threads off, so the calls of each process are all its progress. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/rn_test.h"

#define NSMALL 20
#define SMALL 4096
#define BIG (1 << 20)

static int side(struct rn_peer *p) {
  void *lc = NULL, *sc = NULL, *rc = NULL, *smh = NULL, *rmh = NULL;
  char *sbuf = malloc(BIG), *rbuf = malloc(BIG);
  int rc_ = -1, me = p->role, size = 0;
  if (sbuf == NULL || rbuf == NULL) {
    peer_fail(p, "out of memory");
    goto out;
  }
  if (peer_both_ways(p, &lc, &sc, &rc, 30) != 0) goto out;
  if (peer_check(p, rn_net_regmr(&p->net, sc, sbuf, BIG, NCCL_PTR_HOST, &smh), "regMr") ||
      peer_check(p, rn_net_regmr(&p->net, rc, rbuf, BIG, NCCL_PTR_HOST, &rmh), "regMr"))
    goto out;
  /* 1. Small messages both ways into 1 MiB receives (NCCL posts whole
   * step buffers): they go eagerly, without CREDIT. */
  for (int k = 0; k < NSMALL; k++) {
    void *rq = NULL, *sq = NULL;
    int tag = k + 1;
    size_t sz = BIG;
    pattern_fill(sbuf, SMALL, pattern_key(p->seed + (uint64_t)me, (uint64_t)k, SMALL));
    double end = rn_deadline(20);
    while (rq == NULL && now_s() < end)
      if (peer_check(p, rn_net_irecv(&p->net, rc, 1, (void **)&rbuf, &sz, &tag, &rmh, &rq),
                     "irecv"))
        goto out;
    while (sq == NULL && now_s() < end)
      if (peer_check(p, rn_net_isend(&p->net, sc, sbuf, SMALL, tag, smh, &sq), "isend")) goto out;
    if (rq == NULL || sq == NULL) {
      peer_fail(p, "small message %d not posted", k);
      goto out;
    }
    if (peer_check(p, peer_wait(p, sq, &size, 20), "test send") ||
        peer_check(p, peer_wait(p, rq, &size, 20), "test recv"))
      goto out;
    if (size != SMALL ||
        pattern_check(rbuf, SMALL, pattern_key(p->seed + (uint64_t)!me, (uint64_t)k, SMALL)) !=
            (size_t)-1) {
      peer_fail(p, "small message %d: %d bytes or wrong bytes", k, size);
      goto out;
    }
  }
  if (peer_sync(p, 30) != 0) goto out;
  /* 2. A 1 MiB receive, then a 1 MiB send waited on alone. */
  void *rq = NULL, *sq = NULL;
  int tag = 100;
  size_t sz = BIG;
  memset(rbuf, 0, BIG);
  pattern_fill(sbuf, BIG, pattern_key(p->seed + (uint64_t)me, 999, BIG));
  double end = rn_deadline(20);
  while (rq == NULL && now_s() < end)
    if (peer_check(p, rn_net_irecv(&p->net, rc, 1, (void **)&rbuf, &sz, &tag, &rmh, &rq), "irecv"))
      goto out;
  while (sq == NULL && now_s() < end)
    if (peer_check(p, rn_net_isend(&p->net, sc, sbuf, BIG, tag, smh, &sq), "isend")) goto out;
  if (rq == NULL || sq == NULL) {
    peer_fail(p, "the 1 MiB %s was never posted: each side waits for the other's clear-to-send",
              rq == NULL ? "receive" : "send");
    goto out;
  }
  if (peer_check(p, peer_wait(p, sq, &size, 20), "test of the 1 MiB send alone") ||
      peer_check(p, peer_wait(p, rq, &size, 20), "test of the 1 MiB receive"))
    goto out;
  if (size != BIG ||
      pattern_check(rbuf, BIG, pattern_key(p->seed + (uint64_t)!me, 999, BIG)) != (size_t)-1) {
    peer_fail(p, "the 1 MiB message: %d bytes or wrong bytes", size);
    goto out;
  }
  rc_ = peer_sync(p, 30);
out:
  peer_both_ways_close(p, lc, sc, rc, smh, rmh);
  free(sbuf);
  free(rbuf);
  return rc_;
}

int main(void) {
  return rn_tap_socket_pair(side, 9,
                            "two processes each post a 1 MiB receive, then a 1 MiB send they wait "
                            "on alone: each sends the clear-to-send the other needs, and both "
                            "land intact");
}
