/* The plugin's device table built from the rail planner (plugin/devices.c),
 * against the team's topology fixtures: one device per rail set, fused
 * devices named with '+', storage NICs left out, GDR from the plan. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/rn_test.h"
#include "railnet/devices.h"
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
    nics[i].ptr_support = NCCL_PTR_HOST | NCCL_PTR_CUDA;
    nics[i].reg_is_global = 1;
    nics[i].max_comms = 1024;
    nics[i].table_index = i;
  }
  rn_topo_free(t);
  return n;
}

static int build(const char *file, const char *env_extra, struct rn_nic *nics, int nnics,
                 struct rn_vdev *v, int *nv) {
  setenv("RAILNET_TOPO_FILE", file, 1);
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

/* RAILNET_NICS=spec on the DGX-H100-like fixture exposes exactly `want`. */
static void nics_filter_case(const char *spec, const char *want, const char *why,
                             struct rn_nic *nics, int n, struct rn_vdev *v) {
  static char keep[4][128]; /* putenv keeps the pointer */
  static int nkeep;
  char *e = keep[nkeep++ % 4];
  int nv = 0;
  snprintf(e, 128, "RAILNET_NICS=%s", spec);
  int built = build("tests/topo/fixtures/dgx-h100-like.xml", e, nics, n, v, &nv) == 0;
  const char *got = built ? exposed_nics(v, nv) : "(build failed)";
  tap_result(built && strcmp(got, want) == 0, "RAILNET_NICS=%s exposes exactly %s (%s); got %s", spec, want,
     why, got);
}

/* RAILNET_NICS=spec never exposes a NIC of `gone`, and still exposes every
 * NIC of `kept` (may be NULL). */
static void nics_exclude_case(const char *spec, const char *gone, const char *kept, const char *why,
                              struct rn_nic *nics, int n, struct rn_vdev *v) {
  static char keep[4][128]; /* putenv keeps the pointer */
  static int nkeep;
  char *e = keep[nkeep++ % 4];
  int nv = 0;
  snprintf(e, 128, "RAILNET_NICS=%s", spec);
  int built = build("tests/topo/fixtures/dgx-h100-like.xml", e, nics, n, v, &nv) == 0;
  const char *got = built ? exposed_nics(v, nv) : "(build failed)";
  tap_result(built && !lists_meet(gone, got) && (kept == NULL || list_has_all(kept, got)),
     "RAILNET_NICS=%s never exposes %s%s%s (%s); got %s", spec, gone, kept ? " and keeps " : "",
     kept ? kept : "", why, got);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* TAP survives an exit without flushing */
  static struct rn_nic nics[RN_MAX_NICS];
  static struct rn_vdev v[RN_MAX_VDEVS];
  int nv = 0;
  printf("1..19\n");
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

  /* A transport NIC the topology does not know (a veth, say). */
  n = fake_nics(dgx, nics);
  memset(&nics[n], 0, sizeof(nics[n]));
  snprintf(nics[n].name, sizeof(nics[n].name), "veth0");
  nics[n].speed_mbps = 10000;
  nics[n].ptr_support = NCCL_PTR_HOST;
  tap_result(build(dgx, NULL, nics, n + 1, v, &nv) == 0 && has_vdev(v, nv, "veth0") < 0 && nv == 8,
             "%s", "a NIC outside the topology stays hidden when GPUs have planned rails");
  tap_result(build(dgx, "RAILNET_NICS=veth0,mlx5_0", nics, n + 1, v, &nv) == 0 &&
                 has_vdev(v, nv, "veth0") >= 0,
             "%s", "... and is exposed when RAILNET_NICS names it");
  tap_result(build("tests/topo/fixtures/no-nics.xml", NULL, nics + n, 1, v, &nv) == 0 && nv == 1 &&
                 strcmp(v[0].name, "veth0") == 0,
             "%s", "with no planned rails every transport NIC is its own device");
  tap_result(build("/nonexistent/topo.xml", NULL, nics, n, v, &nv) == 0 && nv >= 1, "%s",
             "an unreadable RAILNET_TOPO_FILE warns and falls back to the live machine");
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
