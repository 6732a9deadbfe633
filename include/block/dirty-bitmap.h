/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Dirty tracking: which parts of a node were written since a job started
 * looking (a mirror copies them again).
 *
 * A bitmap has one bit per @granularity bytes of the node (a power of two
 * from 512 bytes to 64 MiB).  Every write, write-zeroes and discard
 * submitted to the node (blk_aio_*() from any iothread) sets the bits of
 * its range with atomic fetch-or, once when it is submitted and once more
 * when it completes: a job that cleared a bit and read the range while a
 * write was in flight would otherwise miss the data that write puts down
 * after the read.  The node also counts those writes in flight
 * (bdrv_dirty_writes_in_flight()): a job that must end with nothing
 * missed waits until the count and the bitmap are both empty.
 *
 * A mirror with copy-mode=write-blocking (BdrvActiveMirror below) hooks
 * the completion instead: the write goes to its target as well before
 * the request finishes, and its range is clean afterwards.
 *
 * Cost when no bitmap is attached: one load and one predictable branch
 * per write in blk_submit(), one flag test in blk_acb_complete()
 * (scripts/bench/ir-per-io.sh, null driver, depth 32: 3 and 2
 * instructions per I/O).  With a bitmap: no lock and no allocation per
 * request.
 *
 * Only writes submitted to the node itself (or to a format above it,
 * whose requests to its file reach the file through the same entry) are
 * seen; a write that reaches the node from a filter above it bypasses
 * that entry, so a bitmap is attached to the top node of a filter chain
 * (bdrv_dirty_bitmap_create() refuses otherwise).
 *
 * Threads: create/release/clear/scan in the main thread; marking from
 * any thread.  A released bitmap stays allocated until the node closes,
 * because an iothread may still be walking the list when it goes.
 */
#ifndef BLOCK_DIRTY_BITMAP_H
#define BLOCK_DIRTY_BITMAP_H

#include "qemu/osdep.h"
#include "block/block.h"

#define BDRV_DIRTY_GRANULARITY_MIN  512u
#define BDRV_DIRTY_GRANULARITY_MAX  (64u << 20)

/* Internal request flag: the request marked the node's bitmaps when it
 * was submitted and marks them again, and counts down, at completion. */
#define BDRV_REQ_DIRTY_TRACKED 0x40000000

typedef struct BdrvActiveMirror BdrvActiveMirror;

typedef struct BdrvDirtyBitmap {
    uint64_t size;                      /* bytes covered */
    unsigned int shift;                 /* log2(granularity) */
    uint64_t nbits;
    unsigned long *bits;                /* atomic */
    /*
     * atomic: a copy of the bit's range to the job's target is in flight
     * (the job's own, or an active write's).  At most one at a time, so
     * an older copy never lands after a newer one.
     */
    unsigned long *busy;
    BdrvActiveMirror *active;           /* atomic: write-blocking mode */
    struct BdrvDirtyBitmap *next;       /* atomic: the node's list */
    struct BdrvDirtyBitmap *dead_next;  /* main thread: released ones */
} BdrvDirtyBitmap;

/*
 * copy-mode=write-blocking (QEMU's active mirror): a write of the users
 * that completed on the source is written to @target too before it
 * completes, from the thread that completes it, and its whole granules
 * are clean again; so the job converges whatever the write rate (the
 * users wait for the target instead).  A write whose range has a copy
 * in flight, or that finds no free slot, falls back to marking its
 * bits.  The slots are allocated by the job: nothing per request.
 */
typedef struct BdrvActiveWrite {
    BlockAIOCB acb;                     /* the write to the target */
    BlockAIOCB *guest;                  /* the source's, finished after */
    int guest_ret;
    BlockBackend *top;                  /* whose count of writes drops */
    BdrvDirtyBitmap *bm;
    BdrvActiveMirror *am;
} BdrvActiveWrite;

struct BdrvActiveMirror {
    /* Submit @w->acb's write to the target (a thread that completes
     * the users' writes); its completion calls
     * bdrv_dirty_active_finish(), then blk_acb_finish() on @w->guest. */
    void (*submit)(BdrvActiveWrite *w);
    void *opaque;
    BdrvActiveWrite *slots;
    unsigned int n_slots;               /* a multiple of the word size */
    unsigned long *slot_used;           /* atomic */
    unsigned int in_flight;             /* atomic: active writes */
    unsigned int failed;                /* atomic: target writes failed */
};

/* Main thread.  NULL with @errp set (bad granularity, a filter above). */
BdrvDirtyBitmap *bdrv_dirty_bitmap_create(BlockBackend *bs,
                                          uint32_t granularity,
                                          GError **errp);
void bdrv_dirty_bitmap_release(BlockBackend *bs, BdrvDirtyBitmap *bm);
uint32_t bdrv_dirty_bitmap_granularity(const BdrvDirtyBitmap *bm);

/* Any thread: set the bits of [@offset, @offset + @bytes). */
void bdrv_dirty_bitmap_set(BdrvDirtyBitmap *bm, uint64_t offset,
                           uint64_t bytes);
/* Main thread: the first set bit at or after @bit, or -1. */
int64_t bdrv_dirty_bitmap_next(BdrvDirtyBitmap *bm, uint64_t bit);
/* Main thread: clear @bit; whether it was set. */
bool bdrv_dirty_bitmap_test_and_clear(BdrvDirtyBitmap *bm, uint64_t bit);
/*
 * Main thread: mark @n bits from @bit busy (a copy of theirs goes out)
 * as long as none is busy already; how many were marked.
 */
uint64_t bdrv_dirty_bitmap_take_busy(BdrvDirtyBitmap *bm, uint64_t bit,
                                     uint64_t n);
/*
 * Main thread: from @bit, the run of at most @max bits that are dirty
 * and not busy: marked busy and clean (its copy goes out), a word at a
 * time; its length, 0 if @bit itself is clean or busy.
 */
uint64_t bdrv_dirty_bitmap_take_run(BdrvDirtyBitmap *bm, uint64_t bit,
                                    uint64_t max);
/* Any thread: the bits of [@offset, @offset + @bytes) are not busy. */
void bdrv_dirty_bitmap_release_busy(BdrvDirtyBitmap *bm, uint64_t offset,
                                    uint64_t bytes);
/* Main thread: publish (@am) or withdraw (NULL) write-blocking mode.
 * Withdrawn, the writes in flight still finish: wait for
 * @am->in_flight to drop to 0 before freeing it. */
void bdrv_dirty_bitmap_set_active(BdrvDirtyBitmap *bm, BdrvActiveMirror *am);
/* Main thread: set bits (bytes = count * granularity, the last one
 * capped at the size). */
uint64_t bdrv_dirty_bitmap_count(BdrvDirtyBitmap *bm);
uint64_t bdrv_dirty_bitmap_dirty_bytes(BdrvDirtyBitmap *bm);

/* Any thread: writes marked at submission that have not completed. */
unsigned int bdrv_dirty_writes_in_flight(BlockBackend *bs);

/* The block layer's hooks (block/block-backend.c, block/engine.c). */
void bdrv_dirty_mark_submit(BlockBackend *bs, BdrvDirtyBitmap *head,
                            BlockAIOCB *acb);
/* True: write-blocking took @acb over and calls blk_acb_finish() on it
 * once its copy to the target is done. */
bool bdrv_dirty_mark_complete(BlockAIOCB *acb, int ret);
/* The copy of @w is done (@ret): its range is free again (dirty again if
 * it failed), its slot too.  The caller then finishes @w->guest. */
void bdrv_dirty_active_finish(BdrvActiveWrite *w, int ret);
/* blk_free(): the released bitmaps. */
void bdrv_dirty_bitmaps_free(BlockBackend *bs);

#endif
