/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Integration tests: every virtio-blk request type and the config space. */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#include <sys/stat.h>

typedef struct IoCase {
    VbExportSpec spec;
    bool blkd_only;             /* needs an option qsd does not have */
    unsigned int mem_regions;
    bool use_add_mem_reg;
    bool packed;                /* VIRTIO_F_RING_PACKED */
    bool stderr_to_log;         /* the test reads the daemon's log lines */
} IoCase;

typedef struct Fixture {
    VbDaemon d;
    VhostUserFrontend *fe;
    uint8_t *buf;               /* 1 MiB of guest memory */
    bool skip;
} Fixture;

#define BUF_SIZE (1 << 20)

static void fixture_setup(Fixture *f, gconstpointer data)
{
    const IoCase *c = data;
    VhostUserFrontendOptions opts = {
        .mem_regions = c->mem_regions,
        .use_add_mem_reg = c->use_add_mem_reg,
        .packed = c->packed,
    };
    g_autoptr(GError) err = NULL;

    memset(f, 0, sizeof(*f));
    if (c->blkd_only && vb_backend() == VB_BACKEND_QSD) {
        g_test_skip("option not available in qemu-storage-daemon");
        f->skip = true;
        return;
    }
    vb_daemon_init(&f->d, 1, &c->spec);
    f->d.stderr_to_log = c->stderr_to_log;
    vb_daemon_start(&f->d);
    f->fe = vb_connect(&f->d, 0, &opts);
    vb_start(f->fe);
    g_assert_true(vhost_user_frontend_is_packed(f->fe) == c->packed);
    f->buf = vhost_user_frontend_mem_alloc(f->fe, BUF_SIZE, 4096, &err);
    g_assert_no_error(err);
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vhost_user_frontend_free(f->fe);
    vb_daemon_cleanup(&f->d);
}

static void test_read_write(Fixture *f, gconstpointer data)
{
    uint8_t *img = g_malloc(65536);
    uint32_t len;

    if (f->skip) {
        g_free(img);
        return;
    }
    /* single segment, 64 KiB at sector 128 */
    vb_fill_pattern(f->buf, 65536, 1);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 128, f->buf, 65536,
                           false, &len), ==, VIRTIO_BLK_S_OK);
    memset(f->buf, 0, 65536);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 128, f->buf, 65536,
                           true, &len), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(f->buf, 65536, 1));
    /* used->len covers the data written to the driver and the status */
    g_assert_cmpuint(len, ==, 65536 + 1);
    vb_read_image(&f->d, 0, 128 * 512, img, 65536);
    g_assert_true(vb_check_pattern(img, 65536, 1));

    /* three segments of different sizes, including a 512-byte one */
    {
        struct iovec iov[3] = {
            { f->buf + 65536, 4096 },
            { f->buf + 2 * 65536, 512 },
            { f->buf + 3 * 65536, 8192 - 512 },
        };
        uint8_t *flat = g_malloc(8192);

        vb_fill_pattern(flat, 8192, 2);
        memcpy(iov[0].iov_base, flat, 4096);
        memcpy(iov[1].iov_base, flat + 4096, 512);
        memcpy(iov[2].iov_base, flat + 4608, 8192 - 4608);
        g_assert_cmpint(vb_reqv(f->fe, 0, VIRTIO_BLK_T_OUT, 1000, iov, 3,
                                false, NULL), ==, VIRTIO_BLK_S_OK);
        vb_read_image(&f->d, 0, 1000 * 512, img, 8192);
        g_assert_true(vb_check_pattern(img, 8192, 2));
        memset(iov[0].iov_base, 0, 4096);
        memset(iov[1].iov_base, 0, 512);
        memset(iov[2].iov_base, 0, 8192 - 4608);
        g_assert_cmpint(vb_reqv(f->fe, 0, VIRTIO_BLK_T_IN, 1000, iov, 3,
                                true, NULL), ==, VIRTIO_BLK_S_OK);
        g_assert_cmpmem(iov[0].iov_base, 4096, flat, 4096);
        g_assert_cmpmem(iov[1].iov_base, 512, flat + 4096, 512);
        g_assert_cmpmem(iov[2].iov_base, 8192 - 4608, flat + 4608,
                        8192 - 4608);
        g_free(flat);
    }

    /* data written by someone else shows up (no stale cache) */
    vb_fill_pattern(img, 4096, 3);
    vb_write_image(&f->d, 0, 4096 * 512, img, 4096);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 4096, f->buf, 4096,
                           true, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(f->buf, 4096, 3));

    /* the last sector of the disk */
    vb_fill_pattern(f->buf, 512, 4);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT,
                           f->d.spec[0].size / 512 - 1, f->buf, 512,
                           false, NULL), ==, VIRTIO_BLK_S_OK);
    vb_read_image(&f->d, 0, f->d.spec[0].size - 512, img, 512);
    g_assert_true(vb_check_pattern(img, 512, 4));
    g_free(img);
}

/* Buffers in a second memory region (guest-physical 4 GiB and up). */
static void test_two_regions(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    uint8_t *far, *img;
    uint64_t gpa;

    if (f->skip) {
        return;
    }
    /* region 0 holds the rings and f->buf; fill it so the next allocation
     * lands in region 1 */
    far = vhost_user_frontend_mem_alloc(f->fe, (64 << 20) - 4096, 4096, &err);
    if (far) {
        g_assert_true(vhost_user_frontend_host_to_gpa(f->fe, far, 1, &gpa));
        if (gpa < VHOST_USER_FRONTEND_REGION_STRIDE) {
            g_assert_not_reached();
        }
    }
    g_assert_no_error(err);
    img = g_malloc(131072);
    vb_fill_pattern(far, 131072, 5);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 2048, far, 131072,
                           false, NULL), ==, VIRTIO_BLK_S_OK);
    vb_read_image(&f->d, 0, 2048 * 512, img, 131072);
    g_assert_true(vb_check_pattern(img, 131072, 5));
    memset(far, 0, 131072);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 2048, far, 131072,
                           true, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(far, 131072, 5));
    g_free(img);
}

/* Many requests in one batch, one kick. */
static void test_batch(Fixture *f, gconstpointer data)
{
    VhostUserFrontendCompletion c[64];
    uint8_t *img = g_malloc(4096);

    if (f->skip) {
        g_free(img);
        return;
    }
    for (int i = 0; i < 32; i++) {
        struct iovec iov = { f->buf + i * 4096, 4096 };

        vb_fill_pattern(iov.iov_base, 4096, 100 + i);
        g_assert_cmpint(vhost_user_frontend_blk_submit(
                            f->fe, 0, VIRTIO_BLK_T_OUT, i * 8, &iov, 1, false,
                            GINT_TO_POINTER(i + 1)), >=, 0);
    }
    g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
    g_assert_cmpint(vb_reap_n(f->fe, 0, c, 32), ==, 32);
    for (int i = 0; i < 32; i++) {
        g_assert_cmpint(c[i].status, ==, VIRTIO_BLK_S_OK);
        g_assert_nonnull(c[i].opaque);
    }
    g_assert_cmpuint(vhost_user_frontend_outstanding(f->fe, 0), ==, 0);
    {
        uint64_t kicks, suppressed;

        vhost_user_frontend_kick_stats(f->fe, 0, &kicks, &suppressed);
        g_test_message("event-idx %d: %" PRIu64 " kicks, %" PRIu64
                       " suppressed",
                       vhost_user_frontend_has_feature(f->fe,
                                                       VIRTIO_RING_F_EVENT_IDX),
                       kicks, suppressed);
    }
    for (int i = 0; i < 32; i++) {
        vb_read_image(&f->d, 0, i * 4096, img, 4096);
        g_assert_true(vb_check_pattern(img, 4096, 100 + i));
    }
    g_free(img);
}

/* The export's "batches" counter, from the SIGUSR1 dump in the log. */
static uint64_t daemon_batches(Fixture *f)
{
    for (int tries = 0; tries < 500; tries++) {
        g_autofree char *log = NULL;
        const char *line;

        if (tries % 50 == 0) {
            kill(f->d.pid, SIGUSR1);
        }
        g_usleep(10 * 1000);
        if (g_file_get_contents(f->d.log_path, &log, NULL, NULL) &&
            (line = g_strrstr(log, ", batches "))) {
            uint64_t b = g_ascii_strtoull(line + strlen(", batches "),
                                          NULL, 10);
            /* only a dump taken after the convoys counts */
            if (g_strrstr(log, "requests 96,")) {
                return b;
            }
        }
    }
    {
        g_autofree char *log = NULL;

        g_file_get_contents(f->d.log_path, &log, NULL, NULL);
        g_test_message("no counter dump after the convoys; log:\n%s", log);
    }
    g_assert_not_reached();
    return 0;
}

/* The export's "polling drivers" from a SIGUSR1 dump taken after the
 * first @completed completions. */
static unsigned int daemon_polling_drivers(Fixture *f, uint64_t completed)
{
    g_autofree char *want = g_strdup_printf(", completed %" PRIu64 ",",
                                            completed);

    for (int tries = 0; tries < 500; tries++) {
        g_autofree char *log = NULL;
        const char *line, *p;

        if (tries % 50 == 0) {
            kill(f->d.pid, SIGUSR1);
        }
        g_usleep(10 * 1000);
        if (g_file_get_contents(f->d.log_path, &log, NULL, NULL) &&
            (line = g_strrstr(log, want)) &&
            (p = strstr(line, ", polling drivers "))) {
            return g_ascii_strtoull(p + strlen(", polling drivers "), NULL,
                                    10);
        }
    }
    g_test_message("no counter dump after %" PRIu64 " completions",
                   completed);
    g_assert_not_reached();
    return 0;
}

/* Spin on the used ring (no interrupt wanted) until @n completions. */
static void reap_polling(Fixture *f, VhostUserFrontendCompletion *comp,
                         int n)
{
    int got = 0;

    for (int spins = 0; got < n && spins < 100000; spins++) {
        int r = vhost_user_frontend_reap(f->fe, 0, comp + got, n - got);

        g_assert_cmpint(r, >=, 0);
        got += r;
        if (!r) {
            g_usleep(100);
        }
    }
    g_assert_cmpint(got, ==, n);
}

/*
 * A driver that polls its used ring (interrupts off, as Linux's poll
 * queues) is seen as one after a ring's worth of completions, and no
 * longer once it asks for an interrupt again.
 */
static void test_driver_polls(Fixture *f, gconstpointer data)
{
    VhostUserFrontendCompletion comp[32];
    unsigned int size = vhost_user_frontend_queue_size(f->fe);
    uint64_t done = 0;

    if (f->skip) {
        return;
    }
    vhost_user_frontend_set_interrupts(f->fe, false);
    while (done < 2 * size) {
        for (int i = 0; i < 32; i++) {
            struct iovec iov = { f->buf + i * 4096, 4096 };

            g_assert_cmpint(vhost_user_frontend_blk_submit(
                                f->fe, 0, VIRTIO_BLK_T_IN, i * 8, &iov, 1,
                                true, NULL), >=, 0);
        }
        g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
        reap_polling(f, comp, 32);
        done += 32;
    }
    g_assert_cmpuint(daemon_polling_drivers(f, done), ==, 1);

    /*
     * Interrupts back on.  The first request's completion may be pushed
     * before the driver asks for it (it asks when it finds nothing to
     * reap), but its reap asks for the next one before the second request
     * is made available: that completion is wanted.
     */
    vhost_user_frontend_set_interrupts(f->fe, true);
    for (int i = 0; i < 2; i++) {
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 4096,
                               true, NULL), ==, VIRTIO_BLK_S_OK);
        done++;
    }
    g_assert_cmpuint(daemon_polling_drivers(f, done), ==, 0);
}

/*
 * A convoy that reaches a queue with nothing in flight is popped as a
 * first batch of first-batch= requests (their completions and interrupt
 * go out first) and then the rest: two batches per convoy, one with
 * first-batch=0.  The driver publishes each convoy with one store
 * (avail->idx, or the first head's flags of a packed ring), so the counts
 * are exact.
 */
static void test_first_batch(Fixture *f, gconstpointer data)
{
    const IoCase *c = data;
    VhostUserFrontendCompletion comp[32];

    if (f->skip) {
        return;
    }
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 32; i++) {
            struct iovec iov = { f->buf + i * 4096, 4096 };

            g_assert_cmpint(vhost_user_frontend_blk_submit(
                                f->fe, 0, VIRTIO_BLK_T_IN, i * 8, &iov, 1,
                                true, GINT_TO_POINTER(i + 1)), >=, 0);
        }
        g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
        g_assert_cmpint(vb_reap_n(f->fe, 0, comp, 32), ==, 32);
        for (int i = 0; i < 32; i++) {
            g_assert_cmpint(comp[i].status, ==, VIRTIO_BLK_S_OK);
        }
    }
    g_assert_cmpuint(daemon_batches(f), ==,
                     strstr(c->spec.extra ? c->spec.extra : "",
                            "first-batch=0") ? 3 : 6);
}

static void test_flush(Fixture *f, gconstpointer data)
{
    if (f->skip) {
        return;
    }
    g_assert_true(vhost_user_frontend_has_feature(f->fe, VIRTIO_BLK_F_FLUSH));
    vb_fill_pattern(f->buf, 4096, 6);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 8, f->buf, 4096,
                           false, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0,
                           false, NULL), ==, VIRTIO_BLK_S_OK);
}

static void test_get_id(Fixture *f, gconstpointer data)
{
    const IoCase *c = data;
    char id[VIRTIO_BLK_ID_BYTES + 1] = "";

    if (f->skip) {
        return;
    }
    memset(f->buf, 0xaa, VIRTIO_BLK_ID_BYTES);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_GET_ID, 0, f->buf,
                           VIRTIO_BLK_ID_BYTES, true, NULL), ==,
                    VIRTIO_BLK_S_OK);
    memcpy(id, f->buf, VIRTIO_BLK_ID_BYTES);
    /* shorter ids are NUL-padded */
    g_assert_cmpstr(id, ==, c->spec.serial);
    for (size_t i = strlen(c->spec.serial); i < VIRTIO_BLK_ID_BYTES; i++) {
        g_assert_cmpint(f->buf[i], ==, 0);
    }
}

static void fill_seg(struct virtio_blk_discard_write_zeroes *seg,
                     uint64_t sector, uint32_t n, uint32_t flags)
{
    seg->sector = sector;
    seg->num_sectors = n;
    seg->flags = flags;
}

static void test_discard(Fixture *f, gconstpointer data)
{
    struct virtio_blk_discard_write_zeroes *seg;
    uint8_t *img = g_malloc(3 * 65536);

    if (f->skip) {
        g_free(img);
        return;
    }
    g_assert_true(vhost_user_frontend_has_feature(f->fe,
                                                  VIRTIO_BLK_F_DISCARD));
    vb_fill_pattern(f->buf, 3 * 65536, 7);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 512, f->buf,
                           3 * 65536, false, NULL), ==, VIRTIO_BLK_S_OK);
    seg = (void *)(f->buf + 4 * 65536);
    fill_seg(seg, 512 + 128, 128, 0);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_DISCARD, 0, seg,
                           sizeof(*seg), false, NULL), ==, VIRTIO_BLK_S_OK);
    /* what was around the discarded range is untouched; the range itself
     * is unspecified after a discard */
    vb_read_image(&f->d, 0, 512 * 512, img, 3 * 65536);
    g_assert_cmpmem(img, 65536, f->buf, 65536);
    g_assert_cmpmem(img + 2 * 65536, 65536, f->buf + 2 * 65536, 65536);
    g_free(img);
}

static void test_write_zeroes(Fixture *f, gconstpointer data)
{
    struct virtio_blk_discard_write_zeroes *seg;
    uint8_t *img = g_malloc(3 * 65536);
    uint8_t *zero = g_malloc0(65536);

    if (f->skip) {
        goto out;
    }
    g_assert_true(vhost_user_frontend_has_feature(f->fe,
                                                  VIRTIO_BLK_F_WRITE_ZEROES));
    for (int unmap = 0; unmap <= 1; unmap++) {
        uint64_t base = 2048 + unmap * 1024;

        vb_fill_pattern(f->buf, 3 * 65536, 8 + unmap);
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, base, f->buf,
                               3 * 65536, false, NULL), ==, VIRTIO_BLK_S_OK);
        seg = (void *)(f->buf + 4 * 65536);
        fill_seg(seg, base + 128, 128,
                 unmap ? VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP : 0);
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_WRITE_ZEROES, 0, seg,
                               sizeof(*seg), false, NULL), ==,
                        VIRTIO_BLK_S_OK);
        vb_read_image(&f->d, 0, base * 512, img, 3 * 65536);
        g_assert_cmpmem(img, 65536, f->buf, 65536);
        g_assert_cmpmem(img + 65536, 65536, zero, 65536);
        g_assert_cmpmem(img + 2 * 65536, 65536, f->buf + 2 * 65536, 65536);
        /* and through the device */
        memset(f->buf + 5 * 65536, 0xee, 65536);
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, base + 128,
                               f->buf + 5 * 65536, 65536, true, NULL), ==,
                        VIRTIO_BLK_S_OK);
        g_assert_cmpmem(f->buf + 5 * 65536, 65536, zero, 65536);
    }
out:
    g_free(img);
    g_free(zero);
}

static void test_discard_two_segments(Fixture *f, gconstpointer data)
{
    struct virtio_blk_discard_write_zeroes *seg;
    struct virtio_blk_config cfg;
    g_autoptr(GError) err = NULL;
    uint8_t *img = g_malloc(8192);

    if (f->skip) {
        g_free(img);
        return;
    }
    vhost_user_frontend_get_blk_config(f->fe, &cfg, &err);
    g_assert_no_error(err);
    /* precondition: the device accepts one segment per request */
    g_assert_cmpuint(cfg.max_discard_seg, ==, 1);
    vb_fill_pattern(f->buf, 8192, 10);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 100, f->buf, 8192,
                           false, NULL), ==, VIRTIO_BLK_S_OK);
    seg = (void *)(f->buf + 65536);
    fill_seg(&seg[0], 100, 8, 0);
    fill_seg(&seg[1], 108, 8, 0);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_DISCARD, 0, seg,
                           2 * sizeof(*seg), false, NULL), ==,
                    VIRTIO_BLK_S_UNSUPP);
    /* same for write-zeroes: nothing happened to the data */
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_WRITE_ZEROES, 0, seg,
                           2 * sizeof(*seg), false, NULL), ==,
                    VIRTIO_BLK_S_UNSUPP);
    vb_read_image(&f->d, 0, 100 * 512, img, 8192);
    g_assert_true(vb_check_pattern(img, 8192, 10));
    g_free(img);
}

static void test_unsupported_type(Fixture *f, gconstpointer data)
{
    if (f->skip) {
        return;
    }
    g_assert_cmpint(vb_req(f->fe, 0, 0x7f, 0, f->buf, 512, true, NULL), ==,
                    VIRTIO_BLK_S_UNSUPP);
    g_assert_cmpint(vb_req(f->fe, 0, 0x7f, 0, NULL, 0, false, NULL), ==,
                    VIRTIO_BLK_S_UNSUPP);
    /* the queue still works */
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
}

static void test_past_end(Fixture *f, gconstpointer data)
{
    uint64_t cap = f->d.spec[0].size / 512;
    uint8_t *img = g_malloc(4096);

    if (f->skip) {
        g_free(img);
        return;
    }
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, cap, f->buf, 512,
                           true, NULL), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, cap, f->buf, 512,
                           false, NULL), ==, VIRTIO_BLK_S_IOERR);
    /* straddling the end */
    vb_fill_pattern(f->buf, 4096, 11);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, cap - 4, f->buf,
                           4096, false, NULL), ==, VIRTIO_BLK_S_IOERR);
    /* sector numbers that overflow when turned into bytes */
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, UINT64_MAX / 256,
                           f->buf, 512, true, NULL), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, UINT64_MAX, f->buf,
                           512, true, NULL), ==, VIRTIO_BLK_S_IOERR);
    /* the image did not grow and its end was not written */
    {
        struct stat st;
        g_assert_cmpint(stat(f->d.image[0], &st), ==, 0);
        g_assert_cmpint(st.st_size, ==, f->d.spec[0].size);
    }
    vb_read_image(&f->d, 0, f->d.spec[0].size - 2048, img, 2048);
    for (int i = 0; i < 2048; i++) {
        g_assert_cmpint(img[i], ==, 0);
    }
    g_free(img);
}

static void test_readonly(Fixture *f, gconstpointer data)
{
    struct virtio_blk_discard_write_zeroes *seg;
    uint8_t *img = g_malloc(4096);
    int st;

    if (f->skip) {
        g_free(img);
        return;
    }
    g_assert_true(vhost_user_frontend_has_feature(f->fe, VIRTIO_BLK_F_RO));
    vb_fill_pattern(f->buf, 4096, 12);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 0, f->buf, 4096,
                           false, NULL), ==, VIRTIO_BLK_S_IOERR);
    seg = (void *)(f->buf + 65536);
    fill_seg(seg, 0, 8, 0);
    st = vb_req(f->fe, 0, VIRTIO_BLK_T_DISCARD, 0, seg, sizeof(*seg), false,
                NULL);
    g_assert_true(st == VIRTIO_BLK_S_IOERR || st == VIRTIO_BLK_S_UNSUPP);
    fill_seg(seg, 0, 8, 0);
    st = vb_req(f->fe, 0, VIRTIO_BLK_T_WRITE_ZEROES, 0, seg, sizeof(*seg),
                false, NULL);
    g_assert_true(st == VIRTIO_BLK_S_IOERR || st == VIRTIO_BLK_S_UNSUPP);
    vb_read_image(&f->d, 0, 0, img, 4096);
    for (int i = 0; i < 4096; i++) {
        g_assert_cmpint(img[i], ==, 0);
    }
    /* reads work */
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 4096,
                           true, NULL), ==, VIRTIO_BLK_S_OK);
    g_free(img);
}

/* ---- config space ---- */

static void get_cfg(Fixture *f, struct virtio_blk_config *cfg)
{
    g_autoptr(GError) err = NULL;

    vhost_user_frontend_get_blk_config(f->fe, cfg, &err);
    g_assert_no_error(err);
}

static void test_config_basic(Fixture *f, gconstpointer data)
{
    struct virtio_blk_config cfg;
    g_autoptr(GError) err = NULL;

    if (f->skip) {
        return;
    }
    get_cfg(f, &cfg);
    g_assert_cmpuint(cfg.capacity, ==, f->d.spec[0].size / 512);
    g_assert_true(vhost_user_frontend_has_feature(f->fe, VIRTIO_BLK_F_SEG_MAX));
    g_assert_cmpuint(cfg.seg_max, >=, 1);
    /* the largest ring the device takes is 1024 (QEMU's limit too) */
    g_assert_cmpuint(cfg.seg_max, <=, 1024 - 2);
    g_assert_true(vhost_user_frontend_has_feature(f->fe, VIRTIO_BLK_F_MQ));
    g_assert_cmpuint(cfg.num_queues, ==, f->d.spec[0].num_queues);
    g_assert_cmpuint(vhost_user_frontend_get_queue_num(f->fe, &err), ==,
                     f->d.spec[0].num_queues);
    g_assert_no_error(err);
    g_assert_true(vhost_user_frontend_has_feature(f->fe,
                                                  VIRTIO_BLK_F_CONFIG_WCE));
    g_assert_cmpuint(cfg.wce, <=, 1);
    if (vhost_user_frontend_has_feature(f->fe, VIRTIO_BLK_F_BLK_SIZE)) {
        g_assert_cmpuint(cfg.blk_size, ==, 512);
    }
    /* a partial read at an offset agrees with the whole */
    {
        uint32_t nq = 0;
        vhost_user_frontend_get_config(
            f->fe, offsetof(struct virtio_blk_config, num_queues), &nq, 2,
            &err);
        g_assert_no_error(err);
        g_assert_cmpuint(nq, ==, cfg.num_queues);
    }
}

static void test_config_blk_size(Fixture *f, gconstpointer data)
{
    struct virtio_blk_config cfg;
    uint32_t len;

    if (f->skip) {
        return;
    }
    g_assert_true(vhost_user_frontend_has_feature(f->fe, VIRTIO_BLK_F_BLK_SIZE));
    get_cfg(f, &cfg);
    g_assert_cmpuint(cfg.blk_size, ==, 4096);
    g_assert_cmpuint(cfg.capacity, ==, f->d.spec[0].size / 512);
    /* an aligned 4 KiB request works; capacity stays in 512-byte units */
    vb_fill_pattern(f->buf, 4096, 13);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 8, f->buf, 4096,
                           false, &len), ==, VIRTIO_BLK_S_OK);
    memset(f->buf, 0, 4096);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 8, f->buf, 4096,
                           true, &len), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(f->buf, 4096, 13));
}

static void test_config_writeback(Fixture *f, gconstpointer data)
{
    struct virtio_blk_config cfg;
    g_autoptr(GError) err = NULL;
    uint8_t wce;

    if (f->skip) {
        return;
    }
    g_assert_true(vhost_user_frontend_has_feature(f->fe,
                                                  VIRTIO_BLK_F_CONFIG_WCE));
    for (int round = 0; round < 2; round++) {
        for (wce = 0; wce <= 1; wce++) {
            vhost_user_frontend_set_config(
                f->fe, offsetof(struct virtio_blk_config, wce), &wce, 1, &err);
            g_assert_no_error(err);
            get_cfg(f, &cfg);
            g_assert_cmpuint(cfg.wce, ==, wce);
            /* I/O still works in either mode */
            vb_fill_pattern(f->buf, 4096, 20 + wce);
            g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 16, f->buf,
                                   4096, false, NULL), ==, VIRTIO_BLK_S_OK);
        }
    }
}

static IoCase case_plain = { .spec = { .num_queues = 1 } };
static IoCase case_regions = { .spec = { .num_queues = 1 }, .mem_regions = 2 };
static IoCase case_add_mem_reg = {
    .spec = { .num_queues = 1 }, .mem_regions = 2, .use_add_mem_reg = true,
};
static IoCase case_serial = {
    .spec = { .num_queues = 1, .serial = "vb-serial-42" }, .blkd_only = true,
};
static IoCase case_discard = {
    .spec = { .num_queues = 1, .discard = "on", .write_zeroes = "on" },
};
static IoCase case_ro = { .spec = { .num_queues = 1, .readonly = true } };
static IoCase case_packed = { .spec = { .num_queues = 1 }, .packed = true };
static IoCase case_packed_discard = {
    .spec = { .num_queues = 1, .discard = "on", .write_zeroes = "on" },
    .packed = true,
};
static IoCase case_mq2 = { .spec = { .num_queues = 2 } };
static IoCase case_null = {
    .spec = { .num_queues = 1, .null_driver = true }, .blkd_only = true,
    .stderr_to_log = true,
};
static IoCase case_null_fb0 = {
    .spec = { .num_queues = 1, .null_driver = true,
              .extra = "first-batch=0" },
    .blkd_only = true, .stderr_to_log = true,
};
static IoCase case_null_packed = {
    .spec = { .num_queues = 1, .null_driver = true }, .blkd_only = true,
    .packed = true, .stderr_to_log = true,
};
static IoCase case_4k = {
    .spec = { .num_queues = 1, .logical_block_size = 4096 },
};

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    /* a failed check marks its case failed and the program goes on: the
     * fixture teardown kills the daemon and the other cases still run */
    g_test_set_nonfatal_assertions();
#define ADD(name, c, fn) \
    g_test_add("/vhost-blkd/" name, Fixture, &c, fixture_setup, fn, \
               fixture_teardown)
    ADD("io/read-write", case_plain, test_read_write);
    ADD("io/two-regions", case_regions, test_two_regions);
    ADD("io/add-mem-reg", case_add_mem_reg, test_two_regions);
    ADD("io/batch", case_plain, test_batch);
    ADD("io/first-batch", case_null, test_first_batch);
    ADD("io/first-batch-off", case_null_fb0, test_first_batch);
    ADD("io/packed/first-batch", case_null_packed, test_first_batch);
    ADD("io/driver-polls", case_null, test_driver_polls);
    ADD("io/packed/driver-polls", case_null_packed, test_driver_polls);
    ADD("io/flush", case_plain, test_flush);
    ADD("io/get-id", case_serial, test_get_id);
    ADD("io/discard", case_discard, test_discard);
    ADD("io/write-zeroes", case_discard, test_write_zeroes);
    ADD("io/discard-two-segments", case_discard, test_discard_two_segments);
    ADD("io/unsupported-type", case_plain, test_unsupported_type);
    ADD("io/past-end", case_plain, test_past_end);
    ADD("io/readonly", case_ro, test_readonly);
    ADD("io/packed/read-write", case_packed, test_read_write);
    ADD("io/packed/batch", case_packed, test_batch);
    ADD("io/packed/flush", case_packed, test_flush);
    ADD("io/packed/discard", case_packed_discard, test_discard);
    ADD("io/packed/write-zeroes", case_packed_discard, test_write_zeroes);
    ADD("io/packed/past-end", case_packed, test_past_end);
    ADD("config/basic", case_mq2, test_config_basic);
    ADD("config/blk-size-4096", case_4k, test_config_blk_size);
    ADD("config/writeback-toggle", case_plain, test_config_writeback);
#undef ADD
    return g_test_run();
}
