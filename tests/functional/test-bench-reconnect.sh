#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# vhost-blk-bench --reconnect: a verifying run outlives its back-end.  The
# daemon is stopped (SIGTERM: it drains) while the run is in its verified
# phase and a new one is started on the same image and socket; the run
# must reconnect, be served by the new daemon, and verify every block when
# SIGINT ends it.  Without --reconnect the same hang-up fails the run with
# a message.  Every wait is on a state (a counter, a log line).
set -u
. "$(dirname "$0")/lib.sh"

vb_setup
blkd=$(vb_bin vhost-blkd) || vb_skip_all "vhost-blkd not built in $VHOST_BLK_BUILD"
bench=$(vb_bin vhost-blk-bench) || vb_skip_all "vhost-blk-bench not built"
ctl=$(vb_bin vhost-blk-ctl) || vb_skip_all "vhost-blk-ctl not built"
img=$(vb_mkimg disk 64M)
sock=$VB_TMP/d.sock
qmp=$VB_TMP/q.sock

start_daemon() {
    vb_daemon_start "blkd$1" "$sock" "$blkd" --log-level info \
        --chardev "socket,id=mon,path=$qmp,server=on,wait=off" \
        --monitor chardev=mon \
        --export "socket=$sock,file=$img,num-queues=2"
}
# The running daemon has served reads (a verifying run's fill pass only
# writes: reads mean the verified phase).
reading() {
    local r
    r=$("$ctl" -s "$qmp" --json stats 2>/dev/null |
        grep -o '"rd_bytes" *: *[0-9]*' | grep -o '[0-9]*$' | head -n1)
    [ -n "$r" ] && [ "$r" -gt 0 ]
}
# wait_until CMD...: poll CMD; a hang guard (60 s), not a timing assumption.
wait_until() {
    local end=$((SECONDS + 60))
    until "$@" > /dev/null 2>&1; do
        [ $SECONDS -ge $end ] && return 1
        sleep 0.05
    done
}

start_daemon 1 || vb_bail "vhost-blkd did not start"
pid1=$VB_LAST_PID
"$bench" --socket "$sock" --verify --rw randrw --queues 2 --iodepth 16 \
    --size 8M --runtime 3600 --reconnect 30000 > "$VB_TMP/b.out" 2> "$VB_TMP/b.err" &
bpid=$!
VB_PIDS+=("$bpid")
vb_check "the run reaches its verified phase" wait_until reading
vb_stop "$pid1"
vb_check "the first daemon drained and exited" \
    grep -q "SIGTERM): shutting down" "$VB_TMP/blkd1.log"
rm -f "$qmp"
start_daemon 2 || vb_bail "the second vhost-blkd did not start"
vb_check "the run reconnects" wait_until grep -q "reconnected (1)" "$VB_TMP/b.err"
vb_check "the new daemon serves the same run" wait_until reading
kill -INT "$bpid"
wait "$bpid"
rc=$?
sed 's/^/#   /' "$VB_TMP/b.out" "$VB_TMP/b.err"
vb_check_eq "SIGINT ends it: exit 0, every block verified" "$rc" 0
vb_check "no I/O or verify error" grep -q "errors 0, verify errors 0" "$VB_TMP/b.out"

# Without --reconnect, the same hang-up is a failed run with a reason.
vb_stop "$VB_LAST_PID"               # a fresh daemon: its counters at 0
rm -f "$qmp"
start_daemon 3 || vb_bail "the third vhost-blkd did not start"
"$bench" --socket "$sock" --verify --rw randrw --size 8M --runtime 3600 \
    > "$VB_TMP/c.out" 2> "$VB_TMP/c.err" &
bpid=$!
VB_PIDS+=("$bpid")
vb_check "a run without --reconnect reaches its verified phase" wait_until reading
vb_stop "$VB_LAST_PID"
wait "$bpid"
rc=$?
vb_check_eq "... and fails when the back-end goes" "$rc" 1
vb_check "... saying why" grep -q "closed the connection" "$VB_TMP/c.err"
vb_done
