/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The user-created objects (monitor/objects.c): --object and object-add
 * of iothread, secret and throttle-group objects.
 *
 * Threads: main thread only.
 */
#ifndef MONITOR_OBJECTS_H
#define MONITOR_OBJECTS_H

#include "monitor/state.h"
#include "qemu/throttle.h"

typedef struct VbIOThreadObj {
    char *id;
    IOThread *iothread;
    int64_t poll_max_ns;        /* as created (query-iothreads) */
} VbIOThreadObj;

/* --object iothread,id=...[,poll-max-ns=...] and QMP object-add: with
 * s->seccomp set, the new thread is confined before anything runs in it
 * (and not created if that fails). */
bool vb_object_add(VbState *s, JsonObject *args, bool keyval, GError **errp);
/* Apply the iothread seccomp filter inside @t (--seccomp on). */
bool vb_iothread_confine(IOThread *t, GError **errp);
/* The throttle-group object @id (--export throttle-group=ID). */
ThrottleGroup *vb_throttle_group_find(VbState *s, const char *id);

#endif
