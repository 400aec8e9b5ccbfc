#!/bin/sh
# TAP: the control connection's path dies while one side of a 2-rail TCP
# comm waits on the other with nothing of its own in flight, on the
# railbed testbed (scripts/railbed).  Rail 0, which carries the control
# connection, is black-holed (links up, every packet dropped) 0.5 s in;
# rail 1 stays whole, so every byte must arrive, with no error:
#  - an idle sender: it posts nothing for 7 s, the receiver posts its
#    receives at 1 s and their clear-to-sends wait on rail 0.  Only the
#    sender can move the connection, and NCCL's proxy does not call a comm
#    without operations: the receiver must wait for it (a data stream on
#    rail 1 shows the sender's host is there) instead of failing after
#    2 x RAILNET_RAIL_TIMEOUT_MS (the previous build did, at 5 s);
#  - a receiver that stops calling for 2.5 s right after posting (its
#    proxy busy elsewhere), so the message lands in its sockets and its
#    ACK leaves after the black hole: the sender, waiting with nothing in
#    flight, probes the control connection and moves it (the previous
#    build failed the send: "acknowledged none ... for 4000 ms");
#  - the same at the lowest RAILNET_RAIL_TIMEOUT_MS (1 s): the bound on
#    the ACK leaves the probe and the move time to go first;
#  - the same with a larger message whose tail stays in the sender's
#    socket (under 64 KiB): that rail counts as stopped too (the previous
#    build waited for TCP's user timeout, and the receiver failed first);
#  - both rails black-holed, the sender idle: the receiver still fails,
#    once TCP keepalive ends the streams (RAILNET_SOCKET_TIMEOUT_MS at 4 s
#    here), and the sender when it starts: an error on both sides, no hang.
# Every isend/irecv/test return code is checked by multirail-xfer.  Time
# bounds only turn hangs into failures (x RN_TIMEOUT_SCALE).
# Skips (before any test) only without root, ip, tc, network namespaces,
# veth or tbf.  The testbed is removed on exit, also on failure.
cd "$(dirname "$0")/../.." || exit 1
NAME=rbwait$$
BEDS="$NAME" OUT_TAG=waiting XFER_ENV= PLAN=7
. tests/multirail/lib.sh

bed_first "$NAME" 2 300 "$OUT/topo.xml" \
  "railbed: namespaces $NAME-a/$NAME-b joined by 2 rails of 300 Mbit/s (tbf)"
HOLE="0.5:$RB --name $NAME blackhole 0"

# Rail 0 restored; then a pass when the transfer in LOG ended with exit
# status 0, BYTES verified, and the sender moved the control connection to
# veth1 (its INFO: it resumes only on the receiver's RESUME; the receiver's
# own INFO may not come when its comm closes first, its receives done).
judge() { # RC LOG BYTES WHAT
  "$RB" --name "$NAME" restore 0 >/dev/null
  if [ "$1" -eq 0 ] && grep -q "^result status=ok receiver=ok.* sender=ok.* bytes=$3 " "$OUT/$2.log" &&
    grep -q 'send comm .*control connection 1 resumed over rail veth1' "$OUT/$2.err"; then
    result OK "$4"
  else
    result NOTOK "$4: exit $1, or not every byte verified, or the sender did not move the control connection"
    show "$2"
    grep -E 'control connection|taken out' "$OUT/$2.err" | cut -c1-300 | details
  fi
}

# 2. an idle sender
XENV=RAILNET_RAIL_TIMEOUT_MS=2000 xfer "$NAME" "$OUT/topo.xml" idle 2 --bytes 4M --size 1M \
  --window 4 --interval 0 --timeout 40 --at "$HOLE" --start recv:1 --start send:7
judge $? idle 4194304 "sender idle for 7 s, rail 0 black-holed at 0.5 s, receives posted at 1 s (RAILNET_RAIL_TIMEOUT_MS=2000): the receiver waits, the sender moves the control connection when it sends, 4 MiB verified"

# 3. a receiver that stops calling: its ACK leaves after the black hole
XENV=RAILNET_RAIL_TIMEOUT_MS=4000,RAILNET_SOCKET_INLINE=32768 xfer "$NAME" "$OUT/topo.xml" ack 2 \
  --bytes 64K --size 64K --window 1 --interval 0 --timeout 40 --at "$HOLE" --pause recv:0:2.5
judge $? ack 65536 "a streamed 64 KiB message, the receiver not calling from its post to 2.5 s, rail 0 black-holed at 0.5 s: the sender probes, the control connection moves, the ACK arrives"

# 4. the same at the lowest bound (RAILNET_RAIL_TIMEOUT_MS=1000, the
# stall at its default of 1 s): the ACK waits on the dead path, so its
# bound must leave the probe and the move time to happen first (a build
# that bounded it by RAILNET_RAIL_TIMEOUT_MS alone failed the send at 1 s)
XENV=RAILNET_RAIL_TIMEOUT_MS=1000,RAILNET_SOCKET_INLINE=32768 xfer "$NAME" "$OUT/topo.xml" ack1 2 \
  --bytes 64K --size 64K --window 1 --interval 0 --timeout 40 --at "$HOLE" --pause recv:0:2.5
judge $? ack1 65536 "the same with RAILNET_RAIL_TIMEOUT_MS=1000: the ACK's bound leaves the probe and the move time, the ACK arrives"

# 5. the same as 3, 128 KiB: what the receiver's window did not take stays in
# the sender's socket on rail 0
XENV=RAILNET_RAIL_TIMEOUT_MS=4000 xfer "$NAME" "$OUT/topo.xml" tail 2 --bytes 128K --size 128K \
  --window 1 --interval 0 --timeout 40 --at "$HOLE" --pause recv:0:2.5
judge $? tail 131072 "a 128 KiB message, the receiver not calling until 2.5 s, rail 0 black-holed at 0.5 s: rail 0 taken out, the control connection moves, every byte verified"

# 6. no path left while the sender is idle: errors, no hang
XENV=RAILNET_RAIL_TIMEOUT_MS=2000,RAILNET_SOCKET_TIMEOUT_MS=4000 xfer "$NAME" "$OUT/topo.xml" dead 2 \
  --bytes 4M --size 1M --window 4 --interval 0 --timeout 40 --at "$HOLE" \
  --at "0.5:$RB --name $NAME blackhole 1" --start recv:1 --start send:12
rc=$?
"$RB" --name "$NAME" restore 0 >/dev/null
"$RB" --name "$NAME" restore 1 >/dev/null
if [ $rc -eq 1 ] && both_error dead; then
  result OK "both rails black-holed, the sender idle for 12 s: an error on both sides (keepalive, RAILNET_SOCKET_TIMEOUT_MS=4000), no hang"
else
  result NOTOK "both rails black-holed, the sender idle for 12 s: exit $rc (expected an error on both sides)"
  show dead
fi

# 7. nothing left behind
nothing_left_behind
