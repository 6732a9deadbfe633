/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * libFuzzer target: virtio_blk_process_req() on arbitrary iovec layouts
 * (header split anywhere, status byte anywhere or missing, iovecs that
 * overlap or are empty, too many of them) over one fixed buffer, with the
 * null backend and a small file backend (aio=threads, cache=writeback).
 *
 * Input: u8 flags (bits 0-1 device, bit 2 writethrough), u16 out count,
 * u16 in count, then {u16 offset, u16 length} per iovec (clipped to the
 * buffer), then the buffer contents.  See gen-seeds.py.
 *
 * Checks, besides the sanitizers: the request completes exactly once; the
 * status byte is the last writable byte and holds the reported status;
 * in_len never exceeds the writable bytes; no byte outside the "in" iovecs
 * changes (the buffer is surrounded by guard bytes that must survive);
 * the image file never grows.
 *
 * Threads: the fuzzer's thread owns the AioContext; the thread pool's
 * workers do the file I/O and complete back into it.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "qemu/iov.h"
#include "hw/block/virtio-blk.h"
#include "block/file.h"
#include "block/null.h"
#include "fuzz-common.h"

#include <sys/stat.h>

#define FVB_BUF_SIZE    8192
#define FVB_GUARD       64
#define FVB_GUARD_BYTE  0xa5
#define FVB_MAX_IOV     300     /* more than a virtqueue element holds */
#define FVB_DISK_SIZE   (1024 * 1024)
#define FVB_NDEVS       4

typedef struct FuzzVirtioBlk {
    AioContext *ctx;
    BlockBackend *blk[3];
    VirtioBlkDev dev[FVB_NDEVS];
    int image_fd;               /* our own handle on the (unlinked) image */
    bool verbose;               /* FUZZ_VERBOSE=1: print each completion */

    /* Per input */
    uint8_t *arena;             /* guard, buffer, guard */
    uint8_t *buf;
    uint8_t *before;            /* snapshot of the buffer */
    struct iovec out[FVB_MAX_IOV];
    struct iovec in[FVB_MAX_IOV];
    unsigned int out_num, in_num;
    VirtioBlkReq req;
    unsigned int completions;
    uint8_t status;
    uint32_t in_len;
} FuzzVirtioBlk;

static FuzzVirtioBlk fvb;

static BlockBackend *fvb_open(const char *driver, const char *filename,
                              bool readonly)
{
    BlockOptions opts;
    BlockFileOptions fo;
    BlockNullOptions no;
    BlockBackend *blk;
    GError *err = NULL;

    blk_options_init(&opts);
    if (!strcmp(driver, "null")) {
        blk_null_options(&opts, &no, FVB_DISK_SIZE, true);
    } else {
        blk_file_options(&opts, &fo, filename);
        fo.aio = BLOCK_AIO_THREADS;
    }
    opts.driver = driver;
    opts.readonly = readonly;
    opts.cache_direct = false;
    blk = blk_open(&opts, &err);
    if (!blk) {
        g_error("blk_open(%s): %s", driver, err->message);
    }
    return blk;
}

/* Called once, from the fuzzer's thread, before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const struct {
        int blk;
        uint32_t lbs;
    } devs[FVB_NDEVS] = {
        { 0, 512 },         /* null, read-write */
        { 1, 512 },         /* null, read-only */
        { 2, 512 },         /* file, read-write */
        { 0, 4096 },        /* null, 4K logical blocks */
    };
    g_autofree char *path = NULL;
    GError *err = NULL;
    unsigned int i;

    fvb.ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(fvb.ctx);

    fvb.image_fd = g_file_open_tmp("fuzz-virtio-blk-XXXXXX", &path, &err);
    g_assert_no_error(err);
    g_assert(ftruncate(fvb.image_fd, FVB_DISK_SIZE) == 0);
    fvb.blk[0] = fvb_open("null", NULL, false);
    fvb.blk[1] = fvb_open("null", NULL, true);
    fvb.blk[2] = fvb_open("file", path, false);
    unlink(path);

    for (i = 0; i < FVB_NDEVS; i++) {
        VirtioBlkConf conf = {
            .logical_block_size = devs[i].lbs,
            .num_queues = 1,
            .queue_size = 128,
            .discard = true,
            .write_zeroes = true,
        };

        g_strlcpy(conf.serial, "fuzz-blk-serial-01234", sizeof(conf.serial));
        if (!virtio_blk_dev_init(&fvb.dev[i], fvb.blk[devs[i].blk], &conf,
                                 &err)) {
            g_error("virtio_blk_dev_init: %s", err->message);
        }
        /* a driver that acked everything: the write cache is on */
        virtio_blk_set_features(&fvb.dev[i],
                                virtio_blk_get_features(&fvb.dev[i]));
    }
    fvb.arena = g_malloc(FVB_BUF_SIZE + 2 * FVB_GUARD);
    fvb.buf = fvb.arena + FVB_GUARD;
    fvb.before = g_malloc(FVB_BUF_SIZE);
    fvb.verbose = g_getenv("FUZZ_VERBOSE") != NULL;
    return 0;
}

static void fvb_req_done(VirtioBlkReq *req, uint8_t status, uint32_t in_len,
                         void *opaque)
{
    fuzz_check(req == &fvb.req && opaque == &fvb, "wrong request");
    fvb.completions++;
    fvb.status = status;
    fvb.in_len = in_len;
}

/* Whether byte @p of the buffer belongs to one of the "in" iovecs. */
static bool fvb_in_writable(const uint8_t *p)
{
    unsigned int i;

    for (i = 0; i < fvb.in_num; i++) {
        const uint8_t *b = fvb.in[i].iov_base;

        if (p >= b && p < b + fvb.in[i].iov_len) {
            return true;
        }
    }
    return false;
}

static void fvb_read_iovecs(FuzzInput *in, struct iovec *iov,
                            unsigned int n)
{
    unsigned int i;

    for (i = 0; i < n; i++) {
        unsigned int off = fuzz_u16(in) % (FVB_BUF_SIZE + 1);
        unsigned int len = fuzz_u16(in);

        len = MIN(len, FVB_BUF_SIZE - off);

        iov[i].iov_base = fvb.buf + off;
        iov[i].iov_len = len;
    }
}

static void fvb_check(void)
{
    size_t in_size = iov_size(fvb.in, fvb.in_num);
    struct stat st;
    unsigned int i;

    fuzz_check(fvb.completions == 1, "%u completions", fvb.completions);
    fuzz_check(fvb.status == VIRTIO_BLK_S_OK ||
               fvb.status == VIRTIO_BLK_S_IOERR ||
               fvb.status == VIRTIO_BLK_S_UNSUPP, "status %u", fvb.status);
    fuzz_check(fvb.in_len <= in_size, "in_len %u > %zu writable bytes",
               fvb.in_len, in_size);
    if (in_size == 0) {
        fuzz_check(fvb.in_len == 0 && fvb.status == VIRTIO_BLK_S_IOERR,
                   "no writable byte, status %u, in_len %u", fvb.status,
                   fvb.in_len);
    } else {
        const uint8_t *sbyte = NULL;

        for (i = fvb.in_num; i > 0 && !sbyte; i--) {
            if (fvb.in[i - 1].iov_len > 0) {
                sbyte = (uint8_t *)fvb.in[i - 1].iov_base +
                        fvb.in[i - 1].iov_len - 1;
            }
        }
        fuzz_check(fvb.in_len >= 1, "status written but in_len 0");
        fuzz_check(*sbyte == fvb.status, "status byte %u, reported %u",
                   *sbyte, fvb.status);
    }
    for (i = 0; i < FVB_GUARD; i++) {
        fuzz_check(fvb.arena[i] == FVB_GUARD_BYTE &&
                   fvb.buf[FVB_BUF_SIZE + i] == FVB_GUARD_BYTE,
                   "guard byte %u clobbered", i);
    }
    for (i = 0; i < FVB_BUF_SIZE; i++) {
        fuzz_check(fvb.buf[i] == fvb.before[i] ||
                   fvb_in_writable(&fvb.buf[i]),
                   "byte %u changed but is not in an in iovec", i);
    }
    fuzz_check(fstat(fvb.image_fd, &st) == 0 && st.st_size == FVB_DISK_SIZE,
               "image size changed to %lld", (long long)st.st_size);
}

/*
 * Run the context until the request has completed and nothing is left.
 * How many turns that takes depends on when the pool's worker finished,
 * not on the input, so this function is left out of the coverage
 * feedback (coverage-ignore.txt); noinline keeps it out of its caller.
 */
static __attribute__((noinline)) void fvb_wait(void)
{
    while (fvb.completions == 0) {
        /* the thread pool completes through the context's eventfd */
        aio_poll(fvb.ctx, true);
    }
    while (aio_poll(fvb.ctx, false)) {
    }
}

/* Called from the fuzzer's thread, once per input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzInput in;
    uint8_t flags, wce;
    VirtioBlkDev *dev;

    fuzz_input_init(&in, data, size);
    flags = fuzz_u8(&in);
    dev = &fvb.dev[flags & 3];
    fvb.out_num = fuzz_u16(&in) % (FVB_MAX_IOV + 1);
    fvb.in_num = fuzz_u16(&in) % (FVB_MAX_IOV + 1);
    fvb_read_iovecs(&in, fvb.out, fvb.out_num);
    fvb_read_iovecs(&in, fvb.in, fvb.in_num);

    memset(fvb.arena, FVB_GUARD_BYTE, FVB_BUF_SIZE + 2 * FVB_GUARD);
    fuzz_bytes(&in, fvb.buf, MIN(fuzz_remaining(&in), FVB_BUF_SIZE));
    memcpy(fvb.before, fvb.buf, FVB_BUF_SIZE);

    wce = !(flags & 4);
    virtio_blk_set_config(dev, &wce, offsetof(struct virtio_blk_config, wce),
                          1);
    fvb.completions = 0;
    memset(&fvb.req, 0, sizeof(fvb.req));
    virtio_blk_process_req(dev, &fvb.req, fvb.out, fvb.out_num, fvb.in,
                           fvb.in_num, fvb_req_done, &fvb);
    fvb_wait();
    if (fvb.verbose) {
        fprintf(stderr, "type %u status %u in_len %u\n", fvb.req.type,
                fvb.status, fvb.in_len);
    }
    fvb_check();
    return 0;
}
