/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests: a malicious front-end (rings, indirect tables, memory
 * tables, queue setup, message floods) against one vhost-blkd process with
 * two exports.  Each case ends with the request failed or the session
 * dropped (with a log line in the daemon's stderr), the daemon alive and
 * both exports serving new sessions, the images' size unchanged and a
 * guard area of each image, written before the daemon started, untouched.
 * Cases that complement these live in test-blkd-bad.c; docs/hostile-cases.md
 * lists all of them.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define QSIZE 128
#define H0 (QSIZE - 8)          /* hand-built chains use the top descriptors */
#define DROP_TIMEOUT_MS 5000
#define MEM_SIZE (64ULL << 20)  /* the library's default region size */
#define IMG_SIZE (16ULL << 20)
#define GUARD_OFF (8ULL << 20)  /* [GUARD_OFF, IMG_SIZE) is never written */
#define GUARD_SEED 0x6a4d
#define FLOOD_MSGS 100000

typedef struct Fixture {
    VbDaemon d;
    VhostUserFrontend *fe;
    uint8_t *buf;               /* 1 MiB of guest memory */
    bool packed;                /* the session uses packed rings */
} Fixture;

typedef enum Outcome {
    OUTCOME_DROPPED,            /* the daemon closed the connection */
    OUTCOME_COMPLETED,          /* a used element appeared */
    OUTCOME_NOTHING,            /* neither, within the timeout */
} Outcome;

static const char *outcome_name(Outcome o)
{
    return o == OUTCOME_DROPPED ? "session dropped" :
           o == OUTCOME_COMPLETED ? "request completed" : "nothing";
}

/* Connect to export 0 with one queue of QSIZE and start it (packed rings
 * when f->packed). */
static void fixture_connect(Fixture *f, bool no_inflight)
{
    VhostUserFrontendOptions opts = {
        .queue_size = QSIZE,
        .num_queues = 1,
        .no_inflight = no_inflight,
        .packed = f->packed,
    };
    g_autoptr(GError) err = NULL;

    f->fe = vb_connect(&f->d, 0, &opts);
    vb_start(f->fe);
    f->buf = vhost_user_frontend_mem_alloc(f->fe, 1 << 20, 4096, &err);
    g_assert_no_error(err);
}

/*
 * Requests of export 0 touching these sectors are slow (inject-delay), for
 * the cases that need a request in flight; no other case and no check
 * (vb_check_export_works() uses sectors 64..79) touches them.
 */
#define SLOW_SECTOR 1000
#define SLOW_MS 2000
#define SLOW_EXTRA "inject-delay=" G_STRINGIFY(SLOW_MS) \
                   ",inject-sector=1000-1007"

static void fixture_setup_common(Fixture *f, gconstpointer data,
                                 bool packed);

/* @data: NULL, or extra options of export 0 (vhost-blkd's -export keys). */
static void fixture_setup(Fixture *f, gconstpointer data)
{
    fixture_setup_common(f, data, false);
}

/* The same with packed virtqueues. */
static void fixture_setup_packed(Fixture *f, gconstpointer data)
{
    fixture_setup_common(f, data, true);
}

static void fixture_setup_common(Fixture *f, gconstpointer data, bool packed)
{
    /* export 0 has two queues; the front-end only sets up queue 0, so
     * queue 1 is a queue "never set up" */
    VbExportSpec spec[2] = {
        { .size = IMG_SIZE, .num_queues = 2, .extra = data },
        { .size = IMG_SIZE, .num_queues = 1 },
    };
    g_autofree uint8_t *guard = g_malloc(IMG_SIZE - GUARD_OFF);

    memset(f, 0, sizeof(*f));
    f->packed = packed;
    vb_daemon_init(&f->d, 2, spec);
    vb_fill_pattern(guard, IMG_SIZE - GUARD_OFF, GUARD_SEED);
    for (unsigned int i = 0; i < 2; i++) {
        vb_write_image(&f->d, i, GUARD_OFF, guard, IMG_SIZE - GUARD_OFF);
    }
    vb_daemon_start(&f->d);
    fixture_connect(f, false);
}

/* Nothing was written outside what the tests write: size and guard. */
static void check_images(Fixture *f)
{
    g_autofree uint8_t *guard = g_malloc(IMG_SIZE - GUARD_OFF);

    for (unsigned int i = 0; i < f->d.nexports; i++) {
        struct stat st;

        g_assert_cmpint(stat(f->d.image[i], &st), ==, 0);
        g_assert_cmpuint(st.st_size, ==, IMG_SIZE);
        vb_read_image(&f->d, i, GUARD_OFF, guard, IMG_SIZE - GUARD_OFF);
        g_assert_true(vb_check_pattern(guard, IMG_SIZE - GUARD_OFF,
                                       GUARD_SEED));
    }
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vhost_user_frontend_free(f->fe);
    f->fe = NULL;
    if (f->d.pid) {
        check_images(f);
    }
    vb_daemon_cleanup(&f->d);
}

/* The daemon is alive, both exports work on new sessions, images intact. */
static void check_survived(Fixture *f)
{
    vhost_user_frontend_free(f->fe);
    f->fe = NULL;
    if (!vb_daemon_alive(&f->d)) {
        /* crashed: fail this case; connecting would abort the program */
        g_test_fail_printf("vhost-blkd died");
        return;
    }
    vb_check_export_works(&f->d, 1);
    vb_check_export_works(&f->d, 0);
    g_assert_true(vb_daemon_alive(&f->d));
    check_images(f);
}

static uint64_t gpa_of(Fixture *f, const void *p, size_t len)
{
    uint64_t gpa;

    g_assert_true(vhost_user_frontend_host_to_gpa(f->fe, p, len, &gpa));
    return gpa;
}

static uint64_t slot_gpa(Fixture *f, uint16_t head, unsigned int off)
{
    return gpa_of(f, (uint8_t *)vhost_user_frontend_req_slot(f->fe, 0, head) +
                  off, 1);
}

/* Fill the library's header slot of @head; returns the status byte. */
static uint8_t *prep_slot(Fixture *f, uint16_t head, uint32_t type,
                          uint64_t sector)
{
    uint8_t *slot = vhost_user_frontend_req_slot(f->fe, 0, head);
    struct virtio_blk_outhdr *hdr = (void *)slot;

    hdr->type = type;
    hdr->ioprio = 0;
    hdr->sector = sector;
    slot[16] = 0xff;
    return slot + 16;
}

/* Header descriptor of a hand-built chain at @head, continuing at @next. */
static void write_hdr_desc(Fixture *f, uint16_t head, uint16_t next)
{
    vhost_user_frontend_write_desc(f->fe, 0, head, slot_gpa(f, head, 0), 16,
                                   VRING_DESC_F_NEXT, next);
}

static Outcome watch(Fixture *f, uint32_t *id, uint32_t *len)
{
    gint64 deadline = g_get_monotonic_time() + DROP_TIMEOUT_MS * 1000LL;

    while (g_get_monotonic_time() < deadline) {
        if (vhost_user_frontend_reap_raw(f->fe, 0, id, len)) {
            return OUTCOME_COMPLETED;
        }
        if (vhost_user_frontend_peer_closed(f->fe, 20)) {
            return OUTCOME_DROPPED;
        }
    }
    return OUTCOME_NOTHING;
}

/* Publish @head, kick, and see what the daemon does. */
static Outcome submit_raw_and_watch(Fixture *f, uint16_t head, uint32_t *id,
                                    uint32_t *len)
{
    vhost_user_frontend_push_avail_raw(f->fe, 0, head);
    g_assert_cmpint(vhost_user_frontend_kick_raw(f->fe, 0), ==, 1);
    return watch(f, id, len);
}

/* Dropped, or completed with an error status in a writable status byte. */
static void expect_dropped_or_failed(Fixture *f, uint16_t head,
                                     const uint8_t *status)
{
    uint32_t id, len;
    Outcome o = submit_raw_and_watch(f, head, &id, &len);

    g_test_message("outcome: %s", outcome_name(o));
    g_assert_cmpint(o, !=, OUTCOME_NOTHING);
    if (o == OUTCOME_COMPLETED) {
        g_assert_cmpuint(id, ==, head);
        g_assert_true(*status == VIRTIO_BLK_S_IOERR ||
                      *status == VIRTIO_BLK_S_UNSUPP);
    }
}

static void expect_dropped(Fixture *f, uint16_t head)
{
    uint32_t id, len;
    Outcome o = submit_raw_and_watch(f, head, &id, &len);

    g_test_message("outcome: %s", outcome_name(o));
    g_assert_cmpint(o, ==, OUTCOME_DROPPED);
}

/*
 * Send @request with NEED_REPLY and wait for the ack.  Returns the ack
 * value (0 = done), or -ECONNRESET when the daemon dropped the session.
 */
static int64_t send_acked(Fixture *f, uint32_t request, const void *payload,
                          size_t len, const int *fds, int nfds)
{
    VhostUserMsg reply;
    int r;

    r = vhost_user_frontend_send_msg_raw(f->fe, request,
                                         VHOST_USER_VERSION |
                                         VHOST_USER_NEED_REPLY,
                                         len, payload, len, fds, nfds);
    if (r == -EPIPE || r == -ECONNRESET) {
        return -ECONNRESET;
    }
    g_assert_cmpint(r, ==, 0);
    r = vhost_user_frontend_recv_raw(f->fe, &reply, NULL, NULL,
                                     DROP_TIMEOUT_MS);
    if (r == -ECONNRESET) {
        return -ECONNRESET;
    }
    g_assert_cmpint(r, ==, sizeof(uint64_t));
    g_assert_cmpuint(reply.hdr.request, ==, request);
    return (int64_t)MIN(reply.payload.u64, (uint64_t)INT64_MAX);
}

/* The message was refused (non-zero ack) or the session dropped. */
static void expect_refused(Fixture *f, int64_t r)
{
    if (r == -ECONNRESET) {
        g_test_message("outcome: session dropped");
    } else {
        g_test_message("outcome: refused with ack %" PRId64, r);
        g_assert_cmpint(r, >, 0);
    }
}

static int64_t send_state(Fixture *f, uint32_t request, uint32_t index,
                          uint32_t num)
{
    VhostUserVringState s = { .index = index, .num = num };

    return send_acked(f, request, &s, sizeof(s), NULL, 0);
}

static int make_memfd(uint64_t size)
{
    int fd = memfd_create("vb-hostile", MFD_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    return fd;
}

/* The fd of the front-end library's (single) guest memory region. */
static int find_region_fd(void)
{
    g_autoptr(GDir) dir = g_dir_open("/proc/self/fd", 0, NULL);
    const char *name;
    int found = -1;

    g_assert_nonnull(dir);
    while ((name = g_dir_read_name(dir))) {
        g_autofree char *path = g_strdup_printf("/proc/self/fd/%s", name);
        g_autofree char *target = g_file_read_link(path, NULL);

        if (target && strstr(target, "memfd:vhost-user-frontend-mem")) {
            g_assert_cmpint(found, ==, -1);
            found = atoi(name);
        }
    }
    g_assert_cmpint(found, >=, 0);
    return found;
}

/* Host address of the library's region 0 (what it sent as uva). */
static uint64_t region0_uva(Fixture *f)
{
    return (uintptr_t)vhost_user_frontend_gpa_to_host(f->fe, 0, 1);
}

/* ---- rings: indexes --------------------------------------------------- */

static void test_avail_idx_backwards(Fixture *f, gconstpointer data)
{
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;

    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
    /* one behind what the device already consumed: a jump of 65535 */
    vhost_user_frontend_set_avail_idx_raw(f->fe, 0, avail->idx - 1);
    g_assert_cmpint(vhost_user_frontend_kick_raw(f->fe, 0), ==, 1);
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    check_survived(f);
}

static void test_avail_idx_jump_exact(Fixture *f, gconstpointer data)
{
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    uint16_t start;
    unsigned int completed = 0;
    uint32_t id, len;
    Outcome o;

    /* A jump of exactly the queue size is structurally legal: the avail
     * ring then holds QSIZE entries the driver never meant (head 0 over
     * and over, an empty descriptor).  Each is a request with no header
     * and no writable byte: used with length 0 and nothing written, or
     * the session dropped; never an I/O. */
    vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
    start = avail->idx;
    for (unsigned int i = 0; i < QSIZE; i++) {
        avail->ring[(uint16_t)(start + i) % QSIZE] = 0;
    }
    vhost_user_frontend_write_desc(f->fe, 0, 0, 0, 0, 0, 0);
    vhost_user_frontend_set_avail_idx_raw(f->fe, 0, start + QSIZE);
    g_assert_cmpint(vhost_user_frontend_kick_raw(f->fe, 0), ==, 1);
    while ((o = watch(f, &id, &len)) == OUTCOME_COMPLETED) {
        g_assert_cmpuint(id, ==, 0);
        g_assert_cmpuint(len, ==, 0);   /* no writable byte: nothing written */
        completed++;
    }
    g_test_message("outcome: %s after %u completions", outcome_name(o),
                   completed);
    g_assert_cmpuint(completed, <=, QSIZE);
    g_assert_true(o == OUTCOME_DROPPED || completed == QSIZE);
    check_survived(f);
}

static void test_avail_head_out_of_range(Fixture *f, gconstpointer data)
{
    expect_dropped(f, QSIZE + 5);
    check_survived(f);
}

static void test_avail_head_twice(Fixture *f, gconstpointer data)
{
    prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);

    write_hdr_desc(f, H0, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, gpa_of(f, f->buf, 4096),
                                   4096, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   H0 + 2);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 2, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    /*
     * The same head twice, published with one avail->idx store so the
     * daemon sees both at once: the second is still in flight when it is
     * popped (published one at a time, the first could complete first and
     * reusing the head would then be legal).  The first may complete before
     * the session goes: wait for the drop whatever is reaped.
     */
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    uint32_t id, len;
    gint64 deadline = g_get_monotonic_time() + DROP_TIMEOUT_MS * 1000LL;
    bool dropped = false;
    uint16_t idx;

    vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
    idx = avail->idx;
    avail->ring[idx % QSIZE] = H0;
    avail->ring[(uint16_t)(idx + 1) % QSIZE] = H0;
    vhost_user_frontend_set_avail_idx_raw(f->fe, 0, idx + 2);
    g_assert_cmpint(vhost_user_frontend_kick_raw(f->fe, 0), ==, 1);
    while (!dropped && g_get_monotonic_time() < deadline) {
        vhost_user_frontend_reap_raw(f->fe, 0, &id, &len);
        dropped = vhost_user_frontend_peer_closed(f->fe, 20);
    }
    g_assert_true(dropped);
    check_survived(f);
}

/*
 * The same head twice while the first is a slow request still in flight:
 * the queue breaks, the session is dropped and its queue stopped with the
 * request still running; when it completes, its completion meets a broken,
 * stopped queue.  That completion used to schedule the queue's bottom half,
 * already deleted by the stop: qemu_bh_schedule(NULL), and the whole
 * daemon died.  Export 1 must be served while the request is in flight,
 * and export 0 again once it completed (a reconnect).
 */
static void test_slow_request_then_broken(Fixture *f, gconstpointer data)
{
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    uint16_t idx;

    prep_slot(f, H0, VIRTIO_BLK_T_IN, SLOW_SECTOR);
    write_hdr_desc(f, H0, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, gpa_of(f, f->buf, 4096),
                                   4096, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   H0 + 2);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 2, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    /* both in one avail->idx store: the first is popped and submitted (and
     * held back SLOW_MS), the second breaks the queue in the same batch */
    vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
    idx = avail->idx;
    avail->ring[idx % QSIZE] = H0;
    avail->ring[(uint16_t)(idx + 1) % QSIZE] = H0;
    vhost_user_frontend_set_avail_idx_raw(f->fe, 0, idx + 2);
    g_assert_cmpint(vhost_user_frontend_kick_raw(f->fe, 0), ==, 1);
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    /* export 1 works meanwhile; export 0 accepts the next session only
     * once the slow request completed, so check_survived() also checks
     * that the daemon lived through that completion */
    check_survived(f);
}

/* ---- rings: descriptors ----------------------------------------------- */

static void test_desc_next_out_of_range(Fixture *f, gconstpointer data)
{
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);

    write_hdr_desc(f, H0, QSIZE + 3);
    expect_dropped_or_failed(f, H0, status);
    check_survived(f);
}

static void test_desc_read_after_write(Fixture *f, gconstpointer data)
{
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);

    write_hdr_desc(f, H0, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, gpa_of(f, f->buf, 512),
                                   512, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   H0 + 2);
    /* device-readable after device-writable */
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 2,
                                   gpa_of(f, f->buf + 512, 512), 512,
                                   VRING_DESC_F_NEXT, H0 + 3);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 3, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    expect_dropped_or_failed(f, H0, status);
    check_survived(f);
}

static void test_desc_len_4g(Fixture *f, gconstpointer data)
{
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);

    write_hdr_desc(f, H0, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, gpa_of(f, f->buf, 1),
                                   UINT32_MAX,
                                   VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   H0 + 2);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 2, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    expect_dropped_or_failed(f, H0, status);
    check_survived(f);
}

/*
 * Every descriptor is inside guest memory (48 MiB from gpa 0), but the sum
 * of 100 of them is 4.7 GiB: more than a 32-bit length can describe.  The
 * data is device-readable (a write), so even a device that accepted it
 * would not write guest memory; the image's guard area shows it wrote no
 * disk either.
 */
static void test_len_sum_overflow(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    const unsigned int n = 102;
    struct vring_desc *table;
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_OUT, 0);

    table = vhost_user_frontend_mem_alloc(f->fe, n * sizeof(*table), 16, &err);
    g_assert_no_error(err);
    table[0] = (struct vring_desc) {
        .addr = slot_gpa(f, H0, 0), .len = 16, .flags = VRING_DESC_F_NEXT,
        .next = 1,
    };
    for (unsigned int i = 1; i < n - 1; i++) {
        table[i] = (struct vring_desc) {
            .addr = 0, .len = 48 << 20, .flags = VRING_DESC_F_NEXT,
            .next = i + 1,
        };
    }
    table[n - 1] = (struct vring_desc) {
        .addr = slot_gpa(f, H0, 16), .len = 1, .flags = VRING_DESC_F_WRITE,
    };
    vhost_user_frontend_write_desc(f->fe, 0, H0, gpa_of(f, table, 16 * n),
                                   16 * n, VRING_DESC_F_INDIRECT, 0);
    expect_dropped_or_failed(f, H0, status);
    check_survived(f);
}

/* Buffers that end exactly at the last byte of guest memory are fine: a
 * data buffer, then a status byte that is the region's last byte. */
static void test_region_end_exact(Fixture *f, gconstpointer data)
{
    uint64_t gpa = MEM_SIZE - 4096;
    uint8_t *tail = vhost_user_frontend_gpa_to_host(f->fe, gpa, 4096);
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 8);
    g_autofree uint8_t *pattern = g_malloc(4096);
    uint32_t id, len;
    Outcome o;

    g_assert_nonnull(tail);
    /* sector 8 of export 0 holds a known pattern */
    vb_fill_pattern(f->buf, 4096, 77);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 8, f->buf, 4096, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    memset(tail, 0, 4096);
    write_hdr_desc(f, H0, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, gpa, 4096,
                                   VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   H0 + 2);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 2, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    o = submit_raw_and_watch(f, H0, &id, &len);
    g_assert_cmpint(o, ==, OUTCOME_COMPLETED);
    g_assert_cmpuint(id, ==, H0);
    g_assert_cmpint(*status, ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(len, ==, 4097);
    vb_fill_pattern(pattern, 4096, 77);
    g_assert_cmpmem(tail, 4096, pattern, 4096);

    /* 7 sectors of data, then a status byte that is the region's last */
    prep_slot(f, H0, VIRTIO_BLK_T_IN, 8);
    memset(tail, 0, 4096);
    tail[4095] = 0xff;
    write_hdr_desc(f, H0, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, MEM_SIZE - 1 - 3584,
                                   3584, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   H0 + 2);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 2, MEM_SIZE - 1, 1,
                                   VRING_DESC_F_WRITE, 0);
    o = submit_raw_and_watch(f, H0, &id, &len);
    g_assert_cmpint(o, ==, OUTCOME_COMPLETED);
    g_assert_cmpuint(len, ==, 3585);
    g_assert_cmpint(tail[4095], ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(tail + 4095 - 3584, 3584, pattern, 3584);
    check_survived(f);
}

static void test_region_end_one_past(Fixture *f, gconstpointer data)
{
    uint8_t *tail = vhost_user_frontend_gpa_to_host(f->fe, MEM_SIZE - 4096,
                                                    4096);
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);

    memset(tail, 0xee, 4096);
    write_hdr_desc(f, H0, H0 + 1);
    /* data ends one byte past the region */
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, MEM_SIZE - 4095, 4096,
                                   VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   H0 + 2);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 2, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    expect_dropped(f, H0);
    g_assert_cmpint(*status, ==, 0xff);
    for (unsigned int i = 0; i < 4096; i++) {
        g_assert_cmpint(tail[i], ==, 0xee);
    }
    check_survived(f);
    fixture_connect(f, false);

    /* a status descriptor one past the last byte */
    tail = vhost_user_frontend_gpa_to_host(f->fe, MEM_SIZE - 4096, 4096);
    status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);
    write_hdr_desc(f, H0, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, gpa_of(f, f->buf, 512),
                                   512, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   H0 + 2);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 2, MEM_SIZE, 1,
                                   VRING_DESC_F_WRITE, 0);
    expect_dropped(f, H0);
    check_survived(f);
}

static void test_sector_wrap(Fixture *f, gconstpointer data)
{
    static const uint64_t sectors[] = {
        UINT64_MAX,                     /* sector << 9 wraps */
        UINT64_MAX >> 9,                /* offset fits, offset + len wraps */
        IMG_SIZE / 512 - 7,             /* 8 sectors, the last one past */
    };

    for (unsigned int i = 0; i < G_N_ELEMENTS(sectors); i++) {
        memset(f->buf, 0x33, 4096);
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, sectors[i], f->buf,
                               4096, false, NULL), ==, VIRTIO_BLK_S_IOERR);
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, sectors[i], f->buf,
                               4096, true, NULL), ==, VIRTIO_BLK_S_IOERR);
    }
    check_survived(f);
}

/* ---- rings: indirect tables ------------------------------------------- */

/* An indirect table of @n entries in guest memory, zeroed. */
static struct vring_desc *alloc_table(Fixture *f, unsigned int n)
{
    g_autoptr(GError) err = NULL;
    struct vring_desc *t = vhost_user_frontend_mem_alloc(f->fe, 16 * n, 16,
                                                         &err);

    g_assert_no_error(err);
    memset(t, 0, 16 * n);
    return t;
}

static void test_indirect_loop(Fixture *f, gconstpointer data)
{
    struct vring_desc *t = alloc_table(f, 3);
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);

    t[0] = (struct vring_desc) { slot_gpa(f, H0, 0), 16, VRING_DESC_F_NEXT, 1 };
    t[1] = (struct vring_desc) { gpa_of(f, f->buf, 512), 512,
                                 VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 2 };
    t[2] = (struct vring_desc) { gpa_of(f, f->buf + 512, 512), 512,
                                 VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 1 };
    vhost_user_frontend_write_desc(f->fe, 0, H0, gpa_of(f, t, 48), 48,
                                   VRING_DESC_F_INDIRECT, 0);
    expect_dropped_or_failed(f, H0, status);
    check_survived(f);
}

static void test_indirect_nested(Fixture *f, gconstpointer data)
{
    struct vring_desc *inner = alloc_table(f, 2);
    struct vring_desc *outer = alloc_table(f, 2);
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);

    inner[0] = (struct vring_desc) { slot_gpa(f, H0, 0), 16,
                                     VRING_DESC_F_NEXT, 1 };
    inner[1] = (struct vring_desc) { slot_gpa(f, H0, 16), 1,
                                     VRING_DESC_F_WRITE, 0 };
    /* the outer table points at the inner one: nested, not allowed */
    outer[0] = (struct vring_desc) { gpa_of(f, inner, 32), 32,
                                     VRING_DESC_F_INDIRECT, 0 };
    vhost_user_frontend_write_desc(f->fe, 0, H0, gpa_of(f, outer, 16), 16,
                                   VRING_DESC_F_INDIRECT, 0);
    expect_dropped_or_failed(f, H0, status);
    check_survived(f);
}

static void test_indirect_self(Fixture *f, gconstpointer data)
{
    struct vring_desc *t = alloc_table(f, 2);
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);

    /* entry 1 is an indirect descriptor pointing at its own table */
    t[0] = (struct vring_desc) { slot_gpa(f, H0, 0), 16, VRING_DESC_F_NEXT, 1 };
    t[1] = (struct vring_desc) { gpa_of(f, t, 32), 32, VRING_DESC_F_INDIRECT,
                                 0 };
    vhost_user_frontend_write_desc(f->fe, 0, H0, gpa_of(f, t, 32), 32,
                                   VRING_DESC_F_INDIRECT, 0);
    expect_dropped_or_failed(f, H0, status);
    check_survived(f);
}

static void test_indirect_bad_size(Fixture *f, gconstpointer data)
{
    static const uint32_t lens[] = { 0, 17, 16 * 2048 };

    for (unsigned int i = 0; i < G_N_ELEMENTS(lens); i++) {
        struct vring_desc *t;
        uint8_t *status;

        if (!f->fe) {
            fixture_connect(f, false);
        }
        t = alloc_table(f, 2048);
        status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);
        t[0] = (struct vring_desc) { slot_gpa(f, H0, 0), 16,
                                     VRING_DESC_F_NEXT, 1 };
        t[1] = (struct vring_desc) { slot_gpa(f, H0, 16), 1,
                                     VRING_DESC_F_WRITE, 0 };
        g_test_message("indirect table of %u bytes", lens[i]);
        vhost_user_frontend_write_desc(f->fe, 0, H0, gpa_of(f, t, 16), lens[i],
                                       VRING_DESC_F_INDIRECT, 0);
        expect_dropped_or_failed(f, H0, status);
        check_survived(f);
    }
}

static void test_indirect_outside_memory(Fixture *f, gconstpointer data)
{
    static const uint64_t addrs[] = { MEM_SIZE, MEM_SIZE - 16, UINT64_MAX - 15 };

    for (unsigned int i = 0; i < G_N_ELEMENTS(addrs); i++) {
        uint8_t *status;

        if (!f->fe) {
            fixture_connect(f, false);
        }
        status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);
        g_test_message("indirect table at 0x%" PRIx64 " (32 bytes)", addrs[i]);
        vhost_user_frontend_write_desc(f->fe, 0, H0, addrs[i], 32,
                                       VRING_DESC_F_INDIRECT, 0);
        expect_dropped_or_failed(f, H0, status);
        check_survived(f);
    }
}

static void test_indirect_with_next(Fixture *f, gconstpointer data)
{
    struct vring_desc *t = alloc_table(f, 2);
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);

    t[0] = (struct vring_desc) { slot_gpa(f, H0, 0), 16, VRING_DESC_F_NEXT, 1 };
    t[1] = (struct vring_desc) { slot_gpa(f, H0, 16), 1, VRING_DESC_F_WRITE,
                                 0 };
    vhost_user_frontend_write_desc(f->fe, 0, H0, gpa_of(f, t, 32), 32,
                                   VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT,
                                   H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    expect_dropped_or_failed(f, H0, status);
    check_survived(f);
}

/* ---- memory tables ---------------------------------------------------- */

static VhostUserMemoryRegion region(uint64_t gpa, uint64_t size, uint64_t uva,
                                    uint64_t offset)
{
    return (VhostUserMemoryRegion) {
        .guest_phys_addr = gpa, .memory_size = size,
        .userspace_addr = uva, .mmap_offset = offset,
    };
}

static int64_t send_mem_table(Fixture *f, const VhostUserMemoryRegion *r,
                              unsigned int n, const int *fds, int nfds)
{
    VhostUserMemory mem = { .nregions = n };

    memcpy(mem.regions, r, n * sizeof(*r));
    return send_acked(f, VHOST_USER_SET_MEM_TABLE, &mem,
                      offsetof(VhostUserMemory, regions) + n * sizeof(*r),
                      fds, nfds);
}

static void test_mem_overlap(Fixture *f, gconstpointer data)
{
    int fds[2] = { make_memfd(1 << 20), make_memfd(1 << 20) };
    VhostUserMemoryRegion r[2] = {
        region(0, 1 << 20, 0x7f0000000000ULL, 0),
        region(512 << 10, 1 << 20, 0x7f1000000000ULL, 0),  /* overlaps */
    };

    expect_refused(f, send_mem_table(f, r, 2, fds, 2));
    close(fds[0]);
    close(fds[1]);
    check_survived(f);
}

static void test_mem_larger_than_fd(Fixture *f, gconstpointer data)
{
    int fd = make_memfd(1 << 20);
    VhostUserMemoryRegion r = region(0, MEM_SIZE, region0_uva(f), 0);
    VhostUserMemoryRegion r2 = region(0, 1 << 20, region0_uva(f), 1 << 20);

    /* 64 MiB claimed from a 1 MiB memfd: an access past 1 MiB would be
     * SIGBUS in the daemon */
    expect_refused(f, send_mem_table(f, &r, 1, &fd, 1));
    if (vhost_user_frontend_socket_fd(f->fe) >= 0 &&
        !vhost_user_frontend_peer_closed(f->fe, 0)) {
        /* the right size, but at an offset the file does not have */
        expect_refused(f, send_mem_table(f, &r2, 1, &fd, 1));
        /* the rings were in the refused table: kicking must do nothing */
        vhost_user_frontend_kick_raw(f->fe, 0);
    }
    close(fd);
    check_survived(f);
}

/*
 * The front-end shrinks the file behind guest memory after SET_MEM_TABLE
 * (a memfd without seals can be; QEMU's memory-backend-memfd seals it).
 * The daemon's next look at the ring would be SIGBUS for the whole
 * process; it must cost this session only, with a message, and the
 * daemon must go on serving.
 */
static void test_mem_shrunk_after_table(Fixture *f, gconstpointer data)
{
    int fd = find_region_fd();
    struct stat st;

    /* the queue runs: one request completes */
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(fstat(fd, &st), ==, 0);
    g_assert_cmpint(ftruncate(fd, 0), ==, 0);
    /* this process must not touch its mapping now: kick by the eventfd */
    g_assert_cmpint(vhost_user_frontend_kick_raw(f->fe, 0), >=, 0);
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    /* give the pages back before the library unmaps and frees */
    g_assert_cmpint(ftruncate(fd, st.st_size), ==, 0);
    check_survived(f);      /* without the SIGBUS guard: "vhost-blkd died" */
}

static void test_mem_wraps(Fixture *f, gconstpointer data)
{
    int fd = make_memfd(1 << 20);
    VhostUserMemoryRegion r = region(UINT64_MAX - 4095, 1 << 20,
                                     0x7f0000000000ULL, 0);

    expect_refused(f, send_mem_table(f, &r, 1, &fd, 1));
    close(fd);
    check_survived(f);
}

static void test_mem_too_many_regions(Fixture *f, gconstpointer data)
{
    VhostUserMemory mem = { .nregions = VHOST_USER_MEM_REGIONS_MAX + 1 };

    /* nregions says 9; the payload can only hold 8 */
    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_SET_MEM_TABLE,
                        VHOST_USER_VERSION, sizeof(mem), &mem, sizeof(mem),
                        NULL, 0), ==, 0);
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    check_survived(f);
}

/*
 * The memory table is replaced (same memory, as QEMU does on hotplug)
 * while 32 requests are in flight: the daemon drains them against the old
 * mapping, maps the new one and goes on; every request completes OK and
 * the data is right.
 */
static void test_mem_replaced_in_flight(Fixture *f, gconstpointer data)
{
    const unsigned int n = 32, bs = 64 << 10;   /* 3 descriptors each */
    VhostUserFrontendCompletion c[32];
    VhostUserMemoryRegion r = region(0, MEM_SIZE, region0_uva(f), 0);
    g_autoptr(GError) err = NULL;
    uint8_t *bufs = vhost_user_frontend_mem_alloc(f->fe, n * bs, 4096, &err);
    int fd = find_region_fd();

    g_assert_no_error(err);
    /* half writes of a pattern, half reads of what the first half wrote
     * in an earlier round */
    for (unsigned int i = 0; i < n / 2; i++) {
        vb_fill_pattern(bufs + i * bs, bs, 1000 + i);
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, i * (bs / 512),
                               bufs + i * bs, bs, false, NULL), ==,
                        VIRTIO_BLK_S_OK);
    }
    for (unsigned int i = 0; i < n; i++) {
        struct iovec iov = { bufs + i * bs, bs };
        bool rd = i < n / 2;

        if (!rd) {
            vb_fill_pattern(iov.iov_base, bs, 2000 + i);
        } else {
            memset(iov.iov_base, 0, bs);
        }
        g_assert_cmpint(vhost_user_frontend_blk_submit(
                            f->fe, 0, rd ? VIRTIO_BLK_T_IN : VIRTIO_BLK_T_OUT,
                            i * (bs / 512), &iov, 1, rd,
                            (void *)(uintptr_t)i), >=, 0);
    }
    g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
    g_assert_cmpint(send_mem_table(f, &r, 1, &fd, 1), ==, 0);
    g_assert_cmpint(vb_reap_n(f->fe, 0, c, n), ==, n);
    for (unsigned int i = 0; i < n; i++) {
        unsigned int k = (uintptr_t)c[i].opaque;

        g_assert_cmpint(c[i].status, ==, VIRTIO_BLK_S_OK);
        if (k < n / 2) {
            g_assert_true(vb_check_pattern(bufs + k * bs, bs, 1000 + k));
        }
    }
    /* the session goes on with the new table */
    for (unsigned int i = n / 2; i < n; i++) {
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, i * (bs / 512),
                               bufs, bs, true, NULL), ==, VIRTIO_BLK_S_OK);
        g_assert_true(vb_check_pattern(bufs, bs, 2000 + i));
    }
    check_survived(f);
}

static void test_mem_table_empty(Fixture *f, gconstpointer data)
{
    VhostUserMemoryRegion none = { 0 };
    uint32_t id, len;
    int64_t r = send_mem_table(f, &none, 0, NULL, 0);
    Outcome o;

    g_test_message("empty table: ack %" PRId64, r);
    /* no memory: the queue stopped; a request must not be served (the
     * rings are not reachable), and nothing may crash */
    prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);
    write_hdr_desc(f, H0, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    vhost_user_frontend_push_avail_raw(f->fe, 0, H0);
    vhost_user_frontend_kick_raw(f->fe, 0);
    o = watch(f, &id, &len);
    g_test_message("outcome: %s", outcome_name(o));
    g_assert_cmpint(o, !=, OUTCOME_COMPLETED);
    check_survived(f);
}

static void test_rem_mem_reg_rings(Fixture *f, gconstpointer data)
{
    VhostUserMemRegMsg m = {
        .region = region(0, MEM_SIZE, region0_uva(f), 0),
    };
    uint32_t id, len;
    int64_t r;
    Outcome o;

    /* remove the region that holds the running rings */
    r = send_acked(f, VHOST_USER_REM_MEM_REG, &m, sizeof(m), NULL, 0);
    g_test_message("REM_MEM_REG: ack %" PRId64, r);
    prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);
    write_hdr_desc(f, H0, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    vhost_user_frontend_push_avail_raw(f->fe, 0, H0);
    vhost_user_frontend_kick_raw(f->fe, 0);
    o = watch(f, &id, &len);
    g_test_message("outcome: %s", outcome_name(o));
    g_assert_cmpint(o, !=, OUTCOME_COMPLETED);
    check_survived(f);
}

/* How many fds of the daemon, and mappings in it, are of memfds made by
 * make_memfd(). */
static void count_test_memfds(Fixture *f, unsigned int *nfds,
                              unsigned int *nmaps)
{
    g_autofree char *dirname = g_strdup_printf("/proc/%d/fd", (int)f->d.pid);
    g_autofree char *mapsname = g_strdup_printf("/proc/%d/maps",
                                                (int)f->d.pid);
    g_autoptr(GDir) dir = g_dir_open(dirname, 0, NULL);
    g_autofree char *maps = NULL;
    const char *name;

    g_assert_nonnull(dir);
    *nfds = 0;
    while ((name = g_dir_read_name(dir))) {
        g_autofree char *path = g_build_filename(dirname, name, NULL);
        g_autofree char *target = g_file_read_link(path, NULL);

        if (target && strstr(target, "memfd:vb-hostile")) {
            (*nfds)++;
        }
    }
    g_assert_true(g_file_get_contents(mapsname, &maps, NULL, NULL));
    *nmaps = 0;
    for (const char *p = maps; (p = strstr(p, "memfd:vb-hostile")); p++) {
        (*nmaps)++;
    }
}

/*
 * REM_MEM_REG with an fd: the spec says none SHOULD be sent, but a
 * back-end MAY accept one (for front-ends that send it) and must then
 * close it unused.  The region goes, the fd is closed, the session goes
 * on.  It used to be "REM_MEM_REG carries 1 file descriptors, at most 0
 * expected" and the session was dropped.
 */
static void test_rem_mem_reg_with_fd(Fixture *f, gconstpointer data)
{
    int fd = make_memfd(1 << 20);
    VhostUserMemRegMsg m = {
        .region = region(VHOST_USER_FRONTEND_REGION_STRIDE, 1 << 20,
                         0x7f0000000000ULL, 0),
    };
    g_autoptr(GError) err = NULL;
    unsigned int nfds, nmaps;

    g_assert_cmpint(send_acked(f, VHOST_USER_ADD_MEM_REG, &m, sizeof(m),
                               &fd, 1), ==, 0);
    /* the fd of a message is closed after its ack: a message with a reply
     * after it makes sure that happened */
    g_assert_cmpuint(vhost_user_frontend_get_queue_num(f->fe, &err), ==, 2);
    g_assert_no_error(err);
    count_test_memfds(f, &nfds, &nmaps);
    g_assert_cmpuint(nfds, ==, 0);      /* closed after mapping */
    g_assert_cmpuint(nmaps, ==, 1);
    g_assert_cmpint(send_acked(f, VHOST_USER_REM_MEM_REG, &m, sizeof(m),
                               &fd, 1), ==, 0);
    g_assert_cmpuint(vhost_user_frontend_get_queue_num(f->fe, &err), ==, 2);
    g_assert_no_error(err);
    count_test_memfds(f, &nfds, &nmaps);
    g_assert_cmpuint(nfds, ==, 0);
    g_assert_cmpuint(nmaps, ==, 0);
    close(fd);
    /* the session goes on */
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    check_survived(f);
}

static void test_add_mem_reg_overlap(Fixture *f, gconstpointer data)
{
    int fd = make_memfd(1 << 20);
    VhostUserMemRegMsg m = {
        .region = region(MEM_SIZE - 4096, 1 << 20, 0x7f0000000000ULL, 0),
    };

    expect_refused(f, send_acked(f, VHOST_USER_ADD_MEM_REG, &m, sizeof(m),
                                 &fd, 1));
    close(fd);
    /* the session still works if it was not dropped */
    if (!vhost_user_frontend_peer_closed(f->fe, 0)) {
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512,
                               true, NULL), ==, VIRTIO_BLK_S_OK);
    }
    check_survived(f);
}

/* ---- queue setup ------------------------------------------------------ */

static void test_vring_addr_outside(Fixture *f, gconstpointer data)
{
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    /* offsets from the end of guest memory; 1 = the ring's real address */
    static const uint64_t bad[][3] = {
        { 0, 0, 0 },                                /* nowhere (see below) */
        { 16, 1, 1 },                               /* desc table straddles */
        { 1, 4, 1 },                                /* avail ring straddles */
        { 1, 1, 8 },                                /* used ring straddles */
        { 2, 1, 1 },                                /* wraps (see below) */
    };

    for (unsigned int i = 0; i < G_N_ELEMENTS(bad); i++) {
        VhostUserVringAddr a = { .index = 0 };
        uint64_t end, ring[3];
        int64_t r;

        if (!f->fe) {
            fixture_connect(f, false);
        }
        vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
        end = region0_uva(f) + MEM_SIZE;
        ring[0] = (uintptr_t)desc;
        ring[1] = (uintptr_t)avail;
        ring[2] = (uintptr_t)used;
        for (unsigned int k = 0; k < 3; k++) {
            if (i == 0) {
                ring[k] = 0x1000 * (k + 1);
            } else if (bad[i][k] == 2) {
                ring[k] = UINT64_MAX - 15;
            } else if (bad[i][k] != 1) {
                ring[k] = end - bad[i][k];
            }
        }
        a.desc_user_addr = ring[0];
        a.avail_user_addr = ring[1];
        a.used_user_addr = ring[2];
        g_test_message("rings at 0x%" PRIx64 " 0x%" PRIx64 " 0x%" PRIx64,
                       a.desc_user_addr, a.avail_user_addr, a.used_user_addr);
        r = send_acked(f, VHOST_USER_SET_VRING_ADDR, &a, sizeof(a), NULL, 0);
        expect_refused(f, r);
        check_survived(f);
    }
}

static void test_vring_addr_misaligned(Fixture *f, gconstpointer data)
{
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    VhostUserVringAddr a = { .index = 0 };

    vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
    a.desc_user_addr = (uintptr_t)desc + 8;
    a.avail_user_addr = (uintptr_t)avail + 1;
    a.used_user_addr = (uintptr_t)used + 2;
    expect_refused(f, send_acked(f, VHOST_USER_SET_VRING_ADDR, &a, sizeof(a),
                                 NULL, 0));
    check_survived(f);
}

static void test_vring_num_bad(Fixture *f, gconstpointer data)
{
    static const uint32_t nums[] = { 0, 3, 100, 2048, 32768, 65535, 65536,
                                     UINT32_MAX };

    /* on queue 1, never set up, and on the running queue 0 */
    for (unsigned int q = 0; q < 2; q++) {
        for (unsigned int i = 0; i < G_N_ELEMENTS(nums); i++) {
            g_test_message("queue %u: SET_VRING_NUM %" PRIu32, q, nums[i]);
            expect_refused(f, send_state(f, VHOST_USER_SET_VRING_NUM, q,
                                         nums[i]));
        }
    }
    /* queue 0 keeps running with its old size */
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    check_survived(f);
}

/*
 * SET_VRING_NUM while the queue runs, to a size the front-end's rings were
 * not laid out for: the daemon stops and restarts the queue; whatever it
 * then reads from the mismatched rings must stay inside guest memory.
 */
static void test_vring_num_after_start(Fixture *f, gconstpointer data)
{
    uint32_t id, len;
    int64_t r;
    Outcome o;

    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    r = send_state(f, VHOST_USER_SET_VRING_NUM, 0, 1024);
    g_test_message("SET_VRING_NUM 1024 on a running queue: ack %" PRId64, r);
    /* the front-end goes on as if the queue had 128 entries */
    prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);
    write_hdr_desc(f, H0, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    if (r != -ECONNRESET) {
        o = submit_raw_and_watch(f, H0, &id, &len);
        g_test_message("outcome: %s", outcome_name(o));
    }
    check_survived(f);
}

static void test_kick_unconfigured_queue(Fixture *f, gconstpointer data)
{
    int kick = eventfd(0, EFD_CLOEXEC);
    uint64_t one = 1, idx = 1;
    int64_t r;

    g_assert_cmpint(kick, >=, 0);
    /* queue 1 has no size and no rings: a kick fd, enable, kicks */
    r = send_acked(f, VHOST_USER_SET_VRING_KICK, &idx, sizeof(idx), &kick, 1);
    g_test_message("SET_VRING_KICK on queue 1: ack %" PRId64, r);
    if (r != -ECONNRESET) {
        r = send_state(f, VHOST_USER_SET_VRING_ENABLE, 1, 1);
        g_test_message("SET_VRING_ENABLE on queue 1: ack %" PRId64, r);
    }
    for (int i = 0; i < 100; i++) {
        g_assert_cmpint(write(kick, &one, sizeof(one)), ==, sizeof(one));
    }
    close(kick);
    /* queue 0 is unaffected */
    if (r != -ECONNRESET) {
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512,
                               true, NULL), ==, VIRTIO_BLK_S_OK);
    }
    /* and a queue index the export does not have */
    idx = 7;
    kick = eventfd(0, EFD_CLOEXEC);
    if (r != -ECONNRESET) {
        expect_refused(f, send_acked(f, VHOST_USER_SET_VRING_KICK, &idx,
                                     sizeof(idx), &kick, 1));
    }
    close(kick);
    check_survived(f);
}

static void test_get_vring_base_never_started(Fixture *f, gconstpointer data)
{
    VhostUserVringState s = { .index = 1 };
    VhostUserMsg reply;
    int r;

    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_GET_VRING_BASE, VHOST_USER_VERSION,
                        sizeof(s), &s, sizeof(s), NULL, 0), ==, 0);
    r = vhost_user_frontend_recv_raw(f->fe, &reply, NULL, NULL,
                                     DROP_TIMEOUT_MS);
    if (r == -ECONNRESET) {
        g_test_message("outcome: session dropped");
    } else {
        g_assert_cmpint(r, ==, sizeof(VhostUserVringState));
        g_assert_cmpuint(reply.payload.state.index, ==, 1);
        g_test_message("outcome: base %" PRIu32, reply.payload.state.num);
        /* queue 0 still runs */
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512,
                               true, NULL), ==, VIRTIO_BLK_S_OK);
    }
    check_survived(f);
}

static void test_vring_state_bad(Fixture *f, gconstpointer data)
{
    expect_refused(f, send_state(f, VHOST_USER_SET_VRING_ENABLE, 0, 5));
    expect_refused(f, send_state(f, VHOST_USER_SET_VRING_BASE, 0, 70000));
    expect_refused(f, send_state(f, VHOST_USER_SET_VRING_ENABLE, 64, 1));
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    check_survived(f);
}

/* ---- inflight region --------------------------------------------------- */

static void test_inflight_fd_too_small(Fixture *f, gconstpointer data)
{
    int fd = make_memfd(100);
    VhostUserInflight in = {
        .mmap_size = 1 << 20, .mmap_offset = 0,
        .num_queues = 1, .queue_size = QSIZE,
    };

    /* the header claims 1 MiB; the file has 100 bytes */
    expect_refused(f, send_acked(f, VHOST_USER_SET_INFLIGHT_FD, &in,
                                 sizeof(in), &fd, 1));
    /* and a region too small for the geometry it claims */
    if (!vhost_user_frontend_peer_closed(f->fe, 0)) {
        in.mmap_size = 100;
        expect_refused(f, send_acked(f, VHOST_USER_SET_INFLIGHT_FD, &in,
                                     sizeof(in), &fd, 1));
    }
    close(fd);
    check_survived(f);
}

/*
 * An inflight region that fits its own geometry (queues of 2 entries) but
 * not the queue that runs (128, then 1024 entries): the daemon must not
 * track 1024 heads in a region made for 2.
 */
static void test_inflight_smaller_than_queue(Fixture *f, gconstpointer data)
{
    size_t size = vhost_user_inflight_queue_size(2);
    int fd = make_memfd(size);
    VhostUserInflight in = {
        .mmap_size = size, .mmap_offset = 0, .num_queues = 1, .queue_size = 2,
    };
    uint32_t id, len;
    int64_t r;

    vhost_user_frontend_free(f->fe);
    fixture_connect(f, true);
    /* the queue runs with 1024 entries (the rings fit in guest memory,
     * the front-end just uses the first 128), then the region arrives */
    r = send_state(f, VHOST_USER_SET_VRING_NUM, 0, 1024);
    g_test_message("SET_VRING_NUM 1024: ack %" PRId64, r);
    if (r != -ECONNRESET) {
        r = send_acked(f, VHOST_USER_SET_INFLIGHT_FD, &in, sizeof(in), &fd,
                       1);
        g_test_message("SET_INFLIGHT_FD for queues of 2: ack %" PRId64, r);
    }
    if (r != -ECONNRESET) {
        uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);
        Outcome o;

        write_hdr_desc(f, H0, H0 + 1);
        vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, slot_gpa(f, H0, 16),
                                       1, VRING_DESC_F_WRITE, 0);
        o = submit_raw_and_watch(f, H0, &id, &len);
        g_test_message("outcome: %s (status 0x%x)", outcome_name(o), *status);
    }
    close(fd);
    check_survived(f);
}

static void test_inflight_no_fd(Fixture *f, gconstpointer data)
{
    VhostUserInflight in = {
        .mmap_size = 4096, .num_queues = 1, .queue_size = QSIZE,
    };

    expect_refused(f, send_acked(f, VHOST_USER_SET_INFLIGHT_FD, &in,
                                 sizeof(in), NULL, 0));
    check_survived(f);
}

/*
 * SET_INFLIGHT_FD with a memfd the front-end did not seal, which it then
 * truncates: the daemon's next store to the region (marking a popped
 * request in flight) hits a page that is gone.  That was SIGBUS for the
 * whole process; it must cost this session only, with a message.  (QEMU
 * hands back the region the back-end made, sealed against shrinking; a
 * hostile or buggy VMM need not.)
 */
static void test_inflight_shrunk_after_set(Fixture *f, gconstpointer data)
{
    size_t size = vhost_user_inflight_queue_size(QSIZE);
    int fd = make_memfd(size);
    VhostUserInflight in = {
        .mmap_size = size, .mmap_offset = 0, .num_queues = 1,
        .queue_size = QSIZE,
    };
    struct iovec iov = { f->buf, 512 };

    g_assert_cmpint(send_acked(f, VHOST_USER_SET_INFLIGHT_FD, &in,
                               sizeof(in), &fd, 1), ==, 0);
    /* the queue runs with the new region: one request completes */
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(ftruncate(fd, 0), ==, 0);
    g_assert_cmpint(vhost_user_frontend_blk_submit(f->fe, 0, VIRTIO_BLK_T_IN,
                                                   0, &iov, 1, true, NULL),
                    >=, 0);
    g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    close(fd);
    check_survived(f);      /* without the guard: "vhost-blkd died" */
}

/* ---- dirty log (SET_LOG_BASE) ------------------------------------------ */

/* Bytes of log MEM_SIZE of guest memory at gpa 0 needs: a bit per page. */
#define LOG_SIZE (MEM_SIZE / 4096 / 8)

/* SET_LOG_BASE with @fd (or none when -1): must drop the session with a
 * log line (the reply never comes), never crash or write past the log. */
static void expect_log_base_dropped(Fixture *f, uint64_t size,
                                    uint64_t offset, int fd)
{
    VhostUserLog lg = { .mmap_size = size, .mmap_offset = offset };

    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_SET_LOG_BASE, VHOST_USER_VERSION,
                        sizeof(lg), &lg, sizeof(lg), fd >= 0 ? &fd : NULL,
                        fd >= 0 ? 1 : 0), ==, 0);
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    check_survived(f);
}

static void test_log_no_fd(Fixture *f, gconstpointer data)
{
    expect_log_base_dropped(f, LOG_SIZE, 0, -1);
}

/* One byte short of a bit for the last page of guest memory. */
static void test_log_too_small(Fixture *f, gconstpointer data)
{
    int fd = make_memfd(LOG_SIZE);

    expect_log_base_dropped(f, LOG_SIZE - 1, 0, fd);
    close(fd);
}

/* Size and offset describe a range past the end of the file. */
static void test_log_past_file(Fixture *f, gconstpointer data)
{
    int fd = make_memfd(LOG_SIZE);

    expect_log_base_dropped(f, LOG_SIZE, 4096, fd);
    close(fd);
}

/* offset + size wraps around 2^64. */
static void test_log_offset_wraps(Fixture *f, gconstpointer data)
{
    int fd = make_memfd(LOG_SIZE);

    expect_log_base_dropped(f, LOG_SIZE, UINT64_MAX - 4095, fd);
    close(fd);
}

/* The legacy form (a u64, no fd) of a front-end without LOG_SHMFD. */
static void test_log_legacy_u64(Fixture *f, gconstpointer data)
{
    uint64_t base = 0x1000;

    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_SET_LOG_BASE, VHOST_USER_VERSION,
                        sizeof(base), &base, sizeof(base), NULL, 0), ==, 0);
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    check_survived(f);
}

/*
 * A good log, logging on, then the used ring's log address is moved past
 * the end of the log: the queue cannot start (refused), nothing is
 * written outside the log.
 */
static void test_log_used_addr_outside(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    VhostUserVringAddr addr = { .index = 0, .flags = 1u << VHOST_VRING_F_LOG };

    g_assert_true(vhost_user_frontend_log_start(f->fe, 0, &err));
    g_assert_no_error(err);
    vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
    addr.desc_user_addr = (uintptr_t)desc;
    addr.avail_user_addr = (uintptr_t)avail;
    addr.used_user_addr = (uintptr_t)used;
    addr.log_guest_addr = MEM_SIZE;     /* first page without a bit */
    expect_refused(f, send_acked(f, VHOST_USER_SET_VRING_ADDR, &addr,
                                 sizeof(addr), NULL, 0));
    check_survived(f);
}

/*
 * A log memfd the front-end did not seal, truncated while logging is on:
 * the next logged write hits a page that is gone.  The SIGBUS guard turns
 * that into the end of this session, not of the process.
 */
static void test_log_shrunk_after_set(Fixture *f, gconstpointer data)
{
    int fd = make_memfd(LOG_SIZE);
    VhostUserLog lg = { .mmap_size = LOG_SIZE, .mmap_offset = 0 };
    uint64_t features = vhost_user_frontend_get_features(f->fe) |
                        (1ULL << VHOST_F_LOG_ALL);
    VhostUserMsg reply;
    struct iovec iov = { f->buf, 4096 };

    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_SET_LOG_BASE, VHOST_USER_VERSION,
                        sizeof(lg), &lg, sizeof(lg), &fd, 1), ==, 0);
    g_assert_cmpint(vhost_user_frontend_recv_raw(f->fe, &reply, NULL, NULL,
                                                 DROP_TIMEOUT_MS), >=, 0);
    g_assert_cmpuint(reply.hdr.request, ==, VHOST_USER_SET_LOG_BASE);
    g_assert_cmpint(send_acked(f, VHOST_USER_SET_FEATURES, &features,
                               sizeof(features), NULL, 0), ==, 0);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 4096, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(ftruncate(fd, 0), ==, 0);
    g_assert_cmpint(vhost_user_frontend_blk_submit(f->fe, 0, VIRTIO_BLK_T_IN,
                                                   0, &iov, 1, true, NULL),
                    >=, 0);
    g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    close(fd);
    check_survived(f);
}

/* ---- messages --------------------------------------------------------- */

static void test_msg_call_two_fds(Fixture *f, gconstpointer data)
{
    int fds[2] = { eventfd(0, EFD_CLOEXEC), eventfd(0, EFD_CLOEXEC) };
    uint64_t idx = 0;

    expect_refused(f, send_acked(f, VHOST_USER_SET_VRING_CALL, &idx,
                                 sizeof(idx), fds, 2));
    close(fds[0]);
    close(fds[1]);
    check_survived(f);
}

static void test_msg_fd_on_get(Fixture *f, gconstpointer data)
{
    int fd = eventfd(0, EFD_CLOEXEC);

    /* an fd on a message that takes none, and a payload it has no room for */
    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_GET_FEATURES, VHOST_USER_VERSION,
                        0, NULL, 0, &fd, 1), ==, 0);
    close(fd);
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    check_survived(f);
}

static void test_msg_unknown_request(Fixture *f, gconstpointer data)
{
    uint64_t v = 0;

    expect_refused(f, send_acked(f, 9999, &v, sizeof(v), NULL, 0));
    expect_refused(f, send_acked(f, VHOST_USER_NET_SET_MTU, &v, sizeof(v),
                                 NULL, 0));
    /* the session goes on */
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    check_survived(f);
}

static void test_features_not_offered(Fixture *f, gconstpointer data)
{
    uint64_t v = vhost_user_frontend_get_features(f->fe) | (1ULL << 63);

    expect_refused(f, send_acked(f, VHOST_USER_SET_FEATURES, &v, sizeof(v),
                                 NULL, 0));
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    check_survived(f);
}

static void test_config_overflow(Fixture *f, gconstpointer data)
{
    static const uint32_t cases[][2] = {
        { 0xfffffff0, 32 }, { 8, 0xfffffffc }, { 250, 16 },
    };

    for (unsigned int i = 0; i < G_N_ELEMENTS(cases); i++) {
        VhostUserConfig c = { .offset = cases[i][0], .size = cases[i][1] };
        VhostUserMsg reply;
        int r;

        g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                            f->fe, VHOST_USER_GET_CONFIG, VHOST_USER_VERSION,
                            VHOST_USER_CONFIG_HDR_SIZE + 16, &c,
                            VHOST_USER_CONFIG_HDR_SIZE + 16, NULL, 0), ==, 0);
        r = vhost_user_frontend_recv_raw(f->fe, &reply, NULL, NULL,
                                         DROP_TIMEOUT_MS);
        if (r == -ECONNRESET) {
            g_test_message("GET_CONFIG %u+%u: session dropped", cases[i][0],
                           cases[i][1]);
            break;
        }
        /* refused: an empty config in the reply */
        g_assert_cmpint(r, ==, VHOST_USER_CONFIG_HDR_SIZE);
        g_assert_cmpuint(reply.payload.config.size, ==, 0);
    }
    check_survived(f);
}

/* A second session on export 1, kept running through a flood on export 0. */
static VhostUserFrontend *other_export_session(Fixture *f, uint8_t **buf)
{
    VhostUserFrontend *fe1 = vb_connect_started(&f->d, 1, 0);
    g_autoptr(GError) err = NULL;

    *buf = vhost_user_frontend_mem_alloc(fe1, 4096, 4096, &err);
    g_assert_no_error(err);
    return fe1;
}

/* Export 1 serves I/O (iothread) and control messages (main thread). */
static void check_other_export(VhostUserFrontend *fe1, uint8_t *buf,
                               uint32_t seed)
{
    g_autoptr(GError) err = NULL;

    g_assert_cmpuint(vhost_user_frontend_get_queue_num(fe1, &err), ==, 1);
    g_assert_no_error(err);
    vb_fill_pattern(buf, 4096, seed);
    g_assert_cmpint(vb_req(fe1, 0, VIRTIO_BLK_T_OUT, 128, buf, 4096, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    memset(buf, 0, 4096);
    g_assert_cmpint(vb_req(fe1, 0, VIRTIO_BLK_T_IN, 128, buf, 4096, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(buf, 4096, seed));
}

/* Sends time out instead of hanging the test if the daemon stops reading. */
static void set_send_timeout(Fixture *f)
{
    struct timeval tv = { .tv_sec = 10 };

    g_assert_cmpint(setsockopt(vhost_user_frontend_socket_fd(f->fe),
                               SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)),
                    ==, 0);
}

/*
 * 100k GET_FEATURES, never reading a reply: the daemon's replies pile up
 * in the socket until it cannot send; it must then drop the session (or
 * keep up), never block, and serve export 1 all along.
 */
static void test_flood_unread_replies(Fixture *f, gconstpointer data)
{
    uint8_t *buf1;
    VhostUserFrontend *fe1 = other_export_session(f, &buf1);
    VhostUserHeader h = {
        .request = VHOST_USER_GET_FEATURES, .flags = VHOST_USER_VERSION,
    };
    unsigned int sent = 0;
    int r = 0;

    set_send_timeout(f);
    for (sent = 0; sent < FLOOD_MSGS; sent++) {
        r = vhost_user_frontend_send_raw(f->fe, &h, sizeof(h), NULL, 0);
        if (r < 0) {
            break;
        }
        if (sent % 10000 == 0) {
            check_other_export(fe1, buf1, sent);
        }
    }
    g_test_message("sent %u of %u messages (last result %d)", sent,
                   FLOOD_MSGS, r);
    /* a timeout would mean the daemon stopped reading without closing */
    g_assert_cmpint(r, !=, -EAGAIN);
    g_assert_cmpint(r, !=, -EWOULDBLOCK);
    check_other_export(fe1, buf1, 7);
    /* without reading 100k replies the daemon cannot have kept up */
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    check_other_export(fe1, buf1, 8);
    vhost_user_frontend_free(fe1);
    check_survived(f);
}

/*
 * 100k messages that need no reply (SET_OWNER) as fast as the socket
 * takes them: the daemon keeps up in bounded turns, export 1 is served
 * throughout, and the session is still usable afterwards.
 */
static void test_flood_no_reply(Fixture *f, gconstpointer data)
{
    uint8_t *buf1;
    VhostUserFrontend *fe1 = other_export_session(f, &buf1);
    VhostUserHeader h = {
        .request = VHOST_USER_SET_OWNER, .flags = VHOST_USER_VERSION,
    };
    g_autoptr(GError) err = NULL;

    set_send_timeout(f);
    for (unsigned int i = 0; i < FLOOD_MSGS; i++) {
        g_assert_cmpint(vhost_user_frontend_send_raw(f->fe, &h, sizeof(h),
                                                     NULL, 0), ==, 0);
        if (i % 10000 == 0) {
            check_other_export(fe1, buf1, i);
        }
    }
    /* a request with a reply after the flood: the stream is intact */
    g_assert_cmpuint(vhost_user_frontend_get_queue_num(f->fe, &err), ==, 2);
    g_assert_no_error(err);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    check_other_export(fe1, buf1, 9);
    vhost_user_frontend_free(fe1);
    check_survived(f);
}

/*
 * A front-end that asks (GET_CONFIG, 268-byte replies) and stops reading
 * while it keeps the socket open and sends nothing more: the daemon must
 * not wait on it; the other export is served, and new sessions of this
 * export are possible once this one is gone.
 */
static void test_never_reads_replies(Fixture *f, gconstpointer data)
{
    uint8_t *buf1;
    VhostUserFrontend *fe1 = other_export_session(f, &buf1);
    VhostUserConfig c = { .offset = 0, .size = VHOST_USER_MAX_CONFIG_SIZE };
    unsigned int sent;
    int r = 0;

    set_send_timeout(f);
    for (sent = 0; sent < 20000; sent++) {
        r = vhost_user_frontend_send_msg_raw(f->fe, VHOST_USER_GET_CONFIG,
                                             VHOST_USER_VERSION,
                                             VHOST_USER_CONFIG_HDR_SIZE,
                                             &c, VHOST_USER_CONFIG_HDR_SIZE,
                                             NULL, 0);
        if (r < 0) {
            break;
        }
    }
    g_test_message("sent %u GET_CONFIG (last result %d)", sent, r);
    g_assert_cmpint(r, !=, -EAGAIN);
    /* the session is idle now, with replies unread */
    check_other_export(fe1, buf1, 11);
    g_assert_true(vb_daemon_alive(&f->d));
    vhost_user_frontend_free(fe1);
    check_survived(f);
}

/* ---- one export must not stall the others ----------------------------- */

/* The bound export 1 must meet while export 0 is stalled for SLOW_MS: a
 * connect, the whole start sequence and a write + read.  It takes a few
 * ms; the bound is generous so that a loaded machine cannot fail it. */
#define OTHER_EXPORT_BOUND_MS 500

/*
 * Submit a slow read or write (4 KiB of f->buf at SLOW_SECTOR: SLOW_MS)
 * on export 0 and wait until the daemon has popped it: its inflight
 * entry is marked (the pop marks it, then submits it in the same handler
 * run, before anything can stop the queue).
 * Returns the time of the kick: the request completes SLOW_MS after it,
 * at the earliest.
 */
static gint64 submit_slow(Fixture *f, uint32_t type, uint16_t *avail_after)
{
    struct iovec iov = { f->buf, 4096 };
    uint64_t size;
    int fd = vhost_user_frontend_inflight_fd(f->fe, &size);
    VhostUserQueueRegionSplit *r;
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    gint64 t_kick, deadline;
    int head;

    g_assert_cmpint(fd, >=, 0);
    r = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    g_assert_true(r != MAP_FAILED);
    head = vhost_user_frontend_blk_submit(f->fe, 0, type, SLOW_SECTOR, &iov,
                                          1, type == VIRTIO_BLK_T_IN, NULL);
    g_assert_cmpint(head, >=, 0);
    t_kick = g_get_monotonic_time();
    g_assert_cmpint(vhost_user_frontend_kick(f->fe, 0), >=, 0);
    deadline = t_kick + DROP_TIMEOUT_MS * 1000LL;
    while (!__atomic_load_n(&r->desc[head].inflight, __ATOMIC_ACQUIRE)) {
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        g_usleep(1000);
    }
    munmap(r, size);
    vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
    *avail_after = avail->idx;
    return t_kick;
}

/* Export 1, from scratch: connect, start, write, read.  Returns the time
 * it took, in ms. */
static gint64 time_other_export(Fixture *f)
{
    gint64 t0 = g_get_monotonic_time();
    uint8_t *buf1;
    VhostUserFrontend *fe1 = other_export_session(f, &buf1);

    check_other_export(fe1, buf1, 21);
    vhost_user_frontend_free(fe1);
    return (g_get_monotonic_time() - t0) / 1000;
}

/*
 * Export 0's front-end asks GET_VRING_BASE while a slow request is in
 * flight.  The reply must wait for the request (the base it reports has
 * to cover every used element), but only this session waits: export 1
 * must connect and serve I/O meanwhile.  The main thread used to wait for
 * the drain itself, so every other export's control messages and
 * accepts waited too (about SLOW_MS here).
 */
static void test_slow_get_vring_base(Fixture *f, gconstpointer data)
{
    VhostUserVringState st = { .index = 0 };
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    VhostUserMsg reply;
    uint16_t avail_after;
    gint64 t_kick, t_done, ms;
    int r;

    t_kick = submit_slow(f, VIRTIO_BLK_T_IN, &avail_after);
    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_GET_VRING_BASE, VHOST_USER_VERSION,
                        sizeof(st), &st, sizeof(st), NULL, 0), ==, 0);
    ms = time_other_export(f);
    t_done = g_get_monotonic_time();
    g_test_message("export 1 connected and served I/O in %" PRId64 " ms "
                   "while export 0 drained a %d ms request", ms, SLOW_MS);
    g_assert_cmpint(ms, <, OTHER_EXPORT_BOUND_MS);
    if (t_done < t_kick + SLOW_MS * 1000LL) {
        /* the slow read cannot have completed: no reply yet */
        g_assert_cmpint(vhost_user_frontend_recv_raw(f->fe, &reply, NULL,
                                                     NULL, 0), ==,
                        -ETIMEDOUT);
    }
    r = vhost_user_frontend_recv_raw(f->fe, &reply, NULL, NULL,
                                     SLOW_MS + DROP_TIMEOUT_MS);
    g_assert_cmpint(r, ==, sizeof(st));
    g_assert_cmpuint(reply.hdr.request, ==, VHOST_USER_GET_VRING_BASE);
    /* the reply came after the read completed and covers it */
    g_assert_cmpint(g_get_monotonic_time() - t_kick, >=, SLOW_MS * 1000LL);
    vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
    g_assert_cmpuint(reply.payload.state.num, ==, avail_after);
    g_assert_cmpuint(__atomic_load_n(&used->idx, __ATOMIC_ACQUIRE), ==,
                     avail_after);
    check_survived(f);
}

/*
 * Export 0's front-end goes away while a slow request is in flight: the
 * session's drain must not hold up export 1, and export 0 takes a new
 * session once the request completed.
 */
static void test_slow_disconnect(Fixture *f, gconstpointer data)
{
    uint16_t avail_after;
    gint64 t_kick, ms;

    t_kick = submit_slow(f, VIRTIO_BLK_T_IN, &avail_after);
    vhost_user_frontend_disconnect(f->fe);
    ms = time_other_export(f);
    g_test_message("export 1 connected and served I/O in %" PRId64 " ms "
                   "while export 0 drained a %d ms request (%" PRId64
                   " ms after its kick)", ms, SLOW_MS,
                   (g_get_monotonic_time() - t_kick) / 1000);
    g_assert_cmpint(ms, <, OTHER_EXPORT_BOUND_MS);
    check_survived(f);      /* includes a new session on export 0 */
}

/*
 * SIGTERM while a slow write is in flight: the daemon's shutdown must
 * wait for it (the image is closed right after), exit cleanly, and the
 * data must be in the image.
 */
static void test_slow_shutdown(Fixture *f, gconstpointer data)
{
    g_autofree uint8_t *img = g_malloc(4096);
    uint16_t avail_after;
    gint64 t_kick;
    int status;

    vb_fill_pattern(f->buf, 4096, 0x5107);
    t_kick = submit_slow(f, VIRTIO_BLK_T_OUT, &avail_after);
    g_assert_cmpint(kill(f->d.pid, SIGTERM), ==, 0);
    g_assert_cmpint(waitpid(f->d.pid, &status, 0), ==, f->d.pid);
    f->d.pid = 0;
    g_test_message("daemon exited %" PRId64 " ms after the kick, status "
                   "0x%x", (g_get_monotonic_time() - t_kick) / 1000, status);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    g_assert_cmpint(g_get_monotonic_time() - t_kick, >=, SLOW_MS * 1000LL);
    vb_read_image(&f->d, 0, SLOW_SECTOR * 512ULL, img, 4096);
    g_assert_true(vb_check_pattern(img, 4096, 0x5107));
    check_images(f);
}


/* ---- packed rings ------------------------------------------------------ */

/* One descriptor of a hand-built packed buffer; wrap < 0: the right lap. */
typedef struct PDesc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;             /* NEXT / WRITE / INDIRECT */
    uint16_t id;
    int wrap;
} PDesc;

/*
 * Write @n descriptors at the library's next slot (its own position is not
 * moved: nothing else is submitted afterwards), the head's flags last,
 * kick, and see what the daemon does.
 */
static Outcome packed_submit_and_watch(Fixture *f, const PDesc *d,
                                       unsigned int n)
{
    struct vring_packed_desc *ring;
    struct vring_packed_desc_event *drv, *dev;
    uint16_t slot, head, head_flags = 0;
    bool wrap, head_wrap;
    gint64 deadline;

    g_assert_true(vhost_user_frontend_is_packed(f->fe));
    vhost_user_frontend_packed_rings(f->fe, 0, &ring, &drv, &dev);
    vhost_user_frontend_packed_avail_pos(f->fe, 0, &slot, &wrap);
    head = slot;
    head_wrap = wrap;
    for (unsigned int k = 0; k < n; k++) {
        bool w = d[k].wrap < 0 ? wrap : d[k].wrap;
        uint16_t fl = d[k].flags | (w ? 1 << VRING_PACKED_DESC_F_AVAIL
                                      : 1 << VRING_PACKED_DESC_F_USED);

        ring[slot].addr = d[k].addr;
        ring[slot].len = d[k].len;
        ring[slot].id = d[k].id;
        if (k == 0) {
            head_flags = fl;
        } else {
            ring[slot].flags = fl;
        }
        if (++slot == QSIZE) {
            slot = 0;
            wrap = !wrap;
        }
    }
    __atomic_store_n(&ring[head].flags, head_flags, __ATOMIC_RELEASE);
    g_assert_cmpint(vhost_user_frontend_kick_raw(f->fe, 0), ==, 1);

    deadline = g_get_monotonic_time() + DROP_TIMEOUT_MS * 1000LL;
    while (g_get_monotonic_time() < deadline) {
        uint16_t fl = __atomic_load_n(&ring[head].flags, __ATOMIC_ACQUIRE);
        bool avail = fl & (1 << VRING_PACKED_DESC_F_AVAIL);
        bool used = fl & (1 << VRING_PACKED_DESC_F_USED);

        if (avail == used && used == head_wrap) {
            return OUTCOME_COMPLETED;
        }
        if (vhost_user_frontend_peer_closed(f->fe, 20)) {
            return OUTCOME_DROPPED;
        }
    }
    return OUTCOME_NOTHING;
}

/*
 * The session must be dropped.  A well-formed buffer published in the
 * same batch before the bad one may still complete first (the daemon
 * finishes what it had in flight while the session closes), so a
 * completion is not the end of the watch: the drop must follow.
 */
static void packed_expect_dropped(Fixture *f, const PDesc *d, unsigned int n)
{
    Outcome o = packed_submit_and_watch(f, d, n);

    g_test_message("outcome: %s", outcome_name(o));
    if (o == OUTCOME_COMPLETED) {
        o = vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS) ?
            OUTCOME_DROPPED : OUTCOME_NOTHING;
        g_test_message("then: %s", outcome_name(o));
    }
    g_assert_cmpint(o, ==, OUTCOME_DROPPED);
    check_survived(f);
}

/* A well-formed read of 512 bytes as buffer @id: header, data, status. */
static void packed_req(Fixture *f, PDesc *d, uint16_t id)
{
    prep_slot(f, id, VIRTIO_BLK_T_IN, 0);
    d[0] = (PDesc) { slot_gpa(f, id, 0), 16, VRING_DESC_F_NEXT, id, -1 };
    d[1] = (PDesc) { gpa_of(f, f->buf, 512), 512,
                     VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, id, -1 };
    d[2] = (PDesc) { slot_gpa(f, id, 16), 1, VRING_DESC_F_WRITE, id, -1 };
}

/* First the control: the hand-built buffer itself is fine. */
static void test_packed_control(Fixture *f, gconstpointer data)
{
    PDesc d[3];

    packed_req(f, d, 5);
    g_assert_cmpint(packed_submit_and_watch(f, d, 3), ==, OUTCOME_COMPLETED);
    check_survived(f);
}

static void test_packed_wrong_wrap(Fixture *f, gconstpointer data)
{
    PDesc d[3];

    packed_req(f, d, 5);
    d[1].wrap = 0;              /* the lap after this one */
    packed_expect_dropped(f, d, 3);
}

static void test_packed_id_out_of_range(Fixture *f, gconstpointer data)
{
    PDesc d[3];

    packed_req(f, d, 5);
    d[2].id = QSIZE;            /* the id is the last descriptor's */
    packed_expect_dropped(f, d, 3);
}

static void test_packed_id_reused(Fixture *f, gconstpointer data)
{
    PDesc d[6];

    /* two buffers with the same id made available together */
    packed_req(f, d, 5);
    packed_req(f, d + 3, 5);
    packed_expect_dropped(f, d, 6);
}

static void test_packed_chain_around_ring(Fixture *f, gconstpointer data)
{
    g_autofree PDesc *d = g_new(PDesc, QSIZE);

    /* every slot chained: the chain runs around the ring into its own
     * head, which is not available for the next lap (the packed ring's
     * loop) */
    for (unsigned int k = 0; k < QSIZE; k++) {
        d[k] = (PDesc) { gpa_of(f, f->buf, 16), 16, VRING_DESC_F_NEXT, 0,
                         -1 };
    }
    packed_expect_dropped(f, d, QSIZE);
}

static void test_packed_outside_memory(Fixture *f, gconstpointer data)
{
    PDesc d[3];

    packed_req(f, d, 5);
    d[1].addr = MEM_SIZE - 256;     /* runs past the end of guest memory */
    packed_expect_dropped(f, d, 3);
}

static void test_packed_indirect_nested(Fixture *f, gconstpointer data)
{
    struct vring_packed_desc *t = (void *)alloc_table(f, 2);
    PDesc d = { gpa_of(f, t, 32), 32, VRING_DESC_F_INDIRECT, 5, -1 };

    prep_slot(f, 5, VIRTIO_BLK_T_IN, 0);
    t[0] = (struct vring_packed_desc) { slot_gpa(f, 5, 0), 16, 5, 0 };
    t[1] = (struct vring_packed_desc) { gpa_of(f, t, 32), 32, 5,
                                        VRING_DESC_F_INDIRECT };
    packed_expect_dropped(f, &d, 1);
}

static void test_packed_indirect_not_alone(Fixture *f, gconstpointer data)
{
    struct vring_packed_desc *t = (void *)alloc_table(f, 1);
    PDesc d[2] = {
        { slot_gpa(f, 5, 0), 16, VRING_DESC_F_NEXT, 5, -1 },
        { gpa_of(f, t, 16), 16, VRING_DESC_F_INDIRECT, 5, -1 },
    };

    prep_slot(f, 5, VIRTIO_BLK_T_IN, 0);
    t[0] = (struct vring_packed_desc) { slot_gpa(f, 5, 16), 1, 5,
                                        VRING_DESC_F_WRITE };
    packed_expect_dropped(f, d, 2);
}

/* A packed base whose slots lie beyond the ring: the queue does not start
 * (the ack says so), the daemon goes on. */
static void test_packed_base_out_of_range(Fixture *f, gconstpointer data)
{
    int64_t r;

    r = send_state(f, VHOST_USER_SET_VRING_BASE, 0, 0x80008000u | QSIZE);
    if (r == 0) {
        /* accepted for later; starting the queue with it fails */
        r = send_state(f, VHOST_USER_SET_VRING_ENABLE, 0, 1);
    }
    expect_refused(f, r);
    check_survived(f);
}

/* The front-end scribbled on the packed inflight region (a loop in its
 * free list); the restarted session's queue refuses it and the daemon
 * goes on. */
static void test_packed_inflight_corrupt(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    VhostUserQueueRegionPacked *r;
    uint64_t size;
    int fd = vhost_user_frontend_inflight_fd(f->fe, &size);
    void *p;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpuint(size, >=, vhost_user_inflight_queue_size_packed(QSIZE));
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g_assert_true(p != MAP_FAILED);
    r = p;
    g_assert_cmpuint(r->version, ==, 1);
    g_assert_cmpuint(r->desc_num, ==, QSIZE);
    r->desc[r->old_free_head].next = r->old_free_head;
    munmap(p, size);

    g_assert_false(vhost_user_frontend_reconnect(f->fe, 5000, &err));
    g_test_message("reconnect: %s", err ? err->message : "?");
    check_survived(f);
}

/* ---- guest memory: a partial last page (issue 20, item 3) ------------- */

/*
 * A memory region whose size is not a multiple of the page (a page and
 * 100 bytes, on a memfd the front-end did not seal), holding a request's
 * header in its last, partial page; the front-end truncates the file to
 * one page while the daemon is about to read it.  The daemon's load of
 * the header faults on a page that reaches past the region's nominal end:
 * the SIGBUS guard must cover that page too, so the access reads zeros and
 * the session is dropped with a message, and the daemon and the other
 * export go on.  The guard used to stop at the region's nominal end, the
 * handler refused the page, and SIGBUS killed every export.
 */
static void test_mem_partial_page_truncated(Fixture *f, gconstpointer data)
{
    const uint64_t page = getpagesize(), size = page + 100;
    const uint64_t gpa = VHOST_USER_FRONTEND_REGION_STRIDE;
    int fd = make_memfd(size);
    VhostUserMemRegMsg m = {
        .region = region(gpa, size, 0x7f2000000000ULL, 0),
    };
    struct virtio_blk_outhdr *hdr;
    uint32_t id, len;
    uint8_t *p, *status;
    Outcome o;

    g_assert_cmpint(send_acked(f, VHOST_USER_ADD_MEM_REG, &m, sizeof(m),
                               &fd, 1), ==, 0);
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g_assert_true(p != MAP_FAILED);
    hdr = (void *)(p + page + 16);
    hdr->type = VIRTIO_BLK_T_IN;
    hdr->ioprio = 0;
    hdr->sector = 0;
    munmap(p, size);        /* this process must not touch it either */
    /* header in the partial page, status byte in region 0 */
    status = prep_slot(f, H0, VIRTIO_BLK_T_IN, 0);
    vhost_user_frontend_write_desc(f->fe, 0, H0, gpa + page + 16,
                                   sizeof(*hdr), VRING_DESC_F_NEXT, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    /* the front-end takes the partial page away */
    g_assert_cmpint(ftruncate(fd, page), ==, 0);
    o = submit_raw_and_watch(f, H0, &id, &len);
    g_test_message("outcome: %s (status 0x%02x)", outcome_name(o), *status);
    g_assert_cmpint(o, !=, OUTCOME_NOTHING);
    /* whatever the daemon made of the zeros it read, the session goes */
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    close(fd);
    check_survived(f);      /* without the fix: "vhost-blkd died" */
}

/* ---- packed vring base without a start (issue 20, item 7) ------------- */

static uint32_t get_vring_base(Fixture *f, uint32_t index)
{
    VhostUserVringState s = { .index = index };
    VhostUserMsg reply;

    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_GET_VRING_BASE, VHOST_USER_VERSION,
                        sizeof(s), &s, sizeof(s), NULL, 0), ==, 0);
    g_assert_cmpint(vhost_user_frontend_recv_raw(f->fe, &reply, NULL, NULL,
                                                 DROP_TIMEOUT_MS), ==,
                    sizeof(VhostUserVringState));
    g_assert_cmpuint(reply.payload.state.index, ==, index);
    return reply.payload.state.num;
}

/*
 * GET_VRING_BASE (the queue stops), SET_VRING_BASE, GET_VRING_BASE again
 * with no start in between (QEMU may do that when a migration is
 * cancelled): the answer must be the base just set.  It used to be its
 * low half mixed with the old used position and wrap counters.
 */
static void test_packed_base_set_then_get(Fixture *f, gconstpointer data)
{
    uint32_t b;

    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    b = get_vring_base(f, 0);
    g_test_message("base after one request: 0x%08" PRIx32, b);
    g_assert_cmpint(send_state(f, VHOST_USER_SET_VRING_BASE, 0, 0x000a800bu),
                    ==, 0);
    g_assert_cmphex(get_vring_base(f, 0), ==, 0x000a800bu);
    g_assert_cmpint(send_state(f, VHOST_USER_SET_VRING_BASE, 0, b), ==, 0);
    g_assert_cmphex(get_vring_base(f, 0), ==, b);
    check_survived(f);
}

/* ---- packed inflight region: exact accounting (issue 20, item 2) ------- */

/*
 * Hand the daemon back a packed inflight region whose free list is too
 * short, on a reconnect after a clean session: @qsize entries per queue,
 * free_head = old_free_head = qsize (an empty list) and nothing in flight,
 * so no entry is accounted for.  The restore must refuse the region (the
 * reconnect fails, the session is dropped with a message), the daemon go
 * on; it used to take it and let the first pop write entry qsize -- past
 * the queue's part of the region, at queue size 1 over the device-state
 * area -- and read one past its own copy of the links.
 */
static void packed_free_list_empty(Fixture *f, unsigned int qsize)
{
    VhostUserFrontendOptions opts = {
        .queue_size = qsize, .num_queues = 1, .packed = true,
    };
    g_autoptr(GError) err = NULL;
    VhostUserQueueRegionPacked *r;
    uint64_t size;
    int fd;
    void *p;

    if (qsize != QSIZE) {
        vhost_user_frontend_free(f->fe);
        f->fe = vb_connect(&f->d, 0, &opts);
        vb_start(f->fe);
    }
    fd = vhost_user_frontend_inflight_fd(f->fe, &size);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpuint(size, >=, vhost_user_inflight_queue_size_packed(qsize));
    if (qsize == QSIZE) {
        /* a request went through: the region is the daemon's */
        g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512,
                               true, NULL), ==, VIRTIO_BLK_S_OK);
    }
    vhost_user_frontend_disconnect(f->fe);
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g_assert_true(p != MAP_FAILED);
    r = p;
    /* a well-formed header (written whole: at queue size 1 the daemon may
     * not have started the queue before we disconnected) ... */
    r->version = 1;
    r->desc_num = qsize;
    r->used_idx = r->old_used_idx = 0;
    r->used_wrap_counter = r->old_used_wrap_counter = 1;
    for (unsigned int i = 0; i < qsize; i++) {
        r->desc[i].inflight = 0;
    }
    /* ... and an empty free list with nothing in flight */
    r->free_head = r->old_free_head = qsize;
    munmap(p, size);

    g_assert_false(vhost_user_frontend_reconnect(f->fe, 5000, &err));
    g_test_message("reconnect: %s", err ? err->message : "?");
    check_survived(f);
}

static void test_packed_inflight_free_list_empty(Fixture *f,
                                                 gconstpointer data)
{
    packed_free_list_empty(f, QSIZE);
}

static void test_packed_inflight_free_list_qsize1(Fixture *f,
                                                  gconstpointer data)
{
    packed_free_list_empty(f, 1);
}

/* The free list ends after one entry, nothing in flight: 1 of QSIZE
 * entries accounted for.  Refused; it used to be accepted and the second
 * pop ran off the end of the list. */
static void test_packed_inflight_free_list_short(Fixture *f,
                                                 gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    VhostUserQueueRegionPacked *r;
    uint64_t size;
    int fd = vhost_user_frontend_inflight_fd(f->fe, &size);
    void *p;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    vhost_user_frontend_disconnect(f->fe);
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g_assert_true(p != MAP_FAILED);
    r = p;
    g_assert_cmpuint(r->version, ==, 1);
    g_assert_cmpuint(r->free_head, ==, r->old_free_head);
    r->desc[r->old_free_head].next = QSIZE;
    munmap(p, size);

    g_assert_false(vhost_user_frontend_reconnect(f->fe, 5000, &err));
    g_test_message("reconnect: %s", err ? err->message : "?");
    check_survived(f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    /* a failed check marks its case failed and the program goes on: the
     * fixture teardown kills the daemon and the other cases still run */
    g_test_set_nonfatal_assertions();
#define ADD(name, fn) \
    g_test_add("/vhost-blkd/hostile/" name, Fixture, NULL, fixture_setup, \
               fn, fixture_teardown)
    ADD("ring/avail-idx-backwards", test_avail_idx_backwards);
    ADD("ring/avail-idx-jump-exact", test_avail_idx_jump_exact);
    ADD("ring/avail-head-out-of-range", test_avail_head_out_of_range);
    ADD("ring/avail-head-twice", test_avail_head_twice);
    ADD("desc/next-out-of-range", test_desc_next_out_of_range);
    ADD("desc/read-after-write", test_desc_read_after_write);
    ADD("desc/len-4g", test_desc_len_4g);
    ADD("desc/len-sum-overflow", test_len_sum_overflow);
    ADD("desc/region-end-exact", test_region_end_exact);
    ADD("desc/region-end-one-past", test_region_end_one_past);
    ADD("desc/sector-wrap", test_sector_wrap);
    ADD("indirect/loop", test_indirect_loop);
    ADD("indirect/nested", test_indirect_nested);
    ADD("indirect/self", test_indirect_self);
    ADD("indirect/bad-size", test_indirect_bad_size);
    ADD("indirect/outside-memory", test_indirect_outside_memory);
    ADD("indirect/with-next", test_indirect_with_next);
    ADD("mem/overlap", test_mem_overlap);
    ADD("mem/larger-than-fd", test_mem_larger_than_fd);
    ADD("mem/shrunk-after-table", test_mem_shrunk_after_table);
    ADD("mem/wraps", test_mem_wraps);
    ADD("mem/too-many-regions", test_mem_too_many_regions);
    ADD("mem/replaced-in-flight", test_mem_replaced_in_flight);
    ADD("mem/empty-table", test_mem_table_empty);
    ADD("mem/rem-region-of-rings", test_rem_mem_reg_rings);
    ADD("mem/add-region-overlap", test_add_mem_reg_overlap);
    ADD("mem/rem-region-with-fd", test_rem_mem_reg_with_fd);
    ADD("mem/partial-page-truncated", test_mem_partial_page_truncated);
    ADD("vring/addr-outside", test_vring_addr_outside);
    ADD("vring/addr-misaligned", test_vring_addr_misaligned);
    ADD("vring/num-bad", test_vring_num_bad);
    ADD("vring/num-after-start", test_vring_num_after_start);
    ADD("vring/kick-unconfigured-queue", test_kick_unconfigured_queue);
    ADD("vring/get-base-never-started", test_get_vring_base_never_started);
    ADD("vring/state-bad", test_vring_state_bad);
    ADD("inflight/fd-too-small", test_inflight_fd_too_small);
    ADD("inflight/smaller-than-queue", test_inflight_smaller_than_queue);
    ADD("inflight/no-fd", test_inflight_no_fd);
    ADD("inflight/shrunk-after-set", test_inflight_shrunk_after_set);
    ADD("log/no-fd", test_log_no_fd);
    ADD("log/too-small", test_log_too_small);
    ADD("log/past-file", test_log_past_file);
    ADD("log/offset-wraps", test_log_offset_wraps);
    ADD("log/legacy-u64", test_log_legacy_u64);
    ADD("log/used-addr-outside", test_log_used_addr_outside);
    ADD("log/shrunk-after-set", test_log_shrunk_after_set);
    ADD("msg/call-two-fds", test_msg_call_two_fds);
    ADD("msg/fd-on-get", test_msg_fd_on_get);
    ADD("msg/unknown-request", test_msg_unknown_request);
    ADD("msg/features-not-offered", test_features_not_offered);
    ADD("msg/config-overflow", test_config_overflow);
    ADD("flood/unread-replies", test_flood_unread_replies);
    ADD("flood/no-reply", test_flood_no_reply);
    ADD("flood/never-reads-replies", test_never_reads_replies);
#define ADD_SLOW(name, fn) \
    g_test_add("/vhost-blkd/hostile/" name, Fixture, SLOW_EXTRA, \
               fixture_setup, fn, fixture_teardown)
    ADD_SLOW("slow/in-flight-then-broken", test_slow_request_then_broken);
    ADD_SLOW("slow/get-vring-base-isolated", test_slow_get_vring_base);
    ADD_SLOW("slow/disconnect-isolated", test_slow_disconnect);
    ADD_SLOW("slow/shutdown-waits", test_slow_shutdown);
#undef ADD_SLOW
#define ADD_PACKED(name, fn) \
    g_test_add("/vhost-blkd/hostile/packed/" name, Fixture, NULL, \
               fixture_setup_packed, fn, fixture_teardown)
    ADD_PACKED("control", test_packed_control);
    ADD_PACKED("wrong-wrap", test_packed_wrong_wrap);
    ADD_PACKED("id-out-of-range", test_packed_id_out_of_range);
    ADD_PACKED("id-reused", test_packed_id_reused);
    ADD_PACKED("chain-around-ring", test_packed_chain_around_ring);
    ADD_PACKED("outside-memory", test_packed_outside_memory);
    ADD_PACKED("indirect-nested", test_packed_indirect_nested);
    ADD_PACKED("indirect-not-alone", test_packed_indirect_not_alone);
    ADD_PACKED("base-out-of-range", test_packed_base_out_of_range);
    ADD_PACKED("inflight-corrupt", test_packed_inflight_corrupt);
    ADD_PACKED("base-set-then-get", test_packed_base_set_then_get);
    /* exact accounting of the inflight region's entries */
    ADD_PACKED("inflight-free-list-empty",
               test_packed_inflight_free_list_empty);
    ADD_PACKED("inflight-free-list-qsize1",
               test_packed_inflight_free_list_qsize1);
    ADD_PACKED("inflight-free-list-short",
               test_packed_inflight_free_list_short);
#undef ADD_PACKED
#undef ADD
    return g_test_run();
}
