#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The patched QEMU's kernel path end to end.  The test guest (the "outer"
# guest) loads vhost_iotlb.ko, vhost.ko and our vhost_blk.ko and runs the
# patched QEMU itself (scripts/guest/build-nested.sh ships it, its
# libraries and firmware in a second initramfs archive).  That QEMU boots a
# nested TCG guest whose only disk is
#   -drive if=none,id=nd0,file=/dev/vda,format=raw,cache=none
#   -device vhost-pci-blk-pci,drive=nd0,serial=vbnested01
# i.e. served by /dev/vhost-blk, backed by the outer guest's own virtio
# disk, which the host gives 4096-byte sectors.  The nested guest turns
# the write cache off (cache_type "write through"), runs fio randwrite
# with crc32c verify and reports what it sees.  Checks:
#   - the nested fio verify passes (bytes really move through vhost_blk);
#   - the nested guest kept "write through", and the outer disk completed
#     flushes during the run: in writethrough mode the nested guest sends
#     no FLUSH at all, so those are vhost_blk making every write durable
#     (VHOST_BLK_SET_WRITE_CACHE 0 from the device);
#   - the nested disk's logical block size is the backing's 4096 (BLKSSZGET);
#   - the nested disk's serial is the one given to the device;
#   - it offers DISCARD and WRITE_ZEROES, and the discard job passes on it
#     (blkdiscard -z reads back as zeros, blkdiscard succeeds);
#   - a second disk, readonly=on, is read-only in the nested guest, reads,
#     and refuses a write;
#   - no BUG/WARNING/Oops in the outer guest's kernel log.
# Nested TCG is slow: the run takes about 2 minutes here (figures in
# docs/qemu-fork.md); the time is printed.
#
# Skips (exit 0) when the patched QEMU is not built or the tree has no
# scripts/build-kmod.sh.
#
# Environment (besides lib.sh's):
#   VHOST_BLK_QEMU_FORK   the patched binary (default build/qemu/qemu-system-x86_64)
#   VB_BUILD_KMOD         the module build script (default scripts/build-kmod.sh)
#   VB_NESTED_CONTRAST=1  also run the nested guest with its write cache on
#                         and check that the outer disk then sees no flush
#                         (another ~4 minutes; not part of the CI run)
set -u
. "$(dirname "$0")/lib.sh"

FORK_QEMU=${VHOST_BLK_QEMU_FORK:-$VB_ROOT/build/qemu/qemu-system-x86_64}
KMOD=${VB_BUILD_KMOD:-$VB_ROOT/scripts/build-kmod.sh}
[ -x "$FORK_QEMU" ] || vb_skip_all "patched QEMU not built (scripts/build-qemu.sh)"
[ -x "$KMOD" ] || vb_skip_all "no scripts/build-kmod.sh in this tree"
# The outer guest runs on the distribution's QEMU; only the nested one
# runs the fork.
unset VHOST_BLK_QEMU

vb_setup
echo "# qemu (nested): $FORK_QEMU"

if ! mods=$("$KMOD" --guest-modules 2> "$VB_TMP/kmod.log"); then
    sed 's/^/#   /' "$VB_TMP/kmod.log" | tail -n 20
    vb_bail "scripts/build-kmod.sh --guest-modules failed"
fi
margs=()
for m in $mods; do
    margs+=(--module "$m")
done
if ! assets=$("$VB_ROOT/scripts/guest/build-nested.sh" --qemu "$FORK_QEMU" \
                  "${margs[@]}" 2> "$VB_TMP/nested.log"); then
    sed 's/^/#   /' "$VB_TMP/nested.log" | tail -n 20
    vb_bail "scripts/guest/build-nested.sh failed"
fi
echo "# nested assets: $assets ($(sed -n 's/^initramfs_bytes=//p' "$assets/info") byte initramfs)"

img=$(vb_mkimg outer 64M)
roimg=$(vb_mkimg outer-ro 4M)
start=$(date +%s)
vb_check "nested guest on vhost-pci-blk-pci,drive= (vhost_blk.ko): fio randwrite + crc32c verify" \
    vb_guest -a "$assets" -m 1536M -c 2 -j nested -t 900 \
        vbnmode=kernel vbnjob=fio-cache vbnserial=vbnested01 vbnro=vdb \
        vbnargs=vbwce=0+vbsize=4M+vbbs=16k+vbinfo=1+vbthendiscard=1+vboffset=8M+vblen=256K+vbrodev=vdb -- \
        -drive "if=none,id=od0,file=$img,format=raw,cache=none,aio=native" \
        -device virtio-blk-pci,drive=od0,num-queues=1,logical_block_size=4096,physical_block_size=4096 \
        -drive "if=none,id=od1,file=$roimg,format=raw,cache=none,aio=native" \
        -device virtio-blk-pci,drive=od1,num-queues=1
echo "# outer guest run: $(( $(date +%s) - start )) s; nested QEMU run: $(vb_info_get nested_secs || echo ?) s"
vb_check_info "nested guest kept its write cache off (cache_type write through)" \
    nested_cache_type write_through
flushes=$(vb_info_get outer_flushes || echo 0)
echo "# outer disk during the nested run: $(vb_info_get outer_writes || echo ?) writes, $flushes flushes"
vb_check "writethrough reached the backing: the outer disk completed flushes ($flushes)" \
    test "$flushes" -gt 0
vb_check_info "nested disk's logical block size is the backing's (4096)" \
    nested_logical_block_size 4096
vb_check_info "nested disk's serial is the device's serial= (vbnested01)" \
    nested_serial vbnested01
dmax=$(vb_info_get nested_discard_max_bytes || echo 0)
zmax=$(vb_info_get nested_write_zeroes_max_bytes || echo 0)
vb_check "nested disk offers DISCARD and WRITE_ZEROES (max bytes $dmax, $zmax)" \
    test "$dmax" -gt 0 -a "$zmax" -gt 0
vb_check_info "nested WRITE_ZEROES: the zeroed half reads back as zeros, the rest unchanged" \
    nested_write_zeroes ok
vb_check_info "nested DISCARD (blkdiscard) succeeds" nested_discard ok
vb_check_info "readonly=on drive: the nested guest sees a read-only disk" \
    nested_rodev_ro 1
vb_check_info "readonly=on drive: it reads through vhost_blk" nested_rodev_read ok
vb_check_info "readonly=on drive: a write to it is refused" nested_rodev_write refused

if [ "${VB_NESTED_CONTRAST:-0}" = 1 ]; then
    img=$(vb_mkimg outer-wb 64M)
    vb_check "contrast: nested guest in write back, fio randwrite + crc32c verify" \
        vb_guest -a "$assets" -m 1536M -c 2 -j nested -t 900 \
            vbnmode=kernel vbnjob=fio-cache vbnargs=vbwce=1+vbsize=4M+vbbs=16k -- \
            -drive "if=none,id=od0,file=$img,format=raw,cache=none,aio=native" \
            -device virtio-blk-pci,drive=od0,num-queues=1,logical_block_size=4096,physical_block_size=4096
    flushes=$(vb_info_get outer_flushes || echo x)
    echo "# write back: $(vb_info_get outer_writes || echo ?) writes, $flushes flushes; nested QEMU run: $(vb_info_get nested_secs || echo ?) s"
    vb_check "contrast: with the write cache on, no flush reaches the outer disk ($flushes)" \
        test "$flushes" = 0
fi

vb_done
