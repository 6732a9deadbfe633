/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests for vhost-blk-bench's model of KVM's halt-poll window. */
#include "qemu/osdep.h"
#include "../../tools/bench-halt-poll.h"

#define MAX_NS 200000

/* Short sleeps grow the window 10 -> 20 -> 40 -> 80 -> 160 -> 200 us and
 * it stays at the maximum. */
static void test_grow_to_max(void)
{
    uint64_t w = 0, want[] = { 10000, 20000, 40000, 80000, 160000, 200000 };

    for (unsigned int i = 0; i < G_N_ELEMENTS(want); i++) {
        g_assert_cmpint(bench_halt_poll_next(&w, w + 1, MAX_NS), ==,
                        BENCH_HALT_POLL_GROW);
        g_assert_cmpuint(w, ==, want[i]);
    }
    /* at the maximum a short sleep (over the window, under the max is
     * impossible now) keeps it */
    g_assert_cmpint(bench_halt_poll_next(&w, MAX_NS, MAX_NS), ==,
                    BENCH_HALT_POLL_KEEP);
    g_assert_cmpuint(w, ==, MAX_NS);
}

/* A halt the poll caught (idle <= window) changes nothing. */
static void test_poll_caught(void)
{
    uint64_t w = 40000;

    g_assert_cmpint(bench_halt_poll_next(&w, 40000, MAX_NS), ==,
                    BENCH_HALT_POLL_KEEP);
    g_assert_cmpint(bench_halt_poll_next(&w, 5, MAX_NS), ==,
                    BENCH_HALT_POLL_KEEP);
    g_assert_cmpuint(w, ==, 40000);
}

/* A sleep longer than the maximum resets the window to 0 (shrink 0);
 * the next short one starts again at 10 us.  From 0, a long sleep keeps
 * it at 0. */
static void test_reset_on_long_sleep(void)
{
    uint64_t w = 160000;

    g_assert_cmpint(bench_halt_poll_next(&w, MAX_NS + 1, MAX_NS), ==,
                    BENCH_HALT_POLL_SHRINK);
    g_assert_cmpuint(w, ==, 0);
    g_assert_cmpint(bench_halt_poll_next(&w, 10 * MAX_NS, MAX_NS), ==,
                    BENCH_HALT_POLL_KEEP);
    g_assert_cmpuint(w, ==, 0);
    g_assert_cmpint(bench_halt_poll_next(&w, 3000, MAX_NS), ==,
                    BENCH_HALT_POLL_GROW);
    g_assert_cmpuint(w, ==, 10000);
}

/* A maximum below grow_start caps the first step too. */
static void test_small_max(void)
{
    uint64_t w = 0;

    g_assert_cmpint(bench_halt_poll_next(&w, 1000, 5000), ==,
                    BENCH_HALT_POLL_GROW);
    g_assert_cmpuint(w, ==, 5000);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/bench-halt-poll/grow-to-max", test_grow_to_max);
    g_test_add_func("/bench-halt-poll/poll-caught", test_poll_caught);
    g_test_add_func("/bench-halt-poll/reset-on-long-sleep",
                    test_reset_on_long_sleep);
    g_test_add_func("/bench-halt-poll/small-max", test_small_max);
    return g_test_run();
}
