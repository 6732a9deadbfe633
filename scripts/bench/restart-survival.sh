#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Measure, never assert: how often does a guest's fio write+verify job
# survive a restart of its vhost-user-blk backend, for qemu-storage-daemon
# and for vhost-blkd?  A report for docs/benchmarks.md, not a CI test: the
# outcome for qemu-storage-daemon depends on timing (QEMU 7.2 sometimes logs
# "vhost VQ 0 ring restore failed: -22" and fio's verify then fails), and a
# test of someone else's program must not gate this project's CI.
#
# Usage: scripts/bench/restart-survival.sh [-n RUNS] [-k SIGNAL] [-o DIR]
#                                         [BACKEND...]
#   -n RUNS     restarts per backend (default 5)
#   -k SIGNAL   how the backend is stopped: TERM (default; a clean shutdown,
#               what the former test-qsd.sh did) or KILL
#   -o DIR      keep logs and results.jsonl there (default: a temp dir,
#               kept)
#   BACKEND     qsd and/or vhost-blkd (default both)
#
# Each run: a fresh 64 MiB image, the backend on it, a TCG guest (stock
# QEMU, reconnect=1) running fio randwrite 32 MiB with crc32c verify; once
# fio has run for 2 s the backend is stopped with SIGNAL and started again
# on the same socket and image.  A run survives when the guest job passes.
# The host's load matters (qsd's outcome changes with it), so each run
# records the 1-minute load average at its start.
# Prints one line per run and a Markdown table; the exit status is 0
# whatever the guests did (non-zero only if the script itself cannot run).
#
# Environment: VHOST_BLK_BUILD (vhost-blkd's build dir, default build/),
# VHOST_BLK_GUEST_ASSETS (default: scripts/guest/build-assets.sh).
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$ROOT/tests/functional/lib.sh"

runs=5
sig=TERM
outdir=
while getopts "n:k:o:h" opt; do
    case $opt in
        n) runs=$OPTARG ;;
        k) sig=$OPTARG ;;
        o) outdir=$OPTARG ;;
        *) sed -n '/^# Usage/,/^# Environment/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
backends=("$@")
[ ${#backends[@]} -gt 0 ] || backends=(qsd vhost-blkd)
case $sig in TERM|KILL) ;; *) echo "restart-survival: -k TERM or KILL" >&2; exit 2 ;; esac
case $runs in ''|*[!0-9]*) echo "restart-survival: bad -n '$runs'" >&2; exit 2 ;; esac

VB_KEEP=1
vb_setup
[ -n "$outdir" ] || outdir=$VB_TMP
mkdir -p "$outdir" || exit 1
results=$outdir/results.jsonl
: > "$results"
BLKD=
for b in "${backends[@]}"; do
    case $b in
        qsd) command -v qemu-storage-daemon >/dev/null ||
                 { echo "restart-survival: qemu-storage-daemon not installed" >&2; exit 1; } ;;
        vhost-blkd) BLKD=$(vb_bin vhost-blkd) ||
                 { echo "restart-survival: vhost-blkd is not built in $VHOST_BLK_BUILD" >&2; exit 1; } ;;
        *) echo "restart-survival: unknown backend '$b'" >&2; exit 2 ;;
    esac
done

# backend_start BACKEND NAME SOCK IMG: sets VB_LAST_PID.
backend_start() {
    case $1 in
        qsd) vb_qsd_start "$3" "$4" 1 ;;
        vhost-blkd) vb_daemon_start "$2" "$3" "$BLKD" --log-level info \
                        --export "socket=$3,file=$4" ;;
    esac
}

# backend_stop PID
backend_stop() {
    if [ "$sig" = KILL ]; then
        kill -KILL "$1" 2>/dev/null
        wait "$1" 2>/dev/null
    else
        vb_stop "$1"
    fi
}

# one_run BACKEND N: sets res to "survived" or "failed: REASON".
one_run() {
    local b=$1 n=$2 sock img pid glog t=0 rc why
    res=
    sock=$VB_TMP/$b-$n.sock
    img=$(vb_mkimg "$b-$n" 64M)
    backend_start "$b" "$b-$n-a" "$sock" "$img" || { res="failed: backend did not start"; return; }
    pid=$VB_LAST_PID
    vb_guest_bg -r -s "$sock" -j fio-verify vbrw=randwrite vbsize=32M -t 150 >/dev/null
    glog=$VB_TMP/guest-$VB_GUEST_N.log
    until grep -q "VBTEST-LOG: fio" "$glog" 2>/dev/null || [ $t -ge 1200 ]; do
        sleep 0.1
        t=$((t + 1))
    done
    sleep 2
    backend_stop "$pid"
    sleep 0.5
    if ! backend_start "$b" "$b-$n-b" "$sock" "$img"; then
        wait "$VB_GUEST_PID"
        res="failed: backend did not restart"
        return
    fi
    pid=$VB_LAST_PID
    wait "$VB_GUEST_PID"
    rc=$?
    vb_stop "$pid"
    # QEMU logs this on every backend loss (GET_VRING_BASE cannot be
    # answered), whether or not the data survives: counted, not judged.
    grep -q 'ring restore failed' "$glog.qemu-stderr" 2>/dev/null &&
        restore_msgs=$((restore_msgs + 1))
    if [ "$rc" -eq 0 ]; then
        res=survived
        return
    fi
    why=$(grep -h -m1 'VBTEST-RESULT: FAIL' "$glog" 2>/dev/null |
          sed 's/.*VBTEST-RESULT: FAIL //')
    res="failed: ${why:-guest job failed (see $glog)}"
}

echo "# restart-survival: $runs run(s) per backend, SIG$sig, logs in $VB_TMP"
declare -A ok restore
for b in "${backends[@]}"; do
    ok[$b]=0
    restore_msgs=0
    for n in $(seq 1 "$runs"); do
        load=$(cut -d' ' -f1 /proc/loadavg)
        one_run "$b" "$n"
        echo "$b run $n: $res (load $load at the start)"
        [ "$res" = survived ] && ok[$b]=$((ok[$b] + 1))
        printf '{"utc": "%s", "load1": %s, "backend": "%s", "signal": "%s", "run": %d, "survived": %s, "detail": "%s"}\n' \
            "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$load" \
            "$b" "$sig" "$n" "$([ "$res" = survived ] && echo true || echo false)" \
            "$(echo "$res" | tr -d '"\\')" >> "$results"
    done
    restore[$b]=$restore_msgs
done

echo
echo "| backend (SIG$sig mid-fio, restart) | guest job verified | QEMU logged \"ring restore failed\" |"
echo "|---|---|---|"
for b in "${backends[@]}"; do
    echo "| $b | ${ok[$b]} of $runs | ${restore[$b]} of $runs |"
done
[ "$outdir" = "$VB_TMP" ] || cp "$VB_TMP"/*.log "$outdir"/ 2>/dev/null
echo "# results: $results"
exit 0
