/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * libFuzzer target: a hostile VMM sends vhost-user message sequences to
 * the back-end server over its real unix socket, with real fds (memfds of
 * chosen sizes, eventfds, pipes) attached as SCM_RIGHTS.
 *
 * Input: a list of messages, each:
 *   u8 request (mod 41), u8 flags selector (bit 0 NEED_REPLY, bit 7: a raw
 *   u32 flags word follows), u16 payload size (may exceed the payload
 *   union, to test the size check), the payload bytes, u8 fd count (low 4
 *   bits, up to 9), and per fd: u8 kind (0 memfd, 1 eventfd, 2 pipe) and
 *   for a memfd a u8 size in pages.
 * See gen-seeds.py.
 *
 * The server and its queues all run in the fuzzer's thread (queue
 * contexts = the main context, so aio_run_sync() calls run directly).
 * Checks, besides the sanitizers: replies are well-formed replies to the
 * request just sent; after the front-end disconnects, the server drops the
 * session; the session leaves no fd open behind it.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "hw/virtio/vhost-user-server.h"
#include "fuzz-common.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>

#define FVU_NUM_QUEUES  2
#define FVU_MAX_MSGS    64
#define FVU_MAX_FDS     9       /* one more than a message may carry */

typedef struct FuzzVhostUser {
    AioContext *ctx;
    VuServer *server;
    char *dir;
    char *path;
    uint64_t config[32];
} FuzzVhostUser;

static FuzzVhostUser fvu;

static uint64_t fvu_get_features(void *opaque)
{
    return (1ull << 32) | (1ull << 28) | (1ull << 29);   /* VERSION_1, ... */
}

static bool fvu_get_config(void *opaque, uint8_t *buf, uint32_t offset,
                           uint32_t size)
{
    if (offset > sizeof(fvu.config) || size > sizeof(fvu.config) - offset) {
        return false;
    }
    memcpy(buf, (uint8_t *)fvu.config + offset, size);
    return true;
}

static bool fvu_set_config(void *opaque, const uint8_t *data, uint32_t offset,
                           uint32_t size)
{
    if (offset > sizeof(fvu.config) || size > sizeof(fvu.config) - offset) {
        return false;
    }
    memcpy((uint8_t *)fvu.config + offset, data, size);
    return true;
}

static void fvu_queue_start(void *opaque, unsigned int index, VirtQueue *vq,
                            unsigned int num)
{
    fuzz_check(index < FVU_NUM_QUEUES, "queue %u started", index);
    fuzz_check(virtqueue_is_started(vq), "queue %u not started", index);
    VirtQueueElement *elem;

    /* what a device does first: look at the ring; then complete what it
     * found, which writes the used ring (and the dirty log when the
     * input turned logging on) */
    while ((elem = virtqueue_pop(vq))) {
        virtqueue_push(vq, elem, elem->in_num ? 1 : 0);
    }
    virtqueue_notify(vq);
}

static void fvu_queue_stop(void *opaque, unsigned int index, VirtQueue *vq)
{
    fuzz_check(index < FVU_NUM_QUEUES, "queue %u stopped", index);
}

static unsigned int fvu_queue_inflight(void *opaque, unsigned int index)
{
    return 0;
}

static const VuDeviceOps fvu_ops = {
    .get_features = fvu_get_features,
    .get_config = fvu_get_config,
    .set_config = fvu_set_config,
    .queue_start = fvu_queue_start,
    .queue_stop = fvu_queue_stop,
    .queue_inflight = fvu_queue_inflight,
};

static int fvu_count_fds(void)
{
    GDir *d = g_dir_open("/proc/self/fd", 0, NULL);
    int n = 0;

    g_assert(d);
    while (g_dir_read_name(d)) {
        n++;
    }
    g_dir_close(d);
    return n;
}

/* Remove the socket and its directory when the process exits. */
static void fvu_cleanup(void)
{
    vu_server_free(fvu.server);
    rmdir(fvu.dir);
}

/* Called once, from the fuzzer's thread, before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    AioContext *qctx[FVU_NUM_QUEUES];
    VuServerConfig cfg = {
        .num_queues = FVU_NUM_QUEUES,
        .max_queue_size = 1024,
        .ops = &fvu_ops,
    };
    GError *err = NULL;
    unsigned int i;

    fvu.ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(fvu.ctx);
    for (i = 0; i < FVU_NUM_QUEUES; i++) {
        qctx[i] = fvu.ctx;
    }
    fvu.dir = g_dir_make_tmp("fuzz-vhost-user-XXXXXX", &err);
    g_assert_no_error(err);
    fvu.path = g_build_filename(fvu.dir, "s.sock", NULL);
    cfg.socket_path = fvu.path;
    cfg.main_ctx = fvu.ctx;
    cfg.queue_ctx = qctx;
    fvu.server = vu_server_new(&cfg, &err);
    if (!fvu.server) {
        g_error("vu_server_new: %s", err->message);
    }
    atexit(fvu_cleanup);
    return 0;
}

static int fvu_connect(void)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    unsigned int i;

    g_assert(fd >= 0);
    g_strlcpy(sa.sun_path, fvu.path, sizeof(sa.sun_path));
    g_assert(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    for (i = 0; i < 100 && !vu_server_is_connected(fvu.server); i++) {
        aio_poll(fvu.ctx, false);
    }
    fuzz_check(vu_server_is_connected(fvu.server), "connection not accepted");
    return fd;
}

static int fvu_make_fd(FuzzInput *in)
{
    uint8_t kind = fuzz_u8(in) % 3;
    int fd, p[2];

    switch (kind) {
    case 0:
        fd = memfd_create("fuzz-vhost-user", MFD_CLOEXEC);
        g_assert(fd >= 0);
        g_assert(ftruncate(fd, (off_t)fuzz_u8(in) * 4096) == 0);
        return fd;
    case 1:
        fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        g_assert(fd >= 0);
        return fd;
    default:
        g_assert(pipe2(p, O_CLOEXEC) == 0);
        close(p[1]);
        return p[0];
    }
}

/* Read and check every reply available; false once the server hung up. */
static bool fvu_drain_replies(int sock, uint32_t request)
{
    for (;;) {
        union {
            char buf[CMSG_SPACE(sizeof(int) * VHOST_USER_MAX_FDS)];
            struct cmsghdr align;
        } control;
        VhostUserMsg reply;
        struct iovec iov = { &reply.hdr, VHOST_USER_HDR_SIZE };
        struct msghdr mh = {
            .msg_iov = &iov,
            .msg_iovlen = 1,
            .msg_control = control.buf,
            .msg_controllen = sizeof(control.buf),
        };
        struct cmsghdr *c;
        ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

        if (n == 0 || (n < 0 && errno != EAGAIN)) {
            return false;
        }
        if (n < 0) {
            return true;
        }
        for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                int nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                int *fds = (int *)CMSG_DATA(c);

                for (int i = 0; i < nfds; i++) {
                    close(fds[i]);
                }
            }
        }
        fuzz_check(n >= VHOST_USER_HDR_SIZE, "short reply of %zd bytes", n);
        fuzz_check(reply.hdr.flags & VHOST_USER_REPLY_MASK,
                   "reply without the reply flag (0x%x)", reply.hdr.flags);
        fuzz_check(reply.hdr.request == request,
                   "reply to request %u, sent %u", reply.hdr.request,
                   request);
        fuzz_check(reply.hdr.size <= sizeof(VhostUserPayload),
                   "reply payload of %u bytes", reply.hdr.size);
        if (reply.hdr.size > 0) {
            n = recv(sock, &reply.payload, reply.hdr.size, MSG_DONTWAIT);
            fuzz_check(n == reply.hdr.size, "reply payload: %zd of %u bytes",
                       n, reply.hdr.size);
        }
    }
}

/* Send one message from the input; false once the server hung up. */
static bool fvu_send_msg(FuzzInput *in, int sock)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * FVU_MAX_FDS)];
        struct cmsghdr align;
    } control;
    VhostUserMsg msg;
    uint8_t sel;
    size_t size;
    int fds[FVU_MAX_FDS];
    unsigned int nfds, i;
    struct iovec iov;
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    ssize_t n;
    bool alive;

    memset(&msg, 0, sizeof(msg));
    msg.hdr.request = fuzz_u8(in) % (VHOST_USER_MAX + 1);
    sel = fuzz_u8(in);
    msg.hdr.flags = VHOST_USER_VERSION |
                    ((sel & 1) ? VHOST_USER_NEED_REPLY : 0);
    if (sel & 0x80) {
        msg.hdr.flags = fuzz_u32(in);
    }
    size = fuzz_u16(in) % (sizeof(VhostUserPayload) + 9);
    msg.hdr.size = size;
    fuzz_bytes(in, &msg.payload, MIN(size, sizeof(msg.payload)));
    nfds = (fuzz_u8(in) & 15) % (FVU_MAX_FDS + 1);
    for (i = 0; i < nfds; i++) {
        fds[i] = fvu_make_fd(in);
    }

    iov.iov_base = &msg;
    iov.iov_len = VHOST_USER_HDR_SIZE + MIN(size, sizeof(msg.payload));
    if (nfds) {
        struct cmsghdr *c;

        memset(&control, 0, sizeof(control));
        mh.msg_control = control.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    for (i = 0; i < nfds; i++) {
        close(fds[i]);
    }
    if (n < 0) {
        return false;           /* the server closed the session */
    }
    for (i = 0; i < 4; i++) {
        aio_poll(fvu.ctx, false);
    }
    alive = fvu_drain_replies(sock, msg.hdr.request);
    return alive && vu_server_is_connected(fvu.server);
}

/* Called from the fuzzer's thread, once per input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzInput in;
    unsigned int i;
    int sock, nfds, nfds_before = fvu_count_fds();

    fuzz_input_init(&in, data, size);
    sock = fvu_connect();
    for (i = 0; i < FVU_MAX_MSGS && fuzz_remaining(&in) > 0; i++) {
        if (!fvu_send_msg(&in, sock)) {
            break;
        }
    }
    close(sock);
    for (i = 0; i < 100 && vu_server_is_connected(fvu.server); i++) {
        aio_poll(fvu.ctx, false);
    }
    fuzz_check(!vu_server_is_connected(fvu.server),
               "session still up after the front-end disconnected");
    while (aio_poll(fvu.ctx, false)) {
    }

    /* every fd of the session (received ones included) is closed again */
    nfds = fvu_count_fds();
    fuzz_check(nfds <= nfds_before, "%d fds open after the session, %d "
               "before", nfds, nfds_before);
    return 0;
}
