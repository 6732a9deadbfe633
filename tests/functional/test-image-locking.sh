#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Image locking against QEMU's own tools, no guest (docs/user-guide.md,
# "Image locking"): a raw node with locking=on that vhost-blkd writes
# refuses qemu-io's writer and qemu-img convert's reader with QEMU's
# messages, while their -U (force-share) forms work; a second vhost-blkd
# with locking=on is refused, naming the image; a qemu-io process that
# holds the image open for writing makes vhost-blkd with locking=on
# refuse it; locking=auto (the default) and off on a raw export keep the
# old behaviour (no locks, QEMU's tools may write along); the locks go
# with the daemon.  Waits are on conditions (a socket, a lock in
# /proc/locks), never on time.
set -u
. "$(dirname "$0")/lib.sh"

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap 'exec 7>&- 2>/dev/null; vb_cleanup' EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
bench=$(vb_bin vhost-blk-bench) || vb_bail "vhost-blk-bench is not built in $VHOST_BLK_BUILD"
command -v qemu-io >/dev/null && command -v qemu-img >/dev/null ||
    vb_skip_all "qemu-io and qemu-img are needed (Debian: qemu-utils)"
S=$VB_TMP
img=$(vb_mkimg disk 16M)

# expect_fail NAME WANT CMD...: CMD exits non-zero (within 30 s) and its
# output has WANT.
expect_fail() {
    local name=$1 want=$2 out rc
    shift 2
    out=$(timeout 30 "$@" 2>&1)
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF -- "$want" <<< "$out"; then
        vb_ok "$name"
    else
        vb_not_ok "$name" "rc=$rc: $out"
    fi
}

# expect_ok NAME CMD...: CMD exits 0.
expect_ok() {
    local name=$1 out
    shift
    if out=$(timeout 30 "$@" 2>&1); then
        vb_ok "$name"
    else
        vb_not_ok "$name" "$out"
    fi
}

# locked BYTE: some process holds a lock on byte BYTE of $img
# (/proc/locks: "1: OFDLCK ADVISORY READ -1 MAJ:MIN:INODE START END").
locked() {
    awk -v ino=":$(stat -c %i "$img")" -v b="$1" \
        '$2 != "->" && substr($6, length($6) - length(ino) + 1) == ino &&
         $7 <= b && ($8 == "EOF" || $8 >= b) { f = 1 }
         END { exit !f }' /proc/locks
}

# wait_locked BYTE: until some process holds byte BYTE (10 s at most).
wait_locked() {
    local n=0
    until locked "$1"; do
        [ $n -ge 200 ] && return 1
        sleep 0.05
        n=$((n + 1))
    done
}

# A short verified run through the export at SOCK.
bench_ok() {
    expect_ok "$1" "$bench" --socket "$2" --ios 200 --rw randrw --iodepth 4 \
        --verify
}

# ---- vhost-blkd writes a raw node with locking=on -------------------------
vb_daemon_start blkd-on "$S/on.sock" "$blkd" \
    --blockdev "driver=file,node-name=f,filename=$img,locking=on" \
    --export "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path=$S/on.sock,writable=on" ||
    vb_bail "vhost-blkd with locking=on did not start"
on_pid=$VB_LAST_PID
vb_check "the export holds QEMU's write byte (101)" locked 101
expect_fail "qemu-io's writer is refused" 'Failed to get "write" lock' \
    qemu-io -f raw -c 'write 0 4k' "$img"
expect_fail "qemu-img convert's reader is refused" \
    'Failed to get shared "write" lock' \
    qemu-img convert -f raw -O raw "$img" "$S/copy.img"
expect_ok "qemu-img info -U works" qemu-img info -U "$img"
expect_ok "qemu-img convert -U works" \
    qemu-img convert -U -f raw -O raw "$img" "$S/copy.img"
expect_fail "a second vhost-blkd with locking=on is refused (--export)" \
    "Failed to get \"write\" lock on '$img'" \
    "$blkd" --export "socket=$S/second.sock,file=$img,locking=on"
expect_fail "a second vhost-blkd with locking=on is refused (--blockdev)" \
    "$img" "$blkd" --blockdev "driver=file,node-name=g,filename=$img,locking=on" \
    --export "type=vhost-user-blk,id=e2,node-name=g,addr.type=unix,addr.path=$S/second.sock,writable=on"
bench_ok "I/O through the locked export" "$S/on.sock"
vb_stop "$on_pid"
expect_ok "the locks went with the daemon: qemu-io writes" \
    qemu-io -f raw -c 'write 0 4k' "$img"

# ---- a qemu-io process holds the image open for writing -------------------
mkfifo "$S/qio.in"
qemu-io -f raw "$img" < "$S/qio.in" > "$S/qio.log" 2>&1 &
qio_pid=$!
VB_PIDS+=("$qio_pid")
exec 7> "$S/qio.in"     # its input stays open: it keeps the image
if wait_locked 101; then
    vb_ok "qemu-io holds the image (its write byte, 101)"
else
    vb_not_ok "qemu-io holds the image" "$(cat "$S/qio.log")"
fi
expect_fail "vhost-blkd with locking=on refuses it (--export), naming it" \
    "Failed to get shared \"write\" lock on '$img'" \
    "$blkd" --export "socket=$S/refused.sock,file=$img,locking=on"
expect_fail "vhost-blkd with locking=on refuses it (--blockdev)" \
    "is another process" \
    "$blkd" --blockdev "driver=file,node-name=f,filename=$img,locking=on" \
    --export "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path=$S/refused.sock,writable=on"
vb_check "the refused daemons left no socket" test ! -e "$S/refused.sock"
if vb_daemon_start blkd-auto "$S/auto.sock" "$blkd" \
        --export "socket=$S/auto.sock,file=$img"; then
    vb_ok "locking=auto on a raw export: served as before"
    bench_ok "I/O next to qemu-io (auto)" "$S/auto.sock"
    vb_stop "$VB_LAST_PID"
else
    vb_not_ok "locking=auto on a raw export: served as before"
fi
if vb_daemon_start blkd-off "$S/off.sock" "$blkd" \
        --blockdev "driver=file,node-name=f,filename=$img,locking=off" \
        --export "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path=$S/off.sock,writable=on"; then
    vb_ok "locking=off: served next to qemu-io"
    vb_stop "$VB_LAST_PID"
else
    vb_not_ok "locking=off: served next to qemu-io"
fi
echo quit >&7
exec 7>&-
wait "$qio_pid" 2>/dev/null

# ---- locking=auto on a raw export: QEMU's tools write along ---------------
vb_daemon_start blkd-auto2 "$S/auto2.sock" "$blkd" \
    --export "socket=$S/auto2.sock,file=$img" ||
    vb_bail "vhost-blkd (locking=auto) did not start"
vb_check "auto on a raw export holds no lock" eval '! locked 101 && ! locked 201'
expect_ok "qemu-io writes while a raw export serves it (auto)" \
    qemu-io -f raw -c 'write 0 4k' "$img"
vb_stop "$VB_LAST_PID"

vb_done
