/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The monitor's logging command (monitor/log-cmds.c). */
#ifndef MONITOR_LOG_CMDS_H
#define MONITOR_LOG_CMDS_H

#include "monitor/qmp.h"

/* x-vhost-blk-set-log-level {"level": "error"|"warn"|"info"|"debug"} */
JsonNode *vb_qmp_x_set_log_level(void *opaque, JsonObject *args,
                                 GError **errp);

#endif
