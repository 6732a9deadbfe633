/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Prometheus metrics: collect a snapshot of the exports and render it in
 * the text exposition format 0.0.4 (see monitor/metrics.h).
 *
 * The generator is driven by tables: a metric is one line in
 * metrics_queue_counters[] (a field of VuBlkQueueStats, one sample per
 * export and queue) or metrics_op_counters[] (a field of VuBlkOpStats, one
 * sample per export, queue and operation).  Every family is written as a
 * whole (HELP, TYPE, then all its samples), as the format requires.
 */
#include "qemu/osdep.h"
#include "monitor/metrics.h"
#include "monitor/export.h"
#include "monitor-internal.h"
#include "qemu/latency-hist.h"

#include <dirent.h>

typedef struct MetricsField {
    const char *name;
    const char *type;           /* "counter" or "gauge" */
    const char *help;
    size_t offset;              /* uint64_t in the stats struct */
} MetricsField;

/* Per export and queue: fields of VuBlkQueueStats. */
static const MetricsField metrics_queue_counters[] = {
    { "vhost_blk_queue_requests_total", "counter",
      "Requests popped from the virtqueue.",
      offsetof(VuBlkQueueStats, requests) },
    { "vhost_blk_queue_completed_total", "counter",
      "Requests completed to the used ring.",
      offsetof(VuBlkQueueStats, completed) },
    { "vhost_blk_queue_in_flight", "gauge",
      "Requests submitted and not yet completed.",
      offsetof(VuBlkQueueStats, inflight) },
    { "vhost_blk_queue_batches_total", "counter",
      "Queue turns that popped at least one request.",
      offsetof(VuBlkQueueStats, batches) },
    { "vhost_blk_queue_kicks_total", "counter",
      "Wake-ups by the driver's kick eventfd.",
      offsetof(VuBlkQueueStats, kicks) },
    { "vhost_blk_queue_poll_hits_total", "counter",
      "Queue turns started by busy polling instead of a kick.",
      offsetof(VuBlkQueueStats, poll_hits) },
    { "vhost_blk_queue_budget_yields_total", "counter",
      "Queue turns that stopped at the request budget.",
      offsetof(VuBlkQueueStats, budget_yields) },
    { "vhost_blk_queue_notifies_total", "counter",
      "Interrupts sent to the driver (call eventfd writes).",
      offsetof(VuBlkQueueStats, notifies) },
    { "vhost_blk_queue_notifies_suppressed_total", "counter",
      "Interrupts not sent because the driver did not want them.",
      offsetof(VuBlkQueueStats, notifies_suppressed) },
};

/* Per export: fields of BlockThrottleStats (QoS is kept per node). */
static const MetricsField metrics_throttle_counters[] = {
    { "vhost_blk_throttled_requests_total", "counter",
      "Requests that waited for a QoS limit.",
      offsetof(BlockThrottleStats, throttled) },
    { "vhost_blk_throttled_seconds_total", "counter",
      "Time requests waited for a QoS limit, summed.",
      offsetof(BlockThrottleStats, throttled_ns) },
    { "vhost_blk_throttle_waiting", "gauge",
      "Requests waiting for a QoS limit now.",
      offsetof(BlockThrottleStats, waiting) },
};

/* Per export, queue and operation: fields of VuBlkOpStats. */
static const MetricsField metrics_op_counters[] = {
    { "vhost_blk_requests_total", "counter",
      "Completed requests, by operation.",
      offsetof(VuBlkOpStats, ops) },
    { "vhost_blk_request_errors_total", "counter",
      "Requests completed with an error status, by operation.",
      offsetof(VuBlkOpStats, failed) },
    { "vhost_blk_bytes_total", "counter",
      "Bytes of the successful requests, by operation.",
      offsetof(VuBlkOpStats, bytes) },
};

static const char *const metrics_op_names[VU_BLK_OP__MAX] = {
    [VU_BLK_OP_READ] = "read",
    [VU_BLK_OP_WRITE] = "write",
    [VU_BLK_OP_FLUSH] = "flush",
    [VU_BLK_OP_DISCARD] = "discard",
    [VU_BLK_OP_WRITE_ZEROES] = "write-zeroes",
    [VU_BLK_OP_OTHER] = "other",
};

#define METRICS_LATENCY "vhost_blk_request_duration_seconds"

/* A label value: backslash, double quote and line feed escaped. */
static void metrics_put_label(GString *out, const char *v)
{
    for (; *v; v++) {
        switch (*v) {
        case '\\':
            g_string_append(out, "\\\\");
            break;
        case '"':
            g_string_append(out, "\\\"");
            break;
        case '\n':
            g_string_append(out, "\\n");
            break;
        default:
            g_string_append_c(out, *v);
        }
    }
}

/* Nanoseconds as exact decimal seconds ("0.000001", "16.777216", "2"). */
static void metrics_put_seconds(GString *out, uint64_t ns)
{
    char frac[16];
    int len;

    g_string_append_printf(out, "%" PRIu64, ns / 1000000000);
    if (ns % 1000000000) {
        len = snprintf(frac, sizeof(frac), "%09" PRIu64, ns % 1000000000);
        while (len > 0 && frac[len - 1] == '0') {
            frac[--len] = '\0';
        }
        g_string_append_printf(out, ".%s", frac);
    }
}

static void metrics_header(GString *out, const char *name, const char *type,
                           const char *help)
{
    g_string_append_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help,
                           name, type);
}

/* name{export="..",queue="N"[,op=".."] */
static void metrics_labels(GString *out, const char *name,
                           const MetricsExport *e, unsigned int q,
                           const char *op)
{
    g_string_append_printf(out, "%s{export=\"", name);
    metrics_put_label(out, e->id);
    g_string_append_printf(out, "\",queue=\"%u\"", q);
    if (op) {
        g_string_append_printf(out, ",op=\"%s\"", op);
    }
}

static uint64_t metrics_field(const void *base, size_t offset)
{
    uint64_t v;

    memcpy(&v, (const char *)base + offset, sizeof(v));
    return v;
}

static void metrics_render_latency(const MetricsSnapshot *snap, GString *out)
{
    metrics_header(out, METRICS_LATENCY, "histogram",
                   "Time from pop to completion of requests, by operation.");
    for (unsigned int i = 0; i < snap->num_exports; i++) {
        const MetricsExport *e = &snap->exports[i];

        for (unsigned int q = 0; q < e->num_queues; q++) {
            const VuBlkQueueStats *qs = &e->queues[q];

            for (unsigned int op = 0; op < VU_BLK_OP__MAX; op++) {
                const uint64_t *bins = qs->lat_bins[op];
                uint64_t cum = 0;

                for (unsigned int b = 0; b < LAT_HIST_FIXED_BINS; b++) {
                    cum += bins[b];
                    metrics_labels(out, METRICS_LATENCY "_bucket", e, q,
                                   metrics_op_names[op]);
                    g_string_append(out, ",le=\"");
                    if (b < LAT_HIST_FIXED_FINITE) {
                        metrics_put_seconds(out, lat_hist_fixed_le_ns(b));
                    } else {
                        g_string_append(out, "+Inf");
                    }
                    g_string_append_printf(out, "\"} %" PRIu64 "\n", cum);
                }
                metrics_labels(out, METRICS_LATENCY "_sum", e, q,
                               metrics_op_names[op]);
                g_string_append(out, "} ");
                metrics_put_seconds(out, qs->ops[op].total_ns);
                g_string_append_c(out, '\n');
                /* Every completed request is in exactly one bucket. */
                metrics_labels(out, METRICS_LATENCY "_count", e, q,
                               metrics_op_names[op]);
                g_string_append_printf(out, "} %" PRIu64 "\n", cum);
            }
        }
    }
}

/* The endpoint's own counters: first, so that a client reading only the
 * start of a large page sees which render it got. */
static void metrics_render_http(const MetricsSnapshot *snap, GString *out)
{
    if (!snap->have_http) {
        return;
    }
    metrics_header(out, "vhost_blk_metrics_renders_total", "counter",
                   "Pages of /metrics rendered by the main thread (a "
                   "scrape within 1 s of a render gets that page).");
    g_string_append_printf(out, "vhost_blk_metrics_renders_total %"
                           PRIu64 "\n", snap->http_renders);
    metrics_header(out, "vhost_blk_metrics_stale_total", "counter",
                   "Scrapes sent an older page because slow "
                   "connections held the most pages allowed.");
    g_string_append_printf(out, "vhost_blk_metrics_stale_total %" PRIu64
                           "\n", snap->http_stale);
    metrics_header(out, "vhost_blk_metrics_pages_held", "gauge",
                   "Pages alive when this one was rendered: the cached "
                   "one and older ones still being sent.");
    g_string_append_printf(out, "vhost_blk_metrics_pages_held %" PRIu64
                           "\n", snap->http_pages_held);
    metrics_header(out, "vhost_blk_metrics_held_bytes", "gauge",
                   "Bytes of those pages.");
    g_string_append_printf(out, "vhost_blk_metrics_held_bytes %" PRIu64
                           "\n", snap->http_bytes_held);
}

void metrics_render(const MetricsSnapshot *snap, GString *out)
{
    metrics_render_http(snap, out);
    metrics_header(out, "vhost_blk_export_info", "gauge",
                   "One per export: its block node.");
    for (unsigned int i = 0; i < snap->num_exports; i++) {
        g_string_append(out, "vhost_blk_export_info{export=\"");
        metrics_put_label(out, snap->exports[i].id);
        g_string_append(out, "\",node=\"");
        metrics_put_label(out, snap->exports[i].node);
        g_string_append(out, "\"} 1\n");
    }
    metrics_header(out, "vhost_blk_export_connected", "gauge",
                   "1 while a front-end is connected to the export.");
    for (unsigned int i = 0; i < snap->num_exports; i++) {
        g_string_append(out, "vhost_blk_export_connected{export=\"");
        metrics_put_label(out, snap->exports[i].id);
        g_string_append_printf(out, "\"} %d\n", snap->exports[i].connected);
    }

    for (size_t m = 0; m < G_N_ELEMENTS(metrics_queue_counters); m++) {
        const MetricsField *f = &metrics_queue_counters[m];

        metrics_header(out, f->name, f->type, f->help);
        for (unsigned int i = 0; i < snap->num_exports; i++) {
            const MetricsExport *e = &snap->exports[i];

            for (unsigned int q = 0; q < e->num_queues; q++) {
                metrics_labels(out, f->name, e, q, NULL);
                g_string_append_printf(out, "} %" PRIu64 "\n",
                                       metrics_field(&e->queues[q],
                                                     f->offset));
            }
        }
    }

    for (size_t m = 0; m < G_N_ELEMENTS(metrics_op_counters); m++) {
        const MetricsField *f = &metrics_op_counters[m];

        metrics_header(out, f->name, f->type, f->help);
        for (unsigned int i = 0; i < snap->num_exports; i++) {
            const MetricsExport *e = &snap->exports[i];

            for (unsigned int q = 0; q < e->num_queues; q++) {
                for (unsigned int op = 0; op < VU_BLK_OP__MAX; op++) {
                    metrics_labels(out, f->name, e, q, metrics_op_names[op]);
                    g_string_append_printf(out, "} %" PRIu64 "\n",
                                           metrics_field(&e->queues[q].ops[op],
                                                         f->offset));
                }
            }
        }
    }

    for (size_t m = 0; m < G_N_ELEMENTS(metrics_throttle_counters); m++) {
        const MetricsField *f = &metrics_throttle_counters[m];
        bool seconds = f->offset == offsetof(BlockThrottleStats,
                                             throttled_ns);

        metrics_header(out, f->name, f->type, f->help);
        for (unsigned int i = 0; i < snap->num_exports; i++) {
            uint64_t v = metrics_field(&snap->exports[i].throttle, f->offset);

            g_string_append_printf(out, "%s{export=\"", f->name);
            metrics_put_label(out, snap->exports[i].id);
            g_string_append(out, "\"} ");
            if (seconds) {
                metrics_put_seconds(out, v);
            } else {
                g_string_append_printf(out, "%" PRIu64, v);
            }
            g_string_append_c(out, '\n');
        }
    }

    metrics_render_latency(snap, out);

    if (snap->have_process) {
        metrics_header(out, "vhost_blk_process_resident_memory_bytes",
                       "gauge", "Resident memory of the daemon.");
        g_string_append_printf(out, "vhost_blk_process_resident_memory_bytes "
                               "%" PRIu64 "\n", snap->rss_bytes);
        metrics_header(out, "vhost_blk_process_open_fds", "gauge",
                       "Open file descriptors of the daemon.");
        g_string_append_printf(out, "vhost_blk_process_open_fds %" PRIu64
                               "\n", snap->open_fds);
    }
}

MetricsPageAction metrics_page_action(int64_t age_ns,
                                      unsigned int pages_alive)
{
    if (age_ns >= 0 && age_ns < METRICS_CACHE_NS) {
        return METRICS_PAGE_REUSE;
    }
    if (age_ns >= 0 && pages_alive >= METRICS_PAGES_MAX) {
        return METRICS_PAGE_STALE;
    }
    return METRICS_PAGE_RENDER;
}

bool metrics_read_process(uint64_t *rss_bytes, uint64_t *open_fds)
{
    g_autofree char *statm = NULL;
    unsigned long long size, resident;
    struct dirent *de;
    uint64_t n = 0;
    DIR *dir;

    if (!g_file_get_contents("/proc/self/statm", &statm, NULL, NULL) ||
        sscanf(statm, "%llu %llu", &size, &resident) != 2) {
        return false;
    }
    dir = opendir("/proc/self/fd");
    if (!dir) {
        return false;
    }
    while ((de = readdir(dir))) {
        if (de->d_name[0] != '.') {
            n++;
        }
    }
    closedir(dir);
    *rss_bytes = (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
    *open_fds = n ? n - 1 : 0;  /* not the directory's own fd */
    return true;
}

MetricsSnapshot *metrics_collect(VbState *s)
{
    MetricsSnapshot *snap = g_new0(MetricsSnapshot, 1);
    unsigned int n_vu = s->exports->len;

    snap->num_exports = n_vu + vb_nbd_num_exports(s);
    snap->exports = g_new0(MetricsExport, snap->num_exports);
    for (unsigned int i = 0; i < n_vu; i++) {
        VbExport *x = g_ptr_array_index(s->exports, i);
        VuBlkExport *vu = vb_export_get_vu(x);
        MetricsExport *e = &snap->exports[i];

        e->id = g_strdup(vb_export_get_id(x));
        e->node = g_strdup(vb_export_get_node_name(x));
        e->connected = vu_blk_export_is_connected(vu);
        e->num_queues = vu_blk_export_get_num_queues(vu);
        e->queues = g_new0(VuBlkQueueStats, e->num_queues);
        for (unsigned int q = 0; q < e->num_queues; q++) {
            vu_blk_export_get_queue_stats(vu, q, &e->queues[q]);
        }
        vb_export_get_throttle_stats(x, &e->throttle);
    }
    /* An NBD export as one "queue" 0: its connections summed. */
    for (unsigned int i = n_vu; i < snap->num_exports; i++) {
        MetricsExport *e = &snap->exports[i];
        VuBlkQueueStats *qs;
        NbdExportStats ns;
        const char *id;
        VbNode *node;

        vb_nbd_export_stats(s, i - n_vu, &id, &node, &ns);
        e->id = g_strdup(id);
        e->node = g_strdup(node->name);
        e->connected = ns.clients > 0;
        e->num_queues = 1;
        e->queues = qs = g_new0(VuBlkQueueStats, 1);
        qs->running = ns.clients > 0;
        qs->requests = ns.requests;
        qs->completed = ns.completed;
        qs->inflight = ns.inflight;
        memcpy(qs->ops, ns.ops, sizeof(qs->ops));
        memcpy(qs->lat_bins, ns.lat_bins, sizeof(qs->lat_bins));
        blk_throttle_get_stats(node->blk, &e->throttle);
    }
    snap->have_process = metrics_read_process(&snap->rss_bytes,
                                              &snap->open_fds);
    return snap;
}

void metrics_snapshot_free(MetricsSnapshot *snap)
{
    if (!snap) {
        return;
    }
    for (unsigned int i = 0; i < snap->num_exports; i++) {
        g_free(snap->exports[i].id);
        g_free(snap->exports[i].node);
        g_free(snap->exports[i].queues);
    }
    g_free(snap->exports);
    g_free(snap);
}
