#!/bin/sh
# Runs INSIDE the Soft-RoCE VM (after rxe-test.sh made rxe0..rxe3 on two
# veth pairs): the verbs numbers for scripts/softroce/bench.sh.
# Usage: ib-bench.sh BUILD OUTDIR [ROUNDS [ITERS [BASE_BUILD [YIELD]]]]
#
# Each round runs every anchor next to the plugin run it anchors, so load
# that drifts on a shared host falls on both sides of each ratio:
#   bw1    ib_write_bw 1 MiB rxe1->rxe0          | plugin 1 rail, 1 QP, 1 MiB, 8 in flight
#   bw2    two ib_write_bw 1 MiB pairs at once   | plugin rxe1+rxe3 -> rxe0+rxe2 fused
#   lat    ib_write_lat 8 B rxe1<->rxe0          | plugin 8 B ping-pong, 1 rail and fused
#   rate   ib_write_bw -s 4096                   | plugin 4 KiB, 8 in flight
# plus the plugin with 4 QPs (no anchor of its own).  With BASE_BUILD the
# plugin runs are repeated with that build's library (same driver), for a
# before/after in one boot.  With YIELD=1 they are repeated once more with
# this build and a driver that yields the CPU after a pass that moved
# nothing, as NCCL's proxy thread does (RN_BENCH_IDLE=yield).  Every run
# leaves OUTDIR/rR-NAME.log and the rxe hardware counters (and veth and
# backlog drops) it moved in OUTDIR/rR-NAME.ctr; OUTDIR/results lists
# "R NAME VALUE UNIT" lines for bench.sh.
B=${1:-build}; O=${2:-/tmp}; ROUNDS=${3:-3}; ITERS=${4:-300}; BASE=${5:-}; YIELD=${6:-}
# "-": not given (the VM's command line drops empty arguments)
[ "$BASE" = - ] && BASE=; [ "$YIELD" = - ] && YIELD=
R=$O/results; : >"$R"
export RAILNET_TRANSPORT=ib RN_BUILD="$B"
T=180
G=1 # RoCE v2 IPv4 GID (ib_bench's plugin finds it itself)
for n in 0 1 2 3 4 5 6 7; do
  case $(cat /sys/class/infiniband/rxe0/ports/1/gids/$n) in 0000:0000:0000:0000:0000:ffff:*) G=$n; break ;; esac
done
ONE_R="RAILNET_NICS==rxe0"; ONE_S="RAILNET_NICS==rxe1"
TWO_R="RAILNET_NICS==rxe0,rxe2"; TWO_S="RAILNET_NICS==rxe1,rxe3"

counters() { # every rxe hw counter as "dev name value", and packets the veths or backlogs dropped
  for d in rxe0 rxe1 rxe2 rxe3; do
    for f in /sys/class/infiniband/$d/ports/1/hw_counters/*; do
      [ -r "$f" ] && echo "$d $(basename "$f") $(cat "$f")"
    done
  done
  for v in veth0 veth1 veth2 veth3; do
    for f in rx_dropped tx_dropped; do
      [ -r /sys/class/net/$v/statistics/$f ] && echo "$v $f $(cat /sys/class/net/$v/statistics/$f)"
    done
  done
  # /proc/net/softnet_stat: per CPU, hex; column 2 counts backlog overflows
  n=0
  while read -r _ dropped _; do n=$((n + 0x$dropped)); done </proc/net/softnet_stat
  echo "cpus softnet_dropped $n"
}
# run NAME CMD...: the command (bounded by timeouts inside) with counters before and after; the
# counters it moved (retransmits, sequence errors, RNR, drops) to NAME.ctr
run() {
  name=$1; shift
  counters >"$O/ctr.before"
  "$@" >"$O/$name.log" 2>&1 || echo "# $name: exit $?" >>"$O/$name.log"
  counters | awk 'NR == FNR { b[$1" "$2] = $3; next }
    $2 ~ /retry|seq|rnr|dup|drop|err|timeout/ && $3 - b[$1" "$2] > 0 { print $1, $2, $3 - b[$1" "$2] }' \
    "$O/ctr.before" - >"$O/$name.ctr"
}
result() { echo "$1 $2 $3 $4" >>"$R"; } # ROUND NAME VALUE UNIT
# perftest pairs: server in the background, client against it
bw_pair() { # DEV_S DEV_C ADDR PORT ARGS...
  ds=$1 dc=$2 a=$3 p=$4; shift 4
  timeout $T ib_write_bw -d "$ds" -x $G -F -p "$p" "$@" >/dev/null 2>&1 & sv=$!
  sleep 1
  timeout $T ib_write_bw -d "$dc" -x $G -F -p "$p" "$@" "$a"; rc=$?
  wait $sv
  return $rc
}
two_pairs() {
  bw_pair rxe0 rxe1 10.77.0.1 18601 -s 1048576 -n "$ITERS" >"$O/pair0.log" 2>&1 & p0=$!
  bw_pair rxe2 rxe3 10.77.1.1 18602 -s 1048576 -n "$ITERS" >"$O/pair1.log" 2>&1 & p1=$!
  wait $p0; r0=$?; wait $p1; r1=$?
  cat "$O/pair0.log" "$O/pair1.log"
  [ $r0 -eq 0 ] && [ $r1 -eq 0 ]
}
lat_pair() {
  timeout $T ib_write_lat -d rxe0 -x $G -F -s 8 -n 2000 >/dev/null 2>&1 & sv=$!
  sleep 1
  timeout $T ib_write_lat -d rxe1 -x $G -F -s 8 -n 2000 10.77.0.1; rc=$?
  wait $sv
  return $rc
}
# perftest's MB/sec is MiB/s: bytes = value * 2^20
pt_bw() { awk -v s="$2" '$1 == s && NF >= 4 { v = $4 } END { if (v != "") print v }' "$1"; }
pt_bw_sum() { awk -v s="$2" '$1 == s && NF >= 4 { v += $4; n++ } END { if (n == 2) print v }' "$1"; }
pt_lat() { awk '$1 == 8 && NF >= 5 { print $5 }' "$1"; }
pl() { sed -n "s/^# RESULT $2 \([0-9.]*\).*/\1/p" "$1" | head -1; }

# plugin runs: TAG LIB_DIR
plugin_runs() {
  tag=$1 lib=$2 r=$3
  export RN_PLUGIN="$lib/libnccl-net-railnet.so"
  RN_CONF_RECV_ENV="$ONE_R" RN_CONF_SEND_ENV="$ONE_S" RN_BENCH_ITERS=$ITERS \
    run "r$r-$tag-bw1" timeout $T "$B/tests/bench/ib_bench" bw
  result "$r" "$tag-bw1" "$(pl "$O/r$r-$tag-bw1.log" plugin_bw_MiBps)" MiB/s
  RN_CONF_RECV_ENV="$TWO_R" RN_CONF_SEND_ENV="$TWO_S" RN_IB_VDEV=0,1 RN_BENCH_ITERS=$ITERS \
    run "r$r-$tag-bw2" timeout $T "$B/tests/bench/ib_bench" bw
  result "$r" "$tag-bw2" "$(pl "$O/r$r-$tag-bw2.log" plugin_bw_MiBps)" MiB/s
  RN_CONF_RECV_ENV="$ONE_R" RN_CONF_SEND_ENV="$ONE_S" \
    run "r$r-$tag-lat1" timeout $T "$B/tests/bench/ib_bench" lat
  result "$r" "$tag-lat1" "$(pl "$O/r$r-$tag-lat1.log" plugin_lat_typical_us)" us
  RN_CONF_RECV_ENV="$TWO_R" RN_CONF_SEND_ENV="$TWO_S" RN_IB_VDEV=0,1 \
    run "r$r-$tag-lat2" timeout $T "$B/tests/bench/ib_bench" lat
  result "$r" "$tag-lat2" "$(pl "$O/r$r-$tag-lat2.log" plugin_lat_typical_us)" us
  RN_CONF_RECV_ENV="$ONE_R" RN_CONF_SEND_ENV="$ONE_S" RN_BENCH_SIZE=4096 \
    RN_BENCH_ITERS=$((ITERS * 16)) RN_BENCH_WINDOW=8 \
    run "r$r-$tag-rate" timeout $T "$B/tests/bench/ib_bench" bw
  result "$r" "$tag-rate" "$(pl "$O/r$r-$tag-rate.log" plugin_msg_rate)" msg/s
  # where a 4 KiB message waits: median post-to-completion on each side
  result "$r" "$tag-rate-send-us" "$(pl "$O/r$r-$tag-rate.log" plugin_send_lifetime_us)" us
  result "$r" "$tag-rate-recv-us" "$(pl "$O/r$r-$tag-rate.log" plugin_recv_lifetime_us)" us
  RN_CONF_RECV_ENV="$ONE_R,RAILNET_IB_QPS=4" RN_CONF_SEND_ENV="$ONE_S,RAILNET_IB_QPS=4" \
    RN_BENCH_ITERS=$ITERS run "r$r-$tag-bw1q4" timeout $T "$B/tests/bench/ib_bench" bw
  result "$r" "$tag-bw1q4" "$(pl "$O/r$r-$tag-bw1q4.log" plugin_bw_MiBps)" MiB/s
  unset RN_PLUGIN
}

r=1
while [ $r -le "$ROUNDS" ]; do
  run "r$r-ib_write_bw" bw_pair rxe0 rxe1 10.77.0.1 18600 -s 1048576 -n "$ITERS"
  result "$r" pt-bw1 "$(pt_bw "$O/r$r-ib_write_bw.log" 1048576)" MiB/s
  run "r$r-ib_write_bw-2pairs" two_pairs
  result "$r" pt-bw2 "$(pt_bw_sum "$O/r$r-ib_write_bw-2pairs.log" 1048576)" MiB/s
  run "r$r-ib_write_lat" lat_pair
  result "$r" pt-lat "$(pt_lat "$O/r$r-ib_write_lat.log")" us
  run "r$r-ib_write_bw-4k" bw_pair rxe0 rxe1 10.77.0.1 18603 -s 4096 -n $((ITERS * 16))
  v=$(pt_bw "$O/r$r-ib_write_bw-4k.log" 4096)
  result "$r" pt-rate "$(awk -v v="$v" 'BEGIN { if (v != "") printf "%.0f", v * 1048576 / 4096 }')" msg/s
  plugin_runs new "$B" $r
  [ -n "$BASE" ] && plugin_runs base "$BASE" $r
  if [ -n "$YIELD" ]; then
    export RN_BENCH_IDLE=yield
    plugin_runs yield "$B" $r
    unset RN_BENCH_IDLE
  fi
  r=$((r + 1))
done
exit 0
