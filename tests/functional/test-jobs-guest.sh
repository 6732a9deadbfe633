#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Live snapshot, stream and commit under a verifying guest.  vhost-blkd
# serves a qcow2 image with data in it (base.qcow2, node "disk0") and a
# small raw disk (the guest job's stop block); one TCG guest runs fio
# randwrite + crc32c verify (verify_backlog) passes on the qcow2 disk
# (job fio-until-stop) for the whole run, while jobs-guest.py, on the
# daemon's QMP monitor:
#   blockdev-snapshot-sync disk0 -> overlay1, then overlay1 -> overlay2,
#   block-stream of overlay2 with base-node=disk0 (BLOCK_JOB_COMPLETED),
#   blockdev-del of overlay1's node, active block-commit of overlay2 into
#   disk0, job-complete after BLOCK_JOB_READY, blockdev-del of overlay2,
# checking the chain after each step (query-named-block-nodes, and
# qemu-img info -U --backing-chain / qemu-img check -U of the image files
# no longer written) and waiting, after each, until the guest has written
# through the new top.
# Then the host writes the stop block, and: the guest's last fio pass
# verifies, vhost-blkd exits 0 on SIGTERM, qemu-img check of each image is
# clean, qemu-img info --backing-chain shows base.qcow2 alone (and
# overlay2 naming base.qcow2), and a host fio --verify_only of qemu-img
# convert's output of base.qcow2 finds the guest's last pass, with the
# base's own data where the guest never wrote.
#
# No step waits on time: QMP events, the export's write counter and the
# guest's log lines, each with a generous timeout.
set -u
. "$(dirname "$0")/lib.sh"

command -v "${VHOST_BLK_QEMU:-qemu-system-x86_64}" >/dev/null ||
    vb_skip_all "no QEMU binary"
for p in python3 qemu-img qemu-io fio; do
    command -v $p >/dev/null || vb_skip_all "$p is not installed"
done
vb_setup
BLKD=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"

# fio's range in the guest is [0, 16M); the base holds data there (which
# the guest overwrites) and beyond it (which must survive the jobs).
FIOSIZE=16M
base=$VB_TMP/base.qcow2
ctl=$VB_TMP/ctl.img
qemu-img create -q -f qcow2 "$base" 64M &&
    qemu-io -f qcow2 -c 'write -P 0x5a 0 4M' -c 'write -P 0xa5 40M 8M' \
        -c 'write -P 0x3c 63M 1M' "$base" > /dev/null &&
    qemu-img create -q -f raw "$ctl" 1M ||
    vb_bail "cannot make the images"

# quiet CMD...: run CMD, show its output only if it fails
quiet() { "$@" > "$VB_TMP/quiet.out" 2>&1 || { sed 's/^/#   /' "$VB_TMP/quiet.out"; return 1; }; }

vb_daemon_start blkd "$VB_TMP/qmp.sock" "$BLKD" --log-level info \
    --chardev "socket,id=mon0,path=$VB_TMP/qmp.sock,server=on,wait=off" \
    --monitor chardev=mon0 \
    --export "id=data,socket=$VB_TMP/data.sock,file=$base,format=qcow2,node-name=disk0" \
    --export "id=ctl,socket=$VB_TMP/ctl.sock,file=$ctl,node-name=ctl" ||
    vb_bail "vhost-blkd did not start"
BLKD_PID=$VB_LAST_PID
vb_wait_socket "$VB_TMP/ctl.sock" 10 "$BLKD_PID" || vb_bail "vhost-blkd has no export"

vb_guest_bg -s "$VB_TMP/data.sock" -s "$VB_TMP/ctl.sock" -t 900 \
    -j fio-until-stop vbsize=$FIOSIZE vbstopdev=vdb vbstopoff=0 \
    vbfioargs=--verify_backlog=64
glog=$VB_TMP/guest-$VB_GUEST_N.log
n=0
until grep -q "VBTEST-LOG: fio pass" "$glog" 2>/dev/null; do
    if [ $n -ge 3000 ] || ! kill -0 "$VB_GUEST_PID" 2>/dev/null; then
        tail -n 20 "$glog" 2>/dev/null | tr -d '\r' | sed 's/^/#   /'
        vb_bail "fio did not start in the guest"
    fi
    sleep 0.1
    n=$((n + 1))
done
vb_ok "the guest runs fio randwrite + crc32c verify on the qcow2 disk"

# The sequence; its PASS/FAIL lines become this script's TAP lines.
"$VB_FUNC/jobs-guest.py" --qmp "$VB_TMP/qmp.sock" --dir "$VB_TMP" \
    --node disk0 --export data > "$VB_TMP/jobs.out" 2>&1
seq_rc=$?
while IFS= read -r line; do
    case $line in
        PASS:\ *) vb_ok "${line#PASS: }" ;;
        FAIL:\ *) vb_not_ok "${line#FAIL: }" ;;
        *) echo "#   $line" ;;
    esac
done < "$VB_TMP/jobs.out"
[ $seq_rc -eq 0 ] || vb_not_ok "the job sequence ran to its end" "exit status $seq_rc"

# Stop the guest's job: its current pass is its last, and verifies.
{ printf VBSTOP; head -c 4090 /dev/zero; } |
    dd of="$ctl" bs=4096 conv=notrunc oflag=direct status=none ||
    vb_bail "cannot write the stop block"
wait "$VB_GUEST_PID"
guest_rc=$?
tr -d '\r' < "$glog" | grep -a -E 'VBTEST-(LOG|RESULT)|err=' | tail -n 6 | sed 's/^/#   /'
vb_check_eq "fio verify passed in the guest (its log says PASS)" \
    "$(tr -d '\r' < "$glog" | grep -a '^VBTEST-RESULT: ' | tail -n1)" \
    "VBTEST-RESULT: PASS"
vb_check_eq "...and the guest run exited 0" "$guest_rc" 0
passes=$(vb_info_get passes) || passes=
echo "# fio passes in the guest: ${passes:-?}"

kill -TERM "$BLKD_PID"
wait "$BLKD_PID"
vb_check_eq "vhost-blkd exits 0 on SIGTERM" "$?" 0
if grep -Eq 'Assertion|AddressSanitizer|LeakSanitizer|runtime error' "$VB_TMP/blkd.log"; then
    vb_not_ok "vhost-blkd's log is clean" "$(grep -E 'Assertion|Sanitizer|runtime error' "$VB_TMP/blkd.log" | head -n 3)"
else
    vb_ok "vhost-blkd's log is clean"
fi

for img in base overlay1 overlay2; do
    if [ -f "$VB_TMP/$img.qcow2" ]; then
        vb_check "qemu-img check $img.qcow2: no errors, no leaks" \
            quiet qemu-img check "$VB_TMP/$img.qcow2"
    else
        vb_not_ok "qemu-img check $img.qcow2" "the file is not there"
    fi
done
# chain_of IMG: the file names qemu-img info --backing-chain lists
chain_of() {
    qemu-img info --backing-chain "$1" 2>&1 |
        sed -n 's|^image: .*/||p' | tr '\n' ' ' | sed 's/ $//'
}
vb_check_eq "qemu-img info --backing-chain base.qcow2: one image" \
    "$(chain_of "$base")" "base.qcow2"
vb_check_eq "qemu-img info --backing-chain overlay2.qcow2: the stream made base.qcow2 its backing file" \
    "$(chain_of "$VB_TMP/overlay2.qcow2")" "overlay2.qcow2 base.qcow2"

# host_verify: fio checks the guest's last pass (same job, same seed) in
# the flattened image.
host_verify() {
    fio --name=vbtest --filename="$VB_TMP/flat.raw" --ioengine=psync \
        --rw=randwrite --bs=4k --size=$FIOSIZE --randseed="$passes" \
        --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_only=1 \
        --verify_state_save=0 --group_reporting=1 \
        > "$VB_TMP/fio-host.log" 2>&1 ||
        { sed 's/^/#   /' "$VB_TMP/fio-host.log" | tail -n 20; return 1; }
}
if [ -z "$passes" ]; then
    vb_not_ok "host fio --verify_only of base.qcow2" "the guest did not say how many passes it ran"
elif quiet qemu-img convert -O raw "$base" "$VB_TMP/flat.raw"; then
    vb_check "qemu-img convert of base.qcow2 holds the guest's last fio pass (host fio --verify_only)" \
        host_verify
    vb_check "...and the base's own data where the guest never wrote" \
        quiet qemu-io -r -f raw -c 'read -P 0 16M 24M' -c 'read -P 0xa5 40M 8M' \
        -c 'read -P 0 48M 15M' -c 'read -P 0x3c 63M 1M' "$VB_TMP/flat.raw"
else
    vb_not_ok "qemu-img convert of base.qcow2"
fi
vb_done
