/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bench-reconnect: the rendezvous that lets vhost-blk-bench --reconnect
 * survive a back-end restart, as QEMU's vhost-user-blk does with
 * reconnect=N.
 *
 * Theory of operation: each queue is driven by its own worker thread, and
 * the front-end library allows no control call (reconnect) while any
 * queue is being driven.  A worker that finds the back-end gone parks
 * here; a worker that is between phases or done does not drive its queue
 * and does not count.  When every worker still driving its queue is
 * parked, the last one to arrive reconnects (the library re-negotiates,
 * hands the kept inflight region to the new back-end, which resubmits
 * what was in flight) and wakes the others, which go on waiting for their
 * outstanding requests as if nothing happened.  Only the disconnect path
 * takes the lock: nothing here runs per request.
 */
#ifndef TOOLS_BENCH_RECONNECT_H
#define TOOLS_BENCH_RECONNECT_H

#include <glib.h>
#include <stdbool.h>
#include <stdio.h>
#include "hw/virtio/vhost-user-frontend.h"

typedef struct BenchReconnect {
    GMutex lock;
    GCond cond;
    VhostUserFrontend *fe;
    unsigned int timeout_ms;    /* 0: --reconnect not given */
    unsigned int driving;       /* workers inside a phase */
    unsigned int parked;        /* ... of which wait for a reconnect */
    unsigned int generation;    /* reconnects done */
    bool busy;                  /* a reconnect is under way */
    bool failed;                /* the last one failed: give up */
    char error[160];
} BenchReconnect;

/* Reconnect once every driving worker is parked (lock held). */
static inline void bench_reconnect_try(BenchReconnect *rc)
{
    g_autoptr(GError) err = NULL;

    if (!rc->parked || rc->parked < rc->driving || rc->busy) {
        return;
    }
    rc->busy = true;
    g_mutex_unlock(&rc->lock);
    fprintf(stderr, "vhost-blk-bench: the back-end closed the connection: "
            "reconnecting (up to %u ms)\n", rc->timeout_ms);
    if (!vhost_user_frontend_reconnect(rc->fe, rc->timeout_ms, &err)) {
        g_mutex_lock(&rc->lock);
        rc->failed = true;
        snprintf(rc->error, sizeof(rc->error), "%s", err->message);
    } else {
        g_mutex_lock(&rc->lock);
        fprintf(stderr, "vhost-blk-bench: reconnected (%u)\n",
                rc->generation + 1);
    }
    rc->generation++;
    rc->busy = false;
    g_cond_broadcast(&rc->cond);
}

/* A worker starts driving its queue (waits out a reconnect under way). */
static inline void bench_reconnect_enter(BenchReconnect *rc)
{
    if (!rc->timeout_ms) {
        return;
    }
    g_mutex_lock(&rc->lock);
    while (rc->busy) {
        g_cond_wait(&rc->cond, &rc->lock);
    }
    rc->driving++;
    g_mutex_unlock(&rc->lock);
}

/* A worker stops driving its queue; it may be the one the others wait on. */
static inline void bench_reconnect_leave(BenchReconnect *rc)
{
    if (!rc->timeout_ms) {
        return;
    }
    g_mutex_lock(&rc->lock);
    rc->driving--;
    bench_reconnect_try(rc);
    g_mutex_unlock(&rc->lock);
}

/*
 * The back-end hung up on a driving worker: park until the session is
 * back.  True when reconnected (carry on), false when --reconnect was not
 * given or the reconnect failed (@why says why).
 */
static inline bool bench_reconnect_park(BenchReconnect *rc, const char **why)
{
    unsigned int gen;
    bool ok;

    *why = NULL;
    if (!rc->timeout_ms) {
        return false;
    }
    g_mutex_lock(&rc->lock);
    gen = rc->generation;
    rc->parked++;
    bench_reconnect_try(rc);
    while (rc->generation == gen) {
        g_cond_wait(&rc->cond, &rc->lock);
    }
    rc->parked--;
    ok = !rc->failed;
    if (!ok) {
        *why = rc->error;
    }
    g_mutex_unlock(&rc->lock);
    return ok;
}

#endif /* TOOLS_BENCH_RECONNECT_H */
