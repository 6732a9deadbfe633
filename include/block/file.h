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

/*
 * Image locking (QEMU's locking=): byte-range OFD locks on the image, in
 * QEMU's layout, so that QEMU, qemu-img, qemu-storage-daemon and other
 * vhost-blkd processes see what this node's users do with the image and
 * it sees theirs (docs/user-guide.md, "Image locking").
 *   AUTO  on while a parent of the node does not share writes (a
 *         format over it); off for a raw node that serves exports only,
 *         which share everything, as qemu-storage-daemon's do;
 *   ON    on while the node has users, whatever they share: other
 *         processes may read the image, not write or resize it;
 *   OFF   never.
 */
typedef enum BlockFileLocking {
    BLOCK_FILE_LOCKING_AUTO,
    BLOCK_FILE_LOCKING_ON,
    BLOCK_FILE_LOCKING_OFF,
} BlockFileLocking;

typedef struct BlockFileOptions {
    const char *filename;       /* image file or block device (required) */
    BlockAioMode aio;           /* default BLOCK_AIO_IO_URING; raw_open()
                                 * falls back to what the kernel has */
    BlockFileLocking locking;   /* default AUTO */
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
