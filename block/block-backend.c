/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * BlockBackend: opening an image and routing requests to the engine of the
 * submitting thread's AioContext.
 *
 * Theory of operation: blk_aio_*() fill the caller's BlockAIOCB, reject what
 * can be rejected cheaply (read-only image, out-of-bounds request, O_DIRECT
 * offset/length misalignment) by completing it from a bottom half, bounce
 * misaligned buffers for O_DIRECT, then pick the engine: the backend's aio
 * mode for reads and writes; the thread pool for what the mode's engine
 * cannot do (block-device discard/write-zeroes, and flush/discard/write-
 * zeroes under linux-aio); the null engine for driver=null.  The engine
 * instance lives in the context's engine slot and is created on first use.
 *
 * Error injection (BlockOptions.inject, for tests) is a filter of its own,
 * blkdebug.c.  The backend only holds its state (NULL when injection is
 * off) and, after the cheap checks, asks blkdebug_check() what to do with
 * the request: pass it on, fail it through the same bottom half as a
 * rejected request, or hand it to the thread pool as a delayed request.
 * Without injection that costs one predictable branch.
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/blkdebug.h"

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

/* Pick the aio mode the kernel supports, starting from the requested one. */
static BlockAioMode blk_choose_aio_mode(BlockAioMode want, bool direct)
{
    g_autoptr(GError) err = NULL;
    bool ok;

    if (want == BLOCK_AIO_IO_URING) {
#if CONFIG_LINUX_IO_URING
        ok = luring_probe(&err);
#else
        ok = false;
#endif
        if (ok) {
            return BLOCK_AIO_IO_URING;
        }
        want = direct && CONFIG_LINUX_AIO ? BLOCK_AIO_NATIVE : BLOCK_AIO_THREADS;
        warn_report("aio=io_uring unavailable (%s); falling back to aio=%s",
                    err ? err->message : "not compiled in",
                    blk_aio_mode_name(want));
        g_clear_error(&err);
    }
    if (want == BLOCK_AIO_NATIVE) {
#if CONFIG_LINUX_AIO
        ok = laio_probe(&err);
#else
        ok = false;
#endif
        if (ok) {
            return BLOCK_AIO_NATIVE;
        }
        warn_report("aio=native unavailable (%s); falling back to aio=threads",
                    err ? err->message : "not compiled in");
    }
    return BLOCK_AIO_THREADS;
}

/* Main thread. */
BlockBackend *blk_open(const BlockOptions *opts, GError **errp)
{
    BlockBackend *blk;
    const char *driver = opts->driver ? opts->driver : "file";

    blk = g_new0(BlockBackend, 1);
    thread_pool_blk_init(blk);
    blk->fd = -1;
    blk->readonly = opts->readonly;
    blk->batch = opts->batch;
    blk->req_align = 1;
    blk->mem_align = 1;
    blk->logical_block_size = 512;
    blk->physical_block_size = 512;

    if (!strcmp(driver, "null")) {
        if (opts->size == 0) {
            g_set_error(errp, VB_ERROR, 0,
                        "driver=null needs a size (for example size=1G)");
            goto fail;
        }
        blk->is_null = true;
        blk->null_read_zeroes = opts->null_read_zeroes;
        blk->size = opts->size;
        blk->can_discard = true;
        blk->aio = opts->aio;
        blk->filename = g_strdup("null");
        blk->inject = blkdebug_new(&opts->inject, blk->filename);
        return blk;
    }
    if (strcmp(driver, "file")) {
        g_set_error(errp, VB_ERROR, 0,
                    "unknown block driver '%s' (use driver=file or "
                    "driver=null)", driver);
        goto fail;
    }
    if (!opts->filename || !*opts->filename) {
        g_set_error(errp, VB_ERROR, 0,
                    "driver=file needs a filename (an image file or a block "
                    "device)");
        goto fail;
    }
    if (!raw_open(blk, opts, errp)) {
        goto fail;
    }
    blk->aio = blk_choose_aio_mode(opts->aio, blk->direct);
    blk->inject = blkdebug_new(&opts->inject, blk->filename);
    return blk;

fail:
    thread_pool_blk_cleanup(blk);
    g_free(blk->filename);
    g_free(blk);
    return NULL;
}

/* Main thread; no request may be in flight. */
void blk_close(BlockBackend *blk)
{
    if (!blk) {
        return;
    }
    raw_close(blk);
    blkdebug_free(blk->inject);
    thread_pool_blk_cleanup(blk);
    g_free(blk->filename);
    g_free(blk);
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
    if (!blk->is_null && !raw_truncate(blk, size, errp)) {
        return false;
    }
    __atomic_store_n(&blk->size, size, __ATOMIC_RELAXED);
    return true;
}

bool blk_is_read_only(BlockBackend *blk)
{
    return blk->readonly;
}

bool blk_is_block_device(BlockBackend *blk)
{
    return blk->is_blockdev;
}

uint32_t blk_get_logical_block_size(BlockBackend *blk)
{
    return blk->logical_block_size;
}

uint32_t blk_get_physical_block_size(BlockBackend *blk)
{
    return blk->physical_block_size;
}

bool blk_can_discard(BlockBackend *blk)
{
    return blk->can_discard && !blk->readonly;
}

bool blk_can_write_zeroes(BlockBackend *blk)
{
    /* Always: the slow path writes zeroes from a shared buffer. */
    return !blk->readonly;
}

BlockAioMode blk_get_aio_mode(BlockBackend *blk)
{
    return blk->aio;
}

static const BlockEngineOps *blk_mode_ops(BlockAioMode mode)
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
    } else if (acb->blk->is_blockdev) {
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

static const BlockEngineOps *blk_route(BlockBackend *blk, int type)
{
    if (blk->is_null) {
        return &null_engine_ops;
    }
    if (type == BLK_REQ_READ || type == BLK_REQ_WRITE) {
        return blk_mode_ops(blk->aio);
    }
#if CONFIG_LINUX_IO_URING
    if (blk->aio == BLOCK_AIO_IO_URING &&
        (type == BLK_REQ_FLUSH || !blk->is_blockdev)) {
        return &luring_engine_ops;  /* fsync and fallocate opcodes */
    }
#endif
    return &thread_pool_engine_ops;
}

/*
 * O_DIRECT needs aligned buffers.  Misaligned ones are copied through a
 * freshly allocated aligned buffer (slow path, counted in 'bounced').
 * Returns 0 or -ENOMEM.
 */
static int blk_bounce_if_needed(BlockBackend *blk, BlockAIOCB *acb,
                                BlockEngine *e)
{
    uint32_t align = blk->mem_align;
    bool aligned = true;
    size_t copied = 0;
    void *buf;

    if (!blk->direct || align <= 1) {
        return 0;
    }
    for (int i = 0; i < acb->niov; i++) {
        if (((uintptr_t)acb->iov[i].iov_base | acb->iov[i].iov_len) &
            (align - 1)) {
            aligned = false;
            break;
        }
    }
    if (aligned) {
        return 0;
    }
    if (posix_memalign(&buf, MAX(align, sizeof(void *)),
                       MAX(acb->bytes, 1))) {
        return -ENOMEM;
    }
    if (acb->type == BLK_REQ_WRITE) {
        for (int i = 0; i < acb->niov; i++) {
            memcpy((char *)buf + copied, acb->iov[i].iov_base,
                   acb->iov[i].iov_len);
            copied += acb->iov[i].iov_len;
        }
    }
    acb->bounce = buf;
    acb->bounce_iov.iov_base = buf;
    acb->bounce_iov.iov_len = acb->bytes;
    e->stats.bounced++;
    return 0;
}

/*
 * The engine instance of @ops in @ctx, or the thread pool's if that one
 * cannot be created here (warned once), or NULL.  Owner thread of @ctx.
 */
static BlockEngine *blk_engine_get_or_pool(AioContext *ctx,
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

/* Owner thread of @ctx: @acb, held back by blkdebug, to the thread pool. */
static void blk_submit_delayed(AioContext *ctx, BlockAIOCB *acb)
{
    BlockEngine *e = blk_engine_get_or_pool(ctx, &thread_pool_engine_ops);
    int ret;

    if (!e) {
        ret = -EIO;
        goto fail;
    }
    if (acb->type == BLK_REQ_READ || acb->type == BLK_REQ_WRITE) {
        ret = blk_bounce_if_needed(acb->blk, acb, e);
        if (ret < 0) {
            goto fail;
        }
    }
    e->stats.requests++;
    thread_pool_submit_delayed(e, acb);
    return;

fail:
    null_complete_later(ctx, acb, ret);
}

static void blk_submit(BlockBackend *blk, BlockAIOCB *acb, int type,
                       int flags, int64_t offset, uint64_t bytes,
                       struct iovec *iov, int niov,
                       BlockCompletionFunc *cb, void *opaque)
{
    AioContext *ctx = qemu_get_current_aio_context();
    BlockEngine *e;
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
     * Bounds are checked here for every backend: the kernel does not fail a
     * read at the end of a block device (it returns 0 bytes), and a write
     * past the end of a file would grow it.
     */
    if (type != BLK_REQ_FLUSH &&
        (offset < 0 || bytes > blk_getlength(blk) ||
         (uint64_t)offset > blk_getlength(blk) - bytes)) {
        ret = -EINVAL;
        goto fail;
    }
    /*
     * O_DIRECT: offset and length must be multiples of the logical block
     * size.  We do not do read-modify-write: such a request fails with
     * -EINVAL (virtio-blk sends multiples of the blk_size it advertises).
     */
    if ((type == BLK_REQ_READ || type == BLK_REQ_WRITE) && blk->direct &&
        ((offset | bytes) & (blk->req_align - 1))) {
        ret = -EINVAL;
        goto fail;
    }
    /* The error-injection filter; NULL unless configured (tests). */
    if (unlikely(blk->inject)) {
        switch (blkdebug_check(blk->inject, acb, &ret)) {
        case BLKDEBUG_PASS:
            break;
        case BLKDEBUG_FAIL:
            goto fail;
        case BLKDEBUG_DELAY:
            blk_submit_delayed(ctx, acb);
            return;
        }
    }

    e = blk_engine_get_or_pool(ctx, blk_route(blk, type));
    if (unlikely(!e)) {
        ret = -EIO;
        goto fail;
    }
    if (type == BLK_REQ_READ || type == BLK_REQ_WRITE) {
        ret = blk_bounce_if_needed(blk, acb, e);
        if (ret < 0) {
            goto fail;
        }
    }
    e->stats.requests++;
    e->ops->submit(e, acb);
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
    blk_submit(blk, acb, BLK_REQ_READ, 0, offset, blk_iov_size(iov, niov),
               iov, niov, cb, opaque);
}

void blk_aio_pwritev(BlockBackend *blk, BlockAIOCB *acb, int64_t offset,
                     struct iovec *iov, int niov, int flags,
                     BlockCompletionFunc *cb, void *opaque)
{
    blk_submit(blk, acb, BLK_REQ_WRITE, flags & BDRV_REQ_FUA, offset,
               blk_iov_size(iov, niov), iov, niov, cb, opaque);
}

void blk_aio_flush(BlockBackend *blk, BlockAIOCB *acb,
                   BlockCompletionFunc *cb, void *opaque)
{
    blk_submit(blk, acb, BLK_REQ_FLUSH, 0, 0, 0, NULL, 0, cb, opaque);
}

void blk_aio_pdiscard(BlockBackend *blk, BlockAIOCB *acb, int64_t offset,
                      uint64_t bytes, BlockCompletionFunc *cb, void *opaque)
{
    blk_submit(blk, acb, BLK_REQ_DISCARD, 0, offset, bytes, NULL, 0,
               cb, opaque);
}

void blk_aio_pwrite_zeroes(BlockBackend *blk, BlockAIOCB *acb,
                           int64_t offset, uint64_t bytes, int flags,
                           BlockCompletionFunc *cb, void *opaque)
{
    blk_submit(blk, acb, BLK_REQ_WRITE_ZEROES, flags & BDRV_REQ_MAY_UNMAP,
               offset, bytes, NULL, 0, cb, opaque);
}
