/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The NBD server in the daemon's QMP model (nbd/nbd-monitor.c, linked
 * into the monitor library): --nbd-server and nbd-server-start/stop,
 * block-export-add type=nbd (and the legacy nbd-server-add/remove), the
 * tls-creds-x509 and tls-creds-psk objects, the authz-simple,
 * authz-list and authz-list-file objects of tls-authz.
 *
 * Threads: main thread only.
 */
#ifndef NBD_NBD_MONITOR_H
#define NBD_NBD_MONITOR_H

#include "monitor/state.h"
#include "qemu/qmp-args.h"
#include "nbd/server.h"
#include "monitor/export.h"

/* block-export-add type=nbd and the rest, for the export registry. */
extern const VbExportType vb_export_type_nbd;

/* --nbd-server / nbd-server-start */
bool vb_nbd_server_start(VbState *s, JsonObject *args, bool keyval,
                         GError **errp);
/* block-export-add type=nbd (@a: its arguments, "type" read already) */
bool vb_nbd_export_add(VbState *s, QmpArgs *a, bool keyval, GError **errp);
/* block-export-del of an NBD export: false if @id is none of ours. */
bool vb_nbd_export_del(VbState *s, const char *id, bool hard,
                       GError **errp, bool *found);
/* query-block-exports: ours appended to @arr. */
void vb_nbd_query_exports(VbState *s, JsonArray *arr);
bool vb_nbd_has_export(VbState *s, const char *id);
/* query-blockstats, x-query-vhost-blk-stats, the metrics, SIGUSR1: the
 * NBD exports by index (< vb_nbd_num_exports()), with their counters. */
unsigned int vb_nbd_num_exports(VbState *s);
void vb_nbd_export_stats(VbState *s, unsigned int i, const char **id,
                         VbNode **node, NbdExportStats *st);
/* An iothread (its context) an NBD export uses: not to be deleted. */
bool vb_nbd_uses_ctx(VbState *s, AioContext *ctx);
/* --object tls-creds-x509 / tls-creds-psk */
bool vb_nbd_tls_x509_add(VbState *s, QmpArgs *a, GError **errp);
bool vb_nbd_tls_psk_add(VbState *s, QmpArgs *a, GError **errp);
/* --object authz-simple / authz-list / authz-list-file (tls-authz=ID) */
bool vb_nbd_authz_simple_add(VbState *s, QmpArgs *a, GError **errp);
bool vb_nbd_authz_list_add(VbState *s, QmpArgs *a, GError **errp);
bool vb_nbd_authz_list_file_add(VbState *s, QmpArgs *a, GError **errp);
bool vb_nbd_object_exists(VbState *s, const char *id);
/* The qom-type of the TLS or authz object @id, or NULL. */
const char *vb_nbd_object_type(VbState *s, const char *id);
/* qom-list /objects: every TLS and authz object. */
void vb_nbd_objects_foreach(VbState *s,
                            void (*fn)(void *opaque, const char *id,
                                       const char *type),
                            void *opaque);
/* Is @id an authz-simple, authz-list or authz-list-file object? */
bool vb_nbd_is_authz(VbState *s, const char *id);
/* qom-list of the authz object @id (none for NULL or another object):
 * its properties after "type". */
void vb_nbd_authz_props_foreach(VbState *s, const char *id,
                                void (*fn)(void *opaque, const char *name,
                                           const char *type),
                                void *opaque);
/* qom-get / qom-set of property @prop of the authz object @id (QEMU
 * 7.2's; see nbd-monitor.c).  @a of qom-set: its arguments, path and
 * property read already ("value" is left).  A qom-set applies from the
 * NBD server's next connection on. */
JsonNode *vb_nbd_authz_get(VbState *s, const char *id, const char *prop,
                           GError **errp);
bool vb_nbd_authz_set(VbState *s, const char *id, const char *prop,
                      QmpArgs *a, GError **errp);
/* object-del of a TLS credentials or authz object: refused while the NBD
 * server uses it. */
bool vb_nbd_object_del(VbState *s, const char *id, GError **errp);
/* Daemon shutdown: the server and its exports, waiting for their I/O. */
void vb_nbd_cleanup(VbState *s);
void vb_nbd_register(GArray *table);

#endif
