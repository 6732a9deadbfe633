/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for the block layer's error injection (BlockOptions.inject):
 * option parsing, and per engine that matching requests complete later
 * (never inside the submitting call) with the chosen errno while every other
 * request reaches the file, driven step by step with aio_poll().
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "block/block.h"
#include "block/file.h"
#include "block/null.h"

#define FILE_SIZE (1024 * 1024)

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

static int req_wait(Req *r)
{
    g_assert_false(r->done);    /* never completed synchronously */
    while (!r->done) {
        aio_poll(ctx, true);
    }
    return r->ret;
}

static int do_read(BlockBackend *blk, int64_t off, void *buf, size_t len)
{
    struct iovec iov = { buf, len };
    Req r = { 0 };

    blk_aio_preadv(blk, &r.acb, off, &iov, 1, req_cb, &r);
    return req_wait(&r);
}

static int do_write(BlockBackend *blk, int64_t off, void *buf, size_t len)
{
    struct iovec iov = { buf, len };
    Req r = { 0 };

    blk_aio_pwritev(blk, &r.acb, off, &iov, 1, 0, req_cb, &r);
    return req_wait(&r);
}

static int do_flush(BlockBackend *blk)
{
    Req r = { 0 };

    blk_aio_flush(blk, &r.acb, req_cb, &r);
    return req_wait(&r);
}

static int do_zeroes(BlockBackend *blk, int64_t off, uint64_t len)
{
    Req r = { 0 };

    blk_aio_pwrite_zeroes(blk, &r.acb, off, len, 0, req_cb, &r);
    return req_wait(&r);
}

static void *aligned_buf(size_t size, int fill)
{
    void *buf = NULL;

    g_assert_cmpint(posix_memalign(&buf, 4096, size), ==, 0);
    memset(buf, fill, size);
    return buf;
}

static void assert_filled(const void *buf, size_t len, int c)
{
    const unsigned char *p = buf;

    for (size_t i = 0; i < len; i++) {
        if (p[i] != c) {
            g_error("byte %zu is 0x%02x, expected 0x%02x", i, p[i], c);
        }
    }
}

/* Parse "k=v,k=v" into @inj through the public parser. */
static bool parse(BlockInjectOptions *inj, const char *spec, GError **errp)
{
    g_auto(GStrv) items = g_strsplit(spec, ",", -1);

    memset(inj, 0, sizeof(*inj));
    for (char **it = items; *it; it++) {
        g_auto(GStrv) kv = g_strsplit(*it, "=", 2);

        g_assert_nonnull(kv[1]);
        if (!blk_inject_parse_option(inj, kv[0], kv[1], errp)) {
            return false;
        }
    }
    return true;
}

typedef struct Fixture {
    char *path;
    BlockBackend *blk;
} Fixture;

static void open_with(Fixture *f, BlockAioMode mode, const char *spec)
{
    BlockOptions opts;
    BlockFileOptions fo;
    GError *err = NULL;
    int fd;

    f->path = g_build_filename(tmpdir, "disk.img", NULL);
    fd = open(f->path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, FILE_SIZE), ==, 0);
    close(fd);

    blk_options_init(&opts);
    blk_file_options(&opts, &fo, f->path);
    fo.aio = mode;
    if (spec) {
        g_assert_true(parse(&opts.inject, spec, &err));
        g_assert_no_error(err);
    }
    f->blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    g_assert_nonnull(f->blk);
    g_assert_cmpint(blk_get_aio_mode(f->blk), ==, mode);
}

static void close_fixture(Fixture *f)
{
    blk_close(f->blk);
    unlink(f->path);
    g_free(f->path);
}

/* Read the file behind the block layer's back. */
static void file_read(Fixture *f, off_t off, void *buf, size_t len)
{
    int fd = open(f->path, O_RDONLY);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, buf, len, off), ==, (ssize_t)len);
    close(fd);
}

static void test_parse(void)
{
    BlockInjectOptions inj;
    GError *err = NULL;
    static const char *const bad[] = {
        "inject-error=reed", "inject-error=read+", "inject-error=",
        "inject-sector=", "inject-sector=x", "inject-sector=10-5",
        "inject-sector=5-x", "inject-sector=-5", "inject-after=-1",
        "inject-after=1k", "inject-count=", "inject-errno=EWHAT",
        "inject-errno=0", "inject-errno=5000", "inject-bogus=1",
        "inject-delay=", "inject-delay=-1", "inject-delay=10ms",
        "inject-delay=600001",
    };

    g_assert_true(parse(&inj, "inject-error=read+flush,inject-sector=8-15,"
                        "inject-after=3,inject-count=2,"
                        "inject-errno=ENOSPC", &err));
    g_assert_no_error(err);
    g_assert_cmpuint(inj.ops, ==, BLOCK_INJECT_READ | BLOCK_INJECT_FLUSH);
    g_assert_true(inj.has_range);
    g_assert_cmpuint(inj.sector_start, ==, 8);
    g_assert_cmpuint(inj.sector_end, ==, 15);
    g_assert_cmpuint(inj.after, ==, 3);
    g_assert_cmpuint(inj.count, ==, 2);
    g_assert_cmpint(inj.err, ==, ENOSPC);

    g_assert_true(parse(&inj, "inject-error=any,inject-sector=100", &err));
    g_assert_cmpuint(inj.ops, ==, BLOCK_INJECT_ANY);
    g_assert_cmpuint(inj.sector_start, ==, 100);
    g_assert_cmpuint(inj.sector_end, ==, 100);
    g_assert_true(parse(&inj, "inject-sector=0x10-,inject-errno=eio", &err));
    g_assert_cmpuint(inj.sector_start, ==, 16);
    g_assert_cmpuint(inj.sector_end, ==, UINT64_MAX);
    g_assert_cmpint(inj.err, ==, EIO);
    g_assert_true(parse(&inj, "inject-error=write,inject-error=none", &err));
    g_assert_cmpuint(inj.ops, ==, 0);
    g_assert_true(parse(&inj, "inject-errno=28", &err));
    g_assert_cmpint(inj.err, ==, 28);
    g_assert_true(parse(&inj, "inject-delay=2000,inject-sector=8", &err));
    g_assert_cmpuint(inj.delay_ms, ==, 2000);
    g_assert_cmpuint(inj.ops, ==, 0);
    g_assert_no_error(err);

    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        g_assert_false(parse(&inj, bad[i], &err));
        g_assert_nonnull(err);
        g_test_message("%s: %s", bad[i], err->message);
        g_clear_error(&err);
    }

    /* off by default */
    {
        BlockOptions opts;

        blk_options_init(&opts);
        g_assert_cmpuint(opts.inject.ops, ==, 0);
    }
}

/* Reads overlapping sectors 16..23 fail with EIO; everything else works. */
static void test_read_range(gconstpointer data)
{
    Fixture f;
    uint8_t *buf = aligned_buf(65536, 0);
    uint8_t *img = g_malloc(65536);

    open_with(&f, GPOINTER_TO_INT(data), "inject-error=read,"
              "inject-sector=16-23");
    /* writes are not matched, even inside the range */
    memset(buf, 0x5a, 65536);
    g_assert_cmpint(do_write(f.blk, 0, buf, 65536), ==, 0);
    file_read(&f, 0, img, 65536);
    assert_filled(img, 65536, 0x5a);
    /* before and after the range */
    g_assert_cmpint(do_read(f.blk, 0, buf, 8192), ==, 0);
    assert_filled(buf, 8192, 0x5a);
    g_assert_cmpint(do_read(f.blk, 12288, buf, 4096), ==, 0);
    g_assert_cmpint(do_read(f.blk, 24 * 512, buf, 4096), ==, 0);
    g_assert_cmpuint(blk_inject_get_hits(f.blk), ==, 0);
    /* inside, straddling the start, straddling the end, covering it all */
    memset(buf, 0xee, 65536);
    g_assert_cmpint(do_read(f.blk, 16 * 512, buf, 4096), ==, -EIO);
    g_assert_cmpint(do_read(f.blk, 12 * 512, buf, 4096), ==, -EIO);
    g_assert_cmpint(do_read(f.blk, 20 * 512, buf, 4096), ==, -EIO);
    g_assert_cmpint(do_read(f.blk, 0, buf, 65536), ==, -EIO);
    g_assert_cmpuint(blk_inject_get_hits(f.blk), ==, 4);
    /* the engine was not reached: the buffer is untouched */
    assert_filled(buf, 65536, 0xee);
    /* flushes are not matched */
    g_assert_cmpint(do_flush(f.blk), ==, 0);
    /* and the backend keeps serving */
    g_assert_cmpint(do_read(f.blk, 32768, buf, 32768), ==, 0);
    assert_filled(buf, 32768, 0x5a);
    close_fixture(&f);
    free(buf);
    g_free(img);
}

/* Writes in the range fail with ENOSPC and leave the file alone. */
static void test_write_enospc(gconstpointer data)
{
    Fixture f;
    uint8_t *buf = aligned_buf(16384, 0x11);
    uint8_t *img = g_malloc(16384);

    open_with(&f, GPOINTER_TO_INT(data), "inject-error=write,"
              "inject-sector=1024-,inject-errno=ENOSPC");
    g_assert_cmpint(do_write(f.blk, 1024 * 512, buf, 16384), ==, -ENOSPC);
    g_assert_cmpint(do_write(f.blk, 1000 * 512, buf, 16384), ==, -ENOSPC);
    g_assert_cmpint(do_zeroes(f.blk, 1500 * 512, 4096), ==, -ENOSPC);
    file_read(&f, 1000 * 512, img, 16384);
    assert_filled(img, 16384, 0);
    /* below the range, writes land */
    g_assert_cmpint(do_write(f.blk, 0, buf, 16384), ==, 0);
    file_read(&f, 0, img, 16384);
    assert_filled(img, 16384, 0x11);
    /* reads of the range work */
    g_assert_cmpint(do_read(f.blk, 1024 * 512, buf, 16384), ==, 0);
    assert_filled(buf, 16384, 0);
    g_assert_cmpuint(blk_inject_get_hits(f.blk), ==, 3);
    close_fixture(&f);
    free(buf);
    g_free(img);
}

/* inject-after / inject-count: a window of failures in request order. */
static void test_after_count(gconstpointer data)
{
    Fixture f;
    uint8_t *buf = aligned_buf(4096, 0x22);
    int expect[10] = { 0, 0, 0, -EIO, -EIO, 0, 0, 0, 0, 0 };

    open_with(&f, GPOINTER_TO_INT(data), "inject-error=any,inject-after=3,"
              "inject-count=2");
    for (int i = 0; i < 10; i++) {
        int ret = i % 2 ? do_read(f.blk, i * 4096, buf, 4096)
                        : do_write(f.blk, i * 4096, buf, 4096);

        g_assert_cmpint(ret, ==, expect[i]);
    }
    g_assert_cmpuint(blk_inject_get_hits(f.blk), ==, 2);
    close_fixture(&f);

    /* without a count, everything after the first N fails */
    open_with(&f, GPOINTER_TO_INT(data), "inject-error=write,inject-after=2");
    g_assert_cmpint(do_write(f.blk, 0, buf, 4096), ==, 0);
    g_assert_cmpint(do_read(f.blk, 0, buf, 4096), ==, 0);  /* not counted */
    g_assert_cmpint(do_write(f.blk, 4096, buf, 4096), ==, 0);
    for (int i = 0; i < 5; i++) {
        g_assert_cmpint(do_write(f.blk, 8192, buf, 4096), ==, -EIO);
    }
    g_assert_cmpint(do_read(f.blk, 0, buf, 4096), ==, 0);
    close_fixture(&f);
    free(buf);
}

/* inject-error=flush fails flushes only; a sector range excludes them. */
static void test_flush(gconstpointer data)
{
    Fixture f;
    uint8_t *buf = aligned_buf(4096, 0x33);

    open_with(&f, GPOINTER_TO_INT(data), "inject-error=flush,"
              "inject-errno=EIO");
    g_assert_cmpint(do_write(f.blk, 0, buf, 4096), ==, 0);
    g_assert_cmpint(do_flush(f.blk), ==, -EIO);
    g_assert_cmpint(do_flush(f.blk), ==, -EIO);
    g_assert_cmpint(do_read(f.blk, 0, buf, 4096), ==, 0);
    g_assert_cmpuint(blk_inject_get_hits(f.blk), ==, 2);
    close_fixture(&f);

    open_with(&f, GPOINTER_TO_INT(data), "inject-error=any,inject-sector=0-7");
    g_assert_cmpint(do_flush(f.blk), ==, 0);
    g_assert_cmpint(do_write(f.blk, 0, buf, 4096), ==, -EIO);
    g_assert_cmpint(do_write(f.blk, 4096, buf, 4096), ==, 0);
    close_fixture(&f);
    free(buf);
}

/* Without injection nothing fails and the counter stays 0. */
static void test_off(gconstpointer data)
{
    Fixture f;
    uint8_t *buf = aligned_buf(4096, 0x44);

    open_with(&f, GPOINTER_TO_INT(data), NULL);
    g_assert_cmpint(do_write(f.blk, 0, buf, 4096), ==, 0);
    g_assert_cmpint(do_read(f.blk, 0, buf, 4096), ==, 0);
    g_assert_cmpint(do_flush(f.blk), ==, 0);
    g_assert_cmpuint(blk_inject_get_hits(f.blk), ==, 0);
    close_fixture(&f);
    free(buf);
}

/*
 * inject-delay: a matching request completes no sooner than the delay
 * (a lower bound, so it cannot fail by chance), with the real I/O done;
 * others are not held back; with inject-error the delayed one fails.
 */
static void test_delay(gconstpointer data)
{
    Fixture f;
    uint8_t *buf = aligned_buf(4096, 0x66);
    struct iovec iov = { buf, 4096 };
    Req r = { 0 };
    uint8_t img[4096];
    gint64 t0;

    open_with(&f, GPOINTER_TO_INT(data), "inject-delay=200,"
              "inject-sector=8-15");
    /* the delayed write lands in the file once it completes */
    t0 = g_get_monotonic_time();
    g_assert_cmpint(do_write(f.blk, 8 * 512, buf, 4096), ==, 0);
    g_assert_cmpint(g_get_monotonic_time() - t0, >=, 200 * 1000);
    file_read(&f, 8 * 512, img, 4096);
    assert_filled(img, 4096, 0x66);
    /* and reads too, with the data */
    memset(buf, 0, 4096);
    t0 = g_get_monotonic_time();
    g_assert_cmpint(do_read(f.blk, 8 * 512, buf, 4096), ==, 0);
    g_assert_cmpint(g_get_monotonic_time() - t0, >=, 200 * 1000);
    assert_filled(buf, 4096, 0x66);
    /* requests outside the range are not matched */
    g_assert_cmpint(do_write(f.blk, 0, buf, 4096), ==, 0);
    g_assert_cmpuint(blk_inject_get_hits(f.blk), ==, 2);
    /* never completed inside the submitting call, even when delayed */
    blk_aio_preadv(f.blk, &r.acb, 8 * 512, &iov, 1, req_cb, &r);
    g_assert_cmpint(req_wait(&r), ==, 0);
    g_assert_cmpuint(blk_inject_get_hits(f.blk), ==, 3);
    close_fixture(&f);

    /* with inject-error: slow, then failed, the file untouched */
    open_with(&f, GPOINTER_TO_INT(data), "inject-delay=50,"
              "inject-error=write,inject-errno=ENOSPC");
    t0 = g_get_monotonic_time();
    g_assert_cmpint(do_write(f.blk, 0, buf, 4096), ==, -ENOSPC);
    g_assert_cmpint(g_get_monotonic_time() - t0, >=, 50 * 1000);
    file_read(&f, 0, img, 4096);
    assert_filled(img, 4096, 0);
    g_assert_cmpint(do_read(f.blk, 0, buf, 4096), ==, 0);
    close_fixture(&f);
    free(buf);
}

/* The null driver honours injection too. */
static void test_null(void)
{
    BlockOptions opts;
    BlockNullOptions no;
    BlockBackend *blk;
    GError *err = NULL;
    uint8_t buf[4096];

    blk_options_init(&opts);
    blk_null_options(&opts, &no, FILE_SIZE, false);
    g_assert_true(parse(&opts.inject, "inject-error=read,inject-sector=8",
                        &err));
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    g_assert_cmpint(do_read(blk, 0, buf, 4096), ==, 0);
    g_assert_cmpint(do_read(blk, 4096, buf, 4096), ==, -EIO);
    g_assert_cmpint(do_write(blk, 0, buf, 4096), ==, 0);
    g_assert_cmpuint(blk_inject_get_hits(blk), ==, 1);
    blk_close(blk);

    /* and inject-delay: the read is slow, then zero-filled */
    blk_options_init(&opts);
    blk_null_options(&opts, &no, FILE_SIZE, true);
    g_assert_true(parse(&opts.inject, "inject-delay=50", &err));
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    memset(buf, 0x77, sizeof(buf));
    {
        gint64 t0 = g_get_monotonic_time();

        g_assert_cmpint(do_read(blk, 0, buf, 4096), ==, 0);
        g_assert_cmpint(g_get_monotonic_time() - t0, >=, 50 * 1000);
    }
    assert_filled(buf, 4096, 0);
    blk_close(blk);
}

static void add_engine_tests(const char *name, BlockAioMode mode)
{
    static const struct {
        const char *path;
        GTestDataFunc fn;
    } tests[] = {
        { "read-range", test_read_range },
        { "write-enospc", test_write_enospc },
        { "after-count", test_after_count },
        { "flush", test_flush },
        { "off", test_off },
        { "delay", test_delay },
    };

    for (size_t i = 0; i < ARRAY_SIZE(tests); i++) {
        g_autofree char *p = g_strdup_printf("/block/inject/%s/%s", name,
                                             tests[i].path);
        g_test_add_data_func(p, GINT_TO_POINTER(mode), tests[i].fn);
    }
}

int main(int argc, char **argv)
{
    GError *err = NULL;
    int ret;

    g_test_init(&argc, &argv, NULL);
    tmpdir = g_strdup("/var/tmp/test-block-faults-XXXXXX");
    g_assert_nonnull(g_mkdtemp(tmpdir));
    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);

    g_test_add_func("/block/inject/parse", test_parse);
#if CONFIG_LINUX_IO_URING
    add_engine_tests("io_uring", BLOCK_AIO_IO_URING);
#endif
#if CONFIG_LINUX_AIO
    add_engine_tests("native", BLOCK_AIO_NATIVE);
#endif
    add_engine_tests("threads", BLOCK_AIO_THREADS);
    g_test_add_func("/block/inject/null", test_null);

    ret = g_test_run();
    aio_context_free(ctx);
    rmdir(tmpdir);
    g_free(tmpdir);
    return ret;
}
