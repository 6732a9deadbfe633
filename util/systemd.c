/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * systemd's notification and socket-activation protocols in a few lines of
 * our own, so vhost-blkd needs no libsystemd (and stays linkable
 * statically).  Both protocols are documented as stable interfaces:
 * sd_notify(3) and sd_listen_fds(3).
 */
#include "qemu/osdep.h"
#include "qemu/systemd.h"

#include <sys/socket.h>
#include <sys/un.h>

/* A non-negative decimal without sign, leading junk or overflow. */
static bool systemd_parse_ulong(const char *str, unsigned long max,
                                unsigned long *out)
{
    char *end;
    unsigned long v;

    if (!str || !g_ascii_isdigit(str[0])) {
        return false;
    }
    errno = 0;
    v = strtoul(str, &end, 10);
    if (errno || *end || v > max) {
        return false;
    }
    *out = v;
    return true;
}

static void systemd_unset_listen_env(void)
{
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
}

bool systemd_sockets_init(SystemdSockets *s, GError **errp)
{
    const char *pid_str = getenv("LISTEN_PID");
    const char *fds_str = getenv("LISTEN_FDS");
    const char *names_str = getenv("LISTEN_FDNAMES");
    g_auto(GStrv) names = NULL;
    unsigned long pid, n;

    memset(s, 0, sizeof(*s));
    if (!pid_str && !fds_str) {
        systemd_unset_listen_env();
        return true;
    }
    if (!systemd_parse_ulong(pid_str, ULONG_MAX, &pid)) {
        g_set_error(errp, VB_ERROR, 0, "socket activation: LISTEN_PID='%s' "
                    "is not a process id", pid_str ? pid_str : "");
        systemd_unset_listen_env();
        return false;
    }
    if (pid != (unsigned long)getpid()) {
        /* Meant for the process that exec'd us, not for us. */
        systemd_unset_listen_env();
        return true;
    }
    if (!systemd_parse_ulong(fds_str, SYSTEMD_LISTEN_FDS_MAX, &n)) {
        g_set_error(errp, VB_ERROR, 0, "socket activation: LISTEN_FDS='%s' "
                    "is not a number of file descriptors (0..%d)",
                    fds_str ? fds_str : "", SYSTEMD_LISTEN_FDS_MAX);
        systemd_unset_listen_env();
        return false;
    }
    if (names_str) {
        names = g_strsplit(names_str, ":", -1);
        if (g_strv_length(names) != n) {
            g_set_error(errp, VB_ERROR, 0, "socket activation: "
                        "LISTEN_FDNAMES='%s' names %u file descriptors, "
                        "LISTEN_FDS=%lu", names_str, g_strv_length(names), n);
            systemd_unset_listen_env();
            return false;
        }
    }
    systemd_unset_listen_env();

    for (unsigned long i = 0; i < n; i++) {
        int fd = SYSTEMD_LISTEN_FDS_START + (int)i;
        int flags = fcntl(fd, F_GETFD);

        if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) {
            g_set_error(errp, VB_ERROR, 0, "socket activation: LISTEN_FDS=%lu "
                        "but fd %d is not open: %s", n, fd,
                        g_strerror(errno));
            return false;
        }
    }
    s->n = n;
    s->taken = g_new0(bool, n ? n : 1);
    s->names = g_new0(char *, n + 1);
    for (unsigned long i = 0; i < n; i++) {
        s->names[i] = g_strdup(names && names[i][0] ? names[i] : "unknown");
    }
    return true;
}

void systemd_sockets_clear(SystemdSockets *s)
{
    g_strfreev(s->names);
    g_free(s->taken);
    memset(s, 0, sizeof(*s));
}

/* Is @fd a listening AF_UNIX stream socket bound to @path? */
static bool systemd_fd_is_unix_listener(int fd, const char *path)
{
    struct sockaddr_un sa;
    socklen_t len = sizeof(sa);
    int val;
    socklen_t vlen = sizeof(val);
    size_t plen = strlen(path);

    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &val, &vlen) < 0 ||
        val != SOCK_STREAM) {
        return false;
    }
    vlen = sizeof(val);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &val, &vlen) < 0 || !val) {
        return false;
    }
    memset(&sa, 0, sizeof(sa));
    if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 ||
        sa.sun_family != AF_UNIX || len <= offsetof(struct sockaddr_un,
                                                    sun_path)) {
        return false;
    }
    len -= offsetof(struct sockaddr_un, sun_path);
    /* Path addresses may or may not count their terminating NUL. */
    if (len > 0 && sa.sun_path[len - 1] == '\0') {
        len--;
    }
    return len == plen && memcmp(sa.sun_path, path, plen) == 0;
}

/* An event loop accepts on it: never block in accept(). */
static bool systemd_fd_set_nonblock(int fd, GError **errp)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        g_set_error(errp, VB_ERROR, 0, "fd %d from the service manager: "
                    "fcntl: %s", fd, g_strerror(errno));
        return false;
    }
    return true;
}

int systemd_sockets_take_path(SystemdSockets *s, const char *path,
                              GError **errp)
{
    for (unsigned int i = 0; i < s->n; i++) {
        int fd = SYSTEMD_LISTEN_FDS_START + (int)i;

        if (!systemd_fd_is_unix_listener(fd, path)) {
            continue;
        }
        if (s->taken[i]) {
            g_set_error(errp, VB_ERROR, 0, "socket %s (fd %d from the "
                        "service manager) is already used by another export",
                        path, fd);
            return -1;
        }
        if (!systemd_fd_set_nonblock(fd, errp)) {
            return -1;
        }
        s->taken[i] = true;
        return fd;
    }
    return -1;
}

int systemd_sockets_take_name(SystemdSockets *s, const char *name,
                              GError **errp)
{
    for (unsigned int i = 0; i < s->n; i++) {
        if (strcmp(s->names[i], name) != 0) {
            continue;
        }
        if (s->taken[i]) {
            g_set_error(errp, VB_ERROR, 0, "socket '%s' (fd %u from the "
                        "service manager) is already used by another export",
                        name, SYSTEMD_LISTEN_FDS_START + i);
            return -1;
        }
        s->taken[i] = true;
        return SYSTEMD_LISTEN_FDS_START + (int)i;
    }
    g_set_error(errp, VB_ERROR, 0, "the service manager passed no socket "
                "named '%s' (%u passed; name them with FileDescriptorName= "
                "in the .socket unit)", name, s->n);
    return -1;
}

bool systemd_sockets_take_fd(SystemdSockets *s, int fd, GError **errp)
{
    unsigned int i;

    if (fd < SYSTEMD_LISTEN_FDS_START ||
        fd >= SYSTEMD_LISTEN_FDS_START + (int)s->n) {
        return true;
    }
    i = fd - SYSTEMD_LISTEN_FDS_START;
    if (s->taken[i]) {
        g_set_error(errp, VB_ERROR, 0, "fd %d (socket '%s' from the service "
                    "manager) is already used by another export", fd,
                    s->names[i]);
        return false;
    }
    s->taken[i] = true;
    return true;
}

/* ---- notification ---------------------------------------------------- */

bool systemd_notify_open(int *fdp, GError **errp)
{
    const char *env = getenv("NOTIFY_SOCKET");
    g_autofree char *path = NULL;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t plen;
    socklen_t len;
    int fd;

    *fdp = -1;
    if (!env) {
        return true;
    }
    /* Ours alone, whatever comes of it: no child inherits it. */
    path = g_strdup(env);
    unsetenv("NOTIFY_SOCKET");
    plen = strlen(path);
    if (g_str_has_prefix(path, "vsock:") ||
        g_str_has_prefix(path, "vsock-stream:") ||
        g_str_has_prefix(path, "vsock-dgram:") ||
        g_str_has_prefix(path, "vsock-seqpacket:")) {
        g_set_error(errp, VB_ERROR, 0, "NOTIFY_SOCKET='%s': AF_VSOCK "
                    "notification is not supported; readiness is not "
                    "reported (use a unix socket path)", path);
        return false;
    }
    if ((path[0] != '/' && path[0] != '@') || plen < 2 ||
        plen >= sizeof(sa.sun_path)) {
        g_set_error(errp, VB_ERROR, 0, "NOTIFY_SOCKET='%s' is not an "
                    "absolute socket path or an @abstract address (of at "
                    "most %zu bytes); readiness is not reported", path,
                    sizeof(sa.sun_path) - 1);
        return false;
    }
    memcpy(sa.sun_path, path, plen);
    len = offsetof(struct sockaddr_un, sun_path) + plen;
    if (path[0] == '@') {
        sa.sun_path[0] = '\0';      /* abstract: no trailing NUL counted */
    } else {
        len++;
    }
    /* Non-blocking: a manager that stops reading must not stall the main
     * thread (a notification that does not fit is dropped, with a log
     * line). */
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        g_set_error(errp, VB_ERROR, 0, "NOTIFY_SOCKET: socket: %s; "
                    "readiness is not reported", g_strerror(errno));
        return false;
    }
    if (connect(fd, (struct sockaddr *)&sa, len) < 0) {
        g_set_error(errp, VB_ERROR, 0, "cannot connect to the service "
                    "manager's NOTIFY_SOCKET %s: %s; readiness is not "
                    "reported", path, g_strerror(errno));
        close(fd);
        return false;
    }
    *fdp = fd;
    return true;
}

bool systemd_notify_send(int fd, const char *state, GError **errp)
{
    size_t len = strlen(state);
    ssize_t r;

    if (fd < 0) {
        return true;
    }
    do {
        r = send(fd, state, len, MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    if (r != (ssize_t)len) {
        g_set_error(errp, VB_ERROR, 0, "cannot tell the service manager "
                    "'%s': %s", state, r < 0 ? g_strerror(errno) :
                    "short write");
        return false;
    }
    return true;
}

void systemd_notify_close(int *fdp)
{
    if (*fdp >= 0) {
        close(*fdp);
        *fdp = -1;
    }
}
