/* The rail planner: a pure function from (model, options) to plan.
 *
 * It walks the model tree bottom-up.  At each node, the GPUs and NICs not
 * yet placed below it meet: k GPUs and m NICs split evenly (m/k NICs each
 * when m >= k, each NIC shared by k/m GPUs when m < k), closest pairs
 * first, faster NICs first at equal distance.  What is left moves up.  At a
 * CPU, package or host node, a GPU that found no free NIC, or only one much
 * slower than sharing a placed rail set, shares the rail set that gives it
 * the most bandwidth (NCCL picks its local NIC bandwidth first).  Free NICs
 * that reach the host are unused: farther than every GPU's own rails
 * (storage, management).  Hosts of a multi-host file are planned apart.
 *
 * A GPU's NICs are fused into one virtual device only when NCCL would
 * accept the merge: one link layer, comparable speeds.  Each virtual device
 * gets rail and plane ids for ncclNet v12 and a standby NIC.
 *
 * Only topology and bus-id order decide: GPU i is never NIC i. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "filter.h"
#include "model.h"

void rn_plan_opts_default(struct rn_plan_opts *o) {
  memset(o, 0, sizeof(*o));
  o->gdr_level = RN_PATH_PXB;
  o->gdr_c2c = 1;
  o->standby = 1;
  o->host = -1;
  o->pxn = 1;
  o->pxn_c2c = 1;
}

/* Why a NIC is (not) a rail candidate. */
enum rn_status {
  RN_ST_CAND = 1,
  RN_ST_TRANSPORT, /* not in the transport's candidate list */
  RN_ST_FILTERED,
  RN_ST_NOTRDMA,
  RN_ST_SLOW,
  RN_ST_HOST, /* on a host this plan does not cover */
};

enum rn_how {
  RN_HOW_SPLIT, /* split of the NICs meeting at a node */
  RN_HOW_SHARE, /* shares a placed rail set */
};

/* A NIC much slower than the fastest on its host is never a rail: NCCL
 * picks local NICs by bandwidth first, so it would not use it either. */
#define RN_SLOW_FACTOR 4
/* Fusing stripes evenly: members within 25% of each other. */
#define RN_SPEED_NUM 5
#define RN_SPEED_DEN 4

struct rn_pair {
  int path, speed, numa_miss, hops, g, n;
};

struct rn_pl {
  const struct rn_topo *t;
  const struct rn_plan_opts *o;
  struct rn_plan *p;
  struct rn_topo_filter *filter;
  int *sel;           /* per model GPU: 1 when in the subset */
  int *status;        /* per model NIC: enum rn_status */
  int *free_;         /* per model NIC: candidate not yet placed */
  int *users;         /* per model NIC: GPUs using it */
  int *slowskip;      /* per model NIC: a GPU preferred sharing a faster rail set */
  int *ghead, *gnext; /* per node / per GPU: GPUs waiting at a node */
  int *nhead, *nnext; /* per node / per NIC: free NICs waiting at a node */
  int *nrails;        /* per model GPU */
  int *rails;         /* per model GPU: RN_PLAN_MAX_RAILS NIC indices */
  int *how;           /* per model GPU: enum rn_how */
  int *share_node;    /* per model GPU: node where it shared */
  int *gbuf, *nbuf, *cnt, *extra;
  struct rn_pair *pairs;
  double *gpu_bw;             /* per model GPU: GB/s to its CPU, 0 unknown */
  const struct rn_plan *full; /* the plan of every GPU, when this one is a subset */
};

static int rn_pair_cmp(const void *a, const void *b) {
  const struct rn_pair *x = a, *y = b;
  if (x->path != y->path) return x->path - y->path;
  if (x->speed != y->speed) return y->speed - x->speed; /* faster first */
  if (x->numa_miss != y->numa_miss) return x->numa_miss - y->numa_miss;
  if (x->hops != y->hops) return x->hops - y->hops;
  if (x->g != y->g) return x->g - y->g;
  return x->n - y->n;
}

static int rn_int_cmp(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static int rn_plan_note(struct rn_plan *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int rn_plan_note(struct rn_plan *p, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  char **nn = realloc(p->notes, (size_t)(p->nnotes + 1) * sizeof(char *));
  if (!nn) return -1;
  p->notes = nn;
  p->notes[p->nnotes] = strdup(buf);
  if (!p->notes[p->nnotes]) return -1;
  p->nnotes++;
  return 0;
}

void rn_plan_free(struct rn_plan *p) {
  if (!p) return;
  for (int i = 0; i < p->nnotes; i++) free(p->notes[i]);
  free(p->notes);
  for (int i = 0; p->unused_why && i < p->nunused; i++) free(p->unused_why[i]);
  free(p->unused_why);
  free(p->unused);
  free(p->vdevs);
  free(p->gpus);
  free(p->nic_rail);
  free(p->nic_plane);
  free(p->paths);
  free(p);
}

enum rn_path rn_plan_path(const struct rn_plan *p, int g, int n) {
  if (!p || !p->paths || g < 0 || n < 0 || n >= p->npath_nics) return RN_PATH_DIS;
  return (enum rn_path)p->paths[(size_t)g * (size_t)p->npath_nics + (size_t)n];
}

/* Tree hops between a GPU and a NIC: the tie-break after the path type. */
static int rn_hops(const struct rn_topo *t, int g, int n) {
  int a = t->gpus[g].node, b = t->nics[n].node, h = 0;
  while (a != b && a >= 0 && b >= 0) {
    if (t->nodes[a].depth >= t->nodes[b].depth)
      a = t->nodes[a].parent;
    else
      b = t->nodes[b].parent;
    h++;
  }
  return h;
}

/* Two NICs NCCL would fuse: one link layer (unknown matches), speeds within
 * RN_SPEED_NUM/RN_SPEED_DEN of each other (unknown matches). */
static int rn_compatible(const struct rn_topo *t, int a, int b) {
  const struct rn_topo_nic *x = &t->nics[a].pub, *y = &t->nics[b].pub;
  if (x->link && y->link && x->link != y->link) return 0;
  if (x->speed_mbps > 0 && y->speed_mbps > 0) {
    long lo = x->speed_mbps < y->speed_mbps ? x->speed_mbps : y->speed_mbps;
    long hi = x->speed_mbps < y->speed_mbps ? y->speed_mbps : x->speed_mbps;
    if (hi * RN_SPEED_DEN > lo * RN_SPEED_NUM) return 0;
  }
  return 1;
}

/* "0,2,5", "0-3", or bus ids ("0000:1b:00.0", "1b:00.0"); "*" all, "" none. */
static int rn_parse_subset(const struct rn_topo *t, const char *spec, int *sel, char *err,
                           size_t errlen) {
  const char *p = spec;
  if (strcmp(spec, "*") == 0) {
    for (int g = 0; g < t->ngpus; g++) sel[g] = 1;
    return 0;
  }
  while (*p) {
    size_t len = strcspn(p, ",");
    char tok[64];
    if (len == 0) {
      p++;
      continue;
    }
    if (len >= sizeof(tok)) {
      rn_topo_errf(err, errlen, "GPU subset \"%.80s\": entry too long", spec);
      return -1;
    }
    memcpy(tok, p, len);
    tok[len] = '\0';
    if (strchr(tok, ':')) {
      char norm[16];
      int found = -1;
      if (rn_topo_busid_norm(tok, norm, sizeof(norm)) == 0)
        for (int g = 0; g < t->ngpus; g++)
          if (strcmp(t->gpus[g].pub.busid, norm) == 0) found = g;
      if (found < 0) {
        rn_topo_errf(err, errlen, "GPU subset: no GPU with bus id \"%s\"", tok);
        return -1;
      }
      sel[found] = 1;
    } else {
      char *end;
      long a = strtol(tok, &end, 10), b = a;
      if (end != tok && *end == '-') {
        const char *q = end + 1;
        b = strtol(q, &end, 10);
        if (end == q) end = (char *)q - 1; /* force the error below */
      }
      if (end == tok || *end != '\0' || a < 0 || b < a) {
        rn_topo_errf(err, errlen, "GPU subset: \"%s\" is not an index, range or bus id", tok);
        return -1;
      }
      if (b >= t->ngpus) {
        rn_topo_errf(err, errlen, "GPU subset: index %ld out of range (the model has %d GPUs)", b,
                     t->ngpus);
        return -1;
      }
      for (long i = a; i <= b; i++) sel[i] = 1;
    }
    p += len;
    if (*p == ',') p++;
  }
  return 0;
}

static void rn_assign(struct rn_pl *s, int g, int n) {
  s->rails[g * RN_PLAN_MAX_RAILS + s->nrails[g]++] = n;
  s->users[n]++;
  s->free_[n] = 0;
}

/* n may join g's rail set: NCCL would fuse it with g's lead rail, and the
 * NICs g has do not yet carry what the GPU's own link can (more would only
 * add latency; NCCL counts NICs against GPU bandwidth alike in
 * ncclTopoGetLocalNetCountByBw). */
static int rn_fits(struct rn_pl *s, int g, int n) {
  if (s->nrails[g] == 0) return 1;
  if (!rn_compatible(s->t, s->rails[g * RN_PLAN_MAX_RAILS], n)) return 0;
  if (s->gpu_bw[g] <= 0) return 1;
  double have = 0;
  for (int i = 0; i < s->nrails[g]; i++) {
    int sp = s->t->nics[s->rails[g * RN_PLAN_MAX_RAILS + i]].pub.speed_mbps;
    if (sp <= 0) return 1; /* speeds unknown: no limit */
    have += sp / 8000.0;
  }
  return have < s->gpu_bw[g];
}

/* k GPUs meet m free NICs at a node: split them evenly, closest first. */
static void rn_split(struct rn_pl *s, const int *gs, int k, const int *ns, int m) {
  const struct rn_topo *t = s->t;
  int np = 0;
  for (int i = 0; i < k; i++) {
    for (int j = 0; j < m; j++) {
      struct rn_pair *pr = &s->pairs[np++];
      pr->g = gs[i];
      pr->n = ns[j];
      pr->path = rn_topo_pci_path(t, gs[i], ns[j]);
      pr->speed = t->nics[ns[j]].pub.speed_mbps;
      pr->hops = rn_hops(t, gs[i], ns[j]);
      int gn = t->gpus[gs[i]].pub.numa, nn = t->nics[ns[j]].pub.numa;
      pr->numa_miss = gn >= 0 && nn >= 0 && gn != nn;
    }
  }
  qsort(s->pairs, (size_t)np, sizeof(*s->pairs), rn_pair_cmp);
  for (int i = 0; i < k; i++) s->cnt[gs[i]] = 0, s->extra[gs[i]] = 0;
  for (int j = 0; j < m; j++) s->extra[t->ngpus + ns[j]] = 0;
  if (m >= k) {
    int q = m / k, extras = m % k;
    if (q >= RN_PLAN_MAX_RAILS) q = RN_PLAN_MAX_RAILS, extras = 0;
    for (int i = 0; i < np; i++) {
      const struct rn_pair *pr = &s->pairs[i];
      if (s->cnt[pr->g] < q && s->free_[pr->n] && rn_fits(s, pr->g, pr->n))
        rn_assign(s, pr->g, pr->n), s->cnt[pr->g]++;
    }
    for (int i = 0; i < np && extras > 0; i++) {
      const struct rn_pair *pr = &s->pairs[i];
      if (s->cnt[pr->g] == q && !s->extra[pr->g] && s->free_[pr->n] && rn_fits(s, pr->g, pr->n)) {
        rn_assign(s, pr->g, pr->n);
        s->extra[pr->g] = 1;
        extras--;
      }
    }
  } else {
    int c = k / m, extras = k % m;
    int *nused = s->extra + t->ngpus + t->nnics; /* scratch per NIC: users here */
    for (int j = 0; j < m; j++) nused[ns[j]] = 0;
    for (int i = 0; i < np; i++) {
      const struct rn_pair *pr = &s->pairs[i];
      if (s->cnt[pr->g] == 0 && nused[pr->n] < c) {
        rn_assign(s, pr->g, pr->n);
        s->cnt[pr->g]++;
        nused[pr->n]++;
      }
    }
    for (int i = 0; i < np && extras > 0; i++) {
      const struct rn_pair *pr = &s->pairs[i];
      if (s->cnt[pr->g] == 0 && nused[pr->n] == c && !s->extra[t->ngpus + pr->n]) {
        rn_assign(s, pr->g, pr->n);
        s->cnt[pr->g]++;
        nused[pr->n]++;
        s->extra[t->ngpus + pr->n] = 1;
        extras--;
      }
    }
  }
  for (int i = 0; i < k; i++)
    if (s->nrails[gs[i]]) s->how[gs[i]] = RN_HOW_SPLIT;
}

/* The placed rail set under node v that gives GPU g the most: closest
 * first, then the most bandwidth per GPU once g joins, then the least
 * loaded.  Returns the GPU owning it, -1 if none; *eff its Mb/s per GPU. */
static int rn_best_share(struct rn_pl *s, int g, int v, long *eff) {
  const struct rn_topo *t = s->t;
  int best = -1, bload = 0, bpath = 0, bhops = 0;
  long beff = 0;
  for (int h = 0; h < t->ngpus; h++) {
    if (h == g || s->nrails[h] == 0 || s->how[h] != RN_HOW_SPLIT) continue;
    const int *r = &s->rails[h * RN_PLAN_MAX_RAILS];
    if (!rn_topo_node_under(t, t->nics[r[0]].node, v)) continue;
    int load = 0;
    long speed = 0;
    for (int i = 0; i < s->nrails[h]; i++) {
      if (s->users[r[i]] > load) load = s->users[r[i]];
      speed += t->nics[r[i]].pub.speed_mbps;
    }
    long e = speed / (load + 1);
    int path = rn_topo_pci_path(t, g, r[0]), hops = rn_hops(t, g, r[0]);
    int better = best < 0 || path < bpath ||
                 (path == bpath &&
                  (e > beff || (e == beff && (load < bload || (load == bload && hops < bhops)))));
    if (better) best = h, bload = load, beff = e, bpath = path, bhops = hops;
  }
  *eff = beff;
  return best;
}

/* GPU g shares the rail set of GPU owner. */
static void rn_share_with(struct rn_pl *s, int g, int owner, int v) {
  for (int i = 0; i < s->nrails[owner]; i++)
    rn_assign(s, g, s->rails[owner * RN_PLAN_MAX_RAILS + i]);
  s->how[g] = RN_HOW_SHARE;
  s->share_node[g] = v;
}

static int rn_is_share_level(enum rn_node_kind k) {
  return k == RN_NODE_CPU || k == RN_NODE_PACKAGE || k == RN_NODE_HOST;
}

/* At a CPU, package or host node: a GPU whose best free NIC here is no
 * closer than a placed rail set, and gives less than sharing it would,
 * shares instead (a free 10 Gb/s NIC never beats half of a 200 Gb/s one). */
static int rn_prefer_share(struct rn_pl *s, int *gs, int k, const int *ns, int m, int v) {
  const struct rn_topo *t = s->t;
  int kept = 0;
  for (int i = 0; i < k; i++) {
    int g = gs[i], bestn = -1;
    for (int j = 0; j < m; j++) {
      int n = ns[j];
      if (bestn < 0 || rn_topo_pci_path(t, g, n) < rn_topo_pci_path(t, g, bestn) ||
          (rn_topo_pci_path(t, g, n) == rn_topo_pci_path(t, g, bestn) &&
           t->nics[n].pub.speed_mbps > t->nics[bestn].pub.speed_mbps))
        bestn = n;
    }
    long eff = 0;
    int owner = rn_best_share(s, g, v, &eff);
    if (owner >= 0 && bestn >= 0 && t->nics[bestn].pub.speed_mbps > 0 &&
        rn_topo_pci_path(t, g, s->rails[owner * RN_PLAN_MAX_RAILS]) <=
            rn_topo_pci_path(t, g, bestn) &&
        eff > t->nics[bestn].pub.speed_mbps) {
      rn_share_with(s, g, owner, v);
      for (int j = 0; j < m; j++)
        if (t->nics[ns[j]].pub.speed_mbps < eff) s->slowskip[ns[j]] = 1;
      continue;
    }
    gs[kept++] = g;
  }
  return kept;
}

static void rn_walk(struct rn_pl *s) {
  const struct rn_topo *t = s->t;
  for (int v = t->nnodes - 1; v >= 0; v--) {
    if (t->nodes[v].depth < 0) continue; /* folded Broadcom level */
    int k = 0, m = 0;
    for (int g = s->ghead[v]; g >= 0; g = s->gnext[g]) s->gbuf[k++] = g;
    for (int n = s->nhead[v]; n >= 0; n = s->nnext[n]) s->nbuf[m++] = n;
    if (k == 0 && m == 0) continue;
    qsort(s->gbuf, (size_t)k, sizeof(int), rn_int_cmp);
    qsort(s->nbuf, (size_t)m, sizeof(int), rn_int_cmp);
    int share_level = rn_is_share_level(t->nodes[v].kind);
    if (k && m && share_level) k = rn_prefer_share(s, s->gbuf, k, s->nbuf, m, v);
    if (k && m) rn_split(s, s->gbuf, k, s->nbuf, m);
    if (k && share_level)
      for (int i = 0; i < k; i++) {
        long eff;
        int g = s->gbuf[i], owner;
        if (s->nrails[g] == 0 && (owner = rn_best_share(s, g, v, &eff)) >= 0)
          rn_share_with(s, g, owner, v);
      }
    int up = t->nodes[v].parent;
    /* Hosts are planned apart: nothing moves above a host. */
    if (up < 0 || t->nodes[v].kind == RN_NODE_HOST) continue;
    /* Whatever is left waits at the parent. */
    for (int i = 0; i < k; i++) {
      int g = s->gbuf[i];
      if (s->nrails[g]) continue;
      s->gnext[g] = s->ghead[up];
      s->ghead[up] = g;
    }
    for (int i = 0; i < m; i++) {
      int n = s->nbuf[i];
      if (!s->free_[n]) continue;
      s->nnext[n] = s->nhead[up];
      s->nhead[up] = n;
    }
  }
}

/* Rails best first: nearest path, then fastest, then fewest hops, then bus order. */
static void rn_sort_rails(struct rn_pl *s, int g) {
  int *r = &s->rails[g * RN_PLAN_MAX_RAILS];
  for (int i = 1; i < s->nrails[g]; i++) {
    for (int j = i; j > 0; j--) {
      const struct rn_topo *t = s->t;
      int a = r[j - 1], b = r[j];
      int pa = rn_topo_pci_path(t, g, a), pb = rn_topo_pci_path(t, g, b);
      int sa = t->nics[a].pub.speed_mbps, sb = t->nics[b].pub.speed_mbps;
      int ha = rn_hops(t, g, a), hb = rn_hops(t, g, b);
      int swap =
          pb < pa || (pb == pa && (sb > sa || (sb == sa && (hb < ha || (hb == ha && b < a)))));
      if (!swap) break;
      r[j] = a;
      r[j - 1] = b;
    }
  }
}

/* NCCL's path and GDR decision for GPU g and NIC n under the plan's options
 * (rn_topo_route): the label NCCL shows, which the plan shows too; the
 * rails are ranked by the PCI distance (rn_topo_pci_path) all the same. */
static void rn_route_of(const struct rn_pl *s, int g, int n, struct rn_route *r) {
  struct rn_route_opts ro = {.pxn = s->o->pxn,
                             .pxn_c2c = s->o->pxn_c2c,
                             .gdr_level = s->o->gdr_level,
                             .gdr_c2c = s->o->gdr_c2c};
  rn_topo_route(s->t, g, n, &ro, r);
}

static void rn_reason(struct rn_pl *s, int g, struct rn_plan_rail *rail,
                      const struct rn_route *rt) {
  const struct rn_topo *t = s->t;
  const struct rn_topo_nic *np = &t->nics[rail->nic].pub;
  char via[96], pci[128] = "", why[128] = "", gname[24];
  rn_topo_via(t, g, rail->nic, rt->path, rt->peer, via, sizeof(via));
  /* Without GPUDirect RDMA NCCL goes through the GPU's CPU: say what the
   * PCI path (the one the rails are ranked by) would have been. */
  if (rt->diverted && rt->path != rt->pci) {
    char pvia[96];
    rn_topo_via(t, g, rail->nic, rt->pci, -1, pvia, sizeof(pvia));
    snprintf(pci, sizeof(pci), " instead of %s via %s", rn_path_name(rt->pci), pvia);
  }
  if (s->how[g] == RN_HOW_SHARE) {
    enum rn_node_kind kind = t->nodes[s->share_node[g]].kind;
    snprintf(why, sizeof(why), "%s",
             kind == RN_NODE_CPU ? ", shares the best rail set on its CPU"
                                 : ", no free NIC on its NUMA node: shares the best rail set");
  } else if (s->users[rail->nic] > 1) {
    snprintf(why, sizeof(why), ", shared by %d GPUs", s->users[rail->nic]);
  }
  rn_topo_gpu_label(t, g, gname, sizeof(gname));
  char gdrwhy[sizeof(rail->gdr_why)]; /* a copy: reason and gdr_why share the struct */
  snprintf(gdrwhy, sizeof(gdrwhy), "%s", rail->gdr_why);
  int w = snprintf(rail->reason, sizeof(rail->reason), "GPU %s -> %s: %s via %s%s%s, GDR %s (%s)",
                   gname, np->name, rn_path_name(rail->path), via, pci, why,
                   rail->gdr ? "yes" : "no", gdrwhy);
  if (w >= (int)sizeof(rail->reason)) /* long names: mark the cut */
    memcpy(rail->reason + sizeof(rail->reason) - 4, "...", 4);
}

static int rn_same_set(const int *a, int na, const int *b, int nb) {
  if (na != nb) return 0;
  for (int i = 0; i < na; i++) {
    int found = 0;
    for (int j = 0; j < nb && !found; j++) found = a[i] == b[j];
    if (!found) return 0;
  }
  return 1;
}

static void rn_vdev_init(const struct rn_topo *t, struct rn_plan_vdev *d, const int *nics, int n) {
  memset(d, 0, sizeof(*d));
  d->gdr = 1;
  d->nic_gdr = 1;
  d->rail_id = d->plane_id = d->standby = -1;
  d->host = t->nics[nics[0]].pub.host;
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    const struct rn_topo_nic *np = &t->nics[nics[i]].pub;
    d->nics[d->nnics++] = nics[i];
    d->speed_mbps += np->speed_mbps;
    d->nic_gdr &= np->gdr != 0;
    int w = snprintf(d->name + off, sizeof(d->name) - off, "%s%s", i ? "+" : "", np->name);
    if (w < 0 || (size_t)w >= sizeof(d->name) - off)
      off = sizeof(d->name) - 1;
    else
      off += (size_t)w;
  }
}

/* Lists model NIC names whose status is want, shortened past a few. */
static void rn_name_list(const struct rn_topo *t, const int *status, int want, char *buf,
                         size_t len) {
  size_t off = 0;
  int shown = 0, more = 0;
  buf[0] = '\0';
  for (int n = 0; n < t->nnics; n++) {
    if (status[n] != want) continue;
    if (shown == 8) {
      more++;
      continue;
    }
    int w = snprintf(buf + off, len - off, "%s%s", shown ? ", " : "", t->nics[n].pub.name);
    if (w < 0 || (size_t)w >= len - off) break;
    off += (size_t)w;
    shown++;
  }
  if (more && off < len) snprintf(buf + off, len - off, " and %d more", more);
}

/* Why NIC n is in no rail set. */
static void rn_unused_why(struct rn_pl *s, int n, char *buf, size_t len) {
  const struct rn_topo *t = s->t;
  const struct rn_topo_nic *np = &t->nics[n].pub;
  switch (s->status[n]) {
    case RN_ST_TRANSPORT:
      snprintf(buf, len, "not driven by the transport (no usable port)");
      return;
    case RN_ST_FILTERED:
      snprintf(buf, len, "filtered by %s",
               s->o->nic_filter_from ? s->o->nic_filter_from : "the NIC filter");
      return;
    case RN_ST_NOTRDMA:
      snprintf(buf, len, "not an RDMA device, and RDMA NICs exist");
      return;
    case RN_ST_SLOW:
      snprintf(buf, len, "slower than the rails (%d Mb/s): NCCL prefers the faster NICs",
               np->speed_mbps);
      return;
    default:
      break;
  }
  for (int m = 0; m < t->nnics; m++)
    if (m != n && t->nics[m].pub.asic == np->asic && s->users[m] > 0) {
      snprintf(
          buf, len, "second port of a NIC already used (%s; %s)", t->nics[m].pub.name,
          rn_compatible(t, m, n) ? "its GPUs have enough rails" : "link layer or speed differs");
      return;
    }
  if (s->full && s->full->nic_rail) {
    for (int i = 0; i < s->full->ngpus; i++) {
      const struct rn_plan_gpu *fg = &s->full->gpus[i];
      for (int r = 0; r < fg->nrails; r++)
        if (fg->rails[r].nic == n && !s->sel[fg->gpu]) {
          char gname[24];
          rn_topo_gpu_label(t, fg->gpu, gname, sizeof(gname));
          snprintf(buf, len, "rail of GPU %s, which is not in the GPU subset", gname);
          return;
        }
    }
  }
  if (s->slowskip[n]) {
    snprintf(buf, len, "slower (%d Mb/s) than sharing a nearby rail set", np->speed_mbps);
    return;
  }
  for (int g = 0; g < t->ngpus; g++) {
    if (!s->sel[g] || t->gpus[g].pub.host != np->host || s->nrails[g] == 0) continue;
    int r0 = s->rails[g * RN_PLAN_MAX_RAILS];
    if (rn_topo_pci_path(t, g, n) <= rn_topo_pci_path(t, g, r0) && !rn_compatible(t, r0, n)) {
      snprintf(buf, len, "link layer or speed differs from the rails next to it (%s)",
               t->nics[r0].pub.name);
      return;
    }
  }
  snprintf(buf, len, "storage NIC: farther than every GPU's own rails");
}

/* Rail and plane ids (ncclNet v12): per host, each GPU rail set in GPU
 * bus order is one rail (its NICs are cabled to that rail's leaf on every
 * host alike); a NIC's plane is its place in the set, so the k-th NICs of
 * all rail sets form plane k.  Ids a file or the filter gives win. */
static void rn_rail_ids(struct rn_pl *s, const struct rn_plan *full) {
  const struct rn_topo *t = s->t;
  struct rn_plan *p = s->p;
  for (int n = 0; n < t->nnics; n++) p->nic_rail[n] = p->nic_plane[n] = -1;
  int *next = calloc((size_t)t->nhosts + 1, sizeof(int));
  for (int d = 0; next && d < full->nvdevs; d++) {
    const struct rn_plan_vdev *v = &full->vdevs[d];
    if (v->nusers == 0) continue;
    int rail = next[v->host]++;
    for (int i = 0; i < v->nnics; i++)
      if (p->nic_rail[v->nics[i]] < 0) p->nic_rail[v->nics[i]] = rail, p->nic_plane[v->nics[i]] = i;
  }
  free(next);
  for (int n = 0; n < t->nnics; n++) {
    const struct rn_topo_nic *np = &t->nics[n].pub;
    int r = t->nics[n].user_rail, pl = t->nics[n].user_plane, fr, fp;
    rn_topo_filter_ids(s->filter, np->device, np->netdev, np->port, &fr, &fp);
    if (fr >= 0) r = fr;
    if (fp >= 0) pl = fp;
    if (r >= 0) p->nic_rail[n] = r;
    if (pl >= 0) p->nic_plane[n] = pl;
  }
  int rail[RN_PLAN_MAX_RAILS], plane[RN_PLAN_MAX_RAILS];
  for (int d = 0; d < p->nvdevs; d++) {
    struct rn_plan_vdev *v = &p->vdevs[d];
    for (int i = 0; i < v->nnics; i++)
      rail[i] = p->nic_rail[v->nics[i]], plane[i] = p->nic_plane[v->nics[i]];
    rn_plan_fused_ids(rail, plane, v->nnics, &v->rail_id, &v->plane_id);
  }
}

void rn_plan_fused_ids(const int *rail, const int *plane, int n, int *rail_id, int *plane_id) {
  *rail_id = *plane_id = -1;
  if (n < 1) return;
  *rail_id = rail[0];
  *plane_id = plane[0];
  if (n == 1) return;
  int mask = RN_PLAN_PLANE_VIRTUAL;
  for (int i = 0; i < n; i++) {
    if (rail[i] != *rail_id) *rail_id = -1;
    if (plane[i] < 0 || plane[i] >= RN_PLAN_PLANE_BITS) mask = -1;
    if (mask >= 0) mask |= 1 << plane[i];
  }
  *plane_id = mask;
}

/* The standby of a virtual device: the nearest candidate NIC outside its
 * rail set that NCCL could fuse with its lead (one link layer, comparable
 * speed), judged from the GPUs using it; unused NICs before other GPUs'
 * rails, then the least shared, then bus order. */
static void rn_standby(struct rn_pl *s, struct rn_plan_vdev *v, const int *vusers, int nv,
                       int *chosen) {
  const struct rn_topo *t = s->t;
  int lead = v->nics[0], best = -1, bpath = 0, bmiss = 0, busers = 0, bg = -1, bchosen = 0;
  if (!s->o->standby) {
    snprintf(v->standby_why, sizeof(v->standby_why),
             "none: standby rails are off (RAILNET_STANDBY=0)");
    return;
  }
  for (int n = 0; n < t->nnics; n++) {
    if (s->status[n] != RN_ST_CAND || t->nics[n].pub.host != v->host) continue;
    int in = 0;
    for (int i = 0; i < v->nnics; i++) in |= v->nics[i] == n;
    if (in || !rn_compatible(t, lead, n)) continue;
    int path = RN_PATH_DIS, miss = 0, from = -1;
    for (int i = 0; i < nv; i++) {
      int p = rn_topo_pci_path(t, vusers[i], n);
      if (p < path) path = p, from = vusers[i];
    }
    if (nv == 0) path = rn_topo_nic_path(t, lead, n);
    if (path >= RN_PATH_DIS) continue;
    int gnuma = from >= 0 ? t->gpus[from].pub.numa : t->nics[lead].pub.numa;
    miss = gnuma >= 0 && t->nics[n].pub.numa >= 0 && gnuma != t->nics[n].pub.numa;
    /* Spread the standbys: a NIC already standing in for others comes last. */
    int better =
        best < 0 || path < bpath ||
        (path == bpath &&
         (miss < bmiss || (miss == bmiss && (s->users[n] < busers ||
                                             (s->users[n] == busers && chosen[n] < bchosen)))));
    if (better)
      best = n, bpath = path, bmiss = miss, busers = s->users[n], bg = from, bchosen = chosen[n];
  }
  if (best < 0) {
    snprintf(v->standby_why, sizeof(v->standby_why),
             "none: no other NIC on this host with the same link layer and a comparable speed");
    return;
  }
  v->standby = best;
  chosen[best]++;
  char from[64], path[24];
  snprintf(path, sizeof(path), "%s", rn_path_name((enum rn_path)bpath));
  if (bg >= 0) {
    char gname[24];
    struct rn_route rt;
    rn_topo_gpu_label(t, bg, gname, sizeof(gname));
    snprintf(from, sizeof(from), "from GPU %s", gname);
    /* A pair without GPUDirect RDMA: NCCL's name for it, as the matrix
     * shows it, and the PCI path, which picked the standby. */
    rn_route_of(s, bg, best, &rt);
    if (rt.diverted && rt.path != rt.pci)
      snprintf(path, sizeof(path), "%s (%s on PCIe)", rn_path_name(rt.path), rn_path_name(rt.pci));
  } else
    snprintf(from, sizeof(from), "from %.48s", t->nics[lead].pub.name);
  snprintf(v->standby_why, sizeof(v->standby_why),
           "%.48s: %s %s, %s; used only while every rail is down", t->nics[best].pub.name, path,
           from, busers ? "another GPU's rail" : "otherwise unused");
}

static int rn_plan_fill(struct rn_pl *s, const struct rn_plan *full, char *err, size_t errlen) {
  const struct rn_topo *t = s->t;
  struct rn_plan *p = s->p;
  int nsel = 0, ncand = 0, planned_gpus = 0;
  for (int g = 0; g < t->ngpus; g++) nsel += s->sel[g];
  for (int n = 0; n < t->nnics; n++) ncand += s->status[n] == RN_ST_CAND;
  for (int g = 0; g < t->ngpus; g++)
    planned_gpus += s->o->host < 0 || t->gpus[g].pub.host == s->o->host;

  p->gdr_level = s->o->gdr_level;
  for (int i = 0; i < t->nnotes; i++)
    if (rn_plan_note(p, "model: %s", t->notes[i])) goto out_oom;
  if (planned_gpus == 0 &&
      rn_plan_note(p, "no GPUs in the model: every NIC is its own virtual device"))
    goto out_oom;
  if (t->nnics == 0 && rn_plan_note(p, "no NICs in the model")) goto out_oom;
  /* No GPU selected plans like no GPU at all, so a process that sees no
   * GPU still gets devices (and the plugin and the CLI agree on them). */
  if (t->ngpus && planned_gpus && nsel == 0 &&
      rn_plan_note(p, "no GPU selected (empty GPU subset): every NIC is its own virtual device"))
    goto out_oom;
  int gpuless = planned_gpus == 0 || nsel == 0;

  size_t G = (size_t)t->ngpus, N = (size_t)t->nnics;
  p->gpus = calloc(nsel ? (size_t)nsel : 1, sizeof(*p->gpus));
  p->vdevs = calloc(N ? N : 1, sizeof(*p->vdevs));
  p->unused = calloc(N ? N : 1, sizeof(int));
  p->unused_why = calloc(N ? N : 1, sizeof(char *));
  p->nic_rail = calloc(N ? N : 1, sizeof(int));
  p->nic_plane = calloc(N ? N : 1, sizeof(int));
  p->paths = calloc(G * N + 1, 1);
  int *vusers = calloc(G + N + 1, sizeof(int)), *chosen = vusers + G;
  if (!p->gpus || !p->vdevs || !p->unused || !p->unused_why || !p->nic_rail || !p->nic_plane ||
      !p->paths || !vusers) {
    free(vusers);
    goto out_oom;
  }
  p->npath_nics = (int)N;
  for (size_t g = 0; g < G; g++)
    for (size_t n = 0; n < N; n++) {
      struct rn_route rt;
      rn_route_of(s, (int)g, (int)n, &rt);
      p->paths[g * N + n] = (unsigned char)rt.path;
    }

  if (gpuless) {
    for (int n = 0; n < t->nnics; n++)
      if (s->status[n] == RN_ST_CAND) rn_vdev_init(t, &p->vdevs[p->nvdevs++], &n, 1);
    for (int d = 0; d < p->nvdevs; d++) p->vdevs[d].gdr = p->vdevs[d].gdr_any = p->vdevs[d].nic_gdr;
  } else {
    for (int g = 0; g < t->ngpus; g++) {
      if (!s->sel[g]) continue;
      struct rn_plan_gpu *pg = &p->gpus[p->ngpus++];
      pg->gpu = g;
      pg->vdev = -1;
      rn_sort_rails(s, g);
      pg->nrails = s->nrails[g];
      for (int i = 0; i < pg->nrails; i++) {
        struct rn_plan_rail *r = &pg->rails[i];
        struct rn_route rt;
        r->nic = s->rails[g * RN_PLAN_MAX_RAILS + i];
        rn_route_of(s, g, r->nic, &rt);
        r->path = rt.path;
        r->pci_path = rt.pci;
        r->gdr = rt.gdr;
        snprintf(r->gdr_why, sizeof(r->gdr_why), "%s", rt.gdr_why);
        rn_reason(s, g, r, &rt);
      }
      if (pg->nrails == 0) {
        /* Without any candidate NIC one plan-level note says it for all. */
        char gname[24];
        rn_topo_gpu_label(t, g, gname, sizeof(gname));
        if (ncand && rn_plan_note(p, "GPU %s has no NIC: no candidate NIC on its host", gname))
          goto out_oom_users;
        continue;
      }
      const int *set = &s->rails[g * RN_PLAN_MAX_RAILS];
      int d;
      for (d = 0; d < p->nvdevs; d++)
        if (rn_same_set(p->vdevs[d].nics, p->vdevs[d].nnics, set, pg->nrails)) break;
      if (d == p->nvdevs) {
        rn_vdev_init(t, &p->vdevs[d], set, pg->nrails);
        snprintf(p->vdevs[d].why, sizeof(p->vdevs[d].why), "%s", pg->rails[0].reason);
        p->nvdevs++;
      }
      pg->vdev = d;
      p->vdevs[d].nusers++;
      for (int i = 0; i < pg->nrails; i++) p->vdevs[d].gdr &= pg->rails[i].gdr;
      /* NCCL sees the device at its lead NIC's pciPath: that pair decides. */
      for (int i = 0; i < pg->nrails; i++)
        if (pg->rails[i].nic == p->vdevs[d].nics[0]) p->vdevs[d].gdr_any |= pg->rails[i].gdr;
    }
  }
  for (int d = 0; d < p->nvdevs; d++) {
    int nv = 0;
    for (int i = 0; i < p->ngpus; i++)
      if (p->gpus[i].vdev == d) vusers[nv++] = p->gpus[i].gpu;
    if (p->vdevs[d].nusers == 0)
      snprintf(p->vdevs[d].why, sizeof(p->vdevs[d].why),
               "no GPU on this host: %.200s is its own device", p->vdevs[d].name);
    rn_standby(s, &p->vdevs[d], vusers, nv, chosen);
  }
  free(vusers);
  for (int n = 0; n < t->nnics; n++) {
    if (s->users[n] || s->status[n] == RN_ST_HOST) continue;
    if (gpuless && s->status[n] == RN_ST_CAND) continue; /* its own device */
    char why[200];
    rn_unused_why(s, n, why, sizeof(why));
    p->unused_why[p->nunused] = strdup(why);
    if (!p->unused_why[p->nunused]) goto out_oom;
    p->unused[p->nunused++] = n;
  }
  if (t->nnics && ncand == 0 &&
      rn_plan_note(p, "no candidate NICs: the filter or candidate list excludes every NIC"))
    goto out_oom;
  rn_rail_ids(s, full ? full : p);
  return 0;
out_oom_users:
  free(vusers);
out_oom:
  rn_topo_errf(err, errlen, "plan: out of memory");
  return -1;
}

static void rn_pl_free(struct rn_pl *s) {
  rn_plan_free(s->p);
  rn_topo_filter_free(s->filter);
  free(s->sel);
  free(s->status);
  free(s->free_);
  free(s->users);
  free(s->slowskip);
  free(s->ghead);
  free(s->nhead);
  free(s->gnext);
  free(s->nnext);
  free(s->nrails);
  free(s->rails);
  free(s->how);
  free(s->share_node);
  free(s->gbuf);
  free(s->nbuf);
  free(s->cnt);
  free(s->extra);
  free(s->pairs);
  free(s->gpu_bw);
}

/* Marks each NIC's candidate status and notes the exclusions. */
static int rn_candidates(struct rn_pl *s, char *err, size_t errlen) {
  const struct rn_topo *t = s->t;
  const struct rn_plan_opts *o = s->o;
  int N = t->nnics;
  char list[400];
  for (int n = 0; n < N; n++) s->status[n] = o->candidates ? RN_ST_TRANSPORT : RN_ST_CAND;
  for (int i = 0; o->candidates && i < o->ncandidates; i++) {
    if (o->candidates[i] < 0 || o->candidates[i] >= N) {
      rn_topo_errf(err, errlen, "plan: candidate NIC index %d out of range (the model has %d NICs)",
                   o->candidates[i], N);
      return -1;
    }
    s->status[o->candidates[i]] = RN_ST_CAND;
  }
  int nfilt = 0;
  for (int n = 0; n < N; n++) {
    const struct rn_topo_nic *np = &t->nics[n].pub;
    if (o->host >= 0 && np->host != o->host) {
      s->status[n] = RN_ST_HOST;
      continue;
    }
    if (s->status[n] == RN_ST_CAND &&
        !rn_topo_filter_test(s->filter, np->device, np->netdev, np->port))
      s->status[n] = RN_ST_FILTERED, nfilt++;
  }
  if (nfilt) {
    rn_name_list(t, s->status, RN_ST_FILTERED, list, sizeof(list));
    if (rn_plan_note(s->p, "excluded by the NIC filter: %s", list)) return -2;
  }
  /* With GPUs to feed and RDMA NICs on the host, a netdev-only NIC
   * (management Ethernet) never becomes a rail; nor does one much slower
   * than the host's fastest. */
  int nslow = 0, nnot = 0;
  for (int n = 0; n < N; n++) {
    const struct rn_topo_nic *np = &t->nics[n].pub;
    if (s->status[n] != RN_ST_CAND) continue;
    int gpus = 0, rdma = 0, fastest = 0;
    for (int g = 0; g < t->ngpus; g++) gpus += t->gpus[g].pub.host == np->host;
    for (int m = 0; m < N; m++) {
      const struct rn_topo_nic *mp = &t->nics[m].pub;
      if (s->status[m] != RN_ST_CAND || mp->host != np->host || !mp->rdma) continue;
      rdma = 1;
      if (mp->speed_mbps > fastest) fastest = mp->speed_mbps;
    }
    if (!gpus) continue;
    if (rdma && !np->rdma)
      s->status[n] = RN_ST_NOTRDMA, nnot++;
    else if (np->speed_mbps > 0 && (long)np->speed_mbps * RN_SLOW_FACTOR < fastest)
      s->status[n] = RN_ST_SLOW, nslow++;
  }
  if (nnot) {
    rn_name_list(t, s->status, RN_ST_NOTRDMA, list, sizeof(list));
    if (rn_plan_note(s->p, "not RDMA devices, not used as rails: %s", list)) return -2;
  }
  if (nslow) {
    rn_name_list(t, s->status, RN_ST_SLOW, list, sizeof(list));
    if (rn_plan_note(s->p, "much slower than the host's fastest NIC, not used as rails: %s", list))
      return -2;
  }
  return 0;
}

static int rn_plan_core(const struct rn_topo *t, const struct rn_plan_opts *o, int all_gpus,
                        const struct rn_plan *full, struct rn_plan **out, char *err,
                        size_t errlen) {
  struct rn_pl s;
  int rc = -1;
  memset(&s, 0, sizeof(s));
  *out = NULL;
  if (rn_topo_filter_parse(o->nic_filter, &s.filter, err, errlen)) return -1;
  s.t = t;
  s.o = o;
  int G = t->ngpus, N = t->nnics, V = t->nnodes;
  long maxpairs = (long)(G ? G : 1) * (N ? N : 1);
  s.p = calloc(1, sizeof(*s.p));
  s.sel = calloc((size_t)G + 1, sizeof(int));
  s.status = calloc((size_t)N + 1, sizeof(int));
  s.free_ = calloc((size_t)N + 1, sizeof(int));
  s.users = calloc((size_t)N + 1, sizeof(int));
  s.slowskip = calloc((size_t)N + 1, sizeof(int));
  s.ghead = malloc(((size_t)V + 1) * sizeof(int));
  s.nhead = malloc(((size_t)V + 1) * sizeof(int));
  s.gnext = calloc((size_t)G + 1, sizeof(int));
  s.nnext = calloc((size_t)N + 1, sizeof(int));
  s.nrails = calloc((size_t)G + 1, sizeof(int));
  s.rails = calloc(((size_t)G + 1) * RN_PLAN_MAX_RAILS, sizeof(int));
  s.how = calloc((size_t)G + 1, sizeof(int));
  s.share_node = calloc((size_t)G + 1, sizeof(int));
  s.gbuf = calloc((size_t)G + 1, sizeof(int));
  s.nbuf = calloc((size_t)N + 1, sizeof(int));
  s.cnt = calloc((size_t)G + 1, sizeof(int));
  s.extra = calloc((size_t)G + 2 * (size_t)N + 1, sizeof(int));
  s.pairs = calloc((size_t)maxpairs, sizeof(*s.pairs));
  s.gpu_bw = calloc((size_t)G + 1, sizeof(double));
  s.full = full;
  if (!s.gpu_bw || !s.p || !s.sel || !s.status || !s.free_ || !s.users || !s.slowskip || !s.ghead ||
      !s.nhead || !s.gnext || !s.nnext || !s.nrails || !s.rails || !s.how || !s.share_node ||
      !s.gbuf || !s.nbuf || !s.cnt || !s.extra || !s.pairs) {
    rn_topo_errf(err, errlen, "plan: out of memory");
    goto out_free;
  }
  if (!all_gpus && o->gpu_subset && rn_parse_subset(t, o->gpu_subset, s.sel, err, errlen))
    goto out_free;
  if (all_gpus || !o->gpu_subset)
    for (int g = 0; g < G; g++) s.sel[g] = 1;
  for (int g = 0; g < G; g++)
    if (o->host >= 0 && t->gpus[g].pub.host != o->host) s.sel[g] = 0;
  /* What a GPU can move: its own PCIe link (a switch's uplink is no limit
   * for NICs under that switch), or NVLink-C2C when wider. */
  for (int g = 0; g < G; g++) {
    const struct rn_gpu_rec *gr = &t->gpus[g];
    double bw = t->nodes[gr->node].up_bw;
    if (gr->pub.c2c && gr->c2c_bw > bw) bw = gr->c2c_bw;
    s.gpu_bw[g] = bw;
  }
  int crc = rn_candidates(&s, err, errlen);
  if (crc == -1) goto out_free;
  if (crc == -2) goto out_oom;

  for (int v = 0; v < V; v++) s.ghead[v] = s.nhead[v] = -1;
  for (int g = 0; g < G; g++) {
    if (!s.sel[g]) continue;
    int v = t->gpus[g].node;
    s.gnext[g] = s.ghead[v];
    s.ghead[v] = g;
  }
  for (int n = 0; n < N; n++) {
    s.free_[n] = s.status[n] == RN_ST_CAND;
    if (!s.free_[n]) continue;
    int v = t->nics[n].node;
    s.nnext[n] = s.nhead[v];
    s.nhead[v] = n;
  }
  if (G) rn_walk(&s);
  if (rn_plan_fill(&s, full, err, errlen)) goto out_free;
  *out = s.p;
  s.p = NULL;
  rc = 0;
  goto out_free;
out_oom:
  rn_topo_errf(err, errlen, "plan: out of memory");
out_free:
  rn_pl_free(&s);
  return rc;
}

int rn_plan_build(const struct rn_topo *t, const struct rn_plan_opts *o, struct rn_plan **out,
                  char *err, size_t errlen) {
  struct rn_plan_opts dflt;
  *out = NULL;
  if (!t) {
    rn_topo_errf(err, errlen, "plan: no model");
    return -1;
  }
  if (!o) {
    rn_plan_opts_default(&dflt);
    o = &dflt;
  }
  if ((int)o->gdr_level < RN_PATH_LOC || o->gdr_level > RN_PATH_SYS) {
    rn_topo_errf(err, errlen, "plan: bad GDR level %d", (int)o->gdr_level);
    return -1;
  }
  /* Rail ids describe the machine, not one process's GPUs: with a subset
   * they come from the plan of every GPU. */
  if (o->gpu_subset && strcmp(o->gpu_subset, "*") != 0) {
    struct rn_plan *full = NULL;
    if (rn_plan_core(t, o, 1, NULL, &full, err, errlen)) return -1;
    int rc = rn_plan_core(t, o, 0, full, out, err, errlen);
    rn_plan_free(full);
    return rc;
  }
  return rn_plan_core(t, o, 1, NULL, out, err, errlen);
}

void rn_plan_log(const struct rn_topo *t, const struct rn_plan *p,
                 void (*emit)(void *ctx, const char *line), void *ctx) {
  char line[640];
  for (int i = 0; i < p->nnotes; i++) {
    snprintf(line, sizeof(line), "plan: %s", p->notes[i]);
    emit(ctx, line);
  }
  for (int g = 0; g < p->ngpus; g++)
    for (int r = 0; r < p->gpus[g].nrails; r++) {
      snprintf(line, sizeof(line), "plan: %s", p->gpus[g].rails[r].reason);
      emit(ctx, line);
    }
  for (int d = 0; d < p->nvdevs; d++) {
    const struct rn_plan_vdev *v = &p->vdevs[d];
    snprintf(line, sizeof(line),
             "plan: device %d %s: %d NIC(s), %d Mb/s, rail %d plane %d, standby %s", d, v->name,
             v->nnics, v->speed_mbps, v->rail_id, v->plane_id, v->standby_why);
    emit(ctx, line);
  }
  for (int i = 0; i < p->nunused; i++) {
    snprintf(line, sizeof(line), "plan: %s unused: %s", rn_topo_nic(t, p->unused[i])->name,
             p->unused_why[i]);
    emit(ctx, line);
  }
}
