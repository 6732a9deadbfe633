#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# QoS syntax and control without a guest: vhost-blkd's --export limits and
# qemu-storage-daemon's --object throttle-group / --blockdev
# driver=throttle (keyval and JSON) start; vhost-blk-ctl throttle shows and
# changes a group's and an export's limits (qom-set / qom-get underneath);
# the errors a user can make (negative limit, unknown group, burst below
# the average, total with read) say what is wrong and what to do; and
# vhost-blk-bench through a throttled export never beats the bound
# (R * t + R / 10 + 1 requests in t seconds).
set -u
. "$(dirname "$0")/lib.sh"

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
ctl=$(vb_bin vhost-blk-ctl) || vb_bail "vhost-blk-ctl is not built in $VHOST_BLK_BUILD"
bench=$(vb_bin vhost-blk-bench) || vb_bail "vhost-blk-bench is not built in $VHOST_BLK_BUILD"
out=$VB_TMP/out.txt
export VHOST_BLK_CTL_SOCKET=$VB_TMP/mon.qmp

# run NAME WANT_STATUS CMD...: run CMD, output in $out; check its status.
run() {
    local name=$1 want=$2 rc
    shift 2
    "$@" > "$out" 2>&1
    rc=$?
    sed 's/^/#   /' "$out"
    vb_check_eq "$name (exit $want)" "$rc" "$want"
}

# --- start-up errors -------------------------------------------------------
run "--export iops-total=-5 is refused" 1 \
    "$blkd" --export "socket=$VB_TMP/x.sock,driver=null,size=1M,iops-total=-5"
vb_check "  ...saying what a valid value is" grep -q "use a number >= 0 (0: no limit)" "$out"
run "--export iops-total-max below iops-total is refused" 1 \
    "$blkd" --export "socket=$VB_TMP/x.sock,driver=null,size=1M,iops-total=100,iops-total-max=50"
vb_check "  ...saying what to raise or lower" grep -q "raise iops-total-max or lower iops-total" "$out"
run "--export iops-total with iops-read is refused" 1 \
    "$blkd" --export "socket=$VB_TMP/x.sock,driver=null,size=1M,iops-total=100,iops-read=50"
vb_check "  ...as QEMU refuses it" grep -q "cannot be combined" "$out"
run "--export throttle-group=NAME of no group is refused" 1 \
    "$blkd" --export "socket=$VB_TMP/x.sock,driver=null,size=1M,throttle-group=nope"
vb_check "  ...saying how to add it" grep -q "add --object throttle-group,id=nope" "$out"
run "--blockdev driver=throttle with an unknown group is refused" 1 \
    "$blkd" --blockdev driver=null-co,node-name=n0 \
    --blockdev driver=throttle,node-name=t0,throttle-group=nope,file=n0 \
    --export "socket=$VB_TMP/x.sock,driver=null,size=1M"
vb_check "  ...saying to add it first" grep -q "Throttle group 'nope' not found: add it first" "$out"
run "--object throttle-group with a negative limit is refused" 1 \
    "$blkd" --object throttle-group,id=tg0,limits.iops-total=-1 \
    --export "socket=$VB_TMP/x.sock,driver=null,size=1M"
vb_check "  ...saying it must not be negative" grep -q "must not be negative" "$out"
run "x-* and limits.* together are refused" 1 \
    "$blkd" --object throttle-group,id=tg0,limits.iops-total=1,x-bps-total=5 \
    --export "socket=$VB_TMP/x.sock,driver=null,size=1M"
vb_check "  ...saying to use one form" grep -q "not both" "$out"

# --- a daemon with both syntaxes -------------------------------------------
mport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if vb_daemon_start qos "$VB_TMP/own.sock" "$blkd" --log-level info \
        --metrics "127.0.0.1:$mport" \
        --object throttle-group,id=tg0,limits.iops-total=2000,limits.bps-read=10485760 \
        --object '{"qom-type": "throttle-group", "id": "tg1", "x-iops-total": 500, "x-iops-total-max": 1000, "x-iops-total-max-length": 4}' \
        --blockdev driver=null-co,node-name=n0,size=1073741824 \
        --blockdev driver=throttle,node-name=t0,throttle-group=tg0,file=n0 \
        --blockdev '{"driver": "null-co", "node-name": "n1", "size": 1073741824}' \
        --blockdev '{"driver": "throttle", "node-name": "t1", "throttle-group": "tg1", "file": "n1"}' \
        --export "type=vhost-user-blk,id=e0,node-name=t0,addr.type=unix,addr.path=$VB_TMP/e0.sock,writable=on" \
        --export "type=vhost-user-blk,id=e1,node-name=t1,addr.type=unix,addr.path=$VB_TMP/e1.sock,writable=on" \
        --chardev "socket,id=mon,path=$VB_TMP/mon.qmp,server=on,wait=off" --monitor chardev=mon \
        --export "socket=$VB_TMP/own.sock,driver=null,size=1G,id=own,iops-total=100,iops-size=8192"; then
    pid=$VB_LAST_PID
    vb_ok "vhost-blkd starts with throttle groups, throttle nodes and --export limits"

    run "ctl throttle tg0 shows the group's limits" 0 "$ctl" throttle tg0
    vb_check_eq "  ...exactly" "$(cat "$out")" "tg0: bps-read=10485760 iops-total=2000"
    run "ctl throttle tg1 (JSON x-* form)" 0 "$ctl" throttle tg1
    vb_check_eq "  ...with the burst" "$(cat "$out")" \
        "tg1: iops-total=500 iops-total-max=1000 iops-total-max-length=4"
    run "ctl throttle own shows an export's own limits" 0 "$ctl" throttle own
    vb_check_eq "  ...exactly" "$(cat "$out")" "own: iops-total=100 iops-size=8192"
    run "ctl throttle tg0 --iops-total 500 changes one limit" 0 \
        "$ctl" throttle tg0 --iops-total 500
    vb_check_eq "  ...and keeps the others" "$(cat "$out")" "tg0: bps-read=10485760 iops-total=500"
    run "ctl throttle tg0 --bps-read=0 lifts a limit" 0 "$ctl" throttle tg0 --bps-read=0
    vb_check_eq "  ...leaving the other" "$(cat "$out")" "tg0: iops-total=500"
    run "ctl throttle tg0 --iops-total-max 100 (below 500) fails" 1 \
        "$ctl" throttle tg0 --iops-total-max 100
    vb_check "  ...with what to do" grep -q "raise iops-total-max or lower iops-total" "$out"
    run "ctl throttle tg0 --iops-total -1 is bad usage" 2 "$ctl" throttle tg0 --iops-total -1
    run "ctl throttle tg0 --iops-totl 1 is bad usage" 2 "$ctl" throttle tg0 --iops-totl 1
    vb_check "  ...listing the limits" grep -q "use --iops-total" "$out"
    run "ctl throttle nope fails" 1 "$ctl" throttle nope
    vb_check "  ...saying there is no such group or export" grep -q "no throttle group" "$out"
    run "qom-get of an x-* property" 0 "$ctl" qmp qom-get '{"path": "/objects/tg1", "property": "x-iops-total-max"}'
    vb_check_eq "  ...its value" "$(cat "$out")" "1000"
    run "qom-set of an x-* property" 0 "$ctl" qmp qom-set '{"path": "tg1", "property": "x-iops-total", "value": 800}'
    run "ctl throttle tg1 after it" 0 "$ctl" throttle tg1
    vb_check_eq "  ...shows it" "$(cat "$out")" \
        "tg1: iops-total=800 iops-total-max=1000 iops-total-max-length=4"
    run "blockdev-del of a node under a throttle node fails" 1 \
        "$ctl" qmp blockdev-del '{"node-name": "n1"}'
    vb_check "  ...saying which node to delete first" grep -q "the throttle node 't1' is on top" "$out"

    # The bound, on the export's own limit: 100 IOPS, 8 KiB each counts 1.
    start=$(date +%s%N)
    run "vhost-blk-bench through the 100-IOPS export" 0 \
        "$bench" --socket "$VB_TMP/own.sock" --rw randread --bs 4k --iodepth 8 --ios 150
    ns=$(( $(date +%s%N) - start ))
    vb_check "  ...150 requests took long enough: 150 <= 100 x $((ns / 1000000)) ms + 11" \
        test 150 -le $(( 100 * ns / 1000000000 + 11 ))
    run "query-blockstats has throttled/throttled-ns per export" 0 \
        "$ctl" qmp query-blockstats
    vb_check "  ...the throttled export's count" python3 -c '
import json, sys
st = {e["qdev"]: e["stats"] for e in json.load(open(sys.argv[1]))}
own = st["own"]
sys.exit(not (own["throttled"] >= 150 - int(sys.argv[2]) and own["throttled-ns"] > 0
              and st["e0"]["throttled"] == 0))' "$out" $(( 100 * ns / 1000000000 + 11 ))
    vb_check "  ...and /metrics gives the same throttled counts" python3 -c '
import json, re, sys, urllib.request
st = {e["qdev"]: e["stats"] for e in json.load(open(sys.argv[1]))}
page = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[2]).read().decode()
def val(name, exp):
    m = re.search(r"^%s\{export=\"%s\"\} (\S+)$" % (name, exp), page, re.M)
    return float(m.group(1)) if m else None
ok = (val("vhost_blk_throttled_requests_total", "own") == st["own"]["throttled"]
      and val("vhost_blk_throttled_requests_total", "e0") == 0
      and val("vhost_blk_throttled_seconds_total", "own") > 0
      and val("vhost_blk_throttle_waiting", "own") == 0)
sys.exit(not ok)' "$out" "$mport"
    vb_stop "$pid"
else
    vb_not_ok "vhost-blkd starts with throttle groups, throttle nodes and --export limits"
fi
vb_done
