/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The block layer: a BlockBackend is an open image (a raw file or block
 * device, a Ceph RBD image, or the null driver), optionally behind the
 * error-injection filter, plus the asynchronous request API that devices
 * use.  Devices never see which driver serves them; the driver contract
 * is in include/block/block_int.h.
 *
 * Threads: blk_open()/blk_close() run in the main thread.  Requests are
 * submitted from a thread that runs an AioContext (an iothread); the
 * driver queues them on its state for that context (for files: one
 * io_uring ring / one libaio context / one thread-pool client per
 * AioContext; for rbd: one completion list and eventfd), created by
 * blk_attach_aio_context() or on first use, and their callbacks run later
 * in the same context.  A callback is never called
 * from inside the blk_aio_*() call that submitted it.
 *
 * Batching: inside a defer_call section the engine only queues; the batch is
 * submitted with one syscall when the outermost section ends, or earlier when
 * the engine's ring is full.  With BlockOptions.batch = false every request
 * is submitted at once.
 *
 * No allocation per request: the caller provides the BlockAIOCB, which must
 * stay valid until its callback has run.  The iovec array must stay valid
 * until then too.
 */
#ifndef BLOCK_BLOCK_H
#define BLOCK_BLOCK_H

#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "qemu/queue.h"
#include "qemu/throttle.h"

typedef struct BlockBackend BlockBackend;
typedef void BlockCompletionFunc(void *opaque, int ret);

typedef enum BlockAioMode {
    BLOCK_AIO_IO_URING,
    BLOCK_AIO_NATIVE,           /* linux-aio */
    BLOCK_AIO_THREADS,
} BlockAioMode;

/*
 * Error injection, for testing how devices and guests handle I/O errors.
 * A request "matches" when its type is in @ops and, if a sector range is
 * set, it overlaps [sector_start, sector_end] (512-byte sectors; a flush
 * has no range and matches only when no range is set).  The first @after
 * matching requests succeed; the following ones (at most @count of them,
 * 0 = no limit) complete with -@err, from a bottom half like every
 * rejected request, without reaching the engine.  Off (@ops == 0) by
 * default; when off it costs one predictable branch per request.
 *
 * @delay_ms (inject-delay) makes matching requests slow instead: each is
 * handed to a thread-pool worker that sleeps @delay_ms, then does the real
 * I/O (or, when @ops is set too, fails it with -@err).  Without @ops every
 * request type matches.  It works the same under every aio mode and the
 * null driver; a sleeping worker holds one of the pool's threads.
 */
#define BLOCK_INJECT_READ          0x1
#define BLOCK_INJECT_WRITE         0x2   /* writes and write-zeroes */
#define BLOCK_INJECT_FLUSH         0x4
#define BLOCK_INJECT_DISCARD       0x8
#define BLOCK_INJECT_ANY           0xf
#define BLOCK_INJECT_MAX_DELAY_MS  600000

typedef struct BlockInjectOptions {
    unsigned int ops;           /* BLOCK_INJECT_* mask; 0 = off */
    bool has_range;
    uint64_t sector_start;      /* inclusive */
    uint64_t sector_end;        /* inclusive */
    uint64_t after;             /* matching requests let through first */
    uint64_t count;             /* matching requests failed; 0 = all */
    int err;                    /* positive errno (EIO if 0) */
    uint32_t delay_ms;          /* hold matching requests back; 0 = off */
} BlockInjectOptions;

/*
 * Parse one option of the form inject-KEY=VALUE into @inj (@key includes
 * the "inject-" prefix): inject-error=read|write|flush|discard|any (several
 * joined with '+'), inject-sector=START[-END], inject-after=N,
 * inject-count=N, inject-errno=EIO|ENOSPC|EROFS|ENOMEM|EAGAIN or a number,
 * inject-delay=MS (0..600000).
 * Returns false with @errp set on an unknown key or a bad value.  Any
 * thread.
 */
bool blk_inject_parse_option(BlockInjectOptions *inj, const char *key,
                             const char *val, GError **errp);

/*
 * What a node does with a guest's discard (a node's option, decided by
 * the device that serves it, not by the driver):
 *   OFF     not offered to the guest (vhost-blkd's --export discard=off);
 *   IGNORE  offered, and a discard completes at once without reaching
 *           the storage (QEMU's discard=ignore: the default of
 *           --blockdev / blockdev-add);
 *   UNMAP   offered and done, where the storage can (discard=unmap; the
 *           default of --export).
 */
typedef enum BlockDiscardMode {
    BLOCK_DISCARD_OFF,
    BLOCK_DISCARD_IGNORE,
    BLOCK_DISCARD_UNMAP,
} BlockDiscardMode;

typedef struct BlockOptions {
    /* Common to every node. */
    const char *driver;         /* the registry's name; "file" (default) */
    bool readonly;
    bool cache_direct;          /* cache=none: O_DIRECT (default true);
                                 * only drivers with a host page cache in
                                 * the way read it */
    bool batch;                 /* default true; false = submit each at once */
    BlockInjectOptions inject;  /* error injection (testing); off by default */
    BlockBackend *file;         /* a format: its file child, an open node
                                 * that stays its caller's */
    /*
     * A format with a backing file (QEMU's keys of every such format):
     * @no_backing (backing=null) serves the image without it; @backing
     * (backing=NODE), a node the caller opened, stays its caller's;
     * otherwise the driver opens the backing file its image names,
     * read-only, with the driver @backing_driver (backing.driver=) when
     * the image does not say its format.
     */
    bool no_backing;
    BlockBackend *backing;
    const char *backing_driver;
    ThrottleGroup *throttle_group;  /* non-NULL: a throttle filter on top
                                     * (block/throttle.c), which takes a
                                     * reference */
    /*
     * The driver's own options: a struct the driver declares in its own
     * header (include/block/NAME.h, e.g. BlockQcow2Options), read by that
     * driver alone.  Its parser (blk_options_parse()) allocates it with
     * g_new0() and hands it to blk_options_parse_keep() so that the
     * cleanup frees it; C callers (tests, benchmarks) point it at a
     * struct of their own (the header's helper, e.g. blk_file_options(),
     * does it).  It must stay valid as long as the BlockOptions is used
     * (the open, blk_node_names()): a driver copies what it keeps into
     * its node.  NULL: the driver's defaults; a driver with required
     * options (file, null, rbd) refuses to open, saying what is missing.
     */
    const void *driver_opts;
} BlockOptions;

/* Fill @opts with the defaults. */
void blk_options_init(BlockOptions *opts);

/*
 * A node's options from the command line, a config file or QMP.  Every
 * syntax reaches the block layer as one JsonObject in QMP's shape: QMP
 * and JSON (--blockdev '{...}') typed, keyval (--blockdev a=b,c.d=e)
 * with strings, which the QmpArgs helpers (include/qemu/qmp-args.h) take
 * where numbers and booleans are expected.  The caller reads the keys
 * every node has (QEMU's BlockdevOptionsBase: node-name, read-only,
 * discard, cache, ...) into the common fields of a BlockOptions it
 * initialised; blk_options_parse() finds the driver "driver" names in the
 * registry (by its name or one of its aliases, e.g. QEMU's host_device
 * and null-co) and lets it read its own keys, marking them used; once
 * the caller has refused what is left (qmp_args_check_done()) and made
 * its own checks, blk_options_check() lets the driver check what it
 * needs of the system (a file: that the image exists) with QEMU's
 * messages.  Main thread.
 */
typedef struct QmpArgs QmpArgs;
typedef struct BlockOptsParse {
    /* In: "driver" as given (an alias or the driver's name). */
    const char *driver;
    /* In: vhost-blkd's own --export KEY=VALUE syntax rather than QEMU's:
     * the driver's keys there (file=, size=, rbd=, ...), strings, with
     * its messages ("bad value 'X' for KEY: ..."). */
    bool export_syntax;
    /* In: key-secret=ID: a copy of the secret's value (base64, *@size
     * bytes of memory that @secret_free releases), or NULL with @errp
     * set.  NULL: secrets cannot be named here. */
    char *(*secret)(void *opaque, const char *id, size_t *size,
                    GError **errp);
    void (*secret_free)(char *key, size_t size);
    void *opaque;
    /* Out: the copy @secret gave, released by the cleanup. */
    char *key;
    size_t key_size;
    /* Out: what the parser allocated for the BlockOptions (they point
     * into it, into @key and into the arguments): keep them until the
     * node is open, then blk_options_parse_cleanup(). */
    GPtrArray *strings;
    /* Out: the image as the user named it (a path, an image name), or
     * NULL: the --export syntax's default serial is its base name. */
    const char *image;
} BlockOptsParse;

/* False with @errp set: an unknown driver (QEMU's message, or what to do
 * instead of a QEMU-only format) or a filter; blk_options_parse() checks
 * it too, and the driver's keys. */
bool blk_driver_check_name(const char *name, GError **errp);
bool blk_options_parse(BlockOptions *opts, QmpArgs *a, BlockOptsParse *p,
                       GError **errp);
bool blk_options_check(const BlockOptions *opts, BlockOptsParse *p,
                       GError **errp);
void blk_options_parse_cleanup(BlockOptsParse *p);
/* A parser's: keep @mem (g_malloc'd) until blk_options_parse_cleanup(),
 * which g_free()s it; returns @mem. */
void *blk_options_parse_keep(BlockOptsParse *p, void *mem);
/*
 * How QEMU shows a node (query-named-block-nodes): its driver as QEMU
 * names it (@given, the name the node was added with, when there is
 * one; else the driver chooses, e.g. host_device for a block device),
 * its filename (the image, or a json:{...} or pseudo-protocol form) and
 * whether cache.direct applies to it, and whether it stores anything.
 * @blk is the open node of @opts.  blk_node_names_free() frees the
 * strings.  Main thread.
 */
typedef struct BlockNodeNames {
    char *driver;
    char *filename;
    bool cache_direct;
    bool no_storage;            /* nothing is stored (null): QEMU shows no
                                 * dirty flag, allocated size or
                                 * driver-specific statistics for it */
} BlockNodeNames;
void blk_node_names(BlockBackend *blk, const BlockOptions *opts,
                    const char *given, BlockNodeNames *out);
void blk_node_names_free(BlockNodeNames *n);
/*
 * The --export syntax: the driver whose key @key names its image without
 * driver= (file=PATH: file), or NULL; and the names of the drivers it
 * takes ("file, null or ..."), for messages (g_free()).
 */
const char *blk_driver_for_export_key(const char *key);
char *blk_driver_export_names(void);
/* A driver (not a filter) of that very name, aliases aside. */
bool blk_driver_exists(const char *name);
/* @name is a format of the registry: a node over a file node
 * (BlockOptions.file), perhaps with a backing node (qcow2). */
bool blk_driver_is_format(const char *name);
/* Whether the driver called @name (or an alias) opens in a worker thread
 * (it waits on the network: blk_open_async() answers later).  False for
 * a name the registry does not know.  Main thread. */
bool blk_driver_opens_in_worker(const char *name);

/*
 * What a range of a node holds (blk_aio_block_status()): for the first
 * @pnum bytes from the asked offset, a combination of
 *   BDRV_BLOCK_DATA       reads may return non-zero data from storage;
 *   BDRV_BLOCK_ZERO       reads return zeroes;
 *   BDRV_BLOCK_ALLOCATED  this node decides what the range reads (not a
 *                         backing file below it).
 * A range that is neither DATA nor ZERO is unallocated here and reads
 * from the backing chain (or as zeroes when there is none).
 */
#define BDRV_BLOCK_DATA       0x1
#define BDRV_BLOCK_ZERO       0x2
#define BDRV_BLOCK_ALLOCATED  0x4

typedef struct BlockStatus {
    uint64_t pnum;              /* bytes the answer covers, >= 1 */
    unsigned int flags;         /* BDRV_BLOCK_* */
} BlockStatus;

/* What a node is (blk_get_info()). */
typedef struct BlockDriverInfo {
    uint32_t cluster_size;      /* allocation unit of a format, 0: none */
    bool is_block_device;       /* a host block device (QSD: host_device) */
    bool has_aio_mode;          /* a file whose engine is @aio_mode */
    BlockAioMode aio_mode;      /* after fallback */
    /*
     * A format (QEMU's ImageInfo).  Strings are the driver's, valid while
     * the node is open; NULL: none.  @backing_file as the image names
     * it, @full_backing_file resolved, @backing the node below (NULL:
     * not opened, e.g. backing=null); @format_specific is QEMU's
     * "format-specific" member as JSON text.
     */
    const char *backing_file;
    const char *full_backing_file;
    const char *backing_format;
    BlockBackend *backing;
    const char *format_specific;
    bool dirty;
} BlockDriverInfo;

/* Request flags */
#define BDRV_REQ_MAY_UNMAP 0x1  /* write-zeroes may deallocate */
#define BDRV_REQ_FUA       0x2  /* write: data durable on completion */
/* write (qcow2 only): write only the clusters still unallocated in the
 * node, checked where its allocations are serialised (block-stream). */
#define BDRV_REQ_IF_UNALLOCATED 0x4
/* write-zeroes: fail with -ENOTSUP rather than write buffers of zeroes
 * (NBD's FAST_ZERO: the client would rather write them itself).
 * Drivers that cannot tell ignore it. */
#define BDRV_REQ_NO_FALLBACK 0x8

/*
 * Per-request control block, owned by the caller.  The fields are private
 * to the block layer; the storage lets engines queue the request without
 * allocating.
 */
typedef struct BlockEngineTarget BlockEngineTarget;

typedef struct BlockAIOCB {
    BlockCompletionFunc *cb;
    void *opaque;
    BlockBackend *blk;
    int type;
    int flags;
    int64_t offset;
    uint64_t bytes;
    struct iovec *iov;
    int niov;
    size_t done;                /* bytes already transferred (short I/O) */
    void *bounce;               /* aligned bounce buffer, if any */
    struct iovec bounce_iov;
    QSIMPLEQ_ENTRY(BlockAIOCB) next;    /* engine queues */
    BlockCompletionFunc *filter_cb;     /* saved by a filter that */
    void *filter_opaque;                /* interposes its callback */
    void *filter_priv;                  /* and its own state */
    int ret;
    const BlockEngineTarget *target;    /* fd and function, for engines */
    BlockStatus *status;        /* BLK_REQ_BLOCK_STATUS: the answer */
    uint64_t engine_priv[10];   /* engine-private (e.g. struct iocb) */
} BlockAIOCB;

BlockBackend *blk_open(const BlockOptions *opts, GError **errp);
/*
 * Main thread: blk_open() without blocking the main loop.  A driver whose
 * open waits on the network (rbd: the monitors, then the OSDs) opens in a
 * worker thread; @cb then runs later in the main thread with the node, or
 * NULL and an error (taken by @cb).  For the other drivers (file, null)
 * this is blk_open() and @cb runs before blk_open_async() returns.  @opts
 * (and every string it points to) must stay valid until @cb runs.
 */
typedef void BlockOpenCompleteFunc(void *opaque, BlockBackend *blk,
                                   GError *err);
void blk_open_async(const BlockOptions *opts, BlockOpenCompleteFunc *cb,
                    void *opaque);
/*
 * Main thread: blk_truncate() without blocking the main loop.  For a
 * driver whose resize waits on the network (rbd) the resize runs in a
 * worker thread and @cb runs later in the main thread, with NULL or an
 * error (taken by @cb); otherwise this is blk_truncate() and @cb runs
 * before it returns.  @blk must not be closed before @cb has run.
 */
typedef void BlockTruncateCompleteFunc(void *opaque, GError *err);
void blk_truncate_async(BlockBackend *blk, uint64_t size,
                        BlockTruncateCompleteFunc *cb, void *opaque);
/*
 * Any thread: how many workers of blk_open_async() and blk_truncate_async()
 * are still running (waiting for a cluster).  A process that ends while
 * one is inside librados must leave with _exit(): exit() would run the
 * library's destructors under that thread.
 */
unsigned int blk_async_workers(void);
void blk_close(BlockBackend *blk);
/*
 * Main thread: blk_close() without blocking the main loop (blockdev-del).
 * The filters above close here; a bottom node whose driver's close waits
 * on the network (rbd: its control thread's last job, the lock release
 * and rbd_close(), the connection) closes in a worker thread, and @cb
 * runs later in the main thread.  Otherwise this is blk_close() and @cb
 * runs before it returns.  Nothing may use @blk after the call.
 */
typedef void BlockCloseCompleteFunc(void *opaque);
void blk_close_async(BlockBackend *blk, BlockCloseCompleteFunc *cb,
                     void *opaque);

uint64_t blk_getlength(BlockBackend *blk);
/*
 * Main thread: grow to @size bytes (a file is extended, a block device
 * must be large enough already; the same size picks up a file grown
 * behind our back).  Shrinking is refused: blocks a running guest uses
 * would vanish under it.
 */
bool blk_truncate(BlockBackend *blk, uint64_t size, GError **errp);
bool blk_is_read_only(BlockBackend *blk);
/*
 * Main thread: reopen @blk (through its filters, the format node and the
 * format's file node) read-write (@writable) or read-only, as QEMU's
 * reopen does for block-commit's base.  Read-write takes the write lock
 * bytes of the image, so another process using it makes this fail with
 * @errp naming the image; read-only writes what the format holds in
 * memory first and flushes.  No request may write @blk meanwhile (nobody
 * writes a read-only node; before read-only, the writers are gone).
 * On failure @blk is as it was.
 */
bool blk_reopen(BlockBackend *blk, bool writable, GError **errp);
bool blk_is_block_device(BlockBackend *blk);
/* Logical block size of the device (512 for files); O_DIRECT alignment. */
uint32_t blk_get_logical_block_size(BlockBackend *blk);
uint32_t blk_get_physical_block_size(BlockBackend *blk);
/* What offsets and lengths of reads and writes must be multiples of
 * (1: anything goes); others fail with -EINVAL. */
uint32_t blk_get_request_alignment(BlockBackend *blk);
/* Optimal I/O size in bytes (e.g. an RBD image's object size), 0 if
 * the driver does not know one. */
uint32_t blk_get_optimal_io_size(BlockBackend *blk);
/* The driver's name (its registry name, e.g. "file"), below any
 * filter. */
const char *blk_get_driver_name(BlockBackend *blk);
bool blk_can_discard(BlockBackend *blk);
bool blk_can_write_zeroes(BlockBackend *blk);
BlockAioMode blk_get_aio_mode(BlockBackend *blk);   /* after fallback */
const char *blk_aio_mode_name(BlockAioMode mode);
bool blk_aio_mode_parse(const char *s, BlockAioMode *mode);

/* Requests: offset and length in bytes.  ret = 0 or -errno. */
void blk_aio_preadv(BlockBackend *blk, BlockAIOCB *acb, int64_t offset,
                    struct iovec *iov, int niov,
                    BlockCompletionFunc *cb, void *opaque);
void blk_aio_pwritev(BlockBackend *blk, BlockAIOCB *acb, int64_t offset,
                     struct iovec *iov, int niov, int flags,
                     BlockCompletionFunc *cb, void *opaque);
/*
 * The same, for a caller that has the payload's length at hand (the
 * virtio-blk device sums the iovecs as it parses the chain): @bytes must
 * be iov_size(@iov, @niov), which the block layer then does not sum
 * again.  The range checks on @offset and @bytes are the same.
 */
void blk_aio_preadv_sized(BlockBackend *blk, BlockAIOCB *acb,
                          int64_t offset, uint64_t bytes,
                          struct iovec *iov, int niov,
                          BlockCompletionFunc *cb, void *opaque);
void blk_aio_pwritev_sized(BlockBackend *blk, BlockAIOCB *acb,
                           int64_t offset, uint64_t bytes,
                           struct iovec *iov, int niov, int flags,
                           BlockCompletionFunc *cb, void *opaque);
void blk_aio_flush(BlockBackend *blk, BlockAIOCB *acb,
                   BlockCompletionFunc *cb, void *opaque);
void blk_aio_pdiscard(BlockBackend *blk, BlockAIOCB *acb, int64_t offset,
                      uint64_t bytes, BlockCompletionFunc *cb, void *opaque);
void blk_aio_pwrite_zeroes(BlockBackend *blk, BlockAIOCB *acb,
                           int64_t offset, uint64_t bytes, int flags,
                           BlockCompletionFunc *cb, void *opaque);
/* What [@offset, @offset + @bytes) holds: fills *@status (which must stay
 * valid until @cb runs) for a prefix of the range. */
void blk_aio_block_status(BlockBackend *blk, BlockAIOCB *acb,
                          int64_t offset, uint64_t bytes,
                          BlockStatus *status,
                          BlockCompletionFunc *cb, void *opaque);

/* What @blk is (the first node below the filters that says).  Any
 * thread. */
void blk_get_info(BlockBackend *blk, BlockDriverInfo *bdi);

/* Permissions on a node (BdrvChild.perm and .shared). */
enum {
    BLK_PERM_CONSISTENT_READ = 0x1,     /* reads see a consistent image */
    BLK_PERM_WRITE           = 0x2,     /* changes what the node reads */
    BLK_PERM_WRITE_UNCHANGED = 0x4,     /* writes that change nothing */
    BLK_PERM_RESIZE          = 0x8,
    BLK_PERM_ALL             = 0xf,
};

/*
 * Main thread: a user (an export, a job) called @user starts using @blk
 * with the BLK_PERM_* in @perm, letting others do @shared.  NULL with
 * @errp set, naming the holder, if that conflicts with how the node is
 * used already.  blk_detach_user() ends it.
 */
typedef struct BdrvChild BdrvChild;
BdrvChild *blk_attach_user(BlockBackend *blk, const char *user,
                           uint64_t perm, uint64_t shared, GError **errp);
void blk_detach_user(BdrvChild *c);
/* Main thread: the name the monitor knows @blk by, for messages. */
void blk_set_node_name(BlockBackend *blk, const char *name);

/*
 * Owner thread of @ctx: prepare the node for requests from @ctx (a
 * device's queue starts there) or stop using it.  Attaching is optional
 * (the first request does it), but it moves the setup cost and its
 * errors out of the request path.  False with @errp set.
 */
bool blk_attach_aio_context(BlockBackend *blk, AioContext *ctx,
                            GError **errp);
void blk_detach_aio_context(BlockBackend *blk, AioContext *ctx);

/*
 * Any thread: the device on @blk was started (@active) or stopped (every
 * queue) by its front-end.  rbd gives up the image's exclusive lock on
 * stop, so that a VM migrating away leaves it to the destination at once.
 * @takeover (with @active): this process replaces an earlier one of the
 * same device that did not stop (it crashed): rbd breaks the lock that
 * process still holds, blocklisting it.  Never blocks.
 */
void blk_set_active(BlockBackend *blk, bool active, bool takeover);

/*
 * Main thread: call @fn(@opaque, size) in the main thread whenever the
 * image's size changes without blk_truncate() (an RBD image resized by
 * the cluster).  @fn NULL removes it.  One notifier per backend.
 */
void blk_set_size_notifier(BlockBackend *blk,
                           void (*fn)(void *opaque, uint64_t size),
                           void *opaque);

/* Requests failed or delayed by error injection so far (0 when it is
 * off).  Any thread. */
uint64_t blk_inject_get_hits(BlockBackend *blk);

/*
 * Main thread: a throttle filter (block/throttle.c) over @child, an open
 * node that stays its caller's (blk_throttle_release() leaves it open),
 * limited by @tg.  NULL with @errp set (e.g. @child has a filter above
 * it already).
 */
BlockBackend *blk_throttle_new(BlockBackend *child, ThrottleGroup *tg,
                               GError **errp);
/* Main thread, no request in flight: close the filter @blk made by
 * blk_throttle_new(), leaving its child open. */
void blk_throttle_release(BlockBackend *blk);

/* Throttling counters of the throttle filters in @blk's chain (zero when
 * there is none).  Any thread. */
typedef struct BlockThrottleStats {
    uint64_t throttled;         /* requests that had to wait */
    uint64_t throttled_ns;      /* the time they waited, summed */
    uint64_t waiting;           /* waiting now */
} BlockThrottleStats;
void blk_throttle_get_stats(BlockBackend *blk, BlockThrottleStats *st);
/* The group of the topmost throttle filter in @blk's chain, or NULL. */
ThrottleGroup *blk_throttle_group(BlockBackend *blk);

/* Counters of one engine instance (the one of @ctx), for tests and
 * benchmarks. */
typedef struct BlockEngineStats {
    uint64_t requests;          /* requests queued to the engine */
    uint64_t submit_syscalls;   /* io_uring_submit / io_submit calls */
    uint64_t completions;
    uint64_t completions_direct; /* handled in the fd/poll handler */
    uint64_t completions_bh;     /* handled in the completion BH */
    uint64_t bh_scheduled;
    uint64_t retries;            /* EAGAIN/short transfer resubmissions */
    uint64_t bounced;            /* requests bounced for O_DIRECT alignment */
    uint64_t fua_writes;         /* writes queued with RWF_DSYNC (FUA) */
} BlockEngineStats;
/* Returns false if @ctx has no instance of the engine of @mode.  Owner
 * thread. */
bool blk_engine_get_stats(AioContext *ctx, BlockAioMode mode,
                          BlockEngineStats *stats);
/* The same for the engine called @name ("io_uring", "native", "threads",
 * "bh", or a driver's own engine).  Owner thread. */
bool blk_engine_get_stats_by_name(AioContext *ctx, const char *name,
                                  BlockEngineStats *stats);

#endif
