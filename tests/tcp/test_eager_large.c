/* An eager send above 8 KiB (RN_TCP_EAGER_MAX) leaves before its
 * clear-to-send but completes only once the sender has matched it: while
 * no receive is posted, a thousand test() calls all say "not done"; once
 * the receiver posts, the send completes and every byte lands.  Then one
 * that does not fit its receive fails in its own test(), and the
 * receiver's too.  The alarm (x RN_TIMEOUT_SCALE) only turns a hang into
 * a failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define BIG 40000     /* eager (<= 64 KiB), above 8 KiB */
#define SMALLER 20000 /* the receive the second send does not fit */
#define TESTS 1000

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
  int done = 0, early = 0;
  for (int i = 0; i < TESTS; i++) {
    RN_TAP_CHECK(2, n->test(rq, &done, NULL));
    early |= done;
    if (done) break;
  }
  if (write(q[1], "g", 1) != 1) return 1;
  while (!done) RN_TAP_CHECK(2, n->test(rq, &done, NULL));
  /* The sender's lines wait until the receiver has printed its own and
   * exited: TAP wants them in order. */
  char line2[200], line3[200];
  snprintf(line2, sizeof(line2),
           "%sok 2 - sender: a %d B eager send is not done before its receive is posted (%d "
           "tests), done after\n",
           early ? "not " : "", BIG, TESTS);
  rq = NULL, done = 0;
  while (rq == NULL) RN_TAP_CHECK(2, n->isend(sc, buf, BIG, 3, mh, &rq));
  ncclResult_t r = ncclSuccess;
  while (!done && r == ncclSuccess) r = n->test(rq, &done, NULL);
  snprintf(line3, sizeof(line3),
           "%sok 3 - sender: a %d B send into a %d B receive fails in its own test() (%d)\n",
           r == ncclInvalidUsage ? "" : "not ", BIG, SMALLER, r);
  if (write(q[1], "d", 1) != 1) return 1;
  int st = 0;
  waitpid(pid, &st, 0);
  fputs(line2, stdout);
  fputs(line3, stdout);
  n->closeSend(sc);
  return (!early && r == ncclInvalidUsage && WIFEXITED(st) && WEXITSTATUS(st) == 0) ? 0 : 1;
}
