#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Compare vhost-blkd's query-named-block-nodes with qemu-storage-daemon's
for the same node graph, key by key; print each difference and exit 1 if
there is any.

  compare-nodes.py [--implicit-free PATH]... VHOST_BLKD_REPLY.json QSD_REPLY.json

Each file holds one QMP reply ({"return": [...]}).  Nodes are paired by
their drv and file (unique in the graphs the tests build); a node QEMU
named itself ("#blockNNN") must be implicit in vhost-blkd too (a name
starting with '#'), any other node-name must be the same.  Every key QEMU
gives must be there with the same JSON type, and the same value except
where it depends on the process (actual-size: the daemons ran one after
the other on the same files).  vhost-blkd's documented extensions may be
extra: x-file-node-name, and image.children (QEMU 8.0's member).
--implicit-free PATH (e.g. cache.direct): a value of the nodes QEMU made
itself that may differ, for a deliberate difference the caller names.
"""
import json
import sys

EXTRA_OK = {"x-file-node-name", "children"}
# Values that may differ: how much of the file is allocated on the host.
VALUE_FREE = {"actual-size"}


def jtype(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    return type(v).__name__


def compare(path, ours, qemu, errs, free=()):
    if jtype(ours) != jtype(qemu):
        errs.append("%s: type %s, QEMU's is %s (%r vs %r)" %
                    (path, jtype(ours), jtype(qemu), ours, qemu))
        return
    if isinstance(qemu, dict):
        for k in sorted(qemu):
            if k not in ours:
                errs.append("%s.%s: missing (QEMU: %r)" % (path, k, qemu[k]))
            elif k == "node-name" and qemu[k].startswith("#"):
                if not ours[k].startswith("#"):
                    errs.append("%s.node-name: %r for QEMU's implicit %r" %
                                (path, ours[k], qemu[k]))
            elif k not in VALUE_FREE and (path + "." + k) not in free:
                compare(path + "." + k, ours[k], qemu[k], errs, free)
        for k in sorted(set(ours) - set(qemu) - EXTRA_OK):
            errs.append("%s.%s: not in QEMU's reply (%r)" %
                        (path, k, ours[k]))
    elif isinstance(qemu, list):
        if len(ours) != len(qemu):
            errs.append("%s: %d elements, QEMU has %d" %
                        (path, len(ours), len(qemu)))
        for i, (o, q) in enumerate(zip(ours, qemu)):
            compare("%s[%d]" % (path, i), o, q, errs, free)
    elif ours != qemu:
        errs.append("%s: %r, QEMU says %r" % (path, ours, qemu))


def main():
    args = sys.argv[1:]
    implicit_free = []
    while len(args) > 2 and args[0] == "--implicit-free":
        implicit_free.append(args[1])
        args = args[2:]
    ours = json.load(open(args[0]))["return"]
    qemu = json.load(open(args[1]))["return"]
    errs = []

    def key(n):
        return (n["drv"], n["file"])

    by_key = {}
    for n in ours:
        if key(n) in by_key:
            errs.append("vhost-blkd lists %r twice" % (key(n),))
        by_key[key(n)] = n
    seen = set()
    for q in qemu:
        o = by_key.get(key(q))
        if o is None:
            errs.append("no node for QEMU's %s (drv %s, file %s)" %
                        (q["node-name"], q["drv"], q["file"]))
            continue
        seen.add(key(q))
        name = q["node-name"]
        free = [name + "." + p for p in implicit_free] \
            if name.startswith("#") else []
        compare(name, o, q, errs, free)
    for k, o in by_key.items():
        if k not in seen:
            errs.append("vhost-blkd's %s (drv %s, file %s) is not in QEMU's "
                        "reply" % (o["node-name"], k[0], k[1]))
    for e in errs:
        print(e)
    print("%d nodes compared, %d differences" % (len(qemu), len(errs)))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
