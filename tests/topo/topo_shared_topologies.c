/* Every vendor topology in ../shared/topologies (or RAILNET_TOPOLOGIES_DIR)
 * loads and plans as the tests/topo/shared expectations, derived from
 * LAYOUT-FACTS.md, says.  Skipped when the directory is absent. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "expect_runner.h"

int main(void) {
  if (!rn_expect_shared_dir()) {
    printf("1..0 # SKIP shared topologies absent (set RAILNET_TOPOLOGIES_DIR)\n");
    return 0;
  }
  return rn_expect_run_dir("tests/topo/shared");
}
