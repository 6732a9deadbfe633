/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Latency histograms: a fixed log-spaced one kept for every request, and
 * the operator's (QMP block-latency-histogram-set, QEMU's shape).
 *
 * Theory of operation: each queue owns its bins and only the queue's
 * iothread increments them, so recording a latency is a bucket search and
 * a plain increment, with no lock, no atomic and no allocation.  Readers
 * copy the bins in that iothread (the export's statistics snapshot) and sum
 * the copies of every queue afterwards.
 *
 * The fixed buckets double from 1 us: bucket i counts latencies in
 * (1000 * 2^(i-1), 1000 * 2^i] ns (bucket 0: up to 1 us), the last one
 * everything above 1000 * 2^(LAT_HIST_FIXED_FINITE - 1) ns (about 16.8 s).
 * The index is one division by a constant (a multiplication) and one
 * count-leading-zeros.  Upper bounds are inclusive, as Prometheus' "le".
 *
 * The operator's histograms follow QEMU's BlockLatencyHistogramInfo:
 * boundaries b[0] < b[1] < ... < b[n-1], all > 0, give the n + 1 bins
 * [0, b[0]), [b[0], b[1]), ..., [b[n-1], +inf): a lower bound is inclusive.
 */
#ifndef QEMU_LATENCY_HIST_H
#define QEMU_LATENCY_HIST_H

#include "qemu/osdep.h"

/* Finite buckets of the fixed histogram; one more counts the rest. */
#define LAT_HIST_FIXED_FINITE 25
#define LAT_HIST_FIXED_BINS (LAT_HIST_FIXED_FINITE + 1)
#define LAT_HIST_FIXED_BASE_NS 1000ULL

/* Most boundaries an operator's histogram may have (QMP input). */
#define LAT_HIST_MAX_BOUNDARIES 1024

/* The fixed bucket that counts a latency of @ns nanoseconds. */
static inline unsigned int lat_hist_fixed_bucket(uint64_t ns)
{
    uint64_t v = ns ? (ns - 1) / LAT_HIST_FIXED_BASE_NS : 0;
    unsigned int i = v ? 64 - __builtin_clzll(v) : 0;

    return i < LAT_HIST_FIXED_FINITE ? i : LAT_HIST_FIXED_FINITE;
}

/* Upper bound (inclusive) of fixed bucket @i < LAT_HIST_FIXED_FINITE, ns. */
static inline uint64_t lat_hist_fixed_le_ns(unsigned int i)
{
    return LAT_HIST_FIXED_BASE_NS << i;
}

/* One operator-defined histogram (QEMU's shape). */
typedef struct LatHist {
    unsigned int n;             /* boundaries; bins has n + 1 entries */
    uint64_t *boundaries;
    uint64_t *bins;
} LatHist;

/*
 * Any thread.  A new histogram with @n boundaries copied from @b and zero
 * bins; NULL with @errp set unless 1 <= n <= LAT_HIST_MAX_BOUNDARIES and
 * the boundaries are > 0 and strictly ascending.  @what names the argument
 * in the error.
 */
LatHist *lat_hist_new(const uint64_t *b, unsigned int n, const char *what,
                      GError **errp);
LatHist *lat_hist_copy(const LatHist *h);
void lat_hist_free(LatHist *h);
/* dst->bins += src->bins; both must have the same boundaries. */
void lat_hist_add_bins(LatHist *dst, const LatHist *src);

/* The bin of @h that counts @ns: how many boundaries are <= @ns. */
static inline unsigned int lat_hist_bin(const LatHist *h, uint64_t ns)
{
    unsigned int lo = 0, hi = h->n;

    while (lo < hi) {
        unsigned int mid = lo + (hi - lo) / 2;

        if (h->boundaries[mid] <= ns) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* The owner thread only. */
static inline void lat_hist_record(LatHist *h, uint64_t ns)
{
    h->bins[lat_hist_bin(h, ns)]++;
}

/*
 * The quantile @per_mille / 1000 (500: median, 999: p99.9) of the
 * fixed-bucket counts @bins: the upper bound in ns of the first bucket
 * whose cumulative count reaches ceil(total * per_mille / 1000).  UINT64_MAX when it is the unbounded last bucket, 0 when
 * @bins are all zero.
 */
uint64_t lat_hist_fixed_quantile(const uint64_t *bins, unsigned int per_mille);

#endif
