#!/bin/sh
# Verbs numbers, not a pass/fail test: boots the Soft-RoCE VM once and runs
# scripts/softroce/ib-bench.sh inside: ROUNDS rounds, each with every
# perftest anchor next to the plugin run it anchors (ib_write_bw 1 MiB, two
# ib_write_bw pairs at once, ib_write_lat 8 B, ib_write_bw -s 4096), then
# prints the five goal ratios per round and their range, the anchors, and
# the retransmit counters each side moved.
# Usage: scripts/softroce/bench.sh [BUILD]
#   RN_BENCH_ROUNDS (3), RN_BENCH_ITERS (300 MiB-sized messages per run),
#   RN_BENCH_BASE=DIR: also run DIR's libnccl-net-railnet.so with the same
#   driver in each round (before/after in one boot); RN_BENCH_YIELD=1: also
#   run this build with a driver that yields after an idle pass (as NCCL's
#   proxy thread does).
# Soft-RoCE under TCG is slow and noisy (tens of MB/s, and a busy host shows
# up in every number): only ratios within one round mean anything.
cd "$(dirname "$0")/../.." || exit 1
B=${1:-${RN_BUILD:-build}}
S=scripts/softroce
ROUNDS=${RN_BENCH_ROUNDS:-3}
ITERS=${RN_BENCH_ITERS:-300}
BASE=${RN_BENCH_BASE:-}
YIELD=${RN_BENCH_YIELD:-}
export RXEVM_DIR=${RXEVM_DIR:-/tmp/rxevm}
sh $S/setup.sh >/dev/null || { echo "bench: VM setup failed" >&2; exit 1; }
[ -x "$B/tests/bench/ib_bench" ] || { echo "bench: build $B/tests/bench/ib_bench first (make)" >&2; exit 1; }
[ -z "$BASE" ] || [ -e "$BASE/libnccl-net-railnet.so" ] || { echo "bench: no $BASE/libnccl-net-railnet.so" >&2; exit 1; }
OUT=$(mktemp -d /tmp/rn-bench.XXXXXX); trap 'rm -rf "$OUT"' EXIT
PASSES=1; [ -n "$BASE" ] && PASSES=$((PASSES + 1)); [ -n "$YIELD" ] && PASSES=$((PASSES + 1))
t0=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
RXEVM_OUT="$OUT" RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-$((300 + ROUNDS * 240 * PASSES))} \
  sh $S/run-vm.sh $S/rxe-test.sh 4 sh $S/ib-bench.sh "$B" "$OUT" "$ROUNDS" "$ITERS" "${BASE:--}" "${YIELD:--}" \
  >"$OUT/console.log" 2>&1
rc=$?
echo "VM: $(( $(date +%s) - t0 )) s, exit $rc, $ROUNDS round(s), $ITERS x 1 MiB per bandwidth run"
# the host's load shows in every number: say what it was
echo "host load average (1, 5, 15 min): $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
[ -n "$RN_BENCH_KEEP" ] && cp -r "$OUT" "$RN_BENCH_KEEP"
[ -s "$OUT/results" ] || { echo "bench: no results"; tail -20 "$OUT/console.log"; exit 1; }
awk -v rounds="$ROUNDS" -v base="$BASE" -v yield="$YIELD" '
  { v[$1, $2] = $3 }
  function ratio(r, a, b) { return (v[r, a] > 0 && v[r, b] > 0) ? v[r, a] / v[r, b] : -1 }
  function row(label, target, a, b, fmt,   r, x, lo, hi, line, ok) {
    line = sprintf("%-36s %-7s", label, target); lo = 1e9; hi = -1
    for (r = 1; r <= rounds; r++) {
      x = ratio(r, a, b)
      line = line sprintf(" %7s", x < 0 ? "?" : sprintf(fmt, x))
      if (x >= 0) { if (x < lo) lo = x; if (x > hi) hi = x }
    }
    line = line sprintf("   %s", hi < 0 ? "?" : sprintf(fmt "-" fmt, lo, hi))
    print line
  }
  function goals(tag, title) {
    printf "\n%s\n%-36s %-7s", title, "goal (plugin / anchor, same round)", "target"
    for (r = 1; r <= rounds; r++) printf " %7s", "round " r
    printf "   range\n"
    row("1 rail, 1 QP, 1 MiB / ib_write_bw", ">= 0.90", tag "-bw1", "pt-bw1", "%.2f")
    row("8 B half RTT, 1 rail / ib_write_lat", "<= 1.50", tag "-lat1", "pt-lat", "%.2f")
    row("8 B half RTT, fused / ib_write_lat", "<= 1.50", tag "-lat2", "pt-lat", "%.2f")
    row("fused 2 rails / two ib_write_bw pairs", ">= 0.90", tag "-bw2", "pt-bw2", "%.2f")
    row("4 KiB msg/s, 8 in flight / ib_write_bw", ">= 0.80", tag "-rate", "pt-rate", "%.2f")
    row("(1 rail, 4 QPs / ib_write_bw)", "", tag "-bw1q4", "pt-bw1", "%.2f")
  }
  END {
    goals("new", "railnet (this build)")
    if (base != "") goals("base", "railnet (" base ")")
    if (yield != "") goals("yield", "railnet (this build, driver yielding after an idle pass)")
    printf "\nanchors\n"
    split("pt-bw1 pt-bw2 pt-lat pt-rate", k, " ")
    split("ib_write_bw 1 MiB (MiB/s)|two ib_write_bw pairs (MiB/s, sum)|ib_write_lat 8 B typical (us)|ib_write_bw 4 KiB (msg/s)", lab, "|")
    for (i = 1; i <= 4; i++) {
      printf "%-36s", lab[i]
      for (r = 1; r <= rounds; r++) printf " %9s", v[r, k[i]] == "" ? "?" : v[r, k[i]]
      printf "\n"
    }
    printf "\nplugin (this build)\n"
    split("new-bw1 new-bw2 new-lat1 new-lat2 new-rate new-rate-send-us new-rate-recv-us new-bw1q4", k2, " ")
    for (i = 1; i <= 8; i++) {
      printf "%-36s", k2[i]
      for (r = 1; r <= rounds; r++) printf " %9s", v[r, k2[i]] == "" ? "?" : v[r, k2[i]]
      printf "\n"
    }
  }' "$OUT/results"
echo
echo "rxe counters moved (retransmits, sequence errors, RNR, duplicates), summed over the rounds:"
for f in "$OUT"/r*-*.ctr; do
  n=$(basename "$f" .ctr); n=${n#r*-}
  case $n in ib_write*) side=perftest ;; base-*) side=base ;; yield-*) side=yield ;; *) side=plugin ;; esac
  awk -v s="$side" -v n="$n" '{ print s, n, $2, $3 }' "$f"
done | awk '{ t[$1 " " $2 " " $3] += $4 } END { for (k in t) print "  " k, t[k] }' | sort
# the same, side by side: every counter, perftest's runs against the plugin's
for f in "$OUT"/r*-*.ctr; do
  n=$(basename "$f" .ctr); n=${n#r*-}
  case $n in ib_write*) side=perftest ;; base-*) side=base ;; yield-*) side=yield ;; *) side=plugin ;; esac
  awk -v s="$side" '{ print s, $2, $3 }' "$f"
done | awk -v base="$BASE" -v yield="$YIELD" '
  { t[$1, $2] += $3; c[$2] = 1 }
  END {
    printf "\n%-24s %9s %9s%s%s\n", "counter (all runs)", "perftest", "plugin", base != "" ? "      base" : "",
      yield != "" ? "     yield" : ""
    for (k in c) printf "%-24s %9d %9d%s%s\n", k, t["perftest", k], t["plugin", k],
      base != "" ? sprintf(" %9d", t["base", k]) : "", yield != "" ? sprintf(" %9d", t["yield", k]) : ""
  }' | { IFS= read -r blank; IFS= read -r head; echo "$head"; sort; }
grep -l '^# .*: exit' "$OUT"/r*.log 2>/dev/null | sed 's/^/failed run: /'
exit $rc
