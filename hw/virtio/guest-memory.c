/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Guest memory map: mmap()s the regions the VMM shares and translates
 * guest-physical / VMM-virtual ranges into host pointers, strictly.
 *
 * Every region is mapped from the page that holds its mmap_offset, so a
 * region far into a large memfd does not map the memory before it and a
 * non-page-aligned offset still works.  Lookups scan the (at most 32)
 * regions linearly; in practice there are one to three of them.
 *
 * Every range check is written as "offset within region, then length
 * within what is left of the region", which cannot overflow: an address
 * plus a length that wraps around 2^64 never matches.
 */
#include "qemu/osdep.h"
#include "hw/virtio/guest-memory.h"
#include "qemu/error-report.h"
#include "qemu/sigbus-guard.h"

#include <sys/mman.h>
#include <sys/stat.h>

/* Called from: any thread that sets up a GuestMemory. */
void guest_mem_init(GuestMemory *mem)
{
    memset(mem, 0, sizeof(*mem));
}

static bool guest_mem_range_overlaps(uint64_t a, uint64_t a_size,
                                     uint64_t b, uint64_t b_size)
{
    /* Both ranges are known not to wrap. */
    return a < b + b_size && b < a + a_size;
}

/* Check that the file behind @fd is large enough for the mapping, so an
 * access cannot end in SIGBUS.  Only regular files (memfd, hugetlbfs, tmp
 * files) have a meaningful size; other fds are taken as they are. */
static bool guest_mem_check_fd_size(int fd, uint64_t end, GError **errp)
{
    struct stat st;

    if (fstat(fd, &st) < 0) {
        g_set_error(errp, VB_ERROR, 0, "memory region fd: fstat failed: %s",
                    g_strerror(errno));
        return false;
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size < end) {
        g_set_error(errp, VB_ERROR, 0,
                    "memory region needs %" PRIu64 " bytes of its file, "
                    "but the file has only %" PRIu64, end,
                    (uint64_t)st.st_size);
        return false;
    }
    return true;
}

/* Called from: the main thread, while no queue that reads @mem runs. */
bool guest_mem_add_region(GuestMemory *mem, const VhostUserMemoryRegion *r,
                          int fd, GError **errp)
{
    uint64_t gpa = r->guest_phys_addr;
    uint64_t size = r->memory_size;
    uint64_t uva = r->userspace_addr;
    uint64_t offset = r->mmap_offset;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t map_offset, delta;
    GuestMemRegion *reg;
    void *addr;
    unsigned i;

    if (mem->nregions >= ARRAY_SIZE(mem->regions)) {
        g_set_error(errp, VB_ERROR, 0,
                    "too many memory regions (at most %zu)",
                    ARRAY_SIZE(mem->regions));
        return false;
    }
    if (size == 0) {
        g_set_error(errp, VB_ERROR, 0, "memory region of size 0 at gpa 0x%"
                    PRIx64, gpa);
        return false;
    }
    if (gpa + size < gpa || uva + size < uva || offset + size < offset ||
        offset + size > (uint64_t)SIZE_MAX - page) {
        g_set_error(errp, VB_ERROR, 0,
                    "memory region gpa 0x%" PRIx64 " uva 0x%" PRIx64
                    " offset 0x%" PRIx64 " size 0x%" PRIx64
                    " wraps around the address space", gpa, uva, offset, size);
        return false;
    }
    if (fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "memory region at gpa 0x%" PRIx64
                    " comes without a file descriptor", gpa);
        return false;
    }
    for (i = 0; i < mem->nregions; i++) {
        const GuestMemRegion *o = &mem->regions[i];

        if (guest_mem_range_overlaps(gpa, size, o->gpa, o->size)) {
            g_set_error(errp, VB_ERROR, 0,
                        "memory region [0x%" PRIx64 ", 0x%" PRIx64
                        ") overlaps region [0x%" PRIx64 ", 0x%" PRIx64 ")",
                        gpa, gpa + size, o->gpa, o->gpa + o->size);
            return false;
        }
    }
    if (!guest_mem_check_fd_size(fd, offset + size, errp)) {
        return false;
    }

    map_offset = QEMU_ALIGN_DOWN(offset, page);
    delta = offset - map_offset;
    addr = mmap(NULL, size + delta, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_NORESERVE, fd, map_offset);
    if (addr == MAP_FAILED && errno == EINVAL && map_offset != 0) {
        /* hugetlbfs wants offsets aligned to its (larger) page size:
         * map the file from its start instead, as libvhost-user does. */
        map_offset = 0;
        delta = offset;
        addr = mmap(NULL, size + delta, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_NORESERVE, fd, 0);
    }
    if (addr == MAP_FAILED) {
        g_set_error(errp, VB_ERROR, 0,
                    "cannot map memory region gpa 0x%" PRIx64 " size 0x%"
                    PRIx64 " (offset 0x%" PRIx64 "): %s", gpa, size, offset,
                    g_strerror(errno));
        return false;
    }

    reg = &mem->regions[mem->nregions];
    /* A front-end that shrinks the file later must cost its own session
     * only, not a SIGBUS for the whole process. */
    reg->guard = 0;
    if (sigbus_guard_install(NULL)) {
        reg->guard = sigbus_guard_add(addr, size + delta, &mem->faulted) + 1;
    }
    if (!reg->guard) {
        static gsize warned;
        if (g_once_init_enter(&warned)) {
            g_once_init_leave(&warned, 1);
            warn_report("guest memory region not guarded against SIGBUS "
                        "(handler or slots unavailable)");
        }
    }
    reg->gpa = gpa;
    reg->size = size;
    reg->uva = uva;
    reg->mmap_offset = offset;
    reg->mmap_addr = addr;
    reg->mmap_size = size + delta;
    reg->host = (uint8_t *)addr + delta;
    mem->nregions++;
    return true;
}

static void guest_mem_unmap(GuestMemRegion *reg)
{
    if (reg->guard) {
        sigbus_guard_remove(reg->guard - 1);
    }
    if (reg->mmap_addr) {
        munmap(reg->mmap_addr, reg->mmap_size);
    }
    memset(reg, 0, sizeof(*reg));
}

/* Called from: the main thread, while no queue that reads @mem runs. */
bool guest_mem_remove_region(GuestMemory *mem, const VhostUserMemoryRegion *r,
                             GError **errp)
{
    unsigned i;

    for (i = 0; i < mem->nregions; i++) {
        GuestMemRegion *reg = &mem->regions[i];

        if (reg->gpa == r->guest_phys_addr &&
            reg->size == r->memory_size &&
            reg->uva == r->userspace_addr) {
            guest_mem_unmap(reg);
            memmove(reg, reg + 1, (mem->nregions - i - 1) * sizeof(*reg));
            mem->nregions--;
            memset(&mem->regions[mem->nregions], 0, sizeof(*reg));
            return true;
        }
    }
    g_set_error(errp, VB_ERROR, 0,
                "no memory region at gpa 0x%" PRIx64 " size 0x%" PRIx64
                " uva 0x%" PRIx64 " to remove", r->guest_phys_addr,
                r->memory_size, r->userspace_addr);
    return false;
}

/* Called from: the main thread, while no queue that reads @mem runs. */
void guest_mem_clear(GuestMemory *mem)
{
    unsigned i;

    for (i = 0; i < mem->nregions; i++) {
        guest_mem_unmap(&mem->regions[i]);
    }
    mem->nregions = 0;
    atomic_store_explicit(&mem->faulted, false, memory_order_release);
}

/* The region holding @gpa, or NULL. */
static const GuestMemRegion *guest_mem_find_gpa(const GuestMemory *mem,
                                                uint64_t gpa)
{
    unsigned i;

    for (i = 0; i < mem->nregions; i++) {
        const GuestMemRegion *reg = &mem->regions[i];

        if (gpa >= reg->gpa && gpa - reg->gpa < reg->size) {
            return reg;
        }
    }
    return NULL;
}

/* Called from: any thread (lock-free lookup). */
const GuestMemRegion *guest_mem_gpa_region(const GuestMemory *mem,
                                           uint64_t gpa)
{
    return guest_mem_find_gpa(mem, gpa);
}

/* Called from: any thread (lock-free lookup). */
void *guest_mem_gpa_to_host(const GuestMemory *mem, uint64_t gpa,
                            uint64_t len)
{
    const GuestMemRegion *reg = guest_mem_find_gpa(mem, gpa);
    uint64_t off;

    if (!reg) {
        return NULL;
    }
    off = gpa - reg->gpa;
    if (len > reg->size - off) {
        return NULL;
    }
    return reg->host + off;
}

/* Called from: any thread (lock-free lookup). */
void *guest_mem_uva_to_host(const GuestMemory *mem, uint64_t uva,
                            uint64_t len)
{
    unsigned i;

    for (i = 0; i < mem->nregions; i++) {
        const GuestMemRegion *reg = &mem->regions[i];

        if (uva >= reg->uva && uva - reg->uva < reg->size) {
            uint64_t off = uva - reg->uva;

            if (len > reg->size - off) {
                /* Regions may be adjacent in VMM space too; the rings
                 * must still lie in one mapping. */
                continue;
            }
            return reg->host + off;
        }
    }
    return NULL;
}

/* Called from: any thread (lock-free lookup).  Hot path: no allocation. */
int guest_mem_gpa_to_iovec(const GuestMemory *mem, uint64_t gpa,
                           uint64_t len, struct iovec *iov, int max)
{
    int n = 0;

    if (len != 0 && gpa + (len - 1) < gpa) {
        return -EFAULT;
    }
    while (len > 0) {
        const GuestMemRegion *reg = guest_mem_find_gpa(mem, gpa);
        uint64_t off, chunk;

        if (!reg) {
            return -EFAULT;
        }
        if (n >= max) {
            return -ENOBUFS;
        }
        off = gpa - reg->gpa;
        chunk = MIN(len, reg->size - off);
        iov[n].iov_base = reg->host + off;
        iov[n].iov_len = chunk;
        n++;
        gpa += chunk;
        len -= chunk;
    }
    return n;
}
