/* Behaviour of the topo API outside whole-machine plans: bus id and path
 * parsing, NCCL_IB_HCA filters, GPU subsets and candidate lists, plans not
 * depending on how a file numbers or orders devices, sysfs replay under
 * RAILNET_FSROOT, the live machine, and concurrent use from threads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"
#include "railnet/topo.h"
#include "sysfs.h"

static int n_tests, n_failed;

static void ok(int cond, const char *desc) {
  n_tests++;
  if (!cond) n_failed++;
  printf("%sok %d - %s\n", cond ? "" : "not ", n_tests, desc);
}

static char tmpdir[256];

static const char *write_tmp(const char *name, const char *text) {
  static char path[8][512];
  static int k;
  char *p = path[k++ % 8];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  FILE *f = fopen(p, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  return p;
}

static void test_busid(void) {
  char out[16];
  ok(rn_topo_busid_norm("0000:1B:00.0", out, sizeof(out)) == 0 && strcmp(out, "0000:1b:00.0") == 0,
     "busid_norm lowercases a full bus id");
  ok(rn_topo_busid_norm("1b:00.0", out, sizeof(out)) == 0 && strcmp(out, "0000:1b:00.0") == 0,
     "busid_norm adds domain 0 to bb:dd.f");
  ok(rn_topo_busid_norm("ffff:ff:01.0", out, sizeof(out)) == 0,
     "busid_norm accepts NCCL's virtual switch ids");
  ok(rn_topo_busid_norm("0000:1b:00", out, sizeof(out)) != 0,
     "busid_norm rejects a missing function");
  ok(rn_topo_busid_norm("fffffff:ff:ff.0", out, sizeof(out)) != 0,
     "busid_norm rejects a 7-digit domain");
  ok(rn_topo_busid_norm("0000:1b:20.0", out, sizeof(out)) != 0, "busid_norm rejects device > 0x1f");
}

static void test_path_names(void) {
  enum rn_path p;
  ok(rn_path_parse("pxb", &p) == 0 && p == RN_PATH_PXB, "path_parse is case-insensitive");
  ok(rn_path_parse("P2C", &p) == 0 && p == RN_PATH_P2C, "path_parse knows NCCL's P2C");
  ok(rn_path_parse("NODE", &p) != 0, "path_parse rejects NODE (nvidia-smi's, not NCCL's)");
  /* NCCL's numbering (graph.h): levels compare as NCCL compares them. */
  ok(RN_PATH_LOC == 0 && RN_PATH_NVL == 1 && RN_PATH_C2C == 3 && RN_PATH_PIX == 4 &&
         RN_PATH_PXB == 5 && RN_PATH_P2C == 6 && RN_PATH_PXN == 7 && RN_PATH_PHB == 8 &&
         RN_PATH_SYS == 9 && RN_PATH_DIS == 11,
     "path types carry NCCL's numbers");
  ok(strcmp(rn_path_name(RN_PATH_PXN), "PXN") == 0 &&
         strcmp(rn_path_name((enum rn_path)42), "?") == 0,
     "path_name names PXN and marks unknown numbers");
}

static void test_filter(void) {
  ok(rn_topo_filter_match(NULL, "mlx5_0", "", 1), "filter: NULL passes everything");
  ok(rn_topo_filter_match("mlx5_1", "mlx5_10", "", 1),
     "filter: prefix match by default (mlx5_1 selects mlx5_10)");
  ok(!rn_topo_filter_match("=mlx5_1", "mlx5_10", "", 1), "filter: '=' makes the whole list exact");
  ok(rn_topo_filter_match("=mlx5_0,mlx5_1", "mlx5_1", "", 1), "filter: '=' applies to every entry");
  ok(!rn_topo_filter_match("^mlx5_2", "mlx5_2", "", 1), "filter: '^' excludes");
  ok(rn_topo_filter_match("^mlx5_2", "mlx5_3", "", 1), "filter: '^' keeps the others");
  ok(!rn_topo_filter_match("^=mlx5_1", "mlx5_1", "", 1) &&
         rn_topo_filter_match("^=mlx5_1", "mlx5_10", "", 1),
     "filter: '^=' excludes exact names only");
  ok(rn_topo_filter_match("mlx5_0:1", "mlx5_0", "", 1) &&
         !rn_topo_filter_match("mlx5_0:1", "mlx5_0", "", 2),
     "filter: ':port' selects one port");
  ok(rn_topo_filter_match("ib0", "mlx5_0", "ib0", 1), "filter: matches the netdev name too");
  ok(!rn_topo_filter_match("mlx5_0:x", "mlx5_0", "", 1), "filter: a malformed port passes nothing");
}

static const char *two_switch_xml(int swap) {
  /* Same machine twice: the second lists devices in another order and
   * numbers them the other way round. */
  static char buf[4096];
  char a[256], b[256], c[256], d[256];
  snprintf(a, sizeof(a),
           "<pci busid=\"0000:11:00.0\" class=\"0x030200\"><gpu dev=\"%d\" gdr=\"1\"/></pci>",
           swap);
  snprintf(b, sizeof(b),
           "<pci busid=\"0000:21:00.0\" class=\"0x030200\"><gpu dev=\"%d\" gdr=\"1\"/></pci>",
           !swap);
  snprintf(c, sizeof(c),
           "<pci busid=\"0000:12:00.0\" class=\"0x020700\"><nic><net name=\"mlx5_5\" dev=\"%d\" "
           "speed=\"200000\" port=\"1\"/></nic></pci>",
           swap);
  snprintf(d, sizeof(d),
           "<pci busid=\"0000:22:00.0\" class=\"0x020700\"><nic><net name=\"mlx5_2\" dev=\"%d\" "
           "speed=\"200000\" port=\"1\"/></nic></pci>",
           !swap);
  if (!swap)
    snprintf(buf, sizeof(buf),
             "<system><cpu numaid=\"0\"><pci busid=\"0000:10:00.0\" class=\"0x060400\">%s%s</pci>"
             "<pci busid=\"0000:20:00.0\" class=\"0x060400\">%s%s</pci></cpu></system>",
             a, c, b, d);
  else
    snprintf(buf, sizeof(buf),
             "<system><cpu numaid=\"0\"><pci busid=\"0000:20:00.0\" class=\"0x060400\">%s%s</pci>"
             "<pci busid=\"0000:10:00.0\" class=\"0x060400\">%s%s</pci></cpu></system>",
             d, b, c, a);
  return buf;
}

static void plan_pairs(const char *path, char *out, size_t len) {
  struct rn_topo *t;
  struct rn_plan *p;
  char err[256];
  out[0] = '\0';
  if (rn_topo_load_file(path, &t, err, sizeof(err))) return;
  if (rn_plan_build(t, NULL, &p, err, sizeof(err)) == 0) {
    for (int i = 0; i < p->ngpus; i++) {
      size_t l = strlen(out);
      snprintf(out + l, len - l, "%s->%s;", rn_topo_gpu(t, p->gpus[i].gpu)->busid,
               p->gpus[i].nrails ? rn_topo_nic(t, p->gpus[i].rails[0].nic)->name : "-");
    }
    rn_plan_free(p);
  }
  rn_topo_free(t);
}

static void test_numbering_is_meaningless(void) {
  char a[512], b[512];
  plan_pairs(write_tmp("order-a.xml", two_switch_xml(0)), a, sizeof(a));
  plan_pairs(write_tmp("order-b.xml", two_switch_xml(1)), b, sizeof(b));
  ok(strcmp(a, "0000:11:00.0->mlx5_5;0000:21:00.0->mlx5_2;") == 0,
     "plan pairs each GPU with the NIC on its switch, not NIC i with GPU i");
  ok(strcmp(a, b) == 0, "plan does not depend on device order or dev numbering in the file");
}

static void test_subset_and_candidates(void) {
  struct rn_topo *t;
  struct rn_plan *p = NULL;
  char err[256];
  struct rn_plan_opts o;
  if (rn_topo_load_file("tests/topo/fixtures/dgx-h100-like.xml", &t, err, sizeof(err))) {
    ok(0, err);
    return;
  }
  rn_plan_opts_default(&o);
  o.gpu_subset = "1-2";
  ok(rn_plan_build(t, &o, &p, err, sizeof(err)) == 0 && p->ngpus == 2,
     "GPU subset accepts a range");
  rn_plan_free(p);
  p = NULL;
  o.gpu_subset = "8";
  ok(rn_plan_build(t, &o, &p, err, sizeof(err)) != 0 && strstr(err, "out of range"),
     "GPU subset rejects an index past the last GPU");
  o.gpu_subset = "0000:99:00.0";
  ok(rn_plan_build(t, &o, &p, err, sizeof(err)) != 0 && strstr(err, "0000:99:00.0"),
     "GPU subset rejects an unknown bus id, naming it");
  o.gpu_subset = "GPU-1234";
  ok(rn_plan_build(t, &o, &p, err, sizeof(err)) != 0, "GPU subset rejects UUIDs");
  o.gpu_subset = NULL;
  o.nic_filter = "mlx5_0:zz";
  ok(rn_plan_build(t, &o, &p, err, sizeof(err)) != 0 && strstr(err, "port"),
     "plan rejects a malformed NIC filter");
  o.nic_filter = NULL;
  int bad = 99;
  o.candidates = &bad;
  o.ncandidates = 1;
  ok(rn_plan_build(t, &o, &p, err, sizeof(err)) != 0,
     "plan rejects a candidate index out of range");
  o.candidates = NULL;
  o.ncandidates = 0;
  o.nic_filter = "nothing_matches";
  ok(rn_plan_build(t, &o, &p, err, sizeof(err)) == 0 && p->nvdevs == 0 && p->gpus[0].nrails == 0,
     "a filter matching no NIC leaves GPUs without rails, not an error");
  int said = 0;
  for (int i = 0; p && i < p->nnotes; i++)
    said |= strstr(p->notes[i], "excludes every NIC") != NULL;
  ok(said, "the plan notes that the filter excluded every NIC");
  rn_plan_free(p);
  char via[96];
  enum rn_path pp = rn_topo_path(t, 0, rn_topo_find_nic(t, "mlx5_0", NULL), via, sizeof(via));
  ok(pp == RN_PATH_PIX && strcmp(via, "switch 0000:17:00.0") == 0,
     "path names the switch it goes through");
  ok(rn_topo_find_nic(t, NULL, "18:00.0") == rn_topo_find_nic(t, "mlx5_0", NULL),
     "find_nic by short bus id");
  rn_topo_free(t);
}

static int mkdirs(const char *path) {
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(buf, 0755);
    *p = '/';
  }
  return mkdir(buf, 0755);
}

static void test_sysfs_replay(void) {
  char root[300], d[512];
  struct rn_topo *t;
  char err[256], why[128];
  snprintf(root, sizeof(root), "%s/fsroot", tmpdir);
  snprintf(d, sizeof(d), "%s/sys/class/infiniband/mlx5_0/ports/1", root);
  mkdirs(d);
  snprintf(d, sizeof(d), "%s/sys/module/nvidia_peermem", root);
  mkdirs(d);
  write_tmp("fsroot/sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  write_tmp("fsroot/sys/class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n");
  write_tmp("fsroot/sys/class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
  write_tmp("fsroot/sys/class/infiniband/mlx5_0/node_guid", "b859:9f03:00d6:6b4c\n");
  if (rn_topo_load_file("tests/topo/fixtures/hwloc-small.xml", &t, err, sizeof(err))) {
    ok(0, err);
    return;
  }
  rn_topo_sysfs_enrich_nics(t, root);
  int n = rn_topo_find_nic(t, "mlx5_0", NULL);
  const struct rn_topo_nic *nic = rn_topo_nic(t, n);
  ok(nic && nic->speed_mbps == 200000, "sysfs replay: port rate gives the NIC speed");
  ok(nic && nic->port_state == 4 && nic->link == 1, "sysfs replay: port state and link layer");
  ok(nic && nic->guid == 0xb8599f0300d66b4cull, "sysfs replay: node GUID");
  ok(nic && strcmp(nic->netdev, "ib0") == 0,
     "hwloc: RDMA device linked to its netdev under the same PCI function");
  ok(rn_topo_sysfs_gdr_probe(root, why, sizeof(why)) == 1 && strstr(why, "nvidia_peermem"),
     "GDR probe sees nvidia_peermem under the root");
  ok(rn_topo_sysfs_gdr_probe(tmpdir, why, sizeof(why)) == 0,
     "GDR probe without a peermem module says no");
  rn_topo_free(t);
}

static void test_live(void) {
  struct rn_topo *t;
  struct rn_plan *p;
  char err[256];
  if (rn_topo_load_live(&t, err, sizeof(err))) {
    printf("ok %d - # SKIP live discovery unavailable: %s\n", ++n_tests, err);
    return;
  }
  ok(strcmp(rn_topo_source(t), "live") == 0, "live machine loads through hwloc");
  ok(rn_plan_build(t, NULL, &p, err, sizeof(err)) == 0, "live machine plans (GPUs or not)");
  if (rn_topo_ngpus(t) == 0) {
    int said = 0;
    for (int i = 0; i < p->nnotes; i++) said |= strstr(p->notes[i], "no GPUs") != NULL;
    ok(said && p->nunused == 0, "a GPU-less live machine says so; every NIC is a virtual device");
  }
  rn_plan_free(p);
  rn_topo_free(t);
}

static void *thread_main(void *arg) {
  long bad = 0;
  (void)arg;
  for (int i = 0; i < 20; i++) {
    struct rn_topo *t;
    struct rn_plan *p;
    char err[256];
    if (rn_topo_load_file("tests/topo/fixtures/b200-like.xml", &t, err, sizeof(err))) {
      bad++;
      continue;
    }
    if (rn_plan_build(t, NULL, &p, err, sizeof(err)) || p->nvdevs != 8)
      bad++;
    else
      rn_plan_free(p);
    rn_topo_free(t);
  }
  return (void *)bad;
}

static void test_threads(void) {
  pthread_t th[4];
  long total = 0;
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, thread_main, NULL);
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(th[i], &r);
    total += (long)r;
  }
  ok(total == 0, "loaders and planner run concurrently from 4 threads");
}

int main(void) {
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/rn-topo-api-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    printf("1..0 # SKIP cannot create a temporary directory\n");
    return 0;
  }
  test_busid();
  test_path_names();
  test_filter();
  test_numbering_is_meaningless();
  test_subset_and_candidates();
  test_sysfs_replay();
  test_live();
  test_threads();
  printf("1..%d\n", n_tests);
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
  return n_failed ? 1 : 0;
}
