/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Loading block driver modules (block-NAME.so) on first use.
 *
 * Theory of operation: see include/block/module.h for the contract.  The
 * loader builds the list of candidate directories (the environment
 * override, the build tree if /proc/self/exe lies in the one this program
 * was built in, the installed directory), tries the module file in each
 * in turn, skipping the ones where it does not exist, and stops at the
 * first that exists: outside the build tree it must be owned by root and
 * writable by nobody else, up to /; then it is loaded and checked (ABI,
 * driver symbol), or its failure is the answer.
 * A loaded driver is remembered for the life of the process (modules are
 * never unloaded); a failure is not, so that installing the module and
 * retrying (a QMP blockdev-add) works without a restart.  Everything here
 * runs on the control path, under block_module_lock.
 */
#include "qemu/osdep.h"
#include <dlfcn.h>
#include <sys/stat.h>
#include "block/module.h"

/* The origin of the build tree's directory, which is not checked (see
 * block_module_build_root()). */
#define BLOCK_MODULE_BUILD_TREE "the build tree"

typedef struct BlockModule {
    char *name;
    const BlockDriver *drv;     /* set once, never freed */
} BlockModule;

/* pthread, not GMutex: ThreadSanitizer sees it (GLib's uses futexes). */
static pthread_mutex_t block_module_lock = PTHREAD_MUTEX_INITIALIZER;
/* Loaded modules; protected by block_module_lock, never shrinks. */
static GPtrArray *block_modules;

/* realpath(3) of @path as a g_free()-able string, or NULL. */
static char *block_module_realpath(const char *path)
{
    char *r = realpath(path, NULL);
    char *g = r ? g_strdup(r) : NULL;

    free(r);
    return g;
}

/*
 * The build tree of this program, or NULL: CONFIG_BUILD_ROOT (the
 * directory it was built in) if the program's own file lies inside it.
 * Never a directory found by looking around the executable: an installed
 * program (or a copy anywhere else) that climbed its parents for a
 * build.ninja would load whatever block/block-rbd.so someone put next to
 * one, as root.  Nothing else is checked here: whoever can write the
 * build tree can already replace the program that runs from it.
 */
static char *block_module_build_root(void)
{
    g_autofree char *exe = g_file_read_link("/proc/self/exe", NULL);
    g_autofree char *root = block_module_realpath(CONFIG_BUILD_ROOT);
    g_autofree char *ninja = NULL;
    size_t n;

    if (!exe || !root) {
        return NULL;
    }
    n = strlen(root);
    if (strncmp(exe, root, n) || exe[n] != '/') {
        return NULL;
    }
    ninja = g_build_filename(root, "build.ninja", NULL);
    if (!g_file_test(ninja, G_FILE_TEST_IS_REGULAR)) {
        return NULL;
    }
    return g_steal_pointer(&root);
}

/*
 * Whether @st (of @path) can be changed only by root or by this process's
 * user.  @strict: the module file and its directory, which nobody else
 * may write at all; the directories above may be sticky (/tmp, /var/tmp:
 * others cannot rename or remove what is ours there).
 */
static bool block_module_stat_trusted(const char *path, const struct stat *st,
                                      bool strict, const char *what,
                                      const char *name, const char *module,
                                      GError **errp)
{
    bool sticky = S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX);

    if (st->st_uid != 0 && st->st_uid != geteuid()) {
        g_set_error(errp, VB_ERROR, 0, "%s: the %s driver module %s is not "
                    "loaded: %s belongs to uid %u, neither root nor this "
                    "process's user, who could put code there that would "
                    "run in this process; chown root %s, or install the "
                    "module where only root can write", what, name, module,
                    path, (unsigned)st->st_uid, path);
        return false;
    }
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) && (strict || !sticky)) {
        g_set_error(errp, VB_ERROR, 0, "%s: the %s driver module %s is not "
                    "loaded: %s is writable by %s (mode %04o), who could "
                    "put code there that would run in this process; "
                    "chmod go-w %s", what, name, module, path,
                    st->st_mode & S_IWOTH ? "every user" : "its group",
                    (unsigned)(st->st_mode & 07777), path);
        return false;
    }
    return true;
}

/*
 * A module of the installed directory (or $VHOST_BLK_MODULE_DIR) is
 * loaded only if the file, its directory and every directory above them
 * are owned by root (or this process's user) and not writable by others:
 * as sudo and ssh check what they trust.  The real path, checked, is what
 * to dlopen(), in *@real.
 */
static bool block_module_trusted(const char *path, const char *name,
                                 const char *what, char **real,
                                 GError **errp)
{
    g_autofree char *file = block_module_realpath(path);
    g_autofree char *dir = NULL;
    struct stat st;

    if (!file || stat(file, &st) < 0) {
        g_set_error(errp, VB_ERROR, 0, "%s: cannot load the %s driver "
                    "module %s: %s", what, name, path, g_strerror(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        g_set_error(errp, VB_ERROR, 0, "%s: the %s driver module %s is not "
                    "a regular file: reinstall it", what, name, path);
        return false;
    }
    if (!block_module_stat_trusted(file, &st, true, what, name, path,
                                   errp)) {
        return false;
    }
    dir = g_path_get_dirname(file);
    for (bool strict = true;; strict = false) {
        g_autofree char *up = NULL;

        if (stat(dir, &st) < 0) {
            g_set_error(errp, VB_ERROR, 0, "%s: cannot load the %s driver "
                        "module %s: %s: %s", what, name, path, dir,
                        g_strerror(errno));
            return false;
        }
        if (!block_module_stat_trusted(dir, &st, strict, what, name, path,
                                       errp)) {
            return false;
        }
        up = g_path_get_dirname(dir);
        if (!strcmp(up, dir)) {
            break;
        }
        g_free(dir);
        dir = g_steal_pointer(&up);
    }
    *real = g_steal_pointer(&file);
    return true;
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
        g_ptr_array_add(dirs, g_strdup(BLOCK_MODULE_BUILD_TREE));
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

    pthread_mutex_lock(&block_module_lock);
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
        const char *origin = g_ptr_array_index(dirs, i + 1);
        g_autofree char *real = NULL;

        if (access(path, F_OK) < 0) {
            g_string_append_printf(tried, "%s%s (%s): %s",
                                   tried->len ? ", " : "", path,
                                   (char *)g_ptr_array_index(dirs, i + 1),
                                   g_strerror(errno));
            continue;
        }
        if (strcmp(origin, BLOCK_MODULE_BUILD_TREE)) {
            if (!block_module_trusted(path, name, what, &real, errp)) {
                goto out;
            }
        } else {
            real = g_strdup(path);
        }
        drv = block_module_open(name, real, what, errp);
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
                "(with lib%s-dev installed) and run the "
                "program from the build tree, or point VHOST_BLK_MODULE_DIR "
                "at the directory holding it", what, name, file, tried->str,
                CONFIG_MODULE_DIR, name, name);
out:
    pthread_mutex_unlock(&block_module_lock);
    return drv;
}

bool block_module_is_loaded(const char *name)
{
    bool loaded = false;

    pthread_mutex_lock(&block_module_lock);
    for (guint i = 0; block_modules && i < block_modules->len; i++) {
        BlockModule *m = g_ptr_array_index(block_modules, i);

        loaded |= !strcmp(m->name, name);
    }
    pthread_mutex_unlock(&block_module_lock);
    return loaded;
}
