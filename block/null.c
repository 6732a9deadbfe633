/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The null driver: completes requests without touching storage (reads
 * zero-filled on request), through the "bh" engine's bottom half
 * (blk_complete_later(), include/block/engine.h), to measure the overhead
 * of everything else.  Owner thread only.
 */
#include "qemu/osdep.h"
#include "block/block_int.h"
#include "block/engine.h"
#include "block/null.h"
#include "qemu/qmp-args.h"

#define NULL_DEFAULT_SIZE (1ULL << 30)      /* QEMU's null-co default */

/* Main thread. */
static bool null_open(BlockBackend *bs, const BlockOptions *opts,
                      GError **errp)
{
    const BlockNullOptions *no = opts->driver_opts;

    if (!no || no->size == 0) {
        g_set_error(errp, VB_ERROR, 0,
                    "driver=null needs a size (for example size=1G)");
        return false;
    }
    bs->opaque = g_new(bool, 1);
    *(bool *)bs->opaque = no->read_zeroes;
    bs->size = no->size;
    bs->bl.can_discard = true;
    bs->bl.can_write_zeroes = true;
    bs->filename = g_strdup("null");
    return true;
}

static void null_close(BlockBackend *bs)
{
    g_free(bs->opaque);
}

/* Owner thread of @ctx: every data request type. */
static void null_drv_submit(BlockBackend *bs, AioContext *ctx,
                            BlockAIOCB *acb)
{
    if (acb->type == BLK_REQ_READ && *(bool *)bs->opaque) {
        /* read-zeroes=on */
        for (int i = 0; i < acb->niov; i++) {
            memset(acb->iov[i].iov_base, 0, acb->iov[i].iov_len);
        }
    }
    blk_complete_later(ctx, acb, 0);
}

/* Owner thread of @ctx: zeroes where reads return them, data otherwise
 * (what QEMU's null-co says). */
static void null_block_status(BlockBackend *bs, AioContext *ctx,
                              BlockAIOCB *acb)
{
    acb->status->pnum = acb->bytes;
    acb->status->flags = BDRV_BLOCK_ALLOCATED |
        (*(bool *)bs->opaque ? BDRV_BLOCK_ZERO : BDRV_BLOCK_DATA);
    blk_complete_later(ctx, acb, 0);
}

/*
 * The QEMU syntaxes (blk_options_parse()): driver=null-co or null-aio
 * (the same here)[,size=N][,read-zeroes=on].  --export: driver=null,size=N.
 * Main thread.
 */
static bool null_parse_options(BlockOptions *opts, QmpArgs *a,
                               BlockOptsParse *p, GError **errp)
{
    BlockNullOptions *no = blk_options_parse_keep(p,
                                                  g_new0(BlockNullOptions, 1));
    uint64_t size = NULL_DEFAULT_SIZE;
    bool rz = false;

    opts->driver_opts = no;
    if (p->export_syntax) {
        /* size=N, required. */
        const char *str = NULL;

        if (!qmp_args_str(a, "size", false, &str, errp)) {
            return false;
        }
        if (!str) {
            g_set_error(errp, VB_ERROR, 0, "driver=null needs size=N");
            return false;
        }
        if (!qemu_parse_size(str, &size) || size == 0) {
            g_set_error(errp, VB_ERROR, 0, "bad value '%s' for size: use a "
                        "positive number with an optional k, M, G or T "
                        "suffix", str);
            return false;
        }
        no->size = size;
        return true;
    }
    if (!qmp_args_size(a, "size", false, &size, NULL, errp) ||
        !qmp_args_bool(a, "read-zeroes", &rz, errp)) {
        return false;
    }
    no->size = size;
    no->read_zeroes = rz;
    return true;
}

/* QEMU's names: null-co (null-aio keeps its own), and the node's options
 * as its filename unless they are the defaults.  Main thread. */
static void null_node_names(BlockBackend *blk, const BlockOptions *opts,
                            const char *given, BlockNodeNames *out)
{
    const char *qemu_name = g_strcmp0(given, "null-aio") ? "null-co" :
                                                           "null-aio";
    uint64_t size = blk_getlength(blk);

    out->driver = g_strdup(qemu_name);
    out->no_storage = true;
    if (size == NULL_DEFAULT_SIZE) {
        out->filename = g_strdup_printf("%s://", qemu_name);
    } else {
        out->filename = g_strdup_printf("json:{\"driver\": \"%s\", "
                                        "\"size\": %" PRIu64 "}",
                                        qemu_name, size);
    }
}

static const char *const null_aliases[] = { "null-co", "null-aio", NULL };

static const BlockDriver bdrv_null = {
    .format_name = "null",
    .aliases = null_aliases,
    .bdrv_parse_options = null_parse_options,
    .bdrv_node_names = null_node_names,
    .bdrv_open = null_open,
    .bdrv_close = null_close,
    .bdrv_aio_preadv = null_drv_submit,
    .bdrv_aio_pwritev = null_drv_submit,
    .bdrv_aio_flush = null_drv_submit,
    .bdrv_aio_pdiscard = null_drv_submit,
    .bdrv_aio_pwrite_zeroes = null_drv_submit,
    .bdrv_aio_block_status = null_block_status,
};
BLOCK_DRIVER_REGISTER(bdrv_null)
