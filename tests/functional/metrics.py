#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Helpers of the metrics tests (test-metrics*.sh), loopback HTTP only.

  metrics.py get URL [OUT]           body of a GET (exit 1 unless 200)
  metrics.py status URL [METHOD]     print the HTTP status code
  metrics.py sum FILE NAME [L=V ...] sum of the samples of NAME whose
                                     labels include every L=V (exposition
                                     text 0.0.4); prints an integer when
                                     the sum is one
  metrics.py query URL PROMQL        Prometheus /api/v1/query: print the
                                     sum of the result vector's values
                                     ("none" for an empty vector)
  metrics.py targets URL             Prometheus /api/v1/targets: print
                                     "health lastError" of each active one
  metrics.py freeport                a free TCP port on 127.0.0.1
  metrics.py qmp-bins REPLY KEY      sum of query-blockstats' first
                                     entry's stats[KEY]["bins"] ("none")
"""
import json
import re
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def get(url, method="GET"):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def main():
    cmd = sys.argv[1]
    if cmd == "get":
        code, body = get(sys.argv[2])
        if len(sys.argv) > 3:
            with open(sys.argv[3], "w") as f:
                f.write(body)
        else:
            sys.stdout.write(body)
        sys.exit(0 if code == 200 else 1)
    if cmd == "status":
        print(get(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "GET")[0])
        return
    if cmd == "sum":
        want = dict(a.split("=", 1) for a in sys.argv[4:])
        total = 0.0
        with open(sys.argv[2]) as f:
            for line in f:
                m = SAMPLE.match(line.rstrip("\n"))
                if not m or m.group(1) != sys.argv[3]:
                    continue
                labels = dict(LABEL.findall(m.group(3) or ""))
                if all(labels.get(k) == v for k, v in want.items()):
                    total += float(m.group(4))
        print(int(total) if total == int(total) else total)
        return
    if cmd == "query":
        url = sys.argv[2] + "/api/v1/query?" + \
            urllib.parse.urlencode({"query": sys.argv[3]})
        code, body = get(url)
        res = json.loads(body)["data"]["result"] if code == 200 else []
        if not res:
            print("none")
        else:
            print(sum(float(r["value"][1]) for r in res))
        return
    if cmd == "targets":
        code, body = get(sys.argv[2] + "/api/v1/targets")
        if code == 200:
            for t in json.loads(body)["data"]["activeTargets"]:
                print(t["health"], t.get("lastError", ""))
        return
    if cmd == "freeport":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])
        s.close()
        return
    if cmd == "qmp-bins":
        reply = json.loads(sys.argv[2])
        st = reply["return"][0]["stats"]
        print(sum(st[sys.argv[3]]["bins"]) if sys.argv[3] in st else "none")
        return
    sys.exit("metrics.py: unknown command " + cmd)


main()
