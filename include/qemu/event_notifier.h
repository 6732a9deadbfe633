/* SPDX-License-Identifier: GPL-2.0-or-later */
/* EventNotifier: an eventfd used to wake a thread or signal a ring. */
#ifndef QEMU_EVENT_NOTIFIER_H
#define QEMU_EVENT_NOTIFIER_H

#include "qemu/osdep.h"

typedef struct EventNotifier {
    int fd;
} EventNotifier;

/* Returns 0 or -errno.  @active: start signalled. Non-blocking, CLOEXEC. */
int event_notifier_init(EventNotifier *e, bool active);
/* Make an fd received from elsewhere non-blocking (a thread that may
 * call fcntl(): not a sandboxed iothread).  Returns 0 or -errno. */
int event_notifier_prepare_fd(int fd);
/* Wrap a non-blocking fd (takes ownership); makes no system call, so a
 * sandboxed iothread may call it. */
void event_notifier_init_fd(EventNotifier *e, int fd);
void event_notifier_cleanup(EventNotifier *e);
/* Returns 0 or -errno. */
int event_notifier_set(EventNotifier *e);
/* Returns true if the notifier was signalled. */
bool event_notifier_test_and_clear(EventNotifier *e);
static inline int event_notifier_get_fd(const EventNotifier *e)
{
    return e->fd;
}

#endif
