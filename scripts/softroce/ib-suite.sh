#!/bin/sh
# Runs INSIDE the Soft-RoCE VM (after rxe-test.sh made rxe0..rxe3 on two
# veth pairs): the plugin's verbs transport under the conformance and fault
# suites and the multi-rail driver.  Usage: ib-suite.sh BUILD OUTDIR [bench]
# Writes OUTDIR/results ("ok NAME (N s)" / "not ok NAME ...") and one log
# per check; the host turns them into TAP.  "bench" adds the numbers run.
B=${1:-build}; O=${2:-/tmp}; MODE=${3:-}
R=$O/results; : >"$R"
export RAILNET_TRANSPORT=ib
export RN_BUILD="$B"   # the test programs load $RN_BUILD/libnccl-net-railnet.so
# the same environment as on the host (timeout scale, leak-checker settings)
. tests/common/test-env.sh
T=$(( ${RN_SUITE_TIMEOUT:-240} * RN_TIMEOUT_SCALE ))
# A coverage build (make coverage) writes its counters under $O/gcov, which
# the host merges; the VM's own writes to the shared root would be lost.
if [ -n "$(find "$B" -name '*.gcno' -print 2>/dev/null | head -1)" ]; then
  GCOV_PREFIX=$O/gcov
  GCOV_PREFIX_STRIP=$(pwd | tr -cd / | wc -c)
  export GCOV_PREFIX GCOV_PREFIX_STRIP
fi

# ok / not ok per check.  Inside the VM every capability the checks need
# (rxe devices, libibverbs) is there, so a program that skips all its tests
# failed to find its device: not ok.  Single skipped tests and failing
# TODO tests (known plugin bugs) are counted and named in the line.
check() { # NAME RECV_ENV SEND_ENV CMD...
  name=$1; renv=$2; senv=$3; shift 3
  t0=$(date +%s)
  RN_CONF_RECV_ENV="$renv" RN_CONF_SEND_ENV="$senv" timeout "$T" "$@" >"$O/$name.log" 2>&1
  rc=$?; t=$(( $(date +%s) - t0 ))
  skipall=$(grep -m1 '^1\.\.0 # SKIP' "$O/$name.log")
  nskip=$(grep -c '^ok [0-9]* # SKIP' "$O/$name.log")
  ntodo=$(grep -c '^not ok [0-9]* .*# TODO' "$O/$name.log")
  if [ $rc -eq 0 ] && [ -n "$skipall" ]; then
    echo "not ok $name (skipped everything inside the VM: ${skipall#1..0 # SKIP })" >>"$R"
  elif [ $rc -eq 0 ]; then
    echo "ok $name (${t} s$([ "$nskip" -gt 0 ] && echo ", $nskip skipped")$([ "$ntodo" -gt 0 ] && echo ", $ntodo known-bug TODO failing"))" >>"$R"
    grep -E '^ok [0-9]* # SKIP|^not ok [0-9]* .*# TODO' "$O/$name.log" | sed 's/^/#   /' >>"$R"
  else echo "not ok $name (exit $rc after ${t} s; see $name.log)" >>"$R"
    grep -E '^not ok|WARN' "$O/$name.log" | head -20 | sed 's/^/#   /' >>"$R"; fi
}

ONE_R="RAILNET_NICS==rxe0"; ONE_S="RAILNET_NICS==rxe1"
TWO_R="RAILNET_NICS==rxe0,rxe2"; TWO_S="RAILNET_NICS==rxe1,rxe3"
counters() { # nonzero rxe hw counters (drops, retries, RNR) into a log
  for d in rxe0 rxe1 rxe2 rxe3; do
    for f in /sys/class/infiniband/$d/ports/1/hw_counters/*; do
      [ -r "$f" ] && v=$(cat "$f") && [ "$v" != 0 ] && echo "# $d $(basename "$f") $v"
    done
  done
}
if [ "$MODE" = bench ]; then
  # The plugin runs with its own defaults (RAILNET_IB_TIMEOUT=18, as NCCL):
  # under TCG a 67 ms ACK timeout (perftest's 14) fires spuriously while
  # the peer works through a deep queue, and go-back-N then resends it.
  G=1   # RoCE v2 IPv4 GID; ib_bench's plugin finds it itself
  for n in 0 1 2 3 4 5 6 7; do
    case $(cat /sys/class/infiniband/rxe0/ports/1/gids/$n) in 0000:0000:0000:0000:0000:ffff:*) G=$n; break;; esac
  done
  ITERS=${RN_BENCH_ITERS:-300}
  ( timeout 120 ib_write_bw -d rxe0 -x $G -F -s 1048576 -n $ITERS >/dev/null 2>&1 & sleep 1
    timeout 120 ib_write_bw -d rxe1 -x $G -F -s 1048576 -n $ITERS 10.77.0.1 ) >"$O/ib_write_bw.log" 2>&1
  ( timeout 120 ib_write_lat -d rxe0 -x $G -F -s 8 -n 2000 >/dev/null 2>&1 & sleep 1
    timeout 120 ib_write_lat -d rxe1 -x $G -F -s 8 -n 2000 10.77.0.1 ) >"$O/ib_write_lat.log" 2>&1
  counters >"$O/counters-perftest.log"
  RN_BENCH_ITERS=$ITERS check bench-1rail "$ONE_R" "$ONE_S" "$B/tests/bench/ib_bench" bw lat
  RN_BENCH_ITERS=$ITERS RAILNET_IB_QPS=4 check bench-1rail-4qp "$ONE_R,RAILNET_IB_QPS=4" "$ONE_S,RAILNET_IB_QPS=4" "$B/tests/bench/ib_bench" bw
  RN_BENCH_ITERS=$ITERS RN_IB_VDEV=0,1 check bench-2rail "$TWO_R" "$TWO_S" "$B/tests/bench/ib_bench" bw lat
  counters >"$O/counters-all.log"
  exit 0
fi

check conformance-1qp "$ONE_R" "$ONE_S" "$B/tests/conformance-test" --api v11
check conformance-4qp "$ONE_R,RAILNET_IB_QPS=4" "$ONE_S,RAILNET_IB_QPS=4" "$B/tests/conformance-test" --api v11 --only messages
check conformance-v8-2qp "$ONE_R,RAILNET_IB_QPS=2" "$ONE_S,RAILNET_IB_QPS=2" "$B/tests/conformance-test" --api v8 --only "in flight"
RN_IB_VDEV=0,1 check verify-2rail-2qp "$TWO_R,RAILNET_IB_QPS=2" "$TWO_S,RAILNET_IB_QPS=2" "$B/tests/bench/ib_bench" verify
check fault "$ONE_R" "$ONE_S" "$B/tests/fault-test" --api v11
exit 0
