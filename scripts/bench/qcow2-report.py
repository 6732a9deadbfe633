#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The tables of scripts/bench/qcow2.sh from its raw.jsonl.

Every cell is min / median / max over the repetitions; every ratio is
taken per repetition (rep r of one case against rep r of the other) and
shown as min / median / max; a goal holds only when every repetition
holds.  QSD's figure per repetition is the better of its two engines.
The steady table's raw2/raw column is the A/A control: a second
vhost-blkd raw on the same image, so its spread is what the machine's
noise alone does to a ratio; a missed goal gets that cell's A/A spread
(IOPS, or CPU per I/O for the CPU goal) next to it.

    qcow2-report.py RAW.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def mmm(vals, fmt="{:.0f}"):
    if not vals:
        return "-"
    return " / ".join(fmt.format(v) for v in
                      (min(vals), statistics.median(vals), max(vals)))


def main():
    runs, checks, cg, meta = [], [], [], {}
    for line in open(sys.argv[1]):
        o = json.loads(line)
        if o["kind"] == "run":
            runs.append(o)
        elif o["kind"] == "check":
            checks.append(o)
        elif o["kind"] == "callgrind":
            cg.append(o)
        else:
            meta.update(o)

    # (group, rw, bs, depth, queues, mode) -> case -> rep -> run
    cells = defaultdict(lambda: defaultdict(dict))
    for o in runs:
        key = (o["group"], o["rw"], o["bs"], o["depth"], o["queues"],
               o["mode"])
        cells[key][o["case"]][o["rep"]] = o["r"]

    def iops(c, rep):
        return c[rep]["iops"] if rep in c else None

    def cpu(c, rep):
        b = c[rep].get("backend_cpu") if rep in c else None
        return b["us_per_io"] if b else None

    def qsd_best(cases, rep):
        best = None
        for name in ("qsd-io_uring", "qsd-native"):
            if rep in cases.get(name, {}):
                r = cases[name][rep]
                if best is None or r["iops"] > best["iops"]:
                    best = r
        return best

    print("# qcow2 against raw and qemu-storage-daemon")
    print()
    print("Run %s to %s, %s s per run, %s repetition(s), %s MiB images, "
          "host %s CPUs, kernel %s, %s." % (
              meta.get("started", "?"), meta.get("ended", "?"),
              meta.get("runtime"), meta.get("reps"), meta.get("size_mib"),
              meta.get("host_cpus"), meta.get("kernel"), meta.get("qsd")))
    print()
    goals = []
    steady = [k for k in cells if k[0] not in ("alloc", "sparse")]
    if steady:
        print("## Steady state: fully allocated image, 4k")
        print()
        print("IOPS min / median / max; ratios per repetition; CPU = the "
              "daemon's CPU time per I/O (us, median).")
        print()
        print("| storage | rw | depth | queues | client | raw IOPS | "
              "qcow2 IOPS | QSD qcow2 IOPS (best engine) | qcow2/raw | "
              "raw2/raw (A/A) | qcow2/QSD | CPU raw / qcow2 / QSD | "
              "qcow2 CPU / QSD CPU |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        aa_all, aa_cpu_all = [], []
        for k in sorted(steady):
            g, rw, bs, d, q, mode = k
            cs = cells[k]
            reps = sorted(set(cs.get("blkd-qcow2", {})))
            raw_i = [iops(cs["blkd-raw"], r) for r in reps
                     if r in cs.get("blkd-raw", {})]
            q_i = [iops(cs["blkd-qcow2"], r) for r in reps]
            qsd = [qsd_best(cs, r) for r in reps]
            qsd_i = [x["iops"] for x in qsd if x]
            r_raw = [iops(cs["blkd-qcow2"], r) / iops(cs["blkd-raw"], r)
                     for r in reps if r in cs.get("blkd-raw", {})
                     and iops(cs["blkd-raw"], r)]
            # A/A: rep r of raw2 against rep r of raw, IOPS and CPU
            both = [r for r in sorted(cs.get("blkd-raw2", {}))
                    if r in cs.get("blkd-raw", {})]
            aa = [iops(cs["blkd-raw2"], r) / iops(cs["blkd-raw"], r)
                  for r in both if iops(cs["blkd-raw"], r)]
            aa_cpu = [cpu(cs["blkd-raw2"], r) / cpu(cs["blkd-raw"], r)
                      for r in both if cpu(cs["blkd-raw"], r)
                      and cpu(cs["blkd-raw2"], r) is not None]
            aa_all += aa
            aa_cpu_all += aa_cpu

            def spread(v):
                if not v:
                    return None
                return "%.2f-%.2f" % (min(v), max(v))

            r_qsd = [iops(cs["blkd-qcow2"], r) / x["iops"]
                     for r, x in zip(reps, qsd) if x and x["iops"]]
            cpu_raw = [cpu(cs["blkd-raw"], r) for r in reps
                       if r in cs.get("blkd-raw", {})]
            cpu_q = [cpu(cs["blkd-qcow2"], r) for r in reps]
            cpu_qsd = [x["backend_cpu"]["us_per_io"] for x in qsd
                       if x and x.get("backend_cpu")]
            r_cpu = [cpu(cs["blkd-qcow2"], r) / x["backend_cpu"]["us_per_io"]
                     for r, x in zip(reps, qsd)
                     if x and x.get("backend_cpu")
                     and x["backend_cpu"]["us_per_io"]
                     and cpu(cs["blkd-qcow2"], r) is not None]

            def med(v):
                v = [x for x in v if x is not None]
                return "%.1f" % statistics.median(v) if v else "-"

            print("| %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | "
                  "%s / %s / %s | %s |" % (
                      g, rw, d, q, mode, mmm(raw_i), mmm(q_i), mmm(qsd_i),
                      mmm(r_raw, "{:.2f}"), mmm(aa, "{:.2f}"),
                      mmm(r_qsd, "{:.2f}"),
                      med(cpu_raw), med(cpu_q), med(cpu_qsd),
                      mmm(r_cpu, "{:.2f}")))
            if r_raw:
                goals.append(("qcow2 >= 0.95x raw IOPS: %s %s depth %d "
                              "queues %d %s" % (g, rw, d, q, mode),
                              min(r_raw) >= 0.95, min(r_raw), spread(aa)))
            if g == "shm" and d == 32 and r_qsd:
                goals.append(("qcow2 >= 1.5x QSD IOPS: shm %s depth 32 "
                              "queues %d %s" % (rw, q, mode),
                              min(r_qsd) >= 1.5, min(r_qsd), spread(aa)))
                if r_cpu:
                    goals.append(("qcow2 CPU/IO <= 0.5x QSD's: shm %s "
                                  "depth 32 queues %d %s" % (rw, q, mode),
                                  max(r_cpu) <= 0.5, max(r_cpu),
                                  spread(aa_cpu)))
        print()
        if aa_all:
            print("A/A control (a second vhost-blkd raw on the same image, "
                  "every repetition of every cell): raw2/raw IOPS %.2f to "
                  "%.2f, CPU per I/O %s." % (
                      min(aa_all), max(aa_all),
                      "%.2f to %.2f" % (min(aa_cpu_all), max(aa_cpu_all))
                      if aa_cpu_all else "-"))
            print()
        waits = sorted(o["cpu_wait"] for o in runs
                       if o["group"] not in ("alloc", "sparse")
                       and "cpu_wait" in o)
        if waits:
            # PSI: the share of each run during which some task waited
            # for a CPU; the run's own threads add to it where they
            # outnumber their CPUs (2-queue cells), the host's load always
            print("CPU pressure during the runs (cpu_wait, the share of a "
                  "run some task waited for a CPU; the other processes' "
                  "load shows here): median %.2f, max %.2f." % (
                      statistics.median(waits), waits[-1]))
            print()

    alloc = [k for k in cells if k[0] == "alloc"]
    if alloc:
        print("## Allocating writes: empty image, depth 32, 1 queue")
        print()
        print("| rw | bs | vhost-blkd qcow2 IOPS | QSD qcow2 IOPS | "
              "ratio per rep | qemu-img check (corruptions, leaks) |")
        print("|---|---|---|---|---|---|")
        for k in sorted(alloc):
            cs = cells[k]
            reps = sorted(set(cs.get("blkd-qcow2", {})) &
                          set(cs.get("qsd-qcow2", {})))
            a = [cs["blkd-qcow2"][r]["iops"] for r in reps]
            b = [cs["qsd-qcow2"][r]["iops"] for r in reps]
            ratio = [x / y for x, y in zip(a, b) if y]
            ck = ["%s:%s/%s" % (c["case"].split("-")[0], c["corruptions"],
                                c["leaks"])
                  for c in checks if c["rw"] == k[1]]
            print("| %s | %s | %s | %s | %s | %s |" % (
                k[1], k[2], mmm(a), mmm(b), mmm(ratio, "{:.2f}"),
                " ".join(ck)))
            if ratio:
                goals.append(("allocating %s %s >= 1.0x QSD" % (k[1], k[2]),
                              min(ratio) >= 1.0, min(ratio)))
        clean = all(c["corruptions"] == "0" for c in checks
                    if c["case"] == "blkd-qcow2")
        goals.append(("qemu-img check: no corruption after vhost-blkd's "
                      "allocating runs", clean, None))
        print()

    sparse = [k for k in cells if k[0] == "sparse"]
    if sparse:
        print("## 1 TiB sparse image, 4k randread depth 32, l2-cache-size=8M")
        print()
        print("| client | vhost-blkd IOPS | QSD IOPS | ratio per rep | "
              "vhost-blkd RSS MiB | QSD RSS MiB |")
        print("|---|---|---|---|---|---|")
        for k in sorted(sparse):
            cs = cells[k]
            reps = sorted(set(cs.get("blkd-qcow2", {})) &
                          set(cs.get("qsd-qcow2", {})))
            a = [cs["blkd-qcow2"][r]["iops"] for r in reps]
            b = [cs["qsd-qcow2"][r]["iops"] for r in reps]
            ratio = [x / y for x, y in zip(a, b) if y]
            rss = defaultdict(list)
            for o in runs:
                if o["group"] == "sparse" and o["mode"] == k[5]:
                    rss[o["case"]].append(o["rss_kb"] / 1024)
            print("| %s | %s | %s | %s | %s | %s |" % (
                k[5], mmm(a), mmm(b), mmm(ratio, "{:.2f}"),
                mmm(rss["blkd-qcow2"]), mmm(rss["qsd-qcow2"])))
            if ratio:
                goals.append(("sparse 1 TiB randread >= QSD (%s)" % k[5],
                              min(ratio) >= 1.0, min(ratio)))
            if rss["blkd-qcow2"] and rss["qsd-qcow2"]:
                goals.append(("sparse RSS <= QSD's (%s)" % k[5],
                              max(rss["blkd-qcow2"]) <=
                              min(rss["qsd-qcow2"]), None))
        print()

    if cg:
        # (build, depth) -> case -> [runs in repetition order]; runs of an
        # older raw.jsonl have neither: "this", depth 32.
        rows = defaultdict(lambda: defaultdict(list))
        for o in cg:
            rows[(o.get("build", "this"), o.get("depth", 32))][
                o["case"]].append(o)
        print("## Instructions per I/O (callgrind, 4k randread)")
        print()
        print("| build | depth | raw Ir/IO | qcow2 Ir/IO | qcow2 / raw | "
              "qcow2 - raw | qcow2.c own Ir/IO |")
        print("|---|---|---|---|---|---|---|")
        ratios = {}
        for (bld, d) in sorted(rows):
            raws = rows[(bld, d)].get("blkd-raw", [])
            qcs = rows[(bld, d)].get("blkd-qcow2", [])
            r = [b["ir_per_io"] / a["ir_per_io"] for a, b in zip(raws, qcs)]
            ratios[(bld, d)] = r
            print("| %s | %d | %s | %s | %s | %s | %s |" %
                  (bld, d, mmm([o["ir_per_io"] for o in raws]),
                   mmm([o["ir_per_io"] for o in qcs]), mmm(r, "{:.3f}"),
                   mmm([b["ir_per_io"] - a["ir_per_io"]
                        for a, b in zip(raws, qcs)]),
                   mmm([o.get("own_ir_per_io", 0) for o in qcs])))
        # Per repetition: what batching each run had (event loop
        # iterations per 1000 I/Os) and the format's own share.
        print()
        print("| build | depth | rep | raw Ir/IO | qcow2 Ir/IO | qcow2 / raw | "
              "raw loops/kIO | qcow2 loops/kIO | qcow2.c own Ir/IO |")
        print("|---|---|---|---|---|---|---|---|---|")
        for (bld, d) in sorted(rows):
            raws = rows[(bld, d)].get("blkd-raw", [])
            qcs = rows[(bld, d)].get("blkd-qcow2", [])
            for i, (a, b) in enumerate(zip(raws, qcs)):
                print("| %s | %d | %d | %d | %d | %.3f | %s | %s | %s |" %
                      (bld, d, i + 1, a["ir_per_io"], b["ir_per_io"],
                       b["ir_per_io"] / a["ir_per_io"],
                       a.get("loops_per_kio", "-"),
                       b.get("loops_per_kio", "-"),
                       b.get("own_ir_per_io", "-")))
        for (bld, d), r in sorted(ratios.items()):
            if bld == "this" and r:
                goals.append(("qcow2 <= 1.1x raw instructions per I/O "
                              "(depth %d)" % d, max(r) <= 1.1, max(r)))
        print()

    if goals:
        print("## Goals (every repetition)")
        print()
        print("| goal | held | worst repetition |")
        print("|---|---|---|")
        for g in goals:
            name, ok, worst = g[:3]
            print("| %s | %s | %s |" % (name, "yes" if ok else "**no**",
                                        "-" if worst is None else
                                        "%.2f" % worst))
        missed = [g for g in goals if not g[1] and len(g) > 3 and g[3]]
        if missed:
            print()
            for g in missed:
                print("- %s: A/A spread in this cell: %s" % (g[0], g[3]))


if __name__ == "__main__":
    main()
