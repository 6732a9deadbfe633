/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-blk-kcheck: functional and hostile checks of the vhost_blk kernel
 * module, run inside the test guest (tests/functional/test-kernel-vhost-blk.sh).
 *
 * Usage: vhost-blk-kcheck --vhost-dev /dev/vhost-blk --file IMAGE
 *                         [--buffered] [--block] [CASE...]
 *
 * Every case opens its own /dev/vhost-blk (through the vhost-user-frontend
 * library in kernel mode: this process's memory is the guest memory), runs,
 * and closes it.  Functional cases check GET_ID, FLUSH, DISCARD and
 * WRITE_ZEROES contents, read-only images, the write-cache ioctl,
 * unsupported types, any descriptor layout, and the DISCARD/WRITE_ZEROES
 * limits with bounded detach and owner exit.  Cases run only when named:
 * zero-coherence (--block --buffered: the page cache after WRITE_ZEROES
 * and DISCARD), writethrough-flush (--block: they flush the device), freeze
 * (IMAGE on a freezable file system: a write waits for the thaw).
 * Hostile cases build rings by hand and expect the
 * module to answer with an error status, or to give up on the queue with an
 * error-eventfd signal (vq_err) -- never to hang or crash; after each one a
 * fresh device must still serve a good request.  Prints "ok NAME" or
 * "not ok NAME: reason" per case and exits 0 when all passed.
 *
 * IMAGE is overwritten.  --block: IMAGE is a block device (DISCARD content
 * is then not checked: a device may ignore it).
 */
#include "qemu/osdep.h"
#include "hw/virtio/vhost-user-frontend.h"
#include "uapi/linux/vhost_blk.h"

#include <getopt.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>

#define KC_QSIZE 64
#define KC_HI 32                /* hand-built chains use descriptors >= this */
#define KC_WAIT_STEPS 600       /* x 100 ms: a hang detector, not a timing */
/*
 * What the bounded-work checks allow SET_BACKEND -1 and the exit of a killed
 * owner: generous against the seconds they take here, and far below the
 * minutes an unbounded request would hold them.
 */
#define KC_BOUND_S 20

static const char *kc_dev;
static const char *kc_file;
static bool kc_buffered;
static bool kc_block;
static uint64_t kc_cap;         /* bytes */

typedef struct Kc {
    VhostUserFrontend *fe;
    int img;
    int errfd;
    uint8_t *buf;               /* 1 MiB of guest memory */
    uint64_t buf_gpa;
} Kc;

enum {
    KC_GOT_USED = 1,
    KC_GOT_VQERR = 2,
};

static char kc_why[256];

#define KC_FAIL(...) do { \
        snprintf(kc_why, sizeof(kc_why), __VA_ARGS__); \
        return false; \
    } while (0)

static void kc_close(Kc *k)
{
    if (k->fe) {
        vhost_user_frontend_free(k->fe);
    }
    if (k->img >= 0) {
        close(k->img);
    }
    if (k->errfd >= 0) {
        close(k->errfd);
    }
    memset(k, 0, sizeof(*k));
    k->img = k->errfd = -1;
}

static bool kc_open(Kc *k, bool read_only, uint64_t features)
{
    VhostUserFrontendOptions fo = {
        .vhost_dev = kc_dev,
        .num_queues = 1,
        .queue_size = KC_QSIZE,
        .mem_size = 8 << 20,
        .features = features,
    };
    struct vhost_vring_file err = { .index = 0 };
    g_autoptr(GError) e = NULL;

    memset(k, 0, sizeof(*k));
    k->errfd = -1;
    k->img = open(kc_file, (read_only ? O_RDONLY : O_RDWR) |
                  (kc_buffered ? 0 : O_DIRECT));
    if (k->img < 0) {
        KC_FAIL("open %s: %s", kc_file, strerror(errno));
    }
    fo.kernel_backend_fd = k->img;
    k->fe = vhost_user_frontend_new(&fo, &e);
    if (!k->fe) {
        KC_FAIL("%s", e->message);
    }
    k->buf = vhost_user_frontend_mem_alloc(k->fe, 1 << 20, 4096, &e);
    if (!k->buf ||
        !vhost_user_frontend_host_to_gpa(k->fe, k->buf, 1 << 20, &k->buf_gpa)) {
        KC_FAIL("guest memory: %s", e ? e->message : "?");
    }
    k->errfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    err.fd = k->errfd;
    if (ioctl(vhost_user_frontend_kernel_fd(k->fe), VHOST_SET_VRING_ERR,
              &err) < 0) {
        KC_FAIL("VHOST_SET_VRING_ERR: %s", strerror(errno));
    }
    if (!vhost_user_frontend_start(k->fe, &e)) {
        KC_FAIL("%s", e->message);
    }
    return true;
}

/* One request through the library's normal path; returns the status or
 * -errno.  @len bytes of k->buf at @off are the data. */
static int kc_req(Kc *k, uint32_t type, uint64_t sector, size_t off,
                  size_t len, bool data_in, uint32_t *used_len)
{
    struct iovec iov = { k->buf + off, len };
    VhostUserFrontendCompletion c;
    int r;

    r = vhost_user_frontend_blk_submit(k->fe, 0, type, sector, &iov,
                                       len ? 1 : 0, data_in, NULL);
    if (r < 0) {
        return r;
    }
    if (vhost_user_frontend_kick(k->fe, 0) < 0) {
        return -EIO;
    }
    for (int i = 0; i < KC_WAIT_STEPS; i++) {
        r = vhost_user_frontend_reap(k->fe, 0, &c, 1);
        if (r < 0) {
            return r;
        }
        if (r == 1) {
            if (used_len) {
                *used_len = c.len;
            }
            return c.status;
        }
        vhost_user_frontend_wait(k->fe, 0, 100);
    }
    return -ETIMEDOUT;
}

static void kc_fill(Kc *k, size_t off, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++) {
        k->buf[off + i] = (uint8_t)(seed + i * 7 + (i >> 9));
    }
}

static bool kc_is(const uint8_t *p, size_t len, int v)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != v) {
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------ functional */

static bool kc_rw(Kc *k, uint64_t sector, size_t len, uint8_t seed)
{
    int st;

    kc_fill(k, 0, len, seed);
    st = kc_req(k, VIRTIO_BLK_T_OUT, sector, 0, len, false, NULL);
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("write of %zu bytes at sector %" PRIu64 ": status %d", len,
                sector, st);
    }
    memset(k->buf + 512 * 1024, 0xee, len);
    st = kc_req(k, VIRTIO_BLK_T_IN, sector, 512 * 1024, len, true, NULL);
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("read back: status %d", st);
    }
    if (memcmp(k->buf, k->buf + 512 * 1024, len)) {
        KC_FAIL("read back differs from what was written");
    }
    return true;
}

static bool kc_case_rw(Kc *k)
{
    return kc_rw(k, 0, 4096, 1) && kc_rw(k, 8, 512, 2) &&
           kc_rw(k, kc_cap / 512 - 128, 65536, 3);
}

static bool kc_case_get_id(Kc *k)
{
    struct vhost_blk_serial s = { .serial = "kcheck-serial-01234" };
    uint32_t ulen = 0;
    int st;

    if (ioctl(vhost_user_frontend_kernel_fd(k->fe), VHOST_BLK_SET_SERIAL,
              &s) < 0) {
        KC_FAIL("VHOST_BLK_SET_SERIAL: %s", strerror(errno));
    }
    memset(k->buf, 0xaa, 512);
    st = kc_req(k, VIRTIO_BLK_T_GET_ID, 0, 0, 512, true, &ulen);
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("GET_ID: status %d", st);
    }
    if (memcmp(k->buf, s.serial, VHOST_BLK_SERIAL_LEN) || k->buf[20] != 0xaa) {
        KC_FAIL("GET_ID returned '%.20s'", (char *)k->buf);
    }
    if (ulen != VHOST_BLK_SERIAL_LEN + 1) {
        KC_FAIL("GET_ID used length %u, want 21", ulen);
    }
    return true;
}

static bool kc_case_flush(Kc *k)
{
    int st;

    if (!kc_rw(k, 64, 8192, 9)) {
        return false;
    }
    st = kc_req(k, VIRTIO_BLK_T_FLUSH, 0, 0, 0, false, NULL);
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("FLUSH: status %d", st);
    }
    /* the data is still there after the flush, as read by a second fd */
    if (pread(k->img, k->buf + 256 * 1024, 8192, 64 * 512) != 8192 ||
        memcmp(k->buf + 256 * 1024, k->buf, 8192)) {
        KC_FAIL("after FLUSH the image does not hold the written data");
    }
    return true;
}

static bool kc_seg_req(Kc *k, uint32_t type, uint64_t sector, uint32_t n,
                       uint32_t flags, int nseg, int *st)
{
    struct virtio_blk_discard_write_zeroes *seg =
        (void *)(k->buf + 768 * 1024);

    for (int i = 0; i < nseg; i++) {
        seg[i].sector = htole64(sector);
        seg[i].num_sectors = htole32(n);
        seg[i].flags = htole32(flags);
    }
    *st = kc_req(k, type, 0, 768 * 1024, sizeof(*seg) * nseg, false, NULL);
    return true;
}

static bool kc_zeroed(Kc *k, uint64_t sector, size_t len, const char *what)
{
    int st;

    memset(k->buf + 512 * 1024, 0xee, len);
    st = kc_req(k, VIRTIO_BLK_T_IN, sector, 512 * 1024, len, true, NULL);
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("%s: read back: status %d", what, st);
    }
    if (!kc_is(k->buf + 512 * 1024, len, 0)) {
        KC_FAIL("%s: the range does not read back as zeroes", what);
    }
    return true;
}

static bool kc_case_write_zeroes(Kc *k)
{
    int st;

    /* 64 KiB of data, zero the middle 32 KiB, the edges must survive */
    if (!kc_rw(k, 1024, 65536, 5)) {
        return false;
    }
    kc_seg_req(k, VIRTIO_BLK_T_WRITE_ZEROES, 1024 + 32, 64, 0, 1, &st);
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("WRITE_ZEROES: status %d", st);
    }
    if (!kc_zeroed(k, 1024 + 32, 32768, "WRITE_ZEROES")) {
        return false;
    }
    memset(k->buf + 512 * 1024, 0, 16384);
    if (kc_req(k, VIRTIO_BLK_T_IN, 1024, 512 * 1024, 16384, true, NULL) != 0) {
        KC_FAIL("read of the edge failed");
    }
    kc_fill(k, 0, 65536, 5);
    if (memcmp(k->buf + 512 * 1024, k->buf, 16384)) {
        KC_FAIL("WRITE_ZEROES changed data outside its range");
    }
    /* with the unmap flag */
    if (!kc_rw(k, 2048, 8192, 6)) {
        return false;
    }
    kc_seg_req(k, VIRTIO_BLK_T_WRITE_ZEROES, 2048, 16,
               VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP, 1, &st);
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("WRITE_ZEROES (unmap): status %d", st);
    }
    return kc_zeroed(k, 2048, 8192, "WRITE_ZEROES (unmap)");
}

static bool kc_case_discard(Kc *k)
{
    int st;

    if (!kc_rw(k, 4096, 65536, 7)) {
        return false;
    }
    kc_seg_req(k, VIRTIO_BLK_T_DISCARD, 4096, 128, 0, 1, &st);
    if (kc_block && st == VIRTIO_BLK_S_UNSUPP) {
        return true;            /* the device cannot discard: said so */
    }
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("DISCARD: status %d", st);
    }
    /* a file's punched hole reads as zeroes; a device may keep the data */
    return kc_block || kc_zeroed(k, 4096, 65536, "DISCARD");
}

static bool kc_case_seg_errors(Kc *k)
{
    int st;

    kc_seg_req(k, VIRTIO_BLK_T_WRITE_ZEROES, kc_cap / 512 - 8, 16, 0, 1, &st);
    if (st != VIRTIO_BLK_S_IOERR) {
        KC_FAIL("WRITE_ZEROES past the end: status %d, want IOERR", st);
    }
    kc_seg_req(k, VIRTIO_BLK_T_DISCARD, UINT64_MAX - 4, 16, 0, 1, &st);
    if (st != VIRTIO_BLK_S_IOERR) {
        KC_FAIL("DISCARD with a wrapping range: status %d, want IOERR", st);
    }
    kc_seg_req(k, VIRTIO_BLK_T_DISCARD, 0, 8, 0,
               VHOST_BLK_MAX_DISCARD_SEG + 1, &st);
    if (st != VIRTIO_BLK_S_IOERR) {
        KC_FAIL("DISCARD with too many segments: status %d, want IOERR", st);
    }
    kc_seg_req(k, VIRTIO_BLK_T_DISCARD, 0, 8, 0x80, 1, &st);
    if (st != VIRTIO_BLK_S_UNSUPP) {
        KC_FAIL("DISCARD with an unknown flag: status %d, want UNSUPP", st);
    }
    st = kc_req(k, VIRTIO_BLK_T_DISCARD, 0, 768 * 1024, 10, false, NULL);
    if (st != VIRTIO_BLK_S_IOERR) {
        KC_FAIL("DISCARD with a partial segment: status %d, want IOERR", st);
    }
    return true;
}

static bool kc_case_unsupported(Kc *k)
{
    int st = kc_req(k, 99, 0, 0, 512, true, NULL);

    if (st != VIRTIO_BLK_S_UNSUPP) {
        KC_FAIL("type 99: status %d, want UNSUPP", st);
    }
    return true;
}

static bool kc_case_write_cache(Kc *k)
{
    int kfd = vhost_user_frontend_kernel_fd(k->fe);
    int v = 2;

    if (ioctl(kfd, VHOST_BLK_SET_WRITE_CACHE, &v) == 0 || errno != EINVAL) {
        KC_FAIL("VHOST_BLK_SET_WRITE_CACHE 2 was not refused with EINVAL");
    }
    v = 0;
    if (ioctl(kfd, VHOST_BLK_SET_WRITE_CACHE, &v) < 0) {
        KC_FAIL("VHOST_BLK_SET_WRITE_CACHE 0: %s", strerror(errno));
    }
    if (!kc_rw(k, 300, 16384, 11)) {
        return false;
    }
    v = 1;
    if (ioctl(kfd, VHOST_BLK_SET_WRITE_CACHE, &v) < 0) {
        KC_FAIL("VHOST_BLK_SET_WRITE_CACHE 1: %s", strerror(errno));
    }
    return kc_rw(k, 400, 4096, 12);
}

/* Needs a read-only device: kc_open(k, true, ...) */
static bool kc_case_read_only(Kc *k)
{
    int st;

    st = kc_req(k, VIRTIO_BLK_T_IN, 0, 0, 4096, true, NULL);
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("read on a read-only image: status %d", st);
    }
    st = kc_req(k, VIRTIO_BLK_T_OUT, 0, 0, 4096, false, NULL);
    if (st != VIRTIO_BLK_S_IOERR) {
        KC_FAIL("write on a read-only image: status %d, want IOERR", st);
    }
    kc_seg_req(k, VIRTIO_BLK_T_WRITE_ZEROES, 0, 8, 0, 1, &st);
    if (st != VIRTIO_BLK_S_IOERR) {
        KC_FAIL("WRITE_ZEROES on a read-only image: status %d", st);
    }
    kc_seg_req(k, VIRTIO_BLK_T_DISCARD, 0, 8, 0, 1, &st);
    if (st != VIRTIO_BLK_S_IOERR) {
        KC_FAIL("DISCARD on a read-only image: status %d", st);
    }
    st = kc_req(k, VIRTIO_BLK_T_FLUSH, 0, 0, 0, false, NULL);
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("FLUSH on a read-only image: status %d", st);
    }
    return true;
}

/* VIRTIO_BLK_F_RO acked on a writable image: the device is read-only. */
static bool kc_case_ro_feature(Kc *k)
{
    if (!vhost_user_frontend_has_feature(k->fe, VIRTIO_BLK_F_RO)) {
        KC_FAIL("the module does not offer VIRTIO_BLK_F_RO");
    }
    return kc_case_read_only(k);
}

/* ------------------------------------------------------------ dirty log */

#define KC_PAGE 4096
#define KC_MEM (8u << 20)       /* kc_open's guest memory: region 0 */

static bool kc_log_bit(const uint8_t *log, uint64_t page)
{
    return log[page / 8] & (1u << (page % 8));
}

/*
 * VHOST_F_LOG_ALL as a migrating VMM uses it: set a log, switch logging on
 * on the running ring (VHOST_SET_LOG_BASE, SET_FEATURES, SET_VRING_ADDR
 * with VHOST_VRING_F_LOG), then send one batch of reads (one unaligned
 * buffer over 4 pages; 4 adjacent pieces; 20 scattered 512-byte pieces, more
 * ranges than the module keeps per request), GET_ID, a write and a FLUSH.
 * Guest memory is copied just before the batch is published and again after
 * the queue was stopped: every page whose contents changed must be marked
 * in the log (data, status bytes, the used ring); no page the module did
 * not write may be marked (the avail ring, which only this process writes,
 * must not be); no bit past guest memory and no byte around the log may be
 * touched.  Then with logging off: a write and a read mark nothing.
 */
static bool kc_case_dirty_log(Kc *k)
{
    struct vhost_blk_serial serial = { .serial = "kcheck-dirty-log-001" };
    g_autofree uint8_t *before = g_malloc(KC_MEM);
    g_autoptr(GError) e = NULL;
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    struct iovec piece[4], scatter[20];
    uint8_t *mem, *log;
    uint64_t log_size, mem_gpa, avail_page, unmarked = 0, spurious = 0;
    uint64_t first_unmarked = 0, first_spurious = 0;
    uint16_t used0;
    int nreq = 0, st;

    mem = vhost_user_frontend_gpa_to_host(k->fe, 0, KC_MEM);
    if (!mem || !vhost_user_frontend_host_to_gpa(k->fe, mem, 1, &mem_gpa) ||
        mem_gpa != 0) {
        KC_FAIL("guest memory is not one region at 0");
    }
    if (ioctl(vhost_user_frontend_kernel_fd(k->fe), VHOST_BLK_SET_SERIAL,
              &serial) < 0) {
        KC_FAIL("VHOST_BLK_SET_SERIAL: %s", strerror(errno));
    }
    /* the image's sectors 64..575 hold a pattern the reads bring back */
    kc_fill(k, 0, 256 * 1024, 0x3c);
    st = kc_req(k, VIRTIO_BLK_T_OUT, 64, 0, 256 * 1024, false, NULL);
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("writing the pattern: status %d", st);
    }
    /* a log for 128 MiB of guest-physical space: bits past memory exist */
    if (!vhost_user_frontend_log_start(k->fe, 4096, &e)) {
        KC_FAIL("log start: %s", e->message);
    }
    log = vhost_user_frontend_log(k->fe, &log_size);
    if (log_size * 8 < KC_MEM / KC_PAGE) {
        KC_FAIL("log of %" PRIu64 " bytes for %u pages", log_size,
                KC_MEM / KC_PAGE);
    }
    memset(log, 0, log_size);

    /* the batch: buffers 0xee, so that what the module writes shows */
    memset(k->buf + 0x40000, 0xee, 0x60000);
    if (vhost_user_frontend_blk_submit(k->fe, 0, VIRTIO_BLK_T_IN, 64,
            &(struct iovec){ k->buf + 0x40000 + 512, 12288 }, 1, true,
            NULL) < 0) {
        KC_FAIL("submit");
    }
    nreq++;
    for (int i = 0; i < 4; i++) {
        piece[i] = (struct iovec){ k->buf + 0x50000 + i * 1024, 1024 };
    }
    for (int i = 0; i < 20; i++) {
        scatter[i] = (struct iovec){ k->buf + 0x60000 + i * 8192 + 1024, 512 };
    }
    if (vhost_user_frontend_blk_submit(k->fe, 0, VIRTIO_BLK_T_IN, 128, piece,
                                       4, true, NULL) < 0 ||
        vhost_user_frontend_blk_submit(k->fe, 0, VIRTIO_BLK_T_IN, 256,
                                       scatter, 20, true, NULL) < 0 ||
        vhost_user_frontend_blk_submit(k->fe, 0, VIRTIO_BLK_T_GET_ID, 0,
            &(struct iovec){ k->buf + 0x90000 + 100, 20 }, 1, true,
            NULL) < 0 ||
        vhost_user_frontend_blk_submit(k->fe, 0, VIRTIO_BLK_T_OUT, 2048,
            &(struct iovec){ k->buf, 4096 }, 1, false, NULL) < 0 ||
        vhost_user_frontend_blk_submit(k->fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL,
                                       0, false, NULL) < 0) {
        KC_FAIL("submit");
    }
    nreq += 5;
    vhost_user_frontend_rings(k->fe, 0, &desc, &avail, &used);
    used0 = __atomic_load_n(&used->idx, __ATOMIC_ACQUIRE);
    /* avail->idx is published by the kick: the module starts after this */
    memcpy(before, mem, KC_MEM);
    if (vhost_user_frontend_kick(k->fe, 0) < 0) {
        KC_FAIL("kick");
    }
    for (int i = 0; (uint16_t)(__atomic_load_n(&used->idx, __ATOMIC_ACQUIRE) -
                               used0) < nreq; i++) {
        if (i == KC_WAIT_STEPS * 10) {
            KC_FAIL("the batch did not complete (hang?)");
        }
        g_usleep(10000);
    }
    /* after the detach nothing of the queue runs: the log is final */
    if (!vhost_user_frontend_stop(k->fe, NULL, &e)) {
        KC_FAIL("stop: %s", e->message);
    }
    vhost_user_frontend_host_to_gpa(k->fe, avail, 1, &avail_page);
    avail_page /= KC_PAGE;
    for (uint64_t pg = 0; pg < KC_MEM / KC_PAGE; pg++) {
        bool changed = memcmp(before + pg * KC_PAGE, mem + pg * KC_PAGE,
                              KC_PAGE) != 0;
        bool marked = kc_log_bit(log, pg);

        if (pg == avail_page) {
            if (marked) {
                KC_FAIL("the avail ring's page %" PRIu64 " is marked: the "
                        "module never writes it", pg);
            }
            continue;
        }
        if (changed && !marked && !unmarked++) {
            first_unmarked = pg;
        }
        if (marked && !changed && !spurious++) {
            first_spurious = pg;
        }
    }
    if (unmarked) {
        KC_FAIL("%" PRIu64 " page(s) written by the module but not marked "
                "(first: page %" PRIu64 ")", unmarked, first_unmarked);
    }
    if (spurious) {
        KC_FAIL("%" PRIu64 " page(s) marked that the module did not write "
                "(first: page %" PRIu64 ")", spurious, first_spurious);
    }
    for (uint64_t pg = KC_MEM / KC_PAGE; pg < log_size * 8; pg++) {
        if (kc_log_bit(log, pg)) {
            KC_FAIL("page %" PRIu64 " past guest memory is marked", pg);
        }
    }
    if (!vhost_user_frontend_log_guard_intact(k->fe)) {
        KC_FAIL("the module wrote next to the log");
    }
    /* what the batch read is what the image holds */
    if (memcmp(k->buf + 0x40000 + 512, k->buf, 12288) ||
        memcmp(k->buf + 0x50000, k->buf + 0x8000, 4096) ||
        memcmp(k->buf + 0x90000 + 100, serial.serial, 20)) {
        KC_FAIL("the batch read wrong data");
    }
    for (int i = 0; i < 20; i++) {
        if (memcmp(scatter[i].iov_base, k->buf + 0x18000 + i * 512, 512)) {
            KC_FAIL("scattered piece %d read wrong data", i);
        }
    }

    for (int got = 0; got < nreq;) {
        VhostUserFrontendCompletion c[8];
        int r = vhost_user_frontend_reap(k->fe, 0, c, 8);

        if (r <= 0) {
            KC_FAIL("reaping the batch: %d", r);
        }
        for (int i = 0; i < r; i++) {
            if (c[i].status != VIRTIO_BLK_S_OK) {
                KC_FAIL("request %u of the batch: status %d", c[i].head,
                        c[i].status);
            }
        }
        got += r;
    }

    /* logging off: the same kind of I/O marks nothing */
    if (!vhost_user_frontend_start(k->fe, &e) ||
        !vhost_user_frontend_log_stop(k->fe, &e)) {
        KC_FAIL("restart / log stop: %s", e->message);
    }
    memset(log, 0, log_size);
    if (!kc_rw(k, 1024, 16384, 0x77)) {
        return false;
    }
    if (!vhost_user_frontend_stop(k->fe, NULL, &e)) {
        KC_FAIL("stop: %s", e->message);
    }
    for (uint64_t i = 0; i < log_size; i++) {
        if (log[i]) {
            KC_FAIL("logging off, yet byte %" PRIu64 " of the log is 0x%02x",
                    i, log[i]);
        }
    }
    return true;
}

/* -------------------------------------------- coherence, layouts, limits */

static int kc_outcome(Kc *k, uint16_t head, uint32_t *ulen);

/* O_DIRECT read of the image through an fd of our own (not the module). */
static bool kc_direct_read(Kc *k, uint64_t sector, size_t off, size_t len)
{
    int fd = open(kc_file, O_RDONLY | O_DIRECT);
    ssize_t r;

    if (fd < 0) {
        KC_FAIL("open %s O_DIRECT: %s", kc_file, strerror(errno));
    }
    r = pread(fd, k->buf + off, len, sector * 512);
    close(fd);
    if (r != (ssize_t)len) {
        KC_FAIL("O_DIRECT pread: %zd (%s)", r, strerror(errno));
    }
    return true;
}

/*
 * A block device opened buffered: WRITE_ZEROES (with and without the unmap
 * flag) must read back as zeroes through the module's page cache, and
 * still be zeroes on the disk after a FLUSH (no dirty page written over
 * them); after a DISCARD the module and the disk agree.
 */
static bool kc_case_zero_coherence(Kc *k)
{
    static const struct { uint32_t type, flags; const char *what; } ops[] = {
        { VIRTIO_BLK_T_WRITE_ZEROES, 0, "WRITE_ZEROES" },
        { VIRTIO_BLK_T_WRITE_ZEROES, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP,
          "WRITE_ZEROES (unmap)" },
        { VIRTIO_BLK_T_DISCARD, 0, "DISCARD" },
    };
    const uint64_t sector = 8192;
    int st;

    if (!kc_block || !kc_buffered) {
        KC_FAIL("needs --block --buffered");
    }
    for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
        if (!kc_rw(k, sector, 65536, 0x21 + i)) {
            return false;
        }
        kc_seg_req(k, ops[i].type, sector, 128, ops[i].flags, 1, &st);
        if (ops[i].type == VIRTIO_BLK_T_DISCARD && st == VIRTIO_BLK_S_UNSUPP) {
            continue;
        }
        if (st != VIRTIO_BLK_S_OK) {
            KC_FAIL("%s: status %d", ops[i].what, st);
        }
        if (ops[i].type == VIRTIO_BLK_T_WRITE_ZEROES &&
            !kc_zeroed(k, sector, 65536, ops[i].what)) {
            return false;
        }
        /* what the module reads now, at 512 KiB */
        memset(k->buf + 512 * 1024, 0xee, 65536);
        if (kc_req(k, VIRTIO_BLK_T_IN, sector, 512 * 1024, 65536, true,
                   NULL) != VIRTIO_BLK_S_OK) {
            KC_FAIL("%s: read back failed", ops[i].what);
        }
        if (kc_req(k, VIRTIO_BLK_T_FLUSH, 0, 0, 0, false, NULL) !=
            VIRTIO_BLK_S_OK) {
            KC_FAIL("%s: FLUSH failed", ops[i].what);
        }
        if (!kc_direct_read(k, sector, 256 * 1024, 65536)) {
            return false;
        }
        if (memcmp(k->buf + 256 * 1024, k->buf + 512 * 1024, 65536)) {
            KC_FAIL("%s: after a FLUSH the disk (O_DIRECT) differs from what "
                    "the module reads: a stale page was written back",
                    ops[i].what);
        }
    }
    return true;
}

/* One hand-built chain at KC_HI: descriptors over k->buf. */
typedef struct KcDesc {
    size_t off;                 /* into k->buf */
    uint32_t len;
    bool writable;
} KcDesc;

/* Publish it and return the status byte at k->buf[status_off], or -1. */
static int kc_run_chain(Kc *k, const KcDesc *d, int n, size_t status_off)
{
    int got;

    k->buf[status_off] = 0xff;
    for (int i = 0; i < n; i++) {
        vhost_user_frontend_write_desc(k->fe, 0, KC_HI + i,
                                       k->buf_gpa + d[i].off, d[i].len,
                                       (i < n - 1 ? VRING_DESC_F_NEXT : 0) |
                                       (d[i].writable ? VRING_DESC_F_WRITE : 0),
                                       KC_HI + i + 1);
    }
    got = kc_outcome(k, KC_HI, NULL);
    return got & KC_GOT_USED ? k->buf[status_off] : -1;
}

/*
 * VIRTIO 1.x 2.6.4: any descriptor layout.  Three of them, for a write and
 * for a read of 4 KiB: header and data in one descriptor (data and status
 * in one for the read), the data split at a non-sector boundary (100 +
 * 3996), and the data at an odd address.  On an O_DIRECT backing all three
 * are misaligned for the block layer.  Area at 640 KiB of k->buf.
 */
static bool kc_case_any_layout(Kc *k)
{
    const size_t A = 640 * 1024;      /* header at A, data around A + 4 KiB */
    const size_t D = A + 4096;
    static const char *names[] = { "header+data in one descriptor",
                                   "data split 100 + 3996",
                                   "data at an odd address" };

    for (int l = 0; l < 3; l++) {
        uint64_t sector = 2048 + l * 16;
        struct virtio_blk_outhdr h = { .sector = htole64(sector) };
        KcDesc d[4];
        size_t data, st_off = A + 64;
        int n, st;

        /* --- write through layout l, read back the normal way --- */
        h.type = htole32(VIRTIO_BLK_T_OUT);
        switch (l) {
        case 0:
            data = A + 16;
            memcpy(k->buf + A, &h, sizeof(h));
            d[0] = (KcDesc){ A, 16 + 4096, false };
            st_off = A + 16 + 4096 + 64;
            d[1] = (KcDesc){ st_off, 1, true };
            n = 2;
            break;
        case 1:
            data = D;
            memcpy(k->buf + A, &h, sizeof(h));
            d[0] = (KcDesc){ A, 16, false };
            d[1] = (KcDesc){ D, 100, false };
            d[2] = (KcDesc){ D + 100, 3996, false };
            d[3] = (KcDesc){ st_off, 1, true };
            n = 4;
            break;
        default:
            data = D + 1;
            memcpy(k->buf + A, &h, sizeof(h));
            d[0] = (KcDesc){ A, 16, false };
            d[1] = (KcDesc){ D + 1, 4096, false };
            d[2] = (KcDesc){ st_off, 1, true };
            n = 3;
            break;
        }
        for (size_t i = 0; i < 4096; i++) {
            k->buf[data + i] = (uint8_t)(0x40 + l + i * 13 + (i >> 8));
        }
        st = kc_run_chain(k, d, n, st_off);
        if (st != VIRTIO_BLK_S_OK) {
            KC_FAIL("write, %s: status %d", names[l], st);
        }
        memset(k->buf + 512 * 1024, 0xee, 4096);
        if (kc_req(k, VIRTIO_BLK_T_IN, sector, 512 * 1024, 4096, true,
                   NULL) != VIRTIO_BLK_S_OK ||
            memcmp(k->buf + 512 * 1024, k->buf + data, 4096)) {
            KC_FAIL("write, %s: the data read back differs", names[l]);
        }

        /* --- write the normal way, read through layout l --- */
        kc_fill(k, 0, 4096, 0x70 + l);
        if (kc_req(k, VIRTIO_BLK_T_OUT, sector, 0, 4096, false, NULL) !=
            VIRTIO_BLK_S_OK) {
            KC_FAIL("read, %s: the plain write failed", names[l]);
        }
        h.type = htole32(VIRTIO_BLK_T_IN);
        memcpy(k->buf + A, &h, sizeof(h));
        memset(k->buf + D - 64, 0xee, 4096 + 256);
        switch (l) {
        case 0:
            data = D;
            st_off = D + 4096;
            d[0] = (KcDesc){ A, 16, false };
            d[1] = (KcDesc){ D, 4096 + 1, true };
            n = 2;
            break;
        case 1:
            data = D;
            st_off = A + 64;
            d[0] = (KcDesc){ A, 16, false };
            d[1] = (KcDesc){ D, 100, true };
            d[2] = (KcDesc){ D + 100, 3996, true };
            d[3] = (KcDesc){ st_off, 1, true };
            n = 4;
            break;
        default:
            data = D + 1;
            st_off = A + 64;
            d[0] = (KcDesc){ A, 16, false };
            d[1] = (KcDesc){ D + 1, 4096, true };
            d[2] = (KcDesc){ st_off, 1, true };
            n = 3;
            break;
        }
        st = kc_run_chain(k, d, n, st_off);
        if (st != VIRTIO_BLK_S_OK) {
            KC_FAIL("read, %s: status %d", names[l], st);
        }
        if (memcmp(k->buf + data, k->buf, 4096)) {
            KC_FAIL("read, %s: the data differs from what was written",
                    names[l]);
        }
    }
    return true;
}

/* The flush counter of the block device kc_file (/sys/dev/block/M:N/stat). */
static bool kc_flushes(uint64_t *n)
{
    struct stat stt;
    char path[64];
    unsigned long long f[17] = { 0 };
    FILE *fp;
    int got;

    if (stat(kc_file, &stt) < 0 || !S_ISBLK(stt.st_mode)) {
        return false;
    }
    snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/stat",
             major(stt.st_rdev), minor(stt.st_rdev));
    fp = fopen(path, "r");
    if (!fp) {
        return false;
    }
    got = 0;
    for (int i = 0; i < 17 && fscanf(fp, "%llu", &f[i]) == 1; i++) {
        got++;
    }
    fclose(fp);
    if (got < 16) {
        return false;
    }
    *n = f[15];                 /* flush requests completed */
    return true;
}

/*
 * Writethrough (SET_WRITE_CACHE 0) makes DISCARD and WRITE_ZEROES durable
 * too: the block device sees a flush after each of them.
 */
static bool kc_case_writethrough_flush(Kc *k)
{
    int kfd = vhost_user_frontend_kernel_fd(k->fe);
    uint64_t f0, f1;
    int v = 0, st;

    if (!kc_block) {
        KC_FAIL("needs --block");
    }
    if (ioctl(kfd, VHOST_BLK_SET_WRITE_CACHE, &v) < 0) {
        KC_FAIL("VHOST_BLK_SET_WRITE_CACHE 0: %s", strerror(errno));
    }
    for (int i = 0; i < 2; i++) {
        uint32_t type = i ? VIRTIO_BLK_T_DISCARD : VIRTIO_BLK_T_WRITE_ZEROES;

        if (!kc_flushes(&f0)) {
            KC_FAIL("no flush counter in /sys/dev/block/*/stat");
        }
        kc_seg_req(k, type, 4096, 64, 0, 1, &st);
        if (i && st == VIRTIO_BLK_S_UNSUPP) {
            break;
        }
        if (st != VIRTIO_BLK_S_OK) {
            KC_FAIL("%s: status %d", i ? "DISCARD" : "WRITE_ZEROES", st);
        }
        if (!kc_flushes(&f1)) {
            KC_FAIL("no flush counter");
        }
        if (f1 <= f0) {
            KC_FAIL("writethrough %s completed without a flush of the device "
                    "(flushes %" PRIu64 " -> %" PRIu64 ")",
                    i ? "DISCARD" : "WRITE_ZEROES", f0, f1);
        }
    }
    return true;
}

/*
 * Freeze protection: with the image's file system frozen (FIFREEZE, what
 * fsfreeze -f does), a guest write does not complete (we watch it for 2 s:
 * nothing may happen), and completes with its data after the thaw.
 */
static bool kc_case_freeze(Kc *k)
{
    struct iovec iov = { k->buf, 4096 };
    VhostUserFrontendCompletion c;
    int fd = open(kc_file, O_RDONLY);
    bool done = false;
    int r, i;

    if (fd < 0 || ioctl(fd, FIFREEZE, 0) < 0) {
        int e = errno;

        if (fd >= 0) {
            close(fd);
        }
        KC_FAIL("FIFREEZE on %s: %s", kc_file, strerror(e));
    }
    kc_fill(k, 0, 4096, 0x66);
    r = vhost_user_frontend_blk_submit(k->fe, 0, VIRTIO_BLK_T_OUT, 200, &iov,
                                       1, false, NULL);
    if (r >= 0) {
        vhost_user_frontend_kick(k->fe, 0);
        for (i = 0; i < 20 && !done; i++) {
            done = vhost_user_frontend_reap(k->fe, 0, &c, 1) == 1;
            if (!done) {
                vhost_user_frontend_wait(k->fe, 0, 100);
            }
        }
    }
    if (ioctl(fd, FITHAW, 0) < 0) {
        close(fd);
        KC_FAIL("FITHAW: %s", strerror(errno));
    }
    close(fd);
    if (r < 0) {
        KC_FAIL("submit failed");
    }
    if (done) {
        KC_FAIL("a write completed (status %d) while the file system was "
                "frozen", c.status);
    }
    for (i = 0; i < KC_WAIT_STEPS && !done; i++) {
        done = vhost_user_frontend_reap(k->fe, 0, &c, 1) == 1;
        if (!done) {
            vhost_user_frontend_wait(k->fe, 0, 100);
        }
    }
    if (!done || c.status != VIRTIO_BLK_S_OK) {
        KC_FAIL("after the thaw the write %s", done ? "failed" : "never completed");
    }
    memset(k->buf + 512 * 1024, 0xee, 4096);
    if (kc_req(k, VIRTIO_BLK_T_IN, 200, 512 * 1024, 4096, true, NULL) != 0 ||
        memcmp(k->buf + 512 * 1024, k->buf, 4096)) {
        KC_FAIL("the write's data is not in the image after the thaw");
    }
    return true;
}

/*
 * fsnotify: a guest write is an IN_MODIFY on the image and a read an
 * IN_ACCESS, as for write(2)/read(2).  The module reports them before it
 * publishes the completion, so they are queued when kc_req() returns.
 */
static bool kc_case_fsnotify(Kc *k)
{
    char ev[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    uint32_t mask = 0;
    ssize_t n;

    if (fd < 0 || inotify_add_watch(fd, kc_file, IN_MODIFY | IN_ACCESS) < 0) {
        if (fd >= 0) {
            close(fd);
        }
        KC_FAIL("inotify on %s: %s", kc_file, strerror(errno));
    }
    if (!kc_rw(k, 96, 4096, 0x77)) {
        close(fd);
        return false;
    }
    while ((n = read(fd, ev, sizeof(ev))) > 0) {
        for (char *p = ev; p < ev + n;) {
            struct inotify_event *e = (struct inotify_event *)p;

            mask |= e->mask;
            p += sizeof(*e) + e->len;
        }
    }
    close(fd);
    if (!(mask & IN_MODIFY) || !(mask & IN_ACCESS)) {
        KC_FAIL("inotify saw %s%s for a guest write and read",
                mask & IN_MODIFY ? "IN_MODIFY" : "no IN_MODIFY",
                mask & IN_ACCESS ? ", IN_ACCESS" : ", no IN_ACCESS");
    }
    return true;
}

static double kc_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * Queue a guest-sized WRITE_ZEROES (32 segments over the whole image, many
 * GiB of zeroes: minutes where the backing cannot offload it) and one
 * within the limits (one segment of the maximum), and kick.
 */
static void kc_submit_huge(Kc *k)
{
    struct virtio_blk_discard_write_zeroes *seg = (void *)(k->buf + 768 * 1024);
    uint32_t nsec = kc_cap / 512 > UINT32_MAX ? UINT32_MAX : kc_cap / 512;
    struct iovec iov = { seg, sizeof(*seg) * VHOST_BLK_MAX_DISCARD_SEG };
    struct iovec iov1 = { seg + VHOST_BLK_MAX_DISCARD_SEG, sizeof(*seg) };

    for (int i = 0; i < VHOST_BLK_MAX_DISCARD_SEG; i++) {
        seg[i] = (struct virtio_blk_discard_write_zeroes) { 0, htole32(nsec), 0 };
    }
    seg[VHOST_BLK_MAX_DISCARD_SEG] = (struct virtio_blk_discard_write_zeroes) {
        0, htole32(MIN(nsec, VHOST_BLK_MAX_WRITE_ZEROES_SECTORS)), 0 };
    vhost_user_frontend_blk_submit(k->fe, 0, VIRTIO_BLK_T_WRITE_ZEROES, 0,
                                   &iov, 1, false, NULL);
    vhost_user_frontend_blk_submit(k->fe, 0, VIRTIO_BLK_T_WRITE_ZEROES, 0,
                                   &iov1, 1, false, NULL);
    vhost_user_frontend_kick(k->fe, 0);
}

/*
 * Bounded work: DISCARD/WRITE_ZEROES over the advertised limits are refused;
 * SET_BACKEND -1 with a guest-sized request queued, and the exit of a
 * SIGKILLed owner with one in flight, return within KC_BOUND_S.
 */
static bool kc_case_limits(Kc *k)
{
    struct vhost_vring_file f = { .index = 0, .fd = -1 };
    int kfd = vhost_user_frontend_kernel_fd(k->fe);
    uint64_t big = VHOST_BLK_MAX_WRITE_ZEROES_SECTORS + 8;
    int st, pfd[2], wst;
    double t0, t;
    pid_t pid;
    char c;

    kc_seg_req(k, VIRTIO_BLK_T_WRITE_ZEROES, 0, 8, 0,
               VHOST_BLK_MAX_WRITE_ZEROES_SEG + 1, &st);
    if (st != VIRTIO_BLK_S_IOERR) {
        KC_FAIL("WRITE_ZEROES with %d segments: status %d, want IOERR",
                VHOST_BLK_MAX_WRITE_ZEROES_SEG + 1, st);
    }
    if (big <= kc_cap / 512) {
        kc_seg_req(k, VIRTIO_BLK_T_WRITE_ZEROES, 0, big, 0, 1, &st);
        if (st != VIRTIO_BLK_S_IOERR) {
            KC_FAIL("WRITE_ZEROES of %" PRIu64 " sectors: status %d, want "
                    "IOERR", big, st);
        }
    }
    if ((uint64_t)VHOST_BLK_MAX_DISCARD_SECTORS + 8 <= kc_cap / 512) {
        kc_seg_req(k, VIRTIO_BLK_T_DISCARD, 0,
                   VHOST_BLK_MAX_DISCARD_SECTORS + 8, 0, 1, &st);
        if (st != VIRTIO_BLK_S_IOERR) {
            KC_FAIL("DISCARD over the sector limit: status %d", st);
        }
    }
    /* within the limits: done */
    kc_seg_req(k, VIRTIO_BLK_T_WRITE_ZEROES, 0,
               MIN(kc_cap / 512, VHOST_BLK_MAX_WRITE_ZEROES_SECTORS), 0, 1, &st);
    if (st != VIRTIO_BLK_S_OK) {
        KC_FAIL("WRITE_ZEROES of the maximum: status %d", st);
    }

    kc_submit_huge(k);
    t0 = kc_now();
    if (ioctl(kfd, VHOST_BLK_SET_BACKEND, &f) < 0) {
        KC_FAIL("SET_BACKEND -1: %s", strerror(errno));
    }
    t = kc_now() - t0;
    printf("# SET_BACKEND -1 with a guest-sized request queued: %.2f s\n", t);
    if (t > KC_BOUND_S) {
        KC_FAIL("SET_BACKEND -1 took %.1f s (bound %d s)", t, KC_BOUND_S);
    }

    /* a killed owner with the same requests in flight */
    if (pipe(pfd) < 0) {
        KC_FAIL("pipe: %s", strerror(errno));
    }
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        Kc k2 = { .img = -1, .errfd = -1 };

        close(pfd[0]);
        if (!kc_open(&k2, false, 0)) {
            _exit(1);
        }
        kc_submit_huge(&k2);
        if (write(pfd[1], "x", 1) != 1) {
            _exit(1);
        }
        for (;;) {
            pause();
        }
    }
    close(pfd[1]);
    if (pid < 0 || read(pfd[0], &c, 1) != 1) {
        close(pfd[0]);
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &wst, 0);
        }
        KC_FAIL("the child owner did not start");
    }
    close(pfd[0]);
    t0 = kc_now();
    kill(pid, SIGKILL);
    for (;;) {
        pid_t r = waitpid(pid, &wst, WNOHANG);

        t = kc_now() - t0;
        if (r == pid) {
            break;
        }
        if (t > KC_BOUND_S) {
            KC_FAIL("a SIGKILLed owner has not exited after %d s (D state "
                    "in close?)", KC_BOUND_S);
        }
        usleep(50 * 1000);
    }
    printf("# exit of a SIGKILLed owner with a guest-sized request: %.2f s\n",
           t);
    return true;
}

/*
 * The owner's ioctls: a forked child (another mm) may not change the
 * serial, the write cache or the features (EPERM); the ring may not move
 * while an image is attached (SET_VRING_ADDR: EBUSY).
 */
static bool kc_v_owner_checks(Kc *k)
{
    int kfd = vhost_user_frontend_kernel_fd(k->fe);
    uintptr_t base = ((uintptr_t)k->buf + 4095) & ~(uintptr_t)4095;
    struct vhost_vring_addr a = {
        .index = 0,
        .desc_user_addr = base + 900 * 1024,
        .avail_user_addr = base + 920 * 1024,
        .used_user_addr = base + 940 * 1024,
    };
    pid_t pid;
    int st;

    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        struct vhost_blk_serial s = { .serial = "not-the-owner" };
        uint64_t feat = 1ULL << VIRTIO_F_VERSION_1;
        int v = 0, bad = 0;

        bad |= !(ioctl(kfd, VHOST_BLK_SET_SERIAL, &s) < 0 && errno == EPERM);
        bad |= !(ioctl(kfd, VHOST_BLK_SET_WRITE_CACHE, &v) < 0 &&
                 errno == EPERM) << 1;
        bad |= !(ioctl(kfd, VHOST_SET_FEATURES, &feat) < 0 &&
                 errno == EPERM) << 2;
        _exit(bad);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
        WEXITSTATUS(st) != 0) {
        KC_FAIL("a child process could use the owner's ioctls (mask 0x%x: "
                "1 SET_SERIAL, 2 SET_WRITE_CACHE, 4 SET_FEATURES)",
                WIFEXITED(st) ? WEXITSTATUS(st) : 0xff);
    }
    if (ioctl(kfd, VHOST_SET_VRING_ADDR, &a) == 0 || errno != EBUSY) {
        KC_FAIL("SET_VRING_ADDR to new addresses while attached was not "
                "refused with EBUSY (%s)", strerror(errno));
    }
    return kc_rw(k, 32, 4096, 0x34);
}

/* -------------------------------------------------------------- hostile */

/*
 * Publish the hand-built chain at @head and wait for the module's answer:
 * a used element (its status byte read from @status when non-NULL) or an
 * error-eventfd signal.  Returns KC_GOT_* bits, or 0 on a hang.
 */
static int kc_outcome(Kc *k, uint16_t head, uint32_t *ulen)
{
    uint32_t id, len;
    uint64_t v;

    vhost_user_frontend_push_avail_raw(k->fe, 0, head);
    vhost_user_frontend_kick_raw(k->fe, 0);
    for (int i = 0; i < KC_WAIT_STEPS; i++) {
        int got = 0;

        if (vhost_user_frontend_reap_raw(k->fe, 0, &id, &len)) {
            got |= KC_GOT_USED;
            if (ulen) {
                *ulen = len;
            }
        }
        if (read(k->errfd, &v, sizeof(v)) == sizeof(v)) {
            got |= KC_GOT_VQERR;
        }
        if (got) {
            return got;
        }
        vhost_user_frontend_wait(k->fe, 0, 100);
    }
    return 0;
}

/* header slot of descriptor @d: 16 bytes header, status at +16 */
static uint8_t *kc_slot(Kc *k, uint16_t d, uint64_t *gpa)
{
    uint8_t *p = vhost_user_frontend_req_slot(k->fe, 0, d);

    vhost_user_frontend_host_to_gpa(k->fe, p, 17, gpa);
    return p;
}

static void kc_hdr(uint8_t *slot, uint32_t type, uint64_t sector)
{
    struct virtio_blk_outhdr h = { .type = htole32(type),
                                   .sector = htole64(sector) };

    memcpy(slot, &h, sizeof(h));
    slot[16] = 0xff;
}

/* Standard 3-descriptor chain at KC_HI: header, data (len at buf), status. */
static void kc_chain3(Kc *k, uint32_t type, uint64_t sector, uint64_t data_gpa,
                      uint32_t data_len, bool data_in, uint8_t **status)
{
    uint64_t sg;
    uint8_t *slot = kc_slot(k, KC_HI, &sg);

    kc_hdr(slot, type, sector);
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI, sg, 16, VRING_DESC_F_NEXT,
                                   KC_HI + 1);
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI + 1, data_gpa, data_len,
                                   VRING_DESC_F_NEXT |
                                   (data_in ? VRING_DESC_F_WRITE : 0),
                                   KC_HI + 2);
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI + 2, sg + 16, 1,
                                   VRING_DESC_F_WRITE, 0);
    *status = slot + 16;
}

/* Expect a used element with status @want (or vq_err when @allow_vqerr). */
static bool kc_expect_status(Kc *k, uint8_t *status, int want, bool allow_vqerr)
{
    int got = kc_outcome(k, KC_HI, NULL);

    if (!got) {
        KC_FAIL("no answer from the module (hang?)");
    }
    if ((got & KC_GOT_USED) && *status == want) {
        return true;
    }
    if (allow_vqerr && (got & KC_GOT_VQERR)) {
        return true;
    }
    KC_FAIL("answer 0x%x, status byte %d, want status %d%s", got, *status,
            want, allow_vqerr ? " or vq_err" : "");
}

static bool kc_expect_vqerr(Kc *k, uint16_t head)
{
    int got = kc_outcome(k, head, NULL);

    if (!got) {
        KC_FAIL("no answer from the module (hang?)");
    }
    if (!(got & KC_GOT_VQERR)) {
        KC_FAIL("no vq_err signal (answer 0x%x)", got);
    }
    return true;
}

static bool kc_h_data_outside(Kc *k)
{
    uint8_t *st;

    kc_chain3(k, VIRTIO_BLK_T_IN, 0, 1ULL << 40, 4096, true, &st);
    return kc_expect_vqerr(k, KC_HI);
}

static bool kc_h_data_past_region(Kc *k)
{
    uint8_t *tail = vhost_user_frontend_gpa_to_host(k->fe, (8 << 20) - 4096,
                                                    4096);
    uint8_t *st;

    if (!tail) {
        KC_FAIL("the last page of guest memory has no host address");
    }
    memset(tail, 0x5a, 4096);
    /* starts inside guest memory, runs 4 KiB past its end */
    kc_chain3(k, VIRTIO_BLK_T_IN, 0, (8 << 20) - 4096, 8192, true, &st);
    if (!kc_expect_vqerr(k, KC_HI)) {
        return false;
    }
    if (!kc_is(tail, 4096, 0x5a)) {
        KC_FAIL("the part inside guest memory was written anyway");
    }
    return true;
}

static bool kc_h_header_outside(Kc *k)
{
    uint8_t *st;

    kc_chain3(k, VIRTIO_BLK_T_IN, 0, k->buf_gpa, 4096, true, &st);
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI, 0xdead0000000ULL, 16,
                                   VRING_DESC_F_NEXT, KC_HI + 1);
    return kc_expect_vqerr(k, KC_HI);
}

static bool kc_h_loop(Kc *k)
{
    uint8_t *st;

    kc_chain3(k, VIRTIO_BLK_T_IN, 0, k->buf_gpa, 4096, true, &st);
    /* data -> header -> data ... */
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI + 1, k->buf_gpa, 4096,
                                   VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   KC_HI);
    return kc_expect_vqerr(k, KC_HI);
}

static bool kc_h_self_loop(Kc *k)
{
    uint64_t sg;
    uint8_t *slot = kc_slot(k, KC_HI, &sg);

    kc_hdr(slot, VIRTIO_BLK_T_IN, 0);
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI, sg, 16, VRING_DESC_F_NEXT,
                                   KC_HI);
    return kc_expect_vqerr(k, KC_HI);
}

static bool kc_h_next_oob(Kc *k)
{
    uint8_t *st;

    kc_chain3(k, VIRTIO_BLK_T_IN, 0, k->buf_gpa, 4096, true, &st);
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI + 1, k->buf_gpa, 4096,
                                   VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   KC_QSIZE + 5);
    return kc_expect_vqerr(k, KC_HI);
}

static bool kc_h_head_oob(Kc *k)
{
    return kc_expect_vqerr(k, KC_QSIZE + 3);
}

static bool kc_h_avail_idx_jump(Kc *k)
{
    uint8_t *st;
    uint64_t v;

    kc_chain3(k, VIRTIO_BLK_T_IN, 0, k->buf_gpa, 4096, true, &st);
    vhost_user_frontend_set_avail_idx_raw(k->fe, 0, 1000);
    vhost_user_frontend_kick_raw(k->fe, 0);
    for (int i = 0; i < KC_WAIT_STEPS; i++) {
        if (read(k->errfd, &v, sizeof(v)) == sizeof(v)) {
            return true;
        }
        vhost_user_frontend_wait(k->fe, 0, 100);
    }
    KC_FAIL("avail->idx 1000 ahead of a ring of %d: no vq_err", KC_QSIZE);
}

static bool kc_h_header_short(Kc *k)
{
    uint8_t *st;

    kc_chain3(k, VIRTIO_BLK_T_IN, 0, k->buf_gpa, 4096, true, &st);
    {
        uint64_t sg;

        kc_slot(k, KC_HI, &sg);
        vhost_user_frontend_write_desc(k->fe, 0, KC_HI, sg, 8,
                                       VRING_DESC_F_NEXT, KC_HI + 1);
    }
    /* the 8 header bytes and the data (device-writable) do not make 16 */
    return kc_expect_status(k, st, VIRTIO_BLK_S_IOERR, false);
}

static bool kc_h_no_status(Kc *k)
{
    uint64_t sg;
    uint8_t *slot = kc_slot(k, KC_HI, &sg);
    uint32_t ulen = 99;
    int got;

    kc_hdr(slot, VIRTIO_BLK_T_OUT, 0);
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI, sg, 16, VRING_DESC_F_NEXT,
                                   KC_HI + 1);
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI + 1, k->buf_gpa, 4096, 0, 0);
    got = kc_outcome(k, KC_HI, &ulen);
    if (!got) {
        KC_FAIL("no answer from the module (hang?)");
    }
    if ((got & KC_GOT_USED) && ulen != 0) {
        KC_FAIL("a request without a status byte came back with used "
                "length %u", ulen);
    }
    return true;
}

static bool kc_h_status_zero_len(Kc *k)
{
    uint64_t sg;
    uint8_t *slot = kc_slot(k, KC_HI, &sg);
    uint32_t ulen = 99;
    int got;

    /* FLUSH whose only device-writable descriptor has length 0 */
    kc_hdr(slot, VIRTIO_BLK_T_FLUSH, 0);
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI, sg, 16, VRING_DESC_F_NEXT,
                                   KC_HI + 1);
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI + 1, sg + 16, 0,
                                   VRING_DESC_F_WRITE, 0);
    got = kc_outcome(k, KC_HI, &ulen);
    if (!got) {
        KC_FAIL("no answer from the module (hang?)");
    }
    if ((got & KC_GOT_USED) && ulen != 0) {
        KC_FAIL("used length %u for a request without a status byte", ulen);
    }
    if (slot[16] != 0xff) {
        KC_FAIL("the module wrote past a zero-length descriptor");
    }
    return true;
}

/* An IN that must fail leaves its data buffer alone. */
static bool kc_in_untouched(Kc *k, uint64_t sector, uint32_t len)
{
    uint8_t *st;

    memset(k->buf, 0x5a, len);
    kc_chain3(k, VIRTIO_BLK_T_IN, sector, k->buf_gpa, len, true, &st);
    if (!kc_expect_status(k, st, VIRTIO_BLK_S_IOERR, false)) {
        return false;
    }
    if (!kc_is(k->buf, len, 0x5a)) {
        KC_FAIL("a failed read wrote into guest memory");
    }
    return true;
}

static bool kc_h_sector_beyond(Kc *k)
{
    return kc_in_untouched(k, kc_cap / 512, 4096);
}

static bool kc_h_sector_wrap(Kc *k)
{
    uint8_t *st;

    kc_chain3(k, VIRTIO_BLK_T_OUT, UINT64_MAX - 3, k->buf_gpa, 4096, false,
              &st);
    return kc_expect_status(k, st, VIRTIO_BLK_S_IOERR, false);
}

static bool kc_h_length_past_end(Kc *k)
{
    return kc_in_untouched(k, kc_cap / 512 - 1, 8192);
}

static bool kc_h_length_unaligned(Kc *k)
{
    uint8_t *st;

    kc_chain3(k, VIRTIO_BLK_T_IN, 0, k->buf_gpa, 100, true, &st);
    return kc_expect_status(k, st, VIRTIO_BLK_S_IOERR, false);
}

static bool kc_h_length_huge(Kc *k)
{
    uint8_t *st;

    /* 4 GiB - 512 of "data" at guest address 0: far more than memory */
    kc_chain3(k, VIRTIO_BLK_T_IN, 0, 0, 0xfffffe00u, true, &st);
    return kc_expect_vqerr(k, KC_HI);
}

/* indirect table of @n entries at k->buf + 64 KiB */
static struct vring_desc *kc_indirect(Kc *k, unsigned int n, uint64_t *gpa)
{
    struct vring_desc *t = (void *)(k->buf + 65536);

    *gpa = k->buf_gpa + 65536;
    memset(t, 0, sizeof(*t) * n);
    return t;
}

static bool kc_h_indirect_loop(Kc *k)
{
    uint64_t tg, sg;
    struct vring_desc *t = kc_indirect(k, 3, &tg);
    uint8_t *slot = kc_slot(k, KC_HI, &sg);

    kc_hdr(slot, VIRTIO_BLK_T_IN, 0);
    t[0] = (struct vring_desc) { sg, 16, VRING_DESC_F_NEXT, 1 };
    t[1] = (struct vring_desc) { k->buf_gpa, 4096,
                                 VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 0 };
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI, tg, 3 * 16,
                                   VRING_DESC_F_INDIRECT, 0);
    return kc_expect_vqerr(k, KC_HI);
}

static bool kc_h_indirect_nested(Kc *k)
{
    uint64_t tg;
    struct vring_desc *t = kc_indirect(k, 2, &tg);

    t[0] = (struct vring_desc) { tg, 32, VRING_DESC_F_INDIRECT, 0 };
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI, tg, 2 * 16,
                                   VRING_DESC_F_INDIRECT, 0);
    return kc_expect_vqerr(k, KC_HI);
}

static bool kc_h_indirect_outside(Kc *k)
{
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI, 1ULL << 41, 4 * 16,
                                   VRING_DESC_F_INDIRECT, 0);
    return kc_expect_vqerr(k, KC_HI);
}

static bool kc_h_indirect_bad_len(Kc *k)
{
    uint64_t tg;

    kc_indirect(k, 2, &tg);
    /* not a multiple of the descriptor size */
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI, tg, 20,
                                   VRING_DESC_F_INDIRECT, 0);
    return kc_expect_vqerr(k, KC_HI);
}

static bool kc_h_too_many_segments(Kc *k)
{
    unsigned int n = 1100;      /* more than UIO_MAXIOV (1024) */
    uint64_t tg, sg;
    struct vring_desc *t = kc_indirect(k, n, &tg);
    uint8_t *slot = kc_slot(k, KC_HI, &sg);

    kc_hdr(slot, VIRTIO_BLK_T_IN, 0);
    t[0] = (struct vring_desc) { sg, 16, VRING_DESC_F_NEXT, 1 };
    for (unsigned int i = 1; i < n - 1; i++) {
        t[i] = (struct vring_desc) { k->buf_gpa + 512 * (i % 64), 512,
                                     VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                     i + 1 };
    }
    t[n - 1] = (struct vring_desc) { sg + 16, 1, VRING_DESC_F_WRITE, 0 };
    vhost_user_frontend_write_desc(k->fe, 0, KC_HI, tg, n * 16,
                                   VRING_DESC_F_INDIRECT, 0);
    return kc_expect_vqerr(k, KC_HI);
}

static bool kc_h_write_to_readonly_desc(Kc *k)
{
    uint8_t *st;

    /* IN whose data descriptor is device-readable: the only writable
     * byte is the status, so there is no room for data */
    kc_chain3(k, VIRTIO_BLK_T_IN, 0, k->buf_gpa, 4096, false, &st);
    {
        int got = kc_outcome(k, KC_HI, NULL);

        if (!got) {
            KC_FAIL("no answer from the module (hang?)");
        }
        /* zero-length read: OK with nothing transferred, or an error */
        if ((got & KC_GOT_USED) && *st != VIRTIO_BLK_S_OK &&
            *st != VIRTIO_BLK_S_IOERR) {
            KC_FAIL("status %d", *st);
        }
    }
    return true;
}

static bool kc_h_dup_head(Kc *k)
{
    uint8_t *st;
    uint32_t id, len;
    int n = 0;

    kc_chain3(k, VIRTIO_BLK_T_IN, 0, k->buf_gpa, 4096, true, &st);
    for (int i = 0; i < 8; i++) {
        vhost_user_frontend_push_avail_raw(k->fe, 0, KC_HI);
    }
    vhost_user_frontend_kick_raw(k->fe, 0);
    for (int i = 0; i < KC_WAIT_STEPS && n < 8; i++) {
        while (vhost_user_frontend_reap_raw(k->fe, 0, &id, &len)) {
            n++;
        }
        if (n < 8) {
            vhost_user_frontend_wait(k->fe, 0, 100);
        }
    }
    if (n != 8) {
        KC_FAIL("8 copies of one head, %d answered", n);
    }
    return true;
}

/* Close the device with many requests in flight (no reaping). */
static bool kc_h_close_inflight(Kc *k)
{
    for (int i = 0; i < 16; i++) {
        struct iovec iov = { k->buf + 65536 * (i % 8), 65536 };

        if (vhost_user_frontend_blk_submit(k->fe, 0,
                                           i & 1 ? VIRTIO_BLK_T_OUT :
                                           VIRTIO_BLK_T_IN,
                                           (uint64_t)i * 128, &iov, 1,
                                           !(i & 1), NULL) < 0) {
            KC_FAIL("submit %d failed", i);
        }
    }
    vhost_user_frontend_kick(k->fe, 0);
    return true;                /* kc_close() does the rest */
}

/* Detach the image with requests in flight, then attach it again. */
static bool kc_h_detach_inflight(Kc *k)
{
    struct vhost_vring_file f = { .index = 0, .fd = -1 };
    int kfd = vhost_user_frontend_kernel_fd(k->fe);

    for (int i = 0; i < 16; i++) {
        struct iovec iov = { k->buf + 65536 * (i % 8), 65536 };

        vhost_user_frontend_blk_submit(k->fe, 0, VIRTIO_BLK_T_IN,
                                       (uint64_t)i * 128, &iov, 1, true, NULL);
    }
    vhost_user_frontend_kick(k->fe, 0);
    if (ioctl(kfd, VHOST_BLK_SET_BACKEND, &f) < 0) {
        KC_FAIL("detach: %s", strerror(errno));
    }
    f.index = VHOST_BLK_MAX_QUEUES;
    f.fd = k->img;
    if (ioctl(kfd, VHOST_BLK_SET_BACKEND, &f) == 0) {
        KC_FAIL("SET_BACKEND on queue %d was accepted", VHOST_BLK_MAX_QUEUES);
    }
    f.index = 0;
    f.fd = 0x7fffff;
    if (ioctl(kfd, VHOST_BLK_SET_BACKEND, &f) == 0 || errno != EBADF) {
        KC_FAIL("SET_BACKEND with a bad fd was not refused with EBADF");
    }
    f.fd = k->img;
    if (ioctl(kfd, VHOST_BLK_SET_BACKEND, &f) < 0) {
        KC_FAIL("re-attach: %s", strerror(errno));
    }
    return true;
}


/* ---------------------------------------------------- hostile VMM (ioctls) */

static int kc_dev_open(void)
{
    return open(kc_dev, O_RDWR | O_CLOEXEC);
}

static bool kc_v_open_close(Kc *k)
{
    int fd = kc_dev_open();

    if (fd < 0) {
        KC_FAIL("open %s: %s", kc_dev, strerror(errno));
    }
    close(fd);
    return true;
}

static bool kc_v_no_owner(Kc *k)
{
    struct vhost_vring_file f = { .index = 0 };
    int fd = kc_dev_open(), img = open(kc_file, O_RDWR);
    bool ok;

    f.fd = img;
    ok = ioctl(fd, VHOST_BLK_SET_BACKEND, &f) < 0 && errno == EPERM;
    close(img);
    close(fd);
    if (!ok) {
        KC_FAIL("SET_BACKEND before SET_OWNER was not refused with EPERM");
    }
    return true;
}

static bool kc_v_bad_backends(Kc *k)
{
    struct vhost_vring_file f = { .index = 0 };
    int fd = kc_dev_open();
    int pipefd[2] = { -1, -1 };
    int dir = open("/", O_RDONLY | O_DIRECTORY);
    int app = open(kc_file, O_RDWR | O_APPEND);
    int wo = open(kc_file, O_WRONLY);
    uint64_t bad = 1ULL << 63;
    bool ok = true;

    if (fd < 0 || ioctl(fd, VHOST_SET_OWNER) < 0 || pipe(pipefd) < 0) {
        ok = false;
        snprintf(kc_why, sizeof(kc_why), "setup: %s", strerror(errno));
    }
    /* no ring set up: the attach must fail, not touch address 0 */
    {
        int img = open(kc_file, O_RDWR);

        f.fd = img;
        if (ok && ioctl(fd, VHOST_BLK_SET_BACKEND, &f) == 0) {
            ok = false;
            snprintf(kc_why, sizeof(kc_why), "attach without a ring worked");
        }
        close(img);
    }
    f.fd = pipefd[0];
    if (ok && (ioctl(fd, VHOST_BLK_SET_BACKEND, &f) == 0 || errno != EINVAL)) {
        ok = false;
        snprintf(kc_why, sizeof(kc_why), "a pipe was not refused with EINVAL");
    }
    f.fd = dir;
    if (ok && (ioctl(fd, VHOST_BLK_SET_BACKEND, &f) == 0 || errno != EINVAL)) {
        ok = false;
        snprintf(kc_why, sizeof(kc_why), "a directory was not refused");
    }
    f.fd = app;
    if (ok && (ioctl(fd, VHOST_BLK_SET_BACKEND, &f) == 0 || errno != EINVAL)) {
        ok = false;
        snprintf(kc_why, sizeof(kc_why), "an O_APPEND fd was not refused");
    }
    f.fd = wo;
    if (ok && (ioctl(fd, VHOST_BLK_SET_BACKEND, &f) == 0 || errno != EINVAL)) {
        ok = false;
        snprintf(kc_why, sizeof(kc_why), "a write-only fd was not refused");
    }
    if (ok && (ioctl(fd, VHOST_SET_FEATURES, &bad) == 0 ||
               errno != EOPNOTSUPP)) {
        ok = false;
        snprintf(kc_why, sizeof(kc_why), "an unknown feature bit was accepted");
    }
    close(pipefd[0]);
    close(pipefd[1]);
    close(dir);
    close(app);
    close(wo);
    close(fd);
    return ok;
}

/* RESET_OWNER with requests in flight, then close. */
static bool kc_v_reset_inflight(Kc *k)
{
    if (!kc_h_close_inflight(k)) {
        return false;
    }
    if (ioctl(vhost_user_frontend_kernel_fd(k->fe), VHOST_RESET_OWNER) < 0) {
        KC_FAIL("VHOST_RESET_OWNER: %s", strerror(errno));
    }
    return true;
}

/* A second process (a fork) may not drive the device. */
static bool kc_v_other_process(Kc *k)
{
    struct vhost_vring_file f = { .index = 0, .fd = -1 };
    int kfd = vhost_user_frontend_kernel_fd(k->fe);
    pid_t pid = fork();
    int st;

    if (pid == 0) {
        _exit(ioctl(kfd, VHOST_BLK_SET_BACKEND, &f) < 0 && errno == EPERM ?
              0 : 1);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
        WEXITSTATUS(st) != 0) {
        KC_FAIL("a child process could detach the owner's image");
    }
    return kc_rw(k, 32, 4096, 0x33);
}

/*
 * SET_MEM_TABLE with requests in flight: the new table maps the guest's
 * memory to a copy.  Requests that translated their buffers and status
 * byte through the old table must be done with it when the ioctl returns:
 * nothing may write the old memory after that.  20 reads are queued and
 * the table changes as soon as the first one completes, while the others
 * are in flight or not yet taken (those then use the new table).
 */
static bool kc_v_mem_table_drain(Kc *k)
{
    union {
        struct vhost_memory m;
        char b[sizeof(struct vhost_memory) + sizeof(struct vhost_memory_region)];
    } u;
    int kfd = vhost_user_frontend_kernel_fd(k->fe);
    const size_t msz = 8 << 20, dlen = 768 * 1024;
    const int nreq = 20;
    uint8_t *m1 = vhost_user_frontend_gpa_to_host(k->fe, 0, msz);
    uint8_t *m2, *snap, st_snap[KC_QSIZE];
    VhostUserFrontendCompletion c[20];
    int n = 0, i;

    if (!m1) {
        KC_FAIL("guest memory is not one region at GPA 0");
    }
    memset(k->buf, 0x5a, dlen);
    for (i = 0; i < nreq; i++) {
        struct iovec iov = { k->buf + 32768 * i, 32768 };

        if (vhost_user_frontend_blk_submit(k->fe, 0, VIRTIO_BLK_T_IN,
                                           (uint64_t)i * 64, &iov, 1, true,
                                           NULL) < 0) {
            KC_FAIL("submit %d failed", i);
        }
    }
    m2 = mmap(NULL, msz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
              -1, 0);
    snap = g_malloc(dlen);
    if (m2 == MAP_FAILED) {
        g_free(snap);
        KC_FAIL("mmap: %s", strerror(errno));
    }
    memcpy(m2, m1, msz);
    memset(&u, 0, sizeof(u));
    u.m.nregions = 1;
    u.m.regions[0].guest_phys_addr = 0;
    u.m.regions[0].memory_size = msz;
    u.m.regions[0].userspace_addr = (uintptr_t)m2;
    vhost_user_frontend_kick(k->fe, 0);
    for (i = 0; i < KC_WAIT_STEPS && !n; i++) {
        n = vhost_user_frontend_reap(k->fe, 0, c, 1);
        if (n < 0) {
            g_free(snap);
            KC_FAIL("reap failed");
        }
        if (!n) {
            vhost_user_frontend_wait(k->fe, 0, 100);
        }
    }
    if (ioctl(kfd, VHOST_SET_MEM_TABLE, &u.m) < 0) {
        g_free(snap);
        KC_FAIL("SET_MEM_TABLE: %s", strerror(errno));
    }
    memcpy(snap, k->buf, dlen);
    for (int h = 0; h < KC_QSIZE; h++) {
        st_snap[h] = ((uint8_t *)vhost_user_frontend_req_slot(k->fe, 0, h))[16];
    }
    for (i = 0; i < KC_WAIT_STEPS && n < nreq; i++) {
        int r = vhost_user_frontend_reap(k->fe, 0, c, nreq - n);

        if (r < 0) {
            break;
        }
        n += r;
        if (n < nreq) {
            vhost_user_frontend_wait(k->fe, 0, 100);
        }
    }
    if (n != nreq) {
        g_free(snap);
        KC_FAIL("%d of %d requests completed", n, nreq);
    }
    if (memcmp(snap, k->buf, dlen)) {
        g_free(snap);
        KC_FAIL("a request wrote data into the old memory after "
                "SET_MEM_TABLE returned");
    }
    g_free(snap);
    for (int h = 0; h < KC_QSIZE; h++) {
        if (st_snap[h] !=
            ((uint8_t *)vhost_user_frontend_req_slot(k->fe, 0, h))[16]) {
            KC_FAIL("a status byte was written into the old memory after "
                    "SET_MEM_TABLE returned (head %d)", h);
        }
    }
    return true;                /* m2 stays mapped: the device may use it */
}

typedef struct KcCase {
    const char *name;
    bool (*fn)(Kc *k);
    bool read_only;
    bool hostile;
    bool raw;                   /* fn opens what it needs */
    uint64_t features;          /* 0 = the library's default set */
    bool named;                 /* run only when named on the command line */
} KcCase;

static const KcCase kc_cases[] = {
    { "rw", kc_case_rw },
    { "get-id", kc_case_get_id },
    { "flush", kc_case_flush },
    { "write-zeroes", kc_case_write_zeroes },
    { "discard", kc_case_discard },
    { "segment-errors", kc_case_seg_errors },
    { "unsupported-type", kc_case_unsupported },
    { "write-cache", kc_case_write_cache },
    { "read-only", kc_case_read_only, true },
    { "no-event-idx", kc_case_rw, .features = (1ULL << VIRTIO_F_VERSION_1) |
      (1ULL << VIRTIO_BLK_F_FLUSH) | (1ULL << VIRTIO_RING_F_INDIRECT_DESC) },
    { "minimal-features", kc_case_rw, .features = 1ULL << VIRTIO_F_VERSION_1 },
    { "dirty-log", kc_case_dirty_log },
    { "ro-feature", kc_case_ro_feature, .features =
      (1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_BLK_F_RO) |
      (1ULL << VIRTIO_BLK_F_DISCARD) | (1ULL << VIRTIO_BLK_F_WRITE_ZEROES) },
    { "any-layout", kc_case_any_layout },
    { "limits", kc_case_limits },
    { "fsnotify", kc_case_fsnotify },
    { "zero-coherence", kc_case_zero_coherence, .named = true },
    { "writethrough-flush", kc_case_writethrough_flush, .named = true },
    { "freeze", kc_case_freeze, .named = true },
    { "hostile-data-outside-memory", kc_h_data_outside, false, true },
    { "hostile-data-past-region", kc_h_data_past_region, false, true },
    { "hostile-header-outside-memory", kc_h_header_outside, false, true },
    { "hostile-chain-loop", kc_h_loop, false, true },
    { "hostile-self-loop", kc_h_self_loop, false, true },
    { "hostile-next-out-of-ring", kc_h_next_oob, false, true },
    { "hostile-head-out-of-ring", kc_h_head_oob, false, true },
    { "hostile-avail-idx-jump", kc_h_avail_idx_jump, false, true },
    { "hostile-header-short", kc_h_header_short, false, true },
    { "hostile-no-status", kc_h_no_status, false, true },
    { "hostile-status-zero-length", kc_h_status_zero_len, false, true },
    { "hostile-sector-beyond-end", kc_h_sector_beyond, false, true },
    { "hostile-sector-wraps", kc_h_sector_wrap, false, true },
    { "hostile-length-past-end", kc_h_length_past_end, false, true },
    { "hostile-length-unaligned", kc_h_length_unaligned, false, true },
    { "hostile-length-huge", kc_h_length_huge, false, true },
    { "hostile-indirect-loop", kc_h_indirect_loop, false, true },
    { "hostile-indirect-nested", kc_h_indirect_nested, false, true },
    { "hostile-indirect-outside-memory", kc_h_indirect_outside, false, true },
    { "hostile-indirect-bad-length", kc_h_indirect_bad_len, false, true },
    { "hostile-too-many-segments", kc_h_too_many_segments, false, true },
    { "hostile-in-without-writable-data", kc_h_write_to_readonly_desc, false,
      true },
    { "hostile-duplicate-head", kc_h_dup_head, false, true },
    { "hostile-close-in-flight", kc_h_close_inflight, false, true },
    { "hostile-detach-in-flight", kc_h_detach_inflight, false, true },
    { "vmm-open-close", kc_v_open_close, false, true, true },
    { "vmm-backend-without-owner", kc_v_no_owner, false, true, true },
    { "vmm-bad-backends", kc_v_bad_backends, false, true, true },
    { "vmm-reset-owner-in-flight", kc_v_reset_inflight, false, true },
    { "vmm-other-process", kc_v_other_process, false, true },
    { "vmm-owner-checks", kc_v_owner_checks, false, true },
    { "vmm-mem-table-drain", kc_v_mem_table_drain, false, true },
};

static bool kc_run(const KcCase *c)
{
    Kc k = { .img = -1, .errfd = -1 };
    bool ok;

    kc_why[0] = 0;
    ok = (c->raw || kc_open(&k, c->read_only, c->features)) && c->fn(&k);
    kc_close(&k);
    /* the image keeps its size (nothing written past its end) */
    if (ok && !kc_block) {
        struct stat st2;

        if (stat(kc_file, &st2) < 0 || (uint64_t)st2.st_size != kc_cap) {
            ok = false;
            snprintf(kc_why, sizeof(kc_why), "the image's size changed");
        }
    }
    /* after a hostile case a fresh device must still work */
    if (ok && c->hostile) {
        char why[sizeof(kc_why)];

        ok = kc_open(&k, false, 0) && kc_rw(&k, 16, 4096, 0x5a);
        if (!ok) {
            snprintf(why, sizeof(why), "a good request after it: %s", kc_why);
            memcpy(kc_why, why, sizeof(why));
        }
        kc_close(&k);
    }
    printf("%s %s%s%s\n", ok ? "ok" : "not ok", c->name, ok ? "" : ": ",
           ok ? "" : kc_why);
    fflush(stdout);
    return ok;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "vhost-dev", required_argument, NULL, 'd' },
        { "file", required_argument, NULL, 'f' },
        { "buffered", no_argument, NULL, 'b' },
        { "block", no_argument, NULL, 'B' },
        { "list", no_argument, NULL, 'l' },
        { NULL, 0, NULL, 0 },
    };
    struct stat stt;
    int c, img, failed = 0, ran = 0;

    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': kc_dev = optarg; break;
        case 'f': kc_file = optarg; break;
        case 'b': kc_buffered = true; break;
        case 'B': kc_block = true; break;
        case 'l':
            for (size_t i = 0; i < ARRAY_SIZE(kc_cases); i++) {
                printf("%s\n", kc_cases[i].name);
            }
            return 0;
        default:
            fprintf(stderr, "usage: vhost-blk-kcheck --vhost-dev DEV --file "
                    "IMAGE [--buffered] [--block] [CASE...]\n");
            return 2;
        }
    }
    if (!kc_dev || !kc_file) {
        fprintf(stderr, "vhost-blk-kcheck: --vhost-dev and --file are "
                "required\n");
        return 2;
    }
    img = open(kc_file, O_RDONLY);
    if (img < 0 || fstat(img, &stt) < 0) {
        fprintf(stderr, "vhost-blk-kcheck: %s: %s\n", kc_file, strerror(errno));
        return 1;
    }
    if (S_ISBLK(stt.st_mode)) {
        ioctl(img, BLKGETSIZE64, &kc_cap);
    } else {
        kc_cap = stt.st_size;
    }
    close(img);
    if (kc_cap < (8 << 20)) {
        fprintf(stderr, "vhost-blk-kcheck: %s: needs at least 8 MiB\n",
                kc_file);
        return 1;
    }
    for (size_t i = 0; i < ARRAY_SIZE(kc_cases); i++) {
        bool want = optind == argc && !kc_cases[i].named;

        for (int a = optind; a < argc; a++) {
            want |= !strcmp(argv[a], kc_cases[i].name) ||
                    (!strcmp(argv[a], "hostile") && kc_cases[i].hostile) ||
                    (!strcmp(argv[a], "functional") && !kc_cases[i].hostile &&
                     !kc_cases[i].named);
        }
        if (want) {
            ran++;
            failed += !kc_run(&kc_cases[i]);
        }
    }
    printf("kcheck: %d cases, %d failed\n", ran, failed);
    return failed || !ran ? 1 : 0;
}
