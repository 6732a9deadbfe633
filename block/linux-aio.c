/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The linux-aio engine (libaio): one kernel AIO context per AioContext.
 *
 * Theory of operation: each request's struct iocb lives in its BlockAIOCB
 * (engine_priv), so queuing allocates nothing.  Requests wait on a pending
 * list until the end of the defer_call section, then go to the kernel with
 * one io_submit() (early if the batch reaches LAIO_MAX_BATCH).  A partial
 * io_submit() leaves the rest queued; -EAGAIN keeps everything queued and
 * is retried after the next completions.
 *
 * Completions (the 2016 lesson): the eventfd handler and the busy-poll
 * handler read events straight from the AIO ring that the kernel maps into
 * user space (no io_getevents() syscall) and run the callbacks directly.
 * At most LAIO_BUDGET events are handled per invocation; if events remain,
 * a completion BH is scheduled to continue, and it is cancelled as soon as
 * the ring has been drained, so the normal path has no BH at all.
 *
 * Every function runs in the owner thread of the engine's AioContext.
 */
#include "qemu/osdep.h"
#include <libaio.h>
#include "qemu/defer-call.h"
#include "qemu/event_notifier.h"
#include "block/block_int.h"
#include "block/engine.h"

#define LAIO_MAX_EVENTS 1024    /* in flight per context */
#define LAIO_MAX_BATCH  256     /* submit early beyond this */
#define LAIO_BUDGET     128     /* events per handler invocation */

static_assert(sizeof(struct iocb) <= sizeof(((BlockAIOCB *)0)->engine_priv),
              "struct iocb must fit in BlockAIOCB.engine_priv");

/* The user-visible completion ring behind an io_context_t (Linux ABI). */
typedef struct LaioRing {
    unsigned id;
    unsigned nr;
    unsigned head;
    unsigned tail;
    unsigned magic;
    unsigned compat_features;
    unsigned incompat_features;
    unsigned header_length;
    struct io_event events[];
} LaioRing;

#define LAIO_RING_MAGIC 0xa10a10a1

typedef struct LaioState {
    BlockEngine common;
    io_context_t io_ctx;
    LaioRing *ring;             /* NULL: use io_getevents() */
    EventNotifier notifier;
    QEMUBH *completion_bh;
    QSIMPLEQ_HEAD(, BlockAIOCB) pending;    /* prepared, not submitted */
    unsigned n_pending;
    unsigned in_flight;
    struct iocb *iocbs[LAIO_MAX_EVENTS];
    struct io_event events[LAIO_BUDGET];   /* io_getevents() fallback */
} LaioState;

static inline struct iocb *laio_iocb(BlockAIOCB *acb)
{
    return (struct iocb *)acb->engine_priv;
}

static void laio_prep(LaioState *s, BlockAIOCB *acb)
{
    struct iocb *iocb = laio_iocb(acb);
    int fd = acb->target->fd;
    struct iovec *iov;
    int niov;
    void *base;
    size_t len;

    if (likely(acb->done == 0)) {
        iov = blk_acb_iov(acb, &niov);
        if (acb->type == BLK_REQ_READ) {
            io_prep_preadv(iocb, fd, iov, niov, acb->offset);
        } else {
            io_prep_pwritev2(iocb, fd, iov, niov, acb->offset,
                             (acb->flags & BDRV_REQ_FUA) ? RWF_DSYNC : 0);
            s->common.stats.fua_writes += !!(acb->flags & BDRV_REQ_FUA);
        }
    } else {
        /* Remainder of a short transfer: one segment (see caller). */
        if (!blk_acb_remainder(acb, &base, &len)) {
            abort();            /* internal invariant */
        }
        if (acb->type == BLK_REQ_READ) {
            io_prep_pread(iocb, fd, base, len, acb->offset + acb->done);
        } else {
            io_prep_pwrite(iocb, fd, base, len, acb->offset + acb->done);
            iocb->aio_rw_flags = (acb->flags & BDRV_REQ_FUA) ? RWF_DSYNC : 0;
        }
    }
    io_set_eventfd(iocb, event_notifier_get_fd(&s->notifier));
    iocb->data = acb;
}

static void laio_enqueue(LaioState *s, BlockAIOCB *acb)
{
    laio_prep(s, acb);
    QSIMPLEQ_INSERT_TAIL(&s->pending, acb, next);
    s->n_pending++;
}

static BlockAIOCB *laio_dequeue(LaioState *s)
{
    BlockAIOCB *acb = QSIMPLEQ_FIRST(&s->pending);

    QSIMPLEQ_REMOVE_HEAD(&s->pending, next);
    s->n_pending--;
    return acb;
}

/*
 * A FUA write the kernel refused for its RWF_DSYNC (aio_rw_flags needs
 * Linux 4.13): the thread pool writes it with a fallback instead.
 */
static bool laio_fua_unsupported(BlockAIOCB *acb, int res)
{
    return unlikely(acb->type == BLK_REQ_WRITE &&
                    (acb->flags & BDRV_REQ_FUA) &&
                    (res == -EINVAL || res == -EOPNOTSUPP));
}

/* Submit the pending requests, as many as the kernel takes. */
static void laio_flush(LaioState *s)
{
    while (!QSIMPLEQ_EMPTY(&s->pending) && s->in_flight < LAIO_MAX_EVENTS) {
        unsigned max = LAIO_MAX_EVENTS - s->in_flight;
        BlockAIOCB *acb = QSIMPLEQ_FIRST(&s->pending);
        int n = 0, ret;

        while (acb && (unsigned)n < max) {
            s->iocbs[n++] = laio_iocb(acb);
            acb = QSIMPLEQ_NEXT(acb, next);
        }
        ret = io_submit(s->io_ctx, n, s->iocbs);
        s->common.stats.submit_syscalls++;
        if (ret == -EAGAIN || ret == -EINTR) {
            /* Keep them queued; retried after completions (or the BH if
             * nothing is in flight to complete). */
            s->common.stats.retries++;
            if (s->in_flight == 0) {
                s->common.stats.bh_scheduled++;
                qemu_bh_schedule(s->completion_bh);
            }
            return;
        }
        if (ret < 0) {
            /* The first iocb is bad: fail it, go on with the rest. */
            acb = laio_dequeue(s);
            if (laio_fua_unsupported(acb, ret)) {
                s->common.stats.retries++;
                thread_pool_forward(acb);
            } else {
                blk_complete_later(s->common.ctx, acb, ret);
            }
            continue;
        }
        for (int i = 0; i < ret; i++) {
            laio_dequeue(s);
        }
        s->in_flight += ret;
        if (ret < n) {
            return;             /* partial: the rest stays queued */
        }
    }
}

static void laio_submit_cb(void *opaque)
{
    laio_flush(opaque);
}

static void laio_complete_one(LaioState *s, BlockAIOCB *acb, int res,
                              bool from_bh)
{
    int ret;

    if (unlikely(res == -EAGAIN || res == -EINTR)) {
        s->common.stats.retries++;
        laio_enqueue(s, acb);
        return;
    }
    if (laio_fua_unsupported(acb, res)) {
        s->common.stats.retries++;
        thread_pool_forward(acb);
        return;
    }
    switch (blk_acb_transferred(acb, res, &ret)) {
    case BLK_XFER_COMPLETE:
        break;
    case BLK_XFER_RESUBMIT:
        s->common.stats.retries++;
        laio_enqueue(s, acb);
        return;
    case BLK_XFER_FORWARD:
        s->common.stats.retries++;
        thread_pool_forward(acb);
        return;
    }
    s->common.stats.completions++;
    if (from_bh) {
        s->common.stats.completions_bh++;
    } else {
        s->common.stats.completions_direct++;
    }
    blk_acb_complete(acb, ret);
}

static bool laio_ring_empty(LaioState *s)
{
    if (!s->ring) {
        return s->in_flight == 0;  /* unknown without a syscall */
    }
    /* Pairs with the kernel's write barrier before it publishes tail. */
    return __atomic_load_n(&s->ring->tail, __ATOMIC_ACQUIRE) ==
           s->ring->head;
}

/* Handle up to @budget events from the mapped ring; returns how many. */
static int laio_reap_ring(LaioState *s, int budget, bool from_bh)
{
    LaioRing *ring = s->ring;
    unsigned nr = ring->nr;
    int done = 0;

    while (done < budget) {
        unsigned head = ring->head;
        unsigned tail = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
        struct io_event *ev;
        BlockAIOCB *acb;
        long res;

        if (head == tail) {
            break;
        }
        head %= nr;
        ev = &ring->events[head];
        acb = ev->data;
        res = (long)ev->res;
        /* Release the slot only after reading it; pairs with the kernel's
         * read of head in aio_complete(). */
        __atomic_store_n(&ring->head, (head + 1) % nr, __ATOMIC_RELEASE);
        s->in_flight--;
        done++;
        laio_complete_one(s, acb, (int)res, from_bh);
    }
    return done;
}

static int laio_reap_syscall(LaioState *s, int budget, bool from_bh)
{
    struct timespec zero = { 0, 0 };
    int n = io_getevents(s->io_ctx, 0, MIN(budget, LAIO_BUDGET), s->events,
                         &zero);

    for (int i = 0; i < n; i++) {
        s->in_flight--;
        laio_complete_one(s, s->events[i].data, (int)(long)s->events[i].res,
                          from_bh);
    }
    return MAX(n, 0);
}

static void laio_process_completions(LaioState *s, bool from_bh)
{
    int n;
    bool more;

    defer_call_begin();
    if (s->ring) {
        n = laio_reap_ring(s, LAIO_BUDGET, from_bh);
        more = n == LAIO_BUDGET && !laio_ring_empty(s);
    } else {
        n = laio_reap_syscall(s, LAIO_BUDGET, from_bh);
        more = n == LAIO_BUDGET;
    }
    if (more) {
        /* Budget used up: continue from a BH so other handlers run. */
        if (!qemu_bh_is_scheduled(s->completion_bh)) {
            s->common.stats.bh_scheduled++;
            qemu_bh_schedule(s->completion_bh);
        }
    } else {
        qemu_bh_cancel(s->completion_bh);   /* drained: no BH needed */
    }
    if (!QSIMPLEQ_EMPTY(&s->pending)) {
        defer_call(laio_submit_cb, s);
    }
    defer_call_end();
}

static void laio_completion_cb(void *opaque)
{
    LaioState *s = opaque;

    event_notifier_test_and_clear(&s->notifier);
    laio_process_completions(s, false);
}

static void laio_completion_bh(void *opaque)
{
    laio_process_completions(opaque, true);
}

static bool laio_poll_cb(void *opaque)
{
    LaioState *s = opaque;

    return s->ring && !laio_ring_empty(s);
}

static void laio_poll_ready(void *opaque)
{
    laio_process_completions(opaque, false);
}

static BlockEngine *laio_create(AioContext *ctx, GError **errp)
{
    LaioState *s = g_new0(LaioState, 1);
    int ret;

    ret = event_notifier_init(&s->notifier, false);
    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot create an eventfd: %s",
                    g_strerror(-ret));
        g_free(s);
        return NULL;
    }
    ret = io_setup(LAIO_MAX_EVENTS, &s->io_ctx);
    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0,
                    "io_setup(%d) failed: %s (check fs.aio-max-nr)",
                    LAIO_MAX_EVENTS, g_strerror(-ret));
        event_notifier_cleanup(&s->notifier);
        g_free(s);
        return NULL;
    }
    s->ring = (LaioRing *)s->io_ctx;
    if (s->ring->magic != LAIO_RING_MAGIC || s->ring->incompat_features) {
        s->ring = NULL;
    }
    QSIMPLEQ_INIT(&s->pending);
    s->common.ctx = ctx;
    s->completion_bh = aio_bh_new(ctx, laio_completion_bh, s,
                                  "linux-aio-completion");
    aio_set_fd_handler(ctx, event_notifier_get_fd(&s->notifier),
                       laio_completion_cb, NULL, laio_poll_cb,
                       laio_poll_ready, s);
    return &s->common;
}

static void laio_cleanup(void *opaque)
{
    LaioState *s = opaque;

    aio_set_fd_handler(s->common.ctx, event_notifier_get_fd(&s->notifier),
                       NULL, NULL, NULL, NULL, NULL);
    qemu_bh_delete(s->completion_bh);
    io_destroy(s->io_ctx);
    event_notifier_cleanup(&s->notifier);
    g_free(s);
}

static void laio_submit(BlockEngine *e, BlockAIOCB *acb)
{
    LaioState *s = container_of(e, LaioState, common);

    laio_enqueue(s, acb);
    if (!acb->blk->batch || s->n_pending >= LAIO_MAX_BATCH) {
        laio_flush(s);
    } else {
        defer_call(laio_submit_cb, s);     /* at once outside a section */
    }
}

/* Main thread (blk_open()): does this kernel have linux-aio? */
bool laio_probe(GError **errp)
{
    io_context_t c = 0;
    int ret = io_setup(1, &c);

    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "io_setup: %s", g_strerror(-ret));
        return false;
    }
    io_destroy(c);
    return true;
}

static AioLocalKey laio_key;

const BlockEngineOps laio_engine_ops = {
    .name = "native",
    .key = &laio_key,
    .create = laio_create,
    .cleanup = laio_cleanup,
    .submit = laio_submit,
};
