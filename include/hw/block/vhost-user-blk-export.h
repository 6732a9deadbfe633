/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-user-blk export: one image served to one VMM over one vhost-user
 * socket; the per-queue dataplane that connects virtqueues to
 * virtio_blk_process_req().
 *
 * Threads: create, free and read statistics from the main thread (the one
 * running @main_ctx).  Queue q runs in queue_ctx[q].
 */
#ifndef HW_BLOCK_VHOST_USER_BLK_EXPORT_H
#define HW_BLOCK_VHOST_USER_BLK_EXPORT_H

#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "block/block.h"
#include "hw/block/virtio-blk.h"
#include "qemu/latency-hist.h"

typedef struct VuBlkExport VuBlkExport;

/* Requests popped per queue per turn before yielding to other handlers. */
#define VU_BLK_DEFAULT_BUDGET 128

/*
 * The first turn on a queue with nothing in flight pops at most this many
 * requests, so their completions (and the driver's interrupt) go out while
 * the rest of the convoy is still being processed: the driver's wake-up
 * overlaps our work instead of following it.  See docs/architecture.md,
 * "First batch".
 */
#define VU_BLK_DEFAULT_FIRST_BATCH 4
#define VU_BLK_FIRST_BATCH_OFF UINT_MAX

typedef struct VuBlkExportOptions {
    const char *socket_path;    /* or the name for log lines, with: */
    int listen_fd;              /* > 0: inherited listening socket (taken
                                 * over); 0: create socket_path */
    mode_t socket_mode;         /* 0 = 0600 */
    bool socket_chown;          /* see VuServerConfig */
    uid_t socket_uid;
    gid_t socket_gid;
    BlockOptions blk;           /* what to open, unless: */
    BlockBackend *blk_backend;  /* already open (a named node): the export
                                 * uses it and leaves it open */
    VirtioBlkConf conf;         /* num_queues, queue_size, ... */
    AioContext *main_ctx;
    AioContext **queue_ctx;     /* conf.num_queues entries */
    unsigned int budget;        /* 0 = VU_BLK_DEFAULT_BUDGET */
    unsigned int first_batch;   /* 0 = VU_BLK_DEFAULT_FIRST_BATCH;
                                 * VU_BLK_FIRST_BATCH_OFF: the budget */
} VuBlkExportOptions;

/* Request types counted apart (query-blockstats). */
typedef enum VuBlkOp {
    VU_BLK_OP_READ,
    VU_BLK_OP_WRITE,
    VU_BLK_OP_FLUSH,
    VU_BLK_OP_DISCARD,
    VU_BLK_OP_WRITE_ZEROES,
    VU_BLK_OP_OTHER,            /* GET_ID, unknown types, malformed */
    VU_BLK_OP__MAX,
} VuBlkOp;

typedef struct VuBlkOpStats {
    uint64_t ops;               /* completed */
    uint64_t failed;            /* completed with a status other than OK */
    uint64_t bytes;             /* of the successful ones */
    uint64_t total_ns;          /* pop to completion, summed */
} VuBlkOpStats;

typedef struct VuBlkQueueStats {
    uint64_t requests;
    uint64_t completed;
    uint64_t inflight;
    uint64_t batches;
    uint64_t kicks;
    uint64_t poll_hits;
    uint64_t budget_yields;
    uint64_t notifies;
    uint64_t notifies_suppressed;
    bool running;
    bool driver_polls;          /* no interrupt wanted for a whole ring:
                                 * the driver polls its used ring */
    VuBlkOpStats ops[VU_BLK_OP__MAX];
    /* Completed requests by latency, fixed buckets (qemu/latency-hist.h) */
    uint64_t lat_bins[VU_BLK_OP__MAX][LAT_HIST_FIXED_BINS];
} VuBlkQueueStats;

typedef struct VuBlkExportStats {
    uint64_t requests;          /* requests started */
    uint64_t completed;         /* requests pushed to the used ring */
    uint64_t batches;           /* loop turns that popped >= 1 request */
    uint64_t kicks;             /* kick eventfd handler runs */
    uint64_t poll_hits;         /* turns started by busy polling */
    uint64_t budget_yields;     /* turns that stopped at the budget */
    uint64_t notifies;          /* call eventfd writes (virtqueue stats) */
    uint64_t notifies_suppressed;
    uint64_t resubmitted;       /* replayed from the inflight region */
    uint64_t sessions;          /* front-ends accepted */
    uint64_t inflight;          /* requests submitted, not completed */
    uint64_t config_changes;    /* resizes told to the front-end */
    unsigned int driver_polls;  /* queues whose driver polls, now */
    uint64_t wr_highest_offset; /* end of the highest write, bytes */
    VuBlkOpStats ops[VU_BLK_OP__MAX];
    uint64_t lat_bins[VU_BLK_OP__MAX][LAT_HIST_FIXED_BINS];
} VuBlkExportStats;

/*
 * The operator's latency histograms (QMP block-latency-histogram-set), as
 * QEMU's block accounting has them: write-zeroes count as writes; zone
 * append ("zap") exists for QEMU's interface and never counts anything
 * here; discards have none.
 */
typedef enum VuBlkHistType {
    VU_BLK_HIST_READ,
    VU_BLK_HIST_WRITE,
    VU_BLK_HIST_FLUSH,
    VU_BLK_HIST_ZAP,
    VU_BLK_HIST__MAX,
} VuBlkHistType;

/* Main thread.  Open the image and start listening.  On failure nothing is
 * left behind (no socket file). */
VuBlkExport *vu_blk_export_new(const VuBlkExportOptions *opts,
                               GError **errp);
/* Main thread.  Drop the session (draining in-flight I/O), remove the
 * socket file, close the image. */
void vu_blk_export_free(VuBlkExport *exp);
/* Main thread.  Stop accepting front-ends (sessions go on). */
void vu_blk_export_stop_listening(VuBlkExport *exp);
const char *vu_blk_export_get_socket_path(VuBlkExport *exp);
bool vu_blk_export_is_connected(VuBlkExport *exp);
/* The listening socket (-1 once it stopped listening). */
int vu_blk_export_get_listen_fd(VuBlkExport *exp);
/* Drop the front-end (its requests drain in the background). */
void vu_blk_export_disconnect(VuBlkExport *exp);
/* See vu_server_is_idle() and vu_server_set_idle_notify(). */
bool vu_blk_export_is_idle(VuBlkExport *exp);
void vu_blk_export_set_idle_notify(VuBlkExport *exp,
                                   void (*fn)(void *opaque), void *opaque);
/* Main thread.  Sums over queues (collected in their iothreads). */
void vu_blk_export_get_stats(VuBlkExport *exp, VuBlkExportStats *stats);
/* Main thread.  Counters of queue @index (< num_queues). */
void vu_blk_export_get_queue_stats(VuBlkExport *exp, unsigned int index,
                                   VuBlkQueueStats *stats);
unsigned int vu_blk_export_get_num_queues(VuBlkExport *exp);
/* Main thread.  The AioContext queue @index (< num_queues) runs in. */
AioContext *vu_blk_export_get_queue_ctx(VuBlkExport *exp,
                                        unsigned int index);
/*
 * Main thread.  Replace the @type histogram of every queue by an empty one
 * with @tmpl's boundaries (its bins are ignored), or remove it (@tmpl
 * NULL).  The new histograms are allocated here and handed to each queue
 * in its iothread; the request path only records into them.
 */
void vu_blk_export_set_latency_histogram(VuBlkExport *exp,
                                         VuBlkHistType type,
                                         const LatHist *tmpl);
/* Main thread.  The @type histogram summed over queues (the caller frees
 * it), or NULL if none is set. */
LatHist *vu_blk_export_get_latency_histogram(VuBlkExport *exp,
                                             VuBlkHistType type);
BlockBackend *vu_blk_export_get_blk(VuBlkExport *exp);
/*
 * Main thread, for a block job that moves the export to another node
 * (job-complete of a mirror).  Quiesce: the queues pop no new request
 * (those in flight complete) until called again with @on false; returns
 * once every queue's iothread has seen it.  Replace, while quiesced: the
 * export serves @blk (same size) from its next request on, with the
 * permissions it held on the old node; false with @errp set, nothing
 * changed.
 */
void vu_blk_export_quiesce(VuBlkExport *exp, bool on);
bool vu_blk_export_replace_blk(VuBlkExport *exp, BlockBackend *blk,
                               GError **errp);
/*
 * Main thread.  Grow the image to @size bytes (blk_truncate()), update the
 * capacity and tell the front-end (CONFIG_CHANGE_MSG) so the guest sees
 * the new size.  A front-end that did not negotiate the back-end channel
 * learns it on its next GET_CONFIG only; *notified says which.
 */
bool vu_blk_export_resize(VuBlkExport *exp, uint64_t size, bool *notified,
                          GError **errp);
/*
 * The two halves of vu_blk_export_resize() around a resize done
 * elsewhere (blk_truncate_async()), main thread: can the export take
 * @size; the image now has @size bytes, tell the front-end.
 */
bool vu_blk_export_resize_check(VuBlkExport *exp, uint64_t size,
                                GError **errp);
void vu_blk_export_resized(VuBlkExport *exp, uint64_t size, bool *notified);

#endif
