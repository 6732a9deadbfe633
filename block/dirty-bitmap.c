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

/* Bits @lo to @lo + @n - 1 of a word (@n >= 1, @lo + @n <= the word). */
static inline unsigned long bdrv_dirty_word_mask(unsigned int lo,
                                                 unsigned int n)
{
    return (n == BITS_PER_WORD ? ~0ul : ((1ul << n) - 1)) << lo;
}

/* The bits of @mask below its lowest bit that is set in @stop. */
static inline unsigned long bdrv_dirty_mask_below(unsigned long mask,
                                                  unsigned long stop)
{
    stop &= mask;
    return stop ? mask & ((1ul << __builtin_ctzl(stop)) - 1) : mask;
}

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
    bm->busy = g_new0(unsigned long,
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
        g_free(bm->busy);
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
        unsigned long mask = bdrv_dirty_word_mask(lo, n);

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

/*
 * Mark busy the bits of @mask in word @w, up to the first that is busy
 * already; the ones marked.  One atomic OR (and one AND when another
 * copy holds a bit of the range, to give back those past it).
 */
static unsigned long bdrv_dirty_take_busy_word(BdrvDirtyBitmap *bm,
                                               uint64_t w,
                                               unsigned long mask)
{
    unsigned long old = __atomic_fetch_or(&bm->busy[w], mask,
                                          __ATOMIC_ACQ_REL);
    unsigned long got = bdrv_dirty_mask_below(mask, old);
    /* Ours past the first busy one: give them back. */
    unsigned long extra = mask & ~old & ~got;

    if (extra) {
        __atomic_fetch_and(&bm->busy[w], ~extra, __ATOMIC_RELEASE);
    }
    return got;
}

uint64_t bdrv_dirty_bitmap_take_busy(BdrvDirtyBitmap *bm, uint64_t bit,
                                     uint64_t n)
{
    uint64_t end = MIN(bit + n, bm->nbits);
    uint64_t taken = 0;

    while (bit < end) {
        unsigned int lo = bit % BITS_PER_WORD;
        unsigned int k = MIN(BITS_PER_WORD - lo, end - bit);
        unsigned long mask = bdrv_dirty_word_mask(lo, k);
        unsigned long got = bdrv_dirty_take_busy_word(bm, bit / BITS_PER_WORD,
                                                      mask);

        taken += __builtin_popcountl(got);
        if (got != mask) {
            break;          /* a copy of the range is in flight */
        }
        bit += k;
    }
    return taken;
}

/*
 * The run of dirty bits that are not busy from @bit, at most @max of
 * them, word by word: a few atomics per 64 bits, not two per bit, so a
 * small granularity costs the copy nothing.  A bit that an active write
 * cleaned between our load and our busy mark ends the run (its dirty
 * bits past it are given back as they were).
 */
uint64_t bdrv_dirty_bitmap_take_run(BdrvDirtyBitmap *bm, uint64_t bit,
                                    uint64_t max)
{
    uint64_t end = bit + MIN(max, bm->nbits - MIN(bit, bm->nbits));
    uint64_t taken = 0;

    while (bit < end) {
        uint64_t w = bit / BITS_PER_WORD;
        unsigned int lo = bit % BITS_PER_WORD;
        unsigned int k = MIN(BITS_PER_WORD - lo, end - bit);
        unsigned long mask = bdrv_dirty_word_mask(lo, k);
        unsigned long d = __atomic_load_n(&bm->bits[w], __ATOMIC_RELAXED);
        unsigned long run = bdrv_dirty_mask_below(mask, ~d);
        unsigned long got, old, back;

        if (!run) {
            break;
        }
        got = bdrv_dirty_take_busy_word(bm, w, run);
        if (!got) {
            break;
        }
        /* Acquire: our reads of the range must not start before a
         * writer that sets a bit again can see it clear. */
        old = __atomic_fetch_and(&bm->bits[w], ~got, __ATOMIC_ACQ_REL);
        back = got & ~bdrv_dirty_mask_below(got, ~old);
        if (back) {
            /* Cleaned meanwhile (an active write came and went): the
             * run stops there; what we cleared past it is dirty again,
             * and not ours. */
            __atomic_fetch_or(&bm->bits[w], old & back, __ATOMIC_RELEASE);
            __atomic_fetch_and(&bm->busy[w], ~back, __ATOMIC_RELEASE);
            got &= ~back;
        }
        taken += __builtin_popcountl(got);
        if (got != mask) {
            break;
        }
        bit += k;
    }
    return taken;
}

/* Clear the busy bits from @first to @last, a word at a time. */
static void bdrv_dirty_busy_range(BdrvDirtyBitmap *bm, uint64_t first,
                                  uint64_t last)
{
    if (last >= bm->nbits) {
        last = bm->nbits - 1;
    }
    while (first <= last) {
        unsigned int lo = first % BITS_PER_WORD;
        unsigned int k = MIN(BITS_PER_WORD - lo, last - first + 1);

        __atomic_fetch_and(&bm->busy[first / BITS_PER_WORD],
                           ~bdrv_dirty_word_mask(lo, k), __ATOMIC_RELEASE);
        first += k;
    }
}

void bdrv_dirty_bitmap_release_busy(BdrvDirtyBitmap *bm, uint64_t offset,
                                    uint64_t bytes)
{
    if (bytes) {
        bdrv_dirty_busy_range(bm, offset >> bm->shift,
                              (offset + bytes - 1) >> bm->shift);
    }
}

void bdrv_dirty_bitmap_set_active(BdrvDirtyBitmap *bm, BdrvActiveMirror *am)
{
    __atomic_store_n(&bm->active, am, __ATOMIC_RELEASE);
}

/* A free slot of @am, or NULL. */
static BdrvActiveWrite *bdrv_active_get_slot(BdrvActiveMirror *am)
{
    for (unsigned int w = 0; w < am->n_slots / BITS_PER_WORD; w++) {
        unsigned long v = __atomic_load_n(&am->slot_used[w],
                                          __ATOMIC_RELAXED);

        while (~v) {
            unsigned int i = __builtin_ctzl(~v);

            if (!(__atomic_fetch_or(&am->slot_used[w], 1ul << i,
                                    __ATOMIC_ACQUIRE) & (1ul << i))) {
                return &am->slots[w * BITS_PER_WORD + i];
            }
            v = __atomic_load_n(&am->slot_used[w], __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

static void bdrv_active_put_slot(BdrvActiveMirror *am, BdrvActiveWrite *w)
{
    unsigned int i = w - am->slots;

    __atomic_fetch_and(&am->slot_used[i / BITS_PER_WORD],
                       ~(1ul << (i % BITS_PER_WORD)), __ATOMIC_RELEASE);
}

/*
 * Write-blocking: take @acb (completed on @top with @ret) over, if its
 * range is not being copied and a slot is free.  Its whole granules
 * become clean (the write about to go out carries them); the partial
 * ones at its ends stay dirty for the job.  Any other write to the
 * range in flight marks it again when it completes.
 */
static bool bdrv_dirty_active_start(BdrvDirtyBitmap *bm, BdrvActiveMirror *am,
                                    BlockBackend *top, BlockAIOCB *acb,
                                    int ret)
{
    uint64_t first = (uint64_t)acb->offset >> bm->shift;
    uint64_t last = ((uint64_t)acb->offset + acb->bytes - 1) >> bm->shift;
    uint64_t gran = 1ull << bm->shift;
    uint64_t full_first = ((uint64_t)acb->offset + gran - 1) >> bm->shift;
    uint64_t full_end = ((uint64_t)acb->offset + acb->bytes) >> bm->shift;
    uint64_t got;
    BdrvActiveWrite *w;

    if (ret < 0 || !acb->bytes || last >= bm->nbits ||
        (acb->type != BLK_REQ_WRITE && acb->type != BLK_REQ_WRITE_ZEROES)) {
        return false;
    }
    w = bdrv_active_get_slot(am);
    if (!w) {
        return false;
    }
    got = bdrv_dirty_bitmap_take_busy(bm, first, last - first + 1);
    if (got != last - first + 1) {
        /* A copy of the range is in flight: the job copies it after
         * (the caller marks the bits). */
        if (got) {
            bdrv_dirty_busy_range(bm, first, first + got - 1);
        }
        bdrv_active_put_slot(am, w);
        return false;
    }
    /* The partial granules at both ends stay for the job to copy. */
    bdrv_dirty_bitmap_set(bm, acb->offset, acb->bytes);
    while (full_first < full_end) {
        unsigned int lo = full_first % BITS_PER_WORD;
        unsigned int k = MIN(BITS_PER_WORD - lo, full_end - full_first);

        __atomic_fetch_and(&bm->bits[full_first / BITS_PER_WORD],
                           ~bdrv_dirty_word_mask(lo, k), __ATOMIC_RELEASE);
        full_first += k;
    }
    __atomic_fetch_add(&am->in_flight, 1, __ATOMIC_RELAXED);
    w->guest = acb;
    w->guest_ret = ret;
    w->top = top;
    w->bm = bm;
    w->am = am;
    am->submit(w);
    return true;
}

void bdrv_dirty_active_finish(BdrvActiveWrite *w, int ret)
{
    BlockAIOCB *acb = w->guest;
    BdrvDirtyBitmap *bm = w->bm;
    BdrvActiveMirror *am = w->am;
    BlockBackend *top = w->top;

    if (ret < 0) {
        /* The job copies it again, and reports the error then. */
        bdrv_dirty_bitmap_set(bm, acb->offset, acb->bytes);
        __atomic_fetch_add(&am->failed, 1, __ATOMIC_RELAXED);
    }
    bdrv_dirty_bitmap_release_busy(bm, acb->offset, acb->bytes);
    bdrv_active_put_slot(am, w);
    /* Release: a job that sees the counts drop sees the bits.  The
     * node's count last: a job that ends waits for it, and may free
     * @am (not @top) as soon as the first one drops. */
    __atomic_fetch_sub(&am->in_flight, 1, __ATOMIC_RELEASE);
    __atomic_fetch_sub(&top->dirty_inflight, 1, __ATOMIC_RELEASE);
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
bool bdrv_dirty_mark_complete(BlockAIOCB *acb, int ret)
{
    BlockBackend *bs = acb->blk;
    BdrvDirtyBitmap *bm;
    bool taken = false;

    acb->flags &= ~BDRV_REQ_DIRTY_TRACKED;
    while (bs->parent) {
        bs = bs->parent;
    }
    for (bm = __atomic_load_n(&bs->dirty_bitmaps, __ATOMIC_ACQUIRE); bm;
         bm = __atomic_load_n(&bm->next, __ATOMIC_ACQUIRE)) {
        BdrvActiveMirror *am = __atomic_load_n(&bm->active,
                                               __ATOMIC_ACQUIRE);

        if (unlikely(am) && !taken &&
            bdrv_dirty_active_start(bm, am, bs, acb, ret)) {
            taken = true;
            continue;
        }
        bdrv_dirty_bitmap_set(bm, acb->offset, acb->bytes);
    }
    if (!taken) {
        /* Release: a job that sees the count drop sees the bits set. */
        __atomic_fetch_sub(&bs->dirty_inflight, 1, __ATOMIC_RELEASE);
    }
    return taken;
}
