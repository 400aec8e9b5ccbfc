/* The device table: the transport's NICs grouped into virtual devices by
 * the rail planner at init, and the devices NCCL merges with makeVDevice,
 * both folded together by one helper.  The caller locks (see devices.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "railnet/check.h"
#include "railnet/devices.h"
#include "railnet/param.h"
#include "railnet/topo.h"

static void rn_devices_info(void *ctx, const char *line) {
  (void)ctx;
  RN_INFO(NCCL_INIT | NCCL_NET, "%s", line);
}

/* The planner's settings, read by the same reader railnet-topo uses, so
 * both plan alike from the same environment.  Only what the parameter
 * table has not logged already is logged here. */
static void rn_devices_settings(struct rn_topo_settings *s) {
  rn_topo_settings_read(s);
  for (int i = 0; i < s->nwarn; i++)
    if (!(s->warn_in_table & (1u << i))) RN_WARN("%s", s->warn[i]);
  for (int i = 0; i < s->ninfo; i++)
    if (!(s->info_in_table & (1u << i))) RN_INFO(NCCL_ENV, "%s", s->info[i]);
}

/* Fold part's rails into v: names joined with '+', speeds summed, the
 * pointer types, global registration and comm count every part supports,
 * a flush if any part needs one; the first part gives the PCI path, GUID
 * and port; each rail keeps its own rail and plane ids (the device's own
 * are the caller's to set).  -1 when the rails would not fit in one
 * device. */
static int rn_devices_fold(struct rn_vdev *v, const struct rn_vdev *part) {
  if (v->rails.n + part->rails.n > RN_MAX_RAILS) return -1;
  if (v->rails.n == 0) {
    snprintf(v->pci_path, sizeof(v->pci_path), "%s", part->pci_path);
    v->guid = part->guid;
    v->port = part->port;
    v->ptr_support = part->ptr_support;
    v->reg_is_global = part->reg_is_global;
    v->max_comms = part->max_comms;
  } else {
    v->ptr_support &= part->ptr_support;
    v->reg_is_global &= part->reg_is_global;
    if (part->max_comms < v->max_comms) v->max_comms = part->max_comms;
  }
  v->force_flush |= part->force_flush;
  v->speed += part->speed;
  size_t len = strlen(v->name);
  snprintf(v->name + len, sizeof(v->name) - len, "%s%s", v->rails.n ? "+" : "", part->name);
  for (int r = 0; r < part->rails.n; r++) {
    v->nic_rail[v->rails.n] = part->nic_rail[r];
    v->nic_plane[v->rails.n] = part->nic_plane[r];
    v->rails.nic[v->rails.n++] = part->rails.nic[r];
  }
  return 0;
}

/* The plan's rail and plane ids of the NICs of one device, for
 * rn_devices_add; every id undefined without a plan. */
struct rn_devices_ids {
  int nic_rail[RN_MAX_RAILS], nic_plane[RN_MAX_RAILS];
  int rail_id, plane_id;
};
static const struct rn_devices_ids rn_devices_no_ids = {
    .nic_rail = {-1, -1, -1, -1, -1, -1, -1, -1},
    .nic_plane = {-1, -1, -1, -1, -1, -1, -1, -1},
    .rail_id = -1,
    .plane_id = -1};
_Static_assert(RN_MAX_RAILS == 8, "rn_devices_no_ids lists one -1 per rail");

/* Append one virtual device made of the given transport NICs. */
static void rn_devices_add(struct rn_vdev *vdevs, int *nvdevs, const struct rn_nic *nics,
                           const int *members, int n, int gdr, const struct rn_devices_ids *ids,
                           const char *why) {
  struct rn_vdev *v = &vdevs[*nvdevs];
  memset(v, 0, sizeof(*v));
  for (int i = 0; i < n; i++) {
    const struct rn_nic *m = &nics[members[i]];
    struct rn_vdev one = {.rails = {.n = 1, .nic = {m}},
                          .speed = m->speed_mbps,
                          .ptr_support = m->ptr_support,
                          .force_flush = m->force_flush,
                          .reg_is_global = m->reg_is_global,
                          .guid = m->guid,
                          .port = m->port,
                          .max_comms = m->max_comms,
                          .nic_rail = {ids->nic_rail[i]},
                          .nic_plane = {ids->nic_plane[i]}};
    snprintf(one.name, sizeof(one.name), "%s", m->name);
    snprintf(one.pci_path, sizeof(one.pci_path), "%s", m->pci_path);
    (void)rn_devices_fold(v, &one); /* n <= RN_MAX_RAILS: always fits */
  }
  v->ptr_support |= NCCL_PTR_HOST;
  if (!gdr) v->ptr_support = NCCL_PTR_HOST;
  v->rail_id = ids->rail_id;
  v->plane_id = ids->plane_id;
  v->vprops.ndevs = 1;
  v->vprops.devs[0] = *nvdevs;
  snprintf(v->why, sizeof(v->why), "%s", why);
  (*nvdevs)++;
}

static int rn_devices_find_nic(int nnics, const int *model_of, int m) {
  for (int i = 0; i < nnics; i++)
    if (model_of[i] == m) return i;
  return -1;
}

ncclResult_t rn_devices_build(const struct rn_nic *nics, int nnics, struct rn_vdev *vdevs,
                              int *nvdevs) {
  struct rn_topo_settings set;
  rn_devices_settings(&set);
  /* NCCL_IB_HCA picks the devices of NCCL's IB transport, and NCCL's
   * socket transport never reads it: a site-wide value must not leave the
   * TCP transport without devices.  RAILNET_NICS filters both. */
  int rdma = 0;
  for (int i = 0; i < nnics; i++) rdma |= nics[i].port > 0;
  if (!rdma && set.nics[0] && strcmp(set.nics_from, "NCCL_IB_HCA") == 0) {
    RN_INFO(NCCL_INIT | NCCL_NET,
            "NCCL_IB_HCA=%s not applied: it selects RDMA devices and these are TCP interfaces "
            "(RAILNET_NICS or RAILNET_SOCKET_IFNAME select those)",
            set.nics);
    set.nics[0] = '\0';
    set.nics_from[0] = '\0';
  }
  const char *filter = set.nics; /* "" when unset or malformed (warned) */
  char err[512];
  struct rn_topo *topo = NULL;
  struct rn_plan *plan = NULL;
  int model_of[RN_MAX_NICS], cand[RN_MAX_NICS], ncand = 0, used[RN_MAX_NICS] = {0};
  *nvdevs = 0;
  if (nnics > RN_MAX_NICS) nnics = RN_MAX_NICS;
  if (nnics == 0) return ncclSuccess;

  int rc = -1;
  if (set.topo_file[0]) {
    rc = rn_topo_load_file(set.topo_file, &topo, err, sizeof(err));
    if (rc != 0)
      RN_WARN("topology file from %s unusable, reading the live machine instead: %s",
              set.topo_file_from, err);
  }
  if (rc != 0) rc = rn_topo_load_live(&topo, err, sizeof(err));
  if (rc != 0) {
    RN_INFO(NCCL_INIT | NCCL_NET, "topology unavailable (%s): one device per NIC, GDR left to NCCL",
            err);
    topo = NULL;
  }
  for (int i = 0; i < nnics; i++) {
    model_of[i] = -1;
    if (topo == NULL) continue;
    model_of[i] = rn_topo_find_nic(topo, nics[i].name, nics[i].busid[0] ? nics[i].busid : NULL);
    if (model_of[i] < 0 && nics[i].netdev[0])
      model_of[i] = rn_topo_find_nic(topo, nics[i].netdev, NULL);
    if (model_of[i] >= 0)
      cand[ncand++] = model_of[i];
    else
      RN_INFO(NCCL_INIT | NCCL_NET, "%s: not in the %s topology (virtual or hidden NIC)",
              nics[i].name, rn_topo_source(topo));
  }
  int ngpus = topo ? rn_topo_ngpus(topo) : 0;
  if (topo != NULL && ncand > 0) {
    struct rn_plan_opts o;
    rn_plan_opts_default(&o);
    rn_plan_opts_from_settings(&o, &set);
    char subset[1024], note[256] = "";
    if (rn_topo_cuda_visible(topo, getenv("CUDA_VISIBLE_DEVICES"), subset, sizeof(subset), note,
                             sizeof(note)) == 0)
      o.gpu_subset = subset;
    if (note[0]) RN_INFO(NCCL_INIT | NCCL_NET, "%s", note);
    o.candidates = cand;
    o.ncandidates = ncand;
    if (rn_plan_build(topo, &o, &plan, err, sizeof(err)) != 0) {
      RN_WARN("rail planner: %s", err);
      rn_topo_free(topo);
      return ncclInvalidUsage;
    }
    rn_plan_log(topo, plan, rn_devices_info,
                NULL); /* the lines RAILNET_DEBUG=1 railnet-topo prints */
    for (int v = 0; v < plan->nvdevs && *nvdevs < RN_MAX_VDEVS; v++) {
      const struct rn_plan_vdev *pv = &plan->vdevs[v];
      int members[RN_MAX_RAILS], n = 0;
      struct rn_devices_ids ids;
      for (int k = 0; k < pv->nnics && n < RN_MAX_RAILS; k++) {
        int i = rn_devices_find_nic(nnics, model_of, pv->nics[k]);
        if (i < 0) continue;
        ids.nic_rail[n] = plan->nic_rail[pv->nics[k]];
        ids.nic_plane[n] = plan->nic_plane[pv->nics[k]];
        members[n++] = i;
      }
      if (n == 0) continue;
      /* The plan's ids; when the transport lacks some of the planned NICs,
       * the same rule over the NICs it has. */
      ids.rail_id = pv->rail_id;
      ids.plane_id = pv->plane_id;
      if (n < pv->nnics)
        rn_plan_fused_ids(ids.nic_rail, ids.nic_plane, n, &ids.rail_id, &ids.plane_id);
      /* The first GPU that uses this rail set explains it. */
      const char *why = "no GPU in the topology: every NIC is its own device";
      for (int g = 0; g < plan->ngpus && ngpus > 0; g++)
        if (plan->gpus[g].nrails > 0 && plan->gpus[g].rails[0].nic == pv->nics[0]) {
          why = plan->gpus[g].rails[0].reason;
          break;
        }
      /* NCCL decides GPUDirect per GPU-NIC pair itself (its GDR level
       * against the path to pciPath), so GPU memory is advertised when the
       * NIC can do it (its probe, in ptr_support) and at least one GPU
       * using the device gets GDR at the configured level; the plan's
       * INFO lines above say what each pair gets and why.  Masking with
       * the all-pairs AND would make a NIC shared by a PIX and a PHB GPU
       * host-only for both.  Without GPUs in the model the planner cannot
       * judge: the NIC's probe and NCCL's check decide. */
      int gdr = ngpus > 0 ? pv->gdr_any : 1;
      rn_devices_add(vdevs, nvdevs, nics, members, n, gdr, &ids, why);
      for (int k = 0; k < n; k++) used[members[k]] = 1;
      /* The plan's standby, when the transport drives that NIC too (it
       * stays out of every device's rails). */
      int sb = pv->standby >= 0 ? rn_devices_find_nic(nnics, model_of, pv->standby) : -1;
      for (int k = 0; k < n && sb >= 0; k++)
        if (members[k] == sb) sb = -1;
      if (sb >= 0) vdevs[*nvdevs - 1].rails.standby = &nics[sb];
    }
  }
  /* NICs the topology does not know (virtual interfaces), or every NIC
   * when there is no plan: each its own device, unless a plan exists and
   * the user did not name them. */
  int explicit_filter = filter[0] != '\0' && filter[0] != '^';
  for (int i = 0; i < nnics && *nvdevs < RN_MAX_VDEVS; i++) {
    if (used[i]) continue;
    int planned = plan != NULL && plan->nvdevs > 0;
    if (planned && !(explicit_filter &&
                     rn_topo_filter_match(filter, nics[i].name, nics[i].netdev, nics[i].port)))
      continue;
    if (!planned && filter[0] &&
        !rn_topo_filter_match(filter, nics[i].name, nics[i].netdev, nics[i].port))
      continue;
    char why[128];
    snprintf(why, sizeof(why), "%s", planned ? "named by RAILNET_NICS" : "no rail plan for it");
    rn_devices_add(vdevs, nvdevs, nics, &i, 1, 1, &rn_devices_no_ids, why);
  }
  rn_plan_free(plan);
  rn_topo_free(topo);
  return ncclSuccess;
}

ncclResult_t rn_devices_merge(struct rn_vdev *vdevs, int *nvdevs, const struct rn_vprops *props,
                              int *d) {
  if (*nvdevs == RN_MAX_VDEVS) {
    RN_WARN("makeVDevice: device table full");
    return ncclInvalidUsage;
  }
  struct rn_vdev nv;
  memset(&nv, 0, sizeof(nv));
  for (int i = 0; i < props->ndevs; i++) {
    int s = props->devs[i];
    for (int j = 0; j < i; j++)
      if (props->devs[j] == s) s = -1;
    if (s < 0 || s >= *nvdevs) {
      RN_WARN("makeVDevice: device %d invalid or repeated (%d devices)", props->devs[i], *nvdevs);
      return ncclInvalidArgument;
    }
    if (rn_devices_fold(&nv, &vdevs[s]) != 0) {
      RN_WARN("makeVDevice: more than %d rails in one device", RN_MAX_RAILS);
      return ncclInvalidUsage;
    }
  }
  nv.vprops = *props;
  /* The rule the planner names its own fused devices by, over every rail:
   * one rail id only when all share it; a virtual plane mask. */
  rn_plan_fused_ids(nv.nic_rail, nv.nic_plane, nv.rails.n, &nv.rail_id, &nv.plane_id);
  snprintf(nv.why, sizeof(nv.why), "merged by NCCL (makeVDevice)");
  *d = *nvdevs;
  vdevs[(*nvdevs)++] = nv;
  RN_INFO(NCCL_INIT | NCCL_NET,
          "dev %d: %s merged from %d devices, %d rails, speed %d Mbps, rail %d plane %d", *d,
          nv.name, props->ndevs, nv.rails.n, nv.speed, nv.rail_id, nv.plane_id);
  return ncclSuccess;
}

void rn_devices_log(const struct rn_vdev *vdevs, int nvdevs, const char *transport) {
  for (int d = 0; d < nvdevs; d++) {
    const struct rn_vdev *v = &vdevs[d];
    RN_INFO(
        NCCL_INIT | NCCL_NET,
        "dev %d: %s transport=%s rails=%d speed=%d Mbps ptrSupport=%s%s%s regIsGlobal=%d "
        "pciPath=%s rail=%d plane=%d standby=%s%s%s",
        d, v->name, transport, v->rails.n, v->speed, (v->ptr_support & NCCL_PTR_HOST) ? "HOST" : "",
        (v->ptr_support & NCCL_PTR_CUDA) ? "|CUDA" : "",
        (v->ptr_support & NCCL_PTR_DMABUF) ? "|DMABUF" : "", v->reg_is_global,
        v->pci_path[0] ? v->pci_path : "(none)", v->rail_id, v->plane_id,
        v->rails.standby != NULL ? v->rails.standby->name : "none", v->why[0] ? " : " : "", v->why);
  }
}
