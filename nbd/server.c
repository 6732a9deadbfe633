/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The NBD server: see include/nbd/server.h.
 *
 * A connection is a state machine driven by its socket's handlers
 * (non-blocking, never waiting in a handler):
 *
 *   greeting sent -> client flags -> option header -> option data -> ...
 *       -> (NBD_OPT_GO) moving -> transmission -> closing -> freed
 *
 * The handshake runs in the main context; a connection that has chosen an
 * export moves to one of the export's contexts and stays there.  Its
 * requests are read exactly (a header, then a WRITE's payload straight
 * into the request slot's buffer), so nothing is ever read ahead and a
 * connection can change context between two reads.
 *
 * Untrusted input: every length and offset a client sends is checked
 * against what the option or the image allows before anything is read
 * into a buffer or submitted.  An option or request we can answer gets an
 * error reply (a WRITE we refuse, even one longer than
 * NBD_MAX_BUFFER_SIZE, has its payload read and dropped); one after which
 * we cannot find the next message again (a bad magic, an oversized
 * option) closes the connection.  Either way only that client is affected.
 *
 * Lifetime: a connection holds a reference on itself until it has
 * finished (closed and nothing in flight in the block layer); bottom
 * halves that other threads schedule for it hold one each.  The server's
 * lock protects its list of connections, their context and the client
 * counts; it is taken per connection, never per request.  A closed
 * server (nbd_server_close()) lives on until its last connection has
 * finished, so stopping it never waits for storage.
 */
#include "qemu/osdep.h"
#include "nbd/server.h"
#include "nbd/nbd.h"
#include "nbd/tls.h"
#include "qemu/defer-call.h"
#include "qemu/error-report.h"
#include "qemu/queue.h"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

typedef struct NbdClient NbdClient;

struct NbdExport {
    NbdServer *srv;
    char *name;
    char *description;
    BlockBackend *blk;
    bool writable;
    bool multi_conn;
    BlockDiscardMode discard;
    AioContext **ctx;
    unsigned int n_ctx;
    unsigned int next_ctx;      /* round robin over @ctx */
    bool removed;               /* nbd_export_remove(): off the list */
    unsigned int n_clients;     /* connections on it; server lock */
    NbdExportStats retired;     /* of its connections gone; server lock */
    void (*done)(void *opaque);
    void *done_opaque;
    QLIST_ENTRY(NbdExport) next;
};

struct NbdServer {
    AioContext *main_ctx;
    int listen_fd;
    char *unix_path;
    unsigned int max_connections;
    NbdTlsCreds *tls;
    const NbdAuthz *tls_authz;
    QLIST_HEAD(, NbdExport) exports;
    QLIST_HEAD(, NbdExport) removed;   /* waiting for their clients */
    QEMUBH *reap_bh;            /* frees removed exports with no client;
                                 * resumes accepting */
    bool accept_paused;         /* out of fds: until a connection closes */
    bool closing;               /* nbd_server_close(): frees itself */
    void (*closed)(void *opaque);
    void *closed_opaque;
    unsigned int handshake_max_seconds;
    int timer_fd;               /* ticks while clients negotiate */
    bool timer_armed;

    /* pthread's rather than GLib's, so that ThreadSanitizer sees them */
    pthread_mutex_t lock;
    pthread_cond_t cond;        /* n_clients dropped */
    QLIST_HEAD(, NbdClient) clients;
    unsigned int n_clients;
};

typedef enum NbdPhase {
    NBD_PHASE_CLIENT_FLAGS,     /* 4 bytes */
    NBD_PHASE_OPT_HEADER,       /* 16 bytes */
    NBD_PHASE_OPT_DATA,         /* the option's length */
    NBD_PHASE_MOVING,           /* GO answered: to the export's context */
    NBD_PHASE_REQ_HEADER,       /* 28 bytes */
    NBD_PHASE_REQ_PAYLOAD,      /* a WRITE's data */
    NBD_PHASE_REQ_SKIP,         /* a refused WRITE's data, dropped */
} NbdPhase;

typedef struct NbdReq {
    NbdClient *c;
    BlockAIOCB acb;
    uint16_t flags;
    uint16_t type;
    uint64_t cookie;
    uint64_t offset;
    uint32_t len;
    int err;                    /* NBD_E*: the answer */
    int64_t start_ns;           /* read complete (statistics) */
    bool flush_after;           /* FUA on trim/write-zeroes: then flush */
    /* The data buffer, kept across requests (grown, never per request
     * once the connection has seen its largest size). */
    uint8_t *buf;
    size_t buf_size;
    struct iovec iov;
    /* Block status: extents built in @buf, position reached. */
    BlockStatus bs;
    uint64_t bs_pos;
    uint32_t n_extents;
    /* The reply being sent. */
    uint8_t hdr[32];
    struct iovec out[2];
    unsigned int n_out;
    size_t out_len, out_sent;
    QSIMPLEQ_ENTRY(NbdReq) next;
} NbdReq;

/* Extents one BLOCK_STATUS reply carries at most (8 bytes each). */
#define NBD_MAX_EXTENTS 256

struct NbdClient {
    NbdServer *srv;
    NbdExport *exp;             /* chosen with GO; then fixed */
    AioContext *ctx;            /* where it runs; server lock to change */
    int fd;
    int ref;                    /* atomic */
    NbdPhase phase;
    bool closing;
    bool finished;
    bool disc;                  /* NBD_CMD_DISC: close once answered */
    bool close_after_send;      /* NBD_OPT_ABORT */
    bool reg_read, reg_write;   /* what the handlers are registered for */
    NbdTls *tls;                /* after STARTTLS */
    bool tls_pending;           /* STARTTLS answered: handshake next */
    bool tls_kick;              /* nbd_client_tls_kick_bh() scheduled */

    /* Handshake */
    int64_t deadline;           /* g_get_monotonic_time(); 0: none */
    bool no_zeroes;
    bool structured;
    NbdExport *meta_exp;        /* base:allocation selected for it */
    bool meta_base;
    uint8_t hdr[NBD_REQUEST_SIZE];
    size_t hdr_need, hdr_got;
    uint32_t opt, opt_len;
    uint8_t *opt_buf;           /* NBD_MAX_OPTION_SIZE, handshake only */
    size_t opt_got;
    GByteArray *out;            /* handshake replies not yet sent */
    size_t out_sent;

    /* Transmission */
    uint64_t size;
    uint16_t tflags;
    NbdReq reqs[NBD_SERVER_MAX_INFLIGHT];
    NbdReq *free_reqs[NBD_SERVER_MAX_INFLIGHT];
    unsigned int n_free;
    unsigned int in_block;      /* submitted, callback not run yet */
    NbdReq *cur;                /* receiving its payload */
    size_t payload_got;
    uint8_t skip_buf[4096];     /* where a refused payload goes */
    QSIMPLEQ_HEAD(, NbdReq) sendq;
    /* Written by the connection's thread only (relaxed atomic stores),
     * read by nbd_export_get_stats() under the server lock. */
    NbdExportStats st;

    QLIST_ENTRY(NbdClient) next;
};

static void nbd_client_update_handlers(NbdClient *c);
static void nbd_client_close(NbdClient *c);
static void nbd_client_read(void *opaque);
static void nbd_client_write(void *opaque);

/* ---- connection lifetime ----------------------------------------------- */

static void nbd_client_ref(NbdClient *c)
{
    __atomic_add_fetch(&c->ref, 1, __ATOMIC_RELAXED);
}

static void nbd_client_unref(NbdClient *c)
{
    if (__atomic_sub_fetch(&c->ref, 1, __ATOMIC_ACQ_REL) == 0) {
        for (unsigned int i = 0; i < NBD_SERVER_MAX_INFLIGHT; i++) {
            free(c->reqs[i].buf);
        }
        nbd_tls_free(c->tls);
        g_free(c->opt_buf);
        if (c->out) {
            g_byte_array_free(c->out, true);
        }
        g_free(c);
    }
}

/* ---- statistics ---------------------------------------------------------- */

/* A counter only the connection's thread writes: a relaxed load and store
 * (no locked instruction) that a reader in another thread never sees
 * torn. */
static inline void nbd_stat_inc(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v,
                     __ATOMIC_RELAXED);
}

static inline uint64_t nbd_stat_get(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* @dst += @src; @src may be a live connection's (server lock held). */
static void nbd_stats_add(NbdExportStats *dst, const NbdExportStats *src)
{
    dst->requests += nbd_stat_get(&src->requests);
    dst->completed += nbd_stat_get(&src->completed);
    dst->wr_highest_offset = MAX(dst->wr_highest_offset,
                                 nbd_stat_get(&src->wr_highest_offset));
    for (unsigned int o = 0; o < VU_BLK_OP__MAX; o++) {
        dst->ops[o].ops += nbd_stat_get(&src->ops[o].ops);
        dst->ops[o].failed += nbd_stat_get(&src->ops[o].failed);
        dst->ops[o].bytes += nbd_stat_get(&src->ops[o].bytes);
        dst->ops[o].total_ns += nbd_stat_get(&src->ops[o].total_ns);
        for (unsigned int b = 0; b < LAT_HIST_FIXED_BINS; b++) {
            dst->lat_bins[o][b] += nbd_stat_get(&src->lat_bins[o][b]);
        }
    }
}

static int64_t nbd_clock_ns(void)
{
    struct timespec ts;

    /* vDSO: no system call. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* In the connection's thread: @r is read (and will be answered). */
static void nbd_req_started(NbdClient *c, NbdReq *r)
{
    r->start_ns = nbd_clock_ns();
    nbd_stat_inc(&c->st.requests, 1);
}

/* In the connection's thread: @r is answered with r->err. */
static void nbd_req_account(NbdClient *c, NbdReq *r)
{
    NbdExportStats *st = &c->st;
    int64_t now = nbd_clock_ns();
    uint64_t lat = now >= r->start_ns ? now - r->start_ns : 0;
    VuBlkOp op;

    switch (r->type) {
    case NBD_CMD_READ:
        op = VU_BLK_OP_READ;
        break;
    case NBD_CMD_WRITE:
        op = VU_BLK_OP_WRITE;
        break;
    case NBD_CMD_FLUSH:
        op = VU_BLK_OP_FLUSH;
        break;
    case NBD_CMD_TRIM:
        op = VU_BLK_OP_DISCARD;
        break;
    case NBD_CMD_WRITE_ZEROES:
        op = VU_BLK_OP_WRITE_ZEROES;
        break;
    default:
        op = VU_BLK_OP_OTHER;
        break;
    }
    nbd_stat_inc(&st->completed, 1);
    nbd_stat_inc(&st->ops[op].ops, 1);
    if (r->err) {
        nbd_stat_inc(&st->ops[op].failed, 1);
    } else if (op != VU_BLK_OP_FLUSH && op != VU_BLK_OP_OTHER) {
        nbd_stat_inc(&st->ops[op].bytes, r->len);
        if ((op == VU_BLK_OP_WRITE || op == VU_BLK_OP_WRITE_ZEROES) &&
            r->offset + r->len > st->wr_highest_offset) {
            __atomic_store_n(&st->wr_highest_offset, r->offset + r->len,
                             __ATOMIC_RELAXED);
        }
    }
    nbd_stat_inc(&st->ops[op].total_ns, lat);
    nbd_stat_inc(&st->lat_bins[op][lat_hist_fixed_bucket(lat)], 1);
}

/* Closed and nothing left in the block layer: leave the server. */
static void nbd_client_maybe_finish(NbdClient *c)
{
    NbdServer *srv = c->srv;

    if (!c->closing || c->in_block || c->finished) {
        return;
    }
    c->finished = true;
    close(c->fd);
    c->fd = -1;
    pthread_mutex_lock(&srv->lock);
    QLIST_REMOVE(c, next);
    srv->n_clients--;
    if (c->exp) {
        c->exp->n_clients--;
        /* Its thread has stopped counting: keep what it counted. */
        nbd_stats_add(&c->exp->retired, &c->st);
    }
    /* Removed exports waiting for it, or a paused listener. */
    qemu_bh_schedule(srv->reap_bh);
    pthread_cond_broadcast(&srv->cond);
    pthread_mutex_unlock(&srv->lock);
    /* From here on, nothing of the server may be touched. */
    nbd_client_unref(c);
}

static void nbd_client_close(NbdClient *c)
{
    if (c->closing) {
        return;
    }
    c->closing = true;
    shutdown(c->fd, SHUT_RDWR);
    if (c->reg_read || c->reg_write) {
        aio_set_fd_handler(c->ctx, c->fd, NULL, NULL, NULL, NULL, NULL);
        c->reg_read = c->reg_write = false;
    }
    nbd_client_maybe_finish(c);
}

/* A bottom half in the connection's context: close it (from another
 * thread: export removal, server shutdown). */
static void nbd_client_kill_bh(void *opaque)
{
    NbdClient *c = opaque;

    nbd_client_close(c);
    nbd_client_unref(c);
}

static void nbd_client_update_handlers(NbdClient *c)
{
    bool want_write, want_read;

    if (c->closing) {
        return;
    }
    if (c->phase >= NBD_PHASE_REQ_HEADER) {
        want_write = !QSIMPLEQ_EMPTY(&c->sendq);
        want_read = !c->disc &&
                    (c->phase != NBD_PHASE_REQ_HEADER || c->n_free > 0);
    } else if (c->tls && !nbd_tls_handshake_done(c->tls)) {
        want_write = nbd_tls_wants_write(c->tls);
        want_read = !want_write;
    } else {
        want_write = c->out && c->out_sent < c->out->len;
        /* One option at a time: the next is read once this one's
         * answer is out. */
        want_read = !want_write && c->phase != NBD_PHASE_MOVING;
    }
    if (want_read != c->reg_read || want_write != c->reg_write) {
        aio_set_fd_handler(c->ctx, c->fd,
                           want_read ? nbd_client_read : NULL,
                           want_write ? nbd_client_write : NULL,
                           NULL, NULL, c);
        c->reg_read = want_read;
        c->reg_write = want_write;
    }
}

/* ---- socket I/O (plain or TLS) ----------------------------------------- */

/* > 0 bytes, 0 at EOF, -EAGAIN, or another -errno. */
static ssize_t nbd_client_recv(NbdClient *c, void *buf, size_t len)
{
    ssize_t r;

    if (c->tls) {
        return nbd_tls_recv(c->tls, buf, len);
    }
    do {
        r = recv(c->fd, buf, len, MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
    return r;
}

/* Bytes sent (>= 0), -EAGAIN when nothing could be, or another -errno. */
static ssize_t nbd_client_sendv(NbdClient *c, const struct iovec *iov,
                                int n)
{
    struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = n };
    ssize_t r;

    if (c->tls) {
        return nbd_tls_sendv(c->tls, iov, n);
    }
    do {
        r = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
    return r;
}

/*
 * Read into @buf until *@got reaches @need.  True when complete; false
 * when the socket has no more for now (or the connection was closed:
 * check c->closing).
 */
static bool nbd_client_fill(NbdClient *c, void *buf, size_t need,
                            size_t *got)
{
    while (*got < need) {
        ssize_t r = nbd_client_recv(c, (uint8_t *)buf + *got, need - *got);

        if (r == -EAGAIN) {
            return false;
        }
        if (r <= 0) {
            nbd_client_close(c);
            return false;
        }
        *got += r;
    }
    return true;
}

/* ---- handshake ---------------------------------------------------------- */

static void nbd_out_u16(NbdClient *c, uint16_t v)
{
    uint8_t b[2];

    nbd_st16(b, v);
    g_byte_array_append(c->out, b, sizeof(b));
}

static void nbd_out_u32(NbdClient *c, uint32_t v)
{
    uint8_t b[4];

    nbd_st32(b, v);
    g_byte_array_append(c->out, b, sizeof(b));
}

static void nbd_out_u64(NbdClient *c, uint64_t v)
{
    uint8_t b[8];

    nbd_st64(b, v);
    g_byte_array_append(c->out, b, sizeof(b));
}

/* An option reply header for @len bytes of data, which follow. */
static void nbd_opt_reply(NbdClient *c, uint32_t type, uint32_t len)
{
    nbd_out_u64(c, NBD_REP_MAGIC);
    nbd_out_u32(c, c->opt);
    nbd_out_u32(c, type);
    nbd_out_u32(c, len);
}

static void nbd_opt_ack(NbdClient *c)
{
    nbd_opt_reply(c, NBD_REP_ACK, 0);
}

/* An error reply with a message for the client's user. */
static void G_GNUC_PRINTF(3, 4) nbd_opt_error(NbdClient *c, uint32_t type,
                                              const char *fmt, ...)
{
    g_autofree char *msg = NULL;
    va_list ap;
    size_t len;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    len = MIN(strlen(msg), (size_t)NBD_MAX_STRING_SIZE);
    nbd_opt_reply(c, type, len);
    g_byte_array_append(c->out, (const uint8_t *)msg, len);
}

static NbdExport *nbd_export_lookup(NbdServer *srv, const uint8_t *name,
                                    size_t len)
{
    NbdExport *e;

    QLIST_FOREACH(e, &srv->exports, next) {
        if (strlen(e->name) == len && !memcmp(e->name, name, len)) {
            return e;
        }
    }
    return NULL;
}

static uint16_t nbd_export_tflags(NbdClient *c, NbdExport *e)
{
    uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH |
                 NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_CACHE;

    if (!e->writable) {
        f |= NBD_FLAG_READ_ONLY;
    } else {
        /* Not for a node that cannot (an NBD node whose server has no
         * write-zeroes): the client then writes zeroes as data, where
         * we could only answer ENOTSUP, which the specification keeps
         * for FAST_ZERO. */
        if (blk_can_write_zeroes(e->blk)) {
            f |= NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO;
        }
        if (e->discard != BLOCK_DISCARD_OFF) {
            f |= NBD_FLAG_SEND_TRIM;
        }
    }
    /* Every connection reaches the same node through the same cache
     * (none, or the host's page cache that a flush covers whole): a
     * flush on one is a flush for all.  Writers only with multi-conn=on,
     * as QEMU. */
    if (!e->writable || e->multi_conn) {
        f |= NBD_FLAG_CAN_MULTI_CONN;
    }
    if (c->structured) {
        f |= NBD_FLAG_SEND_DF;
    }
    return f;
}

static void nbd_client_start_transmission(NbdClient *c, NbdExport *e);

/* NBD_OPT_EXPORT_NAME: no reply on error, the connection just closes. */
static void nbd_opt_export_name(NbdClient *c)
{
    NbdExport *e = nbd_export_lookup(c->srv, c->opt_buf, c->opt_len);
    static const uint8_t zeroes[124];

    if (!e) {
        nbd_client_close(c);
        return;
    }
    nbd_out_u64(c, blk_getlength(e->blk));
    nbd_out_u16(c, nbd_export_tflags(c, e));
    if (!c->no_zeroes) {
        g_byte_array_append(c->out, zeroes, sizeof(zeroes));
    }
    nbd_client_start_transmission(c, e);
}

static void nbd_opt_list(NbdClient *c)
{
    NbdExport *e;

    if (c->opt_len) {
        nbd_opt_error(c, NBD_REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
        return;
    }
    QLIST_FOREACH(e, &c->srv->exports, next) {
        size_t n = strlen(e->name);

        nbd_opt_reply(c, NBD_REP_SERVER, 4 + n);
        nbd_out_u32(c, n);
        g_byte_array_append(c->out, (const uint8_t *)e->name, n);
    }
    nbd_opt_ack(c);
}

static void nbd_opt_info_string(NbdClient *c, uint16_t type, const char *s)
{
    size_t n = MIN(strlen(s), (size_t)NBD_MAX_STRING_SIZE);

    nbd_opt_reply(c, NBD_REP_INFO, 2 + n);
    nbd_out_u16(c, type);
    g_byte_array_append(c->out, (const uint8_t *)s, n);
}

/* NBD_OPT_INFO and NBD_OPT_GO: u32 name length, name, u16 count, u16
 * info requests. */
static void nbd_opt_info_go(NbdClient *c)
{
    const uint8_t *p = c->opt_buf;
    uint32_t len = c->opt_len, name_len, n_info;
    bool want_name = false, want_desc = false;
    uint32_t min_block;
    NbdExport *e;

    if (len < 6) {
        nbd_opt_error(c, NBD_REP_ERR_INVALID, "option data too short");
        return;
    }
    name_len = nbd_ld32(p);
    if (name_len > NBD_MAX_STRING_SIZE || name_len > len - 6) {
        nbd_opt_error(c, NBD_REP_ERR_INVALID, "bad export name length");
        return;
    }
    n_info = nbd_ld16(p + 4 + name_len);
    if (len != 6 + name_len + 2 * n_info) {
        nbd_opt_error(c, NBD_REP_ERR_INVALID, "option length does not "
                      "match its information requests");
        return;
    }
    for (uint32_t i = 0; i < n_info; i++) {
        uint16_t t = nbd_ld16(p + 6 + name_len + 2 * i);

        want_name |= t == NBD_INFO_NAME;
        want_desc |= t == NBD_INFO_DESCRIPTION;
    }
    e = nbd_export_lookup(c->srv, p + 4, name_len);
    if (!e) {
        nbd_opt_error(c, NBD_REP_ERR_UNKNOWN, "export '%.*s' not present "
                      "(NBD_OPT_LIST shows the exports)", (int)name_len,
                      (const char *)(p + 4));
        return;
    }
    if (want_name) {
        nbd_opt_info_string(c, NBD_INFO_NAME, e->name);
    }
    if (want_desc && e->description) {
        nbd_opt_info_string(c, NBD_INFO_DESCRIPTION, e->description);
    }
    /* The block layer does no read-modify-write: a read or write not
     * aligned to the node's request alignment (its logical block under
     * O_DIRECT) fails with EINVAL, so that is the minimum we announce;
     * a client that did not ask still gets EINVAL, cleanly, as the
     * specification allows.  It is a power of two; the protocol's
     * limit is 64 KiB.  Preferred: the device's own block. */
    min_block = MIN(blk_get_request_alignment(e->blk), 65536u);
    nbd_opt_reply(c, NBD_REP_INFO, 14);
    nbd_out_u16(c, NBD_INFO_BLOCK_SIZE);
    nbd_out_u32(c, min_block);
    nbd_out_u32(c, MAX(MAX(blk_get_physical_block_size(e->blk), 4096u),
                       min_block));
    nbd_out_u32(c, NBD_MAX_BUFFER_SIZE);
    nbd_opt_reply(c, NBD_REP_INFO, 12);
    nbd_out_u16(c, NBD_INFO_EXPORT);
    nbd_out_u64(c, blk_getlength(e->blk));
    nbd_out_u16(c, nbd_export_tflags(c, e));
    nbd_opt_ack(c);
    if (c->opt == NBD_OPT_GO) {
        nbd_client_start_transmission(c, e);
    }
}

/* LIST_META_CONTEXT and SET_META_CONTEXT: u32 name length, name, u32
 * query count, queries (u32 length, string). */
static void nbd_opt_meta(NbdClient *c)
{
    const uint8_t *p = c->opt_buf;
    uint32_t len = c->opt_len, name_len, n_q, pos;
    bool set = c->opt == NBD_OPT_SET_META_CONTEXT;
    bool base = false;
    NbdExport *e;

    if (set) {
        /* It replaces what an earlier one chose, failing or not */
        c->meta_exp = NULL;
        c->meta_base = false;
    }
    if (!c->structured) {
        nbd_opt_error(c, NBD_REP_ERR_INVALID, "negotiate "
                      "NBD_OPT_STRUCTURED_REPLY before metadata contexts");
        return;
    }
    if (len < 8) {
        nbd_opt_error(c, NBD_REP_ERR_INVALID, "option data too short");
        return;
    }
    name_len = nbd_ld32(p);
    if (name_len > NBD_MAX_STRING_SIZE || name_len > len - 8) {
        nbd_opt_error(c, NBD_REP_ERR_INVALID, "bad export name length");
        return;
    }
    e = nbd_export_lookup(c->srv, p + 4, name_len);
    n_q = nbd_ld32(p + 4 + name_len);
    pos = 8 + name_len;
    for (uint32_t i = 0; i < n_q; i++) {
        uint32_t ql;

        if (len - pos < 4) {
            nbd_opt_error(c, NBD_REP_ERR_INVALID, "query count exceeds "
                          "the option's data");
            return;
        }
        ql = nbd_ld32(p + pos);
        pos += 4;
        if (ql > NBD_MAX_STRING_SIZE || ql > len - pos) {
            nbd_opt_error(c, NBD_REP_ERR_INVALID, "bad query length");
            return;
        }
        if ((ql == strlen(NBD_META_BASE_ALLOCATION) &&
             !memcmp(p + pos, NBD_META_BASE_ALLOCATION, ql)) ||
            (!set && ql == 5 && !memcmp(p + pos, "base:", 5))) {
            base = true;
        }
        pos += ql;
    }
    if (pos != len) {
        nbd_opt_error(c, NBD_REP_ERR_INVALID, "trailing data after the "
                      "queries");
        return;
    }
    if (!e) {
        nbd_opt_error(c, NBD_REP_ERR_UNKNOWN, "export '%.*s' not present",
                      (int)name_len, (const char *)(p + 4));
        return;
    }
    if (!set && n_q == 0) {
        base = true;            /* list every context */
    }
    if (set) {
        c->meta_exp = e;
        c->meta_base = base;
    }
    if (base) {
        size_t n = strlen(NBD_META_BASE_ALLOCATION);

        nbd_opt_reply(c, NBD_REP_META_CONTEXT, 4 + n);
        nbd_out_u32(c, set ? 1 : 0);
        g_byte_array_append(c->out, (const uint8_t *)NBD_META_BASE_ALLOCATION,
                            n);
    }
    nbd_opt_ack(c);
}

static void nbd_client_handle_option(NbdClient *c)
{
    bool tls_needed = c->srv->tls && !c->tls;

    if (tls_needed && c->opt == NBD_OPT_EXPORT_NAME) {
        /* No way to answer this one with an error. */
        nbd_client_close(c);
        return;
    }
    if (tls_needed && c->opt != NBD_OPT_STARTTLS &&
        c->opt != NBD_OPT_ABORT) {
        nbd_opt_error(c, NBD_REP_ERR_TLS_REQD, "TLS is required on this "
                      "server: negotiate NBD_OPT_STARTTLS first");
        return;
    }
    switch (c->opt) {
    case NBD_OPT_EXPORT_NAME:
        nbd_opt_export_name(c);
        break;
    case NBD_OPT_ABORT:
        nbd_opt_ack(c);
        c->close_after_send = true;
        break;
    case NBD_OPT_LIST:
        nbd_opt_list(c);
        break;
    case NBD_OPT_STARTTLS:
        if (c->opt_len) {
            nbd_opt_error(c, NBD_REP_ERR_INVALID, "NBD_OPT_STARTTLS takes "
                          "no data");
        } else if (!c->srv->tls) {
            nbd_opt_error(c, NBD_REP_ERR_POLICY, "TLS is not configured "
                          "on this server");
        } else if (c->tls) {
            nbd_opt_error(c, NBD_REP_ERR_INVALID, "TLS is already on");
        } else {
            nbd_opt_ack(c);
            c->tls_pending = true;
        }
        break;
    case NBD_OPT_INFO:
    case NBD_OPT_GO:
        nbd_opt_info_go(c);
        break;
    case NBD_OPT_STRUCTURED_REPLY:
        if (c->opt_len) {
            nbd_opt_error(c, NBD_REP_ERR_INVALID, "NBD_OPT_STRUCTURED_REPLY "
                          "takes no data");
        } else if (c->structured) {
            nbd_opt_error(c, NBD_REP_ERR_INVALID, "structured replies are "
                          "already on");
        } else {
            c->structured = true;
            nbd_opt_ack(c);
        }
        break;
    case NBD_OPT_LIST_META_CONTEXT:
    case NBD_OPT_SET_META_CONTEXT:
        nbd_opt_meta(c);
        break;
    default:
        nbd_opt_error(c, NBD_REP_ERR_UNSUP, "option %" PRIu32 " is not "
                      "supported", c->opt);
        break;
    }
}

/* Send what the handshake has queued.  False if the connection closed. */
static bool nbd_client_flush_handshake(NbdClient *c)
{
    while (c->out_sent < c->out->len) {
        struct iovec iov = {
            .iov_base = c->out->data + c->out_sent,
            .iov_len = c->out->len - c->out_sent,
        };
        ssize_t r = nbd_client_sendv(c, &iov, 1);

        if (r == -EAGAIN) {
            return true;
        }
        if (r < 0) {
            nbd_client_close(c);
            return false;
        }
        c->out_sent += r;
    }
    g_byte_array_set_size(c->out, 0);
    c->out_sent = 0;
    if (c->close_after_send) {
        nbd_client_close(c);
        return false;
    }
    if (c->tls_pending) {
        GError *err = NULL;

        c->tls_pending = false;
        c->tls = nbd_tls_new_server(c->srv->tls, c->fd, &err);
        if (!c->tls) {
            warn_report("NBD client: %s", err->message);
            g_error_free(err);
            nbd_client_close(c);
            return false;
        }
        nbd_tls_set_authz(c->tls, c->srv->tls_authz);
    }
    return true;
}

/* ---- moving to the export's context ------------------------------------ */

static void nbd_client_attach_bh(void *opaque)
{
    NbdClient *c = opaque;

    if (!c->closing) {
        c->phase = NBD_PHASE_REQ_HEADER;
        c->hdr_need = NBD_REQUEST_SIZE;
        c->hdr_got = 0;
        nbd_client_update_handlers(c);
        /* TLS may hold records already decrypted. */
        if (c->tls && nbd_tls_pending(c->tls)) {
            nbd_client_read(c);
        }
    }
    nbd_client_unref(c);
}

static void nbd_client_start_transmission(NbdClient *c, NbdExport *e)
{
    c->exp = e;
    c->size = blk_getlength(e->blk);
    c->tflags = nbd_export_tflags(c, e);
    if (c->meta_exp != e) {
        c->meta_base = false;
    }
    pthread_mutex_lock(&c->srv->lock);
    e->n_clients++;
    e->retired.connections++;
    pthread_mutex_unlock(&c->srv->lock);
    c->phase = NBD_PHASE_MOVING;
}

/* The GO reply is out: hand the connection to the export's context. */
static void nbd_client_move(NbdClient *c)
{
    NbdExport *e = c->exp;
    AioContext *ctx = e->ctx[e->next_ctx++ % e->n_ctx];

    g_free(c->opt_buf);
    c->opt_buf = NULL;
    c->deadline = 0;
    if (c->reg_read || c->reg_write) {
        aio_set_fd_handler(c->ctx, c->fd, NULL, NULL, NULL, NULL, NULL);
        c->reg_read = c->reg_write = false;
    }
    pthread_mutex_lock(&c->srv->lock);
    c->ctx = ctx;
    pthread_mutex_unlock(&c->srv->lock);
    nbd_client_ref(c);
    aio_bh_schedule_oneshot(ctx, nbd_client_attach_bh, c, "nbd-attach");
}

/* ---- transmission: replies ---------------------------------------------- */

static int nbd_errno(int ret)
{
    switch (-ret) {
    case 0:
        return NBD_SUCCESS;
    case EPERM:
    case EROFS:
        return NBD_EPERM;
    case ENOMEM:
        return NBD_ENOMEM;
    case EINVAL:
        return NBD_EINVAL;
    case ENOSPC:
    case EFBIG:
    case EDQUOT:
        return NBD_ENOSPC;
    case EOVERFLOW:
        return NBD_EOVERFLOW;
    case ENOTSUP:
#if EOPNOTSUPP != ENOTSUP
    case EOPNOTSUPP:
#endif
        return NBD_ENOTSUP;
    case ESHUTDOWN:
        return NBD_ESHUTDOWN;
    default:
        return NBD_EIO;
    }
}

static void nbd_req_release(NbdClient *c, NbdReq *r)
{
    c->free_reqs[c->n_free++] = r;
}

static void nbd_client_tls_kick_bh(void *opaque)
{
    NbdClient *c = opaque;

    c->tls_kick = false;
    if (!c->closing && c->reg_read) {
        nbd_client_read(c);
    }
    nbd_client_unref(c);
}

/* Send queued replies in order; release each request once sent. */
static void nbd_client_flush_replies(NbdClient *c)
{
    NbdReq *r;

    while (!c->closing && (r = QSIMPLEQ_FIRST(&c->sendq))) {
        struct iovec iov[2];
        size_t skip = r->out_sent;
        unsigned int n = 0;
        ssize_t w;

        for (unsigned int i = 0; i < r->n_out; i++) {
            if (skip >= r->out[i].iov_len) {
                skip -= r->out[i].iov_len;
                continue;
            }
            iov[n].iov_base = (uint8_t *)r->out[i].iov_base + skip;
            iov[n].iov_len = r->out[i].iov_len - skip;
            skip = 0;
            n++;
        }
        w = nbd_client_sendv(c, iov, n);
        if (w == -EAGAIN) {
            break;
        }
        if (w < 0) {
            nbd_client_close(c);
            return;
        }
        r->out_sent += w;
        if (r->out_sent < r->out_len) {
            continue;
        }
        QSIMPLEQ_REMOVE_HEAD(&c->sendq, next);
        nbd_req_release(c, r);
    }
    if (!c->closing && c->disc && QSIMPLEQ_EMPTY(&c->sendq) &&
        c->n_free == NBD_SERVER_MAX_INFLIGHT) {
        nbd_client_close(c);
        return;
    }
    nbd_client_update_handlers(c);
    /* Requests TLS decrypted already while every slot was busy: the
     * socket will not wake us for them. */
    if (c->tls && c->reg_read && !c->tls_kick && nbd_tls_pending(c->tls)) {
        c->tls_kick = true;
        nbd_client_ref(c);
        aio_bh_schedule_oneshot(c->ctx, nbd_client_tls_kick_bh, c,
                                "nbd-tls-kick");
    }
}

static void nbd_req_simple_reply(NbdReq *r, bool with_data)
{
    nbd_st32(r->hdr, NBD_SIMPLE_REPLY_MAGIC);
    nbd_st32(r->hdr + 4, r->err);
    nbd_st64(r->hdr + 8, r->cookie);
    r->out[0].iov_base = r->hdr;
    r->out[0].iov_len = NBD_SIMPLE_REPLY_SIZE;
    r->n_out = 1;
    if (with_data) {
        r->out[1].iov_base = r->buf;
        r->out[1].iov_len = r->len;
        r->n_out = 2;
    }
}

static void nbd_req_chunk(NbdReq *r, uint16_t type, uint32_t len)
{
    nbd_st32(r->hdr, NBD_STRUCTURED_REPLY_MAGIC);
    nbd_st16(r->hdr + 4, NBD_REPLY_FLAG_DONE);
    nbd_st16(r->hdr + 6, type);
    nbd_st64(r->hdr + 8, r->cookie);
    nbd_st32(r->hdr + 16, len);
}

/* The request is answered (r->err set): queue its reply. */
static void nbd_req_complete(NbdReq *r)
{
    NbdClient *c = r->c;
    bool structured = c->structured &&
                      (r->type == NBD_CMD_READ ||
                       r->type == NBD_CMD_BLOCK_STATUS);

    nbd_req_account(c, r);
    if (c->closing) {
        nbd_req_release(c, r);
        return;
    }
    if (!structured) {
        nbd_req_simple_reply(r, r->type == NBD_CMD_READ && !r->err &&
                             r->len);
    } else if (r->err) {
        /* error u32, message length u16 (no message) */
        nbd_req_chunk(r, NBD_REPLY_TYPE_ERROR, 6);
        nbd_st32(r->hdr + 20, r->err);
        nbd_st16(r->hdr + 24, 0);
        r->out[0].iov_base = r->hdr;
        r->out[0].iov_len = 26;
        r->n_out = 1;
    } else if (r->type == NBD_CMD_READ && !r->len) {
        /* An OFFSET_DATA chunk may not be empty */
        nbd_req_chunk(r, NBD_REPLY_TYPE_NONE, 0);
        r->out[0].iov_base = r->hdr;
        r->out[0].iov_len = 20;
        r->n_out = 1;
    } else if (r->type == NBD_CMD_READ) {
        nbd_req_chunk(r, NBD_REPLY_TYPE_OFFSET_DATA, 8 + r->len);
        nbd_st64(r->hdr + 20, r->offset);
        r->out[0].iov_base = r->hdr;
        r->out[0].iov_len = 28;
        r->out[1].iov_base = r->buf;
        r->out[1].iov_len = r->len;
        r->n_out = 2;
    } else {
        uint32_t n = r->n_extents * 8;

        nbd_req_chunk(r, NBD_REPLY_TYPE_BLOCK_STATUS, 4 + n);
        nbd_st32(r->hdr + 20, 1);       /* base:allocation's id */
        r->out[0].iov_base = r->hdr;
        r->out[0].iov_len = 24;
        r->out[1].iov_base = r->buf;
        r->out[1].iov_len = n;
        r->n_out = 2;
    }
    r->out_len = 0;
    for (unsigned int i = 0; i < r->n_out; i++) {
        r->out_len += r->out[i].iov_len;
    }
    r->out_sent = 0;
    QSIMPLEQ_INSERT_TAIL(&c->sendq, r, next);
}

/* ---- transmission: requests --------------------------------------------- */

static void nbd_req_block_status_next(NbdReq *r);

/* A block layer callback: the request's answer is in. */
static void nbd_req_done(void *opaque, int ret)
{
    NbdReq *r = opaque;
    NbdClient *c = r->c;

    c->in_block--;
    if (!ret && r->flush_after && !c->closing) {
        r->flush_after = false;
        c->in_block++;
        blk_aio_flush(c->exp->blk, &r->acb, nbd_req_done, r);
        return;
    }
    if (!ret && r->type == NBD_CMD_BLOCK_STATUS) {
        uint32_t flags = (r->bs.flags & BDRV_BLOCK_DATA ? 0 :
                          NBD_STATE_HOLE) |
                         (r->bs.flags & BDRV_BLOCK_ZERO ? NBD_STATE_ZERO : 0);
        uint64_t end = r->offset + r->len;
        uint64_t n = MIN(MAX(r->bs.pnum, 1), end - r->bs_pos);
        uint8_t *last = r->buf + (r->n_extents - 1) * 8;

        if (r->n_extents && nbd_ld32(last + 4) == flags &&
            nbd_ld32(last) + n <= UINT32_MAX) {
            nbd_st32(last, nbd_ld32(last) + n);
        } else {
            nbd_st32(r->buf + r->n_extents * 8, n);
            nbd_st32(r->buf + r->n_extents * 8 + 4, flags);
            r->n_extents++;
        }
        r->bs_pos += n;
        if (r->bs_pos < end && r->n_extents < NBD_MAX_EXTENTS &&
            !(r->flags & NBD_CMD_FLAG_REQ_ONE) && !c->closing) {
            nbd_req_block_status_next(r);
            return;
        }
    }
    r->err = nbd_errno(ret);
    nbd_req_complete(r);
    /* Either may let the connection go: keep it until we return. */
    nbd_client_ref(c);
    if (c->closing) {
        nbd_client_maybe_finish(c);
    } else {
        nbd_client_flush_replies(c);
    }
    nbd_client_unref(c);
}

static void nbd_req_block_status_next(NbdReq *r)
{
    NbdClient *c = r->c;

    c->in_block++;
    blk_aio_block_status(c->exp->blk, &r->acb, r->bs_pos,
                         r->offset + r->len - r->bs_pos, &r->bs,
                         nbd_req_done, r);
}

/* Make @r's buffer hold @len bytes.  Grows only: once a connection has
 * seen its largest request size, no request allocates. */
static bool nbd_req_reserve(NbdReq *r, size_t len)
{
    void *p;
    size_t sz;

    if (r->buf_size >= len) {
        return true;
    }
    sz = MAX(len, (size_t)64 * 1024);
    free(r->buf);
    r->buf = NULL;
    r->buf_size = 0;
    if (posix_memalign(&p, 4096, sz)) {
        return false;
    }
    r->buf = p;
    r->buf_size = sz;
    return true;
}

/* Is [offset, offset + len) inside the image? */
static bool nbd_req_in_range(NbdClient *c, NbdReq *r)
{
    return r->offset <= c->size && r->len <= c->size - r->offset;
}

/* What the flags, the export's writability and its size say of @r:
 * NBD_SUCCESS or the error to answer. */
static int nbd_req_check(NbdClient *c, NbdReq *r)
{
    bool writes = r->type == NBD_CMD_WRITE || r->type == NBD_CMD_TRIM ||
                  r->type == NBD_CMD_WRITE_ZEROES;
    /* FUA goes with every command; the others only with the command
     * the specification documents them for (DF: once negotiated), and
     * the specification asks for EINVAL on any other. */
    uint16_t valid = NBD_CMD_FLAG_FUA;

    switch (r->type) {
    case NBD_CMD_READ:
        if (c->tflags & NBD_FLAG_SEND_DF) {
            valid |= NBD_CMD_FLAG_DF;
        }
        break;
    case NBD_CMD_WRITE_ZEROES:
        valid |= NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO;
        break;
    case NBD_CMD_BLOCK_STATUS:
        valid |= NBD_CMD_FLAG_REQ_ONE;
        break;
    }
    if (r->flags & ~valid) {
        return NBD_EINVAL;
    }
    if (writes && !c->exp->writable) {
        return NBD_EPERM;
    }
    if (r->type == NBD_CMD_WRITE_ZEROES &&
        !(c->tflags & NBD_FLAG_SEND_WRITE_ZEROES)) {
        return NBD_EINVAL;      /* not offered */
    }
    if (r->type != NBD_CMD_FLUSH && !nbd_req_in_range(c, r)) {
        /* Past the end: a write gets ENOSPC, as the specification asks */
        return r->type == NBD_CMD_WRITE ||
               r->type == NBD_CMD_WRITE_ZEROES ? NBD_ENOSPC : NBD_EINVAL;
    }
    return NBD_SUCCESS;
}

/* The request in @r is complete (header, and a WRITE's payload): check
 * it against the export and submit it, or answer it at once. */
static void nbd_req_submit(NbdClient *c, NbdReq *r)
{
    BlockBackend *blk = c->exp->blk;
    int flags = 0;

    r->flush_after = false;
    r->err = nbd_req_check(c, r);
    if (r->err) {
        nbd_req_complete(r);
        return;
    }
    switch (r->type) {
    case NBD_CMD_READ:
        if (!r->len) {
            /* Unspecified; answered as an empty success, as QEMU does */
            break;
        }
        if (r->len > NBD_MAX_BUFFER_SIZE) {
            r->err = NBD_EINVAL;
        } else if (!nbd_req_reserve(r, r->len)) {
            r->err = NBD_ENOMEM;
        } else {
            r->iov.iov_base = r->buf;
            r->iov.iov_len = r->len;
            c->in_block++;
            blk_aio_preadv(blk, &r->acb, r->offset, &r->iov, 1,
                           nbd_req_done, r);
            return;
        }
        break;
    case NBD_CMD_WRITE:
        if (!r->len) {
            break;
        }
        r->iov.iov_base = r->buf;
        r->iov.iov_len = r->len;
        c->in_block++;
        blk_aio_pwritev(blk, &r->acb, r->offset, &r->iov, 1,
                        r->flags & NBD_CMD_FLAG_FUA ? BDRV_REQ_FUA : 0,
                        nbd_req_done, r);
        return;
    case NBD_CMD_FLUSH:
        c->in_block++;
        blk_aio_flush(blk, &r->acb, nbd_req_done, r);
        return;
    case NBD_CMD_TRIM:
        /* Advisory: ignored unless the node has discard=unmap and can */
        if (!r->len || c->exp->discard != BLOCK_DISCARD_UNMAP ||
            !blk_can_discard(blk)) {
            break;
        }
        r->flush_after = r->flags & NBD_CMD_FLAG_FUA;
        c->in_block++;
        blk_aio_pdiscard(blk, &r->acb, r->offset, r->len, nbd_req_done, r);
        return;
    case NBD_CMD_WRITE_ZEROES:
        if ((r->flags & NBD_CMD_FLAG_FAST_ZERO) &&
            !blk_can_write_zeroes(blk)) {
            /* The client would rather write the zeroes itself */
            r->err = NBD_ENOTSUP;
            break;
        }
        if (!r->len) {
            break;
        }
        if (!(r->flags & NBD_CMD_FLAG_NO_HOLE)) {
            flags |= BDRV_REQ_MAY_UNMAP;
        }
        if (r->flags & NBD_CMD_FLAG_FAST_ZERO) {
            /* Not by writing buffers of zeroes (a file system without
             * FALLOC_FL_ZERO_RANGE, a device without BLKZEROOUT):
             * ENOTSUP then, at once, as the specification asks */
            flags |= BDRV_REQ_NO_FALLBACK;
        }
        r->flush_after = r->flags & NBD_CMD_FLAG_FUA;
        c->in_block++;
        blk_aio_pwrite_zeroes(blk, &r->acb, r->offset, r->len, flags,
                              nbd_req_done, r);
        return;
    case NBD_CMD_CACHE:
        /* Advisory: there is no cache of ours to fill (the node is read
         * through the host's page cache, or with O_DIRECT), so the
         * range check above is all there is to it. */
        break;
    case NBD_CMD_BLOCK_STATUS:
        if (!c->structured || !c->meta_base || !r->len) {
            r->err = NBD_EINVAL;
        } else if (!nbd_req_reserve(r, NBD_MAX_EXTENTS * 8)) {
            r->err = NBD_ENOMEM;
        } else {
            r->n_extents = 0;
            r->bs_pos = r->offset;
            nbd_req_block_status_next(r);
            return;
        }
        break;
    default:
        r->err = NBD_EINVAL;
        break;
    }
    nbd_req_complete(r);
}

/* A request header is in c->hdr. */
static void nbd_client_parse_request(NbdClient *c)
{
    NbdReq *r;

    if (nbd_ld32(c->hdr) != NBD_REQUEST_MAGIC) {
        /* No way to find the next request: give up on this client. */
        nbd_client_close(c);
        return;
    }
    if (nbd_ld16(c->hdr + 6) == NBD_CMD_DISC) {
        c->disc = true;
        return;
    }
    assert(c->n_free > 0);
    r = c->free_reqs[--c->n_free];
    r->flags = nbd_ld16(c->hdr + 4);
    r->type = nbd_ld16(c->hdr + 6);
    r->cookie = nbd_ld64(c->hdr + 8);
    r->offset = nbd_ld64(c->hdr + 16);
    r->len = nbd_ld32(c->hdr + 24);
    if (r->type == NBD_CMD_WRITE) {
        nbd_req_started(c, r);
        c->cur = r;
        c->payload_got = 0;
        /* One we will refuse is dropped as it comes, never buffered;
         * so is one longer than the maximum payload we advertise: the
         * specification asks a server not to disconnect for that, and
         * dropping it costs a read per 4 KiB, no memory. */
        r->err = nbd_req_check(c, r);
        if (!r->err && r->len > NBD_MAX_BUFFER_SIZE) {
            r->err = NBD_EINVAL;
        }
        if (r->err) {
            c->phase = NBD_PHASE_REQ_SKIP;
        } else if (!nbd_req_reserve(r, r->len)) {
            r->err = NBD_ENOMEM;
            c->phase = NBD_PHASE_REQ_SKIP;
        } else {
            c->phase = NBD_PHASE_REQ_PAYLOAD;
        }
        return;
    }
    nbd_req_started(c, r);
    nbd_req_submit(c, r);
}

static void nbd_client_read_requests(NbdClient *c)
{
    while (!c->closing && !c->disc) {
        if (c->phase == NBD_PHASE_REQ_SKIP) {
            while (c->payload_got < c->cur->len) {
                size_t got = 0;
                size_t n = MIN(sizeof(c->skip_buf),
                               c->cur->len - c->payload_got);

                if (!nbd_client_fill(c, c->skip_buf, n, &got)) {
                    c->payload_got += got;
                    break;
                }
                c->payload_got += n;
            }
            if (c->payload_got < c->cur->len) {
                break;
            }
            c->phase = NBD_PHASE_REQ_HEADER;
            c->hdr_got = 0;
            nbd_req_complete(c->cur);
            c->cur = NULL;
            continue;
        }
        if (c->phase == NBD_PHASE_REQ_PAYLOAD) {
            if (!nbd_client_fill(c, c->cur->buf, c->cur->len,
                                 &c->payload_got)) {
                break;
            }
            c->phase = NBD_PHASE_REQ_HEADER;
            c->hdr_got = 0;
            nbd_req_submit(c, c->cur);
            c->cur = NULL;
            continue;
        }
        if (!c->n_free) {
            break;              /* until a reply is sent */
        }
        if (!nbd_client_fill(c, c->hdr, NBD_REQUEST_SIZE, &c->hdr_got)) {
            break;
        }
        c->hdr_got = 0;
        nbd_client_parse_request(c);
    }
}

/* ---- handlers ----------------------------------------------------------- */

/* Move the handshake on as far as the socket allows. */
static void nbd_client_handshake(NbdClient *c)
{
    while (!c->closing) {
        if (c->out_sent < c->out->len || c->close_after_send ||
            c->tls_pending) {
            if (!nbd_client_flush_handshake(c) ||
                c->out_sent < c->out->len) {
                break;
            }
        }
        if (c->tls && !nbd_tls_handshake_done(c->tls)) {
            int r = nbd_tls_handshake(c->tls);

            if (r < 0) {
                nbd_client_close(c);
                return;
            }
            if (r == 0) {
                break;
            }
        }
        if (c->phase == NBD_PHASE_MOVING) {
            nbd_client_move(c);
            return;
        }
        if (c->phase == NBD_PHASE_CLIENT_FLAGS) {
            uint32_t f;

            if (!nbd_client_fill(c, c->hdr, 4, &c->hdr_got)) {
                break;
            }
            f = nbd_ld32(c->hdr);
            if (!(f & NBD_FLAG_C_FIXED_NEWSTYLE) ||
                (f & ~(uint32_t)(NBD_FLAG_C_FIXED_NEWSTYLE |
                                 NBD_FLAG_C_NO_ZEROES))) {
                nbd_client_close(c);
                return;
            }
            c->no_zeroes = f & NBD_FLAG_C_NO_ZEROES;
            c->phase = NBD_PHASE_OPT_HEADER;
            c->hdr_got = 0;
        } else if (c->phase == NBD_PHASE_OPT_HEADER) {
            if (!nbd_client_fill(c, c->hdr, 16, &c->hdr_got)) {
                break;
            }
            c->hdr_got = 0;
            c->opt = nbd_ld32(c->hdr + 8);
            c->opt_len = nbd_ld32(c->hdr + 12);
            if (nbd_ld64(c->hdr) != NBD_OPTS_MAGIC ||
                c->opt_len > NBD_MAX_OPTION_SIZE) {
                nbd_client_close(c);
                return;
            }
            c->opt_got = 0;
            c->phase = NBD_PHASE_OPT_DATA;
        } else {
            if (!nbd_client_fill(c, c->opt_buf, c->opt_len, &c->opt_got)) {
                break;
            }
            c->phase = NBD_PHASE_OPT_HEADER;
            nbd_client_handle_option(c);
        }
    }
    nbd_client_update_handlers(c);
}

static void nbd_client_read(void *opaque)
{
    NbdClient *c = opaque;

    nbd_client_ref(c);
    if (c->phase < NBD_PHASE_MOVING) {
        nbd_client_handshake(c);
    } else if (c->phase != NBD_PHASE_MOVING) {
        /* Every request this read brings in goes to the engine in one
         * submission, as a virtqueue kick's do. */
        defer_call_begin();
        nbd_client_read_requests(c);
        defer_call_end();
        if (c->disc && c->n_free == NBD_SERVER_MAX_INFLIGHT &&
            !c->closing) {
            nbd_client_close(c);
        } else if (!c->closing) {
            nbd_client_flush_replies(c);
        }
    }
    nbd_client_unref(c);
}

static void nbd_client_write(void *opaque)
{
    NbdClient *c = opaque;

    nbd_client_ref(c);
    if (c->phase <= NBD_PHASE_MOVING) {
        nbd_client_handshake(c);
    } else {
        nbd_client_flush_replies(c);
    }
    nbd_client_unref(c);
}

static NbdClient *nbd_client_new(NbdServer *srv, int fd)
{
    NbdClient *c = g_new0(NbdClient, 1);

    c->srv = srv;
    c->ctx = srv->main_ctx;
    c->fd = fd;
    c->ref = 1;
    c->phase = NBD_PHASE_CLIENT_FLAGS;
    c->opt_buf = g_malloc(NBD_MAX_OPTION_SIZE);
    c->out = g_byte_array_new();
    QSIMPLEQ_INIT(&c->sendq);
    for (unsigned int i = 0; i < NBD_SERVER_MAX_INFLIGHT; i++) {
        c->reqs[i].c = c;
        c->free_reqs[i] = &c->reqs[i];
    }
    c->n_free = NBD_SERVER_MAX_INFLIGHT;
    /* The greeting: fixed newstyle, and we can skip the zeroes. */
    nbd_out_u64(c, NBD_MAGIC);
    nbd_out_u64(c, NBD_OPTS_MAGIC);
    nbd_out_u16(c, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
    pthread_mutex_lock(&srv->lock);
    QLIST_INSERT_HEAD(&srv->clients, c, next);
    srv->n_clients++;
    pthread_mutex_unlock(&srv->lock);
    return c;
}

static void nbd_server_arm_timer(NbdServer *srv, bool on)
{
    struct itimerspec its = {
        .it_interval.tv_sec = on,
        .it_value.tv_sec = on,
    };

    if (srv->timer_fd >= 0 && on != srv->timer_armed &&
        timerfd_settime(srv->timer_fd, 0, &its, NULL) == 0) {
        srv->timer_armed = on;
    }
}

/* Once a second while clients negotiate: drop those past their time, so
 * that silent connections cannot hold max-connections forever. */
static void nbd_server_tick(void *opaque)
{
    NbdServer *srv = opaque;
    g_autoptr(GPtrArray) late = g_ptr_array_new();
    int64_t now = g_get_monotonic_time();
    bool waiting = false;
    uint64_t ticks;
    NbdClient *c;

    if (read(srv->timer_fd, &ticks, sizeof(ticks)) < 0) {
        /* EAGAIN: nothing to consume; the check below is harmless */
    }
    pthread_mutex_lock(&srv->lock);
    QLIST_FOREACH(c, &srv->clients, next) {
        /* deadline is the main thread's until the client has moved */
        if (c->ctx != srv->main_ctx || !c->deadline) {
            continue;
        }
        if (c->deadline <= now) {
            nbd_client_ref(c);
            g_ptr_array_add(late, c);
        } else {
            waiting = true;
        }
    }
    pthread_mutex_unlock(&srv->lock);
    /* Said before they see their connection close */
    if (late->len) {
        warn_report("NBD server: dropping %u client(s) that did not finish "
                    "negotiating within %u s", late->len,
                    srv->handshake_max_seconds);
    }
    for (guint i = 0; i < late->len; i++) {
        c = g_ptr_array_index(late, i);
        nbd_client_close(c);
        nbd_client_unref(c);
    }
    nbd_server_arm_timer(srv, waiting);
}

static void nbd_server_accept(void *opaque)
{
    NbdServer *srv = opaque;

    for (;;) {
        int fd = accept4(srv->listen_fd, NULL, NULL,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        int one = 1;
        bool full;
        NbdClient *c;

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                /* Out of fds or memory: the listener stays readable, so
                 * trying again at once would spin.  Wait until one of
                 * our connections closes (or the next export change). */
                warn_report("NBD server: cannot accept a connection: %s; "
                            "accepting again once a connection closes",
                            g_strerror(errno));
                aio_set_fd_handler(srv->main_ctx, srv->listen_fd, NULL,
                                   NULL, NULL, NULL, NULL);
                srv->accept_paused = true;
            }
            return;
        }
        pthread_mutex_lock(&srv->lock);
        full = srv->max_connections &&
               srv->n_clients >= srv->max_connections;
        pthread_mutex_unlock(&srv->lock);
        if (full) {
            close(fd);
            continue;
        }
        /* Small replies go out at once (fails harmlessly on AF_UNIX) */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c = nbd_client_new(srv, fd);
        if (srv->handshake_max_seconds) {
            c->deadline = g_get_monotonic_time() +
                          (int64_t)srv->handshake_max_seconds *
                          G_USEC_PER_SEC;
            nbd_server_arm_timer(srv, true);
        }
        nbd_client_ref(c);
        nbd_client_handshake(c);
        nbd_client_unref(c);
    }
}

/* ---- server and exports -------------------------------------------------- */

static void nbd_export_free(NbdExport *e)
{
    g_free(e->name);
    g_free(e->description);
    g_free(e->ctx);
    g_free(e);
}

static void nbd_server_reap_bh(void *opaque)
{
    NbdServer *srv = opaque;
    NbdExport *e, *tmp;
    unsigned int n_clients;

    if (srv->accept_paused && !srv->closing) {
        srv->accept_paused = false;
        aio_set_fd_handler(srv->main_ctx, srv->listen_fd, nbd_server_accept,
                           NULL, NULL, NULL, srv);
    }

    QLIST_FOREACH_SAFE(e, &srv->removed, next, tmp) {
        unsigned int n;

        pthread_mutex_lock(&srv->lock);
        n = e->n_clients;
        pthread_mutex_unlock(&srv->lock);
        if (!n) {
            QLIST_REMOVE(e, next);
            if (e->done) {
                e->done(e->done_opaque);
            }
            nbd_export_free(e);
        }
    }

    if (!srv->closing) {
        return;
    }
    pthread_mutex_lock(&srv->lock);
    n_clients = srv->n_clients;
    pthread_mutex_unlock(&srv->lock);
    if (!n_clients && QLIST_EMPTY(&srv->removed)) {
        /* The last connection has gone: nothing refers to us any more */
        void (*closed)(void *opaque) = srv->closed;
        void *closed_opaque = srv->closed_opaque;

        nbd_server_free(srv);
        if (closed) {
            closed(closed_opaque);
        }
    }
}

NbdServer *nbd_server_new(const NbdServerOptions *o, GError **errp)
{
    NbdServer *srv = g_new0(NbdServer, 1);

    srv->main_ctx = o->main_ctx;
    srv->listen_fd = o->listen_fd;
    srv->unix_path = g_strdup(o->unix_path);
    srv->max_connections = o->max_connections;
    srv->tls = o->tls;
    srv->tls_authz = o->tls_authz;
    srv->handshake_max_seconds = o->handshake_max_seconds;
    srv->timer_fd = -1;
    if (srv->handshake_max_seconds && o->listen_fd >= 0) {
        srv->timer_fd = timerfd_create(CLOCK_MONOTONIC,
                                       TFD_NONBLOCK | TFD_CLOEXEC);
        if (srv->timer_fd < 0) {
            g_set_error(errp, VB_ERROR, 0, "NBD server: timerfd: %s",
                        g_strerror(errno));
            g_free(srv->unix_path);
            g_free(srv);
            return NULL;
        }
    }
    QLIST_INIT(&srv->exports);
    QLIST_INIT(&srv->removed);
    QLIST_INIT(&srv->clients);
    pthread_mutex_init(&srv->lock, NULL);
    pthread_cond_init(&srv->cond, NULL);
    srv->reap_bh = aio_bh_new(srv->main_ctx, nbd_server_reap_bh, srv,
                              "nbd-reap");
    if (srv->listen_fd >= 0) {
        aio_set_fd_handler(srv->main_ctx, srv->listen_fd, nbd_server_accept,
                           NULL, NULL, NULL, srv);
    }
    if (srv->timer_fd >= 0) {
        aio_set_fd_handler(srv->main_ctx, srv->timer_fd, nbd_server_tick,
                           NULL, NULL, NULL, srv);
    }
    return srv;
}

/* Close every connection of @e (NULL: all), under no lock. */
static void nbd_server_kill_clients(NbdServer *srv, NbdExport *e)
{
    g_autoptr(GPtrArray) mine = g_ptr_array_new();
    NbdClient *c;

    pthread_mutex_lock(&srv->lock);
    QLIST_FOREACH(c, &srv->clients, next) {
        if (e && c->exp != e) {
            continue;
        }
        nbd_client_ref(c);
        if (c->ctx == srv->main_ctx) {
            g_ptr_array_add(mine, c);
        } else {
            aio_bh_schedule_oneshot(c->ctx, nbd_client_kill_bh, c,
                                    "nbd-kill");
        }
    }
    pthread_mutex_unlock(&srv->lock);
    /* Ours: in the handshake (nothing in flight), or moving (an attach
     * bottom half holds a reference and sees it closed). */
    for (guint i = 0; i < mine->len; i++) {
        c = g_ptr_array_index(mine, i);
        nbd_client_close(c);
        nbd_client_unref(c);
    }
}

/* No new connections: the listener and the handshake timer go. */
static void nbd_server_stop_listening(NbdServer *srv)
{
    if (srv->listen_fd >= 0) {
        if (!srv->accept_paused) {
            aio_set_fd_handler(srv->main_ctx, srv->listen_fd, NULL, NULL,
                               NULL, NULL, NULL);
        }
        close(srv->listen_fd);
        srv->listen_fd = -1;
        srv->accept_paused = false;
    }
    if (srv->unix_path) {
        unlink(srv->unix_path);
        g_free(srv->unix_path);
        srv->unix_path = NULL;
    }
    if (srv->timer_fd >= 0) {
        aio_set_fd_handler(srv->main_ctx, srv->timer_fd, NULL, NULL, NULL,
                           NULL, NULL);
        close(srv->timer_fd);
        srv->timer_fd = -1;
    }
}

void nbd_server_close(NbdServer *srv, void (*closed)(void *opaque),
                      void *opaque)
{
    NbdExport *e;

    assert(!srv->closing);
    nbd_server_stop_listening(srv);
    /* Exports still offered: freed with the server, without callback */
    while ((e = QLIST_FIRST(&srv->exports))) {
        QLIST_REMOVE(e, next);
        e->removed = true;
        QLIST_INSERT_HEAD(&srv->removed, e, next);
    }
    srv->closing = true;
    srv->closed = closed;
    srv->closed_opaque = opaque;
    nbd_server_kill_clients(srv, NULL);
    /* Whether or not a connection was left: the bottom half decides */
    qemu_bh_schedule(srv->reap_bh);
}

void nbd_server_free(NbdServer *srv)
{
    NbdExport *e;

    if (!srv) {
        return;
    }
    nbd_server_stop_listening(srv);
    nbd_server_kill_clients(srv, NULL);
    pthread_mutex_lock(&srv->lock);
    while (srv->n_clients) {
        pthread_cond_wait(&srv->cond, &srv->lock);
    }
    pthread_mutex_unlock(&srv->lock);
    while ((e = QLIST_FIRST(&srv->exports))) {
        QLIST_REMOVE(e, next);
        nbd_export_free(e);
    }
    while ((e = QLIST_FIRST(&srv->removed))) {
        QLIST_REMOVE(e, next);
        nbd_export_free(e);
    }
    qemu_bh_delete(srv->reap_bh);
    pthread_cond_destroy(&srv->cond);
    pthread_mutex_destroy(&srv->lock);
    g_free(srv->unix_path);
    g_free(srv);
}

unsigned int nbd_server_num_clients(NbdServer *srv)
{
    unsigned int n;

    pthread_mutex_lock(&srv->lock);
    n = srv->n_clients;
    pthread_mutex_unlock(&srv->lock);
    return n;
}

NbdExport *nbd_export_find(NbdServer *srv, const char *name)
{
    return nbd_export_lookup(srv, (const uint8_t *)name, strlen(name));
}

NbdExport *nbd_export_new(NbdServer *srv, const NbdExportOptions *o,
                          GError **errp)
{
    NbdExport *e;

    if (strlen(o->name) > NBD_MAX_STRING_SIZE) {
        g_set_error(errp, VB_ERROR, 0, "export name is longer than %d "
                    "bytes", NBD_MAX_STRING_SIZE);
        return NULL;
    }
    if (o->description && strlen(o->description) > NBD_MAX_STRING_SIZE) {
        g_set_error(errp, VB_ERROR, 0, "export description is longer "
                    "than %d bytes", NBD_MAX_STRING_SIZE);
        return NULL;
    }
    if (nbd_export_find(srv, o->name)) {
        g_set_error(errp, VB_ERROR, 0, "NBD server already has an export "
                    "named '%s'", o->name);
        return NULL;
    }
    assert(o->n_ctx >= 1);
    e = g_new0(NbdExport, 1);
    e->srv = srv;
    e->name = g_strdup(o->name);
    e->description = g_strdup(o->description);
    e->blk = o->blk;
    e->writable = o->writable;
    e->multi_conn = o->multi_conn;
    e->discard = o->discard;
    e->ctx = g_memdup2(o->ctx, o->n_ctx * sizeof(o->ctx[0]));
    e->n_ctx = o->n_ctx;
    QLIST_INSERT_HEAD(&srv->exports, e, next);
    return e;
}

bool nbd_export_remove(NbdExport *e, void (*done)(void *opaque),
                       void *opaque)
{
    NbdServer *srv = e->srv;
    unsigned int n;

    QLIST_REMOVE(e, next);
    e->removed = true;
    e->done = done;
    e->done_opaque = opaque;
    QLIST_INSERT_HEAD(&srv->removed, e, next);
    nbd_server_kill_clients(srv, e);
    pthread_mutex_lock(&srv->lock);
    n = e->n_clients;
    pthread_mutex_unlock(&srv->lock);
    if (n) {
        return false;
    }
    QLIST_REMOVE(e, next);
    if (done) {
        done(opaque);
    }
    nbd_export_free(e);
    return true;
}

unsigned int nbd_export_num_clients(NbdExport *e)
{
    unsigned int n;

    pthread_mutex_lock(&e->srv->lock);
    n = e->n_clients;
    pthread_mutex_unlock(&e->srv->lock);
    return n;
}

void nbd_export_get_stats(NbdExport *e, NbdExportStats *st)
{
    NbdServer *srv = e->srv;
    NbdClient *c;

    pthread_mutex_lock(&srv->lock);
    *st = e->retired;
    st->clients = e->n_clients;
    QLIST_FOREACH(c, &srv->clients, next) {
        /* c->exp is set in the main thread, as this runs */
        if (c->exp == e) {
            nbd_stats_add(st, &c->st);
        }
    }
    pthread_mutex_unlock(&srv->lock);
    /* Each counter read apart: never below zero. */
    st->inflight = st->requests > st->completed ?
                   st->requests - st->completed : 0;
}

const char *nbd_export_name(NbdExport *e)
{
    return e->name;
}

void nbd_server_fuzz_input(NbdServer *srv, const uint8_t *data, size_t len)
{
    int sv[2];
    size_t off = 0;
    NbdClient *c;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                   sv) < 0) {
        abort();
    }
    c = nbd_client_new(srv, sv[0]);
    nbd_client_ref(c);
    nbd_client_handshake(c);
    nbd_client_unref(c);
    /* Feed the input as the socket takes it, draining what the server
     * answers, until the server has closed its end. */
    while (nbd_server_num_clients(srv)) {
        uint8_t sink[65536];

        if (off < len) {
            ssize_t w = send(sv[1], data + off, len - off, MSG_NOSIGNAL);

            if (w > 0) {
                off += w;
            }
        } else if (off == len) {
            shutdown(sv[1], SHUT_WR);
            off++;
        }
        while (recv(sv[1], sink, sizeof(sink), MSG_DONTWAIT) > 0) {
        }
        aio_poll(srv->main_ctx, off > len);
    }
    close(sv[1]);
}
