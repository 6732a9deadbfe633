#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Build kernel/vhost-blk/vhost_blk.ko for the kernel the guest tests boot
# (Debian 12's cloud kernel, as scripts/guest/build-assets.sh picks it) and
# print the path of the module.
#
# Usage: scripts/build-kmod.sh [--guest-modules] [--force]
#   stdout: the path of vhost_blk.ko; with --guest-modules also (one per
#           line, before it) the guest kernel's own vhost_iotlb.ko and
#           vhost.ko, in load order
#   stderr: progress log
# Env:
#   VHOST_BLK_CACHE        cache root (default /var/cache/vhost-blk)
#   VHOST_BLK_KERNEL_PKG   as for build-assets.sh (pins the linux-image package)
#
# Inputs, all from Debian at the exact version of the guest kernel:
#   linux-headers-<abi>          Kbuild tree (installed with apt-get if missing)
#   linux-source-<major.minor>   only drivers/vhost/vhost.h, the vhost core's
#                                internal header: the .deb is checked against
#                                the SHA256 of apt's signed index, the header
#                                against the pin below when one is known
#   linux-image-<abi>            (--guest-modules) vhost.ko, vhost_iotlb.ko
# Everything lands in $VHOST_BLK_CACHE/kmod/; a second run with the same
# sources and kernel prints the cached module at once.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
CACHE=${VHOST_BLK_CACHE:-/var/cache/vhost-blk}/kmod
GUEST_MODS=0
FORCE=0
for a in "$@"; do
    case $a in
        --guest-modules) GUEST_MODS=1 ;;
        --force) FORCE=1 ;;
        -h|--help) sed -n '/^# Usage/,/^set -eu/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
        *) echo "build-kmod: unknown argument '$a' (see --help)" >&2; exit 2 ;;
    esac
done

# sha256 of drivers/vhost/vhost.h per linux-source version (pinned).
declare -A VHOST_H_SHA256=(
    [6.1.192-3]=b8f1f35c35393f2ebd16cfb645b526b7dac07f9006cf04c290dfd014d189021c
)

log() { echo "build-kmod: $*" >&2; }
die() { echo "build-kmod: error: $*" >&2; exit 1; }

# The guest kernel: whatever build-assets.sh boots (its cache hit is fast).
assets=$("$SRC_ROOT/scripts/guest/build-assets.sh") ||
    die "scripts/guest/build-assets.sh failed (the guest kernel is unknown)"
read -r kpkg kver < <(sed -n 's/^kernel=//p' "$assets/info")
[ -n "${kpkg:-}" ] && [ -n "${kver:-}" ] || die "no kernel= line in $assets/info"
abi=${kpkg#linux-image-}
kmaj=$(echo "$abi" | cut -d. -f1-2)
hdrpkg=linux-headers-$abi
srcpkg=linux-source-$kmaj
KDIR=/usr/src/linux-headers-$abi

src_hash=$( { cat "$SRC_ROOT"/kernel/vhost-blk/Kbuild "$SRC_ROOT"/kernel/vhost-blk/*.c \
                  "$SRC_ROOT"/include/uapi/linux/vhost_blk.h "${BASH_SOURCE[0]}"; } |
            sha256sum | cut -c1-12)
OUT=$CACHE/build-$abi-$kver-$src_hash
VDIR=$CACHE/vhost-core-$kver
MDIR=$CACHE/guest-modules-$abi-$kver

print_result() {
    if [ $GUEST_MODS -eq 1 ]; then
        echo "$MDIR/vhost_iotlb.ko"
        echo "$MDIR/vhost.ko"
    fi
    echo "$OUT/kernel/vhost-blk/vhost_blk.ko"
}
cached() {
    [ $FORCE -eq 0 ] && [ -f "$OUT/.complete" ] &&
        { [ $GUEST_MODS -eq 0 ] || [ -f "$MDIR/.complete" ]; }
}
if cached; then print_result; exit 0; fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if cached; then print_result; exit 0; fi
WORK=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# -- Kbuild tree --
have=$(dpkg-query -W -f='${Status} ${Version}' "$hdrpkg" 2>/dev/null || true)
if [ "$have" != "install ok installed $kver" ]; then
    log "installing $hdrpkg=$kver"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$hdrpkg=$kver" >&2 ||
        { apt-get update -qq >&2;
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$hdrpkg=$kver" >&2; } ||
        die "cannot install $hdrpkg=$kver"
fi
[ -f "$KDIR/Makefile" ] || die "$KDIR/Makefile missing after installing $hdrpkg"
gccv=$(sed -n 's/^CC = .*gcc-\([0-9]*\).*/\1/p' "$KDIR/.kernelvariables" 2>/dev/null || true)
if [ -n "$gccv" ] && ! command -v "gcc-$gccv" >/dev/null; then
    log "installing gcc-$gccv (the compiler of this kernel)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "gcc-$gccv" >&2 ||
        die "cannot install gcc-$gccv"
fi

# apt-get download verifies against the signed index; check again here so
# a stale or edited cache is caught too.
fetch_deb() {   # PKG VERSION DIR -> prints the .deb path
    local pkg=$1 ver=$2 dir=$3 want got deb
    want=$(apt-cache show "$pkg=$ver" 2>/dev/null | awk '/^SHA256:/ { print $2; exit }')
    [ -n "$want" ] || die "apt knows no $pkg=$ver (run apt-get update)"
    (cd "$dir" && apt-get download -q "$pkg=$ver" >&2 2>/dev/null) ||
        (cd "$dir" && apt-get download "$pkg=$ver" >&2) ||
        die "apt-get download $pkg=$ver failed"
    deb=$(ls "$dir/${pkg}_"*.deb | head -n1)
    got=$(sha256sum "$deb" | cut -d' ' -f1)
    [ "$got" = "$want" ] || die "$deb: sha256 $got, apt's index says $want"
    echo "$deb"
}

# -- the vhost core's internal header --
if [ ! -f "$VDIR/.complete" ] || [ $FORCE -eq 1 ]; then
    log "fetching $srcpkg=$kver for drivers/vhost/vhost.h"
    deb=$(fetch_deb "$srcpkg" "$kver" "$WORK")
    mkdir -p "$WORK/vcore"
    dpkg-deb --fsys-tarfile "$deb" |
        tar -xO "./usr/src/linux-source-$kmaj.tar.xz" |
        tar -xJ -C "$WORK/vcore" --strip-components=3 \
            "linux-source-$kmaj/drivers/vhost/vhost.h" ||
        die "no drivers/vhost/vhost.h in $srcpkg"
    got=$(sha256sum "$WORK/vcore/vhost.h" | cut -d' ' -f1)
    pin=${VHOST_H_SHA256[$kver]:-}
    if [ -n "$pin" ]; then
        [ "$got" = "$pin" ] || die "vhost.h of $srcpkg $kver: sha256 $got, pinned $pin"
    else
        log "note: no pinned vhost.h hash for $kver (checked against apt's index only): $got"
    fi
    echo "$srcpkg $kver vhost.h sha256 $got" > "$WORK/vcore/source"
    touch "$WORK/vcore/.complete"
    rm -rf "$VDIR"
    mv "$WORK/vcore" "$VDIR"
    rm -f "$deb"
fi

# -- the guest kernel's own vhost modules --
if [ $GUEST_MODS -eq 1 ] && { [ ! -f "$MDIR/.complete" ] || [ $FORCE -eq 1 ]; }; then
    log "fetching $kpkg=$kver for vhost.ko and vhost_iotlb.ko"
    deb=$(fetch_deb "$kpkg" "$kver" "$WORK")
    mkdir -p "$WORK/img" "$WORK/mods"
    dpkg-deb --fsys-tarfile "$deb" |
        tar -x -C "$WORK/img" --wildcards './lib/modules/*/kernel/drivers/vhost/vhost.ko*' \
            './lib/modules/*/kernel/drivers/vhost/vhost_iotlb.ko*'
    for m in vhost_iotlb vhost; do
        f=$(find "$WORK/img" -name "$m.ko*" | head -n1)
        [ -n "$f" ] || die "$kpkg has no $m.ko"
        case $f in
            *.xz) xz -dc "$f" > "$WORK/mods/$m.ko" ;;
            *.zst) zstd -dcq "$f" > "$WORK/mods/$m.ko" ;;
            *) cp "$f" "$WORK/mods/$m.ko" ;;
        esac
    done
    touch "$WORK/mods/.complete"
    rm -rf "$MDIR"
    mv "$WORK/mods" "$MDIR"
    rm -f "$deb"
fi

# -- build out of tree, in a copy laid out like the source tree --
log "building vhost_blk.ko for $abi"
B=$WORK/build
mkdir -p "$B/kernel/vhost-blk" "$B/include/uapi/linux"
cp "$SRC_ROOT"/kernel/vhost-blk/{Kbuild,Makefile,vhost_blk.c} "$B/kernel/vhost-blk/"
cp "$SRC_ROOT/include/uapi/linux/vhost_blk.h" "$B/include/uapi/linux/"
make -C "$KDIR" M="$B/kernel/vhost-blk" VHOST_INC="$VDIR" modules \
    > "$WORK/make.log" 2>&1 || { cat "$WORK/make.log" >&2; die "module build failed"; }
if grep -E 'warning:|error:' "$WORK/make.log" >&2; then
    die "the module build printed warnings (above); fix them"
fi
ko=$B/kernel/vhost-blk/vhost_blk.ko
[ -f "$ko" ] || die "no vhost_blk.ko after the build"
[ "$(modinfo -F vermagic "$ko" | cut -d' ' -f1)" = "$abi" ] ||
    die "vhost_blk.ko vermagic $(modinfo -F vermagic "$ko") does not match $abi"
cp "$VDIR/source" "$B/vhost-core-source"
touch "$B/.complete"
rm -rf "$OUT"
mv "$B" "$OUT"
# Keep the 4 newest builds, and any used in the last hour (another checkout
# may be about to load it).
ls -dt "$CACHE"/build-*/ 2>/dev/null | tail -n +5 | while read -r d; do
    if [ -n "$(find "$d" -maxdepth 0 -mmin +60)" ]; then rm -rf "$d"; fi
done
log "built $OUT/kernel/vhost-blk/vhost_blk.ko"
print_result
