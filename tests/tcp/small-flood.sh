#!/bin/sh
# Regression: hundreds of thousands of small messages over 1 and 4 comms
# with receives posted ahead (the benchmark's traffic pattern), which once
# let a clear-to-send overtake an unconsumed one.  Checks completion and
# errors only, never timing.
cd "$(dirname "$0")/../.." || exit 1
build=${RN_BUILD:-build}
echo 1..1
out=$(RAILNET_TRANSPORT=socket RAILNET_SOCKET_IFNAME=lo RN_BUILD=$build \
  timeout $((600 * ${RN_TIMEOUT_SCALE:-1})) "$build/tests/railnet-bench" --no-ceiling --max 4096 --reps 1 2>&1)
rc=$?
if [ $rc -eq 0 ] && ! printf '%s\n' "$out" | grep -q "run failed"; then
  echo "ok 1 - small-message floods over 1 and 4 comms complete without errors"
else
  echo "not ok 1 - small-message flood failed (exit $rc)"
  printf '%s\n' "$out" | grep -E "failed|error|Error" | head -10 | sed 's/^/# /'
fi
