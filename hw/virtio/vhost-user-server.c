/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-user back-end server: socket, session, control messages, queue
 * start/stop.
 *
 * Theory of operation
 *
 * A VuServer listens on one unix socket and serves one front-end (the VMM)
 * at a time; a second connection is accepted and closed at once, with a log
 * line.  Everything in this file runs in the main thread, inside the main
 * AioContext passed at creation: the listening socket and the session
 * socket are fd handlers of that context (the daemon's main loop is a plain
 * aio_poll() loop on it, not a GLib main loop: one loop implementation for
 * every thread).
 *
 * Messages are read without blocking into a per-session buffer (header,
 * then hdr.size bytes of payload), with SCM_RIGHTS fds collected on the
 * way, so a front-end that sends half a message cannot stall the other
 * exports of the process.  Each complete message is checked (version,
 * payload size for its request, fd count) before a handler sees it; a
 * malformed message drops the session with a log line.
 *
 * Queues.  Each queue has a fixed owner AioContext (an iothread's).  The
 * server starts a queue once it has a size, ring addresses, a kick fd, is
 * enabled (with VHOST_USER_F_PROTOCOL_FEATURES negotiated rings start
 * disabled until SET_VRING_ENABLE; without it they are enabled by the kick
 * fd) and guest memory is mapped: it maps the rings (virtqueue_start()) and
 * then, through aio_run_sync(), lets the device install its kick handler in
 * the owner thread.  Stopping is the reverse, and never waits for I/O in
 * the main thread (one export on slow storage must not hold up the
 * others' control messages and accepts): the device removes its handler
 * in the owner thread and reports how many requests are still in flight.
 * With none, the ring pointers are forgotten at once.  Otherwise the
 * queue is DRAINING: the device calls vu_server_queue_drained() from the
 * owner thread when its last request completed, which schedules
 * vu_drain_bh() in the main context; that checks the count again (through
 * aio_run_sync()) and finishes the stop.
 *
 * Any change to what a running queue reads (memory table, ring setup,
 * features, inflight region) is done as stop, change, restart.  A handler
 * whose queues are still draining returns VU_MSG_WAIT before it changes
 * anything: the session then stops reading its socket, keeps the message,
 * and vu_drain_bh() runs it again once the queues stopped (so, e.g.,
 * GET_VRING_BASE is answered only after every request completed, with a
 * base that covers them).  Messages stay in order; the other queues of
 * the session keep running meanwhile.  The one exception is
 * SET_VRING_CALL, which is swapped inside the owner thread without a
 * drain.
 *
 * Whatever a message makes an owner thread do must stay within the
 * iothreads' seccomp allowlist (util/sandbox.c): fds from the front-end
 * are made non-blocking here, in the main thread, before an iothread
 * adopts them (it would die of SIGSYS calling fcntl()); mapping memory,
 * memfds and replies are main-thread work too.  docs/architecture.md has
 * the table of messages and what each runs where.
 *
 * A disconnect (EOF, error, malformed message, or a queue the guest broke)
 * closes the socket at once and stops every queue; once they drained, the
 * guest memory and the inflight region are unmapped and the server
 * accepts the next front-end (until then it waits in the listen backlog).
 *
 * Device state.  The inflight region this server makes has room, after
 * the queues' parts, for a few bytes of device state
 * (VhostUserInflightState): what the driver told the device and the
 * front-end will not tell a restarted back-end again.  The device saves it
 * with vu_server_save_state() whenever it changes; the server writes it to
 * the current region and to every region it maps later.  When
 * SET_INFLIGHT_FD hands a region back (after a back-end restart, or on
 * each start of the same session), the area is copied out once, checked
 * and given to the device's load_state; a missing or malformed area is
 * reported and ignored.
 * Only vu_server_free() (daemon shutdown) waits for the drain in the main
 * thread, since the image is closed right after.
 *
 * Dirty logging (live migration).  The server offers VHOST_F_LOG_ALL and
 * LOG_SHMFD.  SET_LOG_BASE maps the VMM's log (guest_mem_set_log(): one
 * bit per 4 KiB guest page, SIGBUS-guarded, bounds-checked against every
 * region) and replies, as LOG_SHMFD requires; SET_FEATURES with LOG_ALL
 * and SET_VRING_ADDR with VHOST_VRING_F_LOG switch it on.  All three are
 * "stop, change, restart" messages like the others: the queues drain (so
 * every write of the old setting is logged, or not, under that setting),
 * the new setting is installed while nothing runs, and the queues restart
 * with it (virtqueue_set_log()).  The hot path reads a per-queue flag
 * fixed at start, so no lock or atomic is needed to switch it.  The log
 * stays mapped across memory table changes and is unmapped with the
 * session.
 */
#include "qemu/osdep.h"
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include "hw/virtio/vhost-user-server.h"
#include <linux/virtio_config.h>
#include "qemu/error-report.h"
#include "qemu/iothread.h"
#include "qemu/sigbus-guard.h"

#include <linux/virtio_ring.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#define VU_PROTOCOL_FEATURES \
    ((1ULL << VHOST_USER_PROTOCOL_F_MQ) | \
     (1ULL << VHOST_USER_PROTOCOL_F_LOG_SHMFD) | \
     (1ULL << VHOST_USER_PROTOCOL_F_REPLY_ACK) | \
     (1ULL << VHOST_USER_PROTOCOL_F_BACKEND_REQ) | \
     (1ULL << VHOST_USER_PROTOCOL_F_CONFIG) | \
     (1ULL << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD) | \
     (1ULL << VHOST_USER_PROTOCOL_F_RESET_DEVICE) | \
     (1ULL << VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS) | \
     (1ULL << VHOST_USER_PROTOCOL_F_STATUS))

/* Messages handled per wake-up before yielding to other handlers. */
#define VU_MSGS_PER_TURN 32

typedef enum VuQueueState {
    VU_QUEUE_STOPPED,
    VU_QUEUE_RUNNING,           /* the device's kick handler is installed */
    VU_QUEUE_DRAINING,          /* stopped, requests still in flight */
} VuQueueState;

typedef struct VuQueue {
    VuServer *server;
    unsigned int index;
    VirtQueue *vq;
    AioContext *ctx;
    unsigned int num;
    VuQueueState state;
} VuQueue;

/* A received message: header and payload stored apart so the payload is
 * naturally aligned (VhostUserMsg is packed). */
typedef struct VuMsg {
    VhostUserHeader hdr;
    VhostUserPayload payload;
} VuMsg;

/* What a message handler asks the dispatcher to do next. */
typedef enum VuMsgResult {
    VU_MSG_OK,          /* done; ack 0 if the front-end asked for a reply */
    VU_MSG_FAILED,      /* refused; ack nonzero if asked for a reply */
    VU_MSG_REPLIED,     /* the handler sent the request's own reply */
    VU_MSG_DROP,        /* malformed or fatal: drop the session */
    VU_MSG_WAIT,        /* queues are draining: run it again once they are
                         * (the handler changed nothing yet) */
} VuMsgResult;

struct VuServer {
    VuServerConfig cfg;
    char *path;
    char *name;
    AioContext **queue_ctx;

    int listen_fd;
    bool sock_created;
    dev_t sock_dev;
    ino_t sock_ino;

    /* Session */
    int conn_fd;
    int backend_fd;         /* back-end channel (SET_BACKEND_REQ_FD); -1 */
    bool drop_pending;
    bool msg_waiting;       /* s->rx waits for queues to drain; the socket
                             * is not read meanwhile */
    bool closing;           /* closed; queues still draining, no accept */
    void (*idle_fn)(void *opaque);  /* vu_server_set_idle_notify() */
    void *idle_opaque;
    VuMsg rx;
    size_t rx_len;
    int rx_fds[VHOST_USER_MAX_FDS];
    unsigned int rx_nfds;
    bool rx_fds_lost;

    uint64_t features;
    bool features_acked;
    uint64_t protocol_features;
    uint8_t status;
    GuestMemory mem;
    void *inflight_addr;
    size_t inflight_size;
    int inflight_guard;             /* SIGBUS guard handle + 1; 0: none */
    int inflight_fd;                /* kept to explain a fault; -1: none */
    uint64_t inflight_offset;
    uint16_t inflight_queue_size;   /* entries per queue in the region */
    unsigned int inflight_nqueues;  /* queues the region covers */
    uint16_t inflight_region_nq;    /* num_queues the region was made for */
    bool inflight_packed;           /* laid out for packed rings */
    /* Device-state area of the region (NULL: the region has no room) */
    VhostUserInflightState *inflight_state;
    /* Last vu_server_save_state(); kept across sessions */
    uint8_t dev_state[VHOST_USER_INFLIGHT_STATE_DATA_MAX];
    uint16_t dev_state_len;
    VuQueue *queues;

    QEMUBH *broken_bh;
    _Atomic bool broken;
    QEMUBH *drain_bh;               /* a draining queue may be done */
    bool spoke;                     /* this session sent a full message */
    uint64_t unknown_logged[4];     /* bitmap of request numbers < 256 */
    VuServerStats stats;
};

static void vu_session_close(VuServer *s, const char *why);
static void vu_conn_read(void *opaque);
static void vu_accept(void *opaque);
static bool vu_logging(VuServer *s);

/* ---- queues ---------------------------------------------------------- */

static void vu_queue_start_fn(void *opaque)
{
    VuQueue *q = opaque;
    VuServer *s = q->server;

    s->cfg.ops->queue_start(s->cfg.opaque, q->index, q->vq, q->num);
}

typedef struct VuQueueCount {
    VuQueue *q;
    unsigned int inflight;
} VuQueueCount;

static void vu_queue_count_fn(void *opaque)
{
    VuQueueCount *c = opaque;
    VuServer *s = c->q->server;

    c->inflight = s->cfg.ops->queue_inflight(s->cfg.opaque, c->q->index);
    if (c->inflight == 0) {
        /* Interrupt the driver for the last completions, if it wants one. */
        virtqueue_notify(c->q->vq);
    }
}

static void vu_queue_stop_fn(void *opaque)
{
    VuQueueCount *c = opaque;
    VuServer *s = c->q->server;

    s->cfg.ops->queue_stop(s->cfg.opaque, c->q->index, c->q->vq);
    vu_queue_count_fn(c);
}

/* Whether the driver negotiated packed rings. */
static bool vu_packed(VuServer *s)
{
    return s->features & (1ULL << VIRTIO_F_RING_PACKED);
}

static bool vu_queue_can_run(VuServer *s, VuQueue *q)
{
    return s->conn_fd >= 0 && s->mem.nregions > 0 &&
           virtqueue_is_ready(q->vq) && virtqueue_is_enabled(q->vq) &&
           !virtqueue_is_broken(q->vq);
}

/* Start @q if everything it needs is there.  Returns false only when it
 * should have started and could not. */
static bool vu_queue_update(VuServer *s, VuQueue *q)
{
    GError *err = NULL;

    if (q->state != VU_QUEUE_STOPPED || !vu_queue_can_run(s, q)) {
        return true;
    }
    if (s->inflight_addr && q->index < s->inflight_nqueues &&
        q->num > s->inflight_queue_size) {
        /* The region has room for inflight_queue_size heads per queue:
         * tracking more would write past this queue's part of it. */
        warn_report("%s: queue %u cannot start: it has %u entries but the "
                    "inflight region was made for %u", s->name, q->index,
                    q->num, s->inflight_queue_size);
        return false;
    }
    if (s->inflight_addr && q->index < s->inflight_nqueues &&
        s->inflight_packed != vu_packed(s)) {
        warn_report("%s: queue %u cannot start: the inflight region is laid "
                    "out for %s rings but the driver negotiated %s ones "
                    "(the front-end must ask for a new region with "
                    "GET_INFLIGHT_FD after changing VIRTIO_F_RING_PACKED)",
                    s->name, q->index, s->inflight_packed ? "packed" : "split",
                    vu_packed(s) ? "packed" : "split");
        return false;
    }
    virtqueue_set_event_idx(q->vq,
                            s->features & (1ULL << VIRTIO_RING_F_EVENT_IDX));
    virtqueue_set_packed(q->vq, vu_packed(s));
    virtqueue_set_log(q->vq, vu_logging(s));
    if (!virtqueue_start(q->vq, &s->mem, &err)) {
        warn_report("%s: queue %u cannot start: %s", s->name, q->index,
                    err->message);
        g_error_free(err);
        return false;
    }
    aio_run_sync(q->ctx, vu_queue_start_fn, q);
    q->state = VU_QUEUE_RUNNING;
    /* One interrupt at start, as libvhost-user sends: nothing completed
     * before a reconnect goes unnoticed by a driver waiting for it. */
    virtqueue_signal_call(q->vq);
    debug_report("%s: queue %u started (size %u)", s->name, q->index,
                 q->num);
    return true;
}

static bool vu_update_all(VuServer *s)
{
    bool ok = true;

    for (unsigned int i = 0; i < s->cfg.num_queues; i++) {
        ok &= vu_queue_update(s, &s->queues[i]);
    }
    return ok;
}

/* Every request of @q completed: forget the rings. */
static void vu_queue_finish_stop(VuServer *s, VuQueue *q)
{
    virtqueue_stop(q->vq);
    q->state = VU_QUEUE_STOPPED;
    debug_report("%s: queue %u stopped", s->name, q->index);
}

/*
 * Stop @q: the device stops taking requests at once (in the owner
 * thread).  Returns true when the queue is stopped; false while requests
 * are still in flight (VU_QUEUE_DRAINING): the device then calls
 * vu_server_queue_drained() after the last one, and vu_drain_bh()
 * finishes the stop.  Never waits for I/O.
 */
static bool vu_queue_stop(VuServer *s, VuQueue *q)
{
    VuQueueCount c = { .q = q };

    switch (q->state) {
    case VU_QUEUE_STOPPED:
        return true;
    case VU_QUEUE_DRAINING:
        return false;
    case VU_QUEUE_RUNNING:
        break;
    }
    aio_run_sync(q->ctx, vu_queue_stop_fn, &c);
    if (c.inflight) {
        q->state = VU_QUEUE_DRAINING;
        debug_report("%s: queue %u: stopping, %u requests in flight",
                     s->name, q->index, c.inflight);
        return false;
    }
    vu_queue_finish_stop(s, q);
    return true;
}

/* Stop every queue (all at once, so they drain in parallel).  True when
 * all are stopped. */
static bool vu_stop_all(VuServer *s)
{
    bool stopped = true;

    for (unsigned int i = 0; i < s->cfg.num_queues; i++) {
        stopped &= vu_queue_stop(s, &s->queues[i]);
    }
    return stopped;
}

/* Finish the stop of each draining queue whose requests all completed.
 * True when no queue is draining any more. */
static bool vu_poll_drained(VuServer *s)
{
    bool drained = true;

    for (unsigned int i = 0; i < s->cfg.num_queues; i++) {
        VuQueue *q = &s->queues[i];
        VuQueueCount c = { .q = q };

        if (q->state != VU_QUEUE_DRAINING) {
            continue;
        }
        aio_run_sync(q->ctx, vu_queue_count_fn, &c);
        if (c.inflight) {
            drained = false;
        } else {
            vu_queue_finish_stop(s, q);
        }
    }
    return drained;
}

/* Server teardown only: wait, blocking the main thread, until every queue
 * drained (in-flight I/O must land before the image is closed). */
static void vu_drain_sync(VuServer *s)
{
    gint64 start = g_get_monotonic_time();
    gint64 next_warn = start + 5 * G_USEC_PER_SEC;

    while (!vu_poll_drained(s)) {
        if (g_get_monotonic_time() > next_warn) {
            warn_report("%s: still waiting for in-flight requests after "
                        "%" PRId64 " s", s->name,
                        (g_get_monotonic_time() - start) / G_USEC_PER_SEC);
            next_warn += 5 * G_USEC_PER_SEC;
        }
        g_usleep(1000);
    }
}

/* Forget every queue's state (after vu_stop_all()). */
static void vu_reset_queues(VuServer *s)
{
    for (unsigned int i = 0; i < s->cfg.num_queues; i++) {
        VuQueue *q = &s->queues[i];

        assert(q->state == VU_QUEUE_STOPPED);
        if (q->vq) {
            virtqueue_free(q->vq);
        }
        q->vq = virtqueue_new(i);
        q->num = 0;
    }
}

static void vu_inflight_unmap(VuServer *s)
{
    for (unsigned int i = 0; i < s->cfg.num_queues; i++) {
        virtqueue_set_inflight(s->queues[i].vq, NULL);
    }
    if (s->inflight_guard) {
        sigbus_guard_remove(s->inflight_guard - 1);
        s->inflight_guard = 0;
    }
    if (s->inflight_addr) {
        munmap(s->inflight_addr, s->inflight_size);
        s->inflight_addr = NULL;
        s->inflight_size = 0;
    }
    if (s->inflight_fd >= 0) {
        close(s->inflight_fd);
        s->inflight_fd = -1;
    }
    s->inflight_offset = 0;
    s->inflight_queue_size = 0;
    s->inflight_nqueues = 0;
    s->inflight_region_nq = 0;
    s->inflight_state = NULL;
}

/*
 * Queues stopped.  Point each queue at its part of the inflight region
 * (@addr, @size: the mapping of @fd at @offset; @fd is taken).
 *
 * The front-end owns the file: one that was not sealed against shrinking
 * (QEMU hands back the region the back-end made, sealed; a hostile VMM
 * need not) can be truncated under us, and the next store there would be
 * SIGBUS for the whole process.  The region is guarded like guest memory
 * and shares its fault flag, so a fault breaks the queue at the end of
 * its batch (virtqueue_check_memory()) and costs this session only.
 */
static void vu_inflight_install(VuServer *s, void *addr, size_t size,
                                unsigned int nq, uint16_t queue_size,
                                int fd, uint64_t offset, bool packed)
{
    size_t per_queue = vhost_user_inflight_queue_size_fmt(queue_size, packed);

    vu_inflight_unmap(s);
    if (sigbus_guard_install(NULL)) {
        /* the mapping, and so a fault, covers whole pages */
        size_t page = getpagesize();
        size_t mapped = (size + page - 1) / page * page;

        s->inflight_guard = sigbus_guard_add(addr, mapped,
                                             &s->mem.faulted) + 1;
    }
    if (!s->inflight_guard) {
        warn_report("%s: inflight region not guarded against SIGBUS "
                    "(handler or slots unavailable): a front-end that "
                    "shrinks its file can kill the process", s->name);
    }
    s->inflight_fd = fd;
    s->inflight_offset = offset;
    s->inflight_addr = addr;
    s->inflight_size = size;
    s->inflight_queue_size = queue_size;
    s->inflight_nqueues = MIN(nq, s->cfg.num_queues);
    s->inflight_region_nq = nq;
    s->inflight_packed = packed;
    if (size >= vhost_user_inflight_state_offset_fmt(nq, queue_size, packed) +
                sizeof(VhostUserInflightState)) {
        s->inflight_state = (VhostUserInflightState *)
            ((uint8_t *)addr +
             vhost_user_inflight_state_offset_fmt(nq, queue_size, packed));
    }
    for (unsigned int i = 0; i < nq && i < s->cfg.num_queues; i++) {
        virtqueue_set_inflight(s->queues[i].vq,
                               (uint8_t *)addr + i * per_queue);
    }
}

/*
 * Write the device-state area of the current region, if it has one, from
 * the last saved state.  One memcpy of the whole area: the header bytes
 * are the same each time, so a back-end killed in the middle leaves each
 * data byte either old or new, never a broken header.
 */
static void vu_inflight_state_write(VuServer *s)
{
    VhostUserInflightState st = {
        .magic = VHOST_USER_INFLIGHT_STATE_MAGIC,
        .version = VHOST_USER_INFLIGHT_STATE_VERSION,
        .data_len = s->dev_state_len,
        .num_queues = s->inflight_region_nq,
        .queue_size = s->inflight_queue_size,
    };

    if (!s->inflight_state) {
        return;
    }
    memcpy(st.data, s->dev_state, s->dev_state_len);
    /* Guarded like the rest of the region: a front-end that shrank the
     * file makes this store land in a private zero page, not SIGBUS. */
    memcpy(s->inflight_state, &st, sizeof(st));
}

/*
 * SET_INFLIGHT_FD installed a region made for @in's geometry: give the
 * device the state saved in it, if the area is there and well-formed.
 * The front-end can change the region at any time, so the area is copied
 * out once and only the copy is checked and used.
 */
static void vu_inflight_state_load(VuServer *s, const VhostUserInflight *in)
{
    VhostUserInflightState st;

    if (!s->inflight_state) {
        warn_report("%s: the inflight region (%" PRIu64 " bytes) has no "
                    "device state after its %u queues of %u entries (made "
                    "by an older back-end?): the driver's settings, such "
                    "as the write-cache mode, are not restored", s->name,
                    in->mmap_size, in->num_queues, in->queue_size);
        return;
    }
    memcpy(&st, s->inflight_state, sizeof(st));
    if (st.magic != VHOST_USER_INFLIGHT_STATE_MAGIC ||
        st.version != VHOST_USER_INFLIGHT_STATE_VERSION ||
        st.num_queues != in->num_queues || st.queue_size != in->queue_size ||
        st.data_len > VHOST_USER_INFLIGHT_STATE_DATA_MAX) {
        warn_report("%s: the inflight region's device state is not valid "
                    "(magic 0x%08" PRIx32 ", version %u, %u bytes, for %u "
                    "queues of %u entries); ignored: the driver's settings, "
                    "such as the write-cache mode, are not restored",
                    s->name, st.magic, st.version, st.data_len,
                    st.num_queues, st.queue_size);
        return;
    }
    if (s->cfg.ops->load_state) {
        s->cfg.ops->load_state(s->cfg.opaque, st.data, st.data_len);
    }
}

/* ---- sending --------------------------------------------------------- */

static bool vu_send(VuServer *s, const VuMsg *req, const void *payload,
                    uint32_t size, int fd)
{
    VhostUserHeader hdr = {
        .request = req->hdr.request,
        .flags = VHOST_USER_VERSION | VHOST_USER_REPLY_MASK,
        .size = size,
    };
    struct iovec iov[2] = {
        { .iov_base = &hdr, .iov_len = sizeof(hdr) },
        { .iov_base = (void *)payload, .iov_len = size },
    };
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    struct msghdr mh = {
        .msg_iov = iov,
        .msg_iovlen = size ? 2 : 1,
    };
    ssize_t n;

    if (fd >= 0) {
        struct cmsghdr *cmsg;

        memset(&control, 0, sizeof(control));
        mh.msg_control = control.buf;
        mh.msg_controllen = sizeof(control.buf);
        cmsg = CMSG_FIRSTHDR(&mh);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
    }
    do {
        n = sendmsg(s->conn_fd, &mh, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)(sizeof(hdr) + size)) {
        warn_report("%s: cannot send %s reply: %s", s->name,
                    vhost_user_request_name(req->hdr.request),
                    n < 0 ? g_strerror(errno) : "short write");
        s->drop_pending = true;
        return false;
    }
    return true;
}

static bool vu_reply_u64(VuServer *s, const VuMsg *req, uint64_t v)
{
    return vu_send(s, req, &v, sizeof(v), -1);
}

/* ---- message handlers ------------------------------------------------- */

/* Take fd @i of the current message (the dispatcher closes the others). */
static int vu_take_fd(VuServer *s, unsigned int i)
{
    int fd = s->rx_fds[i];

    s->rx_fds[i] = -1;
    return fd;
}

static VuQueue *vu_get_queue(VuServer *s, uint32_t index, const char *req)
{
    if (index >= s->cfg.num_queues) {
        warn_report("%s: %s for queue %" PRIu32 ", but the export has %u",
                    s->name, req, index, s->cfg.num_queues);
        return NULL;
    }
    return &s->queues[index];
}

static uint64_t vu_offered_features(VuServer *s)
{
    return s->cfg.ops->get_features(s->cfg.opaque) |
           (1ULL << VHOST_USER_F_PROTOCOL_FEATURES) |
           (1ULL << VHOST_F_LOG_ALL);
}

static bool vu_logging(VuServer *s)
{
    return s->features & (1ULL << VHOST_F_LOG_ALL);
}

/*
 * With logging on, every guest page must have a bit in the log (a write
 * outside it could not be recorded: the page would migrate stale).  QEMU
 * grows the log before it adds memory; a front-end that does not gets
 * its session dropped.
 */
static bool vu_log_check(VuServer *s)
{
    GError *err = NULL;

    if (!vu_logging(s) || !s->mem.log) {
        return true;
    }
    if (!guest_mem_log_check_regions(&s->mem, &err)) {
        warn_report("%s: %s", s->name, err->message);
        g_error_free(err);
        return false;
    }
    return true;
}

static void vu_log_clear(VuServer *s)
{
    guest_mem_clear_log(&s->mem);
    if (s->mem.log_call_fd >= 0) {
        close(s->mem.log_call_fd);
        s->mem.log_call_fd = -1;
    }
}

static VuMsgResult vu_set_features(VuServer *s, uint64_t features)
{
    uint64_t offered = vu_offered_features(s);

    if (features & ~offered) {
        warn_report("%s: front-end acked features 0x%" PRIx64
                    " that were not offered", s->name, features & ~offered);
        return VU_MSG_FAILED;
    }
    if (!vu_stop_all(s)) {
        return VU_MSG_WAIT;
    }
    if (!s->features_acked || s->features != features) {
        /* Once per change (control path): which ring format is in use is
         * the first thing to know when a guest misbehaves. */
        info_report("%s: features 0x%" PRIx64 " negotiated: %s virtqueues%s",
                    s->name, features,
                    features & (1ULL << VIRTIO_F_RING_PACKED) ? "packed"
                                                               : "split",
                    features & (1ULL << VIRTIO_RING_F_EVENT_IDX) ?
                    ", event-idx" : "");
    }
    if ((features ^ s->features) & (1ULL << VHOST_F_LOG_ALL)) {
        info_report("%s: dirty logging %s", s->name,
                    features & (1ULL << VHOST_F_LOG_ALL) ?
                    (s->mem.log ? "on" : "on (no log yet)") : "off");
    }
    s->features = features;
    s->features_acked = true;
    if (s->cfg.ops->set_features) {
        s->cfg.ops->set_features(s->cfg.opaque,
                                 features & ~(1ULL << VHOST_F_LOG_ALL));
    }
    if (!vu_log_check(s)) {
        return VU_MSG_DROP;
    }
    if (!(features & (1ULL << VHOST_USER_F_PROTOCOL_FEATURES))) {
        /* Without the protocol feature, rings are enabled from the start. */
        for (unsigned int i = 0; i < s->cfg.num_queues; i++) {
            virtqueue_set_enabled(s->queues[i].vq, true);
        }
    }
    vu_update_all(s);
    return VU_MSG_OK;
}

static VuMsgResult vu_reset_session_state(VuServer *s)
{
    if (!vu_stop_all(s)) {
        return VU_MSG_WAIT;
    }
    vu_inflight_unmap(s);
    vu_reset_queues(s);
    guest_mem_clear(&s->mem);
    vu_log_clear(s);
    s->features = 0;
    s->features_acked = false;
    s->status = 0;
    if (s->cfg.ops->reset) {
        s->cfg.ops->reset(s->cfg.opaque);
    }
    return VU_MSG_OK;
}

static VuMsgResult vu_set_mem_table(VuServer *s, VuMsg *msg)
{
    VhostUserMemory *m = &msg->payload.memory;
    GError *err = NULL;
    VuMsgResult ret = VU_MSG_OK;

    if (msg->hdr.size < 8 || m->nregions > VHOST_USER_MEM_REGIONS_MAX ||
        msg->hdr.size != 8 + m->nregions * sizeof(VhostUserMemoryRegion) ||
        s->rx_nfds != m->nregions) {
        warn_report("%s: malformed SET_MEM_TABLE (size %" PRIu32
                    ", %" PRIu32 " regions, %u fds)", s->name, msg->hdr.size,
                    m->nregions, s->rx_nfds);
        return VU_MSG_DROP;
    }
    if (!vu_stop_all(s)) {
        return VU_MSG_WAIT;
    }
    guest_mem_clear(&s->mem);
    for (uint32_t i = 0; i < m->nregions; i++) {
        if (!guest_mem_add_region(&s->mem, &m->regions[i], s->rx_fds[i],
                                  &err)) {
            warn_report("%s: SET_MEM_TABLE region %" PRIu32 ": %s", s->name,
                        i, err->message);
            g_clear_error(&err);
            guest_mem_clear(&s->mem);
            ret = VU_MSG_FAILED;
            break;
        }
    }
    if (ret == VU_MSG_OK) {
        debug_report("%s: memory table with %" PRIu32 " regions", s->name,
                     m->nregions);
    }
    if (!vu_log_check(s)) {
        return VU_MSG_DROP;
    }
    vu_update_all(s);
    return ret;
}

static VuMsgResult vu_add_mem_reg(VuServer *s, VuMsg *msg)
{
    GError *err = NULL;
    VuMsgResult ret = VU_MSG_OK;

    if (s->rx_nfds != 1) {
        warn_report("%s: ADD_MEM_REG with %u fds", s->name, s->rx_nfds);
        return VU_MSG_DROP;
    }
    if (!vu_stop_all(s)) {
        return VU_MSG_WAIT;
    }
    if (!guest_mem_add_region(&s->mem, &msg->payload.memreg.region,
                              s->rx_fds[0], &err)) {
        warn_report("%s: ADD_MEM_REG: %s", s->name, err->message);
        g_error_free(err);
        ret = VU_MSG_FAILED;
    }
    if (!vu_log_check(s)) {
        return VU_MSG_DROP;
    }
    vu_update_all(s);
    return ret;
}

/* The spec: no fd SHOULD come with it, but for front-ends that send one
 * the back-end MAY accept it and must close it unused (vu_rx_reset() does,
 * after the reply). */
static VuMsgResult vu_rem_mem_reg(VuServer *s, VuMsg *msg)
{
    GError *err = NULL;
    VuMsgResult ret = VU_MSG_OK;

    if (!vu_stop_all(s)) {
        return VU_MSG_WAIT;
    }
    if (!guest_mem_remove_region(&s->mem, &msg->payload.memreg.region,
                                 &err)) {
        warn_report("%s: REM_MEM_REG: %s", s->name, err->message);
        g_error_free(err);
        ret = VU_MSG_FAILED;
    }
    vu_update_all(s);
    return ret;
}

static VuMsgResult vu_set_vring_num(VuServer *s, VuMsg *msg)
{
    VhostUserVringState *st = &msg->payload.state;
    VuQueue *q = vu_get_queue(s, st->index, "SET_VRING_NUM");
    GError *err = NULL;

    if (!q) {
        return VU_MSG_FAILED;
    }
    if (st->num == 0 || st->num > s->cfg.max_queue_size) {
        warn_report("%s: queue %u: size %" PRIu32 " (1..%u accepted)",
                    s->name, q->index, st->num, s->cfg.max_queue_size);
        return VU_MSG_FAILED;
    }
    if (!vu_queue_stop(s, q)) {
        return VU_MSG_WAIT;
    }
    if (!virtqueue_set_num(q->vq, st->num, &err)) {
        warn_report("%s: queue %u: %s", s->name, q->index, err->message);
        g_error_free(err);
        /* Refused: the queue goes on as it was. */
        vu_queue_update(s, q);
        return VU_MSG_FAILED;
    }
    q->num = st->num;
    return vu_queue_update(s, q) ? VU_MSG_OK : VU_MSG_FAILED;
}

static VuMsgResult vu_set_vring_addr(VuServer *s, VuMsg *msg)
{
    VuQueue *q = vu_get_queue(s, msg->payload.addr.index, "SET_VRING_ADDR");
    GError *err = NULL;

    if (!q) {
        return VU_MSG_FAILED;
    }
    if (!vu_queue_stop(s, q)) {
        return VU_MSG_WAIT;
    }
    if (!virtqueue_set_addr(q->vq, &msg->payload.addr, &err)) {
        warn_report("%s: queue %u: %s", s->name, q->index, err->message);
        g_error_free(err);
        /* Refused: the queue goes on with its old addresses. */
        vu_queue_update(s, q);
        return VU_MSG_FAILED;
    }
    return vu_queue_update(s, q) ? VU_MSG_OK : VU_MSG_FAILED;
}

static VuMsgResult vu_set_vring_base(VuServer *s, VuMsg *msg)
{
    VhostUserVringState *st = &msg->payload.state;
    VuQueue *q = vu_get_queue(s, st->index, "SET_VRING_BASE");

    if (!q) {
        return VU_MSG_FAILED;
    }
    /* Packed rings: 32 bits, checked when the queue starts. */
    if (st->num > UINT16_MAX && !vu_packed(s)) {
        warn_report("%s: queue %u: base %" PRIu32 " out of range", s->name,
                    q->index, st->num);
        return VU_MSG_FAILED;
    }
    if (!vu_queue_stop(s, q)) {
        return VU_MSG_WAIT;
    }
    virtqueue_set_base(q->vq, st->num);
    vu_queue_update(s, q);
    return VU_MSG_OK;
}

static VuMsgResult vu_get_vring_base(VuServer *s, VuMsg *msg)
{
    VhostUserVringState st = { .index = msg->payload.state.index };
    VuQueue *q = vu_get_queue(s, st.index, "GET_VRING_BASE");

    if (!q) {
        /* The front-end waits for a reply we cannot give. */
        return VU_MSG_DROP;
    }
    /* The base must cover every request: reply once all completed. */
    if (!vu_queue_stop(s, q)) {
        return VU_MSG_WAIT;
    }
    st.num = virtqueue_get_base(q->vq);
    /* The ring is stopped until the front-end sends a new kick fd. */
    virtqueue_set_kick_fd(q->vq, -1);
    debug_report("%s: queue %u: GET_VRING_BASE -> %" PRIu32, s->name,
                 q->index, st.num);
    vu_send(s, msg, &st, sizeof(st), -1);
    return VU_MSG_REPLIED;
}

typedef struct VuSetCall {
    VuQueue *q;
    int fd;
} VuSetCall;

static void vu_set_call_fn(void *opaque)
{
    VuSetCall *c = opaque;

    virtqueue_set_call_fd(c->q->vq, c->fd);
    /* What was signalled on the old fd may never have been read. */
    virtqueue_signal_call(c->q->vq);
}

static VuMsgResult vu_set_vring_fd(VuServer *s, VuMsg *msg)
{
    uint32_t req = msg->hdr.request;
    uint64_t v = msg->payload.u64;
    bool nofd = v & VHOST_USER_VRING_NOFD_MASK;
    VuQueue *q;
    int fd = -1;

    if (!nofd && s->rx_nfds < 1) {
        warn_report("%s: %s without an fd", s->name,
                    vhost_user_request_name(req));
        return VU_MSG_DROP;
    }
    q = vu_get_queue(s, v & VHOST_USER_VRING_IDX_MASK,
                     vhost_user_request_name(req));
    if (!q) {
        return VU_MSG_FAILED;
    }
    if (req == VHOST_USER_SET_VRING_KICK && !vu_queue_stop(s, q)) {
        return VU_MSG_WAIT;     /* before taking the fd: run again later */
    }
    if (!nofd) {
        fd = vu_take_fd(s, 0);
    }
    if (fd >= 0 && req != VHOST_USER_SET_VRING_ERR) {
        int r;

        /*
         * Here, in the main thread: a running queue's call fd is swapped
         * in its iothread, whose seccomp filter allows no fcntl().  The
         * owner thread only adopts the prepared fd (and closes the old
         * one).
         */
        r = event_notifier_prepare_fd(fd);
        if (r < 0) {
            warn_report("%s: queue %u: %s: cannot make the fd non-blocking: "
                        "%s", s->name, q->index, vhost_user_request_name(req),
                        g_strerror(-r));
            close(fd);
            if (req == VHOST_USER_SET_VRING_KICK) {
                vu_queue_update(s, q);
            }
            return VU_MSG_FAILED;
        }
    }

    switch (req) {
    case VHOST_USER_SET_VRING_KICK:
        virtqueue_set_kick_fd(q->vq, fd);
        if (s->features_acked &&
            !(s->features & (1ULL << VHOST_USER_F_PROTOCOL_FEATURES))) {
            virtqueue_set_enabled(q->vq, true);
        }
        if (nofd) {
            warn_report("%s: queue %u: polling mode (no kick fd) is not "
                        "supported", s->name, q->index);
        }
        return vu_queue_update(s, q) ? VU_MSG_OK : VU_MSG_FAILED;
    case VHOST_USER_SET_VRING_CALL:
        if (q->state != VU_QUEUE_STOPPED) {
            VuSetCall c = { .q = q, .fd = fd };

            aio_run_sync(q->ctx, vu_set_call_fn, &c);
        } else {
            virtqueue_set_call_fd(q->vq, fd);
        }
        return VU_MSG_OK;
    default: /* SET_VRING_ERR: we never report errors through it */
        if (fd >= 0) {
            close(fd);
        }
        return VU_MSG_OK;
    }
}

static VuMsgResult vu_set_vring_enable(VuServer *s, VuMsg *msg)
{
    VhostUserVringState *st = &msg->payload.state;
    VuQueue *q = vu_get_queue(s, st->index, "SET_VRING_ENABLE");

    if (!q) {
        return VU_MSG_FAILED;
    }
    if (st->num > 1) {
        warn_report("%s: queue %u: SET_VRING_ENABLE %" PRIu32, s->name,
                    q->index, st->num);
        return VU_MSG_FAILED;
    }
    if (!st->num && !vu_queue_stop(s, q)) {
        return VU_MSG_WAIT;
    }
    virtqueue_set_enabled(q->vq, st->num);
    return vu_queue_update(s, q) ? VU_MSG_OK : VU_MSG_FAILED;
}

static VuMsgResult vu_get_config(VuServer *s, VuMsg *msg)
{
    VhostUserConfig *in = &msg->payload.config;
    VhostUserConfig out = {
        .offset = in->offset,
        .size = in->size,
        .flags = in->flags,
    };

    if (in->size > VHOST_USER_MAX_CONFIG_SIZE ||
        in->offset > VHOST_USER_MAX_CONFIG_SIZE - in->size ||
        !s->cfg.ops->get_config(s->cfg.opaque, out.region, in->offset,
                                in->size)) {
        warn_report("%s: GET_CONFIG of %" PRIu32 " bytes at %" PRIu32
                    " refused", s->name, in->size, in->offset);
        out.size = 0;
    }
    vu_send(s, msg, &out, VHOST_USER_CONFIG_HDR_SIZE + out.size, -1);
    return VU_MSG_REPLIED;
}

static VuMsgResult vu_set_config(VuServer *s, VuMsg *msg)
{
    VhostUserConfig *in = &msg->payload.config;

    if (msg->hdr.size != VHOST_USER_CONFIG_HDR_SIZE + in->size ||
        in->size > VHOST_USER_MAX_CONFIG_SIZE ||
        in->offset > VHOST_USER_MAX_CONFIG_SIZE - in->size) {
        warn_report("%s: malformed SET_CONFIG", s->name);
        return VU_MSG_DROP;
    }
    if (!s->cfg.ops->set_config ||
        !s->cfg.ops->set_config(s->cfg.opaque, in->region, in->offset,
                                in->size)) {
        warn_report("%s: SET_CONFIG of %" PRIu32 " bytes at %" PRIu32
                    " refused", s->name, in->size, in->offset);
        return VU_MSG_FAILED;
    }
    return VU_MSG_OK;
}

/* The front-end's end of the back-end channel: we only send on it. */
static VuMsgResult vu_set_backend_req_fd(VuServer *s, VuMsg *msg)
{
    int fd;

    if (s->rx_nfds != 1) {
        warn_report("%s: SET_BACKEND_REQ_FD without a file descriptor",
                    s->name);
        return VU_MSG_DROP;
    }
    fd = vu_take_fd(s, 0);
    if (s->backend_fd >= 0) {
        close(s->backend_fd);
    }
    /* A front-end that stops reading must not block the main thread. */
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
        warn_report("%s: back-end channel: %s", s->name, g_strerror(errno));
        close(fd);
        s->backend_fd = -1;
        return VU_MSG_FAILED;
    }
    s->backend_fd = fd;
    return VU_MSG_OK;
}

static void vu_backend_channel_close(VuServer *s)
{
    if (s->backend_fd >= 0) {
        close(s->backend_fd);
        s->backend_fd = -1;
    }
}

static bool vu_inflight_geometry_ok(VuServer *s, const VhostUserInflight *in)
{
    if (in->num_queues == 0 || in->num_queues > s->cfg.num_queues ||
        in->queue_size == 0 || in->queue_size > VIRTQUEUE_MAX_SIZE) {
        warn_report("%s: inflight region for %u queues of %u entries "
                    "refused (export: %u queues, at most %u entries)",
                    s->name, in->num_queues, in->queue_size,
                    s->cfg.num_queues, VIRTQUEUE_MAX_SIZE);
        return false;
    }
    return true;
}

static VuMsgResult vu_get_inflight_fd(VuServer *s, VuMsg *msg)
{
    VhostUserInflight out = msg->payload.inflight;
    size_t size;
    void *addr;
    int fd;

    out.mmap_size = 0;
    out.mmap_offset = 0;
    if (!vu_inflight_geometry_ok(s, &msg->payload.inflight)) {
        vu_send(s, msg, &out, sizeof(out), -1);
        return VU_MSG_REPLIED;
    }
    if (!vu_stop_all(s)) {
        return VU_MSG_WAIT;
    }
    /* SET_FEATURES came first (QEMU sends it before GET_INFLIGHT_FD), so
     * the ring format, and with it the layout, is known. */
    size = vhost_user_inflight_state_offset_fmt(out.num_queues,
                                                out.queue_size,
                                                vu_packed(s)) +
           VHOST_USER_INFLIGHT_STATE_SIZE;
    fd = memfd_create("vhost-blk-inflight", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, size) < 0) {
        warn_report("%s: cannot create the inflight region: %s", s->name,
                    g_strerror(errno));
        goto fail;
    }
    /* The front-end must not shrink it under us. */
    fcntl(fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
    addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
        warn_report("%s: cannot map the inflight region: %s", s->name,
                    g_strerror(errno));
        goto fail;
    }
    vu_inflight_install(s, addr, size, out.num_queues, out.queue_size, fd, 0,
                        vu_packed(s));
    vu_inflight_state_write(s);
    out.mmap_size = size;
    vu_send(s, msg, &out, sizeof(out), fd);
    vu_update_all(s);
    return VU_MSG_REPLIED;

fail:
    if (fd >= 0) {
        close(fd);
    }
    vu_send(s, msg, &out, sizeof(out), -1);
    vu_update_all(s);           /* the old region, if any, goes on */
    return VU_MSG_REPLIED;
}

static VuMsgResult vu_set_inflight_fd(VuServer *s, VuMsg *msg)
{
    VhostUserInflight *in = &msg->payload.inflight;
    struct stat st;
    size_t need;
    void *addr;
    int fd;

    if (s->rx_nfds != 1) {
        warn_report("%s: SET_INFLIGHT_FD with %u fds", s->name, s->rx_nfds);
        return VU_MSG_DROP;
    }
    if (!vu_inflight_geometry_ok(s, in)) {
        return VU_MSG_FAILED;
    }
    fd = s->rx_fds[0];
    /* A region without a device-state area (an older back-end's) is
     * still used for the queues. */
    need = vhost_user_inflight_state_offset_fmt(in->num_queues,
                                                in->queue_size, vu_packed(s));
    if (in->mmap_size < need || in->mmap_size > SIZE_MAX / 2 ||
        in->mmap_offset % getpagesize() ||
        in->mmap_offset > UINT64_MAX - in->mmap_size ||
        fstat(fd, &st) < 0 ||
        (uint64_t)st.st_size < in->mmap_offset + in->mmap_size) {
        warn_report("%s: SET_INFLIGHT_FD: region of %" PRIu64 " bytes at "
                    "offset %" PRIu64 " does not fit %u queues of %u entries "
                    "or the file", s->name, in->mmap_size, in->mmap_offset,
                    in->num_queues, in->queue_size);
        return VU_MSG_FAILED;
    }
    if (!vu_stop_all(s)) {
        return VU_MSG_WAIT;
    }
    addr = mmap(NULL, in->mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                in->mmap_offset);
    if (addr == MAP_FAILED) {
        warn_report("%s: SET_INFLIGHT_FD: mmap: %s", s->name,
                    g_strerror(errno));
        vu_update_all(s);
        return VU_MSG_FAILED;
    }
    vu_inflight_install(s, addr, in->mmap_size, in->num_queues,
                        in->queue_size, vu_take_fd(s, 0), in->mmap_offset,
                        vu_packed(s));
    vu_inflight_state_load(s, in);
    /* A good area now holds what the device went on with; a bad one (with
     * room) gets a good one. */
    vu_inflight_state_write(s);
    debug_report("%s: inflight region: %u queues of %u entries", s->name,
                 in->num_queues, in->queue_size);
    return vu_update_all(s) ? VU_MSG_OK : VU_MSG_FAILED;
}

/*
 * SET_LOG_BASE (LOG_SHMFD): the VMM's dirty log, mmap_size bytes of the
 * fd at mmap_offset.  The front-end waits for a reply before it uses the
 * log (and before it frees the previous one), so the reply goes out only
 * after every queue drained into the old log and restarted with the new.
 * A log that cannot be used drops the session: going on without logging
 * would let the migration copy stale pages.
 */
static VuMsgResult vu_set_log_base(VuServer *s, VuMsg *msg)
{
    const VhostUserLog *lg = &msg->payload.log;
    uint64_t zero = 0;
    GError *err = NULL;

    if (!(s->protocol_features & (1ULL << VHOST_USER_PROTOCOL_F_LOG_SHMFD))) {
        warn_report("%s: SET_LOG_BASE without the LOG_SHMFD protocol "
                    "feature: a log in the front-end's address space is "
                    "not supported", s->name);
        return VU_MSG_DROP;
    }
    if (msg->hdr.size != sizeof(VhostUserLog) || s->rx_nfds != 1) {
        warn_report("%s: malformed SET_LOG_BASE (%" PRIu32 " bytes, %u fds;"
                    " a log description of %zu bytes and one fd expected)",
                    s->name, msg->hdr.size, s->rx_nfds, sizeof(VhostUserLog));
        return VU_MSG_DROP;
    }
    if (!vu_stop_all(s)) {
        return VU_MSG_WAIT;
    }
    if (!guest_mem_set_log(&s->mem, s->rx_fds[0], lg->mmap_size,
                           lg->mmap_offset, &err)) {
        warn_report("%s: SET_LOG_BASE: %s", s->name, err->message);
        g_error_free(err);
        return VU_MSG_DROP;
    }
    if (!guest_mem_log_check_regions(&s->mem, &err)) {
        warn_report("%s: SET_LOG_BASE: %s", s->name, err->message);
        g_error_free(err);
        return VU_MSG_DROP;
    }
    debug_report("%s: dirty log of %" PRIu64 " bytes", s->name,
                 lg->mmap_size);
    vu_send(s, msg, &zero, sizeof(zero), -1);
    vu_update_all(s);
    return VU_MSG_REPLIED;
}

/* SET_LOG_FD: an eventfd to signal after a batch of logged writes (by
 * the queues' iothreads: non-blocking, so that a front-end handing over a
 * full pipe cannot stall them, and made so here, where fcntl() is
 * allowed). */
static VuMsgResult vu_set_log_fd(VuServer *s, VuMsg *msg)
{
    int r;

    if (s->rx_nfds != 1) {
        warn_report("%s: SET_LOG_FD with %u fds (one expected)", s->name,
                    s->rx_nfds);
        return VU_MSG_DROP;
    }
    if (!vu_stop_all(s)) {
        return VU_MSG_WAIT;
    }
    r = event_notifier_prepare_fd(s->rx_fds[0]);
    if (r < 0) {
        warn_report("%s: SET_LOG_FD: cannot make the fd non-blocking: %s",
                    s->name, g_strerror(-r));
        vu_update_all(s);
        return VU_MSG_FAILED;
    }
    if (s->mem.log_call_fd >= 0) {
        close(s->mem.log_call_fd);
    }
    s->mem.log_call_fd = vu_take_fd(s, 0);
    vu_update_all(s);
    return VU_MSG_OK;
}

static void vu_log_unknown(VuServer *s, uint32_t request)
{
    if (request < 256) {
        uint64_t bit = 1ULL << (request % 64);

        if (s->unknown_logged[request / 64] & bit) {
            return;
        }
        s->unknown_logged[request / 64] |= bit;
    }
    warn_report("%s: unsupported request %s (%" PRIu32 ")", s->name,
                vhost_user_request_name(request), request);
}

/* Payload size bounds of each request: [min, max]. */
static bool vu_payload_size_ok(uint32_t request, uint32_t size)
{
    uint32_t min = 0, max = sizeof(VhostUserPayload);

    switch (request) {
    case VHOST_USER_GET_FEATURES:
    case VHOST_USER_GET_PROTOCOL_FEATURES:
    case VHOST_USER_SET_OWNER:
    case VHOST_USER_RESET_OWNER:
    case VHOST_USER_RESET_DEVICE:
    case VHOST_USER_GET_QUEUE_NUM:
    case VHOST_USER_GET_MAX_MEM_SLOTS:
    case VHOST_USER_GET_STATUS:
        /* No payload; tolerate a u64 some front-ends send anyway. */
        max = sizeof(uint64_t);
        break;
    case VHOST_USER_SET_FEATURES:
    case VHOST_USER_SET_PROTOCOL_FEATURES:
    case VHOST_USER_SET_STATUS:
    case VHOST_USER_SET_VRING_KICK:
    case VHOST_USER_SET_VRING_CALL:
    case VHOST_USER_SET_VRING_ERR:
        min = max = sizeof(uint64_t);
        break;
    case VHOST_USER_SET_VRING_NUM:
    case VHOST_USER_SET_VRING_BASE:
    case VHOST_USER_GET_VRING_BASE:
    case VHOST_USER_SET_VRING_ENABLE:
        min = max = sizeof(VhostUserVringState);
        break;
    case VHOST_USER_SET_VRING_ADDR:
        min = max = sizeof(VhostUserVringAddr);
        break;
    case VHOST_USER_SET_MEM_TABLE:
        min = 8;
        max = sizeof(VhostUserMemory);
        break;
    case VHOST_USER_ADD_MEM_REG:
    case VHOST_USER_REM_MEM_REG:
        min = max = sizeof(VhostUserMemRegMsg);
        break;
    case VHOST_USER_GET_CONFIG:
    case VHOST_USER_SET_CONFIG:
        min = VHOST_USER_CONFIG_HDR_SIZE;
        max = sizeof(VhostUserConfig);
        break;
    case VHOST_USER_GET_INFLIGHT_FD:
    case VHOST_USER_SET_INFLIGHT_FD:
        min = offsetof(VhostUserInflight, queue_size) + sizeof(uint16_t);
        max = sizeof(VhostUserInflight);
        break;
    case VHOST_USER_SET_LOG_BASE:
        min = sizeof(uint64_t);     /* the legacy form: refused later */
        max = sizeof(VhostUserLog);
        break;
    case VHOST_USER_SET_LOG_FD:
        max = sizeof(uint64_t);
        break;
    default:
        break;
    }
    return size >= min && size <= max;
}

/* How many fds @request may carry (the exact count is checked by the
 * handlers that take fds). */
static unsigned int vu_max_fds(uint32_t request)
{
    switch (request) {
    case VHOST_USER_SET_MEM_TABLE:
        return VHOST_USER_MEM_REGIONS_MAX;
    case VHOST_USER_ADD_MEM_REG:
    case VHOST_USER_REM_MEM_REG:    /* tolerated, closed unused */
    case VHOST_USER_SET_VRING_KICK:
    case VHOST_USER_SET_VRING_CALL:
    case VHOST_USER_SET_VRING_ERR:
    case VHOST_USER_SET_INFLIGHT_FD:
    case VHOST_USER_SET_LOG_BASE:
    case VHOST_USER_SET_LOG_FD:
    case VHOST_USER_SET_BACKEND_REQ_FD:
        return 1;
    default:
        return 0;
    }
}

static VuMsgResult vu_dispatch(VuServer *s, VuMsg *msg)
{
    uint32_t req = msg->hdr.request;

    if (!vu_payload_size_ok(req, msg->hdr.size)) {
        warn_report("%s: %s with a payload of %" PRIu32 " bytes", s->name,
                    vhost_user_request_name(req), msg->hdr.size);
        return VU_MSG_DROP;
    }
    if (s->rx_nfds > vu_max_fds(req)) {
        warn_report("%s: %s carries %u file descriptors, at most %u "
                    "expected", s->name, vhost_user_request_name(req),
                    s->rx_nfds, vu_max_fds(req));
        return VU_MSG_DROP;
    }

    switch (req) {
    case VHOST_USER_GET_FEATURES:
        vu_reply_u64(s, msg, vu_offered_features(s));
        return VU_MSG_REPLIED;
    case VHOST_USER_SET_FEATURES:
        return vu_set_features(s, msg->payload.u64);
    case VHOST_USER_GET_PROTOCOL_FEATURES:
        vu_reply_u64(s, msg, VU_PROTOCOL_FEATURES);
        return VU_MSG_REPLIED;
    case VHOST_USER_SET_PROTOCOL_FEATURES:
        if (msg->payload.u64 & ~VU_PROTOCOL_FEATURES) {
            warn_report("%s: front-end acked unknown protocol features "
                        "0x%" PRIx64 "; ignored", s->name,
                        (uint64_t)(msg->payload.u64 & ~VU_PROTOCOL_FEATURES));
        }
        s->protocol_features = msg->payload.u64 & VU_PROTOCOL_FEATURES;
        return VU_MSG_OK;
    case VHOST_USER_SET_OWNER:
        return VU_MSG_OK;
    case VHOST_USER_RESET_OWNER:
    case VHOST_USER_RESET_DEVICE:
        return vu_reset_session_state(s);
    case VHOST_USER_SET_MEM_TABLE:
        return vu_set_mem_table(s, msg);
    case VHOST_USER_GET_MAX_MEM_SLOTS:
        vu_reply_u64(s, msg, VHOST_USER_MAX_MEM_SLOTS);
        return VU_MSG_REPLIED;
    case VHOST_USER_ADD_MEM_REG:
        return vu_add_mem_reg(s, msg);
    case VHOST_USER_REM_MEM_REG:
        return vu_rem_mem_reg(s, msg);
    case VHOST_USER_SET_VRING_NUM:
        return vu_set_vring_num(s, msg);
    case VHOST_USER_SET_VRING_ADDR:
        return vu_set_vring_addr(s, msg);
    case VHOST_USER_SET_VRING_BASE:
        return vu_set_vring_base(s, msg);
    case VHOST_USER_GET_VRING_BASE:
        return vu_get_vring_base(s, msg);
    case VHOST_USER_SET_VRING_KICK:
    case VHOST_USER_SET_VRING_CALL:
    case VHOST_USER_SET_VRING_ERR:
        return vu_set_vring_fd(s, msg);
    case VHOST_USER_SET_VRING_ENABLE:
        return vu_set_vring_enable(s, msg);
    case VHOST_USER_GET_QUEUE_NUM:
        vu_reply_u64(s, msg, s->cfg.num_queues);
        return VU_MSG_REPLIED;
    case VHOST_USER_GET_CONFIG:
        return vu_get_config(s, msg);
    case VHOST_USER_SET_CONFIG:
        return vu_set_config(s, msg);
    case VHOST_USER_GET_INFLIGHT_FD:
        return vu_get_inflight_fd(s, msg);
    case VHOST_USER_SET_INFLIGHT_FD:
        return vu_set_inflight_fd(s, msg);
    case VHOST_USER_SET_STATUS:
        s->status = msg->payload.u64 & 0xff;
        debug_report("%s: status 0x%x", s->name, s->status);
        return VU_MSG_OK;
    case VHOST_USER_GET_STATUS:
        vu_reply_u64(s, msg, s->status);
        return VU_MSG_REPLIED;
    case VHOST_USER_SET_BACKEND_REQ_FD:
        return vu_set_backend_req_fd(s, msg);
    case VHOST_USER_SET_LOG_BASE:
        return vu_set_log_base(s, msg);
    case VHOST_USER_SET_LOG_FD:
        return vu_set_log_fd(s, msg);
    default:
        vu_log_unknown(s, req);
        return VU_MSG_FAILED;
    }
}

/* ---- receiving ------------------------------------------------------- */

static void vu_rx_reset(VuServer *s)
{
    for (unsigned int i = 0; i < s->rx_nfds; i++) {
        if (s->rx_fds[i] >= 0) {
            close(s->rx_fds[i]);
        }
    }
    s->rx_nfds = 0;
    s->rx_len = 0;
    s->rx_fds_lost = false;
}

static void vu_rx_collect_fds(VuServer *s, struct msghdr *mh)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        size_t n;

        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;

            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (s->rx_nfds < VHOST_USER_MAX_FDS) {
                s->rx_fds[s->rx_nfds++] = fd;
            } else {
                close(fd);
                s->rx_fds_lost = true;
            }
        }
    }
    if (mh->msg_flags & MSG_CTRUNC) {
        s->rx_fds_lost = true;
    }
}

/* Stop (false) or resume (true) reading the session's socket. */
static void vu_conn_set_reading(VuServer *s, bool on)
{
    aio_set_fd_handler(s->cfg.main_ctx, s->conn_fd, on ? vu_conn_read : NULL,
                       NULL, NULL, NULL, s);
}

/* Accept front-ends (true) or leave them in the backlog (false). */
static void vu_listen_set_accepting(VuServer *s, bool on)
{
    if (s->listen_fd >= 0) {
        aio_set_fd_handler(s->cfg.main_ctx, s->listen_fd,
                           on ? vu_accept : NULL, NULL, NULL, NULL, s);
    }
}

/*
 * A whole message is in s->rx: check and run it.  A handler that must
 * wait for queues to drain returns VU_MSG_WAIT before changing anything:
 * the message (and its fds) stay in s->rx, the socket is not read, and
 * vu_drain_bh() runs the message again once the queues are stopped.
 */
static void vu_handle_msg(VuServer *s)
{
    VuMsg *msg = &s->rx;
    uint32_t req = msg->hdr.request;
    bool need_reply = msg->hdr.flags & VHOST_USER_NEED_REPLY;
    VuMsgResult ret;

    if (!s->msg_waiting) {
        s->stats.messages++;
        debug_report("%s: %s (%" PRIu32 "), %" PRIu32 " bytes, %u fds",
                     s->name, vhost_user_request_name(req), req,
                     msg->hdr.size, s->rx_nfds);
    }
    s->msg_waiting = false;
    if (s->rx_fds_lost) {
        warn_report("%s: %s came with more than %d fds", s->name,
                    vhost_user_request_name(req), VHOST_USER_MAX_FDS);
        ret = VU_MSG_DROP;
    } else {
        /* Zero the rest of the payload so short optional fields read 0. */
        memset((uint8_t *)&s->rx.payload + msg->hdr.size, 0,
               sizeof(s->rx.payload) - msg->hdr.size);
        ret = vu_dispatch(s, msg);
    }

    switch (ret) {
    case VU_MSG_WAIT:
        s->msg_waiting = true;
        vu_conn_set_reading(s, false);
        return;
    case VU_MSG_OK:
    case VU_MSG_FAILED:
        if (need_reply) {
            vu_reply_u64(s, msg, ret == VU_MSG_OK ? 0 : 1);
        }
        break;
    case VU_MSG_REPLIED:
        break;
    case VU_MSG_DROP:
        s->stats.bad_messages++;
        s->drop_pending = true;
        break;
    }
    vu_rx_reset(s);
}

static void vu_conn_read(void *opaque)
{
    VuServer *s = opaque;

    if (s->msg_waiting) {
        return;                 /* not registered then; just in case */
    }
    for (int handled = 0; handled < VU_MSGS_PER_TURN;) {
        union {
            char buf[CMSG_SPACE(sizeof(int) * VHOST_USER_MAX_FDS)];
            struct cmsghdr align;
        } control;
        size_t want;
        struct iovec iov;
        struct msghdr mh = {
            .msg_iov = &iov,
            .msg_iovlen = 1,
            .msg_control = control.buf,
            .msg_controllen = sizeof(control.buf),
        };
        ssize_t n;

        if (s->rx_len < VHOST_USER_HDR_SIZE) {
            want = VHOST_USER_HDR_SIZE - s->rx_len;
            iov.iov_base = (uint8_t *)&s->rx.hdr + s->rx_len;
        } else {
            want = VHOST_USER_HDR_SIZE + s->rx.hdr.size - s->rx_len;
            iov.iov_base = (uint8_t *)&s->rx.payload +
                           (s->rx_len - VHOST_USER_HDR_SIZE);
        }
        iov.iov_len = want;
        n = recvmsg(s->conn_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return;
            }
            vu_session_close(s, g_strerror(errno));
            return;
        }
        vu_rx_collect_fds(s, &mh);
        if (n == 0) {
            vu_session_close(s, s->rx_len ? "front-end closed the socket "
                             "in the middle of a message" :
                             "front-end disconnected");
            return;
        }
        s->rx_len += n;
        if (s->rx_len == VHOST_USER_HDR_SIZE) {
            VhostUserHeader *h = &s->rx.hdr;

            if ((h->flags & VHOST_USER_VERSION_MASK) != VHOST_USER_VERSION) {
                warn_report("%s: message with protocol version %u (only %u "
                            "is known)", s->name,
                            h->flags & VHOST_USER_VERSION_MASK,
                            VHOST_USER_VERSION);
                s->stats.bad_messages++;
                vu_session_close(s, "bad message");
                return;
            }
            if (h->size > sizeof(VhostUserPayload)) {
                warn_report("%s: %s with a payload of %" PRIu32 " bytes "
                            "(at most %zu)", s->name,
                            vhost_user_request_name(h->request), h->size,
                            sizeof(VhostUserPayload));
                s->stats.bad_messages++;
                vu_session_close(s, "bad message");
                return;
            }
        }
        if (s->rx_len < VHOST_USER_HDR_SIZE ||
            s->rx_len < VHOST_USER_HDR_SIZE + s->rx.hdr.size) {
            continue;
        }
        if (!s->spoke) {
            s->spoke = true;
            info_report("%s: front-end connected", s->name);
        }
        vu_handle_msg(s);
        handled++;
        if (s->drop_pending) {
            vu_session_close(s, "bad message");
            return;
        }
        if (s->msg_waiting) {
            return;             /* vu_drain_bh() goes on */
        }
    }
    /* Budget used up: the fd is still readable, so the loop comes back. */
}

/* ---- session --------------------------------------------------------- */

/* The closed session's queues are stopped: free its state, accept the
 * next front-end. */
static void vu_session_finish_close(VuServer *s)
{
    VuMsgResult r = vu_reset_session_state(s);

    assert(r == VU_MSG_OK);
    s->protocol_features = 0;
    memset(s->unknown_logged, 0, sizeof(s->unknown_logged));
    s->closing = false;
    vu_listen_set_accepting(s, true);
    if (s->idle_fn) {
        s->idle_fn(s->idle_opaque);
    }
#ifdef __GLIBC__
    /*
     * The session's rings, pools and buffers are freed; hand the pages
     * back so an idle daemon's footprint does not depend on how the
     * allocator's heaps happened to fragment while the session ran.
     * Main thread, once per session end: never on the I/O path.
     */
    malloc_trim(0);
#endif
}

/*
 * Close the session: the socket at once (so the front-end knows), its
 * state once its queues drained.  Until then no new front-end is accepted
 * (it waits in the listen backlog) since it would share the queues; other
 * exports are not held up.
 */
static void vu_session_close(VuServer *s, const char *why)
{
    if (s->conn_fd < 0) {
        return;
    }
    if (s->spoke) {
        info_report("%s: session closed: %s", s->name, why);
    } else {
        debug_report("%s: a connection closed before its first message "
                     "(%s): someone probing the socket, e.g. another "
                     "daemon checking whether it is in use", s->name, why);
    }
    s->spoke = false;
    vu_conn_set_reading(s, false);
    close(s->conn_fd);
    s->conn_fd = -1;
    vu_backend_channel_close(s);
    s->drop_pending = false;
    s->msg_waiting = false;
    vu_rx_reset(s);
    s->closing = true;
    vu_listen_set_accepting(s, false);
    if (vu_stop_all(s)) {
        vu_session_finish_close(s);
    } else {
        debug_report("%s: waiting for in-flight requests before the next "
                     "front-end", s->name);
    }
}

/* Main thread: a draining queue's last request may have completed. */
static void vu_drain_bh(void *opaque)
{
    VuServer *s = opaque;

    if (!vu_poll_drained(s)) {
        return;
    }
    if (s->closing) {
        vu_session_finish_close(s);
        return;
    }
    if (s->msg_waiting) {
        vu_handle_msg(s);
        if (s->drop_pending) {
            vu_session_close(s, "bad message");
        } else if (!s->msg_waiting) {
            /* the next messages may be there already */
            vu_conn_set_reading(s, true);
        }
    }
}

/* After a queue broke: if the cause was the inflight region's file being
 * cut short (the queue's own message blames guest memory, which shares
 * the fault flag), say so. */
static void vu_inflight_explain_fault(VuServer *s)
{
    struct stat st;

    if (s->inflight_fd >= 0 && guest_mem_faulted(&s->mem) &&
        fstat(s->inflight_fd, &st) == 0 &&
        (uint64_t)st.st_size < s->inflight_offset + s->inflight_size) {
        error_report("%s: the front-end shrank the inflight region's file "
                     "to %lld bytes while it was in use (%" PRIu64 " bytes "
                     "at offset %" PRIu64 " were shared with "
                     "SET_INFLIGHT_FD); the VMM must keep it whole: QEMU "
                     "passes back the sealed region the back-end made",
                     s->name, (long long)st.st_size,
                     (uint64_t)s->inflight_size, s->inflight_offset);
    }
}

static void vu_broken_bh(void *opaque)
{
    VuServer *s = opaque;

    if (atomic_exchange(&s->broken, false)) {
        vu_inflight_explain_fault(s);
        vu_session_close(s, "a virtqueue is broken");
    }
}

static void vu_accept(void *opaque)
{
    VuServer *s = opaque;
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd < 0) {
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
            warn_report("%s: accept: %s", s->name, g_strerror(errno));
        }
        return;
    }
    if (s->conn_fd >= 0) {
        warn_report("%s: refusing a second front-end connection (one is "
                    "already connected)", s->name);
        s->stats.refused++;
        close(fd);
        return;
    }
    s->conn_fd = fd;
    s->stats.sessions++;
    atomic_store(&s->broken, false);
    s->spoke = false;
    /* "front-end connected" waits for its first message: a process that
     * only probes the socket (a second daemon checking whether it is in
     * use) connects and closes without a word. */
    debug_report("%s: connection accepted", s->name);
    aio_set_fd_handler(s->cfg.main_ctx, fd, vu_conn_read, NULL, NULL, NULL,
                       s);
}

/* ---- socket ---------------------------------------------------------- */

static bool vu_socket_listen(VuServer *s, GError **errp)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    mode_t mode = s->cfg.socket_mode ? s->cfg.socket_mode : 0600;
    struct stat st;
    mode_t old_umask;
    int fd, r;

    if (strlen(s->path) >= sizeof(sa.sun_path)) {
        g_set_error(errp, VB_ERROR, 0, "socket path '%s' is too long (at "
                    "most %zu bytes)", s->path, sizeof(sa.sun_path) - 1);
        return false;
    }
    strcpy(sa.sun_path, s->path);

    if (lstat(s->path, &st) == 0) {
        if (S_ISLNK(st.st_mode)) {
            g_set_error(errp, VB_ERROR, 0, "socket path '%s' is a symbolic "
                        "link; refusing to follow it", s->path);
            return false;
        }
        if (!S_ISSOCK(st.st_mode)) {
            g_set_error(errp, VB_ERROR, 0, "socket path '%s' exists and is "
                        "not a socket; remove it or choose another path",
                        s->path);
            return false;
        }
        /* A socket: in use by a live server, or stale? */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0) {
            r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
            close(fd);
            if (r == 0) {
                g_set_error(errp, VB_ERROR, 0, "socket '%s' is in use by "
                            "another process", s->path);
                return false;
            }
        }
        if (unlink(s->path) < 0 && errno != ENOENT) {
            g_set_error(errp, VB_ERROR, 0, "cannot remove stale socket "
                        "'%s': %s", s->path, g_strerror(errno));
            return false;
        }
    }

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "socket: %s", g_strerror(errno));
        return false;
    }
    /* Never let the socket exist with a wider mode than asked for. */
    old_umask = umask(0777 & ~mode);
    r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old_umask);
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot create socket '%s': %s",
                    s->path, g_strerror(errno));
        close(fd);
        return false;
    }
    s->sock_created = true;
    /*
     * From here on the path is used without following symlinks, and
     * checked to still be the socket bind() made: someone who can write to
     * the directory must not be able to redirect the chmod or chown.
     */
    if (lstat(s->path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
        g_set_error(errp, VB_ERROR, 0, "socket '%s' was removed or replaced "
                    "right after it was created; check who else writes to "
                    "its directory", s->path);
        close(fd);
        return false;
    }
    s->sock_dev = st.st_dev;
    s->sock_ino = st.st_ino;
    /* bind() already applied the mode through the umask; this also covers
     * a directory whose default ACL overrides the umask.  EOPNOTSUPP: no
     * /proc for glibc's no-follow emulation, keep what bind() made. */
    if (fchmodat(AT_FDCWD, s->path, mode, AT_SYMLINK_NOFOLLOW) < 0 &&
        errno != EOPNOTSUPP) {
        g_set_error(errp, VB_ERROR, 0, "cannot set mode %04o on socket "
                    "'%s': %s", (unsigned int)mode, s->path,
                    g_strerror(errno));
        close(fd);
        return false;
    }
    if (s->cfg.socket_chown &&
        fchownat(AT_FDCWD, s->path, s->cfg.socket_uid, s->cfg.socket_gid,
                 AT_SYMLINK_NOFOLLOW) < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot change the owner of socket "
                    "'%s' to uid %ld, gid %ld: %s%s", s->path,
                    s->cfg.socket_uid == (uid_t)-1 ? -1L :
                    (long)s->cfg.socket_uid,
                    s->cfg.socket_gid == (gid_t)-1 ? -1L :
                    (long)s->cfg.socket_gid, g_strerror(errno),
                    errno == EPERM ? " (run as root, or pick a group you "
                    "are a member of)" : "");
        close(fd);
        return false;
    }
    if (lstat(s->path, &st) < 0 || st.st_dev != s->sock_dev ||
        st.st_ino != s->sock_ino) {
        g_set_error(errp, VB_ERROR, 0, "socket '%s' was replaced while it "
                    "was being set up; check who else writes to its "
                    "directory", s->path);
        close(fd);
        return false;
    }
    if (listen(fd, 1) < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot listen on socket '%s': %s",
                    s->path, g_strerror(errno));
        close(fd);
        return false;
    }
    s->listen_fd = fd;
    aio_set_fd_handler(s->cfg.main_ctx, fd, vu_accept, NULL, NULL, NULL, s);
    return true;
}

static void vu_socket_unlink(VuServer *s)
{
    struct stat st;

    /* Remove the file only if it is still the socket we created. */
    if (s->sock_created && lstat(s->path, &st) == 0 &&
        S_ISSOCK(st.st_mode) && st.st_dev == s->sock_dev &&
        st.st_ino == s->sock_ino) {
        unlink(s->path);
    }
    s->sock_created = false;
}

/* ---- public API ------------------------------------------------------ */

VuServer *vu_server_new(const VuServerConfig *cfg, GError **errp)
{
    VuServer *s;

    if (!cfg->socket_path || !cfg->socket_path[0]) {
        g_set_error(errp, VB_ERROR, 0, "no socket path given");
        return NULL;
    }
    if (cfg->num_queues == 0 || cfg->num_queues > 64) {
        g_set_error(errp, VB_ERROR, 0, "%u queues: use 1 to 64",
                    cfg->num_queues);
        return NULL;
    }
    s = g_new0(VuServer, 1);
    s->cfg = *cfg;
    s->path = g_strdup(cfg->socket_path);
    s->name = g_strdup(cfg->name ? cfg->name : cfg->socket_path);
    s->cfg.socket_path = s->path;
    s->cfg.name = s->name;
    if (!s->cfg.max_queue_size || s->cfg.max_queue_size > VIRTQUEUE_MAX_SIZE) {
        s->cfg.max_queue_size = VIRTQUEUE_MAX_SIZE;
    }
    s->queue_ctx = g_memdup2(cfg->queue_ctx,
                             sizeof(AioContext *) * cfg->num_queues);
    s->cfg.queue_ctx = s->queue_ctx;
    s->listen_fd = -1;
    s->conn_fd = -1;
    s->backend_fd = -1;
    s->inflight_fd = -1;
    guest_mem_init(&s->mem);
    s->queues = g_new0(VuQueue, cfg->num_queues);
    for (unsigned int i = 0; i < cfg->num_queues; i++) {
        s->queues[i].server = s;
        s->queues[i].index = i;
        s->queues[i].ctx = s->queue_ctx[i];
    }
    vu_reset_queues(s);
    s->broken_bh = aio_bh_new(cfg->main_ctx, vu_broken_bh, s,
                              "vu-server-broken");
    s->drain_bh = aio_bh_new(cfg->main_ctx, vu_drain_bh, s,
                             "vu-server-drain");
    if (cfg->listen_fd > 0) {
        s->listen_fd = cfg->listen_fd;
        aio_set_fd_handler(cfg->main_ctx, s->listen_fd, vu_accept, NULL,
                           NULL, NULL, s);
    } else if (!vu_socket_listen(s, errp)) {
        vu_server_free(s);
        return NULL;
    }
    info_report("%s: listening on %s (%u queues)", s->name, s->path,
                cfg->num_queues);
    return s;
}

void vu_server_stop_listening(VuServer *s)
{
    if (s->listen_fd >= 0) {
        aio_set_fd_handler(s->cfg.main_ctx, s->listen_fd, NULL, NULL, NULL,
                           NULL, NULL);
        close(s->listen_fd);
        s->listen_fd = -1;
    }
    vu_socket_unlink(s);
}

bool vu_server_is_idle(VuServer *s)
{
    return s->conn_fd < 0 && !s->closing;
}

void vu_server_set_idle_notify(VuServer *s, void (*fn)(void *opaque),
                               void *opaque)
{
    s->idle_fn = fn;
    s->idle_opaque = opaque;
}

void vu_server_disconnect(VuServer *s)
{
    vu_session_close(s, "the export is being removed");
}

void vu_server_free(VuServer *s)
{
    if (!s) {
        return;
    }
    vu_server_stop_listening(s);
    /* Deleted over QMP (block-export-del) or at daemon exit. */
    vu_session_close(s, "the export is being removed");
    if (s->closing) {
        /* Shutdown waits for in-flight I/O: the image closes next. */
        vu_drain_sync(s);
        vu_session_finish_close(s);
    }
    vu_inflight_unmap(s);
    for (unsigned int i = 0; i < s->cfg.num_queues; i++) {
        if (s->queues[i].vq) {
            virtqueue_free(s->queues[i].vq);
        }
    }
    guest_mem_clear(&s->mem);
    vu_log_clear(s);
    qemu_bh_delete(s->broken_bh);
    qemu_bh_delete(s->drain_bh);
    g_free(s->queues);
    g_free(s->queue_ctx);
    g_free(s->name);
    g_free(s->path);
    g_free(s);
}

void vu_server_report_broken(VuServer *s)
{
    atomic_store(&s->broken, true);
    qemu_bh_schedule(s->broken_bh);
}

void vu_server_queue_drained(VuServer *s)
{
    qemu_bh_schedule(s->drain_bh);
}

bool vu_server_is_connected(VuServer *s)
{
    return s->conn_fd >= 0;
}

int vu_server_get_listen_fd(VuServer *s)
{
    return s->listen_fd;
}

const char *vu_server_get_socket_path(VuServer *s)
{
    return s->path;
}

typedef struct VuRunInQueue {
    VuQueue *q;
    void (*fn)(VirtQueue *vq, void *opaque);
    void *opaque;
} VuRunInQueue;

static void vu_run_in_queue_fn(void *opaque)
{
    VuRunInQueue *r = opaque;

    r->fn(r->q->vq, r->opaque);
}

bool vu_server_run_in_queue(VuServer *s, unsigned int index,
                            void (*fn)(VirtQueue *vq, void *opaque),
                            void *opaque)
{
    VuRunInQueue r;

    if (index >= s->cfg.num_queues ||
        s->queues[index].state == VU_QUEUE_STOPPED) {
        return false;
    }
    r = (VuRunInQueue) { .q = &s->queues[index], .fn = fn, .opaque = opaque };
    aio_run_sync(s->queues[index].ctx, vu_run_in_queue_fn, &r);
    return true;
}

bool vu_server_notify_config_change(VuServer *s)
{
    const uint64_t need = (1ULL << VHOST_USER_PROTOCOL_F_BACKEND_REQ) |
                          (1ULL << VHOST_USER_PROTOCOL_F_CONFIG);
    VhostUserHeader hdr = {
        .request = VHOST_USER_BACKEND_CONFIG_CHANGE_MSG,
        .flags = VHOST_USER_VERSION,
        .size = 0,
    };
    ssize_t n;

    if (s->conn_fd < 0 || s->backend_fd < 0 ||
        (s->protocol_features & need) != need) {
        return false;
    }
    /* No NEED_REPLY: the front-end's answer would have to be read back
     * here, and it has nothing to tell us. */
    do {
        n = send(s->backend_fd, &hdr, sizeof(hdr), MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(hdr)) {
        warn_report("%s: cannot send CONFIG_CHANGE_MSG on the back-end "
                    "channel: %s", s->name,
                    n < 0 ? g_strerror(errno) : "short write");
        return false;
    }
    return true;
}

void vu_server_get_stats(VuServer *s, VuServerStats *stats)
{
    *stats = s->stats;
}

void vu_server_save_state(VuServer *s, const void *data, size_t len)
{
    assert(len <= sizeof(s->dev_state));
    memcpy(s->dev_state, data, len);
    s->dev_state_len = len;
    vu_inflight_state_write(s);
}
