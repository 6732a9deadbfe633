/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Exports (monitor/export.c): the registry of export types that
 * block-export-add / --export type= dispatch through (VbExportType),
 * type=vhost-user-blk itself, the legacy --export socket=... syntax, and
 * the listening sockets an export can be given (addr.type=fd).
 *
 * Threads: main thread only.
 */
#ifndef MONITOR_EXPORT_H
#define MONITOR_EXPORT_H

#include "monitor/state.h"
#include "qemu/qmp-args.h"
#include "hw/block/vhost-user-blk-export.h"

/*
 * One type of export, as block-export-add's and --export's type= names
 * it.  monitor/export.c keeps the registry: it looks the type up by name
 * and dispatches to these.  A qemu-storage-daemon type vhost-blkd does
 * not serve (fuse, vduse-blk) has a name only, and is refused by name.
 */
typedef struct VbExportType {
    const char *name;
    /* block-export-add: parse and check @a (its arguments, "type" read
     * already), then create the export. */
    bool (*add)(VbState *s, QmpArgs *a, bool keyval, GError **errp);
    /* block-export-del: *@found = whether @id is an export of this type;
     * true once it is deleted or deleting in the background. */
    bool (*del)(VbState *s, const char *id, bool hard, GError **errp,
                bool *found);
    /* query-block-exports: this type's exports appended to @arr. */
    void (*query)(VbState *s, JsonArray *arr);
    /* Is @id an export of this type? */
    bool (*has)(VbState *s, const char *id);
} VbExportType;

extern const VbExportType vb_export_type_vhost_user_blk;

/* How to create one export; filled by block-export-add or by the
 * legacy --export socket=...,file=... syntax. */
typedef struct VbExportParams {
    const char *id;
    VbNode *node;
    const char *socket_path;    /* unix socket to create, or the name */
    int listen_fd;              /* > 0: inherited listening socket */
    mode_t socket_mode;
    bool socket_chown;
    uid_t socket_uid;
    gid_t socket_gid;
    VirtioBlkConf conf;
    unsigned int first_batch;   /* see VuBlkExportOptions */
    IOThread *iothread;         /* every queue there; NULL: the pool */
    int pool_index;             /* pool iothread for every queue; -1:
                                 * queue q in q mod n_pool */
} VbExportParams;

/* block-export-add / --export type=...: any type of the registry. */
bool vb_block_export_add_any(VbState *s, JsonObject *args, bool keyval,
                             GError **errp);
/* Is @id the id of an export of any type? */
bool vb_export_id_in_use(VbState *s, const char *id);
/* One query-block-exports entry (QEMU's BlockExportInfo, plus
 * "writable"), appended to @arr: what every type's query gives. */
void vb_export_info_add(JsonArray *arr, const char *type, const char *id,
                        const char *node_name, bool shutting_down,
                        bool writable);
VbExport *vb_export_create(VbState *s, const VbExportParams *p,
                           GError **errp);
VbExport *vb_export_find(VbState *s, const char *id);
/* Stop it, drain (waiting in this thread), free, then send
 * BLOCK_EXPORT_DELETED: shutdown only. */
void vb_export_delete(VbState *s, VbExport *e);
VuBlkExport *vb_export_get_vu(VbExport *e);
const char *vb_export_get_id(VbExport *e);
const char *vb_export_get_node_name(VbExport *e);
/* The QoS counters of the export's node (zero when no throttle filter). */
void vb_export_get_throttle_stats(VbExport *e, BlockThrottleStats *st);
/*
 * addr.type=fd,addr.str=STR of block-export-add: on the command line
 * (@keyval) STR is the number of an inherited fd (socket activation passes
 * fd 3); over QMP it is the name of an fd the client passed with getfd
 * (SCM_RIGHTS), never a number, as qemu-storage-daemon does.  The fd must
 * be a listening AF_UNIX stream socket, and not the monitor's own
 * listener, another export's socket or a passed socket another export
 * claimed already.  Returns it, now the caller's, close-on-exec and
 * non-blocking, or -1 with @errp set (and nothing taken).
 */
int vb_listen_fd_take(VbState *s, const char *str, bool keyval,
                      GError **errp);

#endif
