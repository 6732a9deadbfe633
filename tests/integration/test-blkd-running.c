/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests: every vhost-user message a VMM may send while the
 * queues run, sent with requests in flight to vhost-blkd under
 * --seccomp on (two queues on two iothreads).  QEMU replaces a running
 * queue's call fd whenever the guest masks or unmasks an MSI-X vector, adds
 * memory on hot-plug, turns dirty logging on for a migration, writes the
 * config space when the driver changes the write cache, and so on; each of
 * these runs code in the queues' iothreads, which must not make a system
 * call the sandbox forbids (the daemon would die with SIGSYS).  Each case
 * checks that the daemon is alive, the in-flight requests completed with
 * their data, and new requests still work on both queues.
 * docs/architecture.md has the message/thread table these cases follow.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>

#define NQ 2                    /* queues, one per iothread */
#define DEPTH 8                 /* requests in flight per queue */
#define REQ_BYTES 4096
#define ACK_TIMEOUT_MS 10000

typedef struct Fixture {
    VbDaemon d;
    VhostUserFrontend *fe;
    uint8_t *buf;               /* NQ * DEPTH request buffers */
    uint32_t round;             /* seeds the data of each round */
} Fixture;

static void fixture_setup(Fixture *f, gconstpointer data)
{
    VbExportSpec spec = {
        .num_queues = NQ,
        /* Requests on sectors 2048.. go through a worker thread that sleeps
         * first: some are surely still in flight when a message arrives.
         * (Correctness does not depend on it: either way they complete.) */
        .extra = "inject-delay=20,inject-sector=2048-4095",
    };
    VhostUserFrontendOptions opts = {
        .num_queues = NQ,
        .queue_size = 128,
        .protocol_features =
            (1ULL << VHOST_USER_PROTOCOL_F_MQ) |
            (1ULL << VHOST_USER_PROTOCOL_F_REPLY_ACK) |
            (1ULL << VHOST_USER_PROTOCOL_F_CONFIG) |
            (1ULL << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD) |
            (1ULL << VHOST_USER_PROTOCOL_F_LOG_SHMFD) |
            (1ULL << VHOST_USER_PROTOCOL_F_BACKEND_REQ) |
            (1ULL << VHOST_USER_PROTOCOL_F_STATUS) |
            (1ULL << VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS),
    };
    g_autoptr(GError) err = NULL;

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 1, &spec);
    f->d.iothreads = NQ;
#if CONFIG_SECCOMP
    f->d.seccomp = true;
#else
    g_test_message("built without libseccomp: the daemon runs unconfined");
#endif
    vb_daemon_start(&f->d);
    f->fe = vb_connect(&f->d, 0, &opts);
    vb_start(f->fe);
    f->buf = vhost_user_frontend_mem_alloc(f->fe, NQ * DEPTH * REQ_BYTES,
                                           4096, &err);
    g_assert_no_error(err);
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vhost_user_frontend_free(f->fe);
    f->fe = NULL;
    vb_daemon_cleanup(&f->d);
}

static uint8_t *req_buf(Fixture *f, unsigned int q, unsigned int i)
{
    return f->buf + ((size_t)q * DEPTH + i) * REQ_BYTES;
}

/* Sector of request @i of queue @q: half of them on the slow sectors. */
static uint64_t req_sector(unsigned int q, unsigned int i)
{
    return (i % 2 ? 2048 : 0) + (q * DEPTH + i) * (REQ_BYTES / 512);
}

static uint32_t req_seed(Fixture *f, unsigned int q, unsigned int i)
{
    return f->round * 1000 + q * DEPTH + i + 1;
}

/* Queue and kick DEPTH requests of @type on every queue (writes carry the
 * round's pattern; reads land in zeroed buffers). */
static void submit_all(Fixture *f, uint32_t type)
{
    for (unsigned int q = 0; q < NQ; q++) {
        for (unsigned int i = 0; i < DEPTH; i++) {
            struct iovec iov = {
                .iov_base = req_buf(f, q, i), .iov_len = REQ_BYTES,
            };

            if (type == VIRTIO_BLK_T_OUT) {
                vb_fill_pattern(iov.iov_base, REQ_BYTES, req_seed(f, q, i));
            } else {
                memset(iov.iov_base, 0, REQ_BYTES);
            }
            g_assert_cmpint(vhost_user_frontend_blk_submit(
                                f->fe, q, type, req_sector(q, i), &iov, 1,
                                type == VIRTIO_BLK_T_IN, NULL), >=, 0);
        }
        g_assert_cmpint(vhost_user_frontend_kick(f->fe, q), >=, 0);
    }
}

/* Every request of submit_all() completes, successfully. */
static void reap_all(Fixture *f)
{
    for (unsigned int q = 0; q < NQ; q++) {
        VhostUserFrontendCompletion c[DEPTH];

        g_assert_cmpint(vb_reap_n(f->fe, q, c, DEPTH), ==, DEPTH);
        for (unsigned int i = 0; i < DEPTH; i++) {
            g_assert_cmpuint(c[i].status, ==, VIRTIO_BLK_S_OK);
        }
    }
}

typedef void MidFn(Fixture *f, const void *arg);

/*
 * One round: writes in flight while @mid sends its message(s), then reads
 * in flight while it sends them again; every request completes and the
 * data read back is what was written.  The daemon must be alive after it.
 */
static void round_with(Fixture *f, MidFn *mid, const void *arg)
{
    f->round++;
    submit_all(f, VIRTIO_BLK_T_OUT);
    mid(f, arg);
    reap_all(f);
    submit_all(f, VIRTIO_BLK_T_IN);
    mid(f, arg);
    reap_all(f);
    for (unsigned int q = 0; q < NQ; q++) {
        for (unsigned int i = 0; i < DEPTH; i++) {
            g_assert_true(vb_check_pattern(req_buf(f, q, i), REQ_BYTES,
                                           req_seed(f, q, i)));
        }
    }
    g_assert_true(vb_daemon_alive(&f->d));
}

static void mid_nothing(Fixture *f, const void *arg)
{
}

/* Three rounds of @mid, then a plain one. */
static void run_rounds(Fixture *f, MidFn *mid, const void *arg)
{
    for (int i = 0; i < 3; i++) {
        round_with(f, mid, arg);
    }
    round_with(f, mid_nothing, NULL);
}

/* Send @request with NEED_REPLY and the payload; return the ack (0 =
 * done). */
static uint64_t send_acked(Fixture *f, uint32_t request, const void *payload,
                           size_t len, const int *fds, int nfds)
{
    VhostUserMsg reply;

    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, request,
                        VHOST_USER_VERSION | VHOST_USER_NEED_REPLY, len,
                        payload, len, fds, nfds), ==, 0);
    g_assert_cmpint(vhost_user_frontend_recv_raw(f->fe, &reply, NULL, NULL,
                                                 ACK_TIMEOUT_MS),
                    ==, sizeof(uint64_t));
    g_assert_cmpuint(reply.hdr.request, ==, request);
    return reply.payload.u64;
}

/* Send a request that has a reply of its own; return the payload size. */
static int send_get(Fixture *f, uint32_t request, const void *payload,
                    size_t len, VhostUserMsg *reply)
{
    int r;

    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, request, VHOST_USER_VERSION, len, payload,
                        len, NULL, 0), ==, 0);
    r = vhost_user_frontend_recv_raw(f->fe, reply, NULL, NULL,
                                     ACK_TIMEOUT_MS);
    g_assert_cmpint(r, >=, 0);
    g_assert_cmpuint(reply->hdr.request, ==, request);
    return r;
}

/* ---- the vring fds ---------------------------------------------------- */

static void mid_replace_fd(Fixture *f, const void *arg)
{
    uint32_t request = GPOINTER_TO_UINT(arg) & 0xff;
    bool blocking = GPOINTER_TO_UINT(arg) & 0x100;
    g_autoptr(GError) err = NULL;

    for (unsigned int q = 0; q < NQ; q++) {
        g_assert_true(vhost_user_frontend_replace_vring_fd(f->fe, q, request,
                                                           blocking, &err));
        g_assert_no_error(err);
    }
}

#define BLOCKING 0x100

/*
 * The call fd, blocking and not: swapped in the queue's iothread.  It used
 * to make that thread call fcntl() (to set O_NONBLOCK), which the sandbox
 * does not allow: SIGSYS killed the daemon.
 */
static void test_call(Fixture *f, gconstpointer data)
{
    run_rounds(f, mid_replace_fd,
               GUINT_TO_POINTER(VHOST_USER_SET_VRING_CALL | BLOCKING));
    run_rounds(f, mid_replace_fd,
               GUINT_TO_POINTER(VHOST_USER_SET_VRING_CALL));
}

/* The kick fd: the queue stops (after its requests), restarts with it. */
static void test_kick(Fixture *f, gconstpointer data)
{
    run_rounds(f, mid_replace_fd,
               GUINT_TO_POINTER(VHOST_USER_SET_VRING_KICK | BLOCKING));
    run_rounds(f, mid_replace_fd,
               GUINT_TO_POINTER(VHOST_USER_SET_VRING_KICK));
}

/* The error fd: closed at once (the daemon never signals it). */
static void test_err(Fixture *f, gconstpointer data)
{
    run_rounds(f, mid_replace_fd,
               GUINT_TO_POINTER(VHOST_USER_SET_VRING_ERR | BLOCKING));
}

/* All three, interleaved, on each queue. */
static void mid_replace_all(Fixture *f, const void *arg)
{
    mid_replace_fd(f, GUINT_TO_POINTER(VHOST_USER_SET_VRING_CALL | BLOCKING));
    mid_replace_fd(f, GUINT_TO_POINTER(VHOST_USER_SET_VRING_KICK | BLOCKING));
    mid_replace_fd(f, GUINT_TO_POINTER(VHOST_USER_SET_VRING_ERR | BLOCKING));
    mid_replace_fd(f, GUINT_TO_POINTER(VHOST_USER_SET_VRING_CALL));
}

static void test_all_fds(Fixture *f, gconstpointer data)
{
    run_rounds(f, mid_replace_all, NULL);
}

/* ---- queue state ------------------------------------------------------ */

/* SET_VRING_ENABLE 1 on an enabled queue, then 0 and 1 (stop, restart). */
static void mid_enable(Fixture *f, const void *arg)
{
    for (unsigned int q = 0; q < NQ; q++) {
        VhostUserVringState on = { .index = q, .num = 1 };
        VhostUserVringState off = { .index = q, .num = 0 };

        g_assert_cmpuint(send_acked(f, VHOST_USER_SET_VRING_ENABLE, &on,
                                    sizeof(on), NULL, 0), ==, 0);
        g_assert_cmpuint(send_acked(f, VHOST_USER_SET_VRING_ENABLE, &off,
                                    sizeof(off), NULL, 0), ==, 0);
        g_assert_cmpuint(send_acked(f, VHOST_USER_SET_VRING_ENABLE, &on,
                                    sizeof(on), NULL, 0), ==, 0);
    }
}

static void test_enable(Fixture *f, gconstpointer data)
{
    run_rounds(f, mid_enable, NULL);
}

/* SET_FEATURES with the features in use (stop, restart) and the
 * informational messages (main thread only). */
static void mid_features(Fixture *f, const void *arg)
{
    uint64_t features = vhost_user_frontend_get_features(f->fe);
    VhostUserMsg reply;

    g_assert_cmpuint(send_acked(f, VHOST_USER_SET_FEATURES, &features,
                                sizeof(features), NULL, 0), ==, 0);
    g_assert_cmpint(send_get(f, VHOST_USER_GET_FEATURES, NULL, 0, &reply),
                    ==, sizeof(uint64_t));
    g_assert_cmpint(send_get(f, VHOST_USER_GET_PROTOCOL_FEATURES, NULL, 0,
                             &reply), ==, sizeof(uint64_t));
    g_assert_cmpint(send_get(f, VHOST_USER_GET_QUEUE_NUM, NULL, 0, &reply),
                    ==, sizeof(uint64_t));
    g_assert_cmpuint(reply.payload.u64, ==, NQ);
    g_assert_cmpint(send_get(f, VHOST_USER_GET_MAX_MEM_SLOTS, NULL, 0,
                             &reply), ==, sizeof(uint64_t));
}

static void test_features(Fixture *f, gconstpointer data)
{
    run_rounds(f, mid_features, NULL);
}

/* SET_STATUS (the driver's status, as QEMU sends it when it changes) and
 * GET_STATUS. */
static void mid_status(Fixture *f, const void *arg)
{
    uint64_t status = VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |
                      VIRTIO_CONFIG_S_FEATURES_OK |
                      VIRTIO_CONFIG_S_DRIVER_OK;
    VhostUserMsg reply;

    g_assert_cmpuint(send_acked(f, VHOST_USER_SET_STATUS, &status,
                                sizeof(status), NULL, 0), ==, 0);
    g_assert_cmpint(send_get(f, VHOST_USER_GET_STATUS, NULL, 0, &reply),
                    ==, sizeof(uint64_t));
    g_assert_cmpuint(reply.payload.u64 & 0xff, ==, status);
}

static void test_status(Fixture *f, gconstpointer data)
{
    run_rounds(f, mid_status, NULL);
}

/* GET_CONFIG, and SET_CONFIG of the write cache mode (the driver toggles
 * it through the config space), back and forth. */
static void mid_config(Fixture *f, const void *arg)
{
    size_t off = offsetof(struct virtio_blk_config, wce);
    g_autoptr(GError) err = NULL;
    uint8_t wce;

    for (int i = 0; i < 2; i++) {
        g_assert_true(vhost_user_frontend_get_config(f->fe, off, &wce, 1,
                                                     &err));
        g_assert_no_error(err);
        wce = !wce;
        g_assert_true(vhost_user_frontend_set_config(f->fe, off, &wce, 1,
                                                     &err));
        g_assert_no_error(err);
    }
}

static void test_config(Fixture *f, gconstpointer data)
{
    run_rounds(f, mid_config, NULL);
}

/* ---- memory and logging ----------------------------------------------- */

/* ADD_MEM_REG then REM_MEM_REG of a region the rings do not use (memory
 * hot-plug and unplug): every queue stops, and restarts on the new
 * table. */
static void mid_mem_reg(Fixture *f, const void *arg)
{
    int fd = memfd_create("vb-running", MFD_CLOEXEC);
    VhostUserMemRegMsg m = {
        .region = {
            .guest_phys_addr = VHOST_USER_FRONTEND_REGION_STRIDE * 3,
            .memory_size = 1 << 20,
            .userspace_addr = 0x7e0000000000ULL,
        },
    };

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 1 << 20), ==, 0);
    g_assert_cmpuint(send_acked(f, VHOST_USER_ADD_MEM_REG, &m, sizeof(m),
                                &fd, 1), ==, 0);
    g_assert_cmpuint(send_acked(f, VHOST_USER_REM_MEM_REG, &m, sizeof(m),
                                NULL, 0), ==, 0);
    close(fd);
}

static void test_mem_reg(Fixture *f, gconstpointer data)
{
    run_rounds(f, mid_mem_reg, NULL);
}

/* Dirty logging on and off (SET_LOG_BASE, SET_FEATURES with LOG_ALL,
 * SET_VRING_ADDR with VHOST_VRING_F_LOG), as a migration does. */
static void mid_log(Fixture *f, const void *arg)
{
    g_autoptr(GError) err = NULL;

    g_assert_true(vhost_user_frontend_log_start(f->fe, 0, &err));
    g_assert_no_error(err);
    g_assert_true(vhost_user_frontend_log_stop(f->fe, &err));
    g_assert_no_error(err);
}

static void test_log(Fixture *f, gconstpointer data)
{
    run_rounds(f, mid_log, NULL);
}

/*
 * SET_LOG_FD with a blocking pipe while logging runs: the iothreads write
 * it after logged batches, so the daemon must have made it non-blocking
 * (a full pipe would otherwise stall them).  The pipe's file status flags
 * are shared with our end: O_NONBLOCK shows there.
 */
static void test_log_fd(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    int p[2];

    g_assert_true(vhost_user_frontend_log_start(f->fe, 0, &err));
    g_assert_no_error(err);
    g_assert_cmpint(pipe2(p, O_CLOEXEC), ==, 0);
    g_assert_cmpint(fcntl(p[1], F_GETFL) & O_NONBLOCK, ==, 0);
    f->round++;
    submit_all(f, VIRTIO_BLK_T_OUT);
    g_assert_cmpuint(send_acked(f, VHOST_USER_SET_LOG_FD, NULL, 0, &p[1], 1),
                     ==, 0);
    g_assert_cmpint(fcntl(p[1], F_GETFL) & O_NONBLOCK, ==, O_NONBLOCK);
    reap_all(f);
    close(p[0]);
    close(p[1]);
    run_rounds(f, mid_nothing, NULL);
    g_assert_true(vhost_user_frontend_log_stop(f->fe, &err));
    g_assert_no_error(err);
}

/* GET_VRING_BASE on a running queue (the VMM stops it: the reply waits
 * for its requests), then SET_VRING_BASE and a new kick fd as QEMU starts
 * it again (chains not taken before the stop are taken then). */
static void mid_vring_base(Fixture *f, const void *arg)
{
    g_autoptr(GError) err = NULL;

    for (unsigned int q = 0; q < NQ; q++) {
        g_assert_true(vhost_user_frontend_get_vring_base(f->fe, q, NULL,
                                                         &err));
        g_assert_no_error(err);
        g_assert_true(vhost_user_frontend_restart_queue(f->fe, q, &err));
        g_assert_no_error(err);
    }
}

static void test_vring_base(Fixture *f, gconstpointer data)
{
    run_rounds(f, mid_vring_base, NULL);
}

/* The inflight region and the back-end channel again (SET_INFLIGHT_FD,
 * SET_BACKEND_REQ_FD): GET_INFLIGHT_FD/SET_INFLIGHT_FD come with a
 * reconnect, which the library does with requests outstanding. */
static void test_reconnect(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;

    for (int i = 0; i < 3; i++) {
        int sv[2];

        f->round++;
        submit_all(f, VIRTIO_BLK_T_OUT);
        vhost_user_frontend_disconnect(f->fe);
        g_assert_true(vhost_user_frontend_reconnect(f->fe, 10000, &err));
        g_assert_no_error(err);
        reap_all(f);
        g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
                                   sv), ==, 0);
        g_assert_cmpuint(send_acked(f, VHOST_USER_SET_BACKEND_REQ_FD, NULL,
                                    0, &sv[1], 1), ==, 0);
        close(sv[0]);
        close(sv[1]);
        submit_all(f, VIRTIO_BLK_T_IN);
        reap_all(f);
        for (unsigned int q = 0; q < NQ; q++) {
            for (unsigned int j = 0; j < DEPTH; j++) {
                g_assert_true(vb_check_pattern(req_buf(f, q, j), REQ_BYTES,
                                               req_seed(f, q, j)));
            }
        }
        g_assert_true(vb_daemon_alive(&f->d));
    }
    round_with(f, mid_nothing, NULL);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    if (vb_backend() != VB_BACKEND_VHOST_BLKD) {
        g_test_skip("vhost-blkd only (--seccomp on)");
        return g_test_run();
    }
#define ADD(name, fn) \
    g_test_add("/vhost-blkd/running/" name, Fixture, NULL, fixture_setup, \
               fn, fixture_teardown)
    ADD("set-vring-call", test_call);
    ADD("set-vring-kick", test_kick);
    ADD("set-vring-err", test_err);
    ADD("all-vring-fds", test_all_fds);
    ADD("set-vring-enable", test_enable);
    ADD("set-features", test_features);
    ADD("set-status", test_status);
    ADD("config", test_config);
    ADD("mem-reg", test_mem_reg);
    ADD("dirty-log", test_log);
    ADD("set-log-fd", test_log_fd);
    ADD("get-vring-base", test_vring_base);
    ADD("reconnect", test_reconnect);
    return g_test_run();
}
