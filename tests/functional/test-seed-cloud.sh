#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# scripts/bench/seed-table.sh --cloud-image: the seed's experiment in a
# guest booted from a cloud image, cloud-init's NoCloud datasource running
# the fio job from the seed's user-data.  The "cloud image" is the Debian 12
# image of scripts/guest/build-systemd-image.sh (cloud-init and fio are in
# its package list), booted with its kernel and initramfs (--cloud-kernel,
# --cloud-initrd): the same path a user's image takes but the boot loader.
# Kept small: bare metal and vhost-blkd only, numjobs 1, 2 s, one
# repetition, on a 64 MiB RAM disk.  Checks: the run succeeds, the JSON
# says the guest was that cloud image, vhost-blkd's IOPS are positive, and
# the image file is byte-identical afterwards (sha256): every boot wrote to
# a throw-away overlay.  59 to 75 s under TCG on 2 shared CPUs (load 4 to
# 7) once the image is cached (cloud-init reached the job 34 to 77 s after
# QEMU started; two sha256 of the 1.2 GB image); a cache miss first builds
# the image (build-systemd-image.sh: 586 s at load 9).
#
# Env: VHOST_BLK_SYSTEMD_IMAGE  a prebuilt image directory (default: built
#      or found in the cache by build-systemd-image.sh)
set -u
. "$(dirname "$0")/lib.sh"
vb_setup
for tool in qemu-system-x86_64 genisoimage fio; do
    command -v "$tool" > /dev/null ||
        vb_bail "$tool is missing (scripts/install-deps.sh installs it)"
done
blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"

t0=$(date +%s)
image=${VHOST_BLK_SYSTEMD_IMAGE:-}
if [ -z "$image" ]; then
    image=$("$VB_ROOT/scripts/guest/build-systemd-image.sh" 2> "$VB_TMP/image.log")
    rc=$?
    sed 's/^/# /' "$VB_TMP/image.log"
    [ $rc -eq 0 ] || vb_bail "building the systemd guest image failed"
fi
echo "# image: $image ($(( $(date +%s) - t0 )) s)"
grep -qE '^packages=(.* )?cloud-init( |$)' "$image/info" ||
    vb_bail "$image has no cloud-init (an image from before it was in build-systemd-image.sh's PACKAGES: rebuild with --force)"

rootfs=$image/rootfs.img
before=$(sha256sum "$rootfs" | cut -d' ' -f1)
out=$VB_TMP/seed
t1=$(date +%s)
vb_check "seed-table.sh --cloud-image boots the image and measures vhost-blkd" \
    "$VB_ROOT/scripts/bench/seed-table.sh" --ram 64M --jobs 1 --runtime 2 --repeat 1 \
    --vcpus 2 --setups vhost-blkd --vhost-blkd "$blkd" -o "$out" \
    --cloud-image "$rootfs" --cloud-kernel "$image/vmlinux" \
    --cloud-initrd "$image/initramfs.img" \
    --cloud-append "console=ttyS0 root=/dev/vda rw quiet panic=-1"
echo "# seed-table.sh --cloud-image: $(( $(date +%s) - t1 )) s"
after=$(sha256sum "$rootfs" | cut -d' ' -f1)
vb_check_eq "the cloud image is byte-identical after the run (sha256)" "$after" "$before"

check_json() {
    python3 - "$out/seed-table.json" "$rootfs" <<'EOF'
import json, os, sys
def say(ok, name):
    print(("ok " if ok else "not ok ") + name)
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    say(False, f"seed-table.json parses ({e})")
    sys.exit(0)
g = d.get("guest", {}).get("os") or {}
say(g.get("kind") == "cloud-image", f"the guest was the cloud image ({g.get('kind')})")
say(g.get("image") == os.path.abspath(sys.argv[2]), f"the image is named ({g.get('image')})")
say(g.get("format") == "raw" and g.get("boot") == "direct kernel",
    f"its format and boot are recorded ({g.get('format')}, {g.get('boot')})")
st = {s.get("id"): s for s in d.get("setups", [])}
say(st.get("vhost-blkd", {}).get("status") == "measured",
    f"vhost-blkd was measured ({st.get('vhost-blkd')})")
c = next((r["setups"].get("vhost-blkd", {}) for r in d.get("rows", []) if r["jobs"] == 1), {})
iops = c.get("iops_median")
say(bool(iops and iops > 0), f"vhost-blkd, numjobs 1: IOPS {iops} > 0")
boot = (d["guest"].get("boot_to_job_s") or {}).get("vhost-blkd")
say(bool(boot), f"the time from QEMU's start to the job is recorded ({boot} s)")
print(f"# boot to cloud-init's job: {boot} s")
EOF
}
results=$(check_json) || vb_not_ok "json: the checks ran to the end"
while read -r verdict rest; do
    case $verdict in
        ok) vb_ok "json: ${rest}" ;;
        not) vb_not_ok "json: ${rest#ok }" ;;
        \#) echo "$verdict $rest" ;;
    esac
done <<< "$results"
vb_check "the table's header names the cloud image" \
    grep -qF "the cloud image $rootfs" "$out/seed-table.md"
vb_done
