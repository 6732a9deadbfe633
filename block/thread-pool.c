/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The thread pool engine: the slow, always available path.  Process-wide
 * worker threads run each request's acb->target->run (the driver's
 * synchronous code, e.g. file-posix's preadv, fdatasync or fallocate
 * calls); each AioContext has a
 * client whose lock-protected completion list is drained by an EventNotifier
 * handler in that context.
 *
 * Threads: submission and completion in the owner thread of the client's
 * context; the target's function and the list append in worker threads.
 * Locking is accepted here: the fast engines are io_uring and linux-aio.
 *
 * Sharing: every export of the process uses the same workers, and some
 * requests take long (a huge write-zeroes that falls back to writing a
 * zero buffer, I/O on a hung network file).  So one backend runs at most
 * THREAD_POOL_MAX_PER_BACKEND requests at a time (of
 * THREAD_POOL_MAX_WORKERS): the rest wait on the backend's own queue and
 * are run by its busy workers as they finish, and the other backends keep
 * the remaining workers.
 *
 * Workers are threads of our own, in two sets that never mix: one for the
 * contexts of iothreads under the seccomp filter (--seccomp on), one for
 * every other context.  A set's threads are created, when none is idle,
 * by the thread that submits (the filter is inherited by the threads a
 * filtered thread creates), so the file I/O of a confined iothread always
 * runs confined, and an unconfined context never gets a confined worker.
 * GLib's shared pool could not promise either: its threads are created by
 * whichever thread pushes and are reused by every non-exclusive pool of
 * the process (librbd's control work included).  They never exit.
 */
#include "qemu/osdep.h"
#include "qemu/defer-call.h"
#include "qemu/error-report.h"
#include "qemu/event_notifier.h"
#include "block/block_int.h"
#include "block/engine.h"
#include "qemu/sandbox.h"

typedef struct ThreadPoolClient {
    BlockEngine common;
    EventNotifier notifier;
    pthread_mutex_t lock;
    QSIMPLEQ_HEAD(, BlockAIOCB) done;   /* protected by lock */
    /* The owner thread is confined: which set runs its requests.  Set by
     * the owner before each enqueue, read by workers under the
     * backend's pool_lock. */
    bool confined;
} ThreadPoolClient;

/*
 * One set of workers (see the top of the file).  Its locks, the clients'
 * and the backends' pool_lock are pthread's, not GLib's: a GMutex is
 * built on futexes ThreadSanitizer cannot see, and it reported the
 * workers' use of these counters as races (a mirror's block status from
 * the main thread, beside an iothread's requests).
 */
typedef struct ThreadPoolWorkers {
    bool confined;              /* under the iothread seccomp filter */
    const char *name;           /* of its threads */
    pthread_mutex_t lock;
    pthread_cond_t cond;        /* a request was queued */
    QSIMPLEQ_HEAD(, BlockAIOCB) queue;  /* lock */
    unsigned int queued;        /* lock: length of queue */
    unsigned int idle;          /* lock: threads waiting for a request */
    unsigned int threads;       /* lock: threads started */
} ThreadPoolWorkers;

static ThreadPoolWorkers thread_pool_sets[2];

void (*thread_pool_test_hook)(BlockAIOCB *acb);

/* Main thread (blk_open). */
void thread_pool_blk_init(BlockBackend *blk)
{
    pthread_mutex_init(&blk->pool_lock, NULL);
    QSIMPLEQ_INIT(&blk->pool_waiting);
}

/* Main thread (blk_close): no request in flight. */
void thread_pool_blk_cleanup(BlockBackend *blk)
{
    pthread_mutex_destroy(&blk->pool_lock);
}

/* Worker: hand @acb's result to its client's context. */
static void thread_pool_done(BlockAIOCB *acb)
{
    ThreadPoolClient *c = (ThreadPoolClient *)(uintptr_t)acb->engine_priv[0];

    pthread_mutex_lock(&c->lock);
    QSIMPLEQ_INSERT_TAIL(&c->done, acb, next);
    pthread_mutex_unlock(&c->lock);
    event_notifier_set(&c->notifier);
}

static void thread_pool_workers_queue(ThreadPoolWorkers *w,
                                      BlockAIOCB *acb);

/*
 * Under @blk's pool_lock: the first waiting request of @blk whose context
 * is confined as @confined says, else NULL and *@other the first waiting
 * one (of the other set), if any; taken off the queue.
 */
static BlockAIOCB *thread_pool_take_waiting(BlockBackend *blk, bool confined,
                                            BlockAIOCB **other)
{
    BlockAIOCB *acb, **link = &blk->pool_waiting.sqh_first;

    *other = NULL;
    while ((acb = *link)) {
        ThreadPoolClient *c =
            (ThreadPoolClient *)(uintptr_t)acb->engine_priv[0];

        if (c->confined == confined) {
            /* Unlink it (the queue has no removal but at the head). */
            *link = acb->next.sqe_next;
            if (!*link) {
                blk->pool_waiting.sqh_last = link;
            }
            return acb;
        }
        link = &acb->next.sqe_next;
    }
    acb = QSIMPLEQ_FIRST(&blk->pool_waiting);
    if (acb) {
        QSIMPLEQ_REMOVE_HEAD(&blk->pool_waiting, next);
        *other = acb;
    }
    return NULL;
}

/*
 * Run @data, then the requests of the same backend that wait for a share
 * of the pool, one after the other in this worker of @opaque's set: the
 * backend keeps at most THREAD_POOL_MAX_PER_BACKEND workers without
 * another push.  A waiting request of the other set's (a backend used by
 * a confined and an unconfined context) is handed to that set, with this
 * worker's share: it never runs here.
 */
static void thread_pool_worker(gpointer data, gpointer opaque)
{
    ThreadPoolWorkers *w = opaque;
    BlockAIOCB *acb = data;

    while (acb) {
        BlockBackend *blk = acb->blk;
        BlockAIOCB *next, *other;

        if (unlikely(thread_pool_test_hook)) {
            thread_pool_test_hook(acb);
        }
        acb->ret = acb->target->run(acb);

        pthread_mutex_lock(&blk->pool_lock);
        next = thread_pool_take_waiting(blk, w->confined, &other);
        if (!next && !other) {
            blk->pool_running--;
        }
        pthread_mutex_unlock(&blk->pool_lock);
        /* Once @acb completes @blk may be closed, unless @next or @other
         * holds it: nothing below touches @blk. */
        thread_pool_done(acb);
        if (other) {
            thread_pool_workers_queue(&thread_pool_sets[!w->confined], other);
        }
        acb = next;
    }
}

/* A worker thread of @opaque's set: requests in order, forever. */
static gpointer thread_pool_thread(gpointer opaque)
{
    ThreadPoolWorkers *w = opaque;

    if (w->confined) {
        sandbox_thread_set_confined();  /* inherited from its creator */
    }
    pthread_mutex_lock(&w->lock);
    for (;;) {
        BlockAIOCB *acb;

        w->idle++;
        while (QSIMPLEQ_EMPTY(&w->queue)) {
            pthread_cond_wait(&w->cond, &w->lock);
        }
        w->idle--;
        acb = QSIMPLEQ_FIRST(&w->queue);
        QSIMPLEQ_REMOVE_HEAD(&w->queue, next);
        w->queued--;
        pthread_mutex_unlock(&w->lock);
        thread_pool_worker(acb, w);
        pthread_mutex_lock(&w->lock);
    }
    return NULL;
}

/* Any thread: queue @acb for @w's workers, starting none (@w has one:
 * thread_pool_enqueue() sees to it). */
static void thread_pool_workers_queue(ThreadPoolWorkers *w, BlockAIOCB *acb)
{
    pthread_mutex_lock(&w->lock);
    QSIMPLEQ_INSERT_TAIL(&w->queue, acb, next);
    w->queued++;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/*
 * Owner thread of a context: run @acb (NULL: nothing, only make sure the
 * set has a worker) in a worker of the set that matches this thread's
 * confinement, starting one if every worker is busy (from this thread:
 * it inherits our filter, or our lack of one).
 */
static void thread_pool_workers_push(BlockAIOCB *acb)
{
    ThreadPoolWorkers *w = &thread_pool_sets[sandbox_thread_confined()];
    bool start = false;
    GError *err = NULL;
    GThread *t;

    pthread_mutex_lock(&w->lock);
    if (acb) {
        QSIMPLEQ_INSERT_TAIL(&w->queue, acb, next);
        w->queued++;
    }
    if ((acb ? w->queued > w->idle : w->threads == 0) &&
        w->threads < THREAD_POOL_MAX_WORKERS) {
        w->threads++;
        start = true;
    } else if (acb) {
        pthread_cond_signal(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
    if (!start) {
        return;
    }
    t = g_thread_try_new(w->name, thread_pool_thread, w, &err);
    if (t) {
        g_thread_unref(t);
        return;
    }
    pthread_mutex_lock(&w->lock);
    w->threads--;
    start = w->threads == 0;
    pthread_mutex_unlock(&w->lock);
    if (start) {
        /* No worker at all: nothing else would ever run the queue. */
        warn_report("cannot start an I/O worker thread (%s): running the "
                    "request in the submitting thread", err->message);
        pthread_mutex_lock(&w->lock);
        while ((acb = QSIMPLEQ_FIRST(&w->queue))) {
            QSIMPLEQ_REMOVE_HEAD(&w->queue, next);
            w->queued--;
            pthread_mutex_unlock(&w->lock);
            thread_pool_worker(acb, w);
            pthread_mutex_lock(&w->lock);
        }
        pthread_mutex_unlock(&w->lock);
    }
    g_error_free(err);
}

static void thread_pool_workers_new(void)
{
    for (int i = 0; i < 2; i++) {
        ThreadPoolWorkers *w = &thread_pool_sets[i];

        w->confined = i;
        w->name = i ? "pool-io-confined" : "pool-io";
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
        QSIMPLEQ_INIT(&w->queue);
    }
}

/* Owner thread: complete everything the workers finished. */
static void thread_pool_completion_cb(void *opaque)
{
    ThreadPoolClient *c = opaque;
    QSIMPLEQ_HEAD(, BlockAIOCB) batch = QSIMPLEQ_HEAD_INITIALIZER(batch);
    BlockAIOCB *acb, *tmp;

    event_notifier_test_and_clear(&c->notifier);
    pthread_mutex_lock(&c->lock);
    QSIMPLEQ_CONCAT(&batch, &c->done);
    pthread_mutex_unlock(&c->lock);

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
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    ThreadPoolClient *c;
    int ret;

    pthread_once(&once, thread_pool_workers_new);
    c = g_new0(ThreadPoolClient, 1);
    ret = event_notifier_init(&c->notifier, false);
    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0,
                    "cannot create an eventfd for the thread pool: %s",
                    g_strerror(-ret));
        g_free(c);
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
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
    pthread_mutex_destroy(&c->lock);
    g_free(c);
}

/* Run @acb in a worker now, or after the backend's running ones. */
static void thread_pool_enqueue(ThreadPoolClient *c, BlockAIOCB *acb)
{
    BlockBackend *blk = acb->blk;
    bool run, confined;

    acb->engine_priv[0] = (uintptr_t)c;
    confined = sandbox_thread_confined();
    if (unlikely(c->confined != confined)) {
        /* Written once, before workers can see a request of @c waiting
         * (the thread confines itself before it serves a queue); never
         * rewritten with the same value under their reads. */
        c->confined = confined;
    }
    pthread_mutex_lock(&blk->pool_lock);
    run = blk->pool_running < THREAD_POOL_MAX_PER_BACKEND;
    if (run) {
        blk->pool_running++;
    } else {
        /* The backend has its share: a worker of it picks this up. */
        QSIMPLEQ_INSERT_TAIL(&blk->pool_waiting, acb, next);
    }
    pthread_mutex_unlock(&blk->pool_lock);
    if (run) {
        c->common.stats.submit_syscalls++;  /* one worker wake-up */
        thread_pool_workers_push(acb);
    } else {
        /* A worker of the other set may hand this to ours: have one
         * (under the set's lock: this is the backend-is-busy path). */
        thread_pool_workers_push(NULL);
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
