#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Build the libFuzzer targets (clang, ASan+UBSan) and run each for a while.
#
#   scripts/fuzz.sh [SECONDS | --runs N] [TARGET...]
#
# SECONDS per target (default 60), or --runs N: exactly N inputs per
# target, without corpus reloads or address randomisation, which with a
# fixed -seed in FUZZ_ARGS makes the run try the same inputs every time
# (CI does this); TARGETs default to all of them
# (fuzz-virtqueue fuzz-virtio-blk fuzz-vhost-user fuzz-export-opts
# fuzz-qmp fuzz-inflight fuzz-qcow2 fuzz-nbd-server).  fuzz-virtqueue covers both ring
# formats: split, and packed (header flag 0x40, seeds
# tests/fuzz/corpus/fuzz-virtqueue/packed-*); fuzz-inflight the inflight
# restore of both, with a mutated region and front-end writes during the
# restore; fuzz-qcow2 qcow2 image files (block/qcow2-format.c and the
# reference reader); fuzz-nbd-server what an NBD client sends (the
# server's option and request parsers and the requests).  Each
# run starts from a copy of tests/fuzz/corpus/<target> plus
# tests/fuzz/regressions/<target> in a temporary directory, so the
# committed corpus never grows.  On a crash the
# script prints the crashing input's path (kept, with the log) and exits 1;
# copy the input into tests/fuzz/regressions/<target>/ to keep it.
# Environment: BUILDDIR (default build-fuzz), FUZZ_ARGS (extra libFuzzer
# options, e.g. "-jobs=2").
set -euo pipefail

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${BUILDDIR:-build-fuzz}
seconds=60
runs=
if [ "${1:-}" = --runs ]; then
    runs=${2:-}
    shift 2 || true
    case "$runs" in
    ''|*[!0-9]*) echo "usage: $0 [SECONDS | --runs N] [TARGET...]" >&2; exit 2 ;;
    esac
elif [ $# -gt 0 ]; then
    seconds=$1
    shift
fi
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz-virtqueue fuzz-virtio-blk fuzz-vhost-user fuzz-export-opts fuzz-qmp fuzz-inflight fuzz-qcow2 fuzz-nbd-server)

case "$seconds" in
''|*[!0-9]*) echo "usage: $0 [SECONDS | --runs N] [TARGET...]" >&2; exit 2 ;;
esac

cd "$srcdir"
if [ ! -f "$builddir/build.ninja" ] ||
   ! grep -q "fuzzing *: *true" "$builddir/meson-logs/meson-log.txt" 2>/dev/null; then
    ./configure --builddir="$builddir" --enable-fuzzing >/dev/null
fi
# ninja reports a failed build on stdout: show it, or CI says nothing
if ! out=$(ninja -C "$builddir" "${targets[@]/#/tests/fuzz/}" 2>&1); then
    printf '%s\n' "$out" | grep -vE '^\[[0-9]+/[0-9]+\] ' | tail -n 40
    echo "fuzz.sh: building the fuzz targets failed (see above)" >&2
    exit 1
fi

# Inputs as big as the largest seeds, with room to grow
max_len() {
    case "$1" in
    fuzz-virtqueue|fuzz-vhost-user) echo 4096 ;;
    fuzz-export-opts) echo 1024 ;;
    fuzz-qmp) echo 4096 ;;
    # a packed region of 64 entries (2 KiB) and the ring image after it
    fuzz-inflight) echo 8192 ;;
    # qcow2 images of 512-byte clusters: the seeds are 3-6 KiB
    fuzz-qcow2) echo 16384 ;;
    *) echo 2048 ;;
    esac
}

# --runs: what a target needs besides to repeat.  fuzz-virtio-blk's file
# requests complete on a pool worker, and some hit counts there follow
# the threads' timing (its edges do not): it is guided by edges alone.
repeat_args() {
    case "$1" in
    fuzz-virtio-blk) echo -use_counters=0 ;;
    esac
}

# --runs: no address-space randomisation (pointer values reach the
# comparison feedback), where setarch can turn it off.
norand=()
if [ -n "$runs" ] && setarch "$(uname -m)" -R true 2>/dev/null; then
    norand=(setarch "$(uname -m)" -R)
fi

failed=0
for t in "${targets[@]}"; do
    bin="$builddir/tests/fuzz/$t"
    work=$(mktemp -d "${TMPDIR:-/tmp}/vb-$t.XXXXXX")
    mkdir -p "$work/corpus" "$work/artifacts"
    for d in "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t"; do
        if [ -d "$d" ]; then
            cp "$d"/* "$work/corpus/" 2>/dev/null || true
        fi
    done
    seeds=$(ls "$work/corpus" | wc -l)
    if [ -n "$runs" ]; then
        # Repeatable: no time-based corpus reload.
        limit=(-runs="$runs" -reload=0 $(repeat_args "$t"))
        echo "== $t: $runs inputs from $seeds seed(s) in $work"
    else
        limit=(-max_total_time="$seconds")
        echo "== $t: ${seconds}s from $seeds seed(s) in $work"
    fi
    # A small quarantine lets freed memory be reused soon: each input
    # allocates a queue's element pool, and fresh pages cost more than
    # the whole rest of the run.
    # -close_fd_mask=2: the target's own log lines (a broken queue logs
    # one) would dominate the run time; crash reports still get through.
    rc=0
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:quarantine_size_mb=16 \
    "${norand[@]}" "$bin" "${limit[@]}" -max_len="$(max_len "$t")" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -close_fd_mask=2 -artifact_prefix="$work/artifacts/" \
        ${FUZZ_ARGS:-} "$work/corpus" >"$work/log" 2>&1 || rc=$?
    grep -E "^#[0-9]+[[:space:]]+DONE|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)" \
        "$work/log" | sed 's/^/   /' || true
    crash=$(ls "$work/artifacts" 2>/dev/null | head -1)
    if [ $rc -ne 0 ] || [ -n "$crash" ]; then
        failed=1
        echo "!! $t FAILED (exit $rc)"
        grep -E "ERROR:|SUMMARY:|runtime error|fuzz invariant" "$work/log" |
            head -5 | sed 's/^/   /' || true
        if [ -n "$crash" ]; then
            echo "!! crashing input: $work/artifacts/$crash"
            echo "!! reproduce: $bin $work/artifacts/$crash"
        fi
        echo "!! full log: $work/log"
    else
        cov=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$work/log" | sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+).*/\1 edges, \2 features/')
        echo "   ok: $cov, corpus grew from $seeds to $(ls "$work/corpus" | wc -l) inputs"
        rm -rf "$work"
    fi
done
exit $failed
