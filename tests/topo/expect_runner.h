/* Runs plan expectation files (*.expect) and diffs golden plans; shared by
 * the fixture and the shared-topology test programs. */
#ifndef RN_TESTS_TOPO_EXPECT_RUNNER_H
#define RN_TESTS_TOPO_EXPECT_RUNNER_H

/* Runs every *.expect in dir, printing TAP; returns the exit code. */
int rn_expect_run_dir(const char *dir);
/* The shared vendor topologies: RAILNET_TOPOLOGIES_DIR or
 * ../shared/topologies; NULL when absent. */
const char *rn_expect_shared_dir(void);
/* The directory that was looked for, present or not. */
const char *rn_expect_shared_name(void);
/* 1 when RAILNET_TOPOLOGIES_REQUIRED=1: a missing vendor file fails. */
int rn_expect_required(void);

#endif
