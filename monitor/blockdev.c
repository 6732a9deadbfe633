/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Named block nodes, and the QMP commands over them: blockdev-add,
 * blockdev-del, block_resize (see include/monitor/blockdev.h).  Names,
 * arguments, replies and error texts follow qemu-storage-daemon 7.2 so
 * that its tooling works unchanged; docs/user-guide.md lists the
 * deliberate differences.
 *
 * A node is an open BlockBackend; the exports on nodes are in
 * monitor/export.c.
 *
 * Threads: main thread; an rbd image opens and resizes in a worker
 * (blk_open_async(), blk_truncate_async()), which reports back to the
 * main thread.
 */
#include "qemu/osdep.h"
#include "monitor-internal.h"
#include "qemu/error-report.h"

#include <sys/stat.h>

/*
 * A blockdev-add (QMP) whose open may run in a worker thread
 * (blk_open_async(): a driver that waits on the network).  Its node name
 * is taken from the start; the node is registered and the command
 * answered in the main thread when the open ends.  Keeps what the
 * strings of @o point into: the command's arguments (a reference) and
 * what the driver's parser allocated.
 */
struct VbPendingOpen {
    VbState *s;                 /* NULL: the daemon is shutting down */
    char *name;
    char *given;                /* driver= as given */
    BlockDiscardMode discard;
    BlockOptions o;
    JsonObject *args;
    BlockOptsParse parse;
    QmpPending *p;
};

static VbPendingOpen *vb_pending_find(VbState *s, const char *name)
{
    for (guint i = 0; name && i < s->pending_nodes->len; i++) {
        VbPendingOpen *po = g_ptr_array_index(s->pending_nodes, i);

        if (!strcmp(po->name, name)) {
            return po;
        }
    }
    return NULL;
}

VbNode *vb_node_find(VbState *s, const char *name)
{
    for (guint i = 0; name && i < s->nodes->len; i++) {
        VbNode *n = g_ptr_array_index(s->nodes, i);

        if (!strcmp(n->name, name)) {
            return n;
        }
    }
    return NULL;
}

/* A close that blockdev-del started has ended (in a worker for rbd). */
static void vb_node_closed(void *opaque)
{
}

/* @wait: close in this thread (shutdown); else as blk_close_async() does
 * (blockdev-del: an rbd node's close waits for the cluster in a worker,
 * and the main loop goes on). */
static void vb_node_free_full(VbNode *n, bool wait)
{
    if (n->alias) {
        /* A raw node: the image is its file child's, which stays open. */
        n->file->parents--;
    } else if (n->format) {
        /* A format node: ours; its file (and backing) node stays open. */
        blk_close(n->blk);
        n->file->parents--;
        if (n->backing) {
            n->backing->parents--;
        }
    } else if (n->file) {
        /* A throttle filter over another node: that one stays open. */
        n->file->filter = NULL;
        blk_throttle_release(n->blk);
    } else if (wait) {
        blk_close(n->blk);
    } else {
        blk_close_async(n->blk, vb_node_closed, NULL);
    }
    g_free(n->name);
    g_free(n->driver);
    g_free(n->filename);
    g_free(n);
}

static void vb_node_free(VbNode *n)
{
    vb_node_free_full(n, true);
}

/*
 * Shutdown: free @n, unless a block_resize still waits in a worker with
 * its image (vb_resize_mark(): also when it was asked of a node above
 * @n).  Then leave it, and the image, to the exiting process rather than
 * close them under the worker; the daemon leaves with _exit() while a
 * worker runs (blk_async_workers()).
 */
static void vb_node_free_at_exit(VbNode *n)
{
    if (n->resizing) {
        warn_report("node '%s': a block_resize is still waiting for "
                    "the cluster; not closing it", n->name);
        return;
    }
    vb_node_free(n);
}

/* vb_state_cleanup(), after the exports. */
void vb_nodes_cleanup(VbState *s)
{
    /*
     * Throttle and raw nodes first: they sit on other nodes, and from the
     * top down (newest first: a node is always added after its file).
     */
    for (guint i = s->nodes->len; i-- > 0;) {
        VbNode *n = g_ptr_array_index(s->nodes, i);

        if (n->file) {
            g_ptr_array_remove_index(s->nodes, i);
            vb_node_free_at_exit(n);
        }
    }
    while (s->nodes->len) {
        vb_node_free_at_exit(g_ptr_array_steal_index(s->nodes, 0));
    }
    while (s->pending_nodes->len) {
        VbPendingOpen *po = g_ptr_array_steal_index(s->pending_nodes, 0);

        po->s = NULL;       /* its open, if it ever ends, closes the node */
    }
    g_ptr_array_free(s->pending_nodes, true);
    g_ptr_array_free(s->nodes, true);
}

/* ---- nodes ------------------------------------------------------------- */

/* @name is free for a new node. */
static bool vb_node_name_free(VbState *s, const char *name, GError **errp)
{
    if (vb_node_find(s, name)) {
        vb_set_error(errp, "Duplicate nodes with node-name='%s'", name);
        return false;
    }
    if (vb_pending_find(s, name)) {
        vb_set_error(errp, "Duplicate nodes with node-name='%s': a "
                     "blockdev-add of that name is still opening it (its "
                     "reply has not come yet)", name);
        return false;
    }
    return true;
}

/* Register the open node @blk as @name; @given: driver= as given, or
 * NULL (the legacy syntax). */
static VbNode *vb_node_register(VbState *s, const char *name,
                                const char *given, const BlockOptions *opts,
                                BlockDiscardMode discard, BlockBackend *blk)
{
    BlockNodeNames names;
    VbNode *n;

    blk_node_names(blk, opts, given, &names);
    n = g_new0(VbNode, 1);
    n->name = g_strdup(name);
    n->driver = g_steal_pointer(&names.driver);
    n->filename = g_steal_pointer(&names.filename);
    n->blk = blk;
    n->readonly = blk_is_read_only(blk);
    n->cache_direct = names.cache_direct;
    n->no_storage = names.no_storage;
    n->discard = discard;
    g_ptr_array_add(s->nodes, n);
    return n;
}

VbNode *vb_node_open(VbState *s, const char *name, const BlockOptions *opts,
                     BlockDiscardMode discard, GError **errp)
{
    BlockBackend *blk;

    if (!vb_node_name_free(s, name, errp)) {
        return NULL;
    }
    blk = blk_open(opts, errp);
    if (!blk) {
        return NULL;
    }
    return vb_node_register(s, name, NULL, opts, discard, blk);
}

VbNode *vb_node_open_format(VbState *s, const char *name, VbNode *file,
                            const BlockOptions *opts,
                            BlockDiscardMode discard, GError **errp)
{
    BlockOptions o = *opts;
    BlockBackend *blk;
    VbNode *n;

    if (!vb_node_name_free(s, name, errp)) {
        return NULL;
    }
    o.file = file->blk;
    blk = blk_open(&o, errp);
    if (!blk) {
        return NULL;
    }
    n = vb_node_register(s, name, o.driver, &o, discard, blk);
    n->format = true;
    n->file = file;
    n->implicit_file = true;
    n->cache_direct = file->cache_direct;
    file->parents++;
    return n;
}

/* "#blockNNN": the next name of that form no node has. */
static char *vb_node_auto_name(VbState *s)
{
    static unsigned int implicit_count;
    char *name = NULL;

    do {
        g_free(name);
        name = g_strdup_printf("#block%03u", ++implicit_count);
    } while (vb_node_find(s, name) || vb_pending_find(s, name));
    return name;
}

static VbNode *vb_node_adopt_one(VbState *s, BlockBackend *blk,
                                 const char *filename,
                                 BlockDiscardMode discard, guint at)
{
    VbNode *n = g_new0(VbNode, 1);

    n->name = vb_node_auto_name(s);
    n->driver = g_strdup(blk_get_driver_name(blk));
    if (!strcmp(n->driver, "file") && blk_is_block_device(blk)) {
        g_free(n->driver);
        n->driver = g_strdup("host_device");
    }
    n->filename = g_strdup(filename);
    n->blk = blk;
    n->readonly = blk_is_read_only(blk);
    n->discard = discard;
    g_ptr_array_insert(s->nodes, at, n);
    return n;
}

VbNode *vb_node_adopt(VbState *s, BlockBackend *blk, BlockBackend *file,
                      const char *filename, BlockDiscardMode discard,
                      VbNode *before)
{
    guint at = 0;
    VbNode *fn, *n;

    g_ptr_array_find(s->nodes, before, &at);
    if (!file) {
        return vb_node_adopt_one(s, blk, filename, discard, at);
    }
    fn = vb_node_adopt_one(s, file, filename, discard, at);
    n = vb_node_adopt_one(s, blk, filename, discard, at + 1);
    n->format = true;
    n->file = fn;
    n->implicit_file = true;
    fn->parents++;
    return n;
}

static void vb_pending_free(VbPendingOpen *po)
{
    blk_options_parse_cleanup(&po->parse);
    json_object_unref(po->args);
    g_free(po->given);
    g_free(po->name);
    g_free(po);
}

/* Main thread: the worker's open of @opaque ended. */
static void vb_node_open_done(void *opaque, BlockBackend *blk, GError *err)
{
    VbPendingOpen *po = opaque;
    VbState *s = po->s;

    if (!s) {
        /* The daemon shut down meanwhile. */
        blk_close(blk);
        qmp_pending_complete(po->p, NULL, err ? err :
                             g_error_new(VB_ERROR, 0, "shutting down"));
        vb_pending_free(po);
        return;
    }
    g_ptr_array_remove(s->pending_nodes, po);
    if (blk) {
        vb_node_register(s, po->name, po->given, &po->o, po->discard, blk);
        qmp_pending_complete(po->p, vb_empty(), NULL);
    } else {
        qmp_pending_complete(po->p, NULL, err);
    }
    vb_pending_free(po);
}

/*
 * Open @opts as @name without blocking the main loop: the reply of @p
 * comes when the open has ended (at once for the drivers that open in
 * the main thread).  @opts points into @args and @parse, which the
 * pending open takes over (@parse is left empty).
 */
static void vb_node_open_async(VbState *s, const char *name,
                               const char *given, const BlockOptions *opts,
                               BlockDiscardMode discard, JsonObject *args,
                               BlockOptsParse *parse, QmpPending *p)
{
    GError *err = NULL;
    VbPendingOpen *po;

    if (!vb_node_name_free(s, name, &err)) {
        qmp_pending_complete(p, NULL, err);
        return;
    }
    po = g_new0(VbPendingOpen, 1);
    po->s = s;
    po->name = g_strdup(name);
    po->given = g_strdup(given);
    po->discard = discard;
    po->p = p;
    po->args = json_object_ref(args);
    po->parse = *parse;
    memset(parse, 0, sizeof(*parse));
    po->o = *opts;
    g_ptr_array_add(s->pending_nodes, po);
    blk_open_async(&po->o, vb_node_open_done, po);
}

/*
 * The keys of blockdev-add that every driver has (QEMU's
 * BlockdevOptionsBase), read before the driver's own; each driver says
 * which of them it serves.
 */
typedef struct VbBlockdevBase {
    const char *driver;         /* as given: "host_device", "null-aio", ... */
    const char *name;           /* node-name; NULL: not given */
    bool ro;                    /* read-only */
    bool auto_ro;               /* auto-read-only */
    const char *discard;        /* discard as given; NULL: not given */
    BlockDiscardMode mode;      /* discard=unmap (or on): UNMAP; else
                                 * QEMU's default, IGNORE */
    const char *detect_zeroes;  /* detect-zeroes as given unless it is off
                                 * (all we serve); else NULL */
    bool direct;                /* cache.direct */
    bool no_flush;              /* cache.no-flush */
    bool qmp;                   /* a QMP blockdev-add (it has a QmpPending) */
} VbBlockdevBase;

/*
 * One driver's part of blockdev-add: read its own keys from @a, check
 * the base keys @b it does not serve, and open the node.  With @p (QMP)
 * a driver whose open would block the main loop opens in a worker: it
 * sets *@deferred and answers @p itself; otherwise the node (or NULL with
 * @errp set) is the answer.
 */
typedef VbNode *VbBlockdevAddFn(VbState *s, QmpArgs *a,
                                const VbBlockdevBase *b, QmpPending *p,
                                bool *deferred, GError **errp);

/*
 * What a file or null node does not serve of the base keys, and nothing
 * may be left unread: checked after the driver's keys, so that an error
 * names the first problem in QEMU's order.
 */
static bool vb_blockdev_check_base(QmpArgs *a, const VbBlockdevBase *b,
                                   GError **errp)
{
    if (!qmp_args_check_done(a, errp)) {
        return false;
    }
    if (!b->name) {
        vb_set_error(errp, "'node-name' must be specified for the root "
                     "node");
        return false;
    }
    if (b->auto_ro) {
        vb_set_error(errp, "auto-read-only=on is not supported: say "
                     "read-only=on or off");
        return false;
    }
    if (b->detect_zeroes) {
        vb_set_error(errp, "detect-zeroes=%s is not supported (only off): "
                     "it would scan every written buffer", b->detect_zeroes);
        return false;
    }
    if (b->no_flush) {
        vb_set_error(errp, "cache.no-flush=on is not supported: flushes "
                     "always reach the image");
        return false;
    }
    return true;
}

/*
 * The secret objects, for a driver's key-secret=ID: a copy in key pages
 * (vb_key_alloc()), which outlives a secret deleted while an open waits
 * in its worker.
 */
static char *vb_blockdev_secret(void *opaque, const char *id, size_t *size,
                                GError **errp)
{
    VbSecretObj *sec = vb_secret_find(opaque, id);

    if (!sec) {
        vb_set_error(errp, "No secret with id '%s'", id);
        return NULL;
    }
    return vb_key_dup(sec->base64, size);
}

/*
 * A node of a driver of the registry (an image: file, host_device,
 * null-co, rbd, ...): the common keys are in @b, the driver reads its own
 * from @a (blk_options_parse()).  With @p (QMP) the node opens through
 * blk_open_async(), which answers @p (at once unless the driver waits on
 * the network): *@deferred is set.
 */
static VbNode *vb_blockdev_add_image(VbState *s, QmpArgs *a,
                                     const VbBlockdevBase *b, QmpPending *p,
                                     bool *deferred, GError **errp)
{
    BlockOptsParse parse = {
        .driver = b->driver,
        .secret = vb_blockdev_secret,
        .secret_free = vb_key_free,
        .opaque = s,
    };
    BlockOptions o;
    VbNode *n = NULL;

    blk_options_init(&o);
    o.readonly = b->ro;
    o.cache_direct = b->direct;
    if (!blk_options_parse(&o, a, &parse, errp) ||
        !vb_blockdev_check_base(a, b, errp) ||
        !blk_options_check(&o, &parse, errp)) {
        goto out;
    }
    if (p) {
        *deferred = true;
        vb_node_open_async(s, b->name, b->driver, &o, b->mode, a->obj,
                           &parse, p);
        goto out;
    }
    if (vb_node_name_free(s, b->name, errp)) {
        BlockBackend *blk = blk_open(&o, errp);

        if (blk) {
            n = vb_node_register(s, b->name, b->driver, &o, b->mode, blk);
        }
    }
out:
    blk_options_parse_cleanup(&parse);
    return n;
}

static VbNode *vb_blockdev_add_common(VbState *s, JsonObject *args,
                                      bool keyval, QmpPending *p,
                                      bool *deferred, GError **errp);

/*
 * Drop @n, the implicit file child of a node just deleted (or never
 * completed), unless something else uses it now; then its own implicit
 * child, and so on down.
 */
static void vb_node_drop_implicit(VbState *s, VbNode *n)
{
    while (n && !n->user && !n->filter && !n->parents && !n->resizing) {
        VbNode *below = n->implicit_file ? n->file : NULL;

        g_ptr_array_remove(s->nodes, n);
        vb_node_free_full(n, false);
        n = below;
    }
}

/*
 * The driver of an inline definition @def, or of one nested in it, that
 * opens in a worker (it waits on the network), or NULL.
 */
static const char *vb_def_opens_in_worker(JsonObject *def)
{
    JsonNode *d = json_object_get_member(def, "driver");
    JsonNode *f = json_object_get_member(def, "file");
    const char *name = d ? qmp_node_str(d) : NULL;

    if (name && blk_driver_opens_in_worker(name)) {
        return name;
    }
    return f && JSON_NODE_HOLDS_OBJECT(f) ?
           vb_def_opens_in_worker(json_node_get_object(f)) : NULL;
}

/*
 * The `file` child of a raw or throttle node (QEMU's BlockdevRef): the
 * node-name of a node added before, or an inline definition (dotted keys
 * file.driver=... or a JSON object) of any driver we have, opened here as
 * an implicit child.  Without a node-name of its own that child is named
 * "#blockNNN": QEMU's form for implicit nodes, which a user's node-name
 * (a letter first) cannot take.  As in QEMU the inline child inherits
 * read-only, discard and cache.direct from its parent unless it sets
 * them.  *@implicit says whether the child was opened here (the caller
 * owns it then: vb_node_drop_implicit() on failure).  With @qmp an
 * inline node of a driver that opens in a worker (rbd: it waits for the
 * cluster) is refused: QMP opens such a node only for a blockdev-add of
 * its own.
 */
static VbNode *vb_blockdev_file(VbState *s, QmpArgs *a, const char *drv,
                                bool ro, const char *discard, bool direct,
                                bool qmp, bool *implicit, GError **errp)
{
    JsonNode *ref = json_object_get_member(a->obj, "file");
    g_auto(QmpArgs) sub = { 0 };
    g_autoptr(JsonObject) def = NULL;
    g_autofree char *auto_name = NULL;
    GError *err = NULL;
    const char *file = NULL;
    VbNode *child;

    *implicit = false;
    if (!ref || !JSON_NODE_HOLDS_OBJECT(ref)) {
        if (!qmp_args_str(a, "file", true, &file, errp)) {
            return NULL;
        }
        child = vb_node_find(s, file);
        if (!child) {
            vb_set_error(errp, "Cannot find device='' nor node-name='%s' "
                         "(add the node below the %s node first, or define "
                         "it inline: file.driver=file,file.filename=PATH)",
                         file, drv);
        }
        return child;
    }
    if (!qmp_args_object(a, "file", true, &sub, NULL, errp)) {
        return NULL;
    }
    if (qmp && vb_def_opens_in_worker(sub.obj)) {
        const char *w = vb_def_opens_in_worker(sub.obj);

        vb_set_error(errp, "%s: an inline driver=%s file is not supported "
                     "in QMP (its open waits on the network, and the "
                     "monitor would wait with it): add the %s node with a "
                     "blockdev-add of its own and give its node-name as "
                     "file", drv, w, w);
        return NULL;
    }
    /* A copy: the caller's arguments stay as given. */
    def = json_object_new();
    {
        GList *members = json_object_get_members(sub.obj);

        for (GList *l = members; l; l = l->next) {
            json_object_set_member(def, l->data,
                                   json_node_copy(
                                       json_object_get_member(sub.obj,
                                                              l->data)));
        }
        g_list_free(members);
    }
    if (!json_object_has_member(def, "node-name")) {
        auto_name = vb_node_auto_name(s);
        json_object_set_string_member(def, "node-name", auto_name);
    }
    if (ro && !json_object_has_member(def, "read-only")) {
        if (a->keyval) {
            json_object_set_string_member(def, "read-only", "on");
        } else {
            json_object_set_boolean_member(def, "read-only", true);
        }
    }
    if (discard && !json_object_has_member(def, "discard")) {
        json_object_set_string_member(def, "discard", discard);
    }
    if (direct) {
        JsonNode *c = json_object_get_member(def, "cache");

        if (!c) {
            JsonObject *co = json_object_new();

            if (a->keyval) {
                json_object_set_string_member(co, "direct", "on");
            } else {
                json_object_set_boolean_member(co, "direct", true);
            }
            json_object_set_object_member(def, "cache", co);
        } else if (JSON_NODE_HOLDS_OBJECT(c) &&
                   !json_object_has_member(json_node_get_object(c),
                                           "direct")) {
            if (a->keyval) {
                json_object_set_string_member(json_node_get_object(c),
                                              "direct", "on");
            } else {
                json_object_set_boolean_member(json_node_get_object(c),
                                               "direct", true);
            }
        }
    }
    /* No QMP deferral here: the parent is answered with its child. */
    child = vb_blockdev_add_common(s, def, a->keyval, NULL, NULL, &err);
    if (!child) {
        vb_set_error(errp, "%s: file: %s", drv, err->message);
        g_error_free(err);
        return NULL;
    }
    *implicit = true;
    return child;
}

/*
 * After vb_blockdev_file() opened @child for the node @name: @name was
 * free before, but an inline definition can name its node (or one below
 * it) @name too, and two nodes of one name could never be deleted.  If
 * it did, drop what it opened and fail.
 */
static bool vb_blockdev_name_still_free(VbState *s, const char *name,
                                        VbNode *child, bool implicit,
                                        GError **errp)
{
    if (!vb_node_find(s, name)) {
        return true;
    }
    vb_set_error(errp, "Duplicate nodes with node-name='%s': the inline "
                 "file definition names its node '%s' too; give it a "
                 "node-name of its own", name, name);
    if (implicit) {
        vb_node_drop_implicit(s, child);
    }
    return false;
}

/*
 * driver=raw,node-name=NAME,file=NODE (or an inline file): QEMU's raw
 * format node over a protocol node.  Our images are raw already, so the
 * node is an alias of its file child: it shares the child's
 * BlockBackend, and exporting it costs nothing per request over
 * exporting the child.  QEMU's offset and size (a slice of the image)
 * are refused.
 */
static VbNode *vb_blockdev_add_raw(VbState *s, QmpArgs *a,
                                   const VbBlockdevBase *b, QmpPending *p,
                                   bool *deferred, GError **errp)
{
    const char *name = b->name;
    bool ro = b->ro;
    bool implicit = false;
    VbNode *child, *n;

    if (qmp_args_has(a, "offset") || qmp_args_has(a, "size")) {
        vb_set_error(errp, "raw: offset/size are not supported; export the "
                     "whole image (driver=raw without offset and size)");
        return NULL;
    }
    if (!name) {
        vb_set_error(errp, "'node-name' must be specified for the root "
                     "node");
        return NULL;
    }
    if (b->auto_ro || b->detect_zeroes || b->no_flush) {
        vb_set_error(errp, "driver=raw: auto-read-only=on, detect-zeroes "
                     "and cache.no-flush=on are not supported");
        return NULL;
    }
    if (!qmp_args_has(a, "file")) {
        vb_set_error(errp, "Parameter 'file' is missing: give file=NODE-NAME "
                     "or an inline definition (file.driver=file,"
                     "file.filename=PATH)");
        return NULL;
    }
    if (!vb_node_name_free(s, name, errp)) {
        return NULL;
    }
    /* Everything but file first: no child opened for a bad command. */
    g_hash_table_add(a->used, g_strdup("file"));
    if (!qmp_args_check_done(a, errp)) {
        return NULL;
    }
    g_hash_table_remove(a->used, "file");
    child = vb_blockdev_file(s, a, "raw", ro, b->discard, b->direct, b->qmp,
                             &implicit, errp);
    if (!child) {
        return NULL;
    }
    if (!vb_blockdev_name_still_free(s, name, child, implicit, errp)) {
        return NULL;
    }
    if (!ro && child->readonly) {
        /* QEMU: a writable format node needs a writable child. */
        vb_set_error(errp, "Block node is read-only: '%s' below '%s' was "
                     "added with read-only=on; add '%s' with read-only=on "
                     "too", child->name, name, name);
        if (implicit) {
            vb_node_drop_implicit(s, child);
        }
        return NULL;
    }
    n = g_new0(VbNode, 1);
    n->name = g_strdup(name);
    n->driver = g_strdup("raw");
    n->filename = g_strdup(child->filename);
    n->blk = child->blk;
    n->alias = true;
    n->readonly = ro || child->readonly;
    n->cache_direct = child->cache_direct;
    /*
     * QEMU passes a discard down only if every layer has discard=unmap;
     * otherwise the raw layer drops it (and still offers it).
     */
    n->discard = child->discard == BLOCK_DISCARD_UNMAP &&
                 b->mode == BLOCK_DISCARD_UNMAP ? BLOCK_DISCARD_UNMAP :
                                                  BLOCK_DISCARD_IGNORE;
    n->file = child;
    n->implicit_file = implicit;
    child->parents++;
    g_ptr_array_add(s->nodes, n);
    return n;
}

/*
 * driver=FORMAT,node-name=NAME,file=NODE[,backing=NODE|null]
 * [,backing.driver=raw|FORMAT][,the driver's keys]: a format of the
 * registry (qcow2) over its file node (added before, or inline).  Without
 * backing= the driver opens the backing file the image names (read-only,
 * as an implicit node of its own); backing=null serves the image without
 * it.
 */
static VbNode *vb_blockdev_add_format(VbState *s, QmpArgs *a,
                                      const VbBlockdevBase *b, QmpPending *p,
                                      bool *deferred, GError **errp)
{
    BlockOptsParse parse = { .driver = b->driver };
    JsonNode *bref = json_object_get_member(a->obj, "backing");
    BlockOptions o;
    VbNode *child = NULL, *backing = NULL, *n = NULL;
    const char *bdrv = NULL;
    bool implicit = false, no_backing = false;
    BlockBackend *blk;

    if (!qmp_args_has(a, "file")) {
        vb_set_error(errp, "Parameter 'file' is missing: give file=NODE-NAME "
                     "or an inline definition (file.driver=file,"
                     "file.filename=PATH)");
        return NULL;
    }
    if (bref && JSON_NODE_HOLDS_NULL(bref)) {
        no_backing = true;
        g_hash_table_add(a->used, g_strdup("backing"));
    } else if (bref && JSON_NODE_HOLDS_OBJECT(bref)) {
        g_auto(QmpArgs) sub = { 0 };

        if (!qmp_args_object(a, "backing", true, &sub, NULL, errp) ||
            !qmp_args_str(&sub, "driver", true, &bdrv, errp) ||
            !qmp_args_check_done(&sub, errp)) {
            g_prefix_error(errp, "backing: ");
            return NULL;
        }
        if (strcmp(bdrv, "raw") && !blk_driver_is_format(bdrv)) {
            vb_set_error(errp, "backing.driver=%s is not supported: give "
                         "raw or a format (qcow2)", bdrv);
            return NULL;
        }
    } else if (bref) {
        const char *bname = NULL;

        if (!qmp_args_str(a, "backing", true, &bname, errp)) {
            return NULL;
        }
        if (!strcmp(bname, "null") || !*bname) {
            no_backing = true;
        } else {
            backing = vb_node_find(s, bname);
            if (!backing) {
                vb_set_error(errp, "Cannot find device='' nor "
                             "node-name='%s' (add the backing node first, "
                             "or give backing=null)", bname);
                return NULL;
            }
        }
    }
    if (!b->name) {
        vb_set_error(errp, "'node-name' must be specified for the root "
                     "node");
        return NULL;
    }
    if (!vb_node_name_free(s, b->name, errp)) {
        return NULL;
    }
    blk_options_init(&o);
    o.readonly = b->ro;
    g_hash_table_add(a->used, g_strdup("file"));
    if (!blk_options_parse(&o, a, &parse, errp) ||
        !vb_blockdev_check_base(a, b, errp)) {
        goto out;
    }
    g_hash_table_remove(a->used, "file");
    o.no_backing = no_backing;
    o.backing = backing ? backing->blk : NULL;
    o.backing_driver = bdrv;
    child = vb_blockdev_file(s, a, o.driver, b->ro, b->discard, b->direct,
                             b->qmp, &implicit, errp);
    if (!child) {
        goto out;
    }
    if (!vb_blockdev_name_still_free(s, b->name, child, implicit, errp)) {
        goto out;
    }
    if (child->user || child->filter) {
        vb_set_error(errp, "Node '%s' is in use (exported or throttled): a "
                     "%s node needs its file node for itself", child->name,
                     o.driver);
        goto fail;
    }
    o.file = child->blk;
    blk = blk_open(&o, errp);
    if (!blk) {
        goto fail;
    }
    n = vb_node_register(s, b->name, o.driver, &o, b->mode, blk);
    n->format = true;
    n->file = child;
    n->implicit_file = implicit;
    n->backing = backing;
    n->cache_direct = child->cache_direct;
    child->parents++;
    if (backing) {
        backing->parents++;
    }
    goto out;
fail:
    if (implicit) {
        vb_node_drop_implicit(s, child);
    }
out:
    blk_options_parse_cleanup(&parse);
    return n;
}

/*
 * driver=throttle,node-name=NAME,throttle-group=GROUP,file=NODE: QEMU's
 * throttle filter over the node NODE (added before, or defined inline:
 * see vb_blockdev_file()), limited by the throttle-group object GROUP.
 * Exporting NAME throttles the export.
 */
static VbNode *vb_blockdev_add_throttle(VbState *s, QmpArgs *a,
                                        const VbBlockdevBase *b,
                                        QmpPending *p, bool *deferred,
                                        GError **errp)
{
    const char *name = b->name;
    const char *group = NULL, *file;
    ThrottleGroup *tg;
    BlockBackend *blk;
    GError *err = NULL;
    VbNode *child, *n;
    bool implicit = false;

    if (!qmp_args_has(a, "file")) {
        vb_set_error(errp, "Parameter 'file' is missing: give file=NODE-NAME "
                     "or an inline definition (file.driver=file,"
                     "file.filename=PATH)");
        return NULL;
    }
    g_hash_table_add(a->used, g_strdup("file"));
    if (!qmp_args_str(a, "throttle-group", true, &group, errp) ||
        !qmp_args_check_done(a, errp)) {
        return NULL;
    }
    g_hash_table_remove(a->used, "file");
    if (!name) {
        vb_set_error(errp, "'node-name' must be specified for the root "
                     "node");
        return NULL;
    }
    tg = vb_throttle_group_find(s, group);
    if (!tg) {
        vb_set_error(errp, "Throttle group '%s' not found: add it first "
                     "with --object throttle-group,id=%s,limits.iops-total=N "
                     "(or object-add)", group, group);
        return NULL;
    }
    if (!vb_node_name_free(s, name, errp)) {
        return NULL;
    }
    child = vb_blockdev_file(s, a, "throttle", false, b->discard, false,
                             b->qmp, &implicit, errp);
    if (!child) {
        return NULL;
    }
    if (!vb_blockdev_name_still_free(s, name, child, implicit, errp)) {
        return NULL;
    }
    file = child->name;
    if (child->filter) {
        vb_set_error(errp, "Node '%s' already has the throttle node '%s' on "
                     "top: export that one, or throttle '%s' with the "
                     "group it uses", file, child->filter->name,
                     child->filter->name);
        return NULL;
    }
    blk = blk_throttle_new(child->blk, tg, &err);
    if (!blk) {
        vb_set_error(errp, "%s", err->message);
        g_error_free(err);
        if (implicit) {
            vb_node_drop_implicit(s, child);
        }
        return NULL;
    }
    n = g_new0(VbNode, 1);
    n->name = g_strdup(name);
    n->driver = g_strdup("throttle");
    n->filename = g_strdup(child->filename);
    n->blk = blk;
    n->readonly = child->readonly;
    n->cache_direct = child->cache_direct;
    /* As a raw node: a discard goes down only if both layers unmap. */
    n->discard = child->discard == BLOCK_DISCARD_UNMAP &&
                 b->mode == BLOCK_DISCARD_UNMAP ? BLOCK_DISCARD_UNMAP :
                                                  BLOCK_DISCARD_IGNORE;
    n->file = child;
    n->implicit_file = implicit;
    child->filter = n;
    g_ptr_array_add(s->nodes, n);
    return n;
}

/*
 * The kinds of node the monitor builds over other nodes; every other
 * driver= is an image of a driver of the registry (vb_blockdev_add_image()).
 */
static const struct {
    const char *name;
    VbBlockdevAddFn *add;
} vb_blockdev_graph[] = {
    { "throttle", vb_blockdev_add_throttle },
    { "raw", vb_blockdev_add_raw },
};

/*
 * blockdev-add; with @p (QMP), the open goes through blk_open_async():
 * then *@deferred is set and @p is answered when it ends, else the node
 * (or NULL with @errp set) is the answer.
 */
static VbNode *vb_blockdev_add_common(VbState *s, JsonObject *args,
                                      bool keyval, QmpPending *p,
                                      bool *deferred, GError **errp)
{
    static const struct {
        const char *name;
        BlockDiscardMode mode;
    } discards[] = {
        { "ignore", BLOCK_DISCARD_IGNORE },
        { "unmap", BLOCK_DISCARD_UNMAP },
        { "off", BLOCK_DISCARD_IGNORE },      /* QEMU's aliases */
        { "on", BLOCK_DISCARD_UNMAP },
    };
    static const char *const dzs[] = { "off", "on", "unmap", NULL };
    g_auto(QmpArgs) a = { 0 };
    g_auto(QmpArgs) cache = { 0 };
    VbBlockdevAddFn *add = vb_blockdev_add_image;
    int discard = -1, dz = -1;
    VbBlockdevBase b = { .qmp = p != NULL, .mode = BLOCK_DISCARD_IGNORE };

    qmp_args_init(&a, args, keyval, NULL);
    if (!qmp_args_str(&a, "driver", true, &b.driver, errp)) {
        return NULL;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(vb_blockdev_graph); i++) {
        if (!strcmp(vb_blockdev_graph[i].name, b.driver)) {
            add = vb_blockdev_graph[i].add;
        }
    }
    if (blk_driver_is_format(b.driver)) {
        add = vb_blockdev_add_format;
    }
    /* An unknown driver first, as QEMU. */
    if ((add == vb_blockdev_add_image &&
         !blk_driver_check_name(b.driver, errp)) ||
        !qmp_args_str(&a, "node-name", false, &b.name, errp) ||
        !qmp_args_bool(&a, "read-only", &b.ro, errp) ||
        !qmp_args_bool(&a, "auto-read-only", &b.auto_ro, errp) ||
        !QMP_ARGS_ENUM_TABLE(&a, "discard", discards, name, false, &discard,
                             errp) ||
        !qmp_args_enum(&a, "detect-zeroes", dzs, false, &dz, errp) ||
        !qmp_args_object(&a, "cache", false, &cache, NULL, errp) ||
        !qmp_args_bool(&cache, "direct", &b.direct, errp) ||
        !qmp_args_bool(&cache, "no-flush", &b.no_flush, errp) ||
        !qmp_args_check_done(&cache, errp)) {
        return NULL;
    }
    if (discard >= 0) {
        b.discard = discards[discard].name;
        b.mode = discards[discard].mode;
    }
    if (dz >= 0 && strcmp(dzs[dz], "off")) {
        b.detect_zeroes = dzs[dz];
    }
    return add(s, &a, &b, p, deferred, errp);
}

VbNode *vb_blockdev_add(VbState *s, JsonObject *args, bool keyval,
                        GError **errp)
{
    return vb_blockdev_add_common(s, args, keyval, NULL, NULL, errp);
}

/* Deferred reply: a node may open in a worker (see VbPendingOpen). */
static void vb_qmp_blockdev_add(void *opaque, JsonObject *args,
                                QmpPending *p)
{
    GError *err = NULL;
    bool deferred = false;

    if (vb_blockdev_add_common(opaque, args, false, p, &deferred, &err)) {
        qmp_pending_complete(p, vb_empty(), NULL);
    } else if (!deferred) {
        qmp_pending_complete(p, NULL, err);
    }
}

static JsonNode *vb_qmp_blockdev_del(void *opaque, JsonObject *args,
                                     GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *name = NULL;
    VbNode *n;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "node-name", true, &name, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    n = vb_node_find(s, name);
    if (!n && vb_pending_find(s, name)) {
        vb_set_error(errp, "Node '%s' is still being opened (its "
                     "blockdev-add has not returned yet); delete it after "
                     "that command's reply", name);
        return NULL;
    }
    if (!n) {
        vb_set_error(errp, "Failed to find node with node-name='%s'", name);
        return NULL;
    }
    if (n->resizing) {
        vb_set_error(errp, "Node '%s' is being resized (its block_resize "
                     "has not returned yet); delete it after that "
                     "command's reply", name);
        return NULL;
    }
    if (n->user || n->nbd_exports || vb_job_uses_node(n)) {
        vb_set_error(errp, "Node %s is in use", name);
        return NULL;
    }
    if (n->filter) {
        vb_set_error(errp, "Node '%s' is busy: the throttle node '%s' is on "
                     "top of it; delete that one first", name,
                     n->filter->name);
        return NULL;
    }
    if (n->parents) {
        const char *parent = "?";
        const char *pdrv = "?";
        bool format = false;

        for (guint i = 0; i < s->nodes->len; i++) {
            VbNode *p = g_ptr_array_index(s->nodes, i);

            if ((p->alias || p->format) &&
                (p->file == n || p->backing == n)) {
                parent = p->name;
                format = p->format;
                pdrv = p->driver;
                break;
            }
        }
        if (format) {
            vb_set_error(errp, "Block device %s is in use: the %s node "
                         "'%s' uses it as its file or backing child; delete "
                         "that one first", name, pdrv, parent);
        } else {
            vb_set_error(errp, "Block device %s is in use: the raw node "
                         "'%s' uses it as its file child; delete that one "
                         "first", name, parent);
        }
        return NULL;
    }
    if (n->snapshotting) {
        vb_set_error(errp, "Node '%s' is in use by a blockdev-snapshot that "
                     "has not returned yet", name);
        return NULL;
    }
    vb_node_delete(s, n);
    return vb_empty();
}

void vb_node_delete(VbState *s, VbNode *n)
{
    VbNode *below = n->implicit_file ? n->file : NULL;

    g_ptr_array_remove(s->nodes, n);
    vb_node_free_full(n, false);
    /* As QEMU: an inline child goes with the node that defined it. */
    vb_node_drop_implicit(s, below);
}

/* ---- nodes: resize ---------------------------------------------------- */

/* A block_resize whose resize runs in a worker (driver=rbd). */
typedef struct VbResizeJob {
    VbNode *node;               /* not deleted while resizing, nor is
                                 * any node below it */
    uint64_t size;
    QmpPending *p;
} VbResizeJob;

/* The front-end of @n's export learns the new size @size. */
static void vb_resize_tell(VbNode *n, uint64_t size, bool notified)
{
    if (!notified && vu_blk_export_is_connected(n->user->exp) && size != 0) {
        info_report("export '%s': the front-end has no back-end channel "
                    "(CONFIG_CHANGE_MSG); the guest sees the new size "
                    "when it reads the config space again", n->user->id);
    }
}

/*
 * Mark @n and every node below it (its file, that one's file, ...) as
 * being resized, or no longer.  A raw node shares its file's
 * BlockBackend, and a throttle node's resize reaches its file's: the
 * worker uses the image of the bottom node whichever node was named, so
 * none of them may be closed (vb_nodes_cleanup()), deleted or resized
 * again until it is done.
 */
static void vb_resize_mark(VbNode *n, bool resizing)
{
    for (; n; n = n->file) {
        n->resizing = resizing;
    }
}

/* Main thread: the worker's resize of @opaque ended. */
static void vb_resize_done(void *opaque, GError *err)
{
    VbResizeJob *job = opaque;
    VbNode *n = job->node;
    bool notified = false;

    vb_resize_mark(n, false);
    if (err) {
        qmp_pending_complete(job->p, NULL, err);
    } else {
        /* The export may have gone (or come) meanwhile. */
        if (n->user) {
            vu_blk_export_resized(n->user->exp, job->size, &notified);
            vb_resize_tell(n, job->size, notified);
        }
        qmp_pending_complete(job->p, vb_empty(), NULL);
    }
    g_free(job);
}

/*
 * Deferred reply: resizing an rbd image waits for the cluster, so it runs
 * in a worker (blk_truncate_async()); the others resize at once.
 */
static void vb_qmp_block_resize(void *opaque, JsonObject *args,
                                QmpPending *p)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    GError *err = NULL;
    GError **errp = &err;
    const char *device = NULL, *name = NULL;
    int64_t size = 0;
    VbResizeJob *job;
    VbNode *n;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "device", false, &device, errp) ||
        !qmp_args_str(&a, "node-name", false, &name, errp) ||
        !qmp_args_int(&a, "size", true, &size, NULL, errp) ||
        !qmp_args_check_done(&a, errp)) {
        goto fail;
    }
    /* vhost-blkd has no named BlockBackends ("devices"), as QSD. */
    n = device ? NULL : vb_node_find(s, name);
    if (!n) {
        vb_set_error(errp, "Cannot find device='%s' nor node-name='%s'",
                     device ? device : "", name && !device ? name : "");
        goto fail;
    }
    if (size < 0) {
        vb_set_error(errp, "Parameter 'size' expects a >0 size");
        goto fail;
    }
    if (n->resizing) {
        vb_set_error(errp, "Node '%s' is being resized already (an earlier "
                     "block_resize has not returned yet); wait for its "
                     "reply", n->name);
        goto fail;
    }
    for (VbNode *below = n->file; below; below = below->file) {
        if (below->resizing) {
            vb_set_error(errp, "Node '%s' is being resized already: a "
                         "block_resize of its file node '%s' has not "
                         "returned yet; wait for its reply", n->name,
                         below->name);
            goto fail;
        }
    }
    /* The image resized is n's or one below it (a throttle or raw node's
     * file); the nodes above n share it. */
    for (guint i = 0; i < s->nodes->len; i++) {
        VbNode *other = g_ptr_array_index(s->nodes, i);
        const char *holder = NULL;
        bool related = false;

        for (VbNode *m = other; m && !related; m = m->file) {
            related = m == n;
        }
        for (VbNode *m = n; m && !related; m = m->file) {
            related = m == other;
        }
        if (related) {
            holder = vb_job_using_image(s, other->blk);
        }
        if (holder) {
            vb_set_error(errp, "Node '%s' is in use by %s, which needs its "
                         "size unchanged: wait for the job to end or "
                         "cancel it, then resize", n->name, holder);
            goto fail;
        }
    }
    for (guint i = 0; !n->user && i < s->nodes->len; i++) {
        VbNode *other = g_ptr_array_index(s->nodes, i);

        if (other->blk == n->blk && other->user) {
            /* Its export must learn the new size: go through it. */
            vb_set_error(errp, "Node '%s' is the image of node '%s', which "
                         "export '%s' serves: resize node-name='%s'",
                         n->name, other->name, other->user->id, other->name);
            goto fail;
        }
    }
    if (n->user && !vu_blk_export_resize_check(n->user->exp, size, errp)) {
        goto fail;
    }
    job = g_new0(VbResizeJob, 1);
    job->node = n;
    job->size = size;
    job->p = p;
    vb_resize_mark(n, true);
    blk_truncate_async(n->blk, size, vb_resize_done, job);
    return;

fail:
    qmp_pending_complete(p, NULL, err);
}

static const QmpCommand vb_blockdev_commands[] = {
    { "blockdev-add", NULL, vb_qmp_blockdev_add },
    { "blockdev-del", vb_qmp_blockdev_del },
    { "block_resize", NULL, vb_qmp_block_resize },
};

void vb_blockdev_register(GArray *table)
{
    g_array_append_vals(table, vb_blockdev_commands,
                        G_N_ELEMENTS(vb_blockdev_commands));
}
