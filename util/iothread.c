/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * IOThread: a named thread that owns one AioContext and runs aio_poll()
 * until iothread_destroy() asks it to stop (through a bottom half, so no
 * lock or shared flag is polled on the hot path).
 */
#include "qemu/osdep.h"
#include <pthread.h>
#include "qemu/iothread.h"
#include "qemu/error-report.h"
#include "aio-internal.h"

struct IOThread {
    char *name;
    GThread *thread;
    AioContext *ctx;
    bool stopping;          /* owner thread only (set by a BH) */

    pthread_mutex_t init_lock;
    pthread_cond_t init_cond;
    bool running;
};

static gpointer iothread_run(gpointer opaque)
{
    IOThread *iothread = opaque;
    char thread_name[16];

    /* The kernel keeps 15 characters of a thread name. */
    g_strlcpy(thread_name, iothread->name, sizeof(thread_name));
    pthread_setname_np(pthread_self(), thread_name);

    aio_context_acquire_thread(iothread->ctx);

    pthread_mutex_lock(&iothread->init_lock);
    iothread->running = true;
    pthread_cond_signal(&iothread->init_cond);
    pthread_mutex_unlock(&iothread->init_lock);

    while (!iothread->stopping) {
        aio_poll(iothread->ctx, true);
    }
    /*
     * Engine cleanups run here, in the owner thread, where their per-thread
     * state lives (they may even aio_poll() to drain).  The context itself
     * is freed by iothread_destroy() after the join: the thread that
     * scheduled the stop BH may still be inside aio_notify() on it.
     */
    aio_context_cleanup_local(iothread->ctx);
    aio_context_set_current(NULL);
    return NULL;
}

/* Main thread. */
IOThread *iothread_create(const char *name, int64_t poll_max_ns,
                          GError **errp)
{
    IOThread *iothread;
    GError *local_err = NULL;

    iothread = g_new0(IOThread, 1);
    iothread->name = g_strdup(name ? name : "iothread");
    iothread->ctx = aio_context_new(errp);
    if (!iothread->ctx) {
        goto fail_ctx;
    }
    aio_context_set_poll_params(iothread->ctx, poll_max_ns, 0, 0);
    pthread_mutex_init(&iothread->init_lock, NULL);
    pthread_cond_init(&iothread->init_cond, NULL);

    iothread->thread = g_thread_try_new(iothread->name, iothread_run,
                                        iothread, &local_err);
    if (!iothread->thread) {
        g_set_error(errp, VB_ERROR, 0, "cannot start iothread '%s': %s",
                    iothread->name, local_err->message);
        g_error_free(local_err);
        goto fail_thread;
    }

    pthread_mutex_lock(&iothread->init_lock);
    while (!iothread->running) {
        pthread_cond_wait(&iothread->init_cond, &iothread->init_lock);
    }
    pthread_mutex_unlock(&iothread->init_lock);
    return iothread;

fail_thread:
    pthread_cond_destroy(&iothread->init_cond);
    pthread_mutex_destroy(&iothread->init_lock);
    aio_context_free(iothread->ctx);
fail_ctx:
    g_free(iothread->name);
    g_free(iothread);
    return NULL;
}

static void iothread_stop_bh(void *opaque)
{
    IOThread *iothread = opaque;

    iothread->stopping = true;
}

/* Main thread (not the iothread itself). */
void iothread_destroy(IOThread *iothread)
{
    if (!iothread) {
        return;
    }
    /* The BH runs in the iothread; its aio_poll() then returns. */
    aio_bh_schedule_oneshot(iothread->ctx, iothread_stop_bh, iothread,
                            "iothread_stop");
    g_thread_join(iothread->thread);
    aio_context_free(iothread->ctx);
    pthread_cond_destroy(&iothread->init_cond);
    pthread_mutex_destroy(&iothread->init_lock);
    g_free(iothread->name);
    g_free(iothread);
}

/* Any thread. */
AioContext *iothread_get_aio_context(IOThread *iothread)
{
    return iothread->ctx;
}

/* Any thread. */
const char *iothread_get_name(IOThread *iothread)
{
    return iothread->name;
}

/* Any thread but the iothread itself. */
void iothread_run_sync(IOThread *iothread, void (*fn)(void *opaque),
                       void *opaque)
{
    assert(qemu_get_current_aio_context() != iothread->ctx);
    aio_run_sync(iothread->ctx, fn, opaque);
}
