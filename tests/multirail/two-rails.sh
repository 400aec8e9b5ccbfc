#!/bin/sh
# TAP: railnet's TCP transport on the multi-rail testbed
# (scripts/railbed/railbed.sh): two network namespaces joined by veth
# rails shaped with tc tbf, the receiver in one namespace and the sender
# in the other.
#  - The planner fuses the rails into one device on both sides, verified
#    data crosses it, and both rails carry a fair part of it: by the
#    veths' own counters (outside the plugin) and by the plugin's per-rail
#    counters (RAILNET_STATS lines, parsed here).
#  - Unequal rates (4:1) and a rate that drops to 10% in the middle of a
#    transfer: the split follows the rates, judged by the plugin's byte
#    counters only (the shares), never by timing.
#  - Rails so slow that one chunk takes twice RAILNET_RAIL_TIMEOUT_MS:
#    bytes still arrive, so no side calls the comm dead.
#  - Small messages only (on the control connection) while its rail is
#    black-holed: the control connection moves, the comm goes on.
#  - A rail's link cut in the middle of a transfer and restored: every
#    byte verified, no error, one WARN, the rail reported failed, then
#    re-admitted and carrying bytes again; the rail of the control
#    connection cut, restored, then the other: the control connection
#    moves to the surviving rail each time and the comm goes on;
#    on a 4-rail device, the control connection's rail and an idle one
#    black-holed together: the move gives up the dial over the idle one in
#    time and uses a third; three rails cut one after another: the comm
#    goes on; then
#    the last rail of a 2-rail device cut too, and a single-rail device's
#    only link cut: an error on both sides within the bound, no hang.
# Every isend/irecv/test return code is checked by multirail-xfer.  Time
# bounds only turn hangs into failures (x RN_TIMEOUT_SCALE).
# Skips (before any test) only without root, ip, tc, network namespaces,
# veth or tbf.  Every testbed is removed on exit, also on failure.
cd "$(dirname "$0")/../.." || exit 1
NAME=rbtap$$
NAME1=rbtap$$s
NAME4=rbtap$$q
BOUND=20 # seconds after a cut; multirail-xfer scales it by RN_TIMEOUT_SCALE
BEDS="$NAME $NAME1 $NAME4" OUT_TAG=multirail XFER_ENV= PLAN=23
. tests/multirail/lib.sh

# 1. the testbed (the topology is written at equal rates: the planner fuses
# rails of one speed; the tests below change the rates afterwards)
bed_first "$NAME" 2 300 "$OUT/topo.xml" \
  "railbed: namespaces $NAME-a/$NAME-b joined by 2 rails of 300 Mbit/s (tbf)"

# 2. the planner fuses the rails (railnet-topo on the testbed's topology)
"$B/railnet-topo" --topo "$OUT/topo.xml" >"$OUT/topo.log" 2>&1
if grep -q '^  0: veth0+veth1  2 NIC(s)' "$OUT/topo.log"; then
  result OK "railnet-topo: one GPU, veth0 and veth1 fused into device veth0+veth1"
else
  result NOTOK "railnet-topo does not fuse veth0 and veth1"
  details "$OUT/topo.log"
fi

# 3. without a plan, each rail is a device of its own: getProperties gives
# each a GUID and port of its own, as NCCL's graph search takes devices
# that share both for one NIC (one bandwidth between them)
ip netns exec "$NAME-a" env RAILNET_TRANSPORT=socket RAILNET_SOCKET_IFNAME=veth \
  "$B/tests/conformance-test" --only "properties are sane on every device" >"$OUT/props.log" 2>&1
rc=$?
ndev=$(grep -c '^# dev [0-9]*: name veth[01] .* guid 0x[1-9a-f]' "$OUT/props.log")
if [ $rc -eq 0 ] && [ "$ndev" -ge 2 ]; then
  result OK "unplanned devices veth0 and veth1: each its own GUID and port (conformance's property checks, every API version)"
else
  result NOTOK "unplanned devices veth0 and veth1: conformance's property checks exit $rc, $ndev device line(s) with a GUID"
  grep -E '^not ok|^# dev|GUID|guid' "$OUT/props.log" | head -20 | details
fi

# 4-7. verified data over the fused device, one side in each namespace
xfer "$NAME" "$OUT/topo.xml" even 2 --bytes 64M --interval 0 --timeout 60
rc=$?
ninfo=$(grep -c 'NET/railnet : dev 0: veth0+veth1 transport=socket rails=2' "$OUT/even.err")
if [ "$ninfo" -eq 2 ]; then
  result OK "the plugin's INFO log in both namespaces: dev 0 is veth0+veth1 with 2 rails"
else
  result NOTOK "the plugin's INFO log names the fused device in $ninfo of 2 processes"
  grep 'NET/railnet : dev ' "$OUT/even.err" | details
fi
if [ $rc -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok.* bytes=67108864 ' "$OUT/even.log"; then
  result OK "64 MiB verified across the fused device, receiver in $NAME-b, sender in $NAME-a"
else
  result NOTOK "64 MiB across the fused device: multirail-xfer exit $rc"
  show even
fi
# Each rail's received bytes (headers included) against the payload: an
# even split gives each about 52%; 10% is far above stray packets.
line=$(grep '^rails side=receiver' "$OUT/even.log")
r0=$(echo "$line" | sed -n 's/.* veth0=\([0-9]*\).*/\1/p')
r1=$(echo "$line" | sed -n 's/.* veth1=\([0-9]*\).*/\1/p')
min=$((67108864 / 10))
if [ -n "$r0" ] && [ -n "$r1" ] && [ "$r0" -ge $min ] && [ "$r1" -ge $min ]; then
  result OK "both rails carried the data (receiver's rx_bytes: veth0 $r0, veth1 $r1; each >= $min)"
else
  result NOTOK "both rails carry the data: receiver's rx_bytes veth0 '${r0:-?}', veth1 '${r1:-?}', each should be >= $min"
  details "$OUT/even.log"
fi
# The plugin's own counters, at close, on both sides: payload bytes per
# rail, with those that went inline on the control connection while the
# data streams opened (one message at most), add up to the 64 MiB, each
# rail carried >= 10%, nothing failed.
ok=1 why=''
for side in send recv; do
  l=$(stat_line "$OUT/even.stats" $side close)
  b0=$(rail_field "$l" veth0 bytes) b1=$(rail_field "$l" veth1 bytes)
  f0=$(rail_field "$l" veth0 failures) f1=$(rail_field "$l" veth1 failures)
  ib=$(echo "$l" | sed -n 's/.*"inline_bytes":\([0-9]*\).*/\1/p')
  why="$why $side: veth0 ${b0:-?} B, veth1 ${b1:-?} B, inline while opening ${ib:-?} B, failures ${f0:-?}/${f1:-?};"
  if [ -z "$b0" ] || [ -z "$b1" ] || [ "$b0" -lt $min ] || [ "$b1" -lt $min ] ||
    [ "${f0:-1}" -ne 0 ] || [ "${f1:-1}" -ne 0 ]; then
    ok=0
  elif [ $side = recv ] && [ $((b0 + b1 + ${ib:-0})) -ne 67108864 ]; then
    ok=0
    why="$why the receiver's bytes do not add up to 67108864;"
  elif [ "${ib:-0}" -gt 1048576 ]; then
    # a device of several rails sends one message inline while its
    # streams open; the rest wait for them and are striped
    ok=0
    why="$why more than one 1 MiB message went inline while the streams opened;"
  fi
done
if [ $ok = 1 ]; then
  result OK "the plugin's per-rail counters (RAILNET_STATS):$why each rail >= $min, the receiver's (and its inline bytes) add up to 64 MiB"
else
  result NOTOK "the plugin's per-rail counters (RAILNET_STATS):$why"
  cat "$OUT/even.stats" | details
fi

# 8. 4 KiB messages (eager, on the control connection): a send completes
# once its bytes are in the socket, and the sender closes and exits as soon
# as its last one did, with megabytes still queued on a 300 Mbit/s rail and
# the receiver's clear-to-sends unread.  Its kept connection (connection
# reuse) must close without a reset, which would throw the queued bytes away.
xfer "$NAME" "$OUT/topo.xml" eager 2 --size 4K --bytes 32M --interval 0 --timeout 60
rc=$?
st=$(sed -n 's/^result .*receiver=ok@\([0-9.]*\) sender=ok@\([0-9.]*\) .*/sender done at \2 s, receiver at \1 s/p' "$OUT/eager.log")
if [ $rc -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok.* bytes=33554432 ' "$OUT/eager.log"; then
  result OK "32 MiB in 4 KiB messages, the sender exiting once its sends completed: every byte verified ($st)"
else
  result NOTOK "32 MiB in 4 KiB messages, the sender exiting once its sends completed: exit $rc"
  show eager
fi

# 9. unequal rates, 300 and 75 Mbit/s (4:1): the split follows the rates
"$RB" --name "$NAME" rate 1 75 >/dev/null
xfer "$NAME" "$OUT/topo.xml" ratio 2 --bytes 64M --interval 0 --timeout 60
rc=$?
l=$(stat_line "$OUT/ratio.stats" send close)
s0=$(rail_field "$l" veth0 share) s1=$(rail_field "$l" veth1 share)
if [ $rc -eq 0 ] && [ -n "$s0" ] && [ -n "$s1" ] && holds "$s0 >= 0.65 && $s1 >= 0.05"; then
  result OK "rails at 300 and 75 Mbit/s: 64 MiB verified, the plugin's counters split it $s0 / $s1 (>= 0.65 on the fast rail; 0.8 is the rates' ratio)"
else
  result NOTOK "rails at 300 and 75 Mbit/s: exit $rc, the plugin's counters split it ${s0:-?} / ${s1:-?} (expected >= 0.65 on the fast rail, >= 0.05 on the slow one)"
  show ratio
fi
"$RB" --name "$NAME" rate 1 300 >/dev/null

# 10. a rate that changes mid-transfer: rail 0 drops to 30 Mbit/s (10%) 1 s
# in; over the sender's counter lines from 2 s after the drop on, rail 0
# carries at most 30% of the new bytes (the rates say 9%)
xfer "$NAME" "$OUT/topo.xml" change 2 --bytes 160M --interval 0 --timeout 90 \
  --at "1:$RB --name $NAME rate 0 30"
rc=$?
share=$(grep '"event":"interval"' "$OUT/change.stats" | grep '"side":"send"' | awk '
  { ms = $0; sub(/.*"ms":/, "", ms); sub(/,.*/, "", ms)
    b0 = $0; sub(/.*"name":"veth0"[^}]*"bytes":/, "", b0); sub(/,.*/, "", b0)
    b1 = $0; sub(/.*"name":"veth1"[^}]*"bytes":/, "", b1); sub(/,.*/, "", b1)
    if (ms + 0 >= 3000) { if (!have) { f0 = b0; f1 = b1; have = 1 } l0 = b0; l1 = b1 } }
  END { d = (l0 - f0) + (l1 - f1); if (have && d > 0) printf "%.3f", (l0 - f0) / d }')
if [ $rc -eq 0 ] && [ -n "$share" ] && holds "$share <= 0.30"; then
  result OK "rail 0 cut to 10% of its rate 1 s into 160 MiB: all verified; from 2 s after, the plugin's counters give it a share of $share of the bytes (<= 0.30)"
else
  result NOTOK "rail 0 cut to 10% of its rate 1 s into 160 MiB: exit $rc, its share of the bytes from 2 s after: '${share:-none}' (expected <= 0.30)"
  show change
fi
"$RB" --name "$NAME" rate 0 300 >/dev/null

# 11. rails so slow that one chunk takes longer than RAILNET_RAIL_TIMEOUT_MS
# to arrive (1 MiB chunks, one stream per rail, 4 Mbit/s: about 2 s each,
# against a 1 s bound): bytes keep arriving, so neither side may call the
# comm dead (the receiver once counted only whole chunks landed, and
# failed it: "no rail delivered a byte for 1000 ms")
"$RB" --name "$NAME" rate 0 4 >/dev/null && "$RB" --name "$NAME" rate 1 4 >/dev/null
XENV=RAILNET_RAIL_TIMEOUT_MS=1000,RAILNET_SOCKET_NSTREAMS=2,RAILNET_SOCKET_CHUNK=1048576 \
  xfer "$NAME" "$OUT/topo.xml" slow 2 --bytes 4M --size 2M --window 1 --interval 0 --timeout 60
rc=$?
if [ $rc -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok.* bytes=4194304 ' "$OUT/slow.log" &&
  ! grep -q WARN "$OUT/slow.err"; then
  result OK "rails at 4 Mbit/s, 1 MiB chunks, RAILNET_RAIL_TIMEOUT_MS=1000: every byte verified, no WARN (a chunk takes twice the bound)"
else
  result NOTOK "rails at 4 Mbit/s, 1 MiB chunks, RAILNET_RAIL_TIMEOUT_MS=1000: exit $rc, or a WARN (a rail still delivering was called dead?)"
  show slow
fi
XENV=
"$RB" --name "$NAME" rate 0 300 >/dev/null
"$RB" --name "$NAME" rate 1 300 >/dev/null

# 12-13. a rail's link down in the middle of a transfer, and up again
xfer "$NAME" "$OUT/topo.xml" cut 2 --bytes 256M --interval 0.5 --timeout $((3 + BOUND)) \
  --at "1:$RB --name $NAME down 1" --at "3:$RB --name $NAME up-link 1"
rc=$?
if [ $rc -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok.* bytes=268435456 ' "$OUT/cut.log"; then
  result OK "2-rail device, rail 1's link down 1 s into 256 MiB and up at 3 s: every byte verified, no error, within ${BOUND} s"
else
  result NOTOK "2-rail device, rail 1's link down 1 s into 256 MiB and up at 3 s: every byte verified, no error, within ${BOUND} s (exit $rc)"
  show cut
fi
# The sender's counters: veth1 failed once; its bytes in the last line that
# shows it failed, against its bytes at close (it carried data again).
down=$(grep '"event":"interval"' "$OUT/cut.stats" | grep '"side":"send"' |
  grep '"name":"veth1","state":"failed"' | tail -1)
l=$(stat_line "$OUT/cut.stats" send close)
b_down=$(rail_field "$down" veth1 bytes) b_end=$(rail_field "$l" veth1 bytes)
st1=$(rail_field "$l" veth1 state) f1=$(rail_field "$l" veth1 failures)
warn=$(grep -c 'WARN.*rail veth1 taken out' "$OUT/cut.err")
back=$(grep -c 'rail veth1 re-admitted' "$OUT/cut.err")
if [ "$warn" -eq 1 ] && [ "$back" -eq 2 ] && [ "$f1" = 1 ] && [ "$st1" = up ] &&
  [ -n "$b_down" ] && [ "$b_end" -gt "$b_down" ]; then
  result OK "rail veth1: one WARN when taken out, re-admitted (an INFO on each side), its counters: 1 failure, up at the end, $((b_down >> 20)) MiB while failed and $((b_end >> 20)) MiB at close"
else
  result NOTOK "rail veth1: $warn WARN(s) taking it out (1), $back INFO(s) re-admitting it (2), failures '${f1:-?}' (1), state at close '${st1:-?}' (up), bytes while failed '${b_down:-?}' and at close '${b_end:-?}' (more)"
  show cut
  grep -E 're-admitted|took data streams|lost its streams' "$OUT/cut.err" | cut -c1-300 | details
fi

# 14-15. the control connection's rail: rail 0's link down 1 s in and up
# at 3 s, then rail 1's (where the control connection went) at 6 s: every
# byte verified, no error; the control connection moves to the surviving
# rail each time (an INFO on each side), rail 0 is re-admitted
xfer "$NAME" "$OUT/topo.xml" ctl 2 --bytes 384M --interval 0.5 --timeout $((6 + BOUND)) \
  --at "1:$RB --name $NAME down 0" --at "3:$RB --name $NAME up-link 0" \
  --at "6:$RB --name $NAME down 1"
rc=$?
if [ $rc -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok.* bytes=402653184 ' "$OUT/ctl.log"; then
  result OK "2-rail device, rail 0 (the control connection's) down 1 s into 384 MiB, up at 3 s, rail 1 down at 6 s: every byte verified, no error, within $((6 + BOUND)) s"
else
  result NOTOK "2-rail device, rail 0 (the control connection's) down 1 s into 384 MiB, up at 3 s, rail 1 down at 6 s: every byte verified, no error (exit $rc)"
  show ctl
fi
moved1=$(grep -c 'control connection 1 resumed over rail veth1' "$OUT/ctl.err")
moved2=$(grep -c 'control connection 2 resumed over rail veth0' "$OUT/ctl.err")
back=$(grep -c 'rail veth0 re-admitted' "$OUT/ctl.err")
l=$(stat_line "$OUT/ctl.stats" send close)
st0=$(rail_field "$l" veth0 state) f0=$(rail_field "$l" veth0 failures)
if [ "$moved1" -eq 2 ] && [ "$moved2" -eq 2 ] && [ "$back" -eq 2 ] && [ "$st0" = up ] &&
  [ "$f0" = 1 ]; then
  result OK "the control connection moved to veth1 and back to veth0 (an INFO on each side each time), veth0 re-admitted: up at close after 1 failure"
else
  result NOTOK "control connection resumed over veth1 on $moved1 side(s) (2), then over veth0 on $moved2 (2); veth0 re-admitted on $back side(s) (2), at close '${st0:-?}' (up) after '${f0:-?}' failure(s) (1)"
  show ctl
  grep -E 'control connection|re-admitted|took data' "$OUT/ctl.err" | cut -c1-300 | details
fi
"$RB" --name "$NAME" up-link 1 >/dev/null && link_up "$NAME" 1

# 16. small messages only (4 KiB: inline on the control connection, the
# data streams idle) while the control connection's rail is black-holed
# 1 s in (links up, every packet dropped): the sender takes that rail out
# (its data-stream rule cannot see it, nothing is in flight there) and the
# control connection moves to the other rail; with RAILNET_RAIL_TIMEOUT_MS
# at 2 s, a build without that rule failed the comm ("control connection:
# nothing acknowledged or arrived for 2000 ms")
XENV=RAILNET_RAIL_TIMEOUT_MS=2000 xfer "$NAME" "$OUT/topo.xml" small 2 --size 4K --seconds 5 \
  --bytes 1G --interval 0 --timeout 30 --at "1:$RB --name $NAME blackhole 0"
rc=$?
XENV=
"$RB" --name "$NAME" restore 0 >/dev/null
moved=$(grep -c 'control connection 1 resumed over rail veth1' "$OUT/small.err")
if [ $rc -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok' "$OUT/small.log" &&
  [ "$moved" -eq 2 ]; then
  result OK "4 KiB messages for 5 s, rail 0 (the control connection's) black-holed at 1 s: every byte verified, no error, the control connection moved to veth1 (an INFO on each side)"
else
  result NOTOK "4 KiB messages for 5 s, rail 0 (the control connection's) black-holed at 1 s: exit $rc, control connection moved in $moved of 2 processes"
  show small
fi
link_up "$NAME" 0

# 17. the same as 12-13 with helper threads moving the streams' bytes (the
# default on hosts of 8 or more CPUs): cut, failover, re-admission.  (It
# once failed under load: a helper thread shut down, or marked dead, a
# stream after handing it to the caller, which had meanwhile given it the
# re-admitted connection.)
XENV=RAILNET_SOCKET_NTHREADS=2 xfer "$NAME" "$OUT/topo.xml" threads 2 --bytes 256M --interval 0.5 \
  --timeout $((3 + BOUND)) --at "1:$RB --name $NAME down 1" --at "3:$RB --name $NAME up-link 1"
rc=$?
back=$(grep -c 'rail veth1 re-admitted' "$OUT/threads.err")
if [ $rc -eq 0 ] && grep -q '^result status=ok .* bytes=268435456 ' "$OUT/threads.log" &&
  [ "$back" -eq 2 ]; then
  result OK "with 2 helper threads per comm: rail 1 down at 1 s and up at 3 s, 256 MiB verified, no error, re-admitted on both sides"
else
  result NOTOK "with 2 helper threads per comm: rail 1 down at 1 s and up at 3 s: exit $rc, $back INFO(s) re-admitting it (2)"
  show threads
  grep -E 'WARN|re-admitted|took data|lost its' "$OUT/threads.err" | cut -c1-300 | details
fi

# 18. four rails; small messages only while rails 0 (the control
# connection's) and 1 are black-holed together 1 s in: rail 1 carries
# nothing, so no rule takes it out, and the sender's first dial to move the
# control connection goes over it and is never answered.  With
# RAILNET_RAIL_TIMEOUT_MS at its lowest (1 s) that dial must give way in
# time (a quarter of the bound) to one over rail 2; a move that waits a
# fixed 2 s on each dial fails the comm.
# 19-20. four rails, three cut one after another: the last carries on
if "$RB" --name "$NAME4" up --rails 4 --rate 150 >"$OUT/up4.log" 2>&1 &&
  "$RB" --name "$NAME4" topo-xml "$OUT/topo4.xml" 2>>"$OUT/up4.log"; then
  XENV=RAILNET_RAIL_TIMEOUT_MS=1000 xfer "$NAME4" "$OUT/topo4.xml" dial 4 --size 4K --seconds 4 \
    --bytes 1G --interval 0 --timeout 30 \
    --at "1:$RB --name $NAME4 blackhole 0; $RB --name $NAME4 blackhole 1"
  rc=$?
  XENV=
  "$RB" --name "$NAME4" restore 0 >/dev/null
  "$RB" --name "$NAME4" restore 1 >/dev/null
  if [ $rc -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok' "$OUT/dial.log" &&
    grep -q 'control connection: the dial over rail veth1 .* did not connect within 250 ms' "$OUT/dial.err" &&
    grep -q 'send comm .*control connection 1 resumed over rail veth2' "$OUT/dial.err" &&
    grep -q 'rail veth0 taken out: the control connection on it: .* while rail veth1 delivered all it was given' "$OUT/dial.err"; then
    result OK "4-rail device, 4 KiB messages, rails 0 and 1 black-holed at 1 s (RAILNET_RAIL_TIMEOUT_MS=1000): rail 0 taken out naming rail 1 idle, not as working; the dial over rail 1 gave way after 250 ms, the control connection moved to veth2, every byte verified"
  else
    result NOTOK "4-rail device, 4 KiB messages, rails 0 and 1 black-holed at 1 s (RAILNET_RAIL_TIMEOUT_MS=1000): exit $rc, or rail 0's WARN not naming rail 1 idle, or no dial over veth1 given up, or the control connection not moved to veth2"
    show dial
    grep -E 'control connection|taken out' "$OUT/dial.err" | cut -c1-300 | details
  fi
  xfer "$NAME4" "$OUT/topo4.xml" seq 4 --bytes 160M --interval 0.5 --timeout $((3 + BOUND)) \
    --at "1:$RB --name $NAME4 down 3" --at "2:$RB --name $NAME4 down 2" \
    --at "3:$RB --name $NAME4 down 1"
  rc=$?
  "$RB" --name "$NAME4" clean
  l=$(stat_line "$OUT/seq.stats" send close)
  states="$(rail_field "$l" veth0 state) $(rail_field "$l" veth1 state) $(rail_field "$l" veth2 state) $(rail_field "$l" veth3 state)"
  if [ $rc -eq 0 ] && grep -q '^result status=ok .* bytes=167772160 ' "$OUT/seq.log"; then
    result OK "4-rail device, rails 3, 2 and 1 cut at 1, 2 and 3 s into 160 MiB: every byte verified, no error"
  else
    result NOTOK "4-rail device, rails 3, 2 and 1 cut at 1, 2 and 3 s into 160 MiB: exit $rc"
    show seq
  fi
  if [ "$states" = "up failed failed failed" ]; then
    result OK "the plugin's counters after the three cuts: veth0..3 $states"
  else
    result NOTOK "the plugin's counters after the three cuts: veth0..3 '$states' (expected up failed failed failed)"
    show seq
  fi
else
  result NOTOK "4-rail testbed up failed"
  details "$OUT/up4.log"
  for _ in 19 20; do result NOTOK "not run: no 4-rail testbed"; done
fi

# 21-22. no rail left: the second rail of the 2-rail device cut after the
# first, and the only link of a single-rail device: an error on both sides
# within the bound (RAILNET_RAIL_TIMEOUT_MS, 10 s by default), no hang
"$RB" --name "$NAME" up-link 1 >/dev/null 2>&1
"$RB" --name "$NAME1" up --rails 1 --rate 300 >"$OUT/up1.log" 2>&1 &&
  "$RB" --name "$NAME1" topo-xml "$OUT/topo1.xml" 2>>"$OUT/up1.log"
up1=$?
xfer "$NAME" "$OUT/topo.xml" last 2 --bytes 192M --interval 0.5 --timeout $((2 + BOUND)) \
  --at "1:$RB --name $NAME down 1" --at "2:$RB --name $NAME down 0" &
pid2=$!
if [ $up1 -eq 0 ]; then
  xfer "$NAME1" "$OUT/topo1.xml" single 1 --bytes 192M --interval 0.5 --timeout $((1 + BOUND)) \
    --at "1:$RB --name $NAME1 down 0"
  rc1=$?
fi
wait $pid2
rc2=$?
if [ $rc2 -eq 1 ] && grep -q '^result status=error receiver=error.* sender=error' "$OUT/last.log"; then
  result OK "2-rail device, rail 1 cut at 1 s, then rail 0 at 2 s: an error on both sides within ${BOUND} s"
else
  result NOTOK "2-rail device, rail 1 cut at 1 s, then rail 0 at 2 s: an error on both sides within ${BOUND} s (exit $rc2)"
  show last
fi
if [ $up1 -ne 0 ]; then
  result NOTOK "single-rail testbed up failed"
  details "$OUT/up1.log"
elif [ "$rc1" -eq 1 ] && grep -q '^result status=error receiver=error.* sender=error' "$OUT/single.log"; then
  result OK "single-rail device, its link down 1 s in: an error on both sides within ${BOUND} s"
else
  result NOTOK "single-rail device, its link down 1 s in: an error on both sides within ${BOUND} s (exit $rc1)"
  show single
fi

# 23. nothing left behind
nothing_left_behind
