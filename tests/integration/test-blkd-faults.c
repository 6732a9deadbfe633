/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests for I/O faults: vhost-blkd exports with error injection
 * (inject-* keys) return VIRTIO_BLK_S_IOERR to the front-end for the
 * matching requests only, the same session keeps serving everything else,
 * a second export of the same process is unaffected, and the image served
 * again without injection works normally.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#define BUF_SIZE (1 << 20)

typedef struct FaultCase {
    const char *inject;         /* export keys of export 0 */
} FaultCase;

typedef struct Fixture {
    VbDaemon d;
    VhostUserFrontend *fe;
    uint8_t *buf;
    bool skip;
} Fixture;

static void fixture_setup(Fixture *f, gconstpointer data)
{
    const FaultCase *c = data;
    VbExportSpec specs[2] = {
        { .num_queues = 1, .extra = c->inject },
        { .num_queues = 1 },
    };
    VhostUserFrontendOptions opts = { 0 };
    g_autoptr(GError) err = NULL;

    memset(f, 0, sizeof(*f));
    if (vb_backend() == VB_BACKEND_QSD) {
        g_test_skip("error injection is a vhost-blkd option");
        f->skip = true;
        return;
    }
    vb_daemon_init(&f->d, 2, specs);
    vb_daemon_start(&f->d);
    f->fe = vb_connect(&f->d, 0, &opts);
    vb_start(f->fe);
    f->buf = vhost_user_frontend_mem_alloc(f->fe, BUF_SIZE, 4096, &err);
    g_assert_no_error(err);
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    if (f->skip) {
        return;
    }
    vhost_user_frontend_free(f->fe);
    vb_daemon_cleanup(&f->d);
}

static int req(Fixture *f, uint32_t type, uint64_t sector, size_t off,
               size_t len)
{
    return vb_req(f->fe, 0, type, sector, len ? f->buf + off : NULL, len,
                  type == VIRTIO_BLK_T_IN, NULL);
}

/*
 * The daemon is alive, export 1 (no injection) serves a fresh session, and
 * export 0 restarted without injection reads back @seed at @sector.
 */
static void check_recovers(Fixture *f, uint64_t sector, size_t len,
                           uint32_t seed)
{
    VhostUserFrontend *fe;
    g_autoptr(GError) err = NULL;
    uint8_t *buf;

    g_assert_true(vb_daemon_alive(&f->d));
    vb_check_export_works(&f->d, 1);

    vhost_user_frontend_free(f->fe);
    f->fe = NULL;
    vb_daemon_kill(&f->d);
    f->d.spec[0].extra = NULL;
    vb_daemon_start(&f->d);
    fe = vb_connect_started(&f->d, 0, 0);
    buf = vhost_user_frontend_mem_alloc(fe, len, 4096, &err);
    g_assert_no_error(err);
    g_assert_cmpint(vb_req(fe, 0, VIRTIO_BLK_T_IN, sector, buf, len, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(buf, len, seed));
    vb_fill_pattern(buf, len, seed + 1);
    g_assert_cmpint(vb_req(fe, 0, VIRTIO_BLK_T_OUT, sector, buf, len, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(vb_req(fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    f->fe = fe;
}

/* inject-error=read,inject-sector=2048-2055 */
static void test_read_range(Fixture *f, gconstpointer data)
{
    VhostUserFrontendCompletion c[8];
    uint8_t *img = g_malloc(16384);

    if (f->skip) {
        g_free(img);
        return;
    }
    /* writes are not injected: sectors 2040..2071 get a pattern */
    vb_fill_pattern(f->buf, 16384, 1);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_OUT, 2040, 0, 16384), ==,
                    VIRTIO_BLK_S_OK);
    vb_read_image(&f->d, 0, 2040 * 512, img, 16384);
    g_assert_true(vb_check_pattern(img, 16384, 1));

    /* inside, straddling either edge: IOERR; the buffer is not written */
    memset(f->buf + 65536, 0xee, 4096);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_IN, 2048, 65536, 4096), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(f->buf[65536], ==, 0xee);
    g_assert_cmpint(f->buf[65536 + 4095], ==, 0xee);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_IN, 2044, 65536, 4096), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_IN, 2055, 65536, 512), ==,
                    VIRTIO_BLK_S_IOERR);
    /* just outside: data */
    g_assert_cmpint(req(f, VIRTIO_BLK_T_IN, 2040, 65536, 4096), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(f->buf + 65536, 4096, 1));
    g_assert_cmpint(req(f, VIRTIO_BLK_T_IN, 2056, 65536, 8192), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_cmpmem(f->buf + 65536, 8192, img + 8192, 8192);

    /* a batch mixing both, one kick: each request gets its own status */
    for (int i = 0; i < 8; i++) {
        struct iovec iov = { f->buf + 131072 + i * 4096, 4096 };

        /* sectors 2032, 2036, ..., 2060: i = 3..6 overlap 2048..2055 */
        g_assert_cmpint(vhost_user_frontend_blk_submit(
                            f->fe, 0, VIRTIO_BLK_T_IN, 2032 + i * 4, &iov, 1,
                            true, GINT_TO_POINTER(i + 1)), >=, 0);
    }
    g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
    g_assert_cmpint(vb_reap_n(f->fe, 0, c, 8), ==, 8);
    for (int k = 0; k < 8; k++) {
        int i = GPOINTER_TO_INT(c[k].opaque) - 1;
        uint64_t first = 2032 + i * 4, last = first + 7;
        bool hit = last >= 2048 && first <= 2055;

        g_assert_cmpint(c[k].status, ==,
                        hit ? VIRTIO_BLK_S_IOERR : VIRTIO_BLK_S_OK);
    }

    /* the same session keeps serving writes, reads and flushes elsewhere */
    vb_fill_pattern(f->buf, 65536, 2);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_OUT, 0, 0, 65536), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_FLUSH, 0, 0, 0), ==,
                    VIRTIO_BLK_S_OK);
    memset(f->buf, 0, 65536);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_IN, 0, 0, 65536), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(f->buf, 65536, 2));
    g_assert_cmpint(req(f, VIRTIO_BLK_T_IN, 2048, 0, 4096), ==,
                    VIRTIO_BLK_S_IOERR);

    check_recovers(f, 2040, 16384, 1);
    g_free(img);
}

/* inject-error=write,inject-sector=4096-4103,inject-errno=ENOSPC */
static void test_write_range(Fixture *f, gconstpointer data)
{
    uint8_t *img = g_malloc(8192);

    if (f->skip) {
        g_free(img);
        return;
    }
    vb_fill_pattern(f->buf, 8192, 3);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_OUT, 4096, 0, 4096), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_OUT, 4092, 0, 8192), ==,
                    VIRTIO_BLK_S_IOERR);
    /* nothing reached the image */
    vb_read_image(&f->d, 0, 4092 * 512, img, 8192);
    for (int i = 0; i < 8192; i++) {
        g_assert_cmpint(img[i], ==, 0);
    }
    /* reads of the range work, writes next to it land */
    g_assert_cmpint(req(f, VIRTIO_BLK_T_IN, 4096, 65536, 4096), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_OUT, 4104, 0, 8192), ==,
                    VIRTIO_BLK_S_OK);
    vb_read_image(&f->d, 0, 4104 * 512, img, 8192);
    g_assert_true(vb_check_pattern(img, 8192, 3));
    check_recovers(f, 4104, 8192, 3);
    g_free(img);
}

/* inject-error=write,inject-after=4,inject-count=3 */
static void test_after_count(Fixture *f, gconstpointer data)
{
    if (f->skip) {
        return;
    }
    vb_fill_pattern(f->buf, 4096, 4);
    for (int i = 0; i < 10; i++) {
        int want = i >= 4 && i < 7 ? VIRTIO_BLK_S_IOERR : VIRTIO_BLK_S_OK;

        g_assert_cmpint(req(f, VIRTIO_BLK_T_OUT, 8 * i, 0, 4096), ==, want);
        /* reads are not counted and always work */
        g_assert_cmpint(req(f, VIRTIO_BLK_T_IN, 8 * i, 65536, 4096), ==,
                        VIRTIO_BLK_S_OK);
        if (want == VIRTIO_BLK_S_OK) {
            g_assert_true(vb_check_pattern(f->buf + 65536, 4096, 4));
        }
    }
    check_recovers(f, 0, 4096, 4);
}

/* inject-error=flush */
static void test_flush(Fixture *f, gconstpointer data)
{
    if (f->skip) {
        return;
    }
    vb_fill_pattern(f->buf, 4096, 5);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_OUT, 64, 0, 4096), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_FLUSH, 0, 0, 0), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_IN, 64, 65536, 4096), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(f->buf + 65536, 4096, 5));
    g_assert_cmpint(req(f, VIRTIO_BLK_T_FLUSH, 0, 0, 0), ==,
                    VIRTIO_BLK_S_IOERR);
    check_recovers(f, 64, 4096, 5);
}

/* inject-error=any,inject-sector=0-7: discard and write-zeroes too */
static void test_any(Fixture *f, gconstpointer data)
{
    struct virtio_blk_discard_write_zeroes *seg;

    if (f->skip) {
        return;
    }
    seg = (void *)(f->buf + 131072);
    seg->sector = 0;
    seg->num_sectors = 8;
    seg->flags = 0;
    g_assert_cmpint(req(f, VIRTIO_BLK_T_WRITE_ZEROES, 0, 131072,
                        sizeof(*seg)), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_DISCARD, 0, 131072, sizeof(*seg)), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_IN, 0, 0, 512), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_OUT, 7, 0, 512), ==,
                    VIRTIO_BLK_S_IOERR);
    /* a flush has no sector: with a range set it is not injected */
    g_assert_cmpint(req(f, VIRTIO_BLK_T_FLUSH, 0, 0, 0), ==,
                    VIRTIO_BLK_S_OK);
    seg->sector = 8;
    g_assert_cmpint(req(f, VIRTIO_BLK_T_WRITE_ZEROES, 0, 131072,
                        sizeof(*seg)), ==, VIRTIO_BLK_S_OK);
    vb_fill_pattern(f->buf, 4096, 6);
    g_assert_cmpint(req(f, VIRTIO_BLK_T_OUT, 8, 0, 4096), ==,
                    VIRTIO_BLK_S_OK);
    check_recovers(f, 8, 4096, 6);
}

static FaultCase case_read = {
    "inject-error=read,inject-sector=2048-2055",
};
static FaultCase case_write = {
    "inject-error=write,inject-sector=4096-4103,inject-errno=ENOSPC",
};
static FaultCase case_after = {
    "inject-error=write,inject-after=4,inject-count=3",
};
static FaultCase case_flush = { "inject-error=flush" };
static FaultCase case_any = { "inject-error=any,inject-sector=0-7" };

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_set_nonfatal_assertions();
#define ADD(name, c, fn) \
    g_test_add("/vhost-blkd/faults/" name, Fixture, &c, fixture_setup, fn, \
               fixture_teardown)
    ADD("read-range", case_read, test_read_range);
    ADD("write-range-enospc", case_write, test_write_range);
    ADD("write-after-count", case_after, test_after_count);
    ADD("flush", case_flush, test_flush);
    ADD("any-range", case_any, test_any);
#undef ADD
    return g_test_run();
}
