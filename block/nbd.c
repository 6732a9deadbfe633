/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The NBD client driver (driver=nbd): a node whose image is an export of
 * an NBD server, through libnbd's asynchronous API.
 *
 * Connections.  Opening connects once, synchronously (in a worker: the
 * driver sets bdrv_open_any_thread), to learn what the export is: its
 * size, whether it is read-only, which commands and flags it takes
 * (flush, FUA, trim, write-zeroes, the base:allocation block status
 * context) and its block sizes; then it disconnects.  Requests go over
 * one connection per (node, AioContext), an NbdConn, made by
 * bdrv_attach_aio_context() or by the first request from that context
 * and owned by that context's thread alone: libnbd's handle, its socket
 * registered with the context (aio_set_fd_handler(), for the direction
 * libnbd wants), a timerfd for reconnecting and a bottom half.  Nothing
 * is shared between iothreads but the node's read-only description, so
 * no lock is taken per request.
 *
 * Requests.  A request becomes one NBD command, or several when its
 * iovec has several segments or a segment exceeds the server's maximum
 * payload (libnbd has no vectored read or write): the segments go out
 * as separate commands, the request completes when the last one has.
 * Requests are aligned to the server's minimum block size by the block
 * layer (request_alignment), segments inside them are not: a segment
 * that is not a multiple of it fails with EINVAL (libnbd's strict
 * mode), which guests, whose segments are whole sectors, never see with
 * servers whose minimum is 512 or less.
 *
 * What a request needs is kept in its BlockAIOCB's engine_priv; the
 * driver allocates nothing per request.  libnbd allocates its own
 * command structure per NBD command (and for block status a small
 * wrapper of the extent callback); that is the only allocation on the
 * request path.  libnbd calls our completion callback with its handle's
 * lock held, where no nbd_*() call may be made, so the callbacks only
 * record the outcome and, when the request's last command is gone (the
 * completion's free callback), move the request onto the connection's
 * done list; the list is drained after libnbd returns
 * (nbd_aio_notify_read/write() in the fd handler), or from the
 * connection's bottom half for completions that arrived inside a
 * submitting call: a request never completes inside the call that
 * submitted it.
 *
 * A write with BDRV_REQ_FUA to a server without FUA is followed by a
 * flush once the write has completed (NBD orders nothing between
 * commands in flight, so the flush has to wait).
 *
 * Reconnecting.  When the connection drops, libnbd fails the commands in
 * flight with ENOTCONN (a server shutting down answers ESHUTDOWN); those
 * requests, and every request submitted until the connection is back,
 * wait on the connection's waiting list while it reconnects, and are
 * issued again, whole, once it is: for up to reconnect-delay seconds
 * after the drop, then they fail with EIO.  Past that point requests
 * fail at once, except that a request arriving while no attempt is
 * under way starts one and waits for its outcome; in the background the
 * connection keeps trying, with a back-off of 100 ms doubling to 1 s.
 * With reconnect-delay=0 the requests in flight fail at once, and a
 * later one reconnects.  A server that comes back with another size,
 * read-only where it was writable, or without a command it took at open
 * is refused (and tried again later): the node keeps the shape it was
 * opened with.
 *
 * Seccomp.  Under --seccomp on an iothread may not create an AF_INET
 * socket, connect it, set its options, or open the TLS credentials'
 * files (openat fails with EACCES): what a connection's handshake
 * needs.  So a confined iothread does not connect: it sets up the
 * handle and hands it to the node's dialer, a thread of its own made
 * at open by an unconfined thread, which connects and completes the
 * NBD (and TLS) handshake with the synchronous loop the open uses
 * (nbd_poll), then wakes the iothread through an eventfd; the iothread
 * takes the ready handle over and from then on only reads and writes
 * the socket (recvfrom, sendto) and shuts it down, which its allowlist
 * permits on a socket it already has.  Reconnects go the same way.
 * libnbd's handle has a lock of its own, so handing it between threads
 * is safe; only one thread uses it at a time anyway.  A connection
 * that goes while its attempt is with the dialer abandons it: the
 * dialer then closes the handle itself.
 *
 * TLS.  Every connection with TLS is dialled the same way, confined or
 * not: libnbd (1.14, Debian 12) runs the TLS handshake by calling
 * gnutls_handshake() again as long as it asks for more data, without
 * going back to the caller, so one nbd_aio_notify_read() spins on
 * recvfrom() (EAGAIN) until the server answers.  In an event loop
 * thread that holds every other handler of the loop for the server's
 * round trips, and forever when the server is this daemon's own NBD
 * server, whose handshake needs the main loop the spin holds (a mirror
 * to a TLS export of the same daemon hung its monitor).  The dialer's
 * spin holds nobody.
 *
 * Built as a module, block-nbd.so (the only file linked with libnbd),
 * which the daemon loads when a node first names driver=nbd: see
 * include/block/module.h.  Its options are read, and its nodes named,
 * by the program before that (block/nbd-options.c).  What it calls of
 * the daemon resolves through the daemon's exported symbols
 * (block/module-exports.list).
 */
#include "qemu/osdep.h"
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <libnbd.h>
#include "block/block_int.h"
#include "block/engine.h"
#include "block/module.h"
#include "block/nbd.h"
#include "qemu/error-report.h"
#include "qemu/iothread.h"
#include "qemu/sandbox.h"

/* The protocol's block status flags of base:allocation (the NBD spec),
 * which libnbd calls LIBNBD_STATE_HOLE and _ZERO. */
#define NBD_STATE_HOLE 0x1
#define NBD_STATE_ZERO 0x2
#define NBD_META_BASE_ALLOCATION "base:allocation"

/* libnbd refuses read and write payloads over 64 MiB; servers that say
 * nothing get QEMU's 32 MiB. */
#define NBD_LIBNBD_MAX_PAYLOAD (64u << 20)
#define NBD_DEFAULT_MAX_PAYLOAD (32u << 20)
/* Lengths of the commands without payload (trim, zero, block status)
 * are 32 bits on the wire; we cut them at 1 GiB. */
#define NBD_MAX_EFFECT_LEN (1u << 30)

/* AioContexts (iothreads) one node can serve. */
#define NBD_MAX_CTX 64

/* Reconnect back-off, and how long one attempt may take. */
#define NBD_RETRY_MIN_MS 100
#define NBD_RETRY_MAX_MS 1000
#define NBD_ATTEMPT_TIMEOUT_MS 10000
/* How long an open waits for the handshake. */
#define NBD_OPEN_TIMEOUT_S 30

typedef enum NbdConnState {
    NBD_CONN_DOWN,              /* no handle; the timer retries */
    NBD_CONN_CONNECTING,        /* handshake under way */
    NBD_CONN_READY,
} NbdConnState;

typedef struct BDRVNBDState BDRVNBDState;

/* One connection of a node, for one AioContext.  Owner thread of @ctx
 * only, except @ctx and @refs (the node's lock). */
typedef struct NbdConn {
    BDRVNBDState *s;
    AioContext *ctx;
    unsigned int refs;          /* attaches; protected by s->lock */
    struct nbd_handle *h;       /* NULL when DOWN */
    NbdConnState state;
    int fd;                     /* registered socket, or -1 */
    int dir;                    /* LIBNBD_AIO_DIRECTION_* registered */
    int timer_fd;
    QEMUBH *bh;                 /* drains @done after a submission */
    unsigned int submitting;    /* inside an nbd_aio_*() call */
    QSIMPLEQ_HEAD(, BlockAIOCB) done;      /* completed by libnbd */
    QSIMPLEQ_HEAD(, BlockAIOCB) waiting;   /* for the connection */
    int64_t next_try_ns;        /* DOWN: when the timer reconnects */
    int64_t attempt_end_ns;     /* CONNECTING: when it gives up */
    int64_t deadline_ns;        /* waiting requests fail then; 0: none */
    bool expired;               /* past the deadline, still down */
    bool reported;              /* the loss was logged */
    bool refusal_reported;      /* a changed export was logged */
    char why[160];              /* libnbd's error when the socket failed */
    struct NbdDial *dial;       /* the dialer's attempt for us, or NULL */
    int dial_efd;               /* eventfd: the dialer finished it */
    unsigned int backoff_ms;
    uint64_t connects;          /* successful (re)connections */
} NbdConn;

/* An attempt the dialer makes for a confined iothread.  @h and @efd are
 * the dialer's while it runs; the other fields are protected by the
 * node's dial_lock. */
typedef struct NbdDial {
    QSIMPLEQ_ENTRY(NbdDial) next;
    struct nbd_handle *h;       /* set up by the owner, not connected */
    int efd;                    /* the connection's dial_efd */
    int result;                 /* as nbd_open_connect() */
    char why[160];              /* libnbd's error, result < 0 */
    bool finished;
    bool abandoned;             /* the connection went: the dialer frees */
} NbdDial;

struct BDRVNBDState {
    BlockBackend *bs;
    /* The options, copied: the parser's strings go away after open. */
    BlockNbdServerType type;
    char *host, *port, *path, *export_name;
    /* TLS: x509 certificates in @tls_dir, or the PSK file @tls_psk_file
     * with @tls_user; neither: none. */
    char *tls_dir, *tls_psk_file, *tls_user;
    bool tls_verify;
    uint32_t reconnect_delay;
    char *desc;                 /* nbd://... for messages */
    /* What the server said at open. */
    uint64_t size;
    bool server_ro, can_flush, can_fua, can_trim, can_zero, base_alloc;
    bool can_fast_zero;
    uint32_t min_block;         /* 1 when the server says nothing */
    uint32_t max_payload;
    GMutex lock;                /* the slots of @conns */
    /* The dialer (see "Seccomp" above).  pthread's lock, not GLib's:
     * ThreadSanitizer cannot see GLib's futex-based GMutex. */
    GThread *dialer;
    pthread_mutex_t dial_lock;
    pthread_cond_t dial_cond;
    QSIMPLEQ_HEAD(, NbdDial) dial_queue;    /* dial_lock */
    bool dial_quit;                         /* dial_lock */
    NbdConn *_Atomic conns[NBD_MAX_CTX];
};

/* BlockAIOCB.engine_priv, while the driver has the request. */
enum {
    PRIV_CONN,                  /* NbdConn * */
    PRIV_PENDING,               /* NBD commands in flight */
    PRIV_ERR,                   /* first positive errno, 0 */
    PRIV_LOST,                  /* the connection dropped under it */
    PRIV_FUA_FLUSH,             /* 1: the flush after an emulated FUA */
};

static void nbd_conn_connect(NbdConn *c);
static void nbd_conn_issue(NbdConn *c, BlockAIOCB *acb);
static void nbd_conn_drain(NbdConn *c);

static int64_t nbd_now_ns(void)
{
    return g_get_monotonic_time() * 1000;
}

/* ---- connections --------------------------------------------------- */

/* Owner thread: the timer fires at @when_ns (0: disarm). */
static void nbd_conn_arm(NbdConn *c, int64_t when_ns)
{
    struct itimerspec its = { 0 };

    if (when_ns) {
        int64_t now = nbd_now_ns(), d = when_ns > now ? when_ns - now : 1;

        its.it_value.tv_sec = d / 1000000000;
        its.it_value.tv_nsec = d % 1000000000;
    }
    timerfd_settime(c->timer_fd, 0, &its, NULL);
}

/* The earliest of what the timer waits for. */
static void nbd_conn_rearm(NbdConn *c)
{
    int64_t when = 0;

    if (c->state == NBD_CONN_DOWN) {
        when = c->next_try_ns;
    } else if (c->state == NBD_CONN_CONNECTING) {
        when = c->attempt_end_ns;
    }
    if (c->deadline_ns && !c->expired &&
        (!when || c->deadline_ns < when)) {
        when = c->deadline_ns;
    }
    nbd_conn_arm(c, when);
}

static void nbd_conn_read_cb(void *opaque);
static void nbd_conn_write_cb(void *opaque);

/* Owner thread: watch the socket in the direction libnbd wants. */
static void nbd_conn_watch(NbdConn *c)
{
    int fd = c->h ? nbd_aio_get_fd(c->h) : -1;
    int dir = fd >= 0 ? nbd_aio_get_direction(c->h) : 0;

    if (fd == c->fd && dir == c->dir) {
        return;
    }
    if (c->fd >= 0 && c->fd != fd) {
        aio_set_fd_handler(c->ctx, c->fd, NULL, NULL, NULL, NULL, NULL);
    }
    c->fd = fd;
    c->dir = dir;
    if (fd >= 0) {
        aio_set_fd_handler(c->ctx, fd,
                           (dir & LIBNBD_AIO_DIRECTION_READ) ?
                           nbd_conn_read_cb : NULL,
                           (dir & LIBNBD_AIO_DIRECTION_WRITE) ?
                           nbd_conn_write_cb : NULL,
                           NULL, NULL, c);
    }
}

/* Owner thread: drop the handle (its commands have all been failed by
 * libnbd already, or there were none). */
static void nbd_conn_close_handle(NbdConn *c)
{
    if (c->dial) {
        NbdDial *d = c->dial;
        bool mine;

        pthread_mutex_lock(&c->s->dial_lock);
        mine = d->finished;
        d->abandoned = !mine;
        pthread_mutex_unlock(&c->s->dial_lock);
        c->dial = NULL;
        if (mine) {
            nbd_close(d->h);
            g_free(d);
        }
    }
    if (c->fd >= 0) {
        aio_set_fd_handler(c->ctx, c->fd, NULL, NULL, NULL, NULL, NULL);
        c->fd = -1;
        c->dir = 0;
    }
    if (c->h) {
        nbd_close(c->h);
        c->h = NULL;
    }
}

/* Owner thread: fail what waits for the connection, through the done
 * list: this may run inside a submission (its attempt failed at once),
 * where no other request may complete either. */
static void nbd_conn_fail_waiting(NbdConn *c)
{
    if (QSIMPLEQ_EMPTY(&c->waiting)) {
        return;
    }
    while (!QSIMPLEQ_EMPTY(&c->waiting)) {
        BlockAIOCB *acb = QSIMPLEQ_FIRST(&c->waiting);

        QSIMPLEQ_REMOVE_HEAD(&c->waiting, next);
        acb->engine_priv[PRIV_LOST] = 0;
        acb->engine_priv[PRIV_ERR] = EIO;
        QSIMPLEQ_INSERT_TAIL(&c->done, acb, next);
    }
    qemu_bh_schedule(c->bh);
}

/*
 * Owner thread: the handle is gone or never came up.  @was_ready: the
 * connection was serving requests (a drop, which starts the deadline);
 * otherwise an attempt failed.
 */
static void nbd_conn_down(NbdConn *c, bool was_ready, const char *why)
{
    BDRVNBDState *s = c->s;
    int64_t now = nbd_now_ns();

    nbd_conn_close_handle(c);
    c->state = NBD_CONN_DOWN;
    if (was_ready) {
        if (!c->reported) {
            warn_report("%s: connection lost (%s); %s", s->desc, why,
                        s->reconnect_delay ?
                        "requests wait for it to come back" :
                        "requests fail until it comes back "
                        "(reconnect-delay=0)");
            c->reported = true;
        }
        c->backoff_ms = 0;
        c->deadline_ns = s->reconnect_delay ?
            now + (int64_t)s->reconnect_delay * 1000000000 : 0;
        c->expired = !s->reconnect_delay;
    } else if (c->expired) {
        /* An attempt made for requests that came after the deadline:
         * they learn its outcome. */
        nbd_conn_fail_waiting(c);
    }
    c->next_try_ns = now + (int64_t)c->backoff_ms * 1000000;
    c->backoff_ms = c->backoff_ms ?
        MIN(c->backoff_ms * 2, NBD_RETRY_MAX_MS) : NBD_RETRY_MIN_MS;
    nbd_conn_rearm(c);
}

/* Owner thread: the handshake is done.  Refuse an export that is no
 * longer the one the node was opened on. */
static void nbd_conn_ready(NbdConn *c)
{
    BDRVNBDState *s = c->s;
    int64_t size = nbd_get_size(c->h);

    const char *changed = NULL;

    if (size < 0 || (uint64_t)size != s->size) {
        changed = "its size";
    } else if (nbd_is_read_only(c->h) > 0 && !s->bs->readonly) {
        changed = "it is read-only now";
    } else if ((s->can_flush && nbd_can_flush(c->h) <= 0) ||
               (s->can_fua && nbd_can_fua(c->h) <= 0) ||
               (s->can_trim && nbd_can_trim(c->h) <= 0) ||
               (s->can_zero && nbd_can_zero(c->h) <= 0) ||
               (s->can_fast_zero && nbd_can_fast_zero(c->h) <= 0) ||
               (s->base_alloc &&
                nbd_can_meta_context(c->h, NBD_META_BASE_ALLOCATION) <= 0)) {
        changed = "a command it took at open";
    }
    if (changed) {
        /* Once per episode: the attempts go on every second. */
        if (!c->refusal_reported) {
            warn_report("%s: the export is not the one the node was opened "
                        "on (%s): not using it until it is", s->desc,
                        changed);
            c->refusal_reported = true;
        }
        nbd_conn_down(c, false, changed);
        return;
    }
    c->refusal_reported = false;
    if (c->reported) {
        info_report("%s: reconnected", s->desc);
        c->reported = false;
    }
    c->state = NBD_CONN_READY;
    c->backoff_ms = 0;
    c->deadline_ns = 0;
    c->expired = false;
    c->connects++;
    nbd_conn_rearm(c);
    /* Issue what waited, in order.  Completions inside these calls are
     * drained by the caller. */
    while (c->state == NBD_CONN_READY && !QSIMPLEQ_EMPTY(&c->waiting)) {
        BlockAIOCB *acb = QSIMPLEQ_FIRST(&c->waiting);

        QSIMPLEQ_REMOVE_HEAD(&c->waiting, next);
        nbd_conn_issue(c, acb);
    }
}

/* Owner thread: after libnbd ran (notify, connect, a submission): move
 * the connection on according to the handle's state. */
static void nbd_conn_check(NbdConn *c)
{
    if (!c->h) {
        return;
    }
    if (nbd_aio_is_dead(c->h) || nbd_aio_is_closed(c->h)) {
        nbd_conn_down(c, c->state == NBD_CONN_READY,
                      c->why[0] ? c->why : "the server closed it");
        c->why[0] = 0;
        return;
    }
    if (c->state == NBD_CONN_CONNECTING && nbd_aio_is_ready(c->h)) {
        nbd_conn_ready(c);
    }
    if (c->h) {
        nbd_conn_watch(c);
    }
}

/* Owner thread: the socket is ready for what libnbd waited for. */
static void nbd_conn_notify(NbdConn *c, bool write)
{
    if ((write ? nbd_aio_notify_write(c->h) : nbd_aio_notify_read(c->h)) < 0) {
        /* Why the socket failed, for the message (libnbd's error is
         * per thread and our next call replaces it). */
        g_strlcpy(c->why, nbd_get_error() ? nbd_get_error() : "",
                  sizeof(c->why));
    }
    nbd_conn_check(c);
    nbd_conn_drain(c);
}

static void nbd_conn_read_cb(void *opaque)
{
    nbd_conn_notify(opaque, false);
}

static void nbd_conn_write_cb(void *opaque)
{
    nbd_conn_notify(opaque, true);
}

/* Owner thread: the reconnect timer. */
static void nbd_conn_timer_cb(void *opaque)
{
    NbdConn *c = opaque;
    uint64_t n;
    int64_t now = nbd_now_ns();

    if (read(c->timer_fd, &n, sizeof(n)) < 0) {
        /* EAGAIN: re-armed since it fired; the checks below are by
         * time anyway. */
    }
    if (c->deadline_ns && !c->expired && now >= c->deadline_ns) {
        if (c->connects) {
            warn_report("%s: not back after reconnect-delay=%u s: failing "
                        "requests until it is", c->s->desc,
                        c->s->reconnect_delay);
        } else {
            warn_report("%s: this iothread cannot connect to the server: "
                        "failing requests until it can", c->s->desc);
        }
        c->expired = true;
        nbd_conn_fail_waiting(c);
    }
    if (c->state == NBD_CONN_CONNECTING && now >= c->attempt_end_ns) {
        nbd_conn_down(c, false, "connection attempt timed out");
    } else if (c->state == NBD_CONN_DOWN && now >= c->next_try_ns) {
        nbd_conn_connect(c);
    } else {
        nbd_conn_rearm(c);
    }
    nbd_conn_drain(c);
}

/* Any thread: TLS on @h as the node's options say; false with libnbd's
 * error. */
static bool nbd_handle_tls(BDRVNBDState *s, struct nbd_handle *h)
{
    if (s->tls_psk_file) {
        return nbd_set_tls(h, LIBNBD_TLS_REQUIRE) == 0 &&
               nbd_set_tls_psk_file(h, s->tls_psk_file) == 0 &&
               nbd_set_tls_username(h, s->tls_user) == 0;
    }
    if (s->tls_dir) {
        return nbd_set_tls(h, LIBNBD_TLS_REQUIRE) == 0 &&
               nbd_set_tls_certificates(h, s->tls_dir) == 0 &&
               nbd_set_tls_verify_peer(h, s->tls_verify) == 0;
    }
    return true;
}

/* Any thread: a handle set up with the node's options, not connected;
 * NULL with @errp set. */
static struct nbd_handle *nbd_handle_new(BDRVNBDState *s, GError **errp)
{
    struct nbd_handle *h = nbd_create();

    if (!h) {
        g_set_error(errp, VB_ERROR, 0, "%s: libnbd: %s", s->desc,
                    nbd_get_error());
        return NULL;
    }
    /* Our buffers are the guest's: libnbd need not clear them first. */
    if (nbd_set_pread_initialize(h, false) < 0 ||
        nbd_set_export_name(h, s->export_name) < 0 ||
        nbd_add_meta_context(h, NBD_META_BASE_ALLOCATION) < 0 ||
        !nbd_handle_tls(s, h)) {
        g_set_error(errp, VB_ERROR, 0, "%s: %s", s->desc, nbd_get_error());
        nbd_close(h);
        return NULL;
    }
    if ((s->tls_dir || s->tls_psk_file) && nbd_supports_tls(h) <= 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: TLS: this libnbd was built "
                    "without TLS support", s->desc);
        nbd_close(h);
        return NULL;
    }
    return h;
}

/* Owner thread, confined or with TLS: the attempt goes to the dialer; the
 * connection is CONNECTING without a handle until nbd_conn_dial_cb(). */
static void nbd_conn_dial(NbdConn *c)
{
    BDRVNBDState *s = c->s;
    g_autoptr(GError) err = NULL;
    NbdDial *d;
    struct nbd_handle *h = nbd_handle_new(s, &err);

    if (!h) {
        nbd_conn_down(c, false, err->message);
        return;
    }
    d = g_new0(NbdDial, 1);
    d->h = h;
    d->efd = c->dial_efd;
    c->dial = d;
    pthread_mutex_lock(&s->dial_lock);
    QSIMPLEQ_INSERT_TAIL(&s->dial_queue, d, next);
    pthread_cond_signal(&s->dial_cond);
    pthread_mutex_unlock(&s->dial_lock);
    c->state = NBD_CONN_CONNECTING;
    /* The dialer gives up by then too; this is the backstop. */
    c->attempt_end_ns = nbd_now_ns() +
        (int64_t)(NBD_ATTEMPT_TIMEOUT_MS + 1000) * 1000000;
    nbd_conn_rearm(c);
}

/* Owner thread: the dialer is done with our attempt. */
static void nbd_conn_dial_cb(void *opaque)
{
    NbdConn *c = opaque;
    NbdDial *d = c->dial;
    uint64_t n;
    bool finished;

    if (read(c->dial_efd, &n, sizeof(n)) < 0) {
        /* EAGAIN: an abandoned attempt's wake-up was read already. */
    }
    if (!d) {
        return;
    }
    pthread_mutex_lock(&c->s->dial_lock);
    finished = d->finished;
    pthread_mutex_unlock(&c->s->dial_lock);
    if (!finished) {
        return;
    }
    c->dial = NULL;
    if (d->result > 0) {
        c->h = d->h;
        nbd_conn_check(c);
    } else {
        nbd_close(d->h);
        nbd_conn_down(c, false, d->result < 0 ? d->why :
                      "connection attempt timed out");
    }
    g_free(d);
    nbd_conn_drain(c);
}

/* Owner thread: start an attempt (DOWN -> CONNECTING, or DOWN again). */
static void nbd_conn_connect(NbdConn *c)
{
    BDRVNBDState *s = c->s;
    g_autoptr(GError) err = NULL;
    int r;

    if (sandbox_thread_confined() || s->tls_dir || s->tls_psk_file) {
        nbd_conn_dial(c);
        return;
    }
    c->h = nbd_handle_new(s, &err);
    if (!c->h) {
        nbd_conn_down(c, false, err->message);
        return;
    }
    if (s->type == BLOCK_NBD_SERVER_UNIX) {
        r = nbd_aio_connect_unix(c->h, s->path);
    } else {
        r = nbd_aio_connect_tcp(c->h, s->host, s->port);
    }
    if (r < 0) {
        nbd_conn_down(c, false, nbd_get_error());
        return;
    }
    c->state = NBD_CONN_CONNECTING;
    c->attempt_end_ns = nbd_now_ns() +
        (int64_t)NBD_ATTEMPT_TIMEOUT_MS * 1000000;
    nbd_conn_rearm(c);
    nbd_conn_check(c);
}

static void nbd_conn_bh(void *opaque)
{
    nbd_conn_drain(opaque);
}

/* Owner thread of @ctx: a new connection, its first attempt started. */
static NbdConn *nbd_conn_new(BDRVNBDState *s, AioContext *ctx,
                             GError **errp)
{
    NbdConn *c;
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    int efd;

    if (tfd < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot create a timer: %s",
                    s->desc, g_strerror(errno));
        return NULL;
    }
    efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot create an eventfd: %s",
                    s->desc, g_strerror(errno));
        close(tfd);
        return NULL;
    }
    c = g_new0(NbdConn, 1);
    c->s = s;
    c->ctx = ctx;
    c->fd = -1;
    c->timer_fd = tfd;
    c->dial_efd = efd;
    QSIMPLEQ_INIT(&c->done);
    QSIMPLEQ_INIT(&c->waiting);
    c->bh = aio_bh_new(ctx, nbd_conn_bh, c, "nbd-conn");
    aio_set_fd_handler(ctx, tfd, nbd_conn_timer_cb, NULL, NULL, NULL, c);
    aio_set_fd_handler(ctx, efd, nbd_conn_dial_cb, NULL, NULL, NULL, c);
    c->state = NBD_CONN_DOWN;
    /* Requests that come before the first handshake wait for it (for
     * at least an attempt's time, longer with reconnect-delay). */
    c->deadline_ns = nbd_now_ns() + 1000000000ll *
        MAX(s->reconnect_delay, NBD_ATTEMPT_TIMEOUT_MS / 1000);
    nbd_conn_connect(c);
    return c;
}

/* Owner thread of c->ctx, nothing in flight or waiting. */
static void nbd_conn_free(NbdConn *c)
{
    g_assert(QSIMPLEQ_EMPTY(&c->waiting));
    nbd_conn_drain(c);
    if (c->h && c->state == NBD_CONN_READY) {
        /* NBD_CMD_DISC, a polite goodbye, without waiting for it. */
        nbd_aio_disconnect(c->h, 0);
    }
    nbd_conn_close_handle(c);
    aio_set_fd_handler(c->ctx, c->timer_fd, NULL, NULL, NULL, NULL, NULL);
    close(c->timer_fd);
    /* After nbd_conn_close_handle(): the dialer no longer writes it. */
    aio_set_fd_handler(c->ctx, c->dial_efd, NULL, NULL, NULL, NULL, NULL);
    close(c->dial_efd);
    qemu_bh_delete(c->bh);
    g_free(c);
}

/* Owner thread of @ctx: the connection of @ctx, or NULL. */
static inline NbdConn *nbd_conn_find(BDRVNBDState *s, AioContext *ctx)
{
    for (int i = 0; i < NBD_MAX_CTX; i++) {
        NbdConn *c = atomic_load_explicit(&s->conns[i],
                                          memory_order_acquire);

        if (c && c->ctx == ctx) {
            return c;
        }
    }
    return NULL;
}

/* Owner thread of @ctx: the connection of @ctx, made if needed, with one
 * more reference when @ref. */
static NbdConn *nbd_conn_get(BDRVNBDState *s, AioContext *ctx, bool ref,
                             GError **errp)
{
    NbdConn *c = nbd_conn_find(s, ctx);
    int slot = -1;

    if (c) {
        if (ref) {
            g_mutex_lock(&s->lock);
            c->refs++;
            g_mutex_unlock(&s->lock);
        }
        return c;
    }
    g_mutex_lock(&s->lock);
    for (int i = 0; i < NBD_MAX_CTX; i++) {
        if (!atomic_load_explicit(&s->conns[i], memory_order_relaxed)) {
            slot = i;
            break;
        }
    }
    g_mutex_unlock(&s->lock);
    if (slot < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: more than %d iothreads use "
                    "this node", s->desc, NBD_MAX_CTX);
        return NULL;
    }
    c = nbd_conn_new(s, ctx, errp);
    if (!c) {
        return NULL;
    }
    c->refs = ref;
    g_mutex_lock(&s->lock);
    /* Another context may have taken the slot meanwhile. */
    for (int i = slot; i < NBD_MAX_CTX; i++) {
        if (!atomic_load_explicit(&s->conns[i], memory_order_relaxed)) {
            atomic_store_explicit(&s->conns[i], c, memory_order_release);
            g_mutex_unlock(&s->lock);
            return c;
        }
    }
    g_mutex_unlock(&s->lock);
    nbd_conn_free(c);
    g_set_error(errp, VB_ERROR, 0, "%s: more than %d iothreads use this "
                "node", s->desc, NBD_MAX_CTX);
    return NULL;
}

/* Owner thread of c->ctx: forget @c (its slot) and free it. */
static void nbd_conn_remove(BDRVNBDState *s, NbdConn *c)
{
    g_mutex_lock(&s->lock);
    for (int i = 0; i < NBD_MAX_CTX; i++) {
        if (atomic_load_explicit(&s->conns[i], memory_order_relaxed) == c) {
            atomic_store_explicit(&s->conns[i], NULL, memory_order_release);
        }
    }
    g_mutex_unlock(&s->lock);
    nbd_conn_free(c);
}

/* ---- requests ------------------------------------------------------ */

static inline bool nbd_errno_is_lost(int err)
{
    return err == ENOTCONN || err == ESHUTDOWN || err == ECONNRESET ||
           err == EPIPE;
}

/*
 * libnbd's completion callback, at most once per NBD command, with
 * libnbd's lock held: no nbd_*() call here.  It only records the error;
 * nbd_cmd_free() counts the command off.
 */
static int nbd_cmd_cb(void *opaque, int *error)
{
    BlockAIOCB *acb = opaque;

    if (*error) {
        if (nbd_errno_is_lost(*error)) {
            acb->engine_priv[PRIV_LOST] = 1;
        } else if (!acb->engine_priv[PRIV_ERR]) {
            acb->engine_priv[PRIV_ERR] = *error;
        }
    }
    return 1;                   /* retire the command */
}

/*
 * libnbd's free callback of the completion: exactly once per command,
 * after its completion callback, or alone when libnbd refused the
 * command.  (Counting on it rather than on the call's return value:
 * libnbd 1.14 can return a stale cookie for a command it has already
 * failed.)  The request moves to the done list when its last command is
 * gone.  libnbd's lock may be held.
 */
static void nbd_cmd_free(void *opaque)
{
    BlockAIOCB *acb = opaque;
    NbdConn *c = (NbdConn *)(uintptr_t)acb->engine_priv[PRIV_CONN];

    if (--acb->engine_priv[PRIV_PENDING] == 0) {
        QSIMPLEQ_INSERT_TAIL(&c->done, acb, next);
    }
}

/* libnbd's extent callback (block status): the first extent of
 * base:allocation answers. */
static int nbd_extent_cb(void *opaque, const char *metacontext,
                         uint64_t offset, uint32_t *entries,
                         size_t nr_entries, int *error)
{
    BlockAIOCB *acb = opaque;
    BlockStatus *st = acb->status;
    uint32_t len, fl;

    if (strcmp(metacontext, NBD_META_BASE_ALLOCATION) || nr_entries < 2 ||
        offset != (uint64_t)acb->offset) {
        return 0;
    }
    len = entries[0];
    fl = entries[1];
    if (len == 0) {
        return 0;               /* a broken answer: keep "data" */
    }
    st->pnum = MIN((uint64_t)len, acb->bytes);
    /* A hole that does not read as zeroes has unknown content: data. */
    st->flags = BDRV_BLOCK_ALLOCATED |
        ((fl & NBD_STATE_ZERO) ? BDRV_BLOCK_ZERO : 0) |
        (!(fl & NBD_STATE_HOLE) || !(fl & NBD_STATE_ZERO) ?
         BDRV_BLOCK_DATA : 0);
    return 0;
}

/* One NBD command of @acb: @cookie is what libnbd answered.  A refused
 * command (-1) never completes: its error is recorded here. */
static void nbd_cmd_issued(struct nbd_handle *h, BlockAIOCB *acb,
                           int64_t cookie)
{
    if (cookie == -1) {
        int err = nbd_get_errno();

        if (nbd_errno_is_lost(err) || nbd_aio_is_dead(h) ||
            nbd_aio_is_closed(h)) {
            /* Refused because the handle died: nbd_conn_check() sees
             * it; a retry then. */
            acb->engine_priv[PRIV_LOST] = 1;
        } else if (!acb->engine_priv[PRIV_ERR]) {
            acb->engine_priv[PRIV_ERR] = err ? err : EIO;
        }
    }
}

/*
 * Owner thread, connection READY: send @acb's commands.  The request is
 * counted as one more pending command while they go out, so that it
 * cannot reach the done list before the last one has been issued.
 */
static void nbd_conn_issue(NbdConn *c, BlockAIOCB *acb)
{
    BDRVNBDState *s = c->s;
    struct nbd_handle *h = c->h;
    nbd_completion_callback cb = { .callback = nbd_cmd_cb,
                                   .user_data = acb,
                                   .free = nbd_cmd_free };
    uint32_t fl = 0;

    acb->engine_priv[PRIV_CONN] = (uintptr_t)c;
    acb->engine_priv[PRIV_PENDING] = 1;
    acb->engine_priv[PRIV_ERR] = 0;
    acb->engine_priv[PRIV_LOST] = 0;
    c->submitting++;
    if (acb->engine_priv[PRIV_FUA_FLUSH]) {
        acb->engine_priv[PRIV_PENDING]++;
        nbd_cmd_issued(h, acb, nbd_aio_flush(h, cb, 0));
        goto out;
    }
    switch (acb->type) {
    case BLK_REQ_READ:
    case BLK_REQ_WRITE: {
        uint64_t off = acb->offset;

        if (acb->type == BLK_REQ_WRITE && (acb->flags & BDRV_REQ_FUA) &&
            s->can_fua) {
            fl = LIBNBD_CMD_FLAG_FUA;
        }
        for (int i = 0; i < acb->niov; i++) {
            char *base = acb->iov[i].iov_base;
            size_t left = acb->iov[i].iov_len;

            while (left) {
                size_t n = MIN(left, s->max_payload);

                acb->engine_priv[PRIV_PENDING]++;
                nbd_cmd_issued(h, acb, acb->type == BLK_REQ_READ ?
                               nbd_aio_pread(h, base, n, off, cb, 0) :
                               nbd_aio_pwrite(h, base, n, off, cb, fl));
                base += n;
                off += n;
                left -= n;
            }
        }
        break;
    }
    case BLK_REQ_FLUSH:
        if (s->can_flush) {
            acb->engine_priv[PRIV_PENDING]++;
            nbd_cmd_issued(h, acb, nbd_aio_flush(h, cb, 0));
        }
        break;
    case BLK_REQ_DISCARD:
    case BLK_REQ_WRITE_ZEROES: {
        uint64_t off = acb->offset, left = acb->bytes;
        bool trim = acb->type == BLK_REQ_DISCARD;

        if (!trim && !(acb->flags & BDRV_REQ_MAY_UNMAP)) {
            fl |= LIBNBD_CMD_FLAG_NO_HOLE;
        }
        if (trim ? !s->can_trim : !s->can_zero) {
            /* The node does not offer it (bl): nothing to do for a
             * discard, a refusal for write-zeroes. */
            if (!trim) {
                acb->engine_priv[PRIV_ERR] = ENOTSUP;
            }
            break;
        }
        if (!trim && (acb->flags & BDRV_REQ_NO_FALLBACK)) {
            /* The server says whether its zeroes are fast, if it can */
            if (!s->can_fast_zero) {
                acb->engine_priv[PRIV_ERR] = ENOTSUP;
                break;
            }
            fl |= LIBNBD_CMD_FLAG_FAST_ZERO;
        }
        while (left) {
            uint64_t n = MIN(left, NBD_MAX_EFFECT_LEN);

            acb->engine_priv[PRIV_PENDING]++;
            nbd_cmd_issued(h, acb, trim ? nbd_aio_trim(h, n, off, cb, 0) :
                           nbd_aio_zero(h, n, off, cb, fl));
            off += n;
            left -= n;
        }
        break;
    }
    case BLK_REQ_BLOCK_STATUS: {
        nbd_extent_callback ecb = { .callback = nbd_extent_cb,
                                    .user_data = acb };
        uint64_t n = MIN(acb->bytes, (uint64_t)NBD_MAX_EFFECT_LEN);

        acb->status->pnum = n;
        acb->status->flags = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED;
        if (s->base_alloc) {
            acb->engine_priv[PRIV_PENDING]++;
            nbd_cmd_issued(h, acb, nbd_aio_block_status(h, n, acb->offset, ecb,
                                                     cb,
                                                     LIBNBD_CMD_FLAG_REQ_ONE));
        }
        break;
    }
    default:
        acb->engine_priv[PRIV_ERR] = EINVAL;
        break;
    }
out:
    c->submitting--;
    /* Our own count: the request goes to the done list now if its
     * commands are all done (or none went out). */
    if (--acb->engine_priv[PRIV_PENDING] == 0) {
        QSIMPLEQ_INSERT_TAIL(&c->done, acb, next);
    }
}

/* Owner thread: complete (or retry) what libnbd finished.  Not inside a
 * submitting call. */
static void nbd_conn_drain(NbdConn *c)
{
    while (!QSIMPLEQ_EMPTY(&c->done)) {
        BlockAIOCB *acb = QSIMPLEQ_FIRST(&c->done);

        QSIMPLEQ_REMOVE_HEAD(&c->done, next);
        if (acb->engine_priv[PRIV_LOST]) {
            /* All of it again: a write the dead server acknowledged may
             * not have reached its disk before the flush we owed. */
            acb->engine_priv[PRIV_FUA_FLUSH] = 0;
            if (c->state == NBD_CONN_READY) {
                /* The drop was not seen yet (a refused submission):
                 * libnbd knows now. */
                nbd_conn_check(c);
            }
            if (c->state == NBD_CONN_READY) {
                nbd_conn_issue(c, acb);     /* still up: again */
            } else if (c->expired) {
                blk_acb_complete(acb, -EIO);
            } else {
                QSIMPLEQ_INSERT_TAIL(&c->waiting, acb, next);
            }
            continue;
        }
        if (acb->engine_priv[PRIV_ERR]) {
            blk_acb_complete(acb, -(int)acb->engine_priv[PRIV_ERR]);
            continue;
        }
        if (acb->type == BLK_REQ_WRITE && (acb->flags & BDRV_REQ_FUA) &&
            !c->s->can_fua && c->s->can_flush &&
            !acb->engine_priv[PRIV_FUA_FLUSH]) {
            /* FUA without the server's: the flush, now that the write
             * is done. */
            acb->engine_priv[PRIV_FUA_FLUSH] = 1;
            if (c->state == NBD_CONN_READY) {
                nbd_conn_issue(c, acb);
            } else {
                QSIMPLEQ_INSERT_TAIL(&c->waiting, acb, next);
            }
            continue;
        }
        blk_acb_complete(acb, 0);
    }
    if (c->h) {
        /* What was issued again may wait for the socket to take it. */
        nbd_conn_watch(c);
    }
}

/* Owner thread of @ctx: every request type. */
static void nbd_submit(BlockBackend *bs, AioContext *ctx, BlockAIOCB *acb)
{
    BDRVNBDState *s = bs->opaque;
    NbdConn *c = nbd_conn_find(s, ctx);

    if (unlikely(!c)) {
        /* A context that never attached: it connects now. */
        c = nbd_conn_get(s, ctx, false, NULL);
        if (!c) {
            blk_complete_later(ctx, acb, -EIO);
            return;
        }
    }
    acb->engine_priv[PRIV_FUA_FLUSH] = 0;
    if (likely(c->state == NBD_CONN_READY)) {
        nbd_conn_issue(c, acb);
        /* A handle that died meanwhile failed @acb's commands: the
         * drain (bottom half) notices; only the direction here. */
        nbd_conn_watch(c);
    } else {
        acb->engine_priv[PRIV_CONN] = (uintptr_t)c;
        if (c->expired && c->state == NBD_CONN_DOWN) {
            /* Past the deadline: one attempt, for this request. */
            nbd_conn_connect(c);
        }
        if (c->state == NBD_CONN_READY) {
            nbd_conn_issue(c, acb);
            nbd_conn_check(c);
        } else if (c->expired && c->state == NBD_CONN_DOWN) {
            blk_complete_later(ctx, acb, -EIO);
            return;
        } else {
            QSIMPLEQ_INSERT_TAIL(&c->waiting, acb, next);
        }
    }
    if (!QSIMPLEQ_EMPTY(&c->done)) {
        /* Completed inside the submission: later, from the BH. */
        qemu_bh_schedule(c->bh);
    }
}

/* Owner thread of @ctx. */
static bool nbd_attach_aio_context(BlockBackend *bs, AioContext *ctx,
                                   GError **errp)
{
    return nbd_conn_get(bs->opaque, ctx, true, errp) != NULL;
}

/* Owner thread of @ctx: the last detach closes the connection (nothing
 * is in flight from @ctx then). */
static void nbd_detach_aio_context(BlockBackend *bs, AioContext *ctx)
{
    BDRVNBDState *s = bs->opaque;
    NbdConn *c = nbd_conn_find(s, ctx);
    bool last;

    if (!c) {
        return;
    }
    g_mutex_lock(&s->lock);
    last = c->refs && --c->refs == 0;
    g_mutex_unlock(&s->lock);
    if (last && QSIMPLEQ_EMPTY(&c->waiting) &&
        (!c->h || nbd_aio_in_flight(c->h) == 0)) {
        nbd_conn_remove(s, c);
    }
}

/* ---- open and close ------------------------------------------------ */

static void nbd_conn_free_fn(void *opaque)
{
    NbdConn *c = opaque;

    nbd_conn_free(c);
}

/*
 * Any thread (a worker, or the main thread for blk_open()): connect @h
 * and finish the handshake, waiting at most @timeout_ms (a server
 * that accepts and then says nothing would otherwise hold the worker and
 * the node's name forever).  1: ready; 0: timed out; -1: failed (libnbd's
 * error is set).
 */
static int nbd_open_connect(BDRVNBDState *s, struct nbd_handle *h,
                            int64_t timeout_ms)
{
    int64_t end = g_get_monotonic_time() + timeout_ms * 1000;
    int r;

    r = s->type == BLOCK_NBD_SERVER_UNIX ? nbd_aio_connect_unix(h, s->path) :
        nbd_aio_connect_tcp(h, s->host, s->port);
    if (r < 0) {
        return -1;
    }
    while (!nbd_aio_is_ready(h)) {
        int64_t left = end - g_get_monotonic_time();

        if (nbd_aio_is_dead(h) || nbd_aio_is_closed(h)) {
            return -1;
        }
        if (left <= 0) {
            return 0;
        }
        if (nbd_poll(h, MAX(left / 1000, 1)) < 0) {
            return -1;
        }
    }
    return 1;
}

/* The dialer: attempts for confined iothreads, one at a time, each
 * bounded by an attempt's timeout.  Unconfined (made at open). */
static gpointer nbd_dialer(gpointer opaque)
{
    BDRVNBDState *s = opaque;

    pthread_mutex_lock(&s->dial_lock);
    for (;;) {
        NbdDial *d;
        int r;

        while (!s->dial_quit && QSIMPLEQ_EMPTY(&s->dial_queue)) {
            pthread_cond_wait(&s->dial_cond, &s->dial_lock);
        }
        if (s->dial_quit) {
            break;
        }
        d = QSIMPLEQ_FIRST(&s->dial_queue);
        QSIMPLEQ_REMOVE_HEAD(&s->dial_queue, next);
        if (d->abandoned) {
            nbd_close(d->h);
            g_free(d);
            continue;
        }
        pthread_mutex_unlock(&s->dial_lock);
        r = nbd_open_connect(s, d->h, NBD_ATTEMPT_TIMEOUT_MS);
        if (r < 0) {
            /* libnbd's error is this thread's: copied for the owner. */
            g_strlcpy(d->why, nbd_get_error() ? nbd_get_error() : "",
                      sizeof(d->why));
        }
        pthread_mutex_lock(&s->dial_lock);
        d->result = r;
        d->finished = true;
        if (d->abandoned) {
            nbd_close(d->h);
            g_free(d);
        } else {
            uint64_t one = 1;

            /* Under the lock: the owner closes the eventfd only after
             * abandoning the attempt under it. */
            if (write(d->efd, &one, sizeof(one)) < 0) {
                /* EAGAIN: the counter is full, a wake-up is pending */
            }
        }
    }
    pthread_mutex_unlock(&s->dial_lock);
    return NULL;
}

/* Any thread (the main one, or blk_open_async()'s worker after a failed
 * open).  No request in flight. */
static void nbd_drv_close(BlockBackend *bs)
{
    BDRVNBDState *s = bs->opaque;
    AioContext *self;

    if (!s) {
        return;
    }
    self = qemu_get_current_aio_context();
    /* Connections of contexts that never detached: each goes in its own
     * thread, which only closes sockets. */
    for (int i = 0; i < NBD_MAX_CTX; i++) {
        NbdConn *c = atomic_load(&s->conns[i]);

        if (!c) {
            continue;
        }
        atomic_store(&s->conns[i], NULL);
        if (c->ctx == self) {
            nbd_conn_free(c);
        } else {
            aio_run_sync(c->ctx, nbd_conn_free_fn, c);
        }
    }
    if (s->dialer) {
        /* Every connection is gone: what is queued was abandoned; an
         * attempt under way ends within its timeout. */
        pthread_mutex_lock(&s->dial_lock);
        s->dial_quit = true;
        pthread_cond_signal(&s->dial_cond);
        pthread_mutex_unlock(&s->dial_lock);
        g_thread_join(s->dialer);
        while (!QSIMPLEQ_EMPTY(&s->dial_queue)) {
            NbdDial *d = QSIMPLEQ_FIRST(&s->dial_queue);

            QSIMPLEQ_REMOVE_HEAD(&s->dial_queue, next);
            nbd_close(d->h);
            g_free(d);
        }
    }
    pthread_mutex_destroy(&s->dial_lock);
    pthread_cond_destroy(&s->dial_cond);
    g_mutex_clear(&s->lock);
    g_free(s->host);
    g_free(s->port);
    g_free(s->path);
    g_free(s->export_name);
    g_free(s->tls_dir);
    g_free(s->tls_psk_file);
    g_free(s->tls_user);
    g_free(s->desc);
    g_free(s);
    bs->opaque = NULL;
}

/* Any thread: connect once, read what the export is, disconnect. */
static bool nbd_drv_open(BlockBackend *bs, const BlockOptions *opts,
                         GError **errp)
{
    static const BlockNbdOptions no_opts;
    const BlockNbdOptions *o = opts->driver_opts ? opts->driver_opts :
                                                   &no_opts;
    BDRVNBDState *s;
    struct nbd_handle *h;
    int64_t size, minb, prefb, maxb;
    int r;

    if (o->type == BLOCK_NBD_SERVER_UNIX ? !o->path : !o->host) {
        g_set_error(errp, VB_ERROR, 0, "driver=nbd needs server.type=inet "
                    "with server.host, or server.type=unix with "
                    "server.path");
        return false;
    }
    s = g_new0(BDRVNBDState, 1);
    bs->opaque = s;
    g_mutex_init(&s->lock);
    pthread_mutex_init(&s->dial_lock, NULL);
    pthread_cond_init(&s->dial_cond, NULL);
    QSIMPLEQ_INIT(&s->dial_queue);
    s->bs = bs;
    s->type = o->type;
    s->host = g_strdup(o->host);
    s->port = g_strdup(o->port ? o->port : BLOCK_NBD_DEFAULT_PORT);
    s->path = g_strdup(o->path);
    s->export_name = g_strdup(o->export_name ? o->export_name : "");
    if (o->tls_psk_dir) {
        s->tls_psk_file = g_build_filename(o->tls_psk_dir, "keys.psk",
                                           NULL);
        s->tls_user = g_strdup(o->tls_username ? o->tls_username : "qemu");
    } else {
        s->tls_dir = g_strdup(o->tls_creds_dir);
        s->tls_verify = !o->tls_no_verify_peer;
    }
    s->reconnect_delay = o->reconnect_delay;
    s->desc = blk_nbd_describe(o);
    bs->filename = g_strdup(s->desc);

    h = nbd_handle_new(s, errp);
    if (!h) {
        return false;
    }
    r = nbd_open_connect(s, h, NBD_OPEN_TIMEOUT_S * 1000);
    if (r <= 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot connect: %s (check that "
                    "the NBD server runs, serves export '%s', and uses TLS "
                    "exactly when tls-creds or tls-creds-dir is given, with "
                    "credentials the server accepts)", s->desc,
                    r < 0 ? nbd_get_error() :
                    "no answer within " G_STRINGIFY(NBD_OPEN_TIMEOUT_S) " s",
                    s->export_name);
        nbd_close(h);
        return false;
    }
    size = nbd_get_size(h);
    if (size < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: %s", s->desc, nbd_get_error());
        nbd_close(h);
        return false;
    }
    s->size = size;
    s->server_ro = nbd_is_read_only(h) > 0;
    s->can_flush = nbd_can_flush(h) > 0;
    s->can_fua = nbd_can_fua(h) > 0;
    s->can_trim = nbd_can_trim(h) > 0;
    s->can_zero = nbd_can_zero(h) > 0;
    s->can_fast_zero = nbd_can_fast_zero(h) > 0;
    s->base_alloc = nbd_can_meta_context(h, NBD_META_BASE_ALLOCATION) > 0;
    minb = nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
    prefb = nbd_get_block_size(h, LIBNBD_SIZE_PREFERRED);
    maxb = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);
    nbd_aio_disconnect(h, 0);
    nbd_close(h);

    /* Made here, by an unconfined thread, so that it is not confined
     * (a thread inherits its creator's filter); idle unless an iothread
     * under --seccomp on needs a connection. */
    s->dialer = g_thread_try_new("nbd-dial", nbd_dialer, s, errp);
    if (!s->dialer) {
        g_prefix_error(errp, "%s: ", s->desc);
        return false;
    }

    /* The server's sizes, where they are sane (powers of two for the
     * minimum, as the protocol requires). */
    s->min_block = minb > 0 && minb <= 65536 && !(minb & (minb - 1)) ?
                   minb : 1;
    s->max_payload = maxb > 0 ? MIN((uint64_t)maxb, NBD_LIBNBD_MAX_PAYLOAD)
                              : NBD_DEFAULT_MAX_PAYLOAD;
    s->max_payload = MAX(s->max_payload & ~(s->min_block - 1),
                         s->min_block);

    bs->size = s->size;
    if (s->server_ro) {
        bs->readonly = true;
    }
    bs->bl.logical_block_size = 512;
    bs->bl.physical_block_size = 512;
    if (prefb >= 512 && prefb <= 65536 && !(prefb & (prefb - 1))) {
        bs->bl.physical_block_size = prefb;
        bs->bl.opt_io_size = prefb;
    }
    bs->bl.request_alignment = s->min_block;
    bs->bl.can_discard = s->can_trim;
    bs->bl.can_write_zeroes = s->can_zero;
    return true;
}

/* Main thread: the export's size is the server's; only the size it had
 * at open is taken (a resize there is not seen: see "Reconnecting"). */
static bool nbd_drv_truncate(BlockBackend *bs, uint64_t size, GError **errp)
{
    BDRVNBDState *s = bs->opaque;

    if (size != s->size) {
        g_set_error(errp, VB_ERROR, 0, "%s: an NBD export cannot be resized "
                    "by its client: resize the image on the server, then "
                    "add the node again", s->desc);
        return false;
    }
    return true;
}

/* Any thread: what the monitor shows. */
static void nbd_get_info(BlockBackend *bs, BlockDriverInfo *bdi)
{
    memset(bdi, 0, sizeof(*bdi));
}

const BlockDriver bdrv_nbd = {
    .format_name = "nbd",
    /* The open waits for the server. */
    .bdrv_open_any_thread = true,
    .bdrv_open = nbd_drv_open,
    .bdrv_close = nbd_drv_close,
    .bdrv_truncate = nbd_drv_truncate,
    .bdrv_get_info = nbd_get_info,
    .bdrv_attach_aio_context = nbd_attach_aio_context,
    .bdrv_detach_aio_context = nbd_detach_aio_context,
    .bdrv_aio_preadv = nbd_submit,
    .bdrv_aio_pwritev = nbd_submit,
    .bdrv_aio_flush = nbd_submit,
    .bdrv_aio_pdiscard = nbd_submit,
    .bdrv_aio_pwrite_zeroes = nbd_submit,
    .bdrv_aio_block_status = nbd_submit,
};

/* The loader checks it before it uses bdrv_nbd. */
const BlockModuleAbi block_module_abi = BLOCK_MODULE_ABI_INIT;
