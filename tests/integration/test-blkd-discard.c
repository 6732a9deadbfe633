/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests of what a node's discard mode means to the guest:
 *  - a --blockdev node without discard= (QEMU's default, discard=ignore):
 *    DISCARD is offered, a discard succeeds and the data stays, the
 *    image's blocks stay allocated; an UNMAP write-zeroes zeroes without
 *    deallocating (write_zeroes_may_unmap is 0);
 *  - discard=unmap: offered, the range reads zeroes, its blocks are gone;
 *  - a raw node over a discard=unmap node, without discard= itself:
 *    ignore again (QEMU passes a discard down only if every layer has
 *    discard=unmap);
 *  - vhost-blkd's own --export ...,discard=off: not offered, a discard
 *    is answered UNSUPP.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#include <sys/stat.h>

#define IMG_SIZE (4 << 20)
#define BUF_SIZE (1 << 20)
#define CHUNK 65536
#define BASE_SECTOR 512             /* 256 KiB: 4 KiB aligned */

/* The --blockdev nodes, one image and socket each, besides export 0 of
 * VbDaemon (--export ...,discard=off). */
enum { Q_IGNORE, Q_UNMAP, Q_RAW, Q_MAX };
static const char *const q_names[Q_MAX] = { "ign", "unm", "fmt" };

typedef struct Fixture {
    VbDaemon d;
    char *img[Q_MAX];
    char *sock[Q_MAX];
} Fixture;

static void fixture_setup(Fixture *f, gconstpointer data)
{
    static const VbExportSpec specs[] = {
        { .size = IMG_SIZE, .discard = "off", .write_zeroes = "on" },
    };
    g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);

    memset(f, 0, sizeof(*f));
    if (vb_backend() == VB_BACKEND_QSD) {
        return;                 /* the cases skip */
    }
    vb_daemon_init(&f->d, 1, specs);
    for (int i = 0; i < Q_MAX; i++) {
        int fd;

        f->img[i] = g_strdup_printf("%s/q%d.img", f->d.dir, i);
        f->sock[i] = g_strdup_printf("%s/q%d.sock", f->d.dir, i);
        fd = open(f->img[i], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(ftruncate(fd, IMG_SIZE), ==, 0);
        close(fd);
    }
    g_ptr_array_add(args, g_strdup("--blockdev"));
    g_ptr_array_add(args, g_strdup_printf(
        "driver=file,node-name=ign,filename=%s", f->img[Q_IGNORE]));
    g_ptr_array_add(args, g_strdup("--blockdev"));
    g_ptr_array_add(args, g_strdup_printf(
        "driver=file,node-name=unm,filename=%s,discard=unmap",
        f->img[Q_UNMAP]));
    g_ptr_array_add(args, g_strdup("--blockdev"));
    g_ptr_array_add(args, g_strdup_printf(
        "driver=file,node-name=below,filename=%s,discard=unmap",
        f->img[Q_RAW]));
    g_ptr_array_add(args, g_strdup("--blockdev"));
    g_ptr_array_add(args, g_strdup("driver=raw,node-name=fmt,file=below"));
    for (int i = 0; i < Q_MAX; i++) {
        g_ptr_array_add(args, g_strdup("--export"));
        g_ptr_array_add(args, g_strdup_printf(
            "type=vhost-user-blk,id=e%d,node-name=%s,addr.type=unix,"
            "addr.path=%s,writable=on", i, q_names[i], f->sock[i]));
    }
    g_ptr_array_add(args, NULL);
    f->d.args = (const char *const *)args->pdata;
    vb_daemon_start(&f->d);
    f->d.args = NULL;
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    if (!f->d.dir) {
        return;
    }
    vb_daemon_kill(&f->d);
    for (int i = 0; i < Q_MAX; i++) {
        unlink(f->sock[i]);
        unlink(f->img[i]);
        g_free(f->sock[i]);
        g_free(f->img[i]);
    }
    vb_daemon_cleanup(&f->d);
}

static VhostUserFrontend *connect_path(const char *path)
{
    VhostUserFrontendOptions opts = {
        .socket_path = path,
        .num_queues = 1,
        .connect_timeout_ms = 10000,
    };
    g_autoptr(GError) err = NULL;
    VhostUserFrontend *fe = vhost_user_frontend_new(&opts, &err);

    if (!fe) {
        g_error("connecting to %s: %s", path, err->message);
    }
    vb_start(fe);
    return fe;
}

/* The 512-byte blocks @path uses, after its data reached the disk. */
static uint64_t image_blocks(const char *path)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(fsync(fd), ==, 0);
    g_assert_cmpint(fstat(fd, &st), ==, 0);
    close(fd);
    return st.st_blocks;
}

static void read_file(const char *path, uint64_t offset, void *buf,
                      size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, buf, len, offset), ==, len);
    close(fd);
}

/*
 * Write three chunks of a pattern at BASE_SECTOR through @fe, then
 * DISCARD (or, with @wz, an UNMAP write-zeroes of) the middle one.
 * Returns the image's blocks before and after in @before and @after.
 */
static void write_then_drop(VhostUserFrontend *fe, uint8_t *buf,
                            const char *img, bool wz, uint64_t *before,
                            uint64_t *after)
{
    struct virtio_blk_discard_write_zeroes *seg = (void *)(buf + 4 * CHUNK);

    vb_fill_pattern(buf, 3 * CHUNK, 11);
    g_assert_cmpint(vb_req(fe, 0, VIRTIO_BLK_T_OUT, BASE_SECTOR, buf,
                           3 * CHUNK, false, NULL), ==, VIRTIO_BLK_S_OK);
    *before = image_blocks(img);
    seg->sector = BASE_SECTOR + CHUNK / 512;
    seg->num_sectors = CHUNK / 512;
    seg->flags = wz ? VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP : 0;
    g_assert_cmpint(vb_req(fe, 0, wz ? VIRTIO_BLK_T_WRITE_ZEROES :
                                       VIRTIO_BLK_T_DISCARD, 0,
                           seg, sizeof(*seg), false, NULL), ==,
                    VIRTIO_BLK_S_OK);
    *after = image_blocks(img);
}

/* What the guest reads of the three chunks equals the image file. */
static void check_read(VhostUserFrontend *fe, uint8_t *buf, const char *img,
                       void *expect)
{
    g_autofree uint8_t *file = g_malloc(3 * CHUNK);

    memset(buf + 5 * CHUNK, 0xee, 3 * CHUNK);
    g_assert_cmpint(vb_req(fe, 0, VIRTIO_BLK_T_IN, BASE_SECTOR,
                           buf + 5 * CHUNK, 3 * CHUNK, true, NULL), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_cmpmem(buf + 5 * CHUNK, 3 * CHUNK, expect, 3 * CHUNK);
    read_file(img, BASE_SECTOR * 512, file, 3 * CHUNK);
    g_assert_cmpmem(file, 3 * CHUNK, expect, 3 * CHUNK);
}

/* discard=ignore (the default of --blockdev, and of a raw node over an
 * unmap one): offered, succeeds, changes nothing. */
static void test_ignore(Fixture *f, gconstpointer data)
{
    int q = GPOINTER_TO_INT(data);
    VhostUserFrontend *fe;
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *expect = g_malloc(3 * CHUNK);
    struct virtio_blk_config cfg;
    uint64_t before, after;
    uint8_t *buf;

    if (vb_backend() == VB_BACKEND_QSD) {
        g_test_skip("vhost-blkd's own syntax is part of the test");
        return;
    }
    fe = connect_path(f->sock[q]);
    buf = vhost_user_frontend_mem_alloc(fe, BUF_SIZE, 4096, &err);
    g_assert_no_error(err);
    g_assert_true(vhost_user_frontend_has_feature(fe, VIRTIO_BLK_F_DISCARD));
    vhost_user_frontend_get_blk_config(fe, &cfg, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(cfg.write_zeroes_may_unmap, ==, 0);

    write_then_drop(fe, buf, f->img[q], false, &before, &after);
    g_assert_cmpuint(after, ==, before);
    vb_fill_pattern(expect, 3 * CHUNK, 11);
    check_read(fe, buf, f->img[q], expect);

    /* UNMAP is not honoured either: zeroes, the blocks stay. */
    write_then_drop(fe, buf, f->img[q], true, &before, &after);
    g_assert_cmpuint(after, ==, before);
    memset(expect + CHUNK, 0, CHUNK);
    check_read(fe, buf, f->img[q], expect);
    vhost_user_frontend_free(fe);
}

/* discard=unmap: offered and done. */
static void test_unmap(Fixture *f, gconstpointer data)
{
    VhostUserFrontend *fe;
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *expect = g_malloc(3 * CHUNK);
    struct virtio_blk_config cfg;
    uint64_t before, after;
    uint8_t *buf;

    if (vb_backend() == VB_BACKEND_QSD) {
        g_test_skip("vhost-blkd's own syntax is part of the test");
        return;
    }
    fe = connect_path(f->sock[Q_UNMAP]);
    buf = vhost_user_frontend_mem_alloc(fe, BUF_SIZE, 4096, &err);
    g_assert_no_error(err);
    g_assert_true(vhost_user_frontend_has_feature(fe, VIRTIO_BLK_F_DISCARD));
    vhost_user_frontend_get_blk_config(fe, &cfg, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(cfg.write_zeroes_may_unmap, ==, 1);

    write_then_drop(fe, buf, f->img[Q_UNMAP], false, &before, &after);
    /* The whole 64 KiB went back to the file system. */
    g_assert_cmpuint(after + CHUNK / 512, <=, before);
    vb_fill_pattern(expect, 3 * CHUNK, 11);
    memset(expect + CHUNK, 0, CHUNK);
    check_read(fe, buf, f->img[Q_UNMAP], expect);
    vhost_user_frontend_free(fe);
}

/* --export ...,discard=off: not offered, refused. */
static void test_off(Fixture *f, gconstpointer data)
{
    VhostUserFrontend *fe;
    g_autoptr(GError) err = NULL;
    struct virtio_blk_discard_write_zeroes *seg;
    uint8_t *buf;

    if (vb_backend() == VB_BACKEND_QSD) {
        g_test_skip("vhost-blkd's own syntax is part of the test");
        return;
    }
    fe = vb_connect_started(&f->d, 0, 1);
    buf = vhost_user_frontend_mem_alloc(fe, BUF_SIZE, 4096, &err);
    g_assert_no_error(err);
    g_assert_false(vhost_user_frontend_has_feature(fe,
                                                   VIRTIO_BLK_F_DISCARD));
    seg = (void *)buf;
    seg->sector = BASE_SECTOR;
    seg->num_sectors = 8;
    seg->flags = 0;
    g_assert_cmpint(vb_req(fe, 0, VIRTIO_BLK_T_DISCARD, 0, seg,
                           sizeof(*seg), false, NULL), ==,
                    VIRTIO_BLK_S_UNSUPP);
    vhost_user_frontend_free(fe);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add("/discard/blockdev-default-ignores", Fixture,
               GINT_TO_POINTER(Q_IGNORE), fixture_setup, test_ignore,
               fixture_teardown);
    g_test_add("/discard/raw-over-unmap-ignores", Fixture,
               GINT_TO_POINTER(Q_RAW), fixture_setup, test_ignore,
               fixture_teardown);
    g_test_add("/discard/blockdev-unmap", Fixture, NULL, fixture_setup,
               test_unmap, fixture_teardown);
    g_test_add("/discard/export-off", Fixture, NULL, fixture_setup,
               test_off, fixture_teardown);
    return g_test_run();
}
