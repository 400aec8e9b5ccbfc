/* libFuzzer target for the hwloc XML path: our reader and checks, then
 * libhwloc itself, then the model and a plan.  libhwloc is not built with
 * the fuzzer's instrumentation, but any crash inside it (the reason the
 * checks exist) stops the run just the same.  Rejecting the input is
 * fine; crashing, hanging or leaking is a bug. */
#include <hwloc.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model.h"
#include "railnet/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* hwloc loads its plugins with the first topology and unloads them with
   * the last: one topology kept open spares every input a round of
   * dlopen/dlclose (most of the time per input otherwise). */
  static hwloc_topology_t keep;
  if (!keep && hwloc_topology_init(&keep) != 0) keep = NULL;
  struct rn_topo *t = NULL;
  struct rn_plan *p = NULL;
  char err[256];
  if (rn_topo_load_hwloc_xml_buf((const char *)data, size, "<fuzz>", &t, err, sizeof(err)) != 0)
    return 0;
  if (rn_plan_build(t, NULL, &p, err, sizeof(err)) == 0) rn_plan_free(p);
  rn_topo_free(t);
  return 0;
}
