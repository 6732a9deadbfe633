/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The daemon's block objects as QMP sees them: named nodes (blockdev-add:
 * an open image), exports (block-export-add: a vhost-user-blk server on a
 * node) and iothread objects; the QMP commands over them.  The command
 * line (--blockdev, --export type=..., --object iothread) goes through the
 * same functions in keyval mode, so both accept the same keys and give the
 * same errors.
 *
 * Threads: main thread only.
 */
#ifndef MONITOR_BLOCK_CMDS_H
#define MONITOR_BLOCK_CMDS_H

#include "qemu/osdep.h"
#include "qemu/iothread.h"
#include "hw/block/vhost-user-blk-export.h"
#include "monitor/qmp.h"
#include "qemu/systemd.h"
#include "qemu/throttle.h"

typedef struct VbNode VbNode;
typedef struct VbPendingOpen VbPendingOpen;
typedef struct VbExport VbExport;

typedef struct VbIOThreadObj {
    char *id;
    IOThread *iothread;
    int64_t poll_max_ns;        /* as created (query-iothreads) */
} VbIOThreadObj;

/* --object secret,id=ID,file=PATH[,format=raw|base64]: what it holds,
 * as QEMU passes a secret to librados (base64). */
typedef struct VbSecretObj {
    char *id;
    char *base64;
} VbSecretObj;

typedef struct VbState {
    AioContext *main_ctx;
    IOThread **pool;            /* --iothreads: exports without iothread= */
    unsigned int n_pool;
    int64_t poll_max_ns;        /* default for --object iothread */
    GPtrArray *iothreads;       /* VbIOThreadObj, --object iothread */
    GPtrArray *secrets;         /* VbSecretObj, --object secret */
    GPtrArray *throttle_groups; /* ThrottleGroup, --object throttle-group */
    GPtrArray *nodes;           /* VbNode */
    GPtrArray *pending_nodes;   /* VbPendingOpen: blockdev-adds whose open
                                 * runs in a worker; their names are taken */
    GPtrArray *exports;         /* VbExport */
    QmpServer *qmp;             /* events go here (NULL: none yet) */
    GHashTable *named_fds;      /* getfd: name -> fd (GINT_TO_POINTER) */
    SystemdSockets *sd;         /* socket activation (NULL: none) */
    bool seccomp;               /* --seccomp on and the start-up threads are
                                 * confined: so is every later iothread */
    bool quit;                  /* "quit" was asked for */
    QEMUBH *reap_bh;            /* finishes exports deleted in the
                                 * background (block-export-del) */
} VbState;

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

void vb_state_init(VbState *s, AioContext *main_ctx, IOThread **pool,
                   unsigned int n_pool, int64_t poll_max_ns);
/* Delete every export (draining it), node and iothread object. */
void vb_state_cleanup(VbState *s);

/* --object iothread,id=...[,poll-max-ns=...] and QMP object-add: with
 * s->seccomp set, the new thread is confined before anything runs in it
 * (and not created if that fails). */
bool vb_object_add(VbState *s, JsonObject *args, bool keyval, GError **errp);
/* Apply the iothread seccomp filter inside @t (--seccomp on). */
bool vb_iothread_confine(IOThread *t, GError **errp);
/* blockdev-add / --blockdev. */
VbNode *vb_blockdev_add(VbState *s, JsonObject *args, bool keyval,
                        GError **errp);
/* block-export-add / --export type=vhost-user-blk,... */
VbExport *vb_block_export_add(VbState *s, JsonObject *args, bool keyval,
                              GError **errp);

/* The legacy syntax: a node named @name opened with @opts. */
VbNode *vb_node_open(VbState *s, const char *name, const BlockOptions *opts,
                     bool discard, GError **errp);
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

/*
 * Throttle groups (monitor/throttle-cmds.c).  --object throttle-group and
 * object-add qom-type=throttle-group (@a: the object's arguments after
 * qom-type); the group named @id; QEMU's ThrottleLimits keys read from
 * @a, each prefixed by @prefix ("" or "x-"), into @t (*@any set if one
 * was given); qom-get / qom-set of a group's limits.
 */
bool vb_throttle_group_add(VbState *s, QmpArgs *a, GError **errp);
ThrottleGroup *vb_throttle_group_find(VbState *s, const char *id);
bool vb_throttle_limits_parse(QmpArgs *a, const char *prefix,
                              ThrottleLimits *t, bool *any, GError **errp);
JsonNode *vb_qmp_qom_get(void *opaque, JsonObject *args, GError **errp);
JsonNode *vb_qmp_qom_set(void *opaque, JsonObject *args, GError **errp);

/* The QMP commands (QmpCommand table, ends with { NULL }). */
extern const QmpCommand vb_qmp_commands[];

#endif
