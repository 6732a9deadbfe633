/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * IOThread: a thread that runs its own AioContext until destroyed.
 * Create and destroy from the main thread.
 */
#ifndef QEMU_IOTHREAD_H
#define QEMU_IOTHREAD_H

#include "qemu/aio.h"

typedef struct IOThread IOThread;

/* Start the thread; returns once its loop runs.  @poll_max_ns: adaptive
 * polling limit (0 = off). */
IOThread *iothread_create(const char *name, int64_t poll_max_ns,
                          GError **errp);
/* Stop the loop, join the thread and free the context. */
void iothread_destroy(IOThread *iothread);
AioContext *iothread_get_aio_context(IOThread *iothread);
const char *iothread_get_name(IOThread *iothread);
/* Run @fn(@opaque) inside the iothread and wait until it returned.
 * Must not be called from the iothread itself. */
void iothread_run_sync(IOThread *iothread, void (*fn)(void *opaque),
                       void *opaque);
/* Same for any context: run @fn in @ctx and wait.  If @ctx is the caller's
 * own context, @fn runs directly. */
void aio_run_sync(AioContext *ctx, void (*fn)(void *opaque), void *opaque);

#endif
