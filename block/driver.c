/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The driver registry: the one place that maps a driver's name to the
 * driver.  A built-in driver registers itself from its own file
 * (BLOCK_DRIVER_REGISTER, a constructor: the block library is linked
 * whole, so every driver in it is there); a driver in a module
 * (block-NAME.so, include/block/module.h) is registered by a built-in file
 * of its own with its names and option parser (BLOCK_MODULE_DRIVER_REGISTER)
 * and loaded on its first use, so that a process that never opens such a
 * node maps none of its libraries; tests add drivers of their own with
 * bdrv_register().  Adding a driver: its .c file with its option parser
 * and BLOCK_DRIVER_REGISTER line, and one line in block/meson.build.
 *
 * Options (blk_options_parse()): every syntax of every front end reaches
 * the driver's parser as one JsonObject; the registry finds the driver by
 * name, alias or --export key and says what to do for a name it does not
 * know.
 *
 * Threads: the main thread (opening nodes), except bdrv_driver_names(),
 * which only reads the table.
 */
#include "qemu/osdep.h"
#include "block/block_int.h"
#include "block/module.h"

/*
 * Drivers in modules, known before they are loaded (BlockModuleDriver,
 * registered by the driver's built-in options file); never shrinks.
 */
static GPtrArray *block_modules;

void bdrv_register_module(const BlockModuleDriver *m)
{
    if (!block_modules) {
        block_modules = g_ptr_array_new();
    }
    g_ptr_array_add(block_modules, (gpointer)m);
}

static bool bdrv_name_in(const char *name, const char *main,
                         const char *const *aliases)
{
    return !strcmp(main, name) ||
           (aliases && g_strv_contains(aliases, name));
}

static const BlockModuleDriver *bdrv_module_lookup(const char *name,
                                                   bool aliases)
{
    for (guint i = 0; block_modules && i < block_modules->len; i++) {
        const BlockModuleDriver *m = g_ptr_array_index(block_modules, i);

        if (bdrv_name_in(name, m->name, aliases ? m->aliases : NULL)) {
            return m;
        }
    }
    return NULL;
}

/* Built-in drivers, registered by their files' constructors
 * (BLOCK_DRIVER_REGISTER), and drivers tests add; never shrinks. */
static GPtrArray *block_drivers;

void bdrv_register(const BlockDriver *drv)
{
    if (!block_drivers) {
        block_drivers = g_ptr_array_new();
    }
    g_ptr_array_add(block_drivers, (gpointer)drv);
}

static const BlockDriver *bdrv_lookup(const char *name, bool aliases)
{
    for (guint i = 0; block_drivers && i < block_drivers->len; i++) {
        const BlockDriver *drv = g_ptr_array_index(block_drivers, i);

        if (bdrv_name_in(name, drv->format_name,
                         aliases ? drv->aliases : NULL)) {
            return drv;
        }
    }
    return NULL;
}

char *bdrv_driver_names(void)
{
    GString *s = g_string_new(NULL);
    g_autoptr(GPtrArray) names = g_ptr_array_new();

    for (guint i = 0; block_drivers && i < block_drivers->len; i++) {
        const BlockDriver *drv = g_ptr_array_index(block_drivers, i);

        if (!drv->is_filter) {
            g_ptr_array_add(names, (gpointer)drv->format_name);
        }
    }
    for (guint i = 0; block_modules && i < block_modules->len; i++) {
        const BlockModuleDriver *m = g_ptr_array_index(block_modules, i);

        g_ptr_array_add(names, (gpointer)m->name);
    }
    for (guint i = 0; i < names->len; i++) {
        g_string_append_printf(s, "%s%s",
                               i == 0 ? "" :
                               i + 1 == names->len ? " or " : ", ",
                               (const char *)g_ptr_array_index(names, i));
    }
    return g_string_free(s, false);
}

const BlockDriver *bdrv_default_overlay_driver(void)
{
    for (guint i = 0; block_drivers && i < block_drivers->len; i++) {
        const BlockDriver *drv = g_ptr_array_index(block_drivers, i);

        if (drv->default_overlay) {
            return drv;
        }
    }
    return NULL;
}

const BlockDriver *bdrv_find_driver(const char *name, const char *what,
                                    GError **errp)
{
    const BlockDriver *drv = bdrv_lookup(name, false);
    g_autofree char *names = NULL;

    if (drv) {
        return drv;
    }
    if (bdrv_module_lookup(name, false)) {
        return block_module_load_driver(name, what, errp);
    }
    names = bdrv_driver_names();
    g_set_error(errp, VB_ERROR, 0,
                "unknown block driver '%s' (use driver=%s%s)", name, names,
                CONFIG_RBD ? "" : "; this build has no driver=rbd: install "
                "librbd-dev and rebuild");
    return NULL;
}

const BlockDriver *bdrv_find_driver_for(const BlockOptions *opts,
                                        GError **errp)
{
    const char *name = opts->driver ? opts->driver : "file";
    const BlockModuleDriver *m = bdrv_module_lookup(name, false);
    g_autofree char *what = m && m->describe ? m->describe(opts) : NULL;
    const BlockDriver *drv;

    drv = bdrv_find_driver(name, what ? what : name, errp);
    if (drv && drv->is_filter) {
        g_set_error(errp, VB_ERROR, 0, "driver=%s is a filter: it goes "
                    "over another node, it does not open an image", name);
        return NULL;
    }
    return drv;
}

/* ---- options ---------------------------------------------------------- */

/* What reads the options of the driver named @name (or an alias). */
typedef struct BlockDriverKeys {
    const char *name;           /* the driver's own */
    bool is_filter;
    bool open_any_thread;
    BlockDriverParseFunc *parse;
    BlockDriverCheckFunc *check;
} BlockDriverKeys;

static bool bdrv_keys_lookup(const char *name, BlockDriverKeys *k)
{
    const BlockDriver *drv = bdrv_lookup(name, true);
    const BlockModuleDriver *m = drv ? NULL : bdrv_module_lookup(name, true);

    if (drv) {
        *k = (BlockDriverKeys) {
            .name = drv->format_name,
            .is_filter = drv->is_filter,
            .open_any_thread = drv->bdrv_open_any_thread,
            .parse = drv->bdrv_parse_options,
            .check = drv->bdrv_check_options,
        };
        return true;
    }
    if (m) {
        *k = (BlockDriverKeys) {
            .name = m->name,
            .open_any_thread = m->open_any_thread,
            .parse = m->parse,
            .check = m->check,
        };
        return true;
    }
    return false;
}

const char *blk_driver_for_export_key(const char *key)
{
    for (guint i = 0; block_drivers && i < block_drivers->len; i++) {
        const BlockDriver *drv = g_ptr_array_index(block_drivers, i);

        if (!drv->is_filter && !g_strcmp0(drv->export_key, key)) {
            return drv->format_name;
        }
    }
    for (guint i = 0; block_modules && i < block_modules->len; i++) {
        const BlockModuleDriver *m = g_ptr_array_index(block_modules, i);

        if (!g_strcmp0(m->export_key, key)) {
            return m->name;
        }
    }
    return NULL;
}

char *blk_driver_export_names(void)
{
    return bdrv_driver_names();
}

bool blk_driver_exists(const char *name)
{
    const BlockDriver *drv = bdrv_lookup(name, false);

    return drv ? !drv->is_filter : bdrv_module_lookup(name, false) != NULL;
}

bool blk_driver_is_format(const char *name)
{
    const BlockDriver *drv = bdrv_lookup(name, false);

    return drv && drv->is_format;
}

bool blk_driver_opens_in_worker(const char *name)
{
    BlockDriverKeys k;

    return bdrv_keys_lookup(name, &k) && k.open_any_thread;
}

/*
 * Formats and protocols of QEMU that users may try: told what to do
 * instead of only that the name is unknown.
 */
static const char *const bdrv_qemu_only[] = {
    "qcow", "vmdk", "vdi", "vhdx", "vpc", "qed", "luks", "nbd",
    "iscsi", "nfs", "ssh", "http", "https", "gluster", "blkdebug",
    "copy-on-read", "compress", "nvme", "io_uring", "host_cdrom",
    "preallocate", NULL,
};

/* The names and aliases a node can give, for messages. */
static char *bdrv_option_names(void)
{
    g_autoptr(GPtrArray) names = g_ptr_array_new();
    GString *s = g_string_new(NULL);

    for (guint i = 0; block_drivers && i < block_drivers->len; i++) {
        const BlockDriver *drv = g_ptr_array_index(block_drivers, i);

        if (drv->is_filter) {
            continue;
        }
        g_ptr_array_add(names, (gpointer)drv->format_name);
        for (const char *const *a = drv->aliases; a && *a; a++) {
            g_ptr_array_add(names, (gpointer)*a);
        }
    }
    for (guint i = 0; block_modules && i < block_modules->len; i++) {
        const BlockModuleDriver *m = g_ptr_array_index(block_modules, i);

        g_ptr_array_add(names, (gpointer)m->name);
        for (const char *const *a = m->aliases; a && *a; a++) {
            g_ptr_array_add(names, (gpointer)*a);
        }
    }
    for (guint i = 0; i < names->len; i++) {
        g_string_append_printf(s, "%s%s", i ? ", " : "",
                               (const char *)g_ptr_array_index(names, i));
    }
    return g_string_free(s, false);
}

bool blk_driver_check_name(const char *name, GError **errp)
{
    BlockDriverKeys k;

    if (!bdrv_keys_lookup(name, &k) || k.is_filter) {
        if (g_strv_contains(bdrv_qemu_only, name)) {
            g_autofree char *names = bdrv_option_names();

            g_set_error(errp, VB_ERROR, 0, "Driver '%s' is not supported by "
                        "vhost-blkd: it serves only raw and qcow2 images "
                        "(driver=%s, and throttle and raw over any of "
                        "them); convert the image with qemu-img convert "
                        "-O qcow2 (or -O raw)",
                        name, names);
        } else {
            /* QEMU's (QAPI's) words. */
            g_set_error(errp, VB_ERROR, 0, "Parameter 'driver' does not "
                        "accept value '%s'", name);
        }
        return false;
    }
    return true;
}

bool blk_options_parse(BlockOptions *opts, QmpArgs *a, BlockOptsParse *p,
                       GError **errp)
{
    BlockDriverKeys k;

    if (!p->strings) {
        p->strings = g_ptr_array_new_with_free_func(g_free);
    }
    if (!blk_driver_check_name(p->driver, errp)) {
        return false;
    }
    bdrv_keys_lookup(p->driver, &k);
    opts->driver = k.name;
    return !k.parse || k.parse(opts, a, p, errp);
}

bool blk_options_check(const BlockOptions *opts, BlockOptsParse *p,
                       GError **errp)
{
    BlockDriverKeys k;

    if (!bdrv_keys_lookup(opts->driver, &k)) {
        g_set_error(errp, VB_ERROR, 0, "unknown block driver '%s'",
                    opts->driver);
        return false;
    }
    return !k.check || k.check(opts, p, errp);
}

void *blk_options_parse_keep(BlockOptsParse *p, void *mem)
{
    if (!p->strings) {
        p->strings = g_ptr_array_new_with_free_func(g_free);
    }
    g_ptr_array_add(p->strings, mem);
    return mem;
}

void blk_options_parse_cleanup(BlockOptsParse *p)
{
    g_clear_pointer(&p->strings, g_ptr_array_unref);
    if (p->key) {
        p->secret_free(p->key, p->key_size);
        p->key = NULL;
    }
}

void blk_node_names(BlockBackend *blk, const BlockOptions *opts,
                    const char *given, BlockNodeNames *out)
{
    const char *name = opts->driver ? opts->driver : "file";
    const BlockDriver *drv = bdrv_lookup(name, false);
    const BlockModuleDriver *m = drv ? NULL : bdrv_module_lookup(name, false);

    memset(out, 0, sizeof(*out));
    if (drv && drv->bdrv_node_names) {
        drv->bdrv_node_names(blk, opts, given, out);
        return;
    }
    out->driver = g_strdup(given ? given : name);
    out->filename = m && m->describe ? m->describe(opts) : g_strdup(name);
}

void blk_node_names_free(BlockNodeNames *n)
{
    g_clear_pointer(&n->driver, g_free);
    g_clear_pointer(&n->filename, g_free);
}

/* ---- creating images -------------------------------------------------- */

char *blk_create_options_keep(BlockCreateOptions *o, const char *str)
{
    char *copy = g_strdup(str);

    if (!o->strings) {
        o->strings = g_ptr_array_new_with_free_func(g_free);
    }
    g_ptr_array_add(o->strings, copy);
    return copy;
}

void blk_create_options_clear(BlockCreateOptions *o)
{
    g_clear_pointer(&o->driver_opts, g_free);
    g_clear_pointer(&o->strings, g_ptr_array_unref);
}

/* One create in a worker (see bdrv_create_run()). */
typedef struct BdrvCreateWork {
    BlockCreateOptions *o;
    AioContext *main_ctx;
    AioContext *ctx;            /* the worker's own */
    GError *err;
    BlockCreateCompleteFunc *cb;
    void *opaque;
} BdrvCreateWork;

/* Main thread: the worker is over. */
static void bdrv_create_bh(void *opaque)
{
    BdrvCreateWork *w = opaque;

    w->cb(w->opaque, w->err);
    g_free(w);
}

static void bdrv_create_work(BdrvCreateWork *w)
{
    aio_context_acquire_thread(w->ctx);
    w->o->drv->bdrv_create(w->o, &w->err);
    /* Nothing is in flight any more: let the engines the file node made
     * for this context go with it. */
    while (aio_poll(w->ctx, false)) {
    }
    aio_context_free(w->ctx);
}

static gpointer bdrv_create_thread(gpointer opaque)
{
    BdrvCreateWork *w = opaque;

    bdrv_create_work(w);
    aio_bh_schedule_oneshot(w->main_ctx, bdrv_create_bh, w, "blk-create");
    return NULL;
}

static gpointer bdrv_create_sync_thread(gpointer opaque)
{
    bdrv_create_work(opaque);
    return NULL;
}

static BdrvCreateWork *bdrv_create_work_new(BlockCreateOptions *o,
                                            GError **errp)
{
    BdrvCreateWork *w;
    AioContext *ctx;

    if (!o->drv->bdrv_create) {
        g_set_error(errp, VB_ERROR, 0, "Driver '%s' does not support "
                    "image creation", o->drv->format_name);
        return NULL;
    }
    ctx = aio_context_new(errp);
    if (!ctx) {
        return NULL;
    }
    w = g_new0(BdrvCreateWork, 1);
    w->o = o;
    w->ctx = ctx;
    w->main_ctx = qemu_get_current_aio_context();
    return w;
}

void bdrv_create_run(BlockCreateOptions *o, BlockCreateCompleteFunc *cb,
                     void *opaque)
{
    GError *err = NULL;
    BdrvCreateWork *w = bdrv_create_work_new(o, &err);
    GThread *thread;

    if (!w) {
        cb(opaque, err);
        return;
    }
    w->cb = cb;
    w->opaque = opaque;
    thread = g_thread_try_new("blk-create", bdrv_create_thread, w, &err);
    if (!thread) {
        g_prefix_error(&err, "cannot start a thread to create the image: ");
        aio_context_free(w->ctx);
        g_free(w);
        cb(opaque, err);
        return;
    }
    g_thread_unref(thread);
}

bool bdrv_create_sync(BlockCreateOptions *o, GError **errp)
{
    BdrvCreateWork *w = bdrv_create_work_new(o, errp);
    GThread *thread;
    bool ok;

    if (!w) {
        return false;
    }
    thread = g_thread_try_new("blk-create", bdrv_create_sync_thread, w,
                              errp);
    if (!thread) {
        g_prefix_error(errp, "cannot start a thread to create the image: ");
        aio_context_free(w->ctx);
        g_free(w);
        return false;
    }
    g_thread_join(thread);
    ok = !w->err;
    if (w->err) {
        g_propagate_error(errp, w->err);
    }
    g_free(w);
    return ok;
}
