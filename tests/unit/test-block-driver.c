/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of the block-driver contract (include/block/block_int.h):
 * the same cases run on every driver -- file (a file under /var/tmp),
 * null, and rbd on the cluster $CEPH_CONF names (skipped without it) --
 * and through the blkdebug filter over each, which must not care which
 * driver is below it.  Driven step by step with aio_poll().
 */
#include "qemu/osdep.h"
#include <rados/librados.h>
#include <rbd/librbd.h>
#include "qemu/aio.h"
#include "block/block.h"
#include "block/block_int.h"

#define IMG_SIZE (8 * 1024 * 1024)

static AioContext *ctx;
static char *tmpdir;

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

/* Wait for @r, which must not have completed inside its submission. */
static int req_wait(Req *r)
{
    g_assert_false(r->done);
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

static int do_other(BlockBackend *blk, int type, int64_t off, uint64_t len,
                    int flags)
{
    Req r = { 0 };

    switch (type) {
    case BLK_REQ_FLUSH:
        blk_aio_flush(blk, &r.acb, req_cb, &r);
        break;
    case BLK_REQ_DISCARD:
        blk_aio_pdiscard(blk, &r.acb, off, len, req_cb, &r);
        break;
    default:
        blk_aio_pwrite_zeroes(blk, &r.acb, off, len, flags, req_cb, &r);
        break;
    }
    return req_wait(&r);
}

/* What a case needs to open a node of one driver. */
typedef struct DriverCase {
    const char *name;           /* "file", "null", "rbd" */
    bool inject;                /* under a blkdebug filter */
    bool poll;                  /* rbd: completion=poll */
} DriverCase;

static char *rbd_image;

/* A fresh image (4 MiB objects) on the cluster of $CEPH_CONF for each
 * case; false without a cluster. */
static bool rbd_available(void)
{
    const char *conf = g_getenv("CEPH_CONF");
    rados_t cluster;
    rados_ioctx_t io;
    int order = 22;

    if (!conf) {
        return false;
    }
    if (!rbd_image) {
        rbd_image = g_strdup_printf("unit-%d", (int)getpid());
    }
    g_assert_cmpint(rados_create(&cluster, NULL), ==, 0);
    g_assert_cmpint(rados_conf_read_file(cluster, conf), ==, 0);
    g_assert_cmpint(rados_connect(cluster), ==, 0);
    g_assert_cmpint(rados_ioctx_create(cluster, "rbd", &io), ==, 0);
    rbd_remove(io, rbd_image);
    g_assert_cmpint(rbd_create(io, rbd_image, IMG_SIZE, &order), ==, 0);
    rados_ioctx_destroy(io);
    rados_shutdown(cluster);
    return true;
}

static void rbd_cleanup(void)
{
    rados_t cluster;
    rados_ioctx_t io;

    if (!rbd_image) {
        return;
    }
    if (rados_create(&cluster, NULL) == 0 &&
        rados_conf_read_file(cluster, g_getenv("CEPH_CONF")) == 0 &&
        rados_connect(cluster) == 0 &&
        rados_ioctx_create(cluster, "rbd", &io) == 0) {
        rbd_remove(io, rbd_image);
        rados_ioctx_destroy(io);
    }
    rados_shutdown(cluster);
}

/* Open a node for @dc (NULL when the driver is unavailable: skipped). */
static BlockBackend *open_case(const DriverCase *dc, bool readonly,
                               uint64_t size, char **path)
{
    BlockOptions opts;
    GError *err = NULL;
    BlockBackend *blk;
    int fd;

    blk_options_init(&opts);
    opts.driver = dc->name;
    opts.readonly = readonly;
    *path = NULL;
    if (!strcmp(dc->name, "file")) {
        *path = g_build_filename(tmpdir, "img", NULL);
        fd = open(*path, O_CREAT | O_TRUNC | O_RDWR, 0600);
        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(ftruncate(fd, size), ==, 0);
        close(fd);
        opts.filename = *path;
        opts.cache_direct = false;
    } else if (!strcmp(dc->name, "null")) {
        opts.size = size;
        opts.null_read_zeroes = true;
    } else {
        if (!rbd_available()) {
            g_test_skip("CEPH_CONF is not set: no cluster for driver=rbd");
            return NULL;
        }
        opts.rbd.pool = "rbd";
        opts.rbd.image = rbd_image;
        opts.rbd.conf = g_getenv("CEPH_CONF");
        opts.rbd.completion = dc->poll ? BLOCK_RBD_COMPLETION_POLL :
                                         BLOCK_RBD_COMPLETION_DEFAULT;
    }
    if (dc->inject) {
        /* the 2nd write fails, once */
        opts.inject.ops = BLOCK_INJECT_WRITE;
        opts.inject.after = 1;
        opts.inject.count = 1;
    }
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    g_assert_nonnull(blk);
    return blk;
}

static void close_case(BlockBackend *blk, char *path)
{
    /* Run what the last completions left scheduled. */
    while (aio_poll(ctx, false)) {
    }
    blk_close(blk);
    if (path) {
        unlink(path);
        g_free(path);
    }
}

static uint64_t notified_size;

static void size_notifier(void *opaque, uint64_t size)
{
    notified_size = size;
}

/* The contract, the same for every driver. */
static void test_contract(gconstpointer data)
{
    const DriverCase *dc = data;
    bool stores = strcmp(dc->name, "null") != 0;
    g_autofree uint8_t *buf = g_malloc(65536);
    g_autofree uint8_t *back = g_malloc(65536);
    g_autofree uint8_t *zero = g_malloc0(65536);
    GError *err = NULL;
    char *path;
    BlockBackend *blk = open_case(dc, false, IMG_SIZE, &path);

    if (!blk) {
        return;
    }
    /* Which driver it is, whatever filter is above it. */
    g_assert_cmpstr(blk_get_driver_name(blk), ==, dc->name);
    g_assert_true(blk_attach_aio_context(blk, ctx, &err));
    g_assert_no_error(err);
    g_assert_cmpuint(blk_getlength(blk), ==, IMG_SIZE);
    g_assert_true(blk_can_discard(blk));
    g_assert_true(blk_can_write_zeroes(blk));
    g_assert_cmpuint(blk_get_optimal_io_size(blk), ==,
                     !strcmp(dc->name, "rbd") ? 4 << 20 : 0);

    /* write, read back (two segments each); null reads zeroes */
    for (int i = 0; i < 65536; i++) {
        buf[i] = i * 7 + 1;
    }
    g_assert_cmpint(do_rw(blk, true, 65536, buf, 65536), ==, 0);
    if (dc->inject) {
        /* blkdebug: the 2nd write fails, the 3rd goes through again */
        g_assert_cmpint(do_rw(blk, true, 65536, buf, 65536), ==, -EIO);
        g_assert_cmpint(do_rw(blk, true, 65536, buf, 65536), ==, 0);
        g_assert_cmpuint(blk_inject_get_hits(blk), ==, 1);
    }
    memset(back, 0xee, 65536);
    g_assert_cmpint(do_rw(blk, false, 65536, back, 65536), ==, 0);
    g_assert_cmpmem(back, 65536, stores ? buf : zero, 65536);
    g_assert_cmpint(do_other(blk, BLK_REQ_FLUSH, 0, 0, 0), ==, 0);

    /* write-zeroes, thick and may-unmap: zeroes read back */
    for (int unmap = 0; unmap <= 1; unmap++) {
        g_assert_cmpint(do_rw(blk, true, 131072, buf, 65536), ==, 0);
        g_assert_cmpint(do_other(blk, BLK_REQ_WRITE_ZEROES, 131072 + 4096,
                                 8192, unmap ? BDRV_REQ_MAY_UNMAP : 0),
                        ==, 0);
        g_assert_cmpint(do_rw(blk, false, 131072, back, 65536), ==, 0);
        if (stores) {
            g_assert_cmpmem(back, 4096, buf, 4096);
            g_assert_cmpmem(back + 4096, 8192, zero, 8192);
            g_assert_cmpmem(back + 12288, 65536 - 12288, buf + 12288,
                            65536 - 12288);
        }
    }
    g_assert_cmpint(do_other(blk, BLK_REQ_DISCARD, 1 << 20, 1 << 20, 0), ==,
                    0);

    /* the shared checks: out of bounds, for every request type */
    g_assert_cmpint(do_rw(blk, false, IMG_SIZE - 4096, back, 8192), ==,
                    -EINVAL);
    g_assert_cmpint(do_other(blk, BLK_REQ_DISCARD, IMG_SIZE, 512, 0), ==,
                    -EINVAL);

    /* grow: the size and the notifier path (a driver-side resize) */
    g_assert_true(blk_truncate(blk, IMG_SIZE * 2, &err));
    g_assert_no_error(err);
    g_assert_cmpuint(blk_getlength(blk), ==, IMG_SIZE * 2);
    g_assert_cmpint(do_rw(blk, true, IMG_SIZE * 2 - 65536, buf, 65536), ==,
                    0);
    blk_set_size_notifier(blk, size_notifier, NULL);
    notified_size = 0;
    {
        BlockBackend *bottom = blk;

        while (bottom->child) {
            bottom = bottom->child;
        }
        blk_size_changed(bottom, IMG_SIZE * 3);
    }
    g_assert_cmpuint(notified_size, ==, IMG_SIZE * 3);
    g_assert_cmpuint(blk_getlength(blk), ==, IMG_SIZE * 3);
    blk_set_size_notifier(blk, NULL, NULL);
    blk_set_active(blk, true, false);
    blk_set_active(blk, false, false);
    blk_detach_aio_context(blk, ctx);
    close_case(blk, path);
}

/* A read-only node refuses every write-type request, reads work. */
static void test_readonly(gconstpointer data)
{
    const DriverCase *dc = data;
    g_autofree uint8_t *buf = g_malloc0(4096);
    GError *err = NULL;
    char *path;
    BlockBackend *blk = open_case(dc, true, IMG_SIZE, &path);

    if (!blk) {
        return;
    }
    g_assert_true(blk_is_read_only(blk));
    g_assert_false(blk_can_discard(blk));
    g_assert_false(blk_can_write_zeroes(blk));
    g_assert_cmpint(do_rw(blk, false, 0, buf, 4096), ==, 0);
    g_assert_cmpint(do_rw(blk, true, 0, buf, 4096), ==, -EROFS);
    g_assert_cmpint(do_other(blk, BLK_REQ_WRITE_ZEROES, 0, 4096, 0), ==,
                    -EROFS);
    g_assert_cmpint(do_other(blk, BLK_REQ_DISCARD, 0, 4096, 0), ==, -EROFS);
    g_assert_cmpint(do_other(blk, BLK_REQ_FLUSH, 0, 0, 0), ==, 0);
    if (!strcmp(dc->name, "file") || !strcmp(dc->name, "rbd")) {
        g_assert_false(blk_truncate(blk, blk_getlength(blk) * 2, &err));
        g_assert_nonnull(err);
        g_clear_error(&err);
    }
    close_case(blk, path);
}

/* blkdebug's delay over each driver: the request sleeps in a worker, then
 * goes on to the driver below and completes with its result. */
static void test_delay(gconstpointer data)
{
    const DriverCase *dc = data;
    BlockOptions opts;
    GError *err = NULL;
    g_autofree uint8_t *buf = g_malloc(4096);
    char *path;
    BlockBackend *plain = open_case(&(DriverCase) { dc->name, false }, false,
                                    IMG_SIZE, &path);
    BlockBackend *blk;

    if (!plain) {
        return;
    }
    memset(buf, 0x5a, 4096);
    g_assert_cmpint(do_rw(plain, true, 8192, buf, 4096), ==, 0);
    close_case(plain, NULL);

    blk_options_init(&opts);
    opts.driver = dc->name;
    opts.filename = path;
    opts.cache_direct = false;
    opts.size = IMG_SIZE;
    opts.rbd.pool = "rbd";
    opts.rbd.image = rbd_image;
    opts.rbd.conf = g_getenv("CEPH_CONF");
    opts.inject.delay_ms = 20;
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    memset(buf, 0, 4096);
    g_assert_cmpint(do_rw(blk, false, 8192, buf, 4096), ==, 0);
    if (strcmp(dc->name, "null")) {
        for (int i = 0; i < 4096; i++) {
            g_assert_cmpuint(buf[i], ==, 0x5a);
        }
    }
    g_assert_cmpuint(blk_inject_get_hits(blk), ==, 1);
    close_case(blk, path);
}

/* An unknown driver, and driver=rbd without an image, say what to do. */
static void test_open_errors(void)
{
    BlockOptions opts;
    GError *err = NULL;

    blk_options_init(&opts);
    opts.driver = "qcow2";
    g_assert_null(blk_open(&opts, &err));
    g_assert_nonnull(strstr(err->message, "unknown block driver 'qcow2'"));
    g_clear_error(&err);
    opts.driver = "rbd";
    g_assert_null(blk_open(&opts, &err));
    g_assert_nonnull(strstr(err->message, "needs pool= and image="));
    g_clear_error(&err);
}

int main(int argc, char **argv)
{
    static const DriverCase cases[] = {
        { "file", false }, { "null", false }, { "rbd", false },
        { "file", true }, { "null", true }, { "rbd", true },
        { "rbd", false, true },
    };
    GError *err = NULL;
    int ret;

    g_test_init(&argc, &argv, NULL);
    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);
    tmpdir = g_dir_make_tmp("vb-drv-XXXXXX", &err);
    g_assert_no_error(err);

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        const char *poll = cases[i].poll ? "-poll" : "";
        g_autofree char *c = g_strdup_printf("/block/driver/%s%s%s/contract",
                                             cases[i].inject ? "blkdebug-" :
                                             "", cases[i].name, poll);
        g_autofree char *r = g_strdup_printf("/block/driver/%s%s%s/read-only",
                                             cases[i].inject ? "blkdebug-" :
                                             "", cases[i].name, poll);

        g_test_add_data_func(c, &cases[i], test_contract);
        g_test_add_data_func(r, &cases[i], test_readonly);
        if (!cases[i].inject) {
            g_autofree char *d = g_strdup_printf(
                "/block/driver/blkdebug-delay-%s%s", cases[i].name, poll);

            g_test_add_data_func(d, &cases[i], test_delay);
        }
    }
    g_test_add_func("/block/driver/open-errors", test_open_errors);
    ret = g_test_run();
    rbd_cleanup();
    while (aio_poll(ctx, false)) {
    }
    aio_context_free(ctx);
    rmdir(tmpdir);
    g_free(tmpdir);
    return ret;
}
