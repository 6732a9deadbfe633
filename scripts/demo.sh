#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The main job: serve a disk image through vhost-blkd to a real Linux guest
# under QEMU and run fio with data verification in the guest.
#
#   scripts/demo.sh [--image PATH] [--size 1G] [--queues 2] [--runtime 20]
#
# Installs missing Debian packages, builds vhost-blkd and the guest
# (kernel + initramfs with a static fio, cached in /var/cache/vhost-blk),
# creates the image if it does not exist (default
# /var/tmp/vhost-blk-demo/disk0.img), starts vhost-blkd, boots the guest
# (TCG, so guest IOPS measure the emulator, not the dataplane), prints
# fio's result and vhost-blkd's counters, and cleans up.
set -euo pipefail
cd "$(dirname "$0")/.."

work=${VHOST_BLK_DEMO_DIR:-/var/tmp/vhost-blk-demo}
img=
size=1G
queues=2
runtime=20
while [ $# -gt 0 ]; do
    case "$1" in
    --image) img=$2; shift ;;
    --size) size=$2; shift ;;
    --queues) queues=$2; shift ;;
    --runtime) runtime=$2; shift ;;
    -h|--help) sed -n '3,13p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown option '$1' (see --help)" >&2; exit 1 ;;
    esac
    shift
done

bash scripts/install-deps.sh
[ -f build/build.ninja ] || ./configure >/dev/null
ninja -C build >/dev/null
echo "demo: building or reusing the guest kernel and initramfs..."
assets=$(bash scripts/guest/build-assets.sh)

mkdir -p "$work"
[ -n "$img" ] || img=$work/disk0.img
if [ ! -e "$img" ]; then
    echo "demo: creating $size image $img"
    truncate -s "$size" "$img"
fi
sock=$work/disk0.sock
pidfile=$work/vhost-blkd.pid
log=$work/vhost-blkd.log

cleanup() {
    if [ -f "$pidfile" ]; then
        kill "$(cat "$pidfile")" 2>/dev/null || true
        for _ in $(seq 50); do [ -f "$pidfile" ] || break; sleep 0.1; done
    fi
}
trap cleanup EXIT

echo "demo: starting vhost-blkd (socket $sock, $queues queues, io_uring, O_DIRECT)"
build/tools/vhost-blkd --daemonize --pidfile "$pidfile" --log-level info \
    --iothreads "$queues" \
    --export "socket=$sock,file=$img,num-queues=$queues" 2>"$log"

echo "demo: booting the guest; fio randrw 4k, iodepth 32, $queues jobs, crc32c verify"
rc=0
VHOST_BLK_GUEST_ASSETS=$assets bash tests/functional/run-guest.sh \
    -s "$sock" -q "$queues" -c "$queues" -j fio-verify -t $((runtime + 90)) \
    vbrw=randrw vbsize=64M vbbs=4k vbiodepth=32 vbnumjobs="$queues" \
    vbruntime="$runtime" || rc=$?
kill -USR1 "$(cat "$pidfile")" 2>/dev/null && sleep 0.2 || true
echo "demo: vhost-blkd log ($log):"
sed 's/^/  /' "$log" | tail -20
exit $rc
