#!/bin/sh
# TAP: railnet's TCP transport on a 3-rail testbed (scripts/railbed) while
# the rails fail at random, one at a time (multirail-chaos: its link down
# at both ends or one, a black hole, 20% loss each way (nft), or its rate
# cut to 2 Mbit/s, each for
# 0.5 .. 3 s, then restored): 4 comm pairs on the fused device, a thread
# per side, random grouped receives, tags and sizes (0 B .. 16 MiB).
# Every byte verified, no call failed, no protocol violation and no failed
# comm WARNed, on both sides; without and with helper threads, and at
# the lowest RAILNET_RAIL_TIMEOUT_MS (1 s, as long as the default stall:
# every bound that waits on the control connection must leave its move
# time; 5 of 13 seeds failed when two of them did not), and with the comms
# closed and connected again 4 times (so they connect, some over kept
# connections, while a rail is down: a rail left out at connect).  The
# damage is random (RN_CHAOS_SEED picks it, and the traffic), so a run
# that fails names its seed.  Time bounds only turn hangs into failures.
# Skips (before any test) only without root, ip, tc, network namespaces,
# veth or tbf.  The testbed is removed on exit, also on failure.
cd "$(dirname "$0")/../.." || exit 1
NAME=rbchaos$$
BEDS="$NAME" OUT_TAG=chaos XFER_ENV= PLAN=6
. tests/multirail/lib.sh
CHAOS=$B/tests/multirail-chaos
SEED=${RN_CHAOS_SEED:-$(date +%s)}

[ -e "$CHAOS" ] || not_run "$CHAOS not built (run make first)"
bed_first "$NAME" 3 1000 "$OUT/topo.xml" \
  "railbed: $NAME-a/$NAME-b joined by 3 rails of 1 Gbit/s, one fused device" --rails 3

chaos() { # LOG SEED [K=V,...] [more multirail-chaos arguments]
  log=$1 seed=$2 extra=${3:-}
  shift 2
  [ $# -gt 0 ] && shift
  "$CHAOS" --railbed "$NAME" --seed "$seed" --pairs 4 --groups 1000 --timeout 150 "$@" \
    --env "RAILNET_TRANSPORT=socket,RAILNET_SOCKET_IFNAME=veth,RAILNET_TOPO_FILE=$OUT/topo.xml${extra:+,$extra}" \
    >"$OUT/$log.log" 2>"$OUT/$log.err"
}
for run in 1 2 3 4; do
  seed=$((SEED + run - 1))
  more=''
  case $run in
    1) what="no helper threads" extra=RAILNET_SOCKET_NTHREADS=0 ;;
    2) what="2 helper threads" extra=RAILNET_SOCKET_NTHREADS=2 ;;
    3) what="RAILNET_RAIL_TIMEOUT_MS=1000 (the lowest), no helper threads"
      extra=RAILNET_SOCKET_NTHREADS=0,RAILNET_RAIL_TIMEOUT_MS=1000 ;;
    *) what="the comms closed and connected again 4 times (kept connections reused), no helper threads"
      extra=RAILNET_SOCKET_NTHREADS=0 more="--rounds 5" ;;
  esac
  # shellcheck disable=SC2086 # $more is a list of arguments
  chaos run$run $seed $extra $more
  rc=$?
  line=$(grep '^result' "$OUT/run$run.log")
  if [ $rc -eq 0 ]; then
    result OK "$what, seed $seed: ${line#result ok: }; every byte verified, no error, no violation"
  else
    result NOTOK "$what, seed $seed (rerun: RN_CHAOS_SEED=$seed): ${line:-exit $rc}"
    grep -v '^result' "$OUT/run$run.log" | tail -30 | details
    grep WARN "$OUT/run$run.err" | tail -5 | cut -c1-300 | details
  fi
done

nothing_left_behind
