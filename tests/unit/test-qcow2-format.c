/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for the qcow2 format layer and the reference reader
 * (block/qcow2-format.c, block/qcow2-ref.c), against images made at test
 * time by an implementation we did not write: Debian's qemu-img and
 * qemu-io (qemu-utils, installed by scripts/install-deps.sh).
 *
 * Every image is read back through the reference reader and compared
 * with what 'qemu-img convert -O raw' makes of it, whole and in ranges
 * that straddle clusters; its refcounts are checked against its L1/L2
 * tables.  Header refusals patch a valid image's bytes and check the
 * message names the field.
 */
#include "qemu/osdep.h"
#include "block/qcow2.h"

#include <sys/stat.h>
#include <json-glib/json-glib.h>
#include <zlib.h>
#include <zstd.h>

static char *tmpdir;

/* ---- helpers ----------------------------------------------------------- */

/* Run a shell command in tmpdir; it must succeed. */
static void sh(const char *fmt, ...) G_GNUC_PRINTF(1, 2);

static void sh(const char *fmt, ...)
{
    g_autofree char *cmd = NULL;
    g_autofree char *out = NULL;
    g_autofree char *err = NULL;
    g_autoptr(GError) gerr = NULL;
    const char *argv[] = { "/bin/sh", "-c", NULL, NULL };
    va_list ap;
    int status;

    va_start(ap, fmt);
    cmd = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    argv[2] = cmd;
    if (!g_spawn_sync(tmpdir, (char **)argv, NULL, 0, NULL, NULL, &out, &err,
                      &status, &gerr)) {
        g_error("cannot run '%s': %s", cmd, gerr->message);
    }
    if (!g_spawn_check_wait_status(status, NULL)) {
        g_error("'%s' failed:\n%s%s", cmd, out, err);
    }
}

static char *tpath(const char *name)
{
    return g_build_filename(tmpdir, name, NULL);
}

static uint8_t *load(const char *name, gsize *len)
{
    g_autofree char *p = tpath(name);
    g_autoptr(GError) err = NULL;
    char *data;

    if (!g_file_get_contents(p, &data, len, &err)) {
        g_error("%s", err->message);
    }
    return (uint8_t *)data;
}

static void store(const char *name, const uint8_t *data, gsize len)
{
    g_autofree char *p = tpath(name);
    g_autoptr(GError) err = NULL;

    if (!g_file_set_contents(p, (const char *)data, len, &err)) {
        g_error("%s", err->message);
    }
}

static void st_be32(uint8_t *p, uint32_t v)
{
    v = GUINT32_TO_BE(v);
    memcpy(p, &v, 4);
}

static uint32_t ld_be32(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, 4);
    return GUINT32_FROM_BE(v);
}

/*
 * Every referenced host cluster (the header, the L1 table, L2 tables,
 * data, compressed data, the refcount table and its blocks) has a
 * refcount of at least one; without snapshots or compression, exactly
 * one, and the copied flags agree.  Reads tables with pread through the
 * format layer's decoders.
 */
static unsigned int check_refcounts(const char *name, bool exact)
{
    unsigned int compressed = 0;
    gsize flen;
    g_autofree uint8_t *f = load(name, &flen);
    Qcow2Info info;
    g_autoptr(GError) err = NULL;
    const char *why;
    uint64_t i, j, rt_entries;
    unsigned int checked = 0;

    g_assert_true(qcow2_parse_header(f, qcow2_header_bytes(flen), flen, 0,
                                     &info, &err));
    rt_entries = ((uint64_t)info.h.refcount_table_clusters <<
                  info.h.cluster_bits) / 8;

    /* the refcount of the cluster holding host offset @off */
#define REFCOUNT(off, out) do {                                             \
        Qcow2RefcountPos pos_;                                              \
        uint64_t blk_;                                                      \
        g_assert_cmpint(qcow2_refcount_pos(&info, (off), &pos_), ==, 0);    \
        g_assert_cmpuint(pos_.table_index, <, rt_entries);                  \
        g_assert_cmpint(qcow2_reftable_decode(&info,                        \
            qcow2_ld_be64(f + info.h.refcount_table_offset +                \
                          pos_.table_index * 8), &blk_, &why), ==, 0);      \
        g_assert_cmpuint(blk_, !=, 0);                                      \
        g_assert_cmpint(qcow2_refcount_get(&info, f + blk_,                 \
                                           pos_.block_index, &(out)), ==, 0); \
        checked++;                                                          \
    } while (0)
#define EXPECT(off) do {                                                    \
        uint64_t rc_;                                                       \
        REFCOUNT(off, rc_);                                                 \
        if (exact) {                                                        \
            g_assert_cmpuint(rc_, ==, 1);                                   \
        } else {                                                            \
            g_assert_cmpuint(rc_, >=, 1);                                   \
        }                                                                   \
    } while (0)

    EXPECT(0);
    for (i = 0; i < info.h.l1_size * 8; i += info.cluster_size) {
        EXPECT(info.h.l1_table_offset + i);
    }
    for (i = 0; i < info.h.refcount_table_clusters; i++) {
        EXPECT(info.h.refcount_table_offset + (i << info.h.cluster_bits));
    }
    for (i = 0; i < rt_entries; i++) {
        uint64_t blk;

        g_assert_cmpint(qcow2_reftable_decode(&info,
            qcow2_ld_be64(f + info.h.refcount_table_offset + i * 8), &blk,
            &why), ==, 0);
        if (blk) {
            EXPECT(blk);
        }
    }
    for (i = 0; i < info.h.l1_size; i++) {
        Qcow2L1Entry l1e;

        g_assert_cmpint(qcow2_l1_decode(&info,
            qcow2_ld_be64(f + info.h.l1_table_offset + i * 8), &l1e, &why),
            ==, 0);
        if (!l1e.l2_offset) {
            continue;
        }
        EXPECT(l1e.l2_offset);
        if (exact) {
            g_assert_true(l1e.copied);
        }
        for (j = 0; j < info.l2_entries; j++) {
            Qcow2L2Entry e;
            uint64_t last;

            g_assert_cmpint(qcow2_l2_decode(&info,
                qcow2_ld_be64(f + l1e.l2_offset + j * 8), &e, &why), ==, 0);
            switch (e.type) {
            case QCOW2_CLUSTER_NORMAL:
            case QCOW2_CLUSTER_ZERO_ALLOC:
                EXPECT(e.host_offset);
                if (exact) {
                    g_assert_true(e.copied);
                }
                break;
            case QCOW2_CLUSTER_COMPRESSED:
                /* every host cluster the data touches */
                last = MIN(e.host_offset + e.compressed_size, flen) - 1;
                EXPECT(e.host_offset);
                if ((last >> info.h.cluster_bits) !=
                    (e.host_offset >> info.h.cluster_bits)) {
                    EXPECT(last);
                }
                g_assert_false(e.copied);
                compressed++;
                break;
            default:
                break;
            }
        }
    }
#undef EXPECT
#undef REFCOUNT
    g_assert_cmpuint(checked, >, 3);
    qcow2_info_free(&info);
    return compressed;
}

/*
 * The reference reader's view of @name (through @snapshot if non-NULL)
 * equals qemu-img's, whole and in ranges that cross cluster boundaries.
 */
static void compare_with_qemu(const char *name, const char *snapshot,
                              const char *backing_format)
{
    Qcow2RefOptions opts = {
        .backing_format = backing_format,
        .snapshot = snapshot,
    };
    g_autofree char *p = tpath(name);
    g_autofree char *raw_name = g_strdup_printf("%s.raw", name);
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *want = NULL;
    g_autofree uint8_t *got = NULL;
    gsize len;
    Qcow2Ref *r;
    GRand *rand;
    gsize i;

    if (snapshot) {
        sh("qemu-img convert -l snapshot.name=%s -O raw %s %s", snapshot,
           name, raw_name);
    } else {
        sh("qemu-img convert -O raw %s %s", name, raw_name);
    }
    want = load(raw_name, &len);
    /* /tmp may be memory: keep only the images */
    {
        g_autofree char *raw_path = tpath(raw_name);

        unlink(raw_path);
    }
    r = qcow2_ref_open(p, &opts, &err);
    g_assert_no_error(err);
    if (snapshot && qcow2_ref_size(r) < len) {
        /*
         * qemu-img reads a snapshot at the image's current size, zeroes
         * past the snapshot's own (which is what we read)
         */
        for (i = qcow2_ref_size(r); i < len; i++) {
            g_assert_cmpint(want[i], ==, 0);
        }
        len = qcow2_ref_size(r);
    }
    g_assert_cmpuint(qcow2_ref_size(r), ==, len);
    got = g_malloc(len + 1);
    g_assert_true(qcow2_ref_read(r, 0, got, len, &err));
    g_assert_no_error(err);
    g_assert_true(memcmp(got, want, len) == 0);

    /* unaligned ranges; a fixed seed keeps the test deterministic */
    rand = g_rand_new_with_seed(len);
    for (i = 0; i < 32; i++) {
        uint64_t off = g_rand_int_range(rand, 0, len);
        uint64_t n = g_rand_int_range(rand, 1, 150000);

        n = MIN(n, len - off);

        memset(got, 0xa5, n);
        qcow2_ref_read(r, off, got, n, &err);
        g_assert_no_error(err);
        g_assert_true(memcmp(got, want + off, n) == 0);
    }
    g_rand_free(rand);

    /* the virtual size is a hard limit */
    g_assert_false(qcow2_ref_read(r, len, got, 1, &err));
    g_assert_nonnull(strstr(err->message, "beyond the virtual size"));
    g_clear_error(&err);
    g_assert_true(qcow2_ref_read(r, len, got, 0, &err));
    qcow2_ref_close(r);
}

/*
 * qcow2_ref_block_status() agrees with 'qemu-img map --output=json': every
 * piece it reports lies inside one of qemu-img's ranges, with the same
 * depth, data/zero/present flags and (for data) host offset.
 */
static void compare_map_with_qemu(const char *name)
{
    g_autofree char *p = tpath(name);
    g_autofree char *json_name = g_strdup_printf("%s.map", name);
    g_autofree char *text = NULL;
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GError) err = NULL;
    JsonArray *ranges;
    gsize len;
    guint i = 0, n;
    uint64_t off = 0, size;
    unsigned int pieces = 0;
    Qcow2Ref *r;

    sh("qemu-img map --output=json %s > %s", name, json_name);
    text = (char *)load(json_name, &len);
    g_assert_true(json_parser_load_from_data(parser, text, len, &err));
    ranges = json_node_get_array(json_parser_get_root(parser));
    n = json_array_get_length(ranges);

    r = qcow2_ref_open(p, NULL, &err);
    g_assert_no_error(err);
    size = qcow2_ref_size(r);
    while (off < size) {
        JsonObject *o;
        uint64_t start, end, pnum;
        Qcow2RefStatus st;
        bool data, zero;

        g_assert_true(qcow2_ref_block_status(r, off, size - off, &pnum, &st,
                                             &err));
        g_assert_cmpuint(pnum, >=, 1);
        /* the qemu-img range holding off */
        for (;;) {
            g_assert_cmpuint(i, <, n);
            o = json_array_get_object_element(ranges, i);
            start = json_object_get_int_member(o, "start");
            end = start + json_object_get_int_member(o, "length");
            if (off < end) {
                break;
            }
            i++;
        }
        g_assert_cmpuint(off, >=, start);
        g_assert_cmpuint(off + pnum, <=, end);
        data = st.type == QCOW2_CLUSTER_NORMAL ||
               st.type == QCOW2_CLUSTER_COMPRESSED;
        zero = !data;
        g_assert_cmpint(json_object_get_int_member(o, "depth"), ==,
                        st.depth);
        g_assert_cmpint(json_object_get_boolean_member(o, "data"), ==, data);
        g_assert_cmpint(json_object_get_boolean_member(o, "zero"), ==, zero);
        g_assert_cmpint(json_object_get_boolean_member(o, "present"), ==,
                        st.type != QCOW2_CLUSTER_UNALLOCATED);
        if (st.type == QCOW2_CLUSTER_NORMAL) {
            g_assert_cmpuint(json_object_get_int_member(o, "offset") +
                             (off - start), ==, st.host_offset);
        }
        off += pnum;
        pieces++;
    }
    g_assert_cmpuint(pieces, >=, n);
    {
        Qcow2RefStatus st;

        g_assert_false(qcow2_ref_block_status(r, size, 1, &off, &st, &err));
    }
    qcow2_ref_close(r);
}

/* Patterns at places that exercise several L2 tables and partial clusters. */
static void fill(const char *name, uint64_t size)
{
    sh("qemu-io -f qcow2 -c 'write -P 0x11 0 4k' -c 'write -P 0x22 %"
       PRIu64 " 70000' -c 'write -P 0x33 %" PRIu64 " 513' "
       "-c 'write -z %" PRIu64 " 8k' -c 'write -P 0x44 %" PRIu64 " 1' %s "
       ">/dev/null", size / 3 + 1000, size - 513, size / 2,
       size - 4096, name);
}

/* ---- images ------------------------------------------------------------ */

static uint32_t info_cluster_size(const char *name)
{
    gsize flen;
    g_autofree uint8_t *f = load(name, &flen);
    g_autoptr(GError) err = NULL;
    Qcow2Info info;
    uint32_t cs;

    g_assert_true(qcow2_parse_header(f, qcow2_header_bytes(flen), flen, 0,
                                     &info, &err));
    cs = info.cluster_size;
    qcow2_info_free(&info);
    return cs;
}

static void test_plain_images(void)
{
    static const struct {
        const char *opts;
        uint64_t size;
    } cases[] = {
        { "compat=0.10,cluster_size=512", (3 << 20) + 512 },
        { "compat=1.1,cluster_size=512,refcount_bits=1", 2 << 20 },
        { "compat=1.1,cluster_size=1024,refcount_bits=2", 2 << 20 },
        { "compat=1.1,cluster_size=2048,refcount_bits=4", 2 << 20 },
        { "compat=1.1,cluster_size=8192,refcount_bits=8", 4 << 20 },
        { "compat=1.1,cluster_size=16384,refcount_bits=32", 4 << 20 },
        { "compat=1.1,cluster_size=32768,refcount_bits=64", 4 << 20 },
        { "compat=1.1,cluster_size=2M", 5 << 20 },
        { "compat=1.1,lazy_refcounts=on", 8 << 20 },
    };
    size_t i;

    for (i = 0; i < ARRAY_SIZE(cases); i++) {
        g_autofree char *name = g_strdup_printf("plain%zu.qcow2", i);

        sh("qemu-img create -q -f qcow2 -o %s %s %" PRIu64, cases[i].opts,
           name, cases[i].size);
        fill(name, cases[i].size);
        compare_with_qemu(name, NULL, NULL);
        compare_map_with_qemu(name);
        check_refcounts(name, true);
    }
}

/* write -z: zero clusters with (ZERO_ALLOC) and without a host cluster */
static void test_zero_clusters(void)
{
    g_autofree char *p = tpath("zero.qcow2");
    gsize flen;
    g_autofree uint8_t *f = NULL;
    Qcow2Info info;
    g_autoptr(GError) err = NULL;
    Qcow2L1Entry l1e;
    Qcow2L2Entry e;
    const char *why;
    int counts[5] = { 0 };
    uint32_t j;

    sh("qemu-img create -q -f qcow2 -o cluster_size=4096 zero.qcow2 1M");
    sh("qemu-io -f qcow2 -c 'write -P 0x55 0 64k' -c 'write -z 0 8k' "
       "-c 'write -z -u 16k 8k' -c 'write -z 128k 12k' zero.qcow2 "
       ">/dev/null");
    compare_with_qemu("zero.qcow2", NULL, NULL);
    compare_map_with_qemu("zero.qcow2");

    f = load("zero.qcow2", &flen);
    g_assert_true(qcow2_parse_header(f, qcow2_header_bytes(flen), flen, 0,
                                     &info, &err));
    g_assert_cmpint(qcow2_l1_decode(&info,
                    qcow2_ld_be64(f + info.h.l1_table_offset), &l1e, &why),
                    ==, 0);
    for (j = 0; j < info.l2_entries; j++) {
        g_assert_cmpint(qcow2_l2_decode(&info,
                        qcow2_ld_be64(f + l1e.l2_offset + j * 8), &e, &why),
                        ==, 0);
        counts[e.type]++;
    }
    g_assert_cmpint(counts[QCOW2_CLUSTER_ZERO_ALLOC], ==, 2);
    g_assert_cmpint(counts[QCOW2_CLUSTER_ZERO_PLAIN], ==, 2 + 3);
    g_assert_cmpint(counts[QCOW2_CLUSTER_NORMAL], ==, 16 - 4);
    qcow2_info_free(&info);
}

static void test_compressed(void)
{
    static const struct {
        const char *opts;
        uint64_t size;
    } cases[] = {
        { "cluster_size=512", 256 << 10 },
        { "cluster_size=4096", 1 << 20 },
        { "cluster_size=65536", 2 << 20 },
        { "cluster_size=2M", 4 << 20 },
        { "cluster_size=512,compression_type=zstd", 256 << 10 },
        { "cluster_size=4096,compression_type=zstd", 1 << 20 },
        { "cluster_size=2M,compression_type=zstd", 4 << 20 },
        { "cluster_size=4096,compat=0.10", 1 << 20 },
    };
    size_t i;

    for (i = 0; i < ARRAY_SIZE(cases); i++) {
        g_autofree char *name = g_strdup_printf("comp%zu.qcow2", i);
        g_autofree char *src_name = g_strdup_printf("src%zu.raw", i);
        gsize flen, k;
        g_autofree uint8_t *f = NULL;
        g_autofree uint8_t *src = g_malloc0(cases[i].size);
        Qcow2Info info;
        g_autoptr(GError) err = NULL;

        /*
         * Compressible but not uniform: a counter, a pattern run and a
         * zero run (which convert leaves unallocated); an odd tail.
         */
        for (k = 0; k + 16 <= cases[i].size * 3 / 4; k += 16) {
            snprintf((char *)src + k, 17, "block %09u\n",
                     (unsigned int)(k / 16 % 1000000000));
        }
        memset(src + cases[i].size / 8, 0xcc, cases[i].size / 8);
        memset(src + cases[i].size / 2, 0, cases[i].size / 8);
        store(src_name, src, cases[i].size);
        sh("qemu-img convert -c -f raw -O qcow2 -o %s src%zu.raw %s && "
           "rm src%zu.raw", cases[i].opts, i, name, i);
        /* an uncompressed write over a compressed cluster, too */
        sh("qemu-io -f qcow2 -c 'write -P 0x77 1000 1000' %s >/dev/null",
           name);
        f = load(name, &flen);
        g_assert_true(qcow2_parse_header(f, qcow2_header_bytes(flen), flen,
                                         0, &info, &err));
        g_assert_cmpuint(info.h.compression_type, ==,
                         strstr(cases[i].opts, "zstd") ? 1 : 0);
        qcow2_info_free(&info);
        compare_with_qemu(name, NULL, NULL);
        compare_map_with_qemu(name);
        /* at least half the clusters are stored compressed */
        g_assert_cmpuint(check_refcounts(name, false), >=,
                         cases[i].size / info_cluster_size(name) / 2);
    }
}

static void test_snapshots(void)
{
    g_autofree char *p = tpath("snap.qcow2");
    g_autoptr(GError) err = NULL;
    Qcow2RefOptions opts = { .snapshot = "nope" };
    const Qcow2Info *info;
    Qcow2Ref *r;

    sh("qemu-img create -q -f qcow2 -o cluster_size=4096 snap.qcow2 2M");
    sh("qemu-io -f qcow2 -c 'write -P 0x01 0 100k' snap.qcow2 >/dev/null");
    sh("qemu-img snapshot -c first snap.qcow2");
    sh("qemu-io -f qcow2 -c 'write -P 0x02 50k 100k' snap.qcow2 >/dev/null");
    sh("qemu-img snapshot -c second-one snap.qcow2");
    sh("qemu-io -f qcow2 -c 'write -P 0x03 120k 100k' "
       "-c 'write -z 0 8k' snap.qcow2 >/dev/null");
    sh("qemu-img resize -q snap.qcow2 3M");

    compare_with_qemu("snap.qcow2", NULL, NULL);
    compare_with_qemu("snap.qcow2", "first", NULL);
    compare_with_qemu("snap.qcow2", "second-one", NULL);
    check_refcounts("snap.qcow2", false);

    r = qcow2_ref_open(p, NULL, &err);
    g_assert_no_error(err);
    info = qcow2_ref_info(r);
    g_assert_cmpuint(info->nb_snapshots, ==, 2);
    g_assert_cmpstr(info->snapshots[0].id, ==, "1");
    g_assert_cmpstr(info->snapshots[0].name, ==, "first");
    g_assert_cmpstr(info->snapshots[1].id, ==, "2");
    g_assert_cmpstr(info->snapshots[1].name, ==, "second-one");
    g_assert_true(info->snapshots[0].has_disk_size);
    g_assert_cmpuint(info->snapshots[0].disk_size, ==, 2 << 20);
    g_assert_cmpuint(info->snapshots[0].vm_state_size, ==, 0);
    g_assert_cmpuint(qcow2_ref_size(r), ==, 3 << 20);
    qcow2_ref_close(r);

    /* by ID as well as by name; an unknown one is refused */
    opts.snapshot = "1";
    r = qcow2_ref_open(p, &opts, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(qcow2_ref_size(r), ==, 2 << 20);
    qcow2_ref_close(r);
    opts.snapshot = "nope";
    g_assert_null(qcow2_ref_open(p, &opts, &err));
    g_assert_nonnull(strstr(err->message, "no snapshot with ID or name "
                            "'nope'"));
}

/* Persistent dirty bitmaps: the extension is parsed, the data unaffected */
static void test_bitmaps(void)
{
    gsize len;
    g_autofree uint8_t *f = NULL;
    g_autoptr(GError) err = NULL;
    Qcow2Info info;

    sh("qemu-img create -q -f qcow2 -o cluster_size=4096 bm.qcow2 1M && "
       "qemu-img bitmap --add bm.qcow2 b0 && "
       "qemu-img bitmap --add -g 65536 bm.qcow2 b1");
    sh("qemu-io -f qcow2 -c 'write -P 0x5b 4k 20k' bm.qcow2 >/dev/null");
    f = load("bm.qcow2", &len);
    g_assert_true(qcow2_parse_header(f, qcow2_header_bytes(len), len, 0,
                                     &info, &err));
    g_assert_true(info.has_bitmaps_ext);
    g_assert_true(info.bitmaps_consistent);
    g_assert_cmpuint(info.nb_bitmaps, ==, 2);
    g_assert_cmpuint(info.bitmap_directory_offset % 4096, ==, 0);
    g_assert_cmpuint(info.bitmap_directory_size, >=, 2 * 24);
    qcow2_info_free(&info);
    compare_with_qemu("bm.qcow2", NULL, NULL);
}

/* Three levels, three cluster sizes, sizes that differ; a raw base too. */
static void test_backing_chain(void)
{
    g_autofree char *p = tpath("top.qcow2");
    g_autoptr(GError) err = NULL;
    Qcow2RefOptions opts = { 0 };
    Qcow2Ref *r;

    sh("mkdir -p sub && qemu-img create -q -f qcow2 -o cluster_size=4096 "
       "sub/base.qcow2 1M");
    sh("qemu-io -f qcow2 -c 'write -P 0xb0 0 1M' -c 'write -z 64k 8k' "
       "sub/base.qcow2 >/dev/null");
    /* the backing name is relative to the overlay's directory */
    sh("qemu-img create -q -f qcow2 -o cluster_size=65536 -b base.qcow2 "
       "-F qcow2 sub/mid.qcow2 2M");
    sh("qemu-io -f qcow2 -c 'write -P 0xb1 100k 200k' "
       "-c 'write -P 0xb2 1500k 10k' sub/mid.qcow2 >/dev/null");
    sh("qemu-img create -q -f qcow2 -o cluster_size=512 -b sub/mid.qcow2 "
       "-F qcow2 top.qcow2 3M");
    sh("qemu-io -f qcow2 -c 'write -P 0xb3 150k 3000' "
       "-c 'write -z 500k 1k' -c 'write -P 0xb4 2900k 1000' top.qcow2 "
       ">/dev/null");
    compare_with_qemu("top.qcow2", NULL, NULL);
    compare_map_with_qemu("top.qcow2");

    r = qcow2_ref_open(p, NULL, &err);
    g_assert_no_error(err);
    g_assert_nonnull(qcow2_ref_backing(r));
    g_assert_nonnull(qcow2_ref_backing(qcow2_ref_backing(r)));
    g_assert_null(qcow2_ref_backing(qcow2_ref_backing(
                  qcow2_ref_backing(r))));
    qcow2_ref_close(r);

    /* a depth limit below the chain's depth refuses it */
    opts.max_depth = 2;
    g_assert_null(qcow2_ref_open(p, &opts, &err));
    g_assert_nonnull(strstr(err->message, "deeper than 2"));
    g_clear_error(&err);

    /* a raw base, shorter than its overlay */
    sh("qemu-img create -q -f raw base.raw 700k && qemu-io -f raw "
       "-c 'write -P 0xa0 0 700k' base.raw >/dev/null");
    sh("qemu-img create -q -f qcow2 -o cluster_size=4096 -b base.raw -F raw "
       "over-raw.qcow2 1M");
    sh("qemu-io -f qcow2 -c 'write -P 0xa1 600k 8k' over-raw.qcow2 "
       ">/dev/null");
    compare_with_qemu("over-raw.qcow2", NULL, NULL);
    compare_map_with_qemu("over-raw.qcow2");

    /* backing files that name each other hit the depth limit */
    sh("qemu-img create -q -f qcow2 -b loopb.qcow2 -F qcow2 -u loopa.qcow2 "
       "1M && qemu-img create -q -f qcow2 -b loopa.qcow2 -F qcow2 -u "
       "loopb.qcow2 1M");
    g_free(p);
    p = tpath("loopa.qcow2");
    g_assert_null(qcow2_ref_open(p, NULL, &err));
    g_assert_nonnull(strstr(err->message, "deeper than 16"));
}

/* No backing format in the image: refused unless the caller names it. */
static void test_backing_without_format(void)
{
    g_autofree char *p = tpath("nofmt.qcow2");
    g_autoptr(GError) err = NULL;
    Qcow2RefOptions opts = { .backing_format = "qcow2" };
    gsize len, i;
    g_autofree uint8_t *f = NULL;
    Qcow2Ref *r;
    bool found = false;

    sh("qemu-img create -q -f qcow2 -o cluster_size=4096 nfbase.qcow2 1M");
    sh("qemu-io -f qcow2 -c 'write -P 0x61 0 300k' nfbase.qcow2 >/dev/null");
    sh("qemu-img create -q -f qcow2 -b nfbase.qcow2 -F qcow2 nofmt.qcow2 1M");
    sh("qemu-io -f qcow2 -c 'write -P 0x62 200k 8k' nofmt.qcow2 >/dev/null");
    sh("qemu-img convert -O raw nofmt.qcow2 nofmt.want");

    /* turn the backing format extension into an unknown (skipped) one */
    f = load("nofmt.qcow2", &len);
    for (i = 104; i + 8 <= 4096; i += 8) {
        if (ld_be32(f + i) == QCOW2_EXT_BACKING_FORMAT) {
            st_be32(f + i, 0x12345678);
            found = true;
            break;
        }
    }
    g_assert_true(found);
    store("nofmt.qcow2", f, len);

    g_assert_null(qcow2_ref_open(p, NULL, &err));
    g_assert_nonnull(strstr(err->message, "has no format in the image"));
    g_clear_error(&err);

    r = qcow2_ref_open(p, &opts, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(qcow2_ref_info(r)->nb_unknown_extensions, ==, 1);
    {
        gsize wlen;
        g_autofree uint8_t *want = load("nofmt.want", &wlen);
        g_autofree uint8_t *got = g_malloc(wlen);

        g_assert_true(qcow2_ref_read(r, 0, got, wlen, &err));
        g_assert_true(memcmp(got, want, wlen) == 0);
    }
    qcow2_ref_close(r);

    /* a format other than raw or qcow2 is refused by name */
    opts.backing_format = "vmdk";
    g_assert_null(qcow2_ref_open(p, &opts, &err));
    g_assert_nonnull(strstr(err->message, "format 'vmdk'"));
}

/* A name from the image reaches messages as UTF-8 without controls. */
static void test_hostile_names(void)
{
    g_autofree char *p = tpath("esc.qcow2");
    g_autoptr(GError) err = NULL;
    const char *c;

    sh("qemu-img create -q -f qcow2 -u -b \"$(printf 'x\\033[2Jy\\377z')\" "
       "-F qcow2 esc.qcow2 1M");
    g_assert_null(qcow2_ref_open(p, NULL, &err));
    g_assert_nonnull(strstr(err->message, "cannot open backing file 'x?[2Jy"));
    g_assert_true(g_utf8_validate(err->message, -1, NULL));
    for (c = err->message; *c; c++) {
        g_assert_cmpint((unsigned char)*c, >=, 0x20);
    }
}

/* ---- header refusals --------------------------------------------------- */

static uint8_t *hdr_image;
static gsize hdr_len;

/* Parse a patched copy of hdr_image; NULL @want: expect success. */
static void expect_parse(void (*patch)(uint8_t *f, gsize *len),
                         unsigned int flags, const char *want)
{
    g_autofree uint8_t *f = g_memdup2(hdr_image, hdr_len);
    gsize len = hdr_len;
    g_autoptr(GError) err = NULL;
    Qcow2Info info;
    bool ok;

    patch(f, &len);
    ok = qcow2_parse_header(f, qcow2_header_bytes(len), len, flags, &info,
                            &err);
    if (ok) {
        uint64_t max = qcow2_snapshot_table_max_bytes(&info);

        g_assert(info.h.snapshots_offset + max <= len);
        ok = qcow2_parse_snapshots(&info, f + info.h.snapshots_offset, max,
                                   &err) == 0;
        qcow2_info_free(&info);
    }
    if (!want) {
        g_assert_no_error(err);
        g_assert_true(ok);
        return;
    }
    g_assert_false(ok);
    g_assert_nonnull(err);
    if (!strstr(err->message, want)) {
        g_error("expected '%s' in '%s'", want, err->message);
    }
}

#define PATCH(fn_name, body) \
    static void fn_name(uint8_t *f, gsize *len) { body; }

PATCH(p_none, (void)f; (void)len)
PATCH(p_magic, f[3] = 0xfc)
PATCH(p_version, st_be32(f + 4, 4))
PATCH(p_cbits_small, st_be32(f + 20, 8))
PATCH(p_cbits_big, st_be32(f + 20, 22))
PATCH(p_unknown_incompat, f[72 + 2] |= 0x01)         /* bit 40 */
PATCH(p_incompat_bit5, f[79] |= 0x20)
PATCH(p_corrupt, f[79] |= 0x02)
PATCH(p_l1_beyond_eof, qcow2_st_be64(f + 40, 1ull << 40))
PATCH(p_l1_misaligned, qcow2_st_be64(f + 40, 0x10200))
PATCH(p_l1_too_small, st_be32(f + 36, 1))
PATCH(p_l1_huge, st_be32(f + 36, 0x7fffffff))
PATCH(p_size_huge, qcow2_st_be64(f + 24, UINT64_MAX))
PATCH(p_reftable_zero, st_be32(f + 56, 0))
PATCH(p_reftable_eof, qcow2_st_be64(f + 48, QEMU_ALIGN_UP(*len, 65536)))
PATCH(p_refcount_order, st_be32(f + 96, 7))
PATCH(p_header_length_short, st_be32(f + 100, 96))
PATCH(p_header_length_odd, st_be32(f + 100, 108))
PATCH(p_header_length_huge, st_be32(f + 100, 0x20000))
PATCH(p_compression_no_bit, f[104] = 1)
PATCH(p_compression_unknown, f[104] = 2; f[79] |= 0x08)
PATCH(p_compression_bit_no_type, f[79] |= 0x08)
PATCH(p_backing_size, qcow2_st_be64(f + 8, 0x1000); st_be32(f + 16, 2000))
PATCH(p_backing_outside, qcow2_st_be64(f + 8, 0x10000 - 4);
      st_be32(f + 16, 8))
PATCH(p_backing_in_header, qcow2_st_be64(f + 8, 64); st_be32(f + 16, 8))
PATCH(p_nb_snapshots, st_be32(f + 60, 70000))
PATCH(p_snapshots_eof, st_be32(f + 60, 1);
      qcow2_st_be64(f + 64, QEMU_ALIGN_UP(*len, 65536)))
PATCH(p_snapshots_misaligned, st_be32(f + 60, 1);
      qcow2_st_be64(f + 64, 0x30008))
PATCH(p_truncated, *len = 50)
PATCH(p_truncated_v3, *len = 90)
PATCH(p_crypt_unknown, st_be32(f + 32, 3))
PATCH(p_luks_no_ext, st_be32(f + 32, 2))
PATCH(p_data_raw_alone, f[95] |= 0x02)
PATCH(p_extl2_small, f[79] |= 0x10; st_be32(f + 20, 12))

/* the first extension (header_length 112): patch its type/length */
static uint32_t first_ext(const uint8_t *f)
{
    return ld_be32(f + 100);
}

PATCH(p_ext_overrun, st_be32(f + first_ext(f) + 4, 0x20000))
PATCH(p_ext_unknown, st_be32(f + first_ext(f), 0xdeadbeef))
/* a feature table entry that names bit 40, which is then set */
static void p_named_unknown(uint8_t *f, gsize *len)
{
    uint32_t off = first_ext(f);

    while (ld_be32(f + off) != QCOW2_EXT_FEATURE_TABLE) {
        off += 8 + QEMU_ALIGN_UP(ld_be32(f + off + 4), 8);
        g_assert_cmpuint(off, <, 0x10000);
    }
    /* the first entry: incompatible bit 0, "dirty bit" */
    g_assert_cmpint(f[off + 8], ==, 0);
    g_assert_cmpint(f[off + 9], ==, 0);
    f[off + 9] = 40;
    f[72 + 2] |= 0x01;
}

static void test_header_refusals(void)
{
    sh("qemu-img create -q -f qcow2 -o compat=1.1 hdr.qcow2 1M");
    sh("qemu-io -f qcow2 -c 'write -P 0x11 0 64k' hdr.qcow2 >/dev/null");
    hdr_image = load("hdr.qcow2", &hdr_len);
    g_assert_cmpuint(ld_be32(hdr_image + 100), ==, 112);

    expect_parse(p_none, QCOW2_OPEN_WRITE, NULL);
    expect_parse(p_magic, 0, "not a qcow2 image");
    expect_parse(p_version, 0, "version 4");
    expect_parse(p_cbits_small, 0, "cluster_bits 8");
    expect_parse(p_cbits_big, 0, "cluster_bits 22");
    expect_parse(p_unknown_incompat, 0,
                 "unsupported incompatible feature bit 40");
    expect_parse(p_incompat_bit5, 0, "incompatible feature bit 5");
    expect_parse(p_named_unknown, 0,
                 "incompatible feature bit 40 ('dirty bit')");
    expect_parse(p_corrupt, 0, NULL);
    expect_parse(p_corrupt, QCOW2_OPEN_WRITE, "marked corrupt");
    expect_parse(p_l1_beyond_eof, 0, "L1 table (1 entries at offset "
                 "0x10000000000) lies beyond the end of the file");
    expect_parse(p_l1_misaligned, 0, "L1 table offset 0x10200 is not "
                 "aligned");
    expect_parse(p_l1_too_small, 0, NULL);      /* 1 entry maps 512 MiB */
    expect_parse(p_l1_huge, 0, "L1 table has 2147483647 entries");
    expect_parse(p_size_huge, 0, "virtual size 18446744073709551615");
    expect_parse(p_reftable_zero, 0, "refcount_table_clusters is 0");
    expect_parse(p_reftable_eof, 0, "refcount table (1 clusters");
    expect_parse(p_refcount_order, 0, "refcount_order 7");
    expect_parse(p_header_length_short, 0, "header_length 96");
    expect_parse(p_header_length_odd, 0, "header_length 108");
    expect_parse(p_header_length_huge, 0, "header_length 131072");
    expect_parse(p_compression_no_bit, 0, "compression_type 1 without");
    expect_parse(p_compression_unknown, 0, "compression_type 2 is unknown");
    expect_parse(p_compression_bit_no_type, 0, "compression_type is 0");
    expect_parse(p_backing_size, 0, "backing_file_size 2000");
    expect_parse(p_backing_outside, 0, "backing file name (offset 65532, "
                 "8 bytes) lies outside");
    expect_parse(p_backing_in_header, 0, "backing_file_offset 64 overlaps");
    expect_parse(p_nb_snapshots, 0, "nb_snapshots 70000");
    expect_parse(p_snapshots_eof, 0, "snapshot table offset");
    expect_parse(p_snapshots_misaligned, 0, "snapshots_offset 0x30008");
    expect_parse(p_truncated, 0, "too short (50 bytes)");
    expect_parse(p_truncated_v3, 0, "too short (90 bytes) for a qcow2 "
                 "version 3");
    expect_parse(p_crypt_unknown, 0, "crypt_method 3");
    expect_parse(p_luks_no_ext, 0, "encryption header extension is missing");
    expect_parse(p_data_raw_alone, 0, "'raw external data'");
    expect_parse(p_extl2_small, 0, "extended L2 entries need cluster_bits");
    expect_parse(p_ext_overrun, 0, "length 131072 runs past the end of the "
                 "header extension area");
    expect_parse(p_ext_unknown, 0, NULL);
    g_free(hdr_image);

    /* a l1_size of 1 for 512 MiB of disk... but this one needs 2 */
    sh("qemu-img create -q -f qcow2 -o cluster_size=512 hdr2.qcow2 1M");
    hdr_image = load("hdr2.qcow2", &hdr_len);
    expect_parse(p_l1_too_small, 0, "l1_size 1 is too small");
    g_free(hdr_image);
}

/* A snapshot table that lies: entries past the file, bad L1 tables. */
static void test_snapshot_refusals(void)
{
    gsize len;
    g_autofree uint8_t *f = NULL;
    g_autoptr(GError) err = NULL;
    Qcow2Info info;
    uint64_t so;
    uint8_t *e;

    sh("qemu-img create -q -f qcow2 -o cluster_size=4096 snr.qcow2 1M");
    sh("qemu-img snapshot -c s snr.qcow2");
    f = load("snr.qcow2", &len);
    g_assert_true(qcow2_parse_header(f, qcow2_header_bytes(len), len, 0,
                                     &info, &err));
    so = info.h.snapshots_offset;
    e = f + so;

#define SNAP_EXPECT(want) do {                                              \
        int ret_ = qcow2_parse_snapshots(&info, f + so, len - so, &err);    \
        g_assert_cmpint(ret_, ==, -EINVAL);                                 \
        g_assert_nonnull(strstr(err->message, (want)));                     \
        g_clear_error(&err);                                                \
    } while (0)

    g_assert_cmpint(qcow2_parse_snapshots(&info, f + so, len - so, &err),
                    ==, 0);
    g_assert_cmpuint(info.nb_snapshots, ==, 1);
    g_assert_cmpstr(info.snapshots[0].name, ==, "s");
    qcow2_info_free(&info);
    g_assert_true(qcow2_parse_header(f, qcow2_header_bytes(len), len, 0,
                                     &info, &err));
    /* a short buffer asks for more */
    g_assert_cmpint(qcow2_parse_snapshots(&info, f + so, 20, &err), ==,
                    -EAGAIN);
    g_assert_no_error(err);

    qcow2_st_be64(e, 0x1200);                   /* misaligned L1 */
    SNAP_EXPECT("snapshot 0 L1 table offset 0x1200 is not aligned");
    qcow2_st_be64(e, 1ull << 40);               /* L1 past the end */
    SNAP_EXPECT("snapshot 0 L1 table (1 entries");
    qcow2_st_be64(e, info.h.l1_table_offset);
    st_be32(e + 36, 5000);                      /* extra data too big */
    SNAP_EXPECT("extra data size 5000");
    st_be32(e + 36, 16);
    qcow2_st_be64(e + 48, 1ull << 40);          /* disk size vs L1 */
    SNAP_EXPECT("disk size 1099511627776 does not fit");
    qcow2_st_be64(e + 48, 1 << 20);
    e[12] = 0xff;                               /* id runs past the file */
    SNAP_EXPECT("snapshot table entry 0 runs past the end of the file");
#undef SNAP_EXPECT
    qcow2_info_free(&info);
}

/* Features the readers refuse are recognised and named. */
static void test_unsupported_features(void)
{
    static const struct {
        const char *create;
        const char *want;
    } cases[] = {
        { "qemu-img create -q -f qcow2 -o extended_l2=on f1.qcow2 1M",
          "extended L2 entries" },
        { "qemu-img create -q -f qcow2 -o data_file=f2.data f2.qcow2 1M",
          "external data file" },
        { "qemu-img create -q -f qcow2 --object secret,id=s0,data=x "
          "-o encryption=on,encrypt.key-secret=s0 f3.qcow2 1M",
          "encrypted" },
    };
    size_t i;

    for (i = 0; i < ARRAY_SIZE(cases); i++) {
        g_autofree char *name = g_strdup_printf("f%zu.qcow2", i + 1);
        g_autofree char *p = tpath(name);
        g_autoptr(GError) err = NULL;
        gsize len;
        g_autofree uint8_t *f = NULL;
        Qcow2Info info;

        sh("%s", cases[i].create);
        f = load(name, &len);
        g_assert_true(qcow2_parse_header(f, qcow2_header_bytes(len), len, 0,
                                         &info, &err));
        g_assert_no_error(err);
        g_assert_nonnull(qcow2_unsupported_feature(&info));
        g_assert_nonnull(strstr(qcow2_unsupported_feature(&info),
                                cases[i].want));
        if (i == 1) {
            g_assert_true(info.has_data_file);
            g_assert_cmpstr(info.data_file, ==, "f2.data");
        }
        qcow2_info_free(&info);
        g_assert_null(qcow2_ref_open(p, NULL, &err));
        g_assert_nonnull(strstr(err->message, cases[i].want));
    }
}

/*
 * Metadata the reader meets only when it reads: a bad L1 or L2 entry, a
 * data cluster past the end of the file, corrupt compressed data.  The
 * read fails with a message naming the entry; the open does not.
 */
static void expect_read_error(const char *name, uint64_t off,
                              const char *want)
{
    g_autofree char *p = tpath(name);
    g_autoptr(GError) err = NULL;
    uint8_t buf[4096];
    Qcow2Ref *r;

    r = qcow2_ref_open(p, NULL, &err);
    g_assert_no_error(err);
    g_assert_false(qcow2_ref_read(r, off, buf, sizeof(buf), &err));
    if (!strstr(err->message, want)) {
        g_error("expected '%s' in '%s'", want, err->message);
    }
    /* other clusters still read */
    g_clear_error(&err);
    g_assert_true(qcow2_ref_read(r, off + (1 << 20), buf, sizeof(buf),
                                 &err));
    qcow2_ref_close(r);
}

static void test_corrupt_tables(void)
{
    gsize len;
    g_autofree uint8_t *orig = NULL;
    g_autofree uint8_t *f = NULL;
    g_autoptr(GError) err = NULL;
    Qcow2Info info;
    Qcow2L1Entry l1e;
    Qcow2L2Entry e;
    const char *why;
    uint64_t l1, l2, v;

    /* 4 KiB clusters: one L2 table maps 2 MiB; data at 0 and 1 MiB */
    sh("qemu-img create -q -f qcow2 -o cluster_size=4096 bad.qcow2 4M");
    sh("qemu-io -f qcow2 -c 'write -P 0x42 0 8k' -c 'write -P 0x43 1M 8k' "
       "bad.qcow2 >/dev/null");
    orig = load("bad.qcow2", &len);
    g_assert_true(qcow2_parse_header(orig, qcow2_header_bytes(len), len, 0,
                                     &info, &err));
    l1 = info.h.l1_table_offset;
    g_assert_cmpint(qcow2_l1_decode(&info, qcow2_ld_be64(orig + l1), &l1e,
                                    &why), ==, 0);
    l2 = l1e.l2_offset;

    /* reserved bits in the L1 entry: the whole first 2 MiB fail */
    f = g_memdup2(orig, len);
    qcow2_st_be64(f + l1, qcow2_ld_be64(f + l1) | 1);
    store("bad1.qcow2", f, len);
    {
        g_autofree char *p = tpath("bad1.qcow2");
        Qcow2Ref *r = qcow2_ref_open(p, NULL, &err);
        uint8_t buf[512];

        g_assert_no_error(err);
        g_assert_false(qcow2_ref_read(r, 0, buf, sizeof(buf), &err));
        g_assert_nonnull(strstr(err->message, "L1 entry 0"));
        g_assert_nonnull(strstr(err->message, "reserved bits"));
        g_clear_error(&err);
        /* the second L1 entry is unallocated: zeroes */
        g_assert_true(qcow2_ref_read(r, 3 << 20, buf, sizeof(buf), &err));
        qcow2_ref_close(r);
    }

    /* L2 entry 0: reserved bits; entry 256 (1 MiB): past the file */
    memcpy(f, orig, len);
    qcow2_st_be64(f + l2, qcow2_ld_be64(f + l2) | 2);
    store("bad2.qcow2", f, len);
    expect_read_error("bad2.qcow2", 0, "entry 0 of the L2 table at");
    memcpy(f, orig, len);
    v = qcow2_ld_be64(f + l2 + 256 * 8);
    g_assert_cmpint(qcow2_l2_decode(&info, v, &e, &why), ==, 0);
    g_assert_cmpint(e.type, ==, QCOW2_CLUSTER_NORMAL);
    qcow2_st_be64(f + l2 + 256 * 8,
                  qcow2_l2_encode_standard(QEMU_ALIGN_UP(len, 4096) + 4096,
                                           true, false));
    store("bad3.qcow2", f, len);
    expect_read_error("bad3.qcow2", 1 << 20, "beyond the end of the file");

    /* a compressed cluster over garbage */
    memcpy(f, orig, len);
    g_assert_cmpint(qcow2_l2_encode_compressed(&info, 3 * 4096 + 100, 700,
                                               &v), ==, 0);
    qcow2_st_be64(f + l2 + 8, v);
    store("bad4.qcow2", f, len);
    expect_read_error("bad4.qcow2", 4096, "compressed cluster at 0x3064");
    qcow2_info_free(&info);
}

/* ---- entries, refcounts, mapping --------------------------------------- */

/* A parsed minimal image: header, L1 at cluster 1, reftable at 2. */
static void make_info(Qcow2Info *info, unsigned int cluster_bits,
                      unsigned int refcount_order, uint64_t file_size)
{
    uint32_t cs = 1u << cluster_bits;
    g_autofree uint8_t *f = g_malloc0(cs * 3);
    g_autoptr(GError) err = NULL;

    st_be32(f, QCOW2_MAGIC);
    st_be32(f + 4, 3);
    st_be32(f + 20, cluster_bits);
    qcow2_st_be64(f + 24, 1ull << (2 * cluster_bits - 3));   /* one L2 */
    st_be32(f + 36, 1);
    qcow2_st_be64(f + 40, cs);
    qcow2_st_be64(f + 48, 2 * cs);
    st_be32(f + 56, 1);
    st_be32(f + 96, refcount_order);
    st_be32(f + 100, 104);
    g_assert_true(qcow2_parse_header(f, MIN(file_size, cs * 3), file_size,
                                     0, info, &err));
    g_assert_no_error(err);
}

static void test_l1_l2_entries(void)
{
    Qcow2Info info;
    Qcow2L1Entry l1e;
    Qcow2L2Entry e;
    const char *why = NULL;

    make_info(&info, 16, 4, 1 << 30);
    g_assert_cmpint(qcow2_l1_decode(&info, qcow2_l1_encode(0x30000, true),
                                    &l1e, &why), ==, 0);
    g_assert_cmpuint(l1e.l2_offset, ==, 0x30000);
    g_assert_true(l1e.copied);
    g_assert_cmpint(qcow2_l1_decode(&info, 0x30001, &l1e, &why), ==,
                    -EUCLEAN);
    g_assert_nonnull(strstr(why, "reserved"));
    g_assert_cmpint(qcow2_l1_decode(&info, 1ull << 60 | 0x30000, &l1e, &why),
                    ==, -EUCLEAN);
    g_assert_cmpint(qcow2_l1_decode(&info, 0x30200, &l1e, &why), ==,
                    -EUCLEAN);
    g_assert_nonnull(strstr(why, "not cluster-aligned"));
    g_assert_cmpint(qcow2_l1_decode(&info, 1ull << 30, &l1e, &why), ==,
                    -EUCLEAN);
    g_assert_nonnull(strstr(why, "beyond the end"));
    g_assert_cmpint(qcow2_l1_decode(&info, (1ull << 30) - 0x10000, &l1e,
                                    &why), ==, 0);

    /* standard */
    g_assert_cmpint(qcow2_l2_decode(&info, 0, &e, &why), ==, 0);
    g_assert_cmpint(e.type, ==, QCOW2_CLUSTER_UNALLOCATED);
    g_assert_cmpint(qcow2_l2_decode(&info,
                    qcow2_l2_encode_standard(0x50000, true, false), &e, &why),
                    ==, 0);
    g_assert_cmpint(e.type, ==, QCOW2_CLUSTER_NORMAL);
    g_assert_cmpuint(e.host_offset, ==, 0x50000);
    g_assert_true(e.copied);
    g_assert_cmpint(qcow2_l2_decode(&info,
                    qcow2_l2_encode_standard(0, false, true), &e, &why),
                    ==, 0);
    g_assert_cmpint(e.type, ==, QCOW2_CLUSTER_ZERO_PLAIN);
    g_assert_cmpint(qcow2_l2_decode(&info,
                    qcow2_l2_encode_standard(0x60000, true, true), &e, &why),
                    ==, 0);
    g_assert_cmpint(e.type, ==, QCOW2_CLUSTER_ZERO_ALLOC);
    g_assert_cmpint(qcow2_l2_decode(&info, 0x50002, &e, &why), ==, -EUCLEAN);
    g_assert_nonnull(strstr(why, "reserved"));
    g_assert_cmpint(qcow2_l2_decode(&info, 1ull << 57 | 0x50000, &e, &why),
                    ==, -EUCLEAN);
    g_assert_cmpint(qcow2_l2_decode(&info, 0x50200, &e, &why), ==, -EUCLEAN);
    g_assert_nonnull(strstr(why, "not cluster-aligned"));
    g_assert_cmpint(qcow2_l2_decode(&info, 1ull << 63, &e, &why), ==,
                    -EUCLEAN);
    g_assert_nonnull(strstr(why, "offset 0"));

    /* the zero flag is reserved in version 2 */
    info.h.version = 2;
    g_assert_cmpint(qcow2_l2_decode(&info, 1, &e, &why), ==, -EUCLEAN);
    g_assert_nonnull(strstr(why, "version 2"));
    info.h.version = 3;

    /* compressed: copied flag is corruption */
    g_assert_cmpint(qcow2_l2_decode(&info, 3ull << 62 | 0x12345, &e, &why),
                    ==, -EUCLEAN);
    g_assert_nonnull(strstr(why, "copied"));
    g_assert_cmpint(qcow2_l2_decode(&info, 1ull << 62 | 0x123, &e, &why),
                    ==, -EUCLEAN);
    g_assert_nonnull(strstr(why, "header cluster"));
    qcow2_info_free(&info);
}

/* The descriptor split for every cluster size, both ways. */
static void test_compressed_descriptor(void)
{
    unsigned int bits;

    for (bits = QCOW2_MIN_CLUSTER_BITS; bits <= QCOW2_MAX_CLUSTER_BITS;
         bits++) {
        Qcow2Info info;
        uint32_t cs = 1u << bits;
        uint64_t entry, off;
        uint32_t len;
        Qcow2L2Entry e;
        const char *why;
        unsigned int x = 62 - (bits - 8);

        make_info(&info, bits, 4, 1ull << 40);
        g_assert_cmpuint(info.csize_shift, ==, x);
        /* at most 2^(bits - 8) sectors: a cluster's data plus slack */
        g_assert_cmpuint(info.csize_mask, ==, (1u << (bits - 8)) - 1);
        for (off = cs; off < cs + 1024; off += 211) {
            for (len = 1; len <= cs; len = len * 3 + 1) {
                uint64_t want_sect = (off + len - 1) / 512 - off / 512;

                g_assert_cmpint(qcow2_l2_encode_compressed(&info, off, len,
                                                           &entry), ==, 0);
                g_assert_cmpuint(entry >> 62, ==, 1);
                g_assert_cmpuint((entry >> x) & info.csize_mask, ==,
                                 want_sect);
                g_assert_cmpuint(entry & ((1ull << x) - 1), ==, off);
                g_assert_cmpint(qcow2_l2_decode(&info, entry, &e, &why), ==,
                                0);
                g_assert_cmpint(e.type, ==, QCOW2_CLUSTER_COMPRESSED);
                g_assert_cmpuint(e.host_offset, ==, off);
                /* covers the data, ends on a sector boundary */
                g_assert_cmpuint(e.compressed_size, >=, len);
                g_assert_cmpuint((off + e.compressed_size) % 512, ==, 0);
                g_assert_cmpuint(e.compressed_size, <, len + 512);
            }
        }
        /* too long for the sector count, or an offset past the field */
        g_assert_cmpint(qcow2_l2_encode_compressed(&info, cs,
                        (info.csize_mask + 1) * 512 + 1, &entry), ==, -ERANGE);
        if (x <= 56) {
            g_assert_cmpint(qcow2_l2_encode_compressed(&info, 1ull << x, 1,
                                                       &entry), ==, -ERANGE);
        } else {
            /* 512 B clusters: bits 56..60 of the offset must be zero */
            g_assert_cmpint(qcow2_l2_decode(&info, 1ull << 62 | 1ull << 56,
                                            &e, &why), ==, -EUCLEAN);
            g_assert_nonnull(strstr(why, "56 bits"));
        }
        qcow2_info_free(&info);
    }
}

static void test_refcount_entries(void)
{
    unsigned int order;

    for (order = 0; order <= QCOW2_MAX_REFCOUNT_ORDER; order++) {
        Qcow2Info info;
        uint8_t block[512];
        uint64_t v, max;
        uint32_t i, n;
        Qcow2RefcountPos pos;
        const char *why;

        make_info(&info, 9, order, 1 << 20);
        max = info.refcount_max;
        n = info.refblock_entries;
        g_assert_cmpuint(n, ==, 512 * 8 >> order);
        g_assert_cmpuint(max, ==, order == 6 ? UINT64_MAX :
                         (1ull << (1u << order)) - 1);
        memset(block, 0, sizeof(block));
        for (i = 0; i < n; i++) {
            g_assert_cmpint(qcow2_refcount_set(&info, block, i,
                                               (i * 0x9e3779b97f4a7c15ull) &
                                               max), ==, 0);
        }
        for (i = 0; i < n; i++) {
            g_assert_cmpint(qcow2_refcount_get(&info, block, i, &v), ==, 0);
            g_assert_cmpuint(v, ==, (i * 0x9e3779b97f4a7c15ull) & max);
        }
        /* layout: big-endian for bytes and up, LSB-first below */
        memset(block, 0, sizeof(block));
        qcow2_refcount_set(&info, block, 1, 1);
        switch (order) {
        case 0: g_assert_cmpint(block[0], ==, 0x02); break;
        case 1: g_assert_cmpint(block[0], ==, 0x04); break;
        case 2: g_assert_cmpint(block[0], ==, 0x10); break;
        case 3: g_assert_cmpint(block[1], ==, 1); break;
        case 4: g_assert_cmpint(block[3], ==, 1); break;
        case 5: g_assert_cmpint(block[7], ==, 1); break;
        case 6: g_assert_cmpint(block[15], ==, 1); break;
        }
        if (order < 6) {
            g_assert_cmpint(qcow2_refcount_set(&info, block, 0, max + 1),
                            ==, -ERANGE);
        }
        g_assert_cmpint(qcow2_refcount_set(&info, block, n, 0), ==, -ERANGE);
        g_assert_cmpint(qcow2_refcount_get(&info, block, n, &v), ==, -ERANGE);

        /* cluster -> (table index, block index) */
        g_assert_cmpint(qcow2_refcount_pos(&info, (uint64_t)n * 512 * 3 +
                                           5 * 512 + 7, &pos), ==, 0);
        g_assert_cmpuint(pos.table_index, ==, 3);
        g_assert_cmpuint(pos.block_index, ==, 5);
        g_assert_cmpint(qcow2_refcount_pos(&info, (uint64_t)n * 512 * 64,
                                           &pos), ==, -ERANGE);

        /* refcount table entries */
        g_assert_cmpint(qcow2_reftable_decode(&info,
                        qcow2_reftable_encode(0x800), &v, &why), ==, 0);
        g_assert_cmpuint(v, ==, 0x800);
        g_assert_cmpint(qcow2_reftable_decode(&info, 0x801, &v, &why), ==,
                        -EUCLEAN);
        g_assert_cmpint(qcow2_reftable_decode(&info, 1ull << 20, &v, &why),
                        ==, -EUCLEAN);
        qcow2_info_free(&info);
    }
}

static void test_mapping(void)
{
    Qcow2Info info;
    Qcow2Map m;

    make_info(&info, 12, 4, 1 << 20);       /* 4 KiB: 512 entries per L2 */
    g_assert_cmpint(qcow2_map(&info, 1 << 20, 1, 0, &m), ==, 0);
    g_assert_cmpuint(m.l1_index, ==, 0);
    g_assert_cmpuint(m.l2_index, ==, 0);
    g_assert_cmpuint(m.cluster_bytes_left, ==, 4096);
    g_assert_cmpint(qcow2_map(&info, 3ull << 30, 2, (2ull << 20) - 1, &m),
                    ==, 0);
    g_assert_cmpuint(m.l1_index, ==, 0);
    g_assert_cmpuint(m.l2_index, ==, 511);
    g_assert_cmpuint(m.in_cluster, ==, 4095);
    g_assert_cmpuint(m.cluster_bytes_left, ==, 1);
    g_assert_cmpint(qcow2_map(&info, 3ull << 30, 2, (2ull << 20) + 4097, &m),
                    ==, 0);
    g_assert_cmpuint(m.l1_index, ==, 1);
    g_assert_cmpuint(m.l2_index, ==, 1);
    g_assert_cmpuint(m.in_cluster, ==, 1);
    /* beyond the disk, beyond the L1 table */
    g_assert_cmpint(qcow2_map(&info, 1 << 20, 1, 1 << 20, &m), ==, -ERANGE);
    g_assert_cmpint(qcow2_map(&info, 3ull << 30, 2, 4ull << 20, &m), ==,
                    -ERANGE);
    g_assert_cmpint(qcow2_map(&info, UINT64_MAX, 1, UINT64_MAX - 1, &m), ==,
                    -ERANGE);
    qcow2_info_free(&info);
}

/* ---- decompression ----------------------------------------------------- */

static void test_decompress(void)
{
    enum { CS = 4096 };
    static uint8_t plain[CS], out[CS], comp[2 * CS];
    g_autoptr(GError) err = NULL;
    Qcow2Decompressor *d;
    z_stream zs = { 0 };
    size_t clen, i;
    const char *why;

    for (i = 0; i < CS; i++) {
        plain[i] = (i * 7) ^ (i >> 5);
    }

    /* raw deflate, as qcow2 stores it, with trailing sector padding */
    g_assert_cmpint(deflateInit2(&zs, 6, Z_DEFLATED, -12, 9,
                                 Z_DEFAULT_STRATEGY), ==, Z_OK);
    zs.next_in = plain;
    zs.avail_in = CS;
    zs.next_out = comp;
    zs.avail_out = sizeof(comp);
    g_assert_cmpint(deflate(&zs, Z_FINISH), ==, Z_STREAM_END);
    clen = sizeof(comp) - zs.avail_out;
    deflateEnd(&zs);
    d = qcow2_decompressor_new(QCOW2_COMPRESSION_DEFLATE, &err);
    g_assert_no_error(err);
    memset(comp + clen, 0x5a, 511);
    g_assert_cmpint(qcow2_decompress(d, comp, clen + 511, out, CS, &why), ==,
                    0);
    g_assert_true(memcmp(out, plain, CS) == 0);
    /* twice: the context is reset between clusters */
    memset(out, 0, CS);
    g_assert_cmpint(qcow2_decompress(d, comp, clen, out, CS, &why), ==, 0);
    g_assert_true(memcmp(out, plain, CS) == 0);
    /* truncated input, a short stream, garbage */
    g_assert_cmpint(qcow2_decompress(d, comp, clen / 2, out, CS, &why), ==,
                    -EIO);
    g_assert_nonnull(strstr(why, "ends before a full cluster"));
    g_assert_cmpint(qcow2_decompress(d, comp, clen, out, CS / 2, &why), ==,
                    0);     /* more data than one (smaller) cluster: ok */
    memset(comp, 0xff, 64);
    g_assert_cmpint(qcow2_decompress(d, comp, 64, out, CS, &why), ==, -EIO);
    g_assert_nonnull(strstr(why, "corrupt"));
    qcow2_decompressor_free(d);

    /* zstd */
    clen = ZSTD_compress(comp, sizeof(comp), plain, CS, 3);
    g_assert_false(ZSTD_isError(clen));
    d = qcow2_decompressor_new(QCOW2_COMPRESSION_ZSTD, &err);
    g_assert_no_error(err);
    memset(comp + clen, 0, 511);
    g_assert_cmpint(qcow2_decompress(d, comp, clen + 511, out, CS, &why), ==,
                    0);
    g_assert_true(memcmp(out, plain, CS) == 0);
    g_assert_cmpint(qcow2_decompress(d, comp, clen - 3, out, CS, &why), ==,
                    -EIO);
    g_assert_cmpint(qcow2_decompress(d, comp, clen, out, CS / 2, &why), ==,
                    -EIO);
    g_assert_nonnull(strstr(why, "more than one cluster"));
    g_assert_cmpint(qcow2_decompress(d, comp, clen, out, CS, &why), ==, 0);
    comp[0] ^= 0xff;
    g_assert_cmpint(qcow2_decompress(d, comp, clen, out, CS, &why), ==, -EIO);
    g_assert_nonnull(strstr(why, "corrupt"));
    qcow2_decompressor_free(d);

    g_assert_null(qcow2_decompressor_new(7, &err));
    g_assert_nonnull(err);
}

int main(int argc, char **argv)
{
    g_autoptr(GError) err = NULL;
    int ret;

    g_test_init(&argc, &argv, NULL);
    tmpdir = g_dir_make_tmp("test-qcow2-XXXXXX", &err);
    g_assert_no_error(err);

    g_test_add_func("/qcow2/entries/l1-l2", test_l1_l2_entries);
    g_test_add_func("/qcow2/entries/compressed", test_compressed_descriptor);
    g_test_add_func("/qcow2/entries/refcount", test_refcount_entries);
    g_test_add_func("/qcow2/entries/mapping", test_mapping);
    g_test_add_func("/qcow2/decompress", test_decompress);
    g_test_add_func("/qcow2/header/refusals", test_header_refusals);
    g_test_add_func("/qcow2/header/snapshot-refusals",
                    test_snapshot_refusals);
    g_test_add_func("/qcow2/header/unsupported", test_unsupported_features);
    g_test_add_func("/qcow2/read/plain", test_plain_images);
    g_test_add_func("/qcow2/read/zero", test_zero_clusters);
    g_test_add_func("/qcow2/read/compressed", test_compressed);
    g_test_add_func("/qcow2/read/snapshots", test_snapshots);
    g_test_add_func("/qcow2/read/bitmaps", test_bitmaps);
    g_test_add_func("/qcow2/read/backing-chain", test_backing_chain);
    g_test_add_func("/qcow2/read/corrupt-tables", test_corrupt_tables);
    g_test_add_func("/qcow2/read/hostile-names", test_hostile_names);
    g_test_add_func("/qcow2/read/backing-without-format",
                    test_backing_without_format);
    ret = g_test_run();

    sh("rm -rf %s", tmpdir);
    g_free(tmpdir);
    return ret;
}
