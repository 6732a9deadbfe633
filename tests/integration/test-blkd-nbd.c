/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-blkd serving a disk whose image is behind an NBD server:
 * qemu-nbd (qemu-utils) on an image file, vhost-blkd with --blockdev
 * driver=nbd (or QMP blockdev-add) and a vhost-user-blk export of that
 * node, I/O through the front-end library:
 *  - unix and inet: what the guest writes is in the image file, and
 *    what the file holds the guest reads;
 *  - a read-only export: reads work, writes fail, the daemon goes on;
 *  - the server killed and restarted within reconnect-delay: a request
 *    submitted while it is away completes once it is back;
 *  - away past reconnect-delay, and with none: an I/O error, the daemon
 *    keeps running, and the disk works again after the restart;
 *  - blockdev-add driver=nbd over QMP, named like QEMU names it; the
 *    driver is a module (block-nbd.so): libnbd is not mapped before the
 *    first nbd node, a bad option is refused before the module loads;
 *  - tls-creds=ID (x509 and PSK objects, endpoint=client) against
 *    qemu-nbd with TLS, and against vhost-blkd's own NBD server with
 *    TLS; an unknown id, a server object and a CA the server's
 *    certificate is not signed by are refused with a message.
 * Each case skips without qemu-nbd; vhost-blkd only (VB_BACKEND=qsd
 * skips).
 */
#include "qemu/osdep.h"
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <netinet/in.h>
#include "vb-daemon.h"
#include "vb-qmp.h"

#define IMG_SIZE (8 << 20)
#define BUF_SIZE 65536

/* TLS: qemu-nbd's --object (endpoint=server, id=t) when set; and the
 * client's --object (id=c0), whose id the --blockdev names. */
static const char *server_tls_object;
static const char *client_tls_object;

typedef struct Fixture {
    VbDaemon d;
    char *img;
    char *nbd_sock;             /* unix server, or NULL */
    int port;                   /* inet server, or 0 */
    char *pidfile;
    bool readonly;
    pid_t pid;
    char *sock;                 /* our vhost-user export */
    char *qmp_path;
    VbQmp q;
    VhostUserFrontend *fe;
    uint8_t *buf;
    uint8_t *chk;
} Fixture;

static bool skip(void)
{
    g_autofree char *p = g_find_program_in_path("qemu-nbd");

    if (vb_backend() == VB_BACKEND_QSD) {
        g_test_skip("vhost-blkd only");
        return true;
    }
    if (!p) {
        g_test_skip("qemu-nbd (qemu-utils) is not installed");
        return true;
    }
    return false;
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

/* qemu-nbd --fork returns once it listens. */
static void server_start(Fixture *f)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    g_autofree char *out = NULL, *err_out = NULL, *pid = NULL;
    g_autoptr(GError) err = NULL;
    int status;

    g_ptr_array_add(argv, g_strdup("qemu-nbd"));
    g_ptr_array_add(argv, g_strdup("-f"));
    g_ptr_array_add(argv, g_strdup("raw"));
    g_ptr_array_add(argv, g_strdup("-t"));
    g_ptr_array_add(argv, g_strdup("-x"));
    g_ptr_array_add(argv, g_strdup("exp"));
    g_ptr_array_add(argv, g_strdup("--fork"));
    /* A connection per iothread (qemu-nbd takes one client by default). */
    g_ptr_array_add(argv, g_strdup("--shared=8"));
    g_ptr_array_add(argv, g_strdup_printf("--pid-file=%s", f->pidfile));
    if (f->nbd_sock) {
        unlink(f->nbd_sock);        /* a killed server leaves it */
        g_ptr_array_add(argv, g_strdup_printf("--socket=%s", f->nbd_sock));
    } else {
        g_ptr_array_add(argv, g_strdup("-b"));
        g_ptr_array_add(argv, g_strdup("127.0.0.1"));
        g_ptr_array_add(argv, g_strdup_printf("-p%d", f->port));
    }
    if (f->readonly) {
        g_ptr_array_add(argv, g_strdup("-r"));
    }
    if (server_tls_object) {
        g_ptr_array_add(argv, g_strdup("--object"));
        g_ptr_array_add(argv, g_strdup(server_tls_object));
        g_ptr_array_add(argv, g_strdup("--tls-creds=t"));
    }
    g_ptr_array_add(argv, g_strdup(f->img));
    g_ptr_array_add(argv, NULL);
    g_assert_true(g_spawn_sync(NULL, (char **)argv->pdata, NULL,
                               G_SPAWN_SEARCH_PATH, NULL, NULL, &out,
                               &err_out, &status, &err));
    if (!g_spawn_check_wait_status(status, NULL)) {
        g_error("qemu-nbd failed: %s", err_out);
    }
    g_assert_true(g_file_get_contents(f->pidfile, &pid, NULL, NULL));
    f->pid = atoi(pid);
    g_assert_cmpint(f->pid, >, 0);
    server_track(f->pid, true);
}

/* SIGKILL and wait until it is gone (not our child: a pidfd). */
static void server_kill(Fixture *f)
{
    struct pollfd p;
    int pfd;

    if (!f->pid) {
        return;
    }
    pfd = syscall(SYS_pidfd_open, f->pid, 0);
    server_track(f->pid, false);
    g_assert_cmpint(kill(f->pid, SIGKILL), ==, 0);
    if (pfd >= 0) {
        p = (struct pollfd){ .fd = pfd, .events = POLLIN };
        g_assert_cmpint(poll(&p, 1, 30000), ==, 1);
        close(pfd);
    }
    f->pid = 0;
}

/* The node's --blockdev keys (without node-name). */
static char *blockdev_keys(Fixture *f, unsigned int delay)
{
    if (f->nbd_sock) {
        return g_strdup_printf("driver=nbd,server.type=unix,server.path=%s,"
                               "export=exp,reconnect-delay=%u", f->nbd_sock,
                               delay);
    }
    return g_strdup_printf("driver=nbd,server.type=inet,"
                           "server.host=127.0.0.1,server.port=%d,export=exp,"
                           "reconnect-delay=%u%s", f->port, delay,
                           client_tls_object ? ",tls-creds=c0" : "");
}

/* Image, server, daemon with the nbd node exported (writable unless
 * @readonly), and the front-end connected; with @qmp a monitor only. */
static void setup(Fixture *f, bool inet, bool readonly, unsigned int delay,
                  bool qmp, unsigned int queues)
{
    static const VbExportSpec specs[] = { { .null_driver = true } };
    g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
    g_autofree char *keys = NULL;
    int fd;

    memset(f, 0, sizeof(*f));
    vb_daemon_init(&f->d, 1, specs);
    f->img = g_strdup_printf("%s/nbd.img", f->d.dir);
    f->pidfile = g_strdup_printf("%s/nbd.pid", f->d.dir);
    f->sock = g_strdup_printf("%s/nbd-exp.sock", f->d.dir);
    f->readonly = readonly;
    if (inet) {
        f->port = free_port();
    } else {
        f->nbd_sock = g_strdup_printf("%s/nbd.sock", f->d.dir);
    }
    fd = open(f->img, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, IMG_SIZE), ==, 0);
    close(fd);
    f->chk = g_malloc(BUF_SIZE);
    server_start(f);

    if (qmp) {
        f->qmp_path = g_strdup_printf("%s/qmp.sock", f->d.dir);
        g_ptr_array_add(args, g_strdup("--chardev"));
        g_ptr_array_add(args, g_strdup_printf(
            "socket,id=mon,path=%s,server=on,wait=off", f->qmp_path));
        g_ptr_array_add(args, g_strdup("--monitor"));
        g_ptr_array_add(args, g_strdup("chardev=mon"));
    } else {
        if (client_tls_object) {
            g_ptr_array_add(args, g_strdup("--object"));
            g_ptr_array_add(args, g_strdup(client_tls_object));
        }
        keys = blockdev_keys(f, delay);
        g_ptr_array_add(args, g_strdup("--blockdev"));
        g_ptr_array_add(args, g_strdup_printf("%s,node-name=n0", keys));
        g_ptr_array_add(args, g_strdup("--export"));
        g_ptr_array_add(args, g_strdup_printf(
            "type=vhost-user-blk,id=e0,node-name=n0,addr.type=unix,"
            "addr.path=%s,writable=%s,num-queues=%u", f->sock,
            readonly ? "off" : "on", queues));
    }
    g_ptr_array_add(args, NULL);
    f->d.iothreads = queues;
    f->d.args = (const char *const *)args->pdata;
    vb_daemon_start(&f->d);
    f->d.args = NULL;
    if (qmp) {
        vb_qmp_connect(&f->q, f->qmp_path, &f->d);
    }
}

static VhostUserFrontend *connect_export_mq(Fixture *f, unsigned int nq)
{
    VhostUserFrontendOptions opts = {
        .socket_path = f->sock,
        .num_queues = nq,
        .connect_timeout_ms = 10000,
    };
    g_autoptr(GError) err = NULL;
    VhostUserFrontend *fe = vhost_user_frontend_new(&opts, &err);

    if (!fe) {
        g_error("connecting to %s: %s", f->sock, err->message);
    }
    vb_start(fe);
    /* Guest memory: the daemon reads and writes it. */
    f->buf = vhost_user_frontend_mem_alloc(fe, BUF_SIZE, 4096, &err);
    g_assert_no_error(err);
    return fe;
}

static VhostUserFrontend *connect_export(Fixture *f)
{
    return connect_export_mq(f, 1);
}

static void teardown(Fixture *f)
{
    if (f->fe) {
        vhost_user_frontend_free(f->fe);
    }
    if (f->qmp_path) {
        vb_qmp_close(&f->q);
        unlink(f->qmp_path);
        g_free(f->qmp_path);
    }
    vb_daemon_kill(&f->d);
    server_kill(f);
    unlink(f->img);
    unlink(f->pidfile);
    unlink(f->sock);
    if (f->nbd_sock) {
        unlink(f->nbd_sock);
    }
    g_free(f->img);
    g_free(f->pidfile);
    g_free(f->sock);
    g_free(f->nbd_sock);
    g_free(f->chk);
    vb_daemon_cleanup(&f->d);
}

static void read_file(Fixture *f, off_t off, void *buf, size_t len)
{
    int fd = open(f->img, O_RDONLY | O_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, buf, len, off), ==, len);
    close(fd);
}

static void write_file(Fixture *f, off_t off, const void *buf, size_t len)
{
    int fd = open(f->img, O_WRONLY | O_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pwrite(fd, buf, len, off), ==, len);
    close(fd);
}

/* Guest writes land in the file, file contents reach the guest; a
 * request of several segments; a flush. */
static void check_io(Fixture *f)
{
    struct iovec iov[3];

    vb_fill_pattern(f->buf, BUF_SIZE, 1);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_OUT, 256, f->buf,
                           BUF_SIZE, false, NULL), ==, VIRTIO_BLK_S_OK);
    read_file(f, 256 * 512, f->chk, BUF_SIZE);
    g_assert_cmpmem(f->chk, BUF_SIZE, f->buf, BUF_SIZE);

    vb_fill_pattern(f->chk, BUF_SIZE, 2);
    write_file(f, 1 << 20, f->chk, BUF_SIZE);
    iov[0] = (struct iovec){ f->buf, 4096 };
    iov[1] = (struct iovec){ f->buf + 4096, 512 };
    iov[2] = (struct iovec){ f->buf + 4608, BUF_SIZE - 4608 };
    memset(f->buf, 0xaa, BUF_SIZE);
    g_assert_cmpint(vb_reqv(f->fe, 0, VIRTIO_BLK_T_IN, (1 << 20) / 512, iov,
                            3, true, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(f->buf, BUF_SIZE, f->chk, BUF_SIZE);
    g_assert_cmpint(vb_req(f->fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
}

static void test_unix_io(void)
{
    Fixture f;

    if (skip()) {
        return;
    }
    setup(&f, false, false, 0, false, 1);
    f.fe = connect_export(&f);
    check_io(&f);
    teardown(&f);
}

static void test_inet_io(void)
{
    Fixture f;

    if (skip()) {
        return;
    }
    setup(&f, true, false, 0, false, 1);
    f.fe = connect_export(&f);
    check_io(&f);
    teardown(&f);
}

static void test_read_only(void)
{
    Fixture f;

    if (skip()) {
        return;
    }
    setup(&f, false, true, 0, false, 1);
    vb_fill_pattern(f.chk, BUF_SIZE, 3);
    write_file(&f, 0, f.chk, BUF_SIZE);
    f.fe = connect_export(&f);
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_IN, 0, f.buf, BUF_SIZE,
                           true, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(f.buf, BUF_SIZE, f.chk, BUF_SIZE);
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_OUT, 0, f.buf, BUF_SIZE,
                           false, NULL), !=, VIRTIO_BLK_S_OK);
    g_assert_true(vb_daemon_alive(&f.d));
    teardown(&f);
}

/* Two queues in two iothreads: a connection each, both serve the same
 * export (each queue writes its own range, reads the other's). */
static void test_two_iothreads(void)
{
    Fixture f;

    if (skip()) {
        return;
    }
    setup(&f, false, false, 0, false, 2);
    f.fe = connect_export_mq(&f, 2);
    for (unsigned int q = 0; q < 2; q++) {
        vb_fill_pattern(f.buf, BUF_SIZE, 10 + q);
        g_assert_cmpint(vb_req(f.fe, q, VIRTIO_BLK_T_OUT, 2048 * (q + 1),
                               f.buf, BUF_SIZE, false, NULL), ==,
                        VIRTIO_BLK_S_OK);
    }
    for (unsigned int q = 0; q < 2; q++) {
        memset(f.buf, 0, BUF_SIZE);
        g_assert_cmpint(vb_req(f.fe, 1 - q, VIRTIO_BLK_T_IN, 2048 * (q + 1),
                               f.buf, BUF_SIZE, true, NULL), ==,
                        VIRTIO_BLK_S_OK);
        g_assert_true(vb_check_pattern(f.buf, BUF_SIZE, 10 + q));
        read_file(&f, 2048 * 512 * (q + 1), f.chk, BUF_SIZE);
        g_assert_cmpmem(f.chk, BUF_SIZE, f.buf, BUF_SIZE);
    }
    teardown(&f);
}

/* Killed and back within reconnect-delay: a write submitted while it is
 * away completes once it is back, and is in the file. */
static void test_reconnect(void)
{
    VhostUserFrontendCompletion c;
    struct iovec iov;
    Fixture f;
    int head;

    if (skip()) {
        return;
    }
    setup(&f, false, false, 60, false, 1);
    f.fe = connect_export(&f);
    check_io(&f);

    server_kill(&f);
    vb_fill_pattern(f.buf, BUF_SIZE, 4);
    iov = (struct iovec){ f.buf, BUF_SIZE };
    head = vhost_user_frontend_blk_submit(f.fe, 0, VIRTIO_BLK_T_OUT, 4096,
                                          &iov, 1, false, &c);
    g_assert_cmpint(head, >=, 0);
    g_assert_cmpint(vhost_user_frontend_kick(f.fe, 0), >=, 0);
    /* It cannot complete while the server is away (60 s of delay). */
    g_assert_cmpint(vhost_user_frontend_reap(f.fe, 0, &c, 1), ==, 0);
    server_start(&f);
    g_assert_cmpint(vb_reap_n(f.fe, 0, &c, 1), ==, 1);
    g_assert_cmpint(c.head, ==, head);
    g_assert_cmpint(c.status, ==, VIRTIO_BLK_S_OK);
    read_file(&f, 4096 * 512, f.chk, BUF_SIZE);
    g_assert_cmpmem(f.chk, BUF_SIZE, f.buf, BUF_SIZE);
    /* And later I/O. */
    check_io(&f);
    teardown(&f);
}

/* Away past reconnect-delay (1 s), or with none: an I/O error, the daemon
 * lives, and the disk works again after the restart. */
static void test_server_gone(gconstpointer data)
{
    unsigned int delay = GPOINTER_TO_UINT(data);
    Fixture f;

    if (skip()) {
        return;
    }
    setup(&f, false, false, delay, false, 1);
    f.fe = connect_export(&f);
    check_io(&f);
    server_kill(&f);
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_IN, 0, f.buf, 4096, true,
                           NULL), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(vb_req(f.fe, 0, VIRTIO_BLK_T_OUT, 0, f.buf, 4096, false,
                           NULL), ==, VIRTIO_BLK_S_IOERR);
    g_assert_true(vb_daemon_alive(&f.d));
    server_start(&f);
    check_io(&f);
    teardown(&f);
}

/* blockdev-add driver=nbd, QEMU's name for it, an export of it, and a
 * blockdev-add that cannot connect. */
/* The lines of the daemon's /proc/PID/maps naming libnbd or the nbd
 * driver's module. */
static unsigned int nbd_mappings(Fixture *f)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/maps", (int)f->d.pid);
    g_autofree char *maps = NULL;
    g_auto(GStrv) lines = NULL;
    unsigned int n = 0;

    g_assert_true(g_file_get_contents(path, &maps, NULL, NULL));
    lines = g_strsplit(maps, "\n", -1);
    for (char **l = lines; *l; l++) {
        if (strstr(*l, "/libnbd.so") || strstr(*l, "/block-nbd.so")) {
            n++;
        }
    }
    return n;
}

static void test_qmp(void)
{
    g_autofree char *add = NULL, *exp = NULL, *err = NULL, *bad = NULL;
    g_autofree char *want = NULL, *names = NULL;
    JsonNode *ret;
    Fixture f;

    if (skip()) {
        return;
    }
    setup(&f, false, false, 0, true, 1);
    /* A daemon without nbd nodes carries none of libnbd; an option the
     * driver refuses is refused before its module is loaded. */
    g_assert_cmpuint(nbd_mappings(&f), ==, 0);
    bad = g_strdup_printf("{\"execute\":\"blockdev-add\",\"arguments\":{"
                          "\"driver\":\"nbd\",\"node-name\":\"q0\","
                          "\"server\":{\"type\":\"unix\",\"path\":\"%s\"},"
                          "\"reconnect-delay\":-1}}", f.nbd_sock);
    err = vb_qmp_error(&f.q, bad);
    g_test_message("%s", err);
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err, "reconnect-delay: -1 is out of range"));
    g_assert_cmpuint(nbd_mappings(&f), ==, 0);
    g_clear_pointer(&bad, g_free);
    g_clear_pointer(&err, g_free);
    add = g_strdup_printf("{\"execute\":\"blockdev-add\",\"arguments\":{"
                          "\"driver\":\"nbd\",\"node-name\":\"q0\","
                          "\"server\":{\"type\":\"unix\",\"path\":\"%s\"},"
                          "\"export\":\"exp\",\"reconnect-delay\":5}}",
                          f.nbd_sock);
    vb_qmp_ok(&f.q, add);
    g_assert_cmpuint(nbd_mappings(&f), >, 0);
    ret = vb_qmp(&f.q, "{\"execute\":\"query-named-block-nodes\"}", NULL);
    names = json_to_string(ret, false);
    json_node_unref(ret);
    want = g_strdup_printf("\"file\":\"nbd+unix:///exp?socket=%s\"",
                           f.nbd_sock);
    g_test_message("%s", names);
    g_assert_nonnull(strstr(names, want));
    g_assert_nonnull(strstr(names, "\"drv\":\"nbd\""));
    exp = g_strdup_printf("{\"execute\":\"block-export-add\",\"arguments\":{"
                          "\"type\":\"vhost-user-blk\",\"id\":\"e0\","
                          "\"node-name\":\"q0\",\"writable\":true,"
                          "\"addr\":{\"type\":\"unix\",\"path\":\"%s\"}}}",
                          f.sock);
    vb_qmp_ok(&f.q, exp);
    f.fe = connect_export(&f);
    check_io(&f);
    /* Taken down again: the export, then the node (its connections
     * close in their iothreads). */
    vhost_user_frontend_free(f.fe);
    f.fe = NULL;
    /* mode=hard: the daemon may not have seen the front-end go yet;
     * nothing is in flight, so the export goes within the command. */
    vb_qmp_ok(&f.q, "{\"execute\":\"block-export-del\",\"arguments\":"
              "{\"id\":\"e0\",\"mode\":\"hard\"}}");
    vb_qmp_ok(&f.q, "{\"execute\":\"blockdev-del\",\"arguments\":"
              "{\"node-name\":\"q0\"}}");
    ret = vb_qmp(&f.q, "{\"execute\":\"query-named-block-nodes\"}", NULL);
    g_free(names);
    names = json_to_string(ret, false);
    json_node_unref(ret);
    g_assert_null(strstr(names, "\"q0\""));

    bad = g_strdup_printf("{\"execute\":\"blockdev-add\",\"arguments\":{"
                          "\"driver\":\"nbd\",\"node-name\":\"q1\","
                          "\"server\":{\"type\":\"unix\",\"path\":\"%s/none\"}"
                          "}}", f.d.dir);
    err = vb_qmp_error(&f.q, bad);
    g_test_message("%s", err);
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err, "cannot connect"));
    g_assert_true(vb_daemon_alive(&f.d));
    teardown(&f);
}

/* In @dir: a CA (named @ca), and server (for 127.0.0.1) and client
 * certificates signed by it, as tls-creds-x509 objects of both
 * endpoints read them; and keys.psk with user "qemu".  False when
 * openssl is missing. */
static bool make_pki(const char *dir, const char *ca)
{
    g_autofree char *script = g_strdup_printf(
        "set -e; mkdir -p '%s'; cd '%s'; "
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem "
        "  -out ca-cert.pem -days 2 -subj '/CN=%s'; "
        "openssl req -newkey rsa:2048 -nodes -keyout server-key.pem "
        "  -out server.csr -subj '/CN=localhost'; "
        "printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n'"
        "  > srv.ext; "
        "openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem "
        "  -CAcreateserial -out server-cert.pem -days 2 -extfile srv.ext; "
        "openssl req -newkey rsa:2048 -nodes -keyout client-key.pem "
        "  -out client.csr -subj '/CN=client'; "
        "printf 'extendedKeyUsage=clientAuth\n' > cli.ext; "
        "openssl x509 -req -in client.csr -CA ca-cert.pem -CAkey ca-key.pem "
        "  -CAcreateserial -out client-cert.pem -days 2 -extfile cli.ext; "
        "printf 'qemu:%%s\n' \"$(openssl rand -hex 32)\" > keys.psk; "
        "chmod 600 keys.psk *-key.pem",
        dir, dir, ca);
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

static void rm_rf(const char *dir)
{
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", dir);

    g_assert_cmpint(system(cmd), ==, 0);
}

/* --object tls-creds-x509|psk,endpoint=client and --blockdev
 * driver=nbd,...,tls-creds=c0 against qemu-nbd with TLS (x509 with
 * client certificates checked, or PSK): the guest's I/O goes through. */
static void test_tls_qemu_nbd(gconstpointer data)
{
    bool psk = GPOINTER_TO_UINT(data);
    g_autofree char *pki = NULL, *sobj = NULL, *cobj = NULL;
    Fixture f;

    if (skip()) {
        return;
    }
    pki = g_strdup_printf("%s/vb-nbd-pki-XXXXXX", g_get_tmp_dir());
    g_assert_nonnull(g_mkdtemp(pki));
    if (!make_pki(pki, "test CA")) {
        rm_rf(pki);
        g_test_skip("openssl is not installed");
        return;
    }
    if (psk) {
        sobj = g_strdup_printf("tls-creds-psk,id=t,endpoint=server,dir=%s",
                               pki);
        cobj = g_strdup_printf("tls-creds-psk,id=c0,endpoint=client,dir=%s,"
                               "username=qemu", pki);
    } else {
        sobj = g_strdup_printf("tls-creds-x509,id=t,endpoint=server,dir=%s,"
                               "verify-peer=on", pki);
        cobj = g_strdup_printf("tls-creds-x509,id=c0,endpoint=client,"
                               "dir=%s", pki);
    }
    server_tls_object = sobj;
    client_tls_object = cobj;
    setup(&f, true, false, 0, false, 1);
    server_tls_object = NULL;
    client_tls_object = NULL;
    f.fe = connect_export(&f);
    check_io(&f);
    teardown(&f);
    rm_rf(pki);
}

static char *blockdev_add_tls(const char *node, int port, const char *creds)
{
    return g_strdup_printf("{\"execute\":\"blockdev-add\",\"arguments\":{"
                           "\"driver\":\"nbd\",\"node-name\":\"%s\","
                           "\"server\":{\"type\":\"inet\",\"host\":"
                           "\"127.0.0.1\",\"port\":\"%d\"},"
                           "\"export\":\"exp\",\"tls-creds\":\"%s\"}}",
                           node, port, creds);
}

static void assert_qmp_error(Fixture *f, const char *cmd, const char *want)
{
    g_autofree char *err = vb_qmp_error(&f->q, cmd);

    g_test_message("%s", err);
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err, want));
}

/* Over QMP: object-add of client and server objects; blockdev-add with
 * an unknown id, with a server object, with a CA that did not sign the
 * server's certificate: refused, saying why.  Then vhost-blkd's own
 * server with TLS (nbd-server-start tls-creds=s0), exporting the node
 * q0 (qemu-nbd with TLS behind it), and a second client node q1 of
 * this daemon's own export with tls-creds=c0: the guest's I/O through
 * q1 reaches qemu-nbd's file. */
static void test_tls_qmp(void)
{
    g_autofree char *pki = NULL, *other = NULL, *sobj = NULL, *cmd = NULL;
    int port2;
    Fixture f;

    if (skip()) {
        return;
    }
    pki = g_strdup_printf("%s/vb-nbd-pki-XXXXXX", g_get_tmp_dir());
    g_assert_nonnull(g_mkdtemp(pki));
    other = g_strdup_printf("%s/other", pki);
    if (!make_pki(pki, "test CA") || !make_pki(other, "another CA")) {
        rm_rf(pki);
        g_test_skip("openssl is not installed");
        return;
    }
    sobj = g_strdup_printf("tls-creds-x509,id=t,endpoint=server,dir=%s,"
                           "verify-peer=on", pki);
    server_tls_object = sobj;
    setup(&f, true, false, 0, true, 1);
    server_tls_object = NULL;

    cmd = g_strdup_printf("{\"execute\":\"object-add\",\"arguments\":{"
                          "\"qom-type\":\"tls-creds-x509\",\"id\":\"c0\","
                          "\"dir\":\"%s\",\"endpoint\":\"client\"}}", pki);
    vb_qmp_ok(&f.q, cmd);
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\":\"object-add\",\"arguments\":{"
                          "\"qom-type\":\"tls-creds-x509\",\"id\":\"s0\","
                          "\"dir\":\"%s\",\"endpoint\":\"server\","
                          "\"verify-peer\":true}}", pki);
    vb_qmp_ok(&f.q, cmd);
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\":\"object-add\",\"arguments\":{"
                          "\"qom-type\":\"tls-creds-x509\",\"id\":\"bad\","
                          "\"dir\":\"%s\",\"endpoint\":\"client\"}}",
                          other);
    vb_qmp_ok(&f.q, cmd);
    g_free(cmd);

    cmd = blockdev_add_tls("x0", f.port, "nope");
    assert_qmp_error(&f, cmd, "No TLS credentials with id 'nope'");
    g_free(cmd);
    cmd = blockdev_add_tls("x0", f.port, "s0");
    assert_qmp_error(&f, cmd, "endpoint=client");
    g_free(cmd);
    /* qemu-nbd's certificate is not signed by the other CA. */
    cmd = blockdev_add_tls("x0", f.port, "bad");
    assert_qmp_error(&f, cmd, "cannot connect");
    g_free(cmd);
    g_assert_true(vb_daemon_alive(&f.d));

    cmd = blockdev_add_tls("q0", f.port, "c0");
    vb_qmp_ok(&f.q, cmd);
    g_free(cmd);

    /* Our server: a client object is refused, the server object runs. */
    port2 = free_port();
    cmd = g_strdup_printf("{\"execute\":\"nbd-server-start\",\"arguments\":{"
                          "\"addr\":{\"type\":\"inet\",\"host\":"
                          "\"127.0.0.1\",\"port\":\"%d\"},"
                          "\"tls-creds\":\"c0\"}}", port2);
    assert_qmp_error(&f, cmd, "endpoint=server");
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\":\"nbd-server-start\",\"arguments\":{"
                          "\"addr\":{\"type\":\"inet\",\"host\":"
                          "\"127.0.0.1\",\"port\":\"%d\"},"
                          "\"tls-creds\":\"s0\"}}", port2);
    vb_qmp_ok(&f.q, cmd);
    g_free(cmd);
    vb_qmp_ok(&f.q, "{\"execute\":\"block-export-add\",\"arguments\":{"
              "\"type\":\"nbd\",\"id\":\"n0\",\"node-name\":\"q0\","
              "\"name\":\"exp\",\"writable\":true}}");
    cmd = blockdev_add_tls("x1", port2, "bad");
    assert_qmp_error(&f, cmd, "cannot connect");
    g_free(cmd);
    cmd = blockdev_add_tls("q1", port2, "c0");
    vb_qmp_ok(&f.q, cmd);
    g_free(cmd);
    cmd = g_strdup_printf("{\"execute\":\"block-export-add\",\"arguments\":{"
                          "\"type\":\"vhost-user-blk\",\"id\":\"e0\","
                          "\"node-name\":\"q1\",\"writable\":true,"
                          "\"addr\":{\"type\":\"unix\",\"path\":\"%s\"}}}",
                          f.sock);
    vb_qmp_ok(&f.q, cmd);
    f.fe = connect_export(&f);
    check_io(&f);
    g_assert_true(vb_daemon_alive(&f.d));
    teardown(&f);
    rm_rf(pki);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGABRT, abort_handler);
    g_test_add_func("/nbd/unix-io", test_unix_io);
    g_test_add_func("/nbd/inet-io", test_inet_io);
    g_test_add_func("/nbd/read-only", test_read_only);
    g_test_add_func("/nbd/two-iothreads", test_two_iothreads);
    g_test_add_func("/nbd/reconnect", test_reconnect);
    g_test_add_data_func("/nbd/gone-after-delay", GUINT_TO_POINTER(1),
                         test_server_gone);
    g_test_add_data_func("/nbd/gone-no-delay", GUINT_TO_POINTER(0),
                         test_server_gone);
    g_test_add_func("/nbd/qmp-blockdev-add", test_qmp);
    g_test_add_data_func("/nbd/tls-creds-x509", GUINT_TO_POINTER(0),
                         test_tls_qemu_nbd);
    g_test_add_data_func("/nbd/tls-creds-psk", GUINT_TO_POINTER(1),
                         test_tls_qemu_nbd);
    g_test_add_func("/nbd/tls-creds-qmp", test_tls_qmp);
    return g_test_run();
}
