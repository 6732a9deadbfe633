# SPDX-License-Identifier: GPL-2.0-or-later
# Guest job: DISCARD and WRITE_ZEROES on /dev/$vbdev (sourced by /init).
# Fills a range with a pattern, zeroes its first half (util-linux
# blkdiscard -z: BLKZEROOUT, sent as WRITE_ZEROES when the device offers it),
# checks that half reads back as zeros and the other half is untouched, then
# discards the whole range (blkdiscard) and checks the command succeeded.
#   vboffset=1M       start of the range (bytes, multiple of 4k)
#   vblen=4M          length of the range
#   vbdiscard=1       0: skip the plain discard step
b=$((1024 * 1024))
parse() { case $1 in *M) echo $(( ${1%M} * b ));; *K|*k) echo $(( ${1%[Kk]} * 1024 ));; *) echo "$1";; esac; }
off=$(parse "${vboffset:-1M}")
len=$(parse "${vblen:-4M}")
half=$((len / 2))
dev=/dev/$vbdev
# Full paths: busybox sh runs its own applets before anything on PATH.
# A 4k block of 0xa5 bytes, repeated over the range.
dd if=/dev/zero bs=4096 count=1 2>/dev/null | tr '\000' '\245' > /tmp/pat
# Double it up to the range length (few forks: they are slow under TCG).
cp /tmp/pat /tmp/range
while [ "$(stat -c %s /tmp/range)" -lt "$len" ]; do
    cat /tmp/range /tmp/range > /tmp/range2 && mv /tmp/range2 /tmp/range
done
truncate -s "$len" /tmp/range
dd if=/tmp/range of=$dev bs=4096 seek=$((off / 4096)) oflag=direct conv=notrunc 2>/dev/null ||
    vb_fail "pattern write failed"
vb_log "blkdiscard -z -o $off -l $half"
/usr/sbin/blkdiscard -z -o "$off" -l "$half" "$dev" || vb_fail "blkdiscard -z (write zeroes) failed"
dd if=$dev of=/tmp/got bs=4096 skip=$((off / 4096)) count=$((len / 4096)) iflag=direct 2>/dev/null ||
    vb_fail "read back failed"
[ "$(head -c "$half" /tmp/got | tr -d '\000' | wc -c)" -eq 0 ] ||
    vb_fail "zeroed range does not read back as zeros"
[ "$(tail -c "$half" /tmp/got | tr -d '\245' | wc -c)" -eq 0 ] ||
    vb_fail "data after the zeroed range changed"
vb_info write_zeroes ok
if [ "${vbdiscard:-1}" = 1 ]; then
    vb_log "blkdiscard -o $off -l $len"
    /usr/sbin/blkdiscard -o "$off" -l "$len" "$dev" || vb_fail "blkdiscard failed"
    vb_info discard ok
fi
return 0
