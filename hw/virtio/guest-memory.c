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

#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>

/* Called from: any thread that sets up a GuestMemory. */
void guest_mem_init(GuestMemory *mem)
{
    memset(mem, 0, sizeof(*mem));
    mem->log_call_fd = -1;
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

/*
 * The page size the kernel maps @fd with: hugetlbfs files are mapped (and
 * faulted, and lost to a truncation) in huge pages, everything else in
 * base pages.
 */
static uint64_t guest_mem_fd_page(int fd, uint64_t page)
{
    struct statfs sfs;

    if (fstatfs(fd, &sfs) == 0 && sfs.f_type == HUGETLBFS_MAGIC &&
        (uint64_t)sfs.f_bsize > page) {
        return sfs.f_bsize;
    }
    return page;
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
    /*
     * A front-end that shrinks the file later must cost its own session
     * only, not a SIGBUS for the whole process.  The guard covers what the
     * kernel mapped: whole pages (huge ones on hugetlbfs), so also the
     * last page of a region whose size is not a multiple of the page --
     * its tail past the region is still a page of this mapping, and the
     * handler replaces that page as a whole.
     */
    reg->guard = 0;
    if (sigbus_guard_install(NULL)) {
        uint64_t mapped = QEMU_ALIGN_UP(size + delta,
                                        guest_mem_fd_page(fd, page));

        reg->guard = sigbus_guard_add(addr, mapped, &mem->faulted) + 1;
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

/* ---- dirty log -------------------------------------------------------- */

/* Called from: the main thread, no queue writing guest memory running. */
void guest_mem_clear_log(GuestMemory *mem)
{
    if (mem->log_guard) {
        sigbus_guard_remove(mem->log_guard - 1);
    }
    if (mem->log_mmap_addr) {
        munmap(mem->log_mmap_addr, mem->log_mmap_size);
    }
    mem->log = NULL;
    mem->log_size = 0;
    mem->log_mmap_addr = NULL;
    mem->log_mmap_size = 0;
    mem->log_guard = 0;
}

/* Called from: the main thread, no queue writing guest memory running. */
bool guest_mem_set_log(GuestMemory *mem, int fd, uint64_t size,
                       uint64_t offset, GError **errp)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t map_offset, delta;
    void *addr;

    if (fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "dirty log comes without a file "
                    "descriptor (the front-end must send one with "
                    "VHOST_USER_PROTOCOL_F_LOG_SHMFD)");
        return false;
    }
    /* 1 TiB of log covers 32 PiB of guest memory: anything larger is a
     * broken or hostile front-end. */
    if (size == 0 || size > (1ULL << 40) || offset > UINT64_MAX - size ||
        offset + size > (uint64_t)SIZE_MAX - page) {
        g_set_error(errp, VB_ERROR, 0, "dirty log of %" PRIu64 " bytes at "
                    "offset %" PRIu64 " is empty, too large or wraps",
                    size, offset);
        return false;
    }
    if (!guest_mem_check_fd_size(fd, offset + size, errp)) {
        g_prefix_error(errp, "dirty log: ");
        return false;
    }
    map_offset = QEMU_ALIGN_DOWN(offset, page);
    delta = offset - map_offset;
    addr = mmap(NULL, size + delta, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_NORESERVE, fd, map_offset);
    if (addr == MAP_FAILED) {
        g_set_error(errp, VB_ERROR, 0, "cannot map the dirty log (%" PRIu64
                    " bytes at offset %" PRIu64 "): %s", size, offset,
                    g_strerror(errno));
        return false;
    }

    guest_mem_clear_log(mem);
    /* QEMU seals its log memfd; a front-end that does not and shrinks the
     * file costs its own session (the fault flag), not the process. */
    if (sigbus_guard_install(NULL)) {
        /* the mapping, and so a fault, covers whole pages */
        mem->log_guard = sigbus_guard_add(addr,
                                          QEMU_ALIGN_UP(size + delta, page),
                                          &mem->faulted) + 1;
    }
    if (!mem->log_guard) {
        warn_report("dirty log not guarded against SIGBUS (handler or "
                    "slots unavailable)");
    }
    mem->log_mmap_addr = addr;
    mem->log_mmap_size = size + delta;
    mem->log = (uint8_t *)addr + delta;
    mem->log_size = size;
    return true;
}

/* Called from: any thread. */
bool guest_mem_log_covers(const GuestMemory *mem, uint64_t gpa, uint64_t len)
{
    uint64_t last;

    if (!mem->log || len == 0 || gpa + (len - 1) < gpa) {
        return false;
    }
    last = (gpa + (len - 1)) >> GUEST_MEM_LOG_PAGE_SHIFT;
    return last / 8 < mem->log_size;
}

/* Called from: the main thread. */
bool guest_mem_log_check_regions(const GuestMemory *mem, GError **errp)
{
    for (unsigned i = 0; i < mem->nregions; i++) {
        const GuestMemRegion *reg = &mem->regions[i];

        if (!guest_mem_log_covers(mem, reg->gpa, reg->size)) {
            uint64_t pages = (reg->gpa + reg->size - 1) /
                             GUEST_MEM_LOG_PAGE + 1;

            g_set_error(errp, VB_ERROR, 0,
                        "dirty log of %" PRIu64 " bytes is too small for "
                        "guest memory up to 0x%" PRIx64 " (needs %" PRIu64
                        " bytes: one bit per 4 KiB page)", mem->log_size,
                        reg->gpa + reg->size, (pages + 7) / 8);
            return false;
        }
    }
    return true;
}

/*
 * Set the bit of @page.  The caller's full barrier orders the guest memory
 * stores being recorded before this load and the OR (see
 * guest_mem_log_gpa()).  The bitmap is shared with the VMM, which clears
 * bits while it syncs the log: each bit is loaded once and the decision
 * made on that value.
 */
static inline void guest_mem_log_page(uint8_t *log, uint64_t page)
{
    uint8_t bit = 1u << (page % 8);
    uint8_t *byte = &log[page / 8];

    /* Skip the locked OR when the bit is already set (most writes during
     * a migration land in pages dirtied a moment ago): safe after the full
     * barrier, see guest_mem_log_gpa(). */
    if (!(__atomic_load_n(byte, __ATOMIC_RELAXED) & bit)) {
        __atomic_fetch_or(byte, bit, __ATOMIC_RELAXED);
    }
}

/* Called from: any thread.  Logging on only. */
void guest_mem_log_gpa(const GuestMemory *mem, uint64_t gpa, uint64_t len)
{
    uint8_t *log = mem->log;
    uint64_t first, last, max;

    if (!log || len == 0 || gpa + (len - 1) < gpa) {
        return;
    }
    /*
     * Full barrier between the guest memory stores being recorded and the
     * loads of their bits: pairs with the full barrier of the VMM's atomic
     * exchange that reads and clears a log word before it copies the pages
     * the word marks (QEMU: qatomic_xchg() in vhost_dev_sync_region()).
     *
     * Why the fast path (a bit that looks set is not ORed again) is then
     * safe against a concurrent sync: if our load sees the bit still set,
     * it read the log before the VMM's exchange cleared it, and with full
     * barriers on both sides (the store-buffering pattern) the VMM's copy,
     * after its exchange, sees our guest memory stores: the page is sent
     * with our data.  If the load sees the bit clear, the OR comes after
     * our stores too (same barrier): either the exchange reads our bit, or
     * the bit stays set for the next round.  A release fence alone is not
     * enough: it does not order a store before a later load, so the load
     * could see a stale 1 while our data still sat in the store buffer,
     * the VMM cleared the bit and copied the old page, and the dirty bit
     * was lost (data lost in the migration).
     *
     * One fence per call (per iovec or ring write), not per page.  The VMM
     * works on 64-bit words and we on bytes in them; both are atomic RMWs
     * on the same cache line, which hardware keeps coherent.
     */
    atomic_thread_fence(memory_order_seq_cst);
    first = gpa >> GUEST_MEM_LOG_PAGE_SHIFT;
    last = (gpa + (len - 1)) >> GUEST_MEM_LOG_PAGE_SHIFT;
    max = mem->log_size * 8;    /* pages the log has bits for */
    for (uint64_t page = first; page <= last && page < max; page++) {
        guest_mem_log_page(log, page);
    }
}

/* Called from: any thread.  Logging on only. */
void guest_mem_log_iov(const GuestMemory *mem, const struct iovec *iov,
                       unsigned int n)
{
    for (unsigned int i = 0; i < n; i++) {
        const uint8_t *p = iov[i].iov_base;
        size_t len = iov[i].iov_len;

        /* An iovec from guest_mem_gpa_to_iovec() lies in one region. */
        for (unsigned int r = 0; r < mem->nregions && len > 0; r++) {
            const GuestMemRegion *reg = &mem->regions[r];

            if (p >= reg->host && (uint64_t)(p - reg->host) < reg->size) {
                uint64_t off = p - reg->host;

                guest_mem_log_gpa(mem, reg->gpa + off,
                                  MIN(len, reg->size - off));
                break;
            }
        }
    }
}
