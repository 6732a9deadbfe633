#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The project's test command: installs what is missing, builds, and runs
# the unit and integration tests (meson) and the guest tests (a real Linux
# guest under QEMU/TCG running fio against vhost-blkd, through stock QEMU
# and through the project's patched QEMU, which it builds with
# scripts/build-qemu.sh: minutes the first time, seconds once cached, and
# through systemd as PID 1 in a Debian 12 guest whose image
# scripts/guest/build-systemd-image.sh debootstraps and caches).
#
#   scripts/check.sh [--builddir DIR] [--no-guest] [--no-qemu] [--sanitizers]
#
# Ends with one line "N passed, N failed" over every test program and guest
# test; exits non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."

builddir=build
guest=1
qemu=1
cfg=()
skip=()
while [ $# -gt 0 ]; do
    case "$1" in
    --builddir) builddir=$2; shift ;;
    --builddir=*) builddir=${1#*=} ;;
    --no-guest) guest=0 ;;
    --no-qemu) qemu=0 ;;
    --sanitizers) cfg+=(--enable-sanitizers); skip+=(--no-suite seccomp) ;;
    -h|--help) sed -n '3,13p' "$0"; exit 0 ;;
    *) echo "check.sh: unknown option '$1' (see --help)" >&2; exit 1 ;;
    esac
    shift
done

bash scripts/install-deps.sh
if [ ! -f "$builddir/build.ninja" ]; then
    ./configure --builddir="$builddir" "${cfg[@]}" >/dev/null
fi
ninja -C "$builddir" >/dev/null

passed=0
failed=0

# A Ceph test cluster for the rbd cases of the unit and integration tests
# (they need CEPH_CONF and skip without it) and for
# tests/functional/test-rbd.sh, in a directory of this run; stopped at the
# end, also if a test is killed.  No cluster is a failure, not a skip.
export VB_CEPH_DIR=/var/tmp/vhost-blk-check-ceph.$$
trap 'VB_CEPH_DIR=$VB_CEPH_DIR bash scripts/ceph-cluster.sh stop || true' EXIT
if CEPH_CONF=$(bash scripts/ceph-cluster.sh start | tail -n 1) &&
        [ -f "$CEPH_CONF" ]; then
    export CEPH_CONF
else
    echo "check.sh: the Ceph test cluster did not start: the rbd tests will fail" >&2
    unset CEPH_CONF
    failed=$((failed + 1))
fi

# Unit and integration tests.  The summary comes from meson's own log.
# Under the sanitizers, the --seccomp on reruns (suite 'seccomp') are left
# out: the plain build runs them.
set +e
meson test -C "$builddir" --suite unit --suite integration "${skip[@]}" \
    --print-errorlogs
set -e
log="$builddir/meson-logs/testlog.json"
if [ -f "$log" ]; then
    read -r p f < <(python3 - "$log" <<'PY'
import json, sys
p = f = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL", "SKIP"):
        p += 1
    else:
        f += 1
print(p, f)
PY
)
    passed=$((passed + p)); failed=$((failed + f))
else
    failed=$((failed + 1))
fi

if [ "$guest" = 1 ]; then
    # tests/functional/test-rbd.sh uses the cluster of $VB_CEPH_DIR
    # (started above; its start is a no-op then) and stops it at its end.
    if [ "$qemu" = 1 ]; then
        # The patched QEMU for tests/functional/test-qemu-fork.sh.
        bash scripts/build-qemu.sh || failed=$((failed + 1))
    fi
    # The Debian 12 systemd guest of tests/functional/test-systemd-guest.sh
    # (debootstrap: about 5 minutes the first time, cached after), built
    # here so that its time shows on its own.
    t=$(date +%s)
    if img=$(bash scripts/guest/build-systemd-image.sh); then
        echo "check: systemd guest image $img ($(( $(date +%s) - t )) s)"
    else
        echo "check: building the systemd guest image failed"
    fi
    set +e
    VHOST_BLK_BUILD="$PWD/$builddir" bash tests/functional/run-all.sh | tee "$builddir/functional.log"
    rc=${PIPESTATUS[0]}
    set -e
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$builddir/functional.log" | tail -1 || true)
    if [ -n "$line" ]; then
        p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
        passed=$((passed + p)); failed=$((failed + f))
    fi
    [ "$rc" = 0 ] || [ "$failed" -gt 0 ] || failed=$((failed + 1))
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
