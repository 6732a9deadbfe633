/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * qemu-storage-daemon's command line, for what vhost-blkd serves:
 * --blockdev, --object iothread, --export type=vhost-user-blk, --chardev
 * socket and --monitor.  Options are checked for syntax when they are
 * added (keyval, the chardev and monitor keys) and applied in command-line
 * order once the daemon's iothreads exist, through the same functions as
 * the QMP commands (include/monitor/state.h).  No printing, no
 * exit(): errors are GErrors naming the option.
 *
 * Threads: main thread.
 */
#ifndef TOOLS_QSD_CLI_H
#define TOOLS_QSD_CLI_H

#include "qemu/osdep.h"
#include "monitor/state.h"

typedef enum QsdOptKind {
    QSD_OPT_BLOCKDEV,
    QSD_OPT_OBJECT,
    QSD_OPT_EXPORT,
    QSD_OPT_CHARDEV,
    QSD_OPT_MONITOR,
    QSD_OPT_NBD_SERVER,
} QsdOptKind;

typedef struct QsdChardev {
    char *id;
    char *path;
} QsdChardev;

typedef struct QsdMonitorOpts {
    char *chardev;
    bool pretty;
} QsdMonitorOpts;

typedef struct QsdCli {
    GPtrArray *opts;            /* QsdOpt, in command-line order */
    GPtrArray *chardevs;        /* QsdChardev */
    GPtrArray *monitors;        /* QsdMonitorOpts */
    unsigned int n_exports;
} QsdCli;

void qsd_cli_init(QsdCli *cli);
void qsd_cli_cleanup(QsdCli *cli);
/* The option's name for messages ("--blockdev"). */
const char *qsd_opt_name(QsdOptKind kind);
/* Whether an --export argument is QSD's syntax (type=..., or an implied
 * type as first element) rather than vhost-blkd's socket=...,file=... */
bool qsd_cli_export_is_qsd(const char *arg);
/*
 * @arg as it may be shown in a message or a log: the value of every key
 * that holds a secret (data=, key=, password=, ..., at any depth of the
 * JSON syntax) replaced by QSD_REDACTED.  Free with g_free().
 */
#define QSD_REDACTED "<redacted>"
char *qsd_cli_redact(const char *arg);
/* Check and remember one option; false with @errp set (whose message
 * never quotes a secret). */
bool qsd_cli_add(QsdCli *cli, QsdOptKind kind, const char *arg,
                 GError **errp);
/* Whole-command-line checks (every --monitor names a --chardev, every
 * chardev is used by a monitor). */
bool qsd_cli_check(QsdCli *cli, GError **errp);
/* Create the --object objects only (iothreads, secrets, throttle groups
 * that vhost-blkd's own --export may name); qsd_cli_apply() skips them. */
bool qsd_cli_apply_objects(QsdCli *cli, VbState *s, GError **errp);
/* Create the iothread objects, nodes and exports in order. */
bool qsd_cli_apply(QsdCli *cli, VbState *s, GError **errp);
/* The socket path of monitor @i's chardev. */
const char *qsd_cli_monitor_path(QsdCli *cli, unsigned int i);

/* --daemonize moves to "/": make the export (addr.path) and monitor
 * socket paths absolute first, so they are created and removed where the
 * operator asked. */
void qsd_cli_absolute_paths(QsdCli *cli);

#endif
