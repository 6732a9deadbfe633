/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The busy-host policy (util/host-load.c) fed with injected readings: no
 * clock, no /proc, no timing.  Also: the event loop does not busy-poll
 * while the host is marked busy, and polls again once it is not.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "qemu/event_notifier.h"
#include "qemu/host-load.h"

/* A reading @dt_ms after @prev on a host of @cpus CPUs: @pressure of the
 * interval with some task waiting, @idle CPUs' worth of idle time. */
static HostLoadSample next(const HostLoadSample *prev, unsigned int dt_ms,
                           double pressure, double idle, unsigned int cpus)
{
    HostLoadSample s = *prev;
    /* 100 ticks per second per CPU */
    uint64_t ticks = (uint64_t)dt_ms * cpus / 10;

    s.now_us += dt_ms * 1000ULL;
    s.have_psi = true;
    s.psi_some_us += (uint64_t)(pressure * dt_ms * 1000);
    s.total_ticks += ticks;
    s.idle_ticks += (uint64_t)(idle / cpus * ticks);
    s.online_cpus = cpus;
    return s;
}

static HostLoadSample first(unsigned int cpus)
{
    return (HostLoadSample) {
        .now_us = 1000000, .have_psi = true, .psi_some_us = 5000000,
        .total_ticks = 100000, .idle_ticks = 50000, .procs_running = 1,
        .online_cpus = cpus,
    };
}

static void test_first_sample_primes(void)
{
    HostLoadPolicy p;
    HostLoadSample s = first(2);

    host_load_policy_init(&p);
    /* Huge absolute counters mean nothing without a previous reading. */
    g_assert_false(host_load_update(&p, &s));
    g_assert_cmpuint(p.samples, ==, 0);
    s = next(&s, 500, 0.0, 1.5, 2);
    g_assert_false(host_load_update(&p, &s));
    g_assert_cmpuint(p.samples, ==, 1);
    g_assert_cmpfloat_with_epsilon(p.pressure, 0.0, 1e-9);
    g_assert_cmpfloat_with_epsilon(p.idle_cpus, 1.5, 0.01);
}

static void test_pressure_makes_busy(void)
{
    HostLoadPolicy p;
    HostLoadSample s = first(2);

    host_load_policy_init(&p);
    host_load_update(&p, &s);
    /* Below the threshold: not busy. */
    s = next(&s, 500, 0.05, 0.1, 2);
    g_assert_false(host_load_update(&p, &s));
    /* At 10%, no idle CPU: busy at once. */
    s = next(&s, 500, HOST_LOAD_BUSY_PRESSURE, 0.1, 2);
    g_assert_true(host_load_update(&p, &s));
    g_assert_cmpuint(p.transitions, ==, 1);
    g_assert_true(aio_get_host_busy() == false);   /* policy has no effect
                                                     * on the loop by itself */
}

static void test_idle_cpu_is_never_busy(void)
{
    HostLoadPolicy p;
    HostLoadSample s = first(4);

    host_load_policy_init(&p);
    host_load_update(&p, &s);
    /* Tasks wait (e.g. pinned to one CPU) but a whole CPU is idle. */
    s = next(&s, 500, 0.8, 1.2, 4);
    g_assert_false(host_load_update(&p, &s));
    s = next(&s, 500, 0.8, 0.7, 4);
    g_assert_true(host_load_update(&p, &s));
    /* An idle CPU counts as calm. */
    for (int i = 0; i < HOST_LOAD_CALM_SAMPLES - 1; i++) {
        s = next(&s, 500, 0.8, 2.0, 4);
        g_assert_true(host_load_update(&p, &s));
    }
    s = next(&s, 500, 0.8, 2.0, 4);
    g_assert_false(host_load_update(&p, &s));
}

/* Our own polling eats the idle time: what we use counts as spare. */
static void test_own_cpu_counts_as_spare(void)
{
    HostLoadPolicy p;
    HostLoadSample s = first(2);

    host_load_policy_init(&p);
    host_load_update(&p, &s);
    /* 0.3 CPUs idle, but we use 0.9 of a CPU: one would be idle. */
    s = next(&s, 500, 0.3, 0.3, 2);
    s.self_cpu_us += 450000;
    g_assert_false(host_load_update(&p, &s));
    g_assert_cmpfloat_with_epsilon(p.self_cpus, 0.9, 1e-6);
    /* We use little (polling paused) and nothing is idle: busy. */
    s = next(&s, 500, 0.3, 0.3, 2);
    s.self_cpu_us += 100000;
    g_assert_true(host_load_update(&p, &s));
    g_assert_cmpfloat_with_epsilon(p.self_cpus, 0.2, 1e-6);
}

static void test_hysteresis(void)
{
    HostLoadPolicy p;
    HostLoadSample s = first(2);

    host_load_policy_init(&p);
    host_load_update(&p, &s);
    s = next(&s, 500, 0.5, 0.0, 2);
    g_assert_true(host_load_update(&p, &s));

    /* Between the thresholds: stays busy however long it lasts. */
    for (int i = 0; i < 10; i++) {
        s = next(&s, 500, 0.05, 0.2, 2);
        g_assert_true(host_load_update(&p, &s));
    }
    /* Calm samples must come in a row: one pressured sample resets. */
    for (int i = 0; i < HOST_LOAD_CALM_SAMPLES - 1; i++) {
        s = next(&s, 500, 0.0, 0.5, 2);
        g_assert_true(host_load_update(&p, &s));
    }
    s = next(&s, 500, 0.2, 0.0, 2);
    g_assert_true(host_load_update(&p, &s));
    for (int i = 0; i < HOST_LOAD_CALM_SAMPLES - 1; i++) {
        s = next(&s, 500, 0.01, 0.5, 2);
        g_assert_true(host_load_update(&p, &s));
    }
    s = next(&s, 500, 0.01, 0.5, 2);
    g_assert_false(host_load_update(&p, &s));
    g_assert_cmpuint(p.transitions, ==, 2);

    /* And busy again on the next pressured interval. */
    s = next(&s, 500, 0.3, 0.0, 2);
    g_assert_true(host_load_update(&p, &s));
    g_assert_cmpuint(p.transitions, ==, 3);
}

/* Pressure is a share of the interval, whatever its length. */
static void test_interval_length(void)
{
    HostLoadPolicy p;
    HostLoadSample s = first(2);

    host_load_policy_init(&p);
    host_load_update(&p, &s);
    /* 40 ms of waiting in 2 s is 2%: calm... */
    s = next(&s, 2000, 0.02, 0.0, 2);
    g_assert_false(host_load_update(&p, &s));
    g_assert_cmpfloat_with_epsilon(p.pressure, 0.02, 1e-6);
    /* ...40 ms in 200 ms is 20%: busy. */
    s = next(&s, 200, 0.2, 0.0, 2);
    g_assert_true(host_load_update(&p, &s));
    g_assert_cmpfloat_with_epsilon(p.pressure, 0.2, 1e-6);
}

static void test_backwards_ignored(void)
{
    HostLoadPolicy p;
    HostLoadSample s = first(2), bad;

    host_load_policy_init(&p);
    host_load_update(&p, &s);
    s = next(&s, 500, 0.5, 0.0, 2);
    g_assert_true(host_load_update(&p, &s));

    /* The clock stands still, or counters go back: no decision. */
    bad = s;
    g_assert_true(host_load_update(&p, &bad));
    bad = next(&s, 500, 0.0, 1.0, 2);
    bad.psi_some_us = s.psi_some_us - 1;
    g_assert_true(host_load_update(&p, &bad));
    bad = next(&s, 500, 0.0, 1.0, 2);
    bad.total_ticks = 0;
    g_assert_true(host_load_update(&p, &bad));
    g_assert_cmpuint(p.samples, ==, 1);
    /* The last (bad) reading became the base: the next good one counts. */
    s = next(&bad, 500, 0.0, 1.5, 2);
    g_assert_true(host_load_update(&p, &s));
    g_assert_cmpuint(p.samples, ==, 2);
}

/* Without PSI: runnable tasks beyond the CPUs (besides the reader),
 * smoothed over samples. */
static void test_no_psi_fallback(void)
{
    HostLoadPolicy p;
    HostLoadSample s = first(2);

    s.have_psi = false;
    host_load_policy_init(&p);
    host_load_update(&p, &s);

    /* Reader + 2 others on 2 CPUs: nobody waits. */
    s = next(&s, 500, 0, 0.0, 2);
    s.have_psi = false;
    s.procs_running = 3;
    g_assert_false(host_load_update(&p, &s));
    g_assert_cmpfloat_with_epsilon(p.pressure, 0.0, 1e-9);
    /* Reader + 3: one waits; smoothed to 0.5, busy. */
    s = next(&s, 500, 0, 0.0, 2);
    s.have_psi = false;
    s.procs_running = 4;
    g_assert_true(host_load_update(&p, &s));
    g_assert_cmpfloat_with_epsilon(p.pressure, 0.5, 1e-9);
    /* It decays: 0.25, 0.125, 0.0625, 0.03125, then below 3%. */
    for (int i = 0; i < 4; i++) {
        s = next(&s, 500, 0, 0.0, 2);
        s.have_psi = false;
        s.procs_running = 1;
        g_assert_true(host_load_update(&p, &s));
    }
    for (int i = 0; i < HOST_LOAD_CALM_SAMPLES - 1; i++) {
        s = next(&s, 500, 0, 0.0, 2);
        s.have_psi = false;
        s.procs_running = 1;
        g_assert_true(host_load_update(&p, &s));
    }
    s = next(&s, 500, 0, 0.0, 2);
    s.have_psi = false;
    s.procs_running = 1;
    g_assert_false(host_load_update(&p, &s));
}

static void test_parse(void)
{
    uint64_t v, total, idle;
    unsigned int running;

    g_assert_true(host_load_parse_psi(
        "some avg10=46.66 avg60=19.83 avg300=7.05 total=985649127\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", &v));
    g_assert_cmpuint(v, ==, 985649127);
    g_assert_false(host_load_parse_psi("", &v));
    g_assert_false(host_load_parse_psi("full avg10=0 total=5\n", &v));
    g_assert_false(host_load_parse_psi("some avg10=1.00\nfull total=3\n",
                                       &v));
    g_assert_false(host_load_parse_psi("some avg10=1 total=x\n", &v));

    g_assert_true(host_load_parse_stat(
        "cpu  100 2 30 400 5 6 7 8 9 10\n"
        "cpu0 50 1 15 200 2 3 3 4 4 5\n"
        "intr 12345 0 0\nctxt 99\nbtime 1\nprocesses 10\n"
        "procs_running 3\nprocs_blocked 0\n", &total, &idle, &running));
    /* guest and guest_nice are inside user and nice already */
    g_assert_cmpuint(total, ==, 100 + 2 + 30 + 400 + 5 + 6 + 7 + 8);
    g_assert_cmpuint(idle, ==, 405);
    g_assert_cmpuint(running, ==, 3);
    /* An old kernel's four fields; procs_running cut off: 0. */
    g_assert_true(host_load_parse_stat("cpu  1 2 3 4\ncpu0 1 2 3 4\n",
                                       &total, &idle, &running));
    g_assert_cmpuint(total, ==, 10);
    g_assert_cmpuint(idle, ==, 4);
    g_assert_cmpuint(running, ==, 0);
    g_assert_false(host_load_parse_stat("cpu  1 2 3\n", &total, &idle,
                                        &running));
    g_assert_false(host_load_parse_stat("cpu0 1 2 3 4\n", &total, &idle,
                                        &running));
    g_assert_false(host_load_parse_stat("", &total, &idle, &running));
}

/* The real files of this machine parse (whatever their values). */
static void test_read_proc(void)
{
    int stat_fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    int psi_fd = open("/proc/pressure/cpu", O_RDONLY | O_CLOEXEC);
    HostLoadSample a, b;

    g_assert_cmpint(stat_fd, >=, 0);
    g_assert_true(host_load_read(psi_fd, stat_fd, &a));
    g_assert_true(host_load_read(psi_fd, stat_fd, &b));
    g_assert_cmpuint(a.online_cpus, >=, 1);
    g_assert_cmpuint(a.total_ticks, >, 0);
    g_assert_cmpuint(b.total_ticks, >=, a.total_ticks);
    g_assert_cmpuint(b.idle_ticks, >=, a.idle_ticks);
    g_assert_true(a.have_psi == (psi_fd >= 0));
    close(stat_fd);
    if (psi_fd >= 0) {
        close(psi_fd);
    }
}

/* ---- the loop obeys aio_set_host_busy() ---- */

typedef struct PollData {
    EventNotifier e;
    int polls, ready, reads, begins, ends;
} PollData;

static bool poll_fn(void *opaque)
{
    ((PollData *)opaque)->polls++;
    return false;
}

static void poll_ready_cb(void *opaque)
{
    ((PollData *)opaque)->ready++;
}

static void read_cb(void *opaque)
{
    PollData *d = opaque;

    d->reads++;
    event_notifier_test_and_clear(&d->e);
}

static void begin_cb(void *opaque)
{
    ((PollData *)opaque)->begins++;
}

static void end_cb(void *opaque)
{
    ((PollData *)opaque)->ends++;
}

static void test_loop_obeys_busy(void)
{
    GError *err = NULL;
    AioContext *ctx = aio_context_new(&err);
    PollData d = { 0 };
    AioContextStats st;
    int fd;

    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);
    g_assert_cmpint(event_notifier_init(&d.e, false), ==, 0);
    fd = event_notifier_get_fd(&d.e);
    aio_set_fd_handler(ctx, fd, read_cb, NULL, poll_fn, poll_ready_cb, &d);
    aio_set_fd_poll_notify(ctx, fd, begin_cb, end_cb);
    aio_context_set_poll_params(ctx, 1000000, 0, 0);

    /* Polling on: a non-blocking iteration looks at the handler once. */
    aio_poll(ctx, false);
    g_assert_cmpint(d.polls, ==, 1);

    /* Start a poll phase: a blocking iteration with a window; the event
     * arrives through epoll after the window (the poll never sees it). */
    event_notifier_set(&d.e);
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.reads, ==, 1);

    aio_set_host_busy(true);
    g_assert_true(aio_get_host_busy());
    d.polls = 0;
    event_notifier_set(&d.e);
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.reads, ==, 2);
    /* No polling at all, and any phase was closed (end_cb ran after each
     * begin_cb) so the handler takes notifications again. */
    g_assert_cmpint(d.ready, ==, 0);
    g_assert_cmpint(d.begins, ==, d.ends);
    d.polls = 0;
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(d.polls, ==, 0);
    aio_context_get_stats(ctx, &st);
    g_assert_cmpuint(st.poll_host_busy, >=, 2);
    g_assert_cmpuint(st.poll_driver_polls, ==, 0);

    /* A driver of this context polls: the context polls, busy or not. */
    aio_context_driver_polls_add(ctx, 1);
    aio_poll(ctx, false);
    g_assert_cmpint(d.polls, ==, 1);
    aio_context_get_stats(ctx, &st);
    g_assert_cmpuint(st.poll_driver_polls, ==, 1);
    g_assert_cmpuint(st.driver_polls, ==, 1);
    aio_context_driver_polls_add(ctx, -1);
    d.polls = 0;
    aio_poll(ctx, false);
    g_assert_cmpint(d.polls, ==, 0);
    aio_context_get_stats(ctx, &st);
    g_assert_cmpuint(st.driver_polls, ==, 0);

    /* Back to polling. */
    aio_set_host_busy(false);
    aio_poll(ctx, false);
    g_assert_cmpint(d.polls, ==, 1);

    aio_set_fd_handler(ctx, fd, NULL, NULL, NULL, NULL, NULL);
    event_notifier_cleanup(&d.e);
    aio_context_free(ctx);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/host-load/first-sample-primes", test_first_sample_primes);
    g_test_add_func("/host-load/pressure-makes-busy", test_pressure_makes_busy);
    g_test_add_func("/host-load/idle-cpu-never-busy",
                    test_idle_cpu_is_never_busy);
    g_test_add_func("/host-load/hysteresis", test_hysteresis);
    g_test_add_func("/host-load/own-cpu-counts-as-spare",
                    test_own_cpu_counts_as_spare);
    g_test_add_func("/host-load/interval-length", test_interval_length);
    g_test_add_func("/host-load/backwards-ignored", test_backwards_ignored);
    g_test_add_func("/host-load/no-psi-fallback", test_no_psi_fallback);
    g_test_add_func("/host-load/parse", test_parse);
    g_test_add_func("/host-load/read-proc", test_read_proc);
    g_test_add_func("/host-load/loop-obeys-busy", test_loop_obeys_busy);
    return g_test_run();
}
