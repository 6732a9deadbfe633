#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""What json-glib would read but the monitor's framing must not take,
against a running vhost-blkd over its QMP socket.  TAP.

json-glib 1.6 takes /* */ and // comments, single-quoted strings without
escapes, and a \\u escape that swallows the byte after it.  A '"' inside
any of those used to hide the brackets after it from the framing's depth
limit: sent right after the greeting, a 120000-deep array then reached
json-glib's recursive parser and overflowed the main thread's stack
(vhost-blkd died with SIGSEGV).  And text outside an object was parsed and
run as a command of its own.  Now each such line gets one GenericError
saying what is not accepted, nothing of it runs, and the same connection
is answered afterwards; QEMU's single-quoted strings work.
Env: VHOST_BLKD.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qmp_conversation import Qmp  # noqa: E402

BLKD = os.environ.get("VHOST_BLKD", "vhost-blkd")
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


def desc(r):
    return r.get("error", {}).get("desc", "")


def alive(p, tmp):
    return ok(p.poll() is None, "vhost-blkd is still running (exit status "
              "%s)" % p.poll(), open(os.path.join(tmp, "blkd.log")).read())


def run(tmp):
    qmp = os.path.join(tmp, "qmp.sock")
    log = open(os.path.join(tmp, "blkd.log"), "w")
    p = subprocess.Popen([BLKD,
                          "--chardev", "socket,id=m0,path=%s,server=on,"
                          "wait=off" % qmp, "--monitor", "chardev=m0",
                          "--blockdev", "driver=null-co,node-name=n0"],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(qmp):
            if p.poll() is not None or time.monotonic() > deadline:
                ok(False, "vhost-blkd starts",
                   open(os.path.join(tmp, "blkd.log")).read())
                return
            time.sleep(0.05)

        deep = "[" * 120000 + "]" * 120000
        cases = [
            ("{'\"': %s, '\"': 1}" % deep,
             "JSON nesting depth limit exceeded (more than 1024 levels"),
            ('{"execute": /*"*/ %s /*"*/ }' % deep,
             "JSON parse error, '/' is not JSON: comments are not accepted"),
            ('// "%s' % deep,
             "JSON parse error, '/' is not JSON: comments are not accepted"),
            ('["\\uD800",", %s "]' % deep,
             "JSON parse error, the high surrogate \\ud800 must be followed "
             "by a \\u escape of a low one"),
            ('["\\u12",", %s "]' % deep,
             "JSON parse error, \\u in a string must be followed by four "
             "hex digits"),
            # text outside an object is never a command
            ('/*"*/{"execute": "qmp_capabilities", "id": 1}/*"*/'
             '{"execute": "qmp_capabilities", "id": 2}',
             "JSON parse error, '/' is not JSON: comments are not accepted"),
            ('"x" {"execute": "qmp_capabilities", "id": 3}',
             "JSON parse error, QMP input must be a JSON object, found '\"' "
             "outside of one"),
        ]
        for text, want in cases:
            # right after the greeting, as reported
            q = Qmp(qmp)
            q.read_msg()
            q.send_raw(text)
            try:
                r = q.read_msg()
            except (OSError, EOFError) as e:
                r = {"exception": repr(e)}
            ok(r.get("error", {}).get("class") == "GenericError" and
               want in desc(r) and "id" not in r,
               "%r...: one error: %s" % (text[:30], want), r)
            if "exception" in r:
                # p.poll() may not know yet: the log says how it died
                ok(False, "vhost-blkd closed the connection",
                   open(os.path.join(tmp, "blkd.log")).read())
                return
            # the line ran nothing: negotiation is still to be done
            r = q.cmd("qmp_capabilities")
            ok(r == {"return": {}}, "%r...: the connection goes on, not "
               "negotiated yet" % text[:30], r)
            q.sock.close()

        # QEMU's single-quoted strings work, with \' and a raw "
        q = Qmp(qmp)
        q.read_msg()
        ok(q.exchange("{'execute': 'qmp_capabilities'}") ==
           [{"return": {}}], "single-quoted strings are accepted")
        r = q.exchange("{'execute': 'query-named-block-nodes', "
                       "'id': 'it\\'s \"n0\"'}")[-1]
        ok(r.get("id") == "it's \"n0\"" and
           [n.get("node-name") for n in r.get("return", [])] == ["n0"],
           "a single-quoted id with \\' and \" is echoed as QEMU does", r)
        r = q.exchange('{"execute": "x-vhost-blk-log-level", '
                       '"arguments": {"level": 010}}')[-1]
        ok("JSON parse error, malformed number: '1' after a leading 0"
           in desc(r), "010 (json-glib: octal 8) is refused", r)
        r = q.cmd("query-version")
        ok("return" in r, "the connection is answered afterwards",
           json.dumps(r))
        alive(p, tmp)
        q.exchange({"execute": "quit"})
        ok(p.wait(timeout=30) == 0, "quit: exit 0")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def main():
    tmp = tempfile.mkdtemp(prefix="vb-qmpjson.", dir="/var/tmp")
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
