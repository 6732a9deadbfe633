#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Live migration with packed virtqueues: test-migration.sh (ping-pong
# migrations during a fio verify job, and a read held in vhost-blkd across
# the stop) with stock QEMU's vhost-user-blk-pci,packed=on, so the packed
# ring's used descriptors, device area and data pages must all reach the
# dirty log.
set -u
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/test-migration.sh" --device-opts packed=on
