/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests of object-del, qom-list and qom-get "type" over QMP:
 * vhost-blkd with throttle groups tg0 (unused) and tg1 (used by the
 * --export ...,throttle-group=tg1 export g1), a secret sec0 and an
 * iothread io0.  Each case checks the error texts of QEMU's
 * user_creatable_del() and that a deleted id can be added again.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#include <json-glib/json-glib.h>
#include <sys/socket.h>
#include <sys/un.h>

typedef struct Fixture {
    VbDaemon d;
    char *qmp_path;
    char *key_path;
    int qmp;
    GString *in;
} Fixture;

/* ---- a minimal QMP client ---------------------------------------------- */

static char *qmp_line(Fixture *f)
{
    for (;;) {
        char *nl = strchr(f->in->str, '\n');
        char buf[4096];
        ssize_t n;

        if (nl) {
            char *line = g_strndup(f->in->str, nl - f->in->str);

            g_string_erase(f->in, 0, nl - f->in->str + 1);
            return line;
        }
        n = read(f->qmp, buf, sizeof(buf));
        g_assert_cmpint(n, >, 0);
        g_string_append_len(f->in, buf, n);
    }
}

/* Run @cmd (a JSON object); the reply's "return", or NULL and *@err (the
 * error's "desc"; the command must succeed when @err is NULL). */
static JsonNode *qmp(Fixture *f, const char *cmd, char **err)
{
    g_autofree char *msg = g_strdup_printf("%s\n", cmd);

    g_assert_cmpint(write(f->qmp, msg, strlen(msg)), ==, strlen(msg));
    for (;;) {
        g_autofree char *line = qmp_line(f);
        g_autoptr(JsonParser) p = json_parser_new();
        JsonObject *o;

        g_assert_true(json_parser_load_from_data(p, line, -1, NULL));
        o = json_node_get_object(json_parser_get_root(p));
        if (json_object_has_member(o, "event")) {
            continue;
        }
        if (json_object_has_member(o, "return")) {
            return json_node_copy(json_object_get_member(o, "return"));
        }
        g_assert_true(json_object_has_member(o, "error"));
        if (!err) {
            g_error("QMP %s failed: %s", cmd, line);
        }
        *err = g_strdup(json_object_get_string_member(
            json_object_get_object_member(o, "error"), "desc"));
        return NULL;
    }
}

static void qmp_ok(Fixture *f, const char *cmd)
{
    json_node_unref(qmp(f, cmd, NULL));
}

/* @cmd fails with exactly @desc. */
static void qmp_fails(Fixture *f, const char *cmd, const char *desc)
{
    g_autofree char *err = NULL;

    g_assert_null(qmp(f, cmd, &err));
    g_assert_cmpstr(err, ==, desc);
}

static void object_del(Fixture *f, const char *id, const char *desc)
{
    g_autofree char *cmd = g_strdup_printf(
        "{\"execute\":\"object-del\",\"arguments\":{\"id\":\"%s\"}}", id);

    if (desc) {
        qmp_fails(f, cmd, desc);
    } else {
        qmp_ok(f, cmd);
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
    g_autoptr(JsonNode) r = qmp(f, cmd, NULL);
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

static void qmp_connect(Fixture *f)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    g_autofree char *greeting = NULL;

    g_strlcpy(sa.sun_path, f->qmp_path, sizeof(sa.sun_path));
    for (int i = 0; i < 600; i++) {
        f->qmp = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(f->qmp, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            break;
        }
        close(f->qmp);
        f->qmp = -1;
        g_usleep(50 * 1000);    /* the daemon is starting: poll for it */
    }
    g_assert_cmpint(f->qmp, >=, 0);
    greeting = qmp_line(f);
    g_assert_nonnull(strstr(greeting, "QMP"));
    qmp_ok(f, "{\"execute\":\"qmp_capabilities\"}");
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
    f->in = g_string_new(NULL);
    qmp_connect(f);
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    if (f->qmp >= 0) {
        close(f->qmp);
    }
    g_string_free(f->in, true);
    g_free(f->qmp_path);
    g_free(f->key_path);
    vb_daemon_cleanup(&f->d);
}

/* ---- cases ------------------------------------------------------------- */

static void test_unknown(Fixture *f, gconstpointer data)
{
    object_del(f, "nope", "object 'nope' not found");
    /* A node or an export is no object. */
    object_del(f, "g1", "object 'g1' not found");
    qmp_fails(f, "{\"execute\":\"object-del\"}",
              "Parameter 'id' is missing");
    qmp_fails(f, "{\"execute\":\"qom-list\"}",
              "Parameter 'path' is missing");
    qmp_fails(f, "{\"execute\":\"qom-get\"}",
              "Parameter 'path' is missing");
    qmp_fails(f, "{\"execute\":\"object-del\",\"arguments\":{\"id\":"
              "\"tg0\",\"force\":true}}", "Parameter 'force' is unexpected");
    qmp_fails(f, "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
              "\"/objects/tg0\",\"property\":\"nope\"}}",
              "Property 'throttle-group.nope' not found (use limits or an "
              "x-* limit such as x-iops-total)");
    g_assert_true(vb_daemon_alive(&f->d));
}

static void test_commands_listed(Fixture *f, gconstpointer data)
{
    g_autoptr(JsonNode) r = qmp(f, "{\"execute\":\"query-commands\"}", NULL);
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
    qmp_ok(f, "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
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

    qmp_ok(f, "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
           "\"null-co\",\"node-name\":\"n1\",\"size\":1048576}}");
    qmp_ok(f, "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
           "\"throttle\",\"node-name\":\"t1\",\"throttle-group\":\"tg0\","
           "\"file\":\"n1\"}}");
    in_use(f, "tg0");
    qmp_ok(f, add);
    in_use(f, "tg0");
    qmp_ok(f, "{\"execute\":\"block-export-del\",\"arguments\":{\"id\":"
           "\"e1\"}}");
    in_use(f, "tg0");               /* the node still holds it */
    qmp_ok(f, "{\"execute\":\"blockdev-del\",\"arguments\":{\"node-name\":"
           "\"t1\"}}");
    object_del(f, "tg0", NULL);
    assert_listed(f, "/objects", "tg0", NULL);
    /* Gone for new nodes... */
    {
        g_autofree char *err = NULL;

        g_assert_null(qmp(f, "{\"execute\":\"blockdev-add\",\"arguments\":"
                          "{\"driver\":\"throttle\",\"node-name\":\"t1\","
                          "\"throttle-group\":\"tg0\",\"file\":\"n1\"}}",
                          &err));
        g_assert_nonnull(strstr(err, "Throttle group 'tg0' not found"));
    }
    /* ... and the id is free for a new object of that name. */
    qmp_ok(f, "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
           "\"throttle-group\",\"id\":\"tg0\",\"x-iops-total\":50}}");
    qmp_ok(f, "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
           "\"throttle\",\"node-name\":\"t1\",\"throttle-group\":\"tg0\","
           "\"file\":\"n1\"}}");
    in_use(f, "tg0");
    {
        g_autoptr(JsonNode) v = qmp(f, "{\"execute\":\"qom-get\","
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
    qmp_ok(f, "{\"execute\":\"block-export-del\",\"arguments\":{\"id\":"
           "\"g1\"}}");
    in_use(f, "tg1");
    qmp_ok(f, "{\"execute\":\"blockdev-del\",\"arguments\":{\"node-name\":"
           "\"g1\"}}");
    object_del(f, "tg1", NULL);
    qmp_ok(f, "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
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
    g_assert_null(qmp(f, "{\"execute\":\"blockdev-add\",\"arguments\":{"
                      "\"driver\":\"rbd\",\"node-name\":\"r0\",\"pool\":"
                      "\"rbd\",\"image\":\"img\",\"key-secret\":\"sec0\"}}",
                      &err));
    g_assert_cmpstr(err, ==, "No secret with id 'sec0'");
    qmp_ok(f, readd);
    assert_listed(f, "/objects", "sec0", "child<secret>");
    g_assert_true(vb_daemon_alive(&f->d));
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

    qmp_ok(f, "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
           "\"null-co\",\"node-name\":\"n2\",\"size\":1048576}}");
    qmp_ok(f, add);
    in_use(f, "io0");
    qmp_ok(f, "{\"execute\":\"block-export-del\",\"arguments\":{\"id\":"
           "\"e2\"}}");
    object_del(f, "io0", NULL);
    r = qmp(f, "{\"execute\":\"query-iothreads\"}", NULL);
    g_assert_cmpuint(json_array_get_length(json_node_get_array(r)), ==, 0);
    qmp_ok(f, "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
           "\"iothread\",\"id\":\"io0\"}}");
    qmp_ok(f, add);
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
    qmp_fails(f, "{\"execute\":\"qom-list\",\"arguments\":{\"path\":"
              "\"/objects/nope\"}}", "Device '/objects/nope' not found");
    qmp_fails(f, "{\"execute\":\"qom-list\",\"arguments\":{\"path\":"
              "\"/machine\"}}", "Device '/machine' not found");
    t = qmp(f, "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
            "\"/objects/sec0\",\"property\":\"type\"}}", NULL);
    g_assert_cmpstr(json_node_get_string(t), ==, "secret");
    json_node_unref(t);
    t = qmp(f, "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
            "\"/objects/tg1\",\"property\":\"type\"}}", NULL);
    g_assert_cmpstr(json_node_get_string(t), ==, "throttle-group");
    json_node_unref(t);
    t = qmp(f, "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
            "\"/objects\",\"property\":\"type\"}}", NULL);
    g_assert_cmpstr(json_node_get_string(t), ==, "container");
    /* Every property listed for a group reads back with qom-get. */
    {
        g_autoptr(JsonNode) r = qmp(f, "{\"execute\":\"qom-list\","
                                    "\"arguments\":{\"path\":"
                                    "\"/objects/tg0\"}}", NULL);
        JsonArray *a = json_node_get_array(r);

        for (guint i = 0; i < json_array_get_length(a); i++) {
            const char *n = json_object_get_string_member(
                json_array_get_object_element(a, i), "name");
            g_autofree char *cmd = g_strdup_printf(
                "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
                "\"/objects/tg0\",\"property\":\"%s\"}}", n);

            qmp_ok(f, cmd);
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
    g_test_add("/blkd-objects/iothread", Fixture, NULL, fixture_setup,
               test_iothread, fixture_teardown);
    g_test_add("/blkd-objects/qom-list", Fixture, NULL, fixture_setup,
               test_qom_list, fixture_teardown);
    return g_test_run();
}
