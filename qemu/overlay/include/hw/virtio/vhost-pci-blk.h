/* SPDX-License-Identifier: GPL-2.0-or-later */
/* vhost-pci-blk: a virtio-blk device whose virtqueues are served by vhost_blk. */
/*
 * The device model only sets up the rings; requests never pass through
 * QEMU.  Two backends:
 *   chardev=ID                    vhost-user (vhost-blkd, the userspace
 *                                 vhost_blk), with reconnect and inflight
 *   drive=ID [vhostfd=|vhostdev=] the kernel vhost_blk (/dev/vhost-blk):
 *                                 generic vhost ioctls + VHOST_BLK_SET_BACKEND
 *
 * All functions run in the main loop thread with the BQL held.
 */
#ifndef HW_VIRTIO_VHOST_PCI_BLK_H
#define HW_VIRTIO_VHOST_PCI_BLK_H

#include "standard-headers/linux/virtio_blk.h"
#include "hw/block/block.h"
#include "chardev/char-fe.h"
#include "hw/virtio/vhost.h"
#include "hw/virtio/vhost-user.h"
#include "qom/object.h"
#include <linux/vhost.h>

#define TYPE_VHOST_PCI_BLK "vhost-pci-blk"
OBJECT_DECLARE_SIMPLE_TYPE(VHostPciBlk, VHOST_PCI_BLK)

/* num-queues default: the PCI proxy picks one queue per vCPU. */
#define VHOST_PCI_BLK_AUTO_NUM_QUEUES UINT16_MAX

/* Default character device of the kernel backend. */
#define VHOST_PCI_BLK_DEFAULT_VHOSTDEV "/dev/vhost-blk"

/*
 * Kernel ABI (see docs/qemu-fork.md): VHOST_BLK_SET_BACKEND attaches the
 * image to a virtqueue after the generic vhost setup, and
 * VHOST_BLK_SET_WRITE_CACHE selects writeback or writethrough.  The header
 * is the project's include/uapi/linux/vhost_blk.h, which the kernel module
 * uses too; scripts/build-qemu.sh copies it into linux-headers/linux/.
 */
#include <linux/vhost_blk.h>

typedef enum VHostPciBlkBackend {
    VHOST_PCI_BLK_BACKEND_NONE,
    VHOST_PCI_BLK_BACKEND_USER,     /* chardev= */
    VHOST_PCI_BLK_BACKEND_KERNEL,   /* drive= + /dev/vhost-blk */
} VHostPciBlkBackend;

struct VHostPciBlk {
    VirtIODevice parent_obj;

    /* properties */
    CharBackend chardev;
    BlockBackend *blk;
    char *vhostfd;
    char *vhostdev;
    char *serial;
    int32_t bootindex;
    uint32_t logical_block_size;        /* kernel only; 0: from the backing */
    uint16_t num_queues;
    uint32_t queue_size;

    /* state */
    VHostPciBlkBackend backend;
    struct virtio_blk_config blkcfg;
    struct vhost_dev dev;
    struct vhost_virtqueue *vhost_vqs;
    VirtQueue **virtqs;
    struct vhost_inflight *inflight;    /* vhost-user only */
    VhostUserState vhost_user;          /* vhost-user only */
    int image_fd;                       /* kernel only, else -1 */
    bool kernel_discard;                /* kernel: the backing can discard */
    bool connected;                     /* vhost_dev initialised */
    bool started;                       /* vhost_dev started */
};

#endif
