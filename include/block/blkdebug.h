/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * blkdebug: the error-injection filter of the block layer (testing only),
 * as QEMU's blkdebug driver is for its block graph.  Internal to block/:
 * devices and tools configure it through BlockOptions.inject and
 * blk_inject_parse_option(), and read it through blk_inject_get_hits()
 * (include/block/block.h).
 *
 * It is a filter driver (include/block/block_int.h):
 * blk_open() puts a blkdebug node over the node of the configured driver
 * when something is to be injected.  Its request functions ask
 * blkdebug_check() about each request and do what it says: forward it to
 * the child node, fail it, or hand it to the thread pool engine with a
 * target whose function only sleeps, before the request is forwarded or
 * failed.  It does not know
 * which driver the child is.
 */
#ifndef BLOCK_BLKDEBUG_H
#define BLOCK_BLKDEBUG_H

#include "qemu/osdep.h"
#include "block/block.h"

typedef struct BlkDebugState BlkDebugState;

/* What blk_submit() does with a request, according to the filter. */
typedef enum BlkDebugAction {
    BLKDEBUG_PASS,              /* forward it to the child */
    BLKDEBUG_FAIL,              /* complete it with *ret, from a BH */
    BLKDEBUG_DELAY,             /* sleep in a thread-pool worker */
} BlkDebugAction;

/*
 * The filter state for @inj, or NULL when @inj asks for nothing (with a
 * warning if it has keys that only make sense with inject-error or
 * inject-delay).  Warns that injection is on otherwise.  @filename names
 * the backend in the messages.  Main thread, from blk_open().
 */
BlkDebugState *blkdebug_new(const BlockInjectOptions *inj,
                            const char *filename);

/* Free @s (NULL is fine).  Main thread; no request in flight. */
void blkdebug_free(BlkDebugState *s);

/*
 * The submission hook: does @acb (type, offset and bytes filled in)
 * match, and what happens to it then?  Sets *@ret to the negative errno
 * for BLKDEBUG_FAIL.  Counts matches with one relaxed atomic add, shared
 * by every submitting thread.  Any thread that runs an AioContext.
 */
BlkDebugAction blkdebug_check(BlkDebugState *s, const BlockAIOCB *acb,
                              int *ret);

#endif
