#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Live migration of a VM whose disk the kernel serves: inside the test
# guest (the "outer" guest, which loads vhost_iotlb.ko, vhost.ko and our
# vhost_blk.ko), the patched QEMU boots a nested TCG guest whose only disk
# is
#   -drive if=none,id=nd0,file=/dev/vda,format=raw,cache=none
#   -device vhost-pci-blk-pci,drive=nd0
# and migrates it to a second QEMU with the same devices (-incoming on a
# unix socket) while the nested guest runs fio write + crc32c verify passes
# (job fio-until-stop), $VB_NESTED_MIGRATIONS times (default 1), each
# destination the next source.  Then the outer job writes the stop marker
# into /dev/vda: the pass running on the last QEMU finishes and verifies
# there, and the nested guest reports PASS on that QEMU's console.  What
# the module read into guest buffers while QEMU copied memory reaches the
# destination only through the dirty log (VHOST_F_LOG_ALL), and the rings'
# positions through VHOST_BLK_SET_BACKEND -1 and GET_VRING_BASE.
# Checks: every migration completed with the nested job still running on
# its source; the fio pass running during the last migration (or a later
# one) finished and verified on the last destination, which reports the
# job's PASS; no BUG/WARNING/Oops/lockup in the outer guest's kernel log.
#
# No result depends on timing: the nested job runs until the stop marker,
# every wait polls with a generous limit and fails saying what it waited
# for.  Nested TCG is slow; the times are printed (figures in
# docs/qemu-fork.md).  scripts/nested-migration.sh runs the longer variant
# (3 migrations, larger passes).
#
# Skips (exit 0) when the patched QEMU is not built.
#
# Environment (besides lib.sh's):
#   VHOST_BLK_QEMU_FORK     the patched binary (default build/qemu/qemu-system-x86_64)
#   VB_NESTED_MIGRATIONS    migrations in a row (default 1)
#   VB_NESTED_MIG_ARGS      the nested job's parameters, '+' separated
#                           (default vbsize=1M+vbbs=16k+vbiodepth=8)
#   VB_NESTED_MIG_TIMEOUT   outer guest watchdog in seconds (default 1500)
set -u
. "$(dirname "$0")/lib.sh"

FORK_QEMU=${VHOST_BLK_QEMU_FORK:-$VB_ROOT/build/qemu/qemu-system-x86_64}
[ -x "$FORK_QEMU" ] || vb_skip_all "patched QEMU not built (scripts/build-qemu.sh)"
# The outer guest runs on the distribution's QEMU; only the nested ones
# run the fork.
unset VHOST_BLK_QEMU
nmig=${VB_NESTED_MIGRATIONS:-1}
nargs=${VB_NESTED_MIG_ARGS:-vbsize=1M+vbbs=16k+vbiodepth=8}

vb_setup
echo "# qemu (nested): $FORK_QEMU"
if ! mods=$("$VB_ROOT/scripts/build-kmod.sh" --guest-modules 2> "$VB_TMP/kmod.log"); then
    sed 's/^/#   /' "$VB_TMP/kmod.log" | tail -n 20
    vb_bail "scripts/build-kmod.sh --guest-modules failed"
fi
margs=()
for m in $mods; do
    margs+=(--module "$m")
done
if ! assets=$("$VB_ROOT/scripts/guest/build-nested.sh" --qemu "$FORK_QEMU" \
                  "${margs[@]}" 2> "$VB_TMP/nested.log"); then
    sed 's/^/#   /' "$VB_TMP/nested.log" | tail -n 20
    vb_bail "scripts/guest/build-nested.sh failed"
fi

img=$(vb_mkimg outer 64M)
start=$(date +%s)
# vbnmem: the nested TCG guests migrate on a QEMU 7.2, which loses guest
# stores when the RAM size is a multiple of 256 KiB (see VB_MIG_MEM)
vb_check "nested guest on vhost-pci-blk-pci,drive= (vhost_blk.ko) migrates $nmig time(s) during fio verify passes" \
    vb_guest -a "$assets" -m 1536M -c 2 -j nested -t "${VB_NESTED_MIG_TIMEOUT:-1500}" \
        vbnmode=kernel vbnjob=fio-until-stop vbnmigrate="$nmig" vbnstopoff=60M \
        vbnmem="$VB_MIG_MEM" \
        vbnargs="$nargs+vbstopoff=60M+vbmaxpasses=1000" -- \
        -drive "if=none,id=od0,file=$img,format=raw,cache=none,aio=native" \
        -device virtio-blk-pci,drive=od0,num-queues=1
echo "# outer guest run: $(( $(date +%s) - start )) s; nested part: $(vb_info_get nested_secs || echo ?) s"
for i in $(seq 1 "$nmig"); do
    echo "# migration $i: $(vb_info_get mig${i}_secs || echo ?) s, after $(vb_info_get mig${i}_passes_before || echo ?) fio pass(es) on its source"
    vb_check_info "migration $i completed" mig${i}_status completed
done
# The stop marker is written after the last migration, so the pass that
# was running then (the last one started on a source) or a later one is
# the job's last: it finished, with its verify, on the destination.
total=$(vb_info_get nested_passes || echo 0)
last=$(vb_info_get mig${nmig}_passes_before || echo 0)
echo "# fio passes in all: $total (passes started on the last destination: $(vb_info_get passes_on_q$nmig || echo ?))"
vb_check "the nested job passed on the last destination: its fio pass $last, running during the migration, or a later one verified there ($total in all)" \
    test "$total" -ge 1 -a "$total" -ge "$last"
vb_done
