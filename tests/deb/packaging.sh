#!/bin/sh
# TAP: what a cluster admin installs.  The Debian package (scripts/deb/
# build-deb.sh) has the version of include/railnet/version.h, depends on
# the libraries the binaries link and only recommends libibverbs1 (which
# the plugin dlopens); unpacked into a clean root, its railnet-topo runs
# and its plugin, loaded from that root, carries verified data.  make
# install puts lib, bin and man page in place and links libnccl-net.so
# only with LINK_DEFAULT=1; make uninstall removes what it installed and
# leaves a libnccl-net.so that is not railnet's alone.
cd "$(dirname "$0")/../.." || exit 1
B=${RN_BUILD:-build}
for t in dpkg-deb dpkg readelf; do
  command -v $t >/dev/null 2>&1 || { echo "1..0 # SKIP $t not installed"; exit 0; }
done
T=$(mktemp -d "${TMPDIR:-/tmp}/rn-deb.XXXXXX") || { echo "1..0 # SKIP no temp dir"; exit 0; }
trap 'rm -rf "$T"' EXIT
unset MAKEFLAGS MFLAGS MAKELEVEL
VER=$(sed -n 's/^#define RAILNET_VERSION "\(.*\)"$/\1/p' include/railnet/version.h)
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
echo "1..9"
n=0 fail=0
ok() { # STATUS DESCRIPTION [DETAIL-FILE]
  n=$((n + 1))
  if [ "$1" = 0 ]; then echo "ok $n - $2"; else
    echo "not ok $n - $2"; fail=1
    [ -n "${3:-}" ] && [ -f "$3" ] && tail -20 "$3" | sed 's/^/# /'
  fi
}

scripts/deb/build-deb.sh "$B" "$T/out" >"$T/build.log" 2>&1
DEB=$(tail -1 "$T/build.log")
[ -f "$DEB" ]; ok $? "scripts/deb/build-deb.sh builds a .deb from $B" "$T/build.log"

dpkg-deb -f "$DEB" Package Version Depends Recommends >"$T/control" 2>&1
dep=$(sed -n 's/^Depends: //p' "$T/control")
rec=$(sed -n 's/^Recommends: //p' "$T/control")
printf '%s\n' "# Depends: $dep" "# Recommends: $rec"
grep -qx "Version: $VER" "$T/control" && grep -qx "Package: railnet" "$T/control"
ok $? "package railnet, version $VER (RAILNET_VERSION)" "$T/control"
case ", $dep," in *", libhwloc15"[,\ ]*) h=0 ;; *) h=1 ;; esac
case ", $dep," in *", libexpat1"[,\ ]*) e=0 ;; *) e=1 ;; esac
case "$dep" in *libibverbs*) v=1 ;; *) v=0 ;; esac
case ", $rec," in *", libibverbs1"[,\ ]*) r=0 ;; *) r=1 ;; esac
[ $h = 0 ] && [ $e = 0 ] && [ $v = 0 ] && [ $r = 0 ]
ok $? "Depends has libhwloc15 and libexpat1, not libibverbs; Recommends libibverbs1"

ROOT=$T/root
mkdir -p "$ROOT" && dpkg -x "$DEB" "$ROOT"
SO=$ROOT/usr/lib/$MA/libnccl-net-railnet.so
files_ok=0
for f in "$SO" "$ROOT/usr/bin/railnet-topo" "$ROOT/usr/share/man/man1/railnet-topo.1.gz"; do
  [ -f "$f" ] || { echo "# missing: ${f#"$ROOT"}"; files_ok=1; }
done
[ -e "$ROOT/usr/lib/$MA/libnccl-net.so" ] && { echo "# the package ships libnccl-net.so"; files_ok=1; }
ok $files_ok "the package holds the plugin, railnet-topo and its man page, and no libnccl-net.so"

readelf -d "$SO" >"$T/dyn" 2>&1
! grep -q 'NEEDED.*libibverbs' "$T/dyn" && ! grep -qE 'RPATH|RUNPATH' "$T/dyn"
ok $? "the packaged plugin does not link libibverbs and carries no RPATH/RUNPATH" "$T/dyn"

out=$("$ROOT/usr/bin/railnet-topo" --version 2>&1)
[ "$out" = "railnet-topo $VER" ]; ok $? "railnet-topo from the clean root: --version prints $VER ($out)"

RN_PLUGIN=$SO RAILNET_TRANSPORT=socket "$B/tests/conformance-test" --api v11 --only "MiB messages" \
  >"$T/conf.log" 2>&1
st=$?
grep -q "^# plugin $SO" "$T/conf.log" && [ $st = 0 ] && [ "$(grep -c '^ok ' "$T/conf.log")" -ge 2 ]
ok $? "the plugin loaded from the clean root carries verified 1 MiB and 64 MiB messages" "$T/conf.log"

I=$T/inst
make -s --no-print-directory install BUILD="$B" DESTDIR="$I" PREFIX=/opt/railnet >"$T/inst.log" 2>&1 &&
  [ -f "$I/opt/railnet/lib/libnccl-net-railnet.so" ] && [ -x "$I/opt/railnet/bin/railnet-topo" ] &&
  [ -x "$I/opt/railnet/bin/railnet-kvbench" ] &&
  [ -f "$I/opt/railnet/share/man/man1/railnet-topo.1" ] && [ ! -e "$I/opt/railnet/lib/libnccl-net.so" ] &&
  make -s --no-print-directory uninstall BUILD="$B" DESTDIR="$I" PREFIX=/opt/railnet >>"$T/inst.log" 2>&1 &&
  [ -z "$(find "$I" ! -type d)" ]
ok $? "make install puts lib, both programs and man page, no libnccl-net.so; make uninstall removes them" "$T/inst.log"

I=$T/inst2
make -s --no-print-directory install BUILD="$B" DESTDIR="$I" PREFIX=/opt/railnet LINK_DEFAULT=1 \
  >"$T/inst2.log" 2>&1 &&
  [ "$(readlink "$I/opt/railnet/lib/libnccl-net.so")" = libnccl-net-railnet.so ] &&
  make -s --no-print-directory uninstall BUILD="$B" DESTDIR="$I" PREFIX=/opt/railnet >>"$T/inst2.log" 2>&1 &&
  [ ! -e "$I/opt/railnet/lib/libnccl-net.so" ] && [ ! -L "$I/opt/railnet/lib/libnccl-net.so" ] &&
  echo other >"$I/opt/railnet/lib/libnccl-net.so" &&
  make -s --no-print-directory uninstall BUILD="$B" DESTDIR="$I" PREFIX=/opt/railnet >>"$T/inst2.log" 2>&1 &&
  [ "$(cat "$I/opt/railnet/lib/libnccl-net.so")" = other ]
ok $? "LINK_DEFAULT=1 links libnccl-net.so; uninstall removes railnet's link and keeps another plugin's" "$T/inst2.log"
exit $fail
