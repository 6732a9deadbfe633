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
 * Error injection (BlockOptions.inject, for tests) sits at the same point:
 * after the cheap checks, a matching request is completed with the chosen
 * errno through the same bottom half as a rejected one, so a device sees
 * exactly what a failing engine would give it, never synchronously.  With
 * inject-delay a matching request goes to the thread pool instead, whose
 * worker sleeps and then does it (or fails it): a slow request, whatever
 * the aio mode.  The match counter is shared by every iothread using the
 * backend (one atomic add per candidate request, only while injection is
 * on).
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "block/block.h"
#include "block/block_int.h"

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

static bool blk_inject_parse_sector(const char *s, uint64_t *out,
                                    const char **end)
{
    char *e;

    if (!g_ascii_isdigit(*s)) {
        return false;
    }
    errno = 0;
    *out = g_ascii_strtoull(s, &e, 0);
    if (errno) {
        return false;
    }
    *end = e;
    return true;
}

static bool blk_inject_parse_errno(const char *val, int *err)
{
    static const struct {
        const char *name;
        int err;
    } names[] = {
        { "EIO", EIO }, { "ENOSPC", ENOSPC }, { "EROFS", EROFS },
        { "ENOMEM", ENOMEM }, { "EAGAIN", EAGAIN }, { "EDQUOT", EDQUOT },
        { "EINVAL", EINVAL }, { "ENXIO", ENXIO },
    };
    char *end;
    uint64_t v;

    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        if (!g_ascii_strcasecmp(val, names[i].name)) {
            *err = names[i].err;
            return true;
        }
    }
    if (!g_ascii_isdigit(*val)) {
        return false;
    }
    v = g_ascii_strtoull(val, &end, 10);
    if (*end || v == 0 || v > 4095) {
        return false;
    }
    *err = v;
    return true;
}

/* Any thread. */
bool blk_inject_parse_option(BlockInjectOptions *inj, const char *key,
                             const char *val, GError **errp)
{
    const char *end;

    if (!strcmp(key, "inject-error")) {
        g_auto(GStrv) ops = g_strsplit(val, "+", -1);
        unsigned int mask = 0;

        if (!*val) {
            g_set_error(errp, VB_ERROR, 0, "inject-error needs a value: "
                        "read, write, flush, discard or any, or none");
            return false;
        }
        for (char **op = ops; *op; op++) {
            if (!strcmp(*op, "read")) {
                mask |= BLOCK_INJECT_READ;
            } else if (!strcmp(*op, "write")) {
                mask |= BLOCK_INJECT_WRITE;
            } else if (!strcmp(*op, "flush")) {
                mask |= BLOCK_INJECT_FLUSH;
            } else if (!strcmp(*op, "discard")) {
                mask |= BLOCK_INJECT_DISCARD;
            } else if (!strcmp(*op, "any")) {
                mask |= BLOCK_INJECT_ANY;
            } else if (!strcmp(*op, "none") && !op[1] && op == ops) {
                mask = 0;
            } else {
                g_set_error(errp, VB_ERROR, 0, "bad value '%s' for "
                            "inject-error: use read, write, flush, discard "
                            "or any (several joined with '+'), or none", val);
                return false;
            }
        }
        inj->ops = mask;
        return true;
    }
    if (!strcmp(key, "inject-sector")) {
        uint64_t start, last;

        if (!blk_inject_parse_sector(val, &start, &end)) {
            goto bad_sector;
        }
        if (!*end) {
            last = start;
        } else if (end[0] == '-' && !end[1]) {
            last = UINT64_MAX;
        } else if (end[0] == '-' &&
                   blk_inject_parse_sector(end + 1, &last, &end) && !*end &&
                   last >= start) {
            /* START-END */
        } else {
            goto bad_sector;
        }
        inj->has_range = true;
        inj->sector_start = start;
        inj->sector_end = last;
        return true;
    bad_sector:
        g_set_error(errp, VB_ERROR, 0, "bad value '%s' for inject-sector: "
                    "use START, START-END (END >= START) or START- in "
                    "512-byte sectors", val);
        return false;
    }
    if (!strcmp(key, "inject-after") || !strcmp(key, "inject-count")) {
        uint64_t n;

        if (!blk_inject_parse_sector(val, &n, &end) || *end) {
            g_set_error(errp, VB_ERROR, 0, "bad value '%s' for %s: use a "
                        "number of requests", val, key);
            return false;
        }
        if (key[7] == 'a') {
            inj->after = n;
        } else {
            inj->count = n;
        }
        return true;
    }
    if (!strcmp(key, "inject-delay")) {
        uint64_t ms;

        if (!blk_inject_parse_sector(val, &ms, &end) || *end ||
            ms > BLOCK_INJECT_MAX_DELAY_MS) {
            g_set_error(errp, VB_ERROR, 0, "bad value '%s' for inject-delay: "
                        "use a number of milliseconds from 0 to %u", val,
                        BLOCK_INJECT_MAX_DELAY_MS);
            return false;
        }
        inj->delay_ms = ms;
        return true;
    }
    if (!strcmp(key, "inject-errno")) {
        if (!blk_inject_parse_errno(val, &inj->err)) {
            g_set_error(errp, VB_ERROR, 0, "bad value '%s' for inject-errno: "
                        "use EIO, ENOSPC, EROFS, ENOMEM, EAGAIN, EDQUOT, "
                        "EINVAL, ENXIO or an errno number", val);
            return false;
        }
        return true;
    }
    g_set_error(errp, VB_ERROR, 0, "unknown error-injection key '%s' (use "
                "inject-error, inject-delay, inject-sector, inject-after, "
                "inject-count or inject-errno)", key);
    return false;
}

/* Main thread, from blk_open(). */
static void blk_inject_setup(BlockBackend *blk, const BlockInjectOptions *inj)
{
    static const char *const names[] = { "read", "write", "flush", "discard" };
    g_autoptr(GString) what = g_string_new(NULL);
    g_autofree char *range = NULL;
    g_autofree char *times = NULL;

    if (!inj->ops && !inj->delay_ms) {
        if (inj->has_range || inj->after || inj->count || inj->err) {
            warn_report("%s: inject-sector/after/count/errno given without "
                        "inject-error or inject-delay: nothing is injected",
                        blk->filename);
        }
        return;
    }
    blk->inject = *inj;
    if (blk->inject.err <= 0) {
        blk->inject.err = EIO;
    }
    /* inject-delay alone: every request type matches */
    blk->inject_match_ops = inj->ops ? inj->ops : BLOCK_INJECT_ANY;
    blk->inject_on = true;
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        if (blk->inject_match_ops & (1u << i)) {
            g_string_append_printf(what, "%s%s", what->len ? "+" : "",
                                   names[i]);
        }
    }
    if (!inj->has_range) {
        range = g_strdup("any sector");
    } else if (inj->sector_end == UINT64_MAX) {
        range = g_strdup_printf("sectors %" PRIu64 " to the end",
                                inj->sector_start);
    } else {
        range = g_strdup_printf("sectors %" PRIu64 "-%" PRIu64,
                                inj->sector_start, inj->sector_end);
    }
    times = inj->count ? g_strdup_printf("at most %" PRIu64 " time(s)",
                                         inj->count) : g_strdup("always");
    if (inj->delay_ms) {
        g_autofree char *then = inj->ops ?
            g_strdup_printf("then fail with errno %d (%s)", blk->inject.err,
                            g_strerror(blk->inject.err)) :
            g_strdup("then do them");
        warn_report("%s: error injection on (for testing): delay %s by %"
                    PRIu32 " ms, %s, after %" PRIu64 " matching request(s), "
                    "%s; %s", blk->filename, what->str, inj->delay_ms, range,
                    inj->after, times, then);
        return;
    }
    warn_report("%s: error injection on (for testing): %s, %s, after %"
                PRIu64 " matching request(s), %s, errno %d (%s)",
                blk->filename, what->str, range, inj->after, times,
                blk->inject.err, g_strerror(blk->inject.err));
}

/* Worker thread. */
int blk_inject_do_delayed(BlockAIOCB *acb)
{
    BlockBackend *blk = acb->blk;

    if (blk->inject.ops) {
        return -blk->inject.err;
    }
    if (blk->is_null) {
        if (acb->type == BLK_REQ_READ && blk->null_read_zeroes) {
            for (int i = 0; i < acb->niov; i++) {
                memset(acb->iov[i].iov_base, 0, acb->iov[i].iov_len);
            }
        }
        return 0;
    }
    return raw_do_request(acb);
}

/* Any thread. */
uint64_t blk_inject_get_hits(BlockBackend *blk)
{
    return atomic_load_explicit(&blk->inject_hits, memory_order_relaxed);
}

/* Submitting thread: does error injection fail this request? */
static bool blk_inject_hit(BlockBackend *blk, int type, int64_t offset,
                           uint64_t bytes)
{
    const BlockInjectOptions *inj = &blk->inject;
    unsigned int bit;
    uint64_t first, last, n;

    switch (type) {
    case BLK_REQ_READ:
        bit = BLOCK_INJECT_READ;
        break;
    case BLK_REQ_WRITE:
    case BLK_REQ_WRITE_ZEROES:
        bit = BLOCK_INJECT_WRITE;
        break;
    case BLK_REQ_FLUSH:
        bit = BLOCK_INJECT_FLUSH;
        break;
    default:
        bit = BLOCK_INJECT_DISCARD;
        break;
    }
    if (!(blk->inject_match_ops & bit)) {
        return false;
    }
    if (inj->has_range) {
        if (type == BLK_REQ_FLUSH) {
            return false;
        }
        first = (uint64_t)offset / 512;
        last = bytes ? ((uint64_t)offset + bytes - 1) / 512 : first;
        if (last < inj->sector_start || first > inj->sector_end) {
            return false;
        }
    }
    n = atomic_fetch_add_explicit(&blk->inject_seen, 1, memory_order_relaxed);
    if (n < inj->after || (inj->count && n - inj->after >= inj->count)) {
        return false;
    }
    atomic_fetch_add_explicit(&blk->inject_hits, 1, memory_order_relaxed);
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
        blk_inject_setup(blk, &opts->inject);
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
    blk_inject_setup(blk, &opts->inject);
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
    thread_pool_blk_cleanup(blk);
    g_free(blk->filename);
    g_free(blk);
}

/* Getters: any thread (the fields are immutable after blk_open()). */
uint64_t blk_getlength(BlockBackend *blk)
{
    return blk->size;
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

static void blk_submit(BlockBackend *blk, BlockAIOCB *acb, int type,
                       int flags, int64_t offset, uint64_t bytes,
                       struct iovec *iov, int niov,
                       BlockCompletionFunc *cb, void *opaque)
{
    AioContext *ctx = qemu_get_current_aio_context();
    const BlockEngineOps *ops;
    BlockEngine *e;
    bool delayed = false;
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
        (offset < 0 || bytes > blk->size || (uint64_t)offset > blk->size - bytes)) {
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
    if (unlikely(blk->inject_on) && blk_inject_hit(blk, type, offset, bytes)) {
        if (!blk->inject.delay_ms) {
            ret = -blk->inject.err;
            goto fail;
        }
        delayed = true;
    }

    ops = unlikely(delayed) ? &thread_pool_engine_ops : blk_route(blk, type);
    e = blk_engine_get(ctx, ops, NULL);
    if (unlikely(!e)) {
        static gsize warned;
        if (g_once_init_enter(&warned)) {
            g_once_init_leave(&warned, 1);
            warn_report("cannot create the %s engine in this thread; using "
                        "the thread pool", ops->name);
        }
        e = blk_engine_get(ctx, &thread_pool_engine_ops, NULL);
        if (!e) {
            ret = -EIO;
            goto fail;
        }
    }
    if (type == BLK_REQ_READ || type == BLK_REQ_WRITE) {
        ret = blk_bounce_if_needed(blk, acb, e);
        if (ret < 0) {
            goto fail;
        }
    }
    e->stats.requests++;
    if (unlikely(delayed)) {
        thread_pool_submit_delayed(e, acb);
        return;
    }
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
