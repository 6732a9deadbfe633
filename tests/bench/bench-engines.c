/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bench-engines: 4 KiB random reads through each block engine at several
 * queue depths, with batching on and off; prints IOPS and submit syscalls
 * per request (from the engine counters) as a markdown table.
 *
 * Single-threaded: the main thread runs one AioContext; every completion
 * callback submits the next read, so the completion handler's defer_call
 * section batches the resubmissions.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "qemu/defer-call.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/file.h"
#include "block/null.h"

#define BLOCK_SIZE 4096
#define MAX_DEPTH 1024

typedef struct BenchReq BenchReq;

typedef struct Bench {
    BlockBackend *blk;
    uint64_t nblocks;
    uint64_t rng;
    uint64_t completed;
    int in_flight;
    int errors;
    bool stop;
    BenchReq *reqs;
} Bench;

struct BenchReq {
    BlockAIOCB acb;
    Bench *b;
    struct iovec iov;
};

static AioContext *ctx;

static uint64_t bench_rand(Bench *b)
{
    /* xorshift64 */
    b->rng ^= b->rng << 13;
    b->rng ^= b->rng >> 7;
    b->rng ^= b->rng << 17;
    return b->rng;
}

static void bench_cb(void *opaque, int ret);

static void bench_submit(BenchReq *r)
{
    Bench *b = r->b;
    int64_t off = (bench_rand(b) % b->nblocks) * BLOCK_SIZE;

    b->in_flight++;
    blk_aio_preadv(b->blk, &r->acb, off, &r->iov, 1, bench_cb, r);
}

static void bench_cb(void *opaque, int ret)
{
    BenchReq *r = opaque;
    Bench *b = r->b;

    b->in_flight--;
    if (ret < 0) {
        b->errors++;
    }
    b->completed++;
    if (!b->stop) {
        bench_submit(r);
    }
}

static bool bench_stats(const char *engine, BlockEngineStats *st)
{
    BlockAioMode mode;

    if (!strcmp(engine, "null")) {
        return blk_engine_get_stats_by_name(ctx, "bh", st);
    }
    blk_aio_mode_parse(engine, &mode);
    return blk_engine_get_stats(ctx, mode, st);
}

static bool bench_run(const char *file, const char *engine, int depth,
                      bool batch, double seconds, uint64_t null_size)
{
    BlockOptions opts;
    BlockFileOptions fo;
    BlockNullOptions no;
    GError *err = NULL;
    BlockEngineStats before = { 0 }, after = { 0 };
    Bench b = { .rng = 0x9e3779b97f4a7c15ull };
    int64_t start, end, now;
    double elapsed;
    char *bufs;

    blk_options_init(&opts);
    opts.batch = batch;
    if (!strcmp(engine, "null")) {
        blk_null_options(&opts, &no, null_size, false);
    } else {
        blk_file_options(&opts, &fo, file);
        if (!blk_aio_mode_parse(engine, &fo.aio)) {
            fprintf(stderr, "unknown engine '%s' (io_uring, native, threads, "
                    "null)\n", engine);
            return false;
        }
    }
    b.blk = blk_open(&opts, &err);
    if (!b.blk) {
        fprintf(stderr, "%s\n", err->message);
        g_error_free(err);
        return false;
    }
    if (strcmp(engine, "null") &&
        strcmp(blk_aio_mode_name(blk_get_aio_mode(b.blk)), engine)) {
        fprintf(stderr, "engine %s not available, skipped\n", engine);
        blk_close(b.blk);
        return true;
    }
    b.nblocks = blk_getlength(b.blk) / BLOCK_SIZE;
    if (posix_memalign((void **)&bufs, 4096, (size_t)depth * BLOCK_SIZE)) {
        abort();
    }
    b.reqs = g_new0(BenchReq, depth);
    for (int i = 0; i < depth; i++) {
        b.reqs[i].b = &b;
        b.reqs[i].iov = (struct iovec) { bufs + i * BLOCK_SIZE, BLOCK_SIZE };
    }

    /* Create the engine instance before counting. */
    b.stop = true;
    bench_submit(&b.reqs[0]);
    while (b.in_flight) {
        aio_poll(ctx, true);
    }
    b.stop = false;
    b.completed = 0;
    bench_stats(engine, &before);

    start = g_get_monotonic_time();
    end = start + (int64_t)(seconds * G_USEC_PER_SEC);
    defer_call_begin();
    for (int i = 0; i < depth; i++) {
        bench_submit(&b.reqs[i]);
    }
    defer_call_end();
    do {
        aio_poll(ctx, true);
        now = g_get_monotonic_time();
    } while (now < end);
    b.stop = true;
    while (b.in_flight) {
        aio_poll(ctx, true);
    }
    elapsed = (g_get_monotonic_time() - start) / 1e6;
    bench_stats(engine, &after);

    {
        uint64_t reqs = after.requests - before.requests;
        uint64_t subs = after.submit_syscalls - before.submit_syscalls;
        uint64_t bh = after.completions_bh - before.completions_bh;
        uint64_t direct = after.completions_direct - before.completions_direct;

        printf("| %-8s | %-5s | %4d | %9.0f | %11.3f | %18" PRIu64
               " | %14" PRIu64 " | %6d |\n", engine, batch ? "on" : "off", depth,
               b.completed / elapsed, reqs ? (double)subs / reqs : 0.0,
               direct, bh, b.errors);
        fflush(stdout);
    }
    blk_close(b.blk);
    g_free(b.reqs);
    free(bufs);
    return true;
}

int main(int argc, char **argv)
{
    g_autofree char *file = NULL;
    g_autofree char *engines = g_strdup("io_uring,native,threads,null");
    g_autofree char *depths = g_strdup("1,32,128");
    double seconds = 3;
    GError *err = NULL;
    GOptionContext *oc;
    GOptionEntry entries[] = {
        { "file", 'f', 0, G_OPTION_ARG_FILENAME, &file,
          "image file or block device (O_DIRECT)", "PATH" },
        { "engines", 'e', 0, G_OPTION_ARG_STRING, &engines,
          "comma-separated engines (io_uring,native,threads,null)", "LIST" },
        { "depths", 'd', 0, G_OPTION_ARG_STRING, &depths,
          "comma-separated queue depths", "LIST" },
        { "seconds", 's', 0, G_OPTION_ARG_DOUBLE, &seconds,
          "seconds per run", "N" },
        { NULL }
    };
    g_auto(GStrv) elist = NULL;
    g_auto(GStrv) dlist = NULL;

    oc = g_option_context_new("- block engine benchmark");
    g_option_context_add_main_entries(oc, entries, NULL);
    if (!g_option_context_parse(oc, &argc, &argv, &err)) {
        fprintf(stderr, "bench-engines: %s\n", err->message);
        return 2;
    }
    g_option_context_free(oc);
    if (!file) {
        fprintf(stderr, "bench-engines: --file is required\n");
        return 2;
    }
    ctx = aio_context_new(&err);
    if (!ctx) {
        fprintf(stderr, "bench-engines: %s\n", err->message);
        return 1;
    }
    aio_context_acquire_thread(ctx);

    elist = g_strsplit(engines, ",", -1);
    dlist = g_strsplit(depths, ",", -1);
    printf("| engine   | batch | QD   |      IOPS | submits/req | completions direct | completions bh | errors |\n");
    printf("|----------|-------|------|-----------|-------------|--------------------|----------------|--------|\n");
    for (int e = 0; elist[e]; e++) {
        for (int batch = 1; batch >= 0; batch--) {
            for (int d = 0; dlist[d]; d++) {
                int depth = atoi(dlist[d]);

                if (depth < 1 || depth > MAX_DEPTH) {
                    fprintf(stderr, "bad depth '%s' (1..%d)\n", dlist[d],
                            MAX_DEPTH);
                    return 2;
                }
                if (!bench_run(file, elist[e], depth, batch, seconds,
                               256ull << 20)) {
                    return 1;
                }
            }
        }
    }
    aio_context_free(ctx);
    return 0;
}
