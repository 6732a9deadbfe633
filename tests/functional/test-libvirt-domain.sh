#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A real libvirtd (Debian's libvirt-daemon-system, started by hand here)
# runs the domains of docs/libvirt/ with the patched QEMU as <emulator>,
# without -L: the firmware comes from the bundle scripts/build-qemu.sh
# links to Debian's seabios and qemu-system-data.
#
#   vhost-pci-blk-user.xml    vhost-pci-blk-pci on vhost-blkd: defined,
#                             started, and the guest's fio write + verify on
#                             the disk passes (its serial log says so); the
#                             device sits where the XML put it (bus/addr),
#                             clear of libvirt's own pcie-root-port.
#   vhost-pci-blk-kernel.xml  the drive= kernel back-end: defined (libvirt
#                             parses and keeps the <qemu:commandline>),
#                             started; on a host without /dev/vhost-blk
#                             (this one: no module loading) the start must
#                             fail with QEMU's own "/dev/vhost-blk" error,
#                             which proves that libvirt ran the patched QEMU
#                             with the -blockdev/-device arguments and that
#                             the JSON -blockdev was accepted.  Where the
#                             device exists the guest runs the same fio job.
#
# The domains are the documented XML with only what a test must change:
# name, emulator, socket and image paths, memory, a direct kernel boot, the
# serial console to a file.  libvirtd gets its own configuration, state and
# sockets through a private mount namespace (bind mounts over
# /etc/libvirt, /run/libvirt, /var/lib/libvirt, ...), so the host's
# libvirt, if any, is not touched.
#
# Environment (besides lib.sh's):
#   VHOST_BLK_QEMU_FORK   the patched binary (default build/qemu/qemu-system-x86_64)
set -u
. "$(dirname "$0")/lib.sh"

FORK_QEMU=${VHOST_BLK_QEMU_FORK:-$VB_ROOT/build/qemu/qemu-system-x86_64}
vb_setup

for c in libvirtd virsh unshare xmllint python3; do
    command -v "$c" > /dev/null ||
        vb_bail "$c not found (Debian packages libvirt-daemon-system, libvirt-clients, util-linux, libxml2-utils: scripts/install-deps.sh)"
done
[ "$(id -u)" -eq 0 ] || vb_bail "needs root (libvirtd's system instance in a mount namespace)"
[ -x "$FORK_QEMU" ] || vb_bail "$FORK_QEMU is not built (scripts/build-qemu.sh builds it)"
FORK_QEMU=$(readlink -f "$FORK_QEMU")
blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
echo "# qemu: $FORK_QEMU"

# --- the patched QEMU finds its firmware without -L ------------------------
if "$FORK_QEMU" -machine q35 -accel tcg -display none -nodefaults -S \
        -monitor none -serial none -no-user-config -qmp "unix:$VB_TMP/fw.qmp,server=on,wait=off" \
        > "$VB_TMP/fw.log" 2>&1 &
then
    fwpid=$!
    # It either fails at once (no BIOS) or creates its QMP socket.
    n=0
    while kill -0 "$fwpid" 2>/dev/null && [ ! -S "$VB_TMP/fw.qmp" ] && [ $n -lt 300 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    if kill -0 "$fwpid" 2>/dev/null; then
        vb_ok "the patched QEMU starts a q35 machine without -L (firmware found)"
        kill -KILL "$fwpid"
    else
        vb_not_ok "the patched QEMU starts a q35 machine without -L" "$(tr '\n' ' ' < "$VB_TMP/fw.log")"
    fi
    wait "$fwpid" 2>/dev/null
fi

# --- libvirtd, by hand, in its own mount namespace ---------------------------
LV=$VB_TMP/libvirt
mkdir -p "$LV/etc" "$LV/run" "$LV/lib" "$LV/log" "$LV/cache"
cp -a /etc/libvirt/. "$LV/etc/"
# QEMU as root, no relabelling of the (shared, cached) kernel and images,
# no cgroups or /dev namespace (this host runs no systemd), guest stdio to
# a file (no virtlogd).
cat > "$LV/etc/qemu.conf" <<'EOF'
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
stdio_handler = "file"
EOF
cat > "$LV/etc/libvirtd.conf" <<'EOF'
unix_sock_group = "root"
unix_sock_rw_perms = "0700"
auth_unix_rw = "none"
auth_unix_ro = "none"
EOF
mkdir -p /run/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt
cat > "$LV/start.sh" <<EOF
set -e
mount --bind "$LV/etc" /etc/libvirt
mount --bind "$LV/run" /run/libvirt
mount --bind "$LV/lib" /var/lib/libvirt
mount --bind "$LV/log" /var/log/libvirt
mount --bind "$LV/cache" /var/cache/libvirt
exec libvirtd -p "$LV/libvirtd.pid"
EOF
unshare -m --propagation private sh "$LV/start.sh" > "$VB_TMP/libvirtd.log" 2>&1 &
lvpid=$!
VB_PIDS+=("$lvpid")
URI="qemu:///system?socket=$LV/run/libvirt-sock"
virsh_() { virsh -q -c "$URI" "$@"; }
n=0
until virsh_ version > /dev/null 2>&1; do
    kill -0 "$lvpid" 2>/dev/null && [ $n -lt 300 ] ||
        { sed 's/^/#   /' "$VB_TMP/libvirtd.log"; vb_bail "libvirtd did not answer on $LV/run/libvirt-sock"; }
    sleep 0.1
    n=$((n + 1))
done
vb_ok "libvirtd $(libvirtd --version | awk '{print $NF}') runs, with its own state in $LV"
# Whatever happens below, no guest outlives the test (QEMU would outlive
# libvirtd), and libvirtd stops before the files it uses go.
lv_cleanup() {
    local d
    for d in vbtest-user vbtest-noaddr vbtest-kernel vbtest-qcow2; do
        virsh_ destroy "$d" > /dev/null 2>&1
        virsh_ undefine "$d" > /dev/null 2>&1
    done
    vb_stop "$lvpid"
}
trap 'lv_cleanup; vb_cleanup' EXIT

# domain SRC OUT NAME SOCK IMG: the documented XML made runnable here.
domain() {
    python3 - "$@" "$FORK_QEMU" "$VHOST_BLK_GUEST_ASSETS" <<'PY'
import sys, xml.etree.ElementTree as ET
src, out, name, sock, img, qemu, assets = sys.argv[1:8]
Q = "http://libvirt.org/schemas/domain/qemu/1.0"
ET.register_namespace("qemu", Q)
t = ET.parse(src)
d = t.getroot()
d.set("type", "qemu")                   # TCG: no usable KVM here
d.find("name").text = name
d.find("memory").set("unit", "MiB")
d.find("memory").text = "512"
d.find("vcpu").text = "1"
os_ = d.find("os")
for tag, text in (("kernel", assets + "/vmlinux"),
                  ("initrd", assets + "/initramfs.img"),
                  ("cmdline", "console=ttyS0 quiet panic=-1 cryptomgr.notests "
                   "mitigations=off no_timer_check vbjob=fio-verify "
                   "vbtimeout=600 vbdev=vda vbsize=16M")):
    e = ET.SubElement(os_, tag)
    e.text = text
for b in os_.findall("boot"):
    os_.remove(b)
dev = d.find("devices")
dev.find("emulator").text = qemu
for tag in ("serial", "console"):
    for e in dev.findall(tag):
        dev.remove(e)
ser = ET.SubElement(dev, "serial", type="file")
ET.SubElement(ser, "source", path=out + ".serial")
ET.SubElement(ser, "target", port="0")
cl = d.find("{%s}commandline" % Q)
for a in (cl if cl is not None else []):
    v = a.get("value")
    v = v.replace("/run/vhost-blk/vm2.sock", sock)
    v = v.replace("/var/lib/vhost-blk/vm3.img", img)
    a.set("value", v)
# libvirt's own vhost-user disks: their socket.
for disk in dev.findall("disk[@type='vhostuser']"):
    disk.find("source").set("path", sock)
t.write(out)
PY
}

# wait_shutoff NAME SECS: the domain has stopped (the guest powered off).
wait_shutoff() {
    local n=$(( $2 * 10 ))
    while [ "$(virsh_ domstate "$1" 2>/dev/null)" = running ] && [ $n -gt 0 ]; do
        sleep 0.1
        n=$((n - 1))
    done
    [ "$(virsh_ domstate "$1" 2>/dev/null)" != running ]
}

# --- vhost-pci-blk-pci on vhost-blkd -----------------------------------------
img=$(vb_mkimg user 64M)
sock=$VB_TMP/vm2.sock
vb_daemon_start blkd "$sock" "$blkd" --export "socket=$sock,file=$img,num-queues=2" ||
    vb_bail "vhost-blkd did not start"
x=$VB_TMP/user.xml
domain "$VB_ROOT/docs/libvirt/vhost-pci-blk-user.xml" "$x" vbtest-user "$sock" "$img" ||
    vb_bail "cannot derive a domain from docs/libvirt/vhost-pci-blk-user.xml"
if virsh_ define "$x" > "$VB_TMP/out" 2>&1; then
    vb_ok "user: virsh define (docs/libvirt/vhost-pci-blk-user.xml)"
else
    vb_not_ok "user: virsh define" "$(cat "$VB_TMP/out")"
fi
if virsh_ start vbtest-user > "$VB_TMP/out" 2>&1; then
    vb_ok "user: virsh start with the patched QEMU as <emulator>, no -L"
    if wait_shutoff vbtest-user 900; then
        serial=$x.serial
        grep -a -E 'VBTEST-(RESULT|LOG)|err=' "$serial" | sed 's/^/#   /' | tail -n 8
        vb_check "user: the guest's fio write + verify on vhost-pci-blk-pci passed (serial log)" \
            grep -aq '^VBTEST-RESULT: PASS' "$serial"
    else
        vb_not_ok "user: the guest finished" "still running after 900 s"
        virsh_ destroy vbtest-user > /dev/null 2>&1
    fi
    qlog=$LV/log/qemu/vbtest-user.log
    vb_check "user: libvirt ran the device at the documented bus/addr" \
        grep -q 'vhost-pci-blk-pci,chardev=vhostblk0,num-queues=2,bus=pcie.0,addr=0x10' "$qlog"
    vb_check "user: ...next to libvirt's own pcie-root-port" \
        grep -q 'pcie-root-port' "$qlog"
    vb_check "user: ...and QEMU was not given -L" sh -c "! grep -q -- ' -L ' '$qlog'"
else
    vb_not_ok "user: virsh start" "$(cat "$VB_TMP/out")"
    sed 's/^/#   /' "$LV/log/qemu/vbtest-user.log" 2>/dev/null | tail -n 20
fi
virsh_ undefine vbtest-user > /dev/null 2>&1

# Without bus/addr the device collides with libvirt's root port: the
# reason the documented XML names them (a measured fact about libvirt's
# layout, shown here, not a property of this project).
sed 's/,bus=pcie.0,addr=0x10//' "$x" > "$VB_TMP/noaddr.xml"
sed -i 's/<name>vbtest-user</<name>vbtest-noaddr</' "$VB_TMP/noaddr.xml"
if virsh_ define "$VB_TMP/noaddr.xml" > /dev/null 2>&1 &&
   ! virsh_ start vbtest-noaddr > "$VB_TMP/out" 2>&1; then
    echo "# without bus/addr: $(tr '\n' ' ' < "$VB_TMP/out" | cut -c1-300)"
else
    echo "# without bus/addr the domain started (this libvirt left slot 1 free)"
    virsh_ destroy vbtest-noaddr > /dev/null 2>&1
fi
virsh_ undefine vbtest-noaddr > /dev/null 2>&1
vb_stop "$VB_LAST_PID"

# --- vhost-pci-blk-pci,drive= (kernel back-end) --------------------------------
kimg=$(vb_mkimg kernel 64M)
x=$VB_TMP/kernel.xml
domain "$VB_ROOT/docs/libvirt/vhost-pci-blk-kernel.xml" "$x" vbtest-kernel none "$kimg" ||
    vb_bail "cannot derive a domain from docs/libvirt/vhost-pci-blk-kernel.xml"
if virsh_ define "$x" > "$VB_TMP/out" 2>&1; then
    vb_ok "kernel: virsh define (docs/libvirt/vhost-pci-blk-kernel.xml)"
else
    vb_not_ok "kernel: virsh define" "$(cat "$VB_TMP/out")"
fi
virsh_ dumpxml vbtest-kernel > "$VB_TMP/kernel-dump.xml" 2>&1
vb_check "kernel: libvirt keeps the <qemu:commandline> (-blockdev JSON, -device drive=)" \
    sh -c "grep -q 'vhost-pci-blk-pci,drive=vbdisk0' '$VB_TMP/kernel-dump.xml' && grep -q '&quot;driver&quot;:&quot;raw&quot;' '$VB_TMP/kernel-dump.xml'"
vb_check "kernel: the defined domain validates (virt-xml-validate)" \
    virt-xml-validate "$VB_TMP/kernel-dump.xml" domain
if [ -c /dev/vhost-blk ]; then
    if virsh_ start vbtest-kernel > "$VB_TMP/out" 2>&1 && wait_shutoff vbtest-kernel 900; then
        vb_check "kernel: the guest's fio write + verify on drive= passed (serial log)" \
            grep -aq '^VBTEST-RESULT: PASS' "$x.serial"
    else
        vb_not_ok "kernel: virsh start" "$(cat "$VB_TMP/out")"
    fi
else
    if virsh_ start vbtest-kernel > "$VB_TMP/out" 2>&1; then
        vb_not_ok "kernel: start fails cleanly without /dev/vhost-blk" "it started"
        virsh_ destroy vbtest-kernel > /dev/null 2>&1
    else
        sed 's/^/#   /' "$VB_TMP/out"
        # libvirt passes QEMU's message on when QEMU died after libvirt
        # connected to its monitor ("qemu unexpectedly closed the
        # monitor: ..."); when it died first, virsh only says "failed to
        # connect to monitor socket" and the message is in the domain's
        # log.  Which one happens is a race: look in both.
        vb_check "kernel: no /dev/vhost-blk on this host: start fails with the patched QEMU's own error" \
            grep -qs 'vhost-pci-blk: /dev/vhost-blk does not exist' "$VB_TMP/out" \
            "$LV/log/qemu/vbtest-kernel.log"
        vb_check "kernel: ...after QEMU accepted the -blockdev JSON (no blockdev error)" \
            sh -c "! grep -qi 'blockdev\|node-name\|Parameter' '$VB_TMP/out'"
    fi
fi
virsh_ undefine vbtest-kernel > /dev/null 2>&1

# --- libvirt's vhostuser disk on a qcow2 overlay over a qcow2 base -----------
# The base holds data in the range the guest writes (overwritten in the
# overlay only) and beyond it (which must read through).  The guest's fio
# job (vbsize=16M, randwrite, 4k, crc32c) is repeated on the host with
# --verify_only over qemu-img convert's output: the same job parameters
# give the same offsets and contents.
base=$VB_TMP/q-base.qcow2
ov=$VB_TMP/q-overlay.qcow2
qemu-img create -q -f qcow2 "$base" 64M &&
    qemu-io -f qcow2 -c "write -P 0x5a 0 20M" -c "write -P 0x3c 32M 1M" \
        "$base" > /dev/null &&
    (cd "$VB_TMP" && qemu-img create -q -f qcow2 -b q-base.qcow2 -F qcow2 \
        q-overlay.qcow2) ||
    vb_bail "cannot create the qcow2 images"
base_sum=$(sha256sum < "$base")
sock=$VB_TMP/vm4.sock
# QSD's syntax, as the XML's comment and the user guide give it.
vb_daemon_start blkd-qcow2 "$sock" "$blkd" \
    --blockdev "driver=file,node-name=f0,filename=$ov" \
    --blockdev "driver=qcow2,node-name=q0,file=f0" \
    --export "type=vhost-user-blk,id=e0,node-name=q0,writable=on,num-queues=2,addr.type=unix,addr.path=$sock" ||
    vb_bail "vhost-blkd did not start on the qcow2 overlay"
qpid=$VB_LAST_PID
x=$VB_TMP/qcow2.xml
domain "$VB_ROOT/docs/libvirt/vhostuser-qcow2.xml" "$x" vbtest-qcow2 "$sock" "$ov" ||
    vb_bail "cannot derive a domain from docs/libvirt/vhostuser-qcow2.xml"
if virsh_ define "$x" > "$VB_TMP/out" 2>&1; then
    vb_ok "qcow2: virsh define (docs/libvirt/vhostuser-qcow2.xml)"
else
    vb_not_ok "qcow2: virsh define" "$(cat "$VB_TMP/out")"
fi
if virsh_ start vbtest-qcow2 > "$VB_TMP/out" 2>&1; then
    vb_ok "qcow2: virsh start, libvirt's <disk type='vhostuser'>"
    if wait_shutoff vbtest-qcow2 900; then
        grep -a -E 'VBTEST-(RESULT|LOG)|err=' "$x.serial" | sed 's/^/#   /' | tail -n 8
        vb_check "qcow2: the guest's fio write + verify on the qcow2 overlay passed (serial log)" \
            grep -aq '^VBTEST-RESULT: PASS' "$x.serial"
    else
        vb_not_ok "qcow2: the guest finished" "still running after 900 s"
        virsh_ destroy vbtest-qcow2 > /dev/null 2>&1
    fi
    # libvirt 9 gives -device as JSON.
    vb_check "qcow2: libvirt gave QEMU a vhost-user-blk-pci device with 2 queues" \
        grep -Eq 'vhost-user-blk-pci"?,"?num-queues"?[:=]2' "$LV/log/qemu/vbtest-qcow2.log"
else
    vb_not_ok "qcow2: virsh start" "$(cat "$VB_TMP/out")"
    sed 's/^/#   /' "$LV/log/qemu/vbtest-qcow2.log" 2>/dev/null | tail -n 20
fi
virsh_ undefine vbtest-qcow2 > /dev/null 2>&1
# A clean stop writes the metadata back and drops the image locks.
vb_stop "$qpid"
qemu-img check "$ov" > "$VB_TMP/check.out" 2>&1
rc=$?
sed 's/^/#   /' "$VB_TMP/check.out"
vb_check_eq "qcow2: qemu-img check of the overlay: no errors, no leaks (exit 0)" "$rc" 0
vb_check "qcow2: ...says so" grep -q "No errors were found" "$VB_TMP/check.out"
vb_check_eq "qcow2: the base is byte-identical (sha256 before and after)" \
    "$(sha256sum < "$base")" "$base_sum"
# host_verify: fio checks the guest's job's data in the flattened image.
host_verify() {
    fio --name=vbtest --filename="$VB_TMP/q-flat.raw" --ioengine=psync \
        --rw=randwrite --bs=4k --size=16M --numjobs=1 \
        --offset_increment=16M --group_reporting=1 --verify=crc32c \
        --verify_fatal=1 --do_verify=1 --verify_only=1 --verify_state_save=0 \
        > "$VB_TMP/fio-host.log" 2>&1 ||
        { sed 's/^/#   /' "$VB_TMP/fio-host.log" | tail -n 20; return 1; }
}
# base_data: the base's patterns show through where the guest did not write.
base_data() {
    qemu-io -f raw -c "read -P 0x5a 16M 4M" -c "read -P 0x3c 32M 1M" \
        -c "read -P 0 33M 31M" "$VB_TMP/q-flat.raw" > "$VB_TMP/io.log" 2>&1 &&
        ! grep -q "Pattern verification failed" "$VB_TMP/io.log" ||
        { sed 's/^/#   /' "$VB_TMP/io.log"; return 1; }
}
if qemu-img convert -O raw "$ov" "$VB_TMP/q-flat.raw" > "$VB_TMP/out" 2>&1; then
    vb_check "qcow2: qemu-img convert of the overlay holds what the guest wrote (host fio --verify_only)" \
        host_verify
    vb_check "qcow2: ...and the base's data where the guest did not write" \
        base_data
else
    vb_not_ok "qcow2: qemu-img convert of the overlay" "$(cat "$VB_TMP/out")"
fi

lv_cleanup
vb_done
