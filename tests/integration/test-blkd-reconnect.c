/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration test: SIGKILL the back-end with writes in flight, restart it
 * on the same socket, reconnect as QEMU does (inflight region handed back,
 * vring base = used index): every write completes and is on disk.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#define NREQ 64
#define REQ_BYTES 65536

typedef struct Fixture {
    VbDaemon d;
    VhostUserFrontend *fe;
} Fixture;

static void fixture_setup(Fixture *f, gconstpointer data)
{
    VbExportSpec spec = { .num_queues = 1, .size = 64 << 20 };
    VhostUserFrontendOptions opts = { .queue_size = 256, .mem_size = 32 << 20 };
    g_autoptr(GError) err = NULL;

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

static void test_sigkill_inflight(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    VhostUserFrontendCompletion c[NREQ];
    uint8_t *buf;
    g_autofree uint8_t *img = g_malloc(REQ_BYTES);
    bool seen[NREQ] = { false };
    uint64_t inflight_size;
    int n;

    if (vb_backend() == VB_BACKEND_QSD &&
        !(vhost_user_frontend_get_protocol_features(f->fe) &
          (1ULL << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD))) {
        g_test_skip("qemu-storage-daemon offers no INFLIGHT_SHMFD");
        return;
    }
    g_assert_true(vhost_user_frontend_get_protocol_features(f->fe) &
                  (1ULL << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD));
    g_assert_cmpint(vhost_user_frontend_inflight_fd(f->fe, &inflight_size),
                    >=, 0);
    g_assert_cmpuint(inflight_size, >=, vhost_user_inflight_queue_size(256));

    buf = vhost_user_frontend_mem_alloc(f->fe, (size_t)NREQ * REQ_BYTES, 4096,
                                        &err);
    g_assert_no_error(err);
    for (int i = 0; i < NREQ; i++) {
        struct iovec iov = { buf + (size_t)i * REQ_BYTES, REQ_BYTES };

        vb_fill_pattern(iov.iov_base, REQ_BYTES, 500 + i);
        /* spread over the disk so the writes really go to storage */
        g_assert_cmpint(vhost_user_frontend_blk_submit(
                            f->fe, 0, VIRTIO_BLK_T_OUT,
                            (uint64_t)i * (REQ_BYTES / 512) * 2, &iov, 1,
                            false, GINT_TO_POINTER(i + 1)), >=, 0);
    }
    g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
    vb_daemon_kill(&f->d);      /* kill -9, nothing reaped */
    {
        struct vring_desc *desc;
        struct vring_avail *avail;
        struct vring_used *used;

        vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
        g_test_message("at SIGKILL: %d of %d writes in the used ring",
                       used->idx, NREQ);
    }

    vb_daemon_start(&f->d);
    vhost_user_frontend_reconnect(f->fe, 10000, &err);
    g_assert_no_error(err);

    n = vb_reap_n(f->fe, 0, c, NREQ);
    g_assert_cmpint(n, ==, NREQ);
    for (int i = 0; i < n; i++) {
        int idx = GPOINTER_TO_INT(c[i].opaque) - 1;

        g_assert_cmpint(idx, >=, 0);
        g_assert_cmpint(idx, <, NREQ);
        g_assert_false(seen[idx]);
        seen[idx] = true;
        g_assert_cmpint(c[i].status, ==, VIRTIO_BLK_S_OK);
    }
    g_assert_cmpuint(vhost_user_frontend_outstanding(f->fe, 0), ==, 0);

    /* every acknowledged write is on disk, through the device and in the
     * file */
    for (int i = 0; i < NREQ; i++) {
        uint64_t sector = (uint64_t)i * (REQ_BYTES / 512) * 2;

        memset(buf, 0, REQ_BYTES);
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, sector, buf,
                               REQ_BYTES, true, NULL), ==, VIRTIO_BLK_S_OK);
        g_assert_true(vb_check_pattern(buf, REQ_BYTES, 500 + i));
        vb_read_image(&f->d, 0, sector * 512, img, REQ_BYTES);
        g_assert_true(vb_check_pattern(img, REQ_BYTES, 500 + i));
    }

    /* a second restart with nothing in flight also works */
    vb_daemon_kill(&f->d);
    vb_daemon_start(&f->d);
    vhost_user_frontend_reconnect(f->fe, 10000, &err);
    g_assert_no_error(err);
    vb_fill_pattern(buf, 4096, 77);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 1, buf, 4096, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    vb_read_image(&f->d, 0, 512, img, 4096);
    g_assert_true(vb_check_pattern(img, 4096, 77));
}

/* A clean stop (GET_VRING_BASE) reports where the device stopped. */
static void test_stop(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    uint8_t *buf = vhost_user_frontend_mem_alloc(f->fe, 4096, 4096, &err);
    uint16_t base = 0xffff;

    g_assert_no_error(err);
    for (int i = 0; i < 5; i++) {
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, i, buf, 4096, true,
                               NULL), ==, VIRTIO_BLK_S_OK);
    }
    vhost_user_frontend_stop(f->fe, &base, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(base, ==, 5);
    vhost_user_frontend_disconnect(f->fe);
    /* the export accepts a new session afterwards */
    vb_check_export_works(&f->d, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    /* a failed check marks its case failed and the program goes on: the
     * fixture teardown kills the daemon and the other cases still run */
    g_test_set_nonfatal_assertions();
    g_test_add("/vhost-blkd/reconnect/sigkill-inflight", Fixture, NULL,
               fixture_setup, test_sigkill_inflight, fixture_teardown);
    g_test_add("/vhost-blkd/reconnect/stop-get-vring-base", Fixture, NULL,
               fixture_setup, test_stop, fixture_teardown);
    return g_test_run();
}
