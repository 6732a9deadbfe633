#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Live migration through the patched QEMU's -device
# vhost-pci-blk-pci,chardev= on vhost-blkd: test-migration.sh (ping-pong
# migrations during a fio verify job) with the fork's device.  Skips when
# the patched QEMU (scripts/build-qemu.sh) is not built.
#   VHOST_BLK_QEMU_FORK   the patched binary (default build/qemu/qemu-system-x86_64)
set -u
here=$(cd "$(dirname "$0")" && pwd)
FORK_QEMU=${VHOST_BLK_QEMU_FORK:-$here/../../build/qemu/qemu-system-x86_64}
if [ ! -x "$FORK_QEMU" ]; then
    echo "# $FORK_QEMU is not built (scripts/build-qemu.sh builds it)"
    echo "1..0 # SKIP patched QEMU not built"
    echo "0 passed, 0 failed"
    exit 0
fi
exec bash "$here/test-migration.sh" --device vhost-pci-blk-pci --qemu "$FORK_QEMU"
