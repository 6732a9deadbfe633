/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * BlockBackend: opening a node of the chosen driver and the request entry
 * points every driver shares.
 *
 * Theory of operation: blk_open() finds the driver by name (file, null,
 * rbd; rbd's module is loaded on first use, block/module.c), lets it open
 * the node and, when error injection is configured,
 * puts a blkdebug filter node on top whose child is that node.
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
#include "block/blkdebug.h"
#include "block/module.h"

/* Any thread. */
void blk_options_init(BlockOptions *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->driver = "file";
    opts->cache_direct = true;
    opts->aio = BLOCK_AIO_IO_URING;
    opts->batch = true;
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

/* Any thread. */
bool blk_rbd_completion_parse(const char *s, BlockRbdCompletion *out)
{
    if (s && !strcmp(s, "callback")) {
        *out = BLOCK_RBD_COMPLETION_CALLBACK;
    } else if (s && !strcmp(s, "poll")) {
        *out = BLOCK_RBD_COMPLETION_POLL;
    } else {
        return false;
    }
    return true;
}

/*
 * Main thread.  The driver @opts names, or NULL with @errp set.  file and
 * null are part of the program; rbd is a module (block-rbd.so, see
 * include/block/module.h), loaded here on its first use so that a
 * process without an RBD node maps none of Ceph's libraries.
 */
static const BlockDriver *blk_find_driver(const BlockOptions *opts,
                                          GError **errp)
{
    const char *name = opts->driver ? opts->driver : "file";

    if (!strcmp(name, "file")) {
        return &bdrv_file;
    }
    if (!strcmp(name, "null")) {
        return &bdrv_null;
    }
#if CONFIG_RBD
    if (!strcmp(name, "rbd")) {
        const BlockRbdOptions *o = &opts->rbd;
        g_autofree char *what = g_strdup_printf(
            "rbd:%s/%s%s%s%s%s", o->pool ? o->pool : "?",
            o->namespace_ ? o->namespace_ : "", o->namespace_ ? "/" : "",
            o->image ? o->image : "?", o->snapshot ? "@" : "",
            o->snapshot ? o->snapshot : "");

        return block_module_load_driver("rbd", what, errp);
    }
#endif
    g_set_error(errp, VB_ERROR, 0,
                "unknown block driver '%s' (use driver=file, null%s)",
                name, CONFIG_RBD ? " or rbd" : "; this build has no "
                "driver=rbd: install librbd-dev and rebuild");
    return NULL;
}

/* A node of @drv, not open yet.  Main thread. */
static BlockBackend *blk_new(const BlockDriver *drv, const BlockOptions *opts)
{
    BlockBackend *bs = g_new0(BlockBackend, 1);

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
    thread_pool_blk_cleanup(bs);
    g_free(bs->filename);
    g_free(bs);
}

static BlockBackend *blk_open_finish(BlockBackend *bs,
                                     const BlockOptions *opts, GError **errp);

/* Main thread. */
BlockBackend *blk_open(const BlockOptions *opts, GError **errp)
{
    const BlockDriver *drv = blk_find_driver(opts, errp);
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
    const BlockDriver *drv = blk_find_driver(opts, &err);
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
        top = blk_new(&bdrv_blkdebug, opts);
        top->child = bs;
        bs->parent = top;
        if (!bdrv_blkdebug.bdrv_open(top, opts, errp)) {
            bdrv_blkdebug.bdrv_close(top);
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
    BlockOptions o;
    BlockBackend *top;

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
    top = blk_new(&bdrv_throttle, &o);
    top->child = child;
    child->parent = top;
    if (!bdrv_throttle.bdrv_open(top, &o, errp)) {
        bdrv_throttle.bdrv_close(top);
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
    assert(blk->drv == &bdrv_throttle);
    if (blk->child) {
        blk->child->parent = NULL;
        blk->child = NULL;
    }
    blk_close(blk);
}

/* Main thread; no request may be in flight. */
void blk_close(BlockBackend *blk)
{
    if (!blk) {
        return;
    }
    if (blk->drv->bdrv_close) {
        blk->drv->bdrv_close(blk);
    }
    if (blk->child) {
        blk->child->parent = NULL;
        blk_close(blk->child);
    }
    blk_free(blk);
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

bool blk_is_block_device(BlockBackend *blk)
{
    BlockBackend *bs = blk_bottom(blk);

    return bs->drv == &bdrv_file && raw_state(bs)->is_blockdev;
}

const char *blk_get_driver_name(BlockBackend *blk)
{
    return blk_bottom(blk)->drv->format_name;
}

uint32_t blk_get_logical_block_size(BlockBackend *blk)
{
    return blk->bl.logical_block_size;
}

uint32_t blk_get_physical_block_size(BlockBackend *blk)
{
    return blk->bl.physical_block_size;
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
    BlockBackend *bs = blk_bottom(blk);

    /* Only files have engines to choose from. */
    return bs->drv == &bdrv_file ? raw_state(bs)->aio : BLOCK_AIO_THREADS;
}

const BlockEngineOps *blk_mode_ops(BlockAioMode mode)
{
    switch (mode) {
#if CONFIG_LINUX_IO_URING
    case BLOCK_AIO_IO_URING:
        return &luring_engine_ops;
#endif
#if CONFIG_LINUX_AIO
    case BLOCK_AIO_NATIVE:
        return &laio_engine_ops;
#endif
    default:
        return &thread_pool_engine_ops;
    }
}

/* Owner thread of @ctx. */
BlockEngine *blk_engine_get(AioContext *ctx, const BlockEngineOps *ops,
                            GError **errp)
{
    BlockEngine *e = aio_get_engine(ctx, ops->slot);

    if (likely(e)) {
        return e;
    }
    e = ops->create(ctx, errp);
    if (!e) {
        return NULL;
    }
    e->ops = ops;
    e->ctx = ctx;
    aio_set_engine(ctx, ops->slot, e, ops->cleanup);
    return e;
}

/* Owner thread of @ctx. */
bool blk_engine_get_stats(AioContext *ctx, BlockAioMode mode,
                          BlockEngineStats *stats)
{
    const BlockEngineOps *ops = blk_mode_ops(mode);
    BlockEngine *e;

    if ((mode == BLOCK_AIO_IO_URING || mode == BLOCK_AIO_NATIVE) &&
        ops == &thread_pool_engine_ops) {
        return false;           /* engine not compiled in */
    }
    e = aio_get_engine(ctx, ops->slot);
    if (!e) {
        return false;
    }
    *stats = e->stats;
    return true;
}

/* Owner thread of @ctx. */
bool blk_driver_engine_get_stats(AioContext *ctx, const char *driver,
                                 BlockEngineStats *stats)
{
    BlockEngine *e = NULL;

#if CONFIG_RBD
    if (!strcmp(driver, "rbd")) {
        e = aio_get_engine(ctx, AIO_ENGINE_RBD);
    }
#endif
    if (!e) {
        return false;
    }
    *stats = e->stats;
    return true;
}

/* Engine thread. */
void blk_acb_complete(BlockAIOCB *acb, int ret)
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
    /* No progress at all: end of file or device. */
    if (acb->type == BLK_REQ_WRITE) {
        *ret = -ENOSPC;
    } else if (raw_state(acb->blk)->is_blockdev) {
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

/*
 * The engine instance of @ops in @ctx, or the thread pool's if that one
 * cannot be created here (warned once), or NULL.  Owner thread of @ctx.
 */
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
    default:
        drv->bdrv_aio_pwrite_zeroes(bs, ctx, acb);
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

    if (type != BLK_REQ_READ && type != BLK_REQ_FLUSH && blk->readonly) {
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
    fn(blk, ctx, acb);
    return;

fail:
    null_complete_later(ctx, acb, ret);
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
               flags & BDRV_REQ_FUA, offset,
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
               blk->drv->bdrv_aio_pwrite_zeroes, flags & BDRV_REQ_MAY_UNMAP,
               offset, bytes, NULL, 0, cb, opaque);
}
