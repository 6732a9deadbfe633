/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Parser of vhost-blkd's --export KEY=VALUE,... strings and of the size,
 * number and on/off values its other options take.
 *
 * Nothing here prints or exits: a bad string returns false (or NULL) with a
 * GError whose message names the key and says what to use instead; the
 * daemon prefixes it with "vhost-blkd: --export ARG: ".  The parser touches
 * the system only to stat() file= (it must exist) and to look up
 * socket-owner= and socket-group= in the user and group databases.
 *
 * Threads: every function may be called from any thread; a list of
 * ExportOpts belongs to its caller.
 */
#ifndef TOOLS_EXPORT_OPTS_H
#define TOOLS_EXPORT_OPTS_H

#include "block/block.h"
#include "qemu/throttle.h"
#include <json-glib/json-glib.h>

#include <sys/stat.h>

#define EXPORT_OPTS_MAX_QUEUES      64
#define EXPORT_OPTS_MAX_QUEUE_SIZE  1024
#define EXPORT_OPTS_MAX_IOTHREADS   256
#define EXPORT_OPTS_SERIAL_BYTES    20      /* VIRTIO_BLK_ID_BYTES */

/* One --export.  Ranges after a successful parse are given per field. */
typedef struct ExportOpts {
    char *id;                   /* id=: QMP's export id; NULL: "export<i>" */
    char *node_name;            /* node-name=; NULL: id, else "node<i>" */
    char *socket;               /* non-empty */
    /*
     * The node: its driver and that driver's keys, read by the driver
     * (blk_options_parse(), the --export syntax, into the driver's own
     * struct, block.driver_opts), and the export's keys that are node
     * options (readonly, aio, cache).  Its strings point into
     * @block_args and @block_strings.
     */
    BlockOptions block;
    JsonObject *block_args;     /* the driver's keys as given */
    GPtrArray *block_strings;   /* what the driver's parser allocated */
    char *file;                 /* file=PATH as given, or NULL */
    /*
     * format=qcow2: the image is a qcow2 file; the node the export
     * serves is a qcow2 node (@format_block, its own keys such as
     * l2-cache-size read by the qcow2 driver) over the node of @block.
     * NULL: raw (format=raw, the default).
     */
    char *format;
    BlockOptions format_block;
    GPtrArray *format_strings;
    char *driver;               /* the driver: "file" (default), "null",
                                 * ... (blk_driver_export_names()) */
    unsigned int num_queues;    /* 1..EXPORT_OPTS_MAX_QUEUES (default 1) */
    unsigned int queue_size;    /* power of 2, 2..1024 (default 128) */
    BlockAioMode aio;           /* default BLOCK_AIO_IO_URING; the file
                                 * driver's (every driver takes it) */
    bool cache_direct;          /* cache=none (default) */
    bool readonly;
    char *serial;               /* never NULL, at most 20 bytes */
    bool serial_set;            /* serial= given (else: file's base name) */
    unsigned int logical_block_size;    /* 512 (default) or 4096 */
    bool discard;
    bool write_zeroes;
    bool batch;
    unsigned int first_batch;   /* 0 (off) .. EXPORT_OPTS_MAX_QUEUE_SIZE,
                                 * default 4 */
    int iothread;               /* -1: queue q -> iothread q mod N; else
                                 * 0..EXPORT_OPTS_MAX_IOTHREADS - 1 */
    mode_t socket_mode;         /* 1..0777, default 0600 */
    bool socket_chown;          /* socket-owner= or socket-group= given */
    uid_t socket_uid;           /* (uid_t)-1: unchanged */
    gid_t socket_gid;           /* (gid_t)-1: unchanged */
    BlockInjectOptions inject;  /* inject-*: error injection (testing) */
    ThrottleLimits throttle;    /* iops-total=, bps-read-max=, ...: the
                                 * export's own limits (checked) */
    bool throttle_set;          /* one of them given (even 0): the export
                                 * gets a throttle filter */
    char *throttle_group;       /* throttle-group=NAME: a shared group
                                 * (--object throttle-group) instead */
} ExportOpts;

/*
 * Parse one --export argument (without the "--export "): a new ExportOpts
 * with defaults filled in, or NULL with @errp set.  Free it with
 * export_opts_free().
 */
ExportOpts *export_opts_parse(const char *arg, GError **errp);

void export_opts_free(ExportOpts *e);

G_DEFINE_AUTOPTR_CLEANUP_FUNC(ExportOpts, export_opts_free)

/*
 * A relative file= made absolute against the current directory, before
 * the daemon leaves it: the driver reads its keys again.  False with
 * @errp set (the image is gone meanwhile).
 */
bool export_opts_absolute_file(ExportOpts *e, GError **errp);

/*
 * Parse @arg and append it to @list (a GPtrArray of ExportOpts, created
 * with export_opts_free as its free function), refusing a socket= that an
 * earlier element already uses.  False with @errp set; @list unchanged.
 */
bool export_opts_list_add(GPtrArray *list, const char *arg, GError **errp);

/*
 * A number (decimal, 0x hex or 0 octal) with an optional k, M, G or T
 * suffix (powers of 1024, optionally followed by "i", "iB" or "B").
 * False on anything else or on overflow.
 */
bool export_opts_parse_size(const char *s, uint64_t *out);

/* export_opts_parse_size() limited to 0..@max. */
bool export_opts_parse_uint(const char *s, unsigned int max,
                            unsigned int *out);

/* on|yes|true|1 or off|no|false|0. */
bool export_opts_parse_bool(const char *s, bool *out);

/*
 * USER as a name or a number; @gid receives its primary group, or
 * (gid_t)-1 for a number without a passwd entry.  False with @errp set.
 */
bool export_opts_lookup_user(const char *name, uid_t *uid, gid_t *gid,
                             GError **errp);

/* GROUP as a name or a number.  False with @errp set. */
bool export_opts_lookup_group(const char *name, gid_t *gid, GError **errp);
/* Like initgroups(3): @user's supplementary groups plus @gid (static
 * builds read /etc/group instead of asking NSS).  0, or -1 with errno. */
int export_opts_initgroups(const char *user, gid_t gid);

#endif
