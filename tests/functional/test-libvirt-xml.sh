#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Validates every libvirt example in docs/libvirt/*.xml against libvirt's
# own schema (virt-xml-validate FILE domain) and checks that each keeps what
# a vhost-blkd disk needs: a vhostuser disk on a unix socket with reconnect,
# and shared memfd guest memory; or, for the patched QEMU's
# vhost-pci-blk-pci given through <qemu:commandline>, an explicit bus and
# addr (not libvirt's root-port slot 1), reconnect on the chardev and
# shared memory for the chardev= (vhost-user) one.  No guest is booted
# (tests/functional/test-libvirt-domain.sh boots them).
set -u
. "$(dirname "$0")/lib.sh"

# This test boots no guest: do not let vb_setup build the guest assets.
VHOST_BLK_GUEST_ASSETS=${VHOST_BLK_GUEST_ASSETS:-unused}
vb_setup

command -v virt-xml-validate >/dev/null ||
    vb_bail "virt-xml-validate not found (Debian package libvirt-clients; run scripts/install-deps.sh)"
command -v xmllint >/dev/null ||
    vb_bail "xmllint not found (Debian package libxml2-utils; run scripts/install-deps.sh)"

# xpath FILE EXPR: print the value of EXPR (a string or count()) in FILE.
xpath() {
    xmllint --xpath "$2" "$1" 2>/dev/null
}

# Negative control: the validator must reject a domain that breaks the
# schema, or a pass below would prove nothing.
bad=$VB_TMP/broken.xml
cat > "$bad" <<'XML'
<domain type='kvm'>
  <name>broken</name>
  <memory unit='GiB'>1</memory>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices>
    <disk type='vhostuser' device='disk'>
      <source type='tcp' path='/run/x.sock'/>
      <target dev='vda' bus='virtio'/>
    </disk>
  </devices>
</domain>
XML
if virt-xml-validate "$bad" domain > "$VB_TMP/broken.log" 2>&1; then
    vb_not_ok "virt-xml-validate rejects an invalid domain" \
        "a vhostuser disk with source type='tcp' was accepted"
else
    vb_ok "virt-xml-validate rejects an invalid domain"
fi

n=0
for f in "$VB_ROOT"/docs/libvirt/*.xml; do
    [ -e "$f" ] || continue
    n=$((n + 1))
    name=docs/libvirt/${f##*/}
    if virt-xml-validate "$f" domain > "$VB_TMP/validate.log" 2>&1; then
        vb_ok "$name: valid libvirt domain XML"
    else
        vb_not_ok "$name: valid libvirt domain XML" \
            "$(tr '\n' ' ' < "$VB_TMP/validate.log")"
        continue
    fi

    disks=$(xpath "$f" "count(/domain/devices/disk[@type='vhostuser'])")
    qargs=$(xpath "$f" "//*[local-name()='commandline']/*[local-name()='arg']/@value" |
            sed 's/ value="/\n/g; s/"//g')
    if [ "${disks:-0}" -lt 1 ] && grep -q '^vhost-pci-blk-pci,' <<< "$qargs"; then
        dev=$(grep '^vhost-pci-blk-pci,' <<< "$qargs")
        vb_check "$name: vhost-pci-blk-pci has an explicit bus and addr" \
            sh -c "echo '$dev' | grep -q 'bus=' && echo '$dev' | grep -q 'addr='"
        vb_check "$name: ...not on slot 1 (libvirt's first pcie-root-port)" \
            sh -c "! echo '$dev' | grep -qE 'addr=(0x)?0*1(,|\\.|\$)'"
        if grep -q 'chardev=' <<< "$dev"; then
            vb_check "$name: the vhost-user chardev reconnects" \
                grep -q '^socket,.*reconnect=' <<< "$qargs"
            vb_check_eq "$name: guest memory is a shared memfd" \
                "$(xpath "$f" "count(/domain/memoryBacking[source/@type='memfd' and access/@mode='shared'])")" 1
        else
            vb_check "$name: drive= names a -blockdev node" \
                sh -c "echo '$dev' | grep -q 'drive=' && grep -q 'node-name' <<'EOT'
$qargs
EOT"
        fi
        continue
    fi
    if [ "${disks:-0}" -lt 1 ]; then
        vb_not_ok "$name: has a vhostuser disk" "no <disk type='vhostuser'>"
        continue
    fi
    vb_ok "$name: has $disks vhostuser disk(s)"
    vu="/domain/devices/disk[@type='vhostuser']"
    vb_check_eq "$name: every vhostuser disk uses a unix socket" \
        "$(xpath "$f" "count($vu/source[@type='unix' and starts-with(@path, '/')])")" "$disks"
    vb_check_eq "$name: every vhostuser disk reconnects" \
        "$(xpath "$f" "count($vu/source/reconnect[@enabled='yes'])")" "$disks"
    vb_check_eq "$name: every vhostuser disk is raw with a queue count" \
        "$(xpath "$f" "count($vu/driver[@name='qemu' and @type='raw' and @queues])")" "$disks"
    vb_check_eq "$name: guest memory is a shared memfd" \
        "$(xpath "$f" "count(/domain/memoryBacking[source/@type='memfd' and access/@mode='shared'])")" 1
done
[ "$n" -gt 0 ] || vb_not_ok "docs/libvirt/*.xml exists" "no example found"

vb_done
