/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Block jobs over QMP: blockdev-mirror, block-stream, block-commit,
 * query-jobs, query-block-jobs, the job-* and block-job-* verbs, and the
 * events (JOB_STATUS_CHANGE, BLOCK_JOB_READY, _PENDING, _COMPLETED,
 * _CANCELLED, _ERROR) in QEMU's shapes.  The state machine, the mirror
 * and the stream/commit walk are in block/job.c, block/mirror.c and
 * block/stream.c; this file finds nodes and jobs by name, makes the graph
 * changes at their end, and speaks QMP.
 *
 * Threads: main thread only.
 */
#include "qemu/osdep.h"
#include "monitor-internal.h"
#include "qemu/error-report.h"
#include "block/block_int.h"
#include "block/job.h"
#include "block/dirty-bitmap.h"

static const char *const on_error_names[] = {
    [JOB_ERROR_REPORT] = "report",
    [JOB_ERROR_IGNORE] = "ignore",
    [JOB_ERROR_STOP] = "stop",
    NULL,
};

/* ---- events -------------------------------------------------------------- */

static void vb_job_event(void *opaque, Job *job, JobEvent ev,
                         const char *operation, JobErrorAction action)
{
    VbState *s = opaque;
    JsonObject *o;
    const char *name;

    if (!s->qmp) {
        return;
    }
    if (ev != JOB_EVENT_STATUS_CHANGE && vb_job_is_create(job)) {
        return;                 /* QEMU's: no block job, no BLOCK_JOB_* */
    }
    o = json_object_new();
    switch (ev) {
    case JOB_EVENT_STATUS_CHANGE:
        name = "JOB_STATUS_CHANGE";
        json_object_set_string_member(o, "id", job->id);
        json_object_set_string_member(o, "status",
                                      job_status_name(job->status));
        break;
    case JOB_EVENT_PENDING:
        name = "BLOCK_JOB_PENDING";
        json_object_set_string_member(o, "type", job->driver->type);
        json_object_set_string_member(o, "id", job->id);
        break;
    case JOB_EVENT_ERROR:
        name = "BLOCK_JOB_ERROR";
        json_object_set_string_member(o, "device", job->id);
        json_object_set_string_member(o, "operation", operation);
        json_object_set_string_member(o, "action", on_error_names[action]);
        break;
    default:
        name = ev == JOB_EVENT_READY ? "BLOCK_JOB_READY" :
               ev == JOB_EVENT_CANCELLED ? "BLOCK_JOB_CANCELLED" :
               "BLOCK_JOB_COMPLETED";
        json_object_set_string_member(o, "type", job->driver->type);
        json_object_set_string_member(o, "device", job->id);
        json_object_set_int_member(o, "len", job->progress_total);
        json_object_set_int_member(o, "offset", job->progress_current);
        json_object_set_int_member(o, "speed", job->speed);
        if (ev == JOB_EVENT_COMPLETED && job->ret < 0 && job->err) {
            json_object_set_string_member(o, "error", job->err);
        }
        break;
    }
    qmp_server_emit_event(s->qmp, name, o);
    json_object_unref(o);
}

void vb_jobs_init(VbState *s)
{
    job_set_event_handler(vb_job_event, s);
}

void vb_jobs_cleanup(VbState *s)
{
    /* Before the nodes go: a job holds them. */
    job_cancel_all_sync();
    job_set_event_handler(NULL, NULL);
}

bool vb_job_uses_node(VbNode *n)
{
    BdrvChild *c;

    QLIST_FOREACH(c, &n->blk->parents, next_parent) {
        if (!c->parent && g_str_has_prefix(c->name, "block job '")) {
            return true;
        }
    }
    return false;
}

/* ---- blockdev-mirror ------------------------------------------------ */

/* What job-complete of a mirror moves: the export on the source's image
 * (through any node sharing it, e.g. a driver=raw node over it). */
typedef struct VbMirrorPivot {
    VbState *s;
    BlockBackend *src;
    BlockBackend *tgt;
    BlockBackend *reopened;     /* a commit's base, read-write for it */
    /* An active commit into a base the chain of @dev opened itself: the
     * pivot makes a node of it first (vb_commit_adopt_base()). */
    VbNode *dev;
    bool adopt;
} VbMirrorPivot;

static bool vb_commit_adopt_base(VbMirrorPivot *p, GError **errp);

/* The export serving @blk, or NULL; false if there are several. */
static bool vb_export_of_blk(VbState *s, BlockBackend *blk, VbExport **out)
{
    *out = NULL;
    for (guint i = 0; i < s->exports->len; i++) {
        VbExport *e = g_ptr_array_index(s->exports, i);

        if (e->node && e->node->blk == blk && !e->deleting) {
            if (*out) {
                return false;
            }
            *out = e;
        }
    }
    return true;
}

static void vb_mirror_quiesce(void *opaque, bool on)
{
    VbMirrorPivot *p = opaque;
    VbExport *e;

    /* On: the export found now.  Off after a pivot: it is on the target
     * now.  Off after a failure: still on the source. */
    if ((vb_export_of_blk(p->s, p->src, &e) && e) ||
        (!on && vb_export_of_blk(p->s, p->tgt, &e) && e)) {
        vu_blk_export_quiesce(e->exp, on);
    }
}

/* What the pivot cannot move: users of the source other than one
 * vhost-user export. */
static bool vb_mirror_pivot_check(void *opaque, GError **errp)
{
    VbMirrorPivot *p = opaque;
    VbExport *e;

    if (!vb_export_of_blk(p->s, p->src, &e)) {
        vb_set_error(errp, "several exports serve the source: delete all "
                     "but one first");
        return false;
    }
    for (guint i = 0; i < p->s->nodes->len; i++) {
        VbNode *n = g_ptr_array_index(p->s->nodes, i);

        if (n->blk == p->src && n->nbd_exports) {
            vb_set_error(errp, "node '%s' has NBD exports, which cannot "
                         "move to the target: delete them (or use "
                         "block-job-cancel for a copy without pivot)",
                         n->name);
            return false;
        }
    }
    return true;
}

static bool vb_mirror_pivot(void *opaque, GError **errp)
{
    VbMirrorPivot *p = opaque;
    VbNode *tgt = NULL;
    VbExport *e;

    if (!vb_mirror_pivot_check(opaque, errp) ||
        !vb_export_of_blk(p->s, p->src, &e)) {
        return false;
    }
    if (!e) {
        return true;            /* no user to move */
    }
    if (p->adopt && !vb_commit_adopt_base(p, errp)) {
        return false;
    }
    for (guint i = 0; i < p->s->nodes->len; i++) {
        VbNode *n = g_ptr_array_index(p->s->nodes, i);

        if (n->blk == p->tgt && !n->alias) {
            tgt = n;
            break;
        }
    }
    if (!tgt) {
        vb_set_error(errp, "the target node is gone");
        return false;
    }
    if (tgt->user) {
        vb_set_error(errp, "node '%s' is exported already", tgt->name);
        return false;
    }
    if (!vu_blk_export_replace_blk(e->exp, tgt->blk, errp)) {
        return false;
    }
    e->node->user = NULL;
    e->node = tgt;
    tgt->user = e;
    return true;
}

static JsonNode *vb_qmp_blockdev_mirror(void *opaque, JsonObject *args,
                                        GError **errp)
{
    static const char *const sync_names[] = {
        [MIRROR_SYNC_FULL] = "full", [MIRROR_SYNC_TOP] = "top",
        [MIRROR_SYNC_NONE] = "none", "incremental", "bitmap", NULL,
    };
    static const char *const copy_modes[] = {
        "background", "write-blocking", NULL,
    };
    static const char *const qemu_on_error[] = {
        "report", "ignore", "stop", "enospc", NULL,
    };
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *job_id = NULL, *device = NULL, *target = NULL;
    const char *replaces = NULL, *filter = NULL;
    int sync = -1, copy_mode = 0, on_src = 0, on_tgt = 0;
    int64_t speed = 0, gran = 0, buf_size = 0;
    bool unmap = true;
    MirrorOptions mo = { 0 };
    VbNode *src, *tgt;

    mo.auto_finalize = true;
    mo.auto_dismiss = true;
    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "job-id", false, &job_id, errp) ||
        !qmp_args_str(&a, "device", true, &device, errp) ||
        !qmp_args_str(&a, "target", true, &target, errp) ||
        !qmp_args_enum(&a, "sync", sync_names, true, &sync, errp) ||
        !qmp_args_int(&a, "speed", false, &speed, NULL, errp) ||
        !qmp_args_int(&a, "granularity", false, &gran, NULL, errp) ||
        !qmp_args_int(&a, "buf-size", false, &buf_size, NULL, errp) ||
        !qmp_args_enum(&a, "on-source-error", qemu_on_error, false, &on_src,
                       errp) ||
        !qmp_args_enum(&a, "on-target-error", qemu_on_error, false, &on_tgt,
                       errp) ||
        !qmp_args_enum(&a, "copy-mode", copy_modes, false, &copy_mode,
                       errp) ||
        !qmp_args_str(&a, "replaces", false, &replaces, errp) ||
        !qmp_args_str(&a, "filter-node-name", false, &filter, errp) ||
        !qmp_args_bool(&a, "unmap", &unmap, errp) ||
        !qmp_args_bool(&a, "auto-finalize", &mo.auto_finalize, errp) ||
        !qmp_args_bool(&a, "auto-dismiss", &mo.auto_dismiss, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    if (sync > MIRROR_SYNC_NONE) {
        vb_set_error(errp, "Parameter 'sync' does not take '%s' here: "
                     "there are no persistent dirty bitmaps; use full, top "
                     "or none", sync_names[sync]);
        return NULL;
    }
    if (on_src == 3 || on_tgt == 3) {
        vb_set_error(errp, "on-source-error/on-target-error=enospc is not "
                     "supported: use report, ignore or stop");
        return NULL;
    }
    if (replaces || filter) {
        vb_set_error(errp, "Parameter '%s' is not supported: the mirror "
                     "does not change the graph", replaces ? "replaces" :
                     "filter-node-name");
        return NULL;
    }
    if (speed < 0) {
        vb_set_error(errp, "Parameter 'speed' expects a non-negative value");
        return NULL;
    }
    if (buf_size < 0 || buf_size > MIRROR_MAX_BUF_SIZE) {
        vb_set_error(errp, "Parameter 'buf-size' must be between 0 (the "
                     "default, 16 MiB) and 1 GiB: the job allocates it "
                     "when it starts");
        return NULL;
    }
    if (gran && (gran < BDRV_DIRTY_GRANULARITY_MIN ||
                 gran > BDRV_DIRTY_GRANULARITY_MAX || (gran & (gran - 1)))) {
        vb_set_error(errp, "Parameter 'granularity' must be a power of 2 "
                     "between 512 and 64M");
        return NULL;
    }
    src = vb_node_find(s, device);
    if (!src) {
        vb_set_error(errp, "Cannot find device='%s' nor node-name='%s'",
                     device, device);
        return NULL;
    }
    tgt = vb_node_find(s, target);
    if (!tgt) {
        vb_set_error(errp, "Cannot find device='%s' nor node-name='%s'",
                     target, target);
        return NULL;
    }
    if (tgt->blk == src->blk) {
        vb_set_error(errp, "Can't mirror node into itself");
        return NULL;
    }
    if (tgt->user) {
        vb_set_error(errp, "Node '%s' is in use by an export: a mirror "
                     "target must not be written by anyone else", target);
        return NULL;
    }
    mo.job_id = job_id ? job_id : device;
    mo.device = device;
    mo.source = src->blk;
    mo.target = tgt->blk;
    mo.sync = sync;
    mo.granularity = gran;
    mo.buf_size = buf_size;
    mo.speed = speed;
    mo.on_source_error = on_src;
    mo.on_target_error = on_tgt;
    mo.unmap = unmap;
    mo.write_blocking = copy_mode == 1;
    mo.quiesce = vb_mirror_quiesce;
    mo.pivot_check = vb_mirror_pivot_check;
    mo.pivot = vb_mirror_pivot;
    mo.pivot_opaque = g_new0(VbMirrorPivot, 1);
    ((VbMirrorPivot *)mo.pivot_opaque)->s = s;
    ((VbMirrorPivot *)mo.pivot_opaque)->src = src->blk;
    ((VbMirrorPivot *)mo.pivot_opaque)->tgt = tgt->blk;
    if (!mirror_start(&mo, errp)) {
        return NULL;
    }
    return vb_empty();
}

/* ---- queries ------------------------------------------------------------- */

static JsonNode *vb_qmp_query_jobs(void *opaque, JsonObject *args,
                                   GError **errp)
{
    g_auto(QmpArgs) a = { 0 };
    JsonArray *arr;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    arr = json_array_new();
    for (Job *job = job_next(NULL); job; job = job_next(job)) {
        JsonObject *o;

        if (job->status == JOB_STATUS_NULL) {
            continue;           /* dismissed, freed at the next turn */
        }
        o = json_object_new();

        json_object_set_string_member(o, "id", job->id);
        json_object_set_string_member(o, "type", job->driver->type);
        json_object_set_string_member(o, "status",
                                      job_status_name(job->status));
        json_object_set_int_member(o, "current-progress",
                                   job->progress_current);
        json_object_set_int_member(o, "total-progress", job->progress_total);
        if (job->ret < 0 && job->err) {
            json_object_set_string_member(o, "error", job->err);
        }
        json_array_add_object_element(arr, o);
    }
    return vb_node_take_array(arr);
}

static JsonNode *vb_qmp_query_block_jobs(void *opaque, JsonObject *args,
                                         GError **errp)
{
    g_auto(QmpArgs) a = { 0 };
    JsonArray *arr;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    arr = json_array_new();
    for (Job *job = job_next(NULL); job; job = job_next(job)) {
        JsonObject *o;

        if (job->status == JOB_STATUS_NULL || vb_job_is_create(job)) {
            continue;           /* dismissed, or no block job */
        }
        o = json_object_new();

        json_object_set_string_member(o, "type", job->driver->type);
        json_object_set_string_member(o, "device", job->id);
        json_object_set_int_member(o, "len", job->progress_total);
        json_object_set_int_member(o, "offset", job->progress_current);
        json_object_set_boolean_member(o, "busy",
                                       !job_is_paused(job) &&
                                       !job->completed);
        json_object_set_boolean_member(o, "paused", job->pause_count > 0);
        json_object_set_int_member(o, "speed", job->speed);
        json_object_set_string_member(o, "io-status", "ok");
        json_object_set_boolean_member(o, "ready", job_is_ready(job));
        json_object_set_string_member(o, "status",
                                      job_status_name(job->status));
        json_object_set_boolean_member(o, "auto-finalize",
                                       job->auto_finalize);
        json_object_set_boolean_member(o, "auto-dismiss", job->auto_dismiss);
        if (job->ret < 0 && job->err) {
            json_object_set_string_member(o, "error", job->err);
        }
        json_array_add_object_element(arr, o);
    }
    return vb_node_take_array(arr);
}

/* ---- the verbs ------------------------------------------------------ */

/* The job named by @key (job-*: "id"; block-job-*: "device" or "id"), or
 * NULL with QEMU's error of that family. */
static Job *vb_job_arg(QmpArgs *a, const char *key, bool block,
                       GError **errp)
{
    const char *id = NULL;
    Job *job;

    if (!qmp_args_str(a, key, true, &id, errp)) {
        return NULL;
    }
    job = job_get(id);
    if (!job || job->status == JOB_STATUS_NULL) {
        if (block) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_ACTIVE,
                        "Block job '%s' not found", id);
        } else {
            vb_set_error(errp, "Job not found");
        }
        return NULL;
    }
    return job;
}

typedef enum VbJobCmd {
    VB_JOB_PAUSE, VB_JOB_RESUME, VB_JOB_CANCEL, VB_JOB_COMPLETE,
    VB_JOB_FINALIZE, VB_JOB_DISMISS, VB_JOB_SET_SPEED,
} VbJobCmd;

static JsonNode *vb_job_verb(JsonObject *args, VbJobCmd cmd, bool block,
                             GError **errp)
{
    g_auto(QmpArgs) a = { 0 };
    /* QEMU: block-job-finalize and -dismiss take "id", the other
     * block-job-* "device", every job-* "id". */
    const char *key = block && cmd != VB_JOB_FINALIZE &&
                      cmd != VB_JOB_DISMISS ? "device" : "id";
    bool force = !block;        /* job-cancel always forces */
    int64_t speed = 0;
    Job *job;
    bool ok = false;

    qmp_args_init(&a, args, false, NULL);
    job = vb_job_arg(&a, key, block, errp);
    if (!job) {
        return NULL;
    }
    if (block && cmd == VB_JOB_CANCEL &&
        !qmp_args_bool(&a, "force", &force, errp)) {
        return NULL;
    }
    if (cmd == VB_JOB_SET_SPEED &&
        !qmp_args_int(&a, "speed", true, &speed, NULL, errp)) {
        return NULL;
    }
    if (!qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    switch (cmd) {
    case VB_JOB_PAUSE:
        ok = job_user_pause(job, errp);
        break;
    case VB_JOB_RESUME:
        ok = job_user_resume(job, errp);
        break;
    case VB_JOB_CANCEL:
        ok = job_user_cancel(job, force, errp);
        break;
    case VB_JOB_COMPLETE:
        ok = job_complete(job, errp);
        break;
    case VB_JOB_FINALIZE:
        ok = job_finalize(job, errp);
        break;
    case VB_JOB_DISMISS:
        ok = job_dismiss(job, errp);
        break;
    case VB_JOB_SET_SPEED:
        ok = job_set_speed(job, speed, errp);
        break;
    }
    return ok ? vb_empty() : NULL;
}

#define VB_JOB_CMD(fn, cmd, block)                                          \
    static JsonNode *fn(void *opaque, JsonObject *args, GError **errp)      \
    {                                                                       \
        return vb_job_verb(args, cmd, block, errp);                         \
    }

VB_JOB_CMD(vb_qmp_job_pause, VB_JOB_PAUSE, false)
VB_JOB_CMD(vb_qmp_job_resume, VB_JOB_RESUME, false)
VB_JOB_CMD(vb_qmp_job_cancel, VB_JOB_CANCEL, false)
VB_JOB_CMD(vb_qmp_job_complete, VB_JOB_COMPLETE, false)
VB_JOB_CMD(vb_qmp_job_finalize, VB_JOB_FINALIZE, false)
VB_JOB_CMD(vb_qmp_job_dismiss, VB_JOB_DISMISS, false)
VB_JOB_CMD(vb_qmp_block_job_pause, VB_JOB_PAUSE, true)
VB_JOB_CMD(vb_qmp_block_job_resume, VB_JOB_RESUME, true)
VB_JOB_CMD(vb_qmp_block_job_cancel, VB_JOB_CANCEL, true)
VB_JOB_CMD(vb_qmp_block_job_complete, VB_JOB_COMPLETE, true)
VB_JOB_CMD(vb_qmp_block_job_finalize, VB_JOB_FINALIZE, true)
VB_JOB_CMD(vb_qmp_block_job_dismiss, VB_JOB_DISMISS, true)
VB_JOB_CMD(vb_qmp_block_job_set_speed, VB_JOB_SET_SPEED, true)

/* ---- blockdev-snapshot, blockdev-snapshot-sync ----------------------- */

/*
 * A live external snapshot, as QEMU's: the overlay (a qcow2 node that
 * has no backing node yet) gets the node as its backing node, and the
 * node's export moves onto the overlay, so the guest's writes land there
 * from then on and the node's image stops changing.  The export is
 * quiesced (its queues pop nothing new), its requests in flight are
 * waited for (a later copy-on-write in the overlay reads them from the
 * node), and the node is flushed (a flush the guest sends to the overlay
 * afterwards does not reach the node); only then does the export move,
 * and the reply comes.
 */
typedef struct VbSnapshot {
    VbState *s;
    QmpPending *p;
    VbNode *node;
    VbNode *ov;
    VbExport *e;                /* quiesced, or NULL */
    bool drop_overlay;          /* blockdev-snapshot-sync added it */
    char *created;              /* ... and created this file for it */
    BlockAIOCB acb;
} VbSnapshot;

/* Wait until none of @e's requests is in flight; its queues pop no new
 * one (quiesced).  They complete in the iothreads, not here. */
static void vb_export_wait_idle(VbExport *e)
{
    /* As QEMU's drain, this waits as long as the storage takes (the
     * monitor with it); the guest is held anyway. */
    for (;;) {
        VuBlkExportStats st;

        vu_blk_export_get_stats(e->exp, &st);
        if (!st.inflight) {
            return;
        }
        g_usleep(100);
    }
}

static bool vb_export_alive(VbState *s, VbExport *e)
{
    return e && g_ptr_array_find(s->exports, e, NULL) && !e->deleting;
}

static void vb_snapshot_undo(VbSnapshot *sn)
{
    blk_set_backing(sn->ov->blk, NULL, NULL);
    sn->ov->backing = NULL;
    sn->node->parents--;
    if (sn->drop_overlay) {
        vb_node_delete(sn->s, sn->ov);
    }
    if (sn->created) {
        unlink(sn->created);
    }
}

static void vb_snapshot_flushed(void *opaque, int ret)
{
    VbSnapshot *sn = opaque;
    VbExport *e = vb_export_alive(sn->s, sn->e) ? sn->e : NULL;
    GError *err = NULL;

    sn->node->snapshotting = false;
    sn->ov->snapshotting = false;
    if (sn->ov->user || sn->ov->nbd_exports) {
        /* Exported meanwhile: requests may use its backing node now, so
         * it stays, and the guest stays on the node. */
        if (e) {
            vu_blk_export_quiesce(e->exp, false);
        }
        vb_set_error(&err, "The overlay is already in use: it was exported "
                     "while the snapshot waited for its flush; node '%s' "
                     "is its backing node, the export stays on the node",
                     sn->node->name);
        qmp_pending_complete(sn->p, NULL, err);
        g_free(sn->created);
        g_free(sn);
        return;
    }
    if (ret < 0) {
        vb_set_error(&err, "Failed to flush node '%s' before the snapshot: "
                     "%s", sn->node->name, g_strerror(-ret));
    } else if (e && vu_blk_export_get_blk(e->exp) == sn->node->blk) {
        if (vu_blk_export_replace_blk(e->exp, sn->ov->blk, &err)) {
            e->node->user = NULL;
            e->node = sn->ov;
            sn->ov->user = e;
        }
    }
    if (e) {
        vu_blk_export_quiesce(e->exp, false);
    }
    if (err) {
        vb_snapshot_undo(sn);
        qmp_pending_complete(sn->p, NULL, err);
    } else {
        qmp_pending_complete(sn->p, vb_empty(), NULL);
    }
    g_free(sn->created);
    g_free(sn);
}

/* Completes @p (now or after the flush).  @drop_overlay: delete the
 * overlay node if it fails, and the file @created too if not NULL. */
static void vb_snapshot_start(VbState *s, VbNode *node, VbNode *ov,
                              bool drop_overlay, const char *created,
                              QmpPending *p)
{
    GError *err = NULL;
    VbSnapshot *sn;
    VbExport *e = NULL;

    if (ov == node || ov->blk == node->blk) {
        vb_set_error(&err, "The overlay cannot be the node itself");
    } else if (ov->snapshotting || node->snapshotting) {
        vb_set_error(&err, "Node '%s' is in use by a blockdev-snapshot that "
                     "has not returned yet", ov->snapshotting ? ov->name :
                     node->name);
    } else if (ov->user || ov->nbd_exports || ov->parents || ov->filter ||
               vb_job_uses_node(ov)) {
        vb_set_error(&err, "The overlay is already in use");
    } else if (!ov->format || !blk_can_change_backing(ov->blk)) {
        vb_set_error(&err, "The overlay does not support backing images: "
                     "add it with driver=qcow2");
    } else if (ov->backing || bdrv_find_child(ov->blk, "backing")) {
        vb_set_error(&err, "The overlay already has a backing image: add it "
                     "with backing=null");
    } else if (node->filter) {
        vb_set_error(&err, "Node '%s' has the throttle node '%s' on top of "
                     "it: take the snapshot of that one", node->name,
                     node->filter->name);
    } else if (vb_job_uses_node(node)) {
        vb_set_error(&err, "Node '%s' is in use by a block job: end the job "
                     "first", node->name);
    } else if (!vb_export_of_blk(s, node->blk, &e)) {
        vb_set_error(&err, "several exports serve node '%s': delete all but "
                     "one first", node->name);
    } else if (e && blk_getlength(ov->blk) != blk_getlength(node->blk)) {
        vb_set_error(&err, "The overlay's size (%" PRIu64 " bytes) differs "
                     "from node '%s''s (%" PRIu64 " bytes): the guest would "
                     "see its disk change; create the overlay with the same "
                     "size", blk_getlength(ov->blk), node->name,
                     blk_getlength(node->blk));
    }
    if (!err) {
        for (guint i = 0; i < s->nodes->len; i++) {
            VbNode *n = g_ptr_array_index(s->nodes, i);

            if (n->blk == node->blk && n->nbd_exports) {
                vb_set_error(&err, "node '%s' has NBD exports, which cannot "
                             "move to the overlay: delete them first",
                             n->name);
                break;
            }
        }
    }
    if (!err && e) {
        vu_blk_export_quiesce(e->exp, true);
        vb_export_wait_idle(e);
    }
    if (!err && !blk_set_backing(ov->blk, node->blk, &err) && e) {
        vu_blk_export_quiesce(e->exp, false);
    }
    if (err) {
        if (drop_overlay) {
            vb_node_delete(s, ov);
        }
        if (created) {
            unlink(created);
        }
        qmp_pending_complete(p, NULL, err);
        return;
    }
    ov->backing = node;
    node->parents++;
    /* Shutdown frees format nodes newest first: the overlay must go
     * before its backing node, even if it was added first. */
    g_ptr_array_remove(s->nodes, ov);
    g_ptr_array_add(s->nodes, ov);
    sn = g_new0(VbSnapshot, 1);
    sn->s = s;
    sn->p = p;
    sn->node = node;
    sn->ov = ov;
    sn->e = e;
    sn->drop_overlay = drop_overlay;
    sn->created = g_strdup(created);
    node->snapshotting = true;
    ov->snapshotting = true;
    blk_aio_flush(node->blk, &sn->acb, vb_snapshot_flushed, sn);
}

static void vb_qmp_blockdev_snapshot(void *opaque, JsonObject *args,
                                     QmpPending *p)
{
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *node = NULL, *overlay = NULL;
    GError *err = NULL;
    VbNode *n, *ov;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "node", true, &node, &err) ||
        !qmp_args_str(&a, "overlay", true, &overlay, &err) ||
        !qmp_args_check_done(&a, &err)) {
        qmp_pending_complete(p, NULL, err);
        return;
    }
    n = vb_node_find(s, node);
    ov = n ? vb_node_find(s, overlay) : NULL;
    if (!n || !ov) {
        const char *what = n ? overlay : node;

        vb_set_error(&err, "Cannot find device='%s' nor node-name='%s'",
                     what, what);
        qmp_pending_complete(p, NULL, err);
        return;
    }
    vb_snapshot_start(s, n, ov, false, NULL, p);
}

/*
 * blockdev-snapshot-sync: the overlay file is created (mode=absolute-
 * paths, the default: a new qcow2 image naming the node's image by its
 * absolute path and format, of its size) or exists (mode=existing, e.g.
 * made by qemu-img create -f qcow2 -b BACKING -F FMT); it is added as
 * node snapshot-node-name with backing=null, then as blockdev-snapshot.
 */
static void vb_qmp_blockdev_snapshot_sync(void *opaque, JsonObject *args,
                                          QmpPending *p)
{
    static const char *const modes[] = { "existing", "absolute-paths", NULL };
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *device = NULL, *node_name = NULL, *file = NULL;
    const char *snap_name = NULL, *format = NULL, *created = NULL;
    int mode = 1;
    GError *err = NULL;
    JsonObject *def, *fdef;
    const BlockDriver *drv;
    VbNode *n, *ov;

    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "device", false, &device, &err) ||
        !qmp_args_str(&a, "node-name", false, &node_name, &err) ||
        !qmp_args_str(&a, "snapshot-file", true, &file, &err) ||
        !qmp_args_str(&a, "snapshot-node-name", false, &snap_name, &err) ||
        !qmp_args_str(&a, "format", false, &format, &err) ||
        !qmp_args_enum(&a, "mode", modes, false, &mode, &err) ||
        !qmp_args_check_done(&a, &err)) {
        goto fail;
    }
    n = vb_node_find(s, device ? device : node_name ? node_name : "");
    if (!n || (device && node_name && n != vb_node_find(s, node_name))) {
        vb_set_error(&err, "Cannot find device='%s' nor node-name='%s'",
                     device ? device : "", node_name ? node_name : "");
        goto fail;
    }
    /* The overlay's driver, by name from the registry (without one, the
     * registry's default overlay format, as QEMU's), which must be a
     * format that creates images. */
    drv = format ? bdrv_find_driver(format, format, NULL)
                 : bdrv_default_overlay_driver();
    if (!format) {
        format = drv ? drv->format_name : "(none)";
    }
    if (!drv) {
        /* Not in the registry (driver=raw is the monitor's own node over
         * a file node): nothing that could make the overlay. */
        vb_set_error(&err, "format=%s: driver %s cannot create images",
                     format, format);
        goto fail;
    }
    if (!drv->is_format) {
        vb_set_error(&err, "format=%s: driver %s is no image format: use "
                     "format=qcow2", drv->format_name, drv->format_name);
        goto fail;
    }
    if (mode == 1 && !drv->bdrv_create) {
        vb_set_error(&err, "format=%s: driver %s cannot create images",
                     drv->format_name, drv->format_name);
        goto fail;
    }
    if (!snap_name) {
        vb_set_error(&err, "Parameter 'snapshot-node-name' is missing: "
                     "vhost-blkd names no node itself");
        goto fail;
    }
    if (mode == 1) {
        /* QEMU names the backing file by the node's file name, which
         * is absolute here (as given to blockdev-add, made absolute). */
        g_autofree char *bfile = NULL;
        const char *bfmt = blk_image_format(n->blk);

        if (n->no_storage || (n->file && !n->format && !n->alias)) {
            vb_set_error(&err, "Node '%s' has no image file a new overlay "
                         "could name: create the overlay yourself and "
                         "give mode=existing", n->name);
            goto fail;
        }
        bfile = g_canonicalize_filename(n->blk->filename, NULL);
        if (!vb_create_overlay(drv, file, blk_getlength(n->blk), bfile,
                               bfmt, &err)) {
            goto fail;
        }
        created = file;
    }
    def = json_object_new();
    fdef = json_object_new();
    json_object_set_string_member(fdef, "driver", "file");
    json_object_set_string_member(fdef, "filename", file);
    json_object_set_string_member(def, "driver", drv->format_name);
    json_object_set_string_member(def, "node-name", snap_name);
    json_object_set_object_member(def, "file", fdef);
    json_object_set_null_member(def, "backing");
    ov = vb_blockdev_add(s, def, false, &err);
    json_object_unref(def);
    if (!ov) {
        goto fail;
    }
    vb_snapshot_start(s, n, ov, true, created, p);
    return;

fail:
    if (created) {
        unlink(created);
    }
    qmp_pending_complete(p, NULL, err);
}

/* ---- block-stream ----------------------------------------------------- */

/* The backing chain of a format node, top first, with each image's path
 * (as its overlay names it, and resolved) and its user node if any. */
typedef struct VbChainLink {
    BlockBackend *blk;
    VbNode *node;               /* added by name, or NULL: implicit */
    const char *named;          /* as the overlay's header names it */
    char *path;                 /* canonical */
} VbChainLink;

static void vb_chain_free(GArray *chain)
{
    for (guint i = 0; i < chain->len; i++) {
        g_free(g_array_index(chain, VbChainLink, i).path);
    }
    g_array_free(chain, true);
}

static VbNode *vb_node_of_blk(VbState *s, BlockBackend *blk)
{
    for (guint i = 0; i < s->nodes->len; i++) {
        VbNode *n = g_ptr_array_index(s->nodes, i);

        if (n->blk == blk && !n->alias) {
            return n;
        }
    }
    return NULL;
}

static GArray *vb_chain_of(VbState *s, VbNode *top)
{
    GArray *chain = g_array_new(false, true, sizeof(VbChainLink));
    VbChainLink l = { .blk = top->blk, .node = top };
    BlockDriverInfo bdi;

    l.path = g_canonicalize_filename(top->file ? top->file->filename :
                                     top->filename, NULL);
    g_array_append_val(chain, l);
    /* The depth is bounded by the driver's (QCOW2_MAX_BACKING_DEPTH). */
    for (;;) {
        memset(&bdi, 0, sizeof(bdi));
        blk_get_info(l.blk, &bdi);
        if (!bdi.backing) {
            break;
        }
        l.blk = bdi.backing;
        l.node = vb_node_of_blk(s, bdi.backing);
        l.named = bdi.backing_file;
        l.path = g_canonicalize_filename(bdi.full_backing_file ?
                                         bdi.full_backing_file :
                                         bdi.backing->filename, NULL);
        g_array_append_val(chain, l);
    }
    return chain;
}

/*
 * The image of the node called @name: a node of ours, or one of the
 * implicit nodes query-named-block-nodes lists for the chain a format
 * node opened from its images' headers (monitor/query.c):
 * "#NODE-backingK" is the image K levels below NODE, "#NODE-backingK-file"
 * its file node.  NULL: no such node.
 */
static BlockBackend *vb_named_image(VbState *s, const char *name)
{
    VbNode *n = vb_node_find(s, name);
    g_autofree char *owner = NULL;
    const char *tag, *num;
    char *end;
    BlockBackend *blk;
    guint64 level;
    bool file;

    if (n) {
        return n->blk;
    }
    if (name[0] != '#' || !(tag = g_strrstr(name, "-backing"))) {
        return NULL;
    }
    num = tag + strlen("-backing");
    if (!g_ascii_isdigit(*num)) {
        return NULL;
    }
    level = g_ascii_strtoull(num, &end, 10);
    file = !strcmp(end, "-file");
    if (!level || (*end && !file)) {
        return NULL;
    }
    owner = g_strndup(name + 1, tag - name - 1);
    n = vb_node_find(s, owner);
    if (!n || !n->format) {
        return NULL;
    }
    /* As the query walks: it ends at a backing node given by name (which
     * goes by that name) and at the chain's end (a huge level too). */
    blk = n->blk;
    for (guint64 i = 0; i < level; i++) {
        BlockDriverInfo bdi = { 0 };

        blk_get_info(blk, &bdi);
        if (!bdi.backing || vb_node_of_blk(s, bdi.backing)) {
            return NULL;
        }
        blk = bdi.backing;
    }
    if (file) {
        BdrvChild *c = bdrv_find_child(blk, "file");

        return c ? c->bs : NULL;
    }
    return blk;
}

/*
 * The holder ("block job 'ID'") of a block job whose nodes include @blk:
 * a node the job is attached to, or an image of such a node's backing
 * chain (a stream reads them, a commit drops them or writes the base).
 * NULL: none.  QEMU's op blockers refuse a resize of all of them.
 */
const char *vb_job_using_image(VbState *s, BlockBackend *blk)
{
    for (guint i = 0; i < s->nodes->len; i++) {
        VbNode *m = g_ptr_array_index(s->nodes, i);
        BdrvChild *c;

        QLIST_FOREACH(c, &m->blk->parents, next_parent) {
            GArray *chain;
            bool hit = false;

            if (c->parent || !g_str_has_prefix(c->name, "block job '")) {
                continue;
            }
            chain = vb_chain_of(s, m);
            for (guint j = 0; j < chain->len && !hit; j++) {
                hit = g_array_index(chain, VbChainLink, j).blk == blk;
            }
            vb_chain_free(chain);
            if (hit) {
                return c->name;
            }
        }
    }
    return NULL;
}

/* Whether an NBD export serves @top (or a node sharing its image, or
 * its throttle node), which cannot be held while the chain changes. */
static bool vb_stream_nbd_user(VbState *s, VbNode *top)
{
    for (guint i = 0; i < s->nodes->len; i++) {
        VbNode *n = g_ptr_array_index(s->nodes, i);

        if ((n->blk == top->blk || n == top->filter) && n->nbd_exports) {
            return true;
        }
    }
    return false;
}

typedef struct VbStreamFinish {
    VbState *s;
    VbNode *top;                /* whose header changes */
    VbNode *active;             /* the node the export serves: the top,
                                 * or the end of the chain above it */
    VbNode *base_node;          /* base added by name, or NULL */
    BlockBackend *base;         /* NULL: none any more */
    const char *name;           /* for the header, in the same block */
    const char *fmt;
} VbStreamFinish;

/*
 * The graph change at the end of a stream: the top's users are held
 * with nothing in flight (the iothreads read the backing node without a
 * lock), the header is rewritten and the chain above the base closed,
 * then the users go on.
 */
static bool vb_stream_finish(void *opaque, GError **errp)
{
    VbStreamFinish *f = opaque;
    /* The export reaches the top directly, or through its throttle
     * node (a driver=raw node over it shares its blk). */
    BlockBackend *served = f->active->filter ? f->active->filter->blk :
                           f->active->blk;
    VbExport *e = NULL;
    BlockBackend *old;
    bool ok;

    if (vb_stream_nbd_user(f->s, f->active)) {
        vb_set_error(errp, "node '%s' got NBD exports meanwhile, whose "
                     "reads could still use the old chain: delete them "
                     "and start the job again", f->active->name);
        return false;
    }
    if (!vb_export_of_blk(f->s, served, &e)) {
        vb_set_error(errp, "several exports serve node '%s': delete all "
                     "but one and start the job again", f->active->name);
        return false;
    }
    if (e) {
        vu_blk_export_quiesce(e->exp, true);
        vb_export_wait_idle(e);
    }
    {
        BlockDriverInfo bdi = { 0 };

        blk_get_info(f->top->blk, &bdi);
        old = bdi.backing;
    }
    ok = blk_change_backing(f->top->blk, f->base, f->name, f->fmt, errp);
    /* Unchanged, the top keeps what it held (e.g. a base below it that
     * an active commit made a node of). */
    if (ok && old != f->base) {
        if (f->top->backing) {
            f->top->backing->parents--;
        }
        f->top->backing = f->base_node;
        if (f->base_node) {
            f->base_node->parents++;
        }
    }
    if (e) {
        vu_blk_export_quiesce(e->exp, false);
    }
    return ok;
}

/*
 * What block-stream and block-commit check alike, in QEMU's order: base
 * and base-node exclusive, on-error without enospc, a speed >= 0, then
 * the device, a format node whose driver can change its backing file
 * (qcow2; @what: what the job does to it, for the message).  The node,
 * or NULL with @errp set.
 */
static VbNode *vb_job_chain_device(VbState *s, const char *device,
                                   const char *base, const char *base_node,
                                   int on_error, int64_t speed,
                                   const char *what, GError **errp)
{
    VbNode *n;

    if (base && base_node) {
        vb_set_error(errp, "'base' and 'base-node' cannot be specified at "
                     "the same time");
        return NULL;
    }
    if (on_error == 3) {
        vb_set_error(errp, "on-error=enospc is not supported: use report, "
                     "ignore or stop");
        return NULL;
    }
    if (speed < 0) {
        vb_set_error(errp, "Parameter 'speed' expects a non-negative value");
        return NULL;
    }
    n = vb_node_find(s, device);
    if (!n) {
        vb_set_error(errp, "Cannot find device='%s' nor node-name='%s'",
                     device, device);
        return NULL;
    }
    /* What the driver can do, not its name: a format whose images'
     * backing file can change. */
    if (!n->format || !blk_can_change_backing(n->blk)) {
        vb_set_error(errp, "Node '%s' is not a qcow2 node: only an image "
                     "with a backing file can be %s", device, what);
        return NULL;
    }
    return n;
}

static JsonNode *vb_qmp_block_stream(void *opaque, JsonObject *args,
                                     GError **errp)
{
    static const char *const qemu_on_error[] = {
        "report", "ignore", "stop", "enospc", NULL,
    };
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *job_id = NULL, *device = NULL, *base = NULL;
    const char *base_node = NULL, *backing_file = NULL, *bottom = NULL;
    const char *filter = NULL;
    int on_error = 0;
    int64_t speed = 0;
    StreamOptions so = { 0 };
    VbStreamFinish *f;
    VbNode *top;
    GArray *chain;
    guint bi = 0;               /* index of the base; 0: none */

    so.auto_finalize = true;
    so.auto_dismiss = true;
    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "job-id", false, &job_id, errp) ||
        !qmp_args_str(&a, "device", true, &device, errp) ||
        !qmp_args_str(&a, "base", false, &base, errp) ||
        !qmp_args_str(&a, "base-node", false, &base_node, errp) ||
        !qmp_args_str(&a, "backing-file", false, &backing_file, errp) ||
        !qmp_args_str(&a, "bottom", false, &bottom, errp) ||
        !qmp_args_str(&a, "filter-node-name", false, &filter, errp) ||
        !qmp_args_int(&a, "speed", false, &speed, NULL, errp) ||
        !qmp_args_enum(&a, "on-error", qemu_on_error, false, &on_error,
                       errp) ||
        !qmp_args_bool(&a, "auto-finalize", &so.auto_finalize, errp) ||
        !qmp_args_bool(&a, "auto-dismiss", &so.auto_dismiss, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    if (bottom || filter) {
        vb_set_error(errp, "Parameter '%s' is not supported: give the base "
                     "with base-node or base", bottom ? "bottom" :
                     "filter-node-name");
        return NULL;
    }
    top = vb_job_chain_device(s, device, base, base_node, on_error, speed,
                              "streamed into", errp);
    if (!top) {
        return NULL;
    }
    if (blk_is_read_only(top->blk)) {
        vb_set_error(errp, "Node '%s' is read-only: block-stream writes "
                     "into it; add it without read-only=on", device);
        return NULL;
    }
    if (vb_job_uses_node(top) || top->snapshotting || top->resizing) {
        vb_set_error(errp, "Node '%s' is busy: it is in use by another "
                     "block job, snapshot or resize; wait for it to end",
                     device);
        return NULL;
    }
    if (vb_stream_nbd_user(s, top)) {
        vb_set_error(errp, "Node '%s' has NBD exports, whose reads use the "
                     "chain that block-stream changes: delete them first",
                     device);
        return NULL;
    }
    chain = vb_chain_of(s, top);
    if (chain->len < 2) {
        vb_set_error(errp, "Node '%s' has no backing file: there is "
                     "nothing to stream", device);
        goto fail;
    }
    if (base_node) {
        BlockBackend *b = vb_named_image(s, base_node);

        if (!b) {
            vb_set_error(errp, "Cannot find device='%s' nor node-name='%s'",
                         base_node, base_node);
            goto fail;
        }
        for (bi = 1; bi < chain->len; bi++) {
            if (g_array_index(chain, VbChainLink, bi).blk == b) {
                break;
            }
        }
        if (bi == chain->len) {
            vb_set_error(errp, "Node '%s' is not a backing image of '%s'",
                         base_node, device);
            goto fail;
        }
    } else if (base) {
        g_autofree char *want = g_canonicalize_filename(base, NULL);

        for (bi = 1; bi < chain->len; bi++) {
            VbChainLink *l = &g_array_index(chain, VbChainLink, bi);

            if (!strcmp(l->path, want) ||
                (l->named && !strcmp(l->named, base))) {
                break;
            }
        }
        if (bi == chain->len) {
            vb_set_error(errp, "Can't find '%s' in the backing chain of "
                         "'%s'", base, device);
            goto fail;
        }
    }
    if (!bi && backing_file) {
        vb_set_error(errp, "backing file specified, but streaming the "
                     "entire chain");
        goto fail;
    }
    /* The nodes that go must not be used by anyone but the chain; the
     * base stays whoever's it is.  A base opened by a node given by name
     * (not by the top) cannot become the top's. */
    for (guint i = 1; i < (bi ? bi : chain->len); i++) {
        VbChainLink *l = &g_array_index(chain, VbChainLink, i);

        if (l->node && (vb_job_uses_node(l->node) || l->node->snapshotting)) {
            vb_set_error(errp, "Node '%s' of the chain is busy with a block "
                         "job or snapshot: wait for it to end",
                         l->node->name);
            goto fail;
        }
    }
    if (bi) {
        VbChainLink *l = &g_array_index(chain, VbChainLink, bi);

        if (blk_owns_backing(top->blk) == (l->node != NULL)) {
            vb_set_error(errp, "The base '%s' was opened by another node of "
                         "the chain, not by '%s': stream into that node, "
                         "or add the chain's images with backing=NODE",
                         l->node ? l->node->name : l->path, device);
            goto fail;
        }
    }
    if (bi) {
        VbChainLink *l = &g_array_index(chain, VbChainLink, bi);
        VbChainLink *p = &g_array_index(chain, VbChainLink, bi - 1);
        VbChainLink *t = &g_array_index(chain, VbChainLink, 0);
        g_autofree char *pdir = g_path_get_dirname(p->path);
        g_autofree char *tdir = g_path_get_dirname(t->path);
        const char *fmt = blk_image_format(l->blk);
        const char *name;
        char *mem;

        /* As the images name it: a relative name stays so when the top
         * is in the directory of the image that named it. */
        if (backing_file) {
            name = backing_file;
        } else if (l->named && (g_path_is_absolute(l->named) ||
                                !strcmp(pdir, tdir))) {
            name = l->named;
        } else {
            name = l->path;
        }
        /* One block: the job g_free()s it. */
        f = g_malloc0(sizeof(*f) + strlen(name) + strlen(fmt) + 2);
        mem = (char *)(f + 1);
        f->name = strcpy(mem, name);
        f->fmt = strcpy(mem + strlen(name) + 1, fmt);
        f->base = l->blk;
        f->base_node = l->node;
    } else {
        f = g_new0(VbStreamFinish, 1);
    }
    f->s = s;
    f->top = top;
    f->active = top;
    so.job_id = job_id ? job_id : device;
    so.device = device;
    so.top = top->blk;
    so.base = f->base;
    so.speed = speed;
    so.on_error = on_error;
    so.finish = vb_stream_finish;
    so.opaque = f;
    vb_chain_free(chain);
    if (!stream_start(&so, errp)) {
        return NULL;
    }
    return vb_empty();

fail:
    vb_chain_free(chain);
    return NULL;
}

/* ---- block-commit ----------------------------------------------------- */

/* The index in @chain (from 1) of the node called @node_name, or of the
 * image called @file (as the chain names it, or resolved); 0: none. */
static guint vb_chain_index(VbState *s, GArray *chain, const char *node_name,
                            const char *file)
{
    g_autofree char *want = file ? g_canonicalize_filename(file, NULL) :
                            NULL;
    BlockBackend *nb = node_name ? vb_named_image(s, node_name) : NULL;

    for (guint i = 0; i < chain->len; i++) {
        VbChainLink *l = &g_array_index(chain, VbChainLink, i);

        if ((nb && l->blk == nb) ||
            (want && (!strcmp(l->path, want) ||
                      (l->named && !strcmp(l->named, file))))) {
            return i;
        }
    }
    return G_MAXUINT;
}

/*
 * An active commit: a mirror of the active node @dev into @base (a node
 * of its chain, writable) while the guest writes; ready once the base
 * holds what the guest sees, job-complete moves the export onto the
 * base, block-job-cancel then leaves the chain as it was (the base's
 * new clusters are hidden by the images above it).
 */
/* Main thread: the nodes on the images of @base (its format node, the
 * filters over it, its file node) say what a reopen made of them. */
static void vb_commit_sync_ro(VbState *s, BlockBackend *base)
{
    BlockBackend *fmt = base;
    BdrvChild *file;

    while (fmt->drv->is_filter && fmt->child) {
        fmt = fmt->child;
    }
    file = bdrv_find_child(fmt, "file");
    for (guint i = 0; i < s->nodes->len; i++) {
        VbNode *n = g_ptr_array_index(s->nodes, i);

        if (n->blk == base || n->blk == fmt || (file && n->blk == file->bs)) {
            n->readonly = blk_is_read_only(n->blk);
        }
    }
}

/*
 * Main thread: an active commit that ended without moving the users to
 * the base (cancelled, failed) puts the base back to read-only, as QEMU
 * does; after the move the base is the device's image and stays
 * read-write.
 */
static void vb_commit_active_ended(void *opaque, bool pivoted)
{
    VbMirrorPivot *p = opaque;
    GError *err = NULL;

    if (!p->reopened || pivoted) {
        return;
    }
    if (!blk_reopen(p->reopened, false, &err)) {
        warn_report("block-commit: the base stays read-write: %s",
                    err->message);
        g_error_free(err);
    }
    vb_commit_sync_ro(p->s, p->reopened);
    p->reopened = NULL;
}

/* Main thread: a commit below the active node ended (block/stream.c
 * put its base back to read-only). */
static void vb_commit_ended(void *opaque)
{
    VbStreamFinish *f = opaque;

    vb_commit_sync_ro(f->s, f->base);
}

/* Main thread: @base read-write for a commit, if it is not; *@done says
 * whether it was reopened.  The error names the image. */
static bool vb_commit_reopen_base(VbState *s, BlockBackend *base,
                                  const char *name, bool *done,
                                  GError **errp)
{
    *done = false;
    if (!blk_is_read_only(base)) {
        return true;
    }
    if (!blk_reopen(base, true, errp)) {
        g_prefix_error(errp, "The base '%s' cannot be reopened read-write "
                       "for the commit: ", name);
        return false;
    }
    *done = true;
    vb_commit_sync_ro(s, base);
    return true;
}

/* Main thread: the other way, after a job that did not start. */
static void vb_commit_restore_base(VbState *s, BlockBackend *base)
{
    blk_reopen(base, false, NULL);
    vb_commit_sync_ro(s, base);
}

/*
 * Main thread: a base shorter than the top grows to the top's size
 * before the copy (QEMU does so too): its new end reads zeroes, as the
 * top reads past the end of a shorter image of its chain.  @base is
 * read-write already.  A base that cannot grow (a block device smaller
 * than the top) refuses the commit, saying what to do.
 */
static bool vb_commit_grow_base(BlockBackend *base, const char *bname,
                                BlockBackend *top, const char *tname,
                                GError **errp)
{
    uint64_t blen = blk_getlength(base), tlen = blk_getlength(top);

    if (blen >= tlen) {
        return true;
    }
    if (!blk_truncate(base, tlen, errp)) {
        g_prefix_error(errp, "The base '%s' (%" PRIu64 " bytes) is shorter "
                       "than the top '%s' (%" PRIu64 " bytes) and cannot "
                       "grow to its size, which the commit needs: ", bname,
                       blen, tname, tlen);
        return false;
    }
    /* The filters above it see the new size too. */
    blk_size_changed(base, tlen);
    return true;
}

/* @base: the base's image; @base_node its node, or NULL: an image the
 * chain opened itself (@bname: its file name), which the pivot makes a
 * node of. */
static bool vb_commit_active(VbState *s, VbNode *dev, BlockBackend *base,
                             VbNode *base_node, const char *bname,
                             const char *job_id, int64_t speed,
                             int on_error, bool auto_finalize,
                             bool auto_dismiss, GError **errp)
{
    MirrorOptions mo = { 0 };
    VbMirrorPivot *p;
    bool reopened;

    if (vb_job_uses_node(dev) || dev->snapshotting || dev->resizing) {
        vb_set_error(errp, "Node '%s' is busy: it is in use by another "
                     "block job, snapshot or resize; wait for it to end",
                     dev->name);
        return false;
    }
    if (base_node && (vb_job_uses_node(base_node) ||
                      base_node->snapshotting || base_node->resizing)) {
        vb_set_error(errp, "Node '%s' is busy: it is in use by another "
                     "block job, snapshot or resize; wait for it to end",
                     base_node->name);
        return false;
    }
    if (base_node && (base_node->user || vb_stream_nbd_user(s, base_node))) {
        vb_set_error(errp, "The base '%s' is exported: nobody may write it "
                     "while the commit does", base_node->name);
        return false;
    }
    if (!vb_commit_reopen_base(s, base, bname, &reopened, errp)) {
        return false;
    }
    if (!vb_commit_grow_base(base, bname, dev->blk, dev->name, errp)) {
        if (reopened) {
            vb_commit_restore_base(s, base);
        }
        return false;
    }
    p = g_new0(VbMirrorPivot, 1);
    p->s = s;
    p->src = dev->blk;
    p->tgt = base;
    p->reopened = reopened ? base : NULL;
    p->dev = dev;
    p->adopt = !base_node;
    mo.job_id = job_id ? job_id : dev->name;
    mo.device = dev->name;
    mo.source = dev->blk;
    mo.target = base;
    mo.sync = MIRROR_SYNC_FULL;
    mo.speed = speed;
    mo.on_source_error = on_error;
    mo.on_target_error = on_error;
    /* A hole in the base would show its own backing file. */
    mo.unmap = false;
    mo.commit = true;
    mo.auto_finalize = auto_finalize;
    mo.auto_dismiss = auto_dismiss;
    mo.quiesce = vb_mirror_quiesce;
    mo.pivot_check = vb_mirror_pivot_check;
    mo.pivot = vb_mirror_pivot;
    mo.pivot_opaque = p;
    mo.ended = vb_commit_active_ended;
    if (!mirror_start(&mo, errp)) {
        if (reopened) {
            vb_commit_restore_base(s, base);
        }
        return false;
    }
    return true;
}

/*
 * Main thread, at the pivot of an active commit whose base the chain of
 * p->dev opened itself: the export is to serve the base, so the base
 * becomes a node of its own ("#blockNNN", as QEMU names implicit nodes,
 * with its file node).  The image above it goes on reading from it: the
 * nearest node above it (the device, or a node given by name down its
 * chain) holds it, so that blockdev-del refuses the base until that one
 * is deleted, and shutdown closes that one first.
 */
static bool vb_commit_adopt_base(VbMirrorPivot *p, GError **errp)
{
    GArray *chain = vb_chain_of(p->s, p->dev);
    VbNode *holder = NULL, *n;
    BlockBackend *file;
    VbChainLink *l = NULL;
    guint bi;

    for (bi = 0; bi < chain->len; bi++) {
        l = &g_array_index(chain, VbChainLink, bi);
        if (l->blk == p->tgt) {
            break;
        }
        if (l->node) {
            holder = l->node;
        }
    }
    if (bi == chain->len || l->node || !holder || holder->backing) {
        /* The device's chain cannot change while the job runs. */
        vb_set_error(errp, "the base is not an image that the chain of "
                     "'%s' opened itself any more", p->dev->name);
        vb_chain_free(chain);
        return false;
    }
    if (!blk_release_backing(holder->blk, p->tgt, &file, errp)) {
        vb_chain_free(chain);
        return false;
    }
    n = vb_node_adopt(p->s, p->tgt, file, l->path, p->dev->discard, holder);
    vb_chain_free(chain);
    holder->backing = n;
    n->parents++;
    p->adopt = false;
    return true;
}

/*
 * block-commit of an image below the active one (QEMU's non-active
 * commit): what the top and the images below it above the base hold is
 * copied into the base, then the top's overlay names the base as its
 * backing file and the images from the top down to the base are let go.
 * A read-only base (opened by the chain, or added with read-only=on) is
 * reopened read-write for the job and read-only again when it ends, as
 * QEMU does.  An active commit (top = the device's active node) is
 * vb_commit_active()'s.
 */
static JsonNode *vb_qmp_block_commit(void *opaque, JsonObject *args,
                                     GError **errp)
{
    static const char *const qemu_on_error[] = {
        "report", "ignore", "stop", "enospc", NULL,
    };
    VbState *s = opaque;
    g_auto(QmpArgs) a = { 0 };
    const char *job_id = NULL, *device = NULL, *top_file = NULL;
    const char *top_node = NULL, *base_file = NULL, *base_node = NULL;
    const char *backing_file = NULL, *filter = NULL;
    bool mask_protocol = false;
    int on_error = 0;
    int64_t speed = 0;
    StreamOptions so = { 0 };
    VbStreamFinish *f;
    VbNode *dev;
    VbChainLink *tl, *bl, *ol;
    GArray *chain = NULL;
    guint ti = 0, bi;

    so.auto_finalize = true;
    so.auto_dismiss = true;
    so.commit = true;
    qmp_args_init(&a, args, false, NULL);
    if (!qmp_args_str(&a, "job-id", false, &job_id, errp) ||
        !qmp_args_str(&a, "device", true, &device, errp) ||
        !qmp_args_str(&a, "top", false, &top_file, errp) ||
        !qmp_args_str(&a, "top-node", false, &top_node, errp) ||
        !qmp_args_str(&a, "base", false, &base_file, errp) ||
        !qmp_args_str(&a, "base-node", false, &base_node, errp) ||
        !qmp_args_str(&a, "backing-file", false, &backing_file, errp) ||
        !qmp_args_str(&a, "filter-node-name", false, &filter, errp) ||
        !qmp_args_bool(&a, "backing-mask-protocol", &mask_protocol, errp) ||
        !qmp_args_int(&a, "speed", false, &speed, NULL, errp) ||
        !qmp_args_enum(&a, "on-error", qemu_on_error, false, &on_error,
                       errp) ||
        !qmp_args_bool(&a, "auto-finalize", &so.auto_finalize, errp) ||
        !qmp_args_bool(&a, "auto-dismiss", &so.auto_dismiss, errp) ||
        !qmp_args_check_done(&a, errp)) {
        return NULL;
    }
    if (filter) {
        vb_set_error(errp, "Parameter 'filter-node-name' is not supported: "
                     "the commit puts no filter above the top");
        return NULL;
    }
    if (top_file && top_node) {
        vb_set_error(errp, "'top' and 'top-node' cannot be specified at the "
                     "same time");
        return NULL;
    }
    dev = vb_job_chain_device(s, device, base_file, base_node, on_error,
                              speed, "committed", errp);
    if (!dev) {
        return NULL;
    }
    chain = vb_chain_of(s, dev);
    if (chain->len < 2) {
        vb_set_error(errp, "Node '%s' has no backing file: there is "
                     "nothing to commit", device);
        goto fail;
    }
    if (top_node && !vb_named_image(s, top_node)) {
        vb_set_error(errp, "Cannot find device='%s' nor node-name='%s'",
                     top_node, top_node);
        goto fail;
    }
    if (base_node && !vb_named_image(s, base_node)) {
        vb_set_error(errp, "Cannot find device='%s' nor node-name='%s'",
                     base_node, base_node);
        goto fail;
    }
    if (top_file || top_node) {
        ti = vb_chain_index(s, chain, top_node, top_file);
        if (ti == G_MAXUINT) {
            vb_set_error(errp, "Top image '%s' is not in the backing chain "
                         "of '%s'", top_node ? top_node : top_file, device);
            goto fail;
        }
    }
    if (base_file || base_node) {
        bi = vb_chain_index(s, chain, base_node, base_file);
        if (bi == G_MAXUINT) {
            vb_set_error(errp, "Can't find '%s' in the backing chain of "
                         "'%s'", base_node ? base_node : base_file, device);
            goto fail;
        }
    } else {
        bi = chain->len - 1;
    }
    if (bi <= ti) {
        vb_set_error(errp, "Base '%s' is not below the top '%s' in the "
                     "backing chain of '%s'",
                     g_array_index(chain, VbChainLink, bi).path,
                     g_array_index(chain, VbChainLink, ti).path, device);
        goto fail;
    }
    tl = &g_array_index(chain, VbChainLink, ti);
    bl = &g_array_index(chain, VbChainLink, bi);
    if (ti == 0) {
        bool ok = vb_commit_active(s, dev, bl->blk, bl->node,
                                   bl->node ? bl->node->name : bl->path,
                                   job_id, speed, on_error,
                                   so.auto_finalize, so.auto_dismiss,
                                   errp);

        vb_chain_free(chain);
        return ok ? vb_empty() : NULL;
    }
    ol = &g_array_index(chain, VbChainLink, ti - 1);
    if (!ol->node || blk_is_read_only(ol->blk)) {
        vb_set_error(errp, "The overlay of the top, '%s', is read-only: its "
                     "header could not name the base", ol->node ?
                     ol->node->name : ol->path);
        goto fail;
    }
    if (!backing_file && bl->named && !g_path_is_absolute(bl->named)) {
        /* Made relative to the image that named it, perhaps elsewhere. */
        g_autofree char *odir = g_path_get_dirname(ol->path);
        g_autofree char *pdir = g_path_get_dirname(
            g_array_index(chain, VbChainLink, bi - 1).path);

        if (strcmp(odir, pdir)) {
            backing_file = bl->path;
        }
    }
    if (!backing_file) {
        backing_file = bl->named ? bl->named : bl->path;
    }
    if (vb_job_uses_node(dev) || dev->snapshotting || dev->resizing) {
        vb_set_error(errp, "Node '%s' is busy: it is in use by another "
                     "block job, snapshot or resize; wait for it to end",
                     device);
        goto fail;
    }
    for (guint i = ti - 1; i <= bi; i++) {
        VbChainLink *l = &g_array_index(chain, VbChainLink, i);

        if (l->node && (vb_job_uses_node(l->node) || l->node->snapshotting ||
                        l->node->resizing)) {
            vb_set_error(errp, "Node '%s' of the chain is busy with a block "
                         "job, snapshot or resize: wait for it to end",
                         l->node->name);
            goto fail;
        }
    }
    if (bl->node && (bl->node->user || vb_stream_nbd_user(s, bl->node))) {
        vb_set_error(errp, "The base '%s' is exported: nobody may write it "
                     "while the commit does", bl->node->name);
        goto fail;
    }
    if (vb_stream_nbd_user(s, dev)) {
        vb_set_error(errp, "Node '%s' has NBD exports, whose reads use the "
                     "chain that block-commit changes: delete them first",
                     device);
        goto fail;
    }
    {
        const char *fmt = blk_image_format(bl->blk);
        char *mem;

        /* One block: the job g_free()s it. */
        f = g_malloc0(sizeof(*f) + strlen(backing_file) + strlen(fmt) + 2);
        mem = (char *)(f + 1);
        f->name = strcpy(mem, backing_file);
        f->fmt = strcpy(mem + strlen(backing_file) + 1, fmt);
    }
    f->s = s;
    f->top = ol->node;
    f->active = dev;
    f->base = bl->blk;
    f->base_node = bl->node;
    {
        /* Last: the other refusals leave the base alone. */
        BlockBackend *base = bl->blk;
        bool reopened;

        if (!vb_commit_reopen_base(s, base, bl->node ? bl->node->name :
                                   bl->path, &reopened, errp)) {
            g_free(f);
            goto fail;
        }
        if (!vb_commit_grow_base(base, bl->node ? bl->node->name :
                                 bl->path, tl->blk, tl->node ?
                                 tl->node->name : tl->path, errp)) {
            if (reopened) {
                vb_commit_restore_base(s, base);
            }
            g_free(f);
            goto fail;
        }
        so.base_reopened = reopened;
        so.job_id = job_id ? job_id : device;
        so.device = device;
        so.top = tl->blk;
        so.base = base;
        so.speed = speed;
        so.on_error = on_error;
        so.finish = vb_stream_finish;
        so.ended = vb_commit_ended;
        so.opaque = f;
        vb_chain_free(chain);
        if (!stream_start(&so, errp)) {
            if (reopened) {
                vb_commit_restore_base(s, base);
            }
            return NULL;
        }
        return vb_empty();
    }

fail:
    vb_chain_free(chain);
    return NULL;
}

static const QmpCommand vb_jobs_commands[] = {
    { "blockdev-mirror", vb_qmp_blockdev_mirror },
    { "block-stream", vb_qmp_block_stream },
    { "block-commit", vb_qmp_block_commit },
    { "blockdev-snapshot", NULL, vb_qmp_blockdev_snapshot },
    { "blockdev-snapshot-sync", NULL, vb_qmp_blockdev_snapshot_sync },
    { "query-jobs", vb_qmp_query_jobs },
    { "query-block-jobs", vb_qmp_query_block_jobs },
    { "job-pause", vb_qmp_job_pause },
    { "job-resume", vb_qmp_job_resume },
    { "job-cancel", vb_qmp_job_cancel },
    { "job-complete", vb_qmp_job_complete },
    { "job-finalize", vb_qmp_job_finalize },
    { "job-dismiss", vb_qmp_job_dismiss },
    { "block-job-pause", vb_qmp_block_job_pause },
    { "block-job-resume", vb_qmp_block_job_resume },
    { "block-job-cancel", vb_qmp_block_job_cancel },
    { "block-job-complete", vb_qmp_block_job_complete },
    { "block-job-finalize", vb_qmp_block_job_finalize },
    { "block-job-dismiss", vb_qmp_block_job_dismiss },
    { "block-job-set-speed", vb_qmp_block_job_set_speed },
};

void vb_jobs_register(GArray *table)
{
    g_array_append_vals(table, vb_jobs_commands,
                        G_N_ELEMENTS(vb_jobs_commands));
    vb_create_register(table);
}
