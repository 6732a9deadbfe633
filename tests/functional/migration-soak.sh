#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Migration soak: count guest crashes per live migration, to tell a
# vhost-blkd bug from a QEMU/TCG one.  Not part of run-all.sh (it runs for
# as long as you ask it to); run it by hand:
#
#   VHOST_BLK_GUEST_ASSETS=... tests/functional/migration-soak.sh \
#       [--arm vhost|virtio] [--cpu MODEL] [--migrations N]
#
# The guest is the one test-migration.sh migrates (TCG, -smp 1, 256 MiB
# share=on memfd, fio write + crc32c verify passes, job fio-until-stop),
# ping-ponged between two QEMUs N times (default 15) at full speed:
#   --arm vhost   its disk is vhost-user-blk-pci on two vhost-blkd sockets
#                 of one image, as in test-migration.sh (default)
#   --arm virtio  the control: QEMU's own virtio-blk-pci on the same image
#                 file (locking=off, O_DIRECT), no vhost-user, no vhost-blkd
#   --cpu MODEL   the guest CPU model on both QEMUs (default max)
#   --compare-ram  start each destination with -S and, once the migration
#                 completed, compare the stopped source's guest RAM with
#                 the destination's, page by page, before it runs: with
#                 the source stopped, the back-end stopped and the
#                 destination not yet running, nothing writes either, so
#                 any page that differs was lost by the migration (counted
#                 as ram_diffs, the pages listed in ram-diff-K.txt)
#   --mem SIZE    guest RAM (default 256M; QEMU's -m syntax, e.g. 262140K)
#   --size SIZE   bytes each fio pass writes and verifies (default 16M;
#                 smaller passes mean more migrations per hour)
#
# After each migration the script waits until the guest starts a new fio
# pass on the destination (it ran on there), or its console shows a crash,
# or it hangs (no new pass within --pass-timeout s, default 300), or QEMU
# exits.  A crashed or hung guest is killed and a fresh one booted, and the
# soak goes on, so every migration is counted.  At the end the host stops
# the job and the last pass must verify.  The last line is a summary:
#   SOAK: arm=A cpu=M migrations=N crashes=C hangs=H resets=R failed=F ...
# (crashes: consoles that show an oops/BUG/panic; resets: QEMU exited
# without one; failed: the migration itself failed).  Exit status 0 when
# all are 0 and the final verify passed.  With VB_KEEP=1 (or any crash) the
# consoles stay in the tmp dir: serial-K.log is QEMU K's guest console.
set -u
. "$(dirname "$0")/lib.sh"

arm=vhost
cpu=max
migrations=15
size=16M
compare_ram=0
mem=256M
pass_timeout=300
qemu=${VHOST_BLK_QEMU:-qemu-system-x86_64}
while [ $# -gt 0 ]; do
    case $1 in
    --arm) arm=$2; shift 2 ;;
    --cpu) cpu=$2; shift 2 ;;
    --migrations) migrations=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --compare-ram) compare_ram=1; shift ;;
    --mem) mem=$2; shift 2 ;;
    --pass-timeout) pass_timeout=$2; shift 2 ;;
    --qemu) qemu=$2; shift 2 ;;
    *) echo "migration-soak.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
case $arm in
vhost|virtio) ;;
*) echo "migration-soak.sh: --arm must be vhost or virtio, not '$arm'" >&2
   exit 2 ;;
esac
case $size in
[1-9]*M|[1-9]*k) ;;
*) echo "migration-soak.sh: --size wants e.g. 4M or 512k, not '$size'" >&2
   exit 2 ;;
esac
case $migrations in
''|*[!0-9]*) echo "migration-soak.sh: --migrations wants a number" >&2
             exit 2 ;;
esac
case $mem in
[1-9]*M) mem_bytes=$(( ${mem%M} * 1048576 )) ;;
[1-9]*K) mem_bytes=$(( ${mem%K} * 1024 )) ;;
*) echo "migration-soak.sh: --mem wants e.g. 256M or 262140K, not '$mem'" >&2
   exit 2 ;;
esac
QMP=$VB_FUNC/qmp.py
CRASH_RE='Oops|BUG:|Kernel panic|general protection'

command -v "$qemu" >/dev/null || vb_skip_all "no QEMU binary '$qemu'"
command -v python3 >/dev/null || vb_skip_all "python3 (for QMP) is not installed"
vb_setup
img=$(vb_mkimg soak 64M)
socks=("$VB_TMP/blkd-a.sock" "$VB_TMP/blkd-b.sock")
if [ "$arm" = vhost ]; then
    BLKD=$(vb_bin vhost-blkd) ||
        vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
    for i in 0 1; do
        vb_daemon_start "blkd-$i" "${socks[$i]}" "$BLKD" --log-level info \
            --export "socket=${socks[$i]},file=$img" ||
            vb_bail "vhost-blkd $i did not start"
    done
fi

cmdline="console=ttyS0 quiet panic=-1 cryptomgr.notests mitigations=off no_timer_check"
cmdline+=" vbjob=fio-until-stop vbtimeout=3600 vbsize=$size vbstopoff=60M"
cmdline+=" vbmaxpasses=100000"
common=(-accel tcg -machine q35,memory-backend=vbmem
        -object "memory-backend-memfd,id=vbmem,size=$mem,share=on"
        -cpu "$cpu" -smp 1 -m "$mem"
        -kernel "$VHOST_BLK_GUEST_ASSETS/vmlinux"
        -initrd "$VHOST_BLK_GUEST_ASSETS/initramfs.img"
        -append "$cmdline" -display none -monitor none -no-reboot -nic none)
for d in /usr/share/seabios /usr/share/qemu; do
    [ -d "$d" ] && common+=(-L "$d")
done

QPIDS=()
# qemu_start N SIDE [ARGS...]: QEMU number N, its disk on side SIDE (0/1:
# which vhost-blkd socket; the virtio arm opens the image itself), serial
# console in $VB_TMP/serial-N.log, QMP on $VB_TMP/qmp-N.sock.
qemu_start() {
    local n=$1 side=$2 disk
    shift 2
    if [ "$arm" = vhost ]; then
        disk=(-chardev "socket,id=vbdisk0,path=${socks[$side]},reconnect=1"
              -device "vhost-user-blk-pci,chardev=vbdisk0,num-queues=1")
    else
        disk=(-blockdev "driver=file,node-name=vbdisk0,filename=$img,locking=off,cache.direct=on"
              -device "virtio-blk-pci,drive=vbdisk0,num-queues=1")
    fi
    "$qemu" "${common[@]}" "${disk[@]}" \
        -serial "file:$VB_TMP/serial-$n.log" \
        -qmp "unix:$VB_TMP/qmp-$n.sock,server=on,wait=off" "$@" \
        2> "$VB_TMP/qemu-$n.err" &
    QPIDS[$n]=$!
}

qmp() {
    local msg="{\"execute\": \"$2\"${3:+, \"arguments\": $3}}"
    "$QMP" "$VB_TMP/qmp-$1.sock" "$msg"
}

# wait_for SECS CMD...: poll CMD every 0.2 s until it succeeds; fails after
# SECS s, or as soon as QEMU $QWATCH exited.
QWATCH=
wait_for() {
    local secs=$1 n=0
    shift
    until "$@" >/dev/null 2>&1; do
        if [ -n "$QWATCH" ] && ! kill -0 "${QPIDS[$QWATCH]}" 2>/dev/null; then
            return 1
        fi
        [ $n -ge $((secs * 5)) ] && return 1
        sleep 0.2
        n=$((n + 1))
    done
}

status_is() { qmp "$1" query-status | grep -q "\"status\": \"$2\""; }
MIG_FAILED=0
migration_done() {
    local s
    s=$(qmp "$1" query-migrate) || return 1
    case $s in
    *'"status": "completed"'*) return 0 ;;
    *'"status": "failed"'*|*'"status": "cancelled"'*)
        MIG_FAILED=1; return 0 ;;
    esac
    return 1
}
crashed() { tr -d '\r' < "$VB_TMP/serial-$1.log" | grep -aqE "$CRASH_RE"; }
# ran_or_crashed N: QEMU N's guest started a fio pass, or crashed
ran_or_crashed() {
    grep -aq "VBTEST-LOG: fio pass" "$VB_TMP/serial-$1.log" || crashed "$1"
}

kill_qemu() {
    kill -KILL "${QPIDS[$1]}" 2>/dev/null
    wait "${QPIDS[$1]}" 2>/dev/null
}
cleanup_qemu() {
    local p
    for p in "${QPIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
}
trap 'cleanup_qemu; vb_cleanup' EXIT

# compare_ram_of SRC DST M: guest RAM of the stopped source SRC and the
# not yet started destination DST must be equal, page by page (outside
# the legacy VGA/BIOS hole 0xa0000-0xfffff, which is not RAM).
ram_diffs=0
compare_ram_of() {
    local src=$1 dst=$2 m=$3 d
    qmp "$src" pmemsave "{\"val\": 0, \"size\": $mem_bytes, \"filename\": \"$VB_TMP/ram-src.bin\"}" >/dev/null &&
    qmp "$dst" pmemsave "{\"val\": 0, \"size\": $mem_bytes, \"filename\": \"$VB_TMP/ram-dst.bin\"}" >/dev/null ||
        vb_bail "QMP pmemsave failed"
    d=$(python3 - "$VB_TMP/ram-src.bin" "$VB_TMP/ram-dst.bin" \
            "$VB_TMP/ram-diff-$dst.txt" <<'PY'
import sys
a = open(sys.argv[1], "rb").read()
b = open(sys.argv[2], "rb").read()
out = []
for off in range(0, min(len(a), len(b)), 4096):
    if 0xa0000 <= off < 0x100000:
        continue
    if a[off:off + 4096] != b[off:off + 4096]:
        d = [i for i in range(4096) if a[off + i] != b[off + i]]
        out.append("gpa 0x%x: %d bytes differ, first at +0x%x: "
                   "src %s dst %s" % (off, len(d), d[0],
                   a[off + d[0]:off + d[0] + 8].hex(),
                   b[off + d[0]:off + d[0] + 8].hex()))
open(sys.argv[3], "w").write("\n".join(out) + "\n")
print(len(out))
PY
    ) || vb_bail "comparing the RAM dumps failed"
    rm -f "$VB_TMP/ram-src.bin" "$VB_TMP/ram-dst.bin"
    if [ "$d" != 0 ]; then
        ram_diffs=$((ram_diffs + 1))
        echo "# migration $m (QEMU $src -> $dst): $d guest pages differ: $(head -n3 "$VB_TMP/ram-diff-$dst.txt" | tr '\n' ' ')"
    fi
}

n=0         # QEMUs started so far
cur=        # the QEMU running the guest
side=0
crashes=0
hangs=0
resets=0
failed=0
boots=0
# boot: a fresh guest on side $side, running fio
boot() {
    cur=$n
    n=$((n + 1))
    boots=$((boots + 1))
    qemu_start "$cur" "$side"
    QWATCH=$cur
    wait_for "$pass_timeout" ran_or_crashed "$cur" && ! crashed "$cur" ||
        vb_bail "the guest did not boot to fio on QEMU $cur"
}

echo "# arm $arm, cpu $cpu, mem $mem, $migrations migrations, QEMU $qemu"
boot
for m in $(seq 1 "$migrations"); do
    dst=$n
    n=$((n + 1))
    side=$((1 - side))
    dst_args=(-incoming "unix:$VB_TMP/mig-$dst.sock")
    [ $compare_ram = 1 ] && dst_args+=(-S)
    qemu_start "$dst" "$side" "${dst_args[@]}"
    QWATCH=$dst
    wait_for 120 status_is "$dst" inmigrate ||
        vb_bail "destination QEMU $dst did not start"
    QWATCH=$cur
    MIG_FAILED=0
    qmp "$cur" migrate-set-parameters \
        '{"max-bandwidth": 4294967296, "downtime-limit": 2000}' >/dev/null &&
        qmp "$cur" migrate "{\"uri\": \"unix:$VB_TMP/mig-$dst.sock\"}" \
        >/dev/null || vb_bail "QMP migrate on QEMU $cur failed"
    QWATCH=$dst
    dst_state=running
    [ $compare_ram = 1 ] && dst_state=paused
    if ! wait_for 600 migration_done "$cur" || [ $MIG_FAILED = 1 ] ||
       ! wait_for 120 status_is "$dst" "$dst_state"; then
        failed=$((failed + 1))
        echo "# migration $m (QEMU $cur -> $dst): FAILED"
        kill_qemu "$cur"
        kill_qemu "$dst"
        boot
        continue
    fi
    if [ $compare_ram = 1 ]; then
        compare_ram_of "$cur" "$dst" "$m"
        qmp "$dst" cont >/dev/null || vb_bail "QMP cont on QEMU $dst failed"
    fi
    qmp "$cur" quit >/dev/null
    wait "${QPIDS[$cur]}" 2>/dev/null
    cur=$dst
    wait_for "$pass_timeout" ran_or_crashed "$cur"
    if crashed "$cur"; then
        crashes=$((crashes + 1))
        echo "# migration $m (QEMU $cur): CRASH: $(tr -d '\r' < "$VB_TMP/serial-$cur.log" | grep -aE -m1 "$CRASH_RE")"
    elif ! kill -0 "${QPIDS[$cur]}" 2>/dev/null; then
        resets=$((resets + 1))
        echo "# migration $m (QEMU $cur): CRASH: QEMU exited (guest reset)"
    elif ! grep -aq "VBTEST-LOG: fio pass" "$VB_TMP/serial-$cur.log"; then
        hangs=$((hangs + 1))
        echo "# migration $m (QEMU $cur): HANG: no fio pass in ${pass_timeout}s"
    else
        echo "# migration $m (QEMU $cur): ok"
        continue
    fi
    kill_qemu "$cur"
    boot
done
QWATCH=

# The last pass verifies what it wrote on the final destination.
{ printf VBSTOP; head -c 4090 /dev/zero; } > "$VB_TMP/stop.blk"
dd if="$VB_TMP/stop.blk" of="$img" bs=4096 seek=$((60 * 256)) conv=notrunc \
    oflag=direct status=none || vb_bail "cannot write the stop marker"
QWATCH=$cur
wait_for 900 grep -aqE "VBTEST-RESULT|$CRASH_RE" "$VB_TMP/serial-$cur.log"
kill_qemu "$cur"
# a guest may also crash later than right after its migration (then its
# next migration fails): count every console that shows a crash
crashes=0
for k in $(seq 0 $((n - 1))); do
    if crashed "$k"; then
        crashes=$((crashes + 1))
        echo "# QEMU $k's console: $(tr -d '\r' < "$VB_TMP/serial-$k.log" | grep -aE -m1 "$CRASH_RE")"
    fi
done
result=$(tr -d '\r' < "$VB_TMP/serial-$cur.log" | grep -a '^VBTEST-RESULT: ' | tail -n1)
verify=FAIL
[ "$result" = "VBTEST-RESULT: PASS" ] && verify=PASS
vb_check_eq "no guest crashed after any of $migrations migrations" "$crashes" 0
vb_check_eq "no guest hung after a migration" "$hangs" 0
vb_check_eq "no guest reset itself silently after a migration" "$resets" 0
vb_check_eq "every migration completed" "$failed" 0
vb_check_eq "the final fio pass verifies" "$verify" PASS
[ $compare_ram = 1 ] &&
    vb_check_eq "every destination had the source's guest RAM" "$ram_diffs" 0
echo "SOAK: arm=$arm cpu=$cpu mem=$mem size=$size migrations=$migrations crashes=$crashes hangs=$hangs resets=$resets ram_diffs=$([ $compare_ram = 1 ] && echo $ram_diffs || echo -) failed=$failed boots=$boots verify=$verify"
vb_done
