/* Clear-to-sends of small receives wait for a batch (PROTOCOL.md, CTS):
 * a sender out of eager credit must still get them.  The sender sends
 * small tag-1 messages before any receive is posted until isend says
 * "retry later" (its eager window is full), then one tag-2 message.  The
 * receiver takes two tag-1 messages, then waits for the tag-2 one with
 * fewer receives posted than a batch: only its own test() calls can send
 * the clear-to-sends that let the tag-2 send leave.  Then the rest of the
 * tag-1 messages, every byte checked.  The alarm (x RN_TIMEOUT_SCALE) only
 * turns a hang into a failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define MAXMSG 512 /* more than any eager window */

/* Receive one 8-byte message of `tag` and check it reads `want`. */
static int recv_one(const ncclNet_v8_t *n, void *rc, void *mh, int tag, unsigned want) {
  static unsigned got;
  void *d = &got, *rq = NULL;
  int sz = 8, done = 0, len = -1;
  got = ~want;
  while (rq == NULL) RN_TAP_CHECK(1, n->irecv(rc, 1, &d, &sz, &tag, &mh, &rq));
  while (!done) RN_TAP_CHECK(1, n->test(rq, &done, &len));
  if (len != (int)sizeof(got) || got != want) {
    printf("not ok 1 - tag %d: %d bytes reading %u, expected 4 reading %u\n", tag, len, got, want);
    return 1;
  }
  return 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", "lo", 1);
  int p[2], q[2];
  if (pipe(p) != 0 || pipe(q) != 0) return 1;
  printf("1..2\n");
  pid_t pid = fork();
  alarm((unsigned)rn_bound_s(30)); /* nothing here may hang */
  int me = pid == 0 ? 1 : 2;
  const ncclNet_v8_t *n = rn_load_v8(me);
  if (n == NULL) return 1;
  RN_TAP_CHECK(me, n->init(rn_logger));
  static unsigned buf[MAXMSG + 1];
  if (pid == 0) { /* receiver */
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *rc = NULL, *mh = NULL;
    RN_TAP_CHECK(1, n->listen(0, handle, &lc));
    if (write(p[1], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 1;
    while (rc == NULL) RN_TAP_CHECK(1, n->accept(lc, &rc, NULL));
    static unsigned rbuf;
    RN_TAP_CHECK(1, n->regMr(rc, &rbuf, sizeof(rbuf), NCCL_PTR_HOST, &mh));
    int k = 0;
    if (read(q[0], &k, sizeof(k)) != (ssize_t)sizeof(k) || k < 3 || k > MAXMSG)
      return rn_tap_call_failed(1, "the sender's count of tag-1 messages", k);
    int bad =
        recv_one(n, rc, mh, 1, 0) || recv_one(n, rc, mh, 1, 1) || recv_one(n, rc, mh, 2, MAXMSG);
    for (int i = 2; i < k && !bad; i++) bad = recv_one(n, rc, mh, 1, (unsigned)i);
    if (bad) return 1;
    printf("ok 1 - receiver: 2 tag-1 messages, the tag-2 one, then %d more tag-1, in order\n",
           k - 2);
    RN_TAP_CHECK(1, n->deregMr(rc, mh));
    RN_TAP_CHECK(1, n->closeRecv(rc));
    RN_TAP_CHECK(1, n->closeListen(lc));
    return 0;
  }
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (read(p[0], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 1;
  void *sc = NULL, *mh = NULL, *rq = NULL;
  while (sc == NULL) RN_TAP_CHECK(2, n->connect(0, handle, &sc, NULL));
  RN_TAP_CHECK(2, n->regMr(sc, buf, sizeof(buf), NCCL_PTR_HOST, &mh));
  int k = 0, done = 0;
  for (; k < MAXMSG; k++) { /* tag 1 until the window is full */
    buf[k] = (unsigned)k;
    rq = NULL;
    RN_TAP_CHECK(2, n->isend(sc, &buf[k], sizeof(unsigned), 1, mh, &rq));
    if (rq == NULL) break;
    for (done = 0; !done;) RN_TAP_CHECK(2, n->test(rq, &done, NULL));
  }
  if (write(q[1], &k, sizeof(k)) != (ssize_t)sizeof(k)) return 1;
  buf[MAXMSG] = MAXMSG;
  rq = NULL;
  long nulls = 0;
  while (rq == NULL) {
    RN_TAP_CHECK(2, n->isend(sc, &buf[MAXMSG], sizeof(unsigned), 2, mh, &rq));
    nulls += rq == NULL;
  }
  for (done = 0; !done;) RN_TAP_CHECK(2, n->test(rq, &done, NULL));
  int st = 0;
  waitpid(pid, &st, 0);
  int ok = k >= 3 && k < MAXMSG && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  printf(
      "%sok 2 - sender: %d tag-1 messages before the window filled, then the tag-2 one left "
      "(after %ld retries)\n",
      ok ? "" : "not ", k, nulls);
  RN_TAP_CHECK(2, n->deregMr(sc, mh));
  RN_TAP_CHECK(2, n->closeSend(sc));
  return ok ? 0 : 1;
}
