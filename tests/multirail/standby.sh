#!/bin/sh
# TAP: the standby NIC of a single-rail TCP device on the railbed testbed
# (scripts/railbed/railbed.sh): two rails, the topology places veth0 next
# to the GPU and veth1 behind another switch, so the planner makes veth0
# the device and veth1 its standby.
#  - railnet-topo --json reports the standby; the plugin's device line too.
#  - veth0's link down mid-transfer (for 3 s): the standby carries the rest, every
#    byte verified, no error, one WARN naming the device, the rail, the
#    standby and the cause; veth0 up again: re-admitted, the standby given
#    back (one INFO) and veth0 carrying bytes again, by the plugin's
#    per-rail counters (RAILNET_STATS), not by timing.
#  - veth0 and then the standby down: an error on both sides within the
#    bound, no hang; with RAILNET_STANDBY=0 veth0 down alone does that, also
#    50 ms in, while the comm's data streams open.
# Every isend/irecv/test return code is checked by multirail-xfer.  Time
# bounds only turn hangs into failures (x RN_TIMEOUT_SCALE).
# Skips (before any test) only without root, ip, tc, network namespaces,
# veth or tbf.  Every testbed is removed on exit, also on failure.
cd "$(dirname "$0")/../.." || exit 1
NAME=rbsb$$
NAME0=rbsb$$o
BOUND=20 # seconds after a cut; multirail-xfer scales it by RN_TIMEOUT_SCALE
# A side with bytes in flight at a cut fails within RAILNET_RAIL_TIMEOUT_MS
# (10 s); one with nothing in flight then (its receives' clear-to-send
# already acknowledged, the next message never announced) learns it from
# the control connection's keepalive, RAILNET_SOCKET_TIMEOUT_MS (30 s by
# default): 10 s here, so both bounds fit in BOUND.
SOCKET_TIMEOUT_MS=10000
BEDS="$NAME $NAME0" OUT_TAG=standby XFER_ENV=RAILNET_SOCKET_TIMEOUT_MS=$SOCKET_TIMEOUT_MS PLAN=10
. tests/multirail/lib.sh

# 1. the testbed, and its topology with veth1 as the standby
bed_first "$NAME" 2 300 "$OUT/topo.xml" \
  "railbed: namespaces $NAME-a/$NAME-b joined by 2 rails of 300 Mbit/s, veth1 behind another switch" \
  --standby 1

# 2. the planner: device veth0 alone, standby veth1 (and none with
# RAILNET_STANDBY=0)
RAILNET_STANDBY=1 "$B/railnet-topo" --topo "$OUT/topo.xml" --json >"$OUT/topo.json" 2>&1
RAILNET_STANDBY=0 "$B/railnet-topo" --topo "$OUT/topo.xml" --json >"$OUT/topo0.json" 2>&1
if grep -q '"vdevices":\[{"name":"veth0",[^]]*"nics":\["veth0"\]' "$OUT/topo.json" &&
  grep -q '"standby":{"nic":"veth1"' "$OUT/topo.json" &&
  grep -q '"standby":{"nic":null' "$OUT/topo0.json"; then
  result OK "railnet-topo --json: device veth0 with standby veth1; no standby with RAILNET_STANDBY=0"
else
  result NOTOK "railnet-topo --json does not give device veth0 the standby veth1 (or gives one with RAILNET_STANDBY=0)"
  details "$OUT/topo.json" "$OUT/topo0.json"
fi

# 3-5. veth0's link down 1 s into the transfer, up again at 4 s (3 s down,
# three times RAILNET_RAIL_STALL_MS: a sender starved of CPU on a loaded
# host, under the sanitizers, still sees the rail stalled before it
# comes back)
xfer "$NAME" "$OUT/topo.xml" cut 1 --bytes 320M --interval 0.5 --timeout $((4 + BOUND)) \
  --at "1:$RB --name $NAME down 0" --at "4:$RB --name $NAME up-link 0"
rc=$?
ninfo=$(grep -c 'NET/railnet : dev 0: veth0 transport=socket rails=1 .* standby=veth1 ' "$OUT/cut.err")
if [ $rc -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok.* bytes=335544320 ' "$OUT/cut.log" &&
  [ "$ninfo" -eq 2 ]; then
  result OK "device veth0 (standby veth1 in both processes' device lines), its link down 1 s into 320 MiB and up at 4 s: every byte verified, no error, within $((4 + BOUND)) s"
else
  result NOTOK "device veth0, its link down 1 s into 320 MiB and up at 4 s: every byte verified, no error (exit $rc; device lines naming the standby: $ninfo of 2)"
  show cut
fi
warn=$(grep -c 'WARN.*(dev 0): rail veth0 taken out: .*; every rail of the device is down, so its standby NIC veth1 takes over' "$OUT/cut.err")
nwarn=$(grep -c 'WARN' "$OUT/cut.err")
back=$(grep -c 'standby NIC veth1 given back: rail veth0 is up again' "$OUT/cut.err")
if [ "$warn" -eq 1 ] && [ "$nwarn" -eq 1 ] && [ "$back" -eq 1 ]; then
  result OK "one WARN when the standby veth1 took over (naming dev 0, rail veth0, the cause), no other WARN, one INFO when it was given back"
else
  result NOTOK "WARNs naming the standby's takeover: $warn (1), WARNs in all: $nwarn (1), INFOs giving it back: $back (1)"
  grep -E '^event' "$OUT/cut.log" | details
  grep -E 'WARN|standby|re-admitted' "$OUT/cut.err" | cut -c1-300 | details
fi
# The sender's counters: by the last interval line with veth0 failed the
# standby had carried bytes; at close veth0 is up after one failure and
# carried more than it had then (used again), and more since then than
# the standby (which only finishes what it held once given back).
down=$(grep '"event":"interval"' "$OUT/cut.stats" | grep '"side":"send"' |
  grep '"name":"veth0","state":"failed"' | tail -1)
l=$(stat_line "$OUT/cut.stats" send close)
b0_down=$(rail_field "$down" veth0 bytes) b0_end=$(rail_field "$l" veth0 bytes)
s_down=$(rail_field "$down" veth1 bytes) s_end=$(rail_field "$l" veth1 bytes)
st0=$(rail_field "$l" veth0 state) f0=$(rail_field "$l" veth0 failures)
role=$(rail_field "$l" veth1 role)
if [ -n "$down" ] && [ "${s_down:-0}" -gt 0 ] && [ "$st0" = up ] && [ "$f0" = 1 ] &&
  [ "$role" = standby ] && [ "${b0_end:-0}" -gt "${b0_down:-0}" ] &&
  [ $((b0_end - b0_down)) -gt $((s_end - s_down)) ]; then
  result OK "the plugin's counters: while veth0 was out the standby veth1 had carried $((s_down >> 20)) MiB; veth0 up at close after 1 failure, carrying $(((b0_end - b0_down) >> 20)) MiB after that against the standby's $(((s_end - s_down) >> 20)) MiB"
else
  result NOTOK "the plugin's counters: line with veth0 failed '${down:+found}', standby bytes then '${s_down:-?}' (> 0), role '${role:-?}'; veth0 at close '${st0:-?}' (up) after '${f0:-?}' failure(s) (1), bytes then '${b0_down:-?}' and at close '${b0_end:-?}' (more, and more than the standby's '${s_down:-?}' -> '${s_end:-?}')"
  details "$OUT/cut.stats"
fi

# 6-7. veth0 down at 1 s, the standby too at 3 s: an error on both sides
# within the bound; meanwhile, on a second testbed with RAILNET_STANDBY=0,
# veth0 down at 1 s: the same, no standby used
"$RB" --name "$NAME" up-link 0 >/dev/null 2>&1 && link_up "$NAME" 0
if "$RB" --name "$NAME0" up --rails 2 --rate 300 >"$OUT/up0.log" 2>&1 &&
  "$RB" --name "$NAME0" topo-xml "$OUT/topo0.xml" --standby 1 2>>"$OUT/up0.log"; then
  XENV=RAILNET_STANDBY=0 xfer "$NAME0" "$OUT/topo0.xml" off 1 --bytes 192M --interval 0.5 \
    --timeout $((1 + BOUND)) --at "1:$RB --name $NAME0 down 0" &
  pid0=$!
else
  pid0=''
fi
xfer "$NAME" "$OUT/topo.xml" both 1 --bytes 192M --interval 0.5 --timeout $((3 + BOUND)) \
  --at "1:$RB --name $NAME down 0" --at "3:$RB --name $NAME down 1"
rc=$?
if [ $rc -eq 1 ] && both_error both &&
  grep -q 'standby NIC veth1 takes over' "$OUT/both.err"; then
  result OK "veth0 down at 1 s (the standby took over), then the standby at 3 s: an error on both sides within $((3 + BOUND)) s"
else
  result NOTOK "veth0 down at 1 s, the standby at 3 s: an error on both sides within $((3 + BOUND)) s (exit $rc)"
  show both
fi
if [ -z "$pid0" ]; then
  result NOTOK "second testbed up failed"
  details "$OUT/up0.log"
else
  wait "$pid0"
  rc0=$?
  sb=$(grep -c 'standby' "$OUT/off.err")
  ndev=$(grep -c 'NET/railnet : dev 0: veth0 transport=socket rails=1 .* standby=none ' "$OUT/off.err")
  if [ $rc0 -eq 1 ] && both_error off &&
    [ "$ndev" -eq 2 ]; then
    result OK "RAILNET_STANDBY=0: device veth0 without a standby, its link down at 1 s: an error on both sides within $((1 + BOUND)) s"
  else
    result NOTOK "RAILNET_STANDBY=0, veth0 down at 1 s: an error on both sides (exit $rc0; device lines with standby=none: $ndev of 2; lines naming a standby: $sb)"
    show off
  fi
fi

# 7b. the same, veth0 down 50 ms in, while the comm's data streams open
# and its first messages go inline on the control connection: the bound
# holds there too
if [ -n "$pid0" ] && "$RB" --name "$NAME0" up-link 0 >/dev/null 2>&1 && link_up "$NAME0" 0; then
  XENV=RAILNET_STANDBY=0 xfer "$NAME0" "$OUT/topo0.xml" early 1 --bytes 192M --interval 0.5 \
    --timeout $((1 + BOUND)) --at "0.05:$RB --name $NAME0 down 0"
  rc=$?
  if [ $rc -eq 1 ] && both_error early; then
    result OK "RAILNET_STANDBY=0, veth0 down 50 ms in, while the data streams open: an error on both sides within $((1 + BOUND)) s"
  else
    result NOTOK "RAILNET_STANDBY=0, veth0 down 50 ms in, while the data streams open: an error on both sides (exit $rc)"
    show early
  fi
else
  result NOTOK "second testbed: veth0 not up again for the early cut"
fi

# 8. a standby that cannot be reached at connect (its link down): the
# comm connects without it and carries verified data over veth0
"$RB" --name "$NAME" up-link 0 >/dev/null 2>&1 && link_up "$NAME" 0
"$RB" --name "$NAME" down 1 >/dev/null 2>&1
xfer "$NAME" "$OUT/topo.xml" nosb 1 --bytes 32M --interval 0 --timeout $((BOUND + 30))
rc=$?
if [ $rc -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok.* bytes=33554432 ' "$OUT/nosb.log"; then
  result OK "the standby's link down before connect: the comm connects without it, 32 MiB verified"
else
  result NOTOK "the standby's link down before connect: exit $rc"
  show nosb
  grep -E 'standby|WARN' "$OUT/nosb.err" | cut -c1-300 | details
fi

# 9. nothing left behind
nothing_left_behind
