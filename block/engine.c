/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Engines: the per-context lookup of engine instances, the helpers every
 * engine uses to finish a request (bounce buffers, short transfers), and
 * the "bh" engine, which completes requests from a bottom half: requests
 * rejected before they reach storage, and those of drivers that have
 * nothing to wait for (null).
 *
 * An engine instance lives in its AioContext under the engine's own
 * AioLocalKey: a lookup is a load and an array index, no lock.  Every
 * engine that has been created once is remembered (in creation order) so
 * that the statistics can be listed without naming any engine.
 *
 * Threads: everything here runs in the owner thread of the context
 * concerned, except the list of engines ever created, which the control
 * path reads under engine_list_lock.
 */
#include "qemu/osdep.h"
#include "qemu/defer-call.h"
#include "qemu/error-report.h"
#include "block/block_int.h"
#include "block/engine.h"
#include "block/dirty-bitmap.h"

/*
 * Engines created at least once, in order; for the statistics.  A
 * pthread mutex rather than a GMutex: GLib's is built on futexes that
 * ThreadSanitizer cannot see, so two iothreads creating their first
 * engine at once were reported as a race (and killed the TSan build).
 */
static pthread_mutex_t engine_list_lock = PTHREAD_MUTEX_INITIALIZER;
static const BlockEngineOps *engine_list[AIO_LOCAL_MAX];
static unsigned int engine_list_len;

static void blk_engine_remember(const BlockEngineOps *ops)
{
    pthread_mutex_lock(&engine_list_lock);
    for (unsigned int i = 0; i < engine_list_len; i++) {
        if (engine_list[i] == ops) {
            pthread_mutex_unlock(&engine_list_lock);
            return;
        }
    }
    assert(engine_list_len < G_N_ELEMENTS(engine_list));
    engine_list[engine_list_len++] = ops;
    pthread_mutex_unlock(&engine_list_lock);
}

/* Owner thread of @ctx. */
BlockEngine *blk_engine_get(AioContext *ctx, const BlockEngineOps *ops,
                            GError **errp)
{
    BlockEngine *e = aio_local_get(ctx, ops->key);

    if (likely(e)) {
        return e;
    }
    e = ops->create(ctx, errp);
    if (!e) {
        return NULL;
    }
    e->ops = ops;
    e->ctx = ctx;
    blk_engine_remember(ops);
    aio_local_set(ctx, ops->key, e, ops->cleanup);
    return e;
}

/* Owner thread of @ctx. */
BlockEngine *blk_engine_get_or_pool(AioContext *ctx,
                                    const BlockEngineOps *ops)
{
    BlockEngine *e = blk_engine_get(ctx, ops, NULL);

    if (unlikely(!e)) {
        static gsize warned;
        if (g_once_init_enter(&warned)) {
            g_once_init_leave(&warned, 1);
            warn_report("cannot create the %s engine in this thread; using "
                        "the thread pool", ops->name);
        }
        e = blk_engine_get(ctx, &thread_pool_engine_ops, NULL);
    }
    return e;
}

/* Any thread. */
const char *blk_aio_mode_name(BlockAioMode mode)
{
    switch (mode) {
    case BLOCK_AIO_IO_URING:
        return "io_uring";
    case BLOCK_AIO_NATIVE:
        return "native";
    case BLOCK_AIO_THREADS:
        return "threads";
    }
    return "unknown";
}

/* Any thread. */
bool blk_aio_mode_parse(const char *s, BlockAioMode *mode)
{
    if (!s) {
        return false;
    }
    if (!strcmp(s, "io_uring")) {
        *mode = BLOCK_AIO_IO_URING;
    } else if (!strcmp(s, "native")) {
        *mode = BLOCK_AIO_NATIVE;
    } else if (!strcmp(s, "threads")) {
        *mode = BLOCK_AIO_THREADS;
    } else {
        return false;
    }
    return true;
}

/* Owner thread of @ctx.  Engines are named after the aio mode they
 * serve. */
bool blk_engine_get_stats(AioContext *ctx, BlockAioMode mode,
                          BlockEngineStats *stats)
{
    return blk_engine_get_stats_by_name(ctx, blk_aio_mode_name(mode), stats);
}

/* Owner thread of @ctx. */
void blk_engine_foreach_stats(AioContext *ctx,
                              void (*fn)(void *opaque, const char *name,
                                         const BlockEngineStats *stats),
                              void *opaque)
{
    const BlockEngineOps *list[AIO_LOCAL_MAX];
    unsigned int n;

    pthread_mutex_lock(&engine_list_lock);
    n = engine_list_len;
    memcpy(list, engine_list, n * sizeof(list[0]));
    pthread_mutex_unlock(&engine_list_lock);
    for (unsigned int i = 0; i < n; i++) {
        BlockEngine *e = aio_local_get(ctx, list[i]->key);

        if (e) {
            fn(opaque, list[i]->name, &e->stats);
        }
    }
}

typedef struct EngineFind {
    const char *name;
    BlockEngineStats *stats;
    bool found;
} EngineFind;

static void blk_engine_find_cb(void *opaque, const char *name,
                               const BlockEngineStats *stats)
{
    EngineFind *f = opaque;

    if (!f->found && !strcmp(name, f->name)) {
        *f->stats = *stats;
        f->found = true;
    }
}

/* Owner thread of @ctx. */
bool blk_engine_get_stats_by_name(AioContext *ctx, const char *name,
                                  BlockEngineStats *stats)
{
    EngineFind f = { .name = name, .stats = stats };

    blk_engine_foreach_stats(ctx, blk_engine_find_cb, &f);
    return f.found;
}

/* ---- finishing a request -------------------------------------------- */

/* Engine thread: the bounce buffer and the callback.  Inline: the
 * path of every request. */
static inline void blk_acb_do_finish(BlockAIOCB *acb, int ret)
{
    if (unlikely(acb->bounce)) {
        if (ret == 0 && acb->type == BLK_REQ_READ) {
            size_t copied = 0;
            for (int i = 0; i < acb->niov; i++) {
                memcpy(acb->iov[i].iov_base, (char *)acb->bounce + copied,
                       acb->iov[i].iov_len);
                copied += acb->iov[i].iov_len;
            }
        }
        free(acb->bounce);
        acb->bounce = NULL;
    }
    acb->cb(acb->opaque, ret);
}

/* Engine thread. */
void blk_acb_complete(BlockAIOCB *acb, int ret)
{
    if (unlikely(acb->flags & BDRV_REQ_DIRTY_TRACKED) &&
        bdrv_dirty_mark_complete(acb, ret)) {
        return;     /* a write-blocking mirror finishes it later */
    }
    blk_acb_do_finish(acb, ret);
}

/* Engine thread. */
void blk_acb_finish(BlockAIOCB *acb, int ret)
{
    blk_acb_do_finish(acb, ret);
}

/* Engine thread. */
bool blk_acb_remainder(BlockAIOCB *acb, void **base, size_t *len)
{
    int niov, i;
    struct iovec *iov = blk_acb_iov(acb, &niov);
    size_t skip = acb->done;

    for (i = 0; i < niov && skip >= iov[i].iov_len; i++) {
        skip -= iov[i].iov_len;
    }
    if (i >= niov || acb->done + (iov[i].iov_len - skip) != acb->bytes) {
        return false;
    }
    *base = (char *)iov[i].iov_base + skip;
    *len = iov[i].iov_len - skip;
    return true;
}

/* Engine thread: account a (possibly short) read/write transfer. */
BlockXferNext blk_acb_transferred(BlockAIOCB *acb, int res, int *ret)
{
    int niov, i;
    struct iovec *iov;
    size_t skip;
    void *base;
    size_t len;

    *ret = 0;
    if (res < 0) {
        *ret = res;
        return BLK_XFER_COMPLETE;
    }
    acb->done += res;
    if (likely(acb->done >= acb->bytes)) {
        return BLK_XFER_COMPLETE;
    }
    if (res > 0) {
        return blk_acb_remainder(acb, &base, &len) ? BLK_XFER_RESUBMIT
                                                     : BLK_XFER_FORWARD;
    }
    /* No progress at all: the end of the file or device. */
    if (acb->type == BLK_REQ_WRITE) {
        *ret = -ENOSPC;
    } else if (!acb->target->eof_reads_zeroes) {
        *ret = -EIO;
    } else {
        /* The file shrank under us: the missing part reads as zeroes. */
        iov = blk_acb_iov(acb, &niov);
        skip = acb->done;
        for (i = 0; i < niov; i++) {
            if (skip >= iov[i].iov_len) {
                skip -= iov[i].iov_len;
                continue;
            }
            memset((char *)iov[i].iov_base + skip, 0, iov[i].iov_len - skip);
            skip = 0;
        }
        acb->done = acb->bytes;
    }
    return BLK_XFER_COMPLETE;
}

/* ---- the "bh" engine: complete from a bottom half -------------------- */

/*
 * Owner thread only: a completion queues the request on a singly linked
 * list (no allocation) and schedules the BH; the BH completes the whole
 * list inside one defer_call section.
 */
typedef struct BhEngine {
    BlockEngine common;
    QEMUBH *bh;
    QSIMPLEQ_HEAD(, BlockAIOCB) done;   /* completed from the BH */
} BhEngine;

static AioLocalKey bh_engine_key;

static void bh_engine_bh(void *opaque)
{
    BhEngine *s = opaque;
    QSIMPLEQ_HEAD(, BlockAIOCB) batch = QSIMPLEQ_HEAD_INITIALIZER(batch);
    BlockAIOCB *acb, *tmp;

    /* Callbacks may queue more: those wait for the next BH run. */
    QSIMPLEQ_CONCAT(&batch, &s->done);
    defer_call_begin();
    QSIMPLEQ_FOREACH_SAFE(acb, &batch, next, tmp) {
        s->common.stats.completions++;
        s->common.stats.completions_bh++;
        blk_acb_complete(acb, acb->ret);
    }
    defer_call_end();
}

static BlockEngine *bh_engine_create(AioContext *ctx, GError **errp)
{
    BhEngine *s = g_new0(BhEngine, 1);

    s->bh = aio_bh_new(ctx, bh_engine_bh, s, "blk-complete-later");
    QSIMPLEQ_INIT(&s->done);
    return &s->common;
}

/*
 * The engine of the context this thread last completed in: the lookup is
 * two calls per request otherwise (the null driver's whole cost).  A
 * context's engines are freed by its owner thread (the only one that
 * submits from it), which clears its own cache then.
 */
static __thread AioContext *bh_cached_ctx;
static __thread BhEngine *bh_cached;

static void bh_engine_cleanup(void *opaque)
{
    BhEngine *s = opaque;

    if (bh_cached == s) {
        bh_cached = NULL;
        bh_cached_ctx = NULL;
    }
    qemu_bh_delete(s->bh);
    g_free(s);
}

static void bh_engine_submit(BlockEngine *e, BlockAIOCB *acb)
{
    BhEngine *s = container_of(e, BhEngine, common);

    s->common.stats.requests++;
    QSIMPLEQ_INSERT_TAIL(&s->done, acb, next);
    if (!qemu_bh_is_scheduled(s->bh)) {
        s->common.stats.bh_scheduled++;
        qemu_bh_schedule(s->bh);
    }
}

static const BlockEngineOps bh_engine_ops = {
    .name = "bh",
    .key = &bh_engine_key,
    .create = bh_engine_create,
    .cleanup = bh_engine_cleanup,
    .submit = bh_engine_submit,
};

/* Owner thread of @ctx. */
void blk_complete_later(AioContext *ctx, BlockAIOCB *acb, int ret)
{
    BhEngine *s;

    if (likely(ctx == bh_cached_ctx)) {
        s = bh_cached;
    } else {
        /* Creating it allocates nothing that can fail but memory. */
        s = container_of(blk_engine_get(ctx, &bh_engine_ops, NULL),
                         BhEngine, common);
        bh_cached_ctx = ctx;
        bh_cached = s;
    }
    acb->ret = ret;
    bh_engine_submit(&s->common, acb);
}
