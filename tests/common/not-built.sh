#!/bin/sh
# TAP: a test script whose program is missing fails; it never reports a
# skip (make test builds every program it runs, so a missing one is a
# broken build, not a missing capability).  Each script runs against an
# empty build directory.
cd "$(dirname "$0")/../.." || exit 1
SCRIPTS="tests/topo/plan_quality.sh tests/topo/cli_exit_codes.sh tests/bench/kvbench-smoke.sh"
echo "1..$(echo $SCRIPTS | wc -w)"
E=$(mktemp -d "${TMPDIR:-/tmp}/rn-not-built.XXXXXX") || { echo "not ok 1 - mktemp failed"; exit 1; }
trap 'rm -rf "$E"' EXIT
n=0 fail=0
for s in $SCRIPTS; do
  n=$((n + 1))
  out=$(RN_BUILD="$E" sh "$s" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && printf '%s\n' "$out" | grep -q '^not ok' &&
    ! printf '%s\n' "$out" | grep -q 'SKIP'; then
    echo "ok $n - $s fails without its program (exit $rc)"
  else
    echo "not ok $n - $s fails without its program (exit $rc)"
    printf '%s\n' "$out" | head -5 | sed 's/^/#   /'
    fail=1
  fi
done
exit $fail
