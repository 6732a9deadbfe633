# SPDX-License-Identifier: GPL-2.0-or-later
# Guest job: fio write + crc32c verify passes on /dev/$vbdev, one after the
# other, until the host writes a stop marker (sourced by /init).  For tests
# that act on the VM while the job runs (live migration) without guessing
# how long the job takes: the job is still running whatever the host does,
# and every pass, the last one included, verifies what it wrote.
#   vbsize=16M        bytes fio writes and verifies per pass, from offset 0
#   vbbs=4k           block size
#   vbiodepth=8       queue depth
#   vbstopoff=60M     byte offset of the 4 KiB stop block (outside fio's
#                     range): the job ends after the pass during which the
#                     block starts with "VBSTOP"
#   vbmaxpasses=500   give up (FAIL) after this many passes
size=${vbsize:-16M}
stopoff=${vbstopoff:-60M}
case $stopoff in
    *M) stopblk=$(( ${stopoff%M} * 256 )) ;;
    *) stopblk=$(( stopoff / 4096 )) ;;
esac
pass=0
while :; do
    pass=$((pass + 1))
    vb_log "fio pass $pass"
    fio --name=vbtest --filename="/dev/$vbdev" --direct=1 --ioengine=libaio \
        --rw=randwrite --bs="${vbbs:-4k}" --iodepth="${vbiodepth:-8}" \
        --size="$size" --randseed="$pass" --verify=crc32c --verify_fatal=1 \
        --do_verify=1 --group_reporting=1 > /tmp/fio.out 2>&1
    st=$?
    if [ "$st" -ne 0 ]; then
        cat /tmp/fio.out
        vb_fail "fio pass $pass exited with status $st"
    fi
    marker=$(dd if="/dev/$vbdev" bs=4096 skip="$stopblk" count=1 \
             iflag=direct 2>/dev/null | head -c 6)
    [ "$marker" = VBSTOP ] && break
    [ "$pass" -ge "${vbmaxpasses:-500}" ] &&
        vb_fail "no stop marker after $pass passes"
done
grep -E 'err=|WRITE: bw=|READ: bw=' /tmp/fio.out
vb_info passes "$pass"
return 0
