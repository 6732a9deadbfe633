/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * libFuzzer target: a hostile driver owns guest memory and the rings; the
 * virtqueue -- split, or packed with header flag 0x40 -- pops its chains
 * and virtio-blk (null backend) serves them.
 *
 * The input is a small header that sets up the queue (size, ring
 * addresses, base, event-idx, inflight region contents), then an image of
 * the first bytes of guest memory (descriptor tables, rings, request
 * headers), then a list of operations: pop, unpop, submit and complete,
 * notify, poke guest memory (the driver racing with the device), toggle
 * notifications or the write cache, restart the queue, or "crash" the
 * back-end and start a new queue over the same memory and inflight region.
 * See gen-seeds.py for the exact layout.
 *
 * Besides the sanitizers, the harness checks the virtqueue's promises:
 * every popped iovec lies inside one guest memory mapping, a head is never
 * handed out twice, each request completes exactly once with a status
 * byte written where the driver expects it, and the used ring entry (packed:
 * the used descriptor at the device's used slot, with the lap's flags)
 * matches what was pushed.
 *
 * Threads: single-threaded; the fuzzer's thread owns the AioContext.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "qemu/iov.h"
#include "hw/virtio/virtqueue.h"
#include "hw/block/virtio-blk.h"
#include "block/null.h"
#include "fuzz-common.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <linux/virtio_ring.h>

/*
 * Guest memory: A and B adjacent in guest-physical space (a chain may be
 * split at their border), C after a hole.  Far apart in VMM space.
 */
#define FVQ_REGION_SIZE 0x10000ull
#define FVQ_NREGIONS    3
static const VhostUserMemoryRegion fvq_regions[FVQ_NREGIONS] = {
    { .guest_phys_addr = 0, .memory_size = FVQ_REGION_SIZE,
      .userspace_addr = 0x7f0000000000ull },
    { .guest_phys_addr = FVQ_REGION_SIZE, .memory_size = FVQ_REGION_SIZE,
      .userspace_addr = 0x7f1000000000ull },
    { .guest_phys_addr = 0x100000, .memory_size = 0x1000,
      .userspace_addr = 0x7f2000000000ull },
};
/* The image and pokes cover A and B */
#define FVQ_IMAGE_MAX   (2 * FVQ_REGION_SIZE)
#define FVQ_DISK_SIZE   (1024 * 1024)
#define FVQ_MAX_OPS     256

/* Header flags */
#define FVQ_F_EVENT_IDX     0x01
#define FVQ_F_INFLIGHT      0x02
#define FVQ_F_RAW_ADDR      0x04    /* ring addresses are raw u64 uvas */
#define FVQ_F_WRITETHROUGH  0x08
#define FVQ_F_DEV_SHIFT     4       /* two bits: which device */
#define FVQ_F_PACKED        0x40    /* VIRTIO_F_RING_PACKED */

/* Operations */
enum {
    FVQ_OP_POP,             /* u8 budget: pop and hold */
    FVQ_OP_SUBMIT,          /* submit everything held, complete, notify */
    FVQ_OP_POP_SUBMIT,      /* u8 budget: both */
    FVQ_OP_UNPOP,           /* u8 count: give back the newest held ones */
    FVQ_OP_POKE,            /* u32 gpa, u8 len, bytes: driver writes */
    FVQ_OP_NOTIFICATION,    /* u8 on */
    FVQ_OP_HAS_AVAIL,
    FVQ_OP_NOTIFY,
    FVQ_OP_WRITEBACK,       /* u8 on */
    FVQ_OP_RESTART,         /* stop and start the same queue */
    FVQ_OP_CRASH,           /* u8 how, [u16 base]: new back-end instance */
    FVQ_OP_MAX,
};

typedef enum FuzzVQReqState {
    FVQ_REQ_FREE,
    FVQ_REQ_HELD,           /* popped, not submitted */
    FVQ_REQ_SUBMITTED,      /* in virtio-blk, not completed */
} FuzzVQReqState;

typedef struct FuzzVQReq {
    VirtioBlkReq req;
    VirtQueueElement *elem;
    FuzzVQReqState state;
} FuzzVQReq;

typedef struct FuzzVQ {
    /* Process-wide */
    AioContext *ctx;
    GuestMemory mem;
    BlockBackend *blk[2];
    VirtioBlkDev dev[3];
    int call_fd;
    bool verbose;               /* FUZZ_VERBOSE=1: print each completion */

    /* Per input */
    VirtQueue *vq;
    VirtioBlkDev *cur_dev;
    unsigned int num;
    bool event_idx;
    bool packed;
    VhostUserVringAddr addr;
    void *inflight;
    unsigned int pending;
    uint16_t held[VIRTQUEUE_MAX_SIZE];  /* in pop order */
    unsigned int nheld;
    FuzzVQReq reqs[VIRTQUEUE_MAX_SIZE];
} FuzzVQ;

static FuzzVQ fvq;

static void fvq_open_devs(void)
{
    static const struct {
        int blk;
        uint32_t lbs;
        bool readonly;
    } devs[3] = {
        { 0, 512, false },
        { 1, 512, true },
        { 0, 4096, false },
    };
    GError *err = NULL;
    unsigned int i;

    for (i = 0; i < 2; i++) {
        BlockOptions opts;
        BlockNullOptions no;

        blk_options_init(&opts);
        blk_null_options(&opts, &no, FVQ_DISK_SIZE, true);
        opts.readonly = i == 1;
        fvq.blk[i] = blk_open(&opts, &err);
        g_assert_no_error(err);
    }
    for (i = 0; i < 3; i++) {
        VirtioBlkConf conf = {
            .logical_block_size = devs[i].lbs,
            .num_queues = 1,
            .queue_size = 256,
            .readonly = devs[i].readonly,
            .discard = true,
            .write_zeroes = true,
        };

        g_strlcpy(conf.serial, "fuzz-serial-0123456789", sizeof(conf.serial));
        if (!virtio_blk_dev_init(&fvq.dev[i], fvq.blk[devs[i].blk], &conf,
                                 &err)) {
            g_error("virtio_blk_dev_init: %s", err->message);
        }
    }
}

/* Called once, from the fuzzer's thread, before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    GError *err = NULL;
    unsigned int i;

    fvq.ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(fvq.ctx);

    guest_mem_init(&fvq.mem);
    for (i = 0; i < FVQ_NREGIONS; i++) {
        int fd = memfd_create("fuzz-virtqueue", MFD_CLOEXEC);

        g_assert(fd >= 0);
        g_assert(ftruncate(fd, fvq_regions[i].memory_size) == 0);
        if (!guest_mem_add_region(&fvq.mem, &fvq_regions[i], fd, &err)) {
            g_error("guest_mem_add_region: %s", err->message);
        }
        close(fd);
    }
    fvq.call_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    g_assert(fvq.call_fd >= 0);
    fvq_open_devs();
    fvq.verbose = g_getenv("FUZZ_VERBOSE") != NULL;
    return 0;
}

/* Whether [base, base + len) lies inside one guest memory mapping. */
static bool fvq_in_guest_memory(const void *base, size_t len)
{
    uintptr_t b = (uintptr_t)base;
    unsigned int i;

    for (i = 0; i < fvq.mem.nregions; i++) {
        uintptr_t host = (uintptr_t)fvq.mem.regions[i].host;
        uintptr_t size = fvq.mem.regions[i].size;

        if (b >= host && b - host <= size && len <= size - (b - host)) {
            return true;
        }
    }
    return false;
}

static void fvq_check_elem(VirtQueueElement *e)
{
    unsigned int i;

    fuzz_check(e->head < fvq.num, "head %u, queue size %u", e->head,
               fvq.num);
    fuzz_check(e == fvq.reqs[e->head].elem || !fvq.reqs[e->head].elem,
               "head %u came back in another element", e->head);
    fuzz_check(fvq.reqs[e->head].state == FVQ_REQ_FREE,
               "head %u popped while still in flight", e->head);
    fuzz_check(e->out_num + e->in_num <= VIRTQUEUE_MAX_SG,
               "%u + %u iovecs", e->out_num, e->in_num);
    fuzz_check(e->out_sg == e->sg && e->in_sg == e->sg + e->out_num,
               "element %u: sg pointers", e->head);
    for (i = 0; i < e->out_num + e->in_num; i++) {
        fuzz_check(fvq_in_guest_memory(e->sg[i].iov_base, e->sg[i].iov_len),
                   "head %u iovec %u (%p + %zu) outside guest memory",
                   e->head, i, e->sg[i].iov_base, e->sg[i].iov_len);
    }
}

/* Packed: the used descriptor the push wrote at @slot of lap @wrap. */
static void fvq_check_used_packed(uint16_t slot, bool wrap, uint16_t head,
                                  uint32_t len)
{
    struct vring_packed_desc *ring;
    uint16_t want = wrap ? (1 << VRING_PACKED_DESC_F_AVAIL) |
                           (1 << VRING_PACKED_DESC_F_USED) : 0;

    ring = guest_mem_uva_to_host(&fvq.mem, fvq.addr.desc_user_addr,
                                 16 * (uint64_t)fvq.num);
    fuzz_check(ring, "descriptor ring vanished");
    fuzz_check(slot < fvq.num, "used slot %u, queue size %u", slot, fvq.num);
    fuzz_check(ring[slot].id == head && ring[slot].len == len &&
               (ring[slot].flags & want) == want &&
               !(ring[slot].flags & ~want &
                 ((1 << VRING_PACKED_DESC_F_AVAIL) |
                  (1 << VRING_PACKED_DESC_F_USED))),
               "used descriptor at slot %u is {%u, %u, 0x%x}, pushed "
               "{%u, %u} in lap %u", slot, ring[slot].id, ring[slot].len,
               ring[slot].flags, head, len, wrap);
}

static void fvq_check_used(uint16_t head, uint32_t len)
{
    struct vring_used *used;
    uint16_t idx;

    used = guest_mem_uva_to_host(&fvq.mem, fvq.addr.used_user_addr,
                                 6 + 8 * (uint64_t)fvq.num);
    fuzz_check(used, "used ring vanished");
    idx = used->idx - 1;
    fuzz_check(used->ring[idx & (fvq.num - 1)].id == head &&
               used->ring[idx & (fvq.num - 1)].len == len,
               "used entry %u is {%u, %u}, pushed {%u, %u}", idx,
               used->ring[idx & (fvq.num - 1)].id,
               used->ring[idx & (fvq.num - 1)].len, head, len);
}

static void fvq_req_done(VirtioBlkReq *req, uint8_t status, uint32_t in_len,
                         void *opaque)
{
    FuzzVQReq *r = opaque;
    VirtQueueElement *e = r->elem;
    size_t in_size = iov_size(e->in_sg, e->in_num);

    fuzz_check(&r->req == req, "wrong request");
    fuzz_check(r->state == FVQ_REQ_SUBMITTED,
               "head %u completed twice (or never submitted)", e->head);
    fuzz_check(status == VIRTIO_BLK_S_OK || status == VIRTIO_BLK_S_IOERR ||
               status == VIRTIO_BLK_S_UNSUPP, "status %u", status);
    fuzz_check(in_len <= in_size, "in_len %u > %zu writable bytes", in_len,
               in_size);
    if (in_size == 0) {
        fuzz_check(in_len == 0 && status == VIRTIO_BLK_S_IOERR,
                   "no status byte but status %u, in_len %u", status, in_len);
    } else {
        const struct iovec *last = &e->in_sg[e->in_num - 1];
        const uint8_t *sbyte = (uint8_t *)last->iov_base + last->iov_len - 1;

        fuzz_check(in_len >= 1, "status written but in_len 0");
        fuzz_check(*sbyte == status, "status byte %u, reported %u", *sbyte,
                   status);
    }
    if (fvq.verbose) {
        fprintf(stderr, "head %u: type %u status %u in_len %u\n", e->head,
                req->type, status, in_len);
    }
    r->state = FVQ_REQ_FREE;
    fvq.pending--;
    if (fvq.packed) {
        /* where the push writes: the used slot and lap before it */
        uint32_t base = virtqueue_get_base(fvq.vq);

        virtqueue_push(fvq.vq, e, in_len);
        fvq_check_used_packed((base >> 16) & 0x7fff, base >> 31, e->head,
                              in_len);
        return;
    }
    virtqueue_push(fvq.vq, e, in_len);
    fvq_check_used(e->head, in_len);
}

static void fvq_drain(void)
{
    unsigned int i;

    for (i = 0; i < 1000 && fvq.pending > 0; i++) {
        aio_poll(fvq.ctx, false);
    }
    fuzz_check(fvq.pending == 0, "%u request(s) never completed",
               fvq.pending);
    /* nothing else left scheduled either */
    while (aio_poll(fvq.ctx, false)) {
    }
}

static void fvq_pop(unsigned int budget)
{
    while (budget-- > 0) {
        VirtQueueElement *e = virtqueue_pop(fvq.vq);

        if (!e) {
            return;
        }
        fvq_check_elem(e);
        fvq.reqs[e->head].elem = e;
        fvq.reqs[e->head].state = FVQ_REQ_HELD;
        fuzz_check(fvq.nheld < fvq.num, "more chains popped than heads");
        fvq.held[fvq.nheld++] = e->head;
    }
}

static void fvq_unpop(unsigned int count)
{
    while (count-- > 0 && fvq.nheld > 0) {
        FuzzVQReq *r = &fvq.reqs[fvq.held[--fvq.nheld]];

        r->state = FVQ_REQ_FREE;
        virtqueue_unpop(fvq.vq, r->elem);
    }
}

static void fvq_submit(void)
{
    unsigned int i;

    for (i = 0; i < fvq.nheld; i++) {
        FuzzVQReq *r = &fvq.reqs[fvq.held[i]];
        VirtQueueElement *e = r->elem;

        r->state = FVQ_REQ_SUBMITTED;
        fvq.pending++;
        virtio_blk_process_req(fvq.cur_dev, &r->req, e->out_sg, e->out_num,
                               e->in_sg, e->in_num, fvq_req_done, r);
    }
    fvq.nheld = 0;
    fvq_drain();
    virtqueue_notify(fvq.vq);
}

static void fvq_poke(FuzzInput *in)
{
    uint32_t gpa = fuzz_u32(in) % FVQ_IMAGE_MAX;
    size_t len = fuzz_u8(in);
    const uint8_t *p = fuzz_take(in, &len);
    size_t i;

    for (i = 0; i < len; i++) {
        uint8_t *host = guest_mem_gpa_to_host(&fvq.mem, gpa + i, 1);

        if (host) {
            *host = p[i];
        }
    }
}

/* Forget the elements of the previous queue (only the bookkeeping: the
 * request structs are big and virtio_blk_process_req() sets them up). */
static void fvq_reset_reqs(void)
{
    unsigned int i;

    /* heads >= num are never looked at */
    for (i = 0; i < MIN(fvq.num, VIRTQUEUE_MAX_SIZE); i++) {
        fvq.reqs[i].elem = NULL;
        fvq.reqs[i].state = FVQ_REQ_FREE;
    }
    fvq.nheld = 0;
}

/* A new back-end instance's queue over the current memory: false if the
 * setup was rejected (which ends the input). */
static bool fvq_new_queue(uint32_t base)
{
    VirtQueue *vq = virtqueue_new(0);
    GError *err = NULL;
    int kick = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

    g_assert(kick >= 0);
    virtqueue_set_kick_fd(vq, kick);
    virtqueue_set_call_fd(vq, dup(fvq.call_fd));
    virtqueue_set_event_idx(vq, fvq.event_idx);
    virtqueue_set_packed(vq, fvq.packed);
    virtqueue_set_inflight(vq, fvq.inflight);
    virtqueue_set_enabled(vq, true);
    virtqueue_set_base(vq, base);
    if (!virtqueue_set_num(vq, fvq.num, &err) ||
        !virtqueue_set_addr(vq, &fvq.addr, &err)) {
        goto fail;
    }
    fuzz_check(virtqueue_is_ready(vq), "queue with num, addr, kick not ready");
    if (!virtqueue_start(vq, &fvq.mem, &err)) {
        goto fail;
    }
    fuzz_check(virtqueue_is_started(vq), "started queue says it is not");
    fvq.vq = vq;
    return true;

fail:
    fuzz_check(err, "setup failed without an error");
    g_error_free(err);
    virtqueue_free(vq);
    return false;
}

static bool fvq_crash(FuzzInput *in)
{
    uint8_t how = fuzz_u8(in);
    uint32_t base;

    virtqueue_free(fvq.vq);
    fvq.vq = NULL;
    fvq_reset_reqs();
    if (fvq.packed) {
        /* QEMU sends the base of the last start again: stale after a
         * crash; or anything */
        base = how & 1 ? fuzz_u32(in) : 0x80008000u;
    } else if (how & 1) {
        base = fuzz_u16(in);
    } else {
        /* what a VMM sends when it could not ask the dead back-end */
        struct vring_used *used =
            guest_mem_uva_to_host(&fvq.mem, fvq.addr.used_user_addr, 4);

        base = used ? used->idx : 0;
    }
    return fvq_new_queue(base);
}

static bool fvq_restart(void)
{
    GError *err = NULL;

    if (fvq.nheld > 0) {
        return true;        /* the server drains a queue before a restart */
    }
    virtqueue_stop(fvq.vq);
    fuzz_check(!virtqueue_is_started(fvq.vq), "stopped queue still started");
    virtqueue_set_base(fvq.vq, virtqueue_get_base(fvq.vq));
    if (!virtqueue_start(fvq.vq, &fvq.mem, &err)) {
        g_error_free(err);
        return false;
    }
    return true;
}

static void fvq_run_ops(FuzzInput *in)
{
    unsigned int n;

    for (n = 0; n < FVQ_MAX_OPS && fuzz_remaining(in) > 0; n++) {
        uint8_t op = fuzz_u8(in) % FVQ_OP_MAX;
        uint8_t on;

        switch (op) {
        case FVQ_OP_POP:
            fvq_pop(fuzz_u8(in) % 64 + 1);
            break;
        case FVQ_OP_SUBMIT:
            fvq_submit();
            break;
        case FVQ_OP_POP_SUBMIT:
            fvq_pop(fuzz_u8(in) % 64 + 1);
            fvq_submit();
            break;
        case FVQ_OP_UNPOP:
            fvq_unpop(fuzz_u8(in) % 8 + 1);
            break;
        case FVQ_OP_POKE:
            fvq_poke(in);
            break;
        case FVQ_OP_NOTIFICATION:
            virtqueue_set_notification(fvq.vq, fuzz_u8(in) & 1);
            break;
        case FVQ_OP_HAS_AVAIL:
            virtqueue_has_avail(fvq.vq);
            break;
        case FVQ_OP_NOTIFY:
            virtqueue_notify(fvq.vq);
            break;
        case FVQ_OP_WRITEBACK:
            on = fuzz_u8(in) & 1;
            virtio_blk_set_config(fvq.cur_dev, &on,
                                  offsetof(struct virtio_blk_config, wce), 1);
            break;
        case FVQ_OP_RESTART:
            if (!fvq_restart()) {
                return;
            }
            break;
        case FVQ_OP_CRASH:
            if (!fvq_crash(in)) {
                return;
            }
            break;
        }
    }
    /* the driver always gets its completions in the end */
    fvq_submit();
}

static void fvq_load_image(FuzzInput *in)
{
    size_t len = fuzz_u16(in);
    const uint8_t *p = fuzz_take(in, &len);
    unsigned int i;

    for (i = 0; i < fvq.mem.nregions; i++) {
        memset(fvq.mem.regions[i].host, 0, fvq.mem.regions[i].size);
    }
    /* A and B are contiguous from guest-physical 0 */
    for (i = 0; i < 2 && len > 0; i++) {
        size_t chunk = MIN(len, FVQ_REGION_SIZE);

        memcpy(guest_mem_gpa_to_host(&fvq.mem, i * FVQ_REGION_SIZE, chunk),
               p, chunk);
        p += chunk;
        len -= chunk;
    }
}

/* Called from the fuzzer's thread, once per input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzInput in;
    uint8_t qsel, flags;
    uint16_t base;
    unsigned int dev;

    fuzz_input_init(&in, data, size);
    qsel = fuzz_u8(&in);
    /* Powers of two, mostly small ones: a queue's element pool is 4 KiB
     * per entry, and allocating it dominates the run time of big queues.
     * 0x40 picks 256..2048 (the last one too big); 0x80 any u16. */
    if (qsel & 0x80) {
        fvq.num = fuzz_u16(&in);
    } else if (qsel & 0x40) {
        fvq.num = 256u << (qsel & 3);
    } else {
        fvq.num = 1u << (qsel & 7);
    }
    flags = fuzz_u8(&in);
    fvq.event_idx = flags & FVQ_F_EVENT_IDX;
    fvq.packed = flags & FVQ_F_PACKED;
    dev = (flags >> FVQ_F_DEV_SHIFT) & 3;
    fvq.cur_dev = &fvq.dev[dev % 3];
    base = fuzz_u16(&in);

    memset(&fvq.addr, 0, sizeof(fvq.addr));
    if (flags & FVQ_F_RAW_ADDR) {
        fvq.addr.desc_user_addr = fuzz_u64(&in);
        fvq.addr.avail_user_addr = fuzz_u64(&in);
        fvq.addr.used_user_addr = fuzz_u64(&in);
    } else {
        uint64_t uva = fvq_regions[0].userspace_addr;

        fvq.addr.desc_user_addr = uva + (fuzz_u16(&in) & ~15u);
        /* packed: the driver area needs 4-byte alignment */
        fvq.addr.avail_user_addr = uva + (fuzz_u16(&in) &
                                          (fvq.packed ? ~3u : ~1u));
        fvq.addr.used_user_addr = uva + (fuzz_u16(&in) & ~3u);
    }

    fvq.inflight = NULL;
    if ((flags & FVQ_F_INFLIGHT) && fvq.num > 0 &&
        fvq.num <= VIRTQUEUE_MAX_SIZE) {
        size_t rsize = vhost_user_inflight_queue_size_fmt(fvq.num,
                                                          fvq.packed);
        size_t len = fuzz_u16(&in);

        /* plain heap memory: ASan sees any access past its end */
        fvq.inflight = g_malloc0(rsize);
        fuzz_bytes(&in, fvq.inflight, MIN(len, rsize));
    }
    fvq_load_image(&in);

    {
        uint8_t wce = !(flags & FVQ_F_WRITETHROUGH);

        virtio_blk_set_features(fvq.cur_dev,
                                virtio_blk_get_features(fvq.cur_dev));
        virtio_blk_set_config(fvq.cur_dev, &wce,
                              offsetof(struct virtio_blk_config, wce), 1);
    }
    fvq_reset_reqs();
    fvq.pending = 0;
    fvq.vq = NULL;

    /* packed: the u16 gives both positions (bit 15: both wrap counters) */
    if (fvq_new_queue(fvq.packed ? (uint32_t)base * 0x10001u : base)) {
        fvq_run_ops(&in);
    }
    if (fvq.vq) {
        virtqueue_free(fvq.vq);
        fvq.vq = NULL;
    }
    g_free(fvq.inflight);
    fvq.inflight = NULL;
    return 0;
}
