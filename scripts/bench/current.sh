#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Every measurement docs/benchmarks.md shows, in one go, into one
# directory (default docs/bench/current): compare.sh --short (tables,
# goals, plots), packed.sh with the daemon's defaults and with polling
# forced on, ab.sh at 20k IOPS (polling on / off / qsd; and on the file),
# fio-rate.sh (fio alone at those rates), ab.sh with the halt client at 4
# queues, depth 1 (KVM's window end and the greedy one), and ir-per-io.sh
# for split and packed rings, with and without the inflight region.
# About 25 minutes on 2 CPUs.  Each part's output file is named on the
# page next to its table; the load average is recorded in each.
#
# Usage: scripts/bench/current.sh [-o OUTDIR] [-b BUILDDIR] [--quick]
#   --quick  one repetition of everything, fewer callgrind I/Os: checks
#            the tooling in a few minutes, the figures mean nothing
set -u
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
out=$srcdir/docs/bench/current
build=$srcdir/build
mode=--short; reps=3; cgn=10000
while [ $# -gt 0 ]; do
    case $1 in
    -o) out=$2; shift ;;
    -b) build=$2; shift ;;
    --quick) mode=--quick; reps=1; cgn=2000 ;;
    *) sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
    shift
done
b=$srcdir/scripts/bench
mkdir -p "$out" || exit 1
log() { echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" >&2; }

log "compare.sh $mode"
"$b/compare.sh" "$mode" -b "$build" -o "$out" > "$out/compare.log" 2>&1 ||
    { echo "current.sh: compare.sh failed, see $out/compare.log" >&2; exit 1; }
rm -f "$out"/*.dat
log "packed.sh"
"$b/packed.sh" -t 1 -r "$reps" --no-callgrind -b "$build" > "$out/packed.txt" 2>&1 ||
    exit 1
"$b/packed.sh" -t 1 -r "$reps" --no-callgrind -a "--poll-host-check off" -b "$build" \
    > "$out/packed-nocheck.txt" 2>&1 || exit 1
log "ab.sh at 20k IOPS"
"$b/ab.sh" -t 2 -r "$reps" -x "--rate 20000" -o "$out/ab-rate20k" \
    "default=$build/tools/vhost-blkd" \
    "nopoll=$build/tools/vhost-blkd --poll-max-ns 0" \
    "nocheck=$build/tools/vhost-blkd --poll-host-check off" \
    "qsd0=qsd,poll-max-ns=0" "qsd=qsd" > /dev/null 2>&1 || exit 1
mv "$out/ab-rate20k/ab.md" "$out/ab-rate20k.md" && rm -rf "$out/ab-rate20k"
log "ab.sh at 20k IOPS on the file, polling on / off"
img=/var/tmp/vhost-blk-compare.img
"$b/ab.sh" -t 2 -r "$reps" -x "--rate 20000" -o "$out/ab-rate20k-file" \
    -e "file=$img,aio=io_uring,cache=none,num-queues=4,queue-size=512" \
    "default=$build/tools/vhost-blkd" \
    "nopoll=$build/tools/vhost-blkd --poll-max-ns 0" > /dev/null 2>&1 || exit 1
mv "$out/ab-rate20k-file/ab.md" "$out/ab-rate20k-file.md" && rm -rf "$out/ab-rate20k-file"
log "fio-rate.sh"
"$b/fio-rate.sh" -f "$img" -t 2 -r "$reps" > "$out/fio-rate.md" 2>&1 || exit 1
log "ab.sh, halt client, 4 queues at depth 1: KVM's window end against greedy"
for m in solo greedy; do
    x="--halt-poll-ns 200000"
    [ $m = greedy ] && x="$x --halt-poll-greedy"
    "$b/ab.sh" -t 2 -r "$reps" -q 4 -d 1 -x "$x" -o "$out/ab-halt-4q-$m" \
        "default=$build/tools/vhost-blkd" \
        "nocheck=$build/tools/vhost-blkd --poll-host-check off" \
        "qsd0=qsd,poll-max-ns=0" > /dev/null 2>&1 || exit 1
    mv "$out/ab-halt-4q-$m/ab.md" "$out/ab-halt-4q-$m.md" && rm -rf "$out/ab-halt-4q-$m"
done
log "ir-per-io.sh"
"$b/ir-per-io.sh" -b "$build" -n "$cgn" > "$out/ir-per-io.txt" 2>&1 || exit 1
"$b/ir-per-io.sh" -b "$build" -n "$cgn" -- --packed > "$out/ir-per-io-packed.txt" 2>&1 ||
    exit 1
{
    echo "# --packed --no-inflight"
    "$b/ir-per-io.sh" -b "$build" -n "$cgn" -- --packed --no-inflight 2>&1
    echo "# --no-inflight (split)"
    "$b/ir-per-io.sh" -b "$build" -n "$cgn" -- --no-inflight 2>&1
} > "$out/ir-per-io-noinflight.txt"
log "done: $out"
