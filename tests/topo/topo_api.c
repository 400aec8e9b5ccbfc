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
#include "railnet/sysfs.h"
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

static void test_gdr_levels(void) {
  enum rn_path p = RN_PATH_LOC;
  /* NCCL_NET_GDR_LEVEL as ncclGetLevel reads it. */
  ok(rn_gdr_level_parse("PXB", 1, &p) == 0 && p == RN_PATH_PXB, "NCCL level: a name");
  ok(rn_gdr_level_parse("pxb", 1, &p) == 1, "NCCL level: names are case-sensitive (ignored)");
  ok(rn_gdr_level_parse("3", 1, &p) == 0 && p == RN_PATH_PHB, "NCCL level: old number 3 is PHB");
  ok(rn_gdr_level_parse("9", 1, &p) == 0 && p == RN_PATH_SYS,
     "NCCL level: old numbers past 4 are SYS");
  ok(rn_gdr_level_parse("2abc", 1, &p) == 0 && p == RN_PATH_PXB,
     "NCCL level: a leading digit decides, as strtol does");
  ok(rn_gdr_level_parse("P2C", 1, &p) == 0 && p == RN_PATH_P2C, "NCCL level: P2C is a level");
  ok(rn_gdr_level_parse("NET", 1, &p) == 1, "NCCL level: names past SYS are ignored");
  ok(rn_gdr_level_parse("", 1, &p) == 1 && rn_gdr_level_parse(NULL, 0, &p) == 1,
     "empty or absent level: unset");
  /* RAILNET_GDR_LEVEL: any case, whole string. */
  ok(rn_gdr_level_parse("phb", 0, &p) == 0 && p == RN_PATH_PHB, "railnet level: any case");
  ok(rn_gdr_level_parse("2abc", 0, &p) == -1 && rn_gdr_level_parse("bogus", 0, &p) == -1,
     "railnet level: anything else is malformed");
}

/* A pair closer than PHB without GPUDirect RDMA: NCCL's path goes through
 * the GPU's CPU; the PCI path stays what the planner ranks by. */
static void test_detour_path(void) {
  struct rn_topo *t;
  char err[256], via[96];
  if (rn_topo_load_file("tests/topo/fixtures/detour-no-gdr.xml", &t, err, sizeof(err)) != 0) {
    ok(0, "detour-no-gdr.xml loads");
    fprintf(stderr, "# %s\n", err);
    return;
  }
  int n0 = rn_topo_find_nic(t, "mlx5_0", NULL), n1 = rn_topo_find_nic(t, "mlx5_1", NULL), peer;
  ok(rn_topo_path(t, 0, n0, via, sizeof(via)) == RN_PATH_PHB && strcmp(via, "CPU (NUMA 0)") == 0 &&
         rn_topo_pci_path(t, 0, n0) == RN_PATH_PIX,
     "a PIX pair whose NIC has gdr=0 is PHB through the GPU's CPU, PIX on PCIe");
  ok(rn_topo_pxn_peer(t, 0, n1, 1, &peer) == 1 && peer == 1 &&
         rn_topo_path(t, 0, n1, NULL, 0) == RN_PATH_PXN,
     "a relay GPU with gdr=0 still relays for a GPU before it (NCCL 2.28)");
  ok(rn_topo_pxn_peer(t, 2, n1, 1, &peer) == 0 && peer == -1 &&
         rn_topo_path(t, 2, n1, NULL, 0) == RN_PATH_PHB,
     "... and not for a GPU after it: NCCL has diverted the relay's own pair by then");
  rn_topo_free(t);
}

static void test_settings(void) {
  static const char *const vars[] = {"RAILNET_NICS",     "NCCL_IB_HCA",       "RAILNET_TOPO_FILE",
                                     "NCCL_TOPO_FILE",   "RAILNET_GDR_LEVEL", "NCCL_NET_GDR_LEVEL",
                                     "NCCL_NET_GDR_C2C", "NCCL_PXN_DISABLE",  "NCCL_PXN_C2C",
                                     "RAILNET_STANDBY"};
  struct rn_topo_settings st;
  struct rn_plan_opts o;
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
  rn_topo_settings_read(&st);
  ok(st.gdr_level == RN_PATH_PXB && strcmp(st.gdr_level_from, "default") == 0 && st.gdr_c2c &&
         st.pxn && st.pxn_c2c && st.standby && st.nics[0] == '\0' && st.nwarn == 0,
     "settings: NCCL's defaults with nothing set");
  setenv("NCCL_IB_HCA", "mlx5_0", 1);
  setenv("NCCL_TOPO_FILE", "/x.xml", 1);
  setenv("NCCL_NET_GDR_LEVEL", "PHB", 1);
  rn_topo_settings_read(&st);
  ok(strcmp(st.nics, "mlx5_0") == 0 && strcmp(st.nics_from, "NCCL_IB_HCA") == 0 &&
         strcmp(st.topo_file, "/x.xml") == 0 && st.gdr_level == RN_PATH_PHB &&
         strcmp(st.gdr_level_from, "NCCL_NET_GDR_LEVEL") == 0,
     "settings: NCCL_IB_HCA, NCCL_TOPO_FILE, NCCL_NET_GDR_LEVEL as fallbacks");
  ok(st.ninfo >= 3 && strstr(st.info[0], "set by environment"),
     "settings: every value read is echoed");
  setenv("RAILNET_NICS", "mlx5_1", 1);
  setenv("RAILNET_GDR_LEVEL", "1", 1);
  setenv("NCCL_NET_GDR_C2C", "0", 1);
  setenv("NCCL_PXN_DISABLE", "1", 1);
  setenv("RAILNET_STANDBY", "0", 1);
  rn_topo_settings_read(&st);
  rn_plan_opts_default(&o);
  rn_plan_opts_from_settings(&o, &st);
  ok(strcmp(st.nics, "mlx5_1") == 0 && st.gdr_level == RN_PATH_PIX && !st.gdr_c2c && !st.pxn &&
         !st.standby,
     "settings: RAILNET_* win; NCCL_NET_GDR_C2C=0, NCCL_PXN_DISABLE=1, RAILNET_STANDBY=0");
  ok(o.gdr_level == RN_PATH_PIX && !o.gdr_c2c && !o.pxn && !o.standby &&
         strcmp(o.nic_filter, "mlx5_1") == 0 && strcmp(o.nic_filter_from, "RAILNET_NICS") == 0,
     "settings become plan options");
  setenv("RAILNET_GDR_LEVEL", "bogus", 1);
  setenv("RAILNET_STANDBY", "7", 1);
  setenv("RAILNET_NICS", "mlx5_0:x", 1);
  rn_topo_settings_read(&st);
  ok(st.nwarn == 3 && st.gdr_level == RN_PATH_PHB && st.standby == 1 && st.nics[0] == '\0',
     "settings: bad values warn and fall back (NCCL level, default, no filter)");
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
}

static void test_cuda_visible(void) {
  struct rn_topo *t;
  char err[256], sub[128], note[256];
  if (rn_topo_load_file("tests/topo/fixtures/dgx-h100-like.xml", &t, err, sizeof(err))) {
    ok(0, err);
    return;
  }
  ok(rn_topo_cuda_visible(t, NULL, sub, sizeof(sub), note, sizeof(note)) == 1,
     "CUDA_VISIBLE_DEVICES unset: every GPU");
  ok(rn_topo_cuda_visible(t, "", sub, sizeof(sub), note, sizeof(note)) == 0 && sub[0] == '\0',
     "CUDA_VISIBLE_DEVICES empty: no GPU");
  ok(rn_topo_cuda_visible(t, "6, 2", sub, sizeof(sub), note, sizeof(note)) == 0 &&
         strcmp(sub, "6,2") == 0 && !note[0],
     "CUDA_VISIBLE_DEVICES indices, in its order");
  ok(rn_topo_cuda_visible(t, "0,9,1", sub, sizeof(sub), note, sizeof(note)) == 0 &&
         strcmp(sub, "0") == 0 && strstr(note, "\"9\""),
     "CUDA_VISIBLE_DEVICES: an invalid index ends the list, with a note");
  ok(rn_topo_cuda_visible(t, "1,1,2", sub, sizeof(sub), note, sizeof(note)) == 0 &&
         strcmp(sub, "1") == 0,
     "CUDA_VISIBLE_DEVICES: a repeated index ends the list");
  ok(rn_topo_cuda_visible(t, "GPU-1234", sub, sizeof(sub), note, sizeof(note)) == 1 &&
         strstr(note, "UUIDs"),
     "CUDA_VISIBLE_DEVICES UUIDs on a source without them: every GPU, said in a note");
  rn_topo_free(t);
  if (rn_topo_load_file("tests/topo/fixtures/hwloc-dual-port.xml", &t, err, sizeof(err))) {
    ok(0, err);
    return;
  }
  ok(rn_topo_cuda_visible(t, "GPU-aaaa", sub, sizeof(sub), note, sizeof(note)) == 0 &&
         strcmp(sub, "0") == 0,
     "CUDA_VISIBLE_DEVICES: a UUID prefix names the GPU with that UUID");
  ok(rn_topo_cuda_visible(t, "GPU-bbbb", sub, sizeof(sub), note, sizeof(note)) == 0 &&
         sub[0] == '\0',
     "CUDA_VISIBLE_DEVICES: an unknown UUID ends the list");
  rn_topo_free(t);
}

static void test_filter_ids(void) {
  char err[256];
  ok(rn_topo_filter_check("mlx5_0:1:3:0,mlx5_1::2", err, sizeof(err)) == 0,
     "filter: name:port:rail:plane and empty fields parse (NCCL 2.30)");
  ok(rn_topo_filter_check("mlx5_0:1:3:0:9", err, sizeof(err)) != 0 && strstr(err, "more than"),
     "filter: more fields than name:port:rail:plane is an error");
  ok(rn_topo_filter_check("mlx5_0::x", err, sizeof(err)) != 0 && strstr(err, "bad rail"),
     "filter: a rail that is no number is named");
  ok(rn_topo_filter_check(":1", err, sizeof(err)) != 0 && strstr(err, "bad device name"),
     "filter: an entry without a name is an error");
  ok(rn_topo_filter_check(",,mlx5_0,", err, sizeof(err)) == 0, "filter: empty entries are skipped");
  ok(rn_topo_filter_match("mlx5_0", "mlx5_0:2", "", 2),
     "filter: a plugin name device:port matches as its device");
  ok(rn_topo_filter_match("=mlx5_0:2", "mlx5_0:2", "", 2) &&
         !rn_topo_filter_match("=mlx5_0:2", "mlx5_0:1", "", 1),
     "filter: exact name with the verbs port");
}

static void test_find_nic_ports(void) {
  struct rn_topo *t;
  char err[256];
  if (rn_topo_load_file("tests/topo/fixtures/hwloc-dual-port.xml", &t, err, sizeof(err))) {
    ok(0, err);
    return;
  }
  int p1 = rn_topo_find_nic(t, "mlx5_0:1", NULL), p2 = rn_topo_find_nic(t, "mlx5_0:2", NULL);
  ok(p1 >= 0 && p2 >= 0 && p1 != p2 && rn_topo_nic(t, p2)->port == 2,
     "find_nic: device:port names each port of a multi-port device");
  ok(rn_topo_find_nic(t, "mlx5_0", NULL) == p1, "find_nic: the bare device is its first port");
  ok(rn_topo_find_nic(t, "ib1", NULL) == p2, "find_nic: by the port's netdev");
  ok(rn_topo_find_nic(t, "mlx5_0:9", NULL) < 0, "find_nic: no such port");
  ok(strcmp(rn_topo_nic(t, p1)->device, "mlx5_0") == 0 &&
         rn_topo_nic(t, p1)->asic == rn_topo_nic(t, p2)->asic,
     "the two ports share their device and NIC");
  rn_topo_free(t);
}

/* A VPI NIC: port 1 InfiniBand, port 2 Ethernet (from a replayed sysfs). */
static void test_vpi_ports(void) {
  char root[300], d[512], err[256];
  struct rn_topo *t;
  struct rn_plan *p = NULL;
  snprintf(root, sizeof(root), "%s/vpi", tmpdir);
  for (int port = 1; port <= 2; port++) {
    snprintf(d, sizeof(d), "%s/sys/class/infiniband/mlx5_0/ports/%d", root, port);
    mkdirs(d);
  }
  write_tmp("vpi/sys/class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
  write_tmp("vpi/sys/class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n");
  write_tmp("vpi/sys/class/infiniband/mlx5_0/ports/2/link_layer", "Ethernet\n");
  write_tmp("vpi/sys/class/infiniband/mlx5_0/ports/2/rate", "200 Gb/sec (4X HDR)\n");
  if (rn_topo_load_file("tests/topo/fixtures/hwloc-dual-port.xml", &t, err, sizeof(err))) {
    ok(0, err);
    return;
  }
  rn_topo_sysfs_enrich_nics(t, root);
  ok(rn_plan_build(t, NULL, &p, err, sizeof(err)) == 0 && p->ngpus == 1 && p->gpus[0].nrails == 1 &&
         strcmp(rn_topo_nic(t, p->gpus[0].rails[0].nic)->name, "mlx5_0:1") == 0,
     "VPI NIC: the InfiniBand port is the rail, the Ethernet port is not fused to it");
  ok(p && p->nunused == 1 && strstr(p->unused_why[0], "second port of a NIC already used"),
     "VPI NIC: the other port says it is the second port of a NIC already used");
  rn_plan_free(p);
  rn_topo_free(t);
}

/* The plugin's sysfs helpers (topo/sysfs.c) on a replayed tree. */
static void test_sysfs_helpers(void) {
  char root[300], d[600], buf[256], path[512], busid[32], why[128];
  snprintf(root, sizeof(root), "%s/fs2", tmpdir);
  snprintf(d, sizeof(d), "%s/sys/devices/pci0000:00/0000:00:01.0/0000:18:00.0/infiniband/mlx5_0",
           root);
  mkdirs(d);
  snprintf(d, sizeof(d), "%s/sys/class/infiniband", root);
  mkdirs(d);
  snprintf(d, sizeof(d), "%s/sys/class/infiniband/mlx5_0", root);
  int linked = symlink("../../devices/pci0000:00/0000:00:01.0/0000:18:00.0/infiniband/mlx5_0", d);
  snprintf(d, sizeof(d), "%s/sys/class/net/eth9", root);
  mkdirs(d);
  write_tmp("fs2/sys/class/net/eth9/speed", "25000\n");
  snprintf(d, sizeof(d), "%s/sys/module/nvidia", root);
  mkdirs(d);
  setenv("RAILNET_FSROOT", root, 1);
  ok(rn_sysfs_read("sys/class/net/eth9/speed", buf, sizeof(buf)) == 0 && strcmp(buf, "25000") == 0,
     "sysfs_read reads under RAILNET_FSROOT");
  ok(rn_sysfs_read("sys/class/net/none/speed", buf, sizeof(buf)) != 0,
     "sysfs_read fails on a missing file");
  ok(linked == 0 && rn_sysfs_realpath("sys/class/infiniband/mlx5_0", path, sizeof(path)) == 0 &&
         strcmp(path, "/sys/devices/pci0000:00/0000:00:01.0/0000:18:00.0/infiniband/mlx5_0") == 0,
     "sysfs_realpath resolves links and drops the root");
  ok(rn_sysfs_pci_parent(path, buf, sizeof(buf), busid, sizeof(busid)) == 0 &&
         strcmp(busid, "0000:18:00.0") == 0 &&
         strcmp(buf, "/sys/devices/pci0000:00/0000:00:01.0/0000:18:00.0") == 0,
     "sysfs_pci_parent finds the nearest PCI function above a device");
  ok(rn_sysfs_pci_parent("/sys/devices/virtual/net/lo", buf, sizeof(buf), busid, sizeof(busid)) !=
         0,
     "sysfs_pci_parent: a virtual device has none");
  ok(rn_topo_sysfs_gdr_probe(root, why, sizeof(why)) == 0 && strstr(why, "no peermem"),
     "GDR probe: NVIDIA driver without a peermem module says so");
  snprintf(d, sizeof(d), "%s/sys/module/nv_peer_mem", root);
  mkdirs(d);
  ok(rn_topo_sysfs_gdr_probe(root, why, sizeof(why)) == 1 && strstr(why, "nv_peer_mem"),
     "GDR probe: the old nv_peer_mem module counts");
  unsetenv("RAILNET_FSROOT");
  struct rn_topo *t;
  char err[256];
  if (rn_topo_load_file("tests/topo/fixtures/hwloc-small.xml", &t, err, sizeof(err)) == 0) {
    rn_topo_sysfs_enrich_nics(t, root);
    const struct rn_topo_nic *e = rn_topo_nic(t, rn_topo_find_nic(t, "eth9", NULL));
    ok(e && e->speed_mbps == 25000 && e->link == RN_TOPO_LINK_ETH,
       "sysfs replay: a netdev's speed and Ethernet link");
    rn_topo_free(t);
  }
}

/* A saved report or log whose nvidia-smi matrix starts past the first
 * 16 KiB (the bytes format detection used to look at). */
static void test_smi_long_report(void) {
  size_t cap = 24 * 1024, len = 0;
  char *text = malloc(cap), err[256] = "";
  if (!text) return;
  len += (size_t)snprintf(text, cap, "## Environment\n");
  for (int i = 0; len + 64 < 20 * 1024; i++)
    len += (size_t)snprintf(text + len, cap - len, "package-%03d                   %d.%d.%d\n", i,
                            i % 7, i % 13, i % 5);
  snprintf(text + len, cap - len,
           "$ nvidia-smi topo -m\n"
           "        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity\n"
           "GPU0     X      NODE    PIX     0-31            0\n"
           "GPU1    NODE     X      NODE    0-31            0\n"
           "NIC0    PIX     NODE     X\n");
  struct rn_topo *t = NULL;
  int rc = rn_topo_load_file(write_tmp("long-report.txt", text), &t, err, sizeof(err));
  ok(rc == 0 && rn_topo_ngpus(t) == 2 && rn_topo_nnics(t) == 1,
     "nvidia-smi: a matrix past the first 16 KiB of a saved report is found");
  if (rc) printf("# err: %s\n", err);
  rn_topo_free(t);
  free(text);
}

static void test_hwloc_grace(void) {
  struct rn_topo *t;
  char err[256];
  if (rn_topo_load_file("tests/topo/fixtures/hwloc-grace.xml", &t, err, sizeof(err))) {
    ok(0, err);
    return;
  }
  ok(rn_topo_nvlinked(t, 0, 1) && rn_topo_gpu(t, 0)->c2c &&
         strcmp(rn_topo_gpu(t, 1)->uuid, "GPU-66666666-2222-3333-4444-555555555555") == 0,
     "hwloc: NVLinkBandwidth distances give NVLinks, GPU memory nodes C2C, OS devices UUIDs");
  rn_topo_free(t);
}

static void rn_count_line(void *ctx, const char *line) {
  int *n = ctx;
  (*n) += strncmp(line, "plan: ", 6) == 0;
}

static void test_plan_log(void) {
  struct rn_topo *t;
  struct rn_plan *p;
  char err[256];
  int lines = 0;
  if (rn_topo_load_file("tests/topo/fixtures/dgx-h100-like.xml", &t, err, sizeof(err))) {
    ok(0, err);
    return;
  }
  if (rn_plan_build(t, NULL, &p, err, sizeof(err))) {
    ok(0, err);
    rn_topo_free(t);
    return;
  }
  rn_plan_log(t, p, rn_count_line, &lines);
  /* 8 rails, 8 devices, 4 unused NICs, no notes. */
  ok(lines == 20, "plan log: one line per rail, device and unused NIC");
  ok(rn_plan_path(p, 0, 0) == RN_PATH_PIX && rn_plan_path(p, 0, 99) == RN_PATH_DIS &&
         rn_plan_path(NULL, 0, 0) == RN_PATH_DIS,
     "plan_path: the matrix cell, DIS out of range");
  char via[96];
  ok(rn_topo_path(t, 0, 6, via, sizeof(via)) == RN_PATH_SYS && strcmp(via, "NUMA 0 -> NUMA 1") == 0,
     "path across NUMA nodes is SYS and names both");
  ok(rn_topo_path(t, 0, 99, via, sizeof(via)) == RN_PATH_DIS && via[0] == '\0',
     "path to a NIC that does not exist is DIS");
  ok(rn_topo_path_bw(t, 0, 0) > 47 && rn_topo_path_bw(t, 0, 0) < 49,
     "path bandwidth in NCCL's units: Gen5 x16 = 48 GB/s under a 400 Gb/s NIC");
  ok(rn_topo_nhosts(t) == 1 && strcmp(rn_topo_host_name(t, 0), "") == 0 &&
         strcmp(rn_topo_host_name(t, 5), "") == 0,
     "one unnamed host");
  rn_plan_free(p);
  rn_topo_free(t);
}

static void test_live(void) {
  struct rn_topo *t;
  struct rn_plan *p;
  char err[256];
  /* hwloc reads the machine from sysfs: without it there is nothing to
   * discover (a skip, decided before the call); with it a failure is one. */
  if (access("/sys/devices/system/cpu", R_OK) != 0) {
    printf("ok %d - # SKIP live discovery: no sysfs (/sys/devices/system/cpu) on this host\n",
           ++n_tests);
    return;
  }
  if (rn_topo_load_live(&t, err, sizeof(err))) {
    printf("# %s\n", err);
    ok(0, "live machine loads through hwloc");
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
  test_gdr_levels();
  test_detour_path();
  test_settings();
  test_cuda_visible();
  test_filter_ids();
  test_find_nic_ports();
  test_vpi_ports();
  test_plan_log();
  test_sysfs_helpers();
  test_hwloc_grace();
  test_smi_long_report();
  test_live();
  test_threads();
  printf("1..%d\n", n_tests);
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
  return n_failed ? 1 : 0;
}
