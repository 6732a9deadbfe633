#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# qemu-storage-daemon's raw format node (--blockdev driver=raw over a
# protocol node) in vhost-blkd, no guest: the three syntaxes (file=NODE,
# dotted inline file.driver=..., a JSON inline object) on the command line
# and over QMP; vhost-blk-bench --verify through each raw export; the
# node graph in query-named-block-nodes; blockdev-del of a busy child
# (refused) and of a raw node (its implicit child goes with it);
# read-only raw over a writable child; one export per image; offset/size
# and vmdk refused with their messages; an inline file under throttle.
set -u
. "$(dirname "$0")/lib.sh"

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
bench=$(vb_bin vhost-blk-bench) || vb_bail "vhost-blk-bench is not built in $VHOST_BLK_BUILD"
QMP="python3 $VB_FUNC/qmp.py"
S=$VB_TMP

# bench_verify NAME SOCK: an exact count of verified random I/O.
bench_verify() {
    local out
    # stderr apart: the bench may warn about its own CPU use there.
    if out=$("$bench" --socket "$2" --json --ios 2000 --rw randrw \
            --iodepth 8 --verify 2> "$VB_TMP/bench.err"); then
        if python3 -c 'import json,sys; r=json.loads(sys.argv[1]);
sys.exit(0 if r["ios"] == 2000 and r["errors"] == 0 and
         r["verify_errors"] == 0 else 1)' "$out"; then
            vb_ok "$1"
        else
            vb_not_ok "$1" "$out"
        fi
    else
        vb_not_ok "$1" "$out $(cat "$VB_TMP/bench.err")"
    fi
}

# qmp_err NAME WANT CMD: CMD fails with an error whose desc has WANT.
qmp_err() {
    local out
    out=$($QMP "$S/m.qmp" "$3" 2>&1)
    if [ $? -ne 0 ] && grep -qF -- "$2" <<< "$out"; then
        vb_ok "$1"
    else
        vb_not_ok "$1" "$out"
    fi
}

# qmp_ok NAME CMD...: every command succeeds.
qmp_ok() {
    local name=$1 out
    shift
    if out=$($QMP "$S/m.qmp" "$@" 2>&1); then
        vb_ok "$name"
    else
        vb_not_ok "$name" "$out"
    fi
}

# nodes EXPR: a Python expression over query-named-block-nodes (n, a dict
# by node-name) holds.
nodes() {
    local name=$1 expr=$2 out
    out=$($QMP "$S/m.qmp" '{"execute": "query-named-block-nodes"}')
    if python3 -c 'import json,sys
r = json.loads(sys.argv[1])["return"]
n = {x["node-name"]: x for x in r}
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$out" "$expr"; then
        vb_ok "$name"
    else
        vb_not_ok "$name" "$out"
    fi
}

for i in 0 1 2 3 4 5 6; do
    eval "img$i=\$(vb_mkimg raw$i 16M)"
done
# shellcheck disable=SC2154
if vb_daemon_start blkd "$S/e0.sock" "$blkd" \
        --blockdev "driver=file,node-name=f0,filename=$img0" \
        --blockdev "driver=raw,node-name=r0,file=f0" \
        --blockdev "driver=raw,node-name=r2,file.driver=file,file.filename=$img2" \
        --blockdev "{\"driver\": \"raw\", \"node-name\": \"r1\", \"file\": {\"driver\": \"file\", \"filename\": \"$img1\"}}" \
        --export "type=vhost-user-blk,id=e1,node-name=r1,addr.type=unix,addr.path=$S/e1.sock,writable=on" \
        --export "type=vhost-user-blk,id=e2,node-name=r2,addr.type=unix,addr.path=$S/e2.sock,writable=on" \
        --chardev "socket,id=mon,path=$S/m.qmp,server=on,wait=off" \
        --monitor chardev=mon \
        --export "type=vhost-user-blk,id=e0,node-name=r0,addr.type=unix,addr.path=$S/e0.sock,writable=on"; then
    vb_ok "vhost-blkd starts with QSD's driver=raw nodes (file=NODE, dotted, JSON)"
else
    vb_not_ok "vhost-blkd starts with QSD's driver=raw nodes (file=NODE, dotted, JSON)"
    vb_done
    exit 1
fi
vb_wait_socket "$S/m.qmp" 10 "$VB_LAST_PID" || vb_not_ok "QMP socket appears"

bench_verify "bench --verify through raw over a named file node (CLI)" "$S/e0.sock"
bench_verify "bench --verify through raw, JSON inline file (CLI)" "$S/e1.sock"
bench_verify "bench --verify through raw, dotted inline file (CLI)" "$S/e2.sock"
# What went through r0 is in the image f0 opened.
vb_check "the writes through the raw node reach the image" \
    test "$(od -An -v -tx1 "$img0" | tr -d ' \n' | tr -d 0 | head -c 1)" != ""

nodes "query-named-block-nodes: r0 is drv raw over f0, ro off" \
    'n["r0"]["drv"] == "raw" and n["r0"]["x-file-node-name"] == "f0" and
     n["r0"]["image"]["format"] == "raw" and not n["r0"]["ro"] and
     n["r0"]["image"]["children"][0]["name"] == "file" and
     n["r0"]["image"]["children"][0]["info"]["format"] == "file" and
     n["r0"]["image"]["virtual-size"] == 16 << 20 and n["f0"]["drv"] == "file"'
nodes "query-named-block-nodes: inline children are implicit #block nodes" \
    'n["r1"]["x-file-node-name"].startswith("#block") and
     n["r2"]["x-file-node-name"].startswith("#block") and
     n[n["r1"]["x-file-node-name"]]["file"] == "'"$img1"'" and
     n[n["r2"]["x-file-node-name"]]["drv"] == "file"'

qmp_err "blockdev-del of a raw node's child: in use" \
    "Block device f0 is in use: the raw node 'r0'" \
    '{"execute": "blockdev-del", "arguments": {"node-name": "f0"}}'
qmp_err "exporting the child of an exported raw node is refused" \
    "exported already by 'e0'" \
    '{"execute": "block-export-add", "arguments": {"type": "vhost-user-blk", "id": "x0", "node-name": "f0", "addr": {"type": "unix", "path": "'"$S/x0.sock"'"}}}'

# QMP blockdev-add: by name and inline.
qmp_ok "QMP blockdev-add raw over a named file node" \
    '{"execute": "blockdev-add", "arguments": {"driver": "file", "node-name": "f3", "filename": "'"$img3"'"}}' \
    '{"execute": "blockdev-add", "arguments": {"driver": "raw", "node-name": "q3", "file": "f3"}}'
qmp_ok "QMP blockdev-add raw with an inline file, and its export" \
    '{"execute": "blockdev-add", "arguments": {"driver": "raw", "node-name": "q4", "file": {"driver": "file", "filename": "'"$img4"'"}}}' \
    '{"execute": "block-export-add", "arguments": {"type": "vhost-user-blk", "id": "e4", "node-name": "q4", "writable": true, "addr": {"type": "unix", "path": "'"$S/e4.sock"'"}}}'
bench_verify "bench --verify through raw added by QMP" "$S/e4.sock"
qmp_ok "QMP: block-export-del, blockdev-del of the raw node" \
    '{"execute": "block-export-del", "arguments": {"id": "e4"}}'
# block-export-del returns before the export has gone (its client may
# still be leaving): poll query-block-exports until it is not listed.
for _ in $(seq 100); do
    $QMP "$S/m.qmp" '{"execute": "query-block-exports"}' | grep -q '"e4"' || break
    sleep 0.1
done
q4child=$($QMP "$S/m.qmp" '{"execute": "query-named-block-nodes"}' |
    python3 -c 'import json,sys; print({x["node-name"]: x for x in json.load(sys.stdin)["return"]}["q4"]["x-file-node-name"])')
qmp_ok "QMP blockdev-del of raw nodes" \
    '{"execute": "blockdev-del", "arguments": {"node-name": "q4"}}' \
    '{"execute": "blockdev-del", "arguments": {"node-name": "q3"}}'
nodes "blockdev-del of a raw node drops its implicit child, not a named one" \
    '"q4" not in n and "'"$q4child"'" not in n and "q3" not in n and "f3" in n'
qmp_ok "the named child can be deleted once its raw node is gone" \
    '{"execute": "blockdev-del", "arguments": {"node-name": "f3"}}'

# read-only: raw read-only=on over a writable child serves read-only.
qmp_ok "QMP blockdev-add read-only raw over a writable file node" \
    '{"execute": "blockdev-add", "arguments": {"driver": "file", "node-name": "f5", "filename": "'"$img5"'"}}' \
    '{"execute": "blockdev-add", "arguments": {"driver": "raw", "node-name": "q5", "read-only": true, "file": "f5"}}'
nodes "the read-only raw node reports ro, its child not" \
    'n["q5"]["ro"] and not n["f5"]["ro"]'
qmp_err "a writable export of a read-only raw node is refused" \
    "Block node is read-only" \
    '{"execute": "block-export-add", "arguments": {"type": "vhost-user-blk", "id": "e5", "node-name": "q5", "writable": true, "addr": {"type": "unix", "path": "'"$S/e5.sock"'"}}}'
qmp_err "a writable raw over a read-only child is refused" \
    "Block node is read-only" \
    '{"execute": "blockdev-add", "arguments": {"driver": "raw", "node-name": "q6", "file": {"driver": "file", "filename": "'"$img6"'", "read-only": true}}}'
nodes "a refused raw node leaves no implicit child behind" \
    'not any(k.startswith("#block") and v["file"] == "'"$img6"'" for k, v in n.items())'
qmp_err "raw offset is refused with a clear error" \
    "raw: offset/size are not supported; export the whole image" \
    '{"execute": "blockdev-add", "arguments": {"driver": "raw", "node-name": "q7", "offset": 4096, "file": "f5"}}'
qmp_err "vmdk is refused, telling its users to convert" \
    "convert the image with qemu-img convert -O qcow2" \
    '{"execute": "blockdev-add", "arguments": {"driver": "vmdk", "node-name": "q8", "file": "f5"}}'

qmp_err "QMP: an inline rbd file is refused (it would block the monitor)" \
    "an inline driver=rbd file is not supported in QMP" \
    '{"execute": "blockdev-add", "arguments": {"driver": "raw", "node-name": "q9", "file": {"driver": "rbd", "pool": "p", "image": "i"}}}'

# throttle takes an inline file too.
qmp_ok "QMP blockdev-add throttle with an inline file" \
    '{"execute": "object-add", "arguments": {"qom-type": "throttle-group", "id": "tg0", "limits": {"iops-total": 100000}}}' \
    '{"execute": "blockdev-add", "arguments": {"driver": "throttle", "node-name": "t6", "throttle-group": "tg0", "file": {"driver": "file", "filename": "'"$img6"'"}}}'
nodes "the throttle node's inline file is an implicit node" \
    'n[n["t6"]["x-file-node-name"]]["file"] == "'"$img6"'"'
qmp_ok "QMP blockdev-del of the throttle node" \
    '{"execute": "blockdev-del", "arguments": {"node-name": "t6"}}'
nodes "its implicit child went with it" \
    'not any(v["file"] == "'"$img6"'" for v in n.values())'

vb_stop "$VB_LAST_PID"

# The command line refuses offset/size at start-up with the message.
out=$("$blkd" --blockdev "driver=raw,node-name=r9,offset=512,file.driver=file,file.filename=$img6" \
    --export "type=vhost-user-blk,id=e9,node-name=r9,addr.type=unix,addr.path=$S/e9.sock" 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -qF "raw: offset/size are not supported" <<< "$out"; then
    vb_ok "--blockdev driver=raw,offset= fails at start-up with the message"
else
    vb_not_ok "--blockdev driver=raw,offset= fails at start-up with the message" "rc $rc: $out"
fi
vb_done
