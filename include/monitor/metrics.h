/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Prometheus metrics: a snapshot of every export's per-queue counters and
 * latency buckets, and its rendering in the text exposition format 0.0.4.
 *
 * metrics_collect() runs in the main thread and reads the queues through
 * the export's statistics snapshot (vu_blk_export_get_queue_stats(): each
 * queue copies its counters in its own iothread), as query-blockstats
 * does; the I/O path takes no lock for it.  metrics_render() is a pure
 * function of the snapshot, so it can run in any thread and be tested on
 * a snapshot built by hand.
 */
#ifndef MONITOR_METRICS_H
#define MONITOR_METRICS_H

#include "qemu/osdep.h"
#include "hw/block/vhost-user-blk-export.h"

typedef struct VbState VbState;

typedef struct MetricsExport {
    char *id;
    char *node;
    bool connected;
    unsigned int num_queues;
    VuBlkQueueStats *queues;    /* num_queues entries */
    BlockThrottleStats throttle; /* the export's node; zero without QoS */
} MetricsExport;

typedef struct MetricsSnapshot {
    MetricsExport *exports;
    unsigned int num_exports;
    bool have_process;          /* the two below were read */
    uint64_t rss_bytes;         /* resident set size */
    uint64_t open_fds;
} MetricsSnapshot;

/* Main thread.  Every export of @s and the process' RSS and fds. */
MetricsSnapshot *metrics_collect(VbState *s);
void metrics_snapshot_free(MetricsSnapshot *snap);

/* Any thread.  Append the exposition text of @snap to @out. */
void metrics_render(const MetricsSnapshot *snap, GString *out);

/* Any thread.  RSS from /proc/self/statm and entries of /proc/self/fd;
 * false if /proc cannot be read. */
bool metrics_read_process(uint64_t *rss_bytes, uint64_t *open_fds);

/* Content-Type of metrics_render()'s text. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
