#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The /metrics page cache and its bound (test-metrics-scrape.sh), on the
loopback only.  Each command prints one JSON object.

  metrics-cache.py burst URL N   N scrapes one after the other: the pages
                                 seen (distinct vhost_blk_metrics_renders_
                                 total values) and the seconds it took
  metrics-cache.py slow URL N    N clients that each send GET /metrics,
                                 read only the first lines (the endpoint's
                                 counters) and then never read again, each
                                 one more than the cache window after the
                                 page of the one before started; then
                                 they hang up, and plain scrapes follow
                                 until one gets a page rendered after
                                 them with only the cached page alive
                                 (deadline 60 s)
"""
import json
import re
import socket
import sys
import time
import urllib.parse
import urllib.request

CACHE_S = 1.0          # METRICS_CACHE_NS
COUNTERS = ("renders_total", "stale_total", "pages_held", "held_bytes")


def counters(text):
    got = {}
    for name in COUNTERS:
        m = re.search(r"^vhost_blk_metrics_%s (\d+)$" % name, text, re.M)
        if m:
            got[name] = int(m.group(1))
    return got


def scrape(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return counters(r.read().decode())


def burst(url, n):
    start = time.monotonic()
    pages = set()
    missing = 0
    for _ in range(n):
        c = scrape(url)
        if "renders_total" in c:
            pages.add(c["renders_total"])
        else:
            missing += 1
    print(json.dumps({"pages": len(pages), "missing": missing,
                      "seconds": time.monotonic() - start}))


def slow_client(host, port):
    """A client that reads the first lines of its page, then stops."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(60)
    s.connect((host, port))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: %s\r\n\r\n" % host.encode())
    buf = b""
    while not re.search(rb"\nvhost_blk_metrics_held_bytes \d+\n", buf):
        chunk = s.recv(512)
        if not chunk:
            break
        buf += chunk
        if len(buf) > 65536:
            break
    return s, counters(buf.decode(errors="replace"))


def slow(url, n):
    u = urllib.parse.urlsplit(url)
    clients, seen = [], []
    for i in range(n):
        if i:
            # The page of the one before was made before its first byte
            # came: past the window now, so this one asks for a new page.
            time.sleep(CACHE_S * 1.05)
        s, c = slow_client(u.hostname, u.port)
        clients.append(s)
        seen.append(c)
    for s in clients:
        s.close()
    last = max((c.get("renders_total", 0) for c in seen), default=0)
    after = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(CACHE_S * 0.25)
        c = scrape(url)
        # Connections are let go of a little after the hang-up: wait for
        # a page made when only the cached one was left.
        if c.get("renders_total", 0) > last and c.get("pages_held") == 1:
            after = c
            break
    print(json.dumps({"slow": seen, "after": after}))


def main():
    cmd, url, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if cmd == "burst":
        burst(url, n)
    elif cmd == "slow":
        slow(url, n)
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
