/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-user-blk export: the per-queue dataplane loop between a vhost-user
 * server's virtqueues and virtio_blk_process_req().
 *
 * Data flow, all in the queue's iothread: the kick eventfd (or the busy-poll
 * check, which looks at the avail index without a syscall) runs
 * vu_blk_queue_run(), which opens a defer_call section, pops up to a budget
 * of chains (a smaller first batch when nothing is in flight, see
 * vu_blk_turn_limit()) and hands each to virtio_blk_process_req() with the
 * request slot of its descriptor head (a pool of queue-size slots allocated
 * when the queue starts: nothing is allocated per request).  Closing the section
 * submits the whole batch to the block engine with one syscall.  When the
 * budget stops the loop before the ring is empty, a bottom half continues
 * it on the next loop iteration so other queues of the thread get their
 * turn.  Completions push the element to the used ring and register one
 * deferred notify per section, so the call eventfd is written at most once
 * per batch, and only when event-idx says the driver wants it.
 *
 * Busy polling: while the iothread's loop is in a busy-poll phase it looks
 * at the avail index itself, so the queue turns the guest's kicks off
 * (virtqueue_set_notification(), through the loop's io_poll_begin /
 * io_poll_end callbacks) and back on before the loop sleeps; the loop then
 * checks the ring once more, so a chain made available in between is not
 * missed.  Without polling (--poll-max-ns 0, or the adaptive window shrank
 * to nothing) the loop sleeps as soon as virtqueue_pop() returns NULL; that
 * pop has already published avail_event, fenced and looked again (see
 * virtqueue_empty_recheck()), so the driver kicks for anything later.  A
 * budget yield does not sleep: the bottom half runs on the next iteration.
 *
 * Write cache across back-end restarts: the driver's "writeback" choice
 * is saved in the inflight region (vu_server_save_state()) whenever it
 * changes, and a process that has not been told by a driver itself takes
 * it from the region the front-end hands back (vu_blk_load_state()).
 * See docs/architecture.md, "Write cache".
 */
#include "qemu/osdep.h"
#include "hw/block/vhost-user-blk-export.h"
#include "qemu/iothread.h"
#include "hw/virtio/vhost-user-server.h"
#include "qemu/defer-call.h"
#include "qemu/error-report.h"
#include "qemu/event_notifier.h"

typedef struct VuBlkQueue VuBlkQueue;

typedef struct VuBlkReq {
    VirtioBlkReq req;
    VirtQueueElement *elem;
    int64_t start_ns;           /* when its batch was popped */
} VuBlkReq;

typedef struct VuBlkQueueCounters {
    uint64_t requests;
    uint64_t completed;
    uint64_t batches;
    uint64_t kicks;
    uint64_t poll_hits;
    uint64_t budget_yields;
    VuBlkOpStats ops[VU_BLK_OP__MAX];
    uint64_t wr_highest_offset;
    uint64_t lat_bins[VU_BLK_OP__MAX][LAT_HIST_FIXED_BINS];
} VuBlkQueueCounters;

struct VuBlkQueue {
    VuBlkExport *exp;
    unsigned int index;
    AioContext *ctx;

    /* Owned by the iothread while the queue runs. */
    VirtQueue *vq;
    int kick_fd;
    QEMUBH *bh;
    VuBlkReq *reqs;             /* indexed by descriptor head */
    unsigned int pool_size;
    unsigned int inflight;
    bool notify_deferred;       /* vu_blk_notify_cb registered */
    int64_t done_ns;            /* clock at the first completion of the
                                 * current section (statistics) */
    bool stopping;              /* stopped; requests may still complete */
    bool broken_reported;
    bool kick_edge;             /* kick fd edge-triggered: never read */
    bool driver_polls;          /* counted in the context's driver_polls */
    bool bh_continues;          /* the last turn stopped at its limit: the
                                 * bottom half pops the rest (budget) */
    VuBlkQueueCounters c;
    /* The operator's histograms (owned), and for each request type the
     * one it counts in (NULL: none); swapped in the iothread only. */
    LatHist *hist[VU_BLK_HIST__MAX];
    LatHist *hist_of_op[VU_BLK_OP__MAX];
    VirtQueueStats vq_base;     /* virtqueue stats already folded in */
    VirtQueueStats vq_total;
};

struct VuBlkExport {
    VirtioBlkDev dev;
    BlockBackend *blk;
    BdrvChild *user;            /* the export's use of @blk (permissions) */
    bool blk_borrowed;          /* opts->blk_backend: not ours to close */
    VuServer *server;
    VuBlkQueue *queues;
    unsigned int num_queues;
    unsigned int budget;
    unsigned int first_batch;   /* <= budget */
    bool writeback_set_here;    /* a driver wrote "writeback" to this
                                 * process (main thread) */
    uint64_t config_changes;    /* CONFIG_CHANGE_MSG sent (main thread) */
    unsigned int running_queues;    /* atomic: started, not stopped */
    uint64_t process_id;        /* saved in the inflight region */
    bool restarted;             /* main thread: the front-end handed back a
                                 * region an earlier process saved */
    bool quiesced;              /* atomic: the queues pop no request (a
                                 * block job moves the export to another
                                 * node, vu_blk_export_quiesce()) */
};

/*
 * Device state kept in the inflight region, byte by byte: what the driver
 * chose and the front-end would not tell a restarted back-end.  New fields
 * go at the end; a reader treats missing bytes as not saved.
 */
enum {
    VU_BLK_STATE_WRITEBACK,     /* config "writeback": 0 or 1 */
    VU_BLK_STATE_PROCESS,       /* 8 bytes: a random id of the process */
    VU_BLK_STATE_LEN = VU_BLK_STATE_PROCESS + 8,
};

/* ---- dataplane (queue's iothread) ------------------------------------ */

/* The guest broke the queue (or took its memory away): tell the server
 * once, which drops the session from the main thread. */
static void vu_blk_report_broken(VuBlkQueue *q)
{
    if (!q->broken_reported) {
        q->broken_reported = true;
        vu_server_report_broken(q->exp->server);
    }
}

/*
 * End of a section that completed requests.  This also runs for
 * completions that arrive after vu_blk_queue_stop() (the server drains
 * in-flight requests after stopping a queue): the queue's kick handler and
 * bottom half are gone then, so nothing here may use them.  Such late
 * completions are still pushed to the used ring (the chains were valid and
 * the I/O is done; the rings stay mapped until the drain ends), even on a
 * broken queue, whose driver is being dropped anyway.
 */
static void vu_blk_notify_cb(void *opaque)
{
    VuBlkQueue *q = opaque;

    q->notify_deferred = false;
    if (unlikely(!virtqueue_check_memory(q->vq))) {
        vu_blk_report_broken(q);
        return;
    }
    virtqueue_notify(q->vq);
    if (unlikely(virtqueue_driver_polls(q->vq) != q->driver_polls) &&
        !q->stopping) {
        /* Once per change of the driver's mode, not per batch. */
        q->driver_polls = !q->driver_polls;
        aio_context_driver_polls_add(q->ctx, q->driver_polls ? 1 : -1);
    }
}

static int64_t vu_blk_clock_ns(void)
{
    struct timespec ts;

    /* vDSO: no system call. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/*
 * Per-type accounting, in the queue's iothread: plain stores to counters
 * only this thread writes (the main thread reads them through
 * vu_server_run_in_queue()).  Latency: one fixed bucket (a multiply and a
 * clz, qemu/latency-hist.h) and, only if the operator set one, a binary
 * search in the QMP histogram.
 */
static void vu_blk_account(VuBlkQueue *q, VuBlkReq *r, uint8_t status,
                           int64_t now)
{
    VuBlkOpStats *st;
    LatHist *h;
    uint64_t lat;
    VuBlkOp op;

    switch (r->req.type) {
    case VIRTIO_BLK_T_IN:
        op = VU_BLK_OP_READ;
        break;
    case VIRTIO_BLK_T_OUT:
        op = VU_BLK_OP_WRITE;
        break;
    case VIRTIO_BLK_T_FLUSH:
        op = VU_BLK_OP_FLUSH;
        break;
    case VIRTIO_BLK_T_DISCARD:
        op = VU_BLK_OP_DISCARD;
        break;
    case VIRTIO_BLK_T_WRITE_ZEROES:
        op = VU_BLK_OP_WRITE_ZEROES;
        break;
    default:
        op = VU_BLK_OP_OTHER;
        break;
    }
    st = &q->c.ops[op];
    st->ops++;
    if (status == VIRTIO_BLK_S_OK) {
        st->bytes += r->req.bytes;
        if ((op == VU_BLK_OP_WRITE || op == VU_BLK_OP_WRITE_ZEROES) &&
            r->req.offset + r->req.bytes > q->c.wr_highest_offset) {
            q->c.wr_highest_offset = r->req.offset + r->req.bytes;
        }
    } else {
        st->failed++;
    }
    /* Both clocks are one CLOCK_MONOTONIC; never negative, but cheap to
     * be sure of. */
    lat = likely(now >= r->start_ns) ? now - r->start_ns : 0;
    st->total_ns += lat;
    q->c.lat_bins[op][lat_hist_fixed_bucket(lat)]++;
    h = q->hist_of_op[op];
    if (unlikely(h)) {
        lat_hist_record(h, lat);
    }
}

static void vu_blk_req_done(VirtioBlkReq *req, uint8_t status,
                            uint32_t in_len, void *opaque)
{
    VuBlkQueue *q = opaque;
    VuBlkReq *r = container_of(req, VuBlkReq, req);

    /* One clock read per section of completions (the first one
     * registers the notify below; outside a section that runs at once,
     * so every completion reads the clock). */
    if (!q->notify_deferred) {
        q->done_ns = vu_blk_clock_ns();
    }
    vu_blk_account(q, r, status, q->done_ns);

    virtqueue_push(q->vq, r->elem, in_len);
    r->elem = NULL;
    q->inflight--;
    q->c.completed++;
    if (unlikely(q->stopping) && q->inflight == 0) {
        /* The server waits for this to finish the stop. */
        vu_server_queue_drained(q->exp->server);
    }
    /* One registration per section, without defer_call()'s search. */
    if (!q->notify_deferred) {
        q->notify_deferred = true;
        defer_call(vu_blk_notify_cb, q);
    }
}

/*
 * Chains popped before the first of them is processed.  A request's header
 * and descriptors were just written by the driver's CPU, so reading them
 * misses the cache; popping a few first (prefetching each header) lets
 * those misses overlap instead of stalling one request at a time.
 */
#define VU_BLK_POP_AHEAD 8

static void vu_blk_queue_run(VuBlkQueue *q, unsigned int limit)
{
    VuBlkExport *exp = q->exp;
    VirtQueueElement *ahead[VU_BLK_POP_AHEAD];
    unsigned int n = 0;
    int64_t now = 0;
    bool more = true;

    if (unlikely(__atomic_load_n(&exp->quiesced, __ATOMIC_RELAXED))) {
        /* Chains stay in the ring; vu_blk_export_quiesce() schedules a
         * turn when it lets the queue go on. */
        return;
    }
    q->bh_continues = false;    /* this turn takes over what was left */
    defer_call_begin();
    while (more && n < limit) {
        unsigned int want = MIN(limit - n, VU_BLK_POP_AHEAD), k = 0;

        while (k < want) {
            VirtQueueElement *elem = virtqueue_pop(q->vq);

            if (!elem) {
                more = false;
                break;
            }
            if (unlikely(elem->head >= q->pool_size)) {
                virtqueue_set_broken(q->vq, "descriptor head %u outside a "
                                     "queue of %u", elem->head,
                                     q->pool_size);
                more = false;
                break;
            }
            if (likely(elem->out_num)) {
                /* Mapped guest memory; a prefetch never faults anyway. */
                __builtin_prefetch(elem->out_sg[0].iov_base);
            }
            ahead[k++] = elem;
        }
        if (k && !n) {
            now = vu_blk_clock_ns();    /* one clock read per batch */
        }
        for (unsigned int i = 0; i < k; i++) {
            VirtQueueElement *elem = ahead[i];
            VuBlkReq *r = &q->reqs[elem->head];

            r->elem = elem;
            r->start_ns = now;
            q->inflight++;
            virtio_blk_process_req(&exp->dev, &r->req, elem->out_sg,
                                   elem->out_num, elem->in_sg, elem->in_num,
                                   vu_blk_req_done, q);
        }
        n += k;
    }
    defer_call_end();

    if (n) {
        q->c.batches++;
        q->c.requests += n;
    }
    if (unlikely(!virtqueue_check_memory(q->vq))) {
        vu_blk_report_broken(q);
        return;
    }
    if (n == limit) {
        if (limit == exp->budget) {
            q->c.budget_yields++;
        }
        q->bh_continues = true;
        qemu_bh_schedule(q->bh);
    }
}

/*
 * How many chains a turn started by a kick or by polling may pop.  With
 * nothing in flight the driver is (or soon will be) waiting for its first
 * completion: pop a small first batch, whose completions and interrupt go
 * out before the rest of the convoy is popped (the budget bottom half does
 * that, after the completions that are already due).  The driver's
 * wake-up then overlaps our processing of the rest.  With requests in
 * flight, completions are on their way anyway: the whole budget.
 */
static unsigned int vu_blk_turn_limit(VuBlkQueue *q)
{
    return q->inflight ? q->exp->budget : q->exp->first_batch;
}

/*
 * The kick eventfd is edge-triggered when the loop allows it
 * (q->kick_edge): each kick runs this once and the counter is left alone,
 * one read syscall less per wake-up.  Otherwise it is cleared first, so a
 * kick that arrives while the ring is processed wakes the loop again.
 */
static void vu_blk_kick_cb(void *opaque)
{
    VuBlkQueue *q = opaque;

    if (unlikely(!q->kick_edge)) {
        EventNotifier kick = { .fd = q->kick_fd };

        event_notifier_test_and_clear(&kick);
    }
    q->c.kicks++;
    vu_blk_queue_run(q, vu_blk_turn_limit(q));
}

static bool vu_blk_poll_cb(void *opaque)
{
    VuBlkQueue *q = opaque;

    return virtqueue_has_avail(q->vq) &&
           !__atomic_load_n(&q->exp->quiesced, __ATOMIC_RELAXED);
}

static void vu_blk_poll_ready_cb(void *opaque)
{
    VuBlkQueue *q = opaque;

    q->c.poll_hits++;
    vu_blk_queue_run(q, vu_blk_turn_limit(q));
}

/* The loop starts busy polling: it will see new chains, no kicks needed. */
static void vu_blk_poll_begin_cb(void *opaque)
{
    VuBlkQueue *q = opaque;

    virtqueue_set_notification(q->vq, false);
}

/* The loop is about to sleep: ask for kicks again (with the barrier the
 * loop's following re-check needs). */
static void vu_blk_poll_end_cb(void *opaque)
{
    VuBlkQueue *q = opaque;

    virtqueue_set_notification(q->vq, true);
}

/*
 * The bottom half continues, with the whole budget, a turn that stopped at
 * its limit.  If another turn ran in between (a kick or a poll turn in the
 * same loop iteration), that one took the rest, its completions may have
 * gone out, and the driver may have made its next convoy available since:
 * the bottom half is then a turn like a kick's, as is its run after
 * vu_blk_queue_start(), so that convoy starts with a first batch too.
 */
static void vu_blk_queue_bh(void *opaque)
{
    VuBlkQueue *q = opaque;

    vu_blk_queue_run(q, likely(q->bh_continues) ? q->exp->budget
                                                : vu_blk_turn_limit(q));
}

/* ---- queue control (queue's iothread, called by the server) ---------- */

static void vu_blk_fold_vq_stats(VuBlkQueue *q)
{
    VirtQueueStats now;

    virtqueue_get_stats(q->vq, &now);
    q->vq_total.popped += now.popped - q->vq_base.popped;
    q->vq_total.pushed += now.pushed - q->vq_base.pushed;
    q->vq_total.notifies += now.notifies - q->vq_base.notifies;
    q->vq_total.notifies_suppressed +=
        now.notifies_suppressed - q->vq_base.notifies_suppressed;
    q->vq_total.resubmitted += now.resubmitted - q->vq_base.resubmitted;
    q->vq_base = now;
}

static void vu_blk_queue_start(void *opaque, unsigned int index,
                               VirtQueue *vq, unsigned int num)
{
    VuBlkExport *exp = opaque;
    VuBlkQueue *q = &exp->queues[index];
    GError *err = NULL;

    if (num < exp->dev.conf.seg_max + 2) {
        /* Setup path, once per queue start: not per request. */
        warn_report("queue %u: the front-end's ring has %u entries but this "
                    "export advertises seg_max=%u (queue-size=%u); requests "
                    "with more than %u segments will break the session: set "
                    "queue-size=%u on the export or a larger queue-size in "
                    "the VMM", index, num, exp->dev.conf.seg_max,
                    exp->dev.conf.queue_size, num - 2, num);
    }
    if (q->pool_size != num) {
        /* Only when the queue size changed; the queue is drained. */
        g_free(q->reqs);
        q->reqs = g_new0(VuBlkReq, num);
        q->pool_size = num;
    }
    if (!blk_attach_aio_context(exp->blk, q->ctx, &err)) {
        /* Not fatal: the first request tries again and fails cleanly. */
        warn_report("queue %u: %s", index, err->message);
        g_clear_error(&err);
    }
    /* The device is in use from its first queue's start to its last
     * queue's stop (see blk_set_active()). */
    if (__atomic_fetch_add(&exp->running_queues, 1, __ATOMIC_SEQ_CST) == 0) {
        /* exp->restarted: set by the main thread before any queue ran */
        blk_set_active(exp->blk, true, exp->restarted);
    }
    q->vq = vq;
    q->kick_fd = virtqueue_get_kick_fd(vq);
    q->stopping = false;
    q->broken_reported = false;
    virtqueue_get_stats(vq, &q->vq_base);
    q->bh = aio_bh_new(q->ctx, vu_blk_queue_bh, q, "vu-blk-queue");
    aio_set_fd_handler(q->ctx, q->kick_fd, vu_blk_kick_cb, NULL,
                       vu_blk_poll_cb, vu_blk_poll_ready_cb, q);
    aio_set_fd_poll_notify(q->ctx, q->kick_fd, vu_blk_poll_begin_cb,
                           vu_blk_poll_end_cb);
    q->kick_edge = aio_set_fd_edge_triggered(q->ctx, q->kick_fd);
    /* Chains may be waiting already: resubmitted ones after a reconnect,
     * or kicks sent before the queue started.  That run is a first turn,
     * not a continuation. */
    q->bh_continues = false;
    qemu_bh_schedule(q->bh);
}

static void vu_blk_queue_stop(void *opaque, unsigned int index,
                              VirtQueue *vq)
{
    VuBlkExport *exp = opaque;
    VuBlkQueue *q = &exp->queues[index];

    aio_set_fd_handler(q->ctx, q->kick_fd, NULL, NULL, NULL, NULL, NULL);
    qemu_bh_delete(q->bh);
    q->bh = NULL;
    q->kick_fd = -1;
    q->stopping = true;
    if (__atomic_fetch_sub(&exp->running_queues, 1, __ATOMIC_SEQ_CST) == 1) {
        blk_set_active(exp->blk, false, false);
    }
    if (q->driver_polls) {
        q->driver_polls = false;
        aio_context_driver_polls_add(q->ctx, -1);
    }
}

static unsigned int vu_blk_queue_inflight(void *opaque, unsigned int index)
{
    VuBlkExport *exp = opaque;
    VuBlkQueue *q = &exp->queues[index];

    if (q->inflight == 0 && q->vq) {
        /* Drained: the server forgets the rings next. */
        vu_blk_fold_vq_stats(q);
        q->vq = NULL;
        blk_detach_aio_context(exp->blk, q->ctx);
    }
    return q->inflight;
}

/* ---- device ops (main thread) ---------------------------------------- */

static uint64_t vu_blk_get_features(void *opaque)
{
    VuBlkExport *exp = opaque;

    return virtio_blk_get_features(&exp->dev);
}

static bool vu_blk_get_config(void *opaque, uint8_t *buf, uint32_t offset,
                              uint32_t size)
{
    VuBlkExport *exp = opaque;
    struct virtio_blk_config cfg;

    if (offset > VHOST_USER_MAX_CONFIG_SIZE ||
        size > VHOST_USER_MAX_CONFIG_SIZE - offset) {
        return false;
    }
    virtio_blk_get_config(&exp->dev, &cfg);
    /* Fields past our struct (newer front-ends ask for more) read 0. */
    memset(buf, 0, size);
    if (offset < sizeof(cfg)) {
        memcpy(buf, (uint8_t *)&cfg + offset, MIN(size, sizeof(cfg) - offset));
    }
    return true;
}

static void vu_blk_save_state(VuBlkExport *exp)
{
    uint8_t st[VU_BLK_STATE_LEN] = {
        [VU_BLK_STATE_WRITEBACK] = virtio_blk_get_writeback(&exp->dev),
    };

    memcpy(st + VU_BLK_STATE_PROCESS, &exp->process_id, 8);
    vu_server_save_state(exp->server, st, sizeof(st));
}

static bool vu_blk_set_config(void *opaque, const uint8_t *data,
                              uint32_t offset, uint32_t size)
{
    VuBlkExport *exp = opaque;

    if (!virtio_blk_set_config(&exp->dev, data, offset, size)) {
        return false;
    }
    exp->writeback_set_here = true;
    vu_blk_save_state(exp);
    return true;
}

/* The write cache depends on FLUSH being negotiated (virtio-blk.h). */
static void vu_blk_set_features(void *opaque, uint64_t features)
{
    VuBlkExport *exp = opaque;

    virtio_blk_set_features(&exp->dev, features);
    vu_blk_save_state(exp);
}

/*
 * The front-end handed back an inflight region with saved device state:
 * after a back-end restart, what the driver told the previous process.
 * Front-end memory: every byte is checked.  A choice a driver made in this
 * process is newer than the region's and stays.
 */
static void vu_blk_load_state(void *opaque, const uint8_t *data, size_t len)
{
    VuBlkExport *exp = opaque;
    const char *name = vu_server_get_socket_path(exp->server);
    bool writeback = virtio_blk_get_writeback(&exp->dev);
    uint64_t saved_by;

    /*
     * Saved by another process of this export: the back-end restarted
     * under a running front-end (after a crash or kill -9), and what that
     * process held on the image (an RBD exclusive lock) is stale.  This
     * is the front-end's word only (its memory, which a VMM can write):
     * it asks for a takeover, never says whose lock to take.  The rbd
     * node breaks only the lock of the earlier process this host
     * recorded, once that client's watch is gone (block/rbd.c).
     */
    if (len >= VU_BLK_STATE_LEN) {
        memcpy(&saved_by, data + VU_BLK_STATE_PROCESS, 8);
        if (saved_by != exp->process_id && !exp->restarted) {
            exp->restarted = true;
            info_report("%s: the front-end kept the state of an earlier "
                        "process of this back-end: taking over from it",
                        name);
        }
    }

    if (len <= VU_BLK_STATE_WRITEBACK || data[VU_BLK_STATE_WRITEBACK] > 1) {
        warn_report("%s: the inflight region's device state holds no valid "
                    "write-cache mode (%zu bytes, writeback byte %d); "
                    "ignored, write cache: %s", name, len,
                    len > VU_BLK_STATE_WRITEBACK ?
                    data[VU_BLK_STATE_WRITEBACK] : -1,
                    writeback ? "writeback" : "writethrough");
    } else if (exp->writeback_set_here) {
        /* Our own region, or one a driver has overruled since. */
    } else if (data[VU_BLK_STATE_WRITEBACK] != writeback) {
        writeback = data[VU_BLK_STATE_WRITEBACK];
        info_report("%s: write cache: %s, as the driver chose before the "
                    "back-end restarted (kept in the inflight region)", name,
                    writeback ? "writeback" : "writethrough");
        virtio_blk_set_writeback(&exp->dev, writeback);
    }
    vu_blk_save_state(exp);
}

static void vu_blk_reset(void *opaque)
{
    VuBlkExport *exp = opaque;

    virtio_blk_reset(&exp->dev);
}

static const VuDeviceOps vu_blk_ops = {
    .get_features = vu_blk_get_features,
    .get_config = vu_blk_get_config,
    .set_config = vu_blk_set_config,
    .set_features = vu_blk_set_features,
    .reset = vu_blk_reset,
    .load_state = vu_blk_load_state,
    .queue_start = vu_blk_queue_start,
    .queue_stop = vu_blk_queue_stop,
    .queue_inflight = vu_blk_queue_inflight,
};

/* ---- public API (main thread) ---------------------------------------- */

/* Main thread: the image was resized from elsewhere (e.g. `rbd resize`
 * on the cluster): tell the guest, as block_resize does. */
static void vu_blk_size_changed(void *opaque, uint64_t size)
{
    VuBlkExport *exp = opaque;

    if (virtio_blk_update_capacity(&exp->dev)) {
        info_report("%s: image resized to %" PRIu64 " bytes; capacity now %"
                    PRIu64 " sectors", vu_server_get_socket_path(exp->server),
                    size, virtio_blk_get_capacity(&exp->dev));
        if (vu_server_notify_config_change(exp->server)) {
            exp->config_changes++;
        }
    }
}

VuBlkExport *vu_blk_export_new(const VuBlkExportOptions *opts,
                               GError **errp)
{
    VirtioBlkConf conf = opts->conf;
    VuServerConfig scfg;
    VuBlkExport *exp;

    if (conf.num_queues == 0 || conf.num_queues > 64) {
        g_set_error(errp, VB_ERROR, 0, "num-queues=%u: use 1 to 64",
                    conf.num_queues);
        return NULL;
    }
    if (conf.queue_size < 2 || conf.queue_size > VIRTQUEUE_MAX_SIZE ||
        (conf.queue_size & (conf.queue_size - 1))) {
        g_set_error(errp, VB_ERROR, 0, "queue-size=%u: use a power of 2 "
                    "from 2 to %u", conf.queue_size, VIRTQUEUE_MAX_SIZE);
        return NULL;
    }
    if (!conf.seg_max) {
        /* The virtqueue has iovec room for every descriptor of such a
         * request to be split at a memory region boundary. */
        conf.seg_max = MIN(conf.queue_size, VIRTQUEUE_MAX_SEG) - 2;
        if (!conf.seg_max) {
            conf.seg_max = 1;
        }
    }

    exp = g_new0(VuBlkExport, 1);
    exp->process_id = g_random_int() | (uint64_t)g_random_int() << 32;
    exp->num_queues = conf.num_queues;
    exp->budget = opts->budget ? opts->budget : VU_BLK_DEFAULT_BUDGET;
    exp->first_batch = opts->first_batch ? MIN(opts->first_batch, exp->budget)
                                         : VU_BLK_DEFAULT_FIRST_BATCH;
    exp->queues = g_new0(VuBlkQueue, conf.num_queues);
    for (unsigned int i = 0; i < conf.num_queues; i++) {
        exp->queues[i].exp = exp;
        exp->queues[i].index = i;
        exp->queues[i].ctx = opts->queue_ctx[i];
        exp->queues[i].kick_fd = -1;
    }

    if (opts->blk_backend) {
        exp->blk = opts->blk_backend;
        exp->blk_borrowed = true;
    } else {
        exp->blk = blk_open(&opts->blk, errp);
        if (!exp->blk) {
            goto fail;
        }
    }
    {
        g_autofree char *who = g_strdup_printf(
            "the vhost-user-blk export on %s", opts->socket_path ?
            opts->socket_path : "a passed socket");

        /* It writes (unless read-only) and, like qemu-storage-daemon's
         * exports, lets every other user do anything. */
        exp->user = blk_attach_user(exp->blk, who,
                                    BLK_PERM_CONSISTENT_READ |
                                    (blk_is_read_only(exp->blk) ? 0 :
                                     BLK_PERM_WRITE |
                                     BLK_PERM_WRITE_UNCHANGED),
                                    BLK_PERM_ALL, errp);
        if (!exp->user) {
            goto fail;
        }
    }
    if (!virtio_blk_dev_init(&exp->dev, exp->blk, &conf, errp)) {
        goto fail;
    }
    {
        uint64_t len = blk_getlength(exp->blk);
        unsigned int lbs = exp->dev.conf.logical_block_size;

        /*
         * The guest sees whole logical blocks only.  QEMU rounds such an
         * image up and reads zeros past its end; serving bytes that are
         * not in the file would need writes there to grow it, so the
         * tail is left out instead, and said so: a guest must not find
         * its disk silently shorter than the file.
         */
        if (len % lbs) {
            warn_report("%s: the image is %" PRIu64 " bytes, not a multiple "
                        "of the %u-byte logical block: its last %" PRIu64
                        " bytes are not served (the disk has %" PRIu64
                        " bytes); resize it to a multiple of %u (e.g. "
                        "truncate -s %" PRIu64 ")", opts->socket_path ?
                        opts->socket_path : "export", len, lbs, len % lbs,
                        len - len % lbs, lbs, QEMU_ALIGN_UP(len, lbs));
        }
    }

    scfg = (VuServerConfig) {
        .socket_path = opts->socket_path,
        .listen_fd = opts->listen_fd,
        .socket_mode = opts->socket_mode,
        .socket_chown = opts->socket_chown,
        .socket_uid = opts->socket_uid,
        .socket_gid = opts->socket_gid,
        .num_queues = conf.num_queues,
        .max_queue_size = VIRTQUEUE_MAX_SIZE,
        .main_ctx = opts->main_ctx,
        .queue_ctx = opts->queue_ctx,
        .ops = &vu_blk_ops,
        .opaque = exp,
    };
    exp->server = vu_server_new(&scfg, errp);
    if (!exp->server) {
        goto fail;
    }
    vu_blk_save_state(exp);     /* for the first inflight region */
    blk_set_size_notifier(exp->blk, vu_blk_size_changed, exp);
    return exp;

fail:
    vu_blk_export_free(exp);
    return NULL;
}

void vu_blk_export_free(VuBlkExport *exp)
{
    if (!exp) {
        return;
    }
    /* Stops and drains every queue before anything below goes away. */
    vu_server_free(exp->server);
    if (exp->blk) {
        blk_set_size_notifier(exp->blk, NULL, NULL);
    }
    blk_detach_user(exp->user);
    if (exp->blk && !exp->blk_borrowed) {
        blk_close(exp->blk);
    }
    for (unsigned int i = 0; i < exp->num_queues; i++) {
        g_free(exp->queues[i].reqs);
        for (unsigned int t = 0; t < VU_BLK_HIST__MAX; t++) {
            lat_hist_free(exp->queues[i].hist[t]);
        }
    }
    g_free(exp->queues);
    g_free(exp);
}

void vu_blk_export_stop_listening(VuBlkExport *exp)
{
    vu_server_stop_listening(exp->server);
}

const char *vu_blk_export_get_socket_path(VuBlkExport *exp)
{
    return vu_server_get_socket_path(exp->server);
}

void vu_blk_export_disconnect(VuBlkExport *exp)
{
    vu_server_disconnect(exp->server);
}

bool vu_blk_export_is_idle(VuBlkExport *exp)
{
    return vu_server_is_idle(exp->server);
}

void vu_blk_export_set_idle_notify(VuBlkExport *exp,
                                   void (*fn)(void *opaque), void *opaque)
{
    vu_server_set_idle_notify(exp->server, fn, opaque);
}

int vu_blk_export_get_listen_fd(VuBlkExport *exp)
{
    return vu_server_get_listen_fd(exp->server);
}

bool vu_blk_export_is_connected(VuBlkExport *exp)
{
    return vu_server_is_connected(exp->server);
}

typedef struct VuBlkStatsSnap {
    VuBlkQueue *q;
    VuBlkQueueCounters c;
    VirtQueueStats vq;
    unsigned int inflight;
    bool driver_polls;
} VuBlkStatsSnap;

static void vu_blk_snap_fn(VirtQueue *vq, void *opaque)
{
    VuBlkStatsSnap *snap = opaque;

    if (snap->q->vq == vq) {
        vu_blk_fold_vq_stats(snap->q);
    }
    snap->c = snap->q->c;
    snap->vq = snap->q->vq_total;
    snap->inflight = snap->q->inflight;
    snap->driver_polls = snap->q->driver_polls;
}

/* Main thread: one queue's counters, read in its iothread if it runs. */
static bool vu_blk_snap(VuBlkExport *exp, unsigned int i,
                        VuBlkStatsSnap *snap)
{
    *snap = (VuBlkStatsSnap) { .q = &exp->queues[i] };
    if (vu_server_run_in_queue(exp->server, i, vu_blk_snap_fn, snap)) {
        return true;
    }
    /* Not running: nothing else touches the counters now. */
    snap->c = exp->queues[i].c;
    snap->vq = exp->queues[i].vq_total;
    snap->inflight = exp->queues[i].inflight;
    return false;
}

void vu_blk_export_get_queue_stats(VuBlkExport *exp, unsigned int index,
                                   VuBlkQueueStats *stats)
{
    VuBlkStatsSnap snap;

    assert(index < exp->num_queues);
    stats->running = vu_blk_snap(exp, index, &snap);
    stats->requests = snap.c.requests;
    stats->completed = snap.c.completed;
    stats->inflight = snap.inflight;
    stats->batches = snap.c.batches;
    stats->kicks = snap.c.kicks;
    stats->poll_hits = snap.c.poll_hits;
    stats->budget_yields = snap.c.budget_yields;
    stats->notifies = snap.vq.notifies;
    stats->notifies_suppressed = snap.vq.notifies_suppressed;
    stats->driver_polls = snap.driver_polls;
    memcpy(stats->ops, snap.c.ops, sizeof(stats->ops));
    memcpy(stats->lat_bins, snap.c.lat_bins, sizeof(stats->lat_bins));
}

unsigned int vu_blk_export_get_num_queues(VuBlkExport *exp)
{
    return exp->num_queues;
}

AioContext *vu_blk_export_get_queue_ctx(VuBlkExport *exp, unsigned int index)
{
    assert(index < exp->num_queues);
    return exp->queues[index].ctx;
}

/* In the queue's iothread: a turn after the export was quiesced (its
 * requests in flight may still complete), or to go on after it. */
static void vu_blk_quiesce_fn(void *opaque)
{
    VuBlkQueue *q = opaque;

    if (q->bh && !__atomic_load_n(&q->exp->quiesced, __ATOMIC_RELAXED)) {
        q->bh_continues = false;
        qemu_bh_schedule(q->bh);
    }
}

void vu_blk_export_quiesce(VuBlkExport *exp, bool on)
{
    __atomic_store_n(&exp->quiesced, on, __ATOMIC_SEQ_CST);
    /* A run in each queue's iothread: when it returns, no turn that
     * missed the flag is still popping (and after "off", each queue
     * looks at its ring again: kicks that came meanwhile were eaten). */
    for (unsigned int i = 0; i < exp->num_queues; i++) {
        aio_run_sync(exp->queues[i].ctx, vu_blk_quiesce_fn, &exp->queues[i]);
    }
}

bool vu_blk_export_replace_blk(VuBlkExport *exp, BlockBackend *blk,
                               GError **errp)
{
    g_autofree char *who = g_strdup_printf(
        "the vhost-user-blk export on %s",
        vu_blk_export_get_socket_path(exp) ?: "a passed socket");
    BdrvChild *user;
    BlockBackend *old = exp->blk;

    assert(__atomic_load_n(&exp->quiesced, __ATOMIC_RELAXED));
    if (!exp->blk_borrowed) {
        g_set_error(errp, VB_ERROR, 0, "the export %s opened its own image: "
                    "it cannot move to another node", who);
        return false;
    }
    if (blk_getlength(blk) != blk_getlength(old)) {
        g_set_error(errp, VB_ERROR, 0, "the new node's size differs from "
                    "the export's: the guest would see its disk change");
        return false;
    }
    /* The same permissions as at creation (on the old node). */
    user = blk_attach_user(blk, who,
                           BLK_PERM_CONSISTENT_READ |
                           (blk_is_read_only(old) ? 0 :
                            BLK_PERM_WRITE | BLK_PERM_WRITE_UNCHANGED),
                           BLK_PERM_ALL, errp);
    if (!user) {
        return false;
    }
    blk_set_size_notifier(old, NULL, NULL);
    blk_detach_user(exp->user);
    exp->user = user;
    /* The queues pop nothing now, and vu_blk_export_quiesce(false) runs
     * in each of their threads before they do again: they see the new
     * node from their next request on.  Requests in flight complete on
     * the old one (their control blocks hold it). */
    __atomic_store_n(&exp->blk, blk, __ATOMIC_RELEASE);
    __atomic_store_n(&exp->dev.blk, blk, __ATOMIC_RELEASE);
    blk_set_size_notifier(blk, vu_blk_size_changed, exp);
    if (__atomic_load_n(&exp->running_queues, __ATOMIC_SEQ_CST)) {
        blk_set_active(blk, true, false);
        blk_set_active(old, false, false);
    }
    return true;
}

BlockBackend *vu_blk_export_get_blk(VuBlkExport *exp)
{
    return exp->blk;
}

bool vu_blk_export_resize_check(VuBlkExport *exp, uint64_t size,
                                GError **errp)
{
    uint32_t lbs = exp->dev.conf.logical_block_size;

    if (size % lbs) {
        g_set_error(errp, VB_ERROR, 0, "size %" PRIu64 " is not a multiple "
                    "of the export's logical block size (%u)", size, lbs);
        return false;
    }
    return true;
}

bool vu_blk_export_resize(VuBlkExport *exp, uint64_t size, bool *notified,
                          GError **errp)
{
    *notified = false;
    if (!vu_blk_export_resize_check(exp, size, errp) ||
        !blk_truncate(exp->blk, size, errp)) {
        return false;
    }
    vu_blk_export_resized(exp, size, notified);
    return true;
}

void vu_blk_export_resized(VuBlkExport *exp, uint64_t size, bool *notified)
{
    *notified = false;
    if (virtio_blk_update_capacity(&exp->dev)) {
        info_report("%s: capacity now %" PRIu64 " sectors (%" PRIu64
                    " bytes)", vu_server_get_socket_path(exp->server),
                    virtio_blk_get_capacity(&exp->dev), size);
        *notified = vu_server_notify_config_change(exp->server);
        if (*notified) {
            exp->config_changes++;
        }
    }
}

void vu_blk_export_get_stats(VuBlkExport *exp, VuBlkExportStats *stats)
{
    VuServerStats ss;

    memset(stats, 0, sizeof(*stats));
    for (unsigned int i = 0; i < exp->num_queues; i++) {
        VuBlkStatsSnap snap;

        vu_blk_snap(exp, i, &snap);
        for (unsigned int o = 0; o < VU_BLK_OP__MAX; o++) {
            stats->ops[o].ops += snap.c.ops[o].ops;
            stats->ops[o].failed += snap.c.ops[o].failed;
            stats->ops[o].bytes += snap.c.ops[o].bytes;
            stats->ops[o].total_ns += snap.c.ops[o].total_ns;
            for (unsigned int b = 0; b < LAT_HIST_FIXED_BINS; b++) {
                stats->lat_bins[o][b] += snap.c.lat_bins[o][b];
            }
        }
        stats->inflight += snap.inflight;
        stats->wr_highest_offset = MAX(stats->wr_highest_offset,
                                       snap.c.wr_highest_offset);
        stats->requests += snap.c.requests;
        stats->completed += snap.c.completed;
        stats->batches += snap.c.batches;
        stats->kicks += snap.c.kicks;
        stats->poll_hits += snap.c.poll_hits;
        stats->budget_yields += snap.c.budget_yields;
        stats->notifies += snap.vq.notifies;
        stats->notifies_suppressed += snap.vq.notifies_suppressed;
        stats->driver_polls += snap.driver_polls;
        stats->resubmitted += snap.vq.resubmitted;
    }
    vu_server_get_stats(exp->server, &ss);
    stats->sessions = ss.sessions;
    stats->config_changes = exp->config_changes;
}

/* ---- the operator's latency histograms (main thread) ------------------ */

typedef struct VuBlkHistJob {
    VuBlkQueue *q;
    VuBlkHistType type;
    LatHist *h;                 /* in: the new one; out: the old one */
} VuBlkHistJob;

/* Which histogram each request type counts in (QEMU's accounting). */
static const int vu_blk_hist_type_of_op[VU_BLK_OP__MAX] = {
    [VU_BLK_OP_READ] = VU_BLK_HIST_READ,
    [VU_BLK_OP_WRITE] = VU_BLK_HIST_WRITE,
    [VU_BLK_OP_WRITE_ZEROES] = VU_BLK_HIST_WRITE,
    [VU_BLK_OP_FLUSH] = VU_BLK_HIST_FLUSH,
    [VU_BLK_OP_DISCARD] = -1,
    [VU_BLK_OP_OTHER] = -1,
};

/* In the queue's iothread (or the main thread while the queue is
 * stopped): swap the histogram in. */
static void vu_blk_hist_swap(VuBlkHistJob *job)
{
    VuBlkQueue *q = job->q;
    LatHist *old = q->hist[job->type];

    q->hist[job->type] = job->h;
    for (unsigned int op = 0; op < VU_BLK_OP__MAX; op++) {
        if (vu_blk_hist_type_of_op[op] == (int)job->type) {
            q->hist_of_op[op] = job->h;
        }
    }
    job->h = old;
}

static void vu_blk_hist_swap_fn(VirtQueue *vq, void *opaque)
{
    vu_blk_hist_swap(opaque);
}

void vu_blk_export_set_latency_histogram(VuBlkExport *exp,
                                         VuBlkHistType type,
                                         const LatHist *tmpl)
{
    assert(type < VU_BLK_HIST__MAX);
    for (unsigned int i = 0; i < exp->num_queues; i++) {
        VuBlkHistJob job = { .q = &exp->queues[i], .type = type };

        if (tmpl) {
            job.h = lat_hist_copy(tmpl);
            memset(job.h->bins, 0, (job.h->n + 1) * sizeof(uint64_t));
        }
        if (!vu_server_run_in_queue(exp->server, i, vu_blk_hist_swap_fn,
                                    &job)) {
            vu_blk_hist_swap(&job);
        }
        lat_hist_free(job.h);
    }
}

typedef struct VuBlkHistRead {
    VuBlkQueue *q;
    VuBlkHistType type;
    LatHist *sum;
} VuBlkHistRead;

static void vu_blk_hist_read(VuBlkHistRead *rd)
{
    const LatHist *h = rd->q->hist[rd->type];

    if (!h) {
        return;
    }
    if (!rd->sum) {
        rd->sum = lat_hist_copy(h);
    } else {
        lat_hist_add_bins(rd->sum, h);
    }
}

static void vu_blk_hist_read_fn(VirtQueue *vq, void *opaque)
{
    vu_blk_hist_read(opaque);
}

LatHist *vu_blk_export_get_latency_histogram(VuBlkExport *exp,
                                             VuBlkHistType type)
{
    VuBlkHistRead rd = { .type = type };

    assert(type < VU_BLK_HIST__MAX);
    /* Every queue has one with the same boundaries, or none has. */
    for (unsigned int i = 0; i < exp->num_queues; i++) {
        rd.q = &exp->queues[i];
        if (!vu_server_run_in_queue(exp->server, i, vu_blk_hist_read_fn,
                                    &rd)) {
            vu_blk_hist_read(&rd);
        }
    }
    return rd.sum;
}
