#!/bin/sh
# The packages the README tells a newcomer to install and the ones CI
# installs (.ci/run) are the same list, installed the same way: the suite
# is tested on what a newcomer gets.
cd "$(dirname "$0")/../.." || exit 1
echo 1..3
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
# every "apt-get install" command, continuation lines joined
cmds() {
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$1" | grep -E '^[[:space:]]*apt-get install' |
    sed 's/>.*//'
}
pkgs() { cmds "$1" | tr ' ' '\n' | grep -vE '^(apt-get|install|-.*|)$' | sort -u; }
cmds README.md >"$T/readme.cmds"
cmds .ci/run >"$T/ci.cmds"
pkgs README.md >"$T/readme"
pkgs .ci/run >"$T/ci"
if [ -s "$T/readme" ] && cmp -s "$T/readme" "$T/ci"; then
  echo "ok 1 - README and .ci/run install the same $(wc -l <"$T/readme") packages"
else
  echo "not ok 1 - README and .ci/run install the same packages"
  diff "$T/readme" "$T/ci" | sed 's/^/# /'
fi
r=$(grep -c -- '--no-install-recommends' "$T/readme.cmds")
c=$(grep -c -- '--no-install-recommends' "$T/ci.cmds")
if [ "$r" = 0 ] && [ "$c" = 0 ]; then
  echo "ok 2 - both install recommended packages (apt-get's default)"
elif [ "$r" -gt 0 ] && [ "$c" -gt 0 ]; then
  echo "ok 2 - both leave recommended packages out"
else
  echo "not ok 2 - README and .ci/run differ on --no-install-recommends ($r vs $c commands)"
fi
# The README says CI fails when a shared vendor topology is missing: CI
# must export RAILNET_TOPOLOGIES_REQUIRED=1 before it runs the suite.
req=$(grep -nE '^[[:space:]]*export[[:space:]]+RAILNET_TOPOLOGIES_REQUIRED=1[[:space:]]*$' .ci/run | head -1 | cut -d: -f1)
chk=$(grep -nE '^[[:space:]]*make[[:space:]]+(check|test)' .ci/run | head -1 | cut -d: -f1)
if grep -q 'RAILNET_TOPOLOGIES_REQUIRED=1. (CI)' README.md && [ -n "$req" ] && [ -n "$chk" ] &&
  [ "$req" -lt "$chk" ]; then
  echo "ok 3 - .ci/run exports RAILNET_TOPOLOGIES_REQUIRED=1 before the suite, as the README says"
else
  echo "not ok 3 - .ci/run exports RAILNET_TOPOLOGIES_REQUIRED=1 before the suite, as the README says"
fi
