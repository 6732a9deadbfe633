/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The qcow2 format layer: header, header extensions, snapshot table,
 * L1/L2/refcount entries, cluster mapping and compressed clusters, all
 * over caller-supplied buffers (no I/O).  See block/qcow2.h for the API.
 *
 * The image is untrusted.  Every field is checked before anything is
 * derived from it, in the order that lets later checks rely on earlier
 * ones (cluster_bits before anything measured in clusters, header_length
 * before the extensions that follow it, the extensions before the feature
 * bits so that an unknown bit can be named from the image's own feature
 * table).  Sums of offsets and lengths are compared as "len > limit -
 * offset" after checking "offset <= limit", so nothing overflows.
 *
 * Where the specification and QEMU's implementation limits differ, the
 * stricter limit is applied (L1 and refcount table sizes, snapshot table
 * size and count): an image QEMU cannot open is not one a user can have
 * made with it.  Checks that only matter for writers (refcount overlap,
 * lazy refcounts) are left to the driver.
 */
#include "qemu/osdep.h"
#include "block/qcow2.h"

#include <zlib.h>
#include <zstd.h>

static inline uint32_t ld_be32(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return GUINT32_FROM_BE(v);
}

static inline uint16_t ld_be16(const uint8_t *p)
{
    uint16_t v;

    memcpy(&v, p, sizeof(v));
    return GUINT16_FROM_BE(v);
}

/*
 * Messages quote names taken from the image (backing file, format,
 * feature and snapshot names): they become valid UTF-8 without control
 * characters, so that a hostile image can neither break a JSON reply nor
 * write terminal escape sequences into a log.
 */
void qcow2_set_error(GError **errp, const char *fmt, ...)
{
    va_list ap;
    char *msg, *safe, *p;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    safe = g_utf8_make_valid(msg, -1);
    for (p = safe; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            *p = '?';
        }
    }
    g_set_error_literal(errp, VB_ERROR, 0, safe);
    g_free(safe);
    g_free(msg);
}

#define set_err qcow2_set_error

/* A string field: no NUL inside (it would silently cut the name). */
static char *dup_name(const uint8_t *p, size_t len, const char *what,
                      GError **errp)
{
    if (memchr(p, 0, len)) {
        set_err(errp, "qcow2 %s contains a NUL byte", what);
        return NULL;
    }
    return g_strndup((const char *)p, len);
}

/* [off, off + len) inside a file of file_size bytes? */
static bool in_file(uint64_t file_size, uint64_t off, uint64_t len)
{
    return off <= file_size && len <= file_size - off;
}

bool qcow2_check_l1_table(const Qcow2Info *info, uint64_t offset,
                          uint64_t entries, const char *what, GError **errp)
{
    if (offset & (info->cluster_size - 1)) {
        set_err(errp, "qcow2 %s offset %#" PRIx64 " is not aligned to the "
                "cluster size (%u bytes): the image is corrupt",
                what, offset, info->cluster_size);
        return false;
    }
    if (entries > QCOW2_MAX_L1_ENTRIES) {
        set_err(errp, "qcow2 %s has %" PRIu64 " entries, more than the "
                "%u supported", what, entries, QCOW2_MAX_L1_ENTRIES);
        return false;
    }
    if (entries == 0) {
        return true;
    }
    if (offset == 0) {
        set_err(errp, "qcow2 %s offset is 0 (the header): the image is "
                "corrupt", what);
        return false;
    }
    if (!in_file(info->file_size, offset, entries * 8)) {
        set_err(errp, "qcow2 %s (%" PRIu64 " entries at offset %#" PRIx64
                ") lies beyond the end of the file (%" PRIu64 " bytes): "
                "the image is truncated or corrupt",
                what, entries, offset, info->file_size);
        return false;
    }
    return true;
}

/* ---- header extensions ------------------------------------------------- */

static bool parse_feature_table(Qcow2Info *info, const uint8_t *p,
                                uint32_t len, GError **errp)
{
    uint32_t i, n;

    if (len % 48) {
        set_err(errp, "qcow2 feature name table extension: length %u is "
                "not a multiple of 48 (the entry size)", len);
        return false;
    }
    n = len / 48;
    info->feature_names = g_new0(Qcow2FeatureName, n);
    info->nb_feature_names = n;
    for (i = 0; i < n; i++) {
        const uint8_t *e = p + i * 48;
        Qcow2FeatureName *f = &info->feature_names[i];

        if (e[0] > 2 || e[1] > 63) {
            set_err(errp, "qcow2 feature name table entry %u: type %u bit %u "
                    "is invalid (types 0..2, bits 0..63)", i, e[0], e[1]);
            return false;
        }
        f->type = e[0];
        f->bit = e[1];
        /* 46 name bytes, NUL-padded but not necessarily terminated */
        memcpy(f->name, e + 2, 46);
        f->name[46] = '\0';
    }
    return true;
}

static bool parse_bitmaps_ext(Qcow2Info *info, const uint8_t *p,
                              uint32_t len, GError **errp)
{
    if (len != 24) {
        set_err(errp, "qcow2 bitmaps extension: length %u, expected 24", len);
        return false;
    }
    info->has_bitmaps_ext = true;
    info->nb_bitmaps = ld_be32(p);
    info->bitmap_directory_size = qcow2_ld_be64(p + 8);
    info->bitmap_directory_offset = qcow2_ld_be64(p + 16);
    /*
     * Without the autoclear bit the data is stale (a program that did not
     * know bitmaps wrote the image) and will be discarded: only a
     * consistent extension must be well-formed.
     */
    if (!(info->h.autoclear_features & QCOW2_AUTOCLEAR_BITMAPS)) {
        return true;
    }
    info->bitmaps_consistent = true;
    if (info->nb_bitmaps == 0 || info->nb_bitmaps > QCOW2_MAX_BITMAPS) {
        set_err(errp, "qcow2 bitmaps extension: nb_bitmaps %u is outside "
                "1..%u", info->nb_bitmaps, QCOW2_MAX_BITMAPS);
        return false;
    }
    if (ld_be32(p + 4) != 0) {
        set_err(errp, "qcow2 bitmaps extension: reserved field is not zero");
        return false;
    }
    if (info->bitmap_directory_size == 0 ||
        info->bitmap_directory_size > QCOW2_MAX_BITMAP_DIRECTORY) {
        set_err(errp, "qcow2 bitmaps extension: bitmap_directory_size %"
                PRIu64 " is outside 1..%u", info->bitmap_directory_size,
                QCOW2_MAX_BITMAP_DIRECTORY);
        return false;
    }
    if (info->bitmap_directory_offset & (info->cluster_size - 1) ||
        info->bitmap_directory_offset == 0 ||
        !in_file(info->file_size, info->bitmap_directory_offset,
                 info->bitmap_directory_size)) {
        set_err(errp, "qcow2 bitmaps extension: bitmap_directory_offset %#"
                PRIx64 " (%" PRIu64 " bytes) is not cluster-aligned or lies "
                "outside the file", info->bitmap_directory_offset,
                info->bitmap_directory_size);
        return false;
    }
    return true;
}

static bool parse_crypto_ext(Qcow2Info *info, const uint8_t *p,
                             uint32_t len, GError **errp)
{
    if (len != 16) {
        set_err(errp, "qcow2 full disk encryption header extension: length "
                "%u, expected 16", len);
        return false;
    }
    if (info->h.crypt_method != QCOW2_CRYPT_LUKS) {
        set_err(errp, "qcow2 full disk encryption header extension present "
                "but crypt_method is %u, not LUKS (2)", info->h.crypt_method);
        return false;
    }
    info->has_crypto_header = true;
    info->crypto_header_offset = qcow2_ld_be64(p);
    info->crypto_header_length = qcow2_ld_be64(p + 8);
    if (info->crypto_header_offset & (info->cluster_size - 1) ||
        info->crypto_header_offset == 0 ||
        !in_file(info->file_size, info->crypto_header_offset,
                 info->crypto_header_length)) {
        set_err(errp, "qcow2 full disk encryption header (offset %#" PRIx64
                ", %" PRIu64 " bytes) is not cluster-aligned or lies outside "
                "the file", info->crypto_header_offset,
                info->crypto_header_length);
        return false;
    }
    return true;
}

/* Walk the extensions in [start, end) of the first cluster. */
static bool parse_extensions(Qcow2Info *info, const uint8_t *buf,
                             uint32_t start, uint32_t end, GError **errp)
{
    uint32_t off = start;
    unsigned int seen = 0;
    uint32_t type, len;
    unsigned int kind;

    info->extensions_end = start;
    while (end - off >= 8) {
        type = ld_be32(buf + off);
        len = ld_be32(buf + off + 4);
        off += 8;
        if (type == QCOW2_EXT_END) {
            break;
        }
        if (len > end - off) {
            set_err(errp, "qcow2 header extension %#010x: length %u runs "
                    "past the end of the header extension area (%u bytes "
                    "left): the image is corrupt", type, len, end - off);
            return false;
        }
        switch (type) {
        case QCOW2_EXT_BACKING_FORMAT:
            kind = 0;
            break;
        case QCOW2_EXT_FEATURE_TABLE:
            kind = 1;
            break;
        case QCOW2_EXT_BITMAPS:
            kind = 2;
            break;
        case QCOW2_EXT_CRYPTO_HEADER:
            kind = 3;
            break;
        case QCOW2_EXT_DATA_FILE:
            kind = 4;
            break;
        default:
            /* unknown: safe to ignore, by the specification */
            info->nb_unknown_extensions++;
            kind = UINT_MAX;
            break;
        }
        if (kind != UINT_MAX) {
            if (seen & (1u << kind)) {
                set_err(errp, "qcow2 header extension %#010x appears twice",
                        type);
                return false;
            }
            seen |= 1u << kind;
        }
        switch (type) {
        case QCOW2_EXT_BACKING_FORMAT:
            if (len == 0 || len > 15) {
                set_err(errp, "qcow2 backing format extension: length %u is "
                        "outside 1..15", len);
                return false;
            }
            info->backing_format = dup_name(buf + off, len,
                                            "backing format name", errp);
            if (!info->backing_format) {
                return false;
            }
            break;
        case QCOW2_EXT_FEATURE_TABLE:
            if (!parse_feature_table(info, buf + off, len, errp)) {
                return false;
            }
            break;
        case QCOW2_EXT_BITMAPS:
            if (!parse_bitmaps_ext(info, buf + off, len, errp)) {
                return false;
            }
            break;
        case QCOW2_EXT_CRYPTO_HEADER:
            if (!parse_crypto_ext(info, buf + off, len, errp)) {
                return false;
            }
            break;
        case QCOW2_EXT_DATA_FILE:
            if (len == 0 || len > QCOW2_MAX_BACKING_NAME) {
                set_err(errp, "qcow2 external data file name extension: "
                        "length %u is outside 1..%u", len,
                        QCOW2_MAX_BACKING_NAME);
                return false;
            }
            info->data_file = dup_name(buf + off, len,
                                       "external data file name", errp);
            if (!info->data_file) {
                return false;
            }
            break;
        }
        /* padded to a multiple of 8 (end may cut the padding short) */
        len = QEMU_ALIGN_UP(len, 8);
        off = len > end - off ? end : off + len;
        info->extensions_end = off;
    }
    info->extensions_end = off;
    return true;
}

/* ---- header ------------------------------------------------------------ */

static void read_header_fields(Qcow2Header *h, const uint8_t *b)
{
    h->magic = ld_be32(b);
    h->version = ld_be32(b + 4);
    h->backing_file_offset = qcow2_ld_be64(b + 8);
    h->backing_file_size = ld_be32(b + 16);
    h->cluster_bits = ld_be32(b + 20);
    h->size = qcow2_ld_be64(b + 24);
    h->crypt_method = ld_be32(b + 32);
    h->l1_size = ld_be32(b + 36);
    h->l1_table_offset = qcow2_ld_be64(b + 40);
    h->refcount_table_offset = qcow2_ld_be64(b + 48);
    h->refcount_table_clusters = ld_be32(b + 56);
    h->nb_snapshots = ld_be32(b + 60);
    h->snapshots_offset = qcow2_ld_be64(b + 64);
}

static bool check_features(Qcow2Info *info, unsigned int flags,
                           GError **errp)
{
    Qcow2Header *h = &info->h;
    uint64_t unknown = h->incompatible_features & ~QCOW2_INCOMPAT_KNOWN;

    if (unknown) {
        unsigned int bit = __builtin_ctzll(unknown);
        const char *name = NULL;
        uint32_t i;

        for (i = 0; i < info->nb_feature_names; i++) {
            if (info->feature_names[i].type == 0 &&
                info->feature_names[i].bit == bit) {
                name = info->feature_names[i].name;
            }
        }
        set_err(errp, "qcow2 image uses unsupported incompatible feature bit "
                "%u%s%s%s: it needs a newer program to open it", bit,
                name ? " ('" : "", name ? name : "", name ? "')" : "");
        return false;
    }
    info->dirty = h->incompatible_features & QCOW2_INCOMPAT_DIRTY;
    info->corrupt = h->incompatible_features & QCOW2_INCOMPAT_CORRUPT;
    info->has_data_file = h->incompatible_features & QCOW2_INCOMPAT_DATA_FILE;
    info->extended_l2 = h->incompatible_features & QCOW2_INCOMPAT_EXTL2;
    info->lazy_refcounts =
        h->compatible_features & QCOW2_COMPAT_LAZY_REFCOUNTS;
    info->data_file_raw = h->autoclear_features & QCOW2_AUTOCLEAR_DATA_RAW;

    if (info->corrupt && (flags & QCOW2_OPEN_WRITE)) {
        set_err(errp, "qcow2 image is marked corrupt: open it read-only, or "
                "repair it with 'qemu-img check -r all'");
        return false;
    }
    if (h->incompatible_features & QCOW2_INCOMPAT_COMPRESSION) {
        if (h->compression_type == QCOW2_COMPRESSION_DEFLATE) {
            set_err(errp, "qcow2 incompatible feature 'compression type' is "
                    "set but compression_type is 0 (deflate): the image is "
                    "corrupt");
            return false;
        }
    } else if (h->compression_type != QCOW2_COMPRESSION_DEFLATE) {
        set_err(errp, "qcow2 compression_type %u without the incompatible "
                "feature bit 'compression type': the image is corrupt",
                h->compression_type);
        return false;
    }
    if (h->compression_type > QCOW2_COMPRESSION_ZSTD) {
        set_err(errp, "qcow2 compression_type %u is unknown (0 deflate, "
                "1 zstd are supported)", h->compression_type);
        return false;
    }
    if (info->extended_l2 && h->cluster_bits < QCOW2_MIN_EXTL2_CLUSTER_BITS) {
        set_err(errp, "qcow2 extended L2 entries need cluster_bits >= %u, "
                "the image has %u", QCOW2_MIN_EXTL2_CLUSTER_BITS,
                h->cluster_bits);
        return false;
    }
    if (info->data_file && !info->has_data_file) {
        set_err(errp, "qcow2 external data file name extension present but "
                "the incompatible feature 'external data file' is not set");
        return false;
    }
    if (info->data_file_raw && !info->has_data_file) {
        set_err(errp, "qcow2 autoclear feature 'raw external data' set "
                "without the incompatible feature 'external data file'");
        return false;
    }
    if (h->crypt_method > QCOW2_CRYPT_LUKS) {
        set_err(errp, "qcow2 crypt_method %u is unknown (0 none, 1 AES, "
                "2 LUKS)", h->crypt_method);
        return false;
    }
    info->encrypted = h->crypt_method != QCOW2_CRYPT_NONE;
    if (h->crypt_method == QCOW2_CRYPT_LUKS && !info->has_crypto_header) {
        set_err(errp, "qcow2 crypt_method is LUKS but the full disk "
                "encryption header extension is missing");
        return false;
    }
    return true;
}

static bool check_backing_name(Qcow2Info *info, const uint8_t *buf,
                               size_t len, GError **errp)
{
    Qcow2Header *h = &info->h;

    if (h->backing_file_offset == 0) {
        return true;
    }
    if (h->backing_file_size == 0 ||
        h->backing_file_size > QCOW2_MAX_BACKING_NAME) {
        set_err(errp, "qcow2 backing_file_size %u is outside 1..%u",
                h->backing_file_size, QCOW2_MAX_BACKING_NAME);
        return false;
    }
    /* After the header, inside the first cluster (and so inside buf). */
    if (h->backing_file_offset < h->header_length ||
        h->backing_file_offset > info->cluster_size ||
        h->backing_file_size > info->cluster_size - h->backing_file_offset) {
        set_err(errp, "qcow2 backing file name (offset %" PRIu64 ", %u "
                "bytes) lies outside the space after the header in the "
                "first cluster (%u bytes)", h->backing_file_offset,
                h->backing_file_size, info->cluster_size);
        return false;
    }
    if (!in_file(len, h->backing_file_offset, h->backing_file_size)) {
        set_err(errp, "qcow2 backing file name (offset %" PRIu64 ", %u "
                "bytes) lies beyond the end of the file (%" PRIu64 " bytes)",
                h->backing_file_offset, h->backing_file_size,
                info->file_size);
        return false;
    }
    info->backing_file = dup_name(buf + h->backing_file_offset,
                                  h->backing_file_size, "backing file name",
                                  errp);
    if (!info->backing_file) {
        return false;
    }
    if (info->data_file_raw) {
        set_err(errp, "qcow2 image has both a backing file and a raw "
                "external data file, which the format forbids");
        return false;
    }
    return true;
}

static bool check_tables(Qcow2Info *info, GError **errp)
{
    Qcow2Header *h = &info->h;
    uint64_t span, needed, rt_bytes;

    if (h->size > QCOW2_MAX_VIRTUAL_SIZE) {
        set_err(errp, "qcow2 virtual size %" PRIu64 " is larger than the "
                "supported %" PRIu64 " bytes", h->size,
                QCOW2_MAX_VIRTUAL_SIZE);
        return false;
    }
    /* bytes one L1 entry maps: at most 2^(21 + 18) */
    span = 1ull << (h->cluster_bits + info->l2_bits);
    needed = h->size / span + !!(h->size % span);
    if (needed > QCOW2_MAX_L1_ENTRIES) {
        set_err(errp, "qcow2 virtual size %" PRIu64 " needs %" PRIu64 " L1 "
                "entries with %u-byte clusters, more than the %u "
                "supported: use larger clusters", h->size, needed,
                info->cluster_size, QCOW2_MAX_L1_ENTRIES);
        return false;
    }
    info->l1_needed = needed;
    if (h->l1_size < needed) {
        set_err(errp, "qcow2 l1_size %u is too small for the virtual size "
                "(%" PRIu64 " bytes need %" PRIu64 " entries): the image is "
                "corrupt", h->l1_size, h->size, needed);
        return false;
    }
    if (!qcow2_check_l1_table(info, h->l1_table_offset, h->l1_size,
                              "L1 table", errp)) {
        return false;
    }

    if (h->refcount_table_clusters == 0) {
        set_err(errp, "qcow2 refcount_table_clusters is 0: the image is "
                "corrupt");
        return false;
    }
    if (h->refcount_table_clusters >
        QCOW2_MAX_REFTABLE_BYTES >> h->cluster_bits) {
        set_err(errp, "qcow2 refcount_table_clusters %u is larger than the "
                "supported %u bytes", h->refcount_table_clusters,
                QCOW2_MAX_REFTABLE_BYTES);
        return false;
    }
    rt_bytes = (uint64_t)h->refcount_table_clusters << h->cluster_bits;
    if (h->refcount_table_offset & (info->cluster_size - 1) ||
        h->refcount_table_offset == 0) {
        set_err(errp, "qcow2 refcount_table_offset %#" PRIx64 " is 0 or not "
                "aligned to the cluster size: the image is corrupt",
                h->refcount_table_offset);
        return false;
    }
    if (!in_file(info->file_size, h->refcount_table_offset, rt_bytes)) {
        set_err(errp, "qcow2 refcount table (%u clusters at offset %#" PRIx64
                ") lies beyond the end of the file (%" PRIu64 " bytes): the "
                "image is truncated or corrupt", h->refcount_table_clusters,
                h->refcount_table_offset, info->file_size);
        return false;
    }

    if (h->nb_snapshots > QCOW2_MAX_SNAPSHOTS) {
        set_err(errp, "qcow2 nb_snapshots %u is more than the supported %u",
                h->nb_snapshots, QCOW2_MAX_SNAPSHOTS);
        return false;
    }
    if (h->snapshots_offset & (info->cluster_size - 1)) {
        set_err(errp, "qcow2 snapshots_offset %#" PRIx64 " is not aligned to "
                "the cluster size: the image is corrupt", h->snapshots_offset);
        return false;
    }
    if (h->nb_snapshots &&
        (h->snapshots_offset == 0 || h->snapshots_offset >= info->file_size)) {
        set_err(errp, "qcow2 snapshot table offset %#" PRIx64 " is 0 or "
                "beyond the end of the file (%" PRIu64 " bytes)",
                h->snapshots_offset, info->file_size);
        return false;
    }
    return true;
}

static bool parse_header(const uint8_t *buf, size_t len, uint64_t file_size,
                         unsigned int flags, Qcow2Info *info, GError **errp)
{
    Qcow2Header *h = &info->h;
    uint32_t ext_start, ext_end;

    info->file_size = file_size;
    if (len > file_size) {
        set_err(errp, "qcow2: %zu header bytes from a file of %" PRIu64,
                len, file_size);
        return false;
    }
    if (len < QCOW2_V2_HEADER_LENGTH) {
        set_err(errp, "file is too short (%zu bytes) for a qcow2 header", len);
        return false;
    }
    read_header_fields(h, buf);
    if (h->magic != QCOW2_MAGIC) {
        set_err(errp, "not a qcow2 image (no QFI\\xfb magic)");
        return false;
    }
    if (h->version != 2 && h->version != 3) {
        set_err(errp, "qcow2 version %u is not supported (2 and 3 are)",
                h->version);
        return false;
    }
    if (h->cluster_bits < QCOW2_MIN_CLUSTER_BITS ||
        h->cluster_bits > QCOW2_MAX_CLUSTER_BITS) {
        set_err(errp, "qcow2 cluster_bits %u is outside %u..%u (cluster "
                "sizes 512 B..2 MiB)", h->cluster_bits,
                QCOW2_MIN_CLUSTER_BITS, QCOW2_MAX_CLUSTER_BITS);
        return false;
    }
    info->cluster_size = 1u << h->cluster_bits;
    if (len < MIN(info->cluster_size, file_size)) {
        set_err(errp, "qcow2: the header buffer (%zu bytes) does not hold "
                "the first cluster (%u bytes)", len, info->cluster_size);
        return false;
    }

    if (h->version == 2) {
        h->refcount_order = 4;
        h->header_length = QCOW2_V2_HEADER_LENGTH;
    } else {
        if (len < QCOW2_V3_HEADER_LENGTH) {
            set_err(errp, "file is too short (%zu bytes) for a qcow2 "
                    "version 3 header", len);
            return false;
        }
        h->incompatible_features = qcow2_ld_be64(buf + 72);
        h->compatible_features = qcow2_ld_be64(buf + 80);
        h->autoclear_features = qcow2_ld_be64(buf + 88);
        h->refcount_order = ld_be32(buf + 96);
        h->header_length = ld_be32(buf + 100);
        if (h->header_length < QCOW2_V3_HEADER_LENGTH ||
            h->header_length % 8 ||
            h->header_length > info->cluster_size) {
            set_err(errp, "qcow2 header_length %u is invalid (a multiple "
                    "of 8, from %u up to the cluster size %u)",
                    h->header_length, QCOW2_V3_HEADER_LENGTH,
                    info->cluster_size);
            return false;
        }
        if (h->header_length > len) {
            set_err(errp, "qcow2 header_length %u runs past the end of the "
                    "file (%zu bytes)", h->header_length, len);
            return false;
        }
        if (h->header_length > QCOW2_V3_HEADER_LENGTH) {
            h->compression_type = buf[QCOW2_V3_HEADER_LENGTH];
        }
    }
    if (h->refcount_order > QCOW2_MAX_REFCOUNT_ORDER) {
        set_err(errp, "qcow2 refcount_order %u is larger than %u (64-bit "
                "refcounts)", h->refcount_order, QCOW2_MAX_REFCOUNT_ORDER);
        return false;
    }

    /* The extensions end where the backing file name starts. */
    ext_start = h->header_length;
    ext_end = MIN(info->cluster_size, len);
    if (h->backing_file_offset) {
        if (h->backing_file_offset < ext_start) {
            set_err(errp, "qcow2 backing_file_offset %" PRIu64 " overlaps "
                    "the header (%u bytes)", h->backing_file_offset,
                    ext_start);
            return false;
        }
        if (h->backing_file_offset < ext_end) {
            ext_end = h->backing_file_offset;
        }
    }
    if (!parse_extensions(info, buf, ext_start, ext_end, errp)) {
        return false;
    }
    if (!check_features(info, flags, errp) ||
        !check_backing_name(info, buf, len, errp)) {
        return false;
    }

    /* geometry: every shift below is bounded by the checks above */
    info->l2_entry_size = info->extended_l2 ? 16 : 8;
    info->l2_bits = h->cluster_bits - (info->extended_l2 ? 4 : 3);
    info->l2_entries = 1u << info->l2_bits;
    info->refcount_bits = 1u << h->refcount_order;
    info->refcount_max = info->refcount_bits == 64 ? UINT64_MAX :
                         (1ull << info->refcount_bits) - 1;
    info->refblock_entries = (info->cluster_size * 8) >> h->refcount_order;
    info->csize_shift = 62 - (h->cluster_bits - 8);
    info->csize_mask = (1ull << (h->cluster_bits - 8)) - 1;
    info->coffset_mask = (1ull << info->csize_shift) - 1;

    return check_tables(info, errp);
}

bool qcow2_parse_header(const uint8_t *buf, size_t len, uint64_t file_size,
                        unsigned int flags, Qcow2Info *info, GError **errp)
{
    memset(info, 0, sizeof(*info));
    if (!parse_header(buf, len, file_size, flags, info, errp)) {
        /* the names and tables parsed before the error */
        qcow2_info_free(info);
        return false;
    }
    return true;
}

const char *qcow2_unsupported_feature(const Qcow2Info *info)
{
    if (info->extended_l2) {
        return "qcow2 image uses extended L2 entries (subclusters), which "
               "are not supported: convert it with 'qemu-img convert -O "
               "qcow2 -o extended_l2=off'";
    }
    if (info->has_data_file) {
        return "qcow2 image uses an external data file, which is not "
               "supported: convert it with 'qemu-img convert -O qcow2'";
    }
    if (info->encrypted) {
        return "qcow2 image is encrypted, which is not supported: convert "
               "it to an unencrypted image with 'qemu-img convert'";
    }
    return NULL;
}

void qcow2_info_free(Qcow2Info *info)
{
    uint32_t i;

    g_free(info->backing_file);
    g_free(info->backing_format);
    g_free(info->data_file);
    g_free(info->feature_names);
    for (i = 0; i < info->nb_snapshots; i++) {
        g_free(info->snapshots[i].id);
        g_free(info->snapshots[i].name);
    }
    g_free(info->snapshots);
    memset(info, 0, sizeof(*info));
}

/* ---- snapshot table ---------------------------------------------------- */

uint64_t qcow2_snapshot_table_max_bytes(const Qcow2Info *info)
{
    if (!info->h.nb_snapshots ||
        info->h.snapshots_offset >= info->file_size) {
        return 0;
    }
    return MIN(info->file_size - info->h.snapshots_offset,
               (uint64_t)QCOW2_MAX_SNAPSHOT_TABLE);
}

/* The table runs past @len: -EAGAIN if more can be read, else an error. */
static int snapshot_short(const Qcow2Info *info, size_t len, uint32_t i,
                          GError **errp)
{
    if (len < qcow2_snapshot_table_max_bytes(info)) {
        return -EAGAIN;
    }
    set_err(errp, "qcow2 snapshot table entry %u runs past the end of the "
            "%s", i, len < QCOW2_MAX_SNAPSHOT_TABLE ? "file" :
            "supported snapshot table size (64 MiB)");
    return -EINVAL;
}

int qcow2_parse_snapshots(Qcow2Info *info, const uint8_t *buf, size_t len,
                          GError **errp)
{
    uint32_t n = info->h.nb_snapshots, i;
    Qcow2Snapshot *sns;
    size_t pos = 0;
    int ret = -EINVAL;

    g_assert(info->nb_snapshots == 0 && !info->snapshots);
    if (n == 0) {
        return 0;
    }
    /* each entry has at least 40 bytes: refuse before allocating */
    if ((uint64_t)n * 40 > qcow2_snapshot_table_max_bytes(info)) {
        set_err(errp, "qcow2 nb_snapshots %u: that many snapshot table "
                "entries cannot fit in the %" PRIu64 " bytes after "
                "snapshots_offset", n, qcow2_snapshot_table_max_bytes(info));
        return -EINVAL;
    }
    len = MIN(len, qcow2_snapshot_table_max_bytes(info));
    sns = g_new0(Qcow2Snapshot, n);
    for (i = 0; i < n; i++) {
        Qcow2Snapshot *sn = &sns[i];
        const uint8_t *e;
        uint32_t id_len, name_len, extra;
        size_t need;
        char what[64];

        /* entries are padded to 8 bytes; pos <= len holds here */
        if (len - pos < 40) {
            ret = snapshot_short(info, len, i, errp);
            goto fail;
        }
        e = buf + pos;
        sn->l1_table_offset = qcow2_ld_be64(e);
        sn->l1_size = ld_be32(e + 8);
        id_len = ld_be16(e + 12);
        name_len = ld_be16(e + 14);
        sn->date_sec = ld_be32(e + 16);
        sn->date_nsec = ld_be32(e + 20);
        sn->vm_clock_nsec = qcow2_ld_be64(e + 24);
        sn->vm_state_size = ld_be32(e + 32);
        extra = ld_be32(e + 36);
        sn->extra_data_size = extra;
        if (extra > QCOW2_MAX_SNAPSHOT_EXTRA) {
            set_err(errp, "qcow2 snapshot table entry %u: extra data size "
                    "%u is larger than the supported %u", i, extra,
                    QCOW2_MAX_SNAPSHOT_EXTRA);
            goto fail;
        }
        need = 40 + (size_t)extra + id_len + name_len;
        if (len - pos < need) {
            ret = snapshot_short(info, len, i, errp);
            goto fail;
        }
        if (extra >= 8) {
            sn->vm_state_size = qcow2_ld_be64(e + 40);
        }
        if (extra >= 16) {
            sn->has_disk_size = true;
            sn->disk_size = qcow2_ld_be64(e + 48);
        }
        sn->id = g_strndup((const char *)e + 40 + extra, id_len);
        sn->name = g_strndup((const char *)e + 40 + extra + id_len, name_len);

        snprintf(what, sizeof(what), "snapshot %u L1 table", i);
        if (!qcow2_check_l1_table(info, sn->l1_table_offset, sn->l1_size,
                                  what, errp)) {
            goto fail;
        }
        if (sn->has_disk_size) {
            uint64_t span = 1ull << (info->h.cluster_bits + info->l2_bits);

            if (sn->disk_size > QCOW2_MAX_VIRTUAL_SIZE ||
                sn->disk_size / span + !!(sn->disk_size % span) >
                sn->l1_size) {
                set_err(errp, "qcow2 snapshot table entry %u: disk size %"
                        PRIu64 " does not fit its L1 table (%u entries)", i,
                        sn->disk_size, sn->l1_size);
                goto fail;
            }
        }
        need = QEMU_ALIGN_UP(need, 8);
        pos = need > len - pos ? len : pos + need;
    }
    info->snapshots = sns;
    info->nb_snapshots = n;
    return 0;

fail:
    for (i = 0; i < n; i++) {
        g_free(sns[i].id);
        g_free(sns[i].name);
    }
    g_free(sns);
    return ret;
}

/* ---- table entries ----------------------------------------------------- */

#define L1_RESERVED     0x7f000000000001ffull
#define L2_RESERVED     0x3f000000000001feull
#define REFT_RESERVED   0x00000000000001ffull
#define OFLAG_COPIED    (1ull << 63)
#define OFLAG_COMPRESSED (1ull << 62)
#define OFLAG_ZERO      1ull

int qcow2_check_host_range(const Qcow2Info *info, uint64_t offset,
                           uint64_t len, const char **why)
{
    if (!in_file(info->file_size, offset, len)) {
        *why = "points beyond the end of the file";
        return -EUCLEAN;
    }
    return 0;
}

int qcow2_l1_decode(const Qcow2Info *info, uint64_t entry,
                    Qcow2L1Entry *out, const char **why)
{
    uint64_t off = entry & QCOW2_OFFSET_MASK;

    if (entry & L1_RESERVED) {
        *why = "L1 entry has reserved bits set";
        return -EUCLEAN;
    }
    if (off & (info->cluster_size - 1)) {
        *why = "L1 entry: L2 table offset is not cluster-aligned";
        return -EUCLEAN;
    }
    if (off && !in_file(info->file_size, off, info->cluster_size)) {
        *why = "L1 entry: L2 table lies beyond the end of the file";
        return -EUCLEAN;
    }
    out->l2_offset = off;
    out->copied = entry & OFLAG_COPIED;
    return 0;
}

uint64_t qcow2_l1_encode(uint64_t l2_offset, bool copied)
{
    return (l2_offset & QCOW2_OFFSET_MASK) | (copied ? OFLAG_COPIED : 0);
}

int qcow2_l2_decode(const Qcow2Info *info, uint64_t entry,
                    Qcow2L2Entry *out, const char **why)
{
    uint64_t off;

    memset(out, 0, sizeof(*out));
    out->copied = entry & OFLAG_COPIED;
    if (entry & OFLAG_COMPRESSED) {
        uint64_t nsect;

        if (out->copied) {
            *why = "L2 entry: compressed cluster has the copied flag set";
            return -EUCLEAN;
        }
        if (info->has_data_file) {
            *why = "L2 entry: compressed cluster in an image with an "
                   "external data file";
            return -EUCLEAN;
        }
        off = entry & info->coffset_mask;
        if (off >= QCOW2_MAX_HOST_OFFSET) {
            *why = "L2 entry: compressed cluster offset beyond 56 bits";
            return -EUCLEAN;
        }
        if (off < info->cluster_size) {
            *why = "L2 entry: compressed cluster inside the header cluster";
            return -EUCLEAN;
        }
        /* sectors beyond the one holding the offset; offset mod 512 is
         * where the data starts in the first */
        nsect = (entry >> info->csize_shift) & info->csize_mask;
        out->type = QCOW2_CLUSTER_COMPRESSED;
        out->host_offset = off;
        out->compressed_size = (nsect + 1) * 512 - (off & 511);
        return 0;
    }

    if (entry & L2_RESERVED) {
        *why = "L2 entry has reserved bits set";
        return -EUCLEAN;
    }
    if ((entry & OFLAG_ZERO) &&
        (info->h.version < 3 || info->extended_l2)) {
        *why = info->extended_l2 ?
               "L2 entry has reserved bit 0 set (extended L2 image)" :
               "L2 entry has the zero flag set in a version 2 image";
        return -EUCLEAN;
    }
    off = entry & QCOW2_OFFSET_MASK;
    if (off & (info->cluster_size - 1)) {
        *why = "L2 entry: data cluster offset is not cluster-aligned";
        return -EUCLEAN;
    }
    out->host_offset = off;
    if (entry & OFLAG_ZERO) {
        out->type = off ? QCOW2_CLUSTER_ZERO_ALLOC : QCOW2_CLUSTER_ZERO_PLAIN;
    } else if (off) {
        out->type = QCOW2_CLUSTER_NORMAL;
    } else if (out->copied) {
        /* host offset 0 exists only in an external data file */
        if (!info->has_data_file) {
            *why = "L2 entry: data cluster at offset 0 (the header)";
            return -EUCLEAN;
        }
        out->type = QCOW2_CLUSTER_NORMAL;
    } else {
        out->type = QCOW2_CLUSTER_UNALLOCATED;
    }
    return 0;
}

uint64_t qcow2_l2_encode_standard(uint64_t host_offset, bool copied,
                                  bool zero)
{
    return (host_offset & QCOW2_OFFSET_MASK) | (copied ? OFLAG_COPIED : 0) |
           (zero ? OFLAG_ZERO : 0);
}

int qcow2_l2_encode_compressed(const Qcow2Info *info, uint64_t host_offset,
                               uint32_t len, uint64_t *entry)
{
    uint64_t extra;

    if (len == 0 || host_offset > info->coffset_mask ||
        host_offset >= QCOW2_MAX_HOST_OFFSET ||
        host_offset < info->cluster_size) {
        return -ERANGE;
    }
    /* last sector touched minus first sector touched */
    extra = ((host_offset + len - 1) >> 9) - (host_offset >> 9);
    if (extra > info->csize_mask) {
        return -ERANGE;
    }
    *entry = OFLAG_COMPRESSED | (extra << info->csize_shift) | host_offset;
    return 0;
}

/* ---- refcounts --------------------------------------------------------- */

int qcow2_reftable_decode(const Qcow2Info *info, uint64_t entry,
                          uint64_t *block_offset, const char **why)
{
    uint64_t off = entry & ~REFT_RESERVED;

    if (entry & REFT_RESERVED) {
        *why = "refcount table entry has reserved bits set";
        return -EUCLEAN;
    }
    if (off & (info->cluster_size - 1)) {
        *why = "refcount table entry: block offset is not cluster-aligned";
        return -EUCLEAN;
    }
    if (off && !in_file(info->file_size, off, info->cluster_size)) {
        *why = "refcount table entry: block lies beyond the end of the file";
        return -EUCLEAN;
    }
    *block_offset = off;
    return 0;
}

uint64_t qcow2_reftable_encode(uint64_t block_offset)
{
    return block_offset & ~REFT_RESERVED;
}

int qcow2_refcount_get(const Qcow2Info *info, const uint8_t *block,
                       uint32_t index, uint64_t *value)
{
    uint32_t order = info->h.refcount_order;

    if (index >= info->refblock_entries) {
        return -ERANGE;
    }
    switch (order) {
    case 0: case 1: case 2: {
        /* sub-byte entries: entry 0 in the least significant bits */
        uint32_t bits = 1u << order;
        uint32_t bit = index << order;

        *value = (block[bit / 8] >> (bit % 8)) & ((1u << bits) - 1);
        break;
    }
    case 3:
        *value = block[index];
        break;
    case 4:
        *value = ld_be16(block + index * 2);
        break;
    case 5:
        *value = ld_be32(block + index * 4);
        break;
    default:
        *value = qcow2_ld_be64(block + (size_t)index * 8);
        break;
    }
    return 0;
}

int qcow2_refcount_set(const Qcow2Info *info, uint8_t *block,
                       uint32_t index, uint64_t value)
{
    uint32_t order = info->h.refcount_order;

    if (index >= info->refblock_entries || value > info->refcount_max) {
        return -ERANGE;
    }
    switch (order) {
    case 0: case 1: case 2: {
        uint32_t bits = 1u << order;
        uint32_t bit = index << order;
        uint8_t mask = ((1u << bits) - 1) << (bit % 8);

        block[bit / 8] = (block[bit / 8] & ~mask) |
                         (uint8_t)(value << (bit % 8));
        break;
    }
    case 3:
        block[index] = value;
        break;
    case 4: {
        uint16_t v = GUINT16_TO_BE(value);

        memcpy(block + index * 2, &v, 2);
        break;
    }
    case 5: {
        uint32_t v = GUINT32_TO_BE(value);

        memcpy(block + index * 4, &v, 4);
        break;
    }
    default:
        qcow2_st_be64(block + (size_t)index * 8, value);
        break;
    }
    return 0;
}

int qcow2_refcount_pos(const Qcow2Info *info, uint64_t host_offset,
                       Qcow2RefcountPos *pos)
{
    uint64_t cluster = host_offset >> info->h.cluster_bits;
    uint64_t table_entries =
        ((uint64_t)info->h.refcount_table_clusters << info->h.cluster_bits) / 8;

    pos->table_index = cluster / info->refblock_entries;
    pos->block_index = cluster % info->refblock_entries;
    return pos->table_index < table_entries ? 0 : -ERANGE;
}

/* ---- mapping ----------------------------------------------------------- */

int qcow2_map(const Qcow2Info *info, uint64_t disk_size, uint64_t l1_size,
              uint64_t offset, Qcow2Map *map)
{
    uint64_t cluster;

    if (offset >= disk_size) {
        return -ERANGE;
    }
    cluster = offset >> info->h.cluster_bits;
    map->l1_index = cluster >> info->l2_bits;
    map->l2_index = cluster & (info->l2_entries - 1);
    map->in_cluster = offset & (info->cluster_size - 1);
    map->cluster_bytes_left = info->cluster_size - map->in_cluster;
    return map->l1_index < l1_size ? 0 : -ERANGE;
}

/* ---- decompression ----------------------------------------------------- */

/*
 * A zstd frame may declare a window of up to 2^31 bytes, which the
 * decoder would allocate: one cluster of output never needs more than
 * 2 MiB, so larger windows are refused (4 MiB leaves slack for encoders
 * that round up).
 */
#define QCOW2_ZSTD_WINDOW_LOG_MAX   22

struct Qcow2Decompressor {
    uint8_t type;
    z_stream zs;
    ZSTD_DCtx *zd;
};

Qcow2Decompressor *qcow2_decompressor_new(uint8_t compression_type,
                                          GError **errp)
{
    Qcow2Decompressor *d = g_new0(Qcow2Decompressor, 1);

    d->type = compression_type;
    switch (compression_type) {
    case QCOW2_COMPRESSION_DEFLATE:
        /* negative window bits: raw deflate, no zlib header; 15 accepts
         * every window size an encoder may have used */
        if (inflateInit2(&d->zs, -15) != Z_OK) {
            set_err(errp, "qcow2: cannot set up deflate decompression");
            g_free(d);
            return NULL;
        }
        break;
    case QCOW2_COMPRESSION_ZSTD:
        d->zd = ZSTD_createDCtx();
        if (!d->zd ||
            ZSTD_isError(ZSTD_DCtx_setParameter(d->zd, ZSTD_d_windowLogMax,
                                                QCOW2_ZSTD_WINDOW_LOG_MAX))) {
            set_err(errp, "qcow2: cannot set up zstd decompression");
            ZSTD_freeDCtx(d->zd);
            g_free(d);
            return NULL;
        }
        break;
    default:
        set_err(errp, "qcow2 compression_type %u is unknown",
                compression_type);
        g_free(d);
        return NULL;
    }
    return d;
}

void qcow2_decompressor_free(Qcow2Decompressor *d)
{
    if (!d) {
        return;
    }
    if (d->type == QCOW2_COMPRESSION_DEFLATE) {
        inflateEnd(&d->zs);
    } else {
        ZSTD_freeDCtx(d->zd);
    }
    g_free(d);
}

static int inflate_cluster(Qcow2Decompressor *d, const uint8_t *in,
                           size_t in_len, uint8_t *out, size_t out_len,
                           const char **why)
{
    int ret;

    if (inflateReset(&d->zs) != Z_OK) {
        *why = "deflate: cannot reset the decompressor";
        return -EIO;
    }
    d->zs.next_in = (Bytef *)in;
    d->zs.avail_in = in_len;
    d->zs.next_out = out;
    d->zs.avail_out = out_len;
    ret = inflate(&d->zs, Z_FINISH);
    /*
     * A full cluster is success even if the stream goes on (Z_BUF_ERROR,
     * Z_OK): the descriptor gives the data's size only to the sector, and
     * decompression stops at one cluster of output.
     */
    if (d->zs.avail_out == 0 &&
        (ret == Z_STREAM_END || ret == Z_BUF_ERROR || ret == Z_OK)) {
        return 0;
    }
    if (ret == Z_STREAM_END || ret == Z_BUF_ERROR || ret == Z_OK) {
        *why = "deflate: compressed data ends before a full cluster";
    } else {
        *why = "deflate: compressed data is corrupt";
    }
    return -EIO;
}

static int unzstd_cluster(Qcow2Decompressor *d, const uint8_t *in,
                          size_t in_len, uint8_t *out, size_t out_len,
                          const char **why)
{
    ZSTD_inBuffer ib = { .src = in, .size = in_len, .pos = 0 };
    ZSTD_outBuffer ob = { .dst = out, .size = out_len, .pos = 0 };
    size_t ret = 0;

    ZSTD_DCtx_reset(d->zd, ZSTD_reset_session_only);
    while (ob.pos < ob.size) {
        size_t in_pos = ib.pos, out_pos = ob.pos;

        ret = ZSTD_decompressStream(d->zd, &ob, &ib);
        if (ZSTD_isError(ret)) {
            *why = "zstd: compressed data is corrupt";
            return -EIO;
        }
        /* no progress: the input ran out before the cluster was full */
        if (ib.pos == in_pos && ob.pos == out_pos) {
            *why = "zstd: compressed data ends before a full cluster";
            return -EIO;
        }
    }
    /*
     * The output is full.  The frame must end here: zstd may still have
     * its epilogue (block end, checksum) to consume, which one more call
     * does without output; anything left then is more than one cluster.
     */
    if (ret != 0) {
        ret = ZSTD_decompressStream(d->zd, &ob, &ib);
        if (ZSTD_isError(ret) || ret != 0) {
            *why = "zstd: compressed data holds more than one cluster";
            return -EIO;
        }
    }
    return 0;
}

int qcow2_decompress(Qcow2Decompressor *d, const uint8_t *in, size_t in_len,
                     uint8_t *out, size_t out_len, const char **why)
{
    if (d->type == QCOW2_COMPRESSION_DEFLATE) {
        return inflate_cluster(d, in, in_len, out, out_len, why);
    }
    return unzstd_cluster(d, in, in_len, out, out_len, why);
}
