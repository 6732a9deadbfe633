#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The seed's experiment on this host (scripts/bench/seed-table.sh runs it).

fio (4k randread, iodepth 32 per job by default) at numjobs 1..N, on one
target (a block device, a file or a RAM disk), through five setups:

  bare        fio on the host itself: the limit
  virtio-blk  QEMU's own virtio-blk-pci with an iothread, aio=native,
              cache.direct=on (and iothread-vq-mapping, one iothread per
              queue, when the host's QEMU has it: 8.2 and later)
  qsd         qemu-storage-daemon's vhost-user-blk export, one iothread
  vhost-blkd  vhost-blkd, one iothread per queue
  vhost_blk   the kernel vhost_blk module through the patched QEMU's
              vhost-pci-blk-pci,drive= (skipped, with the reason, where the
              host cannot load it or the patched QEMU is not built)

Each guest setup is one boot of the project's guest (the test kernel and
initramfs, scripts/guest/build-assets.sh) that runs fio at every numjobs
in turn; the guest prints a marker before and after each fio run and the
host samples the CPU time of the QEMU process, of the back-end daemon and
of the module's worker threads at each marker: host CPU per I/O is that
time over the I/Os fio did.  For bare metal it is fio's own CPU time.
Repetitions are interleaved: repetition r of every setup runs before
repetition r + 1 of any.

With --cloud-image the guest is instead a cloud image the user names,
booted under snapshot=on (the file is only read) with a NoCloud seed whose
user-data runs the same job and prints the same markers (CLOUD_JOB).

KVM is used when a guest actually runs on it (a boot sector is started with
-accel kvm and must reach its exit port); otherwise TCG, with small
defaults, and every output says the figures are the emulator's.
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import stat
import statistics
import subprocess
import sys
import tempfile
import time

SRC = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))

SETUPS = ["bare", "virtio-blk", "qsd", "vhost-blkd", "vhost_blk"]
NAME = {
    "bare": "bare metal",
    "virtio-blk": "QEMU virtio-blk",
    "qsd": "qsd vhost-user-blk",
    "vhost-blkd": "vhost-blkd",
    "vhost_blk": "kernel vhost_blk",
}
# The measurement the project grew from (the 2018 post, table A-F).
SEED = {
    "source": "the seed, 2018: fio 4k randread, numjobs 1..16, in a guest "
              "and on bare metal (table A-F)",
    "jobs": 16,
    "iops": {"virtio-blk": 101000, "vhost_blk": 1202000, "bare": 1480000},
}
CLK = os.sysconf("SC_CLK_TCK")
# The serial of the measured disk in every setup: the cloud guest finds the
# disk by it.  qemu-storage-daemon's vhost-user-blk export cannot be given
# one: it always answers GET_ID with QEMU's fixed string.
SERIAL = "vbseed"
SERIAL_QSD = "vhost_user_blk"


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


def die(msg):
    print(f"seed-table: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def parse_size(s):
    m = re.fullmatch(r"(\d+)([kKmMgGtT]?)(i?[bB])?", s.strip())
    if not m:
        raise argparse.ArgumentTypeError(
            f"bad size '{s}': give a number with an optional k, M, G or T suffix")
    n = int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2).lower()]
    if n <= 0:
        raise argparse.ArgumentTypeError(f"bad size '{s}': must be more than 0")
    return n


def parse_jobs(s):
    out = []
    for part in re.split(r"[,\s]+", s.strip()):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise argparse.ArgumentTypeError(
                f"bad --jobs '{s}': give numbers and ranges, e.g. 1-16 or 1,2,4,8,16")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if a < 1 or b < a or b > 256:
            raise argparse.ArgumentTypeError(f"bad --jobs range '{part}' (1..256, low-high)")
        out.extend(range(a, b + 1))
    if not out:
        raise argparse.ArgumentTypeError("--jobs is empty")
    return sorted(set(out))


def positive(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not a whole number")
    if v < 1:
        raise argparse.ArgumentTypeError(f"'{s}' must be at least 1")
    return v


def fmt_iops(x):
    if x is None:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def median(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


# ------------------------------------------------------------ host probes

def probe_kvm(qemu, tmp):
    """(True, None) if a guest runs under KVM, else (False, why)."""
    if not os.path.exists("/dev/kvm"):
        return False, "no /dev/kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is not readable and writable by this user"
    # A boot sector that writes 0x31 to isa-debug-exit: QEMU exits with
    # (0x31 << 1) | 1 = 99 only if the vCPU really ran under KVM.
    img = os.path.join(tmp, "kvm-probe.img")
    with open(img, "wb") as f:
        code = bytes([0xB0, 0x31, 0xE6, 0xF4, 0xF4, 0xEB, 0xFD])
        f.write(code + bytes(510 - len(code)) + b"\x55\xaa")
    cmd = [qemu, "-machine", "pc,accel=kvm", "-nodefaults", "-no-user-config",
           "-display", "none", "-serial", "none", "-monitor", "none", "-m", "16",
           "-drive", f"file={img},format=raw,if=ide,snapshot=on",
           "-device", "isa-debug-exit,iobase=0xf4,iosize=4"] + firmware_args()
    try:
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=30)
    except subprocess.TimeoutExpired:
        return False, "a KVM guest did not reach its exit port within 30 s"
    if p.returncode == 99:
        return True, None
    err = p.stderr.decode(errors="replace").strip().splitlines()
    return False, (err[-1] if err else f"QEMU -accel kvm exited with status {p.returncode}")


def firmware_args():
    # A QEMU built from source finds Debian's firmware only through -L.
    out = []
    for d in ("/usr/share/seabios", "/usr/share/qemu"):
        if os.path.isdir(d):
            out += ["-L", d]
    return out


def qemu_has(qemu, device, prop):
    try:
        p = subprocess.run([qemu, "-device", f"{device},help"], capture_output=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and (prop is None or prop in p.stdout.decode(errors="replace"))


def qemu_has_user_net(qemu):
    """True if QEMU has the user-mode network (libslirp): the patched QEMU
    that scripts/build-qemu.sh builds has not."""
    try:
        p = subprocess.run([qemu, "-netdev", "help"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    # "Available netdev backend types:" and one name per line or a list;
    # "vhost-user" is not "user".
    return "user" in p.stdout.decode(errors="replace").split()


def qemu_version(qemu):
    try:
        p = subprocess.run([qemu, "--version"], capture_output=True, timeout=30)
        return p.stdout.decode(errors="replace").splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "unknown"


def o_direct_works(path):
    """True if PATH can be read with O_DIRECT (tmpfs before Linux 6.6 cannot)."""
    import mmap
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return False
    try:
        buf = mmap.mmap(-1, 4096)
        os.preadv(fd, [buf], 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def fill(path, size):
    """Write SIZE bytes to PATH: reads of holes would cost the disk nothing."""
    chunk = bytes(1 << 20)
    with open(path, "r+b" if os.path.exists(path) else "wb") as f:
        done = 0
        while done < size:
            n = min(len(chunk), size - done)
            f.write(chunk[:n])
            done += n
        f.flush()
        os.fsync(f.fileno())


def dev_size(path):
    p = subprocess.run(["blockdev", "--getsize64", path], capture_output=True)
    if p.returncode != 0:
        die(f"cannot read the size of {path}: {p.stderr.decode(errors='replace').strip()}")
    return int(p.stdout)


def run_quiet(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(cmd, 127, b"", str(e).encode())


# ------------------------------------------------------------ CPU sampling

def proc_cpu(pid):
    """User + system seconds of process PID (all its threads), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def module_threads(qpid):
    """PIDs of vhost_blk's worker kthreads of QEMU QPID ("vblk-QPID-qN")."""
    out = []
    prefix = f"vblk-{qpid}-q"
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                if f.read().startswith(prefix):
                    out.append(int(d))
        except OSError:
            pass
    return out


def sample(pids, qpid):
    snap = {}
    for p in list(pids) + (module_threads(qpid) if qpid else []):
        v = proc_cpu(p)
        if v is not None:
            snap[p] = v
    return snap


def cpu_delta(a, b):
    return sum(v - a.get(p, 0.0) for p, v in b.items())


# ------------------------------------------------------------ QMP

def qmp_vcpu_threads(path, deadline):
    """Thread ids of the guest's vCPUs, asked over QMP."""
    while not os.path.exists(path):
        if time.time() > deadline:
            raise OSError("no QMP socket")
        time.sleep(0.05)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(max(1.0, deadline - time.time()))
    s.connect(path)
    f = s.makefile("rwb")

    def cmd(name):
        f.write(json.dumps({"execute": name}).encode() + b"\n")
        f.flush()
        while True:
            line = f.readline()
            if not line:
                raise OSError("QMP closed")
            msg = json.loads(line)
            if "return" in msg:
                return msg["return"]
            if "error" in msg:
                raise OSError(msg["error"].get("desc", "QMP error"))

    try:
        json.loads(f.readline())          # greeting
        cmd("qmp_capabilities")
        return [c["thread-id"] for c in cmd("query-cpus-fast")]
    finally:
        s.close()


# ------------------------------------------------------------ the guest job

GUEST_JOB = r"""# SPDX-License-Identifier: GPL-2.0-or-later
# seed (scripts/bench/seed-table.sh): fio at each numjobs of vbseedjobs
# ('+'-separated) on /dev/$vbdev.  SEED-BEGIN and SEED-END frame each run
# so that the host samples its CPU counters around it; SEED-END carries
# fio's status, read IOPS and runtime (ms), write IOPS and runtime.
for n in $(echo "$vbseedjobs" | tr '+' ' '); do
    echo "SEED-BEGIN $n"
    line=$(fio --minimal --name=seed --filename=/dev/$vbdev --rw=$vbseedrw \
        --bs=$vbseedbs --iodepth=$vbseeddepth --ioengine=$vbseedengine \
        --direct=$vbseeddirect --numjobs=$n --time_based \
        --runtime=$vbseedtime --group_reporting 2>/tmp/fio.err)
    st=$?
    # terse v3: 8 read IOPS, 9 read ms, 49 write IOPS, 50 write ms
    set -- $(echo "$line" | awk -F';' '{ print $8, $9, $49, $50 }')
    echo "SEED-END $n $st ${1:-0} ${2:-0} ${3:-0} ${4:-0}"
    [ "$st" -eq 0 ] || vb_log "fio: $(head -c 400 /tmp/fio.err | tr '\n' ' ')"
done
return 0
"""

BEGIN_RE = re.compile(r"SEED-BEGIN (\d+)")
END_RE = re.compile(r"SEED-END (\d+) (\d+) ([\d.]+) (\d+) ([\d.]+) (\d+)")
RESULT_RE = re.compile(r"VBTEST-RESULT: (.*)")


def make_initramfs(assets, tmp):
    """The test initramfs with the seed job appended as a second archive."""
    pay = os.path.join(tmp, "payload")
    os.makedirs(os.path.join(pay, "jobs"), exist_ok=True)
    with open(os.path.join(pay, "jobs", "seed.sh"), "w") as f:
        f.write(GUEST_JOB)
    out = os.path.join(tmp, "initramfs.img")
    files = subprocess.run(["find", ".", "-print0"], cwd=pay, capture_output=True,
                           check=True).stdout
    files = b"\0".join(sorted(x for x in files.split(b"\0") if x)) + b"\0"
    cpio = subprocess.run(["cpio", "--null", "-o", "-H", "newc", "--quiet", "-R", "0:0"],
                          cwd=pay, input=files, capture_output=True)
    if cpio.returncode != 0:
        die(f"cpio failed: {cpio.stderr.decode(errors='replace')}")
    gz = subprocess.run(["gzip", "-1n"], input=cpio.stdout, capture_output=True, check=True)
    with open(out, "wb") as f:
        with open(os.path.join(assets, "initramfs.img"), "rb") as base:
            shutil.copyfileobj(base, f)
        f.write(gz.stdout)
    return out



# The same job for a cloud image, run by cloud-init from the NoCloud seed's
# user-data.  The host fills in the @NAME@ fields (each one checked to be a
# number or a single fio word before it gets here).  The disk is found by
# its serial: its name (vdb, vdc, ...) depends on the image's other disks.
# It installs fio itself, and only when it is missing: cloud-init's
# "packages:" would run the package manager's update on every boot, and the
# project's own test image has no network.
CLOUD_JOB = r"""#!/bin/sh
# seed-table.sh (vhost-blk): fio at each numjobs on the disk whose serial
# is @SERIAL@; results on the serial console, then power off.
con=/dev/ttyS0
[ -w "$con" ] || con=/dev/console
say() { echo "$*" > "$con"; }
finish() {
    say "VBTEST-RESULT: $*"
    sync
    systemctl poweroff --no-block 2>/dev/null || poweroff
    exit 0
}
say "SEED-CLOUD: the user-data runs ($(uname -r))"
dev=
i=0
while [ -z "$dev" ] && [ $i -lt 30 ]; do
    for b in /sys/block/*; do
        if [ "$(cat "$b/serial" 2>/dev/null)" = "@SERIAL@" ]; then
            dev=/dev/${b##*/}
        fi
    done
    [ -n "$dev" ] || { sleep 1; i=$((i + 1)); }
done
[ -n "$dev" ] || finish "FAIL no disk with serial @SERIAL@ in the guest" \
    "(disks: $(ls /sys/block | tr '\n' ' '))"
if ! command -v fio > /dev/null 2>&1; then
    say "VBTEST-LOG: fio: not in the image: installing it"
    export DEBIAN_FRONTEND=noninteractive
    if command -v apt-get > /dev/null; then
        err=$( (apt-get -q update && apt-get -qy install fio) 2>&1)
    elif command -v dnf > /dev/null; then
        err=$(dnf -qy install fio 2>&1)
    elif command -v zypper > /dev/null; then
        err=$(zypper -nq install fio 2>&1)
    elif command -v apk > /dev/null; then
        err=$(apk add fio 2>&1)
    else
        err="no apt-get, dnf, zypper or apk in the image"
    fi
    command -v fio > /dev/null 2>&1 ||
        finish "FAIL the cloud image has no fio and could not install it:" \
            "$(echo "$err" | grep -v '^ *$' | tail -n 3 | tr '\n' ' ' | cut -c1-400)"
fi
for n in @JOBS@; do
    say "SEED-BEGIN $n"
    line=$(fio --minimal --name=seed --filename="$dev" --rw=@RW@ --bs=@BS@ \
        --iodepth=@DEPTH@ --ioengine=@ENGINE@ --direct=@DIRECT@ --numjobs=$n \
        --time_based --runtime=@RUNTIME@ --group_reporting 2>/tmp/fio.err)
    st=$?
    # terse v3: 8 read IOPS, 9 read ms, 49 write IOPS, 50 write ms
    set -- $(echo "$line" | awk -F';' '{ print $8, $9, $49, $50 }')
    say "SEED-END $n $st ${1:-0} ${2:-0} ${3:-0} ${4:-0}"
    [ "$st" -eq 0 ] ||
        say "VBTEST-LOG: fio: $(head -c 400 /tmp/fio.err | tr '\n' ' ')"
done
finish PASS
"""


def image_format(path):
    """'qcow2' or 'raw', from the file's first bytes."""
    with open(path, "rb") as f:
        magic = f.read(4)
    return "qcow2" if magic == b"QFI\xfb" else "raw"


def make_cloud_seed(a, direct, serial, instance, tmp):
    """A NoCloud seed: an iso9660 volume labelled cidata with meta-data and
    user-data, made without mounting anything."""
    d = os.path.join(tmp, f"cidata-{instance}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    fields = {"SERIAL": serial, "JOBS": " ".join(map(str, a.jobs)), "RW": a.rw,
              "BS": a.bs, "DEPTH": str(a.iodepth), "ENGINE": a.engine,
              "DIRECT": "1" if direct else "0", "RUNTIME": str(a.runtime)}
    job = CLOUD_JOB
    for k, v in fields.items():
        job = job.replace(f"@{k}@", v)
    with open(os.path.join(d, "meta-data"), "w") as f:
        # A new instance id per boot: cloud-init runs the user-data again
        # even if the image was booted before.
        f.write(f"instance-id: vb-seed-{instance}-{os.getpid()}\n"
                f"local-hostname: vbseed\n")
    # JSON is valid YAML.  bootcmd runs in cloud-init's init stage, runcmd
    # after its config and final stages have started (70 s later under
    # TCG here): the job powers the guest off, so the later stages never
    # run after bootcmd.
    cfg = {a.cloud_stage: [["sh", "-c", job]]}
    with open(os.path.join(d, "user-data"), "w") as f:
        f.write("#cloud-config\n" + json.dumps(cfg, indent=1) + "\n")
    iso = os.path.join(tmp, f"cidata-{instance}.iso")
    p = subprocess.run(["genisoimage", "-quiet", "-output", iso, "-volid", "cidata",
                        "-rock", os.path.join(d, "user-data"),
                        os.path.join(d, "meta-data")], capture_output=True)
    if p.returncode != 0:
        die(f"genisoimage failed making the NoCloud seed: "
            f"{p.stderr.decode(errors='replace').strip()}")
    return iso


# ------------------------------------------------------------ the run

class Bench:
    def __init__(self, a):
        self.a = a
        self.tmp = tempfile.mkdtemp(prefix="vb-seed.", dir="/var/tmp")
        self.cleanups = []
        self.records = []
        self.failed = {}
        self.skipped = {}
        self.config = {}
        self.pin_note = None
        self.kvm_why = None
        self.boot_seconds = {}
        self.guest_os = None

    # -- target --------------------------------------------------------
    def prepare_target(self):
        a = self.a
        writes = "write" in a.rw or a.rw in ("rw", "randrw", "trim", "randtrim")
        self.writes = writes
        if a.device:
            st = os.stat(a.device) if os.path.exists(a.device) else None
            if st is None or not stat.S_ISBLK(st.st_mode):
                die(f"--device {a.device} is not a block device")
            if writes and not a.destroy_data:
                die(f"--rw {a.rw} writes to {a.device}: add --destroy-data if its "
                    "contents may be overwritten")
            self.target, self.kind, self.size = a.device, "block device", dev_size(a.device)
        elif a.file:
            if os.path.exists(a.file):
                if not stat.S_ISREG(os.stat(a.file).st_mode):
                    die(f"--file {a.file} is not a regular file (use --device for a disk)")
                have = os.path.getsize(a.file)
                if a.size and have < a.size:
                    log(f"writing {a.file} up to {a.size >> 20} MiB")
                    fill(a.file, a.size)
            elif a.size:
                log(f"creating {a.file} ({a.size >> 20} MiB, written so reads hit the disk)")
                fill(a.file, a.size)
            else:
                die(f"--file {a.file} does not exist: give --size to create it")
            self.target, self.kind, self.size = a.file, "file", os.path.getsize(a.file)
            if self.size < 1 << 20:
                die(f"--file {a.file} is {self.size} bytes: give at least 1 MiB (--size)")
        else:
            self.target, self.kind = self.ram_disk(a.ram)
            self.size = a.ram
        self.direct = o_direct_works(self.target)
        if not self.direct:
            log(f"{self.target} cannot be opened with O_DIRECT: every setup uses the page "
                "cache (buffered) instead")

    def ram_disk(self, size):
        """brd when this run can load it, else a file on tmpfs."""
        if (os.geteuid() == 0 and os.path.exists("/proc/modules")
                and not os.path.exists("/sys/module/brd") and shutil.which("modprobe")):
            p = run_quiet(["modprobe", "brd", "rd_nr=1", f"rd_size={size >> 10}", "max_part=0"])
            if p.returncode == 0 and os.path.exists("/dev/ram0"):
                self.cleanups.append(lambda: run_quiet(["rmmod", "brd"]))
                log(f"RAM disk: /dev/ram0 (brd, {size >> 20} MiB)")
                fill("/dev/ram0", size)
                return "/dev/ram0", "RAM disk (brd)"
        d = "/dev/shm" if os.path.isdir("/dev/shm") else self.tmp
        path = os.path.join(d, f"vhost-blk-seed-{os.getpid()}.img")
        self.cleanups.append(lambda: os.path.exists(path) and os.unlink(path))
        log(f"RAM disk: {path} (a file on tmpfs, {size >> 20} MiB; brd was not loadable "
            "here)")
        fill(path, size)
        return path, "RAM disk (file on tmpfs)"

    # -- availability --------------------------------------------------
    def check_setups(self):
        a = self.a
        for s in a.setups:
            why = None
            if s == "virtio-blk" and not shutil.which(a.qemu):
                why = f"no QEMU binary '{a.qemu}' (--qemu)"
            elif s == "qsd" and not shutil.which(a.qsd):
                why = f"no qemu-storage-daemon binary '{a.qsd}' (--qsd)"
            elif s == "vhost-blkd" and not os.access(a.vhost_blkd, os.X_OK):
                why = f"{a.vhost_blkd} is not built (ninja -C build tools/vhost-blkd, or --vhost-blkd)"
            elif s == "vhost_blk":
                why = self.prepare_vhost_blk()
            if why:
                self.skipped[s] = why
                log(f"{NAME[s]}: skipped: {why}")

    def prepare_vhost_blk(self):
        a = self.a
        rel = os.uname().release
        mod_ready = os.path.exists("/dev/vhost-blk")
        if mod_ready:
            if not os.access("/dev/vhost-blk", os.R_OK | os.W_OK):
                return ("/dev/vhost-blk is not readable and writable by this user (run as "
                        "root, or see docs/kernel-vhost-blk.md, 'Access to /dev/vhost-blk')")
        else:
            if not os.path.exists("/proc/modules"):
                return (f"the host kernel ({rel}) has no loadable-module support (no "
                        "/proc/modules): vhost_blk cannot be loaded on this host")
            try:
                with open("/proc/sys/kernel/modules_disabled") as f:
                    if f.read().strip() == "1":
                        return "module loading is disabled on this host (kernel.modules_disabled=1)"
            except OSError:
                pass
            if os.geteuid() != 0:
                return "vhost_blk is not loaded and loading it needs root"
            installed = run_quiet(["modprobe", "-n", "vhost_blk"]).returncode == 0
            kdir = f"/lib/modules/{rel}/build"
            if not installed and not a.kmod:
                if not a.vhost_h:
                    return (f"vhost_blk is not installed for kernel {rel}: give --kmod "
                            "vhost_blk.ko, or --vhost-h PATH to this kernel source's "
                            "drivers/vhost/vhost.h to build it (docs/kernel-vhost-blk.md, "
                            "'On a real host')")
                if not os.path.isfile(os.path.join(kdir, "Makefile")):
                    return f"no kernel headers for {rel} ({kdir}): install linux-headers-{rel}"
        pq = a.patched_qemu
        if not pq or not os.access(pq, os.X_OK):
            return ("the patched QEMU is not built: run scripts/build-qemu.sh, or give "
                    "--patched-qemu BIN")
        if not qemu_has(pq, "vhost-pci-blk-pci", None):
            return f"{pq} has no vhost-pci-blk-pci device (not the patched QEMU?)"
        if mod_ready:
            return None
        # Load it; unloaded again at the end.
        if run_quiet(["modprobe", "-n", "vhost_blk"]).returncode == 0:
            p = run_quiet(["modprobe", "vhost_blk"])
        else:
            ko = a.kmod
            if not ko:
                ko = self.build_kmod(rel)
                if ko.startswith("!"):
                    return ko[1:]
            run_quiet(["modprobe", "vhost"])
            p = run_quiet(["insmod", ko])
        if p.returncode != 0:
            return f"loading vhost_blk failed: {p.stderr.decode(errors='replace').strip()}"
        self.cleanups.append(lambda: run_quiet(["rmmod", "vhost_blk"]))
        for _ in range(100):
            if os.path.exists("/dev/vhost-blk"):
                return None
            time.sleep(0.05)
        return "vhost_blk loaded but /dev/vhost-blk did not appear within 5 s (udev?)"

    def build_kmod(self, rel):
        src = os.path.join(self.tmp, "kmod")
        shutil.copytree(os.path.join(SRC, "kernel"), os.path.join(src, "kernel"))
        shutil.copytree(os.path.join(SRC, "include"), os.path.join(src, "include"))
        d = os.path.join(src, "kernel", "vhost-blk")
        log(f"building vhost_blk for {rel} against {self.a.vhost_h}")
        p = subprocess.run(["make", "-C", d, f"KDIR=/lib/modules/{rel}/build",
                            f"VHOST_INC={os.path.dirname(os.path.abspath(self.a.vhost_h))}"],
                           capture_output=True)
        ko = os.path.join(d, "vhost_blk.ko")
        if p.returncode != 0 or not os.path.exists(ko):
            tail = p.stderr.decode(errors="replace").strip().splitlines()[-3:]
            return "!building vhost_blk failed: " + " / ".join(tail)
        return ko

    # -- one bare-metal run ---------------------------------------------
    def fio_args(self, filename, jobs):
        a = self.a
        return ["--minimal", "--name=seed", f"--filename={filename}", f"--rw={a.rw}",
                f"--bs={a.bs}", f"--iodepth={a.iodepth}", f"--ioengine={a.engine}",
                f"--direct={1 if self.direct else 0}", f"--numjobs={jobs}",
                "--time_based", f"--runtime={a.runtime}", "--group_reporting"]

    def run_bare(self, rep):
        for n in self.a.jobs:
            load = os.getloadavg()[0]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            p = subprocess.run(["fio"] + self.fio_args(self.target, n), capture_output=True)
            wall = time.monotonic() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            f = p.stdout.decode(errors="replace").strip().split(";")
            if p.returncode != 0 or len(f) < 50:
                err = p.stderr.decode(errors="replace").strip().splitlines()
                self.fail("bare", f"fio exited with status {p.returncode}: "
                          + (err[-1] if err else "no output"))
                return
            self.add("bare", rep, n, float(f[7]), int(f[8]), float(f[48]), int(f[49]),
                     cpu, wall, load)
            self.progress("bare", rep, n)

    # -- one guest boot -------------------------------------------------
    def disk_for(self, s, sock):
        """(QEMU args for the disk, back-end command or None, description)."""
        a, t, q = self.a, self.target, self.a.queues
        blockish = stat.S_ISBLK(os.stat(t).st_mode)
        ro = "on" if not self.writes else "off"
        if s == "virtio-blk":
            cache = "cache.direct=on,aio=native" if self.direct else "cache.direct=off,aio=threads"
            drive = ["-drive", f"file={t},if=none,id=d0,format=raw,{cache},readonly={ro}"]
            if self.vq_mapping:
                iots = []
                for i in range(q):
                    iots += ["-object", f"iothread,id=iot{i}"]
                dev = {"driver": "virtio-blk-pci", "drive": "d0", "num-queues": q,
                       "serial": SERIAL,
                       "iothread-vq-mapping": [{"iothread": f"iot{i}"} for i in range(q)]}
                return (iots + drive + ["-device", json.dumps(dev)], None,
                        f"virtio-blk-pci, {q} queues, iothread-vq-mapping over {q} iothreads, "
                        f"{cache}")
            return (["-object", "iothread,id=iot0"] + drive +
                    ["-device", f"virtio-blk-pci,drive=d0,iothread=iot0,num-queues={q},"
                     f"serial={SERIAL}"], None,
                    f"virtio-blk-pci, {q} queues, 1 iothread (this QEMU has no "
                    f"iothread-vq-mapping), {cache}")
        user = ["-chardev", f"socket,id=c0,path={sock}",
                "-device", f"vhost-user-blk-pci,chardev=c0,num-queues={q}"]
        if s == "qsd":
            drv = "host_device" if blockish else "file"
            cache = "cache.direct=on,aio=native" if self.direct else "cache.direct=off,aio=threads"
            cmd = [a.qsd, "--object", "iothread,id=iot0",
                   "--blockdev", f"driver={drv},node-name=f,filename={t},{cache},"
                                 f"read-only={ro}",
                   "--export", f"type=vhost-user-blk,id=e0,node-name=f,addr.type=unix,"
                               f"addr.path={sock},writable={'on' if self.writes else 'off'},"
                               f"num-queues={q},iothread=iot0"]
            return user, cmd, f"vhost-user-blk export, {q} queues, 1 iothread, {drv}, {cache}"
        if s == "vhost-blkd":
            cache = "none" if self.direct else "writeback"
            cmd = [a.vhost_blkd, "--iothreads", str(q),
                   "--export", f"socket={sock},file={t},cache={cache},num-queues={q},"
                               f"readonly={ro},serial={SERIAL}"]
            return user, cmd, f"{q} queues, {q} iothreads (one per queue), aio=io_uring, cache={cache}"
        if s == "vhost_blk":
            cache = "none" if self.direct else "writeback"
            return (["-drive", f"file={t},if=none,id=d0,format=raw,cache={cache},readonly={ro}",
                     "-device", f"vhost-pci-blk-pci,drive=d0,num-queues={q},"
                                f"serial={SERIAL}"], None,
                    f"vhost-pci-blk-pci,drive= (patched QEMU), {q} queues, cache={cache}")
        raise ValueError(s)

    def run_guest(self, s, rep):
        a = self.a
        sock = os.path.join(self.tmp, f"{s}.sock")
        console = os.path.join(self.tmp, f"console-{s}-r{rep}.log")
        errlog = os.path.join(self.tmp, f"qemu-{s}-r{rep}.log")
        qmp = os.path.join(self.tmp, f"qmp-{s}.sock")
        for p in (sock, qmp):
            if os.path.exists(p):
                os.unlink(p)
        disk, bcmd, desc = self.disk_for(s, sock)
        self.config[s] = desc
        backend = None
        blog = os.path.join(self.tmp, f"{s}-r{rep}.log")
        if bcmd:
            with open(blog, "w") as bf:
                backend = subprocess.Popen(bcmd, stdout=bf, stderr=subprocess.STDOUT,
                                           start_new_session=True)
            deadline = time.time() + 20
            while not os.path.exists(sock):
                if backend.poll() is not None or time.time() > deadline:
                    self.stop(backend)
                    self.fail(s, f"{bcmd[0]} did not create {sock} (exit status "
                              f"{backend.returncode}): "
                              + (self.tail(blog) or "it printed nothing"))
                    return
                time.sleep(0.05)
        per_run = a.runtime + (60 if self.accel == "tcg" else 30)
        if a.cloud_image:
            # A distribution's boot, cloud-init and maybe a package install.
            limit = (900 if self.accel == "tcg" else 300) + per_run * len(a.jobs)
        else:
            limit = (240 if self.accel == "tcg" else 90) + per_run * len(a.jobs)
        qemu = a.patched_qemu if s == "vhost_blk" else a.qemu
        args = [qemu, "-machine", f"q35,accel={self.accel},memory-backend=mem",
                "-object", f"memory-backend-memfd,id=mem,size={a.mem},share=on",
                "-cpu", "host" if self.accel == "kvm" else "max",
                "-smp", str(a.vcpus), "-m", a.mem, "-display", "none",
                "-serial", f"file:{console}", "-monitor", "none", "-no-reboot",
                "-qmp", f"unix:{qmp},server=on,wait=off"]
        if a.cloud_image:
            args += self.cloud_args(s, rep)
        else:
            params = ["console=ttyS0", "quiet", "panic=-1", "cryptomgr.notests",
                      "no_timer_check", "vbjob=seed", f"vbtimeout={limit}",
                      "vbseedjobs=" + "+".join(map(str, a.jobs)), f"vbseedrw={a.rw}",
                      f"vbseedbs={a.bs}", f"vbseeddepth={a.iodepth}",
                      f"vbseedtime={a.runtime}", f"vbseedengine={a.engine}",
                      f"vbseeddirect={1 if self.direct else 0}"]
            args += ["-kernel", self.vmlinux, "-initrd", self.initrd,
                     "-append", " ".join(params), "-nic", "none"]
        args += firmware_args() + disk
        if a.cloud_image:
            # A network to install fio if the image lacks it; after the
            # disks, so that it cannot shift the boot disk's place.
            if qemu_has_user_net(qemu):
                args += ["-nic", "user,model=virtio-net-pci"]
            else:
                args += ["-nic", "none"]
                log(f"{NAME[s]}: {qemu} has no user-mode network: the guest has no NIC "
                    "(fio must be in the image)")
        with open(errlog, "w") as ef:
            qp = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=ef,
                                  start_new_session=True)
        pids = [qp.pid] + ([backend.pid] if backend else [])
        start = time.time()
        if a.pin:
            self.pin(qmp, start + 30)
        pos, buf, begin, result, boot_s = 0, "", {}, None, None
        while True:
            done = qp.poll() is not None
            try:
                with open(console, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
                    pos += len(chunk)
            except OSError:
                chunk = b""
            buf += chunk.decode(errors="replace").replace("\r", "")
            lines = buf.split("\n")
            buf = lines.pop()
            for line in lines:
                m = BEGIN_RE.search(line)
                if m:
                    begin[int(m.group(1))] = (sample(pids, qp.pid if s == "vhost_blk" else 0),
                                              time.monotonic(), os.getloadavg()[0])
                    continue
                m = END_RE.search(line)
                if m:
                    n = int(m.group(1))
                    snap = sample(pids, qp.pid if s == "vhost_blk" else 0)
                    if n in begin:
                        b, t0, load = begin[n]
                        if int(m.group(2)) != 0:
                            self.fail(s, f"fio in the guest exited with status {m.group(2)} "
                                      f"at {n} jobs (console: {console})")
                        else:
                            self.add(s, rep, n, float(m.group(3)), int(m.group(4)),
                                     float(m.group(5)), int(m.group(6)), cpu_delta(b, snap),
                                     time.monotonic() - t0, load)
                            self.progress(s, rep, n)
                    continue
                m = RESULT_RE.search(line)
                if m:
                    result = m.group(1).strip()
                elif "VBTEST-LOG: fio:" in line:
                    log(f"{NAME[s]}: {line.strip()}")
                elif "SEED-CLOUD:" in line and boot_s is None:
                    boot_s = time.time() - start
                    log(f"{NAME[s]}: cloud-init ran the job {boot_s:.0f} s after "
                        "QEMU started")
            if done:
                break
            if backend and backend.poll() is not None:
                self.fail(s, f"{bcmd[0]} exited with status {backend.returncode} during the "
                          "run: " + self.tail(blog))
                break
            if time.time() - start > limit + 30:
                if a.cloud_image and boot_s is None:
                    self.fail(s, f"the seed's user-data did not run within {limit + 30} s: "
                              "does the image run cloud-init with the NoCloud datasource "
                              f"and have a console on ttyS0? (console: {console})")
                else:
                    self.fail(s, f"the guest was still running after {limit + 30} s "
                              f"(console: {console})")
                break
            time.sleep(0.05)
        self.stop(qp)
        self.stop(backend)
        if s in self.failed:
            return
        if boot_s is not None:
            self.boot_seconds.setdefault(s, []).append(round(boot_s, 1))
        if qp.returncode not in (0, None) or result is None:
            why = self.tail(errlog) or "no VBTEST-RESULT on the console"
            if a.cloud_image and boot_s is None and qp.returncode in (0, None):
                why += (" (the seed's user-data never ran: does the image run cloud-init "
                        "with the NoCloud datasource and have a console on ttyS0?)")
            self.fail(s, f"QEMU exited with status {qp.returncode}: {why} (console: {console})")
        elif result != "PASS":
            self.fail(s, f"guest: {result} (console: {console})")
            if "has no fio" in result:
                # Every other boot of the same image would fail the same way.
                for o in a.setups:
                    if o not in ("bare", s) and o not in self.skipped:
                        self.fail(o, f"not run: the cloud image has no fio ({NAME[s]})")

    def cloud_args(self, s, rep):
        """QEMU options of the cloud image's boot: the image as the boot disk
        under a throw-away overlay (snapshot=on: the guest's writes go to a
        temporary file, the user's image is only read), its NoCloud seed, and
        a direct kernel boot if asked."""
        a = self.a
        serial = SERIAL_QSD if s == "qsd" else SERIAL
        iso = make_cloud_seed(a, self.direct, serial, f"{s}-r{rep}", self.tmp)
        # -kernel takes boot index 0 for itself (QEMU's linuxboot ROM).
        boot = "" if a.cloud_kernel else ",bootindex=0"
        args = ["-drive", f"file={self.cloud_path},if=none,id=boot,"
                          f"format={self.cloud_format},snapshot=on",
                "-device", f"virtio-blk-pci,drive=boot{boot}",
                "-drive", f"file={iso},if=none,id=cidata,format=raw,readonly=on",
                "-device", "virtio-blk-pci,drive=cidata"]
        if a.cloud_kernel:
            args += ["-kernel", a.cloud_kernel, "-append", a.cloud_append]
            if a.cloud_initrd:
                args += ["-initrd", a.cloud_initrd]
        return args

    def pin(self, qmp, deadline):
        try:
            tids = qmp_vcpu_threads(qmp, deadline)
            cpus = sorted(os.sched_getaffinity(0))
            for i, tid in enumerate(tids):
                os.sched_setaffinity(tid, {cpus[i % len(cpus)]})
            self.pin_note = (f"vCPU i on host CPU {cpus[0]}+i" if len(tids) <= len(cpus)
                             else f"{len(tids)} vCPUs over {len(cpus)} CPUs, round robin")
        except (OSError, ValueError, KeyError) as e:
            self.pin_note = f"not pinned: {e}"

    @staticmethod
    def stop(p):
        if p is None or p.poll() is not None:
            if p is not None:
                p.wait()
            return
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    @staticmethod
    def tail(path):
        try:
            with open(path, errors="replace") as f:
                lines = [l.strip() for l in f.read().splitlines() if l.strip()]
            return " / ".join(lines[-3:])
        except OSError:
            return ""

    def add(self, s, rep, n, riops, rms, wiops, wms, cpu, wall, load):
        ios = riops * rms / 1000 + wiops * wms / 1000
        self.records.append({
            "setup": s, "rep": rep, "jobs": n, "iops": riops + wiops, "ios": round(ios),
            "host_cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
            "cpu_us_per_io": round(cpu * 1e6 / ios, 3) if ios > 0 else None,
            "load1": load})

    def progress(self, s, rep, n):
        r = self.records[-1]
        c = r["cpu_us_per_io"]
        log(f"rep {rep}: {NAME[s]}, {n} job{'s' if n > 1 else ''}: {fmt_iops(r['iops'])} IOPS, "
            f"{'-' if c is None else f'{c:.1f}'} us host CPU per I/O")

    def fail(self, s, why):
        self.failed.setdefault(s, why)
        log(f"{NAME[s]}: FAILED: {why}")


# ------------------------------------------------------------ the report

def report(b, out, started, finished):
    a = b.a
    setups = a.setups
    measured = [s for s in setups if s not in b.skipped and s not in b.failed]
    recs = b.records

    def iops_of(s, n):
        return {r["rep"]: r["iops"] for r in recs if r["setup"] == s and r["jobs"] == n}

    table = []
    for n in a.jobs:
        bare = iops_of("bare", n)
        row = {"jobs": n, "setups": {}}
        for s in setups:
            if s in b.skipped or s in b.failed:
                continue
            mine = iops_of(s, n)
            cpu = [r["cpu_us_per_io"] for r in recs if r["setup"] == s and r["jobs"] == n]
            med = median(mine.values())
            bmed = median(bare.values())
            row["setups"][s] = {
                "iops": [mine.get(r) for r in range(1, a.repeat + 1)],
                "iops_median": med,
                "ratio_to_bare": round(med / bmed, 3) if med is not None and bmed else None,
                "ratio_to_bare_each_rep": [round(mine[r] / bare[r], 3) if r in mine and
                                           bare.get(r) else None
                                           for r in range(1, a.repeat + 1)],
                "cpu_us_per_io": [round(x, 3) if x is not None else None for x in cpu],
                "cpu_us_per_io_median": median(cpu),
            }
        table.append(row)

    def cell(row, s):
        return row["setups"].get(s, {})

    emu = b.accel == "tcg"
    head = (f"fio {a.rw} {a.bs}, iodepth {a.iodepth} per job, {a.engine}, "
            f"{'O_DIRECT' if b.direct else 'buffered'}, {a.runtime} s per run, "
            f"{a.repeat} interleaved repetition{'s' if a.repeat > 1 else ''} (median); "
            f"target {b.target} ({b.kind}, {b.size >> 20} MiB); guest "
            f"{guest_label(b)}, {a.vcpus} "
            f"vCPUs, {a.queues} queues, {a.mem} RAM, {b.accel.upper()}"
            f"{' (' + b.pin_note + ')' if b.pin_note else ''}; host {os.cpu_count()} CPUs, "
            f"{os.uname().release}; {started} to {finished}.")
    lines = []
    if emu:
        lines.append(f"**TCG: these figures are bound by the emulator**, not by the "
                     f"dataplanes (KVM: {b.kvm_why}).  Run it on a KVM host for the real "
                     f"ones.\n")
    lines.append(head + "\n")
    lines.append("IOPS (ratio to bare metal):\n")
    lines.append("| jobs | " + " | ".join(NAME[s] for s in setups) + " |")
    lines.append("|---:|" + "---:|" * len(setups))
    for row in table:
        cells = []
        for s in setups:
            if s in b.skipped:
                cells.append("skipped")
            elif s in b.failed:
                cells.append("failed")
            else:
                c = cell(row, s)
                r = c.get("ratio_to_bare")
                cells.append(fmt_iops(c.get("iops_median"))
                             + ("" if s == "bare" or r is None else f" ({r:.2f}x)"))
        lines.append(f"| {row['jobs']} | " + " | ".join(cells) + " |")
    lines.append("\nHost CPU per I/O, us (bare metal: fio's own; a guest: QEMU, its vCPUs "
                 "and iothreads, the back-end daemon, the module's threads):\n")
    lines.append("| jobs | " + " | ".join(NAME[s] for s in measured) + " |")
    lines.append("|---:|" + "---:|" * len(measured))
    for row in table:
        cells = []
        for s in measured:
            v = cell(row, s).get("cpu_us_per_io_median")
            cells.append("-" if v is None else f"{v:.1f}")
        lines.append(f"| {row['jobs']} | " + " | ".join(cells) + " |")
    lines.append("")
    for s in setups:
        if s in b.skipped:
            lines.append(f"- {NAME[s]}: skipped: {b.skipped[s]}")
            continue
        if s in b.failed:
            lines.append(f"- {NAME[s]}: failed: {b.failed[s]}")
            continue
        best = max(table, key=lambda r: cell(r, s).get("iops_median") or 0)
        c = cell(best, s)
        cpu = median([cell(r, s).get("cpu_us_per_io_median") for r in table])
        msg = (f"- {NAME[s]}: peak {fmt_iops(c.get('iops_median'))} IOPS at {best['jobs']} "
               f"job{'s' if best['jobs'] > 1 else ''}")
        if s != "bare":
            r = c.get("ratio_to_bare")
            last = cell(table[-1], s).get("ratio_to_bare")
            msg += (f" ({'-' if r is None else f'{r:.2f}'}x bare metal there); at "
                    f"{table[-1]['jobs']} jobs {'-' if last is None else f'{last:.2f}'}x")
        msg += f"; host CPU per I/O {'-' if cpu is None else f'{cpu:.1f}'} us (median over jobs)"
        if s in b.config:
            msg += f"; {b.config[s]}"
        lines.append(msg)
    lines.append(f"\nFor reference, the seed (2018, fio 4k randread, {SEED['jobs']} jobs, "
                 f"its own hardware): QEMU virtio-blk {fmt_iops(SEED['iops']['virtio-blk'])}, "
                 f"vhost-blk {fmt_iops(SEED['iops']['vhost_blk'])}, bare metal "
                 f"{fmt_iops(SEED['iops']['bare'])} "
                 f"({SEED['iops']['virtio-blk'] / SEED['iops']['bare']:.2f}x and "
                 f"{SEED['iops']['vhost_blk'] / SEED['iops']['bare']:.2f}x bare metal).")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(out, "seed-table.md"), "w") as f:
        f.write(md)

    doc = {
        "accel": b.accel, "emulator_bound": emu, "kvm_unavailable": b.kvm_why,
        "started": started, "finished": finished,
        "host": {"cpus": os.cpu_count(), "kernel": os.uname().release,
                 "qemu": qemu_version(a.qemu)},
        "target": {"path": b.target, "kind": b.kind, "bytes": b.size,
                   "o_direct": b.direct},
        "fio": {"rw": a.rw, "bs": a.bs, "iodepth": a.iodepth, "ioengine": a.engine,
                "runtime_s": a.runtime, "jobs": a.jobs},
        "guest": {"vcpus": a.vcpus, "queues": a.queues, "mem": a.mem, "pinning": b.pin_note,
                  "os": b.guest_os, "boot_to_job_s": b.boot_seconds or None},
        "repeat": a.repeat,
        "setups": [{"id": s, "name": NAME[s],
                    "status": ("skipped" if s in b.skipped else
                               "failed" if s in b.failed else "measured"),
                    "reason": b.skipped.get(s) or b.failed.get(s),
                    "config": b.config.get(s)} for s in setups],
        "rows": table,
        "runs": recs,
        "seed_2018": SEED,
    }
    with open(os.path.join(out, "seed-table.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    plot(b, out, table, measured, emu)
    return md


def guest_label(b):
    g = b.guest_os or {}
    if g.get("kind") == "cloud-image":
        return (f"the cloud image {g['image']} ({g['format']}, {g['boot']} boot, "
                "cloud-init NoCloud)")
    return "the test kernel and initramfs"


def plot(b, out, table, measured, emu):
    if not shutil.which("gnuplot") or not measured:
        log("gnuplot not found: no plot (scripts/install-deps.sh installs gnuplot-nox)")
        return
    dat = os.path.join(out, "seed-table.dat")
    with open(dat, "w") as f:
        f.write("# jobs " + " ".join(measured) + "\n")
        for row in table:
            vals = [row["setups"].get(s, {}).get("iops_median") for s in measured]
            f.write(f"{row['jobs']} " + " ".join("NaN" if v is None else f"{v / 1000:.3f}"
                                                  for v in vals) + "\n")
    png = os.path.join(out, "seed-table.png")
    title = (f"fio {b.a.rw} {b.a.bs}, iodepth {b.a.iodepth}/job: "
             + ("TCG, bound by the emulator" if emu else "KVM"))
    plots = ", ".join(f"'{dat}' using 1:{i + 2} with linespoints title '{NAME[s]}'"
                      for i, s in enumerate(measured))
    script = (f"set terminal png size 900,600 noenhanced\nset output '{png}'\n"
              f"set title '{title}'\nset xlabel 'fio numjobs'\nset ylabel 'kIOPS'\n"
              f"set key left top\nset grid\nset yrange [0:*]\nset xtics 1\nplot {plots}\n")
    with open(os.path.join(out, "seed-table.gp"), "w") as f:
        f.write(script)
    p = subprocess.run(["gnuplot"], input=script.encode(), capture_output=True)
    if p.returncode != 0:
        log(f"gnuplot failed: {p.stderr.decode(errors='replace').strip()}")


# ------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(
        prog="seed-table.sh",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The seed's experiment on this host: fio in a guest through QEMU "
                    "virtio-blk, qemu-storage-daemon, vhost-blkd and the kernel vhost_blk "
                    "module, beside bare metal; rows = numjobs, columns = setups.",
        epilog="Without a usable KVM (tried with a tiny guest) it runs under TCG with "
               "the defaults --jobs 1-2 --runtime 3 --repeat 1 --vcpus 2, and the "
               "figures are the emulator's.  Outputs in --out: seed-table.md (also "
               "printed), seed-table.json, seed-table.png, and the logs of a failed "
               "run.  docs/benchmarks.md, 'Run the seed's experiment on your host'.")
    t = ap.add_mutually_exclusive_group(required=True)
    t.add_argument("--device", metavar="DEV", help="a block device, e.g. /dev/nvme0n1 "
                   "(read-only workloads leave it untouched)")
    t.add_argument("--file", metavar="PATH", help="an image file (created and written "
                   "with --size if missing)")
    t.add_argument("--ram", metavar="SIZE", type=parse_size, help="a RAM disk of SIZE "
                   "(brd if it can be loaded, else a file on tmpfs): the dataplanes' ceiling")
    ap.add_argument("--size", type=parse_size, help="size of --file to create")
    ap.add_argument("--jobs", type=parse_jobs, help="fio numjobs values, e.g. 1-16 or "
                    "1,2,4,8,16 (default 1..min(16, host CPUs); TCG 1-2)")
    ap.add_argument("--rw", default="randread", help="fio rw= (default randread)")
    ap.add_argument("--bs", default="4k", help="fio bs= (default 4k)")
    ap.add_argument("--iodepth", type=positive, default=32, help="per job (default 32)")
    ap.add_argument("--engine", default="libaio", help="fio ioengine (default libaio)")
    ap.add_argument("--runtime", type=positive, help="seconds per fio run (default 10; TCG 3)")
    ap.add_argument("--repeat", type=positive, help="interleaved repetitions (default 3; TCG 1)")
    ap.add_argument("--vcpus", type=positive, help="guest vCPUs (default min(16, host "
                    "CPUs); TCG 2)")
    ap.add_argument("--queues", type=positive, help="queues of the guest's disk (default: "
                    "the vCPUs)")
    ap.add_argument("--mem", default=None, help="guest RAM (default 1G; TCG 512M)")
    ap.add_argument("--accel", choices=["auto", "kvm", "tcg"], default="auto",
                    help="auto: KVM if a guest runs on it, else TCG (default)")
    ap.add_argument("--setups", default=",".join(SETUPS),
                    help=f"columns, comma-separated (default {','.join(SETUPS)})")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="leave the vCPU threads unpinned (default: vCPU i on CPU i)")
    ap.add_argument("--qemu", default=os.environ.get("VHOST_BLK_QEMU", "qemu-system-x86_64"))
    ap.add_argument("--qsd", default=os.environ.get("QEMU_STORAGE_DAEMON",
                                                    "qemu-storage-daemon"))
    ap.add_argument("-b", "--build", default=os.environ.get("VHOST_BLK_BUILD",
                                                            os.path.join(SRC, "build")),
                    help="this tree's build directory (default build/)")
    ap.add_argument("--vhost-blkd", help="vhost-blkd binary (default BUILD/tools/vhost-blkd)")
    ap.add_argument("--patched-qemu", help="the patched QEMU (default "
                    "BUILD/qemu/qemu-system-x86_64, scripts/build-qemu.sh)")
    ap.add_argument("--kmod", help="vhost_blk.ko built for the running kernel")
    ap.add_argument("--vhost-h", help="drivers/vhost/vhost.h of the running kernel's "
                    "source: build vhost_blk here")
    ap.add_argument("--assets", default=os.environ.get("VHOST_BLK_GUEST_ASSETS"),
                    help="guest kernel + initramfs directory (default: "
                         "scripts/guest/build-assets.sh's)")
    ap.add_argument("--cloud-image", metavar="PATH",
                    help="boot this cloud image (qcow2 or raw, with cloud-init) instead "
                         "of the test kernel and initramfs; it is only read: each boot "
                         "writes to a temporary overlay")
    ap.add_argument("--cloud-kernel", metavar="FILE", help="boot --cloud-image with this "
                    "kernel (direct kernel boot, for an image without a boot loader)")
    ap.add_argument("--cloud-initrd", metavar="FILE", help="initrd for --cloud-kernel")
    ap.add_argument("--cloud-append", metavar="ARGS", help="kernel command line for "
                    "--cloud-kernel (default 'console=ttyS0 root=/dev/vda1 rw')")
    ap.add_argument("--cloud-stage", choices=["bootcmd", "runcmd"], default="bootcmd",
                    help="the cloud-config key that runs the job: bootcmd (cloud-init's "
                         "init stage, the sooner; default) or runcmd (its final stage)")
    ap.add_argument("--destroy-data", action="store_true",
                    help="allow a writing --rw on --device")
    ap.add_argument("-o", "--out", default="/var/tmp/vhost-blk-seed",
                    help="output directory (default /var/tmp/vhost-blk-seed)")
    a = ap.parse_args()

    a.setups = [s.strip() for s in a.setups.split(",") if s.strip()]
    bad = [s for s in a.setups if s not in SETUPS]
    if bad or not a.setups:
        ap.error(f"unknown setup(s) {', '.join(bad) or '(none)'}; have {', '.join(SETUPS)}")
    if "bare" not in a.setups:
        a.setups.insert(0, "bare")          # every ratio is to bare metal
    a.setups = [s for s in SETUPS if s in a.setups]
    if a.size and not a.file:
        ap.error("--size goes with --file")
    for v in (a.rw, a.bs, a.engine):
        if not re.fullmatch(r"[A-Za-z0-9_.,:-]+", v):
            ap.error(f"'{v}': fio options here are single words")
    if a.mem is not None and not re.fullmatch(r"\d+[MG]", a.mem):
        ap.error("--mem takes a size in M or G, e.g. 1G")
    a.vhost_blkd = a.vhost_blkd or os.path.join(a.build, "tools", "vhost-blkd")
    a.patched_qemu = a.patched_qemu or os.path.join(a.build, "qemu", "qemu-system-x86_64")
    if not shutil.which("fio"):
        die("fio is not installed (scripts/install-deps.sh)")
    if not shutil.which(a.qemu):
        die(f"no QEMU binary '{a.qemu}' (--qemu)")
    check_cloud_args(ap, a)

    b = Bench(a)
    os.makedirs(a.out, exist_ok=True)
    try:
        return run(a, b)
    finally:
        for c in reversed(b.cleanups):
            try:
                c()
            except OSError:
                pass
        if b.failed:
            keep = os.path.join(a.out, "logs")
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(b.tmp, keep, ignore=shutil.ignore_patterns("*.img", "*.sock",
                                                                       "payload", "kmod"))
            log(f"logs of the failed run: {keep}")
        shutil.rmtree(b.tmp, ignore_errors=True)


def check_cloud_args(ap, a):
    if not a.cloud_image:
        for o in ("cloud_kernel", "cloud_initrd", "cloud_append"):
            if getattr(a, o):
                ap.error(f"--{o.replace('_', '-')} goes with --cloud-image")
        return
    if (a.cloud_initrd or a.cloud_append) and not a.cloud_kernel:
        ap.error("--cloud-initrd and --cloud-append go with --cloud-kernel")
    for o in ("cloud_image", "cloud_kernel", "cloud_initrd"):
        f = getattr(a, o)
        if f is None:
            continue
        opt = "--" + o.replace("_", "-")
        if not os.path.isfile(f):
            die(f"{opt} {f}: no such file")
        if not os.access(f, os.R_OK):
            die(f"{opt} {f} is not readable by this user")
    if a.cloud_kernel and a.cloud_append is None:
        a.cloud_append = "console=ttyS0 root=/dev/vda1 rw"
    if a.cloud_append is not None and "\n" in a.cloud_append:
        ap.error("--cloud-append is one line")
    if "," in a.cloud_image:
        # QEMU's -drive would read the rest as options.
        die(f"--cloud-image {a.cloud_image}: the path has a comma; link it elsewhere")
    if not shutil.which("genisoimage"):
        die("genisoimage is not installed: --cloud-image needs it for the NoCloud seed "
            "(scripts/install-deps.sh)")


def run(a, b):
    if a.accel == "tcg":
        b.accel, b.kvm_why = "tcg", "not tried (--accel tcg)"
    else:
        ok, why = probe_kvm(a.qemu, b.tmp)
        if not ok and a.accel == "kvm":
            die(f"--accel kvm, but KVM cannot run a guest here: {why}")
        b.accel, b.kvm_why = ("kvm", None) if ok else ("tcg", why)
    ncpu = len(os.sched_getaffinity(0))
    if b.accel == "kvm":
        log("KVM: a guest runs on /dev/kvm")
        d = {"jobs": list(range(1, min(16, ncpu) + 1)), "runtime": 10, "repeat": 3,
             "vcpus": min(16, ncpu), "mem": "1G"}
    else:
        log(("TCG (--accel tcg)" if a.accel == "tcg" else
             f"no usable KVM ({b.kvm_why}): running under TCG")
            + "; the figures will be bound by the emulator, not by the dataplanes")
        d = {"jobs": [1, 2], "runtime": 3, "repeat": 1, "vcpus": 2, "mem": "512M"}
    for k, v in d.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.queues = a.queues or a.vcpus
    if a.queues > 64:
        die("--queues: at most 64 (vhost-blkd's limit)")

    b.prepare_target()
    b.vq_mapping = qemu_has(a.qemu, "virtio-blk-pci", "iothread-vq-mapping")
    b.check_setups()

    guests = [s for s in a.setups if s != "bare" and s not in b.skipped]
    if a.cloud_image:
        b.cloud_path = os.path.abspath(a.cloud_image)
        b.cloud_format = image_format(b.cloud_path)
        b.guest_os = {"kind": "cloud-image", "image": b.cloud_path,
                      "format": b.cloud_format,
                      "boot": "direct kernel" if a.cloud_kernel else "firmware",
                      "kernel": a.cloud_kernel and os.path.abspath(a.cloud_kernel),
                      "initrd": a.cloud_initrd and os.path.abspath(a.cloud_initrd),
                      "append": a.cloud_append,
                      "seed": f"NoCloud (cidata iso9660), the job in {a.cloud_stage}",
                      "overlay": "snapshot=on (the image is only read)"}
        log(f"guest: the cloud image {b.cloud_path} ({b.cloud_format}, "
            f"{b.guest_os['boot']} boot), the job from a NoCloud seed")
    elif guests:
        assets = a.assets
        if not assets:
            p = subprocess.run([os.path.join(SRC, "scripts", "guest", "build-assets.sh")],
                               stdout=subprocess.PIPE)
            if p.returncode != 0:
                die("building the guest assets failed (scripts/guest/build-assets.sh)")
            assets = p.stdout.decode().strip().splitlines()[-1]
        b.vmlinux = os.path.join(assets, "vmlinux")
        for f in (b.vmlinux, os.path.join(assets, "initramfs.img")):
            if not os.path.isfile(f):
                die(f"no {f}: give --assets DIR holding vmlinux and initramfs.img")
        b.initrd = make_initramfs(assets, b.tmp)
        b.guest_os = {"kind": "test-initramfs", "assets": os.path.abspath(assets)}

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    log(f"{len(a.setups)} setups x {len(a.jobs)} numjobs x {a.repeat} repetitions, "
        f"{a.runtime} s each; target {b.target}")
    for rep in range(1, a.repeat + 1):
        for s in a.setups:
            if s in b.skipped or s in b.failed:
                continue
            if s == "bare":
                b.run_bare(rep)
            else:
                log(f"rep {rep}: booting the guest for {NAME[s]}")
                b.run_guest(s, rep)
    finished = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with open(os.path.join(a.out, "raw.jsonl"), "w") as f:
        for r in b.records:
            f.write(json.dumps(r) + "\n")
    print(report(b, a.out, started, finished), end="")
    print(f"(outputs: {a.out}/seed-table.md, seed-table.json, seed-table.png)")
    return 1 if b.failed else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    sys.exit(main())
