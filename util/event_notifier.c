/* SPDX-License-Identifier: GPL-2.0-or-later */
/* EventNotifier: a non-blocking, close-on-exec eventfd. */
#include "qemu/osdep.h"
#include <sys/eventfd.h>
#include "qemu/event_notifier.h"

/* Any thread. */
int event_notifier_init(EventNotifier *e, bool active)
{
    int fd = eventfd(active ? 1 : 0, EFD_NONBLOCK | EFD_CLOEXEC);

    if (fd < 0) {
        e->fd = -1;
        return -errno;
    }
    e->fd = fd;
    return 0;
}

/*
 * Main thread (or any thread without a sandbox): make an fd received from
 * a peer non-blocking, so that a peer handing us a blocking fd cannot
 * stall a loop that reads or writes it.  Returns 0 or -errno.
 *
 * This is a separate step from event_notifier_init_fd() because the fd is
 * often installed by an iothread (a running queue's call fd), and the
 * iothreads' seccomp filter does not allow fcntl(): the thread that
 * received the fd prepares it, the iothread only adopts it.
 */
int event_notifier_prepare_fd(int fd)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0) {
        return -errno;
    }
    if (!(flags & O_NONBLOCK) && fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        return -errno;
    }
    return 0;
}

/*
 * Any thread, including a sandboxed iothread: no system call.  Takes
 * ownership of @fd, which event_notifier_prepare_fd() (or the creator,
 * e.g. eventfd(EFD_NONBLOCK)) made non-blocking.
 */
void event_notifier_init_fd(EventNotifier *e, int fd)
{
    e->fd = fd;
}

/* Any thread; the notifier must no longer be watched by a loop. */
void event_notifier_cleanup(EventNotifier *e)
{
    if (e->fd >= 0) {
        close(e->fd);
        e->fd = -1;
    }
}

/* Any thread. */
int event_notifier_set(EventNotifier *e)
{
    static const uint64_t one = 1;
    ssize_t ret;

    do {
        ret = write(e->fd, &one, sizeof(one));
    } while (ret < 0 && errno == EINTR);
    /* EAGAIN: the counter is saturated, so the fd is readable anyway. */
    if (ret < 0 && errno != EAGAIN) {
        return -errno;
    }
    return 0;
}

/* Any thread (normally the one that watches the fd). */
bool event_notifier_test_and_clear(EventNotifier *e)
{
    uint64_t value;
    ssize_t ret;

    do {
        ret = read(e->fd, &value, sizeof(value));
    } while (ret < 0 && errno == EINTR);
    return ret == sizeof(value) && value != 0;
}
