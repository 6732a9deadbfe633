/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for transport-neutral virtio-blk request processing: requests
 * are built as plain iovecs and completed by running the event loop.
 */
#include "qemu/osdep.h"
#include <sys/stat.h>
#include "qemu/aio.h"
#include "hw/block/virtio-blk.h"
#include "block/file.h"
#include "block/null.h"

#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#define DISK_SIZE (16 * 1024 * 1024)
#define SERIAL "vb-serial-0001"

static AioContext *ctx;
static char *tmpdir;

typedef enum TestBackend {
    TEST_NULL,
    TEST_FILE,
} TestBackend;

typedef struct TestDisk {
    BlockBackend *blk;
    VirtioBlkDev dev;
    char *path;
} TestDisk;

typedef struct TestReq {
    VirtioBlkReq req;
    bool done;
    uint8_t status;
    uint32_t in_len;
} TestReq;

static void test_disk_open_full(TestDisk *d, TestBackend backend,
                                bool readonly, uint32_t lbs, bool discard)
{
    VirtioBlkConf conf = {
        .logical_block_size = lbs,
        .num_queues = 4,
        .queue_size = 256,
        .seg_max = 126,
        .readonly = readonly,
        .discard = discard,
        .write_zeroes = true,
    };
    BlockOptions opts;
    BlockFileOptions fo;
    BlockNullOptions no;
    GError *err = NULL;

    memset(d, 0, sizeof(*d));
    g_strlcpy(conf.serial, SERIAL, sizeof(conf.serial));
    blk_options_init(&opts);
    if (backend == TEST_NULL) {
        blk_null_options(&opts, &no, DISK_SIZE, true);
    } else {
        int fd;

        d->path = g_build_filename(tmpdir, "disk.img", NULL);
        fd = open(d->path, O_CREAT | O_RDWR, 0600);
        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(ftruncate(fd, DISK_SIZE), ==, 0);
        close(fd);
        opts.driver = "file";
        blk_file_options(&opts, &fo, d->path);
        opts.cache_direct = false;
        fo.aio = BLOCK_AIO_THREADS;
    }
    opts.readonly = readonly;
    d->blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    g_assert_true(virtio_blk_dev_init(&d->dev, d->blk, &conf, &err));
    g_assert_no_error(err);
}

static void test_disk_open(TestDisk *d, TestBackend backend, bool readonly)
{
    test_disk_open_full(d, backend, readonly, 512, true);
}

static void test_disk_close(TestDisk *d)
{
    blk_close(d->blk);
    if (d->path) {
        unlink(d->path);
        g_free(d->path);
    }
}

static void test_req_done(VirtioBlkReq *req, uint8_t status, uint32_t in_len,
                          void *opaque)
{
    TestReq *r = opaque;

    g_assert_true(&r->req == req);
    g_assert_false(r->done);
    r->done = true;
    r->status = status;
    r->in_len = in_len;
}

/* Submit and run the loop until the request completed. */
static void test_run(TestDisk *d, TestReq *r, struct iovec *out,
                     unsigned out_num, struct iovec *in, unsigned in_num)
{
    memset(r, 0, sizeof(*r));
    virtio_blk_process_req(&d->dev, &r->req, out, out_num, in, in_num,
                           test_req_done, r);
    while (!r->done) {
        aio_poll(ctx, true);
    }
}

static void test_hdr(struct virtio_blk_outhdr *hdr, uint32_t type,
                     uint64_t sector)
{
    hdr->type = GUINT32_TO_LE(type);
    hdr->ioprio = 0;
    hdr->sector = GUINT64_TO_LE(sector);
}

/* A request with a header, optional out payload, optional in data and a
 * status byte in an iovec of its own.  Returns the status. */
static uint8_t test_simple(TestDisk *d, uint32_t type, uint64_t sector,
                           void *out_data, size_t out_len,
                           void *in_data, size_t in_len, uint32_t *used_len)
{
    struct virtio_blk_outhdr hdr;
    uint8_t status = 0xaa;
    struct iovec out[2] = {
        { &hdr, sizeof(hdr) }, { out_data, out_len },
    };
    struct iovec in[2] = {
        { in_data, in_len }, { &status, 1 },
    };
    TestReq r;

    test_hdr(&hdr, type, sector);
    test_run(d, &r, out, out_len ? 2 : 1, in_len ? in : in + 1,
             in_len ? 2 : 1);
    g_assert_cmpint(status, ==, r.status);
    if (used_len) {
        *used_len = r.in_len;
    }
    return r.status;
}

static uint8_t test_dwz(TestDisk *d, uint32_t type, uint64_t sector,
                        uint32_t nsectors, uint32_t flags, unsigned nseg)
{
    struct virtio_blk_discard_write_zeroes seg[2];
    unsigned i;

    for (i = 0; i < 2; i++) {
        seg[i].sector = GUINT64_TO_LE(sector + i * nsectors);
        seg[i].num_sectors = GUINT32_TO_LE(nsectors);
        seg[i].flags = GUINT32_TO_LE(flags);
    }
    return test_simple(d, type, 0, seg, nseg * sizeof(seg[0]), NULL, 0,
                       NULL);
}

static void test_config(void)
{
    struct virtio_blk_config cfg;
    TestDisk d;

    test_disk_open(&d, TEST_NULL, false);
    virtio_blk_get_config(&d.dev, &cfg);
    g_assert_cmpuint(GUINT64_FROM_LE(cfg.capacity), ==, DISK_SIZE / 512);
    g_assert_cmpuint(cfg.size_max, ==, 0);
    g_assert_cmpuint(GUINT32_FROM_LE(cfg.seg_max), ==, 126);
    g_assert_cmpuint(GUINT32_FROM_LE(cfg.blk_size), ==, 512);
    g_assert_cmpuint(cfg.physical_block_exp, ==, 0);
    g_assert_cmpuint(cfg.alignment_offset, ==, 0);
    g_assert_cmpuint(GUINT16_FROM_LE(cfg.min_io_size), ==, 1);
    g_assert_cmpuint(cfg.opt_io_size, ==, 0);
    g_assert_cmpuint(cfg.wce, ==, 1);
    g_assert_cmpuint(GUINT16_FROM_LE(cfg.num_queues), ==, 4);
    g_assert_cmpuint(GUINT32_FROM_LE(cfg.max_discard_sectors), ==,
                     VIRTIO_BLK_MAX_DISCARD_SECTORS);
    g_assert_cmpuint(GUINT32_FROM_LE(cfg.max_discard_seg), ==, 1);
    g_assert_cmpuint(GUINT32_FROM_LE(cfg.discard_sector_alignment), ==, 1);
    g_assert_cmpuint(GUINT32_FROM_LE(cfg.max_write_zeroes_sectors), ==,
                     VIRTIO_BLK_MAX_DISCARD_SECTORS);
    g_assert_cmpuint(GUINT32_FROM_LE(cfg.max_write_zeroes_seg), ==, 1);
    g_assert_cmpuint(cfg.write_zeroes_may_unmap, ==, 1);

    /* the driver turns the write cache off: only wce is writable */
    {
        uint8_t zero = 0, four[4] = { 0 };

        g_assert_true(virtio_blk_set_config(&d.dev, &zero,
                      offsetof(struct virtio_blk_config, wce), 1));
        virtio_blk_get_config(&d.dev, &cfg);
        g_assert_cmpuint(cfg.wce, ==, 0);
        g_assert_false(virtio_blk_set_config(&d.dev, four, 0, 4));
        g_assert_false(virtio_blk_set_config(&d.dev, four,
                       offsetof(struct virtio_blk_config, wce), 2));
        g_assert_cmpuint(GUINT64_FROM_LE(cfg.capacity), ==, DISK_SIZE / 512);
    }
    test_disk_close(&d);

    /* 4K logical blocks */
    test_disk_open_full(&d, TEST_NULL, false, 4096, true);
    virtio_blk_get_config(&d.dev, &cfg);
    g_assert_cmpuint(GUINT32_FROM_LE(cfg.blk_size), ==, 4096);
    g_assert_cmpuint(GUINT32_FROM_LE(cfg.discard_sector_alignment), ==, 8);
    g_assert_cmpuint(GUINT32_FROM_LE(cfg.max_discard_sectors) % 8, ==, 0);
    g_assert_cmpuint(GUINT64_FROM_LE(cfg.capacity), ==, DISK_SIZE / 512);
    test_disk_close(&d);
}

static blkcnt_t test_disk_blocks(TestDisk *d)
{
    struct stat st;

    g_assert_cmpint(stat(d->path, &st), ==, 0);
    return st.st_blocks;
}

/*
 * write_zeroes_may_unmap promises that WRITE_ZEROES with UNMAP may
 * deallocate: only true when the export may discard (discard=on and a
 * backing that can).  Without it, UNMAP must not punch holes either.
 */
static void test_config_may_unmap(void)
{
    g_autofree uint8_t *buf = g_malloc(65536);
    struct virtio_blk_config cfg;
    blkcnt_t before;
    TestDisk d;

    test_disk_open_full(&d, TEST_NULL, false, 512, true);
    virtio_blk_get_config(&d.dev, &cfg);
    g_assert_cmpuint(cfg.write_zeroes_may_unmap, ==, 1);
    test_disk_close(&d);

    test_disk_open_full(&d, TEST_NULL, false, 512, false);
    virtio_blk_get_config(&d.dev, &cfg);
    g_assert_cmpuint(cfg.write_zeroes_may_unmap, ==, 0);
    test_disk_close(&d);

    /* discard=off: an UNMAP write-zeroes zeroes but keeps the blocks */
    test_disk_open_full(&d, TEST_FILE, false, 512, false);
    memset(buf, 0x5a, 65536);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, 1024, buf, 65536, NULL,
                                0, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_OK);
    before = test_disk_blocks(&d);
    g_assert_cmpint(before, >=, 128);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_WRITE_ZEROES, 1024, 128,
                             VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP, 1), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_cmpint(test_disk_blocks(&d), ==, before);
    memset(buf, 0xee, 65536);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_IN, 1024, NULL, 0, buf,
                                65536, NULL), ==, VIRTIO_BLK_S_OK);
    for (unsigned i = 0; i < 65536; i++) {
        g_assert_cmpint(buf[i], ==, 0);
    }
    test_disk_close(&d);
}

static void test_config_bad(void)
{
    VirtioBlkConf conf = { .logical_block_size = 1000, .num_queues = 1 };
    BlockOptions opts;
    BlockNullOptions no;
    VirtioBlkDev dev;
    BlockBackend *blk;
    GError *err = NULL;

    blk_options_init(&opts);
    blk_null_options(&opts, &no, DISK_SIZE, false);
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    g_assert_false(virtio_blk_dev_init(&dev, blk, &conf, &err));
    g_assert_nonnull(err);
    g_test_message("%s", err->message);
    g_clear_error(&err);
    conf.logical_block_size = 512;
    conf.seg_max = 100000;
    g_assert_false(virtio_blk_dev_init(&dev, blk, &conf, &err));
    g_clear_error(&err);
    conf.seg_max = 0;
    conf.num_queues = 0;
    g_assert_false(virtio_blk_dev_init(&dev, blk, &conf, &err));
    g_clear_error(&err);
    blk_close(blk);
}

static void test_features(void)
{
    TestDisk d;
    uint64_t f, want;

    want = (1ull << VIRTIO_F_VERSION_1) |
           (1ull << VIRTIO_RING_F_INDIRECT_DESC) |
           (1ull << VIRTIO_RING_F_EVENT_IDX) | (1ull << VIRTIO_F_RING_PACKED) |
           (1ull << VIRTIO_BLK_F_SEG_MAX) | (1ull << VIRTIO_BLK_F_BLK_SIZE) |
           (1ull << VIRTIO_BLK_F_TOPOLOGY) | (1ull << VIRTIO_BLK_F_FLUSH) |
           (1ull << VIRTIO_BLK_F_CONFIG_WCE) | (1ull << VIRTIO_BLK_F_MQ);

    test_disk_open(&d, TEST_NULL, false);
    f = virtio_blk_get_features(&d.dev);
    g_assert_cmphex(f, ==, want | (1ull << VIRTIO_BLK_F_DISCARD) |
                    (1ull << VIRTIO_BLK_F_WRITE_ZEROES));
    g_assert_false(f & (1ull << 30));   /* added by the vhost-user server */
    test_disk_close(&d);

    test_disk_open_full(&d, TEST_NULL, false, 512, false);
    f = virtio_blk_get_features(&d.dev);
    g_assert_cmphex(f, ==, want | (1ull << VIRTIO_BLK_F_WRITE_ZEROES));
    test_disk_close(&d);

    test_disk_open(&d, TEST_NULL, true);
    f = virtio_blk_get_features(&d.dev);
    g_assert_true(f & (1ull << VIRTIO_BLK_F_RO));
    g_assert_false(f & (1ull << VIRTIO_BLK_F_DISCARD));
    test_disk_close(&d);
}

static void test_read_write(gconstpointer data)
{
    TestBackend backend = GPOINTER_TO_INT(data);
    g_autofree uint8_t *wbuf = g_malloc(8192);
    g_autofree uint8_t *rbuf = g_malloc(8192);
    uint32_t used;
    TestDisk d;
    unsigned i;

    for (i = 0; i < 8192; i++) {
        wbuf[i] = i * 7 + 3;
    }
    test_disk_open(&d, backend, false);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, 8, wbuf, 8192, NULL, 0,
                                &used), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(used, ==, 1);
    memset(rbuf, 0xee, 8192);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_IN, 8, NULL, 0, rbuf, 8192,
                                &used), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(used, ==, 8193);
    if (backend == TEST_FILE) {
        g_assert_cmpmem(rbuf, 8192, wbuf, 8192);
    } else {
        for (i = 0; i < 8192; i++) {
            g_assert_cmpuint(rbuf[i], ==, 0);
        }
    }

    /* the last sector of the disk */
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, DISK_SIZE / 512 - 1,
                                wbuf, 512, NULL, 0, NULL), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_IN, DISK_SIZE / 512 - 1,
                                NULL, 0, rbuf, 512, NULL), ==,
                    VIRTIO_BLK_S_OK);
    test_disk_close(&d);
}

/* Header split over three iovecs, data sharing the last one; read data
 * and status in one iovec. */
static void test_split_layout(void)
{
    struct virtio_blk_outhdr hdr;
    uint8_t *flat = g_malloc(sizeof(hdr) + 1024);
    uint8_t *in = g_malloc(1024 + 1);
    struct iovec out[3], iv[1];
    TestReq r;
    TestDisk d;
    unsigned i;

    test_disk_open(&d, TEST_FILE, false);
    test_hdr(&hdr, VIRTIO_BLK_T_OUT, 2);
    memcpy(flat, &hdr, sizeof(hdr));
    for (i = 0; i < 1024; i++) {
        flat[sizeof(hdr) + i] = i ^ 0x5a;
    }
    out[0] = (struct iovec){ flat, 5 };
    out[1] = (struct iovec){ flat + 5, 7 };
    out[2] = (struct iovec){ flat + 12, sizeof(hdr) - 12 + 1024 };
    iv[0] = (struct iovec){ in, 1 };
    test_run(&d, &r, out, 3, iv, 1);
    g_assert_cmpint(r.status, ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(r.in_len, ==, 1);
    g_assert_cmpint(in[0], ==, VIRTIO_BLK_S_OK);

    test_hdr(&hdr, VIRTIO_BLK_T_IN, 2);
    out[0] = (struct iovec){ &hdr, sizeof(hdr) };
    memset(in, 0xff, 1025);
    iv[0] = (struct iovec){ in, 1025 };
    test_run(&d, &r, out, 1, iv, 1);
    g_assert_cmpint(r.status, ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(r.in_len, ==, 1025);
    g_assert_cmpmem(in, 1024, flat + sizeof(hdr), 1024);
    g_assert_cmpint(in[1024], ==, VIRTIO_BLK_S_OK);
    test_disk_close(&d);
    g_free(flat);
    g_free(in);
}

static void test_writethrough(void)
{
    g_autofree uint8_t *wbuf = g_malloc(4096);
    g_autofree uint8_t *rbuf = g_malloc(4096);
    uint8_t wce = 0;
    TestDisk d;

    BlockEngineStats st0, st1;

    memset(wbuf, 0x3c, 4096);
    test_disk_open(&d, TEST_FILE, false);
    virtio_blk_set_features(&d.dev, virtio_blk_get_features(&d.dev));
    /* writeback: one request per write */
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, 16, wbuf, 4096, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(blk_engine_get_stats(ctx, BLOCK_AIO_THREADS, &st0));
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, 16, wbuf, 4096, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(blk_engine_get_stats(ctx, BLOCK_AIO_THREADS, &st1));
    g_assert_cmpuint(st1.requests - st0.requests, ==, 1);
    g_assert_cmpuint(st1.fua_writes - st0.fua_writes, ==, 0);

    /* writethrough: each write is one FUA (RWF_DSYNC) write, no flush */
    g_assert_true(virtio_blk_set_config(&d.dev, &wce,
                  offsetof(struct virtio_blk_config, wce), 1));
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, 16, wbuf, 4096, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(blk_engine_get_stats(ctx, BLOCK_AIO_THREADS, &st0));
    g_assert_cmpuint(st0.requests - st1.requests, ==, 1);
    g_assert_cmpuint(st0.fua_writes - st1.fua_writes, ==, 1);
    /* write-zeroes has no FUA: it is followed by a flush */
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_WRITE_ZEROES, 16, 1, 0, 1), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_true(blk_engine_get_stats(ctx, BLOCK_AIO_THREADS, &st1));
    g_assert_cmpuint(st1.requests - st0.requests, ==, 2);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_IN, 16, NULL, 0, rbuf, 4096,
                                NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(rbuf[0], ==, 0);
    g_assert_cmpint(rbuf[511], ==, 0);
    g_assert_cmpmem(rbuf + 512, 4096 - 512, wbuf + 512, 4096 - 512);
    test_disk_close(&d);
}

/* One 4K write at sector 0; the engine counters it moved. */
static void test_write_delta(TestDisk *d, BlockEngineStats *delta)
{
    g_autofree uint8_t *buf = g_malloc0(4096);
    BlockEngineStats a, b;

    /* the first request creates the engine instance */
    if (!blk_engine_get_stats(ctx, BLOCK_AIO_THREADS, &a)) {
        memset(&a, 0, sizeof(a));
    }
    g_assert_cmpint(test_simple(d, VIRTIO_BLK_T_OUT, 0, buf, 4096, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(blk_engine_get_stats(ctx, BLOCK_AIO_THREADS, &b));
    delta->requests = b.requests - a.requests;
    delta->fua_writes = b.fua_writes - a.fua_writes;
}

static uint8_t test_wce(TestDisk *d)
{
    struct virtio_blk_config cfg;

    virtio_blk_get_config(&d->dev, &cfg);
    return cfg.wce;
}

/*
 * The write cache follows the negotiation: a driver without FLUSH gets
 * writethrough (and sees writeback = 0), so does I/O before negotiation
 * and after a reset; the driver's own CONFIG_WCE choice is kept across
 * resets, like the copy of the config space the front-end keeps.
 */
static void test_write_cache_features(void)
{
    uint64_t all, no_flush;
    uint8_t wce = 0;
    BlockEngineStats d1;
    TestDisk d;

    test_disk_open(&d, TEST_FILE, false);
    all = virtio_blk_get_features(&d.dev);
    no_flush = all & ~((1ull << VIRTIO_BLK_F_FLUSH) |
                       (1ull << VIRTIO_BLK_F_CONFIG_WCE));

    /* before any negotiation: the config shows the default; I/O is
     * writethrough, since nobody promised to flush */
    g_assert_cmpuint(test_wce(&d), ==, 1);
    test_write_delta(&d, &d1);
    g_assert_cmpuint(d1.requests, ==, 1);
    g_assert_cmpuint(d1.fua_writes, ==, 1);

    /* a driver with FLUSH: writeback, plain writes */
    virtio_blk_set_features(&d.dev, all);
    g_assert_cmpuint(test_wce(&d), ==, 1);
    test_write_delta(&d, &d1);
    g_assert_cmpuint(d1.requests, ==, 1);
    g_assert_cmpuint(d1.fua_writes, ==, 0);

    /* a driver without FLUSH cannot flush a volatile cache */
    virtio_blk_reset(&d.dev);
    virtio_blk_set_features(&d.dev, no_flush);
    g_assert_cmpuint(test_wce(&d), ==, 0);
    test_write_delta(&d, &d1);
    g_assert_cmpuint(d1.requests, ==, 1);
    g_assert_cmpuint(d1.fua_writes, ==, 1);

    /* the next driver with FLUSH: writeback again */
    virtio_blk_reset(&d.dev);
    virtio_blk_set_features(&d.dev, all);
    g_assert_cmpuint(test_wce(&d), ==, 1);
    test_write_delta(&d, &d1);
    g_assert_cmpuint(d1.fua_writes, ==, 0);

    /* the driver chooses writethrough: kept across a reset, because the
     * front-end's copy of the config still says 0 to the next driver */
    g_assert_true(virtio_blk_set_config(&d.dev, &wce,
                  offsetof(struct virtio_blk_config, wce), 1));
    virtio_blk_reset(&d.dev);
    test_write_delta(&d, &d1);
    g_assert_cmpuint(d1.fua_writes, ==, 1);
    virtio_blk_set_features(&d.dev, all);
    g_assert_cmpuint(test_wce(&d), ==, 0);
    test_write_delta(&d, &d1);
    g_assert_cmpuint(d1.requests, ==, 1);
    g_assert_cmpuint(d1.fua_writes, ==, 1);

    /* and back to writeback when it asks */
    wce = 1;
    g_assert_true(virtio_blk_set_config(&d.dev, &wce,
                  offsetof(struct virtio_blk_config, wce), 1));
    g_assert_cmpuint(test_wce(&d), ==, 1);
    test_write_delta(&d, &d1);
    g_assert_cmpuint(d1.fua_writes, ==, 0);
    test_disk_close(&d);
}

static void test_flush(gconstpointer data)
{
    TestBackend backend = GPOINTER_TO_INT(data);
    uint32_t used;
    TestDisk d;

    test_disk_open(&d, backend, false);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, NULL, 0,
                                &used), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(used, ==, 1);
    test_disk_close(&d);
}

static void test_get_id(void)
{
    char id[32];
    uint32_t used;
    TestDisk d;

    test_disk_open(&d, TEST_NULL, false);
    memset(id, 0x55, sizeof(id));
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_GET_ID, 0, NULL, 0, id, 20,
                                &used), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(used, ==, 21);
    g_assert_cmpstr(id, ==, SERIAL);
    g_assert_cmpint(id[19], ==, 0);         /* zero padded */
    g_assert_cmpint(id[20], ==, 0x55);      /* untouched */

    /* a smaller buffer gets a prefix */
    memset(id, 0x55, sizeof(id));
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_GET_ID, 0, NULL, 0, id, 6,
                                &used), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(used, ==, 7);
    g_assert_cmpmem(id, 6, SERIAL, 6);
    g_assert_cmpint(id[6], ==, 0x55);

    /* a larger one: 20 bytes written, no more */
    memset(id, 0x55, sizeof(id));
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_GET_ID, 0, NULL, 0, id, 30,
                                &used), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(used, ==, 21);
    g_assert_cmpint(id[20], ==, 0x55);
    test_disk_close(&d);
}

static void test_discard_zeroes(gconstpointer data)
{
    TestBackend backend = GPOINTER_TO_INT(data);
    g_autofree uint8_t *buf = g_malloc(16384);
    TestDisk d;
    unsigned i;

    test_disk_open(&d, backend, false);
    memset(buf, 0xa5, 16384);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, 64, buf, 16384, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_OK);
    /* write-zeroes sectors 64..71, discard 80..87 (4K each) */
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_WRITE_ZEROES, 64, 8, 0, 1), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_DISCARD, 80, 8, 0, 1), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_WRITE_ZEROES, 88, 8,
                             VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP, 1), ==,
                    VIRTIO_BLK_S_OK);
    if (backend == TEST_FILE) {
        memset(buf, 0xee, 16384);
        g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_IN, 64, NULL, 0, buf,
                                    16384, NULL), ==, VIRTIO_BLK_S_OK);
        for (i = 0; i < 16384; i++) {
            /* sectors 72..79 keep the pattern, the rest reads zeroes */
            uint8_t want = (i >= 4096 && i < 8192) ? 0xa5 : 0;

            if (buf[i] != want) {
                g_error("byte %u: %#x, want %#x", i, buf[i], want);
            }
        }
    }
    test_disk_close(&d);
}

static void test_bad_requests(gconstpointer data)
{
    TestBackend backend = GPOINTER_TO_INT(data);
    g_autofree uint8_t *buf = g_malloc0(8192);
    uint64_t cap = DISK_SIZE / 512;
    uint32_t used;
    TestDisk d;

    test_disk_open(&d, backend, false);

    /* past the end, straddling the end, sector so big it would wrap */
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_IN, cap, NULL, 0, buf, 512,
                                &used), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(used, ==, 513);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, cap - 1, buf, 1024,
                                NULL, 0, NULL), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, UINT64_MAX / 256, buf,
                                1024, NULL, 0, NULL), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_IN, UINT64_MAX, NULL, 0, buf,
                                512, NULL), ==, VIRTIO_BLK_S_IOERR);
    /* not a multiple of 512 */
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, 0, buf, 1000, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_IN, 0, NULL, 0, buf, 513,
                                NULL), ==, VIRTIO_BLK_S_IOERR);
    /* unknown and not offered types */
    g_assert_cmpint(test_simple(&d, 99, 0, NULL, 0, buf, 512, NULL), ==,
                    VIRTIO_BLK_S_UNSUPP);
    g_assert_cmpint(test_simple(&d, 10 /* GET_LIFETIME */, 0, NULL, 0, buf,
                                16, NULL), ==, VIRTIO_BLK_S_UNSUPP);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_SECURE_ERASE, 0, buf, 16,
                                NULL, 0, NULL), ==, VIRTIO_BLK_S_UNSUPP);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT | 0x80000000u, 0, buf,
                                512, NULL, 0, NULL), ==, VIRTIO_BLK_S_UNSUPP);
    /* discard / write-zeroes payloads */
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_DISCARD, 0, 8, 0, 2), ==,
                    VIRTIO_BLK_S_UNSUPP);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_WRITE_ZEROES, 0, 8, 0, 2), ==,
                    VIRTIO_BLK_S_UNSUPP);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_DISCARD, 0, 8,
                             VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP, 1), ==,
                    VIRTIO_BLK_S_UNSUPP);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_WRITE_ZEROES, 0, 8, 2, 1), ==,
                    VIRTIO_BLK_S_UNSUPP);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_DISCARD, cap - 4, 8, 0, 1), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_WRITE_ZEROES, UINT64_MAX - 2,
                             8, 0, 1), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_DISCARD, 0, UINT32_MAX, 0, 1),
                    ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_DISCARD, 0, buf, 10, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_DISCARD, 0, NULL, 0, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_IOERR);
    test_disk_close(&d);

    /* 4K logical blocks: 512-byte aligned is not enough */
    test_disk_open_full(&d, backend, false, 4096, true);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_IN, 1, NULL, 0, buf, 4096,
                                NULL), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, 8, buf, 512, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_DISCARD, 4, 8, 0, 1), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, 8, buf, 4096, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_OK);
    test_disk_close(&d);
}

static void test_bad_layout(void)
{
    struct virtio_blk_outhdr hdr;
    uint8_t status = 0xaa, data[512];
    struct iovec out[2], in[2];
    TestReq r;
    TestDisk d;

    test_disk_open(&d, TEST_NULL, false);
    test_hdr(&hdr, VIRTIO_BLK_T_IN, 0);

    /* header too short: IOERR in the status byte */
    out[0] = (struct iovec){ &hdr, 10 };
    in[0] = (struct iovec){ &status, 1 };
    test_run(&d, &r, out, 1, in, 1);
    g_assert_cmpint(r.status, ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(status, ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(r.in_len, ==, 1);

    /* no header at all */
    status = 0xaa;
    test_run(&d, &r, NULL, 0, in, 1);
    g_assert_cmpint(status, ==, VIRTIO_BLK_S_IOERR);

    /* no writable byte: done with IOERR and length 0 */
    out[0] = (struct iovec){ &hdr, sizeof(hdr) };
    test_run(&d, &r, out, 1, NULL, 0);
    g_assert_cmpint(r.status, ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(r.in_len, ==, 0);
    /* only empty writable iovecs */
    in[0] = (struct iovec){ data, 0 };
    test_run(&d, &r, out, 1, in, 1);
    g_assert_cmpint(r.status, ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(r.in_len, ==, 0);

    /* status byte found before a trailing empty iovec */
    status = 0xaa;
    in[0] = (struct iovec){ &status, 1 };
    in[1] = (struct iovec){ data, 0 };
    test_hdr(&hdr, VIRTIO_BLK_T_FLUSH, 0);
    test_run(&d, &r, out, 1, in, 2);
    g_assert_cmpint(status, ==, VIRTIO_BLK_S_OK);
    test_disk_close(&d);
}

static void test_readonly(gconstpointer data)
{
    TestBackend backend = GPOINTER_TO_INT(data);
    g_autofree uint8_t *buf = g_malloc0(4096);
    TestDisk d;

    test_disk_open(&d, backend, true);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_OUT, 0, buf, 4096, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_DISCARD, 0, 8, 0, 1), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_dwz(&d, VIRTIO_BLK_T_WRITE_ZEROES, 0, 8, 0, 1), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_IN, 0, NULL, 0, buf, 4096,
                                NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, NULL, 0,
                                NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(test_simple(&d, VIRTIO_BLK_T_GET_ID, 0, NULL, 0, buf, 20,
                                NULL), ==, VIRTIO_BLK_S_OK);
    test_disk_close(&d);
}

static void add_backend_tests(const char *name, TestBackend backend)
{
    static const struct {
        const char *name;
        GTestDataFunc fn;
    } tests[] = {
        { "read-write", test_read_write },
        { "flush", test_flush },
        { "discard-write-zeroes", test_discard_zeroes },
        { "bad-requests", test_bad_requests },
        { "readonly", test_readonly },
    };
    unsigned i;

    for (i = 0; i < ARRAY_SIZE(tests); i++) {
        g_autofree char *path = g_strdup_printf("/virtio-blk/%s/%s", name,
                                                tests[i].name);
        g_test_add_data_func(path, GINT_TO_POINTER(backend), tests[i].fn);
    }
}

int main(int argc, char **argv)
{
    GError *err = NULL;
    int ret;

    g_test_init(&argc, &argv, NULL);
    tmpdir = g_strdup("/var/tmp/test-virtio-blk-XXXXXX");
    g_assert_nonnull(g_mkdtemp(tmpdir));
    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);

    g_test_add_func("/virtio-blk/config", test_config);
    g_test_add_func("/virtio-blk/config-bad", test_config_bad);
    g_test_add_func("/virtio-blk/config-may-unmap", test_config_may_unmap);
    g_test_add_func("/virtio-blk/features", test_features);
    g_test_add_func("/virtio-blk/get-id", test_get_id);
    g_test_add_func("/virtio-blk/layout/split", test_split_layout);
    g_test_add_func("/virtio-blk/layout/bad", test_bad_layout);
    g_test_add_func("/virtio-blk/file/writethrough", test_writethrough);
    g_test_add_func("/virtio-blk/file/write-cache-features",
                    test_write_cache_features);
    add_backend_tests("null", TEST_NULL);
    add_backend_tests("file", TEST_FILE);

    ret = g_test_run();
    aio_context_free(ctx);
    rmdir(tmpdir);
    g_free(tmpdir);
    return ret;
}
