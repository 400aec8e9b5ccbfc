/* The one sysfs reader (see topo/sysfs.h).  Paths are joined under a root
 * so a captured tree can stand in for /sys. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model.h"
#include "sysfs.h"
#include "railnet/sysfs.h"

const char *rn_topo_sysfs_root(void) {
  const char *r = getenv("RAILNET_FSROOT");
  return (r && *r) ? r : "/";
}

int rn_topo_sysfs_join(const char *root, const char *rel, char *out, size_t len) {
  size_t rl = strlen(root);
  while (rl > 0 && root[rl - 1] == '/') rl--; /* "/" joins as "/rel", not "//rel" */
  while (*rel == '/') rel++;
  int w = snprintf(out, len, "%.*s/%s", (int)rl, root, rel);
  return (w < 0 || (size_t)w >= len) ? -1 : 0;
}

int rn_topo_sysfs_read(const char *root, const char *rel, char *buf, size_t len) {
  char path[1024];
  if (len == 0 || rn_topo_sysfs_join(root, rel, path, sizeof(path))) return -1;
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  char *ok = fgets(buf, (int)len, f);
  fclose(f);
  if (!ok) return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

int rn_topo_sysfs_exists(const char *root, const char *rel) {
  char path[1024];
  struct stat st;
  if (rn_topo_sysfs_join(root, rel, path, sizeof(path))) return 0;
  return stat(path, &st) == 0;
}

/* "100 Gb/sec (4X EDR)" -> 100000 Mb/s; "2.5 Gb/sec (1X SDR)" -> 2500. */
static int rn_rate_mbps(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || v <= 0 || v > 1e6) return 0;
  return (int)(v * 1000.0 + 0.5);
}

void rn_topo_sysfs_enrich_nics(struct rn_topo *t, const char *root) {
  char rel[256], buf[128];
  for (int i = 0; i < t->nnics; i++) {
    struct rn_topo_nic *n = &t->nics[i].pub;
    if (n->rdma) {
      const char *d = n->device[0] ? n->device : n->name;
      int p = n->port > 0 ? n->port : 1;
      snprintf(rel, sizeof(rel), "sys/class/infiniband/%s/ports/%d/state", d, p);
      if (rn_topo_sysfs_read(root, rel, buf, sizeof(buf)) == 0)
        n->port_state = atoi(buf); /* "4: ACTIVE" */
      snprintf(rel, sizeof(rel), "sys/class/infiniband/%s/ports/%d/rate", d, p);
      if (rn_topo_sysfs_read(root, rel, buf, sizeof(buf)) == 0) n->speed_mbps = rn_rate_mbps(buf);
      snprintf(rel, sizeof(rel), "sys/class/infiniband/%s/ports/%d/link_layer", d, p);
      if (rn_topo_sysfs_read(root, rel, buf, sizeof(buf)) == 0)
        n->link = strcmp(buf, "InfiniBand") == 0 ? RN_TOPO_LINK_IB
                  : strcmp(buf, "Ethernet") == 0 ? RN_TOPO_LINK_ETH
                                                 : RN_TOPO_LINK_UNKNOWN;
      snprintf(rel, sizeof(rel), "sys/class/infiniband/%s/node_guid", d);
      if (rn_topo_sysfs_read(root, rel, buf, sizeof(buf)) == 0) {
        uint64_t g = 0;
        for (const char *c = buf; *c; c++) {
          int h = (*c >= '0' && *c <= '9')   ? *c - '0'
                  : (*c >= 'a' && *c <= 'f') ? *c - 'a' + 10
                                             : -1;
          if (h >= 0) g = g << 4 | (uint64_t)h;
        }
        n->guid = g;
      }
    } else if (n->netdev[0]) {
      snprintf(rel, sizeof(rel), "sys/class/net/%s/speed", n->netdev);
      if (rn_topo_sysfs_read(root, rel, buf, sizeof(buf)) == 0 && atoi(buf) > 0)
        n->speed_mbps = atoi(buf);
      n->link = RN_TOPO_LINK_ETH;
    }
  }
}

/* Where a loaded GPUDirect RDMA module shows (under the root), and its
 * name. */
static const struct {
  const char *path, *module;
} rn_topo_peermem[] = {
    {"/sys/module/nvidia_peermem", "nvidia_peermem"},
    {"/sys/module/nv_peer_mem", "nv_peer_mem"},
    {"/sys/kernel/mm/memory_peers/nv_mem", "nv_peer_mem"},
    {"/sys/kernel/mm/memory_peers/nv_mem_nc", "nv_peer_mem"},
};

/* The index of the first module found under root, or -1. */
static int rn_topo_sysfs_peermem(const char *root) {
  for (size_t i = 0; i < sizeof(rn_topo_peermem) / sizeof(rn_topo_peermem[0]); i++)
    if (rn_topo_sysfs_exists(root, rn_topo_peermem[i].path)) return (int)i;
  return -1;
}

int rn_topo_sysfs_gdr_probe(const char *root, char *why, size_t len) {
  int i = rn_topo_sysfs_peermem(root);
  if (i >= 0) {
    snprintf(why, len, "%s loaded", rn_topo_peermem[i].module);
    return 1;
  }
  /* dma-buf GDR needs a CUDA driver query; the plugin probes it. */
  if (rn_topo_sysfs_exists(root, "sys/module/nvidia"))
    snprintf(why, len, "no peermem module; dma-buf not probed here (the plugin checks it)");
  else
    snprintf(why, len, "NVIDIA driver not loaded");
  return 0;
}

/* ---- the public helpers (include/railnet/sysfs.h), rooted the same way ---- */

int rn_sysfs_read(const char *path, char *buf, size_t len) {
  return rn_topo_sysfs_read(rn_topo_sysfs_root(), path, buf, len);
}

int rn_sysfs_peermem(const char **path) {
  int i = rn_topo_sysfs_peermem(rn_topo_sysfs_root());
  if (i < 0) return 0;
  *path = rn_topo_peermem[i].path;
  return 1;
}

int rn_sysfs_realpath(const char *path, char *buf, size_t len) {
  char full[1024], res[PATH_MAX];
  const char *root = rn_topo_sysfs_root();
  if (rn_topo_sysfs_join(root, path, full, sizeof(full)) || realpath(full, res) == NULL) return -1;
  size_t rl = strlen(root);
  while (rl > 0 && root[rl - 1] == '/') rl--;
  const char *rel = (rl > 0 && strncmp(res, root, rl) == 0) ? res + rl : res;
  return (size_t)snprintf(buf, len, "%s", rel) >= len ? -1 : 0;
}

/* "0000:18:00.0": 4 hex, ':', 2 hex, ':', 2 hex, '.', 1 digit. */
static int rn_sysfs_is_bdf(const char *s) {
  static const char pat[] = "xxxx:xx:xx.x";
  if (strlen(s) != sizeof(pat) - 1) return 0;
  for (size_t i = 0; i < sizeof(pat) - 1; i++)
    if (pat[i] == 'x' ? !isxdigit((unsigned char)s[i]) : s[i] != pat[i]) return 0;
  return 1;
}

int rn_sysfs_pci_parent(const char *devpath, char *pci_path, size_t len, char *busid,
                        size_t busidlen) {
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s", devpath);
  for (;;) {
    char *slash = strrchr(p, '/');
    if (slash == NULL) return -1;
    if (rn_sysfs_is_bdf(slash + 1)) {
      if ((size_t)snprintf(pci_path, len, "%s", p) >= len) return -1;
      snprintf(busid, busidlen, "%s", slash + 1);
      for (char *c = busid; *c; c++) *c = (char)tolower((unsigned char)*c);
      return 0;
    }
    if (slash == p) return -1;
    *slash = '\0';
  }
}
