/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * New, empty qcow2 images, written from the format's specification
 * (QEMU's docs/interop/qcow2.txt), two ways sharing one layout:
 *  - qcow2_create_file(): a new file by its path, as 'qemu-img create -f
 *    qcow2 [-b BACKING -F FORMAT] FILE SIZE' makes one with its defaults
 *    (version 3, 64 KiB clusters, 16-bit refcounts);
 *  - the driver's create hook (qcow2_create()): blockdev-create's image,
 *    written through an open file node (QEMU's BlockdevCreateOptionsQcow2:
 *    version, cluster size, refcount width, lazy refcounts, compression
 *    type), which is also how blockdev-snapshot-sync makes its overlay.
 *
 * Layout, in clusters: 0 the header, its extensions (the backing file's
 * format) and the backing file's name; then the refcount table; then the
 * refcount blocks; then the L1 table, all zeroes (nothing allocated:
 * every read goes to the backing file, or reads zeroes).  Every cluster
 * of that metadata has refcount 1 and nothing else is allocated.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "qemu/qmp-args.h"
#include "block/block_int.h"
#include "block/qcow2.h"
#include "block/qcow2-options.h"

#define CREATE_DEFAULT_CLUSTER_BITS 16
#define CREATE_DEFAULT_REFCOUNT_ORDER 4         /* 16-bit refcounts */
#define CREATE_V3_HEADER_LENGTH_ZSTD 112        /* with compression_type */

/* What an image is made with. */
typedef struct Qcow2CreateParams {
    uint64_t size;
    uint32_t cluster_bits;
    uint32_t version;           /* 2 or 3 */
    uint32_t refcount_order;
    bool lazy_refcounts;
    bool zstd;
    const char *backing;        /* NULL: none */
    const char *backing_fmt;    /* NULL: unsaid */
} Qcow2CreateParams;

static void st_be32(uint8_t *p, uint32_t v)
{
    v = GUINT32_TO_BE(v);
    memcpy(p, &v, 4);
}

/*
 * The whole metadata of the new image, from its first byte: *@len bytes
 * at *@out (4096-aligned for direct I/O: free() it), padded with zeroes
 * to a multiple of @align.  @what names the image in messages.  False
 * with @errp set if the parameters make no image.
 */
static bool qcow2_create_layout(const Qcow2CreateParams *p, const char *what,
                                uint32_t align, uint8_t **out, size_t *len,
                                GError **errp)
{
    uint64_t cs = 1ull << p->cluster_bits;
    uint64_t per_l1 = cs * (cs / 8);            /* bytes per L1 entry */
    uint32_t hdr_len = p->version == 2 ? QCOW2_V2_HEADER_LENGTH :
                       p->zstd ? CREATE_V3_HEADER_LENGTH_ZSTD :
                       QCOW2_V3_HEADER_LENGTH;
    size_t blen = p->backing ? strlen(p->backing) : 0;
    size_t flen = p->backing_fmt ? strlen(p->backing_fmt) : 0;
    size_t pos = hdr_len;
    uint64_t l1_size, l1_clusters, rb = 1, rt = 1, total, bytes;
    Qcow2Info info = { 0 };
    uint8_t *buf;

    if (!p->size || p->size % 512 || p->size > QCOW2_MAX_VIRTUAL_SIZE) {
        g_set_error(errp, VB_ERROR, 0, "%s: Image size must be a non-zero "
                    "multiple of 512 bytes (%" PRIu64 " given)", what,
                    p->size);
        return false;
    }
    if (blen > QCOW2_MAX_BACKING_NAME || flen > 16) {
        g_set_error(errp, VB_ERROR, 0, "%s: the backing file's name (at "
                    "most %u bytes) or format name is too long", what,
                    QCOW2_MAX_BACKING_NAME);
        return false;
    }
    if (flen) {
        pos += 8 + QEMU_ALIGN_UP(flen, 8);
    }
    pos += 8;                                   /* the end marker */
    if (pos + blen > cs) {
        g_set_error(errp, VB_ERROR, 0, "%s: the header and the backing "
                    "file's name (%zu bytes) do not fit in one cluster of "
                    "%" PRIu64 " bytes: use a larger cluster-size", what,
                    pos + blen, cs);
        return false;
    }
    l1_size = (p->size + per_l1 - 1) / per_l1;
    if (l1_size > QCOW2_MAX_L1_ENTRIES) {
        g_set_error(errp, VB_ERROR, 0, "%s: %" PRIu64 " bytes is too big for "
                    "an image with %" PRIu64 "-byte clusters: use a larger "
                    "cluster-size", what, p->size, cs);
        return false;
    }
    l1_clusters = (l1_size * 8 + cs - 1) / cs;

    /* Enough refcount blocks for every metadata cluster, themselves and
     * the table naming them included: grows to a fixed point. */
    info.h.refcount_order = p->refcount_order;
    info.refblock_entries = (cs * 8) >> p->refcount_order;
    info.refcount_max = p->refcount_order == 6 ? UINT64_MAX :
                        (1ull << (1u << p->refcount_order)) - 1;
    for (;;) {
        uint64_t nrb, nrt;

        total = 1 + rt + rb + l1_clusters;
        nrb = (total + info.refblock_entries - 1) / info.refblock_entries;
        nrt = (nrb * 8 + cs - 1) / cs;
        if (nrb == rb && nrt == rt) {
            break;
        }
        rb = nrb;
        rt = nrt;
    }
    if (rt * cs > QCOW2_MAX_REFTABLE_BYTES) {
        g_set_error(errp, VB_ERROR, 0, "%s: %" PRIu64 " bytes is too big for "
                    "an image with %" PRIu64 "-byte clusters and %u-bit "
                    "refcounts", what, p->size, cs,
                    1u << p->refcount_order);
        return false;
    }
    bytes = QEMU_ALIGN_UP(total * cs, MAX(align, 1));
    if (posix_memalign((void **)&buf, 4096, bytes)) {
        g_set_error(errp, VB_ERROR, 0, "%s: out of memory for its %" PRIu64
                    " bytes of metadata", what, bytes);
        return false;
    }
    memset(buf, 0, bytes);

    /* The header. */
    st_be32(buf + 0, QCOW2_MAGIC);
    st_be32(buf + 4, p->version);
    st_be32(buf + 20, p->cluster_bits);
    qcow2_st_be64(buf + 24, p->size);
    st_be32(buf + 32, QCOW2_CRYPT_NONE);
    st_be32(buf + 36, l1_size);
    qcow2_st_be64(buf + 40, (1 + rt + rb) * cs);
    qcow2_st_be64(buf + 48, cs);
    st_be32(buf + 56, rt);
    /* No snapshots (60..71 zero). */
    if (p->version >= 3) {
        qcow2_st_be64(buf + 72, p->zstd ? QCOW2_INCOMPAT_COMPRESSION : 0);
        qcow2_st_be64(buf + 80, p->lazy_refcounts ?
                      QCOW2_COMPAT_LAZY_REFCOUNTS : 0);
        st_be32(buf + 96, p->refcount_order);
        st_be32(buf + 100, hdr_len);
        if (p->zstd) {
            buf[104] = QCOW2_COMPRESSION_ZSTD;
        }
    }
    /* Extensions: the backing format, then the end marker (zeroes). */
    pos = hdr_len;
    if (flen) {
        st_be32(buf + pos, QCOW2_EXT_BACKING_FORMAT);
        st_be32(buf + pos + 4, flen);
        memcpy(buf + pos + 8, p->backing_fmt, flen);
        pos += 8 + QEMU_ALIGN_UP(flen, 8);
    }
    pos += 8;
    if (blen) {
        qcow2_st_be64(buf + 8, pos);
        st_be32(buf + 16, blen);
        memcpy(buf + pos, p->backing, blen);
    }

    /* The refcount table names the blocks; they count every metadata
     * cluster once. */
    for (uint64_t i = 0; i < rb; i++) {
        qcow2_st_be64(buf + cs + i * 8, (1 + rt + i) * cs);
    }
    for (uint64_t i = 0; i < total; i++) {
        uint8_t *block = buf + (1 + rt + i / info.refblock_entries) * cs;

        qcow2_refcount_set(&info, block, i % info.refblock_entries, 1);
    }
    *out = buf;
    *len = bytes;
    return true;
}

bool qcow2_create_file(const char *path, uint64_t size, const char *backing,
                       const char *backing_fmt, GError **errp)
{
    Qcow2CreateParams p = {
        .size = size,
        .cluster_bits = CREATE_DEFAULT_CLUSTER_BITS,
        .version = 3,
        .refcount_order = CREATE_DEFAULT_REFCOUNT_ORDER,
        .backing = backing,
        .backing_fmt = backing_fmt,
    };
    uint8_t *buf;
    size_t len;
    int fd;

    if (!qcow2_create_layout(&p, path, 1, &buf, &len, errp)) {
        return false;
    }
    /* A new file only: an existing one may be somebody's disk. */
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;

        g_set_error(errp, VB_ERROR, 0, "Could not create '%s': %s%s", path,
                    g_strerror(e), e == EEXIST ? " (to use an existing "
                    "image, give mode=existing)" : "");
        free(buf);
        return false;
    }
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, buf + done, len - done);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            int e = n < 0 ? errno : ENOSPC;

            g_set_error(errp, VB_ERROR, 0, "Could not write '%s': %s",
                        path, g_strerror(e));
            goto fail;
        }
        done += n;
    }
    if (fsync(fd) < 0) {
        g_set_error(errp, VB_ERROR, 0, "Could not write '%s': %s", path,
                    g_strerror(errno));
        goto fail;
    }
    close(fd);
    free(buf);
    return true;

fail:
    close(fd);
    unlink(path);
    free(buf);
    return false;
}

/* ---- blockdev-create -------------------------------------------------- */

/* Main thread: QEMU's BlockdevCreateOptionsQcow2 but for size, file and
 * the backing file (the caller's), with QEMU's checks and words; what
 * this driver cannot make or open is refused, saying so. */
bool qcow2_create_parse(BlockCreateOptions *o, QmpArgs *a, GError **errp)
{
    static const char *const versions[] = { "v2", "v3", NULL };
    static const char *const prealloc[] = {
        "off", "metadata", "falloc", "full", NULL,
    };
    static const char *const compression[] = { "zlib", "zstd", NULL };
    Qcow2CreateParams *p = g_new0(Qcow2CreateParams, 1);
    uint64_t cluster_size = 1u << CREATE_DEFAULT_CLUSTER_BITS;
    int64_t refcount_bits = 1 << CREATE_DEFAULT_REFCOUNT_ORDER;
    int version = 1, pre = 0, comp = 0;
    bool has_refcount = false, extl2 = false;
    bool data_raw = false, has_comp = qmp_args_has(a, "compression-type");

    o->driver_opts = p;
    if (qmp_args_has(a, "data-file") || qmp_args_has(a, "encrypt")) {
        g_set_error(errp, VB_ERROR, 0, "Parameter '%s' is not supported: "
                    "vhost-blkd opens no qcow2 image with an external data "
                    "file or encryption",
                    qmp_args_has(a, "data-file") ? "data-file" : "encrypt");
        return false;
    }
    if (!qmp_args_enum(a, "version", versions, false, &version, errp) ||
        !qmp_args_size(a, "cluster-size", false, &cluster_size, NULL,
                       errp) ||
        !qmp_args_enum(a, "preallocation", prealloc, false, &pre, errp) ||
        !qmp_args_bool(a, "lazy-refcounts", &p->lazy_refcounts, errp) ||
        !qmp_args_int(a, "refcount-bits", false, &refcount_bits,
                      &has_refcount, errp) ||
        !qmp_args_bool(a, "extended-l2", &extl2, errp) ||
        !qmp_args_bool(a, "data-file-raw", &data_raw, errp) ||
        !qmp_args_enum(a, "compression-type", compression, false, &comp,
                       errp)) {
        return false;
    }
    p->version = version + 2;
    if (cluster_size < (1u << QCOW2_MIN_CLUSTER_BITS) ||
        cluster_size > QCOW2_MAX_CLUSTER_SIZE ||
        (cluster_size & (cluster_size - 1))) {
        g_set_error(errp, VB_ERROR, 0, "Cluster size must be a power of two "
                    "between %u and %uk", 1u << QCOW2_MIN_CLUSTER_BITS,
                    QCOW2_MAX_CLUSTER_SIZE >> 10);
        return false;
    }
    p->cluster_bits = __builtin_ctzll(cluster_size);
    if (refcount_bits < 1 || refcount_bits > 64 ||
        (refcount_bits & (refcount_bits - 1))) {
        g_set_error(errp, VB_ERROR, 0, "Refcount width must be a power of "
                    "two and may not exceed 64 bits");
        return false;
    }
    p->refcount_order = __builtin_ctzll(refcount_bits);
    if (p->version < 3 && has_refcount && refcount_bits != 16) {
        g_set_error(errp, VB_ERROR, 0, "Different refcount widths than 16 "
                    "bits require compatibility level 1.1 or above (use "
                    "version=v3 or greater)");
        return false;
    }
    if (p->version < 3 && p->lazy_refcounts) {
        g_set_error(errp, VB_ERROR, 0, "Lazy refcounts only supported with "
                    "compatibility level 1.1 and above (use version=v3 or "
                    "greater)");
        return false;
    }
    if (p->version < 3 && has_comp && comp != 0) {
        g_set_error(errp, VB_ERROR, 0, "Non-zlib compression type is only "
                    "supported with compatibility level 1.1 and above (use "
                    "version=v3 or greater)");
        return false;
    }
    p->zstd = comp == 1;
    if (extl2) {
        g_set_error(errp, VB_ERROR, 0, "extended-l2=true is not supported: "
                    "vhost-blkd cannot open images with subclusters; leave "
                    "it off");
        return false;
    }
    if (data_raw) {
        g_set_error(errp, VB_ERROR, 0, "data-file-raw requires data-file");
        return false;
    }
    if (pre != 0) {
        g_set_error(errp, VB_ERROR, 0, "preallocation=%s is not supported "
                    "for driver=qcow2: vhost-blkd creates qcow2 images with "
                    "preallocation=off only (preallocate the file with "
                    "driver=file's preallocation instead)", prealloc[pre]);
        return false;
    }
    if (o->backing_fmt && !o->backing_file) {
        g_set_error(errp, VB_ERROR, 0, "Backing format cannot be used "
                    "without backing file");
        return false;
    }
    if (o->backing_fmt && strcmp(o->backing_fmt, "raw") &&
        strcmp(o->backing_fmt, "qcow2")) {
        g_set_error(errp, VB_ERROR, 0, "backing-fmt=%s: vhost-blkd cannot "
                    "open such a backing file (raw and qcow2 only); convert "
                    "it with qemu-img convert -O qcow2", o->backing_fmt);
        return false;
    }
    return true;
}

/* Worker thread: one request's end (aio_poll() of our context). */
typedef struct Qcow2CreateIO {
    BlockAIOCB acb;
    int ret;
    bool done;
} Qcow2CreateIO;

static void qcow2_create_io_cb(void *opaque, int ret)
{
    Qcow2CreateIO *io = opaque;

    io->ret = ret;
    io->done = true;
}

static int qcow2_create_wait(Qcow2CreateIO *io)
{
    AioContext *ctx = qemu_get_current_aio_context();

    while (!io->done) {
        aio_poll(ctx, true);
    }
    return io->ret;
}

/*
 * Worker thread (bdrv_create_run()): the image @o describes, written onto
 * @o->file from its first byte, grown as needed, then flushed.  What the
 * file held beyond the new metadata is left (nothing refers to it).
 */
bool qcow2_create(const BlockCreateOptions *o, GError **errp)
{
    Qcow2CreateParams p = *(const Qcow2CreateParams *)o->driver_opts;
    BlockBackend *file = o->file;
    uint32_t align = MAX(file->bl.request_alignment, 1);
    const size_t chunk = 1u << 20;
    uint8_t *buf;
    size_t len;
    int ret = 0;

    p.size = o->size;
    p.backing = o->backing_file;
    p.backing_fmt = o->backing_fmt;
    if (!qcow2_create_layout(&p, file->filename, align, &buf, &len, errp)) {
        return false;
    }
    /* Only its users' requests move a node's size otherwise, and the
     * caller holds the node for us alone. */
    if (blk_getlength(file) < len && !blk_truncate(file, len, errp)) {
        free(buf);
        return false;
    }
    for (size_t off = 0; off < len && ret == 0; off += chunk) {
        struct iovec iov = { buf + off, MIN(chunk, len - off) };
        Qcow2CreateIO io = { 0 };

        blk_aio_pwritev(file, &io.acb, off, &iov, 1, 0, qcow2_create_io_cb,
                        &io);
        ret = qcow2_create_wait(&io);
    }
    if (ret == 0) {
        Qcow2CreateIO io = { 0 };

        blk_aio_flush(file, &io.acb, qcow2_create_io_cb, &io);
        ret = qcow2_create_wait(&io);
    }
    free(buf);
    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "Could not write qcow2 header to "
                    "'%s': %s", file->filename, g_strerror(-ret));
        return false;
    }
    return true;
}
