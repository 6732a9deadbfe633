#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The seed's experiment on this host, in one command: fio 4k randread at
# numjobs 1..N in a guest, through QEMU's own virtio-blk, qemu-storage-
# daemon's vhost-user-blk export, vhost-blkd and the kernel vhost_blk
# module, beside fio on the host itself (bare metal, the limit), over a
# block device, a file or a RAM disk.  Rows = jobs, columns = setups: IOPS,
# each column's ratio to bare metal, host CPU per I/O; a table, JSON and a
# plot.  On a host where KVM cannot run a guest (tried, not assumed) it
# runs under TCG with small defaults and says the figures are the
# emulator's.
#
# Usage: scripts/bench/seed-table.sh (--device DEV | --file PATH [--size N] |
#            --ram SIZE) [options]          (--help lists every option)
#
# The work is done by seed-table.py next to this script (process handling,
# CPU sampling and the report are simpler there); this wrapper is the
# command the documentation names.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v python3 >/dev/null ||
    { echo "seed-table.sh: python3 is needed (scripts/install-deps.sh)" >&2; exit 1; }
exec python3 "$here/seed-table.py" "$@"
