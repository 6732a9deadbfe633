/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * rbd: the driver of Ceph RBD images, on librbd.
 *
 * Theory of operation.  Opening connects to the cluster (rados_create,
 * rados_conf_read_file, rados_connect, bounded by client_mount_timeout and
 * rados_mon_op_timeout, both set from connect-timeout), opens the pool's
 * I/O context (and namespace) and the image, read-only for a snapshot or
 * read-only=on.  The open and a resize wait on the network, so the driver
 * lets them run in a worker thread (bdrv_open_any_thread,
 * bdrv_truncate_any_thread; QMP blockdev-add and block_resize do that):
 * they touch only the node's own state and the shared-connection list,
 * which rbd_clusters_lock protects.  Every node has its own cluster
 * connection unless nodes name the same shared connection
 * (x-shared-connection=NAME): a shared one makes all their requests go
 * through one librados messenger, which is known to halve IOPS.
 *
 * Requests: reads and writes go to rbd_aio_readv()/rbd_aio_writev()
 * straight on the caller's iovecs (guest memory, no bounce), flush to
 * rbd_aio_flush(), discard to rbd_aio_discard(), write-zeroes to
 * rbd_aio_write_zeroes() (thick, i.e. without deallocating, unless the
 * request may unmap).  The cache of librbd is off (rbd_cache=false, and
 * an open for writing refuses a pool or image configuration that turns
 * it back on), so a write is on the OSDs when it completes and FUA costs
 * nothing more.  A read cut short by the end of the image (shrunk on the
 * cluster) gets the rest zeroed.
 *
 * Completions, two ways (completion=callback|poll; see BlockRbdCompletion
 * and RBD_DEFAULT_COMPLETION for which is the default and why).
 *
 * callback: librbd calls rbd_finish_cb() on one of its own threads.
 * It only records the result, releases the completion (exactly once; a
 * submission that librbd refused releases it itself) and pushes the
 * request onto the lock-free completion stack of the AioContext that
 * submitted it (RbdEngine: one per context, multi-producer, one consumer;
 * the link lives in the request, nothing is allocated), and writes the
 * context's eventfd only when the stack was empty: one wake-up per batch.
 * The owner thread's fd handler (or its busy-poll check, a load of the
 * stack head) takes the whole stack with one atomic exchange, reverses it
 * into submission order and completes the requests inside one defer_call
 * section.  No lock, allocation or bottom half of ours per request.
 *
 * poll: the node gives librbd an eventfd of its own
 * (rbd_set_image_notification) and creates completions without a
 * callback.  librbd then queues each finished completion on the image
 * (a lock-free queue of its own) and writes the eventfd, straight from
 * the thread that finished it: it skips the dispatch of the callback onto
 * its API strand.  Every AioContext the node is attached to watches that
 * eventfd (one read clears it per batch); whichever wakes takes
 * what rbd_poll_io_events() gives, completes its own requests at once and
 * pushes the others onto their context's completion stack (as the
 * callback does), so a request still completes in the thread that
 * submitted it.  The contexts watching are counted per node under
 * poll_lock (attach and detach only: the control path).
 *
 * Control: operations that wait for the cluster and come from elsewhere
 * than an open, a resize or a close (the size after an `rbd resize` seen
 * by the update watch, giving up the exclusive lock when the device
 * stops, a takeover) run in one control thread per node, so neither the
 * main loop nor an iothread waits on the network; their results reach
 * the main thread through a one-shot bottom half.  That thread is the
 * node's own (created by the open, joined by the close), not one of
 * GLib's shared pool: a pool's threads are created by whichever thread
 * pushes (an iothread under its seccomp filter) and are reused across
 * pools, so librbd's control calls could run confined and our file I/O
 * unconfined.  The close (blk_close_async() for blockdev-del) may run in
 * a worker too: unwatching, the last job and rbd_close() wait for the
 * cluster.
 *
 * Exclusive lock: librbd takes the image's exclusive lock on the first
 * write (automatic policy) and hands it to another client that asks for
 * it.  When the front-end stops the device (its last queue), the node
 * gives it up at once (rbd_lock_release), so a migration destination gets
 * it without a round of requests; a client that died keeps it until its
 * watch times out (osd_client_watch_timeout, 30 s by default).  When the
 * back-end restarts under a running front-end (kill -9, a crash), the
 * export knows it from the inflight region the front-end hands back
 * (saved by another process), and the node breaks the stale lock of the
 * earlier process of this host -- whose identity this host, not the
 * front-end, kept (rbd_owner_record()) -- once that client's watch has
 * expired, blocklisting it as `rbd lock break` does; the resubmitted
 * writes waiting in librbd then take the lock.  A lock of any other
 * client is never broken: librbd asks the owner and, if it died, breaks
 * it after its watch timed out.  See docs/user-guide.md, "Ceph RBD".
 *
 * Built as a module, block-rbd.so (the only file linked with librbd and
 * librados), which the daemon loads when a node first names driver=rbd:
 * see include/block/module.h.  What it calls of the daemon resolves
 * through the daemon's exported symbols (block/module-exports.list).
 */
#include "qemu/osdep.h"
#include <rados/librados.h>
#include <rbd/librbd.h>
#include "qemu/defer-call.h"
#include "qemu/error-report.h"
#include "qemu/event_notifier.h"
#include "qemu/iothread.h"
#include "block/block_int.h"
#include "block/engine.h"
#include "block/module.h"
#include "block/rbd.h"

/* One cluster connection, maybe shared by several nodes.  Opens run in
 * worker threads (blk_open_async()): the list of shared connections and
 * their reference counts are protected by rbd_clusters_lock. */
typedef struct RbdCluster {
    char *share;                /* NULL: private to one node */
    char *conf;
    char *user;
    rados_t cluster;
    unsigned int refs;          /* protected by rbd_clusters_lock */
} RbdCluster;

static GPtrArray *rbd_shared_clusters;  /* protected by rbd_clusters_lock */
static GMutex rbd_clusters_lock;

typedef enum RbdJob {
    RBD_JOB_REFRESH_SIZE = 1,
    RBD_JOB_RELEASE_LOCK,
    RBD_JOB_TAKEOVER,
} RbdJob;

/* How long the list of contexts watching a node's eventfd can get. */
#define RBD_POLL_MAX_CTX 64

/* A context watching a node's eventfd.  Slots never move: a context's
 * own thread checks its slot without the lock (only it sets or clears
 * it). */
typedef struct RbdPollCtx {
    _Atomic(AioContext *) ctx;  /* NULL: a free slot */
    unsigned int refs;          /* attaches of this context; poll_lock */
} RbdPollCtx;

/*
 * The default way completions come back (see the theory above): the
 * callback.  Measured on the 2-core host against the single-node test
 * cluster (one iothread, one queue, 4 KiB, docs/benchmarks.md "Ceph
 * RBD"), poll was no cheaper: 80 against 77 us of CPU per read at depth
 * 32, 209 against 193 at depth 1, 114 against 98 per write at depth 32,
 * with IOPS within the noise of the shared machine.  librbd writes the
 * eventfd for every completion it queues, where the callback's stack
 * writes ours once per batch; what poll saves (the dispatch onto
 * librbd's API strand) that costs back.  Both are a few us of the 70-230
 * us per I/O that librbd's messenger and io_context threads spend.
 */
#define RBD_DEFAULT_COMPLETION BLOCK_RBD_COMPLETION_CALLBACK

typedef struct BDRVRBDState {
    BlockBackend *bs;
    RbdCluster *cluster;
    rados_ioctx_t io;
    rbd_image_t image;
    AioContext *main_ctx;
    uint64_t update_handle;
    bool watching;
    /* The control thread (rbd_ctl_thread()): a thread of the node's own,
     * created by the opening thread (never an iothread, so never under an
     * iothread's seccomp filter) and joined by the close. */
    GThread *ctl;
    GMutex ctl_lock;
    GCond ctl_cond;             /* a job, or ctl_stop */
    GQueue ctl_jobs;            /* RbdJob; ctl_lock */
    bool ctl_stop;              /* ctl_lock: the close is ending it */
    uint64_t new_size;          /* from the worker to the main thread */
    bool closing;               /* atomic: no more size updates */
    unsigned int refs;          /* atomic: the node, and each size BH */
    /* Takeover (see rbd_ctl_takeover()): where this host keeps the
     * identity of the process that has the image open for writing, and
     * what it held when this node opened. */
    char *owner_path;
    char *prev_addr;            /* the earlier process's client address */
    uint64_t prev_id;           /* and its global id (0: none known) */
    /* completion=poll */
    bool poll;
    EventNotifier poll_notifier;    /* given to rbd_set_image_notification */
    GMutex poll_lock;               /* protects the refs, n_poll_ctx */
    RbdPollCtx poll_ctx[RBD_POLL_MAX_CTX];
    _Atomic unsigned int n_poll_ctx;    /* slots ever used */
} BDRVRBDState;

/* The completion side of one AioContext. */
typedef struct RbdEngine {
    BlockEngine common;
    EventNotifier notifier;
    bool edge;                  /* edge-triggered eventfd: never read */
    /* The context's reference and one for each push under way: a
     * librbd thread may still be between publishing a request and
     * writing the eventfd when the owner has completed it and the context
     * goes away (object-del of its iothread). */
    _Atomic unsigned int refs;
    /* Completed requests, linked through acb->next; pushed by librbd's
     * threads, taken whole by the owner. */
    _Atomic(BlockAIOCB *) done;
} RbdEngine;

/* ---- completions --------------------------------------------------- */

/* Test hooks (tests/unit/test-block-rbd.c sets them through dlsym()):
 * NULL in the daemon. */
void (*rbd_test_push_hook)(void);       /* after the publish, before the
                                         * wake-up */
void (*rbd_test_ctl_hook)(int job);     /* control thread, before a job */

static void rbd_engine_unref(RbdEngine *e)
{
    /* Release: our uses of @e come before the free; acquire: the free
     * comes after everybody else's. */
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1) {
        event_notifier_cleanup(&e->notifier);
        g_free(e);
    }
}

/* Any thread: hand @acb (finished, acb->ret set) to its context. */
static void rbd_engine_push(BlockAIOCB *acb)
{
    RbdEngine *e = (RbdEngine *)(uintptr_t)acb->engine_priv[0];
    BlockAIOCB *old;

    /* Before the publish: once the owner sees @acb it may complete it
     * and free the context; our reference keeps the eventfd and @e for
     * the wake-up below (ordered by the release of the exchange). */
    atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
    old = atomic_load_explicit(&e->done, memory_order_relaxed);
    do {
        acb->next.sqe_next = old;
        /* Release: the result and the link are visible to the owner
         * before the request is; pairs with the acquire exchange in
         * rbd_engine_drain(). */
    } while (!atomic_compare_exchange_weak_explicit(&e->done, &old, acb,
                                                    memory_order_release,
                                                    memory_order_relaxed));
    if (unlikely(rbd_test_push_hook)) {
        rbd_test_push_hook();
    }
    if (!old) {
        /* The owner has taken (or will take) everything before us; only
         * the first request of a batch needs to wake it. */
        event_notifier_set(&e->notifier);
    }
    rbd_engine_unref(e);
}

/* librbd thread: @acb has finished (completion=callback). */
static void rbd_finish_cb(rbd_completion_t c, void *arg)
{
    BlockAIOCB *acb = arg;

    acb->ret = (int)rbd_aio_get_return_value(c);
    rbd_aio_release(c);
    rbd_engine_push(acb);
}

/*
 * A read that librbd ended short: the image ends inside the request (it
 * was shrunk on the cluster after the guest learnt its size).  librbd
 * clips a read to the image and returns the bytes it read; the rest of
 * the caller's buffer holds whatever was there, which must not reach the
 * guest as data: zero it, as QEMU's rbd driver does.  Only on a short
 * read, so not per request.
 */
static void rbd_read_zero_tail(BlockAIOCB *acb)
{
    size_t skip = (size_t)acb->ret;

    for (int i = 0; i < acb->niov; i++) {
        size_t len = acb->iov[i].iov_len;

        if (skip >= len) {
            skip -= len;
            continue;
        }
        memset((char *)acb->iov[i].iov_base + skip, 0, len - skip);
        skip = 0;
    }
}

/* Owner thread: the result of @acb as the block layer takes it. */
static inline int rbd_acb_result(BlockAIOCB *acb)
{
    if (acb->ret < 0) {
        return acb->ret;
    }
    /* A read returns the bytes read (librbd zero-fills holes, and clips
     * at the end of the image), the others 0. */
    if (acb->type == BLK_REQ_READ &&
        unlikely((uint64_t)acb->ret < acb->bytes)) {
        rbd_read_zero_tail(acb);
    }
    return 0;
}

/* Owner thread: complete everything librbd has finished. */
static void rbd_engine_drain(RbdEngine *e)
{
    BlockAIOCB *list, *acb, *fifo = NULL;

    list = atomic_exchange_explicit(&e->done, NULL, memory_order_acquire);
    if (!list) {
        return;
    }
    /* The stack is newest first: reverse it into completion order. */
    while (list) {
        acb = list;
        list = acb->next.sqe_next;
        acb->next.sqe_next = fifo;
        fifo = acb;
    }
    defer_call_begin();
    while (fifo) {
        int ret;

        acb = fifo;
        fifo = acb->next.sqe_next;
        ret = rbd_acb_result(acb);
        e->common.stats.completions++;
        e->common.stats.completions_direct++;
        blk_acb_complete(acb, ret);
    }
    defer_call_end();
}

static void rbd_engine_read_cb(void *opaque)
{
    RbdEngine *e = opaque;

    /* Clear before taking the stack: a push after the exchange finds it
     * empty and signals again, so none is missed. */
    if (!e->edge) {
        event_notifier_test_and_clear(&e->notifier);
    }
    rbd_engine_drain(e);
}

static bool rbd_engine_poll_cb(void *opaque)
{
    RbdEngine *e = opaque;

    return atomic_load_explicit(&e->done, memory_order_relaxed) != NULL;
}

static void rbd_engine_poll_ready(void *opaque)
{
    rbd_engine_drain(opaque);
}

static BlockEngine *rbd_engine_create(AioContext *ctx, GError **errp)
{
    RbdEngine *e = g_new0(RbdEngine, 1);
    int ret = event_notifier_init(&e->notifier, false);

    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "rbd: cannot create an eventfd: %s",
                    g_strerror(-ret));
        g_free(e);
        return NULL;
    }
    atomic_init(&e->done, NULL);
    atomic_init(&e->refs, 1);
    e->common.ctx = ctx;
    aio_set_fd_handler(ctx, event_notifier_get_fd(&e->notifier),
                       rbd_engine_read_cb, NULL, rbd_engine_poll_cb,
                       rbd_engine_poll_ready, e);
    e->edge = aio_set_fd_edge_triggered(ctx,
                                        event_notifier_get_fd(&e->notifier));
    return &e->common;
}

/* From aio_context_free(): no request in flight, though a librbd thread
 * may still be about to wake us for the last one (it holds a reference). */
static void rbd_engine_cleanup(void *opaque)
{
    RbdEngine *e = opaque;

    aio_set_fd_handler(e->common.ctx, event_notifier_get_fd(&e->notifier),
                       NULL, NULL, NULL, NULL, NULL);
    rbd_engine_unref(e);
}

/* Unused: requests enter through the driver's functions. */
static void rbd_engine_submit(BlockEngine *e, BlockAIOCB *acb)
{
    abort();
}

static AioLocalKey rbd_engine_key;

static const BlockEngineOps rbd_engine_ops = {
    .name = "rbd",
    .key = &rbd_engine_key,
    .create = rbd_engine_create,
    .cleanup = rbd_engine_cleanup,
    .submit = rbd_engine_submit,
};

/* ---- completion=poll ----------------------------------------------- */

/* A thread of a context attached to @opaque's node: librbd has written
 * the node's eventfd. */
static void rbd_poll_read_cb(void *opaque)
{
    BDRVRBDState *s = opaque;
    AioContext *self = qemu_get_current_aio_context();
    rbd_completion_t comps[32];
    int n;

    /* Clear before taking, so a completion queued after the last
     * rbd_poll_io_events() writes it again and is not missed. */
    event_notifier_test_and_clear(&s->poll_notifier);
    defer_call_begin();
    do {
        n = rbd_poll_io_events(s->image, comps, G_N_ELEMENTS(comps));
        for (int i = 0; i < n; i++) {
            BlockAIOCB *acb = rbd_aio_get_arg(comps[i]);
            RbdEngine *e = (RbdEngine *)(uintptr_t)acb->engine_priv[0];
            int ret;

            acb->ret = (int)rbd_aio_get_return_value(comps[i]);
            rbd_aio_release(comps[i]);
            if (e->common.ctx != self) {
                rbd_engine_push(acb);   /* another context's request */
                continue;
            }
            ret = rbd_acb_result(acb);
            e->common.stats.completions++;
            e->common.stats.completions_direct++;
            blk_acb_complete(acb, ret);
        }
    } while (n == G_N_ELEMENTS(comps));
    defer_call_end();
}

/* The slot of @ctx, or -1.  Exact in @ctx's own thread. */
static int rbd_poll_slot(BDRVRBDState *s, AioContext *ctx)
{
    unsigned int n = atomic_load_explicit(&s->n_poll_ctx,
                                          memory_order_acquire);

    for (unsigned int i = 0; i < n; i++) {
        if (atomic_load_explicit(&s->poll_ctx[i].ctx,
                                 memory_order_relaxed) == ctx) {
            return i;
        }
    }
    return -1;
}

/*
 * Owner thread of @ctx: watch the node's eventfd from @ctx too (at
 * attach, or at the first request of a context that never attached).
 * @drain: take what is queued already (not from inside a submission).
 */
static bool rbd_poll_attach(BDRVRBDState *s, AioContext *ctx, bool drain,
                            GError **errp)
{
    int fd = event_notifier_get_fd(&s->poll_notifier);
    int i;

    g_mutex_lock(&s->poll_lock);
    i = rbd_poll_slot(s, ctx);
    if (i >= 0) {
        s->poll_ctx[i].refs++;
        g_mutex_unlock(&s->poll_lock);
        return true;
    }
    i = rbd_poll_slot(s, NULL);
    if (i < 0) {
        if (s->n_poll_ctx == RBD_POLL_MAX_CTX) {
            g_mutex_unlock(&s->poll_lock);
            g_set_error(errp, VB_ERROR, 0, "%s: completion=poll serves an "
                        "image from at most %u I/O threads; use "
                        "completion=callback", s->bs->filename,
                        RBD_POLL_MAX_CTX);
            return false;
        }
        i = s->n_poll_ctx;
    }
    s->poll_ctx[i].refs = 1;
    atomic_store_explicit(&s->poll_ctx[i].ctx, ctx, memory_order_relaxed);
    if ((unsigned int)i == s->n_poll_ctx) {
        /* Release: the slot is set before it is counted; pairs with the
         * acquire load in rbd_poll_slot(). */
        atomic_store_explicit(&s->n_poll_ctx, i + 1, memory_order_release);
    }
    g_mutex_unlock(&s->poll_lock);
    aio_set_fd_handler(ctx, fd, rbd_poll_read_cb, NULL, NULL, NULL, s);
    if (drain) {
        /* Completions queued before we watched: take them now. */
        rbd_poll_read_cb(s);
    }
    return true;
}

/* Owner thread of @ctx: its last queue on the node has drained. */
static void rbd_poll_detach(BDRVRBDState *s, AioContext *ctx)
{
    int i;

    g_mutex_lock(&s->poll_lock);
    i = rbd_poll_slot(s, ctx);
    if (i < 0 || --s->poll_ctx[i].refs) {
        g_mutex_unlock(&s->poll_lock);
        return;
    }
    atomic_store_explicit(&s->poll_ctx[i].ctx, NULL, memory_order_relaxed);
    g_mutex_unlock(&s->poll_lock);
    aio_set_fd_handler(ctx, event_notifier_get_fd(&s->poll_notifier),
                       NULL, NULL, NULL, NULL, NULL);
}

/* ---- requests ------------------------------------------------------ */

/* Owner thread of @ctx: every request type. */
static void rbd_submit(BlockBackend *bs, AioContext *ctx, BlockAIOCB *acb)
{
    BDRVRBDState *s = bs->opaque;
    BlockEngine *e = blk_engine_get(ctx, &rbd_engine_ops, NULL);
    rbd_completion_t c;
    int r;

    if (unlikely(!e)) {
        r = -EIO;
        goto fail;
    }
    if (unlikely(acb->bytes == 0 && acb->type != BLK_REQ_FLUSH)) {
        r = 0;                  /* librbd refuses empty vectors */
        goto fail;
    }
    if (s->poll && unlikely(rbd_poll_slot(s, ctx) < 0)) {
        /* A context that never attached: it watches from now on. */
        if (!rbd_poll_attach(s, ctx, false, NULL)) {
            r = -EIO;
            goto fail;
        }
    }
    acb->engine_priv[0] = (uintptr_t)e;
    /* completion=poll: no callback, librbd queues it and writes our
     * eventfd (rbd_poll_read_cb()). */
    r = rbd_aio_create_completion(acb, s->poll ? NULL : rbd_finish_cb, &c);
    if (unlikely(r < 0)) {
        goto fail;
    }
    switch (acb->type) {
    case BLK_REQ_READ:
        r = rbd_aio_readv(s->image, acb->iov, acb->niov, acb->offset, c);
        break;
    case BLK_REQ_WRITE:
        if (acb->flags & BDRV_REQ_FUA) {
            e->stats.fua_writes++;      /* durable on completion anyway */
        }
        r = rbd_aio_writev(s->image, acb->iov, acb->niov, acb->offset, c);
        break;
    case BLK_REQ_FLUSH:
        r = rbd_aio_flush(s->image, c);
        break;
    case BLK_REQ_DISCARD:
        r = rbd_aio_discard(s->image, acb->offset, acb->bytes, c);
        break;
    default:
        r = rbd_aio_write_zeroes(s->image, acb->offset, acb->bytes, c,
                                 (acb->flags & BDRV_REQ_MAY_UNMAP) ? 0 :
                                 RBD_WRITE_ZEROES_FLAG_THICK_PROVISION, 0);
        break;
    }
    if (unlikely(r < 0)) {
        /* Refused before librbd took the completion: ours to release. */
        rbd_aio_release(c);
        goto fail;
    }
    e->stats.requests++;
    return;

fail:
    blk_complete_later(ctx, acb, r);
}

static bool rbd_attach_aio_context(BlockBackend *bs, AioContext *ctx,
                                   GError **errp)
{
    BDRVRBDState *s = bs->opaque;

    if (!blk_engine_get(ctx, &rbd_engine_ops, errp)) {
        return false;
    }
    return !s->poll || rbd_poll_attach(s, ctx, true, errp);
}

static void rbd_detach_aio_context(BlockBackend *bs, AioContext *ctx)
{
    BDRVRBDState *s = bs->opaque;

    if (s->poll) {
        rbd_poll_detach(s, ctx);
    }
}

/* ---- control: the worker and the main thread ----------------------- */

/* Any thread: the last reference frees the node's state. */
static void rbd_state_unref(BDRVRBDState *s)
{
    if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        g_free(s->owner_path);
        g_free(s->prev_addr);
        g_free(s);
    }
}

/* Main thread: a size the worker read after an update notification. */
static void rbd_size_bh(void *opaque)
{
    BDRVRBDState *s = opaque;
    uint64_t size = __atomic_load_n(&s->new_size, __ATOMIC_ACQUIRE);

    /* Closing (maybe in a worker, blk_close_async()): s->bs may be gone
     * by now, so look at nothing else. */
    if (__atomic_load_n(&s->closing, __ATOMIC_ACQUIRE) ||
        size == blk_getlength(s->bs)) {
        rbd_state_unref(s);
        return;
    }
    info_report("%s: the image was resized on the cluster: %" PRIu64
                " bytes (was %" PRIu64 ")", s->bs->filename, size,
                blk_getlength(s->bs));
    blk_size_changed(s->bs, size);
    rbd_state_unref(s);
}

/* ---- takeover ------------------------------------------------------ */

/*
 * A back-end restarted under a running front-end finds the image's
 * exclusive lock held by its dead predecessor.  Who that was must not
 * come from the front-end: the inflight region that says "restarted" is
 * the VMM's memory, and a VMM could claim a restart to have us break (and
 * blocklist) the lock of any other client of the image.  So each node
 * that opens an image for writing records its own client (address and
 * global id) in a file of this host's runtime directory, named after the
 * cluster, pool and image, and remembers what the file held before: the
 * earlier process of this host.  A takeover breaks that client's lock
 * only, and only once its watch on the image is gone (the OSD drops it
 * osd_client_watch_timeout after the client died), so a live client is
 * never blocklisted.  A lock held by anybody else is left to librbd,
 * which asks the owner for it.
 */

/* The directory for the owner files: systemd's RuntimeDirectory=, else
 * /run/vhost-blk. */
static const char *rbd_runtime_dir(void)
{
    const char *d = g_getenv("RUNTIME_DIRECTORY");

    if (d && *d) {
        /* "RuntimeDirectory=a b" gives "A:B": the first one is ours. */
        static char first[PATH_MAX];
        const char *colon = strchr(d, ':');

        if (colon && (size_t)(colon - d) < sizeof(first)) {
            memcpy(first, d, colon - d);
            first[colon - d] = '\0';
            return first;
        }
        return d;
    }
    return "/run/vhost-blk";
}

/* Any thread (the open): record this client as the image's writer on
 * this host, keeping what the file said before.  Failing only disables
 * the takeover. */
static void rbd_owner_record(BDRVRBDState *s, const char *desc)
{
    const char *dir = rbd_runtime_dir();
    char fsid[64], id[128];
    g_autofree char *addr = NULL, *old = NULL, *line = NULL;
    g_autoptr(GError) err = NULL;
    uint64_t gid = rados_get_instance_id(s->cluster->cluster);

    if (rados_cluster_fsid(s->cluster->cluster, fsid, sizeof(fsid)) < 0 ||
        rbd_get_id(s->image, id, sizeof(id)) < 0 ||
        rados_getaddrs(s->cluster->cluster, &addr) < 0 || !addr) {
        warn_report("%s: cannot tell this client's identity; a restart "
                    "of this back-end will wait for librbd to hand the "
                    "exclusive lock over", desc);
        return;
    }
    if (g_mkdir_with_parents(dir, 0755) < 0) {
        warn_report("%s: cannot create %s (%s): a restart of this back-end "
                    "will wait for librbd to hand the exclusive lock over",
                    desc, dir, g_strerror(errno));
        return;
    }
    s->owner_path = g_strdup_printf("%s/rbd-%s-%" PRId64 "-%s.owner", dir,
                                    fsid, rados_ioctx_get_id(s->io), id);
    if (g_file_get_contents(s->owner_path, &old, NULL, NULL)) {
        char *sp = strchr(old, ' ');
        char *nl = strchr(old, '\n');

        if (sp && nl && nl > sp + 1) {
            *nl = '\0';
            s->prev_id = g_ascii_strtoull(old, NULL, 10);
            s->prev_addr = g_strdup(sp + 1);
        }
    }
    line = g_strdup_printf("%" PRIu64 " %s\n", gid, addr);
    if (!g_file_set_contents_full(s->owner_path, line, -1,
                                  G_FILE_SET_CONTENTS_CONSISTENT, 0600,
                                  &err)) {
        warn_report("%s: %s; a restart of this back-end will wait for "
                    "librbd to hand the exclusive lock over", desc,
                    err->message);
        g_clear_pointer(&s->owner_path, g_free);
    }
}

/* The close: the lock goes with us, so no successor has to take it. */
static void rbd_owner_forget(BDRVRBDState *s)
{
    g_autofree char *cur = NULL, *addr = NULL;

    if (!s->owner_path || rados_getaddrs(s->cluster->cluster, &addr) < 0) {
        return;
    }
    if (g_file_get_contents(s->owner_path, &cur, NULL, NULL) && addr &&
        strstr(cur, addr)) {
        unlink(s->owner_path);
    }
}

/* Control thread: wait up to @us for a job or the close; true if the
 * close asked us to stop. */
static bool rbd_ctl_wait(BDRVRBDState *s, int64_t us)
{
    gint64 deadline = g_get_monotonic_time() + us;
    bool stop;

    g_mutex_lock(&s->ctl_lock);
    while (!s->ctl_stop &&
           g_cond_wait_until(&s->ctl_cond, &s->ctl_lock, deadline)) {
    }
    stop = s->ctl_stop;
    g_mutex_unlock(&s->ctl_lock);
    return stop;
}

/* Is the watch of client @gid (or of address @addr) on the image? -1 if
 * the list cannot be read. */
static int rbd_has_watch(BDRVRBDState *s, uint64_t gid, const char *addr)
{
    rbd_image_watcher_t w[16];
    size_t n = G_N_ELEMENTS(w);
    bool found = false;
    int r = rbd_watchers_list(s->image, w, &n);

    if (r < 0) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if ((uint64_t)w[i].id == gid || !strcmp(w[i].addr, addr)) {
            found = true;
        }
    }
    rbd_watchers_list_cleanup(w, n);
    return found;
}

/* How long a takeover waits for the earlier process's watch to expire:
 * well past osd_client_watch_timeout's default (30 s); a longer one
 * leaves the rest to librbd. */
#define RBD_TAKEOVER_MAX_WAIT_S 600

/* Control thread: the device started after a restart of this back-end. */
static void rbd_ctl_takeover(BDRVRBDState *s)
{
    const char *name = s->bs->filename;
    int64_t waited = 0;

    if (!s->prev_addr) {
        info_report("%s: restarted under a running front-end, but this "
                    "host has no record of an earlier process of the "
                    "image: its exclusive lock is left to librbd", name);
        return;
    }
    for (;;) {
        char *owners[8];
        size_t n = G_N_ELEMENTS(owners);
        rbd_lock_mode_t mode;
        int owner = 0, r, watch;
        bool prev = false;

        if ((rbd_is_exclusive_lock_owner(s->image, &owner) == 0 && owner) ||
            (r = rbd_lock_get_owners(s->image, &mode, owners, &n)) == -ENOENT ||
            (r == 0 && n == 0)) {
            /* Ours already, or nobody's (the next write takes it). */
            if (waited) {
                info_report("%s: the exclusive lock of %s, an earlier "
                            "process of this back-end, was taken over by "
                            "librbd once its watch had expired", name,
                            s->prev_addr);
            }
            return;
        }
        if (r < 0) {
            warn_report("%s: cannot read the exclusive lock's owner: %s; "
                        "left to librbd", name, g_strerror(-r));
            return;
        }
        for (size_t i = 0; i < n; i++) {
            if (!strcmp(owners[i], s->prev_addr)) {
                prev = true;
            } else {
                info_report("%s: the exclusive lock is held by %s, not by "
                            "the earlier process of this back-end (%s): "
                            "not broken; librbd asks its owner for it",
                            name, owners[i], s->prev_addr);
            }
        }
        rbd_lock_get_owners_cleanup(owners, n);
        if (!prev || n != 1) {
            return;
        }
        watch = rbd_has_watch(s, s->prev_id, s->prev_addr);
        if (watch < 0) {
            warn_report("%s: cannot list the image's watchers; the lock of "
                        "%s is left to librbd", name, s->prev_addr);
            return;
        }
        if (!watch) {
            break;
        }
        if (waited == 0) {
            info_report("%s: the exclusive lock is held by %s, the earlier "
                        "process of this back-end; breaking it once its "
                        "watch on the image has expired "
                        "(osd_client_watch_timeout)", name, s->prev_addr);
        }
        if (waited >= RBD_TAKEOVER_MAX_WAIT_S) {
            warn_report("%s: the watch of %s is still there after %d s: "
                        "that client may be alive; its lock is left to "
                        "librbd", name, s->prev_addr,
                        RBD_TAKEOVER_MAX_WAIT_S);
            return;
        }
        if (rbd_ctl_wait(s, G_USEC_PER_SEC)) {
            return;             /* closing */
        }
        waited++;
    }
    /* Blocklists it (rbd_blocklist_on_break_lock): it never writes
     * again, even if it was only cut off. */
    if (rbd_lock_break(s->image, RBD_LOCK_MODE_EXCLUSIVE, s->prev_addr) < 0) {
        /* librbd broke it first, seeing the same expired watch. */
        info_report("%s: the exclusive lock of %s, an earlier process of "
                    "this back-end, was taken over by librbd once its "
                    "watch had expired", name, s->prev_addr);
        return;
    }
    info_report("%s: took the exclusive lock over from %s, an earlier "
                "process of this back-end, once its watch had expired "
                "(blocklisted)", name, s->prev_addr);
}

/* Control thread: one job for the image of @s. */
static void rbd_ctl_run(BDRVRBDState *s, RbdJob job)
{
    uint64_t size;
    int owner = 0, r;

    switch (job) {
    case RBD_JOB_REFRESH_SIZE:
        r = rbd_get_size(s->image, &size);
        if (r < 0) {
            warn_report("%s: cannot read the size after an update: %s",
                        s->bs->filename, g_strerror(-r));
            return;
        }
        __atomic_store_n(&s->new_size, size, __ATOMIC_RELEASE);
        __atomic_fetch_add(&s->refs, 1, __ATOMIC_SEQ_CST);
        aio_bh_schedule_oneshot(s->main_ctx, rbd_size_bh, s, "rbd-size");
        break;
    case RBD_JOB_RELEASE_LOCK:
        /* Waits for the writes in flight; the next write takes it back. */
        if (rbd_is_exclusive_lock_owner(s->image, &owner) < 0 || !owner) {
            return;
        }
        r = rbd_lock_release(s->image);
        if (r < 0) {
            warn_report("%s: cannot release the exclusive lock: %s",
                        s->bs->filename, g_strerror(-r));
        } else {
            info_report("%s: device stopped: exclusive lock released",
                        s->bs->filename);
        }
        break;
    case RBD_JOB_TAKEOVER:
        rbd_ctl_takeover(s);
        break;
    }
}

/* The control thread: jobs in order until the close stops it (a job
 * queued then is dropped: the close releases the lock itself). */
static gpointer rbd_ctl_thread(gpointer opaque)
{
    BDRVRBDState *s = opaque;

    g_mutex_lock(&s->ctl_lock);
    for (;;) {
        RbdJob job;

        while (!s->ctl_stop && g_queue_is_empty(&s->ctl_jobs)) {
            g_cond_wait(&s->ctl_cond, &s->ctl_lock);
        }
        if (s->ctl_stop) {
            break;
        }
        job = GPOINTER_TO_INT(g_queue_pop_head(&s->ctl_jobs));
        g_mutex_unlock(&s->ctl_lock);
        if (unlikely(rbd_test_ctl_hook)) {
            rbd_test_ctl_hook(job);
        }
        rbd_ctl_run(s, job);
        g_mutex_lock(&s->ctl_lock);
    }
    g_mutex_unlock(&s->ctl_lock);
    return NULL;
}

/* Any thread (an iothread, a librbd thread): queue @job.  Only a mutex
 * and a condition variable: no thread is created here, so an iothread's
 * seccomp filter never reaches the control work. */
static void rbd_ctl_push(BDRVRBDState *s, RbdJob job)
{
    g_mutex_lock(&s->ctl_lock);
    if (!s->ctl_stop &&
        !(job == RBD_JOB_REFRESH_SIZE &&
          g_queue_find(&s->ctl_jobs, GINT_TO_POINTER(job)))) {
        g_queue_push_tail(&s->ctl_jobs, GINT_TO_POINTER(job));
        g_cond_signal(&s->ctl_cond);
    }
    g_mutex_unlock(&s->ctl_lock);
}

/* The close: stop the control thread, after its current job. */
static void rbd_ctl_stop(BDRVRBDState *s)
{
    g_mutex_lock(&s->ctl_lock);
    s->ctl_stop = true;
    g_cond_broadcast(&s->ctl_cond);
    g_mutex_unlock(&s->ctl_lock);
    g_thread_join(s->ctl);
    s->ctl = NULL;
    g_queue_clear(&s->ctl_jobs);
}

/* librbd thread: the image header changed (e.g. `rbd resize`). */
static void rbd_update_cb(void *arg)
{
    BDRVRBDState *s = arg;

    rbd_ctl_push(s, RBD_JOB_REFRESH_SIZE);
}

/* Any thread. */
static void rbd_set_active(BlockBackend *bs, bool active, bool takeover)
{
    BDRVRBDState *s = bs->opaque;

    if (bs->readonly) {
        return;                 /* never locks */
    }
    if (!active) {
        rbd_ctl_push(s, RBD_JOB_RELEASE_LOCK);
    } else if (takeover) {
        rbd_ctl_push(s, RBD_JOB_TAKEOVER);
    }
}

/* Any thread (a worker through blk_truncate_async()). */
static bool rbd_drv_truncate(BlockBackend *bs, uint64_t size, GError **errp)
{
    BDRVRBDState *s = bs->opaque;
    uint64_t cur;
    int r;

    if (bs->readonly) {
        g_set_error(errp, VB_ERROR, 0, "%s is read-only (a snapshot or "
                    "read-only=on): it cannot be resized", bs->filename);
        return false;
    }
    /*
     * Never shrink, whatever size this node last saw: the image may have
     * grown on the cluster since (the update watch has not told us yet),
     * and a plain rbd_resize() to the smaller size would cut the data off.
     */
    r = rbd_resize2(s->image, size, false, NULL, NULL);
    if (r == -EINVAL && rbd_get_size(s->image, &cur) == 0 && cur > size) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot resize to %" PRIu64
                    " bytes: the image is already %" PRIu64 " bytes on the "
                    "cluster (grown there since), and vhost-blkd never "
                    "shrinks an image; ask for %" PRIu64 " or more",
                    bs->filename, size, cur, cur);
        return false;
    }
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot resize to %" PRIu64
                    " bytes: %s", bs->filename, size, g_strerror(-r));
        return false;
    }
    return true;
}

/* ---- open and close ------------------------------------------------ */

/*
 * Any thread (the open): is librbd's write-back cache off for @image, as
 * we asked?  Our rbd_cache=false is only the client's configuration: a
 * pool's or the image's own (rbd config pool|image set ... rbd_cache true,
 * kept as conf_rbd_cache in their metadata) overrides it at rbd_open(),
 * and then a completed write (FUA included) may sit in this process's
 * memory only.  So read what librbd took.  false with @errp set if it is
 * on (or cannot be read).
 */
static bool rbd_check_cache_off(const char *desc, const BlockRbdOptions *o,
                                rbd_image_t image, GError **errp)
{
    g_autofree rbd_config_option_t *opts = NULL;
    int n = 0, r;
    bool found = false, on = false;
    const char *where = "the configuration";

    /* The first call says how many options there are (-ERANGE). */
    r = rbd_config_image_list(image, NULL, &n);
    if (r == -ERANGE && n > 0) {
        opts = g_new0(rbd_config_option_t, n);
        r = rbd_config_image_list(image, opts, &n);
    }
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot read the image's "
                    "effective configuration (to check that rbd_cache is "
                    "off): %s", desc, g_strerror(-r));
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (!strcmp(opts[i].name, "rbd_cache")) {
            found = true;
            on = g_ascii_strcasecmp(opts[i].value, "false") &&
                 strcmp(opts[i].value, "0");
            where = opts[i].source == RBD_CONFIG_SOURCE_IMAGE ? "image" :
                    opts[i].source == RBD_CONFIG_SOURCE_POOL ? "pool" :
                    "configuration";
            break;
        }
    }
    rbd_config_image_list_cleanup(opts, n);
    if (!found) {
        g_set_error(errp, VB_ERROR, 0, "%s: librbd does not report "
                    "rbd_cache for the image; cannot check that its "
                    "write-back cache is off", desc);
        return false;
    }
    if (on) {
        if (!strcmp(where, "image")) {
            g_set_error(errp, VB_ERROR, 0, "%s: the image sets rbd_cache="
                        "true (its own configuration), which would let a "
                        "completed write stay in this process's memory; "
                        "remove it with 'rbd config image remove %s/%s%s%s "
                        "rbd_cache' or open it read-only", desc, o->pool,
                        o->namespace_ ? o->namespace_ : "",
                        o->namespace_ ? "/" : "", o->image);
        } else if (!strcmp(where, "pool")) {
            g_set_error(errp, VB_ERROR, 0, "%s: pool '%s' sets rbd_cache="
                        "true, which would let a completed write stay in "
                        "this process's memory; remove it with 'rbd config "
                        "pool remove %s rbd_cache' or open it read-only",
                        desc, o->pool, o->pool);
        } else {
            g_set_error(errp, VB_ERROR, 0, "%s: librbd runs the image with "
                        "rbd_cache=true although vhost-blkd set it false; "
                        "check the Ceph configuration", desc);
        }
        return false;
    }
    return true;
}

/* Any thread. */
static void rbd_cluster_unref(RbdCluster *c)
{
    if (!c) {
        return;
    }
    g_mutex_lock(&rbd_clusters_lock);
    if (--c->refs) {
        g_mutex_unlock(&rbd_clusters_lock);
        return;
    }
    if (c->share) {
        g_ptr_array_remove(rbd_shared_clusters, c);
    }
    g_mutex_unlock(&rbd_clusters_lock);
    rados_shutdown(c->cluster);
    g_free(c->share);
    g_free(c->conf);
    g_free(c->user);
    g_free(c);
}

/* "rados_connect failed" explained, for @desc. */
static void rbd_connect_error(const char *desc, const BlockRbdOptions *o,
                              unsigned int timeout, int r, GError **errp)
{
    const char *conf = o->conf ? o->conf : "the default ceph.conf";
    const char *user = o->user ? o->user : "admin";

    if (r == -ETIMEDOUT || r == -EINTR) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot connect to the Ceph "
                    "cluster: no monitor of %s answered within %u s "
                    "(connect-timeout); check mon_host there and that the "
                    "monitors are up", desc, conf, timeout);
    } else if (r == -EACCES || r == -EPERM || r == -ENOENT ||
               r == -EINVAL) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot connect to the Ceph "
                    "cluster: the monitors refused client.%s: %s; check its "
                    "key (the keyring %s names, key-secret or "
                    "ceph-keyfile)", desc, user, g_strerror(-r), conf);
    } else {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot connect to the Ceph "
                    "cluster (%s, client.%s): %s", desc, conf, user,
                    g_strerror(-r));
    }
}

/* The shared connection @o names, with a reference taken, or NULL
 * (@errp set if it exists with another conf or user).  Called with
 * rbd_clusters_lock held. */
static RbdCluster *rbd_cluster_find_shared(const char *desc,
                                           const BlockRbdOptions *o,
                                           GError **errp)
{
    for (guint i = 0; rbd_shared_clusters && i < rbd_shared_clusters->len;
         i++) {
        RbdCluster *c = g_ptr_array_index(rbd_shared_clusters, i);

        if (!strcmp(c->share, o->share)) {
            if (g_strcmp0(c->conf, o->conf) || g_strcmp0(c->user, o->user)) {
                g_set_error(errp, VB_ERROR, 0, "%s: the shared connection "
                            "'%s' was opened with another conf or user; "
                            "give this image another name", desc, o->share);
                return NULL;
            }
            c->refs++;
            return c;
        }
    }
    return NULL;
}

/*
 * Any thread (a worker when opened through blk_open_async()): a connected
 * cluster for @o (a shared one when asked).  Two nodes naming the same new
 * shared connection at once may both connect; the second to finish uses
 * the first's and shuts its own down.
 */
static RbdCluster *rbd_cluster_get(const char *desc, const BlockRbdOptions *o,
                                   GError **errp)
{
    unsigned int timeout = o->connect_timeout ? o->connect_timeout :
                           BLOCK_RBD_DEFAULT_CONNECT_TIMEOUT;
    g_autofree char *tmo = g_strdup_printf("%u", timeout);
    GError *found_err = NULL;
    RbdCluster *c, *other;
    int r;

    if (o->share) {
        g_mutex_lock(&rbd_clusters_lock);
        c = rbd_cluster_find_shared(desc, o, &found_err);
        g_mutex_unlock(&rbd_clusters_lock);
        if (c || found_err) {
            if (found_err) {
                g_propagate_error(errp, found_err);
            }
            return c;
        }
    }
    c = g_new0(RbdCluster, 1);
    c->refs = 1;
    c->conf = g_strdup(o->conf);
    c->user = g_strdup(o->user);
    r = rados_create(&c->cluster, o->user);
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot create a cluster handle "
                    "for client.%s: %s", desc, o->user ? o->user : "admin",
                    g_strerror(-r));
        goto fail_free;
    }
    r = rados_conf_read_file(c->cluster, o->conf);
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot read the Ceph "
                    "configuration %s: %s", desc,
                    o->conf ? o->conf : "(default search path)",
                    g_strerror(-r));
        goto fail;
    }
    if (o->keyfile && access(o->keyfile, R_OK) < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot read the key file %s: "
                    "%s", desc, o->keyfile, g_strerror(errno));
        goto fail;
    }
    /*
     * Values we set: the connect bound, no librbd write-back cache (a
     * write is durable when it completes, which FUA and a guest without
     * flushes rely on: not overridable).  Left to librbd and the conf:
     * rbd_non_blocking_aio stays true, so rbd_aio_*() hands each request
     * to librbd's io_context thread.  false would run it in our iothread
     * (measured: 20% less CPU per read at depth 1, none at depth 32) but
     * lets the call block there: the Objecter's throttle
     * (objecter_inflight_ops, objecter_inflight_op_bytes) waits in the
     * submitting thread while an OSD is down or slow, and would stall
     * every export of that iothread.  A conf with one export per iothread
     * may set it; ms_async_op_threads and librados_thread_count too (see
     * docs/user-guide.md, "Tuning").
     */
    if ((o->key && (r = rados_conf_set(c->cluster, "key", o->key)) < 0) ||
        (o->mon_host &&
         (r = rados_conf_set(c->cluster, "mon_host", o->mon_host)) < 0) ||
        (o->auth_client_required &&
         (r = rados_conf_set(c->cluster, "auth_client_required",
                             o->auth_client_required)) < 0) ||
        (o->keyfile &&
         (r = rados_conf_set(c->cluster, "keyfile", o->keyfile)) < 0) ||
        (r = rados_conf_set(c->cluster, "client_mount_timeout", tmo)) < 0 ||
        (r = rados_conf_set(c->cluster, "rados_mon_op_timeout", tmo)) < 0 ||
        (r = rados_conf_set(c->cluster, "rbd_cache", "false")) < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot configure the cluster "
                    "handle: %s", desc, g_strerror(-r));
        goto fail;
    }
    r = rados_connect(c->cluster);
    if (r < 0) {
        rbd_connect_error(desc, o, timeout, r, errp);
        goto fail;
    }
    if (o->share) {
        g_mutex_lock(&rbd_clusters_lock);
        other = rbd_cluster_find_shared(desc, o, &found_err);
        if (!other && !found_err) {
            if (!rbd_shared_clusters) {
                rbd_shared_clusters = g_ptr_array_new();
            }
            c->share = g_strdup(o->share);
            g_ptr_array_add(rbd_shared_clusters, c);
        }
        g_mutex_unlock(&rbd_clusters_lock);
        if (other || found_err) {
            /* Another open made it first: use that one. */
            if (found_err) {
                g_propagate_error(errp, found_err);
            }
            rados_shutdown(c->cluster);
            g_free(c->conf);
            g_free(c->user);
            g_free(c);
            return other;
        }
    }
    return c;

fail:
    rados_shutdown(c->cluster);
fail_free:
    g_free(c->conf);
    g_free(c->user);
    g_free(c);
    return NULL;
}

/* The owner thread of a context that still watches the node's eventfd
 * (completion=poll; it never detached): stop watching. */
static void rbd_poll_unwatch_fn(void *opaque)
{
    BDRVRBDState *s = opaque;

    aio_set_fd_handler(qemu_get_current_aio_context(),
                       event_notifier_get_fd(&s->poll_notifier),
                       NULL, NULL, NULL, NULL, NULL);
}

/*
 * Any thread: the main one (blk_close()) or a worker (blk_close_async(),
 * which blockdev-del uses: everything here may wait for the cluster).
 * No request in flight.
 */
static void rbd_drv_close(BlockBackend *bs)
{
    BDRVRBDState *s = bs->opaque;

    if (!s) {
        return;
    }
    __atomic_store_n(&s->closing, true, __ATOMIC_RELEASE);
    if (s->watching) {
        rbd_update_unwatch(s->image, s->update_handle);
    }
    if (s->ctl) {
        rbd_ctl_stop(s);        /* after its current job */
    }
    if (s->poll) {
        AioContext *self = qemu_get_current_aio_context();

        /*
         * Contexts that used the node without detaching (the first use
         * attached them) still watch the eventfd with @s as the handler's
         * argument: each stops in its own thread, before the image and
         * @s go away.  Their threads never wait for the cluster, so this
         * wait is short.
         */
        for (unsigned int i = 0; i < s->n_poll_ctx; i++) {
            AioContext *c = atomic_load(&s->poll_ctx[i].ctx);

            if (!c) {
                continue;
            }
            if (c == self) {
                rbd_poll_unwatch_fn(s);
            } else {
                aio_run_sync(c, rbd_poll_unwatch_fn, s);
            }
            atomic_store(&s->poll_ctx[i].ctx, NULL);
        }
    }
    if (s->image) {
        rbd_owner_forget(s);
        rbd_close(s->image);
    }
    if (s->poll) {
        event_notifier_cleanup(&s->poll_notifier);
        g_mutex_clear(&s->poll_lock);
    }
    if (s->io) {
        rados_ioctx_destroy(s->io);
    }
    rbd_cluster_unref(s->cluster);
    g_mutex_clear(&s->ctl_lock);
    g_cond_clear(&s->ctl_cond);
    bs->opaque = NULL;
    /* A size BH still scheduled frees it, seeing s->closing. */
    rbd_state_unref(s);
}

/* Any thread: the main one (blk_open()) or a worker (blk_open_async()). */
static bool rbd_drv_open(BlockBackend *bs, const BlockOptions *opts,
                         GError **errp)
{
    const BlockRbdOptions *o = opts->driver_opts;
    BDRVRBDState *s;
    rbd_image_info_t info;
    uint64_t size, stripe_unit = 0;
    g_autofree char *desc = NULL;
    int r;

    if (!o || !o->pool || !*o->pool || !o->image || !*o->image) {
        g_set_error(errp, VB_ERROR, 0, "driver=rbd needs pool= and image= "
                    "(rbd=POOL/IMAGE on --export)");
        return false;
    }
    desc = blk_rbd_describe(o);
    s = g_new0(BDRVRBDState, 1);
    s->refs = 1;
    g_mutex_init(&s->ctl_lock);
    g_cond_init(&s->ctl_cond);
    g_queue_init(&s->ctl_jobs);
    s->bs = bs;
    s->main_ctx = bs->main_ctx;
    bs->opaque = s;
    bs->filename = g_strdup(desc);
    if (o->snapshot) {
        bs->readonly = true;    /* a snapshot cannot change */
    }

    s->cluster = rbd_cluster_get(desc, o, errp);
    if (!s->cluster) {
        goto fail;
    }
    r = rados_ioctx_create(s->cluster->cluster, o->pool, &s->io);
    if (r < 0) {
        if (r == -ENOENT) {
            g_set_error(errp, VB_ERROR, 0, "%s: the cluster has no pool "
                        "'%s' (see ceph osd pool ls)", desc, o->pool);
        } else {
            g_set_error(errp, VB_ERROR, 0, "%s: cannot open pool '%s': %s",
                        desc, o->pool, g_strerror(-r));
        }
        goto fail;
    }
    if (o->namespace_) {
        rados_ioctx_set_namespace(s->io, o->namespace_);
    }
    if (bs->readonly) {
        r = rbd_open_read_only(s->io, o->image, &s->image, o->snapshot);
    } else {
        r = rbd_open(s->io, o->image, &s->image, NULL);
    }
    if (r < 0) {
        s->image = NULL;
        if (r == -ENOENT && o->snapshot) {
            rbd_image_t probe;

            if (rbd_open_read_only(s->io, o->image, &probe, NULL) == 0) {
                rbd_close(probe);
                g_set_error(errp, VB_ERROR, 0, "%s: image '%s' has no "
                            "snapshot '%s' (see rbd snap ls %s/%s)", desc,
                            o->image, o->snapshot, o->pool, o->image);
                goto fail;
            }
        }
        if (r == -ENOENT) {
            g_set_error(errp, VB_ERROR, 0, "%s: pool '%s' has no image "
                        "'%s' (see rbd ls %s)", desc, o->pool, o->image,
                        o->pool);
        } else if (r == -EACCES || r == -EPERM) {
            g_set_error(errp, VB_ERROR, 0, "%s: client.%s may not open the "
                        "image: %s; check its caps (ceph auth get)", desc,
                        o->user ? o->user : "admin", g_strerror(-r));
        } else {
            g_set_error(errp, VB_ERROR, 0, "%s: cannot open the image: %s",
                        desc, g_strerror(-r));
        }
        goto fail;
    }
    if (!bs->readonly && !rbd_check_cache_off(desc, o, s->image, errp)) {
        goto fail;
    }
    r = rbd_get_size(s->image, &size);
    if (r == 0) {
        r = rbd_stat(s->image, &info, sizeof(info));
    }
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot read the image's size: "
                    "%s", desc, g_strerror(-r));
        goto fail;
    }
    if (rbd_get_stripe_unit(s->image, &stripe_unit) < 0 || !stripe_unit) {
        stripe_unit = info.obj_size;
    }
    bs->size = size;
    bs->bl.logical_block_size = 512;
    bs->bl.physical_block_size = 512;
    bs->bl.request_alignment = 1;
    /* Whole objects (or stripe units) are what the OSDs write best. */
    bs->bl.opt_io_size = stripe_unit <= UINT32_MAX ? stripe_unit : 0;
    bs->bl.can_discard = true;
    bs->bl.can_write_zeroes = true;

    if ((o->completion ? o->completion : RBD_DEFAULT_COMPLETION) ==
        BLOCK_RBD_COMPLETION_POLL) {
        r = event_notifier_init(&s->poll_notifier, false);
        if (r < 0) {
            g_set_error(errp, VB_ERROR, 0, "%s: cannot create an eventfd: %s",
                        desc, g_strerror(-r));
            goto fail;
        }
        g_mutex_init(&s->poll_lock);
        s->poll = true;
        r = rbd_set_image_notification(s->image,
                                       event_notifier_get_fd(&s->poll_notifier),
                                       EVENT_TYPE_EVENTFD);
        if (r < 0) {
            g_set_error(errp, VB_ERROR, 0, "%s: librbd refused the event "
                        "notification (completion=poll): %s; use "
                        "completion=callback", desc, g_strerror(-r));
            goto fail;
        }
    }
    if (!bs->readonly) {
        rbd_owner_record(s, desc);
    }
    s->ctl = g_thread_try_new("rbd-ctl", rbd_ctl_thread, s, errp);
    if (!s->ctl) {
        g_prefix_error(errp, "%s: cannot start the image's control thread: ",
                       desc);
        goto fail;
    }
    if (!o->snapshot && s->main_ctx) {
        r = rbd_update_watch(s->image, &s->update_handle, rbd_update_cb, s);
        if (r < 0) {
            warn_report("%s: cannot watch the image for resizes: %s; a "
                        "resize on the cluster reaches the guest only with "
                        "block_resize", desc, g_strerror(-r));
        } else {
            s->watching = true;
        }
    }
    return true;

fail:
    return false;               /* blk_open() calls rbd_drv_close() */
}

const BlockDriver bdrv_rbd = {
    .format_name = "rbd",
    .bdrv_open_any_thread = true,
    .bdrv_truncate_any_thread = true,
    .bdrv_close_any_thread = true,
    .bdrv_open = rbd_drv_open,
    .bdrv_close = rbd_drv_close,
    .bdrv_truncate = rbd_drv_truncate,
    .bdrv_attach_aio_context = rbd_attach_aio_context,
    .bdrv_detach_aio_context = rbd_detach_aio_context,
    .bdrv_set_active = rbd_set_active,
    .bdrv_aio_preadv = rbd_submit,
    .bdrv_aio_pwritev = rbd_submit,
    .bdrv_aio_flush = rbd_submit,
    .bdrv_aio_pdiscard = rbd_submit,
    .bdrv_aio_pwrite_zeroes = rbd_submit,
};

/* The loader checks it before it uses bdrv_rbd. */
const BlockModuleAbi block_module_abi = BLOCK_MODULE_ABI_INIT;
