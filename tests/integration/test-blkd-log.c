/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests: dirty logging for live migration.  The front-end
 * library sets a log as QEMU does when a migration starts (SET_LOG_BASE,
 * SET_FEATURES with VHOST_F_LOG_ALL, SET_VRING_ADDR with
 * VHOST_VRING_F_LOG); the tests read the bitmap and check that exactly
 * the pages the daemon wrote are marked: the data pages of reads, the
 * status bytes and the used ring, and nothing else.  The packed/ cases do
 * the same with packed virtqueues, whose used descriptors are written into
 * the descriptor ring and whose device area is written for event
 * suppression.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#define QSIZE 128
#define PAGE 4096
#define NPAGES 16               /* data buffer: 64 KiB of guest memory */

typedef struct Fixture {
    VbDaemon d;
    VhostUserFrontend *fe;
    uint8_t *buf;               /* NPAGES pages */
    uint64_t buf_gpa;
    uint8_t *log;
    uint64_t log_size;
    /* packed: the device area as log_clear() found it */
    struct vring_packed_desc_event dev_snap;
} Fixture;

/* @data: non-NULL for packed virtqueues */
static void fixture_setup(Fixture *f, gconstpointer data)
{
    VbExportSpec spec = { .size = 16 << 20 };
    VhostUserFrontendOptions opts = { .queue_size = QSIZE,
                                      .packed = data != NULL };
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *img = g_malloc(NPAGES * PAGE);

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 1, &spec);
    vb_fill_pattern(img, NPAGES * PAGE, 0x1095);
    vb_write_image(&f->d, 0, 0, img, NPAGES * PAGE);
    vb_daemon_start(&f->d);
    f->fe = vb_connect(&f->d, 0, &opts);
    vb_start(f->fe);
    f->buf = vhost_user_frontend_mem_alloc(f->fe, NPAGES * PAGE, PAGE, &err);
    g_assert_no_error(err);
    g_assert_true(vhost_user_frontend_host_to_gpa(f->fe, f->buf,
                                                  NPAGES * PAGE,
                                                  &f->buf_gpa));
    g_assert_true(vhost_user_frontend_log_start(f->fe, 0, &err));
    g_assert_no_error(err);
    f->log = vhost_user_frontend_log(f->fe, &f->log_size);
    g_assert_nonnull(f->log);
    g_assert_cmpuint(f->log_size, ==, vhost_user_frontend_log_size(f->fe));
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vhost_user_frontend_free(f->fe);
    g_assert_true(vb_daemon_alive(&f->d));
    vb_daemon_cleanup(&f->d);
}

static bool page_marked(Fixture *f, uint64_t gpa)
{
    uint64_t page = gpa / PAGE;

    g_assert_cmpuint(page / 8, <, f->log_size);
    return __atomic_load_n(&f->log[page / 8], __ATOMIC_RELAXED) &
           (1u << (page % 8));
}

static unsigned int count_marked(Fixture *f)
{
    unsigned int n = 0;

    for (uint64_t i = 0; i < f->log_size; i++) {
        n += __builtin_popcount(f->log[i]);
    }
    return n;
}

static uint64_t gpa_of(Fixture *f, const void *p)
{
    uint64_t gpa;

    g_assert_true(vhost_user_frontend_host_to_gpa(f->fe, p, 1, &gpa));
    return gpa;
}

/*
 * The pages the device may write besides data: the used ring (and
 * avail_event after it) and the header/status slots; the library lays
 * out the rings and slots back to back at the start of region 0.
 */
static bool page_is_ring_or_slot(Fixture *f, uint64_t page)
{
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    uint64_t start, end;

    vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
    /* packed: used descriptors go into the descriptor ring, which the
     * library lays out first */
    start = gpa_of(f, vhost_user_frontend_is_packed(f->fe) ? (void *)desc
                                                           : (void *)used) /
            PAGE;
    end = (gpa_of(f, vhost_user_frontend_req_slot(f->fe, 0, QSIZE - 1)) +
           32) / PAGE;
    return page >= start && page <= end;
}

/* Every marked page is a data page in [first, last] or a ring/slot page. */
static void assert_marked_only(Fixture *f, uint64_t first_gpa,
                               uint64_t len)
{
    for (uint64_t page = 0; page < f->log_size * 8; page++) {
        uint64_t gpa = page * PAGE;
        bool data = len && gpa + PAGE > first_gpa && gpa < first_gpa + len;

        if (page_marked(f, gpa) && !data && !page_is_ring_or_slot(f, page)) {
            g_test_fail_printf("page %" PRIu64 " (gpa 0x%" PRIx64 ") marked "
                               "but the device did not write it", page, gpa);
            return;
        }
    }
}

/* Clear the log, and note the packed device area to see what changes. */
static void log_clear(Fixture *f)
{
    memset(f->log, 0, f->log_size);
    if (vhost_user_frontend_is_packed(f->fe)) {
        struct vring_packed_desc *ring;
        struct vring_packed_desc_event *drv, *dev;

        vhost_user_frontend_packed_rings(f->fe, 0, &ring, &drv, &dev);
        /* after the clear: a change the log missed shows up below */
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        memcpy(&f->dev_snap, dev, sizeof(*dev));
    }
}

static void assert_used_ring_marked(Fixture *f)
{
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;

    vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
    if (vhost_user_frontend_is_packed(f->fe)) {
        struct vring_packed_desc *ring;
        struct vring_packed_desc_event *drv, *dev;

        vhost_user_frontend_packed_rings(f->fe, 0, &ring, &drv, &dev);
        /* the used descriptors are always written */
        g_assert_true(page_marked(f, gpa_of(f, ring)));
        /*
         * The device area (kick suppression) is written only when the
         * device changes its mind about kicks, which depends on whether
         * its iothread was polling: when it changed since log_clear(), it
         * must be marked.  The iothread may store it after the completion
         * we reaped (turning kicks off as it starts polling) and mark it
         * just after the store: wait for the mark, up to 10 s.
         */
        if (memcmp(dev, &f->dev_snap, sizeof(*dev))) {
            for (int i = 0; i < 10000 && !page_marked(f, gpa_of(f, dev));
                 i++) {
                g_usleep(1000);
            }
            g_assert_true(page_marked(f, gpa_of(f, dev)));
        }
        /* the driver area (a page of its own) is the driver's */
        g_assert_false(page_marked(f, gpa_of(f, drv)));
        return;
    }
    g_assert_true(page_marked(f, gpa_of(f, &used->idx)));
}

/* A read of 8 KiB marks its two data pages, the used ring and the status
 * slot; the next data page (not written) stays clear. */
static void test_read_marks_data(Fixture *f, gconstpointer data)
{
    uint32_t len;

    log_clear(f);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 2 * PAGE,
                           true, &len), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(len, ==, 2 * PAGE + 1);
    g_assert_true(vb_check_pattern(f->buf, 2 * PAGE, 0x1095));
    g_assert_true(page_marked(f, f->buf_gpa));
    g_assert_true(page_marked(f, f->buf_gpa + PAGE));
    g_assert_false(page_marked(f, f->buf_gpa + 2 * PAGE));
    assert_used_ring_marked(f);
    assert_marked_only(f, f->buf_gpa, 2 * PAGE);

    /* a read that starts mid-page and ends mid-page marks both pages */
    log_clear(f);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0,
                           f->buf + 5 * PAGE + 3584, 1024, true, NULL), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_true(page_marked(f, f->buf_gpa + 5 * PAGE));
    g_assert_true(page_marked(f, f->buf_gpa + 6 * PAGE));
    assert_marked_only(f, f->buf_gpa + 5 * PAGE + 3584, 1024);
}

/* A write: the device only reads the data, so its pages stay clear (the
 * status byte and the used ring are marked). */
static void test_write_marks_no_data(Fixture *f, gconstpointer data)
{
    log_clear(f);
    vb_fill_pattern(f->buf, 4 * PAGE, 0x77);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 64, f->buf, 4 * PAGE,
                           false, NULL), ==, VIRTIO_BLK_S_OK);
    for (unsigned int i = 0; i < NPAGES; i++) {
        g_assert_false(page_marked(f, f->buf_gpa + i * PAGE));
    }
    assert_used_ring_marked(f);
    assert_marked_only(f, 0, 0);
}

/* LOG_ALL off: nothing is marked any more; on again: marked again. */
static void test_log_off_on(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;

    g_assert_true(vhost_user_frontend_log_stop(f->fe, &err));
    g_assert_no_error(err);
    log_clear(f);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, PAGE, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(count_marked(f), ==, 0);

    g_assert_true(vhost_user_frontend_log_start(f->fe, 0, &err));
    g_assert_no_error(err);
    log_clear(f);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf + 3 * PAGE,
                           PAGE, true, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(page_marked(f, f->buf_gpa + 3 * PAGE));
    assert_marked_only(f, f->buf_gpa + 3 * PAGE, PAGE);
}

/*
 * Logging switched off and on while requests are in flight: the daemon
 * drains them (each completes once, with the right data), switches, and
 * requests after the switch are logged.
 */
static void test_switch_in_flight(Fixture *f, gconstpointer data)
{
    const unsigned int n = NPAGES;
    VhostUserFrontendCompletion c[NPAGES];
    g_autoptr(GError) err = NULL;

    for (int round = 0; round < 4; round++) {
        memset(f->buf, 0, n * PAGE);
        for (unsigned int i = 0; i < n; i++) {
            struct iovec iov = { f->buf + i * PAGE, PAGE };

            g_assert_cmpint(vhost_user_frontend_blk_submit(
                                f->fe, 0, VIRTIO_BLK_T_IN, i * (PAGE / 512),
                                &iov, 1, true, NULL), >=, 0);
        }
        g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
        if (round % 2 == 0) {
            g_assert_true(vhost_user_frontend_log_stop(f->fe, &err));
        } else {
            g_assert_true(vhost_user_frontend_log_start(f->fe, 0, &err));
        }
        g_assert_no_error(err);
        g_assert_cmpint(vb_reap_n(f->fe, 0, c, n), ==, n);
        for (unsigned int i = 0; i < n; i++) {
            g_assert_cmpuint(c[i].status, ==, VIRTIO_BLK_S_OK);
        }
        g_assert_true(vb_check_pattern(f->buf, n * PAGE, 0x1095));
    }
    /* logging is on after the last round: a new read is logged */
    log_clear(f);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf + 7 * PAGE,
                           PAGE, true, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(page_marked(f, f->buf_gpa + 7 * PAGE));
    assert_marked_only(f, f->buf_gpa + 7 * PAGE, PAGE);
}

/*
 * GET_VRING_BASE with logging on (what QEMU does at the end of a
 * migration): the answer covers every request, and a front-end that
 * restarts the queue from that base goes on with logging.
 */
static void test_stop_restart_logged(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    uint16_t base;

    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, PAGE, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vhost_user_frontend_stop(f->fe, &base, &err));
    g_assert_no_error(err);
    g_assert_true(vhost_user_frontend_start(f->fe, &err));
    g_assert_no_error(err);
    log_clear(f);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf + 9 * PAGE,
                           PAGE, true, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(page_marked(f, f->buf_gpa + 9 * PAGE));
    assert_used_ring_marked(f);
    assert_marked_only(f, f->buf_gpa + 9 * PAGE, PAGE);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
#define ADD(name, fn) \
    g_test_add("/vhost-blkd/log/" name, Fixture, NULL, fixture_setup, fn, \
               fixture_teardown)
    ADD("read-marks-data", test_read_marks_data);
    ADD("write-marks-no-data", test_write_marks_no_data);
    ADD("off-on", test_log_off_on);
    ADD("switch-in-flight", test_switch_in_flight);
    ADD("stop-restart", test_stop_restart_logged);
#undef ADD
#define ADD_PACKED(name, fn) \
    g_test_add("/vhost-blkd/log/packed/" name, Fixture, GINT_TO_POINTER(1), \
               fixture_setup, fn, fixture_teardown)
    ADD_PACKED("read-marks-data", test_read_marks_data);
    ADD_PACKED("write-marks-no-data", test_write_marks_no_data);
    ADD_PACKED("off-on", test_log_off_on);
    ADD_PACKED("switch-in-flight", test_switch_in_flight);
    ADD_PACKED("stop-restart", test_stop_restart_logged);
#undef ADD_PACKED
    return g_test_run();
}
