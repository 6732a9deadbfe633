#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Start, stop and describe a throw-away single-node Ceph cluster on loopback
# for the RBD tests and benchmarks: one monitor, one BlueStore OSD on a sparse
# file, pool "rbd" with one replica.  No systemd, no mgr, nothing outside its
# directory.
#
# Usage: scripts/ceph-cluster.sh start|stop|status|env|osd-stop|osd-start
#
#   start      install Ceph if missing (scripts/install-deps.sh), create the
#              cluster on first use and start it; a no-op when it already runs.
#              Prints the path of its ceph.conf.
#   stop       stop the OSD, then the monitor (by pid file), and delete the
#              cluster's directory unless VB_CEPH_KEEP=1.
#   status     "running" / "stopped" per daemon, plus pool usage; exit 0 only
#              if both run.
#   env        shell lines to eval: CEPH_CONF, the monitor address and the
#              key files, e.g.  eval "$(scripts/ceph-cluster.sh env)"
#   osd-stop   stop just the OSD (SIGTERM: it tells the monitor it goes down),
#   osd-start  and start it again; for tests of an OSD that goes away.
#
# Environment:
#   VB_CEPH_DIR       the cluster's directory (default /var/tmp/vhost-blk-ceph);
#                     one directory = one cluster, so tests that must not share
#                     a cluster with anyone give their own.
#   VB_CEPH_PORT      the monitor's msgr2 port on 127.0.0.1 (default: the first
#                     free port from 33000 up, fixed when the cluster is made)
#   VB_CEPH_OSD_SIZE  size of the OSD's sparse block file (default 16G)
#   VB_CEPH_KEEP=1    keep the directory on stop (logs, the data)
#
# Theory of operation: the whole cluster is described by $VB_CEPH_DIR/ceph.conf
# (every path, the pid files, the admin sockets, the logs and the keyrings live
# under the directory), so any client given CEPH_CONF reaches it and nothing
# reads /etc/ceph.  The monitor is bootstrapped by hand (monmaptool,
# ceph-authtool, ceph-mon --mkfs) the way the Ceph manual deployment guide
# does it; the OSD is registered with "ceph osd new" and formatted with
# ceph-osd --mkfs on a BlueStore block file the OSD creates itself.  No mgr:
# RBD I/O, snapshots, resizes, locks and blocklisting do not need one (only
# PG statistics do, so readiness is checked by writing an object).  cephx is
# on, so the tests exercise keys: client.admin and client.vhost (profile rbd)
# each have a keyring and a key-only file for "--object secret,file=".
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${VB_CEPH_DIR:-/var/tmp/vhost-blk-ceph}
CONF=$DIR/ceph.conf
MON_ID=a
OSD_ID=0
OSD_SIZE=${VB_CEPH_OSD_SIZE:-16G}

die() { echo "ceph-cluster: $*" >&2; exit 1; }
log() { echo "ceph-cluster: $*" >&2; }

# pid_of NAME: the pid in NAME's pid file if that process is alive.
pid_of() {
    local f=$DIR/run/$1.pid p
    [ -f "$f" ] || return 1
    p=$(cat "$f" 2>/dev/null) || return 1
    [ -n "$p" ] && kill -0 "$p" 2>/dev/null || return 1
    # A recycled pid is not ours: the command line must name our conf.
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -qF -- "$CONF" || return 1
    echo "$p"
}

# stop_pid NAME SECONDS: SIGTERM the daemon, wait up to SECONDS, then SIGKILL.
stop_pid() {
    local name=$1 secs=$2 p n=0
    p=$(pid_of "$name") || { rm -f "$DIR/run/$name.pid"; return 0; }
    kill -TERM "$p" 2>/dev/null || true
    while kill -0 "$p" 2>/dev/null && [ $n -lt $((secs * 10)) ]; do
        sleep 0.1
        n=$((n + 1))
    done
    if kill -0 "$p" 2>/dev/null; then
        log "$name (pid $p) did not exit in ${secs}s after SIGTERM; killing it"
        kill -KILL "$p" 2>/dev/null || true
        while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
    fi
    rm -f "$DIR/run/$name.pid"
}

ceph_() { ceph -c "$CONF" --connect-timeout 20 "$@"; }

need_ceph() {
    local c
    for c in ceph ceph-mon ceph-osd ceph-authtool monmaptool rbd rados; do
        command -v "$c" >/dev/null && continue
        log "installing Ceph ($c is missing)"
        "$ROOT/scripts/install-deps.sh" >&2
        break
    done
    for c in ceph ceph-mon ceph-osd ceph-authtool monmaptool rbd rados; do
        command -v "$c" >/dev/null ||
            die "$c not found after scripts/install-deps.sh; install ceph-mon ceph-osd ceph-common"
    done
}

free_port() {
    local p
    for p in $(seq 33000 33999); do
        ss -Hltn "sport = :$p" 2>/dev/null | grep -q . && continue
        # also leave p+1 alone for a v1 listener someone may add later
        echo "$p"
        return 0
    done
    die "no free TCP port in 33000-33999 on 127.0.0.1"
}

uuid() { cat /proc/sys/kernel/random/uuid; }

# The [client] admin socket: one per cluster handle.  Many clients run as
# client.admin at once, and one vhost-blkd opens one handle per export, so
# \$name.\$pid is not enough ("File exists" from the second handle of a
# process): \$cctid (the handle's CephContext) makes it unique.
ASOK_MARK="# one admin socket per cluster handle (\$cctid: several per process)"
client_asok_lines() {
    echo "$ASOK_MARK"
    echo "admin socket = $DIR/run/\$name.\$pid.\$cctid.asok"
}

# fix_conf: bring the conf of a cluster made by an older version of this
# script up to date (the [client] admin socket above).  Only client
# settings change, so the running monitor and OSD are unaffected; the file
# is replaced atomically, as clients may be reading it.
fix_conf() {
    grep -qF "$ASOK_MARK" "$CONF" && return 0
    log "updating $CONF: one client admin socket per cluster handle"
    python3 - "$CONF" "$(client_asok_lines)" <<'PY' || die "cannot update $CONF"
import os, sys
path, lines = sys.argv[1], sys.argv[2].split("\n")
out, section, done = [], None, False
for l in open(path).read().split("\n"):
    t = l.strip()
    if t.startswith("[") and t.endswith("]"):
        section = t
        out.append(l)
        if t == "[client]" and not done:
            out.extend(lines)
            done = True
        continue
    if section == "[client]" and (t.replace("_", " ").startswith("admin socket")
                                  or t.startswith("# one admin socket")):
        continue
    out.append(l)
if not done:
    out += ["", "[client]"] + lines
open(path + ".new", "w").write("\n".join(out))
os.rename(path + ".new", path)
PY
}

write_conf() {
    local fsid=$1 port=$2
    cat > "$CONF" <<EOF
# Generated by scripts/ceph-cluster.sh: a single-node test cluster.
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$port]
mon initial members = $MON_ID
public network = 127.0.0.0/8
ms bind ipv4 = true
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = $DIR/ceph.client.admin.keyring
run dir = $DIR/run
pid file = $DIR/run/\$name.pid
admin socket = $DIR/run/\$name.asok
log file = $DIR/log/\$name.log
log to stderr = false
err to stderr = true
# One OSD: one replica, failure domain = the OSD itself.
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0

[client]
log file = $DIR/log/\$name.\$pid.log
$(client_asok_lines)

[mon]
mon data = $DIR/mon/\$cluster-\$id
mon cluster log file = $DIR/log/cluster.log

[osd]
osd data = $DIR/osd/\$cluster-\$id
keyring = $DIR/osd/\$cluster-\$id/keyring
osd objectstore = bluestore
bluestore block path = $DIR/osd/\$cluster-\$id.block
bluestore block create = true
bluestore block size = $(numfmt --from=iec "$OSD_SIZE")
bluestore fsck on mount = false
osd memory target = 1073741824
osd crush update on start = true
# A killed client's watch expires after this (tests/functional/test-rbd.sh
# waits for it; test-blkd-rbd blocklists its killed daemons instead, as
# an operator would).  Half of Ceph's 30 s default, still three times
# the interval at which a live client pings its watches (5 s), so a live
# client under load keeps its watch.
osd client watch timeout = 15
EOF
}

# keyfile NAME: write the bare base64 key of NAME (e.g. client.vhost) to
# $DIR/NAME.key, for "--object secret,file=..." and rbd --keyfile.
keyfile() {
    ceph-authtool -p -n "$1" "$2" > "$DIR/$1.key"
    chmod 600 "$DIR/$1.key"
}

create() {
    local port fsid osd_uuid osd_key
    port=${VB_CEPH_PORT:-$(free_port)}
    fsid=$(uuid)
    log "creating a cluster in $DIR (monitor on 127.0.0.1:$port)"
    rm -rf "$DIR"
    mkdir -p "$DIR"/{run,log,mon,osd}
    chmod 700 "$DIR"
    write_conf "$fsid" "$port"

    ceph-authtool --create-keyring "$DIR/mon.keyring" --gen-key -n mon. \
        --cap mon 'allow *' >/dev/null
    ceph-authtool --create-keyring "$DIR/ceph.client.admin.keyring" --gen-key \
        -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
        --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
    ceph-authtool "$DIR/mon.keyring" --import-keyring "$DIR/ceph.client.admin.keyring" >/dev/null
    monmaptool --create --fsid "$fsid" --addv "$MON_ID" "[v2:127.0.0.1:$port]" \
        "$DIR/monmap" >/dev/null
    ceph-mon -c "$CONF" --mkfs -i "$MON_ID" --monmap "$DIR/monmap" \
        --keyring "$DIR/mon.keyring"
    start_mon

    osd_uuid=$(uuid)
    osd_key=$(ceph-authtool --gen-print-key)
    local id
    id=$(echo "{\"cephx_secret\": \"$osd_key\"}" |
        ceph_ osd new "$osd_uuid" -i - -n client.admin)
    [ "$id" = "$OSD_ID" ] || die "ceph osd new gave id '$id', want $OSD_ID"
    mkdir -p "$DIR/osd/ceph-$OSD_ID"
    ceph-authtool --create-keyring "$DIR/osd/ceph-$OSD_ID/keyring" \
        -n "osd.$OSD_ID" --add-key "$osd_key" >/dev/null
    ceph-osd -c "$CONF" -i "$OSD_ID" --mkfs --osd-uuid "$osd_uuid" \
        > "$DIR/log/osd-mkfs.log" 2>&1 ||
        { cat "$DIR/log/osd-mkfs.log" >&2; die "ceph-osd --mkfs failed"; }
    start_osd

    ceph_ osd pool create rbd 8 8 >/dev/null 2>&1
    ceph_ osd pool set rbd size 1 --yes-i-really-mean-it >/dev/null 2>&1
    timeout 120 rbd -c "$CONF" pool init rbd ||
        die "rbd pool init did not complete within 120 s (see $DIR/log)"
    # A restricted user, as a deployment would give a hypervisor.
    ceph_ auth get-or-create client.vhost mon 'profile rbd' \
        osd 'profile rbd pool=rbd' > "$DIR/ceph.client.vhost.keyring"
    chmod 600 "$DIR/ceph.client.vhost.keyring"
    keyfile client.admin "$DIR/ceph.client.admin.keyring"
    keyfile client.vhost "$DIR/ceph.client.vhost.keyring"
    wait_writable
    touch "$DIR/created"
}

start_mon() {
    pid_of "mon.$MON_ID" >/dev/null && return 0
    ceph-mon -c "$CONF" -i "$MON_ID" 2>> "$DIR/log/mon.$MON_ID.stderr" ||
        die "ceph-mon did not start; see $DIR/log/mon.$MON_ID.log"
    local n=0
    until ceph_ mon stat >/dev/null 2>&1; do
        n=$((n + 1))
        [ $n -lt 60 ] || die "the monitor does not answer after 60 s; see $DIR/log/mon.$MON_ID.log"
        sleep 1
    done
}

# wait_osd_up: until the monitor's map says the OSD is up and in.
wait_osd_up() {
    local n=0 s
    while :; do
        s=$(ceph_ osd dump -f json 2>/dev/null |
            python3 -c 'import json,sys; o=json.load(sys.stdin)["osds"]; print(sum(1 for x in o if x["up"] and x["in"]))' \
            2>/dev/null || echo 0)
        [ "$s" = 1 ] && return 0
        n=$((n + 1))
        [ $n -lt 120 ] || die "osd.$OSD_ID is not up after 120 s; see $DIR/log/osd.$OSD_ID.log"
        sleep 0.5
    done
}

# wait_writable: write and remove an object in pool rbd; this blocks until
# the pool's placement groups are active (no mgr to ask for PG states).
wait_writable() {
    timeout 120 rados -c "$CONF" -p rbd put vb-ready-probe "$CONF" ||
        die "pool rbd takes no write within 120 s; see $DIR/log/osd.$OSD_ID.log"
    rados -c "$CONF" -p rbd rm vb-ready-probe
}

start_osd() {
    pid_of "osd.$OSD_ID" >/dev/null && return 0
    ceph-osd -c "$CONF" -i "$OSD_ID" 2>> "$DIR/log/osd.$OSD_ID.stderr" ||
        die "ceph-osd did not start; see $DIR/log/osd.$OSD_ID.log"
    wait_osd_up
}

cmd_start() {
    local t0=$SECONDS
    need_ceph
    [ -f "$DIR/created" ] && fix_conf
    if [ -f "$DIR/created" ] && pid_of "mon.$MON_ID" >/dev/null &&
       pid_of "osd.$OSD_ID" >/dev/null; then
        echo "$CONF"
        return 0
    fi
    if [ -f "$DIR/created" ]; then
        start_mon
        start_osd
        wait_writable
    else
        # A half-made cluster (a start that died) is remade from scratch.
        stop_pid "osd.$OSD_ID" 30
        stop_pid "mon.$MON_ID" 10
        create
    fi
    log "cluster up in $((SECONDS - t0)) s: mon pid $(pid_of "mon.$MON_ID"), osd pid $(pid_of "osd.$OSD_ID")"
    echo "$CONF"
}

cmd_stop() {
    stop_pid "osd.$OSD_ID" 30
    stop_pid "mon.$MON_ID" 10
    if [ "${VB_CEPH_KEEP:-0}" != 1 ] && [ -f "$CONF" ]; then
        rm -rf "$DIR"
    fi
}

cmd_status() {
    local rc=0 d p
    for d in "mon.$MON_ID" "osd.$OSD_ID"; do
        if p=$(pid_of "$d"); then
            echo "$d: running (pid $p, rss $(awk '/^VmRSS/ {print $2 " " $3}' "/proc/$p/status"))"
        else
            echo "$d: stopped"
            rc=1
        fi
    done
    [ $rc -eq 0 ] && { ceph_ osd stat; rbd -c "$CONF" ls -l rbd; } 2>/dev/null | sed 's/^/  /'
    return $rc
}

cmd_env() {
    [ -f "$CONF" ] || die "no cluster in $DIR; run '$0 start' first"
    local port
    port=$(sed -n 's/^mon host = \[v2:127.0.0.1:\([0-9]*\)\]$/\1/p' "$CONF")
    echo "CEPH_CONF=$CONF"
    echo "VB_CEPH_DIR=$DIR"
    echo "VB_CEPH_MON=127.0.0.1:$port"
    echo "VB_CEPH_ADMIN_KEYFILE=$DIR/client.admin.key"
    echo "VB_CEPH_VHOST_KEYFILE=$DIR/client.vhost.key"
    echo "VB_CEPH_VHOST_KEYRING=$DIR/ceph.client.vhost.keyring"
    echo "VB_CEPH_POOL=rbd"
    echo "export CEPH_CONF VB_CEPH_DIR VB_CEPH_MON VB_CEPH_ADMIN_KEYFILE VB_CEPH_VHOST_KEYFILE VB_CEPH_VHOST_KEYRING VB_CEPH_POOL"
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) cmd_env ;;
osd-stop) stop_pid "osd.$OSD_ID" 30 ;;
osd-start) [ -f "$DIR/created" ] || die "no cluster in $DIR; run '$0 start' first"
           start_osd; wait_writable ;;
*) echo "usage: $0 start|stop|status|env|osd-stop|osd-start" >&2; exit 2 ;;
esac
