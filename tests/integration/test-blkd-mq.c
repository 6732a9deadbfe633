/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Integration test: I/O on every queue of a multiqueue export at once. */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#define NQ 4
#define PER_QUEUE_SECTORS 4096      /* 2 MiB of disk per queue */
#define REQ_BYTES 16384
#define DEPTH 16

typedef struct Fixture {
    VbDaemon d;
    VhostUserFrontend *fe;
    bool skip;
} Fixture;

typedef struct Worker {
    VhostUserFrontend *fe;
    unsigned int q;
    VhostUserFrontendPool pool;
    int errors;
    int completed;
} Worker;

static void fixture_setup(Fixture *f, gconstpointer data)
{
    VbExportSpec spec = { .num_queues = NQ, .size = 16 << 20 };

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 1, &spec);
    f->d.iothreads = 2;
    vb_daemon_start(&f->d);
    if (data) {
        VhostUserFrontendOptions opts = { .num_queues = NQ, .packed = true };

        f->fe = vb_connect(&f->d, 0, &opts);
        vb_start(f->fe);
        g_assert_true(vhost_user_frontend_is_packed(f->fe));
    } else {
        f->fe = vb_connect_started(&f->d, 0, NQ);
    }
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vhost_user_frontend_free(f->fe);
    vb_daemon_cleanup(&f->d);
}

static uint32_t seed_of(unsigned int q, unsigned int i)
{
    return 1000 + q * 1000 + i;
}

/* Write every block of this queue's area with DEPTH requests in flight,
 * then read it all back and check. */
static gpointer worker_run(gpointer opaque)
{
    Worker *w = opaque;
    const unsigned int nblocks = PER_QUEUE_SECTORS * 512 / REQ_BYTES;
    uint64_t base = (uint64_t)w->q * PER_QUEUE_SECTORS;

    for (int pass = 0; pass < 2; pass++) {
        bool is_read = pass == 1;
        unsigned int next = 0, done = 0;

        while (done < nblocks) {
            VhostUserFrontendCompletion c[DEPTH];
            int n;

            while (next < nblocks &&
                   vhost_user_frontend_outstanding(w->fe, w->q) < DEPTH) {
                struct iovec iov = {
                    vhost_user_frontend_pool_get(&w->pool), REQ_BYTES,
                };
                if (is_read) {
                    memset(iov.iov_base, 0, REQ_BYTES);
                } else {
                    vb_fill_pattern(iov.iov_base, REQ_BYTES,
                                    seed_of(w->q, next));
                }
                /* opaque: block number + 1, buffer found again from it */
                *(uint32_t *)((uint8_t *)iov.iov_base + REQ_BYTES) = next;
                if (vhost_user_frontend_blk_submit(
                        w->fe, w->q,
                        is_read ? VIRTIO_BLK_T_IN : VIRTIO_BLK_T_OUT,
                        base + (uint64_t)next * (REQ_BYTES / 512), &iov, 1,
                        is_read, iov.iov_base) < 0) {
                    w->errors++;
                    return NULL;
                }
                next++;
            }
            if (vhost_user_frontend_kick(w->fe, w->q) < 0) {
                w->errors++;
                return NULL;
            }
            n = vhost_user_frontend_reap(w->fe, w->q, c, DEPTH);
            if (n < 0) {
                w->errors++;
                return NULL;
            }
            if (n == 0) {
                if (vhost_user_frontend_wait(w->fe, w->q,
                                             VB_IO_TIMEOUT_MS) <= 0) {
                    w->errors++;    /* timed out */
                    return NULL;
                }
                continue;
            }
            for (int i = 0; i < n; i++) {
                uint8_t *buf = c[i].opaque;
                uint32_t blk = *(uint32_t *)(buf + REQ_BYTES);

                if (c[i].status != VIRTIO_BLK_S_OK ||
                    (is_read && !vb_check_pattern(buf, REQ_BYTES,
                                                  seed_of(w->q, blk)))) {
                    w->errors++;
                }
                vhost_user_frontend_pool_put(&w->pool, buf);
                done++;
                w->completed++;
            }
        }
    }
    return NULL;
}

static void test_concurrent(Fixture *f, gconstpointer data)
{
    Worker w[NQ];
    GThread *t[NQ];
    g_autofree uint8_t *img = g_malloc(REQ_BYTES);

    g_assert_cmpuint(vhost_user_frontend_num_queues(f->fe), ==, NQ);
    for (unsigned int q = 0; q < NQ; q++) {
        g_autoptr(GError) err = NULL;

        memset(&w[q], 0, sizeof(w[q]));
        w[q].fe = f->fe;
        w[q].q = q;
        /* room for a trailing block number after each buffer */
        vhost_user_frontend_pool_init(f->fe, &w[q].pool, DEPTH,
                                      REQ_BYTES + 64, &err);
        g_assert_no_error(err);
    }
    for (unsigned int q = 0; q < NQ; q++) {
        t[q] = g_thread_new("vb-worker", worker_run, &w[q]);
    }
    for (unsigned int q = 0; q < NQ; q++) {
        g_thread_join(t[q]);
        g_assert_cmpint(w[q].errors, ==, 0);
        g_assert_cmpint(w[q].completed, ==,
                        2 * PER_QUEUE_SECTORS * 512 / REQ_BYTES);
        vhost_user_frontend_pool_destroy(&w[q].pool);
    }
    /* and on disk */
    for (unsigned int q = 0; q < NQ; q++) {
        for (unsigned int i = 0; i < PER_QUEUE_SECTORS * 512 / REQ_BYTES;
             i += 7) {
            vb_read_image(&f->d, 0,
                          ((uint64_t)q * PER_QUEUE_SECTORS) * 512 +
                          (uint64_t)i * REQ_BYTES, img, REQ_BYTES);
            g_assert_true(vb_check_pattern(img, REQ_BYTES, seed_of(q, i)));
        }
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    /* a failed check marks its case failed and the program goes on: the
     * fixture teardown kills the daemon and the other cases still run */
    g_test_set_nonfatal_assertions();
    g_test_add("/vhost-blkd/mq/concurrent", Fixture, NULL, fixture_setup,
               test_concurrent, fixture_teardown);
    g_test_add("/vhost-blkd/mq/packed/concurrent", Fixture,
               GINT_TO_POINTER(1), fixture_setup, test_concurrent,
               fixture_teardown);
    return g_test_run();
}
