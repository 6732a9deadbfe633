/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * vhost_blk: the kernel virtio-blk dataplane (/dev/vhost-blk), its ioctls.
 *
 * Usable from the kernel module and from userspace (QEMU's vhost-pci-blk,
 * vhost-blk-bench).  The device speaks the generic vhost ioctls of
 * <linux/vhost.h> (SET_OWNER, GET/SET_FEATURES, SET_MEM_TABLE,
 * SET_VRING_NUM/ADDR/BASE/KICK/CALL/ERR, GET_VRING_BASE, RESET_OWNER) plus
 * the ones below, in the 0x50 block that linux/vhost.h leaves free between
 * vhost-scsi (0x40-0x44) and vhost-vsock (0x60-0x61).  See
 * docs/kernel-vhost-blk.md.
 */
#ifndef _UAPI_LINUX_VHOST_BLK_H
#define _UAPI_LINUX_VHOST_BLK_H

#include <linux/types.h>
#include <linux/vhost.h>

/*
 * Attach the image (a raw file, opened O_DIRECT or buffered, or a block
 * device) to virtqueue .index: { .index = vq, .fd = image fd }.  The fd's
 * open mode decides: a read-only fd fails writes, DISCARD and WRITE_ZEROES
 * with VIRTIO_BLK_S_IOERR.  .fd = -1 detaches: requests in flight on that
 * queue complete first, then the ring is no longer processed.  The ring
 * must be set up (SET_VRING_NUM/ADDR) before attaching; while attached,
 * SET_VRING_NUM/BASE fail with EBUSY, and so does SET_VRING_ADDR unless the
 * ring addresses stay the same (only the dirty-log flag changes).
 */
#ifndef VHOST_BLK_SET_BACKEND
#define VHOST_BLK_SET_BACKEND _IOW(VHOST_VIRTIO, 0x50, struct vhost_vring_file)
#endif

/*
 * Write cache mode of the whole device: 1 = writeback (completed writes
 * may sit in the host's cache until a FLUSH), 0 = writethrough (every write
 * is made durable before it completes: IOCB_DSYNC, i.e. FUA or a flush on
 * the backing).  Until this is called, the mode follows SET_FEATURES:
 * writeback if VIRTIO_BLK_F_FLUSH was acked, writethrough otherwise.
 */
#ifndef VHOST_BLK_SET_WRITE_CACHE
#define VHOST_BLK_SET_WRITE_CACHE _IOW(VHOST_VIRTIO, 0x51, int)
#endif

/*
 * The serial number VIRTIO_BLK_T_GET_ID returns (up to 20 bytes, not
 * necessarily NUL-terminated; unused bytes are zero).  Default: all zero
 * (an empty serial).
 */
#define VHOST_BLK_SERIAL_LEN 20
struct vhost_blk_serial {
	char serial[VHOST_BLK_SERIAL_LEN];
};
#define VHOST_BLK_SET_SERIAL _IOW(VHOST_VIRTIO, 0x52, struct vhost_blk_serial)

/* Virtqueues one device serves (VHOST_BLK_SET_BACKEND .index < this). */
#define VHOST_BLK_MAX_QUEUES 16

/*
 * The limits the module enforces on DISCARD and WRITE_ZEROES (a request
 * over them completes with VIRTIO_BLK_S_IOERR); the VMM advertises them in
 * max_discard_seg / max_discard_sectors and max_write_zeroes_seg /
 * max_write_zeroes_sectors.  A zero-out the backing cannot offload writes
 * zero pages, so WRITE_ZEROES is one segment of at most 64 MiB.
 */
#define VHOST_BLK_MAX_DISCARD_SEG 32
#define VHOST_BLK_MAX_DISCARD_SECTORS (1u << 21)	/* 1 GiB per segment */
#define VHOST_BLK_MAX_WRITE_ZEROES_SEG 1
#define VHOST_BLK_MAX_WRITE_ZEROES_SECTORS (1u << 17)	/* 64 MiB */

#endif /* _UAPI_LINUX_VHOST_BLK_H */
