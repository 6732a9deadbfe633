/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Throttle-group objects as QMP and the command line see them:
 * --object throttle-group / object-add qom-type=throttle-group (QEMU's
 * limits.* and legacy x-* properties), qom-set / qom-get of "limits"
 * and of the x-* properties, with QEMU's semantics: a qom-set of limits
 * changes the members it gives, keeps the others, and takes effect at
 * once in every iothread that uses the group.
 *
 * Threads: main thread only.
 */
#include "qemu/osdep.h"
#include "monitor-internal.h"
#include "qemu/throttle.h"

/* Every key of QEMU's ThrottleLimits, in its order. */
static GPtrArray *vb_tg_keys(void)
{
    GPtrArray *keys = g_ptr_array_new_with_free_func(g_free);

    for (int k = 0; k < THROTTLE__MAX; k++) {
        const char *n = throttle_kind_name(k);

        g_ptr_array_add(keys, g_strdup(n));
        g_ptr_array_add(keys, g_strdup_printf("%s-max", n));
        g_ptr_array_add(keys, g_strdup_printf("%s-max-length", n));
    }
    g_ptr_array_add(keys, g_strdup("iops-size"));
    return keys;
}

bool vb_throttle_limits_parse(QmpArgs *a, const char *prefix,
                              ThrottleLimits *t, bool *any, GError **errp)
{
    g_autoptr(GPtrArray) keys = vb_tg_keys();

    for (guint i = 0; i < keys->len; i++) {
        const char *key = g_ptr_array_index(keys, i);
        g_autofree char *name = g_strconcat(prefix, key, NULL);
        int64_t v = 0;
        bool present = false, known;
        GError *err = NULL;

        if (!qmp_args_int(a, name, false, &v, &present, errp)) {
            return false;
        }
        if (!present) {
            continue;
        }
        *any = true;
        if (!throttle_limits_set_key(t, key, v, &known, &err)) {
            vb_set_error(errp, "%s%s", a->prefix, err->message);
            g_error_free(err);
            return false;
        }
    }
    return true;
}

ThrottleGroup *vb_throttle_group_find(VbState *s, const char *id)
{
    for (guint i = 0; id && s->throttle_groups && i <
         s->throttle_groups->len; i++) {
        ThrottleGroup *tg = g_ptr_array_index(s->throttle_groups, i);

        if (!strcmp(throttle_group_name(tg), id)) {
            return tg;
        }
    }
    return NULL;
}

/* --object throttle-group,id=ID,limits.KEY=N,... or x-KEY=N,... */
bool vb_throttle_group_add(VbState *s, QmpArgs *a, GError **errp)
{
    g_auto(QmpArgs) lim = { 0 };
    ThrottleLimits t = { 0 };
    const char *id = NULL;
    bool has_limits = false, any_x = false, any = false;
    GError *err = NULL;
    ThrottleGroup *tg;

    if (!qmp_args_str(a, "id", true, &id, errp) ||
        !qmp_args_object(a, "limits", false, &lim, &has_limits, errp) ||
        !vb_throttle_limits_parse(&lim, "", &t, &any, errp) ||
        !qmp_args_check_done(&lim, errp) ||
        !vb_throttle_limits_parse(a, "x-", &t, &any_x, errp) ||
        !qmp_args_check_done(a, errp)) {
        return false;
    }
    if (has_limits && any_x) {
        vb_set_error(errp, "throttle-group '%s': give the limits either as "
                     "limits.* or as the x-* properties, not both", id);
        return false;
    }
    if (vb_throttle_group_find(s, id)) {
        vb_set_error(errp, "attempt to add duplicate property '%s' to "
                     "object (type 'container')", id);
        return false;
    }
    tg = throttle_group_new(id, &t, &err);
    if (!tg) {
        vb_set_error(errp, "throttle-group '%s': %s", id, err->message);
        g_error_free(err);
        return false;
    }
    g_ptr_array_add(s->throttle_groups, tg);
    return true;
}

/* The group @path names: an object ("tg0" or "/objects/tg0"), or, as a
 * vhost-blkd extension, an export whose node is throttled (its own
 * limits from --export iops-total=...). */
static ThrottleGroup *vb_tg_resolve(VbState *s, const char *path,
                                    GError **errp)
{
    const char *id = g_str_has_prefix(path, "/objects/") ? path + 9 : path;
    ThrottleGroup *tg = vb_throttle_group_find(s, id);
    VbExport *e;

    if (tg) {
        return tg;
    }
    e = vb_export_find(s, id);
    if (e) {
        tg = blk_throttle_group(vu_blk_export_get_blk(vb_export_get_vu(e)));
        if (tg) {
            return tg;
        }
        vb_set_error(errp, "export '%s' is not throttled: start it with "
                     "iops-total=... (or throttle-group=NAME) on --export, or "
                     "export a driver=throttle node", id);
        return NULL;
    }
    g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_FOUND,
                "Device '%s' not found: no throttle group (--object "
                "throttle-group) or export of that name", path);
    return NULL;
}

static void vb_tg_put(void *opaque, const char *key, uint64_t value)
{
    json_object_set_int_member(opaque, key, value);
}

JsonNode *vb_qmp_qom_get(void *opaque, JsonObject *args,
                                GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *path = NULL, *prop = NULL;
    ThrottleLimits t;
    ThrottleGroup *tg;
    JsonObject *o;
    JsonNode *v;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "path", true, &path, errp) ||
        !qmp_args_str(&a, "property", true, &prop, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    tg = vb_tg_resolve(s, path, errp);
    if (!tg) {
        return NULL;
    }
    throttle_group_get_limits(tg, &t);
    o = json_object_new();
    throttle_limits_foreach(&t, vb_tg_put, o);
    if (!strcmp(prop, "limits")) {
        return json_node_init_object(json_node_alloc(), o);
    }
    if (g_str_has_prefix(prop, "x-") && json_object_has_member(o, prop + 2)) {
        v = json_node_copy(json_object_get_member(o, prop + 2));
        json_object_unref(o);
        return v;
    }
    json_object_unref(o);
    vb_set_error(errp, "Property 'throttle-group.%s' not found (use limits "
                 "or an x-* limit such as x-iops-total)", prop);
    return NULL;
}

JsonNode *vb_qmp_qom_set(void *opaque, JsonObject *args,
                                GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    g_auto(QmpArgs) v = { 0 };
    const char *path = NULL, *prop = NULL;
    ThrottleLimits t;
    ThrottleGroup *tg;
    bool any = false;
    GError *err = NULL;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "path", true, &path, errp) ||
        !qmp_args_str(&a, "property", true, &prop, errp)) {
        return NULL;
    }
    tg = vb_tg_resolve(s, path, errp);
    if (!tg) {
        return NULL;
    }
    throttle_group_get_limits(tg, &t);
    if (!strcmp(prop, "limits")) {
        if (!qmp_args_object(&a, "value", true, &v, NULL, errp) ||
            !qmp_args_check_done(&a, errp) ||
            !vb_throttle_limits_parse(&v, "", &t, &any, errp) ||
            !qmp_args_check_done(&v, errp)) {
            return NULL;
        }
    } else if (g_str_has_prefix(prop, "x-")) {
        g_autoptr(JsonObject) wrap = json_object_new();
        JsonNode *val = json_object_get_member(args, "value");
        g_auto(QmpArgs) w = { 0 };

        if (!val) {
            vb_set_error(errp, "Parameter 'value' is missing");
            return NULL;
        }
        json_object_set_member(wrap, prop, json_node_copy(val));
        qmp_args_int(&a, "value", false, &(int64_t){ 0 }, NULL, NULL);
        qmp_args_init(&w, wrap, false, NULL);
        if (!qmp_args_check_done(&a, errp) ||
            !vb_throttle_limits_parse(&w, "x-", &t, &any, errp)) {
            return NULL;
        }
        if (!any) {
            vb_set_error(errp, "Property 'throttle-group.%s' not found (use "
                         "limits or an x-* limit such as x-iops-total)", prop);
            return NULL;
        }
    } else {
        vb_set_error(errp, "Property 'throttle-group.%s' not found (use "
                     "limits or an x-* limit such as x-iops-total)", prop);
        return NULL;
    }
    if (!throttle_group_set_limits(tg, &t, &err)) {
        vb_set_error(errp, "throttle-group '%s': %s",
                     throttle_group_name(tg), err->message);
        g_error_free(err);
        return NULL;
    }
    return vb_empty();
}
