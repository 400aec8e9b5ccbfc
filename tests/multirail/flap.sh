#!/bin/sh
# TAP: a flapping rail on the railbed testbed (scripts/railbed/railbed.sh):
# a link that keeps coming and going is held out ever longer, so it stalls
# the comm ever more rarely (RAILNET_RAIL_HOLD_MS).
#  - Rail 1 of a 2-rail device black-holed 1.5 s of every 2.5 s, 8 times
#    from 1 s in, under 25 s of transfer, with RAILNET_RAIL_HOLD_MS=5000:
#    every byte verified, no error; each take-out after the first comes
#    within 5 s of the rail's re-admission, so each says (one INFO) that it
#    is flapping and holds the rail out 2 x RAILNET_RAIL_STALL_MS, twice as
#    long at each one, at most 5000 ms: 2000, 4000, 5000, 5000 ms; the
#    holds leave it out of most black holes (at most 5 take-outs of 8,
#    where every black hole takes it out without them, below); the rail
#    is up at close and carried bytes, by the plugin's per-rail counters.
#  - The same link with RAILNET_RAIL_HOLD_MS=0, 3 black holes: no hold, a
#    take-out and a re-admission for each black hole.
#  - A hold ends early when no other rail carries the comm: rail 1 flaps
#    until the sender holds it out for 4000 ms, then rail 1 is restored and
#    rail 0 black-holed for good, with RAILNET_RAIL_TIMEOUT_MS=3000 (less
#    than the hold left): rail 1 is dialed before its hold ends (one INFO),
#    rail 0 taken out, every byte verified, no error.
#  - A rail up for RAILNET_RAIL_HOLD_MS starts afresh: with 3000, two black
#    holes 1 s apart (the second take-out held 2000 ms), then the rail up
#    about 4.5 s before a third: that take-out holds nothing.
# Every isend/irecv/test return code is checked by multirail-xfer.  Time
# bounds only turn hangs into failures (x RN_TIMEOUT_SCALE).
# Skips (before any test) only without root, ip, tc, network namespaces,
# veth or tbf.  Every testbed is removed on exit, also on failure.
cd "$(dirname "$0")/../.." || exit 1
NAME=rbflap$$
BEDS="$NAME" OUT_TAG=flap XFER_ENV= PLAN=12
. tests/multirail/lib.sh

# 1. the testbed
bed_first "$NAME" 2 300 "$OUT/topo.xml" \
  "railbed: namespaces $NAME-a/$NAME-b joined by 2 rails of 300 Mbit/s (tbf)"

# multirail-xfer for SECONDS with rail 1 black-holed 1.5 s of every 2.5 s,
# COUNT times from 1 s in; its log is $OUT/LOG.*
flapping() { # LOG SECONDS COUNT
  log=$1 secs=$2 count=$3
  set -- --seconds "$secs" --bytes 16G --interval 1 --timeout $((secs + 30))
  i=0
  while [ $i -lt "$count" ]; do
    down=$(awk "BEGIN { print 1 + $i * 2.5 }") up=$(awk "BEGIN { print 2.5 + $i * 2.5 }")
    set -- "$@" --at "$down:$RB --name $NAME blackhole 1" --at "$up:$RB --name $NAME restore 1"
    i=$((i + 1))
  done
  xfer "$NAME" "$OUT/topo.xml" "$log" 2 "$@"
  rc=$?
  "$RB" --name "$NAME" restore 1 >/dev/null 2>&1 # in case the run ended before it
  return $rc
}
# The rail's counters at close on both sides: "SIDE: BYTES B, STATE,
# FAILURES failure(s); ..." and ok=1 when each side's rail 1 is up, carried
# bytes and failed FAILURES times, and rail 0 never failed.
counters() { # LOG FAILURES
  ok=1 line=''
  for side in send recv; do
    l=$(stat_line "$OUT/$1.stats" $side close)
    b=$(rail_field "$l" veth1 bytes) st=$(rail_field "$l" veth1 state)
    f=$(rail_field "$l" veth1 failures) f0=$(rail_field "$l" veth0 failures)
    line="$line $side: veth1 ${b:-?} B, ${st:-?}, ${f:-?} failure(s), veth0 ${f0:-?};"
    if [ -z "$b" ] || [ "$b" -le 0 ] || [ "$st" != up ] || [ "$f" != "$2" ] || [ "$f0" != 0 ]; then
      ok=0
    fi
  done
}

# 2-5. held out ever longer
XENV=RAILNET_RAIL_HOLD_MS=5000
flapping held 25 8
rc=$?
XENV=
verified held $rc "rail 1 flapping 8 times, held out"
outs=$(grep -c 'WARN.*rail veth1 taken out' "$OUT/held.err")
holds=$(sed -n 's/.*rail veth1 failed [0-9.]* s after its re-admission ([0-9]* time(s) in a row within RAILNET_RAIL_HOLD_MS, 5000 ms): flapping, so it is held out for \([0-9]*\) ms while another rail carries the comm.*/\1/p' "$OUT/held.err" | tr '\n' ' ')
want=$(echo "2000 4000 5000 5000 5000 5000 5000 " | cut -c1-${#holds})
if [ "$outs" -ge 3 ] && [ -n "$holds" ] && [ "$holds" = "$want" ] &&
  [ "$(echo $holds | wc -w)" -eq $((outs - 1)) ]; then
  result OK "each take-out after the first (of $outs) says the rail is flapping and holds it out twice as long, at most 5000 ms: $holds"
else
  result NOTOK "take-outs $outs (3 or more), holds after the first: '$holds' (expected one each: '$want')"
  grep -E 'taken out|re-admitted|flapping' "$OUT/held.err" | cut -c1-260 | details
fi
if [ "$outs" -le 5 ]; then
  result OK "the holds kept rail 1 out of most black holes: $outs take-outs for 8"
else
  result NOTOK "rail 1 taken out $outs times for 8 black holes (at most 5 with the holds)"
fi
counters held "$outs"
if [ $ok = 1 ]; then
  result OK "rail 1 back once its last hold ended: counters at close:$line"
else
  result NOTOK "counters at close (veth1: bytes > 0, up, $outs failure(s); veth0: 0):$line"
fi

# 6-7. no hold: a take-out and a re-admission for each black hole
XENV=RAILNET_RAIL_HOLD_MS=0
flapping nohold 10 3
rc=$?
XENV=
verified nohold $rc "rail 1 flapping 3 times, RAILNET_RAIL_HOLD_MS=0"
outs=$(grep -c 'WARN.*rail veth1 taken out' "$OUT/nohold.err")
back=$(grep -c 'send comm to .*: rail veth1 re-admitted' "$OUT/nohold.err")
held=$(grep -c 'flapping' "$OUT/nohold.err")
counters nohold 3
if [ "$outs" -eq 3 ] && [ "$back" -eq 3 ] && [ "$held" -eq 0 ] && [ $ok = 1 ]; then
  result OK "RAILNET_RAIL_HOLD_MS=0: 3 take-outs, 3 re-admissions, no hold; counters at close:$line"
else
  result NOTOK "RAILNET_RAIL_HOLD_MS=0: take-outs $outs (3), re-admissions $back (3), holds $held (0); counters at close (veth1 up, 3 failures):$line"
  grep -E 'taken out|re-admitted|flapping' "$OUT/nohold.err" | cut -c1-260 | details
fi

# 8-9. the hold ends early: rail 1 flaps (1.5 s black-holed, 1 s
# restored, at most 8 times) until the sender holds it out for 4000 ms;
# then, at once, rail 1 is restored and rail 0 goes for good (without the
# early end the comm would wait 3.9 s or so for rail 1, and fail at 3)
cat >"$OUT/early.sh" <<EOF
(
  i=0
  while [ \$i -lt 8 ]; do
    "$RB" --name "$NAME" blackhole 1; sleep 1.5
    "$RB" --name "$NAME" restore 1; sleep 1
    i=\$((i + 1))
  done
) &
t=0
while [ \$t -lt 250 ] && ! grep -q 'rail veth1 .* held out for 4000 ms' "$OUT/early.err"; do
  sleep 0.1
  t=\$((t + 1))
done
kill \$! 2>/dev/null
wait
"$RB" --name "$NAME" restore 1
"$RB" --name "$NAME" blackhole 0
EOF
XENV=RAILNET_RAIL_TIMEOUT_MS=3000
xfer "$NAME" "$OUT/topo.xml" early 2 --seconds 25 --bytes 16G --interval 1 --timeout 55 \
  --at "0.5:sh $OUT/early.sh"
rc=$?
XENV=
"$RB" --name "$NAME" restore 0 >/dev/null 2>&1
"$RB" --name "$NAME" restore 1 >/dev/null 2>&1
verified early $rc "rail 0 black-holed while rail 1 is held out"
held=$(grep -c 'rail veth1 .* held out for 4000 ms' "$OUT/early.err")
early=$(grep -c 'rail veth1 dialed [0-9]* ms before its hold ends: no other rail carries the comm' "$OUT/early.err")
out0=$(grep -c 'WARN.*rail veth0 taken out' "$OUT/early.err")
if [ "$held" -eq 1 ] && [ "$early" -eq 1 ] && [ "$out0" -eq 1 ]; then
  result OK "rail 1 dialed before its hold ended (one INFO), rail 0 taken out"
else
  result NOTOK "held for 4000 ms $held (1), dialed before the hold ended $early (1), rail 0 taken out $out0 (1)"
  grep -E 'taken out|re-admitted|flapping|hold ends' "$OUT/early.err" | cut -c1-260 | details
  grep -E '^event' "$OUT/early.log" | details
fi

# 10-11. a rail up for RAILNET_RAIL_HOLD_MS starts afresh: with 3000,
# rail 1 black-holed at 1-2.5 s and 3.5-5 s (the second take-out comes
# within 3 s of its re-admission: held 2000 ms), then up from about 6.5 s
# until 11 s, black-holed again until 12.5 s: that take-out, about 5 s
# after its re-admission, holds nothing
XENV=RAILNET_RAIL_HOLD_MS=3000
xfer "$NAME" "$OUT/topo.xml" afresh 2 --seconds 15 --bytes 16G --interval 1 --timeout 45 \
  --at "1:$RB --name $NAME blackhole 1" --at "2.5:$RB --name $NAME restore 1" \
  --at "3.5:$RB --name $NAME blackhole 1" --at "5:$RB --name $NAME restore 1" \
  --at "11:$RB --name $NAME blackhole 1" --at "12.5:$RB --name $NAME restore 1"
rc=$?
XENV=
"$RB" --name "$NAME" restore 1 >/dev/null 2>&1
verified afresh $rc "rail 1 up for longer than RAILNET_RAIL_HOLD_MS between black holes"
outs=$(grep -c 'WARN.*rail veth1 taken out' "$OUT/afresh.err")
holds=$(sed -n 's/.*rail veth1 failed .* held out for \([0-9]*\) ms while another rail carries the comm.*/\1/p' "$OUT/afresh.err" | tr '\n' ' ')
counters afresh 3
if [ "$outs" -eq 3 ] && [ "$holds" = "2000 " ] && [ $ok = 1 ]; then
  result OK "3 take-outs, one hold (2000 ms, the second), none after the rail was up for 3 s; counters at close:$line"
else
  result NOTOK "take-outs $outs (3), holds '$holds' ('2000 ': the second only); counters at close (veth1 up, 3 failures):$line"
  grep -E 'taken out|re-admitted|flapping' "$OUT/afresh.err" | cut -c1-260 | details
fi

# 12. nothing left behind
nothing_left_behind
