#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The control plane under load while a guest verifies I/O (TCG guest,
# fio verify against vhost-blkd): 16 QMP clients send random valid and
# invalid commands from a fixed seed (exports and iothreads added and
# removed, queries, malformed JSON, refused commands) and 16 clients
# scrape /metrics, for 60 s (control-stress.py; VB_STRESS_S=N for N s).
# The daemon must never die, the guest must see no error, every valid
# command must succeed and every invalid one get an error; once every
# client and the guest are gone, the daemon's open fds and threads return
# exactly to what they were before (polled until equal, 30 s deadline)
# and its RSS to within 16 MiB.
set -u
. "$(dirname "$0")/lib.sh"

vb_setup
BLKD=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"

STRESS_S=${VB_STRESS_S:-60}   # the security issue asks for 60 s
FIO_S=$((STRESS_S + 15))   # outlasts the stress: the guest runs throughout

# wait_console LOG TEXT SECONDS PID: wait for TEXT on the guest console.
wait_console() {
    local n=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        kill -0 "$4" 2>/dev/null || return 1
        [ $n -ge $(($3 * 10)) ] && return 1
        sleep 0.1
        n=$((n + 1))
    done
}
# metrics_url LOG: the URL the daemon logged (it was given port 0).
metrics_url() {
    local n=0 u=
    while [ $n -lt 200 ]; do
        u=$(sed -n 's|.*metrics: serving \(http://[^ ]*/metrics\).*|\1|p' "$1" | head -n1)
        [ -n "$u" ] && { echo "$u"; return 0; }
        sleep 0.05
        n=$((n + 1))
    done
    return 1
}
fds() { ls "/proc/$1/fd" | wc -l; }
# The daemon's own threads: io_uring's kernel workers (iou-wrk-*) come and
# go with the load and are the kernel's, not the daemon's.
threads() { cat /proc/"$1"/task/*/comm 2>/dev/null | grep -vc '^iou-'; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# quiet CMD [ARGS...]: run CMD with its output in $VB_TMP/quiet.log.
quiet() { "$@" > "$VB_TMP/quiet.log" 2>&1; }
# settle PID FDS THREADS: poll until both are back, at most 30 s.
settle() {
    local n=0
    until [ "$(fds "$1")" -eq "$2" ] && [ "$(threads "$1")" -eq "$3" ]; do
        [ $n -ge 300 ] && return 1
        sleep 0.1
        n=$((n + 1))
    done
}

img=$(vb_mkimg stress 64M)
sock=$VB_TMP/stress.sock
qmp=$VB_TMP/stress.qmp
mkdir -p "$VB_TMP/scratch"
vb_daemon_start blkd "$sock" "$BLKD" --metrics 127.0.0.1:0 \
    --chardev "socket,id=mon,path=$qmp,server=on,wait=off" --monitor chardev=mon \
    --blockdev "driver=file,node-name=f,filename=$img,cache.direct=on" \
    --export "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path=$sock,writable=on,num-queues=2" ||
    vb_bail "vhost-blkd did not start"
pid=$VB_LAST_PID
url=$(metrics_url "$VB_TMP/blkd.log") || vb_bail "no 'metrics: serving' log line"
# Warm up what the first front-end, command and scrape set up for good
# (the host-load monitor's /proc files, buffers' high water), then take
# the levels to come back to.
BENCH=$(vb_bin vhost-blk-bench) || vb_bail "vhost-blk-bench is not built"
"$BENCH" --socket "$sock" --queues 2 --rw randwrite --ios 2000 --verify \
    > "$VB_TMP/warm.txt" 2>&1 || vb_bail "the warm-up bench failed: $(tail -n 3 "$VB_TMP/warm.txt")"
python3 "$VB_FUNC/qmp.py" "$qmp" '{"execute": "query-blockstats"}' > /dev/null ||
    vb_bail "the warm-up QMP command failed"
python3 "$VB_FUNC/metrics.py" get "$url" "$VB_TMP/warm.prom" ||
    vb_bail "the warm-up scrape failed"
fd0=$(fds "$pid")
th0=$(threads "$pid")
rss0=$(rss_kb "$pid")
echo "# before: $fd0 fds, $th0 threads, RSS $rss0 kB; $url"

vb_guest_bg -s "$sock" -q 2 -j fio-verify -t 400 \
    vbrw=randwrite vbsize=16M vbbs=4k vbiodepth=16 vbruntime=$FIO_S \
    vbfioargs=--time_based+--verify_backlog=256
log=$VB_TMP/guest-$VB_GUEST_N.log
if wait_console "$log" "VBTEST-LOG: fio " 300 "$VB_GUEST_PID"; then
    echo "# the guest runs fio; $STRESS_S s of QMP and /metrics clients"
    python3 "$VB_FUNC/control-stress.py" "$qmp" "$url" "$VB_TMP/scratch" \
        "$STRESS_S" > "$VB_TMP/stress.json"
    rc=$?
    sed 's/^/#   /' "$VB_TMP/stress.json"
    vb_check_eq "16 QMP clients and 16 scrapers: every reply as expected" "$rc" 0
    vb_check "  ...and they got through (commands and scrapes > 0)" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(not (d["qmp_ok"] > 0 and d["qmp_error"] > 0 and d["scrapes"] > 0))' \
        "$VB_TMP/stress.json"
    vb_check "the daemon is alive after the stress, the guest still running" \
        kill -0 "$pid"
else
    vb_not_ok "the guest started fio" "see $log"
fi
wait "$VB_GUEST_PID"
vb_check_eq "guest: fio verify passed through the stress (job PASS)" "$?" 0
vb_check "the daemon is alive after the guest left" kill -0 "$pid"

# The guest and every client gone: the same fds and threads as before.
settle "$pid" "$fd0" "$th0"
vb_check_eq "fds and threads back to where they were" \
    "$(fds "$pid")/$(threads "$pid")" "$fd0/$th0"
rss1=$(rss_kb "$pid")
echo "# after: RSS $rss1 kB (before: $rss0 kB)"
vb_check "RSS back within 16 MiB of before" test "$rss1" -le $((rss0 + 16384))
vb_check "the export still answers QMP" quiet \
    python3 "$VB_FUNC/qmp.py" "$qmp" '{"execute": "query-block-exports"}'
vb_stop "$pid"
vb_check "clean shutdown" grep -q "shutting down" "$VB_TMP/blkd.log"
vb_done
