/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * AioContext: the event loop every iothread (and the main thread) runs.
 *
 * One AioContext belongs to exactly one thread: only that thread calls
 * aio_poll() and aio_set_fd_handler() on it.  Other threads interact with a
 * context only through aio_notify(), qemu_bh_schedule() and
 * aio_bh_schedule_oneshot(), which are thread-safe.
 *
 * aio_poll() runs, in this order: scheduled bottom halves, then (if polling
 * is enabled) a busy-poll window in which each handler's io_poll() is called
 * without any syscall, then epoll_wait() and the ready fd handlers.  The poll
 * window adapts between 0 and poll-max-ns: it stays while what polling
 * saves (a sleep and wake-up per event it catches) is worth the time it
 * spins, and shrinks, down to 0, when it is not.
 *
 * Nested event loops are forbidden: a callback must never call aio_poll().
 */
#ifndef QEMU_AIO_H
#define QEMU_AIO_H

#include "qemu/osdep.h"

typedef struct AioContext AioContext;
typedef struct QEMUBH QEMUBH;

typedef void IOHandler(void *opaque);
/* Busy-poll check: returns true when the handler has work; must not block
 * and should not make syscalls. */
typedef bool AioPollFn(void *opaque);
typedef void QEMUBHFunc(void *opaque);

/* Create a context; the calling thread does not become its owner until it
 * calls aio_poll() (or aio_context_acquire_thread()). */
AioContext *aio_context_new(GError **errp);
/* Destroy a context (owner thread, loop not running).  Bottom halves still
 * alive are reported by name on stderr and freed; fd handlers still
 * registered are reported too. */
void aio_context_free(AioContext *ctx);

/* Mark the calling thread as the owner of @ctx: afterwards
 * qemu_get_current_aio_context() returns @ctx in this thread. */
void aio_context_acquire_thread(AioContext *ctx);
/* The context the calling thread runs (NULL if none). */
AioContext *qemu_get_current_aio_context(void);

/*
 * Register (or with all handlers NULL, remove) the handlers of @fd.  Owner
 * thread only.  @io_poll, if given, is called during the busy-poll window;
 * when it returns true, @io_poll_ready is called (or @io_read if
 * @io_poll_ready is NULL).
 */
void aio_set_fd_handler(AioContext *ctx, int fd,
                        IOHandler *io_read, IOHandler *io_write,
                        AioPollFn *io_poll, IOHandler *io_poll_ready,
                        void *opaque);

/*
 * Busy-poll phase callbacks for the handler of @fd (registered with an
 * io_poll; either callback may be NULL).  Owner thread only.  The loop
 * calls @io_poll_begin when it starts busy polling (it will call io_poll
 * again and again, so the handler may turn its event source's
 * notifications off, e.g. a virtqueue's guest kicks) and @io_poll_end
 * when it stops polling to sleep in epoll_wait(); right after
 * @io_poll_end it calls io_poll once more, so work that arrived while
 * notifications were off is not lost.  A poll phase lasts across
 * iterations as long as the loop does not sleep.  Re-registering the fd
 * with aio_set_fd_handler() keeps the callbacks; removing it drops them
 * without calling @io_poll_end (the owner resets its notifications).
 */
/*
 * Make the handler of @fd edge-triggered (EPOLLET): its io_read runs once
 * per new event, so it need not drain the fd.  For an eventfd this means
 * each write wakes the loop once and the counter is never read: the
 * handler saves the read syscall (the counter cannot reach its 2^64 - 2
 * limit in practice).  Stays until the handler is removed.  False if
 * there is no such handler or epoll refused.  Owner thread only.
 */
bool aio_set_fd_edge_triggered(AioContext *ctx, int fd);

void aio_set_fd_poll_notify(AioContext *ctx, int fd,
                            IOHandler *io_poll_begin,
                            IOHandler *io_poll_end);

/* Run one iteration.  With @blocking, wait until something happens.
 * Returns true if any handler or bottom half made progress. */
bool aio_poll(AioContext *ctx, bool blocking);

/* Wake the context's loop if it may be sleeping in epoll_wait(); a no-op
 * (no syscall) while the owner is running handlers. Thread-safe. */
void aio_notify(AioContext *ctx);

/*
 * The adaptive poll window's policy, pure so tests can feed it synthetic
 * sequences (no clock): see "The poll window" in util/aio-posix.c.  After
 * each blocking iteration that could poll, aio_poll_window_next() is told
 * how long the iteration spent polling (@spent_ns), how long it waited for
 * its event in all (@wait_ns, polling plus any sleep) and whether polling
 * caught it (@hit); it updates @w, whose ns is the next window.
 */
#define AIO_POLL_NS_START 4000          /* first window of a probe */
#define AIO_POLL_NEAR_FACTOR 4          /* "near" waits: <= 4 x max_ns */
#define AIO_POLL_CREDIT_FACTOR 4        /* credit limit: 4 x max_ns */
#define AIO_POLL_BLOCK_NS 10000         /* default cost of a block+wake-up */
#define AIO_POLL_PROBE_BACKOFF_MAX 4096 /* near waits between failed probes */

typedef struct AioPollParams {
    int64_t max_ns;     /* poll-max-ns: the window never exceeds it */
    int64_t grow;       /* factor (> 1) */
    int64_t shrink;     /* divisor (> 1) */
    int64_t block_ns;   /* what a sleep + wake-up costs: a hit saves it */
} AioPollParams;

typedef struct AioPollWindow {
    int64_t ns;             /* the window of the next blocking iteration */
    int64_t credit_ns;      /* block costs saved by hits minus time spent
                             * polling, within +-CREDIT_FACTOR x max_ns */
    unsigned hits;          /* hits since credit_ns last started from 0 */
    int64_t ceiling_ns;     /* a window that lost with hits: grow only
                             * below it until polling pays (0: none) */
    unsigned probe_wait;    /* near waits to let pass before a probe */
    unsigned probe_backoff; /* probe_wait after the next failed probe */
} AioPollWindow;

void aio_poll_window_next(AioPollWindow *w, const AioPollParams *p,
                          int64_t spent_ns, int64_t wait_ns, bool hit);

/* Adaptive polling: 0 disables.  grow/shrink factors: 0 = defaults (2). */
void aio_context_set_poll_params(AioContext *ctx, int64_t max_ns,
                                 int64_t grow, int64_t shrink);

/* The cost of a block + wake-up cycle the window weighs polling against
 * (AioPollParams.block_ns); <= 0: AIO_POLL_BLOCK_NS.  Owner thread. */
void aio_context_set_poll_block_ns(AioContext *ctx, int64_t block_ns);

/*
 * The host has no idle CPU (process-wide, any thread; see host-load.h):
 * while true no context busy-polls, whatever its poll_max_ns.
 */
void aio_set_host_busy(bool busy);
bool aio_get_host_busy(void);

/*
 * A driver served by @ctx polls for its completions (its vCPU spins
 * waiting for us; see virtqueue_driver_polls()): @delta +1 when one
 * starts, -1 when it stops or its queue goes away.  While any does, @ctx
 * keeps polling on a busy host: pausing frees no CPU (the driver spins
 * anyway) and would put a wake-up on each of its requests.  Owner thread.
 */
void aio_context_driver_polls_add(AioContext *ctx, int delta);

/* Statistics, for tests and benchmarks. */
typedef struct AioContextStats {
    uint64_t iterations;        /* aio_poll() calls */
    uint64_t epoll_waits;       /* epoll_wait() syscalls */
    uint64_t poll_hits;         /* io_poll() returned true in the window */
    uint64_t poll_host_busy;    /* iterations that did not poll: host busy */
    uint64_t poll_driver_polls; /* iterations that polled on a busy host
                                 * because a driver polls */
    unsigned int driver_polls;  /* drivers that poll, now */
    uint64_t notify_writes;     /* eventfd writes done by aio_notify() */
    uint64_t bh_runs;           /* bottom half callbacks run */
    int64_t  poll_ns;           /* current poll window */
} AioContextStats;
void aio_context_get_stats(AioContext *ctx, AioContextStats *stats);

/*
 * Bottom halves.  A BH is a callback run by the context's loop at the start
 * of the next aio_poll().  Scheduling is idempotent (a BH scheduled twice
 * before it runs, runs once) and safe from any thread.  @name is used in
 * reports (for example a BH still alive when its context is freed).
 */
QEMUBH *aio_bh_new(AioContext *ctx, QEMUBHFunc *cb, void *opaque,
                   const char *name);
void qemu_bh_schedule(QEMUBH *bh);
/* Unschedule; owner thread.  A no-op if not scheduled. */
void qemu_bh_cancel(QEMUBH *bh);
/* Cancel and free (the memory is released by the loop, so deleting from
 * inside the BH's own callback is fine).  Owner thread. */
void qemu_bh_delete(QEMUBH *bh);
bool qemu_bh_is_scheduled(QEMUBH *bh);
/* Schedule @cb once in @ctx; thread-safe; freed after it runs. */
void aio_bh_schedule_oneshot(AioContext *ctx, QEMUBHFunc *cb, void *opaque,
                             const char *name);

/*
 * Per-context storage, keyed like thread-local storage: a user (a block
 * engine, say) defines one zero-initialised static AioLocalKey and stores
 * its per-context state under it.  The key gets a slot index the first
 * time a value is stored under it (any thread); a lookup is one load and
 * one array index, no lock.  At most AIO_LOCAL_MAX keys per process.
 * Values: owner thread only.  @cleanup runs from aio_context_free().
 */
#define AIO_LOCAL_MAX 16
typedef struct AioLocalKey {
    _Atomic int index;          /* slot + 1; 0 until first use */
} AioLocalKey;
void *aio_local_get(AioContext *ctx, AioLocalKey *key);
void aio_local_set(AioContext *ctx, AioLocalKey *key, void *state,
                   void (*cleanup)(void *state));

#endif
