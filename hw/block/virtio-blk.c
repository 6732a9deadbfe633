/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Transport-neutral virtio-blk request processing (VIRTIO 1.2 section 5.2):
 * parse a request from the iovecs of one chain, check it, hand it to the
 * block layer and report its status.
 *
 * Everything in the chain is guest-controlled: the header may be split
 * across iovecs or be short, the status byte may be missing, the sector
 * and lengths may point anywhere.  Each request is checked against the
 * export (capacity, logical block size, read-only) before any I/O; a bad
 * one completes at once with VIRTIO_BLK_S_IOERR or VIRTIO_BLK_S_UNSUPP.
 * Nothing here allocates: all per-request state lives in VirtioBlkReq.
 * Nor does it copy iovec arrays: the payload is the chain's own iovecs
 * minus the header (in front of the out part) and the status byte (at the
 * end of the in part).  When one of those shares an iovec with data, that
 * iovec is trimmed in place and restored when the request completes.
 *
 * Writethrough (the driver cleared "writeback" in the config space, or
 * did not negotiate FLUSH: see VirtioBlkDev) makes each write a FUA write
 * (RWF_DSYNC: one engine operation; the engines fall back to write plus
 * fdatasync where the kernel lacks it).  Write-zeroes has no FUA form: it
 * is followed by a flush of the image, reusing the request's control
 * block from the completion callback.
 */
#include "qemu/osdep.h"
#include "hw/block/virtio-blk.h"
#include "qemu/iov.h"

#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

/* Data segments per request we offer at most: the payload limit minus
 * room for a header and a status byte sharing descriptors with data. */
#define VIRTIO_BLK_SEG_MAX_LIMIT (VIRTIO_BLK_DATA_IOV_MAX - 2)

#ifndef VIRTIO_BLK_T_GET_LIFETIME
#define VIRTIO_BLK_T_GET_LIFETIME 10
#endif

/* Called from: the main thread. */
bool virtio_blk_dev_init(VirtioBlkDev *dev, BlockBackend *blk,
                         const VirtioBlkConf *conf, GError **errp)
{
    uint32_t lbs = conf->logical_block_size ? conf->logical_block_size : 512;
    uint64_t len;

    if (lbs < VIRTIO_BLK_SECTOR_SIZE || lbs > 65536 || (lbs & (lbs - 1))) {
        g_set_error(errp, VB_ERROR, 0,
                    "logical block size %u is invalid (use 512 or 4096)", lbs);
        return false;
    }
    if (lbs < blk_get_logical_block_size(blk)) {
        g_set_error(errp, VB_ERROR, 0,
                    "logical block size %u is smaller than the backing "
                    "device's %u", lbs, blk_get_logical_block_size(blk));
        return false;
    }
    if (conf->seg_max > VIRTIO_BLK_SEG_MAX_LIMIT) {
        g_set_error(errp, VB_ERROR, 0, "seg-max %u is too large (at most %zu)",
                    conf->seg_max, (size_t)VIRTIO_BLK_SEG_MAX_LIMIT);
        return false;
    }
    if (conf->num_queues == 0) {
        g_set_error(errp, VB_ERROR, 0, "num-queues must be at least 1");
        return false;
    }
    len = blk_getlength(blk);
    if (len < lbs) {
        g_set_error(errp, VB_ERROR, 0,
                    "the image (%" PRIu64 " bytes) is smaller than one block "
                    "of %u bytes", len, lbs);
        return false;
    }

    memset(dev, 0, sizeof(*dev));
    dev->blk = blk;
    dev->conf = *conf;
    dev->conf.logical_block_size = lbs;
    dev->conf.serial[VIRTIO_BLK_ID_BYTES] = '\0';
    if (dev->conf.seg_max == 0) {
        uint32_t qs = conf->queue_size ? conf->queue_size : 128;

        dev->conf.seg_max = MIN(MAX(qs, 3) - 2, VIRTIO_BLK_SEG_MAX_LIMIT);
    }
    dev->conf.readonly = conf->readonly || blk_is_read_only(blk);
    /*
     * discard=ignore offers DISCARD whatever the storage can, as QEMU
     * does: the guest's discards succeed and change nothing.
     */
    dev->conf.discard = conf->discard &&
                        (conf->discard_ignore || blk_can_discard(blk));
    dev->conf.discard_ignore = dev->conf.discard && conf->discard_ignore;
    /* A partial last block is not visible to the guest. */
    dev->capacity = QEMU_ALIGN_DOWN(len, lbs) >> VIRTIO_BLK_SECTOR_BITS;
    atomic_store(&dev->writeback, true);
    atomic_store(&dev->write_cache, false);     /* nothing negotiated yet */
    return true;
}

/* Called from: any thread.  Pairs with the store in
 * virtio_blk_update_capacity(); a request sees the old or the new size. */
uint64_t virtio_blk_get_capacity(const VirtioBlkDev *dev)
{
    return __atomic_load_n(&dev->capacity, __ATOMIC_RELAXED);
}

/* Called from: the main thread, after blk_truncate(). */
bool virtio_blk_update_capacity(VirtioBlkDev *dev)
{
    uint64_t len = blk_getlength(dev->blk);
    uint64_t cap = QEMU_ALIGN_DOWN(len, dev->conf.logical_block_size) >>
                   VIRTIO_BLK_SECTOR_BITS;

    if (cap == virtio_blk_get_capacity(dev)) {
        return false;
    }
    __atomic_store_n(&dev->capacity, cap, __ATOMIC_RELAXED);
    return true;
}

/* Called from: any thread. */
uint64_t virtio_blk_get_features(const VirtioBlkDev *dev)
{
    uint64_t f = 0;

    f |= 1ull << VIRTIO_F_VERSION_1;
    f |= 1ull << VIRTIO_RING_F_INDIRECT_DESC;
    f |= 1ull << VIRTIO_RING_F_EVENT_IDX;
    f |= 1ull << VIRTIO_F_RING_PACKED;
    f |= 1ull << VIRTIO_BLK_F_SEG_MAX;
    f |= 1ull << VIRTIO_BLK_F_BLK_SIZE;
    f |= 1ull << VIRTIO_BLK_F_TOPOLOGY;
    f |= 1ull << VIRTIO_BLK_F_FLUSH;
    f |= 1ull << VIRTIO_BLK_F_CONFIG_WCE;
    f |= 1ull << VIRTIO_BLK_F_MQ;
    if (dev->conf.discard) {
        f |= 1ull << VIRTIO_BLK_F_DISCARD;
    }
    if (dev->conf.write_zeroes) {
        f |= 1ull << VIRTIO_BLK_F_WRITE_ZEROES;
    }
    if (dev->conf.readonly) {
        f |= 1ull << VIRTIO_BLK_F_RO;
    }
    return f;
}

/* Whether the driver may rely on a volatile cache: it can flush it. */
static bool virtio_blk_can_flush(const VirtioBlkDev *dev)
{
    return dev->features_acked &&
           (dev->features & (1ull << VIRTIO_BLK_F_FLUSH));
}

/* Main thread: recompute the cache the dataplane uses. */
static void virtio_blk_update_write_cache(VirtioBlkDev *dev)
{
    atomic_store(&dev->write_cache,
                 atomic_load(&dev->writeback) && virtio_blk_can_flush(dev));
}

/* Called from: the main thread. */
void virtio_blk_set_features(VirtioBlkDev *dev, uint64_t features)
{
    dev->features = features;
    dev->features_acked = true;
    virtio_blk_update_write_cache(dev);
}

/* Called from: the main thread. */
void virtio_blk_reset(VirtioBlkDev *dev)
{
    dev->features = 0;
    dev->features_acked = false;
    virtio_blk_update_write_cache(dev);
}

static uint32_t virtio_blk_max_sectors(const VirtioBlkDev *dev)
{
    uint32_t align = dev->conf.logical_block_size >> VIRTIO_BLK_SECTOR_BITS;

    return QEMU_ALIGN_DOWN(VIRTIO_BLK_MAX_DISCARD_SECTORS, align);
}

/* Called from: the main thread (reads the negotiated features). */
void virtio_blk_get_config(VirtioBlkDev *dev, struct virtio_blk_config *cfg)
{
    uint32_t lbs = dev->conf.logical_block_size;
    uint32_t pbs = MAX(blk_get_physical_block_size(dev->blk), lbs);
    uint8_t exp = 0;

    while ((lbs << (exp + 1)) <= pbs && exp < 15) {
        exp++;
    }

    memset(cfg, 0, sizeof(*cfg));
    cfg->capacity = GUINT64_TO_LE(virtio_blk_get_capacity(dev));
    cfg->size_max = 0;                      /* SIZE_MAX not offered */
    cfg->seg_max = GUINT32_TO_LE(dev->conf.seg_max);
    cfg->blk_size = GUINT32_TO_LE(lbs);
    cfg->physical_block_exp = exp;
    cfg->alignment_offset = 0;
    /* in logical blocks: one physical block */
    cfg->min_io_size = GUINT16_TO_LE(1u << exp);
    /* in logical blocks: e.g. an RBD image's object size */
    cfg->opt_io_size = GUINT32_TO_LE(blk_get_optimal_io_size(dev->blk) / lbs);
    /* Before negotiation: the driver's choice (what a front-end caches
     * when the device is created); a driver without FLUSH: writethrough. */
    if (dev->features_acked && !virtio_blk_can_flush(dev)) {
        cfg->wce = 0;
    } else {
        cfg->wce = atomic_load(&dev->writeback) ? 1 : 0;
    }
    cfg->num_queues = GUINT16_TO_LE(dev->conf.num_queues);
    cfg->max_discard_sectors = GUINT32_TO_LE(virtio_blk_max_sectors(dev));
    cfg->max_discard_seg = GUINT32_TO_LE(1);
    cfg->discard_sector_alignment =
        GUINT32_TO_LE(lbs >> VIRTIO_BLK_SECTOR_BITS);
    cfg->max_write_zeroes_sectors = GUINT32_TO_LE(virtio_blk_max_sectors(dev));
    cfg->max_write_zeroes_seg = GUINT32_TO_LE(1);
    /* UNMAP may deallocate only where a DISCARD could. */
    cfg->write_zeroes_may_unmap =
        dev->conf.discard && !dev->conf.discard_ignore ? 1 : 0;
}

/* Called from: the main thread. */
bool virtio_blk_get_writeback(VirtioBlkDev *dev)
{
    return atomic_load(&dev->writeback);
}

/* Called from: the main thread (SET_CONFIG, restored state). */
void virtio_blk_set_writeback(VirtioBlkDev *dev, bool writeback)
{
    atomic_store(&dev->writeback, writeback);
    virtio_blk_update_write_cache(dev);
}

/* Called from: the main thread (SET_CONFIG). */
bool virtio_blk_set_config(VirtioBlkDev *dev, const uint8_t *data,
                           uint32_t offset, uint32_t size)
{
    if (offset != offsetof(struct virtio_blk_config, wce) || size != 1) {
        return false;
    }
    virtio_blk_set_writeback(dev, data[0] != 0);
    return true;
}

/* Complete @req now or from its I/O callback.  Owner thread. */
static void virtio_blk_req_complete(VirtioBlkReq *req, uint8_t status)
{
    uint32_t in_len;

    if (req->trimmed) {
        *req->trimmed = req->trimmed_orig;
        req->trimmed = NULL;
    }
    if (req->status) {
        *req->status = status;
        in_len = req->in_len + 1;
    } else {
        /* No writable byte: the request cannot carry a status. */
        status = VIRTIO_BLK_S_IOERR;
        in_len = 0;
    }
    req->done(req, status, in_len, req->opaque);
}

static void virtio_blk_io_cb(void *opaque, int ret)
{
    VirtioBlkReq *req = opaque;
    uint8_t status;

    if (ret == 0 && req->sync_after_write) {
        /* Writethrough: the write is done, now make it durable.  The
         * block layer no longer uses the control block. */
        req->sync_after_write = false;
        blk_aio_flush(req->dev->blk, &req->acb, virtio_blk_io_cb, req);
        return;
    }
    if (ret == 0) {
        status = VIRTIO_BLK_S_OK;
    } else if (ret == -ENOTSUP && req->type == VIRTIO_BLK_T_DISCARD) {
        status = VIRTIO_BLK_S_UNSUPP;
    } else {
        status = VIRTIO_BLK_S_IOERR;
    }
    virtio_blk_req_complete(req, status);
}

/* Whether [sector, sector + nsectors) is aligned and inside the disk. */
static bool virtio_blk_range_ok(VirtioBlkDev *dev, uint64_t sector,
                                uint64_t nsectors)
{
    /* A power of two (virtio_blk_dev_init() checks it): a mask, not two
     * divisions. */
    uint64_t mask = (dev->conf.logical_block_size >>
                     VIRTIO_BLK_SECTOR_BITS) - 1;
    /* Pairs with the store in virtio_blk_update_capacity(): the old size
     * or the new, read once. */
    uint64_t capacity = __atomic_load_n(&dev->capacity, __ATOMIC_RELAXED);

    return ((sector | nsectors) & mask) == 0 &&
           sector <= capacity && nsectors <= capacity - sector;
}

/* Read or write: @len bytes of data in req->data_iov, checked against
 * the disk.  Inlined into virtio_blk_process_req(): a call and two frames
 * per request otherwise. */
static inline __attribute__((always_inline)) uint8_t
virtio_blk_start_rw(VirtioBlkDev *dev, VirtioBlkReq *req, uint64_t sector,
                    size_t len, bool is_write)
{
    if (req->data_niov > VIRTIO_BLK_DATA_IOV_MAX ||
        len % VIRTIO_BLK_SECTOR_SIZE != 0 ||
        !virtio_blk_range_ok(dev, sector, len >> VIRTIO_BLK_SECTOR_BITS)) {
        return VIRTIO_BLK_S_IOERR;
    }
    if (len == 0) {
        return VIRTIO_BLK_S_OK;
    }
    req->bytes = len;
    req->offset = sector << VIRTIO_BLK_SECTOR_BITS;
    /* @len is the sum of req->data_iov (both callers computed it from
     * our own copy of the iovecs): the block layer need not sum them. */
    if (is_write) {
        blk_aio_pwritev_sized(dev->blk, &req->acb,
                              (int64_t)(sector << VIRTIO_BLK_SECTOR_BITS),
                              len, req->data_iov, req->data_niov,
                              atomic_load_explicit(&dev->write_cache,
                                                   memory_order_relaxed) ?
                              0 : BDRV_REQ_FUA, virtio_blk_io_cb, req);
    } else {
        blk_aio_preadv_sized(dev->blk, &req->acb,
                             (int64_t)(sector << VIRTIO_BLK_SECTOR_BITS),
                             len, req->data_iov, req->data_niov,
                             virtio_blk_io_cb, req);
    }
    return 0xff;                /* in flight */
}

/* DISCARD / WRITE_ZEROES: one segment in the payload after the header. */
static uint8_t virtio_blk_start_dwz(VirtioBlkDev *dev, VirtioBlkReq *req,
                                    struct iovec *out, unsigned int out_num)
{
    bool is_wz = req->type == VIRTIO_BLK_T_WRITE_ZEROES;
    struct virtio_blk_discard_write_zeroes seg;
    size_t payload = iov_size(out, out_num) - sizeof(struct virtio_blk_outhdr);
    uint64_t sector;
    uint32_t nsectors, flags;

    if (dev->conf.readonly) {
        return VIRTIO_BLK_S_IOERR;
    }
    if (is_wz ? !dev->conf.write_zeroes : !dev->conf.discard) {
        return VIRTIO_BLK_S_UNSUPP;     /* feature not offered */
    }
    if (payload == 0 || payload % sizeof(seg) != 0) {
        return VIRTIO_BLK_S_IOERR;
    }
    if (payload / sizeof(seg) > 1) {
        return VIRTIO_BLK_S_UNSUPP;     /* max_*_seg is 1 */
    }
    iov_to_buf(out, out_num, sizeof(struct virtio_blk_outhdr), &seg,
               sizeof(seg));
    sector = GUINT64_FROM_LE(seg.sector);
    nsectors = GUINT32_FROM_LE(seg.num_sectors);
    flags = GUINT32_FROM_LE(seg.flags);

    if (is_wz ? (flags & ~VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP) : flags) {
        return VIRTIO_BLK_S_UNSUPP;
    }
    if (nsectors > virtio_blk_max_sectors(dev) ||
        !virtio_blk_range_ok(dev, sector, nsectors)) {
        return VIRTIO_BLK_S_IOERR;
    }
    if (nsectors == 0) {
        return VIRTIO_BLK_S_OK;
    }
    req->bytes = (uint64_t)nsectors << VIRTIO_BLK_SECTOR_BITS;
    req->offset = sector << VIRTIO_BLK_SECTOR_BITS;
    if (is_wz) {
        /* UNMAP is a permission, honoured only where write_zeroes_may_unmap
         * said so (discard enabled and possible). */
        bool unmap = (flags & VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP) &&
                     dev->conf.discard && !dev->conf.discard_ignore;

        req->sync_after_write = !atomic_load_explicit(&dev->write_cache,
                                                      memory_order_relaxed);
        blk_aio_pwrite_zeroes(dev->blk, &req->acb,
                              (int64_t)(sector << VIRTIO_BLK_SECTOR_BITS),
                              (uint64_t)nsectors << VIRTIO_BLK_SECTOR_BITS,
                              unmap ? BDRV_REQ_MAY_UNMAP : 0,
                              virtio_blk_io_cb, req);
    } else if (dev->conf.discard_ignore) {
        /* discard=ignore: checked like any discard, then dropped. */
        return VIRTIO_BLK_S_OK;
    } else {
        blk_aio_pdiscard(dev->blk, &req->acb,
                         (int64_t)(sector << VIRTIO_BLK_SECTOR_BITS),
                         (uint64_t)nsectors << VIRTIO_BLK_SECTOR_BITS,
                         virtio_blk_io_cb, req);
    }
    return 0xff;
}

/* The index of the last non-empty writable iovec (it holds the status
 * byte), or -1; *@in_size gets the writable bytes in all.  One pass
 * (a 4 KiB read has two iovecs: data and status). */
static int virtio_blk_find_status(const struct iovec *in,
                                  unsigned int in_num, size_t *in_size)
{
    size_t n = 0;
    int si = -1;

    for (unsigned int i = 0; i < in_num; i++) {
        n += in[i].iov_len;
        if (in[i].iov_len > 0) {
            si = i;
        }
    }
    *in_size = n;
    return si;
}

/* Remember @iov's value so virtio_blk_req_complete() can restore it. */
static void virtio_blk_trim_save(VirtioBlkReq *req, struct iovec *iov)
{
    req->trimmed = iov;
    req->trimmed_orig = *iov;
}

/* IN payload: every writable byte before the status, in in[0..si]. */
static void virtio_blk_data_in(VirtioBlkReq *req, struct iovec *in, int si)
{
    req->data_iov = in;
    if (in[si].iov_len == 1) {
        req->data_niov = si;    /* status in an iovec of its own */
    } else {
        virtio_blk_trim_save(req, &in[si]);
        in[si].iov_len--;
        req->data_niov = si + 1;
    }
}

/* OUT payload: everything after the header (out holds at least
 * sizeof(struct virtio_blk_outhdr) bytes).  Returns its length. */
static size_t virtio_blk_data_out(VirtioBlkReq *req, struct iovec *out,
                                  unsigned int out_num)
{
    size_t skip = sizeof(struct virtio_blk_outhdr);
    unsigned int i = 0;

    while (i < out_num && skip >= out[i].iov_len) {
        skip -= out[i].iov_len;
        i++;
    }
    if (skip > 0) {
        /* the header ends inside out[i], which therefore has data */
        virtio_blk_trim_save(req, &out[i]);
        out[i].iov_base = (uint8_t *)out[i].iov_base + skip;
        out[i].iov_len -= skip;
    }
    req->data_iov = out + i;
    req->data_niov = out_num - i;
    return iov_size(req->data_iov, req->data_niov);
}

/* Called from: the queue's owner iothread.  Hot path: no allocation. */
void virtio_blk_process_req(VirtioBlkDev *dev, VirtioBlkReq *req,
                            struct iovec *out, unsigned int out_num,
                            struct iovec *in, unsigned int in_num,
                            VirtioBlkReqDone *done, void *opaque)
{
    struct virtio_blk_outhdr hdr;
    size_t in_size;
    uint8_t status;
    uint64_t sector;
    int si = virtio_blk_find_status(in, in_num, &in_size);

    req->dev = dev;
    req->done = done;
    req->opaque = opaque;
    req->type = UINT32_MAX;
    req->in_len = 0;
    req->bytes = 0;
    req->offset = 0;
    req->data_iov = NULL;
    req->data_niov = 0;
    req->sync_after_write = false;
    req->trimmed = NULL;

    if (si < 0) {
        req->status = NULL;
        virtio_blk_req_complete(req, VIRTIO_BLK_S_IOERR);
        return;
    }
    req->status = (uint8_t *)in[si].iov_base + in[si].iov_len - 1;
    /* The header is untrusted guest memory: copy it once, then use it. */
    if (likely(out_num > 0 && out[0].iov_len >= sizeof(hdr))) {
        memcpy(&hdr, out[0].iov_base, sizeof(hdr));
    } else if (iov_to_buf(out, out_num, 0, &hdr, sizeof(hdr)) !=
               sizeof(hdr)) {
        virtio_blk_req_complete(req, VIRTIO_BLK_S_IOERR);
        return;
    }
    req->type = GUINT32_FROM_LE(hdr.type);
    sector = GUINT64_FROM_LE(hdr.sector);

    switch (req->type) {
    case VIRTIO_BLK_T_IN:
        /* data: every writable byte but the status */
        virtio_blk_data_in(req, in, si);
        /* the whole buffer may have been written, even on error */
        req->in_len = in_size - 1;
        status = virtio_blk_start_rw(dev, req, sector, in_size - 1, false);
        break;
    case VIRTIO_BLK_T_OUT: {
        size_t len;

        if (dev->conf.readonly) {
            status = VIRTIO_BLK_S_IOERR;
            break;
        }
        len = virtio_blk_data_out(req, out, out_num);
        status = virtio_blk_start_rw(dev, req, sector, len, true);
        break;
    }
    case VIRTIO_BLK_T_FLUSH:
        if (dev->conf.readonly) {
            status = VIRTIO_BLK_S_OK;   /* nothing can be dirty */
            break;
        }
        blk_aio_flush(dev->blk, &req->acb, virtio_blk_io_cb, req);
        status = 0xff;
        break;
    case VIRTIO_BLK_T_GET_ID: {
        char id[VIRTIO_BLK_ID_BYTES] = { 0 };
        size_t len = MIN(in_size - 1, sizeof(id));

        /* zero padded; not NUL-terminated when 20 bytes long */
        memcpy(id, dev->conf.serial, strnlen(dev->conf.serial, sizeof(id)));
        req->in_len = iov_from_buf(in, in_num, 0, id, len);
        status = VIRTIO_BLK_S_OK;
        break;
    }
    case VIRTIO_BLK_T_DISCARD:
    case VIRTIO_BLK_T_WRITE_ZEROES:
        status = virtio_blk_start_dwz(dev, req, out, out_num);
        break;
    case VIRTIO_BLK_T_GET_LIFETIME:     /* not offered: no health data */
    case VIRTIO_BLK_T_SECURE_ERASE:     /* not offered */
    default:
        status = VIRTIO_BLK_S_UNSUPP;
        break;
    }

    if (status != 0xff) {
        virtio_blk_req_complete(req, status);
    }
}
