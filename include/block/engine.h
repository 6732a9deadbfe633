/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Engines: the layer below the drivers that moves bytes.  An engine is a
 * per-AioContext object (stored in the context under the engine's own
 * AioLocalKey, created on the first request submitted from that context)
 * that takes BlockAIOCBs and completes them later, in the same context,
 * through blk_acb_complete().  All engine functions run in the owner
 * thread of the engine's context.
 *
 * An engine knows no driver.  A request reaches it with acb->target: the
 * file descriptor to transfer on and, for the thread pool (the slow path
 * every other engine forwards to), the synchronous function that does
 * the request in a worker.  The drivers that use engines (file-posix) fill
 * the target; the engines only read it.
 *
 * The same file offers two services every driver and filter uses:
 * blk_complete_later() (complete a request from a bottom half: a request
 * rejected before reaching storage, the null driver's requests) and the
 * blk_acb_*() helpers for bounce buffers and short transfers.
 */
#ifndef BLOCK_ENGINE_H
#define BLOCK_ENGINE_H

#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "block/block.h"

/* What an engine transfers a request on (acb->target). */
struct BlockEngineTarget {
    int fd;
    /*
     * Do @acb synchronously from acb->done onwards, in a pool worker (or
     * any thread that may block): the thread pool engine runs it for
     * every request it gets.  Returns 0 or -errno.
     */
    int (*run)(BlockAIOCB *acb);
    /*
     * A read that transfers nothing before acb->bytes (the end of @fd):
     * true: the rest reads as zeroes (a file that shrank under us);
     * false: -EIO (a device).  A write gets -ENOSPC either way.
     */
    bool eof_reads_zeroes;
};

typedef struct BlockEngine BlockEngine;

typedef struct BlockEngineOps {
    const char *name;           /* an aio mode's engine: the mode's name */
    AioLocalKey *key;           /* where a context keeps its instance */
    /* Create the instance for @ctx (owner thread). */
    BlockEngine *(*create)(AioContext *ctx, GError **errp);
    /* Free it; called by aio_context_free() (no request in flight). */
    void (*cleanup)(void *engine);
    /* Queue @acb; never completes it synchronously. */
    void (*submit)(BlockEngine *engine, BlockAIOCB *acb);
} BlockEngineOps;

/* Common head of every engine instance. */
struct BlockEngine {
    const BlockEngineOps *ops;
    AioContext *ctx;
    BlockEngineStats stats;
};

extern const BlockEngineOps luring_engine_ops;
extern const BlockEngineOps laio_engine_ops;
extern const BlockEngineOps thread_pool_engine_ops;

/* The instance of @ops in @ctx, created on first use; NULL (with @errp set)
 * if it cannot be created.  Owner thread of @ctx. */
BlockEngine *blk_engine_get(AioContext *ctx, const BlockEngineOps *ops,
                            GError **errp);

/* The instance of @ops in @ctx, or the thread pool's if that one cannot
 * be created here (warned once), or NULL.  Owner thread of @ctx. */
BlockEngine *blk_engine_get_or_pool(AioContext *ctx,
                                    const BlockEngineOps *ops);

/* Finish @acb: copy a bounced read back, free the bounce buffer, call the
 * callback.  @acb must not be touched afterwards.  Engine (owner) thread. */
void blk_acb_complete(BlockAIOCB *acb, int ret);
/* blk_acb_complete() past the dirty tracking: for the write-blocking
 * mirror, which holds a write back until its target has it too. */
void blk_acb_finish(BlockAIOCB *acb, int ret);

/* The iovec the engine should transfer (the bounce buffer if any). */
static inline struct iovec *blk_acb_iov(BlockAIOCB *acb, int *niov)
{
    if (acb->bounce) {
        *niov = 1;
        return &acb->bounce_iov;
    }
    *niov = acb->niov;
    return acb->iov;
}

/* What an engine does after a read/write transferred @res bytes (or failed
 * with @res < 0): see blk_acb_transferred(). */
typedef enum BlockXferNext {
    BLK_XFER_COMPLETE,          /* complete with *ret */
    BLK_XFER_RESUBMIT,          /* resubmit blk_acb_remainder() */
    BLK_XFER_FORWARD,           /* remainder spans segments: thread pool */
} BlockXferNext;
BlockXferNext blk_acb_transferred(BlockAIOCB *acb, int res, int *ret);
/* The untransferred part of @acb if it is one contiguous segment. */
bool blk_acb_remainder(BlockAIOCB *acb, void **base, size_t *len);

/*
 * Complete @acb with @ret from a bottom half of @ctx (the current
 * context): for requests rejected before they reach storage, and for
 * drivers that have nothing to wait for (null).  Never calls the
 * callback before returning.  No allocation.  Counted as a request of
 * the "bh" engine.  Owner thread of @ctx.
 */
void blk_complete_later(AioContext *ctx, BlockAIOCB *acb, int ret);

/* Workers of the process-wide pool, and how many one backend may use. */
#define THREAD_POOL_MAX_WORKERS 64
#define THREAD_POOL_MAX_PER_BACKEND 16

/* Set up / tear down @blk's thread pool share (blk_open/blk_close). */
void thread_pool_blk_init(BlockBackend *blk);
void thread_pool_blk_cleanup(BlockBackend *blk);

/* Testing only: called by a worker before it runs @acb (NULL: off). */
extern void (*thread_pool_test_hook)(BlockAIOCB *acb);

/* Hand @acb over to the thread pool engine of the current context (used by
 * io_uring/linux-aio for what they cannot do, and for the remainder of a
 * short transfer).  The worker runs acb->target->run from acb->done.
 * Owner thread. */
void thread_pool_forward(BlockAIOCB *acb);

/*
 * Testing only: when non-zero, each io_uring submission hands at most this
 * many SQEs to the kernel and leaves the rest in the submission queue, as
 * a kernel that ran short of memory for requests would.  Owner thread of
 * the rings (the tests are single-threaded).
 */
extern unsigned int luring_test_submit_max;

/* Engine probes at open time: can this kernel run the engine at all? */
bool luring_probe(GError **errp);
bool laio_probe(GError **errp);

/*
 * Owner thread of @ctx: call @fn with the name and counters of every
 * engine that has an instance in @ctx, in the order the engines were
 * first created in the process.
 */
void blk_engine_foreach_stats(AioContext *ctx,
                              void (*fn)(void *opaque, const char *name,
                                         const BlockEngineStats *stats),
                              void *opaque);

#endif
