/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A stand-in for the rbd driver module (block-rbd.so), for the tests of
 * what the monitor does while an rbd resize waits in a worker, without a
 * Ceph cluster.  The daemon loads it instead of the real module when
 * VHOST_BLK_MODULE_DIR names this build directory.
 *
 * Like the real driver it resizes in a worker (bdrv_truncate_any_thread),
 * but its resize waits on a gate the test controls: the FIFO named by the
 * node's conf= key.  The worker opens it for reading, which blocks until
 * the test opens it for writing (so the test knows the resize is running),
 * then reads one byte, which blocks until the test writes or closes it.
 * Closing the image meanwhile is what would free librbd's image under
 * rbd_resize() in the real driver: here it aborts the daemon, loudly; a
 * second resize of the image meanwhile fails at once.
 */
#include "qemu/osdep.h"
#include "block/module.h"
#include "block/rbd.h"

#define FAKE_RBD_SIZE (1 << 20)

typedef struct FakeRbd {
    char *gate;
    bool resizing;              /* atomic: the worker is in the resize */
} FakeRbd;

static bool fake_rbd_open(BlockBackend *bs, const BlockOptions *opts,
                          GError **errp)
{
    const BlockRbdOptions *o = opts->driver_opts;
    FakeRbd *s;

    if (!o || !o->conf) {
        g_set_error(errp, VB_ERROR, 0, "fake rbd: give conf=FIFO");
        return false;
    }
    s = g_new0(FakeRbd, 1);
    s->gate = g_strdup(o->conf);
    bs->opaque = s;
    bs->size = FAKE_RBD_SIZE;
    bs->filename = g_strdup_printf("rbd:%s/%s", o->pool, o->image);
    return true;
}

static void fake_rbd_close(BlockBackend *bs)
{
    FakeRbd *s = bs->opaque;

    if (!s) {
        return;
    }
    if (__atomic_load_n(&s->resizing, __ATOMIC_SEQ_CST)) {
        fprintf(stderr, "fake-rbd: image %s closed while its resize runs "
                "in a worker\n", bs->filename);
        abort();
    }
    g_free(s->gate);
    g_free(s);
    bs->opaque = NULL;
}

/* A worker thread (blk_truncate_async()). */
static bool fake_rbd_truncate(BlockBackend *bs, uint64_t size, GError **errp)
{
    FakeRbd *s = bs->opaque;
    ssize_t r;
    char c;
    int fd;

    if (__atomic_exchange_n(&s->resizing, true, __ATOMIC_SEQ_CST)) {
        /* librbd would run both; the monitor must not ask for that. */
        g_set_error(errp, VB_ERROR, 0, "fake rbd: two resizes of one "
                    "image at once");
        return false;
    }
    fd = open(s->gate, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        do {
            r = read(fd, &c, 1);
        } while (r < 0 && errno == EINTR);
        close(fd);
    }
    __atomic_store_n(&s->resizing, false, __ATOMIC_SEQ_CST);
    return true;
}

const BlockDriver bdrv_rbd = {
    .format_name = "rbd",
    .bdrv_open_any_thread = true,
    .bdrv_truncate_any_thread = true,
    .bdrv_open = fake_rbd_open,
    .bdrv_close = fake_rbd_close,
    .bdrv_truncate = fake_rbd_truncate,
};

const BlockModuleAbi block_module_abi = BLOCK_MODULE_ABI_INIT;
