// SPDX-License-Identifier: GPL-2.0
/*
 * vhost_blk: a virtio-blk dataplane in the kernel (/dev/vhost-blk).
 *
 * Theory of operation
 * -------------------
 * The VMM (QEMU's vhost-pci-blk, or vhost-blk-bench) opens /dev/vhost-blk,
 * sets the device up with the generic vhost ioctls (handled by the kernel's
 * vhost core) and attaches an image to each virtqueue with
 * VHOST_BLK_SET_BACKEND (include/uapi/linux/vhost_blk.h).
 *
 * Per-queue parallelism: the 6.1 vhost core runs one worker kthread per
 * device, and every kick of every queue is a work item on it.  Serving the
 * rings there would serialise all queues on one CPU.  Here each attached
 * queue has its own kthread ("vblk-<pid>-q<n>") that adopts the
 * owner's mm and does all the ring work of that queue; the core's worker
 * only runs the kick handler, which sets a bit and wakes the queue's
 * thread.  Queues therefore proceed in parallel, each on whatever CPU the
 * scheduler gives its thread.
 *
 * A queue thread's loop: take the completions that arrived (a lock-free
 * list filled by the I/O completion callbacks, which may run in interrupt
 * context and so never touch guest memory), write their status bytes, put
 * them on the used ring; then, if kicked, pop requests from the avail ring
 * with guest notifications disabled and submit them inside one block plug
 * (blk_start_plug/blk_finish_plug) per batch; finally publish the used
 * entries with one vhost_add_used_n() and signal the guest at most once
 * (vhost_signal() honours VIRTIO_RING_F_EVENT_IDX).
 *
 * Reads and writes are asynchronous kiocbs on the backing file's
 * read_iter/write_iter, over an iov_iter of the guest's buffers (user
 * addresses of the owner, translated by the vhost core): O_DIRECT or
 * buffered exactly as the fd was opened, a regular file or a block device.
 * FLUSH (vfs_fsync), GET_ID, DISCARD and WRITE_ZEROES (fallocate on files
 * and block devices alike, so the page cache stays coherent) run
 * synchronously in the queue's thread.  Request contexts are preallocated
 * per queue (one per ring entry) at attach time: nothing is allocated and
 * nothing is printed per request.
 *
 * The fast path is an aligned O_DIRECT read or write: an async kiocb
 * submitted with the vq mutex held.  Everything whose duration the guest or
 * the backing decides -- FLUSH, DISCARD, WRITE_ZEROES, buffered I/O,
 * O_DIRECT I/O whose buffers are not aligned for the backing (any
 * descriptor layout is allowed: such data goes through a per-queue bounce
 * buffer, preallocated at attach), writes that must wait for a frozen file
 * system, requests above MAX_RW_COUNT -- runs with the vq mutex released
 * ("slow" requests, vhost_blk_unlock/relock): the ioctls that need the
 * mutex (detach, SET_MEM_TABLE, GET_VRING_BASE) are never stuck behind
 * them, and wait for them only interruptibly.  The limits of one request
 * (VHOST_BLK_MAX_* in the uapi header) and the batch weight
 * (vhost_exceeds_weight) bound how much work one turn of the loop does.
 *
 * Writes to regular files hold freeze protection (sb_start_write, as aio
 * and io_uring take it) from submission to completion, are checked by
 * rw_verify_area, and report to fsnotify.
 *
 * Guest input is untrusted.  Descriptor chains are walked and translated
 * by the vhost core (loops, bad indexes, addresses outside the memory
 * table: vq_err, the queue stops).  This file checks the rest: the header
 * must be 16 device-readable bytes, the last device-writable byte is the
 * status (a request without one is returned with used length 0 and
 * vq_err), data lengths must be whole sectors, and sector ranges are
 * checked against the capacity with overflow-safe arithmetic.  Bad
 * requests complete with VIRTIO_BLK_S_IOERR (or UNSUPP for unknown types).
 *
 * Teardown: detaching a queue (fd -1, RESET_OWNER, close) first stops
 * taking requests, then waits for every request in flight on it to
 * complete and be returned to the used ring, then drops the image.
 *
 * Cgroups: each queue thread is attached, when it is created, to the
 * cgroups of the vhost core's worker, which VHOST_SET_OWNER attached to the
 * owner's; the VM's cpu, cpuset, io and pids limits cover its disk work.
 *
 * Dirty logging (VHOST_F_LOG_ALL, for live migration): with LOG_ALL acked
 * the queue thread asks vhost_get_vq_desc() for the guest-physical ranges
 * of each request's device-writable descriptors, keeps them (merged, up to
 * VHOST_BLK_LOG_SLOTS per request; a request with more is served
 * synchronously) and, when the request completes, marks the pages of the
 * data it may have written and of its status byte with vhost_log_write().
 * Used-ring updates are logged by the vhost core (VHOST_VRING_F_LOG).  The
 * VMM switches LOG_ALL on and off on running rings; the switch waits until
 * no request is in flight on the queue, so that each request is logged
 * from its start to its end or not at all.  With logging off the cost is
 * one feature test per batch, plus a never-taken branch per request (on a
 * register) and per completion (on the request's nlog).
 */
#include <linux/cgroup.h>
#include <linux/compat.h>
#include <linux/falloc.h>
#include <linux/file.h>
#include <linux/blkdev.h>
#include <linux/fs.h>
#include <linux/fsnotify.h>
#include <linux/kthread.h>
#include <linux/llist.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/nospec.h>
#include <linux/rcupdate.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uio.h>
#include <linux/virtio_blk.h>
#include <linux/vmalloc.h>

#include "vhost.h"
#include <linux/vhost_blk.h>

#define VHOST_BLK_SECTOR_SHIFT 9
/*
 * Batch weight (vhost_exceeds_weight): ring entries a queue thread looks at,
 * and data bytes it moves or zeroes, before it requeues itself and looks at
 * its completions again (fairness between submission and completion, and a
 * bound on one turn).
 */
#define VHOST_BLK_WEIGHT 64
#define VHOST_BLK_BYTE_WEIGHT (8 << 20)
/* Per-queue bounce buffer for misaligned O_DIRECT data: 256 KiB. */
#define VHOST_BLK_BOUNCE_PAGES 64
/* Static misc minor (243-254 are for local use, devices.txt). */
#define VHOST_BLK_MINOR 243
/*
 * Dirty logging (VHOST_F_LOG_ALL): the guest-physical ranges of a request's
 * device-writable descriptors are kept with the request until it completes,
 * up to this many after merging adjacent ones.  A request with more is
 * served synchronously, with the vhost core's own log array.
 */
#define VHOST_BLK_LOG_SLOTS 16

enum {
	VHOST_BLK_FEATURES = VHOST_FEATURES |
			     (1ULL << VIRTIO_BLK_F_SIZE_MAX) |
			     (1ULL << VIRTIO_BLK_F_SEG_MAX) |
			     (1ULL << VIRTIO_BLK_F_GEOMETRY) |
			     (1ULL << VIRTIO_BLK_F_RO) |
			     (1ULL << VIRTIO_BLK_F_BLK_SIZE) |
			     (1ULL << VIRTIO_BLK_F_TOPOLOGY) |
			     (1ULL << VIRTIO_BLK_F_FLUSH) |
			     (1ULL << VIRTIO_BLK_F_CONFIG_WCE) |
			     (1ULL << VIRTIO_BLK_F_MQ) |
			     (1ULL << VIRTIO_BLK_F_DISCARD) |
			     (1ULL << VIRTIO_BLK_F_WRITE_ZEROES),
};

/* queue thread flags */
enum {
	VHOST_BLK_KICKED,
};

struct vhost_blk_vq;

struct vhost_blk_req {
	struct kiocb iocb;
	struct llist_node node;
	struct vhost_blk_vq *bq;
	u8 __user *status;
	long res;		/* bytes transferred or -errno */
	u32 len;		/* data bytes expected */
	u16 head;
	bool in;		/* device writes guest memory (IN) */
	bool log_sync;		/* logging, too many ranges: synchronous I/O */
	/*
	 * Logging on: the device-writable ranges (guest-physical, in chain
	 * order; the last one ends with the status byte), marked in the dirty
	 * log when the request completes.  nlog is 0 when logging is off.
	 */
	unsigned int nlog;
	struct vhost_log *log;
	bool sb_write;		/* holds freeze protection (kiocb_start_write) */
};

struct vhost_blk_vq {
	struct vhost_virtqueue vq;
	struct vhost_blk *blk;
	unsigned int index;

	/* set while attached; protected by vq.mutex */
	struct file *file;
	struct block_device *bdev;	/* NULL for a regular file */
	bool writable;
	bool paused;			/* SET_MEM_TABLE: take no new requests */
	u64 nr_sectors;
	unsigned int dio_mask;		/* O_DIRECT: alignment mask, else 0 */
	char serial[VHOST_BLK_SERIAL_LEN];

	struct task_struct *thread;
	unsigned long flags;
	struct llist_head done;
	atomic_t inflight;
	wait_queue_head_t drain_wq;

	/* owned by the queue thread */
	struct vhost_blk_req *reqs;
	u16 *free;
	unsigned int nfree;
	unsigned int nreqs;
	bool starved;
	struct vring_used_elem *used;
	unsigned int nused;
	struct vhost_log *logs;	/* VHOST_BLK_LOG_SLOTS per request */
	struct page *bounce[VHOST_BLK_BOUNCE_PAGES];	/* O_DIRECT only */
	struct bio_vec bounce_bv[VHOST_BLK_BOUNCE_PAGES];
};

struct vhost_blk {
	struct vhost_dev dev;
	struct vhost_blk_vq vqs[VHOST_BLK_MAX_QUEUES];
	struct vhost_virtqueue *vq_ptrs[VHOST_BLK_MAX_QUEUES];
	bool writeback;
	bool wc_explicit;
	char serial[VHOST_BLK_SERIAL_LEN];	/* dev mutex; copied to each vq */
	unsigned long exit_deadline;	/* jiffies: VHOST_BLK_WAIT_EXIT */
};

/* ------------------------------------------------------------ completion */

static void vhost_blk_flush_used(struct vhost_blk_vq *bq)
{
	if (!bq->nused)
		return;
	vhost_add_used_n(&bq->vq, bq->used, bq->nused);
	bq->nused = 0;
	vhost_signal(&bq->blk->dev, &bq->vq);
}

static void vhost_blk_push_used(struct vhost_blk_vq *bq, u16 head, u32 len)
{
	if (bq->nused == bq->nreqs)
		vhost_blk_flush_used(bq);
	bq->used[bq->nused].id = cpu_to_vhost32(&bq->vq, head);
	bq->used[bq->nused].len = cpu_to_vhost32(&bq->vq, len);
	bq->nused++;
}

static void vhost_blk_req_put(struct vhost_blk_vq *bq, struct vhost_blk_req *req)
{
	bq->free[bq->nfree++] = req - bq->reqs;
}

/*
 * Dirty logging: mark the first @dirty bytes of @req's device-writable
 * ranges and, if @status_byte, the status byte (the last byte of the last
 * range) in the VMM's log.  The ranges were taken, and checked against the
 * memory table, by vhost_get_vq_desc(); vhost_log_write() marks the pages
 * (its smp_wmb() orders our guest memory writes before the bits) and signals
 * the log eventfd.  Queue thread, vq mutex held.
 */
static void vhost_blk_log_req(struct vhost_blk_vq *bq, struct vhost_blk_req *req,
			      u64 dirty, bool status_byte)
{
	struct vhost_log *last = &req->log[req->nlog - 1];
	struct vhost_log st = { .addr = last->addr + last->len - 1, .len = 1 };
	u64 total = 0;
	unsigned int i;
	int r = 0;

	for (i = 0; i < req->nlog; i++)
		total += req->log[i].len;
	/* vhost_log_write() BUG()s on a length beyond its ranges. */
	dirty = min(dirty, total);
	if (dirty)
		r = vhost_log_write(&bq->vq, req->log, req->nlog, dirty, NULL, 0);
	if (!r && status_byte)
		r = vhost_log_write(&bq->vq, &st, 1, 1, NULL, 0);
	if (r < 0)
		vq_err(&bq->vq, "vhost-blk: cannot write the dirty log (%d)\n", r);
	req->nlog = 0;
	req->log_sync = false;
}

/*
 * Finish @req with @status; @written: data bytes put in guest memory (the
 * used length), @dirty: data bytes the device may have written (what the
 * dirty log gets; more than @written when a read failed part-way).
 */
static void __vhost_blk_finish(struct vhost_blk_vq *bq, struct vhost_blk_req *req,
			       u8 status, u32 written, u32 dirty)
{
	u32 len = written;
	bool status_ok = false;

	if (req->status) {
		if (put_user(status, req->status)) {
			vq_err(&bq->vq, "vhost-blk: cannot write the status byte\n");
			len = 0;
		} else {
			len += 1;
			status_ok = true;
		}
	} else {
		len = 0;
	}
	if (unlikely(req->nlog))
		vhost_blk_log_req(bq, req, dirty, status_ok);
	vhost_blk_push_used(bq, req->head, len);
	vhost_blk_req_put(bq, req);
}

static void vhost_blk_finish(struct vhost_blk_vq *bq, struct vhost_blk_req *req,
			     u8 status, u32 written)
{
	__vhost_blk_finish(bq, req, status, written, written);
}

static void vhost_blk_rw_finish(struct vhost_blk_vq *bq, struct vhost_blk_req *req)
{
	bool ok = req->res >= 0 && (u64)req->res == req->len;

	if (req->sb_write) {
		/* lockdep: we inherit the protection taken at submission */
		kiocb_end_write(&req->iocb);
		req->sb_write = false;
	}
	if (ok) {
		if (req->in)
			fsnotify_access(bq->file);
		else
			fsnotify_modify(bq->file);
	}
	__vhost_blk_finish(bq, req, ok ? VIRTIO_BLK_S_OK : VIRTIO_BLK_S_IOERR,
			   ok && req->in ? req->len : 0, req->in ? req->len : 0);
}

/*
 * ki_complete: any context; only queue the request for the thread.  Once
 * the request is on the list the thread may finish it and a detach may
 * return, so what follows the llist_add() runs under RCU and teardown waits
 * for a grace period (vhost_blk_detach) before stopping the thread or
 * freeing the device.
 */
static void vhost_blk_rw_done(struct kiocb *iocb, long ret)
{
	struct vhost_blk_req *req = container_of(iocb, struct vhost_blk_req, iocb);
	struct vhost_blk_vq *bq = req->bq;

	req->res = ret;
	rcu_read_lock();
	llist_add(&req->node, &bq->done);
	wake_up_process(READ_ONCE(bq->thread));
	rcu_read_unlock();
}

/* Queue thread, vq mutex held. */
static void vhost_blk_reap(struct vhost_blk_vq *bq)
{
	struct llist_node *list = llist_del_all(&bq->done);
	struct vhost_blk_req *req, *tmp;
	int n = 0;

	if (!list)
		return;
	list = llist_reverse_order(list);
	llist_for_each_entry_safe(req, tmp, list, node) {
		vhost_blk_rw_finish(bq, req);
		n++;
	}
	vhost_blk_flush_used(bq);
	if (atomic_sub_and_test(n, &bq->inflight))
		wake_up_all(&bq->drain_wq);
}

/* ---------------------------------------------------------------- requests */

/*
 * Writes, DISCARD and WRITE_ZEROES need a writable fd and a device the VMM
 * did not make read-only (VIRTIO_BLK_F_RO acked).
 */
static bool vhost_blk_can_write(struct vhost_blk_vq *bq)
{
	return bq->writable && !vhost_has_feature(&bq->vq, VIRTIO_BLK_F_RO);
}

/* [sector, sector + nr) inside the image?  No overflow: nr <= capacity first. */
static bool vhost_blk_range_ok(struct vhost_blk_vq *bq, u64 sector, u64 nr)
{
	return nr <= bq->nr_sectors && sector <= bq->nr_sectors - nr;
}

static u8 vhost_blk_errno_status(int err)
{
	if (!err)
		return VIRTIO_BLK_S_OK;
	if (err == -EOPNOTSUPP)
		return VIRTIO_BLK_S_UNSUPP;
	return VIRTIO_BLK_S_IOERR;
}

/*
 * Vq mutex released.  Everything goes through the backing's ->fallocate, as
 * the loop driver does, so that a block device's page cache is written back
 * and invalidated over the range first (blkdev_fallocate ->
 * truncate_bdev_range): a buffered reader sees the zeroes, and no dirty page
 * is later written over them.  vfs_fallocate() adds freeze protection and
 * fsnotify.  On a block device: ZERO_RANGE = zero-out without unmapping,
 * PUNCH_HOLE = zero-out that may unmap (offloaded only), and DISCARD is
 * PUNCH_HOLE|NO_HIDE_STALE, which vfs_fallocate() does not pass on, so it
 * calls blkdev_fallocate directly (freeze protection does not apply to a
 * block device inode).
 */
static int vhost_blk_zero_or_discard(struct vhost_blk_vq *bq, u32 type,
				     u64 sector, u64 nr, bool unmap)
{
	struct file *file = bq->file;
	loff_t off = sector << VHOST_BLK_SECTOR_SHIFT;
	loff_t len = nr << VHOST_BLK_SECTOR_SHIFT;
	int ret;

	if (type == VIRTIO_BLK_T_DISCARD) {
		if (!bq->bdev)
			return vfs_fallocate(file, FALLOC_FL_PUNCH_HOLE |
					     FALLOC_FL_KEEP_SIZE, off, len);
		if (!bdev_max_discard_sectors(bq->bdev))
			return -EOPNOTSUPP;
		return file->f_op->fallocate(file, FALLOC_FL_PUNCH_HOLE |
					     FALLOC_FL_KEEP_SIZE |
					     FALLOC_FL_NO_HIDE_STALE, off, len);
	}
	if (unmap) {
		ret = vfs_fallocate(file, FALLOC_FL_PUNCH_HOLE |
				    FALLOC_FL_KEEP_SIZE, off, len);
		/* a device without unmapping zero-out: write the zeroes */
		if (ret != -EOPNOTSUPP || !bq->bdev)
			return ret;
	}
	ret = vfs_fallocate(file, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
			    off, len);
	/* tmpfs and others have no ZERO_RANGE; a hole reads as zeroes too. */
	if (ret == -EOPNOTSUPP && !bq->bdev)
		ret = vfs_fallocate(file, FALLOC_FL_PUNCH_HOLE |
				    FALLOC_FL_KEEP_SIZE, off, len);
	return ret;
}

/*
 * Vq mutex held: release it around work the guest or the backing decides
 * the length of.  The request counts as in flight meanwhile, so a detach or
 * SET_MEM_TABLE (which take the mutex and then wait for the requests in
 * flight) waits for it, but is not stuck behind it for the mutex.  The
 * caller rechecks the backend after vhost_blk_relock().
 */
static void vhost_blk_unlock(struct vhost_blk_vq *bq)
{
	/* what completed so far does not wait for the long operation */
	vhost_blk_flush_used(bq);
	atomic_inc(&bq->inflight);
	mutex_unlock(&bq->vq.mutex);
}

static void vhost_blk_relock(struct vhost_blk_vq *bq)
{
	mutex_lock(&bq->vq.mutex);
	/* pairs with the wait_event*() on drain_wq in detach/SET_MEM_TABLE */
	if (atomic_dec_and_test(&bq->inflight))
		wake_up_all(&bq->drain_wq);
}

/*
 * DISCARD / WRITE_ZEROES: @iter holds the segments, @bytes gets the bytes
 * they cover (for the batch weight).  The segments are read and checked
 * first, each one once into a local, against the limits the VMM advertises
 * (VHOST_BLK_MAX_*_SEG / _SECTORS); only then is the work done, with the vq
 * mutex released.  Writethrough makes the result durable (vfs_fsync) before
 * the request completes.
 */
static u8 vhost_blk_do_segments(struct vhost_blk_vq *bq, u32 type,
				struct iov_iter *iter, u64 *bytes)
{
	struct virtio_blk_discard_write_zeroes segs[VHOST_BLK_MAX_DISCARD_SEG];
	bool discard = type == VIRTIO_BLK_T_DISCARD;
	unsigned int max_seg = discard ? VHOST_BLK_MAX_DISCARD_SEG :
				VHOST_BLK_MAX_WRITE_ZEROES_SEG;
	u64 max_sectors = discard ? VHOST_BLK_MAX_DISCARD_SECTORS :
			  VHOST_BLK_MAX_WRITE_ZEROES_SECTORS;
	size_t n = iov_iter_count(iter);
	unsigned int i, nseg;
	u32 flags;
	u64 sector, nr;
	int ret = 0;

	BUILD_BUG_ON(VHOST_BLK_MAX_WRITE_ZEROES_SEG > VHOST_BLK_MAX_DISCARD_SEG);
	if (!n || n % sizeof(segs[0]) || n / sizeof(segs[0]) > max_seg)
		return VIRTIO_BLK_S_IOERR;
	if (!vhost_blk_can_write(bq))
		return VIRTIO_BLK_S_IOERR;
	nseg = n / sizeof(segs[0]);
	if (copy_from_iter(segs, n, iter) != n)
		return VIRTIO_BLK_S_IOERR;
	*bytes = 0;
	for (i = 0; i < nseg; i++) {
		sector = le64_to_cpu(segs[i].sector);
		nr = le32_to_cpu(segs[i].num_sectors);
		flags = le32_to_cpu(segs[i].flags);
		if (flags & ~VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP)
			return VIRTIO_BLK_S_UNSUPP;
		/* The spec: DISCARD with the unmap flag is unsupported. */
		if (discard && flags)
			return VIRTIO_BLK_S_UNSUPP;
		if (nr > max_sectors || !vhost_blk_range_ok(bq, sector, nr))
			return VIRTIO_BLK_S_IOERR;
		/* keep the checked values: the guest may change its copy */
		segs[i].sector = sector;
		segs[i].num_sectors = nr;
		segs[i].flags = flags;
		*bytes += nr << VHOST_BLK_SECTOR_SHIFT;
	}
	vhost_blk_unlock(bq);
	for (i = 0; i < nseg && !ret; i++) {
		if (segs[i].num_sectors)
			ret = vhost_blk_zero_or_discard(bq, type, segs[i].sector,
					segs[i].num_sectors, segs[i].flags &
					VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP);
	}
	if (!ret && !READ_ONCE(bq->blk->writeback))
		ret = vfs_fsync(bq->file, 0);
	vhost_blk_relock(bq);
	return vhost_blk_errno_status(ret);
}

/*
 * Vq mutex released: a read or write done synchronously, in chunks of at
 * most MAX_RW_COUNT (what the VFS lets one ->read_iter/->write_iter call
 * move), or of the bounce buffer when @bounce (O_DIRECT data the backing
 * cannot take as it is: copied through page-aligned pages).  Writes to a
 * regular file hold freeze protection, waiting for a thaw if need be.
 * Returns the bytes moved or -errno.
 */
static ssize_t vhost_blk_rw_sync(struct vhost_blk_vq *bq, struct iov_iter *iter,
				 bool is_in, loff_t pos, bool bounce)
{
	struct file *file = bq->file;
	size_t total = iov_iter_count(iter), done = 0;
	ssize_t ret = 0;

	if (!is_in)
		file_start_write(file);
	while (done < total) {
		size_t chunk = min_t(size_t, total - done, bounce ?
				     VHOST_BLK_BOUNCE_PAGES * PAGE_SIZE : MAX_RW_COUNT);
		struct iov_iter bi;
		struct kiocb kio;
		unsigned int i, np = 0;

		init_sync_kiocb(&kio, file);
		kio.ki_pos = pos + done;
		if (!is_in) {
			kio.ki_flags |= IOCB_WRITE;
			if (!READ_ONCE(bq->blk->writeback))
				kio.ki_flags |= IOCB_DSYNC;
		}
		if (bounce) {
			np = DIV_ROUND_UP(chunk, PAGE_SIZE);
			for (i = 0; i < np; i++) {
				size_t l = min_t(size_t, PAGE_SIZE, chunk - i * PAGE_SIZE);

				bq->bounce_bv[i].bv_page = bq->bounce[i];
				bq->bounce_bv[i].bv_len = l;
				bq->bounce_bv[i].bv_offset = 0;
				if (!is_in &&
				    copy_from_iter(page_address(bq->bounce[i]), l,
						   iter) != l) {
					ret = -EFAULT;
					goto out;
				}
			}
			iov_iter_bvec(&bi, is_in ? ITER_DEST : ITER_SOURCE,
				      bq->bounce_bv, np, chunk);
		} else {
			bi = *iter;
			iov_iter_truncate(&bi, chunk);
		}
		if (is_in)
			ret = call_read_iter(file, &kio, &bi);
		else
			ret = call_write_iter(file, &kio, &bi);
		if (ret != chunk) {
			if (ret >= 0)
				ret = -EIO;
			goto out;
		}
		if (bounce && is_in) {
			for (i = 0; i < np; i++) {
				size_t l = bq->bounce_bv[i].bv_len;

				if (copy_to_iter(page_address(bq->bounce[i]), l,
						 iter) != l) {
					ret = -EFAULT;
					goto out;
				}
			}
		} else if (!bounce) {
			iov_iter_advance(iter, chunk);
		}
		done += chunk;
	}
	ret = done;
out:
	if (!is_in)
		file_end_write(file);
	return ret;
}

/*
 * Start one request: vq->iov[0, out) device-readable, [out, out + in)
 * device-writable.  Either submits it (async), or finishes it here.
 * Returns the data bytes it covers (for the batch weight).
 */
static u64 vhost_blk_handle_req(struct vhost_blk_vq *bq,
				struct vhost_blk_req *req,
				unsigned int out, unsigned int in)
{
	struct vhost_virtqueue *vq = &bq->vq;
	struct iovec *iov = vq->iov;
	struct virtio_blk_outhdr hdr;
	struct iov_iter oiter, iiter;
	size_t olen, ilen;
	u32 type;
	u64 sector;
	ssize_t ret;
	u64 bytes = 0;
	u8 status;

	req->status = NULL;
	/* The status byte: the last byte of the last non-empty in buffer. */
	while (in && !iov[out + in - 1].iov_len)
		in--;
	if (!in) {
		vq_err(vq, "vhost-blk: request %u has no status byte\n", req->head);
		vhost_blk_finish(bq, req, 0, 0);
		return 0;
	}
	iov[out + in - 1].iov_len--;
	req->status = (u8 __user *)iov[out + in - 1].iov_base +
		      iov[out + in - 1].iov_len;

	olen = iov_length(iov, out);
	ilen = iov_length(iov + out, in);
	iov_iter_init(&oiter, ITER_SOURCE, iov, out, olen);
	iov_iter_init(&iiter, ITER_DEST, iov + out, in, ilen);
	if (copy_from_iter(&hdr, sizeof(hdr), &oiter) != sizeof(hdr)) {
		vhost_blk_finish(bq, req, VIRTIO_BLK_S_IOERR, 0);
		return 0;
	}
	type = vhost32_to_cpu(vq, hdr.type);
	sector = vhost64_to_cpu(vq, hdr.sector);

	switch (type) {
	case VIRTIO_BLK_T_IN:
	case VIRTIO_BLK_T_OUT: {
		bool is_in = type == VIRTIO_BLK_T_IN;
		struct iov_iter *iter = is_in ? &iiter : &oiter;
		size_t len = iov_iter_count(iter);
		struct inode *inode = file_inode(bq->file);
		loff_t pos = sector << VHOST_BLK_SECTOR_SHIFT;
		bool slow, bounce;

		if ((len & ((1u << VHOST_BLK_SECTOR_SHIFT) - 1)) || len > U32_MAX ||
		    !vhost_blk_range_ok(bq, sector, len >> VHOST_BLK_SECTOR_SHIFT) ||
		    (!is_in && !vhost_blk_can_write(bq)) ||
		    rw_verify_area(is_in ? READ : WRITE, bq->file, &pos, len)) {
			vhost_blk_finish(bq, req, VIRTIO_BLK_S_IOERR, 0);
			return 0;
		}
		if (!len) {
			vhost_blk_finish(bq, req, VIRTIO_BLK_S_OK, 0);
			return 0;
		}
		req->in = is_in;
		req->len = len;
		req->sb_write = false;
		/*
		 * The fast path: O_DIRECT, buffers aligned for the backing
		 * (any layout the guest chose otherwise goes through the
		 * bounce buffer), no more than one VFS call may move, and
		 * for a write to a regular file, freeze protection without
		 * waiting.
		 */
		bounce = bq->dio_mask && (iov_iter_alignment(iter) & bq->dio_mask);
		slow = !bq->dio_mask || bounce || len > MAX_RW_COUNT ||
		       unlikely(req->log_sync);
		if (!slow && !is_in && S_ISREG(inode->i_mode)) {
			if (sb_start_write_trylock(inode->i_sb)) {
				/* lockdep: completion releases it (aio does so) */
				__sb_writers_release(inode->i_sb, SB_FREEZE_WRITE);
				req->sb_write = true;
			} else {
				slow = true;	/* frozen: wait without the mutex */
			}
		}
		if (slow) {
			vhost_blk_unlock(bq);
			req->res = vhost_blk_rw_sync(bq, iter, is_in, pos, bounce);
			vhost_blk_relock(bq);
			vhost_blk_rw_finish(bq, req);
			return len;
		}
		init_sync_kiocb(&req->iocb, bq->file);
		req->iocb.ki_pos = pos;
		req->iocb.ki_complete = vhost_blk_rw_done;
		if (!is_in) {
			req->iocb.ki_flags |= IOCB_WRITE;
			if (!READ_ONCE(bq->blk->writeback))
				req->iocb.ki_flags |= IOCB_DSYNC;
		}
		atomic_inc(&bq->inflight);
		if (is_in)
			ret = call_read_iter(bq->file, &req->iocb, iter);
		else
			ret = call_write_iter(bq->file, &req->iocb, iter);
		if (ret != -EIOCBQUEUED) {
			/* Completed or failed at submission. */
			atomic_dec(&bq->inflight);
			req->res = ret;
			vhost_blk_rw_finish(bq, req);
		}
		return len;
	}
	case VIRTIO_BLK_T_FLUSH:
		vhost_blk_unlock(bq);
		ret = vfs_fsync(bq->file, 0);
		vhost_blk_relock(bq);
		vhost_blk_finish(bq, req, vhost_blk_errno_status(ret), 0);
		return 0;
	case VIRTIO_BLK_T_GET_ID: {
		size_t n = min_t(size_t, iov_iter_count(&iiter),
				 VHOST_BLK_SERIAL_LEN);

		/* bq->serial: written under this vq's mutex, which we hold */
		if (copy_to_iter(bq->serial, n, &iiter) != n) {
			vhost_blk_finish(bq, req, VIRTIO_BLK_S_IOERR, 0);
			return 0;
		}
		vhost_blk_finish(bq, req, VIRTIO_BLK_S_OK, n);
		return 0;
	}
	case VIRTIO_BLK_T_DISCARD:
	case VIRTIO_BLK_T_WRITE_ZEROES:
		status = vhost_blk_do_segments(bq, type, &oiter, &bytes);
		vhost_blk_finish(bq, req, status, 0);
		return bytes;
	default:
		vhost_blk_finish(bq, req, VIRTIO_BLK_S_UNSUPP, 0);
		return 0;
	}
}

/*
 * Logging on: keep @req's device-writable ranges (@log, @nlog from
 * vhost_get_vq_desc()) until it completes.  Adjacent ranges are merged in
 * place; if more than VHOST_BLK_LOG_SLOTS remain, the request is served
 * synchronously and keeps pointing at the core's array, which stays valid
 * until the next vhost_get_vq_desc() of this queue.
 */
static void vhost_blk_keep_log(struct vhost_blk_vq *bq, struct vhost_blk_req *req,
			       struct vhost_log *log, unsigned int nlog)
{
	unsigned int i, n = 0;

	for (i = 0; i < nlog; i++) {
		if (n && log[n - 1].addr + log[n - 1].len == log[i].addr) {
			log[n - 1].len += log[i].len;
			continue;
		}
		log[n++] = log[i];
	}
	req->nlog = n;
	req->log_sync = n > VHOST_BLK_LOG_SLOTS;
	if (req->log_sync) {
		req->log = log;
		return;
	}
	req->log = &bq->logs[(req - bq->reqs) * VHOST_BLK_LOG_SLOTS];
	memcpy(req->log, log, n * sizeof(*log));
}

/* Queue thread, vq mutex held: take requests from the avail ring. */
static void vhost_blk_handle_vq(struct vhost_blk_vq *bq)
{
	struct vhost_virtqueue *vq = &bq->vq;
	struct vhost_dev *dev = &bq->blk->dev;
	struct vhost_log *log = NULL;
	struct blk_plug plug;
	unsigned int out, in, nlog = 0;
	struct vhost_blk_req *req;
	int head, n = 0;
	u64 bytes = 0;

	if (!vhost_vq_get_backend(vq) || bq->paused)
		return;
	/*
	 * The only cost of dirty logging while it is off.  LOG_ALL changes only
	 * while no request is in flight (vhost_blk_set_features), so every
	 * request completes under the mode it was taken in.
	 */
	if (unlikely(vhost_has_feature(vq, VHOST_F_LOG_ALL)))
		log = vq->log;
	vhost_disable_notify(dev, vq);
	blk_start_plug(&plug);
	for (;;) {
		if (!bq->nfree) {
			/* Every context busy: a completion restarts us. */
			bq->starved = true;
			break;
		}
		/*
		 * The batch weight: ring entries looked at (the racing kick
		 * below counts too) and bytes; over it, the core requeues
		 * our kick.  The backend is gone or paused if a slow
		 * request let a detach or SET_MEM_TABLE in.
		 */
		if (vhost_exceeds_weight(vq, n, min_t(u64, bytes, INT_MAX)) ||
		    !vhost_vq_get_backend(vq) || bq->paused)
			break;
		n++;
		head = vhost_get_vq_desc(vq, vq->iov, ARRAY_SIZE(vq->iov),
					 &out, &in, log, &nlog);
		if (unlikely(head < 0))
			break;		/* the core reported it (vq_err) */
		if (head == vq->num) {
			if (unlikely(vhost_enable_notify(dev, vq))) {
				vhost_disable_notify(dev, vq);
				continue;
			}
			break;
		}
		bq->nfree--;
		req = &bq->reqs[bq->free[bq->nfree]];
		req->head = head;
		if (unlikely(log))
			vhost_blk_keep_log(bq, req, log, nlog);
		bytes += vhost_blk_handle_req(bq, req, out, in);
	}
	blk_finish_plug(&plug);
	vhost_blk_flush_used(bq);
}

static int vhost_blk_thread(void *data)
{
	struct vhost_blk_vq *bq = data;
	struct vhost_virtqueue *vq = &bq->vq;

	kthread_use_mm(bq->blk->dev.mm);
	for (;;) {
		bool kicked;

		/*
		 * set_current_state() is a full barrier before the checks
		 * below; it pairs with wake_up_process() after set_bit() in
		 * vhost_blk_handle_kick() and after llist_add() in
		 * vhost_blk_rw_done(): either we see their work here or their
		 * wake-up finds us no longer running and makes us runnable.
		 */
		set_current_state(TASK_INTERRUPTIBLE);
		if (kthread_should_stop()) {
			__set_current_state(TASK_RUNNING);
			break;
		}
		kicked = test_and_clear_bit(VHOST_BLK_KICKED, &bq->flags);
		if (!kicked && llist_empty(&bq->done)) {
			schedule();
			continue;
		}
		__set_current_state(TASK_RUNNING);
		mutex_lock(&vq->mutex);
		vhost_blk_reap(bq);
		if (bq->starved && bq->nfree) {
			bq->starved = false;
			kicked = true;
		}
		if (kicked)
			vhost_blk_handle_vq(bq);
		mutex_unlock(&vq->mutex);
		cond_resched();
	}
	kthread_unuse_mm(bq->blk->dev.mm);
	return 0;
}

/* vhost core worker: a guest kick.  Hand it to the queue's thread. */
static void vhost_blk_handle_kick(struct vhost_work *work)
{
	struct vhost_virtqueue *vq = container_of(work, struct vhost_virtqueue,
						  poll.work);
	struct vhost_blk_vq *bq = container_of(vq, struct vhost_blk_vq, vq);
	struct task_struct *t = READ_ONCE(bq->thread);

	if (!t)
		return;
	set_bit(VHOST_BLK_KICKED, &bq->flags);
	wake_up_process(t);
}

/* ------------------------------------------------------------ attach/detach */

static void vhost_blk_free_reqs(struct vhost_blk_vq *bq)
{
	unsigned int i;

	for (i = 0; i < VHOST_BLK_BOUNCE_PAGES; i++) {
		if (bq->bounce[i])
			__free_page(bq->bounce[i]);
		bq->bounce[i] = NULL;
	}
	kvfree(bq->reqs);
	kvfree(bq->free);
	kvfree(bq->used);
	kvfree(bq->logs);
	bq->reqs = NULL;
	bq->free = NULL;
	bq->used = NULL;
	bq->logs = NULL;
	bq->nreqs = bq->nfree = bq->nused = 0;
}

/* How a drain waits for the requests in flight. */
enum vhost_blk_wait {
	VHOST_BLK_WAIT_INTR,	/* an ioctl: any signal interrupts it */
	VHOST_BLK_WAIT_KILL,	/* close(): only a fatal signal does */
	VHOST_BLK_WAIT_EXIT,	/* close() by an exiting task: 2 s in all */
	VHOST_BLK_WAIT_IDLE,	/* the release thread (no signals) */
};

/* How long the exit of the owner waits for I/O before handing it off. */
#define VHOST_BLK_EXIT_WAIT (2 * HZ)

/*
 * Wait until no request is in flight on @bq; -ERESTARTSYS if interrupted,
 * -ETIMEDOUT when an exiting task's wait ran out.
 */
static int vhost_blk_drain(struct vhost_blk_vq *bq, enum vhost_blk_wait how)
{
	/* pairs with the wake_up_all() after the last atomic_dec of inflight */
	switch (how) {
	case VHOST_BLK_WAIT_INTR:
		return wait_event_interruptible(bq->drain_wq,
						!atomic_read(&bq->inflight));
	case VHOST_BLK_WAIT_KILL:
		return wait_event_killable(bq->drain_wq,
					   !atomic_read(&bq->inflight));
	case VHOST_BLK_WAIT_EXIT: {
		/* signals are no longer delivered: bound the wait instead */
		long left = (long)(bq->blk->exit_deadline - jiffies);

		if (!atomic_read(&bq->inflight))
			return 0;
		if (left <= 0)
			return -ETIMEDOUT;
		return wait_event_idle_timeout(bq->drain_wq,
					       !atomic_read(&bq->inflight),
					       left) ? 0 : -ETIMEDOUT;
	}
	default:
		wait_event_idle(bq->drain_wq, !atomic_read(&bq->inflight));
		return 0;
	}
}

/*
 * dev mutex held.  Stop taking requests, wait for those in flight, drop the
 * image.  Interrupted (-ERESTARTSYS), the queue stays stopped with the
 * image held; the next detach (SET_BACKEND, RESET_OWNER, close) finishes it.
 */
static int vhost_blk_detach(struct vhost_blk_vq *bq, enum vhost_blk_wait how)
{
	struct vhost_virtqueue *vq = &bq->vq;
	struct file *file;
	int ret;

	mutex_lock(&vq->mutex);
	file = bq->file;
	vhost_vq_set_backend(vq, NULL);
	mutex_unlock(&vq->mutex);
	if (!file)
		return 0;
	/* The thread keeps reaping completions while we wait. */
	ret = vhost_blk_drain(bq, how);
	if (ret)
		return ret;
	/* ... and no completion callback still holds a pointer to us. */
	synchronize_rcu();
	mutex_lock(&vq->mutex);
	vhost_blk_reap(bq);
	vhost_blk_flush_used(bq);
	bq->file = NULL;
	bq->bdev = NULL;
	bq->starved = false;
	clear_bit(VHOST_BLK_KICKED, &bq->flags);
	vhost_blk_free_reqs(bq);
	mutex_unlock(&vq->mutex);
	fput(file);
	return 0;
}

static void vhost_blk_stop_thread(struct vhost_blk_vq *bq)
{
	struct task_struct *t = bq->thread;

	if (!t)
		return;
	WRITE_ONCE(bq->thread, NULL);
	kthread_stop(t);
	put_task_struct(t);
}

/* dev mutex held, owner checked. */
static long vhost_blk_attach(struct vhost_blk *b, struct vhost_blk_vq *bq, int fd)
{
	struct vhost_virtqueue *vq = &bq->vq;
	struct file *file;
	struct inode *inode;
	struct task_struct *t;
	unsigned int i, num;
	long ret;

	file = fget(fd);
	if (!file)
		return -EBADF;
	inode = file_inode(file);
	ret = -EINVAL;
	if (!(file->f_mode & FMODE_READ) || !file->f_op->read_iter ||
	    (!S_ISREG(inode->i_mode) && !S_ISBLK(inode->i_mode)))
		goto err_file;
	if ((file->f_mode & FMODE_WRITE) && !file->f_op->write_iter)
		goto err_file;
	/* O_APPEND would send every write to the end of the image. */
	if (file->f_flags & O_APPEND)
		goto err_file;

	if (!bq->thread) {
		t = kthread_create(vhost_blk_thread, bq, "vblk-%d-q%u",
				   current->pid, bq->index);
		if (IS_ERR(t)) {
			ret = PTR_ERR(t);
			goto err_file;
		}
		/*
		 * A kthread starts in kthreadd's (the root) cgroups.  Put it in
		 * the owner's, as the vhost core did with its own worker at
		 * VHOST_SET_OWNER (vhost_attach_cgroups): the VM's cpu, cpuset,
		 * io and pids limits then cover its disk work.  The worker is
		 * the source, so every thread of the device shares its cgroups.
		 */
		ret = cgroup_attach_task_all(b->dev.worker, t);
		if (ret) {
			kthread_stop(t);
			goto err_file;
		}
		get_task_struct(t);
		WRITE_ONCE(bq->thread, t);
		wake_up_process(t);
	}

	mutex_lock(&vq->mutex);
	ret = -EFAULT;
	if (!vhost_vq_access_ok(vq))
		goto err_vq;
	num = vq->num;
	ret = -EINVAL;
	if (!num)
		goto err_vq;
	ret = -ENOMEM;
	bq->reqs = kvcalloc(num, sizeof(*bq->reqs), GFP_KERNEL_ACCOUNT);
	bq->free = kvcalloc(num, sizeof(*bq->free), GFP_KERNEL_ACCOUNT);
	bq->used = kvcalloc(num, sizeof(*bq->used), GFP_KERNEL_ACCOUNT);
	bq->logs = kvcalloc(num * VHOST_BLK_LOG_SLOTS, sizeof(*bq->logs),
			    GFP_KERNEL_ACCOUNT);
	if (!bq->reqs || !bq->free || !bq->used || !bq->logs)
		goto err_reqs;
	for (i = 0; i < num; i++) {
		bq->reqs[i].bq = bq;
		bq->free[i] = num - 1 - i;
	}
	bq->nreqs = bq->nfree = num;
	bq->nused = 0;

	bq->file = file;
	bq->writable = file->f_mode & FMODE_WRITE;
	if (S_ISBLK(inode->i_mode)) {
		bq->bdev = I_BDEV(file->f_mapping->host);
		bq->nr_sectors = bdev_nr_bytes(bq->bdev) >> VHOST_BLK_SECTOR_SHIFT;
	} else {
		bq->bdev = NULL;
		bq->nr_sectors = i_size_read(inode) >> VHOST_BLK_SECTOR_SHIFT;
	}
	/*
	 * O_DIRECT: what the block layer needs of every buffer (address and
	 * length), as blkdev_dio_unaligned / iomap check it; data that is
	 * not so aligned goes through the bounce pages.
	 */
	bq->dio_mask = 0;
	if (file->f_flags & O_DIRECT) {
		struct block_device *dbdev = bq->bdev ?: inode->i_sb->s_bdev;

		bq->dio_mask = (1u << VHOST_BLK_SECTOR_SHIFT) - 1;
		if (dbdev)
			bq->dio_mask = max(bdev_logical_block_size(dbdev) - 1,
					   bdev_dma_alignment(dbdev));
		for (i = 0; i < VHOST_BLK_BOUNCE_PAGES; i++) {
			bq->bounce[i] = alloc_page(GFP_KERNEL_ACCOUNT);
			if (!bq->bounce[i]) {
				bq->file = NULL;
				goto err_reqs;
			}
		}
	}
	vhost_vq_set_backend(vq, file);
	ret = vhost_vq_init_access(vq);
	if (ret) {
		vhost_vq_set_backend(vq, NULL);
		bq->file = NULL;
		goto err_reqs;
	}
	mutex_unlock(&vq->mutex);
	/* Requests may already wait in the ring. */
	set_bit(VHOST_BLK_KICKED, &bq->flags);
	wake_up_process(bq->thread);
	return 0;

err_reqs:
	vhost_blk_free_reqs(bq);
err_vq:
	mutex_unlock(&vq->mutex);
err_file:
	fput(file);
	return ret;
}

static long vhost_blk_set_backend(struct vhost_blk *b, void __user *argp)
{
	struct vhost_vring_file backend;
	struct vhost_blk_vq *bq;
	long ret;

	if (copy_from_user(&backend, argp, sizeof(backend)))
		return -EFAULT;
	mutex_lock(&b->dev.mutex);
	ret = vhost_dev_check_owner(&b->dev);
	if (ret)
		goto out;
	ret = -ENOBUFS;
	if (backend.index >= VHOST_BLK_MAX_QUEUES)
		goto out;
	bq = &b->vqs[array_index_nospec(backend.index, VHOST_BLK_MAX_QUEUES)];
	ret = vhost_blk_detach(bq, VHOST_BLK_WAIT_INTR);
	if (!ret && backend.fd != -1)
		ret = vhost_blk_attach(b, bq, backend.fd);
out:
	mutex_unlock(&b->dev.mutex);
	return ret;
}

/*
 * dev mutex held: every queue detached and its thread gone.  Interrupted
 * (-ERESTARTSYS), the queues detached so far stay detached and nothing else
 * changed.
 */
static int vhost_blk_stop_all(struct vhost_blk *b, enum vhost_blk_wait how)
{
	int i, ret;

	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		ret = vhost_blk_detach(&b->vqs[i], how);
		if (ret)
			return ret;
	}
	vhost_dev_stop(&b->dev);
	vhost_dev_flush(&b->dev);	/* no kick handler still running */
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++)
		vhost_blk_stop_thread(&b->vqs[i]);
	return 0;
}

/*
 * SET_MEM_TABLE: a request in flight holds addresses translated through the
 * current table (its data buffers and its status byte), so no queue takes
 * new requests and those in flight complete before the table changes, as
 * if they held a reference to it.  The wait is interruptible.
 */
static long vhost_blk_set_mem_table(struct vhost_blk *b, unsigned int ioctl,
				    void __user *argp)
{
	long ret;
	int i;

	mutex_lock(&b->dev.mutex);
	ret = vhost_dev_check_owner(&b->dev);
	if (ret)
		goto out;
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		mutex_lock(&b->vqs[i].vq.mutex);
		b->vqs[i].paused = true;
		mutex_unlock(&b->vqs[i].vq.mutex);
	}
	for (i = 0; i < VHOST_BLK_MAX_QUEUES && !ret; i++)
		ret = vhost_blk_drain(&b->vqs[i], VHOST_BLK_WAIT_INTR);
	if (!ret)
		ret = vhost_dev_ioctl(&b->dev, ioctl, argp);
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		struct vhost_blk_vq *bq = &b->vqs[i];

		mutex_lock(&bq->vq.mutex);
		bq->paused = false;
		mutex_unlock(&bq->vq.mutex);
		if (bq->thread) {
			/* requests may have arrived meanwhile */
			set_bit(VHOST_BLK_KICKED, &bq->flags);
			wake_up_process(bq->thread);
		}
	}
out:
	mutex_unlock(&b->dev.mutex);
	return ret;
}

/*
 * SET_VRING_ADDR while an image is attached: the ring may not move under
 * the queue thread (EBUSY).  Only the dirty-log flag and address may change
 * with the same ring addresses, as QEMU does to start and stop logging.
 */
static long vhost_blk_set_vring_addr(struct vhost_blk *b, unsigned int ioctl,
				     void __user *argp)
{
	struct vhost_vring_addr a;
	struct vhost_virtqueue *vq;
	long ret;

	if (copy_from_user(&a, argp, sizeof(a)))
		return -EFAULT;
	mutex_lock(&b->dev.mutex);
	ret = vhost_dev_check_owner(&b->dev);
	if (ret)
		goto out;
	ret = -ENOBUFS;
	if (a.index >= VHOST_BLK_MAX_QUEUES)
		goto out;
	vq = &b->vqs[array_index_nospec(a.index, VHOST_BLK_MAX_QUEUES)].vq;
	mutex_lock(&vq->mutex);
	ret = 0;
	if (b->vqs[array_index_nospec(a.index, VHOST_BLK_MAX_QUEUES)].file &&
	    (a.desc_user_addr != (u64)(uintptr_t)vq->desc ||
	     a.avail_user_addr != (u64)(uintptr_t)vq->avail ||
	     a.used_user_addr != (u64)(uintptr_t)vq->used))
		ret = -EBUSY;
	mutex_unlock(&vq->mutex);
	if (!ret)
		ret = vhost_vring_ioctl(&b->dev, ioctl, argp);
out:
	mutex_unlock(&b->dev.mutex);
	return ret;
}

/* ------------------------------------------------------------------ ioctls */

/*
 * dev mutex held, @bq attached.  Switch VHOST_F_LOG_ALL with no request in
 * flight, so that each request is logged (or not) from the moment it is
 * taken from the ring to its completion: a request taken before logging
 * starts would otherwise write guest memory unmarked after the VMM began
 * copying it, and one taken while logging was on would mark bits in a log
 * the VMM frees once LOG_ALL is off.  As for SET_MEM_TABLE, the queue takes
 * no new request, the thread keeps reaping (a request counts as in flight
 * until it is finished and logged, vhost_blk_reap/relock), and the switch
 * happens once everything completed.  The wait is interruptible; then the
 * queue runs on under the old mode.
 */
static int vhost_blk_switch_log(struct vhost_blk_vq *bq, u64 features)
{
	struct vhost_virtqueue *vq = &bq->vq;
	int ret;

	mutex_lock(&vq->mutex);
	bq->paused = true;
	mutex_unlock(&vq->mutex);
	ret = vhost_blk_drain(bq, VHOST_BLK_WAIT_INTR);
	mutex_lock(&vq->mutex);
	if (!ret) {
		vhost_blk_reap(bq);
		vq->acked_features = features;
	}
	bq->paused = false;
	mutex_unlock(&vq->mutex);
	/* Requests may have arrived meanwhile. */
	set_bit(VHOST_BLK_KICKED, &bq->flags);
	wake_up_process(bq->thread);
	return ret;
}

static long vhost_blk_set_features(struct vhost_blk *b, u64 features)
{
	const u64 log_all = 1ULL << VHOST_F_LOG_ALL;
	int i, ret;

	if (features & ~(u64)VHOST_BLK_FEATURES)
		return -EOPNOTSUPP;
	mutex_lock(&b->dev.mutex);
	if (vhost_dev_check_owner(&b->dev)) {
		mutex_unlock(&b->dev.mutex);
		return -EPERM;
	}
	/* As vhost-net: the log must cover the memory table (-EFAULT). */
	if ((features & log_all) && !vhost_log_access_ok(&b->dev)) {
		mutex_unlock(&b->dev.mutex);
		return -EFAULT;
	}
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		struct vhost_blk_vq *bq = &b->vqs[i];

		/* bq->file changes only under the dev mutex, which we hold. */
		if (bq->file && ((bq->vq.acked_features ^ features) & log_all)) {
			ret = vhost_blk_switch_log(bq, features);
			if (ret) {
				mutex_unlock(&b->dev.mutex);
				return ret;
			}
			continue;
		}
		mutex_lock(&bq->vq.mutex);
		bq->vq.acked_features = features;
		mutex_unlock(&bq->vq.mutex);
	}
	if (!b->wc_explicit)
		WRITE_ONCE(b->writeback,
			   !!(features & (1ULL << VIRTIO_BLK_F_FLUSH)));
	mutex_unlock(&b->dev.mutex);
	return 0;
}

static long vhost_blk_reset_owner(struct vhost_blk *b)
{
	struct vhost_iotlb *umem;
	long ret;

	mutex_lock(&b->dev.mutex);
	ret = vhost_dev_check_owner(&b->dev);
	if (ret)
		goto out;
	umem = vhost_dev_reset_owner_prepare();
	if (!umem) {
		ret = -ENOMEM;
		goto out;
	}
	ret = vhost_blk_stop_all(b, VHOST_BLK_WAIT_INTR);
	if (ret) {
		vhost_iotlb_free(umem);
		goto out;
	}
	vhost_dev_reset_owner(&b->dev, umem);
	b->wc_explicit = false;
	b->writeback = false;
out:
	mutex_unlock(&b->dev.mutex);
	return ret;
}

static long vhost_blk_ioctl(struct file *f, unsigned int ioctl,
			    unsigned long arg)
{
	struct vhost_blk *b = f->private_data;
	void __user *argp = (void __user *)arg;
	u64 __user *featurep = argp;
	struct vhost_blk_serial serial;
	u64 features;
	int wc;
	long ret;

	switch (ioctl) {
	case VHOST_GET_FEATURES:
		features = VHOST_BLK_FEATURES;
		return copy_to_user(featurep, &features, sizeof(features)) ?
		       -EFAULT : 0;
	case VHOST_SET_FEATURES:
		if (copy_from_user(&features, featurep, sizeof(features)))
			return -EFAULT;
		return vhost_blk_set_features(b, features);
	case VHOST_RESET_OWNER:
		return vhost_blk_reset_owner(b);
	case VHOST_BLK_SET_BACKEND:
		return vhost_blk_set_backend(b, argp);
	case VHOST_BLK_SET_WRITE_CACHE:
		if (get_user(wc, (int __user *)argp))
			return -EFAULT;
		if (wc != 0 && wc != 1)
			return -EINVAL;
		mutex_lock(&b->dev.mutex);
		ret = vhost_dev_check_owner(&b->dev);
		if (!ret) {
			b->wc_explicit = true;
			WRITE_ONCE(b->writeback, wc);
		}
		mutex_unlock(&b->dev.mutex);
		return ret;
	case VHOST_BLK_SET_SERIAL:
		if (copy_from_user(&serial, argp, sizeof(serial)))
			return -EFAULT;
		mutex_lock(&b->dev.mutex);
		ret = vhost_dev_check_owner(&b->dev);
		if (!ret) {
			int i;

			memcpy(b->serial, serial.serial, sizeof(b->serial));
			/* each queue thread reads its copy under its vq mutex */
			for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
				mutex_lock(&b->vqs[i].vq.mutex);
				memcpy(b->vqs[i].serial, b->serial,
				       sizeof(b->serial));
				mutex_unlock(&b->vqs[i].vq.mutex);
			}
		}
		mutex_unlock(&b->dev.mutex);
		return ret;
	case VHOST_SET_MEM_TABLE:
		return vhost_blk_set_mem_table(b, ioctl, argp);
	case VHOST_SET_VRING_ADDR:
		return vhost_blk_set_vring_addr(b, ioctl, argp);
	default:
		mutex_lock(&b->dev.mutex);
		ret = vhost_dev_ioctl(&b->dev, ioctl, argp);
		if (ret == -ENOIOCTLCMD)
			ret = vhost_vring_ioctl(&b->dev, ioctl, argp);
		mutex_unlock(&b->dev.mutex);
		return ret;
	}
}

/* ------------------------------------------------------------- open/close */

static int vhost_blk_open(struct inode *inode, struct file *f)
{
	struct vhost_blk *b;
	int i;

	b = kvzalloc(sizeof(*b), GFP_KERNEL_ACCOUNT);
	if (!b)
		return -ENOMEM;
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		struct vhost_blk_vq *bq = &b->vqs[i];

		bq->blk = b;
		bq->index = i;
		init_llist_head(&bq->done);
		init_waitqueue_head(&bq->drain_wq);
		atomic_set(&bq->inflight, 0);
		bq->vq.handle_kick = vhost_blk_handle_kick;
		b->vq_ptrs[i] = &bq->vq;
	}
	vhost_dev_init(&b->dev, b->vq_ptrs, VHOST_BLK_MAX_QUEUES, UIO_MAXIOV,
		       VHOST_BLK_WEIGHT, VHOST_BLK_BYTE_WEIGHT, true, NULL);
	f->private_data = b;
	return 0;
}

/* Detach everything and free the device; 0, or -ERESTARTSYS (nothing freed). */
static int vhost_blk_teardown(struct vhost_blk *b, enum vhost_blk_wait how)
{
	int ret;

	mutex_lock(&b->dev.mutex);
	ret = vhost_blk_stop_all(b, how);
	mutex_unlock(&b->dev.mutex);
	if (ret)
		return ret;
	vhost_dev_cleanup(&b->dev);
	kvfree(b);
	return 0;
}

static int vhost_blk_release_thread(void *data)
{
	vhost_blk_teardown(data, VHOST_BLK_WAIT_IDLE);
	module_put_and_kthread_exit(0);
}

/*
 * close(): a live process waits (killably) for the requests in flight, so
 * that the image and the module are free when close() returns.  An exiting
 * process (a killed VMM: signals no longer reach it) waits at most
 * VHOST_BLK_EXIT_WAIT in all, a killed one not at all; then a kernel
 * thread ("vblk-release", holding a module reference) finishes the
 * teardown, and the VMM's exit is not held up by a slow or stuck backing.
 */
static int vhost_blk_release(struct inode *inode, struct file *f)
{
	struct vhost_blk *b = f->private_data;
	struct task_struct *t;

	b->exit_deadline = jiffies + VHOST_BLK_EXIT_WAIT;
	if (!fatal_signal_pending(current) &&
	    !vhost_blk_teardown(b, current->flags & PF_EXITING ?
				VHOST_BLK_WAIT_EXIT : VHOST_BLK_WAIT_KILL))
		return 0;
	__module_get(THIS_MODULE);
	t = kthread_run(vhost_blk_release_thread, b, "vblk-release");
	if (IS_ERR(t)) {
		module_put(THIS_MODULE);
		vhost_blk_teardown(b, VHOST_BLK_WAIT_IDLE);
	}
	return 0;
}

static const struct file_operations vhost_blk_fops = {
	.owner		= THIS_MODULE,
	.open		= vhost_blk_open,
	.release	= vhost_blk_release,
	.unlocked_ioctl	= vhost_blk_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
	.llseek		= noop_llseek,
};

/*
 * A static minor, so that kmod's static-nodes creates /dev/vhost-blk at boot
 * and its first open loads the module (MODULE_ALIAS_MISCDEV, devname:).
 */
static struct miscdevice vhost_blk_misc = {
	.minor	= VHOST_BLK_MINOR,
	.name	= "vhost-blk",
	.fops	= &vhost_blk_fops,
};

static int __init vhost_blk_init(void)
{
	int ret = misc_register(&vhost_blk_misc);

	if (ret == -EBUSY) {
		/* another local driver took the minor: no autoload then */
		pr_warn("vhost-blk: misc minor %d is taken, using a dynamic one\n",
			VHOST_BLK_MINOR);
		vhost_blk_misc.minor = MISC_DYNAMIC_MINOR;
		ret = misc_register(&vhost_blk_misc);
	}
	return ret;
}

static void __exit vhost_blk_exit(void)
{
	misc_deregister(&vhost_blk_misc);
}

module_init(vhost_blk_init);
module_exit(vhost_blk_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("vhost_blk: virtio-blk dataplane in the kernel");
MODULE_VERSION("1");
MODULE_ALIAS_MISCDEV(VHOST_BLK_MINOR);
MODULE_ALIAS("devname:vhost-blk");
