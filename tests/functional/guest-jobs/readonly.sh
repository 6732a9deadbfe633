# SPDX-License-Identifier: GPL-2.0-or-later
# Guest job: a read-only disk reads fine and refuses writes (sourced by /init).
# Checks /sys/block/$vbdev/ro is 1, a direct read works, and a direct write
# fails, also with the block layer's ro flag cleared (so the request reaches
# the device and the device itself must reject it).
[ "$(cat /sys/block/$vbdev/ro)" = 1 ] || vb_fail "/sys/block/$vbdev/ro is not 1"
dd if=/dev/$vbdev of=/dev/null bs=4096 count=16 iflag=direct 2>/dev/null ||
    vb_fail "read from the read-only disk failed"
if dd if=/dev/zero of=/dev/$vbdev bs=4096 count=1 oflag=direct conv=notrunc 2>/dev/null; then
    vb_fail "write to the read-only disk succeeded"
fi
blockdev --setrw /dev/$vbdev 2>/dev/null && vb_log "block layer ro flag cleared"
if dd if=/dev/zero of=/dev/$vbdev bs=4096 count=1 oflag=direct conv=notrunc 2>/dev/null; then
    vb_fail "write with the ro flag cleared reached the disk and succeeded"
fi
vb_info readonly ok
return 0
