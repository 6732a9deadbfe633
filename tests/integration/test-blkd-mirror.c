/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests of the block jobs over QMP: blockdev-mirror from an
 * exported file node to a file node added with blockdev-add, while a
 * vhost-user front-end writes to the export; the job verbs and their
 * QEMU errors; the events in order; a failing source (the export's
 * inject-error) with on-source-error=report, stop and ignore.
 *
 * Determinism: the tests wait for events, never for time.  Where a case
 * needs the job still running when it acts, the job starts with a speed
 * limit (1 byte per second: after its first 64 KiB copy it waits hours)
 * that keeps it running whatever the machine's load, then lifts it.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"
#include "vb-qmp.h"

#include <json-glib/json-glib.h>
#include <linux/virtio_blk.h>
#include <linux/falloc.h>
#include <fcntl.h>
#include <signal.h>

#define IMG_SIZE (16u << 20)

typedef struct Fixture {
    VbDaemon d;
    char *qmp_path;
    char *target;               /* the mirror's target image */
    VbQmp q;
    GPtrArray *events;          /* JsonNode: every event, in order */
    guint seen;                 /* events before this were waited for */
    VhostUserFrontend *fe;
    uint8_t *buf;
    bool holes;                 /* the file system punched the hole */
} Fixture;

typedef struct MirrorCase {
    const char *extra;          /* more options of the export */
    bool sparse;                /* a hole in the source at [HOLE_AT, +4M),
                                 * a target full of another pattern */
    const char *on_error;       /* on-target-error of the killed target */
    const char *copy_mode;      /* of the nbd-target case (background) */
    bool tls;                   /* nbd-target over TCP with x509 TLS */
} MirrorCase;

#define HOLE_AT (8u << 20)
#define HOLE_LEN (4u << 20)

/* ---- QMP with the events kept ------------------------------------------ */

static JsonNode *parse_line(const char *line)
{
    g_autoptr(JsonParser) p = json_parser_new();

    g_assert_true(json_parser_load_from_data(p, line, -1, NULL));
    return json_node_copy(json_parser_get_root(p));
}

/* Send @cmd; its "return" (or NULL and *@err, or a failure if @err is
 * NULL).  Events that come meanwhile are kept. */
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

static void qmp_ok(Fixture *f, const char *cmd)
{
    json_node_unref(qmp(f, cmd, NULL));
}

static void qmp_fails(Fixture *f, const char *cmd, const char *desc)
{
    g_autofree char *err = NULL;

    g_assert_null(qmp(f, cmd, &err));
    g_assert_cmpstr(err, ==, desc);
}

/*
 * The next event called @name after those already waited for; the ones
 * before it are passed over.  Its "data" (owned by f->events).
 */
static JsonObject *wait_event(Fixture *f, const char *name)
{
    for (;;) {
        while (f->seen < f->events->len) {
            JsonObject *o = json_node_get_object(
                g_ptr_array_index(f->events, f->seen++));

            if (!strcmp(json_object_get_string_member(o, "event"), name)) {
                return json_object_get_object_member(o, "data");
            }
        }
        {
            g_autofree char *line = vb_qmp_line(&f->q);

            g_ptr_array_add(f->events, parse_line(line));
        }
    }
}

/* The statuses JOB_STATUS_CHANGE gave @id so far, joined with ' '. */
static char *statuses(Fixture *f, const char *id)
{
    GString *s = g_string_new(NULL);

    for (guint i = 0; i < f->events->len; i++) {
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

/* query-jobs: the status of @id, or NULL if it is not listed. */
static char *job_status(Fixture *f, const char *id)
{
    g_autoptr(JsonNode) r = qmp(f, "{\"execute\":\"query-jobs\"}", NULL);
    JsonArray *a = json_node_get_array(r);

    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *o = json_array_get_object_element(a, i);

        if (!strcmp(json_object_get_string_member(o, "id"), id)) {
            g_assert_cmpstr(json_object_get_string_member(o, "type"), ==,
                            "mirror");
            return g_strdup(json_object_get_string_member(o, "status"));
        }
    }
    return NULL;
}

/* query-jobs: the current-progress of @id (which must be listed). */
static int64_t job_progress(Fixture *f, const char *id)
{
    g_autoptr(JsonNode) r = qmp(f, "{\"execute\":\"query-jobs\"}", NULL);
    JsonArray *a = json_node_get_array(r);

    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *o = json_array_get_object_element(a, i);

        if (!strcmp(json_object_get_string_member(o, "id"), id)) {
            return json_object_get_int_member(o, "current-progress");
        }
    }
    g_error("job '%s' is not in query-jobs", id);
}

static void assert_status(Fixture *f, const char *id, const char *want)
{
    g_autofree char *st = job_status(f, id);

    g_assert_cmpstr(st, ==, want);
}

/* Until @id has left query-jobs (auto-dismissed).  A listed job is not
 * null yet, so a JOB_STATUS_CHANGE is still to come. */
static void wait_gone(Fixture *f, const char *id)
{
    for (;;) {
        g_autofree char *st = job_status(f, id);

        if (!st) {
            return;
        }
        wait_event(f, "JOB_STATUS_CHANGE");
    }
}

/* ---- set-up -------------------------------------------------------------- */

static void fixture_setup(Fixture *f, gconstpointer data)
{
    const MirrorCase *c = data;
    g_autofree char *extra = g_strdup_printf("node-name=src%s",
                                             c && c->extra ? c->extra : "");
    VbExportSpec spec = { .size = IMG_SIZE, .extra = extra };
    g_autofree char *chardev = NULL;
    g_autofree uint8_t *pat = g_malloc(IMG_SIZE);
    g_autoptr(GError) err = NULL;
    int fd;

    memset(f, 0, sizeof(*f));
    f->events = g_ptr_array_new_with_free_func(
        (GDestroyNotify)json_node_unref);
    vb_daemon_init(&f->d, 1, &spec);
    /* The guest's disk before the job: a pattern everywhere. */
    vb_fill_pattern(pat, IMG_SIZE, 7);
    vb_write_image(&f->d, 0, 0, pat, IMG_SIZE);
    f->target = g_strdup_printf("%s/target.img", f->d.dir);
    fd = open(f->target, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, IMG_SIZE), ==, 0);
    if (c && c->sparse) {
        int sfd = open(f->d.image[0], O_RDWR | O_CLOEXEC);

        vb_fill_pattern(pat, IMG_SIZE, 9);
        g_assert_cmpint(pwrite(fd, pat, IMG_SIZE, 0), ==, IMG_SIZE);
        g_assert_cmpint(sfd, >=, 0);
        f->holes = fallocate(sfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                             HOLE_AT, HOLE_LEN) == 0;
        close(sfd);
    }
    close(fd);
    f->qmp_path = g_strdup_printf("%s/qmp.sock", f->d.dir);
    chardev = g_strdup_printf("socket,id=mon,path=%s,server=on,wait=off",
                              f->qmp_path);
    {
        const char *args[] = {
            "--chardev", chardev, "--monitor", "chardev=mon", NULL,
        };

        f->d.args = args;
        f->d.stderr_to_log = true;
        vb_daemon_start(&f->d);
        f->d.args = NULL;
    }
    f->q.fd = -1;
    vb_qmp_connect(&f->q, f->qmp_path, &f->d);
    {
        g_autofree char *add = g_strdup_printf(
            "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":\"file\","
            "\"node-name\":\"tgt\",\"filename\":\"%s\"}}", f->target);

        qmp_ok(f, add);
    }
    f->fe = vb_connect_started(&f->d, 0, 1);
    f->buf = vhost_user_frontend_mem_alloc(f->fe, 1 << 20, 4096, &err);
    g_assert_no_error(err);
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vhost_user_frontend_free(f->fe);
    vb_qmp_close(&f->q);
    g_ptr_array_free(f->events, true);
    unlink(f->target);
    g_free(f->target);
    g_free(f->qmp_path);
    vb_daemon_cleanup(&f->d);
}

/* The guest writes @len bytes of pattern @seed at @offset. */
static void guest_write(Fixture *f, uint64_t offset, size_t len,
                        uint32_t seed)
{
    uint32_t used;

    vb_fill_pattern(f->buf, len, seed);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, offset / 512, f->buf,
                           len, false, &used), ==, VIRTIO_BLK_S_OK);
}

/* The target image equals the source image, byte for byte. */
static void assert_target_equals_source(Fixture *f)
{
    g_autofree uint8_t *a = g_malloc(IMG_SIZE);
    g_autofree uint8_t *b = g_malloc(IMG_SIZE);
    int fd = open(f->target, O_RDONLY | O_CLOEXEC);

    vb_read_image(&f->d, 0, 0, a, IMG_SIZE);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, b, IMG_SIZE, 0), ==, IMG_SIZE);
    close(fd);
    for (size_t i = 0; i < IMG_SIZE; i += 512) {
        if (memcmp(a + i, b + i, 512)) {
            g_error("target differs from source at byte %zu", i);
        }
    }
}

#define MIRROR_SLOW \
    "{\"execute\":\"blockdev-mirror\",\"arguments\":{\"job-id\":\"m0\"," \
    "\"device\":\"src\",\"target\":\"tgt\",\"sync\":\"full\"," \
    "\"granularity\":65536,\"buf-size\":65536,\"speed\":1"

/*
 * Whether event @name came after those already waited for (the QMP
 * replies so far brought it); if so, it counts as waited for.
 */
static bool event_seen(Fixture *f, const char *name)
{
    for (guint i = f->seen; i < f->events->len; i++) {
        JsonObject *o = json_node_get_object(g_ptr_array_index(f->events, i));

        if (!strcmp(json_object_get_string_member(o, "event"), name)) {
            f->seen = i + 1;
            return true;
        }
    }
    return false;
}

/* x-query-vhost-blk-stats: the requests export e0 has in flight. */
static int64_t export_in_flight(Fixture *f)
{
    g_autoptr(JsonNode) r = qmp(f, "{\"execute\":\"x-query-vhost-blk-stats\"}",
                                NULL);
    JsonArray *a = json_object_get_array_member(json_node_get_object(r),
                                                "exports");

    return json_object_get_int_member(json_array_get_object_element(a, 0),
                                      "in-flight");
}

/*
 * One guest write of @len bytes of pattern @seed at @offset from @buf,
 * waited for; the completion of request @held_head on the way sets
 * *@held_done.
 */
static void guest_write_beside(Fixture *f, uint8_t *buf, uint64_t offset,
                               size_t len, uint32_t seed, int held_head,
                               bool *held_done)
{
    struct iovec iov = { .iov_base = buf, .iov_len = len };
    VhostUserFrontendCompletion c;
    int head;

    vb_fill_pattern(buf, len, seed);
    head = vhost_user_frontend_blk_submit(f->fe, 0, VIRTIO_BLK_T_OUT,
                                          offset / 512, &iov, 1, false,
                                          NULL);
    g_assert_cmpint(head, >=, 0);
    g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
    for (;;) {
        g_assert_cmpint(vb_reap_n(f->fe, 0, &c, 1), ==, 1);
        g_assert_cmpint(c.status, ==, VIRTIO_BLK_S_OK);
        if (c.head == (uint32_t)head) {
            return;
        }
        g_assert_cmpint(c.head, ==, held_head);
        *held_done = true;
    }
}

/* ---- cases --------------------------------------------------------------- */

/*
 * The copy with the guest writing during the bulk phase and once ready;
 * block-job-cancel on the ready job ends it as completed, the target
 * equal to the source.
 */
static void test_mirror_ready_cancel(Fixture *f, gconstpointer data)
{
    g_autofree char *st = NULL;
    JsonObject *ev;

    qmp_ok(f, MIRROR_SLOW "}}");
    /* Held to 1 byte/s: still copying. */
    assert_status(f, "m0", "running");
    guest_write(f, 0, 65536, 100);                      /* copied already */
    guest_write(f, IMG_SIZE - 131072, 131072, 101);     /* not yet */
    guest_write(f, 4u << 20, 1u << 20, 102);
    qmp_ok(f, "{\"execute\":\"block-job-set-speed\","
              "\"arguments\":{\"device\":\"m0\",\"speed\":0}}");
    ev = wait_event(f, "BLOCK_JOB_READY");
    g_assert_cmpstr(json_object_get_string_member(ev, "type"), ==, "mirror");
    g_assert_cmpstr(json_object_get_string_member(ev, "device"), ==, "m0");
    g_assert_cmpint(json_object_get_int_member(ev, "len"), ==,
                    json_object_get_int_member(ev, "offset"));
    g_assert_cmpint(json_object_get_int_member(ev, "len"), >=, IMG_SIZE);
    assert_status(f, "m0", "ready");
    /* Ready: the guest's writes are still tracked and copied. */
    guest_write(f, 8u << 20, 65536, 103);
    guest_write(f, 512 * 3, 4096, 104);
    qmp_fails(f, "{\"execute\":\"blockdev-del\","
                 "\"arguments\":{\"node-name\":\"tgt\"}}",
              "Node tgt is in use");
    qmp_ok(f, "{\"execute\":\"block-job-cancel\","
              "\"arguments\":{\"device\":\"m0\"}}");
    ev = wait_event(f, "BLOCK_JOB_COMPLETED");
    g_assert_cmpstr(json_object_get_string_member(ev, "device"), ==, "m0");
    g_assert_false(json_object_has_member(ev, "error"));
    wait_gone(f, "m0");
    st = statuses(f, "m0");
    g_assert_cmpstr(st, ==, "created running ready waiting pending "
                    "concluded null");
    assert_target_equals_source(f);
    /* The target is free again. */
    qmp_ok(f, "{\"execute\":\"blockdev-del\","
              "\"arguments\":{\"node-name\":\"tgt\"}}");
}

/* The image file @path, at @offset: pattern @seed? */
static bool file_has_pattern(const char *path, uint64_t offset, size_t len,
                             uint32_t seed)
{
    g_autofree uint8_t *b = g_malloc(len);
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, b, len, offset), ==, (ssize_t)len);
    close(fd);
    return vb_check_pattern(b, len, seed);
}

/*
 * job-complete: the export moves to the target.  What the guest wrote
 * before is on the target; what it writes after goes to the target only,
 * and it reads it back through the export.
 */
static void test_mirror_complete(Fixture *f, gconstpointer data)
{
    g_autofree char *st = NULL;
    uint32_t used;
    JsonObject *ev;

    qmp_ok(f, MIRROR_SLOW "}}");
    guest_write(f, 0, 65536, 300);
    guest_write(f, 12u << 20, 1u << 20, 301);
    qmp_ok(f, "{\"execute\":\"block-job-set-speed\","
              "\"arguments\":{\"device\":\"m0\",\"speed\":0}}");
    wait_event(f, "BLOCK_JOB_READY");
    guest_write(f, 2u << 20, 65536, 302);
    qmp_ok(f, "{\"execute\":\"job-complete\",\"arguments\":{\"id\":\"m0\"}}");
    ev = wait_event(f, "BLOCK_JOB_COMPLETED");
    g_assert_false(json_object_has_member(ev, "error"));
    wait_gone(f, "m0");
    st = statuses(f, "m0");
    g_assert_cmpstr(st, ==, "created running ready waiting pending "
                    "concluded null");
    /* Up to the pivot the two are equal. */
    assert_target_equals_source(f);
    {
        g_autoptr(JsonNode) r = qmp(f, "{\"execute\":\"query-block-exports\"}",
                                    NULL);
        JsonObject *o = json_array_get_object_element(
            json_node_get_array(r), 0);

        g_assert_cmpstr(json_object_get_string_member(o, "node-name"), ==,
                        "tgt");
    }
    /* After it the guest's writes go to the target alone. */
    guest_write(f, 6u << 20, 65536, 303);
    g_assert_true(file_has_pattern(f->target, 6u << 20, 65536, 303));
    g_assert_false(file_has_pattern(f->d.image[0], 6u << 20, 65536, 303));
    memset(f->buf, 0, 65536);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, (6u << 20) / 512,
                           f->buf, 65536, true, &used), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(f->buf, 65536, 303));
    /* The source is free: nothing uses it any more. */
    qmp_ok(f, "{\"execute\":\"blockdev-del\","
              "\"arguments\":{\"node-name\":\"src\"}}");
    qmp_fails(f, "{\"execute\":\"blockdev-del\","
                 "\"arguments\":{\"node-name\":\"tgt\"}}",
              "Node tgt is in use");
}

/*
 * job-complete while the guest has writes queued and in flight: wherever
 * the pivot falls among them (served on the source and copied by the
 * last pass, or held in the ring and served on the target), each lands
 * on the target, and each completes.
 */
static void test_mirror_complete_busy(Fixture *f, gconstpointer data)
{
    enum { N = 8, LEN = 65536 };
    VhostUserFrontendCompletion c[N];
    struct iovec iov[N];
    JsonObject *ev;

    qmp_ok(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
              "\"job-id\":\"m5\",\"device\":\"src\",\"target\":\"tgt\","
              "\"sync\":\"full\"}}");
    wait_event(f, "BLOCK_JOB_READY");
    for (int i = 0; i < N; i++) {
        iov[i].iov_base = f->buf + i * LEN;
        iov[i].iov_len = LEN;
        vb_fill_pattern(iov[i].iov_base, LEN, 500 + i);
        g_assert_cmpint(vhost_user_frontend_blk_submit(
                            f->fe, 0, VIRTIO_BLK_T_OUT,
                            (uint64_t)(i * 2 + 1) * (1u << 20) / 512,
                            &iov[i], 1, false, NULL), >=, 0);
        if (i == N / 2) {
            g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
        }
    }
    /* The second half is in the ring, maybe not popped yet. */
    g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
    qmp_ok(f, "{\"execute\":\"job-complete\",\"arguments\":{\"id\":\"m5\"}}");
    ev = wait_event(f, "BLOCK_JOB_COMPLETED");
    g_assert_false(json_object_has_member(ev, "error"));
    g_assert_cmpint(vb_reap_n(f->fe, 0, c, N), ==, N);
    for (int i = 0; i < N; i++) {
        g_assert_cmpint(c[i].status, ==, VIRTIO_BLK_S_OK);
        g_assert_true(file_has_pattern(f->target,
                                       (uint64_t)(i * 2 + 1) * (1u << 20),
                                       LEN, 500 + i));
    }
    /* The rest of the disk came over too. */
    g_assert_true(file_has_pattern(f->target, 0, 65536, 7));
}

/*
 * READY under load (QEMU's rule): a guest write stays in flight (the
 * source holds the first request to its last MiB back 8 s) and the guest
 * keeps writing elsewhere, one write after the other; the job still gets
 * ready while that write is in flight (it used to wait for a moment with
 * no guest write in flight), keeps copying, and job-complete pivots with
 * the target equal to the source.
 */
static void test_mirror_ready_under_load(Fixture *f, gconstpointer data)
{
    enum { LEN = 65536 };
    const uint64_t held_at = 15u << 20;
    uint8_t *held_buf = f->buf + (512u << 10);
    struct iovec iov = { .iov_base = held_buf, .iov_len = LEN };
    VhostUserFrontendCompletion c;
    bool held_done = false;
    unsigned int i, writes_before_ready;
    gint64 t_held;
    int held;

    /* The bulk copy stops after its first 64 KiB (speed 1): it has not
     * read the last MiB when the guest's write gets there. */
    qmp_ok(f, MIRROR_SLOW "}}");
    vb_fill_pattern(held_buf, LEN, 900);
    held = vhost_user_frontend_blk_submit(f->fe, 0, VIRTIO_BLK_T_OUT,
                                          held_at / 512, &iov, 1, false,
                                          NULL);
    g_assert_cmpint(held, >=, 0);
    t_held = g_get_monotonic_time();
    g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
    while (export_in_flight(f) == 0) {
        /* The export has not popped it yet. */
    }
    qmp_ok(f, "{\"execute\":\"block-job-set-speed\","
              "\"arguments\":{\"device\":\"m0\",\"speed\":0}}");
    for (i = 0; !event_seen(f, "BLOCK_JOB_READY"); i++) {
        if (held_done) {
            g_error("the job got ready only once no guest write was in "
                    "flight (after %u writes)", i);
        }
        guest_write_beside(f, f->buf, (uint64_t)(i % 14 + 1) << 20, 4096,
                           1000 + i, held, &held_done);
        /* A reply brings the events before it. */
        json_node_unref(qmp(f, "{\"execute\":\"query-jobs\"}", NULL));
    }
    g_assert_false(held_done);
    writes_before_ready = i;
    g_test_message("ready after %u guest writes, %.2f s after the held "
                   "write (held 8 s)", writes_before_ready,
                   (g_get_monotonic_time() - t_held) / 1e6);
    /* Ready, the guest goes on writing and the job copying. */
    for (i = 0; i < 32; i++) {
        guest_write_beside(f, f->buf, (uint64_t)(i % 14 + 1) << 20, 4096,
                           2000 + i, held, &held_done);
    }
    qmp_ok(f, "{\"execute\":\"job-complete\",\"arguments\":{\"id\":\"m0\"}}");
    if (!held_done) {
        int got = 0;

        /* The held write completes when its 8 s are over: up to three
         * waits of VB_IO_TIMEOUT_MS. */
        for (int t = 0; t < 3 && !got; t++) {
            got = vb_reap_n(f->fe, 0, &c, 1);
        }
        g_assert_cmpint(got, ==, 1);
        g_assert_cmpint(c.head, ==, held);
        g_assert_cmpint(c.status, ==, VIRTIO_BLK_S_OK);
    }
    g_assert_false(json_object_has_member(
        wait_event(f, "BLOCK_JOB_COMPLETED"), "error"));
    /* After the pivot: nothing written since, the two are equal. */
    assert_target_equals_source(f);
    g_assert_true(file_has_pattern(f->target, held_at, LEN, 900));
}

/*
 * Background mode: a guest's write to a range whose copy is in flight
 * does not wait for that copy (QEMU's rule: it only marks the range
 * dirty again).  The copy's first request, of [0, 1 MiB), is held 3 s
 * (the export's inject-delay on its first 4 KiB); the guest writes 4 KiB
 * at 4 KiB, in the same 64 KiB granule but outside the held sectors,
 * and that write must complete while the job cannot have got ready yet.
 * The job then copies the range again: the target ends equal to the
 * source, the guest's write included.
 */
static void test_mirror_write_beside_copy(Fixture *f, gconstpointer data)
{
    /* blockdev-mirror returns once the job has issued its first
     * requests (job_start() runs the first pass). */
    qmp_ok(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
              "\"job-id\":\"mh\",\"device\":\"src\",\"target\":\"tgt\","
              "\"sync\":\"full\",\"granularity\":65536}}");
    guest_write(f, 4096, 4096, 4242);
    /* A reply brings the events before it: no READY yet, so the held
     * copy was still out when the guest's write completed. */
    json_node_unref(qmp(f, "{\"execute\":\"query-jobs\"}", NULL));
    g_assert_false(event_seen(f, "BLOCK_JOB_READY"));
    wait_event(f, "BLOCK_JOB_READY");
    qmp_ok(f, "{\"execute\":\"block-job-cancel\","
              "\"arguments\":{\"device\":\"mh\"}}");
    g_assert_false(json_object_has_member(
        wait_event(f, "BLOCK_JOB_COMPLETED"), "error"));
    assert_target_equals_source(f);
    g_assert_true(file_has_pattern(f->target, 4096, 4096, 4242));
}

/*
 * copy-mode=write-blocking: the guest writes 64 KiB blocks all over the
 * disk, one after the other, far faster than the job's speed limit
 * (4 MiB/s).  In background mode every write dirties a block again
 * faster than the copy goes; with write-blocking each write reaches the
 * target before it completes and leaves its blocks clean, so the bulk
 * copy ends and the job gets ready.  The guest goes on writing while it
 * is ready; job-complete pivots with the target equal to the source.
 */
static void test_mirror_write_blocking(Fixture *f, gconstpointer data)
{
    unsigned int i;

    qmp_ok(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
              "\"job-id\":\"mw\",\"device\":\"src\",\"target\":\"tgt\","
              "\"sync\":\"full\",\"granularity\":65536,"
              "\"speed\":4194304,\"copy-mode\":\"write-blocking\"}}");
    for (i = 0; !event_seen(f, "BLOCK_JOB_READY"); i++) {
        /* A stride of 7 blocks: every block of the disk in turn. */
        guest_write(f, (uint64_t)(i * 7 % (IMG_SIZE / 65536)) * 65536,
                    65536, 3000 + i);
        /* A reply brings the events before it. */
        json_node_unref(qmp(f, "{\"execute\":\"query-jobs\"}", NULL));
    }
    g_test_message("ready after %u guest writes (%u MiB)", i, i / 16);
    for (i = 0; i < 256; i++) {
        guest_write(f, (uint64_t)(i * 5 % (IMG_SIZE / 65536)) * 65536,
                    65536, 4000 + i);
    }
    qmp_ok(f, "{\"execute\":\"job-complete\",\"arguments\":{\"id\":\"mw\"}}");
    g_assert_false(json_object_has_member(
        wait_event(f, "BLOCK_JOB_COMPLETED"), "error"));
    assert_target_equals_source(f);
}

/*
 * qemu-nbd serving the killed-target case's image: its pid, killed at
 * teardown and from the SIGABRT handler if a check fails first (it
 * detaches from us with --fork).
 */
static volatile pid_t nbd_server_pid;

static void kill_nbd_server(int sig)
{
    if (nbd_server_pid > 0) {
        kill(nbd_server_pid, SIGKILL);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Whether process @pid is gone (it is not our child: no waitpid). */
static bool pid_gone(pid_t pid)
{
    return kill(pid, 0) < 0 && errno == ESRCH;
}

/*
 * The destination dies mid-mirror: the target is an NBD node served by
 * qemu-nbd, killed (SIGKILL) while the job is held by its speed limit.
 * With on-target-error=report the job ends with BLOCK_JOB_COMPLETED
 * carrying the error; with stop it pauses (BLOCK_JOB_ERROR), with
 * ignore it goes on trying (BLOCK_JOB_ERROR again), and job-cancel ends
 * either.  Meanwhile and afterwards the guest's export serves reads and
 * writes without an error, the dead node can be deleted, and a new
 * mirror to another target gets ready and ends with a consistent copy.
 */
static void test_mirror_target_killed(Fixture *f, gconstpointer data)
{
    const MirrorCase *c = data;
    g_autofree char *qemu_nbd = g_find_program_in_path("qemu-nbd");
    g_autofree char *img = g_strdup_printf("%s/nbdtgt.img", f->d.dir);
    g_autofree char *sock = g_strdup_printf("%s/tgt-nbd.sock", f->d.dir);
    g_autofree char *pidfile = g_strdup_printf("%s/qemu-nbd.pid", f->d.dir);
    g_autofree char *cmd = NULL, *err = NULL, *pidstr = NULL;
    g_autoptr(GError) gerr = NULL;
    const char *argv[] = {
        qemu_nbd, "-f", "raw", "-x", "exp", "--fork", "--persistent",
        "--shared=8", NULL, NULL, NULL, NULL,
    };
    JsonObject *ev;
    JsonNode *r;
    int status, fd;
    pid_t pid;

    if (!qemu_nbd) {
        g_test_skip("qemu-nbd (qemu-utils) is not installed");
        return;
    }
    fd = open(img, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, IMG_SIZE), ==, 0);
    close(fd);
    argv[8] = g_strdup_printf("--pid-file=%s", pidfile);
    argv[9] = g_strdup_printf("--socket=%s", sock);
    argv[10] = img;
    signal(SIGABRT, kill_nbd_server);
    /* --fork: qemu-nbd returns once it listens. */
    g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL,
                               G_SPAWN_DEFAULT, NULL, NULL, NULL, NULL,
                               &status, &gerr));
    g_free((char *)argv[8]);
    g_free((char *)argv[9]);
    g_assert_no_error(gerr);
    g_assert_true(g_spawn_check_wait_status(status, NULL));
    g_assert_true(g_file_get_contents(pidfile, &pidstr, NULL, NULL));
    pid = atoi(pidstr);
    g_assert_cmpint(pid, >, 0);
    nbd_server_pid = pid;

    cmd = g_strdup_printf("{\"execute\":\"blockdev-add\",\"arguments\":{"
                          "\"driver\":\"nbd\",\"node-name\":\"nt\","
                          "\"server\":{\"type\":\"unix\",\"path\":"
                          "\"%s\"},\"export\":\"exp\"}}", sock);
    r = qmp(f, cmd, &err);
    if (!r) {
        /* A build without libnbd has no nbd driver. */
        kill(pid, SIGKILL);
        g_test_skip(err);
        return;
    }
    json_node_unref(r);
    g_free(cmd);
    /* Held by its speed limit after the first 64 KiB. */
    cmd = g_strdup_printf("{\"execute\":\"blockdev-mirror\",\"arguments\":{"
                          "\"job-id\":\"mk\",\"device\":\"src\","
                          "\"target\":\"nt\",\"sync\":\"full\","
                          "\"granularity\":65536,\"buf-size\":65536,"
                          "\"speed\":1,\"on-target-error\":\"%s\"}}",
                          c->on_error);
    qmp_ok(f, cmd);
    /*
     * Mid-mirror: the first 64 KiB have reached the target (through the
     * connection of the context the job writes from), the rest waits for
     * the speed limit.  Killed before that write, the target would never
     * have answered that context, whose first connection then waits out
     * a whole connection attempt (10 s) before it fails the job's write.
     */
    while (job_progress(f, "mk") < 65536) {
        g_usleep(1000);     /* polling query-jobs for the first copy */
    }
    guest_write(f, 1u << 20, 65536, 1100);
    /* The destination dies. */
    g_assert_cmpint(kill(pid, SIGKILL), ==, 0);
    while (!pid_gone(pid)) {
        g_usleep(1000);     /* polling for the process to be reaped */
    }
    nbd_server_pid = 0;
    qmp_ok(f, "{\"execute\":\"block-job-set-speed\","
              "\"arguments\":{\"device\":\"mk\",\"speed\":0}}");
    ev = wait_event(f, "BLOCK_JOB_ERROR");
    g_assert_cmpstr(json_object_get_string_member(ev, "device"), ==, "mk");
    g_assert_cmpstr(json_object_get_string_member(ev, "operation"), ==,
                    "write");
    g_assert_cmpstr(json_object_get_string_member(ev, "action"), ==,
                    c->on_error);
    /* The guest is not held by the dead target. */
    guest_write(f, 2u << 20, 65536, 1101);
    if (!strcmp(c->on_error, "report")) {
        ev = wait_event(f, "BLOCK_JOB_COMPLETED");
        g_assert_true(json_object_has_member(ev, "error"));
        g_test_message("error: %s",
                       json_object_get_string_member(ev, "error"));
    } else {
        if (!strcmp(c->on_error, "stop")) {
            assert_status(f, "mk", "paused");
        } else {
            /* It goes on trying and failing. */
            wait_event(f, "BLOCK_JOB_ERROR");
        }
        guest_write(f, 3u << 20, 65536, 1102);
        qmp_ok(f, "{\"execute\":\"job-cancel\",\"arguments\":"
                  "{\"id\":\"mk\"}}");
        wait_event(f, "BLOCK_JOB_CANCELLED");
    }
    wait_gone(f, "mk");
    /* The guest reads what it wrote, from the source. */
    guest_write(f, 4u << 20, 65536, 1103);
    memset(f->buf, 0, 65536);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, (2u << 20) / 512,
                           f->buf, 65536, true, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(f->buf, 65536, 1101));
    /* The dead node goes, and a new mirror to a live target works. */
    qmp_ok(f, "{\"execute\":\"blockdev-del\",\"arguments\":"
              "{\"node-name\":\"nt\"}}");
    qmp_ok(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
              "\"job-id\":\"m2\",\"device\":\"src\",\"target\":\"tgt\","
              "\"sync\":\"full\"}}");
    wait_event(f, "BLOCK_JOB_READY");
    qmp_ok(f, "{\"execute\":\"block-job-cancel\","
              "\"arguments\":{\"device\":\"m2\"}}");
    g_assert_false(json_object_has_member(
        wait_event(f, "BLOCK_JOB_COMPLETED"), "error"));
    assert_target_equals_source(f);
    signal(SIGABRT, SIG_DFL);
    unlink(img);
}

/*
 * sync=full over a sparse source: the hole is written as zeroes over the
 * target's old data (a hole there too, with unmap), the rest copied.
 */
static void test_mirror_sparse(Fixture *f, gconstpointer data)
{
    int fd;
    off_t next_data;

    if (!f->holes) {
        g_test_skip("the file system cannot punch holes");
        return;
    }
    qmp_ok(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
              "\"job-id\":\"m6\",\"device\":\"src\",\"target\":\"tgt\","
              "\"sync\":\"full\"}}");
    wait_event(f, "BLOCK_JOB_READY");
    qmp_ok(f, "{\"execute\":\"block-job-cancel\","
              "\"arguments\":{\"device\":\"m6\"}}");
    wait_event(f, "BLOCK_JOB_COMPLETED");
    assert_target_equals_source(f);
    /* Not copied: a hole on the target as well (the copy of a buffer of
     * zeroes would have allocated it). */
    fd = open(f->target, O_RDONLY | O_CLOEXEC);
    g_assert_cmpint(fd, >=, 0);
    next_data = lseek(fd, HOLE_AT, SEEK_DATA);
    close(fd);
    g_assert_cmpint(next_data, >=, HOLE_AT + HOLE_LEN);
}

/*
 * A source served over NBD: job-complete is refused (the NBD export
 * cannot move) and the job goes on; block-job-cancel still ends it.
 */
static void test_mirror_nbd_source(Fixture *f, gconstpointer data)
{
    g_autofree char *img = g_strdup_printf("%s/nbdsrc.img", f->d.dir);
    g_autofree char *tgt = g_strdup_printf("%s/nbdtgt.img", f->d.dir);
    g_autofree char *cmd = NULL;
    const char *paths[] = { img, tgt };

    for (int i = 0; i < 2; i++) {
        int fd = open(paths[i], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC,
                      0600);

        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(ftruncate(fd, 1 << 20), ==, 0);
        close(fd);
        cmd = g_strdup_printf("{\"execute\":\"blockdev-add\",\"arguments\":{"
                              "\"driver\":\"file\",\"node-name\":\"n%d\","
                              "\"filename\":\"%s\"}}", i, paths[i]);
        qmp_ok(f, cmd);
        g_free(cmd);
    }
    cmd = g_strdup_printf("{\"execute\":\"nbd-server-start\",\"arguments\":{"
                          "\"addr\":{\"type\":\"unix\",\"path\":"
                          "\"%s/nbd.sock\"}}}", f->d.dir);
    qmp_ok(f, cmd);
    qmp_ok(f, "{\"execute\":\"block-export-add\",\"arguments\":{"
              "\"type\":\"nbd\",\"id\":\"x0\",\"node-name\":\"n0\","
              "\"writable\":true}}");
    qmp_ok(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
              "\"job-id\":\"m7\",\"device\":\"n0\",\"target\":\"n1\","
              "\"sync\":\"full\"}}");
    wait_event(f, "BLOCK_JOB_READY");
    qmp_fails(f, "{\"execute\":\"job-complete\",\"arguments\":{\"id\":\"m7\"}}",
              "node 'n0' has NBD exports, which cannot move to the target: "
              "delete them (or use block-job-cancel for a copy without "
              "pivot)");
    assert_status(f, "m7", "ready");
    qmp_ok(f, "{\"execute\":\"block-job-cancel\","
              "\"arguments\":{\"device\":\"m7\"}}");
    g_assert_false(json_object_has_member(
        wait_event(f, "BLOCK_JOB_COMPLETED"), "error"));
    unlink(img);
    unlink(tgt);
}

/* In @dir: a CA, a server certificate for 127.0.0.1 and a client
 * certificate, both signed by it, named as tls-creds-x509 objects read
 * them.  EC keys: quicker to make than RSA ones on a loaded machine.
 * False when openssl is missing. */
static bool make_pki(const char *dir)
{
    g_autofree char *ossl = g_find_program_in_path("openssl");
    g_autofree char *script = g_strdup_printf(
        "set -e; mkdir -p '%s'; cd '%s'; "
        "k='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'; "
        "openssl req -x509 $k -keyout ca-key.pem -out ca-cert.pem "
        "  -days 2 -subj '/CN=vb mirror test CA'; "
        "openssl req $k -keyout server-key.pem -out server.csr "
        "  -subj '/CN=localhost'; "
        "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage="
        "serverAuth\\n' > srv.ext; "
        "openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem "
        "  -CAcreateserial -out server-cert.pem -days 2 -extfile srv.ext; "
        "openssl req $k -keyout client-key.pem -out client.csr "
        "  -subj '/CN=client'; "
        "printf 'extendedKeyUsage=clientAuth\\n' > cli.ext; "
        "openssl x509 -req -in client.csr -CA ca-cert.pem -CAkey ca-key.pem "
        "  -CAcreateserial -out client-cert.pem -days 2 -extfile cli.ext; "
        "chmod 600 *-key.pem", dir, dir);
    const char *argv[] = { "sh", "-c", script, NULL };
    g_autofree char *err_out = NULL;
    int status;

    if (!ossl) {
        return false;
    }
    g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL,
                               G_SPAWN_SEARCH_PATH |
                               G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL,
                               &err_out, &status, NULL));
    if (!g_spawn_check_wait_status(status, NULL)) {
        g_error("making certificates: %s", err_out);
    }
    return true;
}

static void rm_rf(const char *dir)
{
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", dir);

    g_assert_cmpint(system(cmd), ==, 0);
}

/*
 * For the nbd-target case with TLS: qemu-nbd serves the target's file
 * (its node deleted first: one writer) on a unix socket with x509 TLS,
 * client certificates checked, and a client object is made over QMP.
 * The "server" member of the nbd node's blockdev-add and its tls-creds
 * member; NULL if qemu-nbd is missing.
 */
static char *start_tls_qemu_nbd(Fixture *f, const char *pki)
{
    g_autofree char *qemu_nbd = g_find_program_in_path("qemu-nbd");
    g_autofree char *sock = g_strdup_printf("%s/tls-nbd.sock", f->d.dir);
    g_autofree char *pidfile = g_strdup_printf("%s/qemu-nbd.pid", f->d.dir);
    g_autofree char *pidstr = NULL, *cmd = NULL;
    g_autoptr(GError) gerr = NULL;
    const char *argv[] = {
        qemu_nbd, "-f", "raw", "-x", "tgt", "--fork", "--persistent",
        "--shared=8", "--tls-creds=t", NULL, NULL, NULL, NULL, NULL, NULL,
    };
    int status;

    if (!qemu_nbd) {
        return NULL;
    }
    qmp_ok(f, "{\"execute\":\"blockdev-del\",\"arguments\":"
              "{\"node-name\":\"tgt\"}}");
    argv[9] = "--object";
    argv[10] = g_strdup_printf("tls-creds-x509,id=t,endpoint=server,dir=%s,"
                               "verify-peer=on", pki);
    argv[11] = g_strdup_printf("--pid-file=%s", pidfile);
    argv[12] = g_strdup_printf("--socket=%s", sock);
    argv[13] = f->target;
    signal(SIGABRT, kill_nbd_server);
    /* --fork: qemu-nbd returns once it listens. */
    g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT,
                               NULL, NULL, NULL, NULL, &status, &gerr));
    for (int i = 10; i <= 12; i++) {
        g_free((char *)argv[i]);
    }
    g_assert_no_error(gerr);
    g_assert_true(g_spawn_check_wait_status(status, NULL));
    g_assert_true(g_file_get_contents(pidfile, &pidstr, NULL, NULL));
    nbd_server_pid = atoi(pidstr);
    g_assert_cmpint(nbd_server_pid, >, 0);
    unlink(pidfile);
    cmd = g_strdup_printf("{\"execute\":\"object-add\",\"arguments\":{"
                          "\"qom-type\":\"tls-creds-x509\",\"id\":\"c0\","
                          "\"dir\":\"%s\",\"endpoint\":\"client\"}}", pki);
    qmp_ok(f, cmd);
    return g_strdup_printf("{\"type\":\"unix\",\"path\":\"%s\"},"
                           "\"tls-creds\":\"c0\"", sock);
}

/* The end of the TLS case: qemu-nbd goes. */
static void stop_tls_qemu_nbd(Fixture *f)
{
    g_autofree char *sock = g_strdup_printf("%s/tls-nbd.sock", f->d.dir);

    kill(nbd_server_pid, SIGTERM);
    nbd_server_pid = 0;
    signal(SIGABRT, SIG_DFL);
    unlink(sock);
}

/*
 * The target an NBD client node (this daemon's own NBD export of a file
 * node over a unix socket, or qemu-nbd's with TLS): what live migration
 * with local disks does.  The guest writes while the job runs,
 * job-complete moves the export to the NBD node, and the guest's next
 * write reaches the file behind it.  Under --seccomp on the export's
 * confined iothread is served by the node after the pivot (and writes
 * to it during the copy with copy-mode=write-blocking): the node's
 * dialer connects for it.
 */
static void test_mirror_nbd_target(Fixture *f, gconstpointer data)
{
    const MirrorCase *c = data;
    g_autofree char *cmd = NULL;
    g_autofree char *err = NULL;
    g_autofree char *pki = NULL;
    g_autofree char *server = NULL;
    JsonNode *r;

    if (c && c->tls) {
        pki = g_strdup_printf("%s/pki", f->d.dir);
        if (!make_pki(pki)) {
            g_test_skip("openssl is not installed");
            return;
        }
        server = start_tls_qemu_nbd(f, pki);
        if (!server) {
            rm_rf(pki);
            g_test_skip("qemu-nbd (qemu-utils) is not installed");
            return;
        }
    } else {
        cmd = g_strdup_printf("{\"execute\":\"nbd-server-start\","
                              "\"arguments\":{\"addr\":{\"type\":\"unix\","
                              "\"path\":\"%s/nbd.sock\"}}}", f->d.dir);
        qmp_ok(f, cmd);
        g_free(cmd);
        server = g_strdup_printf("{\"type\":\"unix\",\"path\":"
                                 "\"%s/nbd.sock\"}", f->d.dir);
        qmp_ok(f, "{\"execute\":\"block-export-add\",\"arguments\":{"
                  "\"type\":\"nbd\",\"id\":\"x0\","
                  "\"node-name\":\"tgt\",\"writable\":true}}");
    }
    cmd = g_strdup_printf("{\"execute\":\"blockdev-add\",\"arguments\":{"
                          "\"driver\":\"nbd\",\"node-name\":\"nc\","
                          "\"server\":%s,\"export\":\"tgt\"}}", server);
    r = qmp(f, cmd, &err);
    if (!r) {
        /* A build without libnbd has no nbd driver. */
        g_test_skip(err);
        if (pki) {
            stop_tls_qemu_nbd(f);
            rm_rf(pki);
        }
        return;
    }
    json_node_unref(r);
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\":\"blockdev-mirror\",\"arguments\":{"
                          "\"job-id\":\"m8\",\"device\":\"src\","
                          "\"target\":\"nc\",\"sync\":\"full\","
                          "\"speed\":1,\"copy-mode\":\"%s\"}}",
                          c && c->copy_mode ? c->copy_mode : "background");
    qmp_ok(f, cmd);
    guest_write(f, 0, 65536, 800);
    guest_write(f, 10u << 20, 1u << 20, 801);
    qmp_ok(f, "{\"execute\":\"block-job-set-speed\","
              "\"arguments\":{\"device\":\"m8\",\"speed\":0}}");
    wait_event(f, "BLOCK_JOB_READY");
    guest_write(f, 3u << 20, 65536, 802);
    qmp_ok(f, "{\"execute\":\"job-complete\",\"arguments\":{\"id\":\"m8\"}}");
    g_assert_false(json_object_has_member(
        wait_event(f, "BLOCK_JOB_COMPLETED"), "error"));
    /* Through the NBD export, the file has all of it. */
    assert_target_equals_source(f);
    guest_write(f, 5u << 20, 65536, 803);
    g_assert_true(file_has_pattern(f->target, 5u << 20, 65536, 803));
    g_assert_false(file_has_pattern(f->d.image[0], 5u << 20, 65536, 803));
    if (pki) {
        stop_tls_qemu_nbd(f);
        rm_rf(pki);
    }
}

/* The verbs a state refuses, with QEMU's messages; pause and resume;
 * job-cancel (forced) ends it as cancelled. */
static void test_verbs(Fixture *f, gconstpointer data)
{
    g_autofree char *st = NULL;
    JsonObject *ev;

    qmp_fails(f, "{\"execute\":\"job-pause\",\"arguments\":{\"id\":\"m0\"}}",
              "Job not found");
    qmp_fails(f, "{\"execute\":\"block-job-pause\","
                 "\"arguments\":{\"device\":\"m0\"}}",
              "Block job 'm0' not found");
    qmp_fails(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
                 "\"device\":\"src\",\"target\":\"src\",\"sync\":\"full\"}}",
              "Can't mirror node into itself");
    qmp_fails(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
                 "\"device\":\"src\",\"target\":\"tgt\",\"sync\":\"full\","
                 "\"granularity\":1000}}",
              "Parameter 'granularity' must be a power of 2 between 512 "
              "and 64M");
    qmp_fails(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
                 "\"device\":\"src\",\"target\":\"tgt\",\"sync\":\"full\","
                 "\"copy-mode\":\"mirror\"}}",
              "Parameter 'copy-mode' does not accept value 'mirror'");
    qmp_fails(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
                 "\"device\":\"src\",\"target\":\"tgt\",\"sync\":\"full\","
                 "\"buf-size\":4611686018427387904}}",
              "Parameter 'buf-size' must be between 0 (the default, 16 MiB) "
              "and 1 GiB: the job allocates it when it starts");
    qmp_fails(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
                 "\"device\":\"src\",\"target\":\"nope\",\"sync\":\"full\"}}",
              "Cannot find device='nope' nor node-name='nope'");
    qmp_ok(f, MIRROR_SLOW "}}");
    qmp_fails(f, MIRROR_SLOW "}}", "Job ID 'm0' already in use");
    qmp_fails(f, "{\"execute\":\"job-complete\",\"arguments\":{\"id\":\"m0\"}}",
              "Job 'm0' in state 'running' cannot accept command verb "
              "'complete'");
    qmp_fails(f, "{\"execute\":\"job-dismiss\",\"arguments\":{\"id\":\"m0\"}}",
              "Job 'm0' in state 'running' cannot accept command verb "
              "'dismiss'");
    qmp_fails(f, "{\"execute\":\"job-finalize\",\"arguments\":{\"id\":\"m0\"}}",
              "Job 'm0' in state 'running' cannot accept command verb "
              "'finalize'");
    qmp_fails(f, "{\"execute\":\"job-resume\",\"arguments\":{\"id\":\"m0\"}}",
              "Can't resume a job that was not paused");
    qmp_ok(f, "{\"execute\":\"job-pause\",\"arguments\":{\"id\":\"m0\"}}");
    assert_status(f, "m0", "paused");
    {
        g_autoptr(JsonNode) r = qmp(f, "{\"execute\":\"query-block-jobs\"}",
                                    NULL);
        JsonObject *o = json_array_get_object_element(
            json_node_get_array(r), 0);

        g_assert_cmpstr(json_object_get_string_member(o, "device"), ==,
                        "m0");
        g_assert_true(json_object_get_boolean_member(o, "paused"));
        g_assert_false(json_object_get_boolean_member(o, "ready"));
        g_assert_cmpint(json_object_get_int_member(o, "speed"), ==, 1);
        g_assert_cmpint(json_object_get_int_member(o, "len"), ==, IMG_SIZE);
    }
    qmp_fails(f, "{\"execute\":\"job-pause\",\"arguments\":{\"id\":\"m0\"}}",
              "Job is already paused");
    qmp_ok(f, "{\"execute\":\"block-job-resume\","
              "\"arguments\":{\"device\":\"m0\"}}");
    assert_status(f, "m0", "running");
    qmp_ok(f, "{\"execute\":\"job-cancel\",\"arguments\":{\"id\":\"m0\"}}");
    ev = wait_event(f, "BLOCK_JOB_CANCELLED");
    g_assert_cmpstr(json_object_get_string_member(ev, "device"), ==, "m0");
    g_assert_cmpint(json_object_get_int_member(ev, "len"), ==, IMG_SIZE);
    wait_gone(f, "m0");
    st = statuses(f, "m0");
    g_assert_cmpstr(st, ==, "created running paused running aborting "
                    "concluded null");
}

/* auto-finalize and auto-dismiss off: the job waits in pending and in
 * concluded for the user. */
static void test_manual_finalize(Fixture *f, gconstpointer data)
{
    g_autofree char *st = NULL;

    qmp_ok(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
              "\"job-id\":\"m1\",\"device\":\"src\",\"target\":\"tgt\","
              "\"sync\":\"full\",\"auto-finalize\":false,"
              "\"auto-dismiss\":false}}");
    wait_event(f, "BLOCK_JOB_READY");
    guest_write(f, 1u << 20, 65536, 200);
    qmp_ok(f, "{\"execute\":\"block-job-cancel\","
              "\"arguments\":{\"device\":\"m1\"}}");
    g_assert_cmpstr(json_object_get_string_member(
                        wait_event(f, "BLOCK_JOB_PENDING"), "id"), ==, "m1");
    assert_status(f, "m1", "pending");
    qmp_fails(f, "{\"execute\":\"job-dismiss\",\"arguments\":{\"id\":\"m1\"}}",
              "Job 'm1' in state 'pending' cannot accept command verb "
              "'dismiss'");
    qmp_ok(f, "{\"execute\":\"block-job-finalize\","
              "\"arguments\":{\"id\":\"m1\"}}");
    wait_event(f, "BLOCK_JOB_COMPLETED");
    assert_status(f, "m1", "concluded");
    qmp_fails(f, "{\"execute\":\"job-cancel\",\"arguments\":{\"id\":\"m1\"}}",
              "Job 'm1' in state 'concluded' cannot accept command verb "
              "'cancel'");
    assert_target_equals_source(f);
    qmp_ok(f, "{\"execute\":\"job-dismiss\",\"arguments\":{\"id\":\"m1\"}}");
    g_assert_null(job_status(f, "m1"));
    st = statuses(f, "m1");
    g_assert_cmpstr(st, ==, "created running ready waiting pending "
                    "concluded null");
}

/* The source fails its first read (the export's inject-error=read,
 * inject-count=1): on-source-error=report ends the job with the error. */
static void test_source_error_report(Fixture *f, gconstpointer data)
{
    JsonObject *ev;

    qmp_ok(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
              "\"job-id\":\"m2\",\"device\":\"src\",\"target\":\"tgt\","
              "\"sync\":\"full\"}}");
    ev = wait_event(f, "BLOCK_JOB_ERROR");
    g_assert_cmpstr(json_object_get_string_member(ev, "device"), ==, "m2");
    g_assert_cmpstr(json_object_get_string_member(ev, "operation"), ==,
                    "read");
    g_assert_cmpstr(json_object_get_string_member(ev, "action"), ==,
                    "report");
    ev = wait_event(f, "BLOCK_JOB_COMPLETED");
    g_assert_cmpstr(json_object_get_string_member(ev, "error"), ==,
                    "Input/output error");
    wait_gone(f, "m2");
    {
        g_autofree char *st = statuses(f, "m2");

        g_assert_cmpstr(st, ==, "created running aborting concluded null");
    }
}

/* on-source-error=stop: the job pauses on the error; job-resume copies
 * the range again (the read succeeds now) and the job gets ready. */
static void test_source_error_stop(Fixture *f, gconstpointer data)
{
    JsonObject *ev;

    qmp_ok(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
              "\"job-id\":\"m3\",\"device\":\"src\",\"target\":\"tgt\","
              "\"sync\":\"full\",\"on-source-error\":\"stop\"}}");
    ev = wait_event(f, "BLOCK_JOB_ERROR");
    g_assert_cmpstr(json_object_get_string_member(ev, "action"), ==, "stop");
    assert_status(f, "m3", "paused");
    qmp_ok(f, "{\"execute\":\"job-resume\",\"arguments\":{\"id\":\"m3\"}}");
    wait_event(f, "BLOCK_JOB_READY");
    qmp_ok(f, "{\"execute\":\"block-job-cancel\","
              "\"arguments\":{\"device\":\"m3\"}}");
    ev = wait_event(f, "BLOCK_JOB_COMPLETED");
    g_assert_false(json_object_has_member(ev, "error"));
    assert_target_equals_source(f);
}

/* on-source-error=ignore: the error is told and the job goes on. */
static void test_source_error_ignore(Fixture *f, gconstpointer data)
{
    JsonObject *ev;

    qmp_ok(f, "{\"execute\":\"blockdev-mirror\",\"arguments\":{"
              "\"job-id\":\"m4\",\"device\":\"src\",\"target\":\"tgt\","
              "\"sync\":\"full\",\"on-source-error\":\"ignore\"}}");
    ev = wait_event(f, "BLOCK_JOB_ERROR");
    g_assert_cmpstr(json_object_get_string_member(ev, "action"), ==,
                    "ignore");
    wait_event(f, "BLOCK_JOB_READY");
    qmp_ok(f, "{\"execute\":\"job-cancel\",\"arguments\":{\"id\":\"m4\"}}");
    wait_event(f, "BLOCK_JOB_CANCELLED");
    assert_target_equals_source(f);
}

int main(int argc, char **argv)
{
    static const MirrorCase plain = { NULL };
    static const MirrorCase sparse = { NULL, true };
    static const MirrorCase held_write = {
        /* The first request to the last MiB waits 8 s (the daemon has
         * no way to release a held request on demand, and the case waits
         * the hold out): the job must get ready before that.  It does
         * within about 1 s of the job's start, also under TSan with the
         * machine's load average at 12; the case logs the time. */
        ",inject-delay=8000,inject-sector=30720-32767,inject-count=1",
    };
    static const MirrorCase held_copy = {
        /* The first request of the first 4 KiB (the copy's) waits 3 s,
         * waited out by the case: room for one 4 KiB guest write and
         * one QMP round trip, each a few ms even under TSan. */
        ",inject-delay=3000,inject-sector=0-7,inject-count=1",
    };
    static const MirrorCase killed_report = { .on_error = "report" };
    static const MirrorCase write_blocking = {
        .copy_mode = "write-blocking",
    };
    /* What migration with local disks runs: TCP, TLS, write-blocking. */
    static const MirrorCase tls_write_blocking = {
        .copy_mode = "write-blocking", .tls = true,
    };
    static const MirrorCase killed_stop = { .on_error = "stop" };
    static const MirrorCase killed_ignore = { .on_error = "ignore" };
    static const MirrorCase failing = {
        ",inject-error=read,inject-count=1",
    };

    g_test_init(&argc, &argv, NULL);
    if (vb_backend() == VB_BACKEND_QSD) {
        /* The cases use vhost-blkd's --export syntax for the source. */
        g_test_skip("vhost-blkd only");
        return g_test_run();
    }
#define ADD(name, c, fn) \
    g_test_add("/blkd/mirror/" name, Fixture, c, fixture_setup, fn, \
               fixture_teardown)
    ADD("ready-cancel", &plain, test_mirror_ready_cancel);
    ADD("complete", &plain, test_mirror_complete);
    ADD("complete-busy", &plain, test_mirror_complete_busy);
    ADD("ready-under-load", &held_write, test_mirror_ready_under_load);
    ADD("write-beside-copy", &held_copy, test_mirror_write_beside_copy);
    ADD("write-blocking", &plain, test_mirror_write_blocking);
    ADD("sparse", &sparse, test_mirror_sparse);
    ADD("target-killed-report", &killed_report, test_mirror_target_killed);
    ADD("target-killed-stop", &killed_stop, test_mirror_target_killed);
    ADD("target-killed-ignore", &killed_ignore, test_mirror_target_killed);
    ADD("nbd-source", &plain, test_mirror_nbd_source);
    ADD("nbd-target", &plain, test_mirror_nbd_target);
    /* The guest's writes go to the nbd node from the export's iothread. */
    ADD("nbd-target-write-blocking", &write_blocking,
        test_mirror_nbd_target);
    ADD("nbd-target-tls", &tls_write_blocking, test_mirror_nbd_target);
    ADD("verbs", &plain, test_verbs);
    ADD("manual-finalize", &plain, test_manual_finalize);
    ADD("source-error-report", &failing, test_source_error_report);
    ADD("source-error-stop", &failing, test_source_error_stop);
    ADD("source-error-ignore", &failing, test_source_error_ignore);
    return g_test_run();
}
