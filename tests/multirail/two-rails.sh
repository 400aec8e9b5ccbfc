#!/bin/sh
# TAP: railnet's TCP transport on the multi-rail testbed
# (scripts/railbed/railbed.sh): two network namespaces joined by two veth
# rails shaped with tc tbf.  The planner fuses the rails into one device
# on both sides, verified data crosses it with the receiver in one
# namespace and the sender in the other, both rails carry a fair part of
# it (the veths' own counters say so, outside the plugin), and the
# testbed leaves nothing behind.
# Two known failures run as TODO (issue 9), each with a bound that only
# turns a hang into a failure: a rail cut in the middle of a transfer on
# the 2-rail device must cost bandwidth, not the transfer (all data
# verified, no error); a single-rail device whose link goes down must
# return an error on both sides within the bound.
# Skips (before any test) only without root, ip, tc, network namespaces,
# veth or tbf.
cd "$(dirname "$0")/../.." || exit 1
B=${RN_BUILD:-build}
RB=scripts/railbed/railbed.sh
XFER=$B/tests/multirail-xfer
NAME=rbtap$$
NAME1=rbtap$$s
BOUND=20 # seconds after a cut; multirail-xfer scales it by RN_TIMEOUT_SCALE

skip() {
  echo "1..0 # SKIP $*"
  exit 0
}
[ "$(id -u)" -eq 0 ] || skip "not root: network namespaces need it"
command -v ip >/dev/null 2>&1 || skip "no ip (iproute2)"
command -v tc >/dev/null 2>&1 || skip "no tc (iproute2)"
probe=rbprobe$$
if ! err=$(ip netns add $probe 2>&1); then
  skip "no network namespace support: $err"
fi
cap=''
ip -n $probe link add p0 type veth peer name p1 2>/dev/null || cap="no veth"
[ -z "$cap" ] && { tc -n $probe qdisc add dev p0 root tbf rate 100mbit burst 128k latency 20ms \
  2>/dev/null || cap="no tc tbf"; }
ip netns del $probe
[ -z "$cap" ] || skip "$cap"
for f in "$B/libnccl-net-railnet.so" "$XFER" "$B/railnet-topo"; do
  [ -e "$f" ] || { echo "1..1"; echo "not ok 1 - $f not built (run make first)"; exit 1; }
done

OUT=$(mktemp -d /tmp/rn-multirail.XXXXXX) || skip "no temp dir"
cleanup() {
  "$RB" --name "$NAME" clean
  "$RB" --name "$NAME1" clean
  rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
links() { ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | sort; }
links >"$OUT/links.before"

n=0
result() { # OK|NOTOK DESCRIPTION [DIRECTIVE]
  n=$((n + 1))
  if [ "$1" = OK ]; then echo "ok $n - $2${3:+ # $3}"; else echo "not ok $n - $2${3:+ # $3}"; fi
}
details() { sed 's/^/#   /' "$@"; }

echo "1..8"

# 1. the testbed
if "$RB" --name "$NAME" up --rails 2 --rate 300 >"$OUT/up.log" 2>&1 &&
  "$RB" --name "$NAME" topo-xml "$OUT/topo.xml" 2>>"$OUT/up.log"; then
  result OK "railbed: namespaces $NAME-a/$NAME-b joined by 2 rails of 300 Mbit/s (tbf)"
else
  result NOTOK "railbed up failed"
  details "$OUT/up.log"
  for _ in 2 3 4 5 6 7 8; do result NOTOK "not run: no testbed"; done
  exit 1
fi

# 2. the planner fuses the rails (railnet-topo on the testbed's topology)
"$B/railnet-topo" --topo "$OUT/topo.xml" >"$OUT/topo.log" 2>&1
if grep -q '^  0: veth0+veth1  2 NIC(s)' "$OUT/topo.log"; then
  result OK "railnet-topo: one GPU, veth0 and veth1 fused into device veth0+veth1"
else
  result NOTOK "railnet-topo does not fuse veth0 and veth1"
  details "$OUT/topo.log"
fi

# 3-5. verified data over the fused device, one side in each namespace
ENV="RAILNET_TRANSPORT=socket,RAILNET_SOCKET_IFNAME=veth,RAILNET_TOPO_FILE=$OUT/topo.xml"
RN_CONF_VERBOSE=1 "$XFER" --railbed "$NAME" --env "$ENV" --expect-rails 2 --bytes 64M \
  --interval 0 --timeout 60 >"$OUT/xfer.log" 2>"$OUT/xfer.err"
rc=$?
ninfo=$(grep -c 'NET/railnet : dev 0: veth0+veth1 transport=socket rails=2' "$OUT/xfer.err")
if [ "$ninfo" -eq 2 ]; then
  result OK "the plugin's INFO log in both namespaces: dev 0 is veth0+veth1 with 2 rails"
else
  result NOTOK "the plugin's INFO log names the fused device in $ninfo of 2 processes"
  grep 'NET/railnet : dev ' "$OUT/xfer.err" | details
fi
if [ $rc -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok.* bytes=67108864 ' "$OUT/xfer.log"; then
  result OK "64 MiB verified across the fused device, receiver in $NAME-b, sender in $NAME-a"
else
  result NOTOK "64 MiB across the fused device: multirail-xfer exit $rc"
  details "$OUT/xfer.log"
  grep -E 'WARN|^#' "$OUT/xfer.err" | tail -10 | details
fi
# Each rail's received bytes (headers included) against the payload: an
# even split gives each about 52%; 10% is far above stray packets.
line=$(grep '^rails side=receiver' "$OUT/xfer.log")
r0=$(echo "$line" | sed -n 's/.* veth0=\([0-9]*\).*/\1/p')
r1=$(echo "$line" | sed -n 's/.* veth1=\([0-9]*\).*/\1/p')
min=$((67108864 / 10))
if [ -n "$r0" ] && [ -n "$r1" ] && [ "$r0" -ge $min ] && [ "$r1" -ge $min ]; then
  result OK "both rails carried the data (receiver's rx_bytes: veth0 $r0, veth1 $r1; each >= $min)"
else
  result NOTOK "both rails carry the data: receiver's rx_bytes veth0 '${r0:-?}', veth1 '${r1:-?}', each should be >= $min"
  details "$OUT/xfer.log"
fi

# 6-7. known failures (issue 9), run side by side: a rail cut on the
# 2-rail device, and the only link of a single-rail device going down.
"$RB" --name "$NAME1" up --rails 1 --rate 300 >"$OUT/up1.log" 2>&1 &&
  "$RB" --name "$NAME1" topo-xml "$OUT/topo1.xml" 2>>"$OUT/up1.log"
up1=$?
"$XFER" --railbed "$NAME" --env "$ENV" --expect-rails 2 --bytes 192M --interval 0.5 \
  --at "1:$RB --name $NAME down 1" --timeout $((1 + BOUND)) >"$OUT/cut2.log" 2>"$OUT/cut2.err" &
pid2=$!
if [ $up1 -eq 0 ]; then
  ENV1="RAILNET_TRANSPORT=socket,RAILNET_SOCKET_IFNAME=veth,RAILNET_TOPO_FILE=$OUT/topo1.xml"
  "$XFER" --railbed "$NAME1" --env "$ENV1" --expect-rails 1 --bytes 192M --interval 0.5 \
    --at "1:$RB --name $NAME1 down 0" --timeout $((1 + BOUND)) >"$OUT/cut1.log" 2>"$OUT/cut1.err"
  rc1=$?
fi
wait $pid2
rc2=$?
todo="TODO issue 9: no failover yet"
if [ $rc2 -eq 0 ]; then
  result OK "2-rail device, rail 1's link down 1 s into 192 MiB: every byte verified, no error, within ${BOUND} s" "$todo"
else
  result NOTOK "2-rail device, rail 1's link down 1 s into 192 MiB: every byte verified, no error, within ${BOUND} s (exit $rc2)" "$todo"
  grep -E '^(result|event|end)' "$OUT/cut2.log" | details
fi
todo="TODO issue 9: a dead link is not detected yet"
if [ $up1 -ne 0 ]; then
  result NOTOK "single-rail testbed up failed" "$todo"
  details "$OUT/up1.log"
elif [ "$rc1" -eq 1 ] && grep -q '^result status=error receiver=error.* sender=error' "$OUT/cut1.log"; then
  result OK "single-rail device, its link down 1 s in: an error on both sides within ${BOUND} s" "$todo"
else
  result NOTOK "single-rail device, its link down 1 s in: an error on both sides within ${BOUND} s (exit $rc1)" "$todo"
  grep -E '^(result|event|end)' "$OUT/cut1.log" | details
fi

# 8. nothing left behind
"$RB" --name "$NAME" clean
"$RB" --name "$NAME1" clean
# The rails are made inside the namespaces and never appear on the host:
# no vethN may have appeared there (other links come and go with other
# programs on a shared host, so only ours are looked for).
left=$(ip netns list | awk '{print $1}' | grep -E "^($NAME|$NAME1)-" | tr '\n' ' ')
new=$(links | comm -13 "$OUT/links.before" - | grep -E '^veth[0-9]+$' | tr '\n' ' ')
if [ -z "$left" ] && [ -z "$new" ]; then
  result OK "clean removed both testbeds: no namespace left, no rail on the host"
else
  result NOTOK "left behind: namespaces '$left', host links '$new'"
fi
