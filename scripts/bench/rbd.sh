#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Benchmark RBD exports on the single-node test cluster
# (scripts/ceph-cluster.sh): 4 KiB randread and randwrite at depth 1 and 32
# per queue, 1 and 2 queues, for fio's own ioengine=rbd (librbd with nothing
# in front: the limit), qemu-storage-daemon driver=rbd (the peer) and
# vhost-blkd, both driven by vhost-blk-bench over vhost-user.  Repetitions
# are interleaved (repetition r of every cell and case, then r + 1) and the
# report gives min / median / max per cell and every ratio per repetition.
#
# Usage: scripts/bench/rbd.sh [-t SECONDS] [-r REPS] [-o JSON] [-b BUILDDIR]
#            [--size MIB] [--keep-cluster]
#   -t  seconds per run (default 5)     -r  repetitions (default 3)
#   -o  JSON report (default docs/bench/rbd-DATE.json)
#   --size  image size in MiB (default 1024), written in full first so
#           reads reach allocated objects
#   --keep-cluster  leave the cluster running (and its directory) afterwards
#
# The limit for N queues at depth D is one fio job at depth N*D: a daemon
# has one librbd image handle (one cluster connection) for all its queues,
# and fio's rbd engine opens one handle per job (two writing jobs would
# bounce the image's exclusive lock between them).  librbd's cache is off
# everywhere (a client conf with "rbd cache = false"; qemu-storage-daemon
# also gets cache.direct=on), so every I/O goes to the OSD.  All cases use
# one image, in turn: the first write of each randwrite run takes the
# exclusive lock from the case before (fio and vhost-blkd give it up when
# they stop, qemu-storage-daemon when asked), a few ms of each run.
# CPU per I/O: user + system time of each process (/proc/PID/stat, all
# threads) over the run divided by the I/Os of the run: the daemon's for
# qsd and vhost-blkd, fio's whole process (its client, librbd, and the
# image open and close, a few tens of ms) for fio, and the OSD's for every
# case.
set -u

srcdir=$(cd "$(dirname "$0")/../.." && pwd)
runtime=5
reps=3
json=
builddir=$srcdir/build
size_mib=1024
keep=0
while [ $# -gt 0 ]; do
    case $1 in
    -t) runtime=$2; shift ;;
    -r) reps=$2; shift ;;
    -o) json=$2; shift ;;
    -b) builddir=$2; shift ;;
    --size) size_mib=$2; shift ;;
    --keep-cluster) keep=1 ;;
    -h|--help) sed -n '3,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "rbd.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
json=${json:-$srcdir/docs/bench/rbd-$(date -u +%Y-%m-%d).json}

die() { echo "rbd.sh: $*" >&2; exit 1; }
log() { echo "# $*" >&2; }

BLKD=${VHOST_BLKD:-$builddir/tools/vhost-blkd}
BENCH=${VHOST_BLK_BENCH:-$builddir/tools/vhost-blk-bench}
QSD=${QEMU_STORAGE_DAEMON:-qemu-storage-daemon}
[ -x "$BLKD" ] || die "$BLKD not found (ninja -C $builddir)"
[ -x "$BENCH" ] || die "$BENCH not found (ninja -C $builddir)"
command -v "$QSD" >/dev/null || die "qemu-storage-daemon not installed (scripts/install-deps.sh)"
command -v fio >/dev/null || die "fio not installed"
fio --enghelp 2>/dev/null | grep -qw rbd || die "this fio has no rbd engine"
"$BLKD" --help 2>&1 | grep -q 'rbd=' || die "$BLKD has no rbd driver"

CLUSTER=$srcdir/scripts/ceph-cluster.sh
export VB_CEPH_DIR=${VB_CEPH_DIR:-/var/tmp/vhost-blk-bench-ceph}
tmp=$(mktemp -d /var/tmp/vb-rbdbench.XXXXXX) || die "mktemp failed"
declare -A PID SOCK
cleanup() {
    local n
    for n in "${!PID[@]}"; do kill -TERM "${PID[$n]}" 2>/dev/null; done
    for n in "${!PID[@]}"; do wait "${PID[$n]}" 2>/dev/null; done
    rm -rf "$tmp"
    [ "$keep" = 1 ] || "$CLUSTER" stop
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
"$CLUSTER" start > "$tmp/cluster.log" 2>&1 || { cat "$tmp/cluster.log" >&2; die "the cluster did not start"; }
log "cluster up in $((SECONDS - t0)) s"
eval "$("$CLUSTER" env)"
conf=$tmp/bench.conf
cp "$CEPH_CONF" "$conf"
printf '\n[client]\nrbd cache = false\n' >> "$conf"
img=bench
rbd -c "$conf" rm "rbd/$img" >/dev/null 2>&1
rbd -c "$conf" create --size "${size_mib}M" "rbd/$img" || die "rbd create failed"
log "writing the ${size_mib} MiB image once"
fio --name=fill --ioengine=rbd --clientname=admin --pool=rbd --rbdname=$img \
    --rw=write --bs=4M --iodepth=8 --size="${size_mib}M" > "$tmp/fill.log" 2>&1 ||
    { cat "$tmp/fill.log" >&2; die "filling the image failed"; }
export CEPH_CONF=$conf

osd_pid=$(cat "$VB_CEPH_DIR/run/osd.0.pid")
mon_pid=$(cat "$VB_CEPH_DIR/run/mon.a.pid")

wait_sock() {
    local n=0
    while [ ! -S "${SOCK[$1]}" ]; do
        kill -0 "${PID[$1]}" 2>/dev/null || { sed 's/^/    /' "$tmp/$1.log" >&2; return 1; }
        [ $n -ge 1200 ] && { echo "rbd.sh: $1: no socket after 60 s" >&2; return 1; }
        sleep 0.05; n=$((n + 1))
    done
}
# Both daemons: one I/O thread, 2 queues offered, one image handle.
SOCK[blkd]=$tmp/blkd.sock
"$BLKD" --log-level info --iothreads 1 \
    --export "socket=${SOCK[blkd]},rbd=rbd/$img,ceph-conf=$conf,ceph-id=admin,num-queues=2" \
    > "$tmp/blkd.log" 2>&1 &
PID[blkd]=$!
wait_sock blkd || die "vhost-blkd did not start"
SOCK[qsd]=$tmp/qsd.sock
"$QSD" --object iothread,id=iot0 \
    --blockdev "driver=rbd,node-name=d0,pool=rbd,image=$img,conf=$conf,user=admin,cache.direct=on" \
    --export "type=vhost-user-blk,id=e,node-name=d0,addr.type=unix,addr.path=${SOCK[qsd]},writable=on,num-queues=2,iothread=iot0" \
    > "$tmp/qsd.log" 2>&1 &
PID[qsd]=$!
wait_sock qsd || die "qemu-storage-daemon did not start"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# ceph_ticks PID: user + system ticks of the process's threads that
# librados and librbd started (messenger workers, librbd's io_context
# pool, finishers, timers, the admin socket, ...): every thread but the
# daemon's own main thread and I/O threads ("vb-*" for vhost-blkd; for
# qemu-storage-daemon, which names no thread unless asked, every thread
# still called "qemu-storage-da...", and "IO *" / call_rcu when named).  The own threads' time
# still includes the librbd calls made on them (request set-up in
# rbd_aio_*), so the own share is an upper bound of the front-end's cost.
ceph_ticks() {
    local t c sum=0
    for t in /proc/$1/task/*; do
        [ "${t##*/}" = "$1" ] && continue
        c=$(cat "$t/comm" 2>/dev/null) || continue
        case $c in vb-*|"IO "*|call_rcu|qemu-storage-d*|vhost-blkd) continue ;; esac
        sum=$((sum + $(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{print $12 + $13}')))
    done 2>/dev/null
    echo "$sum"
}
load1() { cut -d' ' -f1 /proc/loadavg; }
raw=$tmp/raw.jsonl
: > "$raw"

# record CASE REP RW DEPTH QUEUES IOPS IOS DAEMON_TICKS OSD_TICKS LOAD [CEPH_TICKS]
record() {
    echo "{\"case\": \"$1\", \"rep\": $2, \"rw\": \"$3\", \"depth\": $4, \"queues\": $5, \"iops\": $6, \"ios\": $7, \"proc_cpu_s\": $8, \"osd_cpu_s\": $9, \"load1\": ${10}${11:+, \"ceph_threads_cpu_s\": ${11}}}" >> "$raw"
}

# run_bench CASE REP RW DEPTH QUEUES: vhost-blk-bench against a daemon.
run_bench() {
    local c=$1 r=$2 rw=$3 d=$4 q=$5 a0 a1 o0 o1 c0 c1 l j
    l=$(load1)
    c0=$(ceph_ticks "${PID[$c]}")
    a0=$(ticks "${PID[$c]}"); o0=$(ticks "$osd_pid")
    j=$("$BENCH" --socket "${SOCK[$c]}" --rw "$rw" --bs 4k --iodepth "$d" \
        --queues "$q" --runtime "$runtime" --json 2> "$tmp/bench.err") ||
        { cat "$tmp/bench.err" >&2; echo "rbd.sh: bench against $c failed" >&2; return 1; }
    a1=$(ticks "${PID[$c]}"); o1=$(ticks "$osd_pid")
    c1=$(ceph_ticks "${PID[$c]}")
    read -r iops ios < <(echo "$j" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["iops"], r["ios"])')
    record "$c" "$r" "$rw" "$d" "$q" "$iops" "$ios" "$(( a1 - a0 )).0e-2" "$(( o1 - o0 )).0e-2" "$l" \
        "$(( c1 - c0 )).0e-2"
}

# run_fio REP RW DEPTH QUEUES: fio ioengine=rbd, one job at depth Q*D.
run_fio() {
    local r=$1 rw=$2 d=$3 q=$4 o0 o1 l
    l=$(load1)
    o0=$(ticks "$osd_pid")
    # fio's CPU: the children's times of a subshell that runs only fio
    # (fio's own figures count its job thread, not librbd's threads).
    ( fio --name=limit --ioengine=rbd --clientname=admin --pool=rbd --rbdname=$img \
        --rw="$rw" --bs=4k --iodepth=$((q * d)) --runtime="$runtime" --time_based \
        --output-format=json > "$tmp/fio.json" 2> "$tmp/fio.err" || exit 1
      times > "$tmp/fio.times" ) ||
        { cat "$tmp/fio.err" >&2; echo "rbd.sh: fio failed" >&2; return 1; }
    o1=$(ticks "$osd_pid")
    read -r iops ios cpu < <(python3 - "$tmp/fio.json" "$rw" "$tmp/fio.times" <<'PY'
import json, re, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
d = j["read" if "read" in sys.argv[2] else "write"]
t = open(sys.argv[3]).read().split("\n")[1].split()
sec = lambda s: (lambda m: int(m.group(1)) * 60 + float(m.group(2)))(re.match(r"(\d+)m([\d.]+)s", s))
print(d["iops"], d["total_ios"], sec(t[0]) + sec(t[1]))
PY
)
    record fio-rbd "$r" "$rw" "$d" "$q" "$iops" "$ios" "$cpu" "$(( o1 - o0 )).0e-2" "$l"
}

# Warm-up, not recorded: the first I/O of a fresh image handle pays for
# connections to the OSD and, for writes, the exclusive lock.
log "warm-up"
for c in qsd blkd; do
    "$BENCH" --socket "${SOCK[$c]}" --rw randrw --bs 4k --iodepth 8 --queues 2 \
        --runtime 1 > /dev/null 2>&1 || die "warm-up through $c failed"
done
log "$reps repetitions of 8 cells x 3 cases, ${runtime} s each"
for r in $(seq 1 "$reps"); do
    log "repetition $r/$reps (load $(load1))"
    for rw in randread randwrite; do
        for q in 1 2; do
            for d in 1 32; do
                run_fio "$r" "$rw" "$d" "$q" || exit 1
                run_bench qsd "$r" "$rw" "$d" "$q" || exit 1
                run_bench blkd "$r" "$rw" "$d" "$q" || exit 1
            done
        done
    done
done

rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
meta=$(cat <<EOF
{"date": "$(date -u +%Y-%m-%dT%H:%MZ)", "host": "$(uname -n)", "kernel": "$(uname -r)",
 "cpu": "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')",
 "ncpu": $(nproc), "ceph": "$(ceph --version | awk '{print $3}')",
 "qsd": "$("$QSD" --version | head -n1)", "runtime_s": $runtime, "reps": $reps,
 "image_mib": $size_mib, "vhost_blkd_rev": "$(git -C "$srcdir" rev-parse --short HEAD 2>/dev/null)",
 "rss_kb": {"mon": $(rss "$mon_pid"), "osd": $(rss "$osd_pid"), "vhost-blkd": $(rss "${PID[blkd]}"), "qsd": $(rss "${PID[qsd]}")},
 "load1_end": $(load1)}
EOF
)
mkdir -p "$(dirname "$json")"
python3 - "$raw" "$json" "$meta" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
meta = json.loads(sys.argv[3])
cells = []
for rw in ("randread", "randwrite"):
    for q in (1, 2):
        for d in (1, 32):
            cells.append((rw, q, d))
def get(c, rw, q, d):
    return sorted((x for x in runs if x["case"] == c and x["rw"] == rw
                   and x["queues"] == q and x["depth"] == d), key=lambda x: x["rep"])
def mmm(v):
    return [min(v), statistics.median(v), max(v)]
res = {"meta": meta, "runs": runs, "cells": []}
print("\n4 KiB, IOPS min/median/max; CPU us per I/O (median) of the process "
      "and of the OSD; per-repetition ratios")
hdr = ("%-9s %2s %3s | %-22s %-22s %-22s | %-13s %-13s %-13s | %-17s %-17s %-17s"
       % ("rw", "q", "dep", "fio-rbd", "qsd", "vhost-blkd",
          "cpu fio/qsd/vb", "", "", "vb/fio", "vb/qsd", "cpu vb/qsd"))
print(hdr)
for rw, q, d in cells:
    f, s, b = get("fio-rbd", rw, q, d), get("qsd", rw, q, d), get("blkd", rw, q, d)
    if not (f and s and b):
        continue
    cpu = lambda rs: [1e6 * x["proc_cpu_s"] / max(x["ios"], 1) for x in rs]
    osd = lambda rs: [1e6 * x["osd_cpu_s"] / max(x["ios"], 1) for x in rs]
    n = min(len(f), len(s), len(b))
    r_fio = [b[i]["iops"] / f[i]["iops"] for i in range(n)]
    r_qsd = [b[i]["iops"] / s[i]["iops"] for i in range(n)]
    r_cpu = [cpu(b)[i] / cpu(s)[i] if cpu(s)[i] > 0 else float("nan") for i in range(n)]
    cell = {"rw": rw, "queues": q, "depth": d,
            "iops": {"fio-rbd": mmm([x["iops"] for x in f]),
                     "qsd": mmm([x["iops"] for x in s]),
                     "vhost-blkd": mmm([x["iops"] for x in b])},
            "cpu_us_per_io": {"fio-rbd": mmm(cpu(f)), "qsd": mmm(cpu(s)),
                              "vhost-blkd": mmm(cpu(b))},
            "osd_cpu_us_per_io": {"fio-rbd": mmm(osd(f)), "qsd": mmm(osd(s)),
                                  "vhost-blkd": mmm(osd(b))},
            "ratio_vs_fio": r_fio, "ratio_vs_qsd": r_qsd, "cpu_ratio_vs_qsd": r_cpu}
    res["cells"].append(cell)
    fm = lambda v: "%6.0f/%6.0f/%6.0f" % tuple(v)
    rl = lambda v: " ".join("%.2f" % x for x in v)
    print("%-9s %2d %3d | %-22s %-22s %-22s | %4.0f/%4.0f/%4.0f  osd %4.0f/%4.0f/%4.0f | %-17s %-17s %-17s"
          % (rw, q, d, fm(cell["iops"]["fio-rbd"]), fm(cell["iops"]["qsd"]),
             fm(cell["iops"]["vhost-blkd"]),
             cell["cpu_us_per_io"]["fio-rbd"][1], cell["cpu_us_per_io"]["qsd"][1],
             cell["cpu_us_per_io"]["vhost-blkd"][1],
             cell["osd_cpu_us_per_io"]["fio-rbd"][1], cell["osd_cpu_us_per_io"]["qsd"][1],
             cell["osd_cpu_us_per_io"]["vhost-blkd"][1],
             rl(r_fio), rl(r_qsd), rl(r_cpu)))
# Where each daemon's CPU goes: its own threads (main, I/O threads; they
# also run librbd's request set-up) against the threads librados and
# librbd start.  "floor" is the CPU ratio vhost-blkd would reach against
# qemu-storage-daemon if its own threads cost nothing at all.
if all("ceph_threads_cpu_s" in x for x in runs if x["case"] != "fio-rbd"):
    print("\nCPU us per I/O by thread (median): own threads + librados/librbd threads; "
          "floor = vb's librados/librbd threads / qsd's whole process, per repetition")
    print("%-9s %2s %3s | %-17s %-17s | %s" % ("rw", "q", "dep", "qsd own+ceph", "vb own+ceph",
                                              "floor vb/qsd"))
    for cell in res["cells"]:
        rw, q, d = cell["rw"], cell["queues"], cell["depth"]
        s, b = get("qsd", rw, q, d), get("blkd", rw, q, d)
        n = min(len(s), len(b))
        own = lambda rs: [1e6 * (x["proc_cpu_s"] - x["ceph_threads_cpu_s"]) / max(x["ios"], 1) for x in rs]
        lib = lambda rs: [1e6 * x["ceph_threads_cpu_s"] / max(x["ios"], 1) for x in rs]
        tot = lambda rs: [1e6 * x["proc_cpu_s"] / max(x["ios"], 1) for x in rs]
        floor = [lib(b)[i] / tot(s)[i] if tot(s)[i] > 0 else float("nan") for i in range(n)]
        cell["cpu_split_us_per_io"] = {
            "qsd": {"own": mmm(own(s)), "ceph": mmm(lib(s))},
            "vhost-blkd": {"own": mmm(own(b)), "ceph": mmm(lib(b))}}
        cell["cpu_floor_vs_qsd"] = floor
        print("%-9s %2d %3d | %5.0f + %-9.0f %5.0f + %-9.0f | %s"
              % (rw, q, d, statistics.median(own(s)), statistics.median(lib(s)),
                 statistics.median(own(b)), statistics.median(lib(b)),
                 " ".join("%.2f" % x for x in floor)))
print("\nRSS (kB): " + ", ".join("%s %s" % kv for kv in meta["rss_kb"].items()))
json.dump(res, open(sys.argv[2], "w"), indent=1)
print("written: " + sys.argv[2])
EOF
