/* Plan expectations, one assertion per line, written by hand from the
 * PCI tree and NCCL's rules (never copied from planner output); a comment
 * above each says why:
 *
 *   topo FILE            fixture, relative to the .expect file; "@shared/NAME"
 *                        is a vendor file; several merge
 *   opts K=V ...         gpus=LIST nics=FILTER gdr=LEVEL candidates=NAME,NAME
 *                        standby=0 gdrc2c=0 pxn=0 host=N cvd=CUDA_VISIBLE_DEVICES
 *   gpus N / nics N / hosts N   GPUs in the plan / NICs / hosts in the model
 *   gpu GPU NIC:PATH:gdr|nogdr ...   the GPU's rail set, best first ("none")
 *   path GPU NIC PATH    NCCL's path type for the pair (the matrix cell)
 *   gdrwhy GPU NIC TEXT  the pair's GDR decision says TEXT
 *   reason GPU NIC TEXT  the rail's reason (the plan line) contains TEXT
 *   numa GPU N           the NUMA node (NCCL's CPU) of the GPU
 *   unused NAME ...      exactly these NICs are unused ("-": none)
 *   why NAME TEXT        the unused NIC's reason contains TEXT
 *   vdevs N              number of virtual devices
 *   vdev NAME [speed=MBPS] [gdr|nogdr] [gdrany|nogdrany] [rail=R] [plane=P]
 *        [standby=NIC|none]   (gdr: every pair; gdrany: the lead NIC's pairs)
 *   standbywhy NAME TEXT the device's standby reason contains TEXT
 *   rail NIC R P         the NIC's rail and plane ids
 *   note TEXT            some plan note contains TEXT
 *
 * GPU is a bus id, "GPUn" (model index, for sources without bus ids), and
 * may carry "hN/" to pick a host of a multi-host file; a GPU that matches
 * more than one GPU is an error, never a silent pick.  NIC and device
 * names may carry "hN/" too.
 *
 * Beside each X.expect, X.golden holds the full rendered plan (reasons
 * included): a change detector only; RN_REGEN=1 rewrites the goldens.
 * Vendor files absent: a skip naming the file, or a failure when
 * RAILNET_TOPOLOGIES_REQUIRED=1 (CI). */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "expect_runner.h"
#include "railnet/topo.h"

static int rn_n, rn_failed, rn_skipped, rn_loaded;

static void rn_ok(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rn_ok(int ok, const char *fmt, ...) {
  va_list ap;
  rn_n++;
  if (!ok) rn_failed++;
  printf("%sok %d - ", ok ? "" : "not ", rn_n);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
}

int rn_expect_required(void) {
  const char *r = getenv("RAILNET_TOPOLOGIES_REQUIRED");
  return r && strcmp(r, "1") == 0;
}

const char *rn_expect_shared_dir(void) {
  static char buf[1024];
  struct stat st;
  const char *d = getenv("RAILNET_TOPOLOGIES_DIR");
  snprintf(buf, sizeof(buf), "%s", (d && *d) ? d : "../shared/topologies");
  return (stat(buf, &st) == 0 && S_ISDIR(st.st_mode)) ? buf : NULL;
}

const char *rn_expect_shared_name(void) {
  const char *d = getenv("RAILNET_TOPOLOGIES_DIR");
  return (d && *d) ? d : "../shared/topologies";
}

/* "hN/name" -> host N and name; no prefix -> host -1. */
static const char *rn_host_prefix(const char *s, int *host) {
  *host = -1;
  if (s[0] == 'h' && s[1] >= '0' && s[1] <= '9') {
    char *end;
    long h = strtol(s + 1, &end, 10);
    if (*end == '/') {
      *host = (int)h;
      return end + 1;
    }
  }
  return s;
}

/* NICs by name (display, device or netdev); -2 when ambiguous across hosts. */
static int rn_find_nic_name(const struct rn_topo *t, const char *spec) {
  int host, found = -1;
  const char *name = rn_host_prefix(spec, &host);
  for (int i = 0; i < rn_topo_nnics(t); i++) {
    const struct rn_topo_nic *n = rn_topo_nic(t, i);
    if (host >= 0 && n->host != host) continue;
    if (strcmp(n->name, name) != 0) continue;
    if (found >= 0) return -2;
    found = i;
  }
  return found;
}

/* The plan's entry for GPU spec: exactly one match, else NULL with why. */
static const struct rn_plan_gpu *rn_find_gpu(const struct rn_topo *t, const struct rn_plan *p,
                                             const char *spec, char *why, size_t wl) {
  int host, matches = 0;
  const char *id = rn_host_prefix(spec, &host);
  const struct rn_plan_gpu *pg = NULL;
  for (int i = 0; i < p->ngpus; i++) {
    const struct rn_topo_gpu *g = rn_topo_gpu(t, p->gpus[i].gpu);
    if (host >= 0 && g->host != host) continue;
    if (strcmp(g->busid, id) == 0 || (strncmp(id, "GPU", 3) == 0 && atoi(id + 3) == p->gpus[i].gpu))
      pg = &p->gpus[i], matches++;
  }
  if (matches == 1) return pg;
  snprintf(why, wl,
           matches ? "GPU %s matches %d GPUs: qualify it with hN/" : "GPU %s not in the plan", spec,
           matches);
  return NULL;
}

static void rn_render(const struct rn_topo *t, const struct rn_plan *p, FILE *f) {
  fprintf(f, "source %s gpus %d nics %d cpus %d hosts %d\n", rn_topo_source(t), rn_topo_ngpus(t),
          rn_topo_nnics(t), rn_topo_ncpus(t), rn_topo_nhosts(t));
  for (int i = 0; i < p->ngpus; i++) {
    const struct rn_topo_gpu *g = rn_topo_gpu(t, p->gpus[i].gpu);
    fprintf(f, "GPU h%d/%s numa %d c2c %d:", g->host, g->busid, g->numa, g->c2c);
    for (int n = 0; n < rn_topo_nnics(t); n++)
      if (rn_topo_nic(t, n)->host == g->host)
        fprintf(f, " %s", rn_path_name(rn_plan_path(p, p->gpus[i].gpu, n)));
    fprintf(f, " ->");
    for (int r = 0; r < p->gpus[i].nrails; r++)
      fprintf(f, " %s", rn_topo_nic(t, p->gpus[i].rails[r].nic)->name);
    fprintf(f, "\n");
    for (int r = 0; r < p->gpus[i].nrails; r++) fprintf(f, "  %s\n", p->gpus[i].rails[r].reason);
  }
  for (int i = 0; i < p->nvdevs; i++) {
    const struct rn_plan_vdev *d = &p->vdevs[i];
    fprintf(f, "vdev h%d/%s nics %d speed %d gdr %d nic_gdr %d rail %d plane %d\n  standby %s\n",
            d->host, d->name, d->nnics, d->speed_mbps, d->gdr, d->nic_gdr, d->rail_id, d->plane_id,
            d->standby_why);
  }
  for (int i = 0; i < p->nunused; i++)
    fprintf(f, "unused %s: %s\n", rn_topo_nic(t, p->unused[i])->name, p->unused_why[i]);
  for (int i = 0; i < p->nnotes; i++) fprintf(f, "note: %s\n", p->notes[i]);
}

static char *rn_slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
  if (b) b[n] = '\0';
  fclose(f);
  return b;
}

static void rn_check_golden(const char *exp, const struct rn_topo *t, const struct rn_plan *p) {
  char gpath[1200], *got = NULL;
  size_t gotlen = 0;
  snprintf(gpath, sizeof(gpath), "%.*s.golden", (int)(strlen(exp) - strlen(".expect")), exp);
  FILE *m = open_memstream(&got, &gotlen);
  rn_render(t, p, m);
  fclose(m);
  const char *regen = getenv("RN_REGEN");
  if (regen && strcmp(regen, "1") == 0) {
    FILE *f = fopen(gpath, "w");
    if (f) fputs(got, f);
    rn_ok(f && fclose(f) == 0, "%s: golden regenerated", gpath);
  } else {
    char *want = rn_slurp(gpath);
    int same = want && strcmp(want, got) == 0;
    if (!same) {
      printf("# --- %s (want)\n", gpath);
      for (char *l = want ? strtok(want, "\n") : NULL; l; l = strtok(NULL, "\n"))
        printf("#   %s\n", l);
      printf("# --- got\n");
      char *g2 = strdup(got);
      for (char *l = strtok(g2, "\n"); l; l = strtok(NULL, "\n")) printf("#   %s\n", l);
      free(g2);
    }
    rn_ok(same, "%s: plan matches the golden plan (change detector)", gpath);
    free(want);
  }
  free(got);
}

static int rn_check_gpu(const struct rn_topo *t, const struct rn_plan *p, char *args, char *why,
                        size_t wl) {
  char *spec = strtok(args, " \t");
  const struct rn_plan_gpu *pg = spec ? rn_find_gpu(t, p, spec, why, wl) : NULL;
  if (!pg) return 0;
  int r = 0;
  for (char *tok = strtok(NULL, " \t"); tok; tok = strtok(NULL, " \t")) {
    if (strcmp(tok, "none") == 0) break;
    /* NAME:PATH:gdr, split from the right: names may hold ':' (ports). */
    char name[64], *path, *gdr;
    snprintf(name, sizeof(name), "%s", tok);
    gdr = strrchr(name, ':');
    if (gdr) *gdr++ = '\0';
    path = strrchr(name, ':');
    if (path) *path++ = '\0';
    if (!gdr || !path) {
      snprintf(why, wl, "bad expectation \"%s\"", tok);
      return 0;
    }
    if (r >= pg->nrails) {
      snprintf(why, wl, "has %d rail(s), expected more (%s)", pg->nrails, name);
      return 0;
    }
    const struct rn_plan_rail *rl = &pg->rails[r++];
    const char *got = rn_topo_nic(t, rl->nic)->name;
    int want_gdr = strcmp(gdr, "gdr") == 0;
    if (strcmp(got, name) || strcmp(rn_path_name(rl->path), path) || rl->gdr != want_gdr) {
      snprintf(why, wl, "rail %d is %s:%s:%s, expected %s", r - 1, got, rn_path_name(rl->path),
               rl->gdr ? "gdr" : "nogdr", tok);
      return 0;
    }
  }
  if (r != pg->nrails) {
    snprintf(why, wl, "has %d rail(s), expected %d", pg->nrails, r);
    return 0;
  }
  return 1;
}

/* "GPU NIC rest": the plan GPU and model NIC, rest points past them. */
static int rn_pair(const struct rn_topo *t, const struct rn_plan *p, char *args,
                   const struct rn_plan_gpu **pg, int *nic, char **rest, char *why, size_t wl) {
  char *save = NULL;
  char *gs = strtok_r(args, " \t", &save), *ns = strtok_r(NULL, " \t", &save);
  *rest = save ? save + strspn(save, " \t") : NULL;
  if (!gs || !ns) {
    snprintf(why, wl, "expected GPU NIC ...");
    return 0;
  }
  *pg = rn_find_gpu(t, p, gs, why, wl);
  *nic = rn_find_nic_name(t, ns);
  if (*pg && *nic < 0)
    snprintf(why, wl, "NIC %s %s", ns, *nic == -2 ? "ambiguous" : "not in the model");
  return *pg && *nic >= 0;
}

static int rn_check_path(const struct rn_topo *t, const struct rn_plan *p, char *args, char *why,
                         size_t wl) {
  const struct rn_plan_gpu *pg;
  int n;
  char *rest;
  if (!rn_pair(t, p, args, &pg, &n, &rest, why, wl)) return 0;
  const char *got = rn_path_name(rn_plan_path(p, pg->gpu, n));
  snprintf(why, wl, "path is %s", got);
  return rest && strcmp(rest, got) == 0;
}

static int rn_check_gdrwhy(const struct rn_topo *t, const struct rn_plan *p, char *args, char *why,
                           size_t wl) {
  const struct rn_plan_gpu *pg;
  int n;
  char *rest;
  if (!rn_pair(t, p, args, &pg, &n, &rest, why, wl)) return 0;
  for (int r = 0; r < pg->nrails; r++)
    if (pg->rails[r].nic == n) {
      snprintf(why, wl, "GDR %s (%s)", pg->rails[r].gdr ? "yes" : "no", pg->rails[r].gdr_why);
      return rest && strstr(why, rest) != NULL;
    }
  snprintf(why, wl, "the NIC is not one of the GPU's rails");
  return 0;
}

static int rn_check_reason(const struct rn_topo *t, const struct rn_plan *p, char *args, char *why,
                           size_t wl) {
  const struct rn_plan_gpu *pg;
  int n;
  char *rest;
  if (!rn_pair(t, p, args, &pg, &n, &rest, why, wl)) return 0;
  for (int r = 0; r < pg->nrails; r++)
    if (pg->rails[r].nic == n) {
      snprintf(why, wl, "reason: %s", pg->rails[r].reason);
      return rest && strstr(pg->rails[r].reason, rest) != NULL;
    }
  snprintf(why, wl, "the NIC is not one of the GPU's rails");
  return 0;
}

static int rn_check_unused(const struct rn_topo *t, const struct rn_plan *p, char *args, char *why,
                           size_t wl) {
  int want = 0;
  for (char *tok = strtok(args, " \t"); tok; tok = strtok(NULL, " \t")) {
    if (strcmp(tok, "-") == 0) continue;
    want++;
    int n = rn_find_nic_name(t, tok), found = 0;
    for (int i = 0; i < p->nunused; i++) found |= p->unused[i] == n;
    if (!found) {
      snprintf(why, wl, "%s is not unused", tok);
      return 0;
    }
  }
  if (want != p->nunused) {
    snprintf(why, wl, "%d unused NIC(s), expected %d", p->nunused, want);
    return 0;
  }
  return 1;
}

static int rn_check_why(const struct rn_topo *t, const struct rn_plan *p, char *args, char *why,
                        size_t wl) {
  char *sp = strpbrk(args, " \t");
  if (!sp) return 0;
  *sp = '\0';
  const char *text = sp + 1 + strspn(sp + 1, " \t");
  int n = rn_find_nic_name(t, args);
  for (int i = 0; i < p->nunused; i++)
    if (p->unused[i] == n) {
      snprintf(why, wl, "reason: %s", p->unused_why[i]);
      return strstr(p->unused_why[i], text) != NULL;
    }
  snprintf(why, wl, "%s is not unused", args);
  return 0;
}

static const struct rn_plan_vdev *rn_find_vdev(const struct rn_plan *p, const char *spec) {
  int host;
  const char *name = rn_host_prefix(spec, &host);
  const struct rn_plan_vdev *d = NULL;
  for (int i = 0; i < p->nvdevs; i++) {
    if (host >= 0 && p->vdevs[i].host != host) continue;
    if (strcmp(p->vdevs[i].name, name) == 0) {
      if (d) return NULL; /* ambiguous */
      d = &p->vdevs[i];
    }
  }
  return d;
}

static int rn_check_vdev(const struct rn_topo *t, const struct rn_plan *p, char *args, char *why,
                         size_t wl) {
  char *name = strtok(args, " \t");
  const struct rn_plan_vdev *d = name ? rn_find_vdev(p, name) : NULL;
  if (!d) {
    snprintf(why, wl, "no single virtual device %s", name ? name : "?");
    return 0;
  }
  for (char *tok = strtok(NULL, " \t"); tok; tok = strtok(NULL, " \t")) {
    if (strncmp(tok, "speed=", 6) == 0 && atoi(tok + 6) != d->speed_mbps) {
      snprintf(why, wl, "speed %d", d->speed_mbps);
      return 0;
    }
    if ((strcmp(tok, "gdr") == 0 && !d->gdr) || (strcmp(tok, "nogdr") == 0 && d->gdr)) {
      snprintf(why, wl, "gdr %d", d->gdr);
      return 0;
    }
    if ((strcmp(tok, "gdrany") == 0 && !d->gdr_any) ||
        (strcmp(tok, "nogdrany") == 0 && d->gdr_any)) {
      snprintf(why, wl, "gdr_any %d", d->gdr_any);
      return 0;
    }
    if (strncmp(tok, "rail=", 5) == 0 && atoi(tok + 5) != d->rail_id) {
      snprintf(why, wl, "rail %d", d->rail_id);
      return 0;
    }
    if (strncmp(tok, "plane=", 6) == 0 && atoi(tok + 6) != d->plane_id) {
      snprintf(why, wl, "plane %d", d->plane_id);
      return 0;
    }
    if (strncmp(tok, "standby=", 8) == 0) {
      const char *got = d->standby >= 0 ? rn_topo_nic(t, d->standby)->name : "none";
      if (strcmp(got, tok + 8) != 0) {
        snprintf(why, wl, "standby %s (%s)", got, d->standby_why);
        return 0;
      }
    }
  }
  return 1;
}

static int rn_check_standbywhy(const struct rn_plan *p, char *args, char *why, size_t wl) {
  char *sp = strpbrk(args, " \t");
  if (!sp) return 0;
  *sp = '\0';
  const char *text = sp + 1 + strspn(sp + 1, " \t");
  const struct rn_plan_vdev *d = rn_find_vdev(p, args);
  if (!d) {
    snprintf(why, wl, "no single virtual device %s", args);
    return 0;
  }
  snprintf(why, wl, "standby %s", d->standby_why);
  return strstr(d->standby_why, text) != NULL;
}

static int rn_check_rail(const struct rn_topo *t, const struct rn_plan *p, char *args, char *why,
                         size_t wl) {
  char name[64];
  int r, pl;
  if (sscanf(args, "%63s %d %d", name, &r, &pl) != 3) {
    snprintf(why, wl, "expected rail NIC R P");
    return 0;
  }
  int n = rn_find_nic_name(t, name);
  if (n < 0) {
    snprintf(why, wl, "no single NIC %s", name);
    return 0;
  }
  snprintf(why, wl, "rail %d plane %d", p->nic_rail[n], p->nic_plane[n]);
  return p->nic_rail[n] == r && p->nic_plane[n] == pl;
}

struct rn_opts_buf {
  char gpus[256], nics[256], cands[512], cvd[256];
  int has_cvd;
  struct rn_plan_opts o;
  int cand_idx[256];
  char subset[1024];
};

static int rn_parse_opts(struct rn_opts_buf *b, char *args) {
  for (char *tok = strtok(args, " \t"); tok; tok = strtok(NULL, " \t")) {
    if (strncmp(tok, "gpus=", 5) == 0)
      snprintf(b->gpus, sizeof(b->gpus), "%s", tok + 5), b->o.gpu_subset = b->gpus;
    else if (strncmp(tok, "nics=", 5) == 0)
      snprintf(b->nics, sizeof(b->nics), "%s", tok + 5), b->o.nic_filter = b->nics,
                                                         b->o.nic_filter_from = "RAILNET_NICS";
    else if (strncmp(tok, "gdr=", 4) == 0) {
      if (rn_gdr_level_parse(tok + 4, 0, &b->o.gdr_level)) return -1;
    } else if (strncmp(tok, "candidates=", 11) == 0)
      snprintf(b->cands, sizeof(b->cands), "%s", tok + 11);
    else if (strcmp(tok, "standby=0") == 0)
      b->o.standby = 0;
    else if (strcmp(tok, "gdrc2c=0") == 0)
      b->o.gdr_c2c = 0;
    else if (strcmp(tok, "pxn=0") == 0)
      b->o.pxn = 0;
    else if (strncmp(tok, "host=", 5) == 0)
      b->o.host = atoi(tok + 5);
    else if (strncmp(tok, "cvd=", 4) == 0)
      snprintf(b->cvd, sizeof(b->cvd), "%s", tok + 4), b->has_cvd = 1;
    else
      return -1;
  }
  return 0;
}

static void rn_run_expect(const char *path) {
  char *text = rn_slurp(path);
  char dir[1024], why[512];
  const char *files[8];
  char filebuf[8][1200];
  int nfiles = 0;
  struct rn_opts_buf ob;
  memset(&ob, 0, sizeof(ob));
  rn_plan_opts_default(&ob.o);
  snprintf(dir, sizeof(dir), "%.1000s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  if (!text) {
    rn_ok(0, "%s: readable", path);
    return;
  }
  /* First pass: the topology files and options. */
  char *save = NULL, *missing = NULL;
  char *copy = strdup(text);
  for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    if (strncmp(l, "topo ", 5) == 0 && nfiles < 8) {
      const char *f = l + 5;
      struct stat st;
      if (strncmp(f, "@shared/", 8) == 0) {
        const char *sd = rn_expect_shared_dir();
        snprintf(filebuf[nfiles], sizeof(filebuf[nfiles]), "%s/%s",
                 sd ? sd : rn_expect_shared_name(), f + 8);
        if (!missing && stat(filebuf[nfiles], &st) != 0) missing = strdup(filebuf[nfiles]);
      } else {
        snprintf(filebuf[nfiles], sizeof(filebuf[nfiles]), "%s/%s", dir, f);
      }
      files[nfiles] = filebuf[nfiles];
      nfiles++;
    } else if (strncmp(l, "opts ", 5) == 0) {
      if (rn_parse_opts(&ob, l + 5)) rn_ok(0, "%s: bad opts line \"%s\"", path, l);
    }
  }
  free(copy);
  if (missing) {
    if (rn_expect_required()) {
      rn_ok(0, "%s: %s is missing and RAILNET_TOPOLOGIES_REQUIRED=1", path, missing);
    } else {
      rn_n++;
      rn_skipped++;
      printf("ok %d - %s # SKIP %s absent\n", rn_n, path, missing);
    }
    free(missing);
    free(text);
    return;
  }
  struct rn_topo *t = NULL;
  char err[512] = "";
  int rc = nfiles ? rn_topo_load_files(files, nfiles, &t, err, sizeof(err)) : -1;
  rn_ok(rc == 0, "%s: topology loads %s", path, rc ? err : "");
  if (rc) {
    free(text);
    return;
  }
  rn_loaded++;
  int nc = 0;
  if (ob.cands[0]) {
    for (char *c = strtok(ob.cands, ","); c && nc < 256; c = strtok(NULL, ","))
      ob.cand_idx[nc++] = rn_find_nic_name(t, c);
    ob.o.candidates = ob.cand_idx;
    ob.o.ncandidates = nc;
  }
  char note[256] = "";
  if (ob.has_cvd &&
      rn_topo_cuda_visible(t, ob.cvd, ob.subset, sizeof(ob.subset), note, sizeof(note)) == 0)
    ob.o.gpu_subset = ob.subset;
  struct rn_plan *p = NULL;
  rc = rn_plan_build(t, &ob.o, &p, err, sizeof(err));
  rn_ok(rc == 0, "%s: plan builds %s", path, rc ? err : "");
  if (rc) {
    rn_topo_free(t);
    free(text);
    return;
  }
  save = NULL;
  for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    char line[1024];
    int ok = 1;
    why[0] = '\0';
    snprintf(line, sizeof(line), "%s", l);
    if (l[0] == '#' || l[0] == '\0' || strncmp(l, "topo ", 5) == 0 || strncmp(l, "opts ", 5) == 0)
      continue;
    if (strncmp(l, "gpu ", 4) == 0)
      ok = rn_check_gpu(t, p, l + 4, why, sizeof(why));
    else if (strncmp(l, "path ", 5) == 0)
      ok = rn_check_path(t, p, l + 5, why, sizeof(why));
    else if (strncmp(l, "gdrwhy ", 7) == 0)
      ok = rn_check_gdrwhy(t, p, l + 7, why, sizeof(why));
    else if (strncmp(l, "reason ", 7) == 0)
      ok = rn_check_reason(t, p, l + 7, why, sizeof(why));
    else if (strncmp(l, "numa ", 5) == 0) {
      char g[64];
      int want;
      const struct rn_plan_gpu *pg = NULL;
      if (sscanf(l + 5, "%63s %d", g, &want) == 2) pg = rn_find_gpu(t, p, g, why, sizeof(why));
      ok = pg && rn_topo_gpu(t, pg->gpu)->numa == want;
      if (pg) snprintf(why, sizeof(why), "NUMA %d", rn_topo_gpu(t, pg->gpu)->numa);
    } else if (strncmp(l, "unused", 6) == 0)
      ok = rn_check_unused(t, p, l + 6, why, sizeof(why));
    else if (strncmp(l, "why ", 4) == 0)
      ok = rn_check_why(t, p, l + 4, why, sizeof(why));
    else if (strncmp(l, "vdevs ", 6) == 0) {
      ok = atoi(l + 6) == p->nvdevs;
      snprintf(why, sizeof(why), "got %d", p->nvdevs);
    } else if (strncmp(l, "vdev ", 5) == 0)
      ok = rn_check_vdev(t, p, l + 5, why, sizeof(why));
    else if (strncmp(l, "standbywhy ", 11) == 0)
      ok = rn_check_standbywhy(p, l + 11, why, sizeof(why));
    else if (strncmp(l, "rail ", 5) == 0)
      ok = rn_check_rail(t, p, l + 5, why, sizeof(why));
    else if (strncmp(l, "gpus ", 5) == 0) {
      ok = atoi(l + 5) == p->ngpus;
      snprintf(why, sizeof(why), "got %d", p->ngpus);
    } else if (strncmp(l, "nics ", 5) == 0) {
      ok = atoi(l + 5) == rn_topo_nnics(t);
      snprintf(why, sizeof(why), "got %d", rn_topo_nnics(t));
    } else if (strncmp(l, "hosts ", 6) == 0) {
      ok = atoi(l + 6) == rn_topo_nhosts(t);
      snprintf(why, sizeof(why), "got %d", rn_topo_nhosts(t));
    } else if (strncmp(l, "note ", 5) == 0) {
      ok = 0;
      for (int i = 0; i < p->nnotes; i++) ok |= strstr(p->notes[i], l + 5) != NULL;
      if (!ok && note[0]) ok = strstr(note, l + 5) != NULL;
    } else {
      ok = 0;
      snprintf(why, sizeof(why), "unknown expectation");
    }
    if (!ok) printf("# %s\n", why);
    rn_ok(ok, "%s: %s", path, line);
  }
  rn_check_golden(path, t, p);
  rn_plan_free(p);
  rn_topo_free(t);
  free(text);
}

static int rn_name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int rn_expect_run_dir(const char *dir) {
  DIR *d = opendir(dir);
  char *names[256];
  int n = 0;
  if (!d) {
    printf("1..1\nnot ok 1 - %s is missing from the source tree\n", dir);
    return 1;
  }
  for (struct dirent *e; (e = readdir(d)) && n < 256;) {
    size_t l = strlen(e->d_name);
    if (l > 7 && strcmp(e->d_name + l - 7, ".expect") == 0) names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof(char *), rn_name_cmp);
  for (int i = 0; i < n; i++) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    rn_run_expect(path);
    free(names[i]);
  }
  printf("# %d expectation file(s): %d loaded and checked, %d skipped\n", n, rn_loaded, rn_skipped);
  printf("1..%d\n", rn_n);
  return rn_failed ? 1 : 0;
}
