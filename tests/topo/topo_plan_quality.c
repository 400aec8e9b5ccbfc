/* Plan quality in numbers: each plan's aggregate GPU->network bandwidth
 * against a naive "GPU i -> NIC i mod n" plan, and against the usable NIC
 * bandwidth.  The model: a NIC's line rate is split evenly among the GPUs
 * using it; how a GPU reaches it scales its share by NCCL's path type --
 * PIX, PXB and P2C (GPUDirect at NCCL's default level) keep the full rate,
 * PHB (through the CPU's root complex, no GPUDirect at the default level,
 * so data bounces through host memory) keeps 3/4, SYS (across NUMA nodes)
 * keeps 1/2.  Usable = the line rate of every NIC not farther than every
 * GPU's nearest NIC (storage NICs on root ports do not count) and of the
 * fastest NIC's kind: same link layer, at least half its speed (a 200 Gb/s
 * Ethernet NIC next to 400 Gb/s InfiniBand rails is no rail: NCCL would
 * not fuse them).  Files
 * without speeds get the rate of the machine's NICs (in the table below).
 * Prints a markdown table and how many machines were evaluated; exits 1
 * if a machine marked "must reach 100%" does not, or when vendor files
 * are missing and RAILNET_TOPOLOGIES_REQUIRED=1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "railnet/topo.h"

struct machine {
  const char *name;
  const char *files[2];
  int shared;       /* files are under the shared topologies dir */
  int assumed_mbps; /* NIC rate when the file has none */
  int must_be_full;
};

static const char *shared_dir(void) {
  const char *d = getenv("RAILNET_TOPOLOGIES_DIR");
  return (d && *d) ? d : "../shared/topologies";
}

static double nic_rate(const struct rn_topo *t, int n, int assumed) {
  int s = rn_topo_nic(t, n)->speed_mbps;
  return (s > 0 ? s : assumed) / 8000.0; /* GB/s */
}

/* The share of a NIC's rate a GPU keeps, by how it reaches the NIC. */
static double path_factor(enum rn_path p) {
  if (p <= RN_PATH_P2C) return 1.0;
  if (p == RN_PATH_PXN) return 1.0; /* NVLink to a GPU close to the NIC */
  if (p == RN_PATH_PHB) return 0.75;
  return 0.5;
}

/* Bandwidth of an assignment: rails[g] lists NICs (count nr[g]); the
 * slowest GPU's share goes to *slowest. */
static double assign_bw(const struct rn_topo *t, int ng, int (*rails)[RN_PLAN_MAX_RAILS],
                        const int *nr, const int *gpu_idx, int assumed, double *slowest) {
  int nn = rn_topo_nnics(t);
  int *users = calloc((size_t)nn + 1, sizeof(int));
  double bw = 0;
  *slowest = -1;
  for (int g = 0; g < ng; g++)
    for (int r = 0; r < nr[g]; r++) users[rails[g][r]]++;
  for (int g = 0; g < ng; g++) {
    double mine = 0;
    for (int r = 0; r < nr[g]; r++) {
      int n = rails[g][r];
      mine +=
          nic_rate(t, n, assumed) / users[n] * path_factor(rn_topo_path(t, gpu_idx[g], n, NULL, 0));
    }
    bw += mine;
    if (*slowest < 0 || mine < *slowest) *slowest = mine;
  }
  if (*slowest < 0) *slowest = 0;
  free(users);
  return bw;
}

/* 0 evaluated and fine, 1 evaluated and below target, 2 not evaluated. */
static int run(const struct machine *m) {
  char paths[2][1024], err[512];
  const char *files[2];
  int nf = 0;
  for (int i = 0; i < 2 && m->files[i]; i++) {
    if (m->shared && strncmp(m->files[i], "tests/", 6) != 0)
      snprintf(paths[i], sizeof(paths[i]), "%s/%s", shared_dir(), m->files[i]);
    else
      snprintf(paths[i], sizeof(paths[i]), "%s", m->files[i]);
    files[nf++] = paths[i];
  }
  struct rn_topo *t;
  if (rn_topo_load_files(files, nf, &t, err, sizeof(err))) {
    printf("| %s | - | - | - | - | - | - | (%s) |\n", m->name,
           m->shared ? "shared file absent" : err);
    return m->shared ? 2 : 1;
  }
  struct rn_plan *p;
  if (rn_plan_build(t, NULL, &p, err, sizeof(err))) {
    rn_topo_free(t);
    return 1;
  }
  int ng = p->ngpus, nn = rn_topo_nnics(t);
  int(*rails)[RN_PLAN_MAX_RAILS] = calloc((size_t)ng + 1, sizeof(*rails));
  int *nr = calloc((size_t)ng + 1, sizeof(int)), *gi = calloc((size_t)ng + 1, sizeof(int));
  for (int g = 0; g < ng; g++) {
    gi[g] = p->gpus[g].gpu;
    nr[g] = p->gpus[g].nrails;
    for (int r = 0; r < nr[g]; r++) rails[g][r] = p->gpus[g].rails[r].nic;
  }
  double slow_plan, slow_naive;
  double planned = assign_bw(t, ng, rails, nr, gi, m->assumed_mbps, &slow_plan);
  for (int g = 0; g < ng; g++) {
    nr[g] = nn ? 1 : 0;
    rails[g][0] = nn ? g % nn : 0;
  }
  double naive = assign_bw(t, ng, rails, nr, gi, m->assumed_mbps, &slow_naive);
  /* Usable: NICs no farther than the worst GPU's nearest NIC. */
  int worst = RN_PATH_LOC;
  for (int g = 0; g < rn_topo_ngpus(t); g++) {
    int best = RN_PATH_DIS;
    for (int n = 0; n < nn; n++) {
      int pth = rn_topo_pci_path(t, g, n);
      if (pth < best) best = pth;
    }
    if (best > worst) worst = best;
  }
  int fastest = -1;
  for (int n = 0; n < nn; n++)
    if (fastest < 0 || nic_rate(t, n, m->assumed_mbps) > nic_rate(t, fastest, m->assumed_mbps))
      fastest = n;
  double usable = 0;
  for (int n = 0; n < nn; n++) {
    const struct rn_topo_nic *a = rn_topo_nic(t, n), *f = rn_topo_nic(t, fastest);
    if (a->link && f->link && a->link != f->link) continue;
    if (2 * nic_rate(t, n, m->assumed_mbps) < nic_rate(t, fastest, m->assumed_mbps)) continue;
    int best = RN_PATH_DIS;
    for (int g = 0; g < rn_topo_ngpus(t); g++) {
      int pth = rn_topo_pci_path(t, g, n);
      if (pth < best) best = pth;
    }
    if (best <= worst) usable += nic_rate(t, n, m->assumed_mbps);
  }
  double pct = usable > 0 ? 100.0 * planned / usable : 0;
  printf("| %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %.0f%% |\n", m->name, ng, nn, planned, naive,
         slow_plan, slow_naive, pct);
  int bad = m->must_be_full && (pct < 99.95 || pct > 100.05);
  free(rails);
  free(nr);
  free(gi);
  rn_plan_free(p);
  rn_topo_free(t);
  return bad;
}

int main(void) {
  static const struct machine machines[] = {
      {"AWS p4d.24xlarge", {"aws-p4d.24xlarge-nccl-topo.xml"}, 1, 100000, 1},
      {"AWS p5.48xlarge (+GPU overlay)",
       {"aws-p5.48xlarge-nccl-topo.xml", "tests/topo/shared/p5-gpus-overlay.xml"},
       1,
       100000,
       1},
      {"Azure NDv4", {"azure-ndv4-nccl-topo.xml"}, 1, 200000, 1},
      {"Azure NDv5", {"azure-ndv5-nccl-topo.xml"}, 1, 400000, 1},
      {"OCI BM.GPU.H100.8", {"oci-bm.gpu.h100.8-nccl-topo.xml"}, 1, 0, 1},
      {"OCI B300", {"oci-bm.gpu.b300.8-nccl-topo.xml"}, 1, 0, 1},
      {"OCI GB300 (2 trays)", {"oci-gb300-nvl72-2trays-nccl-topo.xml"}, 1, 0, 1},
      {"B200-like (fixture)", {"tests/topo/fixtures/b200-like.xml"}, 0, 0, 1},
      {"DGX-H100-like (fixture)", {"tests/topo/fixtures/dgx-h100-like.xml"}, 0, 0, 1},
      {"HGX-A100-like (fixture)", {"tests/topo/fixtures/hgx-a100-like.xml"}, 0, 0, 1},
      {"GB200-like (fixture)", {"tests/topo/fixtures/gb200-like.xml"}, 0, 0, 1},
      {"p5-like (fixture)", {"tests/topo/fixtures/p5-like.xml"}, 0, 0, 1},
      {"Azure NDv2 (1 NIC)", {"azure-ndv2-nccl-topo.xml"}, 1, 100000, 0},
      {"Mixed 400/100/10 Gb/s (fixture)", {"tests/topo/fixtures/mixed-speed.xml"}, 0, 0, 0},
  };
  int n = (int)(sizeof(machines) / sizeof(machines[0]));
  int bad = 0, evaluated = 0, full = 0, absent = 0;
  printf(
      "| machine | GPUs | NICs | planned GB/s | naive GB/s | slowest GPU, planned | slowest GPU, "
      "naive | planned / usable |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < n; i++) {
    int rc = run(&machines[i]);
    if (rc == 2) {
      absent++;
      continue;
    }
    evaluated++;
    full += machines[i].must_be_full;
    bad |= rc;
  }
  /* The summary plan_quality.sh reports: never a claim about machines
   * that were not evaluated. */
  printf("evaluated %d of %d machines (%d full-rail); %d shared file(s) absent\n", evaluated, n,
         full, absent);
  const char *req = getenv("RAILNET_TOPOLOGIES_REQUIRED");
  if (absent && req && strcmp(req, "1") == 0) {
    printf("shared topologies missing from %s and RAILNET_TOPOLOGIES_REQUIRED=1\n", shared_dir());
    bad = 1;
  }
  return bad;
}
