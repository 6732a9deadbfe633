/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Loading block driver modules (block-NAME.so) on first use.
 *
 * Theory of operation: see include/block/module.h for the contract.  The
 * loader builds the list of candidate directories (the environment
 * override, the build tree found from /proc/self/exe, the installed
 * directory), tries the module file in each in turn, skipping the ones
 * where it does not exist, and stops at the first that exists: it is
 * loaded and checked (ABI, driver symbol), or its failure is the answer.
 * A loaded driver is remembered for the life of the process (modules are
 * never unloaded); a failure is not, so that installing the module and
 * retrying (a QMP blockdev-add) works without a restart.  Everything here
 * runs on the control path, under block_module_lock.
 */
#include "qemu/osdep.h"
#include <dlfcn.h>
#include "block/module.h"

typedef struct BlockModule {
    char *name;
    const BlockDriver *drv;     /* set once, never freed */
} BlockModule;

static GMutex block_module_lock;
/* Loaded modules; protected by block_module_lock, never shrinks. */
static GPtrArray *block_modules;

/* The build tree's root holding the running program, or NULL. */
static char *block_module_build_root(void)
{
    g_autofree char *exe = g_file_read_link("/proc/self/exe", NULL);
    char *dir;

    if (!exe || !g_path_is_absolute(exe)) {
        return NULL;
    }
    dir = g_path_get_dirname(exe);
    /* build/tools/vhost-blkd, build/tests/unit/test-...: a few levels. */
    for (int i = 0; i < 4; i++) {
        g_autofree char *ninja = g_build_filename(dir, "build.ninja", NULL);
        char *up;

        if (g_file_test(ninja, G_FILE_TEST_IS_REGULAR)) {
            return dir;
        }
        up = g_path_get_dirname(dir);
        if (!strcmp(up, dir)) {
            g_free(up);
            break;
        }
        g_free(dir);
        dir = up;
    }
    g_free(dir);
    return NULL;
}

/* Candidate directories, in search order, each with where it came from:
 * pairs (dir, origin) in @dirs. */
static void block_module_dirs(GPtrArray *dirs)
{
    const char *env = g_getenv("VHOST_BLK_MODULE_DIR");
    g_autofree char *root = NULL;

    if (env && *env) {
        /* Alone: a test or an operator pointing at one directory means
         * it, not "this one, else whatever else is found". */
        g_ptr_array_add(dirs, g_strdup(env));
        g_ptr_array_add(dirs, g_strdup("$VHOST_BLK_MODULE_DIR"));
        return;
    }
    root = block_module_build_root();
    if (root) {
        g_ptr_array_add(dirs, g_build_filename(root, "block", NULL));
        g_ptr_array_add(dirs, g_strdup("the build tree"));
    }
    g_ptr_array_add(dirs, g_strdup(CONFIG_MODULE_DIR));
    g_ptr_array_add(dirs, g_strdup("the installed directory"));
}

/* Load and check @path; the driver or NULL with @errp set. */
static const BlockDriver *block_module_open(const char *name,
                                            const char *path,
                                            const char *what,
                                            GError **errp)
{
    static const BlockModuleAbi ours = BLOCK_MODULE_ABI_INIT;
    g_autofree char *sym = g_strdup_printf("bdrv_%s", name);
    const BlockModuleAbi *abi;
    const BlockDriver *drv;
    void *h;

    dlerror();
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();

        g_set_error(errp, VB_ERROR, 0, "%s: cannot load the %s driver "
                    "module %s: %s; reinstall it from the same build as "
                    "this program (the package, or ninja -C build)", what,
                    name, path, why ? why : "unknown error");
        return NULL;
    }
    abi = dlsym(h, "block_module_abi");
    if (!abi || strncmp(abi->version, ours.version, sizeof(ours.version)) ||
        memcmp(abi->sizes, ours.sizes, sizeof(ours.sizes))) {
        g_set_error(errp, VB_ERROR, 0, "%s: the %s driver module %s was "
                    "built for vhost-blk %.*s%s, this program is %s: "
                    "install the module of the same build (the package, "
                    "or ninja -C build)", what, name, path,
                    abi ? (int)sizeof(abi->version) : 7,
                    abi ? abi->version : "unknown",
                    abi && !strncmp(abi->version, ours.version,
                                    sizeof(ours.version)) ?
                    " with another block-layer layout" : "",
                    ours.version);
        return NULL;
    }
    drv = dlsym(h, sym);
    if (!drv || !drv->format_name || strcmp(drv->format_name, name) ||
        !drv->bdrv_open || !drv->bdrv_close) {
        g_set_error(errp, VB_ERROR, 0, "%s: %s is not the %s driver module "
                    "(no valid %s in it): reinstall it", what, path, name,
                    sym);
        return NULL;
    }
    /* Loaded for good.  The handle is never closed, not even after a
     * failed check above: unloading Ceph's C++ libraries (their static
     * destructors, threads they may have started) is not safe. */
    return drv;
}

const BlockDriver *block_module_load_driver(const char *name,
                                            const char *what,
                                            GError **errp)
{
    g_autoptr(GPtrArray) dirs = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(GString) tried = g_string_new(NULL);
    g_autofree char *file = g_strdup_printf("block-%s.so", name);
    const BlockDriver *drv = NULL;
    BlockModule *m;

    g_mutex_lock(&block_module_lock);
    for (guint i = 0; block_modules && i < block_modules->len; i++) {
        m = g_ptr_array_index(block_modules, i);
        if (!strcmp(m->name, name)) {
            drv = m->drv;
            goto out;
        }
    }
    block_module_dirs(dirs);
    for (guint i = 0; i + 1 < dirs->len; i += 2) {
        g_autofree char *path = g_build_filename(g_ptr_array_index(dirs, i),
                                                 file, NULL);

        if (access(path, F_OK) < 0) {
            g_string_append_printf(tried, "%s%s (%s): %s",
                                   tried->len ? ", " : "", path,
                                   (char *)g_ptr_array_index(dirs, i + 1),
                                   g_strerror(errno));
            continue;
        }
        drv = block_module_open(name, path, what, errp);
        if (drv) {
            if (!block_modules) {
                block_modules = g_ptr_array_new();
            }
            m = g_new0(BlockModule, 1);
            m->name = g_strdup(name);
            m->drv = drv;
            g_ptr_array_add(block_modules, m);
        }
        goto out;
    }
    g_set_error(errp, VB_ERROR, 0, "%s: driver=%s needs the module %s, "
                "which is not installed: tried %s; install it into %s "
                "(what the vhost-blk package or 'ninja -C build install' "
                "does), build with -D%s=enabled "
                "(./configure's default, with librbd-dev) and run the "
                "program from the build tree, or point VHOST_BLK_MODULE_DIR "
                "at the directory holding it", what, name, file, tried->str,
                CONFIG_MODULE_DIR, name);
out:
    g_mutex_unlock(&block_module_lock);
    return drv;
}

bool block_module_is_loaded(const char *name)
{
    bool loaded = false;

    g_mutex_lock(&block_module_lock);
    for (guint i = 0; block_modules && i < block_modules->len; i++) {
        BlockModule *m = g_ptr_array_index(block_modules, i);

        loaded |= !strcmp(m->name, name);
    }
    g_mutex_unlock(&block_module_lock);
    return loaded;
}
