/* The plugin's device table built from the rail planner (plugin/devices.c),
 * against the team's topology fixtures: one device per rail set, fused
 * devices named with '+', storage NICs left out, GDR from the plan. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/rn_test.h"
#include "railnet/devices.h"
#include "railnet/log.h"
#include "railnet/param.h"
#include "railnet/topo.h"

/* NICs as a verbs transport would report them: every NIC in the file,
 * each with a made-up sysfs path ending in its bus id. */
static int fake_nics(const char *file, struct rn_nic *nics) {
  char err[512];
  struct rn_topo *t;
  if (rn_topo_load_file(file, &t, err, sizeof(err)) != 0) {
    printf("# %s\n", err);
    return -1;
  }
  int n = rn_topo_nnics(t);
  for (int i = 0; i < n && i < RN_MAX_NICS; i++) {
    const struct rn_topo_nic *m = rn_topo_nic(t, i);
    memset(&nics[i], 0, sizeof(nics[i]));
    snprintf(nics[i].name, sizeof(nics[i].name), "%s", m->name);
    snprintf(nics[i].busid, sizeof(nics[i].busid), "%s", m->busid);
    snprintf(nics[i].pci_path, sizeof(nics[i].pci_path), "/sys/devices/pci0000:00/%s", m->busid);
    nics[i].speed_mbps = m->speed_mbps;
    nics[i].port = m->port > 0 ? m->port : 1; /* verbs NICs: the port, 1-based */
    nics[i].ptr_support = NCCL_PTR_HOST | NCCL_PTR_CUDA;
    nics[i].reg_is_global = 1;
    nics[i].max_comms = 1024;
    nics[i].table_index = i;
  }
  rn_topo_free(t);
  return n;
}

/* The last WARN the device table logged. */
static char last_warn[1024];
static void capture(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                    const char *fmt, ...) {
  (void)flags, (void)file, (void)line;
  if (level != NCCL_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_warn, sizeof(last_warn), fmt, ap);
  va_end(ap);
}

static int build(const char *file, const char *env_extra, struct rn_nic *nics, int nnics,
                 struct rn_vdev *v, int *nv) {
  if (file != NULL)
    setenv("RAILNET_TOPO_FILE", file, 1);
  else
    unsetenv("RAILNET_TOPO_FILE");
  unsetenv("RAILNET_NICS");
  unsetenv("RAILNET_GDR_LEVEL");
  if (env_extra != NULL) putenv((char *)env_extra);
  rn_params_reload();
  return rn_devices_build(nics, nnics, v, nv) == ncclSuccess ? 0 : -1;
}

static int has_vdev(const struct rn_vdev *v, int nv, const char *name) {
  for (int i = 0; i < nv; i++)
    if (strcmp(v[i].name, name) == 0) return i;
  return -1;
}

/* The NICs carried by the devices, sorted and comma-joined ("mlx5_0,mlx5_10"). */
static const char *exposed_nics(const struct rn_vdev *v, int nv) {
  static char out[1024];
  const char *names[RN_MAX_NICS];
  int n = 0;
  for (int i = 0; i < nv; i++)
    for (int k = 0; k < v[i].rails.n && n < RN_MAX_NICS; k++) names[n++] = v[i].rails.nic[k]->name;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
      const char *t = names[j];
      names[j] = names[j - 1];
      names[j - 1] = t;
    }
  out[0] = '\0';
  for (int i = 0; i < n; i++)
    snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", i ? "," : "", names[i]);
  return out;
}

/* 1 when the comma list `names` shares a name with `list`. */
static int lists_meet(const char *names, const char *list) {
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", names);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    size_t len = strlen(t);
    for (const char *p = list; (p = strstr(p, t)) != NULL; p += len)
      if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == '\0')) return 1;
  }
  return 0;
}

/* 1 when every name of the comma list `names` is in `list`. */
static int list_has_all(const char *names, const char *list) {
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", names);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
    if (!lists_meet(t, list)) return 0;
  return 1;
}

/* The NICs the DGX-H100-like fixture exposes under RAILNET_NICS=spec;
 * "(build failed)", with *built 0, when the devices do not build. */
static const char *nics_exposed(const char *spec, struct rn_nic *nics, int n, struct rn_vdev *v,
                                int *built) {
  static char keep[4][128]; /* putenv keeps the pointer */
  static int nkeep;
  char *e = keep[nkeep++ % 4];
  int nv = 0;
  snprintf(e, 128, "RAILNET_NICS=%s", spec);
  *built = build("tests/topo/fixtures/dgx-h100-like.xml", e, nics, n, v, &nv) == 0;
  return *built ? exposed_nics(v, nv) : "(build failed)";
}

/* RAILNET_NICS=spec on the DGX-H100-like fixture exposes exactly `want`. */
static void nics_filter_case(const char *spec, const char *want, const char *why,
                             struct rn_nic *nics, int n, struct rn_vdev *v) {
  int built;
  const char *got = nics_exposed(spec, nics, n, v, &built);
  tap_result(built && strcmp(got, want) == 0, "RAILNET_NICS=%s exposes exactly %s (%s); got %s",
             spec, want, why, got);
}

/* RAILNET_NICS=spec never exposes a NIC of `gone`, and still exposes every
 * NIC of `kept` (may be NULL). */
static void nics_exclude_case(const char *spec, const char *gone, const char *kept, const char *why,
                              struct rn_nic *nics, int n, struct rn_vdev *v) {
  int built;
  const char *got = nics_exposed(spec, nics, n, v, &built);
  tap_result(built && !lists_meet(gone, got) && (kept == NULL || list_has_all(kept, got)),
             "RAILNET_NICS=%s never exposes %s%s%s (%s); got %s", spec, gone,
             kept ? " and keeps " : "", kept ? kept : "", why, got);
}

/* ---- one view: railnet-topo --json lists the devices the plugin builds --
 * The CLI and the plugin read the same file and the same variables through
 * the same reader; each fixture x environment must give the same devices,
 * by name (members joined with '+', lead first). */
static int cmp_str(const void *a, const void *b) { return strcmp(a, b); }

/* The CLI inherits this process's environment: the same file and knobs. */
static int cli_vdevs(char (*names)[256], int max) {
  const char *b = getenv("RN_BUILD");
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "'%s/railnet-topo' --json 2>/dev/null", b ? b : "build");
  FILE *f = popen(cmd, "r");
  if (f == NULL) return -1;
  static char out[1 << 20];
  size_t n = fread(out, 1, sizeof(out) - 1, f);
  out[n] = '\0';
  if (pclose(f) != 0) return -1;
  char *p = strstr(out, "\"vdevices\":["), *end = strstr(out, "\"unused_nics\"");
  if (p == NULL || end == NULL) return -1;
  int k = 0;
  while ((p = strstr(p, "{\"name\":\"")) != NULL && p < end && k < max) {
    p += 9;
    char *q = strchr(p, '"');
    if (q == NULL) return -1;
    snprintf(names[k++], 256, "%.*s", (int)(q - p), p);
  }
  qsort(names, (size_t)k, sizeof(names[0]), cmp_str);
  return k;
}

static void one_view_case(const char *fixture, const char *env) {
  static struct rn_nic fn[RN_MAX_NICS];
  static struct rn_vdev fv[RN_MAX_VDEVS];
  static char cli[RN_MAX_VDEVS][256], plug[RN_MAX_VDEVS][256];
  char path[256];
  snprintf(path, sizeof(path), "tests/topo/fixtures/%s", fixture);
  int n = fake_nics(path, fn), nv = 0;
  unsetenv("CUDA_VISIBLE_DEVICES");
  unsetenv("RAILNET_STANDBY");
  unsetenv("NCCL_NET_GDR_LEVEL");
  int built = n > 0 && build(path, env, fn, n, fv, &nv) == 0;
  for (int i = 0; i < nv; i++) snprintf(plug[i], sizeof(plug[i]), "%.255s", fv[i].name);
  qsort(plug, (size_t)nv, sizeof(plug[0]), cmp_str);
  int nc = built ? cli_vdevs(cli, RN_MAX_VDEVS) : -1;
  int same = built && nc == nv;
  for (int i = 0; same && i < nv; i++) same = strcmp(cli[i], plug[i]) == 0;
  if (!tap_result(same,
                  "one view: %s%s%s: railnet-topo --json and the plugin list the same %d device(s)",
                  fixture, env ? " with " : "", env ? env : "", nv)) {
    for (int i = 0; i < nv; i++) printf("#   plugin: %s\n", plug[i]);
    for (int i = 0; i < nc; i++) printf("#   cli:    %s\n", cli[i]);
  }
  if (env != NULL) {
    char var[64];
    snprintf(var, sizeof(var), "%.*s", (int)strcspn(env, "="), env);
    unsetenv(var);
  }
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* TAP survives an exit without flushing */
  static struct rn_nic nics[RN_MAX_NICS];
  static struct rn_vdev v[RN_MAX_VDEVS];
  int nv = 0;
  printf("1..%d\n", 32 + 18);
  rn_log_set(capture);
  const char *dgx = "tests/topo/fixtures/dgx-h100-like.xml";
  int n = fake_nics(dgx, nics);
  tap_result(n == 12, "DGX-H100-like fixture gives 12 NICs (%s)", dgx);
  tap_result(build(dgx, NULL, nics, n, v, &nv) == 0 && nv == 8, "%s",
             "one device per GPU rail set: 8");
  int i0 = has_vdev(v, nv, "mlx5_0");
  tap_result(i0 >= 0 && v[i0].rails.n == 1 && (v[i0].ptr_support & NCCL_PTR_CUDA) &&
                 strstr(v[i0].why, "PIX") != NULL,
             "mlx5_0 is a one-rail device with GDR, and says why: %s", i0 >= 0 ? v[i0].why : "-");
  tap_result(i0 >= 0 && strcmp(v[i0].pci_path, "/sys/devices/pci0000:00/0000:18:00.0") == 0,
             "pciPath is the lead NIC's sysfs path (%s)", i0 >= 0 ? v[i0].pci_path : "-");
  tap_result(has_vdev(v, nv, "mlx5_1") < 0 && has_vdev(v, nv, "mlx5_2") < 0 &&
                 has_vdev(v, nv, "mlx5_7") < 0 && has_vdev(v, nv, "mlx5_8") < 0,
             "%s", "storage NICs mlx5_1/2/7/8 are not exposed");
  /* NCCL_IB_HCA syntax, as NCCL's matchIfList reads it: an entry without
   * '=' is a prefix, so mlx5_1 also selects mlx5_10 and mlx5_11; '=' makes
   * every entry exact; '^' excludes; a name the filter selects is exposed
   * even when the plan would hide it as a storage NIC. */
  nics_filter_case("mlx5_0,mlx5_1", "mlx5_0,mlx5_1,mlx5_10,mlx5_11",
                   "prefix match, as NCCL: mlx5_1 also selects mlx5_10 and mlx5_11", nics, n, v);
  nics_filter_case("=mlx5_0,mlx5_1", "mlx5_0,mlx5_1", "'=' makes every entry exact", nics, n, v);
  /* With '^' the planner chooses among what is left (a GPU that loses its
   * own NIC takes the nearest one), so only the exclusion is asserted. */
  nics_exclude_case("^mlx5_1", "mlx5_1,mlx5_10,mlx5_11", NULL,
                    "prefix: mlx5_10 and mlx5_11 go with mlx5_1", nics, n, v);
  nics_exclude_case("^=mlx5_1", "mlx5_1", "mlx5_10,mlx5_11", "exact: only mlx5_1", nics, n, v);
  tap_result(build(dgx, "RAILNET_GDR_LEVEL=0", nics, n, v, &nv) == 0 && nv == 8 &&
                 !(v[0].ptr_support & NCCL_PTR_CUDA),
             "%s", "RAILNET_GDR_LEVEL=0 (LOC) turns GDR off for PIX rails");
  /* Two GPUs share mlx5_0: one PIX to it (GDR at PXB), one PHB (no GDR
   * for that pair).  NCCL decides each pair itself, so the device must
   * still advertise GPU memory; the all-pairs AND would have made it
   * host-only for both. */
  {
    static struct rn_nic snics[RN_MAX_NICS];
    const char *shared = "tests/topo/fixtures/shared-nic-gdr.xml";
    int sn = fake_nics(shared, snics);
    int si = -1;
    int built = sn > 0 && build(shared, NULL, snics, sn, v, &nv) == 0;
    if (built) si = has_vdev(v, nv, "mlx5_0");
    tap_result(si >= 0 && (v[si].ptr_support & NCCL_PTR_CUDA),
               "a NIC shared by a PIX and a PHB GPU advertises GPU memory (NCCL gates each pair)");
    built = sn > 0 && build(shared, "RAILNET_GDR_LEVEL=0", snics, sn, v, &nv) == 0;
    si = built ? has_vdev(v, nv, "mlx5_0") : -1;
    tap_result(si >= 0 && !(v[si].ptr_support & NCCL_PTR_CUDA), "%s",
               "... and not when RAILNET_GDR_LEVEL=LOC leaves no pair with GDR");
  }
  struct rn_nic only_host[RN_MAX_NICS];
  memcpy(only_host, nics, sizeof(only_host));
  for (int i = 0; i < n; i++) only_host[i].ptr_support = NCCL_PTR_HOST;
  tap_result(
      build(dgx, NULL, only_host, n, v, &nv) == 0 && nv == 8 && v[0].ptr_support == NCCL_PTR_HOST,
      "%s", "a NIC whose probe found no GDR stays HOST-only even on a PIX path");

  const char *p5 = "tests/topo/fixtures/p5-like.xml";
  n = fake_nics(p5, nics);
  tap_result(n == 32 && build(p5, NULL, nics, n, v, &nv) == 0 && nv == 8,
             "p5-like: 8 devices from 32 NICs (%s)", p5);
  int f = has_vdev(v, nv, "rdmap79s0+rdmap80s0+rdmap81s0+rdmap82s0");
  tap_result(f >= 0 && v[f].rails.n == 4 && v[f].speed == 400000, "%s",
             "p5-like: 4 NICs fused into one device named with '+', speeds summed");
  tap_result(f >= 0 && v[f].reg_is_global == 1, "%s",
             "regIsGlobal comes from the transport's NICs (all global: the device is)");
  for (int i = 0; i < n; i++)
    if (strcmp(nics[i].name, "rdmap81s0") == 0) nics[i].reg_is_global = 0;
  f = build(p5, NULL, nics, n, v, &nv) == 0
          ? has_vdev(v, nv, "rdmap79s0+rdmap80s0+rdmap81s0+rdmap82s0")
          : -1;
  tap_result(f >= 0 && v[f].reg_is_global == 0, "%s",
             "a fused device reports regIsGlobal only when every rail has it");

  /* ncclNet v12 ids from the plan (topo/plan.c: a GPU's rail set is one
   * rail, numbered in GPU bus order; a NIC's place in the set is its plane;
   * a fused device gets NCCL's virtual plane mask 1<<14 | one bit per
   * plane).  p5-like: 8 GPUs, 4 NICs under each GPU's switch. */
  n = fake_nics(p5, nics);
  f = build(p5, NULL, nics, n, v, &nv) == 0
          ? has_vdev(v, nv, "rdmap79s0+rdmap80s0+rdmap81s0+rdmap82s0")
          : -1;
  tap_result(f >= 0 && v[f].rail_id == 0 && v[f].plane_id == (1 << 14 | 0xf), "%s",
             "p5-like: the first GPU's fused device is rail 0, plane mask 0x400f");
  int nic_ids_ok = f >= 0 && v[f].rails.n == 4;
  for (int k = 0; nic_ids_ok && k < 4; k++)
    nic_ids_ok = v[f].nic_rail[k] == 0 && v[f].nic_plane[k] == k;
  tap_result(nic_ids_ok, "%s", "... and each of its NICs keeps rail 0 and its place as plane 0..3");
  int last = has_vdev(v, nv, "rdmap198s0+rdmap199s0+rdmap200s0+rdmap201s0");
  tap_result(last >= 0 && v[last].rail_id == 7 && v[last].plane_id == (1 << 14 | 0xf), "%s",
             "p5-like: the last GPU's device is rail 7, same plane mask");
  /* makeVDevice over planner devices: the same rule over every rail. */
  struct rn_vprops two = {.ndevs = 2, .devs = {f, last}};
  int md = -1;
  tap_result(f >= 0 && last >= 0 && rn_devices_merge(v, &nv, &two, &md) == ncclSuccess &&
                 v[md].rail_id == -1 && v[md].plane_id == (1 << 14 | 0xf),
             "%s", "merging rails 0 and 7: no common rail (-1), planes 0..3 in the mask");
  struct rn_vprops one = {.ndevs = 1, .devs = {f}};
  tap_result(f >= 0 && rn_devices_merge(v, &nv, &one, &md) == ncclSuccess && v[md].rail_id == 0 &&
                 v[md].plane_id == v[f].plane_id,
             "%s", "a merge of one fused device keeps its ids");
  /* The transport lacks one planned NIC: the rule over the NICs it has. */
  n = fake_nics(p5, nics);
  for (int i = 0, k = 0; i < n; i++)
    if (strcmp(nics[i].name, "rdmap82s0") != 0) nics[k++] = nics[i];
  f = build(p5, NULL, nics, n - 1, v, &nv) == 0 ? has_vdev(v, nv, "rdmap79s0+rdmap80s0+rdmap81s0")
                                                : -1;
  tap_result(f >= 0 && v[f].rail_id == 0 && v[f].plane_id == (1 << 14 | 0x7), "%s",
             "without rdmap82s0 the first device is rail 0, planes 0..2 only (0x4007)");
  n = fake_nics(dgx, nics);
  int one_rail = build(dgx, NULL, nics, n, v, &nv) == 0 ? has_vdev(v, nv, "mlx5_0") : -1;
  tap_result(one_rail >= 0 && v[one_rail].rail_id == 0 && v[one_rail].plane_id == 0, "%s",
             "DGX-H100-like: a one-NIC device is its GPU's rail, plane 0 (no virtual bit)");
  int sixth = has_vdev(v, nv, "mlx5_6");
  tap_result(sixth >= 0 && v[sixth].rail_id == 4, "%s",
             "... rails follow GPU bus order: mlx5_6 (the fifth GPU's) is rail 4");

  /* NCCL_IB_HCA, RAILNET_NICS's fallback, selects verbs devices only:
   * NCCL's socket transport never reads it, so TCP interfaces (port 0)
   * stay devices whatever it says; RAILNET_NICS filters them. */
  {
    static struct rn_nic tcp[2];
    memset(tcp, 0, sizeof(tcp));
    for (int i = 0; i < 2; i++) {
      snprintf(tcp[i].name, sizeof(tcp[i].name), "tcpnic%d", i); /* on no host */
      tcp[i].speed_mbps = 10000;
      tcp[i].ptr_support = NCCL_PTR_HOST;
      tcp[i].table_index = i;
    }
    int built = build(NULL, "NCCL_IB_HCA=mlx5_0", tcp, 2, v, &nv) == 0;
    tap_result(built && nv == 2, "NCCL_IB_HCA=mlx5_0 leaves both TCP interfaces devices (%d)", nv);
    built = build(NULL, "RAILNET_NICS=tcpnic1", tcp, 2, v, &nv) == 0;
    tap_result(built && nv == 1 && strcmp(v[0].name, "tcpnic1") == 0,
               "RAILNET_NICS=tcpnic1 filters them: %d device(s), %s", nv, nv ? v[0].name : "-");
    unsetenv("NCCL_IB_HCA");
    n = fake_nics(dgx, nics);
    built = build(dgx, "NCCL_IB_HCA==mlx5_0", nics, n, v, &nv) == 0;
    tap_result(built && nv == 1 && strcmp(v[0].name, "mlx5_0") == 0,
               "NCCL_IB_HCA==mlx5_0 still filters verbs devices: %d device(s), %s", nv,
               nv ? v[0].name : "-");
    unsetenv("NCCL_IB_HCA");
  }
  /* No topology file named: the one a GPU virtual machine's host
   * publishes, as NCCL reads it (under RAILNET_FSROOT here). */
  {
    char root[] = "/tmp/rn-vmtopo.XXXXXX", dir[256], cmd[640];
    int made = mkdtemp(root) != NULL;
    snprintf(dir, sizeof dir, "%s/var/run/nvidia-topologyd", root);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s %s/virtualTopology.xml", dir, dgx, dir);
    made = made && system(cmd) == 0;
    setenv("RAILNET_FSROOT", root, 1);
    n = fake_nics(dgx, nics);
    int built = made && build(NULL, NULL, nics, n, v, &nv) == 0;
    tap_result(built && nv == 8 && has_vdev(v, nv, "mlx5_0") >= 0,
               "no topology file set: nvidia-topologyd's virtualTopology.xml plans the devices "
               "(%d)", nv);
    unsetenv("RAILNET_FSROOT");
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (made && system(cmd) != 0) diag("could not remove %s", root);
  }
  /* A transport NIC the topology does not know (a veth, say). */
  n = fake_nics(dgx, nics);
  memset(&nics[n], 0, sizeof(nics[n]));
  snprintf(nics[n].name, sizeof(nics[n].name), "veth0");
  nics[n].speed_mbps = 10000;
  nics[n].ptr_support = NCCL_PTR_HOST;
  tap_result(build(dgx, NULL, nics, n + 1, v, &nv) == 0 && has_vdev(v, nv, "veth0") < 0 && nv == 8,
             "%s", "a NIC outside the topology stays hidden when GPUs have planned rails");
  int veth = build(dgx, "RAILNET_NICS=veth0,mlx5_0", nics, n + 1, v, &nv) == 0
                 ? has_vdev(v, nv, "veth0")
                 : -1;
  tap_result(veth >= 0, "%s", "... and is exposed when RAILNET_NICS names it");
  tap_result(veth >= 0 && v[veth].rail_id == -1 && v[veth].plane_id == -1 &&
                 v[veth].nic_rail[0] == -1 && v[veth].nic_plane[0] == -1,
             "%s", "... with no rail or plane (NCCL_NET_ID_UNDEF): the plan knows nothing of it");
  tap_result(build("tests/topo/fixtures/no-nics.xml", NULL, nics + n, 1, v, &nv) == 0 && nv == 1 &&
                 strcmp(v[0].name, "veth0") == 0,
             "%s", "with no planned rails every transport NIC is its own device");
  last_warn[0] = '\0';
  tap_result(build("/nonexistent/topo.xml", NULL, nics, n, v, &nv) == 0 && nv >= 1 &&
                 strstr(last_warn, "RAILNET_TOPO_FILE") && strstr(last_warn, "/nonexistent"),
             "an unreadable RAILNET_TOPO_FILE warns, naming it, and falls back to the live "
             "machine: %s",
             last_warn);
  /* NCCL's own variable, read by the same settings reader as railnet-topo */
  n = fake_nics(dgx, nics);
  tap_result(
      build(NULL, "NCCL_TOPO_FILE=tests/topo/fixtures/dgx-h100-like.xml", nics, n, v, &nv) == 0 &&
          nv == 8 && has_vdev(v, nv, "mlx5_0") >= 0,
      "%s", "NCCL_TOPO_FILE is read when RAILNET_TOPO_FILE is unset");
  last_warn[0] = '\0';
  tap_result(build(NULL, "NCCL_TOPO_FILE=/nonexistent/nccl.xml", nics, n, v, &nv) == 0 &&
                 strstr(last_warn, "NCCL_TOPO_FILE") != NULL,
             "an unreadable NCCL_TOPO_FILE's WARN names NCCL_TOPO_FILE: %s", last_warn);
  unsetenv("NCCL_TOPO_FILE");
  static const char *const views[][2] = {
      {"dgx-h100-like.xml", NULL},
      {"dgx-h100-like.xml", "RAILNET_NICS=mlx5_0,mlx5_1"},
      {"dgx-h100-like.xml", "RAILNET_NICS=^mlx5_3"},
      {"dgx-h100-like.xml", "CUDA_VISIBLE_DEVICES=0,3"},
      {"dgx-h100-like.xml", "CUDA_VISIBLE_DEVICES="},
      {"dgx-h100-like.xml", "NCCL_NET_GDR_LEVEL=PHB"},
      {"p5-like.xml", NULL},
      {"p5-like.xml", "RAILNET_STANDBY=0"},
      {"shared-nic-gdr.xml", NULL},
      {"gb200-like.xml", NULL},
      {"mixed-speed.xml", NULL},
      {"mixed-link.xml", NULL},
      {"dual-function.xml", NULL},
      {"hgx-a100-bcm.xml", "RAILNET_GDR_LEVEL=PIX"},
  };
  for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++)
    one_view_case(views[i][0], views[i][1]);
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
