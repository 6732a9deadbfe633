/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests for AioContext: bottom halves, fd handlers, polling, notify. */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "qemu/event_notifier.h"
#include "qemu/error-report.h"
#include "../../util/aio-internal.h"

static AioContext *ctx;

static void ctx_setup(void)
{
    GError *err = NULL;

    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    g_assert_nonnull(ctx);
    aio_context_acquire_thread(ctx);
}

static void ctx_teardown(void)
{
    aio_context_free(ctx);
    ctx = NULL;
}

/* Run non-blocking iterations until nothing happens any more. */
static void drain(void)
{
    int i;

    for (i = 0; i < 100 && aio_poll(ctx, false); i++) {
    }
}

static AioContextStats get_stats(void)
{
    AioContextStats st;

    aio_context_get_stats(ctx, &st);
    return st;
}

/* ---- bottom halves ---- */

typedef struct BHData {
    QEMUBH *bh;
    int runs;
    bool delete_self;
    int reschedule;     /* times the callback schedules itself again */
} BHData;

static void bh_cb(void *opaque)
{
    BHData *d = opaque;

    d->runs++;
    if (d->reschedule > 0) {
        d->reschedule--;
        qemu_bh_schedule(d->bh);
    }
    if (d->delete_self) {
        qemu_bh_delete(d->bh);
        d->bh = NULL;
    }
}

static void test_bh_schedule(void)
{
    BHData d = { 0 };

    ctx_setup();
    d.bh = aio_bh_new(ctx, bh_cb, &d, "test-bh");
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(d.runs, ==, 0);

    qemu_bh_schedule(d.bh);
    g_assert_true(qemu_bh_is_scheduled(d.bh));
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(d.runs, ==, 1);
    g_assert_false(qemu_bh_is_scheduled(d.bh));
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(d.runs, ==, 1);
    g_assert_cmpuint(get_stats().bh_runs, ==, 1);

    /* A callback may schedule its own BH again. */
    d.reschedule = 2;
    qemu_bh_schedule(d.bh);
    drain();
    g_assert_cmpint(d.runs, ==, 4);

    qemu_bh_delete(d.bh);
    ctx_teardown();
}

static void test_bh_schedule_twice(void)
{
    BHData d = { 0 };

    ctx_setup();
    d.bh = aio_bh_new(ctx, bh_cb, &d, "test-bh");
    qemu_bh_schedule(d.bh);
    qemu_bh_schedule(d.bh);
    qemu_bh_schedule(d.bh);
    drain();
    g_assert_cmpint(d.runs, ==, 1);
    qemu_bh_delete(d.bh);
    ctx_teardown();
}

static void test_bh_cancel(void)
{
    BHData d = { 0 };

    ctx_setup();
    d.bh = aio_bh_new(ctx, bh_cb, &d, "test-bh");
    qemu_bh_cancel(d.bh);               /* not scheduled: no-op */
    qemu_bh_schedule(d.bh);
    qemu_bh_cancel(d.bh);
    g_assert_false(qemu_bh_is_scheduled(d.bh));
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(d.runs, ==, 0);

    /* Scheduling again after a cancel works. */
    qemu_bh_schedule(d.bh);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(d.runs, ==, 1);
    qemu_bh_delete(d.bh);
    ctx_teardown();
}

static void test_bh_delete(void)
{
    BHData d = { 0 };

    ctx_setup();
    d.bh = aio_bh_new(ctx, bh_cb, &d, "test-bh");
    qemu_bh_schedule(d.bh);
    qemu_bh_delete(d.bh);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(d.runs, ==, 0);
    g_assert_cmpuint(get_stats().bh_runs, ==, 0);

    /* Deleted but not yet reaped at free time: freed silently. */
    d.bh = aio_bh_new(ctx, bh_cb, &d, "test-bh-2");
    qemu_bh_delete(d.bh);
    ctx_teardown();
}

static void test_bh_delete_from_callback(void)
{
    BHData d = { .delete_self = true };

    ctx_setup();
    d.bh = aio_bh_new(ctx, bh_cb, &d, "test-bh");
    qemu_bh_schedule(d.bh);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(d.runs, ==, 1);
    g_assert_null(d.bh);
    drain();
    g_assert_cmpint(d.runs, ==, 1);
    ctx_teardown();                     /* valgrind/ASan: nothing leaked */
}

static void oneshot_cb(void *opaque)
{
    int *runs = opaque;

    (*runs)++;
}

static void test_bh_oneshot(void)
{
    int runs = 0;

    ctx_setup();
    aio_bh_schedule_oneshot(ctx, oneshot_cb, &runs, "test-oneshot");
    aio_bh_schedule_oneshot(ctx, oneshot_cb, &runs, "test-oneshot");
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(runs, ==, 2);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(runs, ==, 2);
    ctx_teardown();
}

typedef struct ThreadBH {
    QEMUBH *bh;
    atomic_int runs;
    int times;
} ThreadBH;

static void thread_bh_cb(void *opaque)
{
    ThreadBH *t = opaque;

    atomic_fetch_add(&t->runs, 1);
}

static gpointer schedule_thread(gpointer opaque)
{
    ThreadBH *t = opaque;
    int i;

    for (i = 0; i < t->times; i++) {
        /* Wait for the previous run so each schedule is observable. */
        while (atomic_load(&t->runs) < i) {
            g_thread_yield();
        }
        qemu_bh_schedule(t->bh);
    }
    return NULL;
}

static void test_bh_schedule_from_thread(void)
{
    ThreadBH t = { .times = 200 };
    GThread *thread;

    ctx_setup();
    t.bh = aio_bh_new(ctx, thread_bh_cb, &t, "test-thread-bh");
    thread = g_thread_new("sched", schedule_thread, &t);
    /* Blocking polls: each schedule must wake us (or be seen before we
     * sleep); a lost wakeup hangs here and the test times out. */
    while (atomic_load(&t.runs) < t.times) {
        aio_poll(ctx, true);
    }
    g_thread_join(thread);
    drain();
    g_assert_cmpint(atomic_load(&t.runs), ==, t.times);
    qemu_bh_delete(t.bh);
    ctx_teardown();
}

static void test_bh_leak_reported(void)
{
    if (g_test_subprocess()) {
        BHData d = { 0 };

        log_set_program_name("test-aio");
        ctx_setup();
        d.bh = aio_bh_new(ctx, bh_cb, &d, "leaky-completion-bh");
        qemu_bh_schedule(d.bh);
        aio_bh_new(ctx, bh_cb, &d, "idle-leaky-bh");
        ctx_teardown();
        g_assert_cmpint(d.runs, ==, 0);
        return;
    }
    g_test_trap_subprocess(NULL, 0, 0);
    g_test_trap_assert_passed();
    g_test_trap_assert_stderr("*warning*bottom half 'leaky-completion-bh'*");
    g_test_trap_assert_stderr("*bottom half 'idle-leaky-bh'*");
}

/* ---- fd handlers ---- */

typedef struct FdData {
    EventNotifier e;
    int reads;
    int writes;
    bool remove_self;
    struct FdData *remove_other;
} FdData;

static void fd_read_cb(void *opaque)
{
    FdData *d = opaque;

    d->reads++;
    event_notifier_test_and_clear(&d->e);
    if (d->remove_other) {
        aio_set_fd_handler(ctx, event_notifier_get_fd(&d->remove_other->e),
                           NULL, NULL, NULL, NULL, NULL);
    }
    if (d->remove_self) {
        aio_set_fd_handler(ctx, event_notifier_get_fd(&d->e),
                           NULL, NULL, NULL, NULL, NULL);
    }
}

static void fd_write_cb(void *opaque)
{
    FdData *d = opaque;

    d->writes++;
    if (d->remove_self) {
        aio_set_fd_handler(ctx, event_notifier_get_fd(&d->e),
                           NULL, NULL, NULL, NULL, NULL);
    }
}

static void test_fd_read(void)
{
    FdData d = { 0 };
    int fd;

    ctx_setup();
    g_assert_cmpint(event_notifier_init(&d.e, false), ==, 0);
    fd = event_notifier_get_fd(&d.e);
    aio_set_fd_handler(ctx, fd, fd_read_cb, NULL, NULL, NULL, &d);

    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(d.reads, ==, 0);

    g_assert_cmpint(event_notifier_set(&d.e), ==, 0);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(d.reads, ==, 1);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(d.reads, ==, 1);

    /* Blocking poll returns because the fd is ready. */
    event_notifier_set(&d.e);
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.reads, ==, 2);

    /* Removed: no more calls. */
    aio_set_fd_handler(ctx, fd, NULL, NULL, NULL, NULL, NULL);
    event_notifier_set(&d.e);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(d.reads, ==, 2);

    event_notifier_cleanup(&d.e);
    ctx_teardown();
}

/* ---- the owner scheduling from inside its own loop ---- */

typedef struct SelfData {
    EventNotifier e;
    QEMUBH *bh;
    int reads;
    int bh_runs;
    int chain;          /* times the BH schedules itself again */
    bool in_own_poll;   /* aio_in_own_poll() as the handler saw it */
} SelfData;

static void self_bh_cb(void *opaque)
{
    SelfData *d = opaque;

    d->bh_runs++;
    if (d->chain > 0) {
        d->chain--;
        qemu_bh_schedule(d->bh);
    }
}

static void self_read_cb(void *opaque)
{
    SelfData *d = opaque;

    d->reads++;
    d->in_own_poll = aio_in_own_poll(ctx);
    event_notifier_test_and_clear(&d->e);
    qemu_bh_schedule(d->bh);
}

/*
 * A request's completion BH scheduled by the loop's own handler used to
 * leave ctx->notified set, so the next blocking iteration did an
 * epoll_wait(0) for nothing before it slept: one syscall and one
 * iteration per request at a fixed rate.  The BH must still run, and a
 * BH that a BH schedules must keep the next poll from sleeping.
 */
static void test_bh_from_own_loop(void)
{
    SelfData d = { 0 };
    int fd;

    ctx_setup();
    g_assert_cmpint(event_notifier_init(&d.e, false), ==, 0);
    fd = event_notifier_get_fd(&d.e);
    d.bh = aio_bh_new(ctx, self_bh_cb, &d, "test-self");
    aio_set_fd_handler(ctx, fd, self_read_cb, NULL, NULL, NULL, &d);
    g_assert_false(aio_in_own_poll(ctx));

    event_notifier_set(&d.e);
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.reads, ==, 1);
    g_assert_true(d.in_own_poll);
    g_assert_cmpint(d.bh_runs, ==, 1);      /* in the same iteration */
    g_assert_false(aio_in_own_poll(ctx));
    /* Nothing left that the next iteration must look at. */
    g_assert_false(atomic_load(&ctx->notified));
    g_assert_false(aio_bh_pending(ctx));
    g_assert_cmpuint(get_stats().notify_writes, ==, 0);

    /* A BH that schedules itself: the next blocking poll runs it at once
     * (it would hang if the schedule were lost). */
    d.chain = 2;
    event_notifier_set(&d.e);
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.bh_runs, ==, 2);
    g_assert_true(aio_bh_pending(ctx));
    /* Runs it at the start, and once more at the end (it scheduled
     * itself again in between). */
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.bh_runs, ==, 4);
    g_assert_false(aio_bh_pending(ctx));
    g_assert_false(atomic_load(&ctx->notified));

    /* Outside aio_poll() the owner still notifies: the next poll must not
     * sleep on it. */
    qemu_bh_schedule(d.bh);
    g_assert_true(atomic_load(&ctx->notified));
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.bh_runs, ==, 5);

    aio_set_fd_handler(ctx, fd, NULL, NULL, NULL, NULL, NULL);
    qemu_bh_delete(d.bh);
    event_notifier_cleanup(&d.e);
    ctx_teardown();
}

static void test_fd_write(void)
{
    FdData d = { 0 };

    ctx_setup();
    /* An eventfd with a small counter is always writable. */
    g_assert_cmpint(event_notifier_init(&d.e, false), ==, 0);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), NULL, fd_write_cb,
                       NULL, NULL, &d);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(d.writes, ==, 1);
    g_assert_cmpint(d.reads, ==, 0);

    d.remove_self = true;
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(d.writes, ==, 2);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(d.writes, ==, 2);

    event_notifier_cleanup(&d.e);
    ctx_teardown();
}

static void test_fd_remove_in_handler(void)
{
    FdData a = { 0 }, b = { 0 };

    ctx_setup();
    g_assert_cmpint(event_notifier_init(&a.e, true), ==, 0);
    g_assert_cmpint(event_notifier_init(&b.e, true), ==, 0);
    /* Each removes itself and the other; both fds are ready in the same
     * epoll_wait(), so the second must be skipped, not used after free. */
    a.remove_self = b.remove_self = true;
    a.remove_other = &b;
    b.remove_other = &a;
    aio_set_fd_handler(ctx, event_notifier_get_fd(&a.e), fd_read_cb, NULL,
                       NULL, NULL, &a);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&b.e), fd_read_cb, NULL,
                       NULL, NULL, &b);
    g_assert_true(aio_poll(ctx, false));
    g_assert_cmpint(a.reads + b.reads, ==, 1);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(a.reads + b.reads, ==, 1);

    /* Re-registering an fd removed earlier works. */
    event_notifier_set(&a.e);
    a.remove_self = false;
    a.remove_other = NULL;
    aio_set_fd_handler(ctx, event_notifier_get_fd(&a.e), fd_read_cb, NULL,
                       NULL, NULL, &a);
    g_assert_true(aio_poll(ctx, false));
    aio_set_fd_handler(ctx, event_notifier_get_fd(&a.e), NULL, NULL, NULL,
                       NULL, NULL);

    event_notifier_cleanup(&a.e);
    event_notifier_cleanup(&b.e);
    ctx_teardown();
}

/* ---- polling ---- */

typedef struct PollData {
    EventNotifier e;
    int polls;
    int ready;
    int reads;
    int begins;
    int ends;
    bool has_work;
} PollData;

static bool poll_fn(void *opaque)
{
    PollData *d = opaque;

    d->polls++;
    return d->has_work;
}

static void poll_ready_cb(void *opaque)
{
    PollData *d = opaque;

    d->ready++;
}

static void poll_read_cb(void *opaque)
{
    PollData *d = opaque;

    d->reads++;
    event_notifier_test_and_clear(&d->e);
}

static void test_poll_without_epoll(void)
{
    PollData d = { .has_work = true };
    AioContextStats before, after;

    ctx_setup();
    g_assert_cmpint(event_notifier_init(&d.e, false), ==, 0);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), poll_read_cb, NULL,
                       poll_fn, poll_ready_cb, &d);
    aio_context_set_poll_params(ctx, 1000000, 0, 0);

    before = get_stats();
    g_assert_true(aio_poll(ctx, false));
    g_assert_true(aio_poll(ctx, true));
    after = get_stats();
    g_assert_cmpuint(after.poll_hits, ==, before.poll_hits + 2);
    g_assert_cmpint(d.ready, ==, 2);
    g_assert_cmpint(d.reads, ==, 0);
    /* Every handler is pollable and polling found work: no syscall. */
    g_assert_cmpuint(after.epoll_waits, ==, before.epoll_waits);

    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), NULL, NULL, NULL,
                       NULL, NULL);
    event_notifier_cleanup(&d.e);
    ctx_teardown();
}

static void test_poll_disabled(void)
{
    PollData d = { .has_work = true };

    ctx_setup();
    g_assert_cmpint(event_notifier_init(&d.e, false), ==, 0);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), poll_read_cb, NULL,
                       poll_fn, poll_ready_cb, &d);
    aio_context_set_poll_params(ctx, 0, 0, 0);

    g_assert_false(aio_poll(ctx, false));
    event_notifier_set(&d.e);
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.reads, ==, 1);
    g_assert_cmpint(d.polls, ==, 0);
    g_assert_cmpint(d.ready, ==, 0);
    g_assert_cmpuint(get_stats().poll_hits, ==, 0);
    g_assert_cmpuint(get_stats().epoll_waits, ==, 2);

    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), NULL, NULL, NULL,
                       NULL, NULL);
    event_notifier_cleanup(&d.e);
    ctx_teardown();
}

/* The window grows from 4us, doubling, up to poll-max-ns, while events
 * arrive right after it (here: the fd is ready when epoll_wait() runs). */
static void test_poll_window_grows(void)
{
    PollData d = { .has_work = false };
    int64_t expect[] = { 4000, 8000, 16000, 32000, 64000 };
    unsigned i;

    ctx_setup();
    g_assert_cmpint(event_notifier_init(&d.e, false), ==, 0);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), poll_read_cb, NULL,
                       poll_fn, poll_ready_cb, &d);
    /* Far above any window reached here (1 s), so each short wait grows
     * it even on a loaded machine or under valgrind. */
    aio_context_set_poll_params(ctx, 1000 * 1000 * 1000, 0, 0);
    g_assert_cmpint(get_stats().poll_ns, ==, 0);

    for (i = 0; i < ARRAY_SIZE(expect); i++) {
        event_notifier_set(&d.e);
        g_assert_true(aio_poll(ctx, true));
        g_assert_cmpint(get_stats().poll_ns, ==, expect[i]);
    }
    g_assert_cmpint(d.reads, ==, (int)ARRAY_SIZE(expect));
    g_assert_cmpint(d.ready, ==, 0);
    g_assert_cmpint(d.polls, >=, (int)ARRAY_SIZE(expect));

    /* Lowering the limit clamps the window. */
    aio_context_set_poll_params(ctx, 5000, 0, 0);
    g_assert_cmpint(get_stats().poll_ns, ==, 5000);

    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), NULL, NULL, NULL,
                       NULL, NULL);
    event_notifier_cleanup(&d.e);
    ctx_teardown();
}

static void poll_begin_cb(void *opaque)
{
    PollData *d = opaque;

    g_assert_cmpint(d->begins, ==, d->ends);
    d->begins++;
}

static void poll_end_cb(void *opaque)
{
    PollData *d = opaque;

    d->ends++;
    g_assert_cmpint(d->begins, ==, d->ends);
}

/* io_poll_begin runs when a blocking iteration polls with a non-zero
 * window, the phase lasts while polling finds work, and io_poll_end runs
 * (followed by one more io_poll) before the loop sleeps. */
static void test_poll_begin_end(void)
{
    PollData d = { .has_work = false };
    int polls;

    ctx_setup();
    g_assert_cmpint(event_notifier_init(&d.e, false), ==, 0);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), poll_read_cb, NULL,
                       poll_fn, poll_ready_cb, &d);
    aio_set_fd_poll_notify(ctx, event_notifier_get_fd(&d.e), poll_begin_cb,
                           poll_end_cb);
    aio_context_set_poll_params(ctx, 1000 * 1000 * 1000, 0, 0);

    /* Window 0: no phase; the wait grows the window to 4 us. */
    event_notifier_set(&d.e);
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.begins, ==, 0);
    g_assert_cmpint(get_stats().poll_ns, ==, 4000);

    /* Polling finds work: the phase starts and survives the iteration. */
    d.has_work = true;
    g_assert_true(aio_poll(ctx, true));
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.begins, ==, 1);
    g_assert_cmpint(d.ends, ==, 0);
    g_assert_cmpint(d.ready, ==, 2);

    /* Nothing to poll: the phase ends before the loop sleeps, and io_poll
     * is checked once more after io_poll_end. */
    d.has_work = false;
    event_notifier_set(&d.e);
    polls = d.polls;
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.ends, ==, 1);
    g_assert_cmpint(d.reads, ==, 2);
    g_assert_cmpint(d.polls, >=, polls + 2);

    /* Re-registering keeps the callbacks; removing drops them. */
    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), poll_read_cb, NULL,
                       poll_fn, poll_ready_cb, &d);
    d.has_work = true;
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(d.begins, ==, 2);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), NULL, NULL, NULL,
                       NULL, NULL);
    g_assert_cmpint(d.ends, ==, 1);
    event_notifier_cleanup(&d.e);
    ctx_teardown();
}

static gpointer late_set_thread(gpointer opaque)
{
    PollData *d = opaque;

    g_usleep(50 * 1000);
    event_notifier_set(&d->e);
    return NULL;
}

/*
 * The window policy on synthetic sequences (no clock).  feed() plays
 * events that arrive @gap_ns after the loop starts to wait: a window that
 * long or longer catches it (spent = gap); a shorter one spins to its end
 * and the loop sleeps, the wake-up adding @wake_ns to the wait.  Returns
 * the time spent polling in all.
 */
static const AioPollParams test_pp = {
    .max_ns = 32000, .grow = 2, .shrink = 2, .block_ns = 10000,
};

static int64_t feed(AioPollWindow *w, int n, int64_t gap_ns, int64_t wake_ns)
{
    int64_t spent_all = 0;

    for (int i = 0; i < n; i++) {
        bool hit = w->ns >= gap_ns;
        int64_t spent = hit ? gap_ns : w->ns;

        spent_all += spent;
        aio_poll_window_next(w, &test_pp, spent, hit ? gap_ns
                                                      : gap_ns + wake_ns,
                             hit);
    }
    return spent_all;
}

/* Requests 50 us apart (20k IOPS, sleeping client): no window up to
 * poll-max-ns catches one, so the window must not stay at the maximum
 * (the policy before this one kept it there for any wait under 4 x
 * poll-max-ns, spinning 32 us of every 50).  The probes that follow cost
 * little: under 1 us per request averaged over 10000. */
static void test_poll_window_steady_50us(void)
{
    AioPollWindow w = { .ns = test_pp.max_ns };
    int64_t spent;

    feed(&w, AIO_POLL_CREDIT_FACTOR, 50000, 20000);
    g_assert_cmpint(w.ns, ==, 0);
    spent = feed(&w, 10000, 50000, 20000);
    g_assert_cmpint(spent / 10000, <, 1000);
    /* The same with a fast wake-up (wait 51 us): no difference. */
    w = (AioPollWindow) { .ns = test_pp.max_ns };
    spent = feed(&w, 10000, 50000, 1000);
    g_assert_cmpint(spent / 10000, <, 1000);
}

/*
 * Events the first look finds (spent 0: the peer answered before the loop
 * came back to look).  They cost and save nothing: with a request 50 us
 * after each of them the window still closes and polling costs under
 * 1 us per request.  A closed window reopens on one (a driver that fast
 * need not kick while we poll), and a peer that is always that fast keeps
 * it open for free.  (The loop does not feed the policy its own
 * notifications found that way: at 20k IOPS every request is followed by
 * the null engine's, and counted as a saved sleep they kept the window
 * at 8-16 us.)
 */
static void test_poll_window_first_look(void)
{
    AioPollWindow w = { .ns = test_pp.max_ns };
    int64_t spent = 0;

    for (int i = 0; i < 10000; i++) {
        spent += feed(&w, 1, 50000, 20000);
        aio_poll_window_next(&w, &test_pp, 0, 600, true);
    }
    g_assert_cmpint(spent / 10000, <, 1000);

    w = (AioPollWindow) { 0 };
    aio_poll_window_next(&w, &test_pp, 0, 600, true);
    g_assert_cmpint(w.ns, ==, AIO_POLL_NS_START);
    for (int i = 0; i < 10000; i++) {
        aio_poll_window_next(&w, &test_pp, 0, 600, true);
        g_assert_cmpint(w.ns, ==, AIO_POLL_NS_START);
    }
    g_assert_cmpint(w.credit_ns, ==, 0);
}

/* Back-to-back requests (each within 2 us): every one is caught for 2 us
 * of spinning against the 10 us a sleep costs; the window stays, from the
 * maximum or from a first probe. */
static void test_poll_window_back_to_back(void)
{
    AioPollWindow w = { .ns = test_pp.max_ns };

    for (int i = 0; i < 10000; i++) {
        feed(&w, 1, 2000, 20000);
        g_assert_cmpint(w.ns, ==, test_pp.max_ns);
    }
    g_assert_cmpint(w.credit_ns, ==,
                    test_pp.max_ns * AIO_POLL_CREDIT_FACTOR);

    w = (AioPollWindow) { 0 };
    feed(&w, 1, 2000, 20000);       /* slept; near: probe */
    g_assert_cmpint(w.ns, ==, AIO_POLL_NS_START);
    for (int i = 0; i < 10000; i++) {
        feed(&w, 1, 2000, 20000);
        g_assert_cmpint(w.ns, ==, AIO_POLL_NS_START);
    }
}

/* Busy, then idle (waits of 1 s): polling stops after a bounded loss;
 * then a burst of requests 6 us apart makes it poll again, growing the
 * window to one that catches them. */
static void test_poll_window_burst_after_idle(void)
{
    AioPollWindow w = { .ns = test_pp.max_ns };
    int64_t spent;

    feed(&w, 100, 1000, 20000);
    g_assert_cmpint(w.ns, ==, test_pp.max_ns);
    spent = feed(&w, 100, 1000000000, 20000);
    g_assert_cmpint(w.ns, ==, 0);
    /* The loss: the credit banked, then a full limit at the window and
     * one at half of it. */
    g_assert_cmpint(spent, <=, 3 * test_pp.max_ns * AIO_POLL_CREDIT_FACTOR);
    /* Far waits never probe. */
    feed(&w, 1000, 1000000000, 20000);
    g_assert_cmpint(w.ns, ==, 0);

    feed(&w, 1, 6000, 20000);
    g_assert_cmpint(w.ns, ==, AIO_POLL_NS_START);
    feed(&w, 1, 6000, 20000);       /* 4 us misses 6 us, near: grow */
    g_assert_cmpint(w.ns, ==, 2 * AIO_POLL_NS_START);
    for (int i = 0; i < 10000; i++) {
        feed(&w, 1, 6000, 20000);
        g_assert_cmpint(w.ns, ==, 2 * AIO_POLL_NS_START);
    }
}

/* Hits that cost more than a sleep do not pay: requests caught after
 * 20 us of spinning (> block_ns) shrink the window until it no longer
 * spins for them; a mix where most requests come at once and some late
 * keeps a window that pays. */
static void test_poll_window_hits_must_pay(void)
{
    AioPollWindow w = { .ns = test_pp.max_ns };
    int64_t spent;

    spent = feed(&w, 10000, 20000, 20000);
    g_assert_cmpint(w.ns, <, 20000);
    g_assert_cmpint(spent / 10000, <, 1000);

    w = (AioPollWindow) { .ns = test_pp.max_ns };
    for (int i = 0; i < 1000; i++) {
        feed(&w, 3, 1000, 20000);
        feed(&w, 1, 300000, 20000);
    }
    g_assert_cmpint(w.ns, >=, AIO_POLL_NS_START);
}

/* A probe that fails waits twice as long as the last before the next;
 * the wait is forgotten once polling pays again. */
static void test_poll_window_probe_backoff(void)
{
    AioPollWindow w = { 0 };
    unsigned probes = 0;

    for (int i = 0; i < 100000; i++) {
        bool was_off = w.ns == 0;

        feed(&w, 1, 50000, 20000);
        probes += was_off && w.ns != 0;
    }
    /* 1, 2, 4, ... near waits between probes, then one probe per
     * AIO_POLL_PROBE_BACKOFF_MAX of them */
    g_assert_cmpuint(probes, <=, 14 + 100000 / AIO_POLL_PROBE_BACKOFF_MAX);
    g_assert_cmpuint(w.probe_backoff, ==, AIO_POLL_PROBE_BACKOFF_MAX);
    while (w.ns == 0) {
        feed(&w, 1, 1000, 20000);
    }
    feed(&w, 100, 1000, 20000);
    g_assert_cmpuint(w.probe_backoff, ==, 0);
}

/* A limit of 0 never polls; a limit below the probe's start is kept. */
static void test_poll_window_limits(void)
{
    AioPollWindow w = { 0 };
    AioPollParams p = test_pp;

    p.max_ns = 0;
    aio_poll_window_next(&w, &p, 0, 0, false);
    g_assert_cmpint(w.ns, ==, 0);
    p.max_ns = 1000;
    aio_poll_window_next(&w, &p, 0, 500, false);
    g_assert_cmpint(w.ns, ==, 1000);
    aio_poll_window_next(&w, &p, 1000, 1500, false);
    g_assert_cmpint(w.ns, ==, 1000);
}

/* In the loop, on the real clock: an idle queue (events 50 ms apart, far
 * past 4 x poll-max-ns) stops polling after AIO_POLL_CREDIT_FACTOR such
 * waits at most. */
static void test_poll_window_shrinks(void)
{
    PollData d = { .has_work = false };
    GThread *thread;
    int64_t before;
    int i;

    ctx_setup();
    g_assert_cmpint(event_notifier_init(&d.e, false), ==, 0);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), poll_read_cb, NULL,
                       poll_fn, poll_ready_cb, &d);
    aio_context_set_poll_params(ctx, 32000, 0, 0);
    for (i = 0; i < 100000 && get_stats().poll_ns < 32000; i++) {
        event_notifier_set(&d.e);
        aio_poll(ctx, true);
    }
    g_assert_cmpint(get_stats().poll_ns, ==, 32000);
    before = get_stats().poll_ns;

    for (i = 0; i < AIO_POLL_CREDIT_FACTOR && get_stats().poll_ns; i++) {
        d.reads = 0;
        thread = g_thread_new("late", late_set_thread, &d);
        while (d.reads == 0) {
            aio_poll(ctx, true);
        }
        g_thread_join(thread);
    }
    g_assert_cmpint(get_stats().poll_ns, <, before);

    aio_set_fd_handler(ctx, event_notifier_get_fd(&d.e), NULL, NULL, NULL,
                       NULL, NULL);
    event_notifier_cleanup(&d.e);
    ctx_teardown();
}

/* ---- notify ---- */

static void notify_from_bh(void *opaque)
{
    aio_notify(opaque);
}

static void test_notify_skips_write(void)
{
    ctx_setup();
    /* The owner is running (not in epoll_wait): no eventfd write. */
    aio_notify(ctx);
    aio_notify(ctx);
    g_assert_cmpuint(get_stats().notify_writes, ==, 0);
    /* A pending notification makes the next poll return at once. */
    g_assert_false(aio_poll(ctx, true));

    /* Scheduling from the owner thread does not write either. */
    aio_bh_schedule_oneshot(ctx, notify_from_bh, ctx, "test-notify");
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpuint(get_stats().notify_writes, ==, 0);
    ctx_teardown();
}

/* ---- context ---- */

static int engine_cleanups;

static void engine_cleanup(void *state)
{
    g_assert_cmpint(GPOINTER_TO_INT(state), ==, 42);
    engine_cleanups++;
}

static AioLocalKey test_key_a, test_key_b;

static void test_context_engine(void)
{
    ctx_setup();
    g_assert_true(qemu_get_current_aio_context() == ctx);
    g_assert_null(aio_local_get(ctx, &test_key_a));
    aio_local_set(ctx, &test_key_a, GINT_TO_POINTER(42), engine_cleanup);
    g_assert_true(aio_local_get(ctx, &test_key_a) == GINT_TO_POINTER(42));
    /* A second key gets its own slot: the first value stays. */
    g_assert_null(aio_local_get(ctx, &test_key_b));
    aio_local_set(ctx, &test_key_b, GINT_TO_POINTER(42), engine_cleanup);
    g_assert_cmpint(atomic_load(&test_key_a.index), !=,
                    atomic_load(&test_key_b.index));
    g_assert_true(aio_local_get(ctx, &test_key_a) == GINT_TO_POINTER(42));
    ctx_teardown();
    g_assert_cmpint(engine_cleanups, ==, 2);
    g_assert_null(qemu_get_current_aio_context());
}

static void nested_poll_bh(void *opaque)
{
    aio_poll(opaque, false);
}

static void test_poll_nested_asserts(void)
{
    if (g_test_subprocess()) {
        ctx_setup();
        aio_bh_schedule_oneshot(ctx, nested_poll_bh, ctx, "nested");
        aio_poll(ctx, false);
        return;
    }
    g_test_trap_subprocess(NULL, 0, 0);
    g_test_trap_assert_failed();
}

/* ---- edge-triggered handlers ---- */

static int edge_reads;

static void edge_read_cb(void *opaque)
{
    edge_reads++;               /* deliberately does not read the fd */
}

/* An edge-triggered eventfd handler runs once per write, never drains. */
static void test_fd_edge_triggered(void)
{
    EventNotifier e;
    int fd;

    ctx_setup();
    g_assert_cmpint(event_notifier_init(&e, false), ==, 0);
    fd = event_notifier_get_fd(&e);
    g_assert_false(aio_set_fd_edge_triggered(ctx, fd));   /* no handler */
    aio_set_fd_handler(ctx, fd, edge_read_cb, NULL, NULL, NULL, NULL);
    g_assert_true(aio_set_fd_edge_triggered(ctx, fd));
    edge_reads = 0;

    event_notifier_set(&e);
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(edge_reads, ==, 1);
    /* Still readable (never read), but no new edge: nothing runs. */
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(edge_reads, ==, 1);
    /* Each new write is one more event, whatever the counter holds. */
    event_notifier_set(&e);
    g_assert_true(aio_poll(ctx, true));
    g_assert_cmpint(edge_reads, ==, 2);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(edge_reads, ==, 2);

    /* Re-registering keeps the handler edge-triggered. */
    aio_set_fd_handler(ctx, fd, edge_read_cb, NULL, NULL, NULL, NULL);
    g_assert_false(aio_poll(ctx, false));
    g_assert_cmpint(edge_reads, ==, 2);

    aio_set_fd_handler(ctx, fd, NULL, NULL, NULL, NULL, NULL);
    event_notifier_cleanup(&e);
    ctx_teardown();
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/aio/bh/schedule", test_bh_schedule);
    g_test_add_func("/aio/fd/edge-triggered", test_fd_edge_triggered);
    g_test_add_func("/aio/bh/schedule-twice-runs-once", test_bh_schedule_twice);
    g_test_add_func("/aio/bh/cancel", test_bh_cancel);
    g_test_add_func("/aio/bh/delete", test_bh_delete);
    g_test_add_func("/aio/bh/delete-from-callback",
                    test_bh_delete_from_callback);
    g_test_add_func("/aio/bh/oneshot", test_bh_oneshot);
    g_test_add_func("/aio/bh/schedule-from-thread",
                    test_bh_schedule_from_thread);
    g_test_add_func("/aio/bh/leak-reported", test_bh_leak_reported);
    g_test_add_func("/aio/fd/read", test_fd_read);
    g_test_add_func("/aio/fd/write", test_fd_write);
    g_test_add_func("/aio/bh/from-own-loop", test_bh_from_own_loop);
    g_test_add_func("/aio/fd/remove-in-handler", test_fd_remove_in_handler);
    g_test_add_func("/aio/poll/handler-called-without-epoll",
                    test_poll_without_epoll);
    g_test_add_func("/aio/poll/disabled", test_poll_disabled);
    g_test_add_func("/aio/poll/window-grows", test_poll_window_grows);
    g_test_add_func("/aio/poll/window-shrinks", test_poll_window_shrinks);
    g_test_add_func("/aio/poll/window-steady-50us",
                    test_poll_window_steady_50us);
    g_test_add_func("/aio/poll/window-first-look",
                    test_poll_window_first_look);
    g_test_add_func("/aio/poll/window-back-to-back",
                    test_poll_window_back_to_back);
    g_test_add_func("/aio/poll/window-burst-after-idle",
                    test_poll_window_burst_after_idle);
    g_test_add_func("/aio/poll/window-hits-must-pay",
                    test_poll_window_hits_must_pay);
    g_test_add_func("/aio/poll/window-probe-backoff",
                    test_poll_window_probe_backoff);
    g_test_add_func("/aio/poll/window-limits", test_poll_window_limits);
    g_test_add_func("/aio/poll/begin-end", test_poll_begin_end);
    g_test_add_func("/aio/notify/skips-write-when-running",
                    test_notify_skips_write);
    g_test_add_func("/aio/context/engine-cleanup", test_context_engine);
#ifndef NDEBUG
    g_test_add_func("/aio/poll/nested-asserts", test_poll_nested_asserts);
#endif
    return g_test_run();
}
