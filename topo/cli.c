/* railnet-topo: show the machine model and the rail plan.  Uses only the
 * public header include/railnet/topo.h.
 *
 *   railnet-topo [--topo FILE]... [--gpus LIST] [--nics FILTER]
 *                [--gdr-level PIX|PXB|PHB|NODE|SYS] [--json] [--version]
 *
 * Exit codes: 0 ok, 2 the topology could not be loaded or bad options. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "railnet/topo.h"
#include "railnet/version.h"

#define RN_CLI_MAX_FILES 16

static void rn_cli_usage(FILE *f) {
  fprintf(f,
          "usage: railnet-topo [--topo FILE]... [--gpus LIST] [--nics FILTER]\n"
          "                    [--gdr-level PIX|PXB|PHB|NODE|SYS] [--json] [--version]\n"
          "  --topo FILE    hwloc XML, NCCL topology XML or `nvidia-smi topo -m` text\n"
          "                 (default: this machine); several NCCL XML files merge\n"
          "  --gpus LIST    GPU indices, ranges or bus ids (default: CUDA_VISIBLE_DEVICES)\n"
          "  --nics FILTER  NCCL_IB_HCA syntax: mlx5_0,mlx5_1  ^mlx5_2  =mlx5_1  mlx5_0:1\n"
          "                 (default: NCCL_IB_HCA)\n"
          "  --gdr-level L  GPUDirect RDMA when the path is at most L (default PXB)\n"
          "  --json         one JSON document instead of tables\n"
          "  --version      print the version and exit\n");
}

static void rn_json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

static const char *rn_link_name(int link) {
  return link == 1 ? "IB" : link == 2 ? "Ethernet" : "unknown";
}

static void rn_print_json(const struct rn_topo *t, const struct rn_plan *p) {
  printf("{\"source\":");
  rn_json_str(rn_topo_source(t));
  printf(",\"gpus\":[");
  for (int i = 0; i < p->ngpus; i++) {
    const struct rn_plan_gpu *pg = &p->gpus[i];
    const struct rn_topo_gpu *g = rn_topo_gpu(t, pg->gpu);
    printf("%s{\"index\":%d,\"busid\":", i ? "," : "", pg->gpu);
    rn_json_str(g->busid);
    printf(",\"numa\":%d,\"cpu\":%d,\"gdr\":%s,\"nics\":[", g->numa, g->cpu,
           g->gdr ? "true" : "false");
    for (int r = 0; r < pg->nrails; r++) {
      const struct rn_plan_rail *rl = &pg->rails[r];
      const struct rn_topo_nic *n = rn_topo_nic(t, rl->nic);
      printf("%s{\"name\":", r ? "," : "");
      rn_json_str(n->name);
      printf(",\"busid\":");
      rn_json_str(n->busid);
      printf(",\"path\":\"%s\",\"gdr\":%s,\"reason\":", rn_path_name(rl->path),
             rl->gdr ? "true" : "false");
      rn_json_str(rl->reason);
      putchar('}');
    }
    printf("]}");
  }
  printf("],\"nics\":[");
  for (int i = 0; i < rn_topo_nnics(t); i++) {
    const struct rn_topo_nic *n = rn_topo_nic(t, i);
    printf("%s{\"name\":", i ? "," : "");
    rn_json_str(n->name);
    printf(",\"netdev\":");
    rn_json_str(n->netdev);
    printf(",\"busid\":");
    rn_json_str(n->busid);
    printf(
        ",\"port\":%d,\"speed_mbps\":%d,\"link\":\"%s\",\"numa\":%d,\"cpu\":%d,\"gdr\":%s,\"rdma\":"
        "%s}",
        n->port, n->speed_mbps, rn_link_name(n->link), n->numa, n->cpu, n->gdr ? "true" : "false",
        n->rdma ? "true" : "false");
  }
  printf("],\"vdevices\":[");
  for (int i = 0; i < p->nvdevs; i++) {
    const struct rn_plan_vdev *d = &p->vdevs[i];
    printf("%s{\"name\":", i ? "," : "");
    rn_json_str(d->name);
    printf(",\"nics\":[");
    for (int k = 0; k < d->nnics; k++) {
      if (k) putchar(',');
      rn_json_str(rn_topo_nic(t, d->nics[k])->name);
    }
    printf("],\"speed_mbps\":%d,\"gdr\":%s}", d->speed_mbps, d->gdr ? "true" : "false");
  }
  printf("],\"unused_nics\":[");
  for (int i = 0; i < p->nunused; i++) {
    if (i) putchar(',');
    rn_json_str(rn_topo_nic(t, p->unused[i])->name);
  }
  printf("],\"notes\":[");
  for (int i = 0; i < p->nnotes; i++) {
    if (i) putchar(',');
    rn_json_str(p->notes[i]);
  }
  printf("]}\n");
}

static void rn_print_table(const struct rn_topo *t, const struct rn_plan *p,
                           enum rn_path gdr_level) {
  int ng = rn_topo_ngpus(t), nn = rn_topo_nnics(t);
  printf("Topology: %s, %d GPU(s), %d NIC(s), %d CPU node(s)\n\n", rn_topo_source(t), ng, nn,
         rn_topo_ncpus(t));
  if (ng && nn) {
    /* The nvidia-smi topo -m layout: GPUs down, NICs across. */
    printf("      ");
    for (int n = 0; n < nn; n++) printf("\tNIC%d", n);
    printf("\tCPU\tNUMA\n");
    for (int g = 0; g < ng; g++) {
      const struct rn_topo_gpu *gp = rn_topo_gpu(t, g);
      printf("GPU%d  ", g);
      for (int n = 0; n < nn; n++) printf("\t%s", rn_path_name(rn_topo_path(t, g, n, NULL, 0)));
      printf("\t%d\t%d\n", gp->cpu, gp->numa);
    }
    printf("\n");
  }
  for (int g = 0; g < ng; g++) {
    const struct rn_topo_gpu *gp = rn_topo_gpu(t, g);
    printf("  GPU%d: %s  CPU %d  NUMA %d  GDR %s\n", g, gp->busid, gp->cpu, gp->numa,
           gp->gdr ? "allowed" : "no");
  }
  for (int n = 0; n < nn; n++) {
    const struct rn_topo_nic *np = rn_topo_nic(t, n);
    printf("  NIC%d: %s%s%s%s  %s  port %d  %d Mb/s  %s  CPU %d  NUMA %d%s\n", n, np->name,
           np->netdev[0] ? " (" : "", np->netdev, np->netdev[0] ? ")" : "",
           np->busid[0] ? np->busid : "no-PCI", np->port, np->speed_mbps, rn_link_name(np->link),
           np->cpu, np->numa, np->rdma ? "" : "  netdev only");
  }
  printf("\nPlan (GDR level %s):\n", rn_path_name(gdr_level));
  for (int i = 0; i < p->ngpus; i++) {
    const struct rn_plan_gpu *pg = &p->gpus[i];
    printf("  GPU%d %s:", pg->gpu, rn_topo_gpu(t, pg->gpu)->busid);
    if (!pg->nrails) printf(" no NIC");
    for (int r = 0; r < pg->nrails; r++) printf(" %s", rn_topo_nic(t, pg->rails[r].nic)->name);
    printf("\n");
    for (int r = 0; r < pg->nrails; r++) printf("    %s\n", pg->rails[r].reason);
  }
  printf("\nVirtual devices:\n");
  for (int i = 0; i < p->nvdevs; i++) {
    const struct rn_plan_vdev *d = &p->vdevs[i];
    printf("  %d: %s  %d NIC(s)  %d Mb/s  GDR %s\n", i, d->name, d->nnics, d->speed_mbps,
           d->gdr ? "yes" : "no");
  }
  if (!p->nvdevs) printf("  none\n");
  printf("\nUnused NICs:");
  for (int i = 0; i < p->nunused; i++) printf(" %s", rn_topo_nic(t, p->unused[i])->name);
  printf(p->nunused ? "\n" : " none\n");
  if (p->nnotes) {
    printf("\nNotes:\n");
    for (int i = 0; i < p->nnotes; i++) printf("  - %s\n", p->notes[i]);
  }
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"topo", required_argument, NULL, 't'},
      {"gpus", required_argument, NULL, 'g'},
      {"nics", required_argument, NULL, 'n'},
      {"gdr-level", required_argument, NULL, 'l'},
      {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'}, /* prints RAILNET_VERSION */
      {NULL, 0, NULL, 0},
  };
  const char *files[RN_CLI_MAX_FILES];
  int nfiles = 0, json = 0, c;
  struct rn_plan_opts opts;
  char err[512];
  rn_plan_opts_default(&opts);
  while ((c = getopt_long(argc, argv, "t:g:n:l:jh", longopts, NULL)) != -1) {
    switch (c) {
      case 't':
        if (nfiles == RN_CLI_MAX_FILES) {
          fprintf(stderr, "railnet-topo: at most %d --topo files\n", RN_CLI_MAX_FILES);
          return 2;
        }
        files[nfiles++] = optarg;
        break;
      case 'g':
        opts.gpu_subset = optarg;
        break;
      case 'n':
        opts.nic_filter = optarg;
        break;
      case 'l':
        if (rn_path_parse(optarg, &opts.gdr_level)) {
          fprintf(stderr, "railnet-topo: unknown GDR level \"%s\" (PIX, PXB, PHB, NODE, SYS)\n",
                  optarg);
          return 2;
        }
        break;
      case 'j':
        json = 1;
        break;
      case 'h':
        rn_cli_usage(stdout);
        return 0;
      case 'V':
        printf("railnet-topo %s\n", RAILNET_VERSION);
        return 0;
      default:
        rn_cli_usage(stderr);
        return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "railnet-topo: unexpected argument \"%s\"\n", argv[optind]);
    rn_cli_usage(stderr);
    return 2;
  }
  if (!opts.gpu_subset) {
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd && *cvd) {
      if (strstr(cvd, "GPU-") || strstr(cvd, "MIG-"))
        fprintf(stderr, "railnet-topo: CUDA_VISIBLE_DEVICES holds UUIDs; ignored (use --gpus)\n");
      else
        opts.gpu_subset = cvd;
    }
  }
  if (!opts.nic_filter) opts.nic_filter = getenv("NCCL_IB_HCA");

  struct rn_topo *t = NULL;
  int rc = nfiles ? rn_topo_load_files(files, nfiles, &t, err, sizeof(err))
                  : rn_topo_load_live(&t, err, sizeof(err));
  if (rc) {
    fprintf(stderr, "railnet-topo: %s\n", err);
    return 2;
  }
  struct rn_plan *p = NULL;
  if (rn_plan_build(t, &opts, &p, err, sizeof(err))) {
    fprintf(stderr, "railnet-topo: %s\n", err);
    rn_topo_free(t);
    return 2;
  }
  if (json)
    rn_print_json(t, p);
  else
    rn_print_table(t, p, opts.gdr_level);
  rn_plan_free(p);
  rn_topo_free(t);
  return 0;
}
