/* Every hand-written fixture in tests/topo/fixtures plans as its .expect
 * file says, pair by pair, and matches its golden plan. */
#include "expect_runner.h"

int main(void) { return rn_expect_run_dir("tests/topo/fixtures"); }
