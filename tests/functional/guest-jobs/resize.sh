# SPDX-License-Identifier: GPL-2.0-or-later
# Guest job: the disk grows while fio runs (sourced by /init).  The host
# resizes the export (QMP block_resize) once it sees "VBTEST-LOG:
# resize-ready" on the console.
#   vbsize=16M        fio region at the start of the disk
#   vbruntime=20      fio runs this long (time based, verifying as it goes)
#   vbnewsize=BYTES   the size the host grows the disk to
#   vbwait=120        seconds to wait for the new size
# Reports size_before / size_after (sectors, from /sys/block/$vbdev/size),
# then writes and verifies 8M past the old end.
sysf=/sys/block/$vbdev/size
before=$(cat "$sysf")
vb_info size_before "$before"
[ -n "${vbnewsize:-}" ] || vb_fail "vbnewsize= is not set"
fio --name=vbgrow --filename="/dev/$vbdev" --direct=1 --ioengine=libaio \
    --rw=randwrite --bs=4k --iodepth=8 --size="${vbsize:-16M}" \
    --time_based --runtime="${vbruntime:-20}" --verify=crc32c \
    --verify_backlog=256 --verify_fatal=1 > /tmp/fio.out 2>&1 &
fiopid=$!
vb_log "resize-ready"
n=0
after=$before
while [ "$after" = "$before" ] && [ $n -lt $((${vbwait:-120} * 10)) ]; do
    usleep 100000
    after=$(cat "$sysf")
    n=$((n + 1))
done
vb_info size_after "$after"
if kill -0 "$fiopid" 2>/dev/null; then
    vb_info fio_running_at_resize 1
else
    vb_info fio_running_at_resize 0
fi
wait "$fiopid"
st=$?
cat /tmp/fio.out
vb_info fio_status "$st"
[ "$st" -eq 0 ] || vb_fail "fio during the resize exited with status $st"
[ "$after" != "$before" ] || vb_fail "the disk did not grow within ${vbwait:-120} s"
[ $((after * 512)) -eq "$vbnewsize" ] ||
    vb_fail "the disk has $after sectors, expected $((vbnewsize / 512))"
# The new space works: write and verify 8M past the old end.
fio --name=vbnew --filename="/dev/$vbdev" --direct=1 --ioengine=libaio \
    --rw=write --bs=64k --iodepth=4 --offset=$((before * 512)) --size=8M \
    --verify=crc32c --verify_fatal=1 --do_verify=1 || \
    vb_fail "fio past the old end failed"
return 0
