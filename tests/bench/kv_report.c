/* Tables, goals, JSON and the plot of railnet-kvbench.  Every ratio is
 * railnet against the plain-TCP anchor measured in the same run; a goal is
 * judged only when both were measured. */
#include "kv_report.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static double ms(double s) { return s * 1e3; }

static double us_per_msg(const struct kv_side_stats *s) {
  return s->msgs ? s->proxy_cpu_s * 1e6 / (double)s->msgs : 0;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

static void res_cols(FILE *f, const struct kv_result *r) {
  if (!r->ok) {
    fprintf(f, " %8s %8s %7s %5s %5s", "-", "-", "-", "-", "-");
    return;
  }
  fprintf(f, " %8.2f %8.2f %7.2f %5.2f %5.2f", ms(r->p50_s), ms(r->p99_s), r->gbps,
          us_per_msg(&r->snd), us_per_msg(&r->rcv));
}

static void failed_rows(FILE *f, const struct kv_row *row) {
  for (int b = 0; b < 2; b++)
    if (!row->r[b].ok && row->r[b].why[0])
      fprintf(f, "#   ^ %s failed: %s\n", b == KV_RN ? "railnet" : "plain TCP", row->r[b].why);
}

static void w1_table(FILE *f, const struct kv_report *rep, int w) {
  int any = 0;
  for (int i = 0; i < rep->nrows; i++) any |= rep->rows[i].c.workload == w;
  if (!any) return;
  static const char *titles[] = {
      "", "W1  per-layer KV tensors, one request at a time (one op per layer)",
      "W2  scattered KV blocks (per-op: an ncclSend per block; pipelined: blocks as the steps of "
      "one transfer)",
      "W3  requests in flight (layer-major within a batch) and fan-in / fan-out"};
  fprintf(f, "#\n# %s\n", titles[w]);
  if (w == 2) {
    fprintf(f, "# %-30s %8s %7s | %10s %10s %8s %5s %5s | %10s %8s | %6s %6s\n", "case", "blk/req",
            "msg/req", "rn blk/s", "rn msg/s", "rn p50ms", "snd", "rcv", "tcp blk/s", "tcp p50",
            "msg/s", "p50");
    fprintf(f, "# %-30s %8s %7s | %10s %10s %8s %5s %5s | %10s %8s | %6s %6s\n", "", "", "", "", "",
            "", "us/m", "us/m", "", "ms", "rn/tcp", "rn/tcp");
  } else {
    fprintf(f, "# %-30s %8s %7s | %8s %8s %7s %5s %5s | %8s %8s %7s %5s %5s | %6s %6s\n", "case",
            "req MiB", "msg/req", "rn p50", "rn p99", "rn GB/s", "snd", "rcv", "tcp p50", "tcp p99",
            "tcpGB/s", "snd", "rcv", "p50", "GB/s");
    fprintf(f, "# %-30s %8s %7s | %8s %8s %7s %5s %5s | %8s %8s %7s %5s %5s | %6s %6s\n", "", "",
            "", "ms", "ms", "", "us/m", "us/m", "ms", "ms", "", "us/m", "us/m", "rn/tcp", "rn/tcp");
  }
  for (int i = 0; i < rep->nrows; i++) {
    const struct kv_row *row = &rep->rows[i];
    const struct kv_case *c = &row->c;
    if (c->workload != w) continue;
    const struct kv_result *a = &row->r[KV_RN], *b = &row->r[KV_TCP];
    int both = a->ok && b->ok;
    long msgs = c->msgs_per_op * c->nops * c->senders * c->receivers;
    if (w == 2) {
      fprintf(f, "  %-30s %8ld %7ld |", c->label, c->blocks, msgs);
      if (a->ok)
        fprintf(f, " %10.0f %10.0f %8.2f %5.2f %5.2f |", a->ops_per_s, a->msgs_per_s, ms(a->p50_s),
                us_per_msg(&a->snd), us_per_msg(&a->rcv));
      else
        fprintf(f, " %10s %10s %8s %5s %5s |", "-", "-", "-", "-", "-");
      if (b->ok)
        fprintf(f, " %10.0f %8.2f |", b->ops_per_s, ms(b->p50_s));
      else
        fprintf(f, " %10s %8s |", "-", "-");
      if (both)
        fprintf(f, " %6.2f %6.2f\n", ratio(a->msgs_per_s, b->msgs_per_s),
                ratio(a->p50_s, b->p50_s));
      else
        fprintf(f, " %6s %6s\n", "-", "-");
    } else {
      double req_mib = (double)c->op_bytes * c->nops * c->senders * c->receivers / (double)KV_MIB;
      fprintf(f, "  %-30s %8.1f %7ld |", c->label, req_mib, msgs);
      res_cols(f, a);
      fprintf(f, " |");
      res_cols(f, b);
      if (both)
        fprintf(f, " | %6.2f %6.2f\n", ratio(a->p50_s, b->p50_s), ratio(a->gbps, b->gbps));
      else
        fprintf(f, " | %6s %6s\n", "-", "-");
    }
    failed_rows(f, row);
  }
}

static void w4_table(FILE *f, const struct kv_report *rep) {
  if (!rep->have_w4) return;
  const struct kv_w4 *w = &rep->w4;
  char hb[32];
  fprintf(f,
          "#\n# W4  latency-critical stream: %zu B round trips (%zu B on the wire) on comms of "
          "their own,\n#     alone and while bulk KV flows (%s)\n",
          w->size, w->wire, w->bulk.label);
  fprintf(f, "# %-34s | %9s %9s %9s %6s | %9s %9s %9s %6s\n", "stream", "rn p50us", "rn p99us",
          "rn max", "n", "tcp p50", "tcp p99", "tcp max", "n");
  const char *names[] = {"alone", "+ bulk, own proxy thread", "+ bulk, shared proxy thread"};
  for (int k = 0; k < 3; k++) {
    fprintf(f, "  %-34s |", names[k]);
    for (int b = 0; b < 2; b++) {
      const struct kv_ping_result *p = k == 0 ? &w->alone[b] : k == 1 ? &w->own[b] : &w->shared[b];
      if (w->have[b] && p->n > 0)
        fprintf(f, " %9.1f %9.1f %9.1f %6ld %s", p->p50_us, p->p99_us, p->max_us, p->n,
                b == 0 ? "|" : "");
      else
        fprintf(f, " %9s %9s %9s %6s %s", "-", "-", "-", "-", b == 0 ? "|" : "");
    }
    fprintf(f, "\n");
  }
  for (int b = 0; b < 2; b++) {
    if (!w->have[b]) continue;
    fprintf(f,
            "#   %s: p99 with bulk / alone %.2fx (own thread), %.2fx (shared); bulk %.2f GB/s "
            "alone, %.2f with the stream (own), %.2f (shared); request %s\n",
            b == KV_RN ? "railnet" : "plain TCP", ratio(w->own[b].p99_us, w->alone[b].p99_us),
            ratio(w->shared[b].p99_us, w->alone[b].p99_us), w->bulk_alone[b].gbps,
            w->own[b].bulk.gbps, w->shared[b].bulk.gbps,
            kv_human((size_t)w->bulk.op_bytes * (size_t)w->bulk.nops, hb, sizeof hb));
  }
}

static const struct kv_row *find_row(const struct kv_report *rep, int w, const char *prefix) {
  for (int i = 0; i < rep->nrows; i++)
    if (rep->rows[i].c.workload == w && strncmp(rep->rows[i].c.label, prefix, strlen(prefix)) == 0)
      return &rep->rows[i];
  return NULL;
}

static const char *verdict(int met) { return met ? "met" : "NOT met"; }

static void goals(FILE *f, const struct kv_report *rep) {
  fprintf(f, "#\n# goals (railnet against the anchor measured in this run%s)\n",
          rep->quick ? "; a quick run: indicative only" : "");
  int any = 0;
  const char *shapes[] = {"grouped", "ungrouped"};
  for (int s = 0; s < 2; s++) {
    char pfx[64];
    snprintf(pfx, sizeof pfx, "70B/TP8 12288 tok %s", shapes[s]);
    const struct kv_row *r = find_row(rep, 1, pfx);
    if (r == NULL) continue;
    any = 1;
    if (r->r[KV_RN].ok && r->r[KV_TCP].ok) {
      double x = ratio(r->r[KV_RN].p50_s, r->r[KV_TCP].p50_s);
      fprintf(f,
              "#   W1 70B/TP8 12k-token request (%s): transfer time %.2fx plain TCP (goal <= "
              "1.1x): %s\n",
              shapes[s], x, verdict(x <= 1.1));
    } else {
      fprintf(f, "#   W1 70B/TP8 12k-token request (%s): anchor not measured, no verdict\n",
              shapes[s]);
    }
  }
  for (int i = 0; i < rep->nrows; i++) {
    const struct kv_row *r = &rep->rows[i];
    if (r->c.workload != 2) continue;
    any = 1;
    if (r->r[KV_RN].ok && r->r[KV_TCP].ok) {
      double x = ratio(r->r[KV_RN].msgs_per_s, r->r[KV_TCP].msgs_per_s);
      fprintf(f, "#   W2 %-30s messages/s %.2fx plain TCP (goal >= 0.8x): %s\n", r->c.label, x,
              verdict(x >= 0.8));
    }
  }
  if (rep->have_w4 && rep->w4.have[KV_RN]) {
    any = 1;
    const struct kv_w4 *w = &rep->w4;
    const struct kv_ping_result *with[2] = {&w->own[KV_RN], &w->shared[KV_RN]};
    static const char *const how[2] = {"own proxy thread", "shared proxy thread"};
    for (int k = 0; k < 2; k++) {
      if (with[k]->n == 0 || w->alone[KV_RN].n == 0) {
        fprintf(f,
                "#   W4 small-stream p99 with bulk / alone (%s): not measured, no round trip "
                "fell inside the bulk\n",
                how[k]);
        continue;
      }
      double x = ratio(with[k]->p99_us, w->alone[KV_RN].p99_us);
      fprintf(f, "#   W4 small-stream p99 with bulk / alone (%s): %.2fx (goal <= 2x): %s", how[k],
              x, verdict(x <= 2));
      const struct kv_ping_result *t = k ? &w->shared[KV_TCP] : &w->own[KV_TCP];
      if (w->have[KV_TCP] && t->n > 0 && w->alone[KV_TCP].n > 0)
        fprintf(f, "; plain TCP itself %.2fx", ratio(t->p99_us, w->alone[KV_TCP].p99_us));
      fprintf(f, "\n");
    }
  }
  if (!any) fprintf(f, "#   (no row of this run carries a goal)\n");
}

/* Per plugin message, both sides: how often each call ran, NULL returns
 * ("retry later"), and the wall time spent inside the calls. */
static void detail_side(FILE *f, const char *label, const char *tr, const char *side,
                        const struct kv_side_stats *s, long nreq) {
  double m = s->msgs ? (double)s->msgs : 1;
  fprintf(f, "  %-30s %-7s %-4s %6.2f %6.2f %6.2f %6.1f | %6.2f %6.2f %6.2f %6.2f |", label, tr,
          side, (double)s->calls.isend / m, (double)s->calls.isend_null / m,
          (double)s->calls.irecv / m, (double)s->calls.test / m, s->calls.ns_isend / m / 1e3,
          s->calls.ns_irecv / m / 1e3, s->calls.ns_test_done / m / 1e3,
          s->calls.ns_test_pending / m / 1e3);
  fprintf(f, " %6.1f %6.1f %7.2f %5.0f%%\n", s->proxy_cpu_s * 1e6 / m, s->proc_cpu_s * 1e6 / m,
          nreq > 0 ? s->proxy_cpu_s * 1e3 / (double)nreq : 0,
          s->passes ? 100.0 * (double)s->idle_passes / (double)s->passes : 0);
}

static void detail(FILE *f, const struct kv_report *rep) {
  fprintf(f,
          "#\n# per plugin message (--detail): calls, NULL returns, wall time inside the calls, "
          "CPU\n");
  static const char *const h1[] = {"isend", "NULL",  "irecv", "test", "us in", "us in",
                                   "us in", "us in", "proxy", "proc", "proxy", "idle"};
  static const char *const h2[] = {"/msg",   "/msg",   "/msg",   "/msg",   "isend",  "irecv",
                                   "t.done", "t.wait", "us/msg", "us/msg", "ms/req", "passes"};
  for (int line = 0; line < 2; line++) {
    const char *const *h = line ? h2 : h1;
    fprintf(f, "# %-30s %-7s %-4s %6s %6s %6s %6s | %6s %6s %6s %6s | %6s %6s %7s %6s\n",
            line ? "" : "case", "", line ? "" : "side", h[0], h[1], h[2], h[3], h[4], h[5], h[6],
            h[7], h[8], h[9], h[10], h[11]);
  }
  for (int i = 0; i < rep->nrows; i++)
    for (int b = 0; b < 2; b++) {
      const struct kv_result *r = &rep->rows[i].r[b];
      if (!r->ok) continue;
      const char *tr = b == KV_RN ? "railnet" : "tcp";
      detail_side(f, rep->rows[i].c.label, tr, "snd", &r->snd, r->nreq);
      detail_side(f, rep->rows[i].c.label, tr, "rcv", &r->rcv, r->nreq);
    }
}

void kv_report_tables(FILE *f, const struct kv_report *rep) {
  fputs(rep->header, f);
  for (int w = 1; w <= 3; w++) w1_table(f, rep, w);
  w4_table(f, rep);
  if (rep->detail) detail(f, rep);
  goals(f, rep);
  fprintf(f,
          "# snd/rcv us/m: proxy-thread CPU time per plugin message, sender / receiver "
          "(busy polling included, as NCCL's proxy polls)\n");
  fflush(f);
}

/* ---- JSON --------------------------------------------------------------- */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void json_side(FILE *f, const char *name, const struct kv_side_stats *s) {
  fprintf(f,
          "\"%s\": {\"wall_s\": %.6f, \"proxy_cpu_s\": %.6f, \"process_cpu_s\": %.6f, \"msgs\": "
          "%llu, \"wire_bytes\": %llu, \"verified_bytes\": %llu, \"passes\": %llu, "
          "\"idle_passes\": %llu, \"grouped_irecvs\": %llu, \"max_inflight\": %d, \"isend\": "
          "%llu, \"isend_null\": %llu, \"irecv\": %llu, \"irecv_null\": %llu, \"test\": %llu, "
          "\"test_done\": %llu, \"ns_in_isend\": %.0f, \"ns_in_irecv\": %.0f, "
          "\"ns_in_test_done\": %.0f, \"ns_in_test_pending\": %.0f}",
          name, s->wall_s, s->proxy_cpu_s, s->proc_cpu_s, (unsigned long long)s->msgs,
          (unsigned long long)s->wire_bytes, (unsigned long long)s->verified,
          (unsigned long long)s->passes, (unsigned long long)s->idle_passes,
          (unsigned long long)s->grouped_irecvs, s->max_inflight,
          (unsigned long long)s->calls.isend, (unsigned long long)s->calls.isend_null,
          (unsigned long long)s->calls.irecv, (unsigned long long)s->calls.irecv_null,
          (unsigned long long)s->calls.test, (unsigned long long)s->calls.test_done,
          s->calls.ns_isend, s->calls.ns_irecv, s->calls.ns_test_done, s->calls.ns_test_pending);
}

static void json_result(FILE *f, const char *name, const struct kv_result *r) {
  fprintf(f, "\"%s\": ", name);
  if (!r->ok) {
    fprintf(f, "{\"ok\": false, \"why\": ");
    json_str(f, r->why);
    fprintf(f, "}");
    return;
  }
  fprintf(f,
          "{\"ok\": true, \"requests\": %ld, \"p50_s\": %.6f, \"p99_s\": %.6f, \"mean_s\": %.6f, "
          "\"gbps\": %.4f, \"msgs_per_s\": %.1f, \"units_per_s\": %.1f, \"data_bytes\": %llu, ",
          r->nreq, r->p50_s, r->p99_s, r->mean_s, r->gbps, r->msgs_per_s, r->ops_per_s,
          (unsigned long long)r->data_bytes);
  json_side(f, "sender", &r->snd);
  fprintf(f, ", ");
  json_side(f, "receiver", &r->rcv);
  fprintf(f, "}");
}

static void json_ping(FILE *f, const char *name, const struct kv_ping_result *p) {
  fprintf(f,
          "\"%s\": {\"n\": %ld, \"dropped\": %ld, \"p50_us\": %.2f, \"p99_us\": %.2f, "
          "\"max_us\": %.2f, \"mean_us\": %.2f, ",
          name, p->n, p->n_outside, p->p50_us, p->p99_us, p->max_us, p->mean_us);
  if (p->bulk.ok || p->bulk.why[0])
    json_result(f, "bulk", &p->bulk);
  else
    fprintf(f, "\"bulk\": null");
  fprintf(f, "}");
}

int kv_report_json(const char *path, const struct kv_report *rep) {
  FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
  if (f == NULL) return -1;
  fprintf(f, "{\"program\": \"railnet-kvbench\", \"format\": 1, \"quick\": %s, \"verify\": %s,\n",
          rep->quick ? "true" : "false", rep->verify ? "true" : "false");
  fprintf(f,
          " \"model\": {\"channels\": %d, \"chunk\": %zu, \"steps\": %d, \"ll\": %s, "
          "\"shared_comms\": %s},\n \"header\": ",
          rep->m.channels, rep->m.chunk, rep->m.steps, rep->m.ll ? "true" : "false",
          rep->m.shared_comms ? "true" : "false");
  json_str(f, rep->header);
  fprintf(f, ",\n \"rows\": [");
  for (int i = 0; i < rep->nrows; i++) {
    const struct kv_row *r = &rep->rows[i];
    const struct kv_case *c = &r->c;
    fprintf(f, "%s\n  {\"workload\": \"W%d\", \"label\": ", i ? "," : "", c->workload);
    json_str(f, c->label);
    fprintf(f,
            ", \"senders\": %d, \"receivers\": %d, \"shape\": \"%s\", \"ops_per_request\": %d, "
            "\"op_bytes\": %zu, \"concurrency\": %d, \"batches\": %d, \"msgs_per_op\": %ld, "
            "\"wire_bytes_per_op\": %zu, \"channels_used\": %d, \"tokens\": %ld, \"block\": %zu, "
            "\"blocks\": %ld,\n   ",
            c->senders, c->receivers,
            c->shape == KV_GROUPED     ? "grouped"
            : c->shape == KV_UNGROUPED ? "ungrouped"
                                       : "pipelined",
            c->nops, c->op_bytes, c->concurrency, c->nbatches, c->msgs_per_op, c->wire_per_op,
            c->nparts, c->tokens, c->block, c->blocks);
    json_result(f, "railnet", &r->r[KV_RN]);
    fprintf(f, ",\n   ");
    json_result(f, "plain_tcp", &r->r[KV_TCP]);
    if (r->r[KV_RN].ok && r->r[KV_TCP].ok)
      fprintf(f, ",\n   \"ratio\": {\"p50\": %.4f, \"gbps\": %.4f, \"msgs_per_s\": %.4f}",
              ratio(r->r[KV_RN].p50_s, r->r[KV_TCP].p50_s),
              ratio(r->r[KV_RN].gbps, r->r[KV_TCP].gbps),
              ratio(r->r[KV_RN].msgs_per_s, r->r[KV_TCP].msgs_per_s));
    fprintf(f, "}");
  }
  fprintf(f, "\n ]");
  if (rep->have_w4) {
    const struct kv_w4 *w = &rep->w4;
    fprintf(f, ",\n \"w4\": {\"size\": %zu, \"wire\": %zu, \"bulk\": ", w->size, w->wire);
    json_str(f, w->bulk.label);
    for (int b = 0; b < 2; b++) {
      if (!w->have[b]) continue;
      fprintf(f, ",\n  \"%s\": {", b == KV_RN ? "railnet" : "plain_tcp");
      json_ping(f, "alone", &w->alone[b]);
      fprintf(f, ",\n   ");
      json_ping(f, "with_bulk_own_thread", &w->own[b]);
      fprintf(f, ",\n   ");
      json_ping(f, "with_bulk_shared_thread", &w->shared[b]);
      fprintf(f, ",\n   ");
      json_result(f, "bulk_alone", &w->bulk_alone[b]);
      fprintf(f, "}");
    }
    fprintf(f, "}");
  }
  fprintf(f, "\n}\n");
  if (f != stdout) return fclose(f) == 0 ? 0 : -1;
  fflush(f);
  return 0;
}

/* ---- plot ------------------------------------------------------------------ */
int kv_have_gnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

static FILE *open_dat(const char *png, const char *suffix, char *path, size_t len) {
  size_t n = strlen(png);
  if (n > 4 && strcmp(png + n - 4, ".png") == 0) n -= 4;
  snprintf(path, len, "%.*s-%s.dat", (int)n, png, suffix);
  return fopen(path, "w");
}

int kv_report_plot(const char *png, const struct kv_report *rep) {
  char p1[4096], p2[4096], p3[4096], gp[4096];
  FILE *f1 = open_dat(png, "w1", p1, sizeof p1), *f2 = open_dat(png, "w2", p2, sizeof p2);
  FILE *f3 = open_dat(png, "w4", p3, sizeof p3), *fg = open_dat(png, "plot", gp, sizeof gp);
  if (!f1 || !f2 || !f3 || !fg) {
    fprintf(stderr, "railnet-kvbench: --plot: cannot write the data files next to %s\n", png);
    if (f1) fclose(f1);
    if (f2) fclose(f2);
    if (f3) fclose(f3);
    if (fg) fclose(fg);
    return -1;
  }
  /* W1: one block per (model, shape), sorted by request size as listed */
  const char *models[] = {"8B", "70B/TP8"}, *shapes[] = {"grouped", "ungrouped"};
  int blocks1 = 0;
  char names1[4][64];
  for (int mi = 0; mi < 2; mi++)
    for (int si = 0; si < 2; si++) {
      int n = 0;
      for (int i = 0; i < rep->nrows; i++) {
        const struct kv_row *r = &rep->rows[i];
        if (r->c.workload != 1 || strcmp(r->c.model, models[mi]) != 0 ||
            r->c.shape != (si ? KV_UNGROUPED : KV_GROUPED) || !r->r[KV_RN].ok)
          continue;
        double req = (double)r->c.op_bytes * r->c.nops;
        fprintf(f1, "%.0f %.4f %.4f %.4f %.4f\n", req, r->r[KV_RN].gbps,
                r->r[KV_TCP].ok ? r->r[KV_TCP].gbps : 0.0 / 0.0, ms(r->r[KV_RN].p50_s),
                r->r[KV_TCP].ok ? ms(r->r[KV_TCP].p50_s) : 0.0 / 0.0);
        n++;
      }
      if (n) {
        fprintf(f1, "\n\n");
        snprintf(names1[blocks1++], sizeof names1[0], "%s %s", models[mi], shapes[si]);
      }
    }
  int blocks2 = 0;
  char names2[2][32];
  for (int si = 0; si < 2; si++) {
    int n = 0;
    for (int i = 0; i < rep->nrows; i++) {
      const struct kv_row *r = &rep->rows[i];
      if (r->c.workload != 2 || (r->c.shape == KV_PIPELINED) != si || !r->r[KV_RN].ok) continue;
      fprintf(f2, "%zu %ld %.1f %.1f\n", r->c.block, r->c.blocks, r->r[KV_RN].msgs_per_s,
              r->r[KV_TCP].ok ? r->r[KV_TCP].msgs_per_s : 0.0 / 0.0);
      n++;
    }
    if (n) {
      fprintf(f2, "\n\n");
      snprintf(names2[blocks2++], sizeof names2[0], "%s", si ? "pipelined" : "per-op");
    }
  }
  if (rep->have_w4) {
    const char *nm[] = {"alone", "bulk-own-thread", "bulk-shared-thread"};
    for (int k = 0; k < 3; k++) {
      const struct kv_ping_result *a = k == 0   ? &rep->w4.alone[0]
                                       : k == 1 ? &rep->w4.own[0]
                                                : &rep->w4.shared[0];
      const struct kv_ping_result *b = k == 0   ? &rep->w4.alone[1]
                                       : k == 1 ? &rep->w4.own[1]
                                                : &rep->w4.shared[1];
      fprintf(f3, "%s %.2f %.2f %.2f %.2f\n", nm[k], a->p50_us, a->p99_us,
              rep->w4.have[1] ? b->p50_us : 0.0 / 0.0, rep->w4.have[1] ? b->p99_us : 0.0 / 0.0);
    }
  }
  fclose(f1);
  fclose(f2);
  fclose(f3);
  fprintf(fg, "set terminal pngcairo size 1400,1000 font ',10'\nset output '%s'\n", png);
  fprintf(fg,
          "set multiplot layout 2,2 title 'railnet-kvbench: railnet (lines) vs plain TCP "
          "through the same proxy model (dashed)'\nset grid\nset key top left\n");
  fprintf(fg, "set logscale x 2\nset format x '%%.0b%%BB'\nset xlabel 'request bytes'\n");
  /* one colour per series; railnet solid, the anchor dashed */
  static const char *const w1cols[] = {"using 1:2", "using 1:3", "using 1:4", "using 1:5"};
  if (blocks1) {
    for (int panel = 0; panel < 2; panel++) {
      fprintf(fg, panel ? "set logscale y 10\nset ylabel 'ms (p50)'\nset title 'W1 transfer time "
                          "per request'\nplot "
                        : "set ylabel 'GB/s'\nset title 'W1 throughput'\nplot ");
      for (int k = 0; k < blocks1; k++)
        fprintf(fg,
                "%s'%s' index %d %s with linespoints lw 2 lc %d title 'railnet %s', '%s' index %d "
                "%s with linespoints dt 2 lc %d title 'TCP %s'",
                k ? ", " : "", p1, k, w1cols[2 * panel], k + 1, names1[k], p1, k,
                w1cols[2 * panel + 1], k + 1, names1[k]);
      fprintf(fg, "\n");
    }
    fprintf(fg, "unset logscale y\n");
  } else {
    fprintf(fg, "set multiplot next\nset multiplot next\n");
  }
  if (blocks2) {
    fprintf(fg,
            "set xlabel 'block bytes'\nset logscale y 10\nset ylabel 'messages/s'\nset title "
            "'W2 message rate'\nplot ");
    for (int k = 0; k < blocks2; k++)
      fprintf(fg,
              "%s'%s' index %d using 1:3 with points pt 7 ps 1.5 lc %d title 'railnet %s', '%s' "
              "index %d using 1:4 with points pt 6 ps 1.5 lc %d title 'TCP %s'",
              k ? ", " : "", p2, k, k + 1, names2[k], p2, k, k + 1, names2[k]);
    fprintf(fg, "\nunset logscale y\n");
  } else {
    fprintf(fg, "set multiplot next\n");
  }
  if (rep->have_w4) {
    fprintf(fg,
            "unset logscale x\nset format x '%%g'\nset logscale y 10\nset xlabel ''\nset "
            "ylabel 'round trip, us'\nset title 'W4 small-message round trip'\nset style "
            "data histogram\nset style histogram clustered\nset style fill solid 0.6\n"
            "plot '%s' using 2:xtic(1) title 'railnet p50', '' using 3 title 'railnet p99', "
            "'' using 4 title 'TCP p50', '' using 5 title 'TCP p99'\n",
            p3);
  }
  fprintf(fg, "unset multiplot\n");
  fclose(fg);
  if (!kv_have_gnuplot()) {
    fprintf(stderr,
            "railnet-kvbench: --plot: gnuplot is not installed (Debian: apt-get install "
            "gnuplot-nox); the data and the script are in %s, %s, %s and %s\n",
            p1, p2, p3, gp);
    return -1;
  }
  char cmd[8300];
  snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
  int st = system(cmd);
  if (st != 0) {
    fprintf(stderr, "railnet-kvbench: --plot: gnuplot failed (status %d) on %s\n", st, gp);
    return -1;
  }
  return 0;
}
