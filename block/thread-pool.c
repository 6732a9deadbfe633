/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The thread pool engine: the slow, always available path.  Workers of one
 * process-wide GThreadPool run each request's acb->target->run (the
 * driver's synchronous code, e.g. file-posix's preadv, fdatasync or
 * fallocate calls); each AioContext has a
 * client whose lock-protected completion list is drained by an EventNotifier
 * handler in that context.
 *
 * Threads: submission and completion in the owner thread of the client's
 * context; the target's function and the list append in worker threads.  Locking
 * and the allocation inside g_thread_pool_push() are accepted here: the
 * fast engines are io_uring and linux-aio.
 *
 * Sharing: every export of the process uses the same workers, and some
 * requests take long (a huge write-zeroes that falls back to writing a
 * zero buffer, I/O on a hung network file).  So one backend runs at most
 * THREAD_POOL_MAX_PER_BACKEND requests at a time (of
 * THREAD_POOL_MAX_WORKERS): the rest wait on the backend's own queue and
 * are run by its busy workers as they finish, and the other backends keep
 * the remaining workers.
 */
#include "qemu/osdep.h"
#include "qemu/defer-call.h"
#include "qemu/event_notifier.h"
#include "block/block_int.h"
#include "block/engine.h"

typedef struct ThreadPoolClient {
    BlockEngine common;
    EventNotifier notifier;
    GMutex lock;
    QSIMPLEQ_HEAD(, BlockAIOCB) done;   /* protected by lock */
} ThreadPoolClient;

static GThreadPool *thread_pool_workers;

void (*thread_pool_test_hook)(BlockAIOCB *acb);

/* Main thread (blk_open). */
void thread_pool_blk_init(BlockBackend *blk)
{
    g_mutex_init(&blk->pool_lock);
    QSIMPLEQ_INIT(&blk->pool_waiting);
}

/* Main thread (blk_close): no request in flight. */
void thread_pool_blk_cleanup(BlockBackend *blk)
{
    g_mutex_clear(&blk->pool_lock);
}

/* Worker: hand @acb's result to its client's context. */
static void thread_pool_done(BlockAIOCB *acb)
{
    ThreadPoolClient *c = (ThreadPoolClient *)(uintptr_t)acb->engine_priv[0];

    g_mutex_lock(&c->lock);
    QSIMPLEQ_INSERT_TAIL(&c->done, acb, next);
    g_mutex_unlock(&c->lock);
    event_notifier_set(&c->notifier);
}

/*
 * Run @data, then the requests of the same backend that wait for a share
 * of the pool, one after the other in this worker: the backend keeps at
 * most THREAD_POOL_MAX_PER_BACKEND workers without another push.
 */
static void thread_pool_worker(gpointer data, gpointer unused)
{
    BlockAIOCB *acb = data;

    while (acb) {
        BlockBackend *blk = acb->blk;
        BlockAIOCB *next;

        if (unlikely(thread_pool_test_hook)) {
            thread_pool_test_hook(acb);
        }
        acb->ret = acb->target->run(acb);

        g_mutex_lock(&blk->pool_lock);
        next = QSIMPLEQ_FIRST(&blk->pool_waiting);
        if (next) {
            QSIMPLEQ_REMOVE_HEAD(&blk->pool_waiting, next);
        } else {
            blk->pool_running--;
        }
        g_mutex_unlock(&blk->pool_lock);
        /* Once @acb completes @blk may be closed, unless @next holds it:
         * nothing below touches @blk. */
        thread_pool_done(acb);
        acb = next;
    }
}

static gpointer thread_pool_workers_new(gpointer unused)
{
    thread_pool_workers = g_thread_pool_new(thread_pool_worker, NULL,
                                            THREAD_POOL_MAX_WORKERS, FALSE,
                                            NULL);
    return thread_pool_workers;
}

/* Owner thread: complete everything the workers finished. */
static void thread_pool_completion_cb(void *opaque)
{
    ThreadPoolClient *c = opaque;
    QSIMPLEQ_HEAD(, BlockAIOCB) batch = QSIMPLEQ_HEAD_INITIALIZER(batch);
    BlockAIOCB *acb, *tmp;

    event_notifier_test_and_clear(&c->notifier);
    g_mutex_lock(&c->lock);
    QSIMPLEQ_CONCAT(&batch, &c->done);
    g_mutex_unlock(&c->lock);

    defer_call_begin();
    QSIMPLEQ_FOREACH_SAFE(acb, &batch, next, tmp) {
        c->common.stats.completions++;
        c->common.stats.completions_direct++;
        blk_acb_complete(acb, acb->ret);
    }
    defer_call_end();
}

static BlockEngine *thread_pool_create(AioContext *ctx, GError **errp)
{
    static GOnce once = G_ONCE_INIT;
    ThreadPoolClient *c;
    int ret;

    if (!g_once(&once, thread_pool_workers_new, NULL)) {
        g_set_error(errp, VB_ERROR, 0, "cannot create the I/O thread pool");
        return NULL;
    }
    c = g_new0(ThreadPoolClient, 1);
    ret = event_notifier_init(&c->notifier, false);
    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0,
                    "cannot create an eventfd for the thread pool: %s",
                    g_strerror(-ret));
        g_free(c);
        return NULL;
    }
    g_mutex_init(&c->lock);
    QSIMPLEQ_INIT(&c->done);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&c->notifier),
                       thread_pool_completion_cb, NULL, NULL, NULL, c);
    return &c->common;
}

static void thread_pool_cleanup(void *opaque)
{
    ThreadPoolClient *c = opaque;

    aio_set_fd_handler(c->common.ctx, event_notifier_get_fd(&c->notifier),
                       NULL, NULL, NULL, NULL, NULL);
    event_notifier_cleanup(&c->notifier);
    g_mutex_clear(&c->lock);
    g_free(c);
}

/* Run @acb in a worker now, or after the backend's running ones. */
static void thread_pool_enqueue(ThreadPoolClient *c, BlockAIOCB *acb)
{
    BlockBackend *blk = acb->blk;
    bool run;

    acb->engine_priv[0] = (uintptr_t)c;
    g_mutex_lock(&blk->pool_lock);
    run = blk->pool_running < THREAD_POOL_MAX_PER_BACKEND;
    if (run) {
        blk->pool_running++;
    } else {
        /* The backend has its share: a worker of it picks this up. */
        QSIMPLEQ_INSERT_TAIL(&blk->pool_waiting, acb, next);
    }
    g_mutex_unlock(&blk->pool_lock);
    if (run) {
        c->common.stats.submit_syscalls++;  /* one worker wake-up */
        g_thread_pool_push(thread_pool_workers, acb, NULL);
    }
}

static void thread_pool_submit(BlockEngine *e, BlockAIOCB *acb)
{
    ThreadPoolClient *c = container_of(e, ThreadPoolClient, common);

    if (acb->type == BLK_REQ_WRITE && (acb->flags & BDRV_REQ_FUA)) {
        c->common.stats.fua_writes++;   /* pwritev2(RWF_DSYNC) */
    }
    thread_pool_enqueue(c, acb);
}

/* Owner thread of the current context. */
void thread_pool_forward(BlockAIOCB *acb)
{
    AioContext *ctx = qemu_get_current_aio_context();
    BlockEngine *e = blk_engine_get(ctx, &thread_pool_engine_ops, NULL);

    if (!e) {
        blk_complete_later(ctx, acb, -EIO);
        return;
    }
    e->stats.requests++;
    thread_pool_submit(e, acb);
}

static AioLocalKey thread_pool_key;

const BlockEngineOps thread_pool_engine_ops = {
    .name = "threads",
    .key = &thread_pool_key,
    .create = thread_pool_create,
    .cleanup = thread_pool_cleanup,
    .submit = thread_pool_submit,
};
