#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The Debian package end to end: build the .deb (dpkg-buildpackage -b, no
# tests inside; once per tree content, tests/functional/deb-build.sh),
# lintian, unpack it into a scratch root, check what it installs, verify
# the installed units with systemd-analyze, then start the installed
# vhost-blkd exactly as vhost-blkd@test.service would (its
# ExecStart line, the installed example conf, Type=notify, the socket of
# vhost-blkd@test.socket passed as fd 3) and serve a real guest running
# fio with verification.  Paths under / are mapped into the scratch root;
# systemd is not PID 1 here, so the test plays the service manager.
set -u
. "$(dirname "$0")/lib.sh"

vb_setup
for tool in dpkg-buildpackage dh lintian systemd-analyze python3; do
    command -v "$tool" > /dev/null ||
        vb_bail "$tool is missing (scripts/install-deps.sh installs it)"
done

# --- build the .deb from the tree's files (not from build dirs) ---------
# Once per tree content (tests/functional/deb-build.sh caches it).
. "$VB_FUNC/deb-build.sh"
if deb=$(vb_deb_build); then
    vb_ok "dpkg-buildpackage -b -us -uc builds the package"
else
    vb_bail "dpkg-buildpackage failed"
fi
echo "# $(basename "$deb"), $(stat -c %s "$deb") bytes"

lintian --fail-on error,warning -q "$deb" > "$VB_TMP/lintian.log" 2>&1
lint_rc=$?
grep -v "^running with root privileges" "$VB_TMP/lintian.log" | sed 's/^/#   /'
vb_check_eq "lintian: no error or warning" "$lint_rc" 0

# --- unpack into a scratch root -----------------------------------------
root=$VB_TMP/root
dpkg-deb -x "$deb" "$root" || vb_bail "dpkg-deb -x failed"
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
moddir=usr/lib/$triplet/vhost-blk
missing=
for f in usr/sbin/vhost-blkd usr/bin/vhost-blk-ctl usr/bin/vhost-blk-bench \
         $moddir/block-rbd.so $moddir/block-nbd.so \
         lib/systemd/system/vhost-blkd@.service \
         lib/systemd/system/vhost-blkd@.socket \
         usr/share/man/man8/vhost-blkd.8.gz usr/share/man/man8/vhost-blk-ctl.8.gz \
         usr/share/man/man1/vhost-blk-bench.1.gz \
         usr/share/doc/vhost-blk/examples/example.conf \
         usr/share/doc/vhost-blk/copyright etc/vhost-blk; do
    [ -e "$root/$f" ] || missing="$missing $f"
done
vb_check_eq "the package holds the tools, rbd and nbd modules, units, man pages and example" \
    "${missing:-none}" none
unresolved=$(ldd "$root/usr/sbin/vhost-blkd" "$root/usr/bin/vhost-blk-ctl" \
             "$root/usr/bin/vhost-blk-bench" "$root/$moddir/block-rbd.so" \
             "$root/$moddir/block-nbd.so" 2>&1 | grep "not found")
vb_check_eq "its programs' and module's libraries are all found" \
    "${unresolved:-none}" none
# Ceph comes with the module only, and the package still pulls it in.
vb_check_eq "vhost-blkd itself does not link librbd" \
    "$(readelf -d "$root/usr/sbin/vhost-blkd" | grep -c 'librbd\|librados')" 0
vb_check "the package Depends on librbd1 (RBD works out of the box)" \
    sh -c "dpkg-deb -f \"$deb\" Depends | grep -q librbd1"
# libnbd (and the GnuTLS, libxml2 and ICU it brings) likewise.
vb_check_eq "vhost-blkd itself does not link libnbd" \
    "$(readelf -d "$root/usr/sbin/vhost-blkd" | grep -c 'libnbd')" 0
vb_check "the package Depends on libnbd0 (driver=nbd works out of the box)" \
    sh -c "dpkg-deb -f \"$deb\" Depends | grep -q libnbd0"
# The packaged daemon loads the packaged module: with the module found,
# the error is librados's (no such ceph.conf), not a loader's.
rbd_start() {
    "$root/usr/sbin/vhost-blkd" --export \
        "socket=$VB_TMP/rbd.sock,rbd=rbd/img,ceph-conf=/nonexistent/ceph.conf" \
        > "$VB_TMP/rbd.out" 2>&1
    sed 's/^/#   /' "$VB_TMP/rbd.out"
}
VHOST_BLK_MODULE_DIR=$root/$moddir rbd_start
vb_check "the packaged vhost-blkd loads the packaged block-rbd.so" \
    grep -q "cannot read the Ceph configuration" "$VB_TMP/rbd.out"
# Without the override it looks where the package installs it (/usr/lib/
# TRIPLET/vhost-blk): named in the error, or loaded if installed here.
rbd_start
vb_check "the packaged vhost-blkd looks for the module in /$moddir" \
    grep -q "/$moddir/block-rbd.so\|cannot read the Ceph configuration" \
    "$VB_TMP/rbd.out"
# The same for block-nbd.so: with the module found, the error is the
# driver's (no server on that socket), not a loader's.
VHOST_BLK_MODULE_DIR=$root/$moddir "$root/usr/sbin/vhost-blkd" \
    --blockdev "driver=nbd,node-name=n0,server.type=unix,server.path=$VB_TMP/no-nbd.sock" \
    --export "type=vhost-user-blk,id=e,node-name=n0,addr.type=unix,addr.path=$VB_TMP/nbd.sock" \
    > "$VB_TMP/nbd.out" 2>&1
sed 's/^/#   /' "$VB_TMP/nbd.out"
vb_check "the packaged vhost-blkd loads the packaged block-nbd.so" \
    grep -q "no-nbd.sock: cannot connect" "$VB_TMP/nbd.out"
installed_version() {
    "$root/usr/sbin/vhost-blkd" --version | sed 's/^/# /'
    return "${PIPESTATUS[0]}"
}
vb_check "vhost-blkd --version runs from the package" installed_version
manwarn=$(for m in "$root"/usr/share/man/man*/*.gz; do
              LC_ALL=C.UTF-8 man --warnings -l -Tutf8 "$m" 2>&1 > /dev/null
          done)
vb_check_eq "the man pages render without warnings" "${manwarn:-none}" none

# --- the installed units ------------------------------------------------
service=$root/lib/systemd/system/vhost-blkd@.service
socketunit=$root/lib/systemd/system/vhost-blkd@.socket
execstart=$(sed -n 's/^ExecStart=//p' "$service")
vb_check_eq "ExecStart reads /etc/vhost-blk/%i.conf" "$execstart" \
    "/usr/sbin/vhost-blkd --config /etc/vhost-blk/%i.conf"
vb_check_eq "the service is Type=notify" \
    "$(sed -n 's/^Type=//p' "$service")" notify
listen=$(sed -n 's/^ListenStream=//p' "$socketunit")
vb_check_eq "the socket unit listens on /run/vhost-blk/%i.sock" "$listen" \
    "/run/vhost-blk/%i.sock"
# systemd-analyze checks that ExecStart's program exists and that the
# Documentation= pages open: point both at the scratch root.
mkdir -p "$VB_TMP/units"
sed "s|/usr/sbin/vhost-blkd|$root/usr/sbin/vhost-blkd|" "$service" \
    > "$VB_TMP/units/vhost-blkd@.service"
cp "$socketunit" "$VB_TMP/units/"
if (cd "$VB_TMP/units" && MANPATH=$root/usr/share/man \
        systemd-analyze verify ./vhost-blkd@test.service \
        ./vhost-blkd@test.socket) > "$VB_TMP/verify.log" 2>&1; then
    vb_ok "systemd-analyze verify vhost-blkd@test.service vhost-blkd@test.socket"
else
    sed 's/^/#   /' "$VB_TMP/verify.log"
    vb_not_ok "systemd-analyze verify vhost-blkd@test.service vhost-blkd@test.socket"
fi

# --- run it as vhost-blkd@test, with the installed example conf ---------
# / -> scratch paths: /etc/vhost-blk, /run/vhost-blk, /var/lib/vhost-blk.
etc=$VB_TMP/etc/vhost-blk run=$VB_TMP/run/vhost-blk lib=$VB_TMP/var/lib/vhost-blk
mkdir -p "$etc" "$run" "$lib"
map() {
    sed -e "s|/etc/vhost-blk/|$etc/|g" -e "s|/run/vhost-blk/|$run/|g" \
        -e "s|/var/lib/vhost-blk/|$lib/|g" -e "s|/usr/sbin/|$root/usr/sbin/|g"
}
sed 's/NAME/test/g' "$root/usr/share/doc/vhost-blk/examples/example.conf" |
    map > "$etc/test.conf"
truncate -s 256M "$lib/test.img"
sock=$(echo "$listen" | sed 's/%i/test/g' | map)
nq=$(sed -n 's/^export .*num-queues=\([0-9]*\).*/\1/p' "$etc/test.conf")
# The ExecStart line, %i expanded, its words as systemd splits them.
read -r -a cmd <<< "$(echo "$execstart" | sed 's/%i/test/g' | map)"
echo "# ExecStart: ${cmd[*]}"
notify=$VB_TMP/notify.log
python3 "$VB_FUNC/systemd-manager.py" run "$sock" "$notify" "${cmd[@]}" &
mgr=$!
VB_PIDS+=("$mgr")
n=0
until grep -q "READY=1" "$notify" 2>/dev/null; do
    kill -0 "$mgr" 2>/dev/null || break
    [ $n -ge 1200 ] && break         # 60 s: a hang guard only
    sleep 0.05
    n=$((n + 1))
done
if ! vb_check "the installed vhost-blkd reports READY=1 (Type=notify)" \
        grep -q "READY=1" "$notify"; then
    sed 's/^/#   /' "$notify.out" 2>/dev/null
fi
# The manager's socket file is the one served: had vhost-blkd bound its
# own, it would have found the path in use and stopped.
vb_check "it serves the socket passed by the service manager" \
    grep -q "listening on $sock" "$notify.out"
ctl() {
    "$root/usr/bin/vhost-blk-ctl" -s "$run/test.qmp" "$@" > "$VB_TMP/ctl.out" 2>&1
    local rc=$?
    sed 's/^/#   /' "$VB_TMP/ctl.out"
    return $rc
}
vb_check "the installed vhost-blk-ctl lists the export on the conf's monitor" \
    sh -c "\"$root/usr/bin/vhost-blk-ctl\" -s \"$run/test.qmp\" exports | grep -q \"$lib/test.img\""
vb_check "a guest on it runs fio randwrite + verify ($nq queues)" \
    vb_guest -s "$sock" -q "${nq:-1}" -j fio-verify vbsize=64M
ctl stats
ctl --json stats > /dev/null
wbytes=$(grep -o '"wr_bytes" *: *[0-9]*' "$VB_TMP/ctl.out" | head -n1 | grep -o '[0-9]*$')
vb_check_eq "vhost-blk-ctl stats counted the guest's 64 MiB of writes" \
    "$(( ${wbytes:-0} >= 67108864 ))" 1
kill -TERM "$mgr"
wait "$mgr"
rc=$?
vb_check_eq "SIGTERM: vhost-blkd exits 0" "$rc" 0
vb_check "SIGTERM: STOPPING=1 was sent" grep -q "STOPPING=1" "$notify"
sed 's/^/#   log: /' "$notify.out"

vb_done
