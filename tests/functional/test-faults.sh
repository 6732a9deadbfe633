#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# I/O faults without a guest: ENOSPC from a genuinely full ext4 filesystem
# (16 MiB image on a loop device) reaches the front-end as IOERR while the
# daemon keeps serving, and writes work again once space is freed; and an
# acknowledged FLUSH means the image was fdatasync'ed (strace for
# aio=threads, kernel tracepoints for aio=io_uring, whose fsync is an
# IORING_OP_FSYNC that strace cannot see).  The front-end is vb-io (the
# front-end library driven from the command line, one session per call).
set -u
. "$(dirname "$0")/lib.sh"

# No guest here: a temp dir and our own cleanup trap are all we need.
VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
echo "# tmp: $VB_TMP"

MNT=
LOOP=
TRACEFS=
TRACE_MOUNTED=0
TRACE_INST=
STRACE_PID=

faults_cleanup() {
    local p
    [ -n "$STRACE_PID" ] && kill "$STRACE_PID" 2>/dev/null && wait "$STRACE_PID" 2>/dev/null
    # daemons first: they hold the image open on the mount
    for p in "${VB_PIDS[@]}"; do
        vb_stop "$p"
    done
    if [ -n "$TRACE_INST" ] && [ -d "$TRACE_INST" ]; then
        echo 0 > "$TRACE_INST/tracing_on" 2>/dev/null
        echo 0 > "$TRACE_INST/events/enable" 2>/dev/null
        rmdir "$TRACE_INST" 2>/dev/null
    fi
    [ "$TRACE_MOUNTED" = 1 ] && umount "$TRACEFS" 2>/dev/null
    if [ -n "$MNT" ] && mountpoint -q "$MNT"; then
        umount "$MNT" || umount -l "$MNT"
    fi
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
    vb_cleanup
}
trap faults_cleanup EXIT
trap 'exit 130' INT TERM

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
vbio=$(vb_bin vb-io) || vb_bail "vb-io is not built in $VHOST_BLK_BUILD"

# run_io NAME SOCK CMD...: vb-io; ok if every command had its expected status
run_io() {
    local name=$1 sock=$2
    shift 2
    if "$vbio" "$sock" "$@" > "$VB_TMP/io.out" 2>&1; then
        vb_ok "$name"
        sed 's/^/#   /' "$VB_TMP/io.out"
    else
        vb_not_ok "$name" "vb-io $*"
        sed 's/^/#   /' "$VB_TMP/io.out"
    fi
}

# start_blkd NAME SOCK EXPORT_KEYS: vhost-blkd with one export
start_blkd() {
    vb_daemon_start "$1" "$2" "$blkd" --export "socket=$2,$3"
}

# ---------------------------------------------------------------- ext4

# A 16 MiB ext4 on a loop device; skipped where loop devices or mounting
# are not permitted.
setup_fs() {
    local why
    for c in losetup mkfs.ext4 mount umount mountpoint; do
        command -v "$c" >/dev/null || { echo "$c not installed"; return 1; }
    done
    truncate -s 16M "$VB_TMP/fs.img"
    why=$(mkfs.ext4 -q -F -m 0 "$VB_TMP/fs.img" 2>&1) || { echo "mkfs.ext4: $why"; return 1; }
    LOOP=$(losetup -f --show "$VB_TMP/fs.img" 2>&1) || { why=$LOOP; LOOP=; echo "losetup: $why"; return 1; }
    MNT=$VB_TMP/mnt
    mkdir -p "$MNT"
    why=$(mount -t ext4 "$LOOP" "$MNT" 2>&1) || { MNT=; echo "mount: $why"; return 1; }
    return 0
}

free_kib() {
    df -k --output=avail "$MNT" | tail -n1 | tr -d ' '
}

FS_OK=0
if setup_fs > "$VB_TMP/fs.err"; then
    FS_OK=1
    echo "# ext4 on $LOOP mounted at $MNT, $(free_kib) KiB free"
else
    fs_err=$(cat "$VB_TMP/fs.err")
    echo "# no loop-mounted ext4: $fs_err"
fi

enospc_round() {
    local aio=$1 sock=$VB_TMP/enospc-$aio.sock img=$MNT/disk-$aio.img pid
    # a filler to delete later, then a sparse image larger than what is left
    dd if=/dev/zero of="$MNT/filler" bs=1M count=4 conv=fsync status=none
    truncate -s 64M "$img"
    echo "# aio=$aio: $(free_kib) KiB free for a 64 MiB sparse image"
    if ! start_blkd "enospc-$aio" "$sock" "file=$img,cache=none,aio=$aio"; then
        vb_not_ok "ENOSPC aio=$aio: vhost-blkd starts"
        return
    fi
    pid=$VB_LAST_PID
    # one session: fill until the filesystem is full (IOERR), reads of
    # what was written still work and verify, then free space and write
    # where the fill failed
    run_io "ENOSPC aio=$aio: fill ends in IOERR, reads work, writes work after freeing space" \
        "$sock" fill:0:1M:100 read:0:1M:100 read:2048:1M:101 flush=any \
        "unlink:$MNT/filler" write:F:1M:7 read:F:1M:7
    grep -q "then ioerr at sector" "$VB_TMP/io.out" ||
        vb_not_ok "ENOSPC aio=$aio: the fill stopped on IOERR" "$(cat "$VB_TMP/io.out")"
    vb_check "ENOSPC aio=$aio: vhost-blkd still running" kill -0 "$pid"
    # a new session on the same daemon works
    run_io "ENOSPC aio=$aio: a new session reads and writes" "$sock" \
        read:0:1M:100 write:8:4096:9 read:8:4096:9 flush
    vb_stop "$pid"
    rm -f "$img" "$MNT/filler"
    sync -f "$MNT" 2>/dev/null
}

if [ "$FS_OK" = 1 ]; then
    for aio in io_uring native threads; do
        enospc_round "$aio"
    done
else
    vb_skip "ENOSPC from a full ext4" "$fs_err"
fi

# ---------------------------------------------------------------- flush

# The image for the flush checks: on the ext4 if we have it (the ext4
# tracepoint then sees the sync), else in $VB_TMP.
if [ "$FS_OK" = 1 ]; then
    FLUSH_IMG=$MNT/flush.img
else
    FLUSH_IMG=$VB_TMP/flush.img
fi
truncate -s 16M "$FLUSH_IMG"
FLUSH_INO=$(stat -c %i "$FLUSH_IMG")

# strace: aio=threads runs fdatasync(2) in a pool thread
if command -v strace >/dev/null; then
    sock=$VB_TMP/flush-threads.sock
    if start_blkd flush-threads "$sock" "file=$FLUSH_IMG,cache=none,aio=threads"; then
        pid=$VB_LAST_PID
        strace -f -y -e trace=fdatasync,fsync -p "$pid" -o "$VB_TMP/strace.log" \
            2> "$VB_TMP/strace.err" &
        STRACE_PID=$!
        n=0
        until grep -q attached "$VB_TMP/strace.err" 2>/dev/null || [ $n -ge 100 ]; do
            sleep 0.05
            n=$((n + 1))
        done
        if grep -q attached "$VB_TMP/strace.err"; then
            run_io "flush aio=threads: write + write (no flush)" "$sock" \
                write:0:4096:1 write:8:4096:2
            sleep 0.2
            before=$(grep -c "fdatasync(.*$(basename "$FLUSH_IMG").*= 0" "$VB_TMP/strace.log")
            run_io "flush aio=threads: FLUSH acknowledged" "$sock" flush
            sleep 0.2
            kill "$STRACE_PID" 2>/dev/null
            wait "$STRACE_PID" 2>/dev/null
            STRACE_PID=
            after=$(grep -c "fdatasync(.*$(basename "$FLUSH_IMG").*= 0" "$VB_TMP/strace.log")
            sed 's/^/#   strace: /' "$VB_TMP/strace.log" | head -n 10
            vb_check_eq "flush aio=threads: no fdatasync before the FLUSH (cache=none)" "$before" 0
            if [ "$after" -ge 1 ]; then
                vb_ok "flush aio=threads: the FLUSH ran fdatasync on the image ($after call(s), returned 0)"
            else
                vb_not_ok "flush aio=threads: the FLUSH ran fdatasync on the image" \
                    "strace saw: $(tr '\n' ' ' < "$VB_TMP/strace.log")"
            fi
        else
            vb_skip "flush aio=threads under strace" "strace could not attach: $(cat "$VB_TMP/strace.err")"
            kill "$STRACE_PID" 2>/dev/null
            wait "$STRACE_PID" 2>/dev/null
            STRACE_PID=
        fi
        vb_stop "$pid"
    else
        vb_not_ok "flush aio=threads: vhost-blkd starts"
    fi
else
    vb_skip "flush aio=threads under strace" "strace not installed"
fi

# tracepoints: io_uring:io_uring_submit_req shows the FSYNC opcode;
# ext4:ext4_sync_file_enter (image on ext4 only) shows datasync=1 for the
# image's inode, whichever engine called it.
setup_trace() {
    TRACEFS=/sys/kernel/tracing
    if [ ! -d "$TRACEFS/instances" ]; then
        mount -t tracefs nodev "$TRACEFS" 2>/dev/null || return 1
        TRACE_MOUNTED=1
    fi
    [ -d "$TRACEFS/events/io_uring/io_uring_submit_req" ] || return 1
    TRACE_INST=$TRACEFS/instances/vb-faults-$$
    mkdir "$TRACE_INST" 2>/dev/null || { TRACE_INST=; return 1; }
    return 0
}

# trace_flush AIO: FLUSH through the engine AIO with the tracepoints on
trace_flush() {
    local aio=$1 sock=$VB_TMP/flush-trace-$aio.sock pid
    if ! start_blkd "flush-trace-$aio" "$sock" "file=$FLUSH_IMG,cache=none,aio=$aio"; then
        vb_not_ok "flush aio=$aio: vhost-blkd starts"
        return
    fi
    pid=$VB_LAST_PID
    # warm up (engine and ring created) before tracing
    "$vbio" "$sock" write:0:4096:3 > /dev/null
    echo > "$TRACE_INST/trace"
    echo "common_pid >= $pid && common_pid < $((pid + 64))" \
        > "$TRACE_INST/events/io_uring/io_uring_submit_req/filter" 2>/dev/null
    echo 1 > "$TRACE_INST/events/io_uring/io_uring_submit_req/enable"
    if [ "$FS_OK" = 1 ]; then
        echo "ino == $FLUSH_INO" > "$TRACE_INST/events/ext4/ext4_sync_file_enter/filter"
        echo 1 > "$TRACE_INST/events/ext4/ext4_sync_file_enter/enable"
    fi
    echo 1 > "$TRACE_INST/tracing_on"
    run_io "flush aio=$aio: write + FLUSH acknowledged under tracing" "$sock" \
        write:8:4096:4 flush
    echo 0 > "$TRACE_INST/tracing_on"
    echo 0 > "$TRACE_INST/events/enable"
    cp "$TRACE_INST/trace" "$VB_TMP/trace-$aio.txt"
    grep -v '^#' "$VB_TMP/trace-$aio.txt" | sed 's/^/#   trace: /' | head -n 8
    if [ "$aio" = io_uring ]; then
        vb_check "flush aio=io_uring: an IORING_OP_FSYNC was submitted" \
            grep -q "opcode FSYNC" "$VB_TMP/trace-$aio.txt"
    fi
    if [ "$FS_OK" = 1 ]; then
        vb_check "flush aio=$aio: ext4 synced the image with datasync=1" \
            grep -q "ino $FLUSH_INO .*datasync 1" "$VB_TMP/trace-$aio.txt"
    fi
    vb_stop "$pid"
}

if setup_trace; then
    trace_flush io_uring
    trace_flush threads
else
    vb_skip "flush aio=io_uring via tracepoints" "tracefs (io_uring events) not available"
fi

vb_done
