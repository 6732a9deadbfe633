#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Live migration of a VM whose disk is a local image that vhost-blkd
# serves: the disk is copied to an image on the destination by a mirror
# job in the source's vhost-blkd, over NBD with TLS to the destination's
# vhost-blkd, while QEMU migrates the VM.  One disk per run; for several
# disks run each step once per disk (migrate-vm once for the VM).
#
# Steps (docs/user-guide.md, "Live migration with local disks"):
#
#   prepare     on the destination host, before the destination QEMU starts:
#               qemu-img create an empty image of the source's size;
#               blockdev-add it in the destination vhost-blkd; a throttle
#               node without limits on top of it, exported over vhost-user
#               at --dst-socket (the destination QEMU's disk: vhost-blkd
#               serves a node through one kind of export, so the NBD export
#               takes the image node and the vhost-user one the filter);
#               a server TLS object, nbd-server-start, a writable NBD
#               export of the image node.
#   mirror      in the source vhost-blkd: a client TLS object, a driver=nbd
#               node on the destination's export, blockdev-mirror sync=full
#               into it; waits until the job is ready (BLOCK_JOB_READY).
#   migrate-vm  QEMU's migrate from the source QEMU to the destination
#               QEMU's -incoming URI; waits until it completed (the source
#               VM is stopped then, and its vhost-blkd completed every
#               request the guest sent).  The destination QEMU must have
#               been started with -S (or libvirt's --suspend): it must not
#               run the guest before the mirror's last pass.
#   finish      block-job-cancel on the ready mirror (QEMU's soft cancel:
#               copies what is still dirty, flushes, ends with the target a
#               complete copy, no pivot), waits for its end; deletes the nbd
#               node and the client TLS object in the source vhost-blkd;
#               stops the NBD server (or deletes the export) and deletes
#               the server TLS object in the destination's; then `cont` on
#               the destination QEMU (unless --no-cont: libvirt users run
#               `virsh resume` instead).
#   migrate     mirror, migrate-vm and finish in a row (after prepare and
#               the destination QEMU's start).
#
# Usage: migrate-local-disk.sh STEP [OPTIONS]
#   --src-daemon SOCK     QMP socket of the source vhost-blkd (mirror, finish,
#                         and prepare without --size)
#   --dst-daemon SOCK     QMP socket of the destination vhost-blkd (prepare,
#                         finish)
#   --src-qemu SOCK       QMP socket of the source QEMU (migrate-vm, and
#                         mirror with --ready-pause)
#   --dst-qemu SOCK       QMP socket of the destination QEMU (migrate-vm,
#                         finish; without it finish does not `cont`)
#   --node NAME           the source's node to copy: the one its vhost-user
#                         export serves (the qcow2 node for a qcow2 image)
#   --dst-node NAME       the image's node on the destination (default: NODE);
#                         the vhost-user export is on NAME-vu
#   --dst-image PATH      image to create on the destination (must not exist)
#   --dst-format FMT      qcow2 or raw (default qcow2)
#   --size BYTES          the disk's size (default: the source node's
#                         virtual size, asked of --src-daemon)
#   --dst-socket PATH     vhost-user socket for the destination QEMU's disk
#   --export-opts JSON    extra keys for that block-export-add, e.g.
#                         '{"num-queues": 4}': give what the source's export
#                         has (num-queues, queue-size, logical-block-size)
#   --nbd-host HOST       address the destination's NBD server listens on
#                         and the source connects to (default 127.0.0.1)
#   --nbd-port PORT       its TCP port (default 10809); prepare with 0
#                         lets the kernel pick a free one and prints
#                         "NBD port: N" (give N to the later steps)
#   --server-tls-dir DIR  destination: ca-cert.pem, server-cert.pem,
#                         server-key.pem (the server asks for a client
#                         certificate signed by that CA: verify-peer=on)
#   --client-tls-dir DIR  source: ca-cert.pem, client-cert.pem,
#                         client-key.pem
#   --migrate-uri URI     the destination QEMU's -incoming (e.g.
#                         tcp:HOST:4444 or unix:PATH)
#   --job-id ID           the mirror job's id (default mirror-NODE)
#   --granularity BYTES   the mirror's dirty-bitmap granularity (default
#                         the daemon's: 4 KiB in vhost-blkd, or the
#                         cluster size; 64 KiB in QSD): a guest writing
#                         small blocks all over makes the mirror copy
#                         less with a small one (4096)
#   --copy-mode MODE      mirror: background (default) or write-blocking
#                         (guest writes complete once on the destination
#                         too: the mirror gets ready whatever the guest's
#                         write rate, at the cost of its write latency)
#   --ready-pause SECS    mirror: if the job is not ready after SECS
#                         seconds, pause the source VM (QMP stop on
#                         --src-qemu) until it is, then cont it: the mirror
#                         is ready only at a moment with no guest write in
#                         flight, which a guest writing all the time never
#                         leaves; the pause is the last catch-up only
#                         (0: pause at once, for the whole copy)
#   --nbd-server-running  prepare: the destination's NBD server runs already
#                         (a second disk): only add the export
#   --keep-nbd-server     finish: delete only this disk's NBD export
#   --no-cont             finish: do not resume the destination QEMU
#   --timeout SECS        how long each wait may take (default 600)
#
# Every step says what it does; on an error it says which step failed and
# what to do, and exits 1.  Needs python3 (QMP) and, for prepare, qemu-img.
# The QMP sockets must be reachable from where it runs: between two hosts,
# run prepare on the destination and forward the destination's sockets to
# the source host (ssh -L /tmp/dst.sock:/run/vhost-blk/dst.sock host).
set -u

prog=${0##*/}
step=
src_daemon= dst_daemon= src_qemu= dst_qemu=
node= dst_node= dst_image= dst_format=qcow2 size=
dst_socket= export_opts='{}'
nbd_host=127.0.0.1 nbd_port=10809
server_tls= client_tls= migrate_uri= job_id= granularity= copy_mode=
nbd_running=0 keep_nbd=0 no_cont=0 timeout=600 ready_pause=

usage() {
    sed -n '/^# Usage:/,/^# Every step/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

[ $# -gt 0 ] || usage
step=$1
shift
while [ $# -gt 0 ]; do
    case $1 in
    --src-daemon) src_daemon=$2 ;;
    --dst-daemon) dst_daemon=$2 ;;
    --src-qemu) src_qemu=$2 ;;
    --dst-qemu) dst_qemu=$2 ;;
    --node) node=$2 ;;
    --dst-node) dst_node=$2 ;;
    --dst-image) dst_image=$2 ;;
    --dst-format) dst_format=$2 ;;
    --size) size=$2 ;;
    --dst-socket) dst_socket=$2 ;;
    --export-opts) export_opts=$2 ;;
    --nbd-host) nbd_host=$2 ;;
    --nbd-port) nbd_port=$2 ;;
    --server-tls-dir) server_tls=$2 ;;
    --client-tls-dir) client_tls=$2 ;;
    --migrate-uri) migrate_uri=$2 ;;
    --job-id) job_id=$2 ;;
    --granularity) granularity=$2 ;;
    --copy-mode) copy_mode=$2 ;;
    --ready-pause) ready_pause=$2 ;;
    --timeout) timeout=$2 ;;
    --nbd-server-running) nbd_running=1; shift; continue ;;
    --keep-nbd-server) keep_nbd=1; shift; continue ;;
    --no-cont) no_cont=1; shift; continue ;;
    -h|--help) usage ;;
    *) echo "$prog: unknown option '$1' (see $prog --help)" >&2; exit 2 ;;
    esac
    [ $# -ge 2 ] || { echo "$prog: $1 needs a value" >&2; exit 2; }
    shift 2
done
dst_node=${dst_node:-$node}
job_id=${job_id:-mirror-$node}
nbd_node=nbd-$dst_node           # the source's client node
export_name=$dst_node            # the destination's NBD export
src_creds=tls-mig-$dst_node      # client TLS object in the source
dst_creds=tls-mig-srv            # server TLS object in the destination

# The QMP client: one command per connection (vhost-blkd and QEMU both),
# events skipped; "wait-*" poll a query until a state is reached.
read -r -d '' QMP_PY <<'EOF'
import json, socket, sys, time

def conn(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError as e:
        print("cannot connect to the QMP socket %s: %s" % (path, e),
              file=sys.stderr)
        sys.exit(3)
    f = s.makefile("rw")
    f.readline()
    call(f, "qmp_capabilities")
    return f

def call(f, cmd, args=None):
    msg = {"execute": cmd}
    if args is not None:
        msg["arguments"] = args
    f.write(json.dumps(msg) + "\n")
    f.flush()
    while True:
        line = f.readline()
        if not line:
            raise SystemExit("the QMP connection closed during %s" % cmd)
        r = json.loads(line)
        if "return" in r:
            return r["return"]
        if "error" in r:
            raise RuntimeError(r["error"].get("desc", str(r["error"])))

def poll(f, timeout, what, check):
    end = time.monotonic() + timeout
    while True:
        r = check()
        if r is not None:
            return r
        if time.monotonic() > end:
            sys.exit("timed out after %ds waiting for %s" % (timeout, what))
        time.sleep(0.2)

op, path = sys.argv[1], sys.argv[2]
f = conn(path)
try:
    if op == "call":
        args = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
        print(json.dumps(call(f, sys.argv[3], args)))
    elif op == "size":
        for n in call(f, "query-named-block-nodes"):
            if n.get("node-name") == sys.argv[3]:
                print(n["image"]["virtual-size"])
                break
        else:
            sys.exit("no node '%s' there" % sys.argv[3])
    elif op == "wait-job":
        job, want, tmo = sys.argv[3], sys.argv[4], float(sys.argv[5])
        def check():
            for j in call(f, "query-jobs"):
                if j["id"] != job:
                    continue
                if j.get("error"):
                    sys.exit("job %s failed: %s" % (job, j["error"]))
                if j["status"] == want:
                    return j
                if j["status"] in ("concluded", "null"):
                    sys.exit("job %s ended (%s) before it was %s"
                             % (job, j["status"], want))
                return None
            sys.exit("there is no job %s" % job)
        j = poll(f, tmo, "job %s to be %s" % (job, want), check)
        print("%d/%d bytes" % (j["current-progress"], j["total-progress"]))
    elif op == "wait-migration":
        tmo = float(sys.argv[3])
        def check():
            m = call(f, "query-migrate")
            st = m.get("status")
            if st == "completed":
                return m
            if st in ("failed", "cancelled", None):
                sys.exit("the migration is %s: %s"
                         % (st or "not started", m.get("error-desc", "")))
            return None
        m = poll(f, tmo, "the migration to complete", check)
        print("%d ms, downtime %s ms" % (m.get("total-time", 0),
                                         m.get("downtime", "?")))
    elif op == "wait-status":
        want, tmo = sys.argv[3], float(sys.argv[4])
        poll(f, tmo, "the VM status %s" % want,
             lambda: True if call(f, "query-status")["status"] == want
             else None)
    elif op == "del-object":
        # a TLS object stays in use until the last connection is gone
        oid, tmo = sys.argv[3], float(sys.argv[4])
        def check():
            try:
                call(f, "object-del", {"id": oid})
            except RuntimeError as e:
                if "in use" in str(e):
                    return None
                raise
            return True
        poll(f, tmo, "object %s to be free" % oid, check)
except RuntimeError as e:
    sys.exit(str(e))
EOF

# say WHAT: one line on what happens now
say() { echo "$prog: $*"; }

# fail STEP WHAT-TO-DO: the step failed; stop
fail() {
    echo "$prog: FAILED in step '$1': $2" >&2
    exit 1
}

# qmp SOCK COMMAND [ARGS-JSON]: run one command, print its return value;
# prints QMP's error and fails otherwise
# (exit status 3 from the client: the socket does not answer)
qmp() {
    python3 -c "$QMP_PY" call "$@"
    qmp_status $? "$1"
}
qmpx() {
    python3 -c "$QMP_PY" "$@"
    qmp_status $? "$2"
}
qmp_status() {
    [ "$1" = 3 ] &&
        fail "$step" "nobody answers on the QMP socket $2: is that vhost-blkd or QEMU running, and is the path right?"
    return "$1"
}

need() {
    local v
    for v in "$@"; do
        [ -n "${!v}" ] ||
            fail "$step" "give --$(echo "$v" | tr _ -) (see $prog --help)"
    done
}

# json VALUE: VALUE as a JSON string
json() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }

step_prepare() {
    local st=prepare file_opts add_fmt eargs
    need dst_daemon node dst_image dst_socket server_tls
    case $dst_format in
    qcow2|raw) ;;
    *) fail $st "--dst-format must be qcow2 or raw, not '$dst_format'" ;;
    esac
    [ -e "$dst_image" ] &&
        fail $st "$dst_image exists already: the mirror needs an empty image; remove it or give another --dst-image"
    if [ -z "$size" ]; then
        need src_daemon
        say "asking the source vhost-blkd for the size of node $node"
        size=$(qmpx size "$src_daemon" "$node") ||
            fail $st "cannot read node $node's size from $src_daemon: give --size BYTES"
    fi
    say "creating $dst_image ($dst_format, $size bytes)"
    qemu-img create -q -f "$dst_format" "$dst_image" "$size" ||
        fail $st "qemu-img create failed: check the directory of $dst_image and free space"
    file_opts="{\"driver\": \"file\", \"filename\": $(json "$dst_image")}"
    if [ "$dst_format" = qcow2 ]; then
        add_fmt="{\"driver\": \"qcow2\", \"node-name\": $(json "$dst_node"), \"file\": $file_opts}"
    else
        add_fmt="{\"driver\": \"file\", \"node-name\": $(json "$dst_node"), \"filename\": $(json "$dst_image")}"
    fi
    say "destination vhost-blkd: blockdev-add $dst_node ($dst_image)"
    qmp "$dst_daemon" blockdev-add "$add_fmt" >/dev/null ||
        fail $st "blockdev-add in the destination vhost-blkd ($dst_daemon) failed: remove $dst_image, fix the cause above, run prepare again"
    say "destination vhost-blkd: throttle node $dst_node-vu (no limits) on $dst_node for the vhost-user export"
    qmp "$dst_daemon" object-add \
        "{\"qom-type\": \"throttle-group\", \"id\": $(json "tg-$dst_node")}" \
        >/dev/null &&
    qmp "$dst_daemon" blockdev-add "{\"driver\": \"throttle\", \"node-name\": $(json "$dst_node-vu"), \"throttle-group\": $(json "tg-$dst_node"), \"file\": $(json "$dst_node")}" \
        >/dev/null ||
        fail $st "the throttle node failed in $dst_daemon: blockdev-del $dst_node, remove $dst_image, run prepare again"
    eargs=$(python3 -c 'import json, sys
a = {"type": "vhost-user-blk", "id": sys.argv[1], "node-name": sys.argv[1],
     "writable": True, "addr": {"type": "unix", "path": sys.argv[2]}}
a.update(json.loads(sys.argv[3]))
print(json.dumps(a))' "$dst_node-vu" "$dst_socket" "$export_opts") ||
        fail $st "--export-opts is not a JSON object: '$export_opts'"
    say "destination vhost-blkd: vhost-user export at $dst_socket"
    qmp "$dst_daemon" block-export-add "$eargs" >/dev/null ||
        fail $st "block-export-add of the vhost-user export failed: fix the cause above (--export-opts?)"
    if [ $nbd_running = 0 ]; then
        say "destination vhost-blkd: server TLS credentials from $server_tls, NBD server on $nbd_host port $nbd_port"
        qmp "$dst_daemon" object-add "{\"qom-type\": \"tls-creds-x509\", \"id\": \"$dst_creds\", \"dir\": $(json "$server_tls"), \"endpoint\": \"server\", \"verify-peer\": true}" \
            >/dev/null ||
            fail $st "the server TLS object failed: $server_tls needs ca-cert.pem, server-cert.pem, server-key.pem readable by vhost-blkd"
        qmp "$dst_daemon" nbd-server-start "{\"addr\": {\"type\": \"inet\", \"host\": $(json "$nbd_host"), \"port\": $(json "$nbd_port")}, \"tls-creds\": \"$dst_creds\"}" \
            >/dev/null ||
            fail $st "nbd-server-start failed: is port $nbd_port free on $nbd_host? (--nbd-port); with a server running already, give --nbd-server-running"
        if [ "$nbd_port" = 0 ]; then
            # Bound by the kernel: read it back rather than guess a free
            # one beforehand, which another process could take meanwhile.
            nbd_port=$(qmp "$dst_daemon" x-query-nbd-server |
                python3 -c 'import json, sys; print(json.load(sys.stdin)["addr"]["port"])') ||
                fail $st "cannot read the NBD server's port (x-query-nbd-server): is the destination vhost-blkd recent enough?"
            say "NBD port: $nbd_port"
        fi
    fi
    say "destination vhost-blkd: writable NBD export '$export_name' of $dst_node"
    qmp "$dst_daemon" block-export-add "{\"type\": \"nbd\", \"id\": $(json "nbd-$dst_node"), \"node-name\": $(json "$dst_node"), \"name\": $(json "$export_name"), \"writable\": true}" \
        >/dev/null ||
        fail $st "block-export-add type=nbd failed: fix the cause above"
    say "prepare done: now start the destination QEMU with its disk on $dst_socket, -incoming URI and -S"
}

step_mirror() {
    local st=mirror rc
    need src_daemon node client_tls
    say "source vhost-blkd: client TLS credentials from $client_tls"
    qmp "$src_daemon" object-add "{\"qom-type\": \"tls-creds-x509\", \"id\": $(json "$src_creds"), \"dir\": $(json "$client_tls"), \"endpoint\": \"client\"}" \
        >/dev/null ||
        fail $st "the client TLS object failed: $client_tls needs ca-cert.pem, client-cert.pem, client-key.pem"
    say "source vhost-blkd: nbd node $nbd_node on $nbd_host:$nbd_port export '$export_name' (TLS)"
    qmp "$src_daemon" blockdev-add "{\"driver\": \"nbd\", \"node-name\": $(json "$nbd_node"), \"server\": {\"type\": \"inet\", \"host\": $(json "$nbd_host"), \"port\": $(json "$nbd_port")}, \"export\": $(json "$export_name"), \"tls-creds\": $(json "$src_creds")}" \
        >/dev/null ||
        fail $st "cannot reach the destination's NBD export: did prepare run, and do both TLS dirs have the same CA, the server's certificate naming $nbd_host? (object-del $src_creds, then run mirror again)"
    say "source vhost-blkd: blockdev-mirror $node -> $nbd_node (job $job_id, sync=full${copy_mode:+, copy-mode=$copy_mode})"
    qmp "$src_daemon" blockdev-mirror "{\"job-id\": $(json "$job_id"), \"device\": $(json "$node"), \"target\": $(json "$nbd_node"), \"sync\": \"full\", \"auto-dismiss\": false${granularity:+, \"granularity\": $granularity}${copy_mode:+, \"copy-mode\": $(json "$copy_mode")}}" \
        >/dev/null ||
        fail $st "blockdev-mirror failed: fix the cause above, then blockdev-del $nbd_node and object-del $src_creds in the source vhost-blkd before a new try"
    if [ -n "$ready_pause" ]; then
        need src_qemu
        say "waiting up to ${ready_pause}s for the mirror to be ready"
        if [ "$ready_pause" = 0 ] ||
           ! qmpx wait-job "$src_daemon" "$job_id" ready "$ready_pause" \
                2>/dev/null; then
            say "not ready yet: pausing the source VM until it is"
            qmp "$src_qemu" stop >/dev/null ||
                fail $st "QMP stop on the source QEMU failed: see the error above; the mirror keeps running"
            qmpx wait-job "$src_daemon" "$job_id" ready "$timeout"
            rc=$?
            say "source VM: cont"
            qmp "$src_qemu" cont >/dev/null ||
                fail $st "cont on the source QEMU failed: resume the VM by hand (QMP cont)"
            [ $rc = 0 ] ||
                fail $st "the mirror did not become ready with the VM paused: see query-jobs in the source vhost-blkd; job-cancel and job-dismiss it, blockdev-del $nbd_node, and try again"
        fi
    fi
    say "waiting for the mirror to be ready (everything copied once)"
    qmpx wait-job "$src_daemon" "$job_id" ready "$timeout" ||
        fail $st "the mirror did not become ready: see query-jobs in the source vhost-blkd (a guest that writes all the time: give --ready-pause); job-cancel and job-dismiss it, blockdev-del $nbd_node, and try again"
    say "mirror ready: the destination image follows every write now"
}

step_migrate_vm() {
    local st=migrate-vm
    need src_qemu migrate_uri
    if [ -n "$dst_qemu" ]; then
        qmpx wait-status "$dst_qemu" inmigrate "$timeout" ||
            fail $st "the destination QEMU ($dst_qemu) is not waiting for an incoming migration: start it with -incoming $migrate_uri -S"
    fi
    say "source QEMU: migrate to $migrate_uri"
    qmp "$src_qemu" migrate "{\"uri\": $(json "$migrate_uri")}" >/dev/null ||
        fail $st "QMP migrate failed: check the URI; the mirror keeps running, try again or run finish to cancel"
    say "waiting for the migration to complete"
    qmpx wait-migration "$src_qemu" "$timeout" ||
        fail $st "the migration did not complete: the VM runs on the source still (cont it if paused); block-job-cancel the mirror with force, or migrate again"
    say "VM migrated; the source VM is stopped"
}

step_finish() {
    local st=finish
    need src_daemon dst_daemon
    # block-job-cancel on a job that is not ready stops it at once, the
    # target left incomplete: refuse that here
    qmpx wait-job "$src_daemon" "$job_id" ready 1 >/dev/null ||
        fail $st "the mirror $job_id is not ready (or gone): the destination image is not complete, do not cont the destination VM; see query-jobs in the source vhost-blkd"
    say "source vhost-blkd: block-job-cancel $job_id (copies what is left, then ends)"
    qmp "$src_daemon" block-job-cancel "{\"device\": $(json "$job_id")}" \
        >/dev/null ||
        fail $st "block-job-cancel failed: see query-jobs in the source vhost-blkd; do not start the destination VM until the mirror ended as a success"
    qmpx wait-job "$src_daemon" "$job_id" concluded "$timeout" ||
        fail $st "the mirror did not end as a success: the destination image is not complete, do not cont the destination VM; resume the source VM (cont) and start over"
    qmp "$src_daemon" job-dismiss "{\"id\": $(json "$job_id")}" >/dev/null ||
        fail $st "job-dismiss $job_id failed"
    say "mirror finished: the destination image is a complete copy"
    say "source vhost-blkd: blockdev-del $nbd_node, object-del $src_creds"
    qmp "$src_daemon" blockdev-del "{\"node-name\": $(json "$nbd_node")}" \
        >/dev/null &&
    qmpx del-object "$src_daemon" "$src_creds" "$timeout" ||
        fail $st "cleaning up the source vhost-blkd failed (harmless for the VM: the copy is complete); delete them by hand"
    if [ $keep_nbd = 1 ]; then
        say "destination vhost-blkd: block-export-del nbd-$dst_node"
        qmp "$dst_daemon" block-export-del "{\"id\": $(json "nbd-$dst_node"), \"mode\": \"hard\"}" >/dev/null ||
            fail $st "block-export-del nbd-$dst_node failed"
    else
        say "destination vhost-blkd: nbd-server-stop, object-del $dst_creds"
        qmp "$dst_daemon" nbd-server-stop >/dev/null &&
        qmpx del-object "$dst_daemon" "$dst_creds" "$timeout" ||
            fail $st "stopping the destination's NBD server failed: do it by hand (nbd-server-stop), the copy is complete"
    fi
    if [ -n "$dst_qemu" ] && [ $no_cont = 0 ]; then
        say "destination QEMU: cont"
        qmp "$dst_qemu" cont >/dev/null ||
            fail $st "cont on the destination QEMU failed: resume it by hand"
    fi
    say "done: the disk is served from the destination's image"
}

case $step in
prepare) step_prepare ;;
mirror) step_mirror ;;
migrate-vm) step_migrate_vm ;;
finish) step_finish ;;
migrate) step_mirror; step_migrate_vm; step_finish ;;
-h|--help) usage ;;
*) echo "$prog: unknown step '$step': prepare, mirror, migrate-vm, finish or migrate" >&2; exit 2 ;;
esac
