/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * vhost_blk: the kernel virtio-blk dataplane (/dev/vhost-blk).
 *
 * The device speaks the generic vhost protocol of <linux/vhost.h>
 * (SET_OWNER, GET/SET_FEATURES, SET_MEM_TABLE, SET_VRING_*) plus the two
 * ioctls below.  Userspace (QEMU's vhost-pci-blk device, vhost-blk-bench)
 * and the module share this one header.
 */
#ifndef _UAPI_LINUX_VHOST_BLK_H
#define _UAPI_LINUX_VHOST_BLK_H

#include <linux/vhost.h>

/*
 * Attach the image to one virtqueue: { .index = queue, .fd = open file or
 * block device }.  .fd = -1 detaches; the module stops using that ring
 * and drops its file reference before the ioctl returns.
 */
#define VHOST_BLK_SET_BACKEND      _IOW(VHOST_VIRTIO, 0x50, struct vhost_vring_file)

/*
 * Write cache mode of the device: 1 writeback, 0 writethrough (the module
 * makes every write durable before completing it).  Default: writeback
 * iff VIRTIO_BLK_F_FLUSH was acked.
 */
#define VHOST_BLK_SET_WRITE_CACHE  _IOW(VHOST_VIRTIO, 0x51, int)

#endif /* _UAPI_LINUX_VHOST_BLK_H */
