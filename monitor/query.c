/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The queries over nodes and exports: query-named-block-nodes,
 * query-blockstats with the latency histograms of
 * block-latency-histogram-set, and vhost-blkd's own
 * x-query-vhost-blk-stats.  Replies follow qemu-storage-daemon 7.2's
 * shapes (QEMU's BlockDeviceInfo, BlockStats, BlockLatencyHistogramInfo)
 * so that its tooling works unchanged.
 *
 * Threads: main thread; the engine counters are read in each iothread
 * (iothread_run_sync()).
 */
#include "qemu/osdep.h"
#include "monitor-internal.h"
#include "block/engine.h"
#include "block/block_int.h"

#include <sys/stat.h>

/* ---- nodes -------------------------------------------------------------- */

/*
 * The longest backing chain walked: the qcow2 driver refuses deeper ones
 * (QCOW2_MAX_BACKING_DEPTH), this bound only keeps a query finite.
 */
#define VB_QUERY_MAX_CHAIN 64

/* Bytes the file takes on its storage (QEMU's actual-size). */
static uint64_t vb_actual_size(const char *filename)
{
    struct stat st;

    if (filename && stat(filename, &st) == 0 && S_ISREG(st.st_mode)) {
        return (uint64_t)st.st_blocks * 512;
    }
    return 0;
}

/*
 * The length of a file or block device a backing qcow2 image opened for
 * itself, whose node the driver keeps to itself: 0 when it is gone or
 * has become something else under us.  The path is the image's: only a
 * regular file is taken from stat(), only a block device is opened (and
 * without blocking), so that a FIFO put there cannot stall the monitor.
 */
static uint64_t vb_file_length(const char *filename)
{
    struct stat st;
    off_t len;
    int fd;

    if (stat(filename, &st) < 0) {
        return 0;
    }
    if (S_ISREG(st.st_mode)) {
        return st.st_size;
    }
    if (!S_ISBLK(st.st_mode)) {
        return 0;
    }
    fd = open(filename, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    len = fstat(fd, &st) == 0 && S_ISBLK(st.st_mode) ?
          lseek(fd, 0, SEEK_END) : -1;
    close(fd);
    return len < 0 ? 0 : len;
}

/*
 * QEMU's ImageInfo of a format node's image into @img: the basic members,
 * what the driver says of its image, and the backing chain nested
 * ("backing-image").  Returns the chain's depth below @blk.
 */
static unsigned int vb_image_info(BlockBackend *blk, const char *filename,
                                  const char *format, JsonObject *img,
                                  unsigned int level)
{
    BlockDriverInfo bdi = { 0 };
    unsigned int depth = 0;
    bool is_format = strcmp(format, "raw") != 0;

    if (is_format) {
        blk_get_info(blk, &bdi);
    }
    json_object_set_string_member(img, "filename", filename);
    json_object_set_string_member(img, "format", format);
    json_object_set_int_member(img, "virtual-size", blk_getlength(blk));
    json_object_set_int_member(img, "actual-size", vb_actual_size(filename));
    json_object_set_boolean_member(img, "dirty-flag", bdi.dirty);
    if (bdi.cluster_size) {
        json_object_set_int_member(img, "cluster-size", bdi.cluster_size);
    }
    if (bdi.format_specific) {
        g_autoptr(JsonParser) p = json_parser_new();

        if (json_parser_load_from_data(p, bdi.format_specific, -1, NULL)) {
            json_object_set_member(img, "format-specific",
                                   json_node_copy(json_parser_get_root(p)));
        }
    }
    if (bdi.backing_file) {
        json_object_set_string_member(img, "backing-filename",
                                      bdi.backing_file);
        json_object_set_string_member(img, "full-backing-filename",
                                      bdi.full_backing_file ?
                                      bdi.full_backing_file :
                                      bdi.backing_file);
        if (bdi.backing_format) {
            json_object_set_string_member(img, "backing-filename-format",
                                          bdi.backing_format);
        }
    }
    if (bdi.backing && level < VB_QUERY_MAX_CHAIN) {
        JsonObject *b = json_object_new();
        const char *bname = bdi.full_backing_file ? bdi.full_backing_file :
                            bdi.backing_file ? bdi.backing_file : "";

        depth = 1 + vb_image_info(bdi.backing, bname,
                                  blk_image_format(bdi.backing), b,
                                  level + 1);
        json_object_set_object_member(img, "backing-image", b);
    }
    return depth;
}

/* The members of QEMU's BlockDeviceInfo every node has, into @o. */
static void vb_node_common(JsonObject *o, const char *name, const char *drv,
                           const char *filename, bool ro, bool direct)
{
    static const char *const zeroes[] = {
        "bps", "bps_rd", "bps_wr", "iops", "iops_rd", "iops_wr",
        "write_threshold", "backing_file_depth",
    };
    JsonObject *cache = json_object_new();

    json_object_set_string_member(o, "file", filename);
    json_object_set_string_member(o, "node-name", name);
    json_object_set_boolean_member(o, "ro", ro);
    json_object_set_string_member(o, "drv", drv);
    json_object_set_boolean_member(o, "encrypted", false);
    json_object_set_string_member(o, "detect_zeroes", "off");
    for (size_t i = 0; i < G_N_ELEMENTS(zeroes); i++) {
        /* No throttling, no write threshold; a format node sets its
         * chain's depth after. */
        json_object_set_int_member(o, zeroes[i], 0);
    }
    json_object_set_boolean_member(cache, "writeback", true);
    json_object_set_boolean_member(cache, "direct", direct);
    json_object_set_boolean_member(cache, "no-flush", false);
    json_object_set_object_member(o, "cache", cache);
}

static VbNode *vb_node_by_blk(VbState *s, BlockBackend *blk)
{
    for (guint i = 0; i < s->nodes->len; i++) {
        VbNode *n = g_ptr_array_index(s->nodes, i);

        if (n->blk == blk) {
            return n;
        }
    }
    return NULL;
}

/* A format node's own members: its image with the chain below it. */
static void vb_format_node_info(VbState *s, JsonObject *o, BlockBackend *blk,
                                const char *filename, const char *format)
{
    JsonObject *img = json_object_new();
    unsigned int depth = vb_image_info(blk, filename, format, img, 0);
    BlockDriverInfo bdi = { 0 };
    VbNode *bn;

    json_object_set_int_member(o, "backing_file_depth", depth);
    blk_get_info(blk, &bdi);
    /* QEMU's backing_file: the backing node's file name, the name the
     * image records resolved when it was not given one. */
    bn = bdi.backing ? vb_node_by_blk(s, bdi.backing) : NULL;
    if (bn) {
        json_object_set_string_member(o, "backing_file", bn->filename);
    } else if (bdi.backing_file) {
        json_object_set_string_member(o, "backing_file",
                                      bdi.full_backing_file ?
                                      bdi.full_backing_file :
                                      bdi.backing_file);
    }
    json_object_set_object_member(o, "image", img);
}

/* A protocol node's image: the file itself. */
static void vb_file_image(JsonObject *o, const char *filename,
                          const char *drv, uint64_t length)
{
    JsonObject *img = json_object_new();

    json_object_set_string_member(img, "filename", filename);
    json_object_set_string_member(img, "format", drv);
    /* QEMU counts a file in 512-byte sectors, a partial last one whole
     * (qemu-img leaves a qcow2 file at any length). */
    json_object_set_int_member(img, "virtual-size", QEMU_ALIGN_UP(length, (uint64_t)512));
    json_object_set_int_member(img, "actual-size", vb_actual_size(filename));
    json_object_set_boolean_member(img, "dirty-flag", false);
    json_object_set_object_member(o, "image", img);
}

static JsonObject *vb_node_info(VbState *s, VbNode *n)
{
    JsonObject *o = json_object_new();

    vb_node_common(o, n->name, n->driver, n->filename, n->readonly,
                   n->cache_direct);
    if (n->format) {
        vb_format_node_info(s, o, n->blk, n->filename, n->driver);
    } else if (n->no_storage) {
        JsonObject *img = json_object_new();

        json_object_set_string_member(img, "filename", n->filename);
        json_object_set_string_member(img, "format", n->driver);
        json_object_set_int_member(img, "virtual-size",
                                   blk_getlength(n->blk));
        json_object_set_int_member(img, "actual-size", 0);
        json_object_set_object_member(o, "image", img);
    } else {
        vb_file_image(o, n->filename, n->driver, blk_getlength(n->blk));
    }
    if (n->file) {
        /* QEMU's ImageInfo children (QEMU 8.0 on): the node below, by
         * its role. */
        JsonObject *img = json_object_get_object_member(o, "image");
        JsonArray *children = json_array_new();
        JsonObject *c = json_object_new();
        JsonObject *ci = json_object_new();

        json_object_set_string_member(ci, "filename", n->file->filename);
        json_object_set_string_member(ci, "format", n->file->driver);
        json_object_set_int_member(ci, "virtual-size",
                                   blk_getlength(n->file->blk));
        json_object_set_string_member(c, "name", "file");
        json_object_set_object_member(c, "info", ci);
        json_array_add_object_element(children, c);
        json_object_set_array_member(img, "children", children);
        /* Ours: the child's node-name, which QEMU's form leaves out. */
        json_object_set_string_member(o, "x-file-node-name", n->file->name);
    }
    return o;
}

/*
 * The nodes of @n's backing chain that the format driver opened itself
 * (QEMU's implicit nodes: a backing format node and its file node per
 * level), which QEMU lists as nodes of their own.  They are named
 * "#NODE-backingK" and "#NODE-backingK-file", K = 1 for the image right
 * below @n: stable from one query to the next, and no user's node-name
 * can start with '#'.  A backing node given by name (backing=NODE) is
 * listed for itself and ends the walk.
 */
static void vb_backing_nodes(VbState *s, VbNode *n, JsonArray *arr)
{
    BlockBackend *blk = n->blk;
    unsigned int level = 1;
    BlockDriverInfo bdi = { 0 };

    blk_get_info(blk, &bdi);
    while (bdi.backing && level <= VB_QUERY_MAX_CHAIN &&
           !vb_node_by_blk(s, bdi.backing)) {
        BlockBackend *b = bdi.backing;
        const char *fname = bdi.full_backing_file ? bdi.full_backing_file :
                            bdi.backing_file ? bdi.backing_file : "";
        const char *fmt = blk_image_format(b);
        const char *proto = blk_is_block_device(b) ? "host_device" : "file";
        g_autofree char *fmt_name = g_strdup_printf("#%s-backing%u",
                                                    n->name, level);
        g_autofree char *file_name = g_strdup_printf("#%s-backing%u-file",
                                                     n->name, level);
        JsonObject *fo = json_object_new();
        JsonObject *po = json_object_new();

        /* Backing files are opened read-only, through the page cache;
         * block-commit reopens its base read-write while it runs. */
        vb_node_common(fo, fmt_name, fmt, fname, blk_is_read_only(b),
                       false);
        vb_format_node_info(s, fo, b, fname, fmt);
        json_object_set_string_member(fo, "x-file-node-name", file_name);
        json_array_add_object_element(arr, fo);

        vb_node_common(po, file_name, proto, fname, blk_is_read_only(b),
                       false);
        vb_file_image(po, fname, proto,
                      strcmp(fmt, "raw") ? vb_file_length(fname) :
                      blk_getlength(b));
        json_array_add_object_element(arr, po);

        memset(&bdi, 0, sizeof(bdi));
        if (strcmp(fmt, "raw")) {
            blk_get_info(b, &bdi);
        }
        level++;
    }
}

static JsonNode *vb_qmp_query_named_block_nodes(void *opaque,
                                                JsonObject *args,
                                                GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    bool flat = false;
    JsonArray *arr;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_bool(&a, "flat", &flat, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    arr = json_array_new();
    for (guint i = 0; i < s->nodes->len; i++) {
        VbNode *n = g_ptr_array_index(s->nodes, i);

        json_array_add_object_element(arr, vb_node_info(s, n));
        if (n->format) {
            vb_backing_nodes(s, n, arr);
        }
    }
    return vb_node_take_array(arr);
}

/* ---- statistics -------------------------------------------------------- */

static void vb_stats_fill(JsonObject *st, const VuBlkExportStats *x)
{
    const VuBlkOpStats *rd = &x->ops[VU_BLK_OP_READ];
    const VuBlkOpStats *wr = &x->ops[VU_BLK_OP_WRITE];
    const VuBlkOpStats *wz = &x->ops[VU_BLK_OP_WRITE_ZEROES];
    const VuBlkOpStats *fl = &x->ops[VU_BLK_OP_FLUSH];
    const VuBlkOpStats *un = &x->ops[VU_BLK_OP_DISCARD];

    /* As QEMU's virtio-blk accounts: write-zeroes count as writes,
     * discards as unmaps. */
    json_object_set_int_member(st, "rd_bytes", rd->bytes);
    json_object_set_int_member(st, "wr_bytes", wr->bytes + wz->bytes);
    json_object_set_int_member(st, "unmap_bytes", un->bytes);
    json_object_set_int_member(st, "rd_operations", rd->ops);
    json_object_set_int_member(st, "wr_operations", wr->ops + wz->ops);
    json_object_set_int_member(st, "flush_operations", fl->ops);
    json_object_set_int_member(st, "unmap_operations", un->ops);
    json_object_set_int_member(st, "rd_total_time_ns", rd->total_ns);
    json_object_set_int_member(st, "wr_total_time_ns",
                               wr->total_ns + wz->total_ns);
    json_object_set_int_member(st, "flush_total_time_ns", fl->total_ns);
    json_object_set_int_member(st, "unmap_total_time_ns", un->total_ns);
    json_object_set_int_member(st, "wr_highest_offset", x->wr_highest_offset);
    json_object_set_int_member(st, "rd_merged", 0);
    json_object_set_int_member(st, "wr_merged", 0);
    json_object_set_int_member(st, "unmap_merged", 0);
    json_object_set_int_member(st, "failed_rd_operations", rd->failed);
    json_object_set_int_member(st, "failed_wr_operations",
                               wr->failed + wz->failed);
    json_object_set_int_member(st, "failed_flush_operations", fl->failed);
    json_object_set_int_member(st, "failed_unmap_operations", un->failed);
    /* Requests outside the disk are counted as failed, not apart. */
    json_object_set_int_member(st, "invalid_rd_operations", 0);
    json_object_set_int_member(st, "invalid_wr_operations", 0);
    json_object_set_int_member(st, "invalid_flush_operations", 0);
    json_object_set_int_member(st, "invalid_unmap_operations", 0);
    json_object_set_boolean_member(st, "account_invalid", false);
    json_object_set_boolean_member(st, "account_failed", true);
    json_object_set_array_member(st, "timed_stats", json_array_new());
}

/* QEMU's BlockLatencyHistogramInfo. */
static JsonObject *vb_lat_hist_json(const LatHist *h)
{
    JsonObject *o = json_object_new();
    JsonArray *b = json_array_new(), *bins = json_array_new();

    for (unsigned int i = 0; i < h->n; i++) {
        json_array_add_int_element(b, h->boundaries[i]);
    }
    for (unsigned int i = 0; i <= h->n; i++) {
        json_array_add_int_element(bins, h->bins[i]);
    }
    json_object_set_array_member(o, "boundaries", b);
    json_object_set_array_member(o, "bins", bins);
    return o;
}

/* The histograms set with block-latency-histogram-set, under QEMU's
 * names; absent when not set, as in QEMU. */
static void vb_stats_fill_histograms(JsonObject *st, VuBlkExport *exp)
{
    static const char *const names[VU_BLK_HIST__MAX] = {
        [VU_BLK_HIST_READ] = "rd_latency_histogram",
        [VU_BLK_HIST_WRITE] = "wr_latency_histogram",
        [VU_BLK_HIST_FLUSH] = "flush_latency_histogram",
        [VU_BLK_HIST_ZAP] = "zap_latency_histogram",
    };

    for (int t = 0; t < VU_BLK_HIST__MAX; t++) {
        LatHist *h = vu_blk_export_get_latency_histogram(exp, t);

        if (h) {
            json_object_set_object_member(st, names[t], vb_lat_hist_json(h));
            lat_hist_free(h);
        }
    }
}

/* An NBD export's counters where the vhost-user export's go. */
static void vb_stats_add_nbd(VuBlkExportStats *x, const NbdExportStats *st)
{
    for (int op = 0; op < VU_BLK_OP__MAX; op++) {
        x->ops[op].ops += st->ops[op].ops;
        x->ops[op].failed += st->ops[op].failed;
        x->ops[op].bytes += st->ops[op].bytes;
        x->ops[op].total_ns += st->ops[op].total_ns;
    }
    x->wr_highest_offset = MAX(x->wr_highest_offset, st->wr_highest_offset);
}

/*
 * @qdev: an entry per export (without query-nodes), whose counters are
 * @nbd_index's (an NBD export) or else the vhost-user export's; NULL: an
 * entry per node, counting every export of the node.
 */
static JsonObject *vb_node_blockstats(VbState *s, VbNode *n,
                                      const char *qdev, int nbd_index)
{
    JsonObject *o = json_object_new();
    JsonObject *st = json_object_new();
    VuBlkExportStats x = { 0 };
    bool device_level = qdev != NULL;

    if (n->user && nbd_index < 0) {
        vu_blk_export_get_stats(n->user->exp, &x);
    }
    for (unsigned int i = 0; i < vb_nbd_num_exports(s); i++) {
        NbdExportStats ns;
        const char *id;
        VbNode *node;

        if (nbd_index >= 0 ? i != (unsigned int)nbd_index : device_level) {
            continue;
        }
        vb_nbd_export_stats(s, i, &id, &node, &ns);
        if (node == n) {
            vb_stats_add_nbd(&x, &ns);
        }
    }
    vb_stats_fill(st, &x);
    if (n->user && nbd_index < 0) {
        vb_stats_fill_histograms(st, n->user->exp);
    }
    if (device_level) {
        json_object_set_string_member(o, "device", "");
        json_object_set_string_member(o, "qdev", qdev);
    }
    json_object_set_string_member(o, "node-name", n->name);
    if (device_level) {
        BlockThrottleStats ts;

        /* An export's own: requests its throttle filter held back. */
        blk_throttle_get_stats(n->blk, &ts);
        json_object_set_int_member(st, "throttled", ts.throttled);
        json_object_set_int_member(st, "throttled-ns", ts.throttled_ns);
    }
    json_object_set_object_member(o, "stats", st);
    if (!n->no_storage) {
        JsonObject *ds = json_object_new();
        const VuBlkOpStats *un = &x.ops[VU_BLK_OP_DISCARD];

        json_object_set_string_member(ds, "driver", n->driver);
        json_object_set_int_member(ds, "discard-nb-ok", un->ops - un->failed);
        json_object_set_int_member(ds, "discard-nb-failed", un->failed);
        json_object_set_int_member(ds, "discard-bytes-ok", un->bytes);
        json_object_set_object_member(o, "driver-specific", ds);
    }
    return o;
}

static JsonNode *vb_qmp_query_blockstats(void *opaque, JsonObject *args,
                                         GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    bool nodes = false;
    JsonArray *arr;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_bool(&a, "query-nodes", &nodes, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    arr = json_array_new();
    for (guint i = 0; i < s->nodes->len; i++) {
        VbNode *n = g_ptr_array_index(s->nodes, i);

        /* Without query-nodes: what the guests and NBD clients use,
         * one entry per export ("qdev" is the export id). */
        if (nodes) {
            json_array_add_object_element(arr,
                                          vb_node_blockstats(s, n, NULL, -1));
        } else if (n->user) {
            json_array_add_object_element(arr,
                                          vb_node_blockstats(s, n,
                                                             n->user->id,
                                                             -1));
        }
    }
    for (unsigned int i = 0; !nodes && i < vb_nbd_num_exports(s); i++) {
        NbdExportStats ns;
        const char *id;
        VbNode *node;

        vb_nbd_export_stats(s, i, &id, &node, &ns);
        json_array_add_object_element(arr,
                                      vb_node_blockstats(s, node, id, i));
    }
    return vb_node_take_array(arr);
}

/*
 * block-latency-histogram-set, QEMU's: @id is an export id or the name of
 * a node an export serves.  Only @id: remove every histogram.
 * @boundaries: new empty histograms for every type, except those given
 * their own boundaries-TYPE, which wins.  Everything is checked before
 * anything changes.
 */
static JsonNode *vb_qmp_latency_histogram_set(void *opaque, JsonObject *args,
                                              GError **errp)
{
    static const char *const keys[VU_BLK_HIST__MAX] = {
        [VU_BLK_HIST_READ] = "boundaries-read",
        [VU_BLK_HIST_WRITE] = "boundaries-write",
        [VU_BLK_HIST_FLUSH] = "boundaries-flush",
        [VU_BLK_HIST_ZAP] = "boundaries-zap",
    };
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *id = NULL;
    g_autofree uint64_t *all = NULL;
    uint64_t *own[VU_BLK_HIST__MAX] = { 0 };
    unsigned int n_all = 0, n_own[VU_BLK_HIST__MAX] = { 0 };
    bool has_all = false, has_own[VU_BLK_HIST__MAX] = { 0 }, any;
    LatHist *h[VU_BLK_HIST__MAX] = { 0 };
    JsonNode *ret = NULL;
    VbExport *e;
    int t;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "id", true, &id, errp) ||
        !qmp_args_uint_list(&a, "boundaries", LAT_HIST_MAX_BOUNDARIES, &all,
                            &n_all, &has_all, errp)) {
        return NULL;
    }
    for (t = 0; t < VU_BLK_HIST__MAX; t++) {
        if (!qmp_args_uint_list(&a, keys[t], LAT_HIST_MAX_BOUNDARIES,
                                &own[t], &n_own[t], &has_own[t], errp)) {
            goto out;
        }
    }
    if (!qmp_args_check_done(&a, errp)) {
        goto out;
    }
    e = vb_export_find(s, id);
    if (!e) {
        VbNode *n = vb_node_find(s, id);

        e = n ? n->user : NULL;
    }
    if (!e) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_FOUND,
                    "Device '%s' not found (give an export id or the node "
                    "name of an export; query-block-exports lists them)", id);
        goto out;
    }
    any = has_all;
    for (t = 0; t < VU_BLK_HIST__MAX; t++) {
        const uint64_t *b = has_own[t] ? own[t] : all;
        unsigned int nb = has_own[t] ? n_own[t] : n_all;

        any |= has_own[t];
        if (has_own[t] || has_all) {
            h[t] = lat_hist_new(b, nb, has_own[t] ? keys[t] : "boundaries",
                                errp);
            if (!h[t]) {
                goto out;
            }
        }
    }
    for (t = 0; t < VU_BLK_HIST__MAX; t++) {
        /* Only @id: remove all; @boundaries: replace all; else only the
         * types given. */
        if (!any || has_all || has_own[t]) {
            vu_blk_export_set_latency_histogram(e->exp, t, h[t]);
        }
    }
    ret = vb_empty();
out:
    for (t = 0; t < VU_BLK_HIST__MAX; t++) {
        g_free(own[t]);
        lat_hist_free(h[t]);
    }
    return ret;
}

typedef struct VbEngineJob {
    AioContext *ctx;
    JsonArray *arr;
    const char *iothread;
} VbEngineJob;

/* In the iothread: one engine's counters. */
static void vb_engine_stats_one(void *opaque, const char *name,
                                const BlockEngineStats *st)
{
    VbEngineJob *job = opaque;
    JsonObject *o = json_object_new();

    json_object_set_string_member(o, "iothread", job->iothread);
    json_object_set_string_member(o, "engine", name);
    json_object_set_int_member(o, "requests", st->requests);
    json_object_set_int_member(o, "submit-syscalls", st->submit_syscalls);
    json_object_set_int_member(o, "completions", st->completions);
    json_object_set_int_member(o, "completions-direct",
                               st->completions_direct);
    json_object_set_int_member(o, "completions-bh", st->completions_bh);
    json_object_set_int_member(o, "bh-scheduled", st->bh_scheduled);
    json_object_set_int_member(o, "retries", st->retries);
    json_object_set_int_member(o, "bounced", st->bounced);
    json_object_set_int_member(o, "fua-writes", st->fua_writes);
    json_array_add_object_element(job->arr, o);
}

/* In the iothread: its engines' counters. */
static void vb_engine_stats_cb(void *opaque)
{
    VbEngineJob *job = opaque;

    blk_engine_foreach_stats(job->ctx, vb_engine_stats_one, job);
}

static JsonObject *vb_op_stats_json(const VuBlkOpStats *st)
{
    JsonObject *o = json_object_new();

    json_object_set_int_member(o, "operations", st->ops);
    json_object_set_int_member(o, "failed", st->failed);
    json_object_set_int_member(o, "bytes", st->bytes);
    json_object_set_int_member(o, "total-time-ns", st->total_ns);
    return o;
}

/* The fixed latency buckets of one request type (vendor command). */
static JsonObject *vb_fixed_hist_json(const uint64_t *bins)
{
    JsonObject *o = json_object_new();
    JsonArray *b = json_array_new(), *a = json_array_new();

    for (unsigned int i = 0; i < LAT_HIST_FIXED_FINITE; i++) {
        json_array_add_int_element(b, lat_hist_fixed_le_ns(i));
    }
    for (unsigned int i = 0; i < LAT_HIST_FIXED_BINS; i++) {
        json_array_add_int_element(a, bins[i]);
    }
    /* Upper bounds, inclusive: the last bin counts the rest. */
    json_object_set_array_member(o, "le-ns", b);
    json_object_set_array_member(o, "bins", a);
    return o;
}

static JsonNode *vb_qmp_x_query_stats(void *opaque, JsonObject *args,
                                      GError **errp)
{
    static const char *const op_names[VU_BLK_OP__MAX] = {
        [VU_BLK_OP_READ] = "read",
        [VU_BLK_OP_WRITE] = "write",
        [VU_BLK_OP_FLUSH] = "flush",
        [VU_BLK_OP_DISCARD] = "discard",
        [VU_BLK_OP_WRITE_ZEROES] = "write-zeroes",
        [VU_BLK_OP_OTHER] = "other",
    };
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    JsonObject *ret;
    JsonArray *exps, *engines;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    ret = json_object_new();
    exps = json_array_new();
    for (guint i = 0; i < s->exports->len; i++) {
        VbExport *e = g_ptr_array_index(s->exports, i);
        VuBlkExportStats x;
        JsonObject *o = json_object_new();
        JsonObject *ops = json_object_new();
        JsonArray *queues = json_array_new();

        vu_blk_export_get_stats(e->exp, &x);
        json_object_set_string_member(o, "id", e->id);
        json_object_set_string_member(o, "node-name", e->node->name);
        json_object_set_string_member(o, "socket",
                                      vu_blk_export_get_socket_path(e->exp));
        json_object_set_boolean_member(o, "connected",
                                       vu_blk_export_is_connected(e->exp));
        json_object_set_int_member(o, "sessions", x.sessions);
        json_object_set_int_member(o, "in-flight", x.inflight);
        json_object_set_int_member(o, "capacity-bytes",
                                   blk_getlength(e->node->blk));
        json_object_set_int_member(o, "config-change-messages",
                                   x.config_changes);
        json_object_set_int_member(o, "resubmitted", x.resubmitted);
        {
            BlockThrottleStats ts;
            ThrottleGroup *tg = blk_throttle_group(e->node->blk);

            blk_throttle_get_stats(e->node->blk, &ts);
            json_object_set_int_member(o, "throttled", ts.throttled);
            json_object_set_int_member(o, "throttled-ns", ts.throttled_ns);
            json_object_set_int_member(o, "throttle-waiting", ts.waiting);
            if (tg) {
                json_object_set_string_member(o, "throttle-group",
                                              throttle_group_name(tg));
            }
        }
        for (int op = 0; op < VU_BLK_OP__MAX; op++) {
            JsonObject *oo = vb_op_stats_json(&x.ops[op]);

            json_object_set_object_member(oo, "latency",
                                          vb_fixed_hist_json(x.lat_bins[op]));
            json_object_set_object_member(ops, op_names[op], oo);
        }
        json_object_set_object_member(o, "operations", ops);
        for (unsigned int q = 0; q < vu_blk_export_get_num_queues(e->exp);
             q++) {
            VuBlkQueueStats qs;
            JsonObject *qo = json_object_new();

            vu_blk_export_get_queue_stats(e->exp, q, &qs);
            json_object_set_int_member(qo, "index", q);
            json_object_set_boolean_member(qo, "running", qs.running);
            json_object_set_int_member(qo, "requests", qs.requests);
            json_object_set_int_member(qo, "completed", qs.completed);
            json_object_set_int_member(qo, "in-flight", qs.inflight);
            json_object_set_int_member(qo, "batches", qs.batches);
            json_object_set_int_member(qo, "kicks", qs.kicks);
            json_object_set_int_member(qo, "poll-hits", qs.poll_hits);
            json_object_set_int_member(qo, "budget-yields", qs.budget_yields);
            json_object_set_int_member(qo, "notifies", qs.notifies);
            json_object_set_int_member(qo, "notifies-suppressed",
                                       qs.notifies_suppressed);
            json_object_set_boolean_member(qo, "driver-polls",
                                           qs.driver_polls);
            json_array_add_object_element(queues, qo);
        }
        json_object_set_array_member(o, "queues", queues);
        json_array_add_object_element(exps, o);
    }
    json_object_set_array_member(ret, "exports", exps);
    /* NBD exports apart: no socket path, no virtqueues; their
     * connections instead. */
    exps = json_array_new();
    for (unsigned int i = 0; i < vb_nbd_num_exports(s); i++) {
        NbdExportStats ns;
        const char *id;
        VbNode *node;
        JsonObject *o = json_object_new();
        JsonObject *ops = json_object_new();

        vb_nbd_export_stats(s, i, &id, &node, &ns);
        json_object_set_string_member(o, "id", id);
        json_object_set_string_member(o, "node-name", node->name);
        json_object_set_int_member(o, "clients", ns.clients);
        json_object_set_int_member(o, "connections", ns.connections);
        json_object_set_int_member(o, "requests", ns.requests);
        json_object_set_int_member(o, "completed", ns.completed);
        json_object_set_int_member(o, "in-flight", ns.inflight);
        json_object_set_int_member(o, "capacity-bytes",
                                   blk_getlength(node->blk));
        for (int op = 0; op < VU_BLK_OP__MAX; op++) {
            JsonObject *oo = vb_op_stats_json(&ns.ops[op]);

            json_object_set_object_member(oo, "latency",
                                          vb_fixed_hist_json(ns.lat_bins[op]));
            json_object_set_object_member(ops, op_names[op], oo);
        }
        json_object_set_object_member(o, "operations", ops);
        json_array_add_object_element(exps, o);
    }
    json_object_set_array_member(ret, "nbd-exports", exps);

    engines = json_array_new();
    for (unsigned int i = 0; i < s->n_pool; i++) {
        g_autofree char *name = g_strdup_printf("pool%u", i);
        VbEngineJob job = {
            .ctx = iothread_get_aio_context(s->pool[i]),
            .arr = engines,
            .iothread = name,
        };

        iothread_run_sync(s->pool[i], vb_engine_stats_cb, &job);
    }
    for (guint i = 0; i < s->iothreads->len; i++) {
        VbIOThreadObj *t = g_ptr_array_index(s->iothreads, i);
        VbEngineJob job = {
            .ctx = iothread_get_aio_context(t->iothread),
            .arr = engines,
            .iothread = t->id,
        };

        iothread_run_sync(t->iothread, vb_engine_stats_cb, &job);
    }
    json_object_set_array_member(ret, "engines", engines);
    return vb_node_take_object(ret);
}


static const QmpCommand vb_query_commands[] = {
    { "query-named-block-nodes", vb_qmp_query_named_block_nodes },
    { "query-blockstats", vb_qmp_query_blockstats },
    { "block-latency-histogram-set", vb_qmp_latency_histogram_set },
    { "x-query-vhost-blk-stats", vb_qmp_x_query_stats },
};

void vb_query_register(GArray *table)
{
    g_array_append_vals(table, vb_query_commands,
                        G_N_ELEMENTS(vb_query_commands));
}
