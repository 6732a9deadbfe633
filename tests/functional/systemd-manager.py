#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Act as systemd for vhost-blkd (no systemd needed): readiness and socket
activation, checked for real.

The test plays the service manager: a NOTIFY_SOCKET datagram socket, a
listening socket handed over as fd 3 with LISTEN_FDS/LISTEN_PID/
LISTEN_FDNAMES, the daemon exec'd with them.  It checks that READY=1 is
sent only once the export's socket is served (a vhost-user GET_FEATURES
sent at that moment is answered), STOPPING=1 on SIGTERM, that a held
socket survives a restart and a front-end that connects while no daemon
runs is served by the next one, and that a broken environment is refused.

Usage: systemd-manager.py test VHOST_BLKD VHOST_BLK_BENCH TMPDIR
  Prints TAP lines and "N passed, N failed"; exit 1 if anything failed.
  Waits are bounded only to catch a hang (never a pass/fail criterion).

       systemd-manager.py run SOCKET NOTIFY_LOG CMD [ARGS...]
  Be the service manager of one service, as a Type=notify unit with a
  .socket unit listening on SOCKET: run CMD with that socket as fd 3,
  append what it notifies to NOTIFY_LOG, forward SIGTERM to it and exit
  with its status (test-deb.sh).
"""
import os
import select
import signal
import socket
import struct
import subprocess
import sys

HANG = 120          # seconds: a hang guard, not a timing criterion

VHOST_USER_GET_FEATURES = 1
VHOST_USER_VERSION = 0x1
VHOST_USER_REPLY = 0x4
VIRTIO_F_VERSION_1 = 32

passed = failed = n = 0
blkd = bench = tmp = None


def ok(name, cond, why=""):
    global passed, failed, n
    n += 1
    if cond:
        passed += 1
        print(f"ok {n} - {name}", flush=True)
    else:
        failed += 1
        print(f"not ok {n} - {name}", flush=True)
        if why:
            print(f"#   {why}", flush=True)
    return cond


def notify_socket(name):
    path = os.path.join(tmp, name)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    return s, path


def recv_notify(s, timeout=HANG):
    r, _, _ = select.select([s], [], [], timeout)
    if not r:
        return None
    return s.recv(4096).decode()


def spawn(args, log, env_extra, pass_fd=None, listen_fdnames=None):
    """Fork and exec like systemd: @pass_fd becomes fd 3 and LISTEN_PID is
    the pid of the exec'd process itself."""
    logf = open(log, "ab")
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(logf.fileno(), 1)
            os.dup2(logf.fileno(), 2)
            env = dict(os.environ)
            env.update(env_extra)
            if pass_fd is not None:
                if pass_fd != 3:
                    os.dup2(pass_fd, 3)
                os.set_inheritable(3, True)
                env["LISTEN_FDS"] = "1"
                env["LISTEN_PID"] = str(os.getpid())
                if listen_fdnames:
                    env["LISTEN_FDNAMES"] = listen_fdnames
            os.execve(args[0], args, env)
        finally:
            os._exit(127)
    logf.close()
    return pid


def wait_exit(pid):
    """Exit status of @pid (SIGKILL after the hang guard)."""
    for _ in range(HANG * 10):
        p, st = os.waitpid(pid, os.WNOHANG)
        if p:
            return os.waitstatus_to_exitcode(st)
        select.select([], [], [], 0.1)
    os.kill(pid, signal.SIGKILL)
    _, st = os.waitpid(pid, 0)
    return "killed after the hang guard"


def fe_connect(path):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    return c


def fe_get_features(c, timeout=HANG):
    """Send GET_FEATURES and return the features, or an error string."""
    c.sendall(struct.pack("<III", VHOST_USER_GET_FEATURES,
                          VHOST_USER_VERSION, 0))
    return fe_features_reply(c, timeout)


def fe_features_reply(c, timeout=HANG):
    c.settimeout(timeout)
    data = b""
    try:
        while len(data) < 20:
            chunk = c.recv(20 - len(data))
            if not chunk:
                return f"connection closed after {len(data)} bytes"
            data += chunk
    except OSError as e:
        return f"no reply: {e}"
    req, flags, size = struct.unpack("<III", data[:12])
    if req != VHOST_USER_GET_FEATURES or not flags & VHOST_USER_REPLY or size != 8:
        return f"bad reply header {req} {flags:#x} {size}"
    return struct.unpack("<Q", data[12:20])[0]


def features_ok(f):
    return isinstance(f, int) and (f >> VIRTIO_F_VERSION_1) & 1


def run_bench(sock, log):
    with open(log, "ab") as lf:
        return subprocess.call([bench, "--socket", sock, "--rw", "randrw",
                                "--verify", "--ios", "2000", "--bs", "4k",
                                "--size", "8M"], stdout=lf, stderr=lf,
                               timeout=HANG * 2)


def log_has(log, text):
    with open(log, errors="replace") as f:
        return text in f.read()


def run_service(sock, notify_log, cmd):
    """The 'run' mode: one service under a manager, until SIGTERM."""
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    held.bind(sock)
    held.listen(16)
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    npath = notify_log + ".sock"
    ns.bind(npath)
    pid = spawn(cmd, notify_log + ".out", {"NOTIFY_SOCKET": npath},
                pass_fd=held.fileno(), listen_fdnames=os.path.basename(sock))
    term = []
    signal.signal(signal.SIGTERM, lambda *a: term.append(1))
    while True:
        p, st = os.waitpid(pid, os.WNOHANG)
        if p:
            break
        if term:
            os.kill(pid, signal.SIGTERM)
            term.clear()
        try:
            r, _, _ = select.select([ns], [], [], 0.2)
        except InterruptedError:
            r = []
        if r:
            with open(notify_log, "a") as f:
                f.write(ns.recv(4096).decode().replace("\n", " ") + "\n")
    while True:
        r, _, _ = select.select([ns], [], [], 0)
        if not r:
            break
        with open(notify_log, "a") as f:
            f.write(ns.recv(4096).decode().replace("\n", " ") + "\n")
    os.unlink(npath)
    os.unlink(sock)
    sys.exit(os.waitstatus_to_exitcode(st))


def run_tests(blkd_path, bench_path, tmp_dir):
    global blkd, bench, tmp
    blkd, bench, tmp = blkd_path, bench_path, tmp_dir
    img = os.path.join(tmp, "disk.img")
    with open(img, "wb") as f:
        f.truncate(16 << 20)

    # 1. Type=notify without socket activation: READY=1 comes after listen().
    ns, npath = notify_socket("notify1")
    sock = os.path.join(tmp, "plain.sock")
    log = os.path.join(tmp, "plain.log")
    pid = spawn([blkd, "--export", f"socket={sock},driver=null,size=16M"], log,
                {"NOTIFY_SOCKET": npath})
    msg = recv_notify(ns)
    # Checked the moment READY=1 arrives, no retry: the socket must exist and
    # answer already.
    try:
        c = fe_connect(sock)
        feats = fe_get_features(c)
        c.close()
    except OSError as e:
        feats = f"connect: {e}"
    ok("notify: the first message is READY=1 with a STATUS", msg is not None and
       msg.split("\n")[0] == "READY=1" and "STATUS=serving 1 export(s)" in msg,
       repr(msg))
    ok("notify: at READY=1 the socket is served (GET_FEATURES answered)",
       features_ok(feats), repr(feats))
    os.kill(pid, signal.SIGTERM)
    msg = recv_notify(ns)
    ok("notify: STOPPING=1 on SIGTERM", msg is not None and
       msg.startswith("STOPPING=1"), repr(msg))
    ok("notify: exit status 0 after SIGTERM", wait_exit(pid) == 0)
    ok("notify: its own socket file is removed", not os.path.exists(sock))
    ns.close()

    # 2. Socket activation: the manager's socket, passed as fd 3.
    ns, npath = notify_socket("notify2")
    sock = os.path.join(tmp, "act.sock")
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    held.bind(sock)
    held.listen(16)
    held_ino = os.stat(sock).st_ino
    log = os.path.join(tmp, "act.log")
    args = [blkd, "--export", f"socket={sock},file={img},cache=writeback"]
    pid = spawn(args, log, {"NOTIFY_SOCKET": npath}, pass_fd=held.fileno(),
                listen_fdnames="vm")
    msg = recv_notify(ns)
    ok("activation: READY=1", msg is not None and msg.startswith("READY=1"),
       repr(msg))
    try:
        c = fe_connect(sock)
        feats = fe_get_features(c)
        c.close()
    except OSError as e:
        feats = f"connect: {e}"
    ok("activation: at READY=1 the passed socket is served", features_ok(feats),
       repr(feats))
    ok("activation: the daemon took fd 3 rather than binding the path",
       os.stat(sock).st_ino == held_ino and
       not log_has(log, "not bound to any"))
    ok("activation: a front-end's I/O verifies",
       run_bench(sock, os.path.join(tmp, "bench1.log")) == 0)

    # 3. Restart with the socket held by the manager.
    os.kill(pid, signal.SIGTERM)
    msg = recv_notify(ns)
    ok("restart: STOPPING=1", msg is not None and msg.startswith("STOPPING=1"),
       repr(msg))
    ok("restart: old daemon exits 0", wait_exit(pid) == 0)
    ok("restart: the held socket file is left in place", os.path.exists(sock))
    # No daemon runs now: a VMM reconnecting must not be refused.
    try:
        gap = fe_connect(sock)
        gap.sendall(struct.pack("<III", VHOST_USER_GET_FEATURES,
                                VHOST_USER_VERSION, 0))
        connected = True
    except OSError as e:
        connected = False
        print(f"#   connect during the restart: {e}")
    ok("restart: a front-end connecting between two daemons is not refused",
       connected)
    pid = spawn(args, log, {"NOTIFY_SOCKET": npath}, pass_fd=held.fileno(),
                listen_fdnames="vm")
    msg = recv_notify(ns)
    ok("restart: the new daemon sends READY=1", msg is not None and
       msg.startswith("READY=1"), repr(msg))
    feats = fe_features_reply(gap) if connected else "not connected"
    ok("restart: that front-end's request is answered by the new daemon",
       features_ok(feats), repr(feats))
    if connected:
        gap.close()
    ok("restart: the new daemon serves a front-end's I/O, verified",
       run_bench(sock, os.path.join(tmp, "bench2.log")) == 0)
    os.kill(pid, signal.SIGTERM)
    recv_notify(ns)
    ok("restart: second daemon exits 0", wait_exit(pid) == 0)
    ns.close()

    # 3b. The QEMU syntax names the passed socket by number (addr.str=3).
    helptext = subprocess.run([blkd, "--help"], capture_output=True,
                              text=True).stdout
    if "addr.type=fd" in helptext:
        ns, npath = notify_socket("notify-fd")
        sock = os.path.join(tmp, "byfd.sock")
        held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        held.bind(sock)
        held.listen(16)
        log = os.path.join(tmp, "byfd.log")
        pid = spawn([blkd, "--blockdev",
                     f"driver=file,node-name=n0,filename={img}",
                     "--export", "type=vhost-user-blk,id=e0,node-name=n0,"
                     "addr.type=fd,addr.str=3,writable=on"], log,
                    {"NOTIFY_SOCKET": npath}, pass_fd=held.fileno())
        msg = recv_notify(ns)
        try:
            c = fe_connect(sock)
            feats = fe_get_features(c)
            c.close()
        except OSError as e:
            feats = f"connect: {e}"
        ok("addr.type=fd,addr.str=3: READY=1, then served",
           msg is not None and msg.startswith("READY=1") and
           features_ok(feats), f"{msg!r} {feats!r}")
        ok("addr.type=fd,addr.str=3: I/O verifies",
           run_bench(sock, os.path.join(tmp, "bench3.log")) == 0)
        os.kill(pid, signal.SIGTERM)
        ok("addr.type=fd,addr.str=3: STOPPING=1, exit 0",
           (recv_notify(ns) or "").startswith("STOPPING=1") and
           wait_exit(pid) == 0)
        ok("addr.type=fd,addr.str=3: the socket file is left to the manager",
           os.path.exists(sock))
        held.close()
        ns.close()

    # 3c. One passed socket, two exports claiming it (by path and by
    # number, or twice by number): refused at start-up, nothing served.
    # (The second export used to take it too: two servers on one socket,
    # and the fd closed twice at exit.)
    if "addr.type=fd" in helptext:
        sock = os.path.join(tmp, "twice.sock")
        held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        held.bind(sock)
        held.listen(16)
        byfd = "type=vhost-user-blk,id=e%d,node-name=n%d,addr.type=fd," \
               "addr.str=3,writable=on"
        for what, exports in (
                ("--export socket= and addr.str=3",
                 ["--export", f"socket={sock},driver=null,size=1M",
                  "--blockdev", "driver=null-co,node-name=n1,size=1M",
                  "--export", byfd % (1, 1)]),
                ("addr.str=3 twice",
                 ["--blockdev", "driver=null-co,node-name=n1,size=1M",
                  "--blockdev", "driver=null-co,node-name=n2,size=1M",
                  "--export", byfd % (1, 1), "--export", byfd % (2, 2)])):
            log = os.path.join(tmp, "twice.log")
            open(log, "w").close()
            pid = spawn([blkd] + exports, log, {}, pass_fd=held.fileno())
            rc = wait_exit(pid)
            ok(f"one passed socket, {what}: refused",
               rc == 1 and log_has(log, "already used by"),
               f"exit {rc}; log: {open(log).read().strip()}")
        held.close()

    # 4. A broken environment is refused before anything is served.
    ns, npath = notify_socket("notify3")
    for env, want in (({"LISTEN_PID": "self", "LISTEN_FDS": "x"},
                       "LISTEN_FDS='x'"),
                      ({"LISTEN_PID": "self", "LISTEN_FDS": "1",
                        "LISTEN_FDNAMES": "a:b"}, "names 2 file descriptors"),
                      ({"LISTEN_PID": "self", "LISTEN_FDS": "60"}, "is not open")):
        log = os.path.join(tmp, "bad.log")
        open(log, "w").close()
        e = {"NOTIFY_SOCKET": npath}
        e.update(env)
        if e.get("LISTEN_PID") == "self":
            # exec'd by a shell that puts its own pid in place first
            e.pop("LISTEN_PID")
            a = ["/bin/sh", "-c", 'LISTEN_PID=$$ exec "$0" "$@"', blkd]
        else:
            a = [blkd]
        a += ["--export", f"socket={tmp}/bad.sock,driver=null,size=1M"]
        pid = spawn(a, log, e)
        rc = wait_exit(pid)
        ok(f"refused: {want}", rc == 1 and log_has(log, want) and
           recv_notify(ns, 0) is None and not os.path.exists(f"{tmp}/bad.sock"),
           f"exit {rc}; log: {open(log).read().strip()}")
    ns.close()

    # 5. A NOTIFY_SOCKET that cannot be used (systemd's vsock: form, a
    # relative path, nothing there) is warned about, and the daemon serves
    # anyway (it used to stop at startup).
    for env, want in (("vsock:2:1234", "AF_VSOCK"),
                      ("relative", "not an absolute socket path"),
                      (f"{tmp}/no-such-notify", "cannot connect")):
        log = os.path.join(tmp, "notify-bad.log")
        open(log, "w").close()
        sock = os.path.join(tmp, "nb.sock")
        pid = spawn([blkd, "--export", f"socket={sock},driver=null,size=1M"],
                    log, {"NOTIFY_SOCKET": env})
        feats = "not started"
        for _ in range(HANG * 10):
            if os.path.exists(sock):
                break
            if os.waitpid(pid, os.WNOHANG)[0]:
                pid = None
                break
            select.select([], [], [], 0.1)
        if pid is not None:
            try:
                c = fe_connect(sock)
                feats = fe_get_features(c)
                c.close()
            except OSError as e:
                feats = f"connect: {e}"
            os.kill(pid, signal.SIGTERM)
            rc = wait_exit(pid)
        else:
            rc = "exited at startup"
        ok(f"NOTIFY_SOCKET={env}: a warning, then served",
           features_ok(feats) and rc == 0 and log_has(log, want),
           f"{feats!r} exit {rc}; log: {open(log).read().strip()}")

    print(f"1..{n}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if len(sys.argv) >= 5 and sys.argv[1] == "test":
    run_tests(*sys.argv[2:5])
elif len(sys.argv) >= 5 and sys.argv[1] == "run":
    run_service(sys.argv[2], sys.argv[3], sys.argv[4:])
else:
    sys.exit(__doc__)
