#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# vhost-blkd --metrics without a guest: known I/O from vhost-blk-bench on
# a two-queue export, then /metrics must count exactly that I/O (requests,
# bytes, histogram _count, summed over queues), pass `promtool check
# metrics`, answer 404/405 off GET /metrics, and keep working under
# --seccomp on.  Also block-latency-histogram-set + query-blockstats over
# QMP (bins sum to the requests; QEMU's set/replace/remove semantics and
# errors), the --config key, nothing listening without --metrics, bad
# --metrics values, and vhost-blk-ctl stats --watch's percentile columns.
# The page cache: scrapes within a second share one render, and clients
# that never read hold at most 3 pages (metrics-cache.py).
set -u
. "$(dirname "$0")/lib.sh"

VB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/vbtest.XXXXXX")
trap vb_cleanup EXIT
trap 'exit 130' INT TERM
echo "# tmp: $VB_TMP"

blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
bench=$(vb_bin vhost-blk-bench) || vb_bail "vhost-blk-bench is not built"
ctl=$(vb_bin vhost-blk-ctl) || vb_bail "vhost-blk-ctl is not built"
mpy=$VB_FUNC/metrics.py
qmppy=$VB_FUNC/qmp.py
command -v promtool > /dev/null ||
    vb_bail "promtool is missing: run scripts/install-deps.sh (Debian package prometheus)"

# metrics_url LOG: the URL the daemon logged (it was given port 0).
metrics_url() {
    local n=0 u=
    while [ $n -lt 200 ]; do
        u=$(sed -n 's|.*metrics: serving \(http://[^ ]*/metrics\).*|\1|p' "$1" | head -n1)
        [ -n "$u" ] && { echo "$u"; return 0; }
        sleep 0.05
        n=$((n + 1))
    done
    return 1
}

bench() {
    "$bench" "$@" > "$VB_TMP/bench.txt" 2>&1
    local rc=$?
    sed 's/^/#   /' "$VB_TMP/bench.txt" | tail -n 3
    return $rc
}

img=$(vb_mkimg d0 32M)
sock=$VB_TMP/d0.sock
qmp=$VB_TMP/mon.qmp
vb_daemon_start blkd "$sock" "$blkd" --seccomp on --metrics 127.0.0.1:0 \
    --export "socket=$sock,file=$img,num-queues=2,id=vm1" \
    --chardev "socket,id=mon,path=$qmp,server=on,wait=off" \
    --monitor chardev=mon || vb_bail "vhost-blkd --metrics did not start"
url=$(metrics_url "$VB_TMP/blkd.log") || vb_bail "no 'metrics: serving' log line"
echo "# $url"
vb_check "the log says the HTTP thread is confined" \
    grep -q "metrics: serving $url (HTTP thread confined by seccomp)" "$VB_TMP/blkd.log"

vb_check "bench: 1000 writes of 4 KiB over 2 queues" \
    bench --socket "$sock" --queues 2 --rw randwrite --bs 4k --ios 1000 --iodepth 8
vb_check "bench: 600 reads of 8 KiB over 2 queues" \
    bench --socket "$sock" --queues 2 --rw randread --bs 8k --ios 600 --iodepth 8

m=$VB_TMP/m1.txt
vb_check "GET /metrics answers 200" "$mpy" get "$url" "$m"
sum() { "$mpy" sum "$m" "$@"; }
vb_check_eq "requests_total{op=write}, both queues: 1000" \
    "$(sum vhost_blk_requests_total export=vm1 op=write)" 1000
vb_check_eq "requests_total{op=read}: 600" \
    "$(sum vhost_blk_requests_total export=vm1 op=read)" 600
vb_check_eq "bytes_total{op=write}: 1000 x 4 KiB" \
    "$(sum vhost_blk_bytes_total export=vm1 op=write)" 4096000
vb_check_eq "bytes_total{op=read}: 600 x 8 KiB" \
    "$(sum vhost_blk_bytes_total export=vm1 op=read)" 4915200
vb_check_eq "request_errors_total: 0" \
    "$(sum vhost_blk_request_errors_total export=vm1)" 0
vb_check_eq "both queues served requests" \
    "$(awk '/^vhost_blk_queue_completed_total\{export="vm1",queue="[01]"\} [1-9]/' "$m" | wc -l)" 2
vb_check_eq "queue completed_total = requests_total of every op" \
    "$(sum vhost_blk_queue_completed_total export=vm1)" \
    "$(sum vhost_blk_requests_total export=vm1)"
vb_check_eq "in_flight: 0 once idle" "$(sum vhost_blk_queue_in_flight export=vm1)" 0
vb_check_eq "histogram _count{op=write}: 1000" \
    "$(sum vhost_blk_request_duration_seconds_count export=vm1 op=write)" 1000
vb_check_eq "histogram +Inf bucket{op=read}: 600" \
    "$(sum vhost_blk_request_duration_seconds_bucket export=vm1 op=read le=+Inf)" 600
vb_check "kicks or poll hits counted" \
    test "$(( $(sum vhost_blk_queue_kicks_total) + $(sum vhost_blk_queue_poll_hits_total) ))" -gt 0
vb_check "batches counted" test "$(sum vhost_blk_queue_batches_total)" -gt 0
vb_check "notifies counted" test "$(( $(sum vhost_blk_queue_notifies_total) + \
    $(sum vhost_blk_queue_notifies_suppressed_total) ))" -gt 0
vb_check "process RSS and open fds reported" \
    test "$(sum vhost_blk_process_resident_memory_bytes)" -gt 0 -a \
         "$(sum vhost_blk_process_open_fds)" -gt 3
vb_check "every family has HELP and TYPE" \
    test "$(grep -c '^# HELP ' "$m")" -eq "$(grep -c '^# TYPE ' "$m")"
promtool check metrics < "$m" > "$VB_TMP/promtool.txt" 2>&1
prc=$?
sed 's/^/#   /' "$VB_TMP/promtool.txt"
vb_check_eq "promtool check metrics passes (no lint findings)" \
    "$prc/$(wc -c < "$VB_TMP/promtool.txt")" "0/0"

base=${url%/metrics}
vb_check_eq "GET / is 404" "$("$mpy" status "$base/")" 404
vb_check_eq "GET /metricsx is 404" "$("$mpy" status "$base/metricsx")" 404
vb_check_eq "POST /metrics is 405" "$("$mpy" status "$url" POST)" 405

# --- QMP latency histograms -------------------------------------------
q() { "$qmppy" "$qmp" "$@"; }
qc() {
    "$qmppy" "$qmp" "$@" | sed 's/^/#   /'
    return "${PIPESTATUS[0]}"
}
vb_check "block-latency-histogram-set: all types, by export id" \
    qc '{"execute":"block-latency-histogram-set","arguments":{"id":"vm1","boundaries":[10000,100000,1000000]}}'
vb_check "bench: 500 reads" \
    bench --socket "$sock" --queues 2 --rw randread --bs 4k --ios 500 --iodepth 4
r=$(q '{"execute":"query-blockstats"}' | tail -n1)
vb_check_eq "rd_latency_histogram bins sum to the 500 reads" \
    "$("$mpy" qmp-bins "$r" rd_latency_histogram)" 500
vb_check_eq "wr_latency_histogram is set and empty" \
    "$("$mpy" qmp-bins "$r" wr_latency_histogram)" 0
vb_check "  ...QEMU's shape: boundaries and 4 bins" \
    python3 -c 'import json,sys; h=json.loads(sys.argv[1])["return"][0]["stats"]["rd_latency_histogram"]; sys.exit(not (h["boundaries"]==[10000,100000,1000000] and len(h["bins"])==4))' "$r"
vb_check "boundaries-write alone: only the write histogram replaced" \
    qc '{"execute":"block-latency-histogram-set","arguments":{"id":"vm1","boundaries-write":[5000]}}'
vb_check "bench: 300 writes" \
    bench --socket "$sock" --rw randwrite --bs 4k --ios 300 --iodepth 4
r=$(q '{"execute":"query-blockstats"}' | tail -n1)
vb_check_eq "  ...wr bins sum to 300, rd still 500" \
    "$("$mpy" qmp-bins "$r" wr_latency_histogram)/$("$mpy" qmp-bins "$r" rd_latency_histogram)" "300/500"
vb_check "  ...wr has 2 bins now" \
    python3 -c 'import json,sys; h=json.loads(sys.argv[1])["return"][0]["stats"]["wr_latency_histogram"]; sys.exit(len(h["bins"])!=2)' "$r"
vb_check "bad boundaries refused" \
    bash -c "! '$qmppy' '$qmp' '{\"execute\":\"block-latency-histogram-set\",\"arguments\":{\"id\":\"vm1\",\"boundaries\":[5,5]}}' | grep -q '\"return\"'"
vb_check "unknown id refused" \
    bash -c "'$qmppy' '$qmp' '{\"execute\":\"block-latency-histogram-set\",\"arguments\":{\"id\":\"nope\"}}' | grep -q \"Device 'nope' not found\""
r=$(q '{"execute":"query-blockstats"}' | tail -n1)
vb_check_eq "  ...a refused set changed nothing" \
    "$("$mpy" qmp-bins "$r" wr_latency_histogram)/$("$mpy" qmp-bins "$r" rd_latency_histogram)" "300/500"
vb_check "only id: removes every histogram" \
    qc '{"execute":"block-latency-histogram-set","arguments":{"id":"vm1"}}'
r=$(q '{"execute":"query-blockstats"}' | tail -n1)
vb_check_eq "  ...none in query-blockstats" \
    "$("$mpy" qmp-bins "$r" rd_latency_histogram)/$("$mpy" qmp-bins "$r" wr_latency_histogram)" "none/none"

# By node name: an export added over QMP on node n2 (export id e2).
img2=$(vb_mkimg d2 16M)
qc "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":\"file\",\"node-name\":\"n2\",\"filename\":\"$img2\"}}" > /dev/null
qc "{\"execute\":\"block-export-add\",\"arguments\":{\"type\":\"vhost-user-blk\",\"id\":\"e2\",\"node-name\":\"n2\",\"writable\":true,\"addr\":{\"type\":\"unix\",\"path\":\"$VB_TMP/d2.sock\"}}}" > /dev/null
vb_check "block-latency-histogram-set by the node name of export e2" \
    qc '{"execute":"block-latency-histogram-set","arguments":{"id":"n2","boundaries-read":[1000000]}}'
vb_check "bench: 100 reads on e2" \
    bench --socket "$VB_TMP/d2.sock" --rw randread --bs 4k --ios 100 --iodepth 2
r=$(q '{"execute":"query-blockstats"}' | tail -n1)
vb_check_eq "  ...e2's rd bins sum to 100, vm1 has none" \
    "$(python3 -c 'import json,sys
for e in json.loads(sys.argv[1])["return"]:
    st = e["stats"]
    print(e["qdev"], sum(st["rd_latency_histogram"]["bins"]) if "rd_latency_histogram" in st else "none")' "$r" | sort | tr '\n' ' ')" "e2 100 vm1 none "
qc '{"execute":"block-export-del","arguments":{"id":"e2"}}' > /dev/null
qc '{"execute":"blockdev-add","arguments":{"driver":"null-co","node-name":"lonely"}}' > /dev/null
vb_check "a node no export serves is refused" \
    bash -c "'$qmppy' '$qmp' '{\"execute\":\"block-latency-histogram-set\",\"arguments\":{\"id\":\"lonely\"}}' | grep -q \"Device 'lonely' not found\""

# --- vhost-blk-ctl stats --watch percentiles ----------------------------
"$ctl" -s "$qmp" stats --watch 0.2 > "$VB_TMP/watch.txt" 2>&1 &
wpid=$!
frames() { grep -c '^EXPORT' "$VB_TMP/watch.txt"; }
n=0
until [ "$(frames)" -ge 2 ] || [ $n -ge 600 ]; do sleep 0.05; n=$((n + 1)); done
bench --socket "$sock" --rw randread --bs 4k --ios 2000 --iodepth 4
f=$(frames)
n=0
# A frame sampled after the bench ended covers its last requests.
until [ "$(frames)" -ge $((f + 2)) ] || [ $n -ge 600 ]; do sleep 0.05; n=$((n + 1)); done
kill -INT "$wpid" 2>/dev/null
wait "$wpid"
grep -E '^(EXPORT|vm1)' "$VB_TMP/watch.txt" | head -n 8 | sed 's/^/#   /'
vb_check "stats --watch has p50/p99/p99.9 columns" \
    grep -Eq '^EXPORT .* p50_us +p99_us +p99\.9_us$' "$VB_TMP/watch.txt"
vb_check "  ...with numbers in an interval with I/O" \
    grep -Eq '^vm1 .* [0-9]+ +[0-9]+ +[0-9]+$' "$VB_TMP/watch.txt"
vb_check "  ...and p50 <= p99 <= p99.9" \
    awk '/^vm1 / && $(NF-2) ~ /^[0-9]+$/ { if ($(NF-2) > $(NF-1) || $(NF-1) > $NF) bad = 1; seen = 1 }
         END { exit !(seen && !bad) }' "$VB_TMP/watch.txt"

vb_stop "$VB_LAST_PID"
vb_check "clean shutdown with the endpoint running" \
    grep -q "shutting down" "$VB_TMP/blkd.log"
vb_check "no seccomp violation in the log" \
    bash -c "! grep -q 'seccomp: .* made system call' '$VB_TMP/blkd.log'"

# --- the page cache and its bound ----------------------------------------
# 8 null exports of 64 queues: a page of about 9 MB, which took the main
# thread ~60 ms per scrape and a copy per connection before the cache.
cpy=$VB_FUNC/metrics-cache.py
big=()
for i in 0 1 2 3 4 5 6 7; do
    big+=(--export "socket=$VB_TMP/big$i.sock,driver=null,size=16M,num-queues=64,id=big$i")
done
vb_daemon_start big "$VB_TMP/big7.sock" "$blkd" --metrics 127.0.0.1:0 "${big[@]}" ||
    vb_bail "vhost-blkd with 8 x 64 queues did not start"
bigpid=$VB_LAST_PID
url=$(metrics_url "$VB_TMP/big.log") || vb_bail "no 'metrics: serving' log line"
# Clients that stop reading: each holds its page; the daemon renders no
# more than METRICS_PAGES_MAX (3) alive, then sends the cached one.
"$cpy" slow "$url" 5 > "$VB_TMP/slow.json"
sed 's/^/#   /' "$VB_TMP/slow.json"
jq() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$VB_TMP/$1.json" "$2"; }
vb_check_eq "slow clients 1-3 got pages 1, 2, 3 (renders_total)" \
    "$(jq slow '[c.get("renders_total") for c in d["slow"][:3]]')" "[1, 2, 3]"
vb_check_eq "  ...with 0, 1, 2 pages already alive" \
    "$(jq slow '[c.get("pages_held") for c in d["slow"][:3]]')" "[0, 1, 2]"
vb_check_eq "slow clients 4-5, with 3 pages alive, got page 3 again (no 4th)" \
    "$(jq slow '[c.get("renders_total") for c in d["slow"][3:]]')" "[3, 3]"
vb_check "never more than 3 pages' bytes held" \
    test "$(jq slow 'max(c.get("held_bytes", 1 << 62) for c in d["slow"] + [d["after"]])')" \
    -le "$(jq slow '3 * d["slow"][1].get("held_bytes", 0)')"
vb_check_eq "once they hang up, their pages are freed: a page made with only the cached one alive" \
    "$(jq slow 'd["after"].get("pages_held")')" 1
vb_check "  ...counting the stale answers (2, or more while hang-ups were pending)" \
    test "$(jq slow 'd["after"].get("stale_total", -1)')" -ge 2
# Scrapes in a row share pages: k pages in T seconds need T >= k - 2
# (each new page comes at least 1 s after the one before; the first may be
# older than the burst), whatever the machine's speed.
"$cpy" burst "$url" 20 > "$VB_TMP/burst.json"
sed 's/^/#   /' "$VB_TMP/burst.json"
vb_check "20 scrapes in a row: every page has renders_total" \
    test "$(jq burst 'd["missing"]')" = 0
vb_check "  ...and at most one render per second of them, plus 2" \
    test "$(jq burst 'd["pages"]')" -le "$(jq burst 'int(d["seconds"]) + 2')"
vb_check "the daemon is alive after the slow clients and the burst" kill -0 "$bigpid"
vb_stop "$bigpid"

# --- config file, nothing by default, bad values -------------------------
printf 'metrics 127.0.0.1:0\nexport socket=%s,file=%s\n' "$sock" "$img" > "$VB_TMP/d.conf"
vb_daemon_start conf "$sock" "$blkd" --config "$VB_TMP/d.conf" ||
    vb_bail "vhost-blkd --config with a metrics line did not start"
url=$(metrics_url "$VB_TMP/conf.log")
vb_check "--config 'metrics ADDR:PORT' serves /metrics" "$mpy" get "${url:-none}" "$VB_TMP/m2.txt"
vb_stop "$VB_LAST_PID"

vb_daemon_start plain "$sock" "$blkd" --export "socket=$sock,file=$img" ||
    vb_bail "vhost-blkd did not start"
pid=$VB_LAST_PID
vb_check_eq "without --metrics nothing about metrics in the log" \
    "$(grep -c 'metrics' "$VB_TMP/plain.log")" 0
inodes=$(ls -l /proc/$pid/fd | sed -n 's/.*socket:\[\([0-9]*\)\]/\1/p')
tcp=0
for i in $inodes; do
    awk -v i="$i" '$10 == i' /proc/net/tcp /proc/net/tcp6 | grep -q . && tcp=$((tcp + 1))
done
vb_check_eq "  ...and none of its sockets is TCP" "$tcp" 0
vb_stop "$pid"

for bad in "9100" "127.0.0.1" "127.0.0.1:http" "127.0.0.1:70000" "[::1]9100"; do
    "$blkd" --metrics "$bad" --export "socket=$sock,file=$img" > "$VB_TMP/bad.txt" 2>&1
    rc=$?
    vb_check_eq "--metrics '$bad' refused with a hint" \
        "$rc/$(grep -c 'give ADDR:PORT' "$VB_TMP/bad.txt")" "1/1"
done
python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True); time.sleep(120)' > "$VB_TMP/busy.port" &
hold=$!
n=0
until [ -s "$VB_TMP/busy.port" ] || [ $n -ge 200 ]; do sleep 0.05; n=$((n + 1)); done
"$blkd" --metrics "127.0.0.1:$(cat "$VB_TMP/busy.port")" --export "socket=$sock,file=$img" \
    > "$VB_TMP/busy.txt" 2>&1
rc=$?
sed 's/^/#   /' "$VB_TMP/busy.txt"
vb_check_eq "a port in use: exit 1, says so, no socket left" \
    "$rc/$(grep -c 'Address already in use' "$VB_TMP/busy.txt")/$([ -e "$sock" ] && echo left || echo gone)" \
    "1/1/gone"
kill "$hold" 2>/dev/null
wait "$hold" 2>/dev/null

vb_done
