/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Internals of the block layer shared by block-backend.c, file-posix.c,
 * the error-injection filter (blkdebug.c) and the engines (io_uring.c,
 * linux-aio.c, thread-pool.c, null.c).  Not for devices: they use
 * include/block/block.h only.
 *
 * An engine is a per-AioContext object (stored in the context's engine
 * slot, created on the first request submitted from that context) that
 * takes BlockAIOCBs and completes them later, in the same context, through
 * blk_acb_complete().  All engine functions run in the owner thread of the
 * engine's context.
 */
#ifndef BLOCK_BLOCK_INT_H
#define BLOCK_BLOCK_INT_H

#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "block/block.h"
#include "block/blkdebug.h"

/* BlockAIOCB.type */
typedef enum BlockReqType {
    BLK_REQ_READ,
    BLK_REQ_WRITE,
    BLK_REQ_FLUSH,
    BLK_REQ_DISCARD,
    BLK_REQ_WRITE_ZEROES,
} BlockReqType;

struct BlockBackend {
    char *filename;
    int fd;                     /* -1 for the null driver */
    bool is_null;
    bool null_read_zeroes;
    bool readonly;
    bool direct;                /* opened with O_DIRECT */
    bool is_blockdev;
    bool batch;
    bool can_discard;
    BlockAioMode aio;           /* after fallback */
    uint64_t size;
    uint32_t logical_block_size;
    uint32_t physical_block_size;
    uint32_t req_align;         /* O_DIRECT offset/length alignment, or 1 */
    uint32_t mem_align;         /* O_DIRECT buffer alignment, or 1 */
    /* Error-injection filter (blkdebug.c), NULL when off: the only field
     * read per request for it. */
    BlkDebugState *inject;
    /*
     * Thread pool share: at most THREAD_POOL_MAX_PER_BACKEND requests of
     * this backend run in workers at a time, the others wait here (from
     * any iothread), so one export cannot occupy the process-wide pool.
     */
    GMutex pool_lock;
    unsigned int pool_running;                  /* protected by pool_lock */
    QSIMPLEQ_HEAD(, BlockAIOCB) pool_waiting;   /* protected by pool_lock */
};

typedef struct BlockEngine BlockEngine;

typedef struct BlockEngineOps {
    const char *name;
    int slot;                   /* AIO_ENGINE_* */
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
extern const BlockEngineOps null_engine_ops;

/* The instance of @ops in @ctx, created on first use; NULL (with @errp set)
 * if it cannot be created.  Owner thread of @ctx. */
BlockEngine *blk_engine_get(AioContext *ctx, const BlockEngineOps *ops,
                            GError **errp);

/* Finish @acb: copy a bounced read back, free the bounce buffer, call the
 * callback.  @acb must not be touched afterwards.  Engine (owner) thread. */
void blk_acb_complete(BlockAIOCB *acb, int ret);

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

/* Complete @acb with @ret from a bottom half of the current context (used
 * for requests rejected before reaching an engine).  Owner thread. */
void null_complete_later(AioContext *ctx, BlockAIOCB *acb, int ret);

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
 * short transfer).  The pool starts at acb->done.  Owner thread. */
void thread_pool_forward(BlockAIOCB *acb);

/* Hand @acb to the thread pool engine @e as a request delayed by error
 * injection (BLKDEBUG_DELAY): the worker runs blkdebug_do_delayed(), which
 * sleeps, then does or fails it.  Owner thread. */
void thread_pool_submit_delayed(BlockEngine *e, BlockAIOCB *acb);

/* Synchronous execution of @acb from acb->done onwards, in a worker
 * thread: preadv/pwritev loops, fdatasync, fallocate, ioctl, zero writes.
 * Returns 0 or -errno. */
int raw_do_request(BlockAIOCB *acb);

/* file-posix.c: open/close the file or block device of @blk. */
bool raw_open(BlockBackend *blk, const BlockOptions *opts, GError **errp);
void raw_close(BlockBackend *blk);
bool raw_truncate(BlockBackend *blk, uint64_t size, GError **errp);

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

/* Counters of the null engine of @ctx (not part of the public API since
 * BlockAioMode has no null value).  Owner thread. */
bool null_engine_get_stats(AioContext *ctx, BlockEngineStats *stats);

#endif
