#!/bin/sh
# Multi-rail numbers for railnet's TCP transport on the railbed testbed
# (railbed.sh), each against anchors measured in the same run:
#   equal2, equal4, ratio4, ratio2: each rail alone with plain TCP (iperf3,
#     2 streams) and with railnet on a single-rail device, plain TCP on
#     every rail at once, then railnet on the fused device; ratios to the
#     sum of the rails alone (issue 9's goals: >= 0.95 x the sum for equal
#     rails, >= 0.9 x for unequal ones);
#   degrade: 2 rails, one cut to 10% of its rate a third into the run; the
#     throughput every 100 ms, the steady rate after against the new sum,
#     and when it got back to >= 0.85 x the new sum (goal: within 2 s), by
#     two measures: the payload of completed messages, and the bytes that
#     landed, by the receiver's per-rail counters (RAILNET_STATS);
#   cut, blackhole: 2 rails, one taken down (link down / every packet
#     silently dropped) 2 s into a fixed-size transfer: verified, an error
#     (when), or a hang killed at the bound;
#   single-down: a single-rail device whose link goes down 2 s in;
#   standby: the same with a standby NIC (a second rail the topology puts
#     behind another switch): the standby carries the rest.
# Usage: scripts/railbed/bench.sh [--quick] [--seconds T] [--only LIST] [--bound S] [--out DIR]
#   LIST: comma list of the cases above (default: all); --quick: 2 s per
#   measurement; --bound: seconds after a cut before a hang is declared
#   (default 30); --out: keep every log there (default a temp dir, removed).
# Needs root, iproute2, iperf3 and `make` (build/tests/multirail-xfer).
# Rates stay at 100-400 Mbit/s per rail so that the CPU of a small host is
# not the limit; on a loaded host the numbers move between runs, so read
# the ratios, which are taken within one run.
set -u
cd "$(dirname "$0")/../.." || exit 1
B=${RN_BUILD:-build}
RB=scripts/railbed/railbed.sh
XFER=$B/tests/multirail-xfer
T=5
ONLY=equal2,equal4,ratio4,ratio2,degrade,cut,blackhole,single-down,standby
BOUND=30
OUT=''
while [ $# -gt 0 ]; do
  case $1 in
    --quick) T=2; shift ;;
    --seconds) T=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --bound) BOUND=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) sed -n 's/^# \{0,1\}//; /^Usage:/,/^Needs/p' "$0" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench: needs root" >&2; exit 1; }
command -v iperf3 >/dev/null 2>&1 || { echo "bench: iperf3 missing (apt-get install iperf3)" >&2; exit 1; }
if [ ! -x "$XFER" ] || [ ! -e "$B/libnccl-net-railnet.so" ]; then
  echo "bench: run make first ($XFER)" >&2
  exit 1
fi
if [ -z "$OUT" ]; then
  OUT=$(mktemp -d /tmp/rn-railbench.XXXXXX) || exit 1
  KEEP=0
else
  mkdir -p "$OUT" || exit 1
  KEEP=1
fi
NAME=rbb$$
trap '"$RB" --name "$NAME" clean; [ $KEEP = 1 ] || rm -rf "$OUT"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }
calc() { awk "BEGIN { printf \"%.${2:-1}f\", $1 }"; }
SUMMARY=$OUT/summary.md
: >"$SUMMARY"

# The testbed is made at the highest rate and its topology written then
# (the planner fuses only NICs of one speed, as NCCL would), then each
# rail is set to its own rate.
bed_up() { # RATES(comma list) NRAILS
  "$RB" --name "$NAME" clean
  top=$(echo "$1" | tr ',' '\n' | sort -n | tail -1)
  "$RB" --name "$NAME" up --rails "$2" --rate "$top" >/dev/null || exit 1
  "$RB" --name "$NAME" topo-xml "$OUT/topo.xml" || exit 1
  i=0
  for r in $(echo "$1" | tr ',' ' '); do
    [ "$r" = "$top" ] || "$RB" --name "$NAME" rate $i "$r" || exit 1
    i=$((i + 1))
  done
  i=0
  while [ $i -lt "$2" ]; do
    "$RB" --name "$NAME" exec b iperf3 -s -D -p $((5201 + i)) -B "198.18.$i.2" \
      --logfile "$OUT/iperf3-server-$i.log" || exit 1
    i=$((i + 1))
  done
  sleep 0.3
}

# Plain TCP over one rail for T seconds: receiver-side Mbit/s.
plain() { # RAIL [LOG]
  "$RB" --name "$NAME" exec a iperf3 -c "198.18.$1.2" -B "198.18.$1.1" -p $((5201 + $1)) \
    -t "$T" -P 2 -f m >"${2:-$OUT/plain-$1.log}" 2>&1
  awk '/receiver/ { v = $(NF - 2) } END { print v + 0 }' "${2:-$OUT/plain-$1.log}"
}

# railnet for T seconds on the device made of the rails IFNAME selects.
railnet() { # IFNAME LOG [extra multirail-xfer args...]   ($RENV: more K=V,... for both sides)
  ifn=$1 log=$2
  shift 2
  "$XFER" --railbed "$NAME" --env "RAILNET_TRANSPORT=socket,RAILNET_SOCKET_IFNAME=$ifn,RAILNET_TOPO_FILE=$OUT/topo.xml${RENV:+,$RENV}" \
    --timeout $((T * 4 + 30)) "$@" >"$log" 2>"$log.err"
  sed -n 's/^result status=ok .* Mbps=\([0-9.]*\).*/\1/p' "$log" | awk '{ print $1 + 0 }'
}

echo "railbed bench: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $T s per measurement, logs in $OUT"

# ---- steady rates ------------------------------------------------------
steady() { # CASE RATES(comma list) GOAL
  c=$1 rates=$2 goal=$3
  n=$(echo "$rates" | awk -F, '{ print NF }')
  bed_up "$rates" "$n"
  echo "== $c: $n rails at $rates Mbit/s"
  sum_plain=0 sum_rn=0 best=0 cols_p='' cols_r=''
  i=0
  while [ $i -lt "$n" ]; do
    p=$(plain $i "$OUT/$c-plain-$i.log")
    r=$(railnet "=veth$i" "$OUT/$c-railnet-$i.log" --expect-rails 1 --seconds "$T" --interval 0)
    r=${r:-0}
    echo "   rail $i alone: plain TCP $p Mbit/s, railnet (device veth$i) $r Mbit/s"
    sum_plain=$(calc "$sum_plain + $p") sum_rn=$(calc "$sum_rn + $r")
    best=$(awk -v a="$best" -v b="$p" 'BEGIN { print (b > a) ? b : a }')
    cols_p="$cols_p${cols_p:+ + }$p" cols_r="$cols_r${cols_r:+ + }$r"
    i=$((i + 1))
  done
  # plain TCP on every rail at once: what the host moves in parallel
  i=0
  while [ $i -lt "$n" ]; do
    plain $i "$OUT/$c-together-$i.log" >"$OUT/$c-together-$i.val" &
    i=$((i + 1))
  done
  wait
  together=$(cat "$OUT/$c"-together-*.val | awk '{ s += $1 } END { print s + 0 }')
  f=$(railnet veth "$OUT/$c-fused.log" --expect-rails "$n" --seconds "$T" --interval 0.1)
  f=${f:-0}
  shares=$(sed -n 's/^rails side=receiver counter=rx_bytes //p' "$OUT/$c-fused.log" | sed 's/=[0-9]*(/ /g; s/)//g')
  r1=$(calc "$f / $sum_plain" 2) r2=$(calc "$f / $sum_rn" 2) r3=$(calc "$f / $together" 2)
  met=$(awk -v r="$r1" -v g="$goal" 'BEGIN { print (r >= g) ? "met" : "not met" }')
  echo "   plain TCP on all rails at once: $together Mbit/s"
  echo "   railnet fused ($(sed -n 's/^device side=receiver dev=[0-9]* name=\([^ ]*\).*/\1/p' "$OUT/$c-fused.log")): $f Mbit/s; split by rx bytes: $shares"
  echo "   fused / sum of plain TCP alone ($sum_plain) = $r1 (goal >= $goal: $met); / sum of railnet alone ($sum_rn) = $r2; / plain TCP together = $r3; / best rail alone ($best) = $(calc "$f / $best" 2)"
  echo "| $c | $rates | $cols_p = $sum_plain | $cols_r = $sum_rn | $together | $f | $shares | **$r1** ($met, goal $goal) | $r2 |" >>"$SUMMARY"
}

steady_header() {
  {
    echo "| case | rates, Mbit/s | plain TCP, each rail alone = sum | railnet, each rail alone = sum | plain TCP, all rails at once | railnet fused | fused split (rx bytes) | fused / plain sum | fused / railnet sum |"
    echo "|---|---|---|---|---|---|---|---|---|"
  } >>"$SUMMARY"
}

steady_cases=0
for c in equal2 equal4 ratio4 ratio2; do want $c && steady_cases=1; done
[ $steady_cases = 1 ] && steady_header
want equal2 && steady equal2 300,300 0.95
want equal4 && steady equal4 150,150,150,150 0.95
want ratio4 && steady ratio4 400,100 0.9
want ratio2 && steady ratio2 400,200 0.9

# ---- one rail degraded to 10% mid-transfer ----------------------------
if want degrade; then
  rate=300 low=30
  bed_up "$rate,$rate" 2
  echo "== degrade: 2 rails at $rate Mbit/s, rail 1 to $low Mbit/s at $T s of $((3 * T)) s"
  p0=$(plain 0 "$OUT/degrade-plain-0.log")
  p1=$(plain 1 "$OUT/degrade-plain-1.log")
  "$RB" --name "$NAME" rate 1 $low
  p1l=$(plain 1 "$OUT/degrade-plain-1-low.log")
  "$RB" --name "$NAME" rate 1 $rate
  old=$(calc "$p0 + $p1") new=$(calc "$p0 + $p1l")
  echo "   plain TCP alone: rail 0 $p0, rail 1 $p1 (at $low: $p1l); sum before $old, after $new Mbit/s"
  RENV="RAILNET_STATS=$OUT/degrade.stats,RAILNET_STATS_MS=100" \
    railnet veth "$OUT/degrade-fused.log" --expect-rails 2 --seconds $((3 * T)) --interval 0.1 \
    --at "$T:$RB --name $NAME rate 1 $low" >/dev/null
  # The receiver's counters every 100 ms as "series" lines of their own:
  # t (s since the comm began, within a few ms of the payload series'
  # start), the Mbit/s that landed in all, and per rail.
  grep '"event":"interval"' "$OUT/degrade.stats" | grep '"side":"recv"' | awk '
    { ms = $0; sub(/.*"ms":/, "", ms); sub(/,.*/, "", ms)
      line = $0; nr = 0; tot = 0
      while (match(line, /"name":"[^"]*","state":"[^"]*","streams":[0-9]*,"bytes":[0-9]*/)) {
        f = substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
        b = f; sub(/.*"bytes":/, "", b); nm = f; sub(/^"name":"/, "", nm); sub(/".*/, "", nm)
        name[nr] = nm; cur[nr] = b + 0; tot += b; nr++
      }
      if (have && ms > pms) {
        printf "series t=%.3f Mbps=%.1f", ms / 1000, (tot - ptot) * 8 / (ms - pms) / 1000
        for (i = 0; i < nr; i++) printf " %s=%.1f", name[i], (cur[i] - prev[i]) * 8 / (ms - pms) / 1000
        printf "\n"
      }
      have = 1; pms = ms; ptot = tot; for (i = 0; i < nr; i++) prev[i] = cur[i] }' >"$OUT/degrade-landed.log"
  # Mbit/s over a sliding 0.5 s (5 samples of 100 ms: 1 MiB messages make
  # single payload samples coarse); recovery = the first time after the
  # cut from which the average stays >= 0.85 x the new sum.  The payload
  # of completed messages (FIFO, 8 in flight) also swings while messages
  # wait for their chunk on the slow rail (512 KiB at 30 Mbit/s: 140 ms),
  # so the bytes that landed say what the split delivers.
  recovery() { # SERIES-LOG
    awk -v tc="$T" -v end="$((3 * T))" -v old="$old" -v new="$new" '
    /^series/ { split($2, a, "="); split($3, b, "="); t[n] = a[2]; v[n] = b[2]; n++ }
    END {
      for (i = 0; i < n; i++) { s = 0; k = 0; for (j = i - 4; j <= i; j++) if (j >= 0) { s += v[j]; k++ } m[i] = s / k }
      for (i = 0; i < n; i++) {
        if (t[i] > 1 && t[i] <= tc) { sb += v[i]; nb++ }
        if (t[i] > tc + 2 && t[i] <= end) { sa += v[i]; na++ }
      }
      rec = -1
      for (i = n - 1; i >= 0 && t[i] > tc; i--) { if (t[i] > end) continue; if (m[i] < 0.85 * new) break; rec = t[i] - tc }
      before = nb ? sb / nb : 0; after = na ? sa / na : 0
      printf "%.1f %.2f %.1f %.2f %s\n", before, before / old, after, after / new, (rec >= 0 && i >= 0) ? sprintf("%.1f s", rec) : "never"
    }' "$1"
  }
  recovery "$OUT/degrade-fused.log" >"$OUT/degrade.sum"
  recovery "$OUT/degrade-landed.log" >"$OUT/degrade-landed.sum"
  read -r before rb after ra rec <"$OUT/degrade.sum"
  read -r lbefore lrb lafter lra lrec <"$OUT/degrade-landed.sum"
  echo "   railnet fused, payload of completed messages: before the cut $before Mbit/s ($rb x the sum), from 2 s after it $after Mbit/s ($ra x the new sum); >= 0.85 x the new sum again after: $rec"
  echo "   railnet fused, bytes landed (receiver's counters): before $lbefore Mbit/s ($lrb x), from 2 s after $lafter Mbit/s ($lra x the new sum); >= 0.85 x the new sum again after: $lrec"
  echo "   series (payload Mbit/s every 0.5 s; per rail: wire Mbit/s):"
  awk '/^series/ { k++; if (k % 5 == 0) print "     " $0 } /^event/ { print "     " $0 }' "$OUT/degrade-fused.log"
  echo "   series (bytes landed, Mbit/s every 0.5 s; per rail: the receiver's counters):"
  awk '/^series/ { k++; if (k % 5 == 0) print "     " $0 }' "$OUT/degrade-landed.log"
  {
    echo
    echo "| degrade | plain TCP rail 0 + rail 1 before / after | railnet fused before the cut | after (from +2 s) | back to >= 0.85 x new sum |"
    echo "|---|---|---|---|---|"
    echo "| 2 x $rate, rail 1 to $low at ${T} s, payload completed | $p0 + $p1 = $old / $p0 + $p1l = $new | $before (**$rb** x sum) | $after (**$ra** x new sum) | $rec (goal: within 2 s) |"
    echo "| the same run, bytes landed (receiver's counters) | | $lbefore (**$lrb** x sum) | $lafter (**$lra** x new sum) | $lrec (goal: within 2 s) |"
  } >>"$SUMMARY"
fi

# ---- faults --------------------------------------------------------------
fault_header=0
fault() { # CASE NRAILS IFNAME RAILCMD DESCRIPTION [STANDBY]   (STANDBY=1: one more NIC, the standby)
  c=$1 n=$2 ifn=$3 cmd=$4 what=$5 sb=${6:-0}
  rates=300
  [ $((n + sb)) -eq 2 ] && rates=300,300
  bed_up "$rates" $((n + sb))
  [ "$sb" = 1 ] && { "$RB" --name "$NAME" topo-xml "$OUT/topo.xml" --standby 1 || exit 1; }
  echo "== $c: $what"
  # what the device moves in the 2 s before the cut, plus T s of one rail
  bytes=$(((n * 2 + T) * 300 * 1000000 / 8))
  "$XFER" --railbed "$NAME" --env "RAILNET_TRANSPORT=socket,RAILNET_SOCKET_IFNAME=$ifn,RAILNET_TOPO_FILE=$OUT/topo.xml" \
    --expect-rails "$n" --bytes "$bytes" --interval 0.5 --at "2:$RB --name $NAME $cmd" \
    --timeout $((2 + BOUND)) >"$OUT/$c.log" 2>"$OUT/$c.err"
  rc=$?
  res=$(grep '^result' "$OUT/$c.log")
  rcv=$(echo "$res" | sed -n 's/.* receiver=\([^ ]*\).*/\1/p')
  snd=$(echo "$res" | sed -n 's/.* sender=\([^ ]*\).*/\1/p')
  lp=$(echo "$res" | sed -n 's/.* last_progress=\([0-9.]*\).*/\1/p')
  done_b=$(echo "$res" | sed -n 's/.* bytes=\([0-9]*\).*/\1/p')
  ev=$(sed -n 's/^event t=\([0-9.]*\).*/\1/p' "$OUT/$c.log")
  side() { # OUTCOME: "error@T" -> "error after T-ev s"
    case $1 in
      *@*) echo "${1%@*} $(calc "${1#*@} - ${ev:-2}") s after the cut" ;;
      hang) echo "hang, killed $(calc "$((2 + BOUND)) - ${ev:-2}" 0) s after the cut" ;;
      *) echo "$1" ;;
    esac
  }
  echo "   exit $rc: receiver $(side "$rcv"); sender $(side "$snd"); $((done_b / 1048576)) of $((bytes / 1048576)) MiB completed${lp:+, last progress at ${lp} s}"
  grep -E 'WARN' "$OUT/$c.err" | head -3 | sed 's/^/   /'
  if [ $fault_header = 0 ]; then
    {
      echo
      echo "| fault (at 2 s) | device | receiver | sender | completed | expected |"
      echo "|---|---|---|---|---|---|"
    } >>"$SUMMARY"
    fault_header=1
  fi
  expect="all verified, no error"
  [ "$n" -eq 1 ] && [ "$sb" = 0 ] && expect="an error on both sides"
  echo "| $what | $n rail(s) of 300 Mbit/s | $(side "$rcv") | $(side "$snd") | $((done_b / 1048576)) of $((bytes / 1048576)) MiB | $expect |" >>"$SUMMARY"
}
want cut && fault cut 2 veth "down 1" "rail 1 link down (both ends)"
want blackhole && fault blackhole 2 veth "blackhole 1" "rail 1 black-holed (links up, packets dropped)"
want single-down && fault single-down 1 veth "down 0" "the only rail's link down"
want standby && fault standby 1 veth "down 0" "the only rail's link down, a standby NIC" 1

echo
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs."
echo "Summary (Mbit/s of payload; plain TCP = iperf3 -P 2 per rail; every ratio within this run):"
echo
cat "$SUMMARY"
