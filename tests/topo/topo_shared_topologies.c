/* Every vendor topology in ../shared/topologies (or RAILNET_TOPOLOGIES_DIR)
 * loads and plans as the tests/topo/shared expectations, derived from
 * LAYOUT-FACTS.md and NCCL's rules, say.  Without the directory: a skip
 * naming it, or a failure when RAILNET_TOPOLOGIES_REQUIRED=1 (CI). */
#include <stdio.h>

#include "expect_runner.h"

int main(void) {
  if (!rn_expect_shared_dir()) {
    if (rn_expect_required()) {
      printf("1..1\nnot ok 1 - %s is missing and RAILNET_TOPOLOGIES_REQUIRED=1\n",
             rn_expect_shared_name());
      return 1;
    }
    printf("1..0 # SKIP %s absent (set RAILNET_TOPOLOGIES_DIR)\n", rn_expect_shared_name());
    return 0;
  }
  return rn_expect_run_dir("tests/topo/shared");
}
