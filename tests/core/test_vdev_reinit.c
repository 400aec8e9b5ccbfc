/* NCCL's merged devices outlive a rebuilt device table (v11).  NCCL
 * counts the plugin's devices and merges them once per load of the
 * library (src/plugin/net.cc: devices() only on the first init,
 * makeVDevice only while the virtual count is undefined); with
 * NCCL_NET_PLUGIN_REF_COUNT it keeps the library loaded after the last
 * communicator's finalize, and the next communicator's topology asks
 * getProperties for the merged indices straight away.  So after the last
 * context is finalized and a new one created, the merged device is there
 * again at the same index, described as before, and carries traffic; a
 * table that came back with another number of devices says so with a
 * WARN. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/rn_test.h"
#include "nccl/net_v11.h"

static void *ctx_init(const ncclNet_v11_t *n, uint64_t id) {
  ncclNetCommConfig_v11_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
  void *ctx = NULL;
  return n->init(&ctx, id, &cfg, rn_logger, NULL) == ncclSuccess ? ctx : NULL;
}

int main(void) {
  setenv("RN_CONF_SHOW_WARN", "1", 0); /* every WARN shown, as NCCL would */
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* Two TCP interfaces: loopback and the first other one up. */
  char spec[160];
  if (rn_two_ifs_env(spec, sizeof(spec)) != 0) return 0; /* skipped */
  void *h = rn_dlopen_plugin();
  if (h == NULL) return 1;
  const ncclNet_v11_t *n = dlsym(h, "ncclNetPlugin_v11");
  printf("1..8\n");
  void *ctx = n != NULL ? ctx_init(n, 1) : NULL;
  int nd = 0;
  int c = ctx != NULL && n->devices(&nd) == ncclSuccess && nd == 2;
  tap_result(c, "first context with RAILNET_SOCKET_IFNAME=%s: 2 devices (%d)", spec, nd);
  if (!c) return 1;
  ncclNetVDeviceProps_t vp = {.ndevs = 2, .devs = {0, 1}};
  int d = -1;
  ncclNetProperties_v11_t before, after;
  c = n->makeVDevice(&d, &vp) == ncclSuccess && d == 2 && n->getProperties(d, &before) == ncclSuccess;
  tap_result(c, "makeVDevice({0,1}) gives device %d", d);
  if (!c) return 1;
  char name[256];
  snprintf(name, sizeof(name), "%s", before.name);
  int made = rn_log_watch("NCCL's merged devices made again");
  tap_result(n->finalize(ctx) == ncclSuccess, "%s",
             "the last context finalized (the table is torn down; NCCL keeps its counts)");
  ctx = ctx_init(n, 2);
  nd = 0;
  c = ctx != NULL && n->devices(&nd) == ncclSuccess && nd == 3 && rn_log_seen(made) == 1;
  tap_result(c, "a new context: 3 devices, the merged one among them (%d); INFO said so %d time(s)",
             nd, rn_log_seen(made));
  c = n->getProperties(2, &after) == ncclSuccess && strcmp(after.name, name) == 0 &&
      after.speed == before.speed && after.guid == before.guid && after.vProps.ndevs == 2 &&
      after.vProps.devs[0] == 0 && after.vProps.devs[1] == 1;
  tap_result(c, "getProperties(2) as before: %s, speed %d, vProps {2,{0,1}}", c ? after.name : "?",
             after.speed);
  struct rn_net rn = {.version = 11, .t.v11 = n, .ctx = ctx};
  tap_result(rn_net_self_transfer(&rn, 2, 8u << 20) == 0, "%s",
             "8 MiB over the merged device in the new context, verified");
  n->finalize(ctx);
  /* Another interface filter: the planner's table changes, so NCCL's
   * merged index no longer means what it did. */
  setenv("RAILNET_SOCKET_IFNAME", "=lo", 1);
  setenv("RAILNET_NICS", "lo", 1);
  int w = rn_log_warns();
  ctx = ctx_init(n, 3);
  nd = 0;
  c = ctx != NULL && n->devices(&nd) == ncclSuccess && nd == 1 && rn_log_warns() > w;
  tap_result(c, "a table rebuilt with 1 device: %d device(s), the merged one not made again, with a "
                "WARN",
             nd);
  w = rn_log_warns();
  c = n->getProperties(1, &after) == ncclInvalidArgument && rn_log_warns() > w;
  tap_result(c, "%s", "getProperties(1) then: ncclInvalidArgument with a WARN");
  n->finalize(ctx);
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
