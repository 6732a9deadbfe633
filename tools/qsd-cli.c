/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * qemu-storage-daemon's command-line options in vhost-blkd (see
 * include/tools/qsd-cli.h).
 */
#include "qemu/osdep.h"
#include "nbd/nbd-monitor.h"
#include "tools/qsd-cli.h"
#include "monitor/objects.h"
#include "monitor/blockdev.h"
#include "monitor/export.h"

typedef struct QsdOpt {
    QsdOptKind kind;
    char *arg;
    JsonObject *obj;
    bool keyval;                /* from keyval (strings), not JSON (typed) */
    bool applied;               /* an object created already */
} QsdOpt;

static void qsd_opt_free(QsdOpt *o)
{
    g_free(o->arg);
    if (o->obj) {
        json_object_unref(o->obj);
    }
    g_free(o);
}

static void qsd_chardev_free(QsdChardev *c)
{
    g_free(c->id);
    g_free(c->path);
    g_free(c);
}

static void qsd_monitor_free(QsdMonitorOpts *m)
{
    g_free(m->chardev);
    g_free(m);
}

void qsd_cli_init(QsdCli *cli)
{
    cli->opts = g_ptr_array_new_with_free_func((GDestroyNotify)qsd_opt_free);
    cli->chardevs =
        g_ptr_array_new_with_free_func((GDestroyNotify)qsd_chardev_free);
    cli->monitors =
        g_ptr_array_new_with_free_func((GDestroyNotify)qsd_monitor_free);
    cli->n_exports = 0;
}

void qsd_cli_cleanup(QsdCli *cli)
{
    g_clear_pointer(&cli->opts, g_ptr_array_unref);
    g_clear_pointer(&cli->chardevs, g_ptr_array_unref);
    g_clear_pointer(&cli->monitors, g_ptr_array_unref);
}

const char *qsd_opt_name(QsdOptKind kind)
{
    switch (kind) {
    case QSD_OPT_BLOCKDEV:
        return "--blockdev";
    case QSD_OPT_OBJECT:
        return "--object";
    case QSD_OPT_EXPORT:
        return "--export";
    case QSD_OPT_CHARDEV:
        return "--chardev";
    case QSD_OPT_MONITOR:
        return "--monitor";
    case QSD_OPT_NBD_SERVER:
        return "--nbd-server";
    }
    g_assert_not_reached();
}

/* qemu-storage-daemon takes an option's value as JSON when it starts
 * with '{' (what libvirt generates), else as keyval. */
static bool qsd_arg_is_json(const char *arg)
{
    while (g_ascii_isspace(*arg)) {
        arg++;
    }
    return *arg == '{';
}

/* @arg as a JSON object: the same tree keyval_parse() builds, but with
 * typed values (true, 4096) instead of strings. */
static JsonObject *qsd_parse_json(const char *arg, GError **errp)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    JsonNode *root;
    GError *err = NULL;

    if (!json_parser_load_from_data(parser, arg, -1, &err)) {
        /* JSON-GLib quotes the bad token, which may be a secret: keep
         * where it is ("<data>:1:42: Parse error: invalid string ..."). */
        const char *quote = strchr(err->message, '"');
        int shown = quote ? (int)(quote - err->message) : -1;

        g_set_error(errp, VB_ERROR, 0, "not valid JSON: %.*s%s", shown,
                    err->message, quote ? "..." : "");
        g_error_free(err);
        return NULL;
    }
    root = json_parser_get_root(parser);
    if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
        g_set_error(errp, VB_ERROR, 0, "JSON must be an object "
                    "('{\"key\": value, ...}')");
        return NULL;
    }
    return json_object_ref(json_node_get_object(root));
}

/*
 * Whether a key's value is a secret that must never reach a message or
 * a log: a secret object's data= (refused, but the operator typed it),
 * and any key, password or passphrase, also dotted (server.password).
 * key-secret, keyid and ceph-keyfile name a secret; they are not one.
 */
static bool qsd_key_is_secret(const char *key, size_t len)
{
    static const char *const names[] = {
        "data", "key", "password", "passphrase", "secret", "token", NULL
    };
    static const char *const suffixes[] = {
        "-key", "-password", "-passphrase", NULL
    };
    const char *dot = g_strrstr_len(key, len, ".");

    if (dot) {
        len -= dot + 1 - key;
        key = dot + 1;
    }
    for (int i = 0; names[i]; i++) {
        if (len == strlen(names[i]) && !g_ascii_strncasecmp(key, names[i],
                                                           len)) {
            return true;
        }
    }
    for (int i = 0; suffixes[i]; i++) {
        size_t n = strlen(suffixes[i]);

        if (len > n && !g_ascii_strncasecmp(key + len - n, suffixes[i], n)) {
            return true;
        }
    }
    return false;
}

/* @node with the value of every secret member, at any depth, replaced. */
static void qsd_redact_json(JsonNode *node)
{
    JsonObject *o;
    g_autoptr(GList) members = NULL;

    if (JSON_NODE_HOLDS_ARRAY(node)) {
        JsonArray *a = json_node_get_array(node);

        for (guint i = 0; i < json_array_get_length(a); i++) {
            qsd_redact_json(json_array_get_element(a, i));
        }
        return;
    }
    if (!JSON_NODE_HOLDS_OBJECT(node)) {
        return;
    }
    o = json_node_get_object(node);
    members = json_object_get_members(o);
    for (GList *l = members; l; l = l->next) {
        const char *name = l->data;

        if (qsd_key_is_secret(name, strlen(name))) {
            json_object_set_string_member(o, name, QSD_REDACTED);
        } else {
            qsd_redact_json(json_object_get_member(o, name));
        }
    }
}

char *qsd_cli_redact(const char *arg)
{
    GString *out;
    const char *p = arg;

    if (qsd_arg_is_json(arg)) {
        g_autoptr(JsonParser) parser = json_parser_new();
        g_autoptr(JsonGenerator) gen = NULL;
        JsonNode *root;

        if (!json_parser_load_from_data(parser, arg, -1, NULL) ||
            !(root = json_parser_get_root(parser))) {
            /* Not JSON: no telling which part is a secret. */
            return g_strdup("{...} (JSON, not shown: it may hold a "
                            "secret)");
        }
        qsd_redact_json(root);
        gen = json_generator_new();
        json_generator_set_root(gen, root);
        return json_generator_to_data(gen, NULL);
    }
    /* keyval_parse()'s grammar: KEY[=VALUE] separated by ',', ",," being
     * a comma inside a value; whatever the input, well-formed or not. */
    out = g_string_new(NULL);
    while (*p) {
        const char *key = p;
        size_t klen;

        while (*p && *p != '=' && *p != ',') {
            p++;
        }
        klen = p - key;
        g_string_append_len(out, key, klen);
        if (*p == '=') {
            const char *val = ++p;
            const char *cut = qsd_key_is_secret(key, klen) ? val : NULL;

            while (*p && !(*p == ',' && p[1] != ',')) {
                if (*p == ',' && !cut) {
                    /* "a=x,,data=KEY" is one value to keyval, but a
                     * mistyped comma must not show the key either. */
                    const char *k = p + 2;
                    size_t n = strcspn(k, "=,");

                    if (k[n] == '=' && qsd_key_is_secret(k, n)) {
                        cut = k + n + 1;
                    }
                }
                p += *p == ',' ? 2 : 1;
            }
            g_string_append_c(out, '=');
            if (cut) {
                g_string_append_len(out, val, cut - val);
                g_string_append(out, QSD_REDACTED);
            } else {
                g_string_append_len(out, val, p - val);
            }
        }
        if (*p == ',') {
            g_string_append_c(out, *p++);
        }
    }
    return g_string_free(out, false);
}

/*
 * @err's message with every copy of @arg in it replaced by @shown: parse
 * errors quote the whole argument ("Expected parameter after ',' in
 * '...'").
 */
static void qsd_error_redact(GError *err, const char *arg, const char *shown)
{
    g_auto(GStrv) parts = NULL;

    if (!err || !*arg || !strstr(err->message, arg)) {
        return;
    }
    parts = g_strsplit(err->message, arg, -1);
    g_free(err->message);
    err->message = g_strjoinv(shown, parts);
}

bool qsd_cli_export_is_qsd(const char *arg)
{
    const char *comma = strchr(arg, ',');
    size_t first = comma ? (size_t)(comma - arg) : strlen(arg);

    if (qsd_arg_is_json(arg)) {
        return true;
    }

    /* "vhost-user-blk,id=..." (implied type) or any type= key. */
    return !memchr(arg, '=', first) || g_str_has_prefix(arg, "type=") ||
           strstr(arg, ",type=") != NULL;
}

static QsdChardev *qsd_chardev_find(QsdCli *cli, const char *id)
{
    for (guint i = 0; i < cli->chardevs->len; i++) {
        QsdChardev *c = g_ptr_array_index(cli->chardevs, i);

        if (!strcmp(c->id, id)) {
            return c;
        }
    }
    return NULL;
}

/* --chardev socket,id=ID,path=PATH,server=on,wait=off */
static bool qsd_parse_chardev(QsdCli *cli, JsonObject *obj, bool keyval,
                              GError **errp)
{
    static const char *const backends[] = { "socket", NULL };
    g_auto(QmpArgs) a = { 0 };
    const char *id = NULL, *path = NULL;
    bool server = false, wait = true;
    int backend;
    JsonNode *b = json_object_get_member(obj, "backend");
    QsdChardev *c;

    if (b && JSON_NODE_HOLDS_VALUE(b) &&
        json_node_get_value_type(b) == G_TYPE_STRING &&
        strcmp(json_node_get_string(b), "socket")) {
        g_set_error(errp, VB_ERROR, 0, "chardev backend '%s' is not "
                    "supported: the monitor takes 'socket' (a unix socket "
                    "path with server=on)", json_node_get_string(b));
        return false;
    }
    qmp_args_init(&a, obj, keyval, NULL);
    if (!qmp_args_enum(&a, "backend", backends, true, &backend, errp) ||
        !qmp_args_str(&a, "id", true, &id, errp) ||
        !qmp_args_str(&a, "path", true, &path, errp) ||
        !qmp_args_bool(&a, "server", &server, errp) ||
        !qmp_args_bool(&a, "wait", &wait, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return false;
    }
    if (!server) {
        g_set_error(errp, VB_ERROR, 0, "chardev '%s': server=on is needed "
                    "(vhost-blkd listens; it does not connect out)", id);
        return false;
    }
    if (qsd_chardev_find(cli, id)) {
        g_set_error(errp, VB_ERROR, 0, "duplicate chardev id '%s'", id);
        return false;
    }
    /* wait=on (QEMU's default) would block startup until a client comes;
     * vhost-blkd never waits, which is what wait=off asks for. */
    c = g_new0(QsdChardev, 1);
    c->id = g_strdup(id);
    c->path = g_strdup(path);
    g_ptr_array_add(cli->chardevs, c);
    return true;
}

/* --monitor [chardev=]ID[,mode=control][,pretty=on|off][,id=...] */
static bool qsd_parse_monitor(QsdCli *cli, JsonObject *obj, bool keyval,
                              GError **errp)
{
    static const char *const modes[] = { "control", "readline", NULL };
    g_auto(QmpArgs) a = { 0 };
    const char *chardev = NULL, *id = NULL;
    bool pretty = false;
    int mode = 0;
    QsdMonitorOpts *m;

    qmp_args_init(&a, obj, keyval, NULL);
    if (!qmp_args_str(&a, "chardev", true, &chardev, errp) ||
        !qmp_args_enum(&a, "mode", modes, false, &mode, errp) ||
        !qmp_args_bool(&a, "pretty", &pretty, errp) ||
        !qmp_args_str(&a, "id", false, &id, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return false;
    }
    if (mode != 0) {
        g_set_error(errp, VB_ERROR, 0, "mode=readline (the human monitor) "
                    "is not supported: use mode=control (QMP)");
        return false;
    }
    m = g_new0(QsdMonitorOpts, 1);
    m->chardev = g_strdup(chardev);
    m->pretty = pretty;
    g_ptr_array_add(cli->monitors, m);
    return true;
}

bool qsd_cli_add(QsdCli *cli, QsdOptKind kind, const char *arg,
                 GError **errp)
{
    static const char *const implied[] = {
        [QSD_OPT_BLOCKDEV] = "driver",
        [QSD_OPT_OBJECT] = "qom-type",
        [QSD_OPT_EXPORT] = "type",
        [QSD_OPT_CHARDEV] = "backend",
        [QSD_OPT_MONITOR] = "chardev",
        [QSD_OPT_NBD_SERVER] = NULL,
    };
    g_autoptr(JsonObject) obj = NULL;
    bool keyval = !qsd_arg_is_json(arg);
    QsdOpt *o;

    GError *err = NULL;

    if (keyval) {
        obj = keyval_parse(arg, implied[kind], kind == QSD_OPT_CHARDEV,
                           &err);
    } else {
        obj = qsd_parse_json(arg, &err);
    }
    if (!obj) {
        g_autofree char *shown = qsd_cli_redact(arg);

        qsd_error_redact(err, arg, shown);
        g_propagate_error(errp, err);
        return false;
    }
    switch (kind) {
    case QSD_OPT_CHARDEV:
        return qsd_parse_chardev(cli, obj, keyval, errp);
    case QSD_OPT_MONITOR:
        return qsd_parse_monitor(cli, obj, keyval, errp);
    case QSD_OPT_EXPORT:
        cli->n_exports++;
        break;
    default:
        break;
    }
    o = g_new0(QsdOpt, 1);
    o->kind = kind;
    /* Only for messages: never the secret itself. */
    o->arg = qsd_cli_redact(arg);
    o->obj = g_steal_pointer(&obj);
    o->keyval = keyval;
    g_ptr_array_add(cli->opts, o);
    return true;
}

bool qsd_cli_check(QsdCli *cli, GError **errp)
{
    for (guint i = 0; i < cli->monitors->len; i++) {
        QsdMonitorOpts *m = g_ptr_array_index(cli->monitors, i);

        if (!qsd_chardev_find(cli, m->chardev)) {
            g_set_error(errp, VB_ERROR, 0, "--monitor chardev=%s: no "
                        "--chardev socket,id=%s,... was given", m->chardev,
                        m->chardev);
            return false;
        }
    }
    for (guint i = 0; i < cli->chardevs->len; i++) {
        QsdChardev *c = g_ptr_array_index(cli->chardevs, i);
        bool used = false;

        for (guint j = 0; j < cli->monitors->len; j++) {
            QsdMonitorOpts *m = g_ptr_array_index(cli->monitors, j);

            used |= !strcmp(m->chardev, c->id);
        }
        if (!used) {
            g_set_error(errp, VB_ERROR, 0, "--chardev id=%s: no --monitor "
                        "chardev=%s uses it (chardevs serve only the "
                        "monitor here)", c->id, c->id);
            return false;
        }
    }
    return true;
}

static bool qsd_cli_apply_pass(QsdCli *cli, VbState *s, bool objects,
                               GError **errp);

/*
 * Objects first, then the rest in command-line order: qemu-storage-daemon
 * wants --object before the --blockdev that uses it (a secret), we take
 * both orders.  An object depends on nothing else.
 */
bool qsd_cli_apply(QsdCli *cli, VbState *s, GError **errp)
{
    for (guint pass = 0; pass < 2; pass++) {
        if (!qsd_cli_apply_pass(cli, s, pass == 0, errp)) {
            return false;
        }
    }
    return true;
}

static bool qsd_cli_apply_pass(QsdCli *cli, VbState *s, bool objects,
                               GError **errp)
{
    for (guint i = 0; i < cli->opts->len; i++) {
        QsdOpt *o = g_ptr_array_index(cli->opts, i);
        bool ok;

        if ((o->kind == QSD_OPT_OBJECT) != objects || o->applied) {
            continue;
        }

        switch (o->kind) {
        case QSD_OPT_OBJECT:
            ok = vb_object_add(s, o->obj, o->keyval, errp);
            break;
        case QSD_OPT_BLOCKDEV:
            ok = vb_blockdev_add(s, o->obj, o->keyval, errp) != NULL;
            break;
        case QSD_OPT_EXPORT:
            ok = vb_block_export_add_any(s, o->obj, o->keyval, errp);
            break;
        case QSD_OPT_NBD_SERVER:
            ok = vb_nbd_server_start(s, o->obj, o->keyval, errp);
            break;
        default:
            g_assert_not_reached();
        }
        if (!ok) {
            g_prefix_error(errp, "%s %s: ", qsd_opt_name(o->kind), o->arg);
            return false;
        }
        o->applied = true;
    }
    return true;
}

bool qsd_cli_apply_objects(QsdCli *cli, VbState *s, GError **errp)
{
    return qsd_cli_apply_pass(cli, s, true, errp);
}

const char *qsd_cli_monitor_path(QsdCli *cli, unsigned int i)
{
    QsdMonitorOpts *m = g_ptr_array_index(cli->monitors, i);

    return qsd_chardev_find(cli, m->chardev)->path;
}

/* @path made absolute against the current directory (lexically). */
static char *qsd_absolute(const char *path)
{
    return g_canonicalize_filename(path, NULL);
}

void qsd_cli_absolute_paths(QsdCli *cli)
{
    for (guint i = 0; i < cli->opts->len; i++) {
        QsdOpt *o = g_ptr_array_index(cli->opts, i);
        JsonNode *addr;
        JsonObject *ao;
        const char *path;

        if (o->kind != QSD_OPT_EXPORT) {
            continue;
        }
        addr = json_object_get_member(o->obj, "addr");
        if (!addr || !JSON_NODE_HOLDS_OBJECT(addr)) {
            continue;
        }
        ao = json_node_get_object(addr);
        path = json_object_get_member(ao, "path") &&
               JSON_NODE_HOLDS_VALUE(json_object_get_member(ao, "path")) &&
               json_node_get_value_type(json_object_get_member(ao, "path")) ==
               G_TYPE_STRING ? json_object_get_string_member(ao, "path") :
               NULL;
        if (path && !g_path_is_absolute(path)) {
            g_autofree char *abs = qsd_absolute(path);

            json_object_set_string_member(ao, "path", abs);
        }
    }
    for (guint i = 0; i < cli->chardevs->len; i++) {
        QsdChardev *c = g_ptr_array_index(cli->chardevs, i);

        if (!g_path_is_absolute(c->path)) {
            char *abs = qsd_absolute(c->path);

            g_free(c->path);
            c->path = abs;
        }
    }
}
