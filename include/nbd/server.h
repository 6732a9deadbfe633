/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * An NBD server (nbd/server.c): a listening socket, the exports it offers
 * by name, and its client connections.
 *
 * A connection negotiates (fixed newstyle handshake: NBD_OPT_LIST, INFO,
 * GO, EXPORT_NAME, STRUCTURED_REPLY, LIST/SET_META_CONTEXT, STARTTLS) in
 * the main AioContext; once it has chosen an export with NBD_OPT_GO (or
 * NBD_OPT_EXPORT_NAME) it moves to one of the export's AioContexts
 * (iothreads), where its requests are read, checked and submitted to the
 * node with the blk_aio_*() calls, batched per read as the vhost-user path
 * batches per virtqueue kick.  Requests use per-connection slots (at most
 * NBD_SERVER_MAX_INFLIGHT in flight) whose data buffers are kept for the
 * connection's life: no allocation per request.
 *
 * Threads: every function here is called from the main thread.
 */
#ifndef NBD_SERVER_H
#define NBD_SERVER_H

#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "block/block.h"
#include "hw/block/vhost-user-blk-export.h"
#include "qemu/latency-hist.h"

typedef struct NbdServer NbdServer;
typedef struct NbdExport NbdExport;
typedef struct NbdTlsCreds NbdTlsCreds;
typedef struct NbdAuthz NbdAuthz;

/* Requests one connection may have in flight (read but not answered). */
#define NBD_SERVER_MAX_INFLIGHT 16

typedef struct NbdServerOptions {
    AioContext *main_ctx;
    int listen_fd;              /* listening stream socket, now the
                                 * server's (closed by nbd_server_free) */
    const char *unix_path;      /* unlinked by nbd_server_free, or NULL */
    unsigned int max_connections;   /* 0: no limit */
    unsigned int handshake_max_seconds; /* a client still negotiating
                                         * after this is dropped; 0: no
                                         * limit */
    NbdTlsCreds *tls;           /* non-NULL: TLS required (the caller's,
                                 * alive until nbd_server_free) */
    const NbdAuthz *tls_authz;  /* with tls: who may connect, or NULL
                                 * (the caller's, alive as long as tls) */
} NbdServerOptions;

NbdServer *nbd_server_new(const NbdServerOptions *o, GError **errp);
/* Close the listener and every connection, waiting (in this thread) for
 * their requests in flight; then free the exports (no callback) and the
 * server. */
void nbd_server_free(NbdServer *srv);
/*
 * The same without waiting: close the listener (the unix socket file goes
 * at once) and every connection, and return.  Once the last connection's
 * requests in flight completed (in their iothreads), the removed exports'
 * callbacks run, then the server is freed and @closed(@opaque) called,
 * from a bottom half in the main thread.  @srv must not be used after
 * this call.
 */
void nbd_server_close(NbdServer *srv, void (*closed)(void *opaque),
                      void *opaque);
unsigned int nbd_server_num_clients(NbdServer *srv);

typedef struct NbdExportOptions {
    const char *name;           /* what NBD_OPT_GO asks for */
    const char *description;    /* NBD_INFO_DESCRIPTION, or NULL */
    BlockBackend *blk;          /* the node; stays the caller's */
    bool writable;
    bool multi_conn;            /* NBD_FLAG_CAN_MULTI_CONN also when
                                 * writable */
    BlockDiscardMode discard;   /* TRIM: not offered, accepted and
                                 * ignored, or passed down (the node's
                                 * discard=) */
    AioContext **ctx;           /* connections spread over these */
    unsigned int n_ctx;         /* >= 1 */
} NbdExportOptions;

NbdExport *nbd_export_new(NbdServer *srv, const NbdExportOptions *o,
                          GError **errp);
NbdExport *nbd_export_find(NbdServer *srv, const char *name);
/*
 * Take the export off the list clients can choose from and close its
 * connections.  Then it is freed and @done(@opaque) called, in the main
 * thread, once the last connection's requests in flight completed: from
 * inside this call when nothing was connected (returns true), otherwise
 * later from a bottom half (returns false).
 */
bool nbd_export_remove(NbdExport *exp, void (*done)(void *opaque),
                       void *opaque);
unsigned int nbd_export_num_clients(NbdExport *exp);

/*
 * An export's request counters, in the vhost-user export's shape (its
 * VuBlkOp types: TRIM counts as a discard, BLOCK_STATUS and refused
 * commands as "other") so that the monitor renders both alike.  Each
 * connection counts its own in its iothread (relaxed atomic stores, no
 * lock); a connection's are added to the export's when it goes.
 */
typedef struct NbdExportStats {
    uint64_t requests;          /* read and checked */
    uint64_t completed;         /* answered */
    uint64_t inflight;          /* requests - completed */
    uint64_t connections;       /* that chose the export, ever */
    uint64_t clients;           /* connected now */
    uint64_t wr_highest_offset; /* end of the highest write, bytes */
    VuBlkOpStats ops[VU_BLK_OP__MAX];
    uint64_t lat_bins[VU_BLK_OP__MAX][LAT_HIST_FIXED_BINS];
} NbdExportStats;

/* Main thread.  The sums over the export's connections, past and live. */
void nbd_export_get_stats(NbdExport *exp, NbdExportStats *st);
const char *nbd_export_name(NbdExport *exp);

/*
 * For the fuzz target: feed @len bytes as what one client sent, through
 * the handshake and (with @exp) the transmission phase, then close it.
 * Everything the server answers is discarded.  Main thread, no iothread:
 * the connection stays in @srv's main context.
 */
void nbd_server_fuzz_input(NbdServer *srv, const uint8_t *data, size_t len);

#endif
