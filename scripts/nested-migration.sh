#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The long variant of tests/functional/test-nested-migration.sh: a VM whose
# disk is -device vhost-pci-blk-pci,drive= (served by vhost_blk.ko inside
# the test guest) live-migrates between nested QEMUs several times in a row
# while its fio write + crc32c verify passes run, and its last pass
# verifies on the final destination.  Too long for CI under nested TCG (the
# figures are in docs/qemu-fork.md); CI runs the test with one migration.
#
# Usage: scripts/nested-migration.sh [MIGRATIONS]   (default 3)
# Env: as tests/functional/test-nested-migration.sh (VHOST_BLK_BUILD,
#      VHOST_BLK_QEMU_FORK, ...); VB_NESTED_MIG_ARGS defaults here to
#      vbsize=8M+vbbs=16k+vbiodepth=16 (passes of 512 writes and reads).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export VB_NESTED_MIGRATIONS=${1:-3}
export VB_NESTED_MIG_ARGS=${VB_NESTED_MIG_ARGS:-vbsize=8M+vbbs=16k+vbiodepth=16}
export VB_NESTED_MIG_TIMEOUT=${VB_NESTED_MIG_TIMEOUT:-3600}
exec "$ROOT/tests/functional/test-nested-migration.sh"
