/* Format detection: one entry point for files, dispatching to the loader
 * for hwloc XML, NCCL topology XML or `nvidia-smi topo -m` text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "xml.h"

enum rn_fmt { RN_FMT_UNKNOWN, RN_FMT_HWLOC, RN_FMT_NCCL, RN_FMT_SMI };

/* 1 when some line of head starts (after blanks, or the bar of a markdown
 * table) with the token GPU0: the header of an nvidia-smi matrix, in tabs
 * or spaces, wherever the pasted text begins. */
static int rn_detect_smi(const char *head) {
  for (const char *l = head; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    const char *p = l;
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '|') p++;
    if (strncmp(p, "GPU0", 4) == 0 && (p[4] == ' ' || p[4] == '\t' || p[4] == '\r' ||
                                       p[4] == '\n' || p[4] == '\0' || p[4] == '|'))
      return 1;
  }
  return 0;
}

static enum rn_fmt rn_detect(const char *path, char *err, size_t errlen) {
  char head[16384], root[64];
  FILE *f = fopen(path, "rb");
  if (!f) {
    rn_topo_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return RN_FMT_UNKNOWN;
  }
  size_t n = fread(head, 1, sizeof(head) - 1, f);
  fclose(f);
  head[n] = '\0';
  rn_topo_xml_root_name(head, n, root, sizeof(root));
  if (strcmp(root, "topology") == 0 || strcmp(root, "root") == 0) return RN_FMT_HWLOC;
  if (strcmp(root, "system") == 0) return RN_FMT_NCCL;
  if (!root[0] && n && memchr(head, '\0', n) == NULL && rn_detect_smi(head)) return RN_FMT_SMI;
  if (!root[0] && n == sizeof(head) - 1 && head[0] != '<' && !strstr(head, "<?xml") &&
      memchr(head, '\0', n) == NULL) {
    /* A saved report or log with the matrix further down. */
    char *buf;
    size_t len;
    if (rn_topo_xml_read_file(path, &buf, &len, err, errlen)) return RN_FMT_UNKNOWN;
    int smi = memchr(buf, '\0', len) == NULL && rn_detect_smi(buf);
    free(buf);
    if (smi) return RN_FMT_SMI;
  }
  if (n == 0)
    rn_topo_errf(err, errlen, "%s:1: empty file", path);
  else if (root[0])
    rn_topo_errf(err, errlen, "%s:1: unknown topology format (XML root <%s>)", path, root);
  else if (head[0] == '<' || strstr(head, "<?xml"))
    return RN_FMT_NCCL; /* malformed XML: let the XML reader say where */
  else
    rn_topo_errf(err, errlen,
                 "%s:1: unknown topology format (not hwloc XML, NCCL XML or nvidia-smi text)",
                 path);
  return RN_FMT_UNKNOWN;
}

int rn_topo_load_file(const char *path, struct rn_topo **out, char *err, size_t errlen) {
  *out = NULL;
  if (!path) {
    rn_topo_errf(err, errlen, "no file name");
    return -1;
  }
  switch (rn_detect(path, err, errlen)) {
    case RN_FMT_HWLOC:
      return rn_topo_load_hwloc_xml(path, out, err, errlen);
    case RN_FMT_NCCL:
      return rn_topo_load_ncclxml(&path, 1, out, err, errlen);
    case RN_FMT_SMI:
      return rn_topo_load_smi(path, out, err, errlen);
    case RN_FMT_UNKNOWN:
    default:
      return -1;
  }
}

int rn_topo_load_files(const char *const *paths, int npaths, struct rn_topo **out, char *err,
                       size_t errlen) {
  *out = NULL;
  if (!paths || npaths < 1) {
    rn_topo_errf(err, errlen, "no file name");
    return -1;
  }
  if (npaths == 1) return rn_topo_load_file(paths[0], out, err, errlen);
  for (int i = 0; i < npaths; i++) {
    enum rn_fmt f = rn_detect(paths[i], err, errlen);
    if (f == RN_FMT_UNKNOWN) return -1;
    if (f != RN_FMT_NCCL) {
      rn_topo_errf(err, errlen, "%s: only NCCL topology XML files can be merged", paths[i]);
      return -1;
    }
  }
  return rn_topo_load_ncclxml(paths, npaths, out, err, errlen);
}
