#!/bin/sh
# Verbs numbers, not a pass/fail test: boots the Soft-RoCE VM once and runs
# ib_write_bw / ib_write_lat (1 MiB / 8 B) on rxe0<->rxe1, then the plugin
# (tests/bench/ib_bench) on the same pair with 1 QP and 4 QPs and on a 2-rail
# virtual device (rxe0+rxe2 vs rxe1+rxe3), and prints the ratios.
# Usage: scripts/softroce/bench.sh [BUILD]   (RN_BENCH_ITERS, default 300)
# Soft-RoCE under TCG is slow and noisy (tens of MB/s, retransmits, and a
# busy host shows up in every number): compare only within one boot.
cd "$(dirname "$0")/../.." || exit 1
B=${1:-${RN_BUILD:-build}}
S=scripts/softroce
export RXEVM_DIR=${RXEVM_DIR:-/tmp/rxevm}
sh $S/setup.sh >/dev/null || { echo "bench: VM setup failed" >&2; exit 1; }
[ -x "$B/tests/bench/ib_bench" ] || { echo "bench: build $B/tests/bench/ib_bench first (make)" >&2; exit 1; }
OUT=$(mktemp -d /tmp/rn-bench.XXXXXX); trap 'rm -rf "$OUT"' EXIT
t0=$(date +%s)
RXEVM_OUT="$OUT" RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-540} \
  sh $S/run-vm.sh $S/rxe-test.sh 4 sh $S/ib-suite.sh "$B" "$OUT" bench >"$OUT/console.log" 2>&1
rc=$?
echo "VM: $(( $(date +%s) - t0 )) s, exit $rc"
if [ $rc -ne 0 ]; then tail -20 "$OUT/console.log" | sed 's/^/console: /'; fi
cat "$OUT/results"
bw=$(awk '$1 == 1048576 {print $4}' "$OUT/ib_write_bw.log")
lat_typ=$(awk '$1 == 8 {print $5}' "$OUT/ib_write_lat.log")
lat_avg=$(awk '$1 == 8 {print $6}' "$OUT/ib_write_lat.log")
echo "ib_write_bw 1 MiB: ${bw:-?} MB/s; ib_write_lat 8 B: typical ${lat_typ:-?} us, avg ${lat_avg:-?} us"
for f in "$OUT"/bench-*.log; do
  n=$(basename "$f" .log)
  pbw=$(sed -n 's/^# RESULT plugin_bw_MBps \([0-9.]*\).*/\1/p' "$f")
  plt=$(sed -n 's/^# RESULT plugin_lat_typical_us \([0-9.]*\).*/\1/p' "$f")
  pla=$(sed -n 's/^# RESULT plugin_lat_avg_us \([0-9.]*\).*/\1/p' "$f")
  line="$n:"
  [ -n "$pbw" ] && line="$line bw $pbw MB/s ($(awk -v a="$pbw" -v b="$bw" 'BEGIN{if(b>0)printf "%.0f%%", 100*a/b; else print "?"}') of ib_write_bw)"
  [ -n "$plt" ] && line="$line; lat typical $plt us ($(awk -v a="$plt" -v b="$lat_typ" 'BEGIN{if(b>0)printf "%.1fx", a/b; else print "?"}') ib_write_lat), avg $pla us"
  echo "$line"
done
cat "$OUT"/counters-*.log 2>/dev/null | grep -E 'retry|rnr|seq_err' | sed 's/^/counters: /'
exit $rc
