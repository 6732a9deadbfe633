/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-user back-end server: one listening unix socket, one front-end
 * (VMM) session at a time, the control protocol, and the start/stop of the
 * virtqueues in their iothreads.  Device specifics (features, config space,
 * what runs on a kick) come from a VuDeviceOps table.
 *
 * Threads: the server lives in the main thread; its socket handlers run in
 * the main AioContext given at creation.  Each queue belongs to one
 * AioContext (an iothread's), where the queue_* callbacks run.  The main
 * thread only touches a VirtQueue while it is stopped, or through
 * aio_run_sync() into the owner.
 */
#ifndef HW_VIRTIO_VHOST_USER_SERVER_H
#define HW_VIRTIO_VHOST_USER_SERVER_H

#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "hw/virtio/virtqueue.h"

typedef struct VuServer VuServer;

typedef struct VuDeviceOps {
    /* Main thread.  Virtio feature bits of the device (without
     * VHOST_USER_F_PROTOCOL_FEATURES, which the server adds). */
    uint64_t (*get_features)(void *opaque);
    /* Main thread.  Fill up to @size bytes of config space from @offset;
     * false if the range is not readable. */
    bool (*get_config)(void *opaque, uint8_t *buf, uint32_t offset,
                       uint32_t size);
    /* Main thread.  A driver write to the config space. */
    bool (*set_config)(void *opaque, const uint8_t *data, uint32_t offset,
                       uint32_t size);
    /* Main thread, no queue running (optional).  The front-end acked
     * @features (SET_FEATURES). */
    void (*set_features)(void *opaque, uint64_t features);
    /* Main thread, no queue running (optional).  The session state was
     * reset: RESET_OWNER/RESET_DEVICE or the end of the session; nothing
     * is negotiated until the next set_features. */
    void (*reset)(void *opaque);
    /* Main thread, no queue running (optional).  SET_INFLIGHT_FD handed
     * back a region whose device-state area (see VhostUserInflightState)
     * holds @len bytes that vu_server_save_state() stored, maybe in an
     * earlier process of the back-end.  The front-end can write anything
     * there: check every byte.  The device calls vu_server_save_state()
     * with the state it goes on with (the area is rewritten from the
     * last saved state after this returns). */
    void (*load_state)(void *opaque, const uint8_t *data, size_t len);
    /* In the queue's iothread: the queue has started (rings mapped, kick fd
     * set); install the kick handler.  @num is the queue size. */
    void (*queue_start)(void *opaque, unsigned int index, VirtQueue *vq,
                        unsigned int num);
    /* In the queue's iothread: stop taking new requests (remove the kick
     * handler, cancel scheduled work).  In-flight requests still complete
     * (the rings stay mapped until they did); when the last one has, the
     * device calls vu_server_queue_drained(). */
    void (*queue_stop)(void *opaque, unsigned int index, VirtQueue *vq);
    /* In the queue's iothread: requests submitted and not completed yet.
     * After queue_stop the server asks again on each
     * vu_server_queue_drained() and unmaps nothing before it is 0. */
    unsigned int (*queue_inflight)(void *opaque, unsigned int index);
} VuDeviceOps;

/* Copied by vu_server_new() (queue_ctx included). */
typedef struct VuServerConfig {
    const char *socket_path;
    /* listen_fd >= 0: serve on this inherited listening unix socket
     * (addr.type=fd, socket activation) instead of creating socket_path;
     * the server owns it from then on and never unlinks anything.
     * socket_path then only names the export in log lines.  Set it to -1
     * otherwise (0 is stdin, never a listening socket we could take). */
    int listen_fd;
    mode_t socket_mode;         /* 0 = 0600 */
    /* socket_chown: after bind, give the socket file to socket_uid and
     * socket_gid ((uid_t)-1 / (gid_t)-1 keeps that one; needs CAP_CHOWN
     * unless it is our own uid and one of our groups). */
    bool socket_chown;
    uid_t socket_uid;
    gid_t socket_gid;
    const char *name;           /* for log lines (default: socket path) */
    unsigned int num_queues;    /* 1..64 */
    unsigned int max_queue_size; /* largest SET_VRING_NUM accepted */
    AioContext *main_ctx;       /* control path */
    AioContext **queue_ctx;     /* num_queues entries: owner of each queue */
    const VuDeviceOps *ops;
    void *opaque;
} VuServerConfig;

/*
 * Main thread.  Create the listening socket (mode 0600 unless configured,
 * owner and group changed when asked, both before listen()).
 * A stale socket file at the path is replaced; a symlink, a non-socket file
 * or a socket another process still listens on is an error.
 */
VuServer *vu_server_new(const VuServerConfig *cfg, GError **errp);
/* Main thread.  Drop the session (stopping every queue and waiting, in
 * this call, until their in-flight requests completed), close the
 * listening socket and remove the socket file. */
void vu_server_free(VuServer *server);
/* Main thread.  Stop accepting new front-ends (the current session goes on;
 * vu_server_free() ends it). */
void vu_server_stop_listening(VuServer *server);
/* Main thread, for block-export-del.  Drop the current session, if any,
 * logged as the export being removed, as on a disconnect
 * (its queues drain in the background; the next front-end is accepted
 * once they did). */
void vu_server_disconnect(VuServer *server);
/* Any thread (a queue's iothread typically): the device found the guest's
 * rings broken; the session is dropped from the main thread soon after. */
void vu_server_report_broken(VuServer *server);
/* Any thread (the queue's iothread): the last in-flight request of a
 * queue stopped with queue_stop has completed.  Cheap (schedules a bottom
 * half in the main context); a spurious call is harmless. */
void vu_server_queue_drained(VuServer *server);
/* Main thread. */
bool vu_server_is_connected(VuServer *server);
const char *vu_server_get_socket_path(VuServer *server);
/* The listening socket (-1 once it stopped listening). */
int vu_server_get_listen_fd(VuServer *server);
/* No session, and none closing (its requests all completed). */
bool vu_server_is_idle(VuServer *server);
/* Call @fn(@opaque) in the main thread each time a closed session's last
 * request completed and its state is freed (from inside the server: @fn
 * must not free it; schedule a bottom half for that).  NULL: none. */
void vu_server_set_idle_notify(VuServer *server, void (*fn)(void *opaque),
                               void *opaque);
/* Main thread: run @fn in the owner thread of queue @index (if the queue
 * runs; returns false otherwise).  For statistics. */
bool vu_server_run_in_queue(VuServer *server, unsigned int index,
                            void (*fn)(VirtQueue *vq, void *opaque),
                            void *opaque);

/*
 * Main thread.  Keep @len (at most VHOST_USER_INFLIGHT_STATE_DATA_MAX)
 * bytes of device state in the inflight region's device-state area, now
 * if a region is mapped and in every region the session maps later, so
 * that a restarted back-end gets them back through load_state.  Call it
 * whenever the state changes; the bytes are copied.
 */
void vu_server_save_state(VuServer *server, const void *data, size_t len);

/*
 * Main thread.  Tell the front-end that the config space changed (a
 * resize), with VHOST_USER_BACKEND_CONFIG_CHANGE_MSG on the back-end
 * channel; the front-end reads it again with GET_CONFIG and interrupts the
 * driver.  False (nothing sent) without a session, or when the session
 * did not negotiate BACKEND_REQ and CONFIG or gave no channel.
 */
bool vu_server_notify_config_change(VuServer *server);

typedef struct VuServerStats {
    uint64_t sessions;          /* front-ends accepted */
    uint64_t refused;           /* second connections refused */
    uint64_t messages;          /* control messages handled */
    uint64_t bad_messages;      /* messages that dropped the session */
} VuServerStats;
/* Main thread. */
void vu_server_get_stats(VuServer *server, VuServerStats *stats);

#endif
