#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The guest harness checks itself, on vhost-blkd: data written by one
# guest verifies in a second guest after a clean stop and start of the
# daemon (no guest running meanwhile, so nothing depends on timing), and a
# block overwritten behind fio's back makes that verify fail, so a passing
# fio-verify job means the data really was checked.  These checks ran
# against qemu-storage-daemon before (test-qsd.sh, now the by-hand
# scripts/bench/qsd-reference.sh).
set -u
. "$(dirname "$0")/lib.sh"

vb_setup
BLKD=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"

# blkd_start SOCK IMG: vhost-blkd serving IMG on SOCK; sets VB_LAST_PID.
blkd_start() {
    vb_daemon_start "blkd-$(basename "$1")" "$1" "$BLKD" --log-level info \
        --export "socket=$1,file=$2"
}

job=(-j fio-verify vbrw=write vbsize=8M vbbs=64k)

sock=$VB_TMP/rs.sock
img=$(vb_mkimg rs 64M)
if blkd_start "$sock" "$img"; then
    vb_check "sequential write + verify" vb_guest -s "$sock" "${job[@]}"
    vb_stop "$VB_LAST_PID"
    if blkd_start "$sock" "$img"; then
        vb_check "after a clean daemon restart the data verifies (verify-only)" \
            vb_guest -s "$sock" "${job[@]}" vbverifyonly=1
        vb_stop "$VB_LAST_PID"
    else
        vb_not_ok "vhost-blkd restarts"
    fi
    # Overwrite 4 KiB in the middle of the written range behind fio's back.
    dd if=/dev/urandom of="$img" bs=4096 seek=1000 count=1 conv=notrunc status=none
    if blkd_start "$sock" "$img"; then
        vb_check "a corrupted block makes the verify job fail" \
            vb_guest -s "$sock" "${job[@]}" vbverifyonly=1 vbexpectfail=1
        vb_stop "$VB_LAST_PID"
    else
        vb_not_ok "vhost-blkd starts on the corrupted image"
    fi
else
    vb_not_ok "vhost-blkd starts"
fi

vb_done
