/* railnet-kvbench: disaggregated-inference KV-cache transfers (prefill ->
 * decode) through the ncclNet API, driven as NCCL's proxy drives a net
 * plugin (kv_proxy.c), next to a plain-TCP anchor driven the same way in
 * the same run (kv_tcp.c).  Workloads:
 *   W1 one tensor per layer per request (vLLM's P2P NCCL connector shape),
 *      grouped (the layers of a request in one NCCL group) and ungrouped
 *      (an ncclSend per tensor with a handshake between tensors);
 *   W2 scattered KV blocks of 4-64 KiB, 10^3..10^5 per request;
 *   W3 1..64 requests in flight, 4 -> 1 and 1 -> 4 ranks;
 *   W4 a latency-critical small-message stream alone and next to bulk KV.
 * Two processes: forked on this host (default), or one side each with
 * --listen / --connect (another namespace or host).  Prints one table per
 * workload; --json for machines, --plot FILE.png for a picture. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv.h"
#include "kv_report.h"

#define KV_EXIT_FAIL 1
#define KV_EXIT_USAGE 2
#define KV_EXIT_PLOT 3

enum kv_level { LV_SMOKE = 0, LV_QUICK = 1, LV_FULL = 2 };

struct kv_opts {
  enum kv_level level;
  int verify;         /* -1: on for --quick/--smoke */
  unsigned workloads; /* bit w: Ww */
  int modes;          /* bit 0 grouped, bit 1 ungrouped */
  int models;         /* bit 0 8B, bit 1 70B/TP8 */
  long tokens[16];
  int ntokens;
  int layers; /* 0: the model's */
  size_t block_sizes[8];
  int nblock_sizes;
  long block_counts[8];
  int nblock_counts;
  int w2_shapes; /* bit 0 per-op, bit 1 pipelined */
  long requests;
  struct kv_nccl m;
  int version, dev;
  int anchor, anchor_streams;
  int railnet; /* 0: --transports tcp (the anchor alone, for profiling) */
  const char *json, *plot;
  const char *listen, *connect;
  int role; /* -1 auto, 0 recv, 1 send */
  int tc_bulk, tc_small;
  size_t w4_size;
  double timeout;
  uint64_t seed;
  int self_test;
  int detail;
  int rounds; /* 0: 4 in a full run, 2 in --quick */
};

static struct kv_opts opt;

/* ---- the plan: every row both sides run, in order ------------------------- */
struct kv_plan {
  struct kv_case rows[256];
  int nrows;
  struct kv_case w4bulk;
  int have_w4;
  long w4_pings;
  double w4_target_s;
};

static long clampl(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

static void add_row(struct kv_plan *pl, const struct kv_case *c) {
  if (pl->nrows < (int)(sizeof pl->rows / sizeof pl->rows[0])) {
    pl->rows[pl->nrows] = *c;
    kv_case_finish(&pl->rows[pl->nrows], &opt.m);
    pl->nrows++;
  }
}

static void add_w1(struct kv_plan *pl, const char *model, size_t bpt, int layers, long tokens,
                   enum kv_shape shape) {
  struct kv_case c;
  memset(&c, 0, sizeof c);
  c.workload = 1;
  c.senders = c.receivers = 1;
  c.shape = shape;
  c.nops = opt.layers ? opt.layers : layers;
  c.op_bytes = bpt * (size_t)tokens;
  c.concurrency = 1;
  c.model = model;
  c.tokens = tokens;
  double req = (double)c.op_bytes * c.nops;
  static const double budget[] = {8.0 * KV_MIB, 256.0 * KV_MIB, 2.0 * KV_GIB};
  static const long lo[] = {2, 3, 3}, hi[] = {2, 20, 100};
  long n = (long)(budget[opt.level] / req + 0.999);
  c.nbatches = (int)(opt.requests > 0 ? opt.requests : clampl(n, lo[opt.level], hi[opt.level]));
  snprintf(c.label, sizeof c.label, "%s %ld tok %s%s", model, tokens,
           shape == KV_GROUPED ? "grouped" : "ungrouped",
           opt.layers ? (opt.layers == 1 ? " 1 layer" : " (layers set)") : "");
  add_row(pl, &c);
}

static void add_w2(struct kv_plan *pl, size_t block, long blocks, enum kv_shape shape) {
  struct kv_case c;
  memset(&c, 0, sizeof c);
  c.workload = 2;
  c.senders = c.receivers = 1;
  c.shape = shape;
  c.block = block;
  c.blocks = blocks;
  if (shape == KV_PIPELINED) {
    c.nops = 1;
    c.op_bytes = block * (size_t)blocks;
  } else {
    c.nops = (int)blocks;
    c.op_bytes = block;
  }
  c.concurrency = 1;
  static const long budget[] = {1, 4000, 200000}, lo[] = {1, 2, 3}, hi[] = {1, 10, 50};
  c.nbatches =
      (int)(opt.requests > 0 ? opt.requests
                             : clampl(budget[opt.level] / blocks, lo[opt.level], hi[opt.level]));
  char hb[32];
  snprintf(c.label, sizeof c.label, "%s x %ld %s", kv_human(block, hb, sizeof hb), blocks,
           shape == KV_PIPELINED ? "pipelined" : "per-op");
  add_row(pl, &c);
}

static void add_w3(struct kv_plan *pl, int S, int R, int conc, long tokens, int layers,
                   long min_requests) {
  struct kv_case c;
  memset(&c, 0, sizeof c);
  c.workload = 3;
  c.senders = S;
  c.receivers = R;
  c.shape = KV_GROUPED;
  c.nops = opt.layers ? opt.layers : layers;
  c.op_bytes = 512 * (size_t)tokens; /* 70B at TP8: 512 B per token, layer and rank pair */
  c.concurrency = conc;
  c.model = "70B/TP8";
  c.tokens = tokens;
  c.nbatches = (int)clampl((min_requests + conc - 1) / conc, 1, 1000);
  if (opt.requests > 0) c.nbatches = (int)clampl(opt.requests / conc, 1, 1000);
  snprintf(c.label, sizeof c.label, "%d->%d x%d in flight, %ld tok", S, R, conc, tokens);
  add_row(pl, &c);
}

static void build_plan(struct kv_plan *pl) {
  memset(pl, 0, sizeof *pl);
  static const long tok_full[] = {512, 2048, 8192, 12288, 32768}, tok_quick[] = {512, 12288},
                    tok_smoke[] = {256, 2048};
  const long *toks = opt.level == LV_FULL    ? tok_full
                     : opt.level == LV_QUICK ? tok_quick
                                             : tok_smoke;
  int ntok = opt.level == LV_FULL ? 5 : 2;
  if (opt.ntokens) toks = opt.tokens, ntok = opt.ntokens;
  if (opt.workloads & 2) {
    for (int mi = 0; mi < 2; mi++) {
      if (!(opt.models & (1 << mi))) continue;
      for (int t = 0; t < ntok; t++)
        for (int s = 0; s < 2; s++) {
          if (!(opt.modes & (1 << s))) continue;
          /* the quick run keeps 8B to its middle size */
          if (mi == 0 && opt.level == LV_QUICK && !opt.ntokens && toks[t] != 512) continue;
          if (mi == 0)
            add_w1(pl, "8B", 4096, opt.level == LV_SMOKE ? 4 : 32, toks[t], (enum kv_shape)s);
          else
            add_w1(pl, "70B/TP8", 512, opt.level == LV_SMOKE ? 8 : 80, toks[t], (enum kv_shape)s);
        }
    }
  }
  if (opt.workloads & 4) {
    static const size_t bs_full[] = {4 * KV_KIB, 16 * KV_KIB, 64 * KV_KIB},
                        bs_quick[] = {4 * KV_KIB, 64 * KV_KIB};
    const size_t *bs = opt.level == LV_FULL ? bs_full : bs_quick;
    int nbs = opt.level == LV_FULL ? 3 : 2;
    long counts_full[] = {1000, 10000}, counts_quick[] = {1000}, counts_smoke[] = {200};
    long *counts = opt.level == LV_FULL    ? counts_full
                   : opt.level == LV_QUICK ? counts_quick
                                           : counts_smoke;
    int ncounts = opt.level == LV_FULL ? 2 : 1;
    if (opt.nblock_sizes) bs = opt.block_sizes, nbs = opt.nblock_sizes;
    if (opt.nblock_counts) counts = opt.block_counts, ncounts = opt.nblock_counts;
    for (int shape = 0; shape < 2; shape++)
      for (int b = 0; b < nbs; b++)
        for (int k = 0; k < ncounts; k++)
          if (opt.w2_shapes & (1 << shape))
            add_w2(pl, bs[b], counts[k], shape ? KV_PIPELINED : KV_GROUPED);
    if (opt.level == LV_FULL && !opt.nblock_sizes && !opt.nblock_counts && opt.w2_shapes == 3) {
      add_w2(pl, 16 * KV_KIB, 100000, KV_GROUPED);
      add_w2(pl, 16 * KV_KIB, 100000, KV_PIPELINED);
    }
  }
  if (opt.workloads & 8) {
    long tok = opt.level == LV_FULL ? 2048 : opt.level == LV_QUICK ? 512 : 128;
    int layers = opt.level == LV_SMOKE ? 4 : 80;
    long minreq = opt.level == LV_FULL ? 16 : opt.level == LV_QUICK ? 4 : 1;
    static const int conc_full[] = {1, 4, 16, 64}, conc_quick[] = {1, 16}, conc_smoke[] = {1, 4};
    const int *conc = opt.level == LV_FULL    ? conc_full
                      : opt.level == LV_QUICK ? conc_quick
                                              : conc_smoke;
    int nconc = opt.level == LV_FULL ? 4 : 2;
    for (int i = 0; i < nconc; i++) add_w3(pl, 1, 1, conc[i], tok, layers, minreq);
    add_w3(pl, 4, 1, 1, tok, layers, minreq);
    add_w3(pl, 1, 4, 1, tok, layers, minreq);
    if (opt.level == LV_FULL) {
      add_w3(pl, 4, 1, 8, tok, layers, minreq);
      add_w3(pl, 1, 4, 8, tok, layers, minreq);
    }
  }
  if (opt.workloads & 16) {
    struct kv_case *c = &pl->w4bulk;
    memset(c, 0, sizeof *c);
    c->workload = 4;
    c->senders = c->receivers = 1;
    c->shape = KV_GROUPED;
    c->nops = opt.level == LV_SMOKE ? 8 : 80;
    c->tokens = opt.level == LV_FULL ? 8192 : opt.level == LV_QUICK ? 2048 : 256;
    c->op_bytes = 512 * (size_t)c->tokens;
    c->concurrency = 1;
    c->nbatches = 1;
    c->model = "70B/TP8";
    snprintf(c->label, sizeof c->label, "70B/TP8 %ld-token requests, grouped, back to back",
             c->tokens);
    kv_case_finish(c, &opt.m);
    pl->have_w4 = 1;
    pl->w4_pings = opt.level == LV_FULL ? 5000 : opt.level == LV_QUICK ? 1000 : 100;
    pl->w4_target_s = opt.level == LV_FULL ? 3.0 : opt.level == LV_QUICK ? 0.6 : 0.15;
  }
}

static void mix(uint64_t *h, uint64_t x) {
  *h ^= x;
  *h *= 1099511628211ull;
}

static uint64_t plan_hash(const struct kv_plan *pl) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < pl->nrows; i++) {
    const struct kv_case *c = &pl->rows[i];
    for (const char *s = c->label; *s; s++) mix(&h, (uint64_t)*s);
    const uint64_t v[] = {(uint64_t)c->senders,  (uint64_t)c->receivers,
                          (uint64_t)c->shape,    (uint64_t)c->nops,
                          c->op_bytes,           (uint64_t)c->concurrency,
                          (uint64_t)c->nbatches, (uint64_t)c->msgs_per_op};
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) mix(&h, v[k]);
  }
  const uint64_t g[] = {(uint64_t)pl->have_w4,
                        pl->w4bulk.op_bytes,
                        (uint64_t)pl->w4_pings,
                        opt.m.chunk,
                        (uint64_t)opt.m.channels,
                        (uint64_t)opt.m.steps,
                        (uint64_t)opt.m.ll,
                        (uint64_t)opt.m.shared_comms,
                        (uint64_t)opt.verify,
                        (uint64_t)opt.version,
                        (uint64_t)(opt.anchor * 2 + opt.railnet),
                        (uint64_t)opt.rounds,
                        opt.w4_size,
                        opt.seed};
  for (size_t k = 0; k < sizeof g / sizeof g[0]; k++) mix(&h, g[k]);
  return h;
}

/* ---- one side ------------------------------------------------------------ */
struct kv_hello {
  uint64_t magic, hash;
  int32_t version, pid;
  char host[64];
};

static void make_header(struct kv_report *rep, const struct kv_plan *pl, const char *peer,
                        int maxrecvs) {
  char load[64];
  rn_loadavg(load, sizeof load);
  const char *tr = getenv("RAILNET_TRANSPORT"), *ifn = getenv("RAILNET_SOCKET_IFNAME");
  char hb[32];
  snprintf(
      rep->header, sizeof rep->header,
      "# railnet-kvbench: %s via ncclNetPlugin_v%d, RAILNET_TRANSPORT=%s, "
      "RAILNET_SOCKET_IFNAME=%s, %ld CPUs, loadavg %s\n"
      "# two processes: %s; %d rows%s; verify %s\n"
      "# proxy model: %d p2p channels per peer, %s chunks (NCCL_P2P_NET_CHUNKSIZE), %d steps "
      "in flight (NCCL_STEPS; 16/peers for ops of several peers), %s, %s; railnet maxRecvs "
      "%d\n"
      "# anchor: %s\n"
      "# times per request from the receiver's release of the request to its last message; "
      "ratios are railnet / anchor in this run\n",
      rn_plugin_path(), opt.version, tr ? tr : "auto", ifn ? ifn : "(default)",
      sysconf(_SC_NPROCESSORS_ONLN), load, peer, pl->nrows + (pl->have_w4 ? 1 : 0),
      opt.level == LV_FULL ? "" : (opt.level == LV_QUICK ? " (--quick)" : " (--smoke)"),
      opt.verify ? "on (every byte of every message; timings include the pattern work)" : "off",
      opt.m.channels, kv_human(opt.m.chunk, hb, sizeof hb), opt.m.steps,
      opt.m.ll ? "LL for ops <= 16 KiB" : "Simple only",
      opt.m.shared_comms ? "shared comms for PXN fan-in" : "no shared comms", maxrecvs,
      opt.anchor ? (opt.anchor_streams > 1
                        ? "plain TCP through the same proxy model, several sockets per comm, "
                          "no clear-to-send"
                        : "plain TCP through the same proxy model (one socket per comm, "
                          "header + payload per message, no clear-to-send)")
                 : "none (--no-anchor): no ratios, no verdicts");
}

static void progress_note(const char *what, const char *label, const char *backend) {
  if (isatty(2)) fprintf(stderr, "\r\033[K# %s %s (%s) ...", what, label, backend);
}

static int run_rows(int side, int is_send, struct kv_plan *pl, struct kv_net *nets[2],
                    struct kv_report *rep, const struct kv_run_opts *ro) {
  for (int i = 0; i < pl->nrows; i++) {
    struct kv_row *row = is_send ? NULL : &rep->rows[i];
    if (row) {
      row->c = pl->rows[i];
      rep->nrows = i + 1;
    }
    /* railnet and the anchor take turns on slices of the row's batches,
     * which goes first alternating, so load that drifts during a row (a
     * shared host) falls on both alike */
    int nb = pl->rows[i].nbatches;
    int rounds = opt.rounds > 0 ? opt.rounds : (opt.level == LV_FULL ? 4 : 2);
    if (rounds > nb) rounds = nb;
    for (int rd = 0; rd < rounds; rd++) {
      struct kv_case part = pl->rows[i];
      part.nbatches = nb / rounds + (rd < nb % rounds ? 1 : 0);
      for (int k = 0; k < 2; k++) {
        int b = ((i + rd) % 2) ? 1 - k : k;
        if ((b == KV_TCP && !opt.anchor) || (b == KV_RN && !opt.railnet)) continue;
        if (!is_send) progress_note("running", pl->rows[i].label, b ? "plain TCP" : "railnet");
        struct kv_result one;
        memset(&one, 0, sizeof one);
        if (kv_run_case(side, is_send, &part, &opt.m, nets[b], ro, row ? &one : NULL) != 0) {
          if (row) {
            diag("railnet-kvbench: %s, %s: %s", pl->rows[i].label, nets[b]->ops->name, one.why);
            if (!row->r[b].ok) row->r[b] = one;
          }
          return -1;
        }
        if (row && kv_result_merge(&row->r[b], &one) != 0) return -1;
      }
    }
  }
  return 0;
}

static int run_w4(int side, int is_send, struct kv_plan *pl, struct kv_net *nets[2],
                  struct kv_net *small[2], struct kv_report *rep, const struct kv_run_opts *ro) {
  struct kv_w4 *w = &rep->w4;
  if (!is_send) {
    w->bulk = pl->w4bulk;
    w->size = opt.w4_size;
    w->wire = opt.m.ll && opt.w4_size <= KV_LL_THRESHOLD ? (opt.w4_size * 2 + 15) & ~(size_t)15
                                                         : opt.w4_size;
    rep->have_w4 = 1;
  }
  for (int b = 0; b < 2; b++) {
    if ((b == KV_TCP && !opt.anchor) || (b == KV_RN && !opt.railnet)) continue;
    struct kv_ping_opts po = {.size = opt.w4_size, .count = pl->w4_pings};
    struct kv_ping_result pr;
    if (!is_send) progress_note("W4", "stream alone", nets[b]->ops->name);
    if (kv_run_ping(side, is_send, NULL, &opt.m, nets[b], small[b], ro, &po, &pr) != 0) return -1;
    if (!is_send) w->alone[b] = pr;
    /* the bulk alone, to size the runs with the stream */
    struct kv_case bulk = pl->w4bulk;
    struct kv_result br;
    memset(&br, 0, sizeof br);
    if (!is_send) progress_note("W4", "bulk alone", nets[b]->ops->name);
    if (kv_run_case(side, is_send, &bulk, &opt.m, nets[b], ro, is_send ? NULL : &br) != 0) {
      if (!is_send) diag("railnet-kvbench: W4 bulk, %s: %s", nets[b]->ops->name, br.why);
      return -1;
    }
    int64_t nb = 1;
    if (!is_send) {
      w->bulk_alone[b] = br;
      double per = br.mean_s > 0 ? br.mean_s : 0.01;
      nb = (int64_t)clampl((long)(pl->w4_target_s / per + 0.999), 1, 10000);
      if (kv_side_write(side, &nb, sizeof nb) != 0) return -1;
    } else if (kv_side_read(side, &nb, sizeof nb, 60) != 0) {
      return -1;
    }
    bulk.nbatches = (int)nb;
    for (int shared = 0; shared < 2; shared++) {
      po.with_bulk = 1;
      po.same_thread = shared;
      memset(&pr, 0, sizeof pr);
      if (!is_send)
        progress_note("W4", shared ? "stream + bulk, shared proxy" : "stream + bulk",
                      nets[b]->ops->name);
      if (kv_run_ping(side, is_send, &bulk, &opt.m, nets[b], small[b], ro, &po, &pr) != 0)
        return -1;
      if (!is_send) {
        if (shared)
          w->shared[b] = pr;
        else
          w->own[b] = pr;
      }
    }
    if (!is_send) w->have[b] = 1;
  }
  return 0;
}

static int side_main(int side, int is_send, const char *peer_desc, const char *bind_addr) {
  struct kv_plan *pl = calloc(1, sizeof *pl);
  struct kv_report *rep = calloc(1, sizeof *rep);
  if (pl == NULL || rep == NULL) return KV_EXIT_FAIL;
  build_plan(pl);
  rep->rows = calloc((size_t)pl->nrows + 1, sizeof *rep->rows);
  int rc = KV_EXIT_FAIL;
  struct rn_net loaded;
  memset(&loaded, 0, sizeof loaded);
  struct kv_net rn, rn_small, tcp, tcp_small;
  memset(&rn, 0, sizeof rn);
  memset(&rn_small, 0, sizeof rn_small);
  char why[512] = "";
  int have_rn = 0, have_small = 0;
  rn_apply_env_list(getenv(is_send ? "RN_CONF_SEND_ENV" : "RN_CONF_RECV_ENV"));
  /* hello: both sides must run the same plan */
  struct kv_hello me = {0x6b7662656e6368ull, plan_hash(pl), opt.version, (int32_t)getpid(), ""},
                  them;
  gethostname(me.host, sizeof me.host - 1);
  if (kv_side_write(side, &me, sizeof me) != 0 ||
      kv_side_read(side, &them, sizeof them, 120) != 0) {
    diag("railnet-kvbench: no hello from the peer over the side channel");
    goto out;
  }
  if (them.magic != me.magic || them.hash != me.hash || them.version != me.version) {
    diag("railnet-kvbench: the peer (%s) runs a different plan: give both sides the same options",
         them.host);
    goto out;
  }
  if (rn_net_open(&loaded, opt.version, why, sizeof why) != 0) {
    diag("railnet-kvbench: %s", why);
    goto out;
  }
  if (kv_net_open_railnet(&rn, &loaded, opt.version, opt.dev, opt.tc_bulk, why, sizeof why) != 0) {
    diag("railnet-kvbench: %s", why);
    goto out;
  }
  have_rn = 1;
  if (pl->have_w4) {
    if (kv_net_open_railnet(&rn_small, &loaded, opt.version, opt.dev, opt.tc_small, why,
                            sizeof why) != 0) {
      diag("railnet-kvbench: small-message communicator: %s", why);
      goto out;
    }
    have_small = 1;
  }
  kv_net_open_tcp(&tcp, bind_addr, opt.anchor_streams);
  kv_net_open_tcp(&tcp_small, bind_addr, 1);
  rep->quick = opt.level != LV_FULL;
  rep->verify = opt.verify;
  rep->anchor = opt.anchor;
  rep->detail = opt.detail;
  rep->m = opt.m;
  char peer[256];
  snprintf(peer, sizeof peer, "%s (peer %s, pid %d)", peer_desc, them.host, them.pid);
  make_header(rep, pl, peer, rn.max_recvs);
  struct kv_run_opts ro = {.verify = opt.verify,
                           .seed = opt.seed,
                           .timeout_s = opt.timeout * rn_timeout_scale(),
                           .version = opt.version,
                           .yield = 1};
  struct kv_net *nets[2] = {&rn, &tcp}, *small[2] = {&rn_small, &tcp_small};
  int ok = run_rows(side, is_send, pl, nets, rep, &ro) == 0;
  if (ok && pl->have_w4) ok = run_w4(side, is_send, pl, nets, small, rep, &ro) == 0;
  if (!is_send && isatty(2)) fprintf(stderr, "\r\033[K");
  rc = ok ? 0 : KV_EXIT_FAIL;
  if (!is_send) {
    kv_report_tables(stdout, rep);
    if (opt.verify && ok) {
      unsigned long long v = 0;
      for (int i = 0; i < rep->nrows; i++)
        for (int b = 0; b < 2; b++) v += rep->rows[i].r[b].rcv.verified;
      printf(
          "# verify: %llu bytes of W1-W3 checked against their pattern (W4 pings too): every "
          "byte arrived intact\n",
          v);
    }
    if (!ok) printf("# railnet-kvbench: a run failed (see above); the tables hold what finished\n");
    if (opt.json && kv_report_json(opt.json, rep) != 0) {
      diag("railnet-kvbench: cannot write %s", opt.json);
      rc = KV_EXIT_FAIL;
    }
    if (ok && opt.plot && kv_report_plot(opt.plot, rep) != 0) rc = KV_EXIT_PLOT;
  }
out:
  if (have_small) kv_net_release(&rn_small);
  if (have_rn) kv_net_release(&rn);
  if (loaded.inited) rn_net_finalize(&loaded);
  if (loaded.dl) rn_net_close(&loaded);
  if (rep->rows)
    for (int i = 0; i < rep->nrows; i++)
      for (int b = 0; b < 2; b++) kv_result_free(&rep->rows[i].r[b]);
  for (int b = 0; b < 2; b++) {
    kv_result_free(&rep->w4.bulk_alone[b]);
    kv_result_free(&rep->w4.own[b].bulk);
    kv_result_free(&rep->w4.shared[b].bulk);
  }
  free(rep->rows);
  free(rep);
  free(pl);
  fflush(stdout);
  return rc;
}

/* ---- process layouts --------------------------------------------------- */
static int run_forked(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    perror("socketpair");
    return KV_EXIT_FAIL;
  }
  fflush(stdout);
  pid_t pid[2];
  for (int role = 0; role < 2; role++) {
    pid[role] = fork();
    if (pid[role] == 0) {
      close(sv[1 - role]);
      rn_default_env();
      _exit(side_main(sv[role], role, "forked on this host", "127.0.0.1"));
    }
  }
  close(sv[0]);
  close(sv[1]);
  int st[2] = {0, 0}, alive = 2, rc = 0;
  double kill_at = 0;
  while (alive > 0) {
    int s;
    pid_t w = waitpid(-1, &s, kill_at > 0 ? WNOHANG : 0);
    if (w > 0) {
      int i = w == pid[0] ? 0 : 1;
      st[i] = s;
      alive--;
      if (!(WIFEXITED(s) && (WEXITSTATUS(s) == 0 || WEXITSTATUS(s) == KV_EXIT_PLOT)) &&
          kill_at == 0)
        kill_at = now_s() + 10;
    } else if (w < 0 && errno != EINTR) {
      break;
    }
    if (kill_at > 0 && alive > 0) {
      if (now_s() > kill_at) {
        for (int i = 0; i < 2; i++) kill(pid[i], SIGKILL);
        kill_at = now_s() + 1e9;
      }
      sleep_us(20000);
    }
  }
  for (int i = 0; i < 2; i++) {
    const char *who = i ? "sender" : "receiver";
    if (WIFSIGNALED(st[i]))
      diag("railnet-kvbench: %s killed by signal %d", who, WTERMSIG(st[i])), rc = KV_EXIT_FAIL;
    else if (WIFEXITED(st[i]) && WEXITSTATUS(st[i]) != 0 && rc == 0)
      rc = WEXITSTATUS(st[i]);
  }
  return rc;
}

static int parse_hostport(const char *s, char *host, size_t hlen, int *port) {
  const char *colon = strrchr(s, ':'), *num = s;
  host[0] = '\0';
  if (colon != NULL) {
    size_t n = (size_t)(colon - s);
    if (n >= hlen) return -1;
    memcpy(host, s, n);
    host[n] = '\0';
    if (host[0] == '[' && n > 1 && host[n - 1] == ']') {
      memmove(host, host + 1, n - 2);
      host[n - 2] = '\0';
    }
    num = colon + 1;
  }
  char *end = NULL;
  long v = strtol(num, &end, 10);
  if (end == num || *end != '\0' || v < 0 || v > 65535) return -1;
  *port = (int)v;
  return 0;
}

static int local_addr(int fd, char *buf, size_t len) {
  struct sockaddr_storage ss;
  socklen_t l = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &l) != 0) return -1;
  const void *a = ss.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                           : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
  return inet_ntop(ss.ss_family, a, buf, (socklen_t)len) ? 0 : -1;
}

static int run_split(void) {
  char host[256];
  int port, fd = -1, one = 1;
  int listening = opt.listen != NULL;
  if (parse_hostport(listening ? opt.listen : opt.connect, host, sizeof host, &port) != 0 ||
      (!listening && (port == 0 || host[0] == '\0'))) {
    fprintf(stderr, "railnet-kvbench: bad %s address\n", listening ? "--listen" : "--connect");
    return KV_EXIT_USAGE;
  }
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = listening ? AI_PASSIVE : 0;
  char ports[16];
  snprintf(ports, sizeof ports, "%d", port);
  if (getaddrinfo(host[0] ? host : NULL, ports, &hints, &ai) != 0 || ai == NULL) {
    fprintf(stderr, "railnet-kvbench: cannot resolve '%s'\n", host);
    return KV_EXIT_USAGE;
  }
  if (listening) {
    int lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (lfd < 0 || bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(lfd, 1) != 0) {
      fprintf(stderr, "railnet-kvbench: --listen %s: %s\n", opt.listen, strerror(errno));
      freeaddrinfo(ai);
      return KV_EXIT_FAIL;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0)
      port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
    fprintf(stderr, "# railnet-kvbench: listening on port %d for the peer\n", port);
    fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    close(lfd);
  } else {
    double end = now_s() + 60;
    while (fd < 0 && now_s() < end) {
      fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
        sleep_us(200000);
      }
    }
  }
  freeaddrinfo(ai);
  if (fd < 0) {
    fprintf(stderr, "railnet-kvbench: side channel not established: %s\n", strerror(errno));
    return KV_EXIT_FAIL;
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int is_send = opt.role >= 0 ? opt.role : !listening;
  char addr[64] = "127.0.0.1";
  local_addr(fd, addr, sizeof addr);
  char desc[128];
  snprintf(desc, sizeof desc, "this process %s (side channel %s)", is_send ? "sends" : "receives",
           listening ? "--listen" : "--connect");
  int rc = side_main(fd, is_send, desc, addr);
  close(fd);
  return rc;
}

/* ---- --self-test: the model's rules and the anchor, as TAP ------------- */
static int self_test(void) {
  struct kv_nccl m = {.chunk = 128 * KV_KIB, .channels = 2, .steps = 8, .ll = 1, .shared_comms = 1};
  struct kv_part p[KV_MAX_CHANNELS];
  tap_plan(11);
  int n = kv_op_parts(&m, 8, p);
  tap_result(n == 1 && p[0].ll && p[0].nsteps == 1 && p[0].last == 16 && p[0].post == 64 * KV_KIB,
             "8 B op: LL, one step of 16 B on the wire into a 64 KiB LL slot (got %d part(s), "
             "%zu B, post %zu)",
             n, p[0].last, p[0].post);
  n = kv_op_parts(&m, 16 * KV_KIB, p);
  tap_result(n == 1 && p[0].ll && p[0].nsteps == 1 && p[0].last == 32 * KV_KIB,
             "16 KiB op: still LL (<= 16 KiB per channel), 32 KiB on the wire");
  n = kv_op_parts(&m, 64 * KV_KIB, p);
  tap_result(n == 1 && !p[0].ll && p[0].nsteps == 2 && p[0].step == 32 * KV_KIB &&
                 p[0].post == 128 * KV_KIB,
             "64 KiB op: one channel, Simple, chunk/4 = 32 KiB steps into chunk-sized slots (%d "
             "steps of %zu)",
             p[0].nsteps, p[0].step);
  n = kv_op_parts(&m, 256 * KV_KIB, p);
  tap_result(n == 2 && p[0].nsteps == 2 && p[0].step == 64 * KV_KIB && p[1].channel == 1,
             "256 KiB op: two channels of 128 KiB, chunk/2 = 64 KiB steps");
  n = kv_op_parts(&m, 6 * KV_MIB, p);
  tap_result(n == 2 && p[0].nsteps == 24 && p[0].step == 128 * KV_KIB && p[1].nsteps == 24,
             "6 MiB op (70B/TP8 layer at 12k tokens): 2 x 24 steps of 128 KiB");
  n = kv_op_parts(&m, 100 * KV_KIB + 5, p);
  size_t tot = 0;
  for (int i = 0; i < n; i++) tot += p[i].data;
  tap_result(n == 2 && tot == 100 * KV_KIB + 5 && p[0].data == 52 * KV_KIB,
             "odd size: parts are 4 KiB aligned and add up to the op (%zu)", tot);
  n = kv_op_parts(&m, 0, p);
  tap_result(n == 1 && p[0].nsteps == 1 && p[0].last == 0, "zero-byte op: one empty step");
  tap_result(kv_depth(&m, 1) == 8 && kv_depth(&m, 4) == 4 && kv_depth(&m, 8) == 2,
             "depth: min(NCCL_STEPS, 16 / peers sharing the proxy op)");
  struct kv_case c;
  memset(&c, 0, sizeof c);
  c.shape = KV_GROUPED;
  c.nops = 3;
  c.concurrency = 2;
  c.nbatches = 2;
  tap_result(kv_op_request(&c, 0) == 0 && kv_op_request(&c, 1) == 1 && kv_op_request(&c, 2) == 0 &&
                 kv_op_request(&c, 6) == 2 && kv_op_gate(&c, 5) == 1 && kv_op_gate(&c, 6) == 2 &&
                 kv_case_gates(&c) == 2,
             "grouped: layer-major inside a batch, one gate per batch");
  c.shape = KV_UNGROUPED;
  tap_result(kv_op_gate(&c, 0) == 1 && kv_op_gate(&c, 11) == 12 && kv_case_gates(&c) == 12,
             "ungrouped: one gate per op");
  char why[256] = "";
  tap_result(kv_tcp_selftest(why, sizeof why) == 0,
             "plain-TCP anchor: assorted sizes over 2 "
             "sockets arrive intact%s%s",
             why[0] ? ": " : "", why);
  return tap_failed() ? KV_EXIT_FAIL : 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: railnet-kvbench [--quick | --smoke] [--workloads w1,w2,w3,w4] [--verify | "
          "--no-verify]\n"
          "         [--models 8b,70b] [--tokens N,N..] [--modes grouped,ungrouped] [--layers N] "
          "[--requests N] [--rounds N]\n"
          "         [--block-sizes 4k,64k..] [--blocks N,N..] [--w2-shapes per-op,pipelined]\n"
          "         [--channels N] [--chunk BYTES] [--steps N] [--proto auto|simple] "
          "[--no-shared-comms]\n"
          "         [--api v8|v9|v10|v11|v12] [--dev N] [--no-anchor] [--anchor-streams N]\n"
          "         [--transports railnet,tcp] (one alone: for profiling; no ratios)\n"
          "         [--w4-size BYTES] [--tc-bulk N] [--tc-small N] [--timeout S] [--seed N]\n"
          "         [--json FILE|-] [--plot FILE.png] [--detail]\n"
          "         [--listen [HOST:]PORT | --connect HOST:PORT] [--role send|recv]\n"
          "       railnet-kvbench --self-test\n"
          "Default: both sides forked on this host over loopback, every workload, full sizes "
          "(minutes).\n"
          "Environment: RN_BUILD or RN_PLUGIN (the plugin), RAILNET_* (transport), "
          "RN_CONF_SEND_ENV / RN_CONF_RECV_ENV (K=V,.. per side).\n");
}

static int parse_list(const char *s, const char *const *names, int n) {
  int mask = 0;
  char *copy = strdup(s), *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int i = 0; i < n; i++)
      if (strcasecmp(t, names[i]) == 0) mask |= 1 << i, found = 1;
    if (!found) mask = -1;
    if (mask < 0) break;
  }
  free(copy);
  return mask;
}

int main(int argc, char **argv) {
  opt.level = LV_FULL;
  opt.verify = -1;
  opt.workloads = 2 | 4 | 8 | 16;
  opt.modes = 3;
  opt.models = 3;
  opt.w2_shapes = 3;
  opt.m = (struct kv_nccl){
      .chunk = 128 * KV_KIB, .channels = 2, .steps = 8, .ll = 1, .shared_comms = 1};
  opt.version = 11;
  opt.anchor = 1;
  opt.railnet = 1;
  opt.anchor_streams = 1;
  opt.role = -1;
  opt.tc_bulk = opt.tc_small = -1;
  opt.w4_size = 8;
  opt.timeout = 300;
  opt.seed = 0x6b76;
  static const char *const wl[] = {"w0", "w1", "w2", "w3", "w4"},
                           *const md[] = {"grouped", "ungrouped"}, *const mo[] = {"8b", "70b"};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG() (v ? (i++, v) : (usage(stderr), exit(KV_EXIT_USAGE), ""))
    if (!strcmp(a, "--quick"))
      opt.level = LV_QUICK;
    else if (!strcmp(a, "--smoke"))
      opt.level = LV_SMOKE;
    else if (!strcmp(a, "--verify"))
      opt.verify = 1;
    else if (!strcmp(a, "--no-verify"))
      opt.verify = 0;
    else if (!strcmp(a, "--workloads"))
      opt.workloads = (unsigned)parse_list(ARG(), wl, 5);
    else if (!strcmp(a, "--modes"))
      opt.modes = parse_list(ARG(), md, 2);
    else if (!strcmp(a, "--models"))
      opt.models = parse_list(ARG(), mo, 2);
    else if (!strcmp(a, "--tokens")) {
      char *copy = strdup(ARG()), *save = NULL;
      for (char *t = strtok_r(copy, ",", &save); t && opt.ntokens < 16;
           t = strtok_r(NULL, ",", &save))
        opt.tokens[opt.ntokens++] = strtol(t, NULL, 0);
      free(copy);
    } else if (!strcmp(a, "--block-sizes") || !strcmp(a, "--blocks")) {
      int sizes = !strcmp(a, "--block-sizes");
      char *copy = strdup(ARG()), *save = NULL;
      for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end = NULL;
        unsigned long long n = strtoull(t, &end, 0);
        if (end && (*end == 'k' || *end == 'K')) n *= 1024;
        if (sizes && opt.nblock_sizes < 8) opt.block_sizes[opt.nblock_sizes++] = (size_t)n;
        if (!sizes && opt.nblock_counts < 8) opt.block_counts[opt.nblock_counts++] = (long)n;
      }
      free(copy);
    } else if (!strcmp(a, "--w2-shapes")) {
      static const char *const sh[] = {"per-op", "pipelined"};
      opt.w2_shapes = parse_list(ARG(), sh, 2);
    } else if (!strcmp(a, "--layers"))
      opt.layers = atoi(ARG());
    else if (!strcmp(a, "--requests"))
      opt.requests = strtol(ARG(), NULL, 0);
    else if (!strcmp(a, "--channels"))
      opt.m.channels = atoi(ARG());
    else if (!strcmp(a, "--chunk"))
      opt.m.chunk = strtoull(ARG(), NULL, 0);
    else if (!strcmp(a, "--steps"))
      opt.m.steps = atoi(ARG());
    else if (!strcmp(a, "--proto")) {
      const char *p = ARG();
      opt.m.ll = strcmp(p, "simple") != 0;
      if (strcmp(p, "simple") && strcmp(p, "auto")) opt.m.ll = -1;
    } else if (!strcmp(a, "--no-shared-comms"))
      opt.m.shared_comms = 0;
    else if (!strcmp(a, "--api"))
      opt.version = rn_parse_version(ARG());
    else if (!strcmp(a, "--dev"))
      opt.dev = atoi(ARG());
    else if (!strcmp(a, "--no-anchor"))
      opt.anchor = 0;
    else if (!strcmp(a, "--transports")) {
      const char *t = ARG();
      opt.railnet = strstr(t, "railnet") != NULL;
      opt.anchor = strstr(t, "tcp") != NULL;
      if (!opt.railnet && !opt.anchor) opt.anchor_streams = 0; /* rejected below */
    } else if (!strcmp(a, "--anchor-streams"))
      opt.anchor_streams = atoi(ARG());
    else if (!strcmp(a, "--w4-size"))
      opt.w4_size = strtoull(ARG(), NULL, 0);
    else if (!strcmp(a, "--tc-bulk"))
      opt.tc_bulk = atoi(ARG());
    else if (!strcmp(a, "--tc-small"))
      opt.tc_small = atoi(ARG());
    else if (!strcmp(a, "--timeout"))
      opt.timeout = atof(ARG());
    else if (!strcmp(a, "--seed"))
      opt.seed = strtoull(ARG(), NULL, 0);
    else if (!strcmp(a, "--json"))
      opt.json = ARG();
    else if (!strcmp(a, "--plot"))
      opt.plot = ARG();
    else if (!strcmp(a, "--listen"))
      opt.listen = ARG();
    else if (!strcmp(a, "--connect"))
      opt.connect = ARG();
    else if (!strcmp(a, "--role")) {
      const char *r = ARG();
      opt.role = !strcmp(r, "send") ? 1 : !strcmp(r, "recv") ? 0 : -2;
    } else if (!strcmp(a, "--rounds"))
      opt.rounds = atoi(ARG());
    else if (!strcmp(a, "--detail"))
      opt.detail = 1;
    else if (!strcmp(a, "--self-test"))
      opt.self_test = 1;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "railnet-kvbench: unknown option %s\n", a);
      usage(stderr);
      return KV_EXIT_USAGE;
    }
#undef ARG
  }
  if (opt.self_test) return self_test();
  int bad_blocks = opt.w2_shapes <= 0;
  for (int i = 0; i < opt.nblock_sizes; i++)
    bad_blocks |= opt.block_sizes[i] < 1 || opt.block_sizes[i] > 16 * KV_MIB;
  for (int i = 0; i < opt.nblock_counts; i++)
    bad_blocks |= opt.block_counts[i] < 1 || opt.block_counts[i] > 10000000;
  if (bad_blocks || (int)opt.workloads <= 0 || opt.modes <= 0 || opt.models <= 0 ||
      opt.version == 0 || opt.m.channels < 1 || opt.m.channels > KV_MAX_CHANNELS ||
      opt.m.steps < 1 || opt.m.steps > KV_NCCL_STEPS || opt.m.chunk < 4 * KV_KIB ||
      opt.m.chunk > 64 * KV_MIB || opt.m.ll < 0 || opt.role == -2 || (opt.listen && opt.connect) ||
      opt.anchor_streams < 1 || opt.anchor_streams > 8 || opt.w4_size < 1 || opt.w4_size > KV_MIB ||
      opt.timeout <= 0) {
    fprintf(stderr, "railnet-kvbench: bad option value\n");
    usage(stderr);
    return KV_EXIT_USAGE;
  }
  if (opt.verify < 0) opt.verify = opt.level != LV_FULL;
  signal(SIGPIPE, SIG_IGN);
  if (opt.plot && !kv_have_gnuplot())
    fprintf(stderr,
            "railnet-kvbench: --plot: gnuplot not found (Debian: apt-get install "
            "gnuplot-nox); the benchmark runs, the plot step will fail\n");
  if (opt.listen || opt.connect) return run_split();
  return run_forked();
}
