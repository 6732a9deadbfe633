/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Integration test: vhost-blkd serving Ceph RBD images of a real cluster
 * (the rbd driver, block/rbd.c) through the front-end library.
 *
 * The cluster is the one $CEPH_CONF names (scripts/ceph-cluster.sh start
 * prints it; CI starts it before the tests).  Without CEPH_CONF every case
 * is skipped with that reason.  Each case makes its own image (named after
 * the process) in pool $VB_CEPH_POOL (default "rbd") with librbd and
 * removes it afterwards.
 *
 *   io:        reads and writes of several segments verify, flush, write
 *              zeroes (with and without the unmap bit) read back zeroes,
 *              the config space reports the image's object size as the
 *              optimal I/O size; io-poll: the same with
 *              rbd-completion=poll (librbd's event notification)
 *   snapshot:  an export of IMAGE@SNAP is read-only (writes fail) and
 *              reads the snapshot's data, not the image's
 *   takeover:  kill -9 with writes in flight and a restart: the new
 *              process breaks the dead one's exclusive lock (it knows from
 *              the inflight region the front-end hands back that it was
 *              restarted, and from this host's runtime directory who the
 *              earlier process was) once that client's watch is gone
 *              (the test blocklists the dead client once the daemon waits
 *              for that, as an operator would), and every resubmitted
 *              write completes and is in the image
 *   takeover-foreign: the same restart while another, live client holds
 *              the lock: it is not broken (nor that client blocklisted),
 *              and the daemon's writes get the lock from it as librbd
 *              hands it over
 *
 *   control:   librbd's control calls, each from the thread that runs
 *              it in the daemon: the size read after a resize on the
 *              cluster (control thread), block_resize over QMP (a resize
 *              worker), blockdev-del with the OSD stopped (answered at
 *              once, the close waits in a worker), the lock release when
 *              the device stops (control thread); test-blkd-rbd-seccomp runs every case again with
 *              --seccomp on (VB_SECCOMP=on), where none of them may make
 *              a system call the iothread filter lacks
 *
 * The daemons' runtime directory (RUNTIME_DIRECTORY, where an rbd node
 * records the client that has the image open for writing) is a temporary
 * directory of this test.
 */
#include "qemu/osdep.h"
#include "vb-daemon.h"
#include "vb-qmp.h"
#include <poll.h>
#include <sys/wait.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

#define IMG_SIZE    (64 << 20)
#define BUF_SIZE    (1 << 20)
#define NREQ        16
#define REQ_BYTES   65536

typedef struct Fixture {
    bool skip;
    rados_t cluster;
    rados_ioctx_t io;
    char *image;
    char *spec;                 /* --export keys for the image */
    VbDaemon d;
    VhostUserFrontend *fe;
    uint8_t *buf;
} Fixture;

static const char *rbd_pool(void)
{
    const char *p = g_getenv("VB_CEPH_POOL");

    return p ? p : "rbd";
}

/* Connect to the cluster and make an image; false (skipped) without one. */
static bool rbd_setup(Fixture *f, const char *tag)
{
    const char *conf = g_getenv("CEPH_CONF");
    int order = 22;             /* 4 MiB objects */

    memset(f, 0, sizeof(*f));
    if (!conf) {
        g_test_skip("CEPH_CONF is not set: start a cluster with "
                    "scripts/ceph-cluster.sh start and export CEPH_CONF");
        f->skip = true;
        return false;
    }
    g_assert_cmpint(rados_create(&f->cluster, NULL), ==, 0);
    g_assert_cmpint(rados_conf_read_file(f->cluster, conf), ==, 0);
    g_assert_cmpint(rados_connect(f->cluster), ==, 0);
    g_assert_cmpint(rados_ioctx_create(f->cluster, rbd_pool(), &f->io), ==,
                    0);
    f->image = g_strdup_printf("itest-%s-%d", tag, (int)getpid());
    rbd_remove(f->io, f->image);        /* a leftover of a killed run */
    g_assert_cmpint(rbd_create(f->io, f->image, IMG_SIZE, &order), ==, 0);
    f->spec = g_strdup_printf("rbd=%s/%s,ceph-conf=%s", rbd_pool(), f->image,
                              conf);
    return true;
}

static void rbd_start(Fixture *f, const char *spec)
{
    VbExportSpec es = { .num_queues = 1, .size = 4096, .rbd = spec };
    VhostUserFrontendOptions opts = { .queue_size = 256, .mem_size = 8 << 20 };
    g_autoptr(GError) err = NULL;

    vb_daemon_init(&f->d, 1, &es);
    f->d.stderr_to_log = true;
    vb_daemon_start(&f->d);
    f->fe = vb_connect(&f->d, 0, &opts);
    vb_start(f->fe);
    f->buf = vhost_user_frontend_mem_alloc(f->fe, BUF_SIZE, 4096, &err);
    g_assert_no_error(err);
}

/*
 * Stop the daemon the way its service manager does (SIGTERM) and check
 * that it exits cleanly.  It closes the image: its lock and its watch go
 * at once.  A daemon killed with SIGKILL would leave its watch to the
 * OSD for osd_client_watch_timeout, and rbd_remove() waits that out.
 */
static void rbd_daemon_stop(Fixture *f)
{
    gint64 deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;
    int status = 0;
    pid_t r;

    if (!f->d.pid) {
        return;
    }
    g_assert_cmpint(kill(f->d.pid, SIGTERM), ==, 0);
    while ((r = waitpid(f->d.pid, &status, WNOHANG)) == 0) {
        if (g_get_monotonic_time() >= deadline) {
            g_error("vhost-blkd (pid %d) did not exit within 60 s of "
                    "SIGTERM", (int)f->d.pid);
        }
        g_usleep(10 * 1000);    /* polling for the child's exit */
    }
    g_assert_cmpint(r, ==, f->d.pid);
    f->d.pid = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        g_autofree char *log = NULL;

        g_file_get_contents(f->d.log_path, &log, NULL, NULL);
        g_error("vhost-blkd did not exit cleanly on SIGTERM (wait status "
                "0x%x); its log:\n%s", status, log ? log : "");
    }
}

static void rbd_teardown(Fixture *f)
{
    if (f->skip) {
        return;
    }
    if (f->fe) {
        vhost_user_frontend_free(f->fe);
        rbd_daemon_stop(f);
        vb_daemon_cleanup(&f->d);
    }
    rbd_remove(f->io, f->image);
    rados_ioctx_destroy(f->io);
    rados_shutdown(f->cluster);
    g_free(f->image);
    g_free(f->spec);
}

/* The image's bytes at @off, read with librbd directly. */
static void rbd_read_direct(Fixture *f, const char *snap, uint64_t off,
                            void *buf, size_t len)
{
    rbd_image_t img;

    g_assert_cmpint(rbd_open_read_only(f->io, f->image, &img, snap), ==, 0);
    g_assert_cmpint(rbd_read(img, off, len, buf), ==, (ssize_t)len);
    rbd_close(img);
}

/* The io case with completion=@comp (NULL: the default, callback). */
static void run_io(const char *comp)
{
    Fixture f;
    g_autofree char *spec = NULL;
    struct iovec iov[3];
    struct virtio_blk_discard_write_zeroes *seg;
    struct virtio_blk_config cfg;
    g_autofree uint8_t *direct = g_malloc(3 * 65536);
    g_autofree uint8_t *zero = g_malloc0(65536);

    if (!rbd_setup(&f, comp ? comp : "io")) {
        return;
    }
    spec = comp ? g_strdup_printf("%s,rbd-completion=%s", f.spec, comp) :
                  g_strdup(f.spec);
    rbd_start(&f, spec);

    /* three segments of different sizes, one request */
    vb_fill_pattern(f.buf, 3 * 65536, 5);
    iov[0] = (struct iovec) { f.buf, 4096 };
    iov[1] = (struct iovec) { f.buf + 4096, 61440 };
    iov[2] = (struct iovec) { f.buf + 65536, 2 * 65536 };
    g_assert_cmpint(vb_reqv(f.fe, 0, VIRTIO_BLK_T_OUT, 2048, iov, 3, false,
                            NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    memset(f.buf + 4 * 65536, 0, 3 * 65536);
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_IN, 2048, f.buf + 4 * 65536,
                           3 * 65536, true, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(f.buf + 4 * 65536, 3 * 65536, 5));
    rbd_read_direct(&f, NULL, 2048 * 512, direct, 3 * 65536);
    g_assert_true(vb_check_pattern(direct, 3 * 65536, 5));

    /* write zeroes, thick and with the unmap bit: zeroes read back */
    for (int unmap = 0; unmap <= 1; unmap++) {
        uint64_t base = 8192 + unmap * 1024;

        vb_fill_pattern(f.buf, 3 * 65536, 8 + unmap);
        g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_OUT, base, f.buf,
                               3 * 65536, false, NULL), ==, VIRTIO_BLK_S_OK);
        seg = (void *)(f.buf + 4 * 65536);
        seg->sector = base + 128;
        seg->num_sectors = 128;
        seg->flags = unmap ? VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP : 0;
        g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_WRITE_ZEROES, 0, seg,
                               sizeof(*seg), false, NULL), ==,
                        VIRTIO_BLK_S_OK);
        rbd_read_direct(&f, NULL, base * 512, direct, 3 * 65536);
        g_assert_cmpmem(direct, 65536, f.buf, 65536);
        g_assert_cmpmem(direct + 65536, 65536, zero, 65536);
        g_assert_cmpmem(direct + 2 * 65536, 65536, f.buf + 2 * 65536, 65536);
    }

    /* the object size (4 MiB) as the optimal I/O size, in 512-byte
     * blocks; the capacity is the image's */
    g_assert_true(vhost_user_frontend_get_config(f.fe, 0, &cfg, sizeof(cfg),
                                                 NULL));
    g_assert_cmpuint(cfg.capacity, ==, IMG_SIZE / 512);
    g_assert_cmpuint(cfg.opt_io_size, ==, (4 << 20) / 512);
    rbd_teardown(&f);
}

static void test_io(void)
{
    run_io(NULL);
}

/* The same through librbd's event notification (block/rbd.c, "poll"). */
static void test_io_poll(void)
{
    run_io("poll");
}

static void test_snapshot(void)
{
    Fixture f;
    rbd_image_t img;
    g_autofree char *spec = NULL;
    g_autofree uint8_t *data = g_malloc(65536);

    if (!rbd_setup(&f, "snap")) {
        return;
    }
    /* the image holds pattern 1 when the snapshot is taken, 2 after */
    g_assert_cmpint(rbd_open(f.io, f.image, &img, NULL), ==, 0);
    vb_fill_pattern(data, 65536, 1);
    g_assert_cmpint(rbd_write(img, 0, 65536, (char *)data), ==, 65536);
    g_assert_cmpint(rbd_snap_create(img, "s1"), ==, 0);
    vb_fill_pattern(data, 65536, 2);
    g_assert_cmpint(rbd_write(img, 0, 65536, (char *)data), ==, 65536);
    rbd_close(img);

    spec = g_strdup_printf("rbd=%s/%s@s1,ceph-conf=%s", rbd_pool(), f.image,
                           g_getenv("CEPH_CONF"));
    rbd_start(&f, spec);
    g_assert_true(vhost_user_frontend_has_feature(f.fe, VIRTIO_BLK_F_RO));
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_IN, 0, f.buf, 65536, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(f.buf, 65536, 1));
    vb_fill_pattern(f.buf, 4096, 3);
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_OUT, 0, f.buf, 4096, false,
                           NULL), ==, VIRTIO_BLK_S_IOERR);
    rbd_read_direct(&f, NULL, 0, data, 65536);
    g_assert_true(vb_check_pattern(data, 65536, 2));

    vhost_user_frontend_free(f.fe);
    f.fe = NULL;
    rbd_daemon_stop(&f);
    vb_daemon_cleanup(&f.d);
    g_assert_cmpint(rbd_open(f.io, f.image, &img, NULL), ==, 0);
    g_assert_cmpint(rbd_snap_remove(img, "s1"), ==, 0);
    rbd_close(img);
    rbd_teardown(&f);
}

/* The daemon's log once it holds @a or @b (at most 120 s). */
static char *wait_log(Fixture *f, const char *a, const char *b)
{
    gint64 deadline = g_get_monotonic_time() + 120 * G_USEC_PER_SEC;
    char *log = NULL;

    for (;;) {
        g_free(log);
        log = NULL;
        if (g_file_get_contents(f->d.log_path, &log, NULL, NULL) &&
            (strstr(log, a) || strstr(log, b))) {
            return log;
        }
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        g_usleep(100 * 1000);
    }
}

/* The client that holds the image's exclusive lock (there must be one),
 * as `rbd lock ls` shows it. */
static char *lock_owner(Fixture *f)
{
    char *owners[4];
    size_t n = G_N_ELEMENTS(owners);
    rbd_lock_mode_t mode;
    rbd_image_t img;
    char *owner;

    g_assert_cmpint(rbd_open(f->io, f->image, &img, NULL), ==, 0);
    g_assert_cmpint(rbd_lock_get_owners(img, &mode, owners, &n), ==, 0);
    rbd_close(img);
    g_assert_cmpuint(n, ==, 1);
    owner = g_strdup(owners[0]);
    rbd_lock_get_owners_cleanup(owners, n);
    return owner;
}

static void test_takeover(void)
{
    Fixture f;
    g_autoptr(GError) err = NULL;
    VhostUserFrontendCompletion c[NREQ];
    g_autofree char *log = NULL;
    g_autofree uint8_t *direct = g_malloc(REQ_BYTES);
    g_autofree char *dead = NULL;
    bool seen[NREQ] = { false };
    uint64_t size;
    int64_t t0;
    int n;

    if (!rbd_setup(&f, "kill")) {
        return;
    }
    rbd_start(&f, f.spec);
    g_assert_cmpint(vhost_user_frontend_inflight_fd(f.fe, &size), >=, 0);

    /* the first write takes the exclusive lock */
    vb_fill_pattern(f.buf, 4096, 99);
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_OUT, 0, f.buf, 4096, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    for (int i = 0; i < NREQ; i++) {
        struct iovec iov = { f.buf + (size_t)i * REQ_BYTES, REQ_BYTES };

        vb_fill_pattern(iov.iov_base, REQ_BYTES, 300 + i);
        g_assert_cmpint(vhost_user_frontend_blk_submit(
                            f.fe, 0, VIRTIO_BLK_T_OUT,
                            8 + (uint64_t)i * (REQ_BYTES / 512) * 2, &iov, 1,
                            false, GINT_TO_POINTER(i + 1)), >=, 0);
    }
    g_assert_cmpint(vhost_user_frontend_kick(f.fe, 0), >=, 0);
    vb_daemon_kill(&f.d);       /* kill -9: the lock stays with it */
    dead = lock_owner(&f);

    t0 = g_get_monotonic_time();
    vb_daemon_start(&f.d);
    vhost_user_frontend_reconnect(f.fe, 10000, &err);
    g_assert_no_error(err);
    /*
     * The lock is broken once the dead client's watch is gone.  Left
     * alone, the OSD drops it osd_client_watch_timeout after the kill
     * (30 s by default, 15 s in the cluster of scripts/ceph-cluster.sh).
     * Once the daemon says it waits for that, do what an operator who
     * knows the client is dead does: blocklist it (ceph osd blocklist
     * add), and the OSD drops its watch at once.  (On a machine slow
     * enough for the watch to be gone before the daemon looked, it says
     * it took the lock over straight away.)
     */
    log = wait_log(&f, "breaking it once its watch", "had expired");
    if (!strstr(log, "had expired")) {
        g_assert_nonnull(strstr(log, dead));
        g_assert_cmpint(rados_blocklist_add(f.cluster, dead, 0), ==, 0);
    }
    g_clear_pointer(&log, g_free);
    n = 0;
    while (n < NREQ &&
           g_get_monotonic_time() - t0 < 180 * G_USEC_PER_SEC) {
        n += vb_reap_n(f.fe, 0, c + n, NREQ - n);
    }
    g_test_message("every resubmitted write completed %.2f s after the "
                   "restart", (g_get_monotonic_time() - t0) / 1e6);
    g_assert_cmpint(n, ==, NREQ);
    for (int i = 0; i < n; i++) {
        int idx = GPOINTER_TO_INT(c[i].opaque) - 1;

        g_assert_cmpint(idx, >=, 0);
        g_assert_cmpint(idx, <, NREQ);
        g_assert_false(seen[idx]);
        seen[idx] = true;
        g_assert_cmpint(c[i].status, ==, VIRTIO_BLK_S_OK);
    }
    for (int i = 0; i < NREQ; i++) {
        rbd_read_direct(&f, NULL, (8 + (uint64_t)i * (REQ_BYTES / 512) * 2) *
                        512, direct, REQ_BYTES);
        g_assert_true(vb_check_pattern(direct, REQ_BYTES, 300 + i));
    }
    /* broken by us or, seeing the same expired watch first, by librbd */
    log = wait_log(&f, "once its watch had expired", "not broken");
    g_assert_nonnull(strstr(log, "an earlier process of this back-end"));
    g_assert_nonnull(strstr(log, "once its watch had expired"));
    rbd_teardown(&f);
}

/*
 * The restart signal comes from the front-end (the inflight region): a
 * VMM can send it at will.  The lock then held by another client, alive
 * (here: this test's own librbd handle, which took it over from the
 * daemon), must not be broken: only the earlier process of this host
 * may lose its lock, and only once it is gone.
 */
static void test_takeover_foreign(void)
{
    Fixture f;
    g_autoptr(GError) err = NULL;
    g_autofree char *log = NULL;
    g_autofree uint8_t *data = g_malloc(4096);
    g_autofree char *dead = NULL;
    rbd_image_t img;
    uint64_t size;
    int owner = 0;

    if (!rbd_setup(&f, "foreign")) {
        return;
    }
    rbd_start(&f, f.spec);
    g_assert_cmpint(vhost_user_frontend_inflight_fd(f.fe, &size), >=, 0);
    vb_fill_pattern(f.buf, 4096, 7);
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_OUT, 0, f.buf, 4096, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    dead = lock_owner(&f);      /* this daemon's client */

    /* another client asks for the lock and gets it (automatic policy) */
    g_assert_cmpint(rbd_open(f.io, f.image, &img, NULL), ==, 0);
    vb_fill_pattern(data, 4096, 8);
    g_assert_cmpint(rbd_write(img, 65536, 4096, (char *)data), ==, 4096);
    g_assert_cmpint(rbd_is_exclusive_lock_owner(img, &owner), ==, 0);
    g_assert_cmpint(owner, ==, 1);

    vb_daemon_kill(&f.d);
    /*
     * The killed process is fenced as an operator would (ceph osd
     * blocklist add): else its watch stays osd_client_watch_timeout,
     * and every notify to the image's watchers (the new process asking
     * the owner for the lock) waits for it.  The live owner is not
     * touched; what it holds is what this case checks.
     */
    g_assert_cmpint(rados_blocklist_add(f.cluster, dead, 0), ==, 0);
    vb_daemon_start(&f.d);
    vhost_user_frontend_reconnect(f.fe, 10000, &err);
    g_assert_no_error(err);
    log = wait_log(&f, "not broken", "took the exclusive lock over");
    g_assert_null(strstr(log, "took the exclusive lock over"));
    g_assert_nonnull(strstr(log, "not broken"));

    /* still the owner, and not blocklisted: its writes go on */
    g_assert_cmpint(rbd_is_exclusive_lock_owner(img, &owner), ==, 0);
    g_assert_cmpint(owner, ==, 1);
    vb_fill_pattern(data, 4096, 9);
    g_assert_cmpint(rbd_write(img, 65536, 4096, (char *)data), ==, 4096);
    g_assert_cmpint(rbd_flush(img), ==, 0);

    /* the daemon's next write asks for the lock and gets it */
    vb_fill_pattern(f.buf, 4096, 10);
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_OUT, 8, f.buf, 4096, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    rbd_close(img);
    rbd_read_direct(&f, NULL, 65536, data, 4096);
    g_assert_true(vb_check_pattern(data, 4096, 9));
    rbd_read_direct(&f, NULL, 8 * 512, data, 4096);
    g_assert_true(vb_check_pattern(data, 4096, 10));
    rbd_teardown(&f);
}

/* The pid of the cluster's only OSD (scripts/ceph-cluster.sh keeps it
 * in run/ beside the ceph.conf). */
static pid_t osd_pid(void)
{
    g_autofree char *dir = g_path_get_dirname(g_getenv("CEPH_CONF"));
    g_autofree char *path = g_build_filename(dir, "run", "osd.0.pid", NULL);
    g_autofree char *text = NULL;
    pid_t pid;

    g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
    pid = atoi(text);
    g_assert_cmpint(pid, >, 1);
    return pid;
}

/* The capacity the device reports, in bytes. */
static uint64_t device_capacity(Fixture *f)
{
    uint64_t cap = 0;
    g_autoptr(GError) err = NULL;

    g_assert_true(vhost_user_frontend_get_config(
        f->fe, offsetof(struct virtio_blk_config, capacity), &cap,
        sizeof(cap), &err));
    g_assert_no_error(err);
    return cap * 512;
}

static void test_control(void)
{
    Fixture f;
    VbQmp q;
    g_autofree char *spec = NULL, *qmp_path = NULL, *chardev = NULL;
    g_autofree char *cmd = NULL, *log = NULL;
    VbExportSpec es = { .num_queues = 1, .size = 4096 };
    VhostUserFrontendOptions opts = { .queue_size = 256, .mem_size = 8 << 20 };
    g_autoptr(GError) err = NULL;
    rbd_image_t img;
    uint64_t size;
    gint64 deadline;

    if (!rbd_setup(&f, "ctl")) {
        return;
    }
    spec = g_strdup_printf("%s,node-name=r0", f.spec);
    es.rbd = spec;
    vb_daemon_init(&f.d, 1, &es);
    f.d.stderr_to_log = true;
    qmp_path = g_strdup_printf("%s/qmp.sock", f.d.dir);
    chardev = g_strdup_printf("socket,id=mon,path=%s,server=on,wait=off",
                              qmp_path);
    {
        const char *args[] = {
            "--chardev", chardev, "--monitor", "chardev=mon", NULL,
        };

        f.d.args = args;
        vb_daemon_start(&f.d);
        f.d.args = NULL;
    }
    vb_qmp_connect(&q, qmp_path, &f.d);
    f.fe = vb_connect(&f.d, 0, &opts);
    vb_start(f.fe);
    f.buf = vhost_user_frontend_mem_alloc(f.fe, BUF_SIZE, 4096, &err);
    g_assert_no_error(err);

    /* the first write takes the lock (in the iothread) */
    vb_fill_pattern(f.buf, 4096, 11);
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_OUT, 0, f.buf, 4096, false,
                           NULL), ==, VIRTIO_BLK_S_OK);

    /* a resize on the cluster: the control thread reads the size */
    g_assert_cmpint(rbd_open(f.io, f.image, &img, NULL), ==, 0);
    g_assert_cmpint(rbd_resize2(img, 2 * IMG_SIZE, false, NULL, NULL), ==,
                    0);
    rbd_close(img);
    deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;
    while (device_capacity(&f) != 2 * IMG_SIZE) {
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        g_usleep(50 * 1000);
    }

    /* block_resize: rbd_resize2 in a worker */
    cmd = g_strdup_printf("{\"execute\": \"block_resize\", \"arguments\": "
                          "{\"node-name\": \"r0\", \"size\": %d}}",
                          3 * IMG_SIZE);
    vb_qmp_ok(&q, cmd);
    g_assert_cmpuint(device_capacity(&f), ==, 3 * IMG_SIZE);
    g_assert_cmpint(rbd_open(f.io, f.image, &img, NULL), ==, 0);
    g_assert_cmpint(rbd_get_size(img, &size), ==, 0);
    g_assert_cmpuint(size, ==, 3 * IMG_SIZE);
    rbd_close(img);

    /*
     * blockdev-del of an rbd node while the cluster does not answer (its
     * only OSD stopped with SIGSTOP): the close waits for the OSD in a
     * worker, and the reply comes at once.  (At most 30 s, a hang guard:
     * the OSD goes on before anything is checked.)
     */
    {
        g_autofree char *add = g_strdup_printf(
            "{\"execute\": \"blockdev-add\", \"arguments\": {\"driver\": "
            "\"rbd\", \"node-name\": \"d1\", \"pool\": \"%s\", "
            "\"image\": \"%s\", \"conf\": \"%s\"}}", rbd_pool(), f.image,
            g_getenv("CEPH_CONF"));
        const char *del = "{\"execute\": \"blockdev-del\", \"arguments\": "
                          "{\"node-name\": \"d1\"}}\n";
        struct pollfd pfd = { .fd = q.fd, .events = POLLIN };
        g_autofree char *reply = NULL;
        pid_t osd = osd_pid();
        ssize_t wr;
        int pr = -1;

        vb_qmp_ok(&q, add);
        g_assert_cmpint(kill(osd, SIGSTOP), ==, 0);
        /* nothing may fail before SIGCONT: the OSD would stay stopped */
        wr = write(q.fd, del, strlen(del));
        if (wr == (ssize_t)strlen(del)) {
            pr = poll(&pfd, 1, 30 * 1000);
        }
        g_assert_cmpint(kill(osd, SIGCONT), ==, 0);
        g_assert_cmpint(wr, ==, strlen(del));
        g_assert_cmpint(pr, ==, 1);
        reply = vb_qmp_line(&q);
        g_assert_nonnull(strstr(reply, "\"return\""));
    }

    /* the device stops: the control thread releases the lock */
    vhost_user_frontend_free(f.fe);
    f.fe = NULL;
    deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;
    for (;;) {
        char *owners[4];
        size_t n = G_N_ELEMENTS(owners);
        rbd_lock_mode_t mode;
        int r;

        g_assert_cmpint(rbd_open(f.io, f.image, &img, NULL), ==, 0);
        r = rbd_lock_get_owners(img, &mode, owners, &n);
        if (r == 0) {
            rbd_lock_get_owners_cleanup(owners, n);
        }
        rbd_close(img);
        if (r == -ENOENT || (r == 0 && n == 0)) {
            break;
        }
        if (g_get_monotonic_time() >= deadline) {
            g_autofree char *l = NULL;

            g_file_get_contents(f.d.log_path, &l, NULL, NULL);
            g_test_message("lock owners: %d (%d); daemon log:\n%s", (int)n,
                           r, l);
        }
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        g_usleep(50 * 1000);
    }
    log = wait_log(&f, "exclusive lock released", "does not allow");
    if (strstr(log, "does not allow")) {
        g_test_message("daemon log:\n%s", log);
    }
    g_assert_null(strstr(log, "does not allow"));
    g_assert_true(vb_daemon_alive(&f.d));
    vb_qmp_close(&q);
    rbd_daemon_stop(&f);
    vb_daemon_cleanup(&f.d);
    rbd_teardown(&f);
}

int main(int argc, char **argv)
{
    g_autofree char *rundir = g_dir_make_tmp("vb-rbd-run-XXXXXX", NULL);
    g_autoptr(GDir) dir = NULL;
    const char *name;
    int ret;

    g_assert_nonnull(rundir);
    g_setenv("RUNTIME_DIRECTORY", rundir, true);
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vhost-blkd/rbd/io", test_io);
    g_test_add_func("/vhost-blkd/rbd/io-poll", test_io_poll);
    g_test_add_func("/vhost-blkd/rbd/snapshot", test_snapshot);
    g_test_add_func("/vhost-blkd/rbd/takeover", test_takeover);
    g_test_add_func("/vhost-blkd/rbd/takeover-foreign",
                    test_takeover_foreign);
    g_test_add_func("/vhost-blkd/rbd/control", test_control);
    ret = g_test_run();
    /* what killed daemons left */
    dir = g_dir_open(rundir, 0, NULL);
    while (dir && (name = g_dir_read_name(dir))) {
        g_autofree char *p = g_build_filename(rundir, name, NULL);

        unlink(p);
    }
    rmdir(rundir);
    return ret;
}
