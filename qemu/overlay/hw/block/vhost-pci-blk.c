/* SPDX-License-Identifier: GPL-2.0-or-later */
/* vhost-pci-blk: virtio-blk device model that hands its virtqueues to vhost_blk. */
/*
 * QEMU only negotiates features, fills the config space and sets up the
 * rings; the requests are served either by vhost-blkd over vhost-user
 * (chardev=) or by the kernel's vhost_blk (drive= + /dev/vhost-blk).
 *
 * Every function here runs in the main loop thread with the BQL held.
 */

#include "qemu/osdep.h"
#include <sys/ioctl.h>
#include <linux/fs.h>
#include "qapi/error.h"
#include "qemu/error-report.h"
#include "qemu/cutils.h"
#include "qemu/host-utils.h"
#include "hw/qdev-core.h"
#include "hw/qdev-properties.h"
#include "hw/qdev-properties-system.h"
#include "hw/virtio/virtio-blk-common.h"
#include "hw/virtio/vhost.h"
#include "hw/virtio/vhost-pci-blk.h"
#include "hw/virtio/virtio.h"
#include "hw/virtio/virtio-bus.h"
#include "hw/virtio/virtio-access.h"
#include "block/block_int.h"
#include "sysemu/block-backend.h"
#include "monitor/monitor.h"
#include "migration/vmstate.h"
#include "sysemu/sysemu.h"

/* Attempts to reach the vhost-user backend while realizing. */
#define VHOST_PCI_BLK_CONNECT_TRIES 4

/* Feature bits the backend decides on (vhost_get_features masks them). */
static const int vhost_pci_blk_feature_bits[] = {
    VIRTIO_BLK_F_SIZE_MAX,
    VIRTIO_BLK_F_SEG_MAX,
    VIRTIO_BLK_F_GEOMETRY,
    VIRTIO_BLK_F_BLK_SIZE,
    VIRTIO_BLK_F_TOPOLOGY,
    VIRTIO_BLK_F_MQ,
    VIRTIO_BLK_F_RO,
    VIRTIO_BLK_F_FLUSH,
    VIRTIO_BLK_F_CONFIG_WCE,
    VIRTIO_BLK_F_DISCARD,
    VIRTIO_BLK_F_WRITE_ZEROES,
    VIRTIO_F_VERSION_1,
    VIRTIO_RING_F_INDIRECT_DESC,
    VIRTIO_RING_F_EVENT_IDX,
    VIRTIO_F_NOTIFY_ON_EMPTY,
    VIRTIO_F_RING_PACKED,
    VIRTIO_F_IOMMU_PLATFORM,
    VIRTIO_F_RING_RESET,
    VHOST_INVALID_FEATURE_BIT
};

static void vhost_pci_blk_chr_event(void *opaque, QEMUChrEvent event);

/* ------------------------------------------------------------ config space */

static void vhost_pci_blk_get_config(VirtIODevice *vdev, uint8_t *config)
{
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);

    /* The device's queue count wins over what the backend reported. */
    virtio_stw_p(vdev, &s->blkcfg.num_queues, s->num_queues);
    memcpy(config, &s->blkcfg, vdev->config_len);
}

static int vhost_pci_blk_kernel_set_write_cache(VHostPciBlk *s, int wce,
                                                Error **errp);

static void vhost_pci_blk_set_config(VirtIODevice *vdev, const uint8_t *config)
{
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);
    const struct virtio_blk_config *cfg = (const struct virtio_blk_config *)config;
    uint8_t wce = cfg->wce ? 1 : 0;
    Error *local_err = NULL;

    if (wce == s->blkcfg.wce) {
        return;
    }
    if (s->backend == VHOST_PCI_BLK_BACKEND_KERNEL) {
        /* Only a driver that negotiated CONFIG_WCE may toggle the cache. */
        if (!virtio_vdev_has_feature(vdev, VIRTIO_BLK_F_CONFIG_WCE)) {
            return;
        }
        /*
         * Running: the module switches now.  Stopped: the value is applied
         * by the next start.  On failure the guest reads back the old
         * value, so it never believes in a mode it does not have.
         */
        if (s->started &&
            vhost_pci_blk_kernel_set_write_cache(s, wce, &local_err) < 0) {
            error_report_err(local_err);
            return;
        }
    } else if (s->backend == VHOST_PCI_BLK_BACKEND_USER) {
        if (!s->connected ||
            vhost_dev_set_config(&s->dev, &wce,
                                 offsetof(struct virtio_blk_config, wce),
                                 sizeof(wce), VHOST_SET_CONFIG_TYPE_MASTER)) {
            error_report("vhost-pci-blk: the backend refused the write cache "
                         "setting (wce=%u)", wce);
            return;
        }
    }
    s->blkcfg.wce = wce;
}

/* vhost-user config change notification: only a resize is honoured. */
static int vhost_pci_blk_config_changed(struct vhost_dev *dev)
{
    VirtIODevice *vdev = dev->vdev;
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);
    struct virtio_blk_config cfg;
    Error *local_err = NULL;

    if (!dev->started) {
        return 0;
    }
    if (vhost_dev_get_config(dev, (uint8_t *)&cfg, vdev->config_len,
                             &local_err) < 0) {
        error_report_err(local_err);
        return -EIO;
    }
    if (cfg.capacity != s->blkcfg.capacity) {
        s->blkcfg.capacity = cfg.capacity;
        memcpy(vdev->config, &s->blkcfg, vdev->config_len);
        virtio_notify_config(vdev);
    }
    return 0;
}

static const VhostDevConfigOps vhost_pci_blk_config_ops = {
    .vhost_dev_config_notifier = vhost_pci_blk_config_changed,
};

/* --------------------------------------------------------- kernel backend */

/* Attach (fd >= 0) or detach (fd == -1) the image on every virtqueue. */
static int vhost_pci_blk_kernel_set_backend(VHostPciBlk *s, int fd,
                                            Error **errp)
{
    int vhostfd = (int)(uintptr_t)s->dev.opaque;
    int i;

    for (i = 0; i < s->dev.nvqs; i++) {
        struct vhost_vring_file file = { .index = i, .fd = fd };

        if (ioctl(vhostfd, VHOST_BLK_SET_BACKEND, &file) < 0) {
            int err = errno;

            error_setg_errno(errp, err, "vhost-pci-blk: "
                             "VHOST_BLK_SET_BACKEND (queue %d, fd %d) failed; "
                             "is the vhost_blk module the ABI version this "
                             "QEMU expects (docs/qemu-fork.md)?", i, fd);
            return -err;
        }
    }
    return 0;
}

/*
 * The write cache mode the driver asked for (VIRTIO 1.2, 5.2.6.2): with
 * CONFIG_WCE the config space's writeback byte, otherwise writeback
 * exactly when FLUSH was negotiated.
 */
static int vhost_pci_blk_guest_wce(VirtIODevice *vdev)
{
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);

    if (virtio_vdev_has_feature(vdev, VIRTIO_BLK_F_CONFIG_WCE)) {
        return s->blkcfg.wce ? 1 : 0;
    }
    return virtio_vdev_has_feature(vdev, VIRTIO_BLK_F_FLUSH) ? 1 : 0;
}

/* 1: writeback; 0: writethrough, every write durable before it completes. */
static int vhost_pci_blk_kernel_set_write_cache(VHostPciBlk *s, int wce,
                                                Error **errp)
{
    int vhostfd = (int)(uintptr_t)s->dev.opaque;

    if (ioctl(vhostfd, VHOST_BLK_SET_WRITE_CACHE, &wce) < 0) {
        int err = errno;

        error_setg_errno(errp, err, "vhost-pci-blk: VHOST_BLK_SET_WRITE_CACHE "
                         "(%s) failed, so the guest's write cache setting "
                         "cannot be honoured; is the vhost_blk module the ABI "
                         "version this QEMU expects (docs/qemu-fork.md)?",
                         wce ? "writeback" : "writethrough");
        return -err;
    }
    return 0;
}

/* ------------------------------------------------------------ start / stop */

static int vhost_pci_blk_start(VirtIODevice *vdev, Error **errp)
{
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);
    BusState *qbus = BUS(qdev_get_parent_bus(DEVICE(vdev)));
    VirtioBusClass *k = VIRTIO_BUS_GET_CLASS(qbus);
    int i, ret;

    if (!k->set_guest_notifiers) {
        error_setg(errp, "vhost-pci-blk: the transport has no guest notifiers");
        return -ENOSYS;
    }

    ret = vhost_dev_enable_notifiers(&s->dev, vdev);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "vhost-pci-blk: enabling host notifiers");
        return ret;
    }
    ret = k->set_guest_notifiers(qbus->parent, s->dev.nvqs, true);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "vhost-pci-blk: binding guest notifiers");
        goto err_host_notifiers;
    }

    s->dev.acked_features = vdev->guest_features;
    if (s->backend == VHOST_PCI_BLK_BACKEND_KERNEL) {
        /* Only bits the module offered: it refuses others (EOPNOTSUPP). */
        s->dev.acked_features &= s->dev.features;
    }

    if (s->backend == VHOST_PCI_BLK_BACKEND_USER) {
        /* The inflight region lets a restarted backend resume requests. */
        ret = vhost_dev_prepare_inflight(&s->dev, vdev);
        if (ret < 0) {
            error_setg_errno(errp, -ret, "vhost-pci-blk: inflight format");
            goto err_guest_notifiers;
        }
        if (!s->inflight->addr) {
            ret = vhost_dev_get_inflight(&s->dev, s->queue_size, s->inflight);
            if (ret < 0) {
                error_setg_errno(errp, -ret, "vhost-pci-blk: getting the "
                                 "inflight region");
                goto err_guest_notifiers;
            }
        }
        ret = vhost_dev_set_inflight(&s->dev, s->inflight);
        if (ret < 0) {
            error_setg_errno(errp, -ret, "vhost-pci-blk: setting the "
                             "inflight region");
            goto err_guest_notifiers;
        }
    }

    /* virtio-pci switches irqfds on and off itself: unmask every queue. */
    for (i = 0; i < s->dev.nvqs; i++) {
        vhost_virtqueue_mask(&s->dev, vdev, i, false);
    }

    s->dev.vq_index_end = s->dev.nvqs;
    ret = vhost_dev_start(&s->dev, vdev, true);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "vhost-pci-blk: starting vhost");
        goto err_guest_notifiers;
    }

    if (s->backend == VHOST_PCI_BLK_BACKEND_KERNEL) {
        /*
         * After SET_FEATURES (vhost_dev_start), before the first request
         * can reach the image: a guest that runs writethrough never has a
         * write completed from the cache.
         */
        ret = vhost_pci_blk_kernel_set_write_cache(
                  s, vhost_pci_blk_guest_wce(vdev), errp);
        if (ret == 0) {
            ret = vhost_pci_blk_kernel_set_backend(s, s->image_fd, errp);
        }
        if (ret < 0) {
            vhost_pci_blk_kernel_set_backend(s, -1, NULL);
            vhost_dev_stop(&s->dev, vdev, true);
            goto err_guest_notifiers;
        }
    }
    s->started = true;
    return 0;

err_guest_notifiers:
    for (i = 0; i < s->dev.nvqs; i++) {
        vhost_virtqueue_mask(&s->dev, vdev, i, true);
    }
    k->set_guest_notifiers(qbus->parent, s->dev.nvqs, false);
err_host_notifiers:
    vhost_dev_disable_notifiers(&s->dev, vdev);
    return ret;
}

static void vhost_pci_blk_stop(VirtIODevice *vdev)
{
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);
    BusState *qbus = BUS(qdev_get_parent_bus(DEVICE(vdev)));
    VirtioBusClass *k = VIRTIO_BUS_GET_CLASS(qbus);
    Error *local_err = NULL;
    int ret;

    if (!s->started) {
        return;
    }
    s->started = false;
    if (!k->set_guest_notifiers) {
        return;
    }

    if (s->backend == VHOST_PCI_BLK_BACKEND_KERNEL &&
        vhost_pci_blk_kernel_set_backend(s, -1, &local_err) < 0) {
        error_report_err(local_err);
    }
    vhost_dev_stop(&s->dev, vdev, true);

    ret = k->set_guest_notifiers(qbus->parent, s->dev.nvqs, false);
    if (ret < 0) {
        error_report("vhost-pci-blk: releasing guest notifiers: %s",
                     strerror(-ret));
        return;
    }
    vhost_dev_disable_notifiers(&s->dev, vdev);
}

static void vhost_pci_blk_fail_start(VHostPciBlk *s, Error *err)
{
    error_reportf_err(err, "vhost-pci-blk: vhost start failed: ");
    if (s->backend == VHOST_PCI_BLK_BACKEND_USER) {
        /* Drop the connection; reconnect=N on the chardev retries. */
        qemu_chr_fe_disconnect(&s->chardev);
    }
}

static void vhost_pci_blk_set_status(VirtIODevice *vdev, uint8_t status)
{
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);
    bool should_start = virtio_device_should_start(vdev, status);
    Error *local_err = NULL;

    if (!s->connected || s->started == should_start) {
        return;
    }
    if (should_start) {
        if (vhost_pci_blk_start(vdev, &local_err) < 0) {
            vhost_pci_blk_fail_start(s, local_err);
        }
    } else {
        vhost_pci_blk_stop(vdev);
    }
}

static uint64_t vhost_pci_blk_get_features(VirtIODevice *vdev,
                                           uint64_t features, Error **errp)
{
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);

    virtio_add_feature(&features, VIRTIO_BLK_F_SEG_MAX);
    virtio_add_feature(&features, VIRTIO_BLK_F_BLK_SIZE);
    virtio_add_feature(&features, VIRTIO_BLK_F_FLUSH);
    if (s->backend == VHOST_PCI_BLK_BACKEND_USER) {
        /* The backend's GET_CONFIG fills these; it may turn them off. */
        virtio_add_feature(&features, VIRTIO_BLK_F_SIZE_MAX);
        virtio_add_feature(&features, VIRTIO_BLK_F_GEOMETRY);
        virtio_add_feature(&features, VIRTIO_BLK_F_TOPOLOGY);
        virtio_add_feature(&features, VIRTIO_BLK_F_RO);
    } else {
        /*
         * The module serves DISCARD and WRITE_ZEROES (if it lists them);
         * discard only where the backing can.  A read-only drive gets
         * neither: the module fails both on a read-only fd.
         */
        if (!s->kernel_discard || !blk_is_writable(s->blk)) {
            virtio_clear_feature(&features, VIRTIO_BLK_F_DISCARD);
        }
        if (!blk_is_writable(s->blk)) {
            virtio_clear_feature(&features, VIRTIO_BLK_F_WRITE_ZEROES);
            virtio_add_feature(&features, VIRTIO_BLK_F_RO);
        }
    }
    if (s->num_queues > 1) {
        virtio_add_feature(&features, VIRTIO_BLK_F_MQ);
    }
    features = vhost_get_features(&s->dev, vhost_pci_blk_feature_bits, features);
    /*
     * Read-only is QEMU's decision on this path (the image fd is opened
     * O_RDONLY and the kernel fails writes on it): tell the guest even when
     * the module does not list the bit.  The module hears of it only if
     * it lists it (vhost_pci_blk_start acks only what the module offered).
     */
    if (s->backend == VHOST_PCI_BLK_BACKEND_KERNEL && !blk_is_writable(s->blk)) {
        virtio_add_feature(&features, VIRTIO_BLK_F_RO);
    }
    return features;
}

/* A guest that kicks before DRIVER_OK: start vhost now. */
static void vhost_pci_blk_handle_output(VirtIODevice *vdev, VirtQueue *vq)
{
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);
    Error *local_err = NULL;
    int i;

    if (!vdev->start_on_kick || !s->connected || s->started) {
        return;
    }
    if (vhost_pci_blk_start(vdev, &local_err) < 0) {
        vhost_pci_blk_fail_start(s, local_err);
        return;
    }
    /* Pass on the kick(s) that got us here. */
    for (i = 0; i < s->dev.nvqs; i++) {
        if (virtio_queue_get_desc_addr(vdev, i)) {
            event_notifier_set(virtio_queue_get_host_notifier(
                                   virtio_get_queue(vdev, i)));
        }
    }
}

static void vhost_pci_blk_reset(VirtIODevice *vdev)
{
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);

    if (s->inflight) {
        vhost_dev_free_inflight(s->inflight);
    }
}

/* ------------------------------------------------------ vhost-user backend */

static int vhost_pci_blk_user_connect(DeviceState *dev, Error **errp)
{
    VirtIODevice *vdev = VIRTIO_DEVICE(dev);
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);
    int ret;

    if (s->connected) {
        return 0;
    }
    s->connected = true;

    s->dev.num_queues = s->num_queues;
    s->dev.nvqs = s->num_queues;
    s->dev.vqs = s->vhost_vqs;
    s->dev.vq_index = 0;
    s->dev.backend_features = 0;
    vhost_dev_set_config_notifier(&s->dev, &vhost_pci_blk_config_ops);

    s->vhost_user.supports_config = true;
    ret = vhost_dev_init(&s->dev, &s->vhost_user, VHOST_BACKEND_TYPE_USER, 0,
                         errp);
    if (ret < 0) {
        return ret;
    }

    /* After a reconnect: the guest is running, restore the rings. */
    if (virtio_device_started(vdev, vdev->status)) {
        return vhost_pci_blk_start(vdev, errp);
    }
    return 0;
}

static void vhost_pci_blk_user_disconnect(DeviceState *dev)
{
    VirtIODevice *vdev = VIRTIO_DEVICE(dev);
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);

    if (s->connected) {
        s->connected = false;
        vhost_pci_blk_stop(vdev);
        vhost_dev_cleanup(&s->dev);
    }

    /*
     * Wait for the next connection (chardev reconnect=N), also when there
     * was nothing to tear down: the backend may die while the device is
     * stopped or before it was first started (qemu/patches/0002-*).
     */
    qemu_chr_fe_set_handlers(&s->chardev, NULL, NULL, vhost_pci_blk_chr_event,
                             NULL, dev, NULL, true);
}

static void vhost_pci_blk_chr_event(void *opaque, QEMUChrEvent event)
{
    DeviceState *dev = opaque;
    VHostPciBlk *s = VHOST_PCI_BLK(dev);
    Error *local_err = NULL;

    switch (event) {
    case CHR_EVENT_OPENED:
        if (vhost_pci_blk_user_connect(dev, &local_err) < 0) {
            error_reportf_err(local_err, "vhost-pci-blk: reconnecting: ");
            qemu_chr_fe_disconnect(&s->chardev);
        }
        break;
    case CHR_EVENT_CLOSED:
        /* Tear down from a bottom half, not from inside the chardev. */
        vhost_user_async_close(dev, &s->chardev, &s->dev,
                               vhost_pci_blk_user_disconnect);
        break;
    case CHR_EVENT_BREAK:
    case CHR_EVENT_MUX_IN:
    case CHR_EVENT_MUX_OUT:
        break;
    }
}

static int vhost_pci_blk_user_realize(VHostPciBlk *s, Error **errp)
{
    ERRP_GUARD();
    DeviceState *dev = DEVICE(s);
    int tries, ret = -EIO;

    if (!vhost_user_init(&s->vhost_user, &s->chardev, errp)) {
        return -EIO;
    }
    s->inflight = g_new0(struct vhost_inflight, 1);

    for (tries = 0; tries < VHOST_PCI_BLK_CONNECT_TRIES; tries++) {
        if (tries) {
            error_reportf_err(*errp, "vhost-pci-blk: retrying after: ");
            *errp = NULL;
        }
        s->connected = false;
        ret = qemu_chr_fe_wait_connected(&s->chardev, errp);
        if (ret < 0) {
            continue;
        }
        ret = vhost_pci_blk_user_connect(dev, errp);
        if (ret < 0) {
            qemu_chr_fe_disconnect(&s->chardev);
            continue;
        }
        /* Capacity, block sizes, limits: all from the backend. */
        ret = vhost_dev_get_config(&s->dev, (uint8_t *)&s->blkcfg,
                                   s->parent_obj.config_len, errp);
        if (ret < 0) {
            error_prepend(errp, "vhost-pci-blk: the backend did not send "
                          "its virtio-blk config (GET_CONFIG): ");
            qemu_chr_fe_disconnect(&s->chardev);
            vhost_dev_cleanup(&s->dev);
            s->connected = false;
            continue;
        }
        break;
    }
    if (ret < 0) {
        return ret;
    }

    qemu_chr_fe_set_handlers(&s->chardev, NULL, NULL, vhost_pci_blk_chr_event,
                             NULL, dev, NULL, true);
    return 0;
}

/* ---------------------------------------------------------- kernel backend */

static int vhost_pci_blk_open_vhost(VHostPciBlk *s, Error **errp)
{
    const char *path = s->vhostdev ? s->vhostdev : VHOST_PCI_BLK_DEFAULT_VHOSTDEV;
    int fd;

    if (s->vhostfd) {
        fd = monitor_fd_param(monitor_cur(), s->vhostfd, errp);
        if (fd < 0) {
            error_prepend(errp, "vhost-pci-blk: vhostfd=%s: ", s->vhostfd);
        }
        return fd;
    }
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        return fd;
    }
    if (errno == ENOENT) {
        error_setg(errp, "vhost-pci-blk: %s does not exist: the kernel "
                   "vhost_blk driver is not loaded or not available on this "
                   "host (modprobe vhost_blk); use chardev= with vhost-blkd "
                   "for the userspace vhost_blk instead", path);
    } else {
        error_setg_errno(errp, errno, "vhost-pci-blk: cannot open %s", path);
    }
    return -1;
}

/*
 * Block size the guest gets (docs/qemu-fork.md, "Block size"): a block
 * device's logical block size (BLKSSZGET); for a file opened O_DIRECT the
 * file system's direct-I/O alignment (statx STATX_DIOALIGN, else what
 * QEMU's file driver probed); 512 for a buffered file.  logical_block_size=
 * overrides it, but never below what O_DIRECT needs: the kernel would fail
 * every smaller request with EINVAL.
 */
static int vhost_pci_blk_block_size(VHostPciBlk *s, int fd, bool direct,
                                    BlockDriverState *file_bs, Error **errp)
{
    const char *name = file_bs->filename;
    uint32_t need = 0, bs = 512;
    const char *what = "";
    struct statx stx;
    struct stat st;

    if (fstat(fd, &st) < 0) {
        error_setg_errno(errp, errno, "vhost-pci-blk: fstat %s", name);
        return -1;
    }
    if (S_ISBLK(st.st_mode)) {
        int ssize = 0;

        if (ioctl(fd, BLKSSZGET, &ssize) < 0) {
            error_setg_errno(errp, errno, "vhost-pci-blk: BLKSSZGET on %s",
                             name);
            return -1;
        }
        if (ssize < 512 || ssize > 65536 || !is_power_of_2(ssize)) {
            error_setg(errp, "vhost-pci-blk: %s reports a logical block size "
                       "of %d bytes, which virtio-blk cannot express", name,
                       ssize);
            return -1;
        }
        bs = ssize;
        if (direct) {
            need = ssize;
            what = "logical block size";
        }
    } else if (direct) {
        if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
            (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
            need = stx.stx_dio_offset_align;
        } else {
            need = file_bs->bl.request_alignment;
        }
        need = MAX(need, 512);
        if (need > 65536 || !is_power_of_2(need)) {
            error_setg(errp, "vhost-pci-blk: the direct-I/O alignment of %s "
                       "is %u bytes, which virtio-blk cannot express; use "
                       "cache=writeback (buffered) for this file", name, need);
            return -1;
        }
        bs = need;
        what = "direct-I/O alignment";
    }
    if (s->logical_block_size) {
        if (s->logical_block_size < need) {
            error_setg(errp, "vhost-pci-blk: logical_block_size=%u is smaller "
                       "than the %u-byte %s of %s (opened with O_DIRECT, "
                       "cache=none): the kernel would fail the guest's "
                       "smaller requests; give logical_block_size=%u or "
                       "larger, or leave it out", s->logical_block_size,
                       need, what, name, need);
            return -1;
        }
        bs = s->logical_block_size;
    }
    return bs;
}

/*
 * Can the backing discard?  A regular file: the module punches holes
 * (a file system without them fails the request with UNSUPP).  A block
 * device: when its queue takes discards (discard_max_bytes, which a
 * partition inherits from its disk).
 */
static bool vhost_pci_blk_can_discard(int fd)
{
    struct stat st;
    int i;

    if (fstat(fd, &st) < 0) {
        return false;
    }
    if (S_ISREG(st.st_mode)) {
        return true;
    }
    if (!S_ISBLK(st.st_mode)) {
        return false;
    }
    for (i = 0; i < 2; i++) {
        g_autofree char *path = g_strdup_printf(
            "/sys/dev/block/%u:%u/%squeue/discard_max_bytes",
            major(st.st_rdev), minor(st.st_rdev), i ? "../" : "");
        g_autofree char *text = NULL;
        uint64_t max;

        if (g_file_get_contents(path, &text, NULL, NULL)) {
            return !qemu_strtou64(g_strstrip(text), NULL, 10, &max) && max > 0;
        }
    }
    return false;
}

/* Open the image behind drive= for the kernel and fill the config space. */
static int vhost_pci_blk_open_image(VHostPciBlk *s, Error **errp)
{
    BlockDriverState *bs = blk_bs(s->blk);
    BlockDriverState *file_bs = NULL;
    const char *proto, *drive = blk_name(s->blk);
    int64_t len, file_len;
    int flags, fd, bsize;
    uint32_t max_sectors;
    bool ro;

    if (bs && bs->drv && !strcmp(bs->drv->format_name, "raw") && bs->file) {
        file_bs = bs->file->bs;
    } else if (bs && bs->drv && bs->drv->protocol_name) {
        file_bs = bs;
    }
    if (!*drive && bs) {
        drive = bdrv_get_node_name(bs);         /* -blockdev node */
    }
    proto = file_bs && file_bs->drv ? file_bs->drv->format_name : "";
    if (!file_bs || (strcmp(proto, "file") && strcmp(proto, "host_device"))) {
        g_autofree char *what = NULL;

        if (!bs || !bs->drv) {
            what = g_strdup("has no medium");
        } else if (!file_bs) {
            what = g_strdup_printf("has format %s", bs->drv->format_name);
        } else {
            what = g_strdup_printf("is raw over the %s protocol", proto);
        }
        error_setg(errp, "vhost-pci-blk: drive=%s %s; the kernel vhost_blk "
                   "reads the image itself, so it must be format=raw on a "
                   "local file or block device (convert it with qemu-img "
                   "convert -O raw, or serve it with vhost-blkd and "
                   "chardev=)", drive, what);
        return -1;
    }

    len = blk_getlength(s->blk);
    if (len < 0) {
        error_setg_errno(errp, -len, "vhost-pci-blk: size of %s",
                         file_bs->filename);
        return -1;
    }
    /*
     * The raw driver's offset=/size= expose a window of the file.  The
     * kernel serves the whole fd from byte 0, so it would read and write
     * outside that window: refuse.  A window always differs in length from
     * the file unless it is the whole file.
     */
    file_len = bdrv_getlength(file_bs);
    if (file_bs != bs && file_len >= 0 && file_len != len) {
        error_setg(errp, "vhost-pci-blk: drive=%s uses the raw driver's "
                   "offset=/size= to expose %" PRId64 " of the %" PRId64
                   " bytes of %s; the kernel vhost_blk serves a whole file or "
                   "block device from byte 0 and would read and write outside "
                   "that region: drop offset=/size=, or give the region its "
                   "own file or partition", drive, len, file_len,
                   file_bs->filename);
        return -1;
    }
    if (file_len < 0) {
        error_setg_errno(errp, -file_len, "vhost-pci-blk: size of %s",
                         file_bs->filename);
        return -1;
    }

    /*
     * Take the permissions a disk needs, as virtio-blk does: without WRITE
     * blk_is_writable() is false and the kernel would get a read-only fd.
     * The kernel writes the image behind the block layer's back, so nobody
     * else may write it meanwhile (as with share-rw=off).
     */
    ro = !blk_supports_write_perm(s->blk);
    if (blk_set_perm(s->blk, BLK_PERM_CONSISTENT_READ | (ro ? 0 : BLK_PERM_WRITE),
                     BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE_UNCHANGED,
                     errp) < 0) {
        error_prepend(errp, "vhost-pci-blk: drive=%s: ", drive);
        return -1;
    }
    flags = blk_is_writable(s->blk) ? O_RDWR : O_RDONLY;
    if (blk_get_flags(s->blk) & BDRV_O_NOCACHE) {
        flags |= O_DIRECT;
    }
    fd = qemu_open(file_bs->filename, flags | O_CLOEXEC, errp);
    if (fd < 0) {
        error_prepend(errp, "vhost-pci-blk: ");
        return -1;
    }
    bsize = vhost_pci_blk_block_size(s, fd, flags & O_DIRECT, file_bs, errp);
    if (bsize < 0) {
        close(fd);
        return -1;
    }

    memset(&s->blkcfg, 0, sizeof(s->blkcfg));
    virtio_stq_p(VIRTIO_DEVICE(s), &s->blkcfg.capacity, len / 512);
    virtio_stl_p(VIRTIO_DEVICE(s), &s->blkcfg.blk_size, bsize);
    virtio_stl_p(VIRTIO_DEVICE(s), &s->blkcfg.seg_max,
                 s->queue_size > 2 ? s->queue_size - 2 : 1);
    s->blkcfg.wce = 1;

    /*
     * DISCARD / WRITE_ZEROES limits (used only if the features are
     * negotiated): whole blocks, and no more than the module accepts
     * (VHOST_BLK_MAX_* of its header): it fails larger requests, and
     * bounds the work of one request that way.
     */
    s->kernel_discard = vhost_pci_blk_can_discard(fd);
    max_sectors = VHOST_BLK_MAX_DISCARD_SECTORS & ~(bsize / 512 - 1);
    virtio_stl_p(VIRTIO_DEVICE(s), &s->blkcfg.max_discard_sectors, max_sectors);
    virtio_stl_p(VIRTIO_DEVICE(s), &s->blkcfg.max_discard_seg,
                 VHOST_BLK_MAX_DISCARD_SEG);
    virtio_stl_p(VIRTIO_DEVICE(s), &s->blkcfg.discard_sector_alignment,
                 bsize / 512);
    max_sectors = VHOST_BLK_MAX_WRITE_ZEROES_SECTORS & ~(bsize / 512 - 1);
    virtio_stl_p(VIRTIO_DEVICE(s), &s->blkcfg.max_write_zeroes_sectors,
                 max_sectors);
    virtio_stl_p(VIRTIO_DEVICE(s), &s->blkcfg.max_write_zeroes_seg,
                 VHOST_BLK_MAX_WRITE_ZEROES_SEG);
    s->blkcfg.write_zeroes_may_unmap = 1;
    return fd;
}

static int vhost_pci_blk_kernel_realize(VHostPciBlk *s, Error **errp)
{
    int vhostfd, ret;

    if (!s->blk) {
        error_setg(errp, "vhost-pci-blk: the kernel backend (vhostfd=/"
                   "vhostdev=) needs drive=ID naming the image");
        return -EINVAL;
    }
    /* The drive first: its errors do not depend on the module. */
    s->image_fd = vhost_pci_blk_open_image(s, errp);
    if (s->image_fd < 0) {
        return -EINVAL;
    }
    vhostfd = vhost_pci_blk_open_vhost(s, errp);
    if (vhostfd < 0) {
        return -ENODEV;
    }

    s->dev.num_queues = s->num_queues;
    s->dev.nvqs = s->num_queues;
    s->dev.vqs = s->vhost_vqs;
    s->dev.vq_index = 0;
    s->dev.backend_features = 0;
    /* vhost_dev_init owns vhostfd from here on, even when it fails. */
    ret = vhost_dev_init(&s->dev, (void *)(uintptr_t)vhostfd,
                         VHOST_BACKEND_TYPE_KERNEL, 0, errp);
    if (ret < 0) {
        error_prepend(errp, "vhost-pci-blk: vhost_blk set-up failed: ");
        return ret;
    }
    s->connected = true;

    if (s->serial) {
        /* Like virtio-blk: up to 20 bytes, not NUL-terminated when full. */
        struct vhost_blk_serial serial = { };

        memcpy(serial.serial, s->serial,
               MIN(strlen(s->serial), sizeof(serial.serial)));
        if (strlen(s->serial) > sizeof(serial.serial)) {
            warn_report("vhost-pci-blk: serial=%s is longer than the %zu "
                        "bytes virtio-blk carries; the guest sees the first "
                        "%zu", s->serial, sizeof(serial.serial),
                        sizeof(serial.serial));
        }
        if (ioctl(vhostfd, VHOST_BLK_SET_SERIAL, &serial) < 0) {
            warn_report("vhost-pci-blk: the vhost_blk module did not take "
                        "serial=%s (VHOST_BLK_SET_SERIAL: %s); the guest "
                        "sees an empty serial", s->serial, strerror(errno));
        }
    }
    return 0;
}

/* ---------------------------------------------------------- realize etc. */

static void vhost_pci_blk_free(VHostPciBlk *s)
{
    VirtIODevice *vdev = VIRTIO_DEVICE(s);
    int i;

    if (s->inflight) {
        vhost_dev_free_inflight(s->inflight);
        g_free(s->inflight);
        s->inflight = NULL;
    }
    g_free(s->vhost_vqs);
    s->vhost_vqs = NULL;
    for (i = 0; s->virtqs && i < s->num_queues; i++) {
        virtio_delete_queue(s->virtqs[i]);
    }
    g_free(s->virtqs);
    s->virtqs = NULL;
    virtio_cleanup(vdev);
    if (s->backend == VHOST_PCI_BLK_BACKEND_USER) {
        vhost_user_cleanup(&s->vhost_user);
    }
    if (s->image_fd >= 0) {
        close(s->image_fd);
        s->image_fd = -1;
    }
}

static void vhost_pci_blk_realize(DeviceState *dev, Error **errp)
{
    ERRP_GUARD();
    VirtIODevice *vdev = VIRTIO_DEVICE(dev);
    VHostPciBlk *s = VHOST_PCI_BLK(dev);
    bool user = qemu_chr_fe_backend_connected(&s->chardev);
    bool kernel = s->blk || s->vhostfd || s->vhostdev;
    int i, ret;

    if (user && kernel) {
        error_setg(errp, "vhost-pci-blk: give either chardev= (vhost-user "
                   "backend such as vhost-blkd) or drive= with vhostfd=/"
                   "vhostdev= (kernel vhost_blk), not both");
        return;
    }
    if (!user && !kernel) {
        error_setg(errp, "vhost-pci-blk: no backend: give chardev=ID for a "
                   "vhost-user backend (vhost-blkd), or drive=ID for the "
                   "kernel vhost_blk (%s)", VHOST_PCI_BLK_DEFAULT_VHOSTDEV);
        return;
    }
    if (s->vhostfd && s->vhostdev) {
        error_setg(errp, "vhost-pci-blk: vhostfd= and vhostdev= are "
                   "alternatives, give one");
        return;
    }
    s->backend = user ? VHOST_PCI_BLK_BACKEND_USER : VHOST_PCI_BLK_BACKEND_KERNEL;

    if (s->num_queues == VHOST_PCI_BLK_AUTO_NUM_QUEUES) {
        s->num_queues = 1;
    }
    if (!s->num_queues || s->num_queues > VIRTIO_QUEUE_MAX) {
        error_setg(errp, "vhost-pci-blk: num-queues must be 1..%d",
                   VIRTIO_QUEUE_MAX);
        return;
    }
    if (s->queue_size < 2 || s->queue_size > VIRTQUEUE_MAX_SIZE ||
        !is_power_of_2(s->queue_size)) {
        error_setg(errp, "vhost-pci-blk: queue-size must be a power of 2 "
                   "in 2..%d", VIRTQUEUE_MAX_SIZE);
        return;
    }
    if (s->logical_block_size && user) {
        error_setg(errp, "vhost-pci-blk: logical_block_size= applies to the "
                   "kernel backend (drive=); with chardev= the block size "
                   "comes from the vhost-user backend (vhost-blkd "
                   "--export ...,logical-block-size=N or its default)");
        return;
    }
    /*
     * vhost-user carries no serial: the backend answers GET_ID.  The kernel
     * backend gets it with VHOST_BLK_SET_SERIAL (vhost_pci_blk_kernel_realize).
     */
    if (s->serial && user) {
        warn_report("vhost-pci-blk: serial= is answered by the backend, not "
                    "by QEMU: set it on vhost-blkd (--export ...,serial=%s); "
                    "ignored here", s->serial);
    }

    virtio_init(vdev, VIRTIO_ID_BLOCK,
                virtio_get_config_size(&virtio_blk_cfg_size_params,
                                       vdev->host_features));
    s->virtqs = g_new(VirtQueue *, s->num_queues);
    for (i = 0; i < s->num_queues; i++) {
        s->virtqs[i] = virtio_add_queue(vdev, s->queue_size,
                                        vhost_pci_blk_handle_output);
    }
    s->vhost_vqs = g_new0(struct vhost_virtqueue, s->num_queues);

    if (user) {
        ret = vhost_pci_blk_user_realize(s, errp);
    } else {
        ret = vhost_pci_blk_kernel_realize(s, errp);
    }
    if (ret < 0) {
        goto fail;
    }

    /*
     * Both backends migrate as vhost-user-blk does: the virtio state goes
     * in vmstate_vhost_pci_blk, vhost_dev_stop() takes the ring positions
     * back from the backend (the kernel's VHOST_BLK_SET_BACKEND -1 and
     * vhost-blkd's GET_VRING_BASE both wait for the requests in flight),
     * and QEMU's vhost core logs the backend's guest memory writes
     * (SET_LOG_BASE, VHOST_F_LOG_ALL, VHOST_VRING_F_LOG on the running
     * rings).  A backend without VHOST_F_LOG_ALL (vhost_blk.ko before
     * dirty logging) gets vhost_dev_init()'s own blocker.  See
     * docs/qemu-fork.md, "Live migration".
     */
    return;

fail:
    vhost_pci_blk_free(s);
}

static void vhost_pci_blk_unrealize(DeviceState *dev)
{
    VirtIODevice *vdev = VIRTIO_DEVICE(dev);
    VHostPciBlk *s = VHOST_PCI_BLK(dev);

    virtio_set_status(vdev, 0);
    if (s->backend == VHOST_PCI_BLK_BACKEND_USER) {
        qemu_chr_fe_set_handlers(&s->chardev, NULL, NULL, NULL, NULL, NULL,
                                 NULL, false);
    }
    if (s->connected || s->backend == VHOST_PCI_BLK_BACKEND_USER) {
        vhost_dev_cleanup(&s->dev);
        s->connected = false;
    }
    vhost_pci_blk_free(s);
}

static void vhost_pci_blk_instance_init(Object *obj)
{
    VHostPciBlk *s = VHOST_PCI_BLK(obj);

    s->image_fd = -1;
    device_add_bootindex_property(obj, &s->bootindex, "bootindex",
                                  "/disk@0,0", DEVICE(obj));
}

static struct vhost_dev *vhost_pci_blk_get_vhost(VirtIODevice *vdev)
{
    return &VHOST_PCI_BLK(vdev)->dev;
}

/*
 * The guest's write cache choice (CONFIG_WCE) lives in the config space,
 * which virtio_load() does not hand back to the device: migrate it, so that
 * a guest that chose writethrough keeps getting durable writes on the
 * destination.  The kernel backend applies it when the device starts
 * (vhost_pci_blk_guest_wce); a vhost-user backend is told here.
 */
static bool vhost_pci_blk_wce_needed(void *opaque)
{
    return virtio_vdev_has_feature(VIRTIO_DEVICE(opaque),
                                   VIRTIO_BLK_F_CONFIG_WCE);
}

static int vhost_pci_blk_wce_post_load(void *opaque, int version_id)
{
    VHostPciBlk *s = opaque;
    uint8_t wce = s->blkcfg.wce ? 1 : 0;

    s->blkcfg.wce = wce;
    if (s->backend == VHOST_PCI_BLK_BACKEND_USER && s->connected &&
        vhost_dev_set_config(&s->dev, &wce,
                             offsetof(struct virtio_blk_config, wce),
                             sizeof(wce), VHOST_SET_CONFIG_TYPE_MIGRATION)) {
        warn_report("vhost-pci-blk: the vhost-user backend refused the "
                    "migrated write cache setting (wce=%u)", wce);
    }
    return 0;
}

static const VMStateDescription vmstate_vhost_pci_blk_wce = {
    .name = "vhost-pci-blk/wce",
    .version_id = 1,
    .minimum_version_id = 1,
    .needed = vhost_pci_blk_wce_needed,
    .post_load = vhost_pci_blk_wce_post_load,
    .fields = (VMStateField[]) {
        VMSTATE_UINT8(blkcfg.wce, VHostPciBlk),
        VMSTATE_END_OF_LIST()
    },
};

static const VMStateDescription vmstate_vhost_pci_blk = {
    .name = "vhost-pci-blk",
    .minimum_version_id = 1,
    .version_id = 1,
    .fields = (VMStateField[]) {
        VMSTATE_VIRTIO_DEVICE,
        VMSTATE_END_OF_LIST()
    },
    .subsections = (const VMStateDescription * []) {
        &vmstate_vhost_pci_blk_wce,
        NULL
    },
};

static Property vhost_pci_blk_properties[] = {
    DEFINE_PROP_CHR("chardev", VHostPciBlk, chardev),
    DEFINE_PROP_DRIVE("drive", VHostPciBlk, blk),
    DEFINE_PROP_STRING("vhostfd", VHostPciBlk, vhostfd),
    DEFINE_PROP_STRING("vhostdev", VHostPciBlk, vhostdev),
    DEFINE_PROP_STRING("serial", VHostPciBlk, serial),
    DEFINE_PROP_BLOCKSIZE("logical_block_size", VHostPciBlk,
                          logical_block_size),
    DEFINE_PROP_UINT16("num-queues", VHostPciBlk, num_queues,
                       VHOST_PCI_BLK_AUTO_NUM_QUEUES),
    DEFINE_PROP_UINT32("queue-size", VHostPciBlk, queue_size, 128),
    DEFINE_PROP_BIT64("config-wce", VHostPciBlk, parent_obj.host_features,
                      VIRTIO_BLK_F_CONFIG_WCE, true),
    DEFINE_PROP_BIT64("discard", VHostPciBlk, parent_obj.host_features,
                      VIRTIO_BLK_F_DISCARD, true),
    DEFINE_PROP_BIT64("write-zeroes", VHostPciBlk, parent_obj.host_features,
                      VIRTIO_BLK_F_WRITE_ZEROES, true),
    DEFINE_PROP_END_OF_LIST(),
};

static void vhost_pci_blk_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);
    VirtioDeviceClass *vdc = VIRTIO_DEVICE_CLASS(klass);

    device_class_set_props(dc, vhost_pci_blk_properties);
    dc->vmsd = &vmstate_vhost_pci_blk;
    dc->desc = "virtio-blk served by vhost_blk (vhost-blkd or /dev/vhost-blk)";
    set_bit(DEVICE_CATEGORY_STORAGE, dc->categories);
    vdc->realize = vhost_pci_blk_realize;
    vdc->unrealize = vhost_pci_blk_unrealize;
    vdc->get_config = vhost_pci_blk_get_config;
    vdc->set_config = vhost_pci_blk_set_config;
    vdc->get_features = vhost_pci_blk_get_features;
    vdc->set_status = vhost_pci_blk_set_status;
    vdc->reset = vhost_pci_blk_reset;
    vdc->get_vhost = vhost_pci_blk_get_vhost;
}

static const TypeInfo vhost_pci_blk_info = {
    .name = TYPE_VHOST_PCI_BLK,
    .parent = TYPE_VIRTIO_DEVICE,
    .instance_size = sizeof(VHostPciBlk),
    .instance_init = vhost_pci_blk_instance_init,
    .class_init = vhost_pci_blk_class_init,
};

static void vhost_pci_blk_register_types(void)
{
    type_register_static(&vhost_pci_blk_info);
}

type_init(vhost_pci_blk_register_types)
