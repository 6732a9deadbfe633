/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the vhost-user server's control path over a real socket. */
#include "qemu/osdep.h"
#include "qemu/iothread.h"
#include "hw/virtio/vhost-user-server.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

typedef struct TestFixture {
    AioContext *main_ctx;
    IOThread *iothread;
    VuServer *server;
    char *dir;
    char *path;
} TestFixture;

static uint64_t test_get_features(void *opaque)
{
    return 1ULL << 32;
}

static bool test_get_config(void *opaque, uint8_t *buf, uint32_t offset,
                            uint32_t size)
{
    for (uint32_t i = 0; i < size; i++) {
        buf[i] = offset + i;
    }
    return true;
}

static void test_queue_start(void *opaque, unsigned int index, VirtQueue *vq,
                             unsigned int num)
{
}

static void test_queue_stop(void *opaque, unsigned int index, VirtQueue *vq)
{
}

static unsigned int test_queue_inflight(void *opaque, unsigned int index)
{
    return 0;
}

/* What load_state was last given (-1 bytes: not called). */
static int loaded_len = -1;
static uint8_t loaded[VHOST_USER_INFLIGHT_STATE_DATA_MAX];

static void test_load_state(void *opaque, const uint8_t *data, size_t len)
{
    g_assert_cmpuint(len, <=, sizeof(loaded));
    memcpy(loaded, data, len);
    loaded_len = len;
}

static const VuDeviceOps test_ops = {
    .get_features = test_get_features,
    .get_config = test_get_config,
    .load_state = test_load_state,
    .queue_start = test_queue_start,
    .queue_stop = test_queue_stop,
    .queue_inflight = test_queue_inflight,
};

static void fixture_setup(TestFixture *f, gconstpointer data)
{
    AioContext *qctx[2];
    VuServerConfig cfg = { .num_queues = 2, .ops = &test_ops };

    f->main_ctx = aio_context_new(NULL);
    g_assert_nonnull(f->main_ctx);
    aio_context_acquire_thread(f->main_ctx);
    f->iothread = iothread_create("test-io", 0, NULL);
    g_assert_nonnull(f->iothread);
    qctx[0] = qctx[1] = iothread_get_aio_context(f->iothread);
    f->dir = g_dir_make_tmp("vu-server-XXXXXX", NULL);
    f->path = g_build_filename(f->dir, "s.sock", NULL);
    cfg.socket_path = f->path;
    cfg.main_ctx = f->main_ctx;
    cfg.queue_ctx = qctx;
    f->server = vu_server_new(&cfg, NULL);
    g_assert_nonnull(f->server);
}

static void fixture_teardown(TestFixture *f, gconstpointer data)
{
    vu_server_free(f->server);
    g_assert_false(g_file_test(f->path, G_FILE_TEST_EXISTS));
    iothread_destroy(f->iothread);
    while (aio_poll(f->main_ctx, false)) {
    }
    aio_context_free(f->main_ctx);
    rmdir(f->dir);
    g_free(f->path);
    g_free(f->dir);
}

/* Connect a front-end; if the server has none, wait until it accepted. */
static int test_connect(TestFixture *f)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool had_session = vu_server_is_connected(f->server);

    g_strlcpy(sa.sun_path, f->path, sizeof(sa.sun_path));
    g_assert_cmpint(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    aio_poll(f->main_ctx, false);       /* accept */
    for (int i = 0; !had_session && i < 1000 &&
         !vu_server_is_connected(f->server); i++) {
        g_usleep(1000);
        aio_poll(f->main_ctx, false);
    }
    return fd;
}

static void test_send(int fd, uint32_t req, uint32_t flags, const void *p,
                      uint32_t size)
{
    VhostUserHeader h = { .request = req, .flags = flags, .size = size };

    /* The server may have closed the socket already: no SIGPIPE. */
    if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) == sizeof(h) && size) {
        g_assert_cmpint(send(fd, p, size, MSG_NOSIGNAL), ==, size);
    }
}

/* Run the server until @fd has a reply; returns its payload size. */
static ssize_t test_recv(TestFixture *f, int fd, VhostUserHeader *h,
                         void *payload, size_t max)
{
    ssize_t n;

    for (int i = 0; i < 100; i++) {
        aio_poll(f->main_ctx, false);
        n = recv(fd, h, sizeof(*h), MSG_DONTWAIT);
        if (n == 0) {
            return -1;                  /* session dropped */
        }
        if (n == sizeof(*h)) {
            g_assert_cmpuint(h->size, <=, max);
            g_assert_cmpint(recv(fd, payload, h->size, 0), ==, h->size);
            return h->size;
        }
        g_usleep(1000);
    }
    g_assert_not_reached();
}

/* Like test_send, with one fd attached. */
static void test_send_fd(int fd, uint32_t req, uint32_t flags, const void *p,
                         uint32_t size, int sfd)
{
    VhostUserHeader h = { .request = req, .flags = flags, .size = size };
    struct iovec iov[2] = {
        { .iov_base = &h, .iov_len = sizeof(h) },
        { .iov_base = (void *)p, .iov_len = size },
    };
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control = { 0 };
    struct msghdr mh = {
        .msg_iov = iov, .msg_iovlen = 2,
        .msg_control = control.buf, .msg_controllen = sizeof(control.buf),
    };
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&mh);

    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &sfd, sizeof(int));
    g_assert_cmpint(sendmsg(fd, &mh, MSG_NOSIGNAL), ==, sizeof(h) + size);
}

/* Run the server until the GET_INFLIGHT_FD reply; returns its fd. */
static int test_recv_inflight(TestFixture *f, int fd, VhostUserInflight *inf)
{
    VhostUserHeader h;
    struct iovec iov[2] = {
        { .iov_base = &h, .iov_len = sizeof(h) },
        { .iov_base = inf, .iov_len = sizeof(*inf) },
    };
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    struct msghdr mh = {
        .msg_iov = iov, .msg_iovlen = 2,
        .msg_control = control.buf, .msg_controllen = sizeof(control.buf),
    };
    int rfd = -1;

    for (int i = 0; i < 100; i++) {
        aio_poll(f->main_ctx, false);
        if (recvmsg(fd, &mh, MSG_DONTWAIT) == sizeof(h) + sizeof(*inf)) {
            struct cmsghdr *cmsg = CMSG_FIRSTHDR(&mh);

            g_assert_nonnull(cmsg);
            memcpy(&rfd, CMSG_DATA(cmsg), sizeof(int));
            return rfd;
        }
        g_usleep(1000);
    }
    g_assert_not_reached();
}

/* SET_INFLIGHT_FD of @mfd with an ack; the ack must be 0. */
static void test_set_inflight(TestFixture *f, int fd, int mfd,
                              uint64_t mmap_size)
{
    VhostUserInflight in = {
        .mmap_size = mmap_size, .num_queues = 2, .queue_size = 64,
    };
    VhostUserHeader h;
    uint64_t ack = 1;

    test_send_fd(fd, VHOST_USER_SET_INFLIGHT_FD,
                 VHOST_USER_VERSION | VHOST_USER_NEED_REPLY, &in, sizeof(in),
                 mfd);
    g_assert_cmpint(test_recv(f, fd, &h, &ack, sizeof(ack)), ==, 8);
    g_assert_cmpuint(ack, ==, 0);
}

/*
 * Device state in the inflight region: made with the saved bytes, given
 * back to load_state on SET_INFLIGHT_FD, and a bad, short or missing area
 * is ignored (and never read or written past the region's end).
 */
static void test_inflight_state(TestFixture *f, gconstpointer data)
{
    size_t off = vhost_user_inflight_state_offset(2, 64);
    size_t page = getpagesize();
    VhostUserInflight in = { .num_queues = 2, .queue_size = 64 };
    VhostUserInflightState *st;
    const uint8_t saved[2] = { 0x5a, 0x01 };
    uint8_t *sentinel;
    uint8_t *map;
    int fd, mfd;

    vu_server_save_state(f->server, saved, sizeof(saved));
    fd = test_connect(f);

    /* A new region holds the saved state after the queues' parts. */
    test_send(fd, VHOST_USER_GET_INFLIGHT_FD, VHOST_USER_VERSION, &in,
              sizeof(in));
    mfd = test_recv_inflight(f, fd, &in);
    g_assert_cmpint(mfd, >=, 0);
    g_assert_cmpuint(in.mmap_size, ==, off + VHOST_USER_INFLIGHT_STATE_SIZE);
    map = mmap(NULL, in.mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    g_assert_true(map != MAP_FAILED);
    st = (VhostUserInflightState *)(map + off);
    g_assert_cmphex(st->magic, ==, VHOST_USER_INFLIGHT_STATE_MAGIC);
    g_assert_cmpuint(st->version, ==, VHOST_USER_INFLIGHT_STATE_VERSION);
    g_assert_cmpuint(st->num_queues, ==, 2);
    g_assert_cmpuint(st->queue_size, ==, 64);
    g_assert_cmpuint(st->data_len, ==, 2);
    g_assert_cmpmem(st->data, 2, saved, 2);

    /* Handed back: load_state gets the bytes; a later save updates it. */
    loaded_len = -1;
    test_set_inflight(f, fd, mfd, in.mmap_size);
    g_assert_cmpint(loaded_len, ==, 2);
    g_assert_cmpmem(loaded, 2, saved, 2);
    vu_server_save_state(f->server, "\x11", 1);
    g_assert_cmpuint(st->data_len, ==, 1);
    g_assert_cmpuint(st->data[0], ==, 0x11);

    /* Bad magic, version, geometry or length: ignored, then rewritten. */
    for (int i = 0; i < 4; i++) {
        switch (i) {
        case 0:
            st->magic ^= 1;
            break;
        case 1:
            st->version = 2;
            break;
        case 2:
            st->queue_size = 128;
            break;
        default:
            st->data_len = VHOST_USER_INFLIGHT_STATE_DATA_MAX + 1;
            break;
        }
        loaded_len = -1;
        test_set_inflight(f, fd, mfd, in.mmap_size);
        g_assert_cmpint(loaded_len, ==, -1);
        g_assert_cmphex(st->magic, ==, VHOST_USER_INFLIGHT_STATE_MAGIC);
        g_assert_cmpuint(st->data_len, ==, 1);
    }
    munmap(map, in.mmap_size);
    close(mfd);

    /* A region with room for the queues only (an older back-end's, or a
     * front-end that cut it short): no state, and nothing is written
     * after its end. */
    mfd = memfd_create("test-inflight", MFD_CLOEXEC);
    g_assert_cmpint(ftruncate(mfd, QEMU_ALIGN_UP(off, page) + page), ==, 0);
    map = mmap(NULL, QEMU_ALIGN_UP(off, page) + page, PROT_READ | PROT_WRITE,
               MAP_SHARED, mfd, 0);
    g_assert_true(map != MAP_FAILED);
    sentinel = map + off;
    memset(sentinel, 0xa5, QEMU_ALIGN_UP(off, page) + page - off);
    for (size_t size = off; size < off + sizeof(*st); size += 24) {
        loaded_len = -1;
        test_set_inflight(f, fd, mfd, size);
        g_assert_cmpint(loaded_len, ==, -1);
        vu_server_save_state(f->server, saved, sizeof(saved));
        for (size_t i = 0; i < sizeof(*st); i++) {
            g_assert_cmpuint(sentinel[i], ==, 0xa5);
        }
    }
    munmap(map, QEMU_ALIGN_UP(off, page) + page);
    close(mfd);
    close(fd);
}

static void test_socket_mode(TestFixture *f, gconstpointer data)
{
    struct stat st;

    g_assert_cmpint(lstat(f->path, &st), ==, 0);
    g_assert_true(S_ISSOCK(st.st_mode));
    g_assert_cmpint(st.st_mode & 0777, ==, 0600);
}

static void test_features_and_ack(TestFixture *f, gconstpointer data)
{
    int fd = test_connect(f);
    VhostUserHeader h;
    uint64_t v = 0;
    VhostUserConfig cfg = { .offset = 4, .size = 8 };

    test_send(fd, VHOST_USER_GET_FEATURES, VHOST_USER_VERSION, NULL, 0);
    g_assert_cmpint(test_recv(f, fd, &h, &v, sizeof(v)), ==, 8);
    g_assert_cmpuint(h.flags, ==, VHOST_USER_VERSION | VHOST_USER_REPLY_MASK);
    g_assert_cmphex(v, ==, (1ULL << 32) |
                    (1ULL << VHOST_USER_F_PROTOCOL_FEATURES) |
                    (1ULL << VHOST_F_LOG_ALL));

    /* Unknown request with NEED_REPLY: nonzero ack, session goes on. */
    test_send(fd, 99, VHOST_USER_VERSION | VHOST_USER_NEED_REPLY, NULL, 0);
    g_assert_cmpint(test_recv(f, fd, &h, &v, sizeof(v)), ==, 8);
    g_assert_cmpuint(v, !=, 0);

    test_send(fd, VHOST_USER_GET_CONFIG, VHOST_USER_VERSION, &cfg,
              VHOST_USER_CONFIG_HDR_SIZE + cfg.size);
    memset(&cfg, 0, sizeof(cfg));
    g_assert_cmpint(test_recv(f, fd, &h, &cfg, sizeof(cfg)), ==,
                    VHOST_USER_CONFIG_HDR_SIZE + 8);
    g_assert_cmpuint(cfg.region[0], ==, 4);
    g_assert_cmpuint(cfg.region[7], ==, 11);

    test_send(fd, VHOST_USER_GET_QUEUE_NUM, VHOST_USER_VERSION, NULL, 0);
    g_assert_cmpint(test_recv(f, fd, &h, &v, sizeof(v)), ==, 8);
    g_assert_cmpuint(v, ==, 2);
    g_assert_true(vu_server_is_connected(f->server));
    close(fd);
}

static void test_second_connection(TestFixture *f, gconstpointer data)
{
    int a = test_connect(f);
    int b = test_connect(f);
    VhostUserHeader h;
    uint64_t v;
    VuServerStats st;

    test_send(b, VHOST_USER_GET_FEATURES, VHOST_USER_VERSION, NULL, 0);
    g_assert_cmpint(test_recv(f, b, &h, &v, sizeof(v)), ==, -1);
    test_send(a, VHOST_USER_GET_FEATURES, VHOST_USER_VERSION, NULL, 0);
    g_assert_cmpint(test_recv(f, a, &h, &v, sizeof(v)), ==, 8);
    vu_server_get_stats(f->server, &st);
    g_assert_cmpuint(st.refused, ==, 1);
    close(a);
    close(b);
}

static void test_bad_messages(TestFixture *f, gconstpointer data)
{
    VhostUserHeader h;
    uint64_t v = 0;
    uint32_t four = 0;
    VuServerStats st;
    int fd;

    /* Wrong version */
    fd = test_connect(f);
    test_send(fd, VHOST_USER_GET_FEATURES, 2, NULL, 0);
    g_assert_cmpint(test_recv(f, fd, &h, &v, sizeof(v)), ==, -1);
    close(fd);
    /* Payload bigger than any request */
    fd = test_connect(f);
    {
        VhostUserHeader big = { VHOST_USER_SET_MEM_TABLE, VHOST_USER_VERSION,
                                1 << 20 };
        g_assert_cmpint(write(fd, &big, sizeof(big)), ==, sizeof(big));
    }
    g_assert_cmpint(test_recv(f, fd, &h, &v, sizeof(v)), ==, -1);
    close(fd);
    /* Payload size that does not match the request */
    fd = test_connect(f);
    test_send(fd, VHOST_USER_SET_FEATURES, VHOST_USER_VERSION, &four, 4);
    g_assert_cmpint(test_recv(f, fd, &h, &v, sizeof(v)), ==, -1);
    close(fd);
    /* GET_VRING_BASE of a queue that does not exist */
    fd = test_connect(f);
    {
        VhostUserVringState s = { .index = 9 };
        test_send(fd, VHOST_USER_GET_VRING_BASE, VHOST_USER_VERSION, &s,
                  sizeof(s));
    }
    g_assert_cmpint(test_recv(f, fd, &h, &v, sizeof(v)), ==, -1);
    close(fd);
    /* The server still serves the next front-end. */
    fd = test_connect(f);
    test_send(fd, VHOST_USER_GET_FEATURES, VHOST_USER_VERSION, NULL, 0);
    g_assert_cmpint(test_recv(f, fd, &h, &v, sizeof(v)), ==, 8);
    close(fd);
    vu_server_get_stats(f->server, &st);
    g_assert_cmpuint(st.bad_messages, >=, 4);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add("/vhost-user-server/socket-mode", TestFixture, NULL,
               fixture_setup, test_socket_mode, fixture_teardown);
    g_test_add("/vhost-user-server/features-and-ack", TestFixture, NULL,
               fixture_setup, test_features_and_ack, fixture_teardown);
    g_test_add("/vhost-user-server/second-connection", TestFixture, NULL,
               fixture_setup, test_second_connection, fixture_teardown);
    g_test_add("/vhost-user-server/bad-messages", TestFixture, NULL,
               fixture_setup, test_bad_messages, fixture_teardown);
    g_test_add("/vhost-user-server/inflight-state", TestFixture, NULL,
               fixture_setup, test_inflight_state, fixture_teardown);
    return g_test_run();
}
