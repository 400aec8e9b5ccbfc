#!/bin/sh
# The conformance suite, asked to test a transport that gives it no device,
# must fail (not ok, exit 1), never skip: by design the plugin answers a
# wrong RAILNET_TRANSPORT or an interface filter that matches nothing with
# zero devices, and a suite that turned that into "1..0 # SKIP" would pass
# without testing anything.
cd "$(dirname "$0")/../.." || exit 1
B=${RN_BUILD:-build}
CONF=$B/tests/conformance-test
echo "1..2"
n=0
fail=0
expect_fail() { # DESCRIPTION WANT_IN_OUTPUT ENV...
  desc=$1 want=$2
  shift 2
  n=$((n + 1))
  out=$(env "$@" "$CONF" --api v11 --only "properties" 2>&1)
  rc=$?
  if [ $rc -eq 1 ] && printf '%s\n' "$out" | grep -q '^not ok 1 ' &&
    ! printf '%s\n' "$out" | grep -q 'SKIP' && printf '%s\n' "$out" | grep -qF -- "$want"; then
    echo "ok $n - $desc: not ok and exit 1, no skip"
  else
    echo "not ok $n - $desc: not ok and exit 1, no skip (exit $rc)"
    fail=1
    printf '%s\n' "$out" | sed 's/^/# /'
  fi
}
expect_fail "RAILNET_TRANSPORT=bogus" "RAILNET_TRANSPORT=bogus" RAILNET_TRANSPORT=bogus
expect_fail "RAILNET_SOCKET_IFNAME matching no interface" "0 devices" \
  RAILNET_TRANSPORT=socket RAILNET_SOCKET_IFNAME==rn-no-such-if0
exit $fail
