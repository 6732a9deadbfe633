#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""What an operator sees of vhost-blkd's NBD exports.  TAP.

- the counters: after qemu-io's 3 writes of 64 KiB and 2 reads of 4 KiB,
  query-blockstats (per export and per node) moved by exactly that, as
  did x-query-vhost-blk-stats' nbd-exports and the Prometheus page
  (vhost_blk_requests_total / vhost_blk_bytes_total); a refused request
  counts as failed; "ready: 1 export(s)" in the log; query-block-exports
  with QEMU's members;
- object-del of a tls-creds-psk object: refused, naming the NBD server,
  while the server uses it; deleted (and gone) otherwise;
- block_resize of an exported node: a new client sees the new size, a
  client connected before keeps its negotiated size (reads inside it
  work, reads past it are refused);
- nbd-server-stop while a request is stuck in the storage (blkdebug's
  inject-delay, 15 s): it returns at once, QMP keeps answering, the
  export is listed as shutting down and its node stays in use, a new
  server can start; BLOCK_EXPORT_DELETED comes once the request is done.
Env: VHOST_BLKD.  Needs qemu-io and qemu-img (else those cases skip).
"""
import importlib.util
import json
import os
import re
import shutil
import socket
import struct
import sys
import tempfile
import urllib.request

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "nbd_server_test", os.path.join(_here, "test-nbd-server.py"))
t = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(t)   # its helpers; its main() is not run

MiB = 1 << 20
KiB = 1 << 10


def blockstats(q, nodes=False):
    r = t.qcmd(q, "query-blockstats", {"query-nodes": nodes})
    return r["return"]


def export_stats(q, qdev):
    for e in blockstats(q):
        if e.get("qdev") == qdev:
            return e["stats"]
    return None


def node_stats(q, node):
    for e in blockstats(q, nodes=True):
        if e["node-name"] == node:
            return e["stats"]
    return None


def scrape(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def sample(page, name, **labels):
    """The value of the sample @name{labels}, or None."""
    want = ",".join('%s="%s"' % kv for kv in labels.items())
    for line in page.splitlines():
        if line.startswith(name + "{"):
            lab, _, val = line[len(name) + 1:].rpartition("} ")
            if sorted(lab.split(",")) == sorted(want.split(",")):
                return int(float(val))
    return None


def test_stats(d, sock, metrics_url):
    q = d.monitor()
    r = t.qcmd(q, "query-block-exports")
    e0 = [e for e in r["return"] if e["id"] == "e0"]
    ok = t.ok
    ok(e0 and e0[0]["type"] == "nbd" and e0[0]["node-name"] == "disk0" and
       e0[0]["shutting-down"] is False,
       "query-block-exports: type nbd, id, node-name, shutting-down", r)
    ok(re.search(r"ready: 1 export\(s\)", d.log()),
       "the ready line counts the NBD export", d.log())
    before = export_stats(q, "e0")
    before_node = node_stats(q, "disk0")
    if not ok(before is not None and before_node is not None,
              "query-blockstats has the NBD export (qdev e0) and its node",
              blockstats(q)):
        return
    if not t.have("qemu-io"):
        t.skip("counters after qemu-io", "no qemu-io")
        return
    rc, out = t.run("qemu-io", "-f", "raw",
                    "-c", "write -P 0x5a 0 64k", "-c", "write -P 0x5a 64k 64k",
                    "-c", "write -P 0x5a 1M 64k",
                    "-c", "read -P 0x5a 0 4k", "-c", "read -P 0x5a 1M 4k",
                    t.uri_unix("disk0", sock))
    ok(rc == 0 and "read 4096" in out, "qemu-io: 3 writes, 2 reads", out)
    after = export_stats(q, "e0")
    after_node = node_stats(q, "disk0")
    for st, what in ((after, "export"), (after_node, "node")):
        b = before if st is after else before_node
        ok(st["wr_operations"] - b["wr_operations"] == 3 and
           st["wr_bytes"] - b["wr_bytes"] == 3 * 64 * KiB and
           st["rd_operations"] - b["rd_operations"] == 2 and
           st["rd_bytes"] - b["rd_bytes"] == 2 * 4 * KiB and
           st["failed_wr_operations"] == b["failed_wr_operations"],
           "query-blockstats (%s): wr +3 ops +196608 bytes, rd +2 ops "
           "+8192 bytes" % what, (b, st))
    ok(after["wr_highest_offset"] == MiB + 64 * KiB,
       "wr_highest_offset: the end of the highest write", after)
    x = t.qcmd(q, "x-query-vhost-blk-stats")["return"]
    nx = [e for e in x.get("nbd-exports", []) if e["id"] == "e0"]
    ok(nx and nx[0]["operations"]["write"]["operations"] == 3 and
       nx[0]["operations"]["write"]["bytes"] == 3 * 64 * KiB and
       nx[0]["connections"] == 1 and nx[0]["in-flight"] == 0 and
       nx[0]["requests"] == nx[0]["completed"],
       "x-query-vhost-blk-stats: nbd-exports e0 counts them", x)
    # The first scrape of this daemon: rendered now, after the writes.
    page = scrape(metrics_url)
    ok(sample(page, "vhost_blk_requests_total", export="e0", queue="0",
              op="write") == 3 and
       sample(page, "vhost_blk_bytes_total", export="e0", queue="0",
              op="write") == 3 * 64 * KiB and
       sample(page, "vhost_blk_requests_total", export="e0", queue="0",
              op="read") == 2 and
       'vhost_blk_export_info{export="e0",node="disk0"} 1' in page,
       "metrics: e0 write requests 3, bytes 196608, reads 2",
       "\n".join(l for l in page.splitlines() if "e0" in l))

    # A refused request counts as failed, and in its type.
    raw = t.Raw(path=sock)
    raw.greet()
    size, _ = raw.go("disk0", structured=False)
    raw.req(t.CMD_WRITE, size, 512, b"\0" * 512, cookie=7)
    err, cookie, _ = raw.answer()
    st = export_stats(q, "e0")
    ok(err == t.ENOSPC and
       st["failed_wr_operations"] - after["failed_wr_operations"] == 1 and
       st["wr_operations"] - after["wr_operations"] == 1 and
       st["wr_bytes"] == after["wr_bytes"],
       "a write past the end: ENOSPC, one failed write, no bytes",
       (err, after, st))
    raw.close()


def test_object_del(tmp, d, sock):
    q = d.monitor()
    ok = t.ok
    r = t.qcmd(q, "nbd-server-stop")
    ok(r == {"return": {}}, "nbd-server-stop", r)
    sock2 = os.path.join(tmp, "tls.sock")
    r = t.qcmd(q, "nbd-server-start", {"addr": {"type": "unix",
                                              "path": sock2},
                                     "tls-creds": "psk0"})
    ok(r == {"return": {}}, "nbd-server-start tls-creds=psk0", r)
    r = t.qcmd(q, "object-del", {"id": "psk0"})
    desc = r.get("error", {}).get("desc", "")
    ok("in use" in desc and "NBD server" in desc and "nbd-server-stop" in
       desc, "object-del of the server's TLS object: refused, naming the "
       "NBD server", r)
    r = t.qcmd(q, "object-del", {"id": "psk1"})
    ok(r == {"return": {}}, "object-del of an unused tls-creds-psk", r)
    r = t.qcmd(q, "object-del", {"id": "psk1"})
    ok("not found" in r.get("error", {}).get("desc", ""),
       "... it is gone", r)
    r = t.qcmd(q, "nbd-server-start", {"addr": {"type": "unix",
                                              "path": sock2 + "x"},
                                     "tls-creds": "psk1"})
    ok("error" in r, "... a server cannot use it any more", r)
    r = t.qcmd(q, "nbd-server-stop")
    r2 = t.qcmd(q, "object-del", {"id": "psk0"})
    ok(r == {"return": {}} and r2 == {"return": {}},
       "after nbd-server-stop: object-del of its TLS object", (r, r2))


def test_resize(tmp, d, sock):
    q = d.monitor()
    ok = t.ok
    r = t.qcmd(q, "block-export-add", {"type": "nbd", "id": "rs",
                                     "node-name": "small",
                                     "writable": True})
    ok(r == {"return": {}}, "export of the node to resize", r)
    held = t.Raw(path=sock)
    held.greet()
    size, _ = held.go("small", structured=False)
    ok(size == 4 * MiB, "a client connects: 4 MiB", size)
    r = t.qcmd(q, "block_resize", {"node-name": "small", "size": 8 * MiB})
    ok(r == {"return": {}}, "block_resize to 8 MiB", r)
    if t.have("qemu-img"):
        rc, out = t.run("qemu-img", "info", "--output=json",
                        t.uri_unix("small", sock))
        ok(rc == 0 and json.loads(out)["virtual-size"] == 8 * MiB,
           "a new qemu-img info sees 8 MiB", out)
    else:
        t.skip("qemu-img info after the resize", "no qemu-img")
    fresh = t.Raw(path=sock)
    fresh.greet()
    size2, _ = fresh.go("small", structured=False)
    fresh.req(t.CMD_READ, 6 * MiB, 4096, cookie=2)
    err2, _, _ = fresh.answer(4096)
    ok(size2 == 8 * MiB and err2 == 0,
       "a new client: 8 MiB, reads past the old end", (size2, err2))
    fresh.close()
    held.req(t.CMD_READ, 4 * MiB - 4096, 4096, cookie=3)
    err_in, c_in, _ = held.answer(4096)
    held.req(t.CMD_WRITE, 0, 4096, b"\x77" * 4096, cookie=4)
    err_w, c_w, _ = held.answer()
    held.req(t.CMD_READ, 4 * MiB, 4096, cookie=5)
    err_out, c_out, _ = held.answer(4096)
    ok((err_in, c_in, err_w, c_w) == (0, 3, 0, 4),
       "the client connected before: reads and writes within its 4 MiB "
       "work", (err_in, err_w))
    ok(err_out == t.EINVAL and c_out == 5,
       "... and a read past its negotiated size is refused (EINVAL)",
       err_out)
    held.close()
    # hard: whether the server has seen that close yet or not
    r = t.qcmd(q, "block-export-del", {"id": "rs", "mode": "hard"})
    ok(r == {"return": {}}, "export removed", r)


STUCK_MS = 15000   # far longer than the few QMP commands that follow


def test_stuck_stop(tmp):
    ok = t.ok
    slow = os.path.join(tmp, "slow.raw")
    with open(slow, "wb") as f:
        f.truncate(4 * MiB)
    vsock = os.path.join(tmp, "v.sock")
    sock = os.path.join(tmp, "stuck.sock")
    # The delay is set on a node made by a vhost-user export, which is
    # then deleted: the node (and its delay) stays for the NBD export.
    d = t.Daemon(tmp, "stuck", [
        "--export", "socket=%s,file=%s,id=v0,node-name=slow,"
        "inject-delay=%d,inject-sector=2048-2055" % (vsock, slow, STUCK_MS),
        "--nbd-server", "addr.type=unix,addr.path=" + sock])
    q = d.monitor()
    r = t.qcmd(q, "block-export-del", {"id": "v0"})
    r2 = t.qcmd(q, "block-export-add", {"type": "nbd", "id": "e0",
                                      "node-name": "slow"})
    ok(r == {"return": {}} and r2 == {"return": {}},
       "NBD export of a node whose sectors 2048-2055 are slow", (r, r2))
    raw = t.Raw(path=sock)
    raw.greet()
    raw.go("slow", structured=False)
    raw.req(t.CMD_READ, MiB, 4096, cookie=9)
    # Until the server has read it: a QMP round trip each, no sleep.
    for _ in range(10000):
        x = t.qcmd(q, "x-query-vhost-blk-stats")["return"]
        if x["nbd-exports"][0]["in-flight"] == 1:
            break
    ok(x["nbd-exports"][0]["in-flight"] == 1,
       "a read is stuck in the storage", x)
    r = t.qcmd(q, "nbd-server-stop")
    ok(r == {"return": {}} and not os.path.exists(sock),
       "nbd-server-stop returns with the read in flight; socket gone", r)
    r = t.qcmd(q, "query-block-exports")
    ok([(e["id"], e["shutting-down"]) for e in r["return"]] ==
       [("e0", True)], "the export is listed, shutting down", r)
    r = t.qcmd(q, "blockdev-del", {"node-name": "slow"})
    ok("in use" in r.get("error", {}).get("desc", ""),
       "its node is still in use", r)
    sock2 = os.path.join(tmp, "again.sock")
    r = t.qcmd(q, "nbd-server-start", {"addr": {"type": "unix",
                                              "path": sock2}})
    ok(r == {"return": {}}, "a new NBD server starts meanwhile", r)
    r = t.qcmd(q, "block-export-add", {"type": "nbd", "id": "e0",
                                     "node-name": "slow"})
    ok("already in use" in r.get("error", {}).get("desc", ""),
       "the draining export's id is still taken", r)
    ok(raw.closed(), "the stuck client's connection is closed")
    raw.close()
    msgs = []
    while not any(m.get("event") == "BLOCK_EXPORT_DELETED" and
                  m["data"]["id"] == "e0" for m in msgs):
        msgs.append(q.read_msg())
    r = t.qcmd(q, "query-block-exports")
    ok(r["return"] == [], "once the read is done: BLOCK_EXPORT_DELETED, "
       "export gone", r)
    r = t.qcmd(q, "nbd-server-stop")
    r2 = t.qcmd(q, "blockdev-del", {"node-name": "slow"})
    ok(r == {"return": {}} and r2 == {"return": {}},
       "the new server stops, the node can be deleted", (r, r2))
    d.stop()
    ok(d.p.returncode == 0, "clean exit", d.log())


def main():
    tmp = tempfile.mkdtemp(prefix="vb-nbd-ops-", dir="/var/tmp")
    try:
        img = os.path.join(tmp, "disk.raw")
        with open(img, "wb") as f:
            f.truncate(16 * MiB)
        small = os.path.join(tmp, "small.raw")
        with open(small, "wb") as f:
            f.truncate(4 * MiB)
        pskdir = os.path.join(tmp, "psk")
        os.mkdir(pskdir)
        with open(os.path.join(pskdir, "keys.psk"), "w") as f:
            f.write("alice:" + "ab" * 32 + "\n")
        sock = os.path.join(tmp, "nbd.sock")
        d = t.Daemon(tmp, "blkd", [
            "--metrics", "127.0.0.1:0",
            "--object", "tls-creds-psk,id=psk0,dir=%s,endpoint=server" %
            pskdir,
            "--object", "tls-creds-psk,id=psk1,dir=%s,endpoint=server" %
            pskdir,
            "--blockdev", "driver=file,node-name=disk0,filename=" + img,
            "--blockdev", "driver=file,node-name=small,filename=" + small,
            "--nbd-server", "addr.type=unix,addr.path=" + sock,
            "--export", "type=nbd,id=e0,node-name=disk0,writable=on"])
        d.monitor()
        m = re.search(r"metrics: serving (http://\S+/metrics)", d.log())
        t.ok(m is not None, "metrics endpoint up", d.log())
        test_stats(d, sock, m.group(1) if m else None)
        test_resize(tmp, d, sock)
        test_object_del(tmp, d, sock)
        t.ok(d.p.poll() is None, "the daemon is still running", d.log())
        d.stop()
        t.ok(d.p.returncode == 0, "clean exit", d.log())
        test_stuck_stop(tmp)
    finally:
        for p in t.procs:
            t.stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
    print("1..%d" % t.n_test)
    print("# %d tests, %d failed" % (t.n_test, t.n_fail))
    sys.exit(1 if t.n_fail else 0)


if __name__ == "__main__":
    main()
