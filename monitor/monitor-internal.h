/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the monitor's command files share and nothing outside monitor/
 * sees: the node and export structures, the objects' lookups, and the
 * QMP error helper.
 *
 * Threads: main thread only.
 */
#ifndef MONITOR_MONITOR_INTERNAL_H
#define MONITOR_MONITOR_INTERNAL_H

#include "qemu/osdep.h"
#include "monitor/qmp.h"
#include "monitor/state.h"
#include "monitor/objects.h"
#include "monitor/blockdev.h"
#include "monitor/export.h"

struct VbNode {
    char *name;
    char *driver;               /* "file", "host_device", "null-co", ... */
    char *filename;             /* as given; "null-co://" for null */
    BlockBackend *blk;
    bool readonly;
    bool cache_direct;
    bool discard;               /* discard=unmap */
    VbExport *user;             /* the export on it, if any */
    VbNode *file;               /* driver=throttle or raw: the node below */
    VbNode *filter;             /* the driver=throttle node above, if any */
    bool alias;                 /* driver=raw: blk is file's, not ours */
    bool implicit_file;         /* file was defined inline: dropped with us */
    unsigned int parents;       /* driver=raw nodes using us as their file */
    bool resizing;              /* a block_resize runs in a worker */
};

struct VbExport {
    VbState *state;
    char *id;
    VbNode *node;
    VuBlkExport *exp;
    bool deleting;              /* block-export-del: waiting for its I/O */
    bool idle;                  /* ... which has completed: reap it */
    bool writable;              /* the export's, not its node's */
};

/* --object secret,id=ID,file=PATH[,format=raw|base64]: what it holds,
 * as QEMU passes a secret to librados (base64). */
typedef struct VbSecretObj {
    char *id;
    char *base64;
} VbSecretObj;

/* A GenericError with a printf-style message, as QEMU's error_setg(). */
void vb_set_error(GError **errp, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* The "return" of a command that returns nothing: {}. */
JsonNode *vb_empty(void);

/*
 * Throttle groups (monitor/throttle-cmds.c).  --object throttle-group and
 * object-add qom-type=throttle-group (@a: the object's arguments after
 * qom-type); QEMU's ThrottleLimits keys read from @a, each prefixed by
 * @prefix ("" or "x-"), into @t (*@any set if one was given); qom-get /
 * qom-set of a group's limits.
 */
bool vb_throttle_group_add(VbState *s, QmpArgs *a, GError **errp);
bool vb_throttle_limits_parse(QmpArgs *a, const char *prefix,
                              ThrottleLimits *t, bool *any, GError **errp);
JsonNode *vb_qmp_qom_get(void *opaque, JsonObject *args, GError **errp);
JsonNode *vb_qmp_qom_set(void *opaque, JsonObject *args, GError **errp);

/*
 * QOM commands over the user-created objects (monitor/object-cmds.c):
 * object-del, qom-list, and qom-get of "type" (the rest of qom-get is
 * vb_qmp_qom_get()).  @opaque is the VbState.
 */
JsonNode *vb_qmp_object_del(void *opaque, JsonObject *args, GError **errp);
JsonNode *vb_qmp_qom_list(void *opaque, JsonObject *args, GError **errp);
JsonNode *vb_qmp_qom_get_obj(void *opaque, JsonObject *args, GError **errp);

#endif
