#!/bin/sh
# TAP: lossy rails on the railbed testbed (scripts/railbed/railbed.sh `loss`:
# a share of the packets arriving over a rail dropped at random, both
# ways), as a failing optic or a congested, dropping switch port gives.
# TCP retransmits what is lost, so a lossy rail delivers late, in bursts,
# and its retransmission timeouts stall it for up to seconds at a time:
#  - rail 1 at 20% loss for a whole 1 MiB-message transfer;
#  - rail 0, where the control connection starts, at 20% loss under 4 KiB
#    messages (they travel on the control connection alone);
#  - both rails at 5% loss (no clean rail to weigh a stalled one against).
# Rail 1 lossy, the sender re-sends what it holds up over rail 0 whenever
# rail 0 has delivered all it was given for 250 ms (a rescue: RAILNET_STATS
# counts them), without taking it out.
# Each: every byte verified, no error on either side, and no WARN but a
# rail taken out (with its cause) when it stalled for RAILNET_RAIL_STALL_MS
# while the other delivered, or left out at connect when its dial did not
# complete within 2 x RAILNET_RAIL_STALL_MS (lost SYNs): never a protocol
# violation or a failed comm.
# The rates each run reached are printed as diagnostics (this host's CPU
# and TCP decide them); they decide nothing.  Time bounds only turn hangs
# into failures (x RN_TIMEOUT_SCALE).  Skips (before any test) only
# without root, ip, tc, network namespaces, veth or tbf; without nft
# (nftables) the loss cannot be made, and every case fails as not run.
# The testbed is removed on exit, also on failure.
cd "$(dirname "$0")/../.." || exit 1
NAME=rbloss$$
BEDS="$NAME" OUT_TAG=lossy XFER_ENV= PLAN=9
. tests/multirail/lib.sh

# 1. the testbed
bed_first "$NAME" 2 200 "$OUT/topo.xml" \
  "railbed: namespaces $NAME-a/$NAME-b joined by 2 rails of 200 Mbit/s (tbf), one fused device"

# Two tests: the data, and the WARNs (only take-outs, each naming its rail).
lossy() { # LOG DESCRIPTION "RAIL PCT ..." [xfer args...]
  log=$1 desc=$2 spec=$3
  shift 3
  set_up=1
  # shellcheck disable=SC2086 # $spec is "RAIL PCT" pairs
  set -- "$@" --
  for rp in $(echo "$spec" | tr ' ' '\n' | paste -d: - -); do
    "$RB" --name "$NAME" loss "${rp%%:*}" "${rp#*:}" >>"$OUT/$log.fault" 2>&1 || set_up=0
  done
  while [ "$1" != -- ]; do set -- "$@" "$1"; shift; done
  shift
  if [ $set_up = 0 ]; then
    result NOTOK "$desc: the loss could not be set up"
    details "$OUT/$log.fault"
    result NOTOK "$desc: not run"
    for r in 0 1; do "$RB" --name "$NAME" restore $r >/dev/null 2>&1; done
    return
  fi
  xfer "$NAME" "$OUT/topo.xml" "$log" 2 "$@"
  rc=$?
  for r in 0 1; do "$RB" --name "$NAME" restore $r >/dev/null 2>&1; done
  verified "$log" $rc "$desc"
  rail='rail veth[01] taken out: |rail veth[01] \([^)]*\) did not connect within '
  other=$(grep 'WARN' "$OUT/$log.err" | grep -Ecv "$rail")
  outs=$(grep 'WARN' "$OUT/$log.err" | grep -Ec "$rail")
  if [ "$other" -eq 0 ]; then
    result OK "$desc: no WARN but $outs for a rail taken or left out, each naming it and why"
  else
    result NOTOK "$desc: $other WARN(s) besides $outs for a rail taken or left out"
    grep WARN "$OUT/$log.err" | grep -Ev "$rail" | tail -5 | cut -c1-300 | details
  fi
  line=$(grep '^result' "$OUT/$log.log")
  echo "# $desc: ${line#result }"
}

# 2-3. rail 1 lossy, 1 MiB messages over both rails
lossy rail1 "rail 1 at 20% loss each way, 1 MiB messages for 6 s" "1 20" \
  --seconds 6 --bytes 4G --interval 0.5 --timeout 60
# 4. what the lossy rail held up went again over the clean one, by the
# sender's counters (a retransmission timeout of TCP lasts 200 ms at
# least, doubling; the comm waits on rail 1 alone many times in 6 s)
line=$(stat_line "$OUT/rail1.stats" send close)
rescues=$(echo "$line" | sed -n 's/.*"rescues":\([0-9]*\),"rescued_chunks":\([0-9]*\).*/\1 \2/p')
if [ -n "$line" ] && [ "${rescues%% *}" -ge 1 ] 2>/dev/null; then
  result OK "rail 1 lossy: the sender re-sent what it held up over rail 0 (RAILNET_STATS: ${rescues%% *} rescue(s), ${rescues#* } chunk(s))"
else
  result NOTOK "rail 1 lossy: the sender re-sent what it held up over rail 0 (RAILNET_STATS rescues: '${rescues%% *}')"
  echo "$line" | cut -c1-300 | details
fi
# 5-6. rail 0 lossy, 4 KiB messages: the control connection alone carries them
lossy ctrl "rail 0 (the control connection's) at 20% loss each way, 4 KiB messages for 4 s" \
  "0 20" --seconds 4 --bytes 1G --size 4096 --interval 0.5 --timeout 60
# 7-8. both rails lossy
lossy both "both rails at 5% loss each way, 1 MiB messages for 6 s" "0 5 1 5" \
  --seconds 6 --bytes 4G --interval 0.5 --timeout 60

# 9. nothing left behind
nothing_left_behind
