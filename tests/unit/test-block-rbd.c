/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of the rbd driver (block/rbd.c) against the cluster
 * $CEPH_CONF names (every case is skipped without it), for what the
 * driver contract (test-block-driver.c) does not cover: what happens when
 * the image changes on the cluster under an open node, and the node's
 * threads and teardown.  The driver comes from the module in the build
 * tree, as vhost-blkd loads it; librbd is linked to change the images
 * from outside, as another client would.
 *
 *   resize-never-shrinks: the image grew on the cluster (the node has not
 *       seen it yet) and block_resize asks for less than that: refused,
 *       the image keeps its size
 *   short-read: the image shrank on the cluster under the node; a read
 *       across the new end completes with the part past it zeroed, not
 *       with what the buffer held
 *   cache-override: an image or pool configuration that turns librbd's
 *       cache on (conf_rbd_cache) is refused at open, read-only is not
 *   push-vs-free: a librbd thread has published a completion but not
 *       yet written the context's eventfd when the owner completes the
 *       request and the context is freed (object-del of its iothread):
 *       the eventfd stays the engine's until that write is done
 *   poll-close-attached: completion=poll, an iothread attached and never
 *       detached, the node closed from the main thread: the iothread no
 *       longer watches the node's eventfd with the freed node's state
 *   ctl-thread-unconfined: a control job (here the lock release when the
 *       device stops) queued from an iothread under the seccomp filter
 *       runs on the node's own, unconfined control thread
 *   throttle-resize: block_resize of a throttle node over an rbd node
 *       runs rbd_resize2() in a worker (blk_truncate_async()), as for the
 *       rbd node alone, not in the main loop
 *   close-async: blk_close_async() (blockdev-del) of an rbd node closes in
 *       a worker: it returns before the close is done, and with the
 *       cluster's only OSD stopped (SIGSTOP) the main loop keeps running
 *       while the close waits, which completes after SIGCONT with the
 *       lock released
 *
 * The driver's test hooks are found with dlsym() in the loaded module.
 */
#include "qemu/osdep.h"
#include <dlfcn.h>
#include <link.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include "qemu/aio.h"
#include "qemu/iothread.h"
#include "qemu/sandbox.h"
#include "qemu/throttle.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/rbd.h"
#include "../../util/aio-internal.h"

#define IMG_SIZE (8 * 1024 * 1024)

static AioContext *ctx;

typedef struct Fixture {
    rados_t cluster;
    rados_ioctx_t io;
    char *image;
    BlockRbdOptions ro;         /* what fixture_opts() opens */
} Fixture;

typedef struct Req {
    BlockAIOCB acb;
    int ret;
    bool done;
} Req;

static void req_cb(void *opaque, int ret)
{
    Req *r = opaque;

    r->ret = ret;
    r->done = true;
}

static int req_wait(Req *r)
{
    while (!r->done) {
        aio_poll(ctx, true);
    }
    return r->ret;
}

static int do_rw(BlockBackend *blk, bool write, int64_t off, void *buf,
                 size_t len)
{
    struct iovec iov[2] = {
        { buf, len / 2 }, { (char *)buf + len / 2, len - len / 2 },
    };
    Req r = { 0 };

    if (write) {
        blk_aio_pwritev(blk, &r.acb, off, iov, 2, 0, req_cb, &r);
    } else {
        blk_aio_preadv(blk, &r.acb, off, iov, 2, req_cb, &r);
    }
    return req_wait(&r);
}

/* A fresh image of @size (4 MiB objects); false (skipped) without a
 * cluster. */
static bool fixture_init(Fixture *f, const char *tag, uint64_t size)
{
    const char *conf = g_getenv("CEPH_CONF");
    int order = 22;

    memset(f, 0, sizeof(*f));
    if (!conf) {
        g_test_skip("CEPH_CONF is not set: start a cluster with "
                    "scripts/ceph-cluster.sh start and export CEPH_CONF");
        return false;
    }
    g_assert_cmpint(rados_create(&f->cluster, NULL), ==, 0);
    g_assert_cmpint(rados_conf_read_file(f->cluster, conf), ==, 0);
    g_assert_cmpint(rados_connect(f->cluster), ==, 0);
    g_assert_cmpint(rados_ioctx_create(f->cluster, "rbd", &f->io), ==, 0);
    f->image = g_strdup_printf("urbd-%s-%d", tag, (int)getpid());
    rbd_remove(f->io, f->image);
    g_assert_cmpint(rbd_create(f->io, f->image, size, &order), ==, 0);
    return true;
}

static void fixture_cleanup(Fixture *f)
{
    if (!f->image) {
        return;
    }
    g_assert_cmpint(rbd_remove(f->io, f->image), ==, 0);
    rados_ioctx_destroy(f->io);
    rados_shutdown(f->cluster);
    g_free(f->image);
}

static void fixture_opts(Fixture *f, BlockOptions *opts)
{
    blk_options_init(opts);
    blk_rbd_options(opts, &f->ro);
    f->ro.pool = "rbd";
    f->ro.image = f->image;
    f->ro.conf = g_getenv("CEPH_CONF");
}

static BlockBackend *fixture_open(Fixture *f)
{
    BlockOptions opts;
    GError *err = NULL;
    BlockBackend *blk;

    fixture_opts(f, &opts);
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    g_assert_nonnull(blk);
    return blk;
}

static void node_close(BlockBackend *blk)
{
    while (aio_poll(ctx, false)) {
    }
    blk_close(blk);
    while (aio_poll(ctx, false)) {
    }
}

/* The image's size on the cluster, read by another client. */
static uint64_t cluster_size(Fixture *f)
{
    rbd_image_t img;
    uint64_t size;

    g_assert_cmpint(rbd_open(f->io, f->image, &img, NULL), ==, 0);
    g_assert_cmpint(rbd_get_size(img, &size), ==, 0);
    rbd_close(img);
    return size;
}

static void cluster_resize(Fixture *f, uint64_t size)
{
    rbd_image_t img;

    g_assert_cmpint(rbd_open(f->io, f->image, &img, NULL), ==, 0);
    g_assert_cmpint(rbd_resize2(img, size, true, NULL, NULL), ==, 0);
    rbd_close(img);
}

/*
 * The image grows to 3 x IMG_SIZE on the cluster; the node still says
 * IMG_SIZE (its update watch's size reaches it through a bottom half of
 * this thread, which nothing runs here).  A block_resize to 2 x IMG_SIZE
 * passes the block layer's "never shrink" check against the node's size,
 * and must not shrink the image on the cluster.
 */
static void test_resize_never_shrinks(void)
{
    Fixture f;
    BlockBackend *blk;
    GError *err = NULL;

    if (!fixture_init(&f, "shrink", IMG_SIZE)) {
        return;
    }
    blk = fixture_open(&f);
    cluster_resize(&f, 3 * IMG_SIZE);
    g_assert_cmpuint(blk_getlength(blk), ==, IMG_SIZE);

    g_assert_false(blk_truncate(blk, 2 * IMG_SIZE, &err));
    g_assert_nonnull(err);
    g_test_message("%s", err->message);
    g_assert_nonnull(strstr(err->message, "never shrinks"));
    g_clear_error(&err);
    g_assert_cmpuint(cluster_size(&f), ==, 3 * IMG_SIZE);

    /* growing past the cluster's size still works */
    g_assert_true(blk_truncate(blk, 4 * IMG_SIZE, &err));
    g_assert_no_error(err);
    g_assert_cmpuint(cluster_size(&f), ==, 4 * IMG_SIZE);
    node_close(blk);
    fixture_cleanup(&f);
}

/*
 * The image shrinks by 32 KiB on the cluster under the node.  A 64 KiB
 * read of the last 64 KiB the node knows of reaches librbd (the node's
 * size is checked at submission and has not changed yet); librbd reads
 * the 32 KiB that remain and returns 32768.  The rest of the buffer must
 * come back zeroed, not as the 0xee it held.
 */
static void test_short_read(void)
{
    Fixture f;
    BlockBackend *blk;
    GError *err = NULL;
    g_autofree uint8_t *buf = g_malloc(65536);
    g_autofree uint8_t *back = g_malloc(65536);
    g_autofree uint8_t *zero = g_malloc0(65536);

    if (!fixture_init(&f, "short", IMG_SIZE)) {
        return;
    }
    blk = fixture_open(&f);
    g_assert_true(blk_attach_aio_context(blk, ctx, &err));
    g_assert_no_error(err);
    for (int i = 0; i < 65536; i++) {
        buf[i] = i % 251 + 1;
    }
    g_assert_cmpint(do_rw(blk, true, IMG_SIZE - 65536, buf, 65536), ==, 0);

    cluster_resize(&f, IMG_SIZE - 32768);
    g_assert_cmpuint(blk_getlength(blk), ==, IMG_SIZE);
    memset(back, 0xee, 65536);
    g_assert_cmpint(do_rw(blk, false, IMG_SIZE - 65536, back, 65536), ==, 0);
    g_assert_cmpmem(back, 32768, buf, 32768);
    g_assert_cmpmem(back + 32768, 32768, zero, 32768);

    blk_detach_aio_context(blk, ctx);
    node_close(blk);
    fixture_cleanup(&f);
}

/* An image (or pool) configuration with rbd_cache=true is refused for
 * writing: completed writes would not be durable.  Read-only opens. */
static void test_cache_override(void)
{
    Fixture f;
    BlockOptions opts;
    BlockBackend *blk;
    GError *err = NULL;
    rbd_image_t img;

    if (!fixture_init(&f, "cache", IMG_SIZE)) {
        return;
    }
    /* what `rbd config image set rbd/IMG rbd_cache true` stores */
    g_assert_cmpint(rbd_open(f.io, f.image, &img, NULL), ==, 0);
    g_assert_cmpint(rbd_metadata_set(img, "conf_rbd_cache", "true"), ==, 0);
    rbd_close(img);

    fixture_opts(&f, &opts);
    blk = blk_open(&opts, &err);
    g_assert_null(blk);
    g_assert_nonnull(err);
    g_test_message("%s", err->message);
    g_assert_nonnull(strstr(err->message, "sets rbd_cache=true"));
    g_assert_nonnull(strstr(err->message, "rbd config image remove"));
    g_clear_error(&err);

    opts.readonly = true;
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    g_assert_nonnull(blk);
    node_close(blk);

    /* the same from the pool's configuration */
    g_assert_cmpint(rbd_open(f.io, f.image, &img, NULL), ==, 0);
    g_assert_cmpint(rbd_metadata_remove(img, "conf_rbd_cache"), ==, 0);
    rbd_close(img);
    g_assert_cmpint(rbd_pool_metadata_set(f.io, "conf_rbd_cache", "true"),
                    ==, 0);
    opts.readonly = false;
    blk = blk_open(&opts, &err);
    g_assert_cmpint(rbd_pool_metadata_remove(f.io, "conf_rbd_cache"), ==, 0);
    g_assert_null(blk);
    g_assert_nonnull(err);
    g_test_message("%s", err->message);
    g_assert_nonnull(strstr(err->message, "pool 'rbd' sets rbd_cache=true"));
    g_clear_error(&err);

    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    node_close(blk);
    fixture_cleanup(&f);
}

static int find_module_cb(struct dl_phdr_info *info, size_t size,
                          void *data)
{
    if (g_str_has_suffix(info->dlpi_name, "/block-rbd.so")) {
        *(char **)data = g_strdup(info->dlpi_name);
        return 1;
    }
    return 0;
}

/* A symbol of the loaded rbd module (an open loaded it). */
static void *rbd_sym(const char *name)
{
    g_autofree char *path = NULL;
    void *h, *sym;

    dl_iterate_phdr(find_module_cb, &path);
    g_assert_nonnull(path);
    h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    g_assert_nonnull(h);
    sym = dlsym(h, name);
    g_assert_nonnull(sym);
    dlclose(h);                 /* the loader keeps its own reference */
    return sym;
}

/* A test's rendezvous with a hook that runs in a librbd or control
 * thread. */
static struct {
    GMutex lock;
    GCond cond;
    bool armed;                 /* the next hook call stops */
    bool arrived;               /* and has */
    bool go;                    /* it may go on */
    int mode;                   /* PR_GET_SECCOMP where it ran */
} gate;

static void gate_reset(void)
{
    g_mutex_lock(&gate.lock);
    gate.armed = true;
    gate.arrived = false;
    gate.go = false;
    gate.mode = -1;
    g_mutex_unlock(&gate.lock);
}

/* In the hook: report, and with @hold wait for the test's go. */
static void gate_arrive(bool hold)
{
    int mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);

    g_mutex_lock(&gate.lock);
    if (gate.armed) {
        gate.armed = false;
        gate.arrived = true;
        gate.mode = mode;
        g_cond_broadcast(&gate.cond);
        while (hold && !gate.go) {
            g_cond_wait(&gate.cond, &gate.lock);
        }
    }
    g_mutex_unlock(&gate.lock);
}

static void gate_wait(void)
{
    gint64 deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;

    g_mutex_lock(&gate.lock);
    while (!gate.arrived) {
        g_assert_true(g_cond_wait_until(&gate.cond, &gate.lock, deadline));
    }
    g_mutex_unlock(&gate.lock);
}

static void gate_release(void)
{
    g_mutex_lock(&gate.lock);
    gate.go = true;
    g_cond_broadcast(&gate.cond);
    g_mutex_unlock(&gate.lock);
}

static void push_hook(void)
{
    gate_arrive(true);
}

static void ctl_hook(int job)
{
    gate_arrive(false);
}

/*
 * The window of rbd_engine_push(): the request is on the context's
 * completion stack, the eventfd not yet written.  The owner (busy
 * polling, so it needs no wake-up) completes the request meanwhile, and
 * the context is freed.  Its engine's eventfd must still be the engine's
 * when the librbd thread writes it: with the old code it was closed, and
 * the next eventfd this process made got its number -- and the write.
 */
static void test_push_vs_free(void)
{
    Fixture f;
    BlockBackend *blk;
    GError *err = NULL;
    AioContext *c2;
    AioHandler *h;
    void (**hook)(void);
    g_autofree uint8_t *buf = g_malloc0(4096);
    struct iovec iov = { buf, 4096 };
    Req r = { 0 };
    gint64 deadline;
    int efd = -1, probes[4];
    bool reused = false;

    if (!fixture_init(&f, "push", IMG_SIZE)) {
        return;
    }
    blk = fixture_open(&f);
    hook = rbd_sym("rbd_test_push_hook");
    g_mutex_init(&gate.lock);
    g_cond_init(&gate.cond);

    c2 = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_set_poll_params(c2, 10 * 1000 * 1000, 0, 0);
    aio_context_acquire_thread(c2);
    g_assert_true(blk_attach_aio_context(blk, c2, &err));
    g_assert_no_error(err);

    gate_reset();
    *hook = push_hook;
    blk_aio_preadv(blk, &r.acb, 0, &iov, 1, req_cb, &r);
    gate_wait();
    *hook = NULL;

    /* busy polling takes the published request without the eventfd */
    deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;
    while (!r.done) {
        aio_poll(c2, false);
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
    }
    g_assert_cmpint(r.ret, ==, 0);
    QLIST_FOREACH(h, &c2->handlers, node) {
        if (!h->deleted && !h->internal) {
            g_assert_cmpint(efd, ==, -1);   /* the rbd engine's only */
            efd = h->fd;
        }
    }
    g_assert_cmpint(efd, >=, 0);
    blk_detach_aio_context(blk, c2);
    aio_context_free(c2);
    aio_context_acquire_thread(ctx);

    for (int i = 0; i < 4; i++) {
        probes[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        g_assert_cmpint(probes[i], >=, 0);
        reused |= probes[i] == efd;
    }
    gate_release();             /* the librbd thread writes now */
    g_assert_false(reused);
    for (int i = 0; i < 4; i++) {
        close(probes[i]);
    }
    node_close(blk);
    fixture_cleanup(&f);
}

typedef struct CtxJob {
    BlockBackend *blk;
    void *s;
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

/* Handlers of this thread's context whose argument is @j->s. */
static void count_fn(void *opaque)
{
    CtxJob *j = opaque;
    AioContext *c = qemu_get_current_aio_context();
    AioHandler *h;

    j->count = 0;
    QLIST_FOREACH(h, &c->handlers, node) {
        if (!h->deleted && h->opaque == j->s) {
            j->count++;
        }
    }
}

static void test_poll_close_attached(void)
{
    Fixture f;
    BlockOptions opts;
    BlockBackend *blk;
    GError *err = NULL;
    IOThread *t;
    CtxJob j = { 0 };

    if (!fixture_init(&f, "pollclose", IMG_SIZE)) {
        return;
    }
    fixture_opts(&f, &opts);
    f.ro.completion = BLOCK_RBD_COMPLETION_POLL;
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    t = iothread_create("rbd-poll", 0, &err);
    g_assert_no_error(err);
    j.blk = blk;
    j.s = blk->opaque;
    iothread_run_sync(t, attach_fn, &j);
    iothread_run_sync(t, count_fn, &j);
    g_assert_cmpint(j.count, ==, 1);    /* the node's eventfd */

    node_close(blk);            /* the iothread never detached */
    iothread_run_sync(t, count_fn, &j);
    g_assert_cmpint(j.count, ==, 0);
    iothread_destroy(t);
    fixture_cleanup(&f);
}

static void set_inactive_fn(void *opaque)
{
    blk_set_active(opaque, false, false);
}

static void confine_fn(void *opaque)
{
    GError **errp = opaque;

    g_assert_true(sandbox_apply_iothread_filter(errp));
}

static void test_ctl_thread_unconfined(void)
{
    Fixture f;
    BlockBackend *blk;
    GError *err = NULL;
    IOThread *t;
    void (**hook)(int);

    if (!sandbox_available()) {
        g_test_skip("built without libseccomp");
        return;
    }
    if (!fixture_init(&f, "ctl", IMG_SIZE)) {
        return;
    }
    blk = fixture_open(&f);
    hook = rbd_sym("rbd_test_ctl_hook");
    g_mutex_init(&gate.lock);
    g_cond_init(&gate.cond);
    t = iothread_create("rbd-confined", 0, &err);
    g_assert_no_error(err);
    iothread_run_sync(t, confine_fn, &err);
    g_assert_no_error(err);

    /* queued by a confined iothread (the device's last queue stopped) */
    gate_reset();
    *hook = ctl_hook;
    iothread_run_sync(t, set_inactive_fn, blk);
    gate_wait();
    g_assert_cmpint(gate.mode, ==, 0);

    /* and by the main thread */
    gate_reset();
    blk_set_active(blk, false, false);
    gate_wait();
    g_assert_cmpint(gate.mode, ==, 0);
    *hook = NULL;

    iothread_destroy(t);
    node_close(blk);
    fixture_cleanup(&f);
}

static void truncate_cb(void *opaque, GError *err)
{
    g_assert_no_error(err);
    *(bool *)opaque = true;
}

static void test_throttle_resize(void)
{
    Fixture f;
    BlockBackend *blk, *top;
    GError *err = NULL;
    ThrottleLimits t = { 0 };
    ThrottleGroup *tg;
    bool known, done = false;

    if (!fixture_init(&f, "thrresize", IMG_SIZE)) {
        return;
    }
    blk = fixture_open(&f);
    g_assert_true(throttle_limits_set_key(&t, "iops-total", 100, &known,
                                          &err));
    tg = throttle_group_new("tg0", &t, &err);
    g_assert_no_error(err);
    top = blk_throttle_new(blk, tg, &err);
    g_assert_no_error(err);

    blk_truncate_async(top, 2 * IMG_SIZE, truncate_cb, &done);
    g_assert_false(done);       /* in a worker: answered later */
    while (!done) {
        aio_poll(ctx, true);
    }
    g_assert_cmpuint(blk_getlength(top), ==, 2 * IMG_SIZE);
    g_assert_cmpuint(blk_getlength(blk), ==, 2 * IMG_SIZE);
    g_assert_cmpuint(cluster_size(&f), ==, 2 * IMG_SIZE);
    node_close(top);
    throttle_group_unref(tg);
    fixture_cleanup(&f);
}

static void close_cb(void *opaque)
{
    *(bool *)opaque = true;
}

/* The pid of the cluster's only OSD (scripts/ceph-cluster.sh keeps it
 * in run/ beside the ceph.conf). */
static pid_t osd_pid(void)
{
    g_autofree char *dir = g_path_get_dirname(g_getenv("CEPH_CONF"));
    g_autofree char *path = g_build_filename(dir, "run", "osd.0.pid", NULL);
    g_autofree char *text = NULL;
    pid_t pid;

    g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
    pid = atoi(text);
    g_assert_cmpint(pid, >, 1);
    return pid;
}

/* The lock's owners of the image (0 when free). */
static size_t lock_owners(Fixture *f)
{
    rbd_image_t img;
    char *owners[4];
    size_t n = G_N_ELEMENTS(owners);
    rbd_lock_mode_t mode;
    int r;

    g_assert_cmpint(rbd_open(f->io, f->image, &img, NULL), ==, 0);
    r = rbd_lock_get_owners(img, &mode, owners, &n);
    rbd_close(img);
    if (r == -ENOENT) {
        return 0;
    }
    g_assert_cmpint(r, ==, 0);
    rbd_lock_get_owners_cleanup(owners, n);
    return n;
}

static void test_close_async(void)
{
    Fixture f;
    BlockBackend *blk;
    GError *err = NULL;
    g_autofree uint8_t *buf = g_malloc0(4096);
    bool done = false, done_paused;
    int iterations = 0;
    pid_t osd;

    if (!fixture_init(&f, "closeasync", IMG_SIZE)) {
        return;
    }
    /* the close is not the caller's: it returns first */
    blk = fixture_open(&f);
    g_assert_true(blk_attach_aio_context(blk, ctx, &err));
    g_assert_no_error(err);
    g_assert_cmpint(do_rw(blk, true, 0, buf, 4096), ==, 0);
    blk_detach_aio_context(blk, ctx);
    blk_close_async(blk, close_cb, &done);
    g_assert_false(done);
    while (!done) {
        aio_poll(ctx, true);
    }
    g_assert_cmpuint(lock_owners(&f), ==, 0);

    /* a cluster that does not answer: the main loop goes on meanwhile */
    done = false;
    blk = fixture_open(&f);
    g_assert_true(blk_attach_aio_context(blk, ctx, &err));
    g_assert_no_error(err);
    g_assert_cmpint(do_rw(blk, true, 0, buf, 4096), ==, 0);
    blk_detach_aio_context(blk, ctx);
    osd = osd_pid();
    g_assert_cmpint(kill(osd, SIGSTOP), ==, 0);
    blk_close_async(blk, close_cb, &done);
    /* a bottom half of the main loop, as a QMP command's would be */
    while (iterations < 100 && !done) {
        aio_poll(ctx, false);
        iterations++;
    }
    done_paused = done;
    g_assert_cmpint(kill(osd, SIGCONT), ==, 0);
    g_assert_false(done_paused);    /* still waiting for the OSD */
    while (!done) {
        aio_poll(ctx, true);
    }
    g_assert_cmpuint(lock_owners(&f), ==, 0);
    fixture_cleanup(&f);
}

int main(int argc, char **argv)
{
    GError *err = NULL;
    int ret;

    g_test_init(&argc, &argv, NULL);
    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);

    g_test_add_func("/block/rbd/resize-never-shrinks",
                    test_resize_never_shrinks);
    g_test_add_func("/block/rbd/short-read", test_short_read);
    g_test_add_func("/block/rbd/cache-override", test_cache_override);
    g_test_add_func("/block/rbd/push-vs-free", test_push_vs_free);
    g_test_add_func("/block/rbd/poll-close-attached",
                    test_poll_close_attached);
    g_test_add_func("/block/rbd/ctl-thread-unconfined",
                    test_ctl_thread_unconfined);
    g_test_add_func("/block/rbd/throttle-resize", test_throttle_resize);
    g_test_add_func("/block/rbd/close-async", test_close_async);
    ret = g_test_run();
    while (aio_poll(ctx, false)) {
    }
    aio_context_free(ctx);
    return ret;
}
