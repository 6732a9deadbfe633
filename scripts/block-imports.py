#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Which file of block/ calls which, and the circles in that graph.

    scripts/block-imports.py LIBVBBLOCK.a [MODULE.so ...]

A file "imports" another when its object file refers to a symbol the other
defines (nm).  The layering rule of docs/architecture.md allows one circle:
the engine helpers (engine.c) and the engines that complete through them
(io_uring.c, linux-aio.c, thread-pool.c).  Prints the edges, then each
circle, and exits 1 if a circle holds any other file.
"""
import collections
import os
import subprocess
import sys

ENGINES = {"engine", "io_uring", "linux-aio", "thread-pool"}


def symbols(path, dynamic):
    """{member: (defined, undefined)} of an archive, object or module."""
    args = ["nm", "-A"] + (["-D"] if dynamic else []) + [path]
    out = subprocess.run(args, capture_output=True, text=True,
                         check=True).stdout
    res = collections.defaultdict(lambda: (set(), set()))
    for line in out.splitlines():
        # "lib.a:dir/file.c.o:ADDR T sym" or "module.so:   U sym"
        fields = line.split(":")
        where = fields[1] if len(fields) > 2 else fields[0]
        rest = fields[-1]
        member = os.path.basename(where)
        for suffix in (".c.o", ".so"):
            member = member.removesuffix(suffix)
        member = member.removeprefix("block-") \
            if member != "block-backend" else member
        parts = rest.split()
        if len(parts) == 2 and parts[0] == "U":
            res[member][1].add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDRBV":
            res[member][0].add(parts[2])
    return res


def main():
    files = {}
    for path in sys.argv[1:]:
        files.update(symbols(path, path.endswith(".so")))
    edges = {a: sorted(b for b in files if b != a and
                       files[a][1] & files[b][0]) for a in files}
    for a in sorted(edges):
        print(f"{a} -> {', '.join(edges[a]) or '-'}")
    # strongly connected components (Tarjan)
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    bad = [c for c in comps if not set(c) <= ENGINES]
    for c in comps:
        print(f"circle: {' <-> '.join(c)}"
              f"{'' if set(c) <= ENGINES else '  (not allowed)'}")
    print(f"{len(comps)} circle(s), {len(bad)} not allowed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
