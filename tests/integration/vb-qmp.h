/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A minimal QMP client for the integration tests: one connection to a
 * daemon's monitor socket, read line by line, events skipped.  Every
 * failure of the connection itself is a test failure (g_assert); a
 * command's error is returned or asserted, as each function says.
 */
#ifndef TESTS_INTEGRATION_VB_QMP_H
#define TESTS_INTEGRATION_VB_QMP_H

#include <json-glib/json-glib.h>
#include "vb-daemon.h"

typedef struct VbQmp {
    int fd;                     /* -1: not connected */
    GString *in;                /* bytes read, not yet a whole line */
} VbQmp;

/*
 * Connect to the monitor at @path of daemon @d, which may still be
 * starting (retried every 50 ms for up to 30 s, a hang guard, while the
 * daemon lives), read the greeting and leave capabilities negotiation.
 */
void vb_qmp_connect(VbQmp *q, const char *path, VbDaemon *d);
void vb_qmp_close(VbQmp *q);
/* The next line the daemon sent (without its newline). */
char *vb_qmp_line(VbQmp *q);
/*
 * Run @cmd (a JSON object): the reply's "return", or NULL and in *@err the
 * error's "desc"; with @err NULL the command must succeed.
 */
JsonNode *vb_qmp(VbQmp *q, const char *cmd, char **err);
void vb_qmp_ok(VbQmp *q, const char *cmd);
/* @cmd fails with exactly @desc. */
void vb_qmp_fails(VbQmp *q, const char *cmd, const char *desc);
/* NULL if @cmd succeeds, else the error's description. */
char *vb_qmp_error(VbQmp *q, const char *cmd);

#endif /* TESTS_INTEGRATION_VB_QMP_H */
