/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The daemon's block objects as QMP sees them: named nodes (blockdev-add:
 * an open image, monitor/blockdev.c), exports (block-export-add: a
 * vhost-user-blk server on a node, monitor/export.c) and user-created
 * objects (iothread, secret, throttle-group: monitor/objects.c), and the
 * QMP commands over them.  The command line (--blockdev, --export
 * type=..., --object) goes through the same functions in keyval mode, so
 * both accept the same keys and give the same errors.
 *
 * Threads: main thread only.
 */
#ifndef MONITOR_STATE_H
#define MONITOR_STATE_H

#include "qemu/osdep.h"
#include "qemu/iothread.h"
#include "monitor/qmp.h"
#include "qemu/systemd.h"

typedef struct VbNode VbNode;
typedef struct VbPendingOpen VbPendingOpen;
typedef struct VbExport VbExport;

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

void vb_state_init(VbState *s, AioContext *main_ctx, IOThread **pool,
                   unsigned int n_pool, int64_t poll_max_ns);
/* Delete every export (draining it), node and iothread object. */
void vb_state_cleanup(VbState *s);

/* The QMP commands of every monitor file, for QmpServerConfig.commands
 * (ends with { NULL }; built at the first call, then the same). */
const QmpCommand *vb_qmp_commands(void);

#endif
