/* What railnet-kvbench reports: one table per workload, a goals block, a
 * JSON document and a plot.  Owner: the receiving side's main (kvbench.c),
 * which fills it and calls kv_report_*. */
#ifndef RN_KV_REPORT_H
#define RN_KV_REPORT_H

#include <stdio.h>

#include "kv.h"

enum { KV_RN = 0, KV_TCP = 1 };

struct kv_row {
  struct kv_case c;
  struct kv_result r[2]; /* railnet, plain TCP (r[KV_TCP].ok == 0: not run) */
};

struct kv_w4 {
  struct kv_case bulk;
  size_t size, wire;
  int have[2];
  struct kv_ping_result alone[2], own[2], shared[2];
  struct kv_result bulk_alone[2];
};

struct kv_report {
  char header[2048];
  int quick, verify, anchor, detail;
  struct kv_nccl m;
  struct kv_row *rows;
  int nrows;
  struct kv_w4 w4;
  int have_w4;
};

void kv_report_tables(FILE *f, const struct kv_report *rep);
int kv_report_json(const char *path, const struct kv_report *rep);
/* Data files next to png, then gnuplot; 0 ok, -1 with a reason printed. */
int kv_report_plot(const char *png, const struct kv_report *rep);
int kv_have_gnuplot(void);

#endif
