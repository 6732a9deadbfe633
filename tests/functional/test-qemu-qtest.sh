#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# QEMU's own vhost-user-blk qtests against vhost-blkd: a front-end this
# project does not write checks the daemon.
#
# QEMU's tests/qtest/vhost-user-blk-test.c (run through qos-test, which
# scripts/build-qemu.sh builds from the pinned Debian QEMU source) drives
# a vhost-user-blk-pci device in qtest mode: no guest, the test reads and
# writes guest memory and device registers itself.  It starts the
# back-end named by QTEST_QEMU_STORAGE_DAEMON_BINARY with
# qemu-storage-daemon's syntax (--blockdev driver=file,... --export
# type=vhost-user-blk,addr.type=fd,addr.str=FD,...), here vhost-blkd
# itself, and checks I/O, indirect descriptors, event-idx interrupt
# suppression, bad discard/write-zeroes requests, multiqueue config,
# hotplug and that the back-end exits with status 0 on SIGTERM.
#
# The VMM is build/qemu/qemu-system-x86_64, built by scripts/build-qemu.sh
# in the same tree as qos-test (libqos pokes the registers of exactly
# that QEMU version).  Debian's stock qemu-system-x86_64 cannot run them:
# it is built without the qtest accelerator ("-accel qtest: invalid
# accelerator qtest").  The fork's only change to the device under test,
# vhost-user-blk-pci, is qemu/patches/0002: what QEMU does when the
# back-end's connection closes, which no case does before QEMU exits.
#
# One "ok" per qtest case; a case qos-test skips counts as a failure, and
# so does a missing qos-test, QEMU or vhost-blkd.  Each case runs in its
# own session under a timeout that only bounds a hang (a case takes
# seconds); whatever the session leaves behind is killed by its id.
#
# Environment (besides lib.sh's):
#   VHOST_BLK_QOS_TEST    qos-test (default build/qemu/qos-test)
#   VHOST_BLK_QTEST_QEMU  the VMM (default build/qemu/qemu-system-x86_64;
#                         it needs the qtest accelerator)
set -u
. "$(dirname "$0")/lib.sh"

QOS=${VHOST_BLK_QOS_TEST:-$VB_ROOT/build/qemu/qos-test}
QEMU=${VHOST_BLK_QTEST_QEMU:-$VB_ROOT/build/qemu/qemu-system-x86_64}
# What vhost-user-blk-test.c registers (QEMU 7.2); "config" and "resize"
# are left out there (they need -drive and block_resize in QEMU).
WANT="basic indirect idx nxvirtq hotplug multiqueue"
CASE_TIMEOUT=${VB_QTEST_TIMEOUT:-120}

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbqtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

[ -x "$QOS" ] ||
    vb_bail "$QOS is missing: run scripts/build-qemu.sh (it builds QEMU's qos-test)"
[ -x "$QEMU" ] ||
    vb_bail "$QEMU is missing: run scripts/build-qemu.sh"
BLKD=$(vb_bin vhost-blkd) ||
    vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD (ninja -C build)"

echo "# qos-test: $QOS -> $(readlink -f "$QOS")"
echo "# qemu: $QEMU -> $(readlink -f "$QEMU") ($("$QEMU" --version | head -n1))"
echo "# back-end: $BLKD"

export QTEST_QEMU_BINARY=$QEMU
export QTEST_QEMU_STORAGE_DAEMON_BINARY=$BLKD

# The vhost-user-blk test paths, e.g.
# /x86_64/pc/i440FX-pcihost/pci-bus-pc/pci-bus/vhost-user-blk-pci/vhost-user-blk/vhost-user-blk-tests/basic
if ! (cd "$VB_TMP" && timeout 60 "$QOS" -l) > "$VB_TMP/list.txt" 2>&1; then
    sed 's/^/#   /' "$VB_TMP/list.txt"
    vb_bail "qos-test -l failed"
fi
mapfile -t paths < <(grep -E '/vhost-user-blk(-pci)?-tests/' "$VB_TMP/list.txt")
echo "# ${#paths[@]} vhost-user-blk test paths"
for w in $WANT; do
    printf '%s\n' "${paths[@]}" | grep -q "/$w\$" ||
        vb_not_ok "qos-test lists the vhost-user-blk case '$w'" \
                  "not in 'qos-test -l' (listed: $(printf '%s ' "${paths[@]##*/}"))"
done
[ ${#paths[@]} -gt 0 ] || vb_bail "qos-test lists no vhost-user-blk test"

n=0
for p in "${paths[@]}"; do
    n=$((n + 1))
    dir=$VB_TMP/case-$n
    log=$dir/log.txt
    mkdir -p "$dir"
    t0=$(date +%s%N)
    # Images (qtest.XXXXXX) land in the cwd, sockets in $TMPDIR.  The
    # session's id is this pid (exec all the way down); on a hang, timeout
    # signals its whole process group: qos-test, QEMU and the back-end.
    (cd "$dir" && exec setsid env TMPDIR="$dir" \
        timeout -k 10 "$CASE_TIMEOUT" "$QOS" --tap -p "$p") \
        > "$log" 2>&1 < /dev/null &
    sid=$!
    wait "$sid"
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    leftover=
    if kill -KILL -- "-$sid" 2>/dev/null; then
        leftover=" (processes of the case were still running: killed)"
    fi
    name="qtest ${p#*/vhost-user-blk-pci/}"
    if [ "$rc" -eq 0 ] && [ -z "$leftover" ] &&
       grep -Eq "^ok [0-9]+ $p\$" "$log" && ! grep -q '# SKIP' "$log"; then
        vb_ok "$name (${ms} ms)"
    else
        sed 's/^/#   /' "$log" | tail -n 40
        why="status $rc$leftover"
        case $rc in
            124|137) why="$why: no result within ${CASE_TIMEOUT}s (a hang; did the back-end start? its lines are in the log)" ;;
            134) why="$why: qos-test aborted (a failed assertion: the ERROR line above)" ;;
        esac
        grep -q '# SKIP' "$log" && why="$why; qos-test skipped it: $(grep -m1 -o '# SKIP.*' "$log")"
        vb_not_ok "$name (${ms} ms)" "$why; log: $log"
    fi
done

vb_done
