#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Run the same QMP conversation (tests/qmp/qmp_conversation.py: nodes,
# exports, queries, resize, statistics, deletion, error cases) against
# qemu-storage-daemon and vhost-blkd, both started with qemu-storage-
# daemon's command line, and print every difference field by field,
# marking the deliberate ones (tests/qmp/deliberate.json).  A report: it
# exits 0 whatever the differences (qemu-storage-daemon never gates CI).
#
#   scripts/qmp-compare.sh [--record]
#
# --record also rewrites tests/qmp/qsd-7.2.jsonl, the transcript the gating
# test tests/qmp/test-qmp-golden.py compares vhost-blkd with (record with
# qemu-storage-daemon 7.2 only).  BUILDDIR: the build (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
builddir=${BUILDDIR:-build}
record=0
[ "${1:-}" = --record ] && record=1
if ! command -v qemu-storage-daemon >/dev/null; then
    echo "qmp-compare: qemu-storage-daemon not installed (apt-get install qemu-utils); nothing to compare"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== $(qemu-storage-daemon --version | head -1)"
python3 tests/qmp/qmp_conversation.py --backend qsd --out "$tmp/qsd.jsonl" ||
    { echo "qmp-compare: the conversation with qemu-storage-daemon failed"; exit 0; }
python3 tests/qmp/qmp_conversation.py --backend vhost-blkd \
    --binary "$builddir/tools/vhost-blkd" --out "$tmp/vb.jsonl" ||
    { echo "qmp-compare: the conversation with vhost-blkd failed"; exit 0; }
python3 tests/qmp/qmp_compare.py "$tmp/qsd.jsonl" "$tmp/vb.jsonl" \
    --deliberate tests/qmp/deliberate.json || true
if [ $record = 1 ]; then
    cp "$tmp/qsd.jsonl" tests/qmp/qsd-7.2.jsonl
    echo "recorded tests/qmp/qsd-7.2.jsonl"
fi
