#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# vhost-blkd serving Ceph RBD images of a real single-node cluster
# (scripts/ceph-cluster.sh, started here and stopped at the end) to stock
# QEMU TCG guests: fio crc32c verify with mixed block sizes on 2 queues;
# discard and write-zeroes read back as zeros (guest and cluster side); a
# snapshot export is read-only; qemu-storage-daemon's command line with
# driver=rbd, key-secret and a QMP monitor runs unchanged, and block_resize
# under fio resizes the image and the guest sees it; kill -9 and restart of
# vhost-blkd during a write+verify job; an OSD stopped for 10 s during a
# write+verify job; wrong pool, image and key fail with an error naming the
# image; an image whose monitor is unreachable fails (QMP blockdev-add)
# while a file export of the same process serves a guest; live migration of
# a writing guest between two QEMUs whose disks are the same image served
# by two vhost-blkd processes, verified on the destination.
#
# Every check is on behaviour; waits poll with generous bounds for hangs.
# Jobs that must outlive an event (the OSD outage, migration) run until the
# host writes a stop marker, on a small file export beside the RBD disk:
# the host cannot write the RBD image itself while a daemon holds its
# exclusive lock.
set -u
. "$(dirname "$0")/lib.sh"

QMP=$VB_FUNC/qmp.py
CLUSTER=$VB_ROOT/scripts/ceph-cluster.sh
qemu=${VHOST_BLK_QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null || vb_bail "no QEMU binary '$qemu'"

vb_setup
BLKD=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"

# The daemons' runtime directory (where an rbd node records its client
# for a takeover after a restart, block/rbd.c) is the test's own.
export RUNTIME_DIRECTORY=$VB_TMP/run
mkdir -p "$RUNTIME_DIRECTORY"

# Our own cluster in our own directory: nothing else on the machine shares
# it, and it goes away with the test.
export VB_CEPH_DIR=${VB_CEPH_DIR:-$(mktemp -d /var/tmp/vbceph.XXXXXX)}
QPIDS=()
rbd_cleanup() {
    local p
    for p in "${QPIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    vb_cleanup
    if [ "$VB_FAILED" -gt 0 ] && [ -d "$VB_CEPH_DIR/log" ]; then
        mkdir -p "$VB_TMP/ceph-log" 2>/dev/null &&
            cp -r "$VB_CEPH_DIR/log/." "$VB_TMP/ceph-log/" 2>/dev/null &&
            echo "# cluster logs copied to $VB_TMP/ceph-log"
    fi
    "$CLUSTER" stop
}
trap rbd_cleanup EXIT

t0=$SECONDS
if ! "$CLUSTER" start > "$VB_TMP/cluster-start.log" 2>&1; then
    sed 's/^/#   /' "$VB_TMP/cluster-start.log"
    vb_bail "the Ceph test cluster did not start"
fi
eval "$("$CLUSTER" env)"
vb_ok "single-node Ceph cluster up in $((SECONDS - t0)) s ($CEPH_CONF)"
"$BLKD" --help 2>&1 | grep -q 'rbd=' ||
    vb_bail "this vhost-blkd has no rbd driver (was librbd-dev installed at ./configure?)"

rbd_() { timeout 120 rbd -c "$CEPH_CONF" "$@"; }

# The cluster may be shared with other tests of the run (scripts/check.sh
# starts one for all): drop images of an earlier run of this script.
for i in q2 dz snapimg qsdimg osdimg rcimg migimg; do
    rbd_ snap purge "rbd/$i" >/dev/null 2>&1
    rbd_ rm --no-progress "rbd/$i" >/dev/null 2>&1
done

# VB_RBD_CASES: run only these cases (for development; default all):
# queues discard snapshot qsd errors deadmon osd restart migration
want() { case " ${VB_RBD_CASES:-all} " in *" all "*|*" $1 "*) return 0 ;; esac; return 1; }

# blkd_start NAME SOCK [vhost-blkd args...]: start vhost-blkd; VB_LAST_PID.
blkd_start() {
    local name=$1 sock=$2
    shift 2
    vb_daemon_start "$name" "$sock" "$BLKD" --log-level info "$@"
}

# rbd_opts IMAGE: the export keys of an RBD image as the admin user.
rbd_opts() { echo "rbd=rbd/$1,ceph-conf=$CEPH_CONF,ceph-id=admin"; }

# wait_console LOG PATTERN SECS PID: until LOG has PATTERN (fails if PID
# exits first or SECS pass).
wait_console() {
    local n=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        kill -0 "$4" 2>/dev/null || return 1
        [ $n -ge $(($3 * 10)) ] && return 1
        sleep 0.1
        n=$((n + 1))
    done
}

# stop_marker FILE: write the fio-until-stop job's stop block at offset 0.
stop_marker() {
    { printf VBSTOP; head -c 4090 /dev/zero; } |
        dd of="$1" bs=4096 conv=notrunc oflag=direct status=none
}

# fio_passes LOG: the number of the last fio pass the guest started.
fio_passes() {
    tr -d '\r' < "$1" 2>/dev/null | sed -n 's/^VBTEST-LOG: fio pass \([0-9]*\)$/\1/p' | tail -n1
}

# badstart NAME EXPECT EXPORT_OPTS: vhost-blkd with that export must exit
# non-zero (before 180 s) with an error line containing EXPECT.
badstart() {
    local name=$1 want=$2 rc
    timeout 180 "$BLKD" --export "socket=$VB_TMP/$name.sock,$3" > "$VB_TMP/$name.log" 2>&1
    rc=$?
    sed 's/^/#   /' "$VB_TMP/$name.log" | tail -n 3
    if [ "$rc" -eq 124 ]; then
        vb_not_ok "$name: vhost-blkd gives up" "still running after 180 s"
    elif [ "$rc" -eq 0 ]; then
        vb_not_ok "$name: vhost-blkd refuses the export" "it exited 0"
    else
        vb_check "$name: refused with an error naming '$want'" grep -q -- "$want" "$VB_TMP/$name.log"
    fi
}

if want queues; then
# ---- 2 queues, mixed block sizes, crc32c verify
sock=$VB_TMP/q2.sock
rbd_ create --size 256M rbd/q2 || vb_bail "rbd create failed"
if blkd_start blkd-q2 "$sock" --iothreads 2 \
        --export "socket=$sock,$(rbd_opts q2),num-queues=2"; then
    pid=$VB_LAST_PID
    vb_check "rbd, 2 queues: fio randwrite, block sizes 512 B to 128 KiB, crc32c verify" \
        vb_guest -s "$sock" -q 2 -c 2 -j fio-verify \
        vbrw=randwrite vbsize=8M vbiodepth=16 vbnumjobs=2 \
        vbfioargs=--bssplit=512/10:4k/40:16k/20:64k/20:128k/10+--cpus_allowed=0-1+--cpus_allowed_policy=split \
        vbinfo=1
    vb_check_info "rbd, 2 queues: the guest sees 2 hw queues" nr_hw_queues 2
    vb_check_info "rbd, 2 queues: capacity of the image" size_sectors 524288
    for q in 0 1; do
        irqs=$(vb_info_get "hctx${q}_irqs")
        vb_check "rbd, 2 queues: fio's I/O completed on hw queue $q (irqs=${irqs:-none})" \
            test "${irqs:-0}" -gt 50
    done
    vb_stop "$pid"
    # What the guest wrote is in the cluster: fio's verify header of the
    # first 512-byte block written is not zeros any more.
    rbd_ export --no-progress rbd/q2 "$VB_TMP/q2.raw" >/dev/null 2>&1
    vb_check "rbd, 2 queues: the image holds the guest's data (read back with rbd export)" \
        sh -c "! cmp -s -n $((32 << 20)) '$VB_TMP/q2.raw' /dev/zero"
    rm -f "$VB_TMP/q2.raw"
else
    vb_not_ok "rbd, 2 queues: vhost-blkd starts"
fi

fi

if want discard; then
# ---- discard and write-zeroes
sock=$VB_TMP/dz.sock
rbd_ create --size 64M rbd/dz || vb_bail "rbd create failed"
if blkd_start blkd-dz "$sock" --export "socket=$sock,$(rbd_opts dz)"; then
    pid=$VB_LAST_PID
    vb_check "rbd: blkdiscard -z reads back zeros, the rest untouched, blkdiscard succeeds" \
        vb_guest -s "$sock" -j discard vboffset=1M vblen=4M
    vb_check_info "rbd: the guest's WRITE_ZEROES worked" write_zeroes ok
    vb_check_info "rbd: the guest's DISCARD worked" discard ok
    vb_stop "$pid"
    rbd_ export --no-progress rbd/dz "$VB_TMP/dz.raw" >/dev/null 2>&1
    vb_check "rbd: the discarded range of the image reads as zeros in the cluster" \
        cmp -s -n $((4 << 20)) -i $((1 << 20)):0 "$VB_TMP/dz.raw" /dev/zero
    rm -f "$VB_TMP/dz.raw"
else
    vb_not_ok "rbd discard: vhost-blkd starts"
fi

fi

if want snapshot; then
# ---- a snapshot is served read-only
sock=$VB_TMP/snap.sock
head -c $((1 << 20)) /dev/urandom > "$VB_TMP/snap-head.bin"
truncate -s 64M "$VB_TMP/snap.raw"
dd if="$VB_TMP/snap-head.bin" of="$VB_TMP/snap.raw" conv=notrunc status=none
rbd_ import --no-progress "$VB_TMP/snap.raw" rbd/snapimg >/dev/null 2>&1 &&
    rbd_ snap create rbd/snapimg@s1 >/dev/null 2>&1 || vb_bail "rbd import/snap create failed"
# as the restricted client.vhost, its key in a file
if blkd_start blkd-snap "$sock" --export \
        "socket=$sock,rbd=rbd/snapimg@s1,ceph-conf=$CEPH_CONF,ceph-id=vhost,ceph-keyfile=$VB_CEPH_VHOST_KEYFILE"; then
    pid=$VB_LAST_PID
    vb_check "rbd snapshot export: guest sees ro, reads work, writes fail (also with the ro flag cleared)" \
        vb_guest -s "$sock" -j readonly
    vb_stop "$pid"
    rbd_ export --no-progress rbd/snapimg@s1 "$VB_TMP/snap.out" >/dev/null 2>&1
    vb_check "rbd snapshot export: the snapshot still holds what was imported" \
        cmp -s "$VB_TMP/snap.out" "$VB_TMP/snap.raw"
    rm -f "$VB_TMP/snap.out"
else
    vb_not_ok "rbd snapshot: vhost-blkd starts"
fi
rm -f "$VB_TMP/snap.raw"

fi

if want qsd; then
# ---- qemu-storage-daemon's command line, unchanged; block_resize under fio
sock=$VB_TMP/qsd.sock
qmpsock=$VB_TMP/qsd.qmp
rbd_ create --size 64M rbd/qsdimg || vb_bail "rbd create failed"
# (qemu-storage-daemon takes its options in order: the secret first)
qsd_args=(--object "secret,id=sec0,file=$VB_CEPH_VHOST_KEYFILE,format=base64"
          --blockdev "driver=rbd,node-name=d0,pool=rbd,image=qsdimg,conf=$CEPH_CONF,user=vhost,key-secret=sec0"
          --export "type=vhost-user-blk,id=e0,node-name=d0,addr.type=unix,addr.path=$sock,writable=on,num-queues=2"
          --chardev "socket,id=mon0,path=$qmpsock,server=on,wait=off"
          --monitor chardev=mon0)
echo "# the command line: ${qsd_args[*]}"
# For the record only (a comparison, never a gate): does
# qemu-storage-daemon itself take it?
if command -v qemu-storage-daemon >/dev/null &&
   vb_daemon_start qsd-same "$sock" qemu-storage-daemon "${qsd_args[@]}"; then
    echo "# qemu-storage-daemon serves it too"
    vb_stop "$VB_LAST_PID"
else
    echo "# qemu-storage-daemon did not serve it (qemu-block-extra installed?)"
fi
new=$((96 << 20))
if vb_daemon_start blkd-qsd "$sock" "$BLKD" "${qsd_args[@]}"; then
    pid=$VB_LAST_PID
    vb_ok "vhost-blkd runs qemu-storage-daemon's driver=rbd command line (user=vhost, key-secret from a file)"
    vb_guest_bg -s "$sock" -q 2 -j resize -t 240 vbsize=8M vbruntime=15 vbnewsize=$new
    log=$VB_TMP/guest-$VB_GUEST_N.log
    if wait_console "$log" "VBTEST-LOG: resize-ready" 200 "$VB_GUEST_PID"; then
        vb_check "rbd: block_resize over QMP while the guest runs fio" \
            "$QMP" "$qmpsock" \
            "{\"execute\": \"block_resize\", \"arguments\": {\"node-name\": \"d0\", \"size\": $new}}"
    else
        vb_not_ok "rbd resize: the guest got ready for the resize" "see $log"
    fi
    wait "$VB_GUEST_PID"
    vb_check_eq "rbd resize: guest's fio verify during the resize, then 8M past the old end" "$?" 0
    vb_check_info "rbd resize: guest's size before (sectors)" size_before 131072
    vb_check_info "rbd resize: guest's size after (sectors)" size_after $((new / 512))
    vb_check_info "rbd resize: fio was running when the size changed" fio_running_at_resize 1
    got=$(rbd_ info rbd/qsdimg --format json 2>/dev/null |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["size"])' 2>/dev/null)
    vb_check_eq "rbd resize: the image in the cluster has the new size" "${got:-?}" "$new"
    vb_stop "$pid"
else
    vb_not_ok "vhost-blkd runs qemu-storage-daemon's driver=rbd command line"
fi

fi

if want errors; then
# ---- wrong pool, image, key: an error naming the image, within a bound
badstart nopool nosuchpool/img "rbd=nosuchpool/img,ceph-conf=$CEPH_CONF,ceph-id=admin"
badstart noimage rbd/nosuchimage "rbd=rbd/nosuchimage,ceph-conf=$CEPH_CONF,ceph-id=admin"
sed "s|^keyring = .*|keyring = $VB_TMP/wrong.keyring|" "$CEPH_CONF" > "$VB_TMP/wrongkey.conf"
ceph-authtool --create-keyring "$VB_TMP/wrong.keyring" --gen-key -n client.admin >/dev/null
badstart wrongkey rbd/q2 "rbd=rbd/q2,ceph-conf=$VB_TMP/wrongkey.conf,ceph-id=admin"

fi

if want deadmon; then
# ---- a monitor nobody answers: the other export keeps serving
# A port nothing listens on (the conf names only this monitor).
deadport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sed "s|^mon host = .*|mon host = [v2:127.0.0.1:$deadport]|" "$CEPH_CONF" > "$VB_TMP/deadmon.conf"
badstart deadmon rbd/q2 "rbd=rbd/q2,ceph-conf=$VB_TMP/deadmon.conf,ceph-id=admin"
sock=$VB_TMP/live.sock
qmpsock=$VB_TMP/live.qmp
img=$(vb_mkimg live 64M)
if blkd_start blkd-live "$sock" --export "socket=$sock,file=$img" \
        --chardev "socket,id=m,path=$qmpsock,server=on,wait=off" --monitor chardev=m; then
    pid=$VB_LAST_PID
    vb_guest_bg -s "$sock" -j fio-verify -t 400 vbrw=randwrite vbsize=8M
    glog=$VB_TMP/guest-$VB_GUEST_N.log
    wait_console "$glog" "VBTEST-LOG: fio" 200 "$VB_GUEST_PID"
    t=$SECONDS
    timeout 360 "$QMP" "$qmpsock" \
        "{\"execute\": \"blockdev-add\", \"arguments\": {\"driver\": \"rbd\", \"node-name\": \"dead\", \"pool\": \"rbd\", \"image\": \"q2\", \"conf\": \"$VB_TMP/deadmon.conf\"}}" \
        > "$VB_TMP/deadmon.qmp" 2>&1
    rc=$?
    echo "# blockdev-add answered after $((SECONDS - t)) s: $(head -c 400 "$VB_TMP/deadmon.qmp")"
    vb_check_eq "unreachable monitor: QMP blockdev-add fails (exit 1), within 360 s" "$rc" 1
    vb_check "unreachable monitor: the error names the image" grep -q "rbd/q2" "$VB_TMP/deadmon.qmp"
    vb_check "unreachable monitor: the error says the cluster is unreachable" \
        grep -q "cannot connect to the Ceph cluster" "$VB_TMP/deadmon.qmp"
    vb_check "unreachable monitor: the control plane answers afterwards" \
        "$QMP" "$qmpsock" '{"execute": "query-block-exports"}'
    vb_check "unreachable monitor: the file export's guest verifies meanwhile" wait "$VB_GUEST_PID"
    vb_stop "$pid"
else
    vb_not_ok "unreachable monitor: vhost-blkd with the file export starts"
fi

fi

if want osd; then
# ---- an OSD stopped for 10 s while the guest writes and verifies
sock=$VB_TMP/osd.sock
ctlsock=$VB_TMP/osd-ctl.sock
ctl=$(vb_mkimg osd-ctl 4M)
rbd_ create --size 64M rbd/osdimg || vb_bail "rbd create failed"
if blkd_start blkd-osd "$sock" --export "socket=$sock,$(rbd_opts osdimg)" \
        --export "socket=$ctlsock,file=$ctl" && vb_wait_socket "$ctlsock" 10; then
    pid=$VB_LAST_PID
    vb_guest_bg -s "$sock" -s "$ctlsock" -j fio-until-stop -t 500 \
        vbsize=4M vbstopdev=vdb vbstopoff=0
    glog=$VB_TMP/guest-$VB_GUEST_N.log
    if wait_console "$glog" "VBTEST-LOG: fio pass" 200 "$VB_GUEST_PID"; then
        sleep 2     # let the pass get going (no result depends on it)
        "$CLUSTER" osd-stop
        stopped_at=$(fio_passes "$glog")
        sleep 10
        running=0
        kill -0 "$VB_GUEST_PID" 2>/dev/null && running=1
        t=$SECONDS
        "$CLUSTER" osd-start || vb_not_ok "the OSD restarts"
        echo "# OSD back after $((SECONDS - t)) s more; the guest was in fio pass $stopped_at"
        vb_check_eq "OSD stop: the guest's job is still running after 10 s without the OSD" "$running" 1
        # Two more passes start: one whole pass ran after the OSD came back.
        n=0
        while [ "$(fio_passes "$glog")" -lt $((stopped_at + 2)) ] && [ $n -lt 3000 ] &&
              kill -0 "$VB_GUEST_PID" 2>/dev/null; do
            sleep 0.1
            n=$((n + 1))
        done
        vb_check "OSD stop: a whole write+verify pass ran after the OSD came back" \
            test "$(fio_passes "$glog")" -ge $((stopped_at + 2))
    else
        vb_not_ok "OSD stop: the guest job starts" "see $glog"
    fi
    stop_marker "$ctl"
    vb_check "OSD stop: every fio pass verified, no I/O error in the guest" wait "$VB_GUEST_PID"
    vb_check "OSD stop: no I/O error in the guest's kernel log" \
        sh -c "! grep -q -e 'I/O error' -e 'blk_update_request' '$glog'"
    vb_stop "$pid"
else
    vb_not_ok "OSD stop: vhost-blkd starts"
fi

fi

if want restart; then
# ---- kill -9 during a guest write+verify job, restart (inflight replay;
# the restarted daemon has to get the image's exclusive lock, which the
# dead one still holds)
sock=$VB_TMP/rc.sock
rbd_ create --size 256M rbd/rcimg || vb_bail "rbd create failed"
rc_args=(--iothreads 2 --export "socket=$sock,$(rbd_opts rcimg),num-queues=2")
if blkd_start blkd-rc0 "$sock" "${rc_args[@]}"; then
    VB_RC_SIZE=16M vb_kill_restart_during_fio blkd-rc "$sock" -- \
        "$BLKD" --log-level info "${rc_args[@]}"
    pid=$VB_LAST_PID
    # The guest's stall, for the record (not a check): from the last
    # restart (the helper returns 2 s after it) until the restarted daemon
    # completes a request, i.e. until it has the exclusive lock (once the
    # dead process's watch has expired: osd_client_watch_timeout).
    t=$SECONDS
    n=0
    while [ $n -lt 120 ] && kill -0 "$pid" 2>/dev/null; do
        kill -USR1 "$pid"
        sleep 1
        n=$((n + 1))
        last=$(ls "$VB_TMP"/blkd-rc[1-9].log | tail -n1)
        c=$(grep -o 'completed [0-9]*' "$last" | tail -n1 | cut -d' ' -f2)
        [ "${c:-0}" -gt 0 ] && break
    done
    echo "# the restarted vhost-blkd completed its first request about $((SECONDS - t + 2)) s after it started"
    vb_check "rbd: vhost-blkd restarts on the same socket after kill -9" test "$VB_RC_RESTARTED" = 1
    vb_check "rbd: kill -9 + restart during fio: the guest job finishes and verifies" \
        wait "$VB_GUEST_PID"
    vb_check "rbd: a restarted daemon replayed QEMU's in-flight requests ($(cat "$VB_TMP"/blkd-rc*.log | grep -h -o 'resubmitting [0-9]*' | tr '\n' ' '))" \
        test "$VB_RC_REPLAYED" = 1
    grep -h -i -e 'lock' -e 'blocklist' "$VB_TMP"/blkd-rc[1-9].log 2>/dev/null | sed 's/^/#   /' | head -n 8
    vb_stop "$pid"
else
    vb_not_ok "rbd reconnect: vhost-blkd starts"
fi

fi

if want migration; then
# ---- live migration between two vhost-blkd processes on the same image
# As test-migration.sh, without the held read: two daemons (two hosts),
# QEMU 0 -> QEMU 1 -> QEMU 2, the job running fio passes all along; the
# image's exclusive lock has to follow the writer each time.
socks=("$VB_TMP/mig-a.sock" "$VB_TMP/mig-b.sock")
ctlsocks=("$VB_TMP/mig-a-ctl.sock" "$VB_TMP/mig-b-ctl.sock")
ctl=$(vb_mkimg mig-ctl 4M)
rbd_ create --size 64M rbd/migimg || vb_bail "rbd create failed"
mig_ok=1
for i in 0 1; do
    if ! blkd_start "blkd-mig$i" "${socks[$i]}" --export "socket=${socks[$i]},$(rbd_opts migimg),num-queues=2" \
            --export "socket=${ctlsocks[$i]},file=$ctl" || ! vb_wait_socket "${ctlsocks[$i]}" 10; then
        vb_not_ok "migration: vhost-blkd $i starts"
        mig_ok=0
    fi
done
cmdline="console=ttyS0 quiet panic=-1 cryptomgr.notests mitigations=off no_timer_check"
cmdline+=" vbjob=fio-until-stop vbtimeout=900 vbsize=4M vbstopdev=vdb vbstopoff=0"
common=(-accel tcg -machine q35,memory-backend=vbmem
        -object "memory-backend-memfd,id=vbmem,size=$VB_MIG_MEM,share=on"
        -cpu max -smp 1 -m "$VB_MIG_MEM"
        -kernel "$VHOST_BLK_GUEST_ASSETS/vmlinux"
        -initrd "$VHOST_BLK_GUEST_ASSETS/initramfs.img"
        -append "$cmdline" -display none -monitor none -no-reboot -nic none)
for d in /usr/share/seabios /usr/share/qemu; do
    [ -d "$d" ] && common+=(-L "$d")
done
# qemu_start N DAEMON [ARGS...]: QEMU number N on vhost-blkd DAEMON's two
# sockets; serial in $VB_TMP/serial-N.log, QMP on $VB_TMP/qmp-N.sock.
qemu_start() {
    local n=$1 d=$2
    shift 2
    "$qemu" "${common[@]}" \
        -chardev "socket,id=vbdisk0,path=${socks[$d]},reconnect=1" \
        -device "vhost-user-blk-pci,chardev=vbdisk0,num-queues=2" \
        -chardev "socket,id=vbdisk1,path=${ctlsocks[$d]},reconnect=1" \
        -device "vhost-user-blk-pci,chardev=vbdisk1,num-queues=1" \
        -serial "file:$VB_TMP/serial-$n.log" \
        -qmp "unix:$VB_TMP/qmp-$n.sock,server=on,wait=off" "$@" \
        2> "$VB_TMP/qemu-$n.err" &
    QPIDS[$n]=$!
}
qmp() {
    "$QMP" "$VB_TMP/qmp-$1.sock" "{\"execute\": \"$2\"${3:+, \"arguments\": $3}}"
}
# poll SECS QEMU_N CMD...: until CMD succeeds; fails after SECS or when
# QEMU number QEMU_N exits.
poll() {
    local secs=$1 q=$2 n=0
    shift 2
    until "$@" >/dev/null 2>&1; do
        kill -0 "${QPIDS[$q]}" 2>/dev/null || return 1
        [ $n -ge $((secs * 5)) ] && return 1
        sleep 0.2
        n=$((n + 1))
    done
}
status_is() { qmp "$1" query-status | grep -q "\"status\": \"$2\""; }
mig_status() { qmp "$1" query-migrate | grep -o '"status": "[a-z-]*"' | head -n1; }
migration_ended() { case $(mig_status "$1") in *completed*|*failed*|*cancelled*) return 0 ;; esac; return 1; }
show_mig_logs() {
    local f
    for f in "$VB_TMP"/qemu-*.err "$VB_TMP"/serial-*.log "$VB_TMP"/blkd-mig*.log; do
        [ -s "$f" ] || continue
        echo "# --- $f (last 10 lines)"
        tail -n 10 "$f" | tr -d '\r' | sed 's/^/#   /'
    done
}
# lock_owner: the client that holds the image's exclusive lock ("" if none)
lock_owner() {
    rbd_ lock ls --format json rbd/migimg 2>/dev/null | python3 -c '
import json, sys
l = json.load(sys.stdin)
l = list(l.values()) if isinstance(l, dict) else l
print(l[0]["locker"] if l else "")'
}
# owner_is_not PREV: the lock is held, by someone other than PREV
owner_is_not() { local o; o=$(lock_owner); [ -n "$o" ] && [ "$o" != "$1" ]; }
if [ $mig_ok = 1 ]; then
    qemu_start 0 0
    cur=0
    owners=()
    for m in 1 2; do
        d=$((m % 2))
        qemu_start "$m" "$d" -incoming "unix:$VB_TMP/mig-$m.sock"
        if ! poll 120 "$m" status_is "$m" inmigrate ||
           ! poll 300 "$cur" grep -q "VBTEST-LOG: fio pass" "$VB_TMP/serial-$cur.log"; then
            show_mig_logs
            vb_not_ok "migration $m: QEMUs ready and fio running on QEMU $cur"
            mig_ok=0
            break
        fi
        if [ "$m" = 1 ]; then
            # the writer on vhost-blkd 0 holds the lock
            poll 120 "$cur" owner_is_not ""
            owners[0]=$(lock_owner)
        fi
        qmp "$cur" migrate-set-parameters '{"downtime-limit": 2000}' >/dev/null
        qmp "$cur" migrate "{\"uri\": \"unix:$VB_TMP/mig-$m.sock\"}" >/dev/null
        if poll 600 "$cur" migration_ended "$cur" &&
           [ "$(mig_status "$cur")" = '"status": "completed"' ] &&
           poll 120 "$m" status_is "$m" running; then
            vb_ok "migration $m: QEMU $cur (vhost-blkd $(( (m - 1) % 2 ))) -> QEMU $m (vhost-blkd $d) completed, guest running"
        else
            show_mig_logs
            vb_not_ok "migration $m: QEMU $cur -> QEMU $m" "$(mig_status "$cur")"
            mig_ok=0
            break
        fi
        qmp "$cur" quit >/dev/null
        wait "${QPIDS[$cur]}" 2>/dev/null
        cur=$m
        # The guest writes on through vhost-blkd $d: its client must get
        # the lock from the other daemon (which gave it up when its device
        # stopped).
        poll 120 "$cur" owner_is_not "${owners[$((m - 1))]}"
        owners[$m]=$(lock_owner)
        vb_check "migration $m: the exclusive lock moved with the writer (${owners[$((m - 1))]:-none} -> ${owners[$m]:-none})" \
            test -n "${owners[$m]}" -a "${owners[$m]}" != "${owners[$((m - 1))]}"
    done
    [ $mig_ok = 1 ] &&
        vb_check_eq "migration: back on vhost-blkd 0, its client holds the lock again" \
            "${owners[2]:-none}" "${owners[0]:-?}"
    if [ $mig_ok = 1 ]; then
        stop_marker "$ctl"
        # A guest that crashed never prints its result nor powers off:
        # stop waiting at its oops, and kill its QEMU rather than wait on it.
        poll 600 "$cur" grep -q -e "VBTEST-RESULT" -e "Oops:" -e "Kernel panic" \
            "$VB_TMP/serial-$cur.log"
        grep -q "VBTEST-RESULT" "$VB_TMP/serial-$cur.log" ||
            kill -KILL "${QPIDS[$cur]}" 2>/dev/null
        wait "${QPIDS[$cur]}" 2>/dev/null
        result=$(tr -d '\r' < "$VB_TMP/serial-$cur.log" | grep -a '^VBTEST-RESULT: ' | tail -n1)
        passes=$(tr -d '\r' < "$VB_TMP/serial-$cur.log" | sed -n 's/^VBTEST-INFO: passes=//p')
        vb_check_eq "migration: fio verify passes finish on the final destination (QEMU $cur, ${passes:-?} passes)" \
            "$result" "VBTEST-RESULT: PASS"
        [ "$result" = "VBTEST-RESULT: PASS" ] || show_mig_logs
    fi
fi
for p in "${QPIDS[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
QPIDS=()

fi

vb_done
