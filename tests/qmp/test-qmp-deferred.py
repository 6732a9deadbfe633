#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Deferred QMP replies: the control plane keeps answering while one
blockdev-add driver=rbd waits for a Ceph monitor that never answers.  TAP.

The "monitor" is a TCP socket of this test on 127.0.0.1 that listens and
never says a word (the kernel completes the handshake, librados waits for
a banner), named by a ceph.conf of this test: no Ceph cluster is needed,
so this never skips.  While connection 1's blockdev-add is pending
(x-connect-timeout=5):
- connection 2 gets query-version and query-block-exports answered while
  connection 1 still has no reply (the order is the assertion, not a
  stopwatch: on a daemon that opens in the main thread, connection 2 is
  served only after connection 1's reply);
- the pending node's name is taken (a second blockdev-add of it fails)
  and blockdev-del of it fails, both with a clear error;
- vb-io (a vhost-user front-end) negotiates with the file export and
  writes and reads back a pattern;
then connection 1 gets the connect error (naming the image and
connect-timeout), and only after it the reply to the command it sent
next (QMP order per connection); the name is free again.  Before that,
two such blockdev-adds behind comments on one line get one error and
neither runs (the first used to run as text outside an object and the
second over its pending reply: an abort).  Last, a quit
while another such blockdev-add is pending: that command is answered
with a "shutting down" error before the connection closes, and the
daemon exits with 0.
Env: VHOST_BLKD, VB_IO.
"""
import os
import select
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


def has_input(q):
    """Connection @q has a message (buffered or on the socket) now."""
    if q.buf.strip():
        return True
    r, _, _ = select.select([q.sock], [], [], 0)
    return bool(r)


def desc(r):
    return r.get("error", {}).get("desc", "")


def run(tmp):
    img = os.path.join(tmp, "f.img")
    with open(img, "wb") as f:
        f.truncate(16 * MiB)
    sock = os.path.join(tmp, "f.sock")
    qmp = os.path.join(tmp, "qmp.sock")

    # The mute monitor: listens, never accepts nor answers.
    mute = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    mute.bind(("127.0.0.1", 0))
    mute.listen(64)
    port = mute.getsockname()[1]
    conf = os.path.join(tmp, "mute.conf")
    with open(conf, "w") as f:
        f.write("[global]\n"
                "mon host = [v2:127.0.0.1:%d]\n"
                "auth cluster required = none\n"
                "auth service required = none\n"
                "auth client required = none\n" % port)

    log = open(os.path.join(tmp, "blkd.log"), "w")
    p = subprocess.Popen([BLKD,
                          "--chardev", "socket,id=m0,path=%s,server=on,"
                          "wait=off" % qmp, "--monitor", "chardev=m0",
                          "--blockdev", "driver=file,node-name=f,filename=" +
                          img,
                          "--export", "type=vhost-user-blk,id=e,node-name=f,"
                          "addr.type=unix,addr.path=%s,writable=on" % sock],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not (os.path.exists(sock) and os.path.exists(qmp)):
            if p.poll() is not None or time.monotonic() > deadline:
                ok(False, "vhost-blkd starts",
                   open(os.path.join(tmp, "blkd.log")).read())
                return
            time.sleep(0.05)
        q1 = Qmp(qmp)
        q1.read_msg()
        ok(q1.cmd("qmp_capabilities") == {"return": {}}, "connection 1")
        q2 = Qmp(qmp)
        q2.read_msg()
        ok(q2.cmd("qmp_capabilities") == {"return": {}}, "connection 2")

        # Two rbd blockdev-adds behind comments on one line: the first used
        # to run as a command of its own (text outside an object), the
        # second over it while its reply was pending, and when the first
        # open ended vhost-blkd aborted (qmp_pending_complete's assertion).
        # Now the line is one error and neither runs.
        add = ('{"execute": "blockdev-add", "id": "%s", "arguments": '
               '{"driver": "rbd", "node-name": "%s", "pool": "rbd", '
               '"image": "img", "conf": "%s", "x-connect-timeout": 1}}')
        q1.send_raw('/*"*/' + add % ("a", "a", conf) + '/*"*/' +
                    add % ("b", "b", conf))
        try:
            r = q1.read_msg()
            r2 = q1.cmd("query-version")
        except (OSError, EOFError) as e:
            r = r2 = {"exception": repr(e)}
        ok("JSON parse error, '/' is not JSON: comments are not accepted"
           in desc(r) and "id" not in r,
           "blockdev-adds behind comments: one error", r)
        ok("return" in r2, "and nothing of them is pending on connection 1",
           r2)
        r = q2.cmd("query-named-block-nodes")
        ok([n.get("node-name") for n in r.get("return", [])] == ["f"] and
           p.poll() is None, "no node was added, the daemon runs", r)

        # Connection 1: the rbd open, and right behind it another command.
        q1.send_raw('{"execute": "blockdev-add", "id": "add", "arguments": '
                    '{"driver": "rbd", "node-name": "dead", "pool": "rbd", '
                    '"image": "img", "conf": "%s", "x-connect-timeout": 5}}'
                    % conf)
        q1.send_raw('{"execute": "query-version", "id": "next"}')
        t0 = time.monotonic()

        r = q2.cmd("query-version")
        t_ver = time.monotonic() - t0
        pending = not has_input(q1)
        ok("return" in r and pending,
           "query-version on connection 2 answered while connection 1's "
           "blockdev-add is pending (%.3f s)" % t_ver, r)
        print("# query-version answered %.3f s after the blockdev-add"
              % t_ver)
        r = q2.cmd("query-block-exports")
        ok("return" in r and r["return"] and
           r["return"][0].get("id") == "e" and not has_input(q1),
           "query-block-exports on connection 2 answered meanwhile", r)

        r = q2.cmd("blockdev-add", driver="null-co", **{"node-name": "dead"})
        ok("Duplicate nodes with node-name='dead'" in desc(r) and
           "still opening" in desc(r),
           "the pending node's name is taken", r)
        r = q2.cmd("blockdev-del", **{"node-name": "dead"})
        ok("still being opened" in desc(r),
           "blockdev-del of the pending node fails clearly", r)
        r = q2.cmd("query-named-block-nodes")
        ok("return" in r and
           [n.get("node-name") for n in r["return"]] == ["f"],
           "the pending node is not listed yet", r)

        vr = subprocess.run([VBIO, sock, "fill:0:65536:7=any",
                             "read:0:65536:7"], capture_output=True,
                            text=True, timeout=120)
        t_io = time.monotonic() - t0
        still = not has_input(q1)
        ok(vr.returncode == 0, "a vhost-user front-end negotiates with the "
           "file export and verifies a write (%.3f s, blockdev-add %s)"
           % (t_io, "still pending" if still else "already answered"),
           vr.stdout + vr.stderr)

        # Connection 1: the error, then (only then) its next command.
        q1.sock.settimeout(120)
        r = q1.read_msg()
        t_add = time.monotonic() - t0
        print("# blockdev-add answered after %.3f s" % t_add)
        ok(r.get("id") == "add" and
           "rbd:rbd/img: cannot connect to the Ceph cluster: no monitor of "
           + conf + " answered within 5 s (connect-timeout)" in desc(r),
           "the pending blockdev-add fails with the connect error", r)
        r = q1.read_msg()
        ok(r.get("id") == "next" and "return" in r,
           "connection 1's next command is answered after it", r)
        r = q2.cmd("blockdev-add", driver="null-co", **{"node-name": "dead"})
        ok(r == {"return": {}}, "the name is free after the failure", r)
        r = q2.cmd("blockdev-del", **{"node-name": "dead"})
        ok(r == {"return": {}}, "and that node is deleted", r)

        # quit while a blockdev-add waits for the mute monitor: the pending
        # command gets an error reply, then the connection closes (it used
        # to close with no reply at all).
        q1.send_raw('{"execute": "blockdev-add", "id": "add2", "arguments": '
                    '{"driver": "rbd", "node-name": "late", "pool": "rbd", '
                    '"image": "img", "conf": "%s", "x-connect-timeout": 600}}'
                    % conf)
        r = q2.cmd("query-version")
        ok("return" in r and not has_input(q1),
           "a second blockdev-add is pending", r)
        r = q2.cmd("quit")
        ok(r == {"return": {}}, "quit on connection 2", r)
        try:
            r = q1.read_msg()
            while "event" in r:
                r = q1.read_msg()
        except Exception as e:  # noqa: BLE001 - the end of file is the bug
            r = {"exception": repr(e)}
        ok(r.get("id") == "add2" and
           "the daemon is shutting down: 'blockdev-add' had not finished"
           in desc(r),
           "the pending blockdev-add is answered with an error on quit", r)
        rc = p.wait(timeout=30)
        ok(rc == 0, "vhost-blkd exits with 0 (%s)" % rc,
           open(os.path.join(tmp, "blkd.log")).read())
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        mute.close()


def main():
    tmp = tempfile.mkdtemp(prefix="vb-qmpdef.", dir="/var/tmp")
    try:
        run(tmp)
    finally:
        if n_fail == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("# logs kept in " + tmp)
    print("1..%d" % n_test)
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
