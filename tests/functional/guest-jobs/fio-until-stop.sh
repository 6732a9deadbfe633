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
#   vbstopdev=NAME    disk that holds the stop block (default $vbdev), for
#                     a disk the host cannot write itself (an RBD image the
#                     back-end holds the exclusive lock of): a second disk
#   vbmaxpasses=500   give up (FAIL) after this many passes
#   vbfioargs=        extra fio options separated by '+', e.g.
#                     vbfioargs=--verify_backlog=64 (verify while writing)
#   vbheldread=OFF:LEN  first read LEN bytes at byte offset OFF (M suffix
#                     allowed) with O_DIRECT and report their md5sum as
#                     heldread_md5; the host holds that read back in the
#                     back-end and migrates meanwhile (the read's data
#                     reaches guest memory only while the VM stops)
#   vbgooff=61M       with vbheldread: wait until the 4 KiB block at this
#                     byte offset starts with "VBGO" before that read
size=${vbsize:-16M}
stopoff=${vbstopoff:-60M}
tobytes() {
    case $1 in
        *M) echo $(( ${1%M} * 1048576 )) ;;
        *) echo "$1" ;;
    esac
}
# marker_at OFFSET [DISK]: the first 6 bytes of the 4 KiB block at OFFSET
marker_at() {
    dd if="/dev/${2:-$vbdev}" bs=4096 skip=$(( $(tobytes "$1") / 4096 )) count=1 \
        iflag=direct 2>/dev/null | head -c 6
}
if [ -n "${vbheldread:-}" ]; then
    hoff=$(tobytes "${vbheldread%%:*}")
    hlen=$(tobytes "${vbheldread#*:}")
    vb_log "waiting for go"
    until [ "$(marker_at "${vbgooff:-61M}")" = VBGO ]; do
        usleep 200000
    done
    vb_log "held read of $hlen bytes at $hoff"
    sum=$(dd if="/dev/$vbdev" bs="$hlen" skip=$((hoff / hlen)) count=1 \
          iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
    vb_info heldread_md5 "$sum"
fi
extra=
[ -n "${vbfioargs:-}" ] && extra=$(echo "$vbfioargs" | tr '+' ' ')
pass=0
while :; do
    pass=$((pass + 1))
    vb_log "fio pass $pass"
    # shellcheck disable=SC2086 # $extra: one word per option
    fio --name=vbtest --filename="/dev/$vbdev" --direct=1 --ioengine=libaio \
        --rw=randwrite --bs="${vbbs:-4k}" --iodepth="${vbiodepth:-8}" \
        --size="$size" --randseed="$pass" --verify=crc32c --verify_fatal=1 \
        --do_verify=1 --group_reporting=1 $extra > /tmp/fio.out 2>&1
    st=$?
    if [ "$st" -ne 0 ]; then
        cat /tmp/fio.out
        vb_fail "fio pass $pass exited with status $st"
    fi
    [ "$(marker_at "$stopoff" "${vbstopdev:-$vbdev}")" = VBSTOP ] && break
    [ "$pass" -ge "${vbmaxpasses:-500}" ] &&
        vb_fail "no stop marker after $pass passes"
done
grep -E 'err=|WRITE: bw=|READ: bw=' /tmp/fio.out
vb_info passes "$pass"
return 0
