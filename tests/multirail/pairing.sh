#!/bin/sh
# TAP: which rails a comm goes over when the two hosts' devices differ, on
# the railbed testbed (scripts/railbed/railbed.sh).  The connecting side
# pairs each of its rails with one of the peer's listening addresses: the
# address its kernel routes from that rail, else in order
# (plugin/tcp/PROTOCOL.md, Rails).
#  - Rail 1's NIC down (administratively) at the receiver's start, then at
#    the sender's: the two devices have 2 and 1 rails; the comm goes over
#    the rail both have, every byte verified, no WARN, one INFO from the
#    sender naming the pair and what stays out, one rail in the counters.
#  - The receiver's host lists the two NICs the other way round (its
#    device is veth1+veth0, the sender's veth0+veth1), and both hosts drop
#    packets whose source their routes would not reach (rp_filter=1), so a
#    stream from veth0 to the peer's veth1 address never connects: the
#    sender pairs veth0 with veth0 and veth1 with veth1 by route (one INFO),
#    every byte verified; rail 1 black-holed 3 s in is taken out by its
#    own name (one WARN, veth1 failed once on both sides by the per-rail
#    counters, veth0 never).  The build before failed the connect.
# Every isend/irecv/test return code is checked by multirail-xfer.  Time
# bounds only turn hangs into failures (x RN_TIMEOUT_SCALE).
# Skips (before any test) only without root, ip, tc, network namespaces,
# veth or tbf.  Every testbed is removed on exit, also on failure.
cd "$(dirname "$0")/../.." || exit 1
NAME=rbpair$$
BEDS="$NAME" OUT_TAG=pairing XFER_ENV= PLAN=11
. tests/multirail/lib.sh

# 1. the testbed
bed_first "$NAME" 2 300 "$OUT/topo.xml" \
  "railbed: namespaces $NAME-a/$NAME-b joined by 2 rails of 300 Mbit/s (tbf)"

# A NIC down (not administratively up) when a process starts is no rail
# of its device, so the two hosts' devices differ: the sender pairs the
# rails the two have in common (the peer's address the kernel routes from
# one of its own, else in order) and the comm goes over those.  The NIC
# stays down for the run.  Three tests: the data, the sender's INFO and
# no WARN, the counters.
mismatch() { # LOG SIDE-DOWN DESCRIPTION DEVICE-RAILS PEER-RAILS WITHOUT-PATTERN
  log=$1 side=$2 desc=$3 dr=$4 pr=$5 without=$6
  if ! "$RB" --name "$NAME" down 1 "$side" >"$OUT/$log.fault" 2>&1; then
    result NOTOK "$desc: the fault could not be set up"
    details "$OUT/$log.fault"
    result NOTOK "$desc: not run"
    result NOTOK "$desc: not run"
    return
  fi
  xfer "$NAME" "$OUT/topo.xml" "$log" 0 --seconds 5 --bytes 4G --interval 0.5 --timeout 40
  rc=$?
  "$RB" --name "$NAME" restore 1 >/dev/null 2>&1
  link_up "$NAME" 1
  verified "$log" $rc "$desc: connected"
  nwarn=$(grep -c 'WARN' "$OUT/$log.err")
  info=$(grep -c "streams to 198\.18\.0\.2:[0-9]*: the peer listens on $pr rail(s), this device has $dr: the comm goes over 1 pair(s), veth0 (198\.18\.0\.1) to 198\.18\.0\.2:[0-9]* by route; without $without\$" "$OUT/$log.err")
  if [ "$nwarn" -eq 0 ] && [ "$info" -eq 1 ]; then
    result OK "$desc: no WARN, the sender's one INFO pairs veth0 with the peer's veth0 and names what stays out"
  else
    result NOTOK "$desc: WARNs $nwarn (0), the sender's INFO on the pairing $info (1)"
    grep -E 'WARN|streams to|rail' "$OUT/$log.err" | cut -c1-300 | details
  fi
  # The counters at close, both sides: one rail, veth0, up, carried bytes.
  ok=1 why=''
  for side in send recv; do
    l=$(stat_line "$OUT/$log.stats" $side close)
    nr=$(echo "$l" | grep -o '{"rail":' | wc -l)
    b=$(rail_field "$l" veth0 bytes) st=$(rail_field "$l" veth0 state)
    why="$why $side: $nr rail(s), veth0 ${b:-?} B, ${st:-?};"
    if [ "$nr" -ne 1 ] || [ -z "$b" ] || [ "$b" -le 0 ] || [ "$st" != up ]; then ok=0; fi
  done
  if [ $ok = 1 ]; then
    result OK "$desc: counters at close:$why"
  else
    result NOTOK "$desc: counters at close (one rail, veth0, up, bytes > 0):$why"
  fi
}

# 2-4. the receiver's NIC of rail 1 down at start: its device is veth0
# alone, the sender's veth0+veth1 (veth1 without carrier)
mismatch recv1 b "rail 1's NIC down at the receiver's start (devices of 2 and 1 rails)" 2 1 \
  'veth1 (198\.18\.1\.1)'
# 5-7. the sender's: veth0 alone against the receiver's two
mismatch send1 a "rail 1's NIC down at the sender's start (devices of 1 and 2 rails)" 1 2 \
  "the peer's 198\.18\.1\.2:[0-9]*"


# 8-10. the receiver's NICs in the other order, strict source checks
sed 's/name="veth0"/name="vethX"/; s/name="veth1"/name="veth0"/; s/vethX/veth1/' \
  "$OUT/topo.xml" >"$OUT/topo-swapped.xml"
for side in a b; do
  ip netns exec "$NAME-$side" sh -c \
    'for k in all default veth0 veth1; do echo 1 >/proc/sys/net/ipv4/conf/$k/rp_filter; done'
done
xfer "$NAME" "$OUT/topo.xml" crossed 2 --recv-env "RAILNET_TOPO_FILE=$OUT/topo-swapped.xml" \
  --seconds 6 --bytes 4G --interval 0.5 --timeout 40 --at "3:$RB --name $NAME blackhole 1"
rc=$?
"$RB" --name "$NAME" restore 1 >/dev/null 2>&1
verified crossed $rc "the receiver's device is veth1+veth0, rp_filter=1 on both hosts: connected"
devs=$(grep -c 'plan: device 0 veth1+veth0' "$OUT/crossed.err")
info=$(grep -c "streams to 198\.18\.1\.2:[0-9]*: the peer listens on 2 rail(s), this device has 2: the comm goes over 2 pair(s), veth0 (198\.18\.0\.1) to 198\.18\.0\.2:[0-9]* by route, veth1 (198\.18\.1\.1) to 198\.18\.1\.2:[0-9]* by route\$" "$OUT/crossed.err")
nwarn=$(grep -c 'WARN' "$OUT/crossed.err")
out1=$(grep -c 'WARN.*rail veth1 taken out' "$OUT/crossed.err")
if [ "$devs" -eq 1 ] && [ "$info" -eq 1 ] && [ "$nwarn" -eq 1 ] && [ "$out1" -eq 1 ]; then
  result OK "the sender paired veth0 with veth0 and veth1 with veth1 by route (one INFO); the black hole took out veth1 by name (the one WARN)"
else
  result NOTOK "receiver's device veth1+veth0 $devs (1), the INFO pairing by route $info (1), WARNs $nwarn (1), naming veth1 taken out $out1 (1)"
  grep -E 'WARN|streams to|plan: device|taken out' "$OUT/crossed.err" | cut -c1-300 | details
fi
ok=1 why=''
for side in send recv; do
  l=$(stat_line "$OUT/crossed.stats" $side close)
  f1=$(rail_field "$l" veth1 failures) f0=$(rail_field "$l" veth0 failures)
  b0=$(rail_field "$l" veth0 bytes)
  why="$why $side: veth1 ${f1:-?} failure(s), veth0 ${f0:-?} failure(s) and ${b0:-?} B;"
  if [ "$f1" != 1 ] || [ "$f0" != 0 ] || [ -z "$b0" ] || [ "$b0" -le 0 ]; then ok=0; fi
done
if [ $ok = 1 ]; then
  result OK "counters at close:$why"
else
  result NOTOK "counters at close (veth1: 1 failure, veth0: none, bytes > 0):$why"
fi

# 11. nothing left behind
nothing_left_behind
