/* The planner's knobs, read from the environment the same way for the
 * plugin and for railnet-topo.  Variable names, defaults and fallbacks
 * come from include/railnet/params.def, the one table (expanded here with
 * our own X-macros); NCCL's own GDR and PXN variables are read with NCCL's
 * parsing because the plan predicts what NCCL will do with them.  Nothing
 * is logged here: echoes and warnings go back to the caller as text. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "sysfs.h"

struct rn_set_row {
  const char *name; /* without RAILNET_ */
  int is_int;
  const char *def_str;
  long long def_int, lo, hi;
  const char *fallback;
};

#define RN_PARAM_INT(field, name, def, lo, hi, doc) {name, 1, #def, def, lo, hi, ""},
#define RN_PARAM_STR(field, name, def, fallback, doc) {name, 0, def, 0, 0, 0, fallback},
static const struct rn_set_row rn_set_rows[] = {
#include "railnet/params.def"
};
#undef RN_PARAM_INT
#undef RN_PARAM_STR

static const struct rn_set_row *rn_set_row(const char *name) {
  for (size_t i = 0; i < sizeof(rn_set_rows) / sizeof(rn_set_rows[0]); i++)
    if (strcmp(rn_set_rows[i].name, name) == 0) return &rn_set_rows[i];
  return NULL;
}

/* warn: 1 a warning, 0 an echo; in_table: the plugin's parameter table
 * says the same (see rn_topo_settings.warn_in_table). */
static void rn_set_msgt(struct rn_topo_settings *s, int warn, int in_table, const char *fmt,
                        va_list ap) {
  int *n = warn ? &s->nwarn : &s->ninfo;
  if (*n == RN_SETTINGS_MAX_MSGS) return;
  char *dst = warn ? s->warn[*n] : s->info[*n];
  vsnprintf(dst, sizeof(s->warn[0]), fmt, ap);
  if (in_table) *(warn ? &s->warn_in_table : &s->info_in_table) |= 1u << *n;
  (*n)++;
}

static void rn_set_msg(struct rn_topo_settings *s, int warn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void rn_set_msg(struct rn_topo_settings *s, int warn, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rn_set_msgt(s, warn, 0, fmt, ap);
  va_end(ap);
}

/* The same, for what plugin/param.c also checks or echoes. */
static void rn_set_tmsg(struct rn_topo_settings *s, int warn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void rn_set_tmsg(struct rn_topo_settings *s, int warn, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rn_set_msgt(s, warn, 1, fmt, ap);
  va_end(ap);
}

static const char *rn_set_env(const char *var) {
  const char *v = getenv(var);
  return (v && *v) ? v : NULL;
}

/* A string row: RAILNET_<name>, else its fallback variable, else its
 * default; dst gets the value and from the variable it came from. */
static void rn_set_str(struct rn_topo_settings *s, const char *name, char *dst, size_t len,
                       char *from, size_t fromlen) {
  const struct rn_set_row *r = rn_set_row(name);
  char var[64];
  snprintf(var, sizeof(var), "RAILNET_%s", name);
  const char *v = rn_set_env(var);
  const char *src = var;
  if (!v && r && r->fallback[0]) {
    v = rn_set_env(r->fallback);
    src = r->fallback;
  }
  if (!v) {
    snprintf(dst, len, "%s", r ? r->def_str : "");
    from[0] = '\0';
    return;
  }
  if (strlen(v) >= len) rn_set_tmsg(s, 1, "%s is longer than %zu bytes; truncated", src, len - 1);
  snprintf(dst, len, "%s", v);
  snprintf(from, fromlen, "%.31s", src);
  rn_set_tmsg(s, 0, "%s set by environment to %s", src, dst);
}

/* An integer row, strictly parsed and range-checked as the plugin does. */
static long long rn_set_int(struct rn_topo_settings *s, const char *name) {
  const struct rn_set_row *r = rn_set_row(name);
  char var[64];
  snprintf(var, sizeof(var), "RAILNET_%s", name);
  long long def = r ? r->def_int : 0;
  const char *v = rn_set_env(var);
  if (!v || !r) return def;
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 0);
  if (errno || *end || x < r->lo || x > r->hi) {
    rn_set_tmsg(s, 1, "%s=%s is not an integer in [%lld, %lld]; using %lld", var, v, r->lo, r->hi,
                def);
    return def;
  }
  rn_set_tmsg(s, 0, "%s set by environment to %lld", var, x);
  return x;
}

/* NCCL_PARAM parsing (strtoll, base 0, only errno rejects): the value
 * NCCL itself would use. */
static long long rn_set_nccl_int(struct rn_topo_settings *s, const char *var, long long def) {
  const char *v = rn_set_env(var);
  if (!v) return def;
  errno = 0;
  long long x = strtoll(v, NULL, 0);
  if (errno) return def;
  rn_set_msg(s, 0, "%s set by environment to %lld", var, x);
  return x;
}

void rn_topo_settings_read(struct rn_topo_settings *s) {
  memset(s, 0, sizeof(*s));
  rn_set_str(s, "NICS", s->nics, sizeof(s->nics), s->nics_from, sizeof(s->nics_from));
  rn_set_str(s, "TOPO_FILE", s->topo_file, sizeof(s->topo_file), s->topo_file_from,
             sizeof(s->topo_file_from));
  /* With neither set, NCCL reads the topology a GPU virtual machine's host
   * publishes there (topo.cc): the PCI tree the guest sees is flat, and
   * the file has the real one.  So does railnet. */
  static const char vm_topo[] = "var/run/nvidia-topologyd/virtualTopology.xml";
  const char *root = rn_topo_sysfs_root();
  if (!s->topo_file[0] && rn_topo_sysfs_exists(root, vm_topo)) {
    if (rn_topo_sysfs_join(root, vm_topo, s->topo_file, sizeof(s->topo_file)) != 0) {
      s->topo_file[0] = '\0';
    } else {
      snprintf(s->topo_file_from, sizeof(s->topo_file_from), "nvidia-topologyd");
      rn_set_msg(s, 0,
                 "topology file %s (the virtual machine's, which NCCL reads too when "
                 "NCCL_TOPO_FILE is unset)",
                 s->topo_file);
    }
  }
  char err[160];
  if (s->nics[0] && rn_topo_filter_check(s->nics, err, sizeof(err))) {
    rn_set_msg(s, 1, "%s: %s; no NIC filter used", s->nics_from, err);
    s->nics[0] = '\0';
  }
  /* GPUDirect level: RAILNET_GDR_LEVEL (a name or NCCL's old number), else
   * NCCL_NET_GDR_LEVEL read as NCCL reads it, else the table's default. */
  const struct rn_set_row *r = rn_set_row("GDR_LEVEL");
  const char *fb = r && r->fallback[0] ? r->fallback : "NCCL_NET_GDR_LEVEL";
  const char *v = rn_set_env("RAILNET_GDR_LEVEL");
  int got = 0;
  if (v) {
    if (rn_gdr_level_parse(v, 0, &s->gdr_level) == 0) {
      snprintf(s->gdr_level_from, sizeof(s->gdr_level_from), "RAILNET_GDR_LEVEL");
      rn_set_tmsg(s, 0, "RAILNET_GDR_LEVEL set by environment to %s", rn_path_name(s->gdr_level));
      got = 1;
    } else {
      rn_set_msg(s, 1,
                 "RAILNET_GDR_LEVEL=%s is not a path type (LOC, PIX, PXB, PHB, SYS, ...) nor "
                 "0-4; ignored",
                 v);
    }
  }
  if (!got && (v = rn_set_env(fb)) != NULL && rn_gdr_level_parse(v, 1, &s->gdr_level) == 0) {
    snprintf(s->gdr_level_from, sizeof(s->gdr_level_from), "%s", fb);
    rn_set_tmsg(s, 0, "%s set by environment to %s", fb, rn_path_name(s->gdr_level));
    got = 1;
  }
  if (!got) {
    if (!r || rn_gdr_level_parse(r->def_str, 0, &s->gdr_level) != 0) s->gdr_level = RN_PATH_PXB;
    snprintf(s->gdr_level_from, sizeof(s->gdr_level_from), "default");
  }
  s->gdr_c2c = rn_set_nccl_int(s, "NCCL_NET_GDR_C2C", 1) != 0;
  s->pxn = rn_set_nccl_int(s, "NCCL_PXN_DISABLE", 0) != 1;
  s->pxn_c2c = rn_set_nccl_int(s, "NCCL_PXN_C2C", 1) != 0;
  s->standby = rn_set_row("STANDBY") ? (int)rn_set_int(s, "STANDBY") : 1;
}

void rn_plan_opts_from_settings(struct rn_plan_opts *o, const struct rn_topo_settings *s) {
  o->gdr_level = s->gdr_level;
  o->nic_filter = s->nics[0] ? s->nics : NULL;
  o->nic_filter_from = s->nics_from[0] ? s->nics_from : NULL;
  o->gdr_c2c = s->gdr_c2c;
  o->standby = s->standby;
  o->pxn = s->pxn;
  o->pxn_c2c = s->pxn_c2c;
}

static void rn_cvd_append(char *subset, size_t len, int g) {
  size_t l = strlen(subset);
  snprintf(subset + l, len - l, "%s%d", l ? "," : "", g);
}

int rn_topo_cuda_visible(const struct rn_topo *t, const char *cvd, char *subset, size_t len,
                         char *note, size_t notelen) {
  subset[0] = '\0';
  if (note && notelen) note[0] = '\0';
  if (!cvd) return 1;
  char *copy = strdup(cvd), *save = NULL;
  int *seen = calloc((size_t)t->ngpus + 1, sizeof(int));
  if (!copy || !seen) {
    free(copy);
    free(seen);
    snprintf(subset, len, "*");
    return 1;
  }
  for (char *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
    while (*e == ' ') e++;
    size_t el = strlen(e);
    while (el && e[el - 1] == ' ') e[--el] = '\0';
    int g = -1;
    if (strncmp(e, "GPU-", 4) == 0 || strncmp(e, "MIG-", 4) == 0) {
      int have = 0, matches = 0;
      for (int i = 0; i < t->ngpus; i++) {
        have |= t->gpus[i].pub.uuid[0] != '\0';
        if (t->gpus[i].pub.uuid[0] && strncmp(t->gpus[i].pub.uuid, e, el) == 0) g = i, matches++;
      }
      if (!have) {
        /* CUDA would resolve it; this source cannot.  Say so, plan all. */
        if (note)
          snprintf(note, notelen,
                   "CUDA_VISIBLE_DEVICES holds UUIDs (%.40s) and this topology has none: "
                   "planning every GPU",
                   e);
        free(copy);
        free(seen);
        snprintf(subset, len, "*");
        return 1;
      }
      if (matches != 1) g = -1; /* unknown or ambiguous prefix: invalid */
    } else {
      char *end;
      long v = strtol(e, &end, 10);
      if (end != e && *end == '\0' && v >= 0 && v < t->ngpus) g = (int)v;
    }
    /* CUDA: an invalid entry (or a repeat) ends the list. */
    if (g < 0 || seen[g]) {
      if (note)
        snprintf(note, notelen,
                 "CUDA_VISIBLE_DEVICES entry \"%.40s\" is not a GPU here: it ends "
                 "the list, as in CUDA",
                 e);
      break;
    }
    seen[g] = 1;
    rn_cvd_append(subset, len, g);
  }
  free(copy);
  free(seen);
  return 0;
}
