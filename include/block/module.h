/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Block driver modules: drivers built as shared objects (block-NAME.so)
 * and loaded by the daemon only when a node uses them, so that a process
 * serving files carries none of a driver's libraries (rbd: librbd,
 * librados and Ceph's C++ runtime, about 21 MB mapped).
 *
 * A module is loaded once, with dlopen(RTLD_NOW | RTLD_LOCAL), and never
 * unloaded: its libraries' symbols stay private to it, every reference it
 * has is bound before its first use (a missing symbol is a load error,
 * never a crash later in an iothread), and its BlockDriver stays valid
 * for the life of the process.  The module calls back into the program
 * (blk_acb_complete(), the AioContext functions, logging) through the
 * program's dynamic symbol table: the programs that load modules are
 * linked with block/module-exports.list, which exports the block layer's
 * and the event loop's functions and nothing else (none of the archives
 * the program carries, so they cannot take the place of the libraries the
 * module brings).
 *
 * Besides "bdrv_NAME", its BlockDriver, a module exports
 * "block_module_abi", a BlockModuleAbi: the version and the layout of the
 * structures module and program share.  A module of another build is
 * refused with an error instead of misreading them.
 */
#ifndef BLOCK_MODULE_H
#define BLOCK_MODULE_H

#include "qemu/osdep.h"
#include "block/block_int.h"
#include "block/engine.h"

/* Checked by the loader before the driver is used. */
typedef struct BlockModuleAbi {
    char version[32];           /* VHOST_BLK_VERSION */
    uint32_t sizes[7];          /* of the structures below, in order */
} BlockModuleAbi;

#define BLOCK_MODULE_ABI_INIT {                                            \
    .version = VHOST_BLK_VERSION,                                          \
    .sizes = { sizeof(BlockDriver), sizeof(BlockBackend),                  \
               sizeof(BlockAIOCB), sizeof(BlockOptions),                   \
               sizeof(BlockLimits), sizeof(BlockEngine),                   \
               sizeof(BlockEngineOps) },                                   \
}

/*
 * Main thread (or any one thread at a time: a lock serializes loads).
 * The driver @name (e.g. rbd) from its module, loaded on first use.  The
 * directories searched, in order: $VHOST_BLK_MODULE_DIR alone when it is
 * set; else the build tree the program runs from (CONFIG_BUILD_ROOT, its
 * block/ subdirectory, only if /proc/self/exe lies inside it: an
 * installed program never looks there); then CONFIG_MODULE_DIR (where
 * the package installs modules).  Outside the build tree, the module file
 * and every directory above it must be owned by root (or this process's
 * user) and not writable by group or others (a sticky directory above the
 * module's own excepted), or it is refused unloaded.  A module file that
 * exists but is refused or cannot be loaded ends the search.  NULL with
 * @errp set, naming @what (the node, e.g. "rbd:pool/image"), every path
 * tried and why it failed (dlerror()), and what to do; a later call
 * tries again (after the module was installed).
 */
const BlockDriver *block_module_load_driver(const char *name,
                                            const char *what,
                                            GError **errp);

/* Any thread: true if driver @name's module is loaded (tests). */
bool block_module_is_loaded(const char *name);

#endif
