/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for the block layer: every engine (io_uring, native, threads,
 * null) on a temporary file under /var/tmp (O_DIRECT needs a real
 * filesystem, not tmpfs), driven step by step with aio_poll().
 */
#include "qemu/osdep.h"
#include <sys/stat.h>
#include <linux/falloc.h>
#include "qemu/aio.h"
#include "qemu/defer-call.h"
#include "block/block.h"
#include "block/file.h"
#include "block/null.h"
#include "block/block_int.h"
#include "block/engine.h"         /* test hooks */

#define FILE_SIZE (4 * 1024 * 1024)
#define NREQ 64

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

static void req_wait(Req *r)
{
    while (!r->done) {
        aio_poll(ctx, true);
    }
}

static char *make_file(const char *name, size_t size)
{
    char *path = g_build_filename(tmpdir, name, NULL);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    close(fd);
    return path;
}

static BlockBackend *open_file(const char *path, BlockAioMode mode,
                               bool direct, bool readonly, bool batch)
{
    BlockOptions opts;
    BlockFileOptions fo;
    GError *err = NULL;
    BlockBackend *blk;

    blk_options_init(&opts);
    blk_file_options(&opts, &fo, path);
    fo.aio = mode;
    opts.cache_direct = direct;
    opts.readonly = readonly;
    opts.batch = batch;
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    g_assert_nonnull(blk);
    g_assert_cmpint(blk_get_aio_mode(blk), ==, mode);
    return blk;
}

static void *aligned_buf(size_t size, int fill)
{
    void *buf = NULL;

    g_assert_cmpint(posix_memalign(&buf, 4096, size), ==, 0);
    memset(buf, fill, size);
    return buf;
}

static int do_read(BlockBackend *blk, int64_t off, void *buf, size_t len)
{
    struct iovec iov = { buf, len };
    Req r = { 0 };

    blk_aio_preadv(blk, &r.acb, off, &iov, 1, req_cb, &r);
    g_assert_false(r.done);     /* never completed synchronously */
    req_wait(&r);
    return r.ret;
}

static int do_write(BlockBackend *blk, int64_t off, void *buf, size_t len,
                    int flags)
{
    struct iovec iov = { buf, len };
    Req r = { 0 };

    blk_aio_pwritev(blk, &r.acb, off, &iov, 1, flags, req_cb, &r);
    g_assert_false(r.done);
    req_wait(&r);
    return r.ret;
}

static int do_flush(BlockBackend *blk)
{
    Req r = { 0 };

    blk_aio_flush(blk, &r.acb, req_cb, &r);
    g_assert_false(r.done);
    req_wait(&r);
    return r.ret;
}

static int do_discard(BlockBackend *blk, int64_t off, uint64_t len)
{
    Req r = { 0 };

    blk_aio_pdiscard(blk, &r.acb, off, len, req_cb, &r);
    g_assert_false(r.done);
    req_wait(&r);
    return r.ret;
}

static int do_zeroes(BlockBackend *blk, int64_t off, uint64_t len, int flags)
{
    Req r = { 0 };

    blk_aio_pwrite_zeroes(blk, &r.acb, off, len, flags, req_cb, &r);
    g_assert_false(r.done);
    req_wait(&r);
    return r.ret;
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

static void get_stats(BlockAioMode mode, BlockEngineStats *st)
{
    if (!blk_engine_get_stats(ctx, mode, st)) {
        memset(st, 0, sizeof(*st));
    }
}

/* /block/<engine>/read-write: vectored write (plain and FUA), read back. */
static void test_read_write(gconstpointer data)
{
    BlockAioMode mode = GPOINTER_TO_INT(data);
    g_autofree char *path = make_file("rw.img", FILE_SIZE);
    BlockBackend *blk = open_file(path, mode, true, false, true);
    char *a = aligned_buf(65536, 0xa5);
    char *b = aligned_buf(65536, 0x5a);
    char *rd = aligned_buf(131072, 0);
    struct iovec iov[2] = { { a, 65536 }, { b, 65536 } };
    Req r = { 0 };
    char check[512];
    int fd;

    g_assert_cmpuint(blk_getlength(blk), ==, FILE_SIZE);
    g_assert_false(blk_is_block_device(blk));
    blk_aio_pwritev(blk, &r.acb, 65536, iov, 2, 0, req_cb, &r);
    g_assert_false(r.done);
    req_wait(&r);
    g_assert_cmpint(r.ret, ==, 0);

    g_assert_cmpint(do_read(blk, 65536, rd, 131072), ==, 0);
    assert_filled(rd, 65536, 0xa5);
    assert_filled(rd + 65536, 65536, 0x5a);

    memset(a, 0x33, 4096);
    g_assert_cmpint(do_write(blk, 0, a, 4096, BDRV_REQ_FUA), ==, 0);
    g_assert_cmpint(do_read(blk, 0, rd, 4096), ==, 0);
    assert_filled(rd, 4096, 0x33);

    /* The data really is in the file. */
    fd = open(path, O_RDONLY);
    g_assert_cmpint(pread(fd, check, sizeof(check), 65536 + 65536), ==,
                    sizeof(check));
    assert_filled(check, sizeof(check), 0x5a);
    close(fd);

    /* Out of bounds. */
    g_assert_cmpint(do_read(blk, FILE_SIZE, rd, 4096), ==, -EINVAL);
    g_assert_cmpint(do_write(blk, FILE_SIZE - 4096, a, 8192, 0), ==, -EINVAL);

    blk_close(blk);
    free(a);
    free(b);
    free(rd);
    unlink(path);
}

static void test_flush(gconstpointer data)
{
    BlockAioMode mode = GPOINTER_TO_INT(data);
    g_autofree char *path = make_file("flush.img", FILE_SIZE);
    BlockBackend *blk = open_file(path, mode, true, false, true);

    g_assert_cmpint(do_flush(blk), ==, 0);
    blk_close(blk);
    unlink(path);
}

static bool range_is_hole(const char *path, off_t off, off_t len)
{
    int fd = open(path, O_RDONLY);
    off_t data = lseek(fd, off, SEEK_DATA);

    close(fd);
    /* No data at or after off, or the next data starts beyond the range. */
    return data < 0 || data >= off + len;
}

static void test_discard(gconstpointer data)
{
    BlockAioMode mode = GPOINTER_TO_INT(data);
    g_autofree char *path = make_file("discard.img", FILE_SIZE);
    BlockBackend *blk = open_file(path, mode, true, false, true);
    char *buf = aligned_buf(1024 * 1024, 0x77);

    g_assert_true(blk_can_discard(blk));
    g_assert_cmpint(do_write(blk, 0, buf, 1024 * 1024, 0), ==, 0);
    g_assert_false(range_is_hole(path, 0, 1024 * 1024));
    g_assert_cmpint(do_discard(blk, 0, 512 * 1024), ==, 0);
    g_assert_true(range_is_hole(path, 0, 512 * 1024));
    g_assert_cmpint(do_read(blk, 0, buf, 1024 * 1024), ==, 0);
    assert_filled(buf, 512 * 1024, 0);
    assert_filled(buf + 512 * 1024, 512 * 1024, 0x77);
    blk_close(blk);
    free(buf);
    unlink(path);
}

static void test_write_zeroes(gconstpointer data)
{
    BlockAioMode mode = GPOINTER_TO_INT(data);
    g_autofree char *path = make_file("zeroes.img", FILE_SIZE);
    BlockBackend *blk = open_file(path, mode, true, false, true);
    char *buf = aligned_buf(1024 * 1024, 0x42);

    g_assert_true(blk_can_write_zeroes(blk));
    g_assert_cmpint(do_write(blk, 0, buf, 1024 * 1024, 0), ==, 0);

    /* Without MAY_UNMAP: zeroes, and no hole (ZERO_RANGE). */
    g_assert_cmpint(do_zeroes(blk, 0, 256 * 1024, 0), ==, 0);
    /* With MAY_UNMAP: zeroes, deallocated. */
    g_assert_cmpint(do_zeroes(blk, 512 * 1024, 256 * 1024,
                              BDRV_REQ_MAY_UNMAP), ==, 0);
    g_assert_true(range_is_hole(path, 512 * 1024, 256 * 1024));

    memset(buf, 0xff, 1024 * 1024);
    g_assert_cmpint(do_read(blk, 0, buf, 1024 * 1024), ==, 0);
    assert_filled(buf, 256 * 1024, 0);
    assert_filled(buf + 256 * 1024, 256 * 1024, 0x42);
    assert_filled(buf + 512 * 1024, 256 * 1024, 0);
    assert_filled(buf + 768 * 1024, 256 * 1024, 0x42);
    blk_close(blk);
    free(buf);
    unlink(path);
}

/* Misaligned buffers under O_DIRECT are bounced, never failed. */
static void test_misaligned(gconstpointer data)
{
    BlockAioMode mode = GPOINTER_TO_INT(data);
    g_autofree char *path = make_file("misaligned.img", FILE_SIZE);
    BlockBackend *blk = open_file(path, mode, true, false, true);
    char *base = aligned_buf(3 * 4096, 0);
    char *wr = base + 1;                /* misaligned address */
    char *rd = aligned_buf(8192, 0);
    BlockEngineStats before, after;
    struct iovec iov[2];
    Req r = { 0 };

    for (int i = 0; i < 8192; i++) {
        wr[i] = i * 7;
    }
    get_stats(mode, &before);
    g_assert_cmpint(do_write(blk, 8192, wr, 8192, 0), ==, 0);
    g_assert_cmpint(do_read(blk, 8192, rd, 8192), ==, 0);
    g_assert_cmpint(memcmp(rd, wr, 8192), ==, 0);

    /* Read into two misaligned segments (lengths not multiples of 512). */
    memset(base, 0, 3 * 4096);
    iov[0] = (struct iovec) { base + 3, 1000 };
    iov[1] = (struct iovec) { base + 5000, 8192 - 1000 };
    blk_aio_preadv(blk, &r.acb, 8192, iov, 2, req_cb, &r);
    req_wait(&r);
    g_assert_cmpint(r.ret, ==, 0);
    g_assert_cmpint(memcmp(base + 3, rd, 1000), ==, 0);
    g_assert_cmpint(memcmp(base + 5000, rd + 1000, 8192 - 1000), ==, 0);

    get_stats(mode, &after);
    g_assert_cmpuint(after.bounced - before.bounced, ==, 2);
    blk_close(blk);
    free(base);
    free(rd);
    unlink(path);
}

typedef struct Batch {
    Req req[NREQ];
    char *buf;
    struct iovec iov[NREQ];
} Batch;

/* Submit NREQ 4k reads inside one defer_call section; wait for them all. */
static void run_batch(BlockBackend *blk, BlockAioMode mode,
                      BlockEngineStats *delta)
{
    Batch *b = g_new0(Batch, 1);
    BlockEngineStats before, after;
    int done;

    b->buf = aligned_buf(NREQ * 4096, 0);
    /* Warm up: the engine instance exists before we count. */
    g_assert_cmpint(do_read(blk, 0, b->buf, 4096), ==, 0);
    get_stats(mode, &before);

    defer_call_begin();
    for (int i = 0; i < NREQ; i++) {
        b->iov[i] = (struct iovec) { b->buf + i * 4096, 4096 };
        blk_aio_preadv(blk, &b->req[i].acb, i * 4096, &b->iov[i], 1,
                       req_cb, &b->req[i]);
    }
    defer_call_end();
    do {
        done = 0;
        for (int i = 0; i < NREQ; i++) {
            done += b->req[i].done;
            if (b->req[i].done) {
                g_assert_cmpint(b->req[i].ret, ==, 0);
            }
        }
        if (done < NREQ) {
            aio_poll(ctx, true);
        }
    } while (done < NREQ);
    get_stats(mode, &after);

    delta->requests = after.requests - before.requests;
    delta->submit_syscalls = after.submit_syscalls - before.submit_syscalls;
    delta->completions = after.completions - before.completions;
    delta->completions_direct =
        after.completions_direct - before.completions_direct;
    delta->completions_bh = after.completions_bh - before.completions_bh;
    delta->bh_scheduled = after.bh_scheduled - before.bh_scheduled;
    free(b->buf);
    g_free(b);
}

static void test_batch_one_submit(gconstpointer data)
{
    BlockAioMode mode = GPOINTER_TO_INT(data);
    g_autofree char *path = make_file("batch.img", FILE_SIZE);
    BlockBackend *blk = open_file(path, mode, true, false, true);
    BlockEngineStats d;

    run_batch(blk, mode, &d);
    g_assert_cmpuint(d.requests, ==, NREQ);
    g_assert_cmpuint(d.submit_syscalls, ==, 1);
    g_assert_cmpuint(d.completions, ==, NREQ);
    blk_close(blk);
    unlink(path);
}

static void test_batch_off(gconstpointer data)
{
    BlockAioMode mode = GPOINTER_TO_INT(data);
    g_autofree char *path = make_file("nobatch.img", FILE_SIZE);
    BlockBackend *blk = open_file(path, mode, true, false, false);
    BlockEngineStats d;

    run_batch(blk, mode, &d);
    g_assert_cmpuint(d.requests, ==, NREQ);
    g_assert_cmpuint(d.submit_syscalls, ==, NREQ);
    blk_close(blk);
    unlink(path);
}

/*
 * Run the loop without blocking until @n requests are done or @secs
 * seconds passed (a request the engine forgot must fail the test, not hang
 * it).  Returns how many are done.
 */
static int reqs_wait_bounded(Req *req, int n, int secs)
{
    gint64 deadline = g_get_monotonic_time() + secs * G_USEC_PER_SEC;
    int done;

    for (;;) {
        done = 0;
        for (int i = 0; i < n; i++) {
            done += req[i].done;
        }
        if (done == n || g_get_monotonic_time() > deadline) {
            return done;
        }
        if (!aio_poll(ctx, false)) {
            g_usleep(1000);
        }
    }
}

#if CONFIG_LINUX_IO_URING
/*
 * The kernel consumed fewer SQEs than were queued: the rest must go out
 * promptly (from the retry BH or the next completion), not wait for the
 * next, unrelated, request.  A test hook limits each submission to 1 SQE.
 */
#define NSHORT 8
static void test_luring_short_submit(void)
{
    g_autofree char *path = make_file("short.img", FILE_SIZE);
    BlockBackend *blk = open_file(path, BLOCK_AIO_IO_URING, true, false,
                                  true);
    char *buf = aligned_buf(NSHORT * 4096, 0);
    Req req[NSHORT] = { 0 };
    struct iovec iov[NSHORT];
    BlockEngineStats before, after;

    g_assert_cmpint(do_read(blk, 0, buf, 4096), ==, 0);   /* warm up */
    get_stats(BLOCK_AIO_IO_URING, &before);
    luring_test_submit_max = 1;
    defer_call_begin();
    for (int i = 0; i < NSHORT; i++) {
        iov[i] = (struct iovec) { buf + i * 4096, 4096 };
        blk_aio_preadv(blk, &req[i].acb, i * 4096, &iov[i], 1, req_cb,
                       &req[i]);
    }
    defer_call_end();
    g_assert_cmpint(reqs_wait_bounded(req, NSHORT, 10), ==, NSHORT);
    luring_test_submit_max = 0;
    get_stats(BLOCK_AIO_IO_URING, &after);
    for (int i = 0; i < NSHORT; i++) {
        g_assert_cmpint(req[i].ret, ==, 0);
    }
    /* one SQE per submission, each short one retried */
    g_assert_cmpuint(after.submit_syscalls - before.submit_syscalls, ==,
                     NSHORT);
    g_assert_cmpuint(after.retries - before.retries, ==, NSHORT - 1);
    blk_close(blk);
    free(buf);
    unlink(path);
}
#endif

/*
 * The thread pool is shared by every export of the process.  A backend
 * whose requests take long (a huge write-zeroes on the zero-buffer path, a
 * hung NFS file) must not occupy all its workers: the hook holds every
 * request in its worker, so the test sees exactly how many of A's run,
 * and that B's request still gets a worker.
 */
static struct {
    GMutex lock;
    GCond cond;
    BlockBackend *a;
    unsigned int a_running, a_max, b_running;
    bool open;
} pool_gate;

static void pool_gate_hook(BlockAIOCB *acb)
{
    g_mutex_lock(&pool_gate.lock);
    if (acb->blk == pool_gate.a) {
        pool_gate.a_running++;
        pool_gate.a_max = MAX(pool_gate.a_max, pool_gate.a_running);
    } else {
        pool_gate.b_running++;
    }
    g_cond_broadcast(&pool_gate.cond);
    while (!pool_gate.open) {
        g_cond_wait(&pool_gate.cond, &pool_gate.lock);
    }
    if (acb->blk == pool_gate.a) {
        pool_gate.a_running--;
    } else {
        pool_gate.b_running--;
    }
    g_mutex_unlock(&pool_gate.lock);
}

/* Wait (at most 10 s) until *@counter reaches @want; returns its value. */
static unsigned int pool_gate_wait(unsigned int *counter, unsigned int want)
{
    gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
    unsigned int v;

    g_mutex_lock(&pool_gate.lock);
    while (*counter < want &&
           g_cond_wait_until(&pool_gate.cond, &pool_gate.lock, deadline)) {
    }
    v = *counter;
    g_mutex_unlock(&pool_gate.lock);
    return v;
}

#define NPOOL_A (THREAD_POOL_MAX_WORKERS + 8)
static void test_threads_pool_share(void)
{
    g_autofree char *pa = make_file("pool-a.img", FILE_SIZE);
    g_autofree char *pb = make_file("pool-b.img", FILE_SIZE);
    BlockBackend *a = open_file(pa, BLOCK_AIO_THREADS, false, false, true);
    BlockBackend *b = open_file(pb, BLOCK_AIO_THREADS, false, false, true);
    Req *ra = g_new0(Req, NPOOL_A);
    Req rb = { 0 };

    memset(&pool_gate, 0, sizeof(pool_gate));
    g_mutex_init(&pool_gate.lock);
    g_cond_init(&pool_gate.cond);
    pool_gate.a = a;
    thread_pool_test_hook = pool_gate_hook;

    /* A: more write-zeroes than the pool has workers, all held */
    for (int i = 0; i < NPOOL_A; i++) {
        blk_aio_pwrite_zeroes(a, &ra[i].acb, i * 4096, 4096, 0, req_cb,
                              &ra[i]);
    }
    g_assert_cmpuint(pool_gate_wait(&pool_gate.a_running,
                                    THREAD_POOL_MAX_PER_BACKEND), ==,
                     THREAD_POOL_MAX_PER_BACKEND);
    /* B still gets a worker while A's are all busy */
    blk_aio_pwrite_zeroes(b, &rb.acb, 0, 4096, 0, req_cb, &rb);
    g_assert_cmpuint(pool_gate_wait(&pool_gate.b_running, 1), ==, 1);
    g_mutex_lock(&pool_gate.lock);
    g_assert_cmpuint(pool_gate.a_max, ==, THREAD_POOL_MAX_PER_BACKEND);
    pool_gate.open = true;
    g_cond_broadcast(&pool_gate.cond);
    g_mutex_unlock(&pool_gate.lock);

    req_wait(&rb);
    g_assert_cmpint(rb.ret, ==, 0);
    for (int i = 0; i < NPOOL_A; i++) {
        req_wait(&ra[i]);
        g_assert_cmpint(ra[i].ret, ==, 0);
    }
    /* the queued ones ran at most THREAD_POOL_MAX_PER_BACKEND at a time */
    g_assert_cmpuint(pool_gate.a_max, ==, THREAD_POOL_MAX_PER_BACKEND);
    thread_pool_test_hook = NULL;
    g_mutex_clear(&pool_gate.lock);
    g_cond_clear(&pool_gate.cond);
    blk_close(a);
    blk_close(b);
    g_free(ra);
    unlink(pa);
    unlink(pb);
}

/* The 2016 lesson: in steady state linux-aio completes without a BH. */
static void test_native_direct_completion(void)
{
    g_autofree char *path = make_file("direct.img", FILE_SIZE);
    BlockBackend *blk = open_file(path, BLOCK_AIO_NATIVE, true, false, true);
    BlockEngineStats d;

    for (int round = 0; round < 3; round++) {
        run_batch(blk, BLOCK_AIO_NATIVE, &d);
        g_assert_cmpuint(d.completions, ==, NREQ);
        g_assert_cmpuint(d.completions_direct, ==, NREQ);
        g_assert_cmpuint(d.completions_bh, ==, 0);
        g_assert_cmpuint(d.bh_scheduled, ==, 0);
    }
    blk_close(blk);
    unlink(path);
}

/*
 * More completions than one handler invocation may process (budget 128):
 * the rest is handled by the completion BH.  With cache=writeback, libaio
 * completes buffered reads inside io_submit(), so all events are in the
 * ring before the loop runs: deterministic.
 */
#define NBIG 300
static void test_native_budget_bh(void)
{
    g_autofree char *path = make_file("budget.img", FILE_SIZE);
    BlockBackend *blk = open_file(path, BLOCK_AIO_NATIVE, false, false, true);
    Req *req = g_new0(Req, NBIG);
    struct iovec *iov = g_new0(struct iovec, NBIG);
    char *buf = aligned_buf(NBIG * 512, 1);
    BlockEngineStats before, after;
    int done;

    g_assert_cmpint(do_read(blk, 0, buf, 512), ==, 0);
    get_stats(BLOCK_AIO_NATIVE, &before);
    defer_call_begin();
    for (int i = 0; i < NBIG; i++) {
        iov[i] = (struct iovec) { buf + i * 512, 512 };
        blk_aio_preadv(blk, &req[i].acb, i * 512, &iov[i], 1, req_cb, &req[i]);
    }
    defer_call_end();
    do {
        aio_poll(ctx, true);
        done = 0;
        for (int i = 0; i < NBIG; i++) {
            done += req[i].done;
        }
    } while (done < NBIG);
    get_stats(BLOCK_AIO_NATIVE, &after);
    assert_filled(buf, NBIG * 512, 0);
    g_assert_cmpuint(after.completions - before.completions, ==, NBIG);
    g_assert_cmpuint(after.completions_direct - before.completions_direct,
                     >=, 128);
    g_assert_cmpuint(after.completions_bh - before.completions_bh, >, 0);
    g_assert_cmpuint(after.bh_scheduled - before.bh_scheduled, >=, 1);
    g_assert_false(aio_poll(ctx, false));   /* BH cancelled, nothing left */
    blk_close(blk);
    free(buf);
    g_free(iov);
    g_free(req);
    unlink(path);
}

static void test_readonly(gconstpointer data)
{
    BlockAioMode mode = GPOINTER_TO_INT(data);
    g_autofree char *path = make_file("ro.img", FILE_SIZE);
    BlockBackend *blk = open_file(path, mode, true, true, true);
    char *buf = aligned_buf(4096, 1);

    g_assert_true(blk_is_read_only(blk));
    g_assert_false(blk_can_discard(blk));
    g_assert_cmpint(do_read(blk, 0, buf, 4096), ==, 0);
    assert_filled(buf, 4096, 0);
    memset(buf, 1, 4096);
    g_assert_cmpint(do_write(blk, 0, buf, 4096, 0), ==, -EROFS);
    g_assert_cmpint(do_discard(blk, 0, 4096), ==, -EROFS);
    g_assert_cmpint(do_zeroes(blk, 0, 4096, 0), ==, -EROFS);
    g_assert_cmpint(do_flush(blk), ==, 0);
    blk_close(blk);
    free(buf);
    unlink(path);
}

static void test_writeback(gconstpointer data)
{
    BlockAioMode mode = GPOINTER_TO_INT(data);
    g_autofree char *path = make_file("wb.img", FILE_SIZE);
    BlockBackend *blk;
    BlockOptions opts;
    BlockFileOptions fo;
    GError *err = NULL;
    char buf[1000];

    blk_options_init(&opts);
    blk_file_options(&opts, &fo, path);
    fo.aio = mode;
    opts.cache_direct = false;
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    memset(buf, 9, sizeof(buf));
    g_assert_cmpint(do_write(blk, 3, buf, sizeof(buf), 0), ==, 0);
    memset(buf, 0, sizeof(buf));
    g_assert_cmpint(do_read(blk, 3, buf, sizeof(buf)), ==, 0);
    assert_filled(buf, sizeof(buf), 9);
    blk_close(blk);
    unlink(path);
}

static void test_open_missing(void)
{
    BlockOptions opts;
    BlockFileOptions fo;
    GError *err = NULL;
    g_autofree char *path = g_build_filename(tmpdir, "missing.img", NULL);

    blk_options_init(&opts);
    blk_file_options(&opts, &fo, path);
    g_assert_null(blk_open(&opts, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "cannot open"));
    g_assert_nonnull(strstr(err->message, path));
    g_assert_nonnull(strstr(err->message, "No such file or directory"));
    g_clear_error(&err);

    opts.driver = "qcow9";
    g_assert_null(blk_open(&opts, &err));
    g_assert_nonnull(strstr(err->message, "unknown block driver"));
    g_clear_error(&err);

    opts.driver = "null";
    opts.driver_opts = NULL;
    g_assert_null(blk_open(&opts, &err));
    g_assert_nonnull(strstr(err->message, "size"));
    g_clear_error(&err);
}

/*
 * A FIFO (and other special files) are refused with a clear error,
 * read-only too, without waiting: open(O_RDONLY) of a FIFO waits for a
 * writer, and it used to freeze the main loop (blockdev-add over QMP).
 * The alarm is a hang guard (its default action kills the test), not a
 * timing criterion.
 */
static void test_open_special(void)
{
    g_autofree char *fifo = g_build_filename(tmpdir, "fifo", NULL);
    BlockOptions opts;
    BlockFileOptions fo;
    GError *err = NULL;

    g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
    alarm(30);
    for (int i = 0; i < 4; i++) {
        blk_options_init(&opts);
        blk_file_options(&opts, &fo, fifo);
        opts.readonly = i < 2;
        opts.cache_direct = i % 2;
        g_assert_null(blk_open(&opts, &err));
        g_assert_nonnull(err);
        g_assert_nonnull(strstr(err->message, "is a FIFO, not a regular "
                                "file or a block device"));
        g_clear_error(&err);
    }
    blk_options_init(&opts);
    blk_file_options(&opts, &fo, "/dev/null");
    opts.readonly = true;
    g_assert_null(blk_open(&opts, &err));
    g_assert_nonnull(strstr(err->message, "a character device"));
    g_clear_error(&err);
    fo.filename = tmpdir;
    g_assert_null(blk_open(&opts, &err));
    g_assert_nonnull(err);
    g_clear_error(&err);
    alarm(0);
    unlink(fifo);
}

/* The null driver: zeroes, counters, completion never synchronous. */
static void test_null(void)
{
    BlockOptions opts;
    BlockNullOptions no;
    GError *err = NULL;
    BlockBackend *blk;
    char buf[4096];
    g_autofree Batch *b = g_new0(Batch, 1);
    int done = 0;

    blk_options_init(&opts);
    blk_null_options(&opts, &no, 1 << 30, true);
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(blk_getlength(blk), ==, 1 << 30);
    memset(buf, 1, sizeof(buf));
    g_assert_cmpint(do_read(blk, 4096, buf, sizeof(buf)), ==, 0);
    assert_filled(buf, sizeof(buf), 0);
    g_assert_cmpint(do_write(blk, 4096, buf, sizeof(buf), 0), ==, 0);
    g_assert_cmpint(do_flush(blk), ==, 0);
    g_assert_cmpint(do_discard(blk, 0, 4096), ==, 0);
    g_assert_cmpint(do_zeroes(blk, 0, 4096, 0), ==, 0);
    g_assert_cmpint(do_read(blk, 1 << 30, buf, sizeof(buf)), ==, -EINVAL);

    /* 64 requests in a section complete together from one BH run. */
    b->buf = g_malloc(NREQ * 512);
    defer_call_begin();
    for (int i = 0; i < NREQ; i++) {
        b->iov[i] = (struct iovec) { b->buf + i * 512, 512 };
        blk_aio_preadv(blk, &b->req[i].acb, 0, &b->iov[i], 1, req_cb,
                       &b->req[i]);
    }
    defer_call_end();
    g_assert_false(b->req[0].done);
    aio_poll(ctx, false);
    for (int i = 0; i < NREQ; i++) {
        done += b->req[i].done;
    }
    g_assert_cmpint(done, ==, NREQ);
    g_free(b->buf);
    blk_close(blk);
}

/* A block device: a loop device over a file (needs root and losetup). */
static void test_blockdev(gconstpointer data)
{
    BlockAioMode mode = GPOINTER_TO_INT(data);
    g_autofree char *path = make_file("loop.img", FILE_SIZE);
    g_autofree char *cmd = g_strdup_printf("losetup -f --show %s", path);
    g_autofree char *out = NULL;
    g_autofree char *detach = NULL;
    int status = 0;
    BlockBackend *blk;
    char *buf;

    if (!g_spawn_command_line_sync(cmd, &out, NULL, &status, NULL) ||
        status != 0 || !out || !g_str_has_prefix(out, "/dev/loop")) {
        g_test_skip("losetup -f failed (not root, or no loop devices)");
        unlink(path);
        return;
    }
    g_strstrip(out);
    detach = g_strdup_printf("losetup -d %s", out);

    blk = open_file(out, mode, true, false, true);
    g_assert_true(blk_is_block_device(blk));
    g_assert_cmpuint(blk_getlength(blk), ==, FILE_SIZE);
    g_assert_cmpuint(blk_get_logical_block_size(blk), >=, 512);

    buf = aligned_buf(8192, 0x6b);
    g_assert_cmpint(do_write(blk, 4096, buf, 8192, BDRV_REQ_FUA), ==, 0);
    memset(buf, 0, 8192);
    g_assert_cmpint(do_read(blk, 4096, buf, 8192), ==, 0);
    assert_filled(buf, 8192, 0x6b);
    g_assert_cmpint(do_flush(blk), ==, 0);
    g_assert_cmpint(do_zeroes(blk, 4096, 4096, 0), ==, 0);
    g_assert_cmpint(do_read(blk, 4096, buf, 8192), ==, 0);
    assert_filled(buf, 4096, 0);
    assert_filled(buf + 4096, 4096, 0x6b);
    /* Past the end: -EINVAL (the kernel would return 0 bytes). */
    g_assert_cmpint(do_read(blk, FILE_SIZE, buf, 4096), ==, -EINVAL);
    g_assert_cmpint(do_read(blk, FILE_SIZE - 4096, buf, 8192), ==, -EINVAL);
    blk_close(blk);
    free(buf);

    g_spawn_command_line_sync(detach, NULL, NULL, NULL, NULL);
    unlink(path);
}

static void add_engine_tests(const char *name, BlockAioMode mode)
{
    static const struct {
        const char *test;
        GTestDataFunc fn;
    } tests[] = {
        { "read-write", test_read_write },
        { "flush", test_flush },
        { "discard", test_discard },
        { "write-zeroes", test_write_zeroes },
        { "misaligned-bounce", test_misaligned },
        { "readonly", test_readonly },
        { "writeback", test_writeback },
        { "blockdev", test_blockdev },
    };

    for (size_t i = 0; i < ARRAY_SIZE(tests); i++) {
        g_autofree char *p = g_strdup_printf("/block/%s/%s", name,
                                             tests[i].test);
        g_test_add_data_func(p, GINT_TO_POINTER(mode), tests[i].fn);
    }
    if (mode != BLOCK_AIO_THREADS) {
        g_autofree char *p1 = g_strdup_printf("/block/%s/batch-one-submit",
                                              name);
        g_autofree char *p2 = g_strdup_printf("/block/%s/batch-off", name);
        g_test_add_data_func(p1, GINT_TO_POINTER(mode), test_batch_one_submit);
        g_test_add_data_func(p2, GINT_TO_POINTER(mode), test_batch_off);
    }
}

int main(int argc, char **argv)
{
    GError *err = NULL;
    int ret;

    g_test_init(&argc, &argv, NULL);
    tmpdir = g_strdup("/var/tmp/test-block-XXXXXX");
    g_assert_nonnull(g_mkdtemp(tmpdir));
    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);

#if CONFIG_LINUX_IO_URING
    add_engine_tests("io_uring", BLOCK_AIO_IO_URING);
    g_test_add_func("/block/io_uring/short-submit", test_luring_short_submit);
#endif
#if CONFIG_LINUX_AIO
    add_engine_tests("native", BLOCK_AIO_NATIVE);
    g_test_add_func("/block/native/direct-completion",
                    test_native_direct_completion);
    g_test_add_func("/block/native/budget-bh", test_native_budget_bh);
#endif
    add_engine_tests("threads", BLOCK_AIO_THREADS);
    g_test_add_func("/block/threads/pool-share", test_threads_pool_share);
    g_test_add_func("/block/null/requests", test_null);
    g_test_add_func("/block/open/errors", test_open_missing);
    g_test_add_func("/block/open/special-files", test_open_special);

    ret = g_test_run();
    aio_context_free(ctx);
    rmdir(tmpdir);
    g_free(tmpdir);
    return ret;
}
