/* makeVDevice through the v9 ABI: NCCL's NIC fusion merges two of our
 * devices into one, which must list, describe and carry traffic across
 * both rails; bad merge requests (none, too many for v9, repeated,
 * unknown) fail with a WARN.  v12's 8-device bound: tests/core/v12-ids.sh. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../common/rn_test.h"
#include "nccl/net_v9.h"

/* Listen and connect on dev in this process, send len bytes, verify. */
static int traffic(const ncclNet_v9_t *n, int dev, size_t len) {
  struct rn_net rn = {.version = 9, .t.v9 = n};
  return rn_net_self_transfer(&rn, dev, len);
}

int main(void) {
  setenv("RN_CONF_SHOW_WARN", "1", 0); /* every WARN shown, as NCCL would */
  setvbuf(stdout, NULL, _IOLBF, 0);    /* TAP survives an exit without flushing */
  /* Two TCP interfaces: loopback and the first other one up. */
  char spec[160];
  if (rn_two_ifs_env(spec, sizeof(spec)) != 0) return 0; /* skipped */
  void *h = rn_dlopen_plugin();
  if (h == NULL) return 1;
  const ncclNet_v9_t *n = dlsym(h, "ncclNetPlugin_v9");
  printf("1..10\n");
  int nd = 0;
  int c =
      n != NULL && n->init(rn_logger) == ncclSuccess && n->devices(&nd) == ncclSuccess && nd == 2;
  tap_result(c, "init with RAILNET_SOCKET_IFNAME=%s gives 2 devices (%d)", spec, nd);
  if (nd != 2) return 1;
  ncclNetProperties_v9_t p0, p1, pm;
  n->getProperties(0, &p0);
  n->getProperties(1, &p1);
  ncclNetVDeviceProps_t vp = {.ndevs = 2, .devs = {0, 1}};
  int d = -1;
  c = n->makeVDevice(&d, &vp) == ncclSuccess && d == 2;
  tap_result(c, "makeVDevice({0,1}) returns the next index (%d)", d);
  int nd2 = 0;
  n->devices(&nd2);
  tap_result(nd2 == 3, "devices() then counts it (%d)", nd2);
  c = n->getProperties(d, &pm) == ncclSuccess;
  tap_result(c && strchr(pm.name, '+') != NULL && pm.speed == p0.speed + p1.speed &&
                 pm.vProps.ndevs == 2 && pm.vProps.devs[0] == 0 && pm.vProps.devs[1] == 1,
             "merged device %s: speeds summed (%d), vProps {2,{0,1}}", pm.name, pm.speed);
  tap_result(traffic(n, d, 24u << 20) == 0, "%s",
             "24 MiB over the merged device's two rails, verified");
  tap_result(traffic(n, 0, 1u << 20) == 0, "%s", "the original devices still work");
  int w = rn_log_warns();
  ncclNetVDeviceProps_t bad = {.ndevs = 0};
  tap_result(n->makeVDevice(&d, &bad) != ncclSuccess && rn_log_warns() > w, "%s",
             "0 devices: error with a WARN");
  /* v9's descriptor holds 4 devices: a 5th is refused before devs[4],
   * past the end of NCCL's struct, is read. */
  w = rn_log_warns();
  bad = (ncclNetVDeviceProps_t){.ndevs = NCCL_NET_MAX_DEVS_PER_NIC + 1, .devs = {0, 1}};
  tap_result(n->makeVDevice(&d, &bad) == ncclInvalidArgument && rn_log_warns() > w, "%s",
             "5 devices through v9 (which holds 4): ncclInvalidArgument with a WARN");
  w = rn_log_warns();
  bad = (ncclNetVDeviceProps_t){.ndevs = 2, .devs = {1, 1}};
  tap_result(n->makeVDevice(&d, &bad) != ncclSuccess && rn_log_warns() > w, "%s",
             "a repeated device: error with a WARN");
  w = rn_log_warns();
  bad = (ncclNetVDeviceProps_t){.ndevs = 1, .devs = {42}};
  tap_result(n->makeVDevice(&d, &bad) != ncclSuccess && rn_log_warns() > w, "%s",
             "an unknown device: error with a WARN");
  printf("# %d passed, %d failed\n", tap_count() - tap_failed(), tap_failed());
  return tap_failed() != 0;
}
