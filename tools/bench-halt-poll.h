/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bench-halt-poll: vhost-blk-bench's model of KVM's adaptive halt-poll
 * window (--halt-poll-grow).
 *
 * KVM's kvm_vcpu_halt() polls a halted vCPU for up to its halt_poll_ns
 * window before it sleeps, and after each halt adapts the window with the
 * module parameters grow (2), grow_start (10 us) and shrink (0): a halt
 * longer than the maximum resets the window (polling could not have
 * helped; shrink 0 means reset rather than divide), a halt that outlasted
 * the window but stayed under the maximum (a "short" sleep: a longer
 * window would have caught it) doubles it, to at least grow_start and at
 * most the maximum, and a halt the poll caught leaves it alone.
 * Header-only so the unit test checks the same code.
 */
#ifndef TOOLS_BENCH_HALT_POLL_H
#define TOOLS_BENCH_HALT_POLL_H

#include <stdint.h>

#define BENCH_HALT_POLL_START 10000     /* ns: KVM's halt_poll_ns_grow_start */

typedef enum BenchHaltPollStep {
    BENCH_HALT_POLL_KEEP,
    BENCH_HALT_POLL_GROW,
    BENCH_HALT_POLL_SHRINK,
} BenchHaltPollStep;

/*
 * The window after an idle period of @idle_ns (poll + sleep) that had a
 * window of *@window_ns, with the maximum @max_ns; returns what changed.
 */
static inline BenchHaltPollStep bench_halt_poll_next(uint64_t *window_ns,
                                                     uint64_t idle_ns,
                                                     uint64_t max_ns)
{
    uint64_t w = *window_ns;

    if (idle_ns <= w) {
        return BENCH_HALT_POLL_KEEP;            /* the poll caught it */
    }
    if (w && idle_ns > max_ns) {
        *window_ns = 0;
        return BENCH_HALT_POLL_SHRINK;
    }
    if (w < max_ns && idle_ns < max_ns) {
        w = w * 2 < BENCH_HALT_POLL_START ? BENCH_HALT_POLL_START : w * 2;
        *window_ns = w > max_ns ? max_ns : w;
        return BENCH_HALT_POLL_GROW;
    }
    return BENCH_HALT_POLL_KEEP;
}

#endif /* TOOLS_BENCH_HALT_POLL_H */
