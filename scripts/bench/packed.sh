#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Packed vs split virtqueues in vhost-blkd: 4 KiB random reads from
# vhost-blk-bench on a null export and on a raw file (O_DIRECT, io_uring),
# at depth 1 and 32, one queue.  The IOPS runs of all eight cases are
# interleaved, repetition after repetition, so both ring formats see the
# same machine; the table gives min / median / max.  Then instructions per
# I/O: the daemon under valgrind --tool=callgrind, once for N and once for
# 2N I/Os, (Ir(2N) - Ir(N)) / N, so start-up and connection costs cancel;
# also without the inflight region (vhost-blk-bench --no-inflight; QEMU
# always sets one up), to show what its bookkeeping costs.  Each IOPS run
# also records the kicks per I/O (a kick is written only when the daemon
# had stopped polling and asked for one) and the daemon's CPU per I/O,
# and the table gives every repetition's packed / split ratio.
#
# Usage: scripts/bench/packed.sh [-t SECONDS] [-r REPS] [-n CALLGRIND_IOS]
#                                [-f FILE] [-m SIZE_MIB] [-b BUILDDIR]
#                                [-c "irq halt"] [-a DAEMON_ARGS]
#                                [--no-callgrind]
#   -t  seconds per IOPS run (default 2)     -r  repetitions (default 5)
#   -n  I/Os per callgrind run (default 10000)
#   -f  image file (default /var/tmp/vhost-blk-bench.img)
#   -m  its size in MiB (default 256)        -b  build dir (default build)
#   -c  client models: irq (sleeps on the call eventfd), halt
#       (--halt-poll-ns 200000), poll (default: irq halt)
#   -a  more vhost-blkd options, e.g. "--poll-host-check off" (poll even
#       while the host has no idle CPU, to see the poll window itself)
set -u
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
runtime=2
reps=5
cg_ios=10000
file=/var/tmp/vhost-blk-bench.img
size_mib=256
builddir=$srcdir/build
do_callgrind=1
clients="irq halt"
dargs=

while [ $# -gt 0 ]; do
    case $1 in
    -t) runtime=$2; shift 2 ;;
    -r) reps=$2; shift 2 ;;
    -n) cg_ios=$2; shift 2 ;;
    -f) file=$2; shift 2 ;;
    -m) size_mib=$2; shift 2 ;;
    -b) builddir=$2; shift 2 ;;
    -c) clients=$2; shift 2 ;;
    -a) dargs=$2; shift 2 ;;
    --no-callgrind) do_callgrind=0; shift ;;
    *) sed -n '/^# Usage/,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
    esac
done

die() { echo "packed.sh: $*" >&2; exit 1; }
BLKD=$builddir/tools/vhost-blkd
BENCH=$builddir/tools/vhost-blk-bench
[ -x "$BLKD" ] && [ -x "$BENCH" ] || die "build first: ninja -C $builddir"
if [ "$do_callgrind" = 1 ] && ! command -v valgrind >/dev/null; then
    echo "packed.sh: valgrind not found: no instructions per I/O" >&2
    do_callgrind=0
fi

want=$((size_mib * 1024 * 1024))
if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" -ne "$want" ]; then
    echo "creating $file ($size_mib MiB of random data)..." >&2
    dd if=/dev/urandom of="$file" bs=1M count="$size_mib" status=none \
        conv=fsync || die "cannot create $file"
fi

tmp=$(mktemp -d /var/tmp/vb-packed.XXXXXX) || die "mktemp failed"
DPID=
cleanup() {
    [ -n "$DPID" ] && kill -TERM "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Daemon on CPU 1, client on CPU 0 when there are two.
pin_d=(); pin_b=()
if [ "$(nproc)" -ge 2 ]; then
    pin_d=(taskset -c 1); pin_b=(taskset -c 0)
fi

declare -A SPEC=(
    [null]="driver=null,size=1073741824"
    [file]="file=$file,aio=io_uring,cache=none"
)

# start_daemon NAME SPEC [wrapper...]: one export, socket $tmp/NAME.sock
start_daemon() {
    local name=$1 spec=$2 n=0
    shift 2
    rm -f "$tmp/$name.sock"
    # shellcheck disable=SC2086  # word-split DAEMON_ARGS on purpose
    "${pin_d[@]}" "$@" "$BLKD" $dargs --export \
        "socket=$tmp/$name.sock,$spec,num-queues=1,queue-size=256" \
        > "$tmp/$name.log" 2>&1 &
    DPID=$!
    while [ ! -S "$tmp/$name.sock" ]; do
        kill -0 "$DPID" 2>/dev/null || { cat "$tmp/$name.log" >&2; return 1; }
        [ $n -ge 2400 ] && { echo "packed.sh: $name: no socket" >&2; return 1; }
        sleep 0.05; n=$((n + 1))
    done
}

stop_daemon() {
    kill -TERM "$DPID" 2>/dev/null
    wait "$DPID" 2>/dev/null
    DPID=
}

ring_arg() {
    case $1 in
    packed) echo --packed ;;
    packed-noinflight) echo --packed --no-inflight ;;
    split-noinflight) echo --no-inflight ;;
    esac
}

echo "4 KiB random reads, 1 queue of 256, $runtime s per run, $reps" \
     "interleaved repetitions; $(nproc) CPUs, kernel $(uname -r); file" \
     "$file ($(df -T "$file" | awk 'NR==2 {print $2}'), O_DIRECT, io_uring);" \
     "vhost-blkd ${dargs:-with its defaults}"
echo "started $(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- IOPS: one daemon per back-end, the cases interleaved
for be in null file; do
    start_daemon "iops-$be" "${SPEC[$be]}" || die "vhost-blkd did not start"
    for r in $(seq "$reps"); do
        for depth in 1 32; do
          for cl in $clients; do
            case $cl in
            irq) cargs=() ;; halt) cargs=(--halt-poll-ns 200000) ;;
            poll) cargs=(--poll) ;; *) die "-c: irq, halt or poll, not $cl" ;;
            esac
            for ring in split packed; do
                "${pin_b[@]}" "$BENCH" --socket "$tmp/iops-$be.sock" \
                    --rw randread --bs 4k --iodepth "$depth" \
                    --queue-size 256 --runtime "$runtime" --json \
                    "${cargs[@]}" $(ring_arg "$ring") > "$tmp/r.json" ||
                    die "vhost-blk-bench failed ($be, depth $depth, $ring)"
                python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); b = r.get("backend_cpu") or {}; print(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], r["iops"], r["kicks_per_io"], b.get("us_per_io", -1), sys.argv[7])' \
                    "$tmp/r.json" "$be" "$depth" "$ring" "$cl" "$r" \
                    "$(cut -d' ' -f1 /proc/loadavg)" >> "$tmp/iops.txt"
            done
          done
        done
    done
    stop_daemon
done

# ---- instructions per I/O
if [ "$do_callgrind" = 1 ]; then
    for be in null file; do
        for depth in 1 32; do
            for ring in split packed split-noinflight packed-noinflight; do
                irs=()
                for n in "$cg_ios" $((2 * cg_ios)); do
                    name=cg-$be-$depth-$ring-$n
                    start_daemon "$name" "${SPEC[$be]}" valgrind \
                        --tool=callgrind \
                        --callgrind-out-file="$tmp/$name.out" ||
                        die "vhost-blkd under valgrind did not start"
                    "${pin_b[@]}" "$BENCH" --socket "$tmp/$name.sock" \
                        --rw randread --bs 4k --iodepth "$depth" \
                        --queue-size 256 --ios "$n" --json \
                        $(ring_arg "$ring") > /dev/null ||
                        die "vhost-blk-bench under callgrind failed"
                    stop_daemon
                    ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' \
                         "$tmp/$name.log" | tail -n1)
                    [ -n "$ir" ] || die "no callgrind total in $tmp/$name.log"
                    irs+=("$ir")
                done
                echo "$be $depth $ring $(( (irs[1] - irs[0]) / cg_ios ))" \
                    >> "$tmp/cg.txt"
            done
        done
    done
fi
echo "finished $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo

python3 - "$tmp/iops.txt" "$tmp/cg.txt" <<'EOF'
import statistics, sys, os
runs, kicks, cpu, byrep, loads = {}, {}, {}, {}, []
for line in open(sys.argv[1]):
    be, depth, ring, cl, rep, iops, kpi, us, load = line.split()
    k = (be, int(depth), cl, ring)
    runs.setdefault(k, []).append(float(iops))
    kicks.setdefault(k, []).append(float(kpi))
    cpu.setdefault(k, []).append(float(us))
    byrep.setdefault(k, {})[rep] = float(iops)
    loads.append(float(load))
cg = {}
if os.path.exists(sys.argv[2]):
    for line in open(sys.argv[2]):
        be, depth, ring, ir = line.split()
        cg[(be, int(depth), ring)] = int(ir)

def mmm(v):
    return "%.0fk / **%.0fk** / %.0fk" % (min(v) / 1e3, statistics.median(v) / 1e3,
                                          max(v) / 1e3)

print(f"1-minute load during the runs: {min(loads):.2f} to {max(loads):.2f}")
print()
print("| back-end | depth | client | split IOPS min / median / max | packed IOPS min / median / max | packed / split, each rep | kicks / I/O split / packed (median) | daemon CPU us / I/O split / packed (median) |")
print("|---|---:|---|---:|---:|---|---:|---:|")
for be in ("null", "file"):
    for depth in (1, 32):
        for cl in sorted({k[2] for k in runs}, key=lambda c: ("irq", "halt", "poll").index(c)):
            s, p = (be, depth, cl, "split"), (be, depth, cl, "packed")
            if s not in runs:
                continue
            rr = " ".join(f"{byrep[p][r] / byrep[s][r]:.2f}" for r in sorted(byrep[s]) if byrep[s][r])
            print(f"| {be} | {depth} | {cl} | {mmm(runs[s])} | {mmm(runs[p])} | {rr} | "
                  f"{statistics.median(kicks[s]):.3f} / {statistics.median(kicks[p]):.3f} | "
                  f"{statistics.median(cpu[s]):.2f} / {statistics.median(cpu[p]):.2f} |")
if cg:
    print()
    print("| back-end | depth | instructions / I/O split | packed | without inflight region: split / packed |")
    print("|---|---:|---:|---:|---:|")
    for be in ("null", "file"):
        for depth in (1, 32):
            ci = lambda ring: str(cg[(be, depth, ring)]) if (be, depth, ring) in cg else "-"
            print(f"| {be} | {depth} | {ci('split')} | {ci('packed')} | {ci('split-noinflight')} / {ci('packed-noinflight')} |")
EOF
