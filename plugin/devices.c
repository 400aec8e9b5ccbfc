/* The device table: the transport's NICs grouped into virtual devices by
 * the rail planner at init, and the devices NCCL merges with makeVDevice,
 * both folded together by one helper.  The caller locks (see devices.h). */
#include <stdio.h>
#include <string.h>
#include "railnet/check.h"
#include "railnet/devices.h"
#include "railnet/param.h"
#include "railnet/topo.h"

static enum rn_path rn_devices_gdr_level(int64_t level) {
  static const enum rn_path map[] = {RN_PATH_LOC, RN_PATH_PIX, RN_PATH_PXB, RN_PATH_PHB,
                                     RN_PATH_SYS};
  return map[level];
}

/* Fold part's rails into v: names joined with '+', speeds summed, the
 * pointer types, global registration and comm count every part supports,
 * a flush if any part needs one; the first part gives the PCI path, GUID
 * and port.  -1 when the rails would not fit in one device. */
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
  for (int r = 0; r < part->rails.n; r++) v->rails.nic[v->rails.n++] = part->rails.nic[r];
  return 0;
}

/* Append one virtual device made of the given transport NICs. */
static void rn_devices_add(struct rn_vdev *vdevs, int *nvdevs, const struct rn_nic *nics,
                           const int *members, int n, int gdr, const char *why) {
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
                          .max_comms = m->max_comms};
    snprintf(one.name, sizeof(one.name), "%s", m->name);
    snprintf(one.pci_path, sizeof(one.pci_path), "%s", m->pci_path);
    (void)rn_devices_fold(v, &one); /* n <= RN_MAX_RAILS: always fits */
  }
  v->ptr_support |= NCCL_PTR_HOST;
  if (!gdr) v->ptr_support = NCCL_PTR_HOST;
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
  const struct rn_params *p = rn_params();
  char err[512];
  struct rn_topo *topo = NULL;
  struct rn_plan *plan = NULL;
  int model_of[RN_MAX_NICS], cand[RN_MAX_NICS], ncand = 0, used[RN_MAX_NICS] = {0};
  *nvdevs = 0;
  if (nnics > RN_MAX_NICS) nnics = RN_MAX_NICS;
  if (nnics == 0) return ncclSuccess;

  int rc = -1;
  if (p->topo_file[0]) {
    rc = rn_topo_load_file(p->topo_file, &topo, err, sizeof(err));
    if (rc != 0) RN_WARN("topology file unusable, reading the live machine instead: %s", err);
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
    o.gdr_level = rn_devices_gdr_level(p->gdr_level);
    o.nic_filter = p->nics;
    o.candidates = cand;
    o.ncandidates = ncand;
    if (rn_plan_build(topo, &o, &plan, err, sizeof(err)) != 0) {
      RN_WARN("rail planner: %s", err);
      rn_topo_free(topo);
      return ncclInvalidUsage;
    }
    for (int g = 0; g < plan->ngpus; g++)
      for (int r = 0; r < plan->gpus[g].nrails; r++)
        RN_INFO(NCCL_INIT | NCCL_NET, "plan: %s", plan->gpus[g].rails[r].reason);
    for (int i = 0; i < plan->nnotes; i++)
      RN_INFO(NCCL_INIT | NCCL_NET, "plan: %s", plan->notes[i]);
    for (int v = 0; v < plan->nvdevs && *nvdevs < RN_MAX_VDEVS; v++) {
      const struct rn_plan_vdev *pv = &plan->vdevs[v];
      int members[RN_MAX_RAILS], n = 0;
      for (int k = 0; k < pv->nnics && n < RN_MAX_RAILS; k++) {
        int i = rn_devices_find_nic(nnics, model_of, pv->nics[k]);
        if (i >= 0) members[n++] = i;
      }
      if (n == 0) continue;
      /* The first GPU that uses this rail set explains it. */
      const char *why = "no GPU in the topology: every NIC is its own device";
      for (int g = 0; g < plan->ngpus && ngpus > 0; g++)
        if (plan->gpus[g].nrails > 0 && plan->gpus[g].rails[0].nic == pv->nics[0]) {
          why = plan->gpus[g].rails[0].reason;
          break;
        }
      /* Without GPUs in the model the planner cannot judge GDR: leave it
       * to the NIC's own probe and NCCL's distance check. */
      int gdr = ngpus > 0 ? pv->gdr : 1;
      rn_devices_add(vdevs, nvdevs, nics, members, n, gdr, why);
      for (int k = 0; k < n; k++) used[members[k]] = 1;
    }
    for (int i = 0; i < plan->nunused; i++)
      RN_INFO(NCCL_INIT | NCCL_NET, "plan: %s unused (farther than every GPU's own rails)",
              rn_topo_nic(topo, plan->unused[i])->name);
  }
  /* NICs the topology does not know (virtual interfaces), or every NIC
   * when there is no plan: each its own device, unless a plan exists and
   * the user did not name them. */
  int explicit_filter = p->nics[0] != '\0' && p->nics[0] != '^';
  for (int i = 0; i < nnics && *nvdevs < RN_MAX_VDEVS; i++) {
    if (used[i]) continue;
    int planned = plan != NULL && plan->nvdevs > 0;
    if (planned && !(explicit_filter &&
                     rn_topo_filter_match(p->nics, nics[i].name, nics[i].netdev, nics[i].port)))
      continue;
    if (!planned && p->nics[0] &&
        !rn_topo_filter_match(p->nics, nics[i].name, nics[i].netdev, nics[i].port))
      continue;
    char why[128];
    snprintf(why, sizeof(why), "%s", planned ? "named by RAILNET_NICS" : "no rail plan for it");
    rn_devices_add(vdevs, nvdevs, nics, &i, 1, 1, why);
  }
  rn_plan_free(plan);
  rn_topo_free(topo);
  return ncclSuccess;
}

ncclResult_t rn_devices_merge(struct rn_vdev *vdevs, int *nvdevs,
                              const ncclNetVDeviceProps_t *props, int *d) {
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
  snprintf(nv.why, sizeof(nv.why), "merged by NCCL (makeVDevice)");
  *d = *nvdevs;
  vdevs[(*nvdevs)++] = nv;
  RN_INFO(NCCL_INIT | NCCL_NET, "dev %d: %s merged from %d devices, %d rails, speed %d Mbps", *d,
          nv.name, props->ndevs, nv.rails.n, nv.speed);
  return ncclSuccess;
}

void rn_devices_log(const struct rn_vdev *vdevs, int nvdevs, const char *transport) {
  for (int d = 0; d < nvdevs; d++) {
    const struct rn_vdev *v = &vdevs[d];
    RN_INFO(NCCL_INIT | NCCL_NET,
            "dev %d: %s transport=%s rails=%d speed=%d Mbps ptrSupport=%s%s%s regIsGlobal=%d "
            "pciPath=%s%s%s",
            d, v->name, transport, v->rails.n, v->speed,
            (v->ptr_support & NCCL_PTR_HOST) ? "HOST" : "",
            (v->ptr_support & NCCL_PTR_CUDA) ? "|CUDA" : "",
            (v->ptr_support & NCCL_PTR_DMABUF) ? "|DMABUF" : "", v->reg_is_global,
            v->pci_path[0] ? v->pci_path : "(none)", v->why[0] ? " : " : "", v->why);
  }
}
