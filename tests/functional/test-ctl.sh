#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# vhost-blk-ctl against vhost-blkd's QMP monitor (no guest): exports and
# nodes (format and backing chain of a qcow2 export), add
# with I/O through vhost-blk-bench, stats counting that I/O, stats --watch,
# resize, log-level, del, the raw qmp passthrough, and its errors (no
# socket, QMP errors shown with their description, bad usage).  The same
# commands against qemu-storage-daemon are run as a report only (someone
# else's program is never a pass/fail gate here).
set -u
. "$(dirname "$0")/lib.sh"

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
ctl=$(vb_bin vhost-blk-ctl) || vb_bail "vhost-blk-ctl is not built in $VHOST_BLK_BUILD (needs libjson-glib-dev)"
bench=$(vb_bin vhost-blk-bench) || vb_bail "vhost-blk-bench is not built in $VHOST_BLK_BUILD"
"$blkd" --help | grep -q -- "--monitor" ||
    vb_skip_all "this vhost-blkd has no QMP monitor (--monitor)"

qmp=$VB_TMP/mon.qmp
export VHOST_BLK_CTL_SOCKET=$qmp
out=$VB_TMP/out.txt

# run NAME WANT_STATUS CMD...: run CMD, output in $out; check its status.
run() {
    local name=$1 want=$2 rc
    shift 2
    "$@" > "$out" 2>&1
    rc=$?
    sed 's/^/#   /' "$out"
    vb_check_eq "$name (exit $want)" "$rc" "$want"
}

# --- errors before any daemon runs --------------------------------------
run "no monitor socket: clear error" 1 "$ctl" exports
vb_check "  ...naming the socket and how to get one" \
    grep -q "no monitor socket at $qmp: is the daemon running" "$out"
run "unknown command" 2 "$ctl" frobnicate
run "qmp with arguments that are not JSON" 2 "$ctl" qmp query-version '{oops'

# --- a daemon with one export and a monitor -----------------------------
img0=$(vb_mkimg d0 16M)
sock0=$VB_TMP/d0.sock
vb_daemon_start blkd "$qmp" "$blkd" \
    --export "socket=$sock0,file=$img0,cache=writeback" \
    --chardev "socket,id=mon,path=$qmp,server=on,wait=off" \
    --monitor chardev=mon || vb_bail "vhost-blkd with a monitor did not start"
pid=$VB_LAST_PID

run "exports" 0 "$ctl" exports
vb_check "  ...lists the command-line export with its file" \
    grep -q "$img0" "$out"
vb_check "  ...a raw image, no backing chain (FORMAT raw, DEPTH 0)" \
    grep -Eq "^export0 .* raw +0 $img0\$" "$out"

# A qcow2 overlay over a qcow2 base over a raw file, exported over QMP:
# exports shows its format and depth, nodes its chain.
qraw=$VB_TMP/c-base.raw
truncate -s 8M "$qraw"
qemu-img create -q -f qcow2 -b "$qraw" -F raw "$VB_TMP/c-mid.qcow2" 16M
qemu-img create -q -f qcow2 -b "$VB_TMP/c-mid.qcow2" -F qcow2 \
    "$VB_TMP/c-top.qcow2" 32M
run "blockdev-add a qcow2 overlay (chain of 3)" 0 "$ctl" qmp blockdev-add \
    "{\"driver\":\"qcow2\",\"node-name\":\"qc\",\"file\":{\"driver\":\"file\",\"filename\":\"$VB_TMP/c-top.qcow2\"}}"
run "block-export-add on it" 0 "$ctl" qmp block-export-add \
    "{\"type\":\"vhost-user-blk\",\"id\":\"ec\",\"node-name\":\"qc\",\"addr\":{\"type\":\"unix\",\"path\":\"$VB_TMP/c.sock\"}}"
run "exports with a qcow2 export" 0 "$ctl" exports
vb_check "  ...ec is qcow2 with a backing chain of depth 2" \
    grep -Eq "^ec +vhost-user-blk +qc +32M .* qcow2 +2 $VB_TMP/c-top.qcow2\$" "$out"
run "nodes" 0 "$ctl" nodes
vb_check "  ...ec's image: depth 0, qcow2, 32M, the overlay" \
    grep -Eq "^ec +qc +0 qcow2 +32M $VB_TMP/c-top.qcow2\$" "$out"
vb_check "  ...depth 1: the middle qcow2 image (16M), its implicit node" \
    grep -Eq "^ec +#[^ ]+ +1 qcow2 +16M $VB_TMP/c-mid.qcow2\$" "$out"
vb_check "  ...depth 2: the raw base (8.0M)" \
    grep -Eq "^ec +#[^ ]+ +2 raw +8.0M $qraw\$" "$out"
vb_check "  ...export0: one line, raw, depth 0" \
    sh -c "grep -Eq '^export0 +node0 +0 raw +16M $img0\$' '$out' && [ \$(grep -c '^export0 ' '$out') -eq 1 ]"
run "nodes --json" 0 "$ctl" --json nodes
vb_check "  ...a list of {export, node-name, depth, format, virtual-size, filename}" \
    python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))
c = [x for x in r if x["export"] == "ec"]
sys.exit(0 if [x["depth"] for x in c] == [0, 1, 2] and
         [x["format"] for x in c] == ["qcow2", "qcow2", "raw"] and
         c[2]["virtual-size"] == 8 << 20 and c[2]["filename"] == sys.argv[2]
         else 1)' "$out" "$qraw"
run "nodes takes no arguments" 2 "$ctl" nodes ec
run "block-export-del ec" 0 "$ctl" qmp block-export-del '{"id":"ec"}'

img1=$(vb_mkimg d1 32M)
sock1=$VB_TMP/d1.sock
run "add d1 (file, 2 queues, writeback)" 0 \
    "$ctl" add d1 "$img1" --socket "$sock1" --num-queues 2 --cache writeback
run "exports after add" 0 "$ctl" exports
vb_check "  ...shows d1, 32M, active" \
    grep -Eq "^d1 +vhost-user-blk +d1 +32M +no +active +raw +0 +$img1$" "$out"
run "add d1 again: the daemon's error" 1 "$ctl" add d1 "$img1" --socket "$sock1"

# bench ARGS...: vhost-blk-bench with its report as TAP comments.
bench() {
    "$bench" "$@" 2>&1 | sed 's/^/#   /'
    return "${PIPESTATUS[0]}"
}

vb_check "vhost-blk-bench: 3000 verified requests on d1" \
    bench --socket "$sock1" --queues 2 --rw randrw --verify --ios 3000 \
    --size 8M --bs 4k
run "stats" 0 "$ctl" stats
reads=$(awk '$1 == "d1" { print $2 }' "$out")
writes=$(awk '$1 == "d1" { print $3 }' "$out")
vb_check_eq "  ...d1 counted the bench's requests (reads + writes >= 3000)" \
    "$(( ${reads:-0} + ${writes:-0} >= 3000 ))" 1
run "stats --json" 0 "$ctl" --json stats
vb_check "  ...raw query-blockstats with rd_operations" \
    grep -q '"rd_operations"' "$out"

# stats --watch: refreshes until interrupted, then exits 0.
"$ctl" stats --watch 0.2 > "$VB_TMP/watch.txt" 2>&1 &
wpid=$!
n=0
until [ "$(grep -c '^EXPORT' "$VB_TMP/watch.txt")" -ge 3 ] ||
      [ $n -ge 600 ] || ! kill -0 "$wpid" 2>/dev/null; do
    sleep 0.1
    n=$((n + 1))
done
kill -INT "$wpid" 2>/dev/null
wait "$wpid"
wrc=$?
sed -n '1,6p' "$VB_TMP/watch.txt" | sed 's/^/#   /'
vb_check_eq "stats --watch refreshed 3 times and stopped on SIGINT" \
    "$(grep -c '^EXPORT' "$VB_TMP/watch.txt" | awk '{print ($1 >= 3)}')/$wrc" "1/0"
vb_check "  ...with a rate row for d1" \
    grep -Eq "^d1 +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ " "$VB_TMP/watch.txt"

run "resize d1 64M" 0 "$ctl" resize d1 64M
vb_check_eq "  ...the image file is 64 MiB" "$(stat -c %s "$img1")" 67108864
run "exports after resize" 0 "$ctl" exports
vb_check "  ...d1 is 64M" grep -Eq "^d1 .* 64M " "$out"
run "resize of an unknown node: the daemon's error" 1 "$ctl" resize nope 1G
vb_check "  ...shows the QMP desc" grep -q "nope" "$out"
run "resize with a bad size" 2 "$ctl" resize d1 12Q

run "log-level debug" 0 "$ctl" log-level debug
vb_check "vhost-blk-bench after log-level debug: 100 requests" \
    bench --socket "$sock1" --ios 100 --size 1M
vb_check "  ...the daemon now logs vhost-user messages (debug)" \
    grep -q "debug:" "$VB_TMP/blkd.log"
run "log-level without a level" 0 "$ctl" log-level
vb_check "  ...shows debug" grep -qx "log level: debug" "$out"
run "log-level loud: refused" 2 "$ctl" log-level loud

run "qmp query-version" 0 "$ctl" qmp query-version
vb_check "  ...prints the return value as JSON" grep -q '"qemu"' "$out"
run "qmp unknown command" 1 "$ctl" qmp no-such-command
vb_check "  ...shows CommandNotFound" grep -q "CommandNotFound" "$out"

run "del d1" 0 "$ctl" del d1
vb_check "  ...its socket is gone" test ! -e "$sock1"
run "exports after del" 0 "$ctl" exports
vb_check "  ...d1 is not listed" sh -c "! grep -q '^d1 ' '$out'"
run "del of an unknown export" 1 "$ctl" del d1

# del with a front-end connected: refused with a hint, then --force.
img3=$(vb_mkimg d3 16M)
sock3=$VB_TMP/d3.sock
run "add d3" 0 "$ctl" add d3 "$img3" --socket "$sock3"
# A front-end that is answered once (so its session runs), then holds on.
python3 -c '
import socket, struct, sys, time
c = socket.socket(socket.AF_UNIX)
c.connect(sys.argv[1])
c.sendall(struct.pack("<III", 1, 1, 0))
c.recv(20)
open(sys.argv[2], "w").close()
time.sleep(600)
' "$sock3" "$VB_TMP/fe.ready" &
fe=$!
n=0
until [ -e "$VB_TMP/fe.ready" ] || [ $n -ge 600 ]; do sleep 0.1; n=$((n + 1)); done
run "del d3 while a front-end holds it" 1 "$ctl" del d3
vb_check "  ...says so and suggests --force" grep -q "del d3 --force" "$out"
run "del d3 --force" 0 "$ctl" del d3 --force
vb_check "  ...export and node are gone" grep -q "deleted export d3 and node d3" "$out"
kill "$fe" 2>/dev/null
wait "$fe" 2>/dev/null

# an export from the command line: resize and del find its node (node0)
run "resize export0 (a command-line export) to 32M" 0 "$ctl" resize export0 32M
vb_check_eq "  ...its image is 32 MiB" "$(stat -c %s "$img0")" 33554432

# jobs: a mirror of node0 held to 1 byte/s (after its first 64 KiB it
# waits for hours), so it is still running when listed; then cancelled.
run "jobs with none" 0 "$ctl" jobs
vb_check "  ...says there are none" grep -qx "no block jobs" "$out"
imgt=$(vb_mkimg t 32M)
run "blockdev-add a mirror target" 0 "$ctl" qmp blockdev-add \
    "{\"driver\":\"file\",\"node-name\":\"t\",\"filename\":\"$imgt\"}"
run "blockdev-mirror node0 -> t" 0 "$ctl" qmp blockdev-mirror \
    '{"job-id":"m0","device":"node0","target":"t","sync":"full","granularity":65536,"buf-size":65536,"speed":1}'
run "jobs" 0 "$ctl" jobs
vb_check "  ...lists m0, a running mirror with its progress of 32 MiB" \
    grep -Eq "^m0 +mirror +running +[0-9.]+% +[0-9]+/33554432 +1 +-$" "$out"
run "jobs --json" 0 "$ctl" --json jobs
vb_check "  ...raw query-block-jobs" grep -q '"device" *: *"m0"' "$out"
run "job-cancel m0" 0 "$ctl" qmp job-cancel '{"id":"m0"}'

vb_stop "$pid"

# --- the same commands against qemu-storage-daemon: a report ------------
if command -v qemu-storage-daemon > /dev/null; then
    qsdq=$VB_TMP/qsd.qmp
    img2=$(vb_mkimg q 16M)
    if vb_daemon_start qsd "$qsdq" qemu-storage-daemon \
            --chardev "socket,id=m,path=$qsdq,server=on,wait=off" \
            --monitor chardev=m; then
        for c in "exports" "add q $img2 --socket $VB_TMP/q.sock" "exports" \
                 "nodes" "stats" "resize q 32M" "qmp query-version" "del q"; do
            # shellcheck disable=SC2086
            "$ctl" -s "$qsdq" $c > "$out" 2>&1
            echo "# qemu-storage-daemon: vhost-blk-ctl $c: exit $?"
            sed 's/^/#   /' "$out"
        done
        vb_stop "$VB_LAST_PID"
    fi
fi

vb_done
