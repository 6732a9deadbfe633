#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Build a minimal Debian 12 guest with systemd as PID 1 for
# tests/functional/test-systemd-guest.sh, cache it outside the clone and
# print its directory.
#
# Usage: scripts/guest/build-systemd-image.sh [--force]
#   stdout: the image directory, holding
#     rootfs.img     raw ext4 root file system (debootstrap --variant=minbase
#                    plus systemd and the package's run-time dependencies),
#                    made with mkfs.ext4 -d: nothing is ever mounted
#     initramfs.img  busybox /init that loads virtio-blk and ext4 from the
#                    test kernel's package, mounts /dev/vda and hands over to
#                    /sbin/init (systemd)
#     vmlinux        the functional tests' kernel (scripts/guest/build-assets.sh)
#     info           what went in, the build time and the sizes
#   stderr: progress log
# Env:
#   VHOST_BLK_CACHE          cache root (default /var/cache/vhost-blk); images go
#                            to $VHOST_BLK_CACHE/systemd-guest/<key>
#   VHOST_BLK_DEBIAN_MIRROR  Debian mirror (default: the first bookworm "deb"
#                            source in /etc/apt/sources.list{,.d})
#   VHOST_BLK_GUEST_ASSETS   the functional-test assets (default: built/located
#                            by build-assets.sh), for the kernel
#
# The key is a hash of the package list, the mirror, this script and the
# kernel package's version.  Builders are serialised with flock on
# $CACHE/.lock, build in a temporary directory and rename the result into
# place, so a cache hit is a directory lookup and a half-built image is
# never seen.  Needs root (debootstrap, chroot for offline systemctl).
#
# Inside the image, vbtest.service runs /vbtest/run.sh from the disk
# labelled "vbtest" (the second virtio disk the test attaches), its output
# on ttyS0, then powers the machine off.  The image itself holds nothing of
# this tree: the test brings the freshly built .deb on that disk.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_ROOT=${VHOST_BLK_CACHE:-/var/cache/vhost-blk}/systemd-guest
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

SUITE=bookworm
# What the test needs in the guest: systemd as init and its tools, and
# every library the vhost-blk package's Depends: names (librbd1 brings
# librados2 and Ceph's common libraries), so that `dpkg -i` needs no
# network.  Keep this in step with debian/control's build dependencies.
PACKAGES=(systemd systemd-sysv udev dbus
          libglib2.0-0 libjson-glib-1.0-0 liburing2 libaio1 libseccomp2
          librbd1 librados2 libmicrohttpd12
          zlib1g libzstd1   # qcow2 compressed clusters (block/qcow2-format.c)
          libnbd0           # the NBD client driver (block/nbd.c)
          libgnutls30       # the NBD server's TLS (nbd/tls.c)
          procps util-linux e2fsprogs
          # scripts/bench/seed-table.sh --cloud-image boots this image as
          # a cloud image: cloud-init (NoCloud) runs fio from its user-data;
          # debootstrap does not resolve virtual packages, so the provider of
          # python3-cryptography's python3-cffi-backend-api-* is named
          cloud-init python3-cffi-backend fio)
# Modules the initramfs loads (with their dependencies, in order).
WANT_MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev
              virtio_pci virtio_blk crc32c_generic crc16 mbcache jbd2 ext4
              isofs)   # cloud-init's NoCloud seed (an iso9660 "cidata")

log() { echo "build-systemd-image: $*" >&2; }
die() { echo "build-systemd-image: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap)"

mirror=${VHOST_BLK_DEBIAN_MIRROR:-}
lists=() stanzas=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && lists+=("$f")
done
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && stanzas+=("$f")
done
if [ -z "$mirror" ] && [ ${#lists[@]} -gt 0 ]; then
    # One-line sources first, then deb822 (.sources) stanzas.
    mirror=$(awk -v s="$SUITE" '$1 == "deb" && $0 ~ " "s"( |$)" {
                 for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' \
             "${lists[@]}" | head -n1 || true)
fi
if [ -z "$mirror" ] && [ ${#stanzas[@]} -gt 0 ]; then
    mirror=$(awk -v s="$SUITE" '
        /^$/ { if (deb && suite && uri) { print uri; exit } deb = suite = 0; uri = "" }
        /^Types:/ { deb = ($0 ~ /(^|[ \t])deb([ \t]|$)/) }
        /^Suites:/ { suite = ($0 ~ "[ \t]"s"([ \t]|$)") }
        /^URIs:/ { uri = $2 }
        END { if (deb && suite && uri) print uri }' \
        "${stanzas[@]}" | head -n1 || true)
fi
[ -n "$mirror" ] ||
    die "no '$SUITE' deb source in /etc/apt/sources.list{,.d}: set VHOST_BLK_DEBIAN_MIRROR"

assets=${VHOST_BLK_GUEST_ASSETS:-}
if [ -z "$assets" ]; then
    assets=$("$SCRIPT_DIR/build-assets.sh") || die "building the guest assets failed"
fi
[ -f "$assets/vmlinux" ] && [ -f "$assets/info" ] ||
    die "$assets has no vmlinux/info (scripts/guest/build-assets.sh)"
read -r kpkg kver < <(sed -n 's/^kernel=//p' "$assets/info")
[ -n "${kpkg:-}" ] && [ -n "${kver:-}" ] || die "no kernel= line in $assets/info"

key=$( { echo "$SUITE $mirror $kpkg $kver"; printf '%s\n' "${PACKAGES[@]}";
         cat "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)
OUT=$CACHE_ROOT/$key

done_already() {
    [ $FORCE -eq 0 ] && [ -f "$OUT/.complete" ] || return 1
    # The kernel may have moved to a new cache entry with the same version.
    ln -f "$assets/vmlinux" "$OUT/vmlinux" 2>/dev/null ||
        cmp -s "$assets/vmlinux" "$OUT/vmlinux" ||
        cp "$assets/vmlinux" "$OUT/vmlinux"
    echo "$OUT"
}
done_already && exit 0

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock"
flock 9
done_already && exit 0

for tool in debootstrap mkfs.ext4 chroot dpkg-deb cpio gzip modinfo busybox; do
    command -v "$tool" > /dev/null ||
        die "missing $tool (run scripts/install-deps.sh)"
done

start=$(date +%s)
WORK=$(mktemp -d "$CACHE_ROOT/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
R=$WORK/root

# ---- the root file system ------------------------------------------------
# Downloaded packages are kept across builds (a rebuild after a script
# change fetches nothing again).
DEBS=$CACHE_ROOT/debs
mkdir -p "$DEBS"
include=$(IFS=,; echo "${PACKAGES[*]}")
log "debootstrap --variant=minbase $SUITE from $mirror (+ $include)"
if ! debootstrap --variant=minbase --include="$include" --cache-dir="$DEBS" \
        "$SUITE" "$R" "$mirror" > "$WORK/debootstrap.log" 2>&1; then
    tail -n 30 "$WORK/debootstrap.log" >&2
    [ -f "$R/debootstrap/debootstrap.log" ] && tail -n 30 "$R/debootstrap/debootstrap.log" >&2
    die "debootstrap failed"
fi

log "configuring the guest"
echo vbguest > "$R/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 vbguest\n' > "$R/etc/hosts"
# The root disk is mounted read-write by the initramfs; no fsck (the test
# runs on a throw-away overlay of this image).
echo "/dev/vda / ext4 rw,noatime 0 0" > "$R/etc/fstab"
# An empty machine-id: systemd makes one at boot (first boot of a copy).
: > "$R/etc/machine-id"
rm -f "$R/var/lib/dbus/machine-id"
# Keep apt's caches out of the image.
chroot "$R" apt-get clean
rm -rf "$R"/var/lib/apt/lists/*_Packages "$R"/var/log/*.log "$R"/debootstrap

# The test runner: the disk labelled vbtest carries run.sh and what it
# uses; its output goes to the serial console, then the guest powers off.
install -d "$R/vbtest"
cat > "$R/usr/local/sbin/vbtest-run" <<'EOF'
#!/bin/sh
# Run /vbtest/run.sh from the disk labelled "vbtest" and power off.
set -u
if ! mount -o ro LABEL=vbtest /vbtest; then
    echo "VBTEST-RESULT: FAIL the vbtest disk did not mount"
else
    bash /vbtest/run.sh
    echo "VBTEST-RESULT: exit $?"
fi
sync
systemctl poweroff --no-block
EOF
chmod 0755 "$R/usr/local/sbin/vbtest-run"
cat > "$R/etc/systemd/system/vbtest.service" <<'EOF'
[Unit]
Description=vhost-blk systemd guest test (vbtest disk)
Requires=dev-disk-by\x2dlabel-vbtest.device
After=dev-disk-by\x2dlabel-vbtest.device basic.target systemd-journald.socket
ConditionKernelCommandLine=vbtest=1

[Service]
Type=exec
ExecStart=/usr/local/sbin/vbtest-run
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TTYReset=no
TTYVHangup=no

[Install]
WantedBy=multi-user.target
EOF
# Offline enable/mask (no running manager needed).
chroot "$R" systemctl enable vbtest.service > /dev/null 2>&1
chroot "$R" systemctl mask serial-getty@ttyS0.service getty@tty1.service \
    apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
    e2scrub_reap.service fstrim.timer systemd-timesyncd.service \
    > /dev/null 2>&1

# ---- kernel modules and the initramfs ------------------------------------
log "fetching $kpkg=$kver for its modules"
mkdir -p "$WORK/k"
(cd "$WORK/k" && apt-get download -q "$kpkg=$kver" > /dev/null 2>&1) ||
    (cd "$WORK/k" && apt-get download "$kpkg=$kver" >&2) ||
    die "apt-get download $kpkg=$kver failed"
dpkg-deb -x "$WORK"/k/"$kpkg"_*.deb "$WORK/k/x"
moddir=$(echo "$WORK"/k/x/lib/modules/*)
[ -d "$moddir" ] || die "no modules in $kpkg"

I=$WORK/initramfs
mkdir -p "$I"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$(command -v busybox)" "$I/bin/busybox"
for a in sh mount umount switch_root insmod sleep cat echo mkdir; do
    ln -s busybox "$I/bin/$a"
done
: > "$I/lib/modules/order"
declare -A seen=()
modfile() {
    find "$moddir" -name "$1.ko*" -o -name "${1//_/-}.ko*" | head -n1
}
visit() {
    local m=${1//-/_} f d
    [ -n "${seen[$m]:-}" ] && return 0
    seen[$m]=1
    f=$(modfile "$m")
    if [ -z "$f" ]; then
        log "module $m: built in or absent"
        return 0
    fi
    for d in $(modinfo -F depends "$f" | tr ',' ' '); do visit "$d"; done
    case $f in
        *.ko.xz) xz -dc "$f" > "$I/lib/modules/$m.ko" ;;
        *.ko.zst) zstd -dqc "$f" > "$I/lib/modules/$m.ko" ;;
        *) cp "$f" "$I/lib/modules/$m.ko" ;;
    esac
    echo "$m.ko" >> "$I/lib/modules/order"
}
for m in "${WANT_MODULES[@]}"; do visit "$m"; done
log "initramfs modules: $(tr '\n' ' ' < "$I/lib/modules/order")"
cat > "$I/init" <<'EOF'
#!/bin/sh
# Load virtio-blk and ext4, mount /dev/vda and start systemd on it.
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec < /dev/console > /dev/console 2>&1
while read -r m; do
    insmod "/lib/modules/$m" || echo "initramfs: insmod $m failed"
done < /lib/modules/order
n=0
while [ ! -b /dev/vda ]; do
    [ $n -ge 300 ] && { echo "initramfs: no /dev/vda"; echo b > /proc/sysrq-trigger; }
    sleep 0.1
    n=$((n + 1))
done
mount -t ext4 -o rw,noatime /dev/vda /newroot ||
    { echo "initramfs: mounting /dev/vda failed"; echo b > /proc/sysrq-trigger; }
umount /proc /sys
mount --move /dev /newroot/dev 2>/dev/null || umount /dev
exec switch_root /newroot /sbin/init "$@"
EOF
chmod 0755 "$I/init"
mknod -m 600 "$I/dev/console" c 5 1
(cd "$I" && find . -print0 | LC_ALL=C sort -z |
    cpio --null -o -H newc --quiet -R 0:0) | gzip -9n > "$WORK/initramfs.img"

# ---- the ext4 image, without mounting ------------------------------------
# Room for the package, the test's sparse disk image and the journal.
used_kib=$(du -sk --apparent-size "$R" | cut -f1)
size_mib=$(( used_kib / 1024 * 5 / 4 + 768 ))
log "mkfs.ext4 -d ($used_kib KiB of files, ${size_mib} MiB image)"
truncate -s "${size_mib}M" "$WORK/rootfs.img"
mkfs.ext4 -q -F -L vbroot -d "$R" -E root_owner=0:0 "$WORK/rootfs.img" \
    > "$WORK/mkfs.log" 2>&1 || { cat "$WORK/mkfs.log" >&2; die "mkfs.ext4 -d failed"; }

A=$WORK/out
mkdir -p "$A"
mv "$WORK/rootfs.img" "$WORK/initramfs.img" "$A/"
ln "$assets/vmlinux" "$A/vmlinux" 2>/dev/null || cp "$assets/vmlinux" "$A/vmlinux"
secs=$(( $(date +%s) - start ))
cat > "$A/info" <<EOF
suite=$SUITE
mirror=$mirror
packages=${PACKAGES[*]}
kernel=$kpkg $kver
modules=$(tr '\n' ' ' < "$I/lib/modules/order")
build_seconds=$secs
root_files_kib=$used_kib
rootfs_bytes=$(stat -c %s "$A/rootfs.img")
rootfs_allocated_kib=$(du -k "$A/rootfs.img" | cut -f1)
initramfs_bytes=$(stat -c %s "$A/initramfs.img")
EOF
touch "$A/.complete"
rm -rf "$OUT"
mv "$A" "$OUT"
# Drop images of older keys not used in the last hour.
for d in "$CACHE_ROOT"/*/; do
    [ "${d%/}" = "$OUT" ] && continue
    [ -f "$d/.complete" ] || continue
    if [ -n "$(find "$d" -maxdepth 0 -mmin +60)" ]; then rm -rf "$d"; fi
done
log "image ready in $OUT (${secs}s, $(du -k "$OUT/rootfs.img" | cut -f1) KiB allocated)"
echo "$OUT"
