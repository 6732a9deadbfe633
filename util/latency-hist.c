/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Latency histograms: construction and quantiles (see qemu/latency-hist.h). */
#include "qemu/osdep.h"
#include "qemu/latency-hist.h"

LatHist *lat_hist_new(const uint64_t *b, unsigned int n, const char *what,
                      GError **errp)
{
    LatHist *h;

    if (n == 0 || n > LAT_HIST_MAX_BOUNDARIES) {
        g_set_error(errp, VB_ERROR, 0, "%s: give 1 to %u boundaries (got %u)",
                    what, LAT_HIST_MAX_BOUNDARIES, n);
        return NULL;
    }
    for (unsigned int i = 0; i < n; i++) {
        if (b[i] == 0 || (i && b[i] <= b[i - 1])) {
            g_set_error(errp, VB_ERROR, 0, "%s: boundaries must be greater "
                        "than 0 and ascending (entry %u is %" PRIu64 "%s)",
                        what, i, b[i], i ? ", after a larger or equal one" :
                        "");
            return NULL;
        }
    }
    h = g_new0(LatHist, 1);
    h->n = n;
    h->boundaries = g_memdup2(b, n * sizeof(*b));
    h->bins = g_new0(uint64_t, n + 1);
    return h;
}

LatHist *lat_hist_copy(const LatHist *h)
{
    LatHist *c = g_new0(LatHist, 1);

    c->n = h->n;
    c->boundaries = g_memdup2(h->boundaries, h->n * sizeof(uint64_t));
    c->bins = g_memdup2(h->bins, (h->n + 1) * sizeof(uint64_t));
    return c;
}

void lat_hist_free(LatHist *h)
{
    if (h) {
        g_free(h->boundaries);
        g_free(h->bins);
        g_free(h);
    }
}

void lat_hist_add_bins(LatHist *dst, const LatHist *src)
{
    assert(dst->n == src->n);
    for (unsigned int i = 0; i <= dst->n; i++) {
        dst->bins[i] += src->bins[i];
    }
}

uint64_t lat_hist_fixed_quantile(const uint64_t *bins, unsigned int per_mille)
{
    uint64_t total = 0, want, sum = 0;

    for (unsigned int i = 0; i < LAT_HIST_FIXED_BINS; i++) {
        total += bins[i];
    }
    if (!total) {
        return 0;
    }
    /* ceil(total * per_mille / 1000) in integers: no rounding surprise. */
    want = MAX((total * per_mille + 999) / 1000, 1);
    for (unsigned int i = 0; i < LAT_HIST_FIXED_FINITE; i++) {
        sum += bins[i];
        if (sum >= want) {
            return lat_hist_fixed_le_ns(i);
        }
    }
    return UINT64_MAX;
}
