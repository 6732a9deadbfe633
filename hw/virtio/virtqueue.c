/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Virtqueue, device side: the split ring (VIRTIO 1.2 section 2.7), with
 * event-idx, indirect descriptors and vhost-user inflight tracking, and
 * what both ring formats share (setup, element pool, descriptor mapping,
 * indirect table checks, notify, start/stop).  The packed ring's own part
 * is virtqueue-packed.c; virtqueue-int.h is what the two share.
 *
 * Theory of operation
 *
 * The driver (guest) owns the descriptor table and the available ring; the
 * device (this code) owns the used ring.  Everything the driver wrote is
 * untrusted and may change under our feet, so each descriptor is copied
 * with single loads into a local before it is checked and used, and the
 * avail index is read once per refill.  Any inconsistency marks the queue
 * broken; nothing here aborts on guest data.
 *
 * Elements come from a pool indexed by descriptor head: a head is "in
 * flight" from pop until push (or unpop).  The driver may not reuse a head
 * before the device returned it, so a head that is popped twice is a
 * driver bug and breaks the queue.  An element's iovecs start in the
 * element (VIRTQUEUE_INLINE_SG of them); a chain that needs more moves to
 * the head's slot of VIRTQUEUE_MAX_SG iovecs in an anonymous mapping made
 * at start, so the memory of those long slots stays untouched (not
 * resident) until some chain needs it.
 *
 * Address translation remembers the region of the last descriptor: a
 * buffer inside it (the usual case: one or two large RAM regions) becomes
 * an iovec without a lookup.  The region table only changes while the
 * queue is stopped, and start resets the cache.
 *
 * Inflight region (vhost-user INFLIGHT_SHMFD): a shared memory area that
 * survives a crash of this process.  Pop marks desc[head].inflight = 1 with
 * an increasing counter; push records last_batch_head, writes the used
 * ring, clears the inflight flag and finally copies the used index into
 * region->used_idx.  On the next start, a region whose used_idx differs
 * from the ring's tells us the crash hit between those steps, and the
 * heads still marked are replayed in counter order before any new chain.
 *
 * Memory ordering (C11 atomics; the driver uses the Linux virtio barriers):
 *  - avail->idx is loaded with acquire: pairs with the driver's write
 *    barrier between filling avail->ring[] / descriptors and bumping idx.
 *  - used->idx is stored with release: pairs with the driver's read barrier
 *    after it loads used->idx and before it reads used->ring[].
 *  - a full fence between publishing used->idx and reading used_event /
 *    avail->flags: pairs with the driver's full barrier between writing
 *    used_event (or clearing its no-interrupt flag) and re-reading used->idx.
 *  - a full fence after enabling notifications (avail_event or used->flags)
 *    and before re-checking avail->idx: pairs with the driver's full
 *    barrier between bumping avail->idx and reading avail_event / flags.
 *    Two places need it: virtqueue_set_notification(on) at the end of a
 *    busy-poll phase, and virtqueue_pop() when it finds the ring empty with
 *    event-idx (virtqueue_empty_recheck(): publish avail_event, fence, read
 *    avail->idx again), because a loop that does not poll sleeps right
 *    after that pop.  tests/unit/test-virtqueue-tso.c checks both under
 *    every store-buffer reordering x86 allows.
 *
 * Dirty logging (live migration, VHOST_F_LOG_ALL): when the queue starts
 * with logging on (virtqueue_set_log()), every store to guest memory is
 * followed by a bit set in the VMM's dirty log: push marks the pages of
 * the element's device-writable buffers (read data, status byte; the
 * device wrote them before it pushed) through guest_mem_log_iov(), and
 * every used ring store (element, index, flags, avail_event) is marked
 * at log_guest_addr + its offset in the ring when SET_VRING_ADDR set
 * VHOST_VRING_F_LOG.  Logging is switched only while the queue is stopped
 * (the server stops, drains and restarts it), so the hot path reads one
 * per-queue bool and pays one predictable branch when it is off.
 */
#include "qemu/osdep.h"
#include "virtqueue-int.h"
#include "qemu/error-report.h"

#include <sys/mman.h>

/* An empty region: the translation cache's value when there is none. */
const GuestMemRegion virtqueue_no_region;

/* Called from: the main thread. */
VirtQueue *virtqueue_new(unsigned int index)
{
    VirtQueue *vq = g_new0(VirtQueue, 1);

    vq->index = index;
    vq->kick.fd = -1;
    vq->call.fd = -1;
    vq->notification = true;
    vq->last_reg = &virtqueue_no_region;
    return vq;
}

static void virtqueue_free_pool(VirtQueue *vq)
{
    if (vq->long_sg) {
        munmap(vq->long_sg, vq->long_sg_bytes);
    }
    vq->long_sg = NULL;
    vq->long_sg_bytes = 0;
    g_free(vq->elems);
    g_free(vq->elem_state);
    g_free(vq->resubmit);
    g_free(vq->pbuf);
    g_free(vq->pnext);
    vq->pbuf = NULL;
    vq->pnext = NULL;
    vq->elems = NULL;
    vq->elem_state = NULL;
    vq->resubmit = NULL;
    vq->pool_num = 0;
    vq->resubmit_num = vq->resubmit_pos = 0;
}

/* Called from: the main thread, queue stopped. */
void virtqueue_free(VirtQueue *vq)
{
    if (!vq) {
        return;
    }
    if (vq->kick.fd >= 0) {
        event_notifier_cleanup(&vq->kick);
    }
    if (vq->call.fd >= 0) {
        event_notifier_cleanup(&vq->call);
    }
    virtqueue_free_pool(vq);
    g_free(vq);
}

/* Called from: any thread. */
unsigned int virtqueue_get_index(VirtQueue *vq)
{
    return vq->index;
}

/* Called from: the main thread, queue stopped. */
bool virtqueue_set_num(VirtQueue *vq, unsigned int num, GError **errp)
{
    if (num == 0 || num > VIRTQUEUE_MAX_SIZE || (num & (num - 1)) != 0) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: invalid size %u (must be a power of 2 "
                    "between 1 and %u)", vq->index, num, VIRTQUEUE_MAX_SIZE);
        return false;
    }
    vq->num = num;
    return true;
}

/* Called from: the main thread, queue stopped. */
bool virtqueue_set_addr(VirtQueue *vq, const VhostUserVringAddr *addr,
                        GError **errp)
{
    /* VIRTIO 1.2 2.7: alignment 16 / 2 / 4 for desc / avail / used */
    if (addr->desc_user_addr % 16 || addr->avail_user_addr % 2 ||
        addr->used_user_addr % 4) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: misaligned ring addresses (desc 0x%" PRIx64
                    ", avail 0x%" PRIx64 ", used 0x%" PRIx64 ")", vq->index,
                    addr->desc_user_addr, addr->avail_user_addr,
                    addr->used_user_addr);
        return false;
    }
    vq->addr = *addr;
    vq->addr_set = true;
    return true;
}

/* Called from: the main thread, queue stopped. */
void virtqueue_set_base(VirtQueue *vq, uint32_t base)
{
    /* Split: the next avail index.  Packed: decoded at start, once the
     * queue size is known (see virtqueue_packed_start()). */
    vq->base = base;
    vq->base_set = true;
    vq->last_avail_idx = (uint16_t)base;
    vq->shadow_avail_idx = (uint16_t)base;
}

/* Called from: the main thread, queue stopped (or the owner thread). */
uint32_t virtqueue_get_base(VirtQueue *vq)
{
    if (vq->packed) {
        /* A base set since the last start is only decoded by the next
         * start: until then it is the answer, whole (its low half is in
         * last_avail_idx, but the used half is not in used_idx yet). */
        return vq->base_set ? vq->base : virtqueue_packed_get_base(vq);
    }
    return vq->last_avail_idx;
}

/* Called from: the main thread, queue stopped.  @fd is non-blocking
 * (event_notifier_prepare_fd()). */
void virtqueue_set_kick_fd(VirtQueue *vq, int fd)
{
    if (vq->kick.fd >= 0) {
        event_notifier_cleanup(&vq->kick);
    }
    vq->kick.fd = -1;
    if (fd >= 0) {
        event_notifier_init_fd(&vq->kick, fd);
    }
}

/* Called from: the main thread, queue stopped, or the owner thread (a
 * running queue: this must stay seccomp-safe, close() only).  @fd is
 * non-blocking (event_notifier_prepare_fd() in the main thread). */
void virtqueue_set_call_fd(VirtQueue *vq, int fd)
{
    if (vq->call.fd >= 0) {
        event_notifier_cleanup(&vq->call);
    }
    vq->call.fd = -1;
    if (fd >= 0) {
        event_notifier_init_fd(&vq->call, fd);
    }
}

/*
 * Write the call eventfd whatever the driver's suppression says: one
 * spurious interrupt, which a driver must tolerate.  Sent when a queue
 * starts and when its call fd is replaced, as libvhost-user does, so that
 * a completion signalled on a previous fd (before a reconnect, or while
 * the VMM swapped fds) is not lost and a front-end that waits for this
 * first interrupt does not hang.
 * Called from: the main thread with the queue stopped or started, or the
 * owner thread; not while another thread replaces the call fd.
 */
void virtqueue_signal_call(VirtQueue *vq)
{
    if (vq->call.fd >= 0) {
        event_notifier_set(&vq->call);
    }
}

/* Called from: any thread. */
int virtqueue_get_kick_fd(VirtQueue *vq)
{
    return vq->kick.fd;
}

/* Called from: the main thread, queue stopped. */
void virtqueue_set_event_idx(VirtQueue *vq, bool on)
{
    vq->event_idx = on;
}

/* Called from: the main thread, queue stopped. */
void virtqueue_set_packed(VirtQueue *vq, bool on)
{
    vq->packed = on;
}

/* Called from: any thread. */
bool virtqueue_is_packed(VirtQueue *vq)
{
    return vq->packed;
}

/* Called from: the main thread. */
void virtqueue_set_enabled(VirtQueue *vq, bool on)
{
    vq->enabled = on;
}

/* Called from: any thread. */
bool virtqueue_is_enabled(VirtQueue *vq)
{
    return vq->enabled;
}

/* Called from: the main thread, queue stopped. */
void virtqueue_set_inflight(VirtQueue *vq, void *region)
{
    vq->inflight_region = region;
}

/* Called from: the main thread, queue stopped. */
void virtqueue_set_log(VirtQueue *vq, bool on)
{
    vq->log_on = on;
}

/* Called from: the main thread. */
bool virtqueue_is_ready(VirtQueue *vq)
{
    return vq->num != 0 && vq->addr_set && vq->kick.fd >= 0;
}

#define VQ_MEM_SHRUNK_MSG \
    "the front-end shrank the file behind guest memory after sharing it " \
    "(an access hit a page past its end; the session is closed); a VMM " \
    "must not resize shared guest memory (QEMU: memory-backend-memfd " \
    "seals it)"

/* Called from: the owner thread (or setup). */
void virtqueue_set_broken(VirtQueue *vq, const char *fmt, ...)
{
    va_list ap;
    g_autofree char *msg = NULL;

    if (vq->broken) {
        return;
    }
    vq->broken = true;
    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    if (vq->mem && guest_mem_faulted(vq->mem)) {
        /* What looked inconsistent was a page the front-end took away
         * (it now reads as zeros): say the cause, not the symptom. */
        error_report("virtqueue %u: broken: %s (seen as: %s)", vq->index,
                     VQ_MEM_SHRUNK_MSG, msg);
        return;
    }
    error_report("virtqueue %u: broken: %s", vq->index, msg);
}

/* Called from: any thread. */
bool virtqueue_is_broken(VirtQueue *vq)
{
    return vq->broken;
}

bool virtqueue_check_memory(VirtQueue *vq)
{
    if (likely(!vq->mem || !guest_mem_faulted(vq->mem))) {
        return !vq->broken;
    }
    if (!vq->broken) {
        vq->broken = true;
        error_report("virtqueue %u: broken: %s", vq->index, VQ_MEM_SHRUNK_MSG);
    }
    return false;
}

/* Called from: the owner thread. */
void virtqueue_get_stats(VirtQueue *vq, VirtQueueStats *stats)
{
    *stats = vq->stats;
}

/* Called from: the owner thread. */
unsigned int virtqueue_inflight_count(VirtQueue *vq)
{
    return vq->inflight_count;
}

/* Called from: any thread. */
bool virtqueue_is_started(VirtQueue *vq)
{
    return vq->started;
}

/*
 * Dirty logging of a used ring store of @len bytes at @p (a pointer into
 * vq->used), after the store.  Logging on only (callers test vq->log).
 */
static void __attribute__((noinline, cold))
virtqueue_log_used(VirtQueue *vq, const void *p, size_t len)
{
    if (vq->log_used) {
        guest_mem_log_gpa(vq->mem, vq->addr.log_guest_addr +
                          ((const uint8_t *)p - (const uint8_t *)vq->used),
                          len);
    }
}

/*
 * Dirty logging of a push (logging on only): the element's device-writable
 * buffers, which the device filled before it pushed, and the used ring
 * element and index just stored.  Out of line and cold, so that with
 * logging off virtqueue_push() keeps its short prologue.
 */
static void __attribute__((noinline, cold))
virtqueue_log_push(VirtQueue *vq, const VirtQueueElement *elem,
                   const struct vring_used_elem *ue)
{
    guest_mem_log_iov(vq->mem, elem->in_sg, elem->in_num);
    virtqueue_log_used(vq, ue, sizeof(*ue));
    virtqueue_log_used(vq, &vq->used->idx, sizeof(vq->used->idx));
}

static uint16_t *virtqueue_used_event(VirtQueue *vq)
{
    /* used_event follows avail->ring[num] */
    return &vq->avail->ring[vq->num];
}

static uint16_t *virtqueue_avail_event(VirtQueue *vq)
{
    /* avail_event follows used->ring[num] */
    return (uint16_t *)&vq->used->ring[vq->num];
}

/*
 * Copy descriptor @i of @table with single loads: the guest may rewrite it
 * concurrently, and every later check must see the same values as the
 * use (no TOCTOU).
 */
static inline __attribute__((always_inline)) uint16_t
virtqueue_read_desc(const struct vring_desc *table, unsigned int i,
                    VirtQueueDesc *d)
{
    d->addr = VQ_LOAD(&table[i].addr);
    d->len = VQ_LOAD(&table[i].len);
    d->flags = VQ_LOAD(&table[i].flags);
    return VQ_LOAD(&table[i].next);
}

/* Translation that missed the cache: look up (and remember) the region. */
int virtqueue_map_buf_slow(VirtQueue *vq, uint64_t gpa, uint32_t len,
                                  struct iovec *iov, unsigned int room)
{
    int n = guest_mem_gpa_to_iovec(vq->mem, gpa, len, iov, room);

    if (n > 0) {
        const GuestMemRegion *reg = guest_mem_gpa_region(vq->mem, gpa);

        vq->last_reg = reg ? reg : &virtqueue_no_region;
    }
    return n;
}

/* Move the first @nsg iovecs of @elem to its long slot. */
static struct iovec *virtqueue_elem_spill(VirtQueue *vq,
                                          VirtQueueElement *elem,
                                          unsigned int nsg)
{
    struct iovec *sg = vq->long_sg +
                       (size_t)virtqueue_elem_long_slot(vq, elem) *
                       VIRTQUEUE_MAX_SG;

    memcpy(sg, elem->inline_sg, nsg * sizeof(sg[0]));
    return sg;
}

/* Where a chain walk is: the table it reads and how far into it. */
typedef struct VirtQueueWalk {
    const struct vring_desc *table;     /* the ring's, or an indirect one */
    unsigned int max;                   /* entries in @table */
    unsigned int count;                 /* descriptors read from @table */
    unsigned int ndesc_direct;          /* data descriptors before it */
    bool in_indirect;
} VirtQueueWalk;


/*
 * Indirect descriptor @d (either ring format): check its table and return
 * it with its entry count, or NULL (queue broken).  Both formats use
 * 16-byte descriptors.
 */
const void *virtqueue_indirect_table(VirtQueue *vq, uint16_t head,
                                     const VirtQueueDesc *d,
                                     unsigned int *ntable)
{
    uint64_t n = d->len / sizeof(struct vring_desc);
    const void *table;

    if (d->len == 0 || d->len % sizeof(struct vring_desc) != 0 ||
        n > VIRTQUEUE_MAX_SIZE) {
        virtqueue_set_broken(vq, "invalid indirect table size %u in chain "
                             "of head %u", d->len, head);
        return NULL;
    }
    /* Descriptors are read with single aligned loads; a table that is not
     * 8-byte aligned cannot be (drivers allocate them aligned). */
    if (d->addr % 8 != 0) {
        virtqueue_set_broken(vq, "indirect table at 0x%" PRIx64 " is not "
                             "8-byte aligned (chain of head %u)",
                             (uint64_t)d->addr, head);
        return NULL;
    }
    /* The table must be contiguous in our address space. */
    table = guest_mem_gpa_to_host(vq->mem, d->addr, d->len);
    if (!table) {
        virtqueue_set_broken(vq, "indirect table 0x%" PRIx64 "+0x%x outside "
                             "guest memory (or across regions)",
                             (uint64_t)d->addr, d->len);
        return NULL;
    }
    *ntable = n;
    return table;
}

/*
 * Split ring: descriptor @d, entry @i of the current table, has
 * VRING_DESC_F_INDIRECT: check it and point @w at the start of its table.
 * At most once per chain.  Returns false (queue broken) on a bad
 * descriptor.
 */
static bool virtqueue_walk_indirect(VirtQueue *vq, uint16_t head,
                                    unsigned int i, const VirtQueueDesc *d,
                                    VirtQueueWalk *w)
{
    unsigned int ntable;
    const struct vring_desc *table;

    if (w->in_indirect) {
        virtqueue_set_broken(vq, "nested indirect descriptor in chain of "
                             "head %u", head);
        return false;
    }
    if (d->flags & VRING_DESC_F_NEXT) {
        virtqueue_set_broken(vq, "descriptor %u has both INDIRECT and NEXT "
                             "set", i);
        return false;
    }
    table = virtqueue_indirect_table(vq, head, d, &ntable);
    if (!table) {
        return false;
    }
    /* Every descriptor before this one was a data descriptor. */
    w->ndesc_direct = w->count - 1;
    w->in_indirect = true;
    w->table = table;
    w->max = ntable;
    w->count = 0;
    return true;
}

/*
 * virtqueue_map_buf() found no room or no region for descriptor @d: move
 * to the long slot and retry, or say why the queue is broken.  Returns
 * the iovecs used, or a negative errno (queue broken).
 */
int virtqueue_map_desc_slow(VirtQueue *vq, VirtQueueElement *elem,
                            uint16_t head, const VirtQueueDesc *d,
                            VirtQueueSgList *s, int err)
{
    if (err == -ENOBUFS && s->sg == elem->inline_sg) {
        s->sg = virtqueue_elem_spill(vq, elem, s->nsg);
        s->cap = VIRTQUEUE_MAX_SG;
        err = virtqueue_map_buf(vq, d->addr, d->len, s->sg + s->nsg,
                                s->cap - s->nsg);
        if (err >= 0) {
            return err;
        }
    }
    if (err == -ENOBUFS) {
        virtqueue_set_broken(vq, "chain of head %u needs more than %u "
                             "iovecs", head, VIRTQUEUE_MAX_SG);
    } else {
        virtqueue_set_broken(vq, "descriptor 0x%" PRIx64 "+0x%x in chain of "
                             "head %u is outside guest memory",
                             (uint64_t)d->addr, d->len, head);
    }
    return err;
}

/*
 * Walk the chain starting at @head into @elem.  Returns false (queue
 * broken) on any inconsistency.  Hot path: no allocation, no syscall;
 * inlined into virtqueue_pop(), whose frame it then shares (the call
 * and its register saves were a visible share of the walk's instructions:
 * docs/bench/archive/2026-12-01-details.md, "Instructions per I/O, per
 * change").
 */
static inline __attribute__((always_inline)) bool
virtqueue_map_chain(VirtQueue *vq, uint16_t head, VirtQueueElement *elem)
{
    VirtQueueWalk w = { .table = vq->desc, .max = vq->num };
    VirtQueueSgList s = { .sg = elem->inline_sg, .cap = VIRTQUEUE_INLINE_SG };
    unsigned int i = head;
    VirtQueueDesc d;
    uint16_t next;

    for (;;) {
        if (unlikely(++w.count > w.max)) {
            virtqueue_set_broken(vq, "descriptor chain of head %u is longer "
                                 "than %u (loop?)", head, w.max);
            return false;
        }
        next = virtqueue_read_desc(w.table, i, &d);

        if (unlikely(d.flags & VRING_DESC_F_INDIRECT)) {
            if (!virtqueue_walk_indirect(vq, head, i, &d, &w)) {
                return false;
            }
            i = 0;
            continue;
        }
        /*
         * VIRTIO 1.2 2.7.5.2: a chain, indirect entries included, is never
         * longer than the queue.  The config space's seg_max is derived
         * from the queue size so a conforming driver never gets here.  A
         * direct chain is already bounded by the loop check above.
         */
        if (unlikely(w.in_indirect) && w.ndesc_direct + w.count > vq->num) {
            virtqueue_set_broken(vq, "descriptor chain of head %u has more "
                                 "than %u descriptors (the queue size)",
                                 head, vq->num);
            return false;
        }
        if (unlikely(!virtqueue_map_desc(vq, elem, head, &d, &s))) {
            return false;
        }
        if (!(d.flags & VRING_DESC_F_NEXT)) {
            break;
        }
        i = next;
        if (unlikely(i >= w.max)) {
            virtqueue_set_broken(vq, "next index %u out of range (%u) in "
                                 "chain of head %u", i, w.max, head);
            return false;
        }
    }

    virtqueue_elem_finish(elem, head, &s);
    return true;
}

static void virtqueue_inflight_mark(VirtQueue *vq, uint16_t head)
{
    VhostUserQueueRegionSplit *r = vq->inflight;

    if (!r) {
        return;
    }
    /* Plain stores in program order are enough: the region is read back
     * only by a later instance of this process after a crash. */
    VQ_STORE(&r->desc[head].counter, ++vq->inflight_counter);
    atomic_signal_fence(memory_order_release);
    VQ_STORE(&r->desc[head].inflight, 1);
}

static VirtQueueElement *virtqueue_pop_resubmit(VirtQueue *vq)
{
    uint16_t head = vq->resubmit[vq->resubmit_pos];
    VirtQueueElement *elem = &vq->elems[head];

    if (!virtqueue_map_chain(vq, head, elem)) {
        return NULL;
    }
    vq->resubmit_pos++;
    vq->elem_state[head] = VQ_ELEM_POPPED_RESUBMIT;
    vq->inflight_count++;
    vq->stats.popped++;
    vq->stats.resubmitted++;
    return elem;
}

/*
 * Read avail->idx into shadow_avail_idx.  Returns true if it holds chains
 * not yet popped; false if not, or if the index is bad (queue broken).
 */
static bool virtqueue_read_avail_idx(VirtQueue *vq)
{
    /* Acquire: pairs with the driver's write barrier between filling the
     * ring entry (and descriptors) and publishing avail->idx. */
    uint16_t avail_idx = VQ_LOAD_ACQUIRE(&vq->avail->idx);

    if (unlikely((uint16_t)(avail_idx - vq->last_avail_idx) > vq->num)) {
        virtqueue_set_broken(vq, "avail index jumped from %u to %u, queue "
                             "size %u", vq->last_avail_idx, avail_idx,
                             vq->num);
        return false;
    }
    vq->shadow_avail_idx = avail_idx;
    return avail_idx != vq->last_avail_idx;
}

/*
 * The ring looked empty and the caller will wait for a kick: make sure the
 * driver sends one for its next chain, like Linux's vhost_enable_notify()
 * (publish "kick me", full barrier, look again).  Once per batch, never
 * per request.  Returns true if a chain arrived in between.
 *
 * The avail_event store of the last pop may still sit in this CPU's store
 * buffer when we read avail->idx; the driver stores avail->idx and then
 * (after its full barrier) reads avail_event.  Without a full barrier
 * between our store and our load, each side can miss the other's store:
 * the driver sees an old avail_event and does not kick, we see the old
 * index and sleep, and the queue stops for good.
 */
static bool virtqueue_empty_recheck(VirtQueue *vq)
{
    if (!vq->notification) {
        /* Busy polling: the loop looks at the ring itself and re-checks
         * after virtqueue_set_notification(vq, true), which has the
         * barrier. */
        return false;
    }
    if (!vq->event_idx) {
        /* used->flags has been clear since virtqueue_start() or
         * virtqueue_set_notification(vq, true), and both ended with a full
         * barrier: the driver already sees "kick me". */
        return false;
    }
    VQ_STORE(virtqueue_avail_event(vq), vq->last_avail_idx);
    if (unlikely(vq->log)) {
        virtqueue_log_used(vq, virtqueue_avail_event(vq), 2);
    }
    /* Full barrier: pairs with the driver's full barrier between bumping
     * avail->idx and reading avail_event (virtqueue_kick_prepare()). */
    VQ_MB();
    return virtqueue_read_avail_idx(vq);
}

/*
 * The split ring's pop.  Not inlined into virtqueue_pop(): with the chain
 * walk inlined here its frame saves every callee-saved register, which
 * the packed ring's path through virtqueue_pop() would pay too; as it is
 * both formats are tail calls from there.
 */
static VirtQueueElement * __attribute__((noinline))
virtqueue_split_pop(VirtQueue *vq)
{
    VirtQueueElement *elem;
    uint16_t head;

    if (unlikely(vq->resubmit_pos < vq->resubmit_num)) {
        return virtqueue_pop_resubmit(vq);
    }

    if (vq->last_avail_idx == vq->shadow_avail_idx &&
        !virtqueue_read_avail_idx(vq) &&
        (vq->broken || !virtqueue_empty_recheck(vq))) {
        return NULL;
    }

    head = VQ_LOAD(&vq->avail->ring[vq->last_avail_idx & (vq->num - 1)]);
    if (unlikely(head >= vq->num)) {
        virtqueue_set_broken(vq, "avail ring entry %u holds head %u, queue "
                             "size %u", vq->last_avail_idx, head, vq->num);
        return NULL;
    }
    if (unlikely(vq->elem_state[head] != VQ_ELEM_FREE)) {
        virtqueue_set_broken(vq, "head %u made available again while in "
                             "flight", head);
        return NULL;
    }
    elem = &vq->elems[head];
    if (unlikely(!virtqueue_map_chain(vq, head, elem))) {
        return NULL;
    }

    vq->last_avail_idx++;
    if (vq->event_idx && vq->notification) {
        /* Kick me when you make the entry after this one available. */
        VQ_STORE(virtqueue_avail_event(vq), vq->last_avail_idx);
        if (unlikely(vq->log)) {
            virtqueue_log_used(vq, virtqueue_avail_event(vq), 2);
        }
    }
    vq->elem_state[head] = VQ_ELEM_POPPED;
    vq->inflight_count++;
    vq->stats.popped++;
    virtqueue_inflight_mark(vq, head);
    return elem;
}

/* Called from: the owner thread.  Hot path. */
VirtQueueElement *virtqueue_pop(VirtQueue *vq)
{
    if (unlikely(!vq->started || vq->broken)) {
        return NULL;
    }
    if (vq->packed) {
        return virtqueue_packed_pop(vq);
    }
    return virtqueue_split_pop(vq);
}

/* Called from: the owner thread. */
void virtqueue_unpop(VirtQueue *vq, VirtQueueElement *elem)
{
    uint16_t head = elem->head;

    assert(head < vq->pool_num && vq->elem_state[head] != VQ_ELEM_FREE);
    if (vq->packed) {
        virtqueue_packed_unpop(vq, elem);
    } else if (vq->elem_state[head] == VQ_ELEM_POPPED_RESUBMIT) {
        /* Still pending in the inflight region: replay it again. */
        assert(vq->resubmit_pos > 0);
        vq->resubmit[--vq->resubmit_pos] = head;
        vq->stats.resubmitted--;
    } else {
        /* Must be undone in reverse pop order, like libvhost-user. */
        vq->last_avail_idx--;
        if (vq->inflight) {
            VQ_STORE(&vq->inflight->desc[head].inflight, 0);
        }
    }
    vq->elem_state[head] = VQ_ELEM_FREE;
    vq->inflight_count--;
    vq->stats.popped--;
}

/* Called from: the owner thread.  Hot path. */
void virtqueue_push(VirtQueue *vq, VirtQueueElement *elem, uint32_t len)
{
    VhostUserQueueRegionSplit *r = vq->inflight;
    uint16_t head = elem->head;
    struct vring_used_elem *ue;

    assert(head < vq->pool_num && vq->elem_state[head] != VQ_ELEM_FREE);
    vq->elem_state[head] = VQ_ELEM_FREE;
    vq->inflight_count--;
    if (unlikely(!vq->started)) {
        /* Rings are gone: the request is dropped (the VMM reset us). */
        return;
    }
    if (vq->packed) {
        virtqueue_packed_push(vq, elem, len);
        return;
    }

    if (r) {
        VQ_STORE(&r->last_batch_head, head);
    }
    ue = &vq->used->ring[vq->used_idx & (vq->num - 1)];
    VQ_STORE(&ue->id, (uint32_t)head);
    VQ_STORE(&ue->len, len);
    vq->used_idx++;
    /* Release: the used element is visible before the index that covers
     * it; pairs with the driver's read barrier after loading used->idx. */
    VQ_STORE_RELEASE(&vq->used->idx, vq->used_idx);
    if (r) {
        /* Crash consistency only (a later instance reads this), so a
         * compiler barrier keeps the steps in order. */
        VQ_STORE(&r->desc[head].inflight, 0);
        atomic_signal_fence(memory_order_release);
        VQ_STORE(&r->used_idx, vq->used_idx);
    }
    vq->stats.pushed++;
    vq->pushed_since_notify++;
    if (unlikely(vq->log)) {
        /* After the stores (the device wrote in_sg before it pushed).
         * Last, so that it is a tail call and the path without logging
         * saves no registers. */
        virtqueue_log_push(vq, elem, ue);
    }
}

/* Called from: the owner thread.  Once per batch. */
void virtqueue_notify(VirtQueue *vq)
{
    unsigned int pushed = vq->pushed_since_notify;
    bool need;

    if (!vq->started || pushed == 0) {
        return;
    }
    vq->pushed_since_notify = 0;
    if (unlikely(vq->log) && vq->mem->log_call_fd >= 0) {
        /* SET_LOG_FD: tell the VMM this batch was logged */
        EventNotifier log_call = { .fd = vq->mem->log_call_fd };

        event_notifier_set(&log_call);
    }

    /* Full barrier: our used->idx store must be visible before we read
     * the driver's used_event / flags.  Pairs with the driver's full
     * barrier between writing used_event (or the flags) and re-reading
     * used->idx before it sleeps. */
    VQ_MB();

    if (vq->packed) {
        need = virtqueue_packed_need_notify(vq);
    } else if (vq->event_idx) {
        uint16_t old = vq->signalled_used;
        uint16_t new = vq->used_idx;
        bool valid = vq->signalled_used_valid;

        vq->signalled_used = new;
        vq->signalled_used_valid = true;
        need = !valid ||
               vring_need_event(VQ_LOAD(virtqueue_used_event(vq)), new, old);
    } else {
        need = !(VQ_LOAD(&vq->avail->flags) & VRING_AVAIL_F_NO_INTERRUPT);
    }

    if (!need) {
        vq->stats.notifies_suppressed++;
        if (vq->quiet_pushed < vq->num) {
            vq->quiet_pushed += pushed;     /* saturates past num */
        }
        return;
    }
    vq->quiet_pushed = 0;
    if (vq->call.fd >= 0) {
        event_notifier_set(&vq->call);
        vq->stats.notifies++;
    }
}

/*
 * Called from: the owner thread.  A driver that waits for interrupts asks
 * for one before it has a ring's worth of unseen completions (it cannot
 * have more buffers than the ring outstanding); one that went a whole
 * ring without asking polls its used ring (Linux's poll queues, SPDK's
 * and DPDK's virtio drivers): its CPU spins waiting for us.
 */
bool virtqueue_driver_polls(const VirtQueue *vq)
{
    return vq->started && vq->quiet_pushed >= vq->num;
}

/* Called from: the owner thread. */
void virtqueue_set_notification(VirtQueue *vq, bool on)
{
    vq->notification = on;
    if (!vq->started) {
        return;
    }
    if (vq->packed) {
        virtqueue_packed_set_notification(vq, on);
    } else if (vq->event_idx) {
        if (on) {
            /* Kick me for anything after what is available now. */
            VQ_STORE(virtqueue_avail_event(vq),
                     VQ_LOAD(&vq->avail->idx));
            if (vq->log) {
                virtqueue_log_used(vq, virtqueue_avail_event(vq), 2);
            }
        }
        /* off: leave avail_event behind; at most one more kick comes. */
    } else {
        if (on) {
            vq->used_flags &= ~VRING_USED_F_NO_NOTIFY;
        } else {
            vq->used_flags |= VRING_USED_F_NO_NOTIFY;
        }
        VQ_STORE(&vq->used->flags, vq->used_flags);
        if (vq->log) {
            virtqueue_log_used(vq, &vq->used->flags, 2);
        }
    }
    if (on) {
        /* Full barrier: publish "kick me" before the caller re-checks
         * virtqueue_has_avail(); pairs with the driver's full barrier
         * between bumping avail->idx and reading avail_event / flags.
         * Without it both sides could miss each other's update. */
        VQ_MB();
    }
}

/* Called from: the owner thread.  No syscalls (used in busy polling). */
bool virtqueue_has_avail(VirtQueue *vq)
{
    if (!vq->started || vq->broken) {
        return false;
    }
    if (vq->resubmit_pos < vq->resubmit_num) {
        return true;
    }
    if (vq->packed) {
        return virtqueue_packed_has_avail(vq);
    }
    if (vq->last_avail_idx != vq->shadow_avail_idx) {
        return true;
    }
    return VQ_LOAD(&vq->avail->idx) != vq->last_avail_idx;
}

int virtqueue_replay_cmp(const void *a, const void *b)
{
    const VirtQueueReplay *x = a, *y = b;

    if (x->counter != y->counter) {
        return x->counter < y->counter ? -1 : 1;
    }
    return x->head - y->head;
}

/*
 * Initialise or check the inflight region and queue the requests a
 * previous instance left in flight.  Runs while the queue is stopped;
 * @ring_used_idx is used->idx as the caller read it (once).
 *
 * The front-end maps the region too and can write it at any moment, also
 * while we read it: every field is loaded once into a local, checked, and
 * only the local used, also for what is written back (after every check
 * passed: a refused region is left as it was).
 */
static bool virtqueue_inflight_restore(VirtQueue *vq, uint16_t ring_used_idx,
                                       GError **errp)
{
    VhostUserQueueRegionSplit *r = vq->inflight;
    g_autofree VirtQueueReplay *replay = NULL;
    uint64_t max_counter = 0;
    unsigned int i, n = 0, num = vq->num;
    uint16_t version, desc_num, used_idx, last_batch_head, done = num;

    if (!r) {
        return true;
    }

    version = VQ_LOAD(&r->version);
    if (version == 0) {
        /* Fresh (zeroed) region: take it over. */
        memset(r->desc, 0, sizeof(r->desc[0]) * num);
        r->desc_num = num;
        r->last_batch_head = 0;
        r->used_idx = ring_used_idx;
        atomic_signal_fence(memory_order_release);
        r->version = VQ_INFLIGHT_VERSION;
        return true;
    }
    desc_num = VQ_LOAD(&r->desc_num);
    if (version != VQ_INFLIGHT_VERSION || desc_num != num) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: inflight region (version %u, %u descriptors) "
                    "does not match the queue (version %u, size %u)",
                    vq->index, version, desc_num, VQ_INFLIGHT_VERSION, num);
        return false;
    }

    used_idx = VQ_LOAD(&r->used_idx);
    last_batch_head = VQ_LOAD(&r->last_batch_head);
    if (used_idx != ring_used_idx && last_batch_head < num) {
        /* The last push reached the used ring but its inflight flag was
         * not cleared yet: it is done. */
        done = last_batch_head;
    }

    replay = g_new(VirtQueueReplay, num);
    for (i = 0; i < num; i++) {
        uint8_t state = i == done ? 0 : VQ_LOAD(&r->desc[i].inflight);
        uint64_t counter = VQ_LOAD(&r->desc[i].counter);

        if (state == 1) {
            replay[n].counter = counter;
            replay[n].head = i;
            n++;
        } else if (state != 0) {
            g_set_error(errp, VB_ERROR, 0,
                        "queue %u: inflight region entry %u has invalid "
                        "state %u", vq->index, i, state);
            return false;
        }
        max_counter = MAX(max_counter, counter);
    }

    /* Everything was read and checked: from here on only the locals. */
    virtqueue_restore_test_point(vq, r);

    if (used_idx != ring_used_idx) {
        if (done < num) {
            VQ_STORE(&r->desc[done].inflight, 0);
        }
        atomic_signal_fence(memory_order_release);
        VQ_STORE(&r->used_idx, ring_used_idx);
    }
    qsort(replay, n, sizeof(replay[0]), virtqueue_replay_cmp);
    for (i = 0; i < n; i++) {
        vq->resubmit[i] = replay[i].head;
    }
    vq->resubmit_num = n;
    vq->inflight_counter = max_counter;
    if (n > 0) {
        /* The VMM could not fetch our base and sent the used index from
         * guest memory: everything between it and the replayed requests
         * was popped by the previous instance. */
        vq->last_avail_idx = ring_used_idx + n;
        vq->shadow_avail_idx = vq->last_avail_idx;
        info_report("virtqueue %u: resubmitting %u in-flight request(s)",
                    vq->index, n);
    }
    return true;
}

static void virtqueue_clear_rings(VirtQueue *vq)
{
    vq->desc = NULL;
    vq->avail = NULL;
    vq->used = NULL;
    vq->pdesc = NULL;
    vq->driver_event = NULL;
    vq->device_event = NULL;
    vq->mem = NULL;
}

/* Split ring: translate and check the three ring addresses. */
static bool virtqueue_split_map(VirtQueue *vq, const GuestMemory *mem,
                                GError **errp)
{
    unsigned int num = vq->num;

    vq->desc = guest_mem_uva_to_host(mem, vq->addr.desc_user_addr,
                                     sizeof(struct vring_desc) * num);
    vq->avail = guest_mem_uva_to_host(mem, vq->addr.avail_user_addr,
                                      6 + 2 * (uint64_t)num);
    vq->used = guest_mem_uva_to_host(mem, vq->addr.used_user_addr,
                                     6 + sizeof(struct vring_used_elem) *
                                     (uint64_t)num);
    if (!vq->desc || !vq->avail || !vq->used) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: ring addresses (desc 0x%" PRIx64 ", avail 0x%"
                    PRIx64 ", used 0x%" PRIx64 ", size %u) are not in guest "
                    "memory", vq->index, vq->addr.desc_user_addr,
                    vq->addr.avail_user_addr, vq->addr.used_user_addr, num);
        return false;
    }
    /* VIRTIO 1.x 2.7: descriptor table 16-byte, avail ring 2-byte, used
     * ring 4-byte aligned.  The rings are read and written with aligned
     * (atomic) loads and stores, so a misaligned one is refused (checked on
     * the pointers we will use, which is what the loads need). */
    if (((uintptr_t)vq->desc & 15) || ((uintptr_t)vq->avail & 1) ||
        ((uintptr_t)vq->used & 3)) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: misaligned ring (desc 0x%" PRIx64 " needs "
                    "16-byte, avail 0x%" PRIx64 " 2-byte, used 0x%" PRIx64
                    " 4-byte alignment)", vq->index, vq->addr.desc_user_addr,
                    vq->addr.avail_user_addr, vq->addr.used_user_addr);
        return false;
    }
    return true;
}

/* Split ring: the rest of the start, once the pool is there. */
static bool virtqueue_split_start(VirtQueue *vq, GError **errp)
{
    /* read once: the restore decides with the same value */
    vq->used_idx = VQ_LOAD(&vq->used->idx);
    vq->shadow_avail_idx = vq->last_avail_idx;
    if (!virtqueue_inflight_restore(vq, vq->used_idx, errp)) {
        return false;
    }
    /* Start with notifications on (a previous instance may have left
     * them off). */
    vq->used_flags = 0;
    if (vq->event_idx) {
        VQ_STORE(virtqueue_avail_event(vq), vq->last_avail_idx);
        if (vq->log) {
            virtqueue_log_used(vq, virtqueue_avail_event(vq), 2);
        }
    } else {
        VQ_STORE(&vq->used->flags, vq->used_flags);
        if (vq->log) {
            virtqueue_log_used(vq, &vq->used->flags, 2);
        }
    }
    return true;
}

/* (Re)allocate the element pool for @num heads / buffer ids. */
static bool virtqueue_alloc_pool(VirtQueue *vq, unsigned int num,
                                 GError **errp)
{
    /* one slot per head / buffer id, and the packed ring's spare one */
    size_t bytes = (size_t)(num + 1) * VIRTQUEUE_MAX_SG *
                   sizeof(struct iovec);
    void *long_sg;

    /* Reserved, not touched: pages become resident only when a chain
     * longer than VIRTQUEUE_INLINE_SG iovecs uses its head's slot. */
    long_sg = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (long_sg == MAP_FAILED) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: cannot map %zu bytes for the iovecs of "
                    "long chains: %s", vq->index, bytes, g_strerror(errno));
        return false;
    }
    virtqueue_free_pool(vq);
    vq->elems = g_new0(VirtQueueElement, num);
    vq->elem_state = g_new0(uint8_t, num);
    vq->resubmit = g_new0(uint16_t, num);
    vq->pbuf = g_new0(VirtQueuePackedBuf, num);
    vq->pnext = g_new0(uint16_t, num);
    /* the elements use the slots of their index (long_slot 0: not
     * written, so their pages stay untouched until used); the spare */
    vq->scratch.long_slot = num + 1;
    vq->long_sg = long_sg;
    vq->long_sg_bytes = bytes;
    vq->pool_num = num;
    return true;
}

/* Called from: the main thread (or the owner thread), queue stopped. */
bool virtqueue_start(VirtQueue *vq, const GuestMemory *mem, GError **errp)
{
    unsigned int num = vq->num;
    bool ok;

    if (num == 0 || !vq->addr_set) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: cannot start without size and ring addresses",
                    vq->index);
        return false;
    }
    if (vq->inflight_count > 0 && num != vq->pool_num) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: cannot resize with %u requests in flight",
                    vq->index, vq->inflight_count);
        return false;
    }

    ok = vq->packed ? virtqueue_packed_map(vq, mem, errp)
                    : virtqueue_split_map(vq, mem, errp);
    if (!ok || (vq->pool_num != num && !virtqueue_alloc_pool(vq, num, errp))) {
        virtqueue_clear_rings(vq);
        return false;
    }
    vq->mem = mem;
    vq->log = vq->log_on && mem->log;
    /* Split: used ring stores are logged at log_guest_addr.  Packed: the
     * used descriptors are in the descriptor ring, logged by address. */
    vq->log_used = vq->log && !vq->packed &&
                   (vq->addr.flags & (1u << VHOST_VRING_F_LOG));
    if (vq->log_used &&
        !guest_mem_log_covers(mem, vq->addr.log_guest_addr,
                              6 + sizeof(struct vring_used_elem) *
                              (uint64_t)num)) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: used ring log address 0x%" PRIx64 " (ring "
                    "size %u) lies outside the dirty log of %" PRIu64
                    " bytes", vq->index, vq->addr.log_guest_addr, num,
                    mem->log_size);
        virtqueue_clear_rings(vq);
        return false;
    }
    vq->last_reg = &virtqueue_no_region;
    vq->signalled_used_valid = false;
    vq->pushed_since_notify = 0;
    vq->quiet_pushed = 0;
    vq->broken = false;
    vq->resubmit_num = vq->resubmit_pos = 0;
    vq->inflight_counter = 0;
    vq->inflight = vq->packed ? NULL : vq->inflight_region;
    vq->pinflight = vq->packed ? vq->inflight_region : NULL;

    ok = vq->packed ? virtqueue_packed_start(vq, errp)
                    : virtqueue_split_start(vq, errp);
    if (!ok) {
        virtqueue_clear_rings(vq);
        return false;
    }
    vq->notification = true;
    vq->started = true;
    VQ_MB();
    return true;
}

/* Called from: the main thread (or the owner thread). */
void virtqueue_stop(VirtQueue *vq)
{
    vq->started = false;
    virtqueue_clear_rings(vq);
    vq->log = false;
    vq->log_used = false;
    vq->last_reg = &virtqueue_no_region;
    vq->resubmit_num = vq->resubmit_pos = 0;
}
