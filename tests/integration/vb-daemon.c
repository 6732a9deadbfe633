/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Integration-test helpers: spawn a vhost-user-blk daemon, drive requests. */
#include "qemu/osdep.h"
#include "vb-daemon.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

VbBackend vb_backend(void)
{
    const char *b = g_getenv("VB_BACKEND");

    if (b && (!strcmp(b, "qsd") || !strcmp(b, "qemu-storage-daemon"))) {
        return VB_BACKEND_QSD;
    }
    return VB_BACKEND_VHOST_BLKD;
}

bool vb_seccomp_env(void)
{
    const char *v = g_getenv("VB_SECCOMP");

    return v && (!strcmp(v, "on") || !strcmp(v, "1"));
}

const char *vb_backend_name(void)
{
    return vb_backend() == VB_BACKEND_QSD ? "qsd" : "vhost-blkd";
}

/* Remove what a test program that died (abort on a failed assertion
 * skips the teardown) left in /var/tmp: directories vb-itest-PID-* whose
 * PID is gone. */
static void vb_remove_stale_dirs(void)
{
    g_autoptr(GDir) dir = g_dir_open("/var/tmp", 0, NULL);
    const char *name;

    while (dir && (name = g_dir_read_name(dir))) {
        g_autofree char *path = NULL;
        g_autoptr(GDir) sub = NULL;
        const char *ent;
        long pid;

        if (!g_str_has_prefix(name, "vb-itest-")) {
            continue;
        }
        pid = strtol(name + strlen("vb-itest-"), NULL, 10);
        if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) {
            continue;
        }
        path = g_build_filename("/var/tmp", name, NULL);
        sub = g_dir_open(path, 0, NULL);
        while (sub && (ent = g_dir_read_name(sub))) {
            if (g_str_has_prefix(ent, "disk") ||
                !strcmp(ent, "daemon.log")) {
                g_autofree char *f = g_build_filename(path, ent, NULL);
                unlink(f);
            }
        }
        rmdir(path);
    }
}

void vb_daemon_init(VbDaemon *d, unsigned int nexports,
                    const VbExportSpec *specs)
{
    g_autofree char *tmpl = g_strdup_printf("/var/tmp/vb-itest-%d-XXXXXX",
                                            (int)getpid());

    vb_remove_stale_dirs();
    g_assert_cmpuint(nexports, >=, 1);
    g_assert_cmpuint(nexports, <=, VB_MAX_EXPORTS);
    memset(d, 0, sizeof(*d));
    d->backend = vb_backend();
    g_assert_nonnull(mkdtemp(tmpl));
    d->dir = g_strdup(tmpl);
    d->nexports = nexports;
    d->log_path = g_strdup_printf("%s/daemon.log", d->dir);
    for (unsigned int i = 0; i < nexports; i++) {
        int fd;

        d->spec[i] = specs[i];
        if (!d->spec[i].size) {
            d->spec[i].size = 16 << 20;
        }
        d->sock[i] = g_strdup_printf("%s/disk%u.sock", d->dir, i);
        d->image[i] = g_strdup_printf("%s/disk%u.img", d->dir, i);
        fd = open(d->image[i], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(ftruncate(fd, d->spec[i].size), ==, 0);
        close(fd);
    }
}

static void vb_child_setup(gpointer opaque)
{
    /* The daemon dies with the test program, even on abort(). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setpgid(0, 0);
}

static void vb_add_export_blkd(GPtrArray *argv, VbDaemon *d, unsigned int i)
{
    const VbExportSpec *s = &d->spec[i];
    GString *e = g_string_new(NULL);

    if (s->rbd) {
        g_string_append_printf(e, "socket=%s,%s", d->sock[i], s->rbd);
    } else if (s->null_driver) {
        g_string_append_printf(e, "socket=%s,driver=null,size=%" PRIu64,
                               d->sock[i], s->size);
    } else {
        g_string_append_printf(e, "socket=%s,file=%s", d->sock[i],
                               d->image[i]);
    }
    if (s->num_queues) {
        g_string_append_printf(e, ",num-queues=%u", s->num_queues);
    }
    if (s->readonly) {
        g_string_append(e, ",readonly=on");
    }
    if (s->logical_block_size) {
        g_string_append_printf(e, ",logical-block-size=%u",
                               s->logical_block_size);
    }
    if (s->serial) {
        g_string_append_printf(e, ",serial=%s", s->serial);
    }
    if (s->discard) {
        g_string_append_printf(e, ",discard=%s", s->discard);
    }
    if (s->write_zeroes) {
        g_string_append_printf(e, ",write-zeroes=%s", s->write_zeroes);
    }
    if (s->extra) {
        g_string_append_printf(e, ",%s", s->extra);
    }
    g_ptr_array_add(argv, g_strdup("--export"));
    g_ptr_array_add(argv, g_string_free(e, FALSE));
}

static void vb_add_export_qsd(GPtrArray *argv, VbDaemon *d, unsigned int i)
{
    const VbExportSpec *s = &d->spec[i];
    GString *e = g_string_new(NULL);

    g_ptr_array_add(argv, g_strdup("--blockdev"));
    if (s->null_driver) {
        g_ptr_array_add(argv, g_strdup_printf(
            "driver=null-co,node-name=n%u,size=%" PRIu64, i, s->size));
    } else {
        g_ptr_array_add(argv, g_strdup_printf(
            "driver=file,node-name=n%u,filename=%s,cache.direct=on,"
            "aio=native,discard=unmap", i, d->image[i]));
    }
    g_string_append_printf(e, "type=vhost-user-blk,id=e%u,node-name=n%u,"
                           "addr.type=unix,addr.path=%s,writable=%s",
                           i, i, d->sock[i], s->readonly ? "off" : "on");
    if (s->num_queues) {
        g_string_append_printf(e, ",num-queues=%u", s->num_queues);
    }
    if (s->logical_block_size) {
        g_string_append_printf(e, ",logical-block-size=%u",
                               s->logical_block_size);
    }
    g_ptr_array_add(argv, g_strdup("--export"));
    g_ptr_array_add(argv, g_string_free(e, FALSE));
}

void vb_daemon_start(VbDaemon *d)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GError) err = NULL;
    g_autofree char *cmdline = NULL;
    int logfd, errfd;

    g_assert_cmpint(d->pid, ==, 0);
    if (d->backend == VB_BACKEND_QSD) {
        const char *qsd = g_getenv("QEMU_STORAGE_DAEMON");

        g_ptr_array_add(argv, g_strdup(qsd ? qsd : "qemu-storage-daemon"));
        for (unsigned int i = 0; i < d->nexports; i++) {
            vb_add_export_qsd(argv, d, i);
        }
    } else {
        const char *blkd = g_getenv("VHOST_BLKD");

        if (!blkd) {
            g_error("VHOST_BLKD is not set: run through 'meson test' or set "
                    "it to the vhost-blkd executable");
        }
        g_ptr_array_add(argv, g_strdup(blkd));
        for (const char *const *a = d->args; a && *a; a++) {
            g_ptr_array_add(argv, g_strdup(*a));
        }
        for (unsigned int i = 0; i < d->nexports; i++) {
            vb_add_export_blkd(argv, d, i);
        }
        if (d->seccomp || vb_seccomp_env()) {
            g_ptr_array_add(argv, g_strdup("--seccomp"));
            g_ptr_array_add(argv, g_strdup("on"));
        }
        if (d->iothreads) {
            g_ptr_array_add(argv, g_strdup("--iothreads"));
            g_ptr_array_add(argv, g_strdup_printf("%u", d->iothreads));
        }
    }
    g_ptr_array_add(argv, NULL);
    cmdline = g_strjoinv(" ", (char **)argv->pdata);
    g_test_message("starting: %s", cmdline);

    /* daemon stdout goes to a log file; its stderr (log lines) to ours, so
     * they are in the test log even when an assertion aborts the test */
    logfd = open(d->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                 0600);
    g_assert_cmpint(logfd, >=, 0);
    /* a copy of our stderr: GLib 2.74 marks a target fd that is passed as
     * its own source (2 -> 2) close-on-exec, and the daemon's log lines
     * were lost */
    errfd = fcntl(d->stderr_to_log ? logfd : STDERR_FILENO, F_DUPFD_CLOEXEC,
                  3);
    g_assert_cmpint(errfd, >=, 3);
    if (!g_spawn_async_with_fds(NULL, (char **)argv->pdata, NULL,
                                G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_SEARCH_PATH,
                                vb_child_setup,
                                NULL, &d->pid, -1, logfd, errfd, &err)) {
        g_error("cannot start %s: %s", cmdline, err->message);
    }
    close(errfd);
    close(logfd);
}

bool vb_daemon_alive(VbDaemon *d)
{
    int status;

    if (!d->pid) {
        return false;
    }
    if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
        g_test_message("daemon exited, status 0x%x", status);
        d->pid = 0;
        return false;
    }
    return true;
}

void vb_daemon_kill(VbDaemon *d)
{
    if (d->pid) {
        kill(d->pid, SIGKILL);
        waitpid(d->pid, NULL, 0);
        d->pid = 0;
    }
}

void vb_daemon_cleanup(VbDaemon *d)
{
    g_autofree char *log = NULL;

    vb_daemon_kill(d);
    if (d->log_path && g_file_get_contents(d->log_path, &log, NULL, NULL) &&
        *log) {
        /* shown by meson test --verbose or in the test log */
        g_test_message("daemon log:\n%s", log);
    }
    for (unsigned int i = 0; i < d->nexports; i++) {
        unlink(d->sock[i]);
        unlink(d->image[i]);
        g_free(d->sock[i]);
        g_free(d->image[i]);
    }
    if (d->log_path) {
        unlink(d->log_path);
    }
    if (d->dir) {
        rmdir(d->dir);
    }
    g_free(d->log_path);
    g_free(d->dir);
    memset(d, 0, sizeof(*d));
}

VhostUserFrontend *vb_connect(VbDaemon *d, unsigned int i,
                              VhostUserFrontendOptions *opts)
{
    g_autoptr(GError) err = NULL;
    VhostUserFrontend *fe;

    g_assert_cmpuint(i, <, d->nexports);
    opts->socket_path = d->sock[i];
    if (!opts->connect_timeout_ms) {
        opts->connect_timeout_ms = 10000;
    }
    fe = vhost_user_frontend_new(opts, &err);
    if (!fe) {
        /* nothing can run without a session: fatal even with non-fatal
         * assertions */
        g_error("connecting to export %u (%s): %s", i, d->sock[i],
                err->message);
    }
    return fe;
}

VhostUserFrontend *vb_connect_started(VbDaemon *d, unsigned int i,
                                      unsigned int num_queues)
{
    VhostUserFrontendOptions opts = { .num_queues = num_queues };
    g_autoptr(GError) err = NULL;
    VhostUserFrontend *fe = vb_connect(d, i, &opts);

    vb_start(fe);
    return fe;
}

void vb_start(VhostUserFrontend *fe)
{
    g_autoptr(GError) err = NULL;

    if (!vhost_user_frontend_start(fe, &err)) {
        g_error("starting the queues: %s", err->message);
    }
}

int vb_reap_n(VhostUserFrontend *fe, unsigned int q,
              VhostUserFrontendCompletion *out, int n)
{
    int got = 0;

    while (got < n) {
        int r = vhost_user_frontend_reap(fe, q, out + got, n - got);

        if (r < 0) {
            return got;
        }
        got += r;
        if (got < n && vhost_user_frontend_wait(fe, q, VB_IO_TIMEOUT_MS) <= 0) {
            /* one last look, then give up */
            r = vhost_user_frontend_reap(fe, q, out + got, n - got);
            if (r <= 0) {
                break;
            }
            got += r;
        }
    }
    return got;
}

int vb_reqv(VhostUserFrontend *fe, unsigned int q, uint32_t type,
            uint64_t sector, const struct iovec *iov, unsigned int niov,
            bool data_in, uint32_t *used_len)
{
    VhostUserFrontendCompletion c;
    int head, r;

    head = vhost_user_frontend_blk_submit(fe, q, type, sector, iov, niov,
                                          data_in, &c);
    if (head < 0) {
        return head;
    }
    r = vhost_user_frontend_kick(fe, q);
    if (r < 0) {
        return r;
    }
    if (vb_reap_n(fe, q, &c, 1) != 1) {
        return -ETIMEDOUT;
    }
    g_assert_cmpint(c.head, ==, head);
    if (used_len) {
        *used_len = c.len;
    }
    return c.status;
}

int vb_req(VhostUserFrontend *fe, unsigned int q, uint32_t type,
           uint64_t sector, void *buf, size_t len, bool data_in,
           uint32_t *used_len)
{
    struct iovec iov = { .iov_base = buf, .iov_len = len };

    return vb_reqv(fe, q, type, sector, &iov, buf ? 1 : 0, data_in, used_len);
}

void vb_fill_pattern(void *buf, size_t len, uint32_t seed)
{
    uint8_t *p = buf;

    for (size_t i = 0; i < len; i++) {
        uint32_t x = seed * 2654435761u + (uint32_t)(i / 4) * 40503u;
        p[i] = (uint8_t)(x >> ((i % 4) * 8)) ^ (uint8_t)(seed >> 3);
    }
}

bool vb_check_pattern(const void *buf, size_t len, uint32_t seed)
{
    g_autofree uint8_t *ref = g_malloc(len);

    vb_fill_pattern(ref, len, seed);
    return memcmp(buf, ref, len) == 0;
}

void vb_read_image(VbDaemon *d, unsigned int i, uint64_t offset, void *buf,
                   size_t len)
{
    int fd = open(d->image[i], O_RDONLY | O_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, buf, len, offset), ==, (ssize_t)len);
    close(fd);
}

void vb_write_image(VbDaemon *d, unsigned int i, uint64_t offset,
                    const void *buf, size_t len)
{
    int fd = open(d->image[i], O_WRONLY | O_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pwrite(fd, buf, len, offset), ==, (ssize_t)len);
    g_assert_cmpint(fsync(fd), ==, 0);
    close(fd);
}

void vb_check_export_works(VbDaemon *d, unsigned int i)
{
    VhostUserFrontend *fe = vb_connect_started(d, i, 0);
    g_autoptr(GError) err = NULL;
    uint8_t *buf = vhost_user_frontend_mem_alloc(fe, 8192, 4096, &err);
    uint32_t seed = g_random_int();

    g_assert_no_error(err);
    vb_fill_pattern(buf, 8192, seed);
    g_assert_cmpint(vb_req(fe, 0, VIRTIO_BLK_T_OUT, 64, buf, 8192, false,
                           NULL), ==, VIRTIO_BLK_S_OK);
    memset(buf, 0, 8192);
    g_assert_cmpint(vb_req(fe, 0, VIRTIO_BLK_T_IN, 64, buf, 8192, true,
                           NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_true(vb_check_pattern(buf, 8192, seed));
    vhost_user_frontend_free(fe);
}

int vb_sh_status(char **out, const char *fmt, ...)
{
    g_autofree char *cmd = NULL;
    g_autofree char *err = NULL;
    g_autoptr(GError) gerr = NULL;
    char *argv[] = { (char *)"/bin/sh", (char *)"-c", NULL, NULL };
    int status;
    va_list ap;

    va_start(ap, fmt);
    cmd = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    argv[2] = cmd;
    if (!g_spawn_sync(NULL, argv, NULL, 0, NULL, NULL, out, &err, &status,
                      &gerr)) {
        g_error("%s: %s", cmd, gerr->message);
    }
    if (!WIFEXITED(status)) {
        g_error("%s: killed by a signal", cmd);
    }
    if (WEXITSTATUS(status)) {
        g_test_message("%s: exit %d: %s", cmd, WEXITSTATUS(status), err);
    }
    return WEXITSTATUS(status);
}
