#!/bin/sh
# The planner reaches 100% of the usable NIC bandwidth on every full-rail
# machine of the quality table that was actually evaluated (vendor files
# absent: those rows are skipped and counted; with
# RAILNET_TOPOLOGIES_REQUIRED=1 that is a failure).  Prints the table as
# TAP comments.
B=${RN_BUILD:-build}
Q=$B/tests/topo_plan_quality
# make test builds it: its absence is a broken build, never a skip
[ -x "$Q" ] || { echo "1..1"; echo "not ok 1 - $Q not built (run make first)"; exit 1; }
echo "1..1"
out=$("$Q"); rc=$?
echo "$out" | sed 's/^/# /'
summary=$(echo "$out" | grep '^evaluated ')
full=$(echo "$summary" | sed -n 's/.*(\([0-9]*\) full-rail).*/\1/p')
absent=$(echo "$summary" | sed -n 's/.*; \([0-9]*\) shared file(s) absent/\1/p')
what="planned bandwidth is 100% of usable on the ${full:-0} full-rail machine(s) evaluated"
[ "${absent:-0}" != 0 ] && what="$what ($absent row(s) not evaluated: shared topologies absent)"
if [ $rc = 0 ]; then echo "ok 1 - $what"; else echo "not ok 1 - $what"; exit 1; fi
