#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Control-plane stress for test-control-stress.sh, loopback and a unix
socket only: 16 QMP clients send random valid and invalid commands and 16
clients scrape /metrics, for SECONDS (and at most a bounded number of
requests each), then all of them disconnect.

  control-stress.py QMP_SOCKET METRICS_URL SCRATCH_DIR SECONDS

The commands come from a fixed seed (client N draws from
random.Random(SEED + N)), so every run draws the same sequences; how far
each client gets in SECONDS depends on the machine.  Valid commands must
succeed (they never touch the guest's export "e" or node "f"), invalid
ones must get an error, every command gets its reply within 30 s, and
every scrape is a 200 with the export's counters.  Prints one JSON
summary line; exits 1 on any failure.
"""
import json
import random
import socket
import sys
import threading
import time
import urllib.request

SEED = 20261206
QMP_CLIENTS = 16
SCRAPERS = 16
MAX_OPS = 20000         # per client: bounded whatever the machine
REPLY_TIMEOUT = 30


class Closed(Exception):
    pass


class Qmp:
    def __init__(self, path):
        deadline = time.monotonic() + REPLY_TIMEOUT
        while True:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(REPLY_TIMEOUT)
            self.buf = b""
            try:
                # A full backlog is EAGAIN: the main thread is busy.
                self.sock.connect(path)
                greeting = self.read()
            except (BlockingIOError, Closed) as e:
                greeting = {"refused": repr(e)}
            if "QMP" in greeting:
                break
            # Refused (the 16 slots not yet freed by a hang-up): retry.
            self.sock.close()
            if time.monotonic() > deadline:
                raise Closed("refused for 30 s: %s" % greeting)
            time.sleep(0.05)
        self.send({"execute": "qmp_capabilities"})
        if "return" not in self.reply():
            raise Closed("qmp_capabilities failed")

    def close(self):
        self.sock.close()

    def send_raw(self, data):
        self.sock.sendall(data)

    def send(self, obj):
        self.send_raw(json.dumps(obj).encode() + b"\n")

    def read(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Closed("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def reply(self):
        """The next message that is not an event."""
        while True:
            m = self.read()
            if "event" not in m:
                return m


def lifecycle_export(c, n, scratch):
    node, exp = "sn%d" % n, "sx%d" % n
    return [
        ({"execute": "blockdev-add", "arguments": {
            "driver": "null-co", "node-name": node, "size": 16 << 20}}, True),
        ({"execute": "block-export-add", "arguments": {
            "type": "vhost-user-blk", "id": exp, "node-name": node,
            "addr": {"type": "unix", "path": "%s/s%d.sock" % (scratch, n)}}},
         True),
        ({"execute": "query-block-exports"}, True),
        ({"execute": "block-export-del", "arguments": {"id": exp}}, True),
        ({"execute": "blockdev-del", "arguments": {"node-name": node}}, True),
    ]


def lifecycle_iothread(c, n, scratch):
    t = "st%d" % n
    return [
        ({"execute": "object-add", "arguments": {
            "qom-type": "iothread", "id": t}}, True),
        ({"execute": "query-iothreads"}, True),
        ({"execute": "object-del", "arguments": {"id": t}}, True),
    ]


def simple(cmd, ok):
    return lambda c, n, scratch: [(cmd, ok)]


# (weight, generator of [(command or raw bytes, expect success)])
CHOICES = [
    (4, simple({"execute": "query-version"}, True)),
    (2, simple({"execute": "query-commands"}, True)),
    (4, simple({"execute": "query-block-exports"}, True)),
    (4, simple({"execute": "query-named-block-nodes"}, True)),
    (3, simple({"execute": "query-iothreads"}, True)),
    (4, simple({"execute": "query-blockstats"}, True)),
    (3, simple({"execute": "x-query-vhost-blk-stats"}, True)),
    (2, simple({"execute": "block-latency-histogram-set", "arguments": {
        "id": "e", "boundaries": [10000, 1000000]}}, True)),
    (3, lifecycle_export),
    (2, lifecycle_iothread),
    # invalid: each must get an error, and change nothing
    (3, simple({"execute": "no-such-command"}, False)),
    (2, simple({"execute": "blockdev-del", "arguments": {
        "node-name": "f"}}, False)),                    # in use
    (2, simple({"execute": "block-export-del", "arguments": {
        "id": "nope"}}, False)),
    (2, simple({"execute": "block_resize", "arguments": {
        "node-name": "f", "size": -1}}, False)),
    (2, simple({"execute": "block_resize", "arguments": {
        "node-name": "nope", "size": 1 << 20}}, False)),
    (2, simple({"execute": "blockdev-add", "arguments": {
        "driver": "file", "filename": "/nonexistent/x.img",
        "node-name": "bad"}}, False)),
    (2, simple({"execute": "blockdev-add", "arguments": {
        "driver": "null-co"}}, False)),                 # no node-name
    (2, simple({"execute": "object-add", "arguments": {
        "qom-type": "secret", "id": "s", "data": "KEY"}}, False)),
    (2, simple({"execute": "qom-get", "arguments": {
        "path": "/objects/nope", "property": "x"}}, False)),
    (2, simple({"execute": 1}, False)),
    (2, simple({"execute": "query-version", "arguments": [1]}, False)),
    (2, simple({"execute": "query-version", "arguments": {"x": 1}}, False)),
    (2, simple(["query-version"], False)),
    (2, simple({"execute": "blockdev-del", "arguments": {
        "node-name": "n" * 65536}}, False)),
    (2, simple({"execute": "getfd", "arguments": {"fdname": "x"}}, False)),
    (2, simple(b"}}} not json\n", False)),
    (2, simple(b"[" * 2000 + b"\n", False)),            # too deep
    (2, simple(b'{"execute": "query-version\xff\xfe"}\n', False)),
    (2, simple(b'{"execute": "query-version", "id": 1, "id": 2\n}\n', None)),
]


def qmp_client(n, path, scratch, deadline, out):
    rnd = random.Random(SEED + n)
    weights = [w for w, _ in CHOICES]
    stats = {"ok": 0, "error": 0, "failures": []}
    q = None
    seq = 0
    try:
        q = Qmp(path)
        for _ in range(MAX_OPS):
            if time.monotonic() >= deadline:
                break
            gen = rnd.choices(CHOICES, weights)[0][1]
            seq += 1
            for cmd, want in gen(q, n * 1000000 + seq, scratch):
                if isinstance(cmd, bytes):
                    q.send_raw(cmd)
                else:
                    q.send(cmd)
                r = q.reply()
                got = "return" in r
                if want is not None and got != want:
                    stats["failures"].append({"sent": repr(cmd)[:200],
                                              "reply": repr(r)[:300]})
                stats["ok" if got else "error"] += 1
    except (Closed, OSError, ValueError) as e:
        stats["failures"].append({"exception": repr(e)[:300]})
    finally:
        if q:
            q.close()
        out[n] = stats


def scraper(n, url, deadline, out):
    stats = {"ok": 0, "failures": []}
    for _ in range(MAX_OPS):
        if time.monotonic() >= deadline:
            break
        try:
            with urllib.request.urlopen(url, timeout=REPLY_TIMEOUT) as r:
                body = r.read().decode()
                if r.status != 200 or \
                        'vhost_blk_requests_total{export="e"' not in body:
                    stats["failures"].append("status %d, %d bytes" %
                                             (r.status, len(body)))
                else:
                    stats["ok"] += 1
        except Exception as e:     # noqa: BLE001 - any failure counts
            stats["failures"].append(repr(e)[:300])
    out[n] = stats


def main():
    path, url, scratch, seconds = sys.argv[1:5]
    deadline = time.monotonic() + float(seconds)
    qout, sout = {}, {}
    threads = [threading.Thread(target=qmp_client,
                                args=(n, path, scratch, deadline, qout))
               for n in range(QMP_CLIENTS)]
    threads += [threading.Thread(target=scraper,
                                 args=(n, url, deadline, sout))
                for n in range(SCRAPERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failures = [f for s in list(qout.values()) + list(sout.values())
                for f in s["failures"]]
    summary = {
        "qmp_clients": len(qout), "scrapers": len(sout),
        "qmp_ok": sum(s["ok"] for s in qout.values()),
        "qmp_error": sum(s["error"] for s in qout.values()),
        "scrapes": sum(s["ok"] for s in sout.values()),
        "failures": len(failures), "first_failures": failures[:10],
    }
    print(json.dumps(summary))
    sys.exit(0 if not failures and len(qout) == QMP_CLIENTS and
             len(sout) == SCRAPERS else 1)


if __name__ == "__main__":
    main()
