#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# query-named-block-nodes over qcow2 backing chains, as qemu-storage-daemon
# 7.2 answers it (QSD is the oracle): the same node graph is opened in
# vhost-blkd, then in QSD, and compare-nodes.py checks the two replies key
# by key.  Graphs: a qcow2 overlay over a qcow2 base named relatively; a
# chain of two qcow2 images over a raw base; a backing node given by name
# (backing=NODE); vhost-blkd's own --export file=,format=qcow2.  No guest.
set -u
. "$(dirname "$0")/lib.sh"

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
command -v qemu-img > /dev/null ||
    vb_bail "qemu-img is missing (Debian: qemu-utils; scripts/install-deps.sh)"
command -v qemu-storage-daemon > /dev/null ||
    vb_bail "qemu-storage-daemon is missing (Debian: qemu-system-x86)"
QMP="python3 $VB_FUNC/qmp.py"
CMP="python3 $VB_FUNC/compare-nodes.py"
D=$VB_TMP

# Chain A: a.qcow2 -> a-base.qcow2 (named relative to the overlay).
# Chain B: b.qcow2 -> b-mid.qcow2 -> b-base.raw (depth 2, raw at the end).
# Chain C: c.qcow2 over the node cb (c-base.qcow2), given by name.
qemu-img create -q -f qcow2 "$D/a-base.qcow2" 64M
(cd "$D" && qemu-img create -q -f qcow2 -b a-base.qcow2 -F qcow2 a.qcow2)
truncate -s 32M "$D/b-base.raw"
qemu-img create -q -f qcow2 -b "$D/b-base.raw" -F raw "$D/b-mid.qcow2"
qemu-img create -q -f qcow2 -o cluster_size=4096 -b "$D/b-mid.qcow2" \
    -F qcow2 "$D/b.qcow2"
qemu-img create -q -f qcow2 -o compat=0.10 "$D/c-base.qcow2" 16M
qemu-img create -q -f qcow2 -b "$D/c-base.qcow2" -F qcow2 "$D/c.qcow2" 16M
# Something in the images, so that the sizes are not all alike.
qemu-io -f qcow2 -c "write -P 0x5a 0 1M" "$D/a-base.qcow2" > /dev/null
qemu-io -f qcow2 -c "write -P 0xa5 1M 64k" "$D/a.qcow2" > /dev/null

graph=(
    --blockdev "driver=file,node-name=fa,filename=$D/a.qcow2"
    --blockdev "driver=qcow2,node-name=qa,file=fa"
    --blockdev "driver=file,node-name=fb,filename=$D/b.qcow2"
    --blockdev "driver=qcow2,node-name=qb,file=fb"
    --blockdev "driver=file,node-name=fcb,filename=$D/c-base.qcow2,read-only=on"
    --blockdev "driver=qcow2,node-name=cb,file=fcb,read-only=on"
    --blockdev "driver=file,node-name=fc,filename=$D/c.qcow2"
    --blockdev "driver=qcow2,node-name=qc,file=fc,backing=cb"
)

# query NAME CMD...: run CMD (a daemon with a monitor on $D/NAME.qmp),
# save its query-named-block-nodes reply in $D/NAME.json, stop it.
query() {
    local name=$1
    shift
    if ! vb_daemon_start "$name" "$D/$name.qmp" "$@" \
            --chardev "socket,id=m,path=$D/$name.qmp,server=on,wait=off" \
            --monitor chardev=m; then
        return 1
    fi
    $QMP "$D/$name.qmp" '{"execute": "query-named-block-nodes"}' \
        > "$D/$name.json"
    local rc=$?
    vb_stop "$VB_LAST_PID"
    return $rc
}

# same NAME [--implicit-free PATH]...: vhost-blkd's reply ($D/NAME-vb.json)
# and QSD's agree.
same() {
    local out name=$1
    shift
    if out=$($CMP "$@" "$D/$name-vb.json" "$D/$name-qsd.json" 2>&1); then
        vb_ok "$name: vhost-blkd's query-named-block-nodes is QSD's ($(tail -n1 <<< "$out"))"
    else
        vb_not_ok "$name: vhost-blkd's query-named-block-nodes is QSD's" "$out"
    fi
}

# The daemons run one after the other: each takes the images' locks.
if query graph-vb "$blkd" "${graph[@]}" &&
        query graph-qsd qemu-storage-daemon "${graph[@]}"; then
    same graph
    # Beyond the comparison: what a reader of the reply relies on.
    vb_check "graph: every level of chain B is a node of its own (2 + 4 implicit)" \
        python3 -c 'import json,sys
r = {n["node-name"]: n for n in json.load(open(sys.argv[1]))["return"]}
sys.exit(0 if r["qb"]["backing_file_depth"] == 2 and
         r["#qb-backing1"]["drv"] == "qcow2" and
         r["#qb-backing1"]["backing_file_depth"] == 1 and
         r["#qb-backing2"]["drv"] == "raw" and
         r["#qb-backing2-file"]["file"] == sys.argv[2] else 1)' \
        "$D/graph-vb.json" "$D/b-base.raw"
else
    vb_not_ok "graph: both daemons answer query-named-block-nodes" \
        "$(cat "$D"/graph-*.log)"
fi

# vhost-blkd's own syntax against QSD's spelling of the same graph (its
# file node is NODE-file; cache=none, the default, is cache.direct=on).
# One deliberate difference: vhost-blkd reads the backing files it opens
# itself through the page cache (several overlays may share a base), where
# QEMU passes cache.direct on to them.
if query own-vb "$blkd" \
        --export "socket=$D/own.sock,file=$D/a.qcow2,format=qcow2,id=e0,node-name=qa" &&
        query own-qsd qemu-storage-daemon \
        --blockdev "driver=file,node-name=qa-file,filename=$D/a.qcow2,cache.direct=on" \
        --blockdev "driver=qcow2,node-name=qa,file=qa-file,cache.direct=on"; then
    same own --implicit-free cache.direct
else
    vb_not_ok "own: both daemons answer query-named-block-nodes" \
        "$(cat "$D"/own-*.log)"
fi

vb_done
