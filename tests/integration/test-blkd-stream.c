/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * block-stream over QMP (block/stream.c, monitor/jobs.c) on backing
 * chains of three images made by qemu-img and qemu-io, with data in every
 * layer and different cluster sizes, while a vhost-user front-end writes
 * and verifies.  After each job qemu-img sees the new chain, finds the
 * top clean, and a convert of the top equals what the guest wrote; the
 * events come in QEMU's order; a cancelled job leaves the chain as it
 * was and usable; the refusals carry their messages.
 *
 * Determinism: the tests wait for events, never for time.  The guest
 * writes that race with the copy come from a thread that writes until
 * the job has completed and at least two rounds are done: whichever
 * order the copy and each write take, the guest must read its writes.
 *
 * Needs qemu-img and qemu-io (scripts/install-deps.sh: qemu-utils).
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"
#include "vb-qmp.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <linux/virtio_blk.h>

#define IMG_SIZE (4u << 20)

typedef struct Fix {
    VbDaemon d;
    VbQmp q;
    GPtrArray *events;          /* JsonNode: every event, in order */
    guint seen;                 /* events before this were waited for */
    VhostUserFrontend *fe;
    uint8_t *buf;               /* guest memory, IMG_SIZE bytes */
    uint8_t *expect;            /* what the guest's disk holds */
} Fix;

static char *path_in(Fix *t, const char *name)
{
    return g_strdup_printf("%s/%s", t->d.dir, name);
}

/* ---- QMP with the events kept ------------------------------------------ */

static JsonNode *parse_line(const char *line)
{
    g_autoptr(JsonParser) p = json_parser_new();

    g_assert_true(json_parser_load_from_data(p, line, -1, NULL));
    return json_node_copy(json_parser_get_root(p));
}

static JsonNode *qmp(Fix *t, const char *cmd, char **err)
{
    g_autofree char *msg = g_strdup_printf("%s\n", cmd);

    g_assert_cmpint(write(t->q.fd, msg, strlen(msg)), ==, strlen(msg));
    for (;;) {
        g_autofree char *line = vb_qmp_line(&t->q);
        JsonNode *n = parse_line(line);
        JsonObject *o = json_node_get_object(n);
        JsonNode *ret;

        if (json_object_has_member(o, "event")) {
            g_ptr_array_add(t->events, n);
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

static void qmp_ok(Fix *t, const char *cmd)
{
    json_node_unref(qmp(t, cmd, NULL));
}

/* @cmd fails with @desc (NULL: with any message, printed). */
static void qmp_fails(Fix *t, const char *cmd, const char *desc)
{
    g_autofree char *err = NULL;

    g_assert_null(qmp(t, cmd, &err));
    if (!desc) {
        g_test_message("%s", err);
        return;
    }
    g_assert_cmpstr(err, ==, desc);
}

/* The next event @name after those waited for already: its "data". */
static JsonObject *wait_event(Fix *t, const char *name)
{
    for (;;) {
        while (t->seen < t->events->len) {
            JsonObject *o = json_node_get_object(
                g_ptr_array_index(t->events, t->seen++));

            if (!strcmp(json_object_get_string_member(o, "event"), name)) {
                return json_object_get_object_member(o, "data");
            }
        }
        {
            g_autofree char *line = vb_qmp_line(&t->q);

            g_ptr_array_add(t->events, parse_line(line));
        }
    }
}

/* The statuses JOB_STATUS_CHANGE gave @id, joined with ' '. */
static char *statuses(Fix *t, const char *id)
{
    GString *s = g_string_new(NULL);

    for (guint i = 0; i < t->events->len; i++) {
        JsonObject *o = json_node_get_object(g_ptr_array_index(t->events, i));
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

/* Until the events say @id is @status. */
static void wait_status(Fix *t, const char *id, const char *status)
{
    for (;;) {
        JsonObject *d = wait_event(t, "JOB_STATUS_CHANGE");

        if (!strcmp(json_object_get_string_member(d, "id"), id) &&
            !strcmp(json_object_get_string_member(d, "status"), status)) {
            return;
        }
    }
}

/* Until the events say @id is null (dismissed). */
static void wait_null(Fix *t, const char *id)
{
    wait_status(t, id, "null");
}

/* fix_start(): the named base and middle image read-only=on (libvirt's
 * way); another process holding the base read-only from before the
 * daemon starts (hold_pid). */
static bool ro_named;
static bool hold_base;
static GPid hold_pid;

/* ---- the base's mode and locks -------------------------------------------- */

/* query-named-block-nodes: whether @node is read-only. */
static bool node_ro(Fix *t, const char *node)
{
    g_autoptr(JsonNode) r = qmp(t, "{\"execute\": "
                                "\"query-named-block-nodes\"}", NULL);
    JsonArray *a = json_node_get_array(r);

    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *o = json_array_get_object_element(a, i);

        if (!strcmp(json_object_get_string_member(o, "node-name"), node)) {
            return json_object_get_boolean_member(o, "ro");
        }
    }
    g_error("no node '%s' in query-named-block-nodes", node);
}

/* qemu-img info without -U: refused with QEMU's lock error while we
 * write @img (@locked), else it works. */
static void check_locked(const char *img, bool locked)
{
    g_autofree char *out = NULL;
    int st = vb_sh_status(&out, "qemu-img info '%s' 2>&1", img);

    if (!locked) {
        if (st) {
            g_error("qemu-img info %s: exit %d\n%s", img, st, out);
        }
        return;
    }
    g_assert_cmpint(st, !=, 0);
    if (!strstr(out, "Failed to get shared \"write\" lock")) {
        g_error("qemu-img info %s: not the lock error:\n%s", img, out);
    }
}

/*
 * Another process (qemu-io) that opens @img read-only and does not share
 * writing it, as a VM using it as a backing file does.  Ready when
 * /proc/locks shows its lock on QEMU's "write not shared" byte (201) of
 * the image: it is started before our daemon, so the lock is its.
 */
static void hold_start(const char *img)
{
    char *argv[] = {
        (char *)"qemu-io", (char *)"-r", (char *)"-f", (char *)"qcow2",
        (char *)"-c", (char *)"sleep 3600000", (char *)img, NULL,
    };
    g_autoptr(GError) err = NULL;
    g_autofree char *want = NULL;
    struct stat st;

    g_assert_cmpint(stat(img, &st), ==, 0);
    want = g_strdup_printf(":%" PRIu64 " 201 201", (uint64_t)st.st_ino);
    g_assert_true(g_spawn_async(NULL, argv, NULL, G_SPAWN_SEARCH_PATH |
                                G_SPAWN_DO_NOT_REAP_CHILD |
                                G_SPAWN_STDOUT_TO_DEV_NULL |
                                G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL,
                                &hold_pid, &err));
    for (;;) {
        g_autofree char *locks = NULL;
        int status;

        g_assert_true(g_file_get_contents("/proc/locks", &locks, NULL,
                                          NULL));
        if (strstr(locks, want)) {
            return;
        }
        g_assert_cmpint(waitpid(hold_pid, &status, WNOHANG), ==, 0);
    }
}

static void hold_stop(void)
{
    int status;

    g_assert_cmpint(kill(hold_pid, SIGTERM), ==, 0);
    g_assert_cmpint(waitpid(hold_pid, &status, 0), ==, hold_pid);
    g_spawn_close_pid(hold_pid);
    hold_pid = 0;
}

/* ---- images -------------------------------------------------------------- */

/*
 * base (raw or qcow2 with 64 KiB clusters) <- mid (qcow2, 4 KiB
 * clusters) <- top (qcow2, 32 KiB clusters), made and filled by qemu-img
 * and qemu-io: each layer overwrites part of the one below, partly over
 * cluster boundaries of the others, and leaves some of it showing.
 */
/* make_chain() makes the middle image 2 MiB, shorter than the top and
 * the base (4 MiB, data everywhere): the chain reads zeroes from 2 MiB. */
static bool short_mid;
/* make_chain() makes the base 2 MiB and the middle image 3 MiB, under
 * the 4 MiB top: a commit grows the base; mid-view.raw is what the
 * middle image shows (with the base below it) before any job. */
static bool grow_chain;

static void make_chain(Fix *t, bool raw_base)
{
    const char *bfmt = raw_base ? "raw" : "qcow2";
    g_autofree char *ref = path_in(t, "ref.raw");
    g_autofree char *data = NULL;
    gsize n;

    if (grow_chain) {
        vb_sh("cd '%s' && qemu-img create -q -f %s base.%s 2M && "
              "qemu-img create -q -f qcow2 -b base.%s -F %s mid.qcow2 3M && "
              "qemu-img create -q -f qcow2 -b mid.qcow2 -F qcow2 "
              "top.qcow2 4M && "
              "qemu-io -f %s -c 'write -P 0x11 0 2M' base.%s >/dev/null && "
              "qemu-io -f qcow2 -c 'write -P 0x22 1M 64k' "
              "-c 'write -P 0x23 2560k 64k' mid.qcow2 >/dev/null && "
              "qemu-io -f qcow2 -c 'write -P 0x33 64k 64k' "
              "-c 'write -P 0x34 3584k 64k' top.qcow2 >/dev/null && "
              "qemu-img convert -O raw mid.qcow2 mid-view.raw && "
              "qemu-img convert -O raw top.qcow2 ref.raw", t->d.dir,
              bfmt, bfmt, bfmt, bfmt, bfmt, bfmt);
        g_assert_true(g_file_get_contents(ref, &data, &n, NULL));
        g_assert_cmpuint(n, ==, IMG_SIZE);
        /* Past the base's end the chain reads zeroes. */
        g_assert_cmpint(data[2048 * 1024], ==, 0);
        g_assert_cmpint(data[2560 * 1024], ==, 0x23);
        memcpy(t->expect, data, IMG_SIZE);
        unlink(ref);
        return;
    }
    if (short_mid) {
        vb_sh("cd '%s' && qemu-img create -q -f qcow2 base.qcow2 4M && "
              "qemu-img create -q -f qcow2 -o cluster_size=4096 "
              "-b base.qcow2 -F qcow2 mid.qcow2 2M && "
              "qemu-img create -q -f qcow2 -b mid.qcow2 -F qcow2 "
              "top.qcow2 4M && "
              "qemu-io -f qcow2 -c 'write -P 0x11 0 4M' base.qcow2 "
              ">/dev/null && "
              "qemu-io -f qcow2 -c 'write -P 0x22 100k 1M' mid.qcow2 "
              ">/dev/null && "
              "qemu-io -f qcow2 -c 'write -P 0x33 512k 96k' "
              "-c 'write -P 0x34 3584k 64k' top.qcow2 >/dev/null",
              t->d.dir);
        vb_sh("cd '%s' && qemu-img convert -O raw top.qcow2 ref.raw",
              t->d.dir);
        g_assert_true(g_file_get_contents(ref, &data, &n, NULL));
        g_assert_cmpuint(n, ==, IMG_SIZE);
        /* The qcow2 spec, as qemu-img reads it: zeroes past mid's end. */
        g_assert_cmpint(data[3 * 1024 * 1024], ==, 0);
        g_assert_cmpint(data[3584 * 1024], ==, 0x34);
        memcpy(t->expect, data, IMG_SIZE);
        unlink(ref);
        return;
    }
    /* Over the raw base, a chain shorter than the top (3 MiB): the top
     * reads zeroes past its end. */
    vb_sh("cd '%s' && qemu-img create -q -f %s %s base.%s %s && "
          "qemu-img create -q -f qcow2 -o cluster_size=4096 -b base.%s "
          "-F %s mid.qcow2 %s && "
          "qemu-img create -q -f qcow2 -o cluster_size=32768 -b mid.qcow2 "
          "-F qcow2 top.qcow2 4M", t->d.dir, bfmt,
          raw_base ? "" : "-o cluster_size=65536", bfmt,
          raw_base ? "3M" : "4M", bfmt, bfmt, raw_base ? "3M" : "4M");
    vb_sh("cd '%s' && qemu-io -f %s -c 'write -P 0x11 0 3000k' base.%s "
          ">/dev/null && "
          "qemu-io -f qcow2 -c 'write -P 0x22 100k 1M' "
          "-c 'write -P 0x23 2052k 12k' -c 'write -z 3000k 8k' mid.qcow2 "
          ">/dev/null && "
          "qemu-io -f qcow2 -c 'write -P 0x33 512k 96k' "
          "-c 'write -P 0x34 3584k 64k' top.qcow2 >/dev/null",
          t->d.dir, bfmt, bfmt);
    /* What the guest sees before the job: qemu-img's reading. */
    vb_sh("cd '%s' && qemu-img convert -O raw top.qcow2 ref.raw", t->d.dir);
    g_assert_true(g_file_get_contents(ref, &data, &n, NULL));
    g_assert_cmpuint(n, ==, IMG_SIZE);
    memcpy(t->expect, data, IMG_SIZE);
    unlink(ref);
}

/* @named: each image of the chain added as a node (b, m, top), with
 * backing=NODE; else the top opens its chain itself. */
static void fix_start(Fix *t, bool raw_base, bool named)
{
    g_autofree char *qmp_path = NULL, *sock = NULL, *top = NULL;
    g_autofree char *fdef = NULL, *chardev = NULL, *exp = NULL;
    VhostUserFrontendOptions o = { .num_queues = 2,
                                   .connect_timeout_ms = 10000 };
    g_autoptr(GError) err = NULL;
    VbExportSpec spec = { .size = IMG_SIZE };

    memset(t, 0, sizeof(*t));
    t->events = g_ptr_array_new_with_free_func(
        (GDestroyNotify)json_node_unref);
    t->expect = g_malloc(IMG_SIZE);
    vb_daemon_init(&t->d, 1, &spec);
    qmp_path = path_in(t, "qmp.sock");
    sock = path_in(t, "vm.sock");
    top = path_in(t, "top.qcow2");
    fdef = g_strdup_printf("driver=file,node-name=f0,filename=%s", top);
    chardev = g_strdup_printf("socket,id=mon,path=%s,server=on,wait=off",
                              qmp_path);
    exp = g_strdup_printf("type=vhost-user-blk,id=e1,node-name=top,"
                          "addr.type=unix,addr.path=%s,writable=on,"
                          "num-queues=2", sock);
    make_chain(t, raw_base);
    if (hold_base) {
        g_autofree char *base = path_in(t, "base.qcow2");

        hold_start(base);
    }
    if (named) {
        const char *ro = ro_named ? ",read-only=on" : "";
        g_autofree char *bdef = g_strdup_printf(
            "driver=qcow2,node-name=b,file.driver=file,"
            "file.filename=%s/base.qcow2%s", t->d.dir, ro);
        g_autofree char *mdef = g_strdup_printf(
            "driver=qcow2,node-name=m,backing=b,file.driver=file,"
            "file.filename=%s/mid.qcow2%s", t->d.dir, ro);
        const char *args[] = {
            "--blockdev", bdef, "--blockdev", mdef, "--blockdev", fdef,
            "--blockdev", "driver=qcow2,node-name=top,file=f0,backing=m",
            "--export", exp, "--chardev", chardev,
            "--monitor", "chardev=mon", NULL,
        };

        t->d.args = args;
        vb_daemon_start(&t->d);
    } else {
        const char *args[] = {
            "--blockdev", fdef,
            "--blockdev", "driver=qcow2,node-name=top,file=f0",
            "--export", exp, "--chardev", chardev,
            "--monitor", "chardev=mon", NULL,
        };

        t->d.args = args;
        vb_daemon_start(&t->d);
    }
    t->d.args = NULL;
    t->q.fd = -1;
    vb_qmp_connect(&t->q, qmp_path, &t->d);
    o.socket_path = sock;
    t->fe = vhost_user_frontend_new(&o, &err);
    g_assert_no_error(err);
    vb_start(t->fe);
    t->buf = vhost_user_frontend_mem_alloc(t->fe, IMG_SIZE, 4096, &err);
    g_assert_no_error(err);
}

static void fix_stop(Fix *t)
{
    int status;

    vhost_user_frontend_free(t->fe);
    t->fe = NULL;
    vb_qmp_close(&t->q);
    g_assert_cmpint(kill(t->d.pid, SIGTERM), ==, 0);
    g_assert_cmpint(waitpid(t->d.pid, &status, 0), ==, t->d.pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    t->d.pid = 0;
}

static void fix_cleanup(Fix *t)
{
    vb_sh("rm -f '%s'/*.qcow2 '%s'/*.raw", t->d.dir, t->d.dir);
    vb_daemon_cleanup(&t->d);
    g_ptr_array_free(t->events, true);
    g_free(t->expect);
}

/* ---- the guest ----------------------------------------------------------- */

static void guest_rw(Fix *t, unsigned int q, bool write, uint64_t off,
                     size_t len)
{
    g_assert_cmpint(vb_req(t->fe, q, write ? VIRTIO_BLK_T_OUT :
                           VIRTIO_BLK_T_IN, off / 512, t->buf + off, len,
                           !write, NULL), ==, VIRTIO_BLK_S_OK);
}

static void guest_write(Fix *t, uint64_t off, size_t len, uint32_t seed)
{
    vb_fill_pattern(t->buf + off, len, seed);
    memcpy(t->expect + off, t->buf + off, len);
    guest_rw(t, 0, true, off, len);
}

/* Everything the guest reads is what it wrote (or what was there). */
static void guest_verify(Fix *t)
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

/* ---- a writer racing with the copy --------------------------------------- */

/* 4 KiB writes over clusters the job copies (partial clusters of the
 * top's 32 KiB ones, over data of mid and base), from the end down while
 * the job goes up. */
#define RACE_AT (1024u * 1024)
#define RACE_LEN (2048u * 1024)
#define RACE_IO 4096u

typedef struct Racer {
    Fix *t;
    bool stop;                  /* atomic */
    unsigned int rounds;        /* atomic */
} Racer;

static gpointer racer(gpointer opaque)
{
    Racer *r = opaque;
    Fix *t = r->t;

    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE) ||
           __atomic_load_n(&r->rounds, __ATOMIC_RELAXED) < 2) {
        /* Every other block, in an order that crosses the job's. */
        for (uint32_t i = 0; i < RACE_LEN / RACE_IO; i += 2) {
            uint32_t off = RACE_AT + RACE_LEN - (i + 1) * RACE_IO;

            vb_fill_pattern(t->buf + off, RACE_IO, 1000 + r->rounds);
            guest_rw(t, 1, true, off, RACE_IO);
        }
        __atomic_add_fetch(&r->rounds, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void race_expect(Fix *t, Racer *r)
{
    for (uint32_t i = 0; i < RACE_LEN / RACE_IO; i += 2) {
        uint32_t off = RACE_AT + RACE_LEN - (i + 1) * RACE_IO;

        vb_fill_pattern(t->expect + off, RACE_IO, 1000 + r->rounds - 1);
    }
}

/* ---- what qemu-img says afterwards --------------------------------------- */

static void check_clean(const char *img)
{
    g_autofree char *out = NULL;
    int st = vb_sh_status(&out, "qemu-img check '%s'", img);

    if (st) {
        g_error("qemu-img check %s: exit %d\n%s", img, st, out);
    }
}

/* qemu-img's chain from @top: @n images, @files (basenames) and
 * @formats; each names the next as its backing file, as @named. */
static void check_chain(const char *top, int n, const char *const *files,
                        const char *const *formats,
                        const char *const *named)
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
            g_assert_cmpstr(json_object_get_string_member(
                                o, "backing-filename"), ==, named[i]);
            g_assert_cmpstr(json_object_get_string_member(
                                o, "backing-filename-format"), ==,
                            formats[i + 1]);
        } else {
            g_assert_false(json_object_has_member(o, "backing-filename"));
        }
    }
}

/* qemu-img compare of the top's guest-visible disk (a convert of it)
 * with what the guest wrote. */
static void check_converted_img(Fix *t, const char *img)
{
    g_autofree char *want = path_in(t, "want.raw");

    g_assert_true(g_file_set_contents(want, (const char *)t->expect,
                                      IMG_SIZE, NULL));
    vb_sh("cd '%s' && qemu-img convert -O raw %s conv.raw && "
          "qemu-img compare -q -f raw -F raw conv.raw want.raw", t->d.dir,
          img);
}

static void check_converted(Fix *t)
{
    check_converted_img(t, "top.qcow2");
}

/* query-block-exports says export e1 serves node @node. */
static void check_export_node(Fix *t, const char *node)
{
    g_autoptr(JsonNode) r = qmp(t, "{\"execute\": \"query-block-exports\"}",
                                NULL);
    JsonArray *a = json_node_get_array(r);

    g_assert_cmpint(json_array_get_length(a), >=, 1);
    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *o = json_array_get_object_element(a, i);

        if (!strcmp(json_object_get_string_member(o, "id"), "e1")) {
            g_assert_cmpstr(json_object_get_string_member(o, "node-name"),
                            ==, node);
            return;
        }
    }
    g_assert_not_reached();
}

/* ---- the cases ----------------------------------------------------------- */

/* Stream from the raw base's overlay into the top, while the guest
 * writes: the top ends over the base. */
static void test_stream_base(void)
{
    g_autofree char *top = NULL, *st = NULL;
    Fix *t = g_new0(Fix, 1);
    Racer r = { 0 };
    JsonObject *ev;
    GThread *th;

    fix_start(t, false, false);
    top = path_in(t, "top.qcow2");
    guest_verify(t);
    guest_write(t, 900 * 1024, 8192, 1);        /* before: a partial one */
    /* 8 MiB/s: the copy takes about half a second, the racer's first
     * round meets it on clusters still unallocated in the top. */
    qmp_ok(t, "{\"execute\": \"block-stream\", \"arguments\": "
           "{\"job-id\": \"s1\", \"device\": \"top\", \"base\": "
           "\"base.qcow2\", \"speed\": 8388608}}");
    r.t = t;
    th = g_thread_new("racer", racer, &r);
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    __atomic_store_n(&r.stop, true, __ATOMIC_RELEASE);
    g_thread_join(th);
    race_expect(t, &r);
    g_assert_cmpstr(json_object_get_string_member(ev, "type"), ==,
                    "stream");
    g_assert_cmpstr(json_object_get_string_member(ev, "device"), ==, "s1");
    g_assert_cmpint(json_object_get_int_member(ev, "len"), ==, IMG_SIZE);
    g_assert_cmpint(json_object_get_int_member(ev, "offset"), ==, IMG_SIZE);
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "s1");
    st = statuses(t, "s1");
    g_assert_cmpstr(st, ==, "created running waiting pending concluded "
                    "null");
    guest_verify(t);
    /* The top goes on serving over the base alone. */
    guest_write(t, 2048 * 1024, 64 * 1024, 2);
    guest_verify(t);
    fix_stop(t);

    check_clean(top);
    {
        const char *files[] = { "top.qcow2", "base.qcow2" };
        const char *fmts[] = { "qcow2", "qcow2" };
        const char *named[] = { "base.qcow2" };

        check_chain(top, 2, files, fmts, named);
    }
    check_converted(t);
    fix_cleanup(t);
    g_free(t);
}

/* Stream the whole chain (over a raw base) into the top: no backing
 * file left.  A given backing-file names the base as the user says. */
static void test_stream_all(void)
{
    g_autofree char *top = NULL;
    Fix *t = g_new0(Fix, 1);
    Racer r = { 0 };
    JsonObject *ev;
    GThread *th;

    fix_start(t, true, false);
    top = path_in(t, "top.qcow2");
    guest_verify(t);
    qmp_ok(t, "{\"execute\": \"block-stream\", \"arguments\": "
           "{\"device\": \"top\", \"on-error\": \"stop\", "
           "\"speed\": 8388608}}");
    r.t = t;
    th = g_thread_new("racer", racer, &r);
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    __atomic_store_n(&r.stop, true, __ATOMIC_RELEASE);
    g_thread_join(th);
    race_expect(t, &r);
    g_assert_cmpstr(json_object_get_string_member(ev, "device"), ==, "top");
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "top");
    guest_verify(t);
    fix_stop(t);

    check_clean(top);
    {
        const char *files[] = { "top.qcow2" };
        const char *fmts[] = { "qcow2" };

        check_chain(top, 1, files, fmts, NULL);
    }
    check_converted(t);
    fix_cleanup(t);
    g_free(t);
}

/* A chain of nodes added by name: the top's backing node becomes the
 * base node, the node in between is only let go of (the user deletes
 * it). */
static void test_stream_named(void)
{
    g_autofree char *top = NULL;
    Fix *t = g_new0(Fix, 1);
    JsonObject *ev;

    fix_start(t, false, true);
    top = path_in(t, "top.qcow2");
    guest_verify(t);
    qmp_ok(t, "{\"execute\": \"block-stream\", \"arguments\": "
           "{\"job-id\": \"n1\", \"device\": \"top\", \"base-node\": "
           "\"b\"}}");
    guest_write(t, 2 * 1024 * 1024, 12 * 1024, 8);
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "n1");
    guest_verify(t);
    /* m is nobody's backing node any more; b is the top's. */
    qmp_ok(t, "{\"execute\": \"blockdev-del\", \"arguments\": "
           "{\"node-name\": \"m\"}}");
    qmp_fails(t, "{\"execute\": \"blockdev-del\", \"arguments\": "
              "{\"node-name\": \"b\"}}",
              "Block device b is in use: the qcow2 node 'top' uses it as "
              "its file or backing child; delete that one first");
    guest_write(t, 0, 64 * 1024, 9);
    guest_verify(t);
    fix_stop(t);

    check_clean(top);
    {
        const char *files[] = { "top.qcow2", "base.qcow2" };
        const char *fmts[] = { "qcow2", "qcow2" };
        const char *named[] = { "base.qcow2" };

        check_chain(top, 2, files, fmts, named);
    }
    check_converted(t);
    fix_cleanup(t);
    g_free(t);
}

/* block-commit of the middle image into the base (below the active
 * top, every image a node added by name) while the guest writes; then
 * the refusals. */
static void test_commit(void)
{
    g_autofree char *top = NULL, *base = NULL, *st = NULL;
    Fix *t = g_new0(Fix, 1);
    Racer r = { 0 };
    JsonObject *ev;
    GThread *th;

    fix_start(t, false, true);
    top = path_in(t, "top.qcow2");
    base = path_in(t, "base.qcow2");
    guest_verify(t);
    qmp_fails(t, "{\"execute\": \"block-commit\", \"arguments\": "
              "{\"device\": \"top\", \"top-node\": \"f0\"}}",
              "Top image 'f0' is not in the backing chain of 'top'");
    qmp_fails(t, "{\"execute\": \"block-commit\", \"arguments\": "
              "{\"device\": \"top\", \"top-node\": \"b\", "
              "\"base-node\": \"m\"}}", NULL);
    qmp_fails(t, "{\"execute\": \"block-commit\", \"arguments\": "
              "{\"device\": \"top\", \"top\": \"x\", \"top-node\": "
              "\"m\"}}",
              "'top' and 'top-node' cannot be specified at the same time");
    qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
           "{\"job-id\": \"c1\", \"device\": \"top\", \"top-node\": "
           "\"m\", \"base-node\": \"b\", \"speed\": 8388608}}");
    r.t = t;
    th = g_thread_new("racer", racer, &r);
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    __atomic_store_n(&r.stop, true, __ATOMIC_RELEASE);
    g_thread_join(th);
    race_expect(t, &r);
    g_assert_cmpstr(json_object_get_string_member(ev, "type"), ==,
                    "commit");
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "c1");
    st = statuses(t, "c1");
    g_assert_cmpstr(st, ==, "created running waiting pending concluded "
                    "null");
    guest_verify(t);
    qmp_ok(t, "{\"execute\": \"blockdev-del\", \"arguments\": "
           "{\"node-name\": \"m\"}}");
    guest_write(t, 3 * 1024 * 1024, 64 * 1024, 10);
    guest_verify(t);
    fix_stop(t);

    check_clean(top);
    check_clean(base);
    {
        const char *files[] = { "top.qcow2", "base.qcow2" };
        const char *fmts[] = { "qcow2", "qcow2" };
        const char *named[] = { "base.qcow2" };

        check_chain(top, 2, files, fmts, named);
    }
    check_converted(t);
    fix_cleanup(t);
    g_free(t);

}

/*
 * The usual case: a chain the top opened itself, whose base is
 * read-only.  The commit reopens it read-write (qemu-img is refused it
 * meanwhile) and read-only again at the end: query-named-block-nodes
 * says so and qemu-img can read it again while the daemon runs.
 */
static void test_commit_chain(void)
{
    g_autofree char *top = NULL, *base = NULL;
    Fix *t = g_new0(Fix, 1);
    JsonObject *ev;

    fix_start(t, false, false);
    top = path_in(t, "top.qcow2");
    base = path_in(t, "base.qcow2");
    guest_verify(t);
    g_assert_true(node_ro(t, "#top-backing2"));
    check_locked(base, false);
    /* Pending until job-finalize: the base is ours until then. */
    qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
           "{\"job-id\": \"c2\", \"device\": \"top\", \"top\": "
           "\"mid.qcow2\", \"auto-finalize\": false}}");
    wait_status(t, "c2", "pending");
    g_assert_false(node_ro(t, "#top-backing2"));
    check_locked(base, true);
    guest_write(t, 200 * 1024, 8192, 30);
    qmp_ok(t, "{\"execute\": \"job-finalize\", \"arguments\": "
           "{\"id\": \"c2\"}}");
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "c2");
    /* top <- base now. */
    g_assert_true(node_ro(t, "#top-backing1"));
    check_locked(base, false);
    guest_verify(t);
    fix_stop(t);

    check_clean(top);
    check_clean(base);
    {
        const char *files[] = { "top.qcow2", "base.qcow2" };
        const char *fmts[] = { "qcow2", "qcow2" };
        const char *named[] = { "base.qcow2" };

        check_chain(top, 2, files, fmts, named);
    }
    check_converted(t);
    fix_cleanup(t);
    g_free(t);
}

/*
 * Another process holds the base (read-only, not sharing writes): the
 * reopen fails, so block-commit does, naming the image, and no job
 * starts; the base stays read-only and the disk usable.  Once the
 * other process is gone the same commit works.
 */
static void test_commit_held(void)
{
    g_autofree char *top = NULL, *base = NULL, *err = NULL;
    g_autofree char *want = NULL;
    Fix *t = g_new0(Fix, 1);
    JsonObject *ev;
    const char *cmd = "{\"execute\": \"block-commit\", \"arguments\": "
                      "{\"job-id\": \"c3\", \"device\": \"top\", "
                      "\"top\": \"mid.qcow2\"}}";

    hold_base = true;
    fix_start(t, false, false);
    hold_base = false;
    top = path_in(t, "top.qcow2");
    base = path_in(t, "base.qcow2");
    guest_verify(t);
    {
        g_autoptr(JsonNode) r = qmp(t, cmd, &err);
    }
    want = g_strdup_printf("The base '%s' cannot be reopened read-write for "
                           "the commit: Failed to get \"write\" lock on "
                           "'%s'", base, base);
    if (!err || !g_str_has_prefix(err, want)) {
        hold_stop();            /* not left running for an hour */
        g_error("block-commit: %s", err ? err : "succeeded");
    }
    {
        g_autoptr(JsonNode) r = qmp(t, "{\"execute\": \"query-jobs\"}",
                                    NULL);

        g_assert_cmpint(json_array_get_length(json_node_get_array(r)), ==,
                        0);
    }
    g_assert_true(node_ro(t, "#top-backing2"));
    guest_write(t, 300 * 1024, 8192, 31);
    guest_verify(t);

    hold_stop();
    qmp_ok(t, cmd);
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "c3");
    g_assert_true(node_ro(t, "#top-backing1"));
    check_locked(base, false);
    guest_verify(t);
    fix_stop(t);

    check_clean(top);
    check_clean(base);
    check_converted(t);
    fix_cleanup(t);
    g_free(t);
}

/*
 * Named nodes with read-only=on (libvirt's and QSD's way): an active
 * commit reopens the base read-write; cancelled, the base is read-only
 * again; completed, it is the device's image and stays read-write.
 */
static void test_commit_active_ro(void)
{
    g_autofree char *base = NULL;
    Fix *t = g_new0(Fix, 1);
    JsonObject *ev;

    ro_named = true;
    fix_start(t, false, true);
    ro_named = false;
    base = path_in(t, "base.qcow2");
    guest_verify(t);
    g_assert_true(node_ro(t, "b"));
    qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
           "{\"job-id\": \"a0\", \"device\": \"top\", \"base-node\": "
           "\"b\"}}");
    wait_event(t, "BLOCK_JOB_READY");
    g_assert_false(node_ro(t, "b"));
    check_locked(base, true);
    guest_write(t, 256 * 1024, 8192, 40);
    qmp_ok(t, "{\"execute\": \"block-job-cancel\", \"arguments\": "
           "{\"device\": \"a0\"}}");
    wait_event(t, "BLOCK_JOB_COMPLETED");
    wait_null(t, "a0");
    g_assert_true(node_ro(t, "b"));
    check_locked(base, false);
    check_export_node(t, "top");
    guest_verify(t);

    qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
           "{\"job-id\": \"a1\", \"device\": \"top\"}}");
    wait_event(t, "BLOCK_JOB_READY");
    qmp_ok(t, "{\"execute\": \"job-complete\", \"arguments\": "
           "{\"id\": \"a1\"}}");
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "a1");
    check_export_node(t, "b");
    g_assert_false(node_ro(t, "b"));
    guest_write(t, 3 * 1024 * 1024, 64 * 1024, 41);
    guest_verify(t);
    qmp_ok(t, "{\"execute\": \"blockdev-del\", \"arguments\": "
           "{\"node-name\": \"top\"}}");
    qmp_ok(t, "{\"execute\": \"blockdev-del\", \"arguments\": "
           "{\"node-name\": \"m\"}}");
    fix_stop(t);

    check_clean(base);
    check_converted_img(t, "base.qcow2");
    fix_cleanup(t);
    g_free(t);
}

/* An active commit (a mirror into the base): cancelled after ready, the
 * chain stays; completed, the export moves onto the base, which then
 * holds everything the guest wrote. */
static void test_commit_active(void)
{
    g_autofree char *top = NULL, *base = NULL;
    Fix *t = g_new0(Fix, 1);
    Racer r = { 0 };
    JsonObject *ev;
    GThread *th;

    fix_start(t, false, true);
    top = path_in(t, "top.qcow2");
    base = path_in(t, "base.qcow2");
    guest_verify(t);
    qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
           "{\"job-id\": \"a0\", \"device\": \"top\", \"base-node\": "
           "\"b\"}}");
    ev = wait_event(t, "BLOCK_JOB_READY");
    g_assert_cmpstr(json_object_get_string_member(ev, "type"), ==,
                    "commit");
    /* The base and the image between keep their size while it runs. */
    qmp_fails(t, "{\"execute\": \"block_resize\", \"arguments\": "
              "{\"node-name\": \"b\", \"size\": 8388608}}",
              "Node 'b' is in use by block job 'a0', which needs its "
              "size unchanged: wait for the job to end or cancel it, then "
              "resize");
    qmp_fails(t, "{\"execute\": \"block_resize\", \"arguments\": "
              "{\"node-name\": \"m\", \"size\": 8388608}}",
              "Node 'm' is in use by block job 'a0', which needs its "
              "size unchanged: wait for the job to end or cancel it, then "
              "resize");
    guest_write(t, 256 * 1024, 8192, 20);
    qmp_ok(t, "{\"execute\": \"block-job-cancel\", \"arguments\": "
           "{\"device\": \"a0\"}}");
    wait_event(t, "BLOCK_JOB_COMPLETED");
    wait_null(t, "a0");
    check_export_node(t, "top");
    guest_verify(t);

    /* Again, completed this time, the guest writing throughout. */
    qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
           "{\"job-id\": \"a1\", \"device\": \"top\"}}");
    r.t = t;
    th = g_thread_new("racer", racer, &r);
    wait_event(t, "BLOCK_JOB_READY");
    qmp_ok(t, "{\"execute\": \"job-complete\", \"arguments\": "
           "{\"id\": \"a1\"}}");
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    __atomic_store_n(&r.stop, true, __ATOMIC_RELEASE);
    g_thread_join(th);
    race_expect(t, &r);
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "a1");
    check_export_node(t, "b");
    guest_verify(t);
    guest_write(t, 3 * 1024 * 1024, 64 * 1024, 21);
    guest_verify(t);
    /* The old images are nobody's now. */
    qmp_ok(t, "{\"execute\": \"blockdev-del\", \"arguments\": "
           "{\"node-name\": \"top\"}}");
    qmp_ok(t, "{\"execute\": \"blockdev-del\", \"arguments\": "
           "{\"node-name\": \"m\"}}");
    fix_stop(t);

    check_clean(base);
    {
        const char *files[] = { "base.qcow2" };
        const char *fmts[] = { "qcow2" };

        check_chain(base, 1, files, fmts, NULL);
    }
    check_converted_img(t, "base.qcow2");
    fix_cleanup(t);
    g_free(t);
}

/*
 * A middle image shorter than the images around it: past its end the
 * chain reads zeroes, not the base's data.  block-stream into the top
 * over the base and block-commit of the middle image into the base must
 * keep it so (without the zeroes written, the base would show through).
 */
static void test_short_mid(void)
{
    g_autofree char *top = NULL, *base = NULL;
    Fix *t = g_new0(Fix, 1);
    JsonObject *ev;

    short_mid = true;
    fix_start(t, false, true);
    top = path_in(t, "top.qcow2");
    guest_verify(t);
    qmp_ok(t, "{\"execute\": \"block-stream\", \"arguments\": "
           "{\"job-id\": \"z1\", \"device\": \"top\", \"base-node\": "
           "\"b\"}}");
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    g_assert_false(json_object_has_member(ev, "error"));
    wait_null(t, "z1");
    guest_verify(t);
    fix_stop(t);
    check_clean(top);
    check_converted(t);
    fix_cleanup(t);
    g_free(t);

    t = g_new0(Fix, 1);
    fix_start(t, false, true);
    g_free(top);
    top = path_in(t, "top.qcow2");
    base = path_in(t, "base.qcow2");
    qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
           "{\"job-id\": \"z2\", \"device\": \"top\", \"top-node\": "
           "\"m\", \"base-node\": \"b\"}}");
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    g_assert_false(json_object_has_member(ev, "error"));
    wait_null(t, "z2");
    guest_verify(t);
    fix_stop(t);
    check_clean(top);
    check_clean(base);
    check_converted(t);
    fix_cleanup(t);
    g_free(t);
    short_mid = false;
}

/* query-block-exports: the node export e1 serves (g_free it). */
static char *export_node(Fix *t)
{
    g_autoptr(JsonNode) r = qmp(t, "{\"execute\": \"query-block-exports\"}",
                                NULL);
    JsonArray *a = json_node_get_array(r);

    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *o = json_array_get_object_element(a, i);

        if (!strcmp(json_object_get_string_member(o, "id"), "e1")) {
            return g_strdup(json_object_get_string_member(o, "node-name"));
        }
    }
    g_error("no export e1");
}

/* query-named-block-nodes: the entry of @node, or NULL (unref @r). */
static JsonObject *find_node(Fix *t, const char *node, JsonNode **r)
{
    JsonArray *a;

    *r = qmp(t, "{\"execute\": \"query-named-block-nodes\"}", NULL);
    a = json_node_get_array(*r);
    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *o = json_array_get_object_element(a, i);

        if (!strcmp(json_object_get_string_member(o, "node-name"), node)) {
            return o;
        }
    }
    return NULL;
}

/*
 * An active commit into a base the top's chain opened itself (no node
 * of its own), as QEMU does it: cancelled after ready, the base is
 * read-only again (its lock too) and the export stays; completed, the
 * base becomes a node of its own ("#blockNNN"), the export serves it
 * read-write, the top's chain is listed down to it, and once the old top
 * is deleted nothing holds the images above any more.  Then an
 * intermediate commit with the top and the base given as file names;
 * then, for a qcow2 and a raw base, a completed commit followed by a
 * shutdown with the old top still open (it closes before the base).
 * The active commits were refused before ("... which needs a node").
 */
static void test_commit_active_chain(void)
{
    g_autofree char *top = NULL, *base = NULL, *cmd = NULL;
    g_autofree char *node = NULL;
    Fix *t = g_new0(Fix, 1);
    Racer r = { 0 };
    JsonObject *ev, *o;
    GThread *th;

    fix_start(t, false, false);
    top = path_in(t, "top.qcow2");
    base = path_in(t, "base.qcow2");
    guest_verify(t);
    g_assert_true(node_ro(t, "#top-backing2"));
    qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
           "{\"job-id\": \"a0\", \"device\": \"top\", \"base\": "
           "\"base.qcow2\"}}");
    wait_event(t, "BLOCK_JOB_READY");
    g_assert_false(node_ro(t, "#top-backing2"));
    check_locked(base, true);
    guest_write(t, 256 * 1024, 8192, 60);
    qmp_ok(t, "{\"execute\": \"block-job-cancel\", \"arguments\": "
           "{\"device\": \"a0\"}}");
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    g_assert_false(json_object_has_member(ev, "error"));
    wait_null(t, "a0");
    g_assert_true(node_ro(t, "#top-backing2"));
    check_locked(base, false);
    check_export_node(t, "top");
    guest_verify(t);

    /* Completed this time (the base by default), the guest writing. */
    qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
           "{\"job-id\": \"a1\", \"device\": \"top\"}}");
    r.t = t;
    th = g_thread_new("racer", racer, &r);
    wait_event(t, "BLOCK_JOB_READY");
    qmp_ok(t, "{\"execute\": \"block-job-complete\", \"arguments\": "
           "{\"device\": \"a1\"}}");
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    __atomic_store_n(&r.stop, true, __ATOMIC_RELEASE);
    g_thread_join(th);
    race_expect(t, &r);
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "a1");
    node = export_node(t);
    g_assert_true(g_str_has_prefix(node, "#block"));
    {
        g_autoptr(JsonNode) q = NULL;
        g_autofree char *fname = NULL;

        o = find_node(t, node, &q);
        g_assert_nonnull(o);
        fname = g_path_get_basename(json_object_get_string_member(o,
                                                                  "file"));
        g_assert_cmpstr(fname, ==, "base.qcow2");
        g_assert_cmpstr(json_object_get_string_member(o, "drv"), ==,
                        "qcow2");
        g_assert_false(json_object_get_boolean_member(o, "ro"));
    }
    {
        /* top <- mid (the top's) <- the base, listed for itself. */
        g_autoptr(JsonNode) q = NULL;

        g_assert_nonnull(find_node(t, "#top-backing1", &q));
    }
    {
        g_autoptr(JsonNode) q = NULL;

        g_assert_null(find_node(t, "#top-backing2", &q));
    }
    check_locked(base, true);
    guest_write(t, 3 * 1024 * 1024, 64 * 1024, 61);
    guest_verify(t);
    /* The base is exported (and read by the old top): it stays. */
    cmd = g_strdup_printf("{\"execute\": \"blockdev-del\", \"arguments\": "
                          "{\"node-name\": \"%s\"}}", node);
    qmp_fails(t, cmd, NULL);
    qmp_ok(t, "{\"execute\": \"blockdev-del\", \"arguments\": "
           "{\"node-name\": \"top\"}}");
    qmp_ok(t, "{\"execute\": \"blockdev-del\", \"arguments\": "
           "{\"node-name\": \"f0\"}}");
    check_locked(top, false);
    guest_verify(t);
    fix_stop(t);

    check_clean(base);
    {
        const char *files[] = { "base.qcow2" };
        const char *fmts[] = { "qcow2" };

        check_chain(base, 1, files, fmts, NULL);
    }
    check_converted_img(t, "base.qcow2");
    fix_cleanup(t);
    g_free(t);

    /* Intermediate, the base by its resolved name, the top as named. */
    t = g_new0(Fix, 1);
    fix_start(t, false, false);
    g_free(top);
    g_free(base);
    g_free(cmd);
    top = path_in(t, "top.qcow2");
    base = path_in(t, "base.qcow2");
    cmd = g_strdup_printf("{\"execute\": \"block-commit\", \"arguments\": "
                          "{\"job-id\": \"c4\", \"device\": \"top\", "
                          "\"top\": \"mid.qcow2\", \"base\": \"%s\"}}",
                          base);
    qmp_ok(t, cmd);
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "c4");
    check_export_node(t, "top");
    g_assert_true(node_ro(t, "#top-backing1"));
    check_locked(base, false);
    guest_verify(t);
    fix_stop(t);
    check_clean(top);
    check_clean(base);
    {
        const char *files[] = { "top.qcow2", "base.qcow2" };
        const char *fmts[] = { "qcow2", "qcow2" };
        const char *named[] = { "base.qcow2" };

        check_chain(top, 2, files, fmts, named);
    }
    check_converted(t);
    fix_cleanup(t);
    g_free(t);

    /*
     * Completed, then the daemon shuts down with the old top still open
     * over the base, which it must close first: a qcow2 base becomes a
     * qcow2 node over a file node, a raw one (3 MiB, so it grows to the
     * top's 4 MiB first) a file node.
     */
    for (int raw = 0; raw < 2; raw++) {
        t = g_new0(Fix, 1);
        fix_start(t, raw, false);
        g_free(base);
        base = path_in(t, raw ? "base.raw" : "base.qcow2");
        qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
               "{\"job-id\": \"a2\", \"device\": \"top\"}}");
        wait_event(t, "BLOCK_JOB_READY");
        qmp_ok(t, "{\"execute\": \"job-complete\", \"arguments\": "
               "{\"id\": \"a2\"}}");
        ev = wait_event(t, "BLOCK_JOB_COMPLETED");
        if (json_object_has_member(ev, "error")) {
            g_error("the job failed: %s",
                    json_object_get_string_member(ev, "error"));
        }
        wait_null(t, "a2");
        g_free(node);
        node = export_node(t);
        {
            g_autoptr(JsonNode) q = NULL;

            o = find_node(t, node, &q);
            g_assert_nonnull(o);
            g_assert_cmpstr(json_object_get_string_member(o, "drv"), ==,
                            raw ? "file" : "qcow2");
        }
        guest_write(t, 3584 * 1024, 64 * 1024, 62);
        guest_verify(t);
        fix_stop(t);
        if (raw) {
            g_autofree char *want = path_in(t, "want.raw");
            struct stat st;

            g_assert_cmpint(stat(base, &st), ==, 0);
            g_assert_cmpint(st.st_size, ==, IMG_SIZE);
            g_assert_true(g_file_set_contents(want,
                                              (const char *)t->expect,
                                              IMG_SIZE, NULL));
            vb_sh("cd '%s' && qemu-img compare -q -s -f raw -F raw "
                  "base.raw want.raw", t->d.dir);
        } else {
            check_clean(base);
            check_converted_img(t, "base.qcow2");
        }
        fix_cleanup(t);
        g_free(t);
    }
}

/* qemu-img info: the virtual size of @img. */
static int64_t virtual_size(const char *img)
{
    g_autofree char *out = NULL;
    g_autoptr(JsonParser) p = json_parser_new();

    g_assert_cmpint(vb_sh_status(&out, "qemu-img info -U --output=json "
                                 "'%s'", img), ==, 0);
    g_assert_true(json_parser_load_from_data(p, out, -1, NULL));
    return json_object_get_int_member(
        json_node_get_object(json_parser_get_root(p)), "virtual-size");
}

/*
 * A base shorter than the top grows to the top's size first, as in
 * QEMU: an active commit into a named qcow2 base (2 MiB under a 4 MiB
 * top) ends with the base 4 MiB and holding the guest's disk, zeroes
 * past its old end where nothing was written; an intermediate commit of
 * the 3 MiB middle image into a raw base the chain opened (2 MiB) grows
 * the file to 3 MiB, holding what the middle image showed.  Both were
 * refused before ("... and block-commit does not grow it").
 */
static void test_commit_grow(void)
{
    g_autofree char *base = NULL, *top = NULL;
    Fix *t = g_new0(Fix, 1);
    JsonObject *ev;
    struct stat st;

    grow_chain = true;
    fix_start(t, false, true);
    base = path_in(t, "base.qcow2");
    guest_verify(t);
    qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
           "{\"job-id\": \"g1\", \"device\": \"top\", \"base-node\": "
           "\"b\"}}");
    wait_event(t, "BLOCK_JOB_READY");
    guest_write(t, 3 * 1024 * 1024, 8192, 50);
    qmp_ok(t, "{\"execute\": \"block-job-complete\", \"arguments\": "
           "{\"device\": \"g1\"}}");
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "g1");
    check_export_node(t, "b");
    guest_verify(t);
    fix_stop(t);
    check_clean(base);
    g_assert_cmpint(virtual_size(base), ==, IMG_SIZE);
    check_converted_img(t, "base.qcow2");
    fix_cleanup(t);
    g_free(t);

    t = g_new0(Fix, 1);
    fix_start(t, true, false);
    g_free(base);
    base = path_in(t, "base.raw");
    top = path_in(t, "top.qcow2");
    guest_verify(t);
    qmp_ok(t, "{\"execute\": \"block-commit\", \"arguments\": "
           "{\"job-id\": \"g2\", \"device\": \"top\", \"top\": "
           "\"mid.qcow2\"}}");
    ev = wait_event(t, "BLOCK_JOB_COMPLETED");
    if (json_object_has_member(ev, "error")) {
        g_error("the job failed: %s",
                json_object_get_string_member(ev, "error"));
    }
    wait_null(t, "g2");
    guest_verify(t);
    fix_stop(t);
    grow_chain = false;
    g_assert_cmpint(stat(base, &st), ==, 0);
    g_assert_cmpint(st.st_size, ==, 3 * 1024 * 1024);
    vb_sh("cd '%s' && qemu-img compare -q -s -f raw -F raw base.raw "
          "mid-view.raw", t->d.dir);
    check_clean(top);
    {
        const char *files[] = { "top.qcow2", "base.raw" };
        const char *fmts[] = { "qcow2", "raw" };
        const char *named[] = { "base.raw" };

        check_chain(top, 2, files, fmts, named);
    }
    check_converted(t);
    fix_cleanup(t);
    g_free(t);
}

/* The refusals, then a job cancelled midway (held by its speed limit):
 * the chain stays as it was, and usable. */
static void test_stream_refuse_cancel(void)
{
    g_autofree char *top = NULL, *ro = NULL, *cmd = NULL, *st = NULL;
    g_autoptr(JsonNode) jobs = NULL;
    JsonObject *j;
    Fix *t = g_new0(Fix, 1);

    fix_start(t, false, false);
    top = path_in(t, "top.qcow2");
    ro = path_in(t, "ro.qcow2");
    guest_write(t, 0, 4096, 5);
    qmp_fails(t, "{\"execute\": \"block-stream\", \"arguments\": "
              "{\"device\": \"nope\"}}",
              "Cannot find device='nope' nor node-name='nope'");
    qmp_fails(t, "{\"execute\": \"block-stream\", \"arguments\": "
              "{\"device\": \"f0\"}}",
              "Node 'f0' is not a qcow2 node: only an image with a backing "
              "file can be streamed into");
    qmp_fails(t, "{\"execute\": \"block-stream\", \"arguments\": "
              "{\"device\": \"top\", \"base\": \"x\", \"base-node\": "
              "\"f0\"}}",
              "'base' and 'base-node' cannot be specified at the same time");
    qmp_fails(t, "{\"execute\": \"block-stream\", \"arguments\": "
              "{\"device\": \"top\", \"base-node\": \"f0\"}}",
              "Node 'f0' is not a backing image of 'top'");
    qmp_fails(t, "{\"execute\": \"block-stream\", \"arguments\": "
              "{\"device\": \"top\", \"base\": \"other.qcow2\"}}",
              "Can't find 'other.qcow2' in the backing chain of 'top'");
    qmp_fails(t, "{\"execute\": \"block-stream\", \"arguments\": "
              "{\"device\": \"top\", \"backing-file\": \"b\"}}",
              "backing file specified, but streaming the entire chain");
    qmp_fails(t, "{\"execute\": \"block-stream\", \"arguments\": "
              "{\"device\": \"top\", \"bottom\": \"f0\"}}",
              "Parameter 'bottom' is not supported: give the base with "
              "base-node or base");
    qmp_fails(t, "{\"execute\": \"block-stream\", \"arguments\": "
              "{\"device\": \"top\", \"on-error\": \"enospc\"}}",
              "on-error=enospc is not supported: use report, ignore or "
              "stop");
    /* A read-only top; a top without a backing file. */
    vb_sh("qemu-img create -q -f qcow2 '%s' 4M", ro);
    cmd = g_strdup_printf("{\"execute\": \"blockdev-add\", \"arguments\": "
                          "{\"driver\": \"qcow2\", \"node-name\": \"ro\", "
                          "\"read-only\": true, \"file\": {\"driver\": "
                          "\"file\", \"filename\": \"%s\", \"read-only\": "
                          "true}}}", ro);
    qmp_ok(t, cmd);
    qmp_fails(t, "{\"execute\": \"block-stream\", \"arguments\": "
              "{\"device\": \"ro\"}}",
              "Node 'ro' is read-only: block-stream writes into it; add it "
              "without read-only=on");
    qmp_ok(t, "{\"execute\": \"blockdev-del\", \"arguments\": "
           "{\"node-name\": \"ro\"}}");
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\": \"blockdev-add\", \"arguments\": "
                          "{\"driver\": \"qcow2\", \"node-name\": \"nb\", "
                          "\"file\": {\"driver\": \"file\", \"filename\": "
                          "\"%s\"}}}", ro);
    qmp_ok(t, cmd);
    qmp_fails(t, "{\"execute\": \"block-stream\", \"arguments\": "
              "{\"device\": \"nb\"}}",
              "Node 'nb' has no backing file: there is nothing to stream");
    qmp_ok(t, "{\"execute\": \"blockdev-del\", \"arguments\": "
           "{\"node-name\": \"nb\"}}");

    /* 1 byte/s: after its first chunk the job waits, running. */
    qmp_ok(t, "{\"execute\": \"block-stream\", \"arguments\": "
           "{\"job-id\": \"slow\", \"device\": \"top\", \"speed\": 1, "
           "\"auto-dismiss\": false}}");
    jobs = qmp(t, "{\"execute\": \"query-jobs\"}", NULL);
    j = json_array_get_object_element(json_node_get_array(jobs), 0);
    g_assert_cmpstr(json_object_get_string_member(j, "type"), ==, "stream");
    g_assert_cmpint(json_object_get_int_member(j, "total-progress"), ==,
                    IMG_SIZE);
    /* A node busy with a job. */
    qmp_fails(t, "{\"execute\": \"block-stream\", \"arguments\": "
              "{\"job-id\": \"s2\", \"device\": \"top\"}}",
              "Node 'top' is busy: it is in use by another block job, "
              "snapshot or resize; wait for it to end");
    /* Its nodes keep their size while it runs (QEMU's op blockers). */
    qmp_fails(t, "{\"execute\": \"block_resize\", \"arguments\": "
              "{\"node-name\": \"top\", \"size\": 8388608}}",
              "Node 'top' is in use by block job 'slow', which needs its "
              "size unchanged: wait for the job to end or cancel it, then "
              "resize");
    qmp_fails(t, "{\"execute\": \"block_resize\", \"arguments\": "
              "{\"node-name\": \"f0\", \"size\": 8388608}}",
              "Node 'f0' is in use by block job 'slow', which needs its "
              "size unchanged: wait for the job to end or cancel it, then "
              "resize");
    /* Paused and resumed: the verbs reach it. */
    qmp_ok(t, "{\"execute\": \"job-pause\", \"arguments\": "
           "{\"id\": \"slow\"}}");
    wait_status(t, "slow", "paused");
    qmp_ok(t, "{\"execute\": \"job-resume\", \"arguments\": "
           "{\"id\": \"slow\"}}");
    wait_status(t, "slow", "running");
    guest_write(t, 64 * 1024, 4096, 6);
    qmp_ok(t, "{\"execute\": \"block-job-cancel\", \"arguments\": "
           "{\"device\": \"slow\"}}");
    wait_event(t, "BLOCK_JOB_CANCELLED");
    qmp_ok(t, "{\"execute\": \"job-dismiss\", \"arguments\": "
           "{\"id\": \"slow\"}}");
    wait_null(t, "slow");
    st = statuses(t, "slow");
    g_assert_cmpstr(st, ==, "created running paused running aborting "
                    "concluded null");
    guest_verify(t);
    guest_write(t, 3 * 1024 * 1024, 128 * 1024, 7);
    guest_verify(t);
    fix_stop(t);

    check_clean(top);
    {
        const char *files[] = { "top.qcow2", "mid.qcow2", "base.qcow2" };
        const char *fmts[] = { "qcow2", "qcow2", "qcow2" };
        const char *named[] = { "mid.qcow2", "base.qcow2" };

        check_chain(top, 3, files, fmts, named);
    }
    check_converted(t);
    fix_cleanup(t);
    g_free(t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    if (vb_sh_status(NULL, "qemu-img --version >/dev/null && "
                     "qemu-io --version >/dev/null")) {
        g_test_skip("qemu-img/qemu-io not installed (qemu-utils)");
        return g_test_run();
    }
    g_test_add_func("/blkd/stream/base", test_stream_base);
    g_test_add_func("/blkd/stream/all", test_stream_all);
    g_test_add_func("/blkd/stream/named", test_stream_named);
    g_test_add_func("/blkd/commit/intermediate", test_commit);
    g_test_add_func("/blkd/commit/active", test_commit_active);
    g_test_add_func("/blkd/commit/chain", test_commit_chain);
    g_test_add_func("/blkd/commit/held", test_commit_held);
    g_test_add_func("/blkd/commit/active-ro", test_commit_active_ro);
    g_test_add_func("/blkd/stream/refuse-cancel", test_stream_refuse_cancel);
    g_test_add_func("/blkd/stream/short-mid", test_short_mid);
    g_test_add_func("/blkd/commit/grow", test_commit_grow);
    g_test_add_func("/blkd/commit/active-chain", test_commit_active_chain);
    return g_test_run();
}
