#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Build the functional-test guest (ELF vmlinux + initramfs with busybox,
# a static fio, the virtio modules, /init and the job scripts) from Debian
# packages only, cache it outside the clone and print its directory.
#
# Usage: scripts/guest/build-assets.sh [--force]
#   stdout: the asset directory (contains vmlinux, initramfs.img, fio, info)
#   stderr: progress log
# Env:
#   VHOST_BLK_CACHE   cache root (default /var/cache/vhost-blk); assets go to
#                     $VHOST_BLK_CACHE/guest/<key>
#   VHOST_BLK_KERNEL_PKG  pin a linux-image package instead of the newest
#                     linux-image-cloud-amd64 dependency
#
# The key is made of the kernel package version, the fio, busybox and
# util-linux versions and a hash of /init, the job scripts and this script.
# Version look-ups are memoised against apt's package lists, so a cache hit
# takes well under a second.  The kernel and the static fio are cached on
# their own (by version), so editing a job only rebuilds the initramfs.
# Needs root the first time (may add a deb-src entry for fio's source).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
INIT_SCRIPT=$SCRIPT_DIR/init
JOBS_DIR=$SRC_ROOT/tests/functional/guest-jobs
CACHE_ROOT=${VHOST_BLK_CACHE:-/var/cache/vhost-blk}/guest
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

# Modules /init loads, in the order of this list after dependency sorting.
WANT_MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev
              virtio_pci virtio_blk)
UTIL_LINUX_TOOLS=(blkdiscard fallocate)
FIO_CONFIGURE_FLAGS=(--build-static --disable-native --disable-numa
    --disable-rdma --disable-rados --disable-rbd --disable-http
    --disable-gfapi --disable-pmem --disable-lex --disable-xnvme
    --disable-libzbc --disable-tcmalloc --disable-dfs --disable-libnfs
    --disable-shm)

log() { echo "build-assets: $*" >&2; }
die() { echo "build-assets: error: $*" >&2; exit 1; }

candidate_version() {
    apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2; exit }'
}

# ---- resolve versions (cheap: this is the whole cost of a cache hit) ----
# apt-cache takes about a second per call here (no binary package cache), so
# the answers are memoised against the state of apt's package lists.
resolve_versions() {
    kpkg=${VHOST_BLK_KERNEL_PKG:-}
    if [ -z "$kpkg" ]; then
        kpkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
               awk '/Depends: linux-image-[0-9]/ { print $2 }' | sort -V | tail -n1)
    fi
    [ -n "$kpkg" ] || die "cannot resolve linux-image-cloud-amd64 (run apt-get update)"
    kver=$(candidate_version "$kpkg")
    [ -n "$kver" ] && [ "$kver" != "(none)" ] || die "no candidate for $kpkg"
    fiover=$(candidate_version fio)
    [ -n "$fiover" ] && [ "$fiover" != "(none)" ] || die "no candidate for fio"
}
apt_state=$( { echo "${VHOST_BLK_KERNEL_PKG:-}";
               stat -c '%n %Y %s' /var/lib/apt/lists/*Packages* \
                   /etc/apt/preferences /etc/apt/preferences.d/* 2>/dev/null || true; } |
             sha256sum | cut -c1-16)
MEMO=$CACHE_ROOT/.resolved-$apt_state
if [ $FORCE -eq 0 ] && [ -f "$MEMO" ]; then
    read -r kpkg kver fiover < "$MEMO"
else
    resolve_versions
    mkdir -p "$CACHE_ROOT"
    rm -f "$CACHE_ROOT"/.resolved-*
    echo "$kpkg $kver $fiover" > "$MEMO.$$" && mv "$MEMO.$$" "$MEMO"
fi
bbver=$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null) ||
    die "busybox-static is not installed (run scripts/install-deps.sh)"
ulver=$(dpkg-query -W -f='${Version}' util-linux 2>/dev/null) ||
    die "util-linux is not installed"

[ -f "$INIT_SCRIPT" ] || die "missing $INIT_SCRIPT"
ihash=$( { cat "$INIT_SCRIPT" "${BASH_SOURCE[0]}";
           for j in "$JOBS_DIR"/*.sh; do echo "== ${j##*/}"; cat "$j"; done; } |
         sha256sum | cut -c1-12)
sane() { echo "$1" | tr -c 'A-Za-z0-9.+\n-' '_'; }
kname=${kpkg#linux-image-}
key="k$(sane "$kname")_$(sane "$kver")-fio$(sane "$fiover")-bb$(sane "$bbver")-ul$(sane "$ulver")-$ihash"
OUT=$CACHE_ROOT/$key

if [ $FORCE -eq 0 ] && [ -f "$OUT/.complete" ]; then
    echo "$OUT"
    exit 0
fi

# ---- slow path: serialise builders, build in temp dirs, rename into place ----
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.lock"
flock 9
if [ $FORCE -eq 0 ] && [ -f "$OUT/.complete" ]; then
    echo "$OUT"
    exit 0
fi

for tool in dpkg-deb lz4 xz zstd cpio gzip modinfo strip; do
    command -v "$tool" >/dev/null || die "missing tool $tool (run scripts/install-deps.sh)"
done

WORK=$(mktemp -d "$CACHE_ROOT/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# ldd exits 1 on a static file, so look at its words, not its status.
file_is_static() {
    local out
    out=$(ldd "$1" 2>&1 || true)
    case $out in *"not a dynamic executable"*) return 0 ;; esac
    return 1
}

# -- kernel: vmlinux + modules, cached per kernel package version --
KDIR=$CACHE_ROOT/kernel-$(sane "$kname")_$(sane "$kver")

# Print the ELF kernel hidden in bzImage $1 to stdout.  The setup header
# says where the compressed payload starts (after the real-mode setup
# sectors, at payload_offset) and how long it is; its first bytes tell the
# compression.
bzimage_to_elf() {
    local img=$1 sects poff plen off magic
    [ "$(od -An -c -j 514 -N4 "$img" | tr -d ' ')" = "HdrS" ] ||
        die "$img is not a bzImage"
    sects=$(od -An -tu1 -j $((0x1f1)) -N1 "$img" | tr -d ' ')
    [ "$sects" -eq 0 ] && sects=4
    poff=$(od -An -tu4 -j $((0x248)) -N4 "$img" | tr -d ' ')
    plen=$(od -An -tu4 -j $((0x24c)) -N4 "$img" | tr -d ' ')
    off=$(( (sects + 1) * 512 + poff ))
    magic=$(od -An -tx1 -j "$off" -N6 "$img" | tr -d ' \n')
    local dec
    case $magic in
        28b52ffd*)   dec="zstd -dcq" ;;
        fd377a585a00) dec="xz -dcq" ;;
        02214c18*)   dec="lz4 -dcq" ;;
        1f8b*)       dec="gzip -dcq" ;;
        5d0000*)     dec="xz -dcq --format=lzma" ;;
        425a68*)     dec="bzip2 -dcq" ;;
        *) die "unknown kernel compression (payload magic $magic)" ;;
    esac
    log "kernel payload: offset $off, $plen bytes, ${dec%% *}"
    # The payload ends with the decompressed size, which some decompressors
    # report as trailing garbage: judge the result by its ELF header.
    tail -c +$((off + 1)) "$img" | head -c "$plen" | $dec 2>/dev/null || true
}

# Emit the module file names of $@ (and their dependencies) in load order.
module_order() {
    local moddir=$1; shift
    local -A seen=()
    local -a order=()
    visit() {
        local m=${1//-/_} f deps d
        [ -n "${seen[$m]:-}" ] && return 0
        seen[$m]=1
        f=$(find "$moddir" -name "$m.ko" -o -name "${m//_/-}.ko" | head -n1)
        if [ -z "$f" ]; then
            if grep -qE "/(${m}|${m//_/-})\.ko" "$moddir/modules.builtin" 2>/dev/null; then
                log "module $m is built in"
            else
                log "module $m not in this kernel, skipped"
            fi
            return 0
        fi
        deps=$(modinfo -F depends "$f")
        for d in ${deps//,/ }; do visit "$d"; done
        order+=("$f")
    }
    for m in "$@"; do visit "$m"; done
    printf '%s\n' "${order[@]}"
}

if [ ! -f "$KDIR/.complete" ] || [ $FORCE -eq 1 ]; then
    log "fetching $kpkg=$kver"
    (cd "$WORK" && apt-get download -q "$kpkg=$kver" >&2 2>/dev/null) ||
        (cd "$WORK" && apt-get download "$kpkg=$kver" >&2) ||
        die "apt-get download $kpkg failed"
    mkdir -p "$WORK/kpkg"
    dpkg-deb -x "$WORK"/"$kpkg"_*.deb "$WORK/kpkg"
    KTMP=$WORK/kernel
    mkdir -p "$KTMP/modules"
    bzimage_to_elf "$WORK"/kpkg/boot/vmlinuz-* > "$KTMP/vmlinux"
    [ "$(head -c4 "$KTMP/vmlinux" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] ||
        die "decompressed kernel is not an ELF file"
    moddir=$(echo "$WORK"/kpkg/lib/modules/*)
    [ -d "$moddir" ] || die "no modules in $kpkg"
    # Decompress any .ko.xz / .ko.zst so insmod and modinfo can read them.
    find "$moddir" -name '*.ko.xz' -exec xz -dq {} +
    find "$moddir" -name '*.ko.zst' -exec zstd -dq --rm {} + 2>/dev/null || true
    : > "$KTMP/modules/order"
    while read -r f; do
        cp "$f" "$KTMP/modules/"
        basename "$f" >> "$KTMP/modules/order"
    done < <(module_order "$moddir" "${WANT_MODULES[@]}")
    log "modules: $(tr '\n' ' ' < "$KTMP/modules/order")"
    echo "$kpkg $kver" > "$KTMP/version"
    touch "$KTMP/.complete"
    rm -rf "$KDIR"
    mv "$KTMP" "$KDIR"
fi

# -- static fio, cached per fio version and configure flags --
fhash=$(echo "${FIO_CONFIGURE_FLAGS[*]}" | sha256sum | cut -c1-8)
FDIR=$CACHE_ROOT/fio-$(sane "$fiover")-$fhash
if [ ! -f "$FDIR/.complete" ] || [ $FORCE -eq 1 ]; then
    # apt-get source needs a deb-src entry; add Debian's (deb822) if none.
    if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        log "adding deb-src for bookworm (/etc/apt/sources.list.d/vhost-blk-src.sources)"
        cat > /etc/apt/sources.list.d/vhost-blk-src.sources <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
        apt-get update -qq >&2
    fi
    log "fetching fio source $fiover"
    mkdir -p "$WORK/fiosrc"
    (cd "$WORK/fiosrc" && apt-get source -q "fio=$fiover" >&2 2>/dev/null) ||
        { apt-get update -qq >&2;
          (cd "$WORK/fiosrc" && apt-get source -q "fio=$fiover" >&2); } ||
        die "apt-get source fio failed"
    fsrc=$(find "$WORK/fiosrc" -maxdepth 1 -type d -name 'fio-*' | head -n1)
    [ -d "$fsrc" ] || die "fio source not unpacked"
    log "building static fio (a minute)"
    (cd "$fsrc" && ./configure "${FIO_CONFIGURE_FLAGS[@]}" > "$WORK/fio-configure.log" 2>&1) ||
        { tail -n 30 "$WORK/fio-configure.log" >&2; die "fio configure failed"; }
    (cd "$fsrc" && make -j"${VHOST_BLK_JOBS:-2}" > "$WORK/fio-make.log" 2>&1) ||
        { tail -n 30 "$WORK/fio-make.log" >&2; die "fio build failed"; }
    file_is_static "$fsrc/fio" ||
        die "fio is not static: $(ldd "$fsrc/fio" 2>&1 | head -n3)"
    mkdir -p "$WORK/fio"
    strip -o "$WORK/fio/fio" "$fsrc/fio"
    echo "fio $fiover ${FIO_CONFIGURE_FLAGS[*]}" > "$WORK/fio/version"
    touch "$WORK/fio/.complete"
    rm -rf "$FDIR"
    mv "$WORK/fio" "$FDIR"
fi

# -- initramfs --
log "assembling initramfs"
R=$WORK/root
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,jobs,lib/modules}
cp /bin/busybox "$R/bin/busybox"
file_is_static "$R/bin/busybox" || die "/bin/busybox is not static (install busybox-static)"
for a in $(/bin/busybox --list-full); do
    [ -e "$R/$a" ] || ln -s /bin/busybox "$R/$a"
done
cp "$FDIR/fio" "$R/bin/fio"
# busybox's blkdiscard has no -z (BLKZEROOUT, i.e. WRITE_ZEROES) and its
# fallocate no -z/-p: ship util-linux's, with the libraries they load.
for b in "${UTIL_LINUX_TOOLS[@]}"; do
    src=$(command -v "$b") || die "missing $b (util-linux)"
    dst=$R/usr/sbin/$b
    [ "${src#/usr/bin/}" != "$src" ] && dst=$R/usr/bin/$b
    rm -f "$R/bin/$b" "$R/sbin/$b" "$R/usr/bin/$b" "$R/usr/sbin/$b"
    cp "$src" "$dst"
    for lib in $(ldd "$src" | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }'); do
        mkdir -p "$R$(dirname "$lib")"
        [ -e "$R$lib" ] || cp -L "$lib" "$R$lib"
    done
done
cp "$KDIR"/modules/*.ko "$KDIR/modules/order" "$R/lib/modules/"
install -m 0755 "$INIT_SCRIPT" "$R/init"
for j in "$JOBS_DIR"/*.sh; do
    [ -e "$j" ] && install -m 0755 "$j" "$R/jobs/"
done
# A console node lets the kernel give /init its stdio before devtmpfs.
mknod -m 600 "$R/dev/console" c 5 1 2>/dev/null || true

A=$WORK/assets
mkdir -p "$A"
(cd "$R" && find . -print0 | LC_ALL=C sort -z |
    cpio --null -o -H newc --quiet -R 0:0) | gzip -9n > "$A/initramfs.img"
# vmlinux is large (~50 MB): hard-link it from the kernel cache when we can.
ln "$KDIR/vmlinux" "$A/vmlinux" 2>/dev/null || cp "$KDIR/vmlinux" "$A/vmlinux"
ln "$FDIR/fio" "$A/fio" 2>/dev/null || cp "$FDIR/fio" "$A/fio"
cat > "$A/info" <<EOF
kernel=$kpkg $kver
fio=$fiover
busybox=$bbver
util-linux=$ulver ($(echo "${UTIL_LINUX_TOOLS[@]}"))
modules=$(tr '\n' ' ' < "$KDIR/modules/order")
initramfs_bytes=$(stat -c %s "$A/initramfs.img")
jobs=$(cd "$JOBS_DIR" && ls *.sh 2>/dev/null | sed 's/\.sh$//' | tr '\n' ' ')
EOF
touch "$A/.complete"
rm -rf "$OUT"
mv "$A" "$OUT"
# Prune initramfs sets of old keys: keep the 4 newest, and anything used in
# the last hour (another checkout may still be running with it).
ls -dt "$CACHE_ROOT"/k*/ 2>/dev/null | tail -n +5 | while read -r d; do
    if [ -n "$(find "$d" -maxdepth 0 -mmin +60)" ]; then rm -rf "$d"; fi
done
log "assets ready in $OUT ($(stat -c %s "$OUT/initramfs.img") byte initramfs)"
echo "$OUT"
