/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The rbd driver's part that is built into the program: the driver itself
 * is a module (block-rbd.so, block/rbd.c), loaded when a node first names
 * it, but its options are read before that, and the error of a module
 * that cannot be loaded names the node (QEMU's pseudo-protocol name, also
 * its filename in query-named-block-nodes).  Registered with the registry
 * (block/driver.c) as a BlockModuleDriver.  Main thread, except
 * blk_rbd_describe() (any thread).
 */
#include "qemu/osdep.h"
#include "block/block_int.h"
#include "block/rbd.h"
#include "qemu/qmp-args.h"

char *blk_rbd_describe(const BlockRbdOptions *o)
{
    if (!o) {
        return g_strdup("rbd:?/?");
    }
    return g_strdup_printf("rbd:%s/%s%s%s%s%s", o->pool ? o->pool : "?",
                           o->namespace_ ? o->namespace_ : "",
                           o->namespace_ ? "/" : "",
                           o->image ? o->image : "?",
                           o->snapshot ? "@" : "",
                           o->snapshot ? o->snapshot : "");
}

/* "callback" or "poll": false if @s is neither. */
static bool rbd_completion_parse(const char *s, BlockRbdCompletion *out)
{
    if (!strcmp(s, "callback")) {
        *out = BLOCK_RBD_COMPLETION_CALLBACK;
    } else if (!strcmp(s, "poll")) {
        *out = BLOCK_RBD_COMPLETION_POLL;
    } else {
        return false;
    }
    return true;
}

static char *rbd_describe(const BlockOptions *opts)
{
    return blk_rbd_describe(opts->driver_opts);
}

/* server: the monitors, [{host, port}], as librados's mon_host. */
static bool rbd_parse_servers(QmpArgs *a, BlockOptsParse *p,
                              const char **out, GError **errp)
{
    g_autoptr(GPtrArray) list = NULL;
    GString *mons;

    if (!qmp_args_list(a, "server", &list, errp)) {
        return false;
    }
    if (!list) {
        return true;
    }
    mons = g_string_new(NULL);
    for (guint i = 0; i < list->len; i++) {
        JsonNode *e = g_ptr_array_index(list, i);
        g_auto(QmpArgs) srv = { 0 };
        const char *host = NULL, *port = NULL;

        if (!JSON_NODE_HOLDS_OBJECT(e)) {
            g_set_error(errp, VB_ERROR, 0, "server.%u: expected an object "
                        "with host and port", i);
            g_string_free(mons, true);
            return false;
        }
        qmp_args_init(&srv, json_node_get_object(e), true, NULL);
        if (!qmp_args_str(&srv, "host", true, &host, errp) ||
            !qmp_args_str(&srv, "port", false, &port, errp) ||
            !qmp_args_check_done(&srv, errp)) {
            g_string_free(mons, true);
            return false;
        }
        g_string_append_printf(mons, "%s%s%s%s%s%s", mons->len ? "," : "",
                               strchr(host, ':') ? "[" : "", host,
                               strchr(host, ':') ? "]" : "",
                               port ? ":" : "", port ? port : "");
    }
    *out = mons->len ? mons->str : NULL;
    g_ptr_array_add(p->strings, g_string_free(mons, false));
    return true;
}

/* auth-client-required: [cephx|none, ...]. */
static bool rbd_parse_auth(QmpArgs *a, BlockOptsParse *p, const char **out,
                           GError **errp)
{
    g_autoptr(GPtrArray) list = NULL;
    GString *auth;

    if (!qmp_args_list(a, "auth-client-required", &list, errp)) {
        return false;
    }
    if (!list) {
        return true;
    }
    auth = g_string_new(NULL);
    for (guint i = 0; i < list->len; i++) {
        const char *m = qmp_node_str(g_ptr_array_index(list, i));

        if (!m || (strcmp(m, "cephx") && strcmp(m, "none"))) {
            g_set_error(errp, VB_ERROR, 0, "auth-client-required: use "
                        "cephx and/or none");
            g_string_free(auth, true);
            return false;
        }
        g_string_append_printf(auth, "%s%s", auth->len ? "," : "", m);
    }
    *out = auth->len ? auth->str : NULL;
    g_ptr_array_add(p->strings, g_string_free(auth, false));
    return true;
}

/* rbd=POOL[/NAMESPACE]/IMAGE[@SNAP], every part non-empty, into @o
 * (strings added to @p). */
static bool rbd_parse_spec(const char *val, BlockRbdOptions *o,
                           BlockOptsParse *p)
{
    char *v = g_strdup(val);
    char *at = strchr(v, '@');
    g_auto(GStrv) parts = NULL;
    guint n;

    g_ptr_array_add(p->strings, v);
    if (at) {
        *at = '\0';
        if (!at[1] || strchr(at + 1, '/')) {
            return false;
        }
    }
    parts = g_strsplit(v, "/", -1);
    n = g_strv_length(parts);
    if (n < 2 || n > 3) {
        return false;
    }
    for (guint i = 0; i < n; i++) {
        if (!*parts[i]) {
            return false;
        }
    }
    for (guint i = 0; i < n; i++) {
        g_ptr_array_add(p->strings, g_strdup(parts[i]));
    }
    o->pool = g_ptr_array_index(p->strings, p->strings->len - n);
    o->namespace_ = n == 3 ? g_ptr_array_index(p->strings,
                                               p->strings->len - 2) : NULL;
    o->image = g_ptr_array_index(p->strings, p->strings->len - 1);
    o->snapshot = at ? at + 1 : NULL;
    return true;
}

/*
 * vhost-blkd's --export syntax: rbd=POOL[/NAMESPACE]/IMAGE[@SNAP],
 * ceph-conf=FILE, ceph-id=ID, ceph-keyfile=PATH, ceph-connect-timeout=S,
 * ceph-share=NAME, rbd-completion=callback|poll.
 */
static bool rbd_parse_export(BlockOptions *opts, BlockRbdOptions *o,
                             QmpArgs *a, BlockOptsParse *p, GError **errp)
{
    static const struct {
        const char *key, *hint;
    } keys[] = {
        { "ceph-conf", "give the path of a ceph.conf" },
        { "ceph-id", "give a client id without 'client.', e.g. admin" },
        { "ceph-keyfile", "give the path of a file holding the key" },
        { "ceph-share", "give a name" },
    };
    const char **dst[] = { &o->conf, &o->user, &o->keyfile, &o->share };
    const char *spec = NULL, *timeout = NULL, *completion = NULL;
    int64_t t = 0;

    for (size_t i = 0; i < G_N_ELEMENTS(keys); i++) {
        if (!qmp_args_str(a, keys[i].key, false, dst[i], errp)) {
            return false;
        }
        if (*dst[i] && !**dst[i]) {
            g_set_error(errp, VB_ERROR, 0, "bad value '' for %s: %s",
                        keys[i].key, keys[i].hint);
            return false;
        }
    }
    if (!qmp_args_str(a, "rbd", false, &spec, errp) ||
        !qmp_args_str(a, "ceph-connect-timeout", false, &timeout, errp) ||
        !qmp_args_str(a, "rbd-completion", false, &completion, errp)) {
        return false;
    }
    if (!spec) {
        g_set_error(errp, VB_ERROR, 0, "driver=rbd needs "
                    "rbd=POOL/IMAGE[@SNAPSHOT]");
        return false;
    }
    if (!rbd_parse_spec(spec, o, p)) {
        g_set_error(errp, VB_ERROR, 0, "bad value '%s' for rbd: use "
                    "POOL/IMAGE, POOL/NAMESPACE/IMAGE, optionally with "
                    "@SNAPSHOT", spec);
        return false;
    }
    if (timeout) {
        GError *err = NULL;

        if (!qmp_args_int(a, "ceph-connect-timeout", true, &t,
                          NULL, &err) || t < 1 || t > 3600) {
            g_clear_error(&err);
            g_set_error(errp, VB_ERROR, 0, "bad value '%s' for "
                        "ceph-connect-timeout: use 1 to 3600 seconds",
                        timeout);
            return false;
        }
        o->connect_timeout = t;
    }
    if (completion && !rbd_completion_parse(completion, &o->completion)) {
        g_set_error(errp, VB_ERROR, 0, "bad value '%s' for rbd-completion: "
                    "use callback or poll", completion);
        return false;
    }
    opts->readonly = opts->readonly || o->snapshot;  /* served read-only */
    p->image = o->image;
    return true;
}

/* --export: the key file is readable (the QEMU syntaxes name a secret
 * object instead). */
static bool rbd_check_options(const BlockOptions *opts, BlockOptsParse *p,
                              GError **errp)
{
    const BlockRbdOptions *o = opts->driver_opts;
    const char *kf = o ? o->keyfile : NULL;

    if (p->export_syntax && kf && access(kf, R_OK) < 0) {
        g_set_error(errp, VB_ERROR, 0, "ceph-keyfile=%s: %s", kf,
                    g_strerror(errno));
        return false;
    }
    return true;
}

/*
 * The QEMU syntaxes: QEMU's keys pool, image, namespace, snapshot, conf,
 * user, key-secret, server (the monitors: [{host, port}]) and
 * auth-client-required; ours x-connect-timeout (seconds),
 * x-shared-connection (a name: nodes giving it share one connection) and
 * x-completion (callback or poll: see block/rbd.c).
 */
static bool rbd_parse_options(BlockOptions *opts, QmpArgs *a,
                              BlockOptsParse *p, GError **errp)
{
    BlockRbdOptions *o = blk_options_parse_keep(p,
                                                g_new0(BlockRbdOptions, 1));
    const char *secret = NULL, *completion = NULL;
    int64_t timeout = 0;

    opts->driver_opts = o;
    if (p->export_syntax) {
        return rbd_parse_export(opts, o, a, p, errp);
    }
    if (!qmp_args_str(a, "pool", true, &o->pool, errp) ||
        !qmp_args_str(a, "image", true, &o->image, errp) ||
        !qmp_args_str(a, "namespace", false, &o->namespace_, errp) ||
        !qmp_args_str(a, "snapshot", false, &o->snapshot, errp) ||
        !qmp_args_str(a, "conf", false, &o->conf, errp) ||
        !qmp_args_str(a, "user", false, &o->user, errp) ||
        !qmp_args_str(a, "key-secret", false, &secret, errp) ||
        !qmp_args_str(a, "x-shared-connection", false, &o->share, errp) ||
        !qmp_args_str(a, "x-completion", false, &completion, errp) ||
        !qmp_args_int(a, "x-connect-timeout", false, &timeout, NULL, errp) ||
        !rbd_parse_servers(a, p, &o->mon_host, errp) ||
        !rbd_parse_auth(a, p, &o->auth_client_required, errp)) {
        return false;
    }
    if (completion && !rbd_completion_parse(completion, &o->completion)) {
        g_set_error(errp, VB_ERROR, 0, "x-completion=%s: use callback or "
                    "poll", completion);
        return false;
    }
    if (timeout < 0 || timeout > 3600) {
        g_set_error(errp, VB_ERROR, 0, "x-connect-timeout=%" PRId64 ": use "
                    "1 to 3600 seconds (0: the default, %u)", timeout,
                    BLOCK_RBD_DEFAULT_CONNECT_TIMEOUT);
        return false;
    }
    o->connect_timeout = timeout;
    if (secret) {
        char *key;

        if (!p->secret) {
            g_set_error(errp, VB_ERROR, 0, "key-secret=%s: no secrets can "
                        "be named here", secret);
            return false;
        }
        if (p->key) {
            g_set_error(errp, VB_ERROR, 0, "key-secret=%s: one key per "
                        "node", secret);
            return false;
        }
        key = p->secret(p->opaque, secret, &p->key_size, errp);
        if (!key) {
            return false;
        }
        p->key = key;
        o->key = key;
    }
    opts->readonly = opts->readonly || o->snapshot;  /* served read-only */
    p->image = o->image;
    return true;
}

static const BlockModuleDriver rbd_module = {
    .name = "rbd",
    .export_key = "rbd",
    .open_any_thread = true,
    .parse = rbd_parse_options,
    .check = rbd_check_options,
    .describe = rbd_describe,
};
BLOCK_MODULE_DRIVER_REGISTER(rbd_module)
