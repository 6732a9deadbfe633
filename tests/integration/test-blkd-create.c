/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * blockdev-create (monitor/create.c) the way libvirt drives it for an
 * external snapshot (with -blockdev, every libvirt since 6.0), against a
 * running vhost-blkd serving a raw and then a qcow2 base to a vhost-user
 * front-end: blockdev-create driver=file, job-dismiss, blockdev-add of
 * the file, blockdev-create driver=qcow2 onto that node naming the base,
 * job-dismiss, blockdev-add of the overlay with backing=null,
 * blockdev-snapshot.  The guest's writes before and after read back, the
 * base stops changing, and qemu-img finds every created image as asked
 * (cluster size, backing file and format, virtual size) and clean.  The
 * jobs send QEMU's JOB_STATUS_CHANGE sequence and no BLOCK_JOB_* event.
 * Also the options (version, cluster size, refcount width, lazy
 * refcounts, compression type) with qemu-img's view of each, and the
 * refusals: a node in use, read-only or missing, unknown options, a
 * cluster size out of range, a backing format vhost-blkd cannot open, a
 * size that is no multiple of 512 (the job fails, as QEMU's).
 *
 * Needs qemu-img (scripts/install-deps.sh: qemu-utils).
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"
#include "vb-qmp.h"

#include <sys/wait.h>
#include <linux/virtio_blk.h>

#define IMG_SIZE (1u << 20)

typedef struct Fixture {
    VbDaemon d;
    VbQmp q;
    GPtrArray *events;          /* JsonNode *, every event so far */
    guint mark;                 /* statuses() looks from here on */
    VhostUserFrontend *fe;
    uint8_t *buf;               /* guest memory, IMG_SIZE bytes */
} Fixture;

/* ---- QMP with the events kept ------------------------------------------ */

static JsonNode *parse_line(const char *line)
{
    g_autoptr(JsonParser) p = json_parser_new();

    g_assert_true(json_parser_load_from_data(p, line, -1, NULL));
    return json_node_copy(json_parser_get_root(p));
}

static JsonNode *qmp(Fixture *f, const char *cmd, char **err)
{
    g_autofree char *msg = g_strdup_printf("%s\n", cmd);

    g_assert_cmpint(write(f->q.fd, msg, strlen(msg)), ==, strlen(msg));
    for (;;) {
        g_autofree char *line = vb_qmp_line(&f->q);
        JsonNode *n = parse_line(line);
        JsonObject *o = json_node_get_object(n);
        JsonNode *ret;

        if (json_object_has_member(o, "event")) {
            g_ptr_array_add(f->events, n);
            continue;
        }
        if (json_object_has_member(o, "return")) {
            ret = json_node_copy(json_object_get_member(o, "return"));
            json_node_unref(n);
            return ret;
        }
        if (!err) {
            g_error("QMP %s failed: %s", cmd, line);
        }
        *err = g_strdup(json_object_get_string_member(
            json_object_get_object_member(o, "error"), "desc"));
        json_node_unref(n);
        return NULL;
    }
}

static void G_GNUC_PRINTF(2, 3) qmp_ok(Fixture *f, const char *fmt, ...)
{
    va_list ap;
    g_autofree char *cmd = NULL;

    va_start(ap, fmt);
    cmd = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    json_node_unref(qmp(f, cmd, NULL));
}

static void G_GNUC_PRINTF(3, 4) qmp_fails(Fixture *f, const char *desc,
                                          const char *fmt, ...)
{
    va_list ap;
    g_autofree char *cmd = NULL;
    g_autofree char *err = NULL;

    va_start(ap, fmt);
    cmd = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_assert_null(qmp(f, cmd, &err));
    g_assert_cmpstr(err, ==, desc);
}

/* The JOB_STATUS_CHANGE statuses of @id since f->mark, joined with ' '
 * (a job id may be used again once the job is dismissed). */
static char *statuses(Fixture *f, const char *id)
{
    GString *s = g_string_new(NULL);

    for (guint i = f->mark; i < f->events->len; i++) {
        JsonObject *o = json_node_get_object(g_ptr_array_index(f->events, i));
        JsonObject *d;

        if (strcmp(json_object_get_string_member(o, "event"),
                   "JOB_STATUS_CHANGE")) {
            continue;
        }
        d = json_object_get_object_member(o, "data");
        if (!strcmp(json_object_get_string_member(d, "id"), id)) {
            g_string_append_printf(s, "%s%s", s->len ? " " : "",
                                   json_object_get_string_member(d,
                                                                 "status"));
        }
    }
    return g_string_free(s, false);
}

/* Read events until @id reports @status. */
static void wait_status(Fixture *f, const char *id, const char *status)
{
    for (;;) {
        g_autofree char *st = statuses(f, id);

        if (g_str_has_suffix(st, status)) {
            return;
        }
        {
            g_autofree char *line = vb_qmp_line(&f->q);

            g_ptr_array_add(f->events, parse_line(line));
        }
    }
}

/* No event but JOB_STATUS_CHANGE came (a create job is no block job). */
static void assert_no_block_job_events(Fixture *f)
{
    for (guint i = 0; i < f->events->len; i++) {
        JsonObject *o = json_node_get_object(g_ptr_array_index(f->events, i));
        const char *name = json_object_get_string_member(o, "event");

        g_assert_false(g_str_has_prefix(name, "BLOCK_JOB_"));
    }
}

/* query-jobs' entry of @id (a new reference), or NULL. */
static JsonObject *query_job(Fixture *f, const char *id)
{
    g_autoptr(JsonNode) r = qmp(f, "{\"execute\":\"query-jobs\"}", NULL);
    JsonArray *a = json_node_get_array(r);

    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *o = json_array_get_object_element(a, i);

        if (!strcmp(json_object_get_string_member(o, "id"), id)) {
            return json_object_ref(o);
        }
    }
    return NULL;
}

/*
 * blockdev-create with @options as job @id; waits until it concluded,
 * checks QEMU's statuses and query-jobs, dismisses it.  NULL if it
 * succeeded, else its error (query-jobs').
 */
static char *create(Fixture *f, const char *id, const char *options)
{
    g_autoptr(JsonObject) j = NULL;
    g_autoptr(JsonNode) blk_jobs = NULL;
    g_autofree char *st = NULL;
    char *err = NULL;

    f->mark = f->events->len;
    qmp_ok(f, "{\"execute\": \"blockdev-create\", \"arguments\": "
           "{\"job-id\": \"%s\", \"options\": %s}}", id, options);
    wait_status(f, id, "concluded");
    j = query_job(f, id);
    g_assert_nonnull(j);
    g_assert_cmpstr(json_object_get_string_member(j, "type"), ==, "create");
    g_assert_cmpstr(json_object_get_string_member(j, "status"), ==,
                    "concluded");
    if (json_object_has_member(j, "error")) {
        err = g_strdup(json_object_get_string_member(j, "error"));
    }
    /* Not a block job. */
    blk_jobs = qmp(f, "{\"execute\":\"query-block-jobs\"}", NULL);
    g_assert_cmpint(json_array_get_length(json_node_get_array(blk_jobs)), ==,
                    0);
    qmp_ok(f, "{\"execute\": \"job-dismiss\", \"arguments\": {\"id\": "
           "\"%s\"}}", id);
    wait_status(f, id, "null");
    st = statuses(f, id);
    g_assert_cmpstr(st, ==, err ?
                    "created running aborting concluded null" :
                    "created running waiting pending concluded null");
    g_assert_null(query_job(f, id));
    assert_no_block_job_events(f);
    return err;
}

static void create_ok(Fixture *f, const char *id, const char *options)
{
    g_autofree char *err = create(f, id, options);

    g_assert_null(err);
}

/* ---- qemu-img's view ----------------------------------------------------- */

/* qemu-img info of @img (-U: the daemon may hold it). */
static JsonObject *img_info(const char *img)
{
    g_autofree char *out = NULL;
    g_autoptr(JsonParser) p = json_parser_new();

    g_assert_cmpint(vb_sh_status(&out, "qemu-img info -U --output=json "
                                 "'%s'", img), ==, 0);
    g_assert_true(json_parser_load_from_data(p, out, -1, NULL));
    return json_object_ref(json_node_get_object(json_parser_get_root(p)));
}

static void check_clean(const char *img)
{
    g_autofree char *out = NULL;
    int st = vb_sh_status(&out, "qemu-img check -U '%s'", img);

    if (st) {
        g_error("qemu-img check %s: exit %d\n%s", img, st, out);
    }
}

/* @img is a qcow2 image of @size bytes with @cluster-byte clusters
 * naming @backing (NULL: none) of format @fmt, and clean if @check (an
 * image a running daemon writes has the clusters it reserved for writes
 * allocated: leaks until it closes the image).  Its format-specific
 * data. */
static JsonObject *check_qcow2(const char *img, uint64_t size,
                               uint64_t cluster, const char *backing,
                               const char *fmt, bool check)
{
    g_autoptr(JsonObject) o = img_info(img);
    JsonObject *spec;

    g_assert_cmpstr(json_object_get_string_member(o, "format"), ==, "qcow2");
    g_assert_cmpint(json_object_get_int_member(o, "virtual-size"), ==, size);
    g_assert_cmpint(json_object_get_int_member(o, "cluster-size"), ==,
                    cluster);
    if (backing) {
        g_assert_cmpstr(json_object_get_string_member(o, "backing-filename"),
                        ==, backing);
        g_assert_cmpstr(json_object_get_string_member(
                            o, "backing-filename-format"), ==, fmt);
    } else {
        g_assert_false(json_object_has_member(o, "backing-filename"));
    }
    if (check) {
        check_clean(img);
    }
    spec = json_object_get_object_member(
        json_object_get_object_member(o, "format-specific"), "data");
    return json_object_ref(spec);
}

/* ---- the daemon ---------------------------------------------------------- */

static char *path_in(Fixture *f, const char *name)
{
    return g_strdup_printf("%s/%s", f->d.dir, name);
}

/* Start the daemon with @blockdevs (NULL-terminated --blockdev values),
 * and, if @node, a vhost-user export of it on vm.sock with a front-end
 * connected. */
static void start(Fixture *f, const char *const *blockdevs, const char *node)
{
    g_autofree char *qmp_path = path_in(f, "qmp.sock");
    g_autofree char *sock = path_in(f, "vm.sock");
    g_autofree char *chardev = g_strdup_printf(
        "socket,id=mon,path=%s,server=on,wait=off", qmp_path);
    g_autofree char *exp = g_strdup_printf(
        "type=vhost-user-blk,id=e1,node-name=%s,addr.type=unix,"
        "addr.path=%s,writable=on", node ? node : "", sock);
    g_autoptr(GError) err = NULL;
    VhostUserFrontendOptions o = { .num_queues = 1,
                                   .connect_timeout_ms = 10000 };
    g_autoptr(GPtrArray) args = g_ptr_array_new();

    for (int i = 0; blockdevs[i]; i++) {
        g_ptr_array_add(args, (char *)"--blockdev");
        g_ptr_array_add(args, (char *)blockdevs[i]);
    }
    if (node) {
        g_ptr_array_add(args, (char *)"--export");
        g_ptr_array_add(args, exp);
    }
    g_ptr_array_add(args, (char *)"--chardev");
    g_ptr_array_add(args, chardev);
    g_ptr_array_add(args, (char *)"--monitor");
    g_ptr_array_add(args, (char *)"chardev=mon");
    g_ptr_array_add(args, NULL);
    f->d.args = (const char *const *)args->pdata;
    vb_daemon_start(&f->d);
    f->d.args = NULL;
    vb_qmp_connect(&f->q, qmp_path, &f->d);
    if (!node) {
        return;
    }
    o.socket_path = sock;
    f->fe = vhost_user_frontend_new(&o, &err);
    g_assert_no_error(err);
    vb_start(f->fe);
    f->buf = vhost_user_frontend_mem_alloc(f->fe, IMG_SIZE, 4096, &err);
    g_assert_no_error(err);
}

static void fixture_init(Fixture *f)
{
    VbExportSpec spec = { .size = IMG_SIZE };

    memset(f, 0, sizeof(*f));
    f->events = g_ptr_array_new_with_free_func(
        (GDestroyNotify)json_node_unref);
    vb_daemon_init(&f->d, 1, &spec);
}

static void fixture_stop(Fixture *f)
{
    int status;

    if (f->fe) {
        vhost_user_frontend_free(f->fe);
        f->fe = NULL;
    }
    vb_qmp_close(&f->q);
    g_assert_cmpint(kill(f->d.pid, SIGTERM), ==, 0);
    g_assert_cmpint(waitpid(f->d.pid, &status, 0), ==, f->d.pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    f->d.pid = 0;
}

static void fixture_cleanup(Fixture *f)
{
    vb_sh("rm -f '%s'/*.qcow2 '%s'/*.raw '%s'/*.img", f->d.dir, f->d.dir,
          f->d.dir);
    vb_daemon_cleanup(&f->d);
    g_ptr_array_unref(f->events);
}

static void guest_rw(Fixture *f, bool write, uint64_t off, size_t len)
{
    g_assert_cmpint(vb_req(f->fe, 0, write ? VIRTIO_BLK_T_OUT :
                           VIRTIO_BLK_T_IN, off / 512, f->buf + off, len,
                           !write, NULL), ==, VIRTIO_BLK_S_OK);
}

static void guest_flush(Fixture *f)
{
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
}

static char *checksum(const char *path)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *data = NULL;
    gsize n;

    if (!g_file_get_contents(path, &data, &n, &err)) {
        g_error("%s", err->message);
    }
    return g_compute_checksum_for_data(G_CHECKSUM_SHA256, (guchar *)data, n);
}

/* ---- libvirt's external snapshot ---------------------------------------- */

/*
 * The base (@fmt raw or qcow2) is exported; libvirt's sequence makes an
 * overlay for it and moves the guest there.
 */
static void test_libvirt(gconstpointer data)
{
    const char *fmt = data;
    bool raw = !strcmp(fmt, "raw");
    Fixture *f = g_new0(Fixture, 1);
    g_autofree char *base = NULL, *snap = NULL, *fdef = NULL;
    g_autofree char *opts = NULL, *sum = NULL, *sum2 = NULL;
    g_autoptr(JsonObject) spec = NULL;
    g_autoptr(JsonObject) finfo = NULL;

    fixture_init(f);
    base = path_in(f, raw ? "base.raw" : "base.qcow2");
    snap = path_in(f, "vm.snap1");
    if (raw) {
        vb_sh("truncate -s %u '%s'", IMG_SIZE, base);
    } else {
        vb_sh("qemu-img create -q -f qcow2 '%s' %u", base, IMG_SIZE);
    }
    fdef = g_strdup_printf("driver=file,node-name=libvirt-1-storage,"
                           "filename=%s", base);
    {
        const char *bd[] = { fdef, "driver=qcow2,node-name=libvirt-1-format,"
                             "file=libvirt-1-storage", NULL };

        if (raw) {
            bd[1] = NULL;
        }
        start(f, bd, raw ? "libvirt-1-storage" : "libvirt-1-format");
    }
    /* The guest writes before the snapshot. */
    vb_fill_pattern(f->buf, 65536, 1);
    guest_rw(f, true, 0, 65536);
    guest_flush(f);

    /* 1. The file, 2. its node. */
    opts = g_strdup_printf("{\"driver\": \"file\", \"filename\": \"%s\", "
                           "\"size\": 0}", snap);
    create_ok(f, "create-libvirt-3-storage", opts);
    finfo = img_info(snap);
    g_assert_cmpstr(json_object_get_string_member(finfo, "format"), ==,
                    "raw");
    g_assert_cmpint(json_object_get_int_member(finfo, "virtual-size"), ==,
                    0);
    qmp_ok(f, "{\"execute\": \"blockdev-add\", \"arguments\": {\"driver\": "
           "\"file\", \"node-name\": \"libvirt-3-storage\", \"filename\": "
           "\"%s\"}}", snap);

    /* 3. The qcow2 image onto it, naming the base. */
    g_free(opts);
    opts = g_strdup_printf("{\"driver\": \"qcow2\", \"file\": "
                           "\"libvirt-3-storage\", \"size\": %u, "
                           "\"backing-file\": \"%s\", \"backing-fmt\": "
                           "\"%s\"}", IMG_SIZE, base, fmt);
    create_ok(f, "create-libvirt-3-format", opts);
    g_clear_pointer(&spec, json_object_unref);
    spec = check_qcow2(snap, IMG_SIZE, 65536, base, fmt, true);
    g_assert_cmpstr(json_object_get_string_member(spec, "compat"), ==,
                    "1.1");

    /* 4. The overlay's node, then the snapshot. */
    qmp_ok(f, "{\"execute\": \"blockdev-add\", \"arguments\": {\"driver\": "
           "\"qcow2\", \"node-name\": \"libvirt-3-format\", \"file\": "
           "\"libvirt-3-storage\", \"backing\": null}}");
    /* Now in use by a format node: no create onto it. */
    qmp_fails(f, "Node 'libvirt-3-storage' is in use by another node (a "
              "format or filter over it): creating an image on it would "
              "overwrite what its users read; remove that user first, or "
              "create on a new node",
              "{\"execute\": \"blockdev-create\", \"arguments\": "
              "{\"job-id\": \"again\", \"options\": %s}}", opts);
    qmp_ok(f, "{\"execute\": \"blockdev-snapshot\", \"arguments\": "
           "{\"node\": \"%s\", \"overlay\": \"libvirt-3-format\"}}",
           raw ? "libvirt-1-storage" : "libvirt-1-format");
    sum = checksum(base);

    /* The guest writes after it: into the overlay; it reads both. */
    vb_fill_pattern(f->buf + 65536, 65536, 2);
    guest_rw(f, true, 65536, 65536);
    guest_flush(f);
    memset(f->buf, 0, 131072);
    guest_rw(f, false, 0, 131072);
    g_assert_true(vb_check_pattern(f->buf, 65536, 1));
    g_assert_true(vb_check_pattern(f->buf + 65536, 65536, 2));
    sum2 = checksum(base);
    g_assert_cmpstr(sum, ==, sum2);
    g_clear_pointer(&spec, json_object_unref);
    spec = check_qcow2(snap, IMG_SIZE, 65536, base, fmt, false);
    fixture_stop(f);
    check_clean(snap);
    fixture_cleanup(f);
    g_free(f);
}

/* ---- the options ------------------------------------------------------- */

typedef struct OptCase {
    const char *extra;          /* more qcow2 options, JSON members */
    uint64_t cluster;
    const char *compat;
    int refcount_bits;
    bool lazy;
    const char *compression;    /* NULL: not shown (v2) */
} OptCase;

static const OptCase opt_cases[] = {
    { "", 65536, "1.1", 16, false, "zlib" },
    { ", \"cluster-size\": 4096", 4096, "1.1", 16, false, "zlib" },
    { ", \"cluster-size\": 512, \"refcount-bits\": 64", 512, "1.1", 64,
      false, "zlib" },
    { ", \"cluster-size\": 2097152, \"refcount-bits\": 1", 2097152, "1.1",
      1, false, "zlib" },
    { ", \"version\": \"v2\"", 65536, "0.10", 16, false, NULL },
    { ", \"lazy-refcounts\": true, \"refcount-bits\": 8", 65536, "1.1", 8,
      true, "zlib" },
    { ", \"compression-type\": \"zstd\", \"cluster-size\": 16384", 16384,
      "1.1", 16, false, "zstd" },
};

static void test_options(void)
{
    Fixture *f = g_new0(Fixture, 1);
    const char *bd[] = { NULL };

    fixture_init(f);
    start(f, bd, NULL);
    for (guint i = 0; i < G_N_ELEMENTS(opt_cases); i++) {
        const OptCase *c = &opt_cases[i];
        g_autofree char *img = g_strdup_printf("%s/opt%u.qcow2", f->d.dir, i);
        g_autofree char *opts = NULL;
        g_autoptr(JsonObject) spec = NULL;
        /* A large disk: L1 and refcount blocks of several clusters. */
        uint64_t size = i == 2 ? (1ull << 30) : (64ull << 30);

        opts = g_strdup_printf("{\"driver\": \"file\", \"filename\": \"%s\", "
                               "\"size\": 0}", img);
        create_ok(f, "f", opts);
        qmp_ok(f, "{\"execute\": \"blockdev-add\", \"arguments\": "
               "{\"driver\": \"file\", \"node-name\": \"n%u\", "
               "\"filename\": \"%s\"}}", i, img);
        g_free(opts);
        opts = g_strdup_printf("{\"driver\": \"qcow2\", \"file\": \"n%u\", "
                               "\"size\": %" PRIu64 "%s}", i, size,
                               c->extra);
        create_ok(f, "q", opts);
        spec = check_qcow2(img, size, c->cluster, NULL, NULL, true);
        g_assert_cmpstr(json_object_get_string_member(spec, "compat"), ==,
                        c->compat);
        g_assert_cmpint(json_object_get_int_member(spec, "refcount-bits"),
                        ==, c->refcount_bits);
        if (c->compression) {
            g_assert_cmpstr(json_object_get_string_member(
                                spec, "compression-type"), ==,
                            c->compression);
            g_assert_cmpint(json_object_get_boolean_member(
                                spec, "lazy-refcounts"), ==, c->lazy);
        }
        /* vhost-blkd opens what it made, and writes to it. */
        qmp_ok(f, "{\"execute\": \"blockdev-add\", \"arguments\": "
               "{\"driver\": \"qcow2\", \"node-name\": \"q%u\", "
               "\"file\": \"n%u\"}}", i, i);
        qmp_ok(f, "{\"execute\": \"blockdev-del\", \"arguments\": "
               "{\"node-name\": \"q%u\"}}", i);
        qmp_ok(f, "{\"execute\": \"blockdev-del\", \"arguments\": "
               "{\"node-name\": \"n%u\"}}", i);
        check_clean(img);
    }
    fixture_stop(f);
    fixture_cleanup(f);
    g_free(f);
}

/* ---- refusals ------------------------------------------------------------ */

static void test_refused(void)
{
    Fixture *f = g_new0(Fixture, 1);
    g_autofree char *img = NULL, *ro = NULL, *fdef = NULL, *rodef = NULL;
    g_autofree char *used = NULL, *usedef = NULL, *opts = NULL;
    g_autofree char *err = NULL;

    fixture_init(f);
    img = path_in(f, "new.img");
    ro = path_in(f, "ro.img");
    used = path_in(f, "used.img");
    vb_sh("truncate -s %u '%s' '%s' '%s'", IMG_SIZE, img, ro, used);
    fdef = g_strdup_printf("driver=file,node-name=n,filename=%s", img);
    rodef = g_strdup_printf("driver=file,node-name=ro,filename=%s,"
                            "read-only=on", ro);
    usedef = g_strdup_printf("driver=file,node-name=used,filename=%s", used);
    {
        const char *bd[] = { fdef, rodef, usedef, NULL };

        start(f, bd, "used");
    }
#define CREATE_QCOW2(node, extra) \
    "{\"execute\": \"blockdev-create\", \"arguments\": {\"job-id\": \"j\", " \
    "\"options\": {\"driver\": \"qcow2\", \"file\": \"" node "\", " \
    "\"size\": 1048576" extra "}}}"

    qmp_fails(f, "Node 'used' is in use by an export: creating an image on "
              "it would overwrite what its users read; remove that user "
              "first, or create on a new node", CREATE_QCOW2("used", ""));
    qmp_fails(f, "Block node is read-only: node 'ro' was added with "
              "read-only=on; add it without to create an image on it",
              CREATE_QCOW2("ro", ""));
    qmp_fails(f, "Cannot find device='nope' nor node-name='nope'",
              CREATE_QCOW2("nope", ""));
    qmp_fails(f, "Parameter 'options.bogus' is unexpected",
              CREATE_QCOW2("n", ", \"bogus\": 1"));
    qmp_fails(f, "Cluster size must be a power of two between 512 and "
              "2048k", CREATE_QCOW2("n", ", \"cluster-size\": 4194304"));
    qmp_fails(f, "Cluster size must be a power of two between 512 and "
              "2048k", CREATE_QCOW2("n", ", \"cluster-size\": 3000"));
    qmp_fails(f, "Refcount width must be a power of two and may not exceed "
              "64 bits", CREATE_QCOW2("n", ", \"refcount-bits\": 128"));
    qmp_fails(f, "Lazy refcounts only supported with compatibility level "
              "1.1 and above (use version=v3 or greater)",
              CREATE_QCOW2("n", ", \"version\": \"v2\", "
                           "\"lazy-refcounts\": true"));
    qmp_fails(f, "backing-fmt=vmdk: vhost-blkd cannot open such a backing "
              "file (raw and qcow2 only); convert it with qemu-img convert "
              "-O qcow2",
              CREATE_QCOW2("n", ", \"backing-file\": \"/x\", "
                           "\"backing-fmt\": \"vmdk\""));
    qmp_fails(f, "Backing format cannot be used without backing file",
              CREATE_QCOW2("n", ", \"backing-fmt\": \"raw\""));
    qmp_fails(f, "extended-l2=true is not supported: vhost-blkd cannot open "
              "images with subclusters; leave it off",
              CREATE_QCOW2("n", ", \"extended-l2\": true"));
    qmp_fails(f, "Parameter 'options.size' is missing",
              "{\"execute\": \"blockdev-create\", \"arguments\": "
              "{\"job-id\": \"j\", \"options\": {\"driver\": \"qcow2\", "
              "\"file\": \"n\"}}}");
    qmp_fails(f, "Driver does not support blockdev-create: vhost-blkd "
              "creates images with driver=file and driver=qcow2 only "
              "('null-co' given)",
              "{\"execute\": \"blockdev-create\", \"arguments\": "
              "{\"job-id\": \"j\", \"options\": {\"driver\": \"null-co\", "
              "\"size\": 0}}}");
    qmp_fails(f, "Unsupported preallocation mode: metadata (a raw file has "
              "none: use off, falloc or full)",
              "{\"execute\": \"blockdev-create\", \"arguments\": "
              "{\"job-id\": \"j\", \"options\": {\"driver\": \"file\", "
              "\"filename\": \"%s\", \"size\": 0, \"preallocation\": "
              "\"metadata\"}}}", img);
    g_free(opts);
    opts = g_strdup_printf("'%s' is the image of node 'used': creating it "
                           "would truncate it under its users; blockdev-del "
                           "the node first, or create another file", used);
    qmp_fails(f, opts,
              "{\"execute\": \"blockdev-create\", \"arguments\": "
              "{\"job-id\": \"j\", \"options\": {\"driver\": \"file\", "
              "\"filename\": \"%s\", \"size\": 0}}}", used);
    g_assert_null(query_job(f, "j"));

    /* As QEMU's: accepted, and the job fails. */
    err = create(f, "j", "{\"driver\": \"qcow2\", \"file\": \"n\", "
                 "\"size\": 1000}");
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err, "Image size must be a non-zero multiple "
                            "of 512 bytes (1000 given)"));

    /* A driver=raw node over n: n is its file, so no create onto n; onto
     * the raw node (the same image) it goes. */
    qmp_ok(f, "{\"execute\": \"blockdev-add\", \"arguments\": "
           "{\"driver\": \"raw\", \"node-name\": \"r\", \"file\": "
           "\"n\"}}");
    qmp_fails(f, "Node 'n' is in use by another node (a format or filter "
              "over it): creating an image on it would overwrite what its "
              "users read; remove that user first, or create on a new node",
              CREATE_QCOW2("n", ""));
    create_ok(f, "j", "{\"driver\": \"qcow2\", \"file\": \"r\", "
              "\"size\": 1048576}");
    g_clear_pointer(&err, g_free);
    {
        g_autoptr(JsonObject) spec = check_qcow2(img, 1048576, 65536, NULL,
                                                 NULL, true);
    }
    fixture_stop(f);
    fixture_cleanup(f);
    g_free(f);
}

/* ---- block-commit naming implicit nodes ---------------------------------- */

/* The byte of @path at @off. */
static uint8_t byte_at(const char *path, uint64_t off)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *data = NULL;
    gsize n;

    if (!g_file_get_contents(path, &data, &n, &err)) {
        g_error("%s", err->message);
    }
    g_assert_cmpuint(off, <, n);
    return data[off];
}

/*
 * A chain opened from the images' headers (top -> mid -> base.raw): the
 * images below the node have no node-name of their own, and
 * query-named-block-nodes lists them under names of the form
 * "#NODE-backingK" (QEMU's implicit nodes).  block-commit takes those
 * names for top-node and base-node, as QEMU takes its implicit nodes'.
 */
static void test_commit_implicit(void)
{
    Fixture *f = g_new0(Fixture, 1);
    g_autofree char *base = NULL, *mid = NULL, *top = NULL, *fdef = NULL;
    g_autoptr(JsonNode) nodes = NULL;
    g_autoptr(JsonObject) info = NULL;
    g_autofree char *names = NULL;
    GString *ns = g_string_new(NULL);
    JsonArray *arr;

    fixture_init(f);
    base = path_in(f, "base.raw");
    mid = path_in(f, "mid.qcow2");
    top = path_in(f, "top.qcow2");
    vb_sh("truncate -s %u '%s' && cd '%s' && "
          "qemu-img create -q -f qcow2 -b base.raw -F raw mid.qcow2 %u && "
          "qemu-io -c 'write -P 0x11 0 64k' mid.qcow2 >/dev/null && "
          "qemu-img create -q -f qcow2 -b mid.qcow2 -F qcow2 top.qcow2 %u",
          IMG_SIZE, base, f->d.dir, IMG_SIZE, IMG_SIZE);
    fdef = g_strdup_printf("driver=file,node-name=tf,filename=%s", top);
    {
        const char *bd[] = { fdef, "driver=qcow2,node-name=top,file=tf",
                             NULL };

        start(f, bd, "top");
    }
    /* The names the implicit nodes go by. */
    nodes = qmp(f, "{\"execute\": \"query-named-block-nodes\"}", NULL);
    arr = json_node_get_array(nodes);
    for (guint i = 0; i < json_array_get_length(arr); i++) {
        g_string_append_printf(ns, "%s ", json_object_get_string_member(
            json_array_get_object_element(arr, i), "node-name"));
    }
    names = g_string_free(ns, false);
    g_assert_nonnull(strstr(names, "#top-backing1 "));
    g_assert_nonnull(strstr(names, "#top-backing2 "));

    /* A file node is no image of the chain; a level that does not
     * exist is no node. */
    qmp_fails(f, "Can't find '#top-backing1-file' in the backing chain of "
              "'top'",
              "{\"execute\": \"block-commit\", \"arguments\": {\"device\": "
              "\"top\", \"job-id\": \"c\", \"top-node\": \"#top-backing1\", "
              "\"base-node\": \"#top-backing1-file\"}}");
    qmp_fails(f, "Cannot find device='#top-backing3' nor "
              "node-name='#top-backing3'",
              "{\"execute\": \"block-commit\", \"arguments\": {\"device\": "
              "\"top\", \"job-id\": \"c\", \"top-node\": \"#top-backing1\", "
              "\"base-node\": \"#top-backing3\"}}");
    /* mid into base.raw: the chain becomes top -> base.raw. */
    f->mark = f->events->len;
    qmp_ok(f, "{\"execute\": \"block-commit\", \"arguments\": {\"device\": "
           "\"top\", \"job-id\": \"c\", \"top-node\": \"#top-backing1\", "
           "\"base-node\": \"#top-backing2\"}}");
    wait_status(f, "c", "null");
    {
        g_autofree char *st = statuses(f, "c");

        g_assert_cmpstr(st, ==, "created running waiting pending concluded "
                        "null");
    }
    g_assert_cmpint(byte_at(base, 0), ==, 0x11);
    g_assert_cmpint(byte_at(base, 65535), ==, 0x11);
    g_assert_cmpint(byte_at(base, 65536), ==, 0);
    info = img_info(top);
    g_assert_cmpstr(json_object_get_string_member(info, "backing-filename"),
                    ==, "base.raw");
    /* The guest reads what mid held, now from base.raw. */
    memset(f->buf, 0, 4096);
    guest_rw(f, false, 0, 4096);
    for (int i = 0; i < 4096; i++) {
        g_assert_cmpint(f->buf[i], ==, 0x11);
    }
    fixture_stop(f);
    check_clean(top);
    fixture_cleanup(f);
    g_free(f);
}

int main(int argc, char **argv)
{
    g_autofree char *qemu_img = NULL;

    g_test_init(&argc, &argv, NULL);
    qemu_img = g_find_program_in_path("qemu-img");
    if (!qemu_img) {
        g_test_skip("qemu-img is needed (qemu-utils)");
        return 0;
    }
    g_test_add_data_func("/create/libvirt/raw", "raw", test_libvirt);
    g_test_add_data_func("/create/libvirt/qcow2", "qcow2", test_libvirt);
    g_test_add_func("/create/options", test_options);
    g_test_add_func("/create/refused", test_refused);
    g_test_add_func("/create/commit-implicit-nodes", test_commit_implicit);
    return g_test_run();
}
