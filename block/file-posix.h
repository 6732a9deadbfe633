/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * file-posix's private state: for block/file-posix.c only.  Its engines
 * see none of it, only the BlockEngineTarget it hands them per request.
 */
#ifndef BLOCK_FILE_POSIX_H
#define BLOCK_FILE_POSIX_H

#include "block/block_int.h"
#include "block/engine.h"
#include "block/file.h"

/* bs->opaque of a file node. */
typedef struct BDRVRawState {
    BlockEngineTarget io;       /* fd, raw_do_request, the end-of-file rule */
    bool direct;                /* opened with O_DIRECT */
    bool is_blockdev;
    BlockAioMode aio;           /* after fallback */
    uint32_t mem_align;         /* O_DIRECT buffer alignment, or 1 */
    /* Image locking (main thread): the mode, and the lock bytes held:
     * the BLK_PERM_* bits of our users' permissions and of what they do
     * not share with other processes. */
    BlockFileLocking locking;
    uint64_t locked_perm;
    uint64_t locked_unshared;
} BDRVRawState;

static inline BDRVRawState *raw_state(BlockBackend *bs)
{
    return (BDRVRawState *)bs->opaque;
}

static inline int raw_fd(BlockBackend *bs)
{
    return raw_state(bs)->io.fd;
}

#endif
