/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * util/systemd.c against hand-made service-manager environments: which
 * LISTEN_* combinations are taken, refused or ignored; sockets found by
 * path, name and number; notifications arriving on a datagram socket (path
 * and abstract addresses).
 */
#include "qemu/osdep.h"
#include "qemu/systemd.h"

#include <sys/socket.h>
#include <sys/un.h>

static char *tmpdir;

/* A listening unix stream socket at @path. */
static int listener(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_assert_cmpint(fd, >=, 0);
    g_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
    unlink(path);
    g_assert_cmpint(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    g_assert_cmpint(listen(fd, 1), ==, 0);
    return fd;
}

/*
 * Put @n listening sockets named tmpdir/sN.sock at fds 3.. (saving what
 * was there); restore_fds() puts the originals back.
 */
static int saved[4];

static void place_fds(unsigned int n)
{
    g_assert_cmpuint(n, <=, G_N_ELEMENTS(saved));
    for (unsigned int i = 0; i < n; i++) {
        g_autofree char *p = g_strdup_printf("%s/s%u.sock", tmpdir, i);
        int tmp = listener(p);
        /* Above the range first: the socket itself may have landed on 3. */
        int fd = fcntl(tmp, F_DUPFD_CLOEXEC, 200);

        close(tmp);
        saved[i] = fcntl(3 + i, F_DUPFD_CLOEXEC, 100);
        g_assert_cmpint(dup2(fd, 3 + i), ==, 3 + (int)i);
        close(fd);
    }
}

static void restore_fds(unsigned int n)
{
    for (unsigned int i = 0; i < n; i++) {
        if (saved[i] >= 0) {
            dup2(saved[i], 3 + i);
            close(saved[i]);
        } else {
            close(3 + i);
        }
    }
}

static void set_env(const char *pid, const char *fds, const char *names)
{
    g_autofree char *self = g_strdup_printf("%d", (int)getpid());

    g_setenv("LISTEN_PID", pid ? pid : self, true);
    if (fds) {
        g_setenv("LISTEN_FDS", fds, true);
    } else {
        g_unsetenv("LISTEN_FDS");
    }
    if (names) {
        g_setenv("LISTEN_FDNAMES", names, true);
    } else {
        g_unsetenv("LISTEN_FDNAMES");
    }
}

static void assert_env_gone(void)
{
    g_assert_null(g_getenv("LISTEN_PID"));
    g_assert_null(g_getenv("LISTEN_FDS"));
    g_assert_null(g_getenv("LISTEN_FDNAMES"));
}

static void test_not_activated(void)
{
    SystemdSockets s;
    GError *err = NULL;

    g_unsetenv("LISTEN_PID");
    g_unsetenv("LISTEN_FDS");
    g_assert_true(systemd_sockets_init(&s, &err));
    g_assert_cmpuint(s.n, ==, 0);
    g_assert_cmpint(systemd_sockets_take_path(&s, "/x.sock", &err), ==, -1);
    g_assert_null(err);
    g_assert_true(systemd_sockets_take_fd(&s, 3, &err));
    systemd_sockets_clear(&s);
}

/* LISTEN_PID of another process: the fds are not ours, nothing taken. */
static void test_other_pid(void)
{
    SystemdSockets s;
    GError *err = NULL;

    set_env("1", "2", NULL);
    g_assert_true(systemd_sockets_init(&s, &err));
    g_assert_cmpuint(s.n, ==, 0);
    assert_env_gone();
    systemd_sockets_clear(&s);
}

static void test_bad_env(void)
{
    static const struct {
        const char *pid, *fds, *names, *msg;
    } cases[] = {
        { "12x", "1", NULL, "LISTEN_PID='12x'" },
        { "", "1", NULL, "LISTEN_PID=''" },
        { NULL, "-1", NULL, "LISTEN_FDS='-1'" },
        { NULL, "two", NULL, "LISTEN_FDS='two'" },
        { NULL, "99999", NULL, "LISTEN_FDS='99999'" },
        { NULL, NULL, NULL, "LISTEN_FDS=''" },
        { NULL, "2", "a", "names 1 file descriptors, LISTEN_FDS=2" },
        { NULL, "1", "a:b", "names 2 file descriptors, LISTEN_FDS=1" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        SystemdSockets s;
        GError *err = NULL;

        set_env(cases[i].pid, cases[i].fds, cases[i].names);
        g_assert_false(systemd_sockets_init(&s, &err));
        g_assert_nonnull(err);
        if (!strstr(err->message, cases[i].msg)) {
            g_error("case %zu: '%s' lacks '%s'", i, err->message,
                    cases[i].msg);
        }
        g_clear_error(&err);
        assert_env_gone();
    }
}

/* LISTEN_FDS counting past the fds that are open. */
static void test_fd_not_open(void)
{
    SystemdSockets s;
    GError *err = NULL;
    int hi = 3 + 40;

    g_assert_cmpint(fcntl(hi, F_GETFD), <, 0);  /* the test opens no such fd */
    set_env(NULL, "41", NULL);
    g_assert_false(systemd_sockets_init(&s, &err));
    g_assert_nonnull(strstr(err->message, "is not open"));
    g_clear_error(&err);
}

static void test_take(void)
{
    g_autofree char *p0 = g_strdup_printf("%s/s0.sock", tmpdir);
    g_autofree char *p1 = g_strdup_printf("%s/s1.sock", tmpdir);
    SystemdSockets s;
    GError *err = NULL;

    place_fds(2);
    g_assert_cmpint(fcntl(3, F_SETFD, 0), ==, 0);
    set_env(NULL, "2", "vm1:vm2");
    g_assert_true(systemd_sockets_init(&s, &err));
    g_assert_no_error(err);
    assert_env_gone();
    g_assert_cmpuint(s.n, ==, 2);
    g_assert_cmpstr(s.names[0], ==, "vm1");
    g_assert_cmpstr(s.names[1], ==, "vm2");
    g_assert_cmpint(fcntl(3, F_GETFD) & FD_CLOEXEC, ==, FD_CLOEXEC);

    /* by path (made non-blocking); a second export on the path is refused */
    g_assert_cmpint(fcntl(4, F_GETFL) & O_NONBLOCK, ==, 0);
    g_assert_cmpint(systemd_sockets_take_path(&s, p1, &err), ==, 4);
    g_assert_cmpint(fcntl(4, F_GETFL) & O_NONBLOCK, ==, O_NONBLOCK);
    g_assert_cmpint(systemd_sockets_take_path(&s, p1, &err), ==, -1);
    g_assert_nonnull(strstr(err->message, "already used"));
    g_clear_error(&err);
    /* a path that was not passed: the caller creates its own */
    g_assert_cmpint(systemd_sockets_take_path(&s, "/nonexistent.sock", &err),
                    ==, -1);
    g_assert_no_error(err);
    /* a prefix of a passed path is not a match */
    g_assert_cmpint(systemd_sockets_take_path(&s, tmpdir, &err), ==, -1);
    g_assert_no_error(err);

    /* by name */
    g_assert_cmpint(systemd_sockets_take_name(&s, "vm2", &err), ==, -1);
    g_assert_nonnull(strstr(err->message, "already used"));
    g_clear_error(&err);
    g_assert_cmpint(systemd_sockets_take_name(&s, "nope", &err), ==, -1);
    g_assert_nonnull(strstr(err->message, "no socket named 'nope'"));
    g_clear_error(&err);
    g_assert_cmpint(systemd_sockets_take_name(&s, "vm1", &err), ==, 3);

    /* by number */
    g_assert_false(systemd_sockets_take_fd(&s, 3, &err));
    g_assert_nonnull(strstr(err->message, "fd 3 (socket 'vm1'"));
    g_clear_error(&err);
    g_assert_true(systemd_sockets_take_fd(&s, 17, &err));  /* not passed */
    systemd_sockets_clear(&s);

    /* unnamed: "unknown", as systemd; found by path */
    set_env(NULL, "2", NULL);
    g_assert_true(systemd_sockets_init(&s, &err));
    g_assert_cmpstr(s.names[1], ==, "unknown");
    g_assert_cmpint(systemd_sockets_take_path(&s, p0, &err), ==, 3);
    g_assert_true(systemd_sockets_take_fd(&s, 4, &err));
    g_assert_false(systemd_sockets_take_fd(&s, 4, &err));
    g_clear_error(&err);
    systemd_sockets_clear(&s);
    restore_fds(2);
}

/* A non-listening or datagram fd is never matched by path. */
static void test_path_needs_listener(void)
{
    g_autofree char *p = g_strdup_printf("%s/dgram.sock", tmpdir);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    SystemdSockets s;
    GError *err = NULL;
    int old = fcntl(3, F_DUPFD_CLOEXEC, 100);
    int tmp = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int fd = fcntl(tmp, F_DUPFD_CLOEXEC, 200);

    close(tmp);

    g_strlcpy(sa.sun_path, p, sizeof(sa.sun_path));
    g_assert_cmpint(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    g_assert_cmpint(dup2(fd, 3), ==, 3);
    close(fd);
    set_env(NULL, "1", NULL);
    g_assert_true(systemd_sockets_init(&s, &err));
    g_assert_cmpint(systemd_sockets_take_path(&s, p, &err), ==, -1);
    g_assert_no_error(err);
    systemd_sockets_clear(&s);
    if (old >= 0) {
        dup2(old, 3);
        close(old);
    } else {
        close(3);
    }
}

/* A datagram socket as the service manager; what one notify carried. */
static void check_notify(const char *env, struct sockaddr_un *sa,
                         socklen_t salen)
{
    int srv = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    GError *err = NULL;
    char buf[256];
    ssize_t n;
    int fd;

    g_assert_cmpint(bind(srv, (struct sockaddr *)sa, salen), ==, 0);
    g_setenv("NOTIFY_SOCKET", env, true);
    g_assert_true(systemd_notify_open(&fd, &err));
    g_assert_no_error(err);
    g_assert_cmpint(fd, >=, 0);
    g_assert_null(g_getenv("NOTIFY_SOCKET"));
    g_assert_true(systemd_notify_send(fd, "READY=1\nSTATUS=serving", &err));
    g_assert_true(systemd_notify_send(fd, "STOPPING=1", &err));
    n = recv(srv, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    g_assert_cmpint(n, ==, strlen("READY=1\nSTATUS=serving"));
    buf[n] = 0;
    g_assert_cmpstr(buf, ==, "READY=1\nSTATUS=serving");
    n = recv(srv, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    buf[n > 0 ? n : 0] = 0;
    g_assert_cmpstr(buf, ==, "STOPPING=1");
    systemd_notify_close(&fd);
    g_assert_cmpint(fd, ==, -1);
    close(srv);
}

static void test_notify_path(void)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    g_autofree char *p = g_strdup_printf("%s/notify", tmpdir);

    g_strlcpy(sa.sun_path, p, sizeof(sa.sun_path));
    check_notify(p, &sa, sizeof(sa));
}

static void test_notify_abstract(void)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    g_autofree char *name = g_strdup_printf("vb-test-notify-%d",
                                            (int)getpid());
    g_autofree char *env = g_strdup_printf("@%s", name);

    memcpy(sa.sun_path + 1, name, strlen(name));
    check_notify(env, &sa, offsetof(struct sockaddr_un, sun_path) + 1 +
                 strlen(name));
}

static void test_notify_absent_or_bad(void)
{
    GError *err = NULL;
    int fd = 5;

    g_unsetenv("NOTIFY_SOCKET");
    g_assert_true(systemd_notify_open(&fd, &err));
    g_assert_cmpint(fd, ==, -1);
    g_assert_true(systemd_notify_send(fd, "READY=1", &err));

    /* Unusable ones: an error for a warning, no fd, the variable gone
     * (and sending is a no-op) */
    {
        static const struct {
            const char *env, *want;
        } bad[] = {
            { "relative/path", "not an absolute socket path" },
            { "/nonexistent/notify", "cannot connect" },
            { "vsock:2:1234", "AF_VSOCK notification is not supported" },
            { "vsock-stream:2:1234", "AF_VSOCK" },
        };

        for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
            fd = 5;
            g_setenv("NOTIFY_SOCKET", bad[i].env, true);
            g_assert_false(systemd_notify_open(&fd, &err));
            g_assert_nonnull(strstr(err->message, bad[i].want));
            g_clear_error(&err);
            g_assert_cmpint(fd, ==, -1);
            g_assert_null(g_getenv("NOTIFY_SOCKET"));
            g_assert_true(systemd_notify_send(fd, "READY=1", &err));
        }
    }
}

/*
 * The notify socket is non-blocking: a service manager that stops reading
 * gets its notifications dropped (an error for a log line), the main
 * thread never waits.  Its receive queue is filled until a send fails.
 */
static void test_notify_nonblocking(void)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    g_autofree char *p = g_strdup_printf("%s/notify-full", tmpdir);
    int srv = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    GError *err = NULL;
    bool failed = false;
    int fd;

    g_strlcpy(sa.sun_path, p, sizeof(sa.sun_path));
    g_assert_cmpint(bind(srv, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    g_setenv("NOTIFY_SOCKET", p, true);
    g_assert_true(systemd_notify_open(&fd, &err));
    g_assert_cmpint(fcntl(fd, F_GETFL) & O_NONBLOCK, ==, O_NONBLOCK);
    alarm(30);      /* hang guard: a blocking socket would wait here */
    for (int i = 0; i < 100000 && !failed; i++) {
        failed = !systemd_notify_send(fd, "STATUS=filling the queue", &err);
    }
    alarm(0);
    g_assert_true(failed);
    g_assert_nonnull(strstr(err->message, "cannot tell the service manager"));
    g_clear_error(&err);
    systemd_notify_close(&fd);
    close(srv);
    unlink(p);
}

int main(int argc, char **argv)
{
    int ret;

    g_test_init(&argc, &argv, NULL);
    tmpdir = g_dir_make_tmp("vb-systemd-XXXXXX", NULL);
    g_assert_nonnull(tmpdir);
    g_test_add_func("/systemd/listen/not-activated", test_not_activated);
    g_test_add_func("/systemd/listen/other-pid", test_other_pid);
    g_test_add_func("/systemd/listen/bad-env", test_bad_env);
    g_test_add_func("/systemd/listen/fd-not-open", test_fd_not_open);
    g_test_add_func("/systemd/listen/take", test_take);
    g_test_add_func("/systemd/listen/path-needs-listener",
                    test_path_needs_listener);
    g_test_add_func("/systemd/notify/path", test_notify_path);
    g_test_add_func("/systemd/notify/abstract", test_notify_abstract);
    g_test_add_func("/systemd/notify/absent-or-bad",
                    test_notify_absent_or_bad);
    g_test_add_func("/systemd/notify/non-blocking", test_notify_nonblocking);
    ret = g_test_run();
    for (unsigned int i = 0; i < 4; i++) {
        g_autofree char *p = g_strdup_printf("%s/s%u.sock", tmpdir, i);
        unlink(p);
    }
    g_autofree char *p = g_strdup_printf("%s/dgram.sock", tmpdir);
    unlink(p);
    g_free(p);
    p = g_strdup_printf("%s/notify", tmpdir);
    unlink(p);
    rmdir(tmpdir);
    return ret;
}
