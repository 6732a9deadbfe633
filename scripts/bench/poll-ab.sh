#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The poll policy's A/B: two builds of vhost-blkd and qemu-storage-daemon
# through vhost-blk-bench (4k randread, 1 queue), one interleaved run: every
# daemon runs at once, and each repetition goes through every cell and, in
# a cell, every daemon before the next repetition starts.  Cells, on the
# null back-end and on a raw file (O_DIRECT, io_uring):
#   sat      sleeping client, depth 32, as fast as it goes: IOPS, p50
#   rate20k  sleeping client, depth 32, fixed 20k IOPS: daemon CPU per I/O
#   rate100k the same at 100k IOPS
#   halt     client halt-polling 200 us before it sleeps, depth 32: IOPS
#   poll     polling client (--poll), depth 1: IOPS
# Both vhost-blkd builds run with their defaults plus DAEMON_OPTS (default
# "--poll-host-check off", so a loaded machine does not switch polling off
# and the policy is what is measured); qemu-storage-daemon serves the same
# back-end from an iothread (null-co; file with cache.direct=on,
# aio=io_uring, locking=off as the vhost-blkd daemons read it too).
# OUTDIR/raw.jsonl holds every run, OUTDIR/summary.md every repetition's
# ratios (new / QSD, new / old, and new / pre-rule with -c) with min /
# median / max and whether each goal holds in every repetition: sat IOPS
# >= 2.5 x QSD and >= 0.95 x old (and pre-rule); rate20k / rate100k CPU
# per I/O <= 1.1 x old and <= 0.5 x QSD; halt and poll IOPS no lower than
# old (>= 0.95 x, for the noise).
# With -s, perf stat also counts each daemon's syscalls during each run
# (raw_syscalls:sys_enter, and epoll_wait() calls with a timeout of 0, which
# find work without sleeping): per I/O, these counts do not depend on the
# machine's load the way CPU time does (they need perf and tracepoint
# access: root, or kernel.perf_event_paranoid <= -1).
# In the null rate cells one more "daemon" runs in the same interleave: the
# floor (scripts/bench/wake-floor.c, compiled here), two processes and two
# eventfds that do only what a back-end serving a sleeping client must do
# per kick: sleep in epoll_wait(), wake, write the call eventfd that wakes
# the client, 20k times a second.  Its CPU per wake-up times the new
# build's wake-ups per I/O is the least any back-end that sleeps between
# kicks spends per I/O in that cell; the summary prints it against QSD's,
# repetition by repetition, and what the new build spends above it.
#
# Usage: scripts/bench/poll-ab.sh -a OLD_BUILDDIR [-b NEW_BUILDDIR]
#            [-c PRERULE_BUILDDIR] [-r REPS] [-t SECONDS] [-f FILE]
#            [-o OUTDIR] [-D DAEMON_OPTS] [-s] [--cells "..."]
#   -a  the current policy's build (e.g. a build of main)
#   -b  the build under test (default: build)
#   -c  optional third build: the policy before the cost account (e7847c2)
#   -r  repetitions (default 3)   -t  seconds per run (default 2)
#   -f  raw file (default /var/tmp/vhost-blk-compare.img, created as
#       compare.sh does, 1 GiB of random data, if missing)
#   -o  output directory (default /var/tmp/vhost-blk-poll-ab)
#   -D  options for both vhost-blkd builds (default --poll-host-check off)
#   -s  count the daemons' syscalls with perf stat (see above)
#   --cells  a subset of: {sat,rate20k,rate100k,halt,poll}-{null,file}
#            (default: all ten)
set -u
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
old=; new=$srcdir/build; pre=; reps=3; runtime=2
file=/var/tmp/vhost-blk-compare.img; out=/var/tmp/vhost-blk-poll-ab
dopts="--poll-host-check off"
sys=
cells=
for e in null file; do
    for k in sat rate20k rate100k halt poll; do cells="$cells $k-$e"; done
done
usage() { sed -n '3,43p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case $1 in
    -a) old=$2; shift ;;
    -b) new=$2; shift ;;
    -c) pre=$2; shift ;;
    -r) reps=$2; shift ;;
    -t) runtime=$2; shift ;;
    -f) file=$2; shift ;;
    -o) out=$2; shift ;;
    -D) dopts=$2; shift ;;
    -s) sys=1 ;;
    --cells) cells=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "poll-ab.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
die() { echo "poll-ab.sh: $*" >&2; exit 1; }
[ -n "$old" ] || { echo "poll-ab.sh: -a OLD_BUILDDIR is needed" >&2; usage >&2; exit 2; }
case $reps in ''|*[!0-9]*|0) die "-r wants a number of repetitions >= 1, not '$reps'" ;; esac
case $runtime in ''|*[!0-9]*|0) die "-t wants whole seconds >= 1, not '$runtime'" ;; esac
builds=("old=$old" "new=$new")
[ -n "$pre" ] && builds+=("prerule=$pre")
for b in "${builds[@]}"; do
    [ -x "${b#*=}/tools/vhost-blkd" ] ||
        die "${b#*=}/tools/vhost-blkd not found (configure and build it first)"
done
BENCH=$new/tools/vhost-blk-bench
[ -x "$BENCH" ] || die "$BENCH not found (build $new first)"
if [ -n "$sys" ]; then
    perf stat -x, -o /dev/null -e raw_syscalls:sys_enter true 2> /dev/null ||
        die "-s: perf stat cannot count raw_syscalls:sys_enter (install linux-perf, run as root or lower kernel.perf_event_paranoid)"
fi
QSD=${QEMU_STORAGE_DAEMON:-qemu-storage-daemon}
command -v "$QSD" > /dev/null ||
    die "qemu-storage-daemon not installed (apt-get install qemu-system-common)"
backends=
for c in $cells; do
    case $c in
    sat-*|rate20k-*|rate100k-*|halt-*|poll-*) ;;
    *) die "unknown cell '$c' (see --help)" ;;
    esac
    case $c in
    *-null) case $backends in *null*) ;; *) backends="$backends null" ;; esac ;;
    *-file) case $backends in *file*) ;; *) backends="$backends file" ;; esac ;;
    *) die "unknown cell '$c' (see --help)" ;;
    esac
done
case $backends in *file*)
    if [ ! -f "$file" ]; then
        [ "$file" = /var/tmp/vhost-blk-compare.img ] ||
            die "$file not found (give an existing raw file with -f)"
        echo "poll-ab.sh: creating $file (1 GiB of random data)..." >&2
        dd if=/dev/urandom of="$file" bs=1M count=1024 status=none \
            conv=fsync || die "cannot create $file"
    fi ;;
esac
mkdir -p "$out" || exit 1
tmp=$(mktemp -d /var/tmp/vb-poll-ab.XXXXXX) || exit 1
raw=$out/raw.jsonl
floor=$out/floor.jsonl
: > "$raw"; : > "$floor"
case $cells in *rate*-null*)
    ${CC:-cc} -O2 -Wall -o "$tmp/wake-floor" "$srcdir/scripts/bench/wake-floor.c" \
        -lpthread || die "cannot compile scripts/bench/wake-floor.c (install gcc)" ;;
esac
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start BACKEND NAME: one daemon serving BACKEND on $tmp/NAME-BACKEND.sock
declare -A PID
start() {
    local be=$1 n=$2 sock=$tmp/$2-$1.sock bdev eopts b
    if [ "$n" = qsd ]; then
        bdev="driver=null-co,size=1073741824"
        [ "$be" = file ] &&
            bdev="driver=file,filename=$file,cache.direct=on,aio=io_uring,locking=off"
        "$QSD" --object iothread,id=iot0 --blockdev "$bdev,node-name=f" \
            --export "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path=$sock,writable=on,num-queues=4,iothread=iot0" \
            > "$tmp/$n-$be.log" 2>&1 &
    else
        for b in "${builds[@]}"; do [ "${b%%=*}" = "$n" ] && break; done
        eopts="driver=null,size=1G"
        [ "$be" = file ] && eopts="file=$file,aio=io_uring,cache=none"
        # shellcheck disable=SC2086 # DAEMON_OPTS are words
        "${b#*=}/tools/vhost-blkd" $dopts \
            --export "socket=$sock,$eopts,num-queues=4,queue-size=512" \
            > "$tmp/$n-$be.log" 2>&1 &
    fi
    PID[$n-$be]=$!; pids+=($!)
}
daemons=(); for b in "${builds[@]}"; do daemons+=("${b%%=*}"); done
daemons+=(qsd)
for be in $backends; do
    for n in "${daemons[@]}"; do start "$be" "$n"; done
done
for be in $backends; do
    for n in "${daemons[@]}"; do
        for _ in $(seq 200); do [ -S "$tmp/$n-$be.sock" ] && break; sleep 0.05; done
        [ -S "$tmp/$n-$be.sock" ] || {
            echo "poll-ab.sh: $n ($be) did not start:" >&2
            cat "$tmp/$n-$be.log" >&2; exit 1; }
    done
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
vcsw() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt/ {v += $2} END {print v + 0}'; }
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$reps"); do
    for c in $cells; do
        be=${c##*-}; d=32; x=()
        case $c in
        rate20k-*) x=(--rate 20000) ;;
        rate100k-*) x=(--rate 100000) ;;
        halt-*) x=(--halt-poll-ns 200000) ;;
        poll-*) d=1; x=(--poll) ;;
        esac
        for n in "${daemons[@]}"; do
            p=${PID[$n-$be]}
            kill -0 "$p" 2>/dev/null || {
                echo "poll-ab.sh: $n ($be) exited:" >&2
                cat "$tmp/$n-$be.log" >&2; exit 1; }
            l=$(cut -d' ' -f1 /proc/loadavg); t0=$(ticks "$p"); v0=$(vcsw "$p")
            sc=
            if [ -n "$sys" ]; then
                perf stat -x, -o "$tmp/perf.txt" -e raw_syscalls:sys_enter \
                    -e syscalls:sys_enter_epoll_wait --filter 'timeout == 0' \
                    -p "$p" 2> /dev/null &
                perfpid=$!
                # perf needs a moment to attach; an idle daemon sleeps in
                # one epoll_wait(), so the margin counts next to nothing.
                sleep 0.3
            fi
            j=$("$BENCH" --socket "$tmp/$n-$be.sock" --iodepth "$d" \
                --queues 1 --queue-size 512 --runtime "$runtime" --json \
                "${x[@]}" 2> "$tmp/bench.err") || {
                echo "poll-ab.sh: bench against $n ($c) failed:" >&2
                cat "$tmp/bench.err" >&2; exit 1; }
            t1=$(ticks "$p"); v1=$(vcsw "$p")
            if [ -n "$sys" ]; then
                kill -INT "$perfpid"; wait "$perfpid"
                sc=$(awk -F, '$1 ~ /^[0-9]+$/ { n[++k] = $1 }
                    END { if (k == 2) printf ", \"daemon_syscalls\": %d, \"daemon_epoll_wait0\": %d", n[1], n[2] }' "$tmp/perf.txt")
            fi
            echo "{\"cell\": \"$c\", \"case\": \"$n\", \"rep\": $r, \"load1\": $l, \"daemon_cpu_s\": $((t1 - t0)).0e-2, \"daemon_vcsw\": $((v1 - v0))$sc, \"r\": $j}" >> "$raw"
        done
        # Null cells only: a file request's own kernel work overlaps the
        # next kick's wake-up in a daemon (a synchronous read in the floor
        # would not), so no floor of this kind bounds the file cells.
        case $c in rate*-null)
            # 20k wake-ups/s, about what the new build has in either cell.
            j=$("$tmp/wake-floor" 20000 "$runtime") ||
                die "wake-floor failed"
            echo "{\"cell\": \"$c\", \"rep\": $r, \"r\": $j}" >> "$floor" ;;
        esac
    done
done

python3 - "$raw" "$started" "$load_start" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "$runtime" "$reps" "$dopts" "$floor" > "$out/summary.md" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
floors = [json.loads(l) for l in open(sys.argv[8]) if l.strip()]
cells = list(dict.fromkeys(r["cell"] for r in rows))
cases = list(dict.fromkeys(r["case"] for r in rows))
med = statistics.median

def val(r, metric):
    if metric == "iops":
        return r["r"]["iops"]
    if metric == "p50":
        return r["r"]["lat_us"]["p50"]
    ios = r["r"]["ios"]
    if not ios:
        return float("nan")
    if metric == "kicks":
        return r["r"]["kicks_per_io"]
    if metric == "wakeups":
        return r["daemon_vcsw"] / ios
    if metric in ("syscalls", "epoll_wait0"):
        n = r.get("daemon_" + metric)
        return None if n is None else n / ios
    return r["daemon_cpu_s"] * 1e6 / ios

def get(cell, case, rep, metric):
    for r in rows:
        if r["cell"] == cell and r["case"] == case and r["rep"] == rep:
            return val(r, metric)
    return None

def mmm(v, f):
    return f"{f.format(min(v))} / **{f.format(med(v))}** / {f.format(max(v))}"

# (metric, unit format, goals: (denominator, op, bound)), each to hold in
# every repetition (see the header).  "No lower than today" allows 5% of
# noise.
KINDS = {
    "sat": [("iops", "{:.0f}k", [("qsd", ">=", 2.5), ("prerule", ">=", 0.95),
                                  ("old", ">=", 0.95)]),
            ("p50", "{:.1f} us", [])],
    "rate20k": [("cpu", "{:.2f} us", [("old", "<=", 1.1), ("qsd", "<=", 0.5)])],
    "rate100k": [("cpu", "{:.2f} us", [("old", "<=", 1.1), ("qsd", "<=", 0.5)])],
    "halt": [("iops", "{:.0f}k", [("old", ">=", 0.95)])],
    "poll": [("iops", "{:.0f}k", [("old", ">=", 0.95)])],
}
NAMES = {"iops": "IOPS", "p50": "p50 latency", "cpu": "daemon CPU per I/O",
         "kicks": "client kicks per I/O", "wakeups": "daemon wake-ups per I/O",
         "syscalls": "daemon syscalls per I/O",
         "epoll_wait0": "daemon epoll_wait(0) per I/O"}
# Less sensitive to a loaded machine than IOPS and CPU time (the tick is
# 10 ms): whether the daemon polled instead of sleeping.
EXTRA = [("kicks", "{:.3f}"), ("wakeups", "{:.3f}")]
if any("daemon_syscalls" in r for r in rows):
    EXTRA += [("syscalls", "{:.3f}"), ("epoll_wait0", "{:.3f}")]

print(f"Measured from {sys.argv[2]}, load average {sys.argv[3]} at the start "
      f"and {sys.argv[4]} at the end; 1-minute load "
      f"{min(r['load1'] for r in rows):.2f} to {max(r['load1'] for r in rows):.2f} "
      f"during the runs; {sys.argv[6]} repetitions of {sys.argv[5]} s, "
      f"4k randread, 1 queue; vhost-blkd options: {sys.argv[7] or '(none)'}.\n")
print("Every cell, every daemon (min / **median** / max):\n")
print("| cell | metric | " + " | ".join(cases) + " |")
print("|---|---|" + "---:|" * len(cases))
for c in cells:
    for metric, fmt in [(m, f) for m, f, _ in KINDS[c.split("-")[0]]] + EXTRA:
        cols = []
        for n in cases:
            v = [val(r, metric) for r in rows if r["cell"] == c and r["case"] == n]
            v = [x for x in v if x is not None]
            if metric == "iops":
                v = [x / 1e3 for x in v]
            cols.append(mmm(v, fmt) if v else "-")
        print(f"| {c} | {NAMES[metric]} | " + " | ".join(cols) + " |")

print("\nRatios of the new build, every repetition, then min / **median** / "
      "max; a goal holds when every repetition meets it:\n")
print("| cell | metric | ratio | each repetition | min / median / max | goal |")
print("|---|---|---|---|---:|---|")
reps = sorted({r["rep"] for r in rows})
failed = 0
for c in cells:
    for metric, fmt, goals in KINDS[c.split("-")[0]]:
        for den in ("qsd", "old", "prerule"):
            if den not in cases:
                continue
            rs = []
            for rep in reps:
                a, b = get(c, "new", rep, metric), get(c, den, rep, metric)
                if a is not None and b:
                    rs.append(a / b)
            if not rs:
                continue
            goal = "-"
            for gden, op, bound in goals:
                if gden != den:
                    continue
                ok = all(x >= bound if op == ">=" else x <= bound for x in rs)
                failed += not ok
                goal = f"{op} {bound}: {'met' if ok else '**not met**'}"
            print(f"| {c} | {NAMES[metric]} | new / {den} | "
                  + " ".join(f"{x:.2f}" for x in rs)
                  + f" | {mmm(rs, '{:.2f}')} | {goal} |")

# The floor: what a back-end that sleeps between kicks cannot avoid.
fcells = list(dict.fromkeys(f["cell"] for f in floors))
if fcells:
    print("\nThe floor (scripts/bench/wake-floor.c, 20k wake-ups/s, in the "
          "same interleave): its daemon's CPU per wake-up; bound = "
          "floor x the new build's wake-ups per I/O in the same repetition, "
          "the least a sleeping back-end spends per I/O there; above = the "
          "new build's CPU per I/O minus the bound:\n")
    print("| cell | floor per wake-up | bound / qsd, each repetition | "
          "new above the bound, each repetition |")
    print("|---|---:|---|---|")
    for c in fcells:
        per = {f["rep"]: f["r"]["daemon_us_per_trip"] for f in floors
               if f["cell"] == c and f["r"]["round_trips"]}
        b_q, above = [], []
        for rep in sorted(per):
            w = get(c, "new", rep, "wakeups")
            q = get(c, "qsd", rep, "cpu")
            n = get(c, "new", rep, "cpu")
            if w is None or not q or n is None:
                continue
            bound = per[rep] * min(w, 1.0)
            b_q.append(f"{bound / q:.2f}")
            above.append(f"{n - bound:.2f} us")
        print(f"| {c} | {mmm(list(per.values()), '{:.2f} us')} | "
              f"{' '.join(b_q)} | {' '.join(above)} |")
print(f"\n{failed} goal(s) not met in every repetition.")
EOF
cat "$out/summary.md"
