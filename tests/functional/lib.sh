# SPDX-License-Identifier: GPL-2.0-or-later
# Shared helpers for tests/functional/test-*.sh: temp dirs, images, backend
# daemons (qemu-storage-daemon or any socket server), guest runs and
# TAP-style reporting.  Source it; do not run it.
#
#   . "$(dirname "$0")/lib.sh"
#   vb_setup                       # temp dir, cleanup trap, guest assets
#   img=$(vb_mkimg disk 64M)
#   vb_qsd_start "$VB_TMP/s.sock" "$img" 2 || vb_bail "qsd did not start"
#   vb_check "fio verify" vb_guest -s "$VB_TMP/s.sock" -q 2 -j fio-verify vbsize=32M
#   vb_stop "$VB_LAST_PID"
#   vb_done                        # prints "N passed, N failed", sets status
#
# Environment:
#   VHOST_BLK_BUILD         build dir of this tree (default <tree>/build)
#   VHOST_BLK_QEMU          QEMU binary used by run-guest.sh
#   VHOST_BLK_GUEST_ASSETS  prebuilt guest assets (default: built/cached)
#   VB_KEEP=1               keep $VB_TMP (logs, images) after the test

VB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VB_FUNC=$VB_ROOT/tests/functional
VHOST_BLK_BUILD=${VHOST_BLK_BUILD:-$VB_ROOT/build}
export VHOST_BLK_BUILD

# Guest RAM of the TCG guests that live-migrate (-m and the memfd
# backend's size): 8 KiB short of 256 MiB on purpose.  QEMU 7.2 (Debian
# 12) syncs the migration dirty bitmap of a RAM block whose size is a
# multiple of 256 KiB (one bitmap word of 64 pages) through a fast path
# that clears the bits but does not re-arm TCG's write tracking
# (TLB_NOTDIRTY): a guest store through a TLB entry that was already
# writable is then never logged, and the destination resumes with a stale
# page (a lost spinlock release: hang; a corrupt list or stack: oops; a
# few migrations in a hundred, with or without vhost-blkd).  Any other
# size takes the per-page path, which re-arms the tracking.  Fixed in
# QEMU 9.0 ("physmem: Fix migration dirty bitmap coherency with TCG
# memory access", N. Piggin, 2024; the fast path came with aa8dc044772).
# Measured with
# tests/functional/migration-soak.sh --compare-ram (docs/architecture.md,
# "Dirty logging (live migration)").
VB_MIG_MEM=262136K

VB_PASSED=0
VB_FAILED=0
VB_SKIPPED=0
VB_N=0
VB_PIDS=()
VB_LAST_PID=
VB_GUEST_N=0
VB_GUEST_INFO=
VB_GUEST_PID=
VB_TMP=

# ---------------------------------------------------------------- setup

# vb_setup: make $VB_TMP, install the cleanup trap, build (or find cached)
# guest assets once and export them for every vb_guest call.
vb_setup() {
    VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
    trap vb_cleanup EXIT
    trap 'exit 130' INT TERM
    if [ -z "${VHOST_BLK_GUEST_ASSETS:-}" ]; then
        VHOST_BLK_GUEST_ASSETS=$("$VB_ROOT/scripts/guest/build-assets.sh") ||
            vb_bail "building the guest assets failed"
        export VHOST_BLK_GUEST_ASSETS
    fi
    echo "# tmp: $VB_TMP"
    echo "# guest assets: $VHOST_BLK_GUEST_ASSETS"
}

# vb_cleanup: stop every daemon started through this file, drop $VB_TMP.
vb_cleanup() {
    local p
    for p in "${VB_PIDS[@]}"; do
        vb_stop "$p"
    done
    if [ -n "$VB_TMP" ] && [ -d "$VB_TMP" ]; then
        if [ "${VB_KEEP:-0}" = 1 ] || [ "$VB_FAILED" -gt 0 ]; then
            echo "# logs kept in $VB_TMP"
        else
            rm -rf "$VB_TMP"
        fi
    fi
}

# vb_bail REASON: give up on the whole script (counts one failure).
vb_bail() {
    vb_not_ok "bail out: $*"
    vb_done
    exit 1
}

# vb_skip_all REASON: skip the whole script (e.g. a program is not built):
# prints "1..0 # SKIP REASON" and "0 passed, 0 failed", exits 0.
vb_skip_all() {
    echo "1..0 # SKIP $*"
    echo "0 passed, 0 failed"
    exit 0
}

# vb_mkimg NAME SIZE: create a sparse raw image $VB_TMP/NAME.img, print it.
vb_mkimg() {
    local f=$VB_TMP/$1.img
    rm -f "$f"
    truncate -s "$2" "$f" && echo "$f"
}

# vb_bin NAME: print the path of program NAME built in $VHOST_BLK_BUILD
# (searched at the top, in tools/ and contrib/, then anywhere); fails if it
# is not built.
vb_bin() {
    local c
    for c in "$VHOST_BLK_BUILD/$1" "$VHOST_BLK_BUILD/tools/$1" \
             "$VHOST_BLK_BUILD/contrib/$1"; do
        [ -x "$c" ] && [ -f "$c" ] && { echo "$c"; return 0; }
    done
    c=$(find "$VHOST_BLK_BUILD" -type f -name "$1" -perm -u+x 2>/dev/null | head -n1)
    [ -n "$c" ] && { echo "$c"; return 0; }
    return 1
}

# ---------------------------------------------------------------- daemons

# vb_wait_socket PATH [SECONDS=10] [PID]: wait until PATH is a listening
# socket; fails early if PID dies.
vb_wait_socket() {
    local path=$1 secs=${2:-10} pid=${3:-} n=0
    while [ ! -S "$path" ]; do
        [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
        [ "$n" -ge $((secs * 20)) ] && return 1
        sleep 0.05
        n=$((n + 1))
    done
    return 0
}

# vb_daemon_start NAME SOCK CMD [ARGS...]: run CMD in the background with
# output in $VB_TMP/NAME.log, wait for SOCK to appear, register it for
# cleanup.  Sets VB_LAST_PID.  Fails (and prints the log) if the socket
# does not appear within 10 s.
vb_daemon_start() {
    local name=$1 sock=$2
    shift 2
    rm -f "$sock"
    "$@" > "$VB_TMP/$name.log" 2>&1 &
    VB_LAST_PID=$!
    VB_PIDS+=("$VB_LAST_PID")
    if ! vb_wait_socket "$sock" 10 "$VB_LAST_PID"; then
        echo "# $name did not create $sock; its log:"
        sed 's/^/#   /' "$VB_TMP/$name.log"
        return 1
    fi
    return 0
}

# vb_check_discard LABEL NAME BLKD [GUEST_OPTS...]: serve a 64 MiB image
# with vhost-blkd (BLKD; log in $VB_TMP/NAME.log) to a guest (vb_guest plus
# GUEST_OPTS) that discards and write-zeroes a range and checks what it
# reads back; then check the image on the host: zeros there, and holes
# punched.  LABEL prefixes every test name ("" or "packed: ").
vb_check_discard() {
    local label=$1 name=$2 blkd=$3 sock img pid blocks
    shift 3
    sock=$VB_TMP/$name.sock
    img=$(vb_mkimg "$name" 64M)
    if ! vb_daemon_start "$name" "$sock" "$blkd" --log-level info \
            --export "socket=$sock,file=$img"; then
        vb_not_ok "${label}discard: vhost-blkd starts"
        return
    fi
    pid=$VB_LAST_PID
    vb_check "${label}blkdiscard -z reads back zeros, the rest untouched, blkdiscard succeeds" \
        vb_guest -s "$sock" "$@" -j discard vboffset=1M vblen=4M
    vb_stop "$pid"
    vb_check "${label}host: the discarded range of the image reads as zeros" \
        cmp -s -n $((4 << 20)) -i $((1 << 20)):0 "$img" /dev/zero
    blocks=$(stat -c %b "$img")
    vb_check "${label}host: discard punched holes (image uses $blocks blocks of 512 bytes)" \
        test "$blocks" -lt 8192
}

# vb_kill_restart_during_fio PREFIX SOCK [GUEST_OPTS...] -- DAEMON_CMD...:
# with DAEMON_CMD already serving SOCK (as $VB_LAST_PID, logged in
# $VB_TMP/PREFIX0.log), boot a 2-queue guest (vb_guest_bg -r, plus
# GUEST_OPTS) running a write+verify fio job, and once fio runs kill the
# daemon with SIGKILL and restart it on the same socket (log PREFIXn.log),
# up to four times, until a restarted daemon reports that it resubmitted
# in-flight requests (whether one was in flight at the kill is up to the
# scheduler).  Sets VB_RC_RESTARTED and VB_RC_REPLAYED (1 or 0) and
# VB_LAST_PID to the running daemon; the guest is $VB_GUEST_PID.
# VB_RC_SIZE: bytes each of the two fio jobs writes (default 96M).
vb_kill_restart_during_fio() {
    local prefix=$1 sock=$2 pid=$VB_LAST_PID n cycle glog
    local -a gopts=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        gopts+=("$1")
        shift
    done
    shift
    vb_guest_bg -r -s "$sock" -q 2 "${gopts[@]}" -j fio-verify \
        vbrw=randwrite vbsize="${VB_RC_SIZE:-96M}" vbnumjobs=2 vbiodepth=32 -t 240
    glog=$VB_TMP/guest-$VB_GUEST_N.log
    n=0
    until grep -q "VBTEST-LOG: fio" "$glog" 2>/dev/null || [ $n -ge 1200 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    sleep 1
    VB_RC_RESTARTED=1
    VB_RC_REPLAYED=0
    for cycle in 1 2 3 4; do
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        sleep 0.5
        if ! vb_daemon_start "$prefix$cycle" "$sock" "$@"; then
            VB_RC_RESTARTED=0
            break
        fi
        pid=$VB_LAST_PID
        sleep 2
        if grep -q "resubmitting" "$VB_TMP/$prefix$cycle.log"; then
            VB_RC_REPLAYED=1
            break
        fi
        kill -0 "$VB_GUEST_PID" 2>/dev/null || break
    done
    VB_LAST_PID=$pid
}

# vb_qsd_start SOCK IMG NUM_QUEUES [EXPORT_OPTS]: export IMG over
# vhost-user-blk with qemu-storage-daemon (O_DIRECT, writable unless
# EXPORT_OPTS says writable=off).  Sets VB_LAST_PID; log in $VB_TMP/qsd-*.log.
vb_qsd_start() {
    local sock=$1 img=$2 nq=$3 opts=${4:-writable=on}
    vb_daemon_start "qsd-$(basename "$sock")" "$sock" \
        qemu-storage-daemon \
        --blockdev "driver=file,node-name=f,filename=$img,cache.direct=on" \
        --export "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path=$sock,num-queues=$nq,$opts"
}

# vb_stop PID: SIGTERM, then SIGKILL after 5 s; reaps it.  Safe to repeat.
vb_stop() {
    local pid=$1 n=0
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
    kill -TERM "$pid" 2>/dev/null
    while kill -0 "$pid" 2>/dev/null && [ $n -lt 50 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
}

# ---------------------------------------------------------------- guest

# vb_guest [run-guest.sh args]: boot the guest, one job.  Logs go to
# $VB_TMP/guest-N.log, the job's VBTEST-INFO lines to $VB_GUEST_INFO
# ($VB_TMP/guest-N.info, key=value).  Output is printed as TAP comments.
# Returns run-guest.sh's status (0 PASS, 1 FAIL, 2 usage).
vb_guest() {
    local rc
    VB_GUEST_N=$((VB_GUEST_N + 1))
    VB_GUEST_INFO=$VB_TMP/guest-$VB_GUEST_N.info
    "$VB_FUNC/run-guest.sh" -l "$VB_TMP/guest-$VB_GUEST_N.log" \
        -i "$VB_GUEST_INFO" "$@" 2>&1 | sed 's/^/#   /'
    rc=${PIPESTATUS[0]}
    return "$rc"
}

# vb_guest_bg [run-guest.sh args]: vb_guest in the background (for tests
# that act on the backend while the guest runs).  Sets VB_GUEST_PID; get the
# result with `wait "$VB_GUEST_PID"`.  The info file is $VB_GUEST_INFO.
vb_guest_bg() {
    vb_guest "$@" &
    VB_GUEST_PID=$!
    # The subshell counted its run; count it here too so logs do not clash.
    VB_GUEST_N=$((VB_GUEST_N + 1))
    VB_GUEST_INFO=$VB_TMP/guest-$VB_GUEST_N.info
}

# vb_info_get KEY [FILE]: print the value of KEY from the last guest run's
# VBTEST-INFO lines (or FILE); fails if absent.
vb_info_get() {
    local f=${2:-$VB_GUEST_INFO}
    [ -f "$f" ] || return 1
    grep -m1 "^$1=" "$f" | cut -d= -f2- | grep . || return 1
}

# ---------------------------------------------------------------- reporting

vb_ok() {
    VB_N=$((VB_N + 1))
    VB_PASSED=$((VB_PASSED + 1))
    echo "ok $VB_N - $1"
}

# vb_not_ok NAME [REASON]
vb_not_ok() {
    VB_N=$((VB_N + 1))
    VB_FAILED=$((VB_FAILED + 1))
    echo "not ok $VB_N - $1"
    [ $# -ge 2 ] && echo "#   $2"
    return 0
}

# vb_skip NAME REASON: reported as "ok N - NAME # SKIP REASON"; counts in
# neither total.
vb_skip() {
    VB_N=$((VB_N + 1))
    VB_SKIPPED=$((VB_SKIPPED + 1))
    echo "ok $VB_N - $1 # SKIP $2"
}

# vb_check NAME CMD [ARGS...]: run CMD; ok if it exits 0.
vb_check() {
    local name=$1
    shift
    if "$@"; then
        vb_ok "$name"
    else
        vb_not_ok "$name" "command failed: $*"
    fi
}

# vb_check_eq NAME GOT WANT: ok if the two strings are equal.
vb_check_eq() {
    if [ "$2" = "$3" ]; then
        vb_ok "$1"
    else
        vb_not_ok "$1" "got '$2', want '$3'"
    fi
}

# vb_check_info NAME KEY WANT: ok if the last guest run reported KEY=WANT.
vb_check_info() {
    vb_check_eq "$1" "$(vb_info_get "$2")" "$3"
}

# vb_done: print the plan and the summary line "N passed, N failed";
# returns 1 if anything failed (use as the script's last command).
vb_done() {
    echo "1..$VB_N"
    [ "$VB_SKIPPED" -gt 0 ] && echo "# $VB_SKIPPED skipped"
    echo "$VB_PASSED passed, $VB_FAILED failed"
    [ "$VB_FAILED" -eq 0 ]
}
