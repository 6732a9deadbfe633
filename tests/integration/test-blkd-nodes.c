/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests of vhost-blkd's named nodes over QMP:
 *  - quit while a block_resize of an rbd image waits in its worker: the
 *    image, and a raw node the resize went through, are left open for
 *    the exiting process, never closed under the worker.  The rbd driver
 *    module is tests/integration/fake-rbd.c (VHOST_BLK_MODULE_DIR), whose
 *    resize waits on a FIFO the test holds and which aborts the daemon if
 *    the image is closed meanwhile: no Ceph cluster needed;
 *  - an inline file child cannot take its parent's node-name (the two
 *    nodes of one name could never be deleted).
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"
#include "vb-qmp.h"

#include <json-glib/json-glib.h>
#include <sys/stat.h>
#include <sys/wait.h>

typedef struct Fixture {
    VbDaemon d;
    char *qmp_path;
    char *gate;                 /* the fake rbd resize's FIFO */
    VbQmp q;
} Fixture;

static void fixture_setup(Fixture *f, gconstpointer data)
{
    static const VbExportSpec specs[] = {
        { .null_driver = true },
    };
    g_autofree char *chardev = NULL;

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 1, specs);
    f->qmp_path = g_strdup_printf("%s/qmp.sock", f->d.dir);
    f->gate = g_strdup_printf("%s/gate", f->d.dir);
    g_assert_cmpint(mkfifo(f->gate, 0600), ==, 0);
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
    vb_qmp_connect(&f->q, f->qmp_path, &f->d);
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vb_qmp_close(&f->q);
    vb_daemon_kill(&f->d);
    unlink(f->gate);
    unlink(f->qmp_path);
    g_free(f->gate);
    g_free(f->qmp_path);
    vb_daemon_cleanup(&f->d);
}

/* Whether query-named-block-nodes lists @name, and how often. */
static unsigned int node_count(Fixture *f, const char *name)
{
    g_autoptr(JsonNode) r = vb_qmp(&f->q,
        "{\"execute\":\"query-named-block-nodes\"}", NULL);
    JsonArray *a = json_node_get_array(r);
    unsigned int n = 0;

    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *o = json_array_get_object_element(a, i);

        n += !strcmp(json_object_get_string_member(o, "node-name"), name);
    }
    return n;
}

/* ---- quit during an rbd resize ----------------------------------------- */

/*
 * @data: the node block_resize names, "img" (the rbd node) or "fmt" (a
 * raw node over it, which shares its image).
 */
static void test_resize_quit(Fixture *f, gconstpointer data)
{
    const char *target = data;
    g_autofree char *add = NULL;
    g_autofree char *resize = NULL;
    g_autofree char *log = NULL;
    VbQmp q2;
    int gate, status;

    if (!g_getenv("VHOST_BLK_MODULE_DIR")) {
        g_test_skip("no rbd support in this build (fake-rbd.c not built)");
        return;
    }
    add = g_strdup_printf(
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":\"rbd\","
        "\"node-name\":\"img\",\"pool\":\"p\",\"image\":\"i\","
        "\"conf\":\"%s\"}}", f->gate);
    vb_qmp_ok(&f->q, add);
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":\"raw\","
        "\"node-name\":\"fmt\",\"file\":\"img\"}}");
    /* Larger than the image: a resize in the worker.  Its reply would
     * come when the gate opens; this connection waits for it. */
    resize = g_strdup_printf(
        "{\"execute\":\"block_resize\",\"arguments\":{\"node-name\":"
        "\"%s\",\"size\":2097152}}\n", target);
    g_assert_cmpint(write(f->q.fd, resize, strlen(resize)), ==,
                    strlen(resize));
    /* Returns once the worker opened the FIFO: the resize runs. */
    gate = open(f->gate, O_WRONLY | O_CLOEXEC);
    g_assert_cmpint(gate, >=, 0);

    vb_qmp_connect(&q2, f->qmp_path, &f->d);
    vb_qmp_ok(&q2, "{\"execute\":\"quit\"}");
    vb_qmp_close(&q2);
    g_assert_cmpint(waitpid(f->d.pid, &status, 0), ==, f->d.pid);
    f->d.pid = 0;
    close(gate);

    g_assert_true(g_file_get_contents(f->d.log_path, &log, NULL, NULL));
    g_test_message("daemon log:\n%s", log);
    /* Not killed by fake-rbd's abort(): nothing closed the image. */
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    g_assert_null(strstr(log, "closed while its resize runs"));
    g_assert_nonnull(strstr(log, "node 'img': a block_resize is still "
                            "waiting for the cluster; not closing it"));
    if (!strcmp(target, "fmt")) {
        g_assert_nonnull(strstr(log, "node 'fmt': a block_resize is "
                                "still waiting for the cluster; not "
                                "closing it"));
    }
}

/* While the resize runs, neither node can go, nor be resized again. */
static void test_resize_busy(Fixture *f, gconstpointer data)
{
    g_autofree char *add = NULL;
    g_autofree char *reply = NULL;
    static const char resize[] =
        "{\"execute\":\"block_resize\",\"arguments\":{\"node-name\":"
        "\"fmt\",\"size\":2097152}}\n";
    VbQmp q2;
    int gate;

    if (!g_getenv("VHOST_BLK_MODULE_DIR")) {
        g_test_skip("no rbd support in this build (fake-rbd.c not built)");
        return;
    }
    add = g_strdup_printf(
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":\"rbd\","
        "\"node-name\":\"img\",\"pool\":\"p\",\"image\":\"i\","
        "\"conf\":\"%s\"}}", f->gate);
    vb_qmp_ok(&f->q, add);
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":\"raw\","
        "\"node-name\":\"fmt\",\"file\":\"img\"}}");
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":\"raw\","
        "\"node-name\":\"fmt2\",\"file\":\"img\"}}");
    g_assert_cmpint(write(f->q.fd, resize, strlen(resize)), ==,
                    strlen(resize));
    gate = open(f->gate, O_WRONLY | O_CLOEXEC);
    g_assert_cmpint(gate, >=, 0);

    vb_qmp_connect(&q2, f->qmp_path, &f->d);
    vb_qmp_fails(&q2,
        "{\"execute\":\"block_resize\",\"arguments\":{\"node-name\":"
        "\"img\",\"size\":4194304}}",
        "Node 'img' is being resized already (an earlier block_resize "
        "has not returned yet); wait for its reply");
    vb_qmp_fails(&q2,
        "{\"execute\":\"block_resize\",\"arguments\":{\"node-name\":"
        "\"fmt2\",\"size\":4194304}}",
        "Node 'fmt2' is being resized already: a block_resize of its file "
        "node 'img' has not returned yet; wait for its reply");
    vb_qmp_fails(&q2,
        "{\"execute\":\"blockdev-del\",\"arguments\":{\"node-name\":"
        "\"fmt\"}}",
        "Node 'fmt' is being resized (its block_resize has not returned "
        "yet); delete it after that command's reply");
    /* The worker resizes the image: release it, then the reply comes. */
    g_assert_cmpint(write(gate, "x", 1), ==, 1);
    close(gate);
    reply = vb_qmp_line(&f->q);
    g_assert_nonnull(strstr(reply, "\"return\""));
    vb_qmp_ok(&q2,
        "{\"execute\":\"blockdev-del\",\"arguments\":{\"node-name\":"
        "\"fmt\"}}");
    vb_qmp_ok(&q2,
        "{\"execute\":\"blockdev-del\",\"arguments\":{\"node-name\":"
        "\"fmt2\"}}");
    vb_qmp_ok(&q2,
        "{\"execute\":\"blockdev-del\",\"arguments\":{\"node-name\":"
        "\"img\"}}");
    vb_qmp_close(&q2);
    g_assert_true(vb_daemon_alive(&f->d));
}

/* ---- node names -------------------------------------------------------- */

static void test_inline_name(Fixture *f, gconstpointer data)
{
    static const char *const adds[] = {
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":\"raw\","
        "\"node-name\":\"X\",\"file\":{\"driver\":\"null-co\","
        "\"node-name\":\"X\"}}}",
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
        "\"throttle\",\"node-name\":\"X\",\"throttle-group\":\"tg0\","
        "\"file\":{\"driver\":\"null-co\",\"node-name\":\"X\"}}}",
        /* One level down: the middle node and its own file. */
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":\"raw\","
        "\"node-name\":\"X\",\"file\":{\"driver\":\"raw\","
        "\"node-name\":\"Y\",\"file\":{\"driver\":\"null-co\","
        "\"node-name\":\"Y\"}}}}",
    };
    static const char *const errs[] = {
        "Duplicate nodes with node-name='X': the inline file definition "
        "names its node 'X' too; give it a node-name of its own",
        "Duplicate nodes with node-name='X': the inline file definition "
        "names its node 'X' too; give it a node-name of its own",
        "raw: file: Duplicate nodes with node-name='Y': the inline file "
        "definition names its node 'Y' too; give it a node-name of its "
        "own",
    };

    vb_qmp_ok(&f->q,
        "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
        "\"throttle-group\",\"id\":\"tg0\",\"x-iops-total\":100}}");
    for (size_t i = 0; i < G_N_ELEMENTS(adds); i++) {
        vb_qmp_fails(&f->q, adds[i], errs[i]);
        /* Nothing of the failed command is left. */
        g_assert_cmpuint(node_count(f, "X"), ==, 0);
        g_assert_cmpuint(node_count(f, "Y"), ==, 0);
    }
    /* The name is free, and a node of that name goes again. */
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":\"raw\","
        "\"node-name\":\"X\",\"file\":{\"driver\":\"null-co\","
        "\"node-name\":\"Z\"}}}");
    g_assert_cmpuint(node_count(f, "X"), ==, 1);
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-del\",\"arguments\":{\"node-name\":\"X\"}}");
    g_assert_cmpuint(node_count(f, "X"), ==, 0);
    g_assert_cmpuint(node_count(f, "Z"), ==, 0);
    /* The object is unused again: every failed throttle node let go. */
    vb_qmp_ok(&f->q,
        "{\"execute\":\"object-del\",\"arguments\":{\"id\":\"tg0\"}}");
    g_assert_true(vb_daemon_alive(&f->d));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    if (vb_backend() != VB_BACKEND_VHOST_BLKD) {
        printf("1..0 # SKIP vhost-blkd's rbd module and messages\n");
        return 0;
    }
    g_test_add("/blkd-nodes/resize-quit/rbd", Fixture, "img",
               fixture_setup, test_resize_quit, fixture_teardown);
    g_test_add("/blkd-nodes/resize-quit/raw-over-rbd", Fixture, "fmt",
               fixture_setup, test_resize_quit, fixture_teardown);
    g_test_add("/blkd-nodes/resize-busy", Fixture, NULL, fixture_setup,
               test_resize_busy, fixture_teardown);
    g_test_add("/blkd-nodes/inline-name", Fixture, NULL, fixture_setup,
               test_inline_name, fixture_teardown);
    return g_test_run();
}
