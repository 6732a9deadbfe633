/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * monitor/metrics.c's text renderer on a snapshot built by hand: exact
 * sample lines, label escaping, cumulative buckets with exact decimal
 * bounds, _sum and _count, one HELP/TYPE pair per family with all its
 * samples together (what the exposition format requires), and the
 * process gauges.
 */
#include "qemu/osdep.h"
#include "monitor/metrics.h"

static MetricsSnapshot *make_snapshot(void)
{
    MetricsSnapshot *s = g_new0(MetricsSnapshot, 1);
    MetricsExport *e;

    s->num_exports = 2;
    s->exports = g_new0(MetricsExport, 2);
    e = &s->exports[0];
    e->id = g_strdup("vm1");
    e->node = g_strdup("disk0");
    e->connected = true;
    e->num_queues = 2;
    e->queues = g_new0(VuBlkQueueStats, 2);
    e->queues[0].requests = 7;
    e->queues[0].completed = 6;
    e->queues[0].inflight = 1;
    e->queues[0].kicks = 3;
    e->queues[0].notifies_suppressed = 2;
    e->queues[0].ops[VU_BLK_OP_READ] = (VuBlkOpStats) {
        .ops = 4, .failed = 1, .bytes = 12288, .total_ns = 1500000001,
    };
    e->queues[0].lat_bins[VU_BLK_OP_READ][0] = 1;
    e->queues[0].lat_bins[VU_BLK_OP_READ][2] = 2;
    e->queues[0].lat_bins[VU_BLK_OP_READ][LAT_HIST_FIXED_FINITE] = 1;
    e->queues[1].poll_hits = 5;
    e->queues[1].ops[VU_BLK_OP_WRITE_ZEROES].ops = 2;
    e->queues[1].ops[VU_BLK_OP_WRITE_ZEROES].total_ns = 2000000000;
    e->queues[1].lat_bins[VU_BLK_OP_WRITE_ZEROES][24] = 2;
    e->throttle = (BlockThrottleStats) {
        .throttled = 9, .throttled_ns = 2500000000, .waiting = 3,
    };

    e = &s->exports[1];
    e->id = g_strdup("we\"ird\\id\nx");
    e->node = g_strdup("n");
    e->num_queues = 1;
    e->queues = g_new0(VuBlkQueueStats, 1);
    s->have_process = true;
    s->rss_bytes = 4096 * 100;
    s->open_fds = 17;
    return s;
}

static bool has_line(const char *text, const char *line)
{
    g_autofree char *l = g_strdup_printf("\n%s\n", line);

    return strstr(text, l) != NULL;
}

static void test_samples(void)
{
    MetricsSnapshot *s = make_snapshot();
    g_autoptr(GString) out = g_string_new("");
    static const char *const want[] = {
        "vhost_blk_export_info{export=\"vm1\",node=\"disk0\"} 1",
        "vhost_blk_export_connected{export=\"vm1\"} 1",
        "vhost_blk_queue_requests_total{export=\"vm1\",queue=\"0\"} 7",
        "vhost_blk_queue_completed_total{export=\"vm1\",queue=\"0\"} 6",
        "vhost_blk_queue_in_flight{export=\"vm1\",queue=\"0\"} 1",
        "vhost_blk_queue_kicks_total{export=\"vm1\",queue=\"0\"} 3",
        "vhost_blk_queue_notifies_suppressed_total{export=\"vm1\",queue=\"0\"} 2",
        "vhost_blk_queue_poll_hits_total{export=\"vm1\",queue=\"1\"} 5",
        "vhost_blk_requests_total{export=\"vm1\",queue=\"0\",op=\"read\"} 4",
        "vhost_blk_request_errors_total{export=\"vm1\",queue=\"0\",op=\"read\"} 1",
        "vhost_blk_bytes_total{export=\"vm1\",queue=\"0\",op=\"read\"} 12288",
        "vhost_blk_requests_total{export=\"vm1\",queue=\"1\",op=\"write-zeroes\"} 2",
        /* cumulative, bounds in exact decimal seconds */
        "vhost_blk_request_duration_seconds_bucket{export=\"vm1\",queue=\"0\","
        "op=\"read\",le=\"0.000001\"} 1",
        "vhost_blk_request_duration_seconds_bucket{export=\"vm1\",queue=\"0\","
        "op=\"read\",le=\"0.000002\"} 1",
        "vhost_blk_request_duration_seconds_bucket{export=\"vm1\",queue=\"0\","
        "op=\"read\",le=\"0.000004\"} 3",
        "vhost_blk_request_duration_seconds_bucket{export=\"vm1\",queue=\"0\","
        "op=\"read\",le=\"16.777216\"} 3",
        "vhost_blk_request_duration_seconds_bucket{export=\"vm1\",queue=\"0\","
        "op=\"read\",le=\"+Inf\"} 4",
        "vhost_blk_request_duration_seconds_sum{export=\"vm1\",queue=\"0\","
        "op=\"read\"} 1.500000001",
        "vhost_blk_request_duration_seconds_count{export=\"vm1\",queue=\"0\","
        "op=\"read\"} 4",
        "vhost_blk_request_duration_seconds_bucket{export=\"vm1\",queue=\"1\","
        "op=\"write-zeroes\",le=\"8.388608\"} 0",
        "vhost_blk_request_duration_seconds_bucket{export=\"vm1\",queue=\"1\","
        "op=\"write-zeroes\",le=\"16.777216\"} 2",
        "vhost_blk_request_duration_seconds_sum{export=\"vm1\",queue=\"1\","
        "op=\"write-zeroes\"} 2",
        "vhost_blk_request_duration_seconds_count{export=\"vm1\",queue=\"1\","
        "op=\"flush\"} 0",
        /* label values escaped */
        "vhost_blk_export_info{export=\"we\\\"ird\\\\id\\nx\",node=\"n\"} 1",
        "vhost_blk_queue_requests_total{export=\"we\\\"ird\\\\id\\nx\","
        "queue=\"0\"} 0",
        /* QoS counters, per export */
        "vhost_blk_throttled_requests_total{export=\"vm1\"} 9",
        "vhost_blk_throttled_seconds_total{export=\"vm1\"} 2.5",
        "vhost_blk_throttle_waiting{export=\"vm1\"} 3",
        "vhost_blk_throttle_waiting{export=\"we\\\"ird\\\\id\\nx\"} 0",
        "vhost_blk_process_resident_memory_bytes 409600",
        "vhost_blk_process_open_fds 17",
    };

    metrics_render(s, out);
    for (size_t i = 0; i < G_N_ELEMENTS(want); i++) {
        if (!has_line(out->str, want[i])) {
            g_test_message("missing: %s\nin:\n%s", want[i], out->str);
            g_test_fail();
        }
    }
    /* Nothing for the queue an export does not have. */
    g_assert_null(strstr(out->str, "export=\"vm1\",queue=\"2\""));
    metrics_snapshot_free(s);
}

/* Each family: one HELP, then its TYPE, then only its own samples, never
 * resumed later. */
static void test_families(void)
{
    MetricsSnapshot *s = make_snapshot();
    g_autoptr(GString) out = g_string_new("");
    g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash,
                                                       g_str_equal,
                                                       g_free, NULL);
    g_auto(GStrv) lines = NULL;
    g_autofree char *family = NULL;
    unsigned int families = 0, samples = 0;

    metrics_render(s, out);
    g_assert_true(g_str_has_suffix(out->str, "\n"));
    lines = g_strsplit(out->str, "\n", -1);
    for (char **l = lines; *l && **l; l++) {
        if (g_str_has_prefix(*l, "# HELP ")) {
            g_auto(GStrv) w = g_strsplit(*l + 7, " ", 2);

            g_assert_false(g_hash_table_contains(seen, w[0]));
            g_hash_table_add(seen, g_strdup(w[0]));
            g_free(family);
            family = g_strdup(w[0]);
            families++;
            g_assert_nonnull(l[1]);
            g_assert_true(g_str_has_prefix(l[1], "# TYPE "));
            g_assert_true(g_str_has_prefix(l[1] + 7, family));
            l++;
            continue;
        }
        g_assert_nonnull(family);
        g_assert_true(g_str_has_prefix(*l, family));
        samples++;
    }
    /* info, connected, 9 queue counters, 3 op counters, 3 throttle
     * counters, the histogram, 2 process gauges */
    g_assert_cmpuint(families, ==, 20);
    /* 3 queues: 9 + 3 * 6 ops + 6 ops * (26 + 2); 2 exports: 2 * (2 + 3);
     * 2 */
    g_assert_cmpuint(samples, ==, 3 * (9 + 3 * 6 + 6 * 28) + 10 + 2);
    metrics_snapshot_free(s);
}

static void test_no_process(void)
{
    MetricsSnapshot *s = make_snapshot();
    g_autoptr(GString) out = g_string_new("");

    s->have_process = false;
    metrics_render(s, out);
    g_assert_null(strstr(out->str, "vhost_blk_process_"));
    metrics_snapshot_free(s);
}

/* The endpoint's counters come first (a slow client reads them in the
 * first bytes), only when set. */
static void test_http(void)
{
    MetricsSnapshot *s = make_snapshot();
    g_autoptr(GString) out = g_string_new("");
    g_autoptr(GString) none = g_string_new("");

    metrics_render(s, none);
    g_assert_null(strstr(none->str, "vhost_blk_metrics_"));
    s->have_http = true;
    s->http_renders = 12;
    s->http_stale = 3;
    s->http_pages_held = 2;
    s->http_bytes_held = 9000000;
    metrics_render(s, out);
    g_assert_true(g_str_has_prefix(out->str,
                                   "# HELP vhost_blk_metrics_renders_total "));
    g_assert_true(has_line(out->str, "vhost_blk_metrics_renders_total 12"));
    g_assert_true(has_line(out->str, "vhost_blk_metrics_stale_total 3"));
    g_assert_true(has_line(out->str, "vhost_blk_metrics_pages_held 2"));
    g_assert_true(has_line(out->str,
                           "vhost_blk_metrics_held_bytes 9000000"));
    g_assert_true(has_line(out->str,
                           "# TYPE vhost_blk_metrics_pages_held gauge"));
    metrics_snapshot_free(s);
}

/* The cache's decision: reuse for a second, then render unless the most
 * pages are alive, then the stale page rather than one more. */
static void test_page_action(void)
{
    const int64_t W = METRICS_CACHE_NS;

    g_assert_cmpint(metrics_page_action(-1, 0), ==, METRICS_PAGE_RENDER);
    g_assert_cmpint(metrics_page_action(-1, METRICS_PAGES_MAX), ==,
                    METRICS_PAGE_RENDER);
    g_assert_cmpint(metrics_page_action(0, 1), ==, METRICS_PAGE_REUSE);
    g_assert_cmpint(metrics_page_action(W - 1, METRICS_PAGES_MAX), ==,
                    METRICS_PAGE_REUSE);
    g_assert_cmpint(metrics_page_action(W, 1), ==, METRICS_PAGE_RENDER);
    g_assert_cmpint(metrics_page_action(W, METRICS_PAGES_MAX - 1), ==,
                    METRICS_PAGE_RENDER);
    g_assert_cmpint(metrics_page_action(W, METRICS_PAGES_MAX), ==,
                    METRICS_PAGE_STALE);
    g_assert_cmpint(metrics_page_action(100 * W, METRICS_PAGES_MAX + 5), ==,
                    METRICS_PAGE_STALE);
}

static void test_read_process(void)
{
    uint64_t rss = 0, fds = 0;
    int fd = dup(0);

    g_assert_true(metrics_read_process(&rss, &fds));
    g_assert_cmpuint(rss, >, 0);
    g_assert_cmpuint(fds, >=, 1);
    {
        uint64_t fds2 = 0;
        int fd2 = dup(0);

        g_assert_true(metrics_read_process(&rss, &fds2));
        g_assert_cmpuint(fds2, ==, fds + 1);
        close(fd2);
    }
    close(fd);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/metrics/samples", test_samples);
    g_test_add_func("/metrics/families", test_families);
    g_test_add_func("/metrics/no-process", test_no_process);
    g_test_add_func("/metrics/read-process", test_read_process);
    g_test_add_func("/metrics/http", test_http);
    g_test_add_func("/metrics/page-action", test_page_action);
    return g_test_run();
}
