/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration test: SIGKILL the back-end with writes in flight, restart it
 * on the same socket, reconnect as QEMU does (inflight region handed back,
 * vring base = used index): every write completes and is on disk.  The
 * driver's write-cache choice survives the restart as well.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#include <sys/mman.h>
#include <sys/syscall.h>

#define NREQ 64
#define REQ_BYTES 65536

typedef struct Fixture {
    VbDaemon d;
    VhostUserFrontend *fe;
} Fixture;

static void fixture_setup(Fixture *f, gconstpointer data)
{
    VbExportSpec spec = { .num_queues = 1, .size = 64 << 20 };
    VhostUserFrontendOptions opts = { .queue_size = 256, .mem_size = 32 << 20,
                                      .packed = data != NULL };
    g_autoptr(GError) err = NULL;

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 1, &spec);
    vb_daemon_start(&f->d);
    f->fe = vb_connect(&f->d, 0, &opts);
    vb_start(f->fe);
    g_assert_true(vhost_user_frontend_is_packed(f->fe) == (data != NULL));
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vhost_user_frontend_free(f->fe);
    vb_daemon_cleanup(&f->d);
}

static void test_sigkill_inflight(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    VhostUserFrontendCompletion c[NREQ];
    uint8_t *buf;
    g_autofree uint8_t *img = g_malloc(REQ_BYTES);
    bool seen[NREQ] = { false };
    uint64_t inflight_size;
    int n;

    if (vb_backend() == VB_BACKEND_QSD &&
        !(vhost_user_frontend_get_protocol_features(f->fe) &
          (1ULL << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD))) {
        g_test_skip("qemu-storage-daemon offers no INFLIGHT_SHMFD");
        return;
    }
    g_assert_true(vhost_user_frontend_get_protocol_features(f->fe) &
                  (1ULL << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD));
    g_assert_cmpint(vhost_user_frontend_inflight_fd(f->fe, &inflight_size),
                    >=, 0);
    g_assert_cmpuint(inflight_size, >=,
                     vhost_user_inflight_queue_size_fmt(256, data != NULL));

    buf = vhost_user_frontend_mem_alloc(f->fe, (size_t)NREQ * REQ_BYTES, 4096,
                                        &err);
    g_assert_no_error(err);
    for (int i = 0; i < NREQ; i++) {
        struct iovec iov = { buf + (size_t)i * REQ_BYTES, REQ_BYTES };

        vb_fill_pattern(iov.iov_base, REQ_BYTES, 500 + i);
        /* spread over the disk so the writes really go to storage */
        g_assert_cmpint(vhost_user_frontend_blk_submit(
                            f->fe, 0, VIRTIO_BLK_T_OUT,
                            (uint64_t)i * (REQ_BYTES / 512) * 2, &iov, 1,
                            false, GINT_TO_POINTER(i + 1)), >=, 0);
    }
    g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
    vb_daemon_kill(&f->d);      /* kill -9, nothing reaped */
    if (!vhost_user_frontend_is_packed(f->fe)) {
        struct vring_desc *desc;
        struct vring_avail *avail;
        struct vring_used *used;

        vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
        g_test_message("at SIGKILL: %d of %d writes in the used ring",
                       used->idx, NREQ);
    }

    vb_daemon_start(&f->d);
    vhost_user_frontend_reconnect(f->fe, 10000, &err);
    g_assert_no_error(err);

    n = vb_reap_n(f->fe, 0, c, NREQ);
    g_assert_cmpint(n, ==, NREQ);
    for (int i = 0; i < n; i++) {
        int idx = GPOINTER_TO_INT(c[i].opaque) - 1;

        g_assert_cmpint(idx, >=, 0);
        g_assert_cmpint(idx, <, NREQ);
        g_assert_false(seen[idx]);
        seen[idx] = true;
        g_assert_cmpint(c[i].status, ==, VIRTIO_BLK_S_OK);
    }
    g_assert_cmpuint(vhost_user_frontend_outstanding(f->fe, 0), ==, 0);

    /* every acknowledged write is on disk, through the device and in the
     * file */
    for (int i = 0; i < NREQ; i++) {
        uint64_t sector = (uint64_t)i * (REQ_BYTES / 512) * 2;

        memset(buf, 0, REQ_BYTES);
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, sector, buf,
                               REQ_BYTES, true, NULL), ==, VIRTIO_BLK_S_OK);
        g_assert_true(vb_check_pattern(buf, REQ_BYTES, 500 + i));
        vb_read_image(&f->d, 0, sector * 512, img, REQ_BYTES);
        g_assert_true(vb_check_pattern(img, REQ_BYTES, 500 + i));
    }

    /* a second restart with nothing in flight also works */
    vb_daemon_kill(&f->d);
    vb_daemon_start(&f->d);
    vhost_user_frontend_reconnect(f->fe, 10000, &err);
    g_assert_no_error(err);
    vb_fill_pattern(buf, 4096, 77);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 1, buf, 4096, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    vb_read_image(&f->d, 0, 512, img, 4096);
    g_assert_true(vb_check_pattern(img, 4096, 77));
}

/* A clean stop (GET_VRING_BASE) reports where the device stopped. */
static void test_stop(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    uint8_t *buf = vhost_user_frontend_mem_alloc(f->fe, 4096, 4096, &err);
    uint16_t base = 0xffff;

    g_assert_no_error(err);
    for (int i = 0; i < 5; i++) {
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, i, buf, 4096, true,
                               NULL), ==, VIRTIO_BLK_S_OK);
    }
    vhost_user_frontend_stop(f->fe, &base, &err);
    g_assert_no_error(err);
    if (data) {
        /* packed: five buffers of three descriptors, wrap counter 1 (the
         * low half of the base: next available slot and its wrap) */
        g_assert_cmphex(base, ==, 15 | 0x8000);
    } else {
        g_assert_cmpuint(base, ==, 5);
    }
    vhost_user_frontend_disconnect(f->fe);
    /* the export accepts a new session afterwards */
    vb_check_export_works(&f->d, 0);
}

/* ---- write cache across a restart ------------------------------------ */

#ifndef __NR_cachestat
#define __NR_cachestat 451      /* the same number on every architecture */
#endif

/* cachestat(2) (Linux 6.5), declared here for older headers. */
typedef struct VbCachestatRange {
    uint64_t off;
    uint64_t len;
} VbCachestatRange;

typedef struct VbCachestat {
    uint64_t nr_cache;
    uint64_t nr_dirty;
    uint64_t nr_writeback;
    uint64_t nr_evicted;
    uint64_t nr_recently_evicted;
} VbCachestat;

/*
 * Page-cache pages of the image in [@off, @off + @len) that are dirty or
 * under writeback, or -1 if the kernel cannot tell.  With cache=writeback
 * a plain write leaves its pages dirty, a FUA (RWF_DSYNC) write leaves
 * them clean: that is how the test sees which one the daemon issued
 * without reading its counters.
 */
static int64_t image_unwritten_pages(VbDaemon *d, uint64_t off, uint64_t len)
{
    VbCachestatRange range = { .off = off, .len = len };
    VbCachestat cs = { 0 };
    int fd = open(d->image[0], O_RDONLY | O_CLOEXEC);
    long r;

    g_assert_cmpint(fd, >=, 0);
    r = syscall(__NR_cachestat, fd, &range, &cs, 0);
    close(fd);
    if (r < 0) {
        return -1;
    }
    return cs.nr_dirty + cs.nr_writeback;
}

static uint8_t get_wce(VhostUserFrontend *fe)
{
    g_autoptr(GError) err = NULL;
    uint8_t wce = 0xff;

    vhost_user_frontend_get_config(fe, offsetof(struct virtio_blk_config, wce),
                                   &wce, 1, &err);
    g_assert_no_error(err);
    return wce;
}

static void set_wce(VhostUserFrontend *fe, uint8_t wce)
{
    g_autoptr(GError) err = NULL;

    vhost_user_frontend_set_config(fe, offsetof(struct virtio_blk_config, wce),
                                   &wce, 1, &err);
    g_assert_no_error(err);
}

/* Write 64 KiB at @off (bytes) through the device; return the pages it
 * left dirty in the host's page cache (-1: cannot tell). */
static int64_t write_and_count_dirty(Fixture *f, uint8_t *buf, uint64_t off,
                                     uint32_t seed)
{
    vb_fill_pattern(buf, REQ_BYTES, seed);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, off / 512, buf,
                           REQ_BYTES, false, NULL), ==, VIRTIO_BLK_S_OK);
    return image_unwritten_pages(&f->d, off, REQ_BYTES);
}

static void restart_daemon(Fixture *f)
{
    g_autoptr(GError) err = NULL;

    vb_daemon_kill(&f->d);      /* kill -9: nothing is saved on the way */
    vb_daemon_start(&f->d);
    vhost_user_frontend_reconnect(f->fe, 10000, &err);
    g_assert_no_error(err);
}

static void fixture_setup_buffered(Fixture *f, gconstpointer data)
{
    /* cache=writeback: writethrough is visible in the page cache */
    VbExportSpec spec = { .num_queues = 1, .size = 64 << 20,
                          .extra = "cache=writeback" };
    VhostUserFrontendOptions opts = { .queue_size = 256, .mem_size = 32 << 20 };

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 1, &spec);
    vb_daemon_start(&f->d);
    f->fe = vb_connect(&f->d, 0, &opts);
    vb_start(f->fe);
}

/*
 * A driver that chose writethrough (SET_CONFIG writeback = 0) keeps it
 * after the back-end is killed and restarted: QEMU keeps serving its own
 * copy of the config space to the guest and sends nothing on reconnect,
 * so the new process must find the choice by itself (in the inflight
 * region QEMU hands back).  Checked twice: the config space the new
 * process serves, and the writes it issues (FUA: no dirty pages left).
 * Then the way back: writeback chosen again survives a restart too.
 */
static void test_sigkill_keeps_writethrough(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    uint8_t *buf;
    int64_t dirty;
    bool observable;

    if (vb_backend() == VB_BACKEND_QSD) {
        g_test_skip("vhost-blkd specific (cache=writeback, config write)");
        return;
    }
    buf = vhost_user_frontend_mem_alloc(f->fe, REQ_BYTES, 4096, &err);
    g_assert_no_error(err);

    g_assert_cmpuint(get_wce(f->fe), ==, 1);
    dirty = write_and_count_dirty(f, buf, 1 << 20, 1);
    observable = dirty > 0;
    g_test_message("writeback: %" PRId64 " pages left dirty%s", dirty,
                   observable ? "" : " (the write mode cannot be observed "
                   "here: only the config space is checked)");

    set_wce(f->fe, 0);
    g_assert_cmpuint(get_wce(f->fe), ==, 0);
    dirty = write_and_count_dirty(f, buf, 2 << 20, 2);
    g_test_message("writethrough: %" PRId64 " pages left dirty", dirty);
    if (observable) {
        g_assert_cmpint(dirty, ==, 0);
    }

    restart_daemon(f);
    {
        uint8_t wce = get_wce(f->fe);

        dirty = write_and_count_dirty(f, buf, 3 << 20, 3);
        g_test_message("after the restart: writeback byte %u, %" PRId64
                       " pages left dirty by a write", wce, dirty);
        g_assert_cmpuint(wce, ==, 0);
        if (observable) {
            g_assert_cmpint(dirty, ==, 0);
        }
    }
    vb_read_image(&f->d, 0, 3 << 20, buf, REQ_BYTES);
    g_assert_true(vb_check_pattern(buf, REQ_BYTES, 3));

    /* The way back: writeback again, and that survives a restart too. */
    set_wce(f->fe, 1);
    restart_daemon(f);
    g_assert_cmpuint(get_wce(f->fe), ==, 1);
    dirty = write_and_count_dirty(f, buf, 4 << 20, 4);
    g_test_message("writeback after a restart: %" PRId64 " pages left "
                   "dirty", dirty);
    if (observable) {
        g_assert_cmpint(dirty, >, 0);
    }

    /* A writeback byte that is neither 0 nor 1 is not trusted: the new
     * process warns and serves its default. */
    set_wce(f->fe, 0);
    {
        uint64_t size;
        int fd = vhost_user_frontend_inflight_fd(f->fe, &size);
        size_t off = vhost_user_inflight_state_offset(1, 256);
        VhostUserInflightState *st;
        uint8_t *map;

        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpuint(size, >=, off + sizeof(*st));
        map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        g_assert_true(map != MAP_FAILED);
        st = (VhostUserInflightState *)(map + off);
        g_assert_cmphex(st->magic, ==, VHOST_USER_INFLIGHT_STATE_MAGIC);
        g_assert_cmpuint(st->data_len, >=, 1);
        g_assert_cmpuint(st->data[0], ==, 0);
        st->data[0] = 7;
        restart_daemon(f);
        g_assert_cmpuint(get_wce(f->fe), ==, 1);
        /* ... and rewrites it from what it serves */
        g_assert_cmpuint(st->data[0], ==, 1);
        munmap(map, size);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    /* a failed check marks its case failed and the program goes on: the
     * fixture teardown kills the daemon and the other cases still run */
    g_test_set_nonfatal_assertions();
    g_test_add("/vhost-blkd/reconnect/sigkill-inflight", Fixture, NULL,
               fixture_setup, test_sigkill_inflight, fixture_teardown);
    g_test_add("/vhost-blkd/reconnect/packed/sigkill-inflight", Fixture,
               GINT_TO_POINTER(1), fixture_setup, test_sigkill_inflight,
               fixture_teardown);
    g_test_add("/vhost-blkd/reconnect/packed/stop-get-vring-base", Fixture,
               GINT_TO_POINTER(1), fixture_setup, test_stop,
               fixture_teardown);
    g_test_add("/vhost-blkd/reconnect/stop-get-vring-base", Fixture, NULL,
               fixture_setup, test_stop, fixture_teardown);
    g_test_add("/vhost-blkd/reconnect/sigkill-keeps-writethrough", Fixture,
               NULL, fixture_setup_buffered, test_sigkill_keeps_writethrough,
               fixture_teardown);
    return g_test_run();
}
