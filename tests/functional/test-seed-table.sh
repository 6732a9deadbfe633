#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# scripts/bench/seed-table.sh end to end, small: a 64 MiB RAM disk, numjobs
# 1 and 2, 2 s per run, one repetition, 2 vCPUs (on a host without a usable
# KVM, as this project's machines, the script falls back to TCG by itself:
# that fallback is part of what is checked).  Checks the output's shape, not
# its figures: the KVM verdict is stated (and the TCG warning given when it
# fell back), the JSON parses, every setup is a column that was measured (a
# positive IOPS and host CPU per I/O for jobs 1 and 2, its ratio to bare
# metal equal to its IOPS over bare metal's) or skipped with a reason, the
# markdown table has a row per numjobs and a column per setup, each setup
# has its summary line, and the plot was drawn.  50 to 95 s under TCG on 2
# shared CPUs at a load average of 5 to 15 (three guest boots, 2 s of fio at
# each numjobs).
set -u
. "$(dirname "$0")/lib.sh"
vb_setup

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
out=$VB_TMP/seed
vb_check "seed-table.sh runs every setup (or skips it with a reason) and succeeds" \
    "$VB_ROOT/scripts/bench/seed-table.sh" --ram 64M --jobs 1-2 --runtime 2 --repeat 1 \
    --vcpus 2 --vhost-blkd "$blkd" --assets "$VHOST_BLK_GUEST_ASSETS" -o "$out"

# check_json: prints one "ok|not ok NAME" line per check.
check_json() {
    python3 - "$out/seed-table.json" <<'EOF'
import json, sys
def say(ok, name):
    print(("ok " if ok else "not ok ") + name)
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    say(False, f"seed-table.json parses ({e})")
    sys.exit(0)
say(True, "seed-table.json parses")
say(d.get("accel") in ("kvm", "tcg"), f"the accelerator is stated ({d.get('accel')})")
say(d.get("accel") == "kvm" or (d.get("emulator_bound") is True and d.get("kvm_unavailable")),
    "under TCG the JSON says the figures are emulator-bound and why KVM was not used")
g = d.get("guest", {}).get("os") or {}
say(g.get("kind") == "test-initramfs",
    f"the guest is recorded: the test kernel and initramfs ({g.get('kind')})")
want = ["bare", "virtio-blk", "qsd", "vhost-blkd", "vhost_blk"]
got = [s.get("id") for s in d.get("setups", [])]
say(got == want, f"every setup is a column, in order ({got})")
rows = {r["jobs"]: r for r in d.get("rows", [])}
say(sorted(rows) == [1, 2], f"a row per numjobs 1 and 2 ({sorted(rows)})")
for s in d.get("setups", []):
    sid, st = s.get("id"), s.get("status")
    if st == "skipped":
        say(bool(s.get("reason")), f"{sid}: skipped with a reason ({s.get('reason')})")
        continue
    say(st == "measured", f"{sid}: measured ({st}: {s.get('reason')})")
    for n in (1, 2):
        c = rows.get(n, {}).get("setups", {}).get(sid, {})
        b = rows.get(n, {}).get("setups", {}).get("bare", {})
        iops, cpu = c.get("iops_median"), c.get("cpu_us_per_io_median")
        say(bool(iops and iops > 0 and cpu and cpu > 0),
            f"{sid}, numjobs {n}: IOPS {iops} and host CPU per I/O {cpu} us are positive")
        if sid != "bare":
            r = c.get("ratio_to_bare")
            exp = iops / b["iops_median"] if iops and b.get("iops_median") else None
            say(r is not None and exp is not None and abs(r - exp) < 0.001 * max(exp, 1),
                f"{sid}, numjobs {n}: ratio to bare metal {r} = its IOPS / bare metal's")
say(d.get("seed_2018", {}).get("iops", {}).get("bare") == 1480000,
    "the seed's own figures are carried for reference")
EOF
}
results=$(check_json) || vb_not_ok "json: the checks ran to the end"
while read -r verdict rest; do
    case $verdict in
        ok) vb_ok "json: ${rest}" ;;
        not) vb_not_ok "json: ${rest#ok }" ;;
    esac
done <<< "$results"

md=$out/seed-table.md
vb_check "seed-table.md exists" test -s "$md"
accel=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["accel"])' \
    "$out/seed-table.json" 2>/dev/null)
if [ "$accel" = tcg ]; then
    vb_check "the table says TCG figures are bound by the emulator" \
        grep -q "bound by the emulator" "$md"
fi
header=$(grep -m1 '^| jobs |' "$md")
vb_check_eq "the IOPS table has a column per setup" "$header" \
    "| jobs | bare metal | QEMU virtio-blk | qsd vhost-user-blk | vhost-blkd | kernel vhost_blk |"
vb_check "the IOPS table has a row for 1 and for 2 jobs" \
    grep -qE '^\| 2 \| [0-9.]+[kM]? \|' "$md"
for name in "bare metal" "QEMU virtio-blk" "qsd vhost-user-blk" "vhost-blkd" "kernel vhost_blk"; do
    vb_check "summary line for $name (peak and CPU, or why skipped)" \
        grep -qE "^- $name: (peak [0-9.]+[kM]? IOPS .*host CPU per I/O [0-9.]+ us|skipped: .+)" "$md"
done
if command -v gnuplot >/dev/null; then
    vb_check "the plot is a PNG" sh -c "head -c 8 '$out/seed-table.png' | grep -q PNG"
fi
vb_done
