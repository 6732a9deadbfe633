/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * blkdebug: error injection for tests, a filter driver whose child is the
 * node of any other driver (file, null, rbd).
 *
 * Theory of operation: blk_open() puts a blkdebug node on top only when
 * something is to be injected; otherwise there is no filter and a request
 * costs nothing more.  The filter's request functions run after the
 * generic checks (read-only, bounds, alignment) and ask blkdebug_check():
 * a request that does not match is forwarded to the child; a matching one
 * is either failed with the chosen errno, through the same bottom half as
 * a rejected one, so a device sees exactly what a failing driver would
 * give it and never synchronously; or, with inject-delay, handed to the
 * thread pool, whose worker only sleeps (blkdebug_do_delayed(), the
 * request's engine target), and on
 * its completion, back in the submitting thread, forwarded to the child
 * (or failed).  That makes a slow request whatever the driver below.
 *
 * Threads: the state is written once in the main thread (blk_open()) and
 * read by every thread that submits to the backend; the match and hit
 * counters are shared by them (one relaxed atomic add per candidate
 * request).  blkdebug_do_delayed() runs in thread-pool workers.
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/engine.h"
#include "block/blkdebug.h"

static const BlockDriver bdrv_blkdebug;

struct BlkDebugState {
    BlockInjectOptions opts;    /* ops: what fails; err: set (EIO if 0) */
    unsigned int match_ops;     /* what matches: ops, or all for a delay */
    _Atomic uint64_t seen;      /* matching requests so far */
    _Atomic uint64_t hits;      /* of which failed or delayed */
};

/* A number (decimal, 0x hex or 0 octal) at @s; *@end: what follows. */
static bool blkdebug_parse_number(const char *s, uint64_t *out,
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

/* An errno name from the list below, or a number in 1..4095. */
static bool blkdebug_parse_errno(const char *val, int *err)
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

        if (!blkdebug_parse_number(val, &start, &end)) {
            goto bad_sector;
        }
        if (!*end) {
            last = start;
        } else if (end[0] == '-' && !end[1]) {
            last = UINT64_MAX;
        } else if (end[0] == '-' &&
                   blkdebug_parse_number(end + 1, &last, &end) && !*end &&
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

        if (!blkdebug_parse_number(val, &n, &end) || *end) {
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

        if (!blkdebug_parse_number(val, &ms, &end) || *end ||
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
        if (!blkdebug_parse_errno(val, &inj->err)) {
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
BlkDebugState *blkdebug_new(const BlockInjectOptions *inj,
                            const char *filename)
{
    static const char *const names[] = { "read", "write", "flush", "discard" };
    g_autoptr(GString) what = g_string_new(NULL);
    g_autofree char *range = NULL;
    g_autofree char *times = NULL;
    BlkDebugState *s;

    if (!inj->ops && !inj->delay_ms) {
        if (inj->has_range || inj->after || inj->count || inj->err) {
            warn_report("%s: inject-sector/after/count/errno given without "
                        "inject-error or inject-delay: nothing is injected",
                        filename);
        }
        return NULL;
    }
    s = g_new0(BlkDebugState, 1);
    s->opts = *inj;
    if (s->opts.err <= 0) {
        s->opts.err = EIO;
    }
    /* inject-delay alone: every request type matches */
    s->match_ops = inj->ops ? inj->ops : BLOCK_INJECT_ANY;
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        if (s->match_ops & (1u << i)) {
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
            g_strdup_printf("then fail with errno %d (%s)", s->opts.err,
                            g_strerror(s->opts.err)) :
            g_strdup("then do them");
        warn_report("%s: error injection on (for testing): delay %s by %"
                    PRIu32 " ms, %s, after %" PRIu64 " matching request(s), "
                    "%s; %s", filename, what->str, inj->delay_ms, range,
                    inj->after, times, then);
        return s;
    }
    warn_report("%s: error injection on (for testing): %s, %s, after %"
                PRIu64 " matching request(s), %s, errno %d (%s)",
                filename, what->str, range, inj->after, times,
                s->opts.err, g_strerror(s->opts.err));
    return s;
}

/* Main thread, from blk_close(): no request in flight. */
void blkdebug_free(BlkDebugState *s)
{
    g_free(s);
}

/* Submitting thread. */
BlkDebugAction blkdebug_check(BlkDebugState *s, const BlockAIOCB *acb,
                              int *ret)
{
    const BlockInjectOptions *inj = &s->opts;
    unsigned int bit;
    uint64_t first, last, n;

    switch (acb->type) {
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
    if (!(s->match_ops & bit)) {
        return BLKDEBUG_PASS;
    }
    if (inj->has_range) {
        if (acb->type == BLK_REQ_FLUSH) {
            return BLKDEBUG_PASS;
        }
        first = (uint64_t)acb->offset / 512;
        last = acb->bytes ? ((uint64_t)acb->offset + acb->bytes - 1) / 512
                          : first;
        if (last < inj->sector_start || first > inj->sector_end) {
            return BLKDEBUG_PASS;
        }
    }
    n = atomic_fetch_add_explicit(&s->seen, 1, memory_order_relaxed);
    if (n < inj->after || (inj->count && n - inj->after >= inj->count)) {
        return BLKDEBUG_PASS;
    }
    atomic_fetch_add_explicit(&s->hits, 1, memory_order_relaxed);
    if (inj->delay_ms) {
        return BLKDEBUG_DELAY;
    }
    *ret = -inj->err;
    return BLKDEBUG_FAIL;
}

/* Worker thread: hold the request back, then say what becomes of it:
 * fail it with the returned -errno (inject-error set) or, on 0, go on to
 * the child node in its submitting thread. */
static int blkdebug_do_delayed(BlockAIOCB *acb)
{
    BlkDebugState *s = acb->blk->opaque;

    g_usleep((gulong)s->opts.delay_ms * 1000);
    return s->opts.ops ? -s->opts.err : 0;
}

/* What the thread pool runs for a delayed request: no fd. */
static const BlockEngineTarget blkdebug_delay_target = {
    .fd = -1,
    .run = blkdebug_do_delayed,
};

/* Any thread. */
uint64_t blk_inject_get_hits(BlockBackend *blk)
{
    BlkDebugState *s;

    if (blk->drv != &bdrv_blkdebug) {
        return 0;
    }
    s = blk->opaque;
    return atomic_load_explicit(&s->hits, memory_order_relaxed);
}

/*
 * A delayed request's own callback, kept here rather than in the control
 * block's filter_cb/filter_opaque: a driver above may have put its own
 * there (qcow2 gives a guest's control block straight to its file node,
 * which may be this filter), and a second save would lose the first.
 * Testing only (inject-delay), so the allocation per delayed request does
 * not matter.
 */
typedef struct BlkDebugDelay {
    BlockAIOCB *acb;
    BlockCompletionFunc *cb;
    void *opaque;
} BlkDebugDelay;

/* Owner thread: a delayed request is back from its worker. */
static void blkdebug_delay_done(void *opaque, int ret)
{
    BlkDebugDelay *d = opaque;
    BlockAIOCB *acb = d->acb;
    BlockBackend *bs = acb->blk;

    acb->cb = d->cb;
    acb->opaque = d->opaque;
    g_free(d);
    if (ret < 0) {
        acb->cb(acb->opaque, ret);
        return;
    }
    acb->blk = bs->child;
    blk_drv_submit(bs->child, qemu_get_current_aio_context(), acb);
}

/* Owner thread of @ctx: every request type. */
static void blkdebug_submit(BlockBackend *bs, AioContext *ctx,
                            BlockAIOCB *acb)
{
    BlockEngine *e;
    BlkDebugDelay *d;
    int ret = 0;

    switch (blkdebug_check(bs->opaque, acb, &ret)) {
    case BLKDEBUG_PASS:
        acb->blk = bs->child;
        blk_drv_submit(bs->child, ctx, acb);
        return;
    case BLKDEBUG_FAIL:
        break;
    case BLKDEBUG_DELAY:
        e = blk_engine_get_or_pool(ctx, &thread_pool_engine_ops);
        if (!e) {
            ret = -EIO;
            break;
        }
        d = g_new(BlkDebugDelay, 1);
        d->acb = acb;
        d->cb = acb->cb;
        d->opaque = acb->opaque;
        acb->cb = blkdebug_delay_done;
        acb->opaque = d;
        acb->target = &blkdebug_delay_target;
        e->stats.requests++;
        e->ops->submit(e, acb);
        return;
    }
    blk_complete_later(ctx, acb, ret);
}

/* Main thread: the filter over bs->child, which blk_open() set. */
static bool blkdebug_open(BlockBackend *bs, const BlockOptions *opts,
                          GError **errp)
{
    BlockBackend *child = bs->child;

    bs->opaque = blkdebug_new(&opts->inject, child->filename);
    if (!bs->opaque) {
        g_set_error(errp, VB_ERROR, 0, "%s: nothing to inject",
                    child->filename);
        return false;
    }
    bs->filename = g_strdup(child->filename);
    bs->size = child->size;
    bs->bl = child->bl;
    bs->readonly = child->readonly;
    bs->batch = child->batch;
    return true;
}

static void blkdebug_close(BlockBackend *bs)
{
    blkdebug_free(bs->opaque);
}

static bool blkdebug_truncate(BlockBackend *bs, uint64_t size, GError **errp)
{
    return blk_truncate(bs->child, size, errp);
}

static const BlockDriver bdrv_blkdebug = {
    .format_name = "blkdebug",
    .is_filter = true,
    .bdrv_open = blkdebug_open,
    .bdrv_close = blkdebug_close,
    .bdrv_truncate = blkdebug_truncate,
    .bdrv_aio_preadv = blkdebug_submit,
    .bdrv_aio_pwritev = blkdebug_submit,
    .bdrv_aio_flush = blkdebug_submit,
    .bdrv_aio_pdiscard = blkdebug_submit,
    .bdrv_aio_pwrite_zeroes = blkdebug_submit,
};
BLOCK_DRIVER_REGISTER(bdrv_blkdebug)
