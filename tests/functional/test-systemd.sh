#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# vhost-blkd under a service manager, without systemd or a guest: this
# script's helper plays systemd (NOTIFY_SOCKET, a socket passed as fd 3)
# and checks READY=1 / STOPPING=1, socket activation and a restart that a
# reconnecting front-end survives (see systemd-manager.py).
set -u
. "$(dirname "$0")/lib.sh"

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
bench=$(vb_bin vhost-blk-bench) || vb_bail "vhost-blk-bench is not built in $VHOST_BLK_BUILD"
command -v python3 > /dev/null || vb_bail "python3 is not installed"

python3 "$VB_FUNC/systemd-manager.py" test "$blkd" "$bench" "$VB_TMP"
rc=$?
[ $rc -eq 0 ] || VB_FAILED=1
exit $rc
