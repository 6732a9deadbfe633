#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Where a request's time goes, on a raw file (depth 1 unless -d): the client's mean
# latency (vhost-blk-bench, sleeping on its call eventfd) against the
# daemon's own mean time per read (pop to completion, from
# x-query-vhost-blk-stats) and plain fio's mean completion latency on the
# same file.  client - daemon is what the vhost-user path adds around the
# I/O: the kick or poll that hands the request over, the call eventfd and
# the client's wake-up.  Repetitions alternate vhost-blkd (default
# polling and --poll-max-ns 0) and fio.
#
# Usage: scripts/bench/investigations/latency-split.sh [-r REPS] [-t SECONDS] [-f FILE]
#            [-b BUILDDIR] [-d DEPTH]
#   -r  repetitions (default 3)      -t  seconds per run (default 3)
#   -d  iodepth of the bench and fio (default 1)
#   -f  raw file (default /var/tmp/vhost-blk-compare.img, 1 GiB, created
#       once)                        -b  build directory (default build)
set -u
srcdir=$(cd "$(dirname "$0")/../../.." && pwd)
reps=3; runtime=3; file=/var/tmp/vhost-blk-compare.img; build=$srcdir/build
depth=1
while [ $# -gt 0 ]; do
    case $1 in
    -r) reps=$2; shift ;;
    -t) runtime=$2; shift ;;
    -f) file=$2; shift ;;
    -b) build=$2; shift ;;
    -d) depth=$2; shift ;;
    -h|--help) sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "latency-split.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done
command -v fio > /dev/null || { echo "latency-split.sh: fio not found" >&2; exit 1; }
[ -x "$build/tools/vhost-blkd" ] || { echo "latency-split.sh: build first" >&2; exit 1; }
[ -f "$file" ] || dd if=/dev/urandom of="$file" bs=1M count=1024 status=none || exit 1
tmp=$(mktemp -d /var/tmp/vb-lat.XXXXXX) || exit 1
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

# one vhost-blkd run: prints "IOPS client_mean_us daemon_mean_us"
blkd_run() {
    rm -f "$tmp/s" "$tmp/m"
    "$build/tools/vhost-blkd" "$@" \
        --chardev "socket,id=m,path=$tmp/m,server=on,wait=off" --monitor chardev=m \
        --export "socket=$tmp/s,file=$file,aio=io_uring,cache=none,num-queues=1" \
        > "$tmp/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do [ -S "$tmp/s" ] && [ -S "$tmp/m" ] && break; sleep 0.05; done
    "$build/tools/vhost-blk-bench" --socket "$tmp/s" --rw randread --bs 4k \
        --iodepth "$depth" --runtime "$runtime" --json > "$tmp/b.json" 2> /dev/null
    "$build/tools/vhost-blk-ctl" -s "$tmp/m" qmp x-query-vhost-blk-stats \
        > "$tmp/st.json"
    kill "$pid"; wait "$pid" 2>/dev/null; pid=
    python3 - "$tmp/b.json" "$tmp/st.json" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))
rd = json.load(open(sys.argv[2]))["exports"][0]["operations"]["read"]
print(f'{b["iops"]:.0f} {b["lat_us"]["mean"]:.1f} {rd["total-time-ns"] / rd["operations"] / 1e3:.1f}')
EOF
}

echo "| rep | config | IOPS | client mean us | daemon mean us | client - daemon us |"
echo "|---:|---|---:|---:|---:|---:|"
for r in $(seq "$reps"); do
    for cfg in "polling (default)" "--poll-max-ns 0"; do
        if [ "$cfg" = "--poll-max-ns 0" ]; then set -- --poll-max-ns 0; else set --; fi
        read -r iops c d < <(blkd_run "$@")
        echo "| $r | vhost-blkd $cfg | $iops | $c | $d | $(python3 -c "print(f'{$c - $d:.1f}')") |"
    done
    read -r iops lat < <(fio --name=x --filename="$file" --direct=1 --ioengine=io_uring \
        --rw=randread --bs=4k --iodepth="$depth" --runtime="$runtime" --time_based \
        --output-format=json 2> /dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)["jobs"][0]["read"]
print("%.0f %.1f" % (r["iops"], r["clat_ns"]["mean"] / 1e3))')
    echo "| $r | fio (io_uring, no vhost-user) | $iops | $lat | | |"
done
