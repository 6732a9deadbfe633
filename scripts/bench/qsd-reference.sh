#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The guest harness against the reference backend, qemu-storage-daemon's
# vhost-user-blk export: fio write+verify with 1 and 2 queues, the queues
# the guest sees, write-zeroes/discard, data that survives a clean backend
# restart, a corrupted block that fio must catch, and a read-only export.
#
# A reference run by hand (e.g. on a new QEMU or harness change), not part
# of CI: it tests someone else's program, so its result must not gate this
# project.  It used to be tests/functional/test-qsd.sh; the restart of qsd
# while the guest writes, which does not always keep the data, is measured
# by scripts/bench/restart-survival.sh instead (docs/benchmarks.md).
#
# Usage: [VHOST_BLK_GUEST_ASSETS=DIR] scripts/bench/qsd-reference.sh
set -u
. "$(dirname "$0")/../../tests/functional/lib.sh"

vb_setup
command -v qemu-storage-daemon >/dev/null || vb_bail "qemu-storage-daemon not installed"

for nq in 1 2; do
    sock=$VB_TMP/qsd-$nq.sock
    img=$(vb_mkimg "disk$nq" 128M)
    if ! vb_qsd_start "$sock" "$img" "$nq"; then
        vb_not_ok "qsd $nq queue(s): daemon starts"
        continue
    fi
    pid=$VB_LAST_PID

    vb_check "qsd $nq queue(s): fio randwrite + crc32c verify" \
        vb_guest -s "$sock" -q "$nq" -j fio-verify \
        vbrw=randwrite vbsize=32M vbbs=4k vbiodepth=16

    if vb_guest -s "$sock" -q "$nq" -j device-info; then
        vb_ok "qsd $nq queue(s): device-info job"
        vb_check_info "qsd $nq queue(s): guest sees $nq hw queue(s)" nr_hw_queues "$nq"
        vb_check_info "qsd $nq queue(s): 128M capacity" size_sectors 262144
        q=0
        while [ $q -lt "$nq" ]; do
            irqs=$(vb_info_get "hctx${q}_irqs")
            vb_check "qsd $nq queue(s): queue $q completed requests (irqs=$irqs)" \
                test "${irqs:-0}" -gt 0 2>/dev/null
            q=$((q + 1))
        done
    else
        vb_not_ok "qsd $nq queue(s): device-info job"
    fi
    vb_stop "$pid"
done

# Write-zeroes and discard, then data surviving a backend restart.
sock=$VB_TMP/qsd-misc.sock
img=$(vb_mkimg misc 64M)
if vb_qsd_start "$sock" "$img" 1; then
    vb_check "qsd: write-zeroes reads back zeros, discard succeeds" \
        vb_guest -s "$sock" -j discard vblen=1M
    vb_check "qsd: sequential write + verify (pass 1)" \
        vb_guest -s "$sock" -j fio-verify vbrw=write vbsize=8M vbbs=64k
    vb_stop "$VB_LAST_PID"
    if vb_qsd_start "$sock" "$img" 1; then
        vb_check "qsd: data verifies after a backend restart (verify-only)" \
            vb_guest -s "$sock" -j fio-verify vbrw=write vbsize=8M vbbs=64k vbverifyonly=1
        vb_stop "$VB_LAST_PID"
    else
        vb_not_ok "qsd: daemon restarts"
    fi
else
    vb_not_ok "qsd: daemon starts (misc)"
fi

# A corrupted block must fail verification (the harness detects bad data).
sock=$VB_TMP/qsd-bad.sock
img=$(vb_mkimg bad 64M)
if vb_qsd_start "$sock" "$img" 1; then
    vb_guest -s "$sock" -j fio-verify vbrw=write vbsize=8M vbbs=64k >/dev/null
    vb_stop "$VB_LAST_PID"
    # Overwrite 4 KiB in the middle of the written range behind fio's back.
    dd if=/dev/urandom of="$img" bs=4096 seek=1000 count=1 conv=notrunc status=none
    vb_qsd_start "$sock" "$img" 1
    vb_check "qsd: corrupted data makes the verify job fail" \
        vb_guest -s "$sock" -j fio-verify vbrw=write vbsize=8M vbbs=64k \
        vbverifyonly=1 vbexpectfail=1
    vb_stop "$VB_LAST_PID"
fi

# Read-only export: guest sees ro=1 and writes are refused.
sock=$VB_TMP/qsd-ro.sock
img=$(vb_mkimg ro 64M)
if vb_qsd_start "$sock" "$img" 1 writable=off; then
    vb_check "qsd read-only: guest cannot write" vb_guest -s "$sock" -j readonly
    vb_stop "$VB_LAST_PID"
else
    vb_not_ok "qsd read-only: daemon starts"
fi

vb_done
