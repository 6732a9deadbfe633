/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * blockdev-create, as QEMU's: a job of type "create" that makes a new
 * image with a driver's create hook (include/block/block_int.h): the
 * file driver a file by its path, a format (qcow2) an image written
 * through an existing node ("file", the node libvirt adds over the file
 * it created just before).  The job walks QEMU's states (created,
 * running, waiting, pending, concluded; aborting on an error) with a
 * JOB_STATUS_CHANGE event each and no BLOCK_JOB_* event (it is no block
 * job), waits in "concluded" for job-dismiss, and its failure is the
 * "error" of query-jobs.  The hook runs in a worker thread: the monitor
 * answers meanwhile.  Also the overlay of blockdev-snapshot-sync, made
 * by the same hooks (vb_create_overlay()).
 *
 * Threads: main thread only (the hook's worker is block/driver.c's).
 */
#include "qemu/osdep.h"
#include <sys/stat.h>
#include "monitor-internal.h"
#include "block/block_int.h"
#include "block/file.h"
#include "block/job.h"

typedef struct VbCreateJob {
    Job *job;
    BlockCreateOptions o;
    VbNode *file;               /* a format's file node, or NULL */
    BdrvChild *edge;            /* ... which we hold meanwhile */
    bool running;               /* the worker has not reported yet */
} VbCreateJob;

static const JobDriver vb_create_job_driver;

bool vb_job_is_create(Job *job)
{
    return job->driver == &vb_create_job_driver;
}

/* Main thread: the worker is over. */
static void vb_create_done(void *opaque, GError *err)
{
    VbCreateJob *cj = opaque;

    cj->running = false;
    job_completed(cj->job, err ? -EIO : 0,
                  err ? g_strdup(err->message) : NULL);
    g_clear_error(&err);
}

static void vb_create_start(Job *job)
{
    VbCreateJob *cj = job->opaque;

    cj->running = true;
    bdrv_create_run(&cj->o, vb_create_done, cj);
}

/* The worker cannot be stopped halfway (nor can QEMU's): the job ends
 * as cancelled when it reports. */
static void vb_create_cancel(Job *job, bool force)
{
}

static void vb_create_free(Job *job)
{
    VbCreateJob *cj = job->opaque;

    assert(!cj->running);
    if (cj->edge) {
        blk_detach_user(cj->edge);
    }
    blk_create_options_clear(&cj->o);
    g_free(cj);
}

static const JobDriver vb_create_job_driver = {
    .type = "create",
    .start = vb_create_start,
    .cancel = vb_create_cancel,
    .free = vb_create_free,
};

/* Why @m, a node of the image a create would write, keeps it from
 * that now, or NULL.  @own: parents of @m that are the create's node
 * itself (a driver=raw node over @m). */
static const char *vb_create_user(VbNode *m, unsigned int own)
{
    if (m->user) {
        return "an export";
    }
    if (m->nbd_exports) {
        return "an NBD export";
    }
    if (m->parents > own || m->filter) {
        return "another node (a format or filter over it)";
    }
    if (vb_job_uses_node(m)) {
        return "a job";
    }
    if (m->snapshotting) {
        return "a blockdev-snapshot";
    }
    if (m->resizing) {
        return "a block_resize";
    }
    return NULL;
}

/* Why @n cannot be written by a create now, or NULL: a user of it, or
 * of another node on the same image (driver=raw shares its file's). */
static const char *vb_create_node_busy(VbState *s, VbNode *n)
{
    const char *why = vb_create_user(n, 0);

    for (guint i = 0; !why && i < s->nodes->len; i++) {
        VbNode *m = g_ptr_array_index(s->nodes, i);

        if (m != n && m->blk == n->blk &&
            vb_create_user(m, n->alias && n->file == m ? 1 : 0)) {
            why = "a user of a node sharing its image";
        }
    }
    return why;
}

/* The node @name for a format's "file", held for writing as @holder. */
static VbNode *vb_create_file_node(VbState *s, const char *name,
                                   const char *holder, BdrvChild **edge,
                                   GError **errp)
{
    VbNode *n = vb_node_find(s, name);
    const char *busy;

    if (!n) {
        vb_set_error(errp, "Cannot find device='%s' nor node-name='%s'",
                     name, name);
        return NULL;
    }
    if (n->readonly || blk_is_read_only(n->blk)) {
        vb_set_error(errp, "Block node is read-only: node '%s' was added "
                     "with read-only=on; add it without to create an image "
                     "on it", name);
        return NULL;
    }
    busy = vb_create_node_busy(s, n);
    if (busy) {
        vb_set_error(errp, "Node '%s' is in use by %s: creating an image "
                     "on it would overwrite what its users read; remove "
                     "that user first, or create on a new node", name,
                     busy);
        return NULL;
    }
    /* Nobody else may write the image meanwhile, nor open a format over
     * it (which would not share writes), nor delete the node
     * (vb_job_uses_node()). */
    *edge = blk_attach_user(n->blk, holder,
                            BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE |
                            BLK_PERM_RESIZE,
                            BLK_PERM_CONSISTENT_READ |
                            BLK_PERM_WRITE_UNCHANGED, errp);
    return *edge ? n : NULL;
}

/*
 * A protocol driver's create truncates its file: not one a node of ours
 * has open (with locking=auto a raw node served to a guest holds no lock
 * a create would find).  The node, or NULL.
 */
static VbNode *vb_create_file_open(VbState *s, const char *filename)
{
    struct stat want, st;

    if (stat(filename, &want) < 0) {
        return NULL;            /* a new file: nobody has it open */
    }
    for (guint i = 0; i < s->nodes->len; i++) {
        VbNode *n = g_ptr_array_index(s->nodes, i);

        if (!n->no_storage && n->filename && stat(n->filename, &st) == 0 &&
            st.st_dev == want.st_dev && st.st_ino == want.st_ino) {
            return n;
        }
    }
    return NULL;
}

static JsonNode *vb_qmp_blockdev_create(void *opaque, JsonObject *args,
                                        GError **errp)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    g_auto(QmpArgs) oa = { 0 };
    const char *job_id = NULL, *driver = NULL, *file = NULL;
    const char *backing = NULL, *backing_fmt = NULL;
    const BlockDriver *drv;
    VbCreateJob *cj;
    g_autofree char *holder = NULL;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "job-id", true, &job_id, errp) ||
        !qmp_args_object(&a, "options", true, &oa, NULL, errp) ||
        !qmp_args_check_done(&a, errp) ||
        !qmp_args_str(&oa, "driver", true, &driver, errp) ||
        !blk_driver_check_name(driver, errp)) {
        return NULL;
    }
    /* By its own name: an alias (host_device, null-co) creates nothing
     * here. */
    drv = bdrv_find_driver(driver, driver, NULL);
    if (!drv || !drv->bdrv_create) {
        vb_set_error(errp, "Driver does not support blockdev-create: "
                     "vhost-blkd creates images with driver=file and "
                     "driver=qcow2 only ('%s' given)", driver);
        return NULL;
    }
    if (job_get(job_id)) {
        vb_set_error(errp, "Job ID '%s' already in use", job_id);
        return NULL;
    }
    cj = g_new0(VbCreateJob, 1);
    cj->o.drv = drv;
    if (!qmp_args_size(&oa, "size", true, &cj->o.size, NULL, errp)) {
        goto fail;
    }
    if (drv->is_format) {
        if (qmp_args_has(&oa, "file") &&
            !qmp_args_str(&oa, "file", true, &file, NULL)) {
            vb_set_error(errp, "Parameter 'file': give the name of a node "
                         "(blockdev-add it first); vhost-blkd takes no "
                         "inline definition here");
            goto fail;
        }
        if (!file && !qmp_args_str(&oa, "file", true, &file, errp)) {
            goto fail;
        }
        if (!qmp_args_str(&oa, "backing-file", false, &backing, errp) ||
            !qmp_args_str(&oa, "backing-fmt", false, &backing_fmt, errp)) {
            goto fail;
        }
        if (backing) {
            cj->o.backing_file = blk_create_options_keep(&cj->o, backing);
        }
        if (backing_fmt) {
            cj->o.backing_fmt = blk_create_options_keep(&cj->o, backing_fmt);
        }
    }
    if (drv->bdrv_create_parse && !drv->bdrv_create_parse(&cj->o, &oa,
                                                          errp)) {
        goto fail;
    }
    if (!qmp_args_check_done(&oa, errp)) {
        goto fail;
    }
    if (cj->o.filename) {
        VbNode *user = vb_create_file_open(s, cj->o.filename);

        if (user) {
            vb_set_error(errp, "'%s' is the image of node '%s': creating it "
                         "would truncate it under its users; blockdev-del "
                         "the node first, or create another file",
                         cj->o.filename, user->name);
            goto fail;
        }
    }
    if (file) {
        holder = g_strdup_printf("block job '%s'", job_id);
        cj->file = vb_create_file_node(s, file, holder, &cj->edge, errp);
        if (!cj->file) {
            goto fail;
        }
        cj->o.file = cj->file->blk;
    }
    /* QEMU's: finalized at once, dismissed by the user. */
    cj->job = job_create(job_id, &vb_create_job_driver, cj, NULL, true,
                         false, 0, errp);
    if (!cj->job) {
        goto fail;
    }
    job_start(cj->job);
    return vb_empty();

fail:
    if (cj->edge) {
        blk_detach_user(cj->edge);
    }
    blk_create_options_clear(&cj->o);
    g_free(cj);
    return NULL;
}

/* @o with the driver's defaults for every key of its own. */
static bool vb_create_default_opts(BlockCreateOptions *o, GError **errp)
{
    g_auto(QmpArgs) a = { 0 };

    qmp_args_init(&a, NULL, false, NULL);
    return o->drv->bdrv_create_parse(o, &a, errp);
}

bool vb_create_overlay(const BlockDriver *drv, const char *path,
                       uint64_t size, const char *backing,
                       const char *backing_fmt, GError **errp)
{
    GError *err = NULL;
    const BlockDriver *file_drv = bdrv_find_driver("file", "file", errp);
    BlockCreateOptions fo = { .drv = file_drv, .filename = path,
                              .exclusive = true };
    BlockCreateOptions o = { .drv = drv, .size = size,
                             .backing_file = backing,
                             .backing_fmt = backing_fmt };
    BlockFileOptions bfo;
    BlockOptions bo;
    BlockBackend *blk;
    BdrvChild *edge;
    bool ok;

    if (!file_drv || !bdrv_create_sync(&fo, errp)) {
        return false;
    }
    blk_options_init(&bo);
    blk_file_options(&bo, &bfo, path);
    bo.cache_direct = false;
    blk = blk_open(&bo, &err);
    edge = blk ? blk_attach_user(blk, "blockdev-snapshot-sync",
                                 BLK_PERM_CONSISTENT_READ | BLK_PERM_WRITE |
                                 BLK_PERM_RESIZE,
                                 BLK_PERM_CONSISTENT_READ |
                                 BLK_PERM_WRITE_UNCHANGED, &err) : NULL;
    /* The driver's defaults: a qemu-img create -f qcow2 image. */
    ok = edge && (!drv->bdrv_create_parse ||
                  vb_create_default_opts(&o, &err));
    if (ok) {
        o.file = blk;
        ok = bdrv_create_sync(&o, &err);
    }
    if (edge) {
        blk_detach_user(edge);
    }
    if (blk) {
        blk_close(blk);
    }
    blk_create_options_clear(&o);
    if (!ok) {
        unlink(path);
        g_propagate_error(errp, err);
    }
    return ok;
}

static const QmpCommand vb_create_commands[] = {
    { "blockdev-create", vb_qmp_blockdev_create },
};

void vb_create_register(GArray *table)
{
    g_array_append_vals(table, vb_create_commands,
                        G_N_ELEMENTS(vb_create_commands));
}
