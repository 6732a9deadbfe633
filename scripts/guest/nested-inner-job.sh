# SPDX-License-Identifier: GPL-2.0-or-later
# Nested guest job /jobs/fio-cache.sh (added to the nested guest's initramfs
# by scripts/guest/build-nested.sh, sourced by /init): switch the disk's
# write cache the way a user does (virtio-blk's cache_type attribute, which
# writes the config space's writeback byte), check that the device took it,
# then run the fio-verify job, and with vbthendiscard=1 the discard job
# (WRITE_ZEROES and DISCARD; give it a range of its own with vboffset=).
#   vbwce=0   write through (0) or write back (1)
#   vbrodev=  a read-only disk (e.g. vdb): checks that it is read-only, that
#             it reads, and that a write to it is refused
# Facts reported: cache_type (write_through / write_back), then those of
# fio-verify (and device-info with vbinfo=1).
case ${vbwce:-1} in
    0) want="write through" ;;
    1) want="write back" ;;
    *) vb_fail "vbwce=$vbwce: give 0 (write through) or 1 (write back)" ;;
esac
f=/sys/block/$vbdev/cache_type
[ -f "$f" ] || vb_fail "no $f (is VIRTIO_BLK_F_CONFIG_WCE offered?)"
echo "$want" > "$f" || vb_fail "writing '$want' to $f failed"
got=$(cat "$f")
vb_info cache_type "$(echo "$got" | tr ' ' _)"
[ "$got" = "$want" ] || vb_fail "$f reads '$got' after '$want' was written (the device kept its mode)"
vb_log "cache_type: $got"
if [ -n "${vbrodev:-}" ]; then
    vb_wait_dev "$vbrodev" 20 || vb_fail "no /dev/$vbrodev"
    vb_info rodev_ro "$(cat /sys/block/$vbrodev/ro)"
    if dd if=/dev/$vbrodev of=/dev/null bs=4096 count=16 iflag=direct 2>/dev/null; then
        vb_info rodev_read ok
    else
        vb_info rodev_read failed
    fi
    if dd if=/dev/zero of=/dev/$vbrodev bs=4096 count=1 oflag=direct conv=notrunc 2>/dev/null; then
        vb_info rodev_write accepted
    else
        vb_info rodev_write refused
    fi
fi
. /jobs/fio-verify.sh
if [ "${vbthendiscard:-0}" = 1 ]; then
    . /jobs/discard.sh
fi
return 0
