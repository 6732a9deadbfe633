#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Instructions per I/O of vhost-blkd (null back-end, 4 KiB random reads,
# depth 32) under callgrind: (Ir(2N) - Ir(N)) / N, so start-up and
# connection costs cancel (the method of scripts/bench/compare.sh).
# Also prints the self cost per I/O of the split ring's hot functions and
# the dirty-log helpers, which unlike the total does not depend on how the
# requests happened to batch, and the 15 functions with the most self
# instructions per I/O.
# Usage: scripts/bench/ir-per-io.sh [-b BUILDDIR] [-n IOS] [-f FILE] [-x KEYS] [-- BENCH-ARGS...]
#   -f FILE serves FILE (an image file or a block device, O_DIRECT, the
#   default aio mode) instead of the null driver.
#   -x KEYS adds ",KEYS" to the daemon's --export, e.g. -x iops-total=0 to
#   measure the throttle filter with no limit set.
#   BENCH-ARGS go to vhost-blk-bench, e.g. --dirty-log to run with the
#   front-end's dirty log set and VHOST_F_LOG_ALL on.
set -euo pipefail
build=build
n=20000
xkeys=
target=driver=null,size=1073741824
while [ $# -gt 0 ]; do
    case $1 in
    -b) build=$2; shift ;;
    -f) target=file=$2,cache=none; shift ;;
    -n) n=$2; shift ;;
    -x) xkeys=,$2; shift ;;
    --) shift; break ;;
    *) echo "ir-per-io.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
command -v valgrind >/dev/null || { echo "ir-per-io.sh: valgrind is needed" >&2; exit 1; }
tmp=$(mktemp -d /tmp/vb-irio.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
irs=()
for ios in "$n" $((2 * n)); do
    sock=$tmp/s.$ios
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$ios" \
        "$build/tools/vhost-blkd" --export "socket=$sock,$target,num-queues=1,queue-size=512$xkeys" \
        2>"$tmp/log.$ios" &
    pid=$!
    for _ in $(seq 1 1200); do [ -S "$sock" ] && break; sleep 0.1; done
    [ -S "$sock" ] || { echo "ir-per-io.sh: daemon did not start" >&2; cat "$tmp/log.$ios" >&2; exit 1; }
    "$build/tools/vhost-blk-bench" --socket "$sock" --rw randread --bs 4k --iodepth 32 \
        --queue-size 512 --ios "$ios" "$@" > "$tmp/bench.$ios"
    kill -TERM "$pid"
    wait "$pid" || true
    ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/log.$ios" | tail -n1)
    [ -n "$ir" ] || { echo "ir-per-io.sh: no callgrind total" >&2; exit 1; }
    irs+=("$ir")
done
echo "Ir($n)=${irs[0]} Ir($((2 * n)))=${irs[1]} instructions/IO=$(( (irs[1] - irs[0]) / n ))"
# self Ir of FUNCTION in a callgrind output file (0 if it never ran); the
# function table only (--auto=no: annotated source lines that merely
# mention the name, such as its callers' call sites, must not count)
fn_ir() {
    callgrind_annotate --auto=no --threshold=100 "$1" 2>/dev/null |
        awk -v f="$2" '{ gsub(",", "", $1) } $0 ~ ("[ :]" f " ") || $0 ~ ("[ :]" f "$") { s += $1 } END { print s + 0 }'
}
line=
for f in virtqueue_pop virtqueue_push virtqueue_notify virtqueue_log_used \
         guest_mem_log_iov guest_mem_log_gpa; do
    a=$(fn_ir "$tmp/cg.$n" "$f")
    b=$(fn_ir "$tmp/cg.$((2 * n))" "$f")
    line+=" $f=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "%.1f", (b - a) / n }')"
done
echo "self instructions/IO:$line"
# Where the instructions go: the 15 functions with the most self
# instructions per I/O, (Ir(2N) - Ir(N)) / N each.
fn_table() {
    callgrind_annotate --auto=no --threshold=100 "$1" 2>/dev/null |
        awk '$1 ~ /^[0-9,]+$/ && /\[/ { c = $1; gsub(",", "", c); f = $0
             sub(/^ *[0-9,]+ +(\([^)]*\) +)?/, "", f); sub(/ *\[.*$/, "", f)
             sub(/^.*:/, "", f); print f, c }'
}
fn_table "$tmp/cg.$n" > "$tmp/fn.a"
fn_table "$tmp/cg.$((2 * n))" > "$tmp/fn.b"
echo "top self instructions/IO (function, per I/O):"
# (sorted into a file: "sort | head" would end in SIGPIPE under pipefail)
awk -v n="$n" 'NR == FNR { a[$1] += $2; next } { b[$1] += $2 }
    END { for (f in b) printf "%8.1f  %s\n", (b[f] - a[f]) / n, f }' \
    "$tmp/fn.a" "$tmp/fn.b" | sort -rn > "$tmp/fn.sorted"
head -n 15 "$tmp/fn.sorted"
