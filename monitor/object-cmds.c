/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The user-created objects (--object / object-add: iothread, secret,
 * throttle-group) as the QOM commands of qemu-storage-daemon 7.2 see
 * them: object-del, qom-list, and the "type" property of qom-get.
 *
 * Theory of operation.  vhost-blkd has no QOM tree; the objects live in
 * three arrays of VbState.  The paths QEMU's tools use are mapped onto
 * them: "/" holds the container "objects", "/objects" holds every
 * object as child<TYPE>, and "/objects/ID" (or the bare ID, as QEMU's
 * partial paths allow for a unique name) is the object itself.
 *
 * object-del follows QEMU's user_creatable_del(): an unknown id is
 * "object 'ID' not found", an object something still uses is "object
 * 'ID' is in use, can not be deleted", and the id is free again at once
 * after a successful delete.  "In use" is, per type:
 *  - throttle-group: any reference besides the object's own -- a
 *    driver=throttle node or a --export ...,throttle-group=ID node holds
 *    one (block/throttle.c) until blockdev-del closes it;
 *  - iothread: an export (also one still draining after
 *    block-export-del) with a queue in its AioContext;
 *  - secret: never.  A node opens with a copy of the key (librados keeps
 *    its own), so deleting the secret only stops later blockdev-adds from
 *    naming it.  Its bytes are zeroed before they are freed.
 *
 * Threads: main thread only.
 */
#include "qemu/osdep.h"
#include "monitor-internal.h"

typedef enum VbObjType {
    VB_OBJ_NONE,
    VB_OBJ_IOTHREAD,
    VB_OBJ_SECRET,
    VB_OBJ_THROTTLE_GROUP,
} VbObjType;

static const char *const vb_obj_type_names[] = {
    [VB_OBJ_IOTHREAD] = "iothread",
    [VB_OBJ_SECRET] = "secret",
    [VB_OBJ_THROTTLE_GROUP] = "throttle-group",
};

/* The object @id and its index in its array. */
static VbObjType vb_obj_find(VbState *s, const char *id, guint *index)
{
    for (guint i = 0; i < s->iothreads->len; i++) {
        VbIOThreadObj *t = g_ptr_array_index(s->iothreads, i);

        if (!strcmp(t->id, id)) {
            *index = i;
            return VB_OBJ_IOTHREAD;
        }
    }
    for (guint i = 0; i < s->secrets->len; i++) {
        VbSecretObj *sec = g_ptr_array_index(s->secrets, i);

        if (!strcmp(sec->id, id)) {
            *index = i;
            return VB_OBJ_SECRET;
        }
    }
    for (guint i = 0; i < s->throttle_groups->len; i++) {
        ThrottleGroup *tg = g_ptr_array_index(s->throttle_groups, i);

        if (!strcmp(throttle_group_name(tg), id)) {
            *index = i;
            return VB_OBJ_THROTTLE_GROUP;
        }
    }
    return VB_OBJ_NONE;
}

static bool vb_iothread_in_use(VbState *s, VbIOThreadObj *t)
{
    AioContext *ctx = iothread_get_aio_context(t->iothread);

    for (guint i = 0; i < s->exports->len; i++) {
        VuBlkExport *exp = vb_export_get_vu(g_ptr_array_index(s->exports, i));

        for (unsigned int q = 0; q < vu_blk_export_get_num_queues(exp); q++) {
            if (vu_blk_export_get_queue_ctx(exp, q) == ctx) {
                return true;
            }
        }
    }
    return false;
}

static void vb_secret_free(VbSecretObj *sec)
{
    g_free(sec->id);
    memset(sec->base64, 0, strlen(sec->base64));
    g_free(sec->base64);
    g_free(sec);
}

JsonNode *vb_qmp_object_del(void *opaque, JsonObject *args, GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *id = NULL;
    guint i = 0;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "id", true, &id, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    switch (vb_obj_find(s, id, &i)) {
    case VB_OBJ_NONE:
        vb_set_error(errp, "object '%s' not found", id);
        return NULL;
    case VB_OBJ_IOTHREAD: {
        VbIOThreadObj *t = g_ptr_array_index(s->iothreads, i);

        if (vb_iothread_in_use(s, t)) {
            vb_set_error(errp, "object '%s' is in use, can not be deleted",
                         id);
            return NULL;
        }
        g_ptr_array_remove_index(s->iothreads, i);
        /* Nothing is attached to it any more: the join returns once the
         * thread has run its stop bottom half. */
        iothread_destroy(t->iothread);
        g_free(t->id);
        g_free(t);
        break;
    }
    case VB_OBJ_SECRET:
        vb_secret_free(g_ptr_array_steal_index(s->secrets, i));
        break;
    case VB_OBJ_THROTTLE_GROUP: {
        ThrottleGroup *tg = g_ptr_array_index(s->throttle_groups, i);

        /* One reference is the object's; any other is a filter's. */
        if (throttle_group_refs(tg) > 1) {
            vb_set_error(errp, "object '%s' is in use, can not be deleted",
                         id);
            return NULL;
        }
        g_ptr_array_remove_index(s->throttle_groups, i);  /* unrefs it */
        break;
    }
    }
    return vb_empty();
}

/* ---- paths ------------------------------------------------------------- */

typedef enum VbPathKind {
    VB_PATH_NONE,
    VB_PATH_ROOT,
    VB_PATH_OBJECTS,
    VB_PATH_OBJECT,
} VbPathKind;

/* What @path names; for an object, its type in *@type. */
static VbPathKind vb_path_resolve(VbState *s, const char *path,
                                  VbObjType *type)
{
    const char *id = path;
    guint i;

    if (!strcmp(path, "/")) {
        return VB_PATH_ROOT;
    }
    if (!strcmp(path, "/objects") || !strcmp(path, "/objects/") ||
        !strcmp(path, "objects")) {
        return VB_PATH_OBJECTS;
    }
    if (g_str_has_prefix(path, "/objects/")) {
        id = path + strlen("/objects/");
    } else if (path[0] == '/') {
        return VB_PATH_NONE;
    }
    if (!*id || strchr(id, '/')) {
        return VB_PATH_NONE;
    }
    *type = vb_obj_find(s, id, &i);
    return *type == VB_OBJ_NONE ? VB_PATH_NONE : VB_PATH_OBJECT;
}

static void vb_prop_add(JsonArray *arr, const char *name, const char *type)
{
    JsonObject *o = json_object_new();

    json_object_set_string_member(o, "name", name);
    json_object_set_string_member(o, "type", type);
    json_array_add_object_element(arr, o);
}

static void vb_prop_add_child(JsonArray *arr, const char *name,
                              VbObjType type)
{
    g_autofree char *t = g_strdup_printf("child<%s>",
                                         vb_obj_type_names[type]);

    vb_prop_add(arr, name, t);
}

static void vb_tg_prop_add(void *opaque, const char *key, uint64_t value)
{
    g_autofree char *name = g_strdup_printf("x-%s", key);

    vb_prop_add(opaque, name, "int");
}

/*
 * qom-list: the properties qom-get answers for, in QEMU's
 * ObjectPropertyInfo shape.  QEMU 7.2 lists more for a secret (loaded,
 * format, data, file, keyid, iv) and an iothread (poll-*, aio-max-batch);
 * vhost-blkd reads none of those back, so it lists only "type" for them.
 */
JsonNode *vb_qmp_qom_list(void *opaque, JsonObject *args, GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *path = NULL;
    VbObjType type = VB_OBJ_NONE;
    JsonArray *arr;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "path", true, &path, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    switch (vb_path_resolve(s, path, &type)) {
    case VB_PATH_NONE:
        g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_FOUND,
                    "Device '%s' not found", path);
        return NULL;
    case VB_PATH_ROOT:
        arr = json_array_new();
        vb_prop_add(arr, "type", "string");
        vb_prop_add(arr, "objects", "child<container>");
        break;
    case VB_PATH_OBJECTS:
        arr = json_array_new();
        vb_prop_add(arr, "type", "string");
        for (guint i = 0; i < s->iothreads->len; i++) {
            VbIOThreadObj *t = g_ptr_array_index(s->iothreads, i);

            vb_prop_add_child(arr, t->id, VB_OBJ_IOTHREAD);
        }
        for (guint i = 0; i < s->secrets->len; i++) {
            VbSecretObj *sec = g_ptr_array_index(s->secrets, i);

            vb_prop_add_child(arr, sec->id, VB_OBJ_SECRET);
        }
        for (guint i = 0; i < s->throttle_groups->len; i++) {
            ThrottleGroup *tg = g_ptr_array_index(s->throttle_groups, i);

            vb_prop_add_child(arr, throttle_group_name(tg),
                              VB_OBJ_THROTTLE_GROUP);
        }
        break;
    case VB_PATH_OBJECT:
    default:
        arr = json_array_new();
        vb_prop_add(arr, "type", "string");
        if (type == VB_OBJ_THROTTLE_GROUP) {
            ThrottleLimits t = { 0 };

            vb_prop_add(arr, "limits", "ThrottleLimits");
            /* Every x-* key, as throttle-cmds.c reads and writes them. */
            throttle_limits_foreach(&t, vb_tg_prop_add, arr);
        }
        break;
    }
    return json_node_init_array(json_node_alloc(), arr);
}

/*
 * qom-get: "type" of "/", "/objects" and every object here; the rest
 * (a throttle group's limits) in throttle-cmds.c.
 */
JsonNode *vb_qmp_qom_get_obj(void *opaque, JsonObject *args, GError **errp)
{
    VbState *s = opaque;
    /* No "arguments" at all: vb_qmp_qom_get() says what is missing. */
    JsonNode *pn = args ? json_object_get_member(args, "path") : NULL;
    JsonNode *prop = args ? json_object_get_member(args, "property") : NULL;
    VbObjType type = VB_OBJ_NONE;
    const char *name;

    if (pn && prop && json_object_get_size(args) == 2 &&
        JSON_NODE_HOLDS_VALUE(pn) && JSON_NODE_HOLDS_VALUE(prop) &&
        json_node_get_value_type(pn) == G_TYPE_STRING &&
        json_node_get_value_type(prop) == G_TYPE_STRING &&
        !strcmp(json_node_get_string(prop), "type")) {
        switch (vb_path_resolve(s, json_node_get_string(pn), &type)) {
        case VB_PATH_ROOT:
        case VB_PATH_OBJECTS:
            name = "container";
            break;
        case VB_PATH_OBJECT:
            name = vb_obj_type_names[type];
            break;
        default:
            name = NULL;
            break;
        }
        if (name) {
            JsonNode *v = json_node_alloc();

            json_node_init_string(v, name);
            return v;
        }
    }
    return vb_qmp_qom_get(opaque, args, errp);
}
