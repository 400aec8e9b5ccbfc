/* What NCCL does with a point-to-point op between two nodes, reduced to
 * what the net plugin sees: how many messages of which sizes on which
 * channel, and what the receiver posts.  The rules follow NCCL 2.28's
 * src/enqueue.cc (addP2pToPlan), src/include/device.h (ncclP2pPartBounds)
 * and src/transport/net.cc (shared p2p buffers); they are restated here,
 * not copied.
 *
 *   - channels: an op of B bytes uses n = min(C, ceil(B / (chunk/2)))
 *     channels (at least 1): ops up to 64 KiB use a single channel, so the
 *     small ncclSends of one peer all go down the same channel;
 *   - protocol: LL when B <= n * 16 KiB, else Simple;
 *   - parts: ceil(B / n) rounded up to 4 KiB per channel (the last part
 *     takes the rest, an empty part sends nothing);
 *   - steps: Simple cuts a part into chunk/4 pieces when B < chunk,
 *     chunk/2 when B < 8 chunks, else chunk; LL carries 16 KiB of data per
 *     step in 32 KiB on the wire (16-byte lines of 8 data bytes);
 *   - receive buffers: the receiver posts a full shared-buffer slot per
 *     step (chunk bytes for Simple, 64 KiB for LL), larger than most
 *     messages; test() reports the real size;
 *   - depth: min(NCCL_STEPS, 16 / nsubs) steps in flight per channel, where
 *     nsubs is the number of peers whose ops share the channel's proxy op. */
#include "kv.h"

#include <stdio.h>
#include <string.h>

static size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }
static size_t align_up(size_t a, size_t b) { return div_up(a, b) * b; }

int kv_depth(const struct kv_nccl *m, int nsubs) {
  int d = KV_SHARED_STEPS / (nsubs > 0 ? nsubs : 1);
  if (d > m->steps) d = m->steps;
  return d < 1 ? 1 : d;
}

static void part_steps(struct kv_part *p, size_t data, size_t chunk_data, int ll, size_t post) {
  p->data = data;
  p->ll = ll;
  p->post = post;
  if (data == 0) {
    p->nsteps = 1;
    p->step = p->last = 0;
    return;
  }
  p->nsteps = (int)div_up(data, chunk_data);
  size_t last_data = data - (size_t)(p->nsteps - 1) * chunk_data;
  if (ll) {
    p->step = align_up(chunk_data * 2, 16);
    p->last = align_up(last_data * 2, 16);
  } else {
    p->step = chunk_data;
    p->last = last_data;
  }
}

int kv_op_parts(const struct kv_nccl *m, size_t bytes, struct kv_part *parts) {
  size_t min_part = m->chunk / 2;
  int nch = 1;
  if (bytes > 0) {
    size_t want = div_up(bytes, min_part);
    nch = want < (size_t)m->channels ? (int)want : m->channels;
    if (nch < 1) nch = 1;
  }
  int ll = m->ll && bytes <= (size_t)nch * KV_LL_THRESHOLD;
  size_t chunk_data;
  if (ll) {
    chunk_data = KV_LL_STEP_DATA;
  } else {
    chunk_data = m->chunk;
    if (bytes < m->chunk)
      chunk_data = m->chunk / 4;
    else if (bytes < 8 * m->chunk)
      chunk_data = m->chunk / 2;
  }
  size_t post = ll ? KV_LL_STEP_BYTES : m->chunk;
  if (bytes == 0) {
    parts[0].channel = 0;
    part_steps(&parts[0], 0, chunk_data, ll, post);
    return 1;
  }
  size_t part_bytes = align_up(div_up(bytes, (size_t)nch), 4 * KV_KIB);
  int n = 0;
  for (int p = 0; p < nch; p++) {
    size_t beg = (size_t)p * part_bytes, end = (size_t)(p + 1) * part_bytes;
    if (beg > bytes) beg = bytes;
    if (end > bytes) end = bytes;
    if (end == beg) continue; /* NCCL adds no proxy op for an empty part */
    parts[n].channel = p;
    part_steps(&parts[n], end - beg, chunk_data, ll, post);
    n++;
  }
  return n;
}

int kv_stream_parts(const struct kv_nccl *m, size_t msg, long nmsgs, struct kv_part *parts) {
  int n = 0;
  for (int ch = 0; ch < m->channels; ch++) {
    long k = nmsgs / m->channels + (ch < nmsgs % m->channels ? 1 : 0);
    if (k == 0) continue;
    parts[n].channel = ch;
    parts[n].nsteps = (int)k;
    parts[n].data = msg * (size_t)k;
    parts[n].step = parts[n].last = msg;
    parts[n].post = msg > m->chunk ? msg : m->chunk;
    parts[n].ll = 0;
    n++;
  }
  return n;
}

void kv_case_finish(struct kv_case *c, const struct kv_nccl *m) {
  if (c->shape == KV_PIPELINED)
    c->nparts = kv_stream_parts(m, c->block, c->blocks, c->parts);
  else
    c->nparts = kv_op_parts(m, c->op_bytes, c->parts);
  c->msgs_per_op = 0;
  c->wire_per_op = 0;
  for (int i = 0; i < c->nparts; i++) {
    c->msgs_per_op += c->parts[i].nsteps;
    c->wire_per_op += (size_t)(c->parts[i].nsteps - 1) * c->parts[i].step + c->parts[i].last;
  }
}

long kv_case_requests(const struct kv_case *c) { return (long)c->concurrency * c->nbatches; }
long kv_case_ops(const struct kv_case *c) { return kv_case_requests(c) * c->nops; }

/* Ops are issued batch by batch; inside a batch layer-major (layer l of
 * every request, then layer l+1), as a batched prefill produces them. */
long kv_op_request(const struct kv_case *c, long o) {
  long per_batch = (long)c->concurrency * c->nops;
  long b = o / per_batch, k = o % per_batch;
  return b * c->concurrency + k % c->concurrency;
}

/* Gates: an op may start on either side only once gate(op) is open, and
 * gate g opens when every op with a lower gate has completed at the
 * receiver (which tells the sender over the side channel).  Grouped: one
 * gate per batch.  Ungrouped: one gate per op, i.e. a ncclSend per tensor
 * with a framework handshake between tensors (vLLM's P2P NCCL connector
 * synchronizes its stream after every send and receive). */
long kv_op_gate(const struct kv_case *c, long o) {
  if (c->shape == KV_UNGROUPED) return o + 1;
  return o / ((long)c->concurrency * c->nops) + 1;
}

long kv_case_gates(const struct kv_case *c) {
  return c->shape == KV_UNGROUPED ? kv_case_ops(c) : c->nbatches;
}

uint64_t kv_msg_key(uint64_t seed, int pair, long op, int channel, int step, size_t bytes) {
  uint64_t s = seed ^ ((uint64_t)pair << 56) ^ ((uint64_t)channel << 48) ^ ((uint64_t)op << 20) ^
               (uint64_t)step;
  uint64_t k = rng_next(&s);
  return k ^ pattern_key(seed, (uint64_t)op, bytes);
}

const char *kv_human(size_t s, char *buf, size_t len) {
  if (s >= KV_GIB && s % KV_GIB == 0)
    snprintf(buf, len, "%zu GiB", s / KV_GIB);
  else if (s >= KV_MIB && s % (KV_MIB / 4) == 0)
    snprintf(buf, len, "%g MiB", (double)s / (double)KV_MIB);
  else if (s >= KV_KIB && s % KV_KIB == 0)
    snprintf(buf, len, "%zu KiB", s / KV_KIB);
  else
    snprintf(buf, len, "%zu B", s);
  return buf;
}
