#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The mirror job over NBD, vhost-blkd against qemu-storage-daemon: a
# source daemon exports a raw image full of data over vhost-user to the
# client (vhost-blk-bench); a second daemon of the same kind serves an
# empty raw image over NBD on 127.0.0.1 TCP, without and with TLS (x509,
# certificates made here with certtool); the source mirrors its node to
# a driver=nbd node (blockdev-mirror sync=full), the same QMP on both:
#   copy   the export idle: time to READY, copy rate in MiB/s
#   base   the client alone: 4k randread, depth 32, a sleeping client
#          (no --halt-poll-ns), IOPS and p99
#   load   the same client from before the job until READY
#   conv   the client writing 4k at random at a fixed --rate IOPS (open
#          loop) while the mirror runs: READY within --conv-timeout
#          seconds or not, and how long it took
#   cmp    after the jobs (block-job-cancel after READY, which leaves a
#          consistent copy), the target file equals the source: a
#          difference fails the run
# Repetitions are interleaved (rep r of every case, then r+1); the
# report gives min / median / max per cell, every vhost-blkd / QSD ratio
# per repetition, and the goals checked per repetition.
#
# Usage: scripts/bench/mirror.sh [-o OUTDIR] [-r REPS] [-d DIR]
#            [-m SIZE_MIB] [-b BUILDDIR] [--copy-mode MODE]
#            [--rate IOPS] [--conv-timeout S] [--tls "off on"]
#            [--granularity BYTES] [--buf-size BYTES] [--ab BUILDDIR]
#   -o  output directory (default /var/tmp/vhost-blk-mirror-bench)
#   -r  repetitions (default 3)     -d  image directory (default /var/tmp)
#   -m  image size in MiB (default 4096)
#   --copy-mode     background (default) or write-blocking, both daemons
#   --rate          the conv client's IOPS (default 5000)
#   --conv-timeout  seconds the conv case waits for READY (default 60)
#   --tls           which TLS settings to run (default "off on")
#   --granularity   the mirror's dirty-bitmap granularity (default: the
#                   daemon's own for an NBD target: 4 KiB in vhost-blkd
#                   up to 256 GiB, 64 KiB in QSD and in a vhost-blkd
#                   build older than the 4 KiB default)
#   --buf-size      the mirror's buf-size (default: the daemon's own,
#                   16 MiB in both)
#   --ab BUILDDIR   an A/B run of two vhost-blkd builds instead: the
#                   column of qemu-storage-daemon is the vhost-blkd of
#                   BUILDDIR (e.g. a build of main), same client
# The defaults are the goal table of issue 32 (4 GiB, 3 repetitions,
# TLS off and on) in one command; how long it may take is printed first.
# Outputs OUTDIR/raw.jsonl (every case) and OUTDIR/results.md (printed).
set -u

srcdir=$(cd "$(dirname "$0")/../.." && pwd)
out=/var/tmp/vhost-blk-mirror-bench
reps=3
dir=/var/tmp
size_mib=4096
builddir=$srcdir/build
copy_mode=background
rate=5000
conv_timeout=60
tls_modes="off on"
granularity=0
buf_size=0
ab=

usage() { sed -n '3,45p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "mirror.sh: $*" >&2; exit 1; }
log() { echo "# $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
    -o) out=$2; shift ;;
    -r) reps=$2; shift ;;
    -d) dir=$2; shift ;;
    -m) size_mib=$2; shift ;;
    -b) builddir=$2; shift ;;
    --copy-mode) copy_mode=$2; shift ;;
    --rate) rate=$2; shift ;;
    --conv-timeout) conv_timeout=$2; shift ;;
    --tls) tls_modes=$2; shift ;;
    --granularity) granularity=$2; shift ;;
    --buf-size) buf_size=$2; shift ;;
    --ab) ab=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
done
case "$copy_mode" in
background|write-blocking) ;;
*) die "--copy-mode: background or write-blocking, not '$copy_mode'" ;;
esac

BLKD=$builddir/tools/vhost-blkd
BENCH=$builddir/tools/vhost-blk-bench
if [ -n "$ab" ]; then
    # The other column (kind "qsd" in raw.jsonl): a second vhost-blkd.
    QSD=$ab/tools/vhost-blkd
    [ -x "$QSD" ] || die "--ab: $QSD missing: build $ab first"
else
    QSD=$(command -v qemu-storage-daemon) ||
        die "qemu-storage-daemon not found (Debian: apt-get install qemu-system-common)"
fi
command -v certtool >/dev/null ||
    die "certtool not found (Debian: apt-get install gnutls-bin)"
[ -x "$BLKD" ] && [ -x "$BENCH" ] ||
    die "$BLKD or $BENCH missing: build first (ninja -C $builddir)"

case "$size_mib$reps$conv_timeout" in
*[!0-9]*) die "-m, -r and --conv-timeout take whole numbers" ;;
esac
# How long, at most about: per case the idle copy, the client alone as
# long, the copy under the client and the catch-up of a conv case that
# timed out (each SIZE at 150 MiB/s, the slowest copy seen here, with
# TLS), the conv case's --conv-timeout, the compare (the image read
# twice at ~500 MiB/s) and ~5 s of daemons and certificates; plus the
# writing of the source image once.
ntls=$(echo $tls_modes | wc -w)
ncases=$((reps * ntls * 2))
per_case=$((4 * size_mib / 150 + conv_timeout + 2 * size_mib / 500 + 5))
total_s=$((ncases * per_case + size_mib / 200))
log "$ncases cases ($reps repetition(s) x TLS '$tls_modes' x 2 daemons," \
    "$size_mib MiB): at most about $(((total_s + 59) / 60)) min;" \
    "a case that converges takes less than its --conv-timeout ($conv_timeout s)"

mkdir -p "$out" || die "cannot create $out"
tmp=$(mktemp -d "$dir/vb-mirrorb.XXXXXX") || die "mktemp in $dir failed"
raw=$out/raw.jsonl
: > "$raw"

declare -A PID
cleanup() {
    local n
    for n in "${!PID[@]}"; do kill -TERM "${PID[$n]}" 2>/dev/null; done
    for n in "${!PID[@]}"; do wait "${PID[$n]}" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------ certificates
cert() { certtool "$@" >/dev/null 2>"$tmp/certtool.err"; }
mkdir -p "$tmp/ca" "$tmp/tls-server" "$tmp/tls-client"
printf 'cn = vb-bench-ca\nca\ncert_signing_key\nexpiration_days = 2\n' \
    > "$tmp/ca/ca.info"
printf 'cn = localhost\nexpiration_days = 2\nsigning_key\nencryption_key\nip_address = 127.0.0.1\ndns_name = localhost\ntls_www_server\n' \
    > "$tmp/ca/server.info"
printf 'cn = mirror-source\nexpiration_days = 2\nsigning_key\nencryption_key\ntls_www_client\n' \
    > "$tmp/ca/client.info"
cert --generate-privkey --key-type=ecdsa --outfile "$tmp/ca/ca-key.pem" &&
cert --generate-self-signed --load-privkey "$tmp/ca/ca-key.pem" \
    --template "$tmp/ca/ca.info" --outfile "$tmp/ca/ca-cert.pem" ||
    die "certtool could not make the CA: $(cat "$tmp/certtool.err")"
for who in server client; do
    d=$tmp/tls-$who
    cert --generate-privkey --key-type=ecdsa --outfile "$d/$who-key.pem" &&
    cert --generate-certificate --load-privkey "$d/$who-key.pem" \
        --load-ca-certificate "$tmp/ca/ca-cert.pem" \
        --load-ca-privkey "$tmp/ca/ca-key.pem" \
        --template "$tmp/ca/$who.info" --outfile "$d/$who-cert.pem" ||
        die "certtool could not make the $who certificate: $(cat "$tmp/certtool.err")"
    cp "$tmp/ca/ca-cert.pem" "$d/"
done

# ------------------------------------------------------------ daemons
wait_sock() {
    local n=0
    while [ ! -S "$2" ]; do
        kill -0 "${PID[$1]}" 2>/dev/null ||
            { sed 's/^/    /' "$tmp/$1.log" >&2; die "$1 exited"; }
        [ $n -ge 400 ] && die "$1: no socket $2"
        sleep 0.05; n=$((n + 1))
    done
}

# daemon NAME KIND ARGS...: vhost-blkd or QSD (KIND blkd or qsd) with a
# QMP monitor on $tmp/NAME.qmp.
daemon() {
    local name=$1 kind=$2
    shift 2
    rm -f "$tmp/$name.qmp"
    local mon=(--chardev "socket,id=mon,path=$tmp/$name.qmp,server=on,wait=off"
               --monitor chardev=mon)
    if [ "$kind" = qsd ] && [ -n "$ab" ]; then
        "$QSD" "${mon[@]}" "$@" > "$tmp/$name.log" 2>&1 &
    elif [ "$kind" = qsd ]; then
        "$QSD" --object iothread,id=iot0 "${mon[@]}" "$@" \
            > "$tmp/$name.log" 2>&1 &
    else
        "$BLKD" "${mon[@]}" "$@" > "$tmp/$name.log" 2>&1 &
    fi
    PID[$name]=$!
    wait_sock "$name" "$tmp/$name.qmp"
}

stop() {
    kill -TERM "${PID[$1]}" 2>/dev/null
    wait "${PID[$1]}" 2>/dev/null
    unset "PID[$1]"
}

file_node() {
    echo "driver=file,node-name=$1,filename=$2,cache.direct=on,aio=io_uring"
}

# start KIND: the source (src.img over vhost-user as node src) and the
# destination (a new empty tgt.img as node tgt; NBD set up over QMP).
start() {
    local kind=$1 iot=
    [ "$kind" = qsd ] && [ -z "$ab" ] && iot=,iothread=iot0
    rm -f "$tmp/tgt.img" "$tmp/vu.sock"
    truncate -s "${size_mib}M" "$tmp/tgt.img"
    daemon src "$kind" --blockdev "$(file_node src "$tmp/src.img")" \
        --export "type=vhost-user-blk,id=e,node-name=src,addr.type=unix,addr.path=$tmp/vu.sock,writable=on$iot"
    wait_sock src "$tmp/vu.sock"
    daemon dst "$kind" --blockdev "$(file_node tgt "$tmp/tgt.img")"
}

log "source image: $size_mib MiB of data in $tmp"
python3 - "$tmp/src.img" "$size_mib" <<'EOF' || die "cannot write the image"
import os, sys
chunk = os.urandom(1 << 20)
with open(sys.argv[1], "wb") as f:
    for i in range(int(sys.argv[2])):
        f.write(chunk[i % 4096:] + chunk[:i % 4096])
EOF

for r in $(seq 1 "$reps"); do
    for tls in $tls_modes; do
        for kind in blkd qsd; do
            log "rep $r $kind tls=$tls"
            start "$kind"
            targs=()
            [ "$tls" = on ] && targs=(--tls-dir "$tmp")
            [ "$kind" = qsd ] && [ -z "$ab" ] && targs+=(--legacy-addr)
            j=$(python3 "$srcdir/scripts/bench/mirror-case.py" \
                    --src-qmp "$tmp/src.qmp" --dst-qmp "$tmp/dst.qmp" \
                    --socket "$tmp/vu.sock" --bench "$BENCH" \
                    --copy-mode "$copy_mode" --rate "$rate" \
                    --conv-timeout "$conv_timeout" --work "$tmp/c-" \
                    --granularity "$granularity" --buf-size "$buf_size" \
                    "${targs[@]}") ||
                die "$kind tls=$tls: the case failed (logs: $tmp/src.log, $tmp/dst.log)"
            stop src; stop dst
            # The source was written (conv), so the target must have
            # followed: the whole image compared.
            if cmp -s "$tmp/src.img" "$tmp/tgt.img"; then same=true; else same=false; fi
            echo "{\"kind\": \"$kind\", \"tls\": \"$tls\", \"rep\": $r, \"size_mib\": $size_mib, \"rate\": $rate, \"same\": $same, \"r\": $j}" >> "$raw"
            [ "$same" = true ] ||
                die "$kind tls=$tls rep $r: the target differs from the source after the mirror"
        done
    done
done

python3 "$srcdir/scripts/bench/mirror-report.py" "$raw" "$copy_mode" \
    ${ab:+"$ab"} \
    > "$out/results.md" || die "the report failed"
cat "$out/results.md"
