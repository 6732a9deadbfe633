/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The driver registry: the one place that maps a driver's name to the
 * driver.  A built-in driver registers itself from its own file
 * (BLOCK_DRIVER_REGISTER, a constructor: the block library is linked
 * whole, so every driver in it is there); a driver in a module
 * (block-NAME.so, include/block/module.h) is listed by name below and
 * loaded on its first use, so that a process that never opens such a
 * node maps none of its libraries; tests add drivers of their own with
 * bdrv_register().  Adding a driver: its .c file with its options and
 * BLOCK_DRIVER_REGISTER line, and one line in block/meson.build.
 *
 * Threads: the main thread (opening nodes), except bdrv_driver_names(),
 * which only reads the table.
 */
#include "qemu/osdep.h"
#include "block/block_int.h"
#include "block/module.h"

/*
 * Drivers in modules, known by name before they are loaded, with how a
 * node of theirs is named in messages before the driver has opened it
 * (the error of a module that cannot be loaded names the node).
 */
typedef struct BlockModuleEntry {
    const char *name;
    char *(*describe)(const BlockOptions *opts);
} BlockModuleEntry;

static char *rbd_describe(const BlockOptions *opts)
{
    return blk_rbd_describe(&opts->rbd);
}

static const BlockModuleEntry block_modules[] = {
#if CONFIG_RBD
    { .name = "rbd", .describe = rbd_describe },
#endif
};

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

static const BlockDriver *bdrv_lookup(const char *name)
{
    for (guint i = 0; block_drivers && i < block_drivers->len; i++) {
        const BlockDriver *drv = g_ptr_array_index(block_drivers, i);

        if (!strcmp(drv->format_name, name)) {
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
    for (size_t i = 0; i < G_N_ELEMENTS(block_modules); i++) {
        g_ptr_array_add(names, (gpointer)block_modules[i].name);
    }
    for (guint i = 0; i < names->len; i++) {
        g_string_append_printf(s, "%s%s",
                               i == 0 ? "" :
                               i + 1 == names->len ? " or " : ", ",
                               (const char *)g_ptr_array_index(names, i));
    }
    return g_string_free(s, false);
}

const BlockDriver *bdrv_find_driver(const char *name, const char *what,
                                    GError **errp)
{
    const BlockDriver *drv = bdrv_lookup(name);
    g_autofree char *names = NULL;

    if (drv) {
        return drv;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(block_modules); i++) {
        if (!strcmp(block_modules[i].name, name)) {
            return block_module_load_driver(name, what, errp);
        }
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
    g_autofree char *what = NULL;
    const BlockDriver *drv;

    for (size_t i = 0; i < G_N_ELEMENTS(block_modules); i++) {
        if (!strcmp(block_modules[i].name, name)) {
            what = block_modules[i].describe(opts);
        }
    }
    drv = bdrv_find_driver(name, what ? what : name, errp);
    if (drv && drv->is_filter) {
        g_set_error(errp, VB_ERROR, 0, "driver=%s is a filter: it goes "
                    "over another node, it does not open an image", name);
        return NULL;
    }
    return drv;
}

/*
 * The name of an rbd node in messages, here rather than in the module:
 * the error of a module that cannot be loaded names the node too.
 */
char *blk_rbd_describe(const BlockRbdOptions *o)
{
    return g_strdup_printf("rbd:%s/%s%s%s%s%s", o->pool ? o->pool : "?",
                           o->namespace_ ? o->namespace_ : "",
                           o->namespace_ ? "/" : "",
                           o->image ? o->image : "?",
                           o->snapshot ? "@" : "",
                           o->snapshot ? o->snapshot : "");
}
