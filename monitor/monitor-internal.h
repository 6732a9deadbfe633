/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the monitor's command files share and nothing outside monitor/
 * sees: the node and export structures, the lookups and key pages one
 * file offers the others, the QMP error helper, and each file's part of
 * vb_state_cleanup() and of the command table (monitor/state.c).
 *
 * Threads: main thread only.
 */
#ifndef MONITOR_MONITOR_INTERNAL_H
#define MONITOR_MONITOR_INTERNAL_H

#include "qemu/osdep.h"
#include "monitor/qmp.h"
#include "monitor/state.h"
#include "monitor/objects.h"
#include "monitor/blockdev.h"
#include "monitor/export.h"
#include "nbd/nbd-monitor.h"

struct VbNode {
    char *name;
    char *driver;               /* "file", "host_device", "null-co", ... */
    char *filename;             /* as given; "null-co://" for null */
    BlockBackend *blk;
    bool readonly;
    bool cache_direct;
    bool no_storage;            /* stores nothing (BlockNodeNames) */
    BlockDiscardMode discard;   /* what its exports do with a discard */
    VbExport *user;             /* the export on it, if any */
    unsigned int nbd_exports;   /* NBD exports on it (nbd/nbd-monitor.c) */
    VbNode *file;               /* driver=throttle or raw: the node below */
    VbNode *filter;             /* the driver=throttle node above, if any */
    bool alias;                 /* driver=raw: blk is file's, not ours */
    bool format;                /* a format (qcow2): blk is ours, over file */
    VbNode *backing;            /* a format: a backing node given by
                                 * name (backing=NODE), or NULL */
    bool implicit_file;         /* file was defined inline: dropped with us */
    unsigned int parents;       /* driver=raw nodes using us as their file */
    bool snapshotting;          /* a blockdev-snapshot waits for a flush
                                 * with us as its node or overlay */
    bool resizing;              /* a block_resize runs in a worker on our
                                 * image: asked of us or of a node above
                                 * (see vb_resize_mark()) */
};

struct VbExport {
    VbState *state;
    char *id;
    VbNode *node;
    VuBlkExport *exp;
    bool deleting;              /* block-export-del: waiting for its I/O */
    bool idle;                  /* ... which has completed: reap it */
    bool writable;              /* the export's, not its node's */
};

/* --object secret,id=ID,file=PATH[,format=raw|base64]: what it holds,
 * as QEMU passes a secret to librados (base64). */
typedef struct VbSecretObj {
    char *id;
    char *base64;               /* in key pages: see vb_key_alloc() */
    size_t mapped;              /* for vb_key_free() */
} VbSecretObj;

/*
 * Key bytes (a secret object's, and the copy an rbd open in a worker
 * keeps): in pages of their own, left out of core dumps (MADV_DONTDUMP),
 * locked out of swap where RLIMIT_MEMLOCK allows, and zeroed with
 * explicit_bzero() before they are unmapped.  vb_key_alloc() gives @len
 * zeroed bytes and one more for a NUL; *@mapped is what vb_key_free()
 * needs (NULL is fine there).  Main thread (monitor/objects.c).
 */
char *vb_key_alloc(size_t len, size_t *mapped);
char *vb_key_dup(const char *key, size_t *mapped);
void vb_key_free(char *key, size_t mapped);

/* A GenericError with a printf-style message, as QEMU's error_setg(). */
void vb_set_error(GError **errp, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* The "return" of a command that returns nothing: {}. */
JsonNode *vb_empty(void);
/* A command's "return" holding @o (@a), taking the caller's reference:
 * json_node_init_object() would add one of its own, and the object would
 * outlive the reply (a leak per command). */
JsonNode *vb_node_take_object(JsonObject *o);
JsonNode *vb_node_take_array(JsonArray *a);

/* The nodes (monitor/blockdev.c). */
VbNode *vb_node_find(VbState *s, const char *name);
/* Main thread: blockdev-del of @n, which nothing uses (with its inline
 * file child), e.g. the overlay of a blockdev-snapshot-sync that failed. */
void vb_node_delete(VbState *s, VbNode *n);
/*
 * Main thread: register @blk, an image a backing chain opened itself and
 * gave up (blk_release_backing()), as a node of its own named
 * "#blockNNN" (QEMU's implicit nodes), with @file (NULL: none, @blk is
 * the file) as its implicit file node, the discard mode @discard, and
 * @filename as the image's name.  The nodes go before @before in the
 * list, which shutdown closes from the end: @before's chain reads from
 * @blk.  The new format (or file) node.
 */
VbNode *vb_node_adopt(VbState *s, BlockBackend *blk, BlockBackend *file,
                      const char *filename, BlockDiscardMode discard,
                      VbNode *before);

/* The exports (monitor/export.c).  The bottom half of VbState.reap_bh. */
void vb_export_reap_bh(void *opaque);

/* The objects (monitor/objects.c). */
VbIOThreadObj *vb_iothread_find(VbState *s, const char *id);
VbSecretObj *vb_secret_find(VbState *s, const char *id);

/*
 * vb_state_cleanup(), in this order: each file frees what it holds in
 * VbState.
 */
void vb_exports_cleanup(VbState *s);
void vb_nodes_cleanup(VbState *s);
void vb_objects_cleanup(VbState *s);
void vb_named_fds_cleanup(VbState *s);

/*
 * Each command file appends its QMP commands to @table (QmpCommand
 * elements) when vb_qmp_commands() builds it.
 */
void vb_blockdev_register(GArray *table);
void vb_objects_register(GArray *table);
void vb_export_register(GArray *table);
void vb_query_register(GArray *table);
void vb_misc_register(GArray *table);
void vb_jobs_register(GArray *table);

/* The block jobs (monitor/jobs.c): the events' route to QMP, and at
 * vb_state_cleanup() (first: a job holds nodes) their end.  Whether a
 * job holds @n (blockdev-del refuses then); which job holds @blk, or an
 * image of its chain (block_resize refuses then). */
void vb_jobs_init(VbState *s);
void vb_jobs_cleanup(VbState *s);
bool vb_job_uses_node(VbNode *n);
const char *vb_job_using_image(VbState *s, BlockBackend *blk);

/*
 * blockdev-create (monitor/create.c): its command, registered by
 * vb_jobs_register(); whether @job is one of its jobs (no block job: no
 * BLOCK_JOB_* events, not in query-block-jobs); and the overlay of
 * blockdev-snapshot-sync: a new file @path (which must not exist) made
 * into an image of @drv of @size bytes naming @backing (of @backing_fmt),
 * with the same hooks, waiting for them.  False with @errp set and no
 * file left.
 */
void vb_create_register(GArray *table);
typedef struct Job Job;
bool vb_job_is_create(Job *job);
typedef struct BlockDriver BlockDriver;
bool vb_create_overlay(const BlockDriver *drv, const char *path,
                       uint64_t size, const char *backing,
                       const char *backing_fmt, GError **errp);

#endif
