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
#include "migration/blocker.h"
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

static void vhost_pci_blk_set_config(VirtIODevice *vdev, const uint8_t *config)
{
    VHostPciBlk *s = VHOST_PCI_BLK(vdev);
    const struct virtio_blk_config *cfg = (const struct virtio_blk_config *)config;
    uint8_t wce = cfg->wce ? 1 : 0;

    if (wce == s->blkcfg.wce) {
        return;
    }
    if (s->backend == VHOST_PCI_BLK_BACKEND_USER) {
        if (!s->connected ||
            vhost_dev_set_config(&s->dev, &wce,
                                 offsetof(struct virtio_blk_config, wce),
                                 sizeof(wce), VHOST_SET_CONFIG_TYPE_MASTER)) {
            error_report("vhost-pci-blk: the backend refused the write cache "
                         "setting (wce=%u)", wce);
            return;
        }
    }
    /* Kernel backend: the guest's flushes reach the image either way. */
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
        ret = vhost_pci_blk_kernel_set_backend(s, s->image_fd, errp);
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
        /* The kernel ABI has no discard / write-zeroes (yet). */
        virtio_clear_feature(&features, VIRTIO_BLK_F_DISCARD);
        virtio_clear_feature(&features, VIRTIO_BLK_F_WRITE_ZEROES);
        if (!blk_is_writable(s->blk)) {
            virtio_add_feature(&features, VIRTIO_BLK_F_RO);
        }
    }
    if (s->num_queues > 1) {
        virtio_add_feature(&features, VIRTIO_BLK_F_MQ);
    }
    return vhost_get_features(&s->dev, vhost_pci_blk_feature_bits, features);
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

    if (!s->connected) {
        return;
    }
    s->connected = false;
    vhost_pci_blk_stop(vdev);
    vhost_dev_cleanup(&s->dev);

    /* Wait for the next connection (chardev reconnect=N). */
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

/* Open the image behind drive= for the kernel and fill the config space. */
static int vhost_pci_blk_open_image(VHostPciBlk *s, Error **errp)
{
    BlockDriverState *bs = blk_bs(s->blk);
    BlockDriverState *file_bs = NULL;
    const char *proto;
    int64_t len;
    int flags, fd, ssize = 512;
    struct stat st;

    if (bs && bs->drv && !strcmp(bs->drv->format_name, "raw") && bs->file) {
        file_bs = bs->file->bs;
    } else if (bs && bs->drv && bs->drv->protocol_name) {
        file_bs = bs;
    }
    proto = file_bs && file_bs->drv ? file_bs->drv->format_name : "";
    if (!file_bs || (strcmp(proto, "file") && strcmp(proto, "host_device"))) {
        error_setg(errp, "vhost-pci-blk: drive= must be a raw image on a "
                   "local file or block device (format=raw); the kernel "
                   "vhost_blk reads it directly");
        return -1;
    }

    len = blk_getlength(s->blk);
    if (len < 0) {
        error_setg_errno(errp, -len, "vhost-pci-blk: size of %s",
                         file_bs->filename);
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
    if (fstat(fd, &st) == 0 && S_ISBLK(st.st_mode) &&
        (ioctl(fd, BLKSSZGET, &ssize) < 0 || ssize < 512)) {
        ssize = 512;
    }

    memset(&s->blkcfg, 0, sizeof(s->blkcfg));
    virtio_stq_p(VIRTIO_DEVICE(s), &s->blkcfg.capacity, len / 512);
    virtio_stl_p(VIRTIO_DEVICE(s), &s->blkcfg.blk_size, ssize);
    virtio_stl_p(VIRTIO_DEVICE(s), &s->blkcfg.seg_max,
                 s->queue_size > 2 ? s->queue_size - 2 : 1);
    s->blkcfg.wce = 1;
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
    vhostfd = vhost_pci_blk_open_vhost(s, errp);
    if (vhostfd < 0) {
        return -ENODEV;
    }
    s->image_fd = vhost_pci_blk_open_image(s, errp);
    if (s->image_fd < 0) {
        close(vhostfd);
        return -EINVAL;
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
    if (s->serial) {
        /* Neither vhost-user nor the kernel ABI carries the serial. */
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

    if (user) {
        /*
         * vhost-user migrates as vhost-user-blk does: the virtio state
         * goes in vmstate_vhost_pci_blk, vhost_dev_stop() takes the ring
         * positions back from the backend (GET_VRING_BASE, after its
         * requests completed), and QEMU's vhost core logs the backend's
         * guest memory writes (LOG_ALL, SET_LOG_BASE).  A backend without
         * VHOST_F_LOG_ALL gets vhost_dev_init()'s own blocker.
         */
        return;
    }
    /* See docs/qemu-fork.md, "Live migration". */
    error_setg(&s->migration_blocker, "vhost-pci-blk with drive= (kernel "
               "vhost_blk) cannot be live-migrated: the module does not log "
               "the guest pages it writes (no VHOST_F_LOG_ALL, and its rings "
               "refuse SET_VRING_ADDR while attached); use chardev= with "
               "vhost-blkd to migrate");
    if (migrate_add_blocker(s->migration_blocker, errp) < 0) {
        error_free(s->migration_blocker);
        s->migration_blocker = NULL;
        if (s->connected) {
            vhost_dev_cleanup(&s->dev);
            s->connected = false;
        }
        goto fail;
    }
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
    if (s->migration_blocker) {
        migrate_del_blocker(s->migration_blocker);
        error_free(s->migration_blocker);
        s->migration_blocker = NULL;
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

static const VMStateDescription vmstate_vhost_pci_blk = {
    .name = "vhost-pci-blk",
    .minimum_version_id = 1,
    .version_id = 1,
    .fields = (VMStateField[]) {
        VMSTATE_VIRTIO_DEVICE,
        VMSTATE_END_OF_LIST()
    },
};

static Property vhost_pci_blk_properties[] = {
    DEFINE_PROP_CHR("chardev", VHostPciBlk, chardev),
    DEFINE_PROP_DRIVE("drive", VHostPciBlk, blk),
    DEFINE_PROP_STRING("vhostfd", VHostPciBlk, vhostfd),
    DEFINE_PROP_STRING("vhostdev", VHostPciBlk, vhostdev),
    DEFINE_PROP_STRING("serial", VHostPciBlk, serial),
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
