/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * QMP error classes, the keyval command-line syntax, and typed access to
 * command arguments with QEMU's error messages (see
 * include/qemu/qmp-args.h).
 */
#include "qemu/osdep.h"
#include "qemu/qmp-args.h"

G_DEFINE_QUARK(qmp-error-quark, qmp_error)

const char *qmp_error_class_name(const GError *err)
{
    static const char *const names[] = {
        [QMP_ERROR_GENERIC] = "GenericError",
        [QMP_ERROR_COMMAND_NOT_FOUND] = "CommandNotFound",
        [QMP_ERROR_DEVICE_NOT_ACTIVE] = "DeviceNotActive",
        [QMP_ERROR_DEVICE_NOT_FOUND] = "DeviceNotFound",
        [QMP_ERROR_KVM_MISSING_CAP] = "KVMMissingCap",
    };

    if (err->domain == QMP_ERROR && err->code >= 0 &&
        err->code < (int)G_N_ELEMENTS(names)) {
        return names[err->code];
    }
    return "GenericError";
}

/* ---- keyval ---------------------------------------------------------- */

/* Put @val at dotted @key under @root, creating the objects between. */
static bool keyval_store(JsonObject *root, const char *key, const char *val,
                         GError **errp)
{
    g_auto(GStrv) parts = g_strsplit(key, ".", -1);
    JsonObject *o = root;
    guint n = g_strv_length(parts);

    for (guint i = 0; i < n; i++) {
        const char *p = parts[i];
        bool last = i + 1 == n;
        JsonNode *node;

        if (!*p) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Invalid parameter '%s'", key);
            return false;
        }
        node = json_object_get_member(o, p);
        if (last) {
            if (node) {
                g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                            "Parameter '%s' is set more than once (or is "
                            "also an object)", key);
                return false;
            }
            json_object_set_string_member(o, p, val);
        } else if (!node) {
            JsonObject *child = json_object_new();

            json_object_set_object_member(o, p, child);
            o = child;
        } else if (JSON_NODE_HOLDS_OBJECT(node)) {
            o = json_node_get_object(node);
        } else {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter '%s' is both a value and an object", key);
            return false;
        }
    }
    return true;
}

JsonObject *keyval_parse(const char *str, const char *implied_key,
                         bool flags_ok, GError **errp)
{
    g_autoptr(JsonObject) root = json_object_new();
    const char *p = str;
    bool first = true;

    while (*p) {
        g_autoptr(GString) key = g_string_new(NULL);
        g_autoptr(GString) val = g_string_new(NULL);
        bool has_eq = false;

        /* Key: up to '=' or ','. */
        while (*p && *p != '=' && *p != ',') {
            g_string_append_c(key, *p++);
        }
        if (*p == '=') {
            has_eq = true;
            p++;
            /* Value: up to a single ','; ",," is a comma. */
            while (*p) {
                if (*p == ',') {
                    if (p[1] != ',') {
                        break;
                    }
                    p++;
                }
                g_string_append_c(val, *p++);
            }
        }
        if (*p == ',') {
            p++;
            if (!*p) {
                g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                            "Expected parameter after ',' in '%s'", str);
                return NULL;
            }
        }

        if (!has_eq) {
            if (first && implied_key) {
                /* "vhost-user-blk,..." means type=vhost-user-blk */
                g_string_assign(val, key->str);
                g_string_assign(key, implied_key);
            } else if (flags_ok && key->len) {
                bool no = g_str_has_prefix(key->str, "no") && key->len > 2;

                /* QemuOpts: "server" = server=on, "nowait" = wait=off;
                 * a real key starting with "no" (node-name) never comes
                 * bare. */
                g_string_assign(val, no ? "off" : "on");
                if (no) {
                    g_string_erase(key, 0, 2);
                }
            } else {
                g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                            "Expected '=' after parameter '%s'", key->str);
                return NULL;
            }
        }
        if (!key->len) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Invalid parameter '' in '%s'", str);
            return NULL;
        }
        if (!keyval_store(root, key->str, val->str, errp)) {
            return NULL;
        }
        first = false;
    }
    return g_steal_pointer(&root);
}

/* ---- arguments ------------------------------------------------------- */

void qmp_args_init(QmpArgs *a, JsonObject *obj, bool keyval,
                   const char *prefix)
{
    a->obj = obj ? json_object_ref(obj) : NULL;
    a->keyval = keyval;
    a->prefix = g_strdup(prefix ? prefix : "");
    a->used = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
}

void qmp_args_cleanup(QmpArgs *a)
{
    if (a->obj) {
        json_object_unref(a->obj);
        a->obj = NULL;
    }
    g_clear_pointer(&a->prefix, g_free);
    g_clear_pointer(&a->used, g_hash_table_destroy);
}

bool qmp_args_has(QmpArgs *a, const char *name)
{
    return a->obj && json_object_has_member(a->obj, name);
}

/* The member, marked consumed; NULL if absent (error if @required). */
static JsonNode *qmp_args_take(QmpArgs *a, const char *name, bool required,
                               GError **errp)
{
    JsonNode *n = a->obj ? json_object_get_member(a->obj, name) : NULL;

    if (!n) {
        if (required) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter '%s%s' is missing", a->prefix, name);
        }
        return NULL;
    }
    g_hash_table_add(a->used, g_strdup(name));
    return n;
}

static void qmp_args_type_error(QmpArgs *a, const char *name,
                                const char *type, GError **errp)
{
    g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                "Invalid parameter type for '%s%s', expected: %s", a->prefix,
                name, type);
}

static bool qmp_node_is(JsonNode *n, GType t)
{
    return JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == t;
}

bool qmp_args_str(QmpArgs *a, const char *name, bool required,
                  const char **out, GError **errp)
{
    JsonNode *n = qmp_args_take(a, name, required, errp);

    if (!n) {
        return !required;
    }
    if (!qmp_node_is(n, G_TYPE_STRING)) {
        qmp_args_type_error(a, name, "string", errp);
        return false;
    }
    *out = json_node_get_string(n);
    return true;
}

bool qmp_args_bool(QmpArgs *a, const char *name, bool *out, GError **errp)
{
    JsonNode *n = qmp_args_take(a, name, false, errp);

    if (!n) {
        return true;
    }
    if (a->keyval && qmp_node_is(n, G_TYPE_STRING)) {
        const char *s = json_node_get_string(n);

        if (!strcmp(s, "on") || !strcmp(s, "yes") || !strcmp(s, "true")) {
            *out = true;
            return true;
        }
        if (!strcmp(s, "off") || !strcmp(s, "no") || !strcmp(s, "false")) {
            *out = false;
            return true;
        }
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Parameter '%s%s' expects 'on' or 'off'", a->prefix,
                    name);
        return false;
    }
    if (!qmp_node_is(n, G_TYPE_BOOLEAN)) {
        qmp_args_type_error(a, name, "boolean", errp);
        return false;
    }
    *out = json_node_get_boolean(n);
    return true;
}

/* keyval: a decimal (or 0x) number, with size suffixes if @size. */
static bool qmp_args_parse_num(const char *s, bool size, uint64_t *out)
{
    char *end;
    uint64_t v, mult = 1;

    if (!g_ascii_isdigit(*s)) {
        return false;
    }
    errno = 0;
    v = g_ascii_strtoull(s, &end, 0);
    if (errno) {
        return false;
    }
    if (size && *end) {
        switch (g_ascii_tolower(*end)) {
        case 'k':
            mult = 1ULL << 10;
            break;
        case 'm':
            mult = 1ULL << 20;
            break;
        case 'g':
            mult = 1ULL << 30;
            break;
        case 't':
            mult = 1ULL << 40;
            break;
        default:
            return false;
        }
        end++;
    }
    if (*end || (v && mult > UINT64_MAX / v)) {
        return false;
    }
    *out = v * mult;
    return true;
}

bool qmp_args_int(QmpArgs *a, const char *name, bool required,
                  int64_t *out, bool *present, GError **errp)
{
    JsonNode *n = qmp_args_take(a, name, required, errp);

    if (present) {
        *present = n != NULL;
    }
    if (!n) {
        return !required;
    }
    if (a->keyval && qmp_node_is(n, G_TYPE_STRING)) {
        const char *s = json_node_get_string(n);
        bool neg = *s == '-';
        uint64_t v;

        if (!qmp_args_parse_num(s + neg, false, &v) ||
            v > (uint64_t)INT64_MAX) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter '%s%s' expects an integer", a->prefix,
                        name);
            return false;
        }
        *out = neg ? -(int64_t)v : (int64_t)v;
        return true;
    }
    if (!qmp_node_is(n, G_TYPE_INT64)) {
        qmp_args_type_error(a, name, "integer", errp);
        return false;
    }
    *out = json_node_get_int(n);
    return true;
}

bool qmp_args_size(QmpArgs *a, const char *name, bool required,
                   uint64_t *out, bool *present, GError **errp)
{
    JsonNode *n = qmp_args_take(a, name, required, errp);

    if (present) {
        *present = n != NULL;
    }
    if (!n) {
        return !required;
    }
    if (a->keyval && qmp_node_is(n, G_TYPE_STRING)) {
        if (!qmp_args_parse_num(json_node_get_string(n), true, out)) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter '%s%s' expects a non-negative value "
                        "below 2^64 (optional suffix k, M, G, T)", a->prefix,
                        name);
            return false;
        }
        return true;
    }
    /* json-glib reads every JSON integer as int64. */
    if (!qmp_node_is(n, G_TYPE_INT64) || json_node_get_int(n) < 0) {
        qmp_args_type_error(a, name, "size", errp);
        return false;
    }
    *out = json_node_get_int(n);
    return true;
}

bool qmp_args_enum_names(QmpArgs *a, const char *name,
                         const char *const *first, size_t n, size_t stride,
                         bool required, int *out, GError **errp)
{
    const char *s;
    JsonNode *node = qmp_args_take(a, name, required, errp);

    if (!node) {
        return !required;
    }
    if (!qmp_node_is(node, G_TYPE_STRING)) {
        qmp_args_type_error(a, name, "string", errp);
        return false;
    }
    s = json_node_get_string(node);
    for (size_t i = 0; i < n; i++) {
        const char *v = *(const char *const *)((const char *)first +
                                               i * stride);

        if (!strcmp(v, s)) {
            *out = i;
            return true;
        }
    }
    g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                "Parameter '%s%s' does not accept value '%s'", a->prefix, name,
                s);
    return false;
}

bool qmp_args_enum(QmpArgs *a, const char *name, const char *const *values,
                   bool required, int *out, GError **errp)
{
    size_t n = 0;

    while (values[n]) {
        n++;
    }
    return qmp_args_enum_names(a, name, values, n, sizeof(values[0]),
                               required, out, errp);
}

bool qmp_args_object(QmpArgs *a, const char *name, bool required,
                     QmpArgs *sub, bool *present, GError **errp)
{
    g_autofree char *prefix = g_strdup_printf("%s%s.", a->prefix, name);
    JsonNode *n = qmp_args_take(a, name, required, errp);

    if (present) {
        *present = n != NULL;
    }
    if (!n) {
        qmp_args_init(sub, NULL, a->keyval, prefix);
        return !required;
    }
    if (!JSON_NODE_HOLDS_OBJECT(n)) {
        qmp_args_init(sub, NULL, a->keyval, prefix);
        qmp_args_type_error(a, name, "object", errp);
        return false;
    }
    qmp_args_init(sub, json_node_get_object(n), a->keyval, prefix);
    return true;
}

bool qmp_args_uint_list(QmpArgs *a, const char *name, unsigned int max,
                        uint64_t **out, unsigned int *n_out, bool *present,
                        GError **errp)
{
    JsonNode *n = qmp_args_take(a, name, false, errp);
    JsonArray *arr;
    unsigned int len;

    *out = NULL;
    *n_out = 0;
    if (present) {
        *present = n != NULL;
    }
    if (!n) {
        return true;
    }
    if (!JSON_NODE_HOLDS_ARRAY(n)) {
        qmp_args_type_error(a, name, "array", errp);
        return false;
    }
    arr = json_node_get_array(n);
    len = json_array_get_length(arr);
    if (len > max) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Parameter '%s%s' "
                    "has %u elements; at most %u are allowed", a->prefix,
                    name, len, max);
        return false;
    }
    *out = g_new(uint64_t, MAX(len, 1));
    for (unsigned int i = 0; i < len; i++) {
        JsonNode *e = json_array_get_element(arr, i);

        if (!qmp_node_is(e, G_TYPE_INT64) || json_node_get_int(e) < 0) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Parameter "
                        "'%s%s' expects a list of unsigned integers (element "
                        "%u is not one)", a->prefix, name, i);
            g_clear_pointer(out, g_free);
            return false;
        }
        (*out)[i] = json_node_get_int(e);
    }
    *n_out = len;
    return true;
}

bool qmp_args_list(QmpArgs *a, const char *name, GPtrArray **out,
                   GError **errp)
{
    JsonNode *n = qmp_args_take(a, name, false, errp);
    GPtrArray *list;

    *out = NULL;
    if (!n) {
        return true;
    }
    list = g_ptr_array_new();
    if (JSON_NODE_HOLDS_ARRAY(n)) {
        JsonArray *arr = json_node_get_array(n);

        for (guint i = 0; i < json_array_get_length(arr); i++) {
            g_ptr_array_add(list, json_array_get_element(arr, i));
        }
        *out = list;
        return true;
    }
    if (JSON_NODE_HOLDS_OBJECT(n)) {
        /* keyval: server.0.host=...; the keys must be 0, 1, ... */
        JsonObject *o = json_node_get_object(n);

        for (guint i = 0; i < json_object_get_size(o); i++) {
            g_autofree char *key = g_strdup_printf("%u", i);

            if (!json_object_has_member(o, key)) {
                break;
            }
            g_ptr_array_add(list, json_object_get_member(o, key));
        }
        if (list->len == json_object_get_size(o)) {
            *out = list;
            return true;
        }
    }
    g_ptr_array_free(list, true);
    qmp_args_type_error(a, name, "array", errp);
    return false;
}

const char *qmp_node_str(JsonNode *n)
{
    return qmp_node_is(n, G_TYPE_STRING) ? json_node_get_string(n) : NULL;
}

bool qmp_args_check_done(QmpArgs *a, GError **errp)
{
    g_autoptr(GList) members = NULL;

    if (!a->obj) {
        return true;
    }
    members = json_object_get_members(a->obj);
    for (GList *l = members; l; l = l->next) {
        if (!g_hash_table_contains(a->used, l->data)) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter '%s%s' is unexpected", a->prefix,
                        (const char *)l->data);
            return false;
        }
    }
    return true;
}

/* Any thread. */
bool qemu_parse_size(const char *s, uint64_t *out)
{
    char *end;
    uint64_t v, mult = 1;

    if (!s || !g_ascii_isdigit(*s)) {
        return false;
    }
    errno = 0;
    v = g_ascii_strtoull(s, &end, 0);
    if (errno) {
        return false;
    }
    switch (*end) {
    case '\0':
        break;
    case 'k': case 'K':
        mult = 1ULL << 10;
        end++;
        break;
    case 'm': case 'M':
        mult = 1ULL << 20;
        end++;
        break;
    case 'g': case 'G':
        mult = 1ULL << 30;
        end++;
        break;
    case 't': case 'T':
        mult = 1ULL << 40;
        end++;
        break;
    default:
        return false;
    }
    if (*end == 'i' || *end == 'B') {
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    }
    if (*end || (v && mult > UINT64_MAX / v)) {
        return false;
    }
    *out = v * mult;
    return true;
}
