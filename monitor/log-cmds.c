/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * x-vhost-blk-set-log-level: change the daemon's log level at run time
 * (vhost-blk-ctl log-level), as --log-level does at startup.  vhost-blkd
 * only (hence the x- prefix: qemu-storage-daemon has no such command).
 *
 * Threads: main thread (the monitor); the level is an atomic that every
 * thread reads before logging.
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "monitor/log-cmds.h"

JsonNode *vb_qmp_x_set_log_level(void *opaque, JsonObject *args,
                                 GError **errp)
{
    static const char *const levels[] = {
        "error", "warn", "info", "debug", NULL,
    };
    g_auto(QmpArgs) a;
    JsonNode *ret;
    LogLevel level;
    int idx;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_enum(&a, "level", levels, true, &idx, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    if (!log_level_parse(levels[idx], &level)) {
        g_assert_not_reached();
    }
    /* Say so at info level while info lines are still (or already) on. */
    if (level < LOG_LEVEL_INFO) {
        info_report("log level set to %s by the monitor", levels[idx]);
        log_set_level(level);
    } else {
        log_set_level(level);
        info_report("log level set to %s by the monitor", levels[idx]);
    }
    ret = json_node_new(JSON_NODE_OBJECT);
    json_node_take_object(ret, json_object_new());
    return ret;
}
