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

    /*
     * Dirty log (vhost-user SET_LOG_BASE with LOG_SHMFD): one bit per
     * GUEST_MEM_LOG_PAGE bytes of guest-physical address space, bit
     * (page % 8) of byte (page / 8), set with atomic ORs because the VMM
     * reads and clears it concurrently.  NULL: no log mapped.  Changed only
     * while every queue that writes guest memory is stopped.
     */
    uint8_t *log;
    uint64_t log_size;          /* bytes of log */
    void *log_mmap_addr;
    size_t log_mmap_size;
    int log_guard;              /* SIGBUS guard handle + 1; 0: none */
    /* SET_LOG_FD: eventfd written after a batch logged writes; -1: none
     * (owned by whoever set it) */
    int log_call_fd;
} GuestMemory;

#define GUEST_MEM_LOG_PAGE_SHIFT 12
#define GUEST_MEM_LOG_PAGE (1ULL << GUEST_MEM_LOG_PAGE_SHIFT)

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


/*
 * Dirty log.  Main thread, no queue writing guest memory running.
 * guest_mem_set_log() maps @size bytes of @fd at @offset as the log
 * (replacing any previous one) and guards it against SIGBUS like the
 * regions (a fault sets mem->faulted).  Refuses a zero or huge size, an
 * offset + size that wraps or lies past the end of a regular file.  Takes
 * no ownership of @fd.
 */
bool guest_mem_set_log(GuestMemory *mem, int fd, uint64_t size,
                       uint64_t offset, GError **errp);
void guest_mem_clear_log(GuestMemory *mem);
/* Whether the mapped log has a bit for every page of [gpa, gpa + len). */
bool guest_mem_log_covers(const GuestMemory *mem, uint64_t gpa, uint64_t len);
/* false + @errp unless the log covers every region of the table. */
bool guest_mem_log_check_regions(const GuestMemory *mem, GError **errp);

/*
 * The logging helpers every ring format calls after the device wrote guest
 * memory (and never before the write: the VMM may read and clear a bit at
 * any time, and a bit set before the write could be cleared and its page
 * sent while the old contents are still there).  Any thread; lock-free;
 * a page outside the log is skipped, never written past its end.  Call
 * them only when logging is on: they cost a region lookup per iovec.
 */
/* Mark the pages of [gpa, gpa + len) (len > 0). */
void guest_mem_log_gpa(const GuestMemory *mem, uint64_t gpa, uint64_t len);
/* Mark the pages under @n iovecs that point into guest memory (host
 * pointers from this table's translations, e.g. an element's in_sg). */
void guest_mem_log_iov(const GuestMemory *mem, const struct iovec *iov,
                       unsigned int n);
/* Mark the pages under [p, p + len), a host pointer into guest memory
 * (e.g. a ring entry the device just wrote, found by its VMM address). */
static inline void guest_mem_log_host(const GuestMemory *mem, const void *p,
                                      size_t len)
{
    struct iovec iov = { .iov_base = (void *)p, .iov_len = len };

    guest_mem_log_iov(mem, &iov, 1);
}

#endif
