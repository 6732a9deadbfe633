/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-user front-end (the VMM's side) as a small library: it plays what
 * QEMU plays for a vhost-user-blk device, so tests and vhost-blk-bench can
 * drive a back-end without a VM.
 *
 * Theory of operation
 * -------------------
 * vhost_user_frontend_new() creates "guest" memory (one or more shared
 * memfd regions, mapped here; region i sits at guest-physical address
 * i * VHOST_USER_FRONTEND_REGION_STRIDE), lays out one split virtqueue per
 * queue in region 0 (descriptor table, avail ring, used ring, and a
 * per-descriptor slot holding the virtio-blk header and status byte),
 * connects to the back-end's unix socket (retrying until a timeout) and
 * negotiates virtio and protocol features (GET_FEATURES,
 * GET_PROTOCOL_FEATURES, SET_PROTOCOL_FEATURES, GET_QUEUE_NUM, SET_OWNER).
 * Config space (GET_CONFIG/SET_CONFIG) can be read and written from then on.
 *
 * vhost_user_frontend_start() does what QEMU's vhost_user_blk_start() does:
 * SET_FEATURES, GET_INFLIGHT_FD (first start only) and SET_INFLIGHT_FD when
 * INFLIGHT_SHMFD was negotiated, SET_MEM_TABLE (or ADD_MEM_REG), then for
 * each queue SET_VRING_NUM, SET_VRING_BASE, SET_VRING_ADDR, SET_VRING_KICK,
 * SET_VRING_CALL, and SET_VRING_ENABLE; each kick eventfd starts signalled,
 * as QEMU's host notifiers do.  When REPLY_ACK is negotiated every message
 * without its own reply is sent with NEED_REPLY and its ack is checked.
 *
 * With VhostUserFrontendOptions.packed the queues are packed rings
 * (VIRTIO 1.2 2.8) in the same memory: buffers in consecutive descriptor
 * slots with wrap counters, buffer ids returned in any order, the event
 * suppression structures in the driver and device areas; the vring base
 * is QEMU's 32-bit packed encoding, and after a back-end crash the stale
 * base is sent again, as QEMU does.
 *
 * vhost_user_frontend_log_start() turns on dirty logging as QEMU does
 * when a migration starts: it makes a log memfd (one bit per 4 KiB page of
 * guest-physical memory), sends SET_LOG_BASE and waits for its reply, then
 * SET_FEATURES with VHOST_F_LOG_ALL and, per queue, SET_VRING_ADDR with
 * VHOST_VRING_F_LOG and the used ring's guest-physical address;
 * vhost_user_frontend_log() gives the bitmap to read and clear.
 *
 * vhost_user_frontend_reconnect() replays that sequence on a new connection
 * to a restarted back-end, handing over the kept inflight region and using
 * each used ring's current index as the vring base (a dead back-end cannot
 * answer GET_VRING_BASE); the back-end resubmits what was in flight.
 *
 * Request path (lean: no allocation, no lock, no logging): submit one or
 * more requests on a queue with vhost_user_frontend_blk_submit(), then
 * vhost_user_frontend_kick() publishes the batch (one avail->idx store) and
 * writes the kick eventfd at most once, only when the device asked for it
 * (VRING_USED_F_NO_NOTIFY / avail_event).  vhost_user_frontend_reap()
 * collects completions from the used ring; vhost_user_frontend_wait() blocks
 * on the call eventfd.  Errors on this path are negative errno values.
 *
 * Threads: a VhostUserFrontend is not thread-safe as a whole.  Control
 * functions (new, start, stop, reconnect, config, raw messages) must be
 * called from one thread at a time.  While started, each queue may be
 * driven (submit/kick/reap/wait/pool) by its own thread, concurrently with
 * the other queues; no control function may run concurrently with them.
 */
#ifndef HW_VIRTIO_VHOST_USER_FRONTEND_H
#define HW_VIRTIO_VHOST_USER_FRONTEND_H

#include "qemu/osdep.h"
#include "hw/virtio/vhost-user-proto.h"
#include <linux/virtio_blk.h>
#include <linux/virtio_ring.h>

/* Guest-physical distance between the starts of two memory regions; the
 * gap after each region is not guest memory. */
#define VHOST_USER_FRONTEND_REGION_STRIDE (1ULL << 32)
#define VHOST_USER_FRONTEND_MAX_QUEUES    64

typedef struct VhostUserFrontend VhostUserFrontend;

typedef struct VhostUserFrontendOptions {
    const char *socket_path;
    unsigned int connect_timeout_ms;  /* retry connect() this long; 0 = 5 s */
    /* virtio feature bits the driver wants; 0 = the default set (every
     * virtio-blk and ring feature this library knows).  The result is
     * what both sides have.  VIRTIO_F_VERSION_1 must end up set. */
    uint64_t features;
    /* protocol feature bits wanted; 0 = MQ, REPLY_ACK, CONFIG,
     * INFLIGHT_SHMFD, LOG_SHMFD (and CONFIGURE_MEM_SLOTS when
     * use_add_mem_reg) */
    uint64_t protocol_features;
    bool no_reply_ack;                 /* never set NEED_REPLY */
    bool use_add_mem_reg;              /* ADD_MEM_REG instead of SET_MEM_TABLE */
    bool no_inflight;                  /* skip GET/SET_INFLIGHT_FD */
    unsigned int num_queues;           /* 0 = 1 */
    unsigned int queue_size;           /* power of two, 0 = 128 */
    uint64_t mem_size;                 /* per region, 0 = 64 MiB */
    unsigned int mem_regions;          /* 0 = 1, at most 8 */
    bool packed;                       /* add VIRTIO_F_RING_PACKED; fail if
                                        * the back-end does not offer it */
    /*
     * Kernel mode: drive the vhost_blk module through this character
     * device (e.g. /dev/vhost-blk) with the generic vhost ioctls instead
     * of a vhost-user socket (socket_path and the vhost-user options are
     * then ignored).  This process's own memory is the guest memory
     * (SET_MEM_TABLE maps each region's guest-physical address to its
     * address here), as the kernel's tools/virtio vhost_test does.  Start
     * attaches kernel_backend_fd (a raw image file or block device, opened
     * as the caller wants: O_DIRECT or not, read-only or not) to every
     * queue with VHOST_BLK_SET_BACKEND; stop detaches it.  There is no
     * config space: the caller knows the image.  The default feature set
     * leaves out VIRTIO_BLK_F_RO here (acking it makes the module refuse
     * writes); ask for it in .features to get a read-only device.
     */
    const char *vhost_dev;
    int kernel_backend_fd;
} VhostUserFrontendOptions;

/* Data buffers per request the packed ring path takes. */
#define VHOST_USER_FRONTEND_MAX_SEG 256

/* One completed request, from vhost_user_frontend_reap(). */
typedef struct VhostUserFrontendCompletion {
    void *opaque;                      /* as given to blk_submit */
    uint16_t head;                     /* descriptor head of the chain */
    uint8_t status;                    /* VIRTIO_BLK_S_* from the status byte */
    uint32_t len;                      /* used->len written by the device */
} VhostUserFrontendCompletion;

/*
 * Fixed-size buffers in guest memory with a free stack: get/put are O(1)
 * and allocate nothing.  Use one pool per queue (they are not locked).
 */
typedef struct VhostUserFrontendPool {
    uint8_t *base;
    size_t buf_size;
    unsigned int nbufs;
    unsigned int nfree;
    uint32_t *free_stack;
} VhostUserFrontendPool;

/* ---- setup and control (control thread) ---- */

/* Create guest memory and rings, connect, negotiate.  NULL + @errp. */
VhostUserFrontend *vhost_user_frontend_new(const VhostUserFrontendOptions *opts,
                                           GError **errp);
/* Close the connection, unmap and free everything (no messages sent). */
void vhost_user_frontend_free(VhostUserFrontend *fe);

/* Kernel mode: the /dev/vhost-blk fd (for further ioctls, e.g.
 * VHOST_BLK_SET_SERIAL or VHOST_SET_VRING_ERR), or -1 in vhost-user mode. */
int vhost_user_frontend_kernel_fd(VhostUserFrontend *fe);

/* Negotiated values. */
uint64_t vhost_user_frontend_get_features(VhostUserFrontend *fe);
uint64_t vhost_user_frontend_get_backend_features(VhostUserFrontend *fe);
uint64_t vhost_user_frontend_get_protocol_features(VhostUserFrontend *fe);
bool vhost_user_frontend_has_feature(VhostUserFrontend *fe, unsigned int bit);
unsigned int vhost_user_frontend_num_queues(VhostUserFrontend *fe);
unsigned int vhost_user_frontend_queue_size(VhostUserFrontend *fe);

/* GET_QUEUE_NUM (needs protocol MQ).  Returns the count, or 0 + @errp. */
uint64_t vhost_user_frontend_get_queue_num(VhostUserFrontend *fe,
                                           GError **errp);
/* GET_CONFIG of [@offset, @offset + @size) into @buf (needs protocol CONFIG). */
bool vhost_user_frontend_get_config(VhostUserFrontend *fe, uint32_t offset,
                                    void *buf, uint32_t size, GError **errp);
/* struct virtio_blk_config up to the last field group valid for the
 * negotiated features (as QEMU asks); later fields are zero.  Values are little-endian as on the wire. */
bool vhost_user_frontend_get_blk_config(VhostUserFrontend *fe,
                                        struct virtio_blk_config *cfg,
                                        GError **errp);
/* SET_CONFIG (flags = 0: the driver writes).  With REPLY_ACK a refused
 * write is an error. */
bool vhost_user_frontend_set_config(VhostUserFrontend *fe, uint32_t offset,
                                    const void *buf, uint32_t size,
                                    GError **errp);

/* With PROTOCOL_F_BACKEND_REQ asked for (in protocol_features), the
 * library hands the back-end a channel (SET_BACKEND_REQ_FD).  Wait up to
 * @timeout_ms for one message on it (VHOST_USER_BACKEND_*, e.g.
 * CONFIG_CHANGE_MSG); returns its request number, or -1 + @errp. */
int vhost_user_frontend_wait_backend_msg(VhostUserFrontend *fe,
                                         unsigned int timeout_ms,
                                         GError **errp);

/* Set up every queue on the back-end (see the top of this file). */
bool vhost_user_frontend_start(VhostUserFrontend *fe, GError **errp);
/* SET_VRING_ENABLE 0 and GET_VRING_BASE for every queue; the back-end
 * stops processing.  @bases (may be NULL) receives num_queues values. */
bool vhost_user_frontend_stop(VhostUserFrontend *fe, uint16_t *bases,
                              GError **errp);
/* GET_VRING_BASE for one queue. */
bool vhost_user_frontend_get_vring_base(VhostUserFrontend *fe, unsigned int q,
                                        uint16_t *base, GError **errp);
/* Replace queue @q's kick, call or error fd (@request: SET_VRING_KICK,
 * CALL or ERR) with a new eventfd, blocking if @blocking (the back-end
 * must make it non-blocking itself), as QEMU does on a running queue
 * (the call fd whenever the guest masks or unmasks an MSI-X vector).  The
 * library uses the new kick / call fd from then on; for ERR it keeps
 * none. */
bool vhost_user_frontend_replace_vring_fd(VhostUserFrontend *fe,
                                          unsigned int q, uint32_t request,
                                          bool blocking, GError **errp);
/* After vhost_user_frontend_get_vring_base(@q): SET_VRING_BASE with the
 * base it returned and a new kick fd, as QEMU starts a stopped queue again;
 * chains the back-end had not taken yet are taken now. */
bool vhost_user_frontend_restart_queue(VhostUserFrontend *fe, unsigned int q,
                                       GError **errp);
/* Close the socket (a clean disconnect).  Memory and rings are kept. */
void vhost_user_frontend_disconnect(VhostUserFrontend *fe);
/* Connect again (retrying up to @timeout_ms), re-negotiate the same
 * features and restart the queues as QEMU does after a back-end restart:
 * SET_INFLIGHT_FD with the kept region, SET_VRING_BASE = used->idx.
 * Outstanding requests stay outstanding and complete as usual. */
bool vhost_user_frontend_reconnect(VhostUserFrontend *fe,
                                   unsigned int timeout_ms, GError **errp);

/* Inflight region kept from GET_INFLIGHT_FD: fd (-1 if none), size. */
int vhost_user_frontend_inflight_fd(VhostUserFrontend *fe, uint64_t *size);

/*
 * Dirty logging (control functions, started front-end).  log_start makes
 * a log of @size bytes (0: just enough for guest memory), hands it over
 * and turns LOG_ALL and the used ring logging on; log_stop turns them off
 * (the log stays mapped, as in QEMU).  Needs LOG_SHMFD negotiated and
 * VHOST_F_LOG_ALL offered.  Kernel mode (/dev/vhost-blk): VHOST_SET_LOG_BASE
 * with a log in this process's memory, VHOST_SET_FEATURES with LOG_ALL and
 * VHOST_SET_VRING_ADDR with VHOST_VRING_F_LOG, on the running rings, as
 * QEMU's vhost_dev_set_log() does.
 */
bool vhost_user_frontend_log_start(VhostUserFrontend *fe, uint64_t size,
                                   GError **errp);
bool vhost_user_frontend_log_stop(VhostUserFrontend *fe, GError **errp);
/* The log bitmap (bit page % 8 of byte page / 8) and its size; NULL when
 * none was made.  The back-end sets bits concurrently. */
uint8_t *vhost_user_frontend_log(VhostUserFrontend *fe, uint64_t *size);
/* Kernel mode: true while the guard pages around the log are untouched
 * (nothing was written outside the log); true in vhost-user mode. */
bool vhost_user_frontend_log_guard_intact(VhostUserFrontend *fe);
/* Bytes of log guest memory needs (one bit per 4 KiB page). */
uint64_t vhost_user_frontend_log_size(VhostUserFrontend *fe);

/* ---- guest memory ---- */

/* Bump-allocate @size bytes of guest memory (setup time; never freed
 * before vhost_user_frontend_free).  Returns a pointer in this process, or
 * NULL + @errp when full.  @align: power of two, 0 = 64. */
void *vhost_user_frontend_mem_alloc(VhostUserFrontend *fe, size_t size,
                                    size_t align, GError **errp);
/* Host pointer -> guest-physical address; false unless [p, p + len) lies in
 * one region.  Any thread. */
bool vhost_user_frontend_host_to_gpa(VhostUserFrontend *fe, const void *p,
                                     size_t len, uint64_t *gpa);
/* Guest-physical -> host pointer, or NULL.  Any thread. */
void *vhost_user_frontend_gpa_to_host(VhostUserFrontend *fe, uint64_t gpa,
                                      size_t len);

bool vhost_user_frontend_pool_init(VhostUserFrontend *fe,
                                   VhostUserFrontendPool *pool,
                                   unsigned int nbufs, size_t buf_size,
                                   GError **errp);
void vhost_user_frontend_pool_destroy(VhostUserFrontendPool *pool);
/* NULL when empty.  Owner thread of the pool. */
static inline void *vhost_user_frontend_pool_get(VhostUserFrontendPool *pool)
{
    if (unlikely(pool->nfree == 0)) {
        return NULL;
    }
    return pool->base + (size_t)pool->free_stack[--pool->nfree] * pool->buf_size;
}
static inline void vhost_user_frontend_pool_put(VhostUserFrontendPool *pool,
                                                void *buf)
{
    pool->free_stack[pool->nfree++] =
        (uint32_t)(((uint8_t *)buf - pool->base) / pool->buf_size);
}

/* ---- request path (the queue's thread) ---- */

/*
 * Queue one virtio-blk request on queue @q as a chain: header (device
 * readable), the data buffers (device writable when @data_in, e.g. IN and
 * GET_ID; device readable otherwise, e.g. OUT, DISCARD, WRITE_ZEROES), the
 * status byte (device writable).  Buffers must lie in guest memory.  The
 * request is not visible to the device until vhost_user_frontend_kick().
 * Returns the descriptor head, or -ENOSPC (not enough free descriptors),
 * -EFAULT (a buffer outside guest memory), -EINVAL (bad queue or too many
 * buffers), -ENOTCONN (queue not started).
 */
int vhost_user_frontend_blk_submit(VhostUserFrontend *fe, unsigned int q,
                                   uint32_t type, uint64_t sector,
                                   const struct iovec *iov, unsigned int niov,
                                   bool data_in, void *opaque);
/* Publish what was submitted since the last kick; write the kick eventfd
 * once if the device wants a notification.  Returns 1 if kicked, 0 if the
 * kick was suppressed or nothing was pending, -errno on failure. */
int vhost_user_frontend_kick(VhostUserFrontend *fe, unsigned int q);

/*
 * Split rings: store avail->idx on every submit (as Linux's
 * virtqueue_add_split() does), so a polling device can start on a request
 * while the driver is still adding the rest of its batch.  The kick
 * decision is still made once, by vhost_user_frontend_kick().  Default off:
 * the whole batch is published at the kick.
 */
void vhost_user_frontend_set_publish_each(VhostUserFrontend *fe, bool on);
/*
 * Interrupts (default on).  Off: the driver polls its used rings and never
 * asks for an interrupt (split: VRING_AVAIL_F_NO_INTERRUPT, or used_event
 * left alone with event-idx; packed: the driver event flags say DISABLE),
 * as Linux's poll queues and SPDK's virtio driver do.  Takes effect at the
 * next reap; vhost_user_frontend_wait() still arms the queue it waits on.
 */
void vhost_user_frontend_set_interrupts(VhostUserFrontend *fe, bool on);
/* Collect up to @max completions.  Returns how many, or -EPROTO if the
 * device put a bad id in the used ring (the queue is then unusable). */
int vhost_user_frontend_reap(VhostUserFrontend *fe, unsigned int q,
                             VhostUserFrontendCompletion *out, int max);
/* Wait for the call eventfd (cleared on return) or a pending completion.
 * Returns 1 when completions may be there, 0 on timeout (@timeout_ms < 0
 * waits forever), -errno on failure. */
int vhost_user_frontend_wait(VhostUserFrontend *fe, unsigned int q,
                             int timeout_ms);
/* The same, but -ENOTCONN at once when the back-end closes its end of the
 * control socket (a vhost-user back-end that hangs up completes nothing
 * more); for drivers that do not reconnect. */
int vhost_user_frontend_wait_connected(VhostUserFrontend *fe, unsigned int q,
                                       int timeout_ms);
/* Whether the back-end has closed its end of the control socket (one
 * poll() with no timeout: for polling drivers, now and then). */
bool vhost_user_frontend_backend_gone(VhostUserFrontend *fe);
/* The same with a timeout in nanoseconds (< 0: forever). */
int vhost_user_frontend_wait_ns(VhostUserFrontend *fe, unsigned int q,
                                int64_t timeout_ns);
/* wait_connected with a timeout in nanoseconds (< 0: forever). */
int vhost_user_frontend_wait_connected_ns(VhostUserFrontend *fe,
                                          unsigned int q, int64_t timeout_ns);
/* Requests submitted and not yet reaped. */
unsigned int vhost_user_frontend_outstanding(VhostUserFrontend *fe,
                                             unsigned int q);
/* Stats: kicks written and kicks suppressed. */
void vhost_user_frontend_kick_stats(VhostUserFrontend *fe, unsigned int q,
                                    uint64_t *kicks, uint64_t *suppressed);

/* ---- low-level hooks for hostile tests (control thread) ---- */

/* Ring pointers of queue @q (in guest memory). */
void vhost_user_frontend_rings(VhostUserFrontend *fe, unsigned int q,
                               struct vring_desc **desc,
                               struct vring_avail **avail,
                               struct vring_used **used);
/* Packed rings (VIRTIO_F_RING_PACKED negotiated): descriptor ring and
 * the two event suppression areas of queue @q. */
bool vhost_user_frontend_is_packed(VhostUserFrontend *fe);
void vhost_user_frontend_packed_rings(VhostUserFrontend *fe, unsigned int q,
                                      struct vring_packed_desc **desc,
                                      struct vring_packed_desc_event **driver,
                                      struct vring_packed_desc_event **device);
/* The next slot the library fills and its wrap counter (hand-built
 * buffers go there, on a queue with nothing outstanding). */
void vhost_user_frontend_packed_avail_pos(VhostUserFrontend *fe,
                                          unsigned int q, uint16_t *slot,
                                          bool *wrap);
/* Write descriptor @i of queue @q as given. */
void vhost_user_frontend_write_desc(VhostUserFrontend *fe, unsigned int q,
                                    uint16_t i, uint64_t addr, uint32_t len,
                                    uint16_t flags, uint16_t next);
/* Descriptors used by the library's own submit path come from the low
 * indexes first; hand-built chains should use high indexes on a queue with
 * nothing outstanding. */
/* Put @head into the next avail slot and publish avail->idx + 1 (raw: the
 * library's own bookkeeping does not see it). */
void vhost_user_frontend_push_avail_raw(VhostUserFrontend *fe, unsigned int q,
                                        uint16_t head);
/* Store an arbitrary avail->idx. */
void vhost_user_frontend_set_avail_idx_raw(VhostUserFrontend *fe,
                                           unsigned int q, uint16_t idx);
/* Take the next used element without any bookkeeping (for chains pushed
 * with push_avail_raw).  False if the used ring has nothing new. */
bool vhost_user_frontend_reap_raw(VhostUserFrontend *fe, unsigned int q,
                                  uint32_t *id, uint32_t *len);
/* Write the kick eventfd unconditionally. */
int vhost_user_frontend_kick_raw(VhostUserFrontend *fe, unsigned int q);
/* Per-descriptor slot of the library (16-byte header then status byte at
 * offset 16), so a test can build chains by hand. */
void *vhost_user_frontend_req_slot(VhostUserFrontend *fe, unsigned int q,
                                   uint16_t head);

/* Send @len raw bytes (header and payload as the caller made them, sizes
 * unchecked) with @nfds fds.  0 or -errno. */
int vhost_user_frontend_send_raw(VhostUserFrontend *fe, const void *buf,
                                 size_t len, const int *fds, int nfds);
/* Send a message with header fields as given and @payload of
 * @payload_len bytes (the header's size field is @hdr_size, which may
 * differ).  0 or -errno. */
int vhost_user_frontend_send_msg_raw(VhostUserFrontend *fe, uint32_t request,
                                     uint32_t flags, uint32_t hdr_size,
                                     const void *payload, size_t payload_len,
                                     const int *fds, int nfds);
/* Receive one reply (header, then up to sizeof(payload) bytes it announces).
 * Received fds go to @fds (closed if @fds is NULL).  Returns the payload
 * size, -ETIMEDOUT, -ECONNRESET on EOF, -EPROTO on a bad header. */
int vhost_user_frontend_recv_raw(VhostUserFrontend *fe, VhostUserMsg *msg,
                                 int *fds, int *nfds, int timeout_ms);
/* Wait up to @timeout_ms for the back-end to close the connection
 * (discarding whatever it sends).  True if it did. */
bool vhost_user_frontend_peer_closed(VhostUserFrontend *fe, int timeout_ms);
/* Socket fd (-1 when disconnected). */
int vhost_user_frontend_socket_fd(VhostUserFrontend *fe);

#endif
