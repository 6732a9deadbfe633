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
 * WRITE_ZEROES contents, read-only images, the write-cache ioctl and
 * unsupported types.  Hostile cases build rings by hand and expect the
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
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define KC_QSIZE 64
#define KC_HI 32                /* hand-built chains use descriptors >= this */
#define KC_WAIT_STEPS 600       /* x 100 ms: a hang detector, not a timing */

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

typedef struct KcCase {
    const char *name;
    bool (*fn)(Kc *k);
    bool read_only;
    bool hostile;
    bool raw;                   /* fn opens what it needs */
    uint64_t features;          /* 0 = the library's default set */
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
        bool want = optind == argc;

        for (int a = optind; a < argc; a++) {
            want |= !strcmp(argv[a], kc_cases[i].name) ||
                    (!strcmp(argv[a], "hostile") && kc_cases[i].hostile) ||
                    (!strcmp(argv[a], "functional") && !kc_cases[i].hostile);
        }
        if (want) {
            ran++;
            failed += !kc_run(&kc_cases[i]);
        }
    }
    printf("kcheck: %d cases, %d failed\n", ran, failed);
    return failed || !ran ? 1 : 0;
}
