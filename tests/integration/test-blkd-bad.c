/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration tests: hostile rings and hostile vhost-user messages.  Each
 * gets the request failed or the session dropped (never a hang, never a
 * status of OK, never a write into read-only memory), and afterwards both
 * exports of the same daemon serve I/O on new sessions.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>

#define QSIZE 128
#define H0 (QSIZE - 4)          /* hand-built chains use the top descriptors */
#define DROP_TIMEOUT_MS 5000

typedef struct Fixture {
    VbDaemon d;
    VhostUserFrontend *fe;
    uint8_t *buf;
} Fixture;

typedef enum Outcome {
    OUTCOME_DROPPED,            /* the daemon closed the connection */
    OUTCOME_COMPLETED,          /* a used element appeared */
    OUTCOME_NOTHING,            /* neither, within the timeout */
} Outcome;

static void fixture_setup(Fixture *f, gconstpointer data)
{
    VbExportSpec spec[2] = { { .num_queues = 1 }, { .num_queues = 1 } };
    VhostUserFrontendOptions opts = { .queue_size = QSIZE };
    g_autoptr(GError) err = NULL;

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 2, spec);
    vb_daemon_start(&f->d);
    f->fe = vb_connect(&f->d, 0, &opts);
    vb_start(f->fe);
    f->buf = vhost_user_frontend_mem_alloc(f->fe, 1 << 20, 4096, &err);
    g_assert_no_error(err);
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    vhost_user_frontend_free(f->fe);
    vb_daemon_cleanup(&f->d);
}

/* The daemon is alive and both exports work on new sessions. */
static void check_survived(Fixture *f)
{
    vhost_user_frontend_free(f->fe);
    f->fe = NULL;
    g_assert_true(vb_daemon_alive(&f->d));
    vb_check_export_works(&f->d, 1);
    vb_check_export_works(&f->d, 0);
    g_assert_true(vb_daemon_alive(&f->d));
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

/* Fill the library's header slot of @head for an IN request. */
static uint8_t *prep_slot(Fixture *f, uint16_t head, uint32_t type)
{
    uint8_t *slot = vhost_user_frontend_req_slot(f->fe, 0, head);
    struct virtio_blk_outhdr *hdr = (void *)slot;

    hdr->type = type;
    hdr->ioprio = 0;
    hdr->sector = 0;
    slot[16] = 0xff;
    return slot + 16;
}

/* Publish @head, kick, and see what the daemon does. */
static Outcome submit_raw_and_watch(Fixture *f, uint16_t head, uint32_t *id,
                                    uint32_t *len)
{
    gint64 deadline = g_get_monotonic_time() + DROP_TIMEOUT_MS * 1000LL;

    vhost_user_frontend_push_avail_raw(f->fe, 0, head);
    g_assert_cmpint(vhost_user_frontend_kick_raw(f->fe, 0), ==, 1);
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

/* Dropped, or completed with an error status in a writable status byte. */
static void expect_dropped_or_failed(Fixture *f, uint16_t head,
                                     const uint8_t *status)
{
    uint32_t id, len;
    Outcome o = submit_raw_and_watch(f, head, &id, &len);

    g_test_message("outcome: %s", o == OUTCOME_DROPPED ? "session dropped" :
                   o == OUTCOME_COMPLETED ? "request completed" : "nothing");
    g_assert_cmpint(o, !=, OUTCOME_NOTHING);
    if (o == OUTCOME_COMPLETED) {
        g_assert_cmpuint(id, ==, head);
        g_assert_cmpint(*status, !=, VIRTIO_BLK_S_OK);
        g_assert_true(*status == VIRTIO_BLK_S_IOERR ||
                      *status == VIRTIO_BLK_S_UNSUPP);
    }
}

/* ---- rings ---- */

static void test_desc_loop(Fixture *f, gconstpointer data)
{
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN);

    vhost_user_frontend_write_desc(f->fe, 0, H0, slot_gpa(f, H0, 0), 16,
                                   VRING_DESC_F_NEXT, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, gpa_of(f, f->buf, 512),
                                   512, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   H0 + 2);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 2,
                                   gpa_of(f, f->buf + 512, 512), 512,
                                   VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   H0 + 1);
    expect_dropped_or_failed(f, H0, status);
    check_survived(f);
}

static void test_desc_outside_memory(Fixture *f, gconstpointer data)
{
    const uint64_t bad[] = {
        1ULL << 30,                 /* past the 64 MiB region */
        (64ULL << 20) - 256,        /* straddles the end of the region */
        UINT64_MAX - 255,           /* wraps */
    };

    for (unsigned int i = 0; i < G_N_ELEMENTS(bad); i++) {
        VhostUserFrontendOptions opts = { .queue_size = QSIZE };
        uint8_t *status;

        if (!f->fe) {
            f->fe = vb_connect(&f->d, 0, &opts);
            vb_start(f->fe);
        }
        status = prep_slot(f, H0, VIRTIO_BLK_T_IN);
        g_test_message("data descriptor at 0x%" PRIx64, bad[i]);
        vhost_user_frontend_write_desc(f->fe, 0, H0, slot_gpa(f, H0, 0), 16,
                                       VRING_DESC_F_NEXT, H0 + 1);
        vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, bad[i], 512,
                                       VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                       H0 + 2);
        vhost_user_frontend_write_desc(f->fe, 0, H0 + 2, slot_gpa(f, H0, 16),
                                       1, VRING_DESC_F_WRITE, 0);
        expect_dropped_or_failed(f, H0, status);
        check_survived(f);
    }
}

static void test_chain_too_long(Fixture *f, gconstpointer data)
{
    g_autoptr(GError) err = NULL;
    const unsigned int n = QSIZE + 1;
    struct vring_desc *table;
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN);

    if (!vhost_user_frontend_has_feature(f->fe, VIRTIO_RING_F_INDIRECT_DESC)) {
        g_test_skip("needs VIRTIO_RING_F_INDIRECT_DESC");
        return;
    }
    /* an indirect table with more entries than the queue has */
    table = vhost_user_frontend_mem_alloc(f->fe, n * sizeof(*table), 16, &err);
    g_assert_no_error(err);
    table[0].addr = slot_gpa(f, H0, 0);
    table[0].len = 16;
    table[0].flags = VRING_DESC_F_NEXT;
    table[0].next = 1;
    for (unsigned int i = 1; i < n - 1; i++) {
        table[i].addr = gpa_of(f, f->buf + i * 512, 512);
        table[i].len = 512;
        table[i].flags = VRING_DESC_F_NEXT | VRING_DESC_F_WRITE;
        table[i].next = i + 1;
    }
    table[n - 1].addr = slot_gpa(f, H0, 16);
    table[n - 1].len = 1;
    table[n - 1].flags = VRING_DESC_F_WRITE;
    table[n - 1].next = 0;
    vhost_user_frontend_write_desc(f->fe, 0, H0, gpa_of(f, table, 16 * n),
                                   16 * n, VRING_DESC_F_INDIRECT, 0);
    expect_dropped_or_failed(f, H0, status);
    check_survived(f);
}

static void test_header_short(Fixture *f, gconstpointer data)
{
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN);
    uint32_t id, len;
    Outcome o;

    /* 8 of the 16 header bytes, then the status byte */
    vhost_user_frontend_write_desc(f->fe, 0, H0, slot_gpa(f, H0, 0), 8,
                                   VRING_DESC_F_NEXT, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, slot_gpa(f, H0, 16), 1,
                                   VRING_DESC_F_WRITE, 0);
    o = submit_raw_and_watch(f, H0, &id, &len);
    g_assert_cmpint(o, ==, OUTCOME_COMPLETED);
    g_assert_cmpuint(id, ==, H0);
    g_assert_cmpint(*status, ==, VIRTIO_BLK_S_IOERR);
    /* the session goes on */
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    check_survived(f);
}

static void test_status_readonly(Fixture *f, gconstpointer data)
{
    uint8_t *status = prep_slot(f, H0, VIRTIO_BLK_T_IN);
    uint32_t id, len;
    Outcome o;

    memset(f->buf, 0x5a, 512);
    vhost_user_frontend_write_desc(f->fe, 0, H0, slot_gpa(f, H0, 0), 16,
                                   VRING_DESC_F_NEXT, H0 + 1);
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 1, gpa_of(f, f->buf, 512),
                                   512, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                                   H0 + 2);
    /* status descriptor without VRING_DESC_F_WRITE */
    vhost_user_frontend_write_desc(f->fe, 0, H0 + 2, slot_gpa(f, H0, 16), 1,
                                   0, 0);
    o = submit_raw_and_watch(f, H0, &id, &len);
    g_test_message("outcome: %s", o == OUTCOME_DROPPED ? "session dropped" :
                   o == OUTCOME_COMPLETED ? "request completed" : "nothing");
    g_assert_cmpint(o, !=, OUTCOME_NOTHING);
    /* the device never writes into a device-readable buffer */
    g_assert_cmpint(*status, ==, 0xff);
    if (o == OUTCOME_COMPLETED) {
        g_assert_cmpuint(id, ==, H0);
    }
    check_survived(f);
}

static void test_avail_idx_jump(Fixture *f, gconstpointer data)
{
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;

    /* one good request first so the queue is running */
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_IN, 0, f->buf, 512, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    vhost_user_frontend_rings(f->fe, 0, &desc, &avail, &used);
    /* claims more new entries than the ring holds */
    vhost_user_frontend_set_avail_idx_raw(f->fe, 0, avail->idx + QSIZE + 1);
    g_assert_cmpint(vhost_user_frontend_kick_raw(f->fe, 0), ==, 1);
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    check_survived(f);
}

/* ---- messages ---- */

static void expect_dropped(Fixture *f)
{
    g_assert_true(vhost_user_frontend_peer_closed(f->fe, DROP_TIMEOUT_MS));
    check_survived(f);
}

static void test_msg_truncated(Fixture *f, gconstpointer data)
{
    VhostUserVringState s = { .index = 0, .num = QSIZE };

    /* header announces 8 payload bytes, 4 arrive, then EOF */
    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_SET_VRING_NUM, VHOST_USER_VERSION,
                        sizeof(s), &s, 4, NULL, 0), ==, 0);
    shutdown(vhost_user_frontend_socket_fd(f->fe), SHUT_WR);
    expect_dropped(f);
}

static void test_msg_short_header(Fixture *f, gconstpointer data)
{
    uint32_t half[2] = { VHOST_USER_GET_FEATURES, VHOST_USER_VERSION };

    g_assert_cmpint(vhost_user_frontend_send_raw(f->fe, half, 6, NULL, 0),
                    ==, 0);
    shutdown(vhost_user_frontend_socket_fd(f->fe), SHUT_WR);
    expect_dropped(f);
}

static void test_msg_wrong_size(Fixture *f, gconstpointer data)
{
    VhostUserVringState s = { .index = 0, .num = QSIZE };

    /* SET_VRING_NUM carries 8 bytes; send 4 and say 4 */
    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_SET_VRING_NUM, VHOST_USER_VERSION,
                        4, &s, 4, NULL, 0), ==, 0);
    expect_dropped(f);
}

static void test_msg_oversized(Fixture *f, gconstpointer data)
{
    g_autofree uint8_t *junk = g_malloc0(4096);

    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_SET_CONFIG, VHOST_USER_VERSION,
                        1 << 20, junk, 4096, NULL, 0), ==, 0);
    expect_dropped(f);
}

static void test_msg_bad_version(Fixture *f, gconstpointer data)
{
    uint64_t v = 0;

    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_GET_FEATURES, 0x2, 0, &v, 0,
                        NULL, 0), ==, 0);
    expect_dropped(f);
}

static void test_msg_kick_without_fd(Fixture *f, gconstpointer data)
{
    uint64_t idx = 0;           /* no VHOST_USER_VRING_NOFD_MASK, no fd */

    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_SET_VRING_KICK, VHOST_USER_VERSION,
                        sizeof(idx), &idx, sizeof(idx), NULL, 0), ==, 0);
    expect_dropped(f);
}

static void test_msg_extra_fds(Fixture *f, gconstpointer data)
{
    VhostUserVringState s = { .index = 0, .num = 1 };
    int fds[3];

    for (int i = 0; i < 3; i++) {
        fds[i] = eventfd(0, EFD_CLOEXEC);
        g_assert_cmpint(fds[i], >=, 0);
    }
    /* SET_VRING_ENABLE takes no fd */
    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_SET_VRING_ENABLE, VHOST_USER_VERSION,
                        sizeof(s), &s, sizeof(s), fds, 3), ==, 0);
    for (int i = 0; i < 3; i++) {
        close(fds[i]);
    }
    expect_dropped(f);
}

static void test_msg_mem_table_fd_count(Fixture *f, gconstpointer data)
{
    VhostUserMemory mem = { .nregions = 2 };
    int fd = memfd_create("vb-bad", MFD_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 1 << 20), ==, 0);
    for (int i = 0; i < 2; i++) {
        mem.regions[i].guest_phys_addr = (uint64_t)i << 32;
        mem.regions[i].memory_size = 1 << 20;
        mem.regions[i].userspace_addr = 0x7f0000000000ULL + ((uint64_t)i << 32);
    }
    /* two regions, one fd */
    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_SET_MEM_TABLE, VHOST_USER_VERSION,
                        offsetof(VhostUserMemory, regions) +
                        2 * sizeof(VhostUserMemoryRegion), &mem,
                        offsetof(VhostUserMemory, regions) +
                        2 * sizeof(VhostUserMemoryRegion), &fd, 1), ==, 0);
    close(fd);
    expect_dropped(f);
}

static void test_msg_vring_index(Fixture *f, gconstpointer data)
{
    VhostUserVringState s = { .index = 200, .num = QSIZE };
    VhostUserMsg reply;
    int r;

    /* a queue that does not exist, with NEED_REPLY: refused (non-zero ack)
     * or the session dropped */
    g_assert_cmpint(vhost_user_frontend_send_msg_raw(
                        f->fe, VHOST_USER_SET_VRING_NUM,
                        VHOST_USER_VERSION | VHOST_USER_NEED_REPLY,
                        sizeof(s), &s, sizeof(s), NULL, 0), ==, 0);
    r = vhost_user_frontend_recv_raw(f->fe, &reply, NULL, NULL,
                                     DROP_TIMEOUT_MS);
    if (r == -ECONNRESET) {
        g_test_message("outcome: session dropped");
    } else {
        g_assert_cmpint(r, ==, sizeof(uint64_t));
        g_assert_cmpuint(reply.hdr.request, ==, VHOST_USER_SET_VRING_NUM);
        g_assert_cmpuint(reply.payload.u64, !=, 0);
        g_test_message("outcome: refused with ack %" PRIu64,
                       reply.payload.u64);
    }
    check_survived(f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    /* a failed check marks its case failed and the program goes on: the
     * fixture teardown kills the daemon and the other cases still run */
    g_test_set_nonfatal_assertions();
#define ADD(name, fn) \
    g_test_add("/vhost-blkd/bad/" name, Fixture, NULL, fixture_setup, fn, \
               fixture_teardown)
    ADD("desc-loop", test_desc_loop);
    ADD("desc-outside-memory", test_desc_outside_memory);
    ADD("chain-too-long", test_chain_too_long);
    ADD("header-short", test_header_short);
    ADD("status-readonly", test_status_readonly);
    ADD("avail-idx-jump", test_avail_idx_jump);
    ADD("msg-truncated", test_msg_truncated);
    ADD("msg-short-header", test_msg_short_header);
    ADD("msg-wrong-size", test_msg_wrong_size);
    ADD("msg-oversized", test_msg_oversized);
    ADD("msg-bad-version", test_msg_bad_version);
    ADD("msg-kick-without-fd", test_msg_kick_without_fd);
    ADD("msg-extra-fds", test_msg_extra_fds);
    ADD("msg-mem-table-fd-count", test_msg_mem_table_fd_count);
    ADD("msg-vring-index", test_msg_vring_index);
#undef ADD
    return g_test_run();
}
