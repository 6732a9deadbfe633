/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * file-posix: the driver of raw image files and block devices.  Opening
 * (size, block sizes, O_DIRECT alignment, the aio mode the kernel has),
 * request routing to its engines (io_uring, linux-aio, the thread pool;
 * see include/block/block_int.h), bouncing misaligned O_DIRECT buffers,
 * and the synchronous request code the thread pool runs.
 */
#include "qemu/osdep.h"
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include "qemu/error-report.h"
#include "qemu/qmp-args.h"
#include "block/file.h"
#include "file-posix.h"

#define RAW_ZERO_BUF_SIZE (1024 * 1024)

static int raw_do_request(BlockAIOCB *acb);

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
    BDRVRawState *s = raw_state(blk);
    struct statx stx;
    void *buf;

    memset(&stx, 0, sizeof(stx));
    if (statx(s->io.fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
        (stx.stx_mask & STATX_DIOALIGN)) {
        if (stx.stx_dio_offset_align == 0) {
            g_set_error(errp, VB_ERROR, 0,
                        "O_DIRECT not supported by the filesystem of '%s'; "
                        "use cache=writeback", blk->filename);
            return false;
        }
        blk->bl.request_alignment = stx.stx_dio_offset_align;
        s->mem_align = MAX(stx.stx_dio_mem_align, 1);
        return true;
    }
    if (s->is_blockdev) {
        blk->bl.request_alignment = blk->bl.logical_block_size;
        s->mem_align = blk->bl.logical_block_size;
        return true;
    }
    /* Probe: the smallest read size that the kernel accepts. */
    blk->bl.request_alignment = 512;
    if (posix_memalign(&buf, 4096, 4096) == 0) {
        if (pread(s->io.fd, buf, 512, 0) < 0 && errno == EINVAL &&
            pread(s->io.fd, buf, 4096, 0) >= 0) {
            blk->bl.request_alignment = 4096;
        }
        free(buf);
    }
    s->mem_align = blk->bl.request_alignment;
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

/* Pick the aio mode the kernel supports, starting from the requested one. */
static BlockAioMode raw_choose_aio_mode(BlockAioMode want, bool direct)
{
    g_autoptr(GError) err = NULL;
    bool ok;

    if (want == BLOCK_AIO_IO_URING) {
#if CONFIG_LINUX_IO_URING
        ok = luring_probe(&err);
#else
        ok = false;
#endif
        if (ok) {
            return BLOCK_AIO_IO_URING;
        }
        want = direct && CONFIG_LINUX_AIO ? BLOCK_AIO_NATIVE
                                          : BLOCK_AIO_THREADS;
        warn_report("aio=io_uring unavailable (%s); falling back to aio=%s",
                    err ? err->message : "not compiled in",
                    blk_aio_mode_name(want));
        g_clear_error(&err);
    }
    if (want == BLOCK_AIO_NATIVE) {
#if CONFIG_LINUX_AIO
        ok = laio_probe(&err);
#else
        ok = false;
#endif
        if (ok) {
            return BLOCK_AIO_NATIVE;
        }
        warn_report("aio=native unavailable (%s); falling back to aio=threads",
                    err ? err->message : "not compiled in");
    }
    return BLOCK_AIO_THREADS;
}


/* ---- image locking ------------------------------------------------ */

/*
 * QEMU's layout (its file-posix.c), so that QEMU's processes and ours see
 * each other: a node holds a shared (F_RDLCK) OFD lock on byte
 * RAW_LOCK_PERM_BASE + bit for each BLK_PERM_* bit its users take, and on
 * byte RAW_LOCK_SHARED_BASE + bit for each one they do not share; a
 * process that wants a permission tests the other's "not shared" byte,
 * one that does not share it tests the other's permission byte.  The
 * bits are QEMU's: consistent read 0, write 1, write unchanged 2, resize
 * 3 (BLK_PERM_* has the same values).  OFD locks belong to the open file
 * description: they go with the fd when the node closes, and another
 * node on the same image in this process counts as another process, as
 * in QEMU.
 */
#define RAW_LOCK_PERM_BASE   100
#define RAW_LOCK_SHARED_BASE 200
#define RAW_LOCK_BITS        4

/* QEMU's names of the bits, which its messages use too. */
static const char *const raw_lock_names[RAW_LOCK_BITS] = {
    "consistent read", "write", "write unchanged", "resize",
};

/* Take (@lock) or drop our shared lock on byte @off.  0 or -errno. */
static int raw_lock_byte(int fd, off_t off, bool lock)
{
    struct flock fl = {
        .l_whence = SEEK_SET,
        .l_start = off,
        .l_len = 1,
        .l_type = lock ? F_RDLCK : F_UNLCK,
    };

    return fcntl(fd, F_OFD_SETLK, &fl) < 0 ? -errno : 0;
}

/* 1 if another open file of the image holds a lock on byte @off, 0 if
 * none does, or -errno. */
static int raw_lock_held(int fd, off_t off)
{
    struct flock fl = {
        .l_whence = SEEK_SET,
        .l_start = off,
        .l_len = 1,
        .l_type = F_WRLCK,      /* what would conflict with any lock */
    };

    if (fcntl(fd, F_OFD_GETLK, &fl) < 0) {
        return -errno;
    }
    return fl.l_type != F_UNLCK;
}

/*
 * Hold exactly the bytes of @perm and @unshared, recording what is held
 * as it goes (so that a failure leaves s->locked_* true).  Dropping a
 * lock cannot fail.  0 or -errno.
 */
static int raw_lock_set(BDRVRawState *s, uint64_t perm, uint64_t unshared)
{
    for (int i = 0; i < RAW_LOCK_BITS; i++) {
        struct {
            uint64_t want, *held;
            off_t off;
        } b[2] = {
            { perm, &s->locked_perm, RAW_LOCK_PERM_BASE + i },
            { unshared, &s->locked_unshared, RAW_LOCK_SHARED_BASE + i },
        };

        for (int j = 0; j < 2; j++) {
            uint64_t bit = 1ull << i;
            bool want = b[j].want & bit, held = *b[j].held & bit;
            int r;

            if (want == held) {
                continue;
            }
            r = raw_lock_byte(s->io.fd, b[j].off, want);
            if (r < 0) {
                return r;
            }
            *b[j].held ^= bit;
        }
    }
    return 0;
}

/*
 * Main thread: no other process may hold what conflicts with @perm and
 * @unshared, which we hold already.  False with @errp set as QEMU words
 * it, naming the image and saying what to do.
 */
static bool raw_lock_check(BlockBackend *blk, uint64_t perm,
                           uint64_t unshared, GError **errp)
{
    BDRVRawState *s = raw_state(blk);

    for (int i = 0; i < RAW_LOCK_BITS * 2; i++) {
        bool mine = i < RAW_LOCK_BITS;
        int bit = i % RAW_LOCK_BITS;
        int r;

        if (!((mine ? perm : unshared) & (1ull << bit))) {
            continue;
        }
        /* Ours against their "not shared" bytes, and the reverse. */
        r = raw_lock_held(s->io.fd, (mine ? RAW_LOCK_SHARED_BASE :
                                            RAW_LOCK_PERM_BASE) + bit);
        if (r < 0) {
            g_set_error(errp, VB_ERROR, 0, "cannot test the locks of '%s': "
                        "%s; open it with locking=off", blk->filename,
                        g_strerror(-r));
            return false;
        }
        if (r) {
            g_set_error(errp, VB_ERROR, 0, "Failed to get %s\"%s\" lock on "
                        "'%s': is another process (QEMU, qemu-img, "
                        "qemu-storage-daemon, another vhost-blkd) using the "
                        "image?  Stop it first; or, if sharing the image "
                        "with it is safe, open it with locking=off",
                        mine ? "" : "shared ", raw_lock_names[bit],
                        blk->filename);
            return false;
        }
    }
    return true;
}

/*
 * Main thread (bdrv_set_perm): our users now take @perm and share
 * @shared.  Locking applies while there are users and (locking=auto)
 * one of them does not share writes, i.e. a format over us; with
 * locking=on other processes may then read along and write what changes
 * nothing, as QEMU's default lets them, but not write or resize.  The
 * new bytes are taken before the test, so two processes racing for the
 * same image see each other (both fail rather than both succeed).
 */
static bool raw_set_perm(BlockBackend *blk, uint64_t perm, uint64_t shared,
                         GError **errp)
{
    BDRVRawState *s = raw_state(blk);
    uint64_t old_perm = s->locked_perm, old_unshared = s->locked_unshared;
    uint64_t want_perm = 0, want_unshared = 0;
    bool on = s->locking == BLOCK_FILE_LOCKING_ON ||
              (s->locking == BLOCK_FILE_LOCKING_AUTO &&
               !(shared & BLK_PERM_WRITE));
    int r;

    if (s->locking == BLOCK_FILE_LOCKING_OFF || s->io.fd < 0) {
        return true;
    }
    if (on && perm) {
        want_perm = perm & BLK_PERM_ALL;
        want_unshared = BLK_PERM_ALL &
            ~(shared & (BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE_UNCHANGED));
    }
    r = raw_lock_set(s, want_perm, want_unshared);
    if (r < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot lock '%s': %s; open it with "
                    "locking=off", blk->filename, g_strerror(-r));
    } else if (raw_lock_check(blk, want_perm & ~old_perm,
                              want_unshared & ~old_unshared, errp)) {
        return true;
    }
    /* Back to what we held; only taking a released byte again could
     * fail, and nobody takes exclusive locks on these bytes. */
    raw_lock_set(s, old_perm, old_unshared);
    return false;
}

/*
 * Main thread: whether the image's file system has OFD locks (NFS
 * without lockd, some FUSE file systems do not).  Without them
 * locking=on fails the open and auto turns itself off, as in QEMU.
 */
static bool raw_lock_probe(BlockBackend *blk, GError **errp)
{
    BDRVRawState *s = raw_state(blk);
    int r;

    if (s->locking == BLOCK_FILE_LOCKING_OFF) {
        return true;
    }
    r = raw_lock_held(s->io.fd, RAW_LOCK_PERM_BASE);
    if (r >= 0) {
        return true;
    }
    if (s->locking == BLOCK_FILE_LOCKING_ON) {
        g_set_error(errp, VB_ERROR, 0, "locking=on: '%s' cannot be locked "
                    "(%s): its file system has no OFD locks; use "
                    "locking=off", blk->filename, g_strerror(-r));
        return false;
    }
    s->locking = BLOCK_FILE_LOCKING_OFF;
    return true;
}

/* ---- reopening ------------------------------------------------------ */

/*
 * Main thread: a new open file of the image, read-write or read-only,
 * with the old one's other flags, dup2()ed over s->io.fd: the engines
 * read the fd per request, and a request in flight keeps the old open
 * file.  Our lock bytes belong to the old open file, where a test from
 * the new one would see them as another process's: they are dropped
 * there and taken again on the new one, then tested (someone may have
 * come in between).  The caller changes the permissions afterwards,
 * which takes and tests the write bytes (raw_set_perm()).
 */
static bool raw_reopen(BlockBackend *blk, bool writable, GError **errp)
{
    BDRVRawState *s = raw_state(blk);
    uint64_t perm = s->locked_perm, unshared = s->locked_unshared;
    const char *mode = writable ? "read-write" : "read-only";
    struct stat st, old_st;
    int fd, old;

    fd = open(blk->filename, O_CLOEXEC | O_NOCTTY |
              (s->direct ? O_DIRECT : 0) | (writable ? O_RDWR : O_RDONLY));
    if (fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot reopen '%s' %s: %s; check "
                    "its permissions", blk->filename, mode,
                    g_strerror(errno));
        return false;
    }
    if (fstat(fd, &st) < 0 || fstat(s->io.fd, &old_st) < 0 ||
        st.st_dev != old_st.st_dev || st.st_ino != old_st.st_ino) {
        close(fd);
        g_set_error(errp, VB_ERROR, 0, "cannot reopen '%s' %s: the name "
                    "is not the image that was opened any more (renamed "
                    "or replaced since)", blk->filename, mode);
        return false;
    }
    old = fcntl(s->io.fd, F_DUPFD_CLOEXEC, 0);
    if (old < 0) {
        close(fd);
        g_set_error(errp, VB_ERROR, 0, "cannot reopen '%s' %s: %s",
                    blk->filename, mode, g_strerror(errno));
        return false;
    }
    if (s->locking != BLOCK_FILE_LOCKING_OFF) {
        raw_lock_set(s, 0, 0);
    }
    if (dup2(fd, s->io.fd) < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot reopen '%s' %s: %s",
                    blk->filename, mode, g_strerror(errno));
        goto undo;
    }
    if (s->locking != BLOCK_FILE_LOCKING_OFF) {
        int r = raw_lock_set(s, perm, unshared);

        if (r < 0) {
            g_set_error(errp, VB_ERROR, 0, "cannot lock '%s': %s; open it "
                        "with locking=off", blk->filename, g_strerror(-r));
            goto undo;
        }
        if (!raw_lock_check(blk, perm, unshared, errp)) {
            goto undo;
        }
    }
    close(fd);
    close(old);
    return true;

undo:
    /* The old open file, with its locks, as before. */
    if (s->locking != BLOCK_FILE_LOCKING_OFF) {
        raw_lock_set(s, 0, 0);
    }
    dup2(old, s->io.fd);
    if (s->locking != BLOCK_FILE_LOCKING_OFF) {
        raw_lock_set(s, perm, unshared);
    }
    close(fd);
    close(old);
    return false;
}

/* ---- opening -------------------------------------------------------- */

/* Main thread (from blk_open()). */
static bool raw_open(BlockBackend *blk, const BlockOptions *opts,
                     GError **errp)
{
    BDRVRawState *s = g_new0(BDRVRawState, 1);
    const BlockFileOptions *fo = opts->driver_opts;
    const char *name = fo ? fo->filename : NULL;
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

    s->io.fd = -1;
    s->io.run = raw_do_request;
    s->mem_align = 1;
    blk->opaque = s;
    if (!name || !*name) {
        g_set_error(errp, VB_ERROR, 0,
                    "driver=file needs a filename (an image file or a block "
                    "device)");
        return false;
    }

    if (opts->cache_direct) {
        flags |= O_DIRECT;
    }
    blk->filename = g_strdup(name);
    s->io.fd = open(name, flags);
    if (s->io.fd < 0) {
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
    s->direct = opts->cache_direct;

    if (fstat(s->io.fd, &st) < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot stat '%s': %s", name,
                    g_strerror(errno));
        goto fail;
    }
    if (S_ISBLK(st.st_mode)) {
        uint64_t size;
        int lbs = 512;
        unsigned int pbs = 512;

        if (ioctl(s->io.fd, BLKGETSIZE64, &size) < 0) {
            g_set_error(errp, VB_ERROR, 0, "cannot get the size of '%s': %s",
                        name, g_strerror(errno));
            goto fail;
        }
        if (ioctl(s->io.fd, BLKSSZGET, &lbs) < 0 || lbs < 512) {
            lbs = 512;
        }
        if (ioctl(s->io.fd, BLKPBSZGET, &pbs) < 0 || pbs < (unsigned)lbs) {
            pbs = lbs;
        }
        s->is_blockdev = true;
        blk->size = size;
        blk->bl.logical_block_size = lbs;
        blk->bl.physical_block_size = pbs;
        blk->bl.can_discard = raw_blockdev_can_discard(&st);
    } else if (S_ISREG(st.st_mode)) {
        blk->size = st.st_size;
        blk->bl.logical_block_size = 512;
        blk->bl.physical_block_size =
            st.st_blksize >= 4096 && st.st_blksize <= 65536 &&
            !(st.st_blksize & (st.st_blksize - 1)) ? st.st_blksize : 512;
        blk->bl.can_discard = true;
    } else {
        raw_set_type_error(name, st.st_mode, errp);
        goto fail;
    }
    fl = fcntl(s->io.fd, F_GETFL);
    if (fl < 0 || fcntl(s->io.fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        g_set_error(errp, VB_ERROR, 0, "'%s': fcntl: %s", name,
                    g_strerror(errno));
        goto fail;
    }

    if (s->direct) {
        if (!raw_probe_alignment(blk, errp)) {
            goto fail;
        }
        if (!s->is_blockdev) {
            blk->bl.logical_block_size = MAX(blk->bl.logical_block_size,
                                          blk->bl.request_alignment);
            blk->bl.physical_block_size = MAX(blk->bl.physical_block_size,
                                           blk->bl.logical_block_size);
        }
    }
    /* Always: the slow path writes zeroes from a shared buffer. */
    blk->bl.can_write_zeroes = true;
    s->io.eof_reads_zeroes = !s->is_blockdev;
    s->aio = raw_choose_aio_mode(fo->aio, s->direct);
    s->locking = fo->locking;
    if (!raw_lock_probe(blk, errp)) {
        goto fail;
    }
    return true;

fail:
    close(s->io.fd);
    s->io.fd = -1;
    return false;
}

/* Main thread: grow the file (sparse) or check that the device is at
 * least @size bytes; blk->size is the caller's to update. */
static bool raw_truncate(BlockBackend *blk, uint64_t size, GError **errp)
{
    BDRVRawState *s = raw_state(blk);
    struct stat st;

    if (s->is_blockdev) {
        uint64_t dev_size;

        if (ioctl(s->io.fd, BLKGETSIZE64, &dev_size) < 0) {
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
    if (fstat(s->io.fd, &st) < 0) {
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
    if ((uint64_t)st.st_size < size && ftruncate(s->io.fd, size) < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot resize '%s' to %" PRIu64
                    " bytes: %s", blk->filename, size, g_strerror(errno));
        return false;
    }
    return true;
}

static void raw_close(BlockBackend *blk)
{
    BDRVRawState *s = raw_state(blk);

    if (!s) {
        return;
    }
    if (s->io.fd >= 0) {
        close(s->io.fd);
    }
    g_free(s);
    blk->opaque = NULL;
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
            n = preadv(raw_fd(blk), iov, cnt, pos);
        } else if (acb->flags & BDRV_REQ_FUA) {
            n = pwritev2(raw_fd(blk), iov, cnt, pos, RWF_DSYNC);
            if (n < 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
                /* No RWF_DSYNC (Linux < 4.7): write, then fdatasync. */
                n = pwritev(raw_fd(blk), iov, cnt, pos);
                if (n > 0 && fdatasync(raw_fd(blk)) < 0) {
                    return -errno;
                }
            }
        } else {
            n = pwritev(raw_fd(blk), iov, cnt, pos);
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
            if (raw_state(blk)->is_blockdev) {
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
    if (raw_state(blk)->is_blockdev) {
        uint64_t range[2] = { offset, bytes };

        return ioctl(raw_fd(blk), BLKDISCARD, range) < 0 ? -errno : 0;
    }
    if (fallocate(raw_fd(blk), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
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
        ssize_t n = pwrite(raw_fd(blk), zero, len, offset);

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
    if (raw_state(blk)->is_blockdev) {
        uint64_t range[2] = { offset, bytes };

        if (ioctl(raw_fd(blk), BLKZEROOUT, range) == 0) {
            return 0;
        }
        if (!raw_unsupported(errno)) {
            return -errno;
        }
        if (flags & BDRV_REQ_NO_FALLBACK) {
            return -ENOTSUP;
        }
        return raw_write_zero_buffer(blk, offset, bytes);
    }
    if (flags & BDRV_REQ_MAY_UNMAP) {
        if (fallocate(raw_fd(blk), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      offset, bytes) == 0) {
            return 0;
        }
        if (!raw_unsupported(errno)) {
            return -errno;
        }
    }
    if (fallocate(raw_fd(blk), FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                  offset, bytes) == 0) {
        return 0;
    }
    if (!raw_unsupported(errno)) {
        return -errno;
    }
    if (flags & BDRV_REQ_NO_FALLBACK) {
        return -ENOTSUP;
    }
    return raw_write_zero_buffer(blk, offset, bytes);
}

/*
 * Block status of a file: SEEK_DATA/SEEK_HOLE say where the holes are
 * (they read as zeroes); a device, or a file system without them, is
 * data throughout.  Worker thread (lseek may wait on the file system).
 */
static int raw_do_block_status(BlockAIOCB *acb)
{
    BlockBackend *blk = acb->blk;
    BlockStatus *st = acb->status;
    off_t off = acb->offset, data, hole;

    st->flags = BDRV_BLOCK_DATA | BDRV_BLOCK_ALLOCATED;
    st->pnum = acb->bytes;
    if (raw_state(blk)->is_blockdev) {
        return 0;
    }
    data = lseek(raw_fd(blk), off, SEEK_DATA);
    if (data < 0) {
        if (errno == ENXIO) {
            /* Past the last data: a hole up to the end of the file. */
            st->flags = BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED;
        }
        /* Other errors (no SEEK_DATA here): data, which is always true. */
        return 0;
    }
    if (data > off) {
        st->flags = BDRV_BLOCK_ZERO | BDRV_BLOCK_ALLOCATED;
        st->pnum = MIN((uint64_t)(data - off), acb->bytes);
        return 0;
    }
    hole = lseek(raw_fd(blk), off, SEEK_HOLE);
    if (hole > off) {
        st->pnum = MIN((uint64_t)(hole - off), acb->bytes);
    }
    return 0;
}

/* Worker thread (thread pool); also safe in the owner thread. */
static int raw_do_request(BlockAIOCB *acb)
{
    BlockBackend *blk = acb->blk;

    switch (acb->type) {
    case BLK_REQ_READ:
    case BLK_REQ_WRITE:
        return raw_do_rw(acb);
    case BLK_REQ_FLUSH:
        return fdatasync(raw_fd(blk)) < 0 ? -errno : 0;
    case BLK_REQ_DISCARD:
        return raw_do_discard(blk, acb->offset, acb->bytes);
    case BLK_REQ_WRITE_ZEROES:
        return raw_do_write_zeroes(blk, acb->offset, acb->bytes, acb->flags);
    case BLK_REQ_BLOCK_STATUS:
        return raw_do_block_status(acb);
    }
    return -EINVAL;
}

/* The engine that serves aio mode @mode (the thread pool's when that
 * engine is not compiled in).  Any thread. */
static const BlockEngineOps *raw_mode_ops(BlockAioMode mode)
{
    switch (mode) {
#if CONFIG_LINUX_IO_URING
    case BLOCK_AIO_IO_URING:
        return &luring_engine_ops;
#endif
#if CONFIG_LINUX_AIO
    case BLOCK_AIO_NATIVE:
        return &laio_engine_ops;
#endif
    default:
        return &thread_pool_engine_ops;
    }
}

/* The engine for a request of @type on @blk. */
static inline const BlockEngineOps *raw_route(BDRVRawState *s, int type)
{
    if (likely(type == BLK_REQ_READ || type == BLK_REQ_WRITE)) {
        return raw_mode_ops(s->aio);
    }
#if CONFIG_LINUX_IO_URING
    if (s->aio == BLOCK_AIO_IO_URING && type != BLK_REQ_BLOCK_STATUS &&
        (type == BLK_REQ_FLUSH || !s->is_blockdev)) {
        return &luring_engine_ops;  /* fsync and fallocate opcodes */
    }
#endif
    return &thread_pool_engine_ops;
}

/*
 * O_DIRECT needs aligned buffers.  Misaligned ones are copied through a
 * freshly allocated aligned buffer (slow path, counted in 'bounced').
 * Returns 0 or -ENOMEM.
 */
static int raw_bounce_if_needed(BDRVRawState *s, BlockAIOCB *acb,
                                BlockEngine *e)
{
    uint32_t align = s->mem_align;
    bool aligned = true;
    size_t copied = 0;
    void *buf;

    if (!s->direct || align <= 1) {
        return 0;
    }
    for (int i = 0; i < acb->niov; i++) {
        if (((uintptr_t)acb->iov[i].iov_base | acb->iov[i].iov_len) &
            (align - 1)) {
            aligned = false;
            break;
        }
    }
    if (aligned) {
        return 0;
    }
    if (posix_memalign(&buf, MAX(align, sizeof(void *)),
                       MAX(acb->bytes, 1))) {
        return -ENOMEM;
    }
    if (acb->type == BLK_REQ_WRITE) {
        for (int i = 0; i < acb->niov; i++) {
            memcpy((char *)buf + copied, acb->iov[i].iov_base,
                   acb->iov[i].iov_len);
            copied += acb->iov[i].iov_len;
        }
    }
    acb->bounce = buf;
    acb->bounce_iov.iov_base = buf;
    acb->bounce_iov.iov_len = acb->bytes;
    e->stats.bounced++;
    return 0;
}

/* Owner thread of @ctx: every request type, to the engine of its route. */
static void raw_submit(BlockBackend *blk, AioContext *ctx, BlockAIOCB *acb)
{
    BDRVRawState *s = raw_state(blk);
    BlockEngine *e = blk_engine_get_or_pool(ctx, raw_route(s, acb->type));
    int ret;

    if (unlikely(!e)) {
        ret = -EIO;
        goto fail;
    }
    if (acb->type == BLK_REQ_READ || acb->type == BLK_REQ_WRITE) {
        ret = raw_bounce_if_needed(s, acb, e);
        if (ret < 0) {
            goto fail;
        }
    }
    acb->target = &s->io;
    e->stats.requests++;
    e->ops->submit(e, acb);
    return;

fail:
    blk_complete_later(ctx, acb, ret);
}

/* Owner thread of @ctx: create the engine of the aio mode ahead of the
 * first request (the thread pool is created when a request needs it). */
static bool raw_attach_aio_context(BlockBackend *blk, AioContext *ctx,
                                   GError **errp)
{
    return blk_engine_get_or_pool(ctx,
                                  raw_mode_ops(raw_state(blk)->aio)) != NULL;
}

/* Any thread. */
static void raw_get_info(BlockBackend *blk, BlockDriverInfo *bdi)
{
    BDRVRawState *s = raw_state(blk);

    bdi->is_block_device = s->is_blockdev;
    bdi->has_aio_mode = true;
    bdi->aio_mode = s->aio;
}

/*
 * The QEMU syntaxes (blk_options_parse()): driver=file (an image file) or
 * host_device (a block device), filename=PATH[,aio=threads|native|io_uring];
 * cache.direct is a common key.  --export: file=PATH (either).  Main
 * thread.
 */
static bool raw_parse_options(BlockOptions *opts, QmpArgs *a,
                              BlockOptsParse *p, GError **errp)
{
    static const struct {
        const char *name;
        BlockAioMode mode;
    } aios[] = {
        { "threads", BLOCK_AIO_THREADS },
        { "native", BLOCK_AIO_NATIVE },
        { "io_uring", BLOCK_AIO_IO_URING },
    };
    BlockFileOptions *fo = blk_options_parse_keep(p,
                                                  g_new0(BlockFileOptions, 1));
    static const struct {
        const char *name;
        BlockFileLocking mode;
    } lockings[] = {
        { "auto", BLOCK_FILE_LOCKING_AUTO },
        { "on", BLOCK_FILE_LOCKING_ON },
        { "off", BLOCK_FILE_LOCKING_OFF },
    };
    const char *filename = NULL;
    int aio = -1, locking = -1;

    opts->driver_opts = fo;
    if (p->export_syntax) {
        /*
         * file=PATH; cache= is a common key, aio= the export's, which
         * the export hands on (it checked the value: every driver takes
         * it there, and a misspelt one is its error).
         */
        if (!qmp_args_str(a, "file", false, &filename, errp) ||
            !QMP_ARGS_ENUM_TABLE(a, "aio", aios, name, false, &aio, errp)) {
            return false;
        }
        if (!filename || !*filename) {
            g_set_error(errp, VB_ERROR, 0, "file=PATH is missing (or name "
                        "another driver's image: see vhost-blkd --help)");
            return false;
        }
        p->image = filename;
    } else if (!qmp_args_str(a, "filename", true, &filename, errp) ||
               !QMP_ARGS_ENUM_TABLE(a, "aio", aios, name, false, &aio,
                                    errp)) {
        return false;
    }
    /* locking=auto|on|off, QEMU's key; the --export syntax's too. */
    if (!QMP_ARGS_ENUM_TABLE(a, "locking", lockings, name, false, &locking,
                             errp)) {
        return false;
    }
    fo->locking = locking >= 0 ? lockings[locking].mode :
                                 BLOCK_FILE_LOCKING_AUTO;
    fo->filename = filename;
    /* Without aio=, io_uring (raw_open() falls back if it cannot). */
    fo->aio = aio >= 0 ? aios[aio].mode : BLOCK_AIO_IO_URING;
    return true;
}

/* QEMU's names: file, or host_device for a block device.  Main thread. */
static void raw_node_names(BlockBackend *blk, const BlockOptions *opts,
                           const char *given, BlockNodeNames *out)
{
    const BlockFileOptions *fo = opts->driver_opts;

    out->driver = g_strdup(given ? given :
                           blk_is_block_device(blk) ? "host_device" : "file");
    out->filename = g_strdup(fo ? fo->filename : blk->filename);
    out->cache_direct = opts->cache_direct;
}

/* The image exists, and is a block device exactly when the node was
 * called host_device: QEMU's checks and words.  Main thread. */
static bool raw_check_options(const BlockOptions *opts, BlockOptsParse *p,
                              GError **errp)
{
    const BlockFileOptions *fo = opts->driver_opts;
    bool host_device = !strcmp(p->driver, "host_device");
    struct stat st;

    if (!fo || !fo->filename) {
        g_set_error(errp, VB_ERROR, 0, "driver=file needs a filename (an "
                    "image file or a block device)");
        return false;
    }
    if (p->export_syntax) {
        /* Files and block devices alike, under vhost-blkd's words. */
        if (stat(fo->filename, &st) < 0) {
            g_set_error(errp, VB_ERROR, 0, "file=%s: %s", fo->filename,
                        g_strerror(errno));
            return false;
        }
        return true;
    }
    if (stat(fo->filename, &st) < 0) {
        g_set_error(errp, VB_ERROR, 0, "Could not open '%s': %s",
                    fo->filename, g_strerror(errno));
        return false;
    }
    if (!host_device && S_ISBLK(st.st_mode)) {
        g_set_error(errp, VB_ERROR, 0, "'%s' is a block device: use "
                    "driver=host_device", fo->filename);
        return false;
    }
    if (host_device && !S_ISBLK(st.st_mode)) {
        g_set_error(errp, VB_ERROR, 0, "'%s' is not a block device: use "
                    "driver=file", fo->filename);
        return false;
    }
    return true;
}

/* ---- blockdev-create ------------------------------------------------ */

/* QEMU's PreallocMode, of which the file driver makes all but metadata. */
typedef enum RawPrealloc {
    RAW_PREALLOC_OFF, RAW_PREALLOC_METADATA, RAW_PREALLOC_FALLOC,
    RAW_PREALLOC_FULL,
} RawPrealloc;

typedef struct RawCreateOptions {
    RawPrealloc prealloc;
    bool nocow;
} RawCreateOptions;

/* Main thread: QEMU's BlockdevCreateOptionsFile (size is the caller's). */
static bool raw_create_parse(BlockCreateOptions *o, QmpArgs *a,
                             GError **errp)
{
    static const char *const prealloc_names[] = {
        "off", "metadata", "falloc", "full", NULL,
    };
    RawCreateOptions *ro = g_new0(RawCreateOptions, 1);
    const char *filename = NULL;
    uint64_t hint = 0;
    int prealloc = RAW_PREALLOC_OFF;

    o->driver_opts = ro;
    if (!qmp_args_str(a, "filename", true, &filename, errp) ||
        !qmp_args_enum(a, "preallocation", prealloc_names, false, &prealloc,
                       errp) ||
        !qmp_args_bool(a, "nocow", &ro->nocow, errp) ||
        /* A hint for XFS's allocator, which QEMU ignores when it cannot
         * be set: this driver leaves it to the file system. */
        !qmp_args_size(a, "extent-size-hint", false, &hint, NULL, errp)) {
        return false;
    }
    if (!*filename) {
        g_set_error(errp, VB_ERROR, 0, "Parameter 'filename' must name the "
                    "file to create");
        return false;
    }
    if (prealloc == RAW_PREALLOC_METADATA) {
        g_set_error(errp, VB_ERROR, 0, "Unsupported preallocation mode: "
                    "metadata (a raw file has none: use off, falloc or "
                    "full)");
        return false;
    }
    ro->prealloc = prealloc;
    o->filename = blk_create_options_keep(o, filename);
    return true;
}

/* Worker thread: fill [0, @size) of the empty file @fd with zeroes. */
static int raw_create_fill(int fd, uint64_t size)
{
    const void *zero = raw_get_zero_buf();
    uint64_t done = 0;

    if (!zero) {
        return -ENOMEM;
    }
    while (done < size) {
        ssize_t n = pwrite(fd, zero, MIN(size - done, RAW_ZERO_BUF_SIZE),
                           done);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return n < 0 ? -errno : -ENOSPC;
        }
        done += n;
    }
    return 0;
}

/*
 * Worker thread: create or truncate the file, as QEMU's: first its lock
 * bytes for write and resize (and resize unshared), tested against other
 * processes' (QEMU, qemu-img, another vhost-blkd using it refuse the
 * create), then empty it and give it @size bytes as asked.  The locks go
 * with the file descriptor.
 */
static bool raw_create(const BlockCreateOptions *o, GError **errp)
{
    const RawCreateOptions *ro = o->driver_opts;
    static const off_t take[] = {
        RAW_LOCK_PERM_BASE + 1, RAW_LOCK_PERM_BASE + 3,
        RAW_LOCK_SHARED_BASE + 3,
    };
    static const off_t test[] = {
        RAW_LOCK_SHARED_BASE + 1, RAW_LOCK_SHARED_BASE + 3,
        RAW_LOCK_PERM_BASE + 3,
    };
    struct stat st;
    int fd, r = 0;
    const char *what = "create";

    fd = open(o->filename, O_RDWR | O_CREAT | O_CLOEXEC |
              (o->exclusive ? O_EXCL : 0), 0644);
    if (fd < 0) {
        int e = errno;

        g_set_error(errp, VB_ERROR, 0, "Could not create '%s': %s%s",
                    o->filename, g_strerror(e),
                    e == EEXIST ? " (to use an existing image, give "
                    "mode=existing)" : "");
        return false;
    }
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        g_set_error(errp, VB_ERROR, 0, "Could not create '%s': it is not a "
                    "regular file (driver=file creates image files only)",
                    o->filename);
        close(fd);
        return false;
    }
    if (ro && ro->nocow) {
        int flags;

        /* As QEMU: a hint, ignored where the file system has no such
         * flag (btrfs has). */
        if (ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
            flags |= FS_NOCOW_FL;
            ioctl(fd, FS_IOC_SETFLAGS, &flags);
        }
    }
    for (size_t i = 0; i < G_N_ELEMENTS(take); i++) {
        r = raw_lock_byte(fd, take[i], true);
        if (r == -EINVAL || r == -ENOLCK || r == -EOPNOTSUPP) {
            r = 0;              /* no OFD locks here: nothing to test */
            goto unlocked;
        }
        if (r < 0) {
            goto fail;
        }
    }
    for (size_t i = 0; i < G_N_ELEMENTS(test); i++) {
        r = raw_lock_held(fd, test[i]);
        if (r < 0) {
            goto fail;
        }
        if (r) {
            g_set_error(errp, VB_ERROR, 0, "Failed to get \"%s\" lock on "
                        "'%s': is another process (QEMU, qemu-img, "
                        "qemu-storage-daemon, another vhost-blkd) using the "
                        "image?  Stop it or create another file",
                        raw_lock_names[test[i] % 100], o->filename);
            close(fd);
            return false;
        }
    }
unlocked:
    what = "resize";
    if (ftruncate(fd, 0) < 0) {
        r = -errno;
        goto fail;
    }
    switch (ro ? ro->prealloc : RAW_PREALLOC_OFF) {
    case RAW_PREALLOC_FALLOC:
        r = -posix_fallocate(fd, 0, o->size);
        break;
    case RAW_PREALLOC_FULL:
        r = raw_create_fill(fd, o->size);
        break;
    default:
        r = ftruncate(fd, o->size) < 0 ? -errno : 0;
        break;
    }
    if (r == 0 && fsync(fd) < 0) {
        r = -errno;
    }
    if (r < 0) {
        goto fail;
    }
    close(fd);
    return true;

fail:
    g_set_error(errp, VB_ERROR, 0, "Could not %s '%s': %s", what,
                o->filename, g_strerror(-r));
    close(fd);
    if (o->exclusive) {
        unlink(o->filename);    /* ours: O_EXCL made it */
    }
    return false;
}

static const char *const raw_aliases[] = { "host_device", NULL };

static const BlockDriver bdrv_file = {
    .format_name = "file",
    .aliases = raw_aliases,
    .export_key = "file",
    .bdrv_parse_options = raw_parse_options,
    .bdrv_check_options = raw_check_options,
    .bdrv_node_names = raw_node_names,
    .bdrv_open = raw_open,
    .bdrv_close = raw_close,
    .bdrv_truncate = raw_truncate,
    .bdrv_get_info = raw_get_info,
    .bdrv_set_perm = raw_set_perm,
    .bdrv_attach_aio_context = raw_attach_aio_context,
    .bdrv_aio_preadv = raw_submit,
    .bdrv_aio_pwritev = raw_submit,
    .bdrv_aio_flush = raw_submit,
    .bdrv_aio_pdiscard = raw_submit,
    .bdrv_aio_pwrite_zeroes = raw_submit,
    .bdrv_aio_block_status = raw_submit,
    .bdrv_reopen = raw_reopen,
    .bdrv_create_parse = raw_create_parse,
    .bdrv_create = raw_create,
};
BLOCK_DRIVER_REGISTER(bdrv_file)
