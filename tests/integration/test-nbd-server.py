#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""vhost-blkd's NBD server export against clients we did not write, and
against hostile ones.  TAP.

- qemu-img info/convert/compare, qemu-io write and read back, over
  nbd+unix:// and nbd://127.0.0.1:PORT/NAME;
- nbdinfo (--list: NBD_OPT_LIST; --map: base:allocation of a sparse raw
  file), nbdcopy both ways;
- writable=off: writes, trims and write-zeroes get EPERM;
- a raw client (below) sending bad handshakes, oversized options and
  lengths, out-of-range and overflowing offsets, unknown commands, a
  WRITE cut off mid-payload, a WRITE over the maximum payload (dropped,
  EINVAL), 64 pipelined requests: each gets its error
  or a closed connection, the image is not written outside its bounds,
  and the server keeps serving the others;
- the specification's finer points: command flags only where they
  apply (EINVAL elsewhere), zero-length READ, NBD_CMD_CACHE, DISC with
  requests in flight, a failing SET_META_CONTEXT clearing the contexts,
  meta context wildcards, export name lengths, INFO then GO;
- a cache.direct=on node: the minimum block size announced is its
  O_DIRECT alignment, an unaligned READ gets EINVAL, qemu-io's
  unaligned write and read work (its client aligns);
- FAST_ZERO with NO_HOLE on tmpfs (no FALLOC_FL_ZERO_RANGE: the zeroes
  would be written): ENOTSUP, nothing written;
- a driver=nbd node on nbdkit's nozero filter: the export does not
  offer WRITE_ZEROES or FAST_ZERO, and refuses one with EINVAL;
- QMP: nbd-server-start/stop, block-export-add type=nbd, query-block-
  exports, block-export-del (safe refused while connected, hard), the
  node in use, BLOCK_EXPORT_DELETED;
- an inet listener on a non-loopback address without TLS is refused;
- TLS (certtool certificates made here): qemu-img with tls-creds-x509
  connects, a plain client is refused (TLS required), a client whose
  certificate another CA signed is refused, a client not on allow= is
  refused; tls-creds-psk with keys.psk;
- tls-authz: authz-simple lets one certificate DN in and refuses
  another (named in the log with the authz object) while the server
  keeps serving; authz-list with an exact deny rule before a glob allow
  rule and policy=deny; a PSK username allowed and one refused;
  authz-list-file re-read when it changes, every client refused while
  it does not parse, bad files refused at object-add;
  object-del of the authz object in use refused; qom-list/qom-get of
  each authz type's properties, qom-set of authz-simple identity on the
  running server (the old identity refused, the new one let in), of
  authz-list rules and policy, and bad values refused with nothing
  changed; a 3000-character DN
  and a DN with RFC 4514 escapes; tls-authz without tls-creds, with
  verify-peer=off, or naming no object: refused.
Env: VHOST_BLKD.  Needs qemu-img, qemu-io, nbdinfo, nbdcopy, certtool,
nbdkit (each missing one skips its cases).
"""
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "qmp"))
from qmp_conversation import Qmp  # noqa: E402

BLKD = os.environ.get("VHOST_BLKD", "vhost-blkd")
MiB = 1 << 20
n_test = 0
n_fail = 0
procs = []

NBD_MAGIC = 0x4e42444d41474943
OPTS_MAGIC = 0x49484156454F5054
REP_MAGIC = 0x0003e889045565a9
REQ_MAGIC = 0x25609513
SIMPLE_MAGIC = 0x67446698
STRUCT_MAGIC = 0x668e33ef
OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_STARTTLS = 1, 2, 3, 5
OPT_INFO, OPT_GO, OPT_STRUCTURED, OPT_SET_META = 6, 7, 8, 10
REP_ACK, REP_INFO, REP_META = 1, 3, 4
ERR = 1 << 31
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH = 0, 1, 2, 3
CMD_TRIM, CMD_CACHE, CMD_ZEROES, CMD_BLOCK_STATUS = 4, 5, 6, 7
FLAG_FUA, FLAG_NO_HOLE, FLAG_DF, FLAG_REQ_ONE, FLAG_FAST_ZERO = 1, 2, 4, 8, 16
TF_SEND_DF, TF_SEND_CACHE = 1 << 7, 1 << 10
EPERM, EINVAL, ENOSPC, ENOTSUP = 1, 22, 28, 95


def ok(cond, name, detail=""):
    global n_test, n_fail
    n_test += 1
    if not cond:
        n_fail += 1
        for line in str(detail).splitlines()[-20:]:
            print("# " + line)
    print("%s %d - %s" % ("ok" if cond else "not ok", n_test, name))
    sys.stdout.flush()
    return cond


def skip(name, why):
    global n_test
    n_test += 1
    print("ok %d - %s # SKIP %s" % (n_test, name, why))


def run(*args, timeout=60):
    r = subprocess.run(list(args), capture_output=True, text=True,
                       timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def have(prog):
    return shutil.which(prog) is not None


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Daemon:
    def __init__(self, tmp, name, args):
        self.tmp = tmp
        self.logpath = os.path.join(tmp, name + ".log")
        self.qmp_path = os.path.join(tmp, name + "-qmp.sock")
        log = open(self.logpath, "w")
        self.p = subprocess.Popen(
            [BLKD, "--chardev", "socket,id=m0,path=%s,server=on,wait=off" %
             self.qmp_path, "--monitor", "chardev=m0"] + args,
            stdout=log, stderr=subprocess.STDOUT)
        procs.append(self.p)
        self.q = None

    def log(self):
        return open(self.logpath).read()

    def monitor(self):
        """Connect to QMP: once it answers, every --nbd-server and
        --export of the command line is up."""
        if self.q is None:
            self.q = Qmp(self.qmp_path)
            self.q.read_msg()
            r = qcmd(self.q, "qmp_capabilities")
            assert r == {"return": {}}, r
        return self.q

    def port(self):
        self.monitor()
        m = re.search(r"NBD server listening on \S+ port (\d+)", self.log())
        return int(m.group(1)) if m else None

    def stop(self):
        stop(self.p)


def qcmd(q, name, args=None):
    m = {"execute": name}
    if args:
        m["arguments"] = args
    return [x for x in q.exchange(m) if "event" not in x][-1]


# ---- a raw NBD client -----------------------------------------------------

class Raw:
    def __init__(self, path=None, port=None):
        if path:
            self.s = socket.socket(socket.AF_UNIX)
            self.s.connect(path)
        else:
            self.s = socket.create_connection(("127.0.0.1", port))
        self.s.settimeout(30)

    def recvn(self, n):
        b = b""
        while len(b) < n:
            d = self.s.recv(n - len(b))
            if not d:
                raise EOFError("closed after %d of %d bytes" % (len(b), n))
            b += d
        return b

    def closed(self):
        """The server closed the connection (EOF, or a reset)."""
        try:
            while True:
                d = self.s.recv(65536)
                if not d:
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def greet(self, flags=3):
        magic, opts, hflags = struct.unpack(">QQH", self.recvn(18))
        assert magic == NBD_MAGIC and opts == OPTS_MAGIC, (magic, opts)
        self.s.sendall(struct.pack(">I", flags))
        return hflags

    def opt(self, opt, data=b""):
        self.s.sendall(struct.pack(">QII", OPTS_MAGIC, opt, len(data)) + data)

    def reply(self):
        magic, opt, typ, ln = struct.unpack(">QIII", self.recvn(20))
        assert magic == REP_MAGIC, hex(magic)
        return opt, typ, self.recvn(ln)

    def replies(self):
        out = []
        while True:
            r = self.reply()
            out.append(r)
            if r[1] == REP_ACK or r[1] & ERR:
                return out

    def go(self, name, structured=True, meta=False):
        if structured:
            self.opt(OPT_STRUCTURED)
            assert self.reply()[1] == REP_ACK
        if meta:
            q = b"base:allocation"
            n = name.encode()
            self.opt(OPT_SET_META, struct.pack(">I", len(n)) + n +
                     struct.pack(">II", 1, len(q)) + q)
            self.replies()
        n = name.encode()
        self.opt(OPT_GO, struct.pack(">I", len(n)) + n + struct.pack(">H", 0))
        size = flags = None
        for _, typ, data in self.replies():
            if typ & ERR:
                return typ, data
            if typ == REP_INFO and struct.unpack(">H", data[:2])[0] == 0:
                _, size, flags = struct.unpack(">HQH", data)
        self.size, self.tflags = size, flags
        self.structured = structured
        return size, flags

    def req(self, cmd, offset, length, data=b"", flags=0, cookie=1):
        self.s.sendall(struct.pack(">IHHQQI", REQ_MAGIC, flags, cmd, cookie,
                                   offset, length) + data)

    def answer(self, read_len=0):
        """(error, cookie, payload) of one reply, simple or structured
        (one chunk: every reply of this server is a single DONE chunk)."""
        magic = struct.unpack(">I", self.recvn(4))[0]
        if magic == SIMPLE_MAGIC:
            err, cookie = struct.unpack(">IQ", self.recvn(12))
            return err, cookie, self.recvn(read_len) if not err else b""
        assert magic == STRUCT_MAGIC, hex(magic)
        flags, typ, cookie, ln = struct.unpack(">HHQI", self.recvn(16))
        payload = self.recvn(ln)
        assert flags & 1, "one chunk, DONE"
        if typ & 0x8000:
            return struct.unpack(">I", payload[:4])[0], cookie, b""
        return 0, cookie, payload

    def close(self):
        self.s.close()


# ---- cases ---------------------------------------------------------------

def uri_unix(name, sock):
    return "nbd+unix:///%s?socket=%s" % (name, sock)


def test_interop(tmp, d, sock, img, port):
    u = uri_unix("disk0", sock)
    if have("qemu-img"):
        rc, out = run("qemu-img", "info", "--output=json", u)
        ok(rc == 0 and json.loads(out)["virtual-size"] == 64 * MiB,
           "qemu-img info nbd+unix://", out)
        rc, out = run("qemu-img", "info", "--output=json",
                      "nbd://127.0.0.1:%d/disk0" % port)
        ok(rc == 0 and json.loads(out)["virtual-size"] == 64 * MiB,
           "qemu-img info nbd://127.0.0.1:PORT/NAME", out)
    else:
        skip("qemu-img info", "no qemu-img")
    if have("qemu-io"):
        rc, out = run("qemu-io", "-f", "raw", "-c", "write -P 0xab 0 64k",
                      "-c", "read -P 0xab 0 64k", u)
        ok(rc == 0 and "read 65536/65536" in out and "fail" not in out
           .lower(), "qemu-io writes then reads back 0xab (unix)", out)
        rc, out = run("qemu-io", "-f", "raw",
                      "-c", "write -f -P 0x5c 1M 128k",
                      "-c", "write -z -u 2M 64k",
                      "-c", "read -P 0x5c 1M 128k",
                      "-c", "read -P 0 2M 64k",
                      "-c", "flush",
                      "nbd://127.0.0.1:%d/disk0" % port)
        ok(rc == 0 and out.count("read ") == 2 and "fail" not in
           out.lower(), "qemu-io FUA write, write-zeroes, flush (inet)",
           out)
        with open(img, "rb") as f:
            f.seek(1 * MiB)
            ok(f.read(128 * 1024) == b"\x5c" * 128 * 1024,
               "the writes are in the image file")
    else:
        skip("qemu-io", "no qemu-io")
    if have("nbdinfo"):
        rc, out = run("nbdinfo", "--list", "nbd+unix:///?socket=" + sock)
        ok(rc == 0 and 'export="disk0"' in out and 'export="ro0"' in out,
           "nbdinfo --list: both exports (NBD_OPT_LIST)", out)
        rc, out = run("nbdinfo", "--map", "--json", u)
        ok(rc == 0, "nbdinfo --map", out)
        if rc == 0:
            m = json.loads(out)
            data0 = [e for e in m if e["offset"] == 0]
            holes = [e for e in m if e["offset"] >= 8 * MiB and
                     e["type"] & 3 == 3]
            covered = sum(e["length"] for e in m)
            ok(data0 and data0[0]["type"] & 1 == 0 and covered == 64 * MiB
               and holes and holes[-1]["offset"] + holes[-1]["length"] ==
               64 * MiB, "--map: data at 0, the sparse tail hole,zero",
               out)
        rc, out = run("nbdinfo", "--json", uri_unix("ro0", sock))
        ok(rc == 0 and json.loads(out)["exports"][0]["is_read_only"],
           "nbdinfo: writable=off export is read-only", out)
    else:
        skip("nbdinfo", "no nbdinfo")
    if have("nbdcopy"):
        src = os.path.join(tmp, "src.raw")
        back = os.path.join(tmp, "back.raw")
        with open(src, "wb") as f:
            f.write(os.urandom(3 * MiB))
            f.truncate(64 * MiB)
        rc1, out1 = run("nbdcopy", src, u)
        rc2, out2 = run("nbdcopy", u, back)
        same = rc1 == 0 and rc2 == 0 and \
            open(src, "rb").read() == open(back, "rb").read()
        ok(same, "nbdcopy to the export and back: identical", out1 + out2)
        if have("qemu-img"):
            rc, out = run("qemu-img", "compare", "-f", "raw", "-F", "raw",
                          src, u)
            ok(rc == 0, "qemu-img compare file vs export", out)
            conv = os.path.join(tmp, "conv.qcow2")
            rc, out = run("qemu-img", "convert", "-f", "raw", "-O", "qcow2",
                          u, conv)
            rc2, out2 = run("qemu-img", "compare", "-f", "qcow2", "-F",
                            "raw", conv, src)
            ok(rc == 0 and rc2 == 0, "qemu-img convert from the export",
               out + out2)
    else:
        skip("nbdcopy", "no nbdcopy")


def test_readonly(sock, ro_img):
    c = Raw(path=sock)
    c.greet()
    size, flags = c.go("ro0")
    ok(flags & 2, "writable=off: NBD_FLAG_READ_ONLY")
    c.req(CMD_WRITE, 0, 4096, b"\xee" * 4096, cookie=7)
    e1 = c.answer()
    c.req(CMD_ZEROES, 0, 4096, cookie=8)
    e2 = c.answer()
    c.req(CMD_TRIM, 0, 4096, cookie=9)
    e3 = c.answer()
    ok(e1[:2] == (EPERM, 7) and e2[:2] == (EPERM, 8) and
       e3[:2] == (EPERM, 9), "writable=off: write, zeroes, trim: EPERM",
       (e1, e2, e3))
    c.req(CMD_WRITE, 0, 32 * MiB, b"\xee" * 32 * MiB, cookie=11)
    e4 = c.answer()
    ok(e4[:2] == (EPERM, 11), "writable=off: a 32 MiB write's payload is "
       "dropped, EPERM, the connection goes on", e4)
    c.req(CMD_READ, 0, 4096, cookie=10)
    e = c.answer(4096)
    ok(e[0] == 0 and e[2] == struct.pack(">Q", 0) + b"\x11" * 4096,
       "writable=off: reads work (structured)", e)
    c.close()


def test_hostile(sock, img):
    size_before = os.path.getsize(img)

    # Handshakes
    c = Raw(path=sock)
    c.greet(flags=0)                    # not fixed newstyle
    ok(c.closed(), "client flags without FIXED_NEWSTYLE: closed")
    c = Raw(path=sock)
    c.greet(flags=0xff00)
    ok(c.closed(), "unknown client flags: closed")
    c = Raw(path=sock)
    c.greet()
    c.s.sendall(struct.pack(">QII", 0x1234, OPT_LIST, 0))
    ok(c.closed(), "option with a bad magic: closed")
    c = Raw(path=sock)
    c.greet()
    c.s.sendall(struct.pack(">QII", OPTS_MAGIC, OPT_GO, 0xfffffff0))
    ok(c.closed(), "option of 4 GiB: closed, nothing buffered")
    c = Raw(path=sock)
    c.greet()
    c.opt(99, b"x" * 100)
    r1 = c.reply()
    c.opt(OPT_GO, struct.pack(">I", 0xffff) + b"ab")
    r2 = c.reply()
    c.opt(OPT_GO, struct.pack(">I", 4) + b"nope" + struct.pack(">H", 0))
    r3 = c.reply()
    c.opt(OPT_INFO, struct.pack(">I", 5) + b"disk0" + struct.pack(">H",
                                                                  1000))
    r4 = c.reply()
    c.opt(OPT_SET_META, b"\0" * 12)     # before STRUCTURED_REPLY
    r5 = c.reply()
    c.opt(OPT_STRUCTURED)
    c.reply()
    c.opt(OPT_SET_META, struct.pack(">I", 5) + b"disk0" +
          struct.pack(">II", 3, 0x7fffffff))
    r6 = c.reply()
    c.opt(OPT_STARTTLS)
    r7 = c.reply()
    ok(r1[1] == ERR | 1 and r2[1] == ERR | 3 and r3[1] == ERR | 6 and
       r4[1] == ERR | 3 and r5[1] == ERR | 3 and r6[1] == ERR | 3 and
       r7[1] == ERR | 2,
       "unknown option, bad lengths, unknown export, meta before "
       "structured, STARTTLS without TLS: each its error reply",
       (r1, r2, r3, r4, r5, r6, r7))
    c.opt(OPT_ABORT)
    c.reply()
    ok(c.closed(), "NBD_OPT_ABORT: acknowledged and closed")
    c = Raw(path=sock)
    c.greet()
    c.s.sendall(struct.pack(">QII", OPTS_MAGIC, OPT_LIST, 100) + b"x" * 10)
    c.close()                           # mid-option

    # Transmission
    c = Raw(path=sock)
    c.greet()
    size, _ = c.go("disk0", meta=True)
    res = []
    c.req(CMD_READ, size - 512, 1024, cookie=1)
    res.append(c.answer())
    c.req(CMD_READ, 2 ** 64 - 512, 1024, cookie=2)
    res.append(c.answer())
    c.req(CMD_READ, 0, 0xffffffff, cookie=3)
    res.append(c.answer())
    c.req(CMD_WRITE, size - 512, 4096, b"\xcc" * 4096, cookie=4)
    res.append(c.answer())
    c.req(CMD_WRITE, 2 ** 64 - 4096, 8192, b"\xcc" * 8192, cookie=5)
    res.append(c.answer())
    c.req(CMD_ZEROES, size, 4096, cookie=6)
    res.append(c.answer())
    c.req(CMD_TRIM, size - 4096, 8192, cookie=7)
    res.append(c.answer())
    c.req(0x55, 0, 4096, cookie=8)
    res.append(c.answer())
    c.req(CMD_READ, 0, 4096, flags=0x8000, cookie=9)
    res.append(c.answer())
    c.req(CMD_BLOCK_STATUS, size - 4096, 8192, cookie=10)
    res.append(c.answer())
    want = [(EINVAL, 1), (EINVAL, 2), (EINVAL, 3), (ENOSPC, 4),
            (ENOSPC, 5), (ENOSPC, 6), (EINVAL, 7), (EINVAL, 8), (EINVAL, 9),
            (EINVAL, 10)]
    ok([r[:2] for r in res] == want,
       "out-of-range, overflowing, oversized, unknown command and flag: "
       "EINVAL/ENOSPC, the connection goes on", res)
    c.req(CMD_READ, 0, 4096, cookie=11)
    r = c.answer()
    ok(r[0] == 0 and r[1] == 11 and len(r[2]) == 8 + 4096,
       "the same connection still reads")
    # Pipelined: more than the server's slots, replies read afterwards
    for i in range(64):
        c.req(CMD_READ, i * 4096, 4096, cookie=100 + i)
    cookies = sorted(c.answer()[1] for _ in range(64))
    ok(cookies == list(range(100, 164)), "64 pipelined reads all answered")
    c.req(CMD_BLOCK_STATUS, 0, 64 * MiB, cookie=200)
    r = c.answer()
    n_ext = (len(r[2]) - 4) // 8
    ext = [struct.unpack(">II", r[2][4 + 8 * i:12 + 8 * i])
           for i in range(n_ext)]
    ok(r[0] == 0 and sum(e[0] for e in ext) <= 64 * MiB and n_ext >= 1,
       "BLOCK_STATUS answered with extents", ext)
    try:
        c.req(CMD_WRITE, 0, 33 * MiB, b"\xdd" * 33 * MiB, cookie=201)
        r = c.answer()
    except (OSError, EOFError) as e:
        r = (str(e), None)
    ok(r[:2] == (EINVAL, 201), "WRITE over the 32 MiB maximum payload: "
       "its payload dropped, EINVAL", r)
    try:
        c.req(CMD_READ, 0, 4096, cookie=202)
        r = c.answer()
    except (OSError, EOFError) as e:
        r = (str(e), None, b"")
    with open(img, "rb") as f:
        first = f.read(4096)
    ok(r[:2] == (0, 202) and r[2][8:] == first and first != b"\xdd" * 4096,
       "... the connection goes on, nothing of it written", r[:2])
    c = Raw(path=sock)
    c.greet()
    c.go("disk0")
    c.s.sendall(struct.pack(">IHHQQI", 0xdeadbeef, 0, 0, 1, 0, 512))
    ok(c.closed(), "request with a bad magic: closed")
    c = Raw(path=sock)
    c.greet()
    c.go("disk0", structured=False)
    c.req(CMD_WRITE, 4 * MiB, 1 * MiB, b"\x77" * 1000)
    c.close()                           # mid-write
    # Clients that stall: one silent in the handshake, one that stops
    # half-way through a WRITE's payload, one that pipelines reads and
    # never reads the answers.  Others are served meanwhile.
    silent = Raw(path=sock)
    stalled = Raw(path=sock)
    stalled.greet()
    stalled.go("disk0")
    stalled.req(CMD_WRITE, 0, 1 * MiB, b"\x99" * 1000)
    deaf = Raw(path=sock)
    deaf.greet()
    deaf.go("disk0")
    for i in range(64):
        deaf.req(CMD_READ, 0, 1 * MiB, cookie=i)
    other = Raw(path=sock)
    other.greet()
    other.go("disk0")
    other.req(CMD_READ, 0, 4096, cookie=77)
    r = other.answer()
    ok(r[0] == 0 and r[1] == 77, "served while a client is silent in the "
       "handshake, one stalls mid-WRITE and one never reads", r)
    for x in (silent, stalled, deaf, other):
        x.close()
    c = Raw(path=sock)
    c.greet()
    c.go("disk0", structured=False)
    c.req(CMD_READ, 0, 4096, cookie=5)
    r = c.answer(4096)
    with open(img, "rb") as f:
        want = f.read(4096)
    ok(r[0] == 0 and r[1] == 5 and r[2] == want,
       "after all that, a new client reads (simple replies)")
    c.req(CMD_DISC, 0, 0)
    ok(c.closed(), "NBD_CMD_DISC: closed")
    ok(os.path.getsize(img) == size_before,
       "the image file did not grow (no write past its end)")


def meta_opt(c, opt, name, queries):
    n = name.encode()
    data = struct.pack(">I", len(n)) + n + struct.pack(">I", len(queries))
    for q in queries:
        data += struct.pack(">I", len(q)) + q.encode()
    c.opt(opt, data)
    return c.replies()


def test_spec(sock, img):
    """What the NBD specification asks and a client written from it
    checks, where a server may get it wrong without any client we have
    noticing."""
    c = Raw(path=sock)
    c.greet()
    size, tflags = c.go("disk0", meta=True)
    ok(tflags & TF_SEND_CACHE, "NBD_FLAG_SEND_CACHE advertised", tflags)
    res = []
    # FUA is valid on every command; the others only where documented
    for cmd, flags in ((CMD_READ, FLAG_NO_HOLE), (CMD_READ, FLAG_REQ_ONE),
                       (CMD_READ, FLAG_FAST_ZERO), (CMD_WRITE, FLAG_DF),
                       (CMD_WRITE, FLAG_NO_HOLE), (CMD_FLUSH, FLAG_REQ_ONE),
                       (CMD_TRIM, FLAG_FAST_ZERO),
                       (CMD_ZEROES, FLAG_DF), (CMD_BLOCK_STATUS, FLAG_DF),
                       (CMD_CACHE, FLAG_NO_HOLE)):
        data = b"\xee" * 4096 if cmd == CMD_WRITE else b""
        c.req(cmd, 0, 4096, data, flags=flags, cookie=len(res))
        res.append(c.answer()[:2])
    ok(res == [(EINVAL, i) for i in range(len(res))],
       "a flag on a command it does not apply to: EINVAL", res)
    with open(img, "rb") as f:
        ok(f.read(4096) != b"\xee" * 4096, "... and nothing written")
    c.req(CMD_READ, 0, 4096, flags=FLAG_FUA | FLAG_DF, cookie=20)
    r = c.answer()
    ok(r[:2] == (0, 20) and len(r[2]) == 8 + 4096,
       "READ with FUA and DF (structured): accepted", r[:2])
    c.req(CMD_READ, 4096, 0, cookie=21)
    r = c.answer()
    ok(r == (0, 21, b""), "zero-length READ (structured): success, an "
       "empty NBD_REPLY_TYPE_NONE chunk", r)
    c.req(CMD_CACHE, 0, size, cookie=22)
    r1 = c.answer()
    c.req(CMD_CACHE, size - 512, 4096, cookie=23)
    r2 = c.answer()
    ok(r1[:2] == (0, 22) and r2[:2] == (EINVAL, 23),
       "NBD_CMD_CACHE: success, EINVAL past the end", (r1, r2))
    c.req(CMD_READ, 0, 512, cookie=24)
    ok(c.answer()[:2] == (0, 24), "... the connection goes on")
    # NBD_CMD_DISC with requests in flight: they are answered first
    for i in range(8):
        c.req(CMD_READ, i * MiB, MiB, cookie=100 + i)
    c.req(CMD_DISC, 0, 0)
    got = []
    try:
        for i in range(8):
            got.append(c.answer()[:2])
    except (EOFError, OSError) as e:
        got.append(str(e))
    ok(got == [(0, 100 + i) for i in range(8)] and c.closed(),
       "NBD_CMD_DISC after 8 reads: all 8 answered, then closed", got)

    c = Raw(path=sock)
    c.greet()
    c.go("disk0", structured=False)
    c.req(CMD_READ, 0, 512, flags=FLAG_DF, cookie=1)
    r1 = c.answer(512)
    c.req(CMD_READ, 0, 0, cookie=2)
    r2 = c.answer(0)
    c.req(CMD_READ, 0, 512, cookie=3)
    r3 = c.answer(512)
    with open(img, "rb") as f:
        first = f.read(512)
    ok(r1[:2] == (EINVAL, 1) and r2 == (0, 2, b"") and
       r3 == (0, 3, first), "simple replies: DF (not negotiated) EINVAL, "
       "a zero-length READ a bare success, then a read", (r1, r2, r3[:2]))
    c.close()

    # A failing NBD_OPT_SET_META_CONTEXT still replaces the contexts an
    # earlier one selected: BLOCK_STATUS is refused after it.
    c = Raw(path=sock)
    c.greet()
    c.opt(OPT_STRUCTURED)
    c.reply()
    r1 = meta_opt(c, OPT_SET_META, "disk0", ["base:allocation"])
    r2 = meta_opt(c, OPT_SET_META, "nope", ["base:allocation"])
    ok(r1[0][1] == REP_META and r1[-1][1] == REP_ACK and
       r2[-1][1] == ERR | 6, "SET_META_CONTEXT: base:allocation, then "
       "one on an unknown export: ERR_UNKNOWN", (r1, r2))
    c.go("disk0", structured=False)
    c.req(CMD_BLOCK_STATUS, 0, 4096, cookie=3)
    r = c.answer()
    ok(r[:2] == (EINVAL, 3), "... BLOCK_STATUS after it: EINVAL", r)
    c.close()
    # Wildcards: "base:" lists base:allocation, selects nothing; an
    # unknown namespace is ignored
    c = Raw(path=sock)
    c.greet()
    c.opt(OPT_STRUCTURED)
    c.reply()
    r1 = meta_opt(c, 9, "disk0", ["base:"])
    r2 = meta_opt(c, 9, "disk0", ["qemu:allocation-depth"])
    r3 = meta_opt(c, OPT_SET_META, "disk0",
                  ["qemu:allocation-depth", "base:allocation"])
    ok([x[1] for x in r1] == [REP_META, REP_ACK] and
       r1[0][2][4:] == b"base:allocation" and
       [x[1] for x in r2] == [REP_ACK] and
       [x[1] for x in r3] == [REP_META, REP_ACK] and
       r3[0][2][4:] == b"base:allocation",
       "LIST_META_CONTEXT base: and an unknown context; SET with both",
       (r1, r2, r3))
    c.opt(OPT_STRUCTURED)
    r = c.reply()
    ok(r[1] == ERR | 3, "NBD_OPT_STRUCTURED_REPLY twice: ERR_INVALID", r)
    # Export names: the empty (default) one is unknown here; a 4096-byte
    # one is a valid name that is not there; 4097 bytes is too long
    for nm, want in (("", ERR | 6), ("a" * 4096, ERR | 6),
                     ("a" * 4097, ERR | 3)):
        n = nm.encode()
        c.opt(OPT_INFO, struct.pack(">I", len(n)) + n + struct.pack(">H", 0))
        r = c.replies()
        ok(len(r) == 1 and r[0][1] == want, "NBD_OPT_INFO, a %d-byte "
           "export name: error %d" % (len(nm), want & 0xff), r)
    # INFO then GO on the same connection
    c.opt(OPT_INFO, struct.pack(">I", 5) + b"disk0" + struct.pack(">H", 0))
    r1 = c.replies()
    size, _ = c.go("disk0", structured=False)
    c.req(CMD_READ, 0, 512, cookie=5)
    r = c.answer(512)
    ok(r1[-1][1] == REP_ACK and size == 64 * MiB and r[:2] == (0, 5),
       "NBD_OPT_INFO then NBD_OPT_GO", (r1, r[:2]))
    c.close()


def test_block_size(tmp):
    """A node under O_DIRECT takes only aligned reads and writes (the
    block layer does no read-modify-write): the export must announce
    that alignment as its minimum block size, which clients then
    honour."""
    img = os.path.join(tmp, "dio.raw")
    with open(img, "wb") as f:
        f.write(b"\x33" * MiB)
        f.truncate(4 * MiB)
    sock = os.path.join(tmp, "dio.sock")
    d = Daemon(tmp, "dio", [
        "--blockdev", "driver=file,node-name=dio0,cache.direct=on,"
        "filename=" + img,
        "--nbd-server", "addr.type=unix,addr.path=" + sock,
        "--export", "type=nbd,id=e0,node-name=dio0,writable=on"])
    try:
        d.monitor()
    except OSError:
        d.stop()
        skip("minimum block size under O_DIRECT", "no O_DIRECT here: " +
             d.log()[-200:])
        return
    c = Raw(path=sock)
    c.greet()
    c.opt(OPT_INFO, struct.pack(">I", 4) + b"dio0" + struct.pack(">HH", 1, 3))
    sizes = None
    for _, typ, data in c.replies():
        if typ == REP_INFO and struct.unpack(">H", data[:2])[0] == 3:
            sizes = struct.unpack(">III", data[2:14])
    ok(sizes and sizes[0] >= 512 and sizes[0] & (sizes[0] - 1) == 0 and
       sizes[1] >= sizes[0] and sizes[2] % sizes[0] == 0,
       "cache.direct=on: NBD_INFO_BLOCK_SIZE minimum is the O_DIRECT "
       "alignment (512 or more)", sizes)
    c.go("dio0", structured=False)
    c.req(CMD_READ, 1, 100, cookie=1)
    r1 = c.answer(100)
    c.req(CMD_READ, 0, 4096, cookie=2)
    r2 = c.answer(4096)
    ok(r1[:2] == (EINVAL, 1) and r2 == (0, 2, b"\x33" * 4096),
       "... an unaligned READ: EINVAL, the connection goes on", (r1, r2[:2]))
    c.close()
    if have("qemu-io"):
        rc, out = run("qemu-io", "-f", "raw", "-c", "write -P 0xcc 1000 100",
                      "-c", "read -P 0xcc 1000 100", "-c",
                      "read -P 0x33 1100 1000", uri_unix("dio0", sock))
        ok(rc == 0 and out.count("read ") == 2 and
           "fail" not in out.lower(), "... qemu-io writes and reads 100 "
           "bytes at 1000 (QEMU's client aligns to the minimum)", out)
    else:
        skip("qemu-io on the O_DIRECT export", "no qemu-io")
    d.stop()


def zero_range_works(path):
    """Does @path's file system take FALLOC_FL_ZERO_RANGE?"""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long,
                               ctypes.c_long]
    fd = os.open(path, os.O_RDWR)
    try:
        return libc.fallocate(fd, 0x10 | 0x01, 0, 4096) == 0
    finally:
        os.close(fd)


def test_fast_zero(tmp):
    """FAST_ZERO where the zeroes would be written as buffers (tmpfs has
    no FALLOC_FL_ZERO_RANGE, so NO_HOLE zeroes are written): ENOTSUP at
    once, as the specification asks; where a hole will do, success."""
    name = "FAST_ZERO with NO_HOLE on tmpfs: ENOTSUP"
    if not os.path.isdir("/dev/shm"):
        skip(name, "no /dev/shm")
        return
    shm = tempfile.mkdtemp(prefix="vb-nbd-", dir="/dev/shm")
    try:
        img = os.path.join(shm, "z.raw")
        with open(img, "wb") as f:
            f.write(b"\x44" * MiB)
            f.truncate(4 * MiB)
        if zero_range_works(img):
            skip(name, "this tmpfs has FALLOC_FL_ZERO_RANGE")
            return
        sock = os.path.join(tmp, "shm.sock")
        d = Daemon(tmp, "shm", [
            "--blockdev", "driver=file,node-name=z0,filename=" + img,
            "--nbd-server", "addr.type=unix,addr.path=" + sock,
            "--export", "type=nbd,id=e0,node-name=z0,writable=on"])
        d.monitor()
        c = Raw(path=sock)
        c.greet()
        c.go("z0", structured=False)
        c.req(CMD_ZEROES, 0, 64 * 1024, flags=FLAG_FAST_ZERO | FLAG_NO_HOLE,
              cookie=1)
        r1 = c.answer()
        c.req(CMD_READ, 0, 4096, cookie=2)
        r2 = c.answer(4096)
        ok(r1[:2] == (ENOTSUP, 1) and r2 == (0, 2, b"\x44" * 4096), name +
           ", nothing written", (r1, r2[:2]))
        c.req(CMD_ZEROES, 0, 64 * 1024, flags=FLAG_FAST_ZERO, cookie=3)
        r3 = c.answer()
        c.req(CMD_ZEROES, 64 * 1024, 64 * 1024, flags=FLAG_NO_HOLE,
              cookie=4)
        r4 = c.answer()
        c.req(CMD_READ, 0, 128 * 1024, cookie=5)
        r5 = c.answer(128 * 1024)
        ok(r3[:2] == (0, 3) and r4[:2] == (0, 4) and
           r5 == (0, 5, bytes(128 * 1024)), "... FAST_ZERO that may punch "
           "a hole, and NO_HOLE without FAST_ZERO: zeroes", (r3, r4, r5[:2]))
        c.close()
        d.stop()
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def test_fast_zero_qcow2(tmp):
    """FAST_ZERO on a qcow2 node: whole clusters take the zero flag (fast),
    part of a cluster would be written as data: ENOTSUP, nothing changed;
    qemu-img check clean after."""
    name = "FAST_ZERO on qcow2"
    if not have("qemu-img"):
        skip(name, "no qemu-img")
        return
    if "TSAN_OPTIONS" in os.environ:
        # scripts/check-tsan.sh: the qcow2 driver's GMutex-protected state
        # shows as races there (GLib's mutexes are not instrumented), so
        # qcow2 is checked by the other steps; this case runs in them.
        skip(name, "a qcow2 node under ThreadSanitizer")
        return
    img = os.path.join(tmp, "fz.qcow2")
    rc, out = run("qemu-img", "create", "-q", "-f", "qcow2", "-o",
                  "cluster_size=65536", img, "4M")
    ok(rc == 0, name + ": qemu-img create", out)
    sock = os.path.join(tmp, "fz.sock")
    d = Daemon(tmp, "fz", [
        "--blockdev", "driver=file,node-name=f0,filename=" + img,
        "--blockdev", "driver=qcow2,node-name=q0,file=f0",
        "--nbd-server", "addr.type=unix,addr.path=" + sock,
        "--export", "type=nbd,id=e0,node-name=q0,writable=on"])
    d.monitor()
    c = Raw(path=sock)
    c.greet()
    c.go("q0", structured=False)
    c.req(CMD_WRITE, 0, 128 * 1024, data=b"\x44" * (128 * 1024), cookie=1)
    r1 = c.answer()
    c.req(CMD_ZEROES, 4096, 4096, flags=FLAG_FAST_ZERO, cookie=2)
    r2 = c.answer()
    c.req(CMD_ZEROES, 60 * 1024, 64 * 1024, flags=FLAG_FAST_ZERO, cookie=3)
    r3 = c.answer()
    c.req(CMD_READ, 0, 128 * 1024, cookie=4)
    r4 = c.answer(128 * 1024)
    ok(r1[:2] == (0, 1) and r2[:2] == (ENOTSUP, 2) and
       r3[:2] == (ENOTSUP, 3) and r4 == (0, 4, b"\x44" * (128 * 1024)),
       name + ": part of a cluster: ENOTSUP, the data unchanged",
       (r1[:2], r2[:2], r3[:2], r4[:2]))
    c.req(CMD_ZEROES, 64 * 1024, 64 * 1024, flags=FLAG_FAST_ZERO, cookie=5)
    r5 = c.answer()
    c.req(CMD_ZEROES, 0, 4096, cookie=6)
    r6 = c.answer()
    c.req(CMD_READ, 0, 128 * 1024, cookie=7)
    r7 = c.answer(128 * 1024)
    want = bytes(4096) + b"\x44" * (60 * 1024) + bytes(64 * 1024)
    ok(r5[:2] == (0, 5) and r6[:2] == (0, 6) and r7 == (0, 7, want),
       name + ": a whole cluster: zeroes; part of one without FAST_ZERO: "
       "zeroes", (r5[:2], r6[:2], r7[:2]))
    c.close()
    d.stop()
    rc, out = run("qemu-img", "check", img)
    ok(rc == 0 and "No errors" in out, name + ": qemu-img check clean", out)


def test_no_zeroes(tmp):
    """A driver=nbd node whose server has no WRITE_ZEROES (nbdkit's
    nozero filter): our export of it must not offer WRITE_ZEROES (nor
    FAST_ZERO), and refuses one with EINVAL, not ENOTSUP."""
    name = "export of a node without write-zeroes: not offered"
    if not have("nbdkit"):
        skip(name, "no nbdkit")
        return
    kit_sock = os.path.join(tmp, "kit.sock")
    kit_pid = os.path.join(tmp, "kit.pid")
    # Without -f, nbdkit returns once it listens (no waiting on our side)
    rc, out = run("nbdkit", "-U", kit_sock, "-P", kit_pid,
                  "--filter=nozero", "memory", "1M")
    if rc != 0:
        skip(name, "nbdkit did not start: " + out)
        return

    def stop_kit():
        try:
            os.kill(int(open(kit_pid).read()), 15)
        except (OSError, ValueError):
            pass
    try:
        sock = os.path.join(tmp, "nz.sock")
        d = Daemon(tmp, "nz", [
            "--blockdev", "driver=nbd,node-name=nz0,server.type=unix,"
            "server.path=" + kit_sock,
            "--nbd-server", "addr.type=unix,addr.path=" + sock,
            "--export", "type=nbd,id=e0,node-name=nz0,writable=on"])
        try:
            d.monitor()
        except OSError:
            d.stop()
            skip(name, "no driver=nbd: " + d.log()[-200:])
            return
        c = Raw(path=sock)
        c.greet()
        size, tflags = c.go("nz0", structured=False)
        ok(size == MiB and not tflags & (1 << 6) and not tflags & (1 << 11),
           name + " (nor FAST_ZERO)", (size, hex(tflags or 0)))
        c.req(CMD_ZEROES, 0, 4096, cookie=1)
        r1 = c.answer()
        c.req(CMD_WRITE, 0, 4096, b"\x12" * 4096, cookie=2)
        r2 = c.answer()
        ok(r1[:2] == (EINVAL, 1) and r2[:2] == (0, 2),
           "... WRITE_ZEROES sent anyway: EINVAL; WRITE works", (r1, r2))
        c.close()
        d.stop()
    finally:
        stop_kit()


def test_qmp(tmp, d, sock):
    q = d.monitor()
    r = qcmd(q, "query-block-exports")
    types = sorted((e["type"], e["id"]) for e in r["return"])
    ok(("nbd", "e0") in types and ("nbd", "ro") in types,
       "query-block-exports lists the NBD exports", r)
    r = qcmd(q, "blockdev-del", {"node-name": "disk0"})
    ok("in use" in r.get("error", {}).get("desc", ""),
       "blockdev-del of an exported node: in use", r)
    held = Raw(path=sock)
    held.greet()
    held.go("disk0")
    r = qcmd(q, "block-export-del", {"id": "e0"})
    ok("still in use" in r.get("error", {}).get("desc", ""),
       "block-export-del (safe) with a client connected: refused", r)
    msgs = q.exchange({"execute": "block-export-del",
                       "arguments": {"id": "e0", "mode": "hard"}})
    while not any(m.get("event") == "BLOCK_EXPORT_DELETED" for m in msgs):
        msgs.append(q.read_msg())
    ok(any(m.get("event") == "BLOCK_EXPORT_DELETED" and
           m["data"]["id"] == "e0" for m in msgs),
       "hard block-export-del: BLOCK_EXPORT_DELETED", msgs)
    ok(held.closed(), "... and its client is disconnected")
    r = qcmd(q, "block-export-add", {"type": "nbd", "id": "e1",
                                   "node-name": "disk0", "name": "again",
                                   "writable": True})
    ok(r == {"return": {}}, "block-export-add type=nbd at run time", r)
    if have("qemu-io"):
        rc, out = run("qemu-io", "-f", "raw", "-c", "write -P 0x3d 0 64k",
                      "-c", "read -P 0x3d 0 64k", uri_unix("again", sock))
        ok(rc == 0 and "read 65536" in out, "the new export serves", out)
    r = qcmd(q, "nbd-server-start", {"addr": {"type": "unix",
                                            "data": {"path": "x"}}})
    ok("error" in r, "a second nbd-server-start: error", r)
    r = qcmd(q, "query-block-exports")
    ids = {e["id"] for e in r["return"] if e["type"] == "nbd"}
    msgs = q.exchange({"execute": "nbd-server-stop"})
    r = [m for m in msgs if "event" not in m][-1]
    ok(r == {"return": {}} and not os.path.exists(sock),
       "nbd-server-stop: socket gone", r)
    # Each export goes once its connections' requests are done: the
    # qemu-io one may still be closing.
    gone = set()
    while True:
        gone |= {m["data"]["id"] for m in msgs
                 if m.get("event") == "BLOCK_EXPORT_DELETED"}
        if ids <= gone:
            break
        msgs = [q.read_msg()]
    r = qcmd(q, "query-block-exports")
    ok(not [e for e in r["return"] if e["type"] == "nbd"],
       "nbd-server-stop took the NBD exports", r)
    sock2 = os.path.join(tmp, "nbd2.sock")
    r = qcmd(q, "nbd-server-start", {"addr": {"type": "unix",
                                            "path": sock2}})
    r2 = qcmd(q, "nbd-server-add", {"device": "disk0", "name": "legacy"})
    ok(r == {"return": {}} and r2 == {"return": {}},
       "nbd-server-start (QMP) and legacy nbd-server-add", (r, r2))
    if have("nbdinfo"):
        rc, out = run("nbdinfo", "--size", uri_unix("legacy", sock2))
        ok(rc == 0 and out.strip() == str(64 * MiB),
           "the legacy export serves", out)
    # nbdinfo has exited, but the server may not have read its
    # disconnect yet (a slow, sanitized build): a safe remove is refused
    # while a client is connected, so poll until the client is gone.
    for _ in range(300):
        r = qcmd(q, "nbd-server-remove", {"name": "legacy"})
        if "still in use" not in r.get("error", {}).get("desc", ""):
            break
        time.sleep(0.1)
    ok(r == {"return": {}}, "nbd-server-remove", r)
    r = qcmd(q, "block-export-add", {"type": "nbd", "id": "x",
                                   "node-name": "nosuch"})
    ok("nosuch" in r.get("error", {}).get("desc", ""),
       "export of an unknown node: error", r)


def certtool(*args, stdin=None):
    r = subprocess.run(["certtool"] + list(args), capture_output=True,
                       text=True, input=stdin, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def make_ca(d, cn):
    tpl = os.path.join(d, "ca.info")
    with open(tpl, "w") as f:
        f.write("cn = %s\nca\ncert_signing_key\nexpiration_days = 3\n" % cn)
    certtool("--generate-privkey", "--key-type=ecdsa", "--outfile",
             os.path.join(d, "ca-key.pem"))
    certtool("--generate-self-signed", "--load-privkey",
             os.path.join(d, "ca-key.pem"), "--template", tpl, "--outfile",
             os.path.join(d, "ca-cert.pem"))


def make_cert(cadir, outdir, prefix, cn, server):
    tpl = os.path.join(outdir, prefix + ".info")
    with open(tpl, "w") as f:
        f.write("cn = %s\nexpiration_days = 3\nsigning_key\n"
                "encryption_key\n" % cn)
        f.write("ip_address = 127.0.0.1\ndns_name = localhost\n"
                "tls_www_server\n" if server else "tls_www_client\n")
    key = os.path.join(outdir, prefix + "-key.pem")
    certtool("--generate-privkey", "--key-type=ecdsa", "--outfile", key)
    certtool("--generate-certificate", "--load-privkey", key,
             "--load-ca-certificate", os.path.join(cadir, "ca-cert.pem"),
             "--load-ca-privkey", os.path.join(cadir, "ca-key.pem"),
             "--template", tpl, "--outfile",
             os.path.join(outdir, prefix + "-cert.pem"))
    shutil.copy(os.path.join(cadir, "ca-cert.pem"), outdir)


def qemu_img_tls(port, clientdir, name="disk0", psk_user=None):
    if psk_user:
        obj = "tls-creds-psk,id=tls0,dir=%s,username=%s,endpoint=client" % (
            clientdir, psk_user)
    else:
        obj = "tls-creds-x509,id=tls0,dir=%s,endpoint=client" % clientdir
    return run("qemu-img", "info", "--object", obj, "--image-opts",
               "driver=nbd,server.type=inet,server.host=127.0.0.1,"
               "server.port=%d,export=%s,tls-creds=tls0" % (port, name))


def test_tls(tmp, img):
    if not (have("certtool") and have("qemu-img")):
        skip("TLS", "no certtool (gnutls-bin) or qemu-img")
        return
    ca, rogue = os.path.join(tmp, "ca"), os.path.join(tmp, "rogue")
    srv, cli = os.path.join(tmp, "srv"), os.path.join(tmp, "cli")
    bad, other = os.path.join(tmp, "badcli"), os.path.join(tmp, "othercli")
    for x in (ca, rogue, srv, cli, bad, other):
        os.mkdir(x)
    make_ca(ca, "Test CA")
    make_ca(rogue, "Rogue CA")
    make_cert(ca, srv, "server", "localhost", True)
    make_cert(ca, cli, "client", "client1", False)
    make_cert(ca, other, "client", "client2", False)
    make_cert(rogue, bad, "client", "client1", False)
    shutil.copy(os.path.join(ca, "ca-cert.pem"), bad)   # trusts the server
    pskdir = os.path.join(tmp, "psk")
    os.mkdir(pskdir)
    with open(os.path.join(pskdir, "keys.psk"), "w") as f:
        f.write("alice:%s\n" % os.urandom(32).hex())
    # Under --seccomp on: TLS records are read and written in the
    # export's confined iothread.
    d = Daemon(tmp, "tls", [
        "--seccomp", "on",
        "--object", "tls-creds-x509,id=t0,dir=%s,endpoint=server,"
        "verify-peer=on,allow.0=CN=client1" % srv,
        "--object", "tls-creds-psk,id=p0,dir=%s,endpoint=server" % pskdir,
        "--blockdev", "driver=file,node-name=disk0,filename=" + img,
        "--nbd-server", "addr.type=inet,addr.host=127.0.0.1,addr.port=0,"
        "tls-creds=t0",
        "--export", "type=nbd,id=e0,node-name=disk0,writable=on"])
    try:
        port = d.port()
        ok(port, "TLS server listening", d.log())
        rc, out = qemu_img_tls(port, cli)
        ok(rc == 0 and "64 MiB" in out, "qemu-img with tls-creds-x509 "
           "(CA-signed client certificate on allow=) connects", out)
        if have("qemu-io"):
            rc, out = run("qemu-io", "--object",
                          "tls-creds-x509,id=tls0,dir=%s,endpoint=client" %
                          cli, "--image-opts", "-c", "write -P 0x6e 0 1M",
                          "-c", "read -P 0x6e 0 1M",
                          "driver=nbd,server.type=inet,server.host=127.0.0."
                          "1,server.port=%d,export=disk0,tls-creds=tls0" %
                          port)
            ok(rc == 0 and "read 1048576/1048576" in out,
               "qemu-io over TLS, --seccomp on: 1 MiB written and read "
               "back", out)
        if have("nbdcopy"):
            # 64 requests in flight against the server's 16 slots: whole
            # requests wait, read ahead from the socket (nbd/tls.c reads
            # 256 KiB at a time), while the slots are busy.
            src = os.path.join(tmp, "tls-src")
            back = os.path.join(tmp, "tls-back")
            data = os.urandom(8 << 20)
            with open(src, "wb") as f:
                f.write(data)
            uri = ("nbds://127.0.0.1:%d/disk0?tls-certificates=%s"
                   % (port, cli))
            rc, out = run("nbdcopy", "--requests=64",
                          "--request-size=65536", src, uri)
            rc2, out2 = run("nbdcopy", uri, back)
            got = b""
            if rc2 == 0:
                with open(back, "rb") as f:
                    got = f.read(8 << 20)
            ok(rc == 0 and rc2 == 0 and got == data, "nbdcopy over TLS, "
               "64 requests of 64 KiB in flight: 8 MiB written and read "
               "back", out + out2)
        if have("nbdinfo"):
            rc, out = run("nbdinfo", "nbd://127.0.0.1:%d/disk0" % port)
            ok(rc != 0 and "TLS" in out, "plain nbdinfo: refused, TLS "
               "required", out)
        c = Raw(port=port)
        c.greet()
        c.opt(OPT_LIST)
        r = c.reply()
        c.opt(OPT_EXPORT_NAME, b"disk0")
        ok(r[1] == ERR | 5 and c.closed(), "raw client: NBD_REP_ERR_TLS_REQD"
           ", EXPORT_NAME without TLS closes", r)
        c = Raw(port=port)
        c.greet()
        nm = struct.pack(">I", 5) + b"disk0"
        got = []
        for opt, data in ((OPT_INFO, nm + b"\0\0"), (OPT_GO, nm + b"\0\0"),
                          (OPT_STRUCTURED, b""), (9, nm + b"\0" * 4),
                          (OPT_SET_META, nm + b"\0" * 4), (99, b"x")):
            c.opt(opt, data)
            got.append(c.reply()[1])
        c.opt(OPT_ABORT)
        r = c.reply()
        ok(got == [ERR | 5] * 6 and r[1] == REP_ACK and c.closed(),
           "raw client: INFO, GO, STRUCTURED_REPLY, LIST/SET_META_CONTEXT "
           "and an unknown option before STARTTLS: ERR_TLS_REQD each; "
           "ABORT acknowledged", (got, r))
        rc, out = qemu_img_tls(port, bad)
        ok(rc != 0, "a client certificate another CA signed: refused", out)
        rc, out = qemu_img_tls(port, other)
        ok(rc != 0, "a CA-signed client certificate not on allow=: "
           "refused", out)
        # PSK: the same daemon, another server
        q = d.monitor()
        r = qcmd(q, "nbd-server-stop")
        r2 = qcmd(q, "nbd-server-start", {
            "addr": {"type": "inet", "host": "127.0.0.1", "port": "0"},
            "tls-creds": "p0"})
        r3 = qcmd(q, "block-export-add", {"type": "nbd", "id": "e0",
                                        "node-name": "disk0"})
        ok(r == r2 == r3 == {"return": {}}, "TLS server restarted with "
           "tls-creds-psk over QMP", (r, r2, r3))
        ports = re.findall(r"NBD server listening on \S+ port (\d+)",
                           d.log())
        rc, out = qemu_img_tls(int(ports[-1]), pskdir, psk_user="alice")
        ok(rc == 0 and "64 MiB" in out, "qemu-img with tls-creds-psk "
           "connects", out)
    finally:
        d.stop()


def qemu_io_read(port, clientdir, psk_user=None):
    """Read 64 KiB of the 0x42 pattern over TLS; (rc, output)."""
    if psk_user:
        obj = "tls-creds-psk,id=tls0,dir=%s,username=%s,endpoint=client" % (
            clientdir, psk_user)
    else:
        obj = "tls-creds-x509,id=tls0,dir=%s,endpoint=client" % clientdir
    return run("qemu-io", "--object", obj, "--image-opts", "-r", "-c",
               "read -P 0x42 0 64k",
               "driver=nbd,server.type=inet,server.host=127.0.0.1,"
               "server.port=%d,export=disk0,tls-creds=tls0" % port)


def test_authz(tmp):
    if not (have("certtool") and have("qemu-io")):
        skip("tls-authz", "no certtool (gnutls-bin) or qemu-io")
        return
    base = os.path.join(tmp, "authz")
    dirs = {}
    for x in ("ca", "srv", "c1", "c2", "long", "odd", "psk"):
        dirs[x] = os.path.join(base, x)
        os.makedirs(dirs[x])
    make_ca(dirs["ca"], "Authz CA")
    make_cert(dirs["ca"], dirs["srv"], "server", "localhost", True)
    make_cert(dirs["ca"], dirs["c1"], "client", "client1", False)
    make_cert(dirs["ca"], dirs["c2"], "client", "client2", False)
    # Longer than the 1 KiB a DN used to be read into.
    make_cert(dirs["ca"], dirs["long"], "client", "x" * 3000, False)
    # Every character RFC 4514 escapes: the DN GnuTLS prints is
    # CN=a\,b\+c\;d\<e\>f=#gh\  (a trailing escaped space).
    make_cert(dirs["ca"], dirs["odd"], "client", '"a,b+c;d<e>f=#gh "',
              False)
    odd_dn = "CN=a\\,b\\+c\\;d\\<e\\>f=#gh\\ "
    img = os.path.join(base, "authz.raw")
    with open(img, "wb") as f:
        f.write(b"\x42" * 64 * 1024)
    with open(os.path.join(dirs["psk"], "keys.psk"), "w") as f:
        f.write("alice:%s\nbob:%s\n" % (os.urandom(32).hex(),
                                       os.urandom(32).hex()))
    d = Daemon(tmp, "authz", [
        "--object", "tls-creds-x509,id=t0,dir=%s,endpoint=server,"
        "verify-peer=on" % dirs["srv"],
        "--object", "tls-creds-x509,id=tnv,dir=%s,endpoint=server,"
        "verify-peer=off" % dirs["srv"],
        "--object", "tls-creds-psk,id=p0,dir=%s,endpoint=server" %
        dirs["psk"],
        "--object", "authz-simple,id=az0,identity=CN=client1",
        "--object", "authz-list,id=az1,policy=deny,"
        "rules.0.match=CN=client2,rules.0.policy=deny,"
        "rules.1.match=CN=client?,rules.1.policy=allow,rules.1.format=glob",
        "--blockdev", "driver=file,node-name=disk0,read-only=on,filename=" +
        img,
        "--nbd-server", "addr.type=inet,addr.host=127.0.0.1,addr.port=0,"
        "tls-creds=t0,tls-authz=az0",
        "--export", "type=nbd,id=e0,node-name=disk0"])
    q = d.monitor()

    def port():
        r = qcmd(q, "x-query-nbd-server")
        return int(r["return"]["addr"]["port"])

    def restart(creds, authz):
        r = qcmd(q, "nbd-server-stop")
        r2 = qcmd(q, "nbd-server-start", {
            "addr": {"type": "inet", "host": "127.0.0.1", "port": "0"},
            "tls-creds": creds, "tls-authz": authz})
        r3 = qcmd(q, "block-export-add", {"type": "nbd", "id": "e0",
                                        "node-name": "disk0"})
        return (r, r2, r3)

    def refused(who, rc, out, authz, ident):
        log = d.log()
        ok(rc != 0 and "NBD client refused" in log and
           ("tls-authz '%s'" % authz) in log and ident in log,
           "%s: refused, the log names it and tls-authz '%s'" %
           (who, authz), (out, log[-2000:]))

    def allowed(who, p, clientdir, psk_user=None):
        rc, out = qemu_io_read(p, clientdir, psk_user)
        ok(rc == 0 and "read 65536/65536" in out,
           "%s: connects and reads" % who, out)

    try:
        # authz-simple, from the command line
        p = port()
        allowed("authz-simple, CN=client1", p, dirs["c1"])
        rc, out = qemu_io_read(p, dirs["c2"])
        refused("authz-simple, CN=client2", rc, out, "az0", "CN=client2")
        rc, out = qemu_io_read(p, dirs["long"])
        ok(rc != 0 and "'CN=" + "x" * 253 + "...' is not allowed by "
           "tls-authz 'az0'" in d.log(),
           "a 3000-character DN: refused, shown cut short in the log",
           (out, d.log()[-600:]))
        allowed("... CN=client1 again, after the refusals", p, dirs["c1"])
        r = qcmd(q, "object-del", {"id": "az0"})
        desc = r.get("error", {}).get("desc", "")
        ok("in use" in desc and "tls-authz" in desc and
           "nbd-server-stop" in desc, "object-del of the authz object in "
           "use: refused", r)
        r = qcmd(q, "qom-list", {"path": "/objects"})
        kids = {x["name"]: x["type"] for x in r.get("return", [])}
        ok(kids.get("az0") == "child<authz-simple>" and
           kids.get("az1") == "child<authz-list>" and
           kids.get("t0") == "child<tls-creds-x509>",
           "qom-list /objects: the authz and TLS objects", r)
        r = qcmd(q, "qom-get", {"path": "/objects/az1", "property": "type"})
        ok(r == {"return": "authz-list"}, "qom-get type of authz-list", r)

        # qom-list/qom-get/qom-set of the authz objects' own properties
        def props(path):
            r = qcmd(q, "qom-list", {"path": path})
            return {x["name"]: x["type"] for x in r.get("return", [])}

        def get(path, prop):
            return qcmd(q, "qom-get", {"path": path, "property": prop})

        def qset(path, prop, value):
            return qcmd(q, "qom-set", {"path": path, "property": prop,
                                       "value": value})

        def err(r):
            return r.get("error", {}).get("desc", "")

        ok(props("/objects/az0") == {"type": "string",
                                     "identity": "string"} and
           props("az1") == {"type": "string", "policy": "QAuthZListPolicy",
                            "rules": "QAuthZListRule"},
           "qom-list of authz-simple and authz-list: QEMU's properties",
           (props("/objects/az0"), props("az1")))
        ok(props("/objects/t0") == {"type": "string"},
           "qom-list of a TLS object: type only", props("t0"))
        rules1 = [{"match": "CN=client2", "policy": "deny",
                   "format": "exact"},
                  {"match": "CN=client?", "policy": "allow",
                   "format": "glob"}]
        ok(get("/objects/az0", "identity") == {"return": "CN=client1"} and
           get("az1", "policy") == {"return": "deny"} and
           get("az1", "rules") == {"return": rules1},
           "qom-get identity, policy, rules: the values given",
           (get("az0", "identity"), get("az1", "rules")))
        # The running server (tls-authz=az0) checks its next connection
        # against the new identity.
        r = qset("/objects/az0", "identity", "CN=client2")
        ok(r == {"return": {}} and
           get("az0", "identity") == {"return": "CN=client2"},
           "qom-set authz-simple identity CN=client2", r)
        rc, out = qemu_io_read(p, dirs["c1"])
        refused("after qom-set, the old identity CN=client1", rc, out,
                "az0", "CN=client1")
        allowed("after qom-set, the new identity CN=client2", p,
                dirs["c2"])
        for path, prop, value, want, name in (
                ("az0", "identity", 5, "expected: string",
                 "identity not a string"),
                ("az0", "identity", "CN=" + "x" * 70000, "too long",
                 "identity over 64 KiB"),
                ("az0", "nosuch", "x", "'authz-simple.nosuch' not found",
                 "an unknown property"),
                ("az0", "type", "authz-list", "read-only", "type"),
                ("az1", "policy", "maybe", "does not accept value 'maybe'",
                 "policy not allow or deny"),
                ("az1", "policy", None, "expected: string", "policy null"),
                ("az1", "rules", {"match": "x"}, "expected: array",
                 "rules not a list"),
                ("az1", "rules", [{"match": "x", "policy": "allow"}, 7],
                 "rules.1", "a rule not an object"),
                ("az1", "rules", [{"match": "x", "policy": "perhaps"}],
                 "does not accept value 'perhaps'", "a rule's bad policy"),
                ("az1", "rules", [{"match": "x", "policy": "allow",
                                   "format": "regex"}],
                 "does not accept value 'regex'", "a rule's bad format"),
                ("az1", "rules", [{"match": "x" * 70000,
                                   "policy": "allow"}],
                 "too long", "a match over 64 KiB")):
            r = qset(path, prop, value)
            ok(want in err(r), "qom-set %s.%s, %s: error" %
               (path, prop, name), r)
        ok(get("az0", "identity") == {"return": "CN=client2"} and
           get("az1", "policy") == {"return": "deny"} and
           get("az1", "rules") == {"return": rules1},
           "... the refused qom-sets changed nothing",
           (get("az0", "identity"), get("az1", "rules")))
        r = get("az1", "nosuch")
        ok("'authz-list.nosuch' not found" in err(r) and
           "policy, rules" in err(r), "qom-get of an unknown property: "
           "error naming the properties", r)
        r = qset("az1", "rules", [{"match": "CN=*", "policy": "allow",
                                   "format": "glob"}])
        r2 = qset("az1", "policy", "allow")
        ok(r == r2 == {"return": {}} and
           get("az1", "rules") == {"return": [
               {"match": "CN=*", "policy": "allow", "format": "glob"}]} and
           get("az1", "policy") == {"return": "allow"},
           "qom-set authz-list rules and policy", (r, r2))
        r = qset("az1", "rules", rules1)
        r2 = qset("az1", "policy", "deny")
        ok(r == r2 == {"return": {}} and
           get("az1", "rules") == {"return": rules1},
           "qom-set back to the rules given at start", (r, r2))

        # authz-list: exact deny before a glob allow, default deny
        r = restart("t0", "az1")
        ok(r == ({"return": {}},) * 3, "server restarted with "
           "tls-authz=az1 (authz-list) over QMP", r)
        p = port()
        allowed("authz-list glob CN=client?, CN=client1", p, dirs["c1"])
        rc, out = qemu_io_read(p, dirs["c2"])
        refused("authz-list exact deny rule, CN=client2", rc, out, "az1",
                "CN=client2")
        rc, out = qemu_io_read(p, dirs["long"])
        ok(rc != 0 and "tls-authz 'az1'" in d.log().splitlines()[-1],
           "authz-list, no rule matches: policy=deny refuses", out)
        r = qcmd(q, "nbd-server-stop")
        r2 = qcmd(q, "object-del", {"id": "az0"})
        ok(r == r2 == {"return": {}}, "object-del of an authz object no "
           "server uses", (r, r2))

        # QMP object-add, the JSON form; a DN with escapes, exactly
        r = qcmd(q, "object-add", {"qom-type": "authz-simple", "id": "az2",
                                   "identity": odd_dn})
        r2 = qcmd(q, "object-add", {
            "qom-type": "authz-list", "id": "az3", "policy": "allow",
            "rules": [{"match": "bob", "policy": "deny",
                       "format": "exact"}]})
        ok(r == r2 == {"return": {}}, "object-add authz-simple and "
           "authz-list (JSON rules)", (r, r2))
        r = qcmd(q, "object-add", {"qom-type": "authz-list", "id": "bad",
                                   "rules": [{"match": "x"}]})
        ok("policy" in r.get("error", {}).get("desc", ""),
           "object-add authz-list with a rule lacking policy: error", r)
        r = qcmd(q, "object-add", {"qom-type": "authz-simple", "id": "az2",
                                   "identity": "y"})
        ok("duplicate" in r.get("error", {}).get("desc", ""),
           "object-add of an id in use: error", r)
        for typ, oid, extra in (
                ("iothread", "az2", {}),
                ("throttle-group", "az3", {"limits": {"iops-total": 1}})):
            args = {"qom-type": typ, "id": oid}
            args.update(extra)
            r = qcmd(q, "object-add", args)
            ok("duplicate" in r.get("error", {}).get("desc", ""),
               "object-add %s with an authz object's id: error" % typ, r)
        r = restart("t0", "az2")
        ok(r[1:] == ({"return": {}},) * 2, "server with tls-authz=az2", r)
        p = port()
        allowed("a DN with RFC 4514 escapes, matched exactly", p,
                dirs["odd"])
        rc, out = qemu_io_read(p, dirs["c1"])
        refused("authz-simple of the odd DN, CN=client1", rc, out, "az2",
                "CN=client1")

        # PSK: the username is the identity
        r = restart("p0", "az3")
        ok(r[1:] == ({"return": {}},) * 2, "server with tls-creds-psk and "
           "tls-authz=az3", r)
        p = port()
        allowed("PSK username alice (policy=allow)", p, dirs["psk"],
                psk_user="alice")
        rc, out = qemu_io_read(p, dirs["psk"], psk_user="bob")
        refused("PSK username bob (deny rule)", rc, out, "az3",
                "PSK username 'bob'")
        ok(d.p.poll() is None, "the daemon survived every refused client",
           d.log()[-2000:])

        # authz-list-file, re-read when it changes (a new inode each time)
        acl = os.path.join(base, "acl.json")

        def write_acl(text):
            with open(acl + ".new", "w") as f:
                f.write(text)
            os.rename(acl + ".new", acl)

        write_acl(json.dumps({"policy": "deny", "rules": [
            {"match": "CN=client1", "policy": "allow"}]}))
        r = qcmd(q, "object-add", {"qom-type": "authz-list-file",
                                   "id": "az4", "filename": acl})
        ok(r == {"return": {}}, "object-add authz-list-file", r)
        r = qcmd(q, "qom-list", {"path": "/objects/az4"})
        ok({x["name"]: x["type"] for x in r.get("return", [])} ==
           {"type": "string", "filename": "string", "refresh": "bool"},
           "qom-list of authz-list-file: filename and refresh", r)
        r = qcmd(q, "qom-get", {"path": "az4", "property": "filename"})
        r2 = qcmd(q, "qom-get", {"path": "az4", "property": "refresh"})
        ok(r == {"return": acl} and r2 == {"return": True},
           "qom-get authz-list-file filename and refresh", (r, r2))
        r = qcmd(q, "qom-set", {"path": "az4", "property": "filename",
                                "value": acl + ".other"})
        ok("cannot be changed" in r.get("error", {}).get("desc", "") and
           "object-del" in r.get("error", {}).get("desc", ""),
           "qom-set authz-list-file filename: refused, says what to do", r)
        r = restart("t0", "az4")
        ok(r[1:] == ({"return": {}},) * 2, "server with tls-authz=az4", r)
        p = port()
        allowed("authz-list-file allowing CN=client1", p, dirs["c1"])
        rc, out = qemu_io_read(p, dirs["c2"])
        refused("authz-list-file, CN=client2", rc, out, "az4", "CN=client2")
        write_acl(json.dumps({"policy": "deny", "rules": [
            {"match": "CN=client2", "policy": "allow", "format": "exact"}]}))
        allowed("the file rewritten to allow CN=client2 (refresh)", p,
                dirs["c2"])
        rc, out = qemu_io_read(p, dirs["c1"])
        ok(rc != 0 and "reloaded" in d.log(), "... and CN=client1 is now "
           "refused", out)
        write_acl("{\"policy\": ")
        rc, out = qemu_io_read(p, dirs["c2"])
        ok(rc != 0 and "refusing every NBD client" in d.log(),
           "a file that no longer parses: every client refused", out)
        for text, name in (("[1, 2]", "a JSON array"),
                           ('{"rules": [{"match": "x", "policy": "maybe"}]}',
                            "a bad policy"),
                           (" " * (1024 * 1024 + 1), "over 1 MiB")):
            write_acl(text)
            r = qcmd(q, "object-add", {"qom-type": "authz-list-file",
                                       "id": "az5", "filename": acl})
            ok("authz-list-file 'az5'" in r.get("error", {}).get("desc", ""),
               "object-add authz-list-file of %s: error" % name, r)
        r = qcmd(q, "object-add", {"qom-type": "authz-list-file",
                                   "id": "az5", "filename": acl + ".none"})
        ok("No such file" in r.get("error", {}).get("desc", ""),
           "object-add authz-list-file of a missing file: error", r)

        # refused at start
        qcmd(q, "nbd-server-stop")
        for args, want, name in (
                ({"tls-authz": "az3"}, "needs tls-creds",
                 "tls-authz without tls-creds"),
                ({"tls-creds": "tnv", "tls-authz": "az3"}, "verify-peer=on",
                 "tls-authz with verify-peer=off"),
                ({"tls-creds": "t0", "tls-authz": "nosuch"}, "nosuch",
                 "tls-authz naming no object")):
            args["addr"] = {"type": "inet", "host": "127.0.0.1",
                            "port": "0"}
            r = qcmd(q, "nbd-server-start", args)
            ok(want in r.get("error", {}).get("desc", ""),
               name + ": refused at start", r)
        d.stop()
        ok(d.p.returncode == 0 and "Sanitizer" not in d.log(),
           "tls-authz daemon: clean exit", d.log()[-3000:])
    finally:
        d.stop()


def test_self_tls_mirror(tmp):
    """A mirror to a TLS export of the same daemon: the client's TLS
    handshake must not hold the loop that serves the server's side (it
    did: the monitor stopped answering, the job never started)."""
    if not have("certtool"):
        skip("mirror to the daemon's own TLS export", "no certtool")
        return
    base = os.path.join(tmp, "selftls")
    ca, srv, cli = (os.path.join(base, x) for x in ("ca", "srv", "cli"))
    for x in (ca, srv, cli):
        os.makedirs(x)
    make_ca(ca, "Self CA")
    make_cert(ca, srv, "server", "localhost", True)
    make_cert(ca, cli, "client", "client1", False)
    src, tgt = os.path.join(base, "src.raw"), os.path.join(base, "tgt.raw")
    data = os.urandom(4 * MiB)
    with open(src, "wb") as f:
        f.write(data)
        f.truncate(16 * MiB)
    with open(tgt, "wb") as f:
        f.truncate(16 * MiB)
    d = Daemon(base, "self", [
        "--object", "tls-creds-x509,id=t0,dir=%s,endpoint=server,"
        "verify-peer=on" % srv,
        "--object", "tls-creds-x509,id=c0,dir=%s,endpoint=client" % cli,
        "--blockdev", "driver=file,node-name=src,filename=" + src,
        "--blockdev", "driver=file,node-name=tgt,filename=" + tgt,
        "--nbd-server", "addr.type=inet,addr.host=127.0.0.1,addr.port=0,"
        "tls-creds=t0",
        "--export", "type=nbd,id=e0,node-name=tgt,writable=on"])
    try:
        port = d.port()
        q = d.monitor()
        r = qcmd(q, "blockdev-add", {
            "driver": "nbd", "node-name": "nc", "tls-creds": "c0",
            "export": "tgt", "server": {"type": "inet", "host": "127.0.0.1",
                                        "port": str(port)}})
        ok(r == {"return": {}}, "blockdev-add nbd to the daemon's own TLS "
           "export", r)
        r = qcmd(q, "blockdev-mirror", {"job-id": "m", "device": "src",
                                        "target": "nc", "sync": "full"})
        ok(r == {"return": {}}, "blockdev-mirror to it starts", r)
        # The monitor keeps answering while the job connects (a monitor
        # held by the handshake does not answer at all: the socket's 30 s
        # timeout ends the test with an exception, counted as a failure).
        status = None
        for _ in range(1200):
            try:
                jobs = qcmd(q, "query-jobs").get("return", [])
            except (OSError, EOFError) as e:
                ok(False, "the monitor answers during the mirror", str(e))
                return
            status = jobs[0]["status"] if jobs else None
            if status != "running":
                break
            time.sleep(0.05)
        ok(status == "ready", "the mirror over TLS to itself is ready",
           status)
        r = qcmd(q, "job-complete", {"id": "m"})
        ok(r == {"return": {}}, "job-complete", r)
        for _ in range(1200):
            jobs = qcmd(q, "query-jobs").get("return", [])
            if not jobs or jobs[0]["status"] == "concluded":
                break
            time.sleep(0.05)
        with open(tgt, "rb") as f:
            got = f.read(4 * MiB)
        ok(got == data, "the target holds the source's data")
    finally:
        d.stop()


def main():
    tmp = tempfile.mkdtemp(prefix="vb-nbd-", dir="/var/tmp")
    try:
        img = os.path.join(tmp, "disk.raw")
        with open(img, "wb") as f:
            f.write(b"\x42" * 8 * MiB)
            f.truncate(64 * MiB)
        ro_img = os.path.join(tmp, "ro.raw")
        with open(ro_img, "wb") as f:
            f.write(b"\x11" * 1 * MiB)
            f.truncate(16 * MiB)
        sock = os.path.join(tmp, "nbd.sock")
        d = Daemon(tmp, "blkd", [
            "--object", "iothread,id=io0",
            "--blockdev", "driver=file,node-name=disk0,filename=" + img +
            ",discard=unmap",
            "--blockdev", "driver=file,node-name=ro0,read-only=on,"
            "filename=" + ro_img,
            "--nbd-server", "addr.type=unix,addr.path=" + sock,
            "--export", "type=nbd,id=e0,node-name=disk0,writable=on,"
            "iothread=io0",
            "--export", "type=nbd,id=ro,node-name=ro0,name=ro0"])
        d.monitor()
        # A second, inet, server is not possible (one per daemon): an inet
        # one in another daemon on the same image, read-only.
        d2 = Daemon(tmp, "inet", [
            "--blockdev", "driver=file,node-name=disk0,filename=" + img,
            "--nbd-server", "addr.type=inet,addr.host=127.0.0.1,"
            "addr.port=0,handshake-max-seconds=1",
            "--export", "type=nbd,id=e0,node-name=disk0,writable=on"])
        port = d2.port()
        ok(port is not None, "inet server on 127.0.0.1, port 0", d2.log())
        silent = Raw(port=port)
        silent.greet()
        ok(silent.closed() and "did not finish negotiating" in d2.log(),
           "handshake-max-seconds=1: a client silent in the handshake is "
           "dropped", d2.log())
        test_interop(tmp, d, sock, img, port)
        d2.stop()
        test_readonly(sock, ro_img)
        test_hostile(sock, img)
        test_spec(sock, img)
        test_block_size(tmp)
        test_fast_zero(tmp)
        test_fast_zero_qcow2(tmp)
        test_no_zeroes(tmp)
        test_qmp(tmp, d, sock)
        ok(d.p.poll() is None, "the daemon survived every client", d.log())
        d.stop()
        ok(d.p.returncode == 0, "clean exit", d.log())
        rc, out = run(BLKD, "--blockdev",
                      "driver=file,node-name=n,filename=" + img,
                      "--nbd-server", "addr.type=inet,addr.host=0.0.0.0,"
                      "addr.port=0", "--export", "type=nbd,id=e,node-name=n")
        ok(rc != 0 and "allow-insecure=on" in out and "TLS" in out,
           "inet on a non-loopback address without TLS: refused", out)
        test_tls(tmp, img)
        test_authz(tmp)
        test_self_tls_mirror(tmp)
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
    print("1..%d" % n_test)
    print("# %d tests, %d failed" % (n_test, n_fail))
    sys.exit(1 if n_fail else 0)


if __name__ == "__main__":
    main()
