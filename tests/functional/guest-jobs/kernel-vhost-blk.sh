# SPDX-License-Identifier: GPL-2.0-or-later
# Guest job: the vhost_blk kernel module (sourced by /init).  Needs the
# payload tests/functional/test-kernel-vhost-blk.sh appends to the
# initramfs: /kmod/{vhost_iotlb,vhost,vhost_blk}.ko and the static
# /usr/bin/vhost-blk-bench and /usr/bin/vhost-blk-kcheck.
# Every step reports VBTEST-INFO key=pass|fail (and its output as
# VBTEST-LOG lines); the host asserts them.  /dev/$vbdev is the block
# device backing (O_DIRECT, and buffered for the page-cache checks); a 64
# MiB file on tmpfs (buffered: tmpfs has no O_DIRECT) is the file backing;
# /dev/$vbfsdev holds an ext4 file system (made by the host) with a 64 MiB
# image for O_DIRECT on a file and for the freeze check.
#   vbkquick=1   fewer bench runs
#   vbkonly=A,B  only the named kcheck cases on the block device
dev=/dev/$vbdev
fsdev=/dev/${vbfsdev:-vdb}

# step NAME CMD...: run CMD, report NAME=pass|fail with its output.
step() {
    local name=$1
    shift
    if "$@" > /tmp/step.out 2>&1; then
        vb_info "$name" pass
    else
        vb_info "$name" fail
    fi
    sed "s/^/VBTEST-LOG: $name: /" /tmp/step.out | tail -n 40
}
# step_fails NAME CMD...: NAME=pass when CMD fails.
step_fails() {
    local name=$1
    shift
    if "$@" > /tmp/step.out 2>&1; then
        vb_info "$name" fail
    else
        vb_info "$name" pass
    fi
    sed "s/^/VBTEST-LOG: $name: /" /tmp/step.out | tail -n 5
}
# kcheck NAME ARGS...: vhost-blk-kcheck; also reports NAME_cases and
# NAME_hostile_ok (hostile cases that passed).
kcheck() {
    local name=$1
    shift
    step "$name" /usr/bin/vhost-blk-kcheck --vhost-dev /dev/vhost-blk "$@"
    vb_info "${name}_hostile_ok" "$(grep -c '^ok hostile-' /tmp/step.out)"
    vb_info "${name}_not_ok" "$(grep -c '^not ok' /tmp/step.out)"
    vb_info "${name}_dirty_log" "$(grep -c '^ok dirty-log$' /tmp/step.out)"
}
bench() {
    /usr/bin/vhost-blk-bench --vhost-dev /dev/vhost-blk "$@"
}

mods_ok=1
for m in vhost_iotlb vhost vhost_blk; do
    insmod /kmod/$m.ko || { mods_ok=0; vb_log "insmod $m.ko failed"; }
done
[ -c /dev/vhost-blk ] || mods_ok=0
vb_info insmod "$([ $mods_ok = 1 ] && echo pass || echo fail)"
[ $mods_ok = 1 ] || return 0
# the static misc minor (10:243) that autoloading needs
vb_info misc_dev "$(stat -c %t:%T /dev/vhost-blk)"

truncate -s 64M /tmp/img

# vbkonly=CASE,CASE (diagnostics): only these kcheck cases, on the block
# device, then the kernel log check
if [ -n "${vbkonly:-}" ]; then
    kcheck kcheck_only --file "$dev" --block $(echo "$vbkonly" | tr , ' ')
    dmesg | grep -E 'Oops|BUG|WARNING|KASAN|Call Trace|hung_task|blocked for more than|lockup|LOCKUP' |
        sed 's/^/VBTEST-LOG: dmesg: /' | head -n 40
    return 0
fi

kcheck kcheck_file --file /tmp/img --buffered
kcheck kcheck_bdev --file "$dev" --block functional hostile writethrough-flush
# a buffered block device: the page cache stays coherent with WRITE_ZEROES
# and DISCARD, and any descriptor layout works
kcheck kcheck_bdev_buffered --file "$dev" --block --buffered zero-coherence \
    rw write-zeroes flush any-layout
# an O_DIRECT file on ext4: any layout, limits, and a write waits for a thaw
i=0
while [ ! -b "$fsdev" ] && [ $i -lt 200 ]; do usleep 100000; i=$((i + 1)); done
mkdir -p /mnt
if mount -t ext4 "$fsdev" /mnt && truncate -s 64M /mnt/img; then
    kcheck kcheck_fsfile --file /mnt/img rw flush write-zeroes discard \
        any-layout limits freeze dirty-log
    umount /mnt || vb_log "umount /mnt failed"
else
    vb_info kcheck_fsfile fail
    vb_log "cannot mount $fsdev (ext4) on /mnt"
fi

# bench --verify, randrw with mixed sizes inside each run (--bs 512
# --bs-max 64k: every request covers 1 to 128 random sectors), 1 and 4
# queues, then fixed 4 KiB and 128 KiB runs
v="--verify --rw randrw --ios 1500"
step bench_file_q1_mixed bench --file /tmp/img --buffered $v --bs 512 --bs-max 64k --queues 1 --iodepth 16
step bench_file_q4_mixed bench --file /tmp/img --buffered $v --bs 512 --bs-max 64k --queues 4 --iodepth 8 --seed 7
step bench_bdev_q1_mixed bench --file "$dev" $v --bs 512 --bs-max 64k --queues 1 --iodepth 16
step bench_bdev_q4_mixed bench --file "$dev" $v --bs 512 --bs-max 64k --queues 4 --iodepth 8 --seed 7
if [ "${vbkquick:-0}" != 1 ]; then
    step bench_file_fixed sh -c "for bs in 4k 128k; do
        /usr/bin/vhost-blk-bench --vhost-dev /dev/vhost-blk --file /tmp/img --buffered \
            $v --bs \$bs --queues 2 --iodepth 16 || exit 1; done"
    step bench_bdev_fixed sh -c "for bs in 4k 128k; do
        /usr/bin/vhost-blk-bench --vhost-dev /dev/vhost-blk --file $dev \
            $v --bs \$bs --queues 2 --iodepth 16 || exit 1; done"
fi

# dirty logging as a migrating VMM runs it (VHOST_F_LOG_ALL on the running
# rings): bench --verify with the log set, on both backings
step bench_file_dirty_log bench --file /tmp/img --buffered $v --bs 512 --bs-max 64k --queues 2 --iodepth 8 --size 16M --dirty-log
step bench_bdev_dirty_log bench --file "$dev" $v --bs 512 --bs-max 64k --queues 2 --iodepth 8 --size 16M --dirty-log

# one kthread per queue: 4 queues -> vblk-<pid>-q0..q3 while the bench runs,
# and the threads join the owner's cgroups: the bench runs in a child
# cgroup of a cgroup v2 hierarchy, and each queue thread must be there too
cg=/sys/fs/cgroup
[ -f $cg/cgroup.controllers ] || mount -t cgroup2 none $cg
mkdir -p $cg/vbowner
sh -c "echo \$\$ > $cg/vbowner/cgroup.procs && exec /usr/bin/vhost-blk-bench \
    --vhost-dev /dev/vhost-blk --file /tmp/img --buffered --queues 4 \
    --rw randread --runtime 120" > /dev/null 2>&1 &
bp=$!
n=0
i=0
while [ $i -lt 600 ] && kill -0 $bp 2>/dev/null; do
    n=$(cat /proc/[0-9]*/comm 2>/dev/null | grep -c "^vblk-$bp-q[0-3]$")
    [ "$n" -ge 4 ] && break
    usleep 100000
    i=$((i + 1))
done
vb_log "owner $bp: $(cat /proc/$bp/cgroup 2>/dev/null)"
incg=0
for d in /proc/[0-9]*; do
    case $(cat $d/comm 2>/dev/null) in
        vblk-$bp-q[0-3]|vhost-$bp)
            c=$(cat $d/cgroup 2>/dev/null)
            vb_log "$(cat $d/comm) (${d#/proc/}): $c"
            case $(cat $d/comm) in
                vblk-*) [ "$c" = "0::/vbowner" ] && incg=$((incg + 1)) ;;
            esac
            ;;
    esac
done
kill $bp 2>/dev/null
wait $bp 2>/dev/null
vb_info queue_threads "$n"
vb_info queue_threads_in_owner_cgroup "$incg"
rmdir $cg/vbowner 2>/dev/null

# read-only: reads work, the write job fails with I/O errors
step bench_ro_read bench --file "$dev" --read-only --rw randread --ios 500 --queues 2
step_fails bench_ro_write_refused bench --file "$dev" --read-only --rw randwrite --ios 50

# the module unloads once every device is closed
step rmmod sh -c 'rmmod vhost_blk && rmmod vhost && rmmod vhost_iotlb'
[ -e /dev/vhost-blk ] && vb_info dev_gone fail || vb_info dev_gone pass

# the kernel log: no Oops, BUG, WARNING, KASAN report or call trace
dmesg > /tmp/dmesg
grep -E 'Oops|BUG|WARNING|KASAN|Call Trace|general protection|hung_task|blocked for more than|soft lockup|hard LOCKUP' \
    /tmp/dmesg > /tmp/dmesg.bad
vb_info dmesg_bad "$(wc -l < /tmp/dmesg.bad)"
sed 's/^/VBTEST-LOG: dmesg: /' /tmp/dmesg.bad | head -n 60
grep -E 'vhost' /tmp/dmesg | sed 's/^/VBTEST-LOG: dmesg: /' | head -n 10
return 0
