#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# vhost-blkd is not dumpable unless --allow-core-dumps (or the config
# line allow-core-dumps) asks for it: a crash writes no core holding its
# keys, and no other process of its user may ptrace it or read its memory.
# Seen from outside the way the kernel shows it: the files of a process
# that is not dumpable, /proc/PID/status among them, belong to root; those
# of a dumpable one to its user (proc(5), PR_SET_DUMPABLE).  So the daemon
# runs as a user other than root: started as nobody (setpriv, as root), or
# as ourselves (not root); as root also with --user nobody, since setuid()
# resets the flag to fs.suid_dumpable and the daemon must set it again.
# No guest.
set -u
. "$(dirname "$0")/lib.sh"

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
chmod 0755 "$VB_TMP"
run=$VB_TMP/run
mkdir -p "$run"
if [ "$(id -u)" -eq 0 ]; then
    as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups --)
    user_uid=$(id -u nobody)
    chown nobody "$run"
else
    as_user=()
    user_uid=$(id -u)
fi

# owner_of PID: the uid owning /proc/PID/status.
owner_of() { stat -c %u "/proc/$1/status"; }

# dumpable_case NAME WANT_UID [vhost-blkd ARGS...]: start the daemon with
# one null export and ARGS; /proc/PID/status must belong to WANT_UID.
dumpable_case() {
    local name=$1 want=$2 sock=$run/$1.sock
    shift 2
    if vb_daemon_start "$name" "$sock" "$@" \
            --export "socket=$sock,driver=null,size=16M"; then
        vb_check_eq "$name: /proc/PID/status belongs to uid $want" \
            "$(owner_of "$VB_LAST_PID")" "$want"
        vb_stop "$VB_LAST_PID"
    else
        vb_not_ok "$name: the daemon starts"
    fi
}

dumpable_case default 0 "${as_user[@]}" "$blkd"
dumpable_case allow "$user_uid" "${as_user[@]}" "$blkd" --allow-core-dumps
vb_check "allow: the log says core dumps are allowed" \
    grep -q 'core dumps allowed (--allow-core-dumps)' "$VB_TMP/allow.log"
printf 'allow-core-dumps\nlog-level info\n' > "$VB_TMP/vb.conf"
chmod 0644 "$VB_TMP/vb.conf"
dumpable_case config "$user_uid" "${as_user[@]}" "$blkd" --config "$VB_TMP/vb.conf"

if [ "$(id -u)" -eq 0 ]; then
    dumpable_case user-default 0 "$blkd" --user nobody
    dumpable_case user-allow "$(id -u nobody)" "$blkd" --user nobody \
        --allow-core-dumps
else
    vb_skip "--user nobody: not dumpable unless asked" "needs root"
fi

"$blkd" --help > "$VB_TMP/help.txt" 2>&1
vb_check "--help lists --allow-core-dumps" grep -q -- '--allow-core-dumps' "$VB_TMP/help.txt"

vb_done
