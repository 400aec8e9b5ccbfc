#!/bin/sh
# Soft-RoCE VM assets, idempotent and cached in $RXEVM_DIR (default
# /tmp/rxevm): packages (installed only when a tool is missing), Debian's
# kernel unpacked from its .deb (nothing installed in /boot), and a small
# busybox initramfs with the rxe modules and our init.  Re-run freely: it
# returns at once when the cached assets match this script and init.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
D=${RXEVM_DIR:-/tmp/rxevm}; mkdir -p "$D"; cd "$D"
if command -v flock >/dev/null 2>&1; then exec 9>"$D/.lock"; flock -w 900 9; fi
SUM=$(cat "$HERE/setup.sh" "$HERE/init" | md5sum | cut -c1-32)
have_tools() {
  for t in qemu-system-x86_64 busybox depmod modprobe ibv_devinfo ib_write_bw ib_write_lat rdma; do
    command -v $t >/dev/null 2>&1 || { echo "rxevm: $t missing"; return 1; }
  done
  [ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] ||
    ls /usr/lib/*/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 || { echo "rxevm: rxe provider missing"; return 1; }
}
if have_tools && [ -s vmlinuz ] && [ -s initramfs.cpio.gz ] && [ "$(cat .stamp 2>/dev/null)" = "$SUM" ]; then
  echo "rxevm: assets cached in $D"; exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! have_tools; then
  command -v apt-get >/dev/null 2>&1 || { echo "rxevm: no apt-get to install the tools"; exit 2; }
  [ "$(id -u)" = 0 ] || {
    echo "rxevm: qemu-system-x86, busybox-static, rdma-core, perftest and the rest are missing; installing them needs root (README, step 2)"
    exit 2
  }
  timeout 300 apt-get update -qq
  timeout 600 apt-get install -y -qq --no-install-recommends qemu-system-x86 busybox-static kmod \
    ibverbs-utils ibverbs-providers rdma-core perftest libibverbs-dev iproute2 >/dev/null
  have_tools
fi
# Kernel: the package linux-image-amd64 points at, unpacked (no postinst, no /boot changes).
if [ ! -s vmlinuz ] || [ ! -d kroot/lib/modules ]; then
  KPKG=$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1)
  [ -n "$KPKG" ] || { echo "rxevm: cannot resolve linux-image-amd64"; exit 2; }
  rm -rf kroot kdeb; mkdir kdeb; chown _apt kdeb 2>/dev/null || true
  (cd kdeb && timeout 600 apt-get download -qq "$KPKG")
  dpkg-deb -x kdeb/*.deb kroot
  rm -rf kdeb
fi
KVER=$(ls kroot/lib/modules | head -1); depmod -b "$D/kroot" "$KVER"
ln -sf "kroot/boot/vmlinuz-$KVER" vmlinuz
# initramfs: busybox + the needed modules in load order + our init.
rm -rf ird; mkdir -p ird/bin ird/lib/modules ird/proc ird/sys ird/dev ird/host
cp "$(command -v busybox)" ird/bin/busybox; cp "$HERE/init" ird/init; chmod +x ird/init
# sch_prio, cls_u32, act_gact: tc filters that drop one rail's RoCE packets
# (ib-suite.sh's standby check) while its link, and the bootstrap socket
# on it, stay up.  sch_tbf, sch_htb: rails shaped to unequal rates, and
# one slowed down while it carries traffic (the striping checks).
for m in virtio_pci 9pnet_virtio 9p overlay veth crc32_generic rdma_rxe ib_uverbs rdma_ucm \
  sch_prio cls_u32 act_gact sch_tbf sch_htb; do
  modprobe -d "$D/kroot" -S "$KVER" --show-depends $m
done | awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' | while read -r ko; do
  cp "$ko" ird/lib/modules/; basename "$ko"; done > ird/modules.order
(cd ird && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) > initramfs.cpio.gz.new
mv initramfs.cpio.gz.new initramfs.cpio.gz
echo "$SUM" > .stamp
echo "rxevm: kernel $KVER, initramfs $(du -h initramfs.cpio.gz | cut -f1) in $D"
