/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * AioContext lifetime, bottom halves, aio_notify() and engine slots.
 *
 * Theory of operation.  A bottom half (QEMUBH) is a callback the owner
 * thread runs from aio_poll().  Any thread may schedule it: scheduling sets
 * BH_SCHEDULED|BH_PENDING in bh->flags with one atomic fetch-or, and only
 * the thread that flipped BH_PENDING from 0 to 1 pushes the BH onto the
 * context's lock-free pending stack and calls aio_notify().  So a BH is on
 * the stack at most once, and scheduling twice before it runs runs it once.
 * The loop takes the whole stack with one atomic exchange, clears
 * BH_PENDING|BH_SCHEDULED of each BH before calling it (so the callback may
 * schedule itself again), and frees BHs marked BH_DELETED or BH_ONESHOT.
 * Deletion therefore never frees memory the loop might still look at.
 *
 * aio_notify() writes the context's eventfd only when the owner announced
 * (ctx->notify_me) that it is about to sleep in epoll_wait(); otherwise the
 * owner is running and will see the new work before it sleeps.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "qemu/error-report.h"
#include "aio-internal.h"

static __thread AioContext *current_aio_context;

/* Any thread. */
AioContext *qemu_get_current_aio_context(void)
{
    return current_aio_context;
}

void aio_context_set_current(AioContext *ctx)
{
    current_aio_context = ctx;
}

/* Any thread, before the context is used elsewhere. */
void aio_context_acquire_thread(AioContext *ctx)
{
    current_aio_context = ctx;
}

/* Any thread. */
AioContext *aio_context_new(GError **errp)
{
    AioContext *ctx = g_new0(AioContext, 1);

    pthread_mutex_init(&ctx->bh_all_lock, NULL);
    QLIST_INIT(&ctx->bh_all);
    QLIST_INIT(&ctx->handlers);
    ctx->epollfd = -1;
    ctx->notifier.fd = -1;
    if (!aio_context_setup(ctx, errp)) {
        pthread_mutex_destroy(&ctx->bh_all_lock);
        g_free(ctx);
        return NULL;
    }
    return ctx;
}

static void aio_bh_free(QEMUBH *bh)
{
    AioContext *ctx = bh->ctx;

    pthread_mutex_lock(&ctx->bh_all_lock);
    QLIST_REMOVE(bh, all_node);
    pthread_mutex_unlock(&ctx->bh_all_lock);
    g_free(bh);
}

/* Owner thread, loop not running (no request in flight): run the
 * cleanups of the values stored under the keys. */
void aio_context_cleanup_local(AioContext *ctx)
{
    assert(!ctx->in_poll);
    for (int i = 0; i < AIO_LOCAL_MAX; i++) {
        AioLocalSlot *slot = &ctx->local[i];
        void *state = slot->state;
        void (*cleanup)(void *state) = slot->cleanup;

        /* Clear first: the cleanup may look at the slot or poll. */
        slot->state = NULL;
        slot->cleanup = NULL;
        if (state && cleanup) {
            cleanup(state);
        }
    }
}

/* Owner thread, loop not running; no other thread may still use @ctx
 * (not even to finish an aio_notify()). */
void aio_context_free(AioContext *ctx)
{
    QEMUBH *bh, *next;

    if (!ctx) {
        return;
    }
    assert(!ctx->in_poll);

    /* Engines first: their cleanup may delete BHs and fd handlers. */
    aio_context_cleanup_local(ctx);

    /* The pending stack only links BHs that are also on bh_all. */
    atomic_store(&ctx->bh_pending, NULL);
    QLIST_FOREACH_SAFE(bh, &ctx->bh_all, all_node, next) {
        unsigned flags = atomic_load(&bh->flags);

        if (!(flags & BH_DELETED)) {
            warn_report("AioContext freed with bottom half '%s' still alive%s",
                        bh->name ? bh->name : "(unnamed)",
                        (flags & BH_SCHEDULED) ? " (scheduled)" : "");
        }
        QLIST_REMOVE(bh, all_node);
        g_free(bh);
    }

    aio_context_teardown(ctx);
    pthread_mutex_destroy(&ctx->bh_all_lock);
    if (current_aio_context == ctx) {
        current_aio_context = NULL;
    }
    g_free(ctx);
}

/* Any thread. */
void aio_notify(AioContext *ctx)
{
    /*
     * Publish "there is news" before looking at notify_me.  The seq_cst
     * store and fence pair with the fence in aio_poll() between setting
     * notify_me and re-checking bh_pending/notified: either the loop sees
     * our work (or notified) before sleeping, or we see notify_me and
     * write the eventfd.  Work published by the caller (a BH push, a flag)
     * happens before this store.
     */
    atomic_store(&ctx->notified, true);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&ctx->notify_me, memory_order_relaxed)) {
        event_notifier_set(&ctx->notifier);
        atomic_fetch_add_explicit(&ctx->notify_writes, 1,
                                  memory_order_relaxed);
    }
}

/* Any thread: a BH waits on the pending stack. */
bool aio_bh_pending(AioContext *ctx)
{
    return atomic_load(&ctx->bh_pending) != NULL;
}

/* Push @bh on the pending stack with @new_flags; notify if it was not on. */
static void aio_bh_enqueue(QEMUBH *bh, unsigned new_flags)
{
    AioContext *ctx = bh->ctx;
    unsigned old = atomic_fetch_or(&bh->flags, new_flags | BH_PENDING);

    if (!(old & BH_PENDING)) {
        QEMUBH *head = atomic_load_explicit(&ctx->bh_pending,
                                            memory_order_relaxed);
        /*
         * Treiber push: the release half of the successful CAS publishes
         * pending_next and the flags; pairs with the exchange in
         * aio_bh_poll().  Only the loop pops (all at once), so no ABA.
         */
        do {
            bh->pending_next = head;
        } while (!atomic_compare_exchange_weak(&ctx->bh_pending, &head, bh));
        /*
         * @bh may be freed by the loop from here on; use only @ctx.
         * The owner scheduling from inside its own aio_poll() (a handler,
         * a BH, e.g. the null engine's completions) needs no notification:
         * it runs the BHs before returning or looks at bh_pending before
         * it sleeps.  Setting ctx->notified would only make its next
         * iteration an epoll_wait(0) that finds nothing: one syscall and
         * one iteration per request at a fixed request rate.
         */
        if (!aio_in_own_poll(ctx)) {
            aio_notify(ctx);
        }
    }
}

static QEMUBH *aio_bh_alloc(AioContext *ctx, QEMUBHFunc *cb, void *opaque,
                            const char *name, unsigned flags)
{
    QEMUBH *bh = g_new0(QEMUBH, 1);

    bh->ctx = ctx;
    bh->cb = cb;
    bh->opaque = opaque;
    bh->name = name;
    atomic_init(&bh->flags, flags);
    pthread_mutex_lock(&ctx->bh_all_lock);
    QLIST_INSERT_HEAD(&ctx->bh_all, bh, all_node);
    pthread_mutex_unlock(&ctx->bh_all_lock);
    return bh;
}

/* Any thread.  @name must stay valid for the BH's life (a literal). */
QEMUBH *aio_bh_new(AioContext *ctx, QEMUBHFunc *cb, void *opaque,
                   const char *name)
{
    return aio_bh_alloc(ctx, cb, opaque, name, 0);
}

/* Any thread. */
void aio_bh_schedule_oneshot(AioContext *ctx, QEMUBHFunc *cb, void *opaque,
                             const char *name)
{
    QEMUBH *bh = aio_bh_alloc(ctx, cb, opaque, name, BH_ONESHOT);

    aio_bh_enqueue(bh, BH_SCHEDULED);
}

/* Any thread. */
void qemu_bh_schedule(QEMUBH *bh)
{
    /*
     * Always the full-barrier fetch-or, even if the BH looks scheduled
     * already: it orders the caller's earlier stores before the loop's
     * fetch-and in aio_bh_poll(), so the callback sees them.
     */
    aio_bh_enqueue(bh, BH_SCHEDULED);
}

/* Owner thread. */
void qemu_bh_cancel(QEMUBH *bh)
{
    /* Stays on the pending stack if it is there; the loop skips it. */
    atomic_fetch_and(&bh->flags, ~(unsigned)BH_SCHEDULED);
}

/* Owner thread.  Safe from inside @bh's own callback. */
void qemu_bh_delete(QEMUBH *bh)
{
    if (!bh) {
        return;
    }
    atomic_fetch_and(&bh->flags, ~(unsigned)BH_SCHEDULED);
    aio_bh_enqueue(bh, BH_DELETED);
}

/* Any thread (the answer may be stale when another thread schedules). */
bool qemu_bh_is_scheduled(QEMUBH *bh)
{
    return atomic_load(&bh->flags) & BH_SCHEDULED;
}

/* Owner thread, from aio_poll(). */
bool aio_bh_poll(AioContext *ctx)
{
    QEMUBH *list, *rev = NULL;
    bool progress = false;

    if (!atomic_load_explicit(&ctx->bh_pending, memory_order_relaxed)) {
        return false;
    }
    /* Pairs with the CAS in aio_bh_enqueue(). */
    list = atomic_exchange(&ctx->bh_pending, NULL);

    /* The stack is newest-first: reverse it to run BHs in schedule order. */
    while (list) {
        QEMUBH *next = list->pending_next;

        list->pending_next = rev;
        rev = list;
        list = next;
    }

    while (rev) {
        QEMUBH *bh = rev;
        unsigned flags;

        /* Read the link before BH_PENDING is cleared: from then on another
         * thread may push @bh again and rewrite pending_next. */
        rev = bh->pending_next;
        flags = atomic_fetch_and(&bh->flags,
                                 ~(unsigned)(BH_PENDING | BH_SCHEDULED));
        if ((flags & (BH_SCHEDULED | BH_DELETED)) == BH_SCHEDULED) {
            aio_stat_inc(&ctx->bh_runs);
            progress = true;
            bh->cb(bh->opaque);
        }
        if (flags & (BH_DELETED | BH_ONESHOT)) {
            aio_bh_free(bh);
        }
    }
    return progress;
}

/* Keys handed out so far; a key's index is set once, under the lock. */
static pthread_mutex_t aio_local_lock = PTHREAD_MUTEX_INITIALIZER;
static int aio_local_keys;

/* Owner thread. */
void *aio_local_get(AioContext *ctx, AioLocalKey *key)
{
    int i = atomic_load_explicit(&key->index, memory_order_acquire);

    return i ? ctx->local[i - 1].state : NULL;
}

/* The slot index + 1 of @key, given out now if it has none. */
static int aio_local_key_index(AioLocalKey *key)
{
    int i = atomic_load_explicit(&key->index, memory_order_acquire);

    if (i) {
        return i;
    }
    pthread_mutex_lock(&aio_local_lock);
    i = atomic_load_explicit(&key->index, memory_order_relaxed);
    if (!i) {
        /* A fixed, small number of users (the block engines): running
         * out is a programming error, not an input error. */
        assert(aio_local_keys < AIO_LOCAL_MAX);
        i = ++aio_local_keys;
        atomic_store_explicit(&key->index, i, memory_order_release);
    }
    pthread_mutex_unlock(&aio_local_lock);
    return i;
}

/* Owner thread.  Replacing a value does not run the old cleanup. */
void aio_local_set(AioContext *ctx, AioLocalKey *key, void *state,
                   void (*cleanup)(void *state))
{
    int i = aio_local_key_index(key) - 1;

    ctx->local[i].state = state;
    ctx->local[i].cleanup = cleanup;
}

/* Any thread (each counter is read atomically, not the set as a whole). */
void aio_context_get_stats(AioContext *ctx, AioContextStats *stats)
{
    stats->iterations = atomic_load_explicit(&ctx->iterations,
                                             memory_order_relaxed);
    stats->epoll_waits = atomic_load_explicit(&ctx->epoll_waits,
                                              memory_order_relaxed);
    stats->poll_hits = atomic_load_explicit(&ctx->poll_hits,
                                            memory_order_relaxed);
    stats->poll_host_busy = atomic_load_explicit(&ctx->poll_host_busy,
                                                 memory_order_relaxed);
    stats->poll_driver_polls =
        atomic_load_explicit(&ctx->poll_driver_polls, memory_order_relaxed);
    stats->driver_polls = atomic_load_explicit(&ctx->driver_polls,
                                               memory_order_relaxed);
    stats->notify_writes = atomic_load_explicit(&ctx->notify_writes,
                                                memory_order_relaxed);
    stats->bh_runs = atomic_load_explicit(&ctx->bh_runs,
                                          memory_order_relaxed);
    stats->poll_ns = aio_get_poll_ns(ctx);
}

typedef struct AioRunSync {
    void (*fn)(void *opaque);
    void *opaque;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
} AioRunSync;

static void aio_run_sync_bh(void *opaque)
{
    AioRunSync *rs = opaque;

    rs->fn(rs->opaque);
    pthread_mutex_lock(&rs->lock);
    rs->done = true;
    pthread_cond_signal(&rs->cond);
    pthread_mutex_unlock(&rs->lock);
}

/* Any thread that does not run @ctx's loop (or @ctx's own thread, then
 * @fn runs directly).  Blocks until @fn returned. */
void aio_run_sync(AioContext *ctx, void (*fn)(void *opaque), void *opaque)
{
    AioRunSync rs = { .fn = fn, .opaque = opaque };

    if (ctx == qemu_get_current_aio_context()) {
        fn(opaque);
        return;
    }
    pthread_mutex_init(&rs.lock, NULL);
    pthread_cond_init(&rs.cond, NULL);
    aio_bh_schedule_oneshot(ctx, aio_run_sync_bh, &rs, "aio_run_sync");
    pthread_mutex_lock(&rs.lock);
    while (!rs.done) {
        pthread_cond_wait(&rs.cond, &rs.lock);
    }
    pthread_mutex_unlock(&rs.lock);
    pthread_cond_destroy(&rs.cond);
    pthread_mutex_destroy(&rs.lock);
}
