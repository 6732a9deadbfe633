/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration test: the back-end interrupts the driver once when a queue
 * starts, as libvhost-user (qemu-storage-daemon) does when it receives a
 * call fd.  A front-end that waits for that first interrupt must not hang,
 * and after a reconnect to a restarted back-end the new session signals
 * again, so a completion whose interrupt went to the dead one is not lost.
 *
 * Deterministic: GET_CONFIG is answered only after every earlier message
 * (SET_VRING_KICK, which starts the queue) was handled, so once it
 * returns the interrupt is already in the call eventfd; the wait's
 * timeout only bounds a failure.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"

typedef struct Fixture {
    VbDaemon d;
    VhostUserFrontend *fe;
} Fixture;

static void fixture_setup(Fixture *f, gconstpointer data)
{
    VbExportSpec spec = { .num_queues = 2, .size = 8 << 20 };
    VhostUserFrontendOptions opts = { .num_queues = 2, .queue_size = 128,
                                      .mem_size = 16 << 20,
                                      .packed = data != NULL };

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 1, &spec);
    vb_daemon_start(&f->d);
    f->fe = vb_connect(&f->d, 0, &opts);
    vb_start(f->fe);
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vhost_user_frontend_free(f->fe);
    vb_daemon_cleanup(&f->d);
}

/* A round trip: every message sent before it has been handled. */
static void sync_with_backend(Fixture *f)
{
    g_autoptr(GError) err = NULL;
    struct virtio_blk_config cfg;

    g_assert_true(vhost_user_frontend_get_blk_config(f->fe, &cfg, &err));
    g_assert_no_error(err);
}

static void check_interrupt_on_every_queue(Fixture *f, const char *when)
{
    for (unsigned int q = 0; q < 2; q++) {
        int r = vhost_user_frontend_wait(f->fe, q, VB_IO_TIMEOUT_MS);

        if (r != 1) {
            g_test_message("%s: queue %u: no interrupt (wait returned %d)",
                           when, q, r);
        }
        g_assert_cmpint(r, ==, 1);
    }
}

static void test_start_signals(Fixture *f, gconstpointer data)
{
    sync_with_backend(f);
    /* No request was ever submitted: only the start can have signalled. */
    g_assert_cmpuint(vhost_user_frontend_outstanding(f->fe, 0), ==, 0);
    check_interrupt_on_every_queue(f, "after start");
    /* And the queues work after it. */
    for (unsigned int q = 0; q < 2; q++) {
        g_autoptr(GError) err = NULL;
        uint8_t *buf = vhost_user_frontend_mem_alloc(f->fe, 4096, 4096, &err);

        g_assert_no_error(err);
        g_assert_cmpint(vb_req(f->fe, q, VIRTIO_BLK_T_IN, 0, buf, 4096, true,
                               NULL), ==, VIRTIO_BLK_S_OK);
    }
}

static void test_reconnect_signals(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;

    sync_with_backend(f);
    check_interrupt_on_every_queue(f, "after start");  /* consumed */
    vb_daemon_kill(&f->d);
    vb_daemon_start(&f->d);
    vhost_user_frontend_reconnect(f->fe, 10000, &err);
    g_assert_no_error(err);
    sync_with_backend(f);
    check_interrupt_on_every_queue(f, "after reconnect");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add("/vhost-blkd/call/start-signals", Fixture, NULL,
               fixture_setup, test_start_signals, fixture_teardown);
    g_test_add("/vhost-blkd/call/packed/start-signals", Fixture, "packed",
               fixture_setup, test_start_signals, fixture_teardown);
    g_test_add("/vhost-blkd/call/reconnect-signals", Fixture, NULL,
               fixture_setup, test_reconnect_signals, fixture_teardown);
    return g_test_run();
}
