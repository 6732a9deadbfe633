/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The mirror job: copy a node to another while its users keep writing
 * (QEMU's blockdev-mirror, the ground of live migration with local disks).
 *
 * Theory of operation: a dirty bitmap on the source (block/dirty-bitmap.c)
 * records every write its users make.  sync=full starts with every bit
 * set, so the bulk copy and the copy of later writes are one loop: find
 * the next dirty run of bits, clear it, read the range from the source,
 * write it to the target.  A write landing meanwhile sets its bits again
 * (at submission and at completion), so the range is copied once more,
 * but not before the copy in flight is back: a range has at most one
 * copy in flight (MirrorJob.busy), or an older read could land on the
 * target after a newer one.  When a pass finds nothing dirty and none of
 * our copies is in flight, the target holds what the source did: after a
 * flush of the target the job is ready (QEMU's rule: a write of the users
 * still in flight dirties its range again when it completes, and the
 * job goes on copying while ready).  The first pass
 * asks the source what each range holds (block status) and writes the
 * ranges that read as zeroes as zeroes (holes with unmap=true) instead of
 * copying them: a sparse disk does not send its emptiness.  It then goes on
 * copying what is written (polling the bitmap every MIRROR_IDLE_NS, since
 * the write path only sets bits and wakes nobody) until it is cancelled:
 * block-job-cancel on a ready job (a soft cancel) converges once more,
 * flushes the target and ends as a success, the target a consistent copy;
 * a forced cancel (job-cancel, force=true) stops at once.
 *
 * copy-mode=write-blocking (QEMU's active mirroring): a write of the
 * users that completed on the source goes to the target from the thread
 * that completed it, and the request finishes only then, its whole
 * granules clean (block/dirty-bitmap.c does it with the job's
 * preallocated slots and mirror_active_submit()).  The users then pay
 * the target's latency, and the job converges at any write rate.  The
 * busy bits are shared with those writes (atomic), so a range still has
 * at most one copy in flight; a write that finds its range busy, or no
 * free slot, is marked dirty as in background mode.  A failed target
 * write leaves its range dirty and turns the mode off: the job meets
 * the error itself.  Every end stops the mode first and waits for the
 * writes in flight.
 *
 * job-complete on a ready job pivots: the source's users (the exports,
 * through the caller's callbacks) are quiesced at once, the copy goes on
 * until it has caught up with none of their writes in flight, the target
 * is flushed, the users are moved to the target and let go on.  The
 * guest waits only for that last pass, which follows a converged state.
 *
 * Requests are issued from the main thread (its AioContext; a node's
 * driver keeps per-context state, so this runs beside the exports'
 * iothreads) with control blocks and buffers allocated when the job
 * starts: at most buf-size bytes in flight, in operations of at most
 * MIRROR_MAX_OP bytes, of which at most MIRROR_MAX_READ_BYTES are being
 * read from the source (its users' requests queue beside them).  The speed limit counts bytes per 100 ms slice;
 * over it, the next operation waits for the slice's end on a timerfd,
 * the same one that wakes the idle polling.
 *
 * Threads: main thread, but for the write-blocking callbacks
 * (mirror_active_*()), which run in the threads of the users' writes.
 */
#include "qemu/osdep.h"
#include <sys/timerfd.h>
#include "qemu/aio.h"
#include "block/block_int.h"
#include "block/dirty-bitmap.h"
#include "block/job.h"
#include "block/engine.h"

/*
 * The dirty granularity when the user gives none
 * (mirror_default_granularity()): the target's cluster size if it has
 * one, else 4 KiB, raised only as far as keeps the bitmap within
 * MIRROR_MAX_BITMAP_BYTES (4 KiB up to 256 GiB), and not past 64 KiB
 * unless the cluster is larger.  QEMU's default is 64 KiB (or the
 * cluster size); ours is smaller because a guest writing 4 KiB at random
 * re-dirties a whole granule per write: at 5000 writes/s, 64 KiB granules
 * ask for up to 312 MiB/s of copy again, more than an NBD+TLS link
 * carries (~200 MiB/s), and the job never becomes ready; 4 KiB granules
 * ask for 20 MiB/s.  The copy does not get slower for it: a run of dirty
 * granules goes out as one operation of up to MIRROR_MAX_OP bytes, the
 * bitmap is scanned and taken a word (64 granules) at a time, and a
 * write still marks it with one atomic OR per word it touches.  A
 * qcow2 target keeps its cluster size: a partial cluster written there
 * costs a copy-on-write of the rest.
 */
#define MIRROR_MIN_GRANULARITY      (4u << 10)
#define MIRROR_DEFAULT_GRANULARITY  (64u << 10)     /* the cap, as QEMU */
#define MIRROR_MAX_BITMAP_BYTES     (8u << 20)
#define MIRROR_MAX_OP               (1u << 20)
#define MIRROR_SLICE_NS             100000000ull     /* speed accounting */
#define MIRROR_IDLE_NS              10000000ull      /* ready: bitmap poll */
/*
 * Bytes of the source the copy reads at a time.  The source's users
 * share its device queue with these reads: a guest's 4 KiB write queued
 * behind 16 MiB of them (the default buf-size, and a scheduler such as
 * mq-deadline serves reads first) waited tens of ms each and hundreds
 * once its queue filled.  The writes to the target (the slow side over
 * a network) still fill buf-size; only the source's side is bounded.
 */
#define MIRROR_MAX_READ_BYTES       (2u << 20)
/*
 * Small operations, for granules below MIRROR_SMALL_OP_BYTES: once the
 * bulk copy is done, a guest writing 4 KiB at random leaves single
 * dirty granules, each one operation (a read of the source, a write
 * to the target: two round trips).  With only buf-size / 1 MiB = 16
 * operations out, the copy caught up with at most 16 / (round trip)
 * writes per second, fewer than 5000 once the source's device queue
 * or an NBD+TLS link took a few ms.  So buf-size is split: up to
 * MIRROR_SMALL_OPS operations of MIRROR_SMALL_OP_BYTES (4 MiB of the
 * default 16 MiB), taken by runs that fit, and 1 MiB ones for the rest.
 */
#define MIRROR_SMALL_OP_BYTES       (64u << 10)
#define MIRROR_SMALL_OPS            64u
/*
 * Guest first: while the source's users are busy (they submitted a
 * request in the last MIRROR_BUSY_HOLD_NS), the copy keeps at most
 * MIRROR_BUSY_OPS large operations' worth of bytes in flight (one
 * 1 MiB range read, then written, then the next); when they are idle,
 * buf-size again.  Their requests share the source's device (and, with
 * a target on the same machine, the target's writes) with ours: 16 MiB
 * of our copy in flight put a 4 KiB read of theirs behind it, and a
 * randread client ran at 0.7x of what it did beside
 * qemu-storage-daemon's slower copy.  An A/B (1 GiB over NBD on
 * loopback, randread client at depth 32): the client's IOPS during the
 * copy 2.0x of the old code's with one operation, 1.3x with two.  One
 * still copies 1 MiB per round trip (~300 MiB/s on the local disk
 * here), far above the 20 MiB/s a guest dirties writing 4 KiB at 5000
 * IOPS, and small operations (single dirty granules once the bulk pass
 * is over) fit in it by the dozen, so the job still converges.  The
 * hold keeps a client that pauses between bursts (a think time) from
 * getting the full copy in each of its pauses.
 */
#define MIRROR_BUSY_OPS             1u
#define MIRROR_BUSY_HOLD_NS         100000000ull
/*
 * The cap's floor: whatever the round trip, a capped copy starts at
 * least this many bytes per second of the time it has something in
 * flight (over windows of MIRROR_SLICE_NS), or it goes past the cap
 * until it has.  Over NBD with TLS one 1 MiB operation at a time took
 * 20-45 s to copy 1 GiB beside a guest writing 4 KiB at 5000 IOPS (20
 * MiB/s of dirtying): 4 GiB would not be ready within a minute.
 * 128 MiB/s copies 4 GiB in ~ 32 s; a local copy under the cap runs
 * faster than that and never meets it.
 */
#define MIRROR_BUSY_FLOOR           (128ull << 20)

typedef struct MirrorJob MirrorJob;

typedef struct MirrorOp {
    MirrorJob *s;
    BlockAIOCB acb;
    struct iovec iov;
    uint64_t offset;
    uint64_t bytes;
    void *buf;
    BlockStatus status;         /* the bulk pass asks what it copies */
    bool small;                 /* a MIRROR_SMALL_OP_BYTES buffer */
    struct MirrorOp *next_free;
} MirrorOp;

struct MirrorJob {
    Job *job;
    BlockBackend *src;
    BlockBackend *target;
    BdrvChild *src_user;
    BdrvChild *target_user;
    BdrvDirtyBitmap *bm;
    AioContext *ctx;
    uint64_t op_max;            /* bytes of one operation */
    uint64_t small_max;         /* bytes of a small one; 0: none */
    unsigned int n_ops;
    unsigned int n_small;       /* the first n_small of @ops */
    MirrorOp *ops;
    MirrorOp *free_ops;
    MirrorOp *free_small;
    unsigned int in_flight;
    uint64_t bytes_in_flight;
    uint64_t read_bytes;        /* of them, reading the source */
    uint64_t max_read_bytes;
    uint64_t cursor;            /* next bit to look at */
    uint64_t progress_ns;       /* when the bitmap was last counted */
    bool bulk;                  /* first pass: skip what reads as zeroes */
    bool unmap;                 /* zeroes may be holes on the target */
    JobErrorAction on_source_error;
    JobErrorAction on_target_error;
    bool flushing;              /* the target's flush is in flight */
    BlockAIOCB flush_acb;
    int error;                  /* first error of an action=report */
    char *error_msg;
    bool ending;                /* converged for good: flushing to end */
    bool should_complete;       /* job-complete: pivot at the end */
    bool quiesced;              /* the users are held by @quiesce */
    void (*quiesce)(void *opaque, bool on);
    bool (*pivot_check)(void *opaque, GError **errp);
    bool (*pivot)(void *opaque, GError **errp);
    void (*ended)(void *opaque, bool pivoted);  /* once, at the clean */
    bool pivoted;
    void *pivot_opaque;
    /* The timer: speed slices and idle polling. */
    int timer_fd;
    bool timer_armed;
    uint64_t slice_start;
    uint64_t slice_bytes;
    QEMUBH *kick_bh;
    /* Guest first (MIRROR_BUSY_OPS): the source's request count minus
     * our own reads when last looked at, and when it last grew. */
    uint64_t own_requests;      /* our reads submitted to the source */
    uint64_t users_seen;
    uint64_t users_active_ns;
    bool users_busy;
    /* The floor (MIRROR_BUSY_FLOOR): bytes started in the window, and
     * the time of it with operations in flight. */
    uint64_t floor_bytes;
    uint64_t floor_ns;
    uint64_t floor_last;        /* when the window was last advanced */
    /* copy-mode=write-blocking: the users' writes go to the target too
     * (block/dirty-bitmap.c); published while @active. */
    BdrvActiveMirror *am;
    bool active;
};

#define MIRROR_ACTIVE_SLOTS 128     /* users' writes copied at a time */

static void mirror_iterate(MirrorJob *s);

/*
 * Are the source's users busy?  BlockBackend.user_requests counts every
 * request submitted to the node while it has a bitmap, ours too (we
 * subtract those); it may lose a count to a race, so only its growth
 * means anything: any growth since the last look makes them busy for
 * MIRROR_BUSY_HOLD_NS.  One relaxed load per call, never on their path.
 */
static void mirror_users_update(MirrorJob *s, uint64_t now)
{
    uint64_t users;

    if (s->quiesced) {
        /* Held users (a completion's last pass) wait for the copy: it
         * goes flat out. */
        s->users_busy = false;
        return;
    }
    /* The floor's window advances only with operations in flight: an
     * idle poll of the bitmap is no time the copy could have used. */
    if (s->in_flight) {
        s->floor_ns += now - s->floor_last;
    }
    s->floor_last = now;
    if (s->floor_ns >= MIRROR_SLICE_NS) {
        s->floor_ns = 0;
        s->floor_bytes = 0;
    }
    users = __atomic_load_n(&s->src->user_requests, __ATOMIC_RELAXED) -
            s->own_requests;
    if ((int64_t)(users - s->users_seen) > 0) {
        s->users_active_ns = now;
        s->users_busy = true;
    } else if (s->users_busy &&
               now - s->users_active_ns >= MIRROR_BUSY_HOLD_NS) {
        s->users_busy = false;
    }
    s->users_seen = users;
}

/* Behind the floor: the cap does not hold (see MIRROR_BUSY_FLOOR). */
static bool mirror_below_floor(MirrorJob *s)
{
    return s->floor_bytes < MIRROR_BUSY_FLOOR * s->floor_ns / 1000000000ull;
}

static bool mirror_room(MirrorJob *s, uint64_t bytes)
{
    if (s->users_busy && !mirror_below_floor(s)) {
        /* The cap counts every byte in flight, those being read too
         * (read_bytes <= bytes_in_flight). */
        return s->bytes_in_flight + bytes <= MIRROR_BUSY_OPS * s->op_max;
    }
    return s->read_bytes + bytes <= s->max_read_bytes;
}

/*
 * A small operation to take?  Not in the bulk pass: everything is dirty
 * there, and small ones would cut its 1 MiB runs into 64 KiB pieces
 * whenever the large ones are all out (an A/B with them in the bulk
 * pass measured its idle copy at 0.54x and 0.58x of the old code's).
 */
static bool mirror_small_free(MirrorJob *s)
{
    return s->free_small && !s->bulk;
}

static void mirror_put_op(MirrorJob *s, MirrorOp *op)
{
    MirrorOp **list = op->small ? &s->free_small : &s->free_ops;

    op->next_free = *list;
    *list = op;
}
static void mirror_do_pivot(MirrorJob *s);
static void mirror_read_cb(void *opaque, int ret);

static uint64_t mirror_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void mirror_arm(MirrorJob *s, uint64_t ns)
{
    struct itimerspec its = {
        .it_value.tv_sec = ns / 1000000000ull,
        .it_value.tv_nsec = ns % 1000000000ull,
    };

    if (s->timer_armed) {
        return;
    }
    if (!its.it_value.tv_sec && !its.it_value.tv_nsec) {
        its.it_value.tv_nsec = 1;
    }
    s->timer_armed = timerfd_settime(s->timer_fd, 0, &its, NULL) == 0;
    if (!s->timer_armed) {
        /* Cannot happen with a valid fd and time; go on at once rather
         * than stall. */
        qemu_bh_schedule(s->kick_bh);
    }
}

static void mirror_timer_cb(void *opaque)
{
    MirrorJob *s = opaque;
    uint64_t n;

    if (read(s->timer_fd, &n, sizeof(n)) < 0) {
        /* EAGAIN: not expired after all; the handler runs again. */
        return;
    }
    s->timer_armed = false;
    mirror_iterate(s);
}

static void mirror_kick_bh(void *opaque)
{
    mirror_iterate(opaque);
}

/* ---- copy-mode=write-blocking ----------------------------------------- */

/* The thread that completed a user's write: the target's turn. */
static void mirror_active_cb(void *opaque, int ret)
{
    BdrvActiveWrite *w = opaque;
    BlockAIOCB *guest = w->guest;
    int guest_ret = w->guest_ret;

    bdrv_dirty_active_finish(w, ret);
    /* The source has it: the user's write succeeded whatever the
     * target said (a failure leaves the range dirty for the job). */
    blk_acb_finish(guest, guest_ret);
}

static void mirror_active_submit(BdrvActiveWrite *w)
{
    MirrorJob *s = w->am->opaque;
    BlockAIOCB *g = w->guest;

    if (g->type == BLK_REQ_WRITE_ZEROES) {
        blk_aio_pwrite_zeroes(s->target, &w->acb, g->offset, g->bytes,
                              g->flags & BDRV_REQ_MAY_UNMAP,
                              mirror_active_cb, w);
    } else {
        blk_aio_pwritev(s->target, &w->acb, g->offset, g->iov, g->niov, 0,
                        mirror_active_cb, w);
    }
}

/* Main thread: no more writes of the users go to the target; those in
 * flight still finish (count: s->am->in_flight). */
static void mirror_active_stop(MirrorJob *s)
{
    if (s->active) {
        s->active = false;
        bdrv_dirty_bitmap_set_active(s->bm, NULL);
    }
}

static bool mirror_active_busy(MirrorJob *s)
{
    return s->am && __atomic_load_n(&s->am->in_flight, __ATOMIC_ACQUIRE);
}

static void mirror_active_free(MirrorJob *s)
{
    if (s->am) {
        g_assert(!s->active && !mirror_active_busy(s));
        g_free(s->am->slots);
        g_free(s->am->slot_used);
        g_free(s->am);
        s->am = NULL;
    }
}

static const char *mirror_err_text(int ret)
{
    return g_strerror(-ret);
}

/*
 * An I/O error on @op (@is_read: of the source).  The range is dirty
 * again whatever the action: stop and ignore copy it later.
 */
static void mirror_op_error(MirrorJob *s, MirrorOp *op, bool is_read, int ret)
{
    JobErrorAction action = is_read ? s->on_source_error :
                                      s->on_target_error;

    bdrv_dirty_bitmap_set(s->bm, op->offset, op->bytes);
    if (action == JOB_ERROR_REPORT && !s->error) {
        s->error = ret;
        s->error_msg = g_strdup(mirror_err_text(ret));
    }
    job_report_error(s->job, is_read ? "read" : "write", action);
}

static void mirror_op_done(MirrorJob *s, MirrorOp *op)
{
    s->in_flight--;
    s->bytes_in_flight -= op->bytes;
    bdrv_dirty_bitmap_release_busy(s->bm, op->offset, op->bytes);
    mirror_put_op(s, op);
    mirror_iterate(s);
}

static void mirror_write_cb(void *opaque, int ret)
{
    MirrorOp *op = opaque;
    MirrorJob *s = op->s;

    if (ret < 0) {
        mirror_op_error(s, op, false, ret);
    } else {
        job_progress_update(s->job, op->bytes);
    }
    mirror_op_done(s, op);
}

static void mirror_read_cb(void *opaque, int ret)
{
    MirrorOp *op = opaque;
    MirrorJob *s = op->s;

    s->read_bytes -= op->bytes;
    if (ret < 0) {
        mirror_op_error(s, op, true, ret);
        mirror_op_done(s, op);
        return;
    }
    op->iov.iov_base = op->buf;
    op->iov.iov_len = op->bytes;
    blk_aio_pwritev(s->target, &op->acb, op->offset, &op->iov, 1, 0,
                    mirror_write_cb, op);
    /* Room to read the next range while this one goes to the target. */
    mirror_iterate(s);
}

/* Read the source's range of @op, then write it to the target. */
static void mirror_op_read(MirrorJob *s, MirrorOp *op)
{
    s->own_requests++;
    op->iov.iov_base = op->buf;
    op->iov.iov_len = op->bytes;
    blk_aio_preadv(s->src, &op->acb, op->offset, &op->iov, 1,
                   mirror_read_cb, op);
}

/*
 * The bulk pass: what the range holds.  Zeroes (a hole, an unallocated
 * range) are written as zeroes, without reading them or sending a
 * buffer of them; a shorter zero answer shrinks the operation to it
 * (whole dirty bits) and leaves the rest dirty for the next operation.
 * If the source writes there meanwhile, its bits are set again and the
 * range is copied once more.
 */
static void mirror_status_cb(void *opaque, int ret)
{
    MirrorOp *op = opaque;
    MirrorJob *s = op->s;
    uint64_t gran = bdrv_dirty_bitmap_granularity(s->bm);
    uint64_t n;

    if (ret < 0 || !(op->status.flags & BDRV_BLOCK_ZERO) ||
        op->status.pnum < MIN(gran, op->bytes)) {
        /* Data, or no useful answer: copy it. */
        mirror_op_read(s, op);
        return;
    }
    s->read_bytes -= op->bytes;
    n = op->status.pnum >= op->bytes ? op->bytes :
        op->status.pnum / gran * gran;
    if (n < op->bytes) {
        bdrv_dirty_bitmap_release_busy(s->bm, op->offset + n,
                                       op->bytes - n);
        bdrv_dirty_bitmap_set(s->bm, op->offset + n, op->bytes - n);
        s->bytes_in_flight -= op->bytes - n;
        op->bytes = n;
    }
    if (blk_can_write_zeroes(s->target)) {
        blk_aio_pwrite_zeroes(s->target, &op->acb, op->offset, op->bytes,
                              s->unmap ? BDRV_REQ_MAY_UNMAP : 0,
                              mirror_write_cb, op);
    } else {
        memset(op->buf, 0, op->bytes);
        op->iov.iov_base = op->buf;
        op->iov.iov_len = op->bytes;
        blk_aio_pwritev(s->target, &op->acb, op->offset, &op->iov, 1, 0,
                        mirror_write_cb, op);
    }
    /* Nothing read: the next range may start. */
    mirror_iterate(s);
}

/*
 * Start copying the dirty run at @bit, up to the first bit whose range
 * is being copied already; false if @bit itself is (it stays dirty: the
 * completion of that copy looks again).
 */
static bool mirror_start_op(MirrorJob *s, int64_t bit)
{
    uint64_t gran = bdrv_dirty_bitmap_granularity(s->bm);
    uint64_t size = blk_getlength(s->src);
    uint64_t max_bits = s->op_max / gran;
    uint64_t small_bits = s->small_max / gran;
    /* A large one only while the read bound allows a whole one. */
    bool large = s->free_ops && mirror_room(s, s->op_max);
    bool small = mirror_small_free(s) && mirror_room(s, s->small_max);
    MirrorOp *op;
    uint64_t n;

    /* Busy first, then clean: an active write of the users (another
     * thread) takes the busy bits the same way.  A word at a time: at
     * 4 KiB granules a 1 MiB run is 256 bits.  A run that fits goes to
     * a small operation; one that does not is taken on into a large
     * one if there is one (it continues where the first take ended). */
    if (small) {
        n = bdrv_dirty_bitmap_take_run(s->bm, bit, small_bits);
        if (n == small_bits && large) {
            n += bdrv_dirty_bitmap_take_run(s->bm, bit + n, max_bits - n);
        }
    } else if (large) {
        n = bdrv_dirty_bitmap_take_run(s->bm, bit, max_bits);
    } else {
        return false;
    }
    if (!n) {
        return false;
    }
    if (n > small_bits) {
        op = s->free_ops;
        s->free_ops = op->next_free;
    } else {
        op = small ? s->free_small : s->free_ops;
        if (small) {
            s->free_small = op->next_free;
        } else {
            s->free_ops = op->next_free;
        }
    }
    op->offset = (uint64_t)bit * gran;
    op->bytes = MIN(n * gran, size - MIN(size, op->offset));
    if (!op->bytes) {
        /* The bitmap outlives a shrink that cannot happen (shrinking is
         * refused); nothing to copy there. */
        bdrv_dirty_bitmap_release_busy(s->bm, op->offset, n * gran);
        mirror_put_op(s, op);
        return true;
    }
    s->in_flight++;
    s->bytes_in_flight += op->bytes;
    s->read_bytes += op->bytes;
    s->slice_bytes += op->bytes;
    s->floor_bytes += op->bytes;
    if (s->bulk) {
        blk_aio_block_status(s->src, &op->acb, op->offset, op->bytes,
                             &op->status, mirror_status_cb, op);
    } else {
        mirror_op_read(s, op);
    }
    return true;
}

/*
 * Over the speed limit?  Then arm the timer for when it is not.  An
 * operation may overshoot the slice's quota (it copies a whole run); the
 * excess is a debt the next slices pay off, so the rate over time is the
 * limit even when it is below one operation per slice.
 */
static bool mirror_throttled(MirrorJob *s)
{
    uint64_t now, quota, speed = s->job->speed;
    double wait_ns;

    if (!speed) {
        return false;
    }
    now = mirror_now();
    if (now - s->slice_start >= MIRROR_SLICE_NS) {
        double allowed = (double)speed * (now - s->slice_start) / 1e9;

        s->slice_bytes = s->slice_bytes > allowed ?
                         s->slice_bytes - (uint64_t)allowed : 0;
        s->slice_start = now;
    }
    quota = MAX(speed / (1000000000ull / MIRROR_SLICE_NS), 1);
    if (s->slice_bytes < quota) {
        return false;
    }
    /* The rest of this slice, and the time the debt takes.  At most a
     * second: the timer looks again then (set-speed kicks at once). */
    wait_ns = (double)(s->slice_start + MIRROR_SLICE_NS - now) +
              (double)(s->slice_bytes - quota) * 1e9 / speed;
    mirror_arm(s, MIN(wait_ns, 1e9));
    return true;
}

static void mirror_unquiesce(MirrorJob *s)
{
    if (s->quiesced) {
        s->quiesced = false;
        s->quiesce(s->pivot_opaque, false);
    }
}

/* Converged with the users held, target flushed: move them over. */
static void mirror_do_pivot(MirrorJob *s)
{
    GError *err = NULL;
    bool ok;

    /* Our own edge goes first: the users' would conflict with it. */
    blk_detach_user(s->target_user);
    s->target_user = NULL;
    ok = s->pivot(s->pivot_opaque, &err);
    mirror_unquiesce(s);
    if (!ok) {
        char *msg = g_strdup_printf("cannot move the users to the target: "
                                    "%s", err->message);

        g_error_free(err);
        job_completed(s->job, -EIO, msg);
        return;
    }
    s->pivoted = true;
    job_completed(s->job, 0, NULL);
}

static void mirror_flush_cb(void *opaque, int ret)
{
    MirrorJob *s = opaque;

    s->flushing = false;
    if (s->job->cancelled) {
        /* Forced cancel meanwhile: neither ready nor a pivot. */
        mirror_iterate(s);
        return;
    }
    if (ret < 0) {
        if (s->on_target_error == JOB_ERROR_REPORT && !s->error) {
            s->error = ret;
            s->error_msg = g_strdup(mirror_err_text(ret));
        }
        job_report_error(s->job, "write", s->on_target_error);
        s->ending = false;
        mirror_iterate(s);
        return;
    }
    if (s->ending && s->should_complete) {
        mirror_do_pivot(s);
        return;
    }
    if (s->ending) {
        /* Converged and durable: the end of a soft cancel. */
        job_completed(s->job, 0, NULL);
        return;
    }
    job_transition_to_ready(s->job);
    mirror_iterate(s);
}

/*
 * Nothing dirty and none of our copies in flight?  That is QEMU's rule
 * for ready: a write of the users still in flight set its bits when it
 * was submitted and sets them again when it completes, so it is copied
 * later; waiting for a moment with none in flight would never come with
 * a guest that keeps writing.  To end (@ending: a soft cancel, or a
 * completion whose users are held) the users' writes must be back as
 * well, or the last of them would be missing on the target.
 */
static bool mirror_converged(MirrorJob *s, bool ending)
{
    /* The count first: a write that completed set its bits before it
     * counted down (release/acquire), so the scan below sees them. */
    return s->in_flight == 0 &&
           (!ending || bdrv_dirty_writes_in_flight(s->src) == 0) &&
           bdrv_dirty_bitmap_next(s->bm, 0) < 0;
}

/*
 * What is left, for query-jobs: a count of the whole bitmap, so at most
 * once per MIRROR_SLICE_NS (at 4 KiB granules a 256 GiB disk has 1 Mi
 * words, and this runs at every completion), or sooner when what was
 * copied has gone past the last count.  @converged: nothing is left.
 */
static void mirror_progress(MirrorJob *s, bool converged)
{
    uint64_t now;

    if (converged) {
        job_progress_set_remaining(s->job, 0);
        return;
    }
    now = mirror_now();
    if (now - s->progress_ns < MIRROR_SLICE_NS &&
        s->job->progress_current <= s->job->progress_total) {
        return;
    }
    s->progress_ns = now;
    job_progress_set_remaining(s->job, bdrv_dirty_bitmap_dirty_bytes(s->bm) +
                                       s->bytes_in_flight);
}

static void mirror_iterate(MirrorJob *s)
{
    Job *job = s->job;
    bool wrapped = false;
    bool ending;

    if (s->flushing || job->completed) {
        return;
    }
    if (job->cancelled || s->error) {
        /* Forced cancel or an error to report: stop when our requests
         * are back; the users go on on the source. */
        mirror_unquiesce(s);
        mirror_active_stop(s);
        if (s->in_flight == 0 && !mirror_active_busy(s)) {
            job_completed(job, s->error ? s->error : -ECANCELED,
                          g_steal_pointer(&s->error_msg));
        } else if (s->in_flight == 0) {
            /* Users' writes to the target are finishing in their
             * threads, which wake nobody here: look again shortly. */
            mirror_arm(s, MIRROR_IDLE_NS);
        }
        return;
    }
    if (s->active && __atomic_load_n(&s->am->failed, __ATOMIC_RELAXED)) {
        /* The target failed a user's write: stop making the users wait
         * for it.  The job copies the range and meets the error itself,
         * and on-target-error decides. */
        mirror_active_stop(s);
    }
    if (job->pause_count) {
        return;
    }
    mirror_progress(s, false);
    mirror_users_update(s, mirror_now());
    /* An operation reads up to op_max bytes (a small one small_max):
     * start one only if even that stays within the read limit (never
     * less than op_max) and, while the users are busy, the guest-first
     * cap; mirror_start_op() picks which. */
    while (((s->free_ops && mirror_room(s, s->op_max)) ||
            (mirror_small_free(s) && mirror_room(s, s->small_max))) &&
           !mirror_throttled(s)) {
        int64_t bit = bdrv_dirty_bitmap_next(s->bm, s->cursor);

        if (bit < 0) {
            if (!s->cursor || wrapped) {
                break;
            }
            /* Wrapped: the bulk pass is over, what is dirty now was
             * written by the source's users.  Once per call: the dirty
             * bits left may all be busy. */
            s->bulk = false;
            s->cursor = 0;
            wrapped = true;
            continue;
        }
        /* Started, or busy (copied again when its copy is back): go on
         * with the next run either way. */
        mirror_start_op(s, bit);
        s->cursor = bit + 1;
    }
    if (s->in_flight) {
        return;             /* the completions call us again */
    }
    ending = job->soft_cancelled || s->should_complete;
    if (ending) {
        /* The last pass is the job's own: writes of the users that went
         * to the target are counted as in flight until they are back. */
        mirror_active_stop(s);
    }
    if (mirror_converged(s, ending)) {
        mirror_progress(s, true);
        if (ending || !job->ready_seen) {
            /* Make what we wrote durable before saying ready, and before
             * ending (a soft cancel, or a completion whose users are
             * held: nothing can dirty the source any more). */
            s->ending = ending;
            s->flushing = true;
            blk_aio_flush(s->target, &s->flush_acb, mirror_flush_cb, s);
            return;
        }
    }
    /* Dirty bits are left only while the speed limit holds us (the timer
     * is armed then) or writes of the users are in flight: look again
     * shortly either way. */
    mirror_arm(s, MIRROR_IDLE_NS);
}

/* ---- the job driver ----------------------------------------------------- */

static void mirror_start_cb(Job *job)
{
    MirrorJob *s = job->opaque;

    s->slice_start = mirror_now();
    mirror_iterate(s);
}

/* A paused job must not hold the users: a completion in progress lets
 * them go on until the job resumes. */
static void mirror_pause(Job *job)
{
    mirror_unquiesce(job->opaque);
}

static void mirror_resume(Job *job)
{
    MirrorJob *s = job->opaque;

    if (s->should_complete && !s->quiesced) {
        s->quiesced = true;
        s->quiesce(s->pivot_opaque, true);
    }
    /* A stop on error cleared the report error it would have had. */
    qemu_bh_schedule(s->kick_bh);
}

static void mirror_cancel(Job *job, bool force)
{
    MirrorJob *s = job->opaque;

    /* Paused or idle, it may be waiting for nothing: look now. */
    qemu_bh_schedule(s->kick_bh);
}

static void mirror_set_speed(Job *job, uint64_t speed)
{
    MirrorJob *s = job->opaque;

    s->slice_start = mirror_now();
    s->slice_bytes = 0;
    qemu_bh_schedule(s->kick_bh);
}

static bool mirror_complete(Job *job, GError **errp)
{
    MirrorJob *s = job->opaque;

    if (!s->pivot) {
        g_set_error(errp, VB_ERROR, 0, "Job '%s': this mirror cannot move "
                    "its source's users to the target; use "
                    "block-job-cancel to end it with the target a "
                    "consistent copy", job->id);
        return false;
    }
    if (s->should_complete) {
        g_set_error(errp, VB_ERROR, 0, "Job '%s' is being completed "
                    "already", job->id);
        return false;
    }
    if (s->pivot_check && !s->pivot_check(s->pivot_opaque, errp)) {
        return false;
    }
    s->should_complete = true;
    /* From now on the users submit nothing: the copy catches up with
     * what they wrote before, and nothing dirties the source again. */
    s->quiesced = true;
    s->quiesce(s->pivot_opaque, true);
    qemu_bh_schedule(s->kick_bh);
    return true;
}

/* The end, whatever it was: the source's writes are not tracked any more
 * and the nodes are free for others. */
static void mirror_clean(Job *job)
{
    MirrorJob *s = job->opaque;

    /* Every end waited for the users' writes to the target. */
    mirror_active_stop(s);
    g_assert(!mirror_active_busy(s));
    mirror_unquiesce(s);
    if (s->bm) {
        bdrv_dirty_bitmap_release(s->src, s->bm);
        s->bm = NULL;
    }
    blk_detach_user(s->src_user);
    s->src_user = NULL;
    blk_detach_user(s->target_user);
    s->target_user = NULL;
    if (s->ended) {
        void (*ended)(void *, bool) = s->ended;

        s->ended = NULL;
        ended(s->pivot_opaque, s->pivoted);
    }
}

static void mirror_free(Job *job)
{
    MirrorJob *s = job->opaque;

    mirror_clean(job);
    aio_set_fd_handler(s->ctx, s->timer_fd, NULL, NULL, NULL, NULL, NULL);
    close(s->timer_fd);
    qemu_bh_delete(s->kick_bh);
    for (unsigned int i = 0; s->ops && i < s->n_ops; i++) {
        free(s->ops[i].buf);
    }
    g_free(s->ops);
    mirror_active_free(s);
    g_free(s->error_msg);
    g_free(s->pivot_opaque);
    g_free(s);
}

static const JobDriver mirror_job_driver = {
    .type = "mirror",
    .start = mirror_start_cb,
    .pause = mirror_pause,
    .resume = mirror_resume,
    .cancel = mirror_cancel,
    .set_speed = mirror_set_speed,
    .complete = mirror_complete,
    .clean = mirror_clean,
    .free = mirror_free,
};

/* An active block-commit: a mirror into the base, of QEMU's type. */
static const JobDriver commit_active_job_driver = {
    .type = "commit",
    .start = mirror_start_cb,
    .pause = mirror_pause,
    .resume = mirror_resume,
    .cancel = mirror_cancel,
    .set_speed = mirror_set_speed,
    .complete = mirror_complete,
    .clean = mirror_clean,
    .free = mirror_free,
};

uint32_t mirror_default_granularity(uint64_t size, uint32_t cluster_size)
{
    uint32_t gran = MIRROR_MIN_GRANULARITY;
    uint32_t cap = MIRROR_DEFAULT_GRANULARITY;

    /* A driver's odd answer (not a power of two, out of the bitmap's
     * range) is no cluster size at all. */
    if (cluster_size >= BDRV_DIRTY_GRANULARITY_MIN &&
        cluster_size <= BDRV_DIRTY_GRANULARITY_MAX &&
        !(cluster_size & (cluster_size - 1))) {
        gran = cluster_size;
        cap = MAX(cap, cluster_size);
    }
    while (gran < cap && size / gran + !!(size % gran) >
                         (uint64_t)MIRROR_MAX_BITMAP_BYTES * 8) {
        gran <<= 1;
    }
    return gran;
}

Job *mirror_start(const MirrorOptions *o, GError **errp)
{
    g_autofree char *who = g_strdup_printf("block job '%s'", o->job_id);
    uint64_t size = blk_getlength(o->source);
    uint64_t buf_size = o->buf_size ? o->buf_size : MIRROR_DEFAULT_BUF_SIZE;
    uint32_t gran = o->granularity;
    MirrorJob *s;
    Job *job;

    if (o->source == o->target) {
        g_set_error(errp, VB_ERROR, 0, "Can't mirror node into itself");
        return NULL;
    }
    if (size != blk_getlength(o->target)) {
        g_set_error(errp, VB_ERROR, 0, "Source and target image have "
                    "different sizes (%" PRIu64 " and %" PRIu64 " bytes): "
                    "create the target with the source's size",
                    size, blk_getlength(o->target));
        return NULL;
    }
    if (!gran) {
        BlockDriverInfo bdi;

        blk_get_info(o->target, &bdi);
        gran = mirror_default_granularity(size, bdi.cluster_size);
    }
    if (buf_size > MIRROR_MAX_BUF_SIZE) {
        g_set_error(errp, VB_ERROR, 0, "Parameter 'buf-size' must be at "
                    "most 1 GiB");
        return NULL;
    }
    if (buf_size < gran) {
        g_set_error(errp, VB_ERROR, 0, "Parameter 'buf-size' must be at "
                    "least the granularity (%u bytes)", gran);
        return NULL;
    }
    if (job_get(o->job_id)) {
        g_set_error(errp, VB_ERROR, 0, "Job ID '%s' already in use",
                    o->job_id);
        return NULL;
    }
    s = g_new0(MirrorJob, 1);
    s->src = o->source;
    s->target = o->target;
    s->ctx = qemu_get_current_aio_context();
    s->on_source_error = o->on_source_error;
    s->on_target_error = o->on_target_error;
    s->quiesce = o->quiesce;
    s->pivot_check = o->pivot_check;
    s->pivot = o->pivot;
    s->pivot_opaque = o->pivot_opaque;
    s->ended = o->ended;
    s->timer_fd = -1;
    s->src_user = blk_attach_user(o->source, who, BLK_PERM_CONSISTENT_READ,
                                  BLK_PERM_ALL, errp);
    if (!s->src_user) {
        goto fail;
    }
    /* Nobody else may write the target: our copy would be torn. */
    s->target_user = blk_attach_user(o->target, who,
                                     BLK_PERM_WRITE | BLK_PERM_RESIZE,
                                     BLK_PERM_WRITE_UNCHANGED |
                                     (o->commit ? BLK_PERM_CONSISTENT_READ :
                                      0), errp);
    if (!s->target_user) {
        goto fail;
    }
    s->bm = bdrv_dirty_bitmap_create(o->source, gran, errp);
    if (!s->bm) {
        goto fail;
    }
    if (o->sync != MIRROR_SYNC_NONE) {
        bdrv_dirty_bitmap_set(s->bm, 0, size);
        s->bulk = true;
    }
    s->unmap = o->unmap;
    /* Counted only from now on (the node has a bitmap): earlier
     * requests are not this job's business. */
    s->users_seen = __atomic_load_n(&o->source->user_requests,
                                    __ATOMIC_RELAXED);
    s->op_max = MAX(gran, MIN(MIRROR_MAX_OP, buf_size) / gran * gran);
    s->n_ops = MAX(buf_size / s->op_max, 1);
    /* Small operations out of a buf-size that leaves at least half of
     * it to large ones. */
    if (gran < MIRROR_SMALL_OP_BYTES && s->op_max > MIRROR_SMALL_OP_BYTES &&
        buf_size >= 2ull * MIRROR_SMALL_OPS * MIRROR_SMALL_OP_BYTES) {
        s->small_max = MIRROR_SMALL_OP_BYTES;
        s->n_small = MIRROR_SMALL_OPS;
        s->n_ops = MAX((buf_size - (uint64_t)MIRROR_SMALL_OPS *
                        MIRROR_SMALL_OP_BYTES) / s->op_max, 1) + s->n_small;
    }
    s->max_read_bytes = MAX(s->op_max, MIN(buf_size, MIRROR_MAX_READ_BYTES));
    s->ops = g_new0(MirrorOp, s->n_ops);
    if (o->write_blocking) {
        s->am = g_new0(BdrvActiveMirror, 1);
        s->am->submit = mirror_active_submit;
        s->am->opaque = s;
        s->am->n_slots = MIRROR_ACTIVE_SLOTS;
        s->am->slots = g_new0(BdrvActiveWrite, MIRROR_ACTIVE_SLOTS);
        s->am->slot_used = g_new0(unsigned long, MIRROR_ACTIVE_SLOTS /
                                  (sizeof(unsigned long) * 8));
    }
    for (unsigned int i = 0; i < s->n_ops; i++) {
        s->ops[i].small = i < s->n_small;
        /* 4 KiB alignment: what O_DIRECT asks of any device. */
        if (posix_memalign(&s->ops[i].buf, 4096,
                           s->ops[i].small ? s->small_max : s->op_max)) {
            g_set_error(errp, VB_ERROR, 0, "cannot allocate the mirror's "
                        "%" PRIu64 "-byte buffers: lower buf-size",
                        buf_size);
            goto fail;
        }
        s->ops[i].s = s;
        mirror_put_op(s, &s->ops[i]);
    }
    s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (s->timer_fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "timerfd: %s", g_strerror(errno));
        goto fail;
    }
    job = job_create(o->job_id, o->commit ? &commit_active_job_driver :
                     &mirror_job_driver, s, o->device,
                     o->auto_finalize, o->auto_dismiss, o->speed, errp);
    if (!job) {
        goto fail;
    }
    s->job = job;
    s->kick_bh = aio_bh_new(s->ctx, mirror_kick_bh, s, "mirror-kick");
    aio_set_fd_handler(s->ctx, s->timer_fd, mirror_timer_cb, NULL, NULL,
                       NULL, s);
    job_progress_set_remaining(job, bdrv_dirty_bitmap_dirty_bytes(s->bm));
    if (s->am) {
        s->active = true;
        bdrv_dirty_bitmap_set_active(s->bm, s->am);
    }
    job_start(job);
    return job;

fail:
    if (s->bm) {
        bdrv_dirty_bitmap_release(s->src, s->bm);
    }
    blk_detach_user(s->src_user);
    blk_detach_user(s->target_user);
    for (unsigned int i = 0; s->ops && i < s->n_ops; i++) {
        free(s->ops[i].buf);
    }
    g_free(s->ops);
    mirror_active_free(s);
    if (s->timer_fd >= 0) {
        close(s->timer_fd);
    }
    g_free(s->pivot_opaque);
    g_free(s);
    return NULL;
}
