/* A caller that waits on one request while another comm's request must
 * move first.  Two processes, each with a send comm to the other and a
 * receive comm from it; each posts a receive and a send of SIZE bytes,
 * then tests only its receive until it completes, and only then its send,
 * as MPI-style code does (Irecv, Isend, Wait on the receive, Wait on the
 * send).  The sends are larger than the sockets take at once, and without
 * helper threads (RAILNET_SOCKET_NTHREADS=0, as on small hosts) only calls
 * move them: the send comms must move while their callers test the
 * receive comms, or both wait for ever.  Once with 4 MiB (inline on the
 * control connection while the data streams open) and once with 32 MiB
 * (chunks on the data streams); every byte checked.  The bound only turns
 * a hang into a failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/rn_test.h"

static int one_size(struct rn_peer *p, size_t size, int round) {
  void *lc = NULL, *sc = NULL, *rc = NULL, *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL;
  char *sbuf = malloc(size), *rbuf = calloc(1, size);
  int ret = -1, got = 0;
  const uint64_t mine = pattern_key(p->seed, (uint64_t)(2 * round + p->role), size),
                 theirs = pattern_key(p->seed, (uint64_t)(2 * round + 1 - p->role), size);
  if (sbuf == NULL || rbuf == NULL) {
    peer_fail(p, "out of memory");
    goto out;
  }
  pattern_fill(sbuf, size, mine);
  if (peer_both_ways(p, &lc, &sc, &rc, 30) != 0) goto out;
  if (peer_check(p, rn_net_regmr(&p->net, sc, sbuf, size, NCCL_PTR_HOST, &smh), "regMr") ||
      peer_check(p, rn_net_regmr(&p->net, rc, rbuf, size, NCCL_PTR_HOST, &rmh), "regMr"))
    goto out;
  double end = rn_deadline(20);
  int tag = 1;
  while (rreq == NULL && now_s() < end) {
    void *d = rbuf;
    if (peer_check(p, rn_net_irecv(&p->net, rc, 1, &d, &size, &tag, &rmh, &rreq), "irecv"))
      goto out;
  }
  /* The send: isend may say "later" until the peer's clear-to-send is
   * here, which only the peer's calls on its receive comm send. */
  while (sreq == NULL && rreq != NULL && now_s() < end)
    if (peer_check(p, rn_net_isend(&p->net, sc, sbuf, size, 1, smh, &sreq), "isend")) goto out;
  if (rreq == NULL || sreq == NULL) {
    peer_fail(p, "%zu B: receive or send not posted", size);
    goto out;
  }
  /* Only the receive, until it is done. */
  if (peer_check(p, peer_wait(p, rreq, &got, 30), "test (the receive, alone)")) goto out;
  if (got != (int)size || pattern_check(rbuf, size, theirs) != (size_t)-1) {
    peer_fail(p, "%zu B: %d bytes or wrong bytes", size, got);
    goto out;
  }
  if (peer_check(p, peer_wait(p, sreq, NULL, 30), "test (the send, after)")) goto out;
  ret = peer_sync(p, 30);
out:
  peer_both_ways_close(p, lc, sc, rc, smh, rmh);
  free(sbuf);
  free(rbuf);
  return ret;
}

static int side(struct rn_peer *p) {
  if (one_size(p, (size_t)4 << 20, 0) != 0) return -1;
  return one_size(p, (size_t)32 << 20, 1);
}

int main(void) {
  return rn_tap_socket_pair(side, 11,
                            "each side tests only its receive, then its send (4 MiB and 32 MiB "
                            "both ways, no helper threads): both complete, every byte intact");
}
