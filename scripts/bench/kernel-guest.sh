#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The kernel dataplane table: inside one TCG guest, in one run, 4 KiB random
# reads at 1, 2 and 4 queues (or fio jobs) through
#   bare     fio on the block device / on the file (no virtio-blk ring)
#   kernel   vhost-blk-bench --vhost-dev /dev/vhost-blk (the vhost_blk module)
#   blkd     vhost-blk-bench --socket against vhost-blkd running in the guest
# each over a block device (a second virtio disk, O_DIRECT) and over a file
# (tmpfs in the guest, buffered).  CPU time per I/O is the guest's whole
# busy time (/proc/stat: user + nice + system + irq + softirq, all vCPUs)
# over the run divided by the I/Os: it includes the client, the module's
# queue threads, vhost-blkd and interrupts, and so compares the paths.
# TCG emulates every guest instruction: the absolute figures are the
# emulator's, only ratios inside one run mean anything.
#
# Usage: scripts/bench/kernel-guest.sh [-t SECONDS] [-r REPS] [-d DEPTH]
#            [-c CPUS] [-o OUTDIR] [-b BUILDDIR]
#   -t  seconds per run (default 5)        -d  iodepth per queue/job (default 16)
#   -r  repetitions, interleaved in the same boot; cells are medians (default 1)
#   -c  guest vCPUs (default 4)            -o  output dir (default /var/tmp/vhost-blk-kguest)
# Output: OUTDIR/kernel-guest.md (also printed), OUTDIR/guest.log.
set -u

srcdir=$(cd "$(dirname "$0")/../.." && pwd)
out=/var/tmp/vhost-blk-kguest
secs=5
reps=1
depth=16
cpus=4
builddir=$srcdir/build
while [ $# -gt 0 ]; do
    case $1 in
    -t) secs=$2; shift ;;
    -r) reps=$2; shift ;;
    -d) depth=$2; shift ;;
    -c) cpus=$2; shift ;;
    -o) out=$2; shift ;;
    -b) builddir=$2; shift ;;
    -h|--help) sed -n '3,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "kernel-guest.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
die() { echo "kernel-guest.sh: $*" >&2; exit 1; }

ninja -C "$builddir" tools/vhost-blk-bench tools/vhost-blkd >/dev/null ||
    die "building the tools in $builddir failed"
ldd "$builddir/tools/vhost-blk-bench" 2>&1 | grep -q 'not a dynamic executable' ||
    die "$builddir/tools/vhost-blk-bench is not static (configure without sanitizers)"
assets=$("$srcdir/scripts/guest/build-assets.sh") || die "guest assets failed"
mods=$("$srcdir/scripts/build-kmod.sh" --guest-modules) || die "build-kmod.sh failed"

mkdir -p "$out" || die "cannot create $out"
tmp=$(mktemp -d /var/tmp/vb-kguest.XXXXXX) || die "mktemp failed"
trap 'rm -rf "$tmp"' EXIT
P=$tmp/payload
mkdir -p "$P/kmod" "$P/usr/bin" "$P/jobs"
for m in $mods; do cp "$m" "$P/kmod/"; done
cp "$builddir/tools/vhost-blk-bench" "$P/usr/bin/"
if ldd "$builddir/tools/vhost-blkd" 2>&1 | grep -q 'not a dynamic executable'; then
    cp "$builddir/tools/vhost-blkd" "$P/usr/bin/"
else
    # vhost-blkd links shared libraries (json-glib has no static archive
    # in Debian): the guest gets them beside the binary and runs it
    # through the dynamic loader with that library path.
    mkdir -p "$P/usr/lib/vb"
    cp "$builddir/tools/vhost-blkd" "$P/usr/lib/vb/vhost-blkd.bin"
    ldd "$builddir/tools/vhost-blkd" | awk '/=> \// {print $3} /^\t\// {print $1}' |
        while read -r lib; do cp -L "$lib" "$P/usr/lib/vb/"; done
    ld=$(ldd "$builddir/tools/vhost-blkd" | awk '/^\t\/.*ld-linux/ {print $1}')
    [ -n "$ld" ] || die "no dynamic loader in ldd's output for vhost-blkd"
    printf '#!/bin/sh\nexec /usr/lib/vb/%s --library-path /usr/lib/vb /usr/lib/vb/vhost-blkd.bin "$@"\n' \
        "${ld##*/}" > "$P/usr/bin/vhost-blkd"
    chmod +x "$P/usr/bin/vhost-blkd"
    strip "$P/usr/lib/vb/"* 2>/dev/null
fi
strip "$P/usr/bin/vhost-blk-bench" "$P/usr/bin/vhost-blkd" 2>/dev/null
cat > "$P/jobs/kernel-bench.sh" <<'EOF'
# kernel-bench (scripts/bench/kernel-guest.sh): one line per run,
# VBTEST-INFO: kb_PATH_BACKING_qN_rR=IOPS,CPU_US_PER_IO
for m in vhost_iotlb vhost vhost_blk; do insmod /kmod/$m.ko || vb_fail "insmod $m"; done
dev=/dev/$vbdev
truncate -s 256M /tmp/img
dd if=/dev/urandom of=/tmp/img bs=1M count=256 2>/dev/null
dd if=/dev/zero of=$dev bs=1M count=256 oflag=direct 2>/dev/null
busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
report() {  # KEY IOPS IOS T0 T1
    local us
    us=$(awk -v a="$4" -v b="$5" -v n="$3" 'BEGIN { if (n > 0) printf "%.1f", (b - a) * 10000 / n; else print "nan" }')
    vb_info "$1" "$2,$us"
}
benchrun() {  # KEY ARGS...
    local key=$1 t0 t1 j
    shift
    t0=$(busy)
    j=$(/usr/bin/vhost-blk-bench --json --rw randread --bs 4k --iodepth $vbkdepth \
        --runtime $vbksecs --size 256M "$@" 2>/tmp/err)
    t1=$(busy)
    [ -n "$j" ] || { vb_log "$key: $(cat /tmp/err)"; return; }
    report "$key" "$(echo "$j" | sed -n 's/.*"iops": \([0-9.]*\).*/\1/p')" \
        "$(echo "$j" | sed -n 's/.*"ios": \([0-9]*\).*/\1/p')" "$t0" "$t1"
}
fiorun() {  # KEY FILE JOBS DIRECT
    local key=$1 t0 t1 line
    t0=$(busy)
    line=$(fio --minimal --name=r --filename=$2 --rw=randread --bs=4k --size=256M \
        --ioengine=io_uring --iodepth=$vbkdepth --numjobs=$3 --direct=$4 \
        --time_based --runtime=$vbksecs --group_reporting 2>/tmp/err)
    t1=$(busy)
    [ -n "$line" ] || { vb_log "$key: $(cat /tmp/err)"; return; }
    # terse v3: field 6 read KiB, 8 read IOPS
    report "$key" "$(echo "$line" | awk -F';' '{ print $8 }')" \
        "$(echo "$line" | awk -F';' '{ printf "%d", $6 / 4 }')" "$t0" "$t1"
}
/usr/bin/vhost-blkd --export socket=/tmp/bdev.sock,file=$dev,num-queues=4,queue-size=256 \
    --export socket=/tmp/file.sock,file=/tmp/img,cache=writeback,num-queues=4,queue-size=256 \
    --iothreads 4 > /tmp/blkd.log 2>&1 &
r=1
while [ $r -le $vbkreps ]; do
    for q in 1 2 4; do
        fiorun kb_bare_bdev_q${q}_r$r $dev $q 1
        fiorun kb_bare_file_q${q}_r$r /tmp/img $q 0
        benchrun kb_kernel_bdev_q${q}_r$r --vhost-dev /dev/vhost-blk --file $dev --queues $q
        benchrun kb_kernel_file_q${q}_r$r --vhost-dev /dev/vhost-blk --file /tmp/img --buffered --queues $q
        benchrun kb_blkd_bdev_q${q}_r$r --socket /tmp/bdev.sock --queues $q --queue-size 256
        benchrun kb_blkd_file_q${q}_r$r --socket /tmp/file.sock --queues $q --queue-size 256
    done
    r=$((r + 1))
done
kill %1 2>/dev/null
return 0
EOF
{ cat "$assets/initramfs.img"
  (cd "$P" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) |
      gzip -1n; } > "$tmp/initramfs.img"
ln -s "$assets/vmlinux" "$tmp/vmlinux"
truncate -s 512M "$tmp/disk.img"
started=$(date -u '+%Y-%m-%d %H:%M UTC')
load=$(cut -d' ' -f1-3 /proc/loadavg)
"$srcdir/tests/functional/run-guest.sh" -a "$tmp" -j kernel-bench -c "$cpus" -m 1536M \
    -t $((300 + reps * 18 * (secs + 10))) -l "$out/guest.log" -i "$tmp/info" vbdev=vda vbksecs="$secs" vbkdepth="$depth" vbkreps="$reps" -- \
    -drive "file=$tmp/disk.img,if=none,id=kd0,format=raw,cache=none,aio=threads" \
    -device virtio-blk-pci,drive=kd0,num-queues=4 >&2 || die "the guest run failed (log: $out/guest.log)"
# cell KEY: median IOPS / median CPU us per I/O over the repetitions
cell() {
    grep "^$1_r[0-9]*=" "$tmp/info" | cut -d= -f2 | awk -F, '
        { iops[NR] = $1; cpu[NR] = $2 }
        function median(a, n,   i, j, t) {
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
                if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        END { if (NR == 0) print "n/a";
              else printf "%.0f / %.1f\n", median(iops, NR), median(cpu, NR) }'
}
{
    echo "4 KiB random reads, iodepth $depth per queue/job, $secs s per run, median of $reps interleaved, one TCG guest"
    echo "($cpus vCPUs, Debian 12 cloud kernel $(sed -n 's/^kernel=//p' "$assets/info")),"
    echo "started $started, host load $load (at the end: $(cut -d' ' -f1-3 /proc/loadavg))."
    echo "Cell: IOPS / guest CPU us per I/O."
    echo
    echo "| path | backing | 1 queue | 2 queues | 4 queues |"
    echo "|---|---|---|---|---|"
    for p in bare kernel blkd; do
        for b in bdev file; do
            case $p in
                bare) name="bare (fio, io_uring)" ;;
                kernel) name="kernel vhost_blk" ;;
                blkd) name="vhost-blkd in the guest" ;;
            esac
            case $b in bdev) bn="block device (O_DIRECT)" ;; file) bn="file on tmpfs (buffered)" ;; esac
            echo "| $name | $bn | $(cell kb_${p}_${b}_q1) | $(cell kb_${p}_${b}_q2) | $(cell kb_${p}_${b}_q4) |"
        done
    done
} | tee "$out/kernel-guest.md"
