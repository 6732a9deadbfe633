#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Least privilege of vhost-blkd (no guest): socket mode, owner and group;
# no symlink followed at the socket path; --user drops to another uid/gid
# after opening a root-only image (checked in /proc/PID/status, I/O still
# works); --seccomp on confines the iothreads only (also one added at run
# time with object-add) and I/O still verifies.
set -u
. "$(dirname "$0")/lib.sh"

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
bench=$(vb_bin vhost-blk-bench) || vb_bail "vhost-blk-bench is not built in $VHOST_BLK_BUILD"
root=0
[ "$(id -u)" -eq 0 ] && root=1
chmod 0755 "$VB_TMP"

# quiet CMD [ARGS...]: run CMD with its output in $VB_TMP/quiet.log.
quiet() { "$@" > "$VB_TMP/quiet.log" 2>&1; }

# stat_of PATH: "mode owner group" of PATH (no symlink followed).
stat_of() { stat -c '%a %U %G' "$1"; }

# default: 0600, owned by us
sock=$VB_TMP/default.sock
if vb_daemon_start default "$sock" "$blkd" \
        --export "socket=$sock,driver=null,size=16M"; then
    vb_check_eq "socket is 0600 by default" "$(stat -c %a "$sock")" 600
    vb_stop "$VB_LAST_PID"
else
    vb_not_ok "default socket: daemon starts"
fi

# socket-mode, socket-owner, socket-group
sock=$VB_TMP/shared.sock
if [ $root = 1 ]; then
    if vb_daemon_start shared "$sock" "$blkd" \
            --export "socket=$sock,driver=null,size=16M,socket-mode=0660,socket-owner=nobody,socket-group=daemon"; then
        vb_check_eq "socket-mode=0660,socket-owner=nobody,socket-group=daemon" \
            "$(stat_of "$sock")" "660 nobody daemon"
        vb_stop "$VB_LAST_PID"
    else
        vb_not_ok "socket-owner/group: daemon starts"
    fi
else
    vb_skip "socket-owner/socket-group" "needs root"
fi
if vb_daemon_start mode "$sock" "$blkd" \
        --export "socket=$sock,driver=null,size=16M,socket-mode=0640"; then
    vb_check_eq "socket-mode=0640" "$(stat -c %a "$sock")" 640
    vb_stop "$VB_LAST_PID"
else
    vb_not_ok "socket-mode=0640: daemon starts"
fi
if "$blkd" --export "socket=$sock,driver=null,size=16M,socket-mode=999" \
        > "$VB_TMP/badmode.log" 2>&1; then
    vb_not_ok "socket-mode=999 is refused" "vhost-blkd started"
else
    vb_check "socket-mode=999 is refused with a hint" \
        grep -q "octal permissions" "$VB_TMP/badmode.log"
fi
if "$blkd" --export "socket=$sock,driver=null,size=16M,socket-group=no-such-group-vb" \
        > "$VB_TMP/badgroup.log" 2>&1; then
    vb_not_ok "an unknown socket-group is refused" "vhost-blkd started"
else
    vb_check "an unknown socket-group is refused" \
        grep -q "no group 'no-such-group-vb'" "$VB_TMP/badgroup.log"
fi

# a symlink at the socket path is never followed
target=$VB_TMP/victim
echo "precious" > "$target"
ln -s "$target" "$VB_TMP/link.sock"
if timeout 10 "$blkd" --export "socket=$VB_TMP/link.sock,driver=null,size=16M" \
        > "$VB_TMP/symlink.log" 2>&1; then
    vb_not_ok "a symlink at the socket path is refused" "vhost-blkd started"
else
    vb_check "a symlink at the socket path is refused with a message" \
        grep -q "symbolic link; refusing to follow it" "$VB_TMP/symlink.log"
fi
vb_check "the symlink and its target are untouched" \
    test -L "$VB_TMP/link.sock" -a "$(cat "$target")" = precious
# a dangling symlink too: bind() would otherwise create its target
ln -s "$VB_TMP/not-there.sock" "$VB_TMP/dangling.sock"
if timeout 10 "$blkd" --export "socket=$VB_TMP/dangling.sock,driver=null,size=16M" \
        > "$VB_TMP/dangling.log" 2>&1; then
    vb_not_ok "a dangling symlink at the socket path is refused" "vhost-blkd started"
else
    vb_check "a dangling symlink is refused and its target not created" \
        test ! -e "$VB_TMP/not-there.sock"
fi

# --user: open a root-only image, then run as nobody
if [ $root = 1 ]; then
    img=$(vb_mkimg private 16M)
    chmod 0600 "$img"
    sock=$VB_TMP/user.sock
    if vb_daemon_start user "$sock" "$blkd" --user nobody \
            --export "socket=$sock,file=$img,socket-owner=nobody"; then
        pid=$VB_LAST_PID
        vb_check_eq "--user nobody: Uid in /proc/PID/status" \
            "$(awk '/^Uid:/ {print $2, $3, $4, $5}' /proc/$pid/status)" \
            "65534 65534 65534 65534"
        vb_check_eq "--user nobody: Gid in /proc/PID/status" \
            "$(awk '/^Gid:/ {print $2, $3, $4, $5}' /proc/$pid/status)" \
            "65534 65534 65534 65534"
        vb_check "--user nobody: I/O on the root-only image verifies" \
            quiet "$bench" --socket "$sock" --rw randrw --verify --ios 2000 --iodepth 8
        vb_stop "$pid"
    else
        vb_not_ok "--user nobody: daemon starts"
    fi
    if "$blkd" --user no-such-user-vb --export "socket=$sock,driver=null,size=16M" \
            > "$VB_TMP/nouser.log" 2>&1; then
        vb_not_ok "--user with an unknown user is refused" "vhost-blkd started"
    else
        vb_check "--user with an unknown user is refused" \
            grep -q "no user 'no-such-user-vb'" "$VB_TMP/nouser.log"
    fi
    # supplementary groups: a throw-away user in two extra groups (the
    # static build reads /etc/group itself instead of initgroups()/NSS)
    if command -v useradd >/dev/null && command -v groupadd >/dev/null; then
        u=vbtest$$
        groupadd "${u}g" && useradd -M -N -g nogroup -G "${u}g,disk" -s /usr/sbin/nologin "$u"
        sock=$VB_TMP/groups.sock
        if vb_daemon_start groups "$sock" "$blkd" --user "$u" \
                --export "socket=$sock,driver=null,size=16M"; then
            pid=$VB_LAST_PID
            want=$(id -G "$u" | tr ' ' '\n' | sort -n | paste -sd' ')
            got=$(awk '/^Groups:/ {for (i = 2; i <= NF; i++) print $i}' /proc/$pid/status |
                  sort -n | paste -sd' ')
            vb_check_eq "--user USER: its supplementary groups (id -G)" "$got" "$want"
            vb_stop "$pid"
        else
            vb_not_ok "--user USER with supplementary groups: daemon starts"
        fi
        userdel "$u" 2>/dev/null; groupdel "${u}g" 2>/dev/null
    else
        vb_skip "--user supplementary groups" "no useradd/groupadd"
    fi
else
    vb_skip "--user" "needs root"
fi

# --seccomp on
if grep -q "seccomp on|off" <("$blkd" --help) && "$blkd" --seccomp on --help >/dev/null 2>&1 &&
        ! "$blkd" --seccomp on --export "socket=$VB_TMP/x.sock" 2>&1 | grep -q "no libseccomp"; then
    img=$(vb_mkimg sandbox 32M)
    sock=$VB_TMP/sandbox.sock
    if vb_daemon_start sandbox "$sock" "$blkd" --seccomp on --iothreads 2 \
            --export "socket=$sock,file=$img,num-queues=2" \
            --export "socket=$VB_TMP/sandbox2.sock,file=$img,aio=threads,cache=writeback,readonly=on"; then
        pid=$VB_LAST_PID
        filtered=$(for t in /proc/$pid/task/*; do
            printf '%s=%s\n' "$(cat "$t/comm")" "$(awk '/^Seccomp:/ {print $2}' "$t/status")"
        done | sort -u | tr '\n' ' ')
        vb_check_eq "--seccomp on: iothreads filtered, main thread not" \
            "$filtered" "vb-iothread0=2 vb-iothread1=2 vhost-blkd=0 "
        vb_check "--seccomp on: randrw --verify on 2 queues" \
            quiet "$bench" --socket "$sock" --rw randrw --verify --queues 2 --runtime 2 --iodepth 16
        vb_check "--seccomp on: thread-pool engine (workers spawned under the filter)" \
            quiet "$bench" --socket "$VB_TMP/sandbox2.sock" --rw randread --ios 5000
        vb_check "--seccomp on: the daemon is still alive" kill -0 "$pid"
        vb_stop "$pid"
    else
        vb_not_ok "--seccomp on: daemon starts"
    fi

    # an iothread added at run time (QMP object-add) is confined too, and
    # an export on it serves
    qmp="python3 $(dirname "$0")/qmp.py"
    mon=$VB_TMP/sandbox-qmp.sock
    late=$VB_TMP/late.sock
    if vb_daemon_start sandbox-late "$mon" "$blkd" --seccomp on --iothreads 1 \
            --chardev "socket,id=m0,path=$mon,server=on,wait=off" --monitor chardev=m0 \
            --blockdev "driver=file,node-name=n0,filename=$img"; then
        pid=$VB_LAST_PID
        vb_check "--seccomp on: object-add iothread at run time" \
            quiet $qmp "$mon" '{"execute": "object-add", "arguments": {"qom-type": "iothread", "id": "late"}}' \
            "{\"execute\": \"block-export-add\", \"arguments\": {\"type\": \"vhost-user-blk\", \"id\": \"e\", \"node-name\": \"n0\", \"writable\": true, \"iothread\": \"late\", \"addr\": {\"type\": \"unix\", \"path\": \"$late\"}}}"
        filtered=$(for t in /proc/$pid/task/*; do
            printf '%s=%s\n' "$(cat "$t/comm")" "$(awk '/^Seccomp:/ {print $2}' "$t/status")"
        done | grep '^vb-late=' | sort -u)
        vb_check_eq "--seccomp on: the object-add iothread is filtered" "$filtered" "vb-late=2"
        vb_check "--seccomp on: randrw --verify on the object-add iothread" \
            quiet "$bench" --socket "$late" --rw randrw --verify --ios 3000 --iodepth 8
        vb_check "--seccomp on: alive after I/O on the late iothread" kill -0 "$pid"
        vb_stop "$pid"
    else
        vb_not_ok "--seccomp on with a monitor: daemon starts"
    fi
else
    vb_skip "--seccomp on" "built without libseccomp"
fi

vb_done
