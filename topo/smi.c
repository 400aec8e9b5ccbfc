/* `nvidia-smi topo -m` text into the model.
 *
 * The matrix gives relations only (no bus ids, switches or speeds), so the
 * loader builds the smallest tree that reproduces them: devices related by
 * PIX/PXB/PHB/NODE share a CPU; within it, components joined at <= PHB
 * share a host bridge, at <= PXB a top switch, and at PIX a sub-switch.
 * NV# cells (NVLink) say nothing about PCIe and are ignored.  A NIC SYS to
 * every GPU (storage) gets a CPU node of its own. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define RN_SMI_MAX_DEV 256
#define RN_SMI_LINE 8192

enum { RN_REL_NONE = -1 }; /* X, NV#, unknown */

struct rn_smi {
  int ndev, ngpu;
  char name[RN_SMI_MAX_DEV][16]; /* column names: GPU0, NIC3 */
  char nicname[RN_SMI_MAX_DEV][64];
  int numa[RN_SMI_MAX_DEV];
  int rowseen[RN_SMI_MAX_DEV];
  signed char rel[RN_SMI_MAX_DEV][RN_SMI_MAX_DEV];
};

static char *rn_smi_trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

static int rn_smi_is_dev(const char *s) {
  if (strncmp(s, "GPU", 3) && strncmp(s, "NIC", 3)) return 0;
  if (!isdigit((unsigned char)s[3])) return 0;
  for (const char *p = s + 3; *p; p++)
    if (!isdigit((unsigned char)*p)) return 0;
  return 1;
}

static int rn_smi_rel(const char *cell) {
  if (strcmp(cell, "PIX") == 0) return RN_PATH_PIX;
  if (strcmp(cell, "PXB") == 0) return RN_PATH_PXB;
  if (strcmp(cell, "PHB") == 0) return RN_PATH_PHB;
  if (strcmp(cell, "NODE") == 0) return RN_PATH_NODE;
  if (strcmp(cell, "SYS") == 0) return RN_PATH_SYS;
  return RN_REL_NONE;
}

/* Splits on tabs (nvidia-smi's separator); empty cells are kept. */
static int rn_smi_split(char *line, char **cells, int max) {
  int n = 0;
  char *p = line;
  while (n < max) {
    cells[n++] = p;
    char *tab = strchr(p, '\t');
    if (!tab) break;
    *tab = '\0';
    p = tab + 1;
  }
  for (int i = 0; i < n; i++) cells[i] = rn_smi_trim(cells[i]);
  return n;
}

static int rn_uf_find(int *uf, int a) {
  while (uf[a] != a) a = uf[a] = uf[uf[a]];
  return a;
}

/* Components of devices in set (1 = member) joined by rel <= lvl. */
static void rn_smi_components(const struct rn_smi *s, const int *set, int lvl, int *uf) {
  for (int i = 0; i < s->ndev; i++) uf[i] = i;
  for (int i = 0; i < s->ndev; i++)
    for (int j = i + 1; j < s->ndev; j++)
      if (set[i] && set[j] && s->rel[i][j] != RN_REL_NONE && s->rel[i][j] <= lvl) {
        int a = rn_uf_find(uf, i), b = rn_uf_find(uf, j);
        if (a != b) uf[b > a ? b : a] = a < b ? a : b;
      }
}

static int rn_smi_build(struct rn_smi *s, struct rn_topo *t, const char *path, char *err,
                        size_t errlen) {
  int cpu_of[RN_SMI_MAX_DEV], uf[RN_SMI_MAX_DEV], node_of[RN_SMI_MAX_DEV];
  int set[RN_SMI_MAX_DEV], hb_uf[RN_SMI_MAX_DEV], top_uf[RN_SMI_MAX_DEV];
  /* CPU groups: devices linked by anything closer than SYS. */
  int all[RN_SMI_MAX_DEV] = {0};
  for (int i = 0; i < s->ndev; i++) all[i] = 1;
  rn_smi_components(s, all, RN_PATH_NODE, uf);
  for (int i = 0; i < s->ndev; i++) cpu_of[i] = -1;
  for (int i = 0; i < s->ndev; i++) {
    int r = rn_uf_find(uf, i);
    if (cpu_of[r] < 0) {
      int numa = -1;
      for (int j = 0; j < s->ndev; j++)
        if (rn_uf_find(uf, j) == r && s->numa[j] >= 0) numa = s->numa[j];
      cpu_of[r] = rn_topo_add_cpu(t, numa);
      if (cpu_of[r] < 0) goto out_oom;
    }
    cpu_of[i] = cpu_of[r];
  }
  for (int i = 0; i < s->ndev; i++) node_of[i] = -1;
  for (int c = 0; c < s->ndev; c++) {
    if (rn_uf_find(uf, c) != c) continue; /* one pass per CPU group */
    for (int i = 0; i < s->ndev; i++) set[i] = rn_uf_find(uf, i) == c;
    rn_smi_components(s, set, RN_PATH_PHB, hb_uf);
    for (int h = 0; h < s->ndev; h++) {
      if (!set[h] || rn_uf_find(hb_uf, h) != h) continue;
      int hb = rn_topo_add_node(t, cpu_of[c], RN_NODE_HOSTBRIDGE, "", NULL);
      if (hb < 0) goto out_oom;
      int hset[RN_SMI_MAX_DEV];
      for (int i = 0; i < s->ndev; i++) hset[i] = set[i] && rn_uf_find(hb_uf, i) == h;
      rn_smi_components(s, hset, RN_PATH_PXB, top_uf);
      for (int k = 0; k < s->ndev; k++) {
        if (!hset[k] || rn_uf_find(top_uf, k) != k) continue;
        int tset[RN_SMI_MAX_DEV], pix_uf[RN_SMI_MAX_DEV], members = 0, npix = 0;
        for (int i = 0; i < s->ndev; i++)
          members += tset[i] = hset[i] && rn_uf_find(top_uf, i) == k;
        int parent = hb;
        if (members > 1) {
          char label[16];
          snprintf(label, sizeof(label), "(%.10s)", s->name[k]);
          parent = rn_topo_add_node(t, hb, RN_NODE_SWITCH, label, NULL);
          if (parent < 0) goto out_oom;
        }
        rn_smi_components(s, tset, RN_PATH_PIX, pix_uf);
        for (int i = 0; i < s->ndev; i++) npix += tset[i] && rn_uf_find(pix_uf, i) == i;
        for (int p = 0; p < s->ndev; p++) {
          if (!tset[p] || rn_uf_find(pix_uf, p) != p) continue;
          int sub = parent;
          /* Several PIX groups under one top switch are PXB to each other:
           * each needs its own sub-switch. */
          if (npix > 1) {
            char label[16];
            snprintf(label, sizeof(label), "(%.10s)", s->name[p]);
            sub = rn_topo_add_node(t, parent, RN_NODE_SWITCH, label, NULL);
            if (sub < 0) goto out_oom;
          }
          for (int i = 0; i < s->ndev; i++) {
            if (!tset[i] || rn_uf_find(pix_uf, i) != p) continue;
            node_of[i] = rn_topo_add_node(t, sub, RN_NODE_DEV, "", NULL);
            if (node_of[i] < 0) goto out_oom;
          }
        }
      }
    }
  }
  for (int i = 0; i < s->ndev; i++) {
    if (s->name[i][0] == 'G') {
      if (rn_topo_add_gpu(t, node_of[i], 1) < 0) goto out_oom;
    } else {
      struct rn_topo_nic nic;
      memset(&nic, 0, sizeof(nic));
      snprintf(nic.name, sizeof(nic.name), "%s", s->nicname[i][0] ? s->nicname[i] : s->name[i]);
      nic.port = 1;
      nic.rdma = 1;
      nic.gdr = 1;
      if (rn_topo_add_nic(t, node_of[i], &nic) < 0) goto out_oom;
    }
  }
  rn_topo_add_note(
      t, "nvidia-smi matrix: no bus ids or link speeds; PCIe tree rebuilt from the relations");
  return rn_topo_finalize(t, err, errlen);
out_oom:
  rn_topo_errf(err, errlen, "%s: out of memory", path);
  return -1;
}

static int rn_smi_parse(struct rn_smi *s, FILE *f, const char *path, char *err, size_t errlen) {
  char line[RN_SMI_LINE];
  char *cells[RN_SMI_MAX_DEV + 8];
  int col[RN_SMI_MAX_DEV + 8], numa_col = -1, ncells_hdr = 0, lineno = 0, in_matrix = 0;
  while (fgets(line, sizeof(line), f)) {
    lineno++;
    if (!strchr(line, '\n') && !feof(f)) {
      rn_topo_errf(err, errlen, "%s:%d: line too long", path, lineno);
      return -1;
    }
    line[strcspn(line, "\r\n")] = '\0';
    if (!ncells_hdr) {
      if (!strstr(line, "GPU0")) continue;
      int n = rn_smi_split(line, cells, RN_SMI_MAX_DEV + 8);
      for (int i = 0; i < n; i++) {
        col[i] = -1;
        if (rn_smi_is_dev(cells[i])) {
          if (s->ndev == RN_SMI_MAX_DEV) {
            rn_topo_errf(err, errlen, "%s:%d: too many devices", path, lineno);
            return -1;
          }
          col[i] = s->ndev;
          snprintf(s->name[s->ndev], sizeof(s->name[0]), "%s", cells[i]);
          s->numa[s->ndev] = -1;
          s->ndev++;
        } else if (strcmp(cells[i], "NUMA Affinity") == 0) {
          numa_col = i;
        }
      }
      ncells_hdr = n;
      in_matrix = 1;
      continue;
    }
    char first[16];
    size_t fl = strcspn(line, " \t");
    snprintf(first, sizeof(first), "%.*s", (int)(fl < sizeof(first) ? fl : sizeof(first) - 1),
             line);
    if (in_matrix && rn_smi_is_dev(first)) {
      int n = rn_smi_split(line, cells, RN_SMI_MAX_DEV + 8);
      int row = -1;
      for (int d = 0; d < s->ndev; d++)
        if (strcmp(s->name[d], cells[0]) == 0) row = d;
      if (row < 0) {
        rn_topo_errf(err, errlen, "%s:%d: row %s has no column", path, lineno, cells[0]);
        return -1;
      }
      for (int i = 1; i < ncells_hdr; i++) {
        if (col[i] < 0) continue;
        if (i >= n) {
          rn_topo_errf(err, errlen, "%s:%d: row %s has %d cells, expected %d", path, lineno,
                       cells[0], n, ncells_hdr);
          return -1;
        }
        s->rel[row][col[i]] = (signed char)rn_smi_rel(cells[i]);
      }
      if (numa_col > 0 && numa_col < n && isdigit((unsigned char)cells[numa_col][0]))
        s->numa[row] = atoi(cells[numa_col]);
      s->rowseen[row] = 1;
      continue;
    }
    char *trimmed = rn_smi_trim(line);
    if (trimmed[0] == '\0' || strncmp(trimmed, "Legend", 6) == 0) in_matrix = 0;
    /* "NIC3: mlx5_3" in the NIC legend. */
    if (strncmp(trimmed, "NIC", 3) == 0 && strchr(trimmed, ':')) {
      char key[16], val[64];
      if (sscanf(trimmed, "%15[^:]: %63s", key, val) == 2)
        for (int d = 0; d < s->ndev; d++)
          if (strcmp(s->name[d], key) == 0)
            snprintf(s->nicname[d], sizeof(s->nicname[0]), "%s", val);
    }
  }
  if (!ncells_hdr) {
    rn_topo_errf(err, errlen, "%s:%d: no nvidia-smi matrix header (GPU0 ...)", path,
                 lineno ? lineno : 1);
    return -1;
  }
  for (int d = 0; d < s->ndev; d++) {
    if (!s->rowseen[d]) {
      rn_topo_errf(err, errlen, "%s:%d: no row for %s", path, lineno, s->name[d]);
      return -1;
    }
    for (int e = 0; e < s->ndev; e++)
      if (s->rel[d][e] != s->rel[e][d] && s->rel[d][e] != RN_REL_NONE &&
          s->rel[e][d] != RN_REL_NONE) {
        rn_topo_errf(err, errlen, "%s: %s-%s relation is not symmetric", path, s->name[d],
                     s->name[e]);
        return -1;
      }
  }
  return 0;
}

int rn_topo_load_smi(const char *path, struct rn_topo **out, char *err, size_t errlen) {
  *out = NULL;
  FILE *f = fopen(path, "r");
  if (!f) {
    rn_topo_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  struct rn_smi *s = calloc(1, sizeof(*s));
  struct rn_topo *t = rn_topo_alloc("nvidia-smi");
  int rc = -1;
  if (!s || !t) {
    rn_topo_errf(err, errlen, "%s: out of memory", path);
    goto out_close;
  }
  memset(s->rel, RN_REL_NONE, sizeof(s->rel));
  if (rn_smi_parse(s, f, path, err, errlen) || rn_smi_build(s, t, path, err, errlen))
    goto out_close;
  *out = t;
  t = NULL;
  rc = 0;
out_close:
  rn_topo_free(t);
  free(s);
  fclose(f);
  return rc;
}
