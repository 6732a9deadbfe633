/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The rbd driver's own options (block/rbd-options.c reads them, the
 * module block/rbd.c opens with them): a Ceph RBD image.  C callers fill
 * one themselves and point BlockOptions.driver_opts at it.
 */
#ifndef BLOCK_RBD_H
#define BLOCK_RBD_H

#include "block/block.h"

/*
 * How the rbd driver learns that librbd has finished a request (see
 * block/rbd.c, "Completions"): librbd's callback pushing onto our stack,
 * or librbd's own event notification (rbd_set_image_notification() and
 * rbd_poll_io_events()).  DEFAULT is the one block/rbd.c says is better.
 */
typedef enum BlockRbdCompletion {
    BLOCK_RBD_COMPLETION_DEFAULT,
    BLOCK_RBD_COMPLETION_CALLBACK,
    BLOCK_RBD_COMPLETION_POLL,
} BlockRbdCompletion;

/* driver=rbd: a Ceph RBD image.  Strings may be NULL. */
typedef struct BlockRbdOptions {
    const char *pool;           /* required */
    const char *namespace_;     /* RADOS namespace in the pool */
    const char *image;          /* required */
    const char *snapshot;       /* served read-only */
    const char *conf;           /* ceph.conf path (default: librados's) */
    const char *user;           /* client id without "client." */
    const char *key;            /* the secret key (from a secret object) */
    const char *keyfile;        /* a file holding the key */
    uint32_t connect_timeout;   /* seconds, client_mount_timeout and
                                 * rados_mon_op_timeout; 0 = default */
    const char *mon_host;       /* overrides the conf's mon_host */
    const char *auth_client_required;   /* e.g. "cephx,none" */
    const char *share;          /* connection shared by the nodes giving
                                 * the same name (and cluster); NULL:
                                 * one connection per node */
    BlockRbdCompletion completion;  /* how completions come back */
} BlockRbdOptions;

#define BLOCK_RBD_DEFAULT_CONNECT_TIMEOUT 10

/* How an rbd node is named in messages, QEMU's pseudo-protocol name:
 * rbd:POOL/[NAMESPACE/]IMAGE[@SNAP] (@o NULL: rbd:?/?).  Any thread. */
char *blk_rbd_describe(const BlockRbdOptions *o);

/*
 * @o (initialised with blk_options_init()) opens an rbd node through
 * @ro, which the caller fills (pool and image at least) and which must
 * stay valid until the node is open.
 */
static inline void blk_rbd_options(BlockOptions *o, BlockRbdOptions *ro)
{
    memset(ro, 0, sizeof(*ro));
    o->driver = "rbd";
    o->driver_opts = ro;
}

#endif
