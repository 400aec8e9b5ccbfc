/* An eager send of up to 64 KiB (RN_TCP_EAGER_WIRE_MAX) leaves before its
 * clear-to-send and completes once written, as NCCL's socket transport's
 * sends do: it is done while no receive is posted yet, and every byte
 * lands once the receiver posts.  Then one that does not fit its receive
 * fails that receive, and the sender's comm: the sender's later calls
 * fail with ncclInvalidUsage.  The alarm (x RN_TIMEOUT_SCALE) only turns a
 * hang into a failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define BIG 40000     /* eager (<= 64 KiB) */
#define SMALLER 20000 /* the receive the second send does not fit */

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", "lo", 1);
  /* p: handle, receiver -> sender; q: "sent, tested", sender -> receiver */
  int p[2], q[2];
  if (pipe(p) != 0 || pipe(q) != 0) return 1;
  printf("1..3\n");
  pid_t pid = fork();
  alarm((unsigned)rn_bound_s(30));
  int me = pid == 0 ? 1 : 2;
  const ncclNet_v8_t *n = rn_load_v8(me);
  if (n == NULL) return 1;
  RN_TAP_CHECK(me, n->init(rn_logger));
  static unsigned char buf[BIG];
  if (pid == 0) { /* receiver */
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *rc = NULL, *mh = NULL, *rq = NULL, *d = buf;
    RN_TAP_CHECK(1, n->listen(0, handle, &lc));
    if (write(p[1], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 1;
    while (rc == NULL) RN_TAP_CHECK(1, n->accept(lc, &rc, NULL));
    RN_TAP_CHECK(1, n->regMr(rc, buf, sizeof(buf), NCCL_PTR_HOST, &mh));
    char go;
    if (read(q[0], &go, 1) != 1 || go != 'g')
      return rn_tap_call_failed(1, "the sender's first send", go);
    int sz = BIG, tag = 3, done = 0, got = -1;
    while (rq == NULL) RN_TAP_CHECK(1, n->irecv(rc, 1, &d, &sz, &tag, &mh, &rq));
    while (!done) RN_TAP_CHECK(1, n->test(rq, &done, &got));
    int bad = got != BIG;
    for (int i = 0; i < BIG && !bad; i++) bad = buf[i] != (unsigned char)(i * 7 + 1);
    printf("%sok 1 - receiver: %d bytes of %d, every byte as sent\n", bad ? "not " : "", got, BIG);
    sz = SMALLER, rq = NULL, done = 0;
    while (rq == NULL) RN_TAP_CHECK(1, n->irecv(rc, 1, &d, &sz, &tag, &mh, &rq));
    ncclResult_t r = ncclSuccess;
    while (!done && r == ncclSuccess) r = n->test(rq, &done, &got);
    if (r != ncclInvalidUsage) bad = 1, printf("# receiver: the oversized send gave %d\n", r);
    if (read(q[0], &go, 1) != 1) bad = 1; /* the sender is done with the comm */
    return bad;
  }
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (read(p[0], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 1;
  void *sc = NULL, *mh = NULL, *rq = NULL;
  while (sc == NULL) RN_TAP_CHECK(2, n->connect(0, handle, &sc, NULL));
  RN_TAP_CHECK(2, n->regMr(sc, buf, sizeof(buf), NCCL_PTR_HOST, &mh));
  for (int i = 0; i < BIG; i++) buf[i] = (unsigned char)(i * 7 + 1);
  while (rq == NULL) RN_TAP_CHECK(2, n->isend(sc, buf, BIG, 3, mh, &rq));
  /* The receiver posts only once told: the send completes without it. */
  int done = 0;
  while (!done) RN_TAP_CHECK(2, n->test(rq, &done, NULL));
  if (write(q[1], "g", 1) != 1) return 1;
  /* The sender's lines wait until the receiver has printed its own and
   * exited: TAP wants them in order. */
  char line2[200], line3[240];
  snprintf(line2, sizeof(line2),
           "ok 2 - sender: a %d B eager send is done before its receive is posted\n", BIG);
  rq = NULL, done = 0;
  while (rq == NULL) RN_TAP_CHECK(2, n->isend(sc, buf, BIG, 3, mh, &rq));
  ncclResult_t r = ncclSuccess;
  while (!done && r == ncclSuccess) r = n->test(rq, &done, NULL);
  /* Done once written too; the receiver fails its receive and tells the
   * sender with that receive's clear-to-send: a later send fails. */
  int later = 0;
  while (r == ncclSuccess) {
    rq = NULL, done = 0;
    while (rq == NULL && r == ncclSuccess) r = n->isend(sc, buf, 8, 3, mh, &rq);
    while (!done && r == ncclSuccess) r = n->test(rq, &done, NULL);
    later += r == ncclSuccess;
  }
  snprintf(line3, sizeof(line3),
           "%sok 3 - sender: after a %d B send into a %d B receive the comm fails with "
           "ncclInvalidUsage (%d; %d later sends done first)\n",
           r == ncclInvalidUsage ? "" : "not ", BIG, SMALLER, r, later);
  if (write(q[1], "d", 1) != 1) return 1;
  int st = 0;
  waitpid(pid, &st, 0);
  fputs(line2, stdout);
  fputs(line3, stdout);
  n->closeSend(sc);
  return (r == ncclInvalidUsage && WIFEXITED(st) && WEXITSTATUS(st) == 0) ? 0 : 1;
}
