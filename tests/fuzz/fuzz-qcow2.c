/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * libFuzzer target: the input is a qcow2 image file.  It goes through
 * the header parser (for reading and for writing), the snapshot table
 * parser and the reference reader (block/qcow2-ref.c), which reads a few
 * ranges of the virtual disk (the start, the middle, the end, and of the
 * first snapshot) and the block status of its first clusters, following
 * whatever L1/L2 tables and compressed clusters the image has.  Backing
 * files are not opened (their part reads as zeroes): the image's names
 * must not reach the file system.
 *
 * Besides the sanitizers, the harness checks: a range read twice (the
 * second time from the reader's caches) gives the same bytes; entries
 * the decoders accept satisfy what the driver will rely on (L2 tables and
 * data clusters aligned, L2 tables inside the file, compressed data
 * starting past the header); a refcount written is read back, and its
 * neighbours are unchanged.
 *
 * Seeds (tests/fuzz/corpus/fuzz-qcow2/): small images made by qemu-img
 * and qemu-io with 512-byte clusters, e.g.
 *   qemu-img create -f qcow2 -o cluster_size=512 plain.qcow2 16k
 *   qemu-io -f qcow2 -c 'write -P 0x11 0 1k' -c 'write -z 2k 1k' plain.qcow2
 * and likewise v2 (compat=0.10), refcount_bits=1 and 64, compressed
 * (qemu-img convert -c, deflate and zstd), with a snapshot, and with a
 * backing file name and format.  qemu-img writes no feature name table
 * into a 512-byte header cluster, so the seed-ext-* seeds are seed-plain
 * with header extensions written in by hand: a feature name table and an
 * unknown extension; a bitmaps extension (autoclear bit set); a LUKS
 * encryption header pointer (crypt_method 2); an external data file name
 * (incompatible bit 2).
 *
 * Threads: the fuzzer's only.
 */
#include "qemu/osdep.h"
#include "block/qcow2.h"
#include "fuzz-common.h"

#include <sys/mman.h>

/* Reads per input: bounded so that one input stays fast. */
#define FQ_READ_MAX     (64 * 1024)

static int fq_fd = -1;
static uint8_t *fq_buf, *fq_buf2;
static bool fq_verbose;             /* FUZZ_VERBOSE=1: say why an open failed */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fq_fd = memfd_create("fuzz-qcow2", MFD_CLOEXEC);
    if (fq_fd < 0) {
        perror("memfd_create");
        abort();
    }
    fq_verbose = g_strcmp0(getenv("FUZZ_VERBOSE"), "1") == 0;
    fq_buf = g_malloc(FQ_READ_MAX);
    fq_buf2 = g_malloc(FQ_READ_MAX);
    return 0;
}

/* Decoders on words taken from the image: what they accept is sane. */
static void fq_entries(const Qcow2Info *info, const uint8_t *data,
                       size_t size)
{
    size_t i;

    for (i = 0; i + 8 <= size && i < 4096; i += 8) {
        uint64_t w = qcow2_ld_be64(data + i);
        Qcow2L1Entry l1e;
        Qcow2L2Entry l2e;
        uint64_t rb;
        const char *why;

        if (qcow2_l1_decode(info, w, &l1e, &why) == 0 && l1e.l2_offset) {
            fuzz_check(!(l1e.l2_offset & (info->cluster_size - 1)),
                       "L2 table %#" PRIx64 " misaligned", l1e.l2_offset);
            fuzz_check(l1e.l2_offset + info->cluster_size <= info->file_size,
                       "L2 table %#" PRIx64 " beyond EOF", l1e.l2_offset);
        }
        if (qcow2_l2_decode(info, w, &l2e, &why) == 0) {
            if (l2e.type == QCOW2_CLUSTER_NORMAL ||
                l2e.type == QCOW2_CLUSTER_ZERO_ALLOC) {
                /* offset 0 is a cluster of an external data file only */
                fuzz_check(!(l2e.host_offset & (info->cluster_size - 1)) &&
                           (l2e.host_offset || info->has_data_file),
                           "data cluster %#" PRIx64, l2e.host_offset);
            } else if (l2e.type == QCOW2_CLUSTER_COMPRESSED) {
                fuzz_check(l2e.host_offset >= info->cluster_size &&
                           l2e.compressed_size >= 1 &&
                           l2e.compressed_size <=
                           (info->csize_mask + 1) * 512,
                           "compressed %#" PRIx64 " size %u",
                           l2e.host_offset, l2e.compressed_size);
            }
        }
        if (qcow2_reftable_decode(info, w, &rb, &why) == 0 && rb) {
            fuzz_check(rb + info->cluster_size <= info->file_size,
                       "refcount block %#" PRIx64 " beyond EOF", rb);
        }
    }
}

static void fq_refcounts(const Qcow2Info *info, const uint8_t *data,
                         size_t size)
{
    uint8_t *block = g_malloc0(info->cluster_size);
    uint32_t idx, n = info->refblock_entries;
    uint64_t v = 0, before = 0, after = 0, got;

    if (size >= 16) {
        idx = qcow2_ld_be64(data) % n;
        v = qcow2_ld_be64(data + 8) & info->refcount_max;
    } else {
        idx = n / 2;
    }
    memcpy(block, data, MIN(size, (size_t)info->cluster_size));
    if (idx > 0) {
        qcow2_refcount_get(info, block, idx - 1, &before);
    }
    if (idx + 1 < n) {
        qcow2_refcount_get(info, block, idx + 1, &after);
    }
    fuzz_check(qcow2_refcount_set(info, block, idx, v) == 0, "set %u", idx);
    fuzz_check(qcow2_refcount_get(info, block, idx, &got) == 0 && got == v,
               "refcount %u: wrote %" PRIu64 " read %" PRIu64, idx, v, got);
    if (idx > 0) {
        qcow2_refcount_get(info, block, idx - 1, &got);
        fuzz_check(got == before, "entry below %u changed", idx);
    }
    if (idx + 1 < n) {
        qcow2_refcount_get(info, block, idx + 1, &got);
        fuzz_check(got == after, "entry above %u changed", idx);
    }
    g_free(block);
}

/* Read [off, off + len) twice; the two reads agree or both fail. */
static void fq_read(Qcow2Ref *r, uint64_t off, size_t len)
{
    uint64_t size = qcow2_ref_size(r);
    GError *err = NULL;
    bool ok1, ok2;

    if (off >= size) {
        return;
    }
    len = MIN(len, MIN((uint64_t)FQ_READ_MAX, size - off));
    ok1 = qcow2_ref_read(r, off, fq_buf, len, &err);
    if (!ok1 && fq_verbose) {
        fprintf(stderr, "read: %s\n", err->message);
    }
    g_clear_error(&err);
    ok2 = qcow2_ref_read(r, off, fq_buf2, len, &err);
    g_clear_error(&err);
    fuzz_check(ok1 == ok2, "read at %" PRIu64 ": %d then %d", off, ok1, ok2);
    fuzz_check(!ok1 || !memcmp(fq_buf, fq_buf2, len),
               "read at %" PRIu64 " differs the second time", off);
}

/* Block status over the first clusters: each answer covers 1..max bytes */
static void fq_status(Qcow2Ref *r)
{
    uint64_t size = qcow2_ref_size(r), off = 0, pnum;
    GError *err = NULL;
    Qcow2RefStatus st;
    int i;

    for (i = 0; i < 16 && off < size; i++) {
        uint64_t max = MIN(size - off, (uint64_t)FQ_READ_MAX);

        if (!qcow2_ref_block_status(r, off, max, &pnum, &st, &err)) {
            g_clear_error(&err);
            return;
        }
        fuzz_check(pnum >= 1 && pnum <= max, "status at %" PRIu64
                   ": %" PRIu64 " bytes of at most %" PRIu64, off, pnum, max);
        off += pnum;
    }
}

static void fq_read_image(Qcow2Ref *r)
{
    uint64_t size = qcow2_ref_size(r);

    fq_status(r);

    fq_read(r, 0, 4096);
    fq_read(r, size / 2 - MIN(size / 2, 700), 3000);
    fq_read(r, size - MIN(size, 1536), 1536);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Qcow2RefOptions opts = { .no_backing = true };
    GError *err = NULL;
    Qcow2Info info;
    Qcow2Ref *r;

    if (ftruncate(fq_fd, 0) < 0 || ftruncate(fq_fd, size) < 0 ||
        pwrite(fq_fd, data, size, 0) != (ssize_t)size) {
        perror("memfd");
        abort();
    }

    /* the parser alone, as a writer would call it */
    if (qcow2_parse_header(data, qcow2_header_bytes(size), size,
                           QCOW2_OPEN_WRITE, &info, &err)) {
        fuzz_check(info.l1_needed <= info.h.l1_size, "l1_size");
        /* an empty L1 table (a disk of size 0) is never read */
        fuzz_check(info.h.l1_size == 0 ||
                   info.h.l1_table_offset + (uint64_t)info.h.l1_size * 8 <=
                   size, "L1 beyond EOF");
        fq_entries(&info, data, size);
        fq_refcounts(&info, data, size);
        qcow2_info_free(&info);
    }
    g_clear_error(&err);

    r = qcow2_ref_open_fd(fq_fd, NULL, &opts, &err);
    if (!r) {
        if (fq_verbose) {
            fprintf(stderr, "open: %s\n", err->message);
        }
        g_clear_error(&err);
        return 0;
    }
    if (fq_verbose) {
        fprintf(stderr, "opened: %" PRIu64 " bytes, %u snapshots\n",
                qcow2_ref_size(r), qcow2_ref_info(r)->nb_snapshots);
    }
    fq_read_image(r);
    if (qcow2_ref_info(r)->nb_snapshots) {
        Qcow2Ref *s;

        opts.snapshot = qcow2_ref_info(r)->snapshots[0].id;
        s = qcow2_ref_open_fd(fq_fd, NULL, &opts, &err);
        g_clear_error(&err);
        if (s) {
            fq_read_image(s);
            qcow2_ref_close(s);
        }
    }
    qcow2_ref_close(r);
    return 0;
}
