/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Which threads run the thread-pool engine's requests under the iothread
 * seccomp filter (block/thread-pool.c, util/sandbox.c): the file I/O of a
 * confined iothread runs on confined workers only, and the main loop's
 * on unconfined workers only, whatever ran before, also when both share a
 * backend and its requests wait for a share of the pool.  The pool's hook
 * runs in the worker and asks the kernel (prctl(PR_GET_SECCOMP): 2 under
 * a filter, 0 without).
 */
#include "qemu/osdep.h"
#include <sys/prctl.h>
#include "qemu/aio.h"
#include "qemu/iothread.h"
#include "qemu/sandbox.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/engine.h"
#include "block/file.h"

static AioContext *ctx;
static char *tmpdir;

/* What the hook saw, for the request it was told to watch. */
static struct {
    GMutex lock;
    GCond cond;
    bool done;                  /* the request completed */
    int mode;                   /* PR_GET_SECCOMP in its worker */
    int ret;
} seen;

static void mode_hook(BlockAIOCB *acb)
{
    int mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);

    g_mutex_lock(&seen.lock);
    seen.mode = mode;
    g_mutex_unlock(&seen.lock);
}

static void req_cb(void *opaque, int ret)
{
    g_mutex_lock(&seen.lock);
    seen.ret = ret;
    seen.done = true;
    g_cond_broadcast(&seen.cond);
    g_mutex_unlock(&seen.lock);
}

typedef struct Submit {
    BlockBackend *blk;
    BlockAIOCB acb;
    void *buf;
    struct iovec iov;
} Submit;

/* In the thread of the context the request is for. */
static void submit_fn(void *opaque)
{
    Submit *s = opaque;

    s->iov = (struct iovec) { s->buf, 4096 };
    blk_aio_pwritev(s->blk, &s->acb, 0, &s->iov, 1, 0, req_cb, NULL);
}

static void seen_reset(void)
{
    g_mutex_lock(&seen.lock);
    seen.done = false;
    seen.mode = -1;
    seen.ret = -1;
    g_mutex_unlock(&seen.lock);
}

/* The seccomp mode of the worker that ran the last request. */
static int seen_wait(bool main_loop)
{
    gint64 deadline = g_get_monotonic_time() + 30 * G_USEC_PER_SEC;
    int mode;

    g_mutex_lock(&seen.lock);
    while (!seen.done) {
        if (main_loop) {
            g_mutex_unlock(&seen.lock);
            aio_poll(ctx, true);
            g_mutex_lock(&seen.lock);
        } else {
            g_assert_true(g_cond_wait_until(&seen.cond, &seen.lock,
                                            deadline));
        }
    }
    g_assert_cmpint(seen.ret, ==, 0);
    mode = seen.mode;
    g_mutex_unlock(&seen.lock);
    return mode;
}

static void confine_fn(void *opaque)
{
    GError **errp = opaque;

    g_assert_true(sandbox_apply_iothread_filter(errp));
}

typedef struct Attach {
    BlockBackend *blk;
    bool attach;
} Attach;

static void attach_fn(void *opaque)
{
    Attach *a = opaque;
    GError *err = NULL;

    if (a->attach) {
        g_assert_true(blk_attach_aio_context(a->blk,
                                             qemu_get_current_aio_context(),
                                             &err));
        g_assert_no_error(err);
    } else {
        blk_detach_aio_context(a->blk, qemu_get_current_aio_context());
    }
}

static void test_pool_confinement(void)
{
    g_autofree char *path = g_build_filename(tmpdir, "img", NULL);
    g_autofree void *buf = g_malloc0(4096);
    BlockOptions opts;
    BlockFileOptions fo;
    GError *err = NULL;
    BlockBackend *blk;
    IOThread *t;
    Submit s = { 0 };
    int fd;

    if (!sandbox_available()) {
        g_test_skip("built without libseccomp");
        return;
    }
    fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 1 << 20), ==, 0);
    close(fd);
    blk_options_init(&opts);
    blk_file_options(&opts, &fo, path);
    fo.aio = BLOCK_AIO_THREADS;
    opts.cache_direct = false;
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    g_mutex_init(&seen.lock);
    g_cond_init(&seen.cond);
    thread_pool_test_hook = mode_hook;
    s.blk = blk;
    s.buf = buf;

    /* the main loop first: an unconfined worker, idle afterwards */
    seen_reset();
    submit_fn(&s);
    g_assert_cmpint(seen_wait(true), ==, 0);

    /* a confined iothread: never that idle unconfined worker */
    t = iothread_create("confined", 0, &err);
    g_assert_no_error(err);
    iothread_run_sync(t, confine_fn, &err);
    g_assert_no_error(err);
    iothread_run_sync(t, attach_fn, &(Attach) { blk, true });
    for (int i = 0; i < 3; i++) {
        seen_reset();
        iothread_run_sync(t, submit_fn, &s);
        g_assert_cmpint(seen_wait(false), ==, 2);
    }

    /* and the main loop again: never one of the confined workers, idle
     * now */
    for (int i = 0; i < 3; i++) {
        seen_reset();
        submit_fn(&s);
        g_assert_cmpint(seen_wait(true), ==, 0);
    }

    thread_pool_test_hook = NULL;
    iothread_run_sync(t, attach_fn, &(Attach) { blk, false });
    iothread_destroy(t);
    while (aio_poll(ctx, false)) {
    }
    blk_close(blk);
    unlink(path);
}

/*
 * One backend, both kinds of context, more requests than the backend's
 * share of the pool: the waiting ones are run by whichever worker of the
 * backend finishes first -- which must still be one of the submitter's
 * kind.  The first THREAD_POOL_MAX_PER_BACKEND (unconfined, from the
 * main loop) are held in the hook until the others wait.
 */
typedef struct MixReq {
    BlockAIOCB acb;
    struct iovec iov;
    int expect;                 /* PR_GET_SECCOMP its worker must report */
    int mode;
    bool done;
} MixReq;

static struct {
    GMutex lock;
    GCond cond;
    unsigned int held;          /* requests waiting in the hook */
    bool open;
    unsigned int iothread_done;
} mix;

static void mix_hook(BlockAIOCB *acb)
{
    MixReq *r = acb->opaque;

    r->mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
    g_mutex_lock(&mix.lock);
    mix.held++;
    g_cond_broadcast(&mix.cond);
    while (!mix.open) {
        g_cond_wait(&mix.cond, &mix.lock);
    }
    g_mutex_unlock(&mix.lock);
}

static void mix_cb(void *opaque, int ret)
{
    MixReq *r = opaque;

    g_assert_cmpint(ret, ==, 0);
    g_mutex_lock(&mix.lock);
    r->done = true;
    if (r->expect) {
        mix.iothread_done++;
    }
    g_cond_broadcast(&mix.cond);
    g_mutex_unlock(&mix.lock);
}

typedef struct MixBatch {
    BlockBackend *blk;
    MixReq *reqs;
    int n;
    void *buf;
} MixBatch;

static void mix_submit_fn(void *opaque)
{
    MixBatch *b = opaque;

    for (int i = 0; i < b->n; i++) {
        MixReq *r = &b->reqs[i];

        r->iov = (struct iovec) { b->buf, 4096 };
        blk_aio_pwritev(b->blk, &r->acb, i * 4096, &r->iov, 1, 0, mix_cb,
                        r);
    }
}

#define MIX_MAIN THREAD_POOL_MAX_PER_BACKEND
#define MIX_IOT 8
#define MIX_MAIN2 4

static void test_pool_mixed_backend(void)
{
    g_autofree char *path = g_build_filename(tmpdir, "mix", NULL);
    g_autofree void *buf = g_malloc0(4096);
    MixReq *reqs = g_new0(MixReq, MIX_MAIN + MIX_IOT + MIX_MAIN2);
    MixBatch first = { .reqs = reqs, .n = MIX_MAIN, .buf = buf };
    MixBatch iot = { .reqs = reqs + MIX_MAIN, .n = MIX_IOT, .buf = buf };
    MixBatch second = { .reqs = reqs + MIX_MAIN + MIX_IOT, .n = MIX_MAIN2,
                        .buf = buf };
    gint64 deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;
    BlockOptions opts;
    BlockFileOptions fo;
    GError *err = NULL;
    BlockBackend *blk;
    IOThread *t;
    int fd;

    if (!sandbox_available()) {
        g_test_skip("built without libseccomp");
        return;
    }
    fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 1 << 20), ==, 0);
    close(fd);
    blk_options_init(&opts);
    blk_file_options(&opts, &fo, path);
    fo.aio = BLOCK_AIO_THREADS;
    opts.cache_direct = false;
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    first.blk = iot.blk = second.blk = blk;
    for (int i = 0; i < MIX_IOT; i++) {
        iot.reqs[i].expect = 2;
    }
    t = iothread_create("mix", 0, &err);
    g_assert_no_error(err);
    iothread_run_sync(t, confine_fn, &err);
    g_assert_no_error(err);
    iothread_run_sync(t, attach_fn, &(Attach) { blk, true });
    g_mutex_init(&mix.lock);
    g_cond_init(&mix.cond);
    thread_pool_test_hook = mix_hook;

    /* the backend's whole share, held */
    mix_submit_fn(&first);
    g_mutex_lock(&mix.lock);
    while (mix.held < MIX_MAIN) {
        g_assert_true(g_cond_wait_until(&mix.cond, &mix.lock, deadline));
    }
    g_mutex_unlock(&mix.lock);
    /* these wait for a share: confined, then unconfined */
    iothread_run_sync(t, mix_submit_fn, &iot);
    mix_submit_fn(&second);

    g_mutex_lock(&mix.lock);
    mix.open = true;
    g_cond_broadcast(&mix.cond);
    g_mutex_unlock(&mix.lock);
    for (int i = 0; i < MIX_MAIN + MIX_MAIN2; i++) {
        MixReq *r = i < MIX_MAIN ? &first.reqs[i]
                                 : &second.reqs[i - MIX_MAIN];

        while (!r->done) {
            aio_poll(ctx, true);
        }
    }
    g_mutex_lock(&mix.lock);
    while (mix.iothread_done < MIX_IOT) {
        g_assert_true(g_cond_wait_until(&mix.cond, &mix.lock, deadline));
    }
    g_mutex_unlock(&mix.lock);
    thread_pool_test_hook = NULL;

    for (int i = 0; i < MIX_MAIN + MIX_IOT + MIX_MAIN2; i++) {
        g_assert_cmpint(reqs[i].mode, ==, reqs[i].expect);
    }
    iothread_run_sync(t, attach_fn, &(Attach) { blk, false });
    iothread_destroy(t);
    while (aio_poll(ctx, false)) {
    }
    blk_close(blk);
    unlink(path);
    g_free(reqs);
}

int main(int argc, char **argv)
{
    GError *err = NULL;
    int ret;

    g_test_init(&argc, &argv, NULL);
    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);
    tmpdir = g_dir_make_tmp("vb-sbx-XXXXXX", &err);
    g_assert_no_error(err);
    g_test_add_func("/block/sandbox/thread-pool-confinement",
                    test_pool_confinement);
    g_test_add_func("/block/sandbox/thread-pool-mixed-backend",
                    test_pool_mixed_backend);
    ret = g_test_run();
    rmdir(tmpdir);
    g_free(tmpdir);
    aio_context_free(ctx);
    return ret;
}
