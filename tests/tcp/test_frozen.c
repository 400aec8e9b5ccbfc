/* A receiver whose process stops (SIGSTOP, a debugger, a starved host) is
 * not a dead path: its host still acknowledges every byte and answers
 * TCP's window probes, and NCCL's own transports wait for it.  Two
 * processes, helper threads off (so a process that stops calling moves
 * nothing, as a stopped one), RAILNET_RAIL_TIMEOUT_MS=1000 (the lowest);
 * the pipe orders the steps, so no timing decides: the receiver posts 2
 * receives of 64 MiB, calls until the first message's bytes land, and
 * then calls nothing while the sender sends 2 x 64 MiB (more than the
 * sockets hold) and keeps testing: its bytes wait on the receiver's
 * closed window (a dead path would leave them unacknowledged), no send
 * may fail, and the sender tests until its INFO says, past the bound,
 * that it waits for a live receiver; then the receiver calls again.
 * Every message completes with every byte verified, no WARN, and one
 * such INFO.  (The previous build failed the send: "no rail progressed
 * for 1000 ms".)  The other way round, a sender stopped mid-message,
 * still fails its receiver after the bound (README: Per-rail failover). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define SIZE (64 << 20) /* more than the sockets of 4 streams hold */
#define NMSG 2

/* Test every request still open once; -1 on an error.  *left: how many. */
static int test_all(struct rn_peer *p, void **req, int *left, const char *when) {
  *left = 0;
  for (int k = 0; k < NMSG; k++) {
    if (req[k] == NULL) continue;
    int done = 0, size = 0;
    char what[96];
    snprintf(what, sizeof(what), "test of message %d %s", k, when);
    if (peer_check(p, rn_net_test(&p->net, req[k], &done, &size), what)) return -1;
    if (!done) {
      (*left)++;
      continue;
    }
    if (size != SIZE) return peer_fail(p, "message %d: %d bytes reported", k, size);
    req[k] = NULL;
  }
  return 0;
}

/* Keep testing until this side's INFO says it waits for a live peer
 * (the bound passed, and the peer's host answered); the requests need not
 * complete.  The previous build's test() failed instead. */
static int test_until_said(struct rn_peer *p, void **req, int said) {
  double end = rn_deadline(60);
  int left = 0;
  while (rn_log_seen(said) == 0 && now_s() < end) {
    if (test_all(p, req, &left, "while the peer called nothing") != 0) return -1;
    usleep(1000);
  }
  return rn_log_seen(said) > 0 ? 0 : peer_fail(p, "no INFO that it waits for a live peer");
}

/* Test until bytes of the first message landed: the receiver looks at
 * its buffer (zeroed before), tells the sender and calls nothing until
 * the sender, which tests until told, answers.  A message is larger than
 * every socket buffer between them together, so it is still incomplete
 * when the stopped side stops. */
static int wait_landed(struct rn_peer *p, void **req, const char *first) {
  double end = rn_deadline(60);
  int left = 0;
  char c;
  while (now_s() < end) {
    if (test_all(p, req, &left, "before the pause") != 0) return -1;
    if (p->role == RN_RECEIVER) {
      for (int i = 0; i < 64; i++)
        if (((volatile const char *)first)[i] != 0)
          return peer_write(p, "l", 1) != 0 || peer_read(p, &c, 1, 30) != 0 ? -1 : 0;
    } else {
      struct pollfd pf = {.fd = p->from_peer, .events = POLLIN};
      if (poll(&pf, 1, 0) == 1) return peer_read(p, &c, 1, 5) != 0 || peer_write(p, "k", 1);
    }
  }
  return peer_fail(p, "no byte of the first message landed");
}

static int finish(struct rn_peer *p, void **req, char **buf, uint64_t round) {
  double end = rn_deadline(60);
  int left = NMSG;
  while (left > 0 && now_s() < end)
    if (test_all(p, req, &left, "after the pause") != 0) return -1;
  if (left > 0)
    return peer_fail(p, "round %llu: %d messages never completed", (unsigned long long)round, left);
  for (int k = 0; k < NMSG && p->role == RN_RECEIVER; k++) {
    size_t bad =
        pattern_check(buf[k], SIZE, pattern_key(p->seed, round * NMSG + (uint64_t)k, SIZE));
    if (bad != (size_t)-1)
      return peer_fail(p, "round %llu message %d: wrong byte at %zu", (unsigned long long)round, k,
                       bad);
  }
  return 0;
}

static int side(struct rn_peer *p) {
  void *comm = NULL, *mh[NMSG] = {0}, *req[NMSG] = {0};
  char *buf[NMSG] = {0};
  int rc = -1;
  const int send = p->role == RN_SENDER;
  const int said = rn_log_watch("waiting for it, as NCCL's own transports do");
  for (int k = 0; k < NMSG; k++)
    if ((buf[k] = malloc(SIZE)) == NULL) {
      peer_fail(p, "out of memory");
      goto out;
    }
  if (peer_connect(p, 1, &comm, NULL, 30) != 0) goto out;
  for (int k = 0; k < NMSG; k++)
    if (peer_check(p, rn_net_regmr(&p->net, comm, buf[k], SIZE, NCCL_PTR_HOST, &mh[k]), "regMr"))
      goto out;
  {
    const uint64_t round = 0;
    const int stops = !send; /* the receiver's process stops */
    for (int k = 0; k < NMSG; k++) {
      if (send)
        pattern_fill(buf[k], SIZE, pattern_key(p->seed, round * NMSG + (uint64_t)k, SIZE));
      else
        memset(buf[k], 0, SIZE);
    }
    if (!send) {
      for (int k = 0; k < NMSG; k++)
        if (peer_post(p, comm, mh[k], buf[k], SIZE, k + 1, &req[k]) != 0) goto out;
      if (peer_write(p, "p", 1) != 0) goto out; /* posted */
    } else {
      char c;
      if (peer_read(p, &c, 1, 30) != 0) goto out;
      for (int k = 0; k < NMSG; k++)
        if (peer_post(p, comm, mh[k], buf[k], SIZE, k + 1, &req[k]) != 0) goto out;
    }
    /* Bytes of the first message land, then the stopped side calls
     * nothing until the other has waited past the bound and said so. */
    if (wait_landed(p, req, buf[0]) != 0) goto out;
    if (stops) {
      char c;
      if (peer_read(p, &c, 1, 60) != 0) {
        peer_fail(p, "the other side failed or never said it waits");
        goto out;
      }
    } else if (test_until_said(p, req, said) != 0 || peer_write(p, "w", 1) != 0) {
      goto out;
    }
    if (finish(p, req, buf, round) != 0) goto out;
  }
  if (rn_log_warns() != 0) {
    peer_fail(p, "a WARN: %s", rn_log_last_warn());
    goto out;
  }
  if (rn_log_seen(said) != send) {
    peer_fail(p, "%d INFO lines said it waits for a live peer, not %d", rn_log_seen(said), send);
    goto out;
  }
  rc = peer_sync(p, 30);
out:
  for (int k = 0; k < NMSG; k++)
    if (mh[k] != NULL) rn_net_deregmr(&p->net, comm, mh[k]);
  if (comm != NULL) peer_close(p, 1, &comm, NULL);
  for (int k = 0; k < NMSG; k++) free(buf[k]);
  return rc;
}

int main(void) {
  setenv("RAILNET_RAIL_TIMEOUT_MS", "1000", 1);
  setenv("RAILNET_SOCKET_LAZY", "0", 1); /* data streams from connect on */
  return rn_tap_socket_pair(
      side, 11,
      "a receiver that calls nothing past RAILNET_RAIL_TIMEOUT_MS (1 s) while 2 x 64 MiB come: "
      "its host answers, the sender waits (one INFO) instead of failing, every byte verified, "
      "no WARN");
}
