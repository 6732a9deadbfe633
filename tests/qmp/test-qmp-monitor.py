#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""vhost-blkd's QMP monitor and qemu-storage-daemon command line, with
vb-io (the front-end library) as the VMM.  TAP.

- qemu-storage-daemon's command line, unchanged, and variants (implied
  type, server/nowait flags, iothread objects, null-co, addr.type=fd);
  unsupported options and keys are refused, naming them;
- exports added and deleted at run time while another export serves I/O;
  a hard delete with a request stuck in storage finishes in the background;
- block_resize: the front-end gets CONFIG_CHANGE_MSG and the new capacity,
  I/O past the old end works; shrinking is refused;
- query-blockstats counts exactly the requests vb-io made;
- fds over QMP: getfd/closefd names, never raw numbers; the daemon's own
  listeners (by number, or copies passed back) are refused;
- hostile monitor clients (malformed JSON, 200 KB of brackets, a message
  over 1 MiB, wrong types, a client that never reads) get errors or are dropped while the
  dataplane keeps serving and other clients keep working;
- quit.
Env: VHOST_BLKD, VB_IO.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qmp_conversation import Qmp  # noqa: E402

BLKD = os.environ.get("VHOST_BLKD", "vhost-blkd")
VBIO = os.environ.get("VB_IO", "vb-io")
MiB = 1 << 20
n_test = 0
n_fail = 0
procs = []


def ok(cond, name, detail=""):
    global n_test, n_fail
    n_test += 1
    if not cond:
        n_fail += 1
        for line in str(detail).splitlines():
            print("# " + line)
    print("%s %d - %s" % ("ok" if cond else "not ok", n_test, name))
    sys.stdout.flush()
    return cond


def mkimg(tmp, name, size):
    p = os.path.join(tmp, name)
    with open(p, "wb") as f:
        f.truncate(size)
    return p


def start(tmp, args, name="blkd", pass_fds=()):
    log = open(os.path.join(tmp, name + ".log"), "w")
    p = subprocess.Popen([BLKD] + args, stdout=log, stderr=subprocess.STDOUT,
                         pass_fds=pass_fds)
    procs.append(p)
    return p


def log_of(tmp, name="blkd"):
    try:
        return open(os.path.join(tmp, name + ".log")).read()
    except OSError:
        return ""


def wait_sock(path, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def vbio(sock, *cmds, timeout=120):
    r = subprocess.run([VBIO, sock] + list(cmds), capture_output=True,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def monitor(tmp, path="qmp.sock"):
    q = Qmp(os.path.join(tmp, path))
    q.read_msg()
    r = q.cmd("qmp_capabilities")
    assert r == {"return": {}}, r
    return q


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def qsd_args(tmp, img, sock, extra_export="", mon=True):
    a = []
    if mon:
        a += ["--chardev", "socket,id=m0,path=%s,server=on,wait=off" %
              os.path.join(tmp, "qmp.sock"), "--monitor", "chardev=m0"]
    a += ["--blockdev", "driver=file,node-name=f,filename=" + img,
          "--export", "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,"
          "addr.path=%s,writable=on,num-queues=1%s" % (sock, extra_export)]
    return a


# ---- command line -------------------------------------------------------

def test_cmdline(tmp):
    img = mkimg(tmp, "c.img", 16 * MiB)
    sock = os.path.join(tmp, "c.sock")
    # DESIGN.md's qemu-storage-daemon command line, unchanged
    p = start(tmp, qsd_args(tmp, img, sock, mon=False), "c1")
    if ok(wait_sock(sock, p), "QSD's command line starts", log_of(tmp, "c1")):
        rc, out = vbio(sock, "write:8:65536:3", "read:8:65536:3", "flush")
        ok(rc == 0, "I/O through the QSD-style export", out)
    stop(p)
    ok(p.returncode == 0 and not os.path.exists(sock),
       "SIGTERM: exit 0, socket removed", log_of(tmp, "c1"))

    # variants: implied type, QemuOpts flags, iothread object, null-co,
    # cache.direct + aio=native, pretty monitor
    nsock = os.path.join(tmp, "n.sock")
    p = start(tmp, [
        "--chardev", "socket,id=m0,path=%s,server,nowait" %
        os.path.join(tmp, "qmp.sock"),
        "--monitor", "m0,pretty=on",
        "--object", "iothread,id=io0,poll-max-ns=0",
        "--blockdev", "file,node-name=f,filename=%s,cache.direct=on,"
        "aio=native,discard=unmap" % img,
        "--blockdev", "driver=null-co,node-name=n,size=8M,read-zeroes=on",
        "--export", "vhost-user-blk,id=e,node-name=f,addr.type=unix,"
        "addr.path=%s,writable=on,iothread=io0,logical-block-size=4096" % sock,
        "--export", "type=vhost-user-blk,id=n,node-name=n,addr.type=unix,"
        "addr.path=%s" % nsock], "c2")
    if ok(wait_sock(nsock, p) and wait_sock(sock, p),
          "variants start (implied keys, flags, iothread, null-co)",
          log_of(tmp, "c2")):
        rc, out = vbio(sock, "write:0:8192:5", "read:0:8192:5")
        ok(rc == 0, "I/O on the iothread=io0 export, 4k blocks", out)
        rc, out = vbio(nsock, "read:0:4096", "write:0:4096=ioerr")
        ok(rc == 0, "null-co export reads, read-only by default (writable "
           "off)", out)
        q = Qmp(os.path.join(tmp, "qmp.sock"))
        q.read_msg()
        q.cmd("qmp_capabilities")
        # pretty=on: replies span lines, still one JSON text each
        q.send_raw('{"execute": "query-block-exports"}')
        raw = b""
        while b"}\n]" not in raw and b"]\n}" not in raw:
            raw += q.sock.recv(65536)
        ok(b"\n  " in raw, "pretty=on indents replies", raw[:200])
        q.sock.close()
    stop(p)

    # addr.type=fd: an inherited listening socket (socket activation)
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fpath = os.path.join(tmp, "fd.sock")
    lsock.bind(fpath)
    lsock.listen(1)
    fd = lsock.fileno()
    p = start(tmp, ["--blockdev", "driver=file,node-name=f,filename=" + img,
                    "--export", "type=vhost-user-blk,id=e,node-name=f,"
                    "addr.type=fd,addr.str=%d,writable=on" % fd], "c3",
              pass_fds=(fd,))
    time.sleep(0)   # the socket listens already: no wait needed
    rc, out = vbio(fpath, "write:0:4096:9", "read:0:4096:9")
    ok(rc == 0, "addr.type=fd serves on the inherited socket", out +
       log_of(tmp, "c3"))
    stop(p)
    lsock.close()

    # refused: each error names what is wrong
    bad = [
        (["--blockdev", "driver=vmdk,node-name=f,file=x"], "vmdk"),
        (["--blockdev", "driver=file,node-name=f,filename=%s,locking=bogus" %
          img], "locking"),
        (["--blockdev", "driver=file,node-name=f,filename=%s,"
          "detect-zeroes=on" % img], "detect-zeroes"),
        (["--export", "type=nbd,id=e,node-name=f"], "nbd"),
        (["--blockdev", "driver=file,node-name=f,filename=" + img,
          "--export", "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,"
          "addr.path=%s,bogus=1" % sock], "bogus"),
        (["--nbd-server", "addr.type=unix,addr.path=/x,tls-authz=a"],
         "tls-authz"),
        (["--chardev", "socket,id=m,path=/x,server=on,wait=off"],
         "--monitor"),
        (["--chardev", "stdio,id=m", "--monitor", "m"], "stdio"),
        (["--monitor", "chardev=m0,mode=readline"], "readline"),
        (["--object", "memory-backend-memfd,id=m,size=1M"],
         "memory-backend-memfd"),
        (["--export", "type=vhost-user-blk,id=e,node-name=nope,"
          "addr.type=unix,addr.path=" + sock], "nope"),
        (["--blockdev", "driver=file,node-name=f,filename=" + img,
          "--export", "type=vhost-user-blk,id=e,node-name=f,addr.type=fd,"
          "addr.str=0"], "addr.str"),
    ]
    # a valid export beside them, so that only the bad option can fail
    plain = ["--export", "socket=%s,file=%s" % (os.path.join(tmp, "p.sock"),
                                                img)]
    for i, (args, word) in enumerate(bad):
        r = subprocess.run([BLKD] + args + plain, capture_output=True, text=True,
                           timeout=30)
        ok(r.returncode == 1 and word in r.stderr,
           "refused, naming '%s'" % word, r.stderr)


# ---- run-time exports, resize, statistics --------------------------------

def test_runtime(tmp):
    img = mkimg(tmp, "r.img", 32 * MiB)
    sock = os.path.join(tmp, "r.sock")
    p = start(tmp, qsd_args(tmp, img, sock), "r")
    if not ok(wait_sock(sock, p) and
              wait_sock(os.path.join(tmp, "qmp.sock"), p),
              "daemon with a monitor starts", log_of(tmp, "r")):
        return
    q = monitor(tmp)

    # A long verified run on export e while exports come and go.
    busy = subprocess.Popen([VBIO, sock, "fill:0:65536:7=any",
                             "read:0:65536:7", "read:32640:65536:262"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    img2 = mkimg(tmp, "r2.img", 8 * MiB)
    sock2 = os.path.join(tmp, "r2.sock")
    for rnd in range(3):
        r1 = q.cmd("blockdev-add", driver="file", filename=img2,
                   **{"node-name": "g"})
        r2 = q.cmd("block-export-add", type="vhost-user-blk", id="e2",
                   writable=True, addr={"type": "unix", "path": sock2},
                   **{"node-name": "g"})
        rc, out = vbio(sock2, "write:0:65536:%d" % (rnd + 20),
                       "read:0:65536:%d" % (rnd + 20))
        msgs = q.exchange({"execute": "block-export-del",
                           "arguments": {"id": "e2"}})
        ev = [m for m in msgs if m.get("event") == "BLOCK_EXPORT_DELETED"]
        r3 = q.cmd("blockdev-del", **{"node-name": "g"})
        ok(r1 == r2 == r3 == {"return": {}} and rc == 0 and
           msgs[-1] == {"return": {}} and len(ev) == 1 and
           ev[0]["data"] == {"id": "e2"} and not os.path.exists(sock2),
           "round %d: add node+export, I/O, delete (event), socket gone" %
           rnd, [r1, r2, r3, msgs, out])
    out, _ = busy.communicate(timeout=300)
    ok(busy.returncode == 0, "the other export's verified run went on "
       "undisturbed", out)

    # The export types by name (the registry in monitor/export.c): the
    # QSD types vhost-blkd does not serve are refused as such, an unknown
    # one as an unknown enum value, and nothing is created.
    addr = {"type": "unix", "path": sock2}
    for typ, want in (
            ("fuse", "export type 'fuse' is not supported: vhost-blkd "
             "exports only vhost-user-blk"),
            ("vduse-blk", "export type 'vduse-blk' is not supported: "
             "vhost-blkd exports only vhost-user-blk"),
            ("nosuch", "Parameter 'type' does not accept value 'nosuch'"),
            (5, "Invalid parameter type for 'type', expected: string"),
            (None, "Parameter 'type' is missing")):
        args = {"id": "t", "node-name": "f", "addr": addr}
        if typ is not None:
            args["type"] = typ
        r = q.cmd("block-export-add", **args)
        ok(r.get("error", {}).get("desc") == want,
           "block-export-add type=%r: %s" % (typ, want), r)
    r = q.cmd("block-export-add", type="nbd", id="t",
              **{"node-name": "f"})
    r2 = q.cmd("block-export-add", type="vhost-user-blk", id="e",
               addr=addr, **{"node-name": "f"})
    r3 = q.cmd("query-block-exports")
    ok(r.get("error", {}).get("desc") == "NBD server not running" and
       r2.get("error", {}).get("desc") ==
       "Block export id 'e' is already in use" and
       [x["id"] for x in r3.get("return", [])] == ["e"] and
       not os.path.exists(sock2),
       "type=nbd reaches the NBD type; a used id is refused; only e "
       "exported", [r, r2, r3])

    # statistics: exactly what a fresh session does
    base = q.cmd("query-blockstats")["return"][0]["stats"]
    rc, out = vbio(sock, "write:0:4096:1", "write:8:8192:2", "read:0:4096:1",
                   "flush", "read:99999999:512=ioerr")
    st = q.cmd("query-blockstats")["return"][0]["stats"]
    d = {k: st[k] - base[k] for k in st if isinstance(st[k], int)
         and not isinstance(st[k], bool)}
    ok(rc == 0 and d["wr_operations"] == 2 and d["wr_bytes"] == 12288 and
       d["rd_operations"] == 2 and d["rd_bytes"] == 4096 and
       d["failed_rd_operations"] == 1 and d["flush_operations"] == 1 and
       st["wr_highest_offset"] >= 8 * 512 + 8192,
       "query-blockstats counts the session's requests", [out, d])
    x = q.cmd("x-query-vhost-blk-stats")["return"]
    e = [e for e in x["exports"] if e["id"] == "e"][0]
    ok(e["operations"]["write"]["operations"] >= 2 and len(e["queues"]) == 1
       and e["in-flight"] == 0 and any(g["engine"] for g in x["engines"]),
       "x-query-vhost-blk-stats: per-op, per-queue, engine counters", x)

    r1 = q.cmd("x-vhost-blk-log-level", level="debug")
    r2 = q.cmd("x-vhost-blk-log-level")
    r3 = q.cmd("x-vhost-blk-log-level", level="loud")
    q.cmd("x-vhost-blk-log-level", level="info")
    ok(r1 == r2 == {"return": {"level": "debug"}} and
       "does not accept value 'loud'" in r3["error"]["desc"],
       "x-vhost-blk-log-level sets and reads the log level", [r1, r2, r3])

    # resize while a front-end is connected
    new = 48 * MiB
    res = subprocess.Popen([VBIO, sock, "write:0:4096:4", "ready",
                            "waitcfg:%d" % new,
                            "write:%d:65536:11" % (40 * MiB // 512),
                            "read:%d:65536:11" % (40 * MiB // 512),
                            "read:0:4096:4"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    line = res.stdout.readline()
    while line and line.strip() != "ready":
        line = res.stdout.readline()
    r = q.cmd("block_resize", size=new, **{"node-name": "f"})
    rest = res.stdout.read()
    res.wait(timeout=60)
    ok(r == {"return": {}} and res.returncode == 0,
       "block_resize: CONFIG_CHANGE_MSG, new capacity, I/O past the old end",
       [r, rest])
    nodes = q.cmd("query-named-block-nodes")["return"]
    ok(nodes[0]["image"]["virtual-size"] == new and
       os.path.getsize(img) == new, "the node and the file have the new "
       "size", nodes)
    r = q.cmd("block_resize", size=16 * MiB, **{"node-name": "f"})
    ok(r.get("error", {}).get("class") == "GenericError" and
       "shrink" in r["error"]["desc"], "shrinking is refused", r)
    # a file grown behind the daemon's back, picked up on request
    os.truncate(img, 64 * MiB)
    r = q.cmd("block_resize", size=64 * MiB, **{"node-name": "f"})
    rc, out = vbio(sock, "write:%d:4096:3" % (60 * MiB // 512),
                   "read:%d:4096:3" % (60 * MiB // 512))
    ok(r == {"return": {}} and rc == 0, "a grown file is picked up", out)

    # safe delete of a connected export is refused; hard is not
    held = subprocess.Popen([VBIO, sock, "ready", "sleep:3000"],
                            stdout=subprocess.PIPE, text=True)
    held.stdout.readline()
    r = q.cmd("block-export-del", id="e")
    ok("still in use" in r.get("error", {}).get("desc", ""),
       "block-export-del (safe) refuses a connected export", r)
    msgs = q.exchange({"execute": "block-export-del",
                       "arguments": {"id": "e", "mode": "hard"}})
    ok(msgs[-1] == {"return": {}} and
       any(m.get("event") == "BLOCK_EXPORT_DELETED" for m in msgs),
       "mode=hard disconnects and deletes", msgs)
    held.wait(timeout=30)

    msgs = q.exchange({"execute": "quit"})
    p.wait(timeout=30)
    ok(msgs[-1] == {"return": {}} and p.returncode == 0 and
       not os.path.exists(os.path.join(tmp, "qmp.sock")),
       "quit: exit 0, monitor socket removed", log_of(tmp, "r"))


# ---- hostile monitor clients --------------------------------------------

def test_hostile(tmp):
    img = mkimg(tmp, "h.img", 32 * MiB)
    sock = os.path.join(tmp, "h.sock")
    p = start(tmp, qsd_args(tmp, img, sock), "h")
    if not ok(wait_sock(sock, p) and
              wait_sock(os.path.join(tmp, "qmp.sock"), p),
              "daemon starts", log_of(tmp, "h")):
        return
    good = monitor(tmp)
    busy = subprocess.Popen([VBIO, sock, "fill:0:65536:3=any",
                             "read:0:65536:3"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)

    q = monitor(tmp)
    cases = [
        ('{"execute": "query-version"', None),     # completed below
        ('}', "vhost-blkd"),
        ('{"execute": }', "JSON parse error"),
        ('[1, 2', None),
        (']', "must be a JSON object"),
        ('"\\u0000"', "must be a JSON object"),
        ('{"execute": "block_resize", "arguments": {"node-name": 1, '
         '"size": 1}}', "expected: string"),
        ('{"execute": "blockdev-add", "arguments": {"driver": "file", '
         '"node-name": "x", "filename": "/dev/null", "cache": 5}}',
         "expected: object"),
        ('{"execute": "' + "x" * 10000 + '"}', "has not been found"),
        ('{"execute": "query-version", "arguments": null}',
         "must be an object"),
        ('{"execute": "query-version", "id": "a\\"b"}', None),
    ]
    for text, want in cases:
        q.send_raw(text)
        if want is None:
            continue
        m = q.read_msg()
        s = json.dumps(m)
        ok(want in s, "hostile input %r answered" % text[:40], s)
    m = q.read_msg()
    ok(m.get("id") == 'a"b', "an id with a quote is echoed", m)

    # 200 KB of brackets (json-glib recurses per level: this used to
    # overflow the main thread's stack and kill the daemon): one error,
    # the rest of the line dropped, the same client answered afterwards
    deep = monitor(tmp)
    for opener, closer in (("[", "]"), ('{"a":', "}")):
        n = 200 * 1024 // len(opener)
        deep.send_raw(opener * n + "0" + closer * n)
        m = deep.read_msg()
        ok("nesting depth limit exceeded" in json.dumps(m),
           "200 KB of %r: a nesting error" % opener, m)
        r = deep.cmd("query-version")
        ok(r.get("return", {}).get("package", "").startswith("vhost-blkd"),
           "200 KB of %r: the client is answered afterwards" % opener, r)
    # stray closers: one error, and the rest of their line (a command
    # there too) dropped; the next line's command is answered
    deep.send_raw("]" * (200 * 1024) +
                  '{"execute": "query-version", "id": "same-line"}\n'
                  '{"execute": "query-version", "id": "next-line"}')
    m = deep.read_msg()
    r = deep.read_msg()
    ok("JSON parse error, stray ']'" in json.dumps(m) and "return" in r and
       r.get("id") == "next-line",
       "200 KB of stray closers: one error, the rest of the line dropped, "
       "the next line answered", [m, r])
    ok(p.poll() is None, "the daemon survived the brackets", log_of(tmp, "h"))

    # a message over 1 MiB: error, then closed
    big = socket.socket(socket.AF_UNIX)
    big.connect(os.path.join(tmp, "qmp.sock"))
    big.settimeout(30)
    big.recv(4096)
    chunk = b'{"execute": "qmp_capabilities", "arguments": {"a": "' + \
        b"x" * (1100 * 1024)
    try:
        big.sendall(chunk)
    except OSError:
        pass
    data = b""
    try:
        while True:
            d = big.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    ok(b"too large" in data, "a message over 1 MiB: error and close", data)
    big.close()

    # a client that sends and never reads: dropped, nothing stalls
    lazy = socket.socket(socket.AF_UNIX)
    lazy.connect(os.path.join(tmp, "qmp.sock"))
    lazy.settimeout(60)
    req = (b'{"execute": "qmp_capabilities"}\n' +
           b'{"execute": "x-query-vhost-blk-stats"}\n' * 4000)
    try:
        lazy.sendall(req)
        # the daemon reads everything; replies pile up until it gives up
        lazy.sendall(b'{"execute": "x-query-vhost-blk-stats"}\n' * 4000)
    except OSError:
        pass
    deadline = time.monotonic() + 60
    while "left more than" not in log_of(tmp, "h") and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    ok("left more than" in log_of(tmp, "h"),
       "a client that never reads is disconnected", log_of(tmp, "h")[-500:])
    lazy.close()

    r = good.cmd("query-block-exports")
    ok(r.get("return", [{}])[0].get("id") == "e",
       "another client is served meanwhile", r)
    out, _ = busy.communicate(timeout=300)
    ok(busy.returncode == 0 and p.poll() is None,
       "the dataplane kept serving a verified run throughout", out)
    # many clients at once
    qs = [monitor(tmp) for _ in range(8)]
    ok(all(c.cmd("query-version")["return"]["package"].startswith(
        "vhost-blkd") for c in qs), "8 clients at once")
    stop(p)
    ok(p.returncode == 0, "clean exit after all that", log_of(tmp, "h"))


# ---- a hard block-export-del with a request stuck in storage -------------

def test_stuck_delete(tmp):
    """The export's storage holds a request for 10 s (blkdebug's injected
    delay, a stuck backend): block-export-del mode=hard returns at once,
    the export shows shutting-down, the monitor and the other export keep
    working, and BLOCK_EXPORT_DELETED comes once the request completed.
    (It used to wait in the command, freezing the main thread.)  The
    assertions are on order, not time: everything before the event happens
    while the request is held."""
    img = mkimg(tmp, "st.img", 16 * MiB)
    img2 = mkimg(tmp, "st2.img", 16 * MiB)
    sa = os.path.join(tmp, "stuck.sock")
    sb = os.path.join(tmp, "fine.sock")
    qpath = os.path.join(tmp, "qmp.sock")
    p = start(tmp, ["--chardev", "socket,id=m0,path=%s,server=on,wait=off" %
                    qpath, "--monitor", "chardev=m0",
                    "--export", "socket=%s,file=%s,inject-delay=10000,"
                    "inject-sector=0-7" % (sa, img),
                    "--export", "socket=%s,file=%s" % (sb, img2)], "st")
    if not ok(wait_sock(sa, p) and wait_sock(sb, p) and
              wait_sock(qpath, p), "daemon starts", log_of(tmp, "st")):
        return
    q = monitor(tmp)
    q2 = monitor(tmp)
    stuck = subprocess.Popen([VBIO, sa, "read:0:4096=any"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    inflight = 0
    deadline = time.monotonic() + 60       # hang guard only
    while inflight < 1 and time.monotonic() < deadline:
        exps = q.cmd("x-query-vhost-blk-stats")["return"]["exports"]
        inflight = sum(e["in-flight"] for e in exps if e["id"] == "export0")
    ok(inflight == 1, "the request is held in export0's storage", inflight)
    msgs = q.exchange({"execute": "block-export-del",
                       "arguments": {"id": "export0", "mode": "hard"}})
    ok(msgs[-1] == {"return": {}} and
       not any(m.get("event") == "BLOCK_EXPORT_DELETED" for m in msgs),
       "block-export-del mode=hard returns while the request is held", msgs)
    r = q2.cmd("query-block-exports")
    sd = {e["id"]: e["shutting-down"] for e in r.get("return", [])}
    ok(sd == {"export0": True, "export1": False},
       "another client: export0 shutting down, export1 not", r)
    rc, out = vbio(sb, "write:0:65536:4", "read:0:65536:4")
    ok(rc == 0, "the other export serves meanwhile", out)
    r = q2.cmd("block-export-del", id="export0", mode="hard")
    ok("already shutting down" in r.get("error", {}).get("desc", ""),
       "a second block-export-del: already shutting down", r)
    r = q2.cmd("blockdev-del", **{"node-name": "node0"})
    ok("in use" in r.get("error", {}).get("desc", ""),
       "its node stays in use until then", r)
    ev = q.read_msg()
    ok(ev.get("event") == "BLOCK_EXPORT_DELETED" and
       ev.get("data") == {"id": "export0"},
       "BLOCK_EXPORT_DELETED once the request completed", ev)
    stuck.communicate(timeout=120)
    r = q.cmd("query-block-exports")
    ok([e["id"] for e in r.get("return", [])] == ["export1"],
       "export0 is gone", r)
    r = q.cmd("blockdev-del", **{"node-name": "node0"})
    ok(r == {"return": {}}, "and its node can be deleted", r)
    stop(p)
    ok(p.returncode == 0, "clean exit", log_of(tmp, "st"))


# ---- fds over QMP: getfd names, never numbers ----------------------------

def daemon_socket_fds(pid, path):
    """Numbers of the daemon's fds that are the listening socket at @path
    (from /proc/PID/fd and /proc/net/unix)."""
    inodes = set()
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            cols = line.split()
            # __SO_ACCEPTCON: listening (accepted ones share the path)
            if len(cols) >= 8 and cols[7] == path and \
                    int(cols[3], 16) & 0x10000:
                inodes.add(cols[6])
    fds = []
    d = "/proc/%d/fd" % pid
    for name in os.listdir(d):
        try:
            t = os.readlink(os.path.join(d, name))
        except OSError:
            continue
        if t.startswith("socket:[") and t[8:-1] in inodes:
            fds.append(int(name))
    return fds


def steal_fd(pid, fd):
    """A copy of fd @fd of process @pid (pidfd_getfd(2); we are root or
    its parent)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        r = libc.syscall(438, pidfd, fd, 0)     # SYS_pidfd_getfd
        if r < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
        return r
    finally:
        os.close(pidfd)


def qmp_with_fd(q, name, args, fd):
    """Send command @name with @fd attached (SCM_RIGHTS); its reply."""
    m = {"execute": name, "arguments": args}
    data = json.dumps(m).encode() + b"\n"
    if fd is None:
        q.sock.sendall(data)
    else:
        socket.send_fds(q.sock, [data], [fd])
    while True:
        r = q.read_msg()
        if "event" not in r:
            return r


def err_of(r):
    return r.get("error", {}).get("desc", "") if "error" in r else ""


def test_fds(tmp):
    img = mkimg(tmp, "fd.img", 16 * MiB)
    img2 = mkimg(tmp, "fd2.img", 16 * MiB)
    sock = os.path.join(tmp, "fdq.sock")
    qpath = os.path.join(tmp, "qmp.sock")
    p = start(tmp, qsd_args(tmp, img, sock) +
              ["--blockdev", "driver=file,node-name=g,filename=" + img2], "fd")
    if not ok(wait_sock(sock, p) and wait_sock(qpath, p),
              "daemon starts", log_of(tmp, "fd")):
        return
    q = monitor(tmp)
    mon_fds = daemon_socket_fds(p.pid, qpath)
    exp_fds = daemon_socket_fds(p.pid, sock)
    ok(len(mon_fds) == 1 and len(exp_fds) == 1,
       "found the daemon's monitor and export listeners", (mon_fds, exp_fds))

    def add(name, s, pid=None):
        return q.cmd("block-export-add", type="vhost-user-blk", id=name,
                     **{"node-name": "g"}, writable=True,
                     addr={"type": "fd", "str": s})

    # raw numbers over QMP: refused, whatever they are (the monitor's own
    # listener used to be taken over: the monitor stopped accepting and
    # the fd was closed twice)
    for what, fds in (("the monitor's listener", mon_fds),
                      ("export e's listener", exp_fds)):
        for fd in fds:
            r = add("x", str(fd))
            ok("getfd" in err_of(r),
               "addr.str=%d (%s) over QMP: refused, pointing to getfd" %
               (fd, what), r)
    r2 = monitor(tmp).cmd("query-version")
    ok("return" in r2, "the monitor still accepts clients", r2)
    rc, out = vbio(sock, "write:0:4096:5", "read:0:4096:5")
    ok(rc == 0, "export e still serves", out + log_of(tmp, "fd"))

    # getfd without an fd, with a bad name; closefd of nothing
    r = qmp_with_fd(q, "getfd", {"fdname": "none"}, None)
    ok("No file descriptor supplied via SCM_RIGHTS" in err_of(r),
       "getfd without an fd: refused", r)
    r = q.cmd("closefd", fdname="none")
    ok("not found" in err_of(r), "closefd of an unknown name: refused", r)
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    r = qmp_with_fd(q, "getfd", {"fdname": "3x"}, lst.fileno())
    ok("starting with a digit" in err_of(r),
       "getfd with a name starting with a digit: refused", r)

    # copies of the daemon's own listeners, passed back by name
    for what, fds, want in (("the monitor's listener", mon_fds,
                             "monitor's own listening socket"),
                            ("export e's listener", exp_fds,
                             "already used by export 'e'")):
        try:
            fd = steal_fd(p.pid, fds[0])
        except (OSError, IndexError) as e:
            ok(False, "copy %s (pidfd_getfd)" % what, e)
            continue
        r = qmp_with_fd(q, "getfd", {"fdname": "stolen"}, fd)
        os.close(fd)
        ok(r == {"return": {}}, "getfd of a copy of %s" % what, r)
        r = add("x", "stolen")
        ok(want in err_of(r), "addr.str=NAME of %s: refused" % what, r)
        r = q.cmd("closefd", fdname="stolen")
        ok(r == {"return": {}}, "closefd after the refusal", r)

    # not a listening socket, not a socket
    rs, ws = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for what, fd, want in (("a pipe", rs, "not a socket"),
                           ("an unbound socket", conn.fileno(),
                            "not listening")):
        r = qmp_with_fd(q, "getfd", {"fdname": "bad"}, fd)
        r = add("x", "bad")
        ok(want in err_of(r), "addr.str=NAME of %s: refused" % what, r)
    os.close(rs)
    os.close(ws)
    conn.close()

    # a listening socket of ours, by name: served; the name is used up
    gpath = os.path.join(tmp, "byname.sock")
    lst.bind(gpath)
    lst.listen(4)
    r = qmp_with_fd(q, "getfd", {"fdname": "good"}, lst.fileno())
    ok(r == {"return": {}}, "getfd of a listening socket", r)
    lst.close()
    r = add("byname", "good")
    ok(r == {"return": {}}, "block-export-add addr.type=fd,addr.str=good", r)
    rc, out = vbio(gpath, "write:0:4096:7", "read:0:4096:7")
    ok(rc == 0, "the export on the passed socket serves I/O", out)
    r = q.cmd("closefd", fdname="good")
    ok("not found" in err_of(r), "the name was used up by the export", r)
    r = add("again", "good")
    ok("has not been found" in err_of(r), "a second export cannot use it", r)
    r = q.cmd("block-export-del", id="byname", mode="hard")
    ok(r == {"return": {}}, "block-export-del of it", r)
    r = monitor(tmp).cmd("query-version")
    ok("return" in r, "the monitor still accepts clients after all that", r)
    # fds passed but never used are closed with their client
    spare = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    q2 = monitor(tmp)
    nfds = len(os.listdir("/proc/%d/fd" % p.pid))
    socket.send_fds(q2.sock, [b'{"execute": "query-version"}\n'],
                    [spare.fileno()] * 3)
    q2.read_msg()
    grown = len(os.listdir("/proc/%d/fd" % p.pid)) - nfds
    q2.sock.close()
    spare.close()
    deadline = time.monotonic() + 60        # hang guard only
    while len(os.listdir("/proc/%d/fd" % p.pid)) > nfds - 1 and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    ok(grown == 3 and len(os.listdir("/proc/%d/fd" % p.pid)) == nfds - 1,
       "3 unused passed fds are kept, then closed with their client",
       (nfds, grown, os.listdir("/proc/%d/fd" % p.pid)))
    stop(p)
    log = log_of(tmp, "fd")
    ok(p.returncode == 0 and "Bad file descriptor" not in log,
       "clean exit, no fd closed twice", log)


def main():
    tmp = tempfile.mkdtemp(prefix="vb-qmp.", dir="/var/tmp")
    os.environ.setdefault("TMPDIR", "/var/tmp")
    try:
        test_cmdline(tmp)
        test_runtime(tmp)
        test_hostile(tmp)
        test_fds(tmp)
        test_stuck_delete(tmp)
    finally:
        for p in procs:
            stop(p)
        if n_fail == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("# logs kept in " + tmp)
    print("1..%d" % n_test)
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
