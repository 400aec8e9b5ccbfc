/* Plan expectations, one assertion per line, written by hand from the
 * layout facts (never copied from planner output):
 *
 *   topo FILE            fixture, relative to the .expect file; "@shared/NAME"
 *                        is a vendor file (skipped when absent); several merge
 *   opts K=V ...         gpus=LIST nics=FILTER gdr=LEVEL candidates=NAME,NAME
 *   gpus N / nics N      GPUs in the plan / NICs in the model
 *   gpu BUSID NIC:PATH:gdr|nogdr ...   the GPU's rail set, best first ("none")
 *   unused NAME ...      exactly these candidate NICs are unused ("-": none)
 *   vdevs N              number of virtual devices
 *   vdev NAME [speed=MBPS] [gdr|nogdr]
 *   note TEXT            some plan note contains TEXT
 *
 * Beside each X.expect, X.golden holds the full rendered plan (reasons
 * included); RN_REGEN=1 rewrites the goldens. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "expect_runner.h"
#include "railnet/topo.h"

static int rn_n, rn_failed;

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

const char *rn_expect_shared_dir(void) {
  static char buf[1024];
  struct stat st;
  const char *d = getenv("RAILNET_TOPOLOGIES_DIR");
  snprintf(buf, sizeof(buf), "%s", (d && *d) ? d : "../shared/topologies");
  return (stat(buf, &st) == 0 && S_ISDIR(st.st_mode)) ? buf : NULL;
}

static int rn_find_nic_name(const struct rn_topo *t, const char *name) {
  for (int i = 0; i < rn_topo_nnics(t); i++)
    if (strcmp(rn_topo_nic(t, i)->name, name) == 0) return i;
  return -1;
}

static void rn_render(const struct rn_topo *t, const struct rn_plan *p, FILE *f) {
  fprintf(f, "source %s gpus %d nics %d cpus %d\n", rn_topo_source(t), rn_topo_ngpus(t),
          rn_topo_nnics(t), rn_topo_ncpus(t));
  for (int i = 0; i < p->ngpus; i++) {
    fprintf(f, "GPU %s numa %d:", rn_topo_gpu(t, p->gpus[i].gpu)->busid,
            rn_topo_gpu(t, p->gpus[i].gpu)->numa);
    for (int r = 0; r < p->gpus[i].nrails; r++)
      fprintf(f, " %s", rn_topo_nic(t, p->gpus[i].rails[r].nic)->name);
    fprintf(f, "\n");
    for (int r = 0; r < p->gpus[i].nrails; r++) fprintf(f, "  %s\n", p->gpus[i].rails[r].reason);
  }
  for (int i = 0; i < p->nvdevs; i++)
    fprintf(f, "vdev %s nics %d speed %d gdr %d\n", p->vdevs[i].name, p->vdevs[i].nnics,
            p->vdevs[i].speed_mbps, p->vdevs[i].gdr);
  fprintf(f, "unused:");
  for (int i = 0; i < p->nunused; i++) fprintf(f, " %s", rn_topo_nic(t, p->unused[i])->name);
  fprintf(f, "\n");
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
    rn_ok(same, "%s: plan matches the golden plan", gpath);
    free(want);
  }
  free(got);
}

static int rn_check_gpu(const struct rn_topo *t, const struct rn_plan *p, char *args, char *why,
                        size_t wl) {
  char *busid = strtok(args, " \t");
  const struct rn_plan_gpu *pg = NULL;
  /* "GPUn" names model GPU n, for sources without bus ids (nvidia-smi). */
  for (int i = 0; busid && i < p->ngpus; i++)
    if (strcmp(rn_topo_gpu(t, p->gpus[i].gpu)->busid, busid) == 0 ||
        (strncmp(busid, "GPU", 3) == 0 && atoi(busid + 3) == p->gpus[i].gpu))
      pg = &p->gpus[i];
  if (!pg) {
    snprintf(why, wl, "GPU %s not in the plan", busid ? busid : "?");
    return 0;
  }
  int r = 0;
  for (char *tok = strtok(NULL, " \t"); tok; tok = strtok(NULL, " \t")) {
    if (strcmp(tok, "none") == 0) break;
    /* NAME:PATH:gdr, split from the right: names may hold ':' (bus ids). */
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

static int rn_check_vdev(const struct rn_plan *p, char *args, char *why, size_t wl) {
  char *name = strtok(args, " \t");
  const struct rn_plan_vdev *d = NULL;
  for (int i = 0; name && i < p->nvdevs; i++)
    if (strcmp(p->vdevs[i].name, name) == 0) d = &p->vdevs[i];
  if (!d) {
    snprintf(why, wl, "no virtual device %s", name ? name : "?");
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
  }
  return 1;
}

struct rn_opts_buf {
  char gpus[256], nics[256], cands[512];
  struct rn_plan_opts o;
  int cand_idx[256];
};

static int rn_parse_opts(struct rn_opts_buf *b, char *args) {
  for (char *tok = strtok(args, " \t"); tok; tok = strtok(NULL, " \t")) {
    if (strncmp(tok, "gpus=", 5) == 0)
      snprintf(b->gpus, sizeof(b->gpus), "%s", tok + 5), b->o.gpu_subset = b->gpus;
    else if (strncmp(tok, "nics=", 5) == 0)
      snprintf(b->nics, sizeof(b->nics), "%s", tok + 5), b->o.nic_filter = b->nics;
    else if (strncmp(tok, "gdr=", 4) == 0) {
      if (rn_path_parse(tok + 4, &b->o.gdr_level)) return -1;
    } else if (strncmp(tok, "candidates=", 11) == 0)
      snprintf(b->cands, sizeof(b->cands), "%s", tok + 11);
    else
      return -1;
  }
  return 0;
}

static void rn_run_expect(const char *path) {
  char *text = rn_slurp(path);
  char dir[1024], why[256];
  const char *files[8];
  char filebuf[8][1200];
  int nfiles = 0, skip = 0;
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
  char *save = NULL;
  char *copy = strdup(text);
  for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    if (strncmp(l, "topo ", 5) == 0 && nfiles < 8) {
      const char *f = l + 5;
      if (strncmp(f, "@shared/", 8) == 0) {
        const char *sd = rn_expect_shared_dir();
        if (!sd) skip = 1;
        snprintf(filebuf[nfiles], sizeof(filebuf[nfiles]), "%s/%s", sd ? sd : ".", f + 8);
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
  if (skip) {
    rn_n++;
    printf("ok %d - %s # SKIP shared topologies absent\n", rn_n, path);
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
  int nc = 0;
  if (ob.cands[0]) {
    for (char *c = strtok(ob.cands, ","); c && nc < 256; c = strtok(NULL, ","))
      ob.cand_idx[nc++] = rn_find_nic_name(t, c);
    ob.o.candidates = ob.cand_idx;
    ob.o.ncandidates = nc;
  }
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
    else if (strncmp(l, "unused", 6) == 0)
      ok = rn_check_unused(t, p, l + 6, why, sizeof(why));
    else if (strncmp(l, "vdevs ", 6) == 0) {
      ok = atoi(l + 6) == p->nvdevs;
      snprintf(why, sizeof(why), "got %d", p->nvdevs);
    } else if (strncmp(l, "vdev ", 5) == 0)
      ok = rn_check_vdev(p, l + 5, why, sizeof(why));
    else if (strncmp(l, "gpus ", 5) == 0) {
      ok = atoi(l + 5) == p->ngpus;
      snprintf(why, sizeof(why), "got %d", p->ngpus);
    } else if (strncmp(l, "nics ", 5) == 0) {
      ok = atoi(l + 5) == rn_topo_nnics(t);
      snprintf(why, sizeof(why), "got %d", rn_topo_nnics(t));
    } else if (strncmp(l, "note ", 5) == 0) {
      ok = 0;
      for (int i = 0; i < p->nnotes; i++) ok |= strstr(p->notes[i], l + 5) != NULL;
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
    printf("1..0 # SKIP %s absent\n", dir);
    return 0;
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
  printf("1..%d\n", rn_n);
  return rn_failed ? 1 : 0;
}
