#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The table of scripts/bench/mirror.sh from its raw.jsonl.

Every cell is min / median / max over the repetitions; every ratio is
taken per repetition (rep r of vhost-blkd against rep r of QSD, same
TLS setting) and listed in repetition order; a goal holds only when it
holds in every repetition.

    mirror-report.py RAW.jsonl COPY_MODE [AB_BUILDDIR]

With AB_BUILDDIR (mirror.sh --ab), the second column is the vhost-blkd
of that build, not qemu-storage-daemon, and there are no goals.
"""
import json
import statistics
import sys
from collections import defaultdict


def mmm(vals, fmt="{:.0f}"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    return " / ".join(fmt.format(v) for v in
                      (min(vals), statistics.median(vals), max(vals)))


def main():
    rows = [json.loads(line) for line in open(sys.argv[1])]
    copy_mode = sys.argv[2] if len(sys.argv) > 2 else "background"
    ab = sys.argv[3] if len(sys.argv) > 3 else None
    other, short = (("vhost-blkd of %s" % ab, "B") if ab else
                    ("qemu-storage-daemon", "QSD"))
    # (tls, kind) -> rep -> row
    cell = defaultdict(dict)
    for o in rows:
        o["r"]["copy_mib_s"] = o["size_mib"] / o["r"]["copy_s"]
        cell[(o["tls"], o["kind"])][o["rep"]] = o
    if not rows:
        sys.exit("no run in %s" % sys.argv[1])
    size, rate = rows[0]["size_mib"], rows[0]["rate"]
    reps = sorted({o["rep"] for o in rows})
    tlss = [t for t in ("off", "on") if any(o["tls"] == t for o in rows)]

    def vals(tls, kind, f):
        return [f(o["r"]) for o in cell[(tls, kind)].values()]

    def ratios(tls, f):
        out = []
        for rep in reps:
            b = cell[(tls, "blkd")].get(rep)
            q = cell[(tls, "qsd")].get(rep)
            if b and q and f(q["r"]):
                out.append(f(b["r"]) / f(q["r"]))
            else:
                out.append(None)
        return out

    print("Mirror of a %d MiB raw image over NBD on 127.0.0.1, "
          "copy-mode=%s, %d repetition(s); cells min / median / max, "
          "ratios vhost-blkd / %s per repetition." % (size, copy_mode,
                                                      len(reps), short))
    print()
    print("| row | TLS | vhost-blkd | %s | blkd / %s per rep |"
          % (other, short))
    print("|---|---|---|---|---|")
    goals = []
    metrics = (
        ("(a) copy rate, idle (MiB/s)", lambda r: r["copy_mib_s"],
         "{:.0f}", ">= 1.0", 1.0),
        ("(b) client IOPS during the mirror", lambda r: r["load"]["iops"],
         "{:.0f}", ">= 1.5", 1.5),
        ("(b) client p99 during the mirror (us)",
         lambda r: r["load"]["p99_us"], "{:.0f}", None, None),
        ("(b) client IOPS without a mirror", lambda r: r["base"]["iops"],
         "{:.0f}", None, None),
        ("(b) client p99 without a mirror (us)",
         lambda r: r["base"]["p99_us"], "{:.0f}", None, None),
        ("(b) time to READY under the client (s)",
         lambda r: r["load"]["ready_s"], "{:.1f}", None, None),
        ("(c) time to READY, %d write IOPS (s)" % rate,
         lambda r: r["conv"]["ready_s"], "{:.1f}", None, None),
        ("(c) write IOPS achieved", lambda r: r["conv"]["iops"],
         "{:.0f}", None, None),
        ("(c) write p99 (us)", lambda r: r["conv"]["p99_us"],
         "{:.0f}", None, None),
    )
    for tls in tlss:
        for label, f, fmt, goal, need in metrics:
            rs = ratios(tls, lambda r: f(r) if f(r) is not None else 0)
            shown = ", ".join("-" if x is None else "%.2f" % x for x in rs)
            print("| %s | %s | %s | %s | %s |" % (
                label, tls, mmm(vals(tls, "blkd", f), fmt),
                mmm(vals(tls, "qsd", f), fmt), shown))
            if goal:
                ok = all(x is not None and x >= need for x in rs)
                goals.append("%s, TLS %s: blkd/QSD %s every repetition: %s"
                             % (label, tls, goal,
                                "holds" if ok else "MISSED"))
        for kind, name in (("blkd", "vhost-blkd"), ("qsd", short)):
            conv = [cell[(tls, kind)][rep]["r"]["conv"]["converged"]
                    if rep in cell[(tls, kind)] else False for rep in reps]
            print("| (c) converged (READY) per rep, %s | %s | %s | | |"
                  % (name, tls, ", ".join("yes" if c else "NO"
                                          for c in conv)))
            if kind == "blkd":
                goals.append("(c) vhost-blkd converges under %d write IOPS, "
                             "TLS %s, every repetition: %s"
                             % (rate, tls, "holds" if all(conv)
                                else "MISSED"))
        same = all(o["same"] for o in rows if o["tls"] == tls)
        print("| (d) target == source after the job | %s | %s | %s | |"
              % (tls, "yes" if same else "NO", "yes" if same else "NO"))
    print()
    print("(b) client: vhost-blk-bench 4k randread, depth 32, 1 queue, "
          "sleeping on its interrupt (no --halt-poll-ns), from before the "
          "job until READY.  (c) client: 4k randwrite at a fixed %d IOPS "
          "(open loop, depth up to 32)." % rate)
    print()
    if ab:
        return
    print("Goals (per repetition):")
    print()
    for g in goals:
        print("- " + g)


if __name__ == "__main__":
    main()
