/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The qcow2 image format, as pure code over buffers (block/qcow2-format.c)
 * and a synchronous reference reader on top of it (block/qcow2-ref.c).
 *
 * Written from the format's specification (QEMU's docs/interop/qcow2.txt).
 * Everything an image file says is untrusted: the parsers check every
 * field, offset and size (alignment, overflow, against the file size) and
 * return an error that names the field, never crash.
 *
 * Two kinds of error reporting:
 *  - open-time parsing (header, extensions, snapshot table) sets a GError
 *    (domain VB_ERROR) whose message names the field and says what to do;
 *  - per-request helpers (table entries, refcounts, mapping,
 *    decompression) allocate nothing: they return a negative errno and,
 *    where it helps, point @why at a static string.
 *
 * Nothing here does I/O or keeps global state; every function may run in
 * any thread on objects it is given.
 */
#ifndef BLOCK_QCOW2_H
#define BLOCK_QCOW2_H

#include "qemu/osdep.h"

#define QCOW2_MAGIC                 0x514649fbu    /* "QFI\xfb" */
#define QCOW2_V2_HEADER_LENGTH      72u
#define QCOW2_V3_HEADER_LENGTH      104u
#define QCOW2_MIN_CLUSTER_BITS      9
#define QCOW2_MAX_CLUSTER_BITS      21
#define QCOW2_MAX_CLUSTER_SIZE      (1u << QCOW2_MAX_CLUSTER_BITS)
/* Extended L2 entries need 32 subclusters of at least 512 bytes. */
#define QCOW2_MIN_EXTL2_CLUSTER_BITS 14
#define QCOW2_MAX_REFCOUNT_ORDER    6
#define QCOW2_MAX_BACKING_NAME      1023u
/* Implementation limits, the same as QEMU's so that what it makes opens. */
#define QCOW2_MAX_L1_BYTES          (32u * 1024 * 1024)
#define QCOW2_MAX_L1_ENTRIES        (QCOW2_MAX_L1_BYTES / 8)
#define QCOW2_MAX_REFTABLE_BYTES    (8u * 1024 * 1024)
#define QCOW2_MAX_SNAPSHOTS         65536u
#define QCOW2_MAX_SNAPSHOT_TABLE    (64u * 1024 * 1024)
#define QCOW2_MAX_SNAPSHOT_EXTRA    1024u
#define QCOW2_MAX_BITMAPS           65535u
#define QCOW2_MAX_BITMAP_DIRECTORY  (64u * 1024 * 1024)
/*
 * A virtual disk larger than this is refused: offsets stay well inside
 * int64_t (pread's off_t) and every "offset + length" in the mapping math
 * has room (QEMU has the same limit).
 */
#define QCOW2_MAX_VIRTUAL_SIZE      ((uint64_t)INT64_MAX / 512 * 512)
/* Host offsets in L1/L2/refcount entries: bits 9..55. */
#define QCOW2_OFFSET_MASK           0x00fffffffffffe00ull
#define QCOW2_MAX_HOST_OFFSET       (1ull << 56)

/* Incompatible feature bits. */
#define QCOW2_INCOMPAT_DIRTY        (1ull << 0)
#define QCOW2_INCOMPAT_CORRUPT      (1ull << 1)
#define QCOW2_INCOMPAT_DATA_FILE    (1ull << 2)
#define QCOW2_INCOMPAT_COMPRESSION  (1ull << 3)
#define QCOW2_INCOMPAT_EXTL2        (1ull << 4)
#define QCOW2_INCOMPAT_KNOWN        0x1full
/* Compatible feature bits. */
#define QCOW2_COMPAT_LAZY_REFCOUNTS (1ull << 0)
/* Autoclear feature bits. */
#define QCOW2_AUTOCLEAR_BITMAPS     (1ull << 0)
#define QCOW2_AUTOCLEAR_DATA_RAW    (1ull << 1)

/* Header extension types. */
#define QCOW2_EXT_END               0x00000000u
#define QCOW2_EXT_BACKING_FORMAT    0xe2792acau
#define QCOW2_EXT_FEATURE_TABLE     0x6803f857u
#define QCOW2_EXT_BITMAPS           0x23852875u
#define QCOW2_EXT_CRYPTO_HEADER     0x0537be77u
#define QCOW2_EXT_DATA_FILE         0x44415441u

#define QCOW2_CRYPT_NONE            0
#define QCOW2_CRYPT_AES             1
#define QCOW2_CRYPT_LUKS            2

#define QCOW2_COMPRESSION_DEFLATE   0
#define QCOW2_COMPRESSION_ZSTD      1

/* The fields of the header, host byte order, as stored. */
typedef struct Qcow2Header {
    uint32_t magic;
    uint32_t version;
    uint64_t backing_file_offset;
    uint32_t backing_file_size;
    uint32_t cluster_bits;
    uint64_t size;
    uint32_t crypt_method;
    uint32_t l1_size;
    uint64_t l1_table_offset;
    uint64_t refcount_table_offset;
    uint32_t refcount_table_clusters;
    uint32_t nb_snapshots;
    uint64_t snapshots_offset;
    /* version 3 (version 2: zero, refcount_order 4, header_length 72) */
    uint64_t incompatible_features;
    uint64_t compatible_features;
    uint64_t autoclear_features;
    uint32_t refcount_order;
    uint32_t header_length;
    uint8_t compression_type;           /* 0 when the field is absent */
} Qcow2Header;

/* One entry of the feature name table extension. */
typedef struct Qcow2FeatureName {
    uint8_t type;               /* 0 incompatible, 1 compatible, 2 autoclear */
    uint8_t bit;
    char name[47];                      /* NUL-terminated copy */
} Qcow2FeatureName;

/* One internal snapshot, from the snapshot table. */
typedef struct Qcow2Snapshot {
    uint64_t l1_table_offset;
    uint32_t l1_size;
    char *id;                           /* NUL-terminated copies */
    char *name;
    uint32_t date_sec;
    uint32_t date_nsec;
    uint64_t vm_clock_nsec;
    uint64_t vm_state_size;             /* the 64-bit field when present */
    uint32_t extra_data_size;
    bool has_disk_size;
    uint64_t disk_size;                 /* only if has_disk_size */
} Qcow2Snapshot;

/*
 * Everything qcow2_parse_header() learnt from the first cluster: the
 * header, derived geometry, the extensions and the backing file name.
 * Release with qcow2_info_free().
 */
typedef struct Qcow2Info {
    Qcow2Header h;
    uint64_t file_size;

    /* geometry */
    uint32_t cluster_size;
    uint32_t l2_bits;                   /* log2 of L2 entries per table */
    uint32_t l2_entries;
    uint32_t l2_entry_size;             /* 8, or 16 with extended L2 */
    uint32_t l1_needed;                 /* L1 entries the virtual size needs */
    uint32_t refcount_bits;
    uint64_t refcount_max;              /* largest refcount an entry holds */
    uint32_t refblock_entries;          /* refcount entries per block */
    uint32_t csize_shift;               /* compressed descriptor split */
    uint64_t coffset_mask;
    uint64_t csize_mask;

    /* features the driver will refuse: reported, not refused, here */
    bool extended_l2;
    bool has_data_file;
    bool data_file_raw;
    bool encrypted;
    bool dirty;
    bool corrupt;
    bool lazy_refcounts;

    /* header extensions */
    char *backing_file;                 /* NULL if none */
    char *backing_format;               /* NULL if no extension */
    char *data_file;                    /* external data file name or NULL */
    bool has_crypto_header;
    uint64_t crypto_header_offset;
    uint64_t crypto_header_length;
    bool has_bitmaps_ext;
    bool bitmaps_consistent;            /* extension and autoclear bit */
    uint32_t nb_bitmaps;
    uint64_t bitmap_directory_size;
    uint64_t bitmap_directory_offset;
    Qcow2FeatureName *feature_names;
    uint32_t nb_feature_names;
    uint32_t nb_unknown_extensions;
    uint64_t extensions_end;            /* first byte after the end marker */

    /* filled by qcow2_parse_snapshots() */
    Qcow2Snapshot *snapshots;
    uint32_t nb_snapshots;
} Qcow2Info;

/*
 * Set @errp (VB_ERROR) to a message made valid UTF-8 with control
 * characters replaced: the messages here quote names from the image.
 */
void qcow2_set_error(GError **errp, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* What the caller will do with the image. */
#define QCOW2_OPEN_WRITE            (1u << 0)

/*
 * Bytes of the file's start that qcow2_parse_header() needs: the first
 * cluster, or the whole file when it is shorter.  Reading this much
 * (at most QCOW2_MAX_CLUSTER_SIZE) before the cluster size is known is
 * simplest: qcow2_header_bytes(file_size).
 */
static inline size_t qcow2_header_bytes(uint64_t file_size)
{
    return file_size < QCOW2_MAX_CLUSTER_SIZE ? (size_t)file_size
                                              : QCOW2_MAX_CLUSTER_SIZE;
}

/*
 * Parse and validate the header, its extensions and the backing file name
 * from @buf (the first @len bytes of a file of @file_size bytes; @len
 * must cover the first cluster or the whole file).  @flags:
 * QCOW2_OPEN_WRITE refuses images marked corrupt.  Unknown incompatible
 * features are refused (naming the bit, and the feature's name when the
 * image's feature table has one).  On success fills @info (free it with
 * qcow2_info_free()) and returns true; nb_snapshots and the table still
 * need qcow2_parse_snapshots().  On failure @info holds nothing to free.
 */
bool qcow2_parse_header(const uint8_t *buf, size_t len, uint64_t file_size,
                        unsigned int flags, Qcow2Info *info, GError **errp);

/*
 * Bytes of the file at info->h.snapshots_offset that hold the snapshot
 * table at most (its entries are variable-length): what the caller reads
 * for qcow2_parse_snapshots().  0 when there are no snapshots.
 */
uint64_t qcow2_snapshot_table_max_bytes(const Qcow2Info *info);

/*
 * Parse the snapshot table from @buf (@len bytes read at
 * info->h.snapshots_offset, at most qcow2_snapshot_table_max_bytes()):
 * fills info->snapshots / info->nb_snapshots and returns 0.  -EAGAIN
 * (@errp untouched) if the table runs past @len while @len is below the
 * maximum: read more (say, twice as much) and call again.  -EINVAL with
 * @errp set if the table is invalid.
 */
int qcow2_parse_snapshots(Qcow2Info *info, const uint8_t *buf, size_t len,
                          GError **errp);

void qcow2_info_free(Qcow2Info *info);

/*
 * Features this build's readers do not implement (extended L2, external
 * data file, encryption): NULL if none, else a message naming the first
 * one for the caller to refuse the image with.
 */
const char *qcow2_unsupported_feature(const Qcow2Info *info);

/*
 * Check the active (or a snapshot's) L1 table's place in the file:
 * @offset cluster-aligned, past the header, @entries * 8 bytes inside the
 * file, at most QCOW2_MAX_L1_ENTRIES.  @what names the table in the error.
 */
bool qcow2_check_l1_table(const Qcow2Info *info, uint64_t offset,
                          uint64_t entries, const char *what, GError **errp);

/* ---- table entries ---------------------------------------------------- */

typedef struct Qcow2L1Entry {
    uint64_t l2_offset;                 /* 0: no L2 table */
    bool copied;                        /* refcount exactly one */
} Qcow2L1Entry;

/*
 * Table entries are passed and returned in host byte order: load them
 * from a table buffer with qcow2_ld_be64() and store them back with
 * qcow2_st_be64().
 */
static inline uint64_t qcow2_ld_be64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return GUINT64_FROM_BE(v);
}

static inline void qcow2_st_be64(uint8_t *p, uint64_t v)
{
    v = GUINT64_TO_BE(v);
    memcpy(p, &v, sizeof(v));
}

/*
 * Decode an L1 entry.  -EUCLEAN with @why set if reserved bits are set,
 * the offset is not cluster-aligned or the L2 table would lie beyond the
 * end of the file.
 */
int qcow2_l1_decode(const Qcow2Info *info, uint64_t entry,
                    Qcow2L1Entry *out, const char **why);
uint64_t qcow2_l1_encode(uint64_t l2_offset, bool copied);

typedef enum Qcow2ClusterType {
    QCOW2_CLUSTER_UNALLOCATED,          /* read from backing or zeroes */
    QCOW2_CLUSTER_ZERO_PLAIN,           /* reads as zeroes, no host cluster */
    QCOW2_CLUSTER_ZERO_ALLOC,           /* reads as zeroes, host preallocated */
    QCOW2_CLUSTER_NORMAL,               /* data at host_offset */
    QCOW2_CLUSTER_COMPRESSED,           /* compressed data at host_offset */
} Qcow2ClusterType;

typedef struct Qcow2L2Entry {
    Qcow2ClusterType type;
    bool copied;
    uint64_t host_offset;               /* cluster (or compressed data) start */
    /*
     * Compressed: bytes from host_offset that may hold the data (up to the
     * end of the last 512-byte sector the descriptor names); the
     * data itself may end earlier.
     */
    uint32_t compressed_size;
} Qcow2L2Entry;

/*
 * Decode a standard L2 entry (the first 64 bits of an extended one: the
 * subcluster bitmap is not interpreted here; the readers refuse extended
 * L2 images).  -EUCLEAN with @why set on reserved bits, a zero flag in a
 * version 2 image, a misaligned offset, offset 0 with the copied flag
 * (only legal with an external data file), a compressed cluster with the
 * copied flag or an offset beyond the format's limits.  The file size is
 * not checked here: the host access is (qcow2_check_host_range()).
 */
int qcow2_l2_decode(const Qcow2Info *info, uint64_t entry,
                    Qcow2L2Entry *out, const char **why);
/* Entries for a write; the offset must be cluster-aligned. */
uint64_t qcow2_l2_encode_standard(uint64_t host_offset, bool copied,
                                  bool zero);
/*
 * A compressed cluster descriptor for @len bytes of compressed data at
 * @host_offset: -ERANGE if either does not fit the descriptor's fields.
 */
int qcow2_l2_encode_compressed(const Qcow2Info *info, uint64_t host_offset,
                               uint32_t len, uint64_t *entry);

/*
 * [@offset, @offset + @len) inside the file?  -EUCLEAN with @why
 * otherwise (also on overflow).
 */
int qcow2_check_host_range(const Qcow2Info *info, uint64_t offset,
                           uint64_t len, const char **why);

/* ---- refcounts -------------------------------------------------------- */

/*
 * Refcount table entry: the refcount block's offset, 0 if unallocated.
 * -EUCLEAN on reserved bits, misalignment or a block beyond the end of
 * the file.
 */
int qcow2_reftable_decode(const Qcow2Info *info, uint64_t entry,
                          uint64_t *block_offset, const char **why);
uint64_t qcow2_reftable_encode(uint64_t block_offset);

/*
 * Entry @index of a refcount block (one cluster at @block), for the
 * image's refcount_order.  @index must be < info->refblock_entries (the
 * functions return -ERANGE otherwise); set returns -ERANGE for a value
 * above info->refcount_max.
 */
int qcow2_refcount_get(const Qcow2Info *info, const uint8_t *block,
                       uint32_t index, uint64_t *value);
int qcow2_refcount_set(const Qcow2Info *info, uint8_t *block,
                       uint32_t index, uint64_t value);

/* Where a host cluster's refcount lives. */
typedef struct Qcow2RefcountPos {
    uint64_t table_index;
    uint32_t block_index;
} Qcow2RefcountPos;

/* -ERANGE if the cluster is beyond what the refcount table covers. */
int qcow2_refcount_pos(const Qcow2Info *info, uint64_t host_offset,
                       Qcow2RefcountPos *pos);

/* ---- mapping ---------------------------------------------------------- */

typedef struct Qcow2Map {
    uint64_t l1_index;
    uint32_t l2_index;
    uint32_t in_cluster;                /* offset inside the cluster */
    uint64_t cluster_bytes_left;        /* from in_cluster to cluster end */
} Qcow2Map;

/*
 * Virtual @offset -> L1 index, L2 index, offset in cluster.  -ERANGE if
 * @offset is at or beyond @disk_size or its L1 index is at or beyond
 * @l1_size (the table the lookup will use).
 */
int qcow2_map(const Qcow2Info *info, uint64_t disk_size, uint64_t l1_size,
              uint64_t offset, Qcow2Map *map);

/* ---- decompression ---------------------------------------------------- */

typedef struct Qcow2Decompressor Qcow2Decompressor;

/*
 * A reusable decompression context for @compression_type (its state is
 * reset per cluster: no allocation per call).  NULL with @errp set for an
 * unknown type or out of memory.
 */
Qcow2Decompressor *qcow2_decompressor_new(uint8_t compression_type,
                                          GError **errp);
void qcow2_decompressor_free(Qcow2Decompressor *d);

/*
 * Decompress one cluster: exactly @out_len bytes from at most @in_len
 * bytes of input (the descriptor's sectors, which may hold more than the
 * data).  deflate: raw deflate, stopping once @out_len bytes are out (the
 * specification's rule); zstd: one or more frames, the last ending with
 * the cluster (QEMU writes one frame per cluster and checks the same).
 * -EIO with @why set if the data is corrupt or too short to fill
 * @out_len, or a zstd frame goes on past it.
 */
int qcow2_decompress(Qcow2Decompressor *d, const uint8_t *in, size_t in_len,
                     uint8_t *out, size_t out_len, const char **why);

/* ---- reference reader (block/qcow2-ref.c) ----------------------------- */

typedef struct Qcow2Ref Qcow2Ref;

typedef struct Qcow2RefOptions {
    /*
     * Format of the top image's backing file when its header has no
     * backing format extension ("raw" or "qcow2"); NULL refuses such an
     * image.
     */
    const char *backing_format;
    unsigned int max_depth;             /* backing chain; 0: default (16) */
    bool no_backing;                    /* do not open backing files: read
                                           their part as zeroes (fuzzing) */
    /*
     * Read this internal snapshot (ID, else name) of the top image, at the
     * snapshot's own disk size (qemu-img convert -l reads it at the
     * image's current size, zeroes past the snapshot's).
     */
    const char *snapshot;
} Qcow2RefOptions;

#define QCOW2_REF_DEFAULT_DEPTH     16

/*
 * Open the qcow2 image at @path (read-only) and its backing chain.
 * Backing file names are resolved relative to the directory of the image
 * that names them.
 */
Qcow2Ref *qcow2_ref_open(const char *path, const Qcow2RefOptions *opts,
                         GError **errp);
/*
 * The same from an open file descriptor (dup()ed: the caller keeps @fd);
 * @dir resolves relative backing file names (NULL: the current
 * directory).
 */
Qcow2Ref *qcow2_ref_open_fd(int fd, const char *dir,
                            const Qcow2RefOptions *opts, GError **errp);
void qcow2_ref_close(Qcow2Ref *r);

/* Virtual size (of the snapshot, when one was chosen). */
uint64_t qcow2_ref_size(const Qcow2Ref *r);
const Qcow2Info *qcow2_ref_info(const Qcow2Ref *r);
/* The backing image, or NULL (none, or raw). */
const Qcow2Ref *qcow2_ref_backing(const Qcow2Ref *r);

/*
 * Read [@offset, @offset + @len) of the virtual disk into @buf: false
 * with @errp set on a range beyond the virtual size, an I/O error or
 * corrupt metadata or data (naming what and where).
 */
bool qcow2_ref_read(Qcow2Ref *r, uint64_t offset, void *buf, size_t len,
                    GError **errp);

/* What qcow2_ref_block_status() found at an offset. */
typedef struct Qcow2RefStatus {
    /*
     * In the image at @depth (0: the top one): NORMAL (a raw backing file
     * is all NORMAL), COMPRESSED, ZERO_PLAIN or ZERO_ALLOC; UNALLOCATED
     * if no image of the chain has the offset, @depth then being the
     * deepest image whose virtual size covers it (it reads as zeroes).
     */
    Qcow2ClusterType type;
    unsigned int depth;
    /* NORMAL: where the byte at the offset is in that image's file */
    uint64_t host_offset;
} Qcow2RefStatus;

/*
 * The allocation status at @offset (below the virtual size), as qemu-img
 * map reports it: fills @st and sets *@pnum to how many bytes from
 * @offset (1..@max_bytes, at most to the end of the top image's cluster)
 * share it.  False with @errp set on corrupt metadata.
 */
bool qcow2_ref_block_status(Qcow2Ref *r, uint64_t offset, uint64_t max_bytes,
                            uint64_t *pnum, Qcow2RefStatus *st,
                            GError **errp);

#endif
