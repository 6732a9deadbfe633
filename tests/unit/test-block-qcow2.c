/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The qcow2 driver in-process, over images qemu-img made: once its L2
 * cache is warm, reads of every cluster kind (data, zero, unallocated
 * from the backing node) and overwrites of allocated clusters take the
 * lock-free fast path (the metadata thread sees none of them, whether
 * they span clusters or lie within one) and the
 * per-context pool of child requests stops growing; an allocating write
 * goes to the metadata thread; block status tells the cluster kinds
 * apart; what is read equals qemu-img's view and the image stays clean.
 */
#include "qemu/osdep.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/qcow2-options.h"
#include "block/file.h"

#include <sys/wait.h>

#define SIZE (4 * 1024 * 1024)

static AioContext *ctx;

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

static int do_rw(BlockBackend *blk, bool write, int64_t off, void *buf,
                 size_t len)
{
    /* Three buffers: a split request slices them. */
    struct iovec iov[3] = {
        { buf, 4096 }, { (char *)buf + 4096, len / 2 - 4096 },
        { (char *)buf + len / 2, len - len / 2 },
    };
    Req r = { 0 };

    if (write) {
        blk_aio_pwritev(blk, &r.acb, off, iov, 3, 0, req_cb, &r);
    } else {
        blk_aio_preadv(blk, &r.acb, off, iov, 3, req_cb, &r);
    }
    g_assert_false(r.done);
    while (!r.done) {
        aio_poll(ctx, true);
    }
    return r.ret;
}

static unsigned int do_status(BlockBackend *blk, int64_t off, uint64_t len,
                              uint64_t *pnum)
{
    BlockStatus st = { 0 };
    Req r = { 0 };

    blk_aio_block_status(blk, &r.acb, off, len, &st, req_cb, &r);
    while (!r.done) {
        aio_poll(ctx, true);
    }
    g_assert_cmpint(r.ret, ==, 0);
    *pnum = st.pnum;
    return st.flags;
}

static void sh(const char *cmd)
{
    g_autofree char *out = NULL;
    int status;

    /* Capture the command's output: on the test's stdout it would break
     * the TAP stream meson reads. */
    g_assert_true(g_spawn_command_line_sync(cmd, &out, NULL, &status, NULL));
    g_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static BlockBackend *open_file(const char *path, bool ro)
{
    static BlockFileOptions fo;
    BlockOptions o;
    GError *err = NULL;
    BlockBackend *blk;

    blk_options_init(&o);
    blk_file_options(&o, &fo, path);
    o.cache_direct = false;
    o.readonly = ro;
    blk = blk_open(&o, &err);
    g_assert_no_error(err);
    return blk;
}

static void test_fast_path(void)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *dir = g_dir_make_tmp("vb-qcow2-XXXXXX", &err);
    g_autofree char *top = g_build_filename(dir, "top.qcow2", NULL);
    g_autofree char *raw = g_build_filename(dir, "top.raw", NULL);
    g_autofree char *cmd = NULL;
    g_autofree uint8_t *expect = NULL;
    g_autofree uint8_t *buf = g_malloc(256 * 1024);
    BlockQcow2Options qo = { 0 };
    BlockBackend *file, *q;
    BlockOptions o;
    uint64_t slow, pool;
    gsize n;

    g_assert_no_error(err);
    cmd = g_strdup_printf("sh -c \"cd %s && "
                          "qemu-img create -q -f qcow2 base.qcow2 3M && "
                          "qemu-io -f qcow2 -c 'write -P 0x31 0 3M' "
                          "base.qcow2 && "
                          "qemu-img create -q -f qcow2 -b base.qcow2 "
                          "-F qcow2 top.qcow2 4M && "
                          "qemu-io -f qcow2 -c 'write -P 0x32 1M 512k' "
                          "-c 'write -z 2M 128k' top.qcow2 && "
                          "qemu-img convert -O raw top.qcow2 top.raw\"", dir);
    sh(cmd);
    g_assert_true(g_file_get_contents(raw, (char **)&expect, &n, NULL));
    g_assert_cmpuint(n, ==, SIZE);

    file = open_file(top, false);
    blk_options_init(&o);
    o.driver = "qcow2";
    o.file = file;
    qo.l2_cache_entry_size = 4096;
    o.driver_opts = &qo;
    q = blk_open(&o, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(blk_getlength(q), ==, SIZE);

    /* Warm the caches (this image's and the backing node's). */
    for (int off = 0; off < SIZE; off += 256 * 1024) {
        g_assert_cmpint(do_rw(q, false, off, buf, 256 * 1024), ==, 0);
        g_assert_true(memcmp(buf, expect + off, 256 * 1024) == 0);
    }
    slow = qcow2_slow_requests(q);
    pool = blk_child_req_allocated(ctx);
    g_assert_cmpuint(pool, >, 0);
    for (int round = 0; round < 20; round++) {
        /* reads spanning data, zero, unallocated and past-backing */
        for (int off = 0; off < SIZE; off += 192 * 1024) {
            size_t len = MIN(256 * 1024, SIZE - off);

            g_assert_cmpint(do_rw(q, false, off, buf, len), ==, 0);
            g_assert_true(memcmp(buf, expect + off, len) == 0);
        }
        /* overwrite of allocated clusters */
        memset(buf, round, 128 * 1024);
        memset(expect + 1024 * 1024 + 4096, round, 128 * 1024);
        g_assert_cmpint(do_rw(q, true, 1024 * 1024 + 4096, buf, 128 * 1024),
                        ==, 0);
        /* Requests within one cluster (the shortcut straight to the
         * file for data, the runs for the rest): data, an overwrite,
         * zeroes, the backing node's. */
        for (int i = 0; i < 4; i++) {
            static const int offs[4] = {
                1024 * 1024 + 64 * 1024 + 4096, 1024 * 1024 + 200 * 1024,
                2 * 1024 * 1024 + 8192, 8192,
            };

            if (i == 1) {
                memset(buf, round + 0x40, 8192);
                memset(expect + offs[i], round + 0x40, 8192);
                g_assert_cmpint(do_rw(q, true, offs[i], buf, 8192), ==, 0);
            }
            g_assert_cmpint(do_rw(q, false, offs[i], buf, 8192), ==, 0);
            g_assert_true(memcmp(buf, expect + offs[i], 8192) == 0);
        }
    }
    g_assert_cmpuint(qcow2_slow_requests(q), ==, slow);
    g_assert_cmpuint(blk_child_req_allocated(ctx), ==, pool);

    /* Block status: the backing file's, data, zeroes, past its end. */
    {
        uint64_t pnum;

        g_assert_cmpuint(do_status(q, 0, 1024 * 1024, &pnum), ==, 0);
        g_assert_cmpuint(pnum, ==, 1024 * 1024);
        g_assert_cmpuint(do_status(q, 1024 * 1024, 1024 * 1024, &pnum), ==,
                         BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED);
        g_assert_cmpuint(pnum, ==, 512 * 1024);
        g_assert_cmpuint(do_status(q, 2 * 1024 * 1024, 1024 * 1024, &pnum),
                         ==, BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED);
        g_assert_cmpuint(pnum, ==, 128 * 1024);
        g_assert_cmpuint(do_status(q, 3 * 1024 * 1024, 1024 * 1024, &pnum),
                         ==, BDRV_BLOCK_ZERO);
        g_assert_cmpuint(pnum, ==, 1024 * 1024);
    }

    /* Allocation is the metadata thread's. */
    memset(buf, 0x77, 4096);
    memset(expect + 3 * 1024 * 1024 + 512, 0x77, 4096);
    g_assert_cmpint(do_rw(q, true, 3 * 1024 * 1024 + 512, buf, 4096), ==, 0);
    g_assert_cmpuint(qcow2_slow_requests(q), ==, slow + 5);
    g_assert_cmpint(do_rw(q, false, 3 * 1024 * 1024, buf, 64 * 1024), ==, 0);
    g_assert_true(memcmp(buf, expect + 3 * 1024 * 1024, 64 * 1024) == 0);

    while (aio_poll(ctx, false)) {
    }
    blk_close(q);
    blk_close(file);
    g_free(cmd);
    cmd = g_strdup_printf("qemu-img check -q %s", top);
    sh(cmd);
    g_free(cmd);
    cmd = g_strdup_printf("rm -rf %s", dir);
    sh(cmd);
}

/*
 * An L1 entry with a reserved bit set is corrupt: a read under it fails
 * (the metadata thread reports the entry), also when its offset, the
 * reserved bit masked off, is that of an L2 table whose slices are
 * cached: neither the shortcut of the fast path (a read within one
 * cluster) nor its runs (a read across two) may take the entry for that
 * table's.
 */
static void test_l1_reserved(void)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *dir = g_dir_make_tmp("vb-qcow2-XXXXXX", &err);
    g_autofree char *img = g_build_filename(dir, "l1.qcow2", NULL);
    g_autofree char *cmd = NULL;
    g_autofree uint8_t *buf = g_malloc(8192);
    uint8_t be[8];
    uint64_t l1_off, e0;
    int fd;

    g_assert_no_error(err);
    /* 16 KiB clusters: an L2 table maps 32 MiB, so 64 MiB has two. */
    cmd = g_strdup_printf("sh -c \"cd %s && "
                          "qemu-img create -q -f qcow2 -o cluster_size=16k "
                          "l1.qcow2 64M && "
                          "qemu-io -f qcow2 -c 'write -P 0x31 0 64k' "
                          "-c 'write -P 0x32 32M 64k' l1.qcow2\"", dir);
    sh(cmd);
    /* L1[1] = L1[0] with bit 1 (reserved) set. */
    fd = open(img, O_RDWR);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, be, 8, 40), ==, 8);
    memcpy(&l1_off, be, 8);
    l1_off = GUINT64_FROM_BE(l1_off);
    g_assert_cmpint(pread(fd, be, 8, l1_off), ==, 8);
    memcpy(&e0, be, 8);
    e0 = GUINT64_FROM_BE(e0);
    g_assert_cmpuint(e0 & 0x00fffffffffffe00ull, !=, 0);
    e0 = GUINT64_TO_BE(e0 | 2);
    g_assert_cmpint(pwrite(fd, &e0, 8, l1_off + 8), ==, 8);
    close(fd);

    /* 0: within a cluster; 12 KiB on: across two (a node each: once it
     * found the entry corrupt, a node refuses every request). */
    for (int in = 0; in <= 12 * 1024; in += 12 * 1024) {
        BlockQcow2Options qo = { 0 };
        BlockBackend *file, *q;
        BlockOptions o;

        file = open_file(img, true);
        blk_options_init(&o);
        o.driver = "qcow2";
        o.file = file;
        o.readonly = true;
        qo.l2_cache_entry_size = 4096;
        o.driver_opts = &qo;
        q = blk_open(&o, &err);
        g_assert_no_error(err);
        /* L1[0]'s first slice: loaded, then cached. */
        for (int i = 0; i < 2; i++) {
            g_assert_cmpint(do_rw(q, false, in, buf, 8192), ==, 0);
            g_assert_cmpuint(buf[0], ==, 0x31);
            g_assert_cmpuint(buf[8191], ==, 0x31);
        }
        /* The same slice key through the corrupt L1[1]. */
        g_assert_cmpint(do_rw(q, false, 32 * 1024 * 1024 + in, buf, 8192),
                        <, 0);
        while (aio_poll(ctx, false)) {
        }
        blk_close(q);
        blk_close(file);
    }
    g_free(cmd);
    cmd = g_strdup_printf("rm -rf %s", dir);
    sh(cmd);
}

/*
 * Slices loaded ahead of the requests queued behind a cache miss
 * (l2_prefetch()): 32 requests in flight at once over a sparse image of
 * 64 L2 tables, with an 8-slot cache (one set: every batch evicts, and
 * some of its slices find no free slot), reads mixed with allocating
 * writes (new clusters in existing tables, and new tables) and
 * discards, round after round.  Every read returns what a model of the
 * image says, the image is clean after, and it converts to the model.
 */
#define PF_TABLES 64
#define PF_TABLE_SPAN (2 * 1024 * 1024)     /* 4 KiB clusters: 512 each */
#define PF_SIZE ((uint64_t)PF_TABLES * PF_TABLE_SPAN)

static void test_prefetch(void)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *dir = g_dir_make_tmp("vb-qcow2pf-XXXXXX", &err);
    g_autofree char *img = g_build_filename(dir, "sparse.qcow2", NULL);
    g_autofree char *model_path = g_build_filename(dir, "model.raw", NULL);
    g_autofree uint8_t *model = g_malloc0(PF_SIZE);
    g_autoptr(GString) cmd = g_string_new(NULL);
    BlockQcow2Options qo = { 0 };
    BlockBackend *file, *q;
    BlockOptions o;
    Req r[32];
    uint8_t *buf[32];
    uint32_t seed = 1;

    g_assert_no_error(err);
    /* Tables 0..47 exist (a cluster written in each); 48..63 do not. */
    g_string_printf(cmd, "sh -c \"cd %s && qemu-img create -q -f qcow2 "
                    "-o cluster_size=4096 sparse.qcow2 %" PRIu64 " && "
                    "qemu-io -f qcow2", dir, PF_SIZE);
    for (int t = 0; t < 48; t++) {
        uint64_t off = (uint64_t)t * PF_TABLE_SPAN + (t % 7) * 8192;

        g_string_append_printf(cmd, " -c 'write -P %d %" PRIu64 " 4k'",
                               t + 1, off);
        memset(model + off, t + 1, 4096);
    }
    g_string_append(cmd, " sparse.qcow2 >/dev/null\"");
    sh(cmd->str);

    file = open_file(img, false);
    blk_options_init(&o);
    o.driver = "qcow2";
    o.file = file;
    qo.l2_cache_entry_size = 4096;
    qo.l2_cache_size = 8 * 4096;
    o.driver_opts = &qo;
    q = blk_open(&o, &err);
    g_assert_no_error(err);

    for (int i = 0; i < 32; i++) {
        buf[i] = g_malloc(8192);
    }
    for (int round = 0; round < 40; round++) {
        struct iovec iov[32];
        int64_t off[32];
        int kind[32];

        for (int i = 0; i < 32; i++) {
            uint64_t t, c;

            seed = seed * 1103515245 + 12345;
            t = (seed >> 8) % PF_TABLES;
            c = (seed >> 20) % 511;
            off[i] = t * PF_TABLE_SPAN + c * 4096;
            /* The requests of one round touch distinct clusters: the
             * model's order is then the requests' own. */
            for (int j = 0; j < i; j++) {
                if (off[j] / 4096 <= off[i] / 4096 + 1 &&
                    off[i] / 4096 <= off[j] / 4096 + 1) {
                    off[i] = -1;
                }
            }
            kind[i] = off[i] < 0 ? -1 : (int)((seed >> 4) % 8);
            memset(&r[i], 0, sizeof(r[i]));
            iov[i] = (struct iovec){ buf[i], 8192 };
            if (kind[i] < 0) {
                r[i].done = true;
            } else if (kind[i] == 0) {
                memset(buf[i], 0x80 + round, 8192);
                blk_aio_pwritev(q, &r[i].acb, off[i], &iov[i], 1, 0,
                                req_cb, &r[i]);
            } else if (kind[i] == 1) {
                blk_aio_pdiscard(q, &r[i].acb, off[i], 4096, req_cb, &r[i]);
            } else {
                blk_aio_preadv(q, &r[i].acb, off[i], &iov[i], 1,
                               req_cb, &r[i]);
            }
        }
        for (int i = 0; i < 32; i++) {
            while (!r[i].done) {
                aio_poll(ctx, true);
            }
            if (kind[i] < 0) {
                continue;
            }
            g_assert_cmpint(r[i].ret, ==, 0);
            if (kind[i] == 0) {
                memcpy(model + off[i], buf[i], 8192);
            } else if (kind[i] == 1) {
                memset(model + off[i], 0, 4096);
            } else {
                g_assert_true(memcmp(buf[i], model + off[i], 8192) == 0);
            }
        }
    }
    g_test_message("%" PRIu64 " slices prefetched, %" PRIu64
                   " requests on the metadata thread",
                   qcow2_l2_prefetched(q), qcow2_slow_requests(q));
    for (int i = 0; i < 32; i++) {
        g_free(buf[i]);
    }
    while (aio_poll(ctx, false)) {
    }
    blk_close(q);
    blk_close(file);

    g_assert_true(g_file_set_contents(model_path, (char *)model, PF_SIZE,
                                      NULL));
    g_string_printf(cmd, "qemu-img check -q %s", img);
    sh(cmd->str);
    g_string_printf(cmd, "qemu-img compare -q -f qcow2 -F raw %s %s",
                    img, model_path);
    sh(cmd->str);
    g_string_printf(cmd, "rm -rf %s", dir);
    sh(cmd->str);
}

int main(int argc, char **argv)
{
    g_autofree char *qemu_img = NULL;
    g_autofree char *qemu_io = NULL;
    GError *err = NULL;

    g_test_init(&argc, &argv, NULL);
    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);
    qemu_img = g_find_program_in_path("qemu-img");
    qemu_io = g_find_program_in_path("qemu-io");
    if (!qemu_img || !qemu_io) {
        g_test_skip("qemu-img and qemu-io are needed (qemu-utils)");
        return g_test_run();
    }
    g_test_add_func("/block/qcow2/fast-path", test_fast_path);
    g_test_add_func("/block/qcow2/l1-reserved", test_l1_reserved);
    g_test_add_func("/block/qcow2/prefetch", test_prefetch);
    return g_test_run();
}
