/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The qcow2 primitives of block-stream, in-process, over images qemu-img
 * made: a write with BDRV_REQ_IF_UNALLOCATED leaves every cluster the
 * image holds (data, zero clusters) as it was and fills only those it
 * leaves to its backing file (whole or partial: the rest of a cluster
 * comes from the backing file) -- which is what keeps a guest write that
 * lands between the job's read and its write; qcow2_change_backing()
 * rewrites the header so that qemu-img sees the new backing file (or
 * none), keeps the image clean and its other header extensions.
 */
#include "qemu/osdep.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/qcow2-options.h"
#include "block/file.h"

#include <sys/wait.h>

#define SIZE (4 * 1024 * 1024)
#define KIB 1024
#define MIB (1024 * 1024)

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

static int do_rw(BlockBackend *blk, bool write, int flags, int64_t off,
                 void *buf, size_t len)
{
    struct iovec iov = { buf, len };
    Req r = { 0 };

    if (write) {
        blk_aio_pwritev(blk, &r.acb, off, &iov, 1, flags, req_cb, &r);
    } else {
        blk_aio_preadv(blk, &r.acb, off, &iov, 1, req_cb, &r);
    }
    while (!r.done) {
        aio_poll(ctx, true);
    }
    return r.ret;
}

static char *sh_out(const char *cmd)
{
    char *out = NULL;
    int status;

    g_assert_true(g_spawn_command_line_sync(cmd, &out, NULL, &status, NULL));
    g_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return out;
}

static void sh(const char *cmd)
{
    g_free(sh_out(cmd));
}

static BlockBackend *open_qcow2(const char *path, BlockBackend **file)
{
    static BlockFileOptions fo;
    BlockOptions o;
    GError *err = NULL;
    BlockBackend *q;

    blk_options_init(&o);
    blk_file_options(&o, &fo, path);
    o.cache_direct = false;
    *file = blk_open(&o, &err);
    g_assert_no_error(err);
    blk_options_init(&o);
    o.driver = "qcow2";
    o.file = *file;
    q = blk_open(&o, &err);
    g_assert_no_error(err);
    return q;
}

static void test_if_unallocated(void)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *dir = g_dir_make_tmp("vb-qstream-XXXXXX", &err);
    g_autofree char *top = g_build_filename(dir, "top.qcow2", NULL);
    g_autofree char *raw = g_build_filename(dir, "top.raw", NULL);
    g_autofree char *cmd = NULL, *info = NULL;
    g_autofree uint8_t *expect = NULL;
    g_autofree uint8_t *buf = g_malloc(SIZE);
    BlockDriverInfo bdi = { 0 };
    BlockBackend *file, *q;
    gsize n;

    g_assert_no_error(err);
    /* base: 0x31 over 3 MiB; top (64 KiB clusters): data at 1 MiB, zero
     * clusters at 2 MiB, the rest the base's. */
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
    q = open_qcow2(top, &file);

    /* Over unallocated, data and zero clusters: only the unallocated
     * ones take the new bytes. */
    memset(buf, 0x55, 2 * MIB);
    g_assert_cmpint(do_rw(q, true, BDRV_REQ_IF_UNALLOCATED, 768 * KIB, buf,
                          2 * MIB), ==, 0);
    memset(expect + 768 * KIB, 0x55, 256 * KIB);            /* to 1M */
    memset(expect + 1536 * KIB, 0x55, 512 * KIB);           /* to 2M */
    memset(expect + 2048 * KIB + 128 * KIB, 0x55, 640 * KIB);
    /* Part of an unallocated cluster: the rest from the backing file. */
    memset(buf, 0x66, 4 * KIB);
    g_assert_cmpint(do_rw(q, true, BDRV_REQ_IF_UNALLOCATED,
                          3 * MIB - 32 * KIB, buf, 4 * KIB), ==, 0);
    memset(expect + 3 * MIB - 32 * KIB, 0x66, 4 * KIB);
    /* An allocated cluster again: untouched, even partly. */
    g_assert_cmpint(do_rw(q, true, BDRV_REQ_IF_UNALLOCATED,
                          3 * MIB - 28 * KIB, buf, 4 * KIB), ==, 0);
    g_assert_cmpint(do_rw(q, false, 0, 0, buf, SIZE), ==, 0);
    for (uint32_t i = 0; i < SIZE; i += 512) {
        if (memcmp(buf + i, expect + i, 512)) {
            g_error("other data at sector %u", i / 512);
        }
    }

    /* The header names the base again (the same node): a rewrite in
     * place; then no backing file at all. */
    blk_get_info(q, &bdi);
    g_assert_nonnull(bdi.backing);
    g_assert_true(qcow2_change_backing(q, bdi.backing, "base.qcow2",
                                       "qcow2", &err));
    g_assert_no_error(err);
    g_assert_true(qcow2_change_backing(q, NULL, NULL, NULL, &err));
    g_assert_no_error(err);
    /* What was the base's reads as zeroes now. */
    g_assert_cmpint(do_rw(q, false, 0, 0, buf, 64 * KIB), ==, 0);
    for (uint32_t i = 0; i < 64 * KIB; i++) {
        g_assert_cmpint(buf[i], ==, 0);
    }
    while (aio_poll(ctx, false)) {
    }
    blk_close(q);
    blk_close(file);
    g_free(cmd);
    cmd = g_strdup_printf("qemu-img check -q %s", top);
    sh(cmd);
    g_free(cmd);
    cmd = g_strdup_printf("qemu-img info --output=json %s", top);
    info = sh_out(cmd);
    g_assert_null(strstr(info, "backing-filename"));
    g_free(cmd);
    cmd = g_strdup_printf("rm -rf %s", dir);
    sh(cmd);
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
    g_test_add_func("/block/qcow2/stream/if-unallocated",
                    test_if_unallocated);
    return g_test_run();
}
