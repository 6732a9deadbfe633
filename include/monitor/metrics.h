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
    bool have_http;             /* the endpoint's own counters below */
    uint64_t http_renders;      /* pages rendered, this one included */
    uint64_t http_stale;        /* scrapes given an older page */
    uint64_t http_pages_held;   /* older pages still being sent */
    uint64_t http_bytes_held;   /* their bytes */
} MetricsSnapshot;

/* Main thread.  Every export of @s and the process' RSS and fds. */
MetricsSnapshot *metrics_collect(VbState *s);
void metrics_snapshot_free(MetricsSnapshot *snap);

/* Any thread.  Append the exposition text of @snap to @out. */
void metrics_render(const MetricsSnapshot *snap, GString *out);

/* Any thread.  RSS from /proc/self/statm and entries of /proc/self/fd;
 * false if /proc cannot be read. */
bool metrics_read_process(uint64_t *rss_bytes, uint64_t *open_fds);

/*
 * The endpoint's page cache (monitor/metrics-http.c): a page is rendered
 * by the main thread at most once per METRICS_CACHE_NS, and every scrape
 * in between is sent the same page (one buffer, shared).  At most
 * METRICS_PAGES_MAX pages are alive at once, the cached one and older
 * ones that slow connections are still being sent; while that many are,
 * a scrape gets the cached page, however old, instead of a new one: a
 * client that never reads holds one page, never more.
 */
#define METRICS_CACHE_NS        1000000000LL
#define METRICS_PAGES_MAX       3

typedef enum MetricsPageAction {
    METRICS_PAGE_REUSE,         /* send the cached page: it is fresh */
    METRICS_PAGE_RENDER,        /* have the main thread render a new one */
    METRICS_PAGE_STALE,         /* send the cached page: too many alive */
} MetricsPageAction;

/* Any thread.  What a scrape gets, given the cached page's age (ns; < 0
 * without a cached page) and the pages alive (the cached one included). */
MetricsPageAction metrics_page_action(int64_t age_ns,
                                      unsigned int pages_alive);

/* Content-Type of metrics_render()'s text. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
