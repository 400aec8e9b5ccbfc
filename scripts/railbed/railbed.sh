#!/bin/sh
# railbed: a multi-rail testbed on one host.  Two network namespaces, side
# a and side b, joined by N veth pairs ("rails"), each rail shaped with
# tc tbf in both directions.  Rates change while traffic runs, links go
# down and up, a rail can be black-holed (every packet silently dropped,
# links still up: a pulled cable neither kernel notices), and topo-xml
# writes an NCCL topology that places one GPU and the N rail NICs behind
# one PCIe switch, so railnet's planner fuses the rails into one device.
#
# What it makes, and nothing else: namespaces NAME-a and NAME-b; in both,
# lo up and veth0..veth<N-1> (created directly inside the namespaces, so
# the host's own interfaces are never touched); rail i has 198.18.i.1/24
# on side a and 198.18.i.2/24 on side b (198.18.0.0/15, benchmark space);
# IPv6 off inside them so the counters carry only our traffic.  The rail's
# configured rate lives in its link alias, so no state file exists:
# `clean` (deleting the namespaces) removes everything.
#
# Usage: railbed.sh [--name NAME] COMMAND ...   (or RAILBED_NAME=NAME)
#   up --rails N --rate R[,R...] [--delay MS]   create (NAME defaults to rb<pid>; printed)
#   run --rails N --rate R[,R...] [--delay MS] -- CMD [ARG...]
#                              create, run CMD with RAILBED_NAME set, remove
#                              everything when CMD ends or the run is killed
#   rate RAIL RATE             change a rail's rate now, both directions
#   down RAIL [a|b|both]       link down (default both ends)
#   up-link RAIL               both ends up again
#   blackhole RAIL [a|b|both]  drop every packet leaving that end (default both)
#   loss RAIL PCT [a|b|both]   drop PCT% of the packets arriving at that end, at
#                              random (default both: each way; needs nft)
#   restore RAIL               links up, no black hole, no loss, the rail's rate again
#   exec a|b CMD [ARG...]      run CMD inside side a or b
#   addr RAIL a|b              the rail's address on that side
#   counters [a|b]             per-rail tx_bytes/rx_bytes of each side
#   topo-xml FILE [--rails N] [--standby K]
#                              NCCL topology XML for railnet's planner; the
#                              last K rails' NICs sit behind another switch
#                              (the planner's standby for the device)
#   status                     links, addresses, qdiscs, counters
#   list                       testbeds on this host (namespaces NAME-a)
#   clean                      remove everything NAME made (idempotent)
# RATE: tc syntax (400mbit, 1gbit, 800kbit) or a bare number of Mbit/s.
# RAIL: 0-based index.  Needs root, iproute2's ip and tc, netns support.
set -u

RB_MAX_RAILS=16
prog=railbed

die() {
  echo "$prog: $*" >&2
  exit 1
}

usage() {
  sed -n '/^# Usage:/,/^# RAIL:/s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

need_tools() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, tc)"
  command -v ip >/dev/null 2>&1 || die "iproute2's ip is missing"
  command -v tc >/dev/null 2>&1 || die "iproute2's tc is missing"
}

check_name() {
  case $1 in
    '' | *[!A-Za-z0-9_.-]*) die "bad testbed name '$1' (letters, digits, _ . - only)" ;;
  esac
  [ ${#1} -le 40 ] || die "testbed name '$1' longer than 40 characters"
}

# The namespace of side a or b in $NS (no subshell: the commands a
# running transfer triggers should cost a few processes each).
nsof() {
  case $1 in
    a) NS=$NAME-a ;;
    b) NS=$NAME-b ;;
    *) die "bad side '$1' (a or b)" ;;
  esac
}

exists() { [ -e "/run/netns/$NAME-a" ] || [ -e "/run/netns/$NAME-b" ]; }

require_bed() {
  [ -n "$NAME" ] || die "which testbed? give --name NAME or set RAILBED_NAME"
  if [ ! -e "/run/netns/$NAME-a" ] || [ ! -e "/run/netns/$NAME-b" ]; then
    die "no testbed '$NAME' (namespaces $NAME-a, $NAME-b)"
  fi
}

nrails() {
  n=0
  while ip -n "$NAME-a" link show "veth$n" >/dev/null 2>&1; do n=$((n + 1)); done
  echo "$n"
}

# A missing rail makes the ip/tc command that follows fail and say so.
check_rail() {
  case $1 in '' | *[!0-9]*) die "bad rail '$1' (0-based index)" ;; esac
}

sides_of() {
  case ${1:-both} in
    a) echo a ;;
    b) echo b ;;
    both) echo "a b" ;;
    *) die "bad side '$1' (a, b or both)" ;;
  esac
}

# A rate in kbit/s, in $KBIT, from tc syntax or a bare Mbit/s number.
rate_kbit() {
  v=$1
  num=${v%%[!0-9.]*}
  unit=${v#"$num"}
  [ -n "$num" ] || die "bad rate '$1'"
  case $unit in
    '' | mbit | Mbit) mult=1000 ;;
    gbit | Gbit) mult=1000000 ;;
    kbit | Kbit) mult=1 ;;
    *) die "bad rate '$1' (kbit, mbit, gbit, or a number of Mbit/s)" ;;
  esac
  case $num in
    *.*) KBIT=$(awk -v n="$num" -v m="$mult" 'BEGIN { printf "%d", n * m }') ;;
    *) KBIT=$((num * mult)) ;;
  esac
  [ "$KBIT" -ge 8 ] || die "rate '$1' below 8 kbit/s"
}

# tbf for rate KBIT, in $TBF.  tbf counts whole frames (L2: the 14-byte
# Ethernet header plus IP and TCP headers), so TCP payload reaches at most
# 95.6% of the rate with 1500-byte frames (1448 of 1514 bytes).
# burst: at least 128 KiB, never below the largest GSO packet a veth hands
# tbf (64 KiB of payload is 45 frames, 68130 bytes as tbf counts them): a
# packet larger than the bucket can never leave, and one queued before a
# rate change would stall the rail for good.  At least 2 ms of the rate, so
# the watchdog timer's granularity cannot cap it.  Small against the
# intervals worth measuring (10 ms at 100 Mbit/s).
# latency 20 ms bounds the queue at rate * 20 ms + burst: enough for TCP to
# fill the rail with 1..8 streams (few drops), short enough that a rate
# change shows within tens of milliseconds.
tbf_args() {
  burst=$(($1 / 4)) # 2 ms of KBIT kbit/s, in bytes
  [ "$burst" -ge 131072 ] || burst=131072
  TBF="rate ${1}kbit burst $burst latency 20ms"
}

# State lives in link aliases, gone with the namespaces: side a's end of
# a rail holds "railbed base=KBIT delay=MS" (as created), side b's end
# "railbed rate=KBIT" (as configured now, restored after a black hole).
alias_get() { # RAIL a|b FIELD
  ip -n "$NAME-$2" -o link show "veth$1" | sed -n "s/.* alias railbed.* $3=\([^ ]*\).*/\1/p"
}

# Put the rail's tbf (and netem delay) on one end, replacing whatever
# qdisc is there (a black hole included).
shape_end() { # SIDE RAIL KBIT DELAY_MS
  nsof "$1"
  tbf_args "$3"
  # shellcheck disable=SC2086 # $TBF is a word list on purpose
  tc -n "$NS" qdisc replace dev "veth$2" root handle 1: tbf $TBF || return 1
  if [ "$4" != 0 ]; then
    tc -n "$NS" qdisc replace dev "veth$2" parent 1:1 handle 10: netem delay "${4}ms" || return 1
  fi
}

netem_available() {
  tc -n "$NAME-a" qdisc add dev lo root handle 1: netem delay 1ms 2>/dev/null || return 1
  tc -n "$NAME-a" qdisc del dev lo root 2>/dev/null
  return 0
}

# Kill what still runs inside our namespaces (only processes in them: a
# test's servers), then delete them; deleting a namespace destroys its
# veth ends, and with them the peers.
do_clean() {
  [ -n "$NAME" ] || return 0
  for s in a b; do
    nsof $s
    [ -e "/run/netns/$NS" ] || continue
    pids=$(ip netns pids "$NS" 2>/dev/null)
    # shellcheck disable=SC2086 # a list of pids
    [ -n "$pids" ] && kill $pids 2>/dev/null
  done
  for s in a b; do
    nsof $s
    [ -e "/run/netns/$NS" ] || continue
    i=0
    while [ -n "$(ip netns pids "$NS" 2>/dev/null)" ] && [ $i -lt 20 ]; do
      sleep 0.1
      i=$((i + 1))
    done
    pids=$(ip netns pids "$NS" 2>/dev/null)
    # shellcheck disable=SC2086 # a list of pids
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$NS" 2>/dev/null || [ ! -e "/run/netns/$NS" ] ||
      echo "$prog: could not delete namespace $NS" >&2
  done
  return 0
}

parse_bed_opts() { # sets RAILS RATES DELAY, and SHIFT: the words taken (up to "--")
  RAILS='' RATES='' DELAY=0 SHIFT=0
  while [ $# -gt 0 ]; do
    case $1 in
      --rails | --rate | --delay)
        [ $# -ge 2 ] || die "$1 needs a value"
        case $1 in
          --rails) RAILS=$2 ;;
          --rate) RATES=$2 ;;
          --delay) DELAY=$2 ;;
        esac
        shift 2
        SHIFT=$((SHIFT + 2))
        ;;
      --) SHIFT=$((SHIFT + 1)); break ;;
      *) die "unknown option '$1'" ;;
    esac
  done
  case $RAILS in '' | *[!0-9]*) die "--rails N is required (1..$RB_MAX_RAILS)" ;; esac
  if [ "$RAILS" -lt 1 ] || [ "$RAILS" -gt $RB_MAX_RAILS ]; then
    die "--rails must be 1..$RB_MAX_RAILS"
  fi
  [ -n "$RATES" ] || die "--rate R[,R...] is required"
  case $DELAY in '' | *[!0-9]*) die "--delay takes whole milliseconds" ;; esac
}

up_fail() {
  echo "$prog: up failed: $*" >&2
  do_clean
  exit 1
}

do_up() {
  need_tools
  [ -n "$NAME" ] || NAME=rb$$
  check_name "$NAME"
  exists && die "testbed '$NAME' exists already (railbed.sh --name $NAME clean)"
  # One rate per rail; a single rate applies to every rail.
  kbits='' i=0
  old_ifs=$IFS
  IFS=,
  set -f
  for r in $RATES; do
    rate_kbit "$r"
    kbits="$kbits $KBIT"
    i=$((i + 1))
  done
  set +f
  IFS=$old_ifs
  if [ "$i" -eq 1 ] && [ "$RAILS" -gt 1 ]; then
    k=$KBIT kbits='' i=0
    while [ $i -lt "$RAILS" ]; do kbits="$kbits $k" i=$((i + 1)); done
  fi
  [ "$i" -eq "$RAILS" ] || die "$RAILS rails but $i rates ('$RATES')"

  ip netns add "$NAME-a" || die "cannot create namespace $NAME-a"
  trap 'do_clean; exit 1' INT TERM HUP
  ip netns add "$NAME-b" || up_fail "cannot create namespace $NAME-b"
  for s in a b; do
    nsof $s
    ip -n "$NS" link set lo up || up_fail "lo up in $NS"
    # shellcheck disable=SC2016 # expanded by the inner shell
    ip netns exec "$NS" sh -c 'for f in all default; do
      echo 1 > /proc/sys/net/ipv6/conf/$f/disable_ipv6; done' 2>/dev/null || true
  done
  if [ "$DELAY" != 0 ] && ! netem_available; then
    up_fail "--delay needs tc netem (sch_netem), which this kernel lacks"
  fi
  i=0
  for k in $kbits; do
    ip link add "veth$i" netns "$NAME-a" type veth peer name "veth$i" netns "$NAME-b" ||
      up_fail "cannot create rail $i"
    ip -n "$NAME-a" link set "veth$i" alias "railbed base=$k delay=$DELAY" ||
      up_fail "alias on rail $i"
    ip -n "$NAME-b" link set "veth$i" alias "railbed rate=$k" || up_fail "alias on rail $i"
    ip -n "$NAME-a" addr add "198.18.$i.1/24" dev "veth$i" || up_fail "address on rail $i"
    ip -n "$NAME-b" addr add "198.18.$i.2/24" dev "veth$i" || up_fail "address on rail $i"
    for s in a b; do
      shape_end $s "$i" "$k" "$DELAY" || up_fail "tbf on rail $i side $s"
      ip -n "$NS" link set "veth$i" up || up_fail "link up, rail $i side $s"
    done
    i=$((i + 1))
  done
  trap - INT TERM HUP
  echo "RAILBED_NAME=$NAME"
}

# Both directions at once, 3 processes: tc change keeps the qdisc (its
# queue is dropped: tbf rebuilds its inner fifo for the new limit, which
# TCP sees as a loss).  A black-holed rail only records the rate, which
# `restore` applies.
do_rate() {
  [ $# -eq 2 ] || usage
  check_rail "$1"
  rate_kbit "$2"
  tbf_args "$KBIT"
  for s in a b; do
    nsof $s
    # shellcheck disable=SC2086 # $TBF is a word list on purpose
    if ! tc -n "$NS" qdisc change dev "veth$1" root handle 1: tbf $TBF 2>/dev/null; then
      tc -n "$NS" qdisc show dev "veth$1" | grep -q '^qdisc blackhole' ||
        die "rate change on rail $1 side $s failed: $(tc -n "$NS" qdisc change dev "veth$1" root handle 1: tbf $TBF 2>&1)"
    fi
  done
  ip -n "$NAME-b" link set "veth$1" alias "railbed rate=$KBIT"
}

do_link() { # up|down RAIL [SIDES]
  st=$1
  shift
  [ $# -ge 1 ] || usage
  check_rail "$1"
  for s in $(sides_of "${2:-both}"); do
    nsof "$s"
    ip -n "$NS" link set "veth$1" "$st" || die "link $st, rail $1 side $s"
  done
}

# Random loss: PCT% of the packets arriving at that end over the rail are
# dropped (nftables' numgen: this kernel may have no netem), so "both"
# loses packets both ways.  The rate and the links are left alone;
# restore removes it.
loss_table() { echo "railbed_loss$1"; }
do_loss() { # RAIL PCT [SIDES]
  [ $# -ge 2 ] || usage
  check_rail "$1"
  case $2 in '' | *[!0-9]*) die "bad loss '$2' (a whole percentage, 1..100)" ;; esac
  [ "$2" -ge 1 ] && [ "$2" -le 100 ] || die "bad loss '$2' (a whole percentage, 1..100)"
  command -v nft >/dev/null 2>&1 || die "loss needs nft (nftables)"
  t=$(loss_table "$1")
  for s in $(sides_of "${3:-both}"); do
    nsof "$s"
    ip netns exec "$NS" nft delete table inet "$t" 2>/dev/null
    ip netns exec "$NS" nft -f - <<EOF || die "loss on rail $1 side $s (nft)"
table inet $t {
  chain in {
    type filter hook input priority 0; policy accept;
    iifname "veth$1" numgen random mod 100 < $2 drop
  }
}
EOF
  done
}

do_blackhole() {
  [ $# -ge 1 ] || usage
  check_rail "$1"
  for s in $(sides_of "${2:-both}"); do
    nsof "$s"
    tc -n "$NS" qdisc replace dev "veth$1" root blackhole || die "black hole on rail $1 side $s"
  done
}

do_restore() {
  [ $# -eq 1 ] || usage
  check_rail "$1"
  k=$(alias_get "$1" b rate)
  d=$(alias_get "$1" a delay)
  [ -n "$k" ] || die "rail $1 has no recorded rate"
  for s in a b; do
    nsof $s
    ip -n "$NS" link set "veth$1" up || die "link up, rail $1 side $s"
    shape_end $s "$1" "$k" "${d:-0}" || die "tbf on rail $1 side $s"
    ! command -v nft >/dev/null 2>&1 ||
      ip netns exec "$NS" nft delete table inet "$(loss_table "$1")" 2>/dev/null || true
  done
}

# Counters from outside the plugin: each end's netdev statistics.
do_counters() {
  n=$(nrails)
  for s in $(sides_of "${1:-both}"); do
    nsof "$s"
    # shellcheck disable=SC2016 # expanded by the inner shell
    ip netns exec "$NS" sh -c 'i=0; while [ $i -lt $1 ]; do
      d=/sys/class/net/veth$i/statistics
      echo "$2 veth$i tx_bytes=$(cat $d/tx_bytes) rx_bytes=$(cat $d/rx_bytes)"
      i=$((i + 1)); done' sh "$n" "$s"
  done
}

# One GPU and the rails' NICs behind one PCIe switch, so the planner gives
# the GPU every rail (PIX) and fuses them into one device, named
# veth0+veth1+...  railnet matches transport NICs to topology NICs by name
# (plugin/devices.c: rn_topo_find_nic), and the veths have no PCI function,
# so the <net name> is what counts; the bus ids are invented.  Each NIC's
# speed is its rail's rate at creation, in Mbit/s (1000 without a testbed).
# --standby K: the last K rails' NICs sit behind a second PCIe switch of
# the same CPU (PHB from the GPU), so the planner fuses only the first
# N-K and makes the nearest of the others the device's standby NIC.
nic_xml() { # RAIL BUSID SPEED
  printf '      <pci busid="0000:%02x:00.0" class="0x020000" vendor="0x1af4" device="0x1041" link_speed="32.0 GT/s PCIe" link_width="16">\n' "$2"
  echo "        <nic>"
  echo "          <net name=\"veth$1\" dev=\"$1\" speed=\"$3\" port=\"1\" latency=\"0\" guid=\"0x$(($1 + 1))\" maxconn=\"65536\" gdr=\"0\"/>"
  echo "        </nic>"
  echo '      </pci>'
}
rail_speed() { # RAIL: in $SP
  SP=1000
  if [ -n "$NAME" ] && [ -e "/run/netns/$NAME-a" ]; then
    SP=$(alias_get "$1" a base)
    SP=$((${SP:-1000000} / 1000))
  fi
}
do_topo_xml() {
  [ $# -ge 1 ] || usage
  file=$1
  shift
  n='' k=0
  while [ $# -gt 0 ]; do
    case $1 in
      --rails) n=${2:-} ;;
      --standby) k=${2:-} ;;
      *) die "topo-xml: unknown option '$1'" ;;
    esac
    [ $# -ge 2 ] || die "topo-xml: $1 needs a value"
    shift 2
  done
  if [ -z "$n" ]; then
    require_bed
    n=$(nrails)
  fi
  case $n in '' | *[!0-9]*) die "--rails N" ;; esac
  case $k in '' | *[!0-9]*) die "--standby K" ;; esac
  [ "$k" -lt "$n" ] || die "--standby $k leaves no rail of $n"
  fused=$((n - k))
  {
    more=''
    [ "$k" -gt 0 ] && more=", $k more behind another"
    echo "<!-- railbed: 1 GPU and $fused rail NICs behind one PCIe switch$more (scripts/railbed/railbed.sh) -->"
    echo '<system version="1">'
    echo '  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">'
    echo '    <pci busid="0000:40:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">'
    echo '      <pci busid="0000:41:00.0" class="0x030200" vendor="0x10de" device="0x2335" link_speed="32.0 GT/s PCIe" link_width="16">'
    echo '        <gpu dev="0" sm="90" rank="0" gdr="0"/>'
    echo '      </pci>'
    i=0
    while [ $i -lt "$fused" ]; do
      rail_speed $i
      nic_xml $i $((0x42 + i)) "$SP"
      i=$((i + 1))
    done
    echo '    </pci>'
    if [ "$k" -gt 0 ]; then
      echo '    <pci busid="0000:80:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">'
      while [ $i -lt "$n" ]; do
        rail_speed $i
        nic_xml $i $((0x81 + i - fused)) "$SP"
        i=$((i + 1))
      done
      echo '    </pci>'
    fi
    echo '  </cpu>'
    echo '</system>'
  } >"$file" || die "cannot write $file"
}

do_status() {
  require_bed
  n=$(nrails)
  echo "testbed $NAME: namespaces $NAME-a $NAME-b, $n rails"
  i=0
  while [ $i -lt "$n" ]; do
    echo "rail $i: rate $(alias_get "$i" b rate) kbit/s (created at $(alias_get "$i" a base), delay $(alias_get "$i" a delay) ms)"
    for s in a b; do
      nsof $s
      st=$(ip -n "$NS" -o link show "veth$i" | sed -n 's/.*<\([^>]*\)>.*state \([A-Z]*\).*/\2 <\1>/p')
      q=$(tc -n "$NS" qdisc show dev "veth$i" | head -1 | sed 's/refcnt [0-9]* //')
      a=$(ip -n "$NS" -o -4 addr show dev "veth$i" | awk '{print $4}')
      echo "  $s: ${a:-no address} $st; $q"
    done
    i=$((i + 1))
  done
  do_counters
}

do_list() {
  ip netns list 2>/dev/null | awk '{print $1}' | while read -r n; do
    case $n in *-a) ;; *) continue ;; esac
    ip -n "$n" -o link show veth0 2>/dev/null | grep -q 'alias railbed' && echo "${n%-a}"
  done
}

do_run() {
  parse_bed_opts "$@"
  shift "$SHIFT"
  [ $# -ge 1 ] || die "run: give a command after --"
  [ -n "$NAME" ] || NAME=rb$$
  do_up >/dev/null || exit 1
  # The command runs in the background so that a signal reaches the traps
  # at once (a shell runs traps only after a foreground command ends): a
  # killed run (INT, TERM, HUP) stops the command and removes the testbed.
  # After a SIGKILL, `railbed.sh list` and `clean` find and remove it.
  exec 3<&0
  RAILBED_NAME=$NAME "$@" 0<&3 3<&- &
  child=$!
  exec 3<&-
  trap 'kill -TERM $child 2>/dev/null; do_clean; exit 130' INT
  trap 'kill -TERM $child 2>/dev/null; do_clean; exit 143' TERM
  trap 'kill -TERM $child 2>/dev/null; do_clean; exit 129' HUP
  wait $child
  rc=$?
  trap - INT TERM HUP
  do_clean
  exit $rc
}

NAME=${RAILBED_NAME:-}
while [ $# -gt 0 ]; do
  case $1 in
    --name)
      [ $# -ge 2 ] || die "--name needs a value"
      NAME=$2
      shift 2
      check_name "$NAME"
      ;;
    -h | --help) usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
  up)
    parse_bed_opts "$@"
    [ "$SHIFT" -eq $# ] || die "up: unexpected arguments after the options"
    do_up
    ;;
  run) need_tools; do_run "$@" ;;
  rate) require_bed; do_rate "$@" ;;
  down)
    [ $# -ge 1 ] || die "down RAIL [a|b|both] takes a link down; 'clean' removes the testbed"
    require_bed
    do_link down "$@"
    ;;
  up-link) require_bed; do_link up "$@" ;;
  blackhole) require_bed; do_blackhole "$@" ;;
  loss) require_bed; do_loss "$@" ;;
  restore) require_bed; do_restore "$@" ;;
  exec)
    require_bed
    [ $# -ge 2 ] || usage
    nsof "$1"
    shift
    exec ip netns exec "$NS" "$@"
    ;;
  addr)
    require_bed
    [ $# -eq 2 ] || usage
    check_rail "$1"
    case $2 in a) echo "198.18.$1.1" ;; b) echo "198.18.$1.2" ;; *) die "bad side '$2'" ;; esac
    ;;
  counters) require_bed; do_counters "$@" ;;
  topo-xml) do_topo_xml "$@" ;;
  status) do_status ;;
  list) do_list ;;
  clean | destroy)
    [ -n "$NAME" ] || die "which testbed? give --name NAME or set RAILBED_NAME"
    do_clean
    ;;
  *) die "unknown command '$cmd' (--help)" ;;
esac
