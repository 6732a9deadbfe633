/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A synchronous reference reader for qcow2 images and their backing
 * chains, on top of the format layer (block/qcow2-format.c): pread()
 * through the L1 and L2 tables, one cluster at a time.
 *
 * It is the yardstick, not the driver: the unit tests compare it with
 * qemu-img's output, the fuzz target runs hostile images through it, and
 * the asynchronous driver will be checked against it.  So it favours
 * being obviously right over speed: it allocates, keeps one L2 table and
 * one decompressed cluster cached per image, and checks every host
 * access against the file size before making it (the file's size is
 * taken once, at open: the image is assumed not to change underneath).
 *
 * Threads: a Qcow2Ref is used by one thread at a time.
 */
#include "qemu/osdep.h"
#include "block/qcow2.h"

#include <sys/stat.h>

struct Qcow2Ref {
    char *filename;                     /* for messages */
    int fd;
    bool raw;                           /* a raw backing file */
    uint64_t file_size;
    uint64_t disk_size;                 /* virtual size */

    /* qcow2 only */
    Qcow2Info info;
    uint64_t *l1;                       /* host byte order */
    uint64_t l1_size;
    uint8_t *l2;                        /* one cached L2 table */
    uint64_t l2_offset;                 /* 0: cache empty */
    Qcow2Decompressor *dec;
    uint8_t *cbuf;                      /* compressed input */
    uint8_t *dbuf;                      /* one decompressed cluster */
    uint64_t dbuf_offset;               /* its host offset, 0: empty */
    bool no_backing;
    Qcow2Ref *backing;
};

#define set_err qcow2_set_error

/* A file name for messages: it may come from an image (see qcow2.h). */
static char *printable(const char *name)
{
    char *safe = g_utf8_make_valid(name, -1), *p;

    for (p = safe; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            *p = '?';
        }
    }
    return safe;
}

/* All of [off, off + len) or an error (a short read is one). */
static bool pread_full(Qcow2Ref *r, void *buf, size_t len, uint64_t off,
                       GError **errp)
{
    uint8_t *p = buf;

    while (len) {
        ssize_t n = pread(r->fd, p, len, off);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            set_err(errp, "%s: read of %zu bytes at offset %" PRIu64
                    " failed: %s", r->filename, len, off,
                    n < 0 ? g_strerror(errno) : "unexpected end of file");
            return false;
        }
        p += n;
        len -= n;
        off += n;
    }
    return true;
}

void qcow2_ref_close(Qcow2Ref *r)
{
    if (!r) {
        return;
    }
    qcow2_ref_close(r->backing);
    if (r->fd >= 0) {
        close(r->fd);
    }
    qcow2_info_free(&r->info);
    qcow2_decompressor_free(r->dec);
    g_free(r->l1);
    g_free(r->l2);
    g_free(r->cbuf);
    g_free(r->dbuf);
    g_free(r->filename);
    g_free(r);
}

uint64_t qcow2_ref_size(const Qcow2Ref *r)
{
    return r->disk_size;
}

const Qcow2Info *qcow2_ref_info(const Qcow2Ref *r)
{
    return r->raw ? NULL : &r->info;
}

const Qcow2Ref *qcow2_ref_backing(const Qcow2Ref *r)
{
    return r->backing;
}

static bool read_snapshots(Qcow2Ref *r, GError **errp)
{
    uint64_t max = qcow2_snapshot_table_max_bytes(&r->info);
    uint64_t len = MIN(max, 64 * 1024);
    uint8_t *buf;
    int ret;

    if (!r->info.h.nb_snapshots) {
        return true;
    }
    /* the entries are variable-length: read more until they fit */
    for (;;) {
        buf = g_malloc(len);
        if (!pread_full(r, buf, len, r->info.h.snapshots_offset, errp)) {
            g_free(buf);
            return false;
        }
        ret = qcow2_parse_snapshots(&r->info, buf, len, errp);
        g_free(buf);
        if (ret != -EAGAIN) {
            break;
        }
        len = MIN(max, len * 2);
    }
    if (ret < 0) {
        g_prefix_error(errp, "%s: ", r->filename);
        return false;
    }
    return true;
}

static bool select_l1(Qcow2Ref *r, const char *snapshot, GError **errp)
{
    uint64_t offset = r->info.h.l1_table_offset;
    uint64_t i;

    r->l1_size = r->info.h.l1_size;
    r->disk_size = r->info.h.size;
    if (snapshot) {
        const Qcow2Snapshot *sn = NULL;

        for (i = 0; i < r->info.nb_snapshots && !sn; i++) {
            if (!strcmp(r->info.snapshots[i].id, snapshot)) {
                sn = &r->info.snapshots[i];
            }
        }
        for (i = 0; i < r->info.nb_snapshots && !sn; i++) {
            if (!strcmp(r->info.snapshots[i].name, snapshot)) {
                sn = &r->info.snapshots[i];
            }
        }
        if (!sn) {
            set_err(errp, "%s: no snapshot with ID or name '%s' (the image "
                    "has %u snapshots; 'qemu-img snapshot -l' lists them)",
                    r->filename, snapshot, r->info.nb_snapshots);
            return false;
        }
        offset = sn->l1_table_offset;
        r->l1_size = sn->l1_size;
        if (sn->has_disk_size) {
            r->disk_size = sn->disk_size;
        }
        /* a version 2 snapshot without a size has the image's size */
        if (r->disk_size > (r->l1_size << (r->info.h.cluster_bits +
                                           r->info.l2_bits))) {
            set_err(errp, "%s: snapshot '%s' L1 table (%" PRIu64 " entries) "
                    "is too small for its disk size", r->filename, snapshot,
                    r->l1_size);
            return false;
        }
    }
    /* bounds against the file were checked by the parser */
    r->l1 = g_new(uint64_t, MAX(r->l1_size, 1));
    if (r->l1_size &&
        !pread_full(r, r->l1, r->l1_size * 8, offset, errp)) {
        return false;
    }
    for (i = 0; i < r->l1_size; i++) {
        r->l1[i] = GUINT64_FROM_BE(r->l1[i]);
    }
    return true;
}

static Qcow2Ref *ref_open(int fd, const char *filename, const char *dir,
                          bool raw, const Qcow2RefOptions *opts,
                          const char *backing_format, unsigned int depth,
                          GError **errp);

static bool open_backing(Qcow2Ref *r, const char *dir,
                         const Qcow2RefOptions *opts,
                         const char *caller_format, unsigned int depth,
                         GError **errp)
{
    const char *name = r->info.backing_file;
    const char *fmt = r->info.backing_format;
    unsigned int max_depth = opts->max_depth ? opts->max_depth :
                                               QCOW2_REF_DEFAULT_DEPTH;
    g_autofree char *path = NULL;
    g_autofree char *bdir = NULL;
    int fd;

    if (!name || r->no_backing) {
        return true;
    }
    if (!fmt) {
        fmt = caller_format;
    }
    if (!fmt) {
        set_err(errp, "%s: the backing file '%s' has no format in the "
                "image: name it (qemu-img rebase -u -F raw|qcow2 -b '%s')",
                r->filename, name, name);
        return false;
    }
    if (strcmp(fmt, "raw") && strcmp(fmt, "qcow2")) {
        set_err(errp, "%s: backing file '%s' has format '%s'; only raw and "
                "qcow2 backing files are supported", r->filename, name, fmt);
        return false;
    }
    if (depth + 1 >= max_depth) {
        set_err(errp, "%s: backing chain is deeper than %u images (does it "
                "loop?)", r->filename, max_depth);
        return false;
    }
    if (g_str_has_prefix(name, "json:")) {
        set_err(errp, "%s: backing file name '%s' is a json: description; "
                "only file names are supported", r->filename, name);
        return false;
    }
    path = g_path_is_absolute(name) || !dir ? g_strdup(name) :
           g_build_filename(dir, name, NULL);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(errp, "%s: cannot open backing file '%s' (%s): %s",
                r->filename, name, path, g_strerror(errno));
        return false;
    }
    bdir = g_path_get_dirname(path);
    r->backing = ref_open(fd, path, bdir, !strcmp(fmt, "raw"), opts, NULL,
                          depth + 1, errp);
    close(fd);
    return r->backing != NULL;
}

static Qcow2Ref *ref_open(int fd, const char *filename, const char *dir,
                          bool raw, const Qcow2RefOptions *opts,
                          const char *backing_format, unsigned int depth,
                          GError **errp)
{
    Qcow2Ref *r = g_new0(Qcow2Ref, 1);
    const char *unsupported;
    off_t end;
    size_t hlen;
    uint8_t *hbuf;
    bool ok;

    r->filename = printable(filename);
    r->raw = raw;
    r->no_backing = opts->no_backing;
    r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (r->fd < 0) {
        set_err(errp, "%s: %s", filename, g_strerror(errno));
        goto fail;
    }
    end = lseek(r->fd, 0, SEEK_END);
    if (end < 0) {
        set_err(errp, "%s: cannot find the file size: %s", filename,
                g_strerror(errno));
        goto fail;
    }
    r->file_size = end;
    if (raw) {
        r->disk_size = r->file_size;
        return r;
    }

    hlen = qcow2_header_bytes(r->file_size);
    hbuf = g_malloc(MAX(hlen, 1));
    ok = pread_full(r, hbuf, hlen, 0, errp) &&
         qcow2_parse_header(hbuf, hlen, r->file_size, 0, &r->info, errp);
    g_free(hbuf);
    if (!ok) {
        g_prefix_error(errp, "%s: ", filename);
        goto fail;
    }
    unsupported = qcow2_unsupported_feature(&r->info);
    if (unsupported) {
        set_err(errp, "%s: %s", filename, unsupported);
        goto fail;
    }
    if (!read_snapshots(r, errp) ||
        !select_l1(r, depth == 0 ? opts->snapshot : NULL, errp)) {
        goto fail;
    }
    r->dec = qcow2_decompressor_new(r->info.h.compression_type, errp);
    if (!r->dec) {
        goto fail;
    }
    r->l2 = g_malloc(r->info.cluster_size);
    if (!open_backing(r, dir, opts, backing_format, depth, errp)) {
        goto fail;
    }
    return r;

fail:
    qcow2_ref_close(r);
    return NULL;
}

Qcow2Ref *qcow2_ref_open_fd(int fd, const char *dir,
                            const Qcow2RefOptions *opts, GError **errp)
{
    static const Qcow2RefOptions defaults;
    g_autofree char *name = g_strdup_printf("fd %d", fd);

    return ref_open(fd, name, dir, false, opts ? opts : &defaults,
                    opts ? opts->backing_format : NULL, 0, errp);
}

Qcow2Ref *qcow2_ref_open(const char *path, const Qcow2RefOptions *opts,
                         GError **errp)
{
    static const Qcow2RefOptions defaults;
    g_autofree char *dir = g_path_get_dirname(path);
    Qcow2Ref *r;
    int fd;

    if (!opts) {
        opts = &defaults;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(errp, "cannot open '%s': %s", path, g_strerror(errno));
        return NULL;
    }
    r = ref_open(fd, path, dir, false, opts, opts->backing_format, 0, errp);
    close(fd);
    return r;
}

/* The L2 entry for @map, decoded; errors name the table and entry. */
static bool lookup(Qcow2Ref *r, const Qcow2Map *map, Qcow2L2Entry *out,
                   GError **errp)
{
    Qcow2L1Entry l1e;
    const char *why;

    if (qcow2_l1_decode(&r->info, r->l1[map->l1_index], &l1e, &why) < 0) {
        set_err(errp, "%s: L1 entry %" PRIu64 " (%#" PRIx64 "): %s: the "
                "image is corrupt", r->filename, map->l1_index,
                r->l1[map->l1_index], why);
        return false;
    }
    if (!l1e.l2_offset) {
        memset(out, 0, sizeof(*out));
        out->type = QCOW2_CLUSTER_UNALLOCATED;
        return true;
    }
    if (r->l2_offset != l1e.l2_offset) {
        r->l2_offset = 0;
        if (!pread_full(r, r->l2, r->info.cluster_size, l1e.l2_offset,
                        errp)) {
            return false;
        }
        r->l2_offset = l1e.l2_offset;
    }
    if (qcow2_l2_decode(&r->info,
                        qcow2_ld_be64(r->l2 + (size_t)map->l2_index *
                                      r->info.l2_entry_size),
                        out, &why) < 0) {
        set_err(errp, "%s: entry %u of the L2 table at %#" PRIx64 ": %s: "
                "the image is corrupt", r->filename, map->l2_index,
                l1e.l2_offset, why);
        return false;
    }
    return true;
}

static bool read_compressed(Qcow2Ref *r, const Qcow2L2Entry *e,
                            GError **errp)
{
    uint64_t len;
    const char *why;

    if (r->dbuf_offset == e->host_offset) {
        return true;
    }
    /*
     * The descriptor rounds the data up to a sector: the last sector of
     * the file may be partial, so the input stops at the end of the file.
     */
    if (qcow2_check_host_range(&r->info, e->host_offset, 1, &why) < 0) {
        set_err(errp, "%s: compressed cluster at %#" PRIx64 " %s: the "
                "image is corrupt", r->filename, e->host_offset, why);
        return false;
    }
    len = MIN((uint64_t)e->compressed_size, r->file_size - e->host_offset);
    if (!r->dbuf) {
        /* the largest descriptor: 2^(cluster_bits - 8) sectors */
        r->cbuf = g_malloc((size_t)(r->info.csize_mask + 1) * 512);
        r->dbuf = g_malloc(r->info.cluster_size);
    }
    r->dbuf_offset = 0;
    if (!pread_full(r, r->cbuf, len, e->host_offset, errp)) {
        return false;
    }
    if (qcow2_decompress(r->dec, r->cbuf, len, r->dbuf,
                         r->info.cluster_size, &why) < 0) {
        set_err(errp, "%s: compressed cluster at %#" PRIx64 " (%" PRIu64
                " bytes): %s", r->filename, e->host_offset, len, why);
        return false;
    }
    r->dbuf_offset = e->host_offset;
    return true;
}

/* [offset, offset + len) of a backing image, zeroes past its end. */
static bool read_backing(Qcow2Ref *r, uint64_t offset, uint8_t *buf,
                         size_t len, GError **errp)
{
    Qcow2Ref *b = r->backing;
    size_t n = 0;

    if (b && offset < b->disk_size) {
        n = MIN((uint64_t)len, b->disk_size - offset);
        if (!qcow2_ref_read(b, offset, buf, n, errp)) {
            return false;
        }
    }
    memset(buf + n, 0, len - n);
    return true;
}

bool qcow2_ref_read(Qcow2Ref *r, uint64_t offset, void *buf, size_t len,
                    GError **errp)
{
    uint8_t *p = buf;

    if (offset > r->disk_size || len > r->disk_size - offset) {
        set_err(errp, "%s: read of %zu bytes at %" PRIu64 " is beyond the "
                "virtual size (%" PRIu64 " bytes)", r->filename, len, offset,
                r->disk_size);
        return false;
    }
    if (r->raw) {
        /* a raw backing file: its size is the disk size, checked above */
        return pread_full(r, buf, len, offset, errp);
    }
    while (len) {
        Qcow2Map map;
        Qcow2L2Entry e;
        const char *why;
        size_t n;

        if (qcow2_map(&r->info, r->disk_size, r->l1_size, offset, &map) < 0) {
            /* cannot happen: l1_size covers disk_size (parser, select_l1) */
            set_err(errp, "%s: offset %" PRIu64 " is not mapped by the L1 "
                    "table", r->filename, offset);
            return false;
        }
        n = MIN((uint64_t)len, map.cluster_bytes_left);
        if (!lookup(r, &map, &e, errp)) {
            return false;
        }
        switch (e.type) {
        case QCOW2_CLUSTER_UNALLOCATED:
            if (!read_backing(r, offset, p, n, errp)) {
                return false;
            }
            break;
        case QCOW2_CLUSTER_ZERO_PLAIN:
        case QCOW2_CLUSTER_ZERO_ALLOC:
            memset(p, 0, n);
            break;
        case QCOW2_CLUSTER_NORMAL:
            if (qcow2_check_host_range(&r->info,
                                       e.host_offset + map.in_cluster, n,
                                       &why) < 0) {
                set_err(errp, "%s: data cluster at %#" PRIx64 " (virtual "
                        "offset %" PRIu64 ") %s: the image is truncated or "
                        "corrupt", r->filename, e.host_offset, offset, why);
                return false;
            }
            if (!pread_full(r, p, n, e.host_offset + map.in_cluster, errp)) {
                return false;
            }
            break;
        case QCOW2_CLUSTER_COMPRESSED:
            if (!read_compressed(r, &e, errp)) {
                return false;
            }
            memcpy(p, r->dbuf + map.in_cluster, n);
            break;
        }
        p += n;
        offset += n;
        len -= n;
    }
    return true;
}

static bool block_status(Qcow2Ref *r, unsigned int depth, uint64_t offset,
                         uint64_t max_bytes, uint64_t *pnum,
                         Qcow2RefStatus *st, GError **errp)
{
    Qcow2Map map;
    Qcow2L2Entry e;

    memset(st, 0, sizeof(*st));
    st->depth = depth;
    if (r->raw) {
        st->type = QCOW2_CLUSTER_NORMAL;
        st->host_offset = offset;
        *pnum = max_bytes;
        return true;
    }
    if (qcow2_map(&r->info, r->disk_size, r->l1_size, offset, &map) < 0) {
        set_err(errp, "%s: offset %" PRIu64 " is not mapped by the L1 table",
                r->filename, offset);
        return false;
    }
    *pnum = MIN(max_bytes, map.cluster_bytes_left);
    if (!lookup(r, &map, &e, errp)) {
        return false;
    }
    st->type = e.type;
    if (e.type == QCOW2_CLUSTER_NORMAL) {
        st->host_offset = e.host_offset + map.in_cluster;
    } else if (e.type == QCOW2_CLUSTER_COMPRESSED) {
        st->host_offset = e.host_offset;
    } else if (e.type == QCOW2_CLUSTER_UNALLOCATED && r->backing &&
               offset < r->backing->disk_size) {
        return block_status(r->backing, depth + 1, offset,
                            MIN(*pnum, r->backing->disk_size - offset),
                            pnum, st, errp);
    }
    return true;
}

bool qcow2_ref_block_status(Qcow2Ref *r, uint64_t offset, uint64_t max_bytes,
                            uint64_t *pnum, Qcow2RefStatus *st,
                            GError **errp)
{
    if (offset >= r->disk_size || max_bytes == 0) {
        set_err(errp, "%s: block status at %" PRIu64 " is beyond the "
                "virtual size (%" PRIu64 " bytes)", r->filename, offset,
                r->disk_size);
        return false;
    }
    return block_status(r, 0, offset, MIN(max_bytes, r->disk_size - offset),
                        pnum, st, errp);
}
