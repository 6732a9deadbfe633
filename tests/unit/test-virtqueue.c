/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for the split virtqueue: the test plays the driver, writing
 * descriptors and rings into memfd "guest memory" by hand.
 */
#include "qemu/osdep.h"
#include "hw/virtio/virtqueue.h"

#include <semaphore.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <linux/virtio_ring.h>

/* Guest layout: region A = [0, 1M), region B = [1M, 2M), adjacent in
 * guest-physical space, far apart in VMM-virtual space. */
#define REGION_SIZE     0x100000ull
#define UVA_A           0x7f0000000000ull
#define UVA_B           0x7f1000000000ull
#define GPA_DESC        0x0000
#define GPA_AVAIL       0x4000
#define GPA_USED        0x8000
#define GPA_DATA        0x10000     /* per-test buffers from here */
#define GPA_END         (2 * REGION_SIZE)

typedef struct TestVQ {
    GuestMemory mem;
    int memfd[2];
    VirtQueue *vq;
    unsigned int num;
    bool event_idx;
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    uint16_t avail_idx;
    int call_fd;                /* our end of the call eventfd */
    VhostUserQueueRegionSplit *inflight;
} TestVQ;

static void *tvq_host(TestVQ *t, uint64_t gpa)
{
    void *p = guest_mem_gpa_to_host(&t->mem, gpa, 1);

    g_assert_nonnull(p);
    return p;
}

static VirtQueue *tvq_new_queue(TestVQ *t, uint16_t base)
{
    VhostUserVringAddr addr = {
        .desc_user_addr = UVA_A + GPA_DESC,
        .avail_user_addr = UVA_A + GPA_AVAIL,
        .used_user_addr = UVA_A + GPA_USED,
    };
    VirtQueue *vq = virtqueue_new(0);
    GError *err = NULL;
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

    g_assert_cmpint(efd, >=, 0);
    g_assert_true(virtqueue_set_num(vq, t->num, &err));
    g_assert_true(virtqueue_set_addr(vq, &addr, &err));
    virtqueue_set_base(vq, base);
    virtqueue_set_kick_fd(vq, efd);
    if (t->call_fd >= 0) {
        close(t->call_fd);
    }
    t->call_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    virtqueue_set_call_fd(vq, dup(t->call_fd));
    virtqueue_set_event_idx(vq, t->event_idx);
    virtqueue_set_inflight(vq, t->inflight);
    virtqueue_set_enabled(vq, true);
    g_assert_true(virtqueue_is_ready(vq));
    g_assert_true(virtqueue_start(vq, &t->mem, &err));
    g_assert_no_error(err);
    g_assert_true(virtqueue_is_started(vq));
    return vq;
}

static void tvq_init_full(TestVQ *t, unsigned int num, bool event_idx,
                          bool inflight)
{
    unsigned i;

    memset(t, 0, sizeof(*t));
    t->num = num;
    t->event_idx = event_idx;
    t->call_fd = -1;
    guest_mem_init(&t->mem);
    for (i = 0; i < 2; i++) {
        VhostUserMemoryRegion r = {
            .guest_phys_addr = i * REGION_SIZE,
            .memory_size = REGION_SIZE,
            .userspace_addr = i ? UVA_B : UVA_A,
        };
        GError *err = NULL;

        t->memfd[i] = memfd_create("test-virtqueue", MFD_CLOEXEC);
        g_assert_cmpint(ftruncate(t->memfd[i], REGION_SIZE), ==, 0);
        g_assert_true(guest_mem_add_region(&t->mem, &r, t->memfd[i], &err));
    }
    t->desc = tvq_host(t, GPA_DESC);
    t->avail = tvq_host(t, GPA_AVAIL);
    t->used = tvq_host(t, GPA_USED);
    if (inflight) {
        t->inflight = g_malloc0(vhost_user_inflight_queue_size(num));
    }
    t->vq = tvq_new_queue(t, 0);
}

static void tvq_init(TestVQ *t, unsigned int num, bool event_idx)
{
    tvq_init_full(t, num, event_idx, false);
}

static void tvq_cleanup(TestVQ *t)
{
    virtqueue_free(t->vq);
    guest_mem_clear(&t->mem);
    close(t->memfd[0]);
    close(t->memfd[1]);
    close(t->call_fd);
    g_free(t->inflight);
}

static void tvq_desc(TestVQ *t, struct vring_desc *table, unsigned i,
                     uint64_t gpa, uint32_t len, uint16_t flags, uint16_t next)
{
    table = table ? table : t->desc;
    table[i].addr = gpa;
    table[i].len = len;
    table[i].flags = flags;
    table[i].next = next;
}

static void tvq_make_avail(TestVQ *t, uint16_t head)
{
    t->avail->ring[t->avail_idx % t->num] = head;
    t->avail_idx++;
    /* the driver's write barrier before publishing the index */
    __atomic_store_n(&t->avail->idx, t->avail_idx, __ATOMIC_RELEASE);
}

/* How many times the device signalled the call eventfd since last asked */
static uint64_t tvq_calls(TestVQ *t)
{
    uint64_t v = 0;

    if (read(t->call_fd, &v, sizeof(v)) != sizeof(v)) {
        return 0;
    }
    return v;
}

static void tvq_expect_broken(TestVQ *t)
{
    g_assert_false(virtqueue_is_broken(t->vq));
    g_assert_null(virtqueue_pop(t->vq));
    g_assert_true(virtqueue_is_broken(t->vq));
    g_assert_false(virtqueue_has_avail(t->vq));
    g_assert_null(virtqueue_pop(t->vq));
}

static void test_simple(void)
{
    TestVQ t;
    VirtQueueElement *e;
    VirtQueueStats st;

    tvq_init(&t, 256, false);
    g_assert_false(virtqueue_has_avail(t.vq));
    g_assert_null(virtqueue_pop(t.vq));

    /* header (out), data (in), status (in), deliberately out of order */
    tvq_desc(&t, NULL, 7, GPA_DATA, 16, VRING_DESC_F_NEXT, 3);
    tvq_desc(&t, NULL, 3, GPA_DATA + 0x1000, 4096,
             VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 200);
    tvq_desc(&t, NULL, 200, GPA_DATA + 0x3000, 1, VRING_DESC_F_WRITE, 0);
    tvq_make_avail(&t, 7);
    g_assert_true(virtqueue_has_avail(t.vq));

    e = virtqueue_pop(t.vq);
    g_assert_nonnull(e);
    g_assert_cmpuint(e->head, ==, 7);
    g_assert_cmpuint(e->out_num, ==, 1);
    g_assert_cmpuint(e->in_num, ==, 2);
    g_assert_true(e->out_sg == e->sg && e->in_sg == e->sg + 1);
    g_assert_true(e->out_sg[0].iov_base == tvq_host(&t, GPA_DATA));
    g_assert_cmpuint(e->out_sg[0].iov_len, ==, 16);
    g_assert_true(e->in_sg[0].iov_base == tvq_host(&t, GPA_DATA + 0x1000));
    g_assert_cmpuint(e->in_sg[0].iov_len, ==, 4096);
    g_assert_true(e->in_sg[1].iov_base == tvq_host(&t, GPA_DATA + 0x3000));
    g_assert_cmpuint(e->in_sg[1].iov_len, ==, 1);
    g_assert_cmpuint(virtqueue_inflight_count(t.vq), ==, 1);
    g_assert_false(virtqueue_has_avail(t.vq));
    g_assert_null(virtqueue_pop(t.vq));
    g_assert_cmpuint(virtqueue_get_base(t.vq), ==, 1);

    virtqueue_push(t.vq, e, 4097);
    g_assert_cmpuint(t.used->idx, ==, 1);
    g_assert_cmpuint(t.used->ring[0].id, ==, 7);
    g_assert_cmpuint(t.used->ring[0].len, ==, 4097);
    g_assert_cmpuint(virtqueue_inflight_count(t.vq), ==, 0);
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tvq_calls(&t), ==, 1);

    /* the head can be reused now; a one-descriptor chain */
    tvq_desc(&t, NULL, 7, GPA_DATA, 512, VRING_DESC_F_WRITE, 0);
    tvq_make_avail(&t, 7);
    e = virtqueue_pop(t.vq);
    g_assert_nonnull(e);
    g_assert_cmpuint(e->out_num, ==, 0);
    g_assert_cmpuint(e->in_num, ==, 1);
    virtqueue_push(t.vq, e, 0);
    virtqueue_get_stats(t.vq, &st);
    g_assert_cmpuint(st.popped, ==, 2);
    g_assert_cmpuint(st.pushed, ==, 2);
    g_assert_false(virtqueue_is_broken(t.vq));
    tvq_cleanup(&t);
}

static void test_indirect(void)
{
    TestVQ t;
    VirtQueueElement *e;
    struct vring_desc *table;

    tvq_init(&t, 16, false);
    table = tvq_host(&t, GPA_DATA);
    tvq_desc(&t, table, 0, GPA_DATA + 0x1000, 16, VRING_DESC_F_NEXT, 2);
    tvq_desc(&t, table, 2, GPA_DATA + 0x2000, 0x800, VRING_DESC_F_NEXT, 1);
    tvq_desc(&t, table, 1, GPA_DATA + 0x3000, 1, VRING_DESC_F_WRITE, 0);
    /* a direct descriptor, then the indirect table at the end */
    tvq_desc(&t, NULL, 5, GPA_DATA + 0x4000, 8, VRING_DESC_F_NEXT, 6);
    tvq_desc(&t, NULL, 6, GPA_DATA, 3 * 16, VRING_DESC_F_INDIRECT, 0);
    tvq_desc(&t, NULL, 9, GPA_DATA, 3 * 16, VRING_DESC_F_INDIRECT, 0);
    tvq_make_avail(&t, 9);
    tvq_make_avail(&t, 5);

    e = virtqueue_pop(t.vq);
    g_assert_nonnull(e);
    g_assert_cmpuint(e->head, ==, 9);
    g_assert_cmpuint(e->out_num, ==, 2);
    g_assert_cmpuint(e->in_num, ==, 1);
    g_assert_cmpuint(e->out_sg[1].iov_len, ==, 0x800);
    g_assert_true(e->in_sg[0].iov_base == tvq_host(&t, GPA_DATA + 0x3000));

    e = virtqueue_pop(t.vq);
    g_assert_nonnull(e);
    g_assert_cmpuint(e->head, ==, 5);
    g_assert_cmpuint(e->out_num, ==, 3);
    g_assert_cmpuint(e->in_num, ==, 1);
    g_assert_cmpuint(e->out_sg[0].iov_len, ==, 8);
    g_assert_false(virtqueue_is_broken(t.vq));
    tvq_cleanup(&t);
}

/* A chain longer than the element's inline iovecs moves to the head's
 * long slot; a short chain of the same head afterwards is inline again. */
static void test_long_chain(void)
{
    const unsigned n = VIRTQUEUE_INLINE_SG * 3 + 1;
    TestVQ t;
    VirtQueueElement *e;
    struct vring_desc *table;
    unsigned i;

    tvq_init(&t, 64, false);
    table = tvq_host(&t, GPA_DATA);
    tvq_desc(&t, NULL, 3, GPA_DATA, n * 16, VRING_DESC_F_INDIRECT, 0);
    for (i = 0; i < n; i++) {
        tvq_desc(&t, table, i, GPA_DATA + 0x1000 + 0x10 * i, 8 + i,
                 (i + 1 < n ? VRING_DESC_F_NEXT : 0) |
                 (i >= n - 2 ? VRING_DESC_F_WRITE : 0), i + 1);
    }
    tvq_make_avail(&t, 3);

    e = virtqueue_pop(t.vq);
    g_assert_nonnull(e);
    g_assert_false(virtqueue_is_broken(t.vq));
    g_assert_cmpuint(e->out_num, ==, n - 2);
    g_assert_cmpuint(e->in_num, ==, 2);
    g_assert_true(e->sg != e->inline_sg);
    g_assert_true(e->out_sg == e->sg && e->in_sg == e->sg + n - 2);
    for (i = 0; i < n; i++) {
        g_assert_true(e->sg[i].iov_base ==
                      tvq_host(&t, GPA_DATA + 0x1000 + 0x10 * i));
        g_assert_cmpuint(e->sg[i].iov_len, ==, 8 + i);
    }
    virtqueue_push(t.vq, e, 0);

    tvq_desc(&t, NULL, 3, GPA_DATA + 0x4000, 16, 0, 0);
    tvq_make_avail(&t, 3);
    e = virtqueue_pop(t.vq);
    g_assert_nonnull(e);
    g_assert_true(e->sg == e->inline_sg);
    g_assert_cmpuint(e->out_num, ==, 1);
    g_assert_true(e->out_sg[0].iov_base == tvq_host(&t, GPA_DATA + 0x4000));
    tvq_cleanup(&t);
}

static void test_region_split(void)
{
    TestVQ t;
    VirtQueueElement *e;

    tvq_init(&t, 16, false);
    tvq_desc(&t, NULL, 0, REGION_SIZE - 100, 300, VRING_DESC_F_WRITE, 0);
    tvq_make_avail(&t, 0);
    e = virtqueue_pop(t.vq);
    g_assert_nonnull(e);
    g_assert_cmpuint(e->in_num, ==, 2);
    g_assert_true(e->in_sg[0].iov_base == tvq_host(&t, REGION_SIZE - 100));
    g_assert_cmpuint(e->in_sg[0].iov_len, ==, 100);
    g_assert_true(e->in_sg[1].iov_base == tvq_host(&t, REGION_SIZE));
    g_assert_cmpuint(e->in_sg[1].iov_len, ==, 200);

    /* the last byte of memory is fine */
    tvq_desc(&t, NULL, 1, GPA_END - 1, 1, VRING_DESC_F_WRITE, 0);
    tvq_make_avail(&t, 1);
    e = virtqueue_pop(t.vq);
    g_assert_nonnull(e);
    g_assert_cmpuint(e->in_sg[0].iov_len, ==, 1);
    tvq_cleanup(&t);
}

/*
 * A conforming request of the largest size the export advertises at
 * queue-size >= 256: seg_max = 254 data segments plus header and status,
 * 256 descriptors.  A segment that crosses a guest memory region boundary
 * needs two iovecs; the queue must take it (it broke with -ENOBUFS when
 * the per-element limit equalled the descriptor limit).  Each descriptor
 * may even split once: all 256 crossing gives 512 iovecs, which fit too.
 */
static void test_seg_max_split(void)
{
    const unsigned ndesc = 256;
    TestVQ t;
    VirtQueueElement *e;
    struct vring_desc *table;
    unsigned i, round;

    tvq_init(&t, 256, true);
    table = tvq_host(&t, GPA_DATA);
    for (round = 0; round < 2; round++) {
        /* round 0: data segment 100 (descriptor 101) crosses the boundary;
         * round 1: the header and every data segment cross it */
        for (i = 0; i < ndesc; i++) {
            bool header = i == 0, status = i == ndesc - 1;
            bool split = round == 1 ? !status : i == 101;
            uint32_t len = header ? 16 : status ? 1 : 0x200;
            uint64_t gpa = split ? REGION_SIZE - len / 2
                                 : GPA_DATA + 0x2000 + 0x200 * i;

            tvq_desc(&t, table, i, gpa, len,
                     (status ? 0 : VRING_DESC_F_NEXT) |
                     (header ? 0 : VRING_DESC_F_WRITE), i + 1);
        }
        tvq_desc(&t, NULL, round, GPA_DATA, ndesc * 16,
                 VRING_DESC_F_INDIRECT, 0);
        tvq_make_avail(&t, round);
        e = virtqueue_pop(t.vq);
        g_assert_false(virtqueue_is_broken(t.vq));
        g_assert_nonnull(e);
        g_assert_cmpuint(e->head, ==, round);
        if (round == 0) {
            g_assert_cmpuint(e->out_num, ==, 1);
            g_assert_cmpuint(e->in_num, ==, ndesc);
            /* in_sg[0] is descriptor 1; descriptor 101 is in_sg[100..101] */
            g_assert_true(e->in_sg[100].iov_base ==
                          tvq_host(&t, REGION_SIZE - 0x100));
            g_assert_cmpuint(e->in_sg[100].iov_len, ==, 0x100);
            g_assert_true(e->in_sg[101].iov_base ==
                          tvq_host(&t, REGION_SIZE));
            g_assert_cmpuint(e->in_sg[101].iov_len, ==, 0x100);
            g_assert_true(e->in_sg[102].iov_base ==
                          tvq_host(&t, GPA_DATA + 0x2000 + 0x200 * 102));
            g_assert_cmpuint(e->in_sg[ndesc - 1].iov_len, ==, 1);
        } else {
            g_assert_cmpuint(e->out_num, ==, 2);
            g_assert_cmpuint(e->in_num, ==, 2 * (ndesc - 2) + 1);
        }
        virtqueue_push(t.vq, e, 0);
    }
    tvq_cleanup(&t);
}

/* Past the iovec limit (more descriptors than seg_max allows, each split
 * at the region boundary): broken, not an overflow. */
static void test_too_many_iovecs(void)
{
    const unsigned ndesc = VIRTQUEUE_MAX_SG / 2 + 1;
    TestVQ t;
    struct vring_desc *table;
    unsigned i;

    tvq_init(&t, 1024, true);
    table = tvq_host(&t, GPA_DATA);
    for (i = 0; i < ndesc; i++) {
        tvq_desc(&t, table, i, REGION_SIZE - 8, 16,
                 i + 1 < ndesc ? VRING_DESC_F_NEXT : 0, i + 1);
    }
    tvq_desc(&t, NULL, 0, GPA_DATA, ndesc * 16, VRING_DESC_F_INDIRECT, 0);
    tvq_make_avail(&t, 0);
    tvq_expect_broken(&t);
    tvq_cleanup(&t);
}

static void test_notify_event_idx(void)
{
    TestVQ t;
    VirtQueueElement *e[4];
    VirtQueueStats st;
    uint16_t *used_event;
    unsigned i;

    tvq_init(&t, 16, true);
    used_event = &t.avail->ring[t.num];
    for (i = 0; i < 4; i++) {
        tvq_desc(&t, NULL, i, GPA_DATA + i * 0x1000, 512,
                 VRING_DESC_F_WRITE, 0);
        tvq_make_avail(&t, i);
        e[i] = virtqueue_pop(t.vq);
        g_assert_nonnull(e[i]);
    }

    /* nothing pushed: no interrupt */
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tvq_calls(&t), ==, 0);

    /* the driver consumed nothing yet and wants to hear about entry 0 */
    *used_event = 0;
    virtqueue_push(t.vq, e[0], 512);
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tvq_calls(&t), ==, 1);

    /* it asks for an interrupt once used->idx passes 1: entry 1 does */
    *used_event = 1;
    virtqueue_push(t.vq, e[1], 512);
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tvq_calls(&t), ==, 1);

    /* it wants to wait for entry 10: entry 2 needs no interrupt */
    *used_event = 10;
    virtqueue_push(t.vq, e[2], 512);
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tvq_calls(&t), ==, 0);

    /* used_event lags behind (already passed): no interrupt either */
    *used_event = 1;
    virtqueue_push(t.vq, e[3], 512);
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tvq_calls(&t), ==, 0);

    virtqueue_get_stats(t.vq, &st);
    g_assert_cmpuint(st.notifies, ==, 2);
    g_assert_cmpuint(st.notifies_suppressed, ==, 2);
    tvq_cleanup(&t);
}

static void test_notify_batch(void)
{
    TestVQ t;
    VirtQueueElement *e[8];
    uint16_t *used_event;
    unsigned i;

    tvq_init(&t, 16, true);
    used_event = &t.avail->ring[t.num];
    for (i = 0; i < 8; i++) {
        tvq_desc(&t, NULL, i, GPA_DATA + i * 0x1000, 512,
                 VRING_DESC_F_WRITE, 0);
        tvq_make_avail(&t, i);
        e[i] = virtqueue_pop(t.vq);
    }
    /* first batch of 4: one interrupt */
    for (i = 0; i < 4; i++) {
        virtqueue_push(t.vq, e[i], 1);
    }
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tvq_calls(&t), ==, 1);
    /* driver consumed 4, wants to hear about entry 5 (index 4 + 1):
     * a batch that covers it interrupts once */
    *used_event = 5;
    for (i = 4; i < 8; i++) {
        virtqueue_push(t.vq, e[i], 1);
    }
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tvq_calls(&t), ==, 1);
    g_assert_cmpuint(t.used->idx, ==, 8);
    tvq_cleanup(&t);
}

static void test_notify_no_interrupt(void)
{
    TestVQ t;
    VirtQueueElement *e;

    tvq_init(&t, 16, false);
    tvq_desc(&t, NULL, 0, GPA_DATA, 512, VRING_DESC_F_WRITE, 0);

    t.avail->flags = VRING_AVAIL_F_NO_INTERRUPT;
    tvq_make_avail(&t, 0);
    e = virtqueue_pop(t.vq);
    virtqueue_push(t.vq, e, 0);
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tvq_calls(&t), ==, 0);

    t.avail->flags = 0;
    tvq_make_avail(&t, 0);
    e = virtqueue_pop(t.vq);
    virtqueue_push(t.vq, e, 0);
    virtqueue_notify(t.vq);
    g_assert_cmpuint(tvq_calls(&t), ==, 1);
    tvq_cleanup(&t);
}

/* One chain through the ring: made available, popped, used, notified. */
static void tvq_cycle(TestVQ *t)
{
    VirtQueueElement *e;

    tvq_make_avail(t, 0);
    e = virtqueue_pop(t->vq);
    g_assert_nonnull(e);
    virtqueue_push(t->vq, e, 512);
    virtqueue_notify(t->vq);
}

/*
 * A driver that goes a whole ring of completions without wanting an
 * interrupt polls; one that asks for an interrupt again does not.
 */
static void test_driver_polls(gconstpointer data)
{
    bool event_idx = GPOINTER_TO_INT(data);
    TestVQ t;
    uint16_t *used_event;
    unsigned int i;

    tvq_init(&t, 8, event_idx);
    used_event = &t.avail->ring[t.num];
    tvq_desc(&t, NULL, 0, GPA_DATA, 512, VRING_DESC_F_WRITE, 0);
    /* interrupts off: the flag, or used_event left at 0 */
    t.avail->flags = event_idx ? 0 : VRING_AVAIL_F_NO_INTERRUPT;
    *used_event = 0;

    tvq_cycle(&t);      /* event-idx: the first decision interrupts */
    g_assert_cmpuint(tvq_calls(&t), ==, event_idx ? 1 : 0);
    /* quiet completions so far: the first one, without event-idx */
    for (i = event_idx ? 0 : 1; i < t.num - 1; i++) {
        g_assert_false(virtqueue_driver_polls(t.vq));
        tvq_cycle(&t);
    }
    g_assert_false(virtqueue_driver_polls(t.vq));
    tvq_cycle(&t);              /* the ring's worth */
    g_assert_true(virtqueue_driver_polls(t.vq));
    for (i = 0; i < 3 * t.num; i++) {
        tvq_cycle(&t);          /* saturates, stays */
        g_assert_true(virtqueue_driver_polls(t.vq));
    }
    g_assert_cmpuint(tvq_calls(&t), ==, 0);

    /* It waits again: the next completion interrupts, and it no longer
     * counts as polling. */
    if (event_idx) {
        *used_event = t.used->idx;
    } else {
        t.avail->flags = 0;
    }
    tvq_cycle(&t);
    g_assert_cmpuint(tvq_calls(&t), ==, 1);
    g_assert_false(virtqueue_driver_polls(t.vq));

    /* An interrupt-driven driver that consumes late (used_event behind):
     * fewer than a ring of quiet completions before it asks again. */
    for (i = 0; i < t.num - 1; i++) {
        tvq_cycle(&t);
    }
    g_assert_false(virtqueue_driver_polls(t.vq));
    tvq_cleanup(&t);
}

static void test_set_notification(void)
{
    TestVQ t;
    uint16_t *avail_event;

    tvq_init(&t, 16, true);
    avail_event = (uint16_t *)&t.used->ring[t.num];
    tvq_desc(&t, NULL, 0, GPA_DATA, 512, VRING_DESC_F_WRITE, 0);
    tvq_desc(&t, NULL, 1, GPA_DATA, 512, VRING_DESC_F_WRITE, 0);
    g_assert_cmpuint(*avail_event, ==, 0);

    virtqueue_set_notification(t.vq, false);
    tvq_make_avail(&t, 0);
    tvq_make_avail(&t, 1);
    g_assert_nonnull(virtqueue_pop(t.vq));
    g_assert_cmpuint(*avail_event, ==, 0);  /* not touched while off */
    virtqueue_set_notification(t.vq, true);
    g_assert_cmpuint(*avail_event, ==, 2);  /* current avail index */
    g_assert_true(virtqueue_has_avail(t.vq));
    g_assert_nonnull(virtqueue_pop(t.vq));
    g_assert_cmpuint(*avail_event, ==, 2);
    tvq_cleanup(&t);

    tvq_init(&t, 16, false);
    virtqueue_set_notification(t.vq, false);
    g_assert_cmpuint(t.used->flags, ==, VRING_USED_F_NO_NOTIFY);
    virtqueue_set_notification(t.vq, true);
    g_assert_cmpuint(t.used->flags, ==, 0);
    tvq_cleanup(&t);
}

static void test_unpop(void)
{
    TestVQ t;
    VirtQueueElement *a, *b;

    tvq_init(&t, 16, false);
    tvq_desc(&t, NULL, 4, GPA_DATA, 512, VRING_DESC_F_WRITE, 0);
    tvq_desc(&t, NULL, 5, GPA_DATA, 512, VRING_DESC_F_WRITE, 0);
    tvq_make_avail(&t, 4);
    tvq_make_avail(&t, 5);
    a = virtqueue_pop(t.vq);
    b = virtqueue_pop(t.vq);
    g_assert_cmpuint(a->head, ==, 4);
    g_assert_cmpuint(b->head, ==, 5);
    virtqueue_unpop(t.vq, b);
    virtqueue_unpop(t.vq, a);
    g_assert_cmpuint(virtqueue_inflight_count(t.vq), ==, 0);
    g_assert_cmpuint(virtqueue_get_base(t.vq), ==, 0);
    a = virtqueue_pop(t.vq);
    g_assert_cmpuint(a->head, ==, 4);
    b = virtqueue_pop(t.vq);
    g_assert_cmpuint(b->head, ==, 5);
    g_assert_false(virtqueue_is_broken(t.vq));
    tvq_cleanup(&t);
}

static void test_setup_errors(void)
{
    TestVQ t;
    VirtQueue *vq = virtqueue_new(3);
    VhostUserVringAddr addr = {
        .desc_user_addr = UVA_A + GPA_DESC,
        .avail_user_addr = UVA_A + GPA_AVAIL,
        .used_user_addr = UVA_A + GPA_USED,
    };
    GError *err = NULL;
    unsigned bad_num[] = { 0, 3, 100, 2048, 65536 };
    unsigned i;

    tvq_init(&t, 16, false);
    for (i = 0; i < ARRAY_SIZE(bad_num); i++) {
        g_assert_false(virtqueue_set_num(vq, bad_num[i], &err));
        g_clear_error(&err);
    }
    g_assert_false(virtqueue_is_ready(vq));
    g_assert_false(virtqueue_start(vq, &t.mem, &err));
    g_clear_error(&err);

    g_assert_true(virtqueue_set_num(vq, 1024, &err));
    addr.used_user_addr += 2;   /* misaligned */
    g_assert_false(virtqueue_set_addr(vq, &addr, &err));
    g_clear_error(&err);

    /* used ring of 1024 entries would run past region A */
    addr.used_user_addr = UVA_A + REGION_SIZE - 0x1000;
    g_assert_true(virtqueue_set_addr(vq, &addr, &err));
    g_assert_false(virtqueue_start(vq, &t.mem, &err));
    g_assert_nonnull(err);
    g_test_message("%s", err->message);
    g_clear_error(&err);
    g_assert_false(virtqueue_is_started(vq));

    /* rings given as guest-physical addresses are not VMM addresses */
    addr.desc_user_addr = GPA_DESC;
    addr.used_user_addr = UVA_A + GPA_USED;
    g_assert_true(virtqueue_set_addr(vq, &addr, &err));
    g_assert_false(virtqueue_start(vq, &t.mem, &err));
    g_clear_error(&err);

    addr.desc_user_addr = UVA_A + GPA_DESC;
    g_assert_true(virtqueue_set_addr(vq, &addr, &err));
    g_assert_true(virtqueue_start(vq, &t.mem, &err));
    virtqueue_stop(vq);
    g_assert_null(virtqueue_pop(vq));
    virtqueue_free(vq);
    tvq_cleanup(&t);
}

/* Broken cases: each sets up one bad chain in a fresh queue of 16 */
typedef void TestBadSetup(TestVQ *t);

static void bad_avail_jump(TestVQ *t)
{
    tvq_desc(t, NULL, 0, GPA_DATA, 512, VRING_DESC_F_WRITE, 0);
    t->avail_idx = t->num + 1;
    t->avail->idx = t->avail_idx;
}

static void bad_head(TestVQ *t)
{
    tvq_make_avail(t, t->num);
}

static void bad_read_after_write(TestVQ *t)
{
    tvq_desc(t, NULL, 0, GPA_DATA, 512,
             VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1);
    tvq_desc(t, NULL, 1, GPA_DATA + 0x1000, 16, 0, 0);
    tvq_make_avail(t, 0);
}

static void bad_loop(TestVQ *t)
{
    tvq_desc(t, NULL, 0, GPA_DATA, 16, VRING_DESC_F_NEXT, 1);
    tvq_desc(t, NULL, 1, GPA_DATA, 16, VRING_DESC_F_NEXT, 2);
    tvq_desc(t, NULL, 2, GPA_DATA, 16, VRING_DESC_F_NEXT, 0);
    tvq_make_avail(t, 0);
}

static void bad_self_loop(TestVQ *t)
{
    tvq_desc(t, NULL, 3, GPA_DATA, 16, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT,
             3);
    tvq_make_avail(t, 3);
}

static void bad_next(TestVQ *t)
{
    tvq_desc(t, NULL, 0, GPA_DATA, 16, VRING_DESC_F_NEXT, t->num);
    tvq_make_avail(t, 0);
}

static void bad_indirect_len(TestVQ *t, uint32_t len)
{
    tvq_desc(t, NULL, 0, GPA_DATA, len, VRING_DESC_F_INDIRECT, 0);
    tvq_desc(t, tvq_host(t, GPA_DATA), 0, GPA_DATA + 0x8000, 512,
             VRING_DESC_F_WRITE, 0);
    tvq_make_avail(t, 0);
}

static void bad_indirect_unaligned(TestVQ *t)
{
    bad_indirect_len(t, 20);
}

static void bad_indirect_empty(TestVQ *t)
{
    bad_indirect_len(t, 0);
}

static void bad_indirect_huge(TestVQ *t)
{
    bad_indirect_len(t, 16 * (VIRTQUEUE_MAX_SIZE + 1));
}

static void bad_indirect_outside(TestVQ *t)
{
    tvq_desc(t, NULL, 0, GPA_END - 16, 32, VRING_DESC_F_INDIRECT, 0);
    tvq_make_avail(t, 0);
}

static void bad_indirect_cross(TestVQ *t)
{
    /* a table straddling two regions is not contiguous for us */
    tvq_desc(t, NULL, 0, REGION_SIZE - 16, 32, VRING_DESC_F_INDIRECT, 0);
    tvq_desc(t, tvq_host(t, REGION_SIZE - 16), 0, GPA_DATA, 16,
             VRING_DESC_F_NEXT, 1);
    tvq_desc(t, tvq_host(t, REGION_SIZE), 0, GPA_DATA, 16, 0, 0);
    tvq_make_avail(t, 0);
}

static void bad_indirect_nested(TestVQ *t)
{
    struct vring_desc *table = tvq_host(t, GPA_DATA);

    tvq_desc(t, NULL, 0, GPA_DATA, 32, VRING_DESC_F_INDIRECT, 0);
    tvq_desc(t, table, 0, GPA_DATA + 0x1000, 16, VRING_DESC_F_NEXT, 1);
    tvq_desc(t, table, 1, GPA_DATA + 0x2000, 32, VRING_DESC_F_INDIRECT, 0);
    tvq_make_avail(t, 0);
}

static void bad_indirect_next(TestVQ *t)
{
    tvq_desc(t, NULL, 0, GPA_DATA, 16,
             VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT, 1);
    tvq_desc(t, tvq_host(t, GPA_DATA), 0, GPA_DATA + 0x1000, 16, 0, 0);
    tvq_desc(t, NULL, 1, GPA_DATA + 0x2000, 16, 0, 0);
    tvq_make_avail(t, 0);
}

static void bad_indirect_loop(TestVQ *t)
{
    struct vring_desc *table = tvq_host(t, GPA_DATA);
    unsigned i;

    tvq_desc(t, NULL, 0, GPA_DATA, 4 * 16, VRING_DESC_F_INDIRECT, 0);
    for (i = 0; i < 4; i++) {
        tvq_desc(t, table, i, GPA_DATA + 0x1000, 16, VRING_DESC_F_NEXT,
                 (i + 1) % 4);
    }
    tvq_make_avail(t, 0);
}

static void bad_indirect_next_range(TestVQ *t)
{
    struct vring_desc *table = tvq_host(t, GPA_DATA);

    tvq_desc(t, NULL, 0, GPA_DATA, 2 * 16, VRING_DESC_F_INDIRECT, 0);
    tvq_desc(t, table, 0, GPA_DATA + 0x1000, 16, VRING_DESC_F_NEXT, 2);
    tvq_make_avail(t, 0);
}

static void bad_len_overflow(TestVQ *t)
{
    tvq_desc(t, NULL, 0, GPA_DATA, 2, VRING_DESC_F_NEXT, 1);
    tvq_desc(t, NULL, 1, GPA_DATA, UINT32_MAX, 0, 0);
    tvq_make_avail(t, 0);
}

static void bad_too_many_sg(TestVQ *t)
{
    struct vring_desc *table = tvq_host(t, GPA_DATA);
    unsigned n = VIRTQUEUE_MAX_SG + 1, i;

    tvq_desc(t, NULL, 0, GPA_DATA, n * 16, VRING_DESC_F_INDIRECT, 0);
    for (i = 0; i < n; i++) {
        tvq_desc(t, table, i, GPA_DATA + 0x8000 + i, 1,
                 i + 1 < n ? VRING_DESC_F_NEXT : 0, i + 1);
    }
    tvq_make_avail(t, 0);
}

static void bad_head_reused(TestVQ *t)
{
    tvq_desc(t, NULL, 0, GPA_DATA, 16, 0, 0);
    tvq_make_avail(t, 0);
    g_assert_nonnull(virtqueue_pop(t->vq));
    tvq_make_avail(t, 0);
}

static void bad_past_end(TestVQ *t)
{
    /* one byte past the end of the last region */
    tvq_desc(t, NULL, 0, GPA_END - 10, 11, VRING_DESC_F_WRITE, 0);
    tvq_make_avail(t, 0);
}

static void bad_outside(TestVQ *t)
{
    tvq_desc(t, NULL, 0, 0x80000000, 16, 0, 0);
    tvq_make_avail(t, 0);
}

static void bad_addr_wrap(TestVQ *t)
{
    tvq_desc(t, NULL, 0, UINT64_MAX - 8, 16, 0, 0);
    tvq_make_avail(t, 0);
}

static void test_broken(gconstpointer data)
{
    TestBadSetup *setup = (TestBadSetup *)data;
    TestVQ t;

    tvq_init(&t, 16, true);
    setup(&t);
    tvq_expect_broken(&t);
    tvq_cleanup(&t);
}

static const struct {
    const char *name;
    TestBadSetup *setup;
} bad_cases[] = {
    { "avail-jump", bad_avail_jump },
    { "head-out-of-range", bad_head },
    { "readable-after-writable", bad_read_after_write },
    { "loop", bad_loop },
    { "self-loop", bad_self_loop },
    { "next-out-of-range", bad_next },
    { "indirect-unaligned", bad_indirect_unaligned },
    { "indirect-empty", bad_indirect_empty },
    { "indirect-huge", bad_indirect_huge },
    { "indirect-outside", bad_indirect_outside },
    { "indirect-cross-region", bad_indirect_cross },
    { "indirect-nested", bad_indirect_nested },
    { "indirect-with-next", bad_indirect_next },
    { "indirect-loop", bad_indirect_loop },
    { "indirect-next-out-of-range", bad_indirect_next_range },
    { "length-overflow", bad_len_overflow },
    { "too-many-iovecs", bad_too_many_sg },
    { "head-reused", bad_head_reused },
    { "past-end", bad_past_end },
    { "outside-memory", bad_outside },
    { "address-wraps", bad_addr_wrap },
};

/* Pop 5, push 2, "crash", restart over the same memory and region. */
static void test_inflight_resubmit(void)
{
    static const uint16_t order[] = { 5, 2, 7, 0, 3, 6, 1, 4 };
    VirtQueueElement *e[8];
    VirtQueueStats st;
    uint64_t last_counter = 0;
    TestVQ t;
    unsigned i;

    tvq_init_full(&t, 16, true, true);
    g_assert_cmpuint(t.inflight->version, ==, 1);
    g_assert_cmpuint(t.inflight->desc_num, ==, 16);
    for (i = 0; i < 8; i++) {
        tvq_desc(&t, NULL, i, GPA_DATA + i * 0x1000, 512,
                 VRING_DESC_F_WRITE, 0);
    }
    for (i = 0; i < 8; i++) {
        tvq_make_avail(&t, order[i]);
    }
    for (i = 0; i < 5; i++) {
        e[i] = virtqueue_pop(t.vq);
        g_assert_cmpuint(e[i]->head, ==, order[i]);
        g_assert_cmpuint(t.inflight->desc[order[i]].inflight, ==, 1);
        g_assert_cmpuint(t.inflight->desc[order[i]].counter, >, last_counter);
        last_counter = t.inflight->desc[order[i]].counter;
    }
    virtqueue_push(t.vq, e[1], 512);    /* head 2 */
    virtqueue_push(t.vq, e[3], 512);    /* head 0 */
    g_assert_cmpuint(t.inflight->desc[2].inflight, ==, 0);
    g_assert_cmpuint(t.inflight->desc[0].inflight, ==, 0);
    g_assert_cmpuint(t.inflight->used_idx, ==, 2);
    g_assert_cmpuint(t.used->idx, ==, 2);

    /* crash: the process dies, the VMM keeps memory and inflight region
     * and gives the new back-end the used index as base */
    virtqueue_free(t.vq);
    t.vq = tvq_new_queue(&t, t.used->idx);
    g_assert_cmpuint(virtqueue_get_base(t.vq), ==, 5);
    g_assert_true(virtqueue_has_avail(t.vq));

    /* the three outstanding ones, in their original order ... */
    e[0] = virtqueue_pop(t.vq);
    e[1] = virtqueue_pop(t.vq);
    e[2] = virtqueue_pop(t.vq);
    g_assert_cmpuint(e[0]->head, ==, 5);
    g_assert_cmpuint(e[1]->head, ==, 7);
    g_assert_cmpuint(e[2]->head, ==, 3);
    g_assert_true(e[0]->in_sg[0].iov_base ==
                  tvq_host(&t, GPA_DATA + 5 * 0x1000));
    g_assert_cmpuint(e[0]->in_sg[0].iov_len, ==, 512);
    /* ... then the new ones */
    e[3] = virtqueue_pop(t.vq);
    e[4] = virtqueue_pop(t.vq);
    e[5] = virtqueue_pop(t.vq);
    g_assert_cmpuint(e[3]->head, ==, 6);
    g_assert_cmpuint(e[4]->head, ==, 1);
    g_assert_cmpuint(e[5]->head, ==, 4);
    g_assert_null(virtqueue_pop(t.vq));
    g_assert_false(virtqueue_is_broken(t.vq));
    g_assert_cmpuint(virtqueue_inflight_count(t.vq), ==, 6);
    virtqueue_get_stats(t.vq, &st);
    g_assert_cmpuint(st.resubmitted, ==, 3);
    g_assert_cmpuint(st.popped, ==, 6);
    /* the new requests are numbered after the old ones */
    g_assert_cmpuint(t.inflight->desc[6].counter, >, last_counter);

    for (i = 0; i < 6; i++) {
        virtqueue_push(t.vq, e[i], 512);
    }
    for (i = 0; i < 16; i++) {
        g_assert_cmpuint(t.inflight->desc[i].inflight, ==, 0);
    }
    g_assert_cmpuint(t.used->idx, ==, 8);
    g_assert_cmpuint(t.inflight->used_idx, ==, 8);
    tvq_cleanup(&t);
}

/* Crash after the used ring was updated, before the inflight flag was
 * cleared: the request is complete and must not be replayed. */
static void test_inflight_last_batch(void)
{
    VirtQueueElement *e[2];
    TestVQ t;

    tvq_init_full(&t, 16, false, true);
    tvq_desc(&t, NULL, 0, GPA_DATA, 512, VRING_DESC_F_WRITE, 0);
    tvq_desc(&t, NULL, 1, GPA_DATA + 0x1000, 512, VRING_DESC_F_WRITE, 0);
    tvq_make_avail(&t, 0);
    tvq_make_avail(&t, 1);
    e[0] = virtqueue_pop(t.vq);
    e[1] = virtqueue_pop(t.vq);
    virtqueue_push(t.vq, e[0], 512);

    /* half of virtqueue_push(e[1]) */
    t.inflight->last_batch_head = 1;
    t.used->ring[1].id = 1;
    t.used->ring[1].len = 512;
    t.used->idx = 2;
    g_assert_cmpuint(t.inflight->desc[1].inflight, ==, 1);
    g_assert_cmpuint(t.inflight->used_idx, ==, 1);

    virtqueue_free(t.vq);
    t.vq = tvq_new_queue(&t, t.used->idx);
    g_assert_cmpuint(t.inflight->desc[1].inflight, ==, 0);
    g_assert_cmpuint(t.inflight->used_idx, ==, 2);
    g_assert_cmpuint(virtqueue_get_base(t.vq), ==, 2);
    g_assert_false(virtqueue_has_avail(t.vq));
    g_assert_null(virtqueue_pop(t.vq));
    g_assert_false(virtqueue_is_broken(t.vq));
    tvq_cleanup(&t);
}

/*
 * A "front-end" thread that rewrites the region while the daemon restores
 * it: the restore calls virtqueue_inflight_restore_hook() between its
 * checks and its use of what it read, and the hook waits until the thread
 * has written (deterministic: the race is hit on every run).
 */
static struct {
    sem_t go, done;
    bool armed, called;
    void *region;
} flipper;

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

static gpointer flip_last_batch_head(gpointer opaque)
{
    VhostUserQueueRegionSplit *r = opaque;

    while (sem_wait(&flipper.go) < 0 && errno == EINTR) {
        continue;
    }
    __atomic_store_n(&r->last_batch_head, 0xffff, __ATOMIC_RELAXED);
    __atomic_store_n(&r->used_idx, 0xffff, __ATOMIC_RELAXED);
    sem_post(&flipper.done);
    return NULL;
}

/*
 * Killed inside a push (as in last-batch), and the front-end flips
 * last_batch_head to 0xffff once the restore checked it: the restore must
 * clear the entry it checked.  A second read there cleared entry 0xffff, a
 * store 1 MiB past the region.
 */
static void test_inflight_flip_during_restore(void)
{
    VirtQueueElement *e[2];
    GThread *th;
    TestVQ t;

    tvq_init_full(&t, 16, false, true);
    tvq_desc(&t, NULL, 0, GPA_DATA, 512, VRING_DESC_F_WRITE, 0);
    tvq_desc(&t, NULL, 1, GPA_DATA + 0x1000, 512, VRING_DESC_F_WRITE, 0);
    tvq_make_avail(&t, 0);
    tvq_make_avail(&t, 1);
    e[0] = virtqueue_pop(t.vq);
    e[1] = virtqueue_pop(t.vq);
    virtqueue_push(t.vq, e[0], 512);
    /* half of virtqueue_push(e[1]) */
    t.inflight->last_batch_head = 1;
    t.used->ring[1].id = 1;
    t.used->ring[1].len = 512;
    t.used->idx = 2;
    virtqueue_free(t.vq);

    g_assert_cmpint(sem_init(&flipper.go, 0, 0), ==, 0);
    g_assert_cmpint(sem_init(&flipper.done, 0, 0), ==, 0);
    flipper.region = t.inflight;
    flipper.armed = true;
    th = g_thread_new("front-end", flip_last_batch_head, t.inflight);
    t.vq = tvq_new_queue(&t, t.used->idx);
    g_assert_true(flipper.called);
    flipper.armed = false;
    g_thread_join(th);
    sem_destroy(&flipper.go);
    sem_destroy(&flipper.done);

    /* entry 1 was done, and is not replayed */
    g_assert_cmpuint(t.inflight->desc[1].inflight, ==, 0);
    g_assert_cmpuint(virtqueue_get_base(t.vq), ==, 2);
    g_assert_null(virtqueue_pop(t.vq));
    g_assert_false(virtqueue_is_broken(t.vq));
    tvq_cleanup(&t);
}

static void test_inflight_mismatch(void)
{
    TestVQ t;
    VirtQueue *vq;
    VhostUserVringAddr addr = {
        .desc_user_addr = UVA_A + GPA_DESC,
        .avail_user_addr = UVA_A + GPA_AVAIL,
        .used_user_addr = UVA_A + GPA_USED,
    };
    GError *err = NULL;

    tvq_init_full(&t, 16, false, true);
    /* the region was set up for 16 descriptors; a queue of 8 rejects it */
    vq = virtqueue_new(0);
    g_assert_true(virtqueue_set_num(vq, 8, &err));
    g_assert_true(virtqueue_set_addr(vq, &addr, &err));
    virtqueue_set_inflight(vq, t.inflight);
    g_assert_false(virtqueue_start(vq, &t.mem, &err));
    g_assert_nonnull(err);
    g_test_message("%s", err->message);
    g_clear_error(&err);
    virtqueue_free(vq);
    tvq_cleanup(&t);
}

int main(int argc, char **argv)
{
    unsigned i;

    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/virtqueue/pop/simple", test_simple);
    g_test_add_func("/virtqueue/pop/indirect", test_indirect);
    g_test_add_func("/virtqueue/pop/region-split", test_region_split);
    g_test_add_func("/virtqueue/pop/seg-max-split", test_seg_max_split);
    g_test_add_func("/virtqueue/pop/too-many-iovecs", test_too_many_iovecs);
    g_test_add_func("/virtqueue/pop/long-chain", test_long_chain);
    g_test_add_func("/virtqueue/pop/unpop", test_unpop);
    g_test_add_func("/virtqueue/notify/event-idx", test_notify_event_idx);
    g_test_add_func("/virtqueue/notify/batch", test_notify_batch);
    g_test_add_data_func("/virtqueue/notify/driver-polls/event-idx",
                         GINT_TO_POINTER(true), test_driver_polls);
    g_test_add_data_func("/virtqueue/notify/driver-polls/flag",
                         GINT_TO_POINTER(false), test_driver_polls);
    g_test_add_func("/virtqueue/notify/no-interrupt",
                    test_notify_no_interrupt);
    g_test_add_func("/virtqueue/notify/set-notification",
                    test_set_notification);
    g_test_add_func("/virtqueue/setup/errors", test_setup_errors);
    for (i = 0; i < ARRAY_SIZE(bad_cases); i++) {
        g_autofree char *path = g_strdup_printf("/virtqueue/broken/%s",
                                                bad_cases[i].name);
        g_test_add_data_func(path, (gconstpointer)bad_cases[i].setup,
                             test_broken);
    }
    g_test_add_func("/virtqueue/inflight/resubmit", test_inflight_resubmit);
    g_test_add_func("/virtqueue/inflight/last-batch", test_inflight_last_batch);
    g_test_add_func("/virtqueue/inflight/mismatch", test_inflight_mismatch);
    g_test_add_func("/virtqueue/inflight/flip-during-restore",
                    test_inflight_flip_during_restore);
    return g_test_run();
}
