/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of the block-driver contract (include/block/block_int.h):
 * the same cases run on every driver -- file (a file under /var/tmp),
 * null, and rbd on the cluster $CEPH_CONF names (skipped without it) --
 * and through the blkdebug filter over each, which must not care which
 * driver is below it; then the graph: a format driver of the test's own
 * (registered at run time) over a child node, the pool of child-request
 * control blocks, and the permission checks.  Driven step by step with
 * aio_poll().
 */
#include "qemu/osdep.h"
#include <rados/librados.h>
#include <rbd/librbd.h>
#include "qemu/aio.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/file.h"
#include "block/null.h"
#include "block/rbd.h"
#include "qemu/throttle.h"

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
    bool throttle;              /* under a throttle filter, no limit */
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
    BlockFileOptions fo;
    BlockNullOptions no;
    BlockRbdOptions ro;
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
        blk_file_options(&opts, &fo, *path);
        opts.cache_direct = false;
    } else if (!strcmp(dc->name, "null")) {
        blk_null_options(&opts, &no, size, true);
    } else {
        if (!rbd_available()) {
            g_test_skip("CEPH_CONF is not set: no cluster for driver=rbd");
            return NULL;
        }
        blk_rbd_options(&opts, &ro);
        ro.pool = "rbd";
        ro.image = rbd_image;
        ro.conf = g_getenv("CEPH_CONF");
        ro.completion = dc->poll ? BLOCK_RBD_COMPLETION_POLL :
                                   BLOCK_RBD_COMPLETION_DEFAULT;
    }
    if (dc->throttle) {
        ThrottleLimits none = { 0 };

        opts.throttle_group = throttle_group_new("tg0", &none, &err);
        g_assert_no_error(err);
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
    if (opts.throttle_group) {
        /* the filter holds its own reference */
        throttle_group_unref(opts.throttle_group);
    }
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

typedef struct StatusReq {
    Req r;
    BlockStatus st;
} StatusReq;

static int do_status(BlockBackend *blk, int64_t off, uint64_t len,
                     BlockStatus *st)
{
    Req r = { 0 };

    blk_aio_block_status(blk, &r.acb, off, len, st, req_cb, &r);
    return req_wait(&r);
}

/*
 * Block status: a file tells holes (zeroes) from data, null with
 * read-zeroes=on says zeroes, rbd (which cannot tell here) says data;
 * every answer is "allocated here" (no backing) and covers a non-empty
 * prefix of the range; a filter gives its child's answer.
 */
static void test_block_status(gconstpointer data)
{
    const DriverCase *dc = data;
    g_autofree uint8_t *buf = g_malloc(65536);
    BlockStatus st;
    char *path;
    BlockBackend *blk = open_case(dc, false, IMG_SIZE, &path);

    if (!blk) {
        return;
    }
    memset(buf, 0x5a, 65536);
    g_assert_cmpint(do_rw(blk, true, 1 << 20, buf, 65536), ==, 0);
    g_assert_cmpint(do_other(blk, BLK_REQ_FLUSH, 0, 0, 0), ==, 0);

    g_assert_cmpint(do_status(blk, 0, IMG_SIZE, &st), ==, 0);
    g_assert_cmpuint(st.pnum, >=, 1);
    g_assert_cmpuint(st.pnum, <=, IMG_SIZE);
    g_assert_true(st.flags & BDRV_BLOCK_ALLOCATED);
    if (!strcmp(dc->name, "file")) {
        /* a sparse file: a hole up to the data written at 1 MiB */
        g_assert_cmpuint(st.flags, ==, BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED);
        g_assert_cmpuint(st.pnum, ==, 1 << 20);
        g_assert_cmpint(do_status(blk, 1 << 20, IMG_SIZE - (1 << 20), &st),
                        ==, 0);
        g_assert_cmpuint(st.flags, ==, BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED);
        g_assert_cmpuint(st.pnum, >=, 65536);
        g_assert_cmpuint(st.pnum, <, IMG_SIZE - (1 << 20));
        /* the last hole runs to the end of the file */
        g_assert_cmpint(do_status(blk, IMG_SIZE - 4096, 4096, &st), ==, 0);
        g_assert_cmpuint(st.flags, ==, BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED);
        g_assert_cmpuint(st.pnum, ==, 4096);
    } else if (!strcmp(dc->name, "null")) {
        g_assert_cmpuint(st.flags, ==, BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED);
        g_assert_cmpuint(st.pnum, ==, IMG_SIZE);
    } else {
        g_assert_cmpuint(st.flags, ==, BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED);
        g_assert_cmpuint(st.pnum, ==, IMG_SIZE);
    }
    /* the shared checks: an empty or out-of-bounds range */
    g_assert_cmpint(do_status(blk, 0, 0, &st), ==, -EINVAL);
    g_assert_cmpint(do_status(blk, IMG_SIZE - 512, 1024, &st), ==, -EINVAL);
    g_assert_cmpint(do_status(blk, -512, 512, &st), ==, -EINVAL);
    if (dc->inject || dc->throttle) {
        /* the filter is a parent of its node, through a "file" edge */
        BdrvChild *c = bdrv_find_child(blk, "file");

        g_assert_nonnull(c);
        g_assert_true(c->bs == blk->child);
        g_assert_true(QLIST_FIRST(&blk->child->parents) == c);
    }
    close_case(blk, path);
}

/* ---- a format of the test's own: "halves" ------------------------------
 *
 * It serves its file child's bytes, but does every read and write as two
 * child requests (one per half of the range), each with a control block
 * from the pool, and completes the parent when both have: the shape of a
 * format's request that spans two clusters.  Its file child does not
 * share writes or resizes, as a real format's must not.
 */
typedef struct HalvesReq {
    int pending;
    int ret;
    struct iovec iov[2][8];
} HalvesReq;

static void halves_child_cb(void *opaque, int ret)
{
    BlockChildReq *cr = opaque;
    BlockAIOCB *parent = cr->parent;
    HalvesReq *h = (HalvesReq *)(uintptr_t)cr->priv[0];

    if (ret < 0 && h->ret == 0) {
        h->ret = ret;
    }
    blk_child_req_put(qemu_get_current_aio_context(), cr);
    if (--h->pending == 0) {
        int r = h->ret;

        g_free(h);
        parent->cb(parent->opaque, r);
    }
}

/* Split @acb's iovec at @at bytes into h->iov[0] and h->iov[1]. */
static void halves_split(BlockAIOCB *acb, HalvesReq *h, size_t at, int n[2])
{
    size_t done = 0;

    n[0] = n[1] = 0;
    for (int i = 0; i < acb->niov; i++) {
        struct iovec v = acb->iov[i];

        if (done < at) {
            size_t take = MIN(v.iov_len, at - done);

            h->iov[0][n[0]++] = (struct iovec){ v.iov_base, take };
            v.iov_base = (char *)v.iov_base + take;
            v.iov_len -= take;
            done += take;
        }
        if (v.iov_len) {
            h->iov[1][n[1]++] = v;
            done += v.iov_len;
        }
    }
}

static void halves_rw(BlockBackend *bs, AioContext *ctx, BlockAIOCB *acb)
{
    BdrvChild *file = bdrv_find_child(bs, "file");
    /* The test's own driver may allocate; a real one embeds this. */
    HalvesReq *h = g_new0(HalvesReq, 1);
    size_t half = (acb->bytes / 2) & ~(size_t)511;
    int n[2];

    g_assert_cmpint(acb->niov, <=, 4);
    halves_split(acb, h, half, n);
    h->pending = 2;
    for (int i = 0; i < 2; i++) {
        BlockChildReq *cr = blk_child_req_get(ctx);
        int64_t off = acb->offset + (i ? half : 0);

        cr->parent = acb;
        cr->priv[0] = (uintptr_t)h;
        if (acb->type == BLK_REQ_READ) {
            blk_aio_preadv(file->bs, &cr->acb, off, h->iov[i], n[i],
                           halves_child_cb, cr);
        } else {
            blk_aio_pwritev(file->bs, &cr->acb, off, h->iov[i], n[i],
                            acb->flags, halves_child_cb, cr);
        }
    }
}

static void halves_forward_cb(void *opaque, int ret)
{
    BlockChildReq *cr = opaque;
    BlockAIOCB *parent = cr->parent;

    blk_child_req_put(qemu_get_current_aio_context(), cr);
    parent->cb(parent->opaque, ret);
}

/* Flush, discard, write-zeroes and block status: one child request. */
static void halves_other(BlockBackend *bs, AioContext *ctx, BlockAIOCB *acb)
{
    BlockBackend *file = bdrv_find_child(bs, "file")->bs;
    BlockChildReq *cr = blk_child_req_get(ctx);

    cr->parent = acb;
    switch (acb->type) {
    case BLK_REQ_FLUSH:
        blk_aio_flush(file, &cr->acb, halves_forward_cb, cr);
        break;
    case BLK_REQ_DISCARD:
        blk_aio_pdiscard(file, &cr->acb, acb->offset, acb->bytes,
                         halves_forward_cb, cr);
        break;
    case BLK_REQ_WRITE_ZEROES:
        blk_aio_pwrite_zeroes(file, &cr->acb, acb->offset, acb->bytes,
                              acb->flags, halves_forward_cb, cr);
        break;
    default:
        blk_aio_block_status(file, &cr->acb, acb->offset, acb->bytes,
                             acb->status, halves_forward_cb, cr);
        break;
    }
}

static bool halves_open(BlockBackend *bs, const BlockOptions *opts,
                        GError **errp)
{
    BlockBackend *file = opts->file;

    if (!file) {
        g_set_error(errp, VB_ERROR, 0, "halves needs a file child");
        return false;
    }
    if (!bdrv_attach_child(bs, file, "file",
                           BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE |
                           BLK_PERM_RESIZE,
                           BLK_PERM_CONSISTENT_READ |
                           BLK_PERM_WRITE_UNCHANGED, errp)) {
        return false;
    }
    bs->size = blk_getlength(file);
    bs->bl = file->bl;
    bs->filename = g_strdup("halves");
    return true;
}

static void halves_close(BlockBackend *bs)
{
}

static void halves_get_info(BlockBackend *bs, BlockDriverInfo *bdi)
{
    bdi->cluster_size = 4096;
}

static const BlockDriver bdrv_halves = {
    .format_name = "halves",
    .bdrv_open = halves_open,
    .bdrv_close = halves_close,
    .bdrv_get_info = halves_get_info,
    .bdrv_aio_preadv = halves_rw,
    .bdrv_aio_pwritev = halves_rw,
    .bdrv_aio_flush = halves_other,
    .bdrv_aio_pdiscard = halves_other,
    .bdrv_aio_pwrite_zeroes = halves_other,
    .bdrv_aio_block_status = halves_other,
};

static BlockBackend *open_halves(BlockBackend *file, GError **errp)
{
    BlockOptions opts;

    blk_options_init(&opts);
    opts.driver = "halves";
    opts.file = file;
    return blk_open(&opts, errp);
}

/*
 * A format over a file node: its requests become child requests that
 * complete it; after the first ones the pool of control blocks does not
 * grow; what it writes is what the file node reads.
 */
static void test_graph_format(void)
{
    static const DriverCase file_case = { "file", false };
    g_autofree uint8_t *buf = g_malloc(65536);
    g_autofree uint8_t *back = g_malloc(65536);
    GError *err = NULL;
    BlockDriverInfo bdi;
    BlockStatus st;
    char *path;
    BlockBackend *file = open_case(&file_case, false, IMG_SIZE, &path);
    BlockBackend *fmt;
    unsigned int pool;

    blk_set_node_name(file, "f0");
    fmt = open_halves(file, &err);
    g_assert_no_error(err);
    blk_set_node_name(fmt, "h0");
    g_assert_cmpstr(blk_get_driver_name(fmt), ==, "halves");
    blk_get_info(fmt, &bdi);
    g_assert_cmpuint(bdi.cluster_size, ==, 4096);
    blk_get_info(file, &bdi);
    g_assert_true(bdi.has_aio_mode);
    g_assert_false(bdi.is_block_device);
    g_assert_true(bdrv_find_child(fmt, "file")->bs == file);
    g_assert_null(bdrv_find_child(fmt, "backing"));
    g_assert_true(QLIST_FIRST(&file->parents)->parent == fmt);

    for (int i = 0; i < 65536; i++) {
        buf[i] = i * 13 + 5;
    }
    g_assert_cmpint(do_rw(fmt, true, 4096, buf, 65536), ==, 0);
    pool = blk_child_req_allocated(ctx);
    g_assert_cmpuint(pool, >, 0);
    for (int round = 0; round < 200; round++) {
        memset(back, 0, 65536);
        g_assert_cmpint(do_rw(fmt, round & 1, 4096, round & 1 ? buf : back,
                              65536), ==, 0);
        if (!(round & 1)) {
            g_assert_cmpmem(back, 65536, buf, 65536);
        }
    }
    g_assert_cmpuint(blk_child_req_allocated(ctx), ==, pool);
    /* the file node has the bytes */
    memset(back, 0, 65536);
    g_assert_cmpint(do_rw(file, false, 4096, back, 65536), ==, 0);
    g_assert_cmpmem(back, 65536, buf, 65536);
    g_assert_cmpint(do_other(fmt, BLK_REQ_FLUSH, 0, 0, 0), ==, 0);
    g_assert_cmpint(do_status(fmt, 0, 4096, &st), ==, 0);
    g_assert_cmpuint(st.flags, ==, BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED);
    /* a child request's error reaches the parent */
    g_assert_cmpint(do_rw(fmt, false, IMG_SIZE - 4096, back, 8192), ==,
                    -EINVAL);

    while (aio_poll(ctx, false)) {
    }
    blk_close(fmt);
    /* the file node was the caller's: still open, no parent left */
    g_assert_true(QLIST_EMPTY(&file->parents));
    close_case(file, path);
}

/*
 * Permissions: a second writer on a node whose format parent does not
 * share writes is refused, naming the holder, in either order; raw nodes
 * keep sharing writes between users; a read-only node refuses writers.
 */
static void test_graph_permissions(void)
{
    static const DriverCase null_case = { "null", false };
    GError *err = NULL;
    char *path;
    BlockBackend *file = open_case(&null_case, false, IMG_SIZE, &path);
    BlockBackend *fmt, *ro;
    BdrvChild *u1, *u2;
    BlockOptions opts;
    BlockNullOptions no;

    blk_set_node_name(file, "f0");
    /* raw: two exports writing the same node, as QSD lets them */
    u1 = blk_attach_user(file, "export 'vu0'", BLK_PERM_CONSISTENT_READ |
                         BLK_PERM_WRITE, BLK_PERM_ALL, &err);
    g_assert_no_error(err);
    u2 = blk_attach_user(file, "export 'vu1'", BLK_PERM_CONSISTENT_READ |
                         BLK_PERM_WRITE, BLK_PERM_ALL, &err);
    g_assert_no_error(err);
    /* a format cannot take a node others write */
    g_assert_null(open_halves(file, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "'f0' is in use by export 'vu"));
    g_assert_nonnull(strstr(err->message, "write"));
    g_clear_error(&err);
    blk_detach_user(u1);
    blk_detach_user(u2);

    /* ... and a writer cannot join a format's file child */
    fmt = open_halves(file, &err);
    g_assert_no_error(err);
    blk_set_node_name(fmt, "h0");
    g_assert_null(blk_attach_user(file, "export 'vu2'",
                                  BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE,
                                  BLK_PERM_ALL, &err));
    g_assert_nonnull(strstr(err->message, "'f0' is in use by node 'h0' "
                            "(as its file child), which does not share the "
                            "write permission that export 'vu2' needs"));
    g_clear_error(&err);
    /* a reader that lets the format write is fine */
    u1 = blk_attach_user(file, "export 'ro'", BLK_PERM_CONSISTENT_READ,
                         BLK_PERM_ALL, &err);
    g_assert_no_error(err);
    /* a reader that does not let anyone write is not */
    g_assert_null(blk_attach_user(file, "backup", BLK_PERM_CONSISTENT_READ,
                                  BLK_PERM_CONSISTENT_READ, &err));
    g_assert_nonnull(strstr(err->message, "holds the write"));
    g_clear_error(&err);
    /* a child name is taken once; a node is not its own child */
    g_assert_null(bdrv_attach_child(fmt, file, "file", 0, BLK_PERM_ALL,
                                    &err));
    g_assert_nonnull(strstr(err->message, "has a file child already"));
    g_clear_error(&err);
    g_assert_null(bdrv_attach_child(fmt, fmt, "backing", 0, BLK_PERM_ALL,
                                    &err));
    g_assert_nonnull(strstr(err->message, "child of itself"));
    g_clear_error(&err);
    blk_detach_user(u1);
    blk_close(fmt);

    /* a read-only node has no writer */
    blk_options_init(&opts);
    blk_null_options(&opts, &no, IMG_SIZE, false);
    opts.readonly = true;
    ro = blk_open(&opts, &err);
    g_assert_no_error(err);
    g_assert_null(blk_attach_user(ro, "export 'vu3'", BLK_PERM_WRITE,
                                  BLK_PERM_ALL, &err));
    g_assert_nonnull(strstr(err->message, "open read-only"));
    g_clear_error(&err);
    blk_close(ro);
    close_case(file, path);
}

/* The registry: filters are not opened by name; the message of an
 * unknown driver lists the ones there are, the test's own included. */
static void test_registry(void)
{
    BlockOptions opts;
    GError *err = NULL;
    g_autofree char *names = bdrv_driver_names();

    g_assert_nonnull(strstr(names, "file"));
    g_assert_nonnull(strstr(names, "null"));
    g_assert_nonnull(strstr(names, "halves"));
    g_assert_null(strstr(names, "throttle"));
    g_assert_null(strstr(names, "blkdebug"));
    blk_options_init(&opts);
    opts.driver = "throttle";
    g_assert_null(blk_open(&opts, &err));
    g_assert_nonnull(strstr(err->message, "is a filter"));
    g_clear_error(&err);
    g_assert_nonnull(bdrv_find_driver("blkdebug", "x", &err));
    g_assert_no_error(err);
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
    BlockFileOptions fo;
    BlockNullOptions no;
    BlockRbdOptions ro;
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
    if (!strcmp(dc->name, "file")) {
        blk_file_options(&opts, &fo, path);
    } else if (!strcmp(dc->name, "null")) {
        blk_null_options(&opts, &no, IMG_SIZE, false);
    } else {
        blk_rbd_options(&opts, &ro);
        ro.pool = "rbd";
        ro.image = rbd_image;
        ro.conf = g_getenv("CEPH_CONF");
    }
    opts.cache_direct = false;
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
    opts.driver = "vmdk";
    g_assert_null(blk_open(&opts, &err));
    g_assert_nonnull(strstr(err->message, "unknown block driver 'vmdk'"));
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
        { "file", .throttle = true }, { "null", .throttle = true },
        { "rbd", .throttle = true },
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
                                             cases[i].throttle ? "throttle-" :
                                             "", cases[i].name, poll);
        g_autofree char *r = g_strdup_printf("/block/driver/%s%s%s/read-only",
                                             cases[i].inject ? "blkdebug-" :
                                             cases[i].throttle ? "throttle-" :
                                             "", cases[i].name, poll);

        g_autofree char *b = g_strdup_printf(
            "/block/driver/%s%s%s/block-status",
            cases[i].inject ? "blkdebug-" :
            cases[i].throttle ? "throttle-" : "", cases[i].name, poll);

        g_test_add_data_func(c, &cases[i], test_contract);
        g_test_add_data_func(r, &cases[i], test_readonly);
        g_test_add_data_func(b, &cases[i], test_block_status);
        if (!cases[i].inject && !cases[i].throttle) {
            g_autofree char *d = g_strdup_printf(
                "/block/driver/blkdebug-delay-%s%s", cases[i].name, poll);

            g_test_add_data_func(d, &cases[i], test_delay);
        }
    }
    g_test_add_func("/block/driver/open-errors", test_open_errors);
    bdrv_register(&bdrv_halves);
    g_test_add_func("/block/graph/format", test_graph_format);
    g_test_add_func("/block/graph/permissions", test_graph_permissions);
    g_test_add_func("/block/graph/registry", test_registry);
    ret = g_test_run();
    rbd_cleanup();
    while (aio_poll(ctx, false)) {
    }
    aio_context_free(ctx);
    rmdir(tmpdir);
    g_free(tmpdir);
    return ret;
}
