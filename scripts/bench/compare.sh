#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Compare vhost-blkd with qemu-storage-daemon through the same client
# (vhost-blk-bench), with plain fio on the same file as the limit, plus
# ablations (batching, engines, polling), instructions per I/O (callgrind),
# syscalls per request (strace) and resident memory.  Repetitions are
# interleaved (rep 1 of every case, then rep 2, ...); every cell reports
# min / median / max and every ratio is given per repetition (rep r of one
# case against rep r of the other, taken seconds apart); a goal is met only
# when every repetition meets it.
#
# Usage: scripts/bench/compare.sh [-o OUTDIR] [-t SECONDS] [-r REPS]
#            [-f FILE] [-m SIZE_MIB] [-n CALLGRIND_IOS] [-b BUILDDIR]
#            [--quick | --short] [--pin] [--modes "irq halt poll"]
#            [--rates "20000 100000"]
#            [--only "tune null file rate iothreads ablations cost"]
#            [--no-callgrind] [--no-strace] [--no-ablations]
#   -o  output directory (default /var/tmp/vhost-blk-compare)
#   -t  seconds per run (default 2)       -r  repetitions (default 3)
#   -f  raw file (default /var/tmp/vhost-blk-compare.img, created once)
#   -m  its size in MiB (default 1024)    -n  I/Os per callgrind run (20000)
#   --quick  1 rep of 1 s, a few cases, no callgrind/strace (CI smoke test)
#   --short  every goal's table in a few minutes: 3 reps of 1 s (2 s at
#            fixed rates), depths 1, 32, 128, queues 1 and 4, callgrind,
#            no strace/ablations
#   --modes  client models: irq = the bench sleeps on its call eventfd
#            whenever nothing completed (a guest taking interrupts), halt =
#            it polls for up to $VB_HALT_POLL_NS (200000, KVM's default)
#            then sleeps (--halt-poll-ns: a halt-polling vCPU), poll = it
#            busy-polls with interrupts off (a polling driver), pollirq =
#            it polls but asks for interrupts (--poll-interrupts, the poll
#            mode of figures before 2026-12-01) (default: irq halt poll)
#   --rates  open-loop rates for the rate section (--rate, sleeping
#            client, depth 32, null and file; default: 20000 100000)
#   --pin    daemons (and fio) on CPU $VB_DAEMON_CPU (default 1), the bench
#            on CPU $VB_BENCH_CPU (default 0); default: unpinned
#   --report DIR  measure nothing: redo DIR's results.md, results.json and
#            plots from its raw.jsonl and extra.jsonl
#   --only   run only these sections (tune picks qsd's best settings; null
#            and file use them as the anchor, else qsd's defaults)
# The ablations run on the raw file and on a RAM-backed file in /dev/shm
# ($VB_RAM_DIR, 256 MiB, removed afterwards).
# Outputs: OUTDIR/results.json, OUTDIR/results.md (also printed),
#          OUTDIR/raw.jsonl (every run), OUTDIR/*.png (IOPS and CPU per I/O
#          against depth and queues, p99 against rate).
# After each polling-client run it waits $VB_SETTLE seconds (default 2): a
# run that fills every CPU may pause vhost-blkd's polling (busy host), which
# resumes after 1.5 s of calm, and the next cell must not inherit that.
# Recorded per run: the 1-minute load average, the daemon's CPU time per
# I/O (/proc/PID/stat), the bench's own CPU per I/O and busiest thread.
set -u

srcdir=$(cd "$(dirname "$0")/../.." && pwd)
out=/var/tmp/vhost-blk-compare
runtime=2
reps=3
file=/var/tmp/vhost-blk-compare.img
size_mib=1024
ram_mib=256
cg_ios=20000
builddir=$srcdir/build
quick=0
do_callgrind=1
do_strace=1
do_ablations=1
short=0
pin=0
modes="irq halt poll"
rates="20000 100000"
halt_ns=${VB_HALT_POLL_NS:-200000}
settle=${VB_SETTLE:-2}
only="tune null file rate iothreads ablations cost"
QSIZE=512
NQ=4

usage() { sed -n '3,32p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case $1 in
    -o) out=$2; shift ;;
    -t) runtime=$2; shift ;;
    -r) reps=$2; shift ;;
    -f) file=$2; shift ;;
    -m) size_mib=$2; shift ;;
    -n) cg_ios=$2; shift ;;
    -b) builddir=$2; shift ;;
    --quick) quick=1 ;;
    --short) short=1 ;;
    --pin) pin=1 ;;
    --modes) modes=$2; shift ;;
    --rates) rates=$2; shift ;;
    --only) only=$2; only_given=1; shift ;;
    --report)
        [ -f "$2/raw.jsonl" ] && [ -f "$2/results.json" ] ||
            { echo "compare.sh: --report: $2 has no raw.jsonl and results.json" >&2; exit 2; }
        exec python3 "$srcdir/scripts/bench/compare-report.py" --raw "$2/raw.jsonl" \
            --extra "$2/extra.jsonl" --out "$2" --meta-from "$2/results.json" ;;
    --no-callgrind) do_callgrind=0 ;;
    --no-strace) do_strace=0 ;;
    --no-ablations) do_ablations=0 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "compare.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
if [ "$quick" = 1 ]; then
    runtime=1; reps=1; do_callgrind=0; do_strace=0; do_ablations=0
    settle=${VB_SETTLE:-0}     # a smoke test: nothing to settle for
    [ -n "${only_given:-}" ] || only="null file rate"
    rates="20000"
    [ "$size_mib" = 1024 ] && size_mib=64
    [ "$file" = /var/tmp/vhost-blk-compare.img ] &&
        file=/var/tmp/vhost-blk-compare-quick.img
fi
if [ "$short" = 1 ]; then
    runtime=1; do_strace=0; do_ablations=0
    [ "$cg_ios" = 20000 ] && cg_ios=10000
    [ -n "${only_given:-}" ] || only="tune null file rate iothreads cost"
fi
want_section() { case " $only " in *" $1 "*) return 0 ;; esac; return 1; }
want_section ablations || do_ablations=0
want_section cost || { do_callgrind=0; do_strace=0; }
dcpu=; bcpu=
if [ "$pin" = 1 ]; then dcpu=${VB_DAEMON_CPU-1}; bcpu=${VB_BENCH_CPU-0}; fi
for m in $modes; do
    case $m in irq|halt|poll|pollirq) ;; *) echo "compare.sh: --modes: irq, halt, poll or pollirq, not '$m'" >&2; exit 2 ;; esac
done

die() { echo "compare.sh: $*" >&2; exit 1; }
log() { echo "# $*" >&2; }

# ---------------------------------------------------------------- tools
BLKD=${VHOST_BLKD:-$builddir/tools/vhost-blkd}
BENCH=${VHOST_BLK_BENCH:-$builddir/tools/vhost-blk-bench}
if [ -z "${VHOST_BLKD:-}" ] || [ -z "${VHOST_BLK_BENCH:-}" ]; then
    if [ ! -d "$builddir/meson-private" ]; then
        (cd "$srcdir" && ./configure --builddir="$builddir") >/dev/null ||
            die "configure failed"
    fi
    ninja -C "$builddir" tools/vhost-blkd tools/vhost-blk-bench >/dev/null ||
        die "building vhost-blkd and vhost-blk-bench failed"
fi
[ -x "$BLKD" ] || die "$BLKD not found"
[ -x "$BENCH" ] || die "$BENCH not found"
QSD=${QEMU_STORAGE_DAEMON:-qemu-storage-daemon}
command -v "$QSD" >/dev/null || die "qemu-storage-daemon not installed (apt-get install qemu-utils)"
have_fio=1; command -v fio >/dev/null || { have_fio=0; log "fio not found: no limit column"; }
command -v python3 >/dev/null || die "python3 is needed for the report"
if [ "$do_callgrind" = 1 ] && ! command -v valgrind >/dev/null; then
    log "valgrind not found: skipping instructions per I/O"; do_callgrind=0
fi
if [ "$do_strace" = 1 ] && ! command -v strace >/dev/null; then
    log "strace not found: skipping syscalls per request"; do_strace=0
fi
pin_d=(); [ -n "$dcpu" ] && pin_d=(taskset -c "$dcpu")
pin_b=(); [ -n "$bcpu" ] && pin_b=(taskset -c "$bcpu")

mkdir -p "$out" || die "cannot create $out"
tmp=$(mktemp -d /var/tmp/vb-compare.XXXXXX) || die "mktemp failed"
raw=$out/raw.jsonl
extra=$out/extra.jsonl
: > "$raw"; : > "$extra"

declare -A PID SOCK
cleanup() {
    local n
    for n in "${!PID[@]}"; do
        kill -TERM "${PID[$n]}" 2>/dev/null
    done
    for n in "${!PID[@]}"; do
        wait "${PID[$n]}" 2>/dev/null
    done
    rm -rf "$tmp"
    [ -n "${ramfile:-}" ] && rm -f "$ramfile"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- file
want=$((size_mib * 1024 * 1024))
if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" -ne "$want" ]; then
    log "creating $file ($size_mib MiB of random data)..."
    dd if=/dev/urandom of="$file" bs=1M count="$size_mib" status=none conv=fsync ||
        die "cannot create $file"
fi
null_size=$((1024 * 1024 * 1024))

# ---------------------------------------------------------------- daemons

# wait_sock NAME [SECONDS]
wait_sock() {
    local n=0 max=$(( ${2:-10} * 20 ))
    while [ ! -S "${SOCK[$1]}" ]; do
        kill -0 "${PID[$1]}" 2>/dev/null || {
            echo "compare.sh: $1 exited; its log:" >&2
            sed 's/^/    /' "$tmp/$1.log" >&2; return 1; }
        [ $n -ge $max ] && { echo "compare.sh: $1: no socket" >&2; return 1; }
        sleep 0.05; n=$((n + 1))
    done
}

# blkd NAME EXPORT_OPTS [DAEMON ARGS...]: vhost-blkd with one export.
# WRAP (array) prefixes the command, e.g. valgrind.
WRAP=()
blkd() {
    local name=$1 opts=$2
    shift 2
    SOCK[$name]=$tmp/$name.sock
    "${pin_d[@]}" "${WRAP[@]}" "$BLKD" --log-level info \
        --export "socket=${SOCK[$name]},$opts,num-queues=$NQ,queue-size=$QSIZE" \
        "$@" > "$tmp/$name.log" 2>&1 &
    PID[$name]=$!
    wait_sock "$name" "${WAIT_SECS:-10}"
}

# qsd NAME BLOCKDEV_OPTS [IOTHREAD_OPTS]: qemu-storage-daemon, export in an
# iothread (as one would run it for performance; iothreads poll
# adaptively); IOTHREAD_OPTS e.g. ",poll-max-ns=0".
qsd() {
    local name=$1 bdev=$2 iot=${3:-}
    SOCK[$name]=$tmp/$name.sock
    "${pin_d[@]}" "${WRAP[@]}" "$QSD" --object "iothread,id=iot0$iot" \
        --blockdev "$bdev,node-name=f" \
        --export "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path=${SOCK[$name]},writable=on,num-queues=$NQ,iothread=iot0" \
        > "$tmp/$name.log" 2>&1 &
    PID[$name]=$!
    wait_sock "$name" "${WAIT_SECS:-10}"
}

stop() {
    local name=$1 n=0
    [ -n "${PID[$name]:-}" ] || return 0
    kill -TERM "${PID[$name]}" 2>/dev/null
    # A daemon under valgrind may never exit (qemu-storage-daemon 7.2 once
    # hung there on a syscall valgrind does not know): 60 s, then KILL.
    while kill -0 "${PID[$name]}" 2>/dev/null && [ $n -lt 600 ]; do
        sleep 0.1; n=$((n + 1))
    done
    if kill -0 "${PID[$name]}" 2>/dev/null; then
        log "$name did not exit 60 s after SIGTERM: killed"
        kill -KILL "${PID[$name]}" 2>/dev/null
    fi
    wait "${PID[$name]}" 2>/dev/null
    unset "PID[$name]"
}

# rss NAME GROUP: record VmRSS and RssAnon of a running daemon.
rss() {
    local st=/proc/${PID[$1]}/status
    [ -r "$st" ] || return 0
    echo "{\"kind\": \"rss\", \"group\": \"$2\", \"case\": \"$1\", \"vmrss_kb\": $(awk '/^VmRSS/ {print $2}' "$st"), \"rssanon_kb\": $(awk '/^RssAnon/ {print $2}' "$st")}" >> "$extra"
}

# ---------------------------------------------------------------- runs

# CPU time (user + sys, clock ticks) of a process, all its threads.
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# bench GROUP CASE REP DEPTH QUEUES MODE [BENCH ARGS...]
# MODE irq: the bench sleeps on its call eventfd; halt: --halt-poll-ns;
# poll: --poll; pollirq: --poll-interrupts.  RATE (variable, IOPS) runs it
# open-loop.  The bench measures the daemon's CPU itself (--backend-pid);
# daemon_cpu_s (the same ticks read from here) is kept for older reports.
RATE=
bench() {
    local g=$1 c=$2 r=$3 d=$4 q=$5 mode=$6 j t0 t1 l p=() rt=
    shift 6
    [ "$mode" = halt ] && p=(--halt-poll-ns "$halt_ns")
    [ "$mode" = poll ] && p=(--poll)
    [ "$mode" = pollirq ] && p=(--poll-interrupts)
    [ -n "$RATE" ] && p+=(--rate "$RATE") && rt=", \"rate\": $RATE"
    p+=(--backend-pid "${PID[$c]}")
    l=$(load1)
    t0=$(proc_ticks "${PID[$c]}")
    if ! j=$("${pin_b[@]}" "$BENCH" --socket "${SOCK[$c]}" --rw randread \
            --bs 4k --iodepth "$d" --queues "$q" --queue-size $QSIZE \
            --runtime "$runtime" --json "${p[@]}" "$@" 2> "$tmp/bench.err"); then
        echo "compare.sh: bench against $c (depth $d, queues $q, $mode) failed:" >&2
        sed 's/^/    /' "$tmp/bench.err" >&2
        return 1
    fi
    t1=$(proc_ticks "${PID[$c]}")
    echo "{\"kind\": \"run\", \"group\": \"$g\", \"case\": \"$c\", \"rep\": $r, \"depth\": $d, \"queues\": $q, \"mode\": \"$mode\"$rt, \"load1\": $l, \"daemon_cpu_s\": $(( t1 - t0 )).0e-2, \"r\": $j}" >> "$raw"
    # A polling client fills every CPU: vhost-blkd's busy-host check may
    # pause its polling, and resumes only after 1.5 s of calm.  Let that
    # pass, so the next cell is measured in its own steady state and not
    # in this one's aftermath.
    [ "$mode" != irq ] && sleep "$settle"
    return 0
}

# fio_limit GROUP REP DEPTH QUEUES CASE: plain fio on the file (io_uring,
# O_DIRECT).  CASE fio: fio's defaults (one submit per I/O); CASE
# fio-batched: up to 16 I/Os per submit and per reap, fio at its fastest.
fio_limit() {
    local g=$1 r=$2 d=$3 q=$4 c=$5 b=()
    [ "$have_fio" = 1 ] || return 0
    if [ "$c" = fio-batched ]; then
        local n=$(( d < 16 ? d : 16 ))
        b=(--iodepth_batch_submit="$n" --iodepth_batch_complete_max="$n")
    fi
    "${pin_d[@]}" fio --name=limit --filename="$file" --direct=1 \
        --ioengine=io_uring --rw=randread --bs=4k --iodepth="$d" "${b[@]}" \
        --numjobs="$q" --runtime="$runtime" --time_based --group_reporting \
        --output-format=json > "$tmp/fio.json" 2> "$tmp/fio.err" || {
        echo "compare.sh: fio failed:" >&2; cat "$tmp/fio.err" >&2; return 1; }
    python3 - "$tmp/fio.json" "$g" "$r" "$d" "$q" "$c" "$(load1)" >> "$raw" <<'EOF'
import json, sys
f = json.load(open(sys.argv[1]))
rd = f["jobs"][0]["read"]
pct = rd.get("clat_ns", {}).get("percentile", {})
r = {"iops": rd["iops"], "errors": 0,
     "lat_us": {"p50": pct.get("50.000000", 0) / 1e3,
                "p99": pct.get("99.000000", 0) / 1e3,
                "p99_9": pct.get("99.900000", 0) / 1e3}}
print(json.dumps({"kind": "run", "group": sys.argv[2], "case": sys.argv[6],
                  "rep": int(sys.argv[3]), "depth": int(sys.argv[4]),
                  "queues": int(sys.argv[5]), "mode": "irq",
                  "load1": float(sys.argv[7]), "r": r}))
EOF
}

# sweep GROUP "CASES" "DEPTHS" "QUEUES" [fio [MODES]]: interleaved
# repetitions, each client mode of $modes (or MODES) in turn.
sweep() {
    local g=$1 cases=$2 depths=$3 queues=$4 with_fio=${5:-} ms=${6:-$modes}
    local r d q c m
    for r in $(seq 1 "$reps"); do
        log "$g: repetition $r/$reps (load $(load1))"
        for q in $queues; do
            for d in $depths; do
                for m in $ms; do
                    for c in $cases; do
                        bench "$g" "$c" "$r" "$d" "$q" "$m" || return 1
                    done
                done
                if [ -n "$with_fio" ] && [ "$with_fio" != nofio ]; then
                    fio_limit "$g" "$r" "$d" "$q" fio || return 1
                    fio_limit "$g" "$r" "$d" "$q" fio-batched || return 1
                fi
            done
        done
    done
    return 0
}

# rate_sweep GROUP "CASES": the fixed rates of $rates, sleeping client,
# depth 32 (room for bursts), interleaved per repetition; 2 s per run at
# least, so the daemon's CPU time (10 ms ticks) is read to ~1%.
rate_sweep() {
    local g=$1 cases=$2 r c rt
    local rtime=$runtime
    [ "${runtime%.*}" -lt 2 ] 2>/dev/null && rtime=2
    for r in $(seq 1 "$reps"); do
        log "$g: repetition $r/$reps (load $(load1))"
        for rt in $rates; do
            for c in $cases; do
                RATE=$rt runtime=$rtime bench "$g" "$c" "$r" 32 1 irq || return 1
            done
        done
    done
    return 0
}

# ---------------------------------------------------------------- strace

# syscalls NAME GROUP DEPTH: strace -c every thread of a daemon during a
# short bench run; records syscalls and submit syscalls per request.
syscalls() {
    local name=$1 g=$2 d=$3 tids spid j
    tids=$(ls "/proc/${PID[$name]}/task" | paste -sd, -)
    strace -f -c -o "$tmp/strace.$name" -p "$tids" 2> /dev/null &
    spid=$!
    sleep 1
    j=$("${pin_b[@]}" "$BENCH" --socket "${SOCK[$name]}" --rw randread --bs 4k \
        --iodepth "$d" --queue-size $QSIZE --runtime 1 --json 2>/dev/null)
    kill -INT $spid 2>/dev/null; wait $spid 2>/dev/null
    python3 - "$tmp/strace.$name" "$name" "$g" "$d" "$j" >> "$extra" <<'EOF'
import json, sys
calls, submit, rows = 0, 0, {}
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) >= 5 and p[0][0].isdigit() and p[-1] != "total":
        n = int(p[3])
        rows[p[-1]] = n
        calls += n
        if p[-1] in ("io_submit", "io_uring_enter"):
            submit += n
ios = json.loads(sys.argv[5])["ios"] if sys.argv[5] else 0
top = sorted(rows.items(), key=lambda kv: -kv[1])[:6]
print(json.dumps({"kind": "strace", "case": sys.argv[2], "group": sys.argv[3],
                  "depth": int(sys.argv[4]), "ios": ios, "syscalls": calls,
                  "submit_syscalls": submit, "top": dict(top)}))
EOF
}

# ---------------------------------------------------------------- callgrind

# callgrind_case NAME KIND SPEC: instructions per I/O = (Ir(2N) - Ir(N)) / N,
# so start-up and connection costs cancel out.
callgrind_case() {
    local name=$1 kind=$2 spec=$3 n ir
    local -a irs=()
    for n in "$cg_ios" $((2 * cg_ios)); do
        WRAP=(valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$name.$n")
        WAIT_SECS=120
        if [ "$kind" = blkd ]; then blkd "$name" "$spec"; else qsd "$name" "$spec"; fi || {
            WRAP=(); unset WAIT_SECS; return 1; }
        WRAP=(); unset WAIT_SECS
        "$BENCH" --socket "${SOCK[$name]}" --rw randread --bs 4k --iodepth 32 \
            --queue-size $QSIZE --ios "$n" --json > "$tmp/cg.$name.$n.json" ||
            { stop "$name"; return 1; }
        stop "$name"
        ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/$name.log" | tail -n1)
        [ -n "$ir" ] || { echo "compare.sh: no callgrind total for $name" >&2; return 1; }
        irs+=("$ir")
    done
    echo "{\"kind\": \"callgrind\", \"case\": \"$name\", \"ios\": $cg_ios, \"ir_n\": ${irs[0]}, \"ir_2n\": ${irs[1]}, \"ir_per_io\": $(( (irs[1] - irs[0]) / cg_ios ))}" >> "$extra"
}

# ---------------------------------------------------------------- main
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
log "output in $out; $runtime s per run, $reps repetitions; modes: $modes; daemon CPU ${dcpu:-any}, bench CPU ${bcpu:-any}; load $load_start"

# best GROUP: the case of GROUP with the highest median IOPS in irq mode
# (qsd's best settings = the anchor of the comparison).
best() {
    python3 - "$raw" "$1" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in runs:
    if r.get("group") == sys.argv[2] and r.get("mode", "irq") == "irq":
        by.setdefault(r["case"], []).append(r["r"]["iops"])
print(max(by, key=lambda c: statistics.median(by[c])) if by else "")
EOF
}

# qsd_case NAME: start the qemu-storage-daemon configuration NAME encodes:
# qsd-null-co / qsd-null-aio / qsd-file-io_uring / qsd-file-native, each
# optionally with -pN (iothread poll-max-ns=N; none: qsd's default).
qsd_case() {
    local name=$1 base=${1%-p*} iot=""
    [ "$base" != "$name" ] && iot=",poll-max-ns=${name##*-p}"
    case $base in
    qsd-null-co) qsd "$name" "driver=null-co,size=$null_size" "$iot" ;;
    qsd-null-aio) qsd "$name" "driver=null-aio,size=$null_size" "$iot" ;;
    qsd-file-io_uring) qsd "$name" "driver=file,filename=$file,cache.direct=on,aio=io_uring" "$iot" ;;
    qsd-file-native) qsd "$name" "driver=file,filename=$file,cache.direct=on,aio=native" "$iot" ;;
    *) die "unknown qsd case $name" ;;
    esac
}

# (0) qemu-storage-daemon's best settings at the headline points: null-co
# vs null-aio, aio=io_uring vs native, iothread poll-max-ns default (32 us)
# vs 0 (no polling) vs 256 us; chosen by median IOPS, irq client.
qsd_null=qsd-null-co
qsd_file=qsd-file-io_uring
if want_section tune; then
    tq="qsd-null-co qsd-null-aio qsd-null-co-p0 qsd-null-co-p262144 qsd-null-aio-p0 qsd-null-aio-p262144"
    for c in $tq; do qsd_case "$c" || exit 1; done
    sweep tune-null "$tq" 32 1 nofio irq || exit 1
    for c in $tq; do stop "$c"; done
    qsd_null=$(best tune-null)
    tf="qsd-file-io_uring qsd-file-native qsd-file-io_uring-p0 qsd-file-native-p0"
    for c in $tf; do qsd_case "$c" || exit 1; done
    sweep tune-file "$tf" 32 1 nofio irq || exit 1
    for c in $tf; do stop "$c"; done
    qsd_file=$(best tune-file)
    log "qemu-storage-daemon's best: $qsd_null (null), $qsd_file (file)"
fi

# (i) null back-ends: vhost-blkd with its defaults against qsd's best (and
# qsd's defaults when the best is something else)
if [ "$quick" = 1 ]; then depths="1 32"; queues="1"
elif [ "$short" = 1 ]; then depths="1 32 128"; queues="1 4"
else depths="1 8 32 128"; queues="1 2 4"; fi
if want_section null; then
    blkd blkd-null "driver=null,size=$null_size" || exit 1
    cases="blkd-null $qsd_null"
    qsd_case "$qsd_null" || exit 1
    if [ "$qsd_null" != qsd-null-co ]; then
        qsd_case qsd-null-co || exit 1; cases="$cases qsd-null-co"
    fi
    sweep null "$cases" "$depths" "$queues" || exit 1
    for c in $cases; do rss "$c" null; done
    for c in $cases; do stop "$c"; done
fi

# (ii) raw file, O_DIRECT, on both sides; fio as the limit (same file, same
# engine: io_uring)
if [ "$quick" = 1 ]; then depths="32"; queues="1"
elif [ "$short" = 1 ]; then depths="1 32 64"; queues="1"
else depths="1 8 32 64 128"; queues="1 2"; fi
if want_section file; then
    blkd blkd-file "file=$file,aio=io_uring,cache=none" || exit 1
    qsd_case "$qsd_file" || exit 1
    sweep file "blkd-file $qsd_file" "$depths" "$queues" fio || exit 1
    rss blkd-file file; rss "$qsd_file" file
    if [ "$do_strace" = 1 ]; then
        syscalls blkd-file file 64; syscalls "$qsd_file" file 64
    fi
    stop blkd-file; stop "$qsd_file"
fi

# (iii) fixed rates (open loop): the daemons' CPU time per I/O and p99 at
# a load they do not saturate, sleeping client; null and the raw file
if want_section rate; then
    blkd blkd-null "driver=null,size=$null_size" || exit 1
    qsd_case "$qsd_null" || exit 1
    rate_sweep rate-null "blkd-null $qsd_null" || exit 1
    stop blkd-null; stop "$qsd_null"
    blkd blkd-file "file=$file,aio=io_uring,cache=none" || exit 1
    qsd_case "$qsd_file" || exit 1
    rate_sweep rate-file "blkd-file $qsd_file" || exit 1
    stop blkd-file; stop "$qsd_file"
fi

# (iv) iothreads: vhost-blkd, null, 4 queues over 1 and 2 iothreads (queue
# q in iothread q mod N), the bench with 1, 2, 4 queues at depth 32; the
# daemon's CPU time per I/O shows what scaling costs on this machine.
if want_section iothreads && [ "$quick" = 0 ]; then
    blkd blkd-iot1 "driver=null,size=$null_size" --iothreads 1 || exit 1
    blkd blkd-iot2 "driver=null,size=$null_size" --iothreads 2 || exit 1
    sweep iothreads "blkd-iot1 blkd-iot2" 32 "1 2 4" nofio irq || exit 1
    stop blkd-iot1; stop blkd-iot2
fi

# ablations on vhost-blkd at iodepth 64, on two back-ends: the raw file on
# the disk (device-bound: the device's variance can hide the dataplane) and
# a file in tmpfs (RAM, O_DIRECT: dataplane-bound, where batching and the
# engines' per-request costs show, like the fast devices of the seed posts).
# ablate GROUP PREFIX FILE
ablate() {
    local g=$1 p=$2 f=$3 c
    blkd "$p-native-batch" "file=$f,aio=native,cache=none,batch=on" || return 1
    blkd "$p-native-nobatch" "file=$f,aio=native,cache=none,batch=off" || return 1
    blkd "$p-io_uring" "file=$f,aio=io_uring,cache=none" || return 1
    blkd "$p-io_uring-nobatch" "file=$f,aio=io_uring,cache=none,batch=off" || return 1
    blkd "$p-threads" "file=$f,aio=threads,cache=none" || return 1
    blkd "$p-io_uring-nopoll" "file=$f,aio=io_uring,cache=none" --poll-max-ns 0 || return 1
    local acases="$p-native-batch $p-native-nobatch $p-io_uring $p-io_uring-nobatch $p-threads $p-io_uring-nopoll"
    sweep "$g" "$acases" 64 1 nofio irq || return 1
    for c in $acases; do
        kill -USR1 "${PID[$c]}" 2>/dev/null
    done
    sleep 0.2
    if [ "$do_strace" = 1 ]; then
        for c in $acases; do syscalls "$c" "$g" 64; done
    fi
    for c in $acases; do
        cp "$tmp/$c.log" "$out/$c.log" 2>/dev/null
        stop "$c"
    done
}
if [ "$do_ablations" = 1 ]; then
    ablate ablation abl "$file" || exit 1
    ramfile=${VB_RAM_DIR:-/dev/shm}/vhost-blk-compare-ram.$$.img
    if truncate -s "$((ram_mib * 1024 * 1024))" "$ramfile" 2>/dev/null &&
       dd if=/dev/zero of="$ramfile" bs=4k count=1 oflag=direct conv=notrunc status=none 2>/dev/null; then
        ablate ablation-ram ram "$ramfile" || { rm -f "$ramfile"; exit 1; }
    else
        log "no O_DIRECT-capable tmpfs at ${VB_RAM_DIR:-/dev/shm}: skipping the RAM-backed ablations"
    fi
    rm -f "$ramfile"
fi

# instructions per I/O (null back-ends, serialised by valgrind)
if [ "$do_callgrind" = 1 ]; then
    log "callgrind: $cg_ios and $((2 * cg_ios)) I/Os per daemon (slow)"
    callgrind_case cg-blkd-null blkd "driver=null,size=$null_size" || log "callgrind on vhost-blkd failed"
    callgrind_case cg-qsd-null-co qsd "driver=null-co,size=$null_size" || log "callgrind on qsd failed"
    callgrind_case cg-qsd-null-aio qsd "driver=null-aio,size=$null_size" || log "callgrind on qsd failed"
fi

finished=$(date -u +%Y-%m-%dT%H:%M:%SZ)
python3 "$srcdir/scripts/bench/compare-report.py" --raw "$raw" --extra "$extra" \
    --out "$out" --meta "started=$started" --meta "finished=$finished" \
    --meta "runtime_s=$runtime" --meta "reps=$reps" --meta "file=$file" \
    --meta "file_mib=$size_mib" --meta "fs=$(df -T "$file" | awk 'NR==2 {print $2}')" \
    --meta "cpus=$(nproc)" --meta "kernel=$(uname -r)" \
    --meta "daemon_cpu=${dcpu:-any}" --meta "bench_cpu=${bcpu:-any}" \
    --meta "qsd=$("$QSD" --version | head -n1)" --meta "quick=$quick" \
    --meta "short=$short" --meta "modes=$modes" --meta "qsd_null=$qsd_null" \
    --meta "rates=$rates" --meta "halt_poll_ns=$halt_ns" \
    --meta "qsd_file=$qsd_file" --meta "load_start=$load_start" \
    --meta "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" \
    --meta "cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)" \
    --meta "pinned=$pin" ||
    die "report failed"
