/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Memory-model test of the virtqueue's notification protocol, split and
 * packed rings.
 *
 * This program builds hw/virtio/virtqueue.c and virtqueue-packed.c with
 * CONFIG_VIRTQUEUE_MODEL, so
 * every access the device makes to memory shared with the driver calls
 * vq_model_load() / vq_model_store() / vq_model_mb() below.  They run the
 * access against a simulated x86-TSO store buffer: the device's stores wait
 * in a FIFO (its own loads see them, the driver does not) until a full
 * barrier drains it, or until the schedule lets some of them drain.
 *
 * The driver is the Linux one (virtqueue_add + virtqueue_kick_prepare):
 * it publishes a chain (descriptor, ring entry, avail->idx), does a full
 * barrier, then reads avail_event (event-idx) or used->flags to decide
 * whether to kick.  With packed rings it is Linux's packed driver
 * (virtqueue_add_packed + virtqueue_kick_prepare_packed): it writes the
 * descriptor, stores the head's flags with a write barrier, does a full
 * barrier and reads the device event suppression structure (ENABLE,
 * DISABLE, or DESC with off_wrap under event-idx).  Its two steps are
 * placed before every device access
 * (and after the device went to sleep), with every possible number of the
 * device's buffered stores drained when the driver reads: all the
 * executions TSO allows for this pair of threads.  In each one, either the
 * driver kicks or the device pops the new chain before it sleeps; a
 * schedule where neither happens is a lost wake-up, printed and failed.
 *
 * Device loops modelled: the kick-driven one (pop until empty, sleep:
 * vu_blk_queue_run() without busy polling, as with --poll-max-ns 0 or when
 * adaptive polling shrank the window to nothing), and a busy-poll phase
 * (notifications off, pop, notifications on at io_poll_end, re-check with
 * virtqueue_has_avail(), pop again if needed, sleep).
 */
#include "qemu/osdep.h"
#include "hw/virtio/virtqueue.h"
#include "hw/virtio/virtqueue-model.h"

#include "vq-test-mem.h"

#include <sys/mman.h>
#include <linux/virtio_ring.h>

#define MEM_SIZE        0x10000ull
#define UVA             0x7f0000000000ull
#define GPA_DESC        0x0000
#define GPA_AVAIL       0x1000
#define GPA_USED        0x2000
#define GPA_DATA        0x4000
#define QSIZE           8
#define SB_MAX          64

typedef struct ModelStore {
    void *p;
    size_t size;
    uint64_t v;
} ModelStore;

typedef enum DeviceLoop {
    LOOP_KICK,          /* pop until empty, then wait for a kick */
    LOOP_POLL,          /* busy-poll phase, then io_poll_end and sleep */
} DeviceLoop;

typedef struct Model {
    bool active;
    ModelStore sb[SB_MAX];      /* device store buffer, oldest first */
    unsigned int sb_len;
    unsigned int ops;           /* device accesses so far in this run */

    /* The schedule of this run */
    unsigned int publish_at;    /* driver publishes before access N */
    unsigned int decide_at;     /* driver reads the event before access N */
    unsigned int drain;         /* device stores drained at that point */

    /* What happened */
    bool published;
    bool decided;
    bool kicked;
    unsigned int sb_len_at_decide;

    /* Shared memory */
    uint8_t *mem;
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    bool event_idx;
    bool packed;
    struct vring_packed_desc *pdesc;            /* = desc */
    struct vring_packed_desc_event *device;     /* device area = used */
} Model;

static Model m;

static void sb_drain(unsigned int n)
{
    unsigned int i;

    n = MIN(n, m.sb_len);
    for (i = 0; i < n; i++) {
        vq_test_mem_write(m.sb[i].p, m.sb[i].v, m.sb[i].size);
    }
    memmove(m.sb, m.sb + n, (m.sb_len - n) * sizeof(m.sb[0]));
    m.sb_len -= n;
}

#define PACKED_AVAIL_LAP1 (1 << VRING_PACKED_DESC_F_AVAIL)

/* The driver, step 1: make chain 1 (head 1) available after chain 0. */
static void driver_publish(void)
{
    if (m.packed) {
        /* slot 1, buffer id 1, lap 1; the flags last (virtio_wmb) */
        m.pdesc[1].addr = GPA_DATA + 0x1000;
        m.pdesc[1].len = 512;
        m.pdesc[1].id = 1;
        __atomic_store_n(&m.pdesc[1].flags,
                         PACKED_AVAIL_LAP1 | VRING_DESC_F_WRITE,
                         __ATOMIC_RELEASE);
        m.published = true;
        return;
    }
    m.desc[1].addr = GPA_DATA + 0x1000;
    m.desc[1].len = 512;
    m.desc[1].flags = VRING_DESC_F_WRITE;
    m.desc[1].next = 0;
    m.avail->ring[1] = 1;
    /* the driver's write barrier (virtio_wmb) */
    __atomic_store_n(&m.avail->idx, 2, __ATOMIC_RELEASE);
    m.published = true;
}

/* The driver, step 2, after its full barrier (virtio_mb): kick? */
static void driver_decide(void)
{
    m.sb_len_at_decide = m.sb_len;
    sb_drain(m.drain);
    if (m.packed) {
        /* virtqueue_kick_prepare_packed(): one 32-bit snapshot */
        uint32_t ev = *(uint32_t *)m.device;
        uint16_t off_wrap = ev & 0xffff, flags = ev >> 16;

        if (flags == VRING_PACKED_EVENT_FLAG_DESC && m.event_idx) {
            int event = off_wrap & 0x7fff;

            if (!(off_wrap >> 15)) {
                event -= QSIZE;         /* the driver is in lap 1 */
            }
            m.kicked = vring_need_event((uint16_t)event, 2, 1);
        } else {
            m.kicked = flags != VRING_PACKED_EVENT_FLAG_DISABLE;
        }
    } else if (m.event_idx) {
        uint16_t avail_event = *(uint16_t *)&m.used->ring[QSIZE];

        m.kicked = vring_need_event(avail_event, 2, 1);
    } else {
        m.kicked = !(m.used->flags & VRING_USED_F_NO_NOTIFY);
    }
    m.decided = true;
}

/* A scheduling point: before each device access, and once at the end. */
static void model_step(void)
{
    if (m.ops == m.publish_at) {
        driver_publish();
    }
    if (m.ops == m.decide_at) {
        driver_decide();
    }
    m.ops++;
}

/*
 * Read-once check (the /virtqueue-tso/read-once/ cases, not the model
 * runs): while on, every shared address the device loads is noted, and a
 * second load of one address within the same operation is recorded.
 */
#define FETCH_MAX 4096
static struct {
    bool on;
    unsigned int n;
    const void *p[FETCH_MAX];
    const void *dup;            /* the first address loaded twice */
} fetch;

static void fetch_note(const void *p)
{
    for (unsigned int i = 0; i < fetch.n; i++) {
        if (fetch.p[i] == p) {
            if (!fetch.dup) {
                fetch.dup = p;
            }
            return;
        }
    }
    g_assert_cmpuint(fetch.n, <, FETCH_MAX);
    fetch.p[fetch.n++] = p;
}

uint64_t vq_model_load(const void *p, size_t size)
{
    const uint8_t *b = p;
    int i;

    if (fetch.on) {
        fetch_note(p);
    }

    if (!m.active) {
        return vq_test_mem_read(p, size);
    }
    model_step();
    /* Store forwarding: the device sees its own newest store. */
    for (i = (int)m.sb_len - 1; i >= 0; i--) {
        const uint8_t *s = m.sb[i].p;

        if (s == b && m.sb[i].size == size) {
            return m.sb[i].v;
        }
        /* Partial overlaps do not happen in virtqueue.c. */
        g_assert_true(s + m.sb[i].size <= b || b + size <= s);
    }
    return vq_test_mem_read(p, size);
}

void vq_model_store(void *p, uint64_t v, size_t size)
{
    if (!m.active) {
        vq_test_mem_write(p, v, size);
        return;
    }
    model_step();
    g_assert_cmpuint(m.sb_len, <, SB_MAX);
    m.sb[m.sb_len++] = (ModelStore) { .p = p, .size = size, .v = v };
}

void vq_model_mb(void)
{
    if (!m.active) {
        atomic_thread_fence(memory_order_seq_cst);
        return;
    }
    model_step();
    sb_drain(m.sb_len);
}

static unsigned int device_pop_all(VirtQueue *vq, unsigned int *chain1)
{
    VirtQueueElement *e;
    unsigned int n = 0;

    while ((e = virtqueue_pop(vq))) {
        if (e->head == 1) {
            (*chain1)++;
        }
        n++;
    }
    return n;
}

/*
 * One execution: chain 0 is available when the device starts; the driver
 * adds chain 1 at the scheduled point.  Returns how many times the device
 * popped chain 1 before going to sleep.
 */
static unsigned int model_run(GuestMemory *gm, DeviceLoop loop)
{
    VhostUserVringAddr addr = {
        .desc_user_addr = UVA + GPA_DESC,
        .avail_user_addr = UVA + GPA_AVAIL,
        .used_user_addr = UVA + GPA_USED,
    };
    GError *err = NULL;
    VirtQueue *vq = virtqueue_new(0);
    unsigned int chain1 = 0;

    memset(m.mem, 0, GPA_DATA);
    m.sb_len = 0;
    m.ops = 0;
    m.published = m.decided = m.kicked = false;
    m.sb_len_at_decide = 0;

    if (m.packed) {
        m.pdesc[0].addr = GPA_DATA;
        m.pdesc[0].len = 512;
        m.pdesc[0].id = 0;
        m.pdesc[0].flags = PACKED_AVAIL_LAP1 | VRING_DESC_F_WRITE;
    } else {
        m.desc[0].addr = GPA_DATA;
        m.desc[0].len = 512;
        m.desc[0].flags = VRING_DESC_F_WRITE;
        m.avail->ring[0] = 0;
        m.avail->idx = 1;
    }

    g_assert_true(virtqueue_set_num(vq, QSIZE, &err));
    g_assert_true(virtqueue_set_addr(vq, &addr, &err));
    virtqueue_set_packed(vq, m.packed);
    /* packed: slot 0 of lap 1 for both positions */
    virtqueue_set_base(vq, m.packed ? 0x80008000u : 0);
    virtqueue_set_event_idx(vq, m.event_idx);
    virtqueue_set_enabled(vq, true);
    g_assert_true(virtqueue_start(vq, gm, &err));
    g_assert_no_error(err);

    m.active = true;
    if (loop == LOOP_KICK) {
        device_pop_all(vq, &chain1);
    } else {
        virtqueue_set_notification(vq, false);      /* io_poll_begin */
        device_pop_all(vq, &chain1);
        virtqueue_set_notification(vq, true);       /* io_poll_end */
        if (virtqueue_has_avail(vq)) {              /* the last look */
            device_pop_all(vq, &chain1);
        }
    }
    model_step();                   /* the device sleeps */
    m.active = false;

    g_assert_false(virtqueue_is_broken(vq));
    virtqueue_free(vq);
    return chain1;
}

typedef struct ModelCase {
    bool event_idx;
    DeviceLoop loop;
    bool packed;
} ModelCase;

static void test_wakeup(gconstpointer data)
{
    const ModelCase *c = data;
    GuestMemory gm;
    VhostUserMemoryRegion r = {
        .guest_phys_addr = 0,
        .memory_size = MEM_SIZE,
        .userspace_addr = UVA,
    };
    GError *err = NULL;
    int fd = memfd_create("test-virtqueue-tso", MFD_CLOEXEC);
    unsigned int runs = 0, lost = 0;

    g_assert_cmpint(ftruncate(fd, MEM_SIZE), ==, 0);
    guest_mem_init(&gm);
    g_assert_true(guest_mem_add_region(&gm, &r, fd, &err));
    memset(&m, 0, sizeof(m));
    m.mem = guest_mem_gpa_to_host(&gm, 0, MEM_SIZE);
    m.desc = (void *)(m.mem + GPA_DESC);
    m.avail = (void *)(m.mem + GPA_AVAIL);
    m.used = (void *)(m.mem + GPA_USED);
    m.pdesc = (void *)(m.mem + GPA_DESC);
    m.device = (void *)(m.mem + GPA_USED);
    m.event_idx = c->event_idx;
    m.packed = c->packed;

    for (m.publish_at = 0; ; m.publish_at++) {
        for (m.decide_at = m.publish_at; ; m.decide_at++) {
            for (m.drain = 0; ; m.drain++) {
                unsigned int chain1 = model_run(&gm, c->loop);

                if (!m.decided) {
                    break;      /* the device was done before that point */
                }
                runs++;
                g_assert_cmpuint(chain1, <=, 1);
                if (!m.kicked && chain1 == 0) {
                    if (lost++ == 0) {
                        g_test_message("lost wake-up: the driver published "
                                       "before device access %u, read the "
                                       "event before access %u of %u with "
                                       "%u of %u buffered device stores "
                                       "drained, and did not kick; the "
                                       "device slept without popping it",
                                       m.publish_at, m.decide_at, m.ops - 1,
                                       MIN(m.drain, m.sb_len_at_decide),
                                       m.sb_len_at_decide);
                    }
                }
                if (m.drain >= m.sb_len_at_decide) {
                    break;
                }
            }
            if (!m.decided) {
                break;
            }
        }
        if (m.decide_at == m.publish_at) {
            break;              /* not even the publish point was reached */
        }
    }
    g_test_message("%u executions, %u lost wake-ups", runs, lost);
    g_assert_cmpuint(runs, >, 10);
    g_assert_cmpuint(lost, ==, 0);

    guest_mem_clear(&gm);
    close(fd);
}

/* ---- read once --------------------------------------------------------- */

static void fetch_begin(void)
{
    fetch.on = true;
    fetch.n = 0;
    fetch.dup = NULL;
}

/* End of one operation: no shared address was loaded twice in it. */
static void fetch_end(const char *what, const void *region, const uint8_t *mem)
{
    fetch.on = false;
    if (fetch.dup) {
        const uint8_t *d = fetch.dup, *r = region;

        g_test_message("%s loaded %s offset 0x%tx twice", what,
                       d >= mem && d < mem + MEM_SIZE ? "guest memory" :
                       "inflight region", d >= mem && d < mem + MEM_SIZE ?
                       d - mem : d - r);
    }
    g_assert_null(fetch.dup);
}

/*
 * Every operation on shared memory loads each field once: a pop (ring
 * index, ring entry, each descriptor; packed: the head's flags, each
 * descriptor), a start that restores the inflight region the previous
 * instance left (every header field and entry), and the pops that replay
 * it.  A second load of a field the code already checked is how a
 * front-end racing with us gets an unchecked value used; this catches one
 * structurally, whatever the timing.
 */
static void test_read_once(gconstpointer data)
{
    bool packed = GPOINTER_TO_INT(data);
    VhostUserVringAddr addr = {
        .desc_user_addr = UVA + GPA_DESC,
        .avail_user_addr = UVA + GPA_AVAIL,
        .used_user_addr = UVA + GPA_USED,
    };
    VhostUserMemoryRegion r = {
        .guest_phys_addr = 0, .memory_size = MEM_SIZE, .userspace_addr = UVA,
    };
    size_t rsize = packed ? vhost_user_inflight_queue_size_packed(QSIZE)
                          : vhost_user_inflight_queue_size(QSIZE);
    g_autofree void *region = g_malloc0(rsize);
    VirtQueueElement *e[4];
    GError *err = NULL;
    GuestMemory gm;
    uint8_t *mem;
    int fd = memfd_create("test-virtqueue-tso", MFD_CLOEXEC);

    g_assert_cmpint(ftruncate(fd, MEM_SIZE), ==, 0);
    guest_mem_init(&gm);
    g_assert_true(guest_mem_add_region(&gm, &r, fd, &err));
    mem = guest_mem_gpa_to_host(&gm, 0, MEM_SIZE);
    memset(&m, 0, sizeof(m));       /* the model stays inactive */

    /* buffer 0: two descriptors (header, data); buffers 1-3: one each */
    if (packed) {
        struct vring_packed_desc *d = (void *)(mem + GPA_DESC);

        for (unsigned int s = 0; s < 5; s++) {
            d[s].addr = GPA_DATA + s * 0x200;
            d[s].len = 512;
            d[s].id = s == 0 ? 0 : s - 1;
            d[s].flags = PACKED_AVAIL_LAP1 |
                         (s == 0 ? VRING_DESC_F_NEXT : VRING_DESC_F_WRITE);
        }
    } else {
        struct vring_desc *d = (void *)(mem + GPA_DESC);
        struct vring_avail *avail = (void *)(mem + GPA_AVAIL);

        for (unsigned int h = 0; h < 5; h++) {
            d[h].addr = GPA_DATA + h * 0x200;
            d[h].len = 512;
            d[h].flags = h == 0 ? VRING_DESC_F_NEXT : VRING_DESC_F_WRITE;
            d[h].next = 4;
        }
        for (unsigned int h = 0; h < 4; h++) {
            avail->ring[h] = h;
        }
        avail->idx = 4;
    }

    for (int round = 0; round < 2; round++) {
        VirtQueue *vq = virtqueue_new(0);
        unsigned int n = 0;

        g_assert_true(virtqueue_set_num(vq, QSIZE, &err));
        g_assert_true(virtqueue_set_addr(vq, &addr, &err));
        virtqueue_set_packed(vq, packed);
        /* round 1: the stale base QEMU sends after a crash */
        virtqueue_set_base(vq, packed ? 0x80008000u : (uint32_t)round);
        virtqueue_set_inflight(vq, region);
        virtqueue_set_enabled(vq, true);
        fetch_begin();
        g_assert_true(virtqueue_start(vq, &gm, &err));
        fetch_end(round ? "the restore" : "the start", region, mem);
        g_assert_no_error(err);
        for (;;) {
            VirtQueueElement *x;

            fetch_begin();
            x = virtqueue_pop(vq);
            fetch_end(round ? "a replaying pop" : "a pop", region, mem);
            if (!x) {
                break;
            }
            g_assert_cmpuint(n, <, 4);
            e[n++] = x;
        }
        g_assert_false(virtqueue_is_broken(vq));
        /* round 0: 4 popped, the first completes, then a crash; round 1:
         * the other 3 are replayed */
        g_assert_cmpuint(n, ==, round ? 3 : 4);
        if (!round) {
            fetch_begin();
            virtqueue_push(vq, e[0], 512);
            fetch_end("a push", region, mem);
        } else {
            while (n > 0) {
                virtqueue_push(vq, e[--n], 512);
            }
        }
        virtqueue_free(vq);
    }
    guest_mem_clear(&gm);
    close(fd);
}

static const ModelCase case_kick_event_idx = { true, LOOP_KICK };
static const ModelCase case_kick_flags = { false, LOOP_KICK };
static const ModelCase case_poll_event_idx = { true, LOOP_POLL };
static const ModelCase case_poll_flags = { false, LOOP_POLL };
static const ModelCase case_packed_kick_event_idx = { true, LOOP_KICK, true };
static const ModelCase case_packed_kick_flags = { false, LOOP_KICK, true };
static const ModelCase case_packed_poll_event_idx = { true, LOOP_POLL, true };
static const ModelCase case_packed_poll_flags = { false, LOOP_POLL, true };

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/virtqueue-tso/wakeup/kick/event-idx",
                         &case_kick_event_idx, test_wakeup);
    g_test_add_data_func("/virtqueue-tso/wakeup/kick/no-notify-flag",
                         &case_kick_flags, test_wakeup);
    g_test_add_data_func("/virtqueue-tso/wakeup/poll/event-idx",
                         &case_poll_event_idx, test_wakeup);
    g_test_add_data_func("/virtqueue-tso/wakeup/poll/no-notify-flag",
                         &case_poll_flags, test_wakeup);
    g_test_add_data_func("/virtqueue-tso/packed/wakeup/kick/event-idx",
                         &case_packed_kick_event_idx, test_wakeup);
    g_test_add_data_func("/virtqueue-tso/packed/wakeup/kick/enable-flag",
                         &case_packed_kick_flags, test_wakeup);
    g_test_add_data_func("/virtqueue-tso/packed/wakeup/poll/event-idx",
                         &case_packed_poll_event_idx, test_wakeup);
    g_test_add_data_func("/virtqueue-tso/packed/wakeup/poll/enable-flag",
                         &case_packed_poll_flags, test_wakeup);
    g_test_add_data_func("/virtqueue-tso/read-once/split",
                         GINT_TO_POINTER(false), test_read_once);
    g_test_add_data_func("/virtqueue-tso/read-once/packed",
                         GINT_TO_POINTER(true), test_read_once);
    return g_test_run();
}
