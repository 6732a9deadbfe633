#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
# Benchmark the block engines: 4 KiB random reads (O_DIRECT) at queue depths
# 1, 32 and 128, batching on and off; prints a markdown table of IOPS and
# submit syscalls per request.
#
# Usage: scripts/bench/investigations/engines.sh [-s SECONDS] [-f FILE] [-m SIZE_MIB]
#                                 [-e ENGINES] [-d DEPTHS] [-b BUILDDIR]
set -e
srcdir=$(cd "$(dirname "$0")/../../.." && pwd)
seconds=3
file=/var/tmp/vhost-blk-bench.img
size_mib=256
engines=io_uring,native,threads,null
depths=1,32,128
builddir=$srcdir/build

while getopts "s:f:m:e:d:b:h" opt; do
    case $opt in
    s) seconds=$OPTARG ;;
    f) file=$OPTARG ;;
    m) size_mib=$OPTARG ;;
    e) engines=$OPTARG ;;
    d) depths=$OPTARG ;;
    b) builddir=$OPTARG ;;
    *) sed -n '3,8p' "$0"; exit 2 ;;
    esac
done

bin=${BENCH_ENGINES:-$builddir/tests/bench/bench-engines}
if [ -z "$BENCH_ENGINES" ]; then
    if [ ! -d "$builddir/meson-private" ]; then
        (cd "$srcdir" && ./configure --builddir="$builddir")
    fi
    ninja -C "$builddir" tests/bench/bench-engines >/dev/null
fi

# A real, fully allocated file (a sparse one would not touch the disk).
want=$((size_mib * 1024 * 1024))
if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" -ne "$want" ]; then
    echo "creating $file ($size_mib MiB)..." >&2
    dd if=/dev/urandom of="$file" bs=1M count="$size_mib" status=none
    sync
fi

echo "4 KiB random reads, O_DIRECT, $seconds s per run, file $file" \
     "($(df -T "$file" | awk 'NR==2 {print $2}')), $(nproc) CPUs, kernel $(uname -r)"
echo
"$bin" --file "$file" --seconds "$seconds" --engines "$engines" --depths "$depths"
