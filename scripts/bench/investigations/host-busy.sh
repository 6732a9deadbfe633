#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# How well does vhost-blkd's busy-host check (--poll-host-check, see
# include/qemu/host-load.h) see the host's load?  One idle vhost-blkd runs
# through phases; in each, the host gets extra runnable tasks (nice 19 CPU
# spinners, so they wait rather than take CPU from anyone else) and the
# script records, from the daemon's SIGUSR1 counters, the share of the
# phase during which polling was paused, the changes of state, and next to
# it the kernel's own view (CPU pressure avg10, load average).
#
# Usage: scripts/bench/investigations/host-busy.sh [-s SECONDS_PER_PHASE] [-p "SPINNERS ..."]
#            [-b BUILDDIR]
#   -s  seconds per phase (default 10)
#   -p  spinners per phase (default "0 1 2 4 0"; the host has $(nproc) CPUs)
# Prints a markdown table.  The first change after a phase starts is
# reported as the detection delay (the check samples every 500 ms and
# pauses after one pressured sample, resumes after three calm ones).
set -u
srcdir=$(cd "$(dirname "$0")/../../.." && pwd)
secs=10; phases="0 1 2 4 0"; builddir=$srcdir/build
while [ $# -gt 0 ]; do
    case $1 in
    -s) secs=$2; shift ;;
    -p) phases=$2; shift ;;
    -b) builddir=$2; shift ;;
    -h|--help) sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "host-busy.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
BLKD=${VHOST_BLKD:-$builddir/tools/vhost-blkd}
[ -x "$BLKD" ] || { echo "host-busy.sh: $BLKD not found" >&2; exit 1; }
tmp=$(mktemp -d /var/tmp/vb-hostbusy.XXXXXX) || exit 1
spin=()
cleanup() {
    local p
    for p in "${spin[@]}"; do kill "$p" 2>/dev/null; done
    [ -n "${dpid:-}" ] && kill -TERM "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$BLKD" --log-level debug --export "socket=$tmp/s.sock,driver=null,size=1G" \
    > "$tmp/d.log" 2>&1 &
dpid=$!
for _ in $(seq 100); do [ -S "$tmp/s.sock" ] && break; sleep 0.05; done

# counters: "paused_ms transitions" from a fresh SIGUSR1 dump
counters() {
    local n
    n=$(grep -c "host load:.*changes" "$tmp/d.log")
    kill -USR1 "$dpid"
    for _ in $(seq 100); do
        [ "$(grep -c "host load:.*changes" "$tmp/d.log")" -gt "$n" ] && break
        sleep 0.02
    done
    grep "host load:.*changes" "$tmp/d.log" | tail -n1 |
        sed -n 's/.*; \([0-9]*\) changes, \([0-9]*\) ms with polling paused.*/\2 \1/p'
}
ms() { date +%s%3N; }
psi10() { sed -n 's/^some avg10=\([0-9.]*\).*/\1/p' /proc/pressure/cpu 2>/dev/null || echo -; }

echo "Host: $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)), kernel $(uname -r); $secs s per phase; started $(date -u +%Y-%m-%dT%H:%M:%SZ)."
echo
echo "| phase | extra nice-19 spinners | load avg (1 min) at the end | CPU pressure avg10 at the end | polling paused | changes | first change after (ms) |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
i=0
for n in $phases; do
    i=$((i + 1))
    read -r p0 c0 <<< "$(counters)"
    lines0=$(grep -c "host load: \(busy\|idle\)\|no idle CPU" "$tmp/d.log")
    t0=$(ms)
    for _ in $(seq "$n"); do nice -n 19 sh -c 'while :; do :; done' & spin+=($!); done
    first=-
    while [ $(( $(ms) - t0 )) -lt $((secs * 1000)) ]; do
        if [ "$first" = - ] &&
           [ "$(grep -c "host load: \(busy\|idle\)\|no idle CPU" "$tmp/d.log")" -gt "$lines0" ]; then
            first=$(( $(ms) - t0 ))
        fi
        sleep 0.1
    done
    for p in "${spin[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    spin=()
    read -r p1 c1 <<< "$(counters)"
    # whole 500 ms intervals: the share can read a little over 100%
    pct=$(( (p1 - p0) * 100 / (secs * 1000) )); [ "$pct" -gt 100 ] && pct=100
    echo "| $i | $n | $(cut -d' ' -f1 /proc/loadavg) | $(psi10)% | $pct% | $((c1 - c0)) | $first |"
done
