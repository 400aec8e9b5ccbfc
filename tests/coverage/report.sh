#!/bin/sh
# Line coverage per source file from a --coverage build's counters:
#   tests/coverage/report.sh BUILD DIR...
# e.g. tests/coverage/report.sh build-cov plugin topo.  One line per .c
# file: lines with code and the share executed; "no code" for a file of
# declarations only; "not built" for a file this
# configuration does not compile (the verbs stub when rdma-core headers
# exist, for example); 0% for a file built but never run.
B=${1:?usage: report.sh BUILD DIR...}
shift
command -v gcov >/dev/null 2>&1 || { echo "report.sh: gcov not found (it comes with gcc)" >&2; exit 2; }
T=$(mktemp -d) || exit 2
trap 'rm -rf "$T"' EXIT
printf '%-28s %7s %13s\n' "file" "lines" "executed"
tot=0 hit=0
for d in "$@"; do
  for f in "$d"/*.c; do
    if [ ! -e "$B/${f%.c}.gcno" ]; then
      printf '%-28s %7s %13s\n' "$f" "-" "not built"
      continue
    fi
    # gcov writes .gcov files into the current directory; keep them out
    out=$(cd "$T" && gcov -n -o "$OLDPWD/$B/$d" "$OLDPWD/$f" 2>/dev/null)
    line=$(printf '%s\n' "$out" | awk -v want="$f" '
      /^File / { gsub(/\047/, "", $2); cur = $2 }
      /^Lines executed:/ && (cur == want || cur ~ ("/" want "$")) {
        split($2, a, ":"); sub(/%/, "", a[2]); print a[2], $4; exit }')
    pct=${line% *} n=${line#* }
    if [ -z "$line" ]; then
      if printf '%s\n' "$out" | grep -q "No executable lines"; then
        printf '%-28s %7s %13s\n' "$f" "0" "no code"
      else
        printf '%-28s %7s %13s\n' "$f" "?" "no data"
      fi
      continue
    fi
    h=$(awk -v p="$pct" -v n="$n" 'BEGIN { printf "%d", p * n / 100 + 0.5 }')
    tot=$((tot + n)) hit=$((hit + h))
    printf '%-28s %7d %12.1f%%\n' "$f" "$n" "$pct"
  done
done
[ $tot -gt 0 ] && printf '%-28s %7d %12.1f%%\n' "total" "$tot" "$(awk -v h=$hit -v t=$tot 'BEGIN { print 100 * h / t }')"
exit 0
