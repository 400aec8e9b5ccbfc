#!/bin/sh
# Builds the railnet Debian package from a staged `make install`:
#   scripts/deb/build-deb.sh [BUILD [OUTDIR]]   (make deb runs it)
# BUILD is the build directory whose plugin and CLI are packaged (default
# build); the .deb lands in OUTDIR (default BUILD/deb) and its path is the
# last line printed.
#
# Contents: /usr/lib/<multiarch>/libnccl-net-railnet.so,
# /usr/bin/railnet-topo, its man page, /usr/share/doc/railnet/README.md.
# No libnccl-net.so link: NCCL uses railnet when a job sets
# NCCL_NET_PLUGIN=railnet, never behind its back.
#
# Depends are what the binaries link (dpkg-shlibdeps when dpkg-dev is
# installed; otherwise the same list stated by hand: libc6, libhwloc15,
# libexpat1).  libibverbs1 is a Recommends: the plugin dlopens it and uses
# TCP without it.
set -eu
cd "$(dirname "$0")/../.."
B=${1:-build}
OUT=${2:-$B/deb}
VER=$(sed -n 's/^#define RAILNET_VERSION "\(.*\)"$/\1/p' include/railnet/version.h)
[ -n "$VER" ] || { echo "build-deb.sh: no RAILNET_VERSION in include/railnet/version.h" >&2; exit 1; }
ARCH=$(dpkg --print-architecture)
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
[ -n "$MA" ] || { echo "build-deb.sh: cannot tell the multiarch directory" >&2; exit 1; }
for f in "$B/libnccl-net-railnet.so" "$B/railnet-topo"; do
  [ -e "$f" ] || { echo "build-deb.sh: $f not built (make first)" >&2; exit 1; }
done
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
ROOT=$T/root
# make install of what is built (a sub-make of make deb, or a test: do not
# inherit the caller's jobserver)
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory install \
  BUILD="$B" DESTDIR="$ROOT" PREFIX=/usr LIBDIR="/usr/lib/$MA" LINK_DEFAULT=0 >/dev/null
gzip -9n "$ROOT/usr/share/man/man1/railnet-topo.1"
install -d "$ROOT/usr/share/doc/railnet"
install -m 0644 README.md "$ROOT/usr/share/doc/railnet/README.md"

DEPENDS=
if command -v dpkg-shlibdeps >/dev/null 2>&1; then
  mkdir -p "$T/src/debian"
  printf 'Source: railnet\n\nPackage: railnet\nArchitecture: any\n' >"$T/src/debian/control"
  DEPENDS=$(cd "$T/src" && dpkg-shlibdeps -O -e"$ROOT/usr/lib/$MA/libnccl-net-railnet.so" \
    -e"$ROOT/usr/bin/railnet-topo" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
fi
[ -n "$DEPENDS" ] || DEPENDS="libc6, libhwloc15, libexpat1"
SIZE=$(du -sk "$ROOT" | cut -f1)
mkdir -p "$ROOT/DEBIAN"
cat >"$ROOT/DEBIAN/control" <<CONTROL
Package: railnet
Version: $VER
Architecture: $ARCH
Maintainer: ${DEB_MAINTAINER:-railnet developers <railnet@localhost>}
Installed-Size: $SIZE
Depends: $DEPENDS
Recommends: libibverbs1
Section: net
Priority: optional
Description: topology-aware NCCL network plugin (RDMA verbs and TCP)
 railnet is an NCCL net plugin (ncclNet v8 to v11) that sends each GPU's
 bytes through the NIC next to it: it plans GPU-NIC rails from the PCI
 topology, exposes one device per rail set, and moves data over RDMA verbs
 when an ACTIVE port exists and over TCP otherwise.  libibverbs is loaded
 at run time when present.
 .
 NCCL uses it when a job sets NCCL_NET_PLUGIN=railnet.  The package also
 ships railnet-topo, which prints the GPU-NIC paths and the rail plan.
CONTROL
mkdir -p "$OUT"
DEB=$OUT/railnet_${VER}_${ARCH}.deb
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null
echo "$DEB"
