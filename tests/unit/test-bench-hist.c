/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests for vhost-blk-bench's latency histogram and percentile math. */
#include "qemu/osdep.h"
#include "../../tools/bench-hist.h"

/* Every value maps to a bucket whose range holds it; buckets are ordered
 * and contiguous, and each is narrow (<= 1/32 of its lower bound). */
static void test_index_ranges(void)
{
    uint64_t vals[] = { 0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 1000, 4095,
                        4096, 123456789, 1ull << 40, (1ull << 63) + 12345,
                        UINT64_MAX };

    for (unsigned int i = 0; i < G_N_ELEMENTS(vals); i++) {
        unsigned int idx = bench_hist_index(vals[i]);
        double lo = bench_hist_low(idx), w = bench_hist_width(idx);

        g_assert_cmpuint(idx, <, BENCH_HIST_BUCKETS);
        g_assert_cmpfloat(lo, <=, (double)vals[i]);
        g_assert_cmpfloat((double)vals[i], <=, lo + w);  /* doubles round */
        if (vals[i] >= BENCH_HIST_SUB) {
            g_assert_cmpfloat(w, <=, lo / BENCH_HIST_SUB);
        }
    }
    for (uint64_t v = 0; v < 70000; v++) {
        unsigned int idx = bench_hist_index(v);

        g_assert_cmpuint(idx, <=, bench_hist_index(v + 1));
        g_assert_cmpfloat(bench_hist_low(idx), <=, (double)v);
        g_assert_cmpfloat((double)v, <, bench_hist_low(idx) +
                          bench_hist_width(idx));
    }
    /* next bucket starts where this one ends */
    for (unsigned int idx = 0; idx + 1 < bench_hist_index(1ull << 50); idx++) {
        g_assert_cmpfloat(bench_hist_low(idx) + bench_hist_width(idx), ==,
                          bench_hist_low(idx + 1));
    }
}

/* Exact below 32 ns: nearest-rank percentiles of 1..10. */
static void test_percentile_exact(void)
{
    uint64_t *h = g_new0(uint64_t, BENCH_HIST_BUCKETS);

    g_assert_cmpfloat(bench_hist_percentile(h, 0, 50), ==, 0);
    for (uint64_t v = 1; v <= 10; v++) {
        h[bench_hist_index(v)]++;
    }
    g_assert_cmpfloat(bench_hist_percentile(h, 10, 50), ==, 5);
    g_assert_cmpfloat(bench_hist_percentile(h, 10, 51), ==, 6);
    g_assert_cmpfloat(bench_hist_percentile(h, 10, 99), ==, 10);
    g_assert_cmpfloat(bench_hist_percentile(h, 10, 100), ==, 10);
    g_assert_cmpfloat(bench_hist_percentile(h, 10, 0.001), ==, 1);
    g_free(h);
}

/* 1000 values 1..1000 us: p50, p99, p99.9 within a bucket (3%) of 500,
 * 990, 999 us, and p99.9 is not pushed to the maximum by the rounding of
 * 99.9 / 100 * 1000. */
static void test_percentile_log_linear(void)
{
    uint64_t *h = g_new0(uint64_t, BENCH_HIST_BUCKETS);
    struct { double p, want; } cases[] = {
        { 50, 500e3 }, { 99, 990e3 }, { 99.9, 999e3 }, { 100, 1000e3 },
    };

    for (uint64_t v = 1; v <= 1000; v++) {
        h[bench_hist_index(v * 1000)]++;
    }
    for (unsigned int i = 0; i < G_N_ELEMENTS(cases); i++) {
        double got = bench_hist_percentile(h, 1000, cases[i].p);
        unsigned int want_idx = bench_hist_index(cases[i].want);

        g_assert_cmpfloat(got, ==, bench_hist_value(want_idx));
        g_assert_cmpfloat(fabs(got - cases[i].want), <=,
                          cases[i].want / BENCH_HIST_SUB);
    }
    /* one outlier in 10000: p99.9 stays with the body, max is the outlier */
    memset(h, 0, BENCH_HIST_BUCKETS * sizeof(*h));
    h[bench_hist_index(10000)] = 9999;
    h[bench_hist_index(5000000)] = 1;
    g_assert_cmpfloat(bench_hist_percentile(h, 10000, 99.9), ==,
                      bench_hist_value(bench_hist_index(10000)));
    g_assert_cmpfloat(bench_hist_percentile(h, 10000, 100), ==,
                      bench_hist_value(bench_hist_index(5000000)));
    g_free(h);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/bench-hist/index-ranges", test_index_ranges);
    g_test_add_func("/bench-hist/percentile-exact", test_percentile_exact);
    g_test_add_func("/bench-hist/percentile-log-linear",
                    test_percentile_log_linear);
    return g_test_run();
}
