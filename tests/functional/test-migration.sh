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
# Before fio starts, during the first migration, the guest reads 64 KiB
# that the source's vhost-blkd holds back for 20 s (inject-delay): the
# migration starts slowly (8 MiB/s), the host lets the guest issue the read
# once dirty logging is on (a "go" marker in the image), waits until the
# read is in vhost-blkd, then lets the migration run at full speed with a
# 10 ms downtime limit, so QEMU copies all of the guest's memory before it
# stops the VM.  The stop waits for the read, whose data then lands in
# guest pages QEMU has already sent: only the dirty log makes QEMU send
# them again, so the guest's checksum of the read on the destination shows
# whether vhost-blkd logged what it wrote (a build without data logging
# fails here with the checksum of stale zeros).
#
# No result depends on timing: the guest job runs until the host stops it,
# every wait polls with a generous timeout and fails saying what it waited
# for, and every check holds for a correct daemon whatever the speed.  Only
# how sharp the held-read check is depends on the machine: on one so slow
# that more than 20 s pass between the read reaching vhost-blkd and the VM
# stopping, the read completes before the stop and the check proves less
# (it still passes).
#
# Usage: test-migration.sh [--device TYPE] [--device-opts OPTS] [--qemu BIN]
#   --device  vhost-user-blk-pci (default) or vhost-pci-blk-pci (the
#             fork's device, then --qemu must name the fork's binary)
#   --device-opts  appended to the -device (e.g. packed=on); with
#             packed=on the daemons must also report packed virtqueues
set -u
. "$(dirname "$0")/lib.sh"

device=vhost-user-blk-pci
devopts=
qemu=${VHOST_BLK_QEMU:-qemu-system-x86_64}
while [ $# -gt 0 ]; do
    case $1 in
    --device) device=$2; shift 2 ;;
    --device-opts) devopts=$2; shift 2 ;;
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
# the held read: 64 KiB of random data at 62 MiB (sectors 126976-127103)
head -c 65536 /dev/urandom > "$VB_TMP/held.bin"
dd if="$VB_TMP/held.bin" of="$img" bs=65536 seek=$((62 * 16)) conv=notrunc \
    status=none || vb_bail "cannot write the image"
held_md5=$(md5sum < "$VB_TMP/held.bin" | cut -d' ' -f1)
socks=("$VB_TMP/blkd-a.sock" "$VB_TMP/blkd-b.sock")
hold=(",inject-delay=20000,inject-sector=126976-127103,inject-count=1" "")
BLKD_PIDS=()
for i in 0 1; do
    vb_daemon_start "blkd-$i" "${socks[$i]}" "$BLKD" --log-level info \
        --export "socket=${socks[$i]},file=$img${hold[$i]}" ||
        vb_bail "vhost-blkd $i did not start"
    BLKD_PIDS[$i]=$VB_LAST_PID
done

# held_in_flight: vhost-blkd 0 has a request it has not completed (its
# SIGUSR1 counters: requests > completed), i.e. the held read is in it.
held_in_flight() {
    local line req done_
    kill -USR1 "${BLKD_PIDS[0]}" || return 1
    sleep 0.1
    line=$(grep "blkd-a.sock: .*requests [0-9]*, completed" "$VB_TMP/blkd-0.log" | tail -n1)
    req=$(echo "$line" | sed -n 's/.*requests \([0-9]*\), completed \([0-9]*\).*/\1/p')
    done_=$(echo "$line" | sed -n 's/.*requests \([0-9]*\), completed \([0-9]*\).*/\2/p')
    [ -n "$req" ] && [ "$req" -gt "$done_" ]
}

cmdline="console=ttyS0 quiet panic=-1 cryptomgr.notests mitigations=off no_timer_check"
cmdline+=" vbjob=fio-until-stop vbtimeout=900 vbsize=16M vbstopoff=60M"
cmdline+=" vbheldread=62M:65536 vbgooff=61M"
common=(-accel tcg -machine q35,memory-backend=vbmem
        -object "memory-backend-memfd,id=vbmem,size=$VB_MIG_MEM,share=on"
        -cpu max -smp 1 -m "$VB_MIG_MEM"
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
        -device "$device,chardev=vbdisk0,num-queues=1${devopts:+,$devopts}" \
        -serial "file:$VB_TMP/serial-$n.log" \
        -qmp "unix:$VB_TMP/qmp-$n.sock,server=on,wait=off" "$@" \
        2> "$VB_TMP/qemu-$n.err" &
    QPIDS[$n]=$!
}

# qmp N COMMAND [ARGUMENTS-JSON]: one QMP command on QEMU N's monitor;
# prints the reply (and any event before it) as JSON.
qmp() {
    local msg="{\"execute\": \"$2\"${3:+, \"arguments\": $3}}"
    "$QMP" "$VB_TMP/qmp-$1.sock" "$msg"
}

# wait_for SECS DESCRIPTION CMD...: poll CMD every 0.2 s until it succeeds.
# With QWATCH set to a QEMU number, give up as soon as that QEMU exited.
QWATCH=
wait_for() {
    local secs=$1 what=$2 n=0
    shift 2
    until "$@" >/dev/null 2>&1; do
        if [ -n "$QWATCH" ] && ! kill -0 "${QPIDS[$QWATCH]}" 2>/dev/null; then
            echo "# QEMU $QWATCH exited while waiting for: $what"
            return 1
        fi
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

cur=0
for m in $(seq 1 "$migrations"); do
    dst_sock=${socks[$((m % 2))]}
    QWATCH=$m
    qemu_start "$m" "$dst_sock" -incoming "unix:$VB_TMP/mig-$m.sock"
    if ! wait_for 120 "QEMU $m to wait for the incoming migration" \
            status_is "$m" inmigrate; then
        show_logs
        vb_bail "destination QEMU $m did not start"
    fi
    QWATCH=$cur
    if [ "$m" = 1 ]; then
        # the destination is ready: migrate as soon as the read is held
        if ! wait_for 300 "the guest job to start (QEMU 0)" \
                grep -q "VBTEST-LOG: waiting for go" "$VB_TMP/serial-0.log"; then
            show_logs
            vb_bail "the guest job did not start"
        fi
        vb_ok "guest boots on vhost-blkd socket a"
    elif ! wait_for 300 "fio to run on QEMU $cur" \
            grep -q "VBTEST-LOG: fio pass" "$VB_TMP/serial-$cur.log"; then
        show_logs
        vb_bail "fio did not start on QEMU $cur"
    fi
    QWATCH=$m
    MIG_FAILED=0
    bw=4294967296
    [ "$m" = 1 ] && bw=8388608     # slow until the read is held
    qmp "$cur" migrate-set-parameters \
        "{\"max-bandwidth\": $bw, \"downtime-limit\": 2000}" >/dev/null &&
    qmp "$cur" migrate "{\"uri\": \"unix:$VB_TMP/mig-$m.sock\"}" >/dev/null ||
        vb_bail "QMP migrate on QEMU $cur failed"
    if [ "$m" = 1 ]; then
        { printf VBGO; head -c 4092 /dev/zero; } > "$VB_TMP/go.blk"
        if ! wait_for 120 "dirty logging to start in vhost-blkd 0" \
                grep -q "dirty logging on" "$VB_TMP/blkd-0.log" ||
           ! dd if="$VB_TMP/go.blk" of="$img" bs=4096 seek=$((61 * 256)) \
                conv=notrunc oflag=direct status=none ||
           ! wait_for 120 "the guest's read to be held in vhost-blkd 0" \
                held_in_flight; then
            show_logs
            vb_bail "the held read did not start during migration 1"
        fi
        if grep -q '"status": "completed"' <(qmp "$cur" query-migrate); then
            echo "# migration 1 completed before the held read (not checked)"
        fi
        vb_ok "migration 1 started, dirty logging on, the guest's read held in vhost-blkd"
        # full speed, but a downtime limit so short that QEMU stops the VM
        # only after its first pass sent every page (the read's buffer
        # included) while the read is still held
        qmp "$cur" migrate-set-parameters \
            '{"max-bandwidth": 4294967296, "downtime-limit": 10}' \
            >/dev/null || vb_bail "QMP migrate-set-parameters failed"
    fi
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
QWATCH=

# Stop the job: the pass running now, on the final destination, verifies.
{ printf VBSTOP; head -c 4090 /dev/zero; } > "$VB_TMP/stop.blk"
dd if="$VB_TMP/stop.blk" of="$img" bs=4096 seek=$((60 * 256)) conv=notrunc \
    oflag=direct status=none || vb_bail "cannot write the stop marker"
# A guest that crashed never prints its result nor powers off: stop
# waiting at its oops, and kill its QEMU rather than wait on it.
if ! wait_for 600 "the guest on QEMU $cur to finish" \
        grep -q -e "VBTEST-RESULT" -e "Oops:" -e "Kernel panic" \
        "$VB_TMP/serial-$cur.log" ||
        ! grep -q "VBTEST-RESULT" "$VB_TMP/serial-$cur.log"; then
    show_logs
    kill -KILL "${QPIDS[$cur]}" 2>/dev/null
fi
wait "${QPIDS[$cur]}" 2>/dev/null
result=$(tr -d '\r' < "$VB_TMP/serial-$cur.log" | grep -a '^VBTEST-RESULT: ' | tail -n1)
passes=$(tr -d '\r' < "$VB_TMP/serial-$cur.log" | sed -n 's/^VBTEST-INFO: passes=//p')
vb_check_eq "fio verify passes finish on the final destination (QEMU $cur, ${passes:-?} passes in all)" \
    "$result" "VBTEST-RESULT: PASS"
[ "$result" = "VBTEST-RESULT: PASS" ] || show_logs
got_md5=$(cat "$VB_TMP"/serial-*.log | tr -d '\r' | sed -n 's/^VBTEST-INFO: heldread_md5=//p' | head -n1)
vb_check_eq "the read held in vhost-blkd across the stop of migration 1 has the image's data on the destination" \
    "${got_md5:-none}" "$held_md5"
for i in 0 1; do
    [ "$i" -lt "$migrations" ] || break    # daemon 1 is a source from migration 2
    vb_check "vhost-blkd $i logged dirty pages while the VM migrated" \
        grep -q "dirty logging on" "$VB_TMP/blkd-$i.log"
done
case ",$devopts," in
*,packed=on,*)
    for i in 0 1; do
        vb_check "vhost-blkd $i served packed virtqueues" \
            grep -q "negotiated: packed virtqueues" "$VB_TMP/blkd-$i.log"
    done ;;
esac
vb_done
