#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The guest half of tests/functional/test-systemd-guest.sh: runs as root
# under systemd (PID 1) in the Debian 12 image of
# scripts/guest/build-systemd-image.sh, from the "vbtest" disk that also
# holds the package (vhost-blk.deb).  It does what docs/user-guide.md
# ("Running it as a service") tells an operator to do, and prints
#   VBSD: ok N - what        VBSD: not ok N - what      VBSD: # detail
#   VBSD: info KEY=VALUE
# on the serial console; the host side counts them.  Every wait is on a
# state (unit state, socket, journal line, counter), bounded only by a
# hang guard.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export SYSTEMD_PAGER= SYSTEMD_COLORS=0 LC_ALL=C.UTF-8
D=/vbtest
N=0
T=$(mktemp -d)
SVC=vhost-blkd@vm1.service
SOCKU=vhost-blkd@vm1.socket
SOCK=/run/vhost-blk/vm1.sock
QMP=/run/vhost-blk/vm1.qmp
IMG=/var/lib/vhost-blk/vm1.img

say() { echo "VBSD: $*"; }
ok() { N=$((N + 1)); say "ok $N - $*"; }
not_ok() { N=$((N + 1)); say "not ok $N - $*"; }
detail() { sed 's/^/VBSD: #   /' "$@"; }
# check DESC CMD...: one test from CMD's status; its output shown on failure.
check() {
    local desc=$1
    shift
    if "$@" > "$T/out" 2>&1; then
        ok "$desc"
    else
        not_ok "$desc"
        detail "$T/out"
    fi
}
# check_eq DESC GOT WANT
check_eq() {
    if [ "$2" = "$3" ]; then
        ok "$1"
    else
        not_ok "$1"
        say "#   got '$2', want '$3'"
    fi
}
# wait_until CMD...: poll CMD every 0.1 s; a hang guard (300 s), not a
# timing assumption.
wait_until() {
    local end=$((SECONDS + 300))
    until "$@" > /dev/null 2>&1; do
        [ $SECONDS -ge $end ] && return 1
        sleep 0.1
    done
}
prop() { systemctl show -P "$1" "$2"; }
is_state() { [ "$(prop ActiveState "$1")" = "$2" ]; }
# The daemon's log lines since boot, as journald has them.
journal() { journalctl -u vhost-blkd@vm1 -b -o cat --no-pager; }
in_journal() { journal | grep -q -- "$1"; }
# pid_logged PID TEXT: process PID's own log has TEXT.
pid_logged() { journalctl -b _PID="$1" -o cat --no-pager | grep -q -- "$2"; }
BENCH=(vhost-blk-bench --socket "$SOCK" --verify --rw randrw --queues 2
       --iodepth 16 --size 8M)
bench() { "${BENCH[@]}" "$@"; }
# Bytes the running daemon has read for the export (0 before the first
# read; a verifying run's fill pass only writes).
read_bytes() {
    vhost-blk-ctl -s "$QMP" --json stats 2>/dev/null |
        grep -o '"rd_bytes" *: *[0-9]*' | grep -o '[0-9]*$' | head -n1
}
reading() { local r; r=$(read_bytes); [ -n "$r" ] && [ "$r" -gt 0 ]; }

say "# guest: $(uname -r), PID 1 is $(cat /proc/1/comm), $(nproc) CPUs"
check_eq "systemd is PID 1" "$(cat /proc/1/comm)" systemd

# --- install: dpkg -i, its Depends already in the image -------------------
check "dpkg -i vhost-blk.deb (Depends from the image, no network)" \
    dpkg -i "$D/vhost-blk.deb"
check "the units are known to systemd" \
    systemctl cat vhost-blkd@.service vhost-blkd@.socket
check_eq "nothing is started at install" "$(prop ActiveState $SOCKU)" inactive

# --- configure vm1 as the user guide does ---------------------------------
mkdir -p /var/lib/vhost-blk
truncate -s 256M "$IMG"
sed 's/NAME/vm1/g; s/^#seccomp on/seccomp on/' \
    /usr/share/doc/vhost-blk/examples/example.conf > /etc/vhost-blk/vm1.conf
say "# /etc/vhost-blk/vm1.conf:"
grep -v '^#' /etc/vhost-blk/vm1.conf | grep . | detail

check "systemctl enable --now $SOCKU" systemctl enable --now "$SOCKU"
check_eq "the socket unit listens" "$(prop ActiveState $SOCKU)" active
check "$SOCK is a socket" test -S "$SOCK"
check_eq "the service waits for a connection (socket activation)" \
    "$(prop ActiveState $SVC)" inactive

# --- the first connection starts the daemon -------------------------------
bench --ios 4000 > "$T/b1.out" 2> "$T/b1.err"
rc=$?
check_eq "vhost-blk-bench --verify against the socket-activated daemon" "$rc" 0
[ $rc -eq 0 ] || detail "$T/b1.err"
grep -E "I/Os|IOPS" "$T/b1.out" | detail
check_eq "the connection started $SVC" "$(prop ActiveState $SVC)" active
check_eq "... with the socket passed by systemd" \
    "$(prop TriggeredBy $SVC)" "$SOCKU"
check "it serves the passed socket (journal)" \
    in_journal "passed by the service manager\|listening on $SOCK"
check_eq "StatusText is the daemon's STATUS=" "$(prop StatusText $SVC)" \
    "serving 1 export(s)"

# --- journald has the daemon's log ----------------------------------------
check "journalctl -u vhost-blkd@vm1 shows the daemon's lines" \
    in_journal "front-end connected"
systemctl kill -s USR1 "$SVC"
check "systemctl kill -s USR1: the counters reach the journal" \
    wait_until in_journal "iothread 0:"

# --- restart during a verifying run: the bench reconnects -----------------
# The run is open-ended and told to stop (SIGINT) only once the new
# daemon has served it: the restart falls inside it whatever the speed.
systemctl restart "$SVC"            # a fresh daemon: its counters start at 0
pid0=$(prop MainPID $SVC)
# (not through a function: $! must be the bench, not a subshell)
"${BENCH[@]}" --runtime 3600 --reconnect 120000 > "$T/b2.out" 2> "$T/b2.err" &
bpid=$!
check "the run is in its verified phase (the daemon has served reads)" \
    wait_until reading
check "systemctl restart $SVC during the run" systemctl restart "$SVC"
pid1=$(prop MainPID $SVC)
check "a new daemon (MainPID $pid0 -> $pid1)" test "$pid1" != "$pid0" -a "$pid1" != 0
check "the bench reconnected" wait_until grep -q "reconnected (1)" "$T/b2.err"
check "the new daemon serves the same run's reads" wait_until reading
kill -INT $bpid
wait $bpid
rc=$?
check_eq "the run reconnected and verified every block" "$rc" 0
detail "$T/b2.err"
grep -E "I/Os|IOPS" "$T/b2.out" | detail
check "the first daemon shut down on SIGTERM (its journal)" \
    pid_logged "$pid0" "SIGTERM): shutting down"

# --- reload: the unit has no ExecReload= ----------------------------------
pid=$(prop MainPID $SVC)
if systemctl reload "$SVC" > "$T/reload" 2>&1; then
    not_ok "systemctl reload is refused (no ExecReload=)"
else
    ok "systemctl reload is refused (no ExecReload=)"
fi
detail "$T/reload"
check_eq "... and the daemon runs on untouched" \
    "$(prop ActiveState $SVC) $(prop MainPID $SVC)" "active $pid"

# --- stop: drain, exit 0, nothing left behind, socket stays ---------------
pid=$(prop MainPID $SVC)
check "systemctl stop $SVC" systemctl stop "$SVC"
check_eq "the service is inactive, Result=success, exit status 0" \
    "$(prop ActiveState $SVC) $(prop Result $SVC) $(prop ExecMainStatus $SVC)" \
    "inactive success 0"
check "the stop went through the drain (its journal)" \
    pid_logged "$pid" "SIGTERM): shutting down"
check "the monitor socket is gone" test ! -e "$QMP"
check "systemd's socket $SOCK is still there" test -S "$SOCK"
check_eq "the socket unit still listens" "$(prop ActiveState $SOCKU)" active
check "no stale pid file under /run/vhost-blk" \
    sh -c '! ls /run/vhost-blk/*.pid 2>/dev/null | grep -q .'
bench --ios 2000 > "$T/b3.out" 2> "$T/b3.err"
rc=$?
check_eq "the next connection re-activates it and verifies" "$rc" 0
[ $rc -eq 0 ] || detail "$T/b3.err"
check_eq "... the service is active again" "$(prop ActiveState $SVC)" active

# --- Type=notify: "active" only after READY=1 ------------------------------
# A runtime drop-in stops the service's process before it execs vhost-blkd
# (same pid: NotifyAccess=main still applies; "$$$$" is the unit file's
# escape for the shell's "$$"); until it is continued there
# is no READY=1, and systemd must say "activating".
systemctl stop "$SVC"
mkdir -p "/run/systemd/system/$SVC.d"
cat > "/run/systemd/system/$SVC.d/zz-hold.conf" <<'EOF'
[Service]
ExecStart=
ExecStart=/bin/sh -c 'kill -STOP $$$$; exec /usr/sbin/vhost-blkd --config /etc/vhost-blk/vm1.conf'
EOF
systemctl daemon-reload
systemctl start --no-block "$SVC"
held() {
    local p
    p=$(prop MainPID $SVC)
    [ "$p" != 0 ] && grep -q '^State:.*T' "/proc/$p/status"
}
check "the held process is stopped before exec" wait_until held
check_eq "without READY=1 the service is activating" \
    "$(prop ActiveState $SVC)/$(prop SubState $SVC)" activating/start
kill -CONT "$(prop MainPID $SVC)"
check "after READY=1 it is active" wait_until is_state "$SVC" active
check_eq "StatusText after READY=1" "$(prop StatusText $SVC)" "serving 1 export(s)"
rm -rf "/run/systemd/system/$SVC.d"
systemctl daemon-reload
systemctl stop "$SVC"

# --- a block device under the hardened unit --------------------------------
# ProtectSystem=strict leaves /dev writable and the unit sets no device
# ACL: a second instance serves the test's third disk, O_DIRECT.
BDEV=/dev/disk/by-id/virtio-vbblock
if [ -b "$BDEV" ]; then
    printf 'export socket=/run/vhost-blk/vm2.sock,file=%s,num-queues=2\niothreads 2\nseccomp on\n' \
        "$(readlink -f "$BDEV")" > /etc/vhost-blk/vm2.conf
    check "systemctl enable --now vhost-blkd@vm2.socket (block device)" \
        systemctl enable --now vhost-blkd@vm2.socket
    vhost-blk-bench --socket /run/vhost-blk/vm2.sock --verify --rw randrw \
        --queues 2 --iodepth 16 --size 8M --ios 2000 > "$T/b4.out" 2> "$T/b4.err"
    rc=$?
    check_eq "vhost-blk-bench --verify on $(readlink -f "$BDEV") through vhost-blkd@vm2" "$rc" 0
    [ $rc -eq 0 ] || { detail "$T/b4.err"; journalctl -u vhost-blkd@vm2 -b -o cat --no-pager | detail; }
    systemctl stop vhost-blkd@vm2.socket vhost-blkd@vm2.service
else
    not_ok "the block device disk ($BDEV) is there"
fi

# --- the rbd and nbd drivers' modules under the hardened unit -------------
# The package installs block-rbd.so where the daemon looks for it; a file
# export maps none of Ceph, and a blockdev-add driver=rbd dlopen()s the
# module under SystemCallFilter=, ProtectSystem=strict,
# MemoryDenyWriteExecute= and seccomp on: the error is then librados's own
# (the guest has no cluster), not a missing or refused module.
MODULE=$(dpkg -L vhost-blk | grep '^/usr/lib/.*/vhost-blk/block-rbd\.so$')
check "the package installed /usr/lib/<triplet>/vhost-blk/block-rbd.so" \
    test -f "$MODULE"
systemctl start "$SVC"
check "$SVC is active again" wait_until is_state "$SVC" active
pid=$(prop MainPID $SVC)
ceph_maps() { grep -c 'librbd\.so\|block-rbd\.so' "/proc/$pid/maps"; }
check_eq "its file export maps no librbd" "$(ceph_maps)" 0
vhost-blk-ctl -s "$QMP" qmp blockdev-add \
    '{"driver":"rbd","node-name":"r0","pool":"rbd","image":"vm1","conf":"/nonexistent/ceph.conf"}' \
    > "$T/rbd" 2>&1
detail "$T/rbd"
check "blockdev-add driver=rbd loads the module (librados reads the conf)" \
    grep -q "cannot read the Ceph configuration" "$T/rbd"
check "block-rbd.so and librbd are mapped now" test "$(ceph_maps)" -gt 0
check_eq "... and the daemon is still active" "$(prop ActiveState $SVC)" active
# The nbd driver's module the same way: libnbd (and the GnuTLS, libxml2
# and ICU it brings) is mapped only once a node names driver=nbd; with no
# server on the socket the error is the driver's, not the loader's.
check "the package installed /usr/lib/<triplet>/vhost-blk/block-nbd.so" \
    test -f "$(dirname "$MODULE")/block-nbd.so"
nbd_maps() { grep -c 'libnbd\.so\|block-nbd\.so' "/proc/$pid/maps"; }
check_eq "before a driver=nbd node, no libnbd is mapped" "$(nbd_maps)" 0
vhost-blk-ctl -s "$QMP" qmp blockdev-add \
    '{"driver":"nbd","node-name":"n0","server":{"type":"unix","path":"/nonexistent/nbd.sock"}}' \
    > "$T/nbd" 2>&1
detail "$T/nbd"
check "blockdev-add driver=nbd loads the module (the connect fails)" \
    grep -q "nbd.sock: cannot connect" "$T/nbd"
check "block-nbd.so and libnbd are mapped now" test "$(nbd_maps)" -gt 0
check_eq "... and the daemon is still active" "$(prop ActiveState $SVC)" active
systemctl stop "$SVC"

# --- systemd-analyze security ---------------------------------------------
systemd-analyze security --no-pager "$SVC" > "$T/sec" 2>&1
score=$(sed -n 's/.*Overall exposure level for [^:]*: *\([0-9.]*\) *\(.*\)/\1 \2/p' "$T/sec")
say "info security=$score"
check "systemd-analyze security $SVC ran" test -n "$score"
grep -E '^ *✗' "$T/sec" | detail

say "# done: $N test(s)"
exit 0
