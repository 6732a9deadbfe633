/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The stream job (QEMU's block-stream): copy into a qcow2 node (the top)
 * every range it leaves to its backing chain and that a node of the
 * chain above the base holds, so that the base can become the top's
 * backing node and the images in between can go.
 *
 * One operation at a time, from the main thread's AioContext, at a
 * cursor that walks the disk once: ask the top what a range is (block
 * status); a range it holds is skipped; otherwise ask each node of the
 * chain below it, down to the base (excluded), for the same range,
 * shortened to what each answer covers; a range nobody above the base
 * holds is skipped too.  A range to copy is read from the top (which
 * reads it from the chain) and written back to it with
 * BDRV_REQ_IF_UNALLOCATED: the qcow2 driver writes each cluster only if
 * its L2 entry still says unallocated, in its metadata thread, where
 * every allocation is serialised.  So a guest write that reached a
 * cluster after our read allocated it first and is never overwritten
 * with the older data; a guest write that comes after our copy lands on
 * it as on any allocated cluster.
 *
 * The graph change (the top's header names the base, the nodes in
 * between close) is the caller's @finish, run at the job's prepare: a
 * cancelled or failed job changes nothing, and the chain stays usable
 * (the copied clusters read what the chain did).
 *
 * block-commit below the active node is the same walk (StreamOptions
 * .commit): from the top down to the base, what any of them holds is
 * copied into the base with plain writes (nobody reads the base there).
 *
 * The speed limit: after an operation of N bytes, the next waits N/speed
 * seconds on a timerfd.  Buffers are allocated when the job starts.
 *
 * Threads: main thread only.
 */
#include "qemu/osdep.h"
#include <sys/timerfd.h>
#include "qemu/aio.h"
#include "qemu/error-report.h"
#include "block/block_int.h"
#include "block/job.h"

#define STREAM_CHUNK (1u << 20)

typedef enum StreamPhase {
    STREAM_IDLE,
    STREAM_TOP_STATUS,
    STREAM_CHAIN_STATUS,
    STREAM_READ,
    STREAM_WRITE,
} StreamPhase;

typedef struct StreamJob {
    Job *job;
    BlockBackend *top;
    BlockBackend *base;
    BlockBackend *target;       /* written: the top, or commit's base */
    bool commit;
    bool base_reopened;         /* the base goes back to read-only */
    BdrvChild *user;
    BdrvChild *target_user;     /* commit */
    AioContext *ctx;
    JobErrorAction on_error;
    bool (*finish)(void *opaque, GError **errp);
    void (*ended)(void *opaque);
    void *opaque;

    StreamPhase phase;
    uint64_t size;
    uint64_t cursor;
    uint64_t len;               /* of the range being looked at */
    BlockBackend *level;        /* the chain node asked */
    BlockAIOCB acb;
    BlockStatus status;
    struct iovec iov;
    void *buf;

    int timer_fd;
    bool waiting;               /* the speed limit holds us */
    QEMUBH *kick_bh;
} StreamJob;

static void stream_iterate(StreamJob *s);

static BlockBackend *stream_backing_of(BlockBackend *blk)
{
    BlockDriverInfo bdi = { 0 };

    blk_get_info(blk, &bdi);
    return bdi.backing;
}

static void stream_kick_bh(void *opaque)
{
    stream_iterate(opaque);
}

static void stream_timer_cb(void *opaque)
{
    StreamJob *s = opaque;
    uint64_t n;

    if (read(s->timer_fd, &n, sizeof(n)) < 0) {
        /* EAGAIN: not expired after all; the handler runs again. */
        return;
    }
    s->waiting = false;
    stream_iterate(s);
}

/* The range is done (copied or skipped): on to the next one. */
static void stream_advance(StreamJob *s, uint64_t bytes)
{
    uint64_t speed = s->job->speed;

    s->cursor += bytes;
    s->phase = STREAM_IDLE;
    job_progress_update(s->job, bytes);
    if (speed && bytes) {
        uint64_t ns = bytes * 1000000000ull / speed;
        struct itimerspec its = {
            .it_value.tv_sec = ns / 1000000000ull,
            .it_value.tv_nsec = MAX(ns % 1000000000ull, 1),
        };

        s->waiting = true;
        timerfd_settime(s->timer_fd, 0, &its, NULL);
    }
    /* Waiting, this only looks for a cancel that came meanwhile. */
    stream_iterate(s);
}

static void stream_error(StreamJob *s, const char *op, int ret)
{
    s->phase = STREAM_IDLE;
    job_report_error(s->job, op, s->on_error);
    if (s->on_error == JOB_ERROR_REPORT) {
        job_completed(s->job, ret,
                      g_strdup_printf("%s error at offset %" PRIu64 ": %s",
                                      op, s->cursor, g_strerror(-ret)));
        return;
    }
    if (s->on_error == JOB_ERROR_IGNORE) {
        /* QEMU's stream goes on past the range: it stays the chain's,
         * and the graph change is refused at the end. */
        s->job->ret = ret;
        s->job->err = g_strdup_printf("%s error at offset %" PRIu64
                                      " (ignored): %s", op, s->cursor,
                                      g_strerror(-ret));
        stream_advance(s, s->len);
        return;
    }
    /* stop: paused; job-resume tries the range again. */
    stream_iterate(s);
}

static void stream_write_cb(void *opaque, int ret)
{
    StreamJob *s = opaque;

    if (ret < 0) {
        stream_error(s, "write", ret);
        return;
    }
    stream_advance(s, s->len);
}

static void stream_read_cb(void *opaque, int ret)
{
    StreamJob *s = opaque;

    if (ret < 0) {
        stream_error(s, "read", ret);
        return;
    }
    s->phase = STREAM_WRITE;
    /* A commit's base is read by nobody where it is written (the images
     * above hold those ranges): a plain write. */
    blk_aio_pwritev(s->target, &s->acb, s->cursor, &s->iov, 1,
                    s->commit ? 0 : BDRV_REQ_IF_UNALLOCATED,
                    stream_write_cb, s);
}

static void stream_copy(StreamJob *s)
{
    s->phase = STREAM_READ;
    s->iov.iov_base = s->buf;
    s->iov.iov_len = s->len;
    blk_aio_preadv(s->top, &s->acb, s->cursor, &s->iov, 1,
                   stream_read_cb, s);
}

/* Ask the next node of the chain, or skip the range: nobody above the
 * base holds it. */
static void stream_ask_chain(StreamJob *s);

static void stream_chain_status_cb(void *opaque, int ret)
{
    StreamJob *s = opaque;

    if (ret < 0) {
        stream_error(s, "read", ret);
        return;
    }
    s->len = MIN(s->len, MAX(s->status.pnum, 1));
    if (s->status.flags & BDRV_BLOCK_ALLOCATED) {
        stream_copy(s);
        return;
    }
    s->level = stream_backing_of(s->level);
    stream_ask_chain(s);
}

static void stream_ask_chain(StreamJob *s)
{
    uint64_t lsize;

    if (!s->level || s->level == s->base) {
        stream_advance(s, s->len);
        return;
    }
    /*
     * Past the end of a node of the chain the chain reads zeroes (the
     * qcow2 spec: beyond a backing file's size, zeroes).  Without the
     * shorter node the base would show through there: if it is as long,
     * the zeroes are written like data (a guest write won by
     * BDRV_REQ_IF_UNALLOCATED as any copy), from a zeroed buffer: a
     * commit's top may end before the range.
     */
    lsize = blk_getlength(s->level);
    if (s->cursor >= lsize) {
        uint64_t bsize = s->base ? blk_getlength(s->base) : 0;

        if (s->cursor >= bsize) {
            stream_advance(s, s->len);
            return;
        }
        s->len = MIN(s->len, bsize - s->cursor);
        memset(s->buf, 0, s->len);
        s->iov.iov_base = s->buf;
        s->iov.iov_len = s->len;
        stream_read_cb(s, 0);
        return;
    }
    s->len = MIN(s->len, lsize - s->cursor);
    s->phase = STREAM_CHAIN_STATUS;
    blk_aio_block_status(s->level, &s->acb, s->cursor, s->len, &s->status,
                         stream_chain_status_cb, s);
}

static void stream_top_status_cb(void *opaque, int ret)
{
    StreamJob *s = opaque;

    if (ret < 0) {
        stream_error(s, "read", ret);
        return;
    }
    s->len = MIN(s->len, MAX(s->status.pnum, 1));
    if (s->status.flags & BDRV_BLOCK_ALLOCATED) {
        stream_advance(s, s->len);
        return;
    }
    s->level = stream_backing_of(s->top);
    stream_ask_chain(s);
}

static void stream_iterate(StreamJob *s)
{
    Job *job = s->job;

    if (s->phase != STREAM_IDLE || job->completed) {
        return;             /* the completion calls us again */
    }
    if (job->cancelled) {
        job_completed(job, -ECANCELED, NULL);
        return;
    }
    if (job->pause_count || s->waiting) {
        return;
    }
    if (s->cursor >= s->size) {
        job_completed(job, job->ret, NULL);
        return;
    }
    s->len = MIN(STREAM_CHUNK, s->size - s->cursor);
    if (s->commit) {
        /* What the top or a node below it (above the base) holds. */
        s->level = s->top;
        stream_ask_chain(s);
        return;
    }
    s->phase = STREAM_TOP_STATUS;
    blk_aio_block_status(s->top, &s->acb, s->cursor, s->len, &s->status,
                         stream_top_status_cb, s);
}

/* ---- the job driver ------------------------------------------------- */

static void stream_start_cb(Job *job)
{
    stream_iterate(job->opaque);
}

static void stream_kick(Job *job)
{
    StreamJob *s = job->opaque;

    qemu_bh_schedule(s->kick_bh);
}

static void stream_cancel(Job *job, bool force)
{
    stream_kick(job);
}

static void stream_set_speed(Job *job, uint64_t speed)
{
    StreamJob *s = job->opaque;
    struct itimerspec its = { 0 };

    /* The wait for the old speed ends now. */
    if (s->waiting) {
        timerfd_settime(s->timer_fd, 0, &its, NULL);
        s->waiting = false;
    }
    stream_kick(job);
}

static int stream_prepare(Job *job, GError **errp)
{
    StreamJob *s = job->opaque;

    /* Our edge on the top goes first: the caller's quiesce and graph
     * change expect only the top's own users. */
    blk_detach_user(s->user);
    s->user = NULL;
    blk_detach_user(s->target_user);
    s->target_user = NULL;
    /* Read-only before the base joins the top's chain, where nobody
     * writes it; written and flushed first, so a failure fails the job. */
    if (s->base_reopened) {
        if (!blk_reopen(s->base, false, errp)) {
            return -EIO;
        }
        s->base_reopened = false;
    }
    return s->finish(s->opaque, errp) ? 0 : -EIO;
}

static void stream_clean(Job *job)
{
    StreamJob *s = job->opaque;

    blk_detach_user(s->user);
    s->user = NULL;
    blk_detach_user(s->target_user);
    s->target_user = NULL;
    /* Cancelled or failed: the base goes back as it was. */
    if (s->base_reopened) {
        GError *err = NULL;

        s->base_reopened = false;
        if (!blk_reopen(s->base, false, &err)) {
            warn_report("block job '%s': the base stays read-write: %s",
                        s->job->id, err->message);
            g_error_free(err);
        }
    }
    if (s->ended) {
        void (*ended)(void *) = s->ended;

        s->ended = NULL;
        ended(s->opaque);
    }
}

static void stream_free(Job *job)
{
    StreamJob *s = job->opaque;

    stream_clean(job);
    aio_set_fd_handler(s->ctx, s->timer_fd, NULL, NULL, NULL, NULL, NULL);
    close(s->timer_fd);
    qemu_bh_delete(s->kick_bh);
    free(s->buf);
    g_free(s->opaque);
    g_free(s);
}

static const JobDriver stream_job_driver = {
    .type = "stream",
    .start = stream_start_cb,
    .resume = stream_kick,
    .cancel = stream_cancel,
    .set_speed = stream_set_speed,
    .prepare = stream_prepare,
    .clean = stream_clean,
    .free = stream_free,
};

/* A commit below the active node: the same walk. */
static const JobDriver commit_job_driver = {
    .type = "commit",
    .start = stream_start_cb,
    .resume = stream_kick,
    .cancel = stream_cancel,
    .set_speed = stream_set_speed,
    .prepare = stream_prepare,
    .clean = stream_clean,
    .free = stream_free,
};

Job *stream_start(const StreamOptions *o, GError **errp)
{
    g_autofree char *who = g_strdup_printf("block job '%s'", o->job_id);
    StreamJob *s;
    Job *job;

    if (job_get(o->job_id)) {
        g_set_error(errp, VB_ERROR, 0, "Job ID '%s' already in use",
                    o->job_id);
        return NULL;
    }
    s = g_new0(StreamJob, 1);
    s->top = o->top;
    s->base = o->base;
    s->commit = o->commit;
    s->target = o->commit ? o->base : o->top;
    s->base_reopened = o->commit && o->base_reopened;
    s->size = blk_getlength(o->top);
    if (o->commit) {
        /* Past the top's end its overlay reads zeroes, which the base
         * must hold too once it is the overlay's backing file. */
        s->size = MAX(s->size, blk_getlength(o->base));
    }
    s->on_error = o->on_error;
    s->finish = o->finish;
    s->ended = o->ended;
    s->opaque = o->opaque;
    s->ctx = qemu_get_current_aio_context();
    s->timer_fd = -1;
    s->user = blk_attach_user(o->top, who, BLK_PERM_CONSISTENT_READ,
                              BLK_PERM_ALL, errp);
    if (!s->user) {
        goto fail;
    }
    /* Nobody else may write the base while we do. */
    if (o->commit) {
        s->target_user = blk_attach_user(o->base, who, BLK_PERM_WRITE,
                                         BLK_PERM_CONSISTENT_READ |
                                         BLK_PERM_WRITE_UNCHANGED, errp);
        if (!s->target_user) {
            goto fail;
        }
    }
    /* 4 KiB alignment: what O_DIRECT asks of any device. */
    if (posix_memalign(&s->buf, 4096, STREAM_CHUNK)) {
        s->buf = NULL;
        g_set_error(errp, VB_ERROR, 0, "cannot allocate the stream job's "
                    "buffer");
        goto fail;
    }
    s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (s->timer_fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "timerfd: %s", g_strerror(errno));
        goto fail;
    }
    job = job_create(o->job_id, o->commit ? &commit_job_driver :
                     &stream_job_driver, s, o->device,
                     o->auto_finalize, o->auto_dismiss, o->speed, errp);
    if (!job) {
        goto fail;
    }
    s->job = job;
    s->kick_bh = aio_bh_new(s->ctx, stream_kick_bh, s, "stream-kick");
    aio_set_fd_handler(s->ctx, s->timer_fd, stream_timer_cb, NULL, NULL,
                       NULL, s);
    job_progress_set_remaining(job, s->size);
    job_start(job);
    return job;

fail:
    blk_detach_user(s->user);
    blk_detach_user(s->target_user);
    if (s->timer_fd >= 0) {
        close(s->timer_fd);
    }
    free(s->buf);
    g_free(s->opaque);
    g_free(s);
    return NULL;
}
