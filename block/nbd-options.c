/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The NBD client driver's part that is built into the program: the
 * driver itself is a module (block-nbd.so, block/nbd.c, the only file
 * linked with libnbd, which brings GnuTLS, libxml2, ICU and libstdc++:
 * about 1.3 MiB resident in a daemon that opens no nbd node), loaded
 * when a node first names driver=nbd.  Its options are read here, before
 * that, so that a wrong option is refused at blockdev-add with the same
 * words whether the module is loaded or not, and tls-creds=ID is looked
 * up in the monitor's objects, which the module cannot reach.  The
 * node's name in messages and query-named-block-nodes (nbd://...) is
 * also made here; the module calls blk_nbd_describe() for its own
 * messages.  Registered with the registry (block/driver.c) as a
 * BlockModuleDriver.  Main thread, except blk_nbd_describe() (any
 * thread).
 */
#include "qemu/osdep.h"
#include "block/block_int.h"
#include "block/nbd.h"
#include "qemu/qmp-args.h"

char *blk_nbd_describe(const BlockNbdOptions *o)
{
    const char *exp = o->export_name ? o->export_name : "";

    if (o->type == BLOCK_NBD_SERVER_UNIX) {
        return g_strdup_printf("nbd+unix:///%s?socket=%s", exp,
                               o->path ? o->path : "?");
    }
    return g_strdup_printf("nbd://%s%s%s:%s/%s",
                           o->host && strchr(o->host, ':') ? "[" : "",
                           o->host ? o->host : "?",
                           o->host && strchr(o->host, ':') ? "]" : "",
                           o->port ? o->port : BLOCK_NBD_DEFAULT_PORT, exp);
}

/* The monitor's, set once at start-up (main thread). */
static BlockNbdTlsLookup nbd_tls_lookup;

void blk_nbd_set_tls_lookup(BlockNbdTlsLookup fn)
{
    nbd_tls_lookup = fn;
}

/*
 * QEMU's BlockdevOptionsNbd: server (a SocketAddress: type=inet with
 * host and port, or type=unix with path), export, tls-creds (the id of
 * a tls-creds-x509 or tls-creds-psk object with endpoint=client),
 * reconnect-delay; and tls-creds-dir=DIR (vhost-blkd's own shortcut:
 * the directory of x509 client credentials, without an object).
 * Main thread.
 */
static bool nbd_parse_options(BlockOptions *opts, QmpArgs *a,
                              BlockOptsParse *p, GError **errp)
{
    static const char *const types[] = { "inet", "unix", NULL };
    BlockNbdOptions *o;
    g_auto(QmpArgs) srv = { 0 };
    const char *tls_creds = NULL;
    int type = 0;
    int64_t delay = 0;
    bool present = false;

    if (p->export_syntax) {
        g_set_error(errp, VB_ERROR, 0, "driver=nbd is not taken by --export's "
                    "own syntax: add the node with --blockdev driver=nbd,"
                    "node-name=NAME,server.type=...  and export it with "
                    "--export type=vhost-user-blk,node-name=NAME,...");
        return false;
    }
    o = blk_options_parse_keep(p, g_new0(BlockNbdOptions, 1));
    if (!qmp_args_object(a, "server", true, &srv, NULL, errp) ||
        !qmp_args_enum(&srv, "type", types, true, &type, errp)) {
        return false;
    }
    o->type = type;
    if (o->type == BLOCK_NBD_SERVER_INET) {
        if (!qmp_args_str(&srv, "host", true, &o->host, errp) ||
            !qmp_args_str(&srv, "port", false, &o->port, errp)) {
            return false;
        }
        if (!*o->host) {
            g_set_error(errp, VB_ERROR, 0, "server.host must not be empty");
            return false;
        }
        if (o->port) {
            uint64_t port;

            if (!qemu_parse_size(o->port, &port) || port == 0 ||
                port > 65535 || strspn(o->port, "0123456789") !=
                strlen(o->port)) {
                g_set_error(errp, VB_ERROR, 0, "server.port: '%s' is not a "
                            "port number (1-65535)", o->port);
                return false;
            }
        }
    } else {
        if (!qmp_args_str(&srv, "path", true, &o->path, errp)) {
            return false;
        }
        if (!*o->path) {
            g_set_error(errp, VB_ERROR, 0, "server.path must not be empty");
            return false;
        }
    }
    if (!qmp_args_check_done(&srv, errp) ||
        !qmp_args_str(a, "export", false, &o->export_name, errp) ||
        !qmp_args_str(a, "tls-creds", false, &tls_creds, errp) ||
        !qmp_args_str(a, "tls-creds-dir", false, &o->tls_creds_dir, errp) ||
        !qmp_args_int(a, "reconnect-delay", false, &delay, &present,
                      errp)) {
        return false;
    }
    if (o->export_name && strlen(o->export_name) > 4096) {
        g_set_error(errp, VB_ERROR, 0, "export: a name of at most 4096 "
                    "bytes (the NBD protocol's limit)");
        return false;
    }
    if (tls_creds) {
        BlockNbdTlsCreds c = { 0 };

        if (o->tls_creds_dir) {
            g_set_error(errp, VB_ERROR, 0, "tls-creds and tls-creds-dir "
                        "both name TLS credentials: give one of them");
            return false;
        }
        if (!nbd_tls_lookup) {
            g_set_error(errp, VB_ERROR, 0, "No TLS credentials with id "
                        "'%s'", tls_creds);
            return false;
        }
        if (!nbd_tls_lookup(tls_creds, &c, errp)) {
            return false;
        }
        /* Copies: the object may go before the node is opened. */
        blk_options_parse_keep(p, c.dir);
        if (c.username) {
            blk_options_parse_keep(p, c.username);
        }
        if (c.psk) {
            o->tls_psk_dir = c.dir;
            o->tls_username = c.username;
        } else {
            o->tls_creds_dir = c.dir;
            o->tls_no_verify_peer = !c.verify_peer;
        }
    }
    if (o->tls_creds_dir && !*o->tls_creds_dir) {
        g_set_error(errp, VB_ERROR, 0, "tls-creds-dir must not be empty");
        return false;
    }
    if (present && (delay < 0 || delay > BLOCK_NBD_MAX_RECONNECT_DELAY)) {
        g_set_error(errp, VB_ERROR, 0, "reconnect-delay: %" PRId64 " is "
                    "out of range: use 0 to %d seconds", delay,
                    BLOCK_NBD_MAX_RECONNECT_DELAY);
        return false;
    }
    o->reconnect_delay = delay;
    opts->driver_opts = o;
    return true;
}

/* A TLS directory must be there; a socket path is the server's to
 * make, it may come later (the open says so then). */
static bool nbd_check_options(const BlockOptions *opts, BlockOptsParse *p,
                              GError **errp)
{
    const BlockNbdOptions *o = opts->driver_opts;

    if (o && o->tls_creds_dir &&
        !g_file_test(o->tls_creds_dir, G_FILE_TEST_IS_DIR)) {
        g_set_error(errp, VB_ERROR, 0, "tls-creds-dir: '%s' is not a "
                    "directory", o->tls_creds_dir);
        return false;
    }
    return true;
}

static char *nbd_describe(const BlockOptions *opts)
{
    static const BlockNbdOptions no_opts;

    return blk_nbd_describe(opts->driver_opts ? opts->driver_opts :
                            &no_opts);
}

static const BlockModuleDriver nbd_module = {
    .name = "nbd",
    /* The open waits for the server. */
    .open_any_thread = true,
    .parse = nbd_parse_options,
    .check = nbd_check_options,
    .describe = nbd_describe,
};
BLOCK_MODULE_DRIVER_REGISTER(nbd_module)
