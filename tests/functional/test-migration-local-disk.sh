#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Live migration with local disks, end to end, through
# scripts/migrate-local-disk.sh: a TCG guest whose two disks are served by
# vhost-blkd A from local images (vda: qcow2, where the guest job
# fio-until-stop writes and verifies; vdb: raw, the job's stop block)
# migrates to a second QEMU whose disks are vhost-blkd B's exports of two
# images the script creates empty (qcow2 and raw).  A's mirror jobs copy
# the disks over NBD with TLS (certificates made here with certtool; the
# server asks for the client's) while the guest writes; the VM migrates
# with the destination QEMU started -S; the mirrors end with
# block-job-cancel once the source stopped; before the destination runs,
# the images on both sides are compared (A's closed, B's still open), and
# a region of each disk written before the guest started and never touched
# by it must have reached B.  Then the destination runs, the host writes
# the stop block into B's raw image, and the guest's last fio pass,
# running on B's qcow2 image, verifies.  After the guest ends:
# qemu-img check of B's qcow2 image is clean.  A runs with --seccomp on
# (when the build has libseccomp) and must not have been refused a call.
#
# Nothing depends on timing: the guest job runs until the host stops it,
# and every wait polls a state with a generous timeout.
set -u
. "$(dirname "$0")/lib.sh"

qemu=${VHOST_BLK_QEMU:-qemu-system-x86_64}
SCRIPT=$VB_ROOT/scripts/migrate-local-disk.sh
QMP=$VB_FUNC/qmp.py

command -v "$qemu" >/dev/null || vb_skip_all "no QEMU binary '$qemu'"
for p in python3 qemu-img qemu-io certtool; do
    command -v $p >/dev/null || vb_skip_all "$p is not installed"
done
vb_setup
BLKD=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
"$BLKD" --help 2>&1 | grep -q -- '--nbd-server' ||
    vb_skip_all "this vhost-blkd has no NBD server"

# ---------------------------------------------------------- certificates
cert() { certtool "$@" >/dev/null 2>"$VB_TMP/certtool.err"; }
mkdir -p "$VB_TMP/ca" "$VB_TMP/tls-server" "$VB_TMP/tls-client"
printf 'cn = vb-test-ca\nca\ncert_signing_key\nexpiration_days = 3\n' \
    > "$VB_TMP/ca/ca.info"
printf 'cn = localhost\nexpiration_days = 3\nsigning_key\nencryption_key\nip_address = 127.0.0.1\ndns_name = localhost\ntls_www_server\n' \
    > "$VB_TMP/ca/server.info"
printf 'cn = migration-source\nexpiration_days = 3\nsigning_key\nencryption_key\ntls_www_client\n' \
    > "$VB_TMP/ca/client.info"
cert --generate-privkey --key-type=ecdsa --outfile "$VB_TMP/ca/ca-key.pem" &&
cert --generate-self-signed --load-privkey "$VB_TMP/ca/ca-key.pem" \
    --template "$VB_TMP/ca/ca.info" --outfile "$VB_TMP/ca/ca-cert.pem" ||
    vb_bail "certtool could not make the CA: $(cat "$VB_TMP/certtool.err")"
for who in server client; do
    d=$VB_TMP/tls-$who
    cert --generate-privkey --key-type=ecdsa --outfile "$d/$who-key.pem" &&
    cert --generate-certificate --load-privkey "$d/$who-key.pem" \
        --load-ca-certificate "$VB_TMP/ca/ca-cert.pem" \
        --load-ca-privkey "$VB_TMP/ca/ca-key.pem" \
        --template "$VB_TMP/ca/$who.info" --outfile "$d/$who-cert.pem" ||
        vb_bail "certtool could not make the $who certificate: $(cat "$VB_TMP/certtool.err")"
    cp "$VB_TMP/ca/ca-cert.pem" "$d/"
done

# ---------------------------------------------------------- images, daemons
# Source images: what the guest never touches holds a pattern, so that the
# mirror must copy it (a region left zero would prove nothing).
src_data=$VB_TMP/a-data.qcow2
src_ctl=$VB_TMP/a-ctl.img
dst_data=$VB_TMP/b-data.qcow2
dst_ctl=$VB_TMP/b-ctl.img
qemu-img create -q -f qcow2 "$src_data" 64M &&
qemu-io -f qcow2 -c 'write -P 0xa5 40M 8M' -c 'write -P 0x5a 63M 1M' \
    "$src_data" >/dev/null &&
qemu-img create -q -f raw "$src_ctl" 8M &&
qemu-io -f raw -c 'write -P 0x3c 4M 1M' "$src_ctl" >/dev/null ||
    vb_bail "cannot make the source images"

mon() { echo "--chardev socket,id=mon0,path=$1,server=on,wait=off --monitor chardev=mon0"; }
# The source hardened as docs/user-guide.md advises, when the build has
# the sandbox: its iothreads are confined while they write to the NBD
# targets (write-blocking) and the nbd nodes connect through their
# dialer threads.
a_sandbox=()
if grep -q '^#define CONFIG_SECCOMP 1' "$VHOST_BLK_BUILD/config-host.h" 2>/dev/null; then
    a_sandbox=(--seccomp on)
fi
# shellcheck disable=SC2046
vb_daemon_start blkd-a "$VB_TMP/a-qmp.sock" "$BLKD" --log-level info \
    "${a_sandbox[@]}" $(mon "$VB_TMP/a-qmp.sock") \
    --export "socket=$VB_TMP/a-data.sock,file=$src_data,format=qcow2,node-name=data" \
    --export "socket=$VB_TMP/a-ctl.sock,file=$src_ctl,node-name=ctl" ||
    vb_bail "vhost-blkd A did not start"
BLKD_A=$VB_LAST_PID
vb_wait_socket "$VB_TMP/a-ctl.sock" 10 "$BLKD_A" || vb_bail "vhost-blkd A has no export"
# shellcheck disable=SC2046
vb_daemon_start blkd-b "$VB_TMP/b-qmp.sock" "$BLKD" --log-level info \
    $(mon "$VB_TMP/b-qmp.sock") || vb_bail "vhost-blkd B did not start"
BLKD_B=$VB_LAST_PID

common_args=(--src-daemon "$VB_TMP/a-qmp.sock" --dst-daemon "$VB_TMP/b-qmp.sock" --timeout 180 --granularity 4096
             --nbd-host 127.0.0.1
             --server-tls-dir "$VB_TMP/tls-server"
             --client-tls-dir "$VB_TMP/tls-client")
data_args=("${common_args[@]}" --node data --dst-image "$dst_data"
           --dst-format qcow2 --dst-socket "$VB_TMP/b-data.sock")
ctl_args=("${common_args[@]}" --node ctl --dst-image "$dst_ctl"
          --dst-format raw --dst-socket "$VB_TMP/b-ctl.sock")
quiet() { "$@" > "$VB_TMP/quiet.out" 2>&1 || { sed 's/^/#   /' "$VB_TMP/quiet.out"; return 1; }; }
# must NAME CMD...: as vb_check, but the test cannot go on without it
must() {
    local name=$1
    shift
    if "$@"; then
        vb_ok "$name"
    else
        vb_bail "$name"
    fi
}
# run_script LOG ARGS...: the script, its output in $VB_TMP/LOG.log and
# as TAP comments
run_script() {
    local log=$VB_TMP/$1.log rc
    shift
    "$SCRIPT" "$@" > "$log" 2>&1
    rc=$?
    sed 's/^/#   /' "$log"
    return $rc
}

# The NBD server's port: 0 at prepare, the kernel's choice read back by
# the script (no window in which another process could take the port).
must "prepare (destination): an empty qcow2 image, its vhost-user and TLS NBD exports" \
    run_script prepare-data prepare "${data_args[@]}" --nbd-port 0
port=$(sed -n 's/.*: NBD port: \([0-9][0-9]*\)$/\1/p' "$VB_TMP/prepare-data.log")
[ -n "$port" ] || vb_bail "prepare did not say which port the NBD server has"
echo "# NBD port $port"
data_args+=(--nbd-port "$port")
ctl_args+=(--nbd-port "$port")
must "prepare (destination): an empty raw image, a second NBD export on the running server" \
    run_script prepare-ctl prepare "${ctl_args[@]}" --nbd-server-running
[ -S "$VB_TMP/b-data.sock" ] && [ -S "$VB_TMP/b-ctl.sock" ] ||
    vb_bail "the destination's vhost-user sockets are not there"

# ---------------------------------------------------------- QEMUs
cmdline="console=ttyS0 quiet panic=-1 cryptomgr.notests mitigations=off no_timer_check"
cmdline+=" vbjob=fio-until-stop vbtimeout=900 vbsize=16M"
cmdline+=" vbstopdev=vdb vbstopoff=1M"
common=(-accel tcg -machine q35,memory-backend=vbmem
        -object "memory-backend-memfd,id=vbmem,size=$VB_MIG_MEM,share=on"
        -cpu max -smp 1 -m "$VB_MIG_MEM"
        -kernel "$VHOST_BLK_GUEST_ASSETS/vmlinux"
        -initrd "$VHOST_BLK_GUEST_ASSETS/initramfs.img"
        -append "$cmdline" -display none -monitor none -no-reboot -nic none)
for d in /usr/share/seabios /usr/share/qemu; do
    [ -d "$d" ] && common+=(-L "$d")
done
QPIDS=()
# qemu_start N SIDE [ARGS...]: QEMU N with vda on SIDE-data.sock and vdb on
# SIDE-ctl.sock; serial in serial-N.log, QMP on qmp-N.sock
qemu_start() {
    local n=$1 side=$2
    shift 2
    "$qemu" "${common[@]}" \
        -chardev "socket,id=d0,path=$VB_TMP/$side-data.sock,reconnect=1" \
        -device "vhost-user-blk-pci,chardev=d0,num-queues=1" \
        -chardev "socket,id=d1,path=$VB_TMP/$side-ctl.sock,reconnect=1" \
        -device "vhost-user-blk-pci,chardev=d1,num-queues=1" \
        -serial "file:$VB_TMP/serial-$n.log" \
        -qmp "unix:$VB_TMP/qmp-$n.sock,server=on,wait=off" "$@" \
        2> "$VB_TMP/qemu-$n.err" &
    QPIDS[$n]=$!
}
qmp() {
    "$QMP" "$VB_TMP/qmp-$1.sock" "{\"execute\": \"$2\"${3:+, \"arguments\": $3}}"
}
cleanup_qemu() {
    local p
    for p in "${QPIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
}
trap 'cleanup_qemu; vb_cleanup' EXIT
show_logs() {
    local f
    for f in "$VB_TMP"/qemu-*.err "$VB_TMP"/serial-*.log "$VB_TMP"/blkd-*.log; do
        [ -s "$f" ] || continue
        echo "# --- $f (last 15 lines)"
        tail -n 15 "$f" | tr -d '\r' | sed 's/^/#   /'
    done
}
# wait_for SECS WHAT CMD...: poll CMD every 0.2 s
wait_for() {
    local secs=$1 what=$2 n=0
    shift 2
    until "$@" >/dev/null 2>&1; do
        if [ $n -ge $((secs * 5)) ]; then
            echo "# timed out after ${secs}s waiting for: $what"
            return 1
        fi
        sleep 0.2
        n=$((n + 1))
    done
}

qemu_start 0 a
qemu_start 1 b -incoming "unix:$VB_TMP/mig.sock" -S
if ! wait_for 300 "fio to run on the source" \
        grep -q "VBTEST-LOG: fio pass" "$VB_TMP/serial-0.log"; then
    show_logs
    vb_bail "the guest job did not start on the source"
fi
vb_ok "guest runs fio on the source (vhost-blkd A, qcow2 + raw)"

# ---------------------------------------------------------- migration
# fio writes without a pause; the mirror gets ready once its copy has
# caught up, writes in flight or not, but a TCG guest on a loaded machine
# may dirty faster than the copy goes: --ready-pause stops the source VM
# for the last catch-up if it is not ready in 5 s (VB_READY_PAUSE=0: at
# once, to exercise that path).  VB_COPY_MODE=write-blocking runs the
# mirrors in that mode.
must "mirror of the qcow2 disk over NBD+TLS is ready" \
    run_script mirror-data mirror "${data_args[@]}" \
    --copy-mode "${VB_COPY_MODE:-background}" \
    --src-qemu "$VB_TMP/qmp-0.sock" --ready-pause "${VB_READY_PAUSE:-5}"
must "mirror of the raw disk over NBD+TLS is ready" \
    run_script mirror-ctl mirror "${ctl_args[@]}" \
    --copy-mode "${VB_COPY_MODE:-background}" \
    --src-qemu "$VB_TMP/qmp-0.sock" --ready-pause "${VB_READY_PAUSE:-5}"
vb_check "the source VM runs again, fio going on, before the migration" \
    grep -q '"status": "running"' <(qmp 0 query-status)
if ! run_script migrate-vm migrate-vm --src-qemu "$VB_TMP/qmp-0.sock" \
        --dst-qemu "$VB_TMP/qmp-1.sock" --migrate-uri "unix:$VB_TMP/mig.sock"; then
    show_logs
    vb_bail "the VM did not migrate"
fi
vb_ok "VM migrated while fio ran (destination paused, -S)"
vb_check "finish the raw disk: mirror cancelled after the source stopped, its NBD export deleted" \
    run_script finish-ctl finish "${ctl_args[@]}" --keep-nbd-server
vb_check "finish the qcow2 disk: mirror cancelled, NBD server stopped (no cont yet)" \
    run_script finish-data finish "${data_args[@]}" --dst-qemu "$VB_TMP/qmp-1.sock" --no-cont
vb_check "destination QEMU still paused after finish --no-cont" \
    grep -q '"status": "postmigrate"\|"status": "paused"\|"status": "prelaunch"' \
    <(qmp 1 query-status)
vb_check "no NBD export is left on the destination" \
    bash -c "! grep -q '\"type\": \"nbd\"' <(\"$QMP\" \"$VB_TMP/b-qmp.sock\" '{\"execute\": \"query-block-exports\"}')"

# The source is done: its QEMU quits, A closes its images (flushing the
# qcow2 metadata), and both sides hold the same data while B's VM waits.
qmp 0 quit >/dev/null
wait "${QPIDS[0]}" 2>/dev/null
if [ ${#a_sandbox[@]} -gt 0 ]; then
    vb_check "vhost-blkd A ran the mirrors with --seccomp on, no call refused" \
        bash -c "kill -0 $BLKD_A && grep -q 'iothread(s) confined' '$VB_TMP/blkd-a.log' &&
                 ! grep -q 'seccomp: .* made system call' '$VB_TMP/blkd-a.log'"
fi
vb_stop "$BLKD_A"
vb_check "qcow2: the destination image has the source's data (qemu-img compare)" \
    quiet qemu-img compare -U -f qcow2 -F qcow2 "$src_data" "$dst_data"
vb_check "raw: the destination image has the source's data (cmp)" \
    cmp "$src_ctl" "$dst_ctl"
vb_check "qcow2: regions the guest never touched reached the destination" \
    quiet qemu-io -r -U -f qcow2 -c 'read -P 0xa5 40M 8M' -c 'read -P 0x5a 63M 1M' \
    -c 'read -P 0 48M 15M' "$dst_data"

# ---------------------------------------------------------- destination runs
qmp 1 cont >/dev/null || vb_bail "cont on the destination QEMU failed"
if ! wait_for 300 "a fio pass to start on the destination" \
        grep -q "VBTEST-LOG: fio pass" "$VB_TMP/serial-1.log"; then
    show_logs
    vb_bail "the guest does not run on the destination"
fi
vb_ok "the guest runs on the destination (vhost-blkd B)"
{ printf VBSTOP; head -c 4090 /dev/zero; } > "$VB_TMP/stop.blk"
dd if="$VB_TMP/stop.blk" of="$dst_ctl" bs=4096 seek=256 conv=notrunc \
    oflag=direct status=none || vb_bail "cannot write the stop block"
# A guest that crashed never prints its result nor powers off: stop
# waiting at its oops, and kill its QEMU rather than wait on it.
if ! wait_for 600 "the guest on the destination to finish" \
        grep -q -e "VBTEST-RESULT" -e "Oops:" -e "Kernel panic" \
        "$VB_TMP/serial-1.log" ||
        ! grep -q "VBTEST-RESULT" "$VB_TMP/serial-1.log"; then
    show_logs
    kill -KILL "${QPIDS[1]}" 2>/dev/null
fi
wait "${QPIDS[1]}" 2>/dev/null
result=$(tr -d '\r' < "$VB_TMP/serial-1.log" | grep -a '^VBTEST-RESULT: ' | tail -n1)
vb_check_eq "fio verify passes on the destination" "$result" "VBTEST-RESULT: PASS"
[ "$result" = "VBTEST-RESULT: PASS" ] || show_logs
vb_stop "$BLKD_B"
vb_check "qemu-img check of the destination's qcow2 image is clean" \
    qemu-img check -q "$dst_data"
vb_check "qcow2: the untouched regions are still there after the guest ran on B" \
    quiet qemu-io -r -f qcow2 -c 'read -P 0xa5 40M 8M' -c 'read -P 0x5a 63M 1M' \
    "$dst_data"
vb_done
