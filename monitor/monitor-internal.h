/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the monitor's command files share and nothing outside monitor/
 * sees.
 *
 * Threads: main thread only.
 */
#ifndef MONITOR_MONITOR_INTERNAL_H
#define MONITOR_MONITOR_INTERNAL_H

#include "qemu/osdep.h"
#include "monitor/qmp.h"

/* A GenericError with a printf-style message, as QEMU's error_setg(). */
void vb_set_error(GError **errp, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* The "return" of a command that returns nothing: {}. */
JsonNode *vb_empty(void);

#endif
