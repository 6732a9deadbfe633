/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The null driver's own options (block/null.c): driver=null (QEMU's
 * null-co and null-aio).  Its parser fills them from size= and
 * read-zeroes=; C callers fill one themselves and point
 * BlockOptions.driver_opts at it.
 */
#ifndef BLOCK_NULL_H
#define BLOCK_NULL_H

#include "block/block.h"

typedef struct BlockNullOptions {
    uint64_t size;              /* bytes, required (> 0) */
    bool read_zeroes;           /* reads fill the buffers with zeroes */
} BlockNullOptions;

/*
 * @o (initialised with blk_options_init()) opens a null node of @size
 * bytes through @no, which must stay valid until the node is open.
 */
static inline void blk_null_options(BlockOptions *o, BlockNullOptions *no,
                                    uint64_t size, bool read_zeroes)
{
    *no = (BlockNullOptions) {
        .size = size,
        .read_zeroes = read_zeroes,
    };
    o->driver = "null";
    o->driver_opts = no;
}

#endif
