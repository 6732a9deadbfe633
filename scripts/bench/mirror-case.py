#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""One case of scripts/bench/mirror.sh: a source daemon (vhost-blkd or
qemu-storage-daemon) exporting node 'src' over vhost-user and a
destination daemon of the same kind holding node 'tgt' (an empty raw
file) are running; this sets up the NBD server and export in the
destination (TLS or not), the driver=nbd node in the source, and runs:

  copy   blockdev-mirror sync=full, the export idle, until READY
  base   the client (4k randread, depth 32, sleeping) alone, as long
  load   the same client while the mirror runs, until READY
  conv   the client writing 4k at random at a fixed rate (open loop)
         while the mirror runs: READY within --conv-timeout or not

Each job is cancelled after READY with block-job-cancel (QEMU's soft
cancel: the target is left a consistent copy); the caller compares the images afterwards.
Prints one JSON object.  Uses the same QMP commands on both daemons.
"""
import argparse
import json
import math
import socket
import subprocess
import sys
import time


class Qmp:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        for _ in range(400):
            try:
                self.s.connect(path)
                break
            except OSError:
                time.sleep(0.05)
        else:
            sys.exit("cannot connect to the QMP socket %s" % path)
        self.buf = b""
        self.events = []
        self._read()
        self.call("qmp_capabilities")

    def _read(self, timeout=None):
        """One message, or None after timeout seconds (None: no limit)."""
        end = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            if end is not None:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self.s.settimeout(left)
            try:
                data = self.s.recv(65536)
            except socket.timeout:
                return None
            finally:
                self.s.settimeout(None)
            if not data:
                sys.exit("the daemon closed its QMP connection")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line) if line.strip() else self._read(timeout)

    def call(self, cmd, args=None):
        self.s.sendall((json.dumps({"execute": cmd, "arguments": args or {}})
                        + "\n").encode())
        while True:
            r = self._read()
            if "return" in r:
                return r["return"]
            if "error" in r:
                sys.exit("%s failed: %s" % (cmd, r["error"]["desc"]))
            self.events.append(r)

    def event(self, names, timeout):
        """The first event in names within timeout seconds, or None."""
        end = time.monotonic() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e.get("event") in names:
                    return self.events.pop(i)
            left = end - time.monotonic()
            if left <= 0:
                return None
            r = self._read(left)
            if r is not None:
                self.events.append(r)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src-qmp", required=True)
    ap.add_argument("--dst-qmp", required=True)
    ap.add_argument("--socket", required=True, help="vhost-user socket")
    ap.add_argument("--bench", required=True)
    ap.add_argument("--tls-dir", help="with tls-server/ and tls-client/")
    ap.add_argument("--copy-mode", default="background")
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--granularity", type=int, default=0,
                    help="blockdev-mirror granularity (0: the daemon's)")
    ap.add_argument("--buf-size", type=int, default=0,
                    help="blockdev-mirror buf-size (0: the daemon's)")
    ap.add_argument("--conv-timeout", type=float, default=60)
    ap.add_argument("--work", required=True, help="scratch file prefix")
    ap.add_argument("--legacy-addr", action="store_true",
                    help="nbd-server-start takes QEMU's SocketAddressLegacy "
                         "(type + data), as qemu-storage-daemon does")
    a = ap.parse_args()

    src = Qmp(a.src_qmp)
    dst = Qmp(a.dst_qmp)
    port = free_port()
    inet = {"host": "127.0.0.1", "port": str(port)}
    if a.legacy_addr:
        srv = {"addr": {"type": "inet", "data": inet}}
    else:
        srv = {"addr": dict(inet, type="inet")}
    node = {"driver": "nbd", "node-name": "tgt", "export": "tgt",
            "server": {"type": "inet", "host": "127.0.0.1",
                       "port": str(port)}}
    if a.tls_dir:
        dst.call("object-add", {"qom-type": "tls-creds-x509", "id": "tlss",
                                "dir": a.tls_dir + "/tls-server",
                                "endpoint": "server", "verify-peer": True})
        src.call("object-add", {"qom-type": "tls-creds-x509", "id": "tlsc",
                                "dir": a.tls_dir + "/tls-client",
                                "endpoint": "client"})
        srv["tls-creds"] = "tlss"
        node["tls-creds"] = "tlsc"
    dst.call("nbd-server-start", srv)
    dst.call("block-export-add", {"type": "nbd", "id": "nx",
                                  "node-name": "tgt", "name": "tgt",
                                  "writable": True})
    src.call("blockdev-add", node)

    def mirror_start():
        args = {"job-id": "m", "device": "src", "target": "tgt",
                "sync": "full", "copy-mode": a.copy_mode}
        if a.granularity:
            args["granularity"] = a.granularity
        if a.buf_size:
            args["buf-size"] = a.buf_size
        src.call("blockdev-mirror", args)
        return time.monotonic()

    def until_ready(t0, timeout):
        e = src.event(("BLOCK_JOB_READY", "BLOCK_JOB_COMPLETED",
                       "BLOCK_JOB_CANCELLED"), timeout)
        if e is None:
            return None
        if e["event"] != "BLOCK_JOB_READY":
            sys.exit("the mirror ended before READY: %s"
                     % e.get("data", {}).get("error", e["event"]))
        return time.monotonic() - t0

    def cancel():
        # After READY a soft cancel (block-job-cancel, not job-cancel:
        # that one stops at once) copies what is still dirty and leaves
        # the target a consistent copy of the source.
        src.call("block-job-cancel", {"device": "m"})
        e = src.event(("BLOCK_JOB_COMPLETED", "BLOCK_JOB_CANCELLED"), 300)
        if e is None:
            sys.exit("the job did not end within 300 s of job-cancel")
        if e.get("data", {}).get("error"):
            sys.exit("the job ended with an error: %s" % e["data"]["error"])

    def client(name, args, runtime):
        out = open(a.work + name + ".json", "w")
        err = open(a.work + name + ".err", "w")
        return subprocess.Popen([a.bench, "--socket", a.socket, "--bs", "4k",
                                 "--iodepth", "32", "--json", "--runtime",
                                 str(runtime)] + args, stdout=out, stderr=err)

    def result(name, p):
        p.wait()
        try:
            return json.load(open(a.work + name + ".json"))
        except ValueError:
            sys.exit("the client (%s) gave no result: %s"
                     % (name, open(a.work + name + ".err").read().strip()))

    def stopped(name, p):
        p.terminate()
        return result(name, p)

    def lat(r):
        return {"iops": r["iops"], "p99_us": r["lat_us"]["p99"]}

    out = {}
    # copy: the export idle
    t = until_ready(mirror_start(), 3600)
    cancel()
    out["copy_s"] = t

    # base: the client alone, as long as the idle copy took
    p = client("base", ["--rw", "randread"], max(2, math.ceil(t)))
    out["base"] = lat(result("base", p))

    # load: the same client from before the job until READY.  The half
    # second only lets the client connect first; its IOPS are counted
    # over its whole run either way.
    p = client("load", ["--rw", "randread"], 3600)
    time.sleep(0.5)
    t = until_ready(mirror_start(), 3600)
    out["load"] = lat(stopped("load", p))
    out["load"]["ready_s"] = t
    cancel()

    # conv: writes at a fixed rate while the mirror runs
    p = client("conv", ["--rw", "randwrite", "--rate", str(a.rate)], 3600)
    time.sleep(0.5)
    t = until_ready(mirror_start(), a.conv_timeout)
    r = stopped("conv", p)
    out["conv"] = {"converged": t is not None, "ready_s": t,
                   "iops": r["iops"], "p99_us": r["lat_us"]["p99"],
                   "depth_exhausted": r.get("rate", {}).get("depth_exhausted")}
    if t is None:
        # the writes stopped: READY now comes, and the compare still holds
        if until_ready(time.monotonic(), 600) is None:
            sys.exit("no READY even after the writes stopped")
    cancel()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
