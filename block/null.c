/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The null driver and its engine: completes requests without touching
 * storage (reads zero-filled on request), from one bottom half per
 * AioContext, to measure the overhead of everything else.  The engine also
 * completes requests that the block layer rejected before they reached a
 * driver, whatever the driver.
 *
 * Owner thread only: submission queues the request on a singly linked list
 * (no allocation) and schedules the BH; the BH completes the whole list
 * inside one defer_call section.
 */
#include "qemu/osdep.h"
#include "qemu/defer-call.h"
#include "block/block_int.h"

typedef struct NullEngine {
    BlockEngine common;
    QEMUBH *bh;
    QSIMPLEQ_HEAD(, BlockAIOCB) done;   /* completed from the BH */
} NullEngine;

static void null_bh(void *opaque)
{
    NullEngine *s = opaque;
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

static BlockEngine *null_create(AioContext *ctx, GError **errp)
{
    NullEngine *s = g_new0(NullEngine, 1);

    s->bh = aio_bh_new(ctx, null_bh, s, "null-completion");
    QSIMPLEQ_INIT(&s->done);
    return &s->common;
}

/*
 * The engine of the context this thread last submitted from: the lookup
 * (blk_engine_get(), then the context's slot) is two calls per request
 * otherwise.  A context's engines are freed by its owner thread (the
 * only one that submits from it), which clears its own cache then.
 */
static __thread AioContext *null_cached_ctx;
static __thread NullEngine *null_cached;

static void null_cleanup(void *opaque)
{
    NullEngine *s = opaque;

    if (null_cached == s) {
        null_cached = NULL;
        null_cached_ctx = NULL;
    }
    qemu_bh_delete(s->bh);
    g_free(s);
}

/* Owner thread of @ctx. */
static inline NullEngine *null_engine(AioContext *ctx)
{
    BlockEngine *e;

    if (likely(ctx == null_cached_ctx)) {
        return null_cached;
    }
    e = blk_engine_get(ctx, &null_engine_ops, NULL);
    null_cached_ctx = ctx;
    null_cached = container_of(e, NullEngine, common);
    return null_cached;
}

static void null_enqueue(NullEngine *s, BlockAIOCB *acb, int ret)
{
    acb->ret = ret;
    QSIMPLEQ_INSERT_TAIL(&s->done, acb, next);
    if (!qemu_bh_is_scheduled(s->bh)) {
        s->common.stats.bh_scheduled++;
        qemu_bh_schedule(s->bh);
    }
}

static void null_submit(BlockEngine *e, BlockAIOCB *acb)
{
    NullEngine *s = container_of(e, NullEngine, common);

    if (acb->type == BLK_REQ_READ) {
        if (*(bool *)acb->blk->opaque) {     /* read-zeroes=on */
            for (int i = 0; i < acb->niov; i++) {
                memset(acb->iov[i].iov_base, 0, acb->iov[i].iov_len);
            }
        }
    } else if (acb->flags & BDRV_REQ_FUA) {
        s->common.stats.fua_writes++;
    }
    null_enqueue(s, acb, 0);
}

/* Owner thread of @ctx. */
void null_complete_later(AioContext *ctx, BlockAIOCB *acb, int ret)
{
    BlockEngine *e = blk_engine_get(ctx, &null_engine_ops, NULL);

    null_enqueue(container_of(e, NullEngine, common), acb, ret);
}

/* Owner thread of @ctx. */
bool null_engine_get_stats(AioContext *ctx, BlockEngineStats *stats)
{
    BlockEngine *e = aio_get_engine(ctx, AIO_ENGINE_NULL);

    if (!e) {
        return false;
    }
    *stats = e->stats;
    return true;
}

/* Main thread. */
static bool null_open(BlockBackend *bs, const BlockOptions *opts,
                      GError **errp)
{
    if (opts->size == 0) {
        g_set_error(errp, VB_ERROR, 0,
                    "driver=null needs a size (for example size=1G)");
        return false;
    }
    bs->opaque = g_new(bool, 1);
    *(bool *)bs->opaque = opts->null_read_zeroes;
    bs->size = opts->size;
    bs->bl.can_discard = true;
    bs->bl.can_write_zeroes = true;
    bs->filename = g_strdup("null");
    return true;
}

static void null_close(BlockBackend *bs)
{
    g_free(bs->opaque);
}

/* Owner thread of @ctx: every request type. */
static void null_drv_submit(BlockBackend *bs, AioContext *ctx,
                            BlockAIOCB *acb)
{
    NullEngine *s = null_engine(ctx);

    s->common.stats.requests++;
    null_submit(&s->common, acb);
}

static bool null_attach_aio_context(BlockBackend *bs, AioContext *ctx,
                                    GError **errp)
{
    return blk_engine_get(ctx, &null_engine_ops, errp) != NULL;
}

const BlockDriver bdrv_null = {
    .format_name = "null",
    .bdrv_open = null_open,
    .bdrv_close = null_close,
    .bdrv_attach_aio_context = null_attach_aio_context,
    .bdrv_aio_preadv = null_drv_submit,
    .bdrv_aio_pwritev = null_drv_submit,
    .bdrv_aio_flush = null_drv_submit,
    .bdrv_aio_pdiscard = null_drv_submit,
    .bdrv_aio_pwrite_zeroes = null_drv_submit,
};

const BlockEngineOps null_engine_ops = {
    .name = "null",
    .slot = AIO_ENGINE_NULL,
    .create = null_create,
    .cleanup = null_cleanup,
    .submit = null_submit,
};
