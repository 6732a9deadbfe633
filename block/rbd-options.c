/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The rbd driver's part that is built into the program: the driver itself
 * is a module (block-rbd.so, block/rbd.c), loaded when a node first names
 * it, but its options are read before that, and the error of a module that
 * cannot be loaded names the node (also its filename in
 * query-named-block-nodes, QEMU's pseudo-protocol form).  Registered with the registry
 * (block/driver.c) as a BlockModuleDriver.  Main thread, except
 * blk_rbd_describe() (any thread).
 */
#include "qemu/osdep.h"
#include "block/block_int.h"
#include "qemu/qmp-args.h"

char *blk_rbd_describe(const BlockRbdOptions *o)
{
    return g_strdup_printf("rbd:%s/%s%s%s%s%s", o->pool ? o->pool : "?",
                           o->namespace_ ? o->namespace_ : "",
                           o->namespace_ ? "/" : "",
                           o->image ? o->image : "?",
                           o->snapshot ? "@" : "",
                           o->snapshot ? o->snapshot : "");
}

static char *rbd_describe(const BlockOptions *opts)
{
    return blk_rbd_describe(&opts->rbd);
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
    BlockRbdOptions *o = &opts->rbd;
    const char *secret = NULL, *completion = NULL;
    int64_t timeout = 0;

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
    if (completion && !blk_rbd_completion_parse(completion, &o->completion)) {
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
        key = p->secret(p->opaque, secret, errp);
        if (!key) {
            return false;
        }
        g_ptr_array_add(p->strings, key);
        o->key = key;
    }
    opts->readonly = opts->readonly || o->snapshot;  /* served read-only */
    return true;
}

static const BlockModuleDriver rbd_module = {
    .name = "rbd",
    .open_any_thread = true,
    .parse = rbd_parse_options,
    .describe = rbd_describe,
};
BLOCK_MODULE_DRIVER_REGISTER(rbd_module)
