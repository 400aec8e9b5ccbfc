/* W4: a latency-critical stream of small messages (a round trip: the
 * sender's process pings, the receiver's echoes), alone and while a bulk KV
 * case flows on the same rails.  The stream has comms of its own, as a
 * separate NCCL communicator would (optionally with its own traffic class),
 * and is progressed either by a proxy thread of its own (a communicator of
 * its own has one) or by the bulk's proxy thread (a communicator split
 * with shared resources).  Each message is an ncclSend of `size` bytes: LL
 * on the wire as NCCL sends it (twice the bytes), received into a full LL
 * slot, its completion optional from v9 as NCCL marks it. */
#include "kv.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum ping_state { P_START, P_WAIT, P_STOP, P_FINISHED, E_POST, E_WAIT, E_SEND };

/* Owner: the thread that steps it (the stream's own or the bulk proxy). */
struct kv_ping {
  struct kv_net *net;
  int pinger, ll, version, verify;
  uint64_t seed;
  void *scomm, *rcomm;
  size_t wire, post;
  unsigned char *sbuf, *rbuf[2];
  void *smh, *rmh;
  enum ping_state state;
  void *sreq, *rreq;
  long seq;   /* pings sent (pinger) or received (echo) */
  long count; /* alone: pings to send */
  int with_bulk;
  _Atomic int *bulk_state;
  int bulk_at_start;
  double t0;
  double *rtt_us;
  long n, cap, outside;
  char why[256];
  double deadline;
  _Atomic int abort; /* set by the bulk's side when it failed */
};

static int ping_fail(struct kv_ping *p, const char *what, ncclResult_t r) {
  snprintf(p->why, sizeof p->why, "%s stream: %s: %s", p->pinger ? "ping" : "echo", what,
           rn_result_str(r));
  return -1;
}

static uint64_t ping_key(const struct kv_ping *p, long seq) {
  return pattern_key(p->seed ^ 0x9151, (uint64_t)seq, p->wire);
}

/* irecv into rbuf[seq % 2]; *posted = 0 when the transport said "later" */
static int post_recv(struct kv_ping *p, long seq, int *posted) {
  void *d = p->rbuf[seq % 2];
  size_t sz = p->post;
  int tag = p->pinger ? 1 : 0;
  void *req = (p->ll && p->version >= 9) ? (void *)0x1 : NULL;
  ncclResult_t r = p->net->ops->irecv(p->net, p->rcomm, 1, &d, &sz, &tag, &p->rmh, &req);
  if (r != ncclSuccess) return ping_fail(p, "irecv", r);
  if (req == (void *)0x1) {
    snprintf(p->why, sizeof p->why, "irecv returned NCCL's optional-completion marker");
    return -1;
  }
  p->rreq = req;
  *posted = req != NULL;
  return 0;
}

static int post_send(struct kv_ping *p, void *buf, size_t size, int *posted) {
  void *req = NULL;
  int tag = p->pinger ? 0 : 1;
  ncclResult_t r = p->net->ops->isend(p->net, p->scomm, buf, size, tag, p->smh, &req);
  if (r != ncclSuccess) return ping_fail(p, "isend", r);
  p->sreq = req;
  *posted = req != NULL;
  return 0;
}

static int test_req(struct kv_ping *p, void **req, int *got) {
  if (*req == NULL) return 1;
  int done = 0;
  ncclResult_t r = p->net->ops->test(p->net, *req, &done, got);
  if (r != ncclSuccess) return ping_fail(p, "test", r);
  if (done) *req = NULL;
  return done;
}

/* One non-blocking step; *progress set when something moved. */
static int ping_step(void *arg, int *progress) {
  struct kv_ping *p = arg;
  int ok, got = -1;
  if (p->state == P_FINISHED) return 0;
  if (atomic_load(&p->abort)) {
    snprintf(p->why, sizeof p->why, "stream abandoned: the bulk transfer failed");
    return -1;
  }
  if (now_s() > p->deadline) {
    snprintf(p->why, sizeof p->why, "%s stream stuck (state %d, %ld done)",
             p->pinger ? "ping" : "echo", p->state, p->seq);
    return -1;
  }
  switch (p->state) {
    case P_START: {
      int bs = p->bulk_state ? atomic_load(p->bulk_state) : 0;
      if (p->with_bulk && bs == 0) return 0; /* wait for the bulk to start */
      if ((p->with_bulk && bs == 2) || (!p->with_bulk && p->seq >= p->count)) {
        p->state = P_STOP;
        return 0;
      }
      if (p->rreq == NULL) {
        int posted = 0;
        if (post_recv(p, p->seq, &posted) != 0) return -1;
        if (!posted) return 0;
      }
      if (p->verify) pattern_fill(p->sbuf, p->wire, ping_key(p, p->seq));
      p->bulk_at_start = bs;
      p->t0 = now_s();
      int posted = 0;
      if (post_send(p, p->sbuf, p->wire, &posted) != 0) return -1;
      if (!posted) return 0; /* the receive stays posted; retry the send */
      p->state = P_WAIT;
      *progress = 1;
      return 0;
    }
    case P_WAIT: {
      if ((ok = test_req(p, &p->sreq, NULL)) < 0) return -1;
      int rdone = test_req(p, &p->rreq, &got);
      if (rdone < 0) return -1;
      if (!ok || !rdone) return 0;
      double t1 = now_s();
      if ((size_t)got != p->wire) {
        snprintf(p->why, sizeof p->why, "pong %ld: %d bytes, expected %zu", p->seq, got, p->wire);
        return -1;
      }
      if (p->verify &&
          pattern_check(p->rbuf[p->seq % 2], p->wire, ping_key(p, p->seq)) != (size_t)-1) {
        snprintf(p->why, sizeof p->why, "pong %ld: data differs", p->seq);
        return -1;
      }
      int bs = p->bulk_state ? atomic_load(p->bulk_state) : 0;
      if (!p->with_bulk || (p->bulk_at_start == 1 && bs == 1)) {
        if (p->n == p->cap) {
          long cap = p->cap ? p->cap * 2 : 4096;
          double *x = realloc(p->rtt_us, sizeof(double) * (size_t)cap);
          if (x == NULL) return -1;
          p->rtt_us = x;
          p->cap = cap;
        }
        p->rtt_us[p->n++] = (t1 - p->t0) * 1e6;
      } else {
        p->outside++;
      }
      p->seq++;
      p->state = P_START;
      *progress = 1;
      return 0;
    }
    case P_STOP: {
      /* a zero-byte message ends the echo loop; our posted pong buffer is
       * left to close() (NCCL may close with receives outstanding) */
      if (p->sreq == NULL) {
        int posted = 0;
        if (post_send(p, p->sbuf, 0, &posted) != 0) return -1;
        if (!posted) return 0;
      }
      if ((ok = test_req(p, &p->sreq, NULL)) < 0) return -1;
      if (ok) p->state = P_FINISHED;
      *progress = 1;
      return 0;
    }
    case E_POST: {
      int posted = 0;
      if (post_recv(p, p->seq, &posted) != 0) return -1;
      if (posted) p->state = E_WAIT, *progress = 1;
      return 0;
    }
    case E_WAIT: {
      if ((ok = test_req(p, &p->rreq, &got)) < 0) return -1;
      if (!ok) return 0;
      *progress = 1;
      if (got == 0) {
        p->state = P_FINISHED;
        return 0;
      }
      unsigned char *buf = p->rbuf[p->seq % 2];
      if ((size_t)got != p->wire ||
          (p->verify && pattern_check(buf, p->wire, ping_key(p, p->seq)) != (size_t)-1)) {
        snprintf(p->why, sizeof p->why, "ping %ld: %d bytes or data differs", p->seq, got);
        return -1;
      }
      /* the next receive goes up before the reply, as a posted ncclRecv */
      int posted = 0;
      if (post_recv(p, p->seq + 1, &posted) != 0) return -1;
      if (!posted) {
        snprintf(p->why, sizeof p->why, "echo: irecv asked to retry with nothing outstanding");
        return -1;
      }
      p->state = E_SEND;
      return 0;
    }
    case E_SEND: {
      if (p->sreq == NULL) {
        int posted = 0;
        if (post_send(p, p->rbuf[p->seq % 2], p->wire, &posted) != 0) return -1;
        if (!posted) return 0;
        *progress = 1;
      }
      if ((ok = test_req(p, &p->sreq, NULL)) < 0) return -1;
      if (!ok) return 0;
      p->seq++;
      p->state = E_WAIT;
      *progress = 1;
      return 0;
    }
    case P_FINISHED:
      return 0;
  }
  return 0;
}

static void *ping_thread(void *arg) {
  struct kv_ping *p = arg;
  while (p->state != P_FINISHED) {
    int progress = 0;
    if (ping_step(p, &progress) != 0) {
      if (p->why[0] == '\0') snprintf(p->why, sizeof p->why, "stream failed");
      return p;
    }
    if (!progress) sched_yield();
  }
  return NULL;
}

struct ping_summary {
  long n, outside;
  double p50, p99, max, mean;
  int ok;
  char why[200];
};

int kv_run_ping(int side, int is_send, const struct kv_case *bulk, const struct kv_nccl *m,
                struct kv_net *net, struct kv_net *small_net, const struct kv_run_opts *o,
                const struct kv_ping_opts *po, struct kv_ping_result *res) {
  struct kv_ping p;
  memset(&p, 0, sizeof p);
  memset(res, 0, sizeof *res);
  p.net = small_net;
  p.pinger = is_send;
  p.ll = m->ll && po->size <= KV_LL_THRESHOLD;
  p.wire = p.ll ? ((po->size * 2 + 15) & ~(size_t)15) : po->size;
  p.post = p.ll ? KV_LL_STEP_BYTES : (po->size > m->chunk ? po->size : m->chunk);
  p.version = o->version;
  p.verify = o->verify;
  p.seed = o->seed;
  p.count = po->count;
  p.with_bulk = po->with_bulk;
  p.state = is_send ? P_START : E_POST;
  struct kv_net *sn = small_net;
  _Atomic int bulk_state = 0;
  p.bulk_state = &bulk_state;
  char why[256] = "";
  int rc = -1;
  pthread_t tid;
  int started = 0;
  void *c1 = NULL, *c2 = NULL;
  /* forward comm (listened by the echo side), then the reply comm */
  if (kv_connect_comms(side, sn, !is_send, 1, &c1, 60, why, sizeof why) != 0 ||
      kv_connect_comms(side, sn, is_send, 1, &c2, 60, why, sizeof why) != 0)
    goto out;
  p.scomm = is_send ? c1 : c2;
  p.rcomm = is_send ? c2 : c1;
  size_t bytes = p.post + 64;
  if (posix_memalign((void **)&p.sbuf, 4096, 3 * bytes) != 0) goto out;
  memset(p.sbuf, 0, 3 * bytes);
  p.rbuf[0] = p.sbuf + bytes;
  p.rbuf[1] = p.sbuf + 2 * bytes;
  ncclResult_t r;
  if ((r = sn->ops->regmr(sn, p.scomm, p.sbuf, 3 * bytes, &p.smh)) != ncclSuccess ||
      (r = sn->ops->regmr(sn, p.rcomm, p.sbuf, 3 * bytes, &p.rmh)) != ncclSuccess) {
    snprintf(why, sizeof why, "regMr: %s", rn_result_str(r));
    goto out;
  }
  p.deadline = now_s() + o->timeout_s;
  if (kv_side_sync(side, 60) != 0) {
    snprintf(why, sizeof why, "side channel: barrier before the stream failed");
    goto out;
  }
  if (!po->with_bulk) {
    if (ping_thread(&p) != NULL) {
      snprintf(why, sizeof why, "%s", p.why);
      goto out;
    }
  } else {
    struct kv_run_opts bo = *o;
    bo.bulk_state = &bulk_state;
    if (po->same_thread) {
      bo.hook = ping_step;
      bo.hook_arg = &p;
    } else {
      if (pthread_create(&tid, NULL, ping_thread, &p) != 0) {
        snprintf(why, sizeof why, "pthread_create failed");
        goto out;
      }
      started = 1;
    }
    int brc = kv_run_case(side, is_send, bulk, m, net, &bo, is_send ? NULL : &res->bulk);
    if (brc != 0) atomic_store(&p.abort, 1);
    atomic_store(&bulk_state, 2);
    void *fail = NULL;
    if (started) {
      pthread_join(tid, &fail);
      started = 0;
    } else if (brc == 0) {
      /* the bulk is done; finish the stream (the stop message) here */
      fail = ping_thread(&p);
    }
    if (brc != 0) {
      snprintf(why, sizeof why, "bulk: %.240s", is_send ? "failed" : res->bulk.why);
      goto out;
    }
    if (fail != NULL) {
      snprintf(why, sizeof why, "%s", p.why);
      goto out;
    }
  }
  /* the pinger's figures go to the receiver, which reports */
  struct ping_summary sum;
  memset(&sum, 0, sizeof sum);
  if (is_send) {
    if (p.n > 0) qsort(p.rtt_us, (size_t)p.n, sizeof(double), kv_cmp_double);
    sum.n = p.n;
    sum.outside = p.outside;
    sum.p50 = kv_percentile(p.rtt_us, p.n, 0.50);
    sum.p99 = kv_percentile(p.rtt_us, p.n, 0.99);
    sum.max = p.n ? p.rtt_us[p.n - 1] : 0;
    double s = 0;
    for (long i = 0; i < p.n; i++) s += p.rtt_us[i];
    sum.mean = p.n ? s / (double)p.n : 0;
    sum.ok = 1;
    if (kv_side_write(side, &sum, sizeof sum) != 0) {
      snprintf(why, sizeof why, "side channel: stream figures not sent");
      goto out;
    }
  } else {
    if (kv_side_read(side, &sum, sizeof sum, 60) != 0 || !sum.ok) {
      snprintf(why, sizeof why, "side channel: no stream figures from the sender");
      goto out;
    }
    res->n = sum.n;
    res->n_outside = sum.outside;
    res->p50_us = sum.p50;
    res->p99_us = sum.p99;
    res->max_us = sum.max;
    res->mean_us = sum.mean;
  }
  if (kv_side_sync(side, 60) != 0) {
    snprintf(why, sizeof why, "side channel: barrier after the stream failed");
    goto out;
  }
  rc = 0;
out:
  if (started) {
    atomic_store(&p.abort, 1); /* make the thread give up */
    pthread_join(tid, NULL);
  }
  if (p.smh) sn->ops->deregmr(sn, p.scomm, p.smh);
  if (p.rmh) sn->ops->deregmr(sn, p.rcomm, p.rmh);
  if (c1) (is_send ? sn->ops->close_send : sn->ops->close_recv)(sn, c1);
  if (c2) (is_send ? sn->ops->close_recv : sn->ops->close_send)(sn, c2);
  free(p.sbuf);
  free(p.rtt_us);
  if (rc != 0) {
    if (!is_send) snprintf(res->bulk.why, sizeof res->bulk.why, "%s", why);
    diag("kvbench: W4 %s side: %s", is_send ? "send" : "receive", why);
  }
  return rc;
}
