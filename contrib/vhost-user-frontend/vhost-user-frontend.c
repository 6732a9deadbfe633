/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-user front-end library: shared "guest" memory, driver-side split
 * virtqueues and the vhost-user control protocol, as a VMM would do them.
 * See include/hw/virtio/vhost-user-frontend.h (in this folder) for the
 * theory of operation.
 */
#include "qemu/osdep.h"
#include "hw/virtio/vhost-user-frontend.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/ioctl.h>
#include <linux/vhost.h>
#include "uapi/linux/vhost_blk.h"

#define FE_REPLY_TIMEOUT_MS 10000
#define FE_SLOT_SIZE 32         /* virtio_blk_outhdr (16) + status byte */
#define FE_LOG_GUARD 4096       /* kernel mode: guard page around the log */
#define FE_LOG_GUARD_BYTE 0xa5

typedef struct FrontendRegion {
    int fd;
    uint8_t *host;
    uint64_t size;
    uint64_t gpa;
    uint64_t used;              /* bump allocator offset */
} FrontendRegion;

typedef struct FrontendQueue {
    unsigned int size;
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    uint16_t *used_event;       /* driver -> device, after avail->ring */
    uint16_t *avail_event;      /* device -> driver, after used->ring */
    uint8_t *slots;             /* FE_SLOT_SIZE per descriptor */
    uint64_t slots_gpa;
    int kick_fd;
    int call_fd;
    uint16_t avail_shadow;      /* next avail index we will publish */
    uint16_t avail_published;   /* value stored in avail->idx */
    uint16_t avail_kicked;      /* avail->idx at the last kick decision */
    uint16_t last_used;
    uint16_t free_head;
    unsigned int num_free;
    unsigned int outstanding;
    uint16_t *next_free;        /* driver-private chain links */
    uint16_t *chain_len;        /* 0 = head not in use */
    void **opaque;
    uint64_t kicks;
    uint64_t kicks_suppressed;
    bool started;

    /* Packed ring (VIRTIO_F_RING_PACKED negotiated): the same memory as
     * the split rings (descriptor ring = desc, driver area = avail, device
     * area = used); free_head / next_free / num_free_ids manage buffer
     * ids, num_free counts ring slots. */
    bool packed;
    struct vring_packed_desc *pdesc;
    struct vring_packed_desc_event *driver_event;
    struct vring_packed_desc_event *device_event;
    uint16_t p_avail_idx;       /* next slot we fill */
    bool p_avail_wrap;
    uint16_t p_pub_idx;         /* p_avail_idx at the last kick */
    bool p_pub_wrap;
    uint16_t p_used_idx;        /* next slot the device writes used */
    bool p_used_wrap;
    unsigned int num_free_ids;
    unsigned int npend;         /* buffers whose head flags wait for kick */
    uint16_t *pend_slot;
    uint16_t *pend_flags;
    uint32_t base;              /* vring base last sent / received */
} FrontendQueue;

struct VhostUserFrontend {
    VhostUserFrontendOptions opts;
    char *socket_path;
    int sock;
    uint64_t wanted_features;
    uint64_t wanted_protocol;
    uint64_t backend_features;
    uint64_t features;
    uint64_t protocol_features;
    bool negotiated;
    bool event_idx;
    bool publish_each;          /* avail->idx on every submit, as Linux */
    bool no_interrupts;         /* a polling driver: never re-arm */
    unsigned int nregions;
    FrontendRegion regions[VHOST_USER_MEM_REGIONS_MAX];
    unsigned int num_queues;
    FrontendQueue *queues;
    int inflight_fd;
    int backend_fd;             /* our end of the back-end channel; -1 */
    uint64_t inflight_size;
    uint64_t inflight_offset;
    int kfd;                    /* kernel mode: /dev/vhost-blk, else -1 */
    /* Dirty log (vhost_user_frontend_log_start) */
    int log_fd;
    uint8_t *log;
    uint64_t log_size;
    bool log_on;
};

static uint64_t fe_default_features(void)
{
    return (1ULL << VIRTIO_F_VERSION_1) |
           (1ULL << VIRTIO_RING_F_INDIRECT_DESC) |
           (1ULL << VIRTIO_RING_F_EVENT_IDX) |
           (1ULL << VHOST_USER_F_PROTOCOL_FEATURES) |
           (1ULL << VIRTIO_BLK_F_SEG_MAX) |
           (1ULL << VIRTIO_BLK_F_RO) |
           (1ULL << VIRTIO_BLK_F_BLK_SIZE) |
           (1ULL << VIRTIO_BLK_F_FLUSH) |
           (1ULL << VIRTIO_BLK_F_TOPOLOGY) |
           (1ULL << VIRTIO_BLK_F_CONFIG_WCE) |
           (1ULL << VIRTIO_BLK_F_MQ) |
           (1ULL << VIRTIO_BLK_F_DISCARD) |
           (1ULL << VIRTIO_BLK_F_WRITE_ZEROES);
}

/* ---------------------------------------------------------------------- */
/* Socket I/O                                                             */

static int fe_wait_readable(int fd, int timeout_ms)
{
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    int r;

    do {
        r = poll(&pfd, 1, timeout_ms);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
        return -errno;
    }
    return r == 0 ? -ETIMEDOUT : 0;
}

static int fe_sendmsg(int sock, const void *buf, size_t len,
                      const int *fds, int nfds)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * VHOST_USER_MAX_FDS)];
        struct cmsghdr align;
    } control;
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    ssize_t r;

    if (sock < 0) {
        return -ENOTCONN;
    }
    if (nfds < 0 || nfds > VHOST_USER_MAX_FDS) {
        return -EINVAL;
    }
    if (nfds > 0) {
        struct cmsghdr *cmsg;

        memset(&control, 0, sizeof(control));
        msg.msg_control = control.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * nfds);
    }
    do {
        r = sendmsg(sock, &msg, MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
        return -errno;
    }
    if ((size_t)r != len) {
        /* stream socket: finish the bytes, the fds already went */
        size_t done = r;
        while (done < len) {
            r = send(sock, (const char *)buf + done, len - done, MSG_NOSIGNAL);
            if (r < 0 && errno == EINTR) {
                continue;
            }
            if (r <= 0) {
                return r < 0 ? -errno : -EIO;
            }
            done += r;
        }
    }
    return 0;
}

/* Read exactly @len bytes; collect fds into @fds/@nfds if given. */
static int fe_recv_exact(int sock, void *buf, size_t len, int *fds, int *nfds,
                         int max_fds, int timeout_ms)
{
    size_t done = 0;

    while (done < len) {
        union {
            char buf[CMSG_SPACE(sizeof(int) * VHOST_USER_MAX_FDS)];
            struct cmsghdr align;
        } control;
        struct iovec iov = { .iov_base = (char *)buf + done,
                             .iov_len = len - done };
        struct msghdr msg = {
            .msg_iov = &iov, .msg_iovlen = 1,
            .msg_control = control.buf, .msg_controllen = sizeof(control.buf),
        };
        struct cmsghdr *cmsg;
        ssize_t r;
        int ret;

        ret = fe_wait_readable(sock, timeout_ms);
        if (ret < 0) {
            return ret;
        }
        r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN) {
                continue;
            }
            return errno == ECONNRESET ? -ECONNRESET : -errno;
        }
        for (cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
            if (cmsg->cmsg_level == SOL_SOCKET &&
                cmsg->cmsg_type == SCM_RIGHTS) {
                int n = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                int *in = (int *)CMSG_DATA(cmsg);
                for (int i = 0; i < n; i++) {
                    if (fds && nfds && *nfds < max_fds) {
                        fds[(*nfds)++] = in[i];
                    } else {
                        close(in[i]);
                    }
                }
            }
        }
        if (r == 0) {
            return -ECONNRESET;
        }
        done += r;
    }
    return 0;
}

static int fe_recv_msg(VhostUserFrontend *fe, VhostUserMsg *msg, int *fds,
                       int *nfds, int timeout_ms)
{
    int ret;

    if (nfds) {
        *nfds = 0;
    }
    if (fe->sock < 0) {
        return -ENOTCONN;
    }
    ret = fe_recv_exact(fe->sock, &msg->hdr, VHOST_USER_HDR_SIZE, fds, nfds,
                        VHOST_USER_MAX_FDS, timeout_ms);
    if (ret < 0) {
        return ret;
    }
    if (msg->hdr.size > sizeof(msg->payload)) {
        return -EPROTO;
    }
    if (msg->hdr.size) {
        ret = fe_recv_exact(fe->sock, &msg->payload, msg->hdr.size, fds, nfds,
                            VHOST_USER_MAX_FDS, timeout_ms);
        if (ret < 0) {
            return ret;
        }
    }
    return msg->hdr.size;
}

static bool fe_reply_ack_on(VhostUserFrontend *fe)
{
    return !fe->opts.no_reply_ack &&
           (fe->protocol_features & (1ULL << VHOST_USER_PROTOCOL_F_REPLY_ACK));
}

/*
 * Send @request with @payload; if @reply is non-NULL the request has a
 * reply of its own, read into @reply (up to @reply_size bytes, the actual
 * payload size in *@reply_len) with any fd in *@reply_fd.  Otherwise, with
 * REPLY_ACK negotiated, wait for the ack.
 */
static bool fe_call(VhostUserFrontend *fe, uint32_t request,
                    const void *payload, uint32_t size,
                    const int *fds, int nfds,
                    void *reply, uint32_t reply_size, uint32_t *reply_len,
                    int *reply_fd, GError **errp)
{
    VhostUserMsg msg;
    bool want_ack = !reply && fe_reply_ack_on(fe);
    int rfds[VHOST_USER_MAX_FDS];
    int rnfds = 0;
    int ret;

    if (reply_fd) {
        *reply_fd = -1;
    }
    if (fe->sock < 0) {
        g_set_error(errp, VB_ERROR, 0, "vhost-user %s: not connected",
                    vhost_user_request_name(request));
        return false;
    }
    g_assert(size <= sizeof(msg.payload));
    memset(&msg.hdr, 0, sizeof(msg.hdr));
    msg.hdr.request = request;
    msg.hdr.flags = VHOST_USER_VERSION | (want_ack ? VHOST_USER_NEED_REPLY : 0);
    msg.hdr.size = size;
    if (size) {
        memcpy(&msg.payload, payload, size);
    }
    ret = fe_sendmsg(fe->sock, &msg, VHOST_USER_HDR_SIZE + size, fds, nfds);
    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0, "vhost-user %s: send to %s failed: %s",
                    vhost_user_request_name(request), fe->socket_path,
                    g_strerror(-ret));
        return false;
    }
    if (!reply && !want_ack) {
        return true;
    }

    ret = fe_recv_msg(fe, &msg, rfds, &rnfds, FE_REPLY_TIMEOUT_MS);
    if (ret < 0) {
        g_set_error(errp, VB_ERROR, 0,
                    "vhost-user %s: no reply from back-end %s: %s",
                    vhost_user_request_name(request), fe->socket_path,
                    ret == -ECONNRESET ? "connection closed" :
                    ret == -EPROTO ? "oversized reply" : g_strerror(-ret));
        goto fail;
    }
    if (msg.hdr.request != request ||
        !(msg.hdr.flags & VHOST_USER_REPLY_MASK) ||
        (msg.hdr.flags & VHOST_USER_VERSION_MASK) != VHOST_USER_VERSION) {
        g_set_error(errp, VB_ERROR, 0,
                    "vhost-user %s: bad reply (request %u, flags 0x%x)",
                    vhost_user_request_name(request), msg.hdr.request,
                    msg.hdr.flags);
        goto fail;
    }
    if (want_ack) {
        if (msg.hdr.size != sizeof(uint64_t)) {
            g_set_error(errp, VB_ERROR, 0,
                        "vhost-user %s: ack has %u bytes, expected 8",
                        vhost_user_request_name(request), msg.hdr.size);
            goto fail;
        }
        if (msg.payload.u64 != 0) {
            g_set_error(errp, VB_ERROR, 0,
                        "vhost-user %s: back-end %s refused it (ack %" PRIu64 ")",
                        vhost_user_request_name(request), fe->socket_path,
                        msg.payload.u64);
            goto fail;
        }
    } else {
        if (msg.hdr.size > reply_size) {
            g_set_error(errp, VB_ERROR, 0,
                        "vhost-user %s: reply has %u bytes, expected at most %u",
                        vhost_user_request_name(request), msg.hdr.size,
                        reply_size);
            goto fail;
        }
        memcpy(reply, &msg.payload, msg.hdr.size);
        if (reply_len) {
            *reply_len = msg.hdr.size;
        } else if (msg.hdr.size != reply_size) {
            g_set_error(errp, VB_ERROR, 0,
                        "vhost-user %s: reply has %u bytes, expected %u",
                        vhost_user_request_name(request), msg.hdr.size,
                        reply_size);
            goto fail;
        }
        if (reply_fd && rnfds > 0) {
            *reply_fd = rfds[0];
            rfds[0] = -1;
        }
    }
    for (int i = 0; i < rnfds; i++) {
        if (rfds[i] >= 0) {
            close(rfds[i]);
        }
    }
    return true;

fail:
    for (int i = 0; i < rnfds; i++) {
        if (rfds[i] >= 0) {
            close(rfds[i]);
        }
    }
    return false;
}

static bool fe_call_u64(VhostUserFrontend *fe, uint32_t request, uint64_t v,
                        GError **errp)
{
    return fe_call(fe, request, &v, sizeof(v), NULL, 0, NULL, 0, NULL, NULL,
                   errp);
}

static bool fe_get_u64(VhostUserFrontend *fe, uint32_t request, uint64_t *v,
                       GError **errp)
{
    return fe_call(fe, request, NULL, 0, NULL, 0, v, sizeof(*v), NULL, NULL,
                   errp);
}

static bool fe_call_state(VhostUserFrontend *fe, uint32_t request,
                          unsigned int index, unsigned int num, GError **errp)
{
    VhostUserVringState s = { .index = index, .num = num };

    return fe_call(fe, request, &s, sizeof(s), NULL, 0, NULL, 0, NULL, NULL,
                   errp);
}

/* ---------------------------------------------------------------------- */
/* Connection and negotiation                                             */

static bool fe_connect(VhostUserFrontend *fe, unsigned int timeout_ms,
                       GError **errp)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    int err;

    if (strlen(fe->socket_path) >= sizeof(addr.sun_path)) {
        g_set_error(errp, VB_ERROR, 0, "socket path too long: %s",
                    fe->socket_path);
        return false;
    }
    strcpy(addr.sun_path, fe->socket_path);
    for (;;) {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (s < 0) {
            g_set_error(errp, VB_ERROR, 0, "socket(): %s", g_strerror(errno));
            return false;
        }
        if (connect(s, (struct sockaddr *)&addr, sizeof(addr)) == 0) {
            fe->sock = s;
            return true;
        }
        err = errno;
        close(s);
        if ((err != ENOENT && err != ECONNREFUSED && err != EAGAIN &&
             err != EINTR) || g_get_monotonic_time() >= deadline) {
            break;
        }
        g_usleep(10 * 1000);
    }
    g_set_error(errp, VB_ERROR, 0,
                "cannot connect to vhost-user socket %s within %u ms: %s",
                fe->socket_path, timeout_ms, g_strerror(err));
    return false;
}

static bool fe_negotiate(VhostUserFrontend *fe, GError **errp)
{
    uint64_t backend, features, proto = 0, qnum;
    uint64_t old_proto = fe->protocol_features;

    fe->protocol_features = 0;  /* no REPLY_ACK until negotiated */
    if (!fe_get_u64(fe, VHOST_USER_GET_FEATURES, &backend, errp)) {
        return false;
    }
    features = fe->wanted_features & backend;
    if (!(features & (1ULL << VIRTIO_F_VERSION_1))) {
        g_set_error(errp, VB_ERROR, 0,
                    "back-end %s does not offer VIRTIO_F_VERSION_1 "
                    "(features 0x%" PRIx64 ")", fe->socket_path, backend);
        return false;
    }
    if (features & (1ULL << VHOST_USER_F_PROTOCOL_FEATURES)) {
        uint64_t offered;

        if (!fe_get_u64(fe, VHOST_USER_GET_PROTOCOL_FEATURES, &offered, errp)) {
            return false;
        }
        proto = fe->wanted_protocol & offered;
        if (!fe_call_u64(fe, VHOST_USER_SET_PROTOCOL_FEATURES, proto, errp)) {
            return false;
        }
    }
    if (fe->negotiated && (features != fe->features || proto != old_proto)) {
        g_set_error(errp, VB_ERROR, 0,
                    "back-end %s now negotiates features 0x%" PRIx64
                    " / protocol 0x%" PRIx64 ", was 0x%" PRIx64 " / 0x%" PRIx64,
                    fe->socket_path, features, proto, fe->features, old_proto);
        return false;
    }
    fe->protocol_features = proto;
    if (proto & (1ULL << VHOST_USER_PROTOCOL_F_BACKEND_REQ)) {
        int sv[2];

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
            g_set_error(errp, VB_ERROR, 0, "socketpair: %s",
                        g_strerror(errno));
            return false;
        }
        if (!fe_call(fe, VHOST_USER_SET_BACKEND_REQ_FD, NULL, 0, &sv[1], 1,
                     NULL, 0, NULL, NULL, errp)) {
            close(sv[0]);
            close(sv[1]);
            return false;
        }
        close(sv[1]);
        if (fe->backend_fd >= 0) {
            close(fe->backend_fd);
        }
        fe->backend_fd = sv[0];
    }
    if (proto & (1ULL << VHOST_USER_PROTOCOL_F_MQ)) {
        if (!fe_get_u64(fe, VHOST_USER_GET_QUEUE_NUM, &qnum, errp)) {
            return false;
        }
        if (qnum < fe->num_queues) {
            g_set_error(errp, VB_ERROR, 0,
                        "back-end %s has %" PRIu64 " queues, %u requested",
                        fe->socket_path, qnum, fe->num_queues);
            return false;
        }
    } else if (fe->num_queues > 1) {
        g_set_error(errp, VB_ERROR, 0,
                    "back-end %s does not support multiqueue "
                    "(no VHOST_USER_PROTOCOL_F_MQ), %u queues requested",
                    fe->socket_path, fe->num_queues);
        return false;
    }
    if (!fe_call(fe, VHOST_USER_SET_OWNER, NULL, 0, NULL, 0, NULL, 0, NULL,
                 NULL, errp)) {
        return false;
    }
    fe->backend_features = backend;
    fe->features = features;
    fe->event_idx = features & (1ULL << VIRTIO_RING_F_EVENT_IDX);
    if ((fe->wanted_features & (1ULL << VIRTIO_F_RING_PACKED)) &&
        !(features & (1ULL << VIRTIO_F_RING_PACKED))) {
        g_set_error(errp, VB_ERROR, 0,
                    "back-end %s does not offer VIRTIO_F_RING_PACKED "
                    "(packed virtqueues)", fe->socket_path);
        return false;
    }
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        fe->queues[q].packed = features & (1ULL << VIRTIO_F_RING_PACKED);
    }
    return true;
}

/* ---------------------------------------------------------------------- */
/* Guest memory                                                           */

void *vhost_user_frontend_mem_alloc(VhostUserFrontend *fe, size_t size,
                                    size_t align, GError **errp)
{
    if (align == 0) {
        align = 64;
    }
    for (unsigned int i = 0; i < fe->nregions; i++) {
        FrontendRegion *r = &fe->regions[i];
        uint64_t start = QEMU_ALIGN_UP(r->used, align);

        if (start <= r->size && size <= r->size - start) {
            r->used = start + size;
            return r->host + start;
        }
    }
    g_set_error(errp, VB_ERROR, 0,
                "guest memory exhausted (%zu bytes requested); "
                "raise mem_size or mem_regions", size);
    return NULL;
}

bool vhost_user_frontend_host_to_gpa(VhostUserFrontend *fe, const void *p,
                                     size_t len, uint64_t *gpa)
{
    uintptr_t a = (uintptr_t)p;

    for (unsigned int i = 0; i < fe->nregions; i++) {
        const FrontendRegion *r = &fe->regions[i];
        uintptr_t base = (uintptr_t)r->host;

        if (a >= base && a - base <= r->size && len <= r->size - (a - base)) {
            *gpa = r->gpa + (a - base);
            return true;
        }
    }
    return false;
}

void *vhost_user_frontend_gpa_to_host(VhostUserFrontend *fe, uint64_t gpa,
                                      size_t len)
{
    for (unsigned int i = 0; i < fe->nregions; i++) {
        const FrontendRegion *r = &fe->regions[i];

        if (gpa >= r->gpa && gpa - r->gpa <= r->size &&
            len <= r->size - (gpa - r->gpa)) {
            return r->host + (gpa - r->gpa);
        }
    }
    return NULL;
}

bool vhost_user_frontend_pool_init(VhostUserFrontend *fe,
                                   VhostUserFrontendPool *pool,
                                   unsigned int nbufs, size_t buf_size,
                                   GError **errp)
{
    memset(pool, 0, sizeof(*pool));
    if (nbufs == 0 || buf_size == 0 || buf_size > SIZE_MAX / nbufs) {
        g_set_error(errp, VB_ERROR, 0, "bad buffer pool size %u x %zu",
                    nbufs, buf_size);
        return false;
    }
    buf_size = QEMU_ALIGN_UP(buf_size, 64);
    /* 4096 alignment keeps O_DIRECT back-ends happy */
    pool->base = vhost_user_frontend_mem_alloc(fe, buf_size * nbufs, 4096,
                                               errp);
    if (!pool->base) {
        return false;
    }
    pool->buf_size = buf_size;
    pool->nbufs = nbufs;
    pool->free_stack = g_new(uint32_t, nbufs);
    for (unsigned int i = 0; i < nbufs; i++) {
        pool->free_stack[i] = nbufs - 1 - i;
    }
    pool->nfree = nbufs;
    return true;
}

void vhost_user_frontend_pool_destroy(VhostUserFrontendPool *pool)
{
    g_free(pool->free_stack);
    memset(pool, 0, sizeof(*pool));
}

static bool fe_create_regions(VhostUserFrontend *fe, GError **errp)
{
    for (unsigned int i = 0; i < fe->nregions; i++) {
        FrontendRegion *r = &fe->regions[i];
        void *p;

        r->fd = memfd_create("vhost-user-frontend-mem", MFD_CLOEXEC);
        if (r->fd < 0) {
            g_set_error(errp, VB_ERROR, 0, "memfd_create: %s",
                        g_strerror(errno));
            return false;
        }
        if (ftruncate(r->fd, fe->opts.mem_size) < 0) {
            g_set_error(errp, VB_ERROR, 0, "ftruncate guest memory to %" PRIu64
                        ": %s", fe->opts.mem_size, g_strerror(errno));
            return false;
        }
        p = mmap(NULL, fe->opts.mem_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                 r->fd, 0);
        if (p == MAP_FAILED) {
            g_set_error(errp, VB_ERROR, 0, "mmap guest memory: %s",
                        g_strerror(errno));
            return false;
        }
        r->host = p;
        r->size = fe->opts.mem_size;
        r->gpa = i * VHOST_USER_FRONTEND_REGION_STRIDE;
        r->used = 0;
    }
    return true;
}

/* ---------------------------------------------------------------------- */
/* Virtqueues (driver side)                                               */

static void fe_queue_reset(FrontendQueue *vq)
{
    unsigned int n = vq->size;

    memset(vq->desc, 0, sizeof(struct vring_desc) * n);
    memset(vq->avail, 0, sizeof(struct vring_avail) + 2 * n + 2);
    memset(vq->used, 0, sizeof(struct vring_used) +
           sizeof(struct vring_used_elem) * n + 2);
    for (unsigned int i = 0; i < n; i++) {
        vq->next_free[i] = (i + 1) % n;
        vq->chain_len[i] = 0;
        vq->opaque[i] = NULL;
    }
    vq->free_head = 0;
    vq->num_free = n;
    vq->outstanding = 0;
    vq->avail_shadow = vq->avail_published = vq->avail_kicked = 0;
    vq->last_used = 0;
    /* Packed: both wrap counters start at 1 (VIRTIO 1.2 2.8.1); the zeroed
     * event areas say ENABLE. */
    vq->p_avail_idx = vq->p_pub_idx = vq->p_used_idx = 0;
    vq->p_avail_wrap = vq->p_pub_wrap = vq->p_used_wrap = true;
    vq->num_free_ids = n;
    vq->npend = 0;
    vq->base = 0x80008000u;
}

static bool fe_create_queue(VhostUserFrontend *fe, FrontendQueue *vq,
                            GError **errp)
{
    unsigned int n = fe->opts.queue_size;

    vq->size = n;
    vq->kick_fd = vq->call_fd = -1;
    vq->desc = vhost_user_frontend_mem_alloc(fe, sizeof(struct vring_desc) * n,
                                             4096, NULL);
    vq->avail = vhost_user_frontend_mem_alloc(fe, sizeof(struct vring_avail) +
                                              2 * n + 2, 4096, NULL);
    vq->used = vhost_user_frontend_mem_alloc(fe, sizeof(struct vring_used) +
                                             sizeof(struct vring_used_elem) * n
                                             + 2, 4096, NULL);
    vq->slots = vhost_user_frontend_mem_alloc(fe, (size_t)FE_SLOT_SIZE * n,
                                              4096, NULL);
    if (!vq->desc || !vq->avail || !vq->used || !vq->slots) {
        g_set_error(errp, VB_ERROR, 0,
                    "guest memory too small for %u queues of %u",
                    fe->num_queues, n);
        return false;
    }
    vhost_user_frontend_host_to_gpa(fe, vq->slots, (size_t)FE_SLOT_SIZE * n,
                                    &vq->slots_gpa);
    vq->used_event = &vq->avail->ring[n];
    vq->avail_event = (uint16_t *)&vq->used->ring[n];
    vq->pdesc = (struct vring_packed_desc *)vq->desc;
    vq->driver_event = (struct vring_packed_desc_event *)vq->avail;
    vq->device_event = (struct vring_packed_desc_event *)vq->used;
    vq->pend_slot = g_new(uint16_t, n);
    vq->pend_flags = g_new(uint16_t, n);
    vq->next_free = g_new(uint16_t, n);
    vq->chain_len = g_new(uint16_t, n);
    vq->opaque = g_new(void *, n);
    vq->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    vq->call_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (vq->kick_fd < 0 || vq->call_fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "eventfd: %s", g_strerror(errno));
        return false;
    }
    fe_queue_reset(vq);
    return true;
}

/* ---------------------------------------------------------------------- */
/* Kernel mode (/dev/vhost-blk)                                           */

static bool fe_kioctl(VhostUserFrontend *fe, unsigned long req,
                      const char *name, void *arg, GError **errp)
{
    if (ioctl(fe->kfd, req, arg) < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: %s: %s", fe->socket_path, name,
                    g_strerror(errno));
        return false;
    }
    return true;
}

static uint64_t fe_features_now(VhostUserFrontend *fe);

static bool fe_kernel_open(VhostUserFrontend *fe, GError **errp)
{
    uint64_t features;

    fe->kfd = open(fe->socket_path, O_RDWR | O_CLOEXEC);
    if (fe->kfd < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: %s%s", fe->socket_path,
                    g_strerror(errno), errno == ENOENT ?
                    " (is the vhost_blk module loaded?)" : "");
        return false;
    }
    if (!fe_kioctl(fe, VHOST_SET_OWNER, "VHOST_SET_OWNER", NULL, errp) ||
        !fe_kioctl(fe, VHOST_GET_FEATURES, "VHOST_GET_FEATURES", &features,
                   errp)) {
        return false;
    }
    fe->backend_features = features;
    fe->features = fe->wanted_features & features &
                   ~(1ULL << VHOST_USER_F_PROTOCOL_FEATURES);
    /* The module offers RO as "can be made read-only"; acking it makes the
     * device read-only, so only an explicit request does. */
    if (!fe->opts.features) {
        fe->features &= ~(1ULL << VIRTIO_BLK_F_RO);
    }
    if (!(fe->features & (1ULL << VIRTIO_F_VERSION_1))) {
        g_set_error(errp, VB_ERROR, 0, "%s: no VIRTIO_F_VERSION_1 in the "
                    "device features 0x%" PRIx64, fe->socket_path, features);
        return false;
    }
    fe->event_idx = fe->features & (1ULL << VIRTIO_RING_F_EVENT_IDX);
    return true;
}

static bool fe_kernel_set_backend(VhostUserFrontend *fe, int fd,
                                  GError **errp)
{
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        struct vhost_vring_file f = { .index = q, .fd = fd };

        if (!fe_kioctl(fe, VHOST_BLK_SET_BACKEND, "VHOST_BLK_SET_BACKEND",
                       &f, errp)) {
            return false;
        }
    }
    return true;
}

static bool fe_kernel_start(VhostUserFrontend *fe, GError **errp)
{
    g_autofree struct vhost_memory *mem =
        g_malloc0(sizeof(*mem) + fe->nregions * sizeof(mem->regions[0]));

    uint64_t features = fe_features_now(fe);

    if (fe->log) {
        uint64_t base = (uintptr_t)fe->log;

        if (!fe_kioctl(fe, VHOST_SET_LOG_BASE, "VHOST_SET_LOG_BASE", &base,
                       errp)) {
            return false;
        }
    }
    if (!fe_kioctl(fe, VHOST_SET_FEATURES, "VHOST_SET_FEATURES",
                   &features, errp)) {
        return false;
    }
    mem->nregions = fe->nregions;
    for (unsigned int i = 0; i < fe->nregions; i++) {
        mem->regions[i].guest_phys_addr = fe->regions[i].gpa;
        mem->regions[i].memory_size = fe->regions[i].size;
        mem->regions[i].userspace_addr = (uintptr_t)fe->regions[i].host;
    }
    if (!fe_kioctl(fe, VHOST_SET_MEM_TABLE, "VHOST_SET_MEM_TABLE", mem,
                   errp)) {
        return false;
    }
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        FrontendQueue *vq = &fe->queues[q];
        struct vhost_vring_state num = { .index = q, .num = vq->size };
        struct vhost_vring_state base = { .index = q,
                                          .num = vq->avail_published };
        struct vhost_vring_addr addr = {
            .index = q,
            .flags = fe->log_on ? 1u << VHOST_VRING_F_LOG : 0,
            .desc_user_addr = (uintptr_t)vq->desc,
            .used_user_addr = (uintptr_t)vq->used,
            .avail_user_addr = (uintptr_t)vq->avail,
        };
        struct vhost_vring_file kick = { .index = q, .fd = vq->kick_fd };

        if (fe->log_on) {
            uint64_t gpa = 0;

            vhost_user_frontend_host_to_gpa(fe, vq->used, 1, &gpa);
            addr.log_guest_addr = gpa;
        }
        struct vhost_vring_file call = { .index = q, .fd = vq->call_fd };

        if (!fe_kioctl(fe, VHOST_SET_VRING_NUM, "VHOST_SET_VRING_NUM", &num,
                       errp) ||
            !fe_kioctl(fe, VHOST_SET_VRING_BASE, "VHOST_SET_VRING_BASE",
                       &base, errp) ||
            !fe_kioctl(fe, VHOST_SET_VRING_ADDR, "VHOST_SET_VRING_ADDR",
                       &addr, errp) ||
            !fe_kioctl(fe, VHOST_SET_VRING_KICK, "VHOST_SET_VRING_KICK",
                       &kick, errp) ||
            !fe_kioctl(fe, VHOST_SET_VRING_CALL, "VHOST_SET_VRING_CALL",
                       &call, errp)) {
            return false;
        }
    }
    if (!fe_kernel_set_backend(fe, fe->opts.kernel_backend_fd, errp)) {
        return false;
    }
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        fe->queues[q].started = true;
    }
    return true;
}

static bool fe_kernel_stop(VhostUserFrontend *fe, uint16_t *bases,
                           GError **errp)
{
    if (!fe_kernel_set_backend(fe, -1, errp)) {
        return false;
    }
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        struct vhost_vring_state s = { .index = q };

        if (!fe_kioctl(fe, VHOST_GET_VRING_BASE, "VHOST_GET_VRING_BASE", &s,
                       errp)) {
            return false;
        }
        fe->queues[q].started = false;
        if (bases) {
            bases[q] = s.num;
        }
    }
    return true;
}

int vhost_user_frontend_kernel_fd(VhostUserFrontend *fe)
{
    return fe->kfd;
}

/* ---------------------------------------------------------------------- */
/* Life cycle                                                             */

VhostUserFrontend *vhost_user_frontend_new(const VhostUserFrontendOptions *opts,
                                           GError **errp)
{
    VhostUserFrontend *fe = g_new0(VhostUserFrontend, 1);

    fe->opts = *opts;
    fe->sock = -1;
    fe->kfd = -1;
    fe->inflight_fd = -1;
    fe->log_fd = -1;
    fe->backend_fd = -1;
    for (unsigned int i = 0; i < VHOST_USER_MEM_REGIONS_MAX; i++) {
        fe->regions[i].fd = -1;
    }
    if (!opts->socket_path && !opts->vhost_dev) {
        g_set_error(errp, VB_ERROR, 0, "no vhost-user socket path given");
        goto fail;
    }
    fe->socket_path = g_strdup(opts->vhost_dev ? opts->vhost_dev :
                                        opts->socket_path);
    fe->opts.socket_path = fe->socket_path;
    if (!fe->opts.connect_timeout_ms) {
        fe->opts.connect_timeout_ms = 5000;
    }
    if (!fe->opts.num_queues) {
        fe->opts.num_queues = 1;
    }
    if (!fe->opts.queue_size) {
        fe->opts.queue_size = 128;
    }
    if (!fe->opts.mem_size) {
        fe->opts.mem_size = 64 << 20;
    }
    if (!fe->opts.mem_regions) {
        fe->opts.mem_regions = 1;
    }
    if (fe->opts.num_queues > VHOST_USER_FRONTEND_MAX_QUEUES ||
        fe->opts.queue_size > 32768 ||
        (fe->opts.queue_size & (fe->opts.queue_size - 1)) ||
        fe->opts.mem_regions > VHOST_USER_MEM_REGIONS_MAX ||
        fe->opts.mem_size > VHOST_USER_FRONTEND_REGION_STRIDE ||
        (fe->opts.mem_size & 4095)) {
        g_set_error(errp, VB_ERROR, 0,
                    "bad front-end options: %u queues of %u (power of two, "
                    "at most 32768), %u regions of %" PRIu64 " bytes "
                    "(multiple of 4096, at most 4 GiB)",
                    fe->opts.num_queues, fe->opts.queue_size,
                    fe->opts.mem_regions, fe->opts.mem_size);
        goto fail;
    }
    fe->wanted_features = opts->features ? opts->features :
                          fe_default_features();
    if (opts->packed) {
        fe->wanted_features |= 1ULL << VIRTIO_F_RING_PACKED;
    }
    fe->wanted_protocol = opts->protocol_features;
    if (!fe->wanted_protocol) {
        fe->wanted_protocol = (1ULL << VHOST_USER_PROTOCOL_F_MQ) |
                              (1ULL << VHOST_USER_PROTOCOL_F_REPLY_ACK) |
                              (1ULL << VHOST_USER_PROTOCOL_F_CONFIG) |
                              (1ULL << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD) |
                              (1ULL << VHOST_USER_PROTOCOL_F_LOG_SHMFD);
        if (opts->use_add_mem_reg) {
            fe->wanted_protocol |=
                1ULL << VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS;
        }
    }
    fe->nregions = fe->opts.mem_regions;
    fe->num_queues = fe->opts.num_queues;
    if (!fe_create_regions(fe, errp)) {
        goto fail;
    }
    fe->queues = g_new0(FrontendQueue, fe->num_queues);
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        fe->queues[q].kick_fd = fe->queues[q].call_fd = -1;
    }
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        if (!fe_create_queue(fe, &fe->queues[q], errp)) {
            goto fail;
        }
    }
    if (opts->vhost_dev) {
        if (!fe_kernel_open(fe, errp)) {
            goto fail;
        }
    } else if (!fe_connect(fe, fe->opts.connect_timeout_ms, errp) ||
               !fe_negotiate(fe, errp)) {
        goto fail;
    }
    fe->negotiated = true;
    return fe;

fail:
    vhost_user_frontend_free(fe);
    return NULL;
}

void vhost_user_frontend_free(VhostUserFrontend *fe)
{
    if (!fe) {
        return;
    }
    vhost_user_frontend_disconnect(fe);
    if (fe->kfd >= 0) {
        /* The module waits for requests in flight and frees everything. */
        close(fe->kfd);
    }
    for (unsigned int q = 0; fe->queues && q < fe->num_queues; q++) {
        FrontendQueue *vq = &fe->queues[q];

        if (vq->kick_fd >= 0) {
            close(vq->kick_fd);
        }
        if (vq->call_fd >= 0) {
            close(vq->call_fd);
        }
        g_free(vq->next_free);
        g_free(vq->pend_slot);
        g_free(vq->pend_flags);
        g_free(vq->chain_len);
        g_free(vq->opaque);
    }
    g_free(fe->queues);
    for (unsigned int i = 0; i < VHOST_USER_MEM_REGIONS_MAX; i++) {
        FrontendRegion *r = &fe->regions[i];

        if (r->host) {
            munmap(r->host, r->size);
        }
        if (r->fd >= 0) {
            close(r->fd);
        }
    }
    if (fe->inflight_fd >= 0) {
        close(fe->inflight_fd);
    }
    if (fe->log && fe->kfd >= 0) {
        munmap(fe->log - FE_LOG_GUARD,
               QEMU_ALIGN_UP(fe->log_size, FE_LOG_GUARD) + 2 * FE_LOG_GUARD);
    } else if (fe->log) {
        munmap(fe->log, fe->log_size);
    }
    if (fe->log_fd >= 0) {
        close(fe->log_fd);
    }
    g_free(fe->socket_path);
    g_free(fe);
}

void vhost_user_frontend_disconnect(VhostUserFrontend *fe)
{
    if (fe->sock >= 0) {
        close(fe->sock);
        fe->sock = -1;
    }
    if (fe->backend_fd >= 0) {
        close(fe->backend_fd);
        fe->backend_fd = -1;
    }
    for (unsigned int q = 0; fe->queues && q < fe->num_queues; q++) {
        fe->queues[q].started = false;
    }
}

int vhost_user_frontend_wait_backend_msg(VhostUserFrontend *fe,
                                         unsigned int timeout_ms,
                                         GError **errp)
{
    VhostUserHeader hdr;
    uint8_t payload[sizeof(VhostUserPayload)];
    struct pollfd pfd = { .fd = fe->backend_fd, .events = POLLIN };
    ssize_t n;

    if (fe->backend_fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "no back-end channel (the back-end "
                    "did not offer PROTOCOL_F_BACKEND_REQ, or it was not "
                    "asked for)");
        return -1;
    }
    if (poll(&pfd, 1, timeout_ms) <= 0) {
        g_set_error(errp, VB_ERROR, 0, "no back-end message within %u ms",
                    timeout_ms);
        return -1;
    }
    n = recv(fe->backend_fd, &hdr, sizeof(hdr), MSG_WAITALL);
    if (n != (ssize_t)sizeof(hdr) || hdr.size > sizeof(payload) ||
        (hdr.size &&
         recv(fe->backend_fd, payload, hdr.size, MSG_WAITALL) !=
         (ssize_t)hdr.size)) {
        g_set_error(errp, VB_ERROR, 0, "malformed back-end message");
        return -1;
    }
    return hdr.request;
}

uint64_t vhost_user_frontend_get_features(VhostUserFrontend *fe)
{
    return fe->features;
}

uint64_t vhost_user_frontend_get_backend_features(VhostUserFrontend *fe)
{
    return fe->backend_features;
}

uint64_t vhost_user_frontend_get_protocol_features(VhostUserFrontend *fe)
{
    return fe->protocol_features;
}

bool vhost_user_frontend_has_feature(VhostUserFrontend *fe, unsigned int bit)
{
    return bit < 64 && (fe->features & (1ULL << bit));
}

unsigned int vhost_user_frontend_num_queues(VhostUserFrontend *fe)
{
    return fe->num_queues;
}

unsigned int vhost_user_frontend_queue_size(VhostUserFrontend *fe)
{
    return fe->opts.queue_size;
}

int vhost_user_frontend_inflight_fd(VhostUserFrontend *fe, uint64_t *size)
{
    if (size) {
        *size = fe->inflight_size;
    }
    return fe->inflight_fd;
}

int vhost_user_frontend_socket_fd(VhostUserFrontend *fe)
{
    return fe->sock;
}

/* ---------------------------------------------------------------------- */
/* Control messages                                                       */

uint64_t vhost_user_frontend_get_queue_num(VhostUserFrontend *fe,
                                           GError **errp)
{
    uint64_t n;

    if (!(fe->protocol_features & (1ULL << VHOST_USER_PROTOCOL_F_MQ))) {
        g_set_error(errp, VB_ERROR, 0,
                    "GET_QUEUE_NUM needs VHOST_USER_PROTOCOL_F_MQ");
        return 0;
    }
    if (!fe_get_u64(fe, VHOST_USER_GET_QUEUE_NUM, &n, errp)) {
        return 0;
    }
    return n;
}

bool vhost_user_frontend_get_config(VhostUserFrontend *fe, uint32_t offset,
                                    void *buf, uint32_t size, GError **errp)
{
    VhostUserConfig cfg = { .offset = offset, .size = size, .flags = 0 };
    VhostUserConfig reply;
    uint32_t len = 0;

    if (!(fe->protocol_features & (1ULL << VHOST_USER_PROTOCOL_F_CONFIG))) {
        g_set_error(errp, VB_ERROR, 0,
                    "back-end %s does not support GET_CONFIG "
                    "(no VHOST_USER_PROTOCOL_F_CONFIG)", fe->socket_path);
        return false;
    }
    if (size > VHOST_USER_MAX_CONFIG_SIZE) {
        g_set_error(errp, VB_ERROR, 0, "config size %u too large", size);
        return false;
    }
    if (!fe_call(fe, VHOST_USER_GET_CONFIG, &cfg,
                 VHOST_USER_CONFIG_HDR_SIZE + size, NULL, 0,
                 &reply, sizeof(reply), &len, NULL, errp)) {
        return false;
    }
    if (len != VHOST_USER_CONFIG_HDR_SIZE + size || reply.size != size) {
        g_set_error(errp, VB_ERROR, 0,
                    "GET_CONFIG: back-end %s returned %u bytes (config size "
                    "%u), expected %u", fe->socket_path, len,
                    len >= VHOST_USER_CONFIG_HDR_SIZE ? reply.size : 0, size);
        return false;
    }
    memcpy(buf, reply.region, size);
    return true;
}

bool vhost_user_frontend_get_blk_config(VhostUserFrontend *fe,
                                        struct virtio_blk_config *cfg,
                                        GError **errp)
{
    /* As QEMU sizes it: the config space ends after the last field group
     * a negotiated feature makes valid. */
    uint32_t size = offsetof(struct virtio_blk_config, max_discard_sectors);

    if (fe->features & (1ULL << VIRTIO_BLK_F_DISCARD)) {
        size = offsetof(struct virtio_blk_config, max_write_zeroes_sectors);
    }
    if (fe->features & (1ULL << VIRTIO_BLK_F_WRITE_ZEROES)) {
        size = offsetof(struct virtio_blk_config, unused1) +
               sizeof(cfg->unused1);
    }
    memset(cfg, 0, sizeof(*cfg));
    return vhost_user_frontend_get_config(fe, 0, cfg, size, errp);
}

bool vhost_user_frontend_set_config(VhostUserFrontend *fe, uint32_t offset,
                                    const void *buf, uint32_t size,
                                    GError **errp)
{
    VhostUserConfig cfg = { .offset = offset, .size = size, .flags = 0 };

    if (!(fe->protocol_features & (1ULL << VHOST_USER_PROTOCOL_F_CONFIG))) {
        g_set_error(errp, VB_ERROR, 0,
                    "back-end %s does not support SET_CONFIG", fe->socket_path);
        return false;
    }
    if (size > VHOST_USER_MAX_CONFIG_SIZE) {
        g_set_error(errp, VB_ERROR, 0, "config size %u too large", size);
        return false;
    }
    memcpy(cfg.region, buf, size);
    return fe_call(fe, VHOST_USER_SET_CONFIG, &cfg,
                   VHOST_USER_CONFIG_HDR_SIZE + size, NULL, 0, NULL, 0, NULL,
                   NULL, errp);
}

static bool fe_set_mem(VhostUserFrontend *fe, GError **errp)
{
    int fds[VHOST_USER_MEM_REGIONS_MAX];

    if (fe->opts.use_add_mem_reg &&
        (fe->protocol_features &
         (1ULL << VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS))) {
        uint64_t slots;

        if (!fe_get_u64(fe, VHOST_USER_GET_MAX_MEM_SLOTS, &slots, errp)) {
            return false;
        }
        if (slots < fe->nregions) {
            g_set_error(errp, VB_ERROR, 0,
                        "back-end %s takes %" PRIu64 " memory slots, %u needed",
                        fe->socket_path, slots, fe->nregions);
            return false;
        }
        for (unsigned int i = 0; i < fe->nregions; i++) {
            VhostUserMemRegMsg m = {
                .region = {
                    .guest_phys_addr = fe->regions[i].gpa,
                    .memory_size = fe->regions[i].size,
                    .userspace_addr = (uintptr_t)fe->regions[i].host,
                    .mmap_offset = 0,
                },
            };
            if (!fe_call(fe, VHOST_USER_ADD_MEM_REG, &m, sizeof(m),
                         &fe->regions[i].fd, 1, NULL, 0, NULL, NULL, errp)) {
                return false;
            }
        }
        return true;
    } else {
        VhostUserMemory mem = { .nregions = fe->nregions };

        for (unsigned int i = 0; i < fe->nregions; i++) {
            mem.regions[i].guest_phys_addr = fe->regions[i].gpa;
            mem.regions[i].memory_size = fe->regions[i].size;
            mem.regions[i].userspace_addr = (uintptr_t)fe->regions[i].host;
            mem.regions[i].mmap_offset = 0;
            fds[i] = fe->regions[i].fd;
        }
        return fe_call(fe, VHOST_USER_SET_MEM_TABLE, &mem,
                       offsetof(VhostUserMemory, regions) +
                       sizeof(VhostUserMemoryRegion) * fe->nregions,
                       fds, fe->nregions, NULL, 0, NULL, NULL, errp);
    }
}

static bool fe_inflight(VhostUserFrontend *fe, GError **errp)
{
    VhostUserInflight inf = {
        .num_queues = fe->num_queues,
        .queue_size = fe->opts.queue_size,
    };

    if (fe->opts.no_inflight ||
        !(fe->protocol_features &
          (1ULL << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD))) {
        return true;
    }
    if (fe->inflight_fd < 0) {
        VhostUserInflight reply;
        int fd;

        if (!fe_call(fe, VHOST_USER_GET_INFLIGHT_FD, &inf, sizeof(inf),
                     NULL, 0, &reply, sizeof(reply), NULL, &fd, errp)) {
            return false;
        }
        if (fd < 0) {
            g_set_error(errp, VB_ERROR, 0,
                        "GET_INFLIGHT_FD: back-end %s sent no fd",
                        fe->socket_path);
            return false;
        }
        if (reply.mmap_size == 0) {
            close(fd);
            g_set_error(errp, VB_ERROR, 0,
                        "GET_INFLIGHT_FD: back-end %s sent an empty region",
                        fe->socket_path);
            return false;
        }
        fe->inflight_fd = fd;
        fe->inflight_size = reply.mmap_size;
        fe->inflight_offset = reply.mmap_offset;
    }
    inf.mmap_size = fe->inflight_size;
    inf.mmap_offset = fe->inflight_offset;
    return fe_call(fe, VHOST_USER_SET_INFLIGHT_FD, &inf, sizeof(inf),
                   &fe->inflight_fd, 1, NULL, 0, NULL, NULL, errp);
}

static bool fe_setup_queue(VhostUserFrontend *fe, unsigned int q,
                           uint32_t base, GError **errp)
{
    FrontendQueue *vq = &fe->queues[q];
    VhostUserVringAddr addr = {
        .index = q,
        .flags = 0,
        .desc_user_addr = (uintptr_t)vq->desc,
        .used_user_addr = (uintptr_t)vq->used,
        .avail_user_addr = (uintptr_t)vq->avail,
        .log_guest_addr = 0,
    };
    uint64_t idx = q;

    if (fe->log_on) {
        addr.flags = 1u << VHOST_VRING_F_LOG;
        vhost_user_frontend_host_to_gpa(fe, vq->used, 1, &addr.log_guest_addr);
    }
    return fe_call_state(fe, VHOST_USER_SET_VRING_NUM, q, vq->size, errp) &&
           fe_call_state(fe, VHOST_USER_SET_VRING_BASE, q, base, errp) &&
           fe_call(fe, VHOST_USER_SET_VRING_ADDR, &addr, sizeof(addr), NULL, 0,
                   NULL, 0, NULL, NULL, errp) &&
           fe_call(fe, VHOST_USER_SET_VRING_KICK, &idx, sizeof(idx),
                   &vq->kick_fd, 1, NULL, 0, NULL, NULL, errp) &&
           fe_call(fe, VHOST_USER_SET_VRING_CALL, &idx, sizeof(idx),
                   &vq->call_fd, 1, NULL, 0, NULL, NULL, errp);
}

/* ---------------------------------------------------------------------- */
/* Dirty log                                                              */

static uint64_t fe_features_now(VhostUserFrontend *fe)
{
    return fe->features | (fe->log_on ? 1ULL << VHOST_F_LOG_ALL : 0);
}

uint64_t vhost_user_frontend_log_size(VhostUserFrontend *fe)
{
    uint64_t end = 0;

    for (unsigned int i = 0; i < fe->nregions; i++) {
        end = MAX(end, fe->regions[i].gpa + fe->regions[i].size);
    }
    /* one bit per 4 KiB page, in whole 64-bit words as QEMU makes it */
    return QEMU_ALIGN_UP((end + 4095) / 4096, 64) / 8;
}

/* SET_LOG_BASE with the log fd; the back-end replies (LOG_SHMFD). */
static bool fe_set_log_base(VhostUserFrontend *fe, GError **errp)
{
    VhostUserLog lg = { .mmap_size = fe->log_size, .mmap_offset = 0 };
    uint64_t reply;
    uint32_t len;

    return fe_call(fe, VHOST_USER_SET_LOG_BASE, &lg, sizeof(lg), &fe->log_fd,
                   1, &reply, sizeof(reply), &len, NULL, errp);
}

/*
 * Kernel mode: the log is plain memory of this process (the module marks
 * it through the owner's mm), with one guard page on each side filled with
 * FE_LOG_GUARD_BYTE, so that a test can see the module wrote nothing
 * outside it (vhost_user_frontend_log_guard_intact).
 */
static bool fe_kernel_log_alloc(VhostUserFrontend *fe, uint64_t size,
                                GError **errp)
{
    size_t map = QEMU_ALIGN_UP(size, FE_LOG_GUARD) + 2 * FE_LOG_GUARD;
    uint8_t *p = mmap(NULL, map, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED) {
        g_set_error(errp, VB_ERROR, 0, "mmap dirty log: %s",
                    g_strerror(errno));
        return false;
    }
    memset(p, FE_LOG_GUARD_BYTE, map);
    fe->log = p + FE_LOG_GUARD;
    fe->log_size = size;
    memset(fe->log, 0, size);
    return true;
}

bool vhost_user_frontend_log_guard_intact(VhostUserFrontend *fe)
{
    const uint8_t *lo, *hi;
    size_t hi_len;

    if (!fe->log || fe->kfd < 0) {
        return true;
    }
    lo = fe->log - FE_LOG_GUARD;
    hi = fe->log + fe->log_size;
    hi_len = QEMU_ALIGN_UP(fe->log_size, FE_LOG_GUARD) - fe->log_size +
             FE_LOG_GUARD;
    for (size_t i = 0; i < FE_LOG_GUARD; i++) {
        if (lo[i] != FE_LOG_GUARD_BYTE) {
            return false;
        }
    }
    for (size_t i = 0; i < hi_len; i++) {
        if (hi[i] != FE_LOG_GUARD_BYTE) {
            return false;
        }
    }
    return true;
}

/* As QEMU's vhost_dev_set_log(): features, then each ring's used logging. */
static bool fe_kernel_log_switch(VhostUserFrontend *fe, bool on,
                                 GError **errp)
{
    uint64_t features;

    fe->log_on = on;
    features = fe_features_now(fe);
    if (!fe_kioctl(fe, VHOST_SET_FEATURES, "VHOST_SET_FEATURES", &features,
                   errp)) {
        return false;
    }
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        FrontendQueue *vq = &fe->queues[q];
        struct vhost_vring_addr addr = {
            .index = q,
            .flags = on ? 1u << VHOST_VRING_F_LOG : 0,
            .desc_user_addr = (uintptr_t)vq->desc,
            .used_user_addr = (uintptr_t)vq->used,
            .avail_user_addr = (uintptr_t)vq->avail,
        };

        if (on) {
            uint64_t gpa = 0;

            vhost_user_frontend_host_to_gpa(fe, vq->used, 1, &gpa);
            addr.log_guest_addr = gpa;
        }
        if (!fe_kioctl(fe, VHOST_SET_VRING_ADDR, "VHOST_SET_VRING_ADDR",
                       &addr, errp)) {
            return false;
        }
    }
    return true;
}

static bool fe_log_switch(VhostUserFrontend *fe, bool on, GError **errp)
{
    if (fe->kfd >= 0) {
        return fe_kernel_log_switch(fe, on, errp);
    }
    fe->log_on = on;
    if (!fe_call_u64(fe, VHOST_USER_SET_FEATURES, fe_features_now(fe),
                     errp)) {
        return false;
    }
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        FrontendQueue *vq = &fe->queues[q];
        VhostUserVringAddr addr = {
            .index = q,
            .flags = on ? 1u << VHOST_VRING_F_LOG : 0,
            .desc_user_addr = (uintptr_t)vq->desc,
            .used_user_addr = (uintptr_t)vq->used,
            .avail_user_addr = (uintptr_t)vq->avail,
        };

        if (on) {
            vhost_user_frontend_host_to_gpa(fe, vq->used, 1,
                                            &addr.log_guest_addr);
        }
        if (!fe_call(fe, VHOST_USER_SET_VRING_ADDR, &addr, sizeof(addr),
                     NULL, 0, NULL, 0, NULL, NULL, errp)) {
            return false;
        }
    }
    return true;
}

bool vhost_user_frontend_log_start(VhostUserFrontend *fe, uint64_t size,
                                   GError **errp)
{
    void *p;

    if (fe->kfd >= 0) {
        uint64_t base;

        if (!(fe->backend_features & (1ULL << VHOST_F_LOG_ALL))) {
            g_set_error(errp, VB_ERROR, 0, "%s does not offer VHOST_F_LOG_ALL "
                        "(a vhost_blk module without dirty logging)",
                        fe->socket_path);
            return false;
        }
        if (!fe->log && !fe_kernel_log_alloc(fe, size ? size :
                                             vhost_user_frontend_log_size(fe),
                                             errp)) {
            return false;
        }
        base = (uintptr_t)fe->log;
        return fe_kioctl(fe, VHOST_SET_LOG_BASE, "VHOST_SET_LOG_BASE", &base,
                         errp) &&
               fe_log_switch(fe, true, errp);
    }
    if (!(fe->protocol_features & (1ULL << VHOST_USER_PROTOCOL_F_LOG_SHMFD)) ||
        !(fe->backend_features & (1ULL << VHOST_F_LOG_ALL))) {
        g_set_error(errp, VB_ERROR, 0, "back-end %s cannot log dirty pages "
                    "(LOG_SHMFD not negotiated or VHOST_F_LOG_ALL not "
                    "offered)", fe->socket_path);
        return false;
    }
    if (fe->log_fd < 0) {
        if (!size) {
            size = vhost_user_frontend_log_size(fe);
        }
        fe->log_fd = memfd_create("vhost-user-frontend-log",
                                  MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fe->log_fd < 0 || ftruncate(fe->log_fd, size) < 0) {
            g_set_error(errp, VB_ERROR, 0, "dirty log memfd: %s",
                        g_strerror(errno));
            return false;
        }
        fcntl(fe->log_fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK);
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fe->log_fd,
                 0);
        if (p == MAP_FAILED) {
            g_set_error(errp, VB_ERROR, 0, "mmap dirty log: %s",
                        g_strerror(errno));
            return false;
        }
        fe->log = p;
        fe->log_size = size;
    }
    return fe_set_log_base(fe, errp) && fe_log_switch(fe, true, errp);
}

bool vhost_user_frontend_log_stop(VhostUserFrontend *fe, GError **errp)
{
    return fe_log_switch(fe, false, errp);
}

uint8_t *vhost_user_frontend_log(VhostUserFrontend *fe, uint64_t *size)
{
    *size = fe->log_size;
    return fe->log;
}

/* Everything after negotiation; @reconnect: bases come from used->idx. */
static bool fe_start_queues(VhostUserFrontend *fe, bool reconnect,
                            GError **errp)
{
    if ((fe->log_fd >= 0 && !fe_set_log_base(fe, errp)) ||
        !fe_call_u64(fe, VHOST_USER_SET_FEATURES, fe_features_now(fe), errp) ||
        !fe_inflight(fe, errp) ||
        !fe_set_mem(fe, errp)) {
        return false;
    }
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        FrontendQueue *vq = &fe->queues[q];
        uint32_t base = reconnect ?
            atomic_load_explicit((_Atomic uint16_t *)&vq->used->idx,
                                 memory_order_acquire) :
            vq->avail_published;

        if (vq->packed) {
            /* As QEMU: the last base it sent or got back.  After a crash
             * that is stale; the back-end's inflight region knows better. */
            base = vq->base;
        }

        if (!fe_setup_queue(fe, q, base, errp)) {
            return false;
        }
    }
    if (fe->features & (1ULL << VHOST_USER_F_PROTOCOL_FEATURES)) {
        for (unsigned int q = 0; q < fe->num_queues; q++) {
            if (!fe_call_state(fe, VHOST_USER_SET_VRING_ENABLE, q, 1, errp)) {
                return false;
            }
        }
    }
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        FrontendQueue *vq = &fe->queues[q];
        uint64_t one = 1;

        vq->started = true;
        /* QEMU's host notifiers start signalled: the back-end looks at the
         * avail ring once without waiting for the driver. */
        if (write(vq->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
            g_set_error(errp, VB_ERROR, 0, "kick eventfd: %s",
                        g_strerror(errno));
            return false;
        }
    }
    return true;
}

bool vhost_user_frontend_start(VhostUserFrontend *fe, GError **errp)
{
    if (fe->kfd >= 0) {
        return fe_kernel_start(fe, errp);
    }
    return fe_start_queues(fe, false, errp);
}

bool vhost_user_frontend_replace_vring_fd(VhostUserFrontend *fe,
                                          unsigned int q, uint32_t request,
                                          bool blocking, GError **errp)
{
    uint64_t idx = q;
    int fd;
    int *keep;

    if (q >= fe->num_queues) {
        g_set_error(errp, VB_ERROR, 0, "no queue %u", q);
        return false;
    }
    switch (request) {
    case VHOST_USER_SET_VRING_KICK:
        keep = &fe->queues[q].kick_fd;
        break;
    case VHOST_USER_SET_VRING_CALL:
        keep = &fe->queues[q].call_fd;
        break;
    case VHOST_USER_SET_VRING_ERR:
        keep = NULL;
        break;
    default:
        g_set_error(errp, VB_ERROR, 0, "%s is not a vring fd message",
                    vhost_user_request_name(request));
        return false;
    }
    fd = eventfd(0, EFD_CLOEXEC | (blocking ? 0 : EFD_NONBLOCK));
    if (fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "eventfd: %s", g_strerror(errno));
        return false;
    }
    if (!fe_call(fe, request, &idx, sizeof(idx), &fd, 1, NULL, 0, NULL, NULL,
                 errp)) {
        close(fd);
        return false;
    }
    if (keep) {
        /* The back-end uses the new one from now on: so do we.  A signal
         * that went to the old call fd was for a used element that the
         * next reap sees anyway. */
        if (*keep >= 0) {
            close(*keep);
        }
        *keep = fd;
    } else {
        close(fd);
    }
    return true;
}

bool vhost_user_frontend_restart_queue(VhostUserFrontend *fe, unsigned int q,
                                       GError **errp)
{
    FrontendQueue *vq;
    uint64_t one = 1;

    if (q >= fe->num_queues || fe->queues[q].started) {
        g_set_error(errp, VB_ERROR, 0, "queue %u: not stopped by "
                    "GET_VRING_BASE", q);
        return false;
    }
    vq = &fe->queues[q];
    if (!fe_call_state(fe, VHOST_USER_SET_VRING_BASE, q, vq->base, errp) ||
        !vhost_user_frontend_replace_vring_fd(fe, q,
                                              VHOST_USER_SET_VRING_KICK,
                                              false, errp)) {
        return false;
    }
    vq->started = true;
    if (write(vq->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        g_set_error(errp, VB_ERROR, 0, "kick eventfd: %s", g_strerror(errno));
        return false;
    }
    return true;
}

bool vhost_user_frontend_get_vring_base(VhostUserFrontend *fe, unsigned int q,
                                        uint16_t *base, GError **errp)
{
    VhostUserVringState s = { .index = q }, reply;

    if (q >= fe->num_queues) {
        g_set_error(errp, VB_ERROR, 0, "no queue %u", q);
        return false;
    }
    if (!fe_call(fe, VHOST_USER_GET_VRING_BASE, &s, sizeof(s), NULL, 0,
                 &reply, sizeof(reply), NULL, NULL, errp)) {
        return false;
    }
    if (reply.index != q) {
        g_set_error(errp, VB_ERROR, 0,
                    "GET_VRING_BASE: reply for queue %u, asked for %u",
                    reply.index, q);
        return false;
    }
    fe->queues[q].started = false;
    fe->queues[q].base = reply.num;
    if (base) {
        *base = reply.num;
    }
    return true;
}

bool vhost_user_frontend_stop(VhostUserFrontend *fe, uint16_t *bases,
                              GError **errp)
{
    if (fe->kfd >= 0) {
        return fe_kernel_stop(fe, bases, errp);
    }
    if (fe->features & (1ULL << VHOST_USER_F_PROTOCOL_FEATURES)) {
        for (unsigned int q = 0; q < fe->num_queues; q++) {
            if (!fe_call_state(fe, VHOST_USER_SET_VRING_ENABLE, q, 0, errp)) {
                return false;
            }
        }
    }
    for (unsigned int q = 0; q < fe->num_queues; q++) {
        if (!vhost_user_frontend_get_vring_base(fe, q, bases ? &bases[q] : NULL,
                                                errp)) {
            return false;
        }
    }
    return true;
}

bool vhost_user_frontend_reconnect(VhostUserFrontend *fe,
                                   unsigned int timeout_ms, GError **errp)
{
    vhost_user_frontend_disconnect(fe);
    if (!fe_connect(fe, timeout_ms, errp) || !fe_negotiate(fe, errp) ||
        !fe_start_queues(fe, true, errp)) {
        g_prefix_error(errp, "reconnect: ");
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------------- */
/* Request path                                                           */

static int fe_kick_fd(FrontendQueue *vq)
{
    uint64_t one = 1;

    if (unlikely(write(vq->kick_fd, &one, sizeof(one)) < 0) &&
        errno != EAGAIN) {
        return -errno;
    }
    vq->kicks++;
    return 1;
}

/* Packed ring: one buffer in consecutive slots, every descriptor carrying
 * the buffer id; the head's flags wait for the kick. */
static int fe_packed_submit(VhostUserFrontend *fe, FrontendQueue *vq,
                            uint32_t type, uint64_t sector,
                            const struct iovec *iov, unsigned int niov,
                            bool data_in, void *opaque)
{
    unsigned int n = niov + 2;
    uint16_t id, slot = vq->p_avail_idx;
    bool wrap = vq->p_avail_wrap;
    uint64_t gpa[VHOST_USER_FRONTEND_MAX_SEG];
    struct virtio_blk_outhdr *hdr;
    uint16_t head_slot = slot, head_flags = 0;

    if (unlikely(vq->num_free_ids == 0)) {
        return -ENOSPC;
    }
    if (unlikely(niov > VHOST_USER_FRONTEND_MAX_SEG)) {
        return -EINVAL;
    }
    for (unsigned int i = 0; i < niov; i++) {
        if (unlikely(!vhost_user_frontend_host_to_gpa(fe, iov[i].iov_base,
                                                      iov[i].iov_len,
                                                      &gpa[i]) ||
                     iov[i].iov_len > UINT32_MAX)) {
            return -EFAULT;     /* nothing committed yet */
        }
    }
    id = vq->free_head;
    vq->free_head = vq->next_free[id];
    vq->num_free_ids--;

    for (unsigned int k = 0; k < n; k++) {
        struct vring_packed_desc *d = &vq->pdesc[slot];
        uint16_t flags = k + 1 < n ? VRING_DESC_F_NEXT : 0;

        if (k == 0) {
            d->addr = vq->slots_gpa + (uint64_t)id * FE_SLOT_SIZE;
            d->len = sizeof(struct virtio_blk_outhdr);
        } else if (k + 1 == n) {
            d->addr = vq->slots_gpa + (uint64_t)id * FE_SLOT_SIZE + 16;
            d->len = 1;
            flags |= VRING_DESC_F_WRITE;
        } else {
            d->addr = gpa[k - 1];
            d->len = iov[k - 1].iov_len;
            flags |= data_in ? VRING_DESC_F_WRITE : 0;
        }
        d->id = id;
        flags |= wrap ? 1 << VRING_PACKED_DESC_F_AVAIL
                      : 1 << VRING_PACKED_DESC_F_USED;
        if (k == 0) {
            head_flags = flags;
        } else {
            d->flags = flags;
        }
        if (++slot == vq->size) {
            slot = 0;
            wrap = !wrap;
        }
    }
    hdr = (struct virtio_blk_outhdr *)(vq->slots + (size_t)id * FE_SLOT_SIZE);
    hdr->type = type;
    hdr->ioprio = 0;
    hdr->sector = sector;
    vq->slots[(size_t)id * FE_SLOT_SIZE + 16] = 0xff;   /* not yet written */

    vq->pend_slot[vq->npend] = head_slot;
    vq->pend_flags[vq->npend] = head_flags;
    vq->npend++;
    vq->p_avail_idx = slot;
    vq->p_avail_wrap = wrap;
    vq->num_free -= n;
    vq->chain_len[id] = n;
    vq->opaque[id] = opaque;
    vq->outstanding++;
    return id;
}

/* Packed ring: publish the pending heads, then ask the device event
 * structure whether it wants a kick. */
static int fe_packed_kick(VhostUserFrontend *fe, FrontendQueue *vq)
{
    uint32_t ev;
    uint16_t flags, off_wrap;
    int old, new, event;
    bool need;

    if (vq->npend == 0) {
        return 0;
    }
    /*
     * Last buffer first: the device walks the ring from the first pending
     * head and stops at one not yet available, so it sees none of the
     * batch until the first head's store and then all of it, like the
     * split ring's single avail->idx store.  Release: the buffer's other
     * descriptors (and the later buffers' heads) before a head's flags;
     * pairs with the device's acquire load of those flags.
     */
    for (unsigned int i = vq->npend; i-- > 0;) {
        atomic_store_explicit((_Atomic uint16_t *)
                              &vq->pdesc[vq->pend_slot[i]].flags,
                              vq->pend_flags[i], memory_order_release);
    }
    vq->npend = 0;
    old = vq->p_pub_idx;
    if (vq->p_pub_wrap != vq->p_avail_wrap) {
        old -= vq->size;
    }
    new = vq->p_avail_idx;
    vq->p_pub_idx = vq->p_avail_idx;
    vq->p_pub_wrap = vq->p_avail_wrap;
    /* The flags stores before reading the device's suppression state;
     * pairs with the device's barrier between writing it and looking at
     * the ring again. */
    atomic_thread_fence(memory_order_seq_cst);
    ev = atomic_load_explicit((_Atomic uint32_t *)vq->device_event,
                              memory_order_relaxed);
    off_wrap = ev & 0xffff;
    flags = ev >> 16;
    if (flags == VRING_PACKED_EVENT_FLAG_DISABLE) {
        need = false;
    } else if (flags == VRING_PACKED_EVENT_FLAG_DESC && fe->event_idx) {
        event = off_wrap & 0x7fff;
        if (!!(off_wrap >> 15) != vq->p_avail_wrap) {
            event -= vq->size;
        }
        need = vring_need_event((uint16_t)event, (uint16_t)new,
                                (uint16_t)old);
    } else {
        need = true;
    }
    if (!need) {
        vq->kicks_suppressed++;
        return 0;
    }
    return fe_kick_fd(vq);
}

/* Ask for an interrupt at the next used descriptor (event-idx), or for
 * every one. */
static void fe_packed_want_interrupt(VhostUserFrontend *fe, FrontendQueue *vq)
{
    uint16_t off_wrap = vq->p_used_idx | (vq->p_used_wrap ? 0x8000 : 0);
    uint16_t flags = fe->event_idx ? VRING_PACKED_EVENT_FLAG_DESC
                                   : VRING_PACKED_EVENT_FLAG_ENABLE;

    atomic_store_explicit((_Atomic uint32_t *)vq->driver_event,
                          off_wrap | (uint32_t)flags << 16,
                          memory_order_relaxed);
}

/* A polling driver: no interrupts at all (VIRTIO 1.2 2.8.10). */
static void fe_packed_no_interrupts(FrontendQueue *vq)
{
    atomic_store_explicit((_Atomic uint32_t *)vq->driver_event,
                          (uint32_t)VRING_PACKED_EVENT_FLAG_DISABLE << 16,
                          memory_order_relaxed);
}

static bool fe_packed_used_ready(FrontendQueue *vq)
{
    /* Acquire: pairs with the device's release store of the flags. */
    uint16_t flags = atomic_load_explicit((_Atomic uint16_t *)
                                          &vq->pdesc[vq->p_used_idx].flags,
                                          memory_order_acquire);
    bool avail = flags & (1 << VRING_PACKED_DESC_F_AVAIL);
    bool used = flags & (1 << VRING_PACKED_DESC_F_USED);

    return avail == used && used == vq->p_used_wrap;
}

static int fe_packed_reap(VhostUserFrontend *fe, FrontendQueue *vq,
                          VhostUserFrontendCompletion *out, int max)
{
    int n = 0;

    while (n < max && fe_packed_used_ready(vq)) {
        struct vring_packed_desc *d = &vq->pdesc[vq->p_used_idx];
        uint16_t id = d->id, len;

        if (unlikely(id >= vq->size || vq->chain_len[id] == 0)) {
            return -EPROTO;
        }
        out[n].opaque = vq->opaque[id];
        out[n].head = id;
        out[n].status = vq->slots[(size_t)id * FE_SLOT_SIZE + 16];
        out[n].len = d->len;
        n++;

        len = vq->chain_len[id];
        vq->p_used_idx += len;
        if (vq->p_used_idx >= vq->size) {
            vq->p_used_idx -= vq->size;
            vq->p_used_wrap = !vq->p_used_wrap;
        }
        vq->next_free[id] = vq->free_head;
        vq->free_head = id;
        vq->num_free_ids++;
        vq->num_free += len;
        vq->chain_len[id] = 0;
        vq->opaque[id] = NULL;
        vq->outstanding--;
    }
    if (fe->no_interrupts) {
        fe_packed_no_interrupts(vq);
    } else {
        fe_packed_want_interrupt(fe, vq);
    }
    return n;
}

int vhost_user_frontend_blk_submit(VhostUserFrontend *fe, unsigned int q,
                                   uint32_t type, uint64_t sector,
                                   const struct iovec *iov, unsigned int niov,
                                   bool data_in, void *opaque)
{
    FrontendQueue *vq;
    struct virtio_blk_outhdr *hdr;
    uint16_t head, d, last;
    unsigned int n = niov + 2;

    if (unlikely(q >= fe->num_queues)) {
        return -EINVAL;
    }
    vq = &fe->queues[q];
    if (unlikely(!vq->started)) {
        return -ENOTCONN;
    }
    if (unlikely(n > vq->size)) {
        return -EINVAL;
    }
    if (unlikely(n > vq->num_free)) {
        return -ENOSPC;
    }
    if (vq->packed) {
        return fe_packed_submit(fe, vq, type, sector, iov, niov, data_in,
                                opaque);
    }

    head = vq->free_head;
    /* header */
    vq->desc[head].addr = vq->slots_gpa + (uint64_t)head * FE_SLOT_SIZE;
    vq->desc[head].len = sizeof(struct virtio_blk_outhdr);
    vq->desc[head].flags = VRING_DESC_F_NEXT;
    vq->desc[head].next = vq->next_free[head];
    d = vq->next_free[head];
    /* data */
    for (unsigned int i = 0; i < niov; i++) {
        uint64_t gpa;

        if (unlikely(!vhost_user_frontend_host_to_gpa(fe, iov[i].iov_base,
                                                      iov[i].iov_len, &gpa) ||
                     iov[i].iov_len > UINT32_MAX)) {
            return -EFAULT;     /* nothing committed yet */
        }
        vq->desc[d].addr = gpa;
        vq->desc[d].len = iov[i].iov_len;
        vq->desc[d].flags = VRING_DESC_F_NEXT |
                            (data_in ? VRING_DESC_F_WRITE : 0);
        vq->desc[d].next = vq->next_free[d];
        d = vq->next_free[d];
    }
    /* status */
    last = d;
    vq->desc[last].addr = vq->slots_gpa + (uint64_t)head * FE_SLOT_SIZE + 16;
    vq->desc[last].len = 1;
    vq->desc[last].flags = VRING_DESC_F_WRITE;
    vq->desc[last].next = 0;

    hdr = (struct virtio_blk_outhdr *)(vq->slots + (size_t)head * FE_SLOT_SIZE);
    hdr->type = type;
    hdr->ioprio = 0;
    hdr->sector = sector;
    vq->slots[(size_t)head * FE_SLOT_SIZE + 16] = 0xff;   /* not yet written */

    vq->free_head = vq->next_free[last];
    vq->num_free -= n;
    vq->chain_len[head] = n;
    vq->opaque[head] = opaque;
    vq->outstanding++;
    vq->avail->ring[vq->avail_shadow & (vq->size - 1)] = head;
    vq->avail_shadow++;
    if (fe->publish_each) {
        /* As Linux's virtqueue_add_split(): the device may start on it
         * before the kick decision. */
        atomic_store_explicit((_Atomic uint16_t *)&vq->avail->idx,
                              vq->avail_shadow, memory_order_release);
        vq->avail_published = vq->avail_shadow;
    }
    return head;
}

void vhost_user_frontend_set_publish_each(VhostUserFrontend *fe, bool on)
{
    fe->publish_each = on;
}

void vhost_user_frontend_set_interrupts(VhostUserFrontend *fe, bool on)
{
    fe->no_interrupts = !on;
}

int vhost_user_frontend_kick(VhostUserFrontend *fe, unsigned int q)
{
    FrontendQueue *vq;
    uint16_t old, new;
    bool need;

    if (unlikely(q >= fe->num_queues)) {
        return -EINVAL;
    }
    vq = &fe->queues[q];
    if (vq->packed) {
        return fe_packed_kick(fe, vq);
    }
    old = vq->avail_kicked;
    new = vq->avail_shadow;
    if (old == new) {
        return 0;
    }
    /* Descriptors and ring entries before the index; pairs with the
     * device's read barrier after it loads avail->idx. */
    if (vq->avail_published != new) {
        atomic_store_explicit((_Atomic uint16_t *)&vq->avail->idx, new,
                              memory_order_release);
        vq->avail_published = new;
    }
    vq->avail_kicked = new;
    /* The index store before reading the device's suppression state;
     * pairs with the barrier the device puts between writing avail_event /
     * clearing NO_NOTIFY and re-checking avail->idx. */
    atomic_thread_fence(memory_order_seq_cst);
    if (fe->event_idx) {
        uint16_t ev = atomic_load_explicit((_Atomic uint16_t *)vq->avail_event,
                                           memory_order_relaxed);
        need = vring_need_event(ev, new, old);
    } else {
        need = !(atomic_load_explicit((_Atomic uint16_t *)&vq->used->flags,
                                      memory_order_relaxed) &
                 VRING_USED_F_NO_NOTIFY);
    }
    if (!need) {
        vq->kicks_suppressed++;
        return 0;
    }
    return fe_kick_fd(vq);
}

int vhost_user_frontend_reap(VhostUserFrontend *fe, unsigned int q,
                             VhostUserFrontendCompletion *out, int max)
{
    FrontendQueue *vq;
    uint16_t used_idx;
    int n = 0;

    if (unlikely(q >= fe->num_queues)) {
        return -EINVAL;
    }
    vq = &fe->queues[q];
    if (vq->packed) {
        return fe_packed_reap(fe, vq, out, max);
    }
    /* Pairs with the device's write barrier before it stores used->idx. */
    used_idx = atomic_load_explicit((_Atomic uint16_t *)&vq->used->idx,
                                    memory_order_acquire);
    while (n < max && vq->last_used != used_idx) {
        struct vring_used_elem *e = &vq->used->ring[vq->last_used &
                                                    (vq->size - 1)];
        uint32_t id = e->id;
        uint16_t len, tail;

        if (unlikely(id >= vq->size || vq->chain_len[id] == 0)) {
            return -EPROTO;
        }
        out[n].opaque = vq->opaque[id];
        out[n].head = id;
        out[n].status = vq->slots[(size_t)id * FE_SLOT_SIZE + 16];
        out[n].len = e->len;
        n++;

        len = vq->chain_len[id];
        tail = id;
        for (unsigned int i = 1; i < len; i++) {
            tail = vq->next_free[tail];
        }
        vq->next_free[tail] = vq->free_head;
        vq->free_head = id;
        vq->num_free += len;
        vq->chain_len[id] = 0;
        vq->opaque[id] = NULL;
        vq->outstanding--;
        vq->last_used++;
    }
    if (fe->no_interrupts) {
        /*
         * A polling driver, as Linux's poll queues or SPDK's virtio
         * driver: without event-idx the flag says so; with it, used_event
         * is left where it is and is crossed once per 65536 completions.
         */
        if (!fe->event_idx) {
            atomic_store_explicit((_Atomic uint16_t *)&vq->avail->flags,
                                  VRING_AVAIL_F_NO_INTERRUPT,
                                  memory_order_relaxed);
        }
    } else if (fe->event_idx) {
        /* Ask for an interrupt on the next completion. */
        atomic_store_explicit((_Atomic uint16_t *)vq->used_event,
                              vq->last_used, memory_order_relaxed);
    }
    return n;
}

/*
 * Arm the queue's interrupt, re-check the used ring and wait on the call
 * eventfd for up to @timeout_ns (< 0: forever).  With @watch_socket the
 * control socket is polled too, only for its hang-up (nothing reads it
 * here; a negative fd, in kernel mode, is ignored by ppoll()).
 */
static int fe_wait_ns(VhostUserFrontend *fe, unsigned int q,
                      int64_t timeout_ns, bool watch_socket)
{
    FrontendQueue *vq;
    struct pollfd pfd[2];
    struct timespec ts;
    uint64_t v;
    int r;

    if (unlikely(q >= fe->num_queues)) {
        return -EINVAL;
    }
    vq = &fe->queues[q];
    if (vq->packed) {
        fe_packed_want_interrupt(fe, vq);
    } else if (fe->event_idx) {
        atomic_store_explicit((_Atomic uint16_t *)vq->used_event,
                              vq->last_used, memory_order_relaxed);
    } else if (fe->no_interrupts) {
        /* Cleared for this wait; the next reap sets it again. */
        atomic_store_explicit((_Atomic uint16_t *)&vq->avail->flags, 0,
                              memory_order_relaxed);
    }
    /* used_event store before re-reading used->idx; pairs with the
     * device's barrier between writing used->idx and reading used_event. */
    atomic_thread_fence(memory_order_seq_cst);
    if (vq->packed ? fe_packed_used_ready(vq) :
        atomic_load_explicit((_Atomic uint16_t *)&vq->used->idx,
                             memory_order_acquire) != vq->last_used) {
        return 1;
    }
    pfd[0] = (struct pollfd) { .fd = vq->call_fd, .events = POLLIN };
    pfd[1] = (struct pollfd) { .fd = watch_socket ? fe->sock : -1,
                               .events = POLLRDHUP };
    ts.tv_sec = timeout_ns / 1000000000;
    ts.tv_nsec = timeout_ns % 1000000000;
    do {
        r = ppoll(pfd, 2, timeout_ns < 0 ? NULL : &ts, NULL);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
        return -errno;
    }
    if (r == 0) {
        return 0;
    }
    if (!(pfd[0].revents & POLLIN)) {
        /* Only the socket: the back-end is gone, nothing will complete. */
        return -ENOTCONN;
    }
    if (read(vq->call_fd, &v, sizeof(v)) < 0 && errno != EAGAIN) {
        return -errno;
    }
    return 1;
}

static int64_t fe_ms_to_ns(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : (int64_t)timeout_ms * 1000000;
}

int vhost_user_frontend_wait(VhostUserFrontend *fe, unsigned int q,
                             int timeout_ms)
{
    return fe_wait_ns(fe, q, fe_ms_to_ns(timeout_ms), false);
}

int vhost_user_frontend_wait_ns(VhostUserFrontend *fe, unsigned int q,
                                int64_t timeout_ns)
{
    return fe_wait_ns(fe, q, timeout_ns, false);
}

int vhost_user_frontend_wait_connected(VhostUserFrontend *fe, unsigned int q,
                                       int timeout_ms)
{
    return fe_wait_ns(fe, q, fe_ms_to_ns(timeout_ms), true);
}

int vhost_user_frontend_wait_connected_ns(VhostUserFrontend *fe,
                                          unsigned int q, int64_t timeout_ns)
{
    return fe_wait_ns(fe, q, timeout_ns, true);
}

bool vhost_user_frontend_backend_gone(VhostUserFrontend *fe)
{
    struct pollfd pfd = { .fd = fe->sock, .events = POLLRDHUP };

    return fe->sock >= 0 && poll(&pfd, 1, 0) == 1 &&
           (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

unsigned int vhost_user_frontend_outstanding(VhostUserFrontend *fe,
                                             unsigned int q)
{
    return q < fe->num_queues ? fe->queues[q].outstanding : 0;
}

void vhost_user_frontend_kick_stats(VhostUserFrontend *fe, unsigned int q,
                                    uint64_t *kicks, uint64_t *suppressed)
{
    *kicks = fe->queues[q].kicks;
    *suppressed = fe->queues[q].kicks_suppressed;
}

/* ---------------------------------------------------------------------- */
/* Hooks for hostile tests                                                */

void vhost_user_frontend_rings(VhostUserFrontend *fe, unsigned int q,
                               struct vring_desc **desc,
                               struct vring_avail **avail,
                               struct vring_used **used)
{
    g_assert(q < fe->num_queues);
    *desc = fe->queues[q].desc;
    *avail = fe->queues[q].avail;
    *used = fe->queues[q].used;
}

void vhost_user_frontend_packed_rings(VhostUserFrontend *fe, unsigned int q,
                                      struct vring_packed_desc **desc,
                                      struct vring_packed_desc_event **driver,
                                      struct vring_packed_desc_event **device)
{
    g_assert(q < fe->num_queues);
    *desc = fe->queues[q].pdesc;
    *driver = fe->queues[q].driver_event;
    *device = fe->queues[q].device_event;
}

void vhost_user_frontend_packed_avail_pos(VhostUserFrontend *fe,
                                          unsigned int q, uint16_t *slot,
                                          bool *wrap)
{
    g_assert(q < fe->num_queues);
    *slot = fe->queues[q].p_avail_idx;
    *wrap = fe->queues[q].p_avail_wrap;
}

bool vhost_user_frontend_is_packed(VhostUserFrontend *fe)
{
    return fe->num_queues > 0 && fe->queues[0].packed;
}

void vhost_user_frontend_write_desc(VhostUserFrontend *fe, unsigned int q,
                                    uint16_t i, uint64_t addr, uint32_t len,
                                    uint16_t flags, uint16_t next)
{
    FrontendQueue *vq = &fe->queues[q];

    g_assert(q < fe->num_queues && i < vq->size);
    vq->desc[i].addr = addr;
    vq->desc[i].len = len;
    vq->desc[i].flags = flags;
    vq->desc[i].next = next;
}

void vhost_user_frontend_push_avail_raw(VhostUserFrontend *fe, unsigned int q,
                                        uint16_t head)
{
    FrontendQueue *vq = &fe->queues[q];

    g_assert(q < fe->num_queues);
    vq->avail->ring[vq->avail_shadow & (vq->size - 1)] = head;
    vq->avail_shadow++;
    atomic_store_explicit((_Atomic uint16_t *)&vq->avail->idx,
                          vq->avail_shadow, memory_order_release);
    vq->avail_published = vq->avail_kicked = vq->avail_shadow;
}

void vhost_user_frontend_set_avail_idx_raw(VhostUserFrontend *fe,
                                           unsigned int q, uint16_t idx)
{
    FrontendQueue *vq = &fe->queues[q];

    g_assert(q < fe->num_queues);
    atomic_store_explicit((_Atomic uint16_t *)&vq->avail->idx, idx,
                          memory_order_release);
    vq->avail_shadow = vq->avail_published = vq->avail_kicked = idx;
}

int vhost_user_frontend_kick_raw(VhostUserFrontend *fe, unsigned int q)
{
    g_assert(q < fe->num_queues);
    return fe_kick_fd(&fe->queues[q]);
}

bool vhost_user_frontend_reap_raw(VhostUserFrontend *fe, unsigned int q,
                                  uint32_t *id, uint32_t *len)
{
    FrontendQueue *vq = &fe->queues[q];
    struct vring_used_elem *e;

    g_assert(q < fe->num_queues);
    if (atomic_load_explicit((_Atomic uint16_t *)&vq->used->idx,
                             memory_order_acquire) == vq->last_used) {
        return false;
    }
    e = &vq->used->ring[vq->last_used & (vq->size - 1)];
    *id = e->id;
    *len = e->len;
    vq->last_used++;
    return true;
}

void *vhost_user_frontend_req_slot(VhostUserFrontend *fe, unsigned int q,
                                   uint16_t head)
{
    g_assert(q < fe->num_queues && head < fe->queues[q].size);
    return fe->queues[q].slots + (size_t)head * FE_SLOT_SIZE;
}

int vhost_user_frontend_send_raw(VhostUserFrontend *fe, const void *buf,
                                 size_t len, const int *fds, int nfds)
{
    return fe_sendmsg(fe->sock, buf, len, fds, nfds);
}

int vhost_user_frontend_send_msg_raw(VhostUserFrontend *fe, uint32_t request,
                                     uint32_t flags, uint32_t hdr_size,
                                     const void *payload, size_t payload_len,
                                     const int *fds, int nfds)
{
    g_autofree uint8_t *buf = g_malloc(VHOST_USER_HDR_SIZE + payload_len);
    VhostUserHeader hdr = {
        .request = request, .flags = flags, .size = hdr_size,
    };

    memcpy(buf, &hdr, VHOST_USER_HDR_SIZE);
    if (payload_len) {
        memcpy(buf + VHOST_USER_HDR_SIZE, payload, payload_len);
    }
    return fe_sendmsg(fe->sock, buf, VHOST_USER_HDR_SIZE + payload_len,
                      fds, nfds);
}

int vhost_user_frontend_recv_raw(VhostUserFrontend *fe, VhostUserMsg *msg,
                                 int *fds, int *nfds, int timeout_ms)
{
    if (!fds && nfds) {
        *nfds = 0;
    }
    return fe_recv_msg(fe, msg, fds, fds ? nfds : NULL, timeout_ms);
}

bool vhost_user_frontend_peer_closed(VhostUserFrontend *fe, int timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

    if (fe->sock < 0) {
        return true;
    }
    for (;;) {
        char buf[4096];
        gint64 left = (deadline - g_get_monotonic_time()) / 1000;
        int r;

        r = fe_wait_readable(fe->sock, left > 0 ? (int)left : 0);
        if (r < 0) {
            return false;
        }
        r = fe_recv_exact(fe->sock, buf, 1, NULL, NULL, 0, 0);
        if (r == -ECONNRESET) {
            return true;
        }
        if (r < 0 && r != -ETIMEDOUT) {
            return true;        /* socket error: the peer is gone */
        }
    }
}
