/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The two service-manager protocols of systemd, without libsystemd:
 * readiness notification (sd_notify(3): datagrams to $NOTIFY_SOCKET) and
 * socket activation (sd_listen_fds(3): $LISTEN_PID, $LISTEN_FDS,
 * $LISTEN_FDNAMES, sockets passed from fd 3 on).
 *
 * Threads: main thread only (both read and change the environment).
 */
#ifndef QEMU_SYSTEMD_H
#define QEMU_SYSTEMD_H

#include "qemu/osdep.h"

/* The first fd a service manager passes (SD_LISTEN_FDS_START). */
#define SYSTEMD_LISTEN_FDS_START 3
/* More passed fds than this is treated as a broken environment. */
#define SYSTEMD_LISTEN_FDS_MAX 1024

typedef struct SystemdSockets {
    unsigned int n;             /* fds 3 .. 3 + n - 1 */
    char **names;               /* n entries; "unknown" when not named */
    bool *taken;                /* n entries: handed to a user */
} SystemdSockets;

/*
 * Take the sockets the service manager passed, if they are for this
 * process: $LISTEN_PID must be our pid (otherwise they were meant for a
 * parent and nothing is taken).  The three variables are removed from the
 * environment either way, so no child inherits them.  Every passed fd must
 * be open; it gets FD_CLOEXEC.  $LISTEN_FDNAMES, when set, must name every
 * fd.  On error nothing is taken and @errp says what was wrong.
 */
bool systemd_sockets_init(SystemdSockets *s, GError **errp);
/* Free what init allocated; the fds stay open (their users own them). */
void systemd_sockets_clear(SystemdSockets *s);
/*
 * The passed listening unix stream socket bound to @path, marked taken and
 * made non-blocking; -1 when none is (the caller then creates its own
 * socket).  Taking one twice is an error (two exports on one socket).
 */
int systemd_sockets_take_path(SystemdSockets *s, const char *path,
                              GError **errp);
/* The passed fd named @name (LISTEN_FDNAMES, FileDescriptorName=), marked
 * taken; -1 with @errp set when there is none or it is taken already. */
int systemd_sockets_take_name(SystemdSockets *s, const char *name,
                              GError **errp);
/* Mark fd @fd taken if it is one of the passed ones (an export given the
 * fd by number, addr.type=fd); false with @errp set if already taken. */
bool systemd_sockets_take_fd(SystemdSockets *s, int fd, GError **errp);

/*
 * Readiness notification.  systemd_notify_open() connects to
 * $NOTIFY_SOCKET (a path, or '@' for an abstract address) once, before the
 * process drops privileges, with a non-blocking socket, and removes the
 * variable from the environment; *fdp is -1 when the variable is not set
 * (not run by a service manager): sending is then a no-op.  A variable
 * that cannot be used (systemd's vsock: form, a relative path, nothing
 * listening) returns false with @errp set and *fdp = -1: the caller warns
 * and goes on without notifications, as sd_notify(3) users do.
 */
bool systemd_notify_open(int *fdp, GError **errp);
/* Send @state ("READY=1", "STOPPING=1", "STATUS=...", newline-separated
 * assignments); true when sent, or when @fd is -1. */
bool systemd_notify_send(int fd, const char *state, GError **errp);
void systemd_notify_close(int *fdp);

#endif
