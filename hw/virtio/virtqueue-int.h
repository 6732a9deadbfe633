/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Internal to hw/virtio/virtqueue*.c: the VirtQueue itself and what the
 * split ring (virtqueue.c) and the packed ring (virtqueue-packed.c) share.
 *
 * Shared: the queue's setup state, the element pool indexed by head (split)
 * or buffer id (packed), descriptor mapping (bounds checks, translation
 * cache, inline and long iovec slots, readable-before-writable order, the
 * 4 GiB limit), indirect table checks, marking the queue broken, replay
 * ordering.  Each ring format keeps only how descriptors are found, how
 * used buffers are returned, event suppression and its inflight layout.
 */
#ifndef HW_VIRTIO_VIRTQUEUE_INT_H
#define HW_VIRTIO_VIRTQUEUE_INT_H

#include "hw/virtio/virtqueue.h"
#include <linux/virtio_ring.h>

/*
 * Every access to memory the driver shares with us goes through these, so
 * the memory-model test (tests/unit/test-virtqueue-tso.c) can build the
 * virtqueue with CONFIG_VIRTQUEUE_MODEL and replay each one through a
 * simulated store buffer.  In the daemon they are the C11 atomics named.
 */
#ifdef CONFIG_VIRTQUEUE_MODEL
#include "hw/virtio/virtqueue-model.h"
#else
/* Single, untorn loads and stores of guest-shared fields */
#define VQ_LOAD(p)        __atomic_load_n((p), __ATOMIC_RELAXED)
#define VQ_STORE(p, v)    __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define VQ_LOAD_ACQUIRE(p)      __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define VQ_STORE_RELEASE(p, v)  __atomic_store_n((p), (v), __ATOMIC_RELEASE)
/* Full barrier (smp_mb) */
#define VQ_MB()           atomic_thread_fence(memory_order_seq_cst)
#endif

/* elem_state[] values */
enum {
    VQ_ELEM_FREE = 0,
    VQ_ELEM_POPPED = 1,
    VQ_ELEM_POPPED_RESUBMIT = 2,    /* popped from the resubmit list */
};

#define VQ_INFLIGHT_VERSION 1

/* Packed ring: what the pop of a buffer took, by its buffer id; one
 * array so that push and pop find all three in one place. */
typedef struct VirtQueuePackedBuf {
    uint16_t slots;             /* ring slots (= region entries) */
    uint16_t head;              /* region entry of its head */
    uint16_t last;              /* region entry of its last descriptor */
} VirtQueuePackedBuf;

struct VirtQueue {
    unsigned int index;
    unsigned int num;
    bool addr_set;
    VhostUserVringAddr addr;
    EventNotifier kick;
    EventNotifier call;
    bool event_idx;
    bool packed;                /* VIRTIO_F_RING_PACKED negotiated */
    bool enabled;
    bool started;
    bool broken;
    bool notification;          /* driver kicks wanted */
    bool log_on;                /* VHOST_F_LOG_ALL negotiated (setup) */
    bool log;                   /* started with a dirty log: mark writes */
    bool log_used;              /* split: used ring writes at log_guest_addr */
    uint32_t base;              /* as SET_VRING_BASE gave it */

    /* Split rings, valid while started */
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    const GuestMemory *mem;

    uint16_t last_avail_idx;    /* next avail entry (packed: ring slot) */
    uint16_t shadow_avail_idx;  /* last avail->idx we read (split) */
    uint16_t used_idx;          /* split: our used->idx; packed: next slot */
    uint16_t used_flags;        /* our copy of used->flags */
    uint16_t signalled_used;    /* used_idx at the last notify decision */
    bool signalled_used_valid;
    unsigned int pushed_since_notify;
    /* Pushed since the driver last wanted an interrupt, counted up to
     * num: num or more means it polls (virtqueue_driver_polls()). */
    unsigned int quiet_pushed;

    /* Packed ring (VIRTIO 1.2 2.8), valid while started */
    struct vring_packed_desc *pdesc;
    struct vring_packed_desc_event *driver_event;   /* driver area */
    struct vring_packed_desc_event *device_event;   /* device area */
    bool avail_wrap;            /* wrap counter at last_avail_idx */
    bool used_wrap;             /* wrap counter at used_idx */
    bool signalled_used_wrap;
    bool base_set;              /* SET_VRING_BASE since the last start */
    unsigned int inflight_slots;    /* ring slots of popped, unused buffers */
    VirtQueuePackedBuf *pbuf;   /* per buffer id, while it is in flight */
    uint16_t *pnext;            /* our copy of the region's entry links */
    uint16_t pfree_head;        /* our copy of the region's free_head */
    /* A chain is mapped here before its buffer id (in its last
     * descriptor) is known; its long slot is the spare one. */
    VirtQueueElement scratch;

    /* Element pool, one per head / buffer id (pool_num of them) */
    unsigned int pool_num;
    VirtQueueElement *elems;
    struct iovec *long_sg;      /* pool_num slots of VIRTQUEUE_MAX_SG */
    size_t long_sg_bytes;       /* size of its mapping */
    const GuestMemRegion *last_reg;     /* translation cache, never NULL */
    uint8_t *elem_state;
    unsigned int inflight_count;

    /* Inflight tracking and replay */
    void *inflight_region;      /* as set; one of the two below at start */
    VhostUserQueueRegionSplit *inflight;
    VhostUserQueueRegionPacked *pinflight;
    uint64_t inflight_counter;
    uint16_t *resubmit;         /* heads / region entries to replay */
    unsigned int resubmit_num;
    unsigned int resubmit_pos;

    VirtQueueStats stats;
};

/* A descriptor as both formats have it, read once from shared memory. */
typedef struct VirtQueueDesc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;             /* VRING_DESC_F_WRITE / _INDIRECT / _NEXT */
} VirtQueueDesc;

/* The iovecs a chain is mapped into so far. */
typedef struct VirtQueueSgList {
    struct iovec *sg;                   /* elem->inline_sg or the long slot */
    unsigned int cap;                   /* iovecs @sg can hold */
    unsigned int nsg;                   /* = out_num + in_num */
    unsigned int out_num;
    unsigned int in_num;
    uint64_t total;                     /* bytes */
} VirtQueueSgList;

typedef struct VirtQueueReplay {
    uint64_t counter;
    uint16_t head;
} VirtQueueReplay;

extern const GuestMemRegion virtqueue_no_region;

int virtqueue_map_buf_slow(VirtQueue *vq, uint64_t gpa, uint32_t len,
                           struct iovec *iov, unsigned int room);
int virtqueue_map_desc_slow(VirtQueue *vq, VirtQueueElement *elem,
                            uint16_t head, const VirtQueueDesc *d,
                            VirtQueueSgList *s, int err);
/* Check an indirect descriptor's table (size, alignment, in guest memory,
 * contiguous here) and return it, or NULL (queue broken). */
const void *virtqueue_indirect_table(VirtQueue *vq, uint16_t head,
                                     const VirtQueueDesc *d,
                                     unsigned int *ntable);
int virtqueue_replay_cmp(const void *a, const void *b);

/* Between check and use in the inflight restores (tests only, see
 * virtqueue_inflight_restore_hook()). */
static inline void virtqueue_restore_test_point(VirtQueue *vq, void *region)
{
    if (virtqueue_inflight_restore_hook) {
        virtqueue_inflight_restore_hook(vq, region);
    }
}

/*
 * Map a descriptor's buffer (len > 0) into at most @room iovecs at @iov.
 * Returns the number used, -EFAULT (outside guest memory) or -ENOBUFS.
 * The check is "offset within the region, then length within the rest of
 * it", which cannot overflow.
 */
static inline int virtqueue_map_buf(VirtQueue *vq, uint64_t gpa,
                                    uint32_t len, struct iovec *iov,
                                    unsigned int room)
{
    const GuestMemRegion *reg = vq->last_reg;
    uint64_t off = gpa - reg->gpa;

    if (likely(off < reg->size && len <= reg->size - off && room > 0)) {
        iov->iov_base = reg->host + off;
        iov->iov_len = len;
        return 1;
    }
    return virtqueue_map_buf_slow(vq, gpa, len, iov, room);
}

/*
 * Append data descriptor @d to @s: device-readable ones before writable
 * ones, 4 GiB per chain at most, its buffer inside guest memory.  Returns
 * false (queue broken) otherwise.  Hot path: once per descriptor, for both
 * ring formats.
 */
static inline bool virtqueue_map_desc(VirtQueue *vq, VirtQueueElement *elem,
                                      uint16_t head, const VirtQueueDesc *d,
                                      VirtQueueSgList *s)
{
    bool writable = d->flags & VRING_DESC_F_WRITE;
    int n;

    if (unlikely(!writable && s->in_num > 0)) {
        virtqueue_set_broken(vq, "device-readable descriptor after a "
                             "device-writable one in chain of head %u", head);
        return false;
    }
    s->total += d->len;
    if (unlikely(s->total > UINT32_MAX)) {
        virtqueue_set_broken(vq, "chain of head %u is longer than 4 GiB",
                             head);
        return false;
    }
    if (unlikely(d->len == 0)) {
        return true;
    }
    n = virtqueue_map_buf(vq, d->addr, d->len, s->sg + s->nsg,
                          s->cap - s->nsg);
    if (unlikely(n < 0)) {
        n = virtqueue_map_desc_slow(vq, elem, head, d, s, n);
        if (n < 0) {
            return false;
        }
    }
    s->nsg += n;
    if (writable) {
        s->in_num += n;
    } else {
        s->out_num += n;
    }
    return true;
}

/* The long slot an element's long chains go to. */
static inline unsigned int virtqueue_elem_long_slot(const VirtQueue *vq,
                                                    const VirtQueueElement *e)
{
    return e->long_slot ? e->long_slot - 1u : (unsigned int)(e - vq->elems);
}

/* A mapped chain becomes element @head. */
static inline void virtqueue_elem_finish(VirtQueueElement *elem,
                                         uint16_t head,
                                         const VirtQueueSgList *s)
{
    elem->head = head;
    elem->out_num = s->out_num;
    elem->in_num = s->in_num;
    elem->sg = s->sg;
    elem->out_sg = s->sg;
    elem->in_sg = s->sg + s->out_num;
}

/* Packed ring (virtqueue-packed.c), called by the format-neutral entry
 * points of virtqueue.c when vq->packed. */
bool virtqueue_packed_map(VirtQueue *vq, const GuestMemory *mem,
                          GError **errp);
bool virtqueue_packed_start(VirtQueue *vq, GError **errp);
VirtQueueElement *virtqueue_packed_pop(VirtQueue *vq);
void virtqueue_packed_push(VirtQueue *vq, VirtQueueElement *elem,
                           uint32_t len);
void virtqueue_packed_unpop(VirtQueue *vq, VirtQueueElement *elem);
bool virtqueue_packed_need_notify(VirtQueue *vq);
void virtqueue_packed_set_notification(VirtQueue *vq, bool on);
bool virtqueue_packed_has_avail(VirtQueue *vq);
uint32_t virtqueue_packed_get_base(VirtQueue *vq);

#endif
