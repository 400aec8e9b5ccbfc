/* railnet-topo: show the machine model and the rail plan, exactly as the
 * plugin would build them from the same input.  Uses only the public
 * header include/railnet/topo.h; reads the same variables through the
 * same reader (rn_topo_settings_read), so RAILNET_NICS, RAILNET_TOPO_FILE,
 * RAILNET_GDR_LEVEL, RAILNET_STANDBY and their NCCL fallbacks mean here
 * what they mean in NCCL's process.
 *
 *   railnet-topo [--topo FILE]... [--gpus LIST] [--nics FILTER]
 *                [--gdr-level LEVEL] [--host N] [--json] [--version]
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
          "                    [--gdr-level LEVEL] [--host N] [--json] [--version]\n"
          "  --topo FILE    hwloc XML, NCCL topology XML or `nvidia-smi topo -m` text\n"
          "                 (default: RAILNET_TOPO_FILE, NCCL_TOPO_FILE, else this machine);\n"
          "                 several NCCL XML files merge\n"
          "  --gpus LIST    GPU indices, ranges or bus ids (default: CUDA_VISIBLE_DEVICES,\n"
          "                 read as CUDA does; indices in bus order)\n"
          "  --nics FILTER  NCCL_IB_HCA syntax: mlx5_0,mlx5_1  ^mlx5_2  =mlx5_1  mlx5_0:1\n"
          "                 (default: RAILNET_NICS, then NCCL_IB_HCA)\n"
          "  --gdr-level L  the level NCCL uses GPUDirect RDMA up to: LOC PIX PXB PHB SYS or\n"
          "                 0-4 (default: RAILNET_GDR_LEVEL, NCCL_NET_GDR_LEVEL, else PXB)\n"
          "  --host N       plan only host N of a file that joins several\n"
          "  --json         one JSON document instead of tables\n"
          "  --version      print the version and exit\n"
          "RAILNET_DEBUG=1 prints the INFO lines the plugin logs; RAILNET_STANDBY=0 drops\n"
          "the standby NICs.\n");
}

static const char *rn_link_name(int link) {
  return link == RN_TOPO_LINK_IB ? "IB" : link == RN_TOPO_LINK_ETH ? "Ethernet" : "unknown";
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

static const char *rn_tf(int v) { return v ? "true" : "false"; }

static void rn_print_json(const struct rn_topo *t, const struct rn_plan *p,
                          const struct rn_topo_settings *s) {
  int nn = rn_topo_nnics(t);
  printf("{\"source\":");
  rn_json_str(rn_topo_source(t));
  printf(",\"settings\":{\"gdr_level\":\"%s\",\"gdr_level_from\":", rn_path_name(p->gdr_level));
  rn_json_str(s->gdr_level_from);
  printf(",\"nics\":");
  rn_json_str(s->nics);
  printf(",\"nics_from\":");
  rn_json_str(s->nics_from);
  printf(",\"topo_file_from\":");
  rn_json_str(s->topo_file_from[0] ? s->topo_file_from : "live");
  printf(",\"gdr_c2c\":%s,\"pxn\":%s,\"standby\":%s}", rn_tf(s->gdr_c2c), rn_tf(s->pxn),
         rn_tf(s->standby));
  printf(",\"hosts\":[");
  for (int h = 0; h < rn_topo_nhosts(t); h++) {
    printf("%s{\"index\":%d,\"host_hash\":", h ? "," : "", h);
    rn_json_str(rn_topo_host_name(t, h));
    putchar('}');
  }
  printf("],\"gpus\":[");
  for (int i = 0; i < p->ngpus; i++) {
    const struct rn_plan_gpu *pg = &p->gpus[i];
    const struct rn_topo_gpu *g = rn_topo_gpu(t, pg->gpu);
    printf("%s{\"index\":%d,\"busid\":", i ? "," : "", pg->gpu);
    rn_json_str(g->busid);
    printf(",\"host\":%d,\"numa\":%d,\"cpu\":%d,\"gdr\":%s,\"c2c\":%s,\"vdevice\":%d,\"paths\":[",
           g->host, g->numa, g->cpu, rn_tf(g->gdr), rn_tf(g->c2c), pg->vdev);
    for (int n = 0; n < nn; n++)
      printf("%s\"%s\"", n ? "," : "", rn_path_name(rn_plan_path(p, pg->gpu, n)));
    printf("],\"nics\":[");
    for (int r = 0; r < pg->nrails; r++) {
      const struct rn_plan_rail *rl = &pg->rails[r];
      const struct rn_topo_nic *n = rn_topo_nic(t, rl->nic);
      printf("%s{\"name\":", r ? "," : "");
      rn_json_str(n->name);
      printf(",\"busid\":");
      rn_json_str(n->busid);
      printf(",\"path\":\"%s\",\"pci_path\":\"%s\",\"gdr\":%s,\"gdr_why\":", rn_path_name(rl->path),
             rn_path_name(rl->pci_path), rn_tf(rl->gdr));
      rn_json_str(rl->gdr_why);
      printf(",\"reason\":");
      rn_json_str(rl->reason);
      putchar('}');
    }
    printf("]}");
  }
  printf("],\"nics\":[");
  for (int i = 0; i < nn; i++) {
    const struct rn_topo_nic *n = rn_topo_nic(t, i);
    printf("%s{\"name\":", i ? "," : "");
    rn_json_str(n->name);
    printf(",\"device\":");
    rn_json_str(n->device);
    printf(",\"port\":%d,\"netdev\":", n->port);
    rn_json_str(n->netdev);
    printf(",\"busid\":");
    rn_json_str(n->busid);
    printf(
        ",\"host\":%d,\"speed_mbps\":%d,\"link\":\"%s\",\"numa\":%d,\"cpu\":%d,\"gdr\":%s,"
        "\"rdma\":%s,\"rail\":%d,\"plane\":%d}",
        n->host, n->speed_mbps, rn_link_name(n->link), n->numa, n->cpu, rn_tf(n->gdr),
        rn_tf(n->rdma), p->nic_rail[i], p->nic_plane[i]);
  }
  printf("],\"vdevices\":[");
  for (int i = 0; i < p->nvdevs; i++) {
    const struct rn_plan_vdev *d = &p->vdevs[i];
    printf("%s{\"name\":", i ? "," : "");
    rn_json_str(d->name);
    printf(",\"host\":%d,\"nics\":[", d->host);
    for (int k = 0; k < d->nnics; k++) {
      if (k) putchar(',');
      rn_json_str(rn_topo_nic(t, d->nics[k])->name);
    }
    printf(
        "],\"speed_mbps\":%d,\"nic_gdr\":%s,\"gdr_all_pairs\":%s,\"rail\":%d,\"plane\":%d,"
        "\"users\":%d,\"standby\":{\"nic\":",
        d->speed_mbps, rn_tf(d->nic_gdr), rn_tf(d->gdr), d->rail_id, d->plane_id, d->nusers);
    if (d->standby >= 0)
      rn_json_str(rn_topo_nic(t, d->standby)->name);
    else
      printf("null");
    printf(",\"reason\":");
    rn_json_str(d->standby_why);
    printf("},\"why\":");
    rn_json_str(d->why);
    putchar('}');
  }
  printf("],\"unused_nics\":[");
  for (int i = 0; i < p->nunused; i++) {
    if (i) putchar(',');
    rn_json_str(rn_topo_nic(t, p->unused[i])->name);
  }
  printf("],\"unused\":[");
  for (int i = 0; i < p->nunused; i++) {
    printf("%s{\"name\":", i ? "," : "");
    rn_json_str(rn_topo_nic(t, p->unused[i])->name);
    printf(",\"reason\":");
    rn_json_str(p->unused_why[i]);
    putchar('}');
  }
  printf("],\"notes\":[");
  for (int i = 0; i < p->nnotes; i++) {
    if (i) putchar(',');
    rn_json_str(p->notes[i]);
  }
  printf("]}\n");
}

/* The nvidia-smi topo -m layout for one host: GPUs down, NICs across, in
 * NCCL's path names; CPU is the NUMA node NCCL attaches the GPU to. */
static void rn_print_matrix(const struct rn_topo *t, const struct rn_plan *p, int host) {
  int ng = rn_topo_ngpus(t), nn = rn_topo_nnics(t), any = 0;
  for (int n = 0; n < nn; n++) any |= rn_topo_nic(t, n)->host == host;
  if (!any) return;
  int anygpu = 0;
  for (int g = 0; g < ng; g++) anygpu |= rn_topo_gpu(t, g)->host == host;
  if (anygpu) {
    printf("      ");
    for (int n = 0; n < nn; n++)
      if (rn_topo_nic(t, n)->host == host) printf("\tNIC%d", n);
    printf("\tCPU\n");
    for (int g = 0; g < ng; g++) {
      const struct rn_topo_gpu *gp = rn_topo_gpu(t, g);
      if (gp->host != host) continue;
      printf("GPU%d", g);
      for (int n = 0; n < nn; n++)
        if (rn_topo_nic(t, n)->host == host) printf("\t%s", rn_path_name(rn_plan_path(p, g, n)));
      if (gp->numa >= 0)
        printf("\t%d\n", gp->numa);
      else
        printf("\tN/A\n");
    }
    printf(
        "\nCPU = the NUMA node NCCL attaches the GPU to; paths as NCCL names them (a pair\n"
        "without GPUDirect RDMA goes through the GPU's CPU: PHB, or SYS across CPUs).\n");
  }
  printf("\nNIC Legend:\n");
  for (int n = 0; n < nn; n++) {
    const struct rn_topo_nic *np = rn_topo_nic(t, n);
    if (np->host != host) continue;
    printf("  NIC%d: %s", n, np->name);
    if (np->netdev[0]) printf(" (%s)", np->netdev);
    printf("  %s  port %d  ", np->busid[0] ? np->busid : "no-PCI", np->port);
    if (np->speed_mbps > 0)
      printf("%d Mb/s", np->speed_mbps);
    else
      printf("speed unknown");
    printf("  %s  NUMA %d  rail %d plane %d%s%s\n", rn_link_name(np->link), np->numa,
           p->nic_rail[n], p->nic_plane[n], np->rdma ? "" : "  netdev only",
           np->gdr ? "" : "  no GDR");
  }
  for (int g = 0; g < ng; g++) {
    const struct rn_topo_gpu *gp = rn_topo_gpu(t, g);
    if (gp->host != host) continue;
    printf("  GPU%d: %s  NUMA %d  GDR %s%s\n", g, gp->busid[0] ? gp->busid : "(no bus id)",
           gp->numa, gp->gdr ? "allowed" : "no", gp->c2c ? "  NVLink-C2C to its CPU" : "");
  }
}

static void rn_print_table(const struct rn_topo *t, const struct rn_plan *p,
                           const struct rn_topo_settings *s) {
  int nh = rn_topo_nhosts(t);
  printf("Topology: %s, %d GPU(s), %d NIC(s), %d CPU node(s)", rn_topo_source(t), rn_topo_ngpus(t),
         rn_topo_nnics(t), rn_topo_ncpus(t));
  if (nh > 1) printf(", %d hosts planned separately", nh);
  printf("\n");
  for (int h = 0; h < nh; h++) {
    if (nh > 1) printf("\nHost %d (host_hash %s):\n", h, rn_topo_host_name(t, h));
    printf("\n");
    rn_print_matrix(t, p, h);
  }
  printf("\nPlan (GDR level %s from %s; NCCL_NET_GDR_C2C=%d; PXN %s):\n",
         rn_path_name(p->gdr_level), s->gdr_level_from, s->gdr_c2c, s->pxn ? "on" : "off");
  for (int i = 0; i < p->ngpus; i++) {
    const struct rn_plan_gpu *pg = &p->gpus[i];
    const struct rn_topo_gpu *gp = rn_topo_gpu(t, pg->gpu);
    printf("  GPU%d %s:", pg->gpu, gp->busid[0] ? gp->busid : "");
    if (nh > 1) printf(" (host %d)", gp->host);
    if (!pg->nrails) printf(" no NIC");
    for (int r = 0; r < pg->nrails; r++) printf(" %s", rn_topo_nic(t, pg->rails[r].nic)->name);
    printf("\n");
    for (int r = 0; r < pg->nrails; r++) printf("    %s\n", pg->rails[r].reason);
  }
  printf("\nVirtual devices:\n");
  for (int i = 0; i < p->nvdevs; i++) {
    const struct rn_plan_vdev *d = &p->vdevs[i];
    printf("  %d: %s  %d NIC(s)  ", i, d->name, d->nnics);
    if (d->speed_mbps > 0)
      printf("%d Mb/s", d->speed_mbps);
    else
      printf("speed unknown");
    printf("  rail %d  plane %d", d->rail_id, d->plane_id);
    if (nh > 1) printf("  host %d", d->host);
    printf("\n     standby %s\n", d->standby_why);
  }
  if (!p->nvdevs) printf("  none\n");
  printf("\nUnused NICs:%s\n", p->nunused ? "" : " none");
  for (int i = 0; i < p->nunused; i++)
    printf("  %s: %s\n", rn_topo_nic(t, p->unused[i])->name, p->unused_why[i]);
  if (p->nnotes) {
    printf("\nNotes:\n");
    for (int i = 0; i < p->nnotes; i++) printf("  - %s\n", p->notes[i]);
  }
}

static int rn_cli_debug(void) {
  const char *d = getenv("RAILNET_DEBUG");
  return d && *d && *d != '0';
}

/* The plugin's logger without NCCL writes "railnet INFO NET/railnet : ...". */
static void rn_cli_info(void *ctx, const char *line) {
  (void)ctx;
  fprintf(stderr, "railnet INFO NET/railnet : %s\n", line);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"topo", required_argument, NULL, 't'}, {"gpus", required_argument, NULL, 'g'},
      {"nics", required_argument, NULL, 'n'}, {"gdr-level", required_argument, NULL, 'l'},
      {"host", required_argument, NULL, 'H'}, {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},       {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0},
  };
  const char *files[RN_CLI_MAX_FILES];
  const char *gpus = NULL, *nics = NULL, *level = NULL;
  int nfiles = 0, json = 0, host = -1, c;
  char err[512];
  while ((c = getopt_long(argc, argv, "t:g:n:l:H:jh", longopts, NULL)) != -1) {
    switch (c) {
      case 't':
        if (nfiles == RN_CLI_MAX_FILES) {
          fprintf(stderr, "railnet-topo: at most %d --topo files\n", RN_CLI_MAX_FILES);
          return 2;
        }
        files[nfiles++] = optarg;
        break;
      case 'g':
        gpus = optarg;
        break;
      case 'n':
        nics = optarg;
        break;
      case 'l':
        level = optarg;
        break;
      case 'H': {
        char *end;
        long h = strtol(optarg, &end, 10);
        if (end == optarg || *end || h < 0 || h > 1000) {
          fprintf(stderr, "railnet-topo: --host wants a host index, not \"%s\"\n", optarg);
          return 2;
        }
        host = (int)h;
        break;
      }
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
  struct rn_topo_settings s;
  rn_topo_settings_read(&s);
  for (int i = 0; i < s.nwarn; i++) fprintf(stderr, "railnet WARN NET/railnet : %s\n", s.warn[i]);
  if (rn_cli_debug())
    for (int i = 0; i < s.ninfo; i++) rn_cli_info(NULL, s.info[i]);
  if (level) {
    if (rn_gdr_level_parse(level, 0, &s.gdr_level) != 0 || s.gdr_level > RN_PATH_SYS) {
      fprintf(stderr, "railnet-topo: unknown GDR level \"%s\" (LOC, PIX, PXB, PHB, SYS, or 0-4)\n",
              level);
      return 2;
    }
    snprintf(s.gdr_level_from, sizeof(s.gdr_level_from), "--gdr-level");
  }
  if (nics) {
    if (rn_topo_filter_check(nics, err, sizeof(err))) {
      fprintf(stderr, "railnet-topo: --nics: %s\n", err);
      return 2;
    }
    snprintf(s.nics, sizeof(s.nics), "%s", nics);
    snprintf(s.nics_from, sizeof(s.nics_from), "--nics");
  }

  struct rn_topo *t = NULL;
  int rc;
  if (nfiles) {
    rc = rn_topo_load_files(files, nfiles, &t, err, sizeof(err));
    snprintf(s.topo_file_from, sizeof(s.topo_file_from), "--topo");
  } else if (s.topo_file[0]) {
    /* The plugin reads the same file; a bad one is an error here, where
     * someone is looking, and a WARN plus the live machine there. */
    rc = rn_topo_load_file(s.topo_file, &t, err, sizeof(err));
    if (rc) fprintf(stderr, "railnet-topo: %s (from %s)\n", err, s.topo_file_from);
    if (rc) return 2;
  } else {
    rc = rn_topo_load_live(&t, err, sizeof(err));
  }
  if (rc) {
    fprintf(stderr, "railnet-topo: %s\n", err);
    return 2;
  }
  struct rn_plan_opts opts;
  rn_plan_opts_default(&opts);
  rn_plan_opts_from_settings(&opts, &s);
  opts.host = host;
  if (host >= rn_topo_nhosts(t)) {
    fprintf(stderr, "railnet-topo: --host %d: the topology has %d host(s)\n", host,
            rn_topo_nhosts(t));
    rn_topo_free(t);
    return 2;
  }
  char subset[1024], note[256] = "";
  if (gpus) {
    opts.gpu_subset = gpus;
  } else if (rn_topo_cuda_visible(t, getenv("CUDA_VISIBLE_DEVICES"), subset, sizeof(subset), note,
                                  sizeof(note)) == 0) {
    opts.gpu_subset = subset;
  }
  if (note[0]) fprintf(stderr, "railnet-topo: %s\n", note);
  struct rn_plan *p = NULL;
  if (rn_plan_build(t, &opts, &p, err, sizeof(err))) {
    fprintf(stderr, "railnet-topo: %s\n", err);
    rn_topo_free(t);
    return 2;
  }
  if (rn_cli_debug()) rn_plan_log(t, p, rn_cli_info, NULL);
  if (json)
    rn_print_json(t, p, &s);
  else
    rn_print_table(t, p, &s);
  rn_plan_free(p);
  rn_topo_free(t);
  return 0;
}
