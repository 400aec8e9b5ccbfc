/* NCCL_IB_HCA-style NIC filters (see topo/filter.h for the syntax).  Prefix
 * matching by default, as NCCL does: "mlx5_1" also selects mlx5_10.  Empty
 * entries are skipped as in NCCL's parseStringList; unlike NCCL (atoi), a
 * port, rail or plane that is not a number is an error, not port 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "filter.h"
#include "model.h"

struct rn_topo_filter_ent {
  char name[64];
  int port, rail, plane; /* -1 any / undefined */
};

struct rn_topo_filter {
  int exclude, exact, n;
  struct rn_topo_filter_ent ent[];
};

/* One optional number field of an entry: "" is -1 (NCCL: absent or empty). */
static int rn_filter_num(const char *s, size_t len, int max, int *out) {
  if (len == 0) {
    *out = -1;
    return 0;
  }
  long v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
    if (v > max) return -1;
  }
  *out = (int)v;
  return 0;
}

int rn_topo_filter_parse(const char *spec, struct rn_topo_filter **out, char *err, size_t errlen) {
  static const char *const fields[] = {"port", "rail", "plane"};
  static const int maxv[] = {255, 32767, 32767};
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
    if (len == 0) { /* empty entries are ignored, like NCCL */
      p++;
      continue;
    }
    const char *colon = memchr(p, ':', len);
    size_t nlen = colon ? (size_t)(colon - p) : len;
    if (nlen == 0 || nlen >= sizeof(f->ent[0].name)) {
      rn_topo_errf(err, errlen, "NIC filter \"%.100s\": bad device name in \"%.*s\"", spec,
                   (int)(len > 64 ? 64 : len), p);
      goto out_free;
    }
    struct rn_topo_filter_ent *e = &f->ent[f->n];
    memcpy(e->name, p, nlen);
    e->name[nlen] = '\0';
    int *vals[] = {&e->port, &e->rail, &e->plane};
    e->port = e->rail = e->plane = -1;
    const char *q = colon ? colon + 1 : NULL, *end = p + len;
    for (int k = 0; q && k < 4; k++) {
      if (k == 3) {
        rn_topo_errf(err, errlen,
                     "NIC filter \"%.100s\": \"%.*s\" has more than name:port:rail:plane", spec,
                     (int)(len > 64 ? 64 : len), p);
        goto out_free;
      }
      const char *c2 = memchr(q, ':', (size_t)(end - q));
      size_t flen = c2 ? (size_t)(c2 - q) : (size_t)(end - q);
      if (rn_filter_num(q, flen, maxv[k], vals[k])) {
        rn_topo_errf(err, errlen, "NIC filter \"%.100s\": bad %s in \"%.*s\" (expected a number)",
                     spec, fields[k], (int)(len > 64 ? 64 : len), p);
        goto out_free;
      }
      q = c2 ? c2 + 1 : NULL;
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

static int rn_topo_filter_find(const struct rn_topo_filter *f, const char *name, const char *netdev,
                               int port) {
  for (int i = 0; i < f->n; i++) {
    const struct rn_topo_filter_ent *e = &f->ent[i];
    if (e->port >= 0 && port >= 0 && e->port != port) continue;
    if (rn_topo_filter_name_eq(f, e->name, name) || rn_topo_filter_name_eq(f, e->name, netdev))
      return i;
  }
  return -1;
}

int rn_topo_filter_test(const struct rn_topo_filter *f, const char *name, const char *netdev,
                        int port) {
  if (!f || f->n == 0) return 1;
  int found = rn_topo_filter_find(f, name, netdev, port) >= 0;
  return f->exclude ? !found : found;
}

void rn_topo_filter_ids(const struct rn_topo_filter *f, const char *name, const char *netdev,
                        int port, int *rail, int *plane) {
  *rail = *plane = -1;
  if (!f || f->exclude) return;
  int i = rn_topo_filter_find(f, name, netdev, port);
  if (i < 0) return;
  *rail = f->ent[i].rail;
  *plane = f->ent[i].plane;
}

void rn_topo_filter_free(struct rn_topo_filter *f) { free(f); }

int rn_topo_filter_match(const char *spec, const char *name, const char *netdev, int port) {
  struct rn_topo_filter *f = NULL;
  char err[8], dev[64];
  if (rn_topo_filter_parse(spec, &f, err, sizeof(err))) return 0;
  /* "mlx5_0:2" (a port of a multi-port device) matches as device mlx5_0. */
  snprintf(dev, sizeof(dev), "%s", name ? name : "");
  char *colon = strrchr(dev, ':');
  if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1)) *colon = '\0';
  int ok = rn_topo_filter_test(f, dev, netdev, port);
  rn_topo_filter_free(f);
  return ok;
}

int rn_topo_filter_check(const char *spec, char *err, size_t errlen) {
  struct rn_topo_filter *f = NULL;
  if (rn_topo_filter_parse(spec, &f, err, errlen)) return -1;
  rn_topo_filter_free(f);
  return 0;
}
