# SPDX-License-Identifier: GPL-2.0-or-later
# Guest job: print what the guest sees of /dev/$vbdev as VBTEST-INFO lines
# (sourced by /init).  First it does some direct 4k reads from every CPU so
# that every hardware queue carries requests:
#   vbioreads=64      reads per CPU (0 disables)
# Printed keys: size_sectors logical_block_size physical_block_size ro
# serial discard_max_bytes discard_granularity write_zeroes_max_bytes
# write_cache max_segments max_hw_sectors_kb rotational features (virtio
# feature bits as the driver negotiated them, bit 0 first) virtio_dev
# hctxN_cpus (CPUs mapped to hardware queue N) hctxN_irqs (completion
# interrupts of virtqueue N; "?" if the queues share a vector)
# nr_hw_queues.
q=/sys/block/$vbdev/queue
rd() { [ -r "$1" ] && tr -d '\n' < "$1"; }
n=${vbioreads:-64}
if [ "$n" -gt 0 ]; then
    cpu=0
    while [ "$cpu" -lt "$(nproc)" ]; do
        taskset -c "$cpu" dd if="/dev/$vbdev" of=/dev/null bs=4k count="$n" \
            iflag=direct 2>/dev/null || vb_fail "direct read on cpu $cpu failed"
        cpu=$((cpu + 1))
    done
fi
vb_info size_sectors "$(rd /sys/block/$vbdev/size)"
vb_info logical_block_size "$(rd $q/logical_block_size)"
vb_info physical_block_size "$(rd $q/physical_block_size)"
vb_info ro "$(rd /sys/block/$vbdev/ro)"
vb_info serial "$(rd /sys/block/$vbdev/serial)"
vb_info discard_max_bytes "$(rd $q/discard_max_bytes)"
vb_info discard_granularity "$(rd $q/discard_granularity)"
vb_info write_zeroes_max_bytes "$(rd $q/write_zeroes_max_bytes)"
vb_info write_cache "$(rd $q/write_cache | tr ' ' _)"
vb_info max_segments "$(rd $q/max_segments)"
vb_info max_hw_sectors_kb "$(rd $q/max_hw_sectors_kb)"
vb_info rotational "$(rd $q/rotational)"
vb_info features "$(rd /sys/block/$vbdev/device/features)"
nq=0
vdev=$(basename "$(readlink /sys/block/$vbdev/device)")
vb_info virtio_dev "$vdev"
for d in /sys/block/$vbdev/mq/*; do
    [ -d "$d" ] || continue
    i=${d##*/}
    vb_info "hctx${i}_cpus" "$(rd $d/cpu_list | tr -d ' ')"
    # Interrupts of virtqueue i (one MSI-X vector per queue): proof that
    # the device completed requests on that queue.
    vb_info "hctx${i}_irqs" "$(awk -v n="$vdev-req.$i" '
        $NF == n { for (c = 2; c <= ncpu + 1; c++) s += $c; f = 1 }
        END { if (f) print s + 0; else print "?" }' ncpu="$(nproc)" /proc/interrupts)"
    nq=$((nq + 1))
done
vb_info nr_hw_queues "$nq"
return 0
