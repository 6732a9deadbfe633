#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Compare two QMP transcripts from qmp_conversation.py field by field.

  qmp_compare.py EXPECTED ACTUAL [--deliberate FILE] [--gate]

Prints one line per difference: STEP PATH: EXPECTED != ACTUAL.  A
difference listed in the deliberate file (tests/qmp/deliberate.json:
{"STEP PATH": "why"}, where STEP or PATH may be "*") is printed as
"deliberate" with its reason.  With --gate the exit status is 1 if any
other difference is left; without it, 0 (a report).
"""
import argparse
import fnmatch
import json
import sys


def load(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def diff(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            p = path + "." + k if path else k
            if k not in a:
                out.append((p, "<absent>", json.dumps(b[k])))
            elif k not in b:
                out.append((p, json.dumps(a[k]), "<absent>"))
            else:
                diff(a[k], b[k], p, out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append((path + ".length", str(len(a)), str(len(b))))
        # lists of objects with an id or node-name: match by it
        for i in range(min(len(a), len(b))):
            diff(a[i], b[i], "%s[%d]" % (path, i), out)
    elif a != b or type(a) != type(b):
        out.append((path, json.dumps(a), json.dumps(b)))


def sort_lists(obj):
    """QEMU's order of nodes and exports is not part of the protocol."""
    if isinstance(obj, dict):
        return {k: sort_lists(v) for k, v in obj.items()}
    if isinstance(obj, list):
        items = [sort_lists(v) for v in obj]
        if all(isinstance(v, dict) for v in items):
            items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        return items
    return obj


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("expected")
    ap.add_argument("actual")
    ap.add_argument("--deliberate")
    ap.add_argument("--gate", action="store_true")
    args = ap.parse_args()
    deliberate = json.load(open(args.deliberate)) if args.deliberate else {}
    exp = load(args.expected)
    act = load(args.actual)
    left = 0
    known = 0
    if [e["step"] for e in exp] != [a["step"] for a in act]:
        print("steps differ: %s / %s" % ([e["step"] for e in exp],
                                         [a["step"] for a in act]))
        return 1 if args.gate else 0
    for e, a in zip(exp, act):
        out = []
        diff(sort_lists(e["replies"]), sort_lists(a["replies"]), "", out)
        for path, x, y in out:
            why = None
            for pat, reason in deliberate.items():
                step_pat, _, path_pat = pat.partition(" ")
                # "*" is the only wildcard; brackets are literal
                path_pat = path_pat.replace("[", "[[]")
                if fnmatch.fnmatchcase(e["step"], step_pat) and \
                   fnmatch.fnmatchcase(path, path_pat):
                    why = reason
                    break
            if why:
                known += 1
                print("deliberate  %s %s: %s != %s  (%s)" %
                      (e["step"], path, x, y, why))
            else:
                left += 1
                print("DIFFERENT   %s %s: %s != %s" % (e["step"], path, x, y))
    print("%d steps compared: %d deliberate difference(s), %d other(s)" %
          (len(exp), known, left))
    return 1 if args.gate and left else 0


if __name__ == "__main__":
    sys.exit(main())
