#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Send QMP commands to a monitor socket and print each reply (one JSON
line each); exit 1 if any reply is an error.  For shell tests.

  qmp.py SOCKET '{"execute": ...}' ...
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "qmp"))
from qmp_conversation import Qmp  # noqa: E402

q = Qmp(sys.argv[1])
q.read_msg()
q.cmd("qmp_capabilities")
rc = 0
for arg in sys.argv[2:]:
    for m in q.exchange(json.loads(arg)):
        print(json.dumps(m, sort_keys=True))
        if "error" in m:
            rc = 1
sys.exit(rc)
