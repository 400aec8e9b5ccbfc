#!/bin/sh
# Builds one libFuzzer target over the topo sources (clang, ASan+UBSan),
# replays its saved regression inputs, then fuzzes for a bounded time from
# the fixtures.  Usage: fuzz_common.sh TARGET (ncclxml, hwloc, smi, filter,
# wire).
# FUZZ_SECONDS sets the run length (default 10); FUZZ_RUNS=N runs N inputs
# instead (long runs by hand: FUZZ_RUNS=1000000).  An input counts as hung
# after 60 s, far above the milliseconds any input takes, so a loaded host
# never turns into a failure.  Skips when clang has no
# libFuzzer, so `make` never needs clang.
TARGET=$1
B=${RN_BUILD:-build}
OUT=$B/tests/fuzz
BIN=$OUT/fuzz_$TARGET
SECS=${FUZZ_SECONDS:-10}
CC_FUZZ=${CLANG:-clang}
command -v "$CC_FUZZ" >/dev/null 2>&1 || { echo "1..0 # SKIP clang not found"; exit 0; }
mkdir -p "$OUT/obj"
T=$(mktemp -d) || { echo "1..0 # SKIP no temp dir"; exit 0; }
trap 'rm -rf "$T"' EXIT
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const char *d, unsigned long n){(void)d;(void)n;return 0;}\n' >"$T/probe.c"
"$CC_FUZZ" -fsanitize=fuzzer "$T/probe.c" -o "$T/probe" >/dev/null 2>&1 || { echo "1..0 # SKIP $CC_FUZZ lacks libFuzzer"; exit 0; }
FLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -Iinclude -Itopo $(pkg-config --cflags hwloc expat 2>/dev/null)"
LIBS=$(pkg-config --libs hwloc expat 2>/dev/null)
STAMP=$OUT/obj/.stamp
# The topo objects, shared by every target, rebuilt when a source changed.
if [ ! -f "$STAMP" ] || [ -n "$(find topo include/railnet -newer "$STAMP" -type f 2>/dev/null)" ]; then
  for src in topo/*.c; do
    [ "$src" = topo/cli.c ] && continue
    # shellcheck disable=SC2086
    "$CC_FUZZ" $FLAGS -fsanitize=fuzzer-no-link -c "$src" -o "$OUT/obj/$(basename "$src" .c).o" >"$T/build.log" 2>&1 ||
      { echo "1..1"; echo "not ok 1 - topo sources build for fuzzing"; sed 's/^/# /' "$T/build.log"; exit 1; }
  done
  touch "$STAMP"
fi
OBJS="$OUT/obj/*.o"
# The wire target links the plugin itself: the core and the TCP transport
# (plugin/*.c, plugin/tcp/*.c), with the verbs transport's stub and the
# pieces of it that need no verbs headers (as a build without rdma-core).
if [ "$TARGET" = wire ]; then
  PSTAMP=$OUT/obj-plugin/.stamp
  mkdir -p "$OUT/obj-plugin"
  if [ ! -f "$PSTAMP" ] || [ -n "$(find plugin include -newer "$PSTAMP" -type f 2>/dev/null)" ]; then
    for src in plugin/*.c plugin/tcp/*.c plugin/ib/mr_cache.c plugin/ib/stripe.c plugin/ib/stub.c; do
      case $src in plugin/tcp/*) tr=tcp ;; plugin/ib/*) tr=ib ;; *) tr= ;; esac
      # shellcheck disable=SC2086
      "$CC_FUZZ" $FLAGS -Wall -Wextra ${tr:+-DRN_LOG_TRANSPORT=\"$tr\"} -fsanitize=fuzzer-no-link \
        -c "$src" -o "$OUT/obj-plugin/$(echo "$src" | tr / _ | sed 's/\.c$//').o" >"$T/build.log" 2>&1 ||
        { echo "1..1"; echo "not ok 1 - plugin sources build for fuzzing ($src)"; sed 's/^/# /' "$T/build.log"; exit 1; }
    done
    touch "$PSTAMP"
  fi
  OBJS="$OBJS $OUT/obj-plugin/*.o"
  LIBS="$LIBS -ldl -lpthread"
  [ "$PSTAMP" -nt "$STAMP" ] && STAMP=$PSTAMP
fi
if [ ! -x "$BIN" ] || [ "$STAMP" -nt "$BIN" ] || [ "tests/fuzz/fuzz_$TARGET.c" -nt "$BIN" ]; then
  # shellcheck disable=SC2086
  "$CC_FUZZ" $FLAGS -fsanitize=fuzzer "tests/fuzz/fuzz_$TARGET.c" $OBJS -o "$BIN" $LIBS >"$T/build.log" 2>&1 ||
    { echo "1..1"; echo "not ok 1 - fuzz target $TARGET builds"; sed 's/^/# /' "$T/build.log"; exit 1; }
fi
# libhwloc's own rejection paths leak (tests/fuzz/lsan-hwloc.supp).
if [ "$TARGET" = hwloc ]; then
  LSAN_OPTIONS="suppressions=$(pwd)/tests/fuzz/lsan-hwloc.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
  export LSAN_OPTIONS
fi
# The wire target runs in a network namespace of its own with a second
# interface (tests/fuzz/wire_netns.sh), so its inputs for a device of two
# rails get one; where that namespace cannot be made, they run on one rail
# and the last test says why it skipped.
RUN=
PLAN=3
if [ "$TARGET" = wire ]; then
  PLAN=4
  if why=$(sh tests/fuzz/wire_netns.sh true 2>&1); then
    RUN="sh tests/fuzz/wire_netns.sh"
  else
    why=$(echo "$why" | tail -1)
  fi
fi
echo "1..$PLAN"
echo "ok 1 - fuzz target $TARGET builds with $CC_FUZZ -fsanitize=fuzzer,address,undefined"
fail=0
if ls "tests/fuzz/regress/$TARGET"/* >/dev/null 2>&1; then
  if $RUN "$BIN" -runs=0 "tests/fuzz/regress/$TARGET"/* >"$T/replay.log" 2>&1; then
    echo "ok 2 - $(ls "tests/fuzz/regress/$TARGET" | wc -l) regression input(s) replay cleanly"
  else
    echo "not ok 2 - regression inputs replay cleanly"; tail -30 "$T/replay.log" | sed 's/^/# /'; fail=1
  fi
else
  echo "ok 2 - # SKIP no regression inputs"
fi
# Seeds: our corpus and fixtures of the target's format (vendor files too,
# when present; they are read, never copied into the tree).
mkdir -p "$T/corpus"
cp "tests/fuzz/corpus/$TARGET"/* "$T/corpus/" 2>/dev/null
SHARED=${RAILNET_TOPOLOGIES_DIR:-../shared/topologies}
case $TARGET in
  ncclxml) cp tests/topo/fixtures/*.xml "$T/corpus/" 2>/dev/null; grep -l '<system' "$T"/corpus/* >/dev/null 2>&1 ;;
  hwloc) cp tests/topo/fixtures/hwloc-*.xml "$T/corpus/" 2>/dev/null ;;
  smi) cp tests/topo/fixtures/*.txt "$T/corpus/" 2>/dev/null; cp "$SHARED"/*.txt "$T/corpus/" 2>/dev/null ;;
esac
DICT=tests/fuzz/$TARGET.dict
LEN=16384
[ "$TARGET" = hwloc ] && LEN=32768
[ "$TARGET" = filter ] && LEN=512
if [ -n "${FUZZ_RUNS:-}" ]; then LIMIT="-runs=$FUZZ_RUNS"; WHAT="$FUZZ_RUNS runs"; else LIMIT="-max_total_time=$SECS"; WHAT="${SECS}s"; fi
if $RUN "$BIN" $LIMIT -print_final_stats=1 -rss_limit_mb=2048 -timeout=60 -max_len=$LEN \
     -artifact_prefix="$T/" -dict="$DICT" "$T/corpus" >"$T/fuzz.log" 2>&1; then
  echo "ok 3 - $WHAT of fuzzing $TARGET found nothing ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$T/fuzz.log" | cut -d' ' -f2) runs)"
else
  echo "not ok 3 - $WHAT of fuzzing $TARGET found nothing"; tail -40 "$T/fuzz.log" | sed 's/^/# /'
  for a in "$T"/crash-* "$T"/leak-* "$T"/timeout-* "$T"/oom-*; do [ -f "$a" ] && cp "$a" "$OUT/" && echo "# saved $OUT/$(basename "$a")"; done
  fail=1
fi
if [ "$PLAN" = 4 ]; then
  if [ -n "$RUN" ]; then
    echo "ok 4 - the inputs for two rails ran on a device of two rails (lo and a veth, in a network namespace of their own)"
  else
    echo "ok 4 - # SKIP the inputs for two rails ran on one rail: $why"
  fi
fi
exit $fail
