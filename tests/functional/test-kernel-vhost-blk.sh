#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The vhost_blk kernel module, inside the test guest (the host cannot load
# modules): scripts/build-kmod.sh builds vhost_blk.ko for the guest kernel
# and fetches that kernel's own vhost.ko and vhost_iotlb.ko; this script
# appends them, with the static vhost-blk-bench and vhost-blk-kcheck, as a
# second cpio archive to the standard initramfs (Linux unpacks concatenated
# archives) and runs the guest job kernel-vhost-blk with a second virtio
# disk as the block-device backing and a third one with an ext4 file
# system (made here) for an O_DIRECT image file.  Inside: insmod, the static
# misc minor; vhost-blk-kcheck (GET_ID, FLUSH, DISCARD, WRITE_ZEROES
# contents, read-only, write cache, any descriptor layout, the DISCARD/
# WRITE_ZEROES limits with SET_BACKEND -1 and a killed owner's exit within
# 20 s, 25 hostile ring cases, 7 hostile VMM cases) on a file and on the
# block device (O_DIRECT: writethrough DISCARD/WRITE_ZEROES flush it;
# buffered: page-cache coherence of WRITE_ZEROES/DISCARD), on the ext4
# file (layouts, limits, a write waits for FIFREEZE's thaw);
# vhost-blk-bench in kernel mode, --verify randrw with sizes from
# 512 B to 64 KiB mixed in each run on 1 and 4 queues, and 4 KiB / 128 KiB
# runs, on both, and with a dirty log set; one kthread per queue, each in
# the owner's cgroup (cgroup v2, the owner in a child cgroup); read-only
# enforcement; rmmod; no Oops, BUG, WARNING, KASAN, hung-task or lockup
# line in dmesg.  On the host: the module's autoload aliases.
# Deterministic: nothing here depends on speed (waits have generous limits
# and only catch hangs; the 20 s bounds are against minutes).
set -u
. "$(dirname "$0")/lib.sh"
vb_setup

bench=$(vb_bin vhost-blk-bench) || vb_bail "vhost-blk-bench is not built in $VHOST_BLK_BUILD"
kcheck=$(vb_bin vhost-blk-kcheck) || vb_bail "vhost-blk-kcheck is not built in $VHOST_BLK_BUILD"
for b in "$bench" "$kcheck"; do
    case $(ldd "$b" 2>&1 || true) in
        *"not a dynamic executable"*) ;;
        *) vb_skip_all "$b is not static (sanitizer build?): it cannot run in the guest" ;;
    esac
done

mods=$("$VB_ROOT/scripts/build-kmod.sh" --guest-modules 2> "$VB_TMP/build-kmod.log") || {
    sed 's/^/#   /' "$VB_TMP/build-kmod.log"
    vb_bail "scripts/build-kmod.sh failed"
}
echo "# modules: $(echo $mods)"

# The payload: a second newc archive after the standard initramfs.
P=$VB_TMP/payload
mkdir -p "$P/kmod" "$P/usr/bin"
for m in $mods; do cp "$m" "$P/kmod/"; done
cp "$bench" "$kcheck" "$P/usr/bin/"
strip "$P/usr/bin/"* 2>/dev/null || true
A=$VB_TMP/assets
mkdir -p "$A"
ln -s "$VHOST_BLK_GUEST_ASSETS/vmlinux" "$A/vmlinux"
{ cat "$VHOST_BLK_GUEST_ASSETS/initramfs.img"
  (cd "$P" && find . -print0 | LC_ALL=C sort -z |
      cpio --null -o -H newc --quiet -R 0:0) | gzip -1n; } > "$A/initramfs.img"

# autoloading: the module names its static misc minor and its node
aliases=$(modinfo -F alias "$(echo "$mods" | tail -n1)" | sort | tr '\n' ' ')
vb_check_eq "module aliases for /dev/vhost-blk autoloading" "$aliases" \
    "char-major-10-243 devname:vhost-blk "

disk=$(vb_mkimg bdev 128M)
# an ext4 file system for an O_DIRECT image file and the freeze check
fsimg=$(vb_mkimg fs 256M)
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$fsimg" ||
    vb_bail "mkfs.ext4 failed (e2fsprogs)"
vb_check "guest job kernel-vhost-blk runs" vb_guest -a "$A" -j kernel-vhost-blk \
    -t "${VB_KMOD_TIMEOUT:-1800}" -m 1G vbdev=vda vbfsdev=vdb "$@" -- \
    -drive "file=$disk,if=none,id=kd0,format=raw,cache=none,aio=threads,discard=unmap" \
    -device virtio-blk-pci,drive=kd0 \
    -drive "file=$fsimg,if=none,id=kd1,format=raw,cache=none,aio=threads" \
    -device virtio-blk-pci,drive=kd1

vb_check_info "module loads (insmod vhost_iotlb, vhost, vhost_blk)" insmod pass
vb_check_info "kcheck on a file (functional + hostile)" kcheck_file pass
vb_check_info "kcheck on a block device (functional + hostile)" kcheck_bdev pass
for b in file bdev fsfile; do
    vb_check_info "kcheck dirty-log on the $b: every page the module wrote is marked, nothing else" \
        kcheck_${b}_dirty_log 1
done
vb_check_info "kcheck on a buffered block device (page-cache coherence, layouts)" \
    kcheck_bdev_buffered pass
vb_check_info "kcheck on an O_DIRECT file on ext4 (layouts, limits, freeze)" \
    kcheck_fsfile pass
vb_check_info "/dev/vhost-blk is misc 10:243 (hex a:f3)" misc_dev a:f3
n=$(vb_info_get kcheck_file_hostile_ok || echo 0)
if [ "$n" -ge 15 ]; then
    vb_ok "at least 15 hostile ring cases pass on the file ($n)"
else
    vb_not_ok "at least 15 hostile ring cases pass on the file" "got $n"
fi
for b in file bdev; do
    for q in 1 4; do
        vb_check_info "bench --verify randrw, sizes 512 B-64 KiB mixed, $q queue(s), $b" \
            bench_${b}_q${q}_mixed pass
    done
    if vb_info_get bench_${b}_fixed > /dev/null; then
        vb_check_info "bench --verify randrw 4 KiB and 128 KiB, 2 queues, $b" bench_${b}_fixed pass
    fi
done
for b in file bdev; do
    vb_check_info "bench --verify with a dirty log set (VHOST_F_LOG_ALL on the running rings), $b" \
        bench_${b}_dirty_log pass
done
vb_check_info "4 queues are served by 4 queue threads (vblk-PID-q0..3)" queue_threads 4
vb_check_info "the 4 queue threads are in the owner's cgroup (0::/vbowner)" \
    queue_threads_in_owner_cgroup 4
vb_check_info "read-only image: reads work" bench_ro_read pass
vb_check_info "read-only image: writes fail" bench_ro_write_refused pass
vb_check_info "rmmod vhost_blk (and vhost, vhost_iotlb)" rmmod pass
vb_check_info "/dev/vhost-blk gone after rmmod" dev_gone pass
vb_check_info "no Oops/BUG/WARNING/KASAN/hung-task/lockup line in the guest's dmesg" dmesg_bad 0
vb_done
