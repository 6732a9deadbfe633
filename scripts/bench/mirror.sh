#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The mirror job, vhost-blkd against qemu-storage-daemon, on the same
# image through the same client (vhost-blk-bench):
#   time   blockdev-mirror sync=full of a fully written raw image to an
#          empty raw file, until BLOCK_JOB_READY, the export idle
#   load   the same while vhost-blk-bench writes 4k at random (depth 8) to
#          the export: the time to READY and the client's IOPS over that
#          time (the client starts before the job and is stopped with
#          SIGTERM at READY, so its figure covers the mirror only)
#   base   the client alone, as long, for the IOPS the mirror costs
# Repetitions are interleaved (rep 1 of every daemon, then rep 2, ...);
# the report gives min / median / max per cell.  On a shared machine the
# figures are indicative only.
#
# Usage: scripts/bench/mirror.sh [-o OUTDIR] [-r REPS] [-d DIR]
#            [-m SIZE_MIB] [-b BUILDDIR] [--copy-mode MODE]
#   -o  output directory (default /var/tmp/vhost-blk-mirror-bench)
#   -r  repetitions (default 3)           -d  image directory (/var/tmp)
#   -m  image size in MiB (default 1024)
#   --copy-mode  background (default) or write-blocking, for both daemons
# Outputs OUTDIR/raw.jsonl (every run) and OUTDIR/results.md (printed).
set -u

srcdir=$(cd "$(dirname "$0")/../.." && pwd)
out=/var/tmp/vhost-blk-mirror-bench
reps=3
dir=/var/tmp
size_mib=1024
builddir=$srcdir/build
copy_mode=background

usage() { sed -n '3,22p' "$0" | sed 's/^# \{0,1\}//'; }
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
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
    shift
done
case "$copy_mode" in
background|write-blocking) ;;
*) die "--copy-mode: background or write-blocking, not '$copy_mode'" ;;
esac

BLKD=$builddir/tools/vhost-blkd
BENCH=$builddir/tools/vhost-blk-bench
QSD=$(command -v qemu-storage-daemon) ||
    die "qemu-storage-daemon not found (Debian: apt-get install qemu-system-common)"
[ -x "$BLKD" ] && [ -x "$BENCH" ] ||
    die "$BLKD or $BENCH missing: build first (ninja -C $builddir)"

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

# The QMP client: "mirror SOCK MODE" starts the job and prints the
# seconds to BLOCK_JOB_READY; the events come on the same connection.
read -r -d '' QMP_PY <<'EOF'
import json, socket, sys, time

path, mode = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
for _ in range(400):
    try:
        s.connect(path)
        break
    except OSError:
        time.sleep(0.05)
else:
    sys.exit("cannot connect to %s" % path)
f = s.makefile("rw")
f.readline()

def call(cmd, args=None):
    f.write(json.dumps({"execute": cmd, "arguments": args or {}}) + "\n")
    f.flush()
    while True:
        r = json.loads(f.readline())
        if "return" in r:
            return r["return"]
        if "error" in r:
            sys.exit("%s: %s" % (cmd, r["error"]["desc"]))

call("qmp_capabilities")
t0 = time.monotonic()
call("blockdev-mirror", {"job-id": "m", "device": "src", "target": "tgt",
                         "sync": "full", "copy-mode": mode})
while True:
    line = f.readline()
    if not line:
        sys.exit("the QMP connection closed before READY")
    r = json.loads(line)
    if r.get("event") == "BLOCK_JOB_READY":
        break
    if r.get("event") == "BLOCK_JOB_COMPLETED":
        sys.exit("the job ended before READY: %s" % r["data"].get("error"))
print("%.3f" % (time.monotonic() - t0))
call("job-cancel", {"id": "m"})
EOF

wait_sock() {
    local n=0
    while [ ! -S "$2" ]; do
        kill -0 "${PID[$1]}" 2>/dev/null ||
            { sed 's/^/    /' "$tmp/$1.log" >&2; die "$1 exited"; }
        [ $n -ge 400 ] && die "$1: no socket $2"
        sleep 0.05; n=$((n + 1))
    done
}

# start KIND: the daemon (blkd or qsd) exporting $tmp/src.img as node
# src over vhost-user, with node tgt on a new empty $tmp/tgt.img.
start() {
    local kind=$1 exp
    rm -f "$tmp/tgt.img" "$tmp/vu.sock" "$tmp/qmp.sock"
    truncate -s "${size_mib}M" "$tmp/tgt.img"
    exp="type=vhost-user-blk,id=e,node-name=src,addr.type=unix,addr.path=$tmp/vu.sock,writable=on"
    local common=(--blockdev "driver=file,node-name=src,filename=$tmp/src.img,cache.direct=on,aio=io_uring"
                  --blockdev "driver=file,node-name=tgt,filename=$tmp/tgt.img,cache.direct=on,aio=io_uring"
                  --chardev "socket,id=mon,path=$tmp/qmp.sock,server=on,wait=off"
                  --monitor chardev=mon)
    if [ "$kind" = qsd ]; then
        "$QSD" --object iothread,id=iot0 "${common[@]}" \
            --export "$exp,iothread=iot0" > "$tmp/$kind.log" 2>&1 &
    else
        "$BLKD" "${common[@]}" --export "$exp" > "$tmp/$kind.log" 2>&1 &
    fi
    PID[$kind]=$!
    wait_sock "$kind" "$tmp/vu.sock"
    wait_sock "$kind" "$tmp/qmp.sock"
}

stop() {
    kill -TERM "${PID[$1]}" 2>/dev/null
    wait "${PID[$1]}" 2>/dev/null
    unset "PID[$1]"
}

# client SECONDS: vhost-blk-bench 4k randwrite depth 8 in the
# background (its JSON in $tmp/bench.json); BPID is its pid.
client() {
    "$BENCH" --socket "$tmp/vu.sock" --rw randwrite --bs 4k --iodepth 8 \
        --runtime "$1" --json > "$tmp/bench.json" 2> "$tmp/bench.err" &
    BPID=$!
}

client_iops() {
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["iops"])' \
        "$tmp/bench.json" 2>/dev/null ||
        { sed 's/^/    /' "$tmp/bench.err" >&2; die "no client result"; }
}

log "source image: $size_mib MiB of data"
python3 - "$tmp/src.img" "$size_mib" <<'EOF' || die "cannot write the image"
import os, sys
chunk = os.urandom(1 << 20)
with open(sys.argv[1], "wb") as f:
    for i in range(int(sys.argv[2])):
        f.write(chunk[i % 4096:] + chunk[:i % 4096])
EOF

for r in $(seq 1 "$reps"); do
    for kind in blkd qsd; do
        log "rep $r $kind: time"
        start "$kind"
        t=$(python3 -c "$QMP_PY" "$tmp/qmp.sock" "$copy_mode") ||
            die "$kind: the mirror failed (log: $tmp/$kind.log)"
        stop "$kind"
        echo "{\"kind\": \"$kind\", \"rep\": $r, \"what\": \"time\", \"seconds\": $t}" >> "$raw"

        log "rep $r $kind: load"
        start "$kind"
        client 600
        sleep 0.5       # the client connected and writing before the job
        t=$(python3 -c "$QMP_PY" "$tmp/qmp.sock" "$copy_mode") ||
            die "$kind: the mirror failed (log: $tmp/$kind.log)"
        kill -TERM "$BPID"; wait "$BPID"
        iops=$(client_iops)
        stop "$kind"
        echo "{\"kind\": \"$kind\", \"rep\": $r, \"what\": \"load\", \"seconds\": $t, \"iops\": $iops}" >> "$raw"

        log "rep $r $kind: base ($t s)"
        start "$kind"
        client "$(python3 -c "import math; print(max(1, math.ceil($t)))")"
        wait "$BPID"
        iops=$(client_iops)
        stop "$kind"
        echo "{\"kind\": \"$kind\", \"rep\": $r, \"what\": \"base\", \"iops\": $iops}" >> "$raw"
    done
done

python3 - "$raw" "$size_mib" "$copy_mode" > "$out/results.md" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def cell(kind, what, key):
    v = sorted(r[key] for r in rows if r["kind"] == kind and r["what"] == what)
    if not v:
        return "-"
    fmt = "%.2f" if key == "seconds" else "%.0f"
    return " / ".join(fmt % x for x in (v[0], statistics.median(v), v[-1]))
print("mirror of a %s MiB raw image, copy-mode=%s, %d repetition(s); "
      "min / median / max" % (sys.argv[2], sys.argv[3],
                               len([r for r in rows if r["what"] == "time"]) // 2))
print()
print("| | vhost-blkd | qemu-storage-daemon |")
print("|---|---|---|")
for label, what, key in (("time to READY, idle (s)", "time", "seconds"),
                         ("time to READY, client writing (s)", "load", "seconds"),
                         ("client IOPS during the mirror", "load", "iops"),
                         ("client IOPS without a mirror", "base", "iops")):
    print("| %s | %s | %s |" % (label, cell("blkd", what, key),
                                cell("qsd", what, key)))
EOF
cat "$out/results.md"
