#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# In-guest table (issue 4, section 4): fio inside a TCG guest against
# vhost-blkd, qemu-storage-daemon and QEMU's built-in virtio-blk with an
# iothread, on the same raw file.  TCG emulates every guest instruction, so
# these figures are bound by the emulator, not by the dataplane: use them to
# see that the three paths behave alike in a real guest, and
# scripts/bench/compare.sh for the dataplane itself.
#
# Usage: scripts/bench/investigations/guest.sh [-o OUTDIR] [-t SECONDS] [-r REPS]
#            [-f FILE] [-m SIZE_MIB] [-b BUILDDIR] [-j "JOBS"]
#            [-q "QUEUES"] [-c "CASES"]
#   -o  output directory (default /var/tmp/vhost-blk-guest)
#   -t  fio runtime in the guest, seconds (default 10)
#   -r  repetitions, interleaved, median reported (default 3)
#   -f  raw file (default /var/tmp/vhost-blk-guest.img, created once)
#   -m  its size in MiB (default 256)
#   -j  jobs as RW:BS:DEPTH, space separated
#       (default "randread:4k:1 randread:4k:32 randwrite:4k:32")
#   -q  queue counts of the device, space separated (default "1")
#   -c  back-ends (default "vhost-blkd qsd qemu-virtio-blk"); also
#       vhost-blkd-nopoll: vhost-blkd --poll-max-ns 0 (never polls);
#       vhost-blkd-nocheck: vhost-blkd --poll-host-check off (polls even
#       when the host has no idle CPU)
# Outputs: OUTDIR/guest.jsonl (one line per run), OUTDIR/guest.md (also
# printed).  Each run boots the guest (tests/functional/run-guest.sh, job
# fio-verify with vbverify=none, time based) with one queue.
set -u

srcdir=$(cd "$(dirname "$0")/../../.." && pwd)
out=/var/tmp/vhost-blk-guest
runtime=10
reps=3
file=/var/tmp/vhost-blk-guest.img
size_mib=256
builddir=$srcdir/build
jobs="randread:4k:1 randread:4k:32 randwrite:4k:32"
queues="1"
cases="vhost-blkd qsd qemu-virtio-blk"

usage() { sed -n '3,27p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case $1 in
    -o) out=$2; shift ;;
    -t) runtime=$2; shift ;;
    -r) reps=$2; shift ;;
    -f) file=$2; shift ;;
    -m) size_mib=$2; shift ;;
    -b) builddir=$2; shift ;;
    -j) jobs=$2; shift ;;
    -q) queues=$2; shift ;;
    -c) cases=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "guest.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

die() { echo "guest.sh: $*" >&2; exit 1; }
log() { echo "# $*" >&2; }

BLKD=${VHOST_BLKD:-$builddir/tools/vhost-blkd}
if [ -z "${VHOST_BLKD:-}" ]; then
    if [ ! -d "$builddir/meson-private" ]; then
        (cd "$srcdir" && ./configure --builddir="$builddir") >/dev/null ||
            die "configure failed"
    fi
    ninja -C "$builddir" tools/vhost-blkd >/dev/null || die "building vhost-blkd failed"
fi
[ -x "$BLKD" ] || die "$BLKD not found"
QSD=${QEMU_STORAGE_DAEMON:-qemu-storage-daemon}
command -v "$QSD" >/dev/null || die "qemu-storage-daemon not installed"
QEMU=${VHOST_BLK_QEMU:-qemu-system-x86_64}
command -v "$QEMU" >/dev/null || die "$QEMU not installed"
RUNGUEST=$srcdir/tests/functional/run-guest.sh

mkdir -p "$out" || die "cannot create $out"
tmp=$(mktemp -d /var/tmp/vb-guest.XXXXXX) || die "mktemp failed"
raw=$out/guest.jsonl
: > "$raw"
dpid=
cleanup() {
    [ -n "$dpid" ] && kill -TERM "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

want=$((size_mib * 1024 * 1024))
if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" -ne "$want" ]; then
    log "creating $file ($size_mib MiB of random data)..."
    dd if=/dev/urandom of="$file" bs=1M count="$size_mib" status=none conv=fsync ||
        die "cannot create $file"
fi

# Build (or find) the guest assets once, so no run pays for it.
assets=${VHOST_BLK_GUEST_ASSETS:-}
if [ -z "$assets" ]; then
    assets=$("$srcdir/scripts/guest/build-assets.sh" | tail -n1) ||
        die "building the guest assets failed (scripts/guest/build-assets.sh)"
fi
export VHOST_BLK_GUEST_ASSETS=$assets

wait_sock() {
    local n=0
    while [ ! -S "$1" ]; do
        kill -0 "$dpid" 2>/dev/null || return 1
        [ $n -ge 200 ] && return 1
        sleep 0.05; n=$((n + 1))
    done
}

# start_backend CASE QUEUES: start the daemon of CASE (none for QEMU's own).
start_backend() {
    local nq=$2
    sock=$tmp/$1.sock
    rm -f "$sock"
    case $1 in
    vhost-blkd|vhost-blkd-nocheck|vhost-blkd-nopoll)
        local extra=()
        [ "$1" = vhost-blkd-nocheck ] && extra=(--poll-host-check off)
        [ "$1" = vhost-blkd-nopoll ] && extra=(--poll-max-ns 0)
        "$BLKD" --export "socket=$sock,file=$file,aio=io_uring,cache=none,num-queues=$nq" \
            "${extra[@]}" > "$tmp/$1.log" 2>&1 &
        dpid=$! ;;
    qsd)
        "$QSD" --object iothread,id=iot0 \
            --blockdev "driver=file,filename=$file,cache.direct=on,aio=io_uring,node-name=f" \
            --export "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path=$sock,writable=on,num-queues=$nq,iothread=iot0" \
            > "$tmp/$1.log" 2>&1 &
        dpid=$! ;;
    qemu-virtio-blk)
        dpid=; return 0 ;;
    esac
    wait_sock "$sock" || { sed 's/^/    /' "$tmp/$1.log" >&2; die "$1 did not start"; }
}

stop_backend() {
    [ -n "$dpid" ] || return 0
    kill -TERM "$dpid" 2>/dev/null
    wait "$dpid" 2>/dev/null
    dpid=
}

# run CASE REP RW BS DEPTH QUEUES
run() {
    local c=$1 r=$2 rw=$3 bs=$4 d=$5 nq=$6 glog=$tmp/guest.log l
    local -a disk
    l=$(cut -d' ' -f1 /proc/loadavg)
    start_backend "$c" "$nq"
    if [ "$c" = qemu-virtio-blk ]; then
        disk=(-- -object iothread,id=io0
              -drive "file=$file,if=none,id=d0,format=raw,cache=none,aio=io_uring"
              -device "virtio-blk-pci,drive=d0,iothread=io0,num-queues=$nq")
    else
        disk=(-s "$sock" -q "$nq")
    fi
    if ! "$RUNGUEST" -j fio-verify -t $((runtime + 120)) -l "$glog" \
            vbrw="$rw" vbbs="$bs" vbiodepth="$d" vbsize=$((size_mib / 2))M \
            vbverify=none vbruntime="$runtime" vbfioargs=--time_based \
            "${disk[@]}" > "$tmp/run.out" 2>&1; then
        sed 's/^/    /' "$tmp/run.out" >&2
        stop_backend
        die "guest run failed ($c, $rw $bs depth $d)"
    fi
    stop_backend
    python3 - "$glog" "$c" "$r" "$rw" "$bs" "$d" "$nq" "$l" >> "$raw" <<'EOF'
import json, re, sys
log = open(sys.argv[1], errors="replace").read()
def num(s):
    m = re.match(r"([\d.]+)([kM]?)", s)
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6}[m.group(2)]
iops = sum(num(m) for m in re.findall(r"(?:read|write): IOPS=([\d.]+[kM]?)", log))
lat = re.search(r"\bclat \((usec|msec|nsec)\):.*?avg=\s*([\d.]+)", log)
avg_us = None
if lat:
    avg_us = float(lat.group(2)) * {"nsec": 1e-3, "usec": 1, "msec": 1e3}[lat.group(1)]
print(json.dumps({"case": sys.argv[2], "rep": int(sys.argv[3]), "rw": sys.argv[4],
                  "bs": sys.argv[5], "depth": int(sys.argv[6]), "queues": int(sys.argv[7]),
                  "load1": float(sys.argv[8]), "iops": iops, "clat_avg_us": avg_us}))
EOF
}

started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
log "guest runs: $runtime s of fio each, $reps repetitions, jobs: $jobs, queues: $queues, back-ends: $cases"
for r in $(seq 1 "$reps"); do
    for q in $queues; do
        for j in $jobs; do
            IFS=: read -r rw bs d <<< "$j"
            for c in $cases; do
                log "rep $r/$reps: $c $rw $bs depth $d, $q queue(s) (load $(cut -d' ' -f1 /proc/loadavg))"
                run "$c" "$r" "$rw" "$bs" "$d" "$q"
            done
        done
    done
done
finished=$(date -u +%Y-%m-%dT%H:%M:%SZ)

python3 - "$raw" "$started" "$finished" "$runtime" "$reps" "$(nproc)" \
    "$("$QEMU" --version | head -n1)" "$cases" "$load_start" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" > "$out/guest.md" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cases = sys.argv[8].split()
NAME = {"vhost-blkd": "vhost-blkd", "vhost-blkd-nocheck": "vhost-blkd --poll-host-check off",
        "vhost-blkd-nopoll": "vhost-blkd --poll-max-ns 0",
        "qsd": "qemu-storage-daemon", "qemu-virtio-blk": "QEMU virtio-blk + iothread"}
jobs = []
for r in rows:
    k = (r["rw"], r["bs"], r["depth"], r.get("queues", 1))
    if k not in jobs:
        jobs.append(k)
def sel(c, k):
    return [r for r in rows if r["case"] == c and
            (r["rw"], r["bs"], r["depth"], r.get("queues", 1)) == k]
def med(c, k, key):
    v = [r[key] for r in sel(c, k) if r[key] is not None]
    return statistics.median(v) if v else None
loads = [r["load1"] for r in rows if "load1" in r]
print(f"Guest measured {sys.argv[2]} to {sys.argv[3]}: {sys.argv[4]} s of fio per run, "
      f"{sys.argv[5]} interleaved repetitions (median; ratios per repetition), "
      f"{sys.argv[6]} host CPUs, {sys.argv[7]}, TCG guest with 2 vCPUs; load average "
      f"{sys.argv[9]} at the start, {sys.argv[10]} at the end"
      + (f", 1-minute load {min(loads):.2f} to {max(loads):.2f} during the runs" if loads else "")
      + "; **bound by the emulator** (TCG), not by the back-end.\n")
other = [c for c in cases if c != "vhost-blkd"]
print("| fio job (in the guest) | queues | " + " | ".join(NAME.get(c, c) for c in cases) + " | "
      + " | ".join(f"vhost-blkd / {NAME.get(c, c)}, each rep" for c in other) + " |")
print("|---|---:|" + "---:|" * len(cases) + "---:|" * len(other))
def f(x):
    return "-" if x is None else (f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}")
for k in jobs:
    cells = [f(med(c, k, "iops")) for c in cases]
    rr = []
    b = {r["rep"]: r["iops"] for r in sel("vhost-blkd", k)}
    for c in other:
        o = {r["rep"]: r["iops"] for r in sel(c, k)}
        rr.append(" ".join(f"{b[x] / o[x]:.2f}" for x in sorted(b) if x in o and o[x]) or "-")
    print(f"| {k[0]} {k[1]} depth {k[2]} | {k[3]} | " + " | ".join(cells) + " | "
          + " | ".join(rr) + " |")
EOF
cat "$out/guest.md"
