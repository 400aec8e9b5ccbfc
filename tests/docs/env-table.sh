#!/bin/sh
# The README's environment table must match include/railnet/params.def.
cd "$(dirname "$0")/../.." || exit 1
echo 1..1
tmp=$(mktemp)
cp README.md "$tmp"
scripts/gen-env-table.sh --update "$tmp"
if cmp -s README.md "$tmp"; then
  echo "ok 1 - README environment table matches params.def"
else
  echo "not ok 1 - README environment table is stale: run scripts/gen-env-table.sh --update README.md"
  diff README.md "$tmp" | sed 's/^/# /'
fi
rm -f "$tmp"
