#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The poll policy's figures, two builds side by side: every cell runs
# scripts/bench/ab.sh with the daemons of both builds at once (their
# defaults, polling forced on with --poll-host-check off, and the older
# build with polling off), repetitions interleaved.  Cells: the sleeping
# client at fixed rates of 20k and 100k IOPS (depth 32) on the null
# back-end and on a raw file (O_DIRECT, io_uring), and the clients that
# need polling at full speed: --halt-poll-ns 200000 at depth 1 and 32 and
# --poll at depth 1 (null).  One ab.md per cell in OUTDIR, plus
# OUTDIR/summary.md with every table and the load at each cell's start.
#
# Usage: scripts/bench/investigations/poll-ab.sh -a OLD_BUILDDIR [-b NEW_BUILDDIR]
#            [-r REPS] [-t SECONDS] [-f FILE] [-o OUTDIR] [--cells "..."]
#   -a  the build to compare against (e.g. a build of main)
#   -b  the build under test (default: build)
#   -r  repetitions (default 3)   -t  seconds per run (default 2)
#   -f  raw file (default /var/tmp/vhost-blk-compare.img, which
#       compare.sh creates; must exist)
#   -o  output directory (default /var/tmp/vhost-blk-poll-ab)
#   --cells  a subset of: rate20k-null rate100k-null rate20k-file
#            rate100k-file halt-d1 halt-d32 poll-d1
set -u
srcdir=$(cd "$(dirname "$0")/../../.." && pwd)
old=; new=$srcdir/build; reps=3; runtime=2
file=/var/tmp/vhost-blk-compare.img; out=/var/tmp/vhost-blk-poll-ab
cells="rate20k-null rate100k-null rate20k-file rate100k-file halt-d1 halt-d32 poll-d1"
while [ $# -gt 0 ]; do
    case $1 in
    -a) old=$2; shift ;;
    -b) new=$2; shift ;;
    -r) reps=$2; shift ;;
    -t) runtime=$2; shift ;;
    -f) file=$2; shift ;;
    -o) out=$2; shift ;;
    --cells) cells=$2; shift ;;
    *) sed -n '3,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
    shift
done
[ -n "$old" ] || { echo "poll-ab.sh: -a OLD_BUILDDIR is needed" >&2; exit 2; }
for b in "$old" "$new"; do
    [ -x "$b/tools/vhost-blkd" ] || { echo "poll-ab.sh: $b/tools/vhost-blkd not found" >&2; exit 1; }
done
mkdir -p "$out" || exit 1
null="driver=null,size=1G,num-queues=4,queue-size=512"
fileopts="file=$file,aio=io_uring,cache=none,num-queues=4,queue-size=512"
: > "$out/summary.md"
for c in $cells; do
    d=32; x=; e=$null; p=()
    case $c in
    rate20k-null) x="--rate 20000" ;;
    rate100k-null) x="--rate 100000" ;;
    rate20k-file) x="--rate 20000"; e=$fileopts ;;
    rate100k-file) x="--rate 100000"; e=$fileopts ;;
    halt-d1) d=1; x="--halt-poll-ns 200000" ;;
    halt-d32) x="--halt-poll-ns 200000" ;;
    poll-d1) d=1; p=(-p) ;;
    *) echo "poll-ab.sh: unknown cell '$c'" >&2; exit 2 ;;
    esac
    case $e in file=*) [ -f "$file" ] || { echo "poll-ab.sh: $file not found" >&2; exit 1; } ;; esac
    echo "## $c (start $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))" >> "$out/summary.md"
    VHOST_BLK_BENCH=$new/tools/vhost-blk-bench "$srcdir/scripts/bench/ab.sh" \
        -t "$runtime" -r "$reps" -d "$d" -e "$e" "${p[@]}" ${x:+-x "$x"} -o "$out/$c" \
        "old-nopoll=$old/tools/vhost-blkd --poll-max-ns 0" \
        "old=$old/tools/vhost-blkd" \
        "old-nocheck=$old/tools/vhost-blkd --poll-host-check off" \
        "new=$new/tools/vhost-blkd" \
        "new-nocheck=$new/tools/vhost-blkd --poll-host-check off" \
        > /dev/null || { echo "poll-ab.sh: ab.sh failed in $c" >&2; exit 1; }
    python3 - "$out/$c/raw.jsonl" >> "$out/summary.md" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
names = list(dict.fromkeys(r["case"] for r in rows))
def mmm(v, f="{:.2f}"):
    return f"{f.format(min(v))} / **{f.format(statistics.median(v))}** / {f.format(max(v))}"
print(f"1-minute load during the runs: {min(r['load1'] for r in rows):.2f} to "
      f"{max(r['load1'] for r in rows):.2f}\n")
print("| daemon | IOPS (k) min / median / max | daemon CPU us / IO min / median / max "
      "| p50 us min / median / max | p99 us min / median / max | kicks / IO (median) |")
print("|---|---:|---:|---:|---:|---:|")
for n in names:
    rs = [r for r in rows if r["case"] == n and r["r"]["ios"]]
    print(f"| {n} | {mmm([r['r']['iops'] / 1e3 for r in rs], '{:.1f}')} | "
          f"{mmm([r['daemon_cpu_s'] * 1e6 / r['r']['ios'] for r in rs])} | "
          f"{mmm([r['r']['lat_us']['p50'] for r in rs], '{:.1f}')} | "
          f"{mmm([r['r']['lat_us']['p99'] for r in rs], '{:.1f}')} | "
          f"{statistics.median(r['r']['kicks_per_io'] for r in rs):.3f} |")
EOF
    echo >> "$out/summary.md"
done
cat "$out/summary.md"
