#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A real Prometheus server, started here on 127.0.0.1 with its own config,
# data directory and port (a system prometheus service is neither used nor
# touched), scrapes vhost-blkd --metrics every second while a TCG guest
# runs fio write+verify passes on the export; its query API must return a
# non-zero request rate and counter for that export, and its target must
# be healthy.  Meanwhile a latency histogram set over QMP
# (block-latency-histogram-set) before the guest's first request must,
# once the guest is done, have bins that sum to query-blockstats' request
# counts of each type.
set -u
. "$(dirname "$0")/lib.sh"

vb_setup
blkd=$(vb_bin vhost-blkd) || vb_bail "vhost-blkd is not built in $VHOST_BLK_BUILD"
mpy=$VB_FUNC/metrics.py
qmppy=$VB_FUNC/qmp.py
command -v prometheus > /dev/null ||
    vb_bail "prometheus is missing: run scripts/install-deps.sh (Debian package prometheus)"

# wait_for SECS WHAT CMD...: poll CMD every 0.2 s until it succeeds.
wait_for() {
    local secs=$1 what=$2 n=0
    shift 2
    until "$@"; do
        [ $n -ge $((secs * 5)) ] && { echo "# timed out after ${secs}s: $what"; return 1; }
        sleep 0.2
        n=$((n + 1))
    done
}

img=$(vb_mkimg d0 64M)
sock=$VB_TMP/d0.sock
qmp=$VB_TMP/mon.qmp
vb_daemon_start blkd "$sock" "$blkd" --metrics 127.0.0.1:0 --seccomp on \
    --export "socket=$sock,file=$img,num-queues=2,id=vm1" \
    --chardev "socket,id=mon,path=$qmp,server=on,wait=off" \
    --monitor chardev=mon || vb_bail "vhost-blkd --metrics did not start"
blkd_pid=$VB_LAST_PID
logged_url() { sed -n 's|.*metrics: serving http://\([^ ]*\)/metrics.*|\1|p' "$VB_TMP/blkd.log" | head -n1 | grep .; }
wait_for 10 "the metrics log line" logged_url > /dev/null || vb_bail "no 'metrics: serving' line"
target=$(logged_url)
echo "# metrics endpoint: http://$target/metrics"

vb_check "block-latency-histogram-set before the guest's first request" \
    "$qmppy" "$qmp" '{"execute":"block-latency-histogram-set","arguments":{"id":"vm1","boundaries":[20000,200000,2000000,20000000]}}'

# --- our own Prometheus ---------------------------------------------------
cat > "$VB_TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: vhost-blkd
    scrape_interval: 1s
    scrape_timeout: 900ms
    static_configs:
      - targets: ['$target']
YML
prom_pid=
# A port picked free can be taken before Prometheus binds it: try again.
for attempt in 1 2 3; do
    pport=$("$mpy" freeport)
    rm -rf "$VB_TMP/prom-data"
    prometheus --config.file="$VB_TMP/prometheus.yml" \
        --storage.tsdb.path="$VB_TMP/prom-data" \
        --web.listen-address="127.0.0.1:$pport" \
        > "$VB_TMP/prometheus.log" 2>&1 &
    prom_pid=$!
    VB_PIDS+=("$prom_pid")
    if wait_for 60 "Prometheus ready" bash -c "kill -0 $prom_pid 2>/dev/null && [ \"\$('$mpy' status http://127.0.0.1:$pport/-/ready 2>/dev/null)\" = 200 ]"; then
        break
    fi
    vb_stop "$prom_pid"
    prom_pid=
done
[ -n "$prom_pid" ] || { sed 's/^/#   /' "$VB_TMP/prometheus.log" | tail -n 20; vb_bail "Prometheus did not start"; }
prom=http://127.0.0.1:$pport
echo "# prometheus: $prom (pid $prom_pid, data $VB_TMP/prom-data)"

target_up() { "$mpy" targets "$prom" | grep -q '^up'; }
vb_check "Prometheus scrapes the endpoint: target up" wait_for 60 "target up" target_up

# --- the guest: fio passes until told to stop ---------------------------
vb_guest_bg -s "$sock" -q 2 -c 2 -t 900 -j fio-until-stop vbsize=16M vbstopoff=60M \
    vbbs=4k vbiodepth=8
guest_pid=$VB_GUEST_PID

q() { "$mpy" query "$prom" "$1"; }
nonzero() { local v; v=$(q "$1"); [ "$v" != none ] && awk -v v="$v" 'BEGIN { exit !(v > 0) }'; }
rate='sum(rate(vhost_blk_requests_total{export="vm1"}[10s]))'
count='sum(vhost_blk_requests_total{export="vm1",op="write"})'
vb_check "query API: rate(vhost_blk_requests_total{export=vm1}[10s]) > 0 while fio runs" \
    wait_for 600 "a request rate" nonzero "$rate"
echo "# rate: $(q "$rate") requests/s"
# The first requests are the guest kernel's partition scan (reads): the
# rate can be non-zero before fio's first write, so wait for that too.
vb_check "query API: the write counter of vm1 is non-zero" \
    wait_for 600 "a write in the counter" nonzero "$count"
vb_check "query API: the latency histogram has observations" \
    nonzero 'sum(vhost_blk_request_duration_seconds_count{export="vm1"})'
vb_check "query API: histogram_quantile over the buckets works" \
    wait_for 120 "a quantile" nonzero 'histogram_quantile(0.5, sum by (le) (rate(vhost_blk_request_duration_seconds_bucket{export="vm1"}[10s])))'
vb_check "query API: both queues of vm1 are scraped" \
    awk -v v="$(q 'count(vhost_blk_queue_requests_total{export="vm1"})')" 'BEGIN { exit !(v == 2) }'

{ printf VBSTOP; head -c 4090 /dev/zero; } > "$VB_TMP/stop.blk"
dd if="$VB_TMP/stop.blk" of="$img" bs=4096 seek=$((60 * 256)) conv=notrunc \
    oflag=direct status=none || vb_bail "cannot write the stop marker"
wait "$guest_pid"
vb_check_eq "the guest's fio passes verified (job PASS)" "$?" 0

# --- the QMP histogram: bins sum to the request counts ------------------
r=$("$qmppy" "$qmp" '{"execute":"query-blockstats"}' | tail -n1)
stat() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])["return"][0]["stats"][sys.argv[2]])' "$r" "$1"; }
echo "# rd_operations=$(stat rd_operations) wr_operations=$(stat wr_operations) flush_operations=$(stat flush_operations)"
vb_check "the guest read and wrote" test "$(stat rd_operations)" -gt 0 -a "$(stat wr_operations)" -gt 0
vb_check_eq "rd_latency_histogram bins sum to rd_operations" \
    "$("$mpy" qmp-bins "$r" rd_latency_histogram)" "$(stat rd_operations)"
vb_check_eq "wr_latency_histogram bins sum to wr_operations" \
    "$("$mpy" qmp-bins "$r" wr_latency_histogram)" "$(stat wr_operations)"
vb_check_eq "flush_latency_histogram bins sum to flush_operations" \
    "$("$mpy" qmp-bins "$r" flush_latency_histogram)" "$(stat flush_operations)"

vb_stop "$prom_pid"
vb_stop "$blkd_pid"
vb_check "no seccomp violation in the daemon's log" \
    bash -c "! grep -q 'seccomp: .* made system call' '$VB_TMP/blkd.log'"
vb_done
