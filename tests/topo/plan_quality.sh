#!/bin/sh
# The planner reaches 100% of the usable NIC bandwidth on every machine the
# quality table marks so (p4d, p5, NDv4, B200-like, ...): runs the table
# program and prints it as TAP comments.
B=${RN_BUILD:-build}
Q=$B/tests/topo_plan_quality
[ -x "$Q" ] || { echo "1..0 # SKIP $Q not built"; exit 0; }
echo "1..1"
out=$("$Q"); rc=$?
echo "$out" | sed 's/^/# /'
if [ $rc = 0 ]; then echo "ok 1 - planned bandwidth is 100% of usable on every full-rail machine"
else echo "not ok 1 - planned bandwidth is 100% of usable on every full-rail machine"; exit 1; fi
