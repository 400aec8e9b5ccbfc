#!/bin/sh
# TAP: a rail that is down when the comm connects, on the railbed testbed
# (scripts/railbed/railbed.sh): a device fusing two rails connects over
# the rail that answers, and the other joins the comm once it answers too.
#  - Rail 1 black-holed (links up, every packet dropped) before the
#    processes start, restored 2 s into the transfer: connect completes,
#    every byte verified, no error; one WARN, from the sender, naming the
#    rail and why it was left out; the receiver says so in an INFO; the
#    rail is re-admitted on both sides and carries bytes by the end, by the
#    plugin's per-rail counters (RAILNET_STATS), not by timing.
#  - The same with rail 0, the control connection's rail: the control
#    connection starts on rail 1.
#  - Rail 1 unreachable at the sender (a route of type unreachable: its
#    connects fail at once with "No route to host"), the route removed 2 s
#    into the transfer: the same.
#  - Rail 1 black-holed once a first comm pair closed and kept its
#    connection for reuse: the comm of the transfer connects on it, and
#    its data streams, opened with its first message, go without rail 1;
#    the same checks.
#  - Rail 1 black-holed at connect with RAILNET_TRAFFIC_CLASS=32: the same
#    checks, and once the rail joined again every socket of the sender on
#    it carries the class (TOS 0x20, by ss --tos).
# Every isend/irecv/test return code is checked by multirail-xfer.  Time
# bounds only turn hangs into failures (x RN_TIMEOUT_SCALE).
# Skips (before any test) only without root, ip, tc, network namespaces,
# veth or tbf.  Every testbed is removed on exit, also on failure.
cd "$(dirname "$0")/../.." || exit 1
NAME=rblo$$
BEDS="$NAME" OUT_TAG=leftout XFER_ENV= PLAN=18
. tests/multirail/lib.sh

# 1. the testbed
bed_first "$NAME" 2 300 "$OUT/topo.xml" \
  "railbed: namespaces $NAME-a/$NAME-b joined by 2 rails of 300 Mbit/s (tbf)"

# One case: FAULT applied before the processes start, UNDO 2 s after the
# first post; multirail-xfer moves data for 10 s.  Three tests: the data,
# the WARN and INFO lines, the counters.
leftout() { # LOG RAIL DESCRIPTION FAULT UNDO WHY-PATTERN [reuse]
  log=$1 rail=$2 desc=$3 fault=$4 undo=$5 why=$6 mode=${7:-}
  when="at connect" reuse=''
  if [ "$mode" = reuse ]; then
    # the fault comes once a first comm pair closed and kept its connection
    when="when the streams opened" reuse=$fault fault=true
  fi
  if ! sh -c "$fault" >"$OUT/$log.fault" 2>&1; then
    result NOTOK "$desc: the fault could not be set up"
    details "$OUT/$log.fault"
    result NOTOK "$desc: not run"
    result NOTOK "$desc: not run"
    return
  fi
  # 6 s in (the rail back since about 3 s): the sender's sockets
  set -- --seconds 10 --bytes 4G --interval 0.5 --timeout 40 --at "2:$undo" \
    --at "6:ip netns exec $NAME-a ss -tnH --tos state established >$OUT/$log.ss 2>&1"
  [ -n "$reuse" ] && set -- "$@" --reuse "$reuse"
  xfer "$NAME" "$OUT/topo.xml" "$log" 2 "$@"
  rc=$?
  sh -c "$undo" >/dev/null 2>&1 # in case the run ended before it
  verified "$log" $rc "$desc: connected"
  nwarn=$(grep -c 'WARN' "$OUT/$log.err")
  warn=$(grep -c "WARN.*connection to .*: rail veth$rail (198\.18\.$rail\.1 to 198\.18\.$rail\.2:[0-9]*) $why; connecting over the other rail" "$OUT/$log.err")
  info=$(grep -c "receive comm from .*: rail veth$rail left out (the sender could not reach it $when)" "$OUT/$log.err")
  back=$(grep -c "rail veth$rail re-admitted" "$OUT/$log.err")
  kept=$(grep -c 'connected to .* (a kept connection)' "$OUT/$log.err")
  [ -n "$reuse" ] || kept=-
  if [ "$nwarn" -eq 1 ] && [ "$warn" -eq 1 ] && [ "$info" -eq 1 ] && [ "$back" -eq 2 ] &&
    [ "$kept" != 0 ]; then
    result OK "$desc: one WARN (the sender's, naming veth$rail and why), the receiver's INFO, re-admitted on both sides"
  else
    result NOTOK "$desc: WARNs $nwarn (1), naming veth$rail and why $warn (1), the receiver's INFO $info (1), re-admissions $back (2), on a kept connection $kept (1 or -)"
    grep -E 'WARN|left out|re-admitted|connected to|accepted a' "$OUT/$log.err" | cut -c1-300 | details
  fi
  # The counters at close, both sides: the rail failed once (left out),
  # is up, and carried bytes; the other rail never failed.
  ok=1 why2=''
  other=$((1 - rail))
  for side in send recv; do
    l=$(stat_line "$OUT/$log.stats" $side close)
    b=$(rail_field "$l" "veth$rail" bytes) st=$(rail_field "$l" "veth$rail" state)
    f=$(rail_field "$l" "veth$rail" failures) fo=$(rail_field "$l" "veth$other" failures)
    why2="$why2 $side: veth$rail ${b:-?} B, ${st:-?}, ${f:-?} failure(s), veth$other ${fo:-?} failure(s);"
    if [ -z "$b" ] || [ "$b" -le 0 ] || [ "$st" != up ] || [ "$f" != 1 ] || [ "$fo" != 0 ]; then
      ok=0
    fi
  done
  if [ $ok = 1 ]; then
    result OK "$desc: counters at close:$why2"
  else
    result NOTOK "$desc: counters at close (veth$rail: bytes > 0, up, 1 failure; veth$other: 0 failures):$why2"
  fi
}

# 2-4. rail 1 black-holed at connect
leftout hole1 1 "rail 1 black-holed at connect, restored 2 s in" \
  "$RB --name $NAME blackhole 1" "$RB --name $NAME restore 1" \
  "did not connect within [0-9]* ms (2 x RAILNET_RAIL_STALL_MS)"
# 5-7. rail 0, the control connection's, black-holed at connect
leftout hole0 0 "rail 0 (the control connection's) black-holed at connect, restored 2 s in" \
  "$RB --name $NAME blackhole 0" "$RB --name $NAME restore 0" \
  "did not connect within [0-9]* ms (2 x RAILNET_RAIL_STALL_MS)"
# 8-10. rail 1 without a route at the sender
leftout noroute 1 "rail 1 without a route at the sender, routed 2 s in" \
  "ip -n $NAME-a route add unreachable 198.18.1.2/32" \
  "ip -n $NAME-a route del unreachable 198.18.1.2/32" \
  "No route to host"

# 11-13. rail 1 black-holed after a first comm pair closed and kept its
# connection: the comm of the transfer connects on it, and its data
# streams open (OPEN, STREAMS) with rail 1 down
leftout kept1 1 "rail 1 black-holed when a kept connection's streams open, restored 2 s in" \
  "$RB --name $NAME blackhole 1" "$RB --name $NAME restore 1" \
  "did not connect within [0-9]* ms (2 x RAILNET_RAIL_STALL_MS)" reuse

# 14-17. rail 1 black-holed at connect, with a traffic class for every
# send comm: the comm connects (the rail's streams get the class when they
# join), and 6 s in every data socket of the sender on rail 1 carries it
XENV=RAILNET_TRAFFIC_CLASS=32
leftout tos1 1 "with RAILNET_TRAFFIC_CLASS=32, rail 1 black-holed at connect, restored 2 s in" \
  "$RB --name $NAME blackhole 1" "$RB --name $NAME restore 1" \
  "did not connect within [0-9]* ms (2 x RAILNET_RAIL_STALL_MS)"
XENV=
on1=$(grep -c '198\.18\.1\.1:[0-9]* *198\.18\.1\.2:' "$OUT/tos1.ss")
tos1=$(grep '198\.18\.1\.1:[0-9]* *198\.18\.1\.2:' "$OUT/tos1.ss" | grep -c 'tos:0x20')
if [ "$on1" -ge 2 ] && [ "$tos1" -eq "$on1" ]; then
  result OK "with RAILNET_TRAFFIC_CLASS=32: the $on1 sockets of the sender on rail 1 after it joined again all carry TOS 0x20"
else
  result NOTOK "with RAILNET_TRAFFIC_CLASS=32: sockets of the sender on rail 1 after it joined again: $on1 (2 or more), with TOS 0x20: $tos1 (all)"
  details "$OUT/tos1.ss"
fi

# 18. nothing left behind
nothing_left_behind
