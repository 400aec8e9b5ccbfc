#!/bin/sh
# Fuzzes the NCCL-XML reader for a few seconds (libFuzzer, clang) and
# replays every saved regression input.  Skips when clang has no libFuzzer.
# FUZZ_SECONDS overrides the run length (longer runs by hand).
B=${RN_BUILD:-build}
OUT=$B/tests/fuzz
BIN=$OUT/fuzz_ncclxml
SECS=${FUZZ_SECONDS:-15}
CC_FUZZ=${CLANG:-clang}
command -v "$CC_FUZZ" >/dev/null 2>&1 || { echo "1..0 # SKIP clang not found"; exit 0; }
mkdir -p "$OUT"
T=$(mktemp -d) || { echo "1..0 # SKIP no temp dir"; exit 0; }
trap 'rm -rf "$T"' EXIT
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n);\nint LLVMFuzzerTestOneInput(const char *d, unsigned long n){(void)d;(void)n;return 0;}\n' >"$T/probe.c"
"$CC_FUZZ" -fsanitize=fuzzer "$T/probe.c" -o "$T/probe" >/dev/null 2>&1 || { echo "1..0 # SKIP $CC_FUZZ lacks libFuzzer"; exit 0; }
SRCS="topo/model.c topo/load.c topo/xml.c topo/ncclxml.c topo/hwloc.c topo/hwloc_check.c topo/sysfs.c topo/smi.c topo/filter.c topo/settings.c topo/plan.c tests/fuzz/fuzz_ncclxml.c"
if [ ! -x "$BIN" ] || [ -n "$(find topo tests/fuzz include/railnet/topo.h -newer "$BIN" -name '*.[ch]' 2>/dev/null)" ]; then
  # shellcheck disable=SC2086
  "$CC_FUZZ" -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Iinclude -Itopo $(pkg-config --cflags hwloc expat 2>/dev/null) $SRCS -o "$BIN" \
    $(pkg-config --libs hwloc expat 2>/dev/null) >"$T/build.log" 2>&1 || { echo "1..1"; echo "not ok 1 - fuzz target builds"; sed 's/^/# /' "$T/build.log"; exit 1; }
fi
echo "1..3"
echo "ok 1 - fuzz target builds with clang -fsanitize=fuzzer,address,undefined"
fail=0
if ls tests/fuzz/regress/* >/dev/null 2>&1; then
  if "$BIN" -runs=0 tests/fuzz/regress/* >"$T/replay.log" 2>&1; then echo "ok 2 - regression inputs replay cleanly"
  else echo "not ok 2 - regression inputs replay cleanly"; tail -30 "$T/replay.log" | sed 's/^/# /'; fail=1; fi
else
  echo "ok 2 - # SKIP no regression inputs"
fi
mkdir -p "$T/corpus"
cp tests/fuzz/corpus/* tests/topo/fixtures/*.xml "$T/corpus/" 2>/dev/null
if "$BIN" -max_total_time="$SECS" -print_final_stats=1 -rss_limit_mb=1024 -max_len=16384 -artifact_prefix="$T/" \
     -dict=tests/fuzz/ncclxml.dict "$T/corpus" >"$T/fuzz.log" 2>&1; then
  echo "ok 3 - ${SECS}s of fuzzing found nothing ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$T/fuzz.log" | cut -d' ' -f2) runs)"
else
  echo "not ok 3 - ${SECS}s of fuzzing found nothing"; tail -40 "$T/fuzz.log" | sed 's/^/# /'
  for a in "$T"/crash-* "$T"/leak-* "$T"/timeout-*; do [ -f "$a" ] && cp "$a" "$OUT/" && echo "# saved $OUT/$(basename "$a")"; done
  fail=1
fi
exit $fail
