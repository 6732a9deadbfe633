/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * driver=qcow2's own options (BlockOptions.driver_opts), read by its
 * parser (block/qcow2.c) from qemu-storage-daemon's keys; the file child
 * is BlockOptions.file.  C callers may fill one themselves.
 */
#ifndef BLOCK_QCOW2_OPTIONS_H
#define BLOCK_QCOW2_OPTIONS_H

#include "block/block.h"

#define QCOW2_DEFAULT_L2_CACHE_SIZE (8u * 1024 * 1024)
#define QCOW2_DEFAULT_RC_CACHE_SIZE (1u * 1024 * 1024)
#define QCOW2_MAX_BACKING_DEPTH     16

typedef struct BlockQcow2Options {
    uint64_t l2_cache_size;         /* bytes; 0: the default (8 MiB) */
    uint64_t l2_cache_entry_size;   /* bytes; 0: the default */
    uint64_t refcount_cache_size;   /* bytes; 0: the default */
    uint64_t cache_clean_interval;  /* seconds; 0: never */
    /* The backing chain is BlockOptions' (no_backing, backing,
     * backing_driver: "raw" or "qcow2" when the header names no format). */
    /* Images above this one (the driver's own recursion guard). */
    unsigned int depth;
} BlockQcow2Options;

/* Requests of @blk (a qcow2 node) the metadata thread has done, i.e. that
 * did not take the lock-free fast path (tests).  Any thread. */
uint64_t qcow2_slow_requests(BlockBackend *blk);

/* L2 slices loaded ahead for the requests queued behind a cache miss
 * (tests, benchmarks).  Any thread. */
uint64_t qcow2_l2_prefetched(BlockBackend *blk);

/*
 * Main thread: make @backing the backing node of @bs, a writable qcow2
 * node opened without one (backing=null) that nobody uses yet: its
 * unallocated clusters read from @backing from now on.  The image's
 * header is not changed (as QEMU's blockdev-snapshot: the overlay file
 * names its backing file already, e.g. made by qemu-img create -b).
 * @backing stays its caller's; a qcow2 @backing gives back the clusters
 * it reserved for writes (its caller moves its writers away, and flushes
 * it).  False with @errp set, nothing changed.
 * @backing NULL drops a node given so, with no request in flight (the
 * undo of a snapshot that failed later).
 */
bool qcow2_set_backing(BlockBackend *bs, BlockBackend *backing,
                       GError **errp);

/*
 * Main thread: make @backing (NULL: none) the backing node of @bs, a
 * writable qcow2 node, and rewrite its header so that the image names
 * @name (of format @fmt, NULL: unsaid) as its backing file, made
 * durable (block-stream, block-commit).  The caller has made sure that
 * nothing reads through the old backing chain any more (the users of
 * @bs are quiesced with nothing in flight) and that @bs reads the same
 * through @backing as through its old chain.  When @bs opened its chain
 * itself, the nodes between it and @backing are closed and @bs becomes
 * the owner of @backing (which must be one of them); otherwise the old
 * backing node stays its caller's.  False with @errp set, nothing
 * changed.
 */
bool qcow2_change_backing(BlockBackend *bs, BlockBackend *backing,
                          const char *name, const char *fmt,
                          GError **errp);

/* Main thread: whether @bs (a qcow2 node) opened @backing itself, as
 * part of the chain named by its image (not a node given by name). */
bool qcow2_owns_backing(BlockBackend *bs);

/*
 * Main thread: @backing is an image of the chain @bs (a qcow2 node)
 * opened itself; the image of that chain that opened it keeps reading
 * from it (its backing edge stays) but no longer closes it: @backing,
 * and *@file (its file node, NULL for a raw image) are the caller's now,
 * to be closed after the chain (block-commit's pivot onto such a base).
 * False with @errp set, nothing changed, if @backing is not one.
 */
bool qcow2_release_backing(BlockBackend *bs, BlockBackend *backing,
                           BlockBackend **file, GError **errp);

/*
 * Main thread: create @path (which must not exist) as an empty qcow2
 * image of @size bytes, as qemu-img create -f qcow2 with its defaults,
 * naming @backing (NULL: none) of format @backing_fmt (NULL: unsaid) as
 * its backing file (block/qcow2-create.c).  Blocking I/O on the new
 * file (a few clusters), made durable.  False with @errp set, no file
 * left.
 */
bool qcow2_create_file(const char *path, uint64_t size, const char *backing,
                       const char *backing_fmt, GError **errp);

/* The driver's create hooks (BlockDriver.bdrv_create_parse and
 * .bdrv_create, include/block/block_int.h): blockdev-create's qcow2
 * image, written through a file node (block/qcow2-create.c). */
typedef struct BlockCreateOptions BlockCreateOptions;
bool qcow2_create_parse(BlockCreateOptions *o, QmpArgs *a, GError **errp);
bool qcow2_create(const BlockCreateOptions *o, GError **errp);

#endif
