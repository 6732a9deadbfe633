/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Dirty bitmaps (see include/block/dirty-bitmap.h).
 *
 * The node's list (bs->dirty_bitmaps) is published with release stores
 * and read with an acquire load by the writers in every iothread.  A
 * released bitmap is unlinked but kept (bs->dead_bitmaps) until the node
 * is freed, so a writer that loaded it just before keeps touching valid
 * memory; its marks there are simply lost, as nobody reads it any more.
 */
#include "qemu/osdep.h"
#include "block/block_int.h"
#include "block/dirty-bitmap.h"

#define BITS_PER_WORD (sizeof(unsigned long) * 8)

BdrvDirtyBitmap *bdrv_dirty_bitmap_create(BlockBackend *bs,
                                          uint32_t granularity,
                                          GError **errp)
{
    BdrvDirtyBitmap *bm;
    /* Not blk_getlength(): this file is a leaf of the block layer's
     * imports (scripts/block-imports.py). */
    uint64_t size = __atomic_load_n(&bs->size, __ATOMIC_RELAXED);

    if (granularity < BDRV_DIRTY_GRANULARITY_MIN ||
        granularity > BDRV_DIRTY_GRANULARITY_MAX ||
        (granularity & (granularity - 1))) {
        g_set_error(errp, VB_ERROR, 0, "Granularity must be power of 2 "
                    "between 512 and 64M");
        return NULL;
    }
    if (bs->parent) {
        g_set_error(errp, VB_ERROR, 0, "'%s' has a filter above it, whose "
                    "writes would not be tracked: use the node on top",
                    bs->node_name ? bs->node_name : bs->filename);
        return NULL;
    }
    bm = g_new0(BdrvDirtyBitmap, 1);
    bm->size = size;
    bm->shift = __builtin_ctz(granularity);
    bm->nbits = (size + granularity - 1) >> bm->shift;
    bm->bits = g_new0(unsigned long,
                      (bm->nbits + BITS_PER_WORD - 1) / BITS_PER_WORD + 1);
    bm->next = bs->dirty_bitmaps;
    /* Pairs with the acquire load in blk_submit(): a writer that sees
     * the bitmap sees it initialised. */
    __atomic_store_n(&bs->dirty_bitmaps, bm, __ATOMIC_RELEASE);
    return bm;
}

void bdrv_dirty_bitmap_release(BlockBackend *bs, BdrvDirtyBitmap *bm)
{
    BdrvDirtyBitmap **p;

    for (p = &bs->dirty_bitmaps; *p; p = &(*p)->next) {
        if (*p == bm) {
            __atomic_store_n(p, bm->next, __ATOMIC_RELEASE);
            break;
        }
    }
    /* Its @next stays: a writer walking the list may be on it. */
    bm->dead_next = bs->dead_bitmaps;
    bs->dead_bitmaps = bm;
}

void bdrv_dirty_bitmaps_free(BlockBackend *bs)
{
    /* No request in flight: no writer is on any of them. */
    while (bs->dead_bitmaps) {
        BdrvDirtyBitmap *bm = bs->dead_bitmaps;

        bs->dead_bitmaps = bm->dead_next;
        g_free(bm->bits);
        g_free(bm);
    }
}

uint32_t bdrv_dirty_bitmap_granularity(const BdrvDirtyBitmap *bm)
{
    return 1u << bm->shift;
}

void bdrv_dirty_bitmap_set(BdrvDirtyBitmap *bm, uint64_t offset,
                           uint64_t bytes)
{
    uint64_t first, last;

    if (bytes == 0) {
        return;
    }
    first = offset >> bm->shift;
    last = (offset + bytes - 1) >> bm->shift;
    if (last >= bm->nbits) {
        /* Past the size the bitmap was made for (the node grew). */
        if (first >= bm->nbits) {
            return;
        }
        last = bm->nbits - 1;
    }
    while (first <= last) {
        uint64_t w = first / BITS_PER_WORD;
        unsigned int lo = first % BITS_PER_WORD;
        unsigned int n = MIN(BITS_PER_WORD - lo, last - first + 1);
        unsigned long mask = (n == BITS_PER_WORD ? ~0ul :
                              ((1ul << n) - 1)) << lo;

        /* Skip the atomic read-modify-write (and the cache line bouncing
         * between iothreads) when the bits are set already. */
        if ((__atomic_load_n(&bm->bits[w], __ATOMIC_RELAXED) & mask) != mask) {
            __atomic_fetch_or(&bm->bits[w], mask, __ATOMIC_RELEASE);
        }
        first += n;
    }
}

int64_t bdrv_dirty_bitmap_next(BdrvDirtyBitmap *bm, uint64_t bit)
{
    while (bit < bm->nbits) {
        uint64_t w = bit / BITS_PER_WORD;
        unsigned long v = __atomic_load_n(&bm->bits[w], __ATOMIC_ACQUIRE);

        v &= ~0ul << (bit % BITS_PER_WORD);
        if (v) {
            uint64_t b = w * BITS_PER_WORD + __builtin_ctzl(v);

            return b < bm->nbits ? (int64_t)b : -1;
        }
        bit = (w + 1) * BITS_PER_WORD;
    }
    return -1;
}

bool bdrv_dirty_bitmap_test_and_clear(BdrvDirtyBitmap *bm, uint64_t bit)
{
    unsigned long mask = 1ul << (bit % BITS_PER_WORD);

    if (bit >= bm->nbits) {
        return false;
    }
    /* Acquire: the reads of the range that follow must not start before
     * the bit is seen clear by a writer that sets it again. */
    return __atomic_fetch_and(&bm->bits[bit / BITS_PER_WORD], ~mask,
                              __ATOMIC_ACQ_REL) & mask;
}

uint64_t bdrv_dirty_bitmap_count(BdrvDirtyBitmap *bm)
{
    uint64_t n = 0;

    for (uint64_t w = 0; w < (bm->nbits + BITS_PER_WORD - 1) / BITS_PER_WORD;
         w++) {
        n += __builtin_popcountl(__atomic_load_n(&bm->bits[w],
                                                 __ATOMIC_RELAXED));
    }
    return n;
}

uint64_t bdrv_dirty_bitmap_dirty_bytes(BdrvDirtyBitmap *bm)
{
    uint64_t n = bdrv_dirty_bitmap_count(bm) << bm->shift;

    return MIN(n, bm->size);
}

unsigned int bdrv_dirty_writes_in_flight(BlockBackend *bs)
{
    return __atomic_load_n(&bs->dirty_inflight, __ATOMIC_ACQUIRE);
}

static void bdrv_dirty_mark_all(BdrvDirtyBitmap *bm, BlockAIOCB *acb)
{
    for (; bm; bm = __atomic_load_n(&bm->next, __ATOMIC_ACQUIRE)) {
        bdrv_dirty_bitmap_set(bm, acb->offset, acb->bytes);
    }
}

/* Submitting thread: @head is bs->dirty_bitmaps, not NULL. */
void bdrv_dirty_mark_submit(BlockBackend *bs, BdrvDirtyBitmap *head,
                            BlockAIOCB *acb)
{
    acb->flags |= BDRV_REQ_DIRTY_TRACKED;
    __atomic_fetch_add(&bs->dirty_inflight, 1, __ATOMIC_RELAXED);
    bdrv_dirty_mark_all(head, acb);
}

/*
 * Completing thread: a tracked write is done.  acb->blk may be a node
 * below a filter by now; the node it was submitted to is the top of the
 * filter chain (bitmaps live on top nodes only, and no filter is put
 * over a node that has one).
 */
void bdrv_dirty_mark_complete(BlockAIOCB *acb)
{
    BlockBackend *bs = acb->blk;

    acb->flags &= ~BDRV_REQ_DIRTY_TRACKED;
    while (bs->parent) {
        bs = bs->parent;
    }
    bdrv_dirty_mark_all(__atomic_load_n(&bs->dirty_bitmaps,
                                        __ATOMIC_ACQUIRE), acb);
    /* Release: a job that sees the count drop sees the bits set. */
    __atomic_fetch_sub(&bs->dirty_inflight, 1, __ATOMIC_RELEASE);
}
