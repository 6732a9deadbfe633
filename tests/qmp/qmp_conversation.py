#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""One QMP conversation (nodes, exports, queries, resize, statistics,
deletion, error cases) against qemu-storage-daemon or vhost-blkd, started
with the same qemu-storage-daemon command line.  Writes the normalised
transcript as JSON lines: {"step": NAME, "send": ..., "replies": [...]}.

  qmp_conversation.py --backend qsd|vhost-blkd [--binary PATH] --out FILE

Normalised: the temporary directory reads "$TMP"; event timestamps read 0.
Used by scripts/qmp-compare.sh (both back-ends, report) and by
tests/qmp/test-qmp-golden.py (vhost-blkd against the committed QSD 7.2
transcript).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20


def steps(tmp):
    img = os.path.join(tmp, "disk0.img")
    sock0 = os.path.join(tmp, "e0.sock")
    sock1 = os.path.join(tmp, "e1.sock")
    add_disk = {"execute": "blockdev-add", "arguments": {
        "driver": "file", "node-name": "disk0", "filename": img}}
    return [
        ("before-negotiation", {"execute": "query-version"}),
        ("qmp_capabilities", {"execute": "qmp_capabilities", "id": 1}),
        ("qmp_capabilities-again", {"execute": "qmp_capabilities"}),
        ("blockdev-add-file", add_disk),
        ("blockdev-add-null", {"execute": "blockdev-add", "arguments": {
            "driver": "null-co", "node-name": "null0", "size": 64 * MiB}}),
        ("block-export-add", {"execute": "block-export-add", "arguments": {
            "type": "vhost-user-blk", "id": "e0", "node-name": "disk0",
            "addr": {"type": "unix", "path": sock0}, "writable": True,
            "num-queues": 2}}),
        ("query-block-exports", {"execute": "query-block-exports"}),
        ("query-named-block-nodes", {"execute": "query-named-block-nodes"}),
        ("block_resize-grow", {"execute": "block_resize", "arguments": {
            "node-name": "disk0", "size": 128 * MiB}}),
        ("query-named-block-nodes-after-resize",
         {"execute": "query-named-block-nodes"}),
        ("query-blockstats", {"execute": "query-blockstats"}),
        ("query-blockstats-nodes", {"execute": "query-blockstats",
                                    "arguments": {"query-nodes": True}}),
        ("block-export-add-null", {"execute": "block-export-add",
                                   "arguments": {
            "type": "vhost-user-blk", "id": "e1", "node-name": "null0",
            "addr": {"type": "unix", "path": sock1}}}),
        ("block-export-del", {"execute": "block-export-del",
                              "arguments": {"id": "e1"}}),
        ("block-export-del-again", {"execute": "block-export-del",
                                    "arguments": {"id": "e1"}}),
        ("blockdev-del", {"execute": "blockdev-del",
                          "arguments": {"node-name": "null0"}}),
        # error cases
        ("unknown-command", {"execute": "no-such-command"}),
        ("blockdev-add-no-node-name", {"execute": "blockdev-add",
                                       "arguments": {"driver": "file",
                                                     "filename": img}}),
        ("blockdev-add-duplicate", add_disk),
        ("blockdev-add-bad-driver", {"execute": "blockdev-add", "arguments": {
            "driver": "no-such-driver", "node-name": "x", "filename": img}}),
        ("blockdev-add-missing-file", {"execute": "blockdev-add",
                                       "arguments": {
            "driver": "file", "node-name": "x",
            "filename": os.path.join(tmp, "missing.img")}}),
        ("blockdev-add-wrong-type", {"execute": "blockdev-add", "arguments": {
            "driver": "file", "node-name": "x", "filename": img,
            "read-only": "yes"}}),
        ("blockdev-add-unexpected", {"execute": "blockdev-add", "arguments": {
            "driver": "file", "node-name": "x", "filename": img,
            "bogus": 1}}),
        ("blockdev-del-in-use", {"execute": "blockdev-del",
                                 "arguments": {"node-name": "disk0"}}),
        ("blockdev-del-unknown", {"execute": "blockdev-del",
                                  "arguments": {"node-name": "nope"}}),
        ("block_resize-unknown", {"execute": "block_resize", "arguments": {
            "node-name": "nope", "size": MiB}}),
        ("block_resize-device", {"execute": "block_resize", "arguments": {
            "device": "dev0", "size": MiB}}),
        ("block_resize-negative", {"execute": "block_resize", "arguments": {
            "node-name": "disk0", "size": -1}}),
        ("block_resize-wrong-type", {"execute": "block_resize", "arguments": {
            "node-name": "disk0", "size": "big"}}),
        ("block_resize-missing-size", {"execute": "block_resize",
                                       "arguments": {"node-name": "disk0"}}),
        ("block-export-add-duplicate", {"execute": "block-export-add",
                                        "arguments": {
            "type": "vhost-user-blk", "id": "e0", "node-name": "disk0",
            "addr": {"type": "unix", "path": sock1}}}),
        ("block-export-add-no-addr", {"execute": "block-export-add",
                                      "arguments": {
            "type": "vhost-user-blk", "id": "e2", "node-name": "disk0"}}),
        ("block-export-add-inet", {"execute": "block-export-add",
                                   "arguments": {
            "type": "vhost-user-blk", "id": "e2", "node-name": "disk0",
            "addr": {"type": "inet", "host": "127.0.0.1", "port": "1"}}}),
        ("block-export-add-bad-type", {"execute": "block-export-add",
                                       "arguments": {
            "type": "no-such-type", "id": "e2", "node-name": "disk0"}}),
        ("block-export-add-bad-lbs", {"execute": "block-export-add",
                                      "arguments": {
            "type": "vhost-user-blk", "id": "e2", "node-name": "disk0",
            "addr": {"type": "unix", "path": sock1},
            "logical-block-size": 1000}}),
        ("block-export-add-unknown-node", {"execute": "block-export-add",
                                           "arguments": {
            "type": "vhost-user-blk", "id": "e2", "node-name": "nope",
            "addr": {"type": "unix", "path": sock1}}}),
        ("block-export-del-unknown", {"execute": "block-export-del",
                                      "arguments": {"id": "nope"}}),
        ("not-an-object", ["query-version"]),
        ("execute-not-string", {"execute": 1}),
        ("arguments-not-object", {"execute": "query-version",
                                  "arguments": [1]}),
        ("unexpected-member", {"execute": "query-version", "foo": 1}),
        ("no-execute", {"arguments": {}}),
        ("id-echo", {"execute": "query-block-exports",
                     "id": {"a": [1, "two", None]}}),
        ("malformed-json", '{"execute": }'),
        ("after-malformed", {"execute": "query-block-exports"}),
        ("block-export-del-e0", {"execute": "block-export-del",
                                 "arguments": {"id": "e0"}}),
        ("blockdev-del-disk0", {"execute": "blockdev-del",
                                "arguments": {"node-name": "disk0"}}),
        ("quit", {"execute": "quit"}),
    ]


class Qmp:
    def __init__(self, path, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.sock.settimeout(timeout)
        self.buf = b""

    def read_msg(self):
        dec = json.JSONDecoder()
        while True:
            text = self.buf.decode(errors="replace").lstrip()
            if text:
                try:
                    obj, end = dec.raw_decode(text)
                    self.buf = text[end:].encode()
                    return obj
                except ValueError:
                    pass
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("monitor closed the connection")
            self.buf += data

    def send_raw(self, text):
        self.sock.sendall(text.encode() + b"\n")

    def exchange(self, msg):
        """Send @msg (an object, or raw text); return every message up to
        and including the reply (events first)."""
        self.send_raw(msg if isinstance(msg, str) else json.dumps(msg))
        out = []
        while True:
            m = self.read_msg()
            out.append(m)
            if "return" in m or "error" in m:
                return out

    def cmd(self, name, **args):
        m = {"execute": name}
        if args:
            m["arguments"] = args
        r = [x for x in self.exchange(m) if "event" not in x][-1]
        return r


def normalise(obj, tmp):
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "timestamp" and isinstance(v, dict):
                out[k] = {"seconds": 0, "microseconds": 0}
            else:
                out[k] = normalise(v, tmp)
        return out
    if isinstance(obj, list):
        return [normalise(v, tmp) for v in obj]
    if isinstance(obj, str):
        return obj.replace(tmp, "$TMP")
    return obj


def qsd_cmdline(binary, tmp):
    img = os.path.join(tmp, "boot.img")
    return [binary,
            "--chardev", "socket,id=mon0,path=%s,server=on,wait=off" %
            os.path.join(tmp, "qmp.sock"),
            "--monitor", "chardev=mon0",
            "--blockdev", "driver=file,node-name=boot,filename=" + img,
            "--export", "type=vhost-user-blk,id=boot,node-name=boot,"
            "addr.type=unix,addr.path=%s,writable=on,num-queues=1" %
            os.path.join(tmp, "boot.sock")]


def run(backend, binary, tmp):
    for name, size in (("disk0.img", 64 * MiB), ("boot.img", 16 * MiB)):
        with open(os.path.join(tmp, name), "wb") as f:
            f.truncate(size)
    log = open(os.path.join(tmp, "daemon.log"), "w")
    proc = subprocess.Popen(qsd_cmdline(binary, tmp), stdout=log,
                            stderr=subprocess.STDOUT)
    transcript = []
    try:
        q = Qmp(os.path.join(tmp, "qmp.sock"))
        transcript.append({"step": "greeting", "send": None,
                           "replies": [normalise(q.read_msg(), tmp)]})
        # the boot export from the command line is not part of it
        for name, msg in steps(tmp):
            if name == "quit":
                q.cmd("block-export-del", id="boot")
                q.cmd("blockdev-del", **{"node-name": "boot"})
            replies = q.exchange(msg)
            transcript.append({"step": name,
                               "send": normalise(msg, tmp),
                               "replies": normalise(replies, tmp)})
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return transcript


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=("qsd", "vhost-blkd"), required=True)
    ap.add_argument("--binary")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    binary = args.binary or ("qemu-storage-daemon" if args.backend == "qsd"
                             else "vhost-blkd")
    tmp = tempfile.mkdtemp(prefix="vb-qmpconv.", dir="/var/tmp")
    try:
        t = run(args.backend, binary, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open(args.out, "w") as f:
        for entry in t:
            f.write(json.dumps(entry, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
