/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The driver contract: what block-backend.c and the drivers (file-posix,
 * null, rbd, the filters blkdebug and throttle, formats) share.  Not for
 * devices: they use include/block/block.h only.  The engines drivers use
 * are in include/block/engine.h.
 */
#ifndef BLOCK_BLOCK_INT_H
#define BLOCK_BLOCK_INT_H

#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "block/block.h"

/* BlockAIOCB.type */
typedef enum BlockReqType {
    BLK_REQ_READ,
    BLK_REQ_WRITE,
    BLK_REQ_FLUSH,
    BLK_REQ_DISCARD,
    BLK_REQ_WRITE_ZEROES,
    BLK_REQ_BLOCK_STATUS,
} BlockReqType;

/*
 * The driver contract.
 *
 * Layers.  A BlockBackend is a node of the block graph: a BlockDriver (the
 * table below) and that driver's state (@opaque).  Above the drivers,
 * block-backend.c owns the public API (include/block/block.h), the checks
 * every request gets whatever the driver (read-only, bounds, alignment),
 * the graph (children, parents, permissions) and opening through the
 * registry (block/driver.c: name -> driver, built in or a module).  Below
 * them, the engines (include/block/engine.h: io_uring, linux-aio, the
 * thread pool, the "bh" completion service) move bytes on a file
 * descriptor and know no driver.  Drivers of storage (file-posix, null,
 * rbd) keep their state private; a filter (blkdebug, throttle) is a driver
 * whose @child is another node and that knows nothing of that node's
 * driver; a format (a driver with a "file" and perhaps a "backing" child)
 * maps its requests onto requests of its children.  Nothing above a
 * driver looks at which driver it is: what the monitor shows per driver
 * comes through bdrv_get_info() and the engine statistics.
 *
 * Opening.  blk_open() finds the driver in the registry, calls
 * bdrv_open() in the main thread, which fills @size and @bl (the limits
 * and capabilities the device advertises: block sizes, the request
 * alignment the generic checks enforce, the optimal I/O size, discard and
 * write-zeroes support), and wraps the node in a blkdebug filter when
 * error injection is configured.  Opening may leave the main thread: a
 * driver that sets @bdrv_open_any_thread (rbd) promises that bdrv_open()
 * and, after a failed open, bdrv_close() touch nothing but @bs, @opts and
 * state of its own that it locks, and use bs->main_ctx instead of the
 * current context; blk_open_async() then runs them in a worker thread,
 * because they wait on the network, and finishes in the main thread (the
 * filter on top, the caller's registration of the node).  Likewise
 * @bdrv_truncate_any_thread lets blk_truncate_async() run bdrv_truncate()
 * in a worker; the new size is stored in the main thread after it.
 *
 * Requests.  They go through blk_submit(), which does the shared checks
 * and then makes exactly one indirect call, to the driver's function for
 * the request type, in the submitting thread; the driver keeps whatever
 * it needs per AioContext (an engine instance, created by
 * bdrv_attach_aio_context() or on first use) and completes the request
 * later in that same thread through blk_acb_complete() -- never from
 * inside the submitting call and never from another thread.  Inside a
 * defer_call section a driver may only queue and submit the batch when
 * the section ends (its plug).  Every other function runs in the main
 * thread with no request in flight unless it says otherwise.
 *
 * Children.  A filter forwards a request by setting acb->blk to its child
 * and calling blk_drv_submit() on it (the same BlockAIOCB goes down).  A
 * format issues requests of its own to its children from inside a
 * request, with the public blk_aio_*() functions on child->bs (the same
 * checks apply) and control blocks it embeds in its own request state or
 * takes from the per-context pool (blk_child_req_get()); it completes the
 * parent request when they have completed, in the same thread.  A node's
 * children are attached with bdrv_attach_child(), which checks the
 * permissions below; the node's parents (nodes, and users such as
 * exports, blk_attach_user()) are listed on it.
 *
 * Block status.  BLK_REQ_BLOCK_STATUS asks what a range holds
 * (BDRV_BLOCK_* in block.h, for the first acb->status->pnum bytes).  A
 * driver without bdrv_aio_block_status answers "data, allocated here" for
 * the whole range (what a protocol that cannot tell says); a filter
 * without one forwards to its child.
 *
 * Flush.  A flush completes only when everything written before it was
 * submitted is durable.  A driver that keeps metadata in caches (a
 * format) writes the dirty entries in dependency order (the child
 * structure before the entry that points to it), then flushes its file
 * child, and only then completes the parent's flush; it must not complete
 * a write whose metadata another request could see before that metadata
 * is at least in its cache.
 *
 * Permissions.  An edge (BdrvChild) says what its holder does with the
 * node (@perm: BLK_PERM_*) and what it lets others do at the same time
 * (@shared).  Attaching an edge that wants what an existing one does not
 * share, or that does not share what an existing one uses, is refused
 * with a message naming the holder.  Raw nodes served by exports share
 * everything, as qemu-storage-daemon's exports do; a format's file child
 * does not share writes or resizes.  Other processes learn them from the
 * driver (bdrv_set_perm: file's image locking).
 */
typedef struct BlockDriver BlockDriver;
typedef struct BdrvChild BdrvChild;
typedef struct BlockCreateOptions BlockCreateOptions;

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

/*
 * A driver's options (blk_options_parse(), include/block/block.h): read
 * the driver's own keys from @a into a struct of its own (declared in
 * include/block/NAME.h), allocated with g_new0() and kept with
 * blk_options_parse_keep(), which @opts->driver_opts then points to;
 * @opts's common fields the caller filled (a driver may make the node
 * read-only).  Set @p->image, and add what else it allocates to
 * @p->strings.  No system access: what an open needs of the system is
 * checked by the check function, after the caller's own checks.  False
 * with @errp set.  Main thread.
 */
typedef bool BlockDriverParseFunc(BlockOptions *opts, QmpArgs *a,
                                  BlockOptsParse *p, GError **errp);
typedef bool BlockDriverCheckFunc(const BlockOptions *opts,
                                  BlockOptsParse *p, GError **errp);
/* Fill @out (blk_node_names(), include/block/block.h). */
typedef void BlockDriverNamesFunc(BlockBackend *blk, const BlockOptions *opts,
                                  const char *given, BlockNodeNames *out);

/*
 * What blockdev-create (QEMU's BlockdevCreateOptions) and the overlay of
 * blockdev-snapshot-sync ask a driver to make.  The caller fills @size and
 * the common keys; the driver's @bdrv_create_parse reads the rest of its
 * keys (QEMU's BlockdevCreateOptionsFILE / ...QCOW2) into @driver_opts.
 */
struct BlockCreateOptions {
    const BlockDriver *drv;
    uint64_t size;              /* the new image's (virtual) size */
    /* A protocol driver's: the image to create (file: its path). */
    const char *filename;
    /* file: only a new file (C callers: blockdev-snapshot-sync must not
     * overwrite somebody's disk); QEMU's blockdev-create truncates. */
    bool exclusive;
    /* A format's: the node the image is written onto, through its
     * requests only (the node holds the image's lock); the caller holds
     * it with write permission while the create runs. */
    BlockBackend *file;
    /* A format's: the backing file the header names (NULL: none). */
    const char *backing_file;
    const char *backing_fmt;
    void *driver_opts;          /* the driver's own, g_free()d */
    GPtrArray *strings;         /* copies the parser made, g_free()d */
};

/* Main thread: what blk_create_options_clear() frees is @o's;
 * blk_create_options_keep() makes a copy of @str that lives as long. */
char *blk_create_options_keep(BlockCreateOptions *o, const char *str);
void blk_create_options_clear(BlockCreateOptions *o);

struct BlockDriver {
    const char *format_name;
    /* Other names the driver answers to in the QEMU syntaxes (QEMU's
     * host_device, null-co), NULL-terminated; NULL: none.  A parser that
     * cares tells them apart by @p->driver. */
    const char *const *aliases;
    /* vhost-blkd's --export syntax: the key that names the image and so
     * the driver without driver= ("file"), or NULL. */
    const char *export_key;
    /* Optional: the driver's keys (without: it takes none) and its checks
     * of the system before an open. */
    BlockDriverParseFunc *bdrv_parse_options;
    BlockDriverCheckFunc *bdrv_check_options;
    /* Optional: how QEMU shows a node (without: @given or the driver's
     * name, and that name as the filename). */
    BlockDriverNamesFunc *bdrv_node_names;
    /* A filter: opened over a child by the block layer, never by name. */
    bool is_filter;
    /* A format: opened over a file node (BlockOptions.file) and, if its
     * images can have one, a backing node (BlockOptions.backing); the
     * monitor and the --export syntax (format=NAME) open any such driver
     * the same way. */
    bool is_format;
    /* The format a new overlay gets when the user names none
     * (blockdev-snapshot-sync without format=; QEMU's default).  One
     * format driver sets it. */
    bool default_overlay;
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
    /*
     * Main thread (optional): the node's parents now use it with @perm
     * and share @shared (their union and intersection; a filter above
     * stands for its own parents; 0 and BLK_PERM_ALL without any), after
     * the graph's own checks passed: called whenever an edge to the node
     * or to a filter above it comes or goes.  A driver that tells other
     * processes (file: QEMU's lock bytes) does it here.  False with
     * @errp set refuses the edge being attached (a detach only shrinks
     * the permissions, and must not fail).
     */
    bool (*bdrv_set_perm)(BlockBackend *bs, uint64_t perm, uint64_t shared,
                          GError **errp);
    /*
     * Main thread (optional): reopen the node read-write (@writable) or
     * read-only, its own children too (a format node its file node);
     * the caller flips bs->readonly after it succeeds.  On failure the
     * node must be as before.  Without it blk_reopen() refuses.
     */
    bool (*bdrv_reopen)(BlockBackend *bs, bool writable, GError **errp);
    /*
     * Creating images (optional; a driver without @bdrv_create cannot).
     * @bdrv_create_parse, main thread: read the driver's keys of
     * blockdev-create's options from @a (everything but "driver", "size"
     * and, for a format, "file", which the caller read into @o), refusing
     * with QEMU's kind of message what the driver cannot make.  Without
     * it the driver takes no other key.  No system access.
     * @bdrv_create runs in a worker thread that owns an AioContext of its
     * own (bdrv_create_run()): it makes the image, waiting for its I/O
     * there; a format writes through @o->file only.  False with @errp
     * set; a format leaves the file node's contents undefined then.
     */
    bool (*bdrv_create_parse)(BlockCreateOptions *o, QmpArgs *a,
                              GError **errp);
    bool (*bdrv_create)(const BlockCreateOptions *o, GError **errp);
    /* Any thread (optional): what the node is, for the monitor. */
    void (*bdrv_get_info)(BlockBackend *bs, BlockDriverInfo *bdi);
    /*
     * The backing chain, for the jobs that change it (block-stream,
     * block-commit, blockdev-snapshot).  A format whose images can name a
     * backing file that may change sets all four; their presence is the
     * capability the monitor checks (blk_can_change_backing()), never the
     * driver's name.  Main thread.
     *
     * @bdrv_change_backing: make @backing (NULL: none) the backing node
     * of @bs and name @name, of format @fmt, in its image; the contract
     * of qcow2_change_backing() (include/block/qcow2-options.h).
     * @bdrv_set_backing: give @bs, opened without one, the backing node
     * @backing without changing its image; qcow2_set_backing()'s.
     * @bdrv_owns_backing: whether @bs opened its backing node itself (the
     * chain its image names) rather than being given one.
     * @bdrv_release_backing: @backing is a node the chain @bs opened
     * itself: the image of that chain that opened it keeps reading from
     * it but no longer closes it; *@file gets the file node under it
     * (NULL: none, a raw image).  Both are the caller's now, to close
     * once the images above that read from @backing are closed.  False
     * with @errp set if @backing is not such a node.
     */
    bool (*bdrv_change_backing)(BlockBackend *bs, BlockBackend *backing,
                                const char *name, const char *fmt,
                                GError **errp);
    bool (*bdrv_set_backing)(BlockBackend *bs, BlockBackend *backing,
                             GError **errp);
    bool (*bdrv_owns_backing)(BlockBackend *bs);
    bool (*bdrv_release_backing)(BlockBackend *bs, BlockBackend *backing,
                                 BlockBackend **file, GError **errp);
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
    /* Optional: fill *acb->status for [offset, offset + bytes); see the
     * contract above for what a driver without it answers. */
    BlockDriverSubmitFunc *bdrv_aio_block_status;
};

/* An edge of the graph: @parent (a node, or NULL for a user such as an
 * export) uses @bs.  Main thread. */
struct BdrvChild {
    BlockBackend *bs;
    BlockBackend *parent;       /* NULL: a user */
    char *name;                 /* "file", "backing"; a user's name */
    uint64_t perm;
    uint64_t shared;
    QLIST_ENTRY(BdrvChild) next;        /* in parent->children */
    QLIST_ENTRY(BdrvChild) next_parent; /* in bs->parents */
};

struct BlockBackend {
    const BlockDriver *drv;
    void *opaque;               /* the driver's state */
    BlockBackend *child;        /* a filter's node below, or NULL (also
                                 * in @children, as "file") */
    BlockBackend *parent;       /* the filter above, or NULL */
    char *filename;             /* names the node in messages */
    char *node_name;            /* the monitor's name, or NULL */
    bool readonly;
    bool batch;                 /* false: submit each request at once */
    AioContext *main_ctx;       /* the main thread's, for bottom halves */
    uint64_t size;              /* atomic: blk_truncate() changes it */
    /* Atomic: the dirty bitmaps writes mark (NULL: one load and a branch
     * per write), beside the fields blk_submit() reads anyway. */
    struct BdrvDirtyBitmap *dirty_bitmaps;
    BlockLimits bl;
    /* Main thread: the edges to the nodes below and to the parents and
     * users above. */
    QLIST_HEAD(, BdrvChild) children;
    QLIST_HEAD(, BdrvChild) parents;
    /* Main thread: told when the size changed behind our back (e.g. the
     * cluster resized an image); see blk_set_size_notifier(). */
    void (*size_notifier)(void *opaque, uint64_t size);
    void *size_notifier_opaque;
    /*
     * Thread pool share: at most THREAD_POOL_MAX_PER_BACKEND requests of
     * this node run in workers at a time, the others wait here (from
     * any iothread), so one export cannot occupy the process-wide pool.
     */
    pthread_mutex_t pool_lock;
    unsigned int pool_running;                  /* protected by pool_lock */
    QSIMPLEQ_HEAD(, BlockAIOCB) pool_waiting;   /* protected by pool_lock */
    /* Dirty tracking (include/block/dirty-bitmap.h): tracked writes in
     * flight (atomic), released bitmaps (main thread, freed with the
     * node).  The list itself is next to @size. */
    unsigned int dirty_inflight;
    struct BdrvDirtyBitmap *dead_bitmaps;
    /*
     * Requests submitted to this node while it has a dirty bitmap (a
     * mirror watching it): how busy its users are, for the mirror's
     * pacing (block/mirror.c).  A relaxed load and store, no
     * read-modify-write: two threads submitting at once may lose a count,
     * which a "were there any?" reading tolerates.  Padded off the
     * fields every submitter reads (not aligned(64): the node comes from
     * g_new0(), whose 16-byte alignment such a type would not have).
     */
    char user_requests_pad[64];
    uint64_t user_requests;
};

/* Submit @acb to @bs's driver (acb->blk must be @bs): what blk_submit()
 * does after its checks, and how a filter forwards.  Owner thread. */
void blk_drv_submit(BlockBackend *bs, AioContext *ctx, BlockAIOCB *acb);

/*
 * Main thread: the driver of @bs learnt that the image now has @size
 * bytes (resized from elsewhere).  Updates the size of @bs and of the
 * filters above it, then tells the top node's size notifier.
 */
void blk_size_changed(BlockBackend *bs, uint64_t size);

/*
 * Main thread: make @child a child of @parent under @name, using it with
 * @perm and sharing @shared.  NULL with @errp set (naming the holder) if
 * that conflicts with an edge @child already has.  The edge does not own
 * @child: the parent closes it when it is done (blk_close() closes a
 * node's children after the node).
 */
BdrvChild *bdrv_attach_child(BlockBackend *parent, BlockBackend *child,
                             const char *name, uint64_t perm,
                             uint64_t shared, GError **errp);
void bdrv_detach_child(BdrvChild *c);
/* The child of @bs named @name, or NULL. */
BdrvChild *bdrv_find_child(BlockBackend *bs, const char *name);

/*
 * Main thread: the backing chain through the driver's hooks (see
 * BlockDriver.bdrv_change_backing).  blk_can_change_backing(): whether
 * @bs's driver has them.  The others fail with @errp set (or say false)
 * for a node whose driver has not.  blk_image_format(): the format name
 * an overlay's header records for @bs as its backing file: its driver's
 * for a format node, "raw" for a protocol node (a file, a device).
 */
bool blk_can_change_backing(BlockBackend *bs);
bool blk_change_backing(BlockBackend *bs, BlockBackend *backing,
                        const char *name, const char *fmt, GError **errp);
bool blk_set_backing(BlockBackend *bs, BlockBackend *backing,
                     GError **errp);
bool blk_owns_backing(BlockBackend *bs);
bool blk_release_backing(BlockBackend *bs, BlockBackend *backing,
                         BlockBackend **file, GError **errp);
const char *blk_image_format(BlockBackend *bs);
/*
 * Main thread: @c now uses its node with @perm and shares @shared (a
 * reopen changes what a parent may do).  False with @errp set, and @c
 * as it was, if that conflicts with another edge of the node or the
 * node's driver refuses (another process holds the image).
 */
bool bdrv_child_set_perm(BdrvChild *c, uint64_t perm, uint64_t shared,
                         GError **errp);

/*
 * A control block for a request a driver makes of a child on behalf of
 * one of its own requests, from the pool of the current context: @acb is
 * the child request's, @parent and @priv are the driver's.  The pool
 * grows by a chunk when it is empty, so after the first requests none
 * allocates.  Owner thread of @ctx.
 */
typedef struct BlockChildReq {
    BlockAIOCB acb;
    BlockAIOCB *parent;
    uint64_t priv[4];
    struct BlockChildReq *next_free;
} BlockChildReq;
BlockChildReq *blk_child_req_get(AioContext *ctx);
void blk_child_req_put(AioContext *ctx, BlockChildReq *r);
/* Control blocks the pool of @ctx has allocated so far (tests). */
unsigned int blk_child_req_allocated(AioContext *ctx);

/*
 * The registry (block/driver.c).  A driver is found by its name: built in,
 * registered at run time (bdrv_register()), or in a module (block-NAME.so,
 * loaded on first use, include/block/module.h).  @what names the node in
 * the error message.  Main thread.
 */
/* The driver that sets default_overlay, or NULL. */
const BlockDriver *bdrv_default_overlay_driver(void);
const BlockDriver *bdrv_find_driver(const char *name, const char *what,
                                    GError **errp);
/* The driver @opts->driver names (file if none), the same way. */
const BlockDriver *bdrv_find_driver_for(const BlockOptions *opts,
                                        GError **errp);
/* Add @drv under drv->format_name.  Before main() (constructors) or in
 * the main thread. */
void bdrv_register(const BlockDriver *drv);
/* In a built-in driver's file: register @drv when the program starts. */
#define BLOCK_DRIVER_REGISTER(drv) \
    static void __attribute__((constructor)) drv##_register(void) \
    { \
        bdrv_register(&drv); \
    }
/*
 * Main thread: run @o->drv's bdrv_create in a worker thread of its own
 * (with a fresh AioContext it owns), so that the main loop goes on while
 * it writes; @cb runs in the main thread afterwards with NULL or the
 * error (the callback's).  @o must stay valid until then.
 * bdrv_create_sync(): the same, with the calling thread waiting for the
 * worker (blockdev-snapshot-sync, whose reply waits anyway); it must not
 * be the owner of a context @o->file's requests complete in.
 */
typedef void BlockCreateCompleteFunc(void *opaque, GError *err);
void bdrv_create_run(BlockCreateOptions *o, BlockCreateCompleteFunc *cb,
                     void *opaque);
bool bdrv_create_sync(BlockCreateOptions *o, GError **errp);
/* The names of every driver the registry knows, joined with ", " and
 * " or " for messages. */
char *bdrv_driver_names(void);

/*
 * A driver in a module (block-NAME.so), as the program knows it before
 * the module is loaded: its names, whether it opens in a worker, how its
 * options are read, and how a node of its is named in messages before the
 * driver has opened it (the error of a module that cannot be loaded names
 * the node).  These live in a file of the driver's own that is built into
 * the program (block/rbd-options.c), registered with
 * BLOCK_MODULE_DRIVER_REGISTER; the BlockDriver of the module itself then
 * needs neither parser nor aliases.
 */
typedef struct BlockModuleDriver {
    const char *name;
    const char *const *aliases;
    const char *export_key;
    bool open_any_thread;
    BlockDriverParseFunc *parse;
    BlockDriverCheckFunc *check;
    /* Also the node's filename in blk_node_names(). */
    char *(*describe)(const BlockOptions *opts);
} BlockModuleDriver;
void bdrv_register_module(const BlockModuleDriver *m);
#define BLOCK_MODULE_DRIVER_REGISTER(m) \
    static void __attribute__((constructor)) m##_register(void) \
    { \
        bdrv_register_module(&m); \
    }

#endif
