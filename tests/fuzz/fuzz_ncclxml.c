/* libFuzzer target for the NCCL topology XML reader: parse, build the
 * model, plan with and without options, and query every path.  Any crash,
 * leak or sanitizer report is a bug; rejecting the input is fine. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model.h"
#include "railnet/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct rn_topo *t = NULL;
  struct rn_plan *p = NULL;
  char err[256];
  if (rn_topo_load_ncclxml_buf((const char *)data, size, &t, err, sizeof(err)) != 0) return 0;
  for (int g = 0; g < rn_topo_ngpus(t); g++)
    for (int n = 0; n < rn_topo_nnics(t); n++) {
      char via[64];
      (void)rn_topo_path(t, g, n, via, sizeof(via));
    }
  if (rn_plan_build(t, NULL, &p, err, sizeof(err)) == 0) rn_plan_free(p);
  struct rn_plan_opts o;
  rn_plan_opts_default(&o);
  o.gpu_subset = "0,1";
  o.nic_filter = "^mlx5_1";
  o.gdr_level = RN_PATH_PHB;
  if (rn_plan_build(t, &o, &p, err, sizeof(err)) == 0) rn_plan_free(p);
  rn_topo_free(t);
  return 0;
}
