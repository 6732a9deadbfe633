/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests of object-del, qom-list and qom-get "type" over QMP:
 * vhost-blkd with throttle groups tg0 (unused) and tg1 (used by the
 * --export ...,throttle-group=tg1 export g1), a secret sec0 and an
 * iothread io0.  Each case checks the error texts of QEMU's
 * user_creatable_del() and that a deleted id can be added again; one
 * reads the daemon's memory for the secret's key (/proc/PID/mem).
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"
#include "vb-qmp.h"

#include <json-glib/json-glib.h>
#include <sys/socket.h>
#include <sys/un.h>

typedef struct Fixture {
    VbDaemon d;
    char *qmp_path;
    char *key_path;
    VbQmp q;
} Fixture;

/* ---- QMP helpers (vb-qmp.h is the client) ------------------------------ */

static void object_del(Fixture *f, const char *id, const char *desc)
{
    g_autofree char *cmd = g_strdup_printf(
        "{\"execute\":\"object-del\",\"arguments\":{\"id\":\"%s\"}}", id);

    if (desc) {
        vb_qmp_fails(&f->q, cmd, desc);
    } else {
        vb_qmp_ok(&f->q, cmd);
    }
}

static void in_use(Fixture *f, const char *id)
{
    g_autofree char *desc = g_strdup_printf(
        "object '%s' is in use, can not be deleted", id);

    object_del(f, id, desc);
}

/* qom-list @path: the type of property @name, or NULL if not listed. */
static char *qom_list_type(Fixture *f, const char *path, const char *name)
{
    g_autofree char *cmd = g_strdup_printf(
        "{\"execute\":\"qom-list\",\"arguments\":{\"path\":\"%s\"}}", path);
    g_autoptr(JsonNode) r = vb_qmp(&f->q, cmd, NULL);
    JsonArray *a = json_node_get_array(r);

    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *o = json_array_get_object_element(a, i);

        if (!strcmp(json_object_get_string_member(o, "name"), name)) {
            return g_strdup(json_object_get_string_member(o, "type"));
        }
    }
    return NULL;
}

static void assert_listed(Fixture *f, const char *path, const char *name,
                          const char *type)
{
    g_autofree char *t = qom_list_type(f, path, name);

    if (g_strcmp0(t, type)) {
        g_error("qom-list %s: %s has type %s, want %s", path, name,
                t ? t : "(not listed)", type ? type : "(not listed)");
    }
}

static void fixture_setup(Fixture *f, gconstpointer data)
{
    static const VbExportSpec specs[] = {
        { .extra = "id=g1,throttle-group=tg1" },
    };
    g_autofree char *chardev = NULL;
    g_autofree char *secret = NULL;

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 1, specs);
    f->qmp_path = g_strdup_printf("%s/qmp.sock", f->d.dir);
    f->key_path = g_strdup_printf("%s/key", f->d.dir);
    g_assert_true(g_file_set_contents(f->key_path, "not-a-real-key", -1,
                                      NULL));
    chardev = g_strdup_printf("socket,id=mon,path=%s,server=on,wait=off",
                              f->qmp_path);
    secret = g_strdup_printf("secret,id=sec0,file=%s", f->key_path);
    {
        const char *args[] = {
            "--object", "throttle-group,id=tg0,limits.iops-total=100",
            "--object", "throttle-group,id=tg1,limits.iops-total=100",
            "--object", secret,
            "--object", "iothread,id=io0",
            "--chardev", chardev, "--monitor", "chardev=mon", NULL,
        };

        f->d.args = args;
        vb_daemon_start(&f->d);
        f->d.args = NULL;
    }
    vb_qmp_connect(&f->q, f->qmp_path, &f->d);
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vb_qmp_close(&f->q);
    g_free(f->qmp_path);
    g_free(f->key_path);
    vb_daemon_cleanup(&f->d);
}

/* ---- the daemon's memory ---------------------------------------------- */

/* Count the occurrences of @needle in @len bytes of the daemon's memory
 * at @start, read through @mem, into *@n. */
static void scan_region(int mem, uint64_t start, uint64_t len,
                        const char *needle, unsigned int *n)
{
    enum { CHUNK = 1 << 20 };
    size_t nlen = strlen(needle);
    g_autofree char *buf = g_malloc(CHUNK + nlen);
    uint64_t done = 0;

    while (done < len) {
        size_t want = MIN(len - done, (uint64_t)CHUNK + nlen - 1);
        ssize_t r = pread(mem, buf, want, start + done);
        const char *p = buf;

        if (r <= 0) {
            return;             /* [vvar] and the like: not readable */
        }
        while ((p = memmem(p, buf + r - p, needle, nlen))) {
            (*n)++;
            p++;
        }
        if ((size_t)r < want || done + r >= len) {
            return;
        }
        /* The next chunk repeats the last nlen - 1 bytes. */
        done += r - (nlen - 1);
    }
}

/*
 * How often @needle is in the daemon's readable memory: in mappings that
 * a core dump leaves out (smaps VmFlags "dd"), *@in_dd, and in the
 * others, *@other.  Mappings with nothing resident, and huge ones (a
 * sanitizer's shadow: terabytes reserved), are skipped: reading them
 * would only fault in zeroes.  False if its memory cannot be read.
 */
static bool scan_memory(Fixture *f, const char *needle, unsigned int *in_dd,
                        unsigned int *other)
{
    g_autofree char *smaps_path = g_strdup_printf("/proc/%d/smaps",
                                                  (int)f->d.pid);
    g_autofree char *mem_path = g_strdup_printf("/proc/%d/mem",
                                                (int)f->d.pid);
    g_autofree char *smaps = NULL;
    g_auto(GStrv) lines = NULL;
    uint64_t start = 0, end = 0, rss = 0;
    char perms[8] = "";
    int mem;

    *in_dd = *other = 0;
    mem = open(mem_path, O_RDONLY | O_CLOEXEC);
    if (mem < 0 || !g_file_get_contents(smaps_path, &smaps, NULL, NULL)) {
        if (mem >= 0) {
            close(mem);
        }
        return false;
    }
    lines = g_strsplit(smaps, "\n", -1);
    for (char **l = lines; *l; l++) {
        uint64_t s0, e0;
        char p0[8];

        if (sscanf(*l, "%" SCNx64 "-%" SCNx64 " %7s", &s0, &e0, p0) == 3) {
            start = s0;
            end = e0;
            rss = 0;
            g_strlcpy(perms, p0, sizeof(perms));
        } else if (sscanf(*l, "Rss: %" SCNu64, &s0) == 1) {
            rss = s0;
        } else if (g_str_has_prefix(*l, "VmFlags:") && perms[0] == 'r' &&
                   rss && end - start <= (1ULL << 30)) {
            /* The last line of a mapping's entry. */
            scan_region(mem, start, end - start, needle,
                        strstr(*l, " dd") ? in_dd : other);
        }
    }
    close(mem);
    return true;
}

/* ---- cases ------------------------------------------------------------- */

static void test_unknown(Fixture *f, gconstpointer data)
{
    object_del(f, "nope", "object 'nope' not found");
    /* A node or an export is no object. */
    object_del(f, "g1", "object 'g1' not found");
    vb_qmp_fails(&f->q,
        "{\"execute\":\"object-del\"}",
        "Parameter 'id' is missing");
    vb_qmp_fails(&f->q,
        "{\"execute\":\"qom-list\"}",
        "Parameter 'path' is missing");
    vb_qmp_fails(&f->q,
        "{\"execute\":\"qom-get\"}",
        "Parameter 'path' is missing");
    vb_qmp_fails(&f->q,
        "{\"execute\":\"object-del\",\"arguments\":{\"id\":"
        "\"tg0\",\"force\":true}}", "Parameter 'force' is unexpected");
    vb_qmp_fails(&f->q,
        "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
        "\"/objects/tg0\",\"property\":\"nope\"}}",
        "Property 'throttle-group.nope' not found (use limits or an "
        "x-* limit such as x-iops-total)");
    g_assert_true(vb_daemon_alive(&f->d));
}

static void test_commands_listed(Fixture *f, gconstpointer data)
{
    g_autoptr(JsonNode) r = vb_qmp(&f->q,
        "{\"execute\":\"query-commands\"}", NULL);
    JsonArray *a = json_node_get_array(r);
    bool del = false, list = false;

    for (guint i = 0; i < json_array_get_length(a); i++) {
        const char *n = json_object_get_string_member(
            json_array_get_object_element(a, i), "name");

        del |= !strcmp(n, "object-del");
        list |= !strcmp(n, "qom-list");
    }
    g_assert_true(del);
    g_assert_true(list);
}

/* An unused group goes at once; its id can be reused. */
static void test_tg_unused(Fixture *f, gconstpointer data)
{
    object_del(f, "tg0", NULL);
    assert_listed(f, "/objects", "tg0", NULL);
    object_del(f, "tg0", "object 'tg0' not found");
    vb_qmp_ok(&f->q,
        "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
        "\"throttle-group\",\"id\":\"tg0\",\"x-iops-total\":7}}");
    assert_listed(f, "/objects", "tg0", "child<throttle-group>");
}

/* A group used by a driver=throttle node, exported: refused until the
 * export and then the node are gone. */
static void test_tg_node(Fixture *f, gconstpointer data)
{
    g_autofree char *add = g_strdup_printf(
        "{\"execute\":\"block-export-add\",\"arguments\":{\"type\":"
        "\"vhost-user-blk\",\"id\":\"e1\",\"node-name\":\"t1\",\"addr\":"
        "{\"type\":\"unix\",\"path\":\"%s/e1.sock\"}}}", f->d.dir);

    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
        "\"null-co\",\"node-name\":\"n1\",\"size\":1048576}}");
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
        "\"throttle\",\"node-name\":\"t1\",\"throttle-group\":\"tg0\","
        "\"file\":\"n1\"}}");
    in_use(f, "tg0");
    vb_qmp_ok(&f->q, add);
    in_use(f, "tg0");
    vb_qmp_ok(&f->q,
        "{\"execute\":\"block-export-del\",\"arguments\":{\"id\":"
        "\"e1\"}}");
    in_use(f, "tg0");               /* the node still holds it */
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-del\",\"arguments\":{\"node-name\":"
        "\"t1\"}}");
    object_del(f, "tg0", NULL);
    assert_listed(f, "/objects", "tg0", NULL);
    /* Gone for new nodes... */
    {
        g_autofree char *err = NULL;

        g_assert_null(vb_qmp(&f->q,
            "{\"execute\":\"blockdev-add\",\"arguments\":"
            "{\"driver\":\"throttle\",\"node-name\":\"t1\","
            "\"throttle-group\":\"tg0\",\"file\":\"n1\"}}",
            &err));
        g_assert_nonnull(strstr(err, "Throttle group 'tg0' not found"));
    }
    /* ... and the id is free for a new object of that name. */
    vb_qmp_ok(&f->q,
        "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
        "\"throttle-group\",\"id\":\"tg0\",\"x-iops-total\":50}}");
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
        "\"throttle\",\"node-name\":\"t1\",\"throttle-group\":\"tg0\","
        "\"file\":\"n1\"}}");
    in_use(f, "tg0");
    {
        g_autoptr(JsonNode) v = vb_qmp(&f->q,
            "{\"execute\":\"qom-get\","
            "\"arguments\":{\"path\":\"/objects/tg0\","
            "\"property\":\"x-iops-total\"}}", NULL);

        g_assert_cmpint(json_node_get_int(v), ==, 50);
    }
    g_assert_true(vb_daemon_alive(&f->d));
}

/* A group an --export ...,throttle-group=ID uses: refused while the
 * export is there, and while its node is. */
static void test_tg_export(Fixture *f, gconstpointer data)
{
    in_use(f, "tg1");
    vb_check_export_works(&f->d, 0);
    vb_qmp_ok(&f->q,
        "{\"execute\":\"block-export-del\",\"arguments\":{\"id\":"
        "\"g1\"}}");
    in_use(f, "tg1");
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-del\",\"arguments\":{\"node-name\":"
        "\"g1\"}}");
    object_del(f, "tg1", NULL);
    vb_qmp_ok(&f->q,
        "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
        "\"throttle-group\",\"id\":\"tg1\",\"limits\":{\"iops-total\":"
        "10}}}");
    assert_listed(f, "/objects", "tg1", "child<throttle-group>");
}

/* A secret goes at once; a later blockdev-add naming it fails cleanly;
 * the id can be added again. */
static void test_secret(Fixture *f, gconstpointer data)
{
    g_autofree char *readd = g_strdup_printf(
        "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":\"secret\","
        "\"id\":\"sec0\",\"file\":\"%s\"}}", f->key_path);
    g_autofree char *err = NULL;

    object_del(f, "sec0", NULL);
    object_del(f, "sec0", "object 'sec0' not found");
    assert_listed(f, "/objects", "sec0", NULL);
    g_assert_null(vb_qmp(&f->q,
        "{\"execute\":\"blockdev-add\",\"arguments\":{"
        "\"driver\":\"rbd\",\"node-name\":\"r0\",\"pool\":"
        "\"rbd\",\"image\":\"img\",\"key-secret\":\"sec0\"}}",
        &err));
    g_assert_cmpstr(err, ==, "No secret with id 'sec0'");
    vb_qmp_ok(&f->q, readd);
    assert_listed(f, "/objects", "sec0", "child<secret>");
    g_assert_true(vb_daemon_alive(&f->d));
}

/*
 * The secret's key is only in pages a core dump leaves out, and in no
 * other copy (the file's raw bytes included); deleted, it is nowhere.
 */
static void test_secret_memory(Fixture *f, gconstpointer data)
{
    static const char key[] = "not-a-real-key";    /* fixture_setup() */
    g_autofree char *b64 = g_base64_encode((const guchar *)key,
                                           strlen(key));
    unsigned int in_dd = 0, other = 0;

    if (!scan_memory(f, b64, &in_dd, &other)) {
        g_test_skip("cannot read the daemon's memory (/proc/PID/mem)");
        return;
    }
    g_assert_cmpuint(other, ==, 0);
    g_assert_cmpuint(in_dd, ==, 1);
    g_assert_true(scan_memory(f, key, &in_dd, &other));
    g_assert_cmpuint(in_dd + other, ==, 0);

    object_del(f, "sec0", NULL);
    g_assert_true(scan_memory(f, b64, &in_dd, &other));
    g_assert_cmpuint(in_dd + other, ==, 0);
    g_assert_true(vb_daemon_alive(&f->d));
}

/* format=base64: the key as ceph auth get-key prints it (a newline
 * after it), kept as it is; a file that is not base64, or too large to
 * be a key, is refused. */
static void test_secret_base64(Fixture *f, gconstpointer data)
{
    static const char key[] = "vhost-blk-test-key-b64";
    g_autofree char *b64 = g_base64_encode((const guchar *)key,
                                           strlen(key));
    g_autofree char *text = g_strdup_printf("%s\n", b64);
    g_autofree char *path = g_strdup_printf("%s/key64", f->d.dir);
    g_autofree char *big = g_strnfill(70 * 1024, 'A');
    g_autofree char *add = g_strdup_printf(
        "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":\"secret\","
        "\"id\":\"s64\",\"file\":\"%s\",\"format\":\"base64\"}}", path);
    g_autofree char *notb64 = g_strdup_printf(
        "secret 's64': %s is not base64 (format=base64 wants the key as "
        "ceph auth get-key prints it)", path);
    g_autofree char *toobig = g_strdup_printf(
        "secret 's64': %s is larger than 64 KiB; give the file that holds "
        "just the key", path);
    unsigned int in_dd = 0, other = 0;

    g_assert_true(g_file_set_contents(path, "not base64!", -1, NULL));
    vb_qmp_fails(&f->q, add, notb64);
    g_assert_true(g_file_set_contents(path, "Q", -1, NULL));
    vb_qmp_fails(&f->q, add, notb64);
    g_assert_true(g_file_set_contents(path, big, -1, NULL));
    vb_qmp_fails(&f->q, add, toobig);
    g_assert_true(g_file_set_contents(path, text, -1, NULL));
    vb_qmp_ok(&f->q, add);
    unlink(path);
    assert_listed(f, "/objects", "s64", "child<secret>");
    if (scan_memory(f, b64, &in_dd, &other)) {
        g_assert_cmpuint(other, ==, 0);
        g_assert_cmpuint(in_dd, ==, 1);
    }
    object_del(f, "s64", NULL);
}

/* An iothread running an export's queue stays; once the export is gone
 * the thread is stopped and the id is free. */
static void test_iothread(Fixture *f, gconstpointer data)
{
    g_autofree char *add = g_strdup_printf(
        "{\"execute\":\"block-export-add\",\"arguments\":{\"type\":"
        "\"vhost-user-blk\",\"id\":\"e2\",\"node-name\":\"n2\",\"iothread\":"
        "\"io0\",\"addr\":{\"type\":\"unix\",\"path\":\"%s/e2.sock\"}}}",
        f->d.dir);
    g_autoptr(JsonNode) r = NULL;

    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
        "\"null-co\",\"node-name\":\"n2\",\"size\":1048576}}");
    vb_qmp_ok(&f->q, add);
    in_use(f, "io0");
    vb_qmp_ok(&f->q,
        "{\"execute\":\"block-export-del\",\"arguments\":{\"id\":"
        "\"e2\"}}");
    object_del(f, "io0", NULL);
    r = vb_qmp(&f->q, "{\"execute\":\"query-iothreads\"}", NULL);
    g_assert_cmpuint(json_array_get_length(json_node_get_array(r)), ==, 0);
    vb_qmp_ok(&f->q,
        "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
        "\"iothread\",\"id\":\"io0\"}}");
    vb_qmp_ok(&f->q, add);
    vb_check_export_works(&f->d, 0);
    g_assert_true(vb_daemon_alive(&f->d));
}

static void test_qom_list(Fixture *f, gconstpointer data)
{
    g_autoptr(JsonNode) t = NULL;

    assert_listed(f, "/", "objects", "child<container>");
    assert_listed(f, "/objects", "type", "string");
    assert_listed(f, "/objects", "tg0", "child<throttle-group>");
    assert_listed(f, "/objects", "tg1", "child<throttle-group>");
    assert_listed(f, "/objects", "sec0", "child<secret>");
    assert_listed(f, "/objects", "io0", "child<iothread>");
    assert_listed(f, "/objects", "g1", NULL);
    assert_listed(f, "/objects/tg0", "type", "string");
    assert_listed(f, "/objects/tg0", "limits", "ThrottleLimits");
    assert_listed(f, "/objects/tg0", "x-iops-total", "int");
    assert_listed(f, "/objects/tg0", "x-bps-write-max-length", "int");
    assert_listed(f, "/objects/tg0", "x-iops-size", "int");
    assert_listed(f, "/objects/sec0", "type", "string");
    assert_listed(f, "/objects/io0", "type", "string");
    vb_qmp_fails(&f->q,
        "{\"execute\":\"qom-list\",\"arguments\":{\"path\":"
        "\"/objects/nope\"}}", "Device '/objects/nope' not found");
    vb_qmp_fails(&f->q,
        "{\"execute\":\"qom-list\",\"arguments\":{\"path\":"
        "\"/machine\"}}", "Device '/machine' not found");
    t = vb_qmp(&f->q,
        "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
        "\"/objects/sec0\",\"property\":\"type\"}}", NULL);
    g_assert_cmpstr(json_node_get_string(t), ==, "secret");
    json_node_unref(t);
    t = vb_qmp(&f->q,
        "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
        "\"/objects/tg1\",\"property\":\"type\"}}", NULL);
    g_assert_cmpstr(json_node_get_string(t), ==, "throttle-group");
    json_node_unref(t);
    t = vb_qmp(&f->q,
        "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
        "\"/objects\",\"property\":\"type\"}}", NULL);
    g_assert_cmpstr(json_node_get_string(t), ==, "container");
    /* Every property listed for a group reads back with qom-get. */
    {
        g_autoptr(JsonNode) r = vb_qmp(&f->q,
            "{\"execute\":\"qom-list\","
            "\"arguments\":{\"path\":"
            "\"/objects/tg0\"}}", NULL);
        JsonArray *a = json_node_get_array(r);

        for (guint i = 0; i < json_array_get_length(a); i++) {
            const char *n = json_object_get_string_member(
                json_array_get_object_element(a, i), "name");
            g_autofree char *cmd = g_strdup_printf(
                "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
                "\"/objects/tg0\",\"property\":\"%s\"}}", n);

            vb_qmp_ok(&f->q, cmd);
        }
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    if (vb_backend() != VB_BACKEND_VHOST_BLKD) {
        printf("1..0 # SKIP vhost-blkd's --export throttle-group= key\n");
        return 0;
    }
    g_test_add("/blkd-objects/unknown", Fixture, NULL, fixture_setup,
               test_unknown, fixture_teardown);
    g_test_add("/blkd-objects/query-commands", Fixture, NULL, fixture_setup,
               test_commands_listed, fixture_teardown);
    g_test_add("/blkd-objects/throttle-group-unused", Fixture, NULL,
               fixture_setup, test_tg_unused, fixture_teardown);
    g_test_add("/blkd-objects/throttle-group-node", Fixture, NULL,
               fixture_setup, test_tg_node, fixture_teardown);
    g_test_add("/blkd-objects/throttle-group-export", Fixture, NULL,
               fixture_setup, test_tg_export, fixture_teardown);
    g_test_add("/blkd-objects/secret", Fixture, NULL, fixture_setup,
               test_secret, fixture_teardown);
    g_test_add("/blkd-objects/secret-memory", Fixture, NULL, fixture_setup,
               test_secret_memory, fixture_teardown);
    g_test_add("/blkd-objects/secret-base64", Fixture, NULL, fixture_setup,
               test_secret_base64, fixture_teardown);
    g_test_add("/blkd-objects/iothread", Fixture, NULL, fixture_setup,
               test_iothread, fixture_teardown);
    g_test_add("/blkd-objects/qom-list", Fixture, NULL, fixture_setup,
               test_qom_list, fixture_teardown);
    return g_test_run();
}
