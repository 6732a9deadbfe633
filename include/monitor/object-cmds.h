/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * QOM commands over the user-created objects (monitor/object-cmds.c):
 * object-del, qom-list, and qom-get of "type" (the rest of qom-get is
 * vb_qmp_qom_get()).  @opaque is the VbState.
 *
 * Threads: main thread only.
 */
#ifndef MONITOR_OBJECT_CMDS_H
#define MONITOR_OBJECT_CMDS_H

#include "monitor/qmp.h"

JsonNode *vb_qmp_object_del(void *opaque, JsonObject *args, GError **errp);
JsonNode *vb_qmp_qom_list(void *opaque, JsonObject *args, GError **errp);
JsonNode *vb_qmp_qom_get_obj(void *opaque, JsonObject *args, GError **errp);

#endif
