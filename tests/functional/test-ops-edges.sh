#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# What a new operator hits in a day with vhost-blkd, vhost-blk-ctl and
# vhost-blk-bench (no guest): --version everywhere; SIGHUP drains and
# cleans up like SIGTERM; a locked pidfile that a second daemon cannot
# take; relative paths with --daemonize; --config errors with FILE:LINE;
# a size that is not a multiple of 512 said out loud; qemu-storage-daemon's
# JSON option syntax; the export's writable state, query-iothreads and
# --export id= through vhost-blk-ctl; log lines that say what happened (a
# probe is not a front-end, del --force is not a shutdown, two iothread
# objects are two); and the bench failing at once, without figures, when
# its back-end hangs up.
set -u
. "$(dirname "$0")/lib.sh"

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
ctl=$(vb_bin vhost-blk-ctl) || vb_bail "vhost-blk-ctl is not built in $VHOST_BLK_BUILD (needs libjson-glib-dev)"
bench=$(vb_bin vhost-blk-bench) || vb_bail "vhost-blk-bench is not built in $VHOST_BLK_BUILD"
out=$VB_TMP/out.txt
version=$(sed -n "s/^ *version: '\([^']*\)',/\1/p" "$VB_ROOT/meson.build" | head -n1)

# wait_for N CMD...: run CMD every 0.1 s until it succeeds, at most N s.
wait_for() {
    local n=$(( $1 * 10 ))
    shift
    until "$@"; do
        n=$((n - 1))
        [ "$n" -gt 0 ] || return 1
        sleep 0.1
    done
}
# gone PID: the process has exited (and is reaped if it is our child).
gone() { ! kill -0 "$1" 2>/dev/null; }
show() { sed 's/^/#   /' "$1"; }

# --- --version -----------------------------------------------------------
for p in "$blkd" "$ctl" "$bench"; do
    n=${p##*/}
    if "$p" --version > "$out" 2>&1 && grep -qx "$n $version" "$out"; then
        vb_ok "$n --version prints '$n $version' (meson's project version)"
    else
        vb_not_ok "$n --version prints '$n $version'" "$(head -c 200 "$out")"
    fi
done

img=$(vb_mkimg disk 16M)

# --- SIGHUP: drain and exit as SIGTERM does -----------------------------
sock=$VB_TMP/hup.sock
pidf=$VB_TMP/hup.pid
vb_daemon_start hup "$sock" "$blkd" --pidfile "$pidf" \
    --export "socket=$sock,file=$img" || vb_bail "vhost-blkd did not start"
pid=$VB_LAST_PID
wait_for 60 test -s "$pidf"
kill -HUP "$pid"
wait_for 60 gone "$pid"
wait "$pid"
rc=$?
vb_check_eq "SIGHUP: the daemon exits with status 0 (not 129)" "$rc" 0
vb_check "SIGHUP: ...logging that it shuts down" grep -q 'SIGHUP): shutting down' "$VB_TMP/hup.log"
vb_check "SIGHUP: ...its socket is removed" test ! -e "$sock"
vb_check "SIGHUP: ...and its pidfile" test ! -e "$pidf"

# --- a locked pidfile ------------------------------------------------------
pidf=$VB_TMP/vm1.pid
"$blkd" --daemonize --pidfile "$pidf" --export "socket=$VB_TMP/a.sock,file=$img" \
    > "$out" 2>&1 || { show "$out"; vb_bail "the first --daemonize vhost-blkd did not start"; }
pid_a=$(cat "$pidf")
"$blkd" --daemonize --pidfile "$pidf" --export "socket=$VB_TMP/b.sock,file=$img" \
    > "$out" 2>&1
rc=$?
show "$out"
vb_check "pidfile: a second daemon with the same --pidfile refuses to start" test "$rc" -ne 0
vb_check "pidfile: ...saying the pidfile is locked by another daemon" \
    grep -q "pidfile $pidf is locked by another running daemon (pid $pid_a)" "$out"
vb_check_eq "pidfile: ...and leaves the first daemon's pid in it" "$(cat "$pidf" 2>/dev/null)" "$pid_a"
vb_check "pidfile: ...and no socket of its own behind" test ! -e "$VB_TMP/b.sock"
pid_b=$(cat "$pidf" 2>/dev/null)
# Without the lock the second daemon would run on: stop it too.
[ -n "$pid_b" ] && [ "$pid_b" != "$pid_a" ] && kill -TERM "$pid_b"
kill -TERM "$pid_a"
wait_for 60 gone "$pid_a"
vb_check "pidfile: removed when the daemon exits" test ! -e "$pidf"
vb_check "pidfile: ...with its socket" test ! -e "$VB_TMP/a.sock"

# --- relative paths with --daemonize ---------------------------------------
mkdir -p "$VB_TMP/rel"
(cd "$VB_TMP/rel" && cp "$img" rel.img &&
 "$blkd" --daemonize --pidfile rel.pid --export "socket=rel.sock,file=rel.img") > "$out" 2>&1 ||
    { show "$out"; vb_bail "--daemonize with relative paths did not start"; }
vb_check "--daemonize, relative socket=: the socket is where the operator asked" \
    test -S "$VB_TMP/rel/rel.sock"
pid=$(cat "$VB_TMP/rel/rel.pid" 2>/dev/null)
if [ -n "$pid" ]; then
    vb_check "--daemonize: the daemon answers on it (bench --verify)" \
        "$bench" --socket "$VB_TMP/rel/rel.sock" --verify --rw randrw --ios 2000 --iodepth 4
    kill -TERM "$pid"
    wait_for 60 gone "$pid"
else
    vb_not_ok "--daemonize, relative --pidfile: written where asked" "no $VB_TMP/rel/rel.pid"
fi
vb_check "--daemonize: the relative socket is removed at exit" test ! -e "$VB_TMP/rel/rel.sock"
vb_check "--daemonize: the relative pidfile is removed at exit" test ! -e "$VB_TMP/rel/rel.pid"

# --- --config errors say FILE:LINE ------------------------------------------
# conf_err NAME LINE WANT_RE TEXT: a file with TEXT; the error names it,
# line LINE, and matches WANT_RE; it does not show the binary's path.
conf_err() {
    local name=$1 line=$2 want=$3 conf=$VB_TMP/$1.conf
    printf '%s\n' "$4" > "$conf"
    "$blkd" --config "$conf" > "$out" 2>&1
    show "$out"
    if grep -q "$conf:$line: .*$want" "$out" && ! grep -qF "$blkd" "$out"; then
        vb_ok "--config: $name: the error says $conf:$line and $want"
    else
        vb_not_ok "--config: $name: the error says $conf:$line and $want" "$(head -c 300 "$out")"
    fi
}
conf_err bogus 3 "bogus-opt" "# a comment
export socket=$VB_TMP/c.sock,file=$img
bogus-opt 3"
conf_err iothreads 2 "iothreads two" "export socket=$VB_TMP/c.sock,file=$img
iothreads two"
conf_err bare-export 1 "'export' needs a value" "export
iothreads 2"
conf_err bare-export-last 2 "'export' needs a value" "iothreads 2
export"

# --- --export keys that contradict the driver ------------------------------
# A later driver= would otherwise silently drop an earlier file= or rbd=
# (QEMU's null-co refuses a filename too).
"$blkd" --export "socket=$VB_TMP/c.sock,rbd=rbd/img,driver=null,size=1M" > "$out" 2>&1
vb_check_eq "rbd= then driver=null is refused (exit 1)" "$?" 1
show "$out"
vb_check "  ...saying rbd= needs driver=rbd" grep -q "rbd=rbd/img needs driver=rbd, not driver=null" "$out"
head -c 4096 /dev/zero > "$VB_TMP/c.img"
"$blkd" --export "socket=$VB_TMP/c.sock,file=$VB_TMP/c.img,driver=null,size=1M" > "$out" 2>&1
vb_check_eq "file= with driver=null is refused (exit 1)" "$?" 1
show "$out"
vb_check "  ...saying which to drop" grep -q "driver=null reads no file: drop file=" "$out"

# --- an image that is not a multiple of 512 bytes ---------------------------
odd=$VB_TMP/odd.img
head -c 1000 /dev/zero > "$odd"
vb_daemon_start odd "$VB_TMP/odd.sock" "$blkd" --export "socket=$VB_TMP/odd.sock,file=$odd" ||
    vb_bail "vhost-blkd on a 1000-byte image did not start"
vb_stop "$VB_LAST_PID"
show "$VB_TMP/odd.log"
vb_check "1000-byte image: warned that its last 488 bytes are not served" \
    grep -q "image is 1000 bytes, not a multiple of the 512-byte logical block: its last 488 bytes are not served" "$VB_TMP/odd.log"

# --- qemu-storage-daemon's JSON syntax ------------------------------------
js=$VB_TMP/json.sock
qmp=$VB_TMP/json.qmp
vb_daemon_start json "$qmp" "$blkd" \
    --blockdev "{\"driver\":\"file\",\"node-name\":\"n0\",\"filename\":\"$img\",\"cache\":{\"direct\":false}}" \
    --object '{"qom-type":"iothread","id":"io0"}' \
    --export "{\"type\":\"vhost-user-blk\",\"id\":\"e0\",\"node-name\":\"n0\",\"addr\":{\"type\":\"unix\",\"path\":\"$js\"},\"writable\":true,\"num-queues\":2,\"iothread\":\"io0\"}" \
    --chardev "socket,id=mon,path=$qmp,server=on,wait=off" \
    --monitor '{"chardev":"mon"}' ||
    { show "$VB_TMP/json.log"; vb_not_ok "JSON --blockdev/--object/--export/--monitor accepted"; }
if [ -S "$js" ]; then
    vb_ok "JSON --blockdev/--object/--export/--monitor accepted"
    vb_check "JSON: the export serves I/O (bench --verify, 2 queues)" \
        "$bench" --socket "$js" --verify --rw randrw --queues 2 --ios 4000 --iodepth 8
    VHOST_BLK_CTL_SOCKET=$qmp "$ctl" exports > "$out" 2>&1
    show "$out"
    vb_check "JSON: ...and is e0 on node n0, writable" \
        grep -Eq '^e0 +vhost-user-blk +n0 +[^ ]+ +no ' "$out"
    vb_stop "$VB_LAST_PID"
fi

# --- ctl: writable state, iothreads, --export id= ---------------------------
qmp=$VB_TMP/mon.qmp
export VHOST_BLK_CTL_SOCKET=$qmp
img2=$(vb_mkimg disk2 16M)
vb_daemon_start ctl "$qmp" "$blkd" \
    --object iothread,id=io0 --object iothread,id=io1,poll-max-ns=0 \
    --blockdev "driver=file,node-name=qn,filename=$img2" \
    --export "type=vhost-user-blk,id=qe,node-name=qn,addr.type=unix,addr.path=$VB_TMP/q.sock,iothread=io1" \
    --export "socket=$VB_TMP/d.sock,file=$img,id=disk1" \
    --chardev "socket,id=mon,path=$qmp,server=on,wait=off" \
    --monitor chardev=mon || vb_bail "vhost-blkd with a monitor did not start"
ctl_pid=$VB_LAST_PID
"$ctl" exports > "$out" 2>&1
show "$out"
vb_check "ctl exports: a QSD-style export without writable=on shows RO yes" \
    grep -Eq '^qe +vhost-user-blk +qn +[^ ]+ +yes ' "$out"
vb_check "ctl exports: --export id=disk1 is export disk1 on node disk1, RO no" \
    grep -Eq '^disk1 +vhost-user-blk +disk1 +[^ ]+ +no ' "$out"
"$ctl" iothreads > "$out" 2>&1
rc=$?
show "$out"
vb_check_eq "ctl iothreads: exit 0" "$rc" 0
vb_check "ctl iothreads: lists io0 and io1 (poll-max-ns 0)" \
    sh -c "grep -Eq '^io0 +[0-9]+ ' '$out' && grep -Eq '^io1 +[0-9]+ +0\$' '$out'"
"$ctl" qmp query-iothreads > "$out" 2>&1
vb_check "query-iothreads: QEMU's IOThreadInfo members" \
    python3 -c "import json,sys; r=json.load(open('$out')); sys.exit(0 if len(r)==2 and all(set(t)>={'id','thread-id','poll-max-ns','poll-grow','poll-shrink','aio-max-batch'} and t['thread-id']>0 for t in r) else 1)"
vb_check "ready line: two --object iothread are two objects (plus the pool)" \
    grep -q 'ready: 2 export(s), 2 iothread object(s) and 1 pool iothread(s)' "$VB_TMP/ctl.log"

"$ctl" stats > "$out" 2>&1
show "$out"
vb_check "ctl stats: names the exports by their ids (qe, disk1), as del takes them" \
    sh -c "grep -Eq '^qe ' '$out' && grep -Eq '^disk1 ' '$out' && ! grep -Eq '^qn ' '$out'"

# A second daemon probing the busy socket: refused, and no "front-end".
"$blkd" --export "socket=$VB_TMP/d.sock,file=$img" > "$out" 2>&1
show "$out"
vb_check "a second daemon on a busy socket refuses to start" grep -q "is in use by another process" "$out"
vb_check "...and the first does not log its probe as a front-end" \
    sh -c "! grep -q 'd.sock: front-end connected' '$VB_TMP/ctl.log'"

# The bench while its back-end goes away: del --force under its feet.
"$bench" --socket "$VB_TMP/d.sock" --runtime 600 --iodepth 4 > "$VB_TMP/bench.out" 2> "$VB_TMP/bench.err" &
bpid=$!
wait_for 30 grep -q 'd.sock: front-end connected' "$VB_TMP/ctl.log" ||
    vb_not_ok "the bench connected" "$(tail -n 5 "$VB_TMP/ctl.log")"
"$ctl" del disk1 --force > "$out" 2>&1
vb_check_eq "ctl del disk1 --force (the id from --export id=)" "$?" 0
# "At once" is what the message proves: without the hang-up check the
# bench would fail only by its 10 s completion timeout, saying so.
if wait_for 60 gone "$bpid"; then
    wait "$bpid"
    rc=$?
    show "$VB_TMP/bench.err"
    vb_check "bench: exits non-zero when its back-end hangs up" test "$rc" -ne 0
    vb_check "bench: ...saying the back-end closed the connection" \
        grep -q 'FAILED: queue 0: the back-end closed the connection' "$VB_TMP/bench.err"
    vb_check "bench: ...with no IOPS headline" sh -c "! grep -q IOPS '$VB_TMP/bench.out'"
else
    kill -KILL "$bpid" 2>/dev/null
    wait "$bpid" 2>/dev/null
    vb_not_ok "bench: fails at once when its back-end hangs up" "still running 60 s after del --force"
fi
vb_check "del --force: the session is closed as a removal, not a shutdown" \
    sh -c "grep -q 'd.sock: session closed: the export is being removed' '$VB_TMP/ctl.log' && ! grep -q 'server shutting down' '$VB_TMP/ctl.log'"
vb_stop "$ctl_pid"

# --- a refused secret never reaches the log ----------------------------
# data= is refused (it shows in ps); the message that says so must not
# print the key to stderr or the journal.  Every way the argument can be
# echoed: the refusal, a keyval syntax error, JSON, a split option.
key=TOPSECRETKEY0123
for arg in "secret,id=sec0,data=$key" "secret,id=sec0,data=$key," \
           "{\"qom-type\": \"secret\", \"id\": \"sec0\", \"data\": \"$key\"}" \
           "{\"qom-type\": \"secret\", \"data\": \"$key\""; do
    "$blkd" --object "$arg" --export "socket=$VB_TMP/s.sock,file=$img" \
        > "$out" 2>&1
    rc=$?
    show "$out"
    vb_check "secret: vhost-blkd refuses --object ${arg%%$key*}..." test "$rc" -ne 0
    vb_check "secret: ...and its message does not show the key" \
        sh -c "! grep -q '$key' '$out' && grep -q 'redacted\|JSON' '$out'"
done
"$blkd" --object secret,id=sec0 "data=$key" > "$out" 2>&1
show "$out"
vb_check "secret: a stray data=KEY argument is reported without the key" \
    sh -c "! grep -q '$key' '$out' && grep -q 'unexpected argument' '$out'"

vb_done
