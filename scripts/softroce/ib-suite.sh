#!/bin/sh
# Runs INSIDE the Soft-RoCE VM (after rxe-test.sh made rxe0..rxe3 on two
# veth pairs): the plugin's verbs transport under the conformance and fault
# suites, the multi-rail driver, the rogue peer and the matching-rule
# programs.  Usage: ib-suite.sh BUILD OUTDIR
# Writes OUTDIR/results ("ok NAME (N s)" / "not ok NAME ...") and one log
# per check; the host turns them into TAP.  (The numbers: ib-bench.sh.)
B=${1:-build}; O=${2:-/tmp}
R=$O/results; : >"$R"
export RAILNET_TRANSPORT=ib
export RN_BUILD="$B"   # the test programs load $RN_BUILD/libnccl-net-railnet.so
T=${RN_SUITE_TIMEOUT:-240}

check() { # NAME RECV_ENV SEND_ENV CMD...
  name=$1; renv=$2; senv=$3; shift 3
  t0=$(date +%s)
  RN_CONF_RECV_ENV="$renv" RN_CONF_SEND_ENV="$senv" timeout "$T" "$@" >"$O/$name.log" 2>&1
  rc=$?; t=$(( $(date +%s) - t0 ))
  if [ $rc -eq 0 ]; then echo "ok $name (${t} s)" >>"$R"
  else echo "not ok $name (exit $rc after ${t} s; see $name.log)" >>"$R"
    grep -E '^not ok|WARN' "$O/$name.log" | head -20 | sed 's/^/#   /' >>"$R"; fi
}

ONE_R="RAILNET_NICS==rxe0"; ONE_S="RAILNET_NICS==rxe1"
TWO_R="RAILNET_NICS==rxe0,rxe2"; TWO_S="RAILNET_NICS==rxe1,rxe3"
check conformance-1qp "$ONE_R" "$ONE_S" "$B/tests/conformance-test" --api v11
check conformance-4qp "$ONE_R,RAILNET_IB_QPS=4" "$ONE_S,RAILNET_IB_QPS=4" "$B/tests/conformance-test" --api v11 --only messages
check conformance-v8-2qp "$ONE_R,RAILNET_IB_QPS=2" "$ONE_S,RAILNET_IB_QPS=2" "$B/tests/conformance-test" --api v8 --only "in flight"
RN_IB_VDEV=0,1 check verify-2rail-2qp "$TWO_R,RAILNET_IB_QPS=2" "$TWO_S,RAILNET_IB_QPS=2" "$B/tests/bench/ib_bench" verify
check fault "$ONE_R" "$ONE_S" "$B/tests/fault-test" --api v11
# Nothing inline (RAILNET_IB_INLINE=0): every FIFO write, size and small
# message DMA-read from registered memory instead of copied at post.
check conformance-noinline "$ONE_R,RAILNET_IB_INLINE=0" "$ONE_S,RAILNET_IB_INLINE=0" \
  "$B/tests/conformance-test" --api v11 --only messages
# A rogue peer writing corrupt FIFO slots, immediates, sizes, connection info.
check rogue "$ONE_R" "$ONE_S" "$B/tests/rogue-test"
# Every matching-rule program the tree has (tests/*match*), over 2 QPs so
# groups spread over QPs.
for m in "$B"/tests/*match*; do
  [ -f "$m" ] && [ -x "$m" ] || continue
  check "$(basename "$m")" "$ONE_R,RAILNET_IB_QPS=2" "$ONE_S,RAILNET_IB_QPS=2" "$m"
done
exit 0
