# SPDX-License-Identifier: GPL-2.0-or-later
# Nested guest job /jobs/fio-cache.sh (added to the nested guest's initramfs
# by scripts/guest/build-nested.sh, sourced by /init): switch the disk's
# write cache the way a user does (virtio-blk's cache_type attribute, which
# writes the config space's writeback byte), check that the device took it,
# then run the fio-verify job, and with vbthendiscard=1 the discard job
# (WRITE_ZEROES and DISCARD; give it a range of its own with vboffset=).
#   vbwce=0   write through (0) or write back (1)
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
. /jobs/fio-verify.sh
if [ "${vbthendiscard:-0}" = 1 ]; then
    . /jobs/discard.sh
fi
return 0
