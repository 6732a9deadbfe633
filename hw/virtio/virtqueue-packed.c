/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Packed virtqueue, device side (VIRTIO 1.2 section 2.8): the part that
 * differs from the split ring.  Everything else -- element pool, descriptor
 * mapping and its bounds checks, indirect table checks, notify batching,
 * start/stop -- is shared with virtqueue.c through virtqueue-int.h, and the
 * public entry points of virtqueue.h dispatch here when
 * VIRTIO_F_RING_PACKED was negotiated.
 *
 * Theory of operation
 *
 * One ring of descriptors, written by both sides.  The driver makes a
 * buffer (one descriptor, a chain linked by VRING_DESC_F_NEXT in
 * consecutive slots, or one indirect descriptor) available by setting the
 * AVAIL flag bit to its wrap counter and USED to the inverse, the head's
 * flags last.  The device reads buffers in ring order from last_avail_idx
 * (with avail_wrap, flipped when the index wraps) and writes used
 * descriptors in ring order from used_idx (with used_wrap): id, len, then
 * the flags with AVAIL = USED = used_wrap.  A used descriptor takes one
 * slot but used_idx advances by the number of slots the buffer took, so
 * completion may be in any order (the buffer id says which one completed)
 * and used_idx catches up with last_avail_idx when nothing is in flight.
 *
 * The buffer id is in the buffer's last descriptor, known only at the end
 * of the walk.  Drivers put it in every descriptor, so a chain is mapped
 * into the element its head's id names (if that one is free; else into
 * vq->scratch) and moved only if the last descriptor names another (the
 * inline iovecs are copied; a long slot is swapped, no copy).
 *
 * Hostile input: a chain descriptor not marked available for the current
 * wrap counter, more descriptors in flight than the ring holds (which also
 * bounds a chain and catches a driver that laps the device), an indirect
 * descriptor that is not alone, nested indirect tables, buffer ids out of
 * range or reused while in flight: the queue is broken, as for split.
 *
 * Event suppression: the driver area (driver event suppression, written
 * by the driver) says when the device interrupts: DISABLE, ENABLE, or with
 * event-idx DESC + off_wrap (interrupt once the used ring passes that slot
 * of that lap).  The device area (device event suppression, written here)
 * says when the driver kicks, the same way: DESC + off_wrap = the next slot
 * to read when event-idx is on, ENABLE otherwise, DISABLE while busy
 * polling.  Both structures are read and written as one 32-bit word.
 *
 * Memory ordering: the same pairs as the split ring, with the descriptor
 * flags in the role of the indexes.
 *  - the head's flags (with its len and id, one 8-byte word) are loaded
 *    with acquire before the rest of the buffer is read: pairs with the
 *    driver's write barrier before it stores the head's flags;
 *  - a used descriptor's flags are stored with release after its id and
 *    len and after the data and status: pairs with the driver's read
 *    barrier after it sees the flags;
 *  - a full fence between the last used flags store and reading the driver
 *    event structure (virtqueue_notify());
 *  - a full fence between writing the device event structure ("kick me")
 *    and looking at the next slot's flags again (set_notification(on) and
 *    the empty-ring recheck in pop).
 *
 * Inflight region (vhost-user INFLIGHT_SHMFD, packed format of the
 * specification): used descriptors overwrite in-flight ones, so every
 * descriptor fetched is copied into a region entry taken from a free list
 * (we keep our own copy of the links, so a front-end scribbling on the
 * region cannot lead us astray while running); a buffer's entries are
 * linked from its head entry, which holds inflight = 1, the fetch counter,
 * the descriptor count and the last entry.  Push returns the entries to
 * the free list, moves used_idx, writes the used descriptor, clears
 * inflight and then commits old_free_head / old_used_idx /
 * old_used_wrap_counter.  On the next start a region whose used index is
 * ahead of its committed one is committed if the ring shows the used
 * descriptor, else rolled back; entries on the free list are not in
 * flight; the heads still in flight are replayed in counter order, and the
 * slots they took tell where the driver's next buffer is.
 *
 * Dirty logging (live migration): every guest store of this file goes
 * through vq_packed_write_used() (used descriptors) or
 * vq_packed_write_device_event() (device area); with logging on, each
 * marks what it wrote after the store, and push marks the element's
 * device-writable buffers (data, status) as the split ring does.
 */
#include "qemu/osdep.h"
#include "virtqueue-int.h"
#include "qemu/error-report.h"

#define VQ_F_AVAIL      (1u << VRING_PACKED_DESC_F_AVAIL)
#define VQ_F_USED       (1u << VRING_PACKED_DESC_F_USED)
#define VQ_WRAP_BIT     (1u << VRING_PACKED_EVENT_F_WRAP_CTR)

/* The AVAIL/USED bits of a descriptor available in lap @wrap. */
static inline uint16_t vq_packed_avail_bits(bool wrap)
{
    return wrap ? VQ_F_AVAIL : VQ_F_USED;
}

/* Is a descriptor with @flags available to a device reading lap @wrap
 * (AVAIL equal to the wrap counter, USED not)? */
static inline bool vq_packed_is_avail(uint16_t flags, bool wrap)
{
    return (flags & (VQ_F_AVAIL | VQ_F_USED)) == vq_packed_avail_bits(wrap);
}

/* Step a ring position. */
static inline void vq_packed_advance(VirtQueue *vq, uint16_t *idx, bool *wrap,
                                     unsigned int n)
{
    unsigned int i = *idx + n;

    if (i >= vq->num) {
        i -= vq->num;
        *wrap = !*wrap;
    }
    *idx = i;
}

/* The event suppression structures as one untorn 32-bit word (off_wrap is
 * the low half in memory, flags the high half: little endian). */
static inline uint32_t vq_event_word(uint16_t off_wrap, uint16_t flags)
{
    return off_wrap | (uint32_t)flags << 16;
}

/*
 * Descriptor words.  A packed descriptor is addr, then len, id and flags
 * in one 8-byte word, which pop loads as one untorn access: every field of
 * it is read once, the flags with the rest (acquire for the head: the
 * driver stores the head's flags last, and an aligned 8-byte load is
 * single-copy atomic on the hosts we build for, so a word showing the new
 * flags shows the len and id written before them).  A region entry
 * (DescStatePacked) holds id, flags and len in the 8 bytes before its
 * addr: the same word rotated by 32 bits.  So copying a descriptor into
 * the region is two 8-byte stores of what was loaded, no field taken
 * apart.  Rings and region are used as host integers: little-endian hosts
 * only.
 */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the packed ring code assumes a little-endian host");
_Static_assert(offsetof(struct vring_packed_desc, len) == 8 &&
               offsetof(struct vring_packed_desc, id) == 12 &&
               offsetof(struct vring_packed_desc, flags) == 14 &&
               sizeof(struct vring_packed_desc) == 16,
               "VIRTIO 1.2 2.8.13 packed descriptor layout");
_Static_assert(offsetof(VhostUserDescStatePacked, id) == 16 &&
               offsetof(VhostUserDescStatePacked, flags) == 18 &&
               offsetof(VhostUserDescStatePacked, len) == 20 &&
               offsetof(VhostUserDescStatePacked, addr) == 24 &&
               sizeof(VhostUserDescStatePacked) == 32,
               "vhost-user DescStatePacked layout");

static inline const uint64_t *vq_pdesc_word(const struct vring_packed_desc *d)
{
    return (const uint64_t *)&d->len;
}

static inline uint32_t vq_pword_len(uint64_t w)
{
    return (uint32_t)w;
}

static inline uint16_t vq_pword_id(uint64_t w)
{
    return (uint16_t)(w >> 32);
}

static inline uint16_t vq_pword_flags(uint64_t w)
{
    return (uint16_t)(w >> 48);
}

/* Region entry @e's id / flags / len word, and its value for ring word @w */
static inline uint64_t *vq_pentry_word(VhostUserDescStatePacked *e)
{
    return (uint64_t *)&e->id;
}

static inline uint64_t vq_pentry_value(uint64_t w)
{
    return w >> 32 | w << 32;
}

/*
 * Dirty logging (logging on only): mark the guest pages under [@p, @p +
 * @len), a host pointer into guest memory the device just wrote.  The
 * packed ring's writes are all in the descriptor ring and the device area,
 * which the VMM gave as VMM addresses, so they are logged through the
 * memory table rather than at log_guest_addr.  Out of line and cold: with
 * logging off the callers pay one predictable branch.
 */
static void __attribute__((noinline, cold))
vq_packed_log(VirtQueue *vq, const void *p, size_t len)
{
    struct iovec iov = { .iov_base = (void *)p, .iov_len = len };

    guest_mem_log_iov(vq->mem, &iov, 1);
}

/* The one place the packed ring writes the device area. */
static inline void vq_packed_write_device_event(VirtQueue *vq,
                                                uint16_t flags)
{
    uint16_t off_wrap = vq->last_avail_idx |
                        (vq->avail_wrap ? VQ_WRAP_BIT : 0);

    VQ_STORE((uint32_t *)vq->device_event, vq_event_word(off_wrap, flags));
    if (unlikely(vq->log)) {
        vq_packed_log(vq, vq->device_event, sizeof(*vq->device_event));
    }
}

/* Called from: the main thread, queue stopped. */
bool virtqueue_packed_map(VirtQueue *vq, const GuestMemory *mem,
                          GError **errp)
{
    unsigned int num = vq->num;

    vq->pdesc = guest_mem_uva_to_host(mem, vq->addr.desc_user_addr,
                                      sizeof(struct vring_packed_desc) *
                                      (uint64_t)num);
    vq->driver_event = guest_mem_uva_to_host(mem, vq->addr.avail_user_addr,
                                             sizeof(*vq->driver_event));
    vq->device_event = guest_mem_uva_to_host(mem, vq->addr.used_user_addr,
                                             sizeof(*vq->device_event));
    if (!vq->pdesc || !vq->driver_event || !vq->device_event) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: packed ring addresses (descriptor ring 0x%"
                    PRIx64 ", driver area 0x%" PRIx64 ", device area 0x%"
                    PRIx64 ", size %u) are not in guest memory", vq->index,
                    vq->addr.desc_user_addr, vq->addr.avail_user_addr,
                    vq->addr.used_user_addr, num);
        return false;
    }
    /* VIRTIO 1.2 2.8.10: descriptor ring 16-byte, event structures 4-byte
     * aligned; we need it for the untorn loads and stores. */
    if (((uintptr_t)vq->pdesc & 15) || ((uintptr_t)vq->driver_event & 3) ||
        ((uintptr_t)vq->device_event & 3)) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: misaligned packed ring (descriptor ring 0x%"
                    PRIx64 " needs 16-byte, driver area 0x%" PRIx64
                    " and device area 0x%" PRIx64 " 4-byte alignment)",
                    vq->index, vq->addr.desc_user_addr,
                    vq->addr.avail_user_addr, vq->addr.used_user_addr);
        return false;
    }
    return true;
}

/* Called from: the owner thread (or setup). */
uint32_t virtqueue_packed_get_base(VirtQueue *vq)
{
    uint32_t avail = vq->last_avail_idx | (vq->avail_wrap ? VQ_WRAP_BIT : 0);
    uint32_t used = vq->used_idx | (vq->used_wrap ? VQ_WRAP_BIT : 0);

    return avail | used << 16;
}

/* Fresh (zeroed) region: every entry on the free list. */
static void vq_packed_inflight_init(VirtQueue *vq)
{
    VhostUserQueueRegionPacked *r = vq->pinflight;
    unsigned int num = vq->num;

    memset(r->desc, 0, sizeof(r->desc[0]) * num);
    for (unsigned int i = 0; i < num; i++) {
        r->desc[i].next = i + 1;        /* num ends the list */
        vq->pnext[i] = i + 1;
    }
    r->desc_num = num;
    r->free_head = r->old_free_head = 0;
    r->used_idx = r->old_used_idx = vq->used_idx;
    r->used_wrap_counter = r->old_used_wrap_counter = vq->used_wrap;
    vq->pfree_head = 0;
    atomic_signal_fence(memory_order_release);
    r->version = VQ_INFLIGHT_VERSION;
}

/*
 * Region written by an earlier instance: finish or roll back the update
 * it was doing, rebuild our copy of the free list, and queue the buffers
 * still in flight.  @version: the region's, as the caller read it.
 *
 * The front-end maps the region too and can write it at any moment, also
 * while we read it.  So every field is loaded exactly once, into a local
 * (the header fields, and per entry: the links into vq->pnext, the head
 * fields into locals), checked, and only the local used; what we write
 * back is computed from the locals too, after every check passed (a
 * refused region is left as it was: nothing half-replayed).
 *
 * Every entry must be accounted for exactly once: on the free list, or in
 * the chain of a buffer in flight.  A shorter free list would let pop run
 * past its end (entry num: past this queue's part of the region), an entry
 * on two lists would be handed out twice.
 */
static bool vq_packed_inflight_restore(VirtQueue *vq, uint16_t version,
                                       GError **errp)
{
    VhostUserQueueRegionPacked *r = vq->pinflight;
    unsigned int num = vq->num;
    g_autofree uint8_t *owner = g_new0(uint8_t, num);  /* 1 free, 2 chain */
    g_autofree uint8_t *id_seen = g_new0(uint8_t, num);
    g_autofree VirtQueueReplay *replay = g_new(VirtQueueReplay, num);
    unsigned int n = 0, slots = 0, nfree = 0, i;
    uint64_t max_counter = 0;
    uint16_t desc_num = VQ_LOAD(&r->desc_num);
    uint16_t free_head = VQ_LOAD(&r->free_head);
    uint16_t old_free_head = VQ_LOAD(&r->old_free_head);
    uint16_t used_idx = VQ_LOAD(&r->used_idx);
    uint16_t old_used_idx = VQ_LOAD(&r->old_used_idx);
    uint8_t used_wrap = VQ_LOAD(&r->used_wrap_counter);
    uint8_t old_used_wrap = VQ_LOAD(&r->old_used_wrap_counter);
    bool commit = false;
    uint16_t e;

    if (version != VQ_INFLIGHT_VERSION || desc_num != num) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: packed inflight region (version %u, %u "
                    "descriptors) does not match the queue (version %u, "
                    "size %u)", vq->index, version, desc_num,
                    VQ_INFLIGHT_VERSION, num);
        return false;
    }
    if (old_used_idx >= num || used_idx >= num ||
        old_free_head > num || free_head > num ||
        used_wrap > 1 || old_used_wrap > 1) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: packed inflight region holds positions out "
                    "of range (used %u/%u, wrap %u/%u, free head %u/%u, "
                    "queue size %u)", vq->index, used_idx, old_used_idx,
                    used_wrap, old_used_wrap, free_head, old_free_head, num);
        return false;
    }
    if (used_idx != old_used_idx || used_wrap != old_used_wrap) {
        /* Killed inside a push: did its used descriptor reach the ring? */
        uint16_t flags = VQ_LOAD(&vq->pdesc[old_used_idx].flags);

        commit = !vq_packed_is_avail(flags, old_used_wrap);
    }
    if (commit) {
        old_free_head = free_head;
        old_used_idx = used_idx;
        old_used_wrap = used_wrap;
    } else {
        free_head = old_free_head;
        used_idx = old_used_idx;
        used_wrap = old_used_wrap;
    }

    /* The free list: what it holds is not in flight. */
    for (e = free_head; e != num; e = vq->pnext[e]) {
        if (e > num || owner[e]) {
            g_set_error(errp, VB_ERROR, 0,
                        "queue %u: packed inflight region's free list is "
                        "corrupt (entry %u %s)", vq->index, e,
                        e > num ? "out of range" : "seen twice");
            return false;
        }
        owner[e] = 1;
        vq->pnext[e] = VQ_LOAD(&r->desc[e].next);
        nfree++;
    }

    for (i = 0; i < num; i++) {
        uint8_t state;
        uint16_t cnt, last, id;
        uint64_t counter;

        if (owner[i] == 1) {
            continue;
        }
        state = VQ_LOAD(&r->desc[i].inflight);
        if (state == 0) {
            continue;
        }
        cnt = VQ_LOAD(&r->desc[i].num);
        last = VQ_LOAD(&r->desc[i].last);
        counter = VQ_LOAD(&r->desc[i].counter);
        if (state != 1 || cnt == 0 || cnt > num - slots) {
            g_set_error(errp, VB_ERROR, 0,
                        "queue %u: packed inflight entry %u is invalid "
                        "(state %u, %u descriptors, %u of the queue's %u "
                        "taken already)", vq->index, i, state, cnt, slots,
                        num);
            return false;
        }
        e = i;
        for (unsigned int k = 0; k < cnt; k++) {
            if (e >= num || owner[e]) {
                g_set_error(errp, VB_ERROR, 0,
                            "queue %u: packed inflight entry %u: its "
                            "descriptor list is corrupt (entry %u %s)",
                            vq->index, i, e,
                            e >= num ? "out of range" : "claimed twice");
                return false;
            }
            owner[e] = 2;
            vq->pnext[e] = VQ_LOAD(&r->desc[e].next);
            if (k + 1 < cnt) {
                e = vq->pnext[e];
            }
        }
        id = VQ_LOAD(&r->desc[e].id);
        if (e != last || id >= num || vq->elem_state[id] != VQ_ELEM_FREE) {
            g_set_error(errp, VB_ERROR, 0,
                        "queue %u: packed inflight entry %u is inconsistent "
                        "(last %u, buffer id %u)", vq->index, i, last, id);
            return false;
        }
        if (id_seen[id]) {
            g_set_error(errp, VB_ERROR, 0,
                        "queue %u: packed inflight region holds buffer "
                        "id %u twice", vq->index, id);
            return false;
        }
        id_seen[id] = 1;
        vq->pbuf[id] = (VirtQueuePackedBuf) {
            .slots = cnt, .head = i, .last = e,
        };
        replay[n].counter = counter;
        replay[n].head = id;
        max_counter = MAX(max_counter, counter);
        slots += cnt;
        n++;
    }
    if (nfree + slots != num) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: packed inflight region does not account for "
                    "its entries (%u free, %u in %u buffers in flight, "
                    "queue size %u: a front-end must hand back the region "
                    "as the back-end left it)", vq->index, nfree, slots, n,
                    num);
        return false;
    }

    /* Everything was read and checked: from here on only the locals. */
    virtqueue_restore_test_point(vq, r);

    for (i = 0; i < num; i++) {
        if (owner[i] == 1) {
            VQ_STORE(&r->desc[i].inflight, 0);
        }
    }
    if (commit) {
        VQ_STORE(&r->old_free_head, old_free_head);
        VQ_STORE(&r->old_used_idx, old_used_idx);
        VQ_STORE(&r->old_used_wrap_counter, old_used_wrap);
    }
    VQ_STORE(&r->free_head, free_head);
    VQ_STORE(&r->used_idx, used_idx);
    VQ_STORE(&r->used_wrap_counter, used_wrap);
    vq->pfree_head = free_head;

    qsort(replay, n, sizeof(replay[0]), virtqueue_replay_cmp);
    for (i = 0; i < n; i++) {
        vq->resubmit[i] = replay[i].head;
    }
    vq->resubmit_num = n;
    vq->inflight_counter = max_counter;
    /* The region knows where the device was; the front-end's base may be
     * stale (a dead back-end could not answer GET_VRING_BASE). */
    vq->used_idx = used_idx;
    vq->used_wrap = used_wrap;
    vq->last_avail_idx = vq->used_idx;
    vq->avail_wrap = vq->used_wrap;
    vq_packed_advance(vq, &vq->last_avail_idx, &vq->avail_wrap, slots);
    vq->inflight_slots = slots;
    if (n > 0) {
        info_report("virtqueue %u: resubmitting %u in-flight request(s)",
                    vq->index, n);
    }
    return true;
}

/* Called from: the main thread (or the owner thread), queue stopped; the
 * rings are mapped and the pool allocated. */
bool virtqueue_packed_start(VirtQueue *vq, GError **errp)
{
    if (vq->inflight_count > 0) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: cannot start a packed ring with %u requests "
                    "in flight", vq->index, vq->inflight_count);
        return false;
    }
    if (vq->base_set) {
        uint16_t avail = vq->base & 0x7fff;
        uint16_t used = (vq->base >> 16) & 0x7fff;

        if (avail >= vq->num || used >= vq->num) {
            g_set_error(errp, VB_ERROR, 0,
                        "queue %u: vring base 0x%08" PRIx32 " is out of range "
                        "for a packed ring of %u (bits 0-14: next available "
                        "slot, 15: its wrap counter, 16-30: next used slot, "
                        "31: its wrap counter)", vq->index, vq->base,
                        vq->num);
            return false;
        }
        vq->last_avail_idx = avail;
        vq->avail_wrap = vq->base & VQ_WRAP_BIT;
        vq->used_idx = used;
        vq->used_wrap = vq->base >> 31;
        vq->base_set = false;
    }
    if (vq->last_avail_idx >= vq->num || vq->used_idx >= vq->num) {
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: ring position out of range after a resize "
                    "(send SET_VRING_BASE)", vq->index);
        return false;
    }
    vq->inflight_slots = 0;
    if ((uintptr_t)vq->pinflight & 7) {
        /* pop copies descriptors into the entries as 8-byte words */
        g_set_error(errp, VB_ERROR, 0,
                    "queue %u: packed inflight region at %p is not 8-byte "
                    "aligned", vq->index, (void *)vq->pinflight);
        return false;
    }
    if (vq->pinflight) {
        /* read once: the restore checks this value, not a new one */
        uint16_t version = VQ_LOAD(&vq->pinflight->version);

        if (version == 0) {
            vq_packed_inflight_init(vq);
        } else if (!vq_packed_inflight_restore(vq, version, errp)) {
            return false;
        }
    }
    if (vq->used_idx != vq->last_avail_idx ||
        vq->used_wrap != vq->avail_wrap) {
        if (!vq->pinflight) {
            /* Without a region nothing can be replayed: what lies in
             * between was in flight in the previous process. */
            warn_report("virtqueue %u: packed ring resumes with buffers in "
                        "flight (next available slot %u, next used slot "
                        "%u) and no inflight region to replay them",
                        vq->index, vq->last_avail_idx, vq->used_idx);
        }
        /* Whatever lies between is in flight. */
        vq->inflight_slots = (vq->last_avail_idx + vq->num - vq->used_idx) %
                             vq->num;
        if (vq->inflight_slots == 0) {
            vq->inflight_slots = vq->num;
        }
    }
    vq->signalled_used = vq->used_idx;
    vq->signalled_used_wrap = vq->used_wrap;
    /* Notifications on (a previous instance may have left them off). */
    vq_packed_write_device_event(vq, vq->event_idx ?
                                     VRING_PACKED_EVENT_FLAG_DESC :
                                     VRING_PACKED_EVENT_FLAG_ENABLE);
    return true;
}

/*
 * Map the table of indirect descriptor @d into @s (nested tables are
 * refused: VIRTIO 1.2 2.8.19).
 */
static bool vq_packed_map_indirect(VirtQueue *vq, VirtQueueElement *elem,
                                   uint16_t head, const VirtQueueDesc *d,
                                   VirtQueueSgList *s)
{
    const struct vring_packed_desc *table;
    unsigned int ntable;

    table = virtqueue_indirect_table(vq, head, d, &ntable);
    if (!table) {
        return false;
    }
    if (ntable > vq->num) {
        virtqueue_set_broken(vq, "indirect table of %u descriptors in "
                             "buffer at slot %u is longer than the queue "
                             "(%u)", ntable, head, vq->num);
        return false;
    }
    for (unsigned int k = 0; k < ntable; k++) {
        VirtQueueDesc t;

        t.addr = VQ_LOAD(&table[k].addr);
        t.len = VQ_LOAD(&table[k].len);
        t.flags = VQ_LOAD(&table[k].flags);
        if (unlikely(t.flags & VRING_DESC_F_INDIRECT)) {
            virtqueue_set_broken(vq, "nested indirect descriptor in buffer "
                                 "at slot %u", head);
            return false;
        }
        if (unlikely(!virtqueue_map_desc(vq, elem, head, &t, s))) {
            return false;
        }
    }
    return true;
}

/*
 * The chain was mapped into @from (vq->scratch, or the free element its
 * head's id named) but its buffer id, in the last descriptor, is another
 * one: move it to the element of @id.  The inline iovecs are copied; a long
 * slot is swapped with @from's, which is not in flight.
 */
static VirtQueueElement *vq_packed_move(VirtQueue *vq, VirtQueueElement *from,
                                        uint16_t id, const VirtQueueSgList *s)
{
    VirtQueueElement *elem = &vq->elems[id];
    VirtQueueSgList moved = *s;

    if (s->sg == from->inline_sg) {
        memcpy(elem->inline_sg, s->sg, s->nsg * sizeof(s->sg[0]));
        moved.sg = elem->inline_sg;
    } else {
        unsigned int slot = virtqueue_elem_long_slot(vq, elem);

        elem->long_slot = virtqueue_elem_long_slot(vq, from) + 1;
        from->long_slot = slot + 1;
    }
    virtqueue_elem_finish(elem, id, &moved);
    return elem;
}

/*
 * The ring looked empty and the caller will wait for a kick: like the
 * split ring's recheck, publish "kick me at this slot", full barrier, look
 * again.  Returns true if a buffer arrived in between, with the head's
 * len / id / flags word in *@w (loaded once, with acquire: the caller uses
 * this one, it does not load the word again).
 */
static bool vq_packed_empty_recheck(VirtQueue *vq, uint64_t *w)
{
    if (!vq->notification || !vq->event_idx) {
        /* Busy polling re-checks after set_notification(on); without
         * event-idx the device area says ENABLE since a fenced
         * set_notification(on) or start. */
        return false;
    }
    vq_packed_write_device_event(vq, VRING_PACKED_EVENT_FLAG_DESC);
    /* Full barrier: pairs with the driver's full barrier between making a
     * buffer available and reading the device event structure. */
    VQ_MB();
    /* Acquire: pairs with the driver's write barrier before it stores the
     * head's flags. */
    *w = VQ_LOAD_ACQUIRE(vq_pdesc_word(&vq->pdesc[vq->last_avail_idx]));
    return vq_packed_is_avail(vq_pword_flags(*w), vq->avail_wrap);
}

static VirtQueueElement *vq_packed_pop_resubmit(VirtQueue *vq)
{
    VhostUserQueueRegionPacked *r = vq->pinflight;
    uint16_t id = vq->resubmit[vq->resubmit_pos];
    VirtQueueElement *elem = &vq->elems[id];
    VirtQueueSgList s = { .sg = elem->inline_sg, .cap = VIRTQUEUE_INLINE_SG };
    const VirtQueuePackedBuf *b = &vq->pbuf[id];
    uint16_t e = b->head;

    for (unsigned int k = 0; k < b->slots; k++) {
        VirtQueueDesc d;

        d.addr = VQ_LOAD(&r->desc[e].addr);
        d.len = VQ_LOAD(&r->desc[e].len);
        d.flags = VQ_LOAD(&r->desc[e].flags);
        if (d.flags & VRING_DESC_F_INDIRECT) {
            if (b->slots != 1 ||
                !vq_packed_map_indirect(vq, elem, id, &d, &s)) {
                virtqueue_set_broken(vq, "replayed buffer id %u has a bad "
                                     "indirect descriptor", id);
                return NULL;
            }
        } else if (!virtqueue_map_desc(vq, elem, id, &d, &s)) {
            return NULL;
        }
        e = vq->pnext[e];
    }
    virtqueue_elem_finish(elem, id, &s);
    vq->resubmit_pos++;
    vq->elem_state[id] = VQ_ELEM_POPPED_RESUBMIT;
    vq->inflight_count++;
    vq->stats.popped++;
    vq->stats.resubmitted++;
    return elem;
}

/*
 * The pop's walk off its common case, out of line so that the walk's state
 * stays in registers (a VirtQueueSgList whose address a call takes lives
 * in memory): the shared mapping of descriptor @d (length 0, a buffer
 * outside the cached memory region or across regions, iovecs spilled to
 * the long slot, and every error), or the indirect table @d names.
 */
static bool __attribute__((noinline, cold))
vq_packed_pop_map_slow(VirtQueue *vq, VirtQueueElement *tgt, uint16_t slot,
                       VirtQueueDesc d, VirtQueueSgList *s)
{
    if (d.flags & VRING_DESC_F_INDIRECT) {
        return vq_packed_map_indirect(vq, tgt, slot, &d, s);
    }
    return virtqueue_map_desc(vq, tgt, slot, &d, s);
}

/*
 * The rest of a pop, once the head's len / id / flags word @w showed a
 * buffer available.  Inlined twice, @inflight constant in each: with and
 * without the inflight region, so that the walk tests for it nowhere.
 *
 * Shape of the common case (one virtio-blk request: a chain of 3, no
 * indirect table, the id in every descriptor, an inflight region): one
 * pass over the chain, two loads per descriptor (addr and the len / id /
 * flags word), two stores of them into the region entry, the iovec mapped
 * in line; then the head entry and the fetch commit.  The walk keeps its
 * state in scalars and anything unusual goes to vq_packed_pop_map_slow(),
 * which runs the shared checks: the fast path takes a descriptor only when
 * they would all pass and map it to one iovec (virtqueue_map_desc()).
 */
static inline __attribute__((always_inline)) VirtQueueElement *
vq_packed_pop_buf(VirtQueue *vq, uint64_t w, const bool inflight)
{
    const struct vring_packed_desc *ring = vq->pdesc;
    VhostUserQueueRegionPacked *r = vq->pinflight;
    const unsigned int num = vq->num;
    unsigned int i = vq->last_avail_idx;
    uint16_t avail_bits = vq_packed_avail_bits(vq->avail_wrap);
    unsigned int left, count, cap, nsg = 0, in_num = 0;
    uint16_t e, last_e, id, head_id;
    const GuestMemRegion *reg;
    VirtQueueElement *tgt, *elem;
    VirtQueuePackedBuf *b;
    struct iovec *sg;
    uint64_t total = 0;

    /*
     * The buffer id is the last descriptor's.  Drivers put it in every
     * descriptor (Linux does), so map straight into the element the head's
     * id names if that one is free, and move the chain only if the last
     * descriptor says otherwise; else map into the scratch element.
     */
    head_id = vq_pword_id(w);
    tgt = likely(head_id < num && vq->elem_state[head_id] == VQ_ELEM_FREE) ?
          &vq->elems[head_id] : &vq->scratch;
    sg = tgt->inline_sg;
    cap = VIRTQUEUE_INLINE_SG;
    reg = vq->last_reg;
    /* Descriptors the driver can still have made available; it also
     * keeps @e on the free list, which has that many entries. */
    left = num - vq->inflight_slots;
    e = vq->pfree_head;         /* the entry of descriptor i */

    /* @w: descriptor i's len / id / flags, read once; flags checked */
    for (;;) {
        uint16_t flags = vq_pword_flags(w);
        uint32_t len = vq_pword_len(w);
        uint64_t addr = VQ_LOAD(&ring[i].addr);
        bool writable = flags & VRING_DESC_F_WRITE;
        uint64_t off = addr - reg->gpa;

        if (unlikely(left == 0)) {
            virtqueue_set_broken(vq, "buffer at slot %u makes more than %u "
                                 "descriptors available (chain loop or a "
                                 "driver lapping the device)",
                                 vq->last_avail_idx, num);
            return NULL;
        }
        left--;
        if (inflight) {
            /* The copy of the descriptor, in the next free entry. */
            VQ_STORE(vq_pentry_word(&r->desc[e]), vq_pentry_value(w));
            VQ_STORE(&r->desc[e].addr, addr);
        }
        if (unlikely(++i == num)) {
            i = 0;
            avail_bits ^= VQ_F_AVAIL | VQ_F_USED;
        }
        /* (The 4 GiB limit is checked once, after the walk; the long
         * slot, if the slow path moved there, has room for more.) */
        if (likely(!(flags & VRING_DESC_F_INDIRECT) &&
                   (writable || in_num == 0) && len != 0 &&
                   nsg < VIRTQUEUE_INLINE_SG &&
                   off < reg->size && len <= reg->size - off)) {
            sg[nsg].iov_base = reg->host + off;
            sg[nsg].iov_len = len;
            nsg++;
            in_num += writable;
            total += len;
        } else {
            VirtQueueDesc d = { .addr = addr, .len = len, .flags = flags };
            VirtQueueSgList s = {
                .sg = sg, .cap = cap, .nsg = nsg, .out_num = nsg - in_num,
                .in_num = in_num, .total = total,
            };

            if ((flags & VRING_DESC_F_INDIRECT) &&
                (left + 1 != num - vq->inflight_slots ||
                 (flags & VRING_DESC_F_NEXT))) {
                virtqueue_set_broken(vq, "indirect descriptor at slot %u is "
                                     "not the buffer's only descriptor",
                                     vq->last_avail_idx);
                return NULL;
            }
            if (!vq_packed_pop_map_slow(vq, tgt, vq->last_avail_idx, d, &s)) {
                return NULL;
            }
            sg = s.sg;
            cap = s.cap;
            nsg = s.nsg;
            in_num = s.in_num;
            total = s.total;
            reg = vq->last_reg;
            if (flags & VRING_DESC_F_INDIRECT) {
                break;
            }
        }
        if (!(flags & VRING_DESC_F_NEXT)) {
            break;
        }
        if (inflight) {
            e = vq->pnext[e];
        }
        /* The head's flags were loaded with acquire: the driver wrote
         * the rest of the chain before them. */
        w = VQ_LOAD(vq_pdesc_word(&ring[i]));
        if (unlikely((vq_pword_flags(w) & (VQ_F_AVAIL | VQ_F_USED)) !=
                     avail_bits)) {
            virtqueue_set_broken(vq, "descriptor %u of the buffer at slot "
                                 "%u is not available (flags 0x%x, wrap "
                                 "counter %u)", i, vq->last_avail_idx,
                                 vq_pword_flags(w),
                                 avail_bits == vq_packed_avail_bits(true));
            return NULL;
        }
    }

    if (unlikely(total > UINT32_MAX)) {
        virtqueue_set_broken(vq, "chain of head %u is longer than 4 GiB",
                             vq->last_avail_idx);
        return NULL;
    }
    id = vq_pword_id(w);
    if (likely(id == head_id && tgt != &vq->scratch)) {
        /* tgt is the element of @id, checked in range and free above */
        elem = tgt;
    } else if (unlikely(id >= num)) {
        virtqueue_set_broken(vq, "buffer at slot %u has id %u, queue size "
                             "%u", vq->last_avail_idx, id, num);
        return NULL;
    } else if (unlikely(vq->elem_state[id] != VQ_ELEM_FREE)) {
        virtqueue_set_broken(vq, "buffer id %u made available again while "
                             "in flight", id);
        return NULL;
    } else {
        elem = &vq->elems[id];
    }
    if (likely(tgt == elem)) {
        VirtQueueSgList s = {
            .sg = sg, .nsg = nsg, .out_num = nsg - in_num, .in_num = in_num,
        };

        virtqueue_elem_finish(elem, id, &s);
    } else {
        VirtQueueSgList s = {
            .sg = sg, .cap = cap, .nsg = nsg, .out_num = nsg - in_num,
            .in_num = in_num, .total = total,
        };

        elem = vq_packed_move(vq, tgt, id, &s);
    }
    count = num - vq->inflight_slots - left;
    last_e = e;
    b = &vq->pbuf[id];
    b->slots = count;
    b->head = vq->pfree_head;
    b->last = last_e;
    if (inflight) {
        VhostUserDescStatePacked *h = &r->desc[b->head];

        /*
         * The head entry, then the fetch commit (the vhost-user
         * specification's order): until old_free_head moves past them the
         * entries are on the free list, so a kill before it leaves the
         * buffer in the ring for the next instance to fetch again.
         * Compiler barrier: the region is read back only after a crash.
         */
        VQ_STORE(&h->counter, ++vq->inflight_counter);
        VQ_STORE(&h->num, count);
        VQ_STORE(&h->last, last_e);
        VQ_STORE(&h->inflight, 1);
        atomic_signal_fence(memory_order_release);
        e = vq->pnext[last_e];
        VQ_STORE(&r->free_head, e);
        VQ_STORE(&r->old_free_head, e);
        vq->pfree_head = e;
    }
    vq->inflight_slots += count;
    vq->last_avail_idx = i;
    vq->avail_wrap = avail_bits == vq_packed_avail_bits(true);
    if (vq->event_idx && vq->notification) {
        /* Kick me when you make the next slot available. */
        vq_packed_write_device_event(vq, VRING_PACKED_EVENT_FLAG_DESC);
    }
    vq->elem_state[id] = VQ_ELEM_POPPED;
    vq->inflight_count++;
    vq->stats.popped++;
    return elem;
}

/* Called from: the owner thread.  Hot path (see vq_packed_pop_buf()). */
VirtQueueElement *virtqueue_packed_pop(VirtQueue *vq)
{
    uint16_t avail_bits = vq_packed_avail_bits(vq->avail_wrap);
    uint64_t w;

    if (unlikely(vq->resubmit_pos < vq->resubmit_num)) {
        return vq_packed_pop_resubmit(vq);
    }
    /* Acquire: pairs with the driver's write barrier before it stores the
     * head's flags; the rest of the buffer is read after this. */
    w = VQ_LOAD_ACQUIRE(vq_pdesc_word(&vq->pdesc[vq->last_avail_idx]));
    if ((vq_pword_flags(w) & (VQ_F_AVAIL | VQ_F_USED)) != avail_bits &&
        !vq_packed_empty_recheck(vq, &w)) {
        return NULL;
    }
    if (vq->pinflight) {
        return vq_packed_pop_buf(vq, w, true);
    }
    return vq_packed_pop_buf(vq, w, false);
}

/*
 * The one place the packed ring writes a used descriptor into guest
 * memory: id and len, then the flags with release (the driver reads the
 * id, len, data and status after it saw the flags).
 */
static inline void vq_packed_write_used(struct vring_packed_desc *d,
                                        uint16_t id, uint32_t len, bool wrap)
{
    VQ_STORE(&d->id, id);
    VQ_STORE(&d->len, len);
    VQ_STORE_RELEASE(&d->flags, wrap ? (VQ_F_AVAIL | VQ_F_USED) : 0);
}

/*
 * Dirty logging of a push (logging on only): the element's device-writable
 * buffers, which the device filled before it pushed, and the used
 * descriptor just written at @slot.
 */
static void __attribute__((noinline, cold))
vq_packed_log_push(VirtQueue *vq, const VirtQueueElement *elem,
                   uint16_t slot)
{
    guest_mem_log_iov(vq->mem, elem->in_sg, elem->in_num);
    vq_packed_log(vq, &vq->pdesc[slot], sizeof(vq->pdesc[slot]));
}

/*
 * Called from: the owner thread.  Hot path.  The element was already
 * marked free by virtqueue_push().
 *
 * The vhost-user specification's order: the buffer's entries back on the
 * free list and the new used_idx / wrap counter, then the used descriptor
 * (vq_packed_write_used()), then inflight = 0 and the commit of
 * old_free_head, old_used_idx, old_used_wrap_counter.  A kill before the
 * flags store leaves the ring at old_used_idx showing the driver's
 * descriptor, and the restore rolls back; after it, the restore sees the
 * used descriptor and commits what this push wrote.
 *
 * The commit is per push, not per batch: the restore looks only at the
 * used descriptor at old_used_idx, and each push makes its used descriptor
 * visible at once, so with a batched commit a kill inside the second push
 * of a batch would have the restore commit that push too (its completion
 * lost) or roll back the first (completed twice).
 */
void virtqueue_packed_push(VirtQueue *vq, VirtQueueElement *elem,
                           uint32_t len)
{
    VhostUserQueueRegionPacked *r = vq->pinflight;
    uint16_t id = elem->head;
    const VirtQueuePackedBuf b = vq->pbuf[id];
    uint16_t slot = vq->used_idx;
    bool wrap = vq->used_wrap, new_wrap = wrap;
    unsigned int used = slot + b.slots;
    struct vring_packed_desc *d = &vq->pdesc[slot];

    if (used >= vq->num) {
        used -= vq->num;
        new_wrap = !wrap;
    }
    vq->used_idx = used;
    vq->used_wrap = new_wrap;
    vq->inflight_slots -= b.slots;
    if (r) {
        uint16_t free_head = vq->pfree_head;

        vq->pnext[b.last] = free_head;
        vq->pfree_head = b.head;
        VQ_STORE(&r->desc[b.last].next, free_head);
        VQ_STORE(&r->free_head, b.head);
        VQ_STORE(&r->used_idx, used);
        VQ_STORE(&r->used_wrap_counter, new_wrap);
        atomic_signal_fence(memory_order_release);
    }
    vq_packed_write_used(d, id, len, wrap);
    if (r) {
        /* In either order: the commit puts the head entry on the free
         * list, whose inflight flags the restore ignores. */
        VQ_STORE(&r->desc[b.head].inflight, 0);
        atomic_signal_fence(memory_order_release);
        VQ_STORE(&r->old_free_head, b.head);
        VQ_STORE(&r->old_used_idx, used);
        VQ_STORE(&r->old_used_wrap_counter, new_wrap);
    }
    vq->stats.pushed++;
    vq->pushed_since_notify++;
    if (unlikely(vq->log)) {
        /* After the stores; last, so that it is a tail call. */
        vq_packed_log_push(vq, elem, slot);
    }
}

/* Called from: the owner thread.  In reverse pop order. */
void virtqueue_packed_unpop(VirtQueue *vq, VirtQueueElement *elem)
{
    VhostUserQueueRegionPacked *r = vq->pinflight;
    uint16_t id = elem->head;
    const VirtQueuePackedBuf *b = &vq->pbuf[id];
    unsigned int n = b->slots;

    if (vq->elem_state[id] == VQ_ELEM_POPPED_RESUBMIT) {
        /* Still pending in the inflight region: replay it again. */
        assert(vq->resubmit_pos > 0);
        vq->resubmit[--vq->resubmit_pos] = id;
        vq->stats.resubmitted--;
        return;
    }
    if (vq->last_avail_idx >= n) {
        vq->last_avail_idx -= n;
    } else {
        vq->last_avail_idx += vq->num - n;
        vq->avail_wrap = !vq->avail_wrap;
    }
    vq->inflight_slots -= n;
    if (r) {
        /* Entries back on the free list first, then the flag: killed in
         * between, the next instance finds every entry either free or in
         * the chain of a buffer in flight (see the restore's accounting;
         * a free head entry's stale flag is cleared there). */
        vq->pnext[b->last] = vq->pfree_head;
        VQ_STORE(&r->desc[b->last].next, vq->pfree_head);
        vq->pfree_head = b->head;
        VQ_STORE(&r->free_head, b->head);
        atomic_signal_fence(memory_order_release);
        VQ_STORE(&r->old_free_head, b->head);
        atomic_signal_fence(memory_order_release);
        VQ_STORE(&r->desc[b->head].inflight, 0);
    }
}

/*
 * After the full barrier of virtqueue_notify(): does the driver want an
 * interrupt for what was pushed since the last decision?
 */
bool virtqueue_packed_need_notify(VirtQueue *vq)
{
    uint32_t ev = VQ_LOAD((uint32_t *)vq->driver_event);
    uint16_t flags = ev >> 16, off_wrap = ev & 0xffff;
    int old = vq->signalled_used, new = vq->used_idx, event;
    bool valid = vq->signalled_used_valid;

    if (vq->signalled_used_wrap != vq->used_wrap) {
        old -= vq->num;         /* the last decision was a lap ago */
    }
    vq->signalled_used = vq->used_idx;
    vq->signalled_used_wrap = vq->used_wrap;
    vq->signalled_used_valid = true;

    if (flags == VRING_PACKED_EVENT_FLAG_DISABLE) {
        return false;
    }
    if (flags != VRING_PACKED_EVENT_FLAG_DESC || !vq->event_idx || !valid) {
        return true;
    }
    event = off_wrap & ~VQ_WRAP_BIT;
    if (!!(off_wrap & VQ_WRAP_BIT) != vq->used_wrap) {
        event -= vq->num;
    }
    /* Interrupt if the slot the driver named lies in (old, new]. */
    return vring_need_event((uint16_t)event, (uint16_t)new, (uint16_t)old);
}

/* Called from: the owner thread. */
void virtqueue_packed_set_notification(VirtQueue *vq, bool on)
{
    uint16_t flags = VRING_PACKED_EVENT_FLAG_DISABLE;

    if (on) {
        flags = vq->event_idx ? VRING_PACKED_EVENT_FLAG_DESC
                              : VRING_PACKED_EVENT_FLAG_ENABLE;
    }
    vq_packed_write_device_event(vq, flags);
}

/* Called from: the owner thread.  No syscalls. */
bool virtqueue_packed_has_avail(VirtQueue *vq)
{
    return vq_packed_is_avail(VQ_LOAD(&vq->pdesc[vq->last_avail_idx].flags),
                              vq->avail_wrap);
}
