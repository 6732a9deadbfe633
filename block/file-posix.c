/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * file-posix: opening a raw image file or block device (size, block sizes,
 * O_DIRECT alignment) and the synchronous request code the thread pool runs.
 */
#include "qemu/osdep.h"
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "block/block_int.h"

#define RAW_ZERO_BUF_SIZE (1024 * 1024)

static void *raw_zero_buf;

static gpointer raw_zero_buf_alloc(gpointer unused)
{
    void *buf;

    if (posix_memalign(&buf, 4096, RAW_ZERO_BUF_SIZE)) {
        return NULL;
    }
    memset(buf, 0, RAW_ZERO_BUF_SIZE);
    raw_zero_buf = buf;
    return buf;
}

/* A shared, read-only, 4096-aligned buffer of zeroes.  Any thread. */
static const void *raw_get_zero_buf(void)
{
    static GOnce once = G_ONCE_INIT;

    return g_once(&once, raw_zero_buf_alloc, NULL);
}

static bool raw_blockdev_can_discard(struct stat *st)
{
    g_autofree char *path = NULL;
    g_autofree char *contents = NULL;

    path = g_strdup_printf("/sys/dev/block/%u:%u/queue/discard_max_bytes",
                           major(st->st_rdev), minor(st->st_rdev));
    if (!g_file_get_contents(path, &contents, NULL, NULL)) {
        return true;            /* unknown: try, the kernel will tell */
    }
    return g_ascii_strtoull(contents, NULL, 10) > 0;
}

/* Find the O_DIRECT alignment of an open file or device. */
static bool raw_probe_alignment(BlockBackend *blk, GError **errp)
{
    struct statx stx;
    void *buf;

    memset(&stx, 0, sizeof(stx));
    if (statx(blk->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
        (stx.stx_mask & STATX_DIOALIGN)) {
        if (stx.stx_dio_offset_align == 0) {
            g_set_error(errp, VB_ERROR, 0,
                        "O_DIRECT not supported by the filesystem of '%s'; "
                        "use cache=writeback", blk->filename);
            return false;
        }
        blk->req_align = stx.stx_dio_offset_align;
        blk->mem_align = MAX(stx.stx_dio_mem_align, 1);
        return true;
    }
    if (blk->is_blockdev) {
        blk->req_align = blk->logical_block_size;
        blk->mem_align = blk->logical_block_size;
        return true;
    }
    /* Probe: the smallest read size that the kernel accepts. */
    blk->req_align = 512;
    if (posix_memalign(&buf, 4096, 4096) == 0) {
        if (pread(blk->fd, buf, 512, 0) < 0 && errno == EINVAL &&
            pread(blk->fd, buf, 4096, 0) >= 0) {
            blk->req_align = 4096;
        }
        free(buf);
    }
    blk->mem_align = blk->req_align;
    return true;
}

/* "'NAME' is a FIFO, not ...": a file type blk_open() does not serve. */
static void raw_set_type_error(const char *name, mode_t mode, GError **errp)
{
    g_set_error(errp, VB_ERROR, 0,
                "'%s' is %s, not a regular file or a block device: give "
                "an image file or a disk", name,
                S_ISFIFO(mode) ? "a FIFO" :
                S_ISCHR(mode) ? "a character device" :
                S_ISSOCK(mode) ? "a socket" :
                S_ISDIR(mode) ? "a directory" : "a special file");
}

/* Main thread (from blk_open()). */
bool raw_open(BlockBackend *blk, const BlockOptions *opts, GError **errp)
{
    const char *name = opts->filename;
    /*
     * O_NONBLOCK for the open itself: opening a FIFO read-only (or a tty,
     * a tape...) would otherwise wait in the main thread, which serves
     * every export and the monitor, for a writer that may never come.
     * Only regular files and block devices are kept, and they get it
     * cleared again below.
     */
    int flags = O_CLOEXEC | O_NONBLOCK | O_NOCTTY |
                (opts->readonly ? O_RDONLY : O_RDWR);
    struct stat st;
    int err, fl;

    if (opts->cache_direct) {
        flags |= O_DIRECT;
    }
    blk->filename = g_strdup(name);
    blk->fd = open(name, flags);
    if (blk->fd < 0) {
        err = errno;
        if ((err == EINVAL || err == EISDIR || err == ENXIO) &&
            stat(name, &st) == 0 && !S_ISREG(st.st_mode) &&
            !S_ISBLK(st.st_mode)) {
            /* What the open tripped over (O_DIRECT on a FIFO, O_RDWR on a
             * directory, a socket) is the file's type. */
            raw_set_type_error(name, st.st_mode, errp);
        } else if (err == EINVAL && opts->cache_direct) {
            g_set_error(errp, VB_ERROR, 0,
                        "O_DIRECT not supported by the filesystem of '%s'; "
                        "use cache=writeback", name);
        } else if ((err == EACCES || err == EROFS || err == EPERM) &&
                   !opts->readonly) {
            g_set_error(errp, VB_ERROR, 0,
                        "cannot open '%s' for writing: %s; check its "
                        "permissions or use readonly=on", name,
                        g_strerror(err));
        } else {
            g_set_error(errp, VB_ERROR, 0, "cannot open '%s': %s", name,
                        g_strerror(err));
        }
        return false;
    }
    blk->direct = opts->cache_direct;

    if (fstat(blk->fd, &st) < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot stat '%s': %s", name,
                    g_strerror(errno));
        goto fail;
    }
    if (S_ISBLK(st.st_mode)) {
        uint64_t size;
        int lbs = 512;
        unsigned int pbs = 512;

        if (ioctl(blk->fd, BLKGETSIZE64, &size) < 0) {
            g_set_error(errp, VB_ERROR, 0, "cannot get the size of '%s': %s",
                        name, g_strerror(errno));
            goto fail;
        }
        if (ioctl(blk->fd, BLKSSZGET, &lbs) < 0 || lbs < 512) {
            lbs = 512;
        }
        if (ioctl(blk->fd, BLKPBSZGET, &pbs) < 0 || pbs < (unsigned)lbs) {
            pbs = lbs;
        }
        blk->is_blockdev = true;
        blk->size = size;
        blk->logical_block_size = lbs;
        blk->physical_block_size = pbs;
        blk->can_discard = raw_blockdev_can_discard(&st);
    } else if (S_ISREG(st.st_mode)) {
        blk->size = st.st_size;
        blk->logical_block_size = 512;
        blk->physical_block_size =
            st.st_blksize >= 4096 && st.st_blksize <= 65536 &&
            !(st.st_blksize & (st.st_blksize - 1)) ? st.st_blksize : 512;
        blk->can_discard = true;
    } else {
        raw_set_type_error(name, st.st_mode, errp);
        goto fail;
    }
    fl = fcntl(blk->fd, F_GETFL);
    if (fl < 0 || fcntl(blk->fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        g_set_error(errp, VB_ERROR, 0, "'%s': fcntl: %s", name,
                    g_strerror(errno));
        goto fail;
    }

    if (blk->direct) {
        if (!raw_probe_alignment(blk, errp)) {
            goto fail;
        }
        if (!blk->is_blockdev) {
            blk->logical_block_size = MAX(blk->logical_block_size,
                                          blk->req_align);
            blk->physical_block_size = MAX(blk->physical_block_size,
                                           blk->logical_block_size);
        }
    }
    return true;

fail:
    close(blk->fd);
    blk->fd = -1;
    return false;
}

/* Main thread. */
/* Main thread: grow the file (sparse) or check that the device is at
 * least @size bytes; blk->size is the caller's to update. */
bool raw_truncate(BlockBackend *blk, uint64_t size, GError **errp)
{
    struct stat st;

    if (blk->is_blockdev) {
        uint64_t dev_size;

        if (ioctl(blk->fd, BLKGETSIZE64, &dev_size) < 0) {
            g_set_error(errp, VB_ERROR, 0, "cannot get the size of '%s': %s",
                        blk->filename, g_strerror(errno));
            return false;
        }
        if (size > dev_size) {
            g_set_error(errp, VB_ERROR, 0, "cannot grow device files: '%s' "
                        "has %" PRIu64 " bytes; grow the device first",
                        blk->filename, dev_size);
            return false;
        }
        return true;
    }
    if (fstat(blk->fd, &st) < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot stat '%s': %s", blk->filename,
                    g_strerror(errno));
        return false;
    }
    /* A file grown by someone else already is picked up as it is. */
    if ((uint64_t)st.st_size < size && blk->readonly) {
        g_set_error(errp, VB_ERROR, 0, "'%s' is open read-only and has %"
                    PRIu64 " bytes: grow the file first", blk->filename,
                    (uint64_t)st.st_size);
        return false;
    }
    if ((uint64_t)st.st_size < size && ftruncate(blk->fd, size) < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot resize '%s' to %" PRIu64
                    " bytes: %s", blk->filename, size, g_strerror(errno));
        return false;
    }
    return true;
}

void raw_close(BlockBackend *blk)
{
    if (blk->fd >= 0) {
        close(blk->fd);
        blk->fd = -1;
    }
}

/* Transfer acb's iovec from acb->done on; worker thread. */
static int raw_do_rw(BlockAIOCB *acb)
{
    BlockBackend *blk = acb->blk;
    struct iovec local[64];
    struct iovec *src, *iov = local;
    g_autofree struct iovec *heap = NULL;
    int niov, i;
    size_t skip = acb->done;
    int ret = 0;

    src = blk_acb_iov(acb, &niov);
    if (niov > (int)ARRAY_SIZE(local)) {
        iov = heap = g_new(struct iovec, niov);
    }
    /* Copy the part not transferred yet, so we can advance it. */
    for (i = 0; i < niov && skip >= src[i].iov_len; i++) {
        skip -= src[i].iov_len;
    }
    niov -= i;
    memcpy(iov, src + i, niov * sizeof(*iov));
    if (niov > 0) {
        iov[0].iov_base = (char *)iov[0].iov_base + skip;
        iov[0].iov_len -= skip;
    }

    while (acb->done < acb->bytes && niov > 0) {
        off_t pos = acb->offset + acb->done;
        int cnt = MIN(niov, IOV_MAX);
        ssize_t n;

        if (acb->type == BLK_REQ_READ) {
            n = preadv(blk->fd, iov, cnt, pos);
        } else if (acb->flags & BDRV_REQ_FUA) {
            n = pwritev2(blk->fd, iov, cnt, pos, RWF_DSYNC);
            if (n < 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
                /* No RWF_DSYNC (Linux < 4.7): write, then fdatasync. */
                n = pwritev(blk->fd, iov, cnt, pos);
                if (n > 0 && fdatasync(blk->fd) < 0) {
                    return -errno;
                }
            }
        } else {
            n = pwritev(blk->fd, iov, cnt, pos);
        }
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) {
                continue;
            }
            return -errno;
        }
        if (n == 0) {
            if (acb->type == BLK_REQ_WRITE) {
                return -ENOSPC;
            }
            if (blk->is_blockdev) {
                return -EIO;
            }
            /* The file shrank under us: what is missing reads as zeroes. */
            for (i = 0; i < niov; i++) {
                memset(iov[i].iov_base, 0, iov[i].iov_len);
            }
            acb->done = acb->bytes;
            break;
        }
        acb->done += n;
        while (niov > 0 && (size_t)n >= iov[0].iov_len) {
            n -= iov[0].iov_len;
            iov++;
            niov--;
        }
        if (niov > 0) {
            iov[0].iov_base = (char *)iov[0].iov_base + n;
            iov[0].iov_len -= n;
        }
    }
    return ret;
}

static int raw_do_discard(BlockBackend *blk, uint64_t offset, uint64_t bytes)
{
    if (blk->is_blockdev) {
        uint64_t range[2] = { offset, bytes };

        return ioctl(blk->fd, BLKDISCARD, range) < 0 ? -errno : 0;
    }
    if (fallocate(blk->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  offset, bytes) < 0) {
        return -errno;
    }
    return 0;
}

/* Slow path: write zeroes from the shared zero buffer. */
static int raw_write_zero_buffer(BlockBackend *blk, uint64_t offset,
                                 uint64_t bytes)
{
    const void *zero = raw_get_zero_buf();

    if (!zero) {
        return -ENOMEM;
    }
    while (bytes > 0) {
        size_t len = MIN(bytes, RAW_ZERO_BUF_SIZE);
        ssize_t n = pwrite(blk->fd, zero, len, offset);

        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) {
                continue;
            }
            return -errno;
        }
        if (n == 0) {
            return -ENOSPC;
        }
        offset += n;
        bytes -= n;
    }
    return 0;
}

static bool raw_unsupported(int err)
{
    return err == EOPNOTSUPP || err == ENOTTY || err == EINVAL ||
           err == ENOSYS;
}

static int raw_do_write_zeroes(BlockBackend *blk, uint64_t offset,
                               uint64_t bytes, int flags)
{
    if (blk->is_blockdev) {
        uint64_t range[2] = { offset, bytes };

        if (ioctl(blk->fd, BLKZEROOUT, range) == 0) {
            return 0;
        }
        if (!raw_unsupported(errno)) {
            return -errno;
        }
        return raw_write_zero_buffer(blk, offset, bytes);
    }
    if (flags & BDRV_REQ_MAY_UNMAP) {
        if (fallocate(blk->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      offset, bytes) == 0) {
            return 0;
        }
        if (!raw_unsupported(errno)) {
            return -errno;
        }
    }
    if (fallocate(blk->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                  offset, bytes) == 0) {
        return 0;
    }
    if (!raw_unsupported(errno)) {
        return -errno;
    }
    return raw_write_zero_buffer(blk, offset, bytes);
}

/* Worker thread (thread pool); also safe in the owner thread. */
int raw_do_request(BlockAIOCB *acb)
{
    BlockBackend *blk = acb->blk;

    switch (acb->type) {
    case BLK_REQ_READ:
    case BLK_REQ_WRITE:
        return raw_do_rw(acb);
    case BLK_REQ_FLUSH:
        return fdatasync(blk->fd) < 0 ? -errno : 0;
    case BLK_REQ_DISCARD:
        return raw_do_discard(blk, acb->offset, acb->bytes);
    case BLK_REQ_WRITE_ZEROES:
        return raw_do_write_zeroes(blk, acb->offset, acb->bytes, acb->flags);
    }
    return -EINVAL;
}
