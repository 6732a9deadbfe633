/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests for the guest memory map: region checks and strict translation. */
#include "qemu/osdep.h"
#include "hw/virtio/guest-memory.h"
#include "qemu/sigbus-guard.h"

#include <sys/mman.h>

static int test_memfd(uint64_t size)
{
    int fd = memfd_create("test-guest-memory", MFD_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    return fd;
}

static void test_add(GuestMemory *mem, int fd, uint64_t gpa, uint64_t size,
                     uint64_t uva, uint64_t offset)
{
    VhostUserMemoryRegion r = {
        .guest_phys_addr = gpa,
        .memory_size = size,
        .userspace_addr = uva,
        .mmap_offset = offset,
    };
    GError *err = NULL;

    g_assert_true(guest_mem_add_region(mem, &r, fd, &err));
    g_assert_no_error(err);
}

static bool test_try_add(GuestMemory *mem, int fd, uint64_t gpa, uint64_t size,
                         uint64_t uva, uint64_t offset)
{
    VhostUserMemoryRegion r = {
        .guest_phys_addr = gpa,
        .memory_size = size,
        .userspace_addr = uva,
        .mmap_offset = offset,
    };
    GError *err = NULL;
    bool ok = guest_mem_add_region(mem, &r, fd, &err);

    g_assert_true(ok == (err == NULL));
    if (err) {
        g_test_message("rejected: %s", err->message);
        g_error_free(err);
    }
    return ok;
}

static void test_edges(void)
{
    GuestMemory mem;
    int fd = test_memfd(0x10000);
    uint8_t *p;
    char buf[4];

    guest_mem_init(&mem);
    test_add(&mem, fd, 0x10000, 0x10000, 0x7f0000000000ull, 0);

    p = guest_mem_gpa_to_host(&mem, 0x10000, 0x10000);
    g_assert_nonnull(p);
    g_assert_true(p == mem.regions[0].host);
    g_assert_true(guest_mem_gpa_to_host(&mem, 0x1ffff, 1) == p + 0xffff);
    g_assert_true(guest_mem_gpa_to_host(&mem, 0x1ffff, 0) == p + 0xffff);
    g_assert_null(guest_mem_gpa_to_host(&mem, 0x10000, 0x10001));
    g_assert_null(guest_mem_gpa_to_host(&mem, 0x1ffff, 2));
    g_assert_null(guest_mem_gpa_to_host(&mem, 0x20000, 0));
    g_assert_null(guest_mem_gpa_to_host(&mem, 0x20000, 1));
    g_assert_null(guest_mem_gpa_to_host(&mem, 0xffff, 1));
    g_assert_null(guest_mem_gpa_to_host(&mem, 0xffff, 0));

    /* uva translation has the same edges */
    g_assert_true(guest_mem_uva_to_host(&mem, 0x7f0000000000ull, 0x10000) == p);
    g_assert_null(guest_mem_uva_to_host(&mem, 0x7f0000000001ull, 0x10000));
    g_assert_null(guest_mem_uva_to_host(&mem, 0x7effffffffffull, 1));

    /* The mapping is the file */
    memcpy(p + 0xfffc, "abcd", 4);
    g_assert_cmpint(pread(fd, buf, 4, 0xfffc), ==, 4);
    g_assert_cmpmem(buf, 4, "abcd", 4);

    guest_mem_clear(&mem);
    g_assert_cmpuint(mem.nregions, ==, 0);
    g_assert_null(guest_mem_gpa_to_host(&mem, 0x10000, 1));
    close(fd);
}

static void test_wrap(void)
{
    GuestMemory mem;
    int fd = test_memfd(0x10000);
    struct iovec iov[4];

    guest_mem_init(&mem);
    /* A region ending exactly at 2^64 would wrap: rejected */
    g_assert_false(test_try_add(&mem, fd, 0xffffffffffff0000ull, 0x10000,
                                0x1000000, 0));
    g_assert_false(test_try_add(&mem, fd, 0x1000, 0x8000,
                                0xfffffffffffff000ull, 0));
    g_assert_false(test_try_add(&mem, fd, 0x1000, 0x8000, 0x1000000,
                                0xfffffffffffff000ull));
    /* Just below is fine */
    test_add(&mem, fd, 0xfffffffffffe0000ull, 0x10000, 0x1000000, 0);

    g_assert_nonnull(guest_mem_gpa_to_host(&mem, 0xfffffffffffe8000ull,
                                           0x8000));
    g_assert_null(guest_mem_gpa_to_host(&mem, 0xfffffffffffe8000ull,
                                        UINT64_MAX));
    g_assert_null(guest_mem_gpa_to_host(&mem, 0xfffffffffffe8000ull,
                                        UINT64_MAX - 0x7fff));
    g_assert_null(guest_mem_uva_to_host(&mem, 0x1008000, UINT64_MAX));
    g_assert_cmpint(guest_mem_gpa_to_iovec(&mem, 0xfffffffffffe8000ull,
                                           UINT64_MAX, iov, 4), ==, -EFAULT);
    g_assert_cmpint(guest_mem_gpa_to_iovec(&mem, 0xfffffffffffe8000ull,
                                           0x18000, iov, 4), ==, -EFAULT);
    g_assert_cmpint(guest_mem_gpa_to_iovec(&mem, 0xfffffffffffe8000ull,
                                           0x8000, iov, 4), ==, 1);
    g_assert_cmpuint(iov[0].iov_len, ==, 0x8000);
    guest_mem_clear(&mem);
    close(fd);
}

static void test_overlap(void)
{
    GuestMemory mem;
    int fd = test_memfd(0x40000);
    unsigned i;

    guest_mem_init(&mem);
    test_add(&mem, fd, 0x100000, 0x10000, 0x10000000, 0);
    /* overlapping at either end, inside, around */
    g_assert_false(test_try_add(&mem, fd, 0x0f8000, 0x10000, 0x20000000, 0));
    g_assert_false(test_try_add(&mem, fd, 0x10ffff, 0x10, 0x20000000, 0));
    g_assert_false(test_try_add(&mem, fd, 0x104000, 0x1000, 0x20000000, 0));
    g_assert_false(test_try_add(&mem, fd, 0x0f0000, 0x30000, 0x20000000, 0));
    /* zero size, no fd, file too short */
    g_assert_false(test_try_add(&mem, fd, 0x200000, 0, 0x20000000, 0));
    g_assert_false(test_try_add(&mem, -1, 0x200000, 0x1000, 0x20000000, 0));
    g_assert_false(test_try_add(&mem, fd, 0x200000, 0x40000, 0x20000000,
                                0x1000));
    g_assert_cmpuint(mem.nregions, ==, 1);
    /* adjacent on both sides is fine */
    test_add(&mem, fd, 0x0f0000, 0x10000, 0x20000000, 0x10000);
    test_add(&mem, fd, 0x110000, 0x10000, 0x30000000, 0x20000);
    g_assert_cmpuint(mem.nregions, ==, 3);

    /* a full table is rejected */
    for (i = mem.nregions; i < VHOST_USER_MAX_MEM_SLOTS; i++) {
        test_add(&mem, fd, 0x1000000 + i * 0x10000ull, 0x1000,
                 0x40000000 + i * 0x10000ull, 0);
    }
    g_assert_false(test_try_add(&mem, fd, 0x9000000, 0x1000, 0x50000000, 0));
    guest_mem_clear(&mem);
    close(fd);
}

static void test_iovec_split(void)
{
    GuestMemory mem;
    int fd1 = test_memfd(0x10000), fd2 = test_memfd(0x10000);
    struct iovec iov[4];
    uint8_t *a, *b;

    guest_mem_init(&mem);
    test_add(&mem, fd1, 0x0, 0x10000, 0x10000000, 0);
    test_add(&mem, fd2, 0x10000, 0x10000, 0x30000000, 0);
    a = guest_mem_gpa_to_host(&mem, 0, 1);
    b = guest_mem_gpa_to_host(&mem, 0x10000, 1);

    /* Strict lookup refuses the crossing range */
    g_assert_null(guest_mem_gpa_to_host(&mem, 0xff00, 0x200));

    g_assert_cmpint(guest_mem_gpa_to_iovec(&mem, 0xff00, 0x200, iov, 4),
                    ==, 2);
    g_assert_true(iov[0].iov_base == a + 0xff00);
    g_assert_cmpuint(iov[0].iov_len, ==, 0x100);
    g_assert_true(iov[1].iov_base == b);
    g_assert_cmpuint(iov[1].iov_len, ==, 0x100);

    g_assert_cmpint(guest_mem_gpa_to_iovec(&mem, 0xff00, 0x200, iov, 1),
                    ==, -ENOBUFS);
    /* one byte past the end of the last region */
    g_assert_cmpint(guest_mem_gpa_to_iovec(&mem, 0x1ff00, 0x101, iov, 4),
                    ==, -EFAULT);
    g_assert_cmpint(guest_mem_gpa_to_iovec(&mem, 0x1ff00, 0x100, iov, 4),
                    ==, 1);
    g_assert_cmpint(guest_mem_gpa_to_iovec(&mem, 0x20000, 1, iov, 4),
                    ==, -EFAULT);
    g_assert_cmpint(guest_mem_gpa_to_iovec(&mem, 0x20000, 0, iov, 4), ==, 0);
    /* whole memory */
    g_assert_cmpint(guest_mem_gpa_to_iovec(&mem, 0, 0x20000, iov, 4), ==, 2);
    guest_mem_clear(&mem);
    close(fd1);
    close(fd2);
}

static void test_remove(void)
{
    GuestMemory mem;
    int fd = test_memfd(0x30000);
    VhostUserMemoryRegion r = {
        .guest_phys_addr = 0x10000,
        .memory_size = 0x10000,
        .userspace_addr = 0x20000000,
    };
    GError *err = NULL;

    guest_mem_init(&mem);
    test_add(&mem, fd, 0x00000, 0x10000, 0x10000000, 0);
    test_add(&mem, fd, 0x10000, 0x10000, 0x20000000, 0x10000);
    test_add(&mem, fd, 0x20000, 0x10000, 0x30000000, 0x20000);

    /* wrong size: no match */
    r.memory_size = 0x8000;
    g_assert_false(guest_mem_remove_region(&mem, &r, &err));
    g_assert_nonnull(err);
    g_clear_error(&err);
    r.memory_size = 0x10000;
    g_assert_true(guest_mem_remove_region(&mem, &r, &err));
    g_assert_no_error(err);
    g_assert_cmpuint(mem.nregions, ==, 2);
    g_assert_null(guest_mem_gpa_to_host(&mem, 0x18000, 1));
    g_assert_nonnull(guest_mem_gpa_to_host(&mem, 0x8000, 1));
    g_assert_nonnull(guest_mem_gpa_to_host(&mem, 0x28000, 1));
    g_assert_false(guest_mem_remove_region(&mem, &r, &err));
    g_clear_error(&err);
    /* The hole can be filled again */
    test_add(&mem, fd, 0x10000, 0x10000, 0x20000000, 0x10000);
    g_assert_nonnull(guest_mem_gpa_to_host(&mem, 0x18000, 1));
    guest_mem_clear(&mem);
    close(fd);
}

static void test_mmap_offset(void)
{
    GuestMemory mem;
    long page = sysconf(_SC_PAGESIZE);
    int fd = test_memfd(4 * page);
    uint64_t offsets[] = { 100, page + 100, page, 3 * page - 1 };
    unsigned i;

    guest_mem_init(&mem);
    for (i = 0; i < ARRAY_SIZE(offsets); i++) {
        uint64_t off = offsets[i];
        uint64_t size = 4 * page - off;
        char pat[16], got[16];
        uint8_t *p;

        snprintf(pat, sizeof(pat), "region-%u", i);
        g_assert_cmpint(pwrite(fd, pat, sizeof(pat), off), ==, sizeof(pat));
        g_assert_cmpint(pwrite(fd, pat, 1, off + size - 1), ==, 1);
        test_add(&mem, fd, 0x100000 * (i + 1), size, 0x10000000 * (i + 1),
                 off);
        p = guest_mem_gpa_to_host(&mem, 0x100000 * (i + 1), size);
        g_assert_nonnull(p);
        g_assert_cmpmem(p, sizeof(pat), pat, sizeof(pat));
        g_assert_cmpint(p[size - 1], ==, pat[0]);
        /* and writes go to the right file offset */
        p[1] = 'X';
        g_assert_cmpint(pread(fd, got, sizeof(got), off), ==, sizeof(got));
        g_assert_cmpint(got[1], ==, 'X');
    }
    /* offset + size beyond the file */
    g_assert_false(test_try_add(&mem, fd, 0x9000000, 4 * page - 99,
                                0x90000000, 100));
    guest_mem_clear(&mem);
    close(fd);
}

/*
 * A region whose size is not a multiple of the page, on a memfd the VMM
 * then truncates: the mapping's last page reaches past the region's
 * nominal end, and a load there must land in a zero page and set the
 * fault flag like any other page of the region -- not kill the process.
 * Also with an offset that is not page-aligned (the mapping starts below
 * the region).
 */
static void test_partial_last_page(void)
{
    long page = sysconf(_SC_PAGESIZE);
    static const uint64_t offsets[] = { 0, 100 };

    g_assert_true(sigbus_guard_install(NULL));
    for (unsigned int i = 0; i < ARRAY_SIZE(offsets); i++) {
        uint64_t off = offsets[i], size = page + 100;
        int fd = test_memfd(off + size);
        GuestMemory mem;
        volatile uint8_t *p;

        guest_mem_init(&mem);
        test_add(&mem, fd, 0x100000, size, 0x10000000, off);
        p = guest_mem_gpa_to_host(&mem, 0x100000, size);
        g_assert_nonnull(p);
        p[size - 1] = 0x5a;
        g_assert_false(guest_mem_faulted(&mem));
        /* the VMM takes the last (partial) page away */
        g_assert_cmpint(ftruncate(fd, page), ==, 0);
        g_assert_cmpuint(p[size - 1], ==, 0);       /* no SIGBUS death */
        g_assert_true(guest_mem_faulted(&mem));
        p[size - 2] = 1;                            /* a store too */
        guest_mem_clear(&mem);
        close(fd);
    }
}

/* The log's bytes as the file holds them (what the VMM reads). */
static void test_read_log(int fd, uint64_t off, uint8_t *buf, size_t len)
{
    g_assert_cmpint(pread(fd, buf, len, off), ==, (ssize_t)len);
}

/*
 * The dirty log: bit (page % 8) of byte (page / 8), set by gpa ranges and
 * by host pointers (iovecs), a range across pages marks each page, and
 * nothing is written outside the log: the bytes of its file before the
 * mapped offset and after its end stay untouched even for pages past it.
 */
static void test_log(void)
{
    GuestMemory mem;
    long page = sysconf(_SC_PAGESIZE);
    int mfd = test_memfd(0x40000);           /* 64 pages of guest memory */
    int lfd = test_memfd(3 * page);
    uint64_t loff = page + 16;               /* not page aligned */
    uint8_t buf[16], guard[16];
    struct iovec iov[2];
    GError *err = NULL;
    uint8_t *host;

    guest_mem_init(&mem);
    test_add(&mem, mfd, 0x100000, 0x40000, 0x7f0000000000ULL, 0);
    memset(guard, 0xa5, sizeof(guard));
    g_assert_cmpint(pwrite(lfd, guard, sizeof(guard), loff - 16), ==, 16);
    g_assert_cmpint(pwrite(lfd, guard, sizeof(guard), loff + 8), ==, 16);

    /* 8 bytes = 64 pages: gpa 0 .. 0x40000, less than the region's end */
    g_assert_true(guest_mem_set_log(&mem, lfd, 8, loff, &err));
    g_assert_no_error(err);
    g_assert_false(guest_mem_log_check_regions(&mem, &err));
    g_test_message("rejected: %s", err->message);
    g_clear_error(&err);
    g_assert_true(guest_mem_log_covers(&mem, 0, 0x40000));
    g_assert_false(guest_mem_log_covers(&mem, 0x3f000, 0x1001));

    /* a range over pages 1-3, and one byte of page 9 */
    guest_mem_log_gpa(&mem, 0x1fff, 0x1002);
    guest_mem_log_gpa(&mem, 0x9000, 1);
    test_read_log(lfd, loff, buf, 8);
    g_assert_cmphex(buf[0], ==, 0x0e);
    g_assert_cmphex(buf[1], ==, 0x02);
    /* pages past the log are skipped, not written */
    guest_mem_log_gpa(&mem, 0x3f000, 0x100000);
    guest_mem_log_gpa(&mem, UINT64_MAX - 10, 100);      /* wraps: ignored */
    test_read_log(lfd, loff, buf, 8);
    g_assert_cmphex(buf[7], ==, 0x80);
    test_read_log(lfd, loff + 8, buf, 16);
    g_assert_cmpmem(buf, 16, guard, 16);
    test_read_log(lfd, loff - 16, buf, 16);
    g_assert_cmpmem(buf, 16, guard, 16);

    /* host pointers map back to guest-physical pages 0x100 and 0x101,
     * past this small log: nothing written; a bigger log takes them */
    host = guest_mem_gpa_to_host(&mem, 0x100ff0, 32);
    g_assert_nonnull(host);
    iov[0] = (struct iovec) { host, 32 };
    iov[1] = (struct iovec) { buf, 1 };     /* not guest memory: skipped */
    guest_mem_log_iov(&mem, iov, 2);
    test_read_log(lfd, loff + 8, buf, 16);
    g_assert_cmpmem(buf, 16, guard, 16);

    g_assert_true(guest_mem_set_log(&mem, lfd, 2 * page, page, &err));
    g_assert_no_error(err);
    g_assert_true(guest_mem_log_check_regions(&mem, &err));
    g_assert_no_error(err);
    iov[1] = (struct iovec) { guard, 1 };
    guest_mem_log_iov(&mem, iov, 2);
    test_read_log(lfd, page + 0x100 / 8, buf, 1);
    g_assert_cmphex(buf[0], ==, 0xa5 | 0x03);   /* on the guard pattern */

    /* bad logs: no fd, empty, wrapping, past the file */
    g_assert_false(guest_mem_set_log(&mem, -1, 8, 0, &err));
    g_clear_error(&err);
    g_assert_false(guest_mem_set_log(&mem, lfd, 0, 0, &err));
    g_clear_error(&err);
    g_assert_false(guest_mem_set_log(&mem, lfd, 8, UINT64_MAX - 4, &err));
    g_clear_error(&err);
    g_assert_false(guest_mem_set_log(&mem, lfd, 3 * page, 1, &err));
    g_test_message("rejected: %s", err->message);
    g_clear_error(&err);
    /* a refused log leaves the previous one in place */
    g_assert_nonnull(mem.log);
    g_assert_cmpuint(mem.log_size, ==, 2 * page);

    guest_mem_clear_log(&mem);
    g_assert_null(mem.log);
    guest_mem_log_gpa(&mem, 0, 0x1000);     /* no log: nothing to do */
    guest_mem_clear(&mem);
    close(lfd);
    close(mfd);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/guest-memory/translate/edges", test_edges);
    g_test_add_func("/guest-memory/translate/wrap", test_wrap);
    g_test_add_func("/guest-memory/add/overlap", test_overlap);
    g_test_add_func("/guest-memory/iovec/split", test_iovec_split);
    g_test_add_func("/guest-memory/remove", test_remove);
    g_test_add_func("/guest-memory/mmap-offset", test_mmap_offset);
    g_test_add_func("/guest-memory/sigbus/partial-last-page",
                    test_partial_last_page);
    g_test_add_func("/guest-memory/log", test_log);
    return g_test_run();
}
