/* Fault tests: what the plugin does when the peer dies, when the caller
 * closes with requests outstanding, when sizes disagree, when arguments
 * are wrong, when the handle is garbage and when strangers connect to the
 * listening port.  Every wait is bounded (nominal seconds times
 * RN_TIMEOUT_SCALE); a bound turns a hang into a failure and never judges
 * speed.
 *
 *   fault [--api v8|v9|v10|v11|v12] [--only SUBSTR] [--seed N]
 *
 * Environment as for the conformance harness (RN_PLUGIN, RN_CONF_RECV_ENV,
 * RN_CONF_SEND_ENV, RN_CONF_DEV, RN_CONF_VERBOSE, RN_CONF_TIMEOUT_SCALE). */
#include "../common/rn_test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KB ((size_t)1024)
#define MB (KB * 1024)
#define DEATH_BOUND_S 10.0 /* a dead peer must surface within this */
#define CLOSE_BOUND_S 2.0  /* close with requests outstanding */

static int is_peer_error(ncclResult_t r) { return r == ncclRemoteError || r == ncclSystemError; }

static int post_retry(struct rn_peer *p, int send, void *comm, void *buf, size_t size, int tag,
                      void *mh, void **req, double timeout_s) {
  double end = rn_deadline(timeout_s);
  *req = NULL;
  for (;;) {
    ncclResult_t r;
    if (send) {
      r = rn_net_isend(&p->net, comm, buf, size, tag, mh, req);
    } else {
      void *d = buf;
      r = rn_net_irecv(&p->net, comm, 1, &d, &size, &tag, &mh, req);
    }
    if (r != ncclSuccess) return (int)r;
    if (*req != NULL) return 0;
    if (now_s() > end) return -1;
    sleep_us(10);
  }
}

/* ---- peer killed --------------------------------------------------------- */
/* The victim streams 64 MiB messages and SIGKILLs itself while one is in
 * flight, after writing its time of death to the survivor.  The survivor
 * keeps the stream going and must see test() (or isend/irecv) fail with
 * ncclRemoteError/ncclSystemError within DEATH_BOUND_S of that time. */
#define KILL_MSG (64 * MB)

struct kill_arg {
  int idle; /* victim dies before sending anything */
};

static void die_now(struct rn_peer *p) {
  double t = now_s();
  if (peer_write(p, &t, sizeof t) != 0) _exit(9);
  raise(SIGKILL);
  _exit(9);
}

static int victim(struct rn_peer *p) {
  const struct kill_arg *a = p->arg;
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, p->role == RN_RECEIVER ? &lc : NULL, 30) != 0) return -1;
  if (a->idle) {
    sleep_us(200000); /* let the survivor post its request */
    die_now(p);
  }
  unsigned char *buf = malloc(KILL_MSG);
  if (buf == NULL) return peer_fail(p, "oom");
  memset(buf, 0x5a, KILL_MSG);
  void *mh = NULL;
  ncclResult_t r = rn_net_regmr(&p->net, comm, buf, KILL_MSG, NCCL_PTR_HOST, &mh);
  if (r != ncclSuccess) return peer_fail(p, "regMr: %s", rn_result_str(r));
  for (int i = 0; i < 64; i++) {
    void *req = NULL;
    int e = post_retry(p, p->role == RN_SENDER, comm, buf, KILL_MSG, 1, mh, &req, 10);
    if (e != 0) return peer_fail(p, "victim post #%d failed (%d) before dying", i, e);
    /* a couple of polls so the transfer is under way, then die with it in flight */
    int done = 0;
    for (int k = 0; k < 3 && !done; k++) {
      if ((r = rn_net_test(&p->net, req, &done, NULL)) != ncclSuccess)
        return peer_fail(p, "victim test: %s", rn_result_str(r));
      sleep_us(200);
    }
    if (!done || i >= 8) die_now(p);
    /* finished too quickly (test() already reported it done, so the
     * request is gone): try the next one */
  }
  die_now(p);
  return 0;
}

static int survivor(struct rn_peer *p) {
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, p->role == RN_RECEIVER ? &lc : NULL, 30) != 0) return -1;
  unsigned char *buf = malloc(KILL_MSG);
  if (buf == NULL) return peer_fail(p, "oom");
  memset(buf, 0xa5, KILL_MSG);
  void *mh = NULL;
  ncclResult_t r = rn_net_regmr(&p->net, comm, buf, KILL_MSG, NCCL_PTR_HOST, &mh);
  if (r != ncclSuccess) return peer_fail(p, "regMr: %s", rn_result_str(r));
  rn_log_reset();
  int warns0 = rn_log_warns();
  double t_kill = 0, t_err = 0;
  ncclResult_t err = ncclSuccess;
  const char *where = "";
  double hard_end = rn_deadline(60);
  int completed = 0;
  void *req = NULL;
  while (err == ncclSuccess) {
    if (t_kill == 0) {
      struct pollfd pfd = {p->from_peer, POLLIN, 0};
      if (poll(&pfd, 1, 0) == 1 && peer_read(p, &t_kill, sizeof t_kill, 1) != 0) t_kill = 0;
    }
    double t = now_s();
    if ((t_kill != 0 && t > t_kill + rn_bound_s(DEATH_BOUND_S)) || t > hard_end) {
      return peer_fail(
          p, "peer %s; no error from the plugin after %.1f s (%d messages completed, %s)",
          t_kill != 0 ? "killed" : "not killed?", t_kill != 0 ? t - t_kill : rn_bound_s(60),
          completed, req ? "a request outstanding" : "isend/irecv kept returning NULL");
    }
    if (req == NULL) {
      if (p->role == RN_SENDER)
        r = rn_net_isend(&p->net, comm, buf, KILL_MSG, 1, mh, &req);
      else {
        void *d = buf;
        size_t sz = KILL_MSG;
        int tag = 1;
        r = rn_net_irecv(&p->net, comm, 1, &d, &sz, &tag, &mh, &req);
      }
      if (r != ncclSuccess) err = r, where = p->role == RN_SENDER ? "isend" : "irecv";
      if (req == NULL) sleep_us(20);
      continue;
    }
    int done = 0;
    r = rn_net_test(&p->net, req, &done, NULL);
    if (r != ncclSuccess) {
      err = r;
      where = "test";
    } else if (done) {
      req = NULL;
      completed++;
    } else {
      sleep_us(5);
    }
  }
  t_err = now_s();
  if (t_kill == 0) peer_read(p, &t_kill, sizeof t_kill, 5);
  note("%s: %s returned %s %.3f s after the peer died (%d messages completed before)",
       p->role == RN_SENDER ? "sender" : "receiver", where, rn_result_str(err),
       t_kill != 0 ? t_err - t_kill : -1.0, completed);
  int rc = 0;
  if (!is_peer_error(err))
    rc = peer_fail(p, "%s returned %s, want ncclRemoteError or ncclSystemError", where,
                   rn_result_str(err));
  /* NCCL reports the error; the WARN is what tells the user why */
  if (rn_log_warns() == warns0 && rc == 0)
    rc = peer_fail(p, "%s returned %s but no WARN was logged for the dead peer", where,
                   rn_result_str(err));
  else if (rn_log_warns() > warns0)
    note("WARN: %s", rn_log_last_warn());
  /* closing after the failure must not wait for the dead peer, nor crash */
  double t0 = now_s();
  if ((r = rn_net_deregmr(&p->net, comm, mh)) != ncclSuccess && rc == 0)
    rc = peer_fail(p, "deregMr after the peer died: %s", rn_result_str(r));
  r = p->role == RN_SENDER ? rn_net_close_send(&p->net, comm) : rn_net_close_recv(&p->net, comm);
  if (r != ncclSuccess && rc == 0)
    rc = peer_fail(p, "%s after the peer died: %s",
                   p->role == RN_SENDER ? "closeSend" : "closeRecv", rn_result_str(r));
  if (lc != NULL && (r = rn_net_close_listen(&p->net, lc)) != ncclSuccess && rc == 0)
    rc = peer_fail(p, "closeListen after the peer died: %s", rn_result_str(r));
  if (now_s() - t0 > rn_bound_s(CLOSE_BOUND_S) && rc == 0)
    rc = peer_fail(p, "close after the peer died took %.1f s (bound %.0f s)", now_s() - t0,
                   rn_bound_s(CLOSE_BOUND_S));
  free(buf);
  return rc;
}

/* The listener dies after handing out its handle, before accepting: the
 * connector must get an error (or at worst keep returning NULL) — never
 * crash; an error within DEATH_BOUND_S is what NCCL needs to stop. */
static int dead_listener_r(struct rn_peer *p) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  void *lc = NULL;
  ncclResult_t r = rn_net_listen(&p->net, p->dev, handle, &lc);
  if (r != ncclSuccess) return peer_fail(p, "listen: %s", rn_result_str(r));
  if (peer_write(p, handle, sizeof handle) != 0) return peer_fail(p, "pipe");
  die_now(p);
  return 0;
}

struct dead_arg {
  int want_warn; /* 0: the error only; 1: the error and a WARN */
};

static int dead_listener_s(struct rn_peer *p) {
  const struct dead_arg *a = p->arg;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  double t_kill = 0;
  if (peer_read(p, handle, sizeof handle, 30) != 0) return peer_fail(p, "no handle");
  if (peer_read(p, &t_kill, sizeof t_kill, 30) != 0) return peer_fail(p, "no death notice");
  /* the listener is dead now: start connecting */
  rn_log_reset();
  int warns0 = rn_log_warns();
  void *sc = NULL;
  ncclResult_t r = ncclSuccess;
  double end = rn_deadline(DEATH_BOUND_S);
  int calls = 0;
  while (now_s() < end) {
    r = rn_net_connect(&p->net, p->dev, handle, &sc);
    calls++;
    if (r != ncclSuccess || sc != NULL) break;
    sleep_us(1000);
  }
  note("sender: connect to a dead listener: %s after %d calls, %.3f s", rn_result_str(r), calls,
       now_s() - t_kill);
  if (r == ncclSuccess && sc != NULL) {
    /* a comm to a dead peer: it must fail on first use */
    return peer_fail(p, "connect to a dead listener returned a comm");
  }
  if (r == ncclSuccess)
    return peer_fail(p,
                     "connect to a dead listener still returns NULL after %.0f s (NCCL would hang)",
                     rn_bound_s(DEATH_BOUND_S));
  if (!is_peer_error(r))
    return peer_fail(p,
                     "connect to a dead listener returned %s, want ncclRemoteError or "
                     "ncclSystemError",
                     rn_result_str(r));
  if (rn_log_warns() > warns0)
    note("WARN: %s", rn_log_last_warn());
  else if (a->want_warn)
    return peer_fail(p, "connect to a dead listener failed (%s) without a WARN", rn_result_str(r));
  else
    note("connect failed (%s) without a WARN", rn_result_str(r));
  return 0;
}

/* ---- close with requests outstanding ------------------------------------- */
static int timed_close(struct rn_peer *p, void *comm, void *lc, const char *what) {
  double t0 = now_s();
  ncclResult_t r =
      p->role == RN_SENDER ? rn_net_close_send(&p->net, comm) : rn_net_close_recv(&p->net, comm);
  double dt = now_s() - t0;
  note("%s: %s took %.3f s (%s)", p->role == RN_SENDER ? "sender" : "receiver",
       p->role == RN_SENDER ? "closeSend" : "closeRecv", dt, rn_result_str(r));
  if (r != ncclSuccess) return peer_fail(p, "%s: %s", what, rn_result_str(r));
  if (lc && peer_check(p, rn_net_close_listen(&p->net, lc), "closeListen")) return -1;
  /* the bound only turns a close that waits for the peer (which waits for
   * this close) into a failure instead of a hang */
  if (dt > rn_bound_s(CLOSE_BOUND_S))
    return peer_fail(p, "%s: close took %.1f s, bound %.0f s", what, dt, rn_bound_s(CLOSE_BOUND_S));
  return 0;
}

/* Receiver posts receives nothing will fill, closes; the sender (alive,
 * idle) closes after it. */
static int close_recv_r(struct rn_peer *p) {
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, &lc, 30) != 0) return -1;
  size_t sz = 1 * MB;
  unsigned char *buf = malloc(sz * 4);
  void *mh = NULL;
  ncclResult_t r = rn_net_regmr(&p->net, comm, buf, sz * 4, NCCL_PTR_HOST, &mh);
  if (r != ncclSuccess) return peer_fail(p, "regMr: %s", rn_result_str(r));
  for (int i = 0; i < 4; i++) {
    void *req = NULL;
    int e = post_retry(p, 0, comm, buf + (size_t)i * sz, sz, 1, mh, &req, 10);
    if (e != 0) return peer_fail(p, "irecv #%d: %d", i, e);
    int done = 0;
    if (peer_check(p, rn_net_test(&p->net, req, &done, NULL), "test of a pending receive"))
      return -1;
  }
  /* NCCL deregisters its buffers before closing */
  if (peer_check(p, rn_net_deregmr(&p->net, comm, mh), "deregMr")) return -1;
  int rc = timed_close(p, comm, lc, "closeRecv with 4 receives outstanding");
  free(buf);
  if (peer_sync(p, 10) != 0 && rc == 0) rc = peer_fail(p, "peer gone");
  return rc;
}

static int close_recv_s(struct rn_peer *p) {
  void *comm = NULL;
  if (peer_connect(p, 1, &comm, NULL, 30) != 0) return -1;
  if (peer_sync(p, 10) != 0) return peer_fail(p, "receiver did not finish closing");
  return timed_close(p, comm, NULL, "closeSend after the receiver closed");
}

/* Sender posts 64 MiB sends the receiver only partly takes, closes at once. */
static int close_send_r(struct rn_peer *p) {
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, &lc, 30) != 0) return -1;
  size_t sz = 64 * MB;
  unsigned char *buf = malloc(sz);
  void *mh = NULL;
  ncclResult_t r = rn_net_regmr(&p->net, comm, buf, sz, NCCL_PTR_HOST, &mh);
  if (r != ncclSuccess) return peer_fail(p, "regMr: %s", rn_result_str(r));
  void *req = NULL;
  int e = post_retry(p, 0, comm, buf, sz, 1, mh, &req, 10);
  if (e != 0) return peer_fail(p, "irecv: %d", e);
  /* do not test: the receiver is slow; wait for the sender's close */
  if (peer_sync(p, 10) != 0) return peer_fail(p, "sender did not finish closing");
  if (peer_check(p, rn_net_deregmr(&p->net, comm, mh), "deregMr")) return -1;
  int rc = timed_close(p, comm, lc, "closeRecv after the sender closed mid-message");
  free(buf);
  return rc;
}

static int close_send_s(struct rn_peer *p) {
  void *comm = NULL;
  if (peer_connect(p, 1, &comm, NULL, 30) != 0) return -1;
  size_t sz = 64 * MB;
  unsigned char *buf = malloc(sz);
  memset(buf, 1, sz);
  void *mh = NULL;
  ncclResult_t r = rn_net_regmr(&p->net, comm, buf, sz, NCCL_PTR_HOST, &mh);
  if (r != ncclSuccess) return peer_fail(p, "regMr: %s", rn_result_str(r));
  int posted = 0;
  for (int i = 0; i < 4; i++) {
    void *req = NULL;
    r = rn_net_isend(&p->net, comm, buf, sz, 1, mh, &req);
    if (r != ncclSuccess) return peer_fail(p, "isend #%d: %s", i, rn_result_str(r));
    if (req == NULL) {
      /* no matching receive yet: give the first one a moment */
      if (i == 0) {
        int e = post_retry(p, 1, comm, buf, sz, 1, mh, &req, 5);
        if (e != 0) return peer_fail(p, "isend #0 never accepted (%d)", e);
      } else {
        continue;
      }
    }
    posted++;
    int done = 0;
    if (peer_check(p, rn_net_test(&p->net, req, &done, NULL), "test of a pending send")) return -1;
  }
  note("sender: %d sends outstanding at close", posted);
  if (peer_check(p, rn_net_deregmr(&p->net, comm, mh), "deregMr")) return -1;
  int rc = timed_close(p, comm, NULL, "closeSend with sends outstanding");
  free(buf);
  if (peer_sync(p, 10) != 0 && rc == 0) rc = peer_fail(p, "peer gone");
  return rc;
}

/* ---- send larger than the posted receive -------------------------------
 * The receive fails.  So does the sender: in that send's own test(), or,
 * where the send completed once written (as NCCL's socket transport's
 * sends do; railnet's TCP eager sends up to 64 KiB), at a later call on
 * the same comm: the sender keeps sending until one fails. */
#define BIG_SEND 12345
#define SMALL_RECV 4099

static int oversize(struct rn_peer *p) {
  void *comm = NULL, *lc = NULL;
  int is_recv = p->role == RN_RECEIVER;
  if (peer_connect(p, 1, &comm, is_recv ? &lc : NULL, 30) != 0) return -1;
  unsigned char *buf = calloc(1, 64 * KB);
  void *mh = NULL;
  ncclResult_t r = rn_net_regmr(&p->net, comm, buf, 64 * KB, NCCL_PTR_HOST, &mh);
  if (r != ncclSuccess) return peer_fail(p, "regMr: %s", rn_result_str(r));
  rn_log_reset();
  void *req = NULL;
  double end = rn_deadline(DEATH_BOUND_S);
  ncclResult_t err = ncclSuccess;
  int done = 0;
  int got = -1, completed = 0;
  while (err == ncclSuccess && now_s() < end) {
    if (req == NULL) {
      if (is_recv) {
        void *d = buf;
        size_t sz = SMALL_RECV;
        int tag = 9;
        err = rn_net_irecv(&p->net, comm, 1, &d, &sz, &tag, &mh, &req);
      } else {
        err = rn_net_isend(&p->net, comm, buf, BIG_SEND, 9, mh, &req);
      }
      continue;
    }
    err = rn_net_test(&p->net, req, &done, &got);
    if (err != ncclSuccess || !done) continue;
    if (is_recv) break; /* a receive reported success: wrong */
    completed++, req = NULL, done = 0;
  }
  int warned = rn_log_has_warn("12345", "4099");
  int mine = err != ncclSuccess;
  note("%s: %s (done=%d, size %d, %d sends done before it); WARN naming both sizes: %s%s%s",
       is_recv ? "receiver" : "sender", rn_result_str(err), done, got, completed,
       warned ? "yes" : "no", rn_log_warns() ? " last: " : "",
       rn_log_warns() ? rn_log_last_warn() : "");
  /* exchange outcomes: each side must fail, and one WARN must name both sizes */
  int out[2] = {mine, warned}, theirs[2] = {0, 0};
  if (peer_write(p, out, sizeof out) != 0 || peer_read(p, theirs, sizeof theirs, 20) != 0)
    return peer_fail(p, "outcome exchange failed");
  int rc = 0;
  if (!mine)
    rc = peer_fail(
        p, "%s: %s",
        is_recv ? "receive of 4099 B got a 12345 B send" : "12345 B send into a 4099 B receive",
        is_recv && done ? "test() reported success" : "no error within the bound");
  else if (is_recv && !warned && !theirs[1])
    rc = peer_fail(p, "both sides failed but no WARN naming both 12345 and 4099 on either side");
  /* a failed request leaves the comm closable */
  if (peer_check(p, rn_net_deregmr(&p->net, comm, mh), "deregMr after the failure")) rc = -1;
  if (is_recv) {
    if (peer_check(p, rn_net_close_recv(&p->net, comm), "closeRecv after the failure")) rc = -1;
    if (peer_check(p, rn_net_close_listen(&p->net, lc), "closeListen")) rc = -1;
  } else {
    if (peer_check(p, rn_net_close_send(&p->net, comm), "closeSend after the failure")) rc = -1;
  }
  free(buf);
  return rc;
}

/* ---- zero-byte messages ------------------------------------------------- */
static int zero_bytes(struct rn_peer *p) {
  void *comm = NULL, *lc = NULL;
  if (peer_connect(p, 1, &comm, p->role == RN_RECEIVER ? &lc : NULL, 30) != 0) return -1;
  static const size_t sizes[] = {0, 5, 0, 0, 65536, 0, 1, 0, 0, 0, 4096, 0};
  size_t post[sizeof sizes / sizeof sizes[0]];
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    post[i] = (i % 3 == 0) ? 0 : sizes[i] + 100;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    if (post[i] < sizes[i]) post[i] = sizes[i];
  struct rn_stream s = {.p = p,
                        .comm = comm,
                        .is_send = p->role == RN_SENDER,
                        .nmsg = (int)(sizeof sizes / sizeof sizes[0]),
                        .sizes = sizes,
                        .post_sizes = post,
                        .window = 4,
                        .verify = 1,
                        .seed = p->seed};
  int rc = rn_stream_run(&s, 30);
  if (peer_sync(p, 10) != 0 && rc == 0) rc = peer_fail(p, "peer gone");
  if (peer_close(p, 1, &comm, p->role == RN_RECEIVER ? &lc : NULL) != 0 && rc == 0) rc = -1;
  return rc;
}

/* ---- bad arguments (one child per check) ------------------------------- */
enum expect { EXPECT_ERROR_WARN, EXPECT_SUCCESS };
struct badarg {
  const char *name;
  int which;
  enum expect expect;
};

static ncclResult_t call_bad(struct rn_peer *p, int which, int *skip) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(handle, 0, sizeof handle);
  void *out = NULL;
  static unsigned char garbage[4096];
  memset(garbage, 0xAA, sizeof garbage);
  struct rn_props q;
  void *lc = NULL, *sc = NULL, *rcm = NULL;
  if (which >= 100) {
    if (peer_loopback(p, &lc, &sc, &rcm, 20) != 0) {
      *skip = -1;
      return ncclSuccess;
    }
  }
  int ndev = p->ndev;
  int done = 0;
  char buf[64];
  void *d = buf;
  size_t sz = sizeof buf;
  int tag = 0;
  void *mh = NULL;
  void *datas[64];
  size_t sizes[64];
  int tags[64];
  void *mhs[64];
  for (int i = 0; i < 64; i++) datas[i] = buf, sizes[i] = 1, tags[i] = i, mhs[i] = NULL;
  ncclResult_t r = ncclSuccess;
  rn_log_reset();
  int w0 = rn_log_warns();
  (void)w0;
  switch (which) {
    case 1:
      r = rn_net_props(&p->net, -1, &q);
      break;
    case 2:
      r = rn_net_props(&p->net, ndev, &q);
      break;
    case 3:
      r = rn_net_listen(&p->net, ndev, handle, &out);
      break;
    case 4:
      r = rn_net_listen(&p->net, -1, handle, &out);
      break;
    case 5:
      r = rn_net_listen(&p->net, 0, NULL, &out);
      break;
    case 6:
      r = rn_net_listen(&p->net, 0, handle, NULL);
      break;
    case 7:
      r = rn_net_connect(&p->net, ndev, handle, &out);
      break;
    case 8:
      r = rn_net_connect(&p->net, 0, NULL, &out);
      break;
    case 9:
      r = rn_net_accept(&p->net, NULL, &out);
      break;
    case 10:
      r = rn_net_accept(&p->net, garbage, &out);
      break;
    case 11:
      r = rn_net_isend(&p->net, NULL, buf, 8, 0, NULL, &out);
      break;
    case 12:
      r = rn_net_isend(&p->net, garbage, buf, 8, 0, NULL, &out);
      break;
    case 13:
      r = rn_net_irecv(&p->net, NULL, 1, &d, &sz, &tag, &mh, &out);
      break;
    case 14:
      r = rn_net_test(&p->net, NULL, &done, NULL);
      break;
    case 15:
      r = rn_net_test(&p->net, garbage, &done, NULL);
      break;
    case 16:
      r = rn_net_regmr(&p->net, NULL, buf, sizeof buf, NCCL_PTR_HOST, &out);
      break;
    case 17:
      r = rn_net_devices(&p->net, NULL);
      break;
    case 18:
      r = rn_net_close_send(&p->net, NULL);
      break;
    case 19:
      r = rn_net_close_recv(&p->net, NULL);
      break;
    case 20:
      r = rn_net_close_listen(&p->net, NULL);
      break;
    case 21:
      r = rn_net_regmr(&p->net, garbage, buf, sizeof buf, NCCL_PTR_HOST, &out);
      break;
    /* with a live loopback comm pair */
    case 100:
      r = rn_net_isend(&p->net, rcm, buf, 8, 0, NULL, &out);
      break;
    case 101:
      r = rn_net_irecv(&p->net, sc, 1, &d, &sz, &tag, &mh, &out);
      break;
    case 102:
      r = rn_net_irecv(&p->net, rcm, 0, datas, sizes, tags, mhs, &out);
      break;
    case 103: {
      int n = p->props.max_recvs + 1;
      if (n > 64) {
        *skip = 1;
        break;
      }
      r = rn_net_irecv(&p->net, rcm, n, datas, sizes, tags, mhs, &out);
      break;
    }
    case 104:
      r = rn_net_isend(&p->net, lc, buf, 8, 0, NULL, &out);
      break;
    case 105:
      r = rn_net_close_send(&p->net, rcm);
      break;
    case 106:
      r = rn_net_accept(&p->net, sc, &out);
      break;
    case 107:
      if (p->props.ptr_support & NCCL_PTR_CUDA) {
        *skip = 1;
        break;
      }
      r = rn_net_regmr(&p->net, sc, buf, sizeof buf, NCCL_PTR_CUDA, &out);
      break;
    case 108:
      r = rn_net_deregmr(&p->net, sc, NULL);
      break;
    case 109:
      r = rn_net_regmr(&p->net, sc, buf, sizeof buf, 0x40, &out);
      break;
    default:
      *skip = 1;
  }
  if (which >= 100) {
    /* the misuse above must leave the comms intact and closable */
    ncclResult_t c1 = rn_net_close_send(&p->net, sc), c2 = rn_net_close_recv(&p->net, rcm),
                 c3 = rn_net_close_listen(&p->net, lc);
    if (c1 != ncclSuccess || c2 != ncclSuccess || c3 != ncclSuccess) {
      peer_fail(p,
                "closing the comms after the bad call: closeSend %s, closeRecv %s, "
                "closeListen %s",
                rn_result_str(c1), rn_result_str(c2), rn_result_str(c3));
      *skip = -1;
    }
  }
  return r;
}

static int badarg_fn(struct rn_peer *p) {
  const struct badarg *b = p->arg;
  int skip = 0;
  ncclResult_t r = call_bad(p, b->which, &skip);
  if (skip == -1) return -1;
  if (skip) return peer_fail(p, "not applicable"), RN_EXIT_SKIP;
  int warns = rn_log_warns();
  if (b->expect == EXPECT_SUCCESS) {
    /* close(NULL) and deregMr(NULL) are no-ops NCCL may issue on cleanup */
    if (r != ncclSuccess)
      return peer_fail(p, "%s returned %s, want ncclSuccess", b->name, rn_result_str(r));
    return 0;
  }
  if (r == ncclSuccess) return peer_fail(p, "%s returned ncclSuccess", b->name);
  if (r != ncclInvalidArgument && r != ncclInternalError)
    return peer_fail(p, "%s returned %s, want ncclInvalidArgument or ncclInternalError", b->name,
                     rn_result_str(r));
  if (warns == 0) return peer_fail(p, "%s returned %s without a WARN", b->name, rn_result_str(r));
  note("%s -> %s, WARN: %s", b->name, rn_result_str(r), rn_log_last_warn());
  return 0;
}

static const struct badarg badargs[] = {
    {"getProperties(-1)", 1, EXPECT_ERROR_WARN},
    {"getProperties(ndev)", 2, EXPECT_ERROR_WARN},
    {"listen(ndev)", 3, EXPECT_ERROR_WARN},
    {"listen(-1)", 4, EXPECT_ERROR_WARN},
    {"listen(handle NULL)", 5, EXPECT_ERROR_WARN},
    {"listen(listenComm NULL)", 6, EXPECT_ERROR_WARN},
    {"connect(ndev)", 7, EXPECT_ERROR_WARN},
    {"connect(handle NULL)", 8, EXPECT_ERROR_WARN},
    {"accept(NULL listenComm)", 9, EXPECT_ERROR_WARN},
    {"accept(garbage listenComm)", 10, EXPECT_ERROR_WARN},
    {"isend(NULL comm)", 11, EXPECT_ERROR_WARN},
    {"isend(garbage comm)", 12, EXPECT_ERROR_WARN},
    {"irecv(NULL comm)", 13, EXPECT_ERROR_WARN},
    {"test(NULL request)", 14, EXPECT_ERROR_WARN},
    {"test(garbage request)", 15, EXPECT_ERROR_WARN},
    {"regMr(NULL comm)", 16, EXPECT_ERROR_WARN},
    {"regMr(garbage comm)", 21, EXPECT_ERROR_WARN},
    {"devices(NULL)", 17, EXPECT_ERROR_WARN},
    {"closeSend(NULL) is a no-op returning success", 18, EXPECT_SUCCESS},
    {"closeRecv(NULL) is a no-op returning success", 19, EXPECT_SUCCESS},
    {"closeListen(NULL) is a no-op returning success", 20, EXPECT_SUCCESS},
    {"isend on a recv comm", 100, EXPECT_ERROR_WARN},
    {"irecv on a send comm", 101, EXPECT_ERROR_WARN},
    {"irecv(n=0)", 102, EXPECT_ERROR_WARN},
    {"irecv(n=maxRecvs+1)", 103, EXPECT_ERROR_WARN},
    {"isend on a listen comm", 104, EXPECT_ERROR_WARN},
    {"closeSend on a recv comm", 105, EXPECT_ERROR_WARN},
    {"accept on a send comm", 106, EXPECT_ERROR_WARN},
    {"regMr(NCCL_PTR_CUDA) on a host-only device", 107, EXPECT_ERROR_WARN},
    {"regMr(unknown type 0x40)", 109, EXPECT_ERROR_WARN},
    {"deregMr(NULL mhandle) is a no-op returning success", 108, EXPECT_SUCCESS},
};
#define NBADARGS (int)(sizeof badargs / sizeof badargs[0])

/* ---- garbage handles ----------------------------------------------------- */
struct garbage_arg {
  int kind; /* 0 random, 1 all 0xff, 2 all zero, 3 real handle, random tail */
};

static int garbage_fn(struct rn_peer *p) {
  const struct garbage_arg *g = p->arg;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  uint64_t st = p->seed;
  void *lc = NULL;
  switch (g->kind) {
    case 0:
      for (size_t i = 0; i < sizeof handle; i++) handle[i] = (unsigned char)rng_next(&st);
      break;
    case 1:
      memset(handle, 0xff, sizeof handle);
      break;
    case 2:
      memset(handle, 0, sizeof handle);
      break;
    default: {
      memset(handle, 0, sizeof handle);
      ncclResult_t r = rn_net_listen(&p->net, p->dev, handle, &lc);
      if (r != ncclSuccess) return peer_fail(p, "listen: %s", rn_result_str(r));
      /* keep the first 32 bytes (where an address most likely lives), scramble the rest */
      for (size_t i = 32; i < sizeof handle; i++) handle[i] ^= (unsigned char)(rng_next(&st) | 1);
    }
  }
  /* A handle travels over NCCL's bootstrap; a corrupted one must be refused
   * at connect with an error and a WARN, never turn into a comm, a hang or
   * a connection the real listener admits.  The bound only catches a
   * connect that keeps returning "retry later". */
  void *sc = NULL;
  rn_log_reset();
  int warns0 = rn_log_warns();
  double end = rn_deadline(10);
  ncclResult_t r = ncclSuccess;
  int calls = 0, rc = 0;
  while (rc == 0) {
    r = rn_net_connect(&p->net, p->dev, handle, &sc);
    calls++;
    if (r != ncclSuccess || sc != NULL) break;
    if (now_s() > end) {
      rc = peer_fail(
          p, "connect with a garbage handle still returns \"retry later\" after %d calls", calls);
      break;
    }
    sleep_us(1000);
  }
  note("connect(garbage handle kind %d): %s after %d calls, comm %p%s%s", g->kind, rn_result_str(r),
       calls, sc, rn_log_warns() > warns0 ? ", WARN: " : "",
       rn_log_warns() > warns0 ? rn_log_last_warn() : "");
  if (rc == 0 && sc != NULL) rc = peer_fail(p, "connect with a garbage handle returned a comm");
  if (rc == 0 && rn_log_warns() == warns0)
    rc = peer_fail(p, "connect refused the garbage handle (%s) without a WARN", rn_result_str(r));
  if (lc != NULL) {
    /* the real listener must not have admitted anything */
    for (int i = 0; i < 20 && rc == 0; i++) {
      void *rcm = NULL;
      ncclResult_t ra = rn_net_accept(&p->net, lc, &rcm);
      if (ra != ncclSuccess)
        rc = peer_fail(p, "accept on the real listener failed: %s", rn_result_str(ra));
      else if (rcm != NULL)
        rc = peer_fail(p, "accept admitted a connection made from a scrambled handle");
      sleep_us(1000);
    }
    if (peer_check(p, rn_net_close_listen(&p->net, lc), "closeListen")) rc = -1;
  }
  return rc;
}

/* ---- stray TCP connections to the listening port ------------------------ */
/* Find the TCP LISTEN sockets this process owns: socket inodes from
 * /proc/self/fd matched against /proc/net/tcp{,6}. */
struct lsock {
  unsigned long inode;
  int v6;
  unsigned char addr[16];
  int port;
};

static int my_socket_inodes(unsigned long *ino, int max) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (d == NULL) return 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < max) {
    char path[300], link[128];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t l = readlink(path, link, sizeof link - 1);
    if (l <= 0) continue;
    link[l] = '\0';
    unsigned long i;
    if (sscanf(link, "socket:[%lu]", &i) == 1) ino[n++] = i;
  }
  closedir(d);
  return n;
}

static int my_listeners(struct lsock *out, int max) {
  unsigned long ino[1024];
  int ni = my_socket_inodes(ino, 1024);
  int n = 0;
  for (int v6 = 0; v6 < 2; v6++) {
    FILE *f = fopen(v6 ? "/proc/self/net/tcp6" : "/proc/self/net/tcp", "r");
    if (f == NULL) continue;
    char line[512];
    if (fgets(line, sizeof line, f) == NULL) {
      fclose(f);
      continue;
    }
    while (fgets(line, sizeof line, f) != NULL && n < max) {
      char laddr[64];
      unsigned port, state;
      unsigned long inode;
      if (sscanf(line,
                 " %*d: %63[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu",
                 laddr, &port, &state, &inode) != 4)
        continue;
      if (state != 0x0A) continue; /* TCP_LISTEN */
      int mine = 0;
      for (int i = 0; i < ni; i++) mine |= ino[i] == inode;
      if (!mine) continue;
      struct lsock *s = &out[n++];
      memset(s, 0, sizeof *s);
      s->inode = inode;
      s->v6 = v6;
      s->port = (int)port;
      /* /proc prints each 32-bit word in host order */
      int words = v6 ? 4 : 1;
      for (int w = 0; w < words; w++) {
        unsigned int x = 0;
        char tmp[9];
        memcpy(tmp, laddr + w * 8, 8);
        tmp[8] = '\0';
        sscanf(tmp, "%x", &x);
        memcpy(s->addr + w * 4, &x, 4);
      }
    }
    fclose(f);
  }
  return n;
}

static int stray_connect(const struct lsock *s) {
  int fd = socket(s->v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int rc;
  if (s->v6) {
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)s->port)};
    memcpy(&a.sin6_addr, s->addr, 16);
    static const unsigned char any[16] = {0};
    if (memcmp(s->addr, any, 16) == 0) a.sin6_addr = in6addr_loopback;
    rc = connect(fd, (struct sockaddr *)&a, sizeof a);
  } else {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    memcpy(&a.sin_addr, s->addr, 4);
    if (a.sin_addr.s_addr == 0) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = connect(fd, (struct sockaddr *)&a, sizeof a);
  }
  if (rc != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

#define NSTRAY 5
/* After the strays: four verified messages between the real peers, then
 * wait for the other side to finish. */
static int stray_traffic(struct rn_peer *p, void *comm, int is_send) {
  int rc = rn_stream_check(p, comm, is_send);
  if (peer_sync(p, 10) != 0 && rc == 0) rc = peer_fail(p, "peer gone");
  return rc;
}

static int stray_r(struct rn_peer *p) {
  struct lsock before[64], after[64];
  int nb = my_listeners(before, 64);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  void *lc = NULL, *rcm = NULL;
  ncclResult_t r = rn_net_listen(&p->net, p->dev, handle, &lc);
  if (r != ncclSuccess) return peer_fail(p, "listen: %s", rn_result_str(r));
  int na = my_listeners(after, 64);
  struct lsock fresh[64];
  int nf = 0;
  for (int i = 0; i < na; i++) {
    int old = 0;
    for (int j = 0; j < nb; j++) old |= before[j].inode == after[i].inode;
    if (!old) fresh[nf++] = after[i];
  }
  int fds[64 * NSTRAY];
  int nfd = 0;
  uint64_t st = p->seed;
  for (int i = 0; i < nf; i++) {
    for (int k = 0; k < NSTRAY; k++) {
      int fd = stray_connect(&fresh[i]);
      if (fd < 0) continue;
      unsigned char junk[65536];
      for (size_t j = 0; j < sizeof junk; j++) junk[j] = (unsigned char)rng_next(&st);
      ssize_t w = 0;
      switch (k) {
        case 0:
          w = send(fd, junk, 1024, MSG_NOSIGNAL);
          close(fd);
          fd = -1;
          break; /* garbage, close */
        case 1:
          break; /* silent, kept open */
        case 2:
          memset(junk, 0xff, sizeof junk);
          w = send(fd, junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT);
          break;
        case 3:
          w = send(fd, junk, 3, MSG_NOSIGNAL);
          break; /* a short, partial header */
        case 4:
          close(fd);
          fd = -1;
          break; /* connect, close at once */
      }
      (void)w;
      if (fd >= 0) fds[nfd++] = fd;
    }
  }
  note("receiver: %d new listening socket(s); %d stray connections, %d kept open", nf, nf * NSTRAY,
       nfd);
  if (nf == 0) {
    /* a transport that does not listen on TCP: nothing to stray into.
     * An all-zero handle tells the sender to skip too. */
    memset(handle, 0, sizeof handle);
    if (peer_write(p, handle, sizeof handle) != 0) return peer_fail(p, "pipe");
    return peer_fail(p, "this transport's listen comm has no TCP listening socket"), RN_EXIT_SKIP;
  }
  /* let the plugin see the strays before the real peer arrives */
  double t0 = now_s();
  while (now_s() - t0 < 0.3) {
    r = rn_net_accept(&p->net, lc, &rcm);
    if (r != ncclSuccess)
      return peer_fail(p, "accept failed while only strays were connected: %s", rn_result_str(r));
    if (rcm != NULL) return peer_fail(p, "accept admitted a stray connection");
    sleep_us(1000);
  }
  if (peer_write(p, handle, sizeof handle) != 0) return peer_fail(p, "pipe");
  double end = rn_deadline(10);
  while (rcm == NULL) {
    r = rn_net_accept(&p->net, lc, &rcm);
    if (r != ncclSuccess)
      return peer_fail(p, "accept of the real peer failed: %s", rn_result_str(r));
    if (rcm == NULL && now_s() > end)
      return peer_fail(p, "real peer not accepted within %.0f s of the strays", rn_bound_s(10));
  }
  int rc = stray_traffic(p, rcm, 0);
  for (int i = 0; i < nfd; i++) close(fds[i]);
  if (peer_check(p, rn_net_close_recv(&p->net, rcm), "closeRecv")) rc = -1;
  if (peer_check(p, rn_net_close_listen(&p->net, lc), "closeListen")) rc = -1;
  return rc;
}

static int stray_s(struct rn_peer *p) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  static const char none[NCCL_NET_HANDLE_MAXSIZE];
  if (peer_read(p, handle, sizeof handle, 30) != 0) return peer_fail(p, "no handle");
  if (memcmp(handle, none, sizeof handle) == 0)
    return peer_fail(p, "the receiver's transport has no TCP listener"), RN_EXIT_SKIP;
  void *sc = NULL;
  double end = rn_deadline(10);
  while (sc == NULL) {
    ncclResult_t r = rn_net_connect(&p->net, p->dev, handle, &sc);
    if (r != ncclSuccess) return peer_fail(p, "connect: %s", rn_result_str(r));
    if (sc == NULL && now_s() > end)
      return peer_fail(p, "connect not done within %.0f s", rn_bound_s(10));
  }
  int rc = stray_traffic(p, sc, 1);
  if (peer_check(p, rn_net_close_send(&p->net, sc), "closeSend")) rc = -1;
  return rc;
}

/* ---- a half-open incoming connection ------------------------------------ */
/* A TCP connection to the listening port that never identifies itself is
 * dropped once RAILNET_CONNECT_TIMEOUT_MS (HALF_OPEN_MS here) has passed,
 * never before, and a real peer still connects afterwards.  The lower bound
 * is exact (the plugin cannot have accepted the connection before this
 * side's connect() returned); the upper one is a scaled hang guard. */
#define HALF_OPEN_MS 300

static int half_open_fn(struct rn_peer *p) {
  struct lsock before[64], after[64];
  int nb = my_listeners(before, 64);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  void *lc = NULL, *sc = NULL, *rcm = NULL;
  ncclResult_t r = rn_net_listen(&p->net, p->dev, handle, &lc);
  if (r != ncclSuccess) return peer_fail(p, "listen: %s", rn_result_str(r));
  int na = my_listeners(after, 64), fd = -1;
  for (int i = 0; i < na && fd < 0; i++) {
    int old = 0;
    for (int j = 0; j < nb; j++) old |= before[j].inode == after[i].inode;
    if (!old) fd = stray_connect(&after[i]);
  }
  if (fd < 0) {
    if (peer_check(p, rn_net_close_listen(&p->net, lc), "closeListen")) return -1;
    return peer_fail(p, "this transport's listen comm has no TCP listening socket"), RN_EXIT_SKIP;
  }
  double t0 = now_s(), t_drop = 0;
  double end = rn_deadline(HALF_OPEN_MS / 1000.0 + 10);
  int rc = 0;
  while (rc == 0 && t_drop == 0) {
    r = rn_net_accept(&p->net, lc, &rcm);
    if (r != ncclSuccess) {
      rc = peer_fail(p, "accept with a silent connection pending: %s", rn_result_str(r));
      break;
    }
    if (rcm != NULL) {
      rc = peer_fail(p, "accept admitted a connection that never identified itself");
      break;
    }
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      t_drop = now_s();
    else if (now_s() > end)
      rc = peer_fail(p, "silent connection still open %.1f s after connecting (timeout %d ms)",
                     now_s() - t0, HALF_OPEN_MS);
    else
      sleep_us(2000);
  }
  close(fd);
  if (rc == 0) {
    note("silent connection dropped %.3f s after it connected (RAILNET_CONNECT_TIMEOUT_MS=%d)",
         t_drop - t0, HALF_OPEN_MS);
    if (t_drop - t0 < HALF_OPEN_MS / 1000.0)
      rc = peer_fail(p, "silent connection dropped after %.3f s, before the %d ms timeout",
                     t_drop - t0, HALF_OPEN_MS);
  }
  /* the listener still works */
  end = rn_deadline(10);
  while (rc == 0 && (sc == NULL || rcm == NULL)) {
    if (sc == NULL && (r = rn_net_connect(&p->net, p->dev, handle, &sc)) != ncclSuccess)
      rc = peer_fail(p, "connect after the drop: %s", rn_result_str(r));
    else if (rcm == NULL && (r = rn_net_accept(&p->net, lc, &rcm)) != ncclSuccess)
      rc = peer_fail(p, "accept after the drop: %s", rn_result_str(r));
    else if (now_s() > end)
      rc = peer_fail(p, "a real peer did not connect after the drop");
  }
  if (sc && peer_check(p, rn_net_close_send(&p->net, sc), "closeSend")) rc = -1;
  if (rcm && peer_check(p, rn_net_close_recv(&p->net, rcm), "closeRecv")) rc = -1;
  if (peer_check(p, rn_net_close_listen(&p->net, lc), "closeListen")) rc = -1;
  return rc;
}

static void run_version(int version, const char *only, uint64_t seed);

/* ---- abort: everything closed mid-transfer on both sides ----------------- */
/* ncclCommAbort's pattern: two processes, each with a send and a receive
 * comm to the other, ABORT_MSGS messages of 4 MiB in flight each way,
 * tested a round-dependent number of times (0, 8, 64, 512, 4096), then
 * deregistered and closed at once on both sides, the requests abandoned.
 * Every close must succeed within CLOSE_BOUND_S; a test() may fail once
 * the peer has closed.  Then a fresh pair of comms moves 4 MiB each way,
 * verified: nothing an abandoned comm left behind (kept connections,
 * progress-engine state, registrations) may reach the next. */
#define ABORT_ROUNDS 5
#define ABORT_MSGS 4
#define ABORT_SIZE (4 * MB)

static int abort_round(struct rn_peer *p, unsigned char *sbuf, unsigned char *rbuf, int round) {
  void *lc = NULL, *sc = NULL, *rcm = NULL, *smh = NULL, *rmh = NULL;
  void *req[2 * ABORT_MSGS] = {0};
  int done[2 * ABORT_MSGS] = {0};
  const size_t len = (size_t)ABORT_MSGS * ABORT_SIZE;
  if (peer_both_ways(p, &lc, &sc, &rcm, 30) != 0) return -1;
  if (peer_check(p, rn_net_regmr(&p->net, sc, sbuf, len, NCCL_PTR_HOST, &smh), "regMr") ||
      peer_check(p, rn_net_regmr(&p->net, rcm, rbuf, len, NCCL_PTR_HOST, &rmh), "regMr"))
    return -1;
  /* Post what goes at once (a send may wait for its clear-to-send), then
   * test.  The peer may have closed already: from then on a call may fail,
   * with a peer error only, and nothing more is called but the closes. */
  ncclResult_t e = ncclSuccess;
  for (int k = 0; k < ABORT_MSGS && e == ncclSuccess; k++) {
    void *d = rbuf + (size_t)k * ABORT_SIZE;
    size_t sz = ABORT_SIZE;
    int tag = 1;
    e = rn_net_irecv(&p->net, rcm, 1, &d, &sz, &tag, &rmh, &req[k]);
    if (e == ncclSuccess)
      e = rn_net_isend(&p->net, sc, sbuf + (size_t)k * ABORT_SIZE, ABORT_SIZE, 1, smh,
                       &req[ABORT_MSGS + k]);
  }
  const int tests = round == 0 ? 0 : 1 << (3 * round);
  for (int t = 0; t < tests && e == ncclSuccess; t++)
    for (int k = 0; k < 2 * ABORT_MSGS && e == ncclSuccess; k++) {
      int size = 0;
      if (req[k] == NULL || done[k]) continue;
      e = rn_net_test(&p->net, req[k], &done[k], &size);
    }
  if (e != ncclSuccess && !is_peer_error(e))
    return peer_fail(p, "round %d: %s before any close of this side, want a peer error", round,
                     rn_result_str(e));
  const int failed = e != ncclSuccess;
  double t0 = now_s();
  ncclResult_t r[5] = {rn_net_deregmr(&p->net, sc, smh), rn_net_deregmr(&p->net, rcm, rmh),
                       rn_net_close_send(&p->net, sc), rn_net_close_recv(&p->net, rcm),
                       rn_net_close_listen(&p->net, lc)};
  double dt = now_s() - t0;
  static const char *const what[5] = {"deregMr (send)", "deregMr (receive)", "closeSend",
                                      "closeRecv", "closeListen"};
  for (int i = 0; i < 5; i++)
    if (r[i] != ncclSuccess)
      return peer_fail(p, "round %d: %s with requests in flight: %s", round, what[i],
                       rn_result_str(r[i]));
  note("%s: round %d: %d tests%s, then everything closed in %.3f s",
       p->role == RN_SENDER ? "sender" : "receiver", round, tests,
       failed ? " (one failed: the peer closed first)" : "", dt);
  if (dt > rn_bound_s(CLOSE_BOUND_S))
    return peer_fail(p, "round %d: closing took %.1f s, bound %.0f s", round, dt,
                     rn_bound_s(CLOSE_BOUND_S));
  return peer_sync(p, 30) != 0 ? peer_fail(p, "round %d: peer gone", round) : 0;
}

/* After comms were abandoned: a fresh pair of comms moves ABORT_SIZE each
 * way, verified, so nothing the abandoned ones left behind (kept
 * connections, progress-engine state, registrations) reaches the next.
 * sbuf and rbuf hold len bytes.  after: what came before, for the
 * messages. */
static int fresh_pair(struct rn_peer *p, unsigned char *sbuf, unsigned char *rbuf, size_t len,
                      const char *after) {
  void *lc = NULL, *sc = NULL, *rcm = NULL, *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL;
  int rc = -1, size = 0;
  /* My message's key is my role's, the peer's its own. */
  const uint64_t mine = pattern_key(p->seed, (uint64_t)p->role, ABORT_SIZE),
                 theirs = pattern_key(p->seed, (uint64_t)(1 - p->role), ABORT_SIZE);
  pattern_fill(sbuf, ABORT_SIZE, mine);
  memset(rbuf, 0, ABORT_SIZE);
  if (peer_both_ways(p, &lc, &sc, &rcm, 30) != 0 ||
      peer_check(p, rn_net_regmr(&p->net, sc, sbuf, len, NCCL_PTR_HOST, &smh), "regMr") ||
      peer_check(p, rn_net_regmr(&p->net, rcm, rbuf, len, NCCL_PTR_HOST, &rmh), "regMr"))
    goto out;
  if (post_retry(p, 0, rcm, rbuf, ABORT_SIZE, 1, rmh, &rreq, 10) != 0 ||
      post_retry(p, 1, sc, sbuf, ABORT_SIZE, 1, smh, &sreq, 10) != 0) {
    peer_fail(p, "after %s: a fresh pair's send or receive not posted", after);
    goto out;
  }
  /* Both tested in turn until both are done, as NCCL's proxy tests every
   * request it has outstanding. */
  int sdone = 0, rdone = 0;
  double end = rn_deadline(30);
  while (!(sdone && rdone)) {
    if (!rdone && peer_check(p, rn_net_test(&p->net, rreq, &rdone, &size), "test (fresh receive)"))
      goto out;
    if (!sdone && peer_check(p, rn_net_test(&p->net, sreq, &sdone, NULL), "test (fresh send)"))
      goto out;
    if (now_s() > end) {
      peer_fail(p, "after %s: a fresh pair's 4 MiB not through in %.0f s", after, rn_bound_s(30));
      goto out;
    }
  }
  if (size != (int)ABORT_SIZE || pattern_check(rbuf, ABORT_SIZE, theirs) != (size_t)-1) {
    peer_fail(p, "after %s: %d bytes or wrong bytes", after, size);
    goto out;
  }
  if (peer_sync(p, 30) != 0) {
    peer_fail(p, "peer gone at the end");
    goto out;
  }
  rc = 0;
out:
  peer_both_ways_close(p, lc, sc, rcm, smh, rmh);
  return rc;
}

/* One side of a case: nrounds rounds (round(p, sbuf, rbuf, k), both
 * buffers len bytes, the send buffer filled with fill), then a fresh pair
 * (fresh_pair). */
typedef int (*round_fn)(struct rn_peer *p, unsigned char *sbuf, unsigned char *rbuf, int round);

static int rounds_then_fresh(struct rn_peer *p, round_fn round, int nrounds, size_t len, int fill,
                             const char *after) {
  unsigned char *sbuf = malloc(len), *rbuf = malloc(len);
  int rc = -1;
  if (sbuf == NULL || rbuf == NULL) {
    peer_fail(p, "out of memory");
    goto out;
  }
  memset(sbuf, fill, len);
  for (int k = 0; k < nrounds; k++)
    if (round(p, sbuf, rbuf, k) != 0) goto out;
  rc = fresh_pair(p, sbuf, rbuf, len, after);
out:
  free(sbuf);
  free(rbuf);
  return rc;
}

static int abort_side(struct rn_peer *p) {
  return rounds_then_fresh(p, abort_round, ABORT_ROUNDS, (size_t)ABORT_MSGS * ABORT_SIZE, 0x5a,
                           "the aborted rounds");
}

/* ---- a receiver that posts and closes at once ---------------------------- */
/* Another plugin project's test of closing with requests in flight: one
 * side posts INFLIGHT_MSGS receives of 1 MiB and closes everything at
 * once, untested, while the other posts as many sends, each retried until
 * it gives a request, and closes them untested too.  The peer's close
 * must not fail a post: a send on a comm whose receiver left gets a
 * request, and its test() reports the error (as NCCL's own transports
 * report a broken peer).  Even rounds race the two; odd rounds post the
 * sends only after the receiver closed, then test each until it ends: a
 * send may complete (written before the close was seen), else it fails
 * with a peer error and a WARN; 32 MiB cannot all complete into a closed
 * comm.  Closes within CLOSE_BOUND_S; then a fresh pair moves verified
 * data. */
#define INFLIGHT_ROUNDS 6
#define INFLIGHT_MSGS 32
#define INFLIGHT_SIZE MB

static int inflight_round(struct rn_peer *p, unsigned char *sbuf, unsigned char *rbuf,
                          int round) {
  void *lc = NULL, *sc = NULL, *rcm = NULL, *mh = NULL;
  void *req[INFLIGHT_MSGS] = {0};
  const int sender = p->role == RN_SENDER, after_close = round % 2;
  const size_t len = (size_t)INFLIGHT_MSGS * INFLIGHT_SIZE;
  if (peer_both_ways(p, &lc, &sc, &rcm, 30) != 0) return -1;
  void *comm = sender ? sc : rcm;
  unsigned char *buf = sender ? sbuf : rbuf;
  if (peer_check(p, rn_net_regmr(&p->net, comm, buf, len, NCCL_PTR_HOST, &mh), "regMr")) return -1;
  if (sender && after_close && peer_sync(p, 30) != 0)
    return peer_fail(p, "round %d: receiver gone", round);
  rn_log_reset();
  for (int k = 0; k < INFLIGHT_MSGS; k++) {
    int r = post_retry(p, sender, comm, buf + (size_t)k * INFLIGHT_SIZE, INFLIGHT_SIZE, 1, mh,
                       &req[k], 20);
    if (r != 0)
      return peer_fail(p, "round %d: %s %d of %d: %s", round, sender ? "isend" : "irecv", k,
                       INFLIGHT_MSGS,
                       r < 0 ? "no request in 20 s" : rn_result_str((ncclResult_t)r));
  }
  int failed = 0, completed = 0;
  if (sender && after_close) {
    double end = rn_deadline(20);
    for (int k = 0; k < INFLIGHT_MSGS; k++) {
      int done = 0, size = 0;
      ncclResult_t e = ncclSuccess;
      while (!done && (e = rn_net_test(&p->net, req[k], &done, &size)) == ncclSuccess)
        if (now_s() > end)
          return peer_fail(p, "round %d: send %d neither failed nor completed in %.0f s", round,
                           k, rn_bound_s(20));
      if (e != ncclSuccess && !is_peer_error(e))
        return peer_fail(p, "round %d: send %d: %s, want a peer error", round, k,
                         rn_result_str(e));
      if (e != ncclSuccess && !rn_log_has_warn(NULL, NULL))
        return peer_fail(p, "round %d: send %d failed (%s) without a WARN", round, k,
                         rn_result_str(e));
      failed += e != ncclSuccess;
      completed += e == ncclSuccess;
    }
    if (failed == 0)
      return peer_fail(p, "round %d: all %d sends of 1 MiB completed into a closed comm", round,
                       INFLIGHT_MSGS);
  }
  double t0 = now_s();
  ncclResult_t r[4] = {rn_net_deregmr(&p->net, comm, mh), rn_net_close_send(&p->net, sc),
                       rn_net_close_recv(&p->net, rcm), rn_net_close_listen(&p->net, lc)};
  double dt = now_s() - t0;
  static const char *const what[4] = {"deregMr", "closeSend", "closeRecv", "closeListen"};
  for (int i = 0; i < 4; i++)
    if (r[i] != ncclSuccess)
      return peer_fail(p, "round %d: %s with requests in flight: %s", round, what[i],
                       rn_result_str(r[i]));
  if (dt > rn_bound_s(CLOSE_BOUND_S))
    return peer_fail(p, "round %d: closing took %.1f s, bound %.0f s", round, dt,
                     rn_bound_s(CLOSE_BOUND_S));
  if (sender && after_close)
    note("sender: round %d: %d sends posted after the receiver closed: %d completed, %d failed "
         "with a peer error at test()",
         round, INFLIGHT_MSGS, completed, failed);
  if (!(sender && after_close) && peer_sync(p, 30) != 0)
    return peer_fail(p, "round %d: peer gone", round);
  return peer_sync(p, 30) != 0 ? peer_fail(p, "round %d: peer gone", round) : 0;
}

static int inflight_side(struct rn_peer *p) {
  return rounds_then_fresh(p, inflight_round, INFLIGHT_ROUNDS,
                           (size_t)INFLIGHT_MSGS * INFLIGHT_SIZE, 0x3c,
                           "the closes with requests in flight");
}

/* ---- the table ----------------------------------------------------------- */
struct fcase {
  const char *name;
  rn_peer_fn recv, send; /* send NULL: single process */
  void *arg;
  int timeout_s;
  int allow_sig[2];
  const char *env;  /* set in the children before they load the plugin */
  const char *todo; /* a known plugin bug this case shows: TAP TODO with the reason */
};

static struct kill_arg k_busy = {0}, k_idle = {1};
static struct dead_arg d_error = {0}, d_warn = {1};
static struct garbage_arg g_rand = {0}, g_ff = {1}, g_zero = {2}, g_tail = {3};

static const struct fcase fcases[] = {
    {"sender SIGKILLed mid-transfer: receiver's test() fails with a WARN",
     survivor,
     victim,
     &k_busy,
     90,
     {0, SIGKILL},
     NULL,
     NULL},
    {"receiver SIGKILLed mid-transfer: sender's test() fails with a WARN",
     victim,
     survivor,
     &k_busy,
     90,
     {SIGKILL, 0},
     NULL,
     NULL},
    {"sender SIGKILLed before sending: posted receive fails with a WARN",
     survivor,
     victim,
     &k_idle,
     90,
     {0, SIGKILL},
     NULL,
     NULL},
    {"receiver SIGKILLed with nothing posted: sender's isend/test fails with a WARN",
     victim,
     survivor,
     &k_idle,
     90,
     {SIGKILL, 0},
     NULL,
     NULL},
    {"listener SIGKILLed before accepting: connect fails with ncclRemoteError or ncclSystemError",
     dead_listener_r,
     dead_listener_s,
     &d_error,
     60,
     {SIGKILL, 0},
     NULL,
     NULL},
    {"listener SIGKILLed before accepting: connect's failure comes with a WARN",
     dead_listener_r,
     dead_listener_s,
     &d_warn,
     60,
     {SIGKILL, 0},
     NULL,
     NULL},
    {"closeRecv with receives outstanding returns without waiting for the peer",
     close_recv_r,
     close_recv_s,
     NULL,
     60,
     {0, 0},
     NULL,
     NULL},
    {"closeSend with 64 MiB sends outstanding returns without waiting for the peer",
     close_send_r,
     close_send_s,
     NULL,
     60,
     {0, 0},
     NULL,
     NULL},
    {"abort: both sides close every comm with 4 x 4 MiB in flight each way, five times; "
     "a fresh pair then moves verified data",
     abort_side,
     abort_side,
     NULL,
     90,
     {0, 0},
     NULL,
     NULL},
    {"a receiver posts 32 receives and closes at once: every send still gets a request, "
     "failing only at test(); closes are quick; a fresh pair then moves verified data",
     inflight_side,
     inflight_side,
     NULL,
     120,
     {0, 0},
     NULL,
     NULL},
    {"send larger than the posted receive fails on both sides, WARN names both sizes",
     oversize,
     oversize,
     NULL,
     60,
     {0, 0},
     NULL,
     NULL},
    {"zero-byte messages mixed with data, into zero and larger buffers",
     zero_bytes,
     zero_bytes,
     NULL,
     60,
     {0, 0},
     NULL,
     NULL},
    {"connect with a random handle: refused with an error and a WARN",
     garbage_fn,
     NULL,
     &g_rand,
     30,
     {0, 0},
     NULL,
     NULL},
    {"connect with an all-0xff handle: refused with an error and a WARN",
     garbage_fn,
     NULL,
     &g_ff,
     30,
     {0, 0},
     NULL,
     NULL},
    {"connect with an all-zero handle: refused with an error and a WARN",
     garbage_fn,
     NULL,
     &g_zero,
     30,
     {0, 0},
     NULL,
     NULL},
    {"connect with a real handle's tail scrambled: refused with a WARN, nothing admitted",
     garbage_fn,
     NULL,
     &g_tail,
     30,
     {0, 0},
     NULL,
     NULL},
    {"stray TCP connections (garbage, silent, partial) do not block a real peer",
     stray_r,
     stray_s,
     NULL,
     90,
     {0, 0},
     NULL,
     NULL},
    {"a silent incoming connection is dropped after RAILNET_CONNECT_TIMEOUT_MS, not before",
     half_open_fn,
     NULL,
     NULL,
     60,
     {0, 0},
     "RAILNET_CONNECT_TIMEOUT_MS=300",
     NULL},
};
#define NFCASES (int)(sizeof fcases / sizeof fcases[0])

int main(int argc, char **argv) {
  int versions[4] = {8, 11}, nv = 2;
  int version = 8;
  const char *only = NULL;
  uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--api") && i + 1 < argc)
      version = versions[0] = rn_parse_version(argv[++i]), nv = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 0);
    else
      version = 0;
  }
  if (version == 0) {
    fprintf(stderr, "usage: fault [--api v8|v9|v10|v11|v12] [--only SUBSTR] [--seed N]\n");
    return 2;
  }
  rn_default_env();
  int plan = 0;
  for (int c = 0; c < NFCASES; c++) plan += !only || strstr(fcases[c].name, only);
  for (int c = 0; c < NBADARGS; c++)
    plan += !only || strstr(badargs[c].name, only) || strstr("bad arguments", only);
  tap_plan(plan * nv);
  for (int vi = 0; vi < nv; vi++) run_version(versions[vi], only, seed);
  return tap_failed() ? 1 : 0;
}

static void run_version(int version, const char *only, uint64_t seed) {
  note("plugin %s through ncclNetPlugin_v%d, seed %llu", rn_plugin_path(), version,
       (unsigned long long)seed);
  for (int c = 0; c < NFCASES; c++) {
    const struct fcase *f = &fcases[c];
    if (only && !strstr(f->name, only)) continue;
    struct rn_pair_opts o = {.version = version,
                             .timeout_s = f->timeout_s,
                             .init = 1,
                             .seed = seed + (uint64_t)c,
                             .arg = f->arg,
                             .env = f->env};
    o.allow_signal[0] = f->allow_sig[0];
    o.allow_signal[1] = f->allow_sig[1];
    char why[1024];
    int rc = f->send ? rn_run_pair(f->recv, f->send, &o, why, sizeof why)
                     : rn_run_single(f->recv, &o, why, sizeof why);
    /* the victim must really have been killed, not have failed earlier */
    for (int i = 0; i < 2 && rc == 0; i++)
      if (f->allow_sig[i] &&
          !(WIFSIGNALED(o.exit_status[i]) && WTERMSIG(o.exit_status[i]) == f->allow_sig[i])) {
        rc = -1;
        snprintf(why, sizeof why, "the victim was not killed as planned (status 0x%x)",
                 o.exit_status[i]);
      }
    int skipped =
        rc == 0 &&
        ((WIFEXITED(o.exit_status[0]) && WEXITSTATUS(o.exit_status[0]) == RN_EXIT_SKIP) ||
         (f->send && WIFEXITED(o.exit_status[1]) && WEXITSTATUS(o.exit_status[1]) == RN_EXIT_SKIP));
    if (skipped) {
      tap_skip("v%d: %s (not applicable here)", version, f->name);
      continue;
    }
    if (f->todo) {
      if (!tap_result_todo(rc == 0, f->todo, "v%d: %s", version, f->name)) diag("  %s", why);
    } else if (!tap_result(rc == 0, "v%d: %s", version, f->name)) {
      diag("  %s", why);
    }
  }
  for (int c = 0; c < NBADARGS; c++) {
    const struct badarg *b = &badargs[c];
    if (only && !strstr(b->name, only) && !strstr("bad arguments", only)) continue;
    struct rn_pair_opts o = {
        .version = version, .timeout_s = 30, .init = 1, .seed = seed, .arg = (void *)b};
    char why[1024];
    int rc = rn_run_single(badarg_fn, &o, why, sizeof why);
    if (rc == 0 && WIFEXITED(o.exit_status[0]) && WEXITSTATUS(o.exit_status[0]) == RN_EXIT_SKIP) {
      tap_skip("v%d: bad arguments: %s (not applicable)", version, b->name);
      continue;
    }
    if (!tap_result(rc == 0, "v%d: bad arguments: %s%s", version, b->name,
                    b->expect == EXPECT_ERROR_WARN ? " -> error + WARN, no crash" : ""))
      diag("  %s", why);
  }
}
