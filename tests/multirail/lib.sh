# Shared by the multi-rail TAP scripts (tests/multirail/*.sh),
# sourced from the repository root once the script has set
#   BEDS     the railbed names it may bring up (all removed on exit)
#   OUT_TAG  the name of its temporary folder
#   XFER_ENV more K=V,... for both sides of every transfer (may be empty)
#   PLAN     its number of tests (lib.sh prints the plan)
# It skips (the whole script, before any test) without root, ip, tc,
# network namespaces, veth or tbf, and fails without the build.
B=${RN_BUILD:-build}
RB=scripts/railbed/railbed.sh
XFER=$B/tests/multirail-xfer

skip() {
  echo "1..0 # SKIP $*"
  exit 0
}
[ "$(id -u)" -eq 0 ] || skip "not root: network namespaces need it"
command -v ip >/dev/null 2>&1 || skip "no ip (iproute2)"
command -v tc >/dev/null 2>&1 || skip "no tc (iproute2)"
probe=rbprobe$$
if ! err=$(ip netns add $probe 2>&1); then
  skip "no network namespace support: $err"
fi
cap=''
err=$(ip -n $probe link add p0 type veth peer name p1 2>&1) ||
  cap="cannot add a veth pair in a network namespace (or enter one): $err"
[ -z "$cap" ] && { err=$(tc -n $probe qdisc add dev p0 root tbf rate 100mbit burst 128k \
  latency 20ms 2>&1) || cap="no tc tbf: $err"; }
ip netns del $probe
[ -z "$cap" ] || skip "$cap"
echo "1..$PLAN"
n=0
result() { # OK|NOTOK DESCRIPTION [DIRECTIVE]
  n=$((n + 1))
  if [ "$1" = OK ]; then echo "ok $n - $2${3:+ # $3}"; else echo "not ok $n - $2${3:+ # $3}"; fi
}
details() { sed 's/^/#   /' "$@"; }
# Every test from here on fails as not run, and the script ends.
not_run() { # WHY
  while [ $n -lt "$PLAN" ]; do result NOTOK "not run: $1"; done
  exit 1
}
for f in "$B/libnccl-net-railnet.so" "$XFER" "$B/railnet-topo"; do
  [ -e "$f" ] || not_run "$f not built (run make first)"
done

OUT=$(mktemp -d "/tmp/rn-$OUT_TAG.XXXXXX") || skip "no temp dir"
cleanup() {
  for bed in $BEDS; do "$RB" --name "$bed" clean; done
  rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
links() { ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | sort; }
links >"$OUT/links.before"


# The script's first test: testbed BED up with N rails of RATE Mbit/s and
# its topology in TOPO (more railbed topo-xml arguments after DESCRIPTION);
# without it no test can run.
bed_first() { # BED N RATE TOPO DESCRIPTION [topo-xml args...]
  bed=$1 nr=$2 rate=$3 topo=$4 desc=$5
  shift 5
  if "$RB" --name "$bed" up --rails "$nr" --rate "$rate" >"$OUT/up.log" 2>&1 &&
    "$RB" --name "$bed" topo-xml "$topo" "$@" 2>>"$OUT/up.log"; then
    result OK "$desc"
    return 0
  fi
  result NOTOK "railbed up failed"
  details "$OUT/up.log"
  not_run "no testbed"
}

# The plugin's counters: the last RAILNET_STATS line of EVENT from SIDE in
# FILE, one rail's FIELD ("bytes", "state", "failures", "share", ...).
stat_line() { # FILE SIDE EVENT
  grep "\"event\":\"$3\"" "$1" 2>/dev/null | grep "\"side\":\"$2\"" | tail -1
}
rail_field() { # LINE RAIL-NAME FIELD
  echo "$1" | grep -o "{\"rail\":[0-9]*,\"name\":\"$2\"[^}]*}" |
    sed -n "s/.*\"$3\":\"\{0,1\}\([^,\"}]*\).*/\1/p"
}
# awk's comparison of two decimal numbers: exits 0 when "A OP B" holds
holds() { awk "BEGIN { exit !($1) }"; }

# multirail-xfer on testbed BED with the fused device of its rails; the
# plugin's counters go to $OUT/LOG.stats
xfer() { # BED TOPO LOG NRAILS [args...]   ($XENV: more K=V,... for this one)
  bed=$1 topo=$2 log=$3 nr=$4
  shift 4
  RN_CONF_VERBOSE=1 "$XFER" --railbed "$bed" \
    --env "RAILNET_TRANSPORT=socket,RAILNET_SOCKET_IFNAME=veth,RAILNET_TOPO_FILE=$topo,RAILNET_STATS=$OUT/$log.stats,RAILNET_STATS_MS=250${XFER_ENV:+,$XFER_ENV}${XENV:+,$XENV}" \
    --expect-rails "$nr" "$@" >"$OUT/$log.log" 2>"$OUT/$log.err"
}
# Wait (bounded) until both ends of a rail report state UP after up-link:
# the kernel may report carrier a moment later, and a process that starts
# meanwhile would find a device without that rail.
link_up() { # BED RAIL
  t=0
  while [ $t -lt 50 ]; do
    if ip -n "$1-a" -o link show "veth$2" 2>/dev/null | grep -q 'state UP' &&
      ip -n "$1-b" -o link show "veth$2" 2>/dev/null | grep -q 'state UP'; then
      return 0
    fi
    sleep 0.1
    t=$((t + 1))
  done
  return 1
}
# multirail-xfer's verdict in $OUT/LOG.log: both sides ended with an error
both_error() { # LOG
  grep -q '^result status=error receiver=error.* sender=error' "$OUT/$1.log"
}
show() { # LOG
  grep -E '^(result|event|end|rails)' "$OUT/$1.log" | details
  grep -E 'WARN' "$OUT/$1.err" | tail -5 | cut -c1-300 | details
}
# The script's last test: clean every testbed in $BEDS, then no namespace
# of theirs may be left and no vethN may have appeared on the host (the
# rails are made inside the namespaces; other links come and go with other
# programs on a shared host, so only ours are looked for).
nothing_left_behind() {
  for bed in $BEDS; do "$RB" --name "$bed" clean; done
  pattern=$(echo $BEDS | tr ' ' '|')
  left=$(ip netns list | awk '{print $1}' | grep -E "^($pattern)-" | tr '\n' ' ')
  new=$(links | comm -13 "$OUT/links.before" - | grep -E '^veth[0-9]+$' | tr '\n' ' ')
  if [ -z "$left" ] && [ -z "$new" ]; then
    result OK "clean removed every testbed: no namespace left, no rail on the host"
  else
    result NOTOK "left behind: namespaces '$left', host links '$new'"
  fi
}
# One test: multirail-xfer exited RC, with every byte verified and no error
# on either side by its verdict in $OUT/LOG.log (else what it said).
verified() { # LOG RC DESCRIPTION
  if [ "$2" -eq 0 ] && grep -q '^result status=ok receiver=ok.* sender=ok' "$OUT/$1.log"; then
    result OK "$3: every byte verified, no error"
  else
    result NOTOK "$3: every byte verified, no error (exit $2)"
    show "$1"
  fi
}
