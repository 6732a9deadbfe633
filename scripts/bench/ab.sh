#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Side-by-side A/B of daemon configurations through vhost-blk-bench: every
# daemon runs at once, the repetitions are interleaved (rep 1 of each, then
# rep 2, ...), and per run the load average and the signals that do not
# depend on the machine's noise are recorded: kicks and interrupts per I/O
# (the bench's counters), the bench's and the daemon's CPU time per I/O
# (getrusage / /proc/PID/stat), the daemon's voluntary context switches
# (its wake-ups) per I/O, and the latency p50 / p99.  IOPS ratios are
# given per repetition against the first configuration.
#
# Usage: scripts/bench/ab.sh [-d DEPTH] [-q QUEUES] [-r REPS] [-t SECONDS]
#            [-e EXPORT_OPTS] [-p] [-o OUTDIR] NAME=CONFIG ...
#   CONFIG  a vhost-blkd command line without --export (e.g.
#           "build/tools/vhost-blkd --poll-max-ns 0"; words "+KEY=VALUE"
#           are added to its export's options, e.g. "+first-batch=0"), or
#           "qsd" /
#           "qsd,IOTHREAD_OPTS" (qemu-storage-daemon, null-co, export in an
#           iothread with those options, e.g. "qsd,poll-max-ns=0")
#   -d  iodepth (default 32)      -q  bench queues (default 1)
#   -r  repetitions (default 3)   -t  seconds per run (default 2)
#   -e  vhost-blkd export options (default
#       driver=null,size=1G,num-queues=4,queue-size=512)
#   -p  bench --poll (default: it sleeps on its call eventfd)
#   -P  bench --poll-interrupts (polls, but asks for interrupts)
#   -x  more bench options, e.g. -x --publish-each
#   -o  output directory (default /var/tmp/vhost-blk-ab): raw.jsonl, ab.md
# Example (the seccomp cost in docs/benchmarks.md):
#   scripts/bench/ab.sh -t 5 -r 7 "off=build/tools/vhost-blkd --seccomp off" \
#       "on=build/tools/vhost-blkd --seccomp on"
set -u

srcdir=$(cd "$(dirname "$0")/../.." && pwd)
depth=32; queues=1; reps=3; runtime=2; poll=0; out=/var/tmp/vhost-blk-ab
xbench=
eopts="driver=null,size=1G,num-queues=4,queue-size=512"
BENCH=${VHOST_BLK_BENCH:-$srcdir/build/tools/vhost-blk-bench}

usage() { sed -n '3,30p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case $1 in
    -d) depth=$2; shift ;;
    -q) queues=$2; shift ;;
    -r) reps=$2; shift ;;
    -t) runtime=$2; shift ;;
    -e) eopts=$2; shift ;;
    -p) poll=1 ;;
    -P) poll=2 ;;
    -x) xbench=$2; shift ;;
    -o) out=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "ab.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *) break ;;
    esac
    shift
done
[ $# -ge 1 ] || { usage >&2; exit 2; }
[ -x "$BENCH" ] || { echo "ab.sh: $BENCH not found (build first)" >&2; exit 1; }
mkdir -p "$out" || exit 1
tmp=$(mktemp -d /var/tmp/vb-ab.XXXXXX) || exit 1
raw=$out/raw.jsonl
: > "$raw"
names=(); pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for spec in "$@"; do
    n=${spec%%=*}; cfg=${spec#*=}
    case $n in ''|*[!A-Za-z0-9_-]*) echo "ab.sh: bad name in '$spec'" >&2; exit 2 ;; esac
    sock=$tmp/$n.sock
    if [ "${cfg%%,*}" = qsd ]; then
        iot=; [ "$cfg" != qsd ] && iot=",${cfg#qsd,}"
        qemu-storage-daemon --object "iothread,id=iot0$iot" \
            --blockdev driver=null-co,size=1073741824,node-name=f \
            --export "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path=$sock,writable=on,num-queues=4,iothread=iot0" \
            > "$tmp/$n.log" 2>&1 &
    else
        read -r -a words <<< "$cfg"
        cmd=(); xopts=
        for w in "${words[@]}"; do
            case $w in +*=*) xopts="$xopts,${w#+}" ;; *) cmd+=("$w") ;; esac
        done
        "${cmd[@]}" --export "socket=$sock,$eopts$xopts" > "$tmp/$n.log" 2>&1 &
    fi
    names+=("$n"); pids+=($!)
done
for i in "${!names[@]}"; do
    for _ in $(seq 200); do [ -S "$tmp/${names[$i]}.sock" ] && break; sleep 0.05; done
    [ -S "$tmp/${names[$i]}.sock" ] || {
        echo "ab.sh: ${names[$i]} did not start:" >&2; cat "$tmp/${names[$i]}.log" >&2; exit 1; }
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
vcsw() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt/ {v += $2} END {print v + 0}'; }
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
pflag=(); [ "$poll" = 1 ] && pflag=(--poll)
[ "$poll" = 2 ] && pflag=(--poll-interrupts)
read -r -a xflag <<< "$xbench"
for r in $(seq "$reps"); do
    for i in "${!names[@]}"; do
        n=${names[$i]}; p=${pids[$i]}
        l=$(cut -d' ' -f1 /proc/loadavg); t0=$(ticks "$p"); v0=$(vcsw "$p")
        j=$("$BENCH" --socket "$tmp/$n.sock" --iodepth "$depth" --queues "$queues" \
            --queue-size 512 --runtime "$runtime" --json "${pflag[@]}" "${xflag[@]}" 2> "$tmp/bench.err") || {
            echo "ab.sh: bench against $n failed:" >&2; cat "$tmp/bench.err" >&2; exit 1; }
        t1=$(ticks "$p"); v1=$(vcsw "$p")
        echo "{\"case\": \"$n\", \"rep\": $r, \"load1\": $l, \"daemon_cpu_s\": $((t1 - t0)).0e-2, \"daemon_vcsw\": $((v1 - v0)), \"r\": $j}" >> "$raw"
    done
done

AB_XBENCH=$xbench python3 - "$raw" "$started" "$load_start" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "$depth" "$queues" "$runtime" "$poll" "${names[@]}" > "$out/ab.md" <<'EOF'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = sys.argv[9:]
med = statistics.median
print(f"Measured from {sys.argv[2]}, load average {sys.argv[3]} at the start and "
      f"{sys.argv[4]} at the end; depth {sys.argv[5]}, {sys.argv[6]} queue(s), "
      f"{sys.argv[7]} s per run, bench {({'1': '--poll', '2': '--poll-interrupts'}).get(sys.argv[8], 'sleeping on its call eventfd')}"
      + (f" with {os.environ['AB_XBENCH']}" if os.environ.get('AB_XBENCH') else "") + "; "
      f"1-minute load {min(r['load1'] for r in rows):.2f} to {max(r['load1'] for r in rows):.2f} "
      "during the runs.\n")
print(f"| config | IOPS min / median / max | / {names[0]}, each rep | kicks / IO | interrupts / IO "
      "| daemon CPU us / IO | daemon wake-ups / IO | bench CPU us / IO | p50 / p99 us (median) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
base = {r["rep"]: r["r"]["iops"] for r in rows if r["case"] == names[0]}
for n in names:
    rs = [r for r in rows if r["case"] == n]
    io = [r["r"]["iops"] for r in rs]
    per = lambda f: med([f(r) for r in rs if r["r"]["ios"]])
    ratios = " ".join(f"{r['r']['iops'] / base[r['rep']]:.2f}" for r in rs
                      if base.get(r["rep"]))
    print(f"| {n} | {min(io) / 1e3:.1f}k / **{med(io) / 1e3:.1f}k** / {max(io) / 1e3:.1f}k | "
          f"{ratios} | {per(lambda r: r['r']['kicks_per_io']):.3f} | "
          f"{per(lambda r: r['r']['interrupts_per_io']):.3f} | "
          f"{per(lambda r: r['daemon_cpu_s'] * 1e6 / r['r']['ios']):.2f} | "
          f"{per(lambda r: r['daemon_vcsw'] / r['r']['ios']):.4f} | "
          f"{per(lambda r: r['r']['client_cpu']['us_per_io']):.2f} | "
          f"{per(lambda r: r['r']['lat_us']['p50']):.1f} / "
          f"{per(lambda r: r['r']['lat_us']['p99']):.1f} |")
EOF
cat "$out/ab.md"
