/* ncclNet v12 end to end: the rail and plane ids NCCL reads from
 * getProperties are the rail planner's, and makeVDevice takes up to 8
 * devices.  Run by tests/core/v12-ids.sh inside a network namespace that
 * holds the veth netdevs rnv0 ... rnv9 of tests/core/v12-rails.xml, with
 * RAILNET_TOPO_FILE pointing at that file, RAILNET_TRANSPORT=socket and
 * RAILNET_SOCKET_IFNAME=rnv.
 *
 * Expectations, by hand from the fixture and the planner's rule
 * (topo/plan.c, README "rail and plane ids"): nine GPUs in bus order, each
 * with the NICs under its own switch.  GPU 0's rnv0 and rnv1 are one fused
 * device: rail 0, planes 0 and 1, so NCCL's virtual plane mask
 * 1<<14 | 0b11 = 0x4003.  GPU k (1..8) has one NIC, rnv(k+1): rail k,
 * plane 0. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/rn_test.h"
#include "nccl/net_v11.h"
#include "nccl/net_v12.h"

#define NDEV 9

static int find_dev(const ncclNet_v12_t *n, int ndev, const char *name) {
  for (int d = 0; d < ndev; d++) {
    ncclNetProperties_v12_t p;
    if (n->getProperties(d, &p) == ncclSuccess && strcmp(p.name, name) == 0) return d;
  }
  return -1;
}

/* Listen and connect on dev in this process, send len bytes, verify. */
static int traffic(const ncclNet_v12_t *n, void *ctx, int dev, size_t len) {
  struct rn_net rn = {.version = 12, .t.v12 = n};
  rn.ctx = ctx;
  return rn_net_self_transfer(&rn, dev, len);
}

int main(void) {
  setenv("RN_CONF_SHOW_WARN", "1", 0); /* every WARN shown, as NCCL would */
  setvbuf(stdout, NULL, _IOLBF, 0);    /* TAP survives an exit without flushing */
  const char *so = rn_plugin_path();
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    printf("1..1\nnot ok 1 - dlopen %s: %s\n", so, dlerror());
    return 1;
  }
  const ncclNet_v12_t *n = dlsym(h, "ncclNetPlugin_v12");
  const ncclNet_v11_t *n11 = dlsym(h, "ncclNetPlugin_v11");
  printf("1..10\n");
  void *ctx = NULL;
  ncclNetCommConfig_v12_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  int nd = 0;
  int c = n != NULL && n11 != NULL && n->init(&ctx, 1, &cfg, rn_logger, NULL) == ncclSuccess &&
          n->devices(&nd) == ncclSuccess;
  tap_result(c && nd == NDEV, "ncclNetPlugin_v12 on the fixture's 10 NICs gives %d devices (%d)",
             NDEV, nd);
  if (!c || nd != NDEV) return 1;

  /* The fused device of GPU 0. */
  ncclNetProperties_v12_t p;
  int fused = find_dev(n, nd, "rnv0+rnv1");
  c = fused >= 0 && n->getProperties(fused, &p) == ncclSuccess;
  tap_result(
      c && p.railId == 0 && p.planeId == 0x4003 && p.vProps.ndevs == 1 && p.vProps.devs[0] == fused,
      "rnv0+rnv1: railId 0, planeId 0x4003 (virtual bit, planes 0 and 1) (got %d, 0x%x)",
      c ? p.railId : -2, c ? (unsigned)p.planeId : 0u);

  /* GPUs 1..8: one NIC each, rail k, plane 0. */
  int single[8], ids_ok = 1;
  for (int k = 1; k <= 8; k++) {
    char name[16];
    snprintf(name, sizeof name, "rnv%d", k + 1);
    single[k - 1] = find_dev(n, nd, name);
    if (single[k - 1] < 0 || n->getProperties(single[k - 1], &p) != ncclSuccess || p.railId != k ||
        p.planeId != 0) {
      printf("# %s: dev %d railId %d planeId %d, want %d and 0\n", name, single[k - 1],
             single[k - 1] >= 0 ? p.railId : -2, single[k - 1] >= 0 ? p.planeId : -2, k);
      ids_ok = 0;
    }
  }
  tap_result(ids_ok, "%s", "rnv2 ... rnv9: railId 1 ... 8 in GPU bus order, planeId 0");
  if (!ids_ok) return 1;

  /* 8 devices: v12's bound, accepted. */
  ncclNetVDeviceProps_v12_t vp = {.ndevs = 8};
  for (int i = 0; i < 8; i++) vp.devs[i] = single[i];
  int d8 = -1, nd2 = 0;
  c = n->makeVDevice(&d8, &vp) == ncclSuccess && d8 == NDEV && n->devices(&nd2) == ncclSuccess;
  tap_result(c && nd2 == NDEV + 1, "makeVDevice of 8 devices: index %d, devices() %d", d8, nd2);
  int vp_ok = c && n->getProperties(d8, &p) == ncclSuccess && p.vProps.ndevs == 8;
  for (int i = 0; vp_ok && i < 8; i++) vp_ok = p.vProps.devs[i] == single[i];
  tap_result(vp_ok && p.railId == NCCL_NET_ID_UNDEF && p.planeId == 0x4001,
             "... it reports all 8 in vProps, no common rail (-1), plane mask 0x4001 (got %d, "
             "0x%x)",
             vp_ok ? p.railId : -2, vp_ok ? (unsigned)p.planeId : 0u);
  /* A TCP handle holds 5 listening addresses: comms with the 8-rail
   * device use its first 5 rails, said once however many comms. */
  int said = rn_log_watch("the device has 8 rails and a handle holds 5 addresses, so comms with "
                          "it use its first 5 rails (rnv");
  int moved = c && traffic(n, ctx, d8, 4u << 20) == 0 && traffic(n, ctx, d8, 1u << 20) == 0;
  int infos = rn_log_seen(said);
  tap_result(moved && infos == 1,
             "4 MiB and 1 MiB over the 8-rail device, verified; one INFO says its comms use the "
             "first 5 rails (%d)",
             infos);
  int w = rn_log_warns();
  ncclNetProperties_v11_t p11;
  tap_result(c && n11->getProperties(d8, &p11) == ncclInternalError && rn_log_warns() > w, "%s",
             "v11 getProperties of it (v11 holds 4): ncclInternalError with a WARN, not truncated");

  /* A 9th device: refused. */
  struct {
    ncclNetVDeviceProps_v12_t vp;
    int past_the_end; /* what a 9th devs[] entry would read */
  } nine = {.vp = {.ndevs = 9}, .past_the_end = 0};
  for (int i = 0; i < 8; i++) nine.vp.devs[i] = i;
  w = rn_log_warns();
  int d9 = -1;
  ncclResult_t r = n->makeVDevice(&d9, &nine.vp);
  tap_result(r == ncclInvalidArgument && rn_log_warns() > w && n->devices(&nd2) == ncclSuccess &&
                 nd2 == NDEV + 1,
             "makeVDevice of 9 devices: ncclInvalidArgument with a WARN, no device added (%s)",
             rn_result_str(r));

  /* A merge across the fused device and a one-NIC one: planes 0,1 and 0. */
  ncclNetVDeviceProps_v12_t two = {.ndevs = 2, .devs = {fused, single[0]}};
  int d2 = -1;
  c = n->makeVDevice(&d2, &two) == ncclSuccess && n->getProperties(d2, &p) == ncclSuccess;
  tap_result(c && p.railId == NCCL_NET_ID_UNDEF && p.planeId == 0x4003,
             "merging rails 0 and 1: railId -1, planeId 0x4003 (got %d, 0x%x)", c ? p.railId : -2,
             c ? (unsigned)p.planeId : 0u);
  tap_result(n->finalize(ctx) == ncclSuccess, "%s", "finalize");
  dlclose(h);
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
