/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of the throttle filter's node (block/throttle.c) around its
 * per-context timers:
 *
 *   close-attached: an iothread attached the filter (its retry timer is
 *       registered there) and never detached; the node is closed from
 *       the main thread.  The iothread must no longer have a handler for
 *       that timer: its argument points into the freed node, and a timer
 *       armed before (or a kick) would run it after the free.
 *   truncate-async: blk_truncate_async() on a throttle node over a node
 *       that must not resize in a worker (null) stays in the main thread;
 *       the rbd case (in a worker) is in test-block-rbd.c.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "qemu/iothread.h"
#include "qemu/throttle.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/null.h"
#include "../../util/aio-internal.h"

static AioContext *ctx;

static ThrottleGroup *group_new(void)
{
    ThrottleLimits t = { 0 };
    GError *err = NULL;
    ThrottleGroup *tg;
    bool known;

    g_assert_true(throttle_limits_set_key(&t, "iops-total", 100, &known,
                                          &err));
    g_assert_true(known);
    tg = throttle_group_new("tg0", &t, &err);
    g_assert_no_error(err);
    return tg;
}

static BlockBackend *throttled_null(ThrottleGroup *tg)
{
    BlockOptions opts;
    BlockNullOptions no;
    GError *err = NULL;
    BlockBackend *child, *top;

    blk_options_init(&opts);
    blk_null_options(&opts, &no, 1 << 20, false);
    child = blk_open(&opts, &err);
    g_assert_no_error(err);
    top = blk_throttle_new(child, tg, &err);
    g_assert_no_error(err);
    return top;
}

typedef struct CtxJob {
    BlockBackend *blk;
    int count;
} CtxJob;

static void attach_fn(void *opaque)
{
    CtxJob *j = opaque;
    GError *err = NULL;

    g_assert_true(blk_attach_aio_context(j->blk,
                                         qemu_get_current_aio_context(),
                                         &err));
    g_assert_no_error(err);
}

/* The live handlers of this thread's context, its own notifier aside. */
static void count_fn(void *opaque)
{
    CtxJob *j = opaque;
    AioContext *c = qemu_get_current_aio_context();
    AioHandler *h;

    j->count = 0;
    QLIST_FOREACH(h, &c->handlers, node) {
        if (!h->deleted && !h->internal) {
            j->count++;
        }
    }
}

static void test_close_attached(void)
{
    ThrottleGroup *tg = group_new();
    BlockBackend *top = throttled_null(tg);
    GError *err = NULL;
    IOThread *t = iothread_create("throttle-t", 0, &err);
    CtxJob j = { .blk = top };
    int before;

    g_assert_no_error(err);
    iothread_run_sync(t, count_fn, &j);
    before = j.count;
    iothread_run_sync(t, attach_fn, &j);
    iothread_run_sync(t, count_fn, &j);
    g_assert_cmpint(j.count, ==, before + 1);   /* the retry timer */

    blk_close(top);             /* the iothread never detached */
    iothread_run_sync(t, count_fn, &j);
    g_assert_cmpint(j.count, ==, before);
    iothread_destroy(t);
    throttle_group_unref(tg);
}

static void truncate_cb(void *opaque, GError *err)
{
    g_assert_no_error(err);
    *(bool *)opaque = true;
}

static void test_truncate_async_sync_child(void)
{
    ThrottleGroup *tg = group_new();
    BlockBackend *top = throttled_null(tg);
    bool done = false;

    blk_truncate_async(top, 2 << 20, truncate_cb, &done);
    g_assert_true(done);        /* null: in the main thread, at once */
    g_assert_cmpuint(blk_getlength(top), ==, 2 << 20);
    blk_close(top);
    throttle_group_unref(tg);
}

int main(int argc, char **argv)
{
    GError *err = NULL;
    int ret;

    g_test_init(&argc, &argv, NULL);
    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);
    g_test_add_func("/block/throttle/close-attached", test_close_attached);
    g_test_add_func("/block/throttle/truncate-async",
                    test_truncate_async_sync_child);
    ret = g_test_run();
    while (aio_poll(ctx, false)) {
    }
    aio_context_free(ctx);
    return ret;
}
