#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# qcow2 against raw and against qemu-storage-daemon, through the same
# client (vhost-blk-bench), on the same data:
#   steady  4k randread and randwrite, depth 1 and 32, 1 and 2 queues, on
#           a fully allocated image (64 KiB clusters) and a raw copy of it:
#           vhost-blkd raw, vhost-blkd qcow2, qemu-storage-daemon qcow2
#           (aio=io_uring and aio=native: the better of the two per
#           repetition is QSD's figure) and an A/A control, a second
#           vhost-blkd raw on the same raw image (blkd-raw2: raw2/raw
#           is what the machine's noise alone does to a ratio); on DIR
#           with O_DIRECT, and on /dev/shm without (where the format's
#           own CPU shows).  All five daemons run at once, one client
#           at a time (with --warmup, each measured run follows an
#           unmeasured one of the same daemon and cell); the order of
#           the five alternates per repetition (raw, qcow2, QSD
#           io_uring, QSD native, raw2, then the reverse), so no
#           daemon always runs first or last.  1-queue cells pin the
#           daemon (all its threads) to CPU 1 and the client to CPU 0,
#           every daemon alike (with 2 CPUs the scheduler otherwise now
#           and then puts a spinning client and a polling iothread on
#           one CPU, and the run collapses); 2-queue cells pin nothing
#           (2 client threads and the daemon's threads share both CPUs,
#           for every daemon the same way).  CPU per I/O is the
#           daemon's whole process (every thread, idle ones included:
#           its main loop, QSD's thread pool) over the measured run,
#           from /proc/PID/stat (10 ms ticks); each daemon serves one
#           export and one client at a time, so no other export's
#           work is in it; polling in its iothread counts as CPU.
#   alloc   allocating writes on an empty image (4k random, 64k
#           sequential), vhost-blkd qcow2 against QSD qcow2; `qemu-img
#           check` after each run
#   sparse  4k random reads over a 1 TiB image with an L2 table every
#           512 MiB (L2 misses), both with l2-cache-size=8M (given in
#           bytes: QSD's keyval takes no suffix there); RSS after
#   ir      instructions per I/O (callgrind, 4k randread, depth 1 and
#           32): vhost-blkd qcow2 against vhost-blkd raw (and with -B,
#           the same of another build, interleaved with this one's)
# Repetitions are interleaved (rep 1 of every case, then rep 2, ...); the
# report gives min / median / max per cell and every ratio per repetition
# (rep r against rep r); a goal holds only when every repetition holds.
#
# Usage: scripts/bench/qcow2.sh [-o OUTDIR] [-t SECONDS] [-r REPS]
#            [-d DIR] [-m SIZE_MIB] [-n CALLGRIND_IOS] [-b BUILDDIR]
#            [--modes "halt irq"] [--only "steady alloc sparse ir"]
#            [--ir-depths "1 32"] [-B OTHER_BUILDDIR] [--no-shm] [--quick]
#            [--depths "1 32"] [--queues "1 2"] [--rws "randread randwrite"]
#            [--groups "direct shm"] [--warmup SECONDS] [--no-pin]
#            [--fixed-order]
#   -o  output directory (default /var/tmp/vhost-blk-qcow2-bench)
#   -t  seconds per run (default 2)       -r  repetitions (default 3)
#   -d  directory of the O_DIRECT images (default /var/tmp)
#   -m  image size in MiB (default 1024)  -n  I/Os per callgrind run (20000)
#   --modes  client models: halt = a halt-polling vCPU (--halt-poll-ns
#            200000, KVM's default), irq = a client that sleeps on its
#            interrupt whenever nothing completed (default: halt irq)
#   --ir-depths  the ir section's depths (default "1 32": a row each)
#   -B  ir: also measure this build (labelled "base"), each of its cases
#       right before the same case of -b's (an A/B in one run)
#   --depths, --queues, --rws, --groups  steady: only these cells
#            (default: all; a quick check of a few cells)
#   --warmup  steady: seconds of the unmeasured run before each measured
#            one (default 0: none)
#   --no-pin, --fixed-order  steady: no CPU pinning / the same order in
#            every repetition (the method before; to measure what the
#            pinning and the order do to the A/A spread)
#   --quick  1 rep of 1 s, 64 MiB images, depth 32 only (a smoke test)
# Outputs OUTDIR/raw.jsonl (every run) and OUTDIR/results.md (printed).
set -u

srcdir=$(cd "$(dirname "$0")/../.." && pwd)
out=/var/tmp/vhost-blk-qcow2-bench
runtime=2
reps=3
dir=/var/tmp
size_mib=1024
cg_ios=20000
builddir=$srcdir/build
modes="halt irq"
only="steady alloc sparse ir"
depths="1 32"
ir_depths="1 32"
base_build=
use_shm=1
halt_ns=200000
queues_l="1 2"
rws="randread randwrite"
groups="direct shm"
warmup=0
pin=1
alt_order=1

usage() { sed -n '3,68p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "qcow2.sh: $*" >&2; exit 1; }
log() { echo "# $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
    -o) out=$2; shift ;;
    -t) runtime=$2; shift ;;
    -r) reps=$2; shift ;;
    -d) dir=$2; shift ;;
    -m) size_mib=$2; shift ;;
    -n) cg_ios=$2; shift ;;
    -b) builddir=$2; shift ;;
    -B) base_build=$2; shift ;;
    --ir-depths) ir_depths=$2; shift ;;
    --modes) modes=$2; shift ;;
    --only) only=$2; shift ;;
    --no-shm) use_shm=0 ;;
    --depths) depths=$2; shift ;;
    --queues) queues_l=$2; shift ;;
    --rws) rws=$2; shift ;;
    --groups) groups=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --no-pin) pin=0 ;;
    --fixed-order) alt_order=0 ;;
    --quick) reps=1; runtime=1; size_mib=64; depths=32; ir_depths=32
             cg_ios=2000 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
done
want_section() { case " $only " in *" $1 "*) return 0 ;; esac; return 1; }

BLKD=$builddir/tools/vhost-blkd
BENCH=$builddir/tools/vhost-blk-bench
QSD=$(command -v qemu-storage-daemon) ||
    die "qemu-storage-daemon not found (Debian: apt-get install qemu-system-common)"
command -v qemu-img >/dev/null || die "qemu-img not found (Debian: qemu-utils)"
[ -x "$BLKD" ] && [ -x "$BENCH" ] ||
    die "$BLKD or $BENCH missing: build first (ninja -C $builddir)"

mkdir -p "$out" || die "cannot create $out"
tmp=$(mktemp -d /var/tmp/vb-qcow2b.XXXXXX) || die "mktemp failed"
raw=$out/raw.jsonl
: > "$raw"
QSIZE=256

declare -A PID SOCK
cleanup() {
    local n
    for n in "${!PID[@]}"; do kill -TERM "${PID[$n]}" 2>/dev/null; done
    for n in "${!PID[@]}"; do wait "${PID[$n]}" 2>/dev/null; done
    rm -rf "$tmp"
    [ -n "${shmdir:-}" ] && rm -rf "$shmdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_sock() {
    local n=0 max=$(( ${2:-20} * 20 ))
    while [ ! -S "${SOCK[$1]}" ]; do
        kill -0 "${PID[$1]}" 2>/dev/null || {
            echo "qcow2.sh: $1 exited; its log:" >&2
            sed 's/^/    /' "$tmp/$1.log" >&2; return 1; }
        [ $n -ge $max ] && { echo "qcow2.sh: $1: no socket" >&2; return 1; }
        sleep 0.05; n=$((n + 1))
    done
}

# start NAME KIND BLOCKDEV...: KIND blkd or qsd; the last --blockdev's
# node is exported (node-name=top) with 2 queues.  WRAP prefixes the
# command (valgrind).
WRAP=()
BLKD_ARGS=()
start() {
    local name=$1 kind=$2 b args=()
    shift 2
    SOCK[$name]=$tmp/$name.sock
    for b in "$@"; do args+=(--blockdev "$b"); done
    local exp="type=vhost-user-blk,id=e,node-name=top,addr.type=unix,addr.path=${SOCK[$name]},writable=on,num-queues=2"
    if [ "$kind" = qsd ]; then
        "${WRAP[@]}" "$QSD" --object iothread,id=iot0 "${args[@]}" \
            --export "$exp,iothread=iot0" > "$tmp/$name.log" 2>&1 &
    else
        "${WRAP[@]}" "${BLKD_BIN:-$BLKD}" "${BLKD_ARGS[@]}" "${args[@]}" \
            --export "$exp" \
            > "$tmp/$name.log" 2>&1 &
    fi
    PID[$name]=$!
    wait_sock "$name" "${WAIT_SECS:-20}"
}

stop() {
    local name=$1 n=0
    [ -n "${PID[$name]:-}" ] || return 0
    kill -TERM "${PID[$name]}" 2>/dev/null
    while kill -0 "${PID[$name]}" 2>/dev/null && [ $n -lt 600 ]; do
        sleep 0.1; n=$((n + 1))
    done
    kill -KILL "${PID[$name]}" 2>/dev/null
    wait "${PID[$name]}" 2>/dev/null
    unset "PID[$name]"
    rm -f "${SOCK[$name]}"
}

# psi_some: microseconds some task has waited for a CPU since boot
# (/proc/pressure/cpu; 0 without PSI).  Over a run, against its length,
# it says how much the run shared its CPUs, the other engineers' and
# jobs' load included (raw.jsonl's cpu_wait).
psi_some() {
    local t
    t=$(sed -n 's/^some .*total=\([0-9]*\).*/\1/p' \
        /proc/pressure/cpu 2>/dev/null)
    echo "${t:-0}"
}

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/${PID[$1]}/status" 2>/dev/null || echo 0; }

# place CASE QUEUES: with cell_pin set (steady), a 1-queue cell puts
# every thread of CASE's daemon on CPU 1 and the client on CPU 0; a
# 2-queue cell gives both CPUs to both.  Sets bench_pin and placed (the
# daemon's CPUs, for raw.jsonl).
cell_pin=0
cell_warm=0
bench_pin=()
placed=any
place() {
    local c=$1 q=$2 cpus=0,1
    bench_pin=(); placed=any
    [ "$cell_pin" = 1 ] || return 0
    [ "$q" = 1 ] && cpus=1
    taskset -a -p -c "$cpus" "${PID[$c]}" > /dev/null ||
        { echo "qcow2.sh: cannot pin $c to CPU $cpus" >&2; return 1; }
    placed=$cpus
    [ "$q" = 1 ] && bench_pin=(taskset -c 0)
    return 0
}

# run GROUP CASE REP RW BS DEPTH QUEUES MODE [BENCH ARGS]: one run, one
# line of raw.jsonl (after an unmeasured warm-up run of cell_warm
# seconds, when set).
run() {
    local g=$1 c=$2 r=$3 rw=$4 bs=$5 d=$6 q=$7 mode=$8 j p=()
    shift 8
    [ "$mode" = halt ] && p=(--halt-poll-ns "$halt_ns")
    place "$c" "$q" || return 1
    if [ "$cell_warm" != 0 ] &&
        ! "${bench_pin[@]}" "$BENCH" --socket "${SOCK[$c]}" --rw "$rw" \
            --bs "$bs" --iodepth "$d" --queues "$q" --queue-size $QSIZE \
            --runtime "$cell_warm" "${p[@]}" "$@" \
            > /dev/null 2> "$tmp/bench.err"; then
        echo "qcow2.sh: $c ($g $rw depth $d queues $q $mode):" \
            "warm-up failed:" >&2
        sed 's/^/    /' "$tmp/bench.err" >&2
        return 1
    fi
    local w0 w1 t0 t1
    w0=$(psi_some); t0=$(date +%s%N)
    if ! j=$("${bench_pin[@]}" "$BENCH" --socket "${SOCK[$c]}" \
            --rw "$rw" --bs "$bs" \
            --iodepth "$d" --queues "$q" --queue-size $QSIZE \
            --backend-pid "${PID[$c]}" --runtime "$runtime" --json \
            "${p[@]}" "$@" 2> "$tmp/bench.err"); then
        echo "qcow2.sh: $c ($g $rw depth $d queues $q $mode) failed:" >&2
        sed 's/^/    /' "$tmp/bench.err" >&2
        return 1
    fi
    w1=$(psi_some); t1=$(date +%s%N)
    local cw
    cw=$(awk -v w=$((w1 - w0)) -v t=$(((t1 - t0) / 1000)) \
        'BEGIN { printf "%.3f", (t > 0 ? w / t : 0) }')
    echo "{\"kind\": \"run\", \"group\": \"$g\", \"case\": \"$c\", \"rep\": $r, \"rw\": \"$rw\", \"bs\": \"$bs\", \"depth\": $d, \"queues\": $q, \"mode\": \"$mode\", \"daemon_cpus\": \"$placed\", \"cpu_wait\": $cw, \"rss_kb\": $(rss_kb "$c"), \"r\": $j}" >> "$raw"
}

# file_bdev PATH DIRECT [NODE]: the file node of a case (f0, or NODE).
file_bdev() {
    echo "driver=file,node-name=${3:-f0},filename=$1,cache.direct=$2,aio=io_uring"
}

# ------------------------------------------------------------ the images
# One raw image of random data per place, and a fully allocated qcow2
# (64 KiB clusters) converted from it: the same bytes behind both.
make_images() {
    local where=$1 rawimg=$1/vb-qcow2b.raw q=$1/vb-qcow2b.qcow2
    local want=$((size_mib * 1024 * 1024))
    if [ ! -f "$rawimg" ] || [ "$(stat -c %s "$rawimg")" -ne "$want" ]; then
        log "creating $rawimg ($size_mib MiB of random data) and its qcow2"
        dd if=/dev/urandom of="$rawimg" bs=1M count="$size_mib" \
            status=none conv=fsync || die "cannot write $rawimg"
        rm -f "$q"
    fi
    if [ ! -f "$q" ]; then
        qemu-img convert -f raw -O qcow2 -o cluster_size=65536 \
            "$rawimg" "$q" || die "qemu-img convert to $q failed"
        rm -f "$1/vb-qcow2b-qsd.qcow2" "$1/vb-qcow2b-qsd2.qcow2"
    fi
    # QSD gets its own copy: both daemons hold the image open at once,
    # and each takes the image lock a writer takes (QEMU's byte locks).
    local c
    for c in qsd qsd2; do
        if [ ! -f "$1/vb-qcow2b-$c.qcow2" ]; then
            cp --sparse=never "$q" "$1/vb-qcow2b-$c.qcow2" ||
                die "cannot copy $q for QSD"
        fi
    done
}

# steady GROUP WHERE DIRECT: the five cases on WHERE's images, all
# started once and measured in one interleave: per repetition, per cell,
# each case in turn (the order reversed every other repetition).  The
# two raw daemons share one image (locking=off on both, the same
# options; they never run at once); QSD's two engines each have their
# own copy of the qcow2 (QSD takes QEMU's image locks).
steady() {
    local g=$1 where=$2 direct=$3 r rw d q mode c
    local rawimg=$where/vb-qcow2b.raw q2=$where/vb-qcow2b.qcow2
    local -a cases=(blkd-raw blkd-qcow2 qsd-io_uring qsd-native blkd-raw2)
    local -a order
    make_images "$where"
    start blkd-raw blkd "$(file_bdev "$rawimg" "$direct" top),locking=off" ||
        die "vhost-blkd raw did not start"
    start blkd-qcow2 blkd "$(file_bdev "$q2" "$direct")" \
        "driver=qcow2,node-name=top,file=f0" ||
        die "vhost-blkd qcow2 did not start"
    start qsd-io_uring qsd "$(file_bdev "$where/vb-qcow2b-qsd.qcow2" "$direct")" \
        "driver=qcow2,node-name=top,file=f0" || die "QSD did not start"
    local aio=threads
    [ "$direct" = on ] && aio=native
    start qsd-native qsd \
        "driver=file,node-name=f0,filename=$where/vb-qcow2b-qsd2.qcow2,cache.direct=$direct,aio=$aio" \
        "driver=qcow2,node-name=top,file=f0" || die "QSD did not start"
    start blkd-raw2 blkd "$(file_bdev "$rawimg" "$direct" top),locking=off" ||
        die "the second vhost-blkd raw did not start"
    if [ "$pin" = 1 ] && [ "$(nproc)" -ge 2 ]; then
        cell_pin=1
    fi
    cell_warm=$warmup
    for r in $(seq 1 "$reps"); do
        order=("${cases[@]}")
        if [ "$alt_order" = 1 ] && [ $((r % 2)) = 0 ]; then
            order=(blkd-raw2 qsd-native qsd-io_uring blkd-qcow2 blkd-raw)
        fi
        for rw in $rws; do
            for d in $depths; do
                for q in $queues_l; do
                    for mode in $modes; do
                        for c in "${order[@]}"; do
                            run "$g" "$c" "$r" "$rw" 4k "$d" "$q" "$mode"
                        done
                    done
                done
            done
        done
        log "$g: repetition $r of $reps done"
    done
    cell_pin=0 cell_warm=0
    for c in "${cases[@]}"; do stop "$c"; done
}

# alloc: allocating writes into a new empty image, each run on its own.
alloc() {
    local r c rw bs img kind chk
    for r in $(seq 1 "$reps"); do
        for rw in "randwrite 4k" "write 64k"; do
            set -- $rw
            for c in blkd-qcow2 qsd-qcow2; do
                img=$dir/vb-qcow2b-alloc.qcow2
                rm -f "$img"
                qemu-img create -q -f qcow2 -o cluster_size=65536 "$img" \
                    "${size_mib}M" || die "qemu-img create failed"
                kind=blkd; [ "$c" = qsd-qcow2 ] && kind=qsd
                start "$c" "$kind" "$(file_bdev "$img" on)" \
                    "driver=qcow2,node-name=top,file=f0" ||
                    die "$c did not start"
                run alloc "$c" "$r" "$1" "$2" 32 1 irq
                stop "$c"
                if chk=$(qemu-img check --output=json "$img" 2>&1); then
                    chk=$(echo "$chk" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("corruptions",0), d.get("leaks",0))')
                else
                    chk="check-failed -1"
                fi
                echo "{\"kind\": \"check\", \"case\": \"$c\", \"rep\": $r, \"rw\": \"$1\", \"corruptions\": \"${chk% *}\", \"leaks\": \"${chk#* }\"}" >> "$raw"
            done
        done
    done
    rm -f "$dir/vb-qcow2b-alloc.qcow2"
}

# sparse: 1 TiB, one 4k write every 512 MiB (an L2 table each: 2048 of
# 64 KiB, 128 MiB of L2), read at random with an 8 MiB L2 cache.
sparse() {
    local img=$dir/vb-qcow2b-sparse.qcow2 r c kind i
    if [ ! -f "$img" ]; then
        log "creating $img (1 TiB, 2048 L2 tables)"
        qemu-img create -q -f qcow2 -o cluster_size=65536 "$img" 1T ||
            die "qemu-img create failed"
        for i in $(seq 0 2047); do
            echo "write -P 0x5a $((i * 512))M 4k"
        done | qemu-io -f qcow2 "$img" > /dev/null ||
            die "qemu-io could not fill $img"
    fi
    for r in $(seq 1 "$reps"); do
        for c in blkd-qcow2 qsd-qcow2; do
            kind=blkd; [ "$c" = qsd-qcow2 ] && kind=qsd
            start "$c" "$kind" "$(file_bdev "$img" on)" \
                "driver=qcow2,node-name=top,file=f0,l2-cache-size=8388608" ||
                die "$c did not start"
            for mode in $modes; do
                run sparse "$c" "$r" randread 4k 32 1 "$mode"
            done
            stop "$c"
        done
    done
}

# ir: callgrind, (Ir(2N) - Ir(N)) / N so start-up and connection cancel.
# Counted: every instruction of the daemon's process (all its threads:
# the iothread, the main thread, qcow2's metadata thread) between the two
# runs' ends, i.e. the N requests the second run adds, in its steady
# state: the image fully allocated, every L2 slice it touches cached (the
# first N requests loaded them; -m 256 is one L2 table, 8 slices), the
# same random offsets (the bench's seed) for raw and qcow2, at depth 1
# and at depth 32 (a row each), the cases of a repetition one after the
# other (raw, qcow2; with -B base raw, raw, base qcow2, qcow2).
# The daemon runs with --poll-max-ns 0, raw and qcow2 alike: busy
# polling's instructions are waiting, not work (their number grows with
# the time a request takes, slowed 50x by callgrind), and the host load
# monitor switches polling off and on with what else runs on the host:
# instructions that depend on timing and load, not on the work.  Two
# more figures, from the same two files, with the same
# difference: the iothread's event loop iterations per 1000 I/Os
# (aio_poll() calls from iothread_run(): how the requests happened to
# batch, which still depends on timing) and the self instructions of
# block/qcow2*.c per I/O (the format's own cost, which does not).
cg_loops() {
    callgrind_annotate --auto=no --threshold=100 --tree=calling "$1" 2>/dev/null |
        awk '/\*  .*:iothread_run \[/ { t = 1; next } /\*  / { t = 0 }
             t && /:aio_poll \(/ { c = $0; sub(/^.*aio_poll \(/, "", c)
                                   sub(/x\).*$/, "", c); gsub(",", "", c)
                                   s += c } END { print s + 0 }'
}
cg_own() {
    callgrind_annotate --auto=no --threshold=100 "$1" 2>/dev/null |
        awk '$1 ~ /^[0-9,]+$/ && /\/block\/qcow2[^\/]*\.c:/ {
             c = $1; gsub(",", "", c); s += c } END { print s + 0 }'
}
# ir_case NAME DEPTH BUILD LABEL BLOCKDEV...: one callgrind figure.
ir_case() {
    local name=$1 d=$2 bdir=$3 label=$4 n t
    shift 4
    local -a irs=() loops=() own=()
    for n in "$cg_ios" $((2 * cg_ios)); do
        WRAP=(valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$name.$n")
        BLKD_BIN=$bdir/tools/vhost-blkd BLKD_ARGS=(--poll-max-ns 0)
        WAIT_SECS=120
        start "$name" blkd "$@" ||
            { WRAP=() BLKD_ARGS=() BLKD_BIN=; return 1; }
        WRAP=() BLKD_ARGS=() BLKD_BIN=
        "$BENCH" --socket "${SOCK[$name]}" --rw randread --bs 4k \
            --iodepth "$d" --queue-size $QSIZE --ios "$n" --json \
            > /dev/null || { stop "$name"; return 1; }
        stop "$name"
        t=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/$name.log" | tail -n1)
        [ -n "$t" ] || { echo "qcow2.sh: no callgrind total for $name" >&2; return 1; }
        irs+=("$t")
        loops+=("$(cg_loops "$tmp/cg.$name.$n")")
        own+=("$(cg_own "$tmp/cg.$name.$n")")
        rm -f "$tmp/cg.$name.$n"
    done
    echo "{\"kind\": \"callgrind\", \"case\": \"$name\", \"build\": \"$label\", \"depth\": $d, \"ios\": $cg_ios, \"ir_per_io\": $(( (irs[1] - irs[0]) / cg_ios )), \"loops_per_kio\": $(( (loops[1] - loops[0]) * 1000 / cg_ios )), \"own_ir_per_io\": $(( (own[1] - own[0]) / cg_ios ))}" >> "$raw"
}

ir() {
    local r d c b builds=("$builddir this")
    make_images "$dir"
    command -v valgrind >/dev/null || { log "no valgrind: ir skipped"; return 0; }
    if [ -n "$base_build" ]; then
        [ -x "$base_build/tools/vhost-blkd" ] ||
            die "$base_build/tools/vhost-blkd missing (-B: a build directory)"
        builds=("$base_build base" "$builddir this")
    fi
    for r in $(seq 1 "$reps"); do
        for d in $ir_depths; do
            for c in raw qcow2; do
                for b in "${builds[@]}"; do
                    set -- $b
                    if [ "$c" = raw ]; then
                        ir_case blkd-raw "$d" "$1" "$2" \
                            "$(file_bdev "$dir/vb-qcow2b.raw" on top)"
                    else
                        ir_case blkd-qcow2 "$d" "$1" "$2" \
                            "$(file_bdev "$dir/vb-qcow2b.qcow2" on)" \
                            "driver=qcow2,node-name=top,file=f0"
                    fi
                done
            done
        done
        log "ir: repetition $r of $reps done"
    done
}

log "output in $out; $runtime s per run, $reps repetitions; modes: $modes; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "{\"kind\": \"meta\", \"started\": \"$(date -u +%FT%TZ)\", \"runtime\": $runtime, \"reps\": $reps, \"size_mib\": $size_mib, \"dir\": \"$dir\", \"host_cpus\": $(nproc), \"kernel\": \"$(uname -r)\", \"qsd\": \"$($QSD --version | head -n1)\"}" >> "$raw"
if want_section steady; then
    case " $groups " in *" direct "*)
        steady "direct:$dir" "$dir" on ;;
    esac
    if [ "$use_shm" = 1 ] && [[ " $groups " = *" shm "* ]]; then
        shmdir=$(mktemp -d /dev/shm/vb-qcow2b.XXXXXX) || die "no /dev/shm"
        steady "shm" "$shmdir" off
        rm -rf "$shmdir"; shmdir=
    fi
fi
want_section alloc && alloc
want_section sparse && sparse
want_section ir && ir
echo "{\"kind\": \"meta\", \"ended\": \"$(date -u +%FT%TZ)\", \"load_end\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> "$raw"
python3 "$srcdir/scripts/bench/qcow2-report.py" "$raw" | tee "$out/results.md"
