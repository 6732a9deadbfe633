#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The block-job sequence of tests/functional/test-jobs-guest.sh, on one
QMP connection to vhost-blkd (so that it sees the jobs' events), while a
guest writes the exported disk:

  blockdev-snapshot-sync BASE -> ov1, blockdev-snapshot-sync ov1 -> ov2,
  block-stream of ov2 with base-node=BASE, blockdev-del ov1,
  active block-commit of ov2 into BASE, job-complete once ready,
  blockdev-del ov2.

After each step it checks the chain with query-named-block-nodes and,
on the image files no longer written, qemu-img info --backing-chain and
qemu-img check (with -U: the daemon still has them or their backing file
open), then waits until the guest has written through the new top (the
export's write count grows by --writes).  Every check prints "PASS:
what" or "FAIL: what: why"; a failed step ends the sequence (exit 1).
Waits are on events and states, each bounded by --timeout.

  jobs-guest.py --qmp SOCK --dir DIR --node NAME --export ID
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "qmp"))
from qmp_conversation import Qmp  # noqa: E402


class Failed(Exception):
    pass


class Seq:
    def __init__(self, args):
        self.a = args
        self.q = Qmp(args.qmp, timeout=args.timeout)
        self.q.read_msg()
        self.events = []
        self.cmd("qmp_capabilities")

    def check(self, what, ok, why=""):
        if ok:
            print("PASS: " + what, flush=True)
        else:
            print("FAIL: %s: %s" % (what, why), flush=True)
            raise Failed()

    def cmd(self, name, **args):
        """Run @name; keep the events that came first; raise on error."""
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        out = self.q.exchange(msg)
        self.events += [m for m in out if "event" in m]
        r = out[-1]
        if "error" in r:
            raise Failed("%s %s: %s" % (name, json.dumps(args),
                                        r["error"].get("desc")))
        return r["return"]

    def wait_event(self, name, job):
        """Return event @name of job @job (its data), seen before or now;
        BLOCK_JOB_ERROR or a BLOCK_JOB_COMPLETED with an error for the job
        while waiting for something else ends the sequence."""
        deadline = time.monotonic() + self.a.timeout
        while True:
            for i, e in enumerate(self.events):
                d = e.get("data", {})
                if d.get("device", d.get("id")) != job:
                    continue
                if e["event"] == name:
                    del self.events[i]
                    return d
                if e["event"] == "BLOCK_JOB_ERROR" or (
                        e["event"] == "BLOCK_JOB_COMPLETED" and
                        "error" in d):
                    raise Failed("job %s: %s" % (job, json.dumps(e)))
            if time.monotonic() > deadline:
                raise Failed("no %s for job %s in %d s" %
                             (name, job, self.a.timeout))
            self.q.sock.settimeout(max(1, deadline - time.monotonic()))
            self.events.append(self.q.read_msg())

    def writes(self):
        for s in self.cmd("query-blockstats"):
            if self.a.export in (s.get("qdev"), s.get("device"),
                                 s.get("node-name")):
                return s["stats"]["wr_operations"]
        raise Failed("query-blockstats has no entry for export %s" %
                     self.a.export)

    def wait_writes(self, what):
        """Wait until the guest wrote --writes more requests (polling the
        counter: it is a state, not a guess of how long that takes)."""
        start = self.writes()
        deadline = time.monotonic() + self.a.timeout
        while self.writes() < start + self.a.writes:
            if time.monotonic() > deadline:
                raise Failed("the guest wrote fewer than %d requests in "
                             "%d s %s" % (self.a.writes, self.a.timeout,
                                          what))
            time.sleep(0.2)
        self.check("the guest wrote %d+ requests %s" % (self.a.writes, what),
                   True)

    def nodes(self):
        return {n["node-name"]: n for n in
                self.cmd("query-named-block-nodes")}

    def chain(self, node):
        """[file of @node, file of its backing image, ...] and its depth"""
        n = self.nodes().get(node)
        if n is None:
            raise Failed("query-named-block-nodes has no node %s" % node)
        files = []
        img = n["image"]
        while img:
            files.append(os.path.basename(img["filename"]))
            img = img.get("backing-image")
        return files, n["backing_file_depth"]

    def check_chain(self, what, node, want):
        files, depth = self.chain(node)
        self.check("%s: chain of %s is %s (depth %d)" %
                   (what, node, " -> ".join(want), len(want) - 1),
                   files == want and depth == len(want) - 1,
                   "got %s, depth %d" % (" -> ".join(files), depth))

    def img_check(self, what, name):
        """qemu-img check -U of image file @name (no longer written, but
        it or its backing file still open in the daemon, hence no lock
        taken): clean."""
        r = subprocess.run(["qemu-img", "check", "-U",
                            os.path.join(self.a.dir, name)],
                           capture_output=True, text=True)
        self.check("%s: qemu-img check -U %s is clean" % (what, name),
                   r.returncode == 0,
                   (r.stdout + r.stderr).strip().replace("\n", " | "))

    def img_chain(self, what, name, want):
        """qemu-img info -U --backing-chain of @name lists @want"""
        r = subprocess.run(["qemu-img", "info", "-U", "--backing-chain",
                            "--output=json",
                            os.path.join(self.a.dir, name)],
                           capture_output=True, text=True)
        got = []
        if r.returncode == 0:
            got = [os.path.basename(i["filename"])
                   for i in json.loads(r.stdout)]
        self.check("%s: qemu-img info --backing-chain %s: %s" %
                   (what, name, " -> ".join(want)), got == want,
                   "got %s %s" % (" -> ".join(got), r.stderr.strip()))

    def export_node(self):
        for e in self.cmd("query-block-exports"):
            if e["id"] == self.a.export:
                return e["node-name"]
        raise Failed("no export %s" % self.a.export)

    def run(self):
        a = self.a
        base = a.node
        bfile = os.path.basename(self.chain(base)[0][0])
        self.check_chain("start", base, [bfile])
        ov = []
        for i in (1, 2):
            below = base if i == 1 else "ov1"
            f = os.path.join(a.dir, "overlay%d.qcow2" % i)
            self.cmd("blockdev-snapshot-sync", **{
                "node-name": below, "snapshot-file": f,
                "snapshot-node-name": "ov%d" % i, "format": "qcow2"})
            ov.insert(0, os.path.basename(f))
            self.check("blockdev-snapshot-sync %s -> ov%d: the export "
                       "serves ov%d" % (below, i, i),
                       self.export_node() == "ov%d" % i,
                       "it serves %s" % self.export_node())
            self.check_chain("snapshot %d" % i, "ov%d" % i, ov + [bfile])
            self.img_chain("snapshot %d" % i, ov[0], ov + [bfile])
            # The image below the new overlay is frozen and flushed.
            self.img_check("snapshot %d" % i, (ov + [bfile])[1])
            self.wait_writes("into overlay%d" % i)

        self.cmd("block-stream", **{"job-id": "s0", "device": "ov2",
                                    "base-node": base})
        d = self.wait_event("BLOCK_JOB_COMPLETED", "s0")
        self.check("block-stream ov2 (base-node %s): BLOCK_JOB_COMPLETED, "
                   "no error, offset = len" % base,
                   "error" not in d and d.get("offset") == d.get("len"),
                   json.dumps(d))
        self.check_chain("after stream", "ov2", ["overlay2.qcow2", bfile])
        self.cmd("blockdev-del", **{"node-name": "ov1"})
        self.check("blockdev-del ov1: no longer used once streamed",
                   "ov1" not in self.nodes())
        self.img_check("after stream", "overlay1.qcow2")
        self.img_chain("after stream", "overlay2.qcow2",
                       ["overlay2.qcow2", bfile])
        self.wait_writes("after the stream")

        self.cmd("block-commit", **{"job-id": "c0", "device": "ov2",
                                    "base-node": base})
        d = self.wait_event("BLOCK_JOB_READY", "c0")
        self.check("active block-commit ov2 -> %s: BLOCK_JOB_READY" % base,
                   d.get("type") == "commit", json.dumps(d))
        # The guest writes on while the job mirrors its writes into the base.
        self.wait_writes("while the commit is ready")
        self.cmd("job-complete", id="c0")
        d = self.wait_event("BLOCK_JOB_COMPLETED", "c0")
        self.check("job-complete: BLOCK_JOB_COMPLETED, no error",
                   "error" not in d, json.dumps(d))
        self.check("the export serves the base again",
                   self.export_node() == base,
                   "it serves %s" % self.export_node())
        self.cmd("blockdev-del", **{"node-name": "ov2"})
        self.check_chain("after commit", base, [bfile])
        self.img_check("after commit", "overlay2.qcow2")
        self.img_chain("after commit", bfile, [bfile])
        left = sorted(n for n in self.nodes() if n.startswith("ov"))
        self.check("no overlay node is left", not left, " ".join(left))
        self.wait_writes("into the base after the commit")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--qmp", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--node", required=True, help="the exported base node")
    p.add_argument("--export", required=True, help="the export's id")
    p.add_argument("--writes", type=int, default=256)
    p.add_argument("--timeout", type=int, default=300)
    a = p.parse_args()
    try:
        Seq(a).run()
    except Failed as e:
        if e.args:
            print("FAIL: %s" % e.args[0], flush=True)
        return 1
    except (OSError, EOFError, ValueError, KeyError) as e:
        print("FAIL: QMP: %r" % e, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
