/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The io_uring engine (liburing): one ring per AioContext.
 *
 * Theory of operation: a request becomes an SQE at once if the submission
 * queue has room, otherwise it waits on a pending list (a QSIMPLEQ linked
 * through acb->next).  Inside a defer_call section the engine registers
 * luring_submit_cb() once and the whole batch goes to the kernel with one
 * io_uring_submit() when the section ends; a full SQ is submitted early.
 * Completions are reaped from the ring's eventfd handler and from the busy
 * poll handler (io_uring_cq_ready(), no syscall), inside one defer_call
 * section so that callbacks that submit I/O or notify the guest are batched
 * too.  A submission the kernel refused (-EAGAIN/-EBUSY) or took only
 * part of is retried from a BH or on the next completion, whichever runs
 * first.  -EAGAIN/-EBUSY results are resubmitted, short transfers are
 * resubmitted for the remainder, and what io_uring cannot do (discard and
 * write-zeroes fallbacks) is forwarded to the thread pool.
 *
 * Deferred task work: where the kernel has it (Linux 6.1+), the ring is
 * created with IORING_SETUP_DEFER_TASKRUN (and SINGLE_ISSUER, true since
 * only the owner thread submits).  A finished request then only queues
 * work and signals the eventfd; the completion handler asks for it with
 * io_uring_get_events() when IORING_SQ_TASKRUN says there is some.
 * Without it every completion interrupts the thread (an epoll_wait that
 * returns EINTR, then a second one): depth-1 median latency on the
 * benchmark machine went from 114-118 to 81-83 us with it.  The eventfd signal for
 * deferred work is probed once per ring; a kernel without it gets a
 * plain ring.
 *
 * The ring fd is registered (io_uring_register_ring_fd(), Linux 5.18+)
 * where the kernel allows, so io_uring_enter() skips the fd lookup.
 *
 * Every function runs in the owner thread of the ring's AioContext.
 */
#include "qemu/osdep.h"
#include <linux/falloc.h>
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include "qemu/defer-call.h"
#include "qemu/event_notifier.h"
#include "block/block_int.h"
#include "block/engine.h"

#define LURING_ENTRIES 256

typedef struct LuringState {
    BlockEngine common;
    struct io_uring ring;
    bool defer_taskrun;         /* completions wait for io_uring_get_events */
    EventNotifier notifier;
    QSIMPLEQ_HEAD(, BlockAIOCB) pending;    /* waiting for room in the SQ */
    QEMUBH *retry_bh;           /* io_uring_submit() failed: try again */
} LuringState;

static void luring_flush(LuringState *s);

unsigned int luring_test_submit_max;

/*
 * Testing only: a short submission.  Publish every prepared SQE the way
 * io_uring_submit() does (identity SQ array, then the tail), but ask the
 * kernel to consume only @max of them.  Returns what io_uring_enter()
 * returns: the number consumed or -errno.
 */
static int luring_submit_short(LuringState *s, unsigned int max)
{
    struct io_uring_sq *sq = &s->ring.sq;
    unsigned int ready;

    for (unsigned int i = sq->sqe_head; i != sq->sqe_tail; i++) {
        sq->array[i & sq->ring_mask] = i & sq->ring_mask;
    }
    sq->sqe_head = sq->sqe_tail;
    __atomic_store_n(sq->ktail, sq->sqe_tail, __ATOMIC_RELEASE);
    ready = sq->sqe_tail - __atomic_load_n(sq->khead, __ATOMIC_ACQUIRE);
    return io_uring_enter(s->ring.ring_fd, MIN(ready, max), 0, 0, NULL);
}

/* io_uring_submit(), or a short one when a test asks for it. */
static inline int luring_submit_sqes(LuringState *s)
{
    if (unlikely(luring_test_submit_max)) {
        return luring_submit_short(s, luring_test_submit_max);
    }
    return io_uring_submit(&s->ring);
}

static bool luring_unsupported(int res)
{
    return res == -EOPNOTSUPP || res == -EINVAL || res == -ENOSYS;
}

/* Turn @acb into an SQE; false if the SQ is full. */
static bool luring_prep(LuringState *s, BlockAIOCB *acb)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
    int fd = acb->target->fd;
    struct iovec *iov;
    int niov, mode;
    void *base;
    size_t len;

    if (!sqe) {
        return false;
    }
    switch (acb->type) {
    case BLK_REQ_READ:
    case BLK_REQ_WRITE:
        if (likely(acb->done == 0)) {
            iov = blk_acb_iov(acb, &niov);
            if (acb->type == BLK_REQ_READ) {
                io_uring_prep_readv(sqe, fd, iov, niov, acb->offset);
            } else {
                io_uring_prep_writev(sqe, fd, iov, niov, acb->offset);
            }
        } else {
            /* Remainder of a short transfer: one segment (see caller). */
            if (!blk_acb_remainder(acb, &base, &len)) {
                abort();        /* internal invariant */
            }
            if (acb->type == BLK_REQ_READ) {
                io_uring_prep_read(sqe, fd, base, len, acb->offset + acb->done);
            } else {
                io_uring_prep_write(sqe, fd, base, len, acb->offset + acb->done);
            }
        }
        if (acb->type == BLK_REQ_WRITE && (acb->flags & BDRV_REQ_FUA)) {
            sqe->rw_flags = RWF_DSYNC;
            s->common.stats.fua_writes++;
        }
        break;
    case BLK_REQ_FLUSH:
        io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
        break;
    case BLK_REQ_DISCARD:
        io_uring_prep_fallocate(sqe, fd,
                                FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                acb->offset, acb->bytes);
        break;
    case BLK_REQ_WRITE_ZEROES:
        mode = (acb->flags & BDRV_REQ_MAY_UNMAP) ? FALLOC_FL_PUNCH_HOLE
                                                 : FALLOC_FL_ZERO_RANGE;
        io_uring_prep_fallocate(sqe, fd, mode | FALLOC_FL_KEEP_SIZE,
                                acb->offset, acb->bytes);
        break;
    }
    io_uring_sqe_set_data(sqe, acb);
    return true;
}

/* Queue @acb: an SQE if possible, else the pending list. */
static void luring_queue(LuringState *s, BlockAIOCB *acb)
{
    if (likely(QSIMPLEQ_EMPTY(&s->pending))) {
        if (luring_prep(s, acb)) {
            return;
        }
        /* SQ full: submit early to make room. */
        luring_flush(s);
        if (QSIMPLEQ_EMPTY(&s->pending) && luring_prep(s, acb)) {
            return;
        }
    }
    QSIMPLEQ_INSERT_TAIL(&s->pending, acb, next);
}

/* Submit every queued SQE and as many pending requests as fit. */
static void luring_flush(LuringState *s)
{
    for (;;) {
        unsigned int queued;
        int ret;

        while (!QSIMPLEQ_EMPTY(&s->pending) &&
               luring_prep(s, QSIMPLEQ_FIRST(&s->pending))) {
            QSIMPLEQ_REMOVE_HEAD(&s->pending, next);
        }
        queued = io_uring_sq_ready(&s->ring);
        if (queued == 0) {
            return;
        }
        ret = luring_submit_sqes(s);
        s->common.stats.submit_syscalls++;
        if (ret == -EINTR) {
            continue;
        }
        if (ret <= 0) {
            /*
             * -EAGAIN/-EBUSY (or out of memory): the SQEs stay in the ring;
             * try again after the next completions or from a BH.
             */
            s->common.stats.retries++;
            qemu_bh_schedule(s->retry_bh);
            return;
        }
        if ((unsigned int)ret < queued) {
            /*
             * Short: the kernel stopped early (no memory for more requests,
             * or an SQE it failed) and the rest is still in the SQ.  Nothing
             * else would submit it before the next unrelated request, so
             * retry from the BH (or the next completion, whichever comes
             * first) rather than spin here.
             */
            s->common.stats.retries++;
            qemu_bh_schedule(s->retry_bh);
            return;
        }
        if (QSIMPLEQ_EMPTY(&s->pending)) {
            return;
        }
    }
}

static void luring_submit_cb(void *opaque)
{
    luring_flush(opaque);
}

static void luring_retry_bh(void *opaque)
{
    luring_flush(opaque);
}


static void luring_complete_one(LuringState *s, BlockAIOCB *acb, int res)
{
    int ret = res;

    if (unlikely(res == -EAGAIN || res == -EBUSY || res == -EINTR)) {
        s->common.stats.retries++;
        luring_queue(s, acb);
        defer_call(luring_submit_cb, s);
        return;
    }
    switch (acb->type) {
    case BLK_REQ_WRITE:
        if (unlikely((acb->flags & BDRV_REQ_FUA) && luring_unsupported(res))) {
            /* No RWF_DSYNC here: the pool writes and syncs instead. */
            s->common.stats.retries++;
            thread_pool_forward(acb);
            return;
        }
        /* fall through */
    case BLK_REQ_READ:
        switch (blk_acb_transferred(acb, res, &ret)) {
        case BLK_XFER_COMPLETE:
            break;
        case BLK_XFER_RESUBMIT:
            s->common.stats.retries++;
            luring_queue(s, acb);
            defer_call(luring_submit_cb, s);
            return;
        case BLK_XFER_FORWARD:
            s->common.stats.retries++;
            thread_pool_forward(acb);
            return;
        }
        break;
    case BLK_REQ_WRITE_ZEROES:
        if (unlikely(luring_unsupported(res))) {
            /* No fallocate mode for it: the pool falls back to writes. */
            thread_pool_forward(acb);
            return;
        }
        break;
    default:
        break;
    }
    s->common.stats.completions++;
    s->common.stats.completions_direct++;
    blk_acb_complete(acb, ret);
}

/* Deferred completions are waiting for this thread (no syscall). */
static inline bool luring_work_pending(LuringState *s)
{
    return IO_URING_READ_ONCE(*s->ring.sq.kflags) & IORING_SQ_TASKRUN;
}

static void luring_process_completions(LuringState *s)
{
    struct io_uring_cqe *cqe;

    defer_call_begin();
    if (s->defer_taskrun && luring_work_pending(s)) {
        io_uring_get_events(&s->ring);
    }
    while (io_uring_peek_cqe(&s->ring, &cqe) == 0 && cqe) {
        BlockAIOCB *acb = io_uring_cqe_get_data(cqe);
        int res = cqe->res;

        io_uring_cqe_seen(&s->ring, cqe);
        luring_complete_one(s, acb, res);
    }
    if (!QSIMPLEQ_EMPTY(&s->pending) || qemu_bh_is_scheduled(s->retry_bh) ||
        io_uring_sq_ready(&s->ring)) {
        qemu_bh_cancel(s->retry_bh);
        defer_call(luring_submit_cb, s);
    }
    defer_call_end();
}

static void luring_completion_cb(void *opaque)
{
    LuringState *s = opaque;

    event_notifier_test_and_clear(&s->notifier);
    luring_process_completions(s);
}

static bool luring_poll_cb(void *opaque)
{
    LuringState *s = opaque;

    return io_uring_cq_ready(&s->ring) > 0 ||
           (s->defer_taskrun && luring_work_pending(s));
}

static void luring_poll_ready(void *opaque)
{
    luring_process_completions(opaque);
}

/*
 * Does this kernel signal the registered eventfd when deferred work is
 * queued?  Without that the thread would sleep on completions forever.
 * A read on a zero eventfd is armed for poll; a write wakes it, which
 * queues deferred work: the ring's eventfd must become readable.  (An
 * eventfd, not a pipe: the iothread's seccomp filter allows eventfd2.)
 */
static bool luring_probe_deferred_eventfd(LuringState *s)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
    struct io_uring_cqe *cqe = NULL;
    struct __kernel_timespec ts = { .tv_sec = 1 };
    struct pollfd pfd = {
        .fd = event_notifier_get_fd(&s->notifier), .events = POLLIN,
    };
    uint64_t one = 1, buf;
    int efd;
    bool ok;

    if (!sqe) {
        return false;
    }
    efd = eventfd(0, EFD_CLOEXEC);
    if (efd < 0) {
        return false;
    }
    io_uring_prep_read(sqe, efd, &buf, sizeof(buf), 0);
    io_uring_sqe_set_data(sqe, NULL);
    ok = io_uring_submit(&s->ring) == 1 &&
         write(efd, &one, sizeof(one)) == sizeof(one) &&
         poll(&pfd, 1, 1000) == 1;
    /* Reap the probe whatever happened, before the ring is used. */
    if (io_uring_wait_cqe_timeout(&s->ring, &cqe, &ts) == 0 && cqe) {
        ok = ok && cqe->res == sizeof(buf);
        io_uring_cqe_seen(&s->ring, cqe);
    } else {
        ok = false;
    }
    event_notifier_test_and_clear(&s->notifier);
    close(efd);
    return ok;
}

/* A ring (with deferred task work when @defer) and its eventfd. */
static int luring_setup(LuringState *s, bool defer)
{
    unsigned int flags = defer ? IORING_SETUP_SINGLE_ISSUER |
                                 IORING_SETUP_DEFER_TASKRUN |
                                 IORING_SETUP_TASKRUN_FLAG : 0;
    int ret = io_uring_queue_init(LURING_ENTRIES, &s->ring, flags);

    if (ret < 0) {
        return ret;
    }
    ret = io_uring_register_eventfd(&s->ring,
                                    event_notifier_get_fd(&s->notifier));
    if (ret < 0) {
        io_uring_queue_exit(&s->ring);
        return ret;
    }
    s->defer_taskrun = defer;
    if (defer && !luring_probe_deferred_eventfd(s)) {
        io_uring_queue_exit(&s->ring);
        return -ENOTSUP;
    }
    /*
     * Registered ring fd (Linux 5.18+): io_uring_enter() then skips the
     * fd table lookup and reference on every submit and get-events call.
     * Only an optimisation: liburing switches to the registered index
     * when this succeeds and keeps the plain fd when it does not.
     */
    (void)io_uring_register_ring_fd(&s->ring);
    return 0;
}

static BlockEngine *luring_create(AioContext *ctx, GError **errp)
{
    LuringState *s = g_new0(LuringState, 1);
    int ret;

    ret = event_notifier_init(&s->notifier, false);
    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot create an eventfd: %s",
                    g_strerror(-ret));
        g_free(s);
        return NULL;
    }
    /* VHOST_BLK_NO_DEFER_TASKRUN=1: the plain ring (comparisons, tests) */
    ret = -ENOTSUP;
    if (!getenv("VHOST_BLK_NO_DEFER_TASKRUN")) {
        ret = luring_setup(s, true);
    }
    if (ret < 0) {
        ret = luring_setup(s, false);   /* kernels before 6.1 */
    }
    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot create an io_uring: %s",
                    g_strerror(-ret));
        event_notifier_cleanup(&s->notifier);
        g_free(s);
        return NULL;
    }
    QSIMPLEQ_INIT(&s->pending);
    s->common.ctx = ctx;
    s->retry_bh = aio_bh_new(ctx, luring_retry_bh, s, "io_uring-retry");
    aio_set_fd_handler(ctx, event_notifier_get_fd(&s->notifier),
                       luring_completion_cb, NULL, luring_poll_cb,
                       luring_poll_ready, s);
    return &s->common;
}

static void luring_cleanup(void *opaque)
{
    LuringState *s = opaque;

    aio_set_fd_handler(s->common.ctx, event_notifier_get_fd(&s->notifier),
                       NULL, NULL, NULL, NULL, NULL);
    qemu_bh_delete(s->retry_bh);
    io_uring_queue_exit(&s->ring);
    event_notifier_cleanup(&s->notifier);
    g_free(s);
}

static void luring_submit(BlockEngine *e, BlockAIOCB *acb)
{
    LuringState *s = container_of(e, LuringState, common);

    luring_queue(s, acb);
    if (acb->blk->batch) {
        defer_call(luring_submit_cb, s);   /* at once outside a section */
    } else {
        luring_flush(s);
    }
}

/* Main thread (blk_open()): can this kernel create a ring at all? */
bool luring_probe(GError **errp)
{
    struct io_uring ring;
    int ret = io_uring_queue_init(2, &ring, 0);

    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "io_uring_queue_init: %s",
                    g_strerror(-ret));
        return false;
    }
    io_uring_queue_exit(&ring);
    return true;
}

static AioLocalKey luring_key;

const BlockEngineOps luring_engine_ops = {
    .name = "io_uring",
    .key = &luring_key,
    .create = luring_create,
    .cleanup = luring_cleanup,
    .submit = luring_submit,
};
