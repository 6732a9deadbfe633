/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of the file driver's image locking (locking=auto|on|off,
 * block/file-posix.c): which of QEMU's lock bytes a node holds for the
 * permissions its parents take (through a filter too), and that an
 * attach is refused, leaving nothing held, when another open file of the
 * image holds a conflicting byte.  "Another process" is another open
 * file description of the image here: OFD locks do not tell them apart.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/file.h"
#include "block/null.h"

#define IMG_SIZE (1024 * 1024)

/* QEMU's layout: permission bytes at 100 + bit, "not shared" at 200. */
#define PERM_BYTE(bit)   (100 + (bit))
#define UNSHARE_BYTE(bit) (200 + (bit))

#define EXPORT_PERM (BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE | \
                     BLK_PERM_WRITE_UNCHANGED)
/* What a format takes on its file child and shares (QEMU's). */
#define FORMAT_PERM (EXPORT_PERM | BLK_PERM_RESIZE)
#define FORMAT_SHARED (BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE_UNCHANGED)

static AioContext *ctx;
static char *tmpdir;
static char *img;
static int probe_fd;            /* another open file of the image */

/* Does an open file other than probe_fd hold a lock on byte @off? */
static bool held(off_t off)
{
    struct flock fl = {
        .l_whence = SEEK_SET, .l_start = off, .l_len = 1,
        .l_type = F_WRLCK,
    };

    g_assert_cmpint(fcntl(probe_fd, F_OFD_GETLK, &fl), ==, 0);
    return fl.l_type != F_UNLCK;
}

/* The bytes held by others, as two masks of BLK_PERM_* bits. */
static void held_masks(uint64_t *perm, uint64_t *unshared)
{
    *perm = *unshared = 0;
    for (int i = 0; i < 4; i++) {
        *perm |= held(PERM_BYTE(i)) ? 1ull << i : 0;
        *unshared |= held(UNSHARE_BYTE(i)) ? 1ull << i : 0;
    }
}

static void assert_held(uint64_t perm, uint64_t unshared)
{
    uint64_t p, u;

    held_masks(&p, &u);
    g_assert_cmphex(p, ==, perm);
    g_assert_cmphex(u, ==, unshared);
}

/* probe_fd takes (@lock) or drops a shared lock on byte @off, as
 * another QEMU process would. */
static void probe_lock(off_t off, bool lock)
{
    struct flock fl = {
        .l_whence = SEEK_SET, .l_start = off, .l_len = 1,
        .l_type = lock ? F_RDLCK : F_UNLCK,
    };

    g_assert_cmpint(fcntl(probe_fd, F_OFD_SETLK, &fl), ==, 0);
}

static BlockBackend *open_file(BlockFileLocking locking, bool filter)
{
    BlockOptions opts;
    BlockFileOptions fo;
    GError *err = NULL;
    BlockBackend *blk;

    blk_options_init(&opts);
    blk_file_options(&opts, &fo, img);
    fo.locking = locking;
    fo.aio = BLOCK_AIO_THREADS;
    opts.cache_direct = false;
    if (filter) {
        /* A blkdebug filter on top that never fires. */
        opts.inject.ops = BLOCK_INJECT_DISCARD;
        opts.inject.after = UINT64_MAX;
    }
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    return blk;
}

/* A parent node for a format-like edge. */
static BlockBackend *open_parent(void)
{
    BlockOptions opts;
    BlockNullOptions no;
    GError *err = NULL;
    BlockBackend *blk;

    blk_options_init(&opts);
    blk_null_options(&opts, &no, IMG_SIZE, false);
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    return blk;
}

/* auto: exports (sharing everything) lock nothing; a format parent, which
 * shares no writes, locks its permissions and what it does not share,
 * and its detach releases them. */
static void test_auto(void)
{
    BlockBackend *file = open_file(BLOCK_FILE_LOCKING_AUTO, false);
    BlockBackend *fmt = open_parent();
    GError *err = NULL;
    BdrvChild *user, *c;

    assert_held(0, 0);
    user = blk_attach_user(file, "export 'e0'", EXPORT_PERM, BLK_PERM_ALL,
                           &err);
    g_assert_no_error(err);
    assert_held(0, 0);
    blk_detach_user(user);

    c = bdrv_attach_child(fmt, file, "file", FORMAT_PERM, FORMAT_SHARED,
                          &err);
    g_assert_no_error(err);
    assert_held(FORMAT_PERM, BLK_PERM_WRITE | BLK_PERM_RESIZE);
    bdrv_detach_child(c);
    assert_held(0, 0);
    blk_close(fmt);
    blk_close(file);
}

/* on: the users' permissions, and no writes or resizes by others, even
 * for exports that share everything, through a filter too; released
 * when the last user goes and when the node closes. */
static void test_on(void)
{
    BlockBackend *top = open_file(BLOCK_FILE_LOCKING_ON, true);
    GError *err = NULL;
    BdrvChild *reader, *writer;

    g_assert_true(top->drv->is_filter);
    assert_held(0, 0);
    reader = blk_attach_user(top, "export 'r'", BLK_PERM_CONSISTENT_READ,
                             BLK_PERM_ALL, &err);
    g_assert_no_error(err);
    assert_held(BLK_PERM_CONSISTENT_READ, BLK_PERM_WRITE | BLK_PERM_RESIZE);
    writer = blk_attach_user(top, "export 'w'", EXPORT_PERM, BLK_PERM_ALL,
                             &err);
    g_assert_no_error(err);
    assert_held(EXPORT_PERM, BLK_PERM_WRITE | BLK_PERM_RESIZE);
    blk_detach_user(writer);
    assert_held(BLK_PERM_CONSISTENT_READ, BLK_PERM_WRITE | BLK_PERM_RESIZE);
    blk_detach_user(reader);
    assert_held(0, 0);

    reader = blk_attach_user(top, "export 'r'", BLK_PERM_CONSISTENT_READ,
                             BLK_PERM_ALL, &err);
    g_assert_no_error(err);
    blk_detach_user(reader);
    blk_close(top);
    assert_held(0, 0);
}

/* Another writer (its "write" not-shared byte) or another user that does
 * not share writes refuses ours, QEMU's words and the image named, and
 * nothing stays held; off ignores them. */
static void test_conflict(void)
{
    BlockBackend *file = open_file(BLOCK_FILE_LOCKING_ON, false);
    BlockBackend *off = open_file(BLOCK_FILE_LOCKING_OFF, false);
    GError *err = NULL;
    BdrvChild *user;

    /* A QEMU writer: holds "write" and does not share it. */
    probe_lock(PERM_BYTE(1), true);
    probe_lock(UNSHARE_BYTE(1), true);
    g_assert_null(blk_attach_user(file, "export 'e0'", EXPORT_PERM,
                                  BLK_PERM_ALL, &err));
    g_assert_nonnull(strstr(err->message, "Failed to get \"write\" lock"));
    g_assert_nonnull(strstr(err->message, img));
    g_assert_nonnull(strstr(err->message, "locking=off"));
    g_clear_error(&err);
    /* Nor may we read it, not sharing its writes. */
    g_assert_null(blk_attach_user(file, "export 'r'",
                                  BLK_PERM_CONSISTENT_READ, BLK_PERM_ALL,
                                  &err));
    g_assert_nonnull(strstr(err->message,
                            "Failed to get shared \"write\" lock"));
    g_clear_error(&err);
    probe_lock(PERM_BYTE(1), false);
    probe_lock(UNSHARE_BYTE(1), false);
    assert_held(0, 0);

    /* locking=off: as before, nothing taken, nothing tested. */
    probe_lock(UNSHARE_BYTE(1), true);
    user = blk_attach_user(off, "export 'e1'", EXPORT_PERM, BLK_PERM_ALL,
                           &err);
    g_assert_no_error(err);
    blk_detach_user(user);
    probe_lock(UNSHARE_BYTE(1), false);
    assert_held(0, 0);

    /* Without the other writer, ours goes through. */
    user = blk_attach_user(file, "export 'e0'", EXPORT_PERM, BLK_PERM_ALL,
                           &err);
    g_assert_no_error(err);
    assert_held(EXPORT_PERM, BLK_PERM_WRITE | BLK_PERM_RESIZE);
    blk_detach_user(user);
    blk_close(off);
    blk_close(file);
}

/* Two nodes on one image (two processes, as far as locks go): the
 * second writer is refused while the first holds it. */
static void test_two_nodes(void)
{
    BlockBackend *a = open_file(BLOCK_FILE_LOCKING_ON, false);
    BlockBackend *b = open_file(BLOCK_FILE_LOCKING_ON, false);
    GError *err = NULL;
    BdrvChild *ua, *ub;

    ua = blk_attach_user(a, "export 'a'", EXPORT_PERM, BLK_PERM_ALL, &err);
    g_assert_no_error(err);
    g_assert_null(blk_attach_user(b, "export 'b'", EXPORT_PERM,
                                  BLK_PERM_ALL, &err));
    g_assert_nonnull(strstr(err->message, "lock"));
    g_clear_error(&err);
    blk_detach_user(ua);
    ub = blk_attach_user(b, "export 'b'", EXPORT_PERM, BLK_PERM_ALL, &err);
    g_assert_no_error(err);
    blk_detach_user(ub);
    blk_close(b);
    blk_close(a);
}

int main(int argc, char **argv)
{
    GError *err = NULL;
    int fd, ret;

    g_test_init(&argc, &argv, NULL);
    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);
    tmpdir = g_dir_make_tmp("vb-lock-XXXXXX", &err);
    g_assert_no_error(err);
    img = g_build_filename(tmpdir, "img", NULL);
    fd = open(img, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, IMG_SIZE), ==, 0);
    probe_fd = fd;

    g_test_add_func("/block/locking/auto", test_auto);
    g_test_add_func("/block/locking/on", test_on);
    g_test_add_func("/block/locking/conflict", test_conflict);
    g_test_add_func("/block/locking/two-nodes", test_two_nodes);
    ret = g_test_run();

    close(probe_fd);
    unlink(img);
    rmdir(tmpdir);
    aio_context_free(ctx);
    return ret;
}
