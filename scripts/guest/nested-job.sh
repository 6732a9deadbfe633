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
#   vbnmigrate=0        N > 0: live-migrate the nested VM N times while its
#                       job runs (use vbnjob=fio-until-stop): each time a
#                       second QEMU with the same devices waits with
#                       -incoming on a unix socket, the running one migrates
#                       to it (HMP over a pipe chardev) and quits; then this
#                       job writes the nested job's stop marker
#                       (vbnstopoff=60M, as fio-until-stop's vbstopoff) into
#                       /dev/$vbdev and the last QEMU's guest must finish
#                       its fio pass, verify and PASS there
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

append="console=ttyS0 quiet panic=-1 cryptomgr.notests mitigations=off no_timer_check"
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

# ------------------------------------------------------------ live migration
if [ "${vbnmigrate:-0}" -gt 0 ]; then
    # qemu_start NAME [ARGS]: the nested QEMU in the background, its serial
    # console in /tmp/NAME.log, HMP on the pipe /tmp/NAME.mon.{in,out}
    # (what it prints collects in /tmp/NAME.hmp); sets QPID
    qemu_start() {
        local name=$1
        shift
        rm -f /tmp/$name.mon.in /tmp/$name.mon.out
        mkfifo /tmp/$name.mon.in /tmp/$name.mon.out
        cat /tmp/$name.mon.out > /tmp/$name.hmp &
        $N/bin/qemu-system-x86_64 -accel tcg,tb-size=128 -machine q35 \
            -cpu max -smp 1 -m "${vbnmem:-256M}" -nodefaults -display none \
            -no-reboot -L $N/fw -kernel $N/vmlinux -initrd $N/initramfs.img \
            -append "$append" -serial file:/tmp/$name.log \
            -drive "$drive" -device "$dev" $rodisk \
            -chardev pipe,id=hmp,path=/tmp/$name.mon -mon chardev=hmp \
            "$@" > /tmp/$name.err 2>&1 &
        QPID=$!
    }
    # hmp NAME CMD: one HMP command to the running QEMU $curpid (a write to
    # the pipe of a QEMU that is gone would block)
    hmp() {
        kill -0 "$curpid" 2>/dev/null || return 1
        echo "$2" > /tmp/$1.mon.in
    }
    # wait_for SECONDS WHAT CMD...: poll CMD every 0.5 s
    wait_for() {
        local n=0 limit=$(( $1 * 2 )) what=$2
        shift 2
        until "$@"; do
            n=$((n + 1))
            [ $n -ge $limit ] && return 1
            usleep 500000
        done
        return 0
    }
    passes_in() { tr -d '\r' < /tmp/$1.log 2>/dev/null | grep -c '^VBTEST-LOG: fio pass'; }
    has_pass() { [ "$(passes_in $1)" -ge 1 ]; }
    mig_status() {
        hmp $1 "info migrate"
        usleep 300000
        sed -n 's/^Migration status: *//p' /tmp/$1.hmp | tr -d '\r' | tail -n 1
    }
    mig_done() {
        kill -0 "$curpid" 2>/dev/null || { st="source QEMU gone"; return 0; }
        st=$(mig_status $1)
        case $st in
            completed) return 0 ;;
            failed*|cancelled*) return 0 ;;
        esac
        return 1
    }
    nmig=$vbnmigrate
    t0=$(cut -d' ' -f1 /proc/uptime)
    cur=q0
    qemu_start $cur
    curpid=$QPID
    i=1
    while [ $i -le $nmig ]; do
        next=q$i
        qemu_start $next -incoming unix:/tmp/$next.sock
        npid=$QPID
        wait_for 120 "$next's socket" test -S /tmp/$next.sock ||
            vb_fail "migration $i: the destination QEMU did not listen ($(cat /tmp/$next.err))"
        # the nested job is running its fio passes on the current QEMU
        wait_for 900 "fio on $cur" has_pass $cur ||
            vb_fail "migration $i: no fio pass started on $cur: $(tail -n 5 /tmp/$cur.log)"
        before=$(passes_in $cur)
        tm0=$(cut -d' ' -f1 /proc/uptime)
        vb_log "migration $i: $cur -> $next, after $before fio pass(es) started on $cur (t=${tm0}s)"
        hmp $cur "migrate_set_parameter downtime-limit 2000"
        hmp $cur "migrate -d unix:/tmp/$next.sock"
        wait_for 900 "migration $i" mig_done $cur ||
            vb_fail "migration $i did not end: $(mig_status $cur)"
        kill -0 "$curpid" 2>/dev/null && st=$(mig_status $cur)
        tm1=$(cut -d' ' -f1 /proc/uptime)
        vb_info mig${i}_status "$st"
        vb_info mig${i}_secs "$(awk -v a="$tm0" -v b="$tm1" 'BEGIN { printf "%.1f", b - a }')"
        vb_info mig${i}_passes_before "$before"
        sed -n '/^Migration status/,/^$/p' /tmp/$cur.hmp | tr -d '\r' | tail -n 25 |
            sed "s/^/hmp-$cur: /"
        [ "$st" = completed ] ||
            vb_fail "migration $i: status $st; source: $(tail -n 3 /tmp/$cur.err | tr '\n' ' '); destination: $(tail -n 3 /tmp/$next.err | tr '\n' ' ')"
        tr -d '\r' < /tmp/$cur.log | grep -q '^VBTEST-RESULT' &&
            vb_fail "migration $i: the nested job ended on the source first"
        vb_log "migration $i: $st after $(awk -v a="$tm0" -v b="$tm1" 'BEGIN { printf "%.1f", b - a }') s"
        hmp $cur quit
        wait_for 60 "$cur to quit" sh -c "! kill -0 $curpid 2>/dev/null" ||
            vb_fail "migration $i: the source QEMU did not quit"
        cur=$next
        curpid=$npid
        i=$((i + 1))
    done
    vb_log "writing the stop marker; the nested job ends on $cur"
    # the job ends after the pass running now: it verifies on the last QEMU
    { printf VBSTOP; head -c 4090 /dev/zero; } > /tmp/stop.blk
    so=${vbnstopoff:-60M}
    so=$(( ${so%M} * 1048576 / 4096 ))
    dd if=/tmp/stop.blk of=/dev/$vbdev bs=4096 seek=$so count=1 oflag=direct conv=notrunc 2>/dev/null ||
        vb_fail "writing the stop marker into /dev/$vbdev failed"
    wait_for "$ntimeout" "the nested guest to finish" sh -c "! kill -0 $curpid 2>/dev/null"
    t1=$(cut -d' ' -f1 /proc/uptime)
    vb_info nested_secs "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"
    vb_info nested_migrations "$nmig"
    for q in $(ls /tmp/q*.log | sort); do
        n=${q#/tmp/}
        n=${n%.log}
        vb_info "passes_on_$n" "$(passes_in $n)"
        sed 's/^/nested-qemu-'"$n"': /' /tmp/$n.err
    done
    tr -d '\r' < /tmp/$cur.log | grep -a -E 'VBTEST|err=|IOPS=|BW=|[Vv]erify|BUG:|Call Trace|I/O error' |
        sed "s/^/nested-$cur: /"
    tr -d '\r' < /tmp/$cur.log | sed -n 's/^VBTEST-INFO: /nested_/p' | while IFS= read -r kv; do
        vb_info "${kv%%=*}" "${kv#*=}"
    done
    dmesg | grep -a -E 'vhost|BUG:|WARNING:|Oops|Call Trace|lockup|blocked for more' | sed 's/^/outer-dmesg: /'
    if dmesg | grep -a -q -E 'BUG:|WARNING:|Oops|KASAN|lockup|blocked for more'; then
        vb_fail "this guest's kernel log has a BUG, WARNING, Oops, KASAN, lockup or hung-task line"
    fi
    tr -d '\r' < /tmp/$cur.log | grep -q '^VBTEST-RESULT: PASS' ||
        vb_fail "the nested guest did not pass on the last destination: $(tr -d '\r' < /tmp/$cur.log | grep -a '^VBTEST-RESULT' | tail -n 1)"
    vb_log "nested guest passed after $nmig migration(s)"
    return 0
fi
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
