/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for the packed virtqueue (VIRTIO 1.2 2.8): the test plays the
 * driver, writing descriptors and event suppression structures into memfd
 * "guest memory" by hand, and checks what the device pops, what it writes
 * back, when it interrupts, how bad input breaks the queue, and the
 * inflight region across a simulated crash.
 */
#include "qemu/osdep.h"
#include "hw/virtio/virtqueue.h"

#include <semaphore.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <linux/virtio_ring.h>

#define REGION_SIZE     0x100000ull
#define UVA_A           0x7f0000000000ull
#define GPA_RING        0x0000
#define GPA_DRIVER      0x4000      /* driver event suppression */
#define GPA_DEVICE      0x5000      /* device event suppression */
#define GPA_INDIRECT    0x8000
#define GPA_DATA        0x10000

#define F_AVAIL         (1 << VRING_PACKED_DESC_F_AVAIL)
#define F_USED          (1 << VRING_PACKED_DESC_F_USED)

typedef struct TestPQ {
    GuestMemory mem;
    int memfd;
    VirtQueue *vq;
    unsigned int num;
    bool event_idx;
    struct vring_packed_desc *ring;
    struct vring_packed_desc_event *driver;
    struct vring_packed_desc_event *device;
    /* driver side */
    uint16_t avail_idx;
    bool avail_wrap;
    uint16_t used_idx;
    bool used_wrap;
    int call_fd;
    VhostUserQueueRegionPacked *inflight;
} TestPQ;

static void *tpq_host(TestPQ *t, uint64_t gpa)
{
    void *p = guest_mem_gpa_to_host(&t->mem, gpa, 1);

    g_assert_nonnull(p);
    return p;
}

static VirtQueue *tpq_queue(TestPQ *t, uint32_t base, GError **errp)
{
    VhostUserVringAddr addr = {
        .desc_user_addr = UVA_A + GPA_RING,
        .avail_user_addr = UVA_A + GPA_DRIVER,
        .used_user_addr = UVA_A + GPA_DEVICE,
    };
    VirtQueue *vq = virtqueue_new(0);
    GError *err = NULL;

    g_assert_true(virtqueue_set_num(vq, t->num, &err));
    g_assert_true(virtqueue_set_addr(vq, &addr, &err));
    virtqueue_set_base(vq, base);
    virtqueue_set_kick_fd(vq, eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (t->call_fd >= 0) {
        close(t->call_fd);
    }
    t->call_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    virtqueue_set_call_fd(vq, dup(t->call_fd));
    virtqueue_set_event_idx(vq, t->event_idx);
    virtqueue_set_packed(vq, true);
    virtqueue_set_inflight(vq, t->inflight);
    virtqueue_set_enabled(vq, true);
    if (!virtqueue_start(vq, &t->mem, errp)) {
        virtqueue_free(vq);
        return NULL;
    }
    g_assert_true(virtqueue_is_packed(vq));
    return vq;
}

static void tpq_init_full(TestPQ *t, unsigned int num, bool event_idx,
                          bool inflight)
{
    VhostUserMemoryRegion r = {
        .guest_phys_addr = 0, .memory_size = REGION_SIZE,
        .userspace_addr = UVA_A,
    };
    GError *err = NULL;

    memset(t, 0, sizeof(*t));
    t->num = num;
    t->event_idx = event_idx;
    t->call_fd = -1;
    t->avail_wrap = t->used_wrap = true;
    guest_mem_init(&t->mem);
    t->memfd = memfd_create("test-virtqueue-packed", MFD_CLOEXEC);
    g_assert_cmpint(ftruncate(t->memfd, REGION_SIZE), ==, 0);
    g_assert_true(guest_mem_add_region(&t->mem, &r, t->memfd, &err));
    t->ring = tpq_host(t, GPA_RING);
    t->driver = tpq_host(t, GPA_DRIVER);
    t->device = tpq_host(t, GPA_DEVICE);
    if (inflight) {
        t->inflight = g_malloc0(vhost_user_inflight_queue_size_packed(num));
    }
    t->vq = tpq_queue(t, 0x80008000u, &err);
    g_assert_no_error(err);
}

static void tpq_init(TestPQ *t, unsigned int num, bool event_idx)
{
    tpq_init_full(t, num, event_idx, false);
}

static void tpq_cleanup(TestPQ *t)
{
    virtqueue_free(t->vq);
    guest_mem_clear(&t->mem);
    close(t->memfd);
    close(t->call_fd);
    g_free(t->inflight);
}

/* The flags that make a descriptor available in the driver's lap @wrap. */
static uint16_t tpq_avail_flags(bool wrap)
{
    return wrap ? F_AVAIL : F_USED;
}

/*
 * Make a buffer of @n descriptors available at the driver's position:
 * descriptor k gets gpa[k] / len[k] / wflags[k] (WRITE, INDIRECT), NEXT
 * on all but the last, id @id on each; the head's flags last.
 */
static void tpq_add(TestPQ *t, uint16_t id, unsigned int n,
                    const uint64_t *gpa, const uint32_t *len,
                    const uint16_t *wflags)
{
    uint16_t head = t->avail_idx, head_flags = 0;

    for (unsigned int k = 0; k < n; k++) {
        struct vring_packed_desc *d = &t->ring[t->avail_idx];
        uint16_t flags = wflags[k] | tpq_avail_flags(t->avail_wrap) |
                         (k + 1 < n ? VRING_DESC_F_NEXT : 0);

        d->addr = gpa[k];
        d->len = len[k];
        d->id = id;
        if (k == 0) {
            head_flags = flags;
        } else {
            d->flags = flags;
        }
        if (++t->avail_idx == t->num) {
            t->avail_idx = 0;
            t->avail_wrap = !t->avail_wrap;
        }
    }
    __atomic_store_n(&t->ring[head].flags, head_flags, __ATOMIC_RELEASE);
}

/* A virtio-blk-like buffer: header (out), 4 KiB data (in), status (in). */
static void tpq_add_req(TestPQ *t, uint16_t id, unsigned int slot)
{
    uint64_t gpa[3] = { GPA_DATA + slot * 0x2000,
                        GPA_DATA + slot * 0x2000 + 0x1000,
                        GPA_DATA + slot * 0x2000 + 0x100 };
    uint32_t len[3] = { 16, 4096, 1 };
    uint16_t fl[3] = { 0, VRING_DESC_F_WRITE, VRING_DESC_F_WRITE };

    tpq_add(t, id, 3, gpa, len, fl);
}

/* Driver: take the next used descriptor (id, len) if there is one; the
 * buffer took @ndesc slots. */
static bool tpq_get_used(TestPQ *t, unsigned int ndesc, uint16_t *id,
                         uint32_t *len)
{
    struct vring_packed_desc *d = &t->ring[t->used_idx];
    uint16_t flags = __atomic_load_n(&d->flags, __ATOMIC_ACQUIRE);

    if (!!(flags & F_AVAIL) != t->used_wrap ||
        !!(flags & F_USED) != t->used_wrap) {
        return false;
    }
    *id = d->id;
    *len = d->len;
    t->used_idx += ndesc;
    if (t->used_idx >= t->num) {
        t->used_idx -= t->num;
        t->used_wrap = !t->used_wrap;
    }
    return true;
}

static uint64_t tpq_calls(TestPQ *t)
{
    uint64_t v = 0;

    if (read(t->call_fd, &v, sizeof(v)) != sizeof(v)) {
        return 0;
    }
    return v;
}

static void tpq_set_driver_event(TestPQ *t, uint16_t flags, uint16_t off,
                                 bool wrap)
{
    t->driver->off_wrap = off | (wrap ? 0x8000 : 0);
    t->driver->flags = flags;
}

static void test_simple(void)
{
    TestPQ t;
    VirtQueueElement *e;
    uint16_t id;
    uint32_t len;

    tpq_init(&t, 16, false);
    g_assert_false(virtqueue_has_avail(t.vq));
    g_assert_null(virtqueue_pop(t.vq));

    tpq_add_req(&t, 5, 0);
    g_assert_true(virtqueue_has_avail(t.vq));
    e = virtqueue_pop(t.vq);
    g_assert_nonnull(e);
    g_assert_cmpuint(e->head, ==, 5);
    g_assert_cmpuint(e->out_num, ==, 1);
    g_assert_cmpuint(e->in_num, ==, 2);
    g_assert_true(e->out_sg[0].iov_base == tpq_host(&t, GPA_DATA));
    g_assert_cmpuint(e->out_sg[0].iov_len, ==, 16);
    g_assert_true(e->in_sg[0].iov_base == tpq_host(&t, GPA_DATA + 0x1000));
    g_assert_cmpuint(e->in_sg[1].iov_len, ==, 1);
    g_assert_false(virtqueue_has_avail(t.vq));
    g_assert_null(virtqueue_pop(t.vq));
    /* next slot 3 and the used one still 0, both in lap 1 */
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80008003u);

    virtqueue_push(t.vq, e, 4097);
    g_assert_true(tpq_get_used(&t, 3, &id, &len));
    g_assert_cmpuint(id, ==, 5);
    g_assert_cmpuint(len, ==, 4097);
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80038003u);
    g_assert_cmpuint(virtqueue_inflight_count(t.vq), ==, 0);
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tpq_calls(&t), ==, 1);    /* driver event: ENABLE */
    tpq_cleanup(&t);
}

/* Completions in any order, many laps around a small ring. */
static void test_out_of_order_wrap(void)
{
    TestPQ t;
    VirtQueueElement *e[2];

    tpq_init(&t, 8, false);
    for (unsigned int round = 0; round < 20; round++) {
        uint16_t id;
        uint32_t len;

        /* two buffers of 3 descriptors: 6 of 8 slots, crossing the end */
        tpq_add_req(&t, 1, 0);
        tpq_add_req(&t, 6, 1);
        e[0] = virtqueue_pop(t.vq);
        e[1] = virtqueue_pop(t.vq);
        g_assert_nonnull(e[0]);
        g_assert_nonnull(e[1]);
        g_assert_cmpuint(e[0]->head, ==, 1);
        g_assert_cmpuint(e[1]->head, ==, 6);
        g_assert_null(virtqueue_pop(t.vq));
        /* the second one completes first */
        virtqueue_push(t.vq, e[1], 20 + round);
        virtqueue_push(t.vq, e[0], 10 + round);
        g_assert_true(tpq_get_used(&t, 3, &id, &len));
        g_assert_cmpuint(id, ==, 6);
        g_assert_cmpuint(len, ==, 20 + round);
        g_assert_true(tpq_get_used(&t, 3, &id, &len));
        g_assert_cmpuint(id, ==, 1);
        g_assert_cmpuint(len, ==, 10 + round);
        g_assert_false(tpq_get_used(&t, 3, &id, &len));
    }
    g_assert_false(virtqueue_is_broken(t.vq));
    tpq_cleanup(&t);
}

static void test_indirect(void)
{
    TestPQ t;
    struct vring_packed_desc *table;
    VirtQueueElement *e;
    uint64_t gpa = GPA_INDIRECT;
    uint32_t len = 3 * sizeof(*table);
    uint16_t fl = VRING_DESC_F_INDIRECT, id;
    uint32_t ulen;

    tpq_init(&t, 16, false);
    table = tpq_host(&t, GPA_INDIRECT);
    table[0] = (struct vring_packed_desc) { GPA_DATA, 16, 0, 0 };
    table[1] = (struct vring_packed_desc) { GPA_DATA + 0x1000, 8192, 0,
                                            VRING_DESC_F_WRITE };
    table[2] = (struct vring_packed_desc) { GPA_DATA + 0x100, 1, 0,
                                            VRING_DESC_F_WRITE };
    tpq_add(&t, 9, 1, &gpa, &len, &fl);
    e = virtqueue_pop(t.vq);
    g_assert_nonnull(e);
    g_assert_cmpuint(e->head, ==, 9);
    g_assert_cmpuint(e->out_num, ==, 1);
    g_assert_cmpuint(e->in_num, ==, 2);
    g_assert_cmpuint(e->in_sg[0].iov_len, ==, 8192);
    virtqueue_push(t.vq, e, 8193);
    /* an indirect buffer takes one slot */
    g_assert_true(tpq_get_used(&t, 1, &id, &ulen));
    g_assert_cmpuint(id, ==, 9);
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80018001u);
    tpq_cleanup(&t);
}

/* A chain longer than the element's inline iovecs moves to a long slot;
 * out-of-order ids keep their own slots. */
static void test_long_chain(void)
{
    TestPQ t;
    uint64_t gpa[20];
    uint32_t len[20];
    uint16_t fl[20];
    VirtQueueElement *a, *b;

    tpq_init(&t, 64, false);
    for (unsigned int k = 0; k < 20; k++) {
        gpa[k] = GPA_DATA + k * 0x1000;
        len[k] = 512;
        fl[k] = k ? VRING_DESC_F_WRITE : 0;
    }
    tpq_add(&t, 3, 20, gpa, len, fl);
    for (unsigned int k = 0; k < 20; k++) {
        gpa[k] += 0x100;
    }
    tpq_add(&t, 4, 20, gpa, len, fl);
    a = virtqueue_pop(t.vq);
    b = virtqueue_pop(t.vq);
    g_assert_nonnull(a);
    g_assert_nonnull(b);
    g_assert_cmpuint(a->out_num + a->in_num, ==, 20);
    g_assert_cmpuint(b->out_num + b->in_num, ==, 20);
    g_assert_true(a->sg != b->sg);
    for (unsigned int k = 0; k < 20; k++) {
        g_assert_true(a->sg[k].iov_base ==
                      tpq_host(&t, GPA_DATA + k * 0x1000));
        g_assert_true(b->sg[k].iov_base ==
                      tpq_host(&t, GPA_DATA + k * 0x1000 + 0x100));
    }
    virtqueue_push(t.vq, b, 0);
    virtqueue_push(t.vq, a, 0);
    tpq_cleanup(&t);
}

/* Only the last descriptor's buffer id counts (VIRTIO 1.2 2.8.6): a driver
 * that leaves other ids stale or pointing at another buffer still gets its
 * buffer back under the last one, short chains and long ones alike. */
static void test_id_in_last(void)
{
    TestPQ t;
    uint64_t gpa[12];
    uint32_t len[12];
    uint16_t fl[12];
    VirtQueueElement *a, *b;
    uint16_t id;
    uint32_t ulen;

    tpq_init(&t, 32, false);
    for (unsigned int k = 0; k < 12; k++) {
        gpa[k] = GPA_DATA + k * 0x1000;
        len[k] = 512;
        fl[k] = k ? VRING_DESC_F_WRITE : 0;
    }
    tpq_add(&t, 7, 3, gpa, len, fl);      /* 3 descriptors */
    t.ring[0].id = 9;                   /* head names another buffer */
    t.ring[1].id = 9;
    tpq_add(&t, 4, 12, gpa, len, fl);     /* long: spills to a long slot */
    t.ring[3].id = 7;                   /* head names buffer 7 (in flight) */
    a = virtqueue_pop(t.vq);
    b = virtqueue_pop(t.vq);
    g_assert_nonnull(a);
    g_assert_nonnull(b);
    g_assert_cmpuint(a->head, ==, 7);
    g_assert_cmpuint(a->in_num, ==, 2);
    g_assert_true(a->in_sg[0].iov_base == tpq_host(&t, GPA_DATA + 0x1000));
    g_assert_cmpuint(b->head, ==, 4);
    g_assert_cmpuint(b->out_num + b->in_num, ==, 12);
    for (unsigned int k = 0; k < 12; k++) {
        g_assert_true(b->sg[k].iov_base ==
                      tpq_host(&t, GPA_DATA + k * 0x1000));
    }
    virtqueue_push(t.vq, b, 1);
    virtqueue_push(t.vq, a, 2);
    g_assert_true(tpq_get_used(&t, 12, &id, &ulen));
    g_assert_cmpuint(id, ==, 4);
    g_assert_true(tpq_get_used(&t, 3, &id, &ulen));
    g_assert_cmpuint(id, ==, 7);
    /* buffer 9, whose element held a chain for a moment, is fine too */
    tpq_add(&t, 9, 12, gpa, len, fl);
    a = virtqueue_pop(t.vq);
    g_assert_nonnull(a);
    g_assert_cmpuint(a->head, ==, 9);
    g_assert_true(a->sg[11].iov_base == tpq_host(&t, GPA_DATA + 11 * 0x1000));
    virtqueue_push(t.vq, a, 0);
    g_assert_false(virtqueue_is_broken(t.vq));
    tpq_cleanup(&t);
}

static void test_unpop(void)
{
    TestPQ t;
    VirtQueueElement *a, *b;

    tpq_init_full(&t, 8, false, true);
    tpq_add_req(&t, 0, 0);
    tpq_add_req(&t, 1, 1);
    a = virtqueue_pop(t.vq);
    b = virtqueue_pop(t.vq);
    g_assert_true(a && b);
    virtqueue_unpop(t.vq, b);
    virtqueue_unpop(t.vq, a);
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80008000u);
    a = virtqueue_pop(t.vq);
    b = virtqueue_pop(t.vq);
    g_assert_true(a && b);
    g_assert_cmpuint(a->head, ==, 0);
    g_assert_cmpuint(b->head, ==, 1);
    virtqueue_push(t.vq, a, 0);
    virtqueue_push(t.vq, b, 0);
    g_assert_false(virtqueue_is_broken(t.vq));
    tpq_cleanup(&t);
}

/* Driver event suppression: DISABLE, ENABLE, DESC at a slot and lap. */
static void test_notify_driver_event(void)
{
    TestPQ t;
    VirtQueueElement *e;

    tpq_init(&t, 8, true);
    tpq_set_driver_event(&t, VRING_PACKED_EVENT_FLAG_DISABLE, 0, false);
    tpq_add_req(&t, 0, 0);
    e = virtqueue_pop(t.vq);
    virtqueue_push(t.vq, e, 0);
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tpq_calls(&t), ==, 0);

    /* DESC: interrupt when the used position passes slot 6 of lap 1 */
    tpq_set_driver_event(&t, VRING_PACKED_EVENT_FLAG_DESC, 6, true);
    tpq_add_req(&t, 1, 1);          /* slots 3-5 */
    e = virtqueue_pop(t.vq);
    virtqueue_push(t.vq, e, 0);     /* used 3 -> 6: slot 6 not yet used */
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tpq_calls(&t), ==, 0);
    tpq_add_req(&t, 2, 2);          /* slots 6, 7, 0 (wraps) */
    e = virtqueue_pop(t.vq);
    virtqueue_push(t.vq, e, 0);     /* used 6 -> 1 of lap 0 */
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tpq_calls(&t), ==, 1);

    /* DESC for a slot of the next lap the ring has not reached */
    tpq_set_driver_event(&t, VRING_PACKED_EVENT_FLAG_DESC, 7, false);
    tpq_add_req(&t, 3, 0);          /* slots 1-3 */
    e = virtqueue_pop(t.vq);
    virtqueue_push(t.vq, e, 0);
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tpq_calls(&t), ==, 0);

    tpq_set_driver_event(&t, VRING_PACKED_EVENT_FLAG_ENABLE, 0, false);
    tpq_add_req(&t, 4, 1);
    e = virtqueue_pop(t.vq);
    virtqueue_push(t.vq, e, 0);
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tpq_calls(&t), ==, 1);
    tpq_cleanup(&t);
}

/* Device event suppression: what the device asks of the driver. */
static void test_notify_device_event(void)
{
    TestPQ t;
    VirtQueueElement *e;

    tpq_init(&t, 8, true);
    /* event-idx: "kick me at the next slot", lap 1 */
    g_assert_cmpuint(t.device->flags, ==, VRING_PACKED_EVENT_FLAG_DESC);
    g_assert_cmphex(t.device->off_wrap, ==, 0x8000);
    tpq_add_req(&t, 0, 0);
    e = virtqueue_pop(t.vq);
    g_assert_cmphex(t.device->off_wrap, ==, 0x8003);
    virtqueue_set_notification(t.vq, false);
    g_assert_cmpuint(t.device->flags, ==, VRING_PACKED_EVENT_FLAG_DISABLE);
    virtqueue_set_notification(t.vq, true);
    g_assert_cmpuint(t.device->flags, ==, VRING_PACKED_EVENT_FLAG_DESC);
    virtqueue_push(t.vq, e, 0);
    tpq_cleanup(&t);

    tpq_init(&t, 8, false);
    g_assert_cmpuint(t.device->flags, ==, VRING_PACKED_EVENT_FLAG_ENABLE);
    virtqueue_set_notification(t.vq, false);
    g_assert_cmpuint(t.device->flags, ==, VRING_PACKED_EVENT_FLAG_DISABLE);
    virtqueue_set_notification(t.vq, true);
    g_assert_cmpuint(t.device->flags, ==, VRING_PACKED_EVENT_FLAG_ENABLE);
    tpq_cleanup(&t);
}

static void test_base(void)
{
    TestPQ t;
    VirtQueue *vq;
    GError *err = NULL;

    tpq_init(&t, 16, false);
    /* resume at slot 5 of lap 0, used at slot 5 of lap 0 */
    vq = tpq_queue(&t, 0x00050005u, &err);
    g_assert_no_error(err);
    g_assert_cmphex(virtqueue_get_base(vq), ==, 0x00050005u);
    virtqueue_free(vq);
    /* slots beyond the ring are refused with a message */
    vq = tpq_queue(&t, 0x80008010u, &err);
    g_assert_null(vq);
    g_assert_nonnull(err);
    g_test_message("%s", err->message);
    g_clear_error(&err);
    tpq_cleanup(&t);
}

/* ---- hostile input: each breaks the queue, nothing else ------------- */

typedef void (*BadSetup)(TestPQ *t);

static void bad_wrong_wrap(TestPQ *t)
{
    /* a head marked for the other lap is simply not available; a chain
     * whose second descriptor is is broken */
    tpq_add_req(t, 0, 0);
    t->ring[1].flags ^= F_AVAIL | F_USED;
}

static void bad_id_range(TestPQ *t)
{
    tpq_add_req(t, 16, 0);
}

static void bad_id_reused(TestPQ *t)
{
    VirtQueueElement *e;

    tpq_add_req(t, 2, 0);
    e = virtqueue_pop(t->vq);
    g_assert_nonnull(e);
    tpq_add_req(t, 2, 1);
}

static void bad_loop(TestPQ *t)
{
    /* every slot available and chained: the chain runs around the ring
     * into a slot the driver did not make available for the next lap */
    for (unsigned int i = 0; i < t->num; i++) {
        t->ring[i].addr = GPA_DATA;
        t->ring[i].len = 16;
        t->ring[i].id = 0;
        t->ring[i].flags = VRING_DESC_F_NEXT | F_AVAIL;
    }
}

static void bad_lapping(TestPQ *t)
{
    /* the driver makes 5 buffers of 3 available in a ring of 16 without
     * the device returning any: the sixth slot set overlaps */
    for (unsigned int i = 0; i < 5; i++) {
        tpq_add_req(t, i, i);
        g_assert_nonnull(virtqueue_pop(t->vq));
    }
    /* slot 15 in lap 1, then slots 0.. again marked for lap 0 */
    tpq_add_req(t, 5, 5);
}

static void bad_outside(TestPQ *t)
{
    uint64_t gpa[3] = { REGION_SIZE - 8, GPA_DATA, GPA_DATA + 0x100 };
    uint32_t len[3] = { 16, 512, 1 };
    uint16_t fl[3] = { 0, VRING_DESC_F_WRITE, VRING_DESC_F_WRITE };

    tpq_add(t, 0, 3, gpa, len, fl);
}

static void bad_nested_indirect(TestPQ *t)
{
    struct vring_packed_desc *table = tpq_host(t, GPA_INDIRECT);
    uint64_t gpa = GPA_INDIRECT;
    uint32_t len = 2 * sizeof(*table);
    uint16_t fl = VRING_DESC_F_INDIRECT;

    table[0] = (struct vring_packed_desc) { GPA_DATA, 16, 0, 0 };
    table[1] = (struct vring_packed_desc) { GPA_INDIRECT, 32, 0,
                                            VRING_DESC_F_INDIRECT };
    tpq_add(t, 0, 1, &gpa, &len, &fl);
}

static void bad_indirect_not_alone(TestPQ *t)
{
    struct vring_packed_desc *table = tpq_host(t, GPA_INDIRECT);
    uint64_t gpa[2] = { GPA_DATA, GPA_INDIRECT };
    uint32_t len[2] = { 16, sizeof(*table) };
    uint16_t fl[2] = { 0, VRING_DESC_F_INDIRECT };

    table[0] = (struct vring_packed_desc) { GPA_DATA + 0x100, 1, 0,
                                            VRING_DESC_F_WRITE };
    tpq_add(t, 0, 2, gpa, len, fl);
}

static void bad_indirect_size(TestPQ *t)
{
    uint64_t gpa = GPA_INDIRECT;
    uint32_t len = 24;          /* not a multiple of 16 */
    uint16_t fl = VRING_DESC_F_INDIRECT;

    tpq_add(t, 0, 1, &gpa, &len, &fl);
}

static void bad_write_then_read(TestPQ *t)
{
    uint64_t gpa[2] = { GPA_DATA, GPA_DATA + 0x100 };
    uint32_t len[2] = { 16, 16 };
    uint16_t fl[2] = { VRING_DESC_F_WRITE, 0 };

    tpq_add(t, 0, 2, gpa, len, fl);
}

static const struct {
    const char *name;
    BadSetup setup;
} bad_cases[] = {
    { "wrong-wrap-in-chain", bad_wrong_wrap },
    { "id-out-of-range", bad_id_range },
    { "id-reused-in-flight", bad_id_reused },
    { "chain-around-the-ring", bad_loop },
    { "driver-laps-device", bad_lapping },
    { "outside-memory", bad_outside },
    { "nested-indirect", bad_nested_indirect },
    { "indirect-not-alone", bad_indirect_not_alone },
    { "indirect-bad-size", bad_indirect_size },
    { "readable-after-writable", bad_write_then_read },
};

static void test_broken(gconstpointer data)
{
    BadSetup setup = (BadSetup)data;
    TestPQ t;

    tpq_init(&t, 16, true);
    setup(&t);
    g_assert_false(virtqueue_is_broken(t.vq));
    g_assert_null(virtqueue_pop(t.vq));
    g_assert_true(virtqueue_is_broken(t.vq));
    g_assert_false(virtqueue_has_avail(t.vq));
    g_assert_null(virtqueue_pop(t.vq));
    tpq_cleanup(&t);
}

/* ---- inflight region ------------------------------------------------ */

/* A new instance (the old one "crashed") replays what was in flight, in
 * fetch order, though the front-end sends the stale base of the start. */
static void test_inflight_resubmit(void)
{
    TestPQ t;
    VirtQueueElement *e[4];
    GError *err = NULL;
    uint16_t id;
    uint32_t len;

    tpq_init_full(&t, 16, false, true);
    g_assert_cmpuint(t.inflight->version, ==, 1);
    tpq_add_req(&t, 7, 0);
    tpq_add_req(&t, 2, 1);
    tpq_add_req(&t, 9, 2);
    tpq_add_req(&t, 4, 3);
    for (int i = 0; i < 4; i++) {
        e[i] = virtqueue_pop(t.vq);
        g_assert_nonnull(e[i]);
    }
    virtqueue_push(t.vq, e[1], 1);  /* id 2 done, at slot 0 */
    g_assert_true(tpq_get_used(&t, 3, &id, &len));
    g_assert_cmpuint(id, ==, 2);

    /* crash: drop the instance without completing 7, 9, 4 */
    virtqueue_free(t.vq);
    t.vq = tpq_queue(&t, 0x80008000u, &err);
    g_assert_no_error(err);
    /* 3 buffers of 3 slots in flight from used slot 3: next avail is 12 */
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x8003800cu);
    for (int i = 0; i < 3; i++) {
        static const uint16_t want[] = { 7, 9, 4 };

        e[i] = virtqueue_pop(t.vq);
        g_assert_nonnull(e[i]);
        g_assert_cmpuint(e[i]->head, ==, want[i]);
        g_assert_cmpuint(e[i]->in_num, ==, 2);
        /* the descriptors came from the region: same buffers */
        g_assert_true(e[i]->in_sg[0].iov_base ==
                      tpq_host(&t, GPA_DATA + (want[i] == 7 ? 0 :
                                               want[i] == 9 ? 2 : 3) *
                                              0x2000 + 0x1000));
    }
    g_assert_null(virtqueue_pop(t.vq));
    /* and new work after them */
    tpq_add_req(&t, 2, 4);
    e[3] = virtqueue_pop(t.vq);
    g_assert_nonnull(e[3]);
    g_assert_cmpuint(e[3]->head, ==, 2);
    for (int i = 3; i >= 0; i--) {
        virtqueue_push(t.vq, e[i], 0);
    }
    for (int i = 0; i < 4; i++) {
        g_assert_true(tpq_get_used(&t, 3, &id, &len));
    }
    g_assert_false(virtqueue_is_broken(t.vq));
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x800f800fu);

    /* another restart with nothing in flight replays nothing */
    virtqueue_free(t.vq);
    t.vq = tpq_queue(&t, 0x80008000u, &err);
    g_assert_no_error(err);
    g_assert_null(virtqueue_pop(t.vq));
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x800f800fu);
    tpq_cleanup(&t);
}

/* Killed inside a push: the used descriptor reached the ring (commit) or
 * not (roll back). */
static void test_inflight_torn_push(void)
{
    for (int reached = 0; reached < 2; reached++) {
        TestPQ t;
        VirtQueueElement *e;
        GError *err = NULL;
        VhostUserQueueRegionPacked saved;

        tpq_init_full(&t, 16, false, true);
        tpq_add_req(&t, 3, 0);
        e = virtqueue_pop(t.vq);
        g_assert_nonnull(e);
        saved = *t.inflight;
        virtqueue_push(t.vq, e, 0);
        /* what a kill after moving used_idx, before the commit, leaves */
        t.inflight->old_free_head = saved.old_free_head;
        t.inflight->old_used_idx = saved.old_used_idx;
        t.inflight->old_used_wrap_counter = saved.old_used_wrap_counter;
        t.inflight->desc[t.inflight->free_head].inflight = 1;
        if (!reached) {
            /* the ring still shows the driver's descriptor */
            t.ring[0].flags = F_AVAIL;
        }
        virtqueue_free(t.vq);
        t.vq = tpq_queue(&t, 0x80008000u, &err);
        g_assert_no_error(err);
        if (reached) {
            g_assert_null(virtqueue_pop(t.vq));
            g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80038003u);
        } else {
            e = virtqueue_pop(t.vq);
            g_assert_nonnull(e);
            g_assert_cmpuint(e->head, ==, 3);
            g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80008003u);
            virtqueue_push(t.vq, e, 0);
        }
        tpq_cleanup(&t);
    }
}

/* A region the front-end scribbled on is refused at start, with a
 * message; nothing is read out of bounds. */
static void test_inflight_corrupt(void)
{
    static const int cases = 5;

    for (int c = 0; c < cases; c++) {
        TestPQ t;
        VirtQueueElement *e;
        GError *err = NULL;
        VirtQueue *vq;

        tpq_init_full(&t, 16, false, true);
        tpq_add_req(&t, 3, 0);
        e = virtqueue_pop(t.vq);
        g_assert_nonnull(e);
        switch (c) {
        case 0:     /* free list loops */
            t.inflight->desc[t.inflight->free_head].next =
                t.inflight->free_head;
            break;
        case 1:     /* a head claims more descriptors than exist */
            t.inflight->desc[0].num = 40;
            break;
        case 2:     /* buffer id out of range */
            t.inflight->desc[t.inflight->desc[0].last].id = 99;
            break;
        case 3:     /* positions out of range */
            t.inflight->old_used_idx = 16;
            break;
        case 4:     /* wrong size */
            t.inflight->desc_num = 8;
            break;
        }
        vq = tpq_queue(&t, 0x80008000u, &err);
        g_assert_null(vq);
        g_assert_nonnull(err);
        g_test_message("case %d: %s", c, err->message);
        g_clear_error(&err);
        tpq_cleanup(&t);
    }
}

/* ---- inflight region: read once, exact accounting --------------------- */

/*
 * A "front-end" thread that rewrites the region while the daemon restores
 * it.  The restore calls virtqueue_inflight_restore_hook() between its
 * checks and its use of what it read; the hook wakes the thread and waits
 * until it has written, so the race is hit on every run.
 */
typedef struct Flipper {
    sem_t go, done;
    bool armed;
    bool called;
    void *region;
    void (*flip)(void *region);
} Flipper;

static Flipper flipper;

void virtqueue_inflight_restore_hook(VirtQueue *vq, void *region)
{
    if (!flipper.armed || region != flipper.region) {
        return;
    }
    flipper.called = true;
    sem_post(&flipper.go);
    while (sem_wait(&flipper.done) < 0 && errno == EINTR) {
        continue;
    }
}

static gpointer flipper_thread(gpointer opaque)
{
    while (sem_wait(&flipper.go) < 0 && errno == EINTR) {
        continue;
    }
    flipper.flip(flipper.region);
    sem_post(&flipper.done);
    return NULL;
}

/* Restart @t's queue with the thread running @flip during the restore. */
static VirtQueue *restart_flipped(TestPQ *t, void *region,
                                  void (*flip)(void *region), GError **errp)
{
    GThread *th;
    VirtQueue *vq;

    g_assert_cmpint(sem_init(&flipper.go, 0, 0), ==, 0);
    g_assert_cmpint(sem_init(&flipper.done, 0, 0), ==, 0);
    flipper.region = region;
    flipper.flip = flip;
    flipper.called = false;
    flipper.armed = true;
    th = g_thread_new("front-end", flipper_thread, NULL);
    vq = tpq_queue(t, 0x80008000u, errp);
    g_assert_true(flipper.called);
    flipper.armed = false;
    g_thread_join(th);
    sem_destroy(&flipper.go);
    sem_destroy(&flipper.done);
    return vq;
}

static void flip_packed_positions(void *region)
{
    VhostUserQueueRegionPacked *r = region;

    __atomic_store_n(&r->free_head, 0xffff, __ATOMIC_RELAXED);
    __atomic_store_n(&r->old_free_head, 0xffff, __ATOMIC_RELAXED);
    __atomic_store_n(&r->used_idx, 0xffff, __ATOMIC_RELAXED);
    __atomic_store_n(&r->old_used_idx, 0xffff, __ATOMIC_RELAXED);
    __atomic_store_n(&r->used_wrap_counter, 0xff, __ATOMIC_RELAXED);
    __atomic_store_n(&r->old_used_wrap_counter, 0xff, __ATOMIC_RELAXED);
}

/*
 * The front-end flips free_head, used_idx and used_wrap_counter (and their
 * old_ copies) to 0xffff after the restore checked them: the restore must
 * go on with what it checked.  A second read there made the next pop
 * write region entry 0xffff (2 MiB past the region) and the push write the
 * used descriptor 0xffff slots past the ring.
 */
static void test_inflight_flip_during_restore(void)
{
    TestPQ t;
    VirtQueueElement *e[3];
    GError *err = NULL;
    uint16_t id;
    uint32_t len;

    tpq_init_full(&t, 16, false, true);
    tpq_add_req(&t, 5, 0);
    tpq_add_req(&t, 6, 1);
    e[0] = virtqueue_pop(t.vq);
    e[1] = virtqueue_pop(t.vq);
    g_assert_nonnull(e[0]);
    g_assert_nonnull(e[1]);
    virtqueue_push(t.vq, e[0], 0);          /* slots 0-2 used */
    g_assert_true(tpq_get_used(&t, 3, &id, &len));

    /* crash with id 6 in flight; restart while the front-end scribbles */
    virtqueue_free(t.vq);
    t.vq = restart_flipped(&t, t.inflight, flip_packed_positions, &err);
    g_assert_no_error(err);
    g_assert_nonnull(t.vq);
    /* what the region said when it was checked: used slot 3, next 6 */
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80038006u);

    /* the replayed buffer, then a new one: their entries are in range */
    e[0] = virtqueue_pop(t.vq);
    g_assert_nonnull(e[0]);
    g_assert_cmpuint(e[0]->head, ==, 6);
    tpq_add_req(&t, 7, 2);
    e[1] = virtqueue_pop(t.vq);
    g_assert_nonnull(e[1]);
    g_assert_cmpuint(e[1]->head, ==, 7);
    virtqueue_push(t.vq, e[0], 0);
    virtqueue_push(t.vq, e[1], 0);
    g_assert_true(tpq_get_used(&t, 3, &id, &len));
    g_assert_cmpuint(id, ==, 6);
    g_assert_true(tpq_get_used(&t, 3, &id, &len));
    g_assert_cmpuint(id, ==, 7);
    g_assert_false(virtqueue_is_broken(t.vq));
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80098009u);
    /* what we wrote back is ours, not the scribble */
    g_assert_cmpuint(t.inflight->used_idx, ==, 9);
    g_assert_cmpuint(t.inflight->free_head, <, 16);
    tpq_cleanup(&t);
}

/*
 * The free list and the buffers in flight must account for every entry
 * exactly once.  A list that is too short (free_head = num with nothing in
 * flight, an early end, an entry nobody owns) made the next pop write
 * entry num -- past the queue's part of the region, at queue size 1 into
 * the next queue's header or the device-state area -- and read one past
 * our copy of the links.
 */
static void test_inflight_free_list_short(void)
{
    static const char *const what[] = {
        "free_head = num, nothing in flight",
        "free list ends early",
        "a head entry neither free nor in flight",
        "free list runs into a buffer in flight",
        "queue size 1, free_head = 1, nothing in flight",
    };

    for (unsigned int c = 0; c < G_N_ELEMENTS(what); c++) {
        unsigned int num = c >= 4 ? 1 : 16;
        VhostUserQueueRegionPacked *r;
        TestPQ t;
        GError *err = NULL;
        VirtQueue *vq;

        tpq_init_full(&t, num, false, true);
        r = t.inflight;
        if (c == 2 || c == 3) {
            /* one buffer of one descriptor in flight */
            uint64_t gpa = GPA_DATA;
            uint32_t l = 512;
            uint16_t fl = VRING_DESC_F_WRITE;

            tpq_add(&t, 0, 1, &gpa, &l, &fl);
            g_assert_nonnull(virtqueue_pop(t.vq));
        }
        virtqueue_free(t.vq);
        t.vq = NULL;
        switch (c) {
        case 0:
        case 4:
            r->free_head = r->old_free_head = num;
            break;
        case 1:
            r->desc[r->free_head].next = num;   /* 1 entry instead of 16 */
            break;
        case 2:
            /* the buffer's head says "not in flight" but is not freed */
            r->desc[0].inflight = 0;
            break;
        case 3:
            /* the last free entry links to the buffer's head entry 0 */
            for (uint16_t e = r->free_head; ; e = r->desc[e].next) {
                if (r->desc[e].next == num) {
                    r->desc[e].next = 0;
                    break;
                }
            }
            break;
        }
        vq = tpq_queue(&t, 0x80008000u, &err);
        g_test_message("case %u (%s): %s", c, what[c],
                       err ? err->message : "accepted");
        g_assert_null(vq);
        g_assert_nonnull(err);
        g_clear_error(&err);
        tpq_cleanup(&t);
    }
}

/*
 * Killed inside an unpop, at each step: the region still accounts for
 * every entry, so the next instance takes it (and pops the buffer again
 * from the ring, or replays it from the region).
 */
static void test_inflight_unpop_killed(void)
{
    for (int step = 0; step < 2; step++) {
        VhostUserQueueRegionPacked saved;
        VirtQueueElement *e;
        GError *err = NULL;
        TestPQ t;

        tpq_init_full(&t, 16, false, true);
        tpq_add_req(&t, 4, 0);
        e = virtqueue_pop(t.vq);
        g_assert_nonnull(e);
        saved = *t.inflight;
        virtqueue_unpop(t.vq, e);
        if (step == 0) {
            /* entries back on the list, old_free_head not yet moved */
            t.inflight->old_free_head = saved.old_free_head;
            t.inflight->desc[0].inflight = 1;
        } else {
            /* everything but the flag of the head entry */
            t.inflight->desc[0].inflight = 1;
        }
        virtqueue_free(t.vq);
        t.vq = tpq_queue(&t, 0x80008000u, &err);
        g_assert_no_error(err);
        e = virtqueue_pop(t.vq);
        g_assert_nonnull(e);
        g_assert_cmpuint(e->head, ==, 4);
        virtqueue_push(t.vq, e, 0);
        g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80038003u);
        g_assert_false(virtqueue_is_broken(t.vq));
        tpq_cleanup(&t);
    }
}

/*
 * SET_VRING_BASE on a stopped packed queue, then GET_VRING_BASE without a
 * start in between: the base the front-end set, not its low half mixed
 * with the old used position.
 */
static void test_base_set_then_get(void)
{
    TestPQ t;
    VirtQueueElement *e;
    uint16_t id;
    uint32_t len;

    tpq_init(&t, 16, false);
    tpq_add_req(&t, 1, 0);
    e = virtqueue_pop(t.vq);
    g_assert_nonnull(e);
    virtqueue_push(t.vq, e, 0);
    g_assert_true(tpq_get_used(&t, 3, &id, &len));
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80038003u);
    virtqueue_stop(t.vq);
    virtqueue_set_base(t.vq, 0x000a800bu);
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x000a800bu);
    virtqueue_set_base(t.vq, 0x80058007u);
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80058007u);
    /* and a start takes it */
    g_assert_true(virtqueue_start(t.vq, &t.mem, NULL));
    g_assert_cmphex(virtqueue_get_base(t.vq), ==, 0x80058007u);
    tpq_cleanup(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/virtqueue-packed/pop/simple", test_simple);
    g_test_add_func("/virtqueue-packed/pop/out-of-order-wrap",
                    test_out_of_order_wrap);
    g_test_add_func("/virtqueue-packed/pop/indirect", test_indirect);
    g_test_add_func("/virtqueue-packed/pop/long-chain", test_long_chain);
    g_test_add_func("/virtqueue-packed/pop/id-in-last", test_id_in_last);
    g_test_add_func("/virtqueue-packed/pop/unpop", test_unpop);
    g_test_add_func("/virtqueue-packed/notify/driver-event",
                    test_notify_driver_event);
    g_test_add_func("/virtqueue-packed/notify/device-event",
                    test_notify_device_event);
    g_test_add_func("/virtqueue-packed/setup/base", test_base);
    g_test_add_func("/virtqueue-packed/setup/base-set-then-get",
                    test_base_set_then_get);
    for (unsigned int i = 0; i < ARRAY_SIZE(bad_cases); i++) {
        g_autofree char *path = g_strdup_printf("/virtqueue-packed/broken/%s",
                                                bad_cases[i].name);
        g_test_add_data_func(path, (gconstpointer)bad_cases[i].setup,
                             test_broken);
    }
    g_test_add_func("/virtqueue-packed/inflight/resubmit",
                    test_inflight_resubmit);
    g_test_add_func("/virtqueue-packed/inflight/torn-push",
                    test_inflight_torn_push);
    g_test_add_func("/virtqueue-packed/inflight/corrupt",
                    test_inflight_corrupt);
    g_test_add_func("/virtqueue-packed/inflight/flip-during-restore",
                    test_inflight_flip_during_restore);
    g_test_add_func("/virtqueue-packed/inflight/free-list-short",
                    test_inflight_free_list_short);
    g_test_add_func("/virtqueue-packed/inflight/unpop-killed",
                    test_inflight_unpop_killed);
    return g_test_run();
}
