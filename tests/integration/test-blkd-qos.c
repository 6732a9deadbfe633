/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests of per-export QoS: vhost-blkd with four null exports
 * -- "thr" with its own iops-total limit and "free" without any in one
 * iothread, "g1" (same iothread) and "g2" (another) sharing the throttle
 * group tg0 -- and a QMP monitor.
 *
 * Every assertion is an upper bound or an ordering, never a speed: a
 * limit of R requests/s with its slack of R/10 lets through at most
 * R * t + R / 10 + 1 requests in t seconds counted from when they were
 * sent (block/throttle.c), however slow or loaded the machine is.  A
 * throttle that did nothing, or kept the old rate after a qom-set, breaks
 * the bound as soon as the machine is fast enough to send faster than R;
 * on a loaded machine the bound still holds.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"
#include "vb-qmp.h"

#include <json-glib/json-glib.h>
#include <linux/virtio_blk.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#define RATE_THR 100            /* export thr's own iops-total */
#define RATE_TG0 100            /* group tg0's */
#define BUF 4096

typedef struct Fixture {
    VbDaemon d;
    char *qmp_path;
    VbQmp q;
} Fixture;

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The most a limit of @rate lets through in @ns from the first send. */
static int64_t bound(int64_t rate, int64_t ns)
{
    return rate * ns / 1000000000LL + rate / 10 + 1;
}

/* ---- QMP queries (vb-qmp.h is the client) ------------------------------ */

/* x-query-vhost-blk-stats: member @m of export @id. */
static int64_t export_stat(Fixture *f, const char *id, const char *m)
{
    g_autoptr(JsonNode) r =
        vb_qmp(&f->q, "{\"execute\":\"x-query-vhost-blk-stats\"}", NULL);
    JsonArray *a = json_object_get_array_member(json_node_get_object(r),
                                                "exports");

    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonObject *e = json_array_get_object_element(a, i);

        if (!strcmp(json_object_get_string_member(e, "id"), id)) {
            return json_object_get_int_member(e, m);
        }
    }
    g_error("no export %s", id);
}

static void fixture_setup(Fixture *f, gconstpointer data)
{
    static const VbExportSpec specs[] = {
        { .null_driver = true, .extra = "id=thr,iops-total=100,iothread=0" },
        { .null_driver = true, .extra = "id=free,iothread=0" },
        { .null_driver = true, .extra = "id=g1,throttle-group=tg0,iothread=0" },
        { .null_driver = true, .extra = "id=g2,throttle-group=tg0,iothread=1" },
    };
    g_autofree char *chardev = NULL;

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 4, specs);
    f->qmp_path = g_strdup_printf("%s/qmp.sock", f->d.dir);
    chardev = g_strdup_printf("socket,id=mon,path=%s,server=on,wait=off",
                              f->qmp_path);
    {
        const char *args[] = {
            "--object", "throttle-group,id=tg0,limits.iops-total=100",
            "--chardev", chardev, "--monitor", "chardev=mon", NULL,
        };

        f->d.args = args;
        /* thr, free and g1 in iothread 0; g2 in iothread 1, so the
         * group is shared across iothreads. */
        f->d.iothreads = 2;
        vb_daemon_start(&f->d);
        f->d.args = NULL;
    }
    vb_qmp_connect(&f->q, f->qmp_path, &f->d);
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vb_qmp_close(&f->q);
    g_free(f->qmp_path);
    vb_daemon_cleanup(&f->d);
}

/* ---- I/O: keep @depth reads in flight until @target completed ---------- */

typedef struct Driver {
    VbDaemon *d;
    VhostUserFrontend *fe;
    uint8_t *buf;
    int depth, target, sent, done;
} Driver;

static void driver_init(Driver *v, Fixture *f, unsigned int i, int depth,
                        int target)
{
    g_autoptr(GError) err = NULL;

    memset(v, 0, sizeof(*v));
    v->d = &f->d;
    v->fe = vb_connect_started(&f->d, i, 0);
    v->buf = vhost_user_frontend_mem_alloc(v->fe, BUF, 4096, &err);
    g_assert_no_error(err);
    v->depth = depth;
    v->target = target;
}

/* Send what the depth allows, collect what completed; true: progress. */
static bool driver_step(Driver *v)
{
    VhostUserFrontendCompletion c[64];
    bool sent = false;
    int n;

    while (v->sent < v->target && v->sent - v->done < v->depth) {
        struct iovec iov = { v->buf, BUF };

        g_assert_cmpint(vhost_user_frontend_blk_submit(v->fe, 0,
                                                       VIRTIO_BLK_T_IN, 0,
                                                       &iov, 1, true, NULL),
                        >=, 0);
        v->sent++;
        sent = true;
    }
    if (sent) {
        g_assert_cmpint(vhost_user_frontend_kick(v->fe, 0), >=, 0);
    }
    n = vhost_user_frontend_reap(v->fe, 0, c, G_N_ELEMENTS(c));
    g_assert_cmpint(n, >=, 0);
    for (int i = 0; i < n; i++) {
        g_assert_cmpint(c[i].status, ==, VIRTIO_BLK_S_OK);
    }
    v->done += n;
    return n > 0 || sent;
}

/* Run @n drivers to their targets; the ns from the first send. */
static int64_t drive(Driver *v, int n)
{
    int64_t t0 = now_ns();
    bool all;

    do {
        bool progress = false;

        all = true;
        for (int i = 0; i < n; i++) {
            progress |= driver_step(&v[i]);
            all &= v[i].done == v[i].target;
        }
        if (!all && !progress) {
            /* A daemon that died (a sanitizer's report) answers nothing:
             * say so now rather than at the time limit. */
            if (!vb_daemon_alive(v[0].d)) {
                g_error("vhost-blkd exited with requests in flight: its "
                        "log above says why");
            }
            for (int i = 0; i < n; i++) {
                if (v[i].sent > v[i].done) {
                    vhost_user_frontend_wait_ns(v[i].fe, 0, 1000000);
                    break;
                }
            }
        }
        g_assert_cmpint(now_ns() - t0, <, 120 * 1000000000LL);
    } while (!all);
    return now_ns() - t0;
}

static void driver_free(Driver *v)
{
    vhost_user_frontend_free(v->fe);
}

/* An export's own limit: never more than the bound; the requests over it
 * are counted as throttled. */
static void test_export_limit(Fixture *f, gconstpointer data)
{
    Driver v;
    int64_t ns, thr;

    driver_init(&v, f, 0, 16, 150);
    ns = drive(&v, 1);
    g_test_message("thr: 150 requests in %.3f s (limit %d/s)", ns / 1e9,
                   RATE_THR);
    g_assert_cmpint(150, <=, bound(RATE_THR, ns));
    /* Those that went at once are within the bound too: the rest waited. */
    thr = export_stat(f, "thr", "throttled");
    g_assert_cmpint(thr, >=, 150 - bound(RATE_THR, ns));
    g_assert_cmpint(thr, <=, 150);
    g_assert_cmpint(export_stat(f, "thr", "throttled-ns"), >, 0);
    g_assert_cmpint(export_stat(f, "free", "throttled"), ==, 0);
    driver_free(&v);
}

/* Two exports of one group, in two iothreads, share its rate. */
static void test_group_shared(Fixture *f, gconstpointer data)
{
    Driver v[2];
    int64_t ns;

    driver_init(&v[0], f, 2, 8, 100);
    driver_init(&v[1], f, 3, 8, 100);
    ns = drive(v, 2);
    g_test_message("g1+g2: 200 requests in %.3f s (group limit %d/s)",
                   ns / 1e9, RATE_TG0);
    g_assert_cmpint(200, <=, bound(RATE_TG0, ns));
    g_assert_cmpint(export_stat(f, "g1", "throttled") +
                    export_stat(f, "g2", "throttled"), >=,
                    200 - bound(RATE_TG0, ns));
    driver_free(&v[0]);
    driver_free(&v[1]);
}

/* qom-set lowers the group's rate: the next window obeys the new bound,
 * qom-get shows it, bad values are refused with what to do. */
static void test_qom_set(Fixture *f, gconstpointer data)
{
    g_autoptr(JsonNode) lim = NULL;
    g_autofree char *err = NULL;
    Driver v;
    int64_t ns;

    vb_qmp_ok(&f->q,
        "{\"execute\":\"qom-set\",\"arguments\":{\"path\":\"tg0\","
        "\"property\":\"limits\",\"value\":{\"iops-total\":40}}}");
    lim = vb_qmp(&f->q,
        "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
        "\"/objects/tg0\",\"property\":\"limits\"}}", NULL);
    g_assert_cmpint(json_object_get_int_member(json_node_get_object(lim),
                                               "iops-total"), ==, 40);
    g_assert_null(vb_qmp(&f->q,
        "{\"execute\":\"qom-set\",\"arguments\":{\"path\":"
        "\"tg0\",\"property\":\"limits\",\"value\":"
        "{\"iops-total\":-5}}}", &err));
    g_assert_nonnull(strstr(err, "must not be negative"));
    g_clear_pointer(&err, g_free);
    g_assert_null(vb_qmp(&f->q,
        "{\"execute\":\"qom-set\",\"arguments\":{\"path\":"
        "\"tg9\",\"property\":\"limits\",\"value\":{}}}",
        &err));
    g_assert_nonnull(strstr(err, "tg9"));

    driver_init(&v, f, 2, 8, 60);
    ns = drive(&v, 1);
    g_test_message("g1 after qom-set: 60 requests in %.3f s (limit 40/s)",
                   ns / 1e9);
    g_assert_cmpint(60, <=, bound(40, ns));
    driver_free(&v);
}

/*
 * An export without a limit in the same iothread is not held back: it
 * completes its requests while the throttled one still has some waiting.
 * Then lifting the limit lets the waiting requests go at once.
 */
static void test_unthrottled_neighbour(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) gerr = NULL;
    VhostUserFrontend *free_fe = vb_connect_started(&f->d, 1, 0);
    uint8_t *buf = vhost_user_frontend_mem_alloc(free_fe, BUF, 4096, &gerr);
    Driver v;
    int64_t t0, ns, t_lift, drain_ns;
    int waiting;

    g_assert_no_error(gerr);
    /* The export's own limits, through its id. */
    vb_qmp_ok(&f->q,
        "{\"execute\":\"qom-set\",\"arguments\":{\"path\":\"thr\","
        "\"property\":\"limits\",\"value\":{\"iops-total\":1}}}");
    driver_init(&v, f, 0, 20, 20);
    t0 = now_ns();
    driver_step(&v);
    g_assert_cmpint(v.sent, ==, 20);
    for (int i = 0; i < 200; i++) {
        g_assert_cmpint(vb_req(free_fe, 0, VIRTIO_BLK_T_IN, 0, buf, BUF,
                               true, NULL), ==, VIRTIO_BLK_S_OK);
    }
    driver_step(&v);
    ns = now_ns() - t0;
    g_test_message("free: 200 requests in %.3f s while thr (1/s) completed "
                   "%d of 20", ns / 1e9, v.done);
    /* Ordering, not speed: at 1/s the throttled export can only have
     * completed this many, whatever the time was. */
    g_assert_cmpint(v.done, <=, bound(1, now_ns() - t0));
    waiting = 20 - v.done;
    g_assert_cmpint(export_stat(f, "free", "throttled"), ==, 0);

    if (waiting > 2) {
        /* Lift the limit: the waiting ones go now, not at 1/s. */
        t_lift = now_ns();
        vb_qmp_ok(&f->q,
            "{\"execute\":\"qom-set\",\"arguments\":{\"path\":"
            "\"thr\",\"property\":\"limits\",\"value\":"
            "{\"iops-total\":0}}}");
        drive(&v, 1);
        drain_ns = now_ns() - t_lift;
        g_test_message("after lifting the limit: %d waiting drained in "
                       "%.3f s", waiting, drain_ns / 1e9);
        /* At the old rate they would have needed >= waiting - 2 s. */
        g_assert_cmpint(drain_ns, <, (waiting - 2) * 1000000000LL);
    } else {
        g_test_message("the machine was too slow to keep requests waiting "
                       "(%.3f s); the lift is not checked", ns / 1e9);
    }
    driver_free(&v);
    vhost_user_frontend_free(free_fe);
}

/* A front-end that goes away with requests waiting: they are let out at
 * once (the drain does not wait for the limit), not at 1/s. */
static void test_disconnect_drains(Fixture *f, gconstpointer data)
{
    Driver v;
    int64_t t0, waited;
    int64_t waiting = 1;

    vb_qmp_ok(&f->q,
        "{\"execute\":\"qom-set\",\"arguments\":{\"path\":\"thr\","
        "\"property\":\"limits\",\"value\":{\"iops-total\":1}}}");
    driver_init(&v, f, 0, 20, 20);
    driver_step(&v);
    g_assert_cmpint(v.sent, ==, 20);
    /* Wait until the daemon has them all (popped: in flight). */
    t0 = now_ns();
    while (export_stat(f, "thr", "in-flight") + v.done < 20) {
        driver_step(&v);
        g_assert_cmpint(now_ns() - t0, <, 60 * 1000000000LL);
        g_usleep(10 * 1000);    /* polling the daemon's counters */
    }
    t0 = now_ns();
    driver_free(&v);
    while (waiting > 0 || export_stat(f, "thr", "in-flight") > 0) {
        waiting = export_stat(f, "thr", "throttle-waiting");
        g_assert_cmpint(now_ns() - t0, <, 60 * 1000000000LL);
        g_usleep(10 * 1000);
    }
    waited = now_ns() - t0;
    g_test_message("disconnected with %d waiting: drained in %.3f s",
                   20 - v.done, waited / 1e9);
    /* At 1/s the last would have gone after >= 17 s. */
    if (v.done < 2) {
        g_assert_cmpint(waited, <, 17 * 1000000000LL);
    }
    g_assert_true(vb_daemon_alive(&f->d));
}

/* The syntax errors say what is wrong and what to do. */
static void test_errors(Fixture *f, gconstpointer data)
{
    static const struct {
        const char *cmd, *msg;
    } cases[] = {
        { "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
          "\"throttle-group\",\"id\":\"bad\",\"limits\":{\"iops-total\":100,"
          "\"iops-total-max\":50}}}", "raise iops-total-max" },
        { "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
          "\"throttle-group\",\"id\":\"bad\",\"limits\":{\"bps-read\":-1}}}",
          "must not be negative" },
        { "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
          "\"throttle\",\"node-name\":\"t9\",\"throttle-group\":\"nope\","
          "\"file\":\"thr\"}}", "add it first" },
        { "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
          "\"throttle-group\",\"id\":\"tg0\"}}", "duplicate" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *err = NULL;

        g_assert_null(vb_qmp(&f->q, cases[i].cmd, &err));
        if (!strstr(err, cases[i].msg)) {
            g_error("'%s' not in '%s'", cases[i].msg, err);
        }
    }
    /* And a group added at run time works with a driver=throttle node. */
    vb_qmp_ok(&f->q,
        "{\"execute\":\"object-add\",\"arguments\":{\"qom-type\":"
        "\"throttle-group\",\"id\":\"tg1\",\"x-iops-total\":1000}}");
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
        "\"null-co\",\"node-name\":\"n9\",\"size\":1048576}}");
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-add\",\"arguments\":{\"driver\":"
        "\"throttle\",\"node-name\":\"t9\",\"throttle-group\":\"tg1\","
        "\"file\":\"n9\"}}");
    {
        g_autofree char *err = NULL;

        g_assert_null(vb_qmp(&f->q,
            "{\"execute\":\"blockdev-del\",\"arguments\":"
            "{\"node-name\":\"n9\"}}", &err));
        g_assert_nonnull(strstr(err, "delete that one first"));
    }
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-del\",\"arguments\":{\"node-name\":"
        "\"t9\"}}");
    vb_qmp_ok(&f->q,
        "{\"execute\":\"blockdev-del\",\"arguments\":{\"node-name\":"
        "\"n9\"}}");
    g_assert_true(vb_daemon_alive(&f->d));
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    if (vb_backend() != VB_BACKEND_VHOST_BLKD) {
        /* The test drives vhost-blkd's own --export keys. */
        printf("1..0 # SKIP vhost-blkd's QoS keys only\n");
        return 0;
    }
    g_test_add("/blkd-qos/export-limit", Fixture, NULL, fixture_setup,
               test_export_limit, fixture_teardown);
    g_test_add("/blkd-qos/group-shared", Fixture, NULL, fixture_setup,
               test_group_shared, fixture_teardown);
    g_test_add("/blkd-qos/qom-set", Fixture, NULL, fixture_setup,
               test_qom_set, fixture_teardown);
    g_test_add("/blkd-qos/unthrottled-neighbour", Fixture, NULL,
               fixture_setup, test_unthrottled_neighbour, fixture_teardown);
    g_test_add("/blkd-qos/disconnect-drains", Fixture, NULL, fixture_setup,
               test_disconnect_drains, fixture_teardown);
    g_test_add("/blkd-qos/errors", Fixture, NULL, fixture_setup,
               test_errors, fixture_teardown);
    return g_test_run();
}
