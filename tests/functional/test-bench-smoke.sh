#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Smoke test of the benchmark tooling (no guest): a few seconds of
# vhost-blk-bench against vhost-blkd and against qemu-storage-daemon, both
# with a null back-end, checking the bench's JSON (IOPS > 0, no errors); the
# back-end's pid from SO_PEERCRED; --rate issuing exactly --ios requests no
# faster than its schedule; --verify runs (split and packed rings, sleeping
# and halt-polling clients) against vhost-blkd on a small file;
# and compare.sh --quick
# end to end (table, results.json).  The figures are not asserted.
set -u
. "$(dirname "$0")/lib.sh"

# No guest here: a temp dir and the cleanup trap are all we need.
VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
bench=$(vb_bin vhost-blk-bench) || vb_bail "vhost-blk-bench is not built in $VHOST_BLK_BUILD"

# json_check NAME FILE: the bench's JSON has iops > 0 and no errors.
json_check() {
    local name=$1 f=$2 msg
    if msg=$(python3 - "$f" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no valid JSON object: {e}")
    sys.exit(1)
bad = []
if not r.get("iops", 0) > 0:
    bad.append(f"iops {r.get('iops')}")
if r.get("errors", 1) != 0 or r.get("verify_errors", 1) != 0:
    bad.append(f"errors {r.get('errors')}, verify_errors {r.get('verify_errors')}")
if r.get("error") is not None:
    bad.append(f"error {r['error']}")
print(f"iops {r.get('iops')}, p99 {r.get('lat_us', {}).get('p99')} us, "
      f"kicks/io {r.get('kicks_per_io')}" + ("; " + "; ".join(bad) if bad else ""))
sys.exit(1 if bad else 0)
EOF
    ); then
        vb_ok "$name ($msg)"
    else
        vb_not_ok "$name" "$msg"
    fi
}

# run_bench NAME SOCK [ARGS]: bench with --json into $VB_TMP/NAME.json.
run_bench() {
    local name=$1 sock=$2
    shift 2
    if "$bench" --socket "$sock" --json "$@" > "$VB_TMP/$name.json" \
            2> "$VB_TMP/$name.err"; then
        json_check "$name" "$VB_TMP/$name.json"
    else
        vb_not_ok "$name: vhost-blk-bench exits 0" "$(cat "$VB_TMP/$name.err")"
    fi
}

# json_expr NAME FILE EXPR: a Python expression over the bench's JSON (r)
# holds; the figures are printed, never compared with a threshold.
json_expr() {
    local name=$1 f=$2 expr=$3 msg
    if msg=$(python3 - "$f" "$expr" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2], {}, {"r": r})
print(f"ios {r['ios']} in {r['seconds']:.3f} s, client {r['client']}, "
      f"rate {r['rate']}, halt_poll {r['halt_poll']}, "
      f"backend_cpu {r['backend_cpu']}")
sys.exit(0 if ok else 1)
EOF
    ); then
        vb_ok "$name ($msg)"
    else
        vb_not_ok "$name" "$msg"
    fi
}

# vhost-blkd, null driver, 1 and 2 queues
sock=$VB_TMP/blkd.sock
if vb_daemon_start blkd "$sock" "$blkd" \
        --export "socket=$sock,driver=null,size=1G,num-queues=2,queue-size=256"; then
    dpid=$VB_LAST_PID
    run_bench "vhost-blkd null randread 1 queue" "$sock" --runtime 2 --iodepth 32
    run_bench "vhost-blkd null randrw 2 queues" "$sock" --runtime 1 --rw randrw \
        --queues 2 --iodepth 16
    # the back-end's CPU: its pid from the socket's peer credentials
    json_expr "back-end pid found through SO_PEERCRED" \
        "$VB_TMP/vhost-blkd null randread 1 queue.json" \
        "r['backend_cpu'] is not None and r['backend_cpu']['pid'] == $dpid and r['backend_cpu']['cpu_s'] >= 0"
    # --rate: open loop; exactly --ios requests, and the schedule (one
    # every 50 us per queue) cannot be run faster than it says
    run_bench "rate 20000 ios 2000 1 queue" "$sock" --rate 20000 \
        --ios 2000 --iodepth 16 --backend-pid "$dpid"
    json_expr "--rate issues the requested count on its schedule" \
        "$VB_TMP/rate 20000 ios 2000 1 queue.json" \
        "r['ios'] == 2000 and r['reads'] == 2000 and r['seconds'] >= 1999 / 20000 and r['rate']['target_iops'] == 20000 and r['client'] == 'sleep' and r['backend_cpu']['pid'] == $dpid"
    run_bench "rate 40000 ios 3001 2 queues polling" "$sock" \
        --rate 40000 --ios 3001 --queues 2 --iodepth 8 --poll
    json_expr "--rate over 2 queues issues the requested count" \
        "$VB_TMP/rate 40000 ios 3001 2 queues polling.json" \
        "r['ios'] == 3001 and r['seconds'] >= 1499 / 20000 and r['client'] == 'poll'"
    run_bench "rate with halt-poll" "$sock" --rate 20000 --ios 1000 \
        --iodepth 4 --halt-poll-ns 200000
    json_expr "--rate with --halt-poll-ns issues the requested count" \
        "$VB_TMP/rate with halt-poll.json" \
        "r['ios'] == 1000 and r['client'] == 'halt-poll' and r['halt_poll'] is not None and r['halt_poll']['greedy'] is False and r['halt_poll']['yielded'] >= 0"
    run_bench "halt-poll greedy" "$sock" --ios 1000 --iodepth 4 \
        --halt-poll-ns 200000 --halt-poll-greedy
    json_expr "--halt-poll-greedy polls whole windows: none ends for another task" \
        "$VB_TMP/halt-poll greedy.json" \
        "r['ios'] == 1000 and r['halt_poll']['greedy'] is True and r['halt_poll']['yielded'] == 0"
    vb_stop "$dpid"
else
    vb_not_ok "vhost-blkd null: daemon starts"
fi

# qemu-storage-daemon, null-co
if command -v qemu-storage-daemon >/dev/null; then
    sock=$VB_TMP/qsd.sock
    if vb_daemon_start qsd "$sock" qemu-storage-daemon \
            --blockdev driver=null-co,node-name=f,size=1073741824 \
            --export "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path=$sock,writable=on,num-queues=2"; then
        run_bench "qemu-storage-daemon null-co randread 1 queue" "$sock" \
            --runtime 2 --iodepth 32
        vb_stop "$VB_LAST_PID"
    else
        vb_not_ok "qemu-storage-daemon null-co: daemon starts"
    fi
else
    vb_skip "qemu-storage-daemon null-co" "qemu-storage-daemon not installed"
fi

# --verify on a real file: every read checked against what was written
img=$(vb_mkimg verify 16M)
sock=$VB_TMP/blkd-file.sock
if vb_daemon_start blkd-file "$sock" "$blkd" \
        --export "socket=$sock,file=$img,num-queues=2"; then
    run_bench "vhost-blkd file randrw --verify, 2 queues" "$sock" --runtime 1 \
        --rw randrw --queues 2 --iodepth 8 --verify
    run_bench "vhost-blkd file randrw --verify --packed, 2 queues" "$sock" \
        --runtime 1 --rw randrw --queues 2 --iodepth 8 --verify --packed
    # the halt-polling client (interrupts off while it polls, re-armed
    # before each sleep): every read checked, no lost wake-up (a lost one
    # ends the run with "no completion within 10 s")
    run_bench "vhost-blkd file randrw --verify --halt-poll-ns 200000" "$sock" \
        --runtime 1 --rw randrw --queues 2 --iodepth 8 --verify \
        --halt-poll-ns 200000
    run_bench "vhost-blkd file randrw --verify --halt-poll-grow --packed" \
        "$sock" --runtime 1 --rw randrw --queues 2 --iodepth 1 --verify \
        --halt-poll-ns 20000 --halt-poll-grow --packed
    run_bench "vhost-blkd file randrw --verify halt-poll 1 ns" \
        "$sock" --ios 4000 --rw randrw --iodepth 1 --verify --halt-poll-ns 1
    json_expr "a 1 ns halt-poll window completes the exact count" \
        "$VB_TMP/vhost-blkd file randrw --verify halt-poll 1 ns.json" \
        "r['ios'] == 4000 and r['halt_poll'] is not None"
    run_bench "vhost-blkd file randrw --verify, sizes 512 B to 32 KiB mixed" \
        "$sock" --runtime 1 --rw randrw --queues 2 --iodepth 8 --verify \
        --bs 512 --bs-max 32k
    vb_stop "$VB_LAST_PID"
else
    vb_not_ok "vhost-blkd file: daemon starts"
fi

# the verifier catches bad data: a null back-end returns no written data
sock=$VB_TMP/blkd-null2.sock
if vb_daemon_start blkd-null2 "$sock" "$blkd" \
        --export "socket=$sock,driver=null,size=16M"; then
    if "$bench" --socket "$sock" --ios 64 --size 1M --verify \
            > "$VB_TMP/neg.out" 2>&1; then
        vb_not_ok "--verify fails against a back-end that drops writes" \
            "vhost-blk-bench exited 0"
    else
        vb_check "--verify fails against a back-end that drops writes" \
            grep -q "verify failed" "$VB_TMP/neg.out"
    fi
    if "$bench" --socket "$sock" --ios 64 --size 1M --verify --rw randrw \
            --bs 512 --bs-max 16k > "$VB_TMP/neg2.out" 2>&1; then
        vb_not_ok "--verify with mixed sizes fails against it too" \
            "vhost-blk-bench exited 0"
    else
        vb_check "--verify with mixed sizes fails against it too" \
            grep -q "verify failed" "$VB_TMP/neg2.out"
    fi
    vb_stop "$VB_LAST_PID"
fi

# compare.sh end to end (quick mode)
if command -v qemu-storage-daemon >/dev/null; then
    if VHOST_BLKD=$blkd VHOST_BLK_BENCH=$bench \
            "$VB_ROOT/scripts/bench/compare.sh" --quick -o "$VB_TMP/compare" \
            > "$VB_TMP/compare.log" 2>&1 &&
            grep -q "Null back-end" "$VB_TMP/compare.log" &&
            python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); sys.exit(0 if r["medians"] and all(m["iops"] > 0 and m["errors"] == 0 for m in r["medians"]) else 1)' \
                "$VB_TMP/compare/results.json"; then
        vb_ok "compare.sh --quick writes a table and results.json"
    else
        vb_not_ok "compare.sh --quick writes a table and results.json" \
            "see $VB_TMP/compare.log"
        sed 's/^/#   /' "$VB_TMP/compare.log" | tail -n 20
    fi
fi

vb_done
