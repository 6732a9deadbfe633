/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Live external snapshots over QMP (monitor/jobs.c): blockdev-snapshot
 * of an exported qcow2 node onto an overlay added with backing=null, and
 * blockdev-snapshot-sync of an exported raw file node (mode=existing,
 * then mode=absolute-paths on top: the daemon creates the overlay file),
 * while a vhost-user front-end writes before and after.  The guest keeps
 * its connection and sees everything it wrote; after the snapshot its
 * writes land in the overlay and the old image does not change (its
 * checksum); qemu-img sees the chain and finds both images clean.  A
 * writer thread that keeps writing while the snapshot is taken loses
 * nothing.  The refusals carry QEMU's messages.
 *
 * Needs qemu-img (scripts/install-deps.sh: qemu-utils).
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"
#include "vb-qmp.h"

#include <pthread.h>
#include <sys/wait.h>
#include <linux/virtio_blk.h>

#define IMG_SIZE (1u << 20)

typedef struct Snap {
    VbDaemon d;
    VbQmp m;
    VhostUserFrontend *fe;
    uint8_t *buf;               /* guest memory, IMG_SIZE bytes */
    uint8_t expect[IMG_SIZE];   /* what the guest wrote */
} Snap;


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

/* @path's contents still have the checksum @sum. */
static void assert_checksum(const char *path, const char *sum)
{
    g_autofree char *now = checksum(path);

    g_assert_cmpstr(now, ==, sum);
}

static char *path_in(Snap *t, const char *name)
{
    return g_strdup_printf("%s/%s", t->d.dir, name);
}

/* Start the daemon with @blockdevs (NULL-terminated --blockdev values)
 * and a vhost-user export "e1" of node @node on vm.sock, connect to it
 * and to the monitor. */
static void snap_start(Snap *t, const char *const *blockdevs,
                       const char *node)
{
    g_autofree char *qmp_path = path_in(t, "qmp.sock");
    g_autofree char *sock = path_in(t, "vm.sock");
    g_autofree char *chardev = g_strdup_printf(
        "socket,id=mon,path=%s,server=on,wait=off", qmp_path);
    g_autofree char *exp = g_strdup_printf(
        "type=vhost-user-blk,id=e1,node-name=%s,addr.type=unix,"
        "addr.path=%s,writable=on,num-queues=2", node, sock);
    g_autoptr(GError) err = NULL;
    VhostUserFrontendOptions o = { .num_queues = 2,
                                   .connect_timeout_ms = 10000 };
    g_autoptr(GPtrArray) args = g_ptr_array_new();

    for (int i = 0; blockdevs[i]; i++) {
        g_ptr_array_add(args, (char *)"--blockdev");
        g_ptr_array_add(args, (char *)blockdevs[i]);
    }
    g_ptr_array_add(args, (char *)"--export");
    g_ptr_array_add(args, exp);
    g_ptr_array_add(args, (char *)"--chardev");
    g_ptr_array_add(args, chardev);
    g_ptr_array_add(args, (char *)"--monitor");
    g_ptr_array_add(args, (char *)"chardev=mon");
    g_ptr_array_add(args, NULL);
    t->d.args = (const char *const *)args->pdata;
    vb_daemon_start(&t->d);
    t->d.args = NULL;
    vb_qmp_connect(&t->m, qmp_path, &t->d);
    o.socket_path = sock;
    t->fe = vhost_user_frontend_new(&o, &err);
    g_assert_no_error(err);
    vb_start(t->fe);
    t->buf = vhost_user_frontend_mem_alloc(t->fe, IMG_SIZE, 4096, &err);
    g_assert_no_error(err);
}

/* Guest request on queue @q at byte @off of @len bytes of t->buf + @off. */
static void guest_rw(Snap *t, unsigned int q, bool write, uint64_t off,
                     size_t len)
{
    g_assert_cmpint(vb_req(t->fe, q, write ? VIRTIO_BLK_T_OUT :
                           VIRTIO_BLK_T_IN, off / 512, t->buf + off, len,
                           !write, NULL), ==, VIRTIO_BLK_S_OK);
}

/* The guest writes pattern @seed at [@off, @off + @len) (sectors). */
static void guest_write(Snap *t, uint64_t off, size_t len, uint32_t seed)
{
    vb_fill_pattern(t->buf + off, len, seed);
    memcpy(t->expect + off, t->buf + off, len);
    guest_rw(t, 0, true, off, len);
}

static void guest_flush(Snap *t)
{
    g_assert_cmpint(vb_req(t->fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
}

/* Everything the guest reads is what it wrote. */
static void guest_verify(Snap *t)
{
    memset(t->buf, 0xee, IMG_SIZE);
    for (uint64_t off = 0; off < IMG_SIZE; off += 256 * 1024) {
        guest_rw(t, 0, false, off, 256 * 1024);
    }
    for (uint64_t i = 0; i < IMG_SIZE; i += 512) {
        if (memcmp(t->buf + i, t->expect + i, 512)) {
            g_error("the guest reads other data at sector %" PRIu64, i / 512);
        }
    }
}

static void snap_stop(Snap *t)
{
    int status;

    vhost_user_frontend_free(t->fe);
    t->fe = NULL;
    vb_qmp_close(&t->m);
    g_assert_cmpint(kill(t->d.pid, SIGTERM), ==, 0);
    g_assert_cmpint(waitpid(t->d.pid, &status, 0), ==, t->d.pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    t->d.pid = 0;
}

static void check_clean(const char *img)
{
    g_autofree char *out = NULL;
    int st = vb_sh_status(&out, "qemu-img check '%s'", img);

    if (st) {
        g_error("qemu-img check %s: exit %d\n%s", img, st, out);
    }
}

/* qemu-img's view of the chain from @top: @n images, @files in order
 * (basenames), each naming the next as its backing file. */
static void check_chain(const char *top, int n, const char *const *files,
                        const char *const *formats)
{
    g_autofree char *out = NULL;
    g_autoptr(JsonParser) p = json_parser_new();
    JsonArray *a;

    g_assert_cmpint(vb_sh_status(&out, "qemu-img info --backing-chain "
                              "--output=json '%s'", top), ==, 0);
    g_assert_true(json_parser_load_from_data(p, out, -1, NULL));
    a = json_node_get_array(json_parser_get_root(p));
    g_assert_cmpint(json_array_get_length(a), ==, n);
    for (int i = 0; i < n; i++) {
        JsonObject *o = json_array_get_object_element(a, i);
        g_autofree char *base = g_path_get_basename(
            json_object_get_string_member(o, "filename"));

        g_assert_cmpstr(base, ==, files[i]);
        g_assert_cmpstr(json_object_get_string_member(o, "format"), ==,
                        formats[i]);
        if (i + 1 < n) {
            g_autofree char *b = g_path_get_basename(
                json_object_get_string_member(o, "backing-filename"));

            g_assert_cmpstr(b, ==, files[i + 1]);
        } else {
            g_assert_false(json_object_has_member(o, "backing-filename"));
        }
    }
}

/* What 'qemu-img convert -O raw' makes of @img equals what the guest
 * wrote. */
static void check_converted(Snap *t, const char *img)
{
    g_autofree char *raw = path_in(t, "conv.out");
    g_autofree char *data = NULL;
    gsize n;

    vb_sh("qemu-img convert -O raw '%s' '%s'", img, raw);
    g_assert_true(g_file_get_contents(raw, &data, &n, NULL));
    g_assert_cmpuint(n, ==, IMG_SIZE);
    g_assert_true(memcmp(data, t->expect, IMG_SIZE) == 0);
    unlink(raw);
}

/* query-block-exports says export e1 serves node @node. */
static void check_export_node(Snap *t, const char *node)
{
    g_autoptr(JsonNode) r = vb_qmp(&t->m,
                                   "{\"execute\": \"query-block-exports\"}",
                                   NULL);
    JsonArray *a = json_node_get_array(r);
    bool found = false;

    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *o = json_array_get_object_element(a, i);

        if (!strcmp(json_object_get_string_member(o, "id"), "e1")) {
            g_assert_cmpstr(json_object_get_string_member(o, "node-name"),
                            ==, node);
            found = true;
        }
    }
    g_assert_true(found);
}

static void snap_init(Snap *t)
{
    VbExportSpec spec = { .size = IMG_SIZE };

    memset(t, 0, sizeof(*t));
    vb_daemon_init(&t->d, 1, &spec);
}

static void snap_cleanup(Snap *t)
{
    vb_sh("rm -f '%s'/*.qcow2 '%s'/*.raw", t->d.dir, t->d.dir);
    vb_daemon_cleanup(&t->d);
}

/* ---- a writer racing with the snapshot -------------------------------- */

#define RACE_AT (512u * 1024)
#define RACE_LEN (256u * 1024)
#define RACE_IO 4096u

typedef struct Racer {
    Snap *t;
    bool stop;                  /* atomic */
    unsigned int rounds;
} Racer;

/* Queue 1: rewrites [RACE_AT, +RACE_LEN) in 4 KiB writes (partial
 * clusters: a copy-on-write in the overlay reads the rest of each
 * cluster from the old node) with the round number, until stopped. */
static gpointer racer(gpointer opaque)
{
    Racer *r = opaque;
    Snap *t = r->t;

    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE) ||
           __atomic_load_n(&r->rounds, __ATOMIC_RELAXED) < 2) {
        for (uint32_t off = RACE_AT; off < RACE_AT + RACE_LEN;
             off += RACE_IO) {
            vb_fill_pattern(t->buf + off, RACE_IO, 1000 + r->rounds);
            guest_rw(t, 1, true, off, RACE_IO);
        }
        __atomic_add_fetch(&r->rounds, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void race_expect(Snap *t, Racer *r)
{
    for (uint32_t off = RACE_AT; off < RACE_AT + RACE_LEN; off += RACE_IO) {
        vb_fill_pattern(t->expect + off, RACE_IO, 1000 + r->rounds - 1);
    }
}

/* ---- blockdev-snapshot of a qcow2 node -------------------------------- */

static void test_blockdev_snapshot(void)
{
    g_autofree char *base = NULL, *ov = NULL, *ov2 = NULL, *cmd = NULL;
    g_autofree char *fdef = NULL, *sum = NULL, *sum2 = NULL;
    Racer r = { 0 };
    GThread *th;
    Snap *t = g_new0(Snap, 1);

    snap_init(t);
    base = path_in(t, "base.qcow2");
    ov = path_in(t, "ov.qcow2");
    ov2 = path_in(t, "ov2.qcow2");
    vb_sh("qemu-img create -q -f qcow2 '%s' 1M", base);
    /* The overlay names its backing file, as qemu-img makes it. */
    vb_sh("cd '%s' && qemu-img create -q -f qcow2 -b base.qcow2 -F qcow2 "
       "ov.qcow2 1M && qemu-img create -q -f qcow2 ov2.qcow2 1M",
       t->d.dir);
    fdef = g_strdup_printf("driver=file,node-name=f0,filename=%s", base);
    {
        const char *bd[] = { fdef, "driver=qcow2,node-name=q0,file=f0",
                             NULL };

        snap_start(t, bd, "q0");
    }
    /* Before: whole clusters and partial ones. */
    guest_write(t, 0, 128 * 1024, 1);
    guest_write(t, 200 * 1024, 8 * 1024, 2);
    guest_write(t, RACE_AT, RACE_LEN, 3);
    guest_write(t, 900 * 1024, 4096, 4);
    guest_flush(t);
    guest_verify(t);

    cmd = g_strdup_printf("{\"execute\": \"blockdev-add\", \"arguments\": "
                          "{\"driver\": \"qcow2\", \"node-name\": \"ov\", "
                          "\"backing\": null, \"file\": {\"driver\": "
                          "\"file\", \"filename\": \"%s\"}}}", ov);
    vb_qmp_ok(&t->m, cmd);

    /* Refusals, with QEMU's messages. */
    vb_qmp_fails(&t->m, "{\"execute\": \"blockdev-snapshot\", \"arguments\": "
                 "{\"node\": \"nope\", \"overlay\": \"ov\"}}",
                 "Cannot find device='nope' nor node-name='nope'");
    vb_qmp_fails(&t->m, "{\"execute\": \"blockdev-snapshot\", \"arguments\": "
                 "{\"node\": \"q0\", \"overlay\": \"nope\"}}",
                 "Cannot find device='nope' nor node-name='nope'");
    vb_qmp_fails(&t->m, "{\"execute\": \"blockdev-snapshot\", \"arguments\": "
                 "{\"node\": \"q0\", \"overlay\": \"q0\"}}",
                 "The overlay cannot be the node itself");
    vb_qmp_fails(&t->m, "{\"execute\": \"blockdev-snapshot\", \"arguments\": "
                 "{\"node\": \"q0\", \"overlay\": \"f0\"}}",
                 "The overlay is already in use");
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\": \"blockdev-add\", \"arguments\": "
                          "{\"driver\": \"file\", \"node-name\": \"rawov\", "
                          "\"filename\": \"%s\"}}", ov2);
    vb_qmp_ok(&t->m, cmd);
    vb_qmp_fails(&t->m, "{\"execute\": \"blockdev-snapshot\", \"arguments\": "
                 "{\"node\": \"q0\", \"overlay\": \"rawov\"}}",
                 "The overlay does not support backing images: add it with "
                 "driver=qcow2");
    /* A qcow2 overlay that has a backing node already. */
    vb_qmp_ok(&t->m, "{\"execute\": \"blockdev-add\", \"arguments\": "
              "{\"driver\": \"qcow2\", \"node-name\": \"ovb\", "
              "\"backing\": \"f0\", \"file\": \"rawov\"}}");
    vb_qmp_fails(&t->m, "{\"execute\": \"blockdev-snapshot\", \"arguments\": "
                 "{\"node\": \"q0\", \"overlay\": \"ovb\"}}",
                 "The overlay already has a backing image: add it with "
                 "backing=null");
    vb_qmp_ok(&t->m, "{\"execute\": \"blockdev-del\", \"arguments\": "
              "{\"node-name\": \"ovb\"}}");
    vb_qmp_ok(&t->m, "{\"execute\": \"blockdev-del\", \"arguments\": "
              "{\"node-name\": \"rawov\"}}");
    /* The refusals changed nothing. */
    guest_verify(t);

    /* The snapshot, while queue 1 keeps writing. */
    r.t = t;
    th = g_thread_new("racer", racer, &r);
    while (!__atomic_load_n(&r.rounds, __ATOMIC_ACQUIRE)) {
        g_thread_yield();
    }
    vb_qmp_ok(&t->m, "{\"execute\": \"blockdev-snapshot\", \"arguments\": "
              "{\"node\": \"q0\", \"overlay\": \"ov\"}}");
    __atomic_store_n(&r.stop, true, __ATOMIC_RELEASE);
    g_thread_join(th);
    race_expect(t, &r);
    guest_verify(t);
    check_export_node(t, "ov");
    /* The old image does not change any more. */
    sum = checksum(base);
    guest_write(t, 0, 4096, 11);                /* over old data */
    guest_write(t, 204 * 1024, 8 * 1024, 12);   /* straddles old data */
    guest_write(t, 700 * 1024, 64 * 1024, 13);  /* where nothing was */
    guest_flush(t);
    guest_verify(t);
    sum2 = checksum(base);
    g_assert_cmpstr(sum, ==, sum2);
    /* The node is the overlay's backing node now. */
    vb_qmp_fails(&t->m, "{\"execute\": \"blockdev-del\", \"arguments\": "
                 "{\"node-name\": \"q0\"}}",
                 "Block device q0 is in use: the qcow2 node 'ov' uses it as "
                 "its file or backing child; delete that one first");
    vb_qmp_fails(&t->m, "{\"execute\": \"blockdev-snapshot\", \"arguments\": "
                 "{\"node\": \"q0\", \"overlay\": \"ov\"}}",
                 "The overlay is already in use");
    snap_stop(t);

    check_clean(base);
    check_clean(ov);
    {
        const char *files[] = { "ov.qcow2", "base.qcow2" };
        const char *fmts[] = { "qcow2", "qcow2" };

        check_chain(ov, 2, files, fmts);
    }
    check_converted(t, ov);
    assert_checksum(base, sum);
    snap_cleanup(t);
    g_free(t);
}

/* ---- blockdev-snapshot-sync of a raw file node ------------------------ */

static void test_snapshot_sync(void)
{
    g_autofree char *base = NULL, *ov = NULL, *cmd = NULL;
    g_autofree char *fdef = NULL, *sum = NULL;
    Snap *t = g_new0(Snap, 1);

    snap_init(t);
    base = path_in(t, "base.raw");
    ov = path_in(t, "ov.qcow2");
    vb_sh("qemu-img create -q -f raw '%s' 1M", base);
    vb_sh("cd '%s' && qemu-img create -q -f qcow2 -b base.raw -F raw "
       "ov.qcow2 1M", t->d.dir);
    fdef = g_strdup_printf("driver=file,node-name=f0,filename=%s", base);
    {
        const char *bd[] = { fdef, NULL };

        snap_start(t, bd, "f0");
    }
    guest_write(t, 0, 64 * 1024, 1);
    guest_write(t, 300 * 1024, 12 * 1024, 2);
    guest_flush(t);

    cmd = g_strdup_printf("{\"execute\": \"blockdev-snapshot-sync\", "
                          "\"arguments\": {\"node-name\": \"f0\", "
                          "\"snapshot-file\": \"%s\", "
                          "\"snapshot-node-name\": \"ov\"}}", ov);
    {
        /* mode=absolute-paths creates the file: never over another. */
        g_autofree char *err = vb_qmp_error(&t->m, cmd);
        g_autofree char *want = g_strdup_printf(
            "Could not create '%s': File exists (to use an existing "
            "image, give mode=existing)", ov);

        g_assert_cmpstr(err, ==, want);
    }
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\": \"blockdev-snapshot-sync\", "
                          "\"arguments\": {\"device\": \"nope\", "
                          "\"snapshot-file\": \"%s\", \"mode\": "
                          "\"existing\", \"snapshot-node-name\": \"ov\"}}",
                          ov);
    vb_qmp_fails(&t->m, cmd, "Cannot find device='nope' nor node-name=''");
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\": \"blockdev-snapshot-sync\", "
                          "\"arguments\": {\"node-name\": \"f0\", "
                          "\"snapshot-file\": \"%s\", \"mode\": "
                          "\"existing\", \"snapshot-node-name\": \"ov\", "
                          "\"format\": \"raw\"}}", ov);
    vb_qmp_fails(&t->m, cmd,
                 "format=raw: driver raw cannot create images");
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\": \"blockdev-snapshot-sync\", "
                          "\"arguments\": {\"node-name\": \"f0\", "
                          "\"snapshot-file\": \"%s\", \"mode\": "
                          "\"existing\", \"snapshot-node-name\": \"ov\"}}",
                          ov);
    check_export_node(t, "f0");
    vb_qmp_ok(&t->m, cmd);
    check_export_node(t, "ov");
    sum = checksum(base);
    guest_write(t, 4096, 4096, 3);
    guest_write(t, 296 * 1024, 8 * 1024, 4);
    guest_write(t, 800 * 1024, 100 * 1024, 5);
    guest_flush(t);
    guest_verify(t);
    assert_checksum(base, sum);
    /* A second one on top, whose file the daemon creates (naming the
     * node's image by its absolute path): the chain grows, the export
     * follows. */
    {
        g_autofree char *ov3 = path_in(t, "ov3.qcow2");
        g_autofree char *out = NULL;

        g_free(cmd);
        cmd = g_strdup_printf("{\"execute\": \"blockdev-snapshot-sync\", "
                              "\"arguments\": {\"device\": \"ov\", "
                              "\"snapshot-file\": \"%s\", "
                              "\"snapshot-node-name\": \"ov3\"}}", ov3);
        vb_qmp_ok(&t->m, cmd);
        check_export_node(t, "ov3");
        g_assert_cmpint(vb_sh_status(&out, "qemu-img info --output=json "
                                  "-U '%s'", ov3), ==, 0);
        g_assert_nonnull(strstr(out, ov));
        /* A failed one (the node name is taken) leaves no file. */
        {
            g_autofree char *ov4 = path_in(t, "ov4.qcow2");
            g_autofree char *c4 = g_strdup_printf(
                "{\"execute\": \"blockdev-snapshot-sync\", \"arguments\": "
                "{\"device\": \"ov3\", \"snapshot-file\": \"%s\", "
                "\"snapshot-node-name\": \"ov\"}}", ov4);
            g_autofree char *err = vb_qmp_error(&t->m, c4);

            g_assert_nonnull(err);
            g_assert_false(g_file_test(ov4, G_FILE_TEST_EXISTS));
        }
        guest_write(t, 8192, 4096, 6);
        guest_flush(t);
        guest_verify(t);
        snap_stop(t);
        check_clean(ov);
        check_clean(ov3);
        {
            const char *files[] = { "ov3.qcow2", "ov.qcow2", "base.raw" };
            const char *fmts[] = { "qcow2", "qcow2", "raw" };

            check_chain(ov3, 3, files, fmts);
        }
        check_converted(t, ov3);
    }
    assert_checksum(base, sum);
    snap_cleanup(t);
    g_free(t);
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
    g_test_add_func("/snapshot/blockdev-snapshot", test_blockdev_snapshot);
    g_test_add_func("/snapshot/blockdev-snapshot-sync", test_snapshot_sync);
    return g_test_run();
}
