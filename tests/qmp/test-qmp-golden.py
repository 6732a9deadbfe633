#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Gate: vhost-blkd's answers to the QMP conversation equal the transcript
recorded from qemu-storage-daemon 7.2 (tests/qmp/qsd-7.2.jsonl, made by
scripts/qmp-compare.sh --record), except for the deliberate differences
in tests/qmp/deliberate.json (docs/user-guide.md lists them).  TAP."""
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
blkd = os.environ.get("VHOST_BLKD", "vhost-blkd")
print("1..2")
with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
    r = subprocess.run([sys.executable, os.path.join(here,
                        "qmp_conversation.py"), "--backend", "vhost-blkd",
                        "--binary", blkd, "--out", out.name],
                       capture_output=True, text=True)
    sys.stdout.write("".join("# " + l + "\n" for l in
                             (r.stdout + r.stderr).splitlines()))
    print("%s 1 - conversation with vhost-blkd ran to quit" %
          ("ok" if r.returncode == 0 else "not ok"))
    c = subprocess.run([sys.executable, os.path.join(here, "qmp_compare.py"),
                        os.path.join(here, "qsd-7.2.jsonl"), out.name,
                        "--deliberate", os.path.join(here, "deliberate.json"),
                        "--gate"], capture_output=True, text=True)
    sys.stdout.write("".join("# " + l + "\n" for l in
                             (c.stdout + c.stderr).splitlines()))
    print("%s 2 - answers equal qemu-storage-daemon 7.2's but for the "
          "deliberate differences" % ("ok" if c.returncode == 0 and
                                      r.returncode == 0 else "not ok"))
