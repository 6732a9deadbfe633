#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Boot the functional-test guest under QEMU (TCG) with a virtio-blk disk,
# run one guest job and report its result; exit 0 on PASS, 1 on FAIL.
#
# Usage: run-guest.sh [options] [vbKEY=VALUE ...] [-- extra qemu args]
#   -s, --socket PATH     vhost-user-blk socket; adds
#                         -chardev socket,id=vbdiskI,path=PATH,reconnect=1
#                         -device DEVICE,chardev=vbdiskI,num-queues=N[,OPTS]
#                         (repeatable: vda, vdb, ...).  Without it no disk is
#                         added: give one with --qemu-arg / after "--".
#   -q, --num-queues N    queues of each socket disk (default 1)
#   -d, --device TYPE     device for socket disks (default vhost-user-blk-pci,
#                         later vhost-pci-blk-pci)
#   -o, --device-opts S   extra ",S" appended to each socket disk's -device
#   -j, --job NAME        guest job, tests/functional/guest-jobs/NAME.sh
#                         (default device-info)
#   -t, --timeout SEC     guest watchdog (default 120); QEMU is killed from
#                         the host SEC+30 s after start
#   -l, --log FILE        serial console log (default: a temp file, removed
#                         on PASS, kept and named on FAIL)
#   -i, --info-file FILE  write the job's VBTEST-INFO lines as key=value
#   -Q, --qemu BIN        QEMU binary (default $VHOST_BLK_QEMU or
#                         qemu-system-x86_64)
#   -a, --assets DIR      guest assets (default $VHOST_BLK_GUEST_ASSETS or
#                         the output of scripts/guest/build-assets.sh)
#   -x, --qemu-arg ARG    one extra QEMU argument (repeatable)
#   -m, --mem SIZE        guest RAM, shared memfd (default 512M)
#   -c, --cpus N          guest CPUs (default 2)
#   -r, --reconnect-ok    a backend that goes away is not fatal (reconnect
#                         tests); by default QEMU is stopped as soon as it
#                         reports it cannot reach or lost the backend
#   -v, --verbose         print the whole console log
#   key=value             appended to the kernel command line; the guest's
#                         /init and jobs read them as environment variables
#                         (vbsize=64M vbrw=randwrite ...; see README.md)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_ROOT=$(cd "$HERE/../.." && pwd)

sockets=()
nq=1
device=vhost-user-blk-pci
devopts=
job=device-info
timeout=120
log=
infofile=
qemu=${VHOST_BLK_QEMU:-qemu-system-x86_64}
assets=${VHOST_BLK_GUEST_ASSETS:-}
extra=()
mem=512M
cpus=2
verbose=0
reconnect_ok=0
params=()

usage() { sed -n '/^# Usage/,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
need() { [ $# -ge 2 ] || { echo "run-guest: $1 needs a value" >&2; exit 2; }; }

while [ $# -gt 0 ]; do
    case $1 in
        -s|--socket) need "$@"; sockets+=("$2"); shift 2 ;;
        -q|--num-queues) need "$@"; nq=$2; shift 2 ;;
        -d|--device) need "$@"; device=$2; shift 2 ;;
        -o|--device-opts) need "$@"; devopts=$2; shift 2 ;;
        -j|--job) need "$@"; job=$2; shift 2 ;;
        -t|--timeout) need "$@"; timeout=$2; shift 2 ;;
        -l|--log) need "$@"; log=$2; shift 2 ;;
        -i|--info-file) need "$@"; infofile=$2; shift 2 ;;
        -Q|--qemu) need "$@"; qemu=$2; shift 2 ;;
        -a|--assets) need "$@"; assets=$2; shift 2 ;;
        -x|--qemu-arg) need "$@"; extra+=("$2"); shift 2 ;;
        -m|--mem) need "$@"; mem=$2; shift 2 ;;
        -c|--cpus) need "$@"; cpus=$2; shift 2 ;;
        -r|--reconnect-ok) reconnect_ok=1; shift ;;
        -v|--verbose) verbose=1; shift ;;
        -h|--help) usage ;;
        --) shift; extra+=("$@"); break ;;
        *=*) params+=("$1"); shift ;;
        *) echo "run-guest: unknown argument '$1'" >&2; usage ;;
    esac
done

case $timeout in ''|*[!0-9]*) echo "run-guest: bad --timeout '$timeout'" >&2; exit 2 ;; esac
case $nq in ''|*[!0-9]*) echo "run-guest: bad --num-queues '$nq'" >&2; exit 2 ;; esac
for p in "${params[@]}"; do
    case $p in *[[:space:]]*) echo "run-guest: parameter '$p' contains a space" >&2; exit 2 ;; esac
done

if [ -z "$assets" ]; then
    assets=$("$SRC_ROOT/scripts/guest/build-assets.sh") ||
        { echo "run-guest: FAIL: building the guest assets failed" >&2; exit 1; }
fi
for f in vmlinux initramfs.img; do
    [ -f "$assets/$f" ] || { echo "run-guest: FAIL: no $assets/$f" >&2; exit 1; }
done
command -v "$qemu" >/dev/null || { echo "run-guest: FAIL: no QEMU binary '$qemu'" >&2; exit 1; }

keep_log=0
if [ -z "$log" ]; then
    log=$(mktemp "${TMPDIR:-/tmp}/vbguest.XXXXXX.log")
else
    keep_log=1
    : > "$log"
fi
errlog=$log.qemu-stderr

cmdline="console=ttyS0 quiet panic=-1 cryptomgr.notests mitigations=off no_timer_check"
cmdline+=" vbjob=$job vbtimeout=$timeout"
for p in "${params[@]}"; do cmdline+=" $p"; done

args=(-accel tcg -machine q35,memory-backend=vbmem
      -object "memory-backend-memfd,id=vbmem,size=$mem,share=on"
      -cpu max -smp "$cpus" -m "$mem"
      -kernel "$assets/vmlinux" -initrd "$assets/initramfs.img"
      -append "$cmdline"
      -display none -serial "file:$log" -monitor none -no-reboot -nic none)
# A QEMU built from source finds its firmware only through -L.
for d in /usr/share/seabios /usr/share/qemu; do
    [ -d "$d" ] && args+=(-L "$d")
done
i=0
for s in "${sockets[@]}"; do
    args+=(-chardev "socket,id=vbdisk$i,path=$s,reconnect=1"
           -device "$device,chardev=vbdisk$i,num-queues=$nq${devopts:+,$devopts}")
    i=$((i + 1))
done
args+=("${extra[@]}")

for s in "${sockets[@]}"; do
    [ -S "$s" ] || { echo "run-guest: FAIL: $s is not a socket (is the backend running?)"; exit 1; }
done

# Run QEMU in the background and watch it: a host-side timeout, and an
# early exit when QEMU reports a backend it cannot reach (with reconnect=1
# QEMU 7.2 would otherwise wait forever).
start=$(date +%s.%N)
"$qemu" "${args[@]}" 2> "$errlog" &
qpid=$!
host_limit=$(( (timeout + 30) * 10 ))
ticks=0
killed=
while kill -0 "$qpid" 2>/dev/null; do
    if [ $ticks -ge $host_limit ]; then
        killed="QEMU still running after $((timeout + 30))s (killed by the host timeout)"
    elif [ $reconnect_ok -eq 0 ] && grep -qs -e 'Unable to connect character device' -e 'Failed to read msg header' \
            -e 'vhost-user-blk: unable to' "$errlog"; then
        killed="QEMU lost its vhost-user backend: $(grep -m1 -e 'Unable to connect' \
            -e 'Failed to read' -e 'vhost-user-blk:' "$errlog")"
    fi
    if [ -n "$killed" ]; then
        kill -TERM "$qpid" 2>/dev/null
        sleep 1
        kill -KILL "$qpid" 2>/dev/null
        break
    fi
    sleep 0.1
    ticks=$((ticks + 1))
done
wait "$qpid"
qrc=$?
secs=$(echo "$start $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }')

# Console lines worth showing: our markers and fio's summary.
tr -d '\r' < "$log" > "$log.clean"
if [ $verbose -eq 1 ]; then
    cat "$log.clean"
else
    grep -E 'VBTEST-(START|LOG|INFO)|IOPS=|BW=|err=|[Vv]erify|fio:|(READ|WRITE|TRIM): bw=|Call Trace|BUG:|Kernel panic|blk_update_request|I/O error' \
        "$log.clean"
fi
if [ -n "$infofile" ]; then
    sed -n 's/^VBTEST-INFO: //p' "$log.clean" > "$infofile"
fi
result=$(grep -a '^VBTEST-RESULT: ' "$log.clean" | tail -n1)
rm -f "$log.clean"

reason=
if [ -n "$killed" ]; then
    reason=$killed
elif [ $qrc -ne 0 ]; then
    reason="QEMU exited with status $qrc: $(tail -n 3 "$errlog" | tr '\n' ' ')"
elif [ -z "$result" ]; then
    reason="no VBTEST-RESULT marker on the console (guest crashed or never ran /init)"
elif [ "$result" != "VBTEST-RESULT: PASS" ]; then
    reason=${result#VBTEST-RESULT: FAIL }
fi

if [ -z "$reason" ]; then
    echo "run-guest: PASS job=$job (${secs}s)"
    [ $keep_log -eq 1 ] || rm -f "$log"
    [ -s "$errlog" ] || rm -f "$errlog"
    exit 0
fi

echo "run-guest: FAIL job=$job (${secs}s): $reason"
echo "run-guest: qemu: $qemu ${args[*]}"
if [ -s "$errlog" ]; then
    echo "run-guest: --- QEMU stderr ($errlog) ---"
    tail -n 20 "$errlog"
fi
echo "run-guest: --- last 40 console lines ($log) ---"
tail -n 40 "$log" | tr -d '\r'
exit 1
