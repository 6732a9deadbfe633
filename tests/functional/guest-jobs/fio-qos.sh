# SPDX-License-Identifier: GPL-2.0-or-later
# Guest job: the IOPS fio measures on throttled and unthrottled disks
# (sourced by /init), for tests/functional/test-qos.sh.  Four disks: vda
# (an export with its own limit), vdb (no limit), vdc and vdd (one shared
# throttle group).  Each phase is fio 4k random reads, O_DIRECT, libaio,
# depth vbiodepth, vbruntime seconds; it reports iops_PHASE_DISK:
#   (warm     vdb alone for 2 s, not reported: TCG translates fio's code
#             on its first run, which makes that run slow)
#   free      vdb alone: what this guest reaches without a limit
#   lim       vda alone
#   mixed     vda and vdb at once (the unthrottled one keeps its rate)
#   group     vdc and vdd at once (they share the group)
#   after     vdc alone after the host changed the group's limit: the
#             job prints "VBTEST-LOG: qmp-wait" and waits until the 4 KiB
#             block at byte offset vbgooff of vdd starts with "VBGO"
#   free2     vdb alone again, the control run at the end
#   vbruntime=5  vbiodepth=32  vbgooff=60M
rt=${vbruntime:-5}
qd=${vbiodepth:-32}
gooff=${vbgooff:-60M}
case $gooff in *M) gooff=$(( ${gooff%M} * 1048576 )) ;; esac
for d in vda vdb vdc vdd; do
    vb_wait_dev "$d" 20 || vb_fail "no /dev/$d"
done

# phase NAME DISK...: one fio job per disk, all at once, for $prt
# seconds (default vbruntime).
phase() {
    local name=$1 args="" d
    shift
    for d in "$@"; do
        args="$args --name=$d --filename=/dev/$d"
    done
    # shellcheck disable=SC2086
    fio --direct=1 --ioengine=libaio --rw=randread --bs=4k --iodepth="$qd" \
        --size=32M --runtime="${prt:-$rt}" --time_based=1 --output-format=terse \
        --terse-version=3 $args > /tmp/fio.$name 2>&1 ||
        { cat /tmp/fio.$name; vb_fail "fio phase $name failed"; }
    # terse v3: field 3 is the job name, field 8 the read IOPS
    while IFS=';' read -r _ _ job _ _ _ _ iops _; do
        vb_info "iops_${name}_$job" "$iops"
        vb_log "phase $name: $job $iops IOPS"
    done < /tmp/fio.$name
}

prt=2
phase warm vdb
prt=
phase free vdb
phase lim vda
phase mixed vda vdb
phase group vdc vdd
vb_log "qmp-wait"
n=0
until [ "$(dd if=/dev/vdd bs=4096 skip=$((gooff / 4096)) count=1 \
           iflag=direct 2>/dev/null | head -c 4)" = VBGO ]; do
    n=$((n + 1))
    [ "$n" -ge 300 ] && vb_fail "the host did not say go"
    usleep 200000
done
phase after vdc
phase free2 vdb
return 0
