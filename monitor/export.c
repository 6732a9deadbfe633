/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Exports, and the QMP commands over them (see include/monitor/export.h).
 * Names, arguments, replies and error texts follow qemu-storage-daemon
 * 7.2 so that its tooling works unchanged; docs/user-guide.md lists the
 * deliberate differences.
 *
 * An export borrows its node's backend (one export per node) and runs a
 * vhost-user-blk server on it.
 * block-export-del stops listening and drops the front-end at once; an
 * export with nothing in flight is freed in the command (then
 * BLOCK_EXPORT_DELETED, before the reply, as qemu-storage-daemon does).
 * One whose requests are still in flight (stuck storage) is only marked
 * shutting down: the command returns, the main thread keeps serving
 * every other export's control path and the monitor, and when the
 * server reports the last request completed (vu_server_set_idle_notify)
 * a bottom half frees it and sends the event.  Only daemon shutdown
 * waits for the drain in this thread (vb_export_delete()).
 *
 * Threads: main thread only.
 */
#include "qemu/osdep.h"
#include "monitor-internal.h"
#include "qemu/error-report.h"

#include <sys/socket.h>
#include <sys/stat.h>

/* ---- exports ----------------------------------------------------------- */

VbExport *vb_export_find(VbState *s, const char *id)
{
    for (guint i = 0; id && i < s->exports->len; i++) {
        VbExport *e = g_ptr_array_index(s->exports, i);

        if (!strcmp(e->id, id)) {
            return e;
        }
    }
    return NULL;
}

/* Do @a and @b refer to the same open socket (dup()s and passed copies
 * included)? */
static bool vb_same_file(int a, int b)
{
    struct stat sa, sb;

    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 &&
           sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* @fd (called @what in errors) can serve a new export. */
static bool vb_listen_fd_check(VbState *s, int fd, const char *what,
                               GError **errp)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    int v = 0;
    socklen_t vlen = sizeof(v);

    if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        vb_set_error(errp, "%s: not a socket this process has: %s", what,
                     g_strerror(errno));
        return false;
    }
    if (sa.ss_family != AF_UNIX ||
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &vlen) < 0 ||
        v != SOCK_STREAM) {
        vb_set_error(errp, "%s: not a unix stream socket", what);
        return false;
    }
    vlen = sizeof(v);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &vlen) < 0 || !v) {
        vb_set_error(errp, "%s: the socket is not listening", what);
        return false;
    }
    if (s->qmp && qmp_server_is_listener(s->qmp, fd)) {
        vb_set_error(errp, "%s: that is the monitor's own listening socket",
                     what);
        return false;
    }
    for (guint i = 0; i < s->exports->len; i++) {
        VbExport *e = g_ptr_array_index(s->exports, i);
        int other = vu_blk_export_get_listen_fd(e->exp);

        if (other >= 0 && vb_same_file(fd, other)) {
            vb_set_error(errp, "%s: that socket is already used by export "
                         "'%s'", what, e->id);
            return false;
        }
    }
    return true;
}

int vb_listen_fd_take(VbState *s, const char *str, bool keyval,
                      GError **errp)
{
    g_autofree char *what = NULL;
    gpointer value;
    int fd, fl;

    if (keyval) {
        char *end;
        long l;

        errno = 0;
        l = strtol(str, &end, 10);
        if (!*str || *end || errno || l < 0 || l > INT_MAX) {
            vb_set_error(errp, "addr.str='%s': give the number of an "
                         "inherited file descriptor", str);
            return -1;
        }
        fd = l;
        what = g_strdup_printf("addr.str=%d", fd);
        if (fd <= STDERR_FILENO) {
            vb_set_error(errp, "%s: fds 0 to 2 are stdin, stdout and "
                         "stderr, not a listening socket", what);
            return -1;
        }
    } else {
        if (!g_hash_table_lookup_extended(s->named_fds, str, NULL, &value)) {
            vb_set_error(errp, "File descriptor named '%s' has not been "
                         "found%s", str,
                         g_ascii_isdigit(str[0]) ?
                         " (over QMP, addr.str names an fd passed with "
                         "'getfd'; fd numbers work on the command line "
                         "only)" : "");
            return -1;
        }
        fd = GPOINTER_TO_INT(value);
        what = g_strdup_printf("addr.str='%s' (fd %d)", str, fd);
    }
    if (!vb_listen_fd_check(s, fd, what, errp)) {
        return -1;
    }
    /* A socket the service manager passed: one export only (also when
     * another one took it by path, with --export socket=). */
    if (keyval && s->sd && !systemd_sockets_take_fd(s->sd, fd, errp)) {
        return -1;
    }
    fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
        fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
        vb_set_error(errp, "%s: %s", what, g_strerror(errno));
        return -1;
    }
    if (!keyval) {
        /* Now the export's (as QEMU's monitor_get_fd()). */
        g_hash_table_remove(s->named_fds, str);
    }
    return fd;
}

VbExport *vb_export_create(VbState *s, const VbExportParams *p,
                           GError **errp)
{
    unsigned int nq = p->conf.num_queues;
    g_autofree AioContext **ctx = g_new0(AioContext *, nq ? nq : 1);
    VuBlkExportOptions o = {
        .socket_path = p->socket_path,
        .listen_fd = p->listen_fd,
        .socket_mode = p->socket_mode,
        .socket_chown = p->socket_chown,
        .socket_uid = p->socket_uid,
        .socket_gid = p->socket_gid,
        .blk_backend = p->node->blk,
        .conf = p->conf,
        .first_batch = p->first_batch,
        .main_ctx = s->main_ctx,
        .queue_ctx = ctx,
    };
    VbExport *e;
    VuBlkExport *exp;

    if (vb_export_id_in_use(s, p->id)) {
        vb_set_error(errp, "Block export id '%s' is already in use", p->id);
        return NULL;
    }
    if (p->node->nbd_exports) {
        vb_set_error(errp, "node '%s' is exported over NBD already; "
                     "vhost-blkd serves a node through one kind of export",
                     p->node->name);
        return NULL;
    }
    if (p->node->user) {
        vb_set_error(errp, "node '%s' is exported already (by '%s'); "
                     "vhost-blkd serves a node through one export",
                     p->node->name, p->node->user->id);
        return NULL;
    }
    for (guint i = 0; i < s->nodes->len; i++) {
        VbNode *other = g_ptr_array_index(s->nodes, i);

        /* A raw node and its file child share one BlockBackend. */
        if (other->blk == p->node->blk && other->user) {
            vb_set_error(errp, "node '%s' is the same image as node '%s' "
                         "(a raw node and its file child), exported "
                         "already by '%s'; vhost-blkd serves an image "
                         "through one export", p->node->name, other->name,
                         other->user->id);
            return NULL;
        }
    }
    for (unsigned int q = 0; q < nq; q++) {
        IOThread *t = p->iothread;

        if (!t) {
            t = s->pool[p->pool_index >= 0 ? (unsigned int)p->pool_index :
                        q % s->n_pool];
        }
        ctx[q] = iothread_get_aio_context(t);
    }
    exp = vu_blk_export_new(&o, errp);
    if (!exp) {
        return NULL;
    }
    e = g_new0(VbExport, 1);
    e->state = s;
    e->id = g_strdup(p->id);
    e->writable = !p->conf.readonly;
    e->node = p->node;
    e->exp = exp;
    p->node->user = e;
    g_ptr_array_add(s->exports, e);
    return e;
}

VuBlkExport *vb_export_get_vu(VbExport *e)
{
    return e->exp;
}

const char *vb_export_get_id(VbExport *e)
{
    return e->id;
}

const char *vb_export_get_node_name(VbExport *e)
{
    return e->node->name;
}

void vb_export_get_throttle_stats(VbExport *e, BlockThrottleStats *st)
{
    blk_throttle_get_stats(e->node->blk, st);
}

/* In the main thread, from the server: the deleted export's last request
 * completed.  Freed from a bottom half (we are inside its server). */
static void vb_export_idle(void *opaque)
{
    VbExport *e = opaque;

    e->idle = true;
    qemu_bh_schedule(e->state->reap_bh);
}

void vb_export_reap_bh(void *opaque)
{
    VbState *s = opaque;

    for (guint i = 0; i < s->exports->len;) {
        VbExport *e = g_ptr_array_index(s->exports, i);

        if (e->deleting && e->idle) {
            info_report("export '%s': its last request completed; deleted",
                        e->id);
            vb_export_delete(s, e);     /* does not wait: nothing left */
        } else {
            i++;
        }
    }
}

/* vb_state_cleanup(): before the nodes. */
void vb_exports_cleanup(VbState *s)
{
    vb_nbd_cleanup(s);
    /* Stop accepting everywhere first, then drain each export. */
    for (guint i = 0; i < s->exports->len; i++) {
        VbExport *e = g_ptr_array_index(s->exports, i);

        vu_blk_export_stop_listening(e->exp);
    }
    while (s->exports->len) {
        vb_export_delete(s, g_ptr_array_index(s->exports, 0));
    }
    g_ptr_array_free(s->exports, true);
}

/* block-export-del: see the top of this file.  True when deleted now,
 * false when it finishes in the background. */
static bool vb_export_delete_async(VbState *s, VbExport *e)
{
    vu_blk_export_stop_listening(e->exp);
    vu_blk_export_disconnect(e->exp);
    if (vu_blk_export_is_idle(e->exp)) {
        vb_export_delete(s, e);
        return true;
    }
    e->deleting = true;
    vu_blk_export_set_idle_notify(e->exp, vb_export_idle, e);
    info_report("export '%s': shutting down; it is deleted once its "
                "requests in flight complete", e->id);
    return false;
}

void vb_export_delete(VbState *s, VbExport *e)
{
    g_autoptr(JsonObject) data = json_object_new();

    g_ptr_array_remove(s->exports, e);
    vu_blk_export_set_idle_notify(e->exp, NULL, NULL);
    /* Ends the session, waits for its requests, removes the socket. */
    vu_blk_export_free(e->exp);
    e->node->user = NULL;
    json_object_set_string_member(data, "id", e->id);
    if (s->qmp) {
        qmp_server_emit_event(s->qmp, "BLOCK_EXPORT_DELETED", data);
    }
    g_free(e->id);
    g_free(e);
}

/* block-export-add type=vhost-user-blk: @a holds the arguments, "type"
 * read already. */
static VbExport *vb_vub_export_add(VbState *s, QmpArgs *a, bool keyval,
                                   GError **errp)
{
    static const char *const addr_types[] = {
        "inet", "unix", "vsock", "fd", NULL
    };
    g_auto(QmpArgs) addr = { 0 };
    const char *id = NULL, *node_name = NULL, *iothread = NULL;
    const char *path = NULL, *fdstr = NULL;
    bool writable = false, writethrough = false, fixed = false;
    bool abstract = false, tight = true;
    int atype;
    uint64_t lbs = 512;
    int64_t nq = 1;
    VbExportParams p = { .pool_index = -1 };
    VbNode *node;
    VbExport *e;
    int fd = -1;
    g_autofree char *fdname = NULL;

    if (!qmp_args_str(a, "id", true, &id, errp) ||
        !qmp_args_str(a, "node-name", true, &node_name, errp) ||
        !qmp_args_bool(a, "writable", &writable, errp) ||
        !qmp_args_bool(a, "writethrough", &writethrough, errp) ||
        !qmp_args_str(a, "iothread", false, &iothread, errp) ||
        !qmp_args_bool(a, "fixed-iothread", &fixed, errp) ||
        !qmp_args_object(a, "addr", true, &addr, NULL, errp) ||
        !qmp_args_enum(&addr, "type", addr_types, true, &atype, errp)) {
        return NULL;
    }
    if (!strcmp(addr_types[atype], "unix")) {
        if (!qmp_args_str(&addr, "path", true, &path, errp) ||
            !qmp_args_bool(&addr, "abstract", &abstract, errp) ||
            !qmp_args_bool(&addr, "tight", &tight, errp)) {
            return NULL;
        }
    } else if (!strcmp(addr_types[atype], "fd")) {
        if (!qmp_args_str(&addr, "str", true, &fdstr, errp)) {
            return NULL;
        }
    } else {
        vb_set_error(errp, "Only socket address types 'unix' and 'fd' are "
                     "supported");
        return NULL;
    }
    if (!qmp_args_check_done(&addr, errp) ||
        !qmp_args_size(a, "logical-block-size", false, &lbs, NULL, errp) ||
        !qmp_args_int(a, "num-queues", false, &nq, NULL, errp) ||
        !qmp_args_check_done(a, errp)) {
        return NULL;
    }
    if (abstract) {
        vb_set_error(errp, "addr.abstract=on is not supported: give a "
                     "socket path");
        return NULL;
    }
    if (writethrough) {
        vb_set_error(errp, "writethrough=on is not supported: the guest "
                     "driver chooses the cache mode (virtio-blk "
                     "CONFIG_WCE), and FUA writes are honoured");
        return NULL;
    }
    if (lbs < 512 || lbs > 32768 || (lbs & (lbs - 1))) {
        vb_set_error(errp, "Property %s.logical-block-size doesn't take "
                     "value '%" PRIu64 "', it's not a power of 2", id, lbs);
        return NULL;
    }
    if (lbs != 512 && lbs != 4096) {
        vb_set_error(errp, "logical-block-size=%" PRIu64 " is not "
                     "supported: use 512 or 4096", lbs);
        return NULL;
    }
    if (nq < 1 || nq > 64) {
        vb_set_error(errp, "num-queues=%" PRId64 ": use 1 to 64", nq);
        return NULL;
    }
    node = vb_node_find(s, node_name);
    if (!node) {
        vb_set_error(errp, "Cannot find device='' nor node-name='%s'",
                     node_name);
        return NULL;
    }
    if (writable && node->readonly) {
        vb_set_error(errp, "Block node is read-only");
        return NULL;
    }
    if (iothread) {
        VbIOThreadObj *t = vb_iothread_find(s, iothread);

        if (!t) {
            vb_set_error(errp, "iothread \"%s\" not found", iothread);
            return NULL;
        }
        p.iothread = t->iothread;
    }
    if (vb_export_find(s, id)) {
        vb_set_error(errp, "Block export id '%s' is already in use", id);
        return NULL;
    }
    if (fdstr) {
        fd = vb_listen_fd_take(s, fdstr, keyval, errp);
        if (fd < 0) {
            return NULL;
        }
    }
    p.id = id;
    p.node = node;
    if (fdstr) {
        fdname = g_strdup_printf("fd:%s", fdstr);    /* for log lines */
    }
    p.socket_path = path ? path : fdname;
    p.listen_fd = fd;
    p.conf.logical_block_size = lbs;
    p.conf.num_queues = nq;
    p.conf.queue_size = 128;
    p.conf.readonly = !writable;
    p.conf.discard = node->discard != BLOCK_DISCARD_OFF;
    p.conf.discard_ignore = node->discard == BLOCK_DISCARD_IGNORE;
    p.conf.write_zeroes = writable;
    g_strlcpy(p.conf.serial, id, sizeof(p.conf.serial));
    e = vb_export_create(s, &p, errp);
    if (!e && fd >= 0) {
        close(fd);
    }
    return e;
}

static bool vb_vub_export_add_type(VbState *s, QmpArgs *a, bool keyval,
                                   GError **errp)
{
    return vb_vub_export_add(s, a, keyval, errp) != NULL;
}

/* block-export-del of a vhost-user-blk export: see the top of this file. */
static bool vb_vub_export_del(VbState *s, const char *id, bool hard,
                              GError **errp, bool *found)
{
    VbExport *e = vb_export_find(s, id);

    *found = e != NULL;
    if (!e) {
        return false;
    }
    if (e->deleting) {
        vb_set_error(errp, "Export '%s' is already shutting down: it is "
                     "deleted (BLOCK_EXPORT_DELETED) once its requests in "
                     "flight complete", id);
        return false;
    }
    if (!hard && vu_blk_export_is_connected(e->exp)) {
        vb_set_error(errp, "export '%s' still in use (use mode='hard' to "
                     "disconnect the front-end)", id);
        return false;
    }
    vb_export_delete_async(s, e);
    return true;
}

void vb_export_info_add(JsonArray *arr, const char *type, const char *id,
                        const char *node_name, bool shutting_down,
                        bool writable)
{
    JsonObject *o = json_object_new();

    json_object_set_string_member(o, "type", type);
    json_object_set_string_member(o, "id", id);
    json_object_set_string_member(o, "node-name", node_name);
    json_object_set_boolean_member(o, "shutting-down", shutting_down);
    /* Not in QEMU's BlockExportInfo: an export without writable=on is
     * read-only whatever its node says. */
    json_object_set_boolean_member(o, "writable", writable);
    json_array_add_object_element(arr, o);
}

static void vb_vub_query_exports(VbState *s, JsonArray *arr)
{
    for (guint i = 0; i < s->exports->len; i++) {
        VbExport *e = g_ptr_array_index(s->exports, i);

        vb_export_info_add(arr, "vhost-user-blk", e->id, e->node->name,
                           e->deleting, e->writable);
    }
}

static bool vb_vub_has_export(VbState *s, const char *id)
{
    return vb_export_find(s, id) != NULL;
}

const VbExportType vb_export_type_vhost_user_blk = {
    .name = "vhost-user-blk",
    .add = vb_vub_export_add_type,
    .del = vb_vub_export_del,
    .query = vb_vub_query_exports,
    .has = vb_vub_has_export,
};

/* qemu-storage-daemon's types vhost-blkd knows by name only, so that
 * block-export-add says they are not supported rather than unknown. */
static const VbExportType vb_export_type_fuse = { .name = "fuse" };
static const VbExportType vb_export_type_vduse_blk = {
    .name = "vduse-blk",
};

/*
 * The export types, by the name block-export-add's and --export's type=
 * gives.  Their order is the order of query-block-exports and the order
 * in which block-export-del looks an id up.
 */
static const VbExportType *const vb_export_types[] = {
    &vb_export_type_vhost_user_blk,
    &vb_export_type_nbd,
    &vb_export_type_fuse,
    &vb_export_type_vduse_blk,
};

bool vb_export_id_in_use(VbState *s, const char *id)
{
    for (size_t i = 0; i < G_N_ELEMENTS(vb_export_types); i++) {
        const VbExportType *t = vb_export_types[i];

        if (t->has && t->has(s, id)) {
            return true;
        }
    }
    return false;
}

bool vb_block_export_add_any(VbState *s, JsonObject *args, bool keyval,
                             GError **errp)
{
    const char *names[G_N_ELEMENTS(vb_export_types) + 1] = { NULL };
    g_auto(QmpArgs) a = { 0 };
    const VbExportType *t;
    int type;

    for (size_t i = 0; i < G_N_ELEMENTS(vb_export_types); i++) {
        names[i] = vb_export_types[i]->name;
    }
    qmp_args_init(&a, args, keyval, NULL);
    if (!qmp_args_enum(&a, "type", names, true, &type, errp)) {
        return false;
    }
    t = vb_export_types[type];
    if (!t->add) {
        vb_set_error(errp, "export type '%s' is not supported: vhost-blkd "
                     "exports only vhost-user-blk", t->name);
        return false;
    }
    return t->add(s, &a, keyval, errp);
}

static JsonNode *vb_qmp_block_export_add(void *opaque, JsonObject *args,
                                         GError **errp)
{
    return vb_block_export_add_any(opaque, args, false, errp) ?
           vb_empty() : NULL;
}

static JsonNode *vb_qmp_block_export_del(void *opaque, JsonObject *args,
                                         GError **errp)
{
    static const char *const modes[] = { "safe", "hard", NULL };
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *id = NULL;
    int mode = -1;
    bool hard;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "id", true, &id, errp) ||
        !qmp_args_enum(&a, "mode", modes, false, &mode, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    /* Without mode=, safe. */
    hard = mode >= 0 && !strcmp(modes[mode], "hard");
    for (size_t i = 0; i < G_N_ELEMENTS(vb_export_types); i++) {
        const VbExportType *t = vb_export_types[i];
        bool found = false;

        if (!t->del) {
            continue;
        }
        if (t->del(s, id, hard, errp, &found)) {
            return vb_empty();
        }
        if (found) {
            return NULL;
        }
    }
    vb_set_error(errp, "Export '%s' is not found", id);
    return NULL;
}

static JsonNode *vb_qmp_query_block_exports(void *opaque, JsonObject *args,
                                            GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    JsonArray *arr;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    arr = json_array_new();
    for (size_t i = 0; i < G_N_ELEMENTS(vb_export_types); i++) {
        if (vb_export_types[i]->query) {
            vb_export_types[i]->query(s, arr);
        }
    }
    return vb_node_take_array(arr);
}

static const QmpCommand vb_export_commands[] = {
    { "block-export-add", vb_qmp_block_export_add },
    { "block-export-del", vb_qmp_block_export_del },
    { "query-block-exports", vb_qmp_query_block_exports },
};

void vb_export_register(GArray *table)
{
    g_array_append_vals(table, vb_export_commands,
                        G_N_ELEMENTS(vb_export_commands));
}
