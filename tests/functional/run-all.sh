#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Run every tests/functional/test-*.sh (or the ones named as arguments) and
# sum up their "N passed, N failed" lines; exit 1 if anything failed.
#
# Usage: [VHOST_BLK_BUILD=build] tests/functional/run-all.sh [NAME...]
#   NAME is a test script name or a substring of one (e.g. harness, vhost-blkd).
# A script that exits non-zero without reporting a failure, or prints no
# summary line, counts as one failure; one that exits 0 after printing the
# TAP line "1..0 # SKIP reason" is skipped.
set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VHOST_BLK_BUILD=${VHOST_BLK_BUILD:-./build}
VHOST_BLK_BUILD=$(cd "$VHOST_BLK_BUILD" 2>/dev/null && pwd || echo "$ROOT/build")
export VHOST_BLK_BUILD

# Build (or find cached) guest assets once for every script.
if [ -z "${VHOST_BLK_GUEST_ASSETS:-}" ]; then
    VHOST_BLK_GUEST_ASSETS=$("$ROOT/scripts/guest/build-assets.sh") || {
        echo "run-all: building the guest assets failed"
        echo "0 passed, 1 failed"
        exit 1
    }
    export VHOST_BLK_GUEST_ASSETS
fi

scripts=()
for t in "$HERE"/test-*.sh; do
    [ -e "$t" ] || continue
    if [ $# -gt 0 ]; then
        hit=0
        for want in "$@"; do
            case ${t##*/} in *"$want"*) hit=1 ;; esac
        done
        [ $hit -eq 1 ] || continue
    fi
    scripts+=("$t")
done

total_pass=0
total_fail=0
failed_scripts=()
skipped_scripts=()
for t in "${scripts[@]}"; do
    name=${t##*/}
    echo "# ==== $name"
    out=$(mktemp)
    start=$(date +%s)
    bash "$t" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n1)
    skipall=$(grep -m1 -E '^1\.\.0 # SKIP' "$out")
    if [ -n "$skipall" ] && [ "$rc" -eq 0 ]; then
        summary=${summary:-0 passed, 0 failed}
        skipped_scripts+=("$name")
    fi
    rm -f "$out"
    if [ -n "$summary" ]; then
        p=${summary%% passed*}
        f=${summary#*, }
        f=${f%% failed}
    else
        p=0
        f=1
        echo "# $name printed no summary line"
    fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "# $name exited with status $rc"
    fi
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    [ "$f" -gt 0 ] && failed_scripts+=("$name")
    echo "# ==== $name: $p passed, $f failed ($(( $(date +%s) - start ))s)"
done

[ ${#scripts[@]} -gt 0 ] || echo "# no test scripts matched"
[ ${#skipped_scripts[@]} -eq 0 ] || echo "# skipped: ${skipped_scripts[*]}"
[ ${#failed_scripts[@]} -eq 0 ] || echo "# failed: ${failed_scripts[*]}"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
