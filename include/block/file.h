/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The file driver's own options (block/file-posix.c): driver=file (an
 * image file) and its alias host_device (a block device).  Its parser
 * fills them from filename= and aio= (file= on vhost-blkd's --export);
 * C callers fill one themselves and point BlockOptions.driver_opts at it.
 */
#ifndef BLOCK_FILE_H
#define BLOCK_FILE_H

#include "block/block.h"

typedef struct BlockFileOptions {
    const char *filename;       /* image file or block device (required) */
    BlockAioMode aio;           /* default BLOCK_AIO_IO_URING; raw_open()
                                 * falls back to what the kernel has */
} BlockFileOptions;

/*
 * @o (initialised with blk_options_init()) opens @filename with the file
 * driver's defaults, through @fo, which must stay valid until the node is
 * open.  The caller may change @fo (e.g. its aio mode) before the open.
 */
static inline void blk_file_options(BlockOptions *o, BlockFileOptions *fo,
                                    const char *filename)
{
    *fo = (BlockFileOptions) {
        .filename = filename,
        .aio = BLOCK_AIO_IO_URING,
    };
    o->driver = "file";
    o->driver_opts = fo;
}

#endif
