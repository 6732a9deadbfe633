/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Virtqueue, device side: split (VIRTIO 1.2 section 2.7) or packed (2.8)
 * ring, as used by a
 * vhost-user back-end: the rings live in guest memory, the kick and call
 * eventfds come from the VMM.
 *
 * Threads: a running VirtQueue is owned by one iothread; every function
 * below except the setup ones is called only from that thread.  Setup
 * (virtqueue_init/set_*, virtqueue_start) happens while the queue is
 * stopped.
 *
 * No allocation per request: virtqueue_start() allocates one element per
 * descriptor head (queue size); popping hands out the element of the
 * chain's head, and pushing gives it back.  An element holds
 * VIRTQUEUE_INLINE_SG iovecs itself (a Linux guest's 4 KiB request needs
 * three); a longer chain moves to the head's slot of VIRTQUEUE_MAX_SG
 * iovecs in one block reserved for the queue, whose pages become resident
 * only when a long chain first uses them.  elem->sg points to whichever is
 * in use.
 *
 * Bad guest input (index jumps, loops, chains longer than the queue,
 * descriptors outside guest memory, nested indirect tables, ...) marks the
 * queue broken: virtqueue_pop() returns NULL, virtqueue_is_broken() is true
 * and a log line says what was wrong.  The owner then drops the session.
 */
#ifndef HW_VIRTIO_VIRTQUEUE_H
#define HW_VIRTIO_VIRTQUEUE_H

#include "qemu/osdep.h"
#include "qemu/event_notifier.h"
#include "hw/virtio/guest-memory.h"
#include "hw/virtio/vhost-user-proto.h"

#define VIRTQUEUE_MAX_SIZE 1024
/*
 * Descriptors per request the device is sized for: a virtio-blk export
 * advertises seg_max = min(queue size, VIRTQUEUE_MAX_SEG) - 2 (data
 * segments plus header and status).
 */
#define VIRTQUEUE_MAX_SEG  256
/*
 * iovecs per element (in + out), after splitting at guest memory region
 * boundaries.  Twice VIRTQUEUE_MAX_SEG, so a conforming request of the
 * largest size stays mappable even if each of its descriptors crosses a
 * region boundary (one descriptor, two host iovecs).
 */
#define VIRTQUEUE_MAX_SG   (2 * VIRTQUEUE_MAX_SEG)
/* iovecs kept in the element itself; longer chains use the queue's
 * per-head slot of VIRTQUEUE_MAX_SG */
#define VIRTQUEUE_INLINE_SG 8

typedef struct VirtQueueElement {
    uint16_t head;              /* descriptor head (split) or buffer id
                                 * (packed): stable index, 0..size-1 */
    unsigned int out_num;       /* device-readable iovecs */
    unsigned int in_num;        /* device-writable iovecs */
    struct iovec *out_sg;       /* = sg */
    struct iovec *in_sg;        /* = sg + out_num */
    struct iovec *sg;           /* inline_sg or the element's long slot */
    /* its long slot in the queue + 1; 0: the slot of its own index (so
     * that starting a queue does not touch the element pool) */
    uint16_t long_slot;
    struct iovec inline_sg[VIRTQUEUE_INLINE_SG];
} VirtQueueElement;

typedef struct VirtQueue VirtQueue;

typedef struct VirtQueueStats {
    uint64_t popped;
    uint64_t pushed;
    uint64_t notifies;          /* call eventfd writes */
    uint64_t notifies_suppressed; /* push batches that needed no interrupt */
    uint64_t resubmitted;       /* requests replayed from the inflight region */
} VirtQueueStats;

VirtQueue *virtqueue_new(unsigned int index);
void virtqueue_free(VirtQueue *vq);
unsigned int virtqueue_get_index(VirtQueue *vq);

/* Setup (queue stopped).  Each returns false with @errp set on bad input. */
bool virtqueue_set_num(VirtQueue *vq, unsigned int num, GError **errp);
/* Ring addresses are VMM virtual addresses (SET_VRING_ADDR) */
bool virtqueue_set_addr(VirtQueue *vq, const VhostUserVringAddr *addr,
                        GError **errp);
/* Split: the next avail index.  Packed (the encoding QEMU uses): bits 0-14
 * the next descriptor slot, bit 15 its wrap counter; bits 16-30 the next
 * used slot, bit 31 its wrap counter.  Checked at start. */
void virtqueue_set_base(VirtQueue *vq, uint32_t base);
/* The base as above, of where the device is (GET_VRING_BASE). */
uint32_t virtqueue_get_base(VirtQueue *vq);
/* Takes ownership of the fds (-1 = none). */
void virtqueue_set_kick_fd(VirtQueue *vq, int fd);
void virtqueue_set_call_fd(VirtQueue *vq, int fd);
/* Interrupt the driver once, unconditionally (queue start, new call fd). */
void virtqueue_signal_call(VirtQueue *vq);
int virtqueue_get_kick_fd(VirtQueue *vq);
void virtqueue_set_event_idx(VirtQueue *vq, bool on);   /* negotiated */
/* VIRTIO_F_RING_PACKED negotiated: the rings are a packed descriptor ring
 * (desc_user_addr), the driver event suppression area (avail_user_addr)
 * and the device event suppression area (used_user_addr). */
void virtqueue_set_packed(VirtQueue *vq, bool on);
bool virtqueue_is_packed(VirtQueue *vq);
/* VHOST_F_LOG_ALL negotiated: from the next start, mark every guest page
 * the queue writes in the dirty log of the GuestMemory it starts with (if
 * one is mapped), and the used ring at the address's log_guest_addr when
 * its flags have VHOST_VRING_F_LOG. */
void virtqueue_set_log(VirtQueue *vq, bool on);
void virtqueue_set_enabled(VirtQueue *vq, bool on);
bool virtqueue_is_enabled(VirtQueue *vq);
/* Per-queue inflight region (NULL = none): a VhostUserQueueRegionSplit or,
 * for a packed queue, a VhostUserQueueRegionPacked (vhost-user-proto.h);
 * zeroed by the VMM on first use. */
void virtqueue_set_inflight(VirtQueue *vq, void *region);
/*
 * Test hook, never defined in the daemon: the inflight restore of either
 * ring format calls it (when a program defines it) once it has read and
 * checked the region and before it uses what it read, so a test can play a
 * front-end rewriting the region at the worst moment.  Weak: in the daemon
 * the call is one NULL test per queue start.
 */
void virtqueue_inflight_restore_hook(VirtQueue *vq, void *region)
    __attribute__((weak));
/* Whether num, addr and kick are all set so the queue can start. */
bool virtqueue_is_ready(VirtQueue *vq);

/* Translate the ring addresses through @mem and allocate the element
 * pool.  If an inflight region is set and holds requests from a previous
 * back-end instance, they are queued for resubmission: the next pops return
 * them first, in their original order.  false + @errp if the rings are not
 * in guest memory or the inflight region is inconsistent. */
bool virtqueue_start(VirtQueue *vq, const GuestMemory *mem, GError **errp);
/* Forget the ring pointers (the element pool is kept). */
void virtqueue_stop(VirtQueue *vq);
bool virtqueue_is_started(VirtQueue *vq);

/* Pop the next available chain, or NULL (empty, or broken). */
VirtQueueElement *virtqueue_pop(VirtQueue *vq);
/* Return a popped element to the used ring with @len bytes written to its
 * in_sg.  Does not notify. */
void virtqueue_push(VirtQueue *vq, VirtQueueElement *elem, uint32_t len);
/* Give back a popped element without using it (it will be popped again).
 * Several elements must be given back in reverse pop order. */
void virtqueue_unpop(VirtQueue *vq, VirtQueueElement *elem);
/* Interrupt the driver if it wants one for what was pushed since the last
 * notify (event-idx or VRING_AVAIL_F_NO_INTERRUPT). One eventfd write at
 * most. */
void virtqueue_notify(VirtQueue *vq);
/* The driver has not wanted an interrupt for a whole ring of completions:
 * it polls its used ring. */
bool virtqueue_driver_polls(const VirtQueue *vq);
/* Driver notifications: on = ask for kicks; off = suppress (while
 * polling). With event-idx this writes avail_event. */
void virtqueue_set_notification(VirtQueue *vq, bool on);
/* Cheap check, no syscalls: is there an available chain not yet popped? */
bool virtqueue_has_avail(VirtQueue *vq);
unsigned int virtqueue_inflight_count(VirtQueue *vq);

bool virtqueue_is_broken(VirtQueue *vq);
/* Owner thread, once per batch: if the front-end shrank the file behind
 * guest memory under us (see guest_mem_faulted()), break the queue with
 * a message saying so.  Returns false when the queue is (now) broken. */
bool virtqueue_check_memory(VirtQueue *vq);
/* Mark broken with a reason (logged once). */
void virtqueue_set_broken(VirtQueue *vq, const char *fmt, ...)
    G_GNUC_PRINTF(2, 3);
void virtqueue_get_stats(VirtQueue *vq, VirtQueueStats *stats);

#endif
