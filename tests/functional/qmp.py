#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Run one QMP command on a QEMU monitor socket and print its result.

Usage: qmp.py SOCKET COMMAND [JSON-ARGUMENTS]
Prints the command's "return" value as JSON on stdout and exits 0, or
prints QEMU's error (or why the monitor could not be reached) on stderr
and exits 1.  Asynchronous events are skipped.  For "quit" a connection
closed before the reply counts as success.
"""
import json
import socket
import sys


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    path, command = sys.argv[1], sys.argv[2]
    args = json.loads(sys.argv[3]) if len(sys.argv) == 4 else None
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(60)
        sock.connect(path)
        f = sock.makefile("rw")
        greeting = f.readline()
        if not greeting:
            raise OSError("monitor closed before its greeting")

        def call(name, arguments=None):
            msg = {"execute": name}
            if arguments is not None:
                msg["arguments"] = arguments
            f.write(json.dumps(msg) + "\n")
            f.flush()
            while True:
                line = f.readline()
                if not line:
                    raise EOFError("monitor closed the connection")
                reply = json.loads(line)
                if "event" not in reply:
                    return reply

        call("qmp_capabilities")
        try:
            reply = call(command, args)
        except EOFError:
            if command == "quit":
                return 0
            raise
    except (OSError, EOFError, ValueError) as e:
        print(f"qmp.py: {path}: {command}: {e}", file=sys.stderr)
        return 1
    if "error" in reply:
        print(f"qmp.py: {command}: {reply['error'].get('desc', reply)}",
              file=sys.stderr)
        return 1
    print(json.dumps(reply.get("return")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
