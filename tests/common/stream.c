/* Message streams over one comm: post, test in a chosen order, verify. */
#include "rn_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_BYTE 0xA5
#define GUARD_SPAN 4096

int rn_stream_setup(struct rn_stream *s) {
  struct rn_peer *p = s->p;
  if (s->single_buffer) s->verify = 0;
  if (s->window < 1 || s->window > RN_STREAM_MAX_WINDOW)
    return peer_fail(p, "stream window %d out of range", s->window);
  size_t maxsz = 1;
  for (int i = 0; i < s->nmsg; i++) {
    size_t z = s->post_sizes && !s->is_send ? s->post_sizes[i] : s->sizes[i];
    if (z > maxsz) maxsz = z;
  }
  s->slot_bytes = (maxsz + 4095) & ~(size_t)4095;
  size_t total = s->slot_bytes * (size_t)(s->single_buffer ? 1 : s->window);
  if (posix_memalign((void **)&s->arena, 4096, total) != 0)
    return peer_fail(p, "cannot allocate %zu bytes", total);
  memset(s->arena, 0, total);
  s->mh = NULL;
  ncclResult_t r = rn_net_regmr(&p->net, s->comm, s->arena, total, NCCL_PTR_HOST, &s->mh);
  if (r != ncclSuccess) {
    free(s->arena);
    s->arena = NULL;
    return peer_fail(p, "regMr(%zu bytes, HOST): %s", total, rn_result_str(r));
  }
  for (int i = 0; i < RN_STREAM_MAX_WINDOW; i++) s->req[i] = NULL, s->req_seq[i] = -1;
  s->next_post = s->ncomplete = s->null_posts = s->max_inflight = 0;
  s->rng = s->seed ^ 0x5eed;
  s->bytes_done = 0;
  return 0;
}

int rn_stream_teardown(struct rn_stream *s) {
  int rc = 0;
  if (s->mh != NULL) {
    ncclResult_t r = rn_net_deregmr(&s->p->net, s->comm, s->mh);
    if (r != ncclSuccess) rc = peer_fail(s->p, "deregMr: %s", rn_result_str(r));
    s->mh = NULL;
  }
  free(s->arena);
  s->arena = NULL;
  return rc;
}

static int tag_of(int seq) { return 0x100 + (seq & 0xff); }

/* Post as many as the window allows; a NULL request means "retry later". */
static int post_some(struct rn_stream *s) {
  struct rn_peer *p = s->p;
  while (s->next_post < s->nmsg) {
    int seq = s->next_post;
    int slot = seq % s->window;
    if (s->req_seq[slot] != -1) break;
    unsigned char *buf = s->arena + (s->single_buffer ? 0 : (size_t)slot * s->slot_bytes);
    size_t sz = s->sizes[seq];
    void *req = NULL;
    ncclResult_t r;
    if (s->is_send) {
      if (s->verify && s->req[slot] == NULL)
        pattern_fill(buf, sz, pattern_key(s->seed, (uint64_t)seq, sz));
      r = rn_net_isend(&p->net, s->comm, buf, sz, tag_of(seq), s->mh, &req);
      if (r != ncclSuccess)
        return peer_fail(p, "isend(seq %d, %zu B): %s", seq, sz, rn_result_str(r));
    } else {
      size_t psz = s->post_sizes ? s->post_sizes[seq] : sz;
      if (s->verify) {
        size_t g = psz < sz + GUARD_SPAN ? psz : sz + GUARD_SPAN;
        memset(buf, GUARD_BYTE, g);
      }
      void *data = buf;
      int tag = tag_of(seq);
      r = rn_net_irecv(&p->net, s->comm, 1, &data, &psz, &tag, &s->mh, &req);
      if (r != ncclSuccess)
        return peer_fail(p, "irecv(seq %d, %zu B): %s", seq, psz, rn_result_str(r));
    }
    if (req == NULL) {
      s->null_posts++;
      /* the fill is already done; remember that with a marker */
      s->req[slot] = s->verify && s->is_send ? (void *)1 : NULL;
      break;
    }
    s->req[slot] = req;
    s->req_seq[slot] = seq;
    s->next_post++;
  }
  return 0;
}

static int complete(struct rn_stream *s, int slot, int got) {
  struct rn_peer *p = s->p;
  int seq = s->req_seq[slot];
  size_t sz = s->sizes[seq];
  /* a receive reports the size sent, a send its own, as NCCL's transports do */
  if (!s->null_sizes && (size_t)got != sz)
    return peer_fail(p, "seq %d: test() of a %s reported %d bytes, sent %zu", seq,
                     s->is_send ? "send" : "receive", got, sz);
  if (!s->is_send) {
    if (s->verify) {
      unsigned char *buf = s->arena + (size_t)slot * s->slot_bytes;
      size_t bad = pattern_check(buf, sz, pattern_key(s->seed, (uint64_t)seq, sz));
      if (bad != (size_t)-1)
        return peer_fail(p, "seq %d (%zu B): byte %zu differs (got 0x%02x)", seq, sz, bad,
                         buf[bad]);
      size_t psz = s->post_sizes ? s->post_sizes[seq] : sz;
      size_t g = psz < sz + GUARD_SPAN ? psz : sz + GUARD_SPAN;
      for (size_t i = sz; i < g; i++)
        if (buf[i] != GUARD_BYTE)
          return peer_fail(p,
                           "seq %d: %zu B message wrote past its end at byte %zu of a %zu B buffer",
                           seq, sz, i, psz);
    }
  }
  s->bytes_done += sz;
  s->req[slot] = NULL;
  s->req_seq[slot] = -1;
  s->ncomplete++;
  return 0;
}

int rn_stream_step(struct rn_stream *s) {
  struct rn_peer *p = s->p;
  if (s->ncomplete == s->nmsg) return 1;
  if (s->post_all_first && s->next_post < s->window && s->next_post < s->nmsg) {
    /* fill the window before testing anything; a NULL request ("retry
     * later") falls through to one round of tests, as NCCL's proxy would */
    int before = s->null_posts;
    if (post_some(s) != 0) return -1;
    if (s->next_post - s->ncomplete > s->max_inflight)
      s->max_inflight = s->next_post - s->ncomplete;
    if (s->null_posts == before) return 0;
  }
  if (post_some(s) != 0) return -1;
  if (s->next_post - s->ncomplete > s->max_inflight) s->max_inflight = s->next_post - s->ncomplete;
  int order[RN_STREAM_MAX_WINDOW];
  int n = 0;
  /* slots holding a request, oldest first */
  for (int k = 0; k < s->window; k++) {
    int seq = s->next_post - s->window + k;
    if (seq < 0) continue;
    int slot = seq % s->window;
    if (s->req_seq[slot] == seq) order[n++] = slot;
  }
  if (s->order == RN_ORDER_REVERSE) {
    for (int i = 0; i < n / 2; i++) {
      int t = order[i];
      order[i] = order[n - 1 - i];
      order[n - 1 - i] = t;
    }
  } else if (s->order == RN_ORDER_RANDOM) {
    for (int i = n - 1; i > 0; i--) {
      int j = (int)(rng_next(&s->rng) % (uint64_t)(i + 1));
      int t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
  }
  for (int i = 0; i < n; i++) {
    int slot = order[i];
    int done = 0, got = -1;
    ncclResult_t r = rn_net_test(&p->net, s->req[slot], &done, s->null_sizes ? NULL : &got);
    if (r != ncclSuccess)
      return peer_fail(p, "test(%s seq %d, %zu B): %s", s->is_send ? "send" : "recv",
                       s->req_seq[slot], s->sizes[s->req_seq[slot]], rn_result_str(r));
    if (done && complete(s, slot, got) != 0) return -1;
  }
  return s->ncomplete == s->nmsg ? 1 : 0;
}

int rn_stream_run(struct rn_stream *s, double timeout_s) {
  if (rn_stream_setup(s) != 0) return -1;
  double end = rn_deadline(timeout_s);
  int rc;
  long spins = 0;
  while ((rc = rn_stream_step(s)) == 0) {
    /* the clock every 64 passes: in the Soft-RoCE VM a read is a system call */
    if (++spins % 64 == 0 && now_s() > end) {
      rc = peer_fail(s->p, "%s stream: %d of %d messages done after %.0f s (posted %d)",
                     s->is_send ? "send" : "recv", s->ncomplete, s->nmsg, rn_bound_s(timeout_s),
                     s->next_post);
      break;
    }
    if (spins % 1024 == 0) sleep_us(10);
  }
  int trc = rn_stream_teardown(s);
  return rc < 0 ? -1 : trc;
}

int rn_stream_check(struct rn_peer *p, void *comm, int is_send) {
  static const size_t sizes[] = {100, 70000, 1 << 20, 0};
  struct rn_stream s = {.p = p,
                        .comm = comm,
                        .is_send = is_send,
                        .nmsg = 4,
                        .sizes = sizes,
                        .window = 2,
                        .verify = 1,
                        .seed = p->seed};
  return rn_stream_run(&s, 20);
}
