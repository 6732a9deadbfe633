#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Packed virtqueues with real Linux guests: stock QEMU's vhost-user-blk-pci
# with packed=on against vhost-blkd.  First that packed rings are really
# in use (the guest driver's negotiated feature bits and the daemon's log),
# then fio write+verify on 1 and 4 queues with every hardware queue used,
# discard and write-zeroes with the data checked on both sides, and a
# kill -9 of vhost-blkd in the middle of a write+verify job: the restarted
# daemon replays from the packed inflight region and the job verifies.
set -u
. "$(dirname "$0")/lib.sh"

vb_setup
BLKD=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"

blkd_start() {
    local name=$1 sock=$2
    shift 2
    vb_daemon_start "$name" "$sock" "$BLKD" --log-level info "$@"
}

# Bit 34 (VIRTIO_F_RING_PACKED) of the guest driver's feature string
# (/sys/bus/virtio/devices/*/features, bit 0 first).
guest_packed_bit() {
    local f
    f=$(vb_info_get features) || return 1
    [ "${f:34:1}" = 1 ]
}

# 1 and 4 queues: fio randwrite + verify; every hw queue completes I/O.
for nq in 1 4; do
    sock=$VB_TMP/packed-$nq.sock
    img=$(vb_mkimg "packed$nq" 256M)
    if ! blkd_start "packed-$nq" "$sock" --iothreads 2 \
            --export "socket=$sock,file=$img,num-queues=$nq"; then
        vb_not_ok "$nq queue(s): vhost-blkd starts"
        continue
    fi
    pid=$VB_LAST_PID
    vb_check "packed, $nq queue(s): fio randwrite + crc32c verify" \
        vb_guest -s "$sock" -q "$nq" -c "$nq" -o packed=on -j fio-verify \
        vbrw=randwrite vbsize=16M vbbs=4k vbiodepth=16 vbnumjobs="$nq" \
        vbfioargs=--cpus_allowed=0-$((nq - 1))+--cpus_allowed_policy=split \
        vbinfo=1
    vb_check "packed, $nq queue(s): the guest driver negotiated VIRTIO_F_RING_PACKED" \
        guest_packed_bit
    vb_check "packed, $nq queue(s): vhost-blkd runs packed virtqueues" \
        grep -q "negotiated: packed virtqueues" "$VB_TMP/packed-$nq.log"
    vb_check_info "packed, $nq queue(s): guest sees $nq hw queue(s)" nr_hw_queues "$nq"
    q=0
    while [ $q -lt "$nq" ]; do
        irqs=$(vb_info_get "hctx${q}_irqs")
        vb_check "packed, $nq queue(s): fio's I/O completed on hw queue $q (irqs=${irqs:-none})" \
            test "${irqs:-0}" -gt 50
        q=$((q + 1))
    done
    vb_stop "$pid"
done

# Discard and write-zeroes.
vb_check_discard "packed: " packed-dz "$BLKD" -o packed=on

# kill -9 during a guest write+verify job, restart: the job finishes and
# every block verifies.  QEMU 7.2 cannot fetch a packed ring's position
# from a dead back-end and sends its stale base again; the inflight region
# says where the ring is and what to replay.  As in test-vhost-blkd.sh
# every request is held 5 ms (inject-delay) so that the kill finds some in
# flight, and the daemon is killed up to four times until a restart
# reports a replay.
sock=$VB_TMP/packed-rc.sock
img=$(vb_mkimg packed-rc 256M)
rc_args=(--iothreads 2 --export "socket=$sock,file=$img,num-queues=2,aio=threads,inject-delay=5")
if blkd_start packed-rc0 "$sock" "${rc_args[@]}"; then
    vb_kill_restart_during_fio packed-rc "$sock" -o packed=on -- \
        "$BLKD" --log-level info "${rc_args[@]}"
    pid=$VB_LAST_PID
    restarted=$VB_RC_RESTARTED
    replayed=$VB_RC_REPLAYED
    vb_check "packed: vhost-blkd restarts on the same socket after kill -9" \
        test "$restarted" = 1
    vb_check "packed: kill -9 + restart during fio: the guest job finishes and verifies" \
        wait "$VB_GUEST_PID"
    vb_check "packed: the restarted daemons ran packed virtqueues" \
        grep -q "negotiated: packed virtqueues" "$VB_TMP/packed-rc1.log"
    vb_check "packed: a restarted daemon replayed QEMU's in-flight requests ($(cat "$VB_TMP"/packed-rc*.log | grep -h -o 'resubmitting [0-9]*' | tr '\n' ' '))" \
        test "$replayed" = 1
    vb_stop "$pid"
else
    vb_not_ok "packed reconnect: vhost-blkd starts"
fi

vb_done
