#!/bin/sh
# TAP: every hang guard a test script puts on a program (`timeout N`) is
# multiplied by RN_TIMEOUT_SCALE (x2 gcov, x3 ASan+UBSan, x10 valgrind or TSan:
# tests/common/test-env.sh), so a slower build never turns into a failure.
# The scripts' own bounds in C go through rn_bound_s()/rn_deadline().
cd "$(dirname "$0")/../.." || exit 1
echo "1..1"
bad=$(grep -nE '(^|[[:space:];(&|!])timeout +[0-9]' tests/*/*.sh | grep -v 'RN_TIMEOUT_SCALE')
if [ -z "$bad" ]; then
  echo "ok 1 - every 'timeout N' in tests/*/*.sh is scaled by RN_TIMEOUT_SCALE"
else
  echo "not ok 1 - every 'timeout N' in tests/*/*.sh is scaled by RN_TIMEOUT_SCALE"
  printf '%s\n' "$bad" | sed 's/^/#   unscaled: /'
  exit 1
fi
