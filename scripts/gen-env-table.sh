#!/bin/sh
# Print the README's environment-variable table from include/railnet/params.def,
# or with --update README.md, rewrite the table between the env-table markers.
set -eu
here=$(dirname "$0")
def=$here/../include/railnet/params.def
table() {
  echo '| Variable | Default | Range / fallback | Meaning |'
  echo '|---|---|---|---|'
  sed -n 's/^RN_PARAM_INT([a-z_0-9]*, *"\([A-Z_0-9]*\)", *\([-0-9]*\), *\([-0-9]*\), *\([-0-9]*\), *"\(.*\)")$/| `RAILNET_\1` | \2 | \3 … \4 | \5 |/p;
          s/^RN_PARAM_STR([a-z_0-9]*, *"\([A-Z_0-9]*\)", *"\([^"]*\)", *"\([^"]*\)", *"\(.*\)")$/| `RAILNET_\1` | `\2` | \3 | \4 |/p' "$def" |
    sed 's/| `` |/| (unset) |/; s/|  |/| — |/'
}
if [ "${1:-}" = --update ]; then
  readme=$2
  tmp=$(mktemp)
  table >"$tmp.t"
  awk -v t="$tmp.t" '
    /<!-- env-table:begin -->/ { print; while ((getline l < t) > 0) print l; skip = 1; next }
    /<!-- env-table:end -->/ { skip = 0 }
    !skip { print }' "$readme" >"$tmp"
  mv "$tmp" "$readme"
  rm -f "$tmp.t"
else
  table
fi
