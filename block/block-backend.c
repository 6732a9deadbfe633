/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * BlockBackend: opening a node of the chosen driver and the request entry
 * points every driver shares.
 *
 * Theory of operation: blk_open() finds the driver in the registry
 * (block/driver.c; a module driver is loaded on first use), lets it open
 * the node and, when error injection is configured, puts a blkdebug
 * filter node on top whose child is that node.
 * blk_aio_*() fill the caller's BlockAIOCB, reject what can be rejected
 * cheaply and the same way for every driver (read-only node, out-of-bounds
 * request, misaligned offset or length) by completing it from a bottom
 * half, then make one indirect call: the top node's driver function for
 * the request type.  What happens next is the driver's business (see
 * include/block/block_int.h): file-posix routes to its engines, null
 * completes from a BH, rbd hands the request to librbd, blkdebug decides
 * and forwards to its child.
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/engine.h"
#include "block/dirty-bitmap.h"

/* Any thread. */
void blk_options_init(BlockOptions *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->driver = "file";
    opts->cache_direct = true;
    opts->batch = true;
}

/* A node of @drv, not open yet.  Main thread. */
static BlockBackend *blk_new(const BlockDriver *drv, const BlockOptions *opts)
{
    BlockBackend *bs = g_new0(BlockBackend, 1);

    QLIST_INIT(&bs->children);
    QLIST_INIT(&bs->parents);
    thread_pool_blk_init(bs);
    bs->drv = drv;
    bs->main_ctx = qemu_get_current_aio_context();
    bs->readonly = opts->readonly;
    bs->batch = opts->batch;
    bs->bl.logical_block_size = 512;
    bs->bl.physical_block_size = 512;
    bs->bl.request_alignment = 1;
    return bs;
}

static void blk_free(BlockBackend *bs)
{
    BdrvChild *c, *next;

    QLIST_FOREACH_SAFE(c, &bs->children, next, next) {
        bdrv_detach_child(c);
    }
    assert(QLIST_EMPTY(&bs->parents));
    bdrv_dirty_bitmaps_free(bs);
    thread_pool_blk_cleanup(bs);
    g_free(bs->filename);
    g_free(bs->node_name);
    g_free(bs);
}

/* The permissions a filter takes on its child: what its own users may
 * do, sharing everything (a filter adds no constraint of its own). */
static uint64_t blk_filter_perm(BlockBackend *child)
{
    return BLK_PERM_CONSISTENT_READ |
           (child->readonly ? 0 : BLK_PERM_WRITE | BLK_PERM_WRITE_UNCHANGED |
                                  BLK_PERM_RESIZE);
}

/* Main thread: @top becomes the filter over @child. */
static bool blk_filter_attach(BlockBackend *top, BlockBackend *child,
                              GError **errp)
{
    if (child->dirty_bitmaps) {
        /* The filter's requests would reach @child below the entry that
         * marks its bitmaps (include/block/dirty-bitmap.h). */
        g_set_error(errp, VB_ERROR, 0, "'%s' is tracked by a block job: "
                    "add the filter when the job has ended",
                    child->node_name ? child->node_name : child->filename);
        return false;
    }
    if (!bdrv_attach_child(top, child, "file", blk_filter_perm(child),
                           BLK_PERM_ALL, errp)) {
        return false;
    }
    top->child = child;
    child->parent = top;
    return true;
}

static BlockBackend *blk_open_finish(BlockBackend *bs,
                                     const BlockOptions *opts, GError **errp);

/* Main thread. */
BlockBackend *blk_open(const BlockOptions *opts, GError **errp)
{
    const BlockDriver *drv = bdrv_find_driver_for(opts, errp);
    BlockBackend *bs;

    if (!drv) {
        return NULL;
    }
    bs = blk_new(drv, opts);
    if (!drv->bdrv_open(bs, opts, errp)) {
        drv->bdrv_close(bs);    /* what the failed open left */
        blk_free(bs);
        return NULL;
    }
    return blk_open_finish(bs, opts, errp);
}

/* Workers of blk_open_async() and blk_truncate_async() still running
 * (atomic): see blk_async_workers(). */
static unsigned int blk_workers;

unsigned int blk_async_workers(void)
{
    return __atomic_load_n(&blk_workers, __ATOMIC_ACQUIRE);
}

/* An asynchronous open (see blk_open_async()); worker, then main thread. */
typedef struct BlkOpenJob {
    BlockBackend *bs;
    const BlockOptions *opts;
    bool ok;
    GError *err;
    BlockOpenCompleteFunc *cb;
    void *opaque;
} BlkOpenJob;

/* Main thread: the worker is done with @opaque. */
static void blk_open_bh(void *opaque)
{
    BlkOpenJob *job = opaque;
    BlockBackend *top = NULL;

    if (job->ok) {
        top = blk_open_finish(job->bs, job->opts, &job->err);
    } else {
        blk_free(job->bs);
    }
    job->cb(job->opaque, top, top ? NULL : job->err);
    g_free(job);
}

/* Worker thread: the part of the open that waits on the network. */
static gpointer blk_open_thread(gpointer opaque)
{
    BlkOpenJob *job = opaque;
    BlockBackend *bs = job->bs;

    job->ok = bs->drv->bdrv_open(bs, job->opts, &job->err);
    if (!job->ok) {
        bs->drv->bdrv_close(bs);
    }
    aio_bh_schedule_oneshot(bs->main_ctx, blk_open_bh, job, "blk-open");
    /* Last: done with the driver's library.  Pairs with the acquire load
     * in blk_async_workers(). */
    __atomic_sub_fetch(&blk_workers, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Main thread. */
void blk_open_async(const BlockOptions *opts, BlockOpenCompleteFunc *cb,
                    void *opaque)
{
    GError *err = NULL;
    const BlockDriver *drv = bdrv_find_driver_for(opts, &err);
    BlkOpenJob *job;
    BlockBackend *bs;
    GThread *thread;

    if (!drv) {
        cb(opaque, NULL, err);
        return;
    }
    if (!drv->bdrv_open_any_thread) {
        bs = blk_open(opts, &err);
        cb(opaque, bs, err);
        return;
    }
    job = g_new0(BlkOpenJob, 1);
    job->bs = blk_new(drv, opts);
    job->opts = opts;
    job->cb = cb;
    job->opaque = opaque;
    __atomic_add_fetch(&blk_workers, 1, __ATOMIC_RELAXED);
    thread = g_thread_try_new("blk-open", blk_open_thread, job, &err);
    if (!thread) {
        __atomic_sub_fetch(&blk_workers, 1, __ATOMIC_RELAXED);
        g_prefix_error(&err, "cannot start a thread to open the image: ");
        blk_free(job->bs);
        g_free(job);
        cb(opaque, NULL, err);
        return;
    }
    g_thread_unref(thread);
}

/* Main thread: what follows the driver's open (a filter on top). */
static BlockBackend *blk_open_finish(BlockBackend *bs,
                                     const BlockOptions *opts, GError **errp)
{
    BlockBackend *top = bs;

    if (opts->inject.ops || opts->inject.delay_ms) {
        const BlockDriver *dbg = bdrv_find_driver("blkdebug", bs->filename,
                                                  errp);

        if (!dbg) {
            blk_close(bs);
            return NULL;
        }
        top = blk_new(dbg, opts);
        if (!blk_filter_attach(top, bs, errp) ||
            !dbg->bdrv_open(top, opts, errp)) {
            dbg->bdrv_close(top);
            if (top->child) {
                bs->parent = NULL;
            }
            blk_free(top);
            blk_close(bs);
            return NULL;
        }
    } else if (opts->inject.has_range || opts->inject.after ||
               opts->inject.count || opts->inject.err) {
        warn_report("%s: inject-sector/after/count/errno given without "
                    "inject-error or inject-delay: nothing is injected",
                    bs->filename);
    }
    if (opts->throttle_group) {
        BlockBackend *t = blk_throttle_new(top, opts->throttle_group, errp);

        if (!t) {
            blk_close(top);
            return NULL;
        }
        top = t;
    }
    return top;
}

/* Main thread. */
BlockBackend *blk_throttle_new(BlockBackend *child, ThrottleGroup *tg,
                               GError **errp)
{
    const BlockDriver *drv = bdrv_find_driver("throttle", child->filename,
                                              errp);
    BlockOptions o;
    BlockBackend *top;

    if (!drv) {
        return NULL;
    }
    if (child->parent) {
        g_set_error(errp, VB_ERROR, 0, "%s already has a filter above it: "
                    "put the throttle filter on top of that one",
                    child->filename);
        return NULL;
    }
    blk_options_init(&o);
    o.readonly = child->readonly;
    o.batch = child->batch;
    o.throttle_group = tg;
    top = blk_new(drv, &o);
    if (!blk_filter_attach(top, child, errp) ||
        !drv->bdrv_open(top, &o, errp)) {
        drv->bdrv_close(top);
        child->parent = NULL;
        top->child = NULL;
        blk_free(top);
        return NULL;
    }
    return top;
}

/* Main thread; no request in flight. */
void blk_throttle_release(BlockBackend *blk)
{
    assert(!strcmp(blk->drv->format_name, "throttle"));
    if (blk->child) {
        blk->child->parent = NULL;
        blk->child = NULL;
    }
    blk_close(blk);
}

/*
 * Main thread; no request may be in flight.  A filter's child (@child)
 * goes with the filter; the other children are detached and stay open:
 * a driver closes in bdrv_close() what it opened itself, and a node the
 * user attached by name is the user's.
 */
void blk_close(BlockBackend *blk)
{
    BlockBackend *child;

    if (!blk) {
        return;
    }
    if (blk->drv->bdrv_close) {
        blk->drv->bdrv_close(blk);
    }
    child = blk->child;
    if (child) {
        child->parent = NULL;
    }
    blk_free(blk);
    blk_close(child);
}

/* An asynchronous close (see blk_close_async()); worker, then main
 * thread. */
typedef struct BlkCloseJob {
    BlockBackend *blk;
    BlockCloseCompleteFunc *cb;
    void *opaque;
} BlkCloseJob;

/* Main thread: the worker closed the node. */
static void blk_close_bh(void *opaque)
{
    BlkCloseJob *job = opaque;

    blk_free(job->blk);
    job->cb(job->opaque);
    g_free(job);
}

/* Worker thread: the part of the close that waits on the network. */
static gpointer blk_close_thread(gpointer opaque)
{
    BlkCloseJob *job = opaque;

    job->blk->drv->bdrv_close(job->blk);
    aio_bh_schedule_oneshot(job->blk->main_ctx, blk_close_bh, job,
                            "blk-close");
    /* Pairs with the acquire load in blk_async_workers(). */
    __atomic_sub_fetch(&blk_workers, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Main thread; no request may be in flight. */
void blk_close_async(BlockBackend *blk, BlockCloseCompleteFunc *cb,
                     void *opaque)
{
    BlkCloseJob *job;
    GError *err = NULL;
    GThread *thread;

    /* The filters on top: here, in order, as blk_close() does. */
    while (blk && !(blk->drv->bdrv_close_any_thread && !blk->child)) {
        BlockBackend *child = blk->child;

        if (blk->drv->bdrv_close) {
            blk->drv->bdrv_close(blk);
        }
        if (child) {
            child->parent = NULL;
        }
        blk_free(blk);
        blk = child;
    }
    if (!blk) {
        cb(opaque);
        return;
    }
    job = g_new0(BlkCloseJob, 1);
    job->blk = blk;
    job->cb = cb;
    job->opaque = opaque;
    __atomic_add_fetch(&blk_workers, 1, __ATOMIC_RELAXED);
    thread = g_thread_try_new("blk-close", blk_close_thread, job, &err);
    if (!thread) {
        __atomic_sub_fetch(&blk_workers, 1, __ATOMIC_RELAXED);
        warn_report("%s: cannot start a thread to close the image (%s): "
                    "closing it in the main thread", blk->filename,
                    err->message);
        g_error_free(err);
        g_free(job);
        blk_close(blk);
        cb(opaque);
        return;
    }
    g_thread_unref(thread);
}

/* Getters: any thread (the fields are immutable after blk_open(), except
 * the size, which blk_truncate() changes). */
uint64_t blk_getlength(BlockBackend *blk)
{
    /* Pairs with the store in blk_truncate(). */
    return __atomic_load_n(&blk->size, __ATOMIC_RELAXED);
}

/*
 * Main thread.  Grow the image to @size bytes: a file is extended
 * (sparse), a block device must already be that large, the null driver
 * just takes the size.  Requests in flight are not affected: the bounds
 * check below only gets wider.  Shrinking is refused; see
 * include/block/block.h.
 */
bool blk_truncate(BlockBackend *blk, uint64_t size, GError **errp)
{
    uint64_t cur = blk_getlength(blk);

    if (size < cur) {
        g_set_error(errp, VB_ERROR, 0, "cannot shrink '%s' from %" PRIu64
                    " to %" PRIu64 " bytes: shrinking an image under a "
                    "running guest loses its data; stop the guest and use "
                    "qemu-img resize --shrink", blk->filename, cur, size);
        return false;
    }
    if (blk->drv->bdrv_truncate && !blk->drv->bdrv_truncate(blk, size, errp)) {
        return false;
    }
    __atomic_store_n(&blk->size, size, __ATOMIC_RELAXED);
    return true;
}

/* A resize in a worker (see blk_truncate_async()). */
typedef struct BlkTruncateJob {
    BlockBackend *blk;
    uint64_t size;
    GError *err;
    BlockTruncateCompleteFunc *cb;
    void *opaque;
} BlkTruncateJob;

/* Main thread: the worker's resize ended. */
static void blk_truncate_bh(void *opaque)
{
    BlkTruncateJob *job = opaque;

    if (!job->err) {
        /* Pairs with the loads in blk_getlength(). */
        __atomic_store_n(&job->blk->size, job->size, __ATOMIC_RELAXED);
    }
    job->cb(job->opaque, job->err);
    g_free(job);
}

/* Worker thread: the part of the resize that waits on the network. */
static gpointer blk_truncate_thread(gpointer opaque)
{
    BlkTruncateJob *job = opaque;

    job->blk->drv->bdrv_truncate(job->blk, job->size, &job->err);
    aio_bh_schedule_oneshot(job->blk->main_ctx, blk_truncate_bh, job,
                            "blk-truncate");
    __atomic_sub_fetch(&blk_workers, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Main thread. */
void blk_truncate_async(BlockBackend *blk, uint64_t size,
                        BlockTruncateCompleteFunc *cb, void *opaque)
{
    BlkTruncateJob *job;
    GError *err = NULL;
    GThread *thread;

    bool any_thread = blk->drv->bdrv_truncate != NULL;

    /* A filter's resize is its child's: in a worker only if every node
     * of the chain allows it. */
    for (BlockBackend *n = blk; n && any_thread; n = n->child) {
        any_thread = n->drv->bdrv_truncate_any_thread;
    }
    if (!any_thread || size < blk_getlength(blk)) {
        /* Also the refusal to shrink, with blk_truncate()'s words. */
        blk_truncate(blk, size, &err);
        cb(opaque, err);
        return;
    }
    job = g_new0(BlkTruncateJob, 1);
    job->blk = blk;
    job->size = size;
    job->cb = cb;
    job->opaque = opaque;
    __atomic_add_fetch(&blk_workers, 1, __ATOMIC_RELAXED);
    thread = g_thread_try_new("blk-truncate", blk_truncate_thread, job, &err);
    if (!thread) {
        __atomic_sub_fetch(&blk_workers, 1, __ATOMIC_RELAXED);
        g_prefix_error(&err, "cannot start a thread to resize the image: ");
        g_free(job);
        cb(opaque, err);
        return;
    }
    g_thread_unref(thread);
}

/* Main thread. */
void blk_size_changed(BlockBackend *bs, uint64_t size)
{
    BlockBackend *top = bs;

    for (BlockBackend *n = bs; n; n = n->parent) {
        /* Pairs with the loads in blk_getlength(). */
        __atomic_store_n(&n->size, size, __ATOMIC_RELAXED);
        top = n;
    }
    if (top->size_notifier) {
        top->size_notifier(top->size_notifier_opaque, size);
    }
}

/* Main thread. */
void blk_set_size_notifier(BlockBackend *blk,
                           void (*fn)(void *opaque, uint64_t size),
                           void *opaque)
{
    blk->size_notifier = fn;
    blk->size_notifier_opaque = opaque;
}

/* Owner thread of @ctx. */
bool blk_attach_aio_context(BlockBackend *blk, AioContext *ctx,
                            GError **errp)
{
    for (BlockBackend *n = blk; n; n = n->child) {
        if (n->drv->bdrv_attach_aio_context &&
            !n->drv->bdrv_attach_aio_context(n, ctx, errp)) {
            return false;
        }
    }
    return true;
}

/* Owner thread of @ctx. */
void blk_detach_aio_context(BlockBackend *blk, AioContext *ctx)
{
    for (BlockBackend *n = blk; n; n = n->child) {
        if (n->drv->bdrv_detach_aio_context) {
            n->drv->bdrv_detach_aio_context(n, ctx);
        }
    }
}

/* Any thread. */
void blk_set_active(BlockBackend *blk, bool active, bool takeover)
{
    for (BlockBackend *n = blk; n; n = n->child) {
        if (n->drv->bdrv_set_active) {
            n->drv->bdrv_set_active(n, active, takeover);
        }
    }
}

bool blk_is_read_only(BlockBackend *blk)
{
    return blk->readonly;
}

/* The node that stores the data: below every filter. */
static BlockBackend *blk_bottom(BlockBackend *blk)
{
    while (blk->child) {
        blk = blk->child;
    }
    return blk;
}

/* Any thread. */
void blk_get_info(BlockBackend *blk, BlockDriverInfo *bdi)
{
    BlockBackend *bs = blk;

    memset(bdi, 0, sizeof(*bdi));
    /* A filter says nothing of its own: ask the node below it. */
    while (!bs->drv->bdrv_get_info && bs->child) {
        bs = bs->child;
    }
    if (bs->drv->bdrv_get_info) {
        bs->drv->bdrv_get_info(bs, bdi);
    }
}

bool blk_is_block_device(BlockBackend *blk)
{
    BlockDriverInfo bdi;

    blk_get_info(blk, &bdi);
    return bdi.is_block_device;
}

const char *blk_get_driver_name(BlockBackend *blk)
{
    return blk_bottom(blk)->drv->format_name;
}

/* ---- the backing chain, through the driver (block_int.h) ------------- */

bool blk_can_change_backing(BlockBackend *bs)
{
    return bs->drv->bdrv_change_backing && bs->drv->bdrv_set_backing &&
           bs->drv->bdrv_owns_backing && bs->drv->bdrv_release_backing;
}

static bool blk_backing_refused(BlockBackend *bs, GError **errp)
{
    if (blk_can_change_backing(bs)) {
        return false;
    }
    g_set_error(errp, VB_ERROR, 0, "'%s' (driver %s) has no backing file "
                "that could change: use a format that has them (qcow2)",
                bs->filename, bs->drv->format_name);
    return true;
}

bool blk_change_backing(BlockBackend *bs, BlockBackend *backing,
                        const char *name, const char *fmt, GError **errp)
{
    return !blk_backing_refused(bs, errp) &&
           bs->drv->bdrv_change_backing(bs, backing, name, fmt, errp);
}

bool blk_set_backing(BlockBackend *bs, BlockBackend *backing,
                     GError **errp)
{
    return !blk_backing_refused(bs, errp) &&
           bs->drv->bdrv_set_backing(bs, backing, errp);
}

bool blk_owns_backing(BlockBackend *bs)
{
    return blk_can_change_backing(bs) && bs->drv->bdrv_owns_backing(bs);
}

bool blk_release_backing(BlockBackend *bs, BlockBackend *backing,
                         BlockBackend **file, GError **errp)
{
    *file = NULL;
    return !blk_backing_refused(bs, errp) &&
           bs->drv->bdrv_release_backing(bs, backing, file, errp);
}

const char *blk_image_format(BlockBackend *bs)
{
    /* A filter (error injection) shows its child's image. */
    const BlockDriver *drv = blk_bottom(bs)->drv;

    return drv->is_format ? drv->format_name : "raw";
}

uint32_t blk_get_logical_block_size(BlockBackend *blk)
{
    return blk->bl.logical_block_size;
}

uint32_t blk_get_physical_block_size(BlockBackend *blk)
{
    return blk->bl.physical_block_size;
}

uint32_t blk_get_request_alignment(BlockBackend *blk)
{
    return MAX(blk->bl.request_alignment, 1u);
}

uint32_t blk_get_optimal_io_size(BlockBackend *blk)
{
    return blk->bl.opt_io_size;
}

bool blk_can_discard(BlockBackend *blk)
{
    return blk->bl.can_discard && !blk->readonly;
}

bool blk_can_write_zeroes(BlockBackend *blk)
{
    return blk->bl.can_write_zeroes && !blk->readonly;
}

BlockAioMode blk_get_aio_mode(BlockBackend *blk)
{
    BlockDriverInfo bdi;

    blk_get_info(blk, &bdi);
    /* Only files have engines to choose from. */
    return bdi.has_aio_mode ? bdi.aio_mode : BLOCK_AIO_THREADS;
}

/*
 * Owner thread of @ctx: a block-status request for @bs.  The driver's
 * answer if it has one; a filter's child's; else "data, allocated here"
 * for the whole range.
 */
static void blk_block_status_submit(BlockBackend *bs, AioContext *ctx,
                                    BlockAIOCB *acb)
{
    if (bs->drv->bdrv_aio_block_status) {
        bs->drv->bdrv_aio_block_status(bs, ctx, acb);
    } else if (bs->child) {
        acb->blk = bs->child;
        blk_block_status_submit(bs->child, ctx, acb);
    } else {
        acb->status->pnum = acb->bytes;
        acb->status->flags = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED;
        blk_complete_later(ctx, acb, 0);
    }
}

/* Owner thread of @ctx. */
void blk_drv_submit(BlockBackend *bs, AioContext *ctx, BlockAIOCB *acb)
{
    const BlockDriver *drv = bs->drv;

    switch (acb->type) {
    case BLK_REQ_READ:
        drv->bdrv_aio_preadv(bs, ctx, acb);
        break;
    case BLK_REQ_WRITE:
        drv->bdrv_aio_pwritev(bs, ctx, acb);
        break;
    case BLK_REQ_FLUSH:
        drv->bdrv_aio_flush(bs, ctx, acb);
        break;
    case BLK_REQ_DISCARD:
        drv->bdrv_aio_pdiscard(bs, ctx, acb);
        break;
    case BLK_REQ_WRITE_ZEROES:
        drv->bdrv_aio_pwrite_zeroes(bs, ctx, acb);
        break;
    default:
        blk_block_status_submit(bs, ctx, acb);
        break;
    }
}

/*
 * The checks every driver shares, then one indirect call: @fn, the top
 * node's function for @type (the blk_aio_*() callers pass it, so there is
 * no dispatch on the type here).
 */
static inline void blk_submit(BlockBackend *blk, BlockAIOCB *acb, int type,
                              BlockDriverSubmitFunc *fn,
                              int flags, int64_t offset, uint64_t bytes,
                              struct iovec *iov, int niov,
                              BlockCompletionFunc *cb, void *opaque)
{
    AioContext *ctx = qemu_get_current_aio_context();
    uint64_t len;
    int ret;

    assert(ctx);                /* requests come from an AioContext thread */
    acb->cb = cb;
    acb->opaque = opaque;
    acb->blk = blk;
    acb->type = type;
    acb->flags = flags;
    acb->offset = offset;
    acb->bytes = bytes;
    acb->iov = iov;
    acb->niov = niov;
    acb->done = 0;
    acb->bounce = NULL;
    acb->ret = 0;
    acb->status = NULL;

    if (type != BLK_REQ_READ && type != BLK_REQ_FLUSH &&
        type != BLK_REQ_BLOCK_STATUS && blk->readonly) {
        ret = -EROFS;
        goto fail;
    }
    /*
     * Bounds are checked here for every driver: the kernel does not fail a
     * read at the end of a block device (it returns 0 bytes), a write
     * past the end of a file would grow it, librbd refuses it with an
     * error of its own.
     */
    /* The size is read once: both comparisons must see the same one
     * (blk_truncate() may change it meanwhile). */
    len = blk_getlength(blk);
    if (type != BLK_REQ_FLUSH &&
        (offset < 0 || bytes > len || (uint64_t)offset > len - bytes)) {
        ret = -EINVAL;
        goto fail;
    }
    /*
     * Offset and length must be multiples of the request alignment (the
     * logical block size under O_DIRECT, 1 otherwise).  We do not do
     * read-modify-write: such a request fails with -EINVAL (virtio-blk
     * sends multiples of the blk_size it advertises).
     */
    if ((type == BLK_REQ_READ || type == BLK_REQ_WRITE) &&
        ((offset | bytes) & (blk->bl.request_alignment - 1))) {
        ret = -EINVAL;
        goto fail;
    }
    /* Dirty tracking: @type is a constant here (blk_submit() is inlined
     * in each blk_aio_*()), so every request pays one load of a line it
     * reads anyway (@size), and more only while a bitmap exists. */
    {
        BdrvDirtyBitmap *bm = __atomic_load_n(&blk->dirty_bitmaps,
                                              __ATOMIC_ACQUIRE);

        if (unlikely(bm)) {
            /* A mirror paces itself by this (block/mirror.c): a plain
             * count, see BlockBackend.user_requests. */
            __atomic_store_n(&blk->user_requests,
                             __atomic_load_n(&blk->user_requests,
                                             __ATOMIC_RELAXED) + 1,
                             __ATOMIC_RELAXED);
            if (type == BLK_REQ_WRITE || type == BLK_REQ_WRITE_ZEROES ||
                type == BLK_REQ_DISCARD) {
                bdrv_dirty_mark_submit(blk, bm, acb);
            }
        }
    }
    fn(blk, ctx, acb);
    return;

fail:
    blk_complete_later(ctx, acb, ret);
}

static uint64_t blk_iov_size(const struct iovec *iov, int niov)
{
    uint64_t n = 0;

    for (int i = 0; i < niov; i++) {
        n += iov[i].iov_len;
    }
    return n;
}

/* The request functions: any thread that runs an AioContext. */
void blk_aio_preadv(BlockBackend *blk, BlockAIOCB *acb, int64_t offset,
                    struct iovec *iov, int niov,
                    BlockCompletionFunc *cb, void *opaque)
{
    blk_submit(blk, acb, BLK_REQ_READ, blk->drv->bdrv_aio_preadv, 0, offset,
               blk_iov_size(iov, niov), iov, niov, cb, opaque);
}

void blk_aio_pwritev(BlockBackend *blk, BlockAIOCB *acb, int64_t offset,
                     struct iovec *iov, int niov, int flags,
                     BlockCompletionFunc *cb, void *opaque)
{
    blk_submit(blk, acb, BLK_REQ_WRITE, blk->drv->bdrv_aio_pwritev,
               flags & (BDRV_REQ_FUA | BDRV_REQ_IF_UNALLOCATED), offset,
               blk_iov_size(iov, niov), iov, niov, cb, opaque);
}

void blk_aio_preadv_sized(BlockBackend *blk, BlockAIOCB *acb,
                          int64_t offset, uint64_t bytes,
                          struct iovec *iov, int niov,
                          BlockCompletionFunc *cb, void *opaque)
{
    blk_submit(blk, acb, BLK_REQ_READ, blk->drv->bdrv_aio_preadv, 0, offset,
               bytes, iov, niov, cb, opaque);
}

void blk_aio_pwritev_sized(BlockBackend *blk, BlockAIOCB *acb,
                           int64_t offset, uint64_t bytes,
                           struct iovec *iov, int niov, int flags,
                           BlockCompletionFunc *cb, void *opaque)
{
    blk_submit(blk, acb, BLK_REQ_WRITE, blk->drv->bdrv_aio_pwritev,
               flags & BDRV_REQ_FUA, offset, bytes, iov, niov, cb, opaque);
}

void blk_aio_flush(BlockBackend *blk, BlockAIOCB *acb,
                   BlockCompletionFunc *cb, void *opaque)
{
    blk_submit(blk, acb, BLK_REQ_FLUSH, blk->drv->bdrv_aio_flush, 0, 0, 0,
               NULL, 0, cb, opaque);
}

void blk_aio_pdiscard(BlockBackend *blk, BlockAIOCB *acb, int64_t offset,
                      uint64_t bytes, BlockCompletionFunc *cb, void *opaque)
{
    blk_submit(blk, acb, BLK_REQ_DISCARD, blk->drv->bdrv_aio_pdiscard, 0,
               offset, bytes, NULL, 0,
               cb, opaque);
}

void blk_aio_pwrite_zeroes(BlockBackend *blk, BlockAIOCB *acb,
                           int64_t offset, uint64_t bytes, int flags,
                           BlockCompletionFunc *cb, void *opaque)
{
    blk_submit(blk, acb, BLK_REQ_WRITE_ZEROES,
               blk->drv->bdrv_aio_pwrite_zeroes,
               flags & (BDRV_REQ_MAY_UNMAP | BDRV_REQ_NO_FALLBACK),
               offset, bytes, NULL, 0, cb, opaque);
}

/* Block status: not a data request, so no read-only or alignment
 * rule; an empty range is refused like any out-of-bounds one. */
void blk_aio_block_status(BlockBackend *blk, BlockAIOCB *acb,
                          int64_t offset, uint64_t bytes,
                          BlockStatus *status,
                          BlockCompletionFunc *cb, void *opaque)
{
    AioContext *ctx = qemu_get_current_aio_context();
    uint64_t len = blk_getlength(blk);

    assert(ctx);
    acb->cb = cb;
    acb->opaque = opaque;
    acb->blk = blk;
    acb->type = BLK_REQ_BLOCK_STATUS;
    acb->flags = 0;
    acb->offset = offset;
    acb->bytes = bytes;
    acb->iov = NULL;
    acb->niov = 0;
    acb->done = 0;
    acb->bounce = NULL;
    acb->ret = 0;
    acb->status = status;
    status->pnum = 0;
    status->flags = 0;
    if (offset < 0 || bytes == 0 || bytes > len ||
        (uint64_t)offset > len - bytes) {
        blk_complete_later(ctx, acb, -EINVAL);
        return;
    }
    blk_block_status_submit(blk, ctx, acb);
}

/* ---- the graph ------------------------------------------------------- */

static const char *const blk_perm_names[] = {
    "consistent read", "write", "write unchanged", "resize",
};

/* "write and resize": the names of the bits in @perm. */
static char *blk_perm_str(uint64_t perm)
{
    GString *s = g_string_new(NULL);

    for (size_t i = 0; i < G_N_ELEMENTS(blk_perm_names); i++) {
        if (perm & (1ull << i)) {
            g_string_append_printf(s, "%s%s", s->len ? " and " : "",
                                   blk_perm_names[i]);
        }
    }
    return g_string_free(s, false);
}

/* How messages name @bs. */
static const char *blk_node_desc(BlockBackend *bs)
{
    return bs->node_name ? bs->node_name :
           bs->filename ? bs->filename : bs->drv->format_name;
}

/* Who holds @c, for messages: "node 'q0' (its file child)", "export
 * 'vu0'". */
static char *blk_holder_desc(BdrvChild *c)
{
    if (c->parent) {
        return g_strdup_printf("node '%s' (as its %s child)",
                               blk_node_desc(c->parent), c->name);
    }
    return g_strdup(c->name);
}

/*
 * Main thread: may an edge with @perm and @shared join @bs?  The first
 * conflict with an existing edge, as an error naming its holder.
 */
static bool blk_perm_check(BlockBackend *bs, const char *who, uint64_t perm,
                           uint64_t shared, GError **errp)
{
    BdrvChild *c;

    if ((perm & (BLK_PERM_WRITE | BLK_PERM_RESIZE)) && bs->readonly) {
        g_set_error(errp, VB_ERROR, 0, "%s needs to write to '%s', which is "
                    "open read-only: open it with read-only=off",
                    who, blk_node_desc(bs));
        return false;
    }
    QLIST_FOREACH(c, &bs->parents, next_parent) {
        uint64_t clash = perm & ~c->shared;
        uint64_t theirs = c->perm & ~shared;

        if (clash || theirs) {
            g_autofree char *holder = blk_holder_desc(c);
            g_autofree char *what = blk_perm_str(clash ? clash : theirs);

            g_set_error(errp, VB_ERROR, 0, clash ?
                        "'%s' is in use by %s, which does not share the %s "
                        "permission that %s needs: remove that user first" :
                        "'%s' is in use by %s, which holds the %s "
                        "permission that %s would not share: remove that "
                        "user first",
                        blk_node_desc(bs), holder, what, who);
            return false;
        }
    }
    return true;
}

/*
 * What the parents of @bs use (added to *@perm) and share (kept in
 * *@shared); a filter parent adds no constraint of its own (its edge
 * takes and shares everything) and stands for its parents.
 */
static void blk_parents_perm(BlockBackend *bs, uint64_t *perm,
                             uint64_t *shared)
{
    BdrvChild *c;

    QLIST_FOREACH(c, &bs->parents, next_parent) {
        if (c->parent && c->parent->drv->is_filter) {
            uint64_t p = 0;

            blk_parents_perm(c->parent, &p, shared);
            *perm |= p & c->perm;
        } else {
            *perm |= c->perm;
            *shared &= c->shared;
        }
    }
}

/*
 * Main thread: tell the driver of @bs, and of the nodes below it through
 * filters, what their parents now use and share (bdrv_set_perm).  False
 * with @errp set at the first driver that refuses.
 */
static bool blk_perm_update(BlockBackend *bs, GError **errp)
{
    for (BlockBackend *n = bs; n; n = n->drv->is_filter ? n->child : NULL) {
        uint64_t perm = 0, shared = BLK_PERM_ALL;

        if (!n->drv->bdrv_set_perm) {
            continue;
        }
        blk_parents_perm(n, &perm, &shared);
        if (!n->drv->bdrv_set_perm(n, perm, shared, errp)) {
            return false;
        }
    }
    return true;
}

static void blk_edge_free(BdrvChild *c);

static BdrvChild *blk_edge_new(BlockBackend *parent, BlockBackend *bs,
                               const char *name, const char *who,
                               uint64_t perm, uint64_t shared, GError **errp)
{
    BdrvChild *c;

    if (!blk_perm_check(bs, who, perm, shared, errp)) {
        return NULL;
    }
    c = g_new0(BdrvChild, 1);
    c->bs = bs;
    c->parent = parent;
    c->name = g_strdup(name);
    c->perm = perm;
    c->shared = shared;
    QLIST_INSERT_HEAD(&bs->parents, c, next_parent);
    if (parent) {
        QLIST_INSERT_HEAD(&parent->children, c, next);
    }
    if (!blk_perm_update(bs, errp)) {
        /* Back to what the nodes below held before. */
        blk_edge_free(c);
        return NULL;
    }
    return c;
}

static void blk_edge_free(BdrvChild *c)
{
    BlockBackend *bs = c->bs;

    QLIST_REMOVE(c, next_parent);
    if (c->parent) {
        QLIST_REMOVE(c, next);
    }
    g_free(c->name);
    g_free(c);
    /* Fewer permissions: nothing to refuse. */
    blk_perm_update(bs, NULL);
}

/* Main thread. */
BdrvChild *bdrv_attach_child(BlockBackend *parent, BlockBackend *child,
                             const char *name, uint64_t perm,
                             uint64_t shared, GError **errp)
{
    g_autofree char *who = g_strdup_printf("node '%s' (as its %s child)",
                                           blk_node_desc(parent), name);

    if (bdrv_find_child(parent, name)) {
        g_set_error(errp, VB_ERROR, 0, "'%s' has a %s child already",
                    blk_node_desc(parent), name);
        return NULL;
    }
    for (BlockBackend *n = parent; n; n = n->parent) {
        if (n == child) {
            g_set_error(errp, VB_ERROR, 0, "'%s' cannot be a child of "
                        "itself or of a node above it",
                        blk_node_desc(child));
            return NULL;
        }
    }
    return blk_edge_new(parent, child, name, who, perm, shared, errp);
}

/* Main thread. */
void bdrv_detach_child(BdrvChild *c)
{
    if (c) {
        blk_edge_free(c);
    }
}

/* Main thread. */
BdrvChild *bdrv_find_child(BlockBackend *bs, const char *name)
{
    BdrvChild *c;

    QLIST_FOREACH(c, &bs->children, next) {
        if (!strcmp(c->name, name)) {
            return c;
        }
    }
    return NULL;
}

/* Main thread. */
bool bdrv_child_set_perm(BdrvChild *c, uint64_t perm, uint64_t shared,
                         GError **errp)
{
    BlockBackend *bs = c->bs;
    uint64_t old_perm = c->perm, old_shared = c->shared;
    g_autofree char *who = blk_holder_desc(c);
    bool ok;

    /* Against the other edges: this one's old rights are going. */
    QLIST_REMOVE(c, next_parent);
    ok = blk_perm_check(bs, who, perm, shared, errp);
    QLIST_INSERT_HEAD(&bs->parents, c, next_parent);
    if (!ok) {
        return false;
    }
    c->perm = perm;
    c->shared = shared;
    if (!blk_perm_update(bs, errp)) {
        c->perm = old_perm;
        c->shared = old_shared;
        blk_perm_update(bs, NULL);
        return false;
    }
    return true;
}

/* Main thread: the filters from the one just above @n up to @top follow
 * @n's mode (the edge to the node below each takes what it now may). */
static void blk_reopen_filters(BlockBackend *top, BlockBackend *n)
{
    for (BlockBackend *f = n->parent; f; f = f->parent) {
        BdrvChild *c = bdrv_find_child(f, "file");

        f->readonly = f->child->readonly;
        if (c) {
            /* Only a shrink can fail, and a shrink does not: the node
             * below allowed these rights to the filter when it opened. */
            bdrv_child_set_perm(c, blk_filter_perm(f->child), c->shared,
                                NULL);
        }
        if (f == top) {
            break;
        }
    }
}

/* Main thread. */
bool blk_reopen(BlockBackend *blk, bool writable, GError **errp)
{
    BlockBackend *n = blk;

    while (n->drv->is_filter && n->child) {
        n = n->child;
    }
    if (n->readonly != writable) {
        blk_reopen_filters(blk, n);
        return true;
    }
    if (!n->drv->bdrv_reopen) {
        g_set_error(errp, VB_ERROR, 0, "'%s' (driver %s) cannot be reopened "
                    "%s: add it as a node with read-only=%s instead",
                    blk_node_desc(n), n->drv->format_name,
                    writable ? "read-write" : "read-only",
                    writable ? "off" : "on");
        return false;
    }
    if (!writable) {
        /* The filters first: nobody gets write rights through them. */
        for (BlockBackend *f = blk; f != n; f = f->child) {
            f->readonly = true;
        }
    }
    if (!n->drv->bdrv_reopen(n, writable, errp)) {
        blk_reopen_filters(blk, n);
        return false;
    }
    n->readonly = !writable;
    blk_reopen_filters(blk, n);
    return true;
}

/* Main thread. */
BdrvChild *blk_attach_user(BlockBackend *blk, const char *user,
                           uint64_t perm, uint64_t shared, GError **errp)
{
    return blk_edge_new(NULL, blk, user, user, perm, shared, errp);
}

/* Main thread. */
void blk_detach_user(BdrvChild *c)
{
    if (c) {
        assert(!c->parent);
        blk_edge_free(c);
    }
}

/* Main thread. */
void blk_set_node_name(BlockBackend *blk, const char *name)
{
    g_free(blk->node_name);
    blk->node_name = g_strdup(name);
}

/* ---- control blocks for child requests ---------------------------------- */

#define BLK_CHILD_REQ_CHUNK 64

/* The free list of one context.  Owner thread. */
typedef struct BlkChildReqPool {
    BlockChildReq *free;
    unsigned int allocated;
    GPtrArray *chunks;
} BlkChildReqPool;

static AioLocalKey blk_child_req_key;

static void blk_child_req_pool_free(void *opaque)
{
    BlkChildReqPool *p = opaque;

    g_ptr_array_free(p->chunks, true);
    g_free(p);
}

static BlkChildReqPool *blk_child_req_pool(AioContext *ctx)
{
    BlkChildReqPool *p = aio_local_get(ctx, &blk_child_req_key);

    if (unlikely(!p)) {
        p = g_new0(BlkChildReqPool, 1);
        p->chunks = g_ptr_array_new_with_free_func(g_free);
        aio_local_set(ctx, &blk_child_req_key, p, blk_child_req_pool_free);
    }
    return p;
}

/* Owner thread of @ctx. */
BlockChildReq *blk_child_req_get(AioContext *ctx)
{
    BlkChildReqPool *p = blk_child_req_pool(ctx);
    BlockChildReq *r = p->free;

    if (unlikely(!r)) {
        BlockChildReq *chunk = g_new0(BlockChildReq, BLK_CHILD_REQ_CHUNK);

        g_ptr_array_add(p->chunks, chunk);
        for (int i = BLK_CHILD_REQ_CHUNK - 1; i >= 0; i--) {
            chunk[i].next_free = p->free;
            p->free = &chunk[i];
        }
        p->allocated += BLK_CHILD_REQ_CHUNK;
        r = p->free;
    }
    p->free = r->next_free;
    r->next_free = NULL;
    return r;
}

/* Owner thread of @ctx. */
void blk_child_req_put(AioContext *ctx, BlockChildReq *r)
{
    BlkChildReqPool *p = blk_child_req_pool(ctx);

    r->next_free = p->free;
    p->free = r;
}

/* Owner thread of @ctx. */
unsigned int blk_child_req_allocated(AioContext *ctx)
{
    BlkChildReqPool *p = aio_local_get(ctx, &blk_child_req_key);

    return p ? p->allocated : 0;
}
