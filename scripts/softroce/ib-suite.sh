#!/bin/sh
# Runs INSIDE the Soft-RoCE VM (after rxe-test.sh made rxe0..rxe3 on two
# veth pairs): the plugin's verbs transport under the conformance and fault
# suites, the multi-rail driver (failover, striping, rail pairing), the
# rogue peer and the matching-rule program.  Usage: ib-suite.sh BUILD OUTDIR
# Writes OUTDIR/results ("ok NAME (N s)" / "not ok NAME ...") and one log
# per check; the host turns them into TAP.  (The numbers: ib-bench.sh.)
B=${1:-build}; O=${2:-/tmp}
R=$O/results; : >"$R"
export RAILNET_TRANSPORT=ib
export RN_BUILD="$B"   # the test programs load $RN_BUILD/libnccl-net-railnet.so
# the same environment as on the host (timeout scale, leak-checker settings)
. tests/common/test-env.sh
T=$(( ${RN_SUITE_TIMEOUT:-240} * RN_TIMEOUT_SCALE ))
# A coverage build (make coverage) writes its counters under $O/gcov, which
# the host merges; the VM's own writes to the shared root would be lost.
if [ -n "$(find "$B" -name '*.gcno' -print 2>/dev/null | head -1)" ]; then
  GCOV_PREFIX=$O/gcov
  GCOV_PREFIX_STRIP=$(pwd | tr -cd / | wc -c)
  export GCOV_PREFIX GCOV_PREFIX_STRIP
fi

# ok / not ok per check.  Inside the VM every capability the checks need
# (rxe devices, libibverbs) is there, so a program that skips all its tests
# failed to find its device: not ok.  Single skipped tests and failing
# TODO tests (known plugin bugs) are counted and named in the line.
# RN_VM_ONLY=REGEX runs only the checks whose names match (a quicker boot
# while working on one).
[ -z "$RN_VM_ONLY" ] && [ -s "$O/vm-only" ] && RN_VM_ONLY=$(cat "$O/vm-only")
picked() { [ -z "$RN_VM_ONLY" ] || echo "$1" | grep -Eq "$RN_VM_ONLY"; }
check() { # NAME RECV_ENV SEND_ENV CMD...
  name=$1; renv=$2; senv=$3; shift 3
  picked "$name" || return 0
  t0=$(date +%s)
  RN_CONF_RECV_ENV="$renv" RN_CONF_SEND_ENV="$senv" timeout "$T" "$@" >"$O/$name.log" 2>&1
  rc=$?; t=$(( $(date +%s) - t0 ))
  skipall=$(grep -m1 '^1\.\.0 # SKIP' "$O/$name.log")
  nskip=$(grep -c '^ok [0-9]* # SKIP' "$O/$name.log")
  ntodo=$(grep -c '^not ok [0-9]* .*# TODO' "$O/$name.log")
  if [ $rc -eq 0 ] && [ -n "$skipall" ]; then
    echo "not ok $name (skipped everything inside the VM: ${skipall#1..0 # SKIP })" >>"$R"
  elif [ $rc -eq 0 ]; then
    echo "ok $name (${t} s$([ "$nskip" -gt 0 ] && echo ", $nskip skipped")$([ "$ntodo" -gt 0 ] && echo ", $ntodo known-bug TODO failing"))" >>"$R"
    grep -E '^ok [0-9]* # SKIP|^not ok [0-9]* .*# TODO' "$O/$name.log" | sed 's/^/#   /' >>"$R"
  else echo "not ok $name (exit $rc after ${t} s; see $name.log)" >>"$R"
    grep -E '^not ok|WARN' "$O/$name.log" | head -20 | sed 's/^/#   /' >>"$R"; fi
}

ONE_R="RAILNET_NICS==rxe0"; ONE_S="RAILNET_NICS==rxe1"
TWO_R="RAILNET_NICS==rxe0,rxe2"; TWO_S="RAILNET_NICS==rxe1,rxe3"
check conformance-1qp "$ONE_R" "$ONE_S" "$B/tests/conformance-test" --api v11
check conformance-4qp "$ONE_R,RAILNET_IB_QPS=4" "$ONE_S,RAILNET_IB_QPS=4" "$B/tests/conformance-test" --api v11 --only messages
check conformance-v8-2qp "$ONE_R,RAILNET_IB_QPS=2" "$ONE_S,RAILNET_IB_QPS=2" "$B/tests/conformance-test" --api v8 --only "in flight"
# Every byte checked: sizes 0 B..16 MiB, 32 small messages in flight (the
# zero-byte immediate-only, inline and chained paths, FIFO slots announced
# in batches) and 32 large ones; on one QP with and without inline, and
# over a fused 2-rail device with 2 QPs each.
check verify-1qp "$ONE_R" "$ONE_S" "$B/tests/bench/ib_bench" verify
check verify-noinline "$ONE_R,RAILNET_IB_INLINE=0" "$ONE_S,RAILNET_IB_INLINE=0" "$B/tests/bench/ib_bench" verify
RN_IB_VDEV=0,1 check verify-2rail-2qp "$TWO_R,RAILNET_IB_QPS=2" "$TWO_S,RAILNET_IB_QPS=2" "$B/tests/bench/ib_bench" verify
check fault "$ONE_R" "$ONE_S" "$B/tests/fault-test" --api v11
# Nothing inline (RAILNET_IB_INLINE=0): every FIFO write, size and small
# message DMA-read from registered memory instead of copied at post.
check conformance-noinline "$ONE_R,RAILNET_IB_INLINE=0" "$ONE_S,RAILNET_IB_INLINE=0" \
  "$B/tests/conformance-test" --api v11 --only messages
# A rogue peer writing corrupt FIFO slots, immediates, sizes, connection info.
check rogue "$ONE_R" "$ONE_S" "$B/tests/rogue-test"
# The grouped-receive matching rule (tests/matching/matching.c, the same
# program the host suite runs over TCP) over 2 QPs, so a group's messages
# spread over QPs.  Fewer channel rounds than on the host (10^4 there):
# every message costs tens of microseconds under emulation.
check matching "$ONE_R,RAILNET_IB_QPS=2" "$ONE_S,RAILNET_IB_QPS=2" \
  "$B/tests/matching-test" --api v11 --rounds "${RN_VM_MATCH_ROUNDS:-1000}"
# Failover: a fused 2-rail device (2 QPs per rail) loses rail 1's link
# (veth2) 0.5 s into a verified transfer.  Short QP timeouts (16.8 ms, 4
# tries) find it in well under a second.  Decided by the transfer's
# outcome and the plugin's log:
#  - failover-1of2 (the link back up at 3 s): every byte verified on both
#    sides, no error; a WARN naming rail 1 and its cause, the sender's
#    INFO that it went on over one rail, rail 0 carrying bytes alone after
#    (netdev counters), the INFO that rail 1 was taken back once its port
#    was active again, and rail 1 carrying bytes again; the sender's
#    RAILNET_STATS close line: bytes on both rails, rail 1 failed, chains
#    sent again;
#  - failover-2of2: rail 1 cut at 0.5 s, rail 0 at 2 s: both sides get an
#    error (exit 1), neither hangs (exit 3).
# A failed failover check's story for the report: first every WARN other
# than a rail failing as the check makes it (so the one that ended the run
# is never cut off), then the timeline's last 30 lines without the setup.
fo_show() { # LOG
  { grep 'WARN' "$1" | grep -vE 'failed: .*; (going on over|every rail is down)' | head -10
    grep -E '^(result|event|end|runner|series)|WARN|goes on|rebuil|is back|standby' "$1" |
      grep -vE 'plan: device|: dev [0-9]+: |connected to|accepted rxe' | tail -30; } |
    cut -c1-300 | sed 's/^/#   /' >>"$R"
}
FO="RAILNET_IB_QPS=2,RAILNET_IB_TIMEOUT=16,RAILNET_IB_RETRY_CNT=2,RAILNET_SOCKET_TIMEOUT_MS=5000"
fo_check() { # NAME WANT_RC XFER-ARGS...
  name=$1; want=$2; shift 2
  picked "$name" || return 0
  t0=$(date +%s)
  ST=$O/$name.stats
  RN_CONF_VERBOSE=1 RN_CONF_RECV_ENV="$TWO_R,$FO,RAILNET_STATS=$ST" \
    RN_CONF_SEND_ENV="$TWO_S,$FO,RAILNET_STATS=$ST" timeout "$T" \
    "$B/tests/multirail-xfer" --vdev 0,1 --rails veth0,veth2 --interval 0.5 "$@" >"$O/$name.log" 2>&1
  rc=$?; t=$(( $(date +%s) - t0 ))
  for d in veth0 veth1 veth2 veth3; do ip link set "$d" up; done
  sleep 1
  L=$O/$name.log
  nwarn=$(grep -c 'WARN' "$L")
  rail1=$(grep -c 'WARN.*rail 1 (rxe[23]) of the .* comm with .* failed: .*; going on over 1 rail' "$L")
  went=$(grep -c 'send comm with .* goes on over 1 rail(s) after' "$L")
  back=$(grep -c 'rail 1 (rxe3) of the send comm with .* is back (port active): taking it in again' "$L")
  # the receiver's netdev counters: half-second samples in which rail 0
  # carried bytes and rail 1 none (after the cut), and later ones in which
  # rail 1 carried bytes again
  set -- $(awk '/^series/ { v0 = -1; v2 = -1
      for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "veth0") v0 = kv[2]; if (kv[1] == "veth2") v2 = kv[2] }
      if (v0 > 0 && v2 == 0) a++; else if (a > 0 && v2 > 0) b++ } END { print a + 0, b + 0 }' "$L")
  alone=$1 again=$2
  # the sender's telemetry at close: both rails carried bytes, rail 1
  # failed once, some chains went again
  cl=$(grep '"event":"close"' "$ST" 2>/dev/null | grep '"side":"send"' | tail -1)
  field() { echo "$cl" | grep -o "{\"rail\":$1,[^}]*}" | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }
  b0=$(field 0 bytes) b1=$(field 1 bytes) f1=$(field 1 failures)
  rp=$(echo "$cl" | grep -o '"replays":[0-9]*' | cut -d: -f2 | awk '{s += $1} END {print s + 0}')
  stats="stats: rail 0 ${b0:-?} bytes, rail 1 ${b1:-?} bytes, rail 1 failures ${f1:-?}, chains sent again $rp"
  if [ "$want" = 0 ]; then
    good=$([ $rc -eq 0 ] && [ "$rail1" -ge 1 ] && [ "$went" -ge 1 ] && [ "$alone" -ge 1 ] &&
      [ "$back" -ge 1 ] && [ "$again" -ge 1 ] && [ "${b0:-0}" -gt 0 ] && [ "${b1:-0}" -gt 0 ] &&
      [ "${f1:-0}" -ge 1 ] && [ "$rp" -ge 1 ] &&
      grep -q '^result status=ok receiver=ok.* sender=ok' "$L" && echo 1)
  else
    good=$([ $rc -eq 1 ] && grep -q '^result status=error receiver=error.* sender=error' "$L" && echo 1)
  fi
  if [ -n "$good" ]; then
    echo "ok $name (${t} s; exit $rc; WARNs: $nwarn, naming rail 1: $rail1; went on over 1 rail: $went; samples with rail 0 alone: $alone; rail 1 taken back: $back, samples with it carrying again: $again; $stats)" >>"$R"
  else
    echo "not ok $name (exit $rc after ${t} s, wanted $want; WARNs naming rail 1: $rail1, went on over 1 rail: $went, samples with rail 0 alone: $alone; rail 1 taken back: $back, samples with it carrying again: $again; $stats; see $name.log)" >>"$R"
    fo_show "$L"
  fi
}
# The standby (verbs): an NCCL topology per side puts one NIC beside the
# GPU and the other behind another switch, so the planner makes a 1-rail
# device with a standby (rxe0 + standby rxe2; rxe1 + standby rxe3).  Rail
# 0's RoCE packets (UDP 4791) are dropped from 0.5 s to 6 s, not its link:
# the bootstrap socket runs over veth0 and must live.  Its port stays
# active, so the rail is taken in again after 1 s, fails again, and so on
# with the wait doubling: several WARNs, and the standby in between.  A
# take-back that lands just before the drop ends (the tc command itself
# takes up to a second here) fails once more and the next waits 4 s, so
# rail 0 may carry again only from about 12 s on: 1 GiB lasts at least
# 16 s at the emulation's rate (about 500 Mbit/s on one NIC).
ib_topo() { # FILE NIC STANDBY
  pci() { printf '      <pci busid="0000:%s:00.0" class="0x020000" vendor="0x15b3" device="0x1021" link_speed="32.0 GT/s PCIe" link_width="16">\n        <nic><net name="%s" dev="%s" speed="10000" port="1" latency="0" guid="0x%s" maxconn="65536" gdr="0"/></nic>\n      </pci>\n' "$@"; }
  { echo '<system version="1">'
    echo '  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">'
    echo '    <pci busid="0000:40:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">'
    echo '      <pci busid="0000:41:00.0" class="0x030200" vendor="0x10de" device="0x2335" link_speed="32.0 GT/s PCIe" link_width="16">'
    echo '        <gpu dev="0" sm="90" rank="0" gdr="0"/>'
    echo '      </pci>'
    pci 42 "$2" 0 1
    echo '    </pci>'
    echo '    <pci busid="0000:80:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">'
    pci 81 "$3" 1 2
    echo '    </pci>'
    echo '  </cpu>'
    echo '</system>'; } >"$1"
}
DROP="for d in veth0 veth1; do tc qdisc add dev \$d root handle 1: prio && tc filter add dev \$d parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff action drop || exit 1; done"
PASS="for d in veth0 veth1; do tc qdisc del dev \$d root; done"
sb_check() { # NAME
  name=$1
  picked "$name" || return 0
  ib_topo "$O/topo-r.xml" rxe0 rxe2
  ib_topo "$O/topo-s.xml" rxe1 rxe3
  t0=$(date +%s)
  RN_CONF_VERBOSE=1 RN_CONF_RECV_ENV="$TWO_R,$FO,RAILNET_TOPO_FILE=$O/topo-r.xml" \
    RN_CONF_SEND_ENV="$TWO_S,$FO,RAILNET_TOPO_FILE=$O/topo-s.xml" timeout "$T" \
    "$B/tests/multirail-xfer" --dev 0 --expect-rails 1 --rails veth0,veth2 --interval 0.5 \
    --bytes 1G --at "0.5:$DROP" --at "6:$PASS" --timeout 100 >"$O/$name.log" 2>&1
  rc=$?; t=$(( $(date +%s) - t0 ))
  sh -c "$PASS" 2>/dev/null
  L=$O/$name.log
  sbinfo=$(grep -c 'dev 0: rxe[01] transport=ib rails=1 .* standby=rxe[23] ' "$L")
  # the sender going on over its standby, whichever side saw rail 0 fail
  # first (its own WARN, or the receiver's word: "saw rail(s) 0x1 fail")
  over=$(grep -c 'rxe3: send comm with .* goes on over 1 rail(s) after' "$L")
  back=$(grep -c 'send comm with .* gives its standby NIC rxe3 back' "$L")
  set -- $(awk '/^series/ { v0 = -1; v2 = -1
      for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "veth0") v0 = kv[2]; if (kv[1] == "veth2") v2 = kv[2] }
      if (v2 > 0 && v0 < 1) a++; else if (a > 0 && v0 > 1) b++ } END { print a + 0, b + 0 }' "$L")
  alone=$1 again=$2
  if [ $rc -eq 0 ] && [ "$sbinfo" -eq 2 ] && [ "$over" -ge 1 ] && [ "$back" -ge 1 ] &&
    [ "$alone" -ge 1 ] && [ "$again" -ge 1 ] && grep -q '^result status=ok receiver=ok.* sender=ok' "$L"; then
    echo "ok $name (${t} s; standby took over: $over, given back: $back; samples with the standby alone: $alone, with rail 0 again after: $again)" >>"$R"
  else
    echo "not ok $name (exit $rc after ${t} s; devices with a standby: $sbinfo of 2, standby took over: $over, given back: $back, samples with the standby alone: $alone, with rail 0 again after: $again; see $name.log)" >>"$R"
    fo_show "$L"
  fi
}
# Weighted striping (verbs): the sender's rails shaped to unequal rates
# (tbf on veth1 and veth3, its egress; a queue deep enough for what the
# emulated NIC keeps in flight, so nothing is dropped), each alone first,
# then fused, all bytes verified.  Decided by the sender's RAILNET_STATS
# close line, not by timing: the fast rail's share of the bytes is within
# 0.1 of its share of the rates (0.8 at 4:1, 0.67 at 2:1; an even split
# gives 0.5).  The rates, and fused against the sum of each rail alone,
# are reported.
st_shape() { # KBIT0 KBIT1 (0: no shaping)
  for d in veth1 veth3; do tc qdisc del dev "$d" root 2>/dev/null; done
  [ "$1" = 0 ] && return 0
  tc qdisc add dev veth1 root tbf rate "${1}kbit" burst 256k limit 64m &&
    tc qdisc add dev veth3 root tbf rate "${2}kbit" burst 256k limit 64m
}
st_run() { # LOG STATS RECV_NICS SEND_NICS XFER-ARGS...
  log=$1 st=$2 rn=$3 sn=$4; shift 4
  e="RAILNET_IB_QPS=2,RAILNET_IB_TIMEOUT=${ST_TIMEOUT:-20},RAILNET_STATS=$st"
  RN_CONF_RECV_ENV="RAILNET_NICS==$rn,$e" RN_CONF_SEND_ENV="RAILNET_NICS==$sn,$e" timeout "$T" \
    "$B/tests/multirail-xfer" --interval 0 --timeout 100 "$@" >"$log" 2>&1
}
mbps() { sed -n 's/^result status=ok .* Mbps=\([0-9.]*\).*/\1/p' "$1"; }
st_check() { # NAME KBIT0 KBIT1
  name=$1
  picked "$name" || return 0
  t0=$(date +%s)
  st_shape "$2" "$3" || { echo "not ok $name (tc tbf on veth1/veth3 failed)" >>"$R"; return; }
  ST=$O/$name.stats
  # about 3 s for each rail alone, 5 s fused
  st_run "$O/$name-rail0.log" /dev/null rxe0 rxe1 --dev 0 --bytes $(($2 * 3 / 8))K
  st_run "$O/$name-rail1.log" /dev/null rxe2 rxe3 --dev 0 --bytes $(($3 * 3 / 8))K
  st_run "$O/$name.log" "$ST" rxe0,rxe2 rxe1,rxe3 --vdev 0,1 --expect-rails 2 \
    --bytes $((($2 + $3) * 5 / 8))K
  rc=$?; t=$(( $(date +%s) - t0 ))
  st_shape 0
  a=$(mbps "$O/$name-rail0.log") b=$(mbps "$O/$name-rail1.log") f=$(mbps "$O/$name.log")
  cl=$(grep '"event":"close"' "$ST" 2>/dev/null | grep '"side":"send"' | tail -1)
  field() { echo "$cl" | grep -o "{\"rail\":$1,[^}]*}" | grep -o "\"$2\":[0-9.]*" | cut -d: -f2; }
  b0=$(field 0 bytes) b1=$(field 1 bytes) e0=$(field 0 rate_mbps) e1=$(field 1 rate_mbps)
  share=$(awk -v x="${b0:-0}" -v y="${b1:-0}" 'BEGIN { printf "%.3f", (x + y > 0) ? x / (x + y) : 0 }')
  ratio=$(awk -v a="${a:-0}" -v b="${b:-0}" -v f="${f:-0}" 'BEGIN { printf "%.2f", (a + b > 0) ? f / (a + b) : 0 }')
  what="rails alone ${a:-?} + ${b:-?} Mbit/s, fused ${f:-?} (${ratio} x the sum); fast rail's share of the bytes $share (rates give $(awk -v x="$2" -v y="$3" 'BEGIN { printf "%.2f", x / (x + y) }')); estimates ${e0:-?} and ${e1:-?} Mbit/s"
  if [ $rc -eq 0 ] && [ -n "$a" ] && [ -n "$b" ] && grep -q '^result status=ok receiver=ok.* sender=ok' "$O/$name.log" &&
    awk -v s="$share" -v x="$2" -v y="$3" 'BEGIN { d = s - x / (x + y); exit !(d <= 0.1 && d >= -0.1) }'; then
    echo "ok $name (${t} s; $what)" >>"$R"
  else
    echo "not ok $name (exit $rc after ${t} s; $what; see $name*.log)" >>"$R"
    grep -hE '^(result|end|runner)|WARN' "$O/$name-rail0.log" "$O/$name-rail1.log" "$O/$name.log" | head -20 | cut -c1-300 | sed 's/^/#   /' >>"$R"
  fi
}
# Rates well below what the emulation carries (about 140 Mbit/s for one
# rail alone), so the links, not the CPU, are the limit.
st_check stripe-4to1 80000 20000
st_check stripe-2to1 60000 30000
# A rail degraded mid-transfer: two rails at 60 Mbit/s, rail 1 cut to 6
# at 2 s.  An htb class each, whose rate changes in place (changing a tbf
# drops its queue, and every drop costs the emulated NIC a retransmit
# timeout).  What rail 1 has queued at the cut drains at the new rate
# first (the groups in flight wait for it; about 4 MB, 5 s at 6 Mbit/s,
# so the QP timeout goes to 17 s here).  Decided by the receiver's netdev
# counters: in the half-second samples from 9 s on, rail 0 carries at
# least 0.8 of the bytes (its share of the new rates: 0.91; of an even
# split, 0.5).  Throughput before and after is reported.
st_htb() { # DEV KBIT
  tc qdisc add dev "$1" root handle 1: htb default 1 &&
    tc class add dev "$1" parent 1: classid 1:1 htb rate "${2}kbit" ceil "${2}kbit" burst 256k &&
    tc qdisc add dev "$1" parent 1:1 handle 10: pfifo limit 100000
}
st_degrade() { # NAME
  name=$1
  picked "$name" || return 0
  t0=$(date +%s)
  st_shape 0
  if ! st_htb veth1 60000 || ! st_htb veth3 60000; then
    st_shape 0
    echo "not ok $name (tc htb on veth1/veth3 failed)" >>"$R"
    return
  fi
  ST_TIMEOUT=22 st_run "$O/$name.log" "$O/$name.stats" rxe0,rxe2 rxe1,rxe3 --vdev 0,1 \
    --expect-rails 2 --rails veth0,veth2 --bytes 120M --interval 0.5 \
    --at "2:tc class change dev veth3 parent 1: classid 1:1 htb rate 6000kbit ceil 6000kbit burst 256k"
  rc=$?; t=$(( $(date +%s) - t0 ))
  st_shape 0
  set -- $(awk '/^series/ { t = 0; m = 0; a = 0; b = 0
      for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "t") t = kv[2]; if (kv[1] == "Mbps") m = kv[2]
        if (kv[1] == "veth0") a = kv[2]; if (kv[1] == "veth2") b = kv[2] }
      if (t <= 2) { bm += m; bn++ } else if (t > 9 && m > 0) { am += m; an++; x += a; y += b } }
      END { printf "%.1f %.1f %.3f %d\n", bn ? bm / bn : 0, an ? am / an : 0, (x + y > 0) ? x / (x + y) : 0, an }' "$O/$name.log")
  before=$1 after=$2 share=$3 n=$4
  what="before the cut ${before} Mbit/s (nominal 120), from 9 s on ${after} (nominal 66, $(awk -v a="$after" 'BEGIN { printf "%.2f", a / 66 }') x), rail 0's share then $share over $n samples"
  if [ $rc -eq 0 ] && [ "$n" -ge 2 ] && grep -q '^result status=ok receiver=ok.* sender=ok' "$O/$name.log" &&
    awk -v s="$share" 'BEGIN { exit !(s >= 0.8) }'; then
    echo "ok $name (${t} s; $what)" >>"$R"
  else
    echo "not ok $name (exit $rc after ${t} s; $what; see $name.log)" >>"$R"
    grep -E '^(result|end|runner|series)|WARN' "$O/$name.log" | head -30 | cut -c1-300 | sed 's/^/#   /' >>"$R"
  fi
}
st_degrade stripe-degrade
# Rail pairing (verbs): the listener pairs each of its rails with the
# connector's rail whose GID (an IPv4 address here) the kernel routes from
# it, and its answer tells the connector which; rxe0<->rxe1 is subnet 0
# (veth0/veth1), rxe2<->rxe3 subnet 1 (veth2/veth3).  Every byte verified,
# the receiver's one INFO naming the pairs, and what tells paired from
# crossed rails:
#  - pair-crossed: the receiver's device lists rxe3+rxe1, the sender's
#    rxe0+rxe2.  RoCE packets on subnet 1 (UDP 4791 leaving veth2 and
#    veth3) are dropped from 0.5 s to 4 s: paired, only the rxe2<->rxe3
#    rail fails (the WARNs name rxe2 or rxe3, never rxe0 or rxe1) and the
#    comm goes on over the other; crossed (rxe3<->rxe0, rxe1<->rxe2), each
#    rail sends one way through subnet 1, both fail and so does the comm;
#  - pair-recv1: the receiver has rxe3 only, the sender rxe0+rxe2 (the
#    connector uses the rail the listener chose, not its first);
#  - pair-send1: the sender has rxe2 only, the receiver rxe1+rxe3.
#    For these two, rxe0 and rxe1 send no packet at all (their
#    hw_counters/sent_pkts), rxe2 and rxe3 carry the comm.
rxe_sent() { cat "/sys/class/infiniband/$1/ports/1/hw_counters/sent_pkts" 2>/dev/null || echo -1; }
DROP1="for d in veth2 veth3; do tc qdisc add dev \$d root handle 1: prio && tc filter add dev \$d parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff action drop || exit 1; done"
PASS1="for d in veth2 veth3; do tc qdisc del dev \$d root; done"
pr_check() { # NAME RECV_ENV SEND_ENV INFO-REGEX XFER-ARGS...
  name=$1; renv=$2; senv=$3; info_re=$4; shift 4
  picked "$name" || return 0
  t0=$(date +%s)
  for x in 0 1 2 3; do eval "s0_$x=\$(rxe_sent rxe$x)"; done
  RN_CONF_VERBOSE=1 RN_CONF_RECV_ENV="$renv" RN_CONF_SEND_ENV="$senv" timeout "$T" \
    "$B/tests/multirail-xfer" --vdev 0,1 --interval 0 --timeout 100 "$@" >"$O/$name.log" 2>&1
  rc=$?; t=$(( $(date +%s) - t0 ))
  sh -c "$PASS1" 2>/dev/null
  L=$O/$name.log
  sent=""
  for x in 0 1 2 3; do eval "d=\$(( \$(rxe_sent rxe$x) - s0_$x ))"; eval "sent_$x=$d"; sent="$sent rxe$x=$d"; done
  ninfo=$(grep -cE "$info_re" "$L")
  nall=$(grep -c 'the comm goes over [0-9]* pair(s)' "$L")
  nwarn=$(grep -c 'WARN' "$L")
  sub1=$(grep -cE 'WARN.*rail [01] \(rxe[23]\) of the .* comm with .* failed' "$L")
  sub0=$(grep -cE 'WARN.*rail [01] \(rxe[01]\) of the .* comm with .* failed' "$L")
  ok=$([ $rc -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok' "$L" &&
    [ "$ninfo" -eq 1 ] && [ "$nall" -eq 1 ] && echo 1)
  case $name in
    pair-crossed) what="WARNs $nwarn, naming a subnet-1 rail failing $sub1, a subnet-0 rail $sub0"
      [ -n "$ok" ] && [ "$sub1" -ge 1 ] && [ "$sub0" -eq 0 ] && [ "$sent_0" -gt 0 ] && [ "$sent_1" -gt 0 ] || ok="" ;;
    *) what="WARNs $nwarn"
      [ -n "$ok" ] && [ "$nwarn" -eq 0 ] && [ "$sent_0" -eq 0 ] && [ "$sent_1" -eq 0 ] &&
        [ "$sent_2" -gt 0 ] && [ "$sent_3" -gt 0 ] || ok="" ;;
  esac
  if [ -n "$ok" ]; then
    echo "ok $name (${t} s; the pairing's INFO $ninfo; $what; packets sent:$sent)" >>"$R"
  else
    echo "not ok $name (exit $rc after ${t} s; the pairing's INFO as wanted $ninfo of 1, any $nall; $what; packets sent:$sent; see $name.log)" >>"$R"
    { grep -E 'WARN|goes over|has [0-9]* rail|^(result|end|runner)' "$L" | head -20; } | cut -c1-300 | sed 's/^/#   /' >>"$R"
  fi
}
PR="RAILNET_IB_QPS=2"
pr_check pair-crossed "RAILNET_NICS==rxe1,rxe3,RN_XFER_VDEV=1,0,$FO" "$TWO_R,$FO" \
  'recv comm from rxe0: the peer offers 2 rail\(s\), this device has 2: the comm goes over 2 pair\(s\), rxe3 \(10\.77\.1\.2\) to rail 1 \(10\.77\.1\.1\) by route, rxe1 \(10\.77\.0\.2\) to rail 0 \(10\.77\.0\.1\) by route' \
  --bytes 320M --at "0.5:$DROP1" --at "4:$PASS1"
pr_check pair-recv1 "RAILNET_NICS==rxe3,RN_XFER_VDEV=0,$PR" "$TWO_R,$PR" \
  "recv comm from rxe0: the peer offers 2 rail\\(s\\), this device has 1: the comm goes over 1 pair\\(s\\), rxe3 \\(10\\.77\\.1\\.2\\) to rail 1 \\(10\\.77\\.1\\.1\\) by route; without the peer's rail 0 \\(10\\.77\\.0\\.1\\)" \
  --bytes 64M
pr_check pair-send1 "RAILNET_NICS==rxe1,rxe3,$PR" "RAILNET_NICS==rxe2,RN_XFER_VDEV=0,$PR" \
  'recv comm from rxe2: the peer offers 1 rail\(s\), this device has 2: the comm goes over 1 pair\(s\), rxe3 \(10\.77\.1\.2\) to rail 0 \(10\.77\.1\.1\) by route; without rxe1 \(10\.77\.0\.2\)' \
  --bytes 64M
fo_check failover-1of2 0 --expect-rails 2 --bytes 320M --at "0.5:ip link set veth2 down" \
  --at "3:ip link set veth2 up" --timeout 100
fo_check failover-2of2 1 --expect-rails 2 --bytes 2G --at "0.5:ip link set veth2 down" \
  --at "2:ip link set veth0 down" --timeout 100
sb_check failover-standby
exit 0
