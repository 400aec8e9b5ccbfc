/* NCCL_IB_HCA-style NIC filters (see topo/filter.h for the syntax).  Prefix
 * matching by default, as NCCL does: "mlx5_1" also selects mlx5_10. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "filter.h"
#include "model.h"

struct rn_topo_filter_ent {
  char name[64];
  int port; /* -1 any */
};

struct rn_topo_filter {
  int exclude, exact, n;
  struct rn_topo_filter_ent ent[];
};

int rn_topo_filter_parse(const char *spec, struct rn_topo_filter **out, char *err, size_t errlen) {
  *out = NULL;
  if (!spec || !*spec) return 0;
  int exclude = 0, exact = 0, cap = 1;
  const char *p = spec;
  if (*p == '^') exclude = 1, p++;
  if (*p == '=') exact = 1, p++;
  for (const char *q = p; *q; q++) cap += *q == ',';
  struct rn_topo_filter *f = calloc(1, sizeof(*f) + (size_t)cap * sizeof(f->ent[0]));
  if (!f) {
    rn_topo_errf(err, errlen, "NIC filter: out of memory");
    return -1;
  }
  f->exclude = exclude;
  f->exact = exact;
  while (*p) {
    size_t len = strcspn(p, ",");
    const char *colon = memchr(p, ':', len);
    size_t nlen = colon ? (size_t)(colon - p) : len;
    if (len == 0) { /* empty entries are ignored, like NCCL */
      p++;
      continue;
    }
    if (nlen == 0 || nlen >= sizeof(f->ent[0].name)) {
      rn_topo_errf(err, errlen, "NIC filter \"%s\": bad device name in \"%.*s\"", spec, (int)len,
                   p);
      goto out_free;
    }
    struct rn_topo_filter_ent *e = &f->ent[f->n];
    memcpy(e->name, p, nlen);
    e->name[nlen] = '\0';
    e->port = -1;
    if (colon) {
      char *end;
      long port = strtol(colon + 1, &end, 10);
      if (end == colon + 1 || end != p + len || port < 0 || port > 255) {
        rn_topo_errf(err, errlen, "NIC filter \"%s\": bad port in \"%.*s\"", spec, (int)len, p);
        goto out_free;
      }
      e->port = (int)port;
    }
    f->n++;
    p += len;
    if (*p == ',') p++;
  }
  *out = f;
  return 0;
out_free:
  free(f);
  return -1;
}

static int rn_topo_filter_name_eq(const struct rn_topo_filter *f, const char *ent,
                                  const char *name) {
  if (!name || !*name) return 0;
  return f->exact ? strcmp(ent, name) == 0 : strncmp(ent, name, strlen(ent)) == 0;
}

int rn_topo_filter_test(const struct rn_topo_filter *f, const char *name, const char *netdev,
                        int port) {
  if (!f || f->n == 0) return 1;
  int found = 0;
  for (int i = 0; i < f->n && !found; i++) {
    const struct rn_topo_filter_ent *e = &f->ent[i];
    if (e->port >= 0 && e->port != port) continue;
    found = rn_topo_filter_name_eq(f, e->name, name) || rn_topo_filter_name_eq(f, e->name, netdev);
  }
  return f->exclude ? !found : found;
}

void rn_topo_filter_free(struct rn_topo_filter *f) { free(f); }

int rn_topo_filter_match(const char *spec, const char *name, const char *netdev, int port) {
  struct rn_topo_filter *f = NULL;
  char err[8];
  if (rn_topo_filter_parse(spec, &f, err, sizeof(err))) return 0;
  int ok = rn_topo_filter_test(f, name, netdev, port);
  rn_topo_filter_free(f);
  return ok;
}
