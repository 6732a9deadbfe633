#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Soak test of vhost-blkd: many exports under verified random I/O for a set
# time while front-ends connect and disconnect over and over, then kill -9 /
# restart cycles with writes in flight.  The daemon's resident memory and
# fd count are sampled throughout; the run fails on any I/O or verify
# error, any lost write, or growth beyond the thresholds.
#
#   scripts/soak.sh [--duration S] [--exports N] [--queues N]
#                   [--connect-cycles N] [--kill-cycles N] [--short]
#                   [--iothreads N] [--interval S] [--rss-growth PCT]
#                   [--fd-growth N] [--out DIR] [--seccomp]
#
# Defaults: 300 s, 8 exports x 4 queues (vhost-blk-bench --verify randrw,
# iodepth 8 per queue), 200 connect/disconnect cycles on a 9th export
# during the load, 20 kill/restart cycles (tests/bench/soak-reconnect),
# 2 iothreads, samples every 5 s, RSS +10% and fds +0 allowed.
# --short (CI): 20 s, 40 connect cycles, 5 kill cycles, samples every 2 s.
# Programs come from $VHOST_BLK_BUILD (default: build).  Prints a summary;
# exit status 0 = pass.
set -u

duration=300
exports=8
queues=4
connect_cycles=200
kill_cycles=20
iothreads=2
interval=5
rss_growth=10
fd_growth=0
out=
extra=()

usage() { sed -n '3,20p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
    --duration) duration=$2; shift ;;
    --exports) exports=$2; shift ;;
    --queues) queues=$2; shift ;;
    --connect-cycles) connect_cycles=$2; shift ;;
    --kill-cycles) kill_cycles=$2; shift ;;
    --iothreads) iothreads=$2; shift ;;
    --interval) interval=$2; shift ;;
    --rss-growth) rss_growth=$2; shift ;;
    --fd-growth) fd_growth=$2; shift ;;
    --out) out=$2; shift ;;
    --seccomp) extra+=(--seccomp on) ;;
    --short) duration=20; connect_cycles=40; kill_cycles=5; interval=2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "soak.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
for v in duration exports queues connect_cycles kill_cycles iothreads interval; do
    case ${!v} in
    ''|*[!0-9]*) echo "soak.sh: --${v//_/-} needs a number" >&2; exit 2 ;;
    esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
build=${VHOST_BLK_BUILD:-$root/build}
blkd=$build/tools/vhost-blkd
bench=$build/tools/vhost-blk-bench
helper=$build/tests/bench/soak-reconnect
for p in "$blkd" "$bench" "$helper"; do
    [ -x "$p" ] || { echo "soak.sh: $p is not built (ninja -C $build)" >&2; exit 2; }
done
if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/vb-soak.XXXXXX")
fi
mkdir -p "$out"
echo "soak: output in $out"

pid=
loadpids=()
cleanup() {
    local p
    for p in "${loadpids[@]}"; do
        kill "$p" 2>/dev/null
    done
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    wait 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

failures=()
fail() { failures+=("$*"); echo "soak: FAIL: $*"; }

# sample LABEL: append "seconds label VmRSS_kB RssAnon_kB fds threads".
t0=$(date +%s.%N)
sample() {
    local rss anon fds thr now
    [ -r "/proc/$pid/status" ] || return 1
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    anon=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status")
    thr=$(awk '/^Threads:/ {print $2}' "/proc/$pid/status")
    fds=$(ls "/proc/$pid/fd" | wc -l)
    now=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
    echo "$now $1 $rss $anon $fds $thr" >> "$out/samples.txt"
}

# ---- phase 1: load + connect/disconnect cycles on one daemon -----------

args=()
for i in $(seq 0 $((exports - 1))); do
    truncate -s 32M "$out/disk$i.img"
    args+=(--export "socket=$out/disk$i.sock,file=$out/disk$i.img,num-queues=$queues")
done
truncate -s 8M "$out/cycle.img"
args+=(--export "socket=$out/cycle.sock,file=$out/cycle.img,num-queues=1")
"$blkd" "${args[@]}" --iothreads "$iothreads" "${extra[@]}" \
    > "$out/daemon.log" 2>&1 &
pid=$!
for i in $(seq 0 $((exports - 1))) cycle; do
    s=$out/disk$i.sock
    [ "$i" = cycle ] && s=$out/cycle.sock
    for _ in $(seq 200); do
        [ -S "$s" ] && break
        sleep 0.05
    done
    [ -S "$s" ] || { echo "soak: vhost-blkd did not start, see $out/daemon.log"; exit 1; }
done
echo "soak: vhost-blkd pid $pid: $exports exports x $queues queues, $iothreads iothreads ${extra[*]}"

# one connect cycle: a short verified session on the cycle export
connect_once() {
    "$bench" --socket "$out/cycle.sock" --rw randrw --verify --ios 64 \
        --size 4M --iodepth 4 --seed "$1" > "$out/cycle-last.log" 2>&1
}

# warm-up: every export once, a few connect cycles, then the baseline
for i in $(seq 0 $((exports - 1))); do
    "$bench" --socket "$out/disk$i.sock" --rw randrw --verify --queues "$queues" \
        --iodepth 8 --size 16M --ios 4000 > "$out/warmup$i.log" 2>&1 ||
        fail "warm-up on export $i (see $out/warmup$i.log)"
done
for c in 1 2 3 4 5; do
    connect_once "$c" || fail "warm-up connect cycle $c"
done
sleep 1
: > "$out/samples.txt"
sample idle-before

for i in $(seq 0 $((exports - 1))); do
    "$bench" --socket "$out/disk$i.sock" --rw randrw --verify --queues "$queues" \
        --iodepth 8 --size 16M --runtime "$duration" --seed $((i + 1)) --json \
        > "$out/bench$i.json" 2> "$out/bench$i.err" &
    loadpids+=($!)
done
(
    # spread the cycles over the load; catch up if they run late
    step=$(awk -v d="$duration" -v n="$connect_cycles" 'BEGIN { printf "%.3f", n ? d / n : 1 }')
    nfail=0
    for c in $(seq 1 "$connect_cycles"); do
        start=$(date +%s.%N)
        connect_once $((c + 100)) || {
            nfail=$((nfail + 1))
            cp "$out/cycle-last.log" "$out/cycle-fail-$c.log"
        }
        left=$(awk -v s="$start" -v n="$(date +%s.%N)" -v st="$step" \
            'BEGIN { l = st - (n - s); printf "%.3f", (l > 0 ? l : 0) }')
        sleep "$left"
    done
    echo "$nfail" > "$out/connect-failures"
) &
cyclepid=$!
loadpids+=($cyclepid)

end=$(( $(date +%s) + duration ))
while [ "$(date +%s)" -lt "$end" ]; do
    sleep "$interval"
    sample load || { fail "vhost-blkd died during the load"; break; }
done
for i in $(seq 0 $((exports - 1))); do
    wait "${loadpids[$i]}" || fail "vhost-blk-bench on export $i exited non-zero (see $out/bench$i.err)"
done
wait "$cyclepid"
loadpids=()
sleep 1
sample idle-after || fail "vhost-blkd died"

# bench results
ios=0
for i in $(seq 0 $((exports - 1))); do
    r=$(python3 - "$out/bench$i.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    print(r["ios"], r["errors"], r["verify_errors"], r["iops"])
except Exception:
    print("0 -1 -1 0")
EOF
    )
    read -r n e ve iops <<< "$r"
    ios=$((ios + n))
    if [ "$e" != 0 ] || [ "$ve" != 0 ]; then
        fail "export $i: errors $e, verify errors $ve"
    fi
    echo "soak: export $i: $n I/Os verified, $iops IOPS"
done
nconnfail=$(cat "$out/connect-failures" 2>/dev/null || echo "?")
[ "$nconnfail" = 0 ] || fail "$nconnfail of $connect_cycles connect cycles failed"
sessions=$(kill -USR1 "$pid"; sleep 0.5; grep -c "cycle.sock: front-end connected" "$out/daemon.log")

kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" = 0 ] || fail "vhost-blkd exited with status $rc on SIGTERM"
pid=

# memory and fds: load samples (first/last/max) and idle before/after
summary=$(awk -v rg="$rss_growth" -v fg="$fd_growth" '
    $2 == "idle-before" { rb = $3; ab = $4; fb = $5 }
    $2 == "idle-after"  { ra = $3; aa = $4; fa = $5 }
    $2 == "load" {
        n++
        rs[n] = $3; fs[n] = $5
        if (n == 1) { r1 = $3; f1 = $5 }
        rl = $3; fl = $5
        if ($3 > rm) rm = $3
        if ($5 > fm) fm = $5
    }
    END {
        # Growth under load: the maximum of the second half of the samples
        # against that of the first half (the connect-cycle session comes
        # and goes, so single samples differ by its few fds).
        for (i = 1; i <= n; i++) {
            if (i <= n / 2) {
                if (rs[i] > r1m) r1m = rs[i]
                if (fs[i] > f1m) f1m = fs[i]
            } else {
                if (rs[i] > r2m) r2m = rs[i]
                if (fs[i] > f2m) f2m = fs[i]
            }
        }
        printf "VmRSS kB: idle before %d, under load first %d last %d max %d, idle after %d\n", rb, r1, rl, rm, ra
        printf "RssAnon kB: idle before %d, idle after %d\n", ab, aa
        printf "fds: idle before %d, under load first %d last %d max %d, idle after %d\n", fb, f1, fl, fm, fa
        bad = 0
        if (ra > rb * (1 + rg / 100)) { printf "BAD idle VmRSS grew %.1f%% (limit %d%%)\n", (ra - rb) * 100 / rb, rg; bad = 1 }
        if (n > 1 && r2m > r1m * (1 + rg / 100)) { printf "BAD VmRSS under load grew %.1f%% (limit %d%%)\n", (r2m - r1m) * 100 / r1m, rg; bad = 1 }
        if (fa > fb + fg) { printf "BAD idle fds grew by %d (limit %d)\n", fa - fb, fg; bad = 1 }
        if (n > 1 && f2m > f1m + fg) { printf "BAD fds under load grew by %d (limit %d)\n", f2m - f1m, fg; bad = 1 }
    }' "$out/samples.txt")
echo "$summary" | sed 's/^/soak: /'
while read -r line; do
    case $line in BAD*) fail "${line#BAD }" ;; esac
done <<< "$summary"

# ---- phase 2: kill -9 / restart cycles -------------------------------

truncate -s 32M "$out/kill.img"
ksock=$out/kill.sock
if "$helper" --socket "$ksock" --cycles "$kill_cycles" --queues "$queues" \
        --iodepth 16 --size $((32 << 20)) -- "$blkd" \
        --export "socket=$ksock,file=$out/kill.img,num-queues=$queues" \
        --iothreads "$iothreads" "${extra[@]}" --log-level warn \
        > "$out/kill.log" 2>&1; then
    echo "soak: $(tail -n 1 "$out/kill.log")"
else
    fail "kill/restart cycles (see $out/kill.log): $(tail -n 3 "$out/kill.log" | tr '\n' ' ')"
fi

{
    echo "duration ${duration}s, $exports exports x $queues queues, $iothreads iothreads ${extra[*]}"
    echo "verified I/Os under load: $ios"
    echo "connect/disconnect cycles: $connect_cycles ($sessions sessions on the cycle export), failed: $nconnfail"
    echo "$summary" | grep -v '^BAD'
    echo "kill/restart: $(tail -n 1 "$out/kill.log")"
} > "$out/summary.txt"

if [ ${#failures[@]} -eq 0 ]; then
    echo "soak: PASS"
    exit 0
fi
echo "soak: FAIL (${#failures[@]} problem(s)); logs in $out"
exit 1
