/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * util/latency-hist.c and qemu/latency-hist.h: the fixed buckets' edges
 * (upper bounds inclusive), the operator's histograms' edges (lower bounds
 * inclusive, QEMU's shape), argument checks, sums and quantiles.
 */
#include "qemu/osdep.h"
#include "qemu/latency-hist.h"

static void test_fixed_edges(void)
{
    static const struct {
        uint64_t ns;
        unsigned int bucket;
    } cases[] = {
        { 0, 0 }, { 1, 0 }, { 999, 0 }, { 1000, 0 },
        { 1001, 1 }, { 2000, 1 }, { 2001, 2 }, { 4000, 2 }, { 4001, 3 },
        { 1000ULL << 10, 10 }, { (1000ULL << 10) + 1, 11 },
        { 1000ULL << 24, 24 },                      /* last finite */
        { (1000ULL << 24) + 1, LAT_HIST_FIXED_FINITE },
        { UINT64_MAX, LAT_HIST_FIXED_FINITE },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_assert_cmpuint(lat_hist_fixed_bucket(cases[i].ns), ==,
                         cases[i].bucket);
    }
    /* Every bound is in its own bucket, one more ns in the next one. */
    for (unsigned int i = 0; i < LAT_HIST_FIXED_FINITE; i++) {
        uint64_t le = lat_hist_fixed_le_ns(i);

        g_assert_cmpuint(lat_hist_fixed_bucket(le), ==, i);
        g_assert_cmpuint(lat_hist_fixed_bucket(le + 1), ==, i + 1);
    }
    g_assert_cmpuint(lat_hist_fixed_le_ns(0), ==, 1000);
    g_assert_cmpuint(lat_hist_fixed_le_ns(LAT_HIST_FIXED_FINITE - 1), ==,
                     16777216000ULL);
}

static void test_user_edges(void)
{
    const uint64_t b[] = { 10, 50, 100 };
    g_autoptr(GError) err = NULL;
    LatHist *h = lat_hist_new(b, 3, "boundaries", &err);
    static const struct {
        uint64_t ns;
        unsigned int bin;
    } cases[] = {
        { 0, 0 }, { 9, 0 }, { 10, 1 }, { 49, 1 }, { 50, 2 }, { 99, 2 },
        { 100, 3 }, { UINT64_MAX, 3 },
    };
    uint64_t sum = 0;

    g_assert_no_error(err);
    g_assert_cmpuint(h->n, ==, 3);
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_assert_cmpuint(lat_hist_bin(h, cases[i].ns), ==, cases[i].bin);
        lat_hist_record(h, cases[i].ns);
    }
    g_assert_cmpuint(h->bins[0], ==, 2);
    g_assert_cmpuint(h->bins[1], ==, 2);
    g_assert_cmpuint(h->bins[2], ==, 2);
    g_assert_cmpuint(h->bins[3], ==, 2);
    for (unsigned int i = 0; i <= h->n; i++) {
        sum += h->bins[i];
    }
    g_assert_cmpuint(sum, ==, G_N_ELEMENTS(cases));
    lat_hist_free(h);

    /* One boundary: two bins. */
    h = lat_hist_new(b, 1, "boundaries", &err);
    g_assert_no_error(err);
    g_assert_cmpuint(lat_hist_bin(h, 9), ==, 0);
    g_assert_cmpuint(lat_hist_bin(h, 10), ==, 1);
    lat_hist_free(h);
}

static void test_user_sums(void)
{
    const uint64_t b[] = { 1000, 2000 };
    LatHist *q0 = lat_hist_new(b, 2, "boundaries", NULL);
    LatHist *q1 = lat_hist_copy(q0), *sum;

    lat_hist_record(q0, 1);
    lat_hist_record(q0, 1500);
    lat_hist_record(q1, 1500);
    lat_hist_record(q1, 5000);
    lat_hist_record(q1, 5001);
    sum = lat_hist_copy(q0);
    lat_hist_add_bins(sum, q1);
    g_assert_cmpuint(sum->bins[0], ==, 1);
    g_assert_cmpuint(sum->bins[1], ==, 2);
    g_assert_cmpuint(sum->bins[2], ==, 2);
    /* The copies are apart. */
    g_assert_cmpuint(q0->bins[2], ==, 0);
    lat_hist_free(q0);
    lat_hist_free(q1);
    lat_hist_free(sum);
}

static void test_user_bad(void)
{
    static const struct {
        uint64_t b[3];
        unsigned int n;
        const char *msg;
    } cases[] = {
        { { 0 }, 0, "give 1 to 1024 boundaries" },
        { { 0, 5 }, 2, "entry 0 is 0" },
        { { 5, 5 }, 2, "entry 1 is 5" },
        { { 5, 9, 7 }, 3, "entry 2 is 7" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(GError) err = NULL;

        g_assert_null(lat_hist_new(cases[i].b, cases[i].n, "boundaries-read",
                                   &err));
        g_assert_nonnull(err);
        g_assert_true(g_str_has_prefix(err->message, "boundaries-read: "));
        g_assert_nonnull(strstr(err->message, cases[i].msg));
    }
    {
        g_autofree uint64_t *many = g_new(uint64_t, LAT_HIST_MAX_BOUNDARIES + 1);
        g_autoptr(GError) err = NULL;

        for (unsigned int i = 0; i <= LAT_HIST_MAX_BOUNDARIES; i++) {
            many[i] = i + 1;
        }
        g_assert_null(lat_hist_new(many, LAT_HIST_MAX_BOUNDARIES + 1, "b",
                                   &err));
        lat_hist_free(lat_hist_new(many, LAT_HIST_MAX_BOUNDARIES, "b", NULL));
    }
}

static void test_quantile(void)
{
    uint64_t bins[LAT_HIST_FIXED_BINS] = { 0 };

    g_assert_cmpuint(lat_hist_fixed_quantile(bins, 500), ==, 0);
    /* 1000 requests: 900 in bucket 3 (<= 8 us), 90 in 5, 9 in 7, 1 in
     * the unbounded one. */
    bins[3] = 900;
    bins[5] = 90;
    bins[7] = 9;
    bins[LAT_HIST_FIXED_FINITE] = 1;
    g_assert_cmpuint(lat_hist_fixed_quantile(bins, 500), ==, 8000);
    g_assert_cmpuint(lat_hist_fixed_quantile(bins, 900), ==, 8000);
    g_assert_cmpuint(lat_hist_fixed_quantile(bins, 901), ==, 32000);
    g_assert_cmpuint(lat_hist_fixed_quantile(bins, 990), ==, 32000);
    g_assert_cmpuint(lat_hist_fixed_quantile(bins, 999), ==, 128000);
    g_assert_cmpuint(lat_hist_fixed_quantile(bins, 1000), ==, UINT64_MAX);
    /* ceil: one request is every quantile. */
    memset(bins, 0, sizeof(bins));
    bins[2] = 1;
    g_assert_cmpuint(lat_hist_fixed_quantile(bins, 1), ==, 4000);
    g_assert_cmpuint(lat_hist_fixed_quantile(bins, 999), ==, 4000);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/latency-hist/fixed-edges", test_fixed_edges);
    g_test_add_func("/latency-hist/user-edges", test_user_edges);
    g_test_add_func("/latency-hist/user-sums", test_user_sums);
    g_test_add_func("/latency-hist/user-bad", test_user_bad);
    g_test_add_func("/latency-hist/quantile", test_quantile);
    return g_test_run();
}
