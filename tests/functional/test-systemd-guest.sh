#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The systemd units under a real systemd: boot the Debian 12 image of
# scripts/guest/build-systemd-image.sh (systemd as PID 1, the test kernel,
# QEMU/TCG) with a second disk carrying this tree's .deb
# (tests/functional/deb-build.sh) and the guest half of the test
# (systemd-guest-steps.sh), which installs the package, enables
# vhost-blkd@vm1.socket as docs/user-guide.md says, and checks socket
# activation, vhost-blk-bench --verify across `systemctl restart`, reload,
# stop, journald and Type=notify readiness, and reports
# `systemd-analyze security`.  The guest prints "VBSD: ok/not ok" lines on
# its serial console; this side counts them.
#
# Env: VHOST_BLK_SYSTEMD_IMAGE  a prebuilt image directory (default: built
#      or found in the cache by build-systemd-image.sh)
set -u
. "$(dirname "$0")/lib.sh"
. "$VB_FUNC/deb-build.sh"

vb_setup
for tool in qemu-system-x86_64 mkfs.ext4 dpkg-buildpackage; do
    command -v "$tool" > /dev/null ||
        vb_bail "$tool is missing (scripts/install-deps.sh installs it)"
done

t0=$(date +%s)
image=${VHOST_BLK_SYSTEMD_IMAGE:-}
if [ -z "$image" ]; then
    image=$("$VB_ROOT/scripts/guest/build-systemd-image.sh" 2> "$VB_TMP/image.log")
    rc=$?
    sed 's/^/# /' "$VB_TMP/image.log"
    [ $rc -eq 0 ] || vb_bail "building the systemd guest image failed"
fi
t1=$(date +%s)
echo "# image: $image ($((t1 - t0)) s)"
grep -E '^(build_seconds|rootfs_|packages)' "$image/info" | sed 's/^/#   /'

deb=$(vb_deb_build) || vb_bail "building the .deb failed"
t2=$(date +%s)
echo "# package: $deb ($((t2 - t1)) s)"
# The guest has no network: every package the .deb depends on must be in
# the image (scripts/guest/build-systemd-image.sh's PACKAGES), or dpkg -i
# leaves it unconfigured and every later step waits for nothing.
missing=
for dep in $(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/^ *//; s/[ (].*//'); do
    case $dep in libc6) continue ;; esac
    grep -qE "^packages=(.* )?$dep( |$)" "$image/info" || missing="$missing $dep"
done
if ! vb_check "every package the .deb depends on is in the image${missing:+ (missing:$missing; add them to PACKAGES in scripts/guest/build-systemd-image.sh)}" \
        test -z "$missing"; then
    vb_done
    exit 1
fi

# The second disk: the package and the guest half, an ext4 made without
# mounting.
mkdir -p "$VB_TMP/vbtest"
cp "$deb" "$VB_TMP/vbtest/vhost-blk.deb"
install -m 0755 "$VB_FUNC/systemd-guest-steps.sh" "$VB_TMP/vbtest/run.sh"
truncate -s 64M "$VB_TMP/vbtest.img"
mkfs.ext4 -q -F -L vbtest -d "$VB_TMP/vbtest" "$VB_TMP/vbtest.img" ||
    vb_bail "mkfs.ext4 -d of the vbtest disk failed"

# A disk the guest serves as a block device (vhost-blkd@vm2).
truncate -s 64M "$VB_TMP/block.img"

# The root disk (vda: the first PCI slot of the three) is the cached image
# under a throw-away overlay (snapshot=on): the cache never changes.
# timeout is a hang guard only.
console=$VB_TMP/console.log
TIMEFORMAT="%R %U %S"
{ time timeout 1200 qemu-system-x86_64 -accel tcg -machine q35 -cpu max -smp 2 -m 1536 \
    -display none -monitor none -nic none -no-reboot \
    -serial "file:$console" \
    -kernel "$image/vmlinux" -initrd "$image/initramfs.img" \
    -append "console=ttyS0 quiet systemd.show_status=error panic=-1 vbtest=1" \
    -drive "file=$image/rootfs.img,if=none,id=vbroot,format=raw,snapshot=on" \
    -device virtio-blk-pci,drive=vbroot,addr=0x4 \
    -drive "file=$VB_TMP/vbtest.img,if=none,id=vbtest,format=raw,readonly=on" \
    -device virtio-blk-pci,drive=vbtest,addr=0x5 \
    -drive "file=$VB_TMP/block.img,if=none,id=vbblock,format=raw" \
    -device virtio-blk-pci,drive=vbblock,serial=vbblock,addr=0x6 \
    > "$VB_TMP/qemu.log" 2>&1; } 2> "$VB_TMP/qemu.time"
qrc=$?
t3=$(date +%s)
# QEMU's CPU time says how much of the wall time was the guest's work and
# how much waiting for a busy host.
read -r qreal quser qsys < "$VB_TMP/qemu.time"
echo "# guest ran $((t3 - t2)) s (QEMU exit $qrc; ${qreal}s wall, ${quser}s user + ${qsys}s sys CPU)"

# The guest's lines, stripped of the console's carriage returns.
tr -d '\r' < "$console" | grep -a '^VBSD: ' | sed 's/^VBSD: //' > "$VB_TMP/results"
while IFS= read -r line; do
    case $line in
        "ok "*) vb_ok "${line#ok [0-9]* - }" ;;
        "not ok "*) vb_not_ok "${line#not ok [0-9]* - }" ;;
        "info "*) echo "# guest: ${line#info }" ;;
        *) echo "$line" ;;
    esac
done < "$VB_TMP/results"
if ! vb_check "the guest ran every step and powered off" \
        grep -aq 'VBTEST-RESULT: exit 0' "$console"; then
    tr -d '\r' < "$console" | tail -n 40 | sed 's/^/#   console: /'
fi
vb_check_eq "QEMU exited on the guest's power-off" "$qrc" 0
echo "# wall time: $((t3 - t0)) s (image $((t1 - t0)) s, package $((t2 - t1)) s, guest $((t3 - t2)) s)"
vb_done
