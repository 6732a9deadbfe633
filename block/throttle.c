/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * throttle: a filter driver that holds requests back to the limits of a
 * throttle group (util/throttle.c), like QEMU's driver=throttle.
 *
 * Theory of operation: the filter sits on top of any node; the device
 * above and the node below do not know it is there.  A flush, and every
 * request while the group has no limit set, is forwarded at once: one
 * predictable branch.  Otherwise the request reserves its share of the
 * group (throttle_group_reserve(): lock-free, one compare-and-exchange
 * per limit) and learns when it may go.  If that is now and nothing of
 * this context waits, it is forwarded; else it waits in the FIFO of the
 * submitting AioContext -- the iothread of the device queue that sent it
 * -- linked through the BlockAIOCB it came in (no allocation), and that
 * context's timerfd is armed for the head's departure.  Because capacity
 * is reserved at arrival, the exports and iothreads sharing a group are
 * served first come, first served: none can starve another by being a
 * little quicker to retry.  The timer's handler runs in the same
 * iothread, lets out every request whose time has come (in one
 * defer_call section, so they are submitted as a batch) and re-arms.
 * Nothing ever blocks: other queues, other exports and every other fd
 * handler of the iothread go on.
 *
 * When the device stops every queue (its front-end went away, or the
 * daemon drains it to shut down) the waiting requests go at once, as
 * QEMU's drain lets throttled requests through.
 *
 * A limit change (throttle_group_set_limits(), main thread) fires every
 * context's timer at once; the handler sees the group's generation moved
 * and makes every waiting request reserve again under the new limits.
 *
 * Threads: the per-context state (ThrottleCtx) is created by
 * bdrv_attach_aio_context() in its owner thread (or by the first request
 * there) and published in a fixed array that the request path scans
 * without a lock; @lock serialises creation, the timer fd's close and the
 * main thread's kicks.  The FIFO is the owner's only.  The counters have
 * one writer each (the owner) and are read by the main thread (relaxed).
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qemu/defer-call.h"
#include "qemu/throttle.h"
#include "qemu/iothread.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/engine.h"

#include <pthread.h>
#include <time.h>
#include <sys/timerfd.h>

/* AioContexts (iothreads) one throttle node can serve. */
#define THROTTLE_MAX_CTX 256

typedef struct ThrottleCtx {
    AioContext *ctx;
    BlockBackend *bs;
    int timer_fd;               /* -1: not registered; under lock */
    unsigned int refs;          /* owner: attaches */
    QSIMPLEQ_HEAD(, BlockAIOCB) waiting;    /* owner */
    _Atomic uint64_t throttled; /* requests that had to wait */
    _Atomic uint64_t throttled_ns;  /* their waits, summed */
    _Atomic uint64_t waiting_now;
} ThrottleCtx;

typedef struct BDRVThrottleState {
    ThrottleGroup *tg;
    /* The group has a limit set (main thread writes it when the limits
     * change): the request path's one test. */
    atomic_bool limited;
    /* The device stopped every queue (front-end gone, shutdown): what
     * waits goes at once, so the drain does not wait for the limit. */
    atomic_bool bypass;
    pthread_mutex_t lock;
    _Atomic unsigned int n_ctx;
    _Atomic(ThrottleCtx *) ctxs[THROTTLE_MAX_CTX];
} BDRVThrottleState;

/* A waiting request's departure time, the group generation it reserved
 * in and when it came, in its engine-private words (no engine has it
 * yet). */
#define THROTTLE_ACB_DEP(acb) ((acb)->engine_priv[0])
#define THROTTLE_ACB_GEN(acb) ((acb)->engine_priv[1])
#define THROTTLE_ACB_ENQ(acb) ((acb)->engine_priv[2])

static int64_t throttle_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Any thread: fire @tc's timer after @ns (>= 1). */
static void throttle_arm(ThrottleCtx *tc, int64_t ns)
{
    struct itimerspec its = {
        .it_value.tv_sec = ns / 1000000000LL,
        .it_value.tv_nsec = ns % 1000000000LL,
    };

    if (tc->timer_fd >= 0) {
        timerfd_settime(tc->timer_fd, 0, &its, NULL);
    }
}

static void throttle_forward(BlockBackend *bs, AioContext *ctx,
                             BlockAIOCB *acb)
{
    acb->blk = bs->child;
    blk_drv_submit(bs->child, ctx, acb);
}

static void throttle_count(_Atomic uint64_t *c, uint64_t n)
{
    /* One writer (the owner thread); the main thread reads. */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) +
                          n, memory_order_relaxed);
}

/* Owner thread: let out the requests whose time has come; re-arm for the
 * next.  After a limit change every waiting request reserves again, in
 * FIFO order, under the new limits. */
static void throttle_ctx_run(ThrottleCtx *tc)
{
    BDRVThrottleState *s = tc->bs->opaque;
    uint64_t gen = throttle_group_generation(s->tg);
    int64_t now = throttle_now();
    BlockAIOCB *acb;

    if (unlikely(atomic_load_explicit(&s->bypass, memory_order_relaxed))) {
        QSIMPLEQ_FOREACH(acb, &tc->waiting, next) {
            THROTTLE_ACB_DEP(acb) = now;
        }
    }
    QSIMPLEQ_FOREACH(acb, &tc->waiting, next) {
        if (THROTTLE_ACB_GEN(acb) != gen) {
            THROTTLE_ACB_GEN(acb) = gen;
            THROTTLE_ACB_DEP(acb) = now +
                throttle_group_reserve(s->tg, acb->type != BLK_REQ_READ,
                                       acb->bytes, now);
        }
    }
    defer_call_begin();
    while ((acb = QSIMPLEQ_FIRST(&tc->waiting)) &&
           (int64_t)THROTTLE_ACB_DEP(acb) <= now) {
        QSIMPLEQ_REMOVE_HEAD(&tc->waiting, next);
        throttle_count(&tc->waiting_now, -1);
        throttle_count(&tc->throttled_ns,
                       now - (int64_t)THROTTLE_ACB_ENQ(acb));
        throttle_forward(tc->bs, tc->ctx, acb);
    }
    defer_call_end();
    if (acb) {
        throttle_arm(tc, (int64_t)THROTTLE_ACB_DEP(acb) - now);
    }
}

/* Owner thread: the retry timer fired (or a limit changed). */
static void throttle_timer_cb(void *opaque)
{
    ThrottleCtx *tc = opaque;
    uint64_t expirations;

    if (read(tc->timer_fd, &expirations, sizeof(expirations)) < 0 &&
        errno != EAGAIN) {
        /* Nothing to do about it here; the FIFO is run anyway. */
    }
    throttle_ctx_run(tc);
}

/* Owner thread of @ctx: its timer fd, created and registered. */
static bool throttle_ctx_register(ThrottleCtx *tc, GError **errp)
{
    BDRVThrottleState *s = tc->bs->opaque;
    int fd;

    if (tc->timer_fd >= 0) {
        return true;
    }
    fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: throttle: cannot create a "
                    "timer: %s", tc->bs->filename, g_strerror(errno));
        return false;
    }
    pthread_mutex_lock(&s->lock);
    tc->timer_fd = fd;
    pthread_mutex_unlock(&s->lock);
    aio_set_fd_handler(tc->ctx, fd, throttle_timer_cb, NULL, NULL, NULL, tc);
    return true;
}

/* Owner thread of @ctx: the state for @ctx, created on first use. */
static ThrottleCtx *throttle_ctx_get(BlockBackend *bs, AioContext *ctx,
                                     GError **errp)
{
    BDRVThrottleState *s = bs->opaque;
    unsigned int n = atomic_load_explicit(&s->n_ctx, memory_order_acquire);
    ThrottleCtx *tc;

    for (unsigned int i = 0; i < n; i++) {
        /* Pairs with the release store below. */
        tc = atomic_load_explicit(&s->ctxs[i], memory_order_acquire);
        if (tc->ctx == ctx) {
            goto found;
        }
    }
    pthread_mutex_lock(&s->lock);
    n = atomic_load_explicit(&s->n_ctx, memory_order_relaxed);
    if (n == THROTTLE_MAX_CTX) {
        pthread_mutex_unlock(&s->lock);
        g_set_error(errp, VB_ERROR, 0, "%s: throttle: more than %d "
                    "iothreads use this node", bs->filename,
                    THROTTLE_MAX_CTX);
        return NULL;
    }
    tc = g_new0(ThrottleCtx, 1);
    tc->ctx = ctx;
    tc->bs = bs;
    tc->timer_fd = -1;
    QSIMPLEQ_INIT(&tc->waiting);
    atomic_store_explicit(&s->ctxs[n], tc, memory_order_release);
    atomic_store_explicit(&s->n_ctx, n + 1, memory_order_release);
    pthread_mutex_unlock(&s->lock);
found:
    if (!throttle_ctx_register(tc, errp)) {
        return NULL;
    }
    return tc;
}

/* Owner thread of @ctx: a request the group's limits apply to. */
static void __attribute__((noinline))
throttle_submit_limited(BlockBackend *bs, AioContext *ctx, BlockAIOCB *acb)
{
    BDRVThrottleState *s = bs->opaque;
    ThrottleCtx *tc;
    uint64_t gen;
    int64_t now, w;

    if (acb->type == BLK_REQ_FLUSH ||
        atomic_load_explicit(&s->bypass, memory_order_relaxed)) {
        throttle_forward(bs, ctx, acb);
        return;
    }
    tc = throttle_ctx_get(bs, ctx, NULL);
    if (unlikely(!tc)) {
        blk_complete_later(ctx, acb, -EIO);
        return;
    }
    now = throttle_now();
    gen = throttle_group_generation(s->tg);
    w = throttle_group_reserve(s->tg, acb->type != BLK_REQ_READ, acb->bytes,
                               now);
    if (w == 0 && QSIMPLEQ_EMPTY(&tc->waiting)) {
        throttle_forward(bs, ctx, acb);
        return;
    }
    /* Its capacity is reserved: it leaves at now + w, after those ahead. */
    THROTTLE_ACB_DEP(acb) = now + w;
    THROTTLE_ACB_GEN(acb) = gen;
    THROTTLE_ACB_ENQ(acb) = now;
    if (QSIMPLEQ_EMPTY(&tc->waiting)) {
        throttle_arm(tc, w);
    }
    QSIMPLEQ_INSERT_TAIL(&tc->waiting, acb, next);
    throttle_count(&tc->throttled, 1);
    throttle_count(&tc->waiting_now, 1);
}

/*
 * Owner thread of @ctx: every request type.  With no limit set this is
 * one load and one predictable branch before the child gets it; the rest
 * is out of line.
 */
static void throttle_submit(BlockBackend *bs, AioContext *ctx,
                            BlockAIOCB *acb)
{
    BDRVThrottleState *s = bs->opaque;

    if (likely(!atomic_load_explicit(&s->limited, memory_order_relaxed))) {
        throttle_forward(bs, ctx, acb);
        return;
    }
    throttle_submit_limited(bs, ctx, acb);
}

/* Any thread: fire every context's timer now. */
static void throttle_kick_all(BDRVThrottleState *s)
{
    pthread_mutex_lock(&s->lock);
    for (unsigned int i = 0; i < s->n_ctx; i++) {
        throttle_arm(s->ctxs[i], 1);
    }
    pthread_mutex_unlock(&s->lock);
}

/* Main thread: the group's limits changed. */
static void throttle_limits_changed(void *opaque)
{
    BlockBackend *bs = opaque;
    BDRVThrottleState *s = bs->opaque;

    atomic_store_explicit(&s->limited, throttle_group_enabled(s->tg),
                          memory_order_relaxed);
    throttle_kick_all(s);
}

/*
 * Any thread: the device started or stopped every queue.  Stopped (the
 * front-end went away, or the daemon shuts down and drains), the waiting
 * requests are let out at once, as QEMU's drain does, rather than
 * holding the drain to the limit's pace.
 */
static void throttle_set_active(BlockBackend *bs, bool active, bool takeover)
{
    BDRVThrottleState *s = bs->opaque;

    atomic_store_explicit(&s->bypass, !active, memory_order_relaxed);
    if (!active) {
        throttle_kick_all(s);
    }
}

static bool throttle_attach(BlockBackend *bs, AioContext *ctx,
                            GError **errp)
{
    ThrottleCtx *tc = throttle_ctx_get(bs, ctx, errp);

    if (!tc) {
        return false;
    }
    tc->refs++;
    return true;
}

/* Owner thread: the queue drained (nothing of it waits here). */
static void throttle_detach(BlockBackend *bs, AioContext *ctx)
{
    BDRVThrottleState *s = bs->opaque;
    unsigned int n = atomic_load_explicit(&s->n_ctx, memory_order_acquire);

    for (unsigned int i = 0; i < n; i++) {
        ThrottleCtx *tc = atomic_load_explicit(&s->ctxs[i],
                                               memory_order_acquire);

        if (tc->ctx != ctx) {
            continue;
        }
        if (tc->refs) {
            tc->refs--;
        }
        if (tc->refs == 0 && QSIMPLEQ_EMPTY(&tc->waiting) &&
            tc->timer_fd >= 0) {
            aio_set_fd_handler(ctx, tc->timer_fd, NULL, NULL, NULL, NULL,
                               NULL);
            pthread_mutex_lock(&s->lock);
            close(tc->timer_fd);
            tc->timer_fd = -1;
            pthread_mutex_unlock(&s->lock);
        }
        return;
    }
}

/* Main thread: the filter over bs->child with opts->throttle_group. */
static bool throttle_open(BlockBackend *bs, const BlockOptions *opts,
                          GError **errp)
{
    BlockBackend *child = bs->child;
    BDRVThrottleState *s;

    if (!opts->throttle_group) {
        g_set_error(errp, VB_ERROR, 0, "%s: throttle: no throttle group",
                    child->filename);
        return false;
    }
    s = g_new0(BDRVThrottleState, 1);
    pthread_mutex_init(&s->lock, NULL);
    s->tg = throttle_group_ref(opts->throttle_group);
    atomic_store_explicit(&s->limited, throttle_group_enabled(s->tg),
                          memory_order_relaxed);
    bs->opaque = s;
    bs->filename = g_strdup(child->filename);
    bs->size = child->size;
    bs->bl = child->bl;
    bs->readonly = child->readonly;
    bs->batch = child->batch;
    throttle_group_add_notifier(s->tg, throttle_limits_changed, bs);
    return true;
}

/* Owner thread of @opaque's context: stop and close its timer. */
static void throttle_ctx_unregister_fn(void *opaque)
{
    ThrottleCtx *tc = opaque;
    BDRVThrottleState *s = tc->bs->opaque;

    aio_set_fd_handler(tc->ctx, tc->timer_fd, NULL, NULL, NULL, NULL, NULL);
    pthread_mutex_lock(&s->lock);
    close(tc->timer_fd);
    tc->timer_fd = -1;
    pthread_mutex_unlock(&s->lock);
}

/* Main thread, no request in flight. */
static void throttle_close(BlockBackend *bs)
{
    BDRVThrottleState *s = bs->opaque;
    AioContext *self = qemu_get_current_aio_context();

    if (!s) {
        return;
    }
    throttle_group_remove_notifier(s->tg, throttle_limits_changed, bs);
    throttle_group_unref(s->tg);
    for (unsigned int i = 0; i < s->n_ctx; i++) {
        ThrottleCtx *tc = s->ctxs[i];

        if (tc->timer_fd >= 0) {
            /*
             * Still registered in a context that never detached: its
             * handler has @tc (and through it @bs) as argument, and an
             * armed timer (or a kick) would run it after the free.  The
             * owner thread removes it (an iothread never waits for us,
             * so this wait is short).
             */
            if (tc->ctx == self) {
                throttle_ctx_unregister_fn(tc);
            } else {
                aio_run_sync(tc->ctx, throttle_ctx_unregister_fn, tc);
            }
        }
        g_free(tc);
    }
    pthread_mutex_destroy(&s->lock);
    g_free(s);
}

/* Any thread: the child's resize (in a worker when the child's driver
 * allows it, see blk_truncate_async()). */
static bool throttle_truncate(BlockBackend *bs, uint64_t size, GError **errp)
{
    return blk_truncate(bs->child, size, errp);
}

static const BlockDriver bdrv_throttle = {
    .format_name = "throttle",
    .is_filter = true,
    /* Only forwards: a throttled rbd node resizes in a worker, as the
     * node alone does, never in the main loop. */
    .bdrv_truncate_any_thread = true,
    .bdrv_open = throttle_open,
    .bdrv_close = throttle_close,
    .bdrv_truncate = throttle_truncate,
    .bdrv_attach_aio_context = throttle_attach,
    .bdrv_detach_aio_context = throttle_detach,
    .bdrv_set_active = throttle_set_active,
    .bdrv_aio_preadv = throttle_submit,
    .bdrv_aio_pwritev = throttle_submit,
    .bdrv_aio_flush = throttle_submit,
    .bdrv_aio_pdiscard = throttle_submit,
    .bdrv_aio_pwrite_zeroes = throttle_submit,
};
BLOCK_DRIVER_REGISTER(bdrv_throttle)

/* Any thread. */
void blk_throttle_get_stats(BlockBackend *blk, BlockThrottleStats *st)
{
    memset(st, 0, sizeof(*st));
    for (BlockBackend *n = blk; n; n = n->child) {
        BDRVThrottleState *s;
        unsigned int cnt;

        if (n->drv != &bdrv_throttle) {
            continue;
        }
        s = n->opaque;
        cnt = atomic_load_explicit(&s->n_ctx, memory_order_acquire);
        for (unsigned int i = 0; i < cnt; i++) {
            ThrottleCtx *tc = atomic_load_explicit(&s->ctxs[i],
                                                   memory_order_acquire);

            st->throttled += atomic_load_explicit(&tc->throttled,
                                                  memory_order_relaxed);
            st->throttled_ns += atomic_load_explicit(&tc->throttled_ns,
                                                     memory_order_relaxed);
            st->waiting += atomic_load_explicit(&tc->waiting_now,
                                                memory_order_relaxed);
        }
    }
}

/* Any thread. */
ThrottleGroup *blk_throttle_group(BlockBackend *blk)
{
    for (BlockBackend *n = blk; n; n = n->child) {
        if (n->drv == &bdrv_throttle) {
            return ((BDRVThrottleState *)n->opaque)->tg;
        }
    }
    return NULL;
}
