#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Build the patched QEMU (Debian bookworm's qemu source + qemu/overlay +
# qemu/patches/series) into build/qemu/qemu-system-x86_64, and QEMU's
# qos-test (its qtests, for tests/functional/test-qemu-qtest.sh) into
# build/qemu/qos-test.
#
# Usage: scripts/build-qemu.sh [--fetch-only] [--source-only] [-j N]
#
# Steps, each skipped when already done:
#   1. apt-get source (pinned version, .dsc sha256 checked; the deb-src line
#      is added when missing) into $CACHE/qemu-src/dl/
#   2. dpkg-source -x (Debian's patches applied) into $CACHE/qemu-src/<ver>/
#   3. copy qemu/overlay/ and the vhost_blk ABI header
#      (include/uapi/linux/vhost_blk.h -> linux-headers/linux/) into it
#      (only files whose contents changed) and apply qemu/patches/series
#      with patch -p1 (re-applied only when the series changed; the
#      previous series is reverted first)
#   4. configure x86_64-softmmu with a small feature set into the build dir
#      (only when the flags changed or it has no build.ninja)
#   5. ninja qemu-system-x86_64 tests/qtest/qos-test, through ccache
#      ($CACHE/ccache)
#   6. link Debian's firmware (seabios, qemu-system-data, ipxe-qemu) into
#      the build's qemu-bundle, so that the binary runs without -L
#
# Environment:
#   VHOST_BLK_CACHE   cache dir outside the clone (default /var/cache/vhost-blk)
#   QEMU_BUILD_DIR    build dir (default $VHOST_BLK_CACHE/qemu-build/
#                     VERSION-CONF, CONF a hash of the configure flags:
#                     outside the clone so a fresh clone reuses it, and one
#                     per configuration, so trees whose flags differ do not
#                     wipe each other's; the binaries are linked into
#                     <tree>/build/qemu/)
#   CCACHE_DIR        default $VHOST_BLK_CACHE/ccache
set -euo pipefail

# The pinned source package.  To move to another Debian revision, change
# both lines (sha256sum of the new .dsc, fetched with apt-get source
# --download-only) and see docs/qemu-fork.md, "Rebasing".
QEMU_DEB_VERSION=1:7.2+dfsg-7+deb12u18
QEMU_DSC_SHA256=6b6bd27b947ec89e40a1d6b26d9c9f3c698ca691da13163e0483f6061bbb20b3

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${VHOST_BLK_CACHE:-/var/cache/vhost-blk}
JOBS=$(nproc)
fetch_only=0
source_only=0

while [ $# -gt 0 ]; do
    case $1 in
        --fetch-only) fetch_only=1; shift ;;
        --source-only) source_only=1; shift ;;
        -j) JOBS=$2; shift 2 ;;
        -h|--help) sed -n '3,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-qemu: unknown argument '$1'" >&2; exit 2 ;;
    esac
done

ver_noepoch=${QEMU_DEB_VERSION#*:}          # 7.2+dfsg-7+deb12u18
ver_upstream=${ver_noepoch%-*}              # 7.2+dfsg
DL=$CACHE/qemu-src/dl
SRC=$CACHE/qemu-src/$ver_noepoch
DSC=$DL/qemu_${ver_noepoch}.dsc
STATE=$SRC/.vhost-blk                       # what we added to the tree

say() { echo "build-qemu: $*"; }
die() { echo "build-qemu: error: $*" >&2; exit 1; }
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
mkdir -p "$CACHE" 2>/dev/null || as_root install -d -m 0777 "$CACHE"
[ -w "$CACHE" ] || die "$CACHE is not writable (set VHOST_BLK_CACHE)"
mkdir -p "$DL" "$CACHE/ccache"

# Serialise concurrent runs sharing the cache (the source tree is shared).
exec 9> "$CACHE/qemu-src/.lock"
flock 9

# ---------------------------------------------------------------- 1. fetch

# Does apt offer the pinned source?  Not "grep -q": it exits at the first
# match, apt-cache then dies of SIGPIPE on its next write, and pipefail
# turns that into "no" (it did on a fresh machine, where nothing is cached).
apt_has_source() {
    apt-cache showsrc qemu 2>/dev/null |
        grep -x "Version: $QEMU_DEB_VERSION" > /dev/null
}

ensure_deb_src() {
    local f=/etc/apt/sources.list.d/vhost-blk-src.sources
    if apt_has_source; then
        return 0
    fi
    if [ ! -f "$f" ]; then
        say "adding deb-src entries ($f)"
        local base=/etc/apt/sources.list.d/debian.sources
        [ -f "$base" ] || die "no $base to copy the deb-src entry from"
        # Same URIs/Suites/Components/Signed-By as the deb entries.
        sed -e 's/^Types:.*/Types: deb-src/' -e '/^#/d' "$base" | as_root tee "$f" >/dev/null
    elif ! grep -q 'bookworm-security' "$f" &&
         grep -q 'debian-security' /etc/apt/sources.list.d/debian.sources 2>/dev/null; then
        # Another script created it for bookworm only; the pinned qemu
        # revision may live in bookworm-security or a point release.
        say "extending $f with the security suite"
        sed -n '/debian-security/,/^$/p' /etc/apt/sources.list.d/debian.sources |
            sed -e 's/^Types:.*/Types: deb-src/' -e '/^#/d' |
            { echo; cat; } | as_root tee -a "$f" >/dev/null
    fi
    as_root apt-get update -qq
    apt_has_source ||
        die "apt offers no qemu source $QEMU_DEB_VERSION (apt-cache showsrc qemu lists: $(apt-cache showsrc qemu | sed -n 's/^Version: //p' | tr '\n' ' '))"
}

check_dsc() {
    local got
    got=$(sha256sum "$DSC" | cut -d' ' -f1)
    [ "$got" = "$QEMU_DSC_SHA256" ] ||
        die "$DSC has sha256 $got, expected $QEMU_DSC_SHA256 (pinned in $0)"
}

if [ ! -f "$DL/.complete-$ver_noepoch" ]; then
    ensure_deb_src
    say "fetching qemu $QEMU_DEB_VERSION source into $DL"
    # apt drops privileges to _apt for downloads: let it write there.
    chmod 0777 "$DL" 2>/dev/null || true
    (cd "$DL" && apt-get source -qq --download-only "qemu=$QEMU_DEB_VERSION")
    [ -f "$DSC" ] || die "apt-get source did not produce $DSC"
    check_dsc
    touch "$DL/.complete-$ver_noepoch"
fi
check_dsc
[ $fetch_only -eq 1 ] && { say "source in $DL"; exit 0; }

# ---------------------------------------------------------------- 2. unpack

if [ ! -f "$SRC/.vhost-blk-unpacked" ]; then
    say "unpacking into $SRC (dpkg-source -x applies Debian's patches)"
    rm -rf "$SRC"
    # dpkg-source checks every file against the checksums in the .dsc,
    # which the sha256 above pins.
    dpkg-source -q -x "$DSC" "$SRC" > "$CACHE/qemu-src/unpack.log" 2>&1 ||
        { cat "$CACHE/qemu-src/unpack.log" >&2; die "dpkg-source -x failed"; }
    touch "$SRC/.vhost-blk-unpacked"
fi

# ---------------------------------------------------------------- 3. overlay + series

mkdir -p "$STATE/applied"
series_id() {
    # Identity of a series dir: its series file plus every patch it names.
    local d=$1 p
    [ -f "$d/series" ] || { echo none; return; }
    {
        cat "$d/series"
        grep -v '^\s*\(#\|$\)' "$d/series" | while read -r p; do cat "$d/$p"; done
    } | sha256sum | cut -d' ' -f1
}
apply_series() {  # DIR [-R]
    local d=$1 rev=${2:-} p list
    list=$(grep -v '^\s*\(#\|$\)' "$d/series" || true)
    [ -n "$rev" ] && list=$(echo "$list" | tac)
    for p in $list; do
        say "patch ${rev:+-R }$p"
        patch -d "$SRC" -p1 -s -f --no-backup-if-mismatch $rev < "$d/$p" ||
            die "patch $p does not apply${rev:+ in reverse}: the tree in $SRC may need 'rm -rf $SRC'"
    done
}
if [ "$(series_id "$STATE/applied")" != "$(series_id "$ROOT/qemu/patches")" ]; then
    [ -f "$STATE/applied/series" ] && apply_series "$STATE/applied" -R
    rm -rf "$STATE/applied"
    mkdir -p "$STATE/applied"
    if [ -f "$ROOT/qemu/patches/series" ]; then
        apply_series "$ROOT/qemu/patches"
        cp "$ROOT/qemu/patches/"* "$STATE/applied/"
    fi
fi

# Overlay: copy changed files only (unchanged mtimes keep ninja quiet);
# files dropped from the overlay since the last run are removed again.
(cd "$ROOT/qemu/overlay" && find . -type f | sed 's|^\./||' | sort) > "$STATE/overlay.new"
if [ -f "$STATE/overlay.list" ]; then
    comm -23 "$STATE/overlay.list" "$STATE/overlay.new" | while read -r f; do
        say "overlay: removing $f"
        rm -f "$SRC/$f"
    done
fi
while read -r f; do
    if ! cmp -s "$ROOT/qemu/overlay/$f" "$SRC/$f"; then
        mkdir -p "$(dirname "$SRC/$f")"
        cp "$ROOT/qemu/overlay/$f" "$SRC/$f"
        say "overlay: $f"
    fi
done < "$STATE/overlay.new"
mv "$STATE/overlay.new" "$STATE/overlay.list"
# The kernel ABI header that the vhost_blk module and vhost-blk-bench use
# too: QEMU includes it as <linux/vhost_blk.h> from its linux-headers/.
# Copied by content like the overlay, so ninja's depfiles recompile what
# includes it whenever it changes (and ccache hashes its contents).
abi_src=$ROOT/include/uapi/linux/vhost_blk.h
abi_dst=$SRC/linux-headers/linux/vhost_blk.h
[ -f "$abi_src" ] || die "missing $abi_src (the vhost_blk ABI header)"
if ! cmp -s "$abi_src" "$abi_dst"; then
    cp "$abi_src" "$abi_dst"
    say "abi header: include/uapi/linux/vhost_blk.h -> linux-headers/linux/vhost_blk.h"
fi
[ $source_only -eq 1 ] && { say "source ready in $SRC"; exit 0; }

# ---------------------------------------------------------------- 4. configure

export CCACHE_DIR=${CCACHE_DIR:-$CACHE/ccache}
# Hits across clones: no cwd in the hash, absolute paths made relative.
export CCACHE_NOHASHDIR=1 CCACHE_BASEDIR=/
command -v ccache >/dev/null || die "ccache is missing: run scripts/install-deps.sh"

CONF=(--target-list=x86_64-softmmu --without-default-features
      --disable-docs --disable-user --disable-guest-agent
      # for tests/qtest/vhost-user-blk-test.c in qos-test, which QEMU's
      # meson builds only with both (ninja builds no tool: we name the
      # targets)
      --enable-tools --enable-vhost-user-blk-server
      --disable-werror --enable-kvm --enable-vhost-user --enable-vhost-kernel
      --enable-linux-aio --enable-linux-io-uring
      "--cc=ccache gcc" "--host-cc=ccache gcc")
conf_id=$(printf '%s\n' "$SRC" "${CONF[@]}" | sha256sum | cut -d' ' -f1)
# Same depth as the source dir ($CACHE/qemu-src/VERSION): the compile
# lines hold the relative path between them, which ccache hashes.
BUILD=${QEMU_BUILD_DIR:-$CACHE/qemu-build/$ver_noepoch-${conf_id:0:12}}
mkdir -p "$BUILD"
if [ ! -f "$BUILD/build.ninja" ] || [ "$(cat "$BUILD/.vhost-blk-conf" 2>/dev/null)" != "$conf_id" ]; then
    say "configuring in $BUILD"
    rm -rf "$BUILD"
    mkdir -p "$BUILD"
    (cd "$BUILD" && "$SRC/configure" "${CONF[@]}" > configure.log 2>&1) ||
        { tail -n 30 "$BUILD/configure.log" >&2; die "configure failed (log: $BUILD/configure.log)"; }
    echo "$conf_id" > "$BUILD/.vhost-blk-conf"
fi

# ---------------------------------------------------------------- 5. build

# qos-test is QEMU's qtest driver (libqos plus the device tests, among
# them tests/qtest/vhost-user-blk-test.c): test-qemu-qtest.sh runs its
# vhost-user-blk cases against vhost-blkd.  81 more C files, built in the
# same ninja call (no second lock, one ccache pass).
TARGETS=(qemu-system-x86_64 tests/qtest/qos-test)
say "ninja -C $BUILD -j $JOBS ${TARGETS[*]}"
start=$(date +%s)
set +e
ninja -C "$BUILD" -j "$JOBS" "${TARGETS[@]}" 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\] '
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || die "ninja failed"
say "built ${TARGETS[*]} in $BUILD in $(( $(date +%s) - start ))s"
# ---------------------------------------------------------------- 6. firmware

# Debian's qemu source is dfsg: no firmware blobs, so the binary finds no
# bios-256k.bin and runs only with -L (libvirt gives none: "could not load
# PC BIOS").  QEMU run from its build tree looks in
# qemu-bundle/<firmwarepath> next to the binary; link there what Debian's
# own build finds through --firmwarepath=/usr/share/qemu:/usr/share/seabios:
# /usr/lib/ipxe/qemu (first one wins), from seabios, qemu-system-data and
# ipxe-qemu.  Links, not a configure flag: a change of the flags would
# rebuild everything, and the packages stay the source of truth.
fwpath=$(sed -n 's/^#define CONFIG_QEMU_FIRMWAREPATH "\([^"]*\)".*/\1/p' "$BUILD/config-host.h")
[ -n "$fwpath" ] || die "no CONFIG_QEMU_FIRMWAREPATH in $BUILD/config-host.h"
fwdir=$BUILD/qemu-bundle$fwpath
mkdir -p "$fwdir"
nfw=0
for d in /usr/share/qemu /usr/share/seabios /usr/lib/ipxe/qemu; do
    [ -d "$d" ] || continue
    for f in "$d"/*; do
        [ -e "$f" ] || continue
        t=$fwdir/${f##*/}
        if [ ! -e "$t" ] && [ ! -L "$t" ]; then
            ln -s "$f" "$t"
        fi
        nfw=$((nfw + 1))
    done
done
[ -e "$fwdir/bios-256k.bin" ] ||
    die "no bios-256k.bin in /usr/share/seabios: install seabios (scripts/install-deps.sh)"
say "firmware: $fwdir links Debian's firmware ($nfw files from qemu-system-data, seabios, ipxe-qemu)"

# Into <tree>/build/qemu/ (where the tests look) when the build dir is
# elsewhere; qos-test also when it is there, at the top of build/qemu.
mkdir -p "$ROOT/build/qemu"
for t in qemu-system-x86_64 tests/qtest/qos-test; do
    [ "$BUILD/$t" != "$ROOT/build/qemu/${t##*/}" ] || continue
    ln -sfn "$BUILD/$t" "$ROOT/build/qemu/${t##*/}"
    say "linked $ROOT/build/qemu/${t##*/} -> $BUILD/$t"
done
