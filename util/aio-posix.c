/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The epoll side of AioContext: fd handlers, adaptive busy polling and
 * aio_poll().
 *
 * Theory of operation.  One iteration of aio_poll() is:
 *   1. run scheduled bottom halves;
 *   2. if polling is enabled (poll_max_ns > 0), call every handler's
 *      io_poll() at least once and, when blocking, keep calling them until
 *      one has work or the current window (poll_ns) is over; no syscalls;
 *   3. unless polling found work and every handler can be polled, announce
 *      that we may sleep (notify_me), re-check for news and epoll_wait();
 *   4. run the ready fd handlers, then the bottom halves they (or other
 *      threads) scheduled;
 *   5. adapt the window (aio_poll_window_next(), "The poll window" below).
 * Poll phases: when a blocking iteration starts polling with a non-zero
 * window, the handlers' io_poll_begin() runs (they may turn notifications
 * off: polling will see the work); the phase lasts while the loop keeps
 * finding work without sleeping.  Before sleeping, io_poll_end() runs and
 * every io_poll() is checked once more, so nothing that arrived while
 * notifications were off is slept on.
 * Handlers removed while the list is walked are only marked deleted and
 * freed once nobody walks it, so a handler may remove itself or others.
 * The context's own eventfd is an internal handler whose io_poll() looks at
 * ctx->notified, so aio_notify() also ends a poll window without a syscall.
 * Busy host: while aio_set_host_busy(true) is in force (the daemon's main
 * thread found no idle CPU, see host-load.h), no context polls: each
 * iteration behaves as with poll_max_ns 0 (a running poll phase ends and
 * notifications go back on), and polling resumes where its window was.
 * Except where a driver polls (aio_context_driver_polls_add()): its CPU
 * spins waiting on us whatever we do, so sleeping would free nothing and
 * cost it a wake-up per request.
 *
 * The poll window: spin, then block, and spin only as long as it pays.
 * Polling until an event costs the CPU time spun; sleeping costs a block
 * and wake-up cycle (the epoll_wait() that sleeps, the wake-up, the
 * peer's kick: B, AioPollParams.block_ns, AIO_POLL_BLOCK_NS by default).
 * The classic rule of spin-then-block follows: spinning longer than B
 * for an event cannot pay, and a window only pays while the events it
 * catches save (B each) at least what it spins in all, misses included
 * (a miss spins the whole window and then pays B anyway).  So the loop
 * keeps an account per context, the credit: each blocking iteration that
 * polled adds B - spent when polling caught its event (a hit) and
 * subtracts spent when it did not, and the credit is kept within
 * +-AIO_POLL_CREDIT_FACTOR x poll-max-ns (so it reacts within a bounded
 * loss however long polling paid before):
 *   - the credit reaches -limit: polling spent a full limit more than it
 *     saved.  The window shrinks (/ shrink; to 0 at once if nothing hit
 *     since the account last started, since then no window catches
 *     anything) and the account starts again from 0.  At 50 us between
 *     requests a 32 us window spins 32 us per request for nothing, and
 *     goes to 0 after four requests;
 *   - a miss whose event still came soon (within AIO_POLL_NEAR_FACTOR x
 *     poll-max-ns: a wait that ended in a kick includes our own wake-up,
 *     so a peer that answers within the window looks slower than it is)
 *     grows the window (x grow, up to poll-max-ns) while the credit is
 *     above -limit / 2, i.e. while the hits so far pay for the try, and
 *     only below the last window that lost with hits (the ceiling: its
 *     hits cost more than they saved, growing back to it would lose
 *     again), until polling pays (the credit reaches +limit);
 *   - back-to-back events (hits within a few us) add nearly B each: the
 *     window stays;
 *   - an event the first look finds (spent 0, the peer answered before
 *     we came back to look) was there before any spinning and
 *     epoll_wait() would not have slept for it: it neither costs nor
 *     saves, but counts as a hit for the shrink (the window serves such
 *     a peer: while it is open the peer need not kick).  A
 *     notification found that way that is not the peer's (a bottom half
 *     scheduled from outside the loop) says nothing about the peer and
 *     is not fed to the policy at all; counting it as a saved sleep kept
 *     the window open under a steady request rate where spinning caught
 *     nothing (docs/benchmarks.md, "Polling must pay for itself").  The
 *     loop's own bottom halves (e.g. the null engine's completions)
 *     notify nothing: see aio_in_own_poll().
 * A window of 0 spends and saves nothing, so the account cannot move;
 * what restarts polling is a probe: after a near wait (or a first-look
 * hit: a peer that answers that fast need not kick while we poll), the
 * window starts again at AIO_POLL_NS_START (a burst after idle grows it
 * back as above).
 * A probe that fails (the window comes back to 0 without hits) costs at
 * most about limit + poll-max-ns, and the next probe waits for twice as
 * many near waits as the last (up to AIO_POLL_PROBE_BACKOFF_MAX); the
 * wait is forgotten once the credit reaches +limit (polling pays).  An
 * idle queue stops polling after at most limit of spinning.
 * Per iteration the policy costs a few additions on times the loop reads
 * anyway (the clock before and after the window, at the end): no syscall.
 */
#include "qemu/osdep.h"
#include <sys/epoll.h>
#include <time.h>
#include "qemu/aio.h"
#include "qemu/error-report.h"
#include "aio-internal.h"

#define AIO_MAX_EVENTS 64

/* Set by one thread (the sampler), read by every loop: no ordering needed,
 * a loop sees the change on one of its next iterations. */
static atomic_bool aio_host_busy;

void aio_set_host_busy(bool busy)
{
    atomic_store_explicit(&aio_host_busy, busy, memory_order_relaxed);
}

bool aio_get_host_busy(void)
{
    return atomic_load_explicit(&aio_host_busy, memory_order_relaxed);
}

void aio_context_driver_polls_add(AioContext *ctx, int delta)
{
    unsigned n = atomic_load_explicit(&ctx->driver_polls,
                                      memory_order_relaxed);

    assert(delta > 0 || n > 0);
    atomic_store_explicit(&ctx->driver_polls, n + delta,
                          memory_order_relaxed);
}

/* The context whose aio_poll() this thread is in (see aio_in_own_poll()). */
static __thread AioContext *aio_polling_ctx;

/*
 * Any thread.  True means the caller runs the loop and will look at
 * bh_pending before it sleeps again.  Not so for a signal handler that
 * runs on this thread between that look and epoll_wait(): a bottom half
 * it scheduled without a notification would wait for the next event.
 * No handler here schedules one (the daemon takes its signals through a
 * signalfd; the SIGBUS and SIGSYS handlers touch no context); one that
 * must, calls aio_notify() itself.
 */
bool aio_in_own_poll(AioContext *ctx)
{
    return aio_polling_ctx == ctx;
}

static int64_t aio_clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint32_t aio_handler_events(const AioHandler *h)
{
    return (h->io_read ? EPOLLIN : 0) | (h->io_write ? EPOLLOUT : 0) |
           (h->edge ? EPOLLET : 0);
}

static AioHandler *aio_find_handler(AioContext *ctx, int fd)
{
    AioHandler *h;

    QLIST_FOREACH(h, &ctx->handlers, node) {
        if (h->fd == fd && !h->deleted) {
            return h;
        }
    }
    return NULL;
}

static void aio_handler_count(AioContext *ctx, const AioHandler *h, int sign)
{
    if (h->io_poll) {
        ctx->poll_handler_cnt += sign;
    } else {
        ctx->poll_disable_cnt += sign;
    }
}

static void aio_remove_handler(AioContext *ctx, AioHandler *h)
{
    if (epoll_ctl(ctx->epollfd, EPOLL_CTL_DEL, h->fd, NULL) < 0 &&
        errno != EBADF && errno != ENOENT) {
        warn_report("epoll_ctl(DEL, fd %d): %s", h->fd, g_strerror(errno));
    }
    aio_handler_count(ctx, h, -1);
    if (ctx->walking) {
        /* Someone iterates the list (or holds @h from epoll): defer. */
        h->deleted = true;
        ctx->has_deleted = true;
    } else {
        QLIST_REMOVE(h, node);
        g_free(h);
    }
}

static void aio_purge_deleted(AioContext *ctx)
{
    AioHandler *h, *next;

    if (ctx->walking || !ctx->has_deleted) {
        return;
    }
    QLIST_FOREACH_SAFE(h, &ctx->handlers, node, next) {
        if (h->deleted) {
            QLIST_REMOVE(h, node);
            g_free(h);
        }
    }
    ctx->has_deleted = false;
}

static AioHandler *aio_set_fd_handler_internal(AioContext *ctx, int fd,
                                               IOHandler *io_read,
                                               IOHandler *io_write,
                                               AioPollFn *io_poll,
                                               IOHandler *io_poll_ready,
                                               void *opaque)
{
    AioHandler *h = aio_find_handler(ctx, fd);
    struct epoll_event ev;
    bool is_new = false;

    if (!io_read && !io_write && !io_poll) {
        if (h) {
            aio_remove_handler(ctx, h);
        }
        return NULL;
    }

    if (!h) {
        h = g_new0(AioHandler, 1);
        h->fd = fd;
        is_new = true;
    } else {
        aio_handler_count(ctx, h, -1);
    }
    h->io_read = io_read;
    h->io_write = io_write;
    h->io_poll = io_poll;
    h->io_poll_ready = io_poll_ready;
    if (!io_poll) {
        h->io_poll_begin = NULL;
        h->io_poll_end = NULL;
    }
    h->opaque = opaque;

    ev.events = aio_handler_events(h);
    ev.data.ptr = h;
    if (is_new || ev.events != h->events) {
        if (epoll_ctl(ctx->epollfd, is_new ? EPOLL_CTL_ADD : EPOLL_CTL_MOD,
                      fd, &ev) < 0) {
            error_report("cannot watch fd %d: epoll_ctl: %s", fd,
                         g_strerror(errno));
            if (is_new) {
                g_free(h);
            } else {
                aio_handler_count(ctx, h, +1);
                aio_remove_handler(ctx, h);
            }
            return NULL;
        }
        h->events = ev.events;
    }
    aio_handler_count(ctx, h, +1);
    if (is_new) {
        QLIST_INSERT_HEAD(&ctx->handlers, h, node);
    }
    return h;
}

/* Owner thread. */
void aio_set_fd_handler(AioContext *ctx, int fd,
                        IOHandler *io_read, IOHandler *io_write,
                        AioPollFn *io_poll, IOHandler *io_poll_ready,
                        void *opaque)
{
    aio_set_fd_handler_internal(ctx, fd, io_read, io_write, io_poll,
                                io_poll_ready, opaque);
}

/* Owner thread. */
bool aio_set_fd_edge_triggered(AioContext *ctx, int fd)
{
    AioHandler *h = aio_find_handler(ctx, fd);
    struct epoll_event ev;

    if (!h || h->deleted) {
        return false;
    }
    if (h->edge) {
        return true;
    }
    h->edge = true;
    ev.events = aio_handler_events(h);
    ev.data.ptr = h;
    if (epoll_ctl(ctx->epollfd, EPOLL_CTL_MOD, fd, &ev) < 0) {
        h->edge = false;
        return false;
    }
    h->events = ev.events;
    return true;
}

/* Owner thread. */
void aio_set_fd_poll_notify(AioContext *ctx, int fd,
                            IOHandler *io_poll_begin,
                            IOHandler *io_poll_end)
{
    AioHandler *h = aio_find_handler(ctx, fd);

    if (!h || h->deleted || !h->io_poll) {
        return;
    }
    h->io_poll_begin = io_poll_begin;
    h->io_poll_end = io_poll_end;
}

static void aio_notifier_read(void *opaque)
{
    AioContext *ctx = opaque;

    event_notifier_test_and_clear(&ctx->notifier);
}

static bool aio_notifier_poll(void *opaque)
{
    AioContext *ctx = opaque;

    return atomic_load_explicit(&ctx->notified, memory_order_relaxed);
}

static void aio_notifier_poll_ready(void *opaque)
{
    /* Nothing: the bottom halves run after the poll window. */
}

bool aio_context_setup(AioContext *ctx, GError **errp)
{
    int ret;

    ctx->epollfd = epoll_create1(EPOLL_CLOEXEC);
    if (ctx->epollfd < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot create event loop: "
                    "epoll_create1: %s", g_strerror(errno));
        return false;
    }
    ret = event_notifier_init(&ctx->notifier, false);
    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot create event loop: "
                    "eventfd: %s", g_strerror(-ret));
        close(ctx->epollfd);
        ctx->epollfd = -1;
        return false;
    }
    ctx->notifier_handler =
        aio_set_fd_handler_internal(ctx, event_notifier_get_fd(&ctx->notifier),
                                    aio_notifier_read, NULL,
                                    aio_notifier_poll,
                                    aio_notifier_poll_ready, ctx);
    if (!ctx->notifier_handler) {
        g_set_error(errp, VB_ERROR, 0, "cannot create event loop: "
                    "cannot watch its eventfd");
        event_notifier_cleanup(&ctx->notifier);
        close(ctx->epollfd);
        ctx->epollfd = -1;
        return false;
    }
    ctx->notifier_handler->internal = true;
    ctx->poll_grow = 2;
    ctx->poll_shrink = 2;
    ctx->poll_block_ns = AIO_POLL_BLOCK_NS;
    return true;
}

void aio_context_teardown(AioContext *ctx)
{
    AioHandler *h, *next;

    assert(!ctx->walking);
    QLIST_FOREACH_SAFE(h, &ctx->handlers, node, next) {
        if (!h->deleted && !h->internal) {
            warn_report("AioContext freed with a handler still registered "
                        "for fd %d", h->fd);
        }
        QLIST_REMOVE(h, node);
        g_free(h);
    }
    event_notifier_cleanup(&ctx->notifier);
    close(ctx->epollfd);
}

/* Owner thread. */
void aio_context_set_poll_params(AioContext *ctx, int64_t max_ns,
                                 int64_t grow, int64_t shrink)
{
    ctx->poll_max_ns = max_ns > 0 ? max_ns : 0;
    ctx->poll_grow = grow > 1 ? grow : 2;
    ctx->poll_shrink = shrink > 1 ? shrink : 2;
    if (ctx->poll_window.ns > ctx->poll_max_ns) {
        ctx->poll_window.ns = ctx->poll_max_ns;
        aio_set_poll_ns(ctx, ctx->poll_max_ns);
    }
}

/* Owner thread. */
void aio_context_set_poll_block_ns(AioContext *ctx, int64_t block_ns)
{
    ctx->poll_block_ns = block_ns > 0 ? block_ns : AIO_POLL_BLOCK_NS;
}

/* One pass over the io_poll() callbacks.  Returns true if a user handler
 * had work (and ran); *notified is set if the context was notified. */
static bool aio_run_poll_handlers_once(AioContext *ctx, bool *notified)
{
    AioHandler *h;
    bool progress = false;

    QLIST_FOREACH(h, &ctx->handlers, node) {
        if (h->deleted || !h->io_poll || !h->io_poll(h->opaque)) {
            continue;
        }
        if (h->internal) {
            *notified = true;
            continue;
        }
        aio_stat_inc(&ctx->poll_hits);
        progress = true;
        if (h->io_poll_ready) {
            h->io_poll_ready(h->opaque);
        } else if (h->io_read) {
            h->io_read(h->opaque);
        }
    }
    return progress;
}

/*
 * Enter or leave a poll phase: run io_poll_begin / io_poll_end of the
 * handlers.  Leaving also checks every io_poll() once more (and runs the
 * ready ones): returns true if that found user work.
 */
static bool aio_set_poll_started(AioContext *ctx, bool started,
                                 bool *notified)
{
    AioHandler *h;
    bool progress = false;

    ctx->poll_started = started;
    ctx->walking++;
    QLIST_FOREACH(h, &ctx->handlers, node) {
        if (h->deleted) {
            continue;
        }
        if (started && h->io_poll_begin) {
            h->poll_begun = true;
            h->io_poll_begin(h->opaque);
        } else if (!started && h->poll_begun) {
            h->poll_begun = false;
            if (h->io_poll_end) {
                h->io_poll_end(h->opaque);
            }
        }
    }
    if (!started) {
        progress = aio_run_poll_handlers_once(ctx, notified);
    }
    ctx->walking--;
    aio_purge_deleted(ctx);
    return progress;
}

/* The busy-poll window.  With @blocking, keep going until work shows up or
 * ctx->poll_ns elapsed; otherwise one pass.  Returns true on user work;
 * *end is the last clock read (@start if none: the first pass found it). */
static bool aio_try_poll(AioContext *ctx, bool blocking, int64_t start,
                         bool *notified, int64_t *end)
{
    int64_t deadline = start + aio_get_poll_ns(ctx);
    bool progress;

    *end = start;
    ctx->walking++;
    do {
        progress = aio_run_poll_handlers_once(ctx, notified);
    } while (!progress && !*notified && blocking &&
             (*end = aio_clock_ns()) < deadline);
    ctx->walking--;
    aio_purge_deleted(ctx);
    return progress;
}

void aio_poll_window_next(AioPollWindow *w, const AioPollParams *p,
                          int64_t spent_ns, int64_t wait_ns, bool hit)
{
    const int64_t limit = p->max_ns * AIO_POLL_CREDIT_FACTOR;
    const bool near = wait_ns <= p->max_ns * AIO_POLL_NEAR_FACTOR;

    if (hit && spent_ns <= 0 && w->ns) {
        /* The first look found it: it was there before any spinning, and
         * epoll_wait() would not have slept for it either. */
        w->hits++;
        return;
    }
    if (w->ns == 0) {
        /* Nothing spent, nothing saved: only a probe restarts polling. */
        if (!near || p->max_ns <= 0) {
            return;
        }
        if (w->probe_wait) {
            w->probe_wait--;
            return;
        }
        w->ns = MIN(AIO_POLL_NS_START, p->max_ns);
        w->credit_ns = 0;
        w->hits = 0;
        return;
    }

    if (hit) {
        w->credit_ns += p->block_ns - spent_ns;
        w->hits++;
    } else {
        w->credit_ns -= spent_ns;
    }
    if (w->credit_ns >= limit) {
        w->credit_ns = limit;
        w->probe_backoff = 0;
        w->ceiling_ns = 0;
    } else if (w->credit_ns <= -limit) {
        /* Polling cost a full limit more than it saved. */
        if (w->hits) {
            w->ceiling_ns = w->ns;
            w->ns /= p->shrink;
        } else {
            w->ns = 0;
        }
        if (w->ns < AIO_POLL_NS_START) {
            w->ns = 0;
            w->probe_wait = w->probe_backoff;
            w->probe_backoff = MIN(MAX(2 * w->probe_backoff, 1),
                                   AIO_POLL_PROBE_BACKOFF_MAX);
        }
        w->credit_ns = 0;
        w->hits = 0;
        return;
    }
    if (!hit && near && w->ns < p->max_ns && w->credit_ns > -limit / 2 &&
        (!w->ceiling_ns || w->ns * p->grow < w->ceiling_ns)) {
        w->ns = MIN(w->ns * p->grow, p->max_ns);
    }
}

static void aio_adjust_poll_window(AioContext *ctx, int64_t spent_ns,
                                   int64_t wait_ns, bool hit)
{
    const AioPollParams p = {
        .max_ns = ctx->poll_max_ns,
        .grow = ctx->poll_grow,
        .shrink = ctx->poll_shrink,
        .block_ns = ctx->poll_block_ns,
    };

    if (atomic_load_explicit(&ctx->driver_polls, memory_order_relaxed)) {
        /*
         * A polling driver never kicks and spins whether we poll or not:
         * only our polling serves it, so the account does not apply (a
         * moment of CPU contention must not close the window on it).  The
         * account starts again when the driver first wants an interrupt.
         */
        ctx->poll_window = (AioPollWindow) { .ns = p.max_ns };
    } else {
        aio_poll_window_next(&ctx->poll_window, &p, spent_ns, wait_ns, hit);
    }
    aio_set_poll_ns(ctx, ctx->poll_window.ns);
}

static bool aio_dispatch_events(AioContext *ctx, struct epoll_event *events,
                                int n)
{
    bool progress = false;
    int i;

    ctx->walking++;
    for (i = 0; i < n; i++) {
        AioHandler *h = events[i].data.ptr;
        uint32_t revents = events[i].events;

        if (!h->deleted && h->io_read &&
            (revents & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
            h->io_read(h->opaque);
            progress |= !h->internal;
        }
        /* A hang-up goes to io_read if there is one, else to io_write, so
         * a level-triggered HUP cannot spin the loop unseen. */
        if (!h->deleted && h->io_write &&
            (revents & (EPOLLOUT | EPOLLERR |
                        (h->io_read ? 0 : EPOLLHUP)))) {
            h->io_write(h->opaque);
            progress |= !h->internal;
        }
    }
    ctx->walking--;
    aio_purge_deleted(ctx);
    return progress;
}

/* Owner thread; never from a callback of the same context. */
bool aio_poll(AioContext *ctx, bool blocking)
{
    struct epoll_event events[AIO_MAX_EVENTS];
    bool progress, polled = false, notified = false;
    bool poll_window = false;
    int64_t start = 0, poll_end = 0;
    bool may_sleep = false;
    bool poll_on;
    int timeout, n;
    AioContext *outer = aio_polling_ctx;

    /* Nested event loops are forbidden (see aio.h). */
    assert(!ctx->in_poll);
    ctx->in_poll = true;
    aio_polling_ctx = ctx;
    aio_context_set_current(ctx);
    aio_stat_inc(&ctx->iterations);

    progress = aio_bh_poll(ctx);
    timeout = (blocking && !progress && !aio_bh_pending(ctx)) ? -1 : 0;

    poll_on = ctx->poll_max_ns != 0;
    if (poll_on && aio_get_host_busy()) {
        /* A polling driver spins whether we poll or not. */
        poll_on = atomic_load_explicit(&ctx->driver_polls,
                                       memory_order_relaxed) != 0;
        aio_stat_inc(poll_on ? &ctx->poll_driver_polls
                             : &ctx->poll_host_busy);
    }
    if (poll_on && ctx->poll_handler_cnt > 1) {
        /* > 1: the notifier alone is not worth polling. */
        poll_window = timeout != 0;
        start = aio_clock_ns();
        if (poll_window && !ctx->poll_started && aio_get_poll_ns(ctx) > 0) {
            aio_set_poll_started(ctx, true, &notified);
        }
        polled = aio_try_poll(ctx, timeout != 0, start, &notified,
                              &poll_end);
        if (polled || notified) {
            timeout = 0;
        }
        progress |= polled;
    }

    if (ctx->poll_started && !polled && (timeout || !poll_on)) {
        /* About to sleep (or polling was turned off): notifications back
         * on, then one last look. */
        if (aio_set_poll_started(ctx, false, &notified)) {
            polled = progress = true;
        }
        if (polled || notified) {
            timeout = 0;
        }
    }

    if (!(polled && ctx->poll_disable_cnt == 0)) {
        if (timeout) {
            /*
             * We may sleep: say so, then look for news once more.  The
             * seq_cst store and fence pair with the fence in aio_notify():
             * either it sees notify_me and writes the eventfd, or we see
             * its BH / notified flag here and do not sleep.
             */
            may_sleep = true;
            atomic_store(&ctx->notify_me, true);
            atomic_thread_fence(memory_order_seq_cst);
            if (aio_bh_pending(ctx) || atomic_load(&ctx->notified)) {
                timeout = 0;
            }
        }
        aio_stat_inc(&ctx->epoll_waits);
        n = epoll_wait(ctx->epollfd, events, AIO_MAX_EVENTS, timeout);
        if (may_sleep) {
            atomic_store_explicit(&ctx->notify_me, false,
                                  memory_order_release);
        }
        if (n < 0) {
            if (errno != EINTR) {
                warn_report("epoll_wait: %s", g_strerror(errno));
            }
            n = 0;
        }
    } else {
        n = 0;
    }

    /*
     * Accept the notification before looking at the BHs: pairs with the
     * store in aio_notify() that follows the BH push, so a BH whose
     * notification we clear here is seen by aio_bh_poll() below.
     */
    if (atomic_load_explicit(&ctx->notified, memory_order_relaxed)) {
        atomic_exchange(&ctx->notified, false);
    }

    if (n > 0) {
        progress |= aio_dispatch_events(ctx, events, n);
    }
    progress |= aio_bh_poll(ctx);

    if (poll_window) {
        /* A hit: polling (or the last look before sleeping) found the
         * event, so the loop did not sleep for it.  Our own notification
         * found by the first look (a bottom half scheduled by the last
         * iteration) says nothing about the peer: not counted. */
        if (polled || !notified || poll_end != start) {
            aio_adjust_poll_window(ctx, poll_end - start,
                                   aio_clock_ns() - start,
                                   polled || notified);
        }
    }

    aio_polling_ctx = outer;
    ctx->in_poll = false;
    return progress;
}
