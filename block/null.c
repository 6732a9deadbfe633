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

static const BlockDriver bdrv_null = {
    .format_name = "null",
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
