/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Transport-neutral virtio-blk request processing (VIRTIO 1.2 section 5.2).
 *
 * A request arrives as the iovecs of one descriptor chain (device-readable
 * "out" part with the header and any write data, device-writable "in" part
 * with any read data and the status byte last); it leaves through the
 * block layer, and its completion callback gets the status and the number
 * of bytes written into the "in" iovecs.  Nothing here knows about rings or
 * vhost-user, so a fuzzer or another transport can drive it directly.
 *
 * Threads: virtio_blk_process_req() runs in the iothread that owns the
 * queue; the done callback runs in that same iothread.  Requests that need
 * no I/O (GET_ID, malformed ones) complete before virtio_blk_process_req()
 * returns; the others complete later from the event loop.  No allocation
 * per request: the caller embeds a VirtioBlkReq in its own per-descriptor
 * pool.
 */
#ifndef HW_BLOCK_VIRTIO_BLK_H
#define HW_BLOCK_VIRTIO_BLK_H

#include "qemu/osdep.h"
#include "block/block.h"
#include <linux/virtio_blk.h>

#define VIRTIO_BLK_SECTOR_BITS 9
#define VIRTIO_BLK_SECTOR_SIZE 512
#define VIRTIO_BLK_ID_BYTES 20
#define VIRTIO_BLK_MAX_DISCARD_SECTORS (UINT32_MAX >> 9)

/* Export configuration, fixed while queues run (except writeback). */
typedef struct VirtioBlkConf {
    uint32_t logical_block_size;    /* 512 or 4096 */
    uint16_t num_queues;
    uint16_t queue_size;
    uint32_t seg_max;               /* data segments per request */
    bool readonly;
    bool discard;                   /* offer DISCARD (needs backing support
                                     * unless @discard_ignore) */
    bool discard_ignore;            /* with @discard: complete discards at
                                     * once, storage untouched (QEMU's
                                     * discard=ignore) */
    bool write_zeroes;              /* offer WRITE_ZEROES */
    char serial[VIRTIO_BLK_ID_BYTES + 1];
} VirtioBlkConf;

/*
 * Write cache.  @writeback is the config space's "writeback" field: the
 * cache mode a driver chose through CONFIG_WCE (true at start).  The
 * cache the dataplane uses, @write_cache, is on only while the driver has
 * negotiated VIRTIO_BLK_F_FLUSH as well: a driver that cannot flush gets
 * writethrough (VIRTIO 1.2 5.2.5, 5.2.6), and so does I/O before any
 * feature negotiation.  Writethrough writes are FUA (RWF_DSYNC).
 *
 * @writeback is kept across device resets and sessions on purpose: the
 * front-ends (QEMU's vhost-user-blk, vhost-pci-blk) read the config once
 * when the device is created, cache it, and let the guest's driver read
 * that copy on every probe; they update it on the driver's writes and
 * never re-read it, neither on a guest reset nor on a reconnect.  Going
 * back to writeback behind such a copy that says writethrough would
 * leave a guest that never flushes on a volatile cache.  The vhost-user
 * export keeps it across back-end restarts too, in the inflight region.
 * See docs/architecture.md, "Write cache".
 */
typedef struct VirtioBlkDev {
    BlockBackend *blk;
    VirtioBlkConf conf;
    uint64_t capacity;              /* in 512-byte sectors; atomic, see
                                     * virtio_blk_get_capacity() */
    _Atomic bool writeback;         /* config "writeback": SET_CONFIG */
    _Atomic bool write_cache;       /* writeback && FLUSH negotiated */
    bool features_acked;            /* main thread */
    uint64_t features;              /* acked by the driver; main thread */
} VirtioBlkDev;

typedef struct VirtioBlkReq VirtioBlkReq;
/* @status: VIRTIO_BLK_S_*; @in_len: bytes written to the in iovecs,
 * status byte included. */
typedef void VirtioBlkReqDone(VirtioBlkReq *req, uint8_t status,
                              uint32_t in_len, void *opaque);

struct VirtioBlkReq {
    BlockAIOCB acb;
    VirtioBlkDev *dev;
    VirtioBlkReqDone *done;
    void *opaque;
    uint32_t type;
    uint32_t in_len;
    uint64_t bytes;                 /* data, discard or write-zeroes bytes
                                     * sent to the block layer (statistics) */
    uint64_t offset;                /* ... and where, in bytes */
    uint8_t *status;                /* where the status byte goes */
    struct iovec *data_iov;         /* payload: part of the caller's iovecs */
    int data_niov;
    bool sync_after_write;          /* writethrough: flush after it */
    /* The caller's iovec trimmed in place to exclude the header or the
     * status byte (NULL if none), and its value to restore before @done. */
    struct iovec *trimmed;
    struct iovec trimmed_orig;
};

/* Payload iovecs one request may have (header and status excluded). */
#define VIRTIO_BLK_DATA_IOV_MAX 256

/* Fill @dev from @blk and @conf (capacity from the image). */
bool virtio_blk_dev_init(VirtioBlkDev *dev, BlockBackend *blk,
                         const VirtioBlkConf *conf, GError **errp);
/* Capacity in 512-byte sectors (any thread). */
uint64_t virtio_blk_get_capacity(const VirtioBlkDev *dev);
/* Main thread: take the capacity from the block backend's (new) length;
 * true if it changed.  Requests check against the new value from then on. */
bool virtio_blk_update_capacity(VirtioBlkDev *dev);
/* Feature bits the device offers (virtio-blk and ring features, VERSION_1). */
uint64_t virtio_blk_get_features(const VirtioBlkDev *dev);
/*
 * The driver acked @features (VIRTIO feature bits); recompute what
 * depends on them.  Main thread, while no queue runs.
 */
void virtio_blk_set_features(VirtioBlkDev *dev, uint64_t features);
/*
 * Device reset (or the end of a session): nothing is negotiated any more,
 * so the cache is off until the next virtio_blk_set_features().  The
 * driver's writeback choice stays (see VirtioBlkDev).  Main thread, while
 * no queue runs.
 */
void virtio_blk_reset(VirtioBlkDev *dev);
/* Fill the config space in little-endian. */
void virtio_blk_get_config(VirtioBlkDev *dev, struct virtio_blk_config *cfg);
/* The config space's "writeback" field (the driver's choice, whatever
 * was negotiated).  Main thread. */
bool virtio_blk_get_writeback(VirtioBlkDev *dev);
/* Set it, as the driver's config write does (the vhost-user export
 * restores it after a back-end restart).  Main thread. */
void virtio_blk_set_writeback(VirtioBlkDev *dev, bool writeback);
/* A driver write to the config space; only "writeback" is writable.
 * Returns false for writes outside it. */
bool virtio_blk_set_config(VirtioBlkDev *dev, const uint8_t *data,
                           uint32_t offset, uint32_t size);

/*
 * Start one request.  @out/@in are the chain's iovecs (guest memory,
 * already bounds-checked by the virtqueue).  The payload is passed to the
 * block layer without copying the iovec arrays: they must stay valid until
 * @done runs, and while the request is in flight one iovec of them may be
 * trimmed in place (the one the header or the status byte shares with
 * data); it is restored before @done.  Malformed requests (header too
 * short, no writable status byte, sector past the end, write to a read-only
 * export, unsupported type) complete with IOERR or UNSUPP through @done
 * like any other request.
 *
 * A chain without any writable byte cannot carry a status: @done then gets
 * VIRTIO_BLK_S_IOERR with in_len 0 and nothing is written to guest memory;
 * the caller pushes the element with length 0 (a well-behaved driver never
 * sends such a chain).  @done may run before this function returns (no-I/O
 * and malformed requests), so the caller must be ready for that.
 */
void virtio_blk_process_req(VirtioBlkDev *dev, VirtioBlkReq *req,
                            struct iovec *out, unsigned int out_num,
                            struct iovec *in, unsigned int in_num,
                            VirtioBlkReqDone *done, void *opaque);

#endif
