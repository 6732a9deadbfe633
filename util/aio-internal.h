/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Private layout of AioContext, shared by util/async.c and util/aio-posix.c. */
#ifndef UTIL_AIO_INTERNAL_H
#define UTIL_AIO_INTERNAL_H

#include "qemu/aio.h"
#include "qemu/event_notifier.h"
#include "qemu/queue.h"
#include <pthread.h>

typedef struct AioHandler AioHandler;

struct AioHandler {
    int fd;
    IOHandler *io_read;
    IOHandler *io_write;
    AioPollFn *io_poll;
    IOHandler *io_poll_ready;
    IOHandler *io_poll_begin;   /* busy polling starts (optional) */
    IOHandler *io_poll_end;     /* busy polling ends (optional) */
    void *opaque;
    uint32_t events;        /* epoll mask currently registered */
    bool deleted;           /* removed while the list was being walked */
    bool poll_begun;        /* io_poll_begin ran, io_poll_end not yet */
    bool internal;          /* the context's own notifier: not "progress" */
    bool edge;              /* EPOLLET: reported once per new event */
    QLIST_ENTRY(AioHandler) node;
};

/* QEMUBH.flags bits. */
enum {
    BH_PENDING   = 1 << 0,  /* on ctx->bh_pending (only the loop clears it) */
    BH_SCHEDULED = 1 << 1,  /* callback should run */
    BH_DELETED   = 1 << 2,  /* free when the loop next sees it */
    BH_ONESHOT   = 1 << 3,  /* free after the callback ran */
};

struct QEMUBH {
    AioContext *ctx;
    QEMUBHFunc *cb;
    void *opaque;
    const char *name;
    atomic_uint flags;
    QEMUBH *pending_next;           /* link in ctx->bh_pending */
    QLIST_ENTRY(QEMUBH) all_node;   /* link in ctx->bh_all */
};

/* A value stored under an AioLocalKey (aio_local_set()). */
typedef struct AioLocalSlot {
    void *state;
    void (*cleanup)(void *state);
} AioLocalSlot;

struct AioContext {
    /*
     * Touched by any thread.  bh_pending is a lock-free stack (push with
     * compare-and-swap, the loop takes the whole stack with one exchange).
     */
    _Atomic(QEMUBH *) bh_pending;
    /* true while the owner may be sleeping in epoll_wait() */
    atomic_bool notify_me;
    /* set by aio_notify(), cleared by the loop after waking */
    atomic_bool notified;
    atomic_uint_fast64_t notify_writes;
    EventNotifier notifier;

    /*
     * Every live BH, for the leak report in aio_context_free().  Taken on
     * BH creation and free only, never on schedule.  (util/ uses pthread
     * locks rather than GMutex so that ThreadSanitizer sees them.)
     */
    pthread_mutex_t bh_all_lock;
    QLIST_HEAD(, QEMUBH) bh_all;

    /* Owner thread only from here on. */
    int epollfd;
    QLIST_HEAD(, AioHandler) handlers;
    unsigned walking;               /* > 0 while handlers is being walked */
    bool has_deleted;               /* some handler has deleted == true */
    unsigned poll_handler_cnt;      /* handlers with io_poll */
    unsigned poll_disable_cnt;      /* handlers without io_poll */
    AioHandler *notifier_handler;
    bool in_poll;                   /* aio_poll() running: no nesting */
    bool poll_started;              /* in a busy-poll phase (see aio-posix.c) */

    int64_t poll_max_ns;
    int64_t poll_grow;
    int64_t poll_shrink;
    int64_t poll_block_ns;          /* AioPollParams.block_ns */
    AioPollWindow poll_window;      /* see aio_poll_window_next(); its ns
                                     * is mirrored in poll_ns for stats */
    /* drivers that poll (aio_context_driver_polls_add()); read by
     * aio_context_get_stats() from other threads */
    _Atomic unsigned driver_polls;

    /*
     * Written by the owner only, readable from any thread through
     * aio_context_get_stats(): relaxed atomics, so a plain load and store
     * on the hot path, no locked instruction.
     */
    _Atomic int64_t poll_ns;
    _Atomic uint64_t iterations;
    _Atomic uint64_t epoll_waits;
    _Atomic uint64_t poll_hits;
    _Atomic uint64_t bh_runs;
    _Atomic uint64_t poll_host_busy;
    _Atomic uint64_t poll_driver_polls;

    AioLocalSlot local[AIO_LOCAL_MAX];
};

/* Owner thread: bump a statistics counter (single writer, no RMW). */
static inline void aio_stat_inc(_Atomic uint64_t *counter)
{
    atomic_store_explicit(counter,
                          atomic_load_explicit(counter,
                                               memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static inline int64_t aio_get_poll_ns(AioContext *ctx)
{
    return atomic_load_explicit(&ctx->poll_ns, memory_order_relaxed);
}

static inline void aio_set_poll_ns(AioContext *ctx, int64_t ns)
{
    atomic_store_explicit(&ctx->poll_ns, ns, memory_order_relaxed);
}

/* util/async.c: run the scheduled bottom halves; true if any callback ran. */
bool aio_bh_poll(AioContext *ctx);
/* util/async.c: true if some BH is waiting for the loop (any thread). */
bool aio_bh_pending(AioContext *ctx);
/* util/aio-posix.c: create/destroy the epoll side of a context. */
bool aio_context_setup(AioContext *ctx, GError **errp);
void aio_context_teardown(AioContext *ctx);
/* util/async.c */
void aio_context_set_current(AioContext *ctx);
/*
 * util/aio-posix.c: true if the calling thread is inside aio_poll() of
 * @ctx (it is the owner and is running, not sleeping).  Any thread.
 */
bool aio_in_own_poll(AioContext *ctx);
/* util/async.c: run and clear the engine slots' cleanups (owner thread,
 * loop not running); aio_context_free() does it too. */
void aio_context_cleanup_local(AioContext *ctx);

#endif
