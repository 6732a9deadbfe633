/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * driver=nbd: a block node whose image is an export of an NBD server
 * (qemu-nbd, nbdkit, another vhost-blkd), through libnbd: the module
 * block-nbd.so (block/nbd.c), loaded on first use.  Its options, read by
 * its parser (block/nbd-options.c, built into the program) into
 * BlockOptions.driver_opts; C callers (tests) may fill one themselves.  The NBD *server* lives
 * elsewhere (nbd/); this header is the client's alone.
 */
#ifndef BLOCK_NBD_H
#define BLOCK_NBD_H

#include "block/block.h"

/* server.type */
typedef enum BlockNbdServerType {
    BLOCK_NBD_SERVER_INET,
    BLOCK_NBD_SERVER_UNIX,
} BlockNbdServerType;

#define BLOCK_NBD_DEFAULT_PORT "10809"
/* reconnect-delay's upper bound, in seconds (QEMU takes any uint32; an
 * hour is already far longer than a guest waits for its disk). */
#define BLOCK_NBD_MAX_RECONNECT_DELAY 3600

typedef struct BlockNbdOptions {
    BlockNbdServerType type;
    const char *host;           /* inet: required */
    const char *port;           /* inet: NULL = 10809 */
    const char *path;           /* unix: the socket, required */
    const char *export_name;    /* NULL = "" (the server's default) */
    /* TLS (x509): a directory holding ca-cert.pem, client-cert.pem and
     * client-key.pem, as libnbd (and QEMU's tls-creds-x509 object's
     * dir=) expects them; NULL: no TLS. */
    const char *tls_creds_dir;
    /* x509: true to connect without checking the server's certificate
     * (a tls-creds-x509 object's verify-peer=off). */
    bool tls_no_verify_peer;
    /* TLS (PSK), instead of x509: a directory holding keys.psk (lines
     * of "username:hexkey") and the user name to log in as (NULL:
     * "qemu", QEMU's default). */
    const char *tls_psk_dir;
    const char *tls_username;
    const char *tls_hostname;   /* NULL: the host (inet) */
    /* Seconds that requests wait for a lost connection to come back
     * before they fail with EIO; 0: they fail at once. */
    uint32_t reconnect_delay;
} BlockNbdOptions;

/*
 * tls-creds=ID: the credentials of a tls-creds-x509 or tls-creds-psk
 * object (endpoint=client), which the monitor owns.  It registers a
 * lookup that the parser calls (main thread); the strings are the
 * caller's to g_free().  Without a lookup (no monitor), tls-creds= is
 * refused.
 */
typedef struct BlockNbdTlsCreds {
    bool psk;
    bool verify_peer;           /* x509 */
    char *dir;
    char *username;             /* PSK */
} BlockNbdTlsCreds;
typedef bool (*BlockNbdTlsLookup)(const char *id, BlockNbdTlsCreds *out,
                                  GError **errp);
void blk_nbd_set_tls_lookup(BlockNbdTlsLookup fn);

/* @o (initialised with blk_options_init()) opens an nbd node through
 * @no, which must stay valid until the node is open. */
static inline void blk_nbd_options(BlockOptions *o, const BlockNbdOptions *no)
{
    o->driver = "nbd";
    o->driver_opts = no;
}

/* How a node is named in messages and in query-named-block-nodes'
 * filename, as QEMU names it: nbd://HOST:PORT/EXPORT or
 * nbd+unix:///EXPORT?socket=PATH.  Any thread; g_free() it. */
char *blk_nbd_describe(const BlockNbdOptions *o);

#endif
