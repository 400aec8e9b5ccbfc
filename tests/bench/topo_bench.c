/* Planner speed: a generated 72-GPU, 144-NIC machine (4 CPUs x 18 switches
 * x (1 GPU + 2 NICs)) planned many times, and the largest shared hwloc XML
 * loaded.  Targets: plan < 10 ms, hwloc XML load < 100 ms.  A benchmark,
 * not a test: prints numbers, exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "railnet/topo.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int write_big(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "<system version=\"1\">\n");
  int sw = 0, nic = 0;
  for (int c = 0; c < 4; c++) {
    fprintf(f, "<cpu numaid=\"%d\">\n", c);
    for (int s = 0; s < 18; s++, sw++) {
      int dom = sw + 1;
      fprintf(f, "<pci busid=\"%04x:00:00.0\" class=\"0x060400\">\n", dom);
      fprintf(f, "<pci busid=\"%04x:01:00.0\" class=\"0x030200\"><gpu gdr=\"1\"/></pci>\n", dom);
      for (int k = 0; k < 2; k++, nic++)
        fprintf(f,
                "<pci busid=\"%04x:%02x:00.0\" class=\"0x020700\"><nic><net name=\"mlx5_%d\" "
                "speed=\"400000\"/></nic></pci>\n",
                dom, 2 + k, nic);
      fprintf(f, "</pci>\n");
    }
    fprintf(f, "</cpu>\n");
  }
  fprintf(f, "</system>\n");
  return fclose(f);
}

int main(void) {
  char path[] = "/tmp/rn-topo-bench-XXXXXX", err[512];
  int fd = mkstemp(path);
  if (fd < 0 || close(fd) || write_big(path)) {
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  struct rn_topo *t;
  double t0 = now_ms();
  if (rn_topo_load_file(path, &t, err, sizeof(err))) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  double load_ms = now_ms() - t0;
  unlink(path);
  int iters = 200;
  struct rn_plan *p = NULL;
  t0 = now_ms();
  for (int i = 0; i < iters; i++) {
    if (p) rn_plan_free(p);
    if (rn_plan_build(t, NULL, &p, err, sizeof(err))) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
  }
  double plan_ms = (now_ms() - t0) / iters;
  printf(
      "generated machine: %d GPUs, %d NICs, %d vdevs; NCCL XML load %.2f ms; plan %.3f ms (target "
      "< 10 ms)\n",
      rn_topo_ngpus(t), rn_topo_nnics(t), p->nvdevs, load_ms, plan_ms);
  rn_plan_free(p);
  rn_topo_free(t);

  const char *d = getenv("RAILNET_TOPOLOGIES_DIR");
  char hw[1024];
  snprintf(hw, sizeof(hw), "%s/meluxina-gpu-mel2001-4xA100-2xHDR-hwloc.xml",
           (d && *d) ? d : "../shared/topologies");
  if (access(hw, R_OK) != 0) {
    printf("largest shared hwloc XML: absent (skipped)\n");
    return 0;
  }
  iters = 20;
  t0 = now_ms();
  for (int i = 0; i < iters; i++) {
    if (rn_topo_load_file(hw, &t, err, sizeof(err))) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    rn_topo_free(t);
  }
  printf("largest shared hwloc XML (meluxina, 168 KB): load %.2f ms (target < 100 ms)\n",
         (now_ms() - t0) / iters);
  return 0;
}
