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
    g_test_add("/blkd-objects/iothread", Fixture, NULL, fixture_setup,
               test_iothread, fixture_teardown);
    g_test_add("/blkd-objects/qom-list", Fixture, NULL, fixture_setup,
               test_qom_list, fixture_teardown);
    return g_test_run();
}
