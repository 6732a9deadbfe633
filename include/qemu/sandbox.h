/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Sandbox: a seccomp system-call allowlist (libseccomp) for the threads
 * that serve guest I/O, so that a bug reachable from a guest cannot open
 * files, create sockets to the network, execute programs or change
 * credentials from those threads.
 *
 * The filter is per thread: it applies to the thread that installs it and
 * to threads it creates later (thread-pool workers spawned from an
 * iothread inherit it); the main thread stays unfiltered.  A system call
 * outside the list raises SIGSYS, whose handler writes one line naming the
 * call number to stderr and terminates the process (see docs/user-guide.md,
 * "Least privilege", for why this beats failing the call with EPERM).
 * Install it after every image and socket is open and after credentials
 * were dropped: glibc's setuid() must run its system calls in every thread.
 */
#ifndef QEMU_SANDBOX_H
#define QEMU_SANDBOX_H

#include "qemu/osdep.h"

/* Any thread.  True when built with libseccomp. */
bool sandbox_available(void);

/*
 * The calling thread (an iothread, through iothread_run_sync()): load the
 * iothread allowlist for this thread and its future children.  False with
 * @errp set if the build lacks libseccomp or the kernel refuses the filter.
 */
bool sandbox_apply_iothread_filter(GError **errp);

/*
 * The calling thread: the iothread allowlist plus serving TCP connections
 * on an already listening socket (accept, recv, shutdown, socket options),
 * for the metrics endpoint's HTTP thread (monitor/metrics-http.c).
 */
bool sandbox_apply_http_filter(GError **errp);

/*
 * The calling thread: has it loaded a filter above (or was it marked with
 * sandbox_thread_set_confined())?  Work it hands to other threads must go
 * to threads under the same filter (block/thread-pool.c).
 */
bool sandbox_thread_confined(void);

/*
 * A thread created by a confined thread (it inherited the filter; the
 * filter forbids loading another): say so for sandbox_thread_confined()
 * and the SIGSYS line.
 */
void sandbox_thread_set_confined(void);

#endif
