/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * libFuzzer target: the inflight restore of a split or packed virtqueue
 * (what a restarted back-end does with the region the VMM hands back)
 * with a mutated region, a mutated ring image, and a front-end that
 * rewrites region bytes while the restore runs.
 *
 * Input layout (little-endian; missing bytes read as zero):
 *   u8  flags       bit 0: packed ring, bit 1: event-idx
 *   u8  qlog        queue size 1 << (qlog % 7): 1 .. 64
 *   u32 base        SET_VRING_BASE value
 *   u16 used_idx    split: used->idx in guest memory
 *   u8  nflips      then nflips x { u16 offset, u8 value }: region bytes
 *                   the "front-end" writes between the restore's checks
 *                   and its use of what it read (the test hook)
 *   region          the whole inflight region of one queue
 *   image           the rest: guest memory from gpa 0 (rings, buffers)
 *
 * Guest memory: one 64 KiB region; the ring areas are at fixed addresses
 * (split: descriptors 0x0, avail 0x1000, used 0x2000; packed: descriptors
 * 0x0, driver area 0x1000, device area 0x1100).
 *
 * Besides the sanitizers (the region is a heap buffer of exactly its size,
 * so an entry index past it is reported), the harness checks: a queue
 * that starts has its positions inside the ring, every element popped
 * (the replayed ones first) has a head below the queue size, is handed
 * out once, and its iovecs lie in guest memory; and a region this back-end
 * left (no front-end writes during the restore) is taken by the next
 * instance.
 *
 * Threads: the fuzzer's, and the "front-end" writes happen in the hook on
 * the same thread (the point is where they land, not a real race).
 */
#include "qemu/osdep.h"
#include "hw/virtio/virtqueue.h"
#include "fuzz-common.h"

#include <sys/mman.h>
#include <linux/virtio_ring.h>

#define FIN_MEM_SIZE    0x10000ull
#define FIN_UVA         0x7f0000000000ull
#define FIN_IMAGE_MAX   0x3000u
#define FIN_MAX_FLIPS   32

static struct {
    GuestMemory mem;
    uint8_t *host;              /* guest memory, mapped here */
    bool verbose;               /* FUZZ_VERBOSE=1: say why a start failed */

    /* per input */
    void *region;
    size_t region_size;
    bool armed;
    unsigned int nflips;
    struct {
        uint16_t off;
        uint8_t val;
    } flips[FIN_MAX_FLIPS];
} fin;

/* The restore reached the point between its checks and the use. */
void virtqueue_inflight_restore_hook(VirtQueue *vq, void *region)
{
    if (!fin.armed || region != fin.region) {
        return;
    }
    for (unsigned int i = 0; i < fin.nflips; i++) {
        uint8_t *p = (uint8_t *)region + fin.flips[i].off % fin.region_size;

        __atomic_store_n(p, fin.flips[i].val, __ATOMIC_RELAXED);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    VhostUserMemoryRegion r = {
        .guest_phys_addr = 0, .memory_size = FIN_MEM_SIZE,
        .userspace_addr = FIN_UVA,
    };
    GError *err = NULL;
    int fd = memfd_create("fuzz-inflight", MFD_CLOEXEC);

    g_assert(fd >= 0);
    g_assert(ftruncate(fd, FIN_MEM_SIZE) == 0);
    guest_mem_init(&fin.mem);
    if (!guest_mem_add_region(&fin.mem, &r, fd, &err)) {
        g_error("guest_mem_add_region: %s", err->message);
    }
    close(fd);
    fin.host = guest_mem_gpa_to_host(&fin.mem, 0, FIN_MEM_SIZE);
    g_assert(fin.host);
    fin.verbose = g_getenv("FUZZ_VERBOSE") != NULL;
    return 0;
}

static VirtQueue *fin_start(unsigned int num, bool packed, bool event_idx,
                            uint32_t base)
{
    VhostUserVringAddr addr = {
        .desc_user_addr = FIN_UVA,
        .avail_user_addr = FIN_UVA + 0x1000,
        .used_user_addr = FIN_UVA + (packed ? 0x1100 : 0x2000),
    };
    VirtQueue *vq = virtqueue_new(0);
    GError *err = NULL;

    fuzz_check(virtqueue_set_num(vq, num, &err), "set_num %u", num);
    fuzz_check(virtqueue_set_addr(vq, &addr, &err), "set_addr");
    virtqueue_set_packed(vq, packed);
    virtqueue_set_event_idx(vq, event_idx);
    virtqueue_set_base(vq, base);
    virtqueue_set_inflight(vq, fin.region);
    virtqueue_set_enabled(vq, true);
    if (!virtqueue_start(vq, &fin.mem, &err)) {
        if (fin.verbose) {
            fprintf(stderr, "refused: %s\n", err->message);
        }
        g_error_free(err);
        virtqueue_free(vq);
        return NULL;
    }
    return vq;
}

static bool fin_in_guest_memory(const struct iovec *iov)
{
    uintptr_t b = (uintptr_t)iov->iov_base, h = (uintptr_t)fin.host;

    return b >= h && b - h <= FIN_MEM_SIZE &&
           iov->iov_len <= FIN_MEM_SIZE - (b - h);
}

/* Pop everything (replayed buffers first), check, push it all back. */
static void fin_run(VirtQueue *vq, unsigned int num, bool packed)
{
    g_autofree VirtQueueElement **popped = g_new0(VirtQueueElement *, num);
    g_autofree uint8_t *seen = g_new0(uint8_t, num);
    uint32_t b = virtqueue_get_base(vq);
    unsigned int n = 0;

    if (packed) {
        fuzz_check((b & 0x7fff) < num && ((b >> 16) & 0x7fff) < num,
                   "base 0x%08x outside a ring of %u", b, num);
    }
    while (n < num) {
        VirtQueueElement *e = virtqueue_pop(vq);

        if (!e) {
            break;
        }
        fuzz_check(e->head < num, "head %u, queue size %u", e->head, num);
        fuzz_check(!seen[e->head], "head %u handed out twice", e->head);
        seen[e->head] = 1;
        for (unsigned int i = 0; i < e->out_num + e->in_num; i++) {
            fuzz_check(fin_in_guest_memory(&e->sg[i]),
                       "iovec %u of head %u outside guest memory", i,
                       e->head);
        }
        popped[n++] = e;
    }
    /* Nothing more than the ring holds can be in flight. */
    fuzz_check(n < num || !virtqueue_pop(vq), "more than %u popped", num);
    while (n > 0) {
        virtqueue_push(vq, popped[--n], 0);
    }
    virtqueue_notify(vq);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzInput in;
    uint8_t flags, qlog;
    uint32_t base;
    uint16_t used_idx;
    unsigned int num;
    bool packed, event_idx;
    VirtQueue *vq;

    fuzz_input_init(&in, data, size);
    flags = fuzz_u8(&in);
    qlog = fuzz_u8(&in);
    base = fuzz_u32(&in);
    used_idx = fuzz_u16(&in);
    fin.nflips = fuzz_u8(&in);
    fin.nflips = MIN(fin.nflips, FIN_MAX_FLIPS);
    for (unsigned int i = 0; i < fin.nflips; i++) {
        fin.flips[i].off = fuzz_u16(&in);
        fin.flips[i].val = fuzz_u8(&in);
    }
    num = 1u << (qlog % 7);
    packed = flags & 1;
    event_idx = flags & 2;
    fin.region_size = packed ? vhost_user_inflight_queue_size_packed(num)
                             : vhost_user_inflight_queue_size(num);
    fin.region = g_malloc(fin.region_size);
    fuzz_bytes(&in, fin.region, fin.region_size);
    memset(fin.host, 0, FIN_IMAGE_MAX);
    fuzz_bytes(&in, fin.host, MIN(fuzz_remaining(&in), FIN_IMAGE_MAX));
    if (!packed) {
        ((struct vring_used *)(fin.host + 0x2000))->idx = used_idx;
    }

    fin.armed = true;
    vq = fin_start(num, packed, event_idx, base);
    fin.armed = false;
    if (vq) {
        fin_run(vq, num, packed);
        base = virtqueue_get_base(vq);
        virtqueue_free(vq);
        /* The next instance takes what this one left, unless the
         * front-end scribbled on the region during the restore. */
        vq = fin_start(num, packed, event_idx, base);
        fuzz_check(vq || fin.nflips > 0,
                   "a region this back-end left was refused");
        if (vq) {
            fin_run(vq, num, packed);
            virtqueue_free(vq);
        }
    }
    g_free(fin.region);
    fin.region = NULL;
    return 0;
}
