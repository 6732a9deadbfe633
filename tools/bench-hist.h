/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bench-hist: the log-linear latency histogram of vhost-blk-bench.
 *
 * Values (nanoseconds) below BENCH_HIST_SUB get a bucket each; above, each
 * power of two [2^k, 2^(k+1)) is cut into BENCH_HIST_SUB equal sub-buckets,
 * so a bucket's width is at most 1/BENCH_HIST_SUB of its lower bound and a
 * percentile read from the histogram is within ~3% of the true value.  The
 * table is a fixed array (BENCH_HIST_BUCKETS counters, allocated once per
 * worker): recording a value is an index computation and an increment,
 * with no allocation.  Header-only so the unit test checks the same code.
 */
#ifndef TOOLS_BENCH_HIST_H
#define TOOLS_BENCH_HIST_H

#include <math.h>
#include <stdint.h>

#define BENCH_HIST_SUB_BITS 5
#define BENCH_HIST_SUB (1u << BENCH_HIST_SUB_BITS)
#define BENCH_HIST_BUCKETS ((64 - BENCH_HIST_SUB_BITS + 1) * BENCH_HIST_SUB)

static inline unsigned int bench_hist_index(uint64_t v)
{
    unsigned int msb;

    if (v < BENCH_HIST_SUB) {
        return v;
    }
    msb = 63 - __builtin_clzll(v);
    return (msb - BENCH_HIST_SUB_BITS + 1) * BENCH_HIST_SUB +
           ((v >> (msb - BENCH_HIST_SUB_BITS)) & (BENCH_HIST_SUB - 1));
}

/* Lowest value that maps to bucket @idx. */
static inline double bench_hist_low(unsigned int idx)
{
    unsigned int g = idx / BENCH_HIST_SUB, m = idx % BENCH_HIST_SUB;

    if (g == 0) {
        return idx;
    }
    return ldexp(BENCH_HIST_SUB + m, g - 1);
}

/* Number of values that map to bucket @idx. */
static inline double bench_hist_width(unsigned int idx)
{
    unsigned int g = idx / BENCH_HIST_SUB;

    return g == 0 ? 1 : ldexp(1, g - 1);
}

/* Middle of the values that map to bucket @idx. */
static inline double bench_hist_value(unsigned int idx)
{
    return bench_hist_low(idx) + (bench_hist_width(idx) - 1) / 2;
}

/*
 * The @p-th percentile (0 < p <= 100) of the @count values recorded in
 * @hist: the value of the bucket holding the ceil(p / 100 * count)-th
 * smallest value (nearest-rank).  0 when @count is 0.
 */
static inline double bench_hist_percentile(const uint64_t *hist,
                                           uint64_t count, double p)
{
    double rank = p / 100.0 * count;
    /* 99.9 / 100 * 1000 is 999.0000000000001 in binary: do not let the
     * rounding error of the product push the rank one value up */
    uint64_t want = (uint64_t)ceil(rank - 1e-9 * (rank > 1 ? rank : 1));
    uint64_t seen = 0;

    if (count == 0) {
        return 0;
    }
    if (want == 0) {
        want = 1;
    }
    for (unsigned int i = 0; i < BENCH_HIST_BUCKETS; i++) {
        seen += hist[i];
        if (seen >= want) {
            return bench_hist_value(i);
        }
    }
    return 0;
}

#endif /* TOOLS_BENCH_HIST_H */
