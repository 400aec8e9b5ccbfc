/* libFuzzer target for the `nvidia-smi topo -m` reader: parse, rebuild the
 * tree, compute every path, plan with and without PXN. */
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "railnet/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct rn_topo *t = NULL;
  struct rn_plan *p = NULL;
  char err[256], via[96];
  if (rn_topo_load_smi_buf((const char *)data, size, "<fuzz>", &t, err, sizeof(err)) != 0) return 0;
  for (int g = 0; g < rn_topo_ngpus(t); g++)
    for (int n = 0; n < rn_topo_nnics(t); n++) (void)rn_topo_path(t, g, n, via, sizeof(via));
  if (rn_plan_build(t, NULL, &p, err, sizeof(err)) == 0) rn_plan_free(p);
  struct rn_plan_opts o;
  rn_plan_opts_default(&o);
  o.pxn = 0;
  o.gdr_level = RN_PATH_SYS;
  o.gpu_subset = "1";
  if (rn_plan_build(t, &o, &p, err, sizeof(err)) == 0) rn_plan_free(p);
  rn_topo_free(t);
  return 0;
}
