/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Guest memory as the VMM shared it (SET_MEM_TABLE / ADD_MEM_REG): a small
 * table of mmap()ed regions, and strict translation of guest-physical and
 * VMM-virtual addresses into pointers in this process.
 *
 * Translation only succeeds when the whole range [addr, addr + len) lies in
 * one region and does not wrap; callers that need to cross a region boundary
 * translate piecewise (guest_mem_gpa_to_iovec()).
 *
 * Threads: the table is changed only while every queue that reads it is
 * stopped (the vhost-user server guarantees this); lookups are lock-free.
 */
#ifndef HW_VIRTIO_GUEST_MEMORY_H
#define HW_VIRTIO_GUEST_MEMORY_H

#include "qemu/osdep.h"
#include "hw/virtio/vhost-user-proto.h"

typedef struct GuestMemRegion {
    uint64_t gpa;               /* guest physical start */
    uint64_t size;
    uint64_t uva;               /* VMM virtual start */
    uint64_t mmap_offset;
    void *mmap_addr;            /* what mmap() returned */
    size_t mmap_size;           /* size + (mmap_offset - mapped offset) */
    uint8_t *host;              /* gpa's pointer in this process */
    int guard;                  /* SIGBUS guard handle + 1; 0: none */
} GuestMemRegion;

typedef struct GuestMemory {
    unsigned nregions;
    GuestMemRegion regions[VHOST_USER_MAX_MEM_SLOTS];
    /* Set by the SIGBUS guard when an access hit a page the front-end
     * removed from a region's file (it shrank the file after
     * SET_MEM_TABLE); the page now reads as zeros.  Cleared by
     * guest_mem_clear(). */
    _Atomic bool faulted;
} GuestMemory;

/* Any thread: has a guarded access faulted since the regions were set? */
static inline bool guest_mem_faulted(const GuestMemory *mem)
{
    return atomic_load_explicit((_Atomic bool *)&mem->faulted,
                                memory_order_acquire);
}

void guest_mem_init(GuestMemory *mem);
/* mmap @fd (MAP_SHARED, read-write) and add the region.  Rejects a zero
 * size, overflowing ranges, a region overlapping another (in guest-physical
 * space), a full table, a regular file shorter than mmap_offset + size.
 * The mapping starts at the page holding mmap_offset (any offset works).
 * Takes no ownership of @fd (the caller closes it). */
bool guest_mem_add_region(GuestMemory *mem, const VhostUserMemoryRegion *r,
                          int fd, GError **errp);
/* Remove the region matching gpa/size/uva exactly; false if none. */
bool guest_mem_remove_region(GuestMemory *mem, const VhostUserMemoryRegion *r,
                             GError **errp);
/* Unmap everything. */
void guest_mem_clear(GuestMemory *mem);

/* NULL unless [gpa, gpa + len) lies in one region (len may be 0: then
 * gpa itself must be inside a region). */
void *guest_mem_gpa_to_host(const GuestMemory *mem, uint64_t gpa,
                            uint64_t len);
void *guest_mem_uva_to_host(const GuestMemory *mem, uint64_t uva,
                            uint64_t len);
/* The region holding @gpa, or NULL.  The pointer stays valid until the
 * table changes (add, remove, clear). */
const GuestMemRegion *guest_mem_gpa_region(const GuestMemory *mem,
                                           uint64_t gpa);
/* Map [gpa, gpa + len) into at most @max iovecs (splitting at region
 * boundaries).  Returns the number used, or -EFAULT (outside memory,
 * wraps) or -ENOBUFS (more than @max pieces). */
int guest_mem_gpa_to_iovec(const GuestMemory *mem, uint64_t gpa,
                           uint64_t len, struct iovec *iov, int max);

#endif
