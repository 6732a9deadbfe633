/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The job core (see include/block/job.h): QEMU's job state machine and
 * verb table, the finalization sequence and the events.
 *
 * Theory of operation: a driver works with callbacks and tells the core
 * when it is ready and when it is done.  Everything after "done" is the
 * core's: the status walk waiting -> pending -> concluded (or aborting ->
 * concluded), the driver's prepare/commit/abort/clean, the events, and
 * freeing the job when it is dismissed.  A job is freed only from the
 * main loop's top level (a bottom half), never from inside a driver's
 * callback that is still using it.
 *
 * Threads: main thread only.
 */
#include "qemu/osdep.h"
#include "qemu/aio.h"
#include "block/job.h"

/* Job *, in creation order. */
static GPtrArray *jobs;
static JobEventFunc *event_fn;
static void *event_opaque;

/* QEMU's JobSTT: may a job go from [row] to [column]? */
static const bool job_stt[JOB_STATUS__MAX][JOB_STATUS__MAX] = {
    /*                          U, C, R, P, Y, S, W, D, X, E, N */
    [JOB_STATUS_UNDEFINED] = { 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
    [JOB_STATUS_CREATED]   = { 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1 },
    [JOB_STATUS_RUNNING]   = { 0, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0 },
    [JOB_STATUS_PAUSED]    = { 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0 },
    [JOB_STATUS_READY]     = { 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 0 },
    [JOB_STATUS_STANDBY]   = { 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0 },
    [JOB_STATUS_WAITING]   = { 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0 },
    [JOB_STATUS_PENDING]   = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0 },
    [JOB_STATUS_ABORTING]  = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0 },
    [JOB_STATUS_CONCLUDED] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 },
    [JOB_STATUS_NULL]      = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
};

/* QEMU's JobVerbTable: may a job in [column] take [row]? */
static const bool job_verb_table[JOB_VERB__MAX][JOB_STATUS__MAX] = {
    /*                          U, C, R, P, Y, S, W, D, X, E, N */
    [JOB_VERB_CANCEL]      = { 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0 },
    [JOB_VERB_PAUSE]       = { 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0 },
    [JOB_VERB_RESUME]      = { 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0 },
    [JOB_VERB_SET_SPEED]   = { 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0 },
    [JOB_VERB_COMPLETE]    = { 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0 },
    [JOB_VERB_FINALIZE]    = { 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0 },
    [JOB_VERB_DISMISS]     = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0 },
};

static const char *const job_status_names[JOB_STATUS__MAX] = {
    "undefined", "created", "running", "paused", "ready", "standby",
    "waiting", "pending", "aborting", "concluded", "null",
};

static const char *const job_verb_names[JOB_VERB__MAX] = {
    "cancel", "pause", "resume", "set-speed", "complete", "finalize",
    "dismiss",
};

const char *job_status_name(JobStatus s)
{
    return s < JOB_STATUS__MAX ? job_status_names[s] : "undefined";
}

const char *job_verb_name(JobVerb v)
{
    return v < JOB_VERB__MAX ? job_verb_names[v] : "?";
}

void job_set_event_handler(JobEventFunc *fn, void *opaque)
{
    event_fn = fn;
    event_opaque = opaque;
}

static void job_event(Job *job, JobEvent ev)
{
    if (event_fn) {
        event_fn(event_opaque, job, ev, NULL, JOB_ERROR_REPORT);
    }
}

static GPtrArray *job_list(void)
{
    if (!jobs) {
        jobs = g_ptr_array_new();
    }
    return jobs;
}

Job *job_get(const char *id)
{
    GPtrArray *l = job_list();

    for (guint i = 0; i < l->len; i++) {
        Job *job = g_ptr_array_index(l, i);

        if (!strcmp(job->id, id)) {
            return job;
        }
    }
    return NULL;
}

Job *job_next(Job *job)
{
    GPtrArray *l = job_list();
    guint i = 0;

    if (job) {
        if (!g_ptr_array_find(l, job, &i)) {
            return NULL;
        }
        i++;
    }
    return i < l->len ? g_ptr_array_index(l, i) : NULL;
}

static void job_state_transition(Job *job, JobStatus s)
{
    /* A bug in the core or a driver, never a user's mistake: the verbs
     * are checked before anything moves. */
    assert(job_stt[job->status][s]);
    job->status = s;
    job_event(job, JOB_EVENT_STATUS_CHANGE);
}

bool job_apply_verb(Job *job, JobVerb verb, GError **errp)
{
    if (job_verb_table[verb][job->status]) {
        return true;
    }
    g_set_error(errp, VB_ERROR, 0,
                "Job '%s' in state '%s' cannot accept command verb '%s'",
                job->id, job_status_name(job->status), job_verb_name(verb));
    return false;
}

Job *job_create(const char *id, const JobDriver *driver, void *opaque,
                const char *device, bool auto_finalize, bool auto_dismiss,
                uint64_t speed, GError **errp)
{
    Job *job;

    if (!id || !*id) {
        g_set_error(errp, VB_ERROR, 0, "Invalid job ID ''");
        return NULL;
    }
    /* QEMU's id_wellformed(): a letter, then letters, digits, -, . and _ */
    if (!g_ascii_isalpha(id[0]) ||
        strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
               "0123456789-._") != strlen(id)) {
        g_set_error(errp, VB_ERROR, 0, "Invalid job ID '%s'", id);
        return NULL;
    }
    if (job_get(id)) {
        g_set_error(errp, VB_ERROR, 0, "Job ID '%s' already in use", id);
        return NULL;
    }
    job = g_new0(Job, 1);
    job->id = g_strdup(id);
    job->driver = driver;
    job->opaque = opaque;
    job->device = g_strdup(device ? device : id);
    job->auto_finalize = auto_finalize;
    job->auto_dismiss = auto_dismiss;
    job->speed = speed;
    job->status = JOB_STATUS_UNDEFINED;
    g_ptr_array_add(job_list(), job);
    job_state_transition(job, JOB_STATUS_CREATED);
    return job;
}

void job_start(Job *job)
{
    job_state_transition(job, JOB_STATUS_RUNNING);
    job->driver->start(job);
}

bool job_should_pause(Job *job)
{
    return job->pause_count > 0 || job->cancelled || job->soft_cancelled ||
           job->completed;
}

bool job_is_ready(Job *job)
{
    return job->status == JOB_STATUS_READY ||
           job->status == JOB_STATUS_STANDBY;
}

bool job_is_paused(Job *job)
{
    return job->status == JOB_STATUS_PAUSED ||
           job->status == JOB_STATUS_STANDBY;
}

/* pause_count went from 0 to 1. */
static void job_do_pause(Job *job)
{
    if (job->status == JOB_STATUS_RUNNING) {
        job_state_transition(job, JOB_STATUS_PAUSED);
    } else if (job->status == JOB_STATUS_READY) {
        job_state_transition(job, JOB_STATUS_STANDBY);
    }
    if (job->driver->pause) {
        job->driver->pause(job);
    }
}

/* pause_count went back to 0. */
static void job_do_resume(Job *job)
{
    if (job->status == JOB_STATUS_PAUSED) {
        job_state_transition(job, JOB_STATUS_RUNNING);
        if (job->ready_seen) {
            job_state_transition(job, JOB_STATUS_READY);
            job_event(job, JOB_EVENT_READY);
        }
    } else if (job->status == JOB_STATUS_STANDBY) {
        job_state_transition(job, JOB_STATUS_READY);
    }
    if (job->driver->resume) {
        job->driver->resume(job);
    }
}

bool job_user_pause(Job *job, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_PAUSE, errp)) {
        return false;
    }
    if (job->user_paused) {
        g_set_error(errp, VB_ERROR, 0, "Job is already paused");
        return false;
    }
    job->user_paused = true;
    if (job->pause_count++ == 0) {
        job_do_pause(job);
    }
    return true;
}

bool job_user_resume(Job *job, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_RESUME, errp)) {
        return false;
    }
    if (!job->user_paused || job->pause_count == 0) {
        g_set_error(errp, VB_ERROR, 0, "Can't resume a job that was not "
                    "paused");
        return false;
    }
    job->user_paused = false;
    /* A stop on error is resumed by the same verb (QEMU: the user's
     * resume clears the pause the error took). */
    job->pause_count = 0;
    job_do_resume(job);
    return true;
}

void job_report_error(Job *job, const char *operation, JobErrorAction action)
{
    if (event_fn) {
        event_fn(event_opaque, job, JOB_EVENT_ERROR, operation, action);
    }
    if (action == JOB_ERROR_STOP && !job->user_paused) {
        job->user_paused = true;
        if (job->pause_count++ == 0) {
            job_do_pause(job);
        }
    }
}

bool job_user_cancel(Job *job, bool force, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_CANCEL, errp)) {
        return false;
    }
    if (job->status == JOB_STATUS_CREATED) {
        /* Never started: nothing of the driver's to stop. */
        job->cancelled = true;
        job_completed(job, -ECANCELED, NULL);
        return true;
    }
    if (job->completed) {
        /* Waiting or pending: its work is over, abort it. */
        job->cancelled = true;
        job->ret = -ECANCELED;
        if (job->status == JOB_STATUS_PENDING ||
            job->status == JOB_STATUS_WAITING) {
            job_completed(job, -ECANCELED, NULL);
        }
        return true;
    }
    if (!force && job_is_ready(job)) {
        job->soft_cancelled = true;
    } else {
        job->cancelled = true;
    }
    job->driver->cancel(job, force);
    return true;
}

bool job_complete(Job *job, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_COMPLETE, errp)) {
        return false;
    }
    if (job->cancelled || job->soft_cancelled || !job->driver->complete) {
        g_set_error(errp, VB_ERROR, 0, "The active block job '%s' cannot "
                    "be completed", job->id);
        return false;
    }
    return job->driver->complete(job, errp);
}

bool job_set_speed(Job *job, int64_t speed, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_SET_SPEED, errp)) {
        return false;
    }
    if (speed < 0) {
        g_set_error(errp, VB_ERROR, 0, "Parameter 'speed' expects a "
                    "non-negative value");
        return false;
    }
    job->speed = speed;
    if (job->driver->set_speed) {
        job->driver->set_speed(job, speed);
    }
    return true;
}

void job_progress_update(Job *job, uint64_t done)
{
    job->progress_current += done;
}

void job_progress_set_remaining(Job *job, uint64_t remaining)
{
    job->progress_total = job->progress_current + remaining;
}

void job_transition_to_ready(Job *job)
{
    if (job->status != JOB_STATUS_RUNNING &&
        job->status != JOB_STATUS_PAUSED) {
        return;
    }
    job->ready_seen = true;
    /* A paused job becomes ready when it resumes: QEMU's STT has no
     * paused -> ready edge, and its coroutine only gets there running. */
    if (job->status == JOB_STATUS_RUNNING) {
        job_state_transition(job, JOB_STATUS_READY);
        job_event(job, JOB_EVENT_READY);
    }
}

/* ---- the end of a job -------------------------------------------------- */

static void job_free(Job *job)
{
    g_ptr_array_remove(job_list(), job);
    if (job->driver->free) {
        job->driver->free(job);
    }
    g_free(job->id);
    g_free(job->device);
    g_free(job->err);
    g_free(job);
}

static void job_free_bh(void *opaque)
{
    job_free(opaque);
}

/* concluded -> null, and the job goes. */
static void job_do_dismiss(Job *job)
{
    job_state_transition(job, JOB_STATUS_NULL);
    /* From the top of the main loop: the caller may be a callback of the
     * driver's, or the monitor's handler holding the pointer. */
    aio_bh_schedule_oneshot(qemu_get_current_aio_context(), job_free_bh, job,
                            "job-free");
}

static void job_conclude(Job *job)
{
    job_state_transition(job, JOB_STATUS_CONCLUDED);
    if (job->auto_dismiss) {
        job_do_dismiss(job);
    }
}

/* Abort: the driver's abort and clean, the event, concluded. */
static void job_do_abort(Job *job)
{
    if (job->status != JOB_STATUS_ABORTING) {
        job_state_transition(job, JOB_STATUS_ABORTING);
    }
    if (job->driver->abort) {
        job->driver->abort(job);
    }
    if (job->driver->clean) {
        job->driver->clean(job);
    }
    job_event(job, job->cancelled ? JOB_EVENT_CANCELLED :
                                    JOB_EVENT_COMPLETED);
    job_conclude(job);
}

/* pending -> the driver's prepare and commit (or abort), concluded. */
static void job_do_finalize(Job *job)
{
    GError *err = NULL;

    if (job->driver->prepare && job->driver->prepare(job, &err) < 0) {
        job->ret = -EIO;
        g_free(job->err);
        job->err = g_strdup(err ? err->message : "finalization failed");
        g_clear_error(&err);
        job_do_abort(job);
        return;
    }
    if (job->driver->commit) {
        job->driver->commit(job);
    }
    if (job->driver->clean) {
        job->driver->clean(job);
    }
    job_event(job, JOB_EVENT_COMPLETED);
    job_conclude(job);
}

void job_completed(Job *job, int ret, char *err)
{
    job->completed = true;
    /* A paused job that ends (cancelled) runs again first, as QEMU's
     * does: its STT has no edge from paused to the end states. */
    if (job->status == JOB_STATUS_PAUSED) {
        job_state_transition(job, JOB_STATUS_RUNNING);
    } else if (job->status == JOB_STATUS_STANDBY) {
        job_state_transition(job, JOB_STATUS_READY);
    }
    if (job->cancelled) {
        ret = -ECANCELED;
    }
    if (ret < 0 && !job->ret) {
        job->ret = ret;
    }
    if (err) {
        g_free(job->err);
        job->err = err;
    } else if (ret < 0 && ret != -ECANCELED && !job->err) {
        job->err = g_strdup(g_strerror(-ret));
    }
    if (job->ret < 0) {
        job_do_abort(job);
        return;
    }
    /* QEMU goes through waiting (for the other jobs of a transaction;
     * there are no transactions here) to pending. */
    if (job->status != JOB_STATUS_WAITING) {
        job_state_transition(job, JOB_STATUS_WAITING);
    }
    job_state_transition(job, JOB_STATUS_PENDING);
    job_event(job, JOB_EVENT_PENDING);
    if (job->auto_finalize) {
        job_do_finalize(job);
    }
}

bool job_finalize(Job *job, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_FINALIZE, errp)) {
        return false;
    }
    if (job->ret < 0) {
        job_do_abort(job);
    } else {
        job_do_finalize(job);
    }
    return true;
}

bool job_dismiss(Job *job, GError **errp)
{
    if (!job_apply_verb(job, JOB_VERB_DISMISS, errp)) {
        return false;
    }
    job_do_dismiss(job);
    return true;
}

void job_cancel_all_sync(void)
{
    AioContext *ctx = qemu_get_current_aio_context();
    GPtrArray *l = job_list();
    bool busy;

    for (guint i = 0; i < l->len; i++) {
        Job *job = g_ptr_array_index(l, i);

        job->auto_finalize = true;
        job->auto_dismiss = true;
        if (job->status == JOB_STATUS_CREATED) {
            job->cancelled = true;
            job_completed(job, -ECANCELED, NULL);
        } else if (!job->completed) {
            job->cancelled = true;
            job->driver->cancel(job, true);
        }
    }
    /* The drivers finish their requests in flight from the main loop. */
    do {
        busy = false;
        for (guint i = 0; i < l->len; i++) {
            busy |= !((Job *)g_ptr_array_index(l, i))->completed;
        }
        if (busy) {
            aio_poll(ctx, true);
        }
    } while (busy);
    for (guint i = 0; i < l->len; i++) {
        Job *job = g_ptr_array_index(l, i);

        if (job->status == JOB_STATUS_PENDING) {
            job_do_finalize(job);
        }
        if (job->status == JOB_STATUS_CONCLUDED) {
            job_do_dismiss(job);
        }
    }
    /* The frees scheduled above. */
    while (l->len) {
        aio_poll(ctx, true);
    }
}
