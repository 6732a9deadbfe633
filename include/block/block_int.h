/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Internals of the block layer shared by block-backend.c, the drivers
 * (file-posix.c, null.c, rbd.c), the error-injection filter (blkdebug.c)
 * and file-posix's engines (io_uring.c, linux-aio.c, thread-pool.c).  Not
 * for devices: they use include/block/block.h only.
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

/*
 * The driver contract.  A BlockBackend is a node: a BlockDriver (the table
 * below) and that driver's state (@opaque).  file-posix (files and block
 * devices, read through its io_uring / linux-aio / thread-pool engines),
 * null and rbd (Ceph, librbd) are drivers of storage; blkdebug is a filter,
 * a driver whose @child is another node.  blk_open() picks the driver by
 * name, calls bdrv_open() in the main thread, which fills @size and @bl
 * (the limits and capabilities the device advertises: block sizes, the
 * request alignment the generic checks enforce, the optimal I/O size,
 * discard and write-zeroes support), and wraps the node in a blkdebug
 * filter when error injection is configured.  Requests go through
 * blk_submit(), which does the checks every driver shares (read-only,
 * bounds, alignment) and then makes exactly one indirect call, to the
 * driver's function for the request type, in the submitting thread; the
 * driver keeps whatever it needs per AioContext (an engine instance in the
 * context's slot, created by bdrv_attach_aio_context() or on first use)
 * and completes the request later in that same thread through
 * blk_acb_complete() -- never from inside the submitting call and never
 * from another thread.  Inside a defer_call section a driver may only
 * queue and submit the batch when the section ends (its plug).  Every
 * other function runs in the main thread with no request in flight unless
 * it says otherwise.  A filter forwards a request by setting acb->blk to
 * its child and calling blk_drv_submit() on it; nothing above a driver
 * (the filter, the device, the export) looks at which driver it is.
 * Opening may leave the main thread: a driver that sets
 * @bdrv_open_any_thread (rbd) promises that bdrv_open() and, after a
 * failed open, bdrv_close() touch nothing but @bs, @opts and state of its
 * own that it locks, and use bs->main_ctx instead of the current context;
 * blk_open_async() then runs them in a worker thread, because they wait
 * on the network, and finishes in the main thread (the filter on top, the
 * caller's registration of the node).  file and null open synchronously
 * in the main thread, where blk_open() always opens.  Likewise
 * @bdrv_truncate_any_thread lets blk_truncate_async() run bdrv_truncate()
 * in a worker; the new size is stored in the main thread after it.
 */
typedef struct BlockDriver BlockDriver;

/* Limits and capabilities of a node, filled by bdrv_open(). */
typedef struct BlockLimits {
    uint32_t logical_block_size;
    uint32_t physical_block_size;
    uint32_t request_alignment; /* offset/length multiple, or 1 */
    uint32_t opt_io_size;       /* optimal I/O size in bytes, 0 unknown */
    bool can_discard;
    bool can_write_zeroes;
} BlockLimits;

/* A driver's function for one request type.  Owner thread of @ctx (the
 * submitting thread); @acb has type, offset, bytes and iovec filled in. */
typedef void BlockDriverSubmitFunc(BlockBackend *bs, AioContext *ctx,
                                   BlockAIOCB *acb);

struct BlockDriver {
    const char *format_name;
    /* bdrv_open() (and bdrv_close() after it failed) may run in a worker
     * thread: see the contract above. */
    bool bdrv_open_any_thread;
    /* bdrv_truncate() may run in a worker thread, with requests in flight
     * (blk_truncate_async()); it must not touch bs->size.  A filter that
     * sets it only forwards: blk_truncate_async() asks every node below
     * too. */
    bool bdrv_truncate_any_thread;
    /* bdrv_close() may run in a worker thread (blk_close_async()): it
     * touches nothing but @bs and state of its own, and uses bs->main_ctx
     * instead of the current context.  A bottom node only (no child). */
    bool bdrv_close_any_thread;
    /* Open @bs from @opts: fill bs->size, bs->bl, bs->filename and
     * bs->opaque.  False with @errp set; the caller then calls
     * bdrv_close() on the partly opened node and frees @bs. */
    bool (*bdrv_open)(BlockBackend *bs, const BlockOptions *opts,
                      GError **errp);
    /* Release everything bdrv_open() took, also after it failed
     * (required). */
    void (*bdrv_close)(BlockBackend *bs);
    /* Grow to @size bytes (optional: without it only the size changes);
     * the caller updates bs->size. */
    bool (*bdrv_truncate)(BlockBackend *bs, uint64_t size, GError **errp);
    /* Owner thread of @ctx (optional): set up what requests from @ctx
     * need, before the first one (a device calls it when its queue
     * starts there), and drop the node's use of it. */
    bool (*bdrv_attach_aio_context)(BlockBackend *bs, AioContext *ctx,
                                    GError **errp);
    void (*bdrv_detach_aio_context)(BlockBackend *bs, AioContext *ctx);
    /* Any thread (optional): the front-end started (@active) or stopped
     * every queue of the device using @bs (e.g. to give up a cluster
     * lock when a VM migrates away); @takeover: see blk_set_active().
     * Must not block. */
    void (*bdrv_set_active)(BlockBackend *bs, bool active, bool takeover);
    BlockDriverSubmitFunc *bdrv_aio_preadv;
    BlockDriverSubmitFunc *bdrv_aio_pwritev;    /* BDRV_REQ_FUA honoured */
    BlockDriverSubmitFunc *bdrv_aio_flush;
    BlockDriverSubmitFunc *bdrv_aio_pdiscard;
    BlockDriverSubmitFunc *bdrv_aio_pwrite_zeroes; /* BDRV_REQ_MAY_UNMAP */
};

extern const BlockDriver bdrv_file;
extern const BlockDriver bdrv_null;
extern const BlockDriver bdrv_blkdebug;
extern const BlockDriver bdrv_throttle;    /* block/throttle.c */
#if CONFIG_RBD
extern const BlockDriver bdrv_rbd;      /* block/rbd.c, with librbd */
#endif

struct BlockBackend {
    const BlockDriver *drv;
    void *opaque;               /* the driver's state */
    BlockBackend *child;        /* a filter's node below, or NULL */
    BlockBackend *parent;       /* the filter above, or NULL */
    char *filename;             /* names the node in messages */
    bool readonly;
    bool batch;                 /* false: submit each request at once */
    AioContext *main_ctx;       /* the main thread's, for bottom halves */
    uint64_t size;              /* atomic: blk_truncate() changes it */
    BlockLimits bl;
    /* Main thread: told when the size changed behind our back (e.g. the
     * cluster resized an image); see blk_set_size_notifier(). */
    void (*size_notifier)(void *opaque, uint64_t size);
    void *size_notifier_opaque;
    /*
     * Thread pool share: at most THREAD_POOL_MAX_PER_BACKEND requests of
     * this node run in workers at a time, the others wait here (from
     * any iothread), so one export cannot occupy the process-wide pool.
     */
    GMutex pool_lock;
    unsigned int pool_running;                  /* protected by pool_lock */
    QSIMPLEQ_HEAD(, BlockAIOCB) pool_waiting;   /* protected by pool_lock */
};

/* file-posix's state (bs->opaque), read by its engines per request. */
typedef struct BDRVRawState {
    int fd;
    bool direct;                /* opened with O_DIRECT */
    bool is_blockdev;
    BlockAioMode aio;           /* after fallback */
    uint32_t mem_align;         /* O_DIRECT buffer alignment, or 1 */
} BDRVRawState;

static inline BDRVRawState *raw_state(BlockBackend *bs)
{
    return (BDRVRawState *)bs->opaque;
}

/* Submit @acb to @bs's driver (acb->blk must be @bs): what blk_submit()
 * does after its checks, and how a filter forwards.  Owner thread. */
void blk_drv_submit(BlockBackend *bs, AioContext *ctx, BlockAIOCB *acb);

/*
 * Main thread: the driver of @bs learnt that the image now has @size
 * bytes (resized from elsewhere).  Updates the size of @bs and of the
 * filters above it, then tells the top node's size notifier.
 */
void blk_size_changed(BlockBackend *bs, uint64_t size);

/* file-posix: the fd of @bs. */
static inline int raw_fd(BlockBackend *bs)
{
    return raw_state(bs)->fd;
}

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
extern const BlockEngineOps rbd_engine_ops;

/* The instance of @ops in @ctx, created on first use; NULL (with @errp set)
 * if it cannot be created.  Owner thread of @ctx. */
BlockEngine *blk_engine_get(AioContext *ctx, const BlockEngineOps *ops,
                            GError **errp);

/* file-posix: the engine of @mode (the thread pool's when that engine is
 * not compiled in). */
const BlockEngineOps *blk_mode_ops(BlockAioMode mode);

/* The instance of @ops in @ctx, or the thread pool's if that one cannot
 * be created here (warned once), or NULL.  Owner thread of @ctx. */
BlockEngine *blk_engine_get_or_pool(AioContext *ctx,
                                    const BlockEngineOps *ops);

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
