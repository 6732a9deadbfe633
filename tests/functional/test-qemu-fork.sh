#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Proves the patched QEMU (scripts/build-qemu.sh): the vhost-pci-blk-pci
# device is listed with its properties, TCG guests run fio write+verify on
# it over vhost-blkd with 1 and 4 queues and across a kill -9 + restart of
# vhost-blkd, the stock vhost-user-blk-pci and virtio-blk-pci still work in
# the same binary, and bad configurations fail with clear messages.
#
# Environment (besides lib.sh's):
#   VHOST_BLK_QEMU_FORK   the patched binary (default build/qemu/qemu-system-x86_64)
#   VB_FORK_BACKEND       vhost-blkd (default) or qsd (qemu-storage-daemon,
#                         to check the device alone when vhost-blkd is absent)
set -u
. "$(dirname "$0")/lib.sh"

FORK_QEMU=${VHOST_BLK_QEMU_FORK:-$VB_ROOT/build/qemu/qemu-system-x86_64}
if [ ! -x "$FORK_QEMU" ]; then
    echo "# $FORK_QEMU is not built (scripts/build-qemu.sh builds it)"
    echo "1..0 # SKIP patched QEMU not built"
    echo "skipped: patched QEMU not built"
    exit 0
fi
export VHOST_BLK_QEMU=$FORK_QEMU
DEV=vhost-pci-blk-pci
BACKEND=${VB_FORK_BACKEND:-vhost-blkd}
QEMU_L=()
for d in /usr/share/seabios /usr/share/qemu; do
    [ -d "$d" ] && QEMU_L+=(-L "$d")
done

vb_setup
echo "# qemu: $FORK_QEMU"

# backend_start SOCK IMG NUM_QUEUES: start the vhost-user backend.
backend_start() {
    local bin
    if [ "$BACKEND" = qsd ]; then
        vb_qsd_start "$1" "$2" "$3"
        return
    fi
    bin=$(vb_bin vhost-blkd) || {
        echo "# vhost-blkd is not built in $VHOST_BLK_BUILD"
        return 1
    }
    vb_daemon_start "vhost-blkd-$(basename "$1")" "$1" \
        "$bin" --export "socket=$1,file=$2,num-queues=$3"
}

# qemu_fails NAME PATTERN ARGS...: QEMU must exit non-zero at start-up and
# print PATTERN (grep -E) on stderr.
qemu_fails() {
    local name=$1 pat=$2 err=$VB_TMP/err-$VB_N.txt rc
    shift 2
    timeout 60 "$FORK_QEMU" -accel tcg -machine q35 -display none \
        -nodefaults -nic none "${QEMU_L[@]}" "$@" > "$err" 2>&1 < /dev/null
    rc=$?
    sed 's/^/#   qemu: /' "$err"
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -Eq "$pat" "$err"; then
        vb_ok "$name"
    else
        vb_not_ok "$name" "status $rc, stderr does not match /$pat/"
    fi
}

# ------------------------------------------------------------ introspection

out=$("$FORK_QEMU" -device help 2>&1)
vb_check "-device help lists $DEV" grep -q "name \"$DEV\"" <<< "$out"
vb_check "-device help lists the (non-)transitional variants" \
    test "$(grep -Ec "name \"$DEV-(non-)?transitional\"" <<< "$out")" = 2
# The properties docs/qemu-fork.md documents: the backquoted names in the
# first column of the table under "## The device".
doc_props=$(sed -n '/^## The device/,/^## /p' "$VB_ROOT/docs/qemu-fork.md" |
            grep '^| `' | cut -d'|' -f2 | grep -o '`[a-z_-]*`' | tr -d '`' |
            sort -u)
# The properties the overlay defines itself (class, vectors, chardev, ...).
src_props=$(grep -ho 'DEFINE_PROP_[A-Z0-9]*("[a-z_-]*"' -r "$VB_ROOT/qemu/overlay" |
            sed 's/.*("//; s/"$//' | sort -u)
vb_check "docs/qemu-fork.md lists properties ($(echo $doc_props))" \
    test -n "$doc_props"
for p in $src_props; do
    vb_check "docs/qemu-fork.md documents the overlay's property $p" \
        grep -qx -- "$p" <<< "$doc_props"
done
out=$("$FORK_QEMU" -device "$DEV,help" 2>&1)
for p in $doc_props; do
    vb_check "$DEV,help lists $p" grep -Eq "^ +$p=" <<< "$out"
done

# ------------------------------------------------------------ clear errors

img=$(vb_mkimg err 16M)
qemu_fails "error: no backend given" "no backend" -device "$DEV"
qemu_fails "error: chardev= and drive= both given" "not both" \
    -chardev "socket,id=c0,path=$VB_TMP/absent.sock,reconnect=1" \
    -drive "if=none,id=d0,file=$img,format=raw" \
    -device "$DEV,chardev=c0,drive=d0"
qemu_fails "error: vhostdev= path missing" \
    "$VB_TMP/no-vhost-blk does not exist.*vhost_blk" \
    -drive "if=none,id=d0,file=$img,format=raw" \
    -device "$DEV,drive=d0,vhostdev=$VB_TMP/no-vhost-blk"
if [ ! -e /dev/vhost-blk ]; then
    qemu_fails "error: /dev/vhost-blk missing (kernel module absent)" \
        "/dev/vhost-blk does not exist.*(modprobe vhost_blk|not loaded)" \
        -drive "if=none,id=d0,file=$img,format=raw" -device "$DEV,drive=d0"
else
    vb_skip "error: /dev/vhost-blk missing" "this host has /dev/vhost-blk"
fi
qemu_fails "error: kernel backend without drive=" "needs drive=" \
    -device "$DEV,vhostdev=/dev/null"

# The kernel serves a whole fd from byte 0: a raw window (offset=/size=)
# and image formats are refused before /dev/vhost-blk is even opened.
qemu_fails "error: drive= with raw offset= is refused" \
    "drive=d0 uses the raw driver's offset=/size= to expose 16773120 of the 16777216 bytes" \
    -drive "if=none,id=d0,file=$img,format=raw,offset=4096" -device "$DEV,drive=d0"
qemu_fails "error: drive= with raw size= is refused" \
    "drive=d0 uses the raw driver's offset=/size= to expose 8388608 of the 16777216 bytes" \
    -drive "if=none,id=d0,file=$img,format=raw,size=8M" -device "$DEV,drive=d0"
qemu_fails "error: -blockdev raw node with offset= is refused" \
    "drive=r0 uses the raw driver's offset=/size=" \
    -blockdev "driver=file,node-name=f0,filename=$img" \
    -blockdev "driver=raw,node-name=r0,file=f0,offset=512" -device "$DEV,drive=r0"
if command -v qemu-img > /dev/null; then
    qemu-img create -q -f qcow2 "$VB_TMP/err.qcow2" 16M
    qemu_fails "error: drive= in qcow2 format is refused" \
        "drive=d0 has format qcow2.*must be format=raw" \
        -drive "if=none,id=d0,file=$VB_TMP/err.qcow2,format=qcow2" -device "$DEV,drive=d0"
else
    vb_skip "error: drive= in qcow2 format is refused" "no qemu-img"
fi
qemu_fails "error: logical_block_size= with chardev= is refused" \
    "logical_block_size= applies to the kernel backend" \
    -chardev "socket,id=c0,path=$VB_TMP/absent.sock,reconnect=1" \
    -device "$DEV,chardev=c0,logical_block_size=4096"
# serial= with the kernel backend goes to the module (VHOST_BLK_SET_SERIAL;
# test-nested-fork.sh reads it in a guest): no warning may send the user to
# vhost-blkd (QEMU then stops at vhostdev=/dev/null, not a vhost device).
out=$(timeout 60 "$FORK_QEMU" -accel tcg -machine q35 -display none \
          -nodefaults -nic none "${QEMU_L[@]}" \
          -drive "if=none,id=d0,file=$img,format=raw" \
          -device "$DEV,drive=d0,serial=kserial,vhostdev=/dev/null" 2>&1 < /dev/null)
echo "$out" | sed 's/^/#   qemu: /'
vb_check "kernel backend: serial= draws no warning naming vhost-blkd" \
    test "$(grep -c 'vhost-blkd' <<< "$out")" = 0
vb_check "kernel backend: QEMU got as far as opening vhostdev=" \
    grep -q 'vhost_blk set-up failed' <<< "$out"
# Block size from the backing: a loop device with 4096-byte sectors,
# opened O_DIRECT (cache=none), cannot be offered as 512-byte blocks.
loopdev=
if [ "$(id -u)" = 0 ] && command -v losetup > /dev/null; then
    loopdev=$(losetup -f --show --sector-size 4096 "$img" 2>/dev/null)
fi
if [ -n "$loopdev" ]; then
    echo "# $loopdev: $(cat "/sys/block/${loopdev#/dev/}/queue/logical_block_size")-byte sectors"
    qemu_fails "error: logical_block_size=512 on a 4096-byte-sector device with cache=none" \
        "logical_block_size=512 is smaller than the 4096-byte logical block size of $loopdev" \
        -drive "if=none,id=d0,file=$loopdev,format=raw,cache=none" \
        -device "$DEV,drive=d0,logical_block_size=512"
    losetup -d "$loopdev"
else
    vb_skip "error: logical_block_size=512 on a 4096-byte-sector device" \
        "needs root and losetup --sector-size (loop devices)"
fi

# ------------------------------------------------------------ guests on the backend

for nq in 1 4; do
    sock=$VB_TMP/fork-$nq.sock
    img=$(vb_mkimg "fork$nq" 128M)
    if ! backend_start "$sock" "$img" "$nq"; then
        vb_not_ok "$DEV $nq queue(s): $BACKEND starts"
        continue
    fi
    pid=$VB_LAST_PID
    # The guest driver uses min(queues, CPUs) queues: give it enough CPUs.
    cpus=$(( nq > 2 ? nq : 2 ))
    vb_check "$DEV on $BACKEND, $nq queue(s): fio randwrite + crc32c verify" \
        vb_guest -d "$DEV" -s "$sock" -q "$nq" -c "$cpus" -j fio-verify \
        vbrw=randwrite vbsize=$((32 / nq))M vbbs=4k vbiodepth=16 vbnumjobs="$nq"
    if vb_guest -d "$DEV" -s "$sock" -q "$nq" -c "$cpus" -j device-info; then
        vb_ok "$DEV $nq queue(s): device-info job"
        vb_check_info "$DEV $nq queue(s): guest sees $nq hw queue(s)" \
            nr_hw_queues "$nq"
        vb_check_info "$DEV $nq queue(s): capacity from the backend (128M)" \
            size_sectors 262144
        q=0
        while [ $q -lt "$nq" ]; do
            irqs=$(vb_info_get "hctx${q}_irqs")
            vb_check "$DEV $nq queue(s): queue $q completed requests (irqs=$irqs)" \
                test "${irqs:-0}" -gt 0 2>/dev/null
            q=$((q + 1))
        done
    else
        vb_not_ok "$DEV $nq queue(s): device-info job"
    fi
    vb_stop "$pid"
done

# kill -9 of the backend in the middle of the job, then a restart: QEMU
# reconnects (reconnect=1), the inflight region lets the backend resubmit,
# and fio finishes and verifies.
# qemu-storage-daemon 7.2 keeps no inflight region, so a kill -9 of it can
# lose descriptors whichever device QEMU uses: only vhost-blkd is tested.
sock=$VB_TMP/fork-kill.sock
img=$(vb_mkimg kill 128M)
if [ "$BACKEND" = qsd ]; then
    vb_skip "$DEV: kill -9 + restart of the backend mid-job" \
        "qemu-storage-daemon has no inflight region"
elif backend_start "$sock" "$img" 2; then
    pid=$VB_LAST_PID
    vb_guest_bg -r -d "$DEV" -s "$sock" -q 2 -j fio-verify -t 150 \
        vbrw=randwrite vbsize=96M vbbs=4k vbiodepth=16
    glog=$VB_TMP/guest-$VB_GUEST_N.log
    n=0
    while ! grep -q 'VBTEST-LOG: fio' "$glog" 2>/dev/null && [ $n -lt 900 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    sleep 1
    echo "# kill -9 $BACKEND (pid $pid) during the job"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    sleep 1
    if backend_start "$sock" "$img" 2; then
        vb_check "$DEV: kill -9 + restart of $BACKEND mid-job, fio finishes and verifies" \
            wait "$VB_GUEST_PID"
        if [ "$BACKEND" = vhost-blkd ]; then
            vb_check "$DEV: QEMU reconnected to the restarted vhost-blkd" \
                grep -q 'front-end connected' "$VB_TMP/vhost-blkd-$(basename "$sock").log"
        fi
        vb_stop "$VB_LAST_PID"
    else
        vb_not_ok "$DEV: $BACKEND restarts after kill -9"
        wait "$VB_GUEST_PID"
    fi
else
    vb_not_ok "$DEV kill test: $BACKEND starts"
fi

# The backend dies while the device is stopped (QEMU 7.2 lost that
# reconnect: qemu/patches/0002-*): HMP stop in the middle of a fio job,
# kill -9 of the backend, restart it, cont.  QEMU must set the session up
# again on its own and the job must finish and verify, for the fork's
# chardev= path and for the stock vhost-user-blk-pci alike.
# hmp_wait MONLOG PATTERN: wait (up to 60 s) for PATTERN in the monitor log.
hmp_wait() {
    local n=0
    while ! tr -d '\r' < "$1" | grep -q -- "$2"; do
        [ $n -ge 600 ] && return 1
        sleep 0.1
        n=$((n + 1))
    done
}
for dev in "$DEV" vhost-user-blk-pci; do
    name="$dev: backend killed and restarted while the VM is stopped"
    if [ "$BACKEND" = qsd ]; then
        vb_skip "$name" "qemu-storage-daemon has no inflight region"
        continue
    fi
    sock=$VB_TMP/stopped-$dev.sock
    img=$(vb_mkimg "stopped-$dev" 64M)
    if ! backend_start "$sock" "$img" 1; then
        vb_not_ok "$name: $BACKEND starts"
        continue
    fi
    pid=$VB_LAST_PID
    mon=$VB_TMP/mon-$dev
    mkfifo "$mon.in" "$mon.out"
    : > "$mon.log"
    cat "$mon.out" >> "$mon.log" &
    catpid=$!
    vb_guest_bg -r -d "$dev" -s "$sock" -q 1 -j fio-verify -t 120 \
        vbrw=randwrite vbsize=48M vbbs=4k vbiodepth=16 -- \
        -chardev "pipe,id=vbmon,path=$mon" -mon chardev=vbmon,mode=readline
    glog=$VB_TMP/guest-$VB_GUEST_N.log
    n=0
    while ! grep -q 'VBTEST-LOG: fio' "$glog" 2>/dev/null && [ $n -lt 900 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    sleep 1
    echo stop > "$mon.in"
    echo "info status" > "$mon.in"
    if hmp_wait "$mon.log" "VM status: paused"; then
        echo "# VM stopped; kill -9 $BACKEND (pid $pid)"
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        sleep 1
        if backend_start "$sock" "$img" 1; then
            # Give QEMU's 1 s reconnect a chance to happen while stopped
            # (the case 7.2 lost); resuming earlier must work too.
            sleep 2
            echo cont > "$mon.in"
            vb_check "$name, fio finishes and verifies" wait "$VB_GUEST_PID"
            vb_stop "$VB_LAST_PID"
        else
            vb_not_ok "$name: $BACKEND restarts"
            wait "$VB_GUEST_PID"
        fi
    else
        vb_not_ok "$name: HMP stop" "monitor log: $(tr -d '\r' < "$mon.log" | tail -n 3)"
        vb_stop "$pid"
        wait "$VB_GUEST_PID"
    fi
    kill "$catpid" 2>/dev/null
    wait "$catpid" 2>/dev/null
done

# With chardev= live migration is not blocked (a guest migrates in
# test-qemu-fork-migration.sh); serial= draws a warning pointing at
# vhost-blkd (the backend answers GET_ID).
sock=$VB_TMP/mig.sock
img=$(vb_mkimg mig 16M)
if backend_start "$sock" "$img" 1; then
    out=$(printf 'migrate "exec:cat > /dev/null"\ninfo migrate\nquit\n' |
          timeout 60 "$FORK_QEMU" -accel tcg -S -display none -nodefaults \
              -nic none "${QEMU_L[@]}" -machine q35,memory-backend=mem \
              -object memory-backend-memfd,id=mem,size=256M,share=on -m 256M \
              -monitor stdio -chardev "socket,id=c0,path=$sock,reconnect=1" \
              -device "$DEV,chardev=c0,num-queues=1,serial=vbserial" 2>&1 |
          tr -d '\033' | grep -aE 'Error|warning|Migration status')
    echo "$out" | sed 's/^/#   /'
    vb_check "$DEV,chardev=: migrate (of the paused VM to a pipe) completes" \
        grep -q 'Migration status: completed' <<< "$out"
    vb_check "$DEV: serial= warns that vhost-blkd's serial= is used" \
        grep -q 'serial=vbserial' <<< "$out"
    vb_stop "$VB_LAST_PID"
else
    vb_not_ok "$DEV migrate/serial test: $BACKEND starts"
fi

# ------------------------------------------------------------ stock devices

sock=$VB_TMP/stock.sock
img=$(vb_mkimg stock 64M)
if backend_start "$sock" "$img" 1; then
    vb_check "same binary: stock vhost-user-blk-pci on $BACKEND, fio verify" \
        vb_guest -d vhost-user-blk-pci -s "$sock" -q 1 -j fio-verify \
        vbrw=randwrite vbsize=8M
    vb_stop "$VB_LAST_PID"
else
    vb_not_ok "stock vhost-user-blk-pci: $BACKEND starts"
fi
img=$(vb_mkimg vblk 64M)
vb_check "same binary: stock virtio-blk-pci, fio verify" \
    vb_guest -j fio-verify vbrw=randwrite vbsize=8M -- \
    -drive "if=none,id=vd0,file=$img,format=raw,cache=none,aio=native" \
    -device virtio-blk-pci,drive=vd0,num-queues=1

vb_done
