#!/bin/sh
# TAP: the verbs transport on real verbs.  Builds (or reuses) the Soft-RoCE
# VM assets in $RXEVM_DIR, boots the VM with a timeout, makes rxe0..rxe3 on
# two veth pairs and runs scripts/softroce/ib-suite.sh inside: the
# conformance suite with 1, 2 and 4 QPs and without inline sends, a 2-rail
# virtual device, the fault suite, the rogue peer (tests/ib/rogue.c) and
# the matching-rule program (tests/matching/).  Skips only when qemu is
# missing and cannot be installed.
cd "$(dirname "$0")/../.." || exit 1
B=${RN_BUILD:-build}
S=scripts/softroce
export RXEVM_DIR=${RXEVM_DIR:-/tmp/rxevm}
NAMES="conformance-1qp conformance-4qp conformance-v8-2qp verify-1qp verify-noinline verify-2rail-2qp fault conformance-noinline rogue matching stripe-4to1 stripe-2to1 stripe-degrade failover-1of2 failover-2of2 failover-standby pair-crossed pair-recv1 pair-send1"
NT=$(echo $NAMES | wc -w)
OUT=$(mktemp -d /tmp/rn-softroce.XXXXXX) || { echo "1..0 # SKIP no temp dir"; exit 0; }
trap 'rm -rf "$OUT"' EXIT

if ! sh $S/setup.sh >"$OUT/setup.log" 2>&1; then
  if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
    echo "1..0 # SKIP qemu-system-x86_64 missing and not installable: $(tail -1 "$OUT/setup.log")"
    exit 0
  fi
  echo "1..1"
  echo "not ok 1 - Soft-RoCE VM setup failed (RXEVM_DIR=$RXEVM_DIR)"
  tail -15 "$OUT/setup.log" | sed 's/^/# /'
  exit 1
fi
for f in "$B/libnccl-net-railnet.so" "$B/tests/conformance-test" "$B/tests/fault-test" "$B/tests/bench/ib_bench" \
  "$B/tests/rogue-test" "$B/tests/matching-test" "$B/tests/multirail-xfer"; do
  [ -e "$f" ] || { echo "1..1"; echo "not ok 1 - $f not built (run make first)"; exit 1; }
done

echo "1..$NT"
# the VM starts its script with an empty environment: RN_VM_ONLY goes in
# through the shared folder
[ -n "$RN_VM_ONLY" ] && printf '%s\n' "$RN_VM_ONLY" >"$OUT/vm-only"
t0=$(date +%s)
# the VM's bound is a hang guard: the checks inside have their own (240 s
# each), this one only catches a VM that never ends
RXEVM_OUT="$OUT" RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-$((900 * ${RN_TIMEOUT_SCALE:-1}))} \
  sh $S/run-vm.sh $S/rxe-test.sh 4 sh $S/ib-suite.sh "$B" "$OUT" >"$OUT/console.log" 2>&1
rc=$?
t=$(( $(date +%s) - t0 ))
# make coverage: add the VM's counters (written under $OUT/gcov) to the build's
if [ -d "$OUT/gcov/${B#"$PWD"/}" ] && command -v gcov-tool >/dev/null 2>&1; then
  gcov-tool merge -o "$B" "$OUT/gcov/${B#"$PWD"/}" "$B" >"$OUT/gcov-merge.log" 2>&1 ||
    echo "# merging the VM's coverage counters failed: $(tail -1 "$OUT/gcov-merge.log")"
fi
n=0
for name in $NAMES; do
  n=$((n + 1))
  line=$(grep -E "^(not )?ok $name " "$OUT/results" 2>/dev/null | head -1)
  if [ -z "$line" ] && [ -n "$RN_VM_ONLY" ] && ! echo "$name" | grep -Eq "$RN_VM_ONLY"; then
    echo "ok $n - # SKIP $name: not picked by RN_VM_ONLY"
    continue
  fi
  if [ -z "$line" ]; then
    echo "not ok $n - $name did not run (VM exit status $rc after $t s)"
    continue
  fi
  case $line in
    ok*) echo "ok $n - verbs $name ${line#ok $name }" ;;
    *) echo "not ok $n - verbs $name ${line#not ok $name }"
       # the failure's details and the log's failing lines, on stdout as TAP
       # comments and on stderr, which prove shows without -v
       { awk -v n="$name" '$0 ~ "^(not )?ok "n" " {p=1; next} /^(not )?ok / {p=0} p' "$OUT/results"
         [ -f "$OUT/$name.log" ] && grep -E -A3 '^not ok' "$OUT/$name.log" | head -40 | sed 's/^/#   /'
       } | tee /dev/stderr ;;
  esac
done
echo "# Soft-RoCE VM: $t s, exit status $rc"
if [ $rc -ne 0 ]; then tail -20 "$OUT/console.log" | sed 's/^/# console: /'; fi
