/* `nvidia-smi topo -m` text into the model.
 *
 * Copies come tab-separated (the real output, its header underlined with
 * terminal escapes even in a file) or space-separated (pasted into issues
 * and chats), may start with the command line or other text,
 * and newer drivers add "NUMA Affinity" and "GPU NUMA ID" columns (whose
 * tab-separated rows hold an extra empty cell).  Cells never contain
 * spaces, so rows are split on any whitespace and the columns after the
 * device matrix are matched by position; a tab-separated row keeps its
 * empty cells there (CPU Affinity is empty for a GPU whose cores the
 * process's cpuset leaves out).  A space-separated copy has lost them:
 * a GPU row one cell short there lost its CPU Affinity, the only cell
 * nvidia-smi leaves empty (NUMA Affinity and GPU NUMA ID say N/A).
 *
 * The matrix gives relations only (no bus ids, switches or speeds), so the
 * loader builds the smallest tree that reproduces them in NCCL's terms:
 * devices related by anything closer than SYS share a CPU (NUMA) node (NVML's
 * NODE and PHB are both PHB for NCCL); inside it, devices joined at <= PXB
 * share a switch, and PIX groups under a shared switch get a sub-switch
 * each.  A GPU with a GPU NUMA ID is coherent with its CPU over NVLink-C2C
 * (Grace); nvidia-smi then shows SYS to every NIC, so NICs are placed on
 * those CPUs by their own NIC-NIC groups, in order (a stated assumption).
 * NV# cells are NVLinks. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "xml.h"

#define RN_SMI_MAX_DEV 256
#define RN_SMI_MAX_TOK (RN_SMI_MAX_DEV + 16)
#define RN_SMI_LINE 16384

enum { RN_REL_NONE = -1, RN_REL_X = -2, RN_REL_NV = -3 };
/* NVML's levels, for building the tree. */
enum { RN_SMI_PIX = 1, RN_SMI_PXB, RN_SMI_PHB, RN_SMI_NODE, RN_SMI_SYS };

struct rn_smi {
  const char *name;
  char *err;
  size_t errlen;
  int ndev;
  char col[RN_SMI_MAX_DEV][64]; /* column names: GPU0, NIC3, or an old-style device name */
  char nicname[RN_SMI_MAX_DEV][64];
  int numa[RN_SMI_MAX_DEV];
  int gpu_numa[RN_SMI_MAX_DEV]; /* GPU NUMA ID, -1 N/A */
  int rowseen[RN_SMI_MAX_DEV];
  int rowline[RN_SMI_MAX_DEV];
  signed char rel[RN_SMI_MAX_DEV][RN_SMI_MAX_DEV];
  int has_cpu_aff, has_numa_aff, has_gpu_numa;
  int header_line;
};

static int rn_smi_is_gpu(const char *s) {
  if (strncmp(s, "GPU", 3) != 0 || !isdigit((unsigned char)s[3])) return 0;
  for (const char *p = s + 3; *p; p++)
    if (!isdigit((unsigned char)*p)) return 0;
  return 1;
}

static int rn_smi_rel(const char *cell) {
  static const struct {
    const char *s;
    int v;
  } rels[] = {
      {"X", RN_REL_X},       {"PIX", RN_SMI_PIX}, {"PXB", RN_SMI_PXB}, {"PHB", RN_SMI_PHB},
      {"NODE", RN_SMI_NODE}, {"SYS", RN_SMI_SYS}, {"SOC", RN_SMI_SYS} /* drivers before 2018 */};
  for (size_t i = 0; i < sizeof(rels) / sizeof(rels[0]); i++)
    if (strcmp(cell, rels[i].s) == 0) return rels[i].v;
  if (strncmp(cell, "NV", 2) == 0 && cell[2]) {
    for (const char *p = cell + 2; *p; p++)
      if (!isdigit((unsigned char)*p)) return RN_REL_NONE;
    return RN_REL_NV;
  }
  return RN_REL_NONE;
}

/* A row of `nvidia-smi topo -p2p` (or -p2p r/w/n/a), printed with the same
 * header as the topology matrix: its cells are X or a peer-to-peer status
 * (OK, CNS, GNS, TNS, NS, U), at least one of them a status. */
static int rn_smi_p2p_row(char **tok, int n) {
  static const char *const status[] = {"OK", "CNS", "GNS", "TNS", "NS", "U"};
  int seen = 0;
  for (int i = 1; i < n; i++) {
    int k = 0;
    while (k < (int)(sizeof(status) / sizeof(status[0])) && strcmp(tok[i], status[k]) != 0) k++;
    if (k == (int)(sizeof(status) / sizeof(status[0]))) {
      if (strcmp(tok[i], "X") != 0) return 0;
    } else {
      seen = 1;
    }
  }
  return seen;
}

/* Splits on spaces and tabs, and on the bars of a copy turned into a
 * markdown table ("| GPU0 | X | NV18 |"); empty cells vanish (see the top
 * comment). */
static int rn_smi_split(char *line, char **tok, int max) {
  int n = 0;
  for (char *p = strtok(line, " \t\r\v\f|"); p; p = strtok(NULL, " \t\r\v\f|")) {
    if (n == max) return -1;
    tok[n++] = p;
  }
  return n;
}

/* Drops terminal control sequences (ESC [ parameters final-byte) in place.
 * nvidia-smi underlines the matrix header with them ("\x1b[4m" ...
 * "\x1b[0m") whether or not its output is a terminal, so a file saved with
 * `nvidia-smi topo -m > FILE` has them. */
static void rn_smi_strip_csi(char *line) {
  char *w = line;
  for (const char *r = line; *r;) {
    if (r[0] == '\x1b' && r[1] == '[') {
      r += 2;
      while (*r && !(*r >= 0x40 && *r <= 0x7e)) r++;
      if (*r) r++;
      continue;
    }
    *w++ = *r++;
  }
  *w = '\0';
}

/* A CPU list or NUMA list cell ("0-55,112-167", "0,3-9", "N/A"); the
 * first number, -1 for N/A, -2 when malformed. */
static int rn_smi_first_num(const char *s) {
  if (strcmp(s, "N/A") == 0) return -1;
  if (!isdigit((unsigned char)s[0])) return -2;
  for (const char *p = s; *p; p++)
    if (!isdigit((unsigned char)*p) && *p != ',' && *p != '-') return -2;
  long v = strtol(s, NULL, 10);
  return v > 1 << 20 ? -2 : (int)v;
}

/* A table rule: "-----", "|---|---|", "+====+": drawn under the header of
 * a copy turned into a markdown or box table; no cells. */
static int rn_smi_is_rule(const char *line) {
  int dashes = 0;
  for (const char *p = line; *p; p++) {
    if (*p == '-' || *p == '=')
      dashes++;
    else if (!strchr(" \t\r\v\f|+:", *p))
      return 0;
  }
  return dashes >= 3;
}

static int rn_smi_fail(struct rn_smi *s, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int rn_smi_fail(struct rn_smi *s, int line, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  rn_topo_errf(s->err, s->errlen, "%s:%d: %s", s->name, line, msg);
  return -1;
}

/* A matrix header: GPU0 first, not followed by X (that is GPU0's row). */
static int rn_smi_is_header(char **tok, int n) {
  return n >= 1 && strcmp(tok[0], "GPU0") == 0 && (n == 1 || strcmp(tok[1], "X") != 0);
}

/* A GPU or NIC column name followed by another ("GPU7NIC0", "NIC8NIC9"). */
static int rn_smi_glued(const char *cell) {
  for (int k = 0; k < 2; k++) {
    const char *kind = k ? "NIC" : "GPU";
    if (strncmp(cell, kind, 3) != 0 || !isdigit((unsigned char)cell[3])) continue;
    const char *p = cell + 3;
    while (isdigit((unsigned char)*p)) p++;
    if (strncmp(p, "GPU", 3) == 0 || strncmp(p, "NIC", 3) == 0 || strncmp(p, "mlx5", 4) == 0)
      return 1;
  }
  return 0;
}

static int rn_smi_header(struct rn_smi *s, char **tok, int n, int lineno) {
  int i = 0;
  for (; i < n; i++) {
    /* The affinity columns start with these words. */
    if (strcmp(tok[i], "CPU") == 0 || strcmp(tok[i], "NUMA") == 0 ||
        strcmp(tok[i], "Affinity") == 0 || (strcmp(tok[i], "GPU") == 0))
      break;
    if (s->ndev == RN_SMI_MAX_DEV)
      return rn_smi_fail(s, lineno, "more than %d devices", RN_SMI_MAX_DEV);
    if (strlen(tok[i]) >= sizeof(s->col[0]))
      return rn_smi_fail(s, lineno, "column name \"%.20s...\" too long", tok[i]);
    for (int d = 0; d < s->ndev; d++)
      if (strcmp(s->col[d], tok[i]) == 0)
        return rn_smi_fail(s, lineno, "column %s appears twice in the header", tok[i]);
    /* "NIC8NIC9": a copy that lost the tab between two names. */
    if (rn_smi_glued(tok[i]))
      return rn_smi_fail(s, lineno,
                         "header cell \"%.40s\" holds two column names: were the tabs lost "
                         "when it was copied?",
                         tok[i]);
    snprintf(s->col[s->ndev], sizeof(s->col[0]), "%s", tok[i]);
    s->numa[s->ndev] = s->gpu_numa[s->ndev] = -1;
    s->ndev++;
  }
  /* Known by their first words: "CPU Affinity", "NUMA Affinity", "GPU NUMA
   * ID", or shortened by hand ("CPU", "NUMA", "GPU NUMA"). */
  for (; i < n; i++) {
    if (strcmp(tok[i], "CPU") == 0) s->has_cpu_aff = 1;
    if (strcmp(tok[i], "NUMA") == 0 && (i == 0 || strcmp(tok[i - 1], "GPU") != 0))
      s->has_numa_aff = 1;
    if (i + 1 < n && strcmp(tok[i], "GPU") == 0 && strcmp(tok[i + 1], "NUMA") == 0)
      s->has_gpu_numa = 1;
  }
  s->header_line = lineno;
  return 0;
}

/* One matrix row: tok[0] its name, tok[1..ndev] the relations, and aff[]
 * the cells after the matrix ("" for an empty cell of a tab-separated row). */
static int rn_smi_row(struct rn_smi *s, int row, char **tok, int n, char **aff, int naff,
                      int lineno) {
  if (s->rowseen[row])
    return rn_smi_fail(s, lineno, "second row for %s (first on line %d)", s->col[row],
                       s->rowline[row]);
  if (n - 1 < s->ndev)
    return rn_smi_fail(s, lineno, "row %s has %d cells, expected %d (one per column of line %d)",
                       tok[0], n - 1, s->ndev, s->header_line);
  for (int c = 0; c < s->ndev; c++) {
    int r = rn_smi_rel(tok[1 + c]);
    if (r == RN_REL_NONE)
      return rn_smi_fail(s, lineno,
                         "row %s, column %s: expected X, NV#, PIX, PXB, PHB, NODE or SYS, found "
                         "\"%.20s\"",
                         tok[0], s->col[c], tok[1 + c]);
    if ((r == RN_REL_X) != (c == row))
      return rn_smi_fail(s, lineno, "row %s, column %s: X belongs on the diagonal only", tok[0],
                         s->col[c]);
    s->rel[row][c] = (signed char)r;
  }
  /* After the matrix: CPU affinity, NUMA affinity, GPU NUMA ID, as the
   * header announced them. */
  int want = s->has_cpu_aff + s->has_numa_aff + s->has_gpu_numa;
  if (naff > want)
    return rn_smi_fail(s, lineno, "row %s has %d cells after the matrix, expected at most %d",
                       tok[0], naff, want);
  int kinds[3], nk = 0; /* 0 CPU affinity, 1 NUMA affinity, 2 GPU NUMA ID */
  if (s->has_cpu_aff) kinds[nk++] = 0;
  if (s->has_numa_aff) kinds[nk++] = 1;
  if (s->has_gpu_numa) kinds[nk++] = 2;
  for (int col = 0; col < naff; col++) {
    if (!aff[col][0]) continue;
    int v = rn_smi_first_num(aff[col]);
    if (v == -2)
      return rn_smi_fail(s, lineno, "row %s: \"%.20s\" is not a CPU or NUMA list (nor N/A)", tok[0],
                         aff[col]);
    if (kinds[col] == 1) s->numa[row] = v;
    if (kinds[col] == 2) s->gpu_numa[row] = v;
  }
  s->rowseen[row] = 1;
  s->rowline[row] = lineno;
  return 0;
}

/* The cells after the matrix of a tab-separated row, empty ones kept: a
 * process whose cpuset leaves out a GPU's cores gets an empty CPU Affinity
 * cell, and splitting on whitespace would shift NUMA Affinity and GPU NUMA
 * ID one column left.  A markdown table copied with its tabs ("| GPU0\t|
 * X\t| NV4\t|") has bars at the edges of the cells: they are no cells.
 * raw is the row (modified); the cells go to aff.  Returns their number,
 * or -1 when the row does not split into the matrix by tabs, or a bar
 * stands inside a cell (the caller then splits on whitespace and bars). */
static int rn_smi_tab_aff(const struct rn_smi *s, char *raw, char **aff) {
  char *cell[RN_SMI_MAX_TOK];
  int n = 0;
  for (char *p = raw;;) {
    char *tab = strchr(p, '\t');
    if (tab) *tab = '\0';
    while (*p && strchr(" \r\v\f|", *p)) p++;
    char *e = p + strlen(p);
    while (e > p && strchr(" \r\v\f|", e[-1])) *--e = '\0';
    if (strchr(p, '|')) return -1;
    /* Cells before the row name (a row indented by a tab) are not cells. */
    if (n || *p) {
      if (n == RN_SMI_MAX_TOK) return -1;
      cell[n++] = p;
    }
    if (!tab) break;
    p = tab + 1;
  }
  if (n < 1 + s->ndev) return -1;
  for (int c = 1; c <= s->ndev; c++)
    if (!cell[c][0]) return -1;
  int want = s->has_cpu_aff + s->has_numa_aff + s->has_gpu_numa, naff = n - 1 - s->ndev;
  char **a = cell + 1 + s->ndev;
  /* nvidia-smi pads the cell before GPU NUMA ID with a second tab. */
  if (s->has_gpu_numa && naff == want + 1 && !a[want - 1][0]) {
    a[want - 1] = a[want];
    naff--;
  }
  while (naff > want && !a[naff - 1][0]) naff--;
  for (int i = 0; i < naff; i++) aff[i] = a[i];
  return naff;
}

/* The matrix read so far told nothing: its rows hold X cells only (the
 * one-GPU matrix of `nvidia-smi topo -p2p r`, "GPU0 X", has no status cell
 * to tell it from a topology) and its header no affinity columns. */
static int rn_smi_told_nothing(const struct rn_smi *s) {
  int rows = 0;
  if (s->has_cpu_aff || s->has_numa_aff || s->has_gpu_numa) return 0;
  for (int d = 0; d < s->ndev; d++) {
    rows += s->rowseen[d];
    for (int c = 0; s->rowseen[d] && c < s->ndev; c++)
      if (s->rel[d][c] != RN_REL_X) return 0;
  }
  return rows > 0;
}

/* Forgets the matrix read so far. */
static void rn_smi_forget(struct rn_smi *s) {
  s->ndev = 0;
  s->has_cpu_aff = s->has_numa_aff = s->has_gpu_numa = 0;
  memset(s->rowseen, 0, sizeof(s->rowseen));
  memset(s->nicname, 0, sizeof(s->nicname));
  memset(s->rel, RN_REL_NONE, sizeof(s->rel));
}

static int rn_smi_parse(struct rn_smi *s, const char *buf, size_t len) {
  char *line = malloc(RN_SMI_LINE), *raw = malloc(RN_SMI_LINE), *tok[RN_SMI_MAX_TOK];
  char *aff[RN_SMI_MAX_TOK];
  int lineno = 0, in_matrix = 0, rc = -1;
  int next_header = 0; /* a header-like line after the matrix ended */
  if (!line || !raw) {
    free(line);
    free(raw);
    rn_topo_errf(s->err, s->errlen, "%s: out of memory", s->name);
    return -1;
  }
  for (size_t pos = 0; pos < len;) {
    const char *nl = memchr(buf + pos, '\n', len - pos);
    size_t ll = nl ? (size_t)(nl - (buf + pos)) : len - pos;
    lineno++;
    if (ll >= RN_SMI_LINE) {
      rn_smi_fail(s, lineno, "line longer than %d bytes", RN_SMI_LINE - 1);
      goto out_free;
    }
    memcpy(line, buf + pos, ll);
    line[ll] = '\0';
    pos += ll + 1;
    if (memchr(line, '\0', ll)) {
      rn_smi_fail(s, lineno, "NUL byte in text");
      goto out_free;
    }
    rn_smi_strip_csi(line);
    if (rn_smi_is_rule(line)) continue; /* neither ends the matrix nor is a row */
    int tabbed = strchr(line, '\t') != NULL;
    if (tabbed) memcpy(raw, line, strlen(line) + 1);
    int n = rn_smi_split(line, tok, RN_SMI_MAX_TOK);
    if (n < 0) {
      rn_smi_fail(s, lineno, "more than %d cells", RN_SMI_MAX_TOK);
      goto out_free;
    }
    if (!s->ndev) {
      if (rn_smi_is_header(tok, n)) {
        if (rn_smi_header(s, tok, n, lineno)) goto out_free;
        in_matrix = 1;
      }
      continue;
    }
    /* A header after a matrix that told nothing (see above): that was no
     * topology; read this one instead. */
    if (rn_smi_is_header(tok, n) && rn_smi_told_nothing(s)) {
      rn_smi_forget(s);
      if (rn_smi_header(s, tok, n, lineno)) goto out_free;
      in_matrix = 1;
      next_header = 0;
      continue;
    }
    int row = -1;
    for (int d = 0; n > 0 && d < s->ndev && row < 0; d++)
      if (strcmp(s->col[d], tok[0]) == 0) row = d;
    if (in_matrix && row >= 0 && rn_smi_p2p_row(tok, n)) {
      /* The header was a peer-to-peer matrix's: look on for the topology
       * (a status among the topology's rows is an error, below). */
      int seen = 0;
      for (int d = 0; d < s->ndev; d++) seen |= s->rowseen[d];
      if (!seen) {
        rn_smi_forget(s);
        in_matrix = 0;
        continue;
      }
    }
    /* After the matrix, another one's header and a row of relations: the
     * text holds two machines (a peer-to-peer matrix is no topology). */
    if (!in_matrix && rn_smi_is_header(tok, n)) {
      next_header = lineno;
      continue;
    }
    if (!in_matrix && next_header && n >= 2 && rn_smi_is_gpu(tok[0]) && !rn_smi_p2p_row(tok, n)) {
      int rels = 0;
      for (int i = 1; i < n; i++) rels += rn_smi_rel(tok[i]) != RN_REL_NONE;
      if (rels >= 2) {
        rn_smi_fail(s, lineno,
                    "a second nvidia-smi matrix (its header on line %d, the first's on line %d): "
                    "one machine per file",
                    next_header, s->header_line);
        goto out_free;
      }
    }
    if (in_matrix && row >= 0) {
      int naff = tabbed ? rn_smi_tab_aff(s, raw, aff) : -1;
      if (naff < 0) {
        static char empty[1];
        naff = n > 1 + s->ndev ? n - 1 - s->ndev : 0;
        /* A copy without tabs lost its empty cells.  nvidia-smi leaves
         * only CPU Affinity empty (a GPU whose cores the cpuset leaves
         * out; the others say N/A), so a GPU row one cell short lost
         * that one. */
        int want = s->has_cpu_aff + s->has_numa_aff + s->has_gpu_numa;
        int lost = s->has_cpu_aff && want >= 2 && naff == want - 1 && rn_smi_is_gpu(tok[0]);
        if (lost) aff[0] = empty;
        for (int i = 0; i < naff; i++) aff[lost + i] = tok[1 + s->ndev + i];
        naff += lost;
      }
      if (rn_smi_row(s, row, tok, n, aff, naff, lineno)) goto out_free;
      continue;
    }
    in_matrix = 0;
    /* "NIC3: mlx5_3" in the NIC legend. */
    if (n >= 2 && strncmp(tok[0], "NIC", 3) == 0 && tok[0][strlen(tok[0]) - 1] == ':') {
      tok[0][strlen(tok[0]) - 1] = '\0';
      for (int d = 0; d < s->ndev; d++)
        if (strcmp(s->col[d], tok[0]) == 0)
          snprintf(s->nicname[d], sizeof(s->nicname[0]), "%s", tok[1]);
    }
  }
  if (!s->ndev) {
    rn_smi_fail(s, lineno ? lineno : 1, "no nvidia-smi matrix header (a line starting with GPU0)");
    goto out_free;
  }
  for (int d = 0; d < s->ndev; d++)
    if (!s->rowseen[d]) {
      rn_smi_fail(s, s->header_line, "no row for column %s", s->col[d]);
      goto out_free;
    }
  for (int d = 0; d < s->ndev; d++) {
    for (int e = 0; e < s->ndev; e++)
      if (s->rel[d][e] != s->rel[e][d]) {
        rn_smi_fail(s, s->rowline[d], "%s-%s relation is not symmetric (line %d says otherwise)",
                    s->col[d], s->col[e], s->rowline[e]);
        goto out_free;
      }
  }
  rc = 0;
out_free:
  free(line);
  free(raw);
  return rc;
}

static int rn_uf_find(int *uf, int a) {
  while (uf[a] != a) a = uf[a] = uf[uf[a]];
  return a;
}

static void rn_uf_join(int *uf, int a, int b) {
  a = rn_uf_find(uf, a);
  b = rn_uf_find(uf, b);
  if (a != b) uf[b > a ? b : a] = a < b ? a : b;
}

/* Components of devices in set (1 = member) joined by rel <= lvl. */
static void rn_smi_components(const struct rn_smi *s, const int *set, int lvl, int *uf) {
  for (int i = 0; i < s->ndev; i++) uf[i] = i;
  for (int i = 0; i < s->ndev; i++)
    for (int j = i + 1; j < s->ndev; j++)
      if (set[i] && set[j] && s->rel[i][j] > 0 && s->rel[i][j] <= lvl) rn_uf_join(uf, i, j);
}

struct rn_smi_build {
  int uf[RN_SMI_MAX_DEV], cpu_of[RN_SMI_MAX_DEV], node_of[RN_SMI_MAX_DEV];
  int set[RN_SMI_MAX_DEV], top_uf[RN_SMI_MAX_DEV], pix_uf[RN_SMI_MAX_DEV];
  int tset[RN_SMI_MAX_DEV], isgpu[RN_SMI_MAX_DEV];
};

/* Places the devices of one CPU group under the CPU node cpu. */
static int rn_smi_place(struct rn_smi *s, struct rn_smi_build *b, struct rn_topo *t, int cpu) {
  rn_smi_components(s, b->set, RN_SMI_PXB, b->top_uf);
  for (int k = 0; k < s->ndev; k++) {
    if (!b->set[k] || rn_uf_find(b->top_uf, k) != k) continue;
    int members = 0, npix = 0;
    for (int i = 0; i < s->ndev; i++)
      members += b->tset[i] = b->set[i] && rn_uf_find(b->top_uf, i) == k;
    int parent = cpu;
    if (members > 1) {
      char label[16];
      snprintf(label, sizeof(label), "(%.10s)", s->col[k]);
      parent = rn_topo_add_node(t, cpu, RN_NODE_SWITCH, label, NULL);
      if (parent < 0) return -1;
    }
    rn_smi_components(s, b->tset, RN_SMI_PIX, b->pix_uf);
    for (int i = 0; i < s->ndev; i++) npix += b->tset[i] && rn_uf_find(b->pix_uf, i) == i;
    for (int p = 0; p < s->ndev; p++) {
      if (!b->tset[p] || rn_uf_find(b->pix_uf, p) != p) continue;
      int sub = parent;
      /* Several PIX groups under one switch are PXB to each other: each
       * needs its own sub-switch. */
      if (npix > 1) {
        char label[16];
        snprintf(label, sizeof(label), "(%.10s)", s->col[p]);
        sub = rn_topo_add_node(t, parent, RN_NODE_SWITCH, label, NULL);
        if (sub < 0) return -1;
      }
      for (int i = 0; i < s->ndev; i++) {
        if (!b->tset[i] || rn_uf_find(b->pix_uf, i) != p) continue;
        b->node_of[i] = rn_topo_add_node(t, sub, RN_NODE_DEV, "", NULL);
        if (b->node_of[i] < 0) return -1;
      }
    }
  }
  return 0;
}

static int rn_smi_build(struct rn_smi *s, struct rn_topo *t) {
  struct rn_smi_build *b = calloc(1, sizeof(*b));
  if (!b) goto out_oom;
  int host = rn_topo_host(t, "");
  int hn = rn_topo_host_node(t, host);
  if (host < 0 || hn < 0) goto out_oom;
  int ngpu = 0, nc2c = 0;
  for (int i = 0; i < s->ndev; i++) {
    /* Old matrices name NIC columns by device (mlx5_0) instead of NICn. */
    b->isgpu[i] = rn_smi_is_gpu(s->col[i]);
    ngpu += b->isgpu[i];
    nc2c += b->isgpu[i] && s->gpu_numa[i] >= 0;
  }
  /* CPU groups: anything closer than SYS (NVML's SYS crosses NUMA
   * nodes), and GPUs on one NUMA node. */
  for (int i = 0; i < s->ndev; i++) b->uf[i] = i;
  for (int i = 0; i < s->ndev; i++)
    for (int j = i + 1; j < s->ndev; j++)
      if ((s->rel[i][j] > 0 && s->rel[i][j] < RN_SMI_SYS) ||
          (b->isgpu[i] && b->isgpu[j] && s->numa[i] >= 0 && s->numa[i] == s->numa[j]))
        rn_uf_join(b->uf, i, j);
  int gpu_groups[RN_SMI_MAX_DEV], ngg = 0, nic_groups[RN_SMI_MAX_DEV], nng = 0;
  for (int i = 0; i < s->ndev; i++) {
    if (rn_uf_find(b->uf, i) != i) continue;
    int hasgpu = 0;
    for (int j = 0; j < s->ndev; j++) hasgpu |= b->isgpu[j] && rn_uf_find(b->uf, j) == i;
    if (hasgpu)
      gpu_groups[ngg++] = i;
    else
      nic_groups[nng++] = i;
  }
  /* C2C GPUs see SYS to every NIC: NIC-only groups go, in order and in
   * contiguous blocks of (nearly) equal count, to the CPUs of the GPU
   * groups, as a tray numbers its NICs Grace by Grace (a GB200 tray's
   * mlx5_0..3 on the first, mlx5_4..7 on the second, each NIC a group of
   * its own but for a BlueField's two functions). */
  int placed = 0;
  if (nc2c && nng && ngg) {
    for (int k = 0; k < nng; k++) {
      const int to = gpu_groups[k * ngg / nng];
      for (int j = 0; j < s->ndev; j++)
        if (rn_uf_find(b->uf, j) == nic_groups[k]) b->uf[j] = to;
      placed++;
    }
    rn_topo_add_note(t,
                     "nvidia-smi shows SYS between NVLink-C2C GPUs and every NIC: assumed the "
                     "NIC-NIC groups sit on the GPUs' CPUs in order (%d group(s) placed)",
                     placed);
    for (int j = 0; j < s->ndev; j++) (void)rn_uf_find(b->uf, j);
  }
  for (int i = 0; i < s->ndev; i++) b->cpu_of[i] = b->node_of[i] = -1;
  for (int c = 0; c < s->ndev; c++) {
    if (rn_uf_find(b->uf, c) != c) continue; /* one pass per CPU group */
    int numa = -1;
    for (int j = 0; j < s->ndev; j++) {
      b->set[j] = rn_uf_find(b->uf, j) == c;
      if (b->set[j] && b->isgpu[j] && s->numa[j] >= 0 && numa < 0) numa = s->numa[j];
    }
    int cpu = rn_topo_add_cpu(t, hn, numa);
    if (cpu < 0 || rn_smi_place(s, b, t, cpu)) goto out_oom;
  }
  for (int i = 0; i < s->ndev; i++) {
    if (b->isgpu[i]) {
      int g = rn_topo_add_gpu(t, b->node_of[i], 1);
      if (g < 0) goto out_oom;
      t->gpus[g].pub.c2c = s->gpu_numa[i] >= 0;
    } else {
      struct rn_topo_nic nic;
      memset(&nic, 0, sizeof(nic));
      snprintf(nic.name, sizeof(nic.name), "%s", s->nicname[i][0] ? s->nicname[i] : s->col[i]);
      snprintf(nic.device, sizeof(nic.device), "%s", nic.name);
      nic.port = 1;
      nic.rdma = 1;
      nic.gdr = 1;
      if (rn_topo_add_nic(t, b->node_of[i], &nic) < 0) goto out_oom;
    }
  }
  for (int i = 0; i < s->ndev; i++)
    for (int j = i + 1; j < s->ndev; j++)
      if (s->rel[i][j] == RN_REL_NV && b->isgpu[i] && b->isgpu[j] &&
          rn_topo_add_nvlink(t, b->node_of[i], NULL, b->node_of[j]) < 0)
        goto out_oom;
  if (nc2c) rn_topo_add_note(t, "%d GPU(s) with a GPU NUMA ID: NVLink-C2C to their CPU", nc2c);
  rn_topo_add_note(
      t, "nvidia-smi matrix: no bus ids or link speeds; PCIe tree rebuilt from the relations");
  free(b);
  return rn_topo_finalize(t, s->err, s->errlen);
out_oom:
  free(b);
  rn_topo_errf(s->err, s->errlen, "%s: out of memory", s->name);
  return -1;
}

int rn_topo_load_smi_buf(const char *buf, size_t len, const char *name, struct rn_topo **out,
                         char *err, size_t errlen) {
  *out = NULL;
  struct rn_smi *s = calloc(1, sizeof(*s));
  struct rn_topo *t = rn_topo_alloc("nvidia-smi");
  int rc = -1;
  if (!s || !t) {
    rn_topo_errf(err, errlen, "%s: out of memory", name);
    goto out_free;
  }
  s->name = name;
  s->err = err;
  s->errlen = errlen;
  memset(s->rel, RN_REL_NONE, sizeof(s->rel));
  if (rn_smi_parse(s, buf, len) || rn_smi_build(s, t)) goto out_free;
  *out = t;
  t = NULL;
  rc = 0;
out_free:
  rn_topo_free(t);
  free(s);
  return rc;
}

int rn_topo_load_smi(const char *path, struct rn_topo **out, char *err, size_t errlen) {
  char *buf;
  size_t len;
  *out = NULL;
  if (rn_topo_xml_read_file(path, &buf, &len, err, errlen)) return -1;
  int rc = rn_topo_load_smi_buf(buf, len, path, out, err, errlen);
  free(buf);
  return rc;
}
