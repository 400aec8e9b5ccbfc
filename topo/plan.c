/* The rail planner: a pure function from (model, options) to plan.
 *
 * It walks the model tree bottom-up.  At each node, the GPUs and NICs not
 * yet placed below it meet: k GPUs and m NICs split evenly (m/k NICs each
 * when m >= k, each NIC shared by k/m GPUs when m < k), closest pairs first.
 * What is left moves up.  At a CPU node (and at the root, for SYS), a GPU
 * that found no free NIC shares the least-loaded rail set already placed
 * below that node.  Free NICs that reach the root are unused: they are
 * farther than every GPU's own rails (storage, management).
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
}

enum rn_how {
  RN_HOW_SPLIT, /* split of the NICs meeting at a node */
  RN_HOW_SHARE, /* shares the least-loaded rail set under its CPU */
};

struct rn_pl {
  const struct rn_topo *t;
  const struct rn_plan_opts *o;
  struct rn_plan *p;
  int *sel;           /* per model GPU: 1 when in the subset */
  int *cand;          /* per model NIC: 1 when a rail candidate */
  int *free_;         /* per model NIC: candidate not yet placed */
  int *users;         /* per model NIC: GPUs using it */
  int *ghead, *gnext; /* per node / per GPU: GPUs waiting at a node */
  int *nhead, *nnext; /* per node / per NIC: free NICs waiting at a node */
  int *nrails;        /* per model GPU */
  int *rails;         /* per model GPU: RN_PLAN_MAX_RAILS NIC indices */
  int *how;           /* per model GPU: enum rn_how */
  int *share_node;    /* per model GPU: node where it shared */
  int *gbuf, *nbuf, *cnt, *extra;
  struct rn_pair *pairs;
};

struct rn_pair {
  int path, numa_miss, hops, g, n;
};

static int rn_pair_cmp(const void *a, const void *b) {
  const struct rn_pair *x = a, *y = b;
  if (x->path != y->path) return x->path - y->path;
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
  free(p->unused);
  free(p->vdevs);
  free(p->gpus);
  free(p);
}

static enum rn_path rn_gn_path(const struct rn_topo *t, int g, int n, int *hops) {
  return rn_topo_node_path(t, t->gpus[g].node, t->nics[n].node, hops, NULL);
}

/* "0,2,5", "0-3", or bus ids ("0000:1b:00.0", "1b:00.0"). */
static int rn_parse_subset(const struct rn_topo *t, const char *spec, int *sel, char *err,
                           size_t errlen) {
  const char *p = spec;
  int any = 0;
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
    any = 1;
    p += len;
    if (*p == ',') p++;
  }
  if (!any)
    for (int g = 0; g < t->ngpus; g++) sel[g] = 1;
  return 0;
}

static void rn_assign(struct rn_pl *s, int g, int n) {
  s->rails[g * RN_PLAN_MAX_RAILS + s->nrails[g]++] = n;
  s->users[n]++;
  s->free_[n] = 0;
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
      pr->path = rn_gn_path(t, gs[i], ns[j], &pr->hops);
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
      if (s->cnt[pr->g] < q && s->free_[pr->n]) rn_assign(s, pr->g, pr->n), s->cnt[pr->g]++;
    }
    for (int i = 0; i < np && extras > 0; i++) {
      const struct rn_pair *pr = &s->pairs[i];
      if (s->cnt[pr->g] == q && !s->extra[pr->g] && s->free_[pr->n]) {
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
  for (int i = 0; i < k; i++) s->how[gs[i]] = RN_HOW_SPLIT;
}

/* GPU g found no free NIC under its CPU (or anywhere, at the root): it
 * shares the least-loaded rail set placed under node v.  1 if it did. */
static int rn_share(struct rn_pl *s, int g, int v) {
  const struct rn_topo *t = s->t;
  int best = -1, bload = 0, bpath = 0, bhops = 0;
  long bspeed = 0;
  for (int h = 0; h < t->ngpus; h++) {
    if (h == g || s->nrails[h] == 0 || s->how[h] != RN_HOW_SPLIT) continue;
    const int *r = &s->rails[h * RN_PLAN_MAX_RAILS];
    if (!rn_topo_node_under(t, t->nics[r[0]].node, v)) continue;
    int load = 0, hops;
    long speed = 0;
    for (int i = 0; i < s->nrails[h]; i++) {
      if (s->users[r[i]] > load) load = s->users[r[i]];
      speed += t->nics[r[i]].pub.speed_mbps;
    }
    int path = rn_gn_path(t, g, r[0], &hops);
    int better =
        best < 0 || load < bload ||
        (load == bload && (speed > bspeed ||
                           (speed == bspeed && (path < bpath || (path == bpath && hops < bhops)))));
    if (better) best = h, bload = load, bspeed = speed, bpath = path, bhops = hops;
  }
  if (best < 0) return 0;
  for (int i = 0; i < s->nrails[best]; i++) rn_assign(s, g, s->rails[best * RN_PLAN_MAX_RAILS + i]);
  s->how[g] = RN_HOW_SHARE;
  s->share_node[g] = v;
  return 1;
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
    if (k && m) rn_split(s, s->gbuf, k, s->nbuf, m);
    if (k && !m && (t->nodes[v].kind == RN_NODE_CPU || t->nodes[v].kind == RN_NODE_ROOT))
      for (int i = 0; i < k; i++) rn_share(s, s->gbuf[i], v);
    int up = t->nodes[v].parent;
    if (up < 0) break;
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

/* Rails best first: nearest path, then fewest hops, then bus order. */
static void rn_sort_rails(struct rn_pl *s, int g) {
  int *r = &s->rails[g * RN_PLAN_MAX_RAILS];
  for (int i = 1; i < s->nrails[g]; i++) {
    for (int j = i; j > 0; j--) {
      int ha, hb;
      int pa = rn_gn_path(s->t, g, r[j - 1], &ha), pb = rn_gn_path(s->t, g, r[j], &hb);
      int swap = pb < pa || (pb == pa && (hb < ha || (hb == ha && r[j] < r[j - 1])));
      if (!swap) break;
      int tmp = r[j];
      r[j] = r[j - 1];
      r[j - 1] = tmp;
    }
  }
}

static void rn_reason(struct rn_pl *s, int g, struct rn_plan_rail *rail) {
  const struct rn_topo *t = s->t;
  const struct rn_topo_gpu *gp = &t->gpus[g].pub;
  const struct rn_topo_nic *np = &t->nics[rail->nic].pub;
  char via[96], why[96] = "", gdr[64], gname[24];
  enum rn_path lvl = s->o->gdr_level;
  rn_topo_path(t, g, rail->nic, via, sizeof(via));
  if (s->how[g] == RN_HOW_SHARE) {
    if (t->nodes[s->share_node[g]].kind == RN_NODE_ROOT)
      snprintf(why, sizeof(why), ", no NIC on the GPU's CPU: least-loaded elsewhere");
    else
      snprintf(why, sizeof(why), ", no free NIC nearer: least-loaded on CPU %d",
               t->nodes[s->share_node[g]].cpu);
  } else if (s->users[rail->nic] > 1) {
    snprintf(why, sizeof(why), ", shared by %d GPUs", s->users[rail->nic]);
  }
  if (!gp->gdr)
    snprintf(gdr, sizeof(gdr), "GDR no (GPU does not allow it)");
  else if (!np->gdr)
    snprintf(gdr, sizeof(gdr), "GDR no (NIC does not allow it)");
  else
    snprintf(gdr, sizeof(gdr), "GDR %s (%s %s %s)", rail->gdr ? "yes" : "no",
             rn_path_name(rail->path), rail->gdr ? "<=" : ">", rn_path_name(lvl));
  /* Sources without bus ids (nvidia-smi) name GPUs by model index. */
  if (gp->busid[0])
    snprintf(gname, sizeof(gname), "%s", gp->busid);
  else
    snprintf(gname, sizeof(gname), "GPU%d", g);
  int w = snprintf(rail->reason, sizeof(rail->reason), "GPU %s -> %s: %s via %s%s, %s", gname,
                   np->name, rn_path_name(rail->path), via, why, gdr);
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
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    const struct rn_topo_nic *np = &t->nics[nics[i]].pub;
    d->nics[d->nnics++] = nics[i];
    d->speed_mbps += np->speed_mbps;
    int w = snprintf(d->name + off, sizeof(d->name) - off, "%s%s", i ? "+" : "", np->name);
    if (w < 0 || (size_t)w >= sizeof(d->name) - off)
      off = sizeof(d->name) - 1;
    else
      off += (size_t)w;
  }
}

/* Lists model NIC names for a note, shortened past a few. */
static void rn_name_list(const struct rn_topo *t, const int *flag, int want, char *buf,
                         size_t len) {
  size_t off = 0;
  int shown = 0, more = 0;
  buf[0] = '\0';
  for (int n = 0; n < t->nnics; n++) {
    if (flag[n] != want) continue;
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

static int rn_plan_fill(struct rn_pl *s, char *err, size_t errlen) {
  const struct rn_topo *t = s->t;
  struct rn_plan *p = s->p;
  int nsel = 0, ncand = 0;
  for (int g = 0; g < t->ngpus; g++) nsel += s->sel[g];
  for (int n = 0; n < t->nnics; n++) ncand += s->cand[n];

  for (int i = 0; i < t->nnotes; i++)
    if (rn_plan_note(p, "model: %s", t->notes[i])) goto out_oom;
  if (t->ngpus == 0 && rn_plan_note(p, "no GPUs in the model: every NIC is its own virtual device"))
    goto out_oom;
  if (t->nnics == 0 && rn_plan_note(p, "no NICs in the model")) goto out_oom;

  p->gpus = calloc((size_t)(nsel ? nsel : 1), sizeof(*p->gpus));
  p->vdevs = calloc((size_t)(t->nnics ? t->nnics : 1), sizeof(*p->vdevs));
  p->unused = calloc((size_t)(t->nnics ? t->nnics : 1), sizeof(int));
  if (!p->gpus || !p->vdevs || !p->unused) goto out_oom;

  if (t->ngpus == 0) {
    for (int n = 0; n < t->nnics; n++)
      if (s->cand[n]) rn_vdev_init(t, &p->vdevs[p->nvdevs++], &n, 1);
    for (int d = 0; d < p->nvdevs; d++) p->vdevs[d].gdr = t->nics[p->vdevs[d].nics[0]].pub.gdr;
    return 0;
  }
  for (int g = 0; g < t->ngpus; g++) {
    if (!s->sel[g]) continue;
    struct rn_plan_gpu *pg = &p->gpus[p->ngpus++];
    pg->gpu = g;
    rn_sort_rails(s, g);
    pg->nrails = s->nrails[g];
    for (int i = 0; i < pg->nrails; i++) {
      struct rn_plan_rail *r = &pg->rails[i];
      r->nic = s->rails[g * RN_PLAN_MAX_RAILS + i];
      r->path = rn_gn_path(t, g, r->nic, NULL);
      r->gdr = t->gpus[g].pub.gdr && t->nics[r->nic].pub.gdr && r->path <= s->o->gdr_level;
      rn_reason(s, g, r);
    }
    if (pg->nrails == 0) {
      /* Without any candidate NIC one plan-level note says it for all. */
      if (ncand &&
          rn_plan_note(p, "GPU %s has no NIC: no candidate NIC reachable", t->gpus[g].pub.busid))
        goto out_oom;
      continue;
    }
    const int *set = &s->rails[g * RN_PLAN_MAX_RAILS];
    int d;
    for (d = 0; d < p->nvdevs; d++)
      if (rn_same_set(p->vdevs[d].nics, p->vdevs[d].nnics, set, pg->nrails)) break;
    if (d == p->nvdevs) {
      rn_vdev_init(t, &p->vdevs[d], set, pg->nrails);
      p->nvdevs++;
    }
    for (int i = 0; i < pg->nrails; i++) p->vdevs[d].gdr &= pg->rails[i].gdr;
  }
  for (int n = 0; n < t->nnics; n++)
    if (s->cand[n] && s->users[n] == 0) p->unused[p->nunused++] = n;
  if (t->nnics && ncand == 0 &&
      rn_plan_note(p, "no candidate NICs: the filter or candidate list excludes every NIC"))
    goto out_oom;
  return 0;
out_oom:
  rn_topo_errf(err, errlen, "plan: out of memory");
  return -1;
}

int rn_plan_build(const struct rn_topo *t, const struct rn_plan_opts *o, struct rn_plan **out,
                  char *err, size_t errlen) {
  struct rn_plan_opts dflt;
  struct rn_topo_filter *filter = NULL;
  struct rn_pl s;
  int rc = -1;
  char list[400];
  memset(&s, 0, sizeof(s));
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
  if (rn_topo_filter_parse(o->nic_filter, &filter, err, errlen)) return -1;
  s.t = t;
  s.o = o;
  int G = t->ngpus, N = t->nnics, V = t->nnodes;
  long maxpairs = (long)(G ? G : 1) * (N ? N : 1);
  s.p = calloc(1, sizeof(*s.p));
  s.sel = calloc((size_t)G + 1, sizeof(int));
  s.cand = calloc((size_t)N + 1, sizeof(int));
  s.free_ = calloc((size_t)N + 1, sizeof(int));
  s.users = calloc((size_t)N + 1, sizeof(int));
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
  if (!s.p || !s.sel || !s.cand || !s.free_ || !s.users || !s.ghead || !s.nhead || !s.gnext ||
      !s.nnext || !s.nrails || !s.rails || !s.how || !s.share_node || !s.gbuf || !s.nbuf ||
      !s.cnt || !s.extra || !s.pairs) {
    rn_topo_errf(err, errlen, "plan: out of memory");
    goto out_free;
  }
  if (o->gpu_subset && rn_parse_subset(t, o->gpu_subset, s.sel, err, errlen)) goto out_free;
  if (!o->gpu_subset)
    for (int g = 0; g < G; g++) s.sel[g] = 1;

  /* Candidates: the transport's list, then the filter. */
  int *allowed = s.free_; /* scratch until the walk starts */
  for (int n = 0; n < N; n++) allowed[n] = o->candidates ? 0 : 1;
  for (int i = 0; o->candidates && i < o->ncandidates; i++) {
    if (o->candidates[i] < 0 || o->candidates[i] >= N) {
      rn_topo_errf(err, errlen, "plan: candidate NIC index %d out of range (the model has %d NICs)",
                   o->candidates[i], N);
      goto out_free;
    }
    allowed[o->candidates[i]] = 1;
  }
  int nfilt = 0, any_rdma = 0;
  for (int n = 0; n < N; n++) {
    const struct rn_topo_nic *np = &t->nics[n].pub;
    int pass = allowed[n] && rn_topo_filter_test(filter, np->name, np->netdev, np->port);
    if (allowed[n] && !pass)
      s.cand[n] = -1, nfilt++;
    else
      s.cand[n] = pass;
    any_rdma |= pass && np->rdma;
  }
  if (nfilt) {
    rn_name_list(t, s.cand, -1, list, sizeof(list));
    if (rn_plan_note(s.p, "excluded by the NIC filter: %s", list)) goto out_oom;
  }
  /* With GPUs to feed and RDMA NICs present, a netdev-only NIC (management
   * Ethernet) never becomes a rail. */
  int nslow = 0;
  for (int n = 0; n < N && G && any_rdma; n++)
    if (s.cand[n] == 1 && !t->nics[n].pub.rdma) s.cand[n] = -2, nslow++;
  if (nslow) {
    rn_name_list(t, s.cand, -2, list, sizeof(list));
    if (rn_plan_note(s.p, "not RDMA devices, not used as rails: %s", list)) goto out_oom;
  }
  for (int n = 0; n < N; n++) s.cand[n] = s.cand[n] == 1;

  for (int v = 0; v < V; v++) s.ghead[v] = s.nhead[v] = -1;
  for (int g = 0; g < G; g++) {
    if (!s.sel[g]) continue;
    int v = t->gpus[g].node;
    s.gnext[g] = s.ghead[v];
    s.ghead[v] = g;
  }
  for (int n = 0; n < N; n++) {
    s.free_[n] = s.cand[n];
    if (!s.cand[n]) continue;
    int v = t->nics[n].node;
    s.nnext[n] = s.nhead[v];
    s.nhead[v] = n;
  }
  if (G) rn_walk(&s);
  if (rn_plan_fill(&s, err, errlen)) goto out_free;
  *out = s.p;
  s.p = NULL;
  rc = 0;
  goto out_free;
out_oom:
  rn_topo_errf(err, errlen, "plan: out of memory");
out_free:
  rn_plan_free(s.p);
  rn_topo_filter_free(filter);
  free(s.sel);
  free(s.cand);
  free(s.free_);
  free(s.users);
  free(s.ghead);
  free(s.nhead);
  free(s.gnext);
  free(s.nnext);
  free(s.nrails);
  free(s.rails);
  free(s.how);
  free(s.share_node);
  free(s.gbuf);
  free(s.nbuf);
  free(s.cnt);
  free(s.extra);
  free(s.pairs);
  return rc;
}
