#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The kernel's own cost of the fixed-rate file cells: fio alone (io_uring,
# O_DIRECT, 4 KiB random reads, one job, up to 32 in flight) at the rates
# compare.sh's rate section asks of the daemons, on the same raw file.
# fio's CPU time per I/O (user + system, its JSON's usr_cpu/sys_cpu) is
# what submitting and completing one read costs with no vhost-user hop in
# between: a floor under any daemon's CPU per I/O at that rate.
#
# Usage: scripts/bench/fio-rate.sh [-f FILE] [-t SECONDS] [-r REPS]
#            [--rates "20000 100000"]
#   -f  raw file (default /var/tmp/vhost-blk-compare.img, compare.sh's;
#       created with 1 GiB when missing)
#   -t  seconds per run (default 2)      -r  repetitions (default 3)
set -u
file=/var/tmp/vhost-blk-compare.img
runtime=2
reps=3
rates="20000 100000"
while [ $# -gt 0 ]; do
    case $1 in
    -f) file=$2; shift ;;
    -t) runtime=$2; shift ;;
    -r) reps=$2; shift ;;
    --rates) rates=$2; shift ;;
    -h|--help) sed -n '3,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fio-rate.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
command -v fio >/dev/null || { echo "fio-rate.sh: fio is not installed (scripts/install-deps.sh)" >&2; exit 1; }
if [ ! -f "$file" ]; then
    fio --name=fill --filename="$file" --rw=write --bs=1M --size=1G --direct=1 \
        > /dev/null || { echo "fio-rate.sh: cannot create $file" >&2; exit 1; }
fi
tmp=$(mktemp -d /var/tmp/vb-fiorate.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
echo "# fio-rate.sh $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), file $file"
echo "| rate IOPS | rep | IOPS done | fio CPU us / I/O | p50 us | p99 us | 1-min load |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for r in $(seq 1 "$reps"); do
    for rate in $rates; do
        l=$(cut -d' ' -f1 /proc/loadavg)
        fio --name=rate --filename="$file" --ioengine=io_uring --direct=1 \
            --rw=randread --bs=4k --iodepth=32 --rate_iops="$rate" \
            --rate_process=linear --runtime="$runtime" --time_based \
            --output-format=json > "$tmp/fio.json" 2> "$tmp/fio.err" ||
            { cat "$tmp/fio.err" >&2; exit 1; }
        python3 - "$tmp/fio.json" "$rate" "$r" "$l" "$runtime" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
rd = j["read"]
ios = rd["total_ios"]
cpu_s = (j["usr_cpu"] + j["sys_cpu"]) / 100.0 * float(sys.argv[5])
pct = rd["clat_ns"]["percentile"]
print("| %s | %s | %.1fk | %.2f | %.1f | %.1f | %s |" % (
    sys.argv[2], sys.argv[3], rd["iops"] / 1e3, cpu_s * 1e6 / max(ios, 1),
    pct["50.000000"] / 1e3, pct["99.000000"] / 1e3, sys.argv[4]))
PY
    done
done
