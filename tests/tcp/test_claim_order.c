/* Messages of one tag that reach the receiver out of send order over
 * different connections still fill the buffers the matching rule gives
 * (PROTOCOL.md, Ranks and claim numbers).  With the data streams open
 * from connect (RAILNET_SOCKET_LAZY=0), a streamed message has no header
 * on the control connection: its chunks claim its buffer.  The sender
 * writes a streamed message and then a small one of the same tag, both
 * completely, before the receiver makes any call; the receiver's first
 * progress reads the control connection before the data streams (nothing
 * is announced on them), so the small message arrives first:
 *   1. a streamed message alone (its chunks claim the buffer);
 *   2. a grouped receive of two buffers of one tag: the second send's
 *      inline header names the second buffer before the first send's
 *      chunks claim the first;
 *   3. an eager message (its buffer not posted when it was sent) behind a
 *      streamed one: it fills the buffer of its rank, posted before it is
 *      read, not the first free buffer of its tag;
 *   4. as 3, with its buffer posted only after it arrived: it is held
 *      until then.
 * Every byte and size is checked.  The alarm (x RN_TIMEOUT_SCALE) only
 * turns a hang into a failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../common/rn_test.h"

#define BIG (256 * 1024)
#define SMALL 4096
#define TAG 7

static unsigned char sbig[BIG], ssmall[SMALL];
static unsigned char rarena[4 * BIG + 4 * SMALL];

static void fill(unsigned char *b, int n, int seed) {
  for (int i = 0; i < n; i++) b[i] = (unsigned char)(i * 13 + seed * 7 + 1);
}

static int same(const unsigned char *b, int n, int seed) {
  for (int i = 0; i < n; i++)
    if (b[i] != (unsigned char)(i * 13 + seed * 7 + 1)) return 0;
  return 1;
}

static int wait_for(int fd, char want) {
  char c = 0;
  return read(fd, &c, 1) == 1 && c == want;
}

static int tell(int fd, char c) { return write(fd, &c, 1) == 1; }

/* Sender: after the receiver's go, a send of `big` bytes (seed sb) and
 * then one of `small` bytes (seed ss), both of TAG, each done. */
static int send_pair(const ncclNet_v8_t *n, void *sc, void *mh, int big, int sb, int small,
                     int ss) {
  void *r1 = NULL, *r2 = NULL;
  fill(sbig, big, sb);
  while (r1 == NULL) RN_TAP_CHECK(2, n->isend(sc, sbig, big, TAG, mh, &r1));
  if (small >= 0) {
    fill(ssmall, small, ss);
    while (r2 == NULL) RN_TAP_CHECK(2, n->isend(sc, ssmall, small, TAG, mh, &r2));
  }
  int d1 = 0, d2 = small < 0;
  while (!d1 || !d2) {
    if (!d1) RN_TAP_CHECK(2, n->test(r1, &d1, NULL));
    if (!d2) RN_TAP_CHECK(2, n->test(r2, &d2, NULL));
  }
  return 0;
}

static int sender(const ncclNet_v8_t *n, int hfd, int go, int sent) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  if (read(hfd, handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 1;
  void *sc = NULL, *mh = NULL, *mh2 = NULL;
  while (sc == NULL) RN_TAP_CHECK(2, n->connect(0, handle, &sc, NULL));
  RN_TAP_CHECK(2, n->regMr(sc, sbig, sizeof(sbig), NCCL_PTR_HOST, &mh));
  RN_TAP_CHECK(2, n->regMr(sc, ssmall, sizeof(ssmall), NCCL_PTR_HOST, &mh2));
  (void)mh2;
  static const int small_of[4] = {-1, 2000, 1000, 1500};
  for (int k = 0; k < 4; k++) {
    if (!wait_for(go, 'p')) return 1;
    if (send_pair(n, sc, mh, BIG - k * 4096, 10 + k, small_of[k], 20 + k) != 0) return 1;
    if (!tell(sent, 's')) return 1;
  }
  if (!wait_for(go, 'e')) return 1; /* the receiver is done with the comm */
  n->closeSend(sc);
  return 0;
}

static void *post(const ncclNet_v8_t *n, void *rc, void *mh, int nb, unsigned char **b,
                  const int *sz) {
  void *rq = NULL, *d[2] = {b[0], nb > 1 ? b[1] : NULL};
  int size[2] = {sz[0], nb > 1 ? sz[1] : 0}, tags[2] = {TAG, TAG};
  void *mhs[2] = {mh, mh};
  while (rq == NULL)
    if (n->irecv(rc, nb, d, size, tags, mhs, &rq) != ncclSuccess) return NULL;
  return rq;
}

static int complete(const ncclNet_v8_t *n, void *rq, int *sizes) {
  int done = 0;
  while (!done)
    if (n->test(rq, &done, sizes) != ncclSuccess) return 0;
  return 1;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  setenv("RAILNET_TRANSPORT", "socket", 1);
  setenv("RAILNET_SOCKET_IFNAME", "lo", 1);
  setenv("RAILNET_SOCKET_LAZY", "0", 1);
  setenv("RAILNET_SOCKET_NTHREADS", "0", 1); /* the caller reads: the order above holds */
  int hp[2], go[2], sent[2];
  if (pipe(hp) != 0 || pipe(go) != 0 || pipe(sent) != 0) return 1;
  printf("1..5\n");
  pid_t pid = fork();
  alarm((unsigned)rn_bound_s(60));
  const ncclNet_v8_t *n = rn_load_v8(pid == 0 ? 2 : 1);
  if (n == NULL) return 1;
  RN_TAP_CHECK(pid == 0 ? 2 : 1, n->init(rn_logger));
  if (pid == 0) {
    close(hp[1]), close(go[1]), close(sent[0]); /* a side that dies gives the other EOF */
    return sender(n, hp[0], go[0], sent[1]);
  }
  close(hp[0]), close(go[0]), close(sent[1]);

  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL, *rc = NULL, *mh = NULL;
  RN_TAP_CHECK(1, n->listen(0, handle, &lc));
  if (write(hp[1], handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 1;
  while (rc == NULL) RN_TAP_CHECK(1, n->accept(lc, &rc, NULL));
  RN_TAP_CHECK(1, n->regMr(rc, rarena, sizeof(rarena), NCCL_PTR_HOST, &mh));
  unsigned char *big[4], *small[4];
  for (int k = 0; k < 4; k++) {
    big[k] = rarena + (size_t)k * BIG;
    small[k] = rarena + 4 * (size_t)BIG + (size_t)k * SMALL;
  }
  int fails = 0, got[2] = {-1, -1};
  const int bigsz = BIG, smallsz = SMALL;

  /* 1: one streamed message */
  void *w = post(n, rc, mh, 1, &big[0], &bigsz);
  int ok = w != NULL && tell(go[1], 'p') && wait_for(sent[0], 's') && complete(n, w, got);
  ok = ok && got[0] == BIG && same(big[0], BIG, 10);
  fails += !ok;
  printf("%sok 1 - a streamed message's chunks claim its buffer: %d bytes as sent\n", ok ? "" : "not ",
         got[0]);

  /* 2: a grouped receive of two buffers of TAG */
  unsigned char *pair[2] = {big[1], small[1]};
  const int pairsz[2] = {BIG, SMALL};
  void *g = post(n, rc, mh, 2, pair, pairsz);
  got[0] = got[1] = -1;
  ok = g != NULL && tell(go[1], 'p') && wait_for(sent[0], 's') && complete(n, g, got);
  ok = ok && got[0] == BIG - 4096 && got[1] == 2000 && same(big[1], BIG - 4096, 11) &&
       same(small[1], 2000, 21);
  fails += !ok;
  printf("%sok 2 - the second buffer's inline message arrives before the first's chunks: sizes "
         "%d and %d, every byte in its own buffer\n",
         ok ? "" : "not ", got[0], got[1]);

  /* 3: an eager message behind a streamed one, its buffer posted before
   * it is read; 4: posted only once it arrived (held until then) */
  static const char *const what[2] = {
      "an eager message read before the streamed one sent ahead of it fills the buffer of its "
      "rank",
      "an eager message whose buffer is posted after it arrived is held, then fills it"};
  for (int k = 2; k < 4; k++) {
    const int early = k == 2, bsz = BIG - k * 4096, ssz = k == 2 ? 1000 : 1500;
    int gs[2] = {-1, -1};
    got[0] = -1;
    void *c = post(n, rc, mh, 1, &big[k], &bigsz), *d = NULL;
    ok = c != NULL && tell(go[1], 'p') && wait_for(sent[0], 's');
    if (ok && early) ok = (d = post(n, rc, mh, 1, &small[k], &smallsz)) != NULL;
    ok = ok && complete(n, c, got);
    if (ok && !early) ok = (d = post(n, rc, mh, 1, &small[k], &smallsz)) != NULL;
    ok = ok && complete(n, d, gs);
    ok = ok && got[0] == bsz && gs[0] == ssz && same(big[k], bsz, 10 + k) &&
         same(small[k], ssz, 20 + k);
    fails += !ok;
    printf("%sok %d - %s: sizes %d and %d, every byte as sent\n", ok ? "" : "not ", k + 1,
           what[k - 2], got[0], gs[0]);
  }

  tell(go[1], 'e');
  int st = 0;
  waitpid(pid, &st, 0);
  ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  fails += !ok;
  printf("%sok 5 - the sender finished without an error\n", ok ? "" : "not ");
  n->closeRecv(rc);
  n->closeListen(lc);
  printf("# %d passed, %d failed\n", 5 - fails, fails);
  return fails != 0;
}
