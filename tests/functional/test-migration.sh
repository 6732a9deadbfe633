#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Live migration of a TCG guest whose disk vhost-blkd serves.  The guest
# runs fio write + crc32c verify passes (job fio-until-stop) on a
# vhost-user disk; a second QEMU waits with -incoming, its disk on a second
# vhost-blkd socket of the same image; the VM migrates to it through QMP
# while fio runs, then back to a fresh -incoming QEMU on the first socket,
# and so on (ping-pong, $VB_MIGRATIONS times, default 3).  Then the host
# writes the job's stop marker into the image: the pass running on the
# final destination verifies and the guest reports its result on that
# QEMU's serial console.  Both sides use share=on memfd guest memory.
#
# Nothing here depends on timing: the guest job runs until the host stops
# it, and every wait polls with a generous timeout and fails saying what
# it waited for.
#
# Usage: test-migration.sh [--device TYPE] [--qemu BIN]
#   --device  vhost-user-blk-pci (default) or vhost-pci-blk-pci (the
#             fork's device, then --qemu must name the fork's binary)
set -u
. "$(dirname "$0")/lib.sh"

device=vhost-user-blk-pci
qemu=${VHOST_BLK_QEMU:-qemu-system-x86_64}
while [ $# -gt 0 ]; do
    case $1 in
    --device) device=$2; shift 2 ;;
    --qemu) qemu=$2; shift 2 ;;
    *) echo "test-migration.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
migrations=${VB_MIGRATIONS:-3}
QMP=$VB_FUNC/qmp.py

command -v "$qemu" >/dev/null || vb_skip_all "no QEMU binary '$qemu'"
command -v python3 >/dev/null || vb_skip_all "python3 (for QMP) is not installed"
vb_setup
BLKD=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"

img=$(vb_mkimg mig 64M)
socks=("$VB_TMP/blkd-a.sock" "$VB_TMP/blkd-b.sock")
for i in 0 1; do
    vb_daemon_start "blkd-$i" "${socks[$i]}" "$BLKD" --log-level info \
        --export "socket=${socks[$i]},file=$img" ||
        vb_bail "vhost-blkd $i did not start"
done

cmdline="console=ttyS0 quiet panic=-1 cryptomgr.notests mitigations=off"
cmdline+=" vbjob=fio-until-stop vbtimeout=900 vbsize=16M vbstopoff=60M"
common=(-accel tcg -machine q35,memory-backend=vbmem
        -object memory-backend-memfd,id=vbmem,size=256M,share=on
        -cpu max -smp 1 -m 256M
        -kernel "$VHOST_BLK_GUEST_ASSETS/vmlinux"
        -initrd "$VHOST_BLK_GUEST_ASSETS/initramfs.img"
        -append "$cmdline" -display none -monitor none -no-reboot -nic none)
for d in /usr/share/seabios /usr/share/qemu; do
    [ -d "$d" ] && common+=(-L "$d")
done

QPIDS=()
# qemu_start N SOCK [ARGS...]: QEMU number N with its disk on SOCK, serial
# console in $VB_TMP/serial-N.log, QMP on $VB_TMP/qmp-N.sock.
qemu_start() {
    local n=$1 sock=$2
    shift 2
    "$qemu" "${common[@]}" \
        -chardev "socket,id=vbdisk0,path=$sock,reconnect=1" \
        -device "$device,chardev=vbdisk0,num-queues=1" \
        -serial "file:$VB_TMP/serial-$n.log" \
        -qmp "unix:$VB_TMP/qmp-$n.sock,server=on,wait=off" "$@" \
        2> "$VB_TMP/qemu-$n.err" &
    QPIDS[$n]=$!
}

qmp() { "$QMP" "$VB_TMP/qmp-$1.sock" "${@:2}"; }

# wait_for SECS DESCRIPTION CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
    local secs=$1 what=$2 n=0
    shift 2
    until "$@" >/dev/null 2>&1; do
        if [ $n -ge $((secs * 5)) ]; then
            echo "# timed out after ${secs}s waiting for: $what"
            return 1
        fi
        sleep 0.2
        n=$((n + 1))
    done
}

status_is() { qmp "$1" query-status | grep -q "\"status\": \"$2\""; }
migration_done() {
    local s
    s=$(qmp "$1" query-migrate) || return 1
    case $s in
    *'"status": "completed"'*) return 0 ;;
    *'"status": "failed"'*|*'"status": "cancelled"'*)
        echo "# migration from QEMU $1 ended: $s"; MIG_FAILED=1; return 0 ;;
    esac
    return 1
}

cleanup_qemu() {
    local p
    for p in "${QPIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
}
trap 'cleanup_qemu; vb_cleanup' EXIT

show_logs() {
    local f
    for f in "$VB_TMP"/qemu-*.err "$VB_TMP"/serial-*.log; do
        [ -s "$f" ] || continue
        echo "# --- $f (last 15 lines)"
        tail -n 15 "$f" | tr -d '\r' | sed 's/^/#   /'
    done
}

echo "# device $device, QEMU $qemu, $migrations migrations"
qemu_start 0 "${socks[0]}"
if ! wait_for 300 "the guest's fio job to start (QEMU 0)" \
        grep -q "VBTEST-LOG: fio pass" "$VB_TMP/serial-0.log"; then
    show_logs
    vb_bail "the guest job did not start"
fi
vb_ok "guest boots on vhost-blkd socket a and fio runs"

cur=0
for m in $(seq 1 "$migrations"); do
    dst_sock=${socks[$((m % 2))]}
    qemu_start "$m" "$dst_sock" -incoming "unix:$VB_TMP/mig-$m.sock"
    if ! wait_for 120 "QEMU $m to wait for the incoming migration" \
            status_is "$m" inmigrate; then
        show_logs
        vb_bail "destination QEMU $m did not start"
    fi
    MIG_FAILED=0
    qmp "$cur" migrate-set-parameters \
        '{"max-bandwidth": 4294967296, "downtime-limit": 2000}' >/dev/null &&
    qmp "$cur" migrate "{\"uri\": \"unix:$VB_TMP/mig-$m.sock\"}" >/dev/null ||
        vb_bail "QMP migrate on QEMU $cur failed"
    if wait_for 600 "migration $m (QEMU $cur -> QEMU $m) to end" \
            migration_done "$cur" && [ $MIG_FAILED = 0 ] &&
       wait_for 120 "QEMU $m to run the guest" status_is "$m" running; then
        vb_ok "migration $m: QEMU $cur -> QEMU $m (disk on socket $(basename "$dst_sock")) completed, guest running"
    else
        show_logs
        vb_not_ok "migration $m: QEMU $cur -> QEMU $m"
        vb_done
        exit 1
    fi
    if grep -q "VBTEST-RESULT" "$VB_TMP/serial-$m.log" \
            "$VB_TMP/serial-$cur.log" 2>/dev/null; then
        show_logs
        vb_bail "the guest job ended during migration $m"
    fi
    qmp "$cur" quit >/dev/null
    wait "${QPIDS[$cur]}" 2>/dev/null
    cur=$m
done

# Stop the job: the pass running now, on the final destination, verifies.
{ printf VBSTOP; head -c 4090 /dev/zero; } > "$VB_TMP/stop.blk"
dd if="$VB_TMP/stop.blk" of="$img" bs=4096 seek=$((60 * 256)) conv=notrunc \
    oflag=direct status=none || vb_bail "cannot write the stop marker"
if ! wait_for 600 "the guest on QEMU $cur to finish" \
        grep -q "VBTEST-RESULT" "$VB_TMP/serial-$cur.log"; then
    show_logs
fi
wait "${QPIDS[$cur]}" 2>/dev/null
result=$(tr -d '\r' < "$VB_TMP/serial-$cur.log" | grep -a '^VBTEST-RESULT: ' | tail -n1)
passes=$(tr -d '\r' < "$VB_TMP/serial-$cur.log" | sed -n 's/^VBTEST-INFO: passes=//p')
vb_check_eq "fio verify passes finish on the final destination (QEMU $cur, ${passes:-?} passes in all)" \
    "$result" "VBTEST-RESULT: PASS"
[ "$result" = "VBTEST-RESULT: PASS" ] || show_logs
for i in 0 1; do
    vb_check "vhost-blkd $i logged dirty pages while the VM migrated" \
        grep -q "dirty logging on" "$VB_TMP/blkd-$i.log"
done
vb_done
