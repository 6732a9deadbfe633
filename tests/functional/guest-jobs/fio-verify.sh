# SPDX-License-Identifier: GPL-2.0-or-later
# Guest job: fio write + read-back verification on /dev/$vbdev (sourced by /init).
#   vbrw=randwrite    fio rw= (write, randwrite, rw, randrw, read, randread)
#   vbsize=32M        bytes per fio job
#   vbbs=4k           block size
#   vbiodepth=16      queue depth
#   vbnumjobs=1       fio jobs; job N works on [N*vbsize, (N+1)*vbsize)
#   vbengine=libaio   fio ioengine
#   vbverify=crc32c   verify= (none disables verification)
#   vbverifyonly=0    1: only read back and verify what an earlier run with
#                     the same parameters wrote (data survived a restart)
#   vbruntime=        optional time limit in seconds (time_based off)
#   vbfioargs=        extra fio options separated by '+', e.g.
#                     vbfioargs=--rwmixread=30+--verify_backlog=64
#   vbexpectfail=0    1: pass only if fio fails (e.g. writing a read-only disk)
#   vbinfo=0          1: afterwards report what device-info reports (per-queue
#                     interrupts then show which hw queues fio used)
rw=${vbrw:-randwrite}
size=${vbsize:-32M}
verify=${vbverify:-crc32c}
set -- --name=vbtest --filename="/dev/$vbdev" --direct=1 \
    --ioengine="${vbengine:-libaio}" --rw="$rw" --bs="${vbbs:-4k}" \
    --iodepth="${vbiodepth:-16}" --size="$size" \
    --numjobs="${vbnumjobs:-1}" --offset_increment="$size" \
    --group_reporting=1
if [ "$verify" != none ]; then
    set -- "$@" --verify="$verify" --verify_fatal=1 --do_verify=1
    [ "${vbverifyonly:-0}" = 1 ] && set -- "$@" --verify_only=1
fi
[ -n "${vbruntime:-}" ] && set -- "$@" --runtime="$vbruntime"
if [ -n "${vbfioargs:-}" ]; then
    for a in $(echo "$vbfioargs" | tr '+' ' '); do set -- "$@" "$a"; done
fi
vb_log "fio $*"
fio "$@"
st=$?
vb_info fio_status "$st"
if [ "${vbexpectfail:-0}" = 1 ]; then
    [ "$st" -ne 0 ] || vb_fail "fio succeeded but was expected to fail"
    return 0
fi
[ "$st" -eq 0 ] || vb_fail "fio exited with status $st"
[ "${vbinfo:-0}" = 1 ] && . /jobs/device-info.sh
return 0
