# SPDX-License-Identifier: GPL-2.0-or-later
# Outer guest job /jobs/nested.sh (shipped by scripts/guest/build-nested.sh,
# sourced by /init): run the patched QEMU inside this guest and boot a
# nested TCG guest from /nested, whose disk is backed by this guest's
# /dev/$vbdev; the nested guest runs a job of its own (fio-verify by
# default) and this job passes when the nested one does.
#   vbnmode=virtio   nested disk: virtio  = QEMU's own virtio-blk-pci
#                                 kernel  = vhost-pci-blk-pci,drive= served
#                                           by vhost_blk.ko (loads the modules)
#   vbnjob=fio-verify   job of the nested guest
#   vbnargs=            more key=value words for the nested guest, '+'
#                       separated (vbnargs=vbsize=8M+vbbs=4k)
#   vbnqueues=1         num-queues of the nested disk
#   vbncache=none       cache= of the nested drive (none: O_DIRECT)
#   vbnlbs=             logical_block_size= of vhost-pci-blk-pci (kernel)
#   vbntimeout=         nested guest watchdog (default: this job's vbtimeout - 60)
#   vbnmem=256M         nested guest RAM
#   vbnserial=          serial= of vhost-pci-blk-pci (kernel)
#   vbnro=              a second disk of this guest (e.g. vdb) given to the
#                       nested guest read-only (readonly=on), as its vdb
# Facts reported: nested_secs (wall time of the nested QEMU run), nested_rc,
# outer_writes and outer_flushes (requests this guest's /dev/$vbdev
# completed during the run: with the nested disk in writethrough mode,
# vhost_blk's durable writes show up as flushes here), and every fact of
# the nested guest's job as nested_KEY.
N=/nested
mode=${vbnmode:-virtio}
njob=${vbnjob:-fio-verify}
nq=${vbnqueues:-1}
ntimeout=${vbntimeout:-$(( vbtimeout > 120 ? vbtimeout - 60 : 60 ))}
[ -x $N/bin/qemu-system-x86_64 ] ||
    vb_fail "no $N/bin/qemu-system-x86_64: boot with scripts/guest/build-nested.sh's initramfs"

drive="if=none,id=nd0,file=/dev/$vbdev,format=raw,cache=${vbncache:-none}"
case $mode in
    virtio)
        dev="virtio-blk-pci,drive=nd0,num-queues=$nq"
        ;;
    kernel)
        for m in vhost_iotlb vhost vhost_blk; do
            [ -f "$N/modules/$m.ko" ] || vb_fail "no $N/modules/$m.ko"
            grep -q "^$m " /proc/modules ||
                insmod "$N/modules/$m.ko" || vb_fail "insmod $m.ko failed"
        done
        [ -c /dev/vhost-blk ] || vb_fail "vhost_blk loaded but no /dev/vhost-blk"
        dev="vhost-pci-blk-pci,drive=nd0,num-queues=$nq${vbnlbs:+,logical_block_size=$vbnlbs}${vbnserial:+,serial=$vbnserial}"
        ;;
    *) vb_fail "unknown vbnmode=$mode (virtio or kernel)" ;;
esac

append="console=ttyS0 quiet panic=-1 cryptomgr.notests mitigations=off"
append="$append vbjob=$njob vbtimeout=$ntimeout"
[ -n "${vbnargs:-}" ] && append="$append $(echo "$vbnargs" | tr '+' ' ')"
rodisk=
if [ -n "${vbnro:-}" ]; then
    [ -b "/dev/$vbnro" ] || vb_fail "vbnro=$vbnro: no /dev/$vbnro"
    case $mode in
        virtio) rodev=virtio-blk-pci,drive=nd1 ;;
        kernel) rodev=vhost-pci-blk-pci,drive=nd1 ;;
    esac
    rodisk="-drive if=none,id=nd1,file=/dev/$vbnro,format=raw,readonly=on,cache=none -device $rodev"
fi
vb_log "nested: -device $dev -drive $drive $rodisk ($append)"
# /sys/block/X/stat: field 5 writes completed, field 16 flushes completed.
stat0=$(cat /sys/block/$vbdev/stat)
t0=$(cut -d' ' -f1 /proc/uptime)
$N/bin/qemu-system-x86_64 -accel tcg -machine q35 -cpu max -smp 1 \
    -m "${vbnmem:-256M}" -nodefaults -display none -no-reboot -L $N/fw \
    -kernel $N/vmlinux -initrd $N/initramfs.img -append "$append" \
    -serial file:/tmp/nested.log -drive "$drive" -device "$dev" $rodisk \
    > /tmp/nested.err 2>&1
rc=$?
t1=$(cut -d' ' -f1 /proc/uptime)
stat1=$(cat /sys/block/$vbdev/stat)
vb_info outer_writes $(( $(echo $stat1 | cut -d' ' -f5) - $(echo $stat0 | cut -d' ' -f5) ))
vb_info outer_flushes $(( $(echo $stat1 | cut -d' ' -f16) - $(echo $stat0 | cut -d' ' -f16) ))
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
vb_info nested_rc "$rc"
vb_info nested_secs "$secs"
sed 's/^/nested-qemu: /' /tmp/nested.err
# The nested guest's markers and fio summary, prefixed so that the host
# does not take them for this guest's own.
tr -d '\r' < /tmp/nested.log | grep -a -E 'VBTEST|err=|IOPS=|BW=|[Vv]erify|BUG:|Call Trace|I/O error' |
    sed 's/^/nested: /'
tr -d '\r' < /tmp/nested.log | sed -n 's/^VBTEST-INFO: /nested_/p' | while IFS= read -r kv; do
    vb_info "${kv%%=*}" "${kv#*=}"
done
# This guest's kernel messages about the vhost modules (taint notes,
# vq_err reports), and any Oops or warning.
dmesg | grep -a -E 'vhost|BUG:|WARNING:|Oops|Call Trace' | sed 's/^/outer-dmesg: /'
if dmesg | grep -a -q -E 'BUG:|WARNING:|Oops|KASAN'; then
    vb_fail "this guest's kernel log has a BUG, WARNING, Oops or KASAN line (see outer-dmesg above)"
fi
[ "$rc" -eq 0 ] || vb_fail "nested QEMU exited with status $rc after ${secs}s"
tr -d '\r' < /tmp/nested.log | grep -q '^VBTEST-RESULT: PASS' ||
    vb_fail "nested guest did not pass after ${secs}s: $(tr -d '\r' < /tmp/nested.log | grep -a '^VBTEST-RESULT' | tail -n 1)"
vb_log "nested guest passed in ${secs}s"
return 0
