/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * defer_call: batch work until the end of a section (the 2014 plug/unplug).
 *
 * Sections are thread-local and nest.  defer_call(fn, opaque) inside a
 * section runs fn(opaque) once when the outermost section ends, however often
 * the same (fn, opaque) pair was registered; outside a section it runs fn at
 * once.  Used by block engines to submit a batch with one syscall and by the
 * dataplane to signal the guest once per batch.
 */
#ifndef QEMU_DEFER_CALL_H
#define QEMU_DEFER_CALL_H

#include "qemu/osdep.h"

void defer_call_begin(void);
void defer_call_end(void);
void defer_call(void (*fn)(void *opaque), void *opaque);

#endif
