/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests for IOThread: start/stop, run_sync and cross-thread BHs. */
#include "qemu/osdep.h"
#include <pthread.h>
#include "qemu/iothread.h"
#include "qemu/event_notifier.h"

typedef struct RunData {
    IOThread *iothread;
    AioContext *seen_ctx;
    GThread *seen_thread;
    int runs;
} RunData;

static void record_cb(void *opaque)
{
    RunData *d = opaque;

    d->seen_ctx = qemu_get_current_aio_context();
    d->seen_thread = g_thread_self();
    d->runs++;
}

static void test_run_sync(void)
{
    GError *err = NULL;
    IOThread *iothread = iothread_create("test-io0", 0, &err);
    RunData d = { 0 };
    int i;

    g_assert_no_error(err);
    g_assert_cmpstr(iothread_get_name(iothread), ==, "test-io0");
    iothread_run_sync(iothread, record_cb, &d);
    /* Returned after it ran, inside the iothread's context. */
    g_assert_cmpint(d.runs, ==, 1);
    g_assert_true(d.seen_ctx == iothread_get_aio_context(iothread));
    g_assert_true(d.seen_thread != g_thread_self());

    for (i = 0; i < 100; i++) {
        iothread_run_sync(iothread, record_cb, &d);
    }
    g_assert_cmpint(d.runs, ==, 101);
    iothread_destroy(iothread);
}

static void test_run_sync_own_context(void)
{
    GError *err = NULL;
    AioContext *ctx = aio_context_new(&err);
    RunData d = { 0 };

    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);
    /* Our own context: runs directly, no loop iteration needed. */
    aio_run_sync(ctx, record_cb, &d);
    g_assert_cmpint(d.runs, ==, 1);
    g_assert_true(d.seen_thread == g_thread_self());
    aio_context_free(ctx);
}

typedef struct BHMain {
    QEMUBH *bh;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int runs;
    GThread *thread;
} BHMain;

static void bh_main_cb(void *opaque)
{
    BHMain *b = opaque;

    pthread_mutex_lock(&b->lock);
    b->runs++;
    b->thread = g_thread_self();
    pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

static void bh_main_new(void *opaque)
{
    BHMain *b = opaque;

    b->bh = aio_bh_new(qemu_get_current_aio_context(), bh_main_cb, b,
                       "test-bh-from-main");
}

static void bh_main_delete(void *opaque)
{
    BHMain *b = opaque;

    qemu_bh_delete(b->bh);
}

static void test_bh_from_main(void)
{
    GError *err = NULL;
    IOThread *iothread = iothread_create("test-io1", 32000, &err);
    BHMain b = { 0 };
    int i;

    g_assert_no_error(err);
    pthread_mutex_init(&b.lock, NULL);
    pthread_cond_init(&b.cond, NULL);
    iothread_run_sync(iothread, bh_main_new, &b);

    for (i = 1; i <= 50; i++) {
        qemu_bh_schedule(b.bh);
        pthread_mutex_lock(&b.lock);
        while (b.runs < i) {
            pthread_cond_wait(&b.cond, &b.lock);
        }
        pthread_mutex_unlock(&b.lock);
    }
    g_assert_cmpint(b.runs, ==, 50);
    g_assert_true(b.thread != g_thread_self());

    iothread_run_sync(iothread, bh_main_delete, &b);
    iothread_destroy(iothread);
    pthread_cond_destroy(&b.cond);
    pthread_mutex_destroy(&b.lock);
}

typedef struct FdInThread {
    EventNotifier e;
    atomic_int reads;
} FdInThread;

static void fd_thread_read(void *opaque)
{
    FdInThread *f = opaque;

    if (event_notifier_test_and_clear(&f->e)) {
        atomic_fetch_add(&f->reads, 1);
    }
}

static void fd_thread_add(void *opaque)
{
    FdInThread *f = opaque;

    aio_set_fd_handler(qemu_get_current_aio_context(),
                       event_notifier_get_fd(&f->e), fd_thread_read, NULL,
                       NULL, NULL, f);
}

static void fd_thread_del(void *opaque)
{
    FdInThread *f = opaque;

    aio_set_fd_handler(qemu_get_current_aio_context(),
                       event_notifier_get_fd(&f->e), NULL, NULL, NULL, NULL,
                       NULL);
}

/* An fd handler in the iothread wakes its blocked loop. */
static void test_fd_in_iothread(void)
{
    GError *err = NULL;
    IOThread *iothread = iothread_create("test-io2", 0, &err);
    FdInThread f = { 0 };
    int i;

    g_assert_no_error(err);
    g_assert_cmpint(event_notifier_init(&f.e, false), ==, 0);
    iothread_run_sync(iothread, fd_thread_add, &f);
    for (i = 1; i <= 20; i++) {
        event_notifier_set(&f.e);
        while (atomic_load(&f.reads) < i) {
            g_thread_yield();
        }
    }
    iothread_run_sync(iothread, fd_thread_del, &f);
    iothread_destroy(iothread);
    event_notifier_cleanup(&f.e);
}

static void test_create_destroy(void)
{
    int i;

    for (i = 0; i < 20; i++) {
        GError *err = NULL;
        IOThread *iothread = iothread_create("test-io3", i % 2 ? 16000 : 0,
                                             &err);

        g_assert_no_error(err);
        iothread_destroy(iothread);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/aio/iothread/run-sync", test_run_sync);
    g_test_add_func("/aio/iothread/run-sync-own-context",
                    test_run_sync_own_context);
    g_test_add_func("/aio/iothread/bh-from-main", test_bh_from_main);
    g_test_add_func("/aio/iothread/fd-handler", test_fd_in_iothread);
    g_test_add_func("/aio/iothread/create-destroy", test_create_destroy);
    return g_test_run();
}
