#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Build with ThreadSanitizer (build-tsan) and run the tests that exercise
# several threads: the iothread and event-loop unit tests, and the
# multi-iothread, reconnect, QMP monitor (run-time exports, resize,
# statistics read across threads) and dirty-log (switched with requests
# in flight) integration tests, and the block jobs (dirty bits set by
# iothreads, cleared by the mirror).  Any TSan report fails the run
# (halt_on_error=1, and the test logs are searched for reports the
# daemon printed before it was killed).
#
#   scripts/check-tsan.sh [--builddir DIR]
#
# Ends with one line "N passed, N failed"; exits non-zero if anything
# failed.
set -euo pipefail
cd "$(dirname "$0")/.."

builddir=build-tsan
while [ $# -gt 0 ]; do
    case "$1" in
    --builddir) builddir=$2; shift ;;
    --builddir=*) builddir=${1#*=} ;;
    -h|--help) sed -n '3,13p' "$0"; exit 0 ;;
    *) echo "check-tsan.sh: unknown option '$1' (see --help)" >&2; exit 1 ;;
    esac
    shift
done

if [ ! -f "$builddir/build.ninja" ]; then
    ./configure --builddir="$builddir" --enable-tsan >/dev/null
fi
ninja -C "$builddir" >/dev/null

# exitcode=66 is TSan's default; said here so a report is never mistaken
# for a test's own failure code.
export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp"
tests=(test-iothread test-aio test-blkd-mq test-blkd-reconnect test-qmp-monitor
       test-throttle test-blkd-qos test-nbd-server test-nbd-server-ops
       test-blkd-log test-job test-blkd-mirror)

set +e
meson test -C "$builddir" --print-errorlogs "${tests[@]}"
set -e

log="$builddir/meson-logs/testlog.json"
passed=0
failed=0
if [ -f "$log" ]; then
    read -r passed failed < <(python3 - "$log" <<'PY'
import json, sys
p = f = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    out = (r.get("stdout") or "") + (r.get("stderr") or "")
    if r["result"] in ("OK", "EXPECTEDFAIL", "SKIP") and \
            "WARNING: ThreadSanitizer" not in out:
        p += 1
    else:
        if r["result"] in ("OK", "EXPECTEDFAIL", "SKIP"):
            print("%s: ThreadSanitizer report in the log" % r["name"],
                  file=sys.stderr)
        f += 1
print(p, f)
PY
)
else
    failed=1
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
