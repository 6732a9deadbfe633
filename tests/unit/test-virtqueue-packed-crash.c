/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Crash consistency of the packed ring's inflight region: a back-end
 * killed at any point of a pop, push, unpop or restore leaves a region
 * from which the next instance replays exactly the requests the driver
 * has not seen completed, each once and with its own buffers.
 *
 * Theory of operation
 *
 * This program builds hw/virtio/virtqueue.c and virtqueue-packed.c with
 * CONFIG_VIRTQUEUE_MODEL, so every store the device makes to memory it
 * shares (descriptor ring, device area, inflight region) comes through
 * vq_model_store() below.  A kill -9 stops the back-end between two
 * instructions; the next instance sees memory with every store before
 * that point done and none after (it starts after the process died, when
 * its stores have all drained).  Between two shared-memory stores nothing
 * another process can see changes, so the kill points that matter are
 * "just before store k" for every k: the test records a scripted run (the
 * driver adds buffers of 1, 2 and 3 descriptors and indirect ones, the
 * device pops, unpops, pushes out of order, restarts once; several laps of
 * an 8-slot ring) and takes a snapshot of the rings and the region before
 * each store, with what the driver knows at that moment: the buffers it
 * made available and has not seen used (a used descriptor counts once its
 * flags store is done), and where it reads the next used descriptor.
 *
 * For every snapshot a new instance starts on a copy of it, with the
 * stale base a front-end sends after a crash, and must: start; pop
 * exactly the buffers outstanding, each once, with the iovecs of that
 * buffer (so the descriptors replayed from the region were copied
 * intact); write their used descriptors where the driver reads next (so
 * the restored used index and wrap counter are right); and leave a region
 * in which a third instance finds nothing in flight.
 */
#include "qemu/osdep.h"
#include "hw/virtio/virtqueue.h"

#include "vq-test-mem.h"

#include <sys/mman.h>
#include <linux/virtio_ring.h>

#define QSIZE           8
#define MEM_SIZE        0x40000ull
#define UVA             0x7f0000000000ull
#define GPA_RING        0x0000
#define GPA_DRIVER      0x1000      /* driver event suppression */
#define GPA_DEVICE      0x1100      /* device event suppression */
#define SHARED_BYTES    0x1200      /* what a snapshot keeps of memory */
#define GPA_TABLE       0x2000      /* indirect tables, 0x100 per id */
#define GPA_DATA        0x10000     /* buffers, 0x2000 per id */
#define MAX_SNAP        16384
#define BASE_STALE      0x80008000u /* slot 0 of lap 1, both positions */

#define F_AVAIL         (1 << VRING_PACKED_DESC_F_AVAIL)
#define F_USED          (1 << VRING_PACKED_DESC_F_USED)

/* What the driver knows at a kill point. */
typedef struct DriverView {
    uint32_t outstanding;       /* ids available and not seen used */
    uint16_t used_idx;          /* where it reads the next used descriptor */
    bool used_wrap;
} DriverView;

typedef struct Snapshot {
    uint8_t shared[SHARED_BYTES];
    DriverView view;
    uint8_t region[];
} Snapshot;

static struct {
    GuestMemory mem;
    uint8_t *host;
    struct vring_packed_desc *ring;
    VhostUserQueueRegionPacked *region;
    size_t region_size;
    bool event_idx;

    /* the driver */
    uint16_t avail_idx;
    bool avail_wrap;
    unsigned int free_slots;
    uint32_t added;             /* ids it made available, not reclaimed */
    DriverView view;

    /* the recording */
    bool recording;
    unsigned int nsnap;
    Snapshot **snap;            /* MAX_SNAP of them */
    unsigned int stores;
} t;

/* ---- the model: every device store to shared memory ------------------ */

/* Buffer id @id: the ring slots it takes (a fixed layout per id). */
static unsigned int id_slots(uint16_t id)
{
    static const unsigned int slots[4] = { 1, 2, 3, 1 };

    return slots[id % 4];
}

static void take_snapshot(void)
{
    Snapshot *s = g_malloc(sizeof(*s) + t.region_size);

    g_assert_cmpuint(t.nsnap, <, MAX_SNAP);
    memcpy(s->shared, t.host, SHARED_BYTES);
    memcpy(s->region, t.region, t.region_size);
    s->view = t.view;
    t.snap[t.nsnap++] = s;
}

uint64_t vq_model_load(const void *p, size_t size)
{
    return vq_test_mem_read(p, size);
}

void vq_model_store(void *p, uint64_t v, size_t size)
{
    uintptr_t off = (uintptr_t)p - (uintptr_t)t.ring;

    t.stores++;
    if (t.recording) {
        take_snapshot();        /* killed just before this store */
    }
    vq_test_mem_write(p, v, size);
    /* The flags of a used descriptor: from now on the driver sees it. */
    if (off < QSIZE * sizeof(struct vring_packed_desc) &&
        off % sizeof(struct vring_packed_desc) ==
        offsetof(struct vring_packed_desc, flags) && t.recording) {
        const struct vring_packed_desc *d = &t.ring[off / sizeof(*d)];

        g_assert_cmpuint(size, ==, 2);
        g_assert_cmpuint(off / sizeof(*d), ==, t.view.used_idx);
        g_assert_true(!!(v & F_AVAIL) == t.view.used_wrap &&
                      !!(v & F_USED) == t.view.used_wrap);
        g_assert_true(t.view.outstanding & (1u << d->id));
        t.view.outstanding &= ~(1u << d->id);
        t.view.used_idx += id_slots(d->id);
        if (t.view.used_idx >= QSIZE) {
            t.view.used_idx -= QSIZE;
            t.view.used_wrap = !t.view.used_wrap;
        }
    }
}

void vq_model_mb(void)
{
    atomic_thread_fence(memory_order_seq_cst);
}

/* ---- the driver ------------------------------------------------------ */

/* Descriptor k of buffer @id: gpa, len, device-writable?  @n: how many. */
static void id_desc(uint16_t id, unsigned int k, uint64_t *gpa,
                    uint32_t *len, bool *writable, unsigned int *n)
{
    uint64_t data = GPA_DATA + id * 0x2000ull;

    switch (id % 4) {
    case 0:                     /* one writable buffer */
        *n = 1;
        *gpa = data;
        *len = 512;
        *writable = true;
        return;
    case 1:                     /* header, data */
        *n = 2;
        *gpa = data + k * 0x200;
        *len = k == 0 ? 16 : 1024;
        *writable = k == 1;
        return;
    default:                    /* header, data, status (2: direct) */
        *n = 3;
        *gpa = data + k * 0x1000;
        *len = k == 0 ? 16 : k == 1 ? 4096 : 1;
        *writable = k > 0;
        return;
    }
}

static void drv_add(uint16_t id)
{
    uint16_t head = t.avail_idx, head_flags = 0;
    uint16_t avail = t.avail_wrap ? F_AVAIL : F_USED;
    unsigned int n;
    uint64_t gpa;
    uint32_t len;
    bool wr;

    id_desc(id, 0, &gpa, &len, &wr, &n);
    if (id % 4 == 3) {
        /* one indirect descriptor: a table of the 3-descriptor layout */
        struct vring_packed_desc *table =
            (void *)(t.host + GPA_TABLE + id * 0x100);

        for (unsigned int k = 0; k < 3; k++) {
            id_desc(id - 1, k, &gpa, &len, &wr, &n);
            table[k] = (struct vring_packed_desc) {
                .addr = gpa, .len = len,
                .flags = wr ? VRING_DESC_F_WRITE : 0,
            };
        }
        t.ring[head].addr = GPA_TABLE + id * 0x100;
        t.ring[head].len = 3 * sizeof(*table);
        t.ring[head].id = id;
        head_flags = avail | VRING_DESC_F_INDIRECT;
        n = 1;
    } else {
        for (unsigned int k = 0; k < n; k++) {
            struct vring_packed_desc *d = &t.ring[t.avail_idx];
            uint16_t flags;

            id_desc(id, k, &gpa, &len, &wr, &n);
            flags = (t.avail_wrap ? F_AVAIL : F_USED) |
                    (wr ? VRING_DESC_F_WRITE : 0) |
                    (k + 1 < n ? VRING_DESC_F_NEXT : 0);
            d->addr = gpa;
            d->len = len;
            d->id = id;
            if (k == 0) {
                head_flags = flags;
            } else {
                d->flags = flags;
            }
            if (k + 1 < n && ++t.avail_idx == QSIZE) {
                t.avail_idx = 0;
                t.avail_wrap = !t.avail_wrap;
            }
        }
    }
    if (++t.avail_idx == QSIZE) {
        t.avail_idx = 0;
        t.avail_wrap = !t.avail_wrap;
    }
    __atomic_store_n(&t.ring[head].flags, head_flags, __ATOMIC_RELEASE);
    t.free_slots -= n;
    t.added |= 1u << id;
    t.view.outstanding |= 1u << id;
}

/* The driver takes back what it saw used: its ids and ring slots. */
static void drv_reclaim(void)
{
    for (uint16_t id = 0; id < QSIZE; id++) {
        if ((t.added & ~t.view.outstanding) & (1u << id)) {
            t.added &= ~(1u << id);
            t.free_slots += id_slots(id);
        }
    }
}

/* The element holds buffer @id's iovecs, in order. */
static void check_elem(const VirtQueueElement *e, uint16_t id)
{
    unsigned int n, out = 0, in = 0;
    uint16_t layout = id % 4 == 3 ? id - 1 : id;
    uint64_t gpa;
    uint32_t len;
    bool wr;

    id_desc(layout, 0, &gpa, &len, &wr, &n);
    g_assert_cmpuint(e->head, ==, id);
    for (unsigned int k = 0; k < n; k++) {
        const struct iovec *iov;

        id_desc(layout, k, &gpa, &len, &wr, &n);
        iov = wr ? &e->in_sg[in++] : &e->out_sg[out++];
        g_assert_true(iov->iov_base == t.host + gpa);
        g_assert_cmpuint(iov->iov_len, ==, len);
    }
    g_assert_cmpuint(e->out_num, ==, out);
    g_assert_cmpuint(e->in_num, ==, in);
}

/* ---- the device ------------------------------------------------------ */

static VirtQueue *dev_start(GError **errp)
{
    VhostUserVringAddr addr = {
        .desc_user_addr = UVA + GPA_RING,
        .avail_user_addr = UVA + GPA_DRIVER,
        .used_user_addr = UVA + GPA_DEVICE,
    };
    VirtQueue *vq = virtqueue_new(0);
    GError *err = NULL;

    g_assert_true(virtqueue_set_num(vq, QSIZE, &err));
    g_assert_true(virtqueue_set_addr(vq, &addr, &err));
    virtqueue_set_base(vq, BASE_STALE);
    virtqueue_set_event_idx(vq, t.event_idx);
    virtqueue_set_packed(vq, true);
    virtqueue_set_inflight(vq, t.region);
    virtqueue_set_enabled(vq, true);
    if (!virtqueue_start(vq, &t.mem, errp)) {
        virtqueue_free(vq);
        return NULL;
    }
    return vq;
}

/* A small deterministic generator: the same run every time. */
static uint32_t lcg(uint32_t *state)
{
    *state = *state * 1103515245u + 12345u;
    return *state >> 16;
}

/* The scripted run, recorded.  Returns the number of used descriptors. */
static unsigned int record_run(void)
{
    VirtQueueElement *held[QSIZE];
    unsigned int nheld = 0, completed = 0;
    bool last_was_pop = false;
    uint32_t rng = 1;
    uint16_t next_id = 0;
    GError *err = NULL;
    VirtQueue *vq = dev_start(&err);

    g_assert_no_error(err);
    t.recording = true;
    for (unsigned int step = 0; step < 400; step++) {
        unsigned int r = lcg(&rng) % 16;

        if (step == 200) {
            /* killed with requests in flight: a new instance replays */
            virtqueue_free(vq);
            vq = dev_start(&err);
            g_assert_no_error(err);
            nheld = 0;
            last_was_pop = false;
            continue;
        }
        if (r < 5) {
            /* the driver adds the next free id, if it fits */
            for (unsigned int k = 0; k < QSIZE; k++) {
                uint16_t id = (next_id + k) % QSIZE;

                if (!(t.added & (1u << id)) &&
                    id_slots(id) <= t.free_slots) {
                    drv_add(id);
                    next_id = id + 1;
                    break;
                }
            }
        } else if (r < 9) {
            VirtQueueElement *e = virtqueue_pop(vq);

            last_was_pop = e != NULL;
            if (e) {
                g_assert_cmpuint(nheld, <, QSIZE);
                check_elem(e, e->head);
                held[nheld++] = e;
            }
            continue;
        } else if (r < 10) {
            if (last_was_pop) {
                virtqueue_unpop(vq, held[--nheld]);
            }
        } else if (r < 14) {
            if (nheld > 0) {
                unsigned int k = lcg(&rng) % nheld;
                uint16_t id = held[k]->head;

                virtqueue_push(vq, held[k], 1);
                virtqueue_notify(vq);
                held[k] = held[--nheld];
                g_assert_false(t.view.outstanding & (1u << id));
                completed++;
            }
        } else {
            drv_reclaim();
        }
        last_was_pop = false;
    }
    t.recording = false;
    g_assert_false(virtqueue_is_broken(vq));
    virtqueue_free(vq);
    return completed;
}

/* A new instance on snapshot @s: see the top of the file. */
static void check_snapshot(const Snapshot *s, unsigned int k)
{
    VirtQueueElement *got[QSIZE];
    uint16_t used_idx = s->view.used_idx;
    bool used_wrap = s->view.used_wrap;
    uint32_t popped = 0;
    unsigned int n = 0;
    GError *err = NULL;
    VirtQueue *vq;
    VirtQueueElement *e;

    memcpy(t.host, s->shared, SHARED_BYTES);
    memcpy(t.region, s->region, t.region_size);
    vq = dev_start(&err);
    if (!vq) {
        g_test_message("kill point %u: %s", k, err->message);
    }
    g_assert_no_error(err);
    while ((e = virtqueue_pop(vq))) {
        g_assert_cmpuint(n, <, QSIZE);
        if (!(s->view.outstanding & (1u << e->head)) ||
            (popped & (1u << e->head))) {
            g_test_message("kill point %u: buffer id %u %s", k, e->head,
                           popped & (1u << e->head) ? "popped twice" :
                           "popped though the driver saw it completed");
            g_assert_not_reached();
        }
        check_elem(e, e->head);
        popped |= 1u << e->head;
        got[n++] = e;
    }
    g_assert_false(virtqueue_is_broken(vq));
    if (popped != s->view.outstanding) {
        g_test_message("kill point %u: outstanding 0x%x, popped 0x%x", k,
                       s->view.outstanding, popped);
    }
    g_assert_cmphex(popped, ==, s->view.outstanding);

    /* Complete them all, the driver reads each where it expects it. */
    for (unsigned int i = n; i-- > 0;) {
        virtqueue_push(vq, got[i], 7);
    }
    for (unsigned int i = 0; i < n; i++) {
        const struct vring_packed_desc *d = &t.ring[used_idx];
        uint16_t flags = d->flags;

        g_assert_true(!!(flags & F_AVAIL) == used_wrap &&
                      !!(flags & F_USED) == used_wrap);
        g_assert_true(popped & (1u << d->id));
        g_assert_cmpuint(d->len, ==, 7);
        popped &= ~(1u << d->id);
        used_idx += id_slots(d->id);
        if (used_idx >= QSIZE) {
            used_idx -= QSIZE;
            used_wrap = !used_wrap;
        }
    }
    g_assert_cmphex(popped, ==, 0);
    virtqueue_free(vq);

    /* and a third instance has nothing left to replay */
    vq = dev_start(&err);
    g_assert_no_error(err);
    g_assert_null(virtqueue_pop(vq));
    g_assert_false(virtqueue_is_broken(vq));
    virtqueue_free(vq);
}

static void test_every_kill_point(gconstpointer data)
{
    VhostUserMemoryRegion r = {
        .guest_phys_addr = 0, .memory_size = MEM_SIZE,
        .userspace_addr = UVA,
    };
    GError *err = NULL;
    int fd = memfd_create("test-virtqueue-packed-crash", MFD_CLOEXEC);
    unsigned int completed;

    memset(&t, 0, sizeof(t));
    t.event_idx = GPOINTER_TO_INT(data);
    g_assert_cmpint(ftruncate(fd, MEM_SIZE), ==, 0);
    guest_mem_init(&t.mem);
    g_assert_true(guest_mem_add_region(&t.mem, &r, fd, &err));
    t.host = guest_mem_gpa_to_host(&t.mem, 0, MEM_SIZE);
    t.ring = (void *)(t.host + GPA_RING);
    t.region_size = vhost_user_inflight_queue_size_packed(QSIZE);
    t.region = g_malloc0(t.region_size);
    t.avail_wrap = true;
    t.view.used_wrap = true;
    t.free_slots = QSIZE;
    t.snap = g_new0(Snapshot *, MAX_SNAP);

    completed = record_run();
    /* the run must have done something worth checking */
    g_assert_cmpuint(completed, >, 3 * QSIZE);
    g_assert_cmpuint(t.nsnap, >, 500);
    g_test_message("%u kill points, %u buffers completed", t.nsnap,
                   completed);
    for (unsigned int k = 0; k < t.nsnap; k++) {
        check_snapshot(t.snap[k], k);
        g_free(t.snap[k]);
    }

    g_free(t.snap);
    g_free(t.region);
    guest_mem_clear(&t.mem);
    close(fd);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/virtqueue-packed-crash/every-kill-point",
                         GINT_TO_POINTER(0), test_every_kill_point);
    g_test_add_data_func("/virtqueue-packed-crash/every-kill-point/event-idx",
                         GINT_TO_POINTER(1), test_every_kill_point);
    return g_test_run();
}
