#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Real Linux guests (stock QEMU, TCG) against vhost-blkd managed over QMP,
# started with qemu-storage-daemon's command line:
# - block_resize while fio verifies: QEMU gets CONFIG_CHANGE_MSG, raises
#   the config interrupt, the guest's /sys/block/vda/size grows, and data
#   written past the old end verifies;
# - exports added and deleted at run time (vb-io doing verified I/O on
#   each) while another export's guest keeps running fio verify.
set -u
. "$(dirname "$0")/lib.sh"

vb_setup
BLKD=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
VBIO=$(vb_bin vb-io) || vb_bail "vb-io is not built in $VHOST_BLK_BUILD"
QMP="python3 $VB_FUNC/qmp.py"

# blkd_qsd NAME IMG: vhost-blkd with QSD's options and a monitor at
# $VB_TMP/NAME.qmp; export "e" of node "f" at $VB_TMP/NAME.sock.
blkd_qsd() {
    local name=$1 img=$2
    vb_daemon_start "$name" "$VB_TMP/$name.sock" "$BLKD" \
        --chardev "socket,id=mon,path=$VB_TMP/$name.qmp,server=on,wait=off" \
        --monitor chardev=mon \
        --blockdev "driver=file,node-name=f,filename=$img,cache.direct=on" \
        --export "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path=$VB_TMP/$name.sock,writable=on,num-queues=1"
}

# wait_console LOG TEXT SECONDS PID: wait for TEXT on the guest console.
wait_console() {
    local n=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        kill -0 "$4" 2>/dev/null || return 1
        [ $n -ge $(($3 * 10)) ] && return 1
        sleep 0.1
        n=$((n + 1))
    done
}

# ---- resize while fio runs
img=$(vb_mkimg grow 64M)
new=$((96 * 1024 * 1024))
if blkd_qsd grow "$img"; then
    pid=$VB_LAST_PID
    vb_guest_bg -s "$VB_TMP/grow.sock" -j resize -t 240 \
        vbsize=16M vbruntime=20 vbnewsize=$new
    log=$VB_TMP/guest-$VB_GUEST_N.log
    if wait_console "$log" "VBTEST-LOG: resize-ready" 200 "$VB_GUEST_PID"; then
        vb_check "block_resize over QMP while the guest runs fio" \
            $QMP "$VB_TMP/grow.qmp" \
            "{\"execute\": \"block_resize\", \"arguments\": {\"node-name\": \"f\", \"size\": $new}}"
    else
        vb_not_ok "the guest got ready for the resize" "see $log"
    fi
    wait "$VB_GUEST_PID"
    vb_check_eq "guest: fio verify during the resize, then 8M past the old end" \
        "$?" 0
    vb_check_info "guest: size before (sectors)" size_before 131072
    vb_check_info "guest: size after (sectors)" size_after $((new / 512))
    vb_check_info "guest: fio was running when the size changed" \
        fio_running_at_resize 1
    vb_check_eq "the image file grew" "$(stat -c %s "$img")" "$new"
    vb_check "vhost-blkd sent CONFIG_CHANGE_MSG" \
        grep -q '"config-change-messages": 1' <($QMP "$VB_TMP/grow.qmp" \
            '{"execute": "x-query-vhost-blk-stats"}' | python3 -c \
            'import json,sys; print(json.dumps(json.loads(sys.stdin.readline())["return"]["exports"][0]))')
    vb_stop "$pid"
else
    vb_not_ok "vhost-blkd starts with a monitor"
fi

# ---- run-time exports beside a guest running fio verify
img=$(vb_mkimg busy 64M)
if blkd_qsd busy "$img"; then
    pid=$VB_LAST_PID
    vb_guest_bg -s "$VB_TMP/busy.sock" -j fio-verify -t 240 \
        vbrw=randwrite vbsize=16M vbbs=4k vbiodepth=16 vbruntime=20 \
        vbfioargs=--time_based+--verify_backlog=256
    log=$VB_TMP/guest-$VB_GUEST_N.log
    ok=1
    if wait_console "$log" "VBTEST-LOG: fio" 200 "$VB_GUEST_PID"; then
        for i in 1 2 3; do
            side=$(vb_mkimg "side$i" 16M)
            s="$VB_TMP/side$i.sock"
            $QMP "$VB_TMP/busy.qmp" \
                "{\"execute\": \"blockdev-add\", \"arguments\": {\"driver\": \"file\", \"node-name\": \"n$i\", \"filename\": \"$side\"}}" \
                "{\"execute\": \"block-export-add\", \"arguments\": {\"type\": \"vhost-user-blk\", \"id\": \"x$i\", \"node-name\": \"n$i\", \"writable\": true, \"addr\": {\"type\": \"unix\", \"path\": \"$s\"}}}" \
                > "$VB_TMP/add$i.out" || ok=0
            "$VBIO" "$s" write:0:1M:$i read:0:1M:$i flush > "$VB_TMP/io$i.out" 2>&1 || ok=0
            $QMP "$VB_TMP/busy.qmp" \
                "{\"execute\": \"block-export-del\", \"arguments\": {\"id\": \"x$i\"}}" \
                "{\"execute\": \"blockdev-del\", \"arguments\": {\"node-name\": \"n$i\"}}" \
                > "$VB_TMP/del$i.out" || ok=0
            grep -q BLOCK_EXPORT_DELETED "$VB_TMP/del$i.out" || ok=0
            [ -e "$s" ] && ok=0
        done
        vb_check_eq "3 exports added, used and deleted over QMP during fio" "$ok" 1
    else
        vb_not_ok "the guest started fio" "see $log"
    fi
    wait "$VB_GUEST_PID"
    vb_check_eq "the other guest's fio verify ran undisturbed" "$?" 0
    vb_stop "$pid"
else
    vb_not_ok "vhost-blkd starts with a monitor"
fi

vb_done
