/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The NBD client driver (block/nbd.c) against qemu-nbd (qemu-utils),
 * started by the test on a unix socket in a temporary directory: the
 * driver contract (every request type, completions never inside the
 * submission, data that matches the image file), a read-only export,
 * block status over a sparse file, and the connection dropping: a
 * server killed and restarted within reconnect-delay (the request waits
 * and succeeds), one that stays away past it (EIO, and a later request
 * after the restart succeeds), reconnect-delay=0 (EIO at once).  The
 * options parser's refusals too.  Driven step by step with aio_poll();
 * each case skips when qemu-nbd is missing.
 */
#include "qemu/osdep.h"
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include "qemu/aio.h"
#include "qemu/qmp-args.h"
#include "block/block.h"
#include "block/block_int.h"
#include "block/nbd.h"

#define IMG_SIZE (4 * 1024 * 1024)

static AioContext *ctx;
static char *tmpdir;

typedef struct Server {
    char *img;
    char *sock;
    char *pidfile;
    bool readonly;
    pid_t pid;
} Server;

typedef struct Req {
    BlockAIOCB acb;
    int ret;
    bool done;
} Req;

static bool have_qemu_nbd(void)
{
    g_autofree char *p = g_find_program_in_path("qemu-nbd");

    if (!p) {
        g_test_skip("qemu-nbd (qemu-utils) is not installed");
        return false;
    }
    return true;
}

/*
 * qemu-nbd --fork detaches from us: a failed assertion (abort()) would
 * leave the servers running.  Their pids are kept here and killed from
 * the SIGABRT handler.
 */
#define MAX_SERVERS 8
static volatile pid_t server_pids[MAX_SERVERS];

static void server_track(pid_t pid, bool add)
{
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (add ? !server_pids[i] : server_pids[i] == pid) {
            server_pids[i] = add ? pid : 0;
            return;
        }
    }
}

static void abort_handler(int sig)
{
    for (int i = 0; i < MAX_SERVERS; i++) {
        if (server_pids[i]) {
            kill(server_pids[i], SIGKILL);
        }
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* qemu-nbd --fork returns once the socket listens. */
static void server_start(Server *s)
{
    g_autofree char *out = NULL, *err_out = NULL, *pid = NULL;
    g_autoptr(GError) err = NULL;
    int status;
    const char *argv[] = {
        "qemu-nbd", "-f", "raw", "-t", "-x", "exp", "--fork", "--shared=8",
        "--pid-file", s->pidfile, "--socket", s->sock,
        s->readonly ? "-r" : s->img, s->readonly ? s->img : NULL, NULL,
    };

    unlink(s->sock);            /* a killed server leaves it */
    g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL,
                               G_SPAWN_SEARCH_PATH, NULL, NULL, &out,
                               &err_out, &status, &err));
    if (!g_spawn_check_wait_status(status, NULL)) {
        g_error("qemu-nbd failed: %s", err_out);
    }
    g_assert_true(g_file_get_contents(s->pidfile, &pid, NULL, NULL));
    s->pid = atoi(pid);
    g_assert_cmpint(s->pid, >, 0);
    server_track(s->pid, true);
}

/* SIGKILL, and wait until the process is gone (a pidfd: it is not our
 * child). */
static void server_kill(Server *s)
{
    int pfd;
    struct pollfd p;

    if (!s->pid) {
        return;
    }
    pfd = syscall(SYS_pidfd_open, s->pid, 0);
    server_track(s->pid, false);
    g_assert_cmpint(kill(s->pid, SIGKILL), ==, 0);
    if (pfd >= 0) {
        p = (struct pollfd){ .fd = pfd, .events = POLLIN };
        g_assert_cmpint(poll(&p, 1, 30000), ==, 1);
        close(pfd);
    }
    s->pid = 0;
}

static void server_init(Server *s, const char *name, bool readonly)
{
    int fd;

    memset(s, 0, sizeof(*s));
    s->img = g_strdup_printf("%s/%s.img", tmpdir, name);
    s->sock = g_strdup_printf("%s/%s.sock", tmpdir, name);
    s->pidfile = g_strdup_printf("%s/%s.pid", tmpdir, name);
    s->readonly = readonly;
    fd = open(s->img, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, IMG_SIZE), ==, 0);
    close(fd);
}

static void server_cleanup(Server *s)
{
    server_kill(s);
    unlink(s->img);
    unlink(s->sock);
    unlink(s->pidfile);
    g_free(s->img);
    g_free(s->sock);
    g_free(s->pidfile);
}

static BlockBackend *nbd_open(Server *s, uint32_t delay, bool readonly,
                              GError **errp)
{
    BlockNbdOptions o = {
        .type = BLOCK_NBD_SERVER_UNIX,
        .path = s->sock,
        .export_name = "exp",
        .reconnect_delay = delay,
    };
    BlockOptions opts;

    blk_options_init(&opts);
    blk_nbd_options(&opts, &o);
    opts.readonly = readonly;
    return blk_open(&opts, errp);
}

static void req_cb(void *opaque, int ret)
{
    Req *r = opaque;

    r->ret = ret;
    r->done = true;
}

/* Wait for @r, which must not have completed inside its submission. */
static int req_wait(Req *r)
{
    g_assert_false(r->done);
    while (!r->done) {
        aio_poll(ctx, true);
    }
    return r->ret;
}

/* Three segments, so that a request is several NBD commands. */
static void rw_start(Req *r, BlockBackend *blk, bool write, int flags,
                     int64_t off, void *buf, size_t len,
                     struct iovec iov[3])
{
    iov[0] = (struct iovec){ buf, len / 4 };
    iov[1] = (struct iovec){ (char *)buf + len / 4, len / 4 };
    iov[2] = (struct iovec){ (char *)buf + len / 2, len - len / 2 };
    memset(r, 0, sizeof(*r));
    if (write) {
        blk_aio_pwritev(blk, &r->acb, off, iov, 3, flags, req_cb, r);
    } else {
        blk_aio_preadv(blk, &r->acb, off, iov, 3, req_cb, r);
    }
}

static int do_rw(BlockBackend *blk, bool write, int flags, int64_t off,
                 void *buf, size_t len)
{
    struct iovec iov[3];
    Req r;

    rw_start(&r, blk, write, flags, off, buf, len, iov);
    return req_wait(&r);
}

static int do_other(BlockBackend *blk, int type, int64_t off, uint64_t len,
                    int flags)
{
    Req r = { 0 };

    switch (type) {
    case BLK_REQ_FLUSH:
        blk_aio_flush(blk, &r.acb, req_cb, &r);
        break;
    case BLK_REQ_DISCARD:
        blk_aio_pdiscard(blk, &r.acb, off, len, req_cb, &r);
        break;
    default:
        blk_aio_pwrite_zeroes(blk, &r.acb, off, len, flags, req_cb, &r);
        break;
    }
    return req_wait(&r);
}

static void fill(uint8_t *buf, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++) {
        buf[i] = (uint8_t)(seed + i * 7 + (i >> 9));
    }
}

static void read_file(const char *path, off_t off, void *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, buf, len, off), ==, len);
    close(fd);
}

static void write_file(const char *path, off_t off, const void *buf,
                       size_t len)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pwrite(fd, buf, len, off), ==, len);
    close(fd);
}

/* Every request type; the data is the image file's. */
static void test_contract(void)
{
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *buf = g_malloc(256 * 1024);
    g_autofree uint8_t *chk = g_malloc(256 * 1024);
    g_autofree char *name = NULL;
    BlockBackend *blk;
    Server s;

    if (!have_qemu_nbd()) {
        return;
    }
    server_init(&s, "rw", false);
    server_start(&s);
    blk = nbd_open(&s, 0, false, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(blk_getlength(blk), ==, IMG_SIZE);
    g_assert_false(blk_is_read_only(blk));
    g_assert_cmpstr(blk_get_driver_name(blk), ==, "nbd");
    g_assert_true(blk_can_discard(blk));
    g_assert_true(blk_can_write_zeroes(blk));
    g_assert_true(blk_attach_aio_context(blk, ctx, &err));
    g_assert_no_error(err);

    /* Data written through the node is in the file, and back. */
    fill(buf, 256 * 1024, 3);
    g_assert_cmpint(do_rw(blk, true, 0, 65536, buf, 256 * 1024), ==, 0);
    read_file(s.img, 65536, chk, 256 * 1024);
    g_assert_cmpmem(chk, 256 * 1024, buf, 256 * 1024);
    /* And what the file holds is what a read returns. */
    fill(chk, 8192, 9);
    write_file(s.img, 1 << 20, chk, 8192);
    g_assert_cmpint(do_rw(blk, false, 0, 1 << 20, buf, 8192), ==, 0);
    g_assert_cmpmem(buf, 8192, chk, 8192);
    /* FUA (qemu-nbd has it), flush. */
    fill(buf, 4096, 11);
    g_assert_cmpint(do_rw(blk, true, BDRV_REQ_FUA, 8192, buf, 4096), ==, 0);
    read_file(s.img, 8192, chk, 4096);
    g_assert_cmpmem(chk, 4096, buf, 4096);
    g_assert_cmpint(do_other(blk, BLK_REQ_FLUSH, 0, 0, 0), ==, 0);
    /* Write-zeroes and discard read back as zeroes (qemu-nbd's raw file
     * punches holes). */
    g_assert_cmpint(do_other(blk, BLK_REQ_WRITE_ZEROES, 65536, 65536, 0),
                    ==, 0);
    g_assert_cmpint(do_other(blk, BLK_REQ_DISCARD, 131072, 65536, 0), ==, 0);
    g_assert_cmpint(do_rw(blk, false, 0, 65536, buf, 65536), ==, 0);
    g_assert_true(buf[0] == 0 && !memcmp(buf, buf + 1, 65535));
    read_file(s.img, 65536, chk, 65536);
    g_assert_cmpmem(chk, 65536, buf, 65536);
    /* The server decides the size. */
    g_assert_false(blk_truncate(blk, IMG_SIZE * 2, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "cannot be resized"));
    g_clear_error(&err);
    g_assert_cmpuint(blk_getlength(blk), ==, IMG_SIZE);
    /* Past the end: refused by the block layer, not the server. */
    g_assert_cmpint(do_rw(blk, false, 0, IMG_SIZE - 4096, buf, 8192), <, 0);

    blk_detach_aio_context(blk, ctx);
    /* A request after the detach connects again (lazily). */
    g_assert_cmpint(do_rw(blk, false, 0, 8192, buf, 4096), ==, 0);
    g_assert_cmpmem(chk, 0, buf, 0);
    blk_close(blk);
    server_cleanup(&s);
}

/* One segment larger than the server's maximum payload (qemu-nbd: 32
 * MiB): several NBD commands for one request. */
static void test_large(void)
{
    const size_t len = 40u << 20;
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *buf = g_malloc(len);
    g_autofree uint8_t *chk = g_malloc(len);
    struct iovec iov = { buf, len };
    BlockBackend *blk;
    Server s;
    Req r = { 0 };
    int fd;

    if (!have_qemu_nbd()) {
        return;
    }
    server_init(&s, "big", false);
    fd = open(s.img, O_RDWR | O_CLOEXEC);
    g_assert_cmpint(ftruncate(fd, 64u << 20), ==, 0);
    close(fd);
    server_start(&s);
    blk = nbd_open(&s, 0, false, &err);
    g_assert_no_error(err);
    fill(buf, len, 21);
    blk_aio_pwritev(blk, &r.acb, 4096, &iov, 1, 0, req_cb, &r);
    g_assert_cmpint(req_wait(&r), ==, 0);
    read_file(s.img, 4096, chk, len);
    g_assert_true(memcmp(chk, buf, len) == 0);
    memset(buf, 0, len);
    memset(&r, 0, sizeof(r));
    blk_aio_preadv(blk, &r.acb, 4096, &iov, 1, req_cb, &r);
    g_assert_cmpint(req_wait(&r), ==, 0);
    g_assert_true(memcmp(chk, buf, len) == 0);
    blk_close(blk);
    server_cleanup(&s);
}

static int block_status(BlockBackend *blk, int64_t off, uint64_t len,
                        BlockStatus *st)
{
    Req r = { 0 };

    blk_aio_block_status(blk, &r.acb, off, len, st, req_cb, &r);
    return req_wait(&r);
}

/* base:allocation: holes of a sparse file read as zero, data as data. */
static void test_block_status(void)
{
    g_autoptr(GError) err = NULL;
    uint8_t data[65536];
    BlockStatus st;
    BlockBackend *blk;
    Server s;

    if (!have_qemu_nbd()) {
        return;
    }
    server_init(&s, "bs", false);
    fill(data, sizeof(data), 1);
    write_file(s.img, 1 << 20, data, sizeof(data));
    server_start(&s);
    blk = nbd_open(&s, 0, false, &err);
    g_assert_no_error(err);

    g_assert_cmpint(block_status(blk, 0, IMG_SIZE, &st), ==, 0);
    g_assert_cmpuint(st.pnum, ==, 1 << 20);
    g_assert_cmpuint(st.flags & (BDRV_BLOCK_DATA | BDRV_BLOCK_ZERO), ==,
                     BDRV_BLOCK_ZERO);
    g_assert_cmpint(block_status(blk, 1 << 20, IMG_SIZE - (1 << 20), &st),
                    ==, 0);
    g_assert_cmpuint(st.pnum, >=, 4096);
    g_assert_cmpuint(st.pnum, <=, sizeof(data));
    g_assert_true(st.flags & BDRV_BLOCK_DATA);
    g_assert_false(st.flags & BDRV_BLOCK_ZERO);
    blk_close(blk);
    server_cleanup(&s);
}

/* qemu-nbd -r: the node is read-only whatever it asked, writes are
 * refused, reads work. */
static void test_read_only(void)
{
    g_autoptr(GError) err = NULL;
    uint8_t buf[4096];
    BlockBackend *blk;
    Server s;

    if (!have_qemu_nbd()) {
        return;
    }
    server_init(&s, "ro", true);
    server_start(&s);
    blk = nbd_open(&s, 0, false, &err);
    g_assert_no_error(err);
    g_assert_true(blk_is_read_only(blk));
    g_assert_false(blk_can_discard(blk));
    g_assert_cmpint(do_rw(blk, false, 0, 0, buf, sizeof(buf)), ==, 0);
    g_assert_cmpint(do_rw(blk, true, 0, 0, buf, sizeof(buf)), <, 0);
    blk_close(blk);
    server_cleanup(&s);
}

/* Killed, then back within reconnect-delay: a request submitted while it
 * is away waits and succeeds. */
static void test_reconnect(void)
{
    g_autoptr(GError) err = NULL;
    g_autofree uint8_t *buf = g_malloc(65536);
    g_autofree uint8_t *chk = g_malloc(65536);
    g_autofree uint8_t *fbuf = g_malloc(65536);
    struct iovec iov[3], fiov[3];
    BlockBackend *blk;
    Server s;
    Req r, w, f;

    if (!have_qemu_nbd()) {
        return;
    }
    server_init(&s, "rc", false);
    server_start(&s);
    blk = nbd_open(&s, 60, false, &err);
    g_assert_no_error(err);
    fill(buf, 65536, 5);
    g_assert_cmpint(do_rw(blk, true, 0, 0, buf, 65536), ==, 0);

    /* @f goes out before the kill (its answer may or may not come
     * back first: it succeeds either way), @w after it. */
    fill(chk, 65536, 6);
    rw_start(&f, blk, false, 0, 0, fbuf, 65536, fiov);
    server_kill(&s);
    rw_start(&w, blk, true, 0, 131072, chk, 65536, iov);
    for (int i = 0; i < 20; i++) {
        aio_poll(ctx, false);   /* let it see the drop; no wait */
    }
    g_assert_false(w.done);
    server_start(&s);
    g_assert_cmpint(req_wait(&w), ==, 0);
    while (!f.done) {
        aio_poll(ctx, true);
    }
    g_assert_cmpint(f.ret, ==, 0);
    fill(buf, 65536, 5);
    g_assert_cmpmem(fbuf, 65536, buf, 65536);
    /* And the node goes on. */
    rw_start(&r, blk, false, 0, 131072, buf, 65536, iov);
    g_assert_cmpint(req_wait(&r), ==, 0);
    g_assert_cmpmem(buf, 65536, chk, 65536);
    read_file(s.img, 131072, buf, 65536);
    g_assert_cmpmem(buf, 65536, chk, 65536);
    blk_close(blk);
    server_cleanup(&s);
}

/* Away past reconnect-delay=1: EIO; after the restart the next request
 * reconnects and succeeds. */
static void test_reconnect_expired(void)
{
    g_autoptr(GError) err = NULL;
    uint8_t buf[4096];
    BlockBackend *blk;
    Server s;

    if (!have_qemu_nbd()) {
        return;
    }
    server_init(&s, "rx", false);
    server_start(&s);
    blk = nbd_open(&s, 1, false, &err);
    g_assert_no_error(err);
    g_assert_cmpint(do_rw(blk, false, 0, 0, buf, sizeof(buf)), ==, 0);
    server_kill(&s);
    g_assert_cmpint(do_rw(blk, false, 0, 0, buf, sizeof(buf)), ==, -EIO);
    /* Still away: at once. */
    g_assert_cmpint(do_rw(blk, false, 0, 0, buf, sizeof(buf)), ==, -EIO);
    server_start(&s);
    g_assert_cmpint(do_rw(blk, false, 0, 0, buf, sizeof(buf)), ==, 0);
    blk_close(blk);
    server_cleanup(&s);
}

/* Back with another size: not used (the node keeps its shape), the
 * request fails after reconnect-delay; back as it was: used again. */
static void test_reconnect_changed(void)
{
    g_autoptr(GError) err = NULL;
    uint8_t buf[4096];
    BlockBackend *blk;
    Server s;
    int fd;

    if (!have_qemu_nbd()) {
        return;
    }
    server_init(&s, "rs", false);
    server_start(&s);
    blk = nbd_open(&s, 1, false, &err);
    g_assert_no_error(err);
    g_assert_cmpint(do_rw(blk, false, 0, 0, buf, sizeof(buf)), ==, 0);
    server_kill(&s);
    fd = open(s.img, O_RDWR | O_CLOEXEC);
    g_assert_cmpint(ftruncate(fd, IMG_SIZE * 2), ==, 0);
    server_start(&s);
    g_assert_cmpint(do_rw(blk, false, 0, 0, buf, sizeof(buf)), ==, -EIO);
    server_kill(&s);
    g_assert_cmpint(ftruncate(fd, IMG_SIZE), ==, 0);
    close(fd);
    server_start(&s);
    g_assert_cmpint(do_rw(blk, false, 0, 0, buf, sizeof(buf)), ==, 0);
    blk_close(blk);
    server_cleanup(&s);
}

/* reconnect-delay=0 (the default): EIO at once; back later. */
static void test_no_reconnect_delay(void)
{
    g_autoptr(GError) err = NULL;
    uint8_t buf[4096];
    BlockBackend *blk;
    Server s;

    if (!have_qemu_nbd()) {
        return;
    }
    server_init(&s, "r0", false);
    server_start(&s);
    blk = nbd_open(&s, 0, false, &err);
    g_assert_no_error(err);
    g_assert_cmpint(do_rw(blk, false, 0, 0, buf, sizeof(buf)), ==, 0);
    server_kill(&s);
    g_assert_cmpint(do_rw(blk, true, 0, 0, buf, sizeof(buf)), ==, -EIO);
    g_assert_cmpint(do_other(blk, BLK_REQ_FLUSH, 0, 0, 0), ==, -EIO);
    server_start(&s);
    g_assert_cmpint(do_rw(blk, false, 0, 0, buf, sizeof(buf)), ==, 0);
    blk_close(blk);
    server_cleanup(&s);
}

/* No server at open: a message that says what to check. */
static void test_open_no_server(void)
{
    g_autoptr(GError) err = NULL;
    Server s;

    server_init(&s, "none", false);
    g_assert_null(nbd_open(&s, 0, false, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "nbd+unix:///exp?socket="));
    g_assert_nonnull(strstr(err->message, "check that the NBD server runs"));
    server_cleanup(&s);
}

/* tls-creds-dir against a server without TLS: the open fails and says
 * why, rather than talking in clear. */
static void test_tls_required(void)
{
    g_autoptr(GError) err = NULL;
    BlockNbdOptions o = { .type = BLOCK_NBD_SERVER_UNIX,
                          .export_name = "exp", .tls_creds_dir = tmpdir };
    BlockOptions opts;
    Server s;

    if (!have_qemu_nbd()) {
        return;
    }
    server_init(&s, "tls", false);
    server_start(&s);
    o.path = s.sock;
    blk_options_init(&opts);
    blk_nbd_options(&opts, &o);
    g_assert_null(blk_open(&opts, &err));
    g_assert_nonnull(err);
    g_test_message("%s", err->message);
    g_assert_nonnull(strstr(err->message, "cannot connect"));
    server_cleanup(&s);
}

/* A CA, and server and client certificates signed by it, in @dir as
 * qemu-nbd's tls-creds-x509 object and libnbd read them.  False when
 * openssl is missing. */
static bool make_certs(const char *dir)
{
    g_autofree char *script = g_strdup_printf(
        "set -e; cd '%s'; "
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem "
        "  -out ca-cert.pem -days 2 -subj '/CN=test CA'; "
        "openssl req -newkey rsa:2048 -nodes -keyout server-key.pem "
        "  -out server.csr -subj '/CN=localhost'; "
        "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n'"
        "  > srv.ext; "
        "openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem "
        "  -CAcreateserial -out server-cert.pem -days 2 -extfile srv.ext; "
        "openssl req -newkey rsa:2048 -nodes -keyout client-key.pem "
        "  -out client.csr -subj '/CN=client'; "
        "printf 'extendedKeyUsage=clientAuth\\n' > cli.ext; "
        "openssl x509 -req -in client.csr -CA ca-cert.pem -CAkey ca-key.pem "
        "  -CAcreateserial -out client-cert.pem -days 2 -extfile cli.ext",
        dir);
    const char *argv[] = { "sh", "-c", script, NULL };
    g_autofree char *out = NULL, *err_out = NULL;
    g_autofree char *ossl = g_find_program_in_path("openssl");
    int status;

    if (!ossl) {
        return false;
    }
    g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL,
                               G_SPAWN_SEARCH_PATH, NULL, NULL, &out,
                               &err_out, &status, NULL));
    if (!g_spawn_check_wait_status(status, NULL)) {
        g_error("making certificates: %s", err_out);
    }
    return true;
}

/* A port nothing listens on now (the kernel's choice). */
static int free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(bind(fd, (struct sockaddr *)&a, sizeof(a)), ==, 0);
    g_assert_cmpint(getsockname(fd, (struct sockaddr *)&a, &len), ==, 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* TLS over inet, with x509 certificates both ways (qemu-nbd checks the
 * client's): data goes through; a client without TLS is refused. */
static void test_tls(void)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *dir = g_strdup_printf("%s/pki", tmpdir);
    g_autofree char *img = g_strdup_printf("%s/tls.img", tmpdir);
    g_autofree char *pidfile = g_strdup_printf("%s/tls.pid", tmpdir);
    g_autofree char *obj = NULL, *portstr = NULL, *pid = NULL;
    g_autofree char *err_out = NULL, *rm = NULL;
    BlockNbdOptions o = { .type = BLOCK_NBD_SERVER_INET,
                          .host = "127.0.0.1", .export_name = "exp",
                          .tls_creds_dir = dir };
    uint8_t buf[4096], chk[4096];
    BlockOptions opts;
    BlockBackend *blk;
    int status, fd;

    if (!have_qemu_nbd()) {
        return;
    }
    g_assert_cmpint(mkdir(dir, 0700), ==, 0);
    if (!make_certs(dir)) {
        g_test_skip("openssl is not installed");
        rm = g_strdup_printf("rm -rf '%s'", dir);
        g_assert_cmpint(system(rm), ==, 0);
        return;
    }
    fd = open(img, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, IMG_SIZE), ==, 0);
    close(fd);
    obj = g_strdup_printf("tls-creds-x509,id=t0,endpoint=server,dir=%s,"
                          "verify-peer=on", dir);
    portstr = g_strdup_printf("%d", free_port());
    {
        const char *argv[] = {
            "qemu-nbd", "-f", "raw", "-t", "-x", "exp", "--fork",
            "--shared=8", "--pid-file", pidfile, "--object", obj,
            "--tls-creds", "t0", "-b", "127.0.0.1", "-p", portstr, img,
            NULL,
        };

        g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL,
                                   G_SPAWN_SEARCH_PATH, NULL, NULL, NULL,
                                   &err_out, &status, NULL));
        if (!g_spawn_check_wait_status(status, NULL)) {
            g_error("qemu-nbd failed: %s", err_out);
        }
    }
    g_assert_true(g_file_get_contents(pidfile, &pid, NULL, NULL));
    server_track(atoi(pid), true);
    o.port = portstr;
    blk_options_init(&opts);
    blk_nbd_options(&opts, &o);
    blk = blk_open(&opts, &err);
    g_assert_no_error(err);
    fill(buf, sizeof(buf), 33);
    g_assert_cmpint(do_rw(blk, true, 0, 4096, buf, sizeof(buf)), ==, 0);
    read_file(img, 4096, chk, sizeof(chk));
    g_assert_cmpmem(chk, sizeof(chk), buf, sizeof(buf));
    memset(buf, 0, sizeof(buf));
    g_assert_cmpint(do_rw(blk, false, 0, 4096, buf, sizeof(buf)), ==, 0);
    g_assert_cmpmem(chk, sizeof(chk), buf, sizeof(buf));
    blk_close(blk);

    /* Without TLS: the server says no. */
    o.tls_creds_dir = NULL;
    g_assert_null(blk_open(&opts, &err));
    g_assert_nonnull(err);
    g_test_message("%s", err->message);

    server_track(atoi(pid), false);
    g_assert_cmpint(kill(atoi(pid), SIGKILL), ==, 0);
    unlink(pidfile);
    unlink(img);
    rm = g_strdup_printf("rm -rf '%s'", dir);
    g_assert_cmpint(system(rm), ==, 0);
}

/* The --blockdev keys: what is taken, and the refusals. */
static GPtrArray *parsed;

static char *parse(const char *str, BlockOptions *opts, BlockOptsParse *p)
{
    g_autoptr(GError) err = NULL;
    JsonObject *obj = keyval_parse(str, "driver", false, &err);
    QmpArgs a;
    const char *drv = NULL;
    bool ok;

    g_assert_no_error(err);
    qmp_args_init(&a, obj, true, "");
    g_assert_true(qmp_args_str(&a, "driver", true, &drv, NULL));
    blk_options_init(opts);
    memset(p, 0, sizeof(*p));
    p->driver = drv;
    ok = blk_options_parse(opts, &a, p, &err) &&
         qmp_args_check_done(&a, &err);
    qmp_args_cleanup(&a);
    /* The options point into the arguments: kept until the end. */
    g_ptr_array_add(parsed, obj);
    return ok ? NULL : g_strdup(err->message);
}

/* Knows x (x509, verify-peer=off) and p (PSK as alice). */
static bool fake_tls_lookup(const char *id, BlockNbdTlsCreds *out,
                            GError **errp)
{
    if (!strcmp(id, "x")) {
        out->dir = g_strdup("/pki-x");
        out->verify_peer = false;
        return true;
    }
    if (!strcmp(id, "p")) {
        out->psk = true;
        out->dir = g_strdup("/pki-p");
        out->username = g_strdup("alice");
        return true;
    }
    g_set_error(errp, VB_ERROR, 0, "No TLS credentials with id '%s'", id);
    return false;
}

static void test_options(void)
{
    BlockOptions opts;
    BlockOptsParse p;
    const BlockNbdOptions *o;
    g_autofree char *d = NULL;
    char *e;

    parsed = g_ptr_array_new_with_free_func((GDestroyNotify)json_object_unref);
    e = parse("driver=nbd,server.type=inet,server.host=127.0.0.1,"
              "server.port=10810,export=disk,reconnect-delay=5", &opts, &p);
    g_assert_null(e);
    o = opts.driver_opts;
    g_assert_nonnull(o);
    g_assert_cmpint(o->type, ==, BLOCK_NBD_SERVER_INET);
    g_assert_cmpstr(o->host, ==, "127.0.0.1");
    g_assert_cmpstr(o->port, ==, "10810");
    g_assert_cmpstr(o->export_name, ==, "disk");
    g_assert_cmpuint(o->reconnect_delay, ==, 5);
    d = blk_nbd_describe(o);
    g_assert_cmpstr(d, ==, "nbd://127.0.0.1:10810/disk");
    blk_options_parse_cleanup(&p);

    static const struct {
        const char *str, *msg;
    } bad[] = {
        { "driver=nbd", "server" },
        { "driver=nbd,server.type=tcp,server.host=h", "type" },
        { "driver=nbd,server.type=inet", "host" },
        { "driver=nbd,server.type=inet,server.host=h,server.port=70000",
          "port number" },
        { "driver=nbd,server.type=inet,server.host=h,server.port=x",
          "port number" },
        { "driver=nbd,server.type=unix,server.path=", "empty" },
        { "driver=nbd,server.type=unix,server.path=/s,server.host=h",
          "host" },
        { "driver=nbd,server.type=unix,server.path=/s,reconnect-delay=-1",
          "reconnect-delay" },
        /* No monitor, no objects. */
        { "driver=nbd,server.type=unix,server.path=/s,tls-creds=t0",
          "No TLS credentials with id 't0'" },
        { "driver=nbd,server.type=unix,server.path=/s,bogus=1", "bogus" },
    };
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        e = parse(bad[i].str, &opts, &p);
        g_test_message("%s: %s", bad[i].str, e);
        g_assert_nonnull(e);
        g_assert_nonnull(strstr(e, bad[i].msg));
        g_free(e);
        blk_options_parse_cleanup(&p);
    }

    /* tls-creds=ID through the monitor's lookup (a stand-in here). */
    blk_nbd_set_tls_lookup(fake_tls_lookup);
    e = parse("driver=nbd,server.type=unix,server.path=/s,tls-creds=x",
              &opts, &p);
    g_assert_null(e);
    o = opts.driver_opts;
    g_assert_cmpstr(o->tls_creds_dir, ==, "/pki-x");
    g_assert_true(o->tls_no_verify_peer);
    g_assert_null(o->tls_psk_dir);
    blk_options_parse_cleanup(&p);
    e = parse("driver=nbd,server.type=unix,server.path=/s,tls-creds=p",
              &opts, &p);
    g_assert_null(e);
    o = opts.driver_opts;
    g_assert_null(o->tls_creds_dir);
    g_assert_cmpstr(o->tls_psk_dir, ==, "/pki-p");
    g_assert_cmpstr(o->tls_username, ==, "alice");
    blk_options_parse_cleanup(&p);
    e = parse("driver=nbd,server.type=unix,server.path=/s,tls-creds=q",
              &opts, &p);
    g_assert_nonnull(e);
    g_assert_nonnull(strstr(e, "No TLS credentials with id 'q'"));
    g_free(e);
    blk_options_parse_cleanup(&p);
    e = parse("driver=nbd,server.type=unix,server.path=/s,tls-creds=x,"
              "tls-creds-dir=/d", &opts, &p);
    g_assert_nonnull(e);
    g_assert_nonnull(strstr(e, "give one of them"));
    g_free(e);
    blk_options_parse_cleanup(&p);
    blk_nbd_set_tls_lookup(NULL);
    g_ptr_array_unref(parsed);
}

int main(int argc, char **argv)
{
    GError *err = NULL;
    int ret;

    g_test_init(&argc, &argv, NULL);
    /* A killed server's socket: EPIPE, not SIGPIPE (libnbd uses
     * MSG_NOSIGNAL; qemu-nbd's own pipes are not ours). */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGABRT, abort_handler);
    ctx = aio_context_new(&err);
    g_assert_no_error(err);
    aio_context_acquire_thread(ctx);
    tmpdir = g_dir_make_tmp("vb-nbd-XXXXXX", &err);
    g_assert_no_error(err);

    g_test_add_func("/block/nbd/options", test_options);
    g_test_add_func("/block/nbd/open-no-server", test_open_no_server);
    g_test_add_func("/block/nbd/tls-required", test_tls_required);
    g_test_add_func("/block/nbd/tls", test_tls);
    g_test_add_func("/block/nbd/contract", test_contract);
    g_test_add_func("/block/nbd/large", test_large);
    g_test_add_func("/block/nbd/block-status", test_block_status);
    g_test_add_func("/block/nbd/read-only", test_read_only);
    g_test_add_func("/block/nbd/reconnect", test_reconnect);
    g_test_add_func("/block/nbd/reconnect-expired", test_reconnect_expired);
    g_test_add_func("/block/nbd/reconnect-changed", test_reconnect_changed);
    g_test_add_func("/block/nbd/no-reconnect-delay",
                    test_no_reconnect_delay);
    ret = g_test_run();
    rmdir(tmpdir);
    g_free(tmpdir);
    aio_context_free(ctx);
    return ret;
}
