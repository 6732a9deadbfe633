#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The short soak (no guest): scripts/soak.sh --short, about a minute of
# 8 exports x 4 queues under verified randrw with connect/disconnect
# cycles, then kill -9/restart cycles; one check per criterion.
set -u
. "$(dirname "$0")/lib.sh"

# No guest here: a temp dir and the cleanup trap are all we need.
VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

vb_bin vhost-blkd >/dev/null || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
vb_bin soak-reconnect >/dev/null || vb_bail "soak-reconnect is not built in $VHOST_BLK_BUILD"

"$VB_ROOT/scripts/soak.sh" --short --out "$VB_TMP/soak" > "$VB_TMP/soak.log" 2>&1
rc=$?
sed 's/^/# /' "$VB_TMP/soak.log"
log=$VB_TMP/soak.log
vb_check "no I/O or verify error under load" \
    bash -c "! grep -q 'FAIL: export\|exited non-zero\|warm-up' '$log'"
vb_check "every connect/disconnect cycle verified" \
    bash -c "! grep -q 'connect cycles failed\|FAIL: warm-up connect' '$log'"
vb_check "resident memory flat" bash -c "! grep -q 'FAIL: .*VmRSS' '$log'"
vb_check "fd count flat" bash -c "! grep -q 'FAIL: .*fds' '$log'"
vb_check "kill -9/restart cycles: no lost write" \
    grep -q "lost or wrong writes 0" "$log"
vb_check "vhost-blkd stopped cleanly, soak.sh passed" test "$rc" = 0
vb_done
