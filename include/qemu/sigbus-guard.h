/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * SIGBUS guard for memory mapped from files another process controls.
 *
 * A front-end can shrink the file behind guest memory after the daemon
 * mapped it; the daemon's next load or store there raises SIGBUS, which
 * would kill every export of the process.  A guarded range turns that
 * into a per-session error instead: the handler replaces the faulting
 * page with a private zero page (so the access completes harmlessly) and
 * sets the range's flag, which the owner polls once per batch and answers
 * by closing the session.  A SIGBUS anywhere else keeps its default
 * action (the process dies with a core, as a real bug should).
 */
#ifndef QEMU_SIGBUS_GUARD_H
#define QEMU_SIGBUS_GUARD_H

#include "qemu/osdep.h"

/* Any thread: install the handler (once; later calls do nothing). */
bool sigbus_guard_install(GError **errp);

/* Any thread, after sigbus_guard_install(): guard [addr, addr + len)
 * rounded up to the end of its last page (a mapping's unit; callers that
 * map huge pages pass the length rounded to those); a fault there sets
 * *flag.  Returns
 * a handle for sigbus_guard_remove(), or -1 when every slot is taken (the
 * range is then unguarded; the caller may go on). */
int sigbus_guard_add(void *addr, size_t len, _Atomic bool *flag);

/* Any thread, before the range is unmapped. */
void sigbus_guard_remove(int handle);

#endif
