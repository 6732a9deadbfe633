#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Build the assets of the nested-guest test: the standard test guest
# (scripts/guest/build-assets.sh) whose initramfs gets one more cpio
# archive appended (Linux unpacks concatenated archives one after the
# other), carrying everything the outer guest needs to run the patched
# QEMU and a nested guest of its own:
#   /nested/bin/qemu-system-x86_64   the patched QEMU (stripped), plus the
#                                    shared libraries ldd lists, at their paths
#   /nested/fw/                      the firmware it loads (-L /nested/fw)
#   /nested/vmlinux, /nested/initramfs.img
#                                    the nested guest: the same kernel and
#                                    the standard initramfs (same /init, jobs)
#                                    plus /jobs/fio-cache.sh (nested-inner-job.sh)
#   /nested/modules/                 vhost_iotlb.ko, vhost.ko (the guest
#                                    kernel's own) and vhost_blk.ko, when given
#   /jobs/nested.sh                  the outer guest's job (nested-job.sh)
#
# Usage: scripts/guest/build-nested.sh [--qemu BIN] [--module KO]...
#   --qemu BIN     patched QEMU (default build/qemu/qemu-system-x86_64)
#   --module KO    a kernel module to ship in /nested/modules (repeatable;
#                  the job loads vhost_iotlb, vhost, vhost_blk in that order)
#   stdout: the asset directory (vmlinux, initramfs.img), for
#           tests/functional/run-guest.sh -a DIR
#   stderr: progress log
# Env: VHOST_BLK_CACHE (default /var/cache/vhost-blk), VHOST_BLK_GUEST_ASSETS
#
# The result is cached in $VHOST_BLK_CACHE/guest/nested-<key>, the key being
# a hash of the QEMU binary, the standard assets, the modules, this script
# and the job; a cache hit costs the hashing of the QEMU binary (< 1 s).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
JOB=$SCRIPT_DIR/nested-job.sh
INNER_JOB=$SCRIPT_DIR/nested-inner-job.sh
CACHE_ROOT=${VHOST_BLK_CACHE:-/var/cache/vhost-blk}/guest
QEMU=$SRC_ROOT/build/qemu/qemu-system-x86_64
MODULES=()
# Firmware of a q35 guest booted with -kernel (PVH ELF) and -nodefaults.
FIRMWARE=(bios-256k.bin pvh.bin linuxboot_dma.bin kvmvapic.bin)
FW_DIRS=(/usr/share/seabios /usr/share/qemu)

log() { echo "build-nested: $*" >&2; }
die() { echo "build-nested: error: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case $1 in
        --qemu) QEMU=$2; shift 2 ;;
        --module) MODULES+=("$2"); shift 2 ;;
        -h|--help) sed -n '3,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1'" ;;
    esac
done

[ -x "$QEMU" ] || die "no patched QEMU at $QEMU (scripts/build-qemu.sh builds it)"
QEMU=$(readlink -f "$QEMU")
for m in "${MODULES[@]}"; do
    [ -f "$m" ] || die "no module $m"
done
ASSETS=${VHOST_BLK_GUEST_ASSETS:-}
if [ -z "$ASSETS" ]; then
    ASSETS=$("$SCRIPT_DIR/build-assets.sh") || die "building the guest assets failed"
fi
for f in vmlinux initramfs.img; do
    [ -f "$ASSETS/$f" ] || die "no $ASSETS/$f"
done

key=$( { sha256sum "$QEMU" "$ASSETS/initramfs.img" "${BASH_SOURCE[0]}" "$JOB" "$INNER_JOB" \
             "${MODULES[@]}" | cut -d' ' -f1;
         stat -c '%s %Y' "$ASSETS/vmlinux"; } | sha256sum | cut -c1-16)
OUT=$CACHE_ROOT/nested-$key
if [ -f "$OUT/.complete" ]; then
    echo "$OUT"
    exit 0
fi

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock-nested"
flock 9
if [ -f "$OUT/.complete" ]; then
    echo "$OUT"
    exit 0
fi
for tool in cpio gzip strip ldd; do
    command -v "$tool" >/dev/null || die "missing tool $tool (run scripts/install-deps.sh)"
done

WORK=$(mktemp -d "$CACHE_ROOT/.work-nested.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
R=$WORK/root
mkdir -p "$R/nested/bin" "$R/nested/fw" "$R/nested/modules" "$R/jobs"

log "QEMU $QEMU"
strip -o "$R/nested/bin/qemu-system-x86_64" "$QEMU"
# Libraries at the paths the binary looks for them (the loader included).
for lib in $(ldd "$QEMU" | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }'); do
    mkdir -p "$R$(dirname "$lib")"
    [ -e "$R$lib" ] || cp -L "$lib" "$R$lib"
done
for fw in "${FIRMWARE[@]}"; do
    found=
    for d in "${FW_DIRS[@]}"; do
        if [ -f "$d/$fw" ]; then
            cp -L "$d/$fw" "$R/nested/fw/$fw"
            found=1
            break
        fi
    done
    [ -n "$found" ] || die "firmware $fw not found in ${FW_DIRS[*]} (install seabios and qemu-system-data)"
done
cp "$ASSETS/vmlinux" "$R/nested/vmlinux"
# The nested guest's initramfs: the standard one plus its own job.
mkdir -p "$WORK/inner/jobs"
install -m 0755 "$INNER_JOB" "$WORK/inner/jobs/fio-cache.sh"
{ cat "$ASSETS/initramfs.img"
  (cd "$WORK/inner" && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
       cpio --null -o -H newc --quiet -R 0:0) | gzip -9n; } > "$R/nested/initramfs.img"
for m in "${MODULES[@]}"; do
    cp "$m" "$R/nested/modules/"
done
install -m 0755 "$JOB" "$R/jobs/nested.sh"

A=$WORK/assets
mkdir -p "$A"
(cd "$R" && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
    cpio --null -o -H newc --quiet -R 0:0) | gzip -6n > "$A/nested.cpio.gz"
cat "$ASSETS/initramfs.img" "$A/nested.cpio.gz" > "$A/initramfs.img"
ln "$ASSETS/vmlinux" "$A/vmlinux" 2>/dev/null || cp "$ASSETS/vmlinux" "$A/vmlinux"
cat > "$A/info" <<EOF
assets=$ASSETS
qemu=$QEMU
modules=$(for m in "${MODULES[@]}"; do basename "$m"; done | tr '\n' ' ')
nested_cpio_bytes=$(stat -c %s "$A/nested.cpio.gz")
initramfs_bytes=$(stat -c %s "$A/initramfs.img")
EOF
rm -f "$A/nested.cpio.gz"
touch "$A/.complete"
rm -rf "$OUT"
mv "$A" "$OUT"
# Keep the 3 newest nested sets, and anything used in the last hour.
ls -dt "$CACHE_ROOT"/nested-*/ 2>/dev/null | tail -n +4 | while read -r d; do
    if [ -n "$(find "$d" -maxdepth 0 -mmin +60)" ]; then rm -rf "$d"; fi
done
log "assets ready in $OUT ($(stat -c %s "$OUT/initramfs.img") byte initramfs)"
echo "$OUT"
